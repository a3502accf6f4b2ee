//! Run labels: which model, context length, batch, mode and precision a file measured, and the
//! short name it goes by in the report's tables.
//!
//! Three sources, in this order of trust: `--label FILE=LABEL` given by the user (the label is
//! shown as given and read with the file-name pattern for the fields it names), the run
//! metadata the file carries (the `RUN_METADATA` table that `collect --trace` writes: `model`,
//! `ctx`, `batch`, `mode`, `precision`, `d_model`, `heads`), and the file name read by
//! [`crate::run_name::parse_run_name`]
//! (`..._{size}_ctx{N}_{fwd|forward|train}_{fp32|bf16}...`). A field one source lacks is taken
//! from the next; the fields read from the file name are guesses, and [`Labelled::guessed`]
//! names them so the report can say so. Nothing here reads files.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::formats::run_metadata::{self, keys};
use crate::run_name::{mode_word, parse_run_name, precision_word, run_stem, RunName};

/// Where a run's label came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelSource {
    /// `--label FILE=LABEL`.
    Option,
    /// Run metadata inside the file.
    Metadata,
    /// The file name.
    FileName,
}

impl LabelSource {
    pub fn as_str(self) -> &'static str {
        match self {
            LabelSource::Option => "--label",
            LabelSource::Metadata => "metadata",
            LabelSource::FileName => "file name",
        }
    }
}

/// A run's label and what it names.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Labelled {
    /// The name of the run in tables: `small ctx128 train fp32` when model, context length and
    /// mode are known, else the label given or the file's name.
    pub label: String,
    pub run: RunName,
    pub source: LabelSource,
    /// Fields (`model`, `ctx`, `batch`, `mode`, `precision`) read from the file name: guesses.
    pub guessed: Vec<&'static str>,
    /// Attention head dimension: `d_model / heads` from metadata, else from the model size.
    pub head_dim: Option<u32>,
}

impl Labelled {
    /// Where the label came from, in words, saying which fields were guessed from the file
    /// name: `metadata`, `--label`, `file name (guessed)`,
    /// `metadata; guessed from the file name: precision`.
    pub fn source_text(source: LabelSource, guessed: &[&str]) -> String {
        match (source, guessed) {
            (LabelSource::FileName, []) => "file name".to_owned(),
            (LabelSource::FileName, _) => "file name (guessed)".to_owned(),
            (s, []) => s.as_str().to_owned(),
            (s, g) => format!(
                "{}; guessed from the file name: {}",
                s.as_str(),
                g.join(", ")
            ),
        }
    }
}

/// d_model, d_ff, layers and heads of the model sizes of the CS336 assignment (and `collect`).
pub const MODEL_DIMS: [(&str, u32, u32, u32, u32); 5] = [
    ("small", 768, 3072, 12, 12),
    ("medium", 1024, 4096, 24, 16),
    ("large", 1280, 5120, 36, 20),
    ("xl", 1600, 6400, 48, 25),
    ("2.7b", 2560, 10240, 32, 32),
];

/// Head dimension of a model size (`small`: 768 / 12 = 64).
pub fn head_dim_of_size(model: &str) -> Option<u32> {
    let m = model.to_ascii_lowercase();
    let m = if m == "2p7b" { "2.7b".to_owned() } else { m };
    MODEL_DIMS
        .iter()
        .find(|(n, ..)| *n == m)
        .map(|&(_, d, _, _, h)| d / h)
}

/// Where a model size sorts: the assignment's sizes in order, then anything else.
pub fn model_rank(model: &str) -> usize {
    let m = model.to_ascii_lowercase();
    match m.as_str() {
        "tiny" => 0,
        "small" => 1,
        "medium" => 2,
        "large" => 3,
        "xl" => 4,
        "2.7b" | "2p7b" => 5,
        _ => 6,
    }
}

/// A mode as the report names it: `forward`, `train`, or a metadata value such as
/// `forward-backward`, kept.
fn normalise_mode(v: &str) -> String {
    let lower = v.trim().to_ascii_lowercase();
    match lower.as_str() {
        "forward-backward" | "forward_backward" | "fwd-bwd" | "fwd_bwd" => lower.replace('_', "-"),
        other => mode_word(other).map_or(lower.clone(), str::to_owned),
    }
}

/// The fields `collect`'s run metadata names.
pub fn run_from_metadata(meta: &BTreeMap<String, String>) -> RunName {
    let text = |names: &[&str]| {
        names
            .iter()
            .find_map(|k| meta.get(*k))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    let int = |names: &[&str]| text(names).and_then(|v| v.parse::<u32>().ok());
    RunName {
        model: text(&[keys::MODEL, "size"]).map(|m| m.to_ascii_lowercase()),
        ctx: int(&[keys::CTX, "context_length", "seq_len"]),
        mode: text(&[keys::MODE]).map(|m| normalise_mode(&m)),
        precision: text(&[keys::PRECISION, "dtype"]).map(|p| {
            let lower = p.to_ascii_lowercase();
            precision_word(&lower).map_or(lower.clone(), str::to_owned)
        }),
        batch: int(&[keys::BATCH, "batch_size"]),
    }
}

/// Fill the fields `into` lacks from `from`; returns the names of the fields filled.
fn fill(into: &mut RunName, from: &RunName) -> Vec<&'static str> {
    let mut filled = Vec::new();
    if into.model.is_none() && from.model.is_some() {
        into.model.clone_from(&from.model);
        filled.push("model");
    }
    if into.ctx.is_none() && from.ctx.is_some() {
        into.ctx = from.ctx;
        filled.push("ctx");
    }
    if into.batch.is_none() && from.batch.is_some() {
        into.batch = from.batch;
        filled.push("batch");
    }
    if into.mode.is_none() && from.mode.is_some() {
        into.mode.clone_from(&from.mode);
        filled.push("mode");
    }
    if into.precision.is_none() && from.precision.is_some() {
        into.precision.clone_from(&from.precision);
        filled.push("precision");
    }
    filled
}

fn is_empty(r: &RunName) -> bool {
    r.model.is_none() && r.ctx.is_none() && r.mode.is_none() && r.precision.is_none()
}

/// `small ctx128 train fp32`: the name of a run whose model, context length and mode are known.
pub fn compose(run: &RunName) -> Option<String> {
    let (model, ctx, mode) = (run.model.as_ref()?, run.ctx?, run.mode.as_ref()?);
    let mut s = format!("{model} ctx{ctx} {mode}");
    if let Some(p) = &run.precision {
        s.push(' ');
        s.push_str(p);
    }
    Some(s)
}

/// Label a file from the user's label, its metadata and its name (`file_name` is the path as
/// given; only its last component is read).
pub fn label_run(
    file_name: &str,
    metadata: Option<&BTreeMap<String, String>>,
    user_label: Option<&str>,
) -> Labelled {
    let from_meta = metadata.map(run_from_metadata).unwrap_or_default();
    let from_name = parse_run_name(file_name);
    let (mut run, source) = match user_label {
        Some(l) => (parse_run_name(l), LabelSource::Option),
        None if !is_empty(&from_meta) => (from_meta.clone(), LabelSource::Metadata),
        None => (RunName::default(), LabelSource::FileName),
    };
    fill(&mut run, &from_meta);
    let guessed = fill(&mut run, &from_name);
    let label = match user_label {
        Some(l) => l.to_owned(),
        None => compose(&run).unwrap_or_else(|| run_stem(file_name).to_owned()),
    };
    let head_dim = metadata
        .and_then(run_metadata::head_dim)
        .or_else(|| run.model.as_deref().and_then(head_dim_of_size));
    Labelled {
        label,
        run,
        source,
        guessed,
        head_dim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_give_labels_and_head_dims() {
        let l = label_run("nsys/torch_small_ctx128_fwd_fp32.sqlite.gz", None, None);
        assert_eq!(l.label, "small ctx128 forward fp32");
        assert_eq!(l.source, LabelSource::FileName);
        assert_eq!(l.head_dim, Some(64));
        assert_eq!(l.guessed, ["model", "ctx", "mode", "precision"]);
        assert_eq!(
            Labelled::source_text(l.source, &l.guessed),
            "file name (guessed)"
        );
        let l = label_run("x/profile-7.sqlite", None, None);
        assert_eq!(l.label, "profile-7");
        assert_eq!(l.head_dim, None);
    }

    #[test]
    fn metadata_beats_the_file_name_and_the_option_beats_both() {
        let meta: BTreeMap<String, String> = [
            ("model", "2.7B"),
            ("ctx", "512"),
            ("mode", "forward-backward"),
            ("precision", "bf16"),
            ("batch", "4"),
            ("d_model", "2560"),
            ("heads", "32"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let l = label_run("torch_small_ctx128_fwd_fp32.sqlite", Some(&meta), None);
        assert_eq!(l.label, "2.7b ctx512 forward-backward bf16");
        assert_eq!(l.source, LabelSource::Metadata);
        assert!(l.guessed.is_empty(), "metadata names every field");
        assert_eq!((l.run.batch, l.head_dim), (Some(4), Some(80)));
        let l = label_run("run.sqlite", Some(&meta), Some("baseline_ctx1024"));
        assert_eq!(l.label, "baseline_ctx1024");
        assert_eq!(l.source, LabelSource::Option);
        // The label names the context length; metadata fills in the rest.
        assert_eq!(l.run.ctx, Some(1024));
        assert_eq!(l.run.model.as_deref(), Some("2.7b"));
    }

    #[test]
    fn fields_metadata_lacks_are_guessed_from_the_name_and_said_so() {
        let meta: BTreeMap<String, String> = [("model", "small"), ("ctx", "256")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let l = label_run("runs/x_forward_without_mixed.sqlite", Some(&meta), None);
        assert_eq!(l.label, "small ctx256 forward fp32");
        assert_eq!(l.guessed, ["mode", "precision"]);
        assert_eq!(
            Labelled::source_text(l.source, &l.guessed),
            "metadata; guessed from the file name: mode, precision"
        );
        // The twin with mixed precision, a size spelled with an underscore.
        let l = label_run("gpt_2_7B_ctx128_forward_with_mixed.pickle", None, None);
        assert_eq!(l.label, "2.7b ctx128 forward bf16");
        assert_eq!(l.head_dim, Some(80));
    }

    #[test]
    fn sizes_sort_in_the_assignment_order() {
        let mut v = vec!["xl", "small", "2.7b", "custom", "medium"];
        v.sort_by_key(|m| model_rank(m));
        assert_eq!(v, ["small", "medium", "xl", "2.7b", "custom"]);
        assert_eq!(head_dim_of_size("2p7b"), Some(80));
    }
}
