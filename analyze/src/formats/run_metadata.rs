//! Run metadata: what was measured (model size, context length, batch, mode, precision) and
//! how long the steps took, as the name/value pairs of the `RUN_METADATA` table that `collect`
//! writes beside the nsys tables ([`super::nsys_sqlite::write`]) and that
//! [`super::nsys_sqlite::read`] loads into [`crate::model::trace::Source::run`], where the
//! profile and the report's labels look the keys up ([`head_dim`] reads the head dimension
//! for both). Values are text; numbers are written so that Rust's and Python's parsers read them
//! back exactly. No I/O here.

use std::collections::BTreeMap;

use super::step_times::StepTimes;

/// Keys `collect` writes (a reader should accept others too).
pub mod keys {
    pub const TOOL: &str = "tool";
    pub const MODEL: &str = "model";
    pub const D_MODEL: &str = "d_model";
    pub const D_FF: &str = "d_ff";
    pub const LAYERS: &str = "layers";
    pub const HEADS: &str = "heads";
    pub const VOCAB: &str = "vocab";
    pub const CTX: &str = "ctx";
    pub const BATCH: &str = "batch";
    pub const MODE: &str = "mode";
    pub const PRECISION: &str = "precision";
    pub const WARMUP: &str = "warmup";
    pub const STEPS: &str = "steps";
    /// Comma-separated step times in milliseconds, in step order.
    pub const STEP_TIMES_MS: &str = "step_times_ms";
    pub const STEP_TIME_MEDIAN_MS: &str = "step_time_median_ms";
    pub const STEP_TIME_MEAN_MS: &str = "step_time_mean_ms";
    pub const DEVICE: &str = "device";
    pub const DRIVER: &str = "driver";
    /// The attention implementation: `naive` (scores materialised) or `flash` (FlashAttention-2).
    pub const ATTENTION: &str = "attention";
    /// Whether FP32 matrix products ran in TF32 (`true` or `false`).
    pub const TF32: &str = "tf32";
    /// The FLOPs one step needs by the model's arithmetic (each product counted once).
    pub const MODEL_FLOPS_PER_STEP: &str = "model_flops_per_step";
    /// The FLOPs one step did: the model's, and a forward run again under activation
    /// checkpointing.
    pub const HARDWARE_FLOPS_PER_STEP: &str = "hardware_flops_per_step";
    /// Read, not written: an explicit head dimension, and the head counts other tools name.
    pub const HEAD_DIM: &str = "head_dim";
    pub const NUM_HEADS: &str = "num_heads";
    pub const N_HEADS: &str = "n_heads";
}

/// The attention head dimension that run metadata gives: `head_dim` when set, else `d_model`
/// over the head count (`heads`, as `collect` writes it, else `num_heads`, else `n_heads`) when
/// it divides evenly; `None` when the pairs do not tell. A value of 0 (no heads, no width) is
/// no answer: it is read as absent, so no division ever sees a zero.
pub fn head_dim(run: &BTreeMap<String, String>) -> Option<u32> {
    let int = |k: &str| {
        run.get(k)
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|&n| n > 0)
    };
    int(keys::HEAD_DIM).or_else(|| {
        let d = int(keys::D_MODEL)?;
        let h = int(keys::HEADS)
            .or_else(|| int(keys::NUM_HEADS))
            .or_else(|| int(keys::N_HEADS))?;
        (d % h == 0).then(|| d / h)
    })
}

/// The configuration of one measured run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunDescription {
    /// Size name (`small`, `2.7B`) or `custom`.
    pub model: String,
    pub d_model: u32,
    pub d_ff: u32,
    pub layers: u32,
    pub heads: u32,
    pub vocab: u32,
    pub ctx: u32,
    pub batch: u32,
    /// `forward`, `forward-backward` or `train`.
    pub mode: String,
    /// `fp32` or `bf16`.
    pub precision: String,
}

/// Ordered name/value pairs with unique names.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunMetadata {
    entries: Vec<(String, String)>,
}

impl RunMetadata {
    pub fn new() -> RunMetadata {
        RunMetadata::default()
    }

    /// The pairs for a run's configuration, with `tool` naming the writer.
    pub fn describe(run: &RunDescription) -> RunMetadata {
        let mut m = RunMetadata::new();
        // The workspace gives `collect` and this crate one version.
        m.set(keys::TOOL, concat!("collect ", env!("CARGO_PKG_VERSION")))
            .set(keys::MODEL, &run.model)
            .set(keys::D_MODEL, run.d_model)
            .set(keys::D_FF, run.d_ff)
            .set(keys::LAYERS, run.layers)
            .set(keys::HEADS, run.heads)
            .set(keys::VOCAB, run.vocab)
            .set(keys::CTX, run.ctx)
            .set(keys::BATCH, run.batch)
            .set(keys::MODE, &run.mode)
            .set(keys::PRECISION, &run.precision);
        m
    }

    /// Set `name` (replacing an earlier value, keeping its place).
    pub fn set(&mut self, name: &str, value: impl ToString) -> &mut RunMetadata {
        let value = value.to_string();
        match self.entries.iter_mut().find(|(n, _)| n == name) {
            Some(e) => e.1 = value,
            None => self.entries.push((name.to_owned(), value)),
        }
        self
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The pairs in the order they were first set.
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Record the measured step times (milliseconds, step order): the list, the step count,
    /// the median and the mean.
    pub fn set_step_times_ms(&mut self, times: &[f64]) -> &mut RunMetadata {
        let list: Vec<String> = times.iter().map(|t| format!("{t}")).collect();
        self.set(keys::STEP_TIMES_MS, list.join(","));
        self.set(keys::STEPS, times.len());
        if let Some(summary) = StepTimes::of(times) {
            self.set(keys::STEP_TIME_MEDIAN_MS, summary.median);
            self.set(keys::STEP_TIME_MEAN_MS, summary.mean);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_replaces_in_place() {
        let mut m = RunMetadata::new();
        m.set("a", 1).set("b", 2).set("a", 3);
        assert_eq!(m.entries().collect::<Vec<_>>(), [("a", "3"), ("b", "2")]);
    }

    fn pairs(p: &[(&str, &str)]) -> BTreeMap<String, String> {
        p.iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn head_dim_from_width_and_heads() {
        let run = pairs(&[(keys::D_MODEL, "768"), (keys::HEADS, "12")]);
        assert_eq!(head_dim(&run), Some(64));
        assert_eq!(head_dim(&pairs(&[(keys::HEAD_DIM, "80")])), Some(80));
        assert_eq!(
            head_dim(&pairs(&[(keys::D_MODEL, "768"), (keys::HEADS, "7")])),
            None
        );
    }

    /// A count of 0 is unknown, never a divisor: `heads = 0` made `profile` divide by zero.
    #[test]
    fn zero_heads_or_width_is_unknown() {
        assert_eq!(
            head_dim(&pairs(&[(keys::D_MODEL, "768"), (keys::HEADS, "0")])),
            None
        );
        let other = pairs(&[
            (keys::D_MODEL, "768"),
            (keys::HEADS, "0"),
            (keys::N_HEADS, "16"),
        ]);
        assert_eq!(head_dim(&other), Some(48));
        assert_eq!(
            head_dim(&pairs(&[(keys::D_MODEL, "0"), (keys::HEADS, "12")])),
            None
        );
        assert_eq!(head_dim(&pairs(&[(keys::HEAD_DIM, "0")])), None);
    }

    #[test]
    fn step_times_give_median_and_mean() {
        let mut m = RunMetadata::new();
        m.set_step_times_ms(&[10.0, 30.0, 20.0, 40.0]);
        assert_eq!(m.get(keys::STEP_TIMES_MS), Some("10,30,20,40"));
        assert_eq!(m.get(keys::STEP_TIME_MEDIAN_MS), Some("25"));
        assert_eq!(m.get(keys::STEP_TIME_MEAN_MS), Some("25"));
        assert_eq!(m.get(keys::STEPS), Some("4"));
    }

    /// What `collect` stores in a trace's `RUN_METADATA` comes back from the trace as it was
    /// set, every pair, with Rust's float spelling kept.
    #[test]
    fn what_the_writer_writes_the_reader_reads() {
        use crate::formats::nsys_sqlite::{read, write};

        let mut run = RunMetadata::describe(&RunDescription {
            model: "small".into(),
            d_model: 768,
            d_ff: 3072,
            layers: 12,
            heads: 12,
            vocab: 10_000,
            ctx: 128,
            batch: 4,
            mode: "train".into(),
            precision: "fp32".into(),
        });
        run.set_step_times_ms(&[12.5, 0.1 + 0.2]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sqlite");
        let records = write::TraceRecords {
            run: run.clone(),
            ..write::TraceRecords::default()
        };
        write::to_file(&path, &records).unwrap();
        let back = read::load(&path).unwrap().source.run;
        let written: Vec<(&str, &str)> = run.entries().collect();
        assert_eq!(back.len(), written.len());
        for (name, value) in written {
            assert_eq!(back.get(name).map(String::as_str), Some(value), "{name}");
        }
        assert_eq!(back[keys::STEP_TIMES_MS], "12.5,0.30000000000000004");
        assert_eq!(back[keys::HEADS], "12");
    }
}
