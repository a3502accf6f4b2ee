//! The formats `collect` writes and `analyze` reads, checked on the project's real files: nsys's
//! `shortName` rule against every kernel of the fixture exports, and `collect`'s own results
//! file and memory snapshot (recorded on the H200) read and written back byte for byte.

use std::io::Read;
use std::path::Path;

use analyze::formats::nsys_sqlite::short_name;
use analyze::formats::{bench_results, read_maybe_gzip, torch_snapshot};

use crate::common;

/// Every `(demangledName, shortName)` pair of a gzip-compressed export.
fn short_name_pairs(export_gz: &Path) -> Vec<(String, String)> {
    let mut sqlite = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(export_gz).unwrap())
        .read_to_end(&mut sqlite)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("export.sqlite");
    std::fs::write(&path, sqlite).unwrap();
    kernel_short_names(&path, "demangledName")
}

/// Every distinct pair of a kernel's name in the column `name` (`demangledName`, `mangledName`)
/// and its `shortName`, in the export at `sqlite`.
pub fn kernel_short_names(sqlite: &Path, name: &str) -> Vec<(String, String)> {
    let c =
        rusqlite::Connection::open_with_flags(sqlite, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut st = c
        .prepare(&format!(
            "SELECT DISTINCT d.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k \
             JOIN StringIds d ON d.id = k.{name} JOIN StringIds s ON s.id = k.shortName"
        ))
        .unwrap();
    let pairs = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    pairs
}

/// nsys's own `shortName` of every kernel of every fixture export (and of the kernel-name table
/// of the H200 captures) is what the one rule derives from the demangled name.
#[test]
fn short_name_is_nsys_short_name_for_every_fixture_kernel() {
    let mut checked = 0;
    for dir in ["nsys", "collect"] {
        for entry in std::fs::read_dir(common::fixture(dir)).unwrap() {
            let path = entry.unwrap().path();
            if !path.to_string_lossy().ends_with(".sqlite.gz") {
                continue;
            }
            for (demangled, short) in short_name_pairs(&path) {
                assert_eq!(
                    short_name(&demangled),
                    short,
                    "{}: {demangled}",
                    path.display()
                );
                checked += 1;
            }
        }
    }
    let table = std::fs::read_to_string(common::fixture("collect/kernel_names_nsys.tsv")).unwrap();
    for line in table.lines().filter(|l| !l.is_empty()) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(short_name(f[1]), f[2], "{}", f[0]);
        checked += 1;
    }
    assert!(checked > 400, "only {checked} kernels checked");
}

/// `collect bench --out` files from the H200 read into the format's types and written again:
/// every key, in the same order, with the same values. (Values are compared as JSON reads them:
/// the JSON reader may round a decimal's last digit, so the text of a number is not compared.)
#[test]
fn bench_results_files_read_and_write_back_unchanged() {
    let number = regex::Regex::new(r"-?\d+(\.\d+)?([eE][-+]?\d+)?").unwrap();
    for name in [
        "collect/bench_grid_h200.json.gz",
        "collect/collect_small_ctx128_train_fp32.json.gz",
    ] {
        let bytes = read_maybe_gzip(&common::fixture(name)).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        let file = bench_results::from_json(text.as_bytes()).unwrap();
        assert!(!file.results.is_empty(), "{name}");
        let again = bench_results::to_json(&file).unwrap();
        let as_read: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            again,
            serde_json::to_string_pretty(&as_read).unwrap() + "\n",
            "{name}"
        );
        let shape = |t: &str| number.replace_all(t, "#").into_owned();
        assert_eq!(shape(&again), shape(&text), "{name}");
    }
}

/// The snapshot `collect` recorded on the H200, read into the model and written again, is the
/// same pickle.
#[test]
fn collects_snapshot_reads_and_writes_back_unchanged() {
    let path = common::fixture("collect/collect_small_ctx128_train_fp32.pickle.gz");
    let bytes = read_maybe_gzip(&path).unwrap();
    let snap = torch_snapshot::read::from_bytes(&path, &bytes).unwrap();
    assert!(!snap.segments.is_empty() && !snap.trace(0).is_empty());
    assert!(torch_snapshot::write::to_pickle(&snap) == bytes);
}
