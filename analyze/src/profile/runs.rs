//! The profile's ops on their way to the timeline sweep, in bounded memory: each chunk of rows
//! buffers at most [`RUN_OPS`] ops; a full buffer is sorted by start and spilled as a run to one
//! temporary file, and after the scan the runs (spilled, and the buffers left in memory) are
//! merged into one stream in order of start ([`Merge`]), which the sweep reads a slab at a time
//! ([`super::sweep`]). Rows come nearly in start order, so the runs barely overlap and the merge
//! takes long stretches from one run at a time.
//!
//! The temporary file goes in the system's temporary folder, never beside the input, and is
//! unlinked as soon as it is made (where the system allows; else when dropped, or by the signal
//! handler, as every temporary file of the crate is), so that no
//! error, early return or interruption leaves it behind. A trace whose ops fit the buffers
//! writes nothing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::formats::temp_file;

use super::sweep::{Op, OP_BYTES};

/// Ops a chunk of rows holds before it spills them: 1.5 MiB.
pub(super) const RUN_OPS: usize = 1 << 16;

/// Ops read from the file at a time, for each run being merged: 24 KiB.
const READ_OPS: usize = 1 << 10;

/// The spill file, open to write and read back: a [`temp_file::TempFile`] (removed when
/// dropped, and by the signal handler), unlinked at once where the system allows.
struct TempFile {
    file: File,
    temp: temp_file::TempFile,
}

impl TempFile {
    fn new() -> Result<TempFile> {
        let (temp, file) = temp_file::TempFile::create(&std::env::temp_dir(), "ops")?;
        let _ = std::fs::remove_file(temp.path());
        Ok(TempFile { file, temp })
    }
}

/// The runs spilled so far: the file, its length, each run's (offset, ops), the first error.
#[derive(Default)]
struct Spilled {
    file: Option<TempFile>,
    end: u64,
    runs: Vec<(u64, usize)>,
    error: Option<Error>,
}

/// Where the chunks of a scan spill their full buffers of ops, side by side.
#[derive(Default)]
pub(super) struct Spill {
    spilled: Mutex<Spilled>,
}

impl Spill {
    /// Sort `ops` by start, write them as one run and empty the buffer. An error is kept for
    /// [`Spill::merge`] to return; the ops are dropped, the profile failing anyway.
    pub(super) fn put(&self, ops: &mut Vec<Op>) {
        ops.sort_unstable_by_key(|o| o.start);
        let mut bytes = Vec::with_capacity(ops.len() * OP_BYTES);
        for o in ops.iter() {
            bytes.extend_from_slice(&o.to_bytes());
        }
        let count = ops.len();
        ops.clear();
        let mut s = self.spilled.lock().unwrap_or_else(|e| e.into_inner());
        if s.error.is_some() {
            return;
        }
        if s.file.is_none() {
            match TempFile::new() {
                Ok(f) => s.file = Some(f),
                Err(e) => {
                    s.error = Some(e);
                    return;
                }
            }
        }
        let Spilled {
            file,
            end,
            runs,
            error,
        } = &mut *s;
        let f = file.as_mut().expect("made above");
        match (&f.file).write_all(&bytes) {
            Ok(()) => {
                runs.push((*end, count));
                *end += bytes.len() as u64;
            }
            Err(e) => *error = Some(Error::io(f.temp.path())(e)),
        }
    }

    /// The spilled runs and `memory`'s (each a chunk's buffer left over) merged by start.
    pub(super) fn merge(self, memory: Vec<Vec<Op>>) -> Result<Merge> {
        let s = self.spilled.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = s.error {
            return Err(e);
        }
        let mut runs: Vec<Run> = Vec::new();
        for mut ops in memory.into_iter().filter(|m| !m.is_empty()) {
            ops.sort_unstable_by_key(|o| o.start);
            runs.push(Run {
                buf: ops,
                at: 0,
                offset: 0,
                left: 0,
            });
        }
        for &(offset, left) in &s.runs {
            runs.push(Run {
                buf: Vec::new(),
                at: 0,
                offset,
                left,
            });
        }
        let mut m = Merge {
            file: s.file,
            runs,
            heap: BinaryHeap::new(),
            current: None,
            bound: i64::MIN,
        };
        for i in 0..m.runs.len() {
            if let Some(o) = m.head(i)? {
                m.heap.push(Reverse((o.start, i)));
            }
        }
        Ok(m)
    }
}

/// One run being merged: its ops read so far and the next one's place, and where its unread
/// ops lie in the file (none for a run held in memory).
struct Run {
    buf: Vec<Op>,
    at: usize,
    offset: u64,
    left: usize,
}

/// Runs of ops merged into one stream by start (equal starts in no set order: the sweep's sums
/// do not depend on it).
pub(super) struct Merge {
    file: Option<TempFile>,
    runs: Vec<Run>,
    /// The next start of each run not being drained.
    heap: BinaryHeap<Reverse<(i64, usize)>>,
    /// The run being drained, while its ops start no later than `bound`, the other runs' first.
    current: Option<usize>,
    bound: i64,
}

impl Merge {
    /// The next op of run `i`, read from the file when its buffer is spent.
    fn head(&mut self, i: usize) -> Result<Option<Op>> {
        let r = &mut self.runs[i];
        if r.at == r.buf.len() {
            if r.left == 0 {
                return Ok(None);
            }
            let Some(f) = &self.file else {
                return Ok(None);
            };
            let n = r.left.min(READ_OPS);
            let mut bytes = vec![0u8; n * OP_BYTES];
            let read = (&f.file)
                .seek(SeekFrom::Start(r.offset))
                .and_then(|_| (&f.file).read_exact(&mut bytes));
            read.map_err(Error::io(f.temp.path()))?;
            r.buf.clear();
            r.buf
                .extend(bytes.chunks_exact(OP_BYTES).map(Op::from_bytes));
            r.at = 0;
            r.offset += bytes.len() as u64;
            r.left -= n;
        }
        Ok(Some(r.buf[r.at]))
    }

    /// The next op by start, `None` after the last.
    pub(super) fn next_op(&mut self) -> Result<Option<Op>> {
        loop {
            if let Some(i) = self.current {
                match self.head(i)? {
                    Some(o) if o.start <= self.bound => {
                        self.runs[i].at += 1;
                        return Ok(Some(o));
                    }
                    Some(o) => self.heap.push(Reverse((o.start, i))),
                    None => {}
                }
                self.current = None;
            }
            let Some(Reverse((_, i))) = self.heap.pop() else {
                return Ok(None);
            };
            self.current = Some(i);
            self.bound = self.heap.peek().map_or(i64::MAX, |r| r.0 .0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ops spilled from several chunks side by side, out of order within each, and some left in
    /// memory, come back every one, by start; the temporary file is gone from the folder.
    #[test]
    fn spilled_runs_merge_by_start() {
        let mut state = 9u64;
        let mut next = move |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let spill = Spill::default();
        let mut all = Vec::new();
        let mut memory = Vec::new();
        for chunk in 0..4i64 {
            let mut buf = Vec::new();
            for i in 0..(3 * RUN_OPS as i64 + 17) {
                // Nearly in order: a few ops far from their place.
                let t = if next(50) == 0 {
                    next(1 << 40) as i64
                } else {
                    chunk * (1 << 30) + i * 100 + next(300) as i64
                };
                Op::pieces(t, t + 1 + next(90) as i64, 3, next(2) as u32, 7, 1, |o| {
                    all.push((o.start, o.end(), o.device));
                    buf.push(o);
                });
                if buf.len() >= RUN_OPS {
                    spill.put(&mut buf);
                }
            }
            memory.push(buf);
        }
        let mine = format!("analyze-{}-", std::process::id());
        let left = || {
            std::fs::read_dir(std::env::temp_dir())
                .map(|d| {
                    d.filter_map(|e| e.ok())
                        .filter(|e| {
                            let name = e.file_name().to_string_lossy().into_owned();
                            name.starts_with(&mine) && name.ends_with(".ops")
                        })
                        .count()
                })
                .unwrap_or(0)
        };
        if cfg!(unix) {
            assert_eq!(left(), 0, "the temporary file is unlinked when made");
        }
        let mut merge = spill.merge(memory).expect("merged");
        let mut got = Vec::new();
        while let Some(o) = merge.next_op().expect("read back") {
            got.push(o);
        }
        drop(merge);
        assert_eq!(left(), 0);
        assert!(got.windows(2).all(|w| w[0].start <= w[1].start));
        let mut back: Vec<(i64, i64, u32)> =
            got.iter().map(|o| (o.start, o.end(), o.device)).collect();
        back.sort_unstable();
        all.sort_unstable();
        assert_eq!(back, all);
        assert!(got
            .iter()
            .all(|o| o.step == 3 && o.pid() == 7 && o.kind() == 1));
    }
}
