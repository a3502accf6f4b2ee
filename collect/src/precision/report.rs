//! What `collect precision` prints: one table per experiment that ran ([`document`]), with
//! PyTorch's answers beside collect's, and, as its JSON, the rows of the results file
//! (`fixtures/collect/precision_h200.json`): `{"device", "rows": [{"experiment", "case",
//! "value", ...}]}`, one row per number. Values that are not finite are written as the strings
//! `inf`, `-inf` and `NaN`. Pure.

use analyze::render::{Cell, Document, Section, Table};
use serde_json::{json, Value};

use super::accumulate::{self, Sum};
use super::layernorm::{self, Row};
use super::pytorch::{self, TorchReference};
use super::toy::ToyRun;
use super::Results;
use crate::autocast::Float;

/// A number for JSON: finite values as numbers, the others as `inf`, `-inf`, `NaN`.
fn number(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or_else(|| Value::from(non_finite(v)), Value::Number)
}

fn non_finite(v: f64) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "inf"
    } else {
        "-inf"
    }
}

/// `v` with `digits` significant digits in fixed notation (`999.99` to 4 digits is `1000`).
fn fixed(v: f64, digits: i32) -> String {
    let decimals = |a: f64| (digits - 1 - a.log10().floor() as i32).max(0) as usize;
    let d = decimals(v.abs());
    let s = format!("{v:.d$}");
    // Rounding may carry into a new leading digit: one decimal fewer then.
    let rounded: f64 = s.parse().unwrap_or(v);
    let d2 = decimals(rounded.abs());
    if d2 < d {
        format!("{v:.d2$}")
    } else {
        s
    }
}

/// A value of any size with four significant digits (`0.01001`, `9.001e4`), or `inf`/`NaN`.
fn significant(v: f64) -> Cell {
    if !v.is_finite() {
        return Cell::text(non_finite(v));
    }
    let a = v.abs();
    if a == 0.0 {
        Cell::text("0")
    } else if (1e-3..1e4).contains(&a) {
        Cell::text(fixed(v, 4))
    } else {
        Cell::text(format!("{v:.3e}"))
    }
}

/// A relative error with two significant digits (`4.9e-3`, `0.60`, `5.1`), or `inf`/`NaN`.
fn error(v: f64) -> Cell {
    if !v.is_finite() {
        Cell::text(non_finite(v))
    } else if v == 0.0 {
        Cell::text("0")
    } else if v < 0.01 {
        Cell::text(format!("{v:.1e}"))
    } else {
        Cell::text(fixed(v, 2))
    }
}

/// Machine epsilon as `2^-10 (9.77e-4)`.
fn epsilon(f: Float) -> String {
    format!("2^-{} ({:.2e})", f.fraction_bits(), f.epsilon())
}

fn accumulate_section(sums: &[Sum], torch: &TorchReference) -> Section {
    let mut t = Table::new([
        "case",
        "sum",
        "PyTorch",
        "error (sum - 10)",
        "eps (accumulator)",
        "eps (value)",
    ]);
    for s in sums {
        t.push(vec![
            Cell::text(s.case.name),
            Cell::text(s.printed()),
            torch
                .accumulate(s.case.name)
                .map_or(Cell::Missing, |v| Cell::text(format!("{v:.8}"))),
            Cell::text(format!("{:+.8}", s.error())),
            Cell::text(epsilon(s.case.accumulator)),
            Cell::text(epsilon(s.case.value)),
        ]);
    }
    Section {
        title: Some(format!(
            "Accumulation: {} added {} times",
            accumulate::VALUE,
            accumulate::STEPS
        )),
        table: t,
        notes: vec![
            "Each add is computed in fp32 and rounded to the accumulator's format, as PyTorch's \
             `s += x` does; sums printed with 8 decimals as the assignment prints them. eps is \
             the format's machine epsilon (torch.finfo(dtype).eps)."
                .to_owned(),
        ],
    }
}

fn toy_section(runs: &[ToyRun], torch: &TorchReference) -> Section {
    let mut t = Table::new(["autocast", "tensor", "collect", "PyTorch", "same"]);
    for run in runs {
        for (tensor, dtype) in run.dtypes() {
            let theirs = torch.toy_dtype(run.autocast, tensor);
            t.push(vec![
                Cell::text(run.autocast.as_str()),
                Cell::text(tensor),
                Cell::text(dtype.torch_name()),
                theirs.map_or(Cell::Missing, Cell::text),
                Cell::text(if theirs == Some(dtype.torch_name()) {
                    "yes"
                } else {
                    "NO"
                }),
            ]);
        }
    }
    let losses: Vec<String> = runs
        .iter()
        .map(|r| format!("{} {:.6}", r.autocast, r.outputs.loss))
        .collect();
    Section {
        title: Some("ToyModel under autocast: the dtype of each tensor".to_owned()),
        table: t,
        notes: vec![
            "fc1 (20->10) -> ReLU -> LayerNorm(10) -> fc2 (10->5), batch 8, each operation in the \
             format collect's autocast policy gives it; `fc1 output` is after the ReLU, \
             `gradients` is fc1's weight gradient."
                .to_owned(),
            format!("Loss: {}.", losses.join(", ")),
        ],
    }
}

fn layernorm_section(rows: &[Row]) -> Section {
    let mut t = Table::new([
        "input",
        "format",
        "mean",
        "mean error (sigma)",
        "var (naive)",
        "error",
        "var (two-pass)",
        "error",
        "output error (naive)",
        "output error (two-pass)",
    ]);
    let mut last_input = None;
    for r in rows {
        if last_input != Some(r.input.name) {
            last_input = Some(r.input.name);
            let m = Cell::Missing;
            t.push(vec![
                Cell::text(r.input.name),
                Cell::text("fp64"),
                significant(r.reference.mean),
                m.clone(),
                significant(r.reference.var),
                m.clone(),
                significant(r.reference.var),
                m.clone(),
                m.clone(),
                m,
            ]);
        }
        let c = &r.computed;
        t.push(vec![
            Cell::text(r.input.name),
            Cell::text(r.format.as_str()),
            significant(c.mean as f64),
            error(r.mean_error()),
            significant(c.var_naive as f64),
            error(r.var_naive_error()),
            significant(c.var_two_pass as f64),
            error(r.var_two_pass_error()),
            error(r.output_naive_error()),
            error(r.output_two_pass_error()),
        ]);
    }
    let mut notes = vec![format!(
        "Rows of {} fp32 values, cast to the format, then every operation rounded to it (sums as \
         a tree); fp64 is the reference from the fp32 row. Errors: the mean's in units of the \
         row's standard deviation, the variances' relative, the output's as max|y - y64| / \
         max|y64| (1 when the output is all zeros). var (naive) is E[x^2] - E[x]^2, var \
         (two-pass) the mean of (x - mean)^2; eps {}.",
        layernorm::WIDTH,
        layernorm::EPS
    )];
    notes.extend(
        layernorm::INPUTS
            .iter()
            .map(|i| format!("{}: {}.", i.name, i.about)),
    );
    Section {
        title: Some("LayerNorm in reduced precision, against fp64".to_owned()),
        table: t,
        notes,
    }
}

fn json_rows(r: &Results, torch: &TorchReference) -> Vec<Value> {
    let mut rows = Vec::new();
    for s in &r.accumulate {
        rows.push(json!({
            "experiment": "accumulate",
            "case": s.case.name,
            "value": s.value as f64,
            "printed": s.printed(),
            "error": s.error(),
            "accumulator": s.case.accumulator.as_str(),
            "values": s.case.value.as_str(),
            "epsilon": s.case.accumulator.epsilon(),
            "torch": torch.accumulate(s.case.name),
        }));
    }
    for run in &r.toy {
        for (tensor, dtype) in run.dtypes() {
            rows.push(json!({
                "experiment": "toy",
                "autocast": run.autocast.as_str(),
                "case": tensor,
                "value": dtype.torch_name(),
                "torch": torch.toy_dtype(run.autocast, tensor),
            }));
        }
    }
    for row in &r.layernorm {
        let c = &row.computed;
        let stat = |statistic: &str, value: f64, reference: Option<f64>, error: f64| {
            json!({
                "experiment": "layernorm",
                "case": row.input.name,
                "format": row.format.as_str(),
                "statistic": statistic,
                "value": number(value),
                "reference": reference.map(number),
                "error": number(error),
            })
        };
        rows.push(stat(
            "mean",
            c.mean as f64,
            Some(row.reference.mean),
            row.mean_error(),
        ));
        rows.push(stat(
            "variance (naive)",
            c.var_naive as f64,
            Some(row.reference.var),
            row.var_naive_error(),
        ));
        rows.push(stat(
            "variance (two-pass)",
            c.var_two_pass as f64,
            Some(row.reference.var),
            row.var_two_pass_error(),
        ));
        for (statistic, e) in [
            (
                "output max relative error (naive)",
                row.output_naive_error(),
            ),
            (
                "output max relative error (two-pass)",
                row.output_two_pass_error(),
            ),
        ] {
            rows.push(stat(statistic, e, None, e));
        }
    }
    rows
}

/// The tables of the experiments that ran, and the results file's rows as the JSON.
pub fn document(r: &Results) -> Document {
    let torch = pytorch::reference();
    let mut sections = Vec::new();
    if !r.accumulate.is_empty() {
        sections.push(accumulate_section(&r.accumulate, &torch));
    }
    if !r.toy.is_empty() {
        sections.push(toy_section(&r.toy, &torch));
    }
    if !r.layernorm.is_empty() {
        sections.push(layernorm_section(&r.layernorm));
    }
    if let Some(first) = sections.first_mut() {
        first.title = first
            .title
            .take()
            .map(|t| format!("{t} (computed on: {})", r.source));
    }
    Document {
        sections,
        json: Some(json!({
            "device": r.source,
            "torch_reference": format!("PyTorch {} on {}", torch.torch, torch.device),
            "rows": json_rows(r, &torch),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::{run, Engine, Experiment};
    use analyze::render::{render_to_string, Format};

    #[test]
    fn the_json_has_the_results_file_shape() {
        let r = run(Engine::Cpu, Experiment::All).unwrap();
        let doc = document(&r);
        let v: Value = serde_json::from_str(&render_to_string(Format::Json, &doc)).unwrap();
        assert_eq!(v["device"], "CPU emulation");
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 7 + 12 + 12 * 5);
        for row in rows {
            assert!(
                row["experiment"].is_string() && row["case"].is_string(),
                "{row}"
            );
            assert!(!row["value"].is_null(), "{row}");
        }
        assert_eq!(rows[1]["printed"], "9.95312500");
        assert_eq!(rows[1]["value"], 9.953125);
        assert_eq!(rows[1]["torch"], 9.953125);
        assert_eq!(rows[7 + 2]["value"], "float32"); // fp16: layer norm output
        assert_eq!(rows[7 + 2]["torch"], "float32");
        // fp16's variance of N(0, 16²) overflows: a string, not a number.
        assert!(rows.iter().any(|r| r["case"] == "N(0,16^2)"
            && r["format"] == "fp16"
            && r["statistic"] == "variance (two-pass)"
            && r["value"] == "inf"));
    }

    #[test]
    fn tables_show_both_sides() {
        let r = run(Engine::Cpu, Experiment::All).unwrap();
        let text = render_to_string(Format::Markdown, &document(&r));
        assert!(text.contains("| fp32 += bf16 as fp32 | 10.00976562 | 10.00976562 | +0.00976562 |"));
        assert!(text.contains("(computed on: CPU emulation)"));
        assert!(!text.contains("| NO |"));
        assert_eq!(text.matches("| fp64 |").count(), layernorm::INPUTS.len());
    }

    #[test]
    fn cells_print_any_magnitude() {
        assert_eq!(significant(90012.5).display(), "9.001e4");
        assert_eq!(significant(0.010014).display(), "0.01001");
        assert_eq!(significant(1000.0001).display(), "1000");
        assert_eq!(significant(-0.0312).display(), "-0.03120");
        assert_eq!(significant(f64::INFINITY).display(), "inf");
        assert_eq!(error(f64::NAN).display(), "NaN");
        assert_eq!(significant(999.99).display(), "1000");
        assert_eq!(error(0.0049).display(), "4.9e-3");
        assert_eq!(error(0.6014).display(), "0.60");
        assert_eq!(error(1.0).display(), "1.0");
        assert_eq!(error(5.12).display(), "5.1");
        assert_eq!(epsilon(Float::F16), "2^-10 (9.77e-4)");
    }
}
