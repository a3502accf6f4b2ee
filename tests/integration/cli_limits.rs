//! `analyze` against inputs too large for its limits: gzip bombs, exports and traces too large
//! for the memory allowed, bad settings of the limits, and Ctrl-C in the middle of a load. Each
//! refusal is one `error:` line with exit status 2 and leaves no temporary file; Ctrl-C exits
//! with 130 and leaves none either. Progress bars show on a terminal only.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use flate2::write::GzEncoder;
use flate2::Compression;
use rusqlite::Connection;

use crate::common;

fn analyze(tmp: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_analyze"));
    cmd.env("RUST_BACKTRACE", "1")
        .env("TMPDIR", tmp)
        .env_remove("ANALYZE_MEMORY_LIMIT")
        .env_remove("ANALYZE_MAX_INFLATED");
    cmd
}

fn one_error_line(out: &Output, problem: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    assert!(lines[0].starts_with("error: "), "{stderr}");
    assert!(lines[0].contains(problem), "{stderr}");
    stderr
}

fn empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).unwrap().next().is_none()
}

fn gzip(path: &Path, parts: &[&[u8]], zeros: usize) {
    let mut e = GzEncoder::new(std::fs::File::create(path).unwrap(), Compression::fast());
    for p in parts {
        e.write_all(p).unwrap();
    }
    let block = vec![0u8; 1 << 20];
    for _ in 0..zeros >> 20 {
        e.write_all(&block).unwrap();
    }
    e.finish().unwrap();
}

/// An export with `kernels` kernel rows and `calls` API rows, made with recursive CTEs.
fn synthetic_export(path: &Path, kernels: u64, calls: u64) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = OFF;
         CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
         INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel'), (2, 'gemm_kernel'), (3, 'gemm');
         CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER,
           streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
           shortName INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER,
           blockY INTEGER, blockZ INTEGER);
         CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, globalTid INTEGER,
           correlationId INTEGER, nameId INTEGER);
         WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {kernels})
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL
           SELECT i * 1000 + 10, i * 1000 + 500, 0, 7, i, 281474993487872, 2, 3, 1, 1, 1, 1, 1, 1
           FROM c;
         WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < {calls})
         INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME
           SELECT i * 1000, i * 1000 + 5, 281474993487873, i, 1 FROM c;"
    ))
    .unwrap();
}

#[test]
fn a_gzip_bomb_is_refused_in_one_line_and_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let sqlite_bomb = dir.path().join("bomb.sqlite.gz");
    gzip(&sqlite_bomb, &[b"SQLite format 3\0"], 8 << 20);
    let json_bomb = dir.path().join("bomb.json.gz");
    gzip(&json_bomb, &[b"{\"traceEvents\": ["], 8 << 20);
    let pickle_bomb = dir.path().join("bomb.pickle.gz");
    gzip(&pickle_bomb, &[b"\x80\x04"], 8 << 20);
    for (command, file) in [
        ("stats", &sqlite_bomb),
        ("profile", &json_bomb),
        ("memory", &pickle_bomb),
    ] {
        let out = analyze(&tmp)
            .env("ANALYZE_MAX_INFLATED", "1M")
            .arg(command)
            .arg(file)
            .output()
            .unwrap();
        let line = one_error_line(&out, "inflates to more than 1.0 MiB");
        assert!(line.contains("ANALYZE_MAX_INFLATED"), "{line}");
        assert!(empty(&tmp), "{command}: a temporary file was left");
    }
    // Under the limit the same file is read (and refused for what it holds, not its size).
    let out = analyze(&tmp)
        .env("ANALYZE_MAX_INFLATED", "64M")
        .args(["stats"])
        .arg(&sqlite_bomb)
        .output()
        .unwrap();
    one_error_line(&out, "damaged or truncated");
    assert!(empty(&tmp));
}

#[test]
fn an_export_too_large_for_the_memory_allowed_is_refused_with_the_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("big.sqlite");
    synthetic_export(&export, 100_000, 100_000);
    let out = analyze(dir.path())
        .env("ANALYZE_MEMORY_LIMIT", "4M")
        .args(["stats", "--report", "cuda_gpu_kern_sum"])
        .arg(&export)
        .output()
        .unwrap();
    let line = one_error_line(&out, "100,000 kernels, 100,000 CUDA API calls");
    assert!(
        line.contains("more than the 4.0 MiB that ANALYZE_MEMORY_LIMIT allows"),
        "{line}"
    );
    assert!(out.stdout.is_empty());
    // The same export within a larger limit, or with the check off, is read.
    for limit in ["1G", "off"] {
        let out = analyze(dir.path())
            .env("ANALYZE_MEMORY_LIMIT", limit)
            .args(["stats", "--report", "cuda_gpu_kern_sum", "--format", "csv"])
            .arg(&export)
            .output()
            .unwrap();
        common::assert_success(&out);
        let csv = String::from_utf8_lossy(&out.stdout);
        assert!(csv.contains(",100000,"), "{csv}");
    }
}

#[test]
fn a_json_trace_too_large_for_the_memory_allowed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("big.json");
    let event =
        r#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 1},"#;
    let body = event.repeat(20_000);
    std::fs::write(&trace, format!("{{\"traceEvents\": [{body} {{}}]}}")).unwrap();
    let out = analyze(dir.path())
        .env("ANALYZE_MEMORY_LIMIT", "1M")
        .arg("profile")
        .arg(&trace)
        .output()
        .unwrap();
    one_error_line(&out, "that ANALYZE_MEMORY_LIMIT allows");
    let gz = dir.path().join("big.json.gz");
    gzip(&gz, &[std::fs::read(&trace).unwrap().as_slice()], 0);
    let out = analyze(dir.path())
        .env("ANALYZE_MEMORY_LIMIT", "1M")
        .arg("profile")
        .arg(&gz)
        .output()
        .unwrap();
    one_error_line(&out, "that ANALYZE_MEMORY_LIMIT allows");
}

#[test]
fn limits_that_are_not_sizes_are_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("small.sqlite");
    synthetic_export(&export, 10, 10);
    for (var, problem) in [
        (
            "ANALYZE_MEMORY_LIMIT",
            "ANALYZE_MEMORY_LIMIT=lots: not a size",
        ),
        (
            "ANALYZE_MAX_INFLATED",
            "ANALYZE_MAX_INFLATED=lots: not a size",
        ),
    ] {
        let out = analyze(dir.path())
            .env(var, "lots")
            .arg("stats")
            .arg(&export)
            .output()
            .unwrap();
        one_error_line(&out, problem);
    }
}

/// Wait for a file to appear in `dir` (the inflated copy), at most `limit`.
fn wait_for_file(dir: &Path, limit: Duration) -> Option<PathBuf> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if let Some(e) = std::fs::read_dir(dir).unwrap().flatten().next() {
            return Some(e.path());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

#[test]
fn ctrl_c_while_reading_a_compressed_export_removes_the_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let export = dir.path().join("big.sqlite");
    synthetic_export(&export, 1_000_000, 1_000_000);
    let gz = dir.path().join("big.sqlite.gz");
    {
        let mut e = GzEncoder::new(std::fs::File::create(&gz).unwrap(), Compression::fast());
        e.write_all(&std::fs::read(&export).unwrap()).unwrap();
        e.finish().unwrap();
    }
    let mut child = analyze(&tmp)
        .args(["stats", "--report", "all"])
        .arg(&gz)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let inflated = wait_for_file(&tmp, Duration::from_secs(30));
    assert!(inflated.is_some(), "no temporary file appeared");
    std::thread::sleep(Duration::from_millis(300));
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    if status.success() {
        eprintln!("skipped: the load ended before Ctrl-C arrived");
    } else {
        assert_eq!(status.code(), Some(130), "{status}");
    }
    assert!(empty(&tmp), "the inflated copy was left behind");
}

#[test]
fn progress_shows_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("big.sqlite");
    synthetic_export(&export, 1_000_000, 1_500_000);
    let bin = env!("CARGO_BIN_EXE_analyze");
    // stderr a pipe: nothing but the results.
    let out = analyze(dir.path())
        .args(["stats", "--report", "cuda_api_sum"])
        .arg(&export)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // stderr a terminal (through `script`): a bar once the load has run for a second.
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: no `script` to give the command a terminal");
        return;
    }
    let t = Instant::now();
    let shown = Command::new("script")
        .args(["-qec"])
        .arg(format!(
            "{bin} stats --report cuda_api_sum {} >/dev/null",
            export.display()
        ))
        .arg("/dev/null")
        .env("TMPDIR", dir.path())
        .output()
        .unwrap();
    let terminal = String::from_utf8_lossy(&shown.stdout);
    if t.elapsed() < Duration::from_millis(2500) {
        eprintln!("skipped: the load took under two seconds, too quick for a bar");
        return;
    }
    assert!(
        terminal.contains("rows"),
        "no progress bar on the terminal: {terminal:?}"
    );
}
