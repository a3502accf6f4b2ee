//! Kernel names across tools: one demangled spelling, short names, and variant families.
//!
//! Nsight Systems and the PyTorch profiler demangle the same symbol differently: nsys writes
//! `vectorized_elementwise_kernel<(int)4, ...>(int, T2, T3)` with EDG-style literals, `<unnamed>`
//! and `[lambda() (instance 2)]`, while Kineto writes what the GNU demangler (`__cxa_demangle`,
//! `c++filt`) writes: `vectorized_elementwise_kernel<4, ...>(int, ..., std::array<char*, 2ul>)`.
//! nsys also keeps the mangled name, so [`canonical_names`] demangles it the GNU way, which gives
//! kernels from both tools one spelling. The demangler is the one in the system's C++ runtime
//! (`libstdc++.so.6`, or `libc++abi` on macOS), loaded at run time; where it cannot be loaded,
//! names stay as the file wrote them.
//!
//! [`short_name`] (nsys's `shortName` rule, defined with the export format in
//! [`crate::formats::nsys_sqlite`]) gives the function name of a demangled name; [`family`]
//! further folds tile-size, precision and split-K variants of library GEMM kernels into one name
//! so that they line up in comparisons. This module does not classify kernels (GEMM, softmax,
//! ...): that is the kernel classes' job.

use std::collections::HashMap;

pub use crate::formats::nsys_sqlite::short_name;
use crate::model::trace::{StrId, Trace};

/// Demangle an Itanium C++ symbol as the GNU demangler does (`__cxa_demangle`). `None` when the
/// symbol is not a mangled C++ name (e.g. `sm80_xmma_gemm_...`) or no demangler is available.
pub fn gnu_demangle(mangled: &str) -> Option<String> {
    if !mangled.starts_with("_Z") {
        return None;
    }
    demangler::demangle(mangled)
}

/// Whether a GNU demangler could be loaded on this machine.
pub fn gnu_demangler_available() -> bool {
    demangler::available()
}

#[cfg(unix)]
mod demangler {
    use std::ffi::{c_char, c_int, c_void, CStr, CString};
    use std::sync::OnceLock;

    type CxaDemangle =
        unsafe extern "C" fn(*const c_char, *mut c_char, *mut usize, *mut c_int) -> *mut c_char;

    #[cfg(target_os = "macos")]
    const LIBRARIES: &[&CStr] = &[c"/usr/lib/libc++abi.dylib", c"libc++abi.dylib"];
    #[cfg(not(target_os = "macos"))]
    const LIBRARIES: &[&CStr] = &[c"libstdc++.so.6", c"libc++abi.so.1"];

    fn function() -> Option<CxaDemangle> {
        static FUNCTION: OnceLock<Option<CxaDemangle>> = OnceLock::new();
        *FUNCTION.get_or_init(|| {
            for lib in LIBRARIES {
                // SAFETY: dlopen/dlsym with valid NUL-terminated names. The handle is never
                // closed, so the function pointer stays valid for the life of the process.
                unsafe {
                    let handle = libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
                    if handle.is_null() {
                        continue;
                    }
                    let sym = libc::dlsym(handle, c"__cxa_demangle".as_ptr());
                    if !sym.is_null() {
                        return Some(std::mem::transmute::<*mut c_void, CxaDemangle>(sym));
                    }
                }
            }
            None
        })
    }

    pub fn available() -> bool {
        function().is_some()
    }

    pub fn demangle(mangled: &str) -> Option<String> {
        let f = function()?;
        let symbol = CString::new(mangled).ok()?;
        let mut status: c_int = 0;
        // SAFETY: `symbol` is NUL-terminated; a null buffer asks `__cxa_demangle` to allocate the
        // result with malloc, which we copy and free.
        unsafe {
            let out = f(
                symbol.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut status,
            );
            if out.is_null() {
                return None;
            }
            let text = (status == 0).then(|| CStr::from_ptr(out).to_string_lossy().into_owned());
            libc::free(out.cast::<c_void>());
            text
        }
    }
}

#[cfg(not(unix))]
mod demangler {
    pub fn available() -> bool {
        false
    }
    pub fn demangle(_mangled: &str) -> Option<String> {
        None
    }
}

/// Every kernel's name in one spelling, whatever tool wrote the trace.
#[derive(Clone, Debug, Default)]
pub struct KernelNames {
    /// Distinct names.
    pub names: Vec<String>,
    /// For each kernel of the trace (same order), an index into `names`.
    pub of_kernel: Vec<usize>,
}

impl KernelNames {
    /// The name of kernel `i` of the trace.
    pub fn of(&self, i: usize) -> &str {
        &self.names[self.of_kernel[i]]
    }
}

/// Each kernel's GNU-demangled name: its mangled name demangled when the file has one (nsys),
/// else the name as written (Kineto already writes GNU-demangled names; non-C++ names such as
/// cuBLAS's `sm80_xmma_gemm_...` are their own demangling).
pub fn canonical_names(trace: &Trace) -> KernelNames {
    let mut index: HashMap<(StrId, Option<StrId>), usize> = HashMap::new();
    let mut by_text: HashMap<String, usize> = HashMap::new();
    let mut out = KernelNames::default();
    out.of_kernel.reserve(trace.kernels.len());
    for k in &trace.kernels {
        let key = (k.name, k.mangled_name);
        let i = match index.get(&key) {
            Some(&i) => i,
            None => {
                let text = k
                    .mangled_name
                    .and_then(|m| gnu_demangle(trace.name(m)))
                    .unwrap_or_else(|| trace.name(k.name).to_owned());
                let next = out.names.len();
                let i = *by_text.entry(text.clone()).or_insert(next);
                if i == next {
                    out.names.push(text);
                }
                index.insert(key, i);
                i
            }
        };
        out.of_kernel.push(i);
    }
    out
}

/// Wrapper kernels whose first template argument names the real kernel
/// (`cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(...)`,
/// `cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...>>(...)`).
const WRAPPERS: &[&str] = &["Kernel", "Kernel2", "device_kernel"];

/// A kernel's own function name, the text kernel classes are decided on: the short name
/// ([`short_name`]) of the demangled name, or, for a wrapper such as CUTLASS's `Kernel<...>`,
/// the short name of the kernel it wraps. A mangled name (`_Z...`) is demangled first where a
/// demangler is available. So `void fbgemm_gpu::split_embedding_codegen_forward_kernel<...>(...)`
/// is `split_embedding_codegen_forward_kernel`, and neither its namespace nor its template
/// arguments can make it a GEMM.
pub fn own_name(name: &str) -> String {
    let demangled = gnu_demangle(name.trim());
    let text = demangled.as_deref().unwrap_or(name);
    let short = short_name(text);
    if WRAPPERS.contains(&short.as_str()) {
        if let Some(inner) = first_template_argument(text, &short) {
            let wrapped = short_name(inner);
            if !wrapped.is_empty() {
                return wrapped;
            }
        }
    }
    short
}

/// The text of the first template argument after `name<`, brackets balanced.
fn first_template_argument<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let at = text.find(&format!("{name}<"))? + name.len() + 1;
    let rest = &text[at..];
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' if depth == 0 => return Some(rest[..i].trim()),
            '>' | ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    None
}

/// The variant family of a demangled kernel name: the short name (or, for CUTLASS's `Kernel`
/// wrappers, the wrapped kernel's name) with [`normalise_variant`] applied, so tile-size,
/// precision and split-K variants of one library GEMM share a name.
pub fn family(demangled: &str) -> String {
    let short = short_name(demangled);
    let base = if WRAPPERS.contains(&short.as_str()) {
        first_template_identifier(demangled, &short).unwrap_or(short)
    } else {
        short
    };
    normalise_variant(&base)
}

/// The first template argument after `name<` when it is a plain identifier.
fn first_template_identifier(demangled: &str, name: &str) -> Option<String> {
    let at = demangled.find(&format!("{name}<"))? + name.len() + 1;
    let rest = &demangled[at..];
    let end = rest.find([',', '>'])?;
    let arg = rest[..end].trim();
    let plain = !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    plain.then(|| arg.to_owned())
}

/// Element-type spellings in library kernel names (`f32f32`, `bf16f32`, `e4m3`, ...).
const DTYPE_ATOMS: &[&str] = &[
    "bfloat16", "bf16", "fp16", "f16", "tf32", "fp32", "f32", "fp64", "f64", "fp8", "f8", "e4m3",
    "e5m2", "int8", "i8", "s8", "u8", "i32", "s32", "half", "float",
];

/// Math-unit and instruction words (`simt` vs `tensorop`, `ffma` vs `hmma`): they follow from the
/// precision, so they are dropped with it.
const MATH_UNITS: &[&str] = &[
    "simt", "wmma", "tensorop", "ffma", "hmma", "imma", "dmma", "gmma", "qmma",
];

/// nvjet/cuBLASLt scheduling flags: raster direction (`h`, `v`), `bz`, cooperative variants,
/// split-K.
const SCHEDULE_FLAGS: &[&str] = &["h", "v", "bz", "coopa", "coopb", "splitk"];

/// Fold the variant parts of a library kernel name, so variants of one GEMM line up. The name is
/// split at `_` and these words are dropped:
///
/// - shapes: `256x128`, `8x4`, `tilesize64x64x8`, `warpsize1x4x1`, `MT256x192x64`;
/// - pipeline stages and alignment: `stage3`, `aligna4`, `align8`;
/// - element types: `f32f32`, `bf16f32`, `bf16`, `tf32`, ... (any word made only of type names);
/// - math units that follow from the type: `simt`, `tensorop`, `wmma`, `ffma`, `hmma`, ...;
/// - split-K and scheduling variants: `split_k`, `segment_k` (and a following `off`), `splitK`,
///   `coopA`/`coopB`, and nvjet's `h`/`v`/`bz` flags;
///
/// and a BLAS-style `sgemm`/`hgemm`/`s16816gemm` becomes `gemm`. Layout words (`nn`, `tn`, `NTT`)
/// and architecture words (`sm80`, `sm90`) stay: they tell different GEMMs apart. So
/// `cutlass_80_simt_sgemm_256x128_8x4_nn_align1` and
/// `cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_nn_align8` both become
/// `cutlass_80_gemm_nn`, and every tile size of `sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_...` becomes
/// `sm80_xmma_gemm_nn_n_execute_kernel__5x_cublas`. Names with characters other than letters,
/// digits and `_` (C++ signatures) come back unchanged, as do names that would become empty.
pub fn normalise_variant(name: &str) -> String {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return name.to_owned();
    }
    let tokens: Vec<&str> = name.split('_').collect();
    let mut kept: Vec<String> = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        let lower = t.to_ascii_lowercase();
        let next = tokens.get(i + 1).map(|n| n.to_ascii_lowercase());
        if (lower == "split" || lower == "segment") && next.as_deref() == Some("k") {
            i += 2;
            if lower == "segment" && tokens.get(i).is_some_and(|t| t.eq_ignore_ascii_case("off")) {
                i += 1;
            }
            continue;
        }
        i += 1;
        if is_shape(&lower)
            || is_numbered(&lower, "stage")
            || is_numbered(&lower, "stages")
            || is_alignment(&lower)
            || is_dtype(&lower)
            || MATH_UNITS.contains(&lower.as_str())
            || SCHEDULE_FLAGS.contains(&lower.as_str())
        {
            continue;
        }
        if is_blas_gemm(&lower) {
            kept.push("gemm".to_owned());
            continue;
        }
        kept.push(t.to_owned());
    }
    let out = kept.join("_");
    if out.trim_matches('_').is_empty() {
        name.to_owned()
    } else {
        out
    }
}

/// `256x128`, `tilesize64x64x8`, `mt256x192x64`: optional letters, then at least two numbers
/// joined by `x`, then optional letters.
fn is_shape(t: &str) -> bool {
    let body = t.trim_start_matches(|c: char| c.is_ascii_alphabetic());
    let body = body.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let parts: Vec<&str> = body.split('x').collect();
    parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
}

/// `stage3`: a word followed only by digits.
fn is_numbered(t: &str, word: &str) -> bool {
    t.strip_prefix(word)
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// `align1`, `aligna4`, `alignc8`.
fn is_alignment(t: &str) -> bool {
    t.strip_prefix("align").is_some_and(|rest| {
        let digits = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    })
}

/// A word made only of element-type names: `f32`, `f32f32`, `bf16f32`.
fn is_dtype(t: &str) -> bool {
    let mut rest = t;
    while !rest.is_empty() {
        match DTYPE_ATOMS.iter().find(|a| rest.starts_with(**a)) {
            Some(a) => rest = &rest[a.len()..],
            None => return false,
        }
    }
    !t.is_empty()
}

/// `gemm`, `sgemm`, `hgemm`, `s16816gemm`, `s161616gemm`.
fn is_blas_gemm(t: &str) -> bool {
    let Some(prefix) = t.strip_suffix("gemm") else {
        return false;
    };
    let digits = prefix
        .strip_prefix(['s', 'd', 'h', 'c', 'z', 'i'])
        .unwrap_or(prefix);
    digits.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_variants_share_a_family() {
        let fp32 = |tile: &str, exec: &str| {
            format!("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize{tile}_stage3_warpsize1x4x1_ffma_aligna4_alignc4_{exec}__5x_cublas")
        };
        let want = "sm80_xmma_gemm_nn_n_execute_kernel__5x_cublas";
        assert_eq!(family(&fp32("64x64x8", "execute_kernel")), want);
        assert_eq!(family(&fp32("128x128x8", "execute_kernel")), want);
        assert_eq!(family(&fp32("64x64x8", "execute_split_k_kernel")), want);
        assert_eq!(
            family("sm80_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize64x64x64_stage4_warpsize2x2x1_tensor16x8x16_execute_kernel__5x_cublas"),
            want
        );
        assert_eq!(
            family("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(cutlass_80_simt_sgemm_256x128_8x4_nn_align1::Params)"),
            "cutlass_80_gemm_nn"
        );
        assert_eq!(
            family("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_nn_align8>(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_nn_align8::Params)"),
            "cutlass_80_gemm_nn"
        );
        assert_eq!(
            normalise_variant("nvjet_sm90_tst_96x64_64x8_1x2_h_bz_NNN"),
            "nvjet_sm90_tst_NNN"
        );
        assert_eq!(
            normalise_variant("nvjet_sm90_tst_96x128_64x6_2x1_v_bz_splitK_NNN"),
            "nvjet_sm90_tst_NNN"
        );
        assert_eq!(
            normalise_variant("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"),
            "sm90_xmma_gemm_tn_n_execute_kernel__5x_cublas"
        );
    }

    #[test]
    fn ordinary_names_are_left_alone() {
        for n in [
            "multi_tensor_apply_kernel",
            "nll_loss_forward_reduce_cuda_kernel_2d",
            "triton_poi_fused__unsafe_view_add_3",
            "cunn_SoftMaxForwardSmem",
            "elementwise_kernel",
        ] {
            assert_eq!(normalise_variant(n), n);
        }
        // Layout words tell GEMMs apart and stay.
        assert_ne!(
            normalise_variant("cutlass_80_simt_sgemm_256x128_8x4_nn_align1"),
            normalise_variant("cutlass_80_simt_sgemm_256x128_8x4_nt_align1")
        );
    }

    #[test]
    fn gnu_demangling_matches_cxxfilt() {
        if !gnu_demangler_available() {
            eprintln!("skipped: no C++ runtime demangler on this machine");
            return;
        }
        // `c++filt` output for a mangled name from torch_small_ctx128_train_fp32.sqlite.
        assert_eq!(
            gnu_demangle("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_21CUDAFunctorOnSelf_addIfEESt5arrayIPcLm2EEEEviT0_T1_").as_deref(),
            Some("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)")
        );
        assert_eq!(gnu_demangle("sm80_xmma_gemm_f32f32"), None);
        assert_eq!(gnu_demangle("_Znot a symbol"), None);
    }
}
