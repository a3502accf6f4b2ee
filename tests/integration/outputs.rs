//! What users paste, script and trust: `--output DIR` writes one tidy table per file that reads
//! back into the columns and rows of the same command's JSON (names whole), text tables fit 120
//! columns, `-q` keeps stderr empty, and an unwritable output folder fails before any input is
//! read.

use serde_json::Value;

use crate::common::{self, analyze, json_stdout, text};

const TRAIN: &str = "nsys/torch_small_ctx128_train_fp32.sqlite.gz";
const BF16: &str = "nsys/torch_small_ctx256_train_bf16.sqlite.gz";
const SNAP: &str = "memsnap/memsnap_small_ctx128_train_fp32.pickle.gz";
const SNAP_BF16: &str = "memsnap/memsnap_small_ctx128_train_bf16.pickle.gz";

/// RFC 4180 records: fields split at commas, quoted fields may hold commas, quotes (doubled) and
/// line breaks.
fn read_csv(s: &str) -> Vec<Vec<String>> {
    let mut records = Vec::new();
    let mut record = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') if field.is_empty() => quoted = true,
            (false, ',') => record.push(std::mem::take(&mut field)),
            (false, '\n') => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
            }
            (false, c) => field.push(c),
        }
    }
    assert!(!quoted, "unterminated quote");
    if !field.is_empty() || !record.is_empty() {
        record.push(field);
        records.push(record);
    }
    records
}

/// Run `args` with `--format json` for its `tables`, and again with `--output DIR --format csv`;
/// every table must come back from its file with the JSON's columns, rows and text cells.
fn files_match_json(args: &[&str]) -> usize {
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let v = json_stdout(&analyze(&json_args));
    let tables = v["tables"].as_array().expect("a `tables` list").clone();
    assert!(!tables.is_empty());

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tables");
    let out_s = out.to_str().unwrap();
    let mut csv_args = args.to_vec();
    csv_args.extend(["--format", "csv", "--output", out_s, "-q"]);
    let o = analyze(&csv_args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stderr.is_empty(), "-q: {}", text(&o.stderr));
    let files = std::fs::read_dir(&out).unwrap().count();
    assert_eq!(files, tables.len(), "one file per table");

    for t in &tables {
        let name = t["name"].as_str().unwrap();
        let path = out.join(format!("{name}.csv"));
        let records = read_csv(&std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e}", path.display());
        }));
        let columns: Vec<&str> = t["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(records[0], columns, "{name}: header");
        let rows = t["rows"].as_array().unwrap();
        assert_eq!(records.len() - 1, rows.len(), "{name}: rows");
        for (record, row) in records[1..].iter().zip(rows) {
            assert_eq!(record.len(), columns.len(), "{name}: {record:?}");
            for (field, col) in record.iter().zip(&columns) {
                match &row[*col] {
                    Value::String(s) => assert_eq!(field, s, "{name}: {col}"),
                    Value::Null => assert_eq!(field, "", "{name}: {col}"),
                    Value::Number(n) => {
                        let parsed: f64 = field.parse().unwrap();
                        let exact = n.as_f64().unwrap();
                        assert!(
                            (parsed - exact).abs() <= 0.51 + exact.abs() * 1e-9,
                            "{name}: {col}: {field} against {exact}"
                        );
                    }
                    other => panic!("{name}: {col}: {other}"),
                }
                assert!(!field.contains('…'), "{name}: a cut name: {field}");
            }
        }
    }
    tables.len()
}

fn fixture(rel: &str) -> String {
    common::fixture(rel).display().to_string()
}

#[test]
fn stats_all_writes_one_csv_per_report() {
    let n = files_match_json(&["stats", "--report", "all", &fixture(TRAIN)]);
    assert_eq!(n, analyze::stats::Report::ALL.len());
}

#[test]
fn stats_one_report_is_named_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let o = analyze(&[
        "stats",
        "--output",
        dir.path().to_str().unwrap(),
        &fixture(TRAIN),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let csv = std::fs::read_to_string(dir.path().join("cuda_gpu_kern_sum.csv")).unwrap();
    let golden = std::fs::read_to_string(common::fixture(
        "nsys/stats/torch_small_ctx128_train_fp32_cuda_gpu_kern_sum.csv",
    ))
    .unwrap();
    assert_eq!(csv, golden, "the file is nsys's CSV");
    // Stdout keeps the text table.
    assert!(text(&o.stdout).starts_with("Time (%)  Total Time (ns)"));
}

#[test]
fn profile_tables_read_back() {
    files_match_json(&["profile", &fixture(TRAIN)]);
}

#[test]
fn memory_tables_read_back() {
    files_match_json(&["memory", &fixture(SNAP)]);
    files_match_json(&["memory", &fixture(SNAP), &fixture(SNAP_BF16)]);
    files_match_json(&["memory", "--by", "module", &fixture(SNAP)]);
}

#[test]
fn compare_tables_read_back_with_every_row() {
    files_match_json(&["compare", &fixture(TRAIN), &fixture(BF16)]);
}

#[test]
fn json_files_are_lists_of_records() {
    let dir = tempfile::tempdir().unwrap();
    let o = analyze(&[
        "profile",
        &fixture(TRAIN),
        "-f",
        "json",
        "-o",
        dir.path().to_str().unwrap(),
    ]);
    let v = json_stdout(&o);
    assert!(v["phases"].is_array(), "the profile's own JSON stays");
    let phases: Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("phases_process_attribution.json")).unwrap(),
    )
    .unwrap();
    let rows = phases.as_array().unwrap();
    assert!(rows.iter().all(Value::is_object));
    assert_eq!(rows[0]["Phase"], "forward");
}

fn widest_line(s: &str) -> usize {
    s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn readme_first_command_fits_120_columns() {
    let o = analyze(&["stats", "--report", "cuda_gpu_kern_sum", &fixture(TRAIN)]);
    assert_eq!(o.status.code(), Some(0));
    let out = text(&o.stdout);
    assert!(widest_line(&out) <= 120, "{out}");
    // Names are cut in the middle, start and end kept; --wide prints them whole.
    assert!(out.contains('…'));
    let wide = text(&analyze(&["stats", "--wide", &fixture(TRAIN)]).stdout);
    assert!(widest_line(&wide) > 120);
    assert!(!wide.contains('…'));
}

#[test]
fn profile_memory_and_compare_text_fits_120_columns() {
    for args in [
        vec!["profile", TRAIN],
        vec!["memory", SNAP],
        vec!["compare", TRAIN, BF16],
    ] {
        let mut full: Vec<String> = vec![args[0].to_owned()];
        full.extend(args[1..].iter().map(|a| fixture(a)));
        let refs: Vec<&str> = full.iter().map(String::as_str).collect();
        let o = analyze(&refs);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        assert!(widest_line(&out) <= 120, "{}: {out}", args[0]);
    }
}

#[test]
fn an_unwritable_output_fails_before_reading_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    // The input does not exist: only the folder's check can have failed.
    let o = analyze(&[
        "stats",
        "--output",
        file.to_str().unwrap(),
        "/no/such/export.sqlite",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("a-file"),
        "{err}"
    );
    assert!(!err.contains("export.sqlite"), "{err}");
}

#[test]
fn several_csv_tables_on_stdout_point_at_output() {
    let o = analyze(&[
        "stats",
        "--report",
        "cuda_api_sum,nvtx_sum",
        "-f",
        "csv",
        &fixture(TRAIN),
    ]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        text(&o.stderr).contains("--output DIR"),
        "{}",
        text(&o.stderr)
    );
    let quiet = analyze(&[
        "stats",
        "--report",
        "cuda_api_sum,nvtx_sum",
        "-f",
        "csv",
        "-q",
        &fixture(TRAIN),
    ]);
    assert!(quiet.stderr.is_empty());
    assert_eq!(quiet.stdout, o.stdout);
}

#[test]
fn report_counts_skipped_files_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = dir.path().join("in");
    std::fs::create_dir(&inputs).unwrap();
    std::fs::copy(common::fixture(SNAP), inputs.join("snap.pickle.gz")).unwrap();
    std::fs::write(inputs.join("peaks.jsonl"), "{\"a\": 1}\n{\"a\": 2}\n").unwrap();
    std::fs::write(inputs.join("notes.txt"), "hello").unwrap();
    let out = dir.path().join("out");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "report",
            inputs.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--no-plots",
        ];
        args.extend(extra);
        let o = analyze(&args);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        text(&o.stderr)
    };
    let err = run(&[]);
    assert!(
        err.contains("skipped 2 files that are not profiler output (--verbose lists them)"),
        "{err}"
    );
    assert!(!err.contains("not valid JSON"), "{err}");
    let verbose = run(&["--verbose"]);
    assert!(
        verbose.contains("peaks.jsonl (not a recognised input)"),
        "{verbose}"
    );
    assert!(
        verbose.contains("notes.txt (not a recognised input)"),
        "{verbose}"
    );
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("not a recognised input"));
}
