//! Running the `collect` binary from the tests that need no GPU: its output, the JSON of
//! `collect plan`, and the flags that name a configuration.

use std::process::{Command, Output};

use serde_json::Value;

/// `collect` with `args`.
pub fn collect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_collect"))
        .args(args)
        .output()
        .expect("collect runs")
}

/// `collect plan --format json` with `args`; it succeeds, and this is the plan.
pub fn plan(args: &[&str]) -> Value {
    let out = collect(&[&["plan", "--format", "json"], args].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("plan prints JSON")
}

/// The flags that name a configuration: `--size`, `--ctx`, `--batch`, `--mode`, `--precision`.
pub fn configuration<'a>(
    size: &'a str,
    ctx: &'a str,
    batch: &'a str,
    mode: &'a str,
    precision: &'a str,
) -> [&'a str; 10] {
    [
        "--size",
        size,
        "--ctx",
        ctx,
        "--batch",
        batch,
        "--mode",
        mode,
        "--precision",
        precision,
    ]
}
