//! The integration suite, compiled as one test binary: every file of this folder is a module
//! here, so the suite links once and [`every_file_of_the_suite_is_a_module`] fails when a file
//! is added without its `mod` line (it would otherwise never compile). Tests that need a GPU are
//! the second binary, `tests/gpu`.
//!
//! Run one file's tests with `cargo test --test integration kineto::`.

#[path = "../common/mod.rs"]
mod common;

mod breakdown;
mod caching_allocator;
mod cli_bad_input;
mod cli_limits;
mod cli_stats;
mod collect_attention;
mod collect_cli;
mod collect_fixtures;
mod collect_plan;
mod collect_snapshots;
mod collect_writers;
mod compare;
mod compare_work;
mod cuda_graphs;
mod ddp;
mod emit_nvtx;
mod export;
mod formats;
mod fuzz_engine;
mod fuzz_gzip;
mod fuzz_kineto;
mod fuzz_many;
mod fuzz_nsys;
mod fuzz_pickle;
mod fuzz_snapshot;
mod kernel_classes;
mod kineto;
mod memory_categories;
mod memory_cli;
mod memory_frame_fields;
mod memory_modules;
mod memory_peaks;
mod memory_public;
mod mfu;
mod nsys_ingest;
mod nsys_public;
mod nsys_stats_golden;
mod nsys_stats_trace;
mod operators;
mod outputs;
mod outputs_parquet;
mod profile;
mod profiler_steps;
mod ranks;
mod report;
mod report_options;
mod run_collect;
mod streaming;

/// Every `.rs` file beside this one is declared above.
#[test]
fn every_file_of_the_suite_is_a_module() {
    let dir = common::root().join("tests/integration");
    let main = std::fs::read_to_string(dir.join("main.rs")).expect("tests/integration/main.rs");
    let declared: Vec<&str> = main
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("tests/integration") {
        let path = entry.expect("a directory entry").path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs")
            && stem != "main"
            && !declared.contains(&stem)
        {
            missing.push(stem.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "files of tests/integration without a `mod` line in main.rs, so never compiled: {missing:?}"
    );
}
