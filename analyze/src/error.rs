//! Errors a user's input can cause. Each names the file and says what is wrong with it in one
//! line; the binary prints it as `error: ...` and exits 2.

use std::path::{Path, PathBuf};

/// Everything that can go wrong while reading an input file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: no such file or directory", path.display())]
    NotFound { path: PathBuf },

    #[error("{}: is a directory, expected a file", path.display())]
    IsDirectory { path: PathBuf },

    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{}: not a recognised input (expected an Nsight Systems .sqlite or .nsys-rep, a PyTorch memory snapshot pickle, or a Kineto .json trace)", path.display())]
    UnknownFormat { path: PathBuf },

    #[error("{}: not an Nsight Systems export (no nsys tables; found {})", path.display(), describe_tables(found_tables))]
    NotAnNsysExport {
        path: PathBuf,
        found_tables: Vec<String>,
    },

    #[error("{}: SQLite error: {source}", path.display())]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },

    #[error("{}: {message}", path.display())]
    NsysReport { path: PathBuf, message: String },

    #[error("{}: pickle opcode 0x{opcode:02x} at byte {offset} is not supported", path.display())]
    UnsupportedPickleOpcode {
        path: PathBuf,
        opcode: u8,
        offset: u64,
    },

    #[error("{}: pickle asks for `{name}` at byte {offset}; only plain data is read, never code", path.display())]
    PickleCode {
        path: PathBuf,
        name: String,
        offset: u64,
    },

    /// The file is of a known format but its content is broken or of an unexpected shape.
    #[error("{}: {message}", path.display())]
    Malformed { path: PathBuf, message: String },

    /// A kernel-classes file (`--classes`) that cannot be used.
    #[error("{}: kernel classes: {message}", path.display())]
    KernelClasses { path: PathBuf, message: String },

    /// A trace that lacks what a profile needs (no kernels, no CUDA API calls, ...).
    #[error("{}: nothing to profile: {message}", path.display())]
    NothingToProfile { path: PathBuf, message: String },

    /// A folder for plots that cannot be made.
    #[error("{}: cannot create the plot folder: {source}", path.display())]
    PlotFolder {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A gzip input that inflates past the limit (a gzip bomb, or a file larger than allowed).
    #[error("{}: inflates to {size}, past the limit of {limit} for {compressed} of gzip (a gzip bomb, or a larger file than expected: set {var} to a size to allow it)", path.display())]
    GzipTooLarge {
        path: PathBuf,
        size: String,
        limit: String,
        compressed: String,
        var: &'static str,
    },

    /// The temporary folder cannot hold the inflated copy of a compressed input.
    #[error("{}: inflating needs {needed} in {} but only {free} is free there (set TMPDIR to a folder with more space, or unpack the file yourself)", path.display(), dir.display())]
    NoSpace {
        path: PathBuf,
        needed: String,
        dir: PathBuf,
        free: String,
    },

    /// A load that would need more memory than the machine (or the set limit) allows.
    #[error("{}: reading it needs about {needed} of memory ({what}), more than the {budget} {}; use a shorter capture, or set ANALYZE_MEMORY_LIMIT to a size (or `off`) if the estimate is wrong", path.display(), budget_source(budget_from))]
    TooLargeForMemory {
        path: PathBuf,
        needed: String,
        what: String,
        budget: String,
        /// `available`, or the variable that set the budget.
        budget_from: &'static str,
    },

    /// An environment variable with a value that cannot be used.
    #[error("{name}={value}: {message}")]
    Setting {
        name: &'static str,
        value: String,
        message: String,
    },

    /// A `--label FILE=LABEL` whose file is not among the inputs.
    #[error("{}: --label names a file that is not among the inputs", path.display())]
    UnmatchedLabel { path: PathBuf },

    /// A device asked for (`memory --device N`) that the snapshot has no segments or trace for.
    #[error("{}: no device {device} in this snapshot (it has {})", path.display(), describe_devices(present))]
    NoSuchDevice {
        path: PathBuf,
        device: i64,
        present: Vec<i64>,
    },
}

impl Error {
    /// What turns an I/O error about `path` into [`Error::Io`], for `map_err`.
    pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
        move |source| Error::Io {
            path: path.to_owned(),
            source,
        }
    }
}

fn budget_source(source: &str) -> String {
    if source == "available" {
        "available now".to_owned()
    } else {
        format!("that {source} allows")
    }
}

fn describe_tables(tables: &[String]) -> String {
    if tables.is_empty() {
        "no tables".to_owned()
    } else if tables.len() <= 5 {
        tables.join(", ")
    } else {
        format!("{}, ... ({} tables)", tables[..5].join(", "), tables.len())
    }
}

fn describe_devices(devices: &[i64]) -> String {
    match devices {
        [] => "no device".to_owned(),
        [d] => format!("device {d}"),
        many => format!(
            "devices {}",
            many.iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
