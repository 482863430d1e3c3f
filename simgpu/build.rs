//! Gives libsimgpu.so the soname libcuda.so.1, so a program linked with
//! `-lcuda` against the link directory records `libcuda.so.1` as its
//! dependency (as it would with the real driver).
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
