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

/// A file or folder under `../shared/fixtures` beside the project, or `None` (with a message
/// saying the test is skipped) when it is not there. Tests that cannot run without it carry
/// `#[cfg_attr(no_shared_ours, ignore = ...)]` (or `no_shared_public`), set by build.rs where
/// `../shared/fixtures/ours` (or `public`) is absent, so that `cargo test` counts them as ignored;
/// this skip is left for a single file missing from a folder that is there.
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

/// Run the `analyze` binary with `args`.
pub fn analyze(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_analyze"))
        .args(args)
        .output()
        .expect("the analyze binary runs")
}

/// Bytes a command printed, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Check that a command exited 0, showing its stderr when it did not.
pub fn assert_success(out: &std::process::Output) {
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// A command's stdout as JSON, after checking that it exited 0 (its stderr otherwise).
pub fn json_stdout(out: &std::process::Output) -> serde_json::Value {
    assert_success(out);
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// The gzip-compressed fixture `rel` (under `fixtures/`) unpacked into `dir` as `name`.
pub fn unpacked(rel: &str, dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let mut input = flate2::read::GzDecoder::new(std::fs::File::open(fixture(rel)).unwrap());
    std::io::copy(&mut input, &mut std::fs::File::create(&path).unwrap()).unwrap();
    path
}

/// `(file, max_memory_allocated)` of each line of a `peaks.jsonl`: the allocator's own peak,
/// measured on the GPU right after the snapshot of `file` was taken.
pub fn measured_peaks(path: &Path) -> Vec<(String, u64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["file"].as_str().unwrap().to_owned(),
                v["max_memory_allocated"].as_u64().unwrap(),
            )
        })
        .collect()
}
