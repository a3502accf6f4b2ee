//! `analyze profile`: phases, GEMM fractions and attention times checked against the kernel time
//! the issue measured inside the step ranges, against independent SQL over the same exports, and
//! against the `nvtx_sum` golden CSVs of Nsight Systems 2025.3.

use crate::common;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use analyze::formats;
use analyze::kernels::class::{Classifier, KernelClass};
use analyze::profile::ranges::Attribution;
use analyze::profile::{self, PhaseProfile, Profile, ProfileOptions};
use analyze::Trace;
use regex::Regex;
use rusqlite::Connection;

const SMALL_TRAIN: &str = "torch_small_ctx128_train_fp32";
const LARGE_TRAIN: &str = "torch_large_ctx512_train_fp32";
const ALL_OURS: [&str; 5] = [
    "torch_small_ctx128_fwd_fp32",
    SMALL_TRAIN,
    "torch_small_ctx256_train_bf16",
    "torch_medium_ctx256_fwd_fp32",
    LARGE_TRAIN,
];

fn gz(name: &str) -> PathBuf {
    common::fixture(&format!("nsys/{name}.sqlite.gz"))
}

/// Each fixture is loaded once and shared by the tests (they run on threads of one process).
fn load(name: &str) -> &'static Trace {
    static CACHE: OnceLock<Mutex<HashMap<String, &'static Trace>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(t) = cache.lock().unwrap().get(name) {
        return t;
    }
    let trace: &'static Trace = Box::leak(Box::new(formats::load_trace(&gz(name)).unwrap()));
    cache
        .lock()
        .unwrap()
        .entry(name.to_owned())
        .or_insert(trace)
}

/// The built-in rules, compiled once for all tests.
fn builtin() -> &'static Classifier {
    static C: OnceLock<Classifier> = OnceLock::new();
    C.get_or_init(Classifier::builtin)
}

fn run_profile(trace: &Trace, attribution: Attribution) -> Profile {
    let opts = ProfileOptions {
        attribution,
        head_dim: Some(64),
        ..ProfileOptions::default()
    };
    profile::profile(trace, builtin(), &opts)
}

fn phase<'a>(p: &'a Profile, name: &str) -> &'a PhaseProfile {
    p.phases
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no phase {name}"))
}

/// An export as a plain SQLite file for independent queries: the original beside the project
/// when it is there, else the committed `.gz` unpacked into a temporary file.
struct Export {
    path: PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

fn export(name: &str) -> Export {
    let original = common::root().join(format!("../shared/fixtures/ours/nsys/{name}.sqlite"));
    if original.exists() {
        return Export {
            path: original,
            _tmp: None,
        };
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.sqlite"));
    let mut input = flate2::read::GzDecoder::new(std::fs::File::open(gz(name)).unwrap());
    let mut out = std::fs::File::create(&path).unwrap();
    std::io::copy(&mut input, &mut out).unwrap();
    Export {
        path,
        _tmp: Some(dir),
    }
}

/// (range name, demangled kernel name, duration) of each kernel whose runtime launch call starts
/// inside a range named in `ranges` that lies inside a `step_N` range, by plain SQL over the
/// export. The ranges of one query must not overlap each other (a kernel gets one of them).
fn sql_kernels(db: &Path, ranges: &[&str], thread: bool) -> Vec<(String, String, i64)> {
    let conn = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let names: Vec<String> = ranges.iter().map(|r| format!("'{r}'")).collect();
    // Launch calls inside a phase range first, then their kernels by correlation id: this
    // order lets SQLite build one automatic index on correlationId and keeps the query fast.
    let sql = format!(
        "
        WITH named AS MATERIALIZED (
            SELECT n.start, n.end, n.globalTid,
                   COALESCE(n.text, (SELECT value FROM StringIds WHERE id = n.textId)) AS name
            FROM NVTX_EVENTS n WHERE n.eventType = 59 AND n.end IS NOT NULL
        ),
        steps AS (SELECT start, end, globalTid FROM named WHERE name GLOB 'step_[0-9]*'),
        phase AS MATERIALIZED (
            SELECT DISTINCT p.name, p.start, p.end, p.globalTid FROM named p JOIN steps s
              ON p.globalTid >> 24 = s.globalTid >> 24 AND p.start >= s.start AND p.end <= s.end
            WHERE p.name IN ({})
        ),
        launched AS (
            SELECT r.correlationId AS corr, r.globalTid >> 24 AS pid,
                   (SELECT p.name FROM phase p
                     WHERE r.start >= p.start AND r.start <= p.end
                       AND r.globalTid >> 24 = p.globalTid >> 24
                       AND (?1 = 0 OR r.globalTid = p.globalTid)) AS phase
            FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        )
        SELECT l.phase, s.value, k.end - k.start
        FROM launched l
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = l.corr AND k.globalPid >> 24 = l.pid
        JOIN StringIds s ON s.id = k.demangledName
        WHERE l.phase IS NOT NULL",
        names.join(", ")
    );
    let mut stmt = conn.prepare(&sql).unwrap();
    let rows = stmt
        .query_map(rusqlite::params![thread as i64], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    rows.collect::<rusqlite::Result<Vec<_>>>().unwrap()
}

/// The (kernel name, duration) rows of one range.
fn of_range(rows: &[(String, String, i64)], range: &str) -> Vec<(String, i64)> {
    rows.iter()
        .filter(|r| r.0 == range)
        .map(|r| (r.1.clone(), r.2))
        .collect()
}

/// GEMM fraction of `kernels` with the classes' regexes applied here to the names.
fn gemm_fraction(kernels: &[(String, i64)]) -> f64 {
    let classes = builtin();
    // Classify each distinct name once: a few dozen names cover thousands of launches.
    let mut is_gemm: HashMap<&str, bool> = HashMap::new();
    let total: i64 = kernels.iter().map(|k| k.1).sum();
    let gemm: i64 = kernels
        .iter()
        .filter(|(n, _)| {
            *is_gemm
                .entry(n.as_str())
                .or_insert_with(|| classes.classify(n) == KernelClass::Gemm)
        })
        .map(|k| k.1)
        .sum();
    gemm as f64 / total as f64
}

fn check_steps_add_up(name: &str, step_kernel_ns: i64, steps: usize) {
    let p = run_profile(load(name), Attribution::Process);
    assert_eq!(p.measured_steps, steps);
    let sum: i64 = ["forward", "backward", "optimizer"]
        .iter()
        .map(|n| phase(&p, n).kernel_ns)
        .sum();
    let rel = (sum - step_kernel_ns).abs() as f64 / step_kernel_ns as f64;
    assert!(
        rel < 0.001,
        "{name}: phases {sum} ns vs steps {step_kernel_ns} ns"
    );
    let step = p.step.as_ref().unwrap();
    assert!((step.kernel_ns - step_kernel_ns).abs() as f64 / (step_kernel_ns as f64) < 0.001);
    for n in ["forward", "backward", "optimizer"] {
        assert_eq!(phase(&p, n).steps, steps, "{n}");
    }
    let backward = phase(&p, "backward");
    assert!(
        backward.gemm_fraction.unwrap() > 0.3,
        "{name}: {backward:?}"
    );
    let top = phase(&p, "optimizer").top_kernel.as_ref().unwrap();
    assert_eq!(top.short_name, "multi_tensor_apply_kernel");
    assert!(top.name.contains("multi_tensor_apply_kernel"));
}

#[test]
fn torch_small_ctx128_train_fp32_phases_add_up_to_the_steps() {
    check_steps_add_up(SMALL_TRAIN, 37_965_523, 2);
}

#[test]
fn torch_large_ctx512_train_fp32_phases_add_up_to_the_steps() {
    check_steps_add_up(LARGE_TRAIN, 377_172_363, 1);
}

#[test]
fn torch_small_ctx128_train_fp32_thread_mode_leaves_backward_a_dozen_kernels() {
    let trace = load(SMALL_TRAIN);
    let thread = run_profile(trace, Attribution::Thread);
    let process = run_profile(trace, Attribution::Process);
    let (bt, bp) = (phase(&thread, "backward"), phase(&process, "backward"));
    assert!(
        bt.kernels <= 12,
        "thread-mode backward: {} kernels",
        bt.kernels
    );
    assert_eq!(bp.kernels, 2772);
    assert_eq!(bt.gemm_fraction, Some(0.0));
    // The main thread launches the whole forward pass and the optimizer: both modes agree.
    for n in ["forward", "optimizer"] {
        assert_eq!(
            phase(&thread, n).kernel_ns,
            phase(&process, n).kernel_ns,
            "{n}"
        );
    }
}

#[test]
fn gemm_fraction_per_phase_equals_independent_sql() {
    for name in ALL_OURS {
        let db = export(name);
        let trace = load(name);
        for mode in [Attribution::Process, Attribution::Thread] {
            let p = run_profile(trace, mode);
            let all = sql_kernels(
                &db.path,
                &["forward", "backward", "optimizer"],
                mode == Attribution::Thread,
            );
            for ph in &p.phases {
                let rows = of_range(&all, &ph.name);
                let total: i64 = rows.iter().map(|r| r.1).sum();
                assert_eq!(ph.kernel_ns, total, "{name} {mode:?} {}", ph.name);
                assert_eq!(ph.kernels, rows.len(), "{name} {mode:?} {}", ph.name);
                if total > 0 {
                    let want = gemm_fraction(&rows);
                    let got = ph.gemm_fraction.unwrap();
                    assert!(
                        (got - want).abs() * 100.0 < 0.1,
                        "{name} {mode:?} {}: {got} vs {want}",
                        ph.name
                    );
                }
            }
        }
    }
}

#[test]
fn attention_times_equal_independent_sql() {
    for name in [SMALL_TRAIN, LARGE_TRAIN, "torch_medium_ctx256_fwd_fp32"] {
        let db = export(name);
        let p = run_profile(load(name), Attribution::Process);
        let a = p.attention.as_ref().unwrap();
        let rows = sql_kernels(
            &db.path,
            &[
                "attention_matmul_QK",
                "attention_softmax",
                "attention_matmul_V",
            ],
            false,
        );
        let sum = |range: &str| -> i64 { of_range(&rows, range).iter().map(|r| r.1).sum() };
        let (qk, sm, v) = (
            sum("attention_matmul_QK"),
            sum("attention_softmax"),
            sum("attention_matmul_V"),
        );
        assert!(sm > 0 && qk > 0 && v > 0);
        assert_eq!(a.softmax_ns, sm, "{name}");
        assert_eq!(a.matmul_ns, qk + v, "{name}");
        assert!((a.ratio.unwrap() - sm as f64 / (qk + v) as f64).abs() < 1e-12);
        assert!((a.flop_ratio.unwrap() - 5.0 / 256.0).abs() < 1e-12);
    }
}

/// One row of an `nvtx_sum` golden CSV: (total ns, instances, min ns, max ns).
fn nvtx_sum_row(name: &str, range: &str) -> (i64, usize, i64, i64) {
    let path = common::fixture(&format!("nsys/stats/{name}_nvtx_sum.csv"));
    let text = std::fs::read_to_string(path).unwrap();
    let label = format!(":{range}");
    let line = text
        .lines()
        .find(|l| l.rsplit(',').next() == Some(label.as_str()))
        .unwrap_or_else(|| panic!("{range} not in the nvtx_sum of {name}"));
    let f: Vec<&str> = line.split(',').collect();
    (
        f[1].parse().unwrap(),
        f[2].parse().unwrap(),
        f[5].parse().unwrap(),
        f[6].parse().unwrap(),
    )
}

#[test]
fn forward_wall_time_agrees_with_nvtx_sum() {
    for name in ALL_OURS {
        let p = run_profile(load(name), Attribution::Process);
        let f = phase(&p, "forward");
        let (total, instances, min, max) = nvtx_sum_row(name, "forward");
        // Every `forward` range, warm-up included, is what nsys summed.
        assert_eq!(f.all_wall_ns, total, "{name}");
        assert_eq!(f.all_ranges, instances, "{name}");
        // The measured ones are among them: 2 warm-up ranges are left out.
        assert_eq!(f.ranges, instances - 2, "{name}");
        let per_step = f.wall_ns_per_step.unwrap();
        assert!(per_step >= min as f64 && per_step <= max as f64, "{name}");
    }
    // One measured step: its forward is the fastest of the three (the warm-ups pay for
    // allocation and cuBLAS heuristics).
    let p = run_profile(load(LARGE_TRAIN), Attribution::Process);
    assert_eq!(
        phase(&p, "forward").wall_ns_per_step,
        Some(nvtx_sum_row(LARGE_TRAIN, "forward").2 as f64)
    );
}

#[test]
fn forward_only_runs_have_no_backward() {
    let p = run_profile(load("torch_small_ctx128_fwd_fp32"), Attribution::Process);
    assert_eq!(p.phases.len(), 1);
    assert!(p.notes.iter().any(|n| n.contains("`backward`")));
    let f = phase(&p, "forward");
    assert_eq!(f.kernel_ns, p.step.as_ref().unwrap().kernel_ns);
}

/// The shared public exports, when they are beside the project.
fn public_exports() -> Vec<PathBuf> {
    let Some(dir) = common::shared("public/nsys") else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sqlite"))
        .collect();
    files.sort();
    files
}

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn every_public_export_gets_a_profile_or_says_what_it_lacks() {
    let mut refused = BTreeSet::new();
    for path in public_exports() {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let trace = formats::load_trace(&path).unwrap();
        match profile::check_profilable(&trace) {
            Ok(()) => {
                let p = profile::profile(&trace, builtin(), &Default::default());
                assert!(p.whole_trace.kernel_ns > 0, "{file}");
                assert!(p.whole_trace.top_kernel.is_some(), "{file}");
                let json = serde_json::to_value(&p).unwrap();
                assert!(json["phases"].is_array(), "{file}");
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("CUPTI_ACTIVITY_KIND_KERNEL"), "{file}: {msg}");
                refused.insert(file);
            }
        }
    }
    if !refused.is_empty() {
        // The three captures without CUDA kernels (see the public fixtures' MANIFEST.md).
        let want: BTreeSet<String> = [
            "cardiac-2021__report1.sqlite",
            "centerformer__baseline_209de58.sqlite",
            "uvmtorch__report1.sqlite",
        ]
        .map(String::from)
        .into();
        assert_eq!(refused, want);
    }
}

#[test]
fn every_kernel_name_lands_in_a_sensible_class() {
    let mut names = BTreeSet::new();
    for name in ALL_OURS {
        let t = load(name);
        names.extend(t.kernels.iter().map(|k| t.name(k.name).to_owned()));
    }
    for path in public_exports() {
        let t = formats::load_trace(&path).unwrap();
        names.extend(t.kernels.iter().map(|k| t.name(k.name).to_owned()));
    }
    let classes = builtin();
    // A GEMM by its name, whatever the rules say: cuBLAS/CUTLASS/cuDNN GEMM kernels, nvjet and
    // xmma GEMMs; a convolution, implicit GEMM or not, by its pass or cuDNN's convolution names.
    let looks_gemm = Regex::new(r"(?i)gemm|gemv|nvjet|cublasLt|xmma_gemm").unwrap();
    let looks_conv = Regex::new(
        r"(?i)fprop|dgrad|wgrad|scudnn|implicit_convolve|ImplicitGemmConvolution|computeOffsets",
    )
    .unwrap();
    let mut others = Vec::new();
    for n in &names {
        let class = classes.classify(n);
        println!(
            "{:<14} {}",
            class.as_str(),
            n.chars().take(150).collect::<String>()
        );
        if looks_conv.is_match(n) {
            assert_eq!(class, KernelClass::Convolution, "{n}");
        } else if looks_gemm.is_match(n) {
            assert_eq!(class, KernelClass::Gemm, "{n}");
        }
        if class == KernelClass::Other {
            others.push(n.clone());
        }
    }
    assert!(names.len() >= 100, "{} names", names.len());
    // Only the OpenACC k-means kernel is beyond what a name can tell.
    assert!(
        others.iter().all(|n| n == "kmeans_235_gpu"),
        "unclassified: {others:#?}"
    );
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_analyze"))
        .args(args)
        .output()
        .unwrap()
}

fn small_train_arg() -> String {
    gz(SMALL_TRAIN).display().to_string()
}

#[test]
fn cli_json_has_the_documented_shape() {
    let f = small_train_arg();
    let out = cli(&["profile", &f, "--format", "json", "--head-dim", "64"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let phases = v["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["forward", "backward", "optimizer"]);
    for p in phases {
        assert_eq!(p["steps"], 2);
        assert!(p["wall_ns_per_step"].as_f64().unwrap() > 0.0);
        assert!(p["kernel_ns"].as_i64().unwrap() > 0);
        let g = p["gemm_fraction"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&g));
        let top = &p["top_kernel"];
        assert!(top["name"].is_string() && top["instances"].is_u64());
        let share = top["share"].as_f64().unwrap();
        assert!(share > 0.0 && share <= 1.0);
        let non_gemm = p["top_non_gemm"].as_array().unwrap();
        assert_eq!(non_gemm.len(), 5);
        assert!(non_gemm.iter().all(|k| k["class"] != "gemm"));
    }
    let a = &v["attention"];
    let ratio = a["ratio"].as_f64().unwrap();
    let want = a["softmax_ns"].as_f64().unwrap() / a["matmul_ns"].as_f64().unwrap();
    assert!((ratio - want).abs() < 1e-12);
    assert_eq!(a["flop_ratio"].as_f64(), Some(5.0 / 256.0));
}

#[test]
fn cli_table_markdown_and_csv() {
    let f = small_train_arg();
    let table = cli(&["profile", &f]);
    assert!(table.status.success());
    let text = String::from_utf8(table.stdout).unwrap();
    assert!(text.starts_with("Phases (process attribution)"));
    let forward = text.lines().find(|l| l.starts_with("forward ")).unwrap();
    assert!(forward.contains("10.260"), "{forward}"); // 10,259,675 ns of kernels in 2 steps
    assert!(text.contains("Attention: softmax vs matmul"));

    let md = cli(&["profile", &f, "--format", "markdown"]);
    let md = String::from_utf8(md.stdout).unwrap();
    assert!(md.contains("### Phases (process attribution)"));
    assert!(md.contains("| Phase | Steps | Wall/step (ms) |"));
    assert!(md.contains("| optimizer | 2 |"));

    let csv = cli(&["profile", &f, "--format", "csv", "--attribution", "thread"]);
    assert!(csv.status.success());
    let csv = String::from_utf8(csv.stdout).unwrap();
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("Phase,Steps,Wall/step (ms)"));
    let backward = csv.lines().find(|l| l.starts_with("backward,")).unwrap();
    let fields: Vec<&str> = backward.split(',').collect();
    assert_eq!(fields[6], "0.054", "{backward}"); // 54,496 ns under the thread rule
                                                  // Sections are separated by one blank line.
    assert_eq!(csv.split("\n\n").count(), 4);
}

#[test]
fn cli_classes_file_overrides_the_builtin_rules() {
    let f = gz(LARGE_TRAIN).display().to_string();
    let base = cli(&["profile", &f, "--format", "json"]);
    let base: serde_json::Value = serde_json::from_slice(&base.stdout).unwrap();
    for example in ["kernel-classes.example.toml", "kernel-classes.example.json"] {
        let classes = common::root().join("docs").join(example);
        let out = cli(&[
            "profile",
            &f,
            "--format",
            "json",
            "--classes",
            classes.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // The example counts cuBLAS split-K reductions as reductions: backward loses GEMM time.
        let g = |v: &serde_json::Value| v["phases"][1]["gemm_ns"].as_i64().unwrap();
        assert_eq!(v["phases"][1]["name"], "backward");
        assert!(g(&v) < g(&base), "{example}");
        let classes = v["phases"][1]["classes"].as_array().unwrap();
        assert!(classes.iter().any(|c| c["class"] == "reduction"));
    }
}

#[test]
fn cli_errors_are_one_line_and_exit_2() {
    let f = small_train_arg();
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("classes.toml");
    std::fs::write(&bad, "[[rules]]\nclass = \"matrix\"\npattern = \"x\"\n").unwrap();
    let bad_regex = dir.path().join("classes.json");
    std::fs::write(
        &bad_regex,
        r#"{"rules": [{"class": "gemm", "pattern": "("}]}"#,
    )
    .unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["profile".into(), "no/such.sqlite".into()],
            "no such file",
        ),
        (
            vec![
                "profile".into(),
                f.clone(),
                "--classes".into(),
                bad.display().to_string(),
            ],
            "unknown class `matrix`",
        ),
        (
            vec![
                "profile".into(),
                f.clone(),
                "--classes".into(),
                bad_regex.display().to_string(),
            ],
            "rule 1: pattern `(`",
        ),
        (
            vec!["profile".into(), f.clone(), "--steps".into(), "(".into()],
            "not a regular expression",
        ),
        (
            vec![
                "profile".into(),
                f.clone(),
                "--attribution".into(),
                "gpu".into(),
            ],
            "unknown attribution",
        ),
    ];
    for (args, want) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = cli(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn cli_help_explains_the_attribution_modes() {
    let out = cli(&["profile", "--help"]);
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("autograd"), "{help}");
    assert!(help.contains("nvtx_kern_sum"));
}

/// The 60-step export (137k kernels), streamed: every step found and every kernel counted. How
/// fast that runs is measured by `scripts/bench/bench_scale.sh`, not here.
#[test]
#[cfg_attr(
    no_shared_ours,
    ignore = "needs ../shared/fixtures/ours beside the checkout"
)]
fn torch_small_ctx128_train_fp32_60steps_profiles_every_step() {
    let Some(path) = common::shared("ours/large/torch_small_ctx128_train_fp32_60steps.sqlite.gz")
    else {
        return;
    };
    let p =
        profile::profile_file(&path, &Classifier::builtin(), &ProfileOptions::default()).unwrap();
    assert_eq!(p.measured_steps, 60);
    assert_eq!(p.whole_trace.kernels, 136_995);
}

/// Names typed with another case still find their ranges (exact names win when both exist), and
/// a name one slip away from a range's is answered with that name.
#[test]
fn phases_and_steps_match_any_case_and_near_misses_are_named() {
    let trace = load(SMALL_TRAIN);
    let exact = run_profile(trace, Attribution::Process);
    let opts = ProfileOptions {
        phases: vec!["Forward".into(), "backwrd".into(), "OPTIMIZER".into()],
        steps: Regex::new(r"^STEP_\d+$").unwrap(),
        head_dim: Some(64),
        ..ProfileOptions::default()
    };
    let typed = profile::profile(trace, builtin(), &opts);
    assert_eq!(typed.measured_steps, exact.measured_steps);
    assert_eq!(typed.step_pattern, r"(?i)^STEP_\d+$");
    for (as_typed, name) in [("Forward", "forward"), ("OPTIMIZER", "optimizer")] {
        let (a, b) = (phase(&typed, as_typed), phase(&exact, name));
        assert_eq!(
            (a.ranges, a.kernels, a.kernel_ns, a.wall_ns_per_step),
            (b.ranges, b.kernels, b.kernel_ns, b.wall_ns_per_step)
        );
    }
    assert!(!typed.phases.iter().any(|p| p.name == "backwrd"));
    assert!(
        typed
            .notes
            .iter()
            .any(|n| n == "phase `backwrd`: no NVTX range of that name (did you mean `backward`?)"),
        "{:?}",
        typed.notes
    );
}
