//! Compiles the NVTX shim (`nvtx_shim.c`) against the vendored NVTX3 headers of the workspace's
//! `vendor/nvtx3/` with the system C compiler. No bindings are generated and no NVTX library is
//! needed at build or run time.

use std::path::PathBuf;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let shim = manifest_dir.join("nvtx_shim.c");
    let headers = manifest_dir.join("../vendor/nvtx3");
    println!("cargo:rerun-if-changed={}", shim.display());
    println!("cargo:rerun-if-changed={}", headers.display());
    cc::Build::new()
        .file(&shim)
        .include(&headers)
        .opt_level(2)
        .warnings(false)
        .compile("collect_nvtx");
    // NVTX3 finds an attached tool with dlopen.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-lib=dl");
    }
}
