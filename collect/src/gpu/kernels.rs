//! Our CUDA kernels: the `.cu` files of the workspace's `kernels/` folder, embedded in the binary,
//! compiled by NVRTC once per run for the GPU's architecture and loaded into the context. Each
//! file is compiled on its own; the `#include "*.cuh"` lines of our own headers are resolved here
//! ([`expand_includes`]), with `#line` directives that keep NVRTC's diagnostics at the line of the
//! file each line comes from. Which files are built, and for which architecture, follows from the
//! file ([`compile_target`]): a `*_sm90.cu` file is built for `sm_90a` on a 9.0 device and skipped
//! elsewhere, a file that includes `tensor_core.cuh` needs sm_90 or newer. Loading sets each
//! FlashAttention kernel's shared-memory limit from its launch table ([`crate::gpu::flash`]).
//! This module does not launch anything.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{self, CompileOptions, Ptx};

use crate::error::{CudaContext as _, Error, Result};
use crate::gpu::flash;

/// The text of `kernels/<file>` at the workspace's top, embedded at build time.
macro_rules! kernel_source {
    ($file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../kernels/", $file))
    };
}

/// (file name, source) of every header the kernel files include.
const HEADERS: [(&str, &str); 3] = [
    ("common.cuh", kernel_source!("common.cuh")),
    ("tensor_core.cuh", kernel_source!("tensor_core.cuh")),
    ("flash_common.cuh", kernel_source!("flash_common.cuh")),
];

/// (file name, source) of every kernel file.
pub const SOURCES: [(&str, &str); 13] = [
    ("init.cu", kernel_source!("init.cu")),
    ("embedding.cu", kernel_source!("embedding.cu")),
    ("rmsnorm.cu", kernel_source!("rmsnorm.cu")),
    ("rmsnorm_bwd.cu", kernel_source!("rmsnorm_bwd.cu")),
    ("attention.cu", kernel_source!("attention.cu")),
    ("swiglu.cu", kernel_source!("swiglu.cu")),
    ("loss.cu", kernel_source!("loss.cu")),
    ("adamw.cu", kernel_source!("adamw.cu")),
    (
        "flash_attention_fwd.cu",
        kernel_source!("flash_attention_fwd.cu"),
    ),
    (
        "flash_attention_bwd.cu",
        kernel_source!("flash_attention_bwd.cu"),
    ),
    (
        "flash_attention_fwd_sm90.cu",
        kernel_source!("flash_attention_fwd_sm90.cu"),
    ),
    (
        "flash_attention_bwd_sm90.cu",
        kernel_source!("flash_attention_bwd_sm90.cu"),
    ),
    ("precision.cu", kernel_source!("precision.cu")),
];

/// Whether NVRTC can be loaded (it can be on a machine without a GPU, where it is installed).
pub fn nvrtc_available() -> bool {
    // SAFETY: only probes whether the library can be loaded.
    unsafe { nvrtc::sys::is_culib_present() }
}

/// Whether `file` uses the tensor-core wrappers: it includes `tensor_core.cuh`, itself or through
/// another header.
fn uses_tensor_cores(file: &str) -> bool {
    SOURCES
        .iter()
        .find(|(name, _)| *name == file)
        .is_some_and(|&(name, src)| {
            expand_includes(name, src, &HEADERS).contains("#line 1 \"tensor_core.cuh\"")
        })
}

/// The header `line` includes with `#include "name"`, if it is such a line.
fn quoted_include(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = rest
        .strip_prefix("include")?
        .trim_start()
        .strip_prefix('"')?;
    rest.split_once('"').map(|(name, _)| name)
}

/// `src`, the text of `file`, with every `#include "name"` of one of `headers` replaced by that
/// header's text, its own includes expanded the same way. A header goes in at its first include
/// only, as if each had `#pragma once`. `#line` directives around each header keep NVRTC's
/// diagnostics at the file and line each line comes from; any other line, other includes among
/// them, stays as it is (NVRTC reports an include it cannot open at the right line).
pub fn expand_includes(file: &str, src: &str, headers: &[(&str, &str)]) -> String {
    fn expand<'a>(
        out: &mut String,
        file: &str,
        src: &str,
        headers: &[(&'a str, &'a str)],
        included: &mut Vec<&'a str>,
    ) {
        out.push_str(&format!("#line 1 \"{file}\"\n"));
        for (index, line) in src.lines().enumerate() {
            let header = quoted_include(line)
                .and_then(|name| headers.iter().find(|(header, _)| *header == name));
            match header {
                Some(&(name, text)) if !included.contains(&name) => {
                    included.push(name);
                    expand(out, name, text, headers, included);
                    out.push_str(&format!("#line {} \"{file}\"\n", index + 2));
                }
                Some(_) => out.push('\n'),
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
    }
    let mut out = String::with_capacity(src.len());
    expand(&mut out, file, src, headers, &mut Vec::new());
    out
}

/// The `--gpu-architecture` to build `file` for on a device of compute capability `cc`, or `None`
/// when the file is not built there: `*_sm90.cu` files need Hopper's own instructions (`sm_90a`,
/// on a 9.0 device only), the other tensor-core files sm_90 or newer (they reduce with
/// `red.global.add.v2.f32`); every other file is built for the device's own architecture.
pub fn compile_target(file: &str, cc: (i32, i32)) -> Option<String> {
    if file.ends_with("_sm90.cu") {
        return (cc == (9, 0)).then(|| "sm_90a".to_owned());
    }
    if uses_tensor_cores(file) && cc.0 < 9 {
        return None;
    }
    Some(format!("sm_{}{}", cc.0, cc.1))
}

/// Compile every kernel file built for compute capability `cc` to PTX, the files side by side
/// on threads of their own (the FlashAttention files take seconds each). Needs NVRTC, not a GPU.
pub fn compile_all(cc: (i32, i32)) -> Result<Vec<(&'static str, Ptx)>> {
    if !nvrtc_available() {
        return Err(Error::MissingLibrary {
            library: "libnvrtc",
        });
    }
    std::thread::scope(|scope| {
        let jobs: Vec<_> = SOURCES
            .iter()
            .filter_map(|&(file, src)| compile_target(file, cc).map(|arch| (file, src, arch)))
            .map(|(file, src, arch)| scope.spawn(move || compile_one(file, src, &arch)))
            .collect();
        jobs.into_iter()
            .map(|job| job.join().expect("an NVRTC compile does not panic"))
            .collect()
    })
}

/// `file` (its text `src`) compiled for `arch`, with the headers it includes.
fn compile_one(file: &'static str, src: &str, arch: &str) -> Result<(&'static str, Ptx)> {
    let text = expand_includes(file, src, &HEADERS);
    let opts = CompileOptions {
        options: vec![
            format!("--gpu-architecture={arch}"),
            "--std=c++17".to_owned(),
        ],
        ..Default::default()
    };
    nvrtc::compile_ptx_with_opts(text, opts)
        .map(|ptx| (file, ptx))
        .map_err(|e| Error::Nvrtc {
            file,
            log: compile_log(e),
        })
}

fn compile_log(e: nvrtc::CompileError) -> String {
    match e {
        nvrtc::CompileError::CompileError { log, .. } => log.to_string_lossy().trim().to_owned(),
        other => format!("{other:?}"),
    }
}

/// The kernels, loaded and looked up by name.
pub struct Kernels {
    functions: HashMap<String, CudaFunction>,
}

impl Kernels {
    /// Compile for the context's device and load every `extern "C"` kernel.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Kernels> {
        let cc = ctx.compute_capability().during("cuDeviceGetAttribute")?;
        let mut functions = HashMap::new();
        for (_file, ptx) in compile_all(cc)? {
            let names = kernel_names(&ptx.to_src());
            let module = ctx.load_module(ptx).during("cuModuleLoadData")?;
            for name in names {
                let f = module.load_function(&name).during("cuModuleGetFunction")?;
                functions.insert(name, f);
            }
        }
        for l in flash::LAUNCHES
            .iter()
            .filter(|l| l.smem > flash::DEFAULT_SMEM_LIMIT)
        {
            if let Some(f) = functions.get(l.name) {
                f.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    l.smem as i32,
                )
                .during("cuFuncSetAttribute")?;
            }
        }
        Ok(Kernels { functions })
    }

    /// Whether `name` was compiled and loaded (a Hopper-only kernel is not, elsewhere).
    pub fn has(&self, name: &str) -> bool {
        self.functions.contains_key(name)
    }

    /// Unload the Hopper-only kernels (those of the `*_sm90.cu` files), so that the launches fall
    /// back to the portable ones; returns how many there were.
    pub fn drop_hopper_kernels(&mut self) -> usize {
        let before = self.functions.len();
        self.functions.retain(|name, _| !name.contains("_sm90_"));
        before - self.functions.len()
    }

    pub fn get(&self, name: &str) -> Result<&CudaFunction> {
        self.functions
            .get(name)
            .ok_or_else(|| Error::MissingKernel {
                name: name.to_owned(),
            })
    }
}

/// The `.entry` names of a PTX module (our kernels are `extern "C"`, so unmangled).
pub fn kernel_names(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let rest = l
                .strip_prefix(".visible .entry ")
                .or_else(|| l.strip_prefix(".entry "))?;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_file_compiles_with_nvrtc() {
        if !nvrtc_available() {
            eprintln!("skipped: libnvrtc is not on the loader path");
            return;
        }
        let modules = compile_all((9, 0)).expect("kernels compile");
        let names: Vec<String> = modules
            .iter()
            .flat_map(|(_, ptx)| kernel_names(&ptx.to_src()))
            .collect();
        for expected in [
            "init_trunc_normal",
            "rmsnorm_fwd_bf16",
            "rmsnorm_bwd",
            "rope_fwd_f32",
            "softmax_causal_bwd_bf16",
            "cross_entropy_f32",
            "adamw_x4",
            "adamw_range_x4",
            "rmsnorm_bwd_fused_v1",
            "rmsnorm_bwd_fused_v4",
            "swiglu_fwd_vec_bf16",
            "swiglu_bwd_vec_f32",
            "rope_fwd_vec_bf16",
            "rope_bwd_vec_f32",
            "heads_to_tokens_vec_bf16",
            "tokens_to_heads_vec_f32",
            "copy_rows_x16",
        ]
        .into_iter()
        .chain(flash::LAUNCHES.iter().map(|l| l.name))
        {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} missing from {names:?}"
            );
        }
    }

    #[test]
    fn files_are_built_for_the_device_or_skipped() {
        assert_eq!(
            compile_target("rmsnorm.cu", (9, 0)).as_deref(),
            Some("sm_90")
        );
        assert_eq!(
            compile_target("rmsnorm.cu", (8, 6)).as_deref(),
            Some("sm_86")
        );
        assert_eq!(
            compile_target("flash_attention_fwd.cu", (9, 0)).as_deref(),
            Some("sm_90")
        );
        assert_eq!(compile_target("flash_attention_bwd.cu", (8, 0)), None);
        assert_eq!(
            compile_target("flash_attention_fwd_sm90.cu", (9, 0)).as_deref(),
            Some("sm_90a")
        );
        assert_eq!(compile_target("flash_attention_fwd_sm90.cu", (10, 0)), None);
        assert!(uses_tensor_cores("flash_attention_bwd.cu") && !uses_tensor_cores("attention.cu"));
    }

    #[test]
    fn includes_are_expanded_once_with_line_directives() {
        let headers = [("a.cuh", "#include \"b.cuh\"\nint a;"), ("b.cuh", "int b;")];
        let src = "// top\n#include \"a.cuh\"\n  # include \"b.cuh\"\n#include <cuda.h>\nint k;\n";
        assert_eq!(
            expand_includes("k.cu", src, &headers),
            "#line 1 \"k.cu\"\n// top\n\
             #line 1 \"a.cuh\"\n\
             #line 1 \"b.cuh\"\nint b;\n#line 2 \"a.cuh\"\nint a;\n\
             #line 3 \"k.cu\"\n\n#include <cuda.h>\nint k;\n"
        );
    }

    #[test]
    fn every_quoted_include_of_a_kernel_file_is_a_known_header() {
        for (file, src) in SOURCES.iter().chain(HEADERS.iter()) {
            for name in src.lines().filter_map(quoted_include) {
                assert!(
                    HEADERS.iter().any(|(header, _)| *header == name),
                    "{file} includes {name}, which is not embedded"
                );
            }
        }
    }

    #[test]
    fn entry_names_are_read_from_ptx() {
        let ptx = ".visible .entry adamw_x4(\n\t.param .u64 a\n)\n.entry fill_f32(";
        assert_eq!(kernel_names(ptx), ["adamw_x4", "fill_f32"]);
    }
}
