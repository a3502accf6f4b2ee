//! Compiles the NVTX shim (`nvtx3/shim.c`) against the vendored NVTX3 headers with the system C
//! compiler. No bindings are generated and no NVTX library is needed at build or run time.

fn main() {
    println!("cargo:rerun-if-changed=nvtx3");
    cc::Build::new()
        .file("nvtx3/shim.c")
        .include("nvtx3")
        .opt_level(2)
        .warnings(false)
        .compile("collect_nvtx");
    // NVTX3 finds an attached tool with dlopen.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-lib=dl");
    }
}
