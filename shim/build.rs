//! Links the unwinder into the shim instead of loading `libgcc_s.so.1`.
//!
//! The shim catches every panic at its FFI boundary (`catch_unwind`), which
//! needs an unwinder; Rust's standard library asks for it as `-lgcc_s`. A
//! process whose own libraries do not load `libgcc_s.so.1` (a C program on
//! a real driver) would load it only for the shim: one more library to map
//! and relocate in every GPU process, about 0.09 ms of its start on a
//! 2-core machine. GCC's static unwinder (`libgcc_eh.a`, what `gcc
//! -static-libgcc` links into shared libraries) does the same work from
//! inside the library. It is offered to the linker under the name `-lgcc_s`
//! looks for, in a directory searched before the system's; the cdylib's
//! version script keeps its symbols local, so the application's own
//! unwinding never reaches this copy.
//!
//! Nothing changes where a linker is configured for the target (the glibc
//! 2.17 build links through zig, which brings its own unwinder) or where
//! the compiler has no `libgcc_eh.a`: the shim then needs `libgcc_s.so.1`
//! as before.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" || std::env::var_os("RUSTC_LINKER").is_some() {
        return;
    }
    let Ok(output) = Command::new("cc").arg("-print-file-name=libgcc_eh.a").output() else { return };
    let found = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    // Without the archive, cc prints the bare name back.
    if !output.status.success() || !found.is_absolute() || !found.is_file() {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else { return };
    let dir = out.join("static-unwinder");
    let link = dir.join("libgcc_s.a");
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let _ = std::fs::remove_file(&link);
    if std::os::unix::fs::symlink(&found, &link).is_err() {
        return;
    }
    println!("cargo:rustc-link-search=native={}", dir.display());
}
