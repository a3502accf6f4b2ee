//! Our CUDA kernels: the `.cu` files of the workspace's `kernels/` folder, embedded in the binary,
//! compiled by NVRTC once per run for the GPU's architecture and loaded into the context. Each
//! file is compiled on its own with `common.cuh` put in front of it (a `#line` directive keeps
//! NVRTC's line numbers those of the file). This module does not launch anything.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{self, CompileOptions, Ptx};

use crate::error::{CudaContext as _, Error, Result};

/// The text of `kernels/<file>` at the workspace's top, embedded at build time.
macro_rules! kernel_source {
    ($file:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../kernels/", $file))
    };
}

const COMMON: &str = kernel_source!("common.cuh");

/// (file name, source) of every kernel file.
pub const SOURCES: [(&str, &str); 7] = [
    ("init.cu", kernel_source!("init.cu")),
    ("embedding.cu", kernel_source!("embedding.cu")),
    ("rmsnorm.cu", kernel_source!("rmsnorm.cu")),
    ("attention.cu", kernel_source!("attention.cu")),
    ("swiglu.cu", kernel_source!("swiglu.cu")),
    ("loss.cu", kernel_source!("loss.cu")),
    ("adamw.cu", kernel_source!("adamw.cu")),
];

/// Whether NVRTC can be loaded (it can be on a machine without a GPU, where it is installed).
pub fn nvrtc_available() -> bool {
    // SAFETY: only probes whether the library can be loaded.
    unsafe { nvrtc::sys::is_culib_present() }
}

/// Compile every kernel file to PTX for `arch` (`sm_90`). Needs NVRTC, not a GPU.
pub fn compile_all(arch: &str) -> Result<Vec<(&'static str, Ptx)>> {
    if !nvrtc_available() {
        return Err(Error::MissingLibrary {
            library: "libnvrtc",
        });
    }
    SOURCES
        .iter()
        .map(|&(file, src)| {
            let text = format!("{COMMON}\n#line 1 \"{file}\"\n{src}");
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
        })
        .collect()
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
        let (major, minor) = ctx.compute_capability().during("cuDeviceGetAttribute")?;
        let arch = format!("sm_{major}{minor}");
        let mut functions = HashMap::new();
        for (_file, ptx) in compile_all(&arch)? {
            let names = kernel_names(&ptx.to_src());
            let module = ctx.load_module(ptx).during("cuModuleLoadData")?;
            for name in names {
                let f = module.load_function(&name).during("cuModuleGetFunction")?;
                functions.insert(name, f);
            }
        }
        Ok(Kernels { functions })
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
        let modules = compile_all("sm_90").expect("kernels compile");
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
        ] {
            assert!(
                names.iter().any(|n| n == expected),
                "{expected} missing from {names:?}"
            );
        }
    }

    #[test]
    fn entry_names_are_read_from_ptx() {
        let ptx = ".visible .entry adamw_x4(\n\t.param .u64 a\n)\n.entry fill_f32(";
        assert_eq!(kernel_names(ptx), ["adamw_x4", "fill_f32"]);
    }
}
