//! Peaks of the bundled memory snapshots against the true `torch.cuda.max_memory_allocated()`
//! measured on the GPU right after each recorded step (`fixtures/memsnap/peaks.jsonl`).

use crate::common;

use std::sync::OnceLock;

use analyze::formats;
use analyze::memory::categories::{self, Rules};
use analyze::memory::phases::Phase;
use analyze::memory::summary::{analyze, MemoryOptions, MemoryReport};

fn peaks() -> Vec<(String, u64)> {
    common::measured_peaks(&common::fixture("memsnap/peaks.jsonl"))
}

fn analyse(file: &str) -> MemoryReport {
    let snap = formats::load_snapshot(&common::fixture(&format!("memsnap/{file}"))).unwrap();
    let opts = MemoryOptions {
        label: file.to_owned(),
        ..MemoryOptions::default()
    };
    analyze(&snap, &Rules::builtin(), &opts).report
}

/// Every snapshot analysed once, shared by the tests.
fn report(file: &str) -> &'static MemoryReport {
    static REPORTS: OnceLock<Vec<(String, MemoryReport)>> = OnceLock::new();
    let all = REPORTS.get_or_init(|| {
        peaks()
            .into_iter()
            .map(|(f, _)| (f.clone(), analyse(&f)))
            .collect()
    });
    &all.iter()
        .find(|(f, _)| f == file)
        .expect("a file of peaks.jsonl")
        .1
}

#[test]
fn peak_allocated_is_never_above_max_memory_allocated_and_at_most_3_percent_below() {
    let peaks = peaks();
    assert_eq!(peaks.len(), 10);
    for (file, truth) in peaks {
        let r = report(&file);
        let got = r.peak_allocated_bytes;
        assert!(
            got <= truth,
            "{file}: {got} above max_memory_allocated {truth}"
        );
        assert!(
            got as f64 >= truth as f64 * 0.97,
            "{file}: {got} more than 3% below {truth}"
        );
        // What the replay achieves on these files: the allocator's own count, to the byte.
        assert_eq!(got, truth, "{file}");
    }
}

#[test]
fn the_replay_ends_where_the_segments_say() {
    for (file, _) in peaks() {
        let r = report(&file);
        assert_eq!(r.checks.end_mismatch_bytes, 0, "{file}");
        assert_eq!(r.checks.unmatched_frees, 0, "{file}");
        assert_eq!(r.checks.size_fallbacks, 0, "{file}");
    }
}

#[test]
fn training_steps_show_forward_backward_and_optimizer_in_order() {
    for (file, _) in peaks() {
        let r = report(&file);
        let phases: Vec<Phase> = r.phases.iter().map(|p| p.phase).collect();
        if file.contains("_train_") {
            assert_eq!(
                phases,
                vec![Phase::Forward, Phase::Backward, Phase::Optimizer],
                "{file}"
            );
            let fwd = r.forward_peak_bytes.unwrap();
            assert!(fwd <= r.peak_allocated_bytes, "{file}");
        } else {
            assert_eq!(phases, vec![Phase::Forward], "{file}");
            assert_eq!(r.forward_peak_bytes, Some(r.peak_allocated_bytes), "{file}");
        }
    }
}

#[test]
fn categories_at_the_peak_add_up_and_name_the_model_state() {
    let r = report("memsnap_medium_ctx128_train_fp32.pickle.gz");
    let total: u64 = r.categories_at_peak.iter().map(|c| c.bytes).sum();
    assert_eq!(total, r.peak_allocated_bytes);
    assert_eq!(r.peak_phase, Some(Phase::Optimizer));
    let get = |name: &str| {
        r.categories_at_peak
            .iter()
            .find(|c| c.category == name)
            .map_or(0, |c| c.count)
    };
    // 24 layers x 9 weights + embedding + final norm + head = 219 parameter tensors, each with a
    // gradient and Adam's two moments.
    assert_eq!(get(categories::PARAMETERS), 219);
    assert_eq!(get(categories::GRADIENTS), 219);
    assert_eq!(get(categories::OPTIMIZER_STATE), 438);

    // In the forward-heavy moment of a long context, softmax and FFN activations dominate.
    let r = report("memsnap_medium_ctx512_forward_fp32.pickle.gz");
    let top = r
        .categories_at_peak
        .iter()
        .filter(|c| c.category != categories::BEFORE_RECORDING)
        .max_by_key(|c| c.bytes)
        .unwrap();
    assert!(
        top.category == categories::FFN || top.category == categories::SOFTMAX,
        "{top:?}"
    );
}

#[test]
fn json_has_the_promised_fields() {
    let r = report("memsnap_small_ctx128_train_fp32.pickle.gz");
    let v = serde_json::to_value(r).unwrap();
    for k in [
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "peak_time_us",
        "top_allocations",
    ] {
        assert!(!v[k].is_null(), "{k} missing");
    }
    let top = &v["top_allocations"][0];
    for k in ["size", "frame", "category"] {
        assert!(!top[k].is_null(), "top_allocations[0].{k} missing");
    }
    assert_eq!(v["peak_allocated_bytes"], 2_678_320_640u64);
}
