//! Gzip-compressed inputs, inflated within [`Limits`]: as a stream for Kineto traces and memory
//! snapshots ([`InflatedStream`]), into memory for the rest, into a temporary file for SQLite
//! exports (SQLite reads files, not streams).
//!
//! Concatenated members are read as one stream, as `gzip -d` does. The inflated size is counted
//! as it comes and the read stops at the limit (a gzip bomb is refused after reading no more
//! than the limit); the size the trailer states (of the last member, modulo 4 GiB) only serves
//! to refuse early a file that cannot fit, since it is the file's word and not a measure. A
//! temporary file is made only when the free space of its folder holds the expected size, and is
//! removed on every way out ([`TempFile`]).

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use super::limits::{free_space, Limits, MAX_INFLATED_VAR};
use super::temp_file::TempFile;
use crate::error::{Error, Result};
use crate::progress;
use crate::render::cells::format_bytes;

const MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Whether `path` starts with the gzip magic bytes.
pub fn is_gzip(path: &Path) -> Result<bool> {
    let mut head = [0u8; 2];
    let mut f = File::open(path).map_err(Error::io(path))?;
    match f.read_exact(&mut head) {
        Ok(()) => Ok(head == MAGIC),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(Error::io(path)(e)),
    }
}

/// The inflated size the file leads one to expect: the smallest size that is at least the
/// compressed size and agrees with the trailer's size modulo 4 GiB. Only a hint.
fn expected_size(file: &mut File, compressed: u64) -> Option<u64> {
    if compressed < 18 {
        return None;
    }
    file.seek(SeekFrom::End(-4)).ok()?;
    let mut isize = [0u8; 4];
    file.read_exact(&mut isize).ok()?;
    file.seek(SeekFrom::Start(0)).ok()?;
    let isize = u64::from(u32::from_le_bytes(isize));
    let wraps = compressed.saturating_sub(isize).div_ceil(1 << 32);
    Some(isize + wraps * (1 << 32))
}

/// Why inflation stops, as the error it gives.
enum Stop {
    /// Past the gzip limit (`bound` bytes) for a file of `compressed` bytes.
    Bomb { bound: u64, compressed: u64 },
    /// Past the free space of the temporary folder.
    Space { bound: u64, dir: std::path::PathBuf },
    /// Past the memory the load may take (the inflated bytes times `factor`).
    Memory {
        bound: u64,
        factor: u64,
        budget: u64,
        source: &'static str,
    },
}

impl Stop {
    fn bound(&self) -> u64 {
        match self {
            Stop::Bomb { bound, .. } | Stop::Space { bound, .. } | Stop::Memory { bound, .. } => {
                *bound
            }
        }
    }

    fn error(&self, path: &Path, needed: Option<u64>) -> Error {
        let at_least = |n: Option<u64>, bound: u64| match n {
            Some(n) if n > bound => format_bytes(n),
            _ => format!("more than {}", format_bytes(bound)),
        };
        match self {
            Stop::Bomb { bound, compressed } => Error::GzipTooLarge {
                path: path.to_owned(),
                size: at_least(needed, *bound),
                limit: format_bytes(*bound),
                compressed: format_bytes(*compressed),
                var: MAX_INFLATED_VAR,
            },
            Stop::Space { bound, dir } => Error::NoSpace {
                path: path.to_owned(),
                needed: at_least(needed, *bound),
                dir: dir.clone(),
                free: format_bytes(*bound),
            },
            Stop::Memory {
                bound,
                factor,
                budget,
                source,
            } => Error::TooLargeForMemory {
                path: path.to_owned(),
                needed: format_bytes(needed.unwrap_or(*bound).saturating_mul(*factor)),
                what: format!(
                    "{} inflated, about {factor} times that once read",
                    at_least(needed, *bound)
                ),
                budget: format_bytes(*budget),
                budget_from: source,
            },
        }
    }
}

/// The tightest of the limits that apply, with a refusal before anything is inflated when the
/// trailer already says the file cannot fit.
fn plan(
    path: &Path,
    file: &mut File,
    limits: &Limits,
    mut extra: Vec<Stop>,
) -> Result<(Stop, Option<u64>)> {
    let compressed = file.metadata().map_err(Error::io(path))?.len();
    let expected = expected_size(file, compressed);
    extra.push(Stop::Bomb {
        bound: limits.inflated_limit(compressed),
        compressed,
    });
    let tightest = extra
        .into_iter()
        .min_by_key(Stop::bound)
        .expect("at least the gzip limit");
    // Space and memory are refused early on the trailer's word; the gzip limit only on what is
    // counted, since a damaged trailer must not make a good file look like a bomb.
    if let Some(n) = expected.filter(|&n| n > tightest.bound()) {
        if !matches!(tightest, Stop::Bomb { .. }) {
            return Err(tightest.error(path, Some(n)));
        }
    }
    Ok((tightest, expected))
}

/// Counts compressed bytes read, for progress.
struct Counted<R> {
    inner: R,
    task: progress::Counter,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.task.add(n as u64);
        Ok(n)
    }
}

/// Inflate `file` into `out`, stopping at `stop`. Returns the inflated size.
fn inflate(
    path: &Path,
    file: File,
    stop: Stop,
    out: &mut dyn Write,
    out_dir: Option<&Path>,
) -> Result<u64> {
    let mut gz = InflatedStream::new(path, file, stop, "inflating");
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = gz.read_checked(&mut buf)?;
        if n == 0 {
            return Ok(gz.total);
        }
        out.write_all(&buf[..n])
            .map_err(|e| write_error(path, out_dir, gz.total, e))?;
    }
}

/// Damaged gzip data, as the error to show.
fn damaged(path: &Path, e: &std::io::Error) -> Error {
    Error::Malformed {
        path: path.to_owned(),
        message: format!("gzip data could not be decompressed: {e}"),
    }
}

/// A failed write of the inflated copy: the disk filled up (said as such), or another error.
fn write_error(path: &Path, dir: Option<&Path>, written: u64, e: std::io::Error) -> Error {
    match (e.raw_os_error(), dir) {
        (Some(libc::ENOSPC), Some(dir)) => Stop::Space {
            bound: written,
            dir: dir.to_owned(),
        }
        .error(path, None),
        _ => Error::io(dir.unwrap_or(path))(e),
    }
}

/// Inflate a gzip file into memory. `factor`: how many times the inflated size the load will
/// hold once the bytes are parsed, for the memory check.
pub fn inflate_to_vec(path: &Path, limits: &Limits, factor: u64) -> Result<Vec<u8>> {
    let mut file = File::open(path).map_err(Error::io(path))?;
    let mut stops = Vec::new();
    if let Some((budget, source)) = limits.memory_budget() {
        stops.push(Stop::Memory {
            bound: budget / factor.max(1),
            factor,
            budget,
            source,
        });
    }
    let (stop, expected) = plan(path, &mut file, limits, stops)?;
    // The trailer's size, when it is within the limit, spares the copies of a growing buffer.
    let capacity = expected.filter(|&n| n <= stop.bound()).unwrap_or(0);
    let mut out = Vec::with_capacity(capacity.min(1 << 32) as usize);
    inflate(path, file, stop, &mut out, None)?;
    Ok(out)
}

/// A gzip file's inflated bytes as a stream, for readers that hold what they read rather than
/// the bytes (memory snapshots). Within the gzip limit, counted as the bytes come out (a damaged
/// trailer must not make a good file look like a bomb): the read fails once more than the limit
/// has come out. A reader that stops early on bytes it cannot use asks
/// [`InflatedStream::error_after`] for the error to show, which reads the rest first, so that a
/// bomb is named as one whichever byte the reader stopped at.
pub struct InflatedStream {
    gz: MultiGzDecoder<Counted<BufReader<File>>>,
    stop: Stop,
    total: u64,
    path: std::path::PathBuf,
    error: Option<Error>,
    _task: progress::Task,
}

/// Open a gzip file as a stream of its inflated bytes, within `limits`' gzip limit.
pub fn inflate_stream(path: &Path, limits: &Limits) -> Result<InflatedStream> {
    let mut file = File::open(path).map_err(Error::io(path))?;
    let (stop, _) = plan(path, &mut file, limits, Vec::new())?;
    Ok(InflatedStream::new(path, file, stop, "reading"))
}

impl InflatedStream {
    /// `file`'s inflated bytes up to `stop`, with a progress bar of the compressed bytes read
    /// ("`verb` PATH").
    fn new(path: &Path, file: File, stop: Stop, verb: &'static str) -> InflatedStream {
        let compressed = file.metadata().map(|m| m.len()).ok();
        let task = progress::begin(
            || format!("{verb} {}", path.display()),
            compressed,
            progress::Unit::Bytes,
        );
        let counted = Counted {
            inner: BufReader::with_capacity(1 << 16, file),
            task: progress::Counter::new(),
        };
        InflatedStream {
            gz: MultiGzDecoder::new(counted),
            stop,
            total: 0,
            path: path.to_owned(),
            error: None,
            _task: task,
        }
    }

    /// The error to show for a read that failed with `e`: the stream's own (the limit, or
    /// damaged gzip data) where it failed, or fails when the rest is read and thrown away, as a
    /// file inflated whole before it is read would have failed; else `e`.
    pub fn error_after(&mut self, e: Error) -> Error {
        if self.error.is_none() {
            let _ = std::io::copy(self, &mut std::io::sink());
        }
        self.error.take().unwrap_or(e)
    }

    /// Inflate into `buf`: the count, 0 at the end of the data; past the limit or on damaged
    /// data, the error to show.
    pub fn read_checked(&mut self, buf: &mut [u8]) -> Result<usize> {
        loop {
            match Read::read(self, buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.error.take().unwrap_or_else(|| damaged(&self.path, &e))),
            }
        }
    }
}

impl Read for InflatedStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = match self.gz.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Err(e),
            Err(e) => {
                self.error = Some(damaged(&self.path, &e));
                return Err(e);
            }
        };
        self.total += n as u64;
        if self.total > self.stop.bound() {
            self.error = Some(self.stop.error(&self.path, None));
            return Err(std::io::Error::other("past the gzip limit"));
        }
        Ok(n)
    }
}

/// Inflate a gzip file into a new temporary file in [`Limits::temp_dir`], named `*.ext`.
pub fn inflate_to_temp(path: &Path, limits: &Limits, ext: &str) -> Result<TempFile> {
    let mut file = File::open(path).map_err(Error::io(path))?;
    let dir = &limits.temp_dir;
    let mut stops = Vec::new();
    if let Some(free) = free_space(dir) {
        stops.push(Stop::Space {
            bound: free,
            dir: dir.clone(),
        });
    }
    let (stop, _) = plan(path, &mut file, limits, stops)?;
    let (temp, out) = TempFile::create(dir, ext)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, out);
    let written = inflate(path, file, stop, &mut out, Some(dir))?;
    out.flush()
        .map_err(|e| write_error(path, Some(dir), written, e))?;
    Ok(temp)
}
