//! `collect attention` and `--attention` where no GPU is needed: the help names the grid it
//! runs, bad values are refused in one line before any GPU work, a machine without a device says
//! so, and `collect plan --attention flash` plans the flash path (and plans, with a note, a
//! configuration the naive path cannot run).

use serde_json::Value;

use crate::run_collect::{collect, configuration, plan};

fn one_error_line(out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("error: "), "{stderr}");
    stderr
}

#[test]
fn the_help_names_the_default_grid_and_the_presets() {
    let out = collect(&["attention", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for expected in [
        "--preset",
        "flash-benchmarking",
        "leaderboard",
        "--impl",
        "--no-causal",
        "256,1024,4096,8192,16384",
        "as the reference",
        "--max-seconds",
    ] {
        assert!(help.contains(expected), "{expected} missing from:\n{help}");
    }
}

#[test]
fn bad_attention_values_are_refused_before_any_gpu_work() {
    let e = one_error_line(&collect(&["attention", "--preset", "fastest"]));
    assert!(e.contains("unknown preset `fastest`"), "{e}");
    let e = one_error_line(&collect(&["attention", "--impl", "sdpa"]));
    assert!(e.contains("unknown attention `sdpa`"), "{e}");
    let e = one_error_line(&collect(&["attention", "--d", "15"]));
    assert!(e.contains("even widths"), "{e}");
    let e = one_error_line(&collect(&["bench", "--attention", "fast"]));
    assert!(e.contains("unknown attention `fast`"), "{e}");
}

#[test]
#[cfg_attr(not(no_gpu), ignore = "checks the answer of a machine without a GPU")]
fn attention_without_a_device_says_so_and_exits_2() {
    if let Ok(n) = collect::gpu::device::probe() {
        eprintln!("skipped: this machine has {n} CUDA device(s)");
        return;
    }
    let out = collect(&["attention", "--preset", "leaderboard"]);
    let e = one_error_line(&out);
    assert!(e.starts_with("error: no CUDA device found ("), "{e}");
    assert!(out.stdout.is_empty());
}

#[test]
fn the_plan_knows_both_attention_paths() {
    let args = configuration("small", "1024", "4", "train", "bf16");
    let naive = plan(&args);
    let flash = plan(&[&args[..], &["--attention", "flash"]].concat());
    assert_eq!(naive["config"]["attention"], "naive");
    assert_eq!(flash["config"]["attention"], "flash");
    let mem = |v: &Value, k: &str| v["memory"][k].as_u64().unwrap();
    // Naive keeps P, 12 layers x 4 x 12 heads x 1024^2 bf16; flash keeps O and L instead.
    assert_eq!(mem(&naive, "attention"), 12 * 4 * 12 * 1024 * 1024 * 2);
    assert_eq!(
        mem(&flash, "attention"),
        12 * (4 * 1024 * 768 * 2 + 4 * 12 * 1024 * 4)
    );
    assert!(mem(&flash, "peak") < mem(&naive, "peak"));
    assert_eq!(mem(&flash, "parameters"), mem(&naive, "parameters"));
    assert_eq!(flash["flops_per_step"], naive["flops_per_step"]);
}

#[test]
fn a_configuration_naive_cannot_run_is_planned_with_a_note() {
    let args = configuration("2.7B", "8192", "4", "train", "bf16");
    let out = collect(&[&["plan"], &args[..]].concat());
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("This configuration does not run: batch 4 x ctx 8192 gives a tensor of")
            && text.contains("(try --attention flash)"),
        "{text}"
    );
    let flash = collect(&[&["plan"], &args[..], &["--attention", "flash"]].concat());
    assert!(!String::from_utf8_lossy(&flash.stdout).contains("does not run"));
}
