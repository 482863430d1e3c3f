//! The shim that images and installs get loads on glibc 2.17 and later.
//!
//! A shim the dynamic loader cannot preload (it needs a newer glibc than the
//! image has) is skipped with one line on stderr, and the job runs with no
//! cap at all. `scripts/build-shim-portable.sh` links the shim against glibc
//! 2.17's symbols; the loader refuses a library exactly when it needs a
//! symbol version the C library lacks, so the versions it needs are the
//! floor. The same library then runs and caps on this host's glibc.

use gpuslice_tests::{compile_c, glibc_floor_shim_lib, Sim, GIB};
use std::process::Command;

/// The glibc symbol versions `lib` needs, as (major, minor).
fn glibc_versions_needed(lib: &std::path::Path) -> Vec<(u32, u32)> {
    let out = Command::new("objdump").arg("-T").arg(lib).output().expect("objdump (binutils, installed with gcc) runs");
    assert!(out.status.success(), "objdump -T {}: {}", lib.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut versions: Vec<(u32, u32)> = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|word| word.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
            Some((parts.next()??, parts.next().flatten().unwrap_or(0)))
        })
        .collect();
    versions.sort();
    versions.dedup();
    versions
}

#[test]
fn the_portable_shim_needs_nothing_newer_than_glibc_2_17() {
    let lib = glibc_floor_shim_lib();
    let versions = glibc_versions_needed(&lib);
    // It does import from glibc (an empty list would mean objdump read nothing).
    assert!(versions.iter().any(|v| *v >= (2, 2)), "no glibc symbol versions found in {}: {versions:?}", lib.display());
    let newest = versions.last().copied().unwrap_or_default();
    assert!(newest <= (2, 17), "{} needs GLIBC_{}.{} (all: {versions:?})", lib.display(), newest.0, newest.1);
}

#[test]
fn the_portable_shim_caps_as_the_other_does() {
    let lib = glibc_floor_shim_lib();
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").shim().tenant("old-image").env("GPUSLICE_MEMORY_LIMIT", "1GiB");
    let mut cmd = sim.command(compile_c("memctl"));
    cmd.env("LD_PRELOAD", &lib).args(["init", "ctx", "info", "alloc:past:2G", "alloc:fits:100M"]);
    let out = sim.run(&mut cmd);
    out.assert_success().assert_rc("init", 0).assert_rc("ctx", 0).assert_rc("past", 2).assert_rc("fits", 0);
    assert_eq!(out.u64("info.total"), GIB, "{out}");
    assert!(!out.stderr.contains("cannot be preloaded"), "{out}");
}
