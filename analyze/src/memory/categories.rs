//! What each allocation is: parameters, gradients, optimizer state, activations by kind,
//! autocast copies, workspace… decided by rules over the allocation's recorded stack.
//!
//! A [`Rule`] names a category and up to three conditions, all of which must hold:
//! - `frame`: a regex that matches one frame of the stack, written as `file:line name` with `/`
//!   separators (`/opt/venv/lib/python3.12/site-packages/torch/nn/functional.py:2397 silu`, or for
//!   C++ frames `??:0 at::native::silu(...)`). Only frames *inside the model* are looked at: those
//!   nearer the allocation than the outermost `nn.Module` call, when there is one, so a driver
//!   function named `train_with_loss` does not make every allocation a loss.
//! - `op`: a regex that matches an ATen operator on the stack, as named in `at::_ops::<op>`
//!   (`bmm`, `mul_Tensor`, `_softmax`, `silu`); any operator of the stack may match.
//! - `phase`: `forward`, `backward` or `optimizer`, as [`super::phases`] reads the stack.
//!
//! The first matching rule wins; a user's rules (TOML or JSON, see [`Rules::parse`]) are tried
//! before the built-in ones, and may name new categories. What one stack cannot tell (gradients
//! handed over without an allocation, state made before recording…) is inferred in
//! [`super::inference`].

use std::collections::HashMap;
use std::path::Path;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::phases::{stack_phases, Phase};
use crate::error::{Error, Result};
use crate::formats::torch_snapshot::MODULE_FRAME_FILE;
use crate::model::snapshot::{Frame, Frames, StackId};

pub const PARAMETERS: &str = "parameters";
pub const GRADIENTS: &str = "gradients";
pub const OPTIMIZER_STATE: &str = "optimizer state";
pub const OPTIMIZER_TEMP: &str = "optimizer temporaries";
pub const ATTENTION: &str = "attention scores";
pub const SOFTMAX: &str = "softmax";
pub const FFN: &str = "FFN";
pub const NORM: &str = "norm";
pub const EMBEDDING: &str = "embedding";
pub const LOGITS: &str = "logits & loss";
pub const ACTIVATIONS_OTHER: &str = "activations (other)";
pub const BACKWARD: &str = "activation gradients";
pub const AUTOCAST: &str = "autocast copies";
pub const WORKSPACE: &str = "workspace";
pub const BEFORE_RECORDING: &str = "before recording";
pub const OTHER: &str = "other";

/// Built-in categories in display order, with what each holds.
pub const BUILTIN: [(&str, &str); 16] = [
    (PARAMETERS, "model parameters and buffers"),
    (
        GRADIENTS,
        "parameter gradients (made in backward, kept past it)",
    ),
    (OPTIMIZER_STATE, "optimizer state (e.g. Adam's moments)"),
    (OPTIMIZER_TEMP, "temporaries of the optimizer step"),
    (
        ATTENTION,
        "attention: QK scores, masking, PV, fused attention",
    ),
    (SOFTMAX, "softmax inside attention"),
    (FFN, "feed-forward block (SiLU/GELU/SwiGLU and its matmuls)"),
    (NORM, "RMSNorm / LayerNorm"),
    (EMBEDDING, "token embeddings"),
    (LOGITS, "logits, log-softmax and loss"),
    (
        ACTIVATIONS_OTHER,
        "other forward activations (projections, residuals, RoPE…)",
    ),
    (
        BACKWARD,
        "backward: activation gradients and autograd temporaries",
    ),
    (AUTOCAST, "low-precision copies made by autocast"),
    (WORKSPACE, "cuBLAS/cuDNN workspaces"),
    (
        BEFORE_RECORDING,
        "allocated before recording began, not otherwise identified",
    ),
    (OTHER, "anything else"),
];

/// Activation kinds that seed the same-line inference.
pub(crate) const ACTIVATION_KINDS: [&str; 6] = [ATTENTION, SOFTMAX, FFN, NORM, EMBEDDING, LOGITS];

/// One categorisation rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub category: String,
    pub frame: Option<Regex>,
    pub op: Option<Regex>,
    pub phase: Option<Phase>,
}

/// A rule as written in a user's file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    category: String,
    frame: Option<String>,
    op: Option<String>,
    phase: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(default, alias = "rules")]
    rule: Vec<RuleSpec>,
}

/// An ordered list of rules: the user's first, then the built-in ones.
#[derive(Clone, Debug)]
pub struct Rules {
    pub rules: Vec<Rule>,
}

fn builtin_rule(
    category: &str,
    frame: Option<&str>,
    op: Option<&str>,
    phase: Option<Phase>,
) -> Rule {
    let re = |s: &str| Regex::new(s).expect("built-in category regexes are valid");
    Rule {
        category: category.to_owned(),
        frame: frame.map(re),
        op: op.map(re),
        phase,
    }
}

impl Default for Rules {
    fn default() -> Self {
        Rules::builtin()
    }
}

impl Rules {
    /// The built-in rules, written against the frames of real snapshots (PyTorch 2.2 to 2.11,
    /// CS336 models, Hugging Face models).
    pub fn builtin() -> Rules {
        use Phase::*;
        // A Python function name at the end of a frame's text.
        let name = |pat: &str| format!(r"\.pyx?:\d+ (?i:\w*(?:{pat})\w*)$");
        // A module path recorded by `collect`, ending in `pat`.
        let module_file = regex::escape(MODULE_FRAME_FILE);
        let collect = |pat: &str| format!(r"^{module_file}:\d+ \S*?(?:{pat})$");
        let rules = vec![
            builtin_rule(AUTOCAST, Some(r"at::autocast::cached_cast"), None, None),
            builtin_rule(
                WORKSPACE,
                Some(
                    r"getNewWorkspace|getCUDABlasLtWorkspace|[Ww]orkspace\(|cudnn\w*::\w*[Ww]orkspace",
                ),
                None,
                None,
            ),
            builtin_rule(
                GRADIENTS,
                Some(r"torch::autograd::AccumulateGrad"),
                None,
                None,
            ),
            builtin_rule(
                OPTIMIZER_STATE,
                Some(r"\.py:\d+ _init_group$"),
                None,
                Some(Optimizer),
            ),
            builtin_rule(
                OPTIMIZER_STATE,
                None,
                Some(r"^(zeros_like|zeros|ones_like|full_like|empty_like)$"),
                Some(Optimizer),
            ),
            builtin_rule(OPTIMIZER_TEMP, None, None, Some(Optimizer)),
            builtin_rule(BACKWARD, None, None, Some(Backward)),
            builtin_rule(
                PARAMETERS,
                Some(
                    r"/torch/nn/parameter\.py:|/torch/nn/init\.py:|\.py:\d+ (reset_parameters|_apply|load_state_dict|__init__)$",
                ),
                None,
                None,
            ),
            builtin_rule(
                LOGITS,
                Some(&name("loss|cross_entropy|nll|log_softmax|logits")),
                None,
                None,
            ),
            builtin_rule(
                LOGITS,
                None,
                Some(r"^(_log_softmax|log_softmax_int|nll_loss\w*|cross_entropy_loss)$"),
                None,
            ),
            builtin_rule(SOFTMAX, Some(&name("softmax")), None, None),
            builtin_rule(
                SOFTMAX,
                None,
                Some(r"^(_softmax|_safe_softmax|softmax_int)$"),
                None,
            ),
            builtin_rule(
                ATTENTION,
                Some(&name("attention|attn|sdpa|scaled_dot_product")),
                None,
                None,
            ),
            builtin_rule(
                ATTENTION,
                None,
                Some(
                    r"^(_scaled_dot_product\w*|scaled_dot_product_attention|_flash_attention\w*|_efficient_attention\w*|_cudnn_attention\w*)$",
                ),
                None,
            ),
            builtin_rule(NORM, Some(&name("norm")), None, None),
            builtin_rule(
                NORM,
                None,
                Some(
                    r"^(native_layer_norm|layer_norm|rms_norm|_fused_rms_norm|native_group_norm|group_norm|rsqrt|linalg_vector_norm)$",
                ),
                None,
            ),
            builtin_rule(
                FFN,
                Some(&name("silu|swiglu|gelu|glu|ffn|feed_?forward|mlp")),
                None,
                None,
            ),
            builtin_rule(FFN, None, Some(r"^(silu|gelu|relu|glu|silu_)$"), None),
            builtin_rule(EMBEDDING, Some(&name("embed")), None, None),
            builtin_rule(
                EMBEDDING,
                None,
                Some(r"^(embedding|embedding_bag|_embedding_bag)$"),
                None,
            ),
            // `collect`'s module frames (`collect/module:0 layers.3.attn.scores`).
            builtin_rule(
                ATTENTION,
                Some(&collect(r"\.attn\.(scores|context)")),
                None,
                None,
            ),
            builtin_rule(
                NORM,
                Some(&collect(r"(^|\.)(ln1|ln2|ln_final)")),
                None,
                None,
            ),
            builtin_rule(FFN, Some(&collect(r"\.ffn\.\w+")), None, None),
            builtin_rule(EMBEDDING, Some(&collect("token_embeddings")), None, None),
            builtin_rule(LOGITS, Some(&collect("lm_head|loss")), None, None),
            builtin_rule(ACTIVATIONS_OTHER, None, None, Some(Forward)),
        ];
        Rules { rules }
    }

    /// The built-in rules, with the user's file (`--categories FILE`) tried first when given.
    pub fn load(path: Option<&Path>) -> Result<Rules> {
        match path {
            Some(p) => Rules::with_user_file(p),
            None => Ok(Rules::builtin()),
        }
    }

    /// The built-in rules with a user's file tried first.
    pub fn with_user_file(path: &Path) -> Result<Rules> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        let user = Rules::parse(&text, path)?;
        let mut rules = user.rules;
        rules.extend(Rules::builtin().rules);
        Ok(Rules { rules })
    }

    /// Parse a rule file. TOML:
    ///
    /// ```toml
    /// [[rule]]
    /// category = "FFN"
    /// frame = 'model\.py:14[78] '   # regex over "file:line name"
    /// op = "^bmm$"                  # regex over ATen operator names
    /// phase = "forward"             # forward, backward or optimizer
    /// ```
    ///
    /// or JSON: `{"rule": [{"category": "FFN", "frame": "..."}]}` or just the array.
    pub fn parse(text: &str, path: &Path) -> Result<Rules> {
        let bad = |message: String| Error::Malformed {
            path: path.to_owned(),
            message,
        };
        let json = |text: &str| -> Result<Vec<RuleSpec>> {
            if text.trim_start().starts_with('[') {
                serde_json::from_str(text).map_err(|e| bad(format!("not a rule list: {e}")))
            } else {
                serde_json::from_str::<RuleFile>(text)
                    .map(|f| f.rule)
                    .map_err(|e| bad(format!("not a rule file: {e}")))
            }
        };
        let toml = |text: &str| -> Result<Vec<RuleSpec>> {
            toml::from_str::<RuleFile>(text)
                .map(|f| f.rule)
                .map_err(|e| bad(format!("not a rule file: {}", e.message())))
        };
        let specs = match path.extension().and_then(|e| e.to_str()) {
            Some("json") => json(text)?,
            Some("toml") => toml(text)?,
            // Unknown extension: TOML, else JSON, reporting the TOML error.
            _ => match toml(text) {
                Ok(s) => s,
                Err(e) => json(text).map_err(|_| e)?,
            },
        };
        let mut rules = Vec::with_capacity(specs.len());
        for (i, s) in specs.into_iter().enumerate() {
            let n = i + 1;
            if s.category.trim().is_empty() {
                return Err(bad(format!("rule {n} has an empty `category`")));
            }
            let re = |field: &str, v: Option<String>| -> Result<Option<Regex>> {
                v.map(|p| {
                    Regex::new(&p).map_err(|e| {
                        // The regex crate's message spans lines; its last line says what is wrong.
                        let text = e.to_string();
                        let why = text.lines().last().unwrap_or_default();
                        let why = why.trim().trim_start_matches("error: ");
                        bad(format!(
                            "rule {n} `{field}` is not a valid regex (`{p}`): {why}"
                        ))
                    })
                })
                .transpose()
            };
            let phase = match s.phase.as_deref() {
                None => None,
                Some("forward") => Some(Phase::Forward),
                Some("backward") => Some(Phase::Backward),
                Some("optimizer") => Some(Phase::Optimizer),
                Some(other) => {
                    return Err(bad(format!(
                        "rule {n} `phase` is `{other}` (expected forward, backward or optimizer)"
                    )))
                }
            };
            let rule = Rule {
                category: s.category,
                frame: re("frame", s.frame)?,
                op: re("op", s.op)?,
                phase,
            };
            if rule.frame.is_none() && rule.op.is_none() && rule.phase.is_none() {
                return Err(bad(format!(
                    "rule {n} has no condition (give `frame`, `op` or `phase`)"
                )));
            }
            rules.push(rule);
        }
        Ok(Rules { rules })
    }
}

/// Per-frame facts, computed once per distinct frame.
struct FrameFacts {
    text: String,
    op: Option<String>,
    /// A Python frame of the user's own code (not the standard library, not an installed
    /// package, not PyTorch).
    user: bool,
    /// `torch/nn/modules/module.py`'s `_call_impl`: the boundary of an `nn.Module` call.
    module_call: bool,
    /// A Python frame (any file, the user's or a library's), not a C++ one.
    python: bool,
}

fn frame_facts(f: &Frame) -> FrameFacts {
    FrameFacts {
        text: format!("{}:{} {}", f.filename.replace('\\', "/"), f.line, f.name),
        op: f.aten_op().map(str::to_owned),
        user: f.is_user_code(),
        module_call: f.is_module_call(),
        python: f.is_python(),
    }
}

/// Rules evaluated against a snapshot's frames, with results cached per frame and per stack.
pub struct Categorizer<'a> {
    frames: &'a Frames,
    rules: &'a Rules,
    facts: Vec<FrameFacts>,
    phase_of_stack: Vec<Option<Phase>>,
    /// `frame_hits[r][f]`: rule r's frame regex matches frame f.
    frame_hits: Vec<Vec<bool>>,
    op_hits: Vec<Vec<bool>>,
    cache: HashMap<StackId, usize>,
}

impl<'a> Categorizer<'a> {
    pub fn new(frames: &'a Frames, rules: &'a Rules) -> Self {
        let facts: Vec<FrameFacts> = frames.frames.iter().map(frame_facts).collect();
        let frame_hits = rules
            .rules
            .iter()
            .map(|r| match &r.frame {
                Some(re) => facts.iter().map(|f| re.is_match(&f.text)).collect(),
                None => Vec::new(),
            })
            .collect();
        let op_hits = rules
            .rules
            .iter()
            .map(|r| match &r.op {
                Some(re) => facts
                    .iter()
                    .map(|f| f.op.as_deref().is_some_and(|o| re.is_match(o)))
                    .collect(),
                None => Vec::new(),
            })
            .collect();
        Categorizer {
            frames,
            rules,
            facts,
            phase_of_stack: stack_phases(frames),
            frame_hits,
            op_hits,
            cache: HashMap::new(),
        }
    }

    /// The phase each stack reveals, by [`StackId`].
    pub fn stack_phases(&self) -> &[Option<Phase>] {
        &self.phase_of_stack
    }

    pub fn phase(&self, stack: StackId) -> Option<Phase> {
        self.phase_of_stack.get(stack.0 as usize).copied().flatten()
    }

    /// The frames of `stack` that lie inside the model: before the outermost module call.
    fn model_scope(&self, stack: StackId) -> &'a [u32] {
        let s = self.frames.stack(stack);
        match s.iter().rposition(|&f| self.facts[f as usize].module_call) {
            Some(i) => &s[..i],
            None => s,
        }
    }

    /// Index of the first rule matching `stack`, if any.
    pub fn rule_for(&mut self, stack: StackId) -> Option<usize> {
        if let Some(&r) = self.cache.get(&stack) {
            return (r != usize::MAX).then_some(r);
        }
        let scope = self.model_scope(stack);
        let all = self.frames.stack(stack);
        let phase = self.phase(stack);
        let found = self.rules.rules.iter().enumerate().position(|(ri, rule)| {
            (rule.phase.is_none() || rule.phase == phase)
                && (rule.frame.is_none() || scope.iter().any(|&f| self.frame_hits[ri][f as usize]))
                && (rule.op.is_none() || all.iter().any(|&f| self.op_hits[ri][f as usize]))
        });
        self.cache.insert(stack, found.unwrap_or(usize::MAX));
        found
    }

    pub fn category_name(&self, rule: usize) -> &'a str {
        &self.rules.rules[rule].category
    }

    /// User frames of `stack` inside the model, innermost first.
    pub(crate) fn user_frames(&self, stack: StackId) -> impl Iterator<Item = u32> + '_ {
        self.model_scope(stack)
            .iter()
            .copied()
            .filter(|&f| self.facts[f as usize].user)
    }

    /// Whether `stack` has frames and all of them are Python's: recorded with
    /// `stacks="python"` (or by PyTorch 2.10 and later without C++ frames), so its operators and
    /// autograd nodes are not seen.
    pub fn python_only(&self, stack: StackId) -> bool {
        let s = self.frames.stack(stack);
        !s.is_empty() && s.iter().all(|&f| self.facts[f as usize].python)
    }

    /// Whether two stacks hold the same frames (two ids may: a writer need not intern them).
    pub fn same_frames(&self, a: StackId, b: StackId) -> bool {
        a == b || self.frames.stack(a) == self.frames.stack(b)
    }

    /// ATen operators on the stack, innermost first.
    pub fn ops(&self, stack: StackId) -> impl Iterator<Item = &str> + '_ {
        self.frames
            .stack(stack)
            .iter()
            .filter_map(|&f| self.facts[f as usize].op.as_deref())
    }
}

/// Bytes and count of one category among a set of allocations.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CategoryShare {
    pub category: String,
    pub bytes: u64,
    pub count: usize,
    /// Fraction of the total of the set.
    pub share: f64,
}

/// Sum `allocations` (indices into `categories`) by category, in built-in display order, then
/// user categories by size.
pub fn breakdown<'a>(items: impl IntoIterator<Item = (u64, &'a str)>) -> Vec<CategoryShare> {
    let mut sums: HashMap<&str, (u64, usize)> = HashMap::new();
    let mut total = 0u64;
    for (bytes, cat) in items {
        let e = sums.entry(cat).or_default();
        e.0 = e.0.saturating_add(bytes);
        e.1 += 1;
        total = total.saturating_add(bytes);
    }
    let mut out: Vec<CategoryShare> = sums
        .into_iter()
        .map(|(cat, (bytes, count))| CategoryShare {
            category: cat.to_owned(),
            bytes,
            count,
            share: if total > 0 {
                bytes as f64 / total as f64
            } else {
                0.0
            },
        })
        .collect();
    out.sort_by(|a, b| {
        let rank = |c: &str| BUILTIN.iter().position(|(n, _)| *n == c);
        match (rank(&a.category), rank(&b.category)) {
            (Some(x), Some(y)) => x.cmp(&y),
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (None, None) => b.bytes.cmp(&a.bytes).then(a.category.cmp(&b.category)),
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(stacks: &[&[(&str, &str, i64)]]) -> Frames {
        let mut f = Frames::default();
        for s in stacks {
            let mut ids = Vec::new();
            for (name, file, line) in s.iter() {
                ids.push(f.frames.len() as u32);
                f.frames.push(Frame {
                    name: (*name).into(),
                    filename: (*file).into(),
                    line: *line,
                });
            }
            f.stacks.push(ids);
        }
        f
    }

    const CALL: (&str, &str, i64) = (
        "_call_impl",
        "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py",
        1790,
    );

    #[test]
    fn builtin_rules_read_real_frames() {
        let f = frames(&[
            &[
                ("at::_ops::exp::redispatch(x)", "??", 0),
                ("softmax", "/home/user/cs336/torch_ref.py", 28),
                ("sdpa", "/home/user/cs336/torch_ref.py", 37),
                ("forward", "/home/user/cs336/torch_ref.py", 66),
                CALL,
                ("step", "/home/user/cs336/torch_ref.py", 83),
            ],
            &[
                ("at::_ops::mul_Tensor::call(x)", "??", 0),
                (
                    "torch::autograd::generated::MulBackward0::apply(x)",
                    "??",
                    0,
                ),
                ("torch::autograd::Engine::thread_main(x)", "??", 0),
            ],
            &[
                ("at::_ops::empty_strided::redispatch(x)", "??", 0),
                ("torch::autograd::AccumulateGrad::apply(x)", "??", 0),
                ("torch::autograd::Engine::evaluate_function(x)", "??", 0),
            ],
            &[
                ("at::_ops::empty_strided::redispatch(x)", "??", 0),
                (
                    "_multi_tensor_adam",
                    "/venv/lib/python3.12/site-packages/torch/optim/adam.py",
                    791,
                ),
            ],
            // A driver function named like a loss must not make a matmul a loss.
            &[
                ("at::_ops::bmm::call(x)", "??", 0),
                ("forward", "/home/user/cs336/model.py", 18),
                CALL,
                ("train_with_loss", "/home/user/cs336/run.py", 5),
            ],
        ]);
        let rules = Rules::builtin();
        let mut c = Categorizer::new(&f, &rules);
        let cat = |c: &mut Categorizer, s: u32| {
            c.rule_for(StackId(s))
                .map(|r| c.category_name(r).to_owned())
        };
        assert_eq!(cat(&mut c, 1).as_deref(), Some(SOFTMAX));
        assert_eq!(cat(&mut c, 2).as_deref(), Some(BACKWARD));
        assert_eq!(cat(&mut c, 3).as_deref(), Some(GRADIENTS));
        assert_eq!(cat(&mut c, 4).as_deref(), Some(OPTIMIZER_TEMP));
        assert_eq!(cat(&mut c, 5).as_deref(), Some(ACTIVATIONS_OTHER));
    }

    #[test]
    fn user_rules_parse_from_toml_and_json_and_come_first() {
        let toml =
            "[[rule]]\ncategory = \"rope\"\nframe = 'model\\.py:14[78] '\nphase = \"forward\"\n";
        let r = Rules::parse(toml, Path::new("c.toml")).unwrap();
        assert_eq!(r.rules.len(), 1);
        assert_eq!(r.rules[0].phase, Some(Phase::Forward));
        let json = r#"[{"category": "rope", "op": "^cat$"}]"#;
        assert_eq!(
            Rules::parse(json, Path::new("c.json")).unwrap().rules.len(),
            1
        );
        let e = Rules::parse("[[rule]]\ncategory = \"x\"\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no condition"), "{e}");
        let e = Rules::parse(
            "[[rule]]\ncategory = \"x\"\nop = \"(\"\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("rule 1 `op`"), "{e}");
    }

    #[test]
    fn breakdown_sums_in_display_order() {
        let b = breakdown([(10, FFN), (30, PARAMETERS), (5, FFN), (55, "mine")]);
        let names: Vec<&str> = b.iter().map(|s| s.category.as_str()).collect();
        assert_eq!(names, vec!["mine", PARAMETERS, FFN]);
        assert_eq!(b[2].bytes, 15);
        assert_eq!(b[2].count, 2);
        assert!((b[0].share - 0.55).abs() < 1e-12);
    }
}
