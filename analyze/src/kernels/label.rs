//! Readable kernel labels for tables.
//!
//! A demangled PyTorch kernel name runs to 400 characters of namespaces, casts, lambdas and
//! parameter lists; what tells two kernels apart is the template and its functor
//! (`vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>`). [`display_name`]
//! keeps that and drops the rest. It is for display only: grouping and JSON use the full name.

use std::sync::OnceLock;

use regex::Regex;

use crate::render::cells::truncate;

struct Patterns {
    casts: Regex,
    operator_call: Regex,
    lambda: Regex,
    namespace: Regex,
    parens: Regex,
    spaces: Regex,
    char_array: Regex,
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
        char_array: Regex::new(r", (?:array|Array)<char \*, \d+>").expect("valid"),
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
    // PyTorch's launch wrappers and the pointer array of its elementwise kernels say nothing
    // about the operation; repeated scalar types (`float, float, float`) say it three times.
    for wrapper in ["gpu_kernel_impl_nocast", "gpu_kernel_impl"] {
        s = unwrap_template(&s, wrapper);
    }
    s = p.char_array.replace_all(&s, "").into_owned();
    s = collapse_repeats(&s);
    if s.is_empty() {
        s = name.to_owned();
    }
    truncate(&s, max)
}

/// `s` with every `wrapper<inner>` replaced by `inner`.
fn unwrap_template(s: &str, wrapper: &str) -> String {
    let mut out = s.to_owned();
    let open = format!("{wrapper}<");
    while let Some(start) = out.find(&open) {
        // The wrapper's name must not be the tail of a longer identifier.
        let prev = out[..start].chars().next_back();
        if prev.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            break;
        }
        let inner_start = start + open.len();
        let mut depth = 1usize;
        let mut end = None;
        for (i, c) in out[inner_start..].char_indices() {
            match c {
                '<' => depth += 1,
                '>' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(inner_start + i);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(end) = end else { break };
        out = format!(
            "{}{}{}",
            &out[..start],
            &out[inner_start..end],
            &out[end + 1..]
        );
    }
    out
}

/// `s` with runs of one plain type argument (`float, float, float`) cut to one.
fn collapse_repeats(s: &str) -> String {
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = s.to_owned();
    let mut from = 0;
    while let Some(pos) = out[from..].find(", ").map(|p| p + from) {
        let before_start = out[..pos]
            .char_indices()
            .rev()
            .find(|&(_, c)| !is_word(c))
            .map_or(0, |(i, c)| i + c.len_utf8());
        let before = &out[before_start..pos];
        let after_start = pos + 2;
        let after_len = out[after_start..]
            .char_indices()
            .find(|&(_, c)| !is_word(c))
            .map_or(out.len() - after_start, |(i, _)| i);
        let after = &out[after_start..after_start + after_len];
        let next = out[after_start + after_len..].chars().next();
        // Only plain words (not `Foo<...>` or numbers) that are the same on both sides.
        if !before.is_empty()
            && before == after
            && !before.starts_with(|c: char| c.is_ascii_digit())
            && next != Some('<')
        {
            out.replace_range(pos..after_start + after_len, "");
            from = before_start;
        } else {
            from = after_start;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorch_names_keep_template_and_functor() {
        assert_eq!(
            display_name("void at::native::vectorized_elementwise_kernel<(int)4, at::native::CUDAFunctor_add<float>, std::array<char *, (unsigned long)3>>(int, T2, T3)", 200),
            "vectorized_elementwise_kernel<4, CUDAFunctor_add<float>>"
        );
        assert_eq!(
            display_name("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)]>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)", 200),
            "elementwise_kernel<128, 2, direct_copy_kernel_cuda>"
        );
        assert_eq!(
            display_name("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, at::native::<unnamed>::TernaryOpScalarFunctor<float, (int)2, (int)2, (int)0>, at::native::LerpFunctor<float>, float>(T1, T2, T3...)", 200),
            "multi_tensor_apply_kernel<TensorListMetadata<2>, TernaryOpScalarFunctor<float, 2, 2, 0>, LerpFunctor<float>, float>"
        );
    }

    #[test]
    fn wrappers_and_repeated_types_go() {
        // Two kernels that differ only in their functor must stay apart within 72 characters.
        let mul = display_name("void at::native::elementwise_kernel<(int)128, (int)2, void at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)", 72);
        assert_eq!(
            mul,
            "elementwise_kernel<128, 2, BinaryFunctor<float, MulFunctor<float>>>"
        );
        assert_eq!(
            display_name("void cublasLt::splitKreduce_kernel<(int)32, (int)16, int, float, __nv_bfloat16, float, __nv_bfloat16, (bool)0, float, __nv_bfloat16, __nv_bfloat16, (bool)1, (bool)0, (bool)0, (bool)0>(cublasLt::cublasSplitKParams<T6>, const T4 *)", 200),
            "splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, 0, float, __nv_bfloat16, 1, 0, 0, 0>"
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
