//! `analyze report` with the options of `analyze profile`, over a folder of real exports whose
//! ranges have other names than the defaults (`iteration_N` steps, `attn_*` attention ranges):
//! without the options the per-step and softmax sections are empty, with them every cell is
//! the one `analyze profile` gives each file with the same options. And runs labelled from file
//! names that spell precision and size in other ways, each marked as guessed.

use crate::common;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::{analyze, json_stdout, text};

const EXPORTS: [&str; 2] = [
    "torch_small_ctx128_fwd_fp32",
    "torch_small_ctx128_train_fp32",
];

/// The ranges renamed, as another project names them.
const RENAMES: [(&str, &str); 3] = [
    ("attention_matmul_QK", "attn_qk"),
    ("attention_softmax", "attn_softmax"),
    ("attention_matmul_V", "attn_av"),
];
const ATTENTION: &str = "attn_qk,attn_softmax,attn_av";
const STEPS: &str = r"^iteration_\d+$";

/// A bundled export unpacked into `dir` as `name`.
fn unpacked(dir: &Path, fixture: &str, name: &str) -> PathBuf {
    common::unpacked(&format!("nsys/{fixture}.sqlite.gz"), dir, name)
}

/// Rename NVTX ranges, whether their names are inline or in `StringIds`.
fn rename_ranges(path: &Path) {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut renames: Vec<(String, String)> = RENAMES
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    for i in 0..16 {
        renames.push((format!("step_{i}"), format!("iteration_{i}")));
    }
    for (from, to) in renames {
        db.execute(
            "UPDATE NVTX_EVENTS SET text = ?2 WHERE text = ?1",
            [&from, &to],
        )
        .unwrap();
        db.execute(
            "UPDATE StringIds SET value = ?2 WHERE value = ?1",
            [&from, &to],
        )
        .unwrap();
    }
}

/// Run `analyze report DIR -o DIR/out ARGS`; report.json and report.md.
fn report(dir: &Path, args: &[&str]) -> (Value, String) {
    let out = dir.join("out");
    let mut cmd = vec![
        "report".to_owned(),
        dir.display().to_string(),
        "-o".to_owned(),
        out.display().to_string(),
        "--no-plots".to_owned(),
        "--quiet".to_owned(),
    ];
    cmd.extend(args.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let o = analyze(&refs);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let v =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    std::fs::remove_dir_all(out).unwrap();
    (v, md)
}

/// The blocks of section `id`.
fn section<'a>(v: &'a Value, id: &str) -> &'a Value {
    v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no section {id}"))
}

fn table<'a>(v: &'a Value, id: &str, title: &str) -> Option<&'a Value> {
    section(v, id)["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["title"] == title)
}

fn rows_of(t: &Value) -> &Vec<Value> {
    t["rows"].as_array().unwrap()
}

#[test]
fn report_takes_the_profile_options_and_fills_what_profile_fills() {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = EXPORTS
        .iter()
        .map(|f| {
            let p = unpacked(dir.path(), f, &format!("{f}.sqlite"));
            rename_ranges(&p);
            p
        })
        .collect();

    // Defaults: no step ranges, no attention ranges by those names.
    let (v, md) = report(dir.path(), &[]);
    assert!(table(&v, "softmax_vs_matmul", "Per run").is_none());
    assert!(md.contains("No run has the attention ranges"), "{md}");
    let kernel = table(&v, "time_per_step", "GPU kernel time per step").unwrap();
    assert!(rows_of(kernel).iter().all(|r| r["step (ms)"].is_null()));

    // With the options, every trace is profiled as `analyze profile` profiles it.
    let (v, md) = report(
        dir.path(),
        &["--attention-ranges", ATTENTION, "--steps", STEPS],
    );
    assert!(md.contains("`attn_qk` and `attn_av` (matmul)"), "{md}");
    let per_run = table(&v, "softmax_vs_matmul", "Per run").expect("the softmax section is filled");
    assert_eq!(rows_of(per_run).len(), 2);
    let kernel = table(&v, "time_per_step", "GPU kernel time per step").unwrap();
    for (file, fixture) in files.iter().zip(EXPORTS) {
        let p = json_stdout(&analyze(&[
            "profile",
            &file.display().to_string(),
            "--attention-ranges",
            ATTENTION,
            "--steps",
            STEPS,
            "-f",
            "json",
        ]));
        assert_eq!(p["measured_steps"], 2, "{fixture}");
        let label = if fixture.contains("fwd") {
            "small ctx128 forward fp32"
        } else {
            "small ctx128 train fp32"
        };
        let row = rows_of(per_run)
            .iter()
            .find(|r| r["run"] == label)
            .unwrap_or_else(|| panic!("{label}"));
        assert_eq!(
            row["softmax/matmul time"], p["attention"]["ratio"],
            "{label}"
        );
        assert_eq!(
            row["softmax/matmul wall"], p["attention"]["wall_ratio"],
            "{label}"
        );
        let steps = p["measured_steps"].as_f64().unwrap();
        let softmax_ms = p["attention"]["softmax_ns"].as_f64().unwrap() / steps / 1e6;
        assert!((row["softmax (ms/step)"].as_f64().unwrap() - softmax_ms).abs() < 1e-9);
        let k = rows_of(kernel).iter().find(|r| r["run"] == label).unwrap();
        let step_ms = p["step"]["kernel_ns_per_step"].as_f64().unwrap() / 1e6;
        assert!(
            (k["step (ms)"].as_f64().unwrap() - step_ms).abs() < 1e-9,
            "{label}"
        );
    }

    // --phases renames the per-pass columns.
    let (v, _) = report(
        dir.path(),
        &["--steps", STEPS, "--phases", "forward,backward"],
    );
    let kernel = table(&v, "time_per_step", "GPU kernel time per step").unwrap();
    assert_eq!(
        kernel["columns"],
        serde_json::json!(["run", "steps", "forward (ms)", "backward (ms)", "step (ms)"])
    );
}

#[test]
fn labels_guessed_from_names_of_both_spellings_say_so() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "gpt_2_7B_ctx128_forward_without_mixed.sqlite",
        "gpt_2_7B_ctx128_forward_with_mixed.sqlite",
        "gpt_2.7b_seq_len_128_forward_noamp.sqlite",
    ] {
        unpacked(dir.path(), EXPORTS[0], name);
    }
    let (v, md) = report(dir.path(), &[]);
    let runs = &section(&v, "runs")["tables"][0];
    let row = |label: &str| {
        rows_of(runs)
            .iter()
            .find(|r| r["run"] == label)
            .unwrap_or_else(|| panic!("no run {label}: {runs}"))
            .clone()
    };
    let fp32 = row("2.7b ctx128 forward fp32");
    assert_eq!(fp32["model"], "2.7b");
    assert_eq!(fp32["label from"], "file name (guessed)");
    let bf16 = row("2.7b ctx128 forward bf16");
    assert_eq!(bf16["precision"], "bf16");
    // Two fp32 runs of one configuration: the second is told apart.
    row("2.7b ctx128 forward fp32 #2");
    assert!(
        md.contains("guessed from their file names"),
        "the report says where labels are guesses"
    );
    // head_dim of the 2.7B model (2560 / 32) for the FLOP ratio.
    let per_run = table(&v, "softmax_vs_matmul", "Per run").unwrap();
    assert!(rows_of(per_run).iter().all(|r| r["head_dim"] == 80));
}
