//! Kernel classes: which kind of work a GPU kernel does (GEMM, fused attention, softmax,
//! elementwise, ...), decided by ordered regular-expression rules over its demangled name.
//!
//! The first rule whose pattern matches wins; a name no rule matches is [`KernelClass::Other`].
//! Each rule says what it is matched against ([`Scope`]): the kernel's own function name
//! ([`own_name`]: no namespaces, no template arguments, the wrapped kernel of a CUTLASS
//! `Kernel<...>`), or the whole signature where the template arguments are what tells a family
//! apart (PyTorch's `elementwise_kernel<..., direct_copy_kernel_cuda...>`). So `gemm` in
//! `fbgemm_gpu::` no longer makes an embedding lookup a GEMM. The built-in rules ([`BUILTIN_RULES`]) were written against every
//! distinct kernel name in the project's Nsight Systems fixtures and the public exports beside
//! them (PyTorch eager fp32/bf16 on H200, cuBLAS/cuBLASLt, CUTLASS, nvjet, TensorRT, cuDNN
//! convolutions, nvFuser, OpenACC), torch.compile, DDP and ROCm traces, and vendors' kernel names
//! (Tensile/hipBLASLt, RCCL, CUTLASS 3.x and Blackwell block-scaled GEMMs, FlashAttention 2-4,
//! vLLM, FlashInfer, TensorRT-LLM); `fixtures/kernel_classes.tsv` holds the names they are
//! checked against. A user file (TOML or JSON, see [`Classifier::load`]) adds rules
//! that are tried before the built-in ones, or replaces them. This module only names classes; it
//! does not sum times (that is [`crate::profile`]).
//!
//! Two choices worth knowing:
//! - cuBLAS split-K reductions (`cublasLt::splitKreduce_kernel`) are GEMM: cuBLAS splits one
//!   matrix product along K into partial products and launches this kernel to add them up. It
//!   exists only because of that GEMM, and whether it runs at all depends on the algorithm the
//!   heuristic picked, so counting it as a reduction would move time out of "GEMM" for a
//!   reason that has nothing to do with the model.
//!   The epilogues cuBLASLt could not fuse (`cublasLt::epilogue::impl::globalKernel`: bias,
//!   GELU, bias gradient) are GEMM for the same reason.
//! - Every convolution is [`KernelClass::Convolution`], however cuDNN, CUTLASS or TensorRT
//!   implements it: implicit-GEMM kernels (`sm80_xmma_fprop_implicit_gemm_*`, `*_scudnn_*`,
//!   `implicit_convolve_sgemm`, `cutlass_tensorop_*dgrad*`, `ImplicitGemmConvolution`) as well
//!   as Winograd and FFT transforms. Which algorithm cuDNN's heuristic picks should not move time
//!   between "GEMM" and "convolution".
//! - A foreach copy (`multi_tensor_apply_kernel<..., Copy<float, float>>`, `_foreach_copy_`) is a
//!   copy wherever it runs; other foreach kernels are optimizer updates.

use std::fmt;
use std::path::Path;

use regex::{Regex, RegexSet};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kernels::name::own_name;
use crate::model::trace::MemOpKind;

/// What kind of work a kernel does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    /// Matrix products: cuBLAS/cuBLASLt, CUTLASS, nvjet, gemv.
    Gemm,
    /// Fused attention: FlashAttention, memory-efficient attention (fmha), cuDNN SDPA.
    Attention,
    Softmax,
    Elementwise,
    Reduction,
    /// Layer/RMS/batch/group normalization kernels.
    Normalization,
    /// Optimizer updates, including PyTorch's `multi_tensor_apply_kernel` (`_foreach_*` ops).
    Optimizer,
    /// Embedding lookups, gather/scatter, indexing and the sorts they use.
    Index,
    /// Copy and cast kernels: `direct_copy_kernel`, concatenation, transposes, reformats.
    Copy,
    /// A memcpy executed by the copy engines (not a kernel).
    Memcpy,
    /// A memset (not a kernel).
    Memset,
    /// Collectives and point-to-point transfers between GPUs: NCCL and RCCL kernels, custom
    /// all-reduce kernels, NVLS `multimem` kernels.
    Communication,
    /// Convolutions, whatever the algorithm: implicit GEMM, Winograd and FFT transforms, im2col.
    Convolution,
    /// A CUDA graph execution traced as a whole (no per-kernel detail): its kernels could be
    /// anything.
    CudaGraph,
    Other,
}

impl KernelClass {
    pub const ALL: [KernelClass; 15] = [
        KernelClass::Gemm,
        KernelClass::Attention,
        KernelClass::Softmax,
        KernelClass::Elementwise,
        KernelClass::Reduction,
        KernelClass::Normalization,
        KernelClass::Optimizer,
        KernelClass::Index,
        KernelClass::Copy,
        KernelClass::Memcpy,
        KernelClass::Memset,
        KernelClass::Communication,
        KernelClass::Convolution,
        KernelClass::CudaGraph,
        KernelClass::Other,
    ];

    /// The name used in files, JSON and CSV.
    pub fn as_str(self) -> &'static str {
        match self {
            KernelClass::Gemm => "gemm",
            KernelClass::Attention => "attention",
            KernelClass::Softmax => "softmax",
            KernelClass::Elementwise => "elementwise",
            KernelClass::Reduction => "reduction",
            KernelClass::Normalization => "normalization",
            KernelClass::Optimizer => "optimizer",
            KernelClass::Index => "index",
            KernelClass::Copy => "copy",
            KernelClass::Memcpy => "memcpy",
            KernelClass::Memset => "memset",
            KernelClass::Communication => "communication",
            KernelClass::Convolution => "convolution",
            KernelClass::CudaGraph => "cuda_graph",
            KernelClass::Other => "other",
        }
    }

    /// The name shown in tables.
    pub fn label(self) -> &'static str {
        match self {
            KernelClass::Gemm => "GEMM",
            KernelClass::Attention => "fused attention",
            KernelClass::Index => "embedding/index",
            KernelClass::Copy => "copy/cast",
            KernelClass::Communication => "communication",
            KernelClass::CudaGraph => "cuda graph",
            other => other.as_str(),
        }
    }

    /// The class of a memcpy or memset.
    pub fn of_mem_op(kind: MemOpKind) -> KernelClass {
        match kind {
            MemOpKind::Memset => KernelClass::Memset,
            _ => KernelClass::Memcpy,
        }
    }
}

impl fmt::Display for KernelClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for KernelClass {
    type Err = String;
    /// A class name as written in a classes file; a few aliases are accepted.
    fn from_str(s: &str) -> Result<KernelClass, String> {
        let lower = s.trim().to_ascii_lowercase();
        let alias = match lower.as_str() {
            "matmul" => Some(KernelClass::Gemm),
            "fused_attention" | "fused attention" | "flash" => Some(KernelClass::Attention),
            "norm" => Some(KernelClass::Normalization),
            "embedding" | "embedding/index" | "embedding_index" | "gather" => {
                Some(KernelClass::Index)
            }
            "cast" | "copy/cast" | "copy_cast" => Some(KernelClass::Copy),
            "nccl" | "collective" => Some(KernelClass::Communication),
            "conv" => Some(KernelClass::Convolution),
            "graph" | "cuda graph" | "cudagraph" => Some(KernelClass::CudaGraph),
            _ => None,
        };
        alias
            .or_else(|| KernelClass::ALL.into_iter().find(|c| c.as_str() == lower))
            .ok_or_else(|| {
                let names: Vec<&str> = KernelClass::ALL.iter().map(|c| c.as_str()).collect();
                format!("unknown class `{s}` (expected one of {})", names.join(", "))
            })
    }
}

/// What text of a kernel's name a rule's pattern is matched against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The kernel's own function name ([`own_name`]): `split_embedding_codegen_forward_kernel`
    /// of `void fbgemm_gpu::split_embedding_codegen_forward_kernel<...>(...)`, the wrapped kernel
    /// of a CUTLASS `Kernel<...>`. Namespaces and template arguments cannot decide the class.
    Name,
    /// The whole demangled signature: for families told apart by their template arguments
    /// (PyTorch's `elementwise_kernel<..., direct_copy_kernel_cuda...>`, `multi_tensor_apply_kernel`
    /// functors) and for labels such as `[CUDA memcpy ...]`.
    Signature,
}

/// The built-in rules, in the order they are tried: (class, scope, pattern, why).
///
/// Order matters: communication comes first (collective names carry `reduce`), fused attention
/// before GEMM (cuDNN and CUTLASS attention kernels carry GEMM-like prefixes), GEMM before
/// everything else (epilogues put `relu` in GEMM names), softmax and normalization before
/// reduction, and index, copy and optimizer before elementwise (PyTorch wraps copies, gathers and
/// `_foreach_` updates in `*elementwise_kernel` templates). torch.compile's Triton kernels are
/// classed by their kind (`triton_poi_` pointwise, `triton_per_`/`triton_red_` reductions,
/// `triton_tem_` GEMM templates) before the op names Inductor strings into them (`permute`,
/// `index`, `scatter`) can decide; softmax and norms are told apart by the ops they reduce over.
/// Every rule is written for a family of names, not for one name.
pub const BUILTIN_RULES: &[(KernelClass, Scope, &str, &str)] = &[
    (KernelClass::Memcpy, Scope::Signature, r"^\[CUDA memcpy", "nsys's label of a memcpy"),
    (KernelClass::Memset, Scope::Signature, r"^\[CUDA memset", "nsys's label of a memset"),
    (KernelClass::CudaGraph, Scope::Signature, r"^\[CUDA graph", "a CUDA graph execution traced as a whole"),
    (
        KernelClass::Communication, Scope::Signature,
        r"(?i)nccl|rccl|msccl|nvshmem|deep_ep::",
        "collective libraries: NCCL (ncclDevKernel_*, ncclKernel_*), RCCL (rcclGenericKernel), MSCCL, NVSHMEM, DeepEP",
    ),
    (
        KernelClass::Communication, Scope::Signature,
        r"(?i)multimem_|cross_device_reduce|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",
        "custom collectives: NVLS multimem kernels, vLLM/SGLang/AITER cross_device_reduce, TensorRT-LLM one-/two-shot all-reduce",
    ),
    (
        KernelClass::Attention, Scope::Signature,
        r"(?i)flash_?(fwd|bwd|attn)|flash::|flash_\w*(fwd|bwd|dq|dk|dv|attention|decode|prefill)|FlashAttention|fmha|sdpa|flex_attention|mha_(fwd|bwd)|AttentionKernel|efficient_attention|(^|_)attn_(fwd|bwd)|paged_(attention|attn)|merge_attn_states|unified_attention|(Batch|Single)(Prefill|Decode)With\w*KVCache",
        "FlashAttention 1-4 (flash_fwd_*, flash::FlashAttnFwdSm90), fmha (xformers/PyTorch fmha_cutlassF/B, TensorRT-LLM fmhaSm100*, CK ck_tile::FmhaFwdKernel), cuDNN SDPA, Triton attention (attn_fwd), vLLM paged and unified attention, FlashInfer prefill/decode",
    ),
    (KernelClass::Gemm, Scope::Signature, r"(?i)splitk_?reduce|ReduceSplitK", "split-K reductions (cuBLAS, CUTLASS): the second half of a split-K GEMM"),
    (
        KernelClass::Gemm, Scope::Signature,
        r"^(void )?cublasLt::|^(void )?epilogue::impl::globalKernel",
        "cuBLASLt only launches matrix products, their split-K reductions and the epilogues (bias, GELU, bias gradient) it could not fuse into the product; nsys cuts the epilogue's name to `epilogue::impl::globalKernel<...>`",
    ),
    (
        KernelClass::Reduction, Scope::Signature,
        r"(?i)pooling|max_?pool|avg_?pool",
        "pooling (sm50_xmma_pooling_*, max_pool_forward_nchw): windowed max/average",
    ),
    (
        KernelClass::Convolution, Scope::Name,
        r"(?i)^sm\d+_xmma_(fprop|dgrad|wgrad)|implicit_?(gemm|convolve)|ImplicitGemmConvolution|scudnn|^cutlass\w*(fprop|dgrad|wgrad)|^(conv2d|conv3d|convolution)_|_(fprop|dgrad|wgrad)_",
        "convolutions, implicit-GEMM ones included (sm80_xmma_fprop_implicit_gemm_*, *_scudnn_*, implicit_convolve_sgemm, CUTLASS ImplicitGemmConvolution and cutlass_tensorop_*fprop/dgrad/wgrad): they are matrix products over an im2col matrix, but the model asked for a convolution",
    ),
    (
        KernelClass::Gemm, Scope::Signature,
        r"^sm\d+_xmma_\w*gemm",
        "cuBLAS xmma GEMMs (sm80_xmma_gemm_*)",
    ),
    (KernelClass::Gemm, Scope::Signature, r"^sm(9\d|1\d\d)_", "Hopper/Blackwell cuBLAS and CUTLASS kernels named by architecture (sm90_*, sm100_*)"),
    (
        KernelClass::Gemm, Scope::Signature,
        r"(^|_)(maxwell|kepler|pascal|volta|turing|ampere|ada|hopper|blackwell)_\w*gemm",
        "cuBLAS/TensorRT SASS kernels: ampere_sgemm_*, trt_ampere_h16816gemm_*",
    ),
    (KernelClass::Gemm, Scope::Signature, r"^nvjet_", "cuBLAS nvjet kernels (Hopper and later)"),
    (
        KernelClass::Gemm, Scope::Name,
        r"(?i)cutlass\w*gemm|^Gemm(Universal|Grouped|Array|Batched|Splitk|WithKReduction)?$",
        "CUTLASS GEMMs, named by the kernel its `Kernel`/`Kernel2`/`device_kernel` wrapper runs: cutlass_80_simt_sgemm_*, GemmUniversal, cutlass3x_sm100_bstensorop_*",
    ),
    (KernelClass::Gemm, Scope::Signature, r"^(Custom_)?Cijk_", "ROCm Tensile and hipBLASLt GEMMs (Cijk_Ailk_Bljk_*, Cijk_Alik_Bljk_*_MI16x16x1_*)"),
    (
        KernelClass::Gemm, Scope::Signature,
        r"^[Bb]mm_(Mx)?(E\dm\d|Bfloat16|Fp16|Fp32)",
        "TensorRT-LLM/FlashInfer trtllm-gen batched GEMMs named by operand types, block-scaled ones included (bmm_E4m3_E4m3E4m3_Fp32_*, bmm_MxE4m3_MxE2m1MxE4m3_*)",
    ),
    (KernelClass::Gemm, Scope::Signature, r"^triton_tem_", "torch.compile Triton templates (mm, bmm, addmm, conv)"),
    (
        KernelClass::Gemm, Scope::Signature,
        r"(?i)fused_moe_kernel|wvSplitK",
        "grouped and skinny GEMMs under other names: Triton fused MoE, vLLM's ROCm wvSplitK",
    ),
    (
        KernelClass::Gemm, Scope::Signature,
        r"nvfuser_matmul|nvfuser_\w*\(.*TensorMap.*TensorMap",
        "nvFuser matmuls (operands loaded through TMA descriptors on Hopper)",
    ),
    (
        KernelClass::Gemm, Scope::Name,
        r"(?i)gemm|gemv|matmul",
        "any other GEMM or GEMV by its own name: gemmSN_*, gemmk1_kernel, gemv2T_*, deep_gemm's sm90_fp8_gemm_*; a namespace (`fbgemm_gpu::`) or a template argument does not make a GEMM",
    ),
    (KernelClass::Softmax, Scope::Signature, r"(?i)softmax", "softmax and log-softmax (cunn_SoftMaxForward*, topkGatingSoftmax)"),
    (
        KernelClass::Softmax, Scope::Signature,
        r"^triton_(per|red)_fused\w*_(amax\w*_exp|exp\w*_max)\w*_sum",
        "torch.compile softmax: a Triton reduction over max, exp and sum (Inductor lists fused ops alphabetically)",
    ),
    (
        KernelClass::Normalization, Scope::Signature,
        r"(?i)layer_?norm|rms_?norm|group_?norm|batch_?norm|instance_?norm|RowwiseMoments|welford|\bbn_(fw|bw)",
        "layer, RMS, group, batch and instance normalization",
    ),
    (
        KernelClass::Normalization, Scope::Signature,
        r"^triton_(per|red)_fused\w*(_mean\w*_rsqrt|_var_mean)",
        "torch.compile RMS and layer norms: a Triton reduction over mean (or var_mean) and rsqrt",
    ),
    (KernelClass::Reduction, Scope::Signature, r"^triton_(per|red)_", "other torch.compile Triton reductions"),
    (KernelClass::Elementwise, Scope::Signature, r"^triton_poi_", "torch.compile Triton pointwise kernels, whatever views and permutes they fuse"),
    (
        KernelClass::Copy, Scope::Signature,
        r"multi_tensor_apply\w*<.*(::Copy<|CopyFunctor<)",
        "foreach copies (`_foreach_copy_`, CUDA-graph input copies): a copy wherever it runs, not an optimizer step",
    ),
    (
        KernelClass::Optimizer, Scope::Signature,
        r"multi_tensor_apply|(?i)adam|fused_sgd|lamb_|_fused_sgd",
        "optimizer updates; PyTorch's foreach/fused AdamW runs multi_tensor_apply_kernel",
    ),
    (
        KernelClass::Elementwise, Scope::Signature,
        r"(?i)rotary|(^|_)rope_|swiglu|geglu|reglu|(act|silu|gelu|gelu_tanh)_and_mul|gated_act",
        "rotary position embeddings (pointwise, though their names say embedding) and gated activations: SwiGLU/GeGLU, vLLM's act_and_mul, Transformer Engine's gated_act_kernel",
    ),
    (
        KernelClass::Index, Scope::Signature,
        r"(?i)embedding|index_select|indexSelect|index_elementwise|indexing_backward|index_put|indexFunc|gather|scatter|radix_?sort|segmented_sort|bitonic|topk|moe_align|routingIndices|finalizeMoeRouting|moe_finalize|finalize_moe|expandInputRows|moe_(un)?permute|moe_sum|bounds_check_indices|linearize_index|bucketize_sparse",
        "embedding lookups, gather/scatter, indexing and the sorts behind their backward; MoE token routing and its inverse, the finalize kernels that gather expert outputs back to token order (weighted by the router); fbgemm_gpu's index checks and bucketing",
    ),
    (
        KernelClass::Copy, Scope::Signature,
        r"(?i)copy_kernel|direct_copy|CatArray|transpose|permut|Reformat|copyVectorized|_to_copy|\bcast_|nchw_?to_?nhwc|nhwc_?to_?nchw|(reshape|concat)_and_cache|(de)?quant(ize|_)",
        "copies, casts and quantization, concatenation, transposes and layout changes, KV-cache writes",
    ),
    (
        KernelClass::Convolution, Scope::Signature,
        r"(?i)winograd|fft2d|fft_|im2col|col2im|flip_filter|convolve|conv2d|wgrad|dgrad|computeOffsets",
        "convolution kernels that are not GEMMs: transforms, weight-gradient reductions, offset tables",
    ),
    (
        KernelClass::Normalization, Scope::Signature,
        r"nvfuser_(inner_outer_persistent|outer_persistent|inner_persistent)",
        "nvFuser persistent schedules (normalizations)",
    ),
    (
        KernelClass::Reduction, Scope::Signature,
        r"(?i)reduce|reduction|argmax|argmin|cumsum|cumprod|scan_kernel|nll_loss|cross_entropy",
        "reductions (sum, mean, max), losses, scans",
    ),
    (
        KernelClass::Elementwise, Scope::Signature,
        r"(?i)elementwise|pointwise|fill|triu|tril|distribution|dropout|relu|gelu|silu|sigmoid|tanh|_vectorized\d+_kernel",
        "pointwise kernels, fills, masks, random number generation and jiterator kernels (erfinv_kernel_vectorized4_kernel)",
    ),
];

/// One classification rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub class: KernelClass,
    /// The text the pattern is matched against. A user file's rules match the signature.
    pub scope: Scope,
    pub pattern: String,
    /// Where the rule comes from: `built-in` or the user file.
    pub origin: String,
}

/// A classes file as written by a user.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassesFile {
    /// Keep the built-in rules after the user's (default true).
    #[serde(default = "yes")]
    defaults: bool,
    #[serde(default)]
    rules: Vec<FileRule>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRule {
    class: String,
    pattern: String,
}

/// Ordered rules, compiled once.
#[derive(Clone, Debug)]
pub struct Classifier {
    rules: Vec<Rule>,
    set: RegexSet,
}

impl Default for Classifier {
    fn default() -> Classifier {
        Classifier::builtin()
    }
}

impl Classifier {
    /// The built-in rules only.
    pub fn builtin() -> Classifier {
        let rules = builtin_rules();
        Classifier::from_rules(rules).expect("built-in patterns are valid regular expressions")
    }

    /// A classifier over `rules`, tried in order.
    pub fn from_rules(rules: Vec<Rule>) -> Result<Classifier, regex::Error> {
        let set = RegexSet::new(rules.iter().map(|r| r.pattern.as_str()))?;
        Ok(Classifier { rules, set })
    }

    /// The built-in rules with a user file's rules in front of them (or instead of them when the
    /// file says `defaults = false`). The file is TOML when its name ends in `.toml`, JSON when it
    /// ends in `.json`:
    ///
    /// ```toml
    /// defaults = true            # keep the built-in rules after these (the default)
    /// [[rules]]
    /// class = "attention"
    /// pattern = "my_fused_attention"
    /// ```
    pub fn load(path: &Path) -> Result<Classifier> {
        crate::formats::check_file(path)?;
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        let bad = |message: String| Error::KernelClasses {
            path: path.to_owned(),
            message,
        };
        let file: ClassesFile = match ext.as_deref() {
            Some("toml") => toml::from_str(&text).map_err(|e| bad(one_line(&e.to_string())))?,
            Some("json") => serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?,
            _ => {
                return Err(bad(
                    "a classes file must be named *.toml or *.json (its extension says which)"
                        .into(),
                ))
            }
        };
        let origin = path.display().to_string();
        let mut rules = Vec::with_capacity(file.rules.len() + BUILTIN_RULES.len());
        for (i, r) in file.rules.iter().enumerate() {
            let class: KernelClass = r
                .class
                .parse()
                .map_err(|e: String| bad(format!("rule {}: {e}", i + 1)))?;
            Regex::new(&r.pattern).map_err(|e| {
                bad(format!(
                    "rule {}: pattern `{}` is not a valid regular expression: {}",
                    i + 1,
                    r.pattern,
                    one_line(&e.to_string())
                ))
            })?;
            rules.push(Rule {
                class,
                scope: Scope::Signature,
                pattern: r.pattern.clone(),
                origin: origin.clone(),
            });
        }
        if file.defaults {
            rules.extend(builtin_rules());
        }
        Classifier::from_rules(rules).map_err(|e| bad(one_line(&e.to_string())))
    }

    /// The class of a demangled kernel name (or of an nsys memory-operation label).
    pub fn classify(&self, name: &str) -> KernelClass {
        self.rule_index(name)
            .map_or(KernelClass::Other, |i| self.rules[i].class)
    }

    /// The rule that decides `name`, if any.
    pub fn rule_for(&self, name: &str) -> Option<&Rule> {
        self.rule_index(name).map(|i| &self.rules[i])
    }

    fn rule_index(&self, name: &str) -> Option<usize> {
        // `RegexSet` reports every rule that matches; the first in order whose pattern matches
        // its own scope wins.
        let signature = self.set.matches(name);
        let own = own_name(name);
        let by_name = self.set.matches(&own);
        self.rules.iter().enumerate().find_map(|(i, r)| {
            let hit = match r.scope {
                Scope::Name => by_name.matched(i),
                Scope::Signature => signature.matched(i),
            };
            hit.then_some(i)
        })
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

fn builtin_rules() -> Vec<Rule> {
    BUILTIN_RULES
        .iter()
        .map(|(class, scope, pattern, _)| Rule {
            class: *class,
            scope: *scope,
            pattern: (*pattern).to_owned(),
            origin: "built-in".to_owned(),
        })
        .collect()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use KernelClass::*;

    fn check(cases: &[(&str, KernelClass)]) {
        let c = Classifier::builtin();
        for (name, want) in cases {
            assert_eq!(c.classify(name), *want, "{name}");
        }
    }

    #[test]
    fn gemm_families_from_real_exports() {
        check(&[
            ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", Gemm),
            ("sm80_xmma_gemm_f32f32_f32f32_f32_nt_n_tilesize64x128x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_split_k_kernel__5x_cublas", Gemm),
            ("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)", Gemm),
            ("ampere_sgemm_32x32_sliced1x4_tn", Gemm),
            ("nvjet_sm90_tst_96x128_64x6_2x1_v_bz_splitK_NNN", Gemm),
            ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NTT", Gemm),
            ("void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float, float, float, float, (bool)0, float, float, float, (bool)1, (bool)0, (bool)0, (bool)0>(cublasLt::cublasSplitKParams<T6>, const T4 *, const T10 *, T9 *, T5 *, const T6 *, const T6 *, const T11 *, const T4 *, T11 *, void *, long, T6 *, int *, T6 *, T6 *, const T6 *, const T6 *, const T6 *, const T6 *, const T6 *)", Gemm),
            ("void gemmSN_NN_kernel<float, (int)128, (int)2, (int)4, (int)8, (int)3, (int)4, cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<float>>(cublasGemmSmallNParams<T8, T9, T1>)", Gemm),
            ("void gemv2T_kernel_val<int, int, float2, float2, float2, (int)128, (int)16, (int)2, (int)2, (bool)0, cublasGemvParams<cublasGemvTensorBatched<const float2>, cublasGemvTensorBatched<float2>, float2>>(T13, T6, T6)", Gemm),
            ("void gemmk1_kernel<int, float, (int)256, (int)5, (bool)0, (bool)0, (bool)0, (bool)0, cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<const float>, cublasGemvTensorStridedBatched<float>, float, (int)0>(cublasGemmk1Params<T2, T9, T10, T11, T12, biasType<T9::value_type, T12>::type>)", Gemm),
            ("volta_sgemm_128x64_nn", Gemm),
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", Gemm),
            ("trt_ampere_h16816gemm_64x64_ldg8_relu_stages_64x5_tn_v1", Gemm),
            ("sm80_xmma_fprop_implicit_gemm_f16f16_f16f16_f16_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_g1_tensor16x8x16_execute_kernel_trt", Convolution),
            ("volta_scudnn_128x32_relu_interior_nn_v1", Convolution),
            ("void cudnn::detail::implicit_convolve_sgemm<float, float, (int)1024, (int)5, (int)5, (int)3, (int)3, (int)3, (int)1, (bool)1, (bool)0, (bool)1>(int, int, int, const T1 *, int, T2 *, T1 *, kernel_conv_params, unsigned long long, int, float, float, int, const T2 *, const T2 *, bool, int, int)", Convolution),
            ("<unnamed>::nvfuser_none_f0_c0_r0_g0(<unnamed>::Tensor<<unnamed>::__half, (int)3, (int)3>, <unnamed>::Tensor<<unnamed>::__half, (int)3, (int)3>, <unnamed>::TensorMap, <unnamed>::TensorMap, <unnamed>::TensorMap, <unnamed>::Tensor<<unnamed>::__half, (int)2, (int)2>)", Gemm),
        ]);
    }

    #[test]
    fn pytorch_kernels_from_the_training_exports() {
        check(&[
            ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, at::native::<unnamed>::TernaryOpScalarFunctor<float, (int)2, (int)2, (int)0>, at::native::LerpFunctor<float>, float>(T1, T2, T3...)", Optimizer),
            ("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)", Copy),
            ("void at::native::vectorized_elementwise_kernel<(int)8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>(int, T2, T3)", Copy),
            ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, std::array<char *, (unsigned long)3>>(int, T2, T3)", Elementwise),
            ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::MaxOps<float>, unsigned int, float, (int)4, (int)4>>(T3)", Reduction),
            ("void at::native::vectorized_gather_kernel<(int)16, long>(char *, char *, T2 *, int, long, long, long, long, bool)", Index),
            ("void <unnamed>::indexing_backward_kernel<float, (int)4>(const long *, const long *, const T1 *, T1 *, long, long, long, long, bool)", Index),
            ("void at::native::<unnamed>::cunn_SoftMaxForwardSmem<(int)4, float, float, float, at::native::<unnamed>::LogSoftMaxForwardEpilogue, long>(T4 *, const T2 *, T6)", Softmax),
            ("void at::native::<unnamed>::CatArrayBatchedCopy<at::native::<unnamed>::OpaqueType<(unsigned int)4>, unsigned int, (int)4, (int)64, (int)64>(T1 *, at::native::<unnamed>::CatArrInputTensorMetadata<T1, T2, T4, T5>, at::native::<unnamed>::TensorSizeStride<T2, (unsigned int)4>, int, T2)", Copy),
            ("void at::native::triu_tril_kernel<bool, int, (bool)0, (int)8, (bool)0>(at::cuda::detail::TensorInfo<T1, T2>, at::cuda::detail::TensorInfo<const T1, T2>, long, long, T2)", Elementwise),
            ("void <unnamed>::elementwise_kernel_with_index<int, at::native::arange_cuda_out(const c10::Scalar &, const c10::Scalar &, const c10::Scalar &, at::Tensor &)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 4)]::operator ()() const::[lambda(int, int) (instance 1)]>(T1, T2, function_traits<T2>::result_type *)", Elementwise),
            ("void at_cuda_detail::cub::detail::radix_sort::DeviceRadixSortSingleTileKernel<at_cuda_detail::cub::detail::radix::policy_hub<long, at::cuda::cub::detail::OpaqueType<(int)8>, unsigned long long>::Policy1000, (at_cuda_detail::cub::SortOrder)0, long, at::cuda::cub::detail::OpaqueType<(int)8>, unsigned long long, at_cuda_detail::cub::detail::identity_decomposer_t>(const T3 *, T3 *, const T4 *, T4 *, T5, int, int, T6)", Index),
            ("void at::native::<unnamed>::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(T1 *, T1 *, const T1 *, const T3 *, const T1 *, bool, long, long, long, long)", Reduction),
            ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::<unnamed>::silu_backward_kernel(at::TensorIteratorBase &)::[lambda() (instance 1)]::operator ()() const::[lambda() (instance 2)]::operator ()() const::[lambda(float, float) (instance 1)], std::array<char *, (unsigned long)3>>(int, T2, T3)", Elementwise),
        ]);
    }

    #[test]
    fn other_libraries_and_labels() {
        check(&[
            ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)", Communication),
            ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<(int)64, (int)128, (int)128, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)64, (int)128, (int)128, (int)4, cutlass::bfloat16_t>>, (bool)0, (bool)1, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>(pytorch_flash::Flash_fwd_params)", Attention),
            ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, (bool)1, (int)64, (int)64, (int)64, (bool)1, (bool)1>::Params)", Attention),
            ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x64_4x1x1_kernel0_0", Attention),
            ("sm50_xmma_pooling_fw_4d_FP16FP32NHWC_Average_FastDiv_CAlign8_execute_kernel_trt", Reduction),
            ("void genericReformat::copyVectorizedKernel<double, __half, __half, (bool)1, (bool)0, (int)1>(unsigned int, const void *, genericReformat::ArrayN<T6>, genericReformat::ArrayNWithReducedDivisors<T6>, genericReformat::ArrayN<T6>, int, const float *, void *)", Copy),
            ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<T1, T2>)", Convolution),
            ("void fft2d_r2c_32x32<float, (bool)0, (unsigned int)0, (bool)0>(float2 *, const T1 *, int, int, int, int, int, int, int, int, int, cudnn::reduced_divisor, bool, int2, int, int)", Convolution),
            ("triton_per_fused__softmax_0", Softmax),
            ("triton_red_fused_native_layer_norm_1", Normalization),
            ("triton_poi_fused_add_mul_2", Elementwise),
            ("[CUDA memcpy Host-to-Device]", Memcpy),
            ("[CUDA memset]", Memset),
            ("kmeans_235_gpu", Other),
        ]);
    }

    #[test]
    fn classes_are_decided_on_the_kernels_own_name() {
        check(&[
            // `gemm` in a namespace does not make a GEMM.
            ("void fbgemm_gpu::split_embedding_codegen_forward_unweighted_kernel<float, float, (int)64, (int)4, (int)1>(at::GenericPackedTensorAccessor<float, (unsigned long)1, at::RestrictPtrTraits, long>)", Index),
            ("void fbgemm_gpu::permute_2D_data_kernel<true, int, long>(int, int, int, int const*, long const*, int const*, long const*, long*, long*)", Copy),
            // The wrapped kernel decides for a CUTLASS wrapper.
            ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>>>(T1::Params)", Gemm),
            // A foreach copy is a copy, a foreach lerp an optimizer step.
            ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, at::native::<unnamed>::UnaryOpFunctor<float, (int)2, (int)1, (int)1>, at::native::Copy<float, float>>(T1, T2, T3...)", Copy),
            ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, at::native::<unnamed>::TernaryOpScalarFunctor<float, (int)2, (int)2, (int)0>, at::native::LerpFunctor<float>, float>(T1, T2, T3...)", Optimizer),
            ("void cublasLt::epilogue::impl::globalKernel<8, 32, float, float, float, true, true, 1>(int, int, long, float*, cublasLtEpilogue_t, int, float*, long, void*, long, long, long, float*, long, int*)", Gemm),
            ("_swiglu_forward_kernel", Elementwise),
            ("void tensorrt_llm::kernels::finalizeMoeRoutingKernel<float, float, float, (tensorrt_llm::kernels::ScaleMode)1, (bool)1>(float const*, float*, float const*, float const*, int const*, int const*, long, long, long, int const*)", Index),
            ("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_train", Convolution),
        ]);
        assert_eq!(
            own_name("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)"),
            "cutlass_80_simt_sgemm_256x128_8x4_nn_align1"
        );
    }

    #[test]
    fn class_names_round_trip_and_aliases_parse() {
        for c in KernelClass::ALL {
            assert_eq!(c.as_str().parse::<KernelClass>(), Ok(c));
        }
        assert_eq!("NCCL".parse::<KernelClass>(), Ok(Communication));
        assert_eq!("embedding".parse::<KernelClass>(), Ok(Index));
        let err = "matrix".parse::<KernelClass>().unwrap_err();
        assert!(err.contains("gemm, attention"), "{err}");
    }

    #[test]
    fn user_rules_come_first() {
        let mut rules = vec![Rule {
            class: Attention,
            scope: Scope::Signature,
            pattern: "^ampere_sgemm_128x128_nn$".into(),
            origin: "test".into(),
        }];
        rules.extend(builtin_rules());
        let c = Classifier::from_rules(rules).unwrap();
        assert_eq!(c.classify("ampere_sgemm_128x128_nn"), Attention);
        assert_eq!(c.classify("ampere_sgemm_128x128_nt"), Gemm);
        assert_eq!(
            c.rule_for("ampere_sgemm_128x128_nn").unwrap().origin,
            "test"
        );
    }
}
