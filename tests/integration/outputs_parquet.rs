//! `--output DIR --format parquet`: one Parquet file per table, read back with the parquet crate's
//! reader into the columns, rows and values of the same command's JSON `tables` (numbers at full
//! precision, names whole, missing cells null), for every command that prints tables; stdout
//! keeps the text tables, and Parquet without a folder or for the streamed trace reports is one
//! error line.

use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use serde_json::Value;

use crate::common::{self, analyze, json_stdout, text};

const TRAIN: &str = "nsys/torch_small_ctx128_train_fp32.sqlite.gz";
const BF16: &str = "nsys/torch_small_ctx256_train_bf16.sqlite.gz";
const SNAP: &str = "memsnap/memsnap_small_ctx128_train_fp32.pickle.gz";
const SNAP_BF16: &str = "memsnap/memsnap_small_ctx128_train_bf16.pickle.gz";

fn fixture(rel: &str) -> String {
    common::fixture(rel).display().to_string()
}

/// The column names and rows of a Parquet file.
fn read(path: &Path) -> (Vec<String>, Vec<Vec<Field>>) {
    let reader = SerializedFileReader::new(std::fs::File::open(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let columns = (reader.metadata().file_metadata().schema_descr().columns())
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    let rows = reader
        .get_row_iter(None)
        .unwrap()
        .map(|r| {
            r.unwrap()
                .get_column_iter()
                .map(|(_, f)| f.clone())
                .collect()
        })
        .collect();
    (columns, rows)
}

/// Run `args` with `--format json` for its `tables`, and with `--format parquet --output DIR`;
/// every table must come back from its file with the JSON's columns, rows and values.
fn files_match_json(args: &[&str]) -> usize {
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let v = json_stdout(&analyze(&json_args));
    let tables = v["tables"].as_array().expect("a `tables` list").clone();

    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tables");
    let mut pq_args = args.to_vec();
    pq_args.extend([
        "--format",
        "parquet",
        "--output",
        out.to_str().unwrap(),
        "-q",
    ]);
    let o = analyze(&pq_args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(!o.stdout.is_empty(), "stdout keeps the text tables");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), tables.len());

    for t in &tables {
        let name = t["name"].as_str().unwrap();
        let (columns, rows) = read(&out.join(format!("{name}.parquet")));
        let want: Vec<&str> = (t["columns"].as_array().unwrap().iter())
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(columns, want, "{name}: columns");
        let json_rows = t["rows"].as_array().unwrap();
        assert_eq!(rows.len(), json_rows.len(), "{name}: rows");
        for (row, json) in rows.iter().zip(json_rows) {
            for (field, col) in row.iter().zip(&want) {
                let same = match (field, &json[*col]) {
                    (Field::Null, Value::Null) => true,
                    (Field::Str(s), Value::String(j)) => s == j,
                    (Field::Long(v), Value::Number(n)) => n.as_i64() == Some(*v),
                    // serde_json parses floats to within an ulp, not always exactly.
                    (Field::Double(v), Value::Number(n)) => n
                        .as_f64()
                        .is_some_and(|j| (j - v).abs() <= v.abs() * 4.0 * f64::EPSILON),
                    _ => false,
                };
                assert!(same, "{name}: {col}: {field:?} against {}", json[*col]);
            }
        }
    }
    tables.len()
}

#[test]
fn stats_reports_read_back_as_parquet() {
    let n = files_match_json(&["stats", "--report", "all", &fixture(TRAIN)]);
    assert_eq!(n, analyze::stats::Report::ALL.len());
}

#[test]
fn profile_memory_and_compare_tables_read_back_as_parquet() {
    assert!(files_match_json(&["profile", &fixture(TRAIN)]) >= 4);
    assert!(files_match_json(&["memory", &fixture(SNAP), &fixture(SNAP_BF16)]) >= 2);
    assert!(files_match_json(&["compare", &fixture(TRAIN), &fixture(BF16)]) >= 2);
}

#[test]
fn parquet_needs_a_folder_and_a_summary_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tables");
    let out = out.to_str().unwrap();
    let file = fixture(TRAIN);
    for args in [
        vec!["profile", "--format", "parquet", &file],
        vec![
            "stats",
            "-r",
            "cuda_gpu_trace",
            "-f",
            "parquet",
            "-o",
            out,
            &file,
        ],
    ] {
        let o = analyze(&args);
        assert_eq!(o.status.code(), Some(2));
        let err = text(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("parquet"), "{err}");
    }
    // Refused before anything was written.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
