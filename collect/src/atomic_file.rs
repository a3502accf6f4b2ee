//! Writing an output file atomically: the bytes go to a temporary file in the same folder, which
//! is then renamed over the target, so a reader never sees half a file and an interrupted run
//! leaves the old file in place.

use std::path::Path;

use crate::error::{Error, Result};

/// Write `bytes` to `path` atomically ([`analyze::atomic_file`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    analyze::atomic_file::write(path, bytes).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.json");
        std::fs::write(&p, "old").unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        assert!(write_atomic(&dir.path().join("missing/x.json"), b"x").is_err());
    }
}
