//! What a file's name says about the run it measured: model size, context length, batch, mode
//! and precision, read from names such as `memsnap_medium_ctx256_train_fp32.pickle.gz`,
//! `medium_128_training_memory_snapshot.pickle` or `2_7B_forward_without_mixed.sqlite`.
//!
//! Names are guesses: run metadata inside a file, or the user's own label, say more
//! (`crate::report::labels`). The rules, over the name without its directory and its profiler
//! extensions, cut into lower-case words at `_`, `-`, `.` and spaces:
//!
//! - **size**: `tiny`, `small`, `medium`, `large`, `xl`, or a parameter count in billions
//!   written `2.7B`, `2_7B`, `2p7b` or `7b` (read as `2.7b`, `7b`);
//! - **context length**: `ctx512`, `context512`, `seq512`, `seqlen512` (or the word and the
//!   number apart: `ctx_512`, `context_512`, `seq_len_512`), or a bare number right after the
//!   size (`medium_128`); a bare number anywhere else is not read (it may be a batch, a step or
//!   a seed);
//! - **mode**: `fwd`, `forward`, `inference`, `infer`, `eval` → forward; `train`, `training`,
//!   `fullstep`, `step`, `backward`, `bwd` → train;
//! - **precision**: a data type (`fp32`, `float32`, `f32`, `tf32`, `bf16`, `bfloat16`, `fp16`,
//!   `float16`, `half`) wins; else `amp`, `mixed`, `autocast` (also joined: `mixedprecision`,
//!   `withamp`) mean bf16 autocast, unless negated: `no`, `non`, `without`, `wo`, `disable(d)`
//!   before them (`without_mixed`, `no_amp`, `noamp`) or `off`, `false`, `disabled` after them
//!   (`amp_off`) mean fp32, and so do `full_precision` and `fullprecision`;
//! - **batch**: `bs8`, `batch8`, `bs_8`, `batch_size_8`.
//!
//! The first word of each kind wins. Nothing here reads files.

use serde::Serialize;

/// Model, context length, batch, mode and precision of a run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RunName {
    pub model: Option<String>,
    pub ctx: Option<u32>,
    /// `forward` or `train`.
    pub mode: Option<String>,
    /// `fp32`, `tf32`, `bf16` or `fp16`.
    pub precision: Option<String>,
    /// Batch size, from a `bs4` or `batch4` word.
    pub batch: Option<u32>,
}

/// Model sizes named by words (lower case), as the CS336 assignment names them.
pub const MODEL_SIZES: [&str; 5] = ["tiny", "small", "medium", "large", "xl"];

/// File extensions dropped before a name is read, so `.pt.trace.json.gz` does not count.
const EXTENSIONS: [&str; 10] = [
    ".gz",
    ".pickle",
    ".pkl",
    ".sqlite",
    ".nsys-rep",
    ".qdrep",
    ".json",
    ".trace",
    ".pt",
    ".db",
];

/// The name of a file without its directory and without known profiler extensions
/// (`torch_small_ctx128_fwd_fp32` for `runs/torch_small_ctx128_fwd_fp32.sqlite.gz`).
pub fn run_stem(name: &str) -> &str {
    let mut stem = name.rsplit(['/', '\\']).next().unwrap_or(name);
    while let Some(e) = EXTENSIONS
        .iter()
        .find(|e| stem.len() > e.len() && stem.to_ascii_lowercase().ends_with(*e))
    {
        stem = &stem[..stem.len() - e.len()];
    }
    stem
}

/// The mode a word names: `forward` (`fwd`, `inference`, ...) or `train` (`training`,
/// `fullstep`, `backward`, ...).
pub fn mode_word(word: &str) -> Option<&'static str> {
    match word {
        "forward" | "fwd" | "inference" | "infer" | "eval" => Some("forward"),
        "train" | "training" | "fullstep" | "step" | "full" | "backward" | "bwd" => Some("train"),
        _ => None,
    }
}

/// The precision a data-type word names: `fp32`, `tf32`, `bf16` or `fp16`.
pub fn precision_word(word: &str) -> Option<&'static str> {
    match word {
        "fp32" | "float32" | "f32" => Some("fp32"),
        "tf32" => Some("tf32"),
        "bf16" | "bfloat16" => Some("bf16"),
        "fp16" | "float16" | "half" => Some("fp16"),
        _ => None,
    }
}

/// Words for mixed precision: autocast, which in these runs means bf16.
fn mixed_word(word: &str) -> bool {
    let w = word
        .strip_suffix("precision")
        .filter(|w| !w.is_empty())
        .unwrap_or(word);
    let w = ["with", "use", "enable", "enabled"]
        .iter()
        .find_map(|p| w.strip_prefix(p).filter(|w| !w.is_empty()))
        .unwrap_or(w);
    matches!(w, "amp" | "mixed" | "autocast")
}

const NEGATIONS: [&str; 7] = ["no", "non", "not", "without", "wo", "disable", "disabled"];
const OFF: [&str; 4] = ["off", "false", "disabled", "0"];

/// `noamp`, `withoutmixed`, `nonautocast`: a negation and a mixed-precision word in one.
fn negated_mixed_word(word: &str) -> bool {
    NEGATIONS
        .iter()
        .any(|n| word.strip_prefix(n).is_some_and(mixed_word))
}

/// `2.7b`, `7b`, `13b`: a parameter count in billions.
fn billions(word: &str) -> bool {
    word.strip_suffix('b').is_some_and(|n| {
        let mut parts = n.splitn(2, '.');
        let whole = parts.next().unwrap_or_default();
        let frac = parts.next();
        !whole.is_empty()
            && whole.bytes().all(|b| b.is_ascii_digit())
            && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
            && n.parse::<f64>().is_ok_and(|v| v > 0.0)
    })
}

/// The lower-case words of a stem, with sizes in billions made whole: `2.7b`, `2_7b` and `2p7b`
/// all become `2.7b`.
fn words(stem: &str) -> Vec<String> {
    let raw: Vec<String> = stem
        .split(['_', '-', ' ', '.'])
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    let mut out: Vec<String> = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let w = &raw[i];
        let is_number = w.bytes().all(|b| b.is_ascii_digit());
        if is_number {
            if let Some(next) = raw.get(i + 1).filter(|n| {
                n.strip_suffix('b')
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            }) {
                out.push(format!("{w}.{next}"));
                i += 2;
                continue;
            }
        }
        // `2p7b`: the `p` of a decimal point.
        if let Some((whole, frac)) = w.split_once('p') {
            let candidate = format!("{whole}.{frac}");
            if billions(&candidate) {
                out.push(candidate);
                i += 1;
                continue;
            }
        }
        out.push(w.clone());
        i += 1;
    }
    out
}

/// The model size a word names, normalised (`2.7b`, `small`).
fn size_word(word: &str) -> Option<String> {
    (MODEL_SIZES.contains(&word) || billions(word)).then(|| word.to_owned())
}

/// A number written right after one of `prefixes` in the same word (`ctx512`), or as the next
/// word (`ctx`, `512`), or after a `len`/`size` word between (`seq_len_512`, `batch_size_8`).
fn number_after(words: &[String], i: usize, prefixes: &[&str]) -> Option<(u32, usize)> {
    let w = &words[i];
    for p in prefixes {
        let Some(rest) = w.strip_prefix(p) else {
            continue;
        };
        if let Ok(n) = rest.parse() {
            return Some((n, 1));
        }
        if rest.is_empty() {
            let mut j = i + 1;
            if words.get(j).is_some_and(|x| x == "len" || x == "size") {
                j += 1;
            }
            if let Some(n) = words.get(j).and_then(|x| x.parse().ok()) {
                return Some((n, j + 1 - i));
            }
        }
    }
    None
}

/// Read model/ctx/batch/mode/precision from a file name (the rules are in the module's
/// documentation).
pub fn parse_run_name(name: &str) -> RunName {
    let words = words(run_stem(name));
    let mut r = RunName::default();
    // Precision: a data type or a negated mixed word (strong) beats a plain mixed word (weak).
    let mut strong: Option<&'static str> = None;
    let mut weak: Option<&'static str> = None;
    let mut i = 0;
    while i < words.len() {
        let w = words[i].as_str();
        let next = words.get(i + 1).map(String::as_str);
        if let Some(size) = size_word(w) {
            if r.model.is_none() {
                r.model = Some(size);
                // `medium_128`: a bare number right after the size is the context length.
                if let Some(n) = next.and_then(|n| n.parse().ok()) {
                    r.ctx.get_or_insert(n);
                }
            }
            i += 1;
            continue;
        }
        if let Some((n, used)) =
            number_after(&words, i, &["ctxlen", "ctx", "context", "seqlen", "seq"])
        {
            r.ctx.get_or_insert(n);
            i += used;
            continue;
        }
        if let Some((n, used)) = number_after(&words, i, &["batchsize", "batch", "bs"]) {
            r.batch.get_or_insert(n);
            i += used;
            continue;
        }
        if (w == "full" && next == Some("precision")) || w == "fullprecision" {
            strong.get_or_insert("fp32");
            i += if w == "full" { 2 } else { 1 };
            continue;
        }
        if NEGATIONS.contains(&w) && next.is_some_and(mixed_word) {
            strong.get_or_insert("fp32");
            i += 2;
            continue;
        }
        if negated_mixed_word(w) {
            strong.get_or_insert("fp32");
            i += 1;
            continue;
        }
        if mixed_word(w) {
            if next.is_some_and(|n| OFF.contains(&n)) {
                strong.get_or_insert("fp32");
                i += 2;
            } else {
                weak.get_or_insert("bf16");
                i += 1;
            }
            continue;
        }
        if let Some(p) = precision_word(w) {
            strong.get_or_insert(p);
        }
        if let (None, Some(m)) = (&r.mode, mode_word(w)) {
            r.mode = Some(m.to_owned());
        }
        i += 1;
    }
    r.precision = strong.or(weak).map(str::to_owned);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn precision(name: &str) -> Option<String> {
        parse_run_name(name).precision
    }

    #[test]
    fn run_names_are_read_from_file_names() {
        let r = parse_run_name("memsnap_medium_ctx256_train_fp32.pickle.gz");
        assert_eq!(r.model.as_deref(), Some("medium"));
        assert_eq!(r.ctx, Some(256));
        assert_eq!(r.mode.as_deref(), Some("train"));
        assert_eq!(r.precision.as_deref(), Some("fp32"));
        let r = parse_run_name("wedsonlin-a2__medium_128_inference_memory_snapshot.pickle.gz");
        assert_eq!(r.model.as_deref(), Some("medium"));
        assert_eq!(r.ctx, Some(128));
        assert_eq!(r.mode.as_deref(), Some("forward"));
        assert_eq!(r.precision, None);
        let r = parse_run_name("medium_128_training_memory_snapshot.pickle");
        assert_eq!(
            (r.model.as_deref(), r.ctx, r.mode.as_deref()),
            (Some("medium"), Some(128), Some("train"))
        );
        let r = parse_run_name(r"C:\runs\memory_ctx128_fullstep_.pickle");
        assert_eq!((r.ctx, r.mode.as_deref()), (Some(128), Some("train")));
        let r = parse_run_name("kkaitlyn-a2__memory_files_memory_ctx128_fullstep_.pickle.gz");
        assert_eq!((r.model, r.ctx), (None, Some(128)));
    }

    #[test]
    fn sizes_in_billions_in_every_spelling() {
        for name in [
            "kineto_2.7B_ctx1024_train_bf16_bs8.pt.trace.json.gz",
            "results_2_7B_ctx1024_train_bf16_bs8.sqlite",
            "run-2.7b-ctx1024-train-bf16-bs8.sqlite",
            "nsys_2p7b_ctx1024_train_bf16_batch_size_8.sqlite",
        ] {
            let r = parse_run_name(name);
            assert_eq!(r.model.as_deref(), Some("2.7b"), "{name}");
            assert_eq!((r.ctx, r.batch), (Some(1024), Some(8)), "{name}");
            assert_eq!(r.precision.as_deref(), Some("bf16"), "{name}");
        }
        assert_eq!(
            parse_run_name("llama_7b_ctx512.sqlite").model.as_deref(),
            Some("7b")
        );
        // Words that only look like counts are not sizes.
        assert_eq!(parse_run_name("bs8_ctx512_fp32.sqlite").model, None);
        assert_eq!(parse_run_name("profile_b.sqlite").model, None);
    }

    #[test]
    fn negated_mixed_precision_is_fp32_and_its_twin_bf16() {
        for name in [
            "2_7B_forward_without_mixed_precision.sqlite",
            "results_2_7B_forward_without_mixed.pickle",
            "small_ctx128_no_amp.pickle",
            "small_ctx128_noamp.pickle",
            "small-ctx128-noAutocast.pickle",
            "small_ctx128_amp_off.pickle",
            "small_ctx128_full_precision.pickle",
            "small_ctx128_fullprecision_train.pickle",
            "small_ctx128_float32.pickle",
        ] {
            assert_eq!(precision(name).as_deref(), Some("fp32"), "{name}");
        }
        for name in [
            "2_7B_forward_with_mixed_precision.sqlite",
            "results_2_7B_forward_mixed.pickle",
            "results_2_7B_forward_mixedprecision.pickle",
            "small_ctx128_amp.pickle",
            "small_ctx128_autocast.pickle",
            "small_ctx128_withamp.pickle",
            "small_ctx128_bf16.pickle",
            "small_ctx128_bfloat16.pickle",
        ] {
            assert_eq!(precision(name).as_deref(), Some("bf16"), "{name}");
        }
        // A data type wins over the generic word, wherever it stands.
        assert_eq!(precision("small_amp_fp16.pickle").as_deref(), Some("fp16"));
        assert_eq!(
            precision("small_ctx128_half.pickle").as_deref(),
            Some("fp16")
        );
        // `full_precision` is a precision, not the mode `full`.
        let r = parse_run_name("small_ctx128_forward_full_precision.pickle");
        assert_eq!(r.mode.as_deref(), Some("forward"));
        assert_eq!(precision("small_ctx128.pickle"), None);
    }

    #[test]
    fn context_lengths_in_every_spelling_and_no_stray_numbers() {
        for name in [
            "small_ctx512_fwd.sqlite",
            "small_context_512_fwd.sqlite",
            "small_context512_fwd.sqlite",
            "small_seq512_fwd.sqlite",
            "small_seq_len_512_fwd.sqlite",
            "small_512_fwd.sqlite",
        ] {
            assert_eq!(parse_run_name(name).ctx, Some(512), "{name}");
        }
        // A number elsewhere may be a step, a seed or a batch: not a context length.
        assert_eq!(parse_run_name("run_512_small_fwd.sqlite").ctx, None);
        assert_eq!(parse_run_name("profile-7.sqlite").ctx, None);
    }

    #[test]
    fn trace_names_drop_their_extensions_and_keep_dotted_sizes() {
        let r = parse_run_name("runs/torch_small_ctx128_fwd_fp32.sqlite.gz");
        assert_eq!(
            r,
            RunName {
                model: Some("small".into()),
                ctx: Some(128),
                mode: Some("forward".into()),
                precision: Some("fp32".into()),
                batch: None,
            }
        );
        let r = parse_run_name("kineto_2.7B_ctx1024_train_bf16_bs8.pt.trace.json.gz");
        assert_eq!(r.model.as_deref(), Some("2.7b"));
        assert_eq!((r.ctx, r.batch), (Some(1024), Some(8)));
    }

    #[test]
    fn stems_drop_profiler_extensions() {
        assert_eq!(run_stem("a/b/x.pt.trace.json.gz"), "x");
        assert_eq!(run_stem("run.nsys-rep"), "run");
        assert_eq!(run_stem(".gz"), ".gz");
    }
}
