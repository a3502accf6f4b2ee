//! Temporary files (the inflated copy of a `.sqlite.gz`, which SQLite must read from disk) and
//! folders (an export being written, renamed into place once whole), removed on every way out:
//! when dropped (success, error, panic), and on Ctrl-C or a termination signal, where the
//! binary's signal handler calls [`remove_all`] before it exits. Every live temporary file and
//! folder is listed in one registry for that purpose.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};

static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A file in a temporary folder, removed when dropped.
#[derive(Debug)]
pub struct TempFile {
    path: PathBuf,
}

impl TempFile {
    /// Create a new, empty file in `dir` named `analyze-PID-N.EXT` (never an existing file, nor
    /// through a planted link) and register it for removal.
    pub fn create(dir: &Path, ext: &str) -> Result<(TempFile, std::fs::File)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "analyze-{}-{}.{ext}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        // Registered before it exists, so a signal between the two leaves nothing behind.
        lock().push(path.clone());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path);
        let temp = TempFile { path };
        match file {
            Ok(f) => Ok((temp, f)),
            Err(source) => Err(Error::io(&temp.path)(source)),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        lock().retain(|p| p != &self.path);
    }
}

/// A folder being filled, removed with everything in it when dropped unless kept.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl TempDir {
    /// Create the new, empty folder `path` (never an existing one) and register it for removal.
    pub fn create(path: &Path) -> Result<TempDir> {
        lock().push(path.to_owned());
        let dir = TempDir {
            path: path.to_owned(),
            keep: false,
        };
        match std::fs::create_dir(path) {
            Ok(()) => Ok(dir),
            Err(source) => {
                // Not ours: never removed.
                let mut dir = dir;
                dir.keep = true;
                lock().retain(|p| p != path);
                Err(Error::io(path)(source))
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rename the folder to `to` and keep it.
    pub fn persist(mut self, to: &Path) -> Result<()> {
        std::fs::rename(&self.path, to).map_err(Error::io(to))?;
        self.keep = true;
        lock().retain(|p| p != &self.path);
        Ok(())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
            lock().retain(|p| p != &self.path);
        }
    }
}

fn lock() -> std::sync::MutexGuard<'static, Vec<PathBuf>> {
    // A panic while the list was held leaves it usable: it is only a list of paths.
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Remove every temporary file and folder still alive; for a signal handler, just before the
/// process exits.
pub fn remove_all() {
    for p in lock().drain(..) {
        if p.is_dir() {
            let _ = std::fs::remove_dir_all(p);
        } else {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// How many temporary files are alive now.
pub fn live() -> usize {
    lock().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_temp_file_is_gone_and_unregistered() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = TempFile::create(dir.path(), "sqlite").unwrap();
        let path = a.path().to_owned();
        assert!(path.exists() && lock().contains(&path));
        drop(a);
        assert!(!path.exists() && !lock().contains(&path));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_temp_dir_is_removed_whole_unless_persisted() {
        let dir = tempfile::tempdir().unwrap();
        let t = TempDir::create(&dir.path().join(".out.tmp")).unwrap();
        std::fs::write(t.path().join("x"), "x").unwrap();
        drop(t);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let t = TempDir::create(&dir.path().join(".out.tmp")).unwrap();
        t.persist(&dir.path().join("out")).unwrap();
        assert!(dir.path().join("out").is_dir());
        assert!(!lock().contains(&dir.path().join(".out.tmp")));
        // An existing folder is not taken over, and never removed.
        assert!(TempDir::create(&dir.path().join("out")).is_err());
        assert!(dir.path().join("out").is_dir());
    }
}
