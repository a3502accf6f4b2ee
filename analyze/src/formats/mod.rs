//! The file formats: one module per format, each reading into the shared models ([`Trace`],
//! [`Snapshot`]) and, for the formats `collect` writes, writing them too, so that what one
//! crate writes and the other reads is defined once, reader and writer side by side:
//!
//! - [`nsys_sqlite`]: Nsight Systems SQLite exports (tables, columns, ids, the `shortName` rule);
//!   `collect`'s traces are written in the same schema;
//! - [`torch_snapshot`]: PyTorch CUDA memory snapshots, over the plain-data [`pickle`] codec;
//! - [`run_metadata`]: the run's configuration and step times that `collect` stores in a trace,
//!   and [`step_times`], the summary of those times both crates compute;
//! - [`bench_results`]: the results file of `collect bench --out`;
//! - [`kineto`] (PyTorch profiler traces) and [`nsys_rep`] (`.nsys-rep` reports, through
//!   `nsys export`) are read only.
//!
//! [`load`] looks at a file's first bytes (not its name) to decide what it is, so a renamed or
//! gzip-compressed file is still read. Every reader opens its input read-only, within the
//! [`limits`] of memory, disk and inflation ([`gzip`]); temporary files are [`temp_file`]s.

pub mod bench_results;
pub mod gzip;
pub mod json_scan;
pub mod kineto;
pub mod limits;
pub mod nsys_rep;
pub mod nsys_sqlite;
pub mod pickle;
pub mod run_metadata;
pub mod sqlite_pages;
pub mod step_times;
pub mod temp_file;
pub mod torch_snapshot;

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use flate2::read::MultiGzDecoder;

use crate::error::{Error, Result};
use crate::model::snapshot::Snapshot;
use crate::model::trace::Trace;
use crate::progress;
use limits::Limits;

/// What a file turned out to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    NsysSqlite,
    /// A gzip-compressed SQLite export (`.sqlite.gz`).
    NsysSqliteGz,
    NsysRep,
    TorchSnapshot,
    Kineto,
}

/// Any loaded input.
#[derive(Debug)]
pub enum Input {
    Trace(Box<Trace>),
    Snapshot(Box<Snapshot>),
}

const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";
const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

/// Check that `path` names a readable regular file.
pub fn check_file(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::NotFound {
            path: path.to_owned(),
        }),
        Err(source) => Err(Error::io(path)(source)),
        Ok(m) if m.is_dir() => Err(Error::IsDirectory {
            path: path.to_owned(),
        }),
        Ok(_) => Ok(()),
    }
}

/// Read up to `n` bytes from the start of `r`.
fn peek(r: &mut dyn Read, n: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(n);
    r.take(n as u64).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Decide what `path` is from its content (and, for `.nsys-rep`, its name).
pub fn detect(path: &Path) -> Result<Kind> {
    check_file(path)?;
    let mut file = File::open(path).map_err(Error::io(path))?;
    let head = peek(&mut file, 64).map_err(Error::io(path))?;
    if head.starts_with(SQLITE_MAGIC) {
        return Ok(Kind::NsysSqlite);
    }
    if path
        .extension()
        .is_some_and(|e| e == "nsys-rep" || e == "qdrep")
    {
        return Ok(Kind::NsysRep);
    }
    let inner = if head.starts_with(GZIP_MAGIC) {
        let file = File::open(path).map_err(Error::io(path))?;
        let mut gz = MultiGzDecoder::new(BufReader::new(file));
        peek(&mut gz, 64).map_err(|e| Error::Malformed {
            path: path.to_owned(),
            message: format!("gzip data could not be decompressed: {e}"),
        })?
    } else {
        head
    };
    if inner.starts_with(SQLITE_MAGIC) {
        return Ok(Kind::NsysSqliteGz);
    }
    match inner.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(0x80) => Ok(Kind::TorchSnapshot),
        Some(b'{') | Some(b'[') => Ok(Kind::Kineto),
        // Protocol 0/1 pickles start with an opcode such as `(` or `}` or `]`.
        Some(b'(') | Some(b'}') | Some(b']') => Ok(Kind::TorchSnapshot),
        _ => Err(Error::UnknownFormat {
            path: path.to_owned(),
        }),
    }
}

/// The rank (and world size) the trace at `path` records of itself, where that is cheap to reach:
/// a Kineto trace's head (plain or gzip), an uncompressed export's environment. `None` for any
/// other file (a compressed export or a report would be inflated or converted first) and where
/// nothing is recorded or the file cannot be read.
pub fn recorded_rank(path: &Path) -> Option<(u32, Option<u32>)> {
    match detect(path).ok()? {
        Kind::Kineto => kineto::head::recorded_rank(path).ok().flatten(),
        Kind::NsysSqlite => nsys_sqlite::read::recorded_rank(path).ok().flatten(),
        _ => None,
    }
}

/// Peak memory of parsing a file read whole (a pickle, a bench results file) and analysing it,
/// as a multiple of its (inflated) size: 2.3 was measured for a 957 MB Kineto trace read whole.
/// Kineto traces are streamed instead, their memory measured as they are read
/// ([`kineto::load_with`]).
pub const PARSE_FACTOR: u64 = 3;

/// Read a whole file, decompressing gzip, within the limits of the environment.
pub fn read_maybe_gzip(path: &Path) -> Result<Vec<u8>> {
    read_maybe_gzip_with(path, &Limits::from_env()?)
}

/// Read a whole file, decompressing gzip, within `limits`: refused when the bytes, parsed, would
/// not fit in memory ([`PARSE_FACTOR`]) or when the gzip data inflates past its limit.
pub fn read_maybe_gzip_with(path: &Path, limits: &Limits) -> Result<Vec<u8>> {
    check_file(path)?;
    if gzip::is_gzip(path)? {
        return gzip::inflate_to_vec(path, limits, PARSE_FACTOR);
    }
    let mut file = File::open(path).map_err(Error::io(path))?;
    let size = file.metadata().map_err(Error::io(path))?.len();
    limits.check_memory(
        path,
        size.saturating_mul(PARSE_FACTOR),
        &format!(
            "{}, about {PARSE_FACTOR} times that once read",
            crate::render::cells::format_bytes(size)
        ),
    )?;
    let _task = progress::begin(
        || format!("reading {}", path.display()),
        Some(size),
        progress::Unit::Bytes,
    );
    let mut buf = Vec::with_capacity(size.min(1 << 32) as usize);
    let mut chunk = vec![0u8; 1 << 20];
    let mut counter = progress::Counter::new();
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                counter.add(n as u64);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(Error::Malformed {
                    path: path.to_owned(),
                    message: format!("could not be read: {e}"),
                })
            }
        }
    }
    Ok(buf)
}

/// Load any supported file, within the limits of the environment.
pub fn load(path: &Path) -> Result<Input> {
    load_with(path, &Limits::from_env()?)
}

/// Load any supported file within `limits`.
pub fn load_with(path: &Path, limits: &Limits) -> Result<Input> {
    let kind = detect(path)?;
    if let Some(trace) = nsys_sqlite::read::load_kind(path, kind, limits)? {
        return Ok(Input::Trace(Box::new(trace)));
    }
    if kind == Kind::Kineto {
        return Ok(Input::Trace(Box::new(kineto::load_with(path, limits)?)));
    }
    // Snapshots stream: their bytes are never held whole.
    Ok(Input::Snapshot(Box::new(torch_snapshot::read::load_with(
        path, limits,
    )?)))
}

/// Load a file that must be a GPU trace (nsys export or Kineto trace).
pub fn load_trace(path: &Path) -> Result<Trace> {
    match load(path)? {
        Input::Trace(t) => Ok(*t),
        Input::Snapshot(_) => Err(Error::Malformed {
            path: path.to_owned(),
            message: "is a memory snapshot; this command needs an Nsight Systems export or a Kineto trace (try `analyze memory`)".into(),
        }),
    }
}

/// Load a file that must be a memory snapshot.
pub fn load_snapshot(path: &Path) -> Result<Snapshot> {
    match load(path)? {
        Input::Snapshot(s) => Ok(*s),
        Input::Trace(_) => Err(Error::Malformed {
            path: path.to_owned(),
            message: "is a GPU trace, not a PyTorch memory snapshot".into(),
        }),
    }
}
