//! Helpers shared by the integration tests: where fixtures are, and skipping politely when the
//! shared fixtures beside the project are absent.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The workspace root (the root package's own folder).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_owned()
}

/// A file under the project's own `fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    root().join("fixtures").join(rel)
}

/// A folder under `../shared/fixtures` beside the project, or `None` (with a message saying the
/// test is skipped) when it is not there.
pub fn shared(rel: &str) -> Option<PathBuf> {
    let p = root().join("../shared/fixtures").join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!(
            "skipped: {} not found (the shared fixtures are not beside this checkout)",
            p.display()
        );
        None
    }
}
