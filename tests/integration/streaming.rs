//! The two readings of an export, streamed (its kernel and API tables read as rows, never
//! loaded) and loaded whole: on every export of the fixtures the stats reports gathered from
//! each are the same, and the one profile engine fed by either source gives the same profile,
//! to the last digit, so the streamed reader hands over every record the loader reads.

use analyze::formats::load_trace;
use analyze::kernels::class::Classifier;
use analyze::profile::{self, Attribution, ProfileOptions};
use analyze::render::{render_to_string, Format};
use analyze::stats::{self, Report};

use crate::common;

/// One export of each shape the sources must agree on: one process on one GPU with NVTX
/// steps, two ranks on two GPUs, CUDA graphs traced as whole executions, and `collect`'s own
/// writer. (The golden tests read every fixture through the streamed source.)
const EXPORTS: &[&str] = &[
    "nsys/torch_small_ctx128_train_fp32.sqlite.gz",
    "captures/torch_ddp2_small_l4_ctx128_train_fp32.sqlite.gz",
    "captures/torch_graphs_graph_small_l4_ctx128_train_fp32.sqlite.gz",
    "collect/collect_small_ctx128_train_fp32.sqlite.gz",
];

#[test]
fn streamed_stats_equal_the_stats_of_the_loaded_trace() {
    let every = Report::parse_list(&Report::NAMES.join(",")).unwrap();
    let one = Report::parse_list("nvtx_kern_sum:base").unwrap();
    for file in EXPORTS {
        let path = common::fixture(file);
        let trace = load_trace(&path).unwrap();
        for named in [&every, &one] {
            let (loaded, skipped) = stats::document(&trace, named);
            let (streamed, streamed_skipped) = stats::document_file(&path, named).unwrap();
            assert_eq!(skipped, streamed_skipped, "{file}");
            for format in [Format::Table, Format::Json] {
                assert_eq!(
                    render_to_string(format, &loaded),
                    render_to_string(format, &streamed),
                    "{file}"
                );
            }
        }
    }
}

#[test]
fn streamed_profiles_equal_the_profiles_of_the_loaded_trace() {
    let classifier = Classifier::builtin();
    let thread = ProfileOptions {
        attribution: Attribution::Thread,
        top: 3,
        ..ProfileOptions::default()
    };
    let phases = ProfileOptions {
        phases: vec![
            "forward".into(),
            "nope".into(),
            "aten::mm".into(),
            "forward".into(),
        ],
        steps: regex::Regex::new("^step_[13]$").unwrap(),
        ..ProfileOptions::default()
    };
    for file in EXPORTS {
        let path = common::fixture(file);
        let trace = load_trace(&path).unwrap();
        for opts in [&ProfileOptions::default(), &thread, &phases] {
            let loaded = profile::profile(&trace, &classifier, opts);
            let streamed = profile::profile_file(&path, &classifier, opts).unwrap();
            assert_eq!(
                serde_json::to_string(&loaded).unwrap(),
                serde_json::to_string(&streamed).unwrap(),
                "{file}"
            );
            assert_eq!(
                render_to_string(Format::Table, &loaded.document()),
                render_to_string(Format::Table, &streamed.document()),
                "{file}"
            );
        }
    }
}
