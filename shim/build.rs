//! Link options of `libgpuslice.so`.
//!
//! `-Bsymbolic-functions` binds the shim's own references to its own
//! functions inside the library (the hook addresses that `dlsym` and
//! `cuGetProcAddress` hand out, `hooks::lookup`), so the loader does not
//! look each of them up in every loaded object at start: about 65 fewer
//! symbol lookups, 42,000 fewer instructions in every process the shim is
//! preloaded into (callgrind, `cargo bench --bench startup`). The exported
//! hooks are unchanged: other objects still bind to them. The shim's
//! addresses of its own hooks were meant to be its own already; with this
//! no earlier object that happens to define a hooked name stands in for
//! them.
//!
//! zig's linker (`scripts/build-shim-portable.sh`) takes only
//! `-Bsymbolic`, which binds the one exported object
//! (`gpuslice_shim_loaded`, which the shim never reads) as well, and marks
//! the library `DT_SYMBOLIC`: the loader then looks each of the shim's
//! imports up in the shim first, some 9,000 instructions of the 42,000
//! saved.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let zig = std::env::var("RUSTC_LINKER")
        .is_ok_and(|linker| std::path::Path::new(&linker).file_name().is_some_and(|name| name.to_string_lossy().contains("zig")));
    let option = if zig { "-Wl,-Bsymbolic" } else { "-Wl,-Bsymbolic-functions" };
    println!("cargo:rustc-cdylib-link-arg={option}");
}
