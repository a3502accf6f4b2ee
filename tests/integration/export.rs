//! `analyze export`: the Parquet dataset of a run, read back. DuckDB's answers to the queries of
//! `docs/sql/` equal `analyze profile --format json` of the same files to the nanosecond (per
//! phase and rank, top non-GEMM kernels, the rank table, the straggler), checked by
//! `scripts/scale/check.py`; the files, read with the parquet crate, hold every kernel and copy
//! of the source exports (counts and sums by plain SQL on them) and the profile's step rows; and
//! the command's edges: a folder it will not replace, bad input, the Unix clock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use serde_json::Value;

use crate::common::{self, analyze, assert_success, text};

const SLOW: &str = "ranks/nsys_slow0_30ms";
const KINETO_SLOW: &str = "ranks/kineto_slow0_30ms";
const DDP_ONE_FILE: &str = "captures/torch_ddp2_small_l4_ctx128_train_fp32.sqlite.gz";
const GRAPHS: &str = "captures/torch_graphs_graph_small_l4_ctx128_train_fp32.sqlite.gz";
const TRAIN: &str = "nsys/torch_small_ctx128_train_fp32.sqlite.gz";

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// Export `inputs` into `dir/out`; its path.
fn export(dir: &Path, inputs: &[&Path]) -> PathBuf {
    let out = dir.join("out");
    let mut args = vec!["export", "-q", path(&out)];
    args.extend(inputs.iter().map(|p| path(p)));
    assert_success(&analyze(&args));
    out
}

/// `analyze profile --format json` of `inputs`, written to `file`.
fn profile_json(inputs: &[&Path], file: &Path) -> Value {
    let mut args = vec!["profile", "--format", "json"];
    args.extend(inputs.iter().map(|p| path(p)));
    let out = analyze(&args);
    assert_success(&out);
    std::fs::write(file, &out.stdout).unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The fixtures of a run: the files in a folder, or the one file.
fn inputs(rel: &str) -> Vec<PathBuf> {
    let p = common::fixture(rel);
    if p.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&p)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
    } else {
        vec![p]
    }
}

/// Export `rel`, profile it (and with `per_rank`, each of its files alone), and have
/// scripts/scale/check.py compare DuckDB's answers with the profiles; the figures compared.
fn duckdb_equals_profile(rel: &str, per_rank: bool) -> usize {
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(rel);
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let out = export(dir.path(), &refs);
    let whole = dir.path().join("profile.json");
    profile_json(&refs, &whole);
    let script = common::root().join("scripts/scale/check.py");
    let mut args = vec![
        path(&script).to_owned(),
        path(&out).into(),
        path(&whole).into(),
    ];
    if per_rank {
        for (rank, f) in files.iter().enumerate() {
            let p = dir.path().join(format!("rank{rank}.json"));
            let alone = profile_json(&[f], &p);
            // The files are named by rank, in order; the check names the rank it compares.
            assert!(path(f).contains(&format!("rank{rank}")), "{}", f.display());
            assert!(alone["ranks"].as_array().is_none_or(|r| r.is_empty()));
            args.push("--rank-profile".into());
            args.push(format!("{rank}={}", path(&p)));
        }
    }
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let run = Command::new(python)
        .args(&args)
        .output()
        .expect("python3 runs");
    let said = text(&run.stdout);
    assert!(run.status.success(), "{rel}:\n{said}{}", text(&run.stderr));
    let compared: usize = said
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{rel}: {said}"));
    assert!(said.contains(" 0 differ"), "{rel}: {said}");
    compared
}

#[test]
#[cfg_attr(
    no_duckdb,
    ignore = "needs python3 with DuckDB (pip install duckdb, then touch build.rs)"
)]
fn duckdb_answers_equal_profile_per_rank_nsys_files() {
    // Phases (3 + steps + whole trace, all ranks and each rank), the top kernels of each, both
    // ranks' rows and the straggler.
    assert!(duckdb_equals_profile(SLOW, true) >= 100);
}

#[test]
#[cfg_attr(
    no_duckdb,
    ignore = "needs python3 with DuckDB (pip install duckdb, then touch build.rs)"
)]
fn duckdb_answers_equal_profile_kineto_ddp_graphs_and_one_capture() {
    for rel in [KINETO_SLOW, DDP_ONE_FILE, GRAPHS, TRAIN] {
        assert!(duckdb_equals_profile(rel, false) >= 40, "{rel}");
    }
}

/// Every row of the Parquet files of `table` in `out`, by rank: column name to value.
fn table(out: &Path, table: &str) -> BTreeMap<i64, Vec<BTreeMap<String, Field>>> {
    let mut by_rank = BTreeMap::new();
    for part in std::fs::read_dir(out.join(table)).unwrap() {
        let part = part.unwrap().path();
        let name = part.file_name().unwrap().to_string_lossy().into_owned();
        let rank: i64 = name.strip_prefix("rank=").unwrap().parse().unwrap();
        let file = std::fs::File::open(part.join("part-0.parquet")).unwrap();
        let reader = SerializedFileReader::new(file).unwrap();
        let rows: Vec<BTreeMap<String, Field>> = reader
            .get_row_iter(None)
            .unwrap()
            .map(|r| {
                r.unwrap()
                    .get_column_iter()
                    .map(|(n, f)| (n.clone(), f.clone()))
                    .collect()
            })
            .collect();
        assert_eq!(
            reader.metadata().file_metadata().num_rows() as usize,
            rows.len()
        );
        by_rank.insert(rank, rows);
    }
    by_rank
}

fn long(row: &BTreeMap<String, Field>, col: &str) -> i64 {
    match &row[col] {
        Field::Long(v) => *v,
        other => panic!("{col}: {other:?}"),
    }
}

fn string<'r>(row: &'r BTreeMap<String, Field>, col: &str) -> Option<&'r str> {
    match &row[col] {
        Field::Str(s) => Some(s),
        Field::Null => None,
        other => panic!("{col}: {other:?}"),
    }
}

/// Count and summed duration of the rows of `table` in the export at `file`, by plain SQL.
fn sql_sums(file: &Path, table: &str) -> (i64, i64) {
    let conn = rusqlite::Connection::open(file).unwrap();
    conn.query_row(
        &format!("SELECT COUNT(*), COALESCE(SUM(\"end\" - start), 0) FROM {table}"),
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

#[test]
fn parquet_reads_back_every_kernel_copy_and_step_of_the_exports() {
    let dir = tempfile::tempdir().unwrap();
    let files = inputs(SLOW);
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let out = export(dir.path(), &refs);
    let profile = profile_json(&refs, &dir.path().join("profile.json"));
    let ops = table(&out, "ops");
    assert_eq!(ops.keys().copied().collect::<Vec<_>>(), [0, 1]);
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("export.json")).unwrap()).unwrap();
    for (rank, f) in files.iter().enumerate() {
        let rows = &ops[&(rank as i64)];
        assert_eq!(manifest["rows"]["ops"][rank.to_string()], rows.len());
        let sums = |kind: &str| {
            let of_kind: Vec<_> = rows
                .iter()
                .filter(|r| string(r, "kind") == Some(kind))
                .collect();
            for r in &of_kind {
                assert_eq!(
                    long(r, "end_ns") - long(r, "start_ns"),
                    long(r, "duration_ns")
                );
                assert_eq!(long(r, "rank"), rank as i64);
            }
            let total: i64 = of_kind.iter().map(|r| long(r, "duration_ns")).sum();
            (of_kind.len() as i64, total)
        };
        // The source export, unpacked, by plain SQL.
        let sqlite = common::unpacked(
            &format!("{SLOW}/{}", f.file_name().unwrap().to_string_lossy()),
            dir.path(),
            &format!("rank{rank}.sqlite"),
        );
        let kernels = sql_sums(&sqlite, "CUPTI_ACTIVITY_KIND_KERNEL");
        assert!(kernels.0 > 4000, "{kernels:?}");
        assert_eq!(sums("kernel"), kernels);
        assert_eq!(
            sums("memcpy"),
            sql_sums(&sqlite, "CUPTI_ACTIVITY_KIND_MEMCPY")
        );
        assert_eq!(
            sums("memset"),
            sql_sums(&sqlite, "CUPTI_ACTIVITY_KIND_MEMSET")
        );
        assert_eq!(sums("graph").0, 0);
        let json_rank = &profile["ranks"][rank];
        assert_eq!(json_rank["rank"], rank);
        assert_eq!(json_rank["kernel_ns"], kernels.1);
        // Every op of a phase lies in a measured step.
        assert!(rows
            .iter()
            .all(|r| string(r, "phase").is_none() || string(r, "step").is_some()));
    }
    // Per phase over both ranks, as the profile sums them.
    for phase in profile["phases"].as_array().unwrap() {
        let name = phase["name"].as_str().unwrap();
        let ns: i64 = (ops.values().flatten())
            .filter(|r| string(r, "phase") == Some(name) && string(r, "kind") == Some("kernel"))
            .map(|r| long(r, "duration_ns"))
            .sum();
        assert_eq!(phase["kernel_ns"], ns, "{name}");
    }
    // The rank × step rows are the profile's step breakdown.
    let steps: Vec<(i64, String, i64, i64)> = table(&out, "rank_steps")
        .values()
        .flatten()
        .map(|r| {
            let step = string(r, "step").unwrap().to_owned();
            (
                long(r, "device"),
                step,
                long(r, "step_ns"),
                long(r, "idle_ns"),
            )
        })
        .collect();
    let mut want: Vec<(i64, String, i64, i64)> = profile["step_breakdown"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let b = &s["breakdown"];
            let n = |v: &Value| v.as_i64().unwrap();
            let step = s["step"].as_str().unwrap().to_owned();
            (n(&s["device"]), step, n(&b["span_ns"]), n(&b["idle_ns"]))
        })
        .collect();
    want.sort();
    let mut got = steps;
    got.sort();
    assert_eq!(got, want);
    // One range row per range, steps marked.
    let ranges = table(&out, "ranges");
    let is_step = |r: &BTreeMap<String, Field>| matches!(r["is_step"], Field::Bool(true));
    let marked = ranges.values().flatten().filter(|r| is_step(r)).count();
    assert_eq!(marked, got.len());
}

#[test]
fn unix_clock_adds_each_files_origin() {
    let dir = tempfile::tempdir().unwrap();
    let file = common::fixture(TRAIN);
    let run = export(dir.path(), &[&file]);
    let unix = dir.path().join("unix");
    assert_success(&analyze(&[
        "export",
        "-q",
        "--clock",
        "unix",
        path(&unix),
        path(&file),
    ]));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(unix.join("export.json")).unwrap()).unwrap();
    let origin = manifest["shift_ns"].as_i64().unwrap();
    // nsys's session start, as Unix time: after 2020.
    assert!(origin > 1_577_836_800_000_000_000, "{origin}");
    let first = |out: &Path| long(&table(out, "ops")[&0][0], "start_ns");
    assert_eq!(first(&unix), first(&run) + origin);
}

#[test]
fn a_folder_that_is_not_an_export_is_refused_and_an_export_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let file = common::fixture(TRAIN);
    let refused = analyze(&["export", path(&out), path(&file)]);
    assert_eq!(refused.status.code(), Some(2));
    let err = text(&refused.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not an export"), "{err}");
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "mine"
    );

    std::fs::remove_file(out.join("notes.txt")).unwrap();
    let first = export(dir.path(), &[&file]);
    let again = export(dir.path(), &[&common::fixture(GRAPHS)]);
    assert_eq!(first, again);
    // The second export replaced the first, and nothing is left beside it.
    let graphs: i64 = (table(&again, "ops").values().flatten())
        .filter(|r| string(r, "kind") == Some("graph"))
        .count() as i64;
    assert!(graphs > 0);
    let beside: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(beside.len(), 1);
}

#[test]
fn bad_input_is_one_line_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.sqlite");
    std::fs::write(&bad, "not a database").unwrap();
    let out = dir.path().join("out");
    let r = analyze(&["export", path(&out), path(&bad)]);
    assert_eq!(r.status.code(), Some(2));
    let err = text(&r.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("bad.sqlite"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    let help = analyze(&["export", "--help"]);
    assert_success(&help);
    assert!(text(&help.stdout).contains("rank=N/part-0.parquet"));
}
