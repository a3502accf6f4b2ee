//! The NVTX ranges of a traced run as trace records: [`RangeLog`] keeps the ranges the model
//! opens and closes, nested per thread, and hands them over as
//! [`analyze::formats::nsys_sqlite::write::RangeRecord`]s (those still open without an end, as
//! nsys writes them); [`current_tid`] gives the system thread id CUPTI reports, so that ranges
//! and API calls join on one thread id. Times are the caller's; nothing here reads a clock.

use std::collections::HashMap;
use std::sync::Arc;

use analyze::formats::nsys_sqlite::write::{Name, RangeRecord};

/// Ranges as the model opens and closes them, per thread: push/pop nest on each thread.
#[derive(Clone, Debug, Default)]
pub struct RangeLog {
    pid: u32,
    open: HashMap<u32, Vec<(Name, i64)>>,
    done: Vec<RangeRecord>,
    names: HashMap<String, Name>,
}

impl RangeLog {
    pub fn new(pid: u32) -> RangeLog {
        RangeLog {
            pid,
            ..RangeLog::default()
        }
    }

    /// Open a range on thread `tid` at `time_ns`.
    pub fn push(&mut self, name: &str, time_ns: i64, tid: u32) {
        let name = match self.names.get(name) {
            Some(n) => n.clone(),
            None => {
                let n: Name = Arc::from(name);
                self.names.insert(name.to_owned(), n.clone());
                n
            }
        };
        self.open.entry(tid).or_default().push((name, time_ns));
    }

    /// Close the innermost open range of thread `tid` at `time_ns`; false when none is open.
    pub fn pop(&mut self, time_ns: i64, tid: u32) -> bool {
        let Some((name, start)) = self.open.get_mut(&tid).and_then(|s| s.pop()) else {
            return false;
        };
        self.done.push(RangeRecord {
            start,
            end: Some(time_ns),
            name,
            pid: self.pid,
            tid,
        });
        true
    }

    /// Every range, those still open with no end, sorted by start.
    pub fn finish(mut self) -> Vec<RangeRecord> {
        for (tid, stack) in self.open {
            for (name, start) in stack {
                self.done.push(RangeRecord {
                    start,
                    end: None,
                    name,
                    pid: self.pid,
                    tid,
                });
            }
        }
        self.done.sort_by_key(|r| r.start);
        self.done
    }
}

/// The calling thread's system id (what `gettid` returns and CUPTI reports with
/// `CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM`); the process id where it cannot be read.
pub fn current_tid() -> u32 {
    thread_local! {
        static TID: u32 = read_tid();
    }
    TID.with(|t| *t)
}

fn read_tid() -> u32 {
    // `/proc/thread-self` links to `<pid>/task/<tid>`.
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or_else(std::process::id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_nest_per_thread() {
        let mut r = RangeLog::new(7);
        r.push("step_0", 0, 1);
        r.push("forward", 1, 1);
        r.push("other", 2, 2);
        assert!(r.pop(5, 1));
        r.push("backward", 6, 1);
        assert!(r.pop(9, 1));
        assert!(r.pop(10, 1));
        assert!(!r.pop(11, 1));
        let done = r.finish();
        let got: Vec<_> = done
            .iter()
            .map(|r| (&*r.name, r.start, r.end, r.tid))
            .collect();
        assert_eq!(
            got,
            [
                ("step_0", 0, Some(10), 1),
                ("forward", 1, Some(5), 1),
                ("other", 2, None, 2),
                ("backward", 6, Some(9), 1),
            ]
        );
    }

    #[test]
    fn current_tid_is_stable_per_thread() {
        let main = current_tid();
        assert_eq!(main, current_tid());
        let other = std::thread::spawn(current_tid).join().unwrap();
        assert_ne!(main, other);
    }
}
