//! The loop that drives every fuzz test of the suite: a numbered sequence of cases, each made
//! from its own seeded random stream, so that one case is reproduced alone from its number.
//!
//! A case writes its input into a scratch folder and reads it back through a parser (and the
//! analyses behind it). It must end in one of two ways: the input is loaded, or it is refused
//! with one error line that names the file. A panic, an error of several lines, or a case that
//! runs past the hang limit fails the test; the input is copied to `target/fuzz-failures/` and
//! the line to reproduce it is printed.
//!
//! The hang limit is counted in work, not in waiting: a case hangs once, while it ran, the process
//! has spent the limit in CPU time for each worker thread (the cases side by side share it), and
//! at least as long has passed. A campaign runs at the lowest priority beside other builds, where
//! a case of a fraction of a second's work can wait many seconds for a core; counted on the wall
//! clock alone, that wait read as a hang. A case that waits without working (a deadlock) is a
//! hang once [`WAIT_FACTOR`] times the limit has passed. A hang names and keeps the cases running
//! beside it too: the case at fault may be one of them, holding the memory or the cores the first
//! waits for.
//!
//! Environment:
//! - `FUZZ_CASES`: cases per fuzz test (each test has a small default, so the suite stays fast);
//! - `FUZZ_SEED`: the seed of the campaign (default 1);
//! - `FUZZ_FIRST`: the number of the first case (default 0), to split a campaign or replay one
//!   case (`FUZZ_FIRST=N FUZZ_CASES=1`);
//! - `FUZZ_THREADS`: worker threads (default 1);
//! - `FUZZ_HANG_SECS`: the limit a case may run, in seconds of CPU time per worker (default 60:
//!   the suite's unoptimised build runs a case many times slower than `scripts/bench/fuzz.sh`'s,
//!   which sets 10, and beside other tests);
//! - `FUZZ_MEMORY_GIB`: the most memory the process may hold resident, in GiB (default none: in
//!   the suite other tests share the process; `scripts/bench/fuzz.sh` sets 8). Past it, the cases
//!   running are failures, as for a hang.
//!
//! A test builds its base inputs before calling [`Campaign::run`], so that the first cases are
//! not timed building them. Each test ends by printing one `fuzz NAME: ...` line with its counts
//! and the slowest case's number; `scripts/bench/fuzz.sh` adds them up.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A small, fast, seedable random stream (SplitMix64): plenty for choosing mutations, and the
/// same sequence on every machine.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, case: u64) -> Rng {
        let mut r = Rng(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// An index into a collection of `len` items (0 when empty).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// True once in `n` draws.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    pub fn byte(&mut self) -> u8 {
        self.next_u64() as u8
    }

    /// Between `min` and `max` random bytes.
    pub fn bytes(&mut self, min: usize, max: usize) -> Vec<u8> {
        let n = min + self.index(max.saturating_sub(min) + 1);
        (0..n).map(|_| self.byte()).collect()
    }

    /// An integer of a size that tends to break code: 0, ±1, the extremes of the integer types,
    /// powers of two and their neighbours, or any 64-bit value.
    pub fn edgy_i64(&mut self) -> i64 {
        match self.below(10) {
            0 => *self.pick(&[0, 1, -1, 2, -2]),
            1 => *self.pick(&[i64::MIN, i64::MAX, i64::MIN + 1, i64::MAX - 1]),
            2 => *self.pick(&[
                i32::MIN as i64,
                i32::MAX as i64,
                u32::MAX as i64,
                u32::MAX as i64 + 1,
                u16::MAX as i64 + 1,
                -(u32::MAX as i64),
            ]),
            3 => {
                let p = 1i64 << self.below(63);
                p + *self.pick(&[-1, 0, 1])
            }
            4 => -(1i64 << self.below(63)),
            5 => self.below(100) as i64,
            _ => self.next_u64() as i64,
        }
    }
}

/// How a case ended when it did not fail.
pub enum Outcome {
    /// The input was read (and analysed).
    Loaded,
    /// The input was refused with this error message (which must be one line).
    Refused(String),
}

/// A case that waits without working is a hang after this many times the limit.
const WAIT_FACTOR: u32 = 10;

/// What a worker runs now: the case, when it began on the wall clock and in the process's CPU
/// time, its scratch folder.
#[derive(Clone)]
struct Started {
    case: u64,
    wall: Instant,
    cpu: Option<Duration>,
    scratch: PathBuf,
}

/// What each worker runs now.
type Running = Mutex<Vec<Option<Started>>>;

/// Counts of one campaign.
#[derive(Default)]
struct Counts {
    loaded: AtomicU64,
    refused: AtomicU64,
    /// The slowest case, on the wall clock: (milliseconds, case).
    slowest: Mutex<(u64, u64)>,
}

/// The CPU time the process has used, all threads together (user and system), from
/// `/proc/self/stat`; `None` where there is no such file, and the hang limit is then counted on
/// the wall clock alone.
fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces; utime and
    // stime are the 14th and 15th fields of the line, in ticks of 1/100 s (USER_HZ).
    let mut fields = stat
        .get(stat.rfind(')')? + 1..)?
        .split_whitespace()
        .skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The bytes the process holds resident, from `/proc/self/status`; `None` where there is no such
/// file.
fn process_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

/// One fuzz test's settings, read from the environment.
pub struct Campaign {
    pub name: &'static str,
    pub seed: u64,
    pub first: u64,
    pub cases: u64,
    pub threads: usize,
    pub hang: Duration,
    /// The most bytes the process may hold resident, if limited.
    pub memory: Option<u64>,
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl Campaign {
    /// The campaign `name`, with `default_cases` unless `FUZZ_CASES` says otherwise.
    pub fn from_env(name: &'static str, default_cases: u64) -> Campaign {
        Campaign {
            name,
            seed: env_u64("FUZZ_SEED").unwrap_or(1),
            first: env_u64("FUZZ_FIRST").unwrap_or(0),
            cases: env_u64("FUZZ_CASES").unwrap_or(default_cases),
            threads: env_u64("FUZZ_THREADS").unwrap_or(1).max(1) as usize,
            hang: Duration::from_secs(env_u64("FUZZ_HANG_SECS").unwrap_or(60)),
            memory: env_u64("FUZZ_MEMORY_GIB").map(|g| g << 30),
        }
    }

    /// Run every case: `case(rng, scratch)` writes its input under `scratch` and reads it.
    /// Panics (failing the test) after the campaign if any case failed.
    pub fn run<F>(&self, case: F)
    where
        F: Fn(&mut Rng, &Path) -> Outcome + Sync,
    {
        quiet_panics_in_cases();
        let counts = Counts::default();
        let next = AtomicU64::new(self.first);
        let end = self.first.saturating_add(self.cases);
        let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
        let done = AtomicBool::new(false);
        // What each worker is running: (case, start), watched for hangs.
        let running: Arc<Running> = Arc::new(Mutex::new(vec![None; self.threads]));
        let started = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| self.watch(&running, &done));
            let mut workers = Vec::new();
            for w in 0..self.threads {
                let (next, counts, failures, running, case) =
                    (&next, &counts, &failures, &running, &case);
                workers.push(s.spawn(move || {
                    let scratch = scratch_dir(self.name, w);
                    IN_CASE.set(true);
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= end {
                            break;
                        }
                        clear(&scratch);
                        let t = Instant::now();
                        running.lock().unwrap()[w] = Some(Started {
                            case: n,
                            wall: t,
                            cpu: process_cpu(),
                            scratch: scratch.clone(),
                        });
                        let mut rng = Rng::new(self.seed, n);
                        let result = catch_unwind(AssertUnwindSafe(|| case(&mut rng, &scratch)));
                        let ms = t.elapsed().as_millis() as u64;
                        {
                            let mut slowest = counts.slowest.lock().unwrap();
                            if ms > slowest.0 {
                                *slowest = (ms, n);
                            }
                        }
                        running.lock().unwrap()[w] = None;
                        let failure = match result {
                            Ok(Outcome::Loaded) => {
                                counts.loaded.fetch_add(1, Ordering::Relaxed);
                                None
                            }
                            Ok(Outcome::Refused(msg)) if msg.contains('\n') || msg.is_empty() => {
                                Some(format!("a refusal that is not one line: {msg:?}"))
                            }
                            Ok(Outcome::Refused(_)) => {
                                counts.refused.fetch_add(1, Ordering::Relaxed);
                                None
                            }
                            Err(panic) => Some(format!(
                                "panic: {} at {}",
                                panic_text(&panic),
                                PANIC_AT.take().unwrap_or_default()
                            )),
                        };
                        if let Some(what) = failure {
                            let saved = self.save(n, &scratch);
                            failures.lock().unwrap().push(format!(
                                "case {n}: {what} (input kept in {}; replay with {})",
                                saved.display(),
                                self.replay(n)
                            ));
                        }
                    }
                    let _ = std::fs::remove_dir_all(&scratch);
                }));
            }
            for w in workers {
                let _ = w.join();
            }
            done.store(true, Ordering::Relaxed);
        });
        let failures = failures.into_inner().unwrap();
        let (loaded, refused) = (counts.loaded.into_inner(), counts.refused.into_inner());
        let (slowest_ms, slowest_case) = counts.slowest.into_inner().unwrap();
        eprintln!(
            "fuzz {}: {} inputs (seed {}, cases {}..{}): {loaded} loaded, {refused} refused with one error line, {} failed; slowest case {slowest_ms} ms (case {slowest_case}); {:.1} s",
            self.name,
            loaded + refused + failures.len() as u64,
            self.seed,
            self.first,
            end,
            failures.len(),
            started.elapsed().as_secs_f64(),
        );
        assert!(
            failures.is_empty(),
            "fuzz {}: {} failing cases:\n{}",
            self.name,
            failures.len(),
            failures.join("\n")
        );
    }

    fn replay(&self, case: u64) -> String {
        format!(
            "FUZZ_SEED={} FUZZ_FIRST={case} FUZZ_CASES=1 cargo test --release --test integration fuzz_{}::",
            self.seed, self.name
        )
    }

    /// Copy a failing case's input to `target/fuzz-failures/NAME-SEED-CASE/`.
    fn save(&self, case: u64, scratch: &Path) -> PathBuf {
        let dest = crate::common::root()
            .join("target/fuzz-failures")
            .join(format!("{}-{}-{case}", self.name, self.seed));
        let _ = std::fs::create_dir_all(&dest);
        if let Ok(entries) = std::fs::read_dir(scratch) {
            for e in entries.flatten() {
                let _ = std::fs::copy(e.path(), dest.join(e.file_name()));
            }
        }
        dest
    }

    /// Whether a case that began at `started` has hung: since then the process has worked the
    /// hang limit for each worker (CPU time of all its threads, the parsers' thread pool too),
    /// and as long has passed; or it has waited [`WAIT_FACTOR`] times the limit. Two cases of 5 s
    /// each side by side are not a hang of 10 s.
    fn hung(&self, started: &Started, cpu_now: Option<Duration>) -> bool {
        let wall = started.wall.elapsed();
        let worked = match (started.cpu, cpu_now) {
            (Some(then), Some(now)) => now.saturating_sub(then) / self.threads as u32,
            _ => wall,
        };
        (wall > self.hang && worked > self.hang) || wall > self.hang * WAIT_FACTOR
    }

    /// Abort the whole process when a case runs past the hang limit, or the process past the
    /// memory limit: a hung parser cannot be interrupted from outside, the campaign must not wait
    /// forever, and a case that grows without bound must fail before the machine runs out.
    fn watch(&self, running: &Running, done: &AtomicBool) {
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let cpu_now = process_cpu();
            let now: Vec<Started> = running.lock().unwrap().iter().flatten().cloned().collect();
            let worked = |s: &Started| match (s.cpu, cpu_now) {
                (Some(then), Some(now)) => {
                    format!(
                        "{:.1} s of the process's CPU time, ",
                        now.saturating_sub(then).as_secs_f64()
                    )
                }
                _ => String::new(),
            };
            let clock = |s: &Started| {
                format!(
                    "{}{:.1} s on the clock",
                    worked(s),
                    s.wall.elapsed().as_secs_f64()
                )
            };
            let rss = process_rss().filter(|&r| self.memory.is_some_and(|m| r > m));
            let (first, what) = if let Some(hung) = now.iter().find(|s| self.hung(s, cpu_now)) {
                let what = format!(
                    "ran past {} s ({}): a hang",
                    self.hang.as_secs(),
                    clock(hung)
                );
                (hung, what)
            } else if let (Some(rss), Some(oldest)) = (rss, now.iter().min_by_key(|s| s.wall)) {
                let what = format!(
                    "was running when the process grew to {} MiB, past the limit of {} MiB ({})",
                    rss >> 20,
                    self.memory.unwrap_or(0) >> 20,
                    clock(oldest)
                );
                (oldest, what)
            } else {
                continue;
            };
            // Straight to stderr: the test harness's capture would be lost with the process.
            let _ = writeln!(
                std::io::stderr(),
                "fuzz {}: case {} {what} (input kept in {}; replay with {})",
                self.name,
                first.case,
                self.save(first.case, &first.scratch).display(),
                self.replay(first.case)
            );
            // The cases beside it: the one at fault may be one of them, holding the cores or the
            // memory the first waits for.
            for s in now.iter().filter(|s| s.case != first.case) {
                let _ = writeln!(
                    std::io::stderr(),
                    "fuzz {}: case {} was running beside it ({}; input kept in {}; replay with {})",
                    self.name,
                    s.case,
                    clock(s),
                    self.save(s.case, &s.scratch).display(),
                    self.replay(s.case)
                );
            }
            std::process::abort();
        }
    }
}

thread_local! {
    /// Whether this thread runs fuzz cases, whose panics are caught and reported.
    static IN_CASE: Cell<bool> = const { Cell::new(false) };
    /// Where the last panic of a case happened.
    static PANIC_AT: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A panic hook that notes where a case panicked instead of printing it; panics elsewhere (the
/// rest of the suite) print as usual.
fn quiet_panics_in_cases() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let usual = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_CASE.get() {
                let mut at = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                // A panic inside the standard library (an overflowing `sum()`) is told by the
                // project's frame that called it.
                if !at.starts_with("analyze/") {
                    let trace = std::backtrace::Backtrace::force_capture().to_string();
                    if let Some(frame) = trace.lines().find(|l| l.contains("analyze/src/")) {
                        at = format!("{at}, called from {}", frame.trim());
                    }
                }
                PANIC_AT.set(Some(at));
            } else {
                usual(info);
            }
        }));
    });
}

fn scratch_dir(name: &str, worker: usize) -> PathBuf {
    // tmpfs when there is one: cases write and read many small files.
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_owned()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!(
        "analyze-fuzz-{}-{name}-{worker}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("a scratch folder for the fuzz inputs");
    dir
}

fn clear(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_owned()
    }
}

/// The outcome of a library call: loaded, or refused with its message, which must name `path`.
pub fn outcome<T>(path: &Path, result: analyze::Result<T>) -> Outcome {
    match result {
        Ok(_) => Outcome::Loaded,
        Err(e) => {
            let msg = analyze::cli::error_line(&e);
            let shown = path.display().to_string();
            if !msg.contains(&shown) {
                return Outcome::Refused(format!("error does not name the file:\n{msg}"));
            }
            Outcome::Refused(msg)
        }
    }
}
