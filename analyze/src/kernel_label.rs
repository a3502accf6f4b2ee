//! Readable kernel labels for tables.
//!
//! A demangled PyTorch kernel name runs to 400 characters of namespaces, casts, lambdas and
//! parameter lists; what tells two kernels apart is the template and its functor
//! (`vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, array<char *, 3>>`). [`display_name`]
//! keeps that and drops the rest. It is for display only: grouping and JSON use the full name.

use std::sync::OnceLock;

use regex::Regex;

struct Patterns {
    casts: Regex,
    operator_call: Regex,
    lambda: Regex,
    namespace: Regex,
    parens: Regex,
    spaces: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| Patterns {
        // `(int)128`, `(unsigned long)3`, `(bool)0`: template arguments printed with a cast.
        casts: Regex::new(
            r"\((?:unsigned |signed )?(?:int|bool|long|long long|char|short)\)(-?\d)",
        )
        .expect("valid"),
        operator_call: Regex::new(r"::operator \(\)\(\)(?: const)?").expect("valid"),
        lambda: Regex::new(r"::\[lambda\([^\]]*?\) \(instance \d+\)\]").expect("valid"),
        namespace: Regex::new(r"(?:<unnamed>|[A-Za-z_][A-Za-z_0-9]*)::").expect("valid"),
        // Innermost parenthesised groups: parameter lists, after casts are gone.
        parens: Regex::new(r"\([^()]*\)").expect("valid"),
        spaces: Regex::new(r"\s+").expect("valid"),
    })
}

/// `name` without return type, parameter lists, namespaces, lambdas and casts, cut to at most
/// `max` characters (an ellipsis marks a cut).
pub fn display_name(name: &str, max: usize) -> String {
    let p = patterns();
    // Return types: `void ` in front of the kernel and of functions inside its template.
    let mut s = name.trim().replace("void ", "");
    s = p.casts.replace_all(&s, "$1").into_owned();
    s = p.operator_call.replace_all(&s, "").into_owned();
    s = p.lambda.replace_all(&s, "").into_owned();
    s = p.namespace.replace_all(&s, "").into_owned();
    // Strip parameter lists from the inside out; a bounded loop, since each pass removes the
    // innermost level and names are finite.
    for _ in 0..8 {
        let next = p.parens.replace_all(&s, "").into_owned();
        if next == s {
            break;
        }
        s = next;
    }
    s = p.spaces.replace_all(s.trim(), " ").into_owned();
    if s.is_empty() {
        s = name.to_owned();
    }
    truncate(&s, max)
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorch_names_keep_template_and_functor() {
        assert_eq!(
            display_name("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, std::array<char *, (unsigned long)3>>(int, T2, T3)", 200),
            "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>, array<char *, 3>>"
        );
        assert_eq!(
            display_name("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)", 200),
            "elementwise_kernel<128, 2, gpu_kernel_impl_nocast<direct_copy_kernel_cuda>>"
        );
        assert_eq!(
            display_name("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, at::native::<unnamed>::TernaryOpScalarFunctor<float, (int)2, (int)2, (int)0>, at::native::LerpFunctor<float>, float>(T1, T2, T3...)", 200),
            "multi_tensor_apply_kernel<TensorListMetadata<2>, TernaryOpScalarFunctor<float, 2, 2, 0>, LerpFunctor<float>, float>"
        );
    }

    #[test]
    fn library_names() {
        assert_eq!(
            display_name(
                "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)",
                200
            ),
            "Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
        );
        assert_eq!(
            display_name("ampere_sgemm_128x64_tn", 200),
            "ampere_sgemm_128x64_tn"
        );
        let n = "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas";
        let short = display_name(n, 40);
        assert_eq!(short.chars().count(), 40);
        assert!(short.ends_with('…') && short.starts_with("sm80_xmma_gemm_f32f32"));
    }
}
