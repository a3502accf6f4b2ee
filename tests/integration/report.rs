//! `analyze report`: run the real binary over folders of real profiles and check the report's
//! cells against what `analyze profile` and `analyze memory` print for each file on its own, and
//! `report.json` against `report.md`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn analyze(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_analyze"))
        .args(args)
        .output()
        .expect("the analyze binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_of(o: &Output) -> Value {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

/// Run `analyze report PATHS -o <tmp> ARGS`; the report's folder and the process output.
fn report(paths: &[&Path], args: &[&str]) -> (tempfile::TempDir, Output) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let mut cmd: Vec<String> = vec!["report".into()];
    cmd.extend(paths.iter().map(|p| p.display().to_string()));
    cmd.extend(["-o".into(), out.display().to_string()]);
    cmd.extend(args.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let o = analyze(&refs);
    (dir, o)
}

fn read(dir: &tempfile::TempDir, name: &str) -> String {
    std::fs::read_to_string(dir.path().join("out").join(name)).unwrap()
}

/// One Markdown table: its header and rows of cell texts.
struct MdTable {
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
}

fn split_row(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches("| ").trim_end_matches(" |");
    inner
        .replace("\\|", "\u{0}")
        .split(" | ")
        .map(|c| c.replace('\u{0}', "\\|"))
        .collect()
}

/// Every table of a Markdown document, in order.
fn md_tables(md: &str) -> Vec<MdTable> {
    let mut out = Vec::new();
    let lines: Vec<&str> = md.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with("| ") && lines.get(i + 1).is_some_and(|l| l.starts_with("| --")) {
            let columns = split_row(lines[i]);
            let mut rows = Vec::new();
            i += 2;
            while i < lines.len() && lines[i].starts_with("| ") {
                rows.push(split_row(lines[i]));
                i += 1;
            }
            out.push(MdTable { columns, rows });
        } else {
            i += 1;
        }
    }
    out
}

/// Every table of `report.json`, in order.
fn json_tables(v: &Value) -> Vec<&Value> {
    v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["tables"].as_array().unwrap().iter())
        .collect()
}

/// A table cell as the Markdown renderer writes it: names with template arguments or scopes as
/// code spans, pipes escaped.
fn md_escape(s: &str) -> String {
    let escaped = s.replace('|', "\\|");
    if s.contains(['<', '>']) || s.contains("::") {
        format!("`{escaped}`")
    } else {
        escaped
    }
}

/// Each cell of `report.md` shows the number `report.json` holds, rounded to the decimals shown.
fn assert_same_numbers(md: &str, json: &Value) {
    let mt = md_tables(md);
    let jt = json_tables(json);
    assert_eq!(mt.len(), jt.len(), "one JSON table per Markdown table");
    for (m, j) in mt.iter().zip(&jt) {
        let columns: Vec<&str> = j["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        let escaped: Vec<String> = columns.iter().map(|c| md_escape(c)).collect();
        assert_eq!(m.columns, escaped);
        let rows = j["rows"].as_array().unwrap();
        assert_eq!(m.rows.len(), rows.len(), "{columns:?}");
        for (mrow, jrow) in m.rows.iter().zip(rows) {
            for (text, col) in mrow.iter().zip(&columns) {
                let value = &jrow[*col];
                match value {
                    Value::Null => assert_eq!(text, "-", "{col}"),
                    Value::String(s) => assert_eq!(text, &md_escape(s), "{col}"),
                    Value::Number(n) => {
                        let shown: f64 = text.parse().unwrap_or_else(|_| panic!("{col}: {text}"));
                        let decimals = text.split('.').nth(1).map_or(0, str::len) as i32;
                        let v = n.as_f64().unwrap();
                        let tolerance = 0.5 * 10f64.powi(-decimals) * (1.0 + 1e-9) + 1e-12;
                        assert!((shown - v).abs() <= tolerance, "{col}: {text} against {v}");
                    }
                    other => panic!("{col}: unexpected {other}"),
                }
            }
        }
    }
}

/// The JSON table titled `title` in the section `id`.
fn table<'a>(v: &'a Value, id: &str, title: Option<&str>) -> &'a Value {
    let section = v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no section {id}"));
    section["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| match title {
            Some(t0) => t["title"] == t0,
            None => t["title"].is_null(),
        })
        .unwrap_or_else(|| panic!("no table {title:?} in {id}"))
}

/// The row of `t` whose column `key` is `value`.
fn row<'a>(t: &'a Value, key: &str, value: &str) -> &'a Value {
    t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[key] == value)
        .unwrap_or_else(|| panic!("no row {key} = {value}"))
}

fn phase<'a>(profile: &'a Value, name: &str) -> &'a Value {
    profile["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap()
}

fn close(a: &Value, b: f64) -> bool {
    (a.as_f64().unwrap() - b).abs() <= 1e-9 * b.abs().max(1.0)
}

const SECTIONS: [&str; 8] = [
    "## Runs",
    "## Forward, backward and step time",
    "## Top kernel per pass",
    "## Top non-GEMM kernel",
    "## GEMM fraction: inference against training",
    "## Softmax against matmul in attention",
    "## Peak memory",
    "## Skipped files",
];

/// Checks of a report over the five exports and ten snapshots against the single-file outputs.
fn check_sweep(md: &str, v: &Value, nsys: &Path, memsnap: &Path, ext: &str) {
    for s in SECTIONS {
        assert!(md.contains(s), "{s} missing");
    }
    assert_same_numbers(md, v);
    let export = |name: &str| nsys.join(format!("{name}{ext}")).display().to_string();
    let profile = |name: &str| json_of(&analyze(&["profile", &export(name), "-f", "json"]));
    let train = profile("torch_small_ctx128_train_fp32");
    let fwd = profile("torch_small_ctx128_fwd_fp32");

    // GEMM fraction of the small model's ctx-128 training step, per pass.
    let per_pass = row(
        table(v, "gemm_fraction", Some("GEMM % per pass")),
        "run",
        "small ctx128 train fp32",
    );
    for (col, name) in [("forward %", "forward"), ("backward %", "backward")] {
        let f = phase(&train, name)["gemm_fraction"].as_f64().unwrap();
        assert!(close(&per_pass[col], f * 100.0), "{col}");
    }
    let step = train["step"]["gemm_fraction"].as_f64().unwrap();
    assert!(close(&per_pass["step %"], step * 100.0));
    // Inference against training, in the model × context matrix.
    let matrix = row(
        table(v, "gemm_fraction", Some("GEMM % of kernel time, fp32")),
        "model",
        "small",
    );
    let inference = fwd["step"]["gemm_fraction"].as_f64().unwrap();
    assert!(close(&matrix["ctx 128 inference"], inference * 100.0));
    assert!(close(&matrix["ctx 128 training"], step * 100.0));
    assert!(
        inference > step,
        "a training step has less GEMM time than inference"
    );

    // Forward and backward time per step.
    let wall = row(
        table(v, "time_per_step", Some("Wall time per step")),
        "run",
        "small ctx128 train fp32",
    );
    let f = phase(&train, "forward")["wall_ns_per_step"]
        .as_f64()
        .unwrap();
    assert!(close(&wall["forward (ms)"], f / 1e6));
    let kernel = row(
        table(v, "time_per_step", Some("GPU kernel time per step")),
        "run",
        "small ctx128 train fp32",
    );
    let b = phase(&train, "backward")["kernel_ns_per_step"]
        .as_f64()
        .unwrap();
    assert!(close(&kernel["backward (ms)"], b / 1e6));

    // Softmax against matmul, and the FLOP ratio for head_dim 64 (768 / 12).
    let attention = row(
        table(v, "softmax_vs_matmul", Some("Per run")),
        "run",
        "small ctx128 train fp32",
    );
    let ratio = train["attention"]["ratio"].as_f64().unwrap();
    assert!(close(&attention["softmax/matmul time"], ratio));
    assert!(close(&attention["FLOP ratio 5/(4·head_dim)"], 5.0 / 256.0));
    assert_eq!(attention["head_dim"], 64);

    // Top kernel per pass: the profile's, with its share.
    let large = profile("torch_large_ctx512_train_fp32");
    let top = &phase(&large, "backward")["top_kernel"];
    let t = table(v, "top_kernel_per_pass", None);
    let r = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == "large ctx512 train fp32" && r["pass"] == "backward")
        .unwrap();
    assert!(close(&r["share %"], top["share"].as_f64().unwrap() * 100.0));
    assert!(top["name"]
        .as_str()
        .unwrap()
        .contains(r["kernel"].as_str().unwrap().trim_end_matches('…')));

    // Peak memory of the medium model's ctx-256 fp32 training step: `analyze memory`'s.
    let snap = memsnap
        .join("memsnap_medium_ctx256_train_fp32.pickle.gz")
        .display()
        .to_string();
    let m = json_of(&analyze(&["memory", &snap, "-f", "json"]));
    let peak = m["peak_allocated_bytes"].as_f64().unwrap() / 1048576.0;
    let cell = &row(
        table(v, "peak_memory", Some("Peak allocated (MiB), fp32")),
        "model",
        "medium",
    )["ctx 256 train step"];
    assert!(close(cell, peak));
    let per_snapshot = row(
        table(v, "peak_memory", Some("Per snapshot")),
        "run",
        "medium ctx256 train fp32",
    );
    assert!(close(&per_snapshot["step peak MiB"], peak));
    // fp32 against autocast: the two runs of the small model at ctx 128.
    let pair = row(
        table(v, "peak_memory", Some("Baseline (fp32) against autocast")),
        "baseline",
        "small ctx128 train fp32",
    );
    assert_eq!(pair["compared"], "small ctx128 train bf16");
    // A forward-only run has no backward: `-`.
    let fwd_row = row(
        table(v, "time_per_step", Some("Wall time per step")),
        "run",
        "small ctx128 forward fp32",
    );
    assert!(fwd_row["backward (ms)"].is_null());
    assert!(md.contains("| small ctx128 forward fp32 | 2 |"));
}

#[test]
fn report_over_the_project_fixtures() {
    let nsys = common::fixture("nsys");
    let memsnap = common::fixture("memsnap");
    let (dir, o) = report(&[&nsys, &memsnap], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let md = read(&dir, "report.md");
    let v: Value = serde_json::from_str(&read(&dir, "report.json")).unwrap();
    check_sweep(&md, &v, &nsys, &memsnap, ".sqlite.gz");

    // Plots exist, are PNGs and are linked.
    for plot in [
        "kernel_classes.png",
        "kernel_classes_by_pass.png",
        "gemm_fraction.png",
        "memory_categories.png",
        "memory_timeline_medium_ctx256_train_fp32.png",
    ] {
        let bytes = std::fs::read(dir.path().join("out").join(plot)).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{plot}");
        assert!(md.contains(&format!("]({plot})")), "{plot} linked");
    }
    // The nsys stats CSVs beside the exports and peaks.jsonl are skipped, with the reason.
    let skipped = v["inputs"]["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 41);
    assert!(md.contains("| 40 | not a recognised input |"), "{md}");
    // Progress went to stderr, one line per file.
    let err = stderr(&o);
    assert!(err.contains("torch_small_ctx128_train_fp32.sqlite.gz: small ctx128 train fp32"));
    // Template names are code spans, so GitHub shows them as written.
    let line = md
        .lines()
        .find(|l| l.contains("elementwise_kernel<128, 2,"))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(line.contains("| `"), "{line}");
    assert!(!md.contains("&lt;"));
    // Every `<` of a table is inside a code span.
    assert!(md
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains('<'))
        .all(|l| l.contains("| `")));
}

#[test]
#[cfg_attr(
    no_shared_ours,
    ignore = "needs ../shared/fixtures/ours beside the checkout"
)]
fn report_over_the_shared_fixtures() {
    let (Some(nsys), Some(memsnap)) = (common::shared("ours/nsys"), common::shared("ours/memsnap"))
    else {
        return;
    };
    let (dir, o) = report(&[&nsys, &memsnap], &["--no-plots", "--quiet"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "--quiet");
    let md = read(&dir, "report.md");
    let v: Value = serde_json::from_str(&read(&dir, "report.json")).unwrap();
    check_sweep(&md, &v, &nsys, &memsnap, ".sqlite");
    assert!(!md.contains(".png"), "--no-plots links no plot");
}

/// A copy of a bundled export, unpacked, with `RUN_METADATA` rows as `collect --trace` writes them.
fn export_with_metadata(dir: &Path, name: &str, meta: &[(&str, &str)]) -> PathBuf {
    let gz = std::fs::File::open(common::fixture(
        "nsys/torch_small_ctx128_fwd_fp32.sqlite.gz",
    ))
    .unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz), &mut bytes).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    if !meta.is_empty() {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE RUN_METADATA (name TEXT NOT NULL, value TEXT);")
            .unwrap();
        for (k, v) in meta {
            conn.execute("INSERT INTO RUN_METADATA VALUES (?1, ?2)", [k, v])
                .unwrap();
        }
    }
    path
}

#[test]
fn labels_come_from_metadata_then_file_name_then_the_option_and_oom_shows() {
    let inputs = tempfile::tempdir().unwrap();
    let d = inputs.path();
    // Metadata names the run whatever the file is called.
    export_with_metadata(
        d,
        "run1.sqlite",
        &[
            ("tool", "collect 0.1.0"),
            ("model", "small"),
            ("ctx", "128"),
            ("batch", "4"),
            ("mode", "forward"),
            ("precision", "fp32"),
            ("d_model", "768"),
            ("heads", "12"),
        ],
    );
    // No metadata, a name without the pattern: --label names it.
    export_with_metadata(d, "profile-b.sqlite", &[]);
    // A bench results file with one configuration that ran out of memory.
    let bench = serde_json::json!({
        "device": {"name": "NVIDIA H200"},
        "results": [
            {"size": "small", "ctx": 128, "batch": 4, "mode": "forward", "precision": "fp32",
             "status": "ok", "host": {"mean_ms": 4.3904077, "std_ms": 0.02917, "median_ms": 4.3764605},
             "host_step_ms": [4.38, 4.40], "tokens_per_s": 116617.87, "memory": {"peak_bytes": 584274948}},
            {"size": "2.7B", "ctx": 1024, "batch": 4, "mode": "train", "precision": "fp32",
             "status": "oom", "oom": "cuMemAlloc of 10.0 GiB failed"}
        ]
    });
    std::fs::write(d.join("grid.json"), bench.to_string()).unwrap();
    std::fs::write(d.join("notes.csv"), "a,b\n1,2\n").unwrap();

    let (dir, o) = report(
        &[d],
        &[
            "--label",
            "profile-b.sqlite=medium_ctx512_fwd_bf16",
            "--no-plots",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&read(&dir, "report.json")).unwrap();
    let md = read(&dir, "report.md");
    assert_same_numbers(&md, &v);
    let runs = table(&v, "runs", None);
    let r = row(runs, "run", "small ctx128 forward fp32");
    assert_eq!(r["label from"], "metadata");
    assert_eq!(r["batch"], 4);
    let r = row(runs, "run", "medium_ctx512_fwd_bf16");
    assert_eq!(r["label from"], "--label");
    assert_eq!(
        (r["model"].as_str(), r["ctx"].as_i64()),
        (Some("medium"), Some(512))
    );
    // head_dim from metadata (768 / 12) for the FLOP ratio.
    let a = row(
        table(&v, "softmax_vs_matmul", Some("Per run")),
        "run",
        "small ctx128 forward fp32",
    );
    assert_eq!(a["head_dim"], 64);
    // The configuration that ran out of memory reads OOM, the other its mean step time.
    let times = row(
        table(&v, "bench", Some("mean step time (ms), fp32")),
        "model",
        "2.7b",
    );
    assert_eq!(times["ctx 1024 train"], "OOM");
    assert!(times["ctx 128 forward"].is_null());
    let small = row(
        table(&v, "bench", Some("mean step time (ms), fp32")),
        "model",
        "small",
    );
    assert!(close(&small["ctx 128 forward"], 4.3904077));
    assert!(md.contains("| 2.7b | - | OOM |"), "{md}");
    let skipped = v["inputs"]["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0]["file"].as_str().unwrap().ends_with("notes.csv"));

    // A label for a file that is not an input, and an unrecognised file named directly, are
    // errors with one line.
    let (_, o) = report(&[d], &["--label", "missing.sqlite=x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing.sqlite"), "{}", stderr(&o));
    let (_, o) = report(&[&d.join("notes.csv")], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

/// A snapshot whose trace ends in an out-of-memory event: the report marks it `OOM` in the
/// model × context matrix and in the per-snapshot table, as its legend says.
#[test]
fn an_out_of_memory_event_is_marked() {
    use analyze::formats::torch_snapshot::{read, write};
    use analyze::model::snapshot::{Action, StackId, TraceEntry};

    let inputs = tempfile::tempdir().unwrap();
    let mut snap = read::load(&common::fixture(
        "memsnap/memsnap_small_ctx128_forward_fp32.pickle.gz",
    ))
    .unwrap();
    let last = snap.traces[0].last().unwrap().time_us;
    snap.traces[0].push(TraceEntry {
        action: Action::Oom,
        addr: 0,
        size: 80 << 30,
        stream: 0,
        time_us: last.map(|t| t + 1),
        stack: StackId::EMPTY,
        compile_context: None,
        user_metadata: None,
    });
    std::fs::write(
        inputs
            .path()
            .join("memsnap_small_ctx128_forward_fp32.pickle"),
        write::to_pickle(&snap),
    )
    .unwrap();
    let (dir, o) = report(&[inputs.path()], &["--no-plots"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let md = read(&dir, "report.md");
    let v: Value = serde_json::from_str(&read(&dir, "report.json")).unwrap();
    assert_same_numbers(&md, &v);
    let matrix = md_tables(&md)
        .into_iter()
        .find(|t| t.columns.iter().any(|c| c == "ctx 128 forward"))
        .expect("a model × context matrix");
    assert_eq!(matrix.rows[0], ["small", "OOM"]);
    let per_snapshot = table(&v, "peak_memory", Some("Per snapshot"));
    let r = row(per_snapshot, "run", "small ctx128 forward fp32");
    assert_eq!(r["out of memory"], "OOM");
    assert!(md.contains("`OOM`"), "the legend is there");
}
