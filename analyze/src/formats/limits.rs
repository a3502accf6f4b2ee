//! The limits a load works within, so that a file too large for this machine is refused with
//! one line before it costs the machine its memory or its disk:
//!
//! - **gzip**: a compressed input inflates to at most [`Limits::max_inflated`] bytes, by default
//!   64 times its compressed size and never less than 256 MiB (real exports and traces inflate 3
//!   to 20 times; a gzip bomb inflates a thousand times), counted as it inflates, since the size
//!   in the gzip trailer is only the size modulo 4 GiB and is whatever the file says;
//! - **disk**: the inflated copy of a `.sqlite.gz` goes to [`Limits::temp_dir`] only when the
//!   free space there holds it;
//! - **memory**: before a trace or snapshot is read, the memory it will take is estimated (from
//!   row counts for an export, from the size for JSON and pickle) and compared with the memory
//!   available to this process: `MemAvailable` of `/proc/meminfo`, or the cgroup's limit less its
//!   usage when that is lower.
//!
//! [`Limits::from_env`] reads the overrides: `ANALYZE_MAX_INFLATED` (a size such as `20G`),
//! `ANALYZE_MEMORY_LIMIT` (a size, or `off` to skip the check) and `TMPDIR`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::render::cells::format_bytes;

/// A compressed input may inflate to this many times its size...
pub const INFLATE_RATIO: u64 = 64;
/// ... and always to this much.
pub const INFLATE_FLOOR: u64 = 256 << 20;

pub const MAX_INFLATED_VAR: &str = "ANALYZE_MAX_INFLATED";
pub const MEMORY_LIMIT_VAR: &str = "ANALYZE_MEMORY_LIMIT";

/// How much memory a load may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLimit {
    /// What the system has available when the load starts.
    Available,
    /// A fixed number of bytes.
    Bytes(u64),
    /// No check.
    Off,
}

/// The limits of one load.
#[derive(Clone, Debug)]
pub struct Limits {
    /// The most a gzip input may inflate to; `None`: [`INFLATE_RATIO`] times its compressed
    /// size, at least [`INFLATE_FLOOR`].
    pub max_inflated: Option<u64>,
    pub memory: MemoryLimit,
    /// Where the inflated copy of a compressed export is written.
    pub temp_dir: PathBuf,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_inflated: None,
            memory: MemoryLimit::Available,
            temp_dir: std::env::temp_dir(),
        }
    }
}

impl Limits {
    /// The defaults, with the overrides of the environment.
    pub fn from_env() -> Result<Limits> {
        let mut limits = Limits::default();
        if let Some(v) = var(MAX_INFLATED_VAR) {
            let bytes = parse_size(&v).ok_or_else(|| Error::Setting {
                name: MAX_INFLATED_VAR,
                value: v.clone(),
                message: "not a size (e.g. 20G, 512M, 1000000)".into(),
            })?;
            limits.max_inflated = Some(bytes);
        }
        if let Some(v) = var(MEMORY_LIMIT_VAR) {
            limits.memory = if v.eq_ignore_ascii_case("off") {
                MemoryLimit::Off
            } else {
                MemoryLimit::Bytes(parse_size(&v).ok_or_else(|| Error::Setting {
                    name: MEMORY_LIMIT_VAR,
                    value: v.clone(),
                    message: "not a size (e.g. 8G, 512M) or `off`".into(),
                })?)
            };
        }
        Ok(limits)
    }

    /// The most a gzip file of `compressed` bytes may inflate to.
    pub fn inflated_limit(&self, compressed: u64) -> u64 {
        self.max_inflated
            .unwrap_or_else(|| compressed.saturating_mul(INFLATE_RATIO).max(INFLATE_FLOOR))
    }

    /// The memory a load may take, and where that figure comes from (for messages); `None`
    /// when unchecked or unknown.
    pub fn memory_budget(&self) -> Option<(u64, &'static str)> {
        match self.memory {
            MemoryLimit::Off => None,
            MemoryLimit::Bytes(b) => Some((b, MEMORY_LIMIT_VAR)),
            MemoryLimit::Available => available_memory().map(|b| (b, "available")),
        }
    }

    /// Refuse to load `path` when `needed` bytes of memory (an estimate of `what` the load
    /// holds) exceed the budget.
    pub fn check_memory(&self, path: &Path, needed: u64, what: &str) -> Result<()> {
        match self.memory_budget() {
            Some((budget, source)) if needed > budget => Err(Error::TooLargeForMemory {
                path: path.to_owned(),
                needed: format_bytes(needed),
                what: what.to_owned(),
                budget: format_bytes(budget),
                budget_from: source,
            }),
            _ => Ok(()),
        }
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `123`, `64K`, `512M`, `20G`, `1T` (powers of 1024; a trailing `B` or `iB` is allowed).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let lower = s.to_ascii_lowercase();
    let t = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, shift) = match t.chars().last()? {
        'k' => (&t[..t.len() - 1], 10),
        'm' => (&t[..t.len() - 1], 20),
        'g' => (&t[..t.len() - 1], 30),
        't' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let digits = digits.trim();
    if let Ok(n) = digits.parse::<u64>() {
        return n.checked_mul(1u64 << shift);
    }
    // `1.5G`
    let f: f64 = digits.parse().ok()?;
    let v = f * (1u64 << shift) as f64;
    (f.is_finite() && f >= 0.0 && v < u64::MAX as f64).then_some(v as u64)
}

/// The memory this process can still take: the system's `MemAvailable`, or the room left under
/// its cgroup's limit when that is smaller. `None` when neither can be read (not Linux).
pub fn available_memory() -> Option<u64> {
    let system = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| meminfo_available(&m));
    let cgroup = cgroup_room();
    match (system, cgroup) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `MemAvailable:  123456 kB` in bytes.
fn meminfo_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The cgroup's memory limit less its current usage (cgroup v2, else v1); `None` without a
/// limit.
fn cgroup_room() -> Option<u64> {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let (limit, usage) = match read("/sys/fs/cgroup/memory.max") {
        Some(limit) => (limit, read("/sys/fs/cgroup/memory.current").unwrap_or(0)),
        None => (
            read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?,
            read("/sys/fs/cgroup/memory/memory.usage_in_bytes").unwrap_or(0),
        ),
    };
    // cgroup v1 writes "no limit" as a number near 2^63.
    (limit < 1 << 60).then(|| limit.saturating_sub(usage))
}

/// The free space (for an unprivileged user) of the file system holding `dir`.
pub fn free_space(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid, writable statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Have the C allocator keep blocks of 1 MiB and more in mappings of their own, unmapped when
/// freed (`analyze` calls this first). glibc raises that threshold to the size of each large
/// block freed (up to 32 MiB), after which a scan's large, short-lived lists come from the heap
/// and stay resident once freed: on a 4.4 GB export `stats --report all` was 517 MB resident for
/// 393 MB of live heap, 424 MB with the threshold fixed (`profile` 399 and 344 MB).
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: sets a parameter of the C allocator, called before any other thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_binary_units() {
        assert_eq!(parse_size("123"), Some(123));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("20G"), Some(20 << 30));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size("-1G"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }

    #[test]
    fn meminfo_gives_available_bytes() {
        let m = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   22000000 kB\n";
        assert_eq!(meminfo_available(m), Some(22_000_000 * 1024));
        assert_eq!(meminfo_available("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn the_inflation_limit_scales_with_the_compressed_size() {
        let l = Limits::default();
        assert_eq!(l.inflated_limit(1000), INFLATE_FLOOR);
        assert_eq!(l.inflated_limit(1 << 30), 64 << 30);
        let l = Limits {
            max_inflated: Some(10),
            ..Limits::default()
        };
        assert_eq!(l.inflated_limit(1 << 30), 10);
    }

    #[test]
    fn the_temp_dir_has_free_space() {
        assert!(free_space(&std::env::temp_dir()).is_some_and(|b| b > 0));
    }
}
