//! `analyze stats` on input it cannot use: one `error:` line on stderr naming the file and the
//! problem, exit status 2, no panic or backtrace; and never a change to the input file, nor a
//! file made beside it (an export in WAL mode included). Also odd values the commands must
//! take in their stride (a run with 0 heads), and the `.nsys-rep` path, with stand-in `nsys`
//! scripts that "export" by copying a real export.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

const SMALL: &str = "nsys/torch_small_ctx128_fwd_fp32.sqlite.gz";

fn analyze() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_analyze"));
    // A backtrace would show if anything panicked; the tests check that none does.
    cmd.env("RUST_BACKTRACE", "1");
    cmd
}

fn stats(file: &Path, report: &str) -> Output {
    analyze()
        .args(["stats", "--format", "csv", "--report", report])
        .arg(file)
        .output()
        .unwrap()
}

/// The run failed with exit status 2 and exactly one `error:` line naming `file` and containing
/// `problem`.
fn assert_one_line_error(out: &Output, file: &Path, problem: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {stderr}");
    let line = lines[0];
    assert!(line.starts_with("error: "), "{line}");
    assert!(line.contains(&file.display().to_string()), "{line}");
    assert!(line.contains(problem), "{line}");
    assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"));
}

/// Bytes and modification time of a file.
fn snapshot(path: &Path) -> (Vec<u8>, SystemTime) {
    let meta = std::fs::metadata(path).unwrap();
    (std::fs::read(path).unwrap(), meta.modified().unwrap())
}

/// The names in a directory, to see that no journal or other file appeared beside the input.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// An uncompressed copy of a bundled export in `dir`.
fn unpacked_export(dir: &Path, name: &str) -> PathBuf {
    let bytes = analyze::formats::read_maybe_gzip(&common::fixture(SMALL)).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn not_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.sqlite");
    std::fs::write(&path, "these are notes, not a database\n").unwrap();
    let before = snapshot(&path);
    assert_one_line_error(&stats(&path, "nvtx_sum"), &path, "not a recognised input");
    assert_eq!(snapshot(&path), before);
}

#[test]
fn sqlite_file_that_is_not_an_nsys_export() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inventory.sqlite");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE items (id INTEGER, name TEXT); INSERT INTO items VALUES (1, 'bolt');",
    )
    .unwrap();
    drop(conn);
    let before = snapshot(&path);
    let out = stats(&path, "cuda_gpu_kern_sum");
    assert_one_line_error(&out, &path, "not an Nsight Systems export");
    assert!(String::from_utf8_lossy(&out.stderr).contains("found items"));
    assert_eq!(snapshot(&path), before);
    assert_eq!(listing(dir.path()), ["inventory.sqlite"]);
}

#[test]
fn truncated_export() {
    let dir = tempfile::tempdir().unwrap();
    let full = unpacked_export(dir.path(), "full.sqlite");
    let bytes = std::fs::read(&full).unwrap();
    // Cut inside the data: the header and schema survive, the tables do not.
    let path = dir.path().join("truncated.sqlite");
    std::fs::write(&path, &bytes[..bytes.len() / 3]).unwrap();
    let before = snapshot(&path);
    assert_one_line_error(
        &stats(&path, "cuda_gpu_kern_sum"),
        &path,
        "the SQLite file is damaged or truncated",
    );
    assert_eq!(snapshot(&path), before);
}

#[test]
fn truncated_gzip_export() {
    let dir = tempfile::tempdir().unwrap();
    let gz = std::fs::read(common::fixture(SMALL)).unwrap();
    let path = dir.path().join("cut.sqlite.gz");
    std::fs::write(&path, &gz[..gz.len() / 2]).unwrap();
    let before = snapshot(&path);
    assert_one_line_error(&stats(&path, "nvtx_sum"), &path, "gzip data could not be");
    assert_eq!(snapshot(&path), before);
}

#[test]
fn missing_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nowhere.sqlite");
    assert_one_line_error(
        &stats(&path, "nvtx_sum"),
        &path,
        "no such file or directory",
    );
}

#[test]
fn directory() {
    let dir = tempfile::tempdir().unwrap();
    assert_one_line_error(&stats(dir.path(), "nvtx_sum"), dir.path(), "is a directory");
}

#[test]
fn unknown_report_name() {
    let path = common::fixture(SMALL);
    let out = stats(&path, "cuda_gpu_kernel_sum");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: unknown report `cuda_gpu_kernel_sum` (expected one of: "),
        "{stderr}"
    );
}

/// A real export, plain and gzip-compressed, read for every report: not a byte of it nor its
/// modification time changes, and nothing appears beside it (no journal, no WAL).
#[test]
fn real_exports_are_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let plain = unpacked_export(dir.path(), "run.sqlite");
    let gz = dir.path().join("run2.sqlite.gz");
    std::fs::copy(common::fixture(SMALL), &gz).unwrap();
    // An old modification time, so that a rewrite in the same second would still show.
    let old = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000);
    for p in [&plain, &gz] {
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let before = [snapshot(&plain), snapshot(&gz)];
    let names = listing(dir.path());
    for p in [&plain, &gz] {
        let out = stats(p, "all");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty());
    }
    assert_eq!([snapshot(&plain), snapshot(&gz)], before);
    assert_eq!(before[0].1, old);
    assert_eq!(listing(dir.path()), names);
}

/// A `collect` trace whose `RUN_METADATA` says `heads = 0`: `stats` read it, `profile`,
/// `compare` and `report` divided by the head count and panicked. A count of 0 is unknown.
#[test]
fn run_with_zero_heads_is_profiled() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::unpacked(
        "collect/collect_small_ctx128_train_fp32.sqlite.gz",
        dir.path(),
        "zero_heads.sqlite",
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    let changed = conn
        .execute(
            "UPDATE RUN_METADATA SET value = '0' WHERE name = 'heads'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let out_dir = dir.path().join("report");
    let p = path.to_str().unwrap();
    for args in [
        vec!["profile", p],
        vec!["compare", p, p],
        vec!["report", "--out", out_dir.to_str().unwrap(), p],
    ] {
        let out = analyze().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// A damaged schema whose table name holds a whole multi-line `CREATE TABLE` (as a shifted
/// record of `sqlite_master` does): SQLite's message quotes it, the refusal stays one line.
#[test]
fn damaged_schema_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = unpacked_export(dir.path(), "schema.sqlite");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "PRAGMA writable_schema = ON; \
         UPDATE sqlite_master SET name = sql || char(10) || char(27) || '[31m' \
         WHERE name = 'StringIds';",
    )
    .unwrap();
    drop(conn);
    let out = stats(&path, "nvtx_sum");
    assert_one_line_error(&out, &path, "damaged");
    let line = String::from_utf8_lossy(&out.stderr);
    assert!(line.contains("CREATE TABLE StringIds (\\n"), "{line}");
    assert!(!line.contains('\u{1b}'), "{line}");
    assert!(line.len() < 400, "{} characters: {line}", line.len());
}

/// A pickle that asks for a global named by ~900 bytes of junk, control characters included:
/// the refusal quotes the start of it, escaped, on one line.
#[test]
fn damaged_pickle_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("junk.pickle");
    let mut bytes = b"\x80\x02c".to_vec();
    for _ in 0..100 {
        bytes.extend_from_slice(b"os\x01\x1b[31m\r\t");
    }
    bytes.extend_from_slice(b"\nsystem\n.");
    std::fs::write(&path, &bytes).unwrap();
    let out = analyze().arg("memory").arg(&path).output().unwrap();
    assert_one_line_error(&out, &path, "only plain data is read");
    let line = String::from_utf8_lossy(&out.stderr);
    assert!(line.contains("os\\u{1}\\u{1b}[31m\\r\\t"), "{line}");
    assert!(!line.contains('\u{1b}') && !line.contains('\r'), "{line}");
    assert!(line.len() < 400, "{} characters: {line}", line.len());
}

/// Files in `dir` with their bytes and modification times.
fn contents(dir: &Path) -> Vec<(String, Vec<u8>, SystemTime)> {
    listing(dir)
        .into_iter()
        .map(|name| {
            let (bytes, mtime) = snapshot(&dir.join(&name));
            (name, bytes, mtime)
        })
        .collect()
}

/// An export whose header says WAL mode, plain and gzip-compressed, read by every command that
/// reads exports (`stats`, `profile`, `profile --device`, `compare`, `report`): SQLite makes no
/// `-wal` or `-shm` beside it (nor beside the inflated copy in the temporary folder, which is
/// empty afterwards), and no byte or time of the input changes.
#[test]
fn wal_export_leaves_no_files_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("inputs");
    let tmp = dir.path().join("tmp");
    std::fs::create_dir_all(&inputs).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let plain = unpacked_export(&inputs, "wal.sqlite");
    let conn = rusqlite::Connection::open(&plain).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    drop(conn);
    let bytes = std::fs::read(&plain).unwrap();
    assert_eq!(bytes[18..20], [2, 2], "the header says WAL");
    let gz = inputs.join("wal2.sqlite.gz");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, &bytes).unwrap();
    std::fs::write(&gz, enc.finish().unwrap()).unwrap();
    let before = contents(&inputs);
    assert_eq!(listing(&inputs), ["wal.sqlite", "wal2.sqlite.gz"]);
    let report = dir.path().join("report");
    let (plain_s, gz_s) = (plain.to_str().unwrap(), gz.to_str().unwrap());
    let mut runs: Vec<Vec<&str>> = Vec::new();
    for p in [plain_s, gz_s] {
        runs.push(vec!["stats", "--report", "all", p]);
        runs.push(vec!["profile", p]);
        runs.push(vec!["profile", "--device", "0", p]);
    }
    runs.push(vec!["compare", plain_s, gz_s]);
    runs.push(vec![
        "report",
        "-o",
        report.to_str().unwrap(),
        inputs.to_str().unwrap(),
    ]);
    for args in runs {
        let p = Path::new(args[args.len() - 1]);
        let out = analyze().args(&args).env("TMPDIR", &tmp).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?} {}: {stderr}",
            p.display()
        );
        if args[0] == "report" {
            assert!(report.join("report.md").is_file());
        } else {
            assert!(!out.stdout.is_empty(), "{args:?}");
        }
        assert!(listing(&tmp).is_empty(), "{args:?}: {:?}", listing(&tmp));
    }
    assert!(contents(&inputs) == before, "{:?}", listing(&inputs));
}

// ---- .nsys-rep ----

/// A stand-in `nsys` that "exports" a report by copying `export` to the `-o` path, and logs its
/// arguments to `log`.
fn stand_in_nsys(path: &Path, export: &Path, log: &Path) {
    let script = format!(
        "#!/bin/sh\n\
         PATH=/usr/bin:/bin\n\
         echo \"$@\" >> '{log}'\n\
         out=''\n\
         while [ $# -gt 0 ]; do\n\
         \x20 case \"$1\" in -o) out=\"$2\"; shift 2 ;; *) shift ;; esac\n\
         done\n\
         cp '{export}' \"$out\"\n",
        log = log.display(),
        export = export.display()
    );
    write_script(path, &script);
}

/// An executable shell script at `path`.
fn write_script(path: &Path, script: &str) {
    std::fs::write(path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A `.nsys-rep` (its content is never read by us) and the golden CSV the export behind it gives.
fn report_fixture(dir: &Path) -> (PathBuf, String) {
    let rep = dir.join("capture.nsys-rep");
    std::fs::write(&rep, b"stand-in for a binary Nsight Systems report").unwrap();
    let golden = std::fs::read_to_string(common::fixture(
        "nsys/stats/torch_small_ctx128_fwd_fp32_cuda_gpu_kern_sum.csv",
    ))
    .unwrap();
    (rep, golden)
}

/// `stats --report cuda_gpu_kern_sum` as CSV of the report `rep`, with `PATH` set to `path` and
/// `NSYS` to `nsys` (unset when `None`): it succeeds, and this is what it prints.
fn exported_kern_sum(rep: &Path, path: &str, nsys: Option<&Path>) -> String {
    let mut cmd = analyze();
    cmd.args(["stats", "--format", "csv", "--report", "cuda_gpu_kern_sum"])
        .arg(rep)
        .env("PATH", path);
    match nsys {
        Some(tool) => cmd.env("NSYS", tool),
        None => cmd.env_remove("NSYS"),
    };
    let out = cmd.output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn nsys_rep_exported_by_nsys_on_path() {
    let dir = tempfile::tempdir().unwrap();
    let export = unpacked_export(dir.path(), "source-export.sqlite");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = dir.path().join("nsys.log");
    stand_in_nsys(&bin.join("nsys"), &export, &log);
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let (rep, golden) = report_fixture(&work);
    let rep_before = snapshot(&rep);

    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    assert_eq!(exported_kern_sum(&rep, &path, None), golden);
    let args = std::fs::read_to_string(&log).unwrap();
    assert!(args.starts_with("export --type sqlite"), "{args}");
    assert!(args.contains(&rep.display().to_string()), "{args}");
    assert!(work.join("capture.sqlite").is_file());
    assert_eq!(snapshot(&rep), rep_before);

    // The export now beside the report is newer than it and is used without running nsys.
    std::fs::remove_file(&log).unwrap();
    assert_eq!(exported_kern_sum(&rep, "", None), golden);
    assert!(!log.exists(), "nsys ran although the export was up to date");
}

#[test]
fn nsys_rep_exported_by_nsys_named_in_env() {
    let dir = tempfile::tempdir().unwrap();
    let export = unpacked_export(dir.path(), "source-export.sqlite");
    let log = dir.path().join("nsys.log");
    let tool = dir.path().join("my-nsys-2025.3");
    stand_in_nsys(&tool, &export, &log);
    let (rep, golden) = report_fixture(dir.path());

    assert_eq!(exported_kern_sum(&rep, "", Some(&tool)), golden);
    assert!(std::fs::read_to_string(&log)
        .unwrap()
        .starts_with("export --type sqlite"));
}

#[test]
fn nsys_rep_without_nsys_says_which_command_to_run() {
    let dir = tempfile::tempdir().unwrap();
    let (rep, _) = report_fixture(dir.path());
    let empty = dir.path().join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    let out = analyze()
        .args(["stats", "--report", "nvtx_sum"])
        .arg(&rep)
        .env("PATH", &empty)
        .env_remove("NSYS")
        .output()
        .unwrap();
    assert_one_line_error(&out, &rep, "run: nsys export --type sqlite -o ");
    assert!(String::from_utf8_lossy(&out.stderr).contains("capture.sqlite"));
}

#[test]
fn nsys_rep_whose_export_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (rep, _) = report_fixture(dir.path());
    let tool = dir.path().join("broken-nsys");
    write_script(&tool, "#!/bin/sh\necho 'cannot open report' >&2\nexit 1\n");
    let out = analyze()
        .args(["stats", "--report", "nvtx_sum"])
        .arg(&rep)
        .env("NSYS", &tool)
        .output()
        .unwrap();
    assert_one_line_error(&out, &rep, "cannot open report");
}

/// A whole number below zero is refused by both binaries in one line, with a sentence saying
/// what is expected (not taken for an unknown flag) and the help to read.
#[test]
fn numbers_below_zero_are_refused_with_a_sentence() {
    let f = common::fixture("nsys/torch_small_ctx128_train_fp32.sqlite.gz");
    let f = f.to_str().unwrap();
    let (analyze, collect) = (env!("CARGO_BIN_EXE_analyze"), env!("CARGO_BIN_EXE_collect"));
    for (bin, args) in [
        (analyze, vec!["profile", "--top", "-1", f]),
        (analyze, vec!["profile", "--device", "-2", f]),
        (analyze, vec!["compare", "--limit", "-3", f, f]),
        (analyze, vec!["memory", "--top", "-4", f]),
        (collect, vec!["plan", "--ctx", "-1"]),
    ] {
        let out = Command::new(bin).args(&args).output().unwrap();
        let err = common::text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("is below 0: give a whole number of 0 or more"),
            "{args:?}: {err}"
        );
        assert!(err.trim_end().ends_with(" --help')"), "{args:?}: {err}");
    }
}
