//! `analyze memory` end to end: the real binary on bundled snapshots and on hostile files.

use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn analyze(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_analyze"))
        .args(args)
        .output()
        .expect("the analyze binary runs")
}

fn fixture(name: &str) -> String {
    common::fixture(&format!("memsnap/{name}"))
        .to_string_lossy()
        .into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 2 with exactly one `error: ...` line on stderr, containing `needle`.
fn assert_one_error_line(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "stderr: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(needle), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(o.stdout.is_empty());
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn gunzip(path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

#[test]
fn a_pickle_that_would_call_a_function_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    // pickle.dumps(obj, protocol=4) for an object whose __reduce__ is (os.system, ('echo pwned',))
    let evil = b"\x80\x04\x95%\x00\x00\x00\x00\x00\x00\x00\x8c\x05posix\x94\x8c\x06system\x94\x93\x94\x8c\necho pwned\x94\x85\x94R\x94.";
    let p = write(dir.path(), "evil.pickle", evil);
    let o = analyze(&["memory", p.to_str().unwrap()]);
    assert_one_error_line(&o, "posix.system");
    // The same, gzip-compressed and at protocol 2 with GLOBAL.
    let p = write(
        dir.path(),
        "evil2.pickle.gz",
        &gzip(b"\x80\x02cposix\nsystem\nq\x00X\n\x00\x00\x00echo pwnedq\x01\x85q\x02Rq\x03."),
    );
    let o = analyze(&["memory", p.to_str().unwrap()]);
    assert_one_error_line(&o, "only plain data is read");
}

#[test]
fn truncated_pickles_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let full = gunzip(&fixture("memsnap_small_ctx128_forward_fp32.pickle.gz"));
    let p = write(dir.path(), "cut.pickle", &full[..full.len() / 2]);
    let o = analyze(&["memory", p.to_str().unwrap()]);
    assert_one_error_line(&o, "truncated");
    // A cut gzip stream.
    let gz = std::fs::read(fixture("memsnap_small_ctx128_forward_fp32.pickle.gz")).unwrap();
    let p = write(dir.path(), "cut.pickle.gz", &gz[..gz.len() / 2]);
    let o = analyze(&["memory", p.to_str().unwrap()]);
    assert_one_error_line(&o, "cut.pickle.gz");
}

#[test]
fn gzip_of_garbage_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "garbage.pickle.gz",
        &gzip(b"\x00\x13 this is not a pickle, just bytes \xff\xfe"),
    );
    let o = analyze(&["memory", p.to_str().unwrap()]);
    assert_one_error_line(&o, "not a recognised input");
    // A gzip header followed by bytes that do not inflate.
    let mut bad = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
    bad.extend_from_slice(&[0xff; 64]);
    let p = write(dir.path(), "bad.pickle.gz", &bad);
    let o = analyze(&["memory", p.to_str().unwrap()]);
    assert_one_error_line(&o, "gzip");
}

#[test]
fn unknown_top_level_shapes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    // pickle.dumps({'hello': 1}, protocol=4)
    let p = write(
        dir.path(),
        "dict.pickle",
        b"\x80\x04\x95\x0e\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x05hello\x94K\x01s.",
    );
    let o = analyze(&["memory", p.to_str().unwrap()]);
    assert_one_error_line(&o, "without `segments`");
    // pickle.dumps([1, 2, 3], protocol=4): a list, but not of segments.
    let p = write(
        dir.path(),
        "list.pickle",
        b"\x80\x04\x95\x0b\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02K\x03e.",
    );
    let o = analyze(&["memory", p.to_str().unwrap()]);
    assert_one_error_line(&o, "segment 0 is an int, expected a dict");
}

#[test]
fn one_file_gives_the_peak_report() {
    let o = analyze(&[
        "memory",
        &fixture("memsnap_small_ctx128_train_fp32.pickle.gz"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    // max_memory_allocated of this run, from peaks.jsonl.
    assert!(out.contains("2678320640"), "{out}");
    for s in [
        "Largest allocations live at the peak",
        "Categories at the peak",
        "optimizer state",
        "fragmentation",
    ] {
        assert!(out.contains(s), "{s} missing:\n{out}");
    }
}

#[test]
fn json_output_has_the_peak_fields() {
    let o = analyze(&[
        "memory",
        "--format",
        "json",
        "--top",
        "3",
        &fixture("memsnap_medium_ctx128_forward_fp32.pickle.gz"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["peak_allocated_bytes"], 3_270_682_624u64);
    assert!(v["peak_reserved_bytes"].as_u64().unwrap() >= 3_270_682_624);
    assert!(v["peak_time_us"].as_f64().unwrap() > 0.0);
    let top = v["top_allocations"].as_array().unwrap();
    assert_eq!(top.len(), 3);
    assert!(top[0]["size"].as_u64().unwrap() >= top[1]["size"].as_u64().unwrap());
    assert!(top[0]["frame"].is_string() && top[0]["category"].is_string());
}

#[test]
fn several_files_give_the_peak_table_and_the_autocast_comparison() {
    let o = analyze(&[
        "memory",
        "--format",
        "csv",
        &fixture("memsnap_small_ctx128_train_fp32.pickle.gz"),
        &fixture("memsnap_small_ctx128_train_bf16.pickle.gz"),
        &fixture("memsnap_small_ctx128_forward_fp32.pickle.gz"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("run,model,ctx,mode,precision,forward peak MiB,step peak MiB"));
    // 2678320640 B = 2554.25 MiB, 2674667008 B = 2550.76 MiB (peaks.jsonl).
    assert!(lines.iter().any(|l| l
        .starts_with("memsnap_small_ctx128_train_fp32,small,128,train,fp32,")
        && l.contains(",2554.25,")));
    assert!(out.contains("memsnap_small_ctx128_train_fp32,memsnap_small_ctx128_train_bf16,"));
    // step Δ: 2550.76 - 2554.25
    assert!(out.contains(",-3.48,"), "{out}");
}

#[test]
fn compare_pairs_files_explicitly_and_labels_name_rows() {
    let o = analyze(&[
        "memory",
        "--compare",
        "--label",
        "ctx128",
        "--label",
        "ctx512",
        "--format",
        "markdown",
        &fixture("memsnap_medium_ctx128_forward_fp32.pickle.gz"),
        &fixture("memsnap_medium_ctx512_forward_fp32.pickle.gz"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("### Baseline against compared run"), "{out}");
    assert!(out.contains("| ctx128 | ctx512 |"), "{out}");
    let o = analyze(&[
        "memory",
        "--compare",
        &fixture("memsnap_medium_ctx128_forward_fp32.pickle.gz"),
    ]);
    assert_one_error_line(&o, "pairs");
    let o = analyze(&[
        "memory",
        "--label",
        "a",
        &fixture("memsnap_medium_ctx128_forward_fp32.pickle.gz"),
        &fixture("memsnap_medium_ctx512_forward_fp32.pickle.gz"),
    ]);
    assert_one_error_line(&o, "one --label per file");
}

#[test]
fn plots_are_written_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plots");
    let o = analyze(&[
        "memory",
        "--plot",
        out.to_str().unwrap(),
        "--svg",
        &fixture("memsnap_small_ctx128_forward_fp32.pickle.gz"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "memsnap_small_ctx128_forward_fp32.categories.svg",
            "memsnap_small_ctx128_forward_fp32.timeline.svg"
        ]
    );
    let svg = std::fs::read_to_string(out.join("memsnap_small_ctx128_forward_fp32.timeline.svg"))
        .unwrap();
    assert!(
        svg.contains("peak 1115.78 MiB"),
        "the peak is marked, in MiB as in the tables"
    );
}

#[test]
fn user_category_rules_come_first() {
    let dir = tempfile::tempdir().unwrap();
    let rules = write(
        dir.path(),
        "rules.toml",
        b"[[rule]]\ncategory = \"matmuls\"\nop = \"^bmm$\"\nphase = \"forward\"\n",
    );
    let o = analyze(&[
        "memory",
        "--format",
        "json",
        "--categories",
        rules.to_str().unwrap(),
        &fixture("memsnap_small_ctx128_forward_fp32.pickle.gz"),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cats: Vec<&str> = v["categories_at_peak"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["category"].as_str().unwrap())
        .collect();
    assert!(cats.contains(&"matmuls"), "{cats:?}");
    let bad = write(
        dir.path(),
        "bad.toml",
        b"[[rule]]\ncategory = \"x\"\nop = \"(\"\n",
    );
    let o = analyze(&[
        "memory",
        "--categories",
        bad.to_str().unwrap(),
        &fixture("memsnap_small_ctx128_forward_fp32.pickle.gz"),
    ]);
    assert_one_error_line(&o, "rule 1 `op`");
}

#[test]
fn the_oldest_layout_a_bare_list_of_segments_gives_the_end_state() {
    let dir = tempfile::tempdir().unwrap();
    // pickle.dumps([{'device': 0, 'address': 4096, 'total_size': 2097152, 'stream': 0,
    //   'segment_type': 'small', 'blocks': [{'size': 1024, 'state': 'active_allocated',
    //   'history': [{'addr': 4096, 'real_size': 1000}]},
    //   {'size': 2096128, 'state': 'inactive'}]}], protocol=2)
    let bare = b"\x80\x02]q\x00}q\x01(X\x06\x00\x00\x00deviceq\x02K\x00X\x07\x00\x00\x00addressq\x03M\x00\x10X\n\x00\x00\x00total_sizeq\x04J\x00\x00 \x00X\x06\x00\x00\x00streamq\x05K\x00X\x0c\x00\x00\x00segment_typeq\x06X\x05\x00\x00\x00smallq\x07X\x06\x00\x00\x00blocksq\x08]q\t(}q\n(X\x04\x00\x00\x00sizeq\x0bM\x00\x04X\x05\x00\x00\x00stateq\x0cX\x10\x00\x00\x00active_allocatedq\rX\x07\x00\x00\x00historyq\x0e]q\x0f}q\x10(X\x04\x00\x00\x00addrq\x11M\x00\x10X\t\x00\x00\x00real_sizeq\x12M\xe8\x03uau}q\x13(h\x0bJ\x00\xfc\x1f\x00h\x0cX\x08\x00\x00\x00inactiveq\x14ueua.";
    let p = write(dir.path(), "old.pickle", bare);
    let plots = dir.path().join("plots");
    let o = analyze(&[
        "memory",
        "--png",
        "--plot",
        plots.to_str().unwrap(),
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("no allocator trace"), "{out}");
    assert!(plots.join("old.timeline.png").exists());
    let o = analyze(&["memory", "--format", "json", p.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The one live block: 1024 bytes allocated (1000 requested), one 2 MiB segment reserved.
    assert_eq!(v["format"]["layout"], "segments list");
    assert_eq!(v["trace_entries"], 0);
    assert_eq!(v["peak_allocated_bytes"], 1024);
    assert_eq!(v["peak_reserved_bytes"], 2_097_152);
    assert_eq!(v["top_allocations"][0]["requested_size"], 1000);
    assert!(v["peak_time_us"].is_null());
}
