//! Tells the tests what this machine lacks, so that `cargo test` lists the tests that need it as
//! ignored, with the reason, instead of counting them as passed. It sets the cfg flags
//!
//! - `no_gpu` where no NVIDIA driver is found (no `/dev/nvidiactl`, or no `libcuda.so.1`);
//!   `GPU_TESTS=1` at build time turns the GPU tests on whatever is found (a test binary built
//!   here and run on a GPU machine), `GPU_TESTS=0` turns them off;
//! - `no_shared_ours` and `no_shared_public` where `../shared/fixtures/ours` or
//!   `../shared/fixtures/public`, the larger real fixtures kept beside the checkout, are absent;
//! - `no_duckdb` where `python3` (or `$PYTHON`) cannot import DuckDB (`pip install duckdb`),
//!   which the tests of `docs/sql/` run the queries with; installed later, `touch build.rs`.
//!
//! It only looks at the file system and asks Python one question: the binaries are built the
//! same either way.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(no_gpu)");
    println!("cargo::rustc-check-cfg=cfg(no_shared_ours)");
    println!("cargo::rustc-check-cfg=cfg(no_shared_public)");
    println!("cargo::rustc-check-cfg=cfg(no_duckdb)");
    println!("cargo::rerun-if-env-changed=PYTHON");
    if !duckdb_found() {
        println!("cargo::rustc-cfg=no_duckdb");
    }
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=GPU_TESTS");
    println!("cargo::rerun-if-env-changed=LD_LIBRARY_PATH");

    let gpu = match env::var("GPU_TESTS").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => nvidia_driver_found(),
    };
    if !gpu {
        println!("cargo::rustc-cfg=no_gpu");
    }

    let root = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let shared = root.join("..").join("shared");
    let fixtures = shared.join("fixtures");
    let mut watched = Vec::new();
    for (part, flag) in [("ours", "no_shared_ours"), ("public", "no_shared_public")] {
        let dir = fixtures.join(part);
        if !dir.is_dir() {
            println!("cargo::rustc-cfg={flag}");
        }
        // Only paths that exist are watched: cargo reruns a build script on every build while a
        // watched path is missing, and that would rebuild the package each time. Watching the
        // nearest folder that exists notices the fixtures arriving; where `../shared` itself is
        // absent, `touch build.rs` after putting it there.
        let existing = [&dir, &fixtures, &shared]
            .into_iter()
            .find(|p| p.exists())
            .cloned();
        if let Some(existing) = existing.filter(|p| !watched.contains(p)) {
            println!("cargo::rerun-if-changed={}", existing.display());
            watched.push(existing);
        }
    }
}

/// Whether Python imports DuckDB; when it does, its package folder is watched (a removal or an
/// upgrade reruns this).
fn duckdb_found() -> bool {
    let python = env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import duckdb, os; print(os.path.dirname(duckdb.__file__))",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let dir = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            if Path::new(&dir).is_dir() {
                println!("cargo::rerun-if-changed={dir}");
            }
            true
        }
        _ => false,
    }
}

/// The device node of the NVIDIA driver and the driver's CUDA library, as cudarc loads it.
fn nvidia_driver_found() -> bool {
    let device = ["/dev/nvidiactl", "/dev/dxg"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists());
    if let Some(device) = device {
        println!("cargo::rerun-if-changed={}", device.display());
    }
    device.is_some() && libcuda_found()
}

fn libcuda_found() -> bool {
    const NAME: &str = "libcuda.so.1";
    let mut dirs: Vec<PathBuf> = env::var_os("LD_LIBRARY_PATH")
        .map(|v| env::split_paths(&v).collect())
        .unwrap_or_default();
    dirs.extend(
        [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/aarch64-linux-gnu",
            "/usr/lib64",
            "/usr/lib",
            "/usr/lib/wsl/lib",
        ]
        .map(PathBuf::from),
    );
    if dirs.iter().any(|d| d.join(NAME).exists()) {
        return true;
    }
    // The dynamic loader's cache names every library it would find.
    std::fs::read("/etc/ld.so.cache")
        .is_ok_and(|cache| cache.windows(NAME.len()).any(|w| w == NAME.as_bytes()))
}
