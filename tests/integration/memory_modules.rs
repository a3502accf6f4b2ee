//! Memory by module (`analyze memory --by module`) on real snapshots. The oracles are independent
//! of the grouping: the bytes at the peak of all modules add up to `max_memory_allocated`
//! measured on the GPU (`fixtures/memsnap/peaks.jsonl`, and `collect`'s own counter in its
//! results file), and the rows of the CS336 model match what its source
//! (`scripts/reference/torch_ref.py`, which made the snapshots) says about shapes: the FFN line
//! keeps two `d_ff`-wide tensors and one residual per layer, softmax keeps two score matrices
//! per head and layer, and attention outgrows the FFN as the context grows.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use analyze::formats;
use analyze::memory::categories::Rules;
use analyze::memory::modules::{BEFORE_RECORDING, NO_MODULE_FRAME, NO_STACK};
use analyze::memory::summary::{analyze, MemoryOptions, MemoryReport};
use analyze::model::snapshot::{Action, Snapshot, StackId, TraceEntry};

fn report_of(snap: &Snapshot, label: &str) -> MemoryReport {
    let opts = MemoryOptions {
        label: label.to_owned(),
        ..MemoryOptions::default()
    };
    analyze(snap, &Rules::builtin(), &opts).report
}

fn report(path: &Path) -> MemoryReport {
    let snap = formats::load_snapshot(path).unwrap();
    report_of(&snap, &path.display().to_string())
}

fn bytes_at_peak(r: &MemoryReport) -> u64 {
    r.modules.iter().map(|m| m.bytes_at_peak).sum()
}

/// Every snapshot (`*.pickle`, `*.pickle.gz`) of a folder.
fn snapshots_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".pickle") || name.ends_with(".pickle.gz")
        })
        .collect();
    files.sort();
    files
}

/// Each snapshot of `dir` sums to its peak, and to the measured one where `peaks.jsonl` has it.
/// Returns how many snapshots were checked against a measured peak.
fn check_folder(dir: &Path) -> usize {
    let peaks = dir.join("peaks.jsonl");
    let measured = if peaks.exists() {
        common::measured_peaks(&peaks).into_iter().collect()
    } else {
        BTreeMap::new()
    };
    let files = snapshots_in(dir);
    assert!(!files.is_empty(), "no snapshots in {}", dir.display());
    let mut against_measured = 0;
    for path in files {
        let r = report(&path);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(bytes_at_peak(&r), r.peak_allocated_bytes, "{name}");
        if let Some(&truth) = measured.get(&name) {
            assert_eq!(bytes_at_peak(&r), truth, "{name}");
            against_measured += 1;
        }
        // Every allocation of the window is counted in one row.
        let allocs = r.modules.iter().map(|m| m.allocations).sum::<usize>();
        let snap = formats::load_snapshot(&path).unwrap();
        let in_trace = snap
            .trace(r.device)
            .iter()
            .filter(|e| e.action == Action::Alloc)
            .count();
        assert_eq!(allocs, in_trace, "{name}");
        println!(
            "{name}: {} modules, {} bytes at the peak",
            r.modules.len(),
            bytes_at_peak(&r)
        );
    }
    against_measured
}

#[test]
fn modules_add_up_to_the_measured_peak_on_every_bundled_snapshot() {
    let checked = check_folder(&common::fixture("memsnap"));
    assert_eq!(checked, 10);

    // `collect`'s snapshot against the allocator's own counter in the run's results file.
    let results: serde_json::Value = {
        let file = std::fs::File::open(common::fixture(
            "collect/collect_small_ctx128_train_fp32.json.gz",
        ))
        .unwrap();
        serde_json::from_reader(flate2::read::GzDecoder::new(file)).unwrap()
    };
    let truth = results["results"][0]["memory"]["allocator"]["max_allocated_bytes"]
        .as_u64()
        .unwrap();
    let r = report(&common::fixture(
        "collect/collect_small_ctx128_train_fp32.pickle.gz",
    ));
    assert_eq!(bytes_at_peak(&r), truth);
    // Its rows are the module paths `collect` records.
    let names: Vec<&str> = r.modules.iter().map(|m| m.name.as_str()).collect();
    for path in ["lm_head", "layers.0.attn.scores", "layers.11.ffn.swiglu"] {
        assert!(names.contains(&path), "{path}: {names:?}");
    }
}

#[test]
#[cfg_attr(
    no_shared_ours,
    ignore = "needs ../shared/fixtures/ours beside the checkout"
)]
fn modules_add_up_to_the_measured_peak_on_the_shared_snapshots() {
    let Some(dir) = common::shared("ours/memsnap") else {
        return;
    };
    assert_eq!(check_folder(&dir), 10);
}

#[test]
#[cfg_attr(
    no_shared_public,
    ignore = "needs ../shared/fixtures/public beside the checkout"
)]
fn modules_add_up_to_the_peak_on_the_public_snapshots() {
    // PyTorch 2.2-era (no times), 2.6 and 2.11; a Hugging Face model through accelerate's
    // hooks, peft and bitsandbytes; CS336 models of two students.
    let Some(dir) = common::shared("public/memsnap") else {
        return;
    };
    check_folder(&dir);
    // The Hugging Face model's rows are the lines of its modelling code, not the libraries
    // that wrap its layers.
    let r = report(&dir.join("ftcourse__memory_snapshot.pickle.gz"));
    let named: Vec<&str> = r
        .modules
        .iter()
        .map(|m| m.name.as_str())
        .filter(|n| !n.starts_with('('))
        .collect();
    assert!(named[0].starts_with("modeling_llama.py:"), "{named:?}");
    for lib in ["hooks.py", "_functions.py", "layer.py", "modules.py"] {
        assert!(
            named.iter().all(|n| !n.starts_with(lib)),
            "{lib}: {named:?}"
        );
    }
}

/// What the model's source says: its sizes, the batch of the memory snapshots, and the line
/// numbers of the FFN's activation and of `Linear.forward`.
struct Model {
    d_model: u64,
    d_ff: u64,
    layers: u64,
    heads: u64,
    batch: u64,
    ffn_line: usize,
    linear_line: usize,
}

fn model(size: &str) -> Model {
    let text = std::fs::read_to_string(common::root().join("scripts/reference/torch_ref.py"))
        .expect("the script that made the snapshots");
    let line_of = |needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("`{needle}` in torch_ref.py"))
            + 1
    };
    let config = text
        .lines()
        .flat_map(|l| l.split("), "))
        .find_map(|part| part.trim().strip_prefix(&format!("\"{size}\": (")))
        .expect("the size in CONFIGS");
    let dims: Vec<u64> = config
        .trim_end_matches([')', ','])
        .split(',')
        .map(|x| x.trim().parse().unwrap())
        .collect();
    // The token ids of the `memsnap` run: `torch.randint(0, vocab, (batch, a.ctx), ...)`.
    let memsnap = &text[text.find("a.what == \"memsnap\"").unwrap()..];
    let ids = "torch.randint(0, 10000, (";
    let batch = memsnap[memsnap.find(ids).unwrap() + ids.len()..]
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    Model {
        d_model: dims[0],
        d_ff: dims[1],
        layers: dims[2],
        heads: dims[3],
        batch,
        ffn_line: line_of("torch.nn.functional.silu("),
        linear_line: line_of("def forward(s, x): return torch.einsum"),
    }
}

/// Bytes at the peak of the rows of torch_ref.py's functions `functions`.
fn rows_of(r: &MemoryReport, functions: &[&str]) -> u64 {
    r.modules
        .iter()
        .filter(|m| {
            m.name.starts_with("torch_ref.py:")
                && functions.iter().any(|f| m.name.ends_with(&format!(" {f}")))
        })
        .map(|m| m.bytes_at_peak)
        .sum()
}

fn row(r: &MemoryReport, name: &str) -> u64 {
    r.modules
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no row {name} in {}", r.label))
        .bytes_at_peak
}

/// Attention (the rows of `softmax` and `sdpa`) and the FFN line at the peak, after checking
/// both against the shapes of a run at context `t`.
fn attention_and_ffn(m: &Model, r: &MemoryReport, t: u64) -> (u64, u64) {
    const F32: u64 = 4;
    let (l, b, h) = (m.layers, m.batch, m.heads);
    // The FFN line, per layer: SiLU's output and the gated product (d_ff wide), and the
    // residual sum (d_model wide), all kept for the backward pass.
    let ffn = row(r, &format!("torch_ref.py:{} forward", m.ffn_line));
    assert_eq!(
        ffn,
        l * b * t * (2 * m.d_ff + m.d_model) * F32,
        "{}",
        r.label
    );
    // Softmax keeps two score matrices per head and layer (the exponentials and the
    // probabilities), and a value or an index per row of them.
    let scores = rows_of(r, &["softmax"]);
    let matrices = 2 * l * b * h * t * t * F32;
    assert!(
        scores >= matrices && scores < matrices + l * b * h * t * 16,
        "{}: softmax {scores}, two score matrices per layer {matrices}",
        r.label
    );
    (rows_of(r, &["softmax", "sdpa"]), ffn)
}

#[test]
fn attention_scores_dominate_the_long_context_step() {
    let m = model("medium");
    let r = report(&common::fixture(
        "memsnap/memsnap_medium_ctx512_train_fp32.pickle.gz",
    ));
    let (attention, ffn) = attention_and_ffn(&m, &r, 512);
    let linear = row(&r, &format!("torch_ref.py:{} forward", m.linear_line));
    // Attention holds more than the FFN's activations and more than every projection's
    // output together, and more than any other line of the model.
    assert!(
        attention > ffn && attention > linear,
        "{attention} {ffn} {linear}"
    );
    let other = r
        .modules
        .iter()
        .filter(|x| !x.name.starts_with('(') && !x.name.ends_with(" softmax"))
        .filter(|x| !x.name.ends_with(" sdpa"))
        .map(|x| x.bytes_at_peak)
        .max()
        .unwrap();
    assert!(attention > other, "{attention} {other}");
    // The largest rows of the model are the FFN line, the projections and the two softmax lines.
    let top: Vec<&str> = r
        .modules
        .iter()
        .filter(|x| !x.name.starts_with('('))
        .take(4)
        .map(|x| x.name.as_str())
        .collect();
    let expected = [
        format!("torch_ref.py:{} forward", m.ffn_line),
        format!("torch_ref.py:{} forward", m.linear_line),
    ];
    for e in &expected {
        assert!(top.contains(&e.as_str()), "{e}: {top:?}");
    }
    assert_eq!(
        top.iter().filter(|n| n.ends_with(" softmax")).count(),
        2,
        "{top:?}"
    );
}

#[test]
fn attention_outgrows_the_ffn_as_the_context_grows() {
    let m = model("medium");
    let mut ratios = Vec::new();
    for t in [128, 256, 512] {
        let r = report(&common::fixture(&format!(
            "memsnap/memsnap_medium_ctx{t}_forward_fp32.pickle.gz"
        )));
        let (attention, ffn) = attention_and_ffn(&m, &r, t);
        ratios.push(attention as f64 / ffn as f64);
    }
    // Scores grow with the square of the context, the FFN linearly: attention holds less than
    // the FFN at 128, more at 512.
    assert!(ratios[0] < 1.0 && ratios[2] > 1.0, "{ratios:?}");
    assert!(ratios.windows(2).all(|w| w[0] < w[1]), "{ratios:?}");
}

#[test]
fn snapshots_with_less_in_their_stacks_still_add_up() {
    let path = common::fixture("memsnap/memsnap_small_ctx128_train_fp32.pickle.gz");
    let snap = formats::load_snapshot(&path).unwrap();
    let full = report_of(&snap, "full");

    // Python frames only, as PyTorch 2.10 and later or `stacks="python"` record: the rows that
    // name the model keep their bytes; the autograd engine's allocations lose their stack.
    let mut python = snap.clone();
    let is_python: Vec<bool> = python.frames.frames.iter().map(|f| f.is_python()).collect();
    for s in &mut python.frames.stacks {
        s.retain(|&f| is_python[f as usize]);
    }
    let cut = report_of(&python, "python");
    assert_eq!(bytes_at_peak(&cut), cut.peak_allocated_bytes);
    for m in full.modules.iter().filter(|m| !m.name.starts_with('(')) {
        let same = cut.modules.iter().find(|c| c.name == m.name);
        assert_eq!(same, Some(m), "{}", m.name);
    }
    assert!(full.modules.iter().any(|m| m.name == NO_MODULE_FRAME));
    assert!(cut.modules.iter().all(|m| m.name != NO_MODULE_FRAME));

    // No stacks at all: every block is in a fixed row, and they still add up.
    let mut bare = snap.clone();
    for t in &mut bare.traces {
        *t = t
            .iter()
            .map(|e| TraceEntry {
                stack: StackId::EMPTY,
                ..e
            })
            .collect();
    }
    for b in bare.segments.iter_mut().flat_map(|s| &mut s.blocks) {
        b.stack = StackId::EMPTY;
    }
    let r = report_of(&bare, "bare");
    assert_eq!(r.peak_allocated_bytes, full.peak_allocated_bytes);
    assert_eq!(bytes_at_peak(&r), r.peak_allocated_bytes);
    let names: Vec<&str> = r.modules.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, vec![BEFORE_RECORDING, NO_STACK]);

    // No trace (the oldest layout): the end state is the peak.
    let mut end_state = snap;
    end_state.traces.clear();
    let r = report_of(&end_state, "end state");
    assert_eq!(bytes_at_peak(&r), r.peak_allocated_bytes);
    assert_eq!(r.peak_allocated_bytes, r.end_allocated_bytes);
}

#[test]
fn memory_by_module_on_the_command_line() {
    let file = common::fixture("memsnap/memsnap_medium_ctx512_train_fp32.pickle.gz");
    let file = file.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().to_str().unwrap();
    let out = common::analyze(&[
        "memory", "--by", "module", "--top", "5", file, "--plot", plots, "--png", "-q",
    ]);
    common::assert_success(&out);
    let text = common::text(&out.stdout);
    assert!(text.contains("Memory by module: memsnap_medium_ctx512_train_fp32"));
    assert!(text.contains("(14 more modules)"), "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
    let png = dir
        .path()
        .join("memsnap_medium_ctx512_train_fp32.modules.png");
    assert!(std::fs::metadata(png).unwrap().len() > 10_000);

    let v = common::json_stdout(&common::analyze(&[
        "memory", "--by", "module", "-f", "json", file,
    ]));
    let modules = v["modules"].as_array().unwrap();
    let sum: u64 = modules
        .iter()
        .map(|m| m["bytes_at_peak"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, v["peak_allocated_bytes"].as_u64().unwrap());
    for key in ["name", "bytes_at_peak", "allocations", "bytes_allocated"] {
        assert!(modules.iter().all(|m| !m[key].is_null()), "{key}");
    }

    // Several files: one object per snapshot; `--compare` pairs runs and has no module view.
    let other = common::fixture("memsnap/memsnap_small_ctx128_train_fp32.pickle.gz");
    let v = common::json_stdout(&common::analyze(&[
        "memory",
        "--by",
        "module",
        "-f",
        "json",
        file,
        other.to_str().unwrap(),
    ]));
    assert_eq!(v["snapshots"].as_array().unwrap().len(), 2);
    let out = common::analyze(&["memory", "--by", "module", "--compare", file, file]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_report_has_memory_by_module_adding_up_to_each_peak() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("report");
    let mut args = vec!["report".to_owned()];
    let mut peaks = BTreeMap::new();
    for (size, ctx) in [("small", 128), ("medium", 512)] {
        let file = common::fixture(&format!(
            "memsnap/memsnap_{size}_ctx{ctx}_train_fp32.pickle.gz"
        ));
        // Tables name runs as `medium ctx512 train fp32`.
        peaks.insert(
            format!("Memory by module: {size} ctx{ctx} train fp32"),
            report(&file).peak_allocated_bytes,
        );
        args.push(file.display().to_string());
    }
    args.extend(["-o".into(), out_dir.display().to_string(), "-q".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    common::assert_success(&common::analyze(&args));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("report.json")).unwrap())
            .unwrap();
    let section = report["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "memory_by_module")
        .expect("a memory-by-module section");
    let mut checked = 0;
    for t in section["tables"].as_array().unwrap() {
        let Some(&peak) = t["title"].as_str().and_then(|title| peaks.get(title)) else {
            continue;
        };
        // The top rows and the rest add up to the peak.
        let sum: u64 = t["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["bytes at peak"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, peak, "{}", t["title"]);
        checked += 1;
    }
    assert_eq!(checked, 2);
    assert!(out_dir
        .join("memory_modules_medium_ctx512_train_fp32.png")
        .exists());
}
