//! The built-in kernel classes against real kernel names from several vendors' traces and
//! sources (`fixtures/kernel_classes.tsv`: NVIDIA and AMD ROCm, PyTorch eager and torch.compile,
//! cuDNN, TensorRT, CUTLASS, vLLM, FlashInfer, TensorRT-LLM, NCCL and RCCL), and against names of
//! the same families that the file does not hold.

use crate::common;

use analyze::kernels::class::{Classifier, KernelClass};

/// (line number, expected class, name, the provenance line above it).
fn rows() -> Vec<(usize, KernelClass, String, String)> {
    let path = common::fixture("kernel_classes.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut source = String::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(comment) = line.strip_prefix("# ") {
            source = comment.to_owned();
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (class, name) = line
            .split_once('\t')
            .unwrap_or_else(|| panic!("line {}: not `class<TAB>name`", i + 1));
        let class: KernelClass = class
            .parse()
            .unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
        out.push((i + 1, class, name.to_owned(), source.clone()));
    }
    out
}

#[test]
fn real_kernel_names_of_several_vendors_land_in_their_class() {
    let rows = rows();
    assert!(rows.len() >= 150, "{} names", rows.len());
    let sources = |word: &str| rows.iter().filter(|r| r.3.contains(word)).count();
    for vendor in ["NVIDIA", "AMD", "vLLM", "TensorRT", "FlashAttention"] {
        assert!(sources(vendor) >= 5, "{vendor}: {} names", sources(vendor));
    }
    let c = Classifier::builtin();
    let wrong: Vec<String> = rows
        .iter()
        .filter(|(_, want, name, _)| c.classify(name) != *want)
        .map(|(line, want, name, _)| {
            let got = c.classify(name);
            let short: String = name.chars().take(120).collect();
            format!("line {line}: {short}: want {want}, got {got}")
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "{} misclassified:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// Names written for this test, one per family, none of them in the file: other tile sizes,
/// types, collectives and architectures of the same libraries.
#[test]
fn the_rules_hold_for_names_of_the_same_families() {
    use KernelClass::*;
    let c = Classifier::builtin();
    for (name, want) in [
        ("Cijk_Alik_Bljk_SB_MT64x64x8_SE_GSU1_ISA90a_WG16_16_1_WGM8", Gemm),
        ("Cijk_Ailk_Bjlk_F8BS_BH_MT256x256x64_MI32x32x16_SN_ISA950", Gemm),
        ("bmm_E5m2_E5m2E5m2_Fp32_t128x64x128_s4_et64x64_m64x64x32_cga1x1x1_TN_sm100a", Gemm),
        ("bmm_MxE2m1_MxE2m1MxE2m1_Fp32_t128x128x256_s3_TN_sm100f", Gemm),
        ("cutlass3x_sm120_bstensorop_s128x128x128gemm_block_scaled_ue8m0xe2m1_ue8m0xe2m1_f32_bf16_bf16_128x128x128_0_tnt_align32_o_vs32_1sm", Gemm),
        ("nvjet_sm120_qqtst_128x128_128x4_1x1_v_bz_TNN", Gemm),
        ("sm100_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128_cgasize1x1x1_execute_kernel__5x_cublas", Gemm),
        ("void deep_gemm::sm90_fp8_gemm_1d2d_impl<(unsigned int)128>", Gemm),
        ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL128(ncclDevKernelArgsStorage<(unsigned long)4096>)", Communication),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", Communication),
        ("void rcclGenericKernel<2, true>(ncclDevKernelArgsStorage<4096ul>)", Communication),
        ("void <unnamed>::multimem_all_gather_kernel<(int)16>(unsigned char *, unsigned long)", Communication),
        ("void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*, vllm::RankSignals)", Communication),
        ("twoShotAllReduceKernel", Communication),
        ("flash_bwd_f16_d256", Attention),
        ("flash_fwd_sm100_f8_d128", Attention),
        ("void flash::FlashAttnBwdSm90<flash::CollectiveMainloopBwdSm90<2>>", Attention),
        ("fmha_cutlassF_f16_aligned_32x128_gmem_sm90", Attention),
        ("void vllm::paged_attention_v2_reduce_kernel<float, 128, 128, 512>", Attention),
        ("kernel_unified_attention_2d", Attention),
        ("_attn_bwd_dkdv", Attention),
        ("ck_tile::FmhaBwdDQDKDVKernel", Attention),
        ("triton_per_fused__log_softmax_7", Softmax),
        ("triton_red_fused_amax_exp_sub_sum_3", Softmax),
        ("triton_per_fused_add_mean_pow_rsqrt_12", Normalization),
        ("triton_red_fused_native_group_norm_0", Normalization),
        ("triton_poi_fused_permute_transpose_view_4", Elementwise),
        ("triton_red_fused_sum_9", Reduction),
        ("void vllm::rotary_embedding_kernel<float, (bool)0>(const long *)", Elementwise),
        ("void vllm::reshape_and_cache_kernel<float, float>(const float *)", Copy),
        ("void vllm::dynamic_scaled_fp8_quant_kernel<c10::BFloat16>(const float *)", Copy),
        ("void at::native::(anonymous namespace)::avg_pool2d_out_cuda_frame<float, float>(int)", Reduction),
        ("lgamma_kernel_vectorized4_kernel", Elementwise),
    ] {
        assert_eq!(c.classify(name), want, "{name}");
    }
}
