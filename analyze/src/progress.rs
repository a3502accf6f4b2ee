//! Progress of long work (inflating, reading rows, reading the files of a report), reported to
//! whoever installed a [`Reporter`]: the `analyze` binary draws bars on a terminal, and a library
//! user or a test that installs nothing pays one atomic load per batch of rows.
//!
//! Work is a stack of [`Task`]s (a report's files, and inside it the file being read); counts go
//! to the innermost one. Loops count with a [`Counter`], which hands its count over in batches so
//! that the two threads reading an export do not contend for every row.

use std::sync::OnceLock;

/// What a task counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    Rows,
    Files,
}

/// Receives progress; implementations must be cheap in [`Reporter::advance`].
pub trait Reporter: Send + Sync {
    /// A task starts, nested in the one running (if any); `total` when known.
    fn begin(&self, label: String, total: Option<u64>, unit: Unit);
    /// `n` more units of the innermost task are done.
    fn advance(&self, n: u64);
    /// The innermost task is over.
    fn end(&self);
}

static REPORTER: OnceLock<Box<dyn Reporter>> = OnceLock::new();

/// Send progress to `reporter` from now on; false if one was installed already.
pub fn install(reporter: Box<dyn Reporter>) -> bool {
    REPORTER.set(reporter).is_ok()
}

/// A running task; it ends when dropped.
#[must_use = "the task ends when this is dropped"]
pub struct Task {
    active: bool,
}

/// Start a task. `label` is only called when a reporter listens.
pub fn begin(label: impl FnOnce() -> String, total: Option<u64>, unit: Unit) -> Task {
    match REPORTER.get() {
        Some(r) => {
            r.begin(label(), total, unit);
            Task { active: true }
        }
        None => Task { active: false },
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        if self.active {
            if let Some(r) = REPORTER.get() {
                r.end();
            }
        }
    }
}

/// `n` more units of the innermost task are done.
pub fn advance(n: u64) {
    if let Some(r) = REPORTER.get() {
        r.advance(n);
    }
}

/// Counts units in a loop and reports them in batches.
#[derive(Default)]
pub struct Counter {
    pending: u64,
}

impl Counter {
    const BATCH: u64 = 1 << 16;

    pub fn new() -> Counter {
        Counter::default()
    }

    #[inline]
    pub fn add(&mut self, n: u64) {
        self.pending += n;
        if self.pending >= Self::BATCH {
            advance(std::mem::take(&mut self.pending));
        }
    }
}

impl Drop for Counter {
    fn drop(&mut self) {
        if self.pending > 0 {
            advance(self.pending);
        }
    }
}
