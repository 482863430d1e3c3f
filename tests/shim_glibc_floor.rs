//! The shim that images and installs get loads on glibc 2.17 and later.
//!
//! A shim the dynamic loader cannot preload (it needs a newer glibc than the
//! image has) is skipped with one line on stderr, and the job runs with no
//! cap at all. `scripts/build-shim-portable.sh` links the shim against glibc
//! 2.17's symbols; the loader refuses a library exactly when it needs a
//! symbol version the C library lacks, so the versions it needs are the
//! floor. The same library then runs and caps on this host's glibc.

use gpuslice_tests::{compile_c, glibc_floor_shim_lib, glibc_floor_simgpu_lib, repo_root, Sim, GIB};
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

/// Debian 11's C library (glibc 2.31, as in Ubuntu 20.04), which
/// `scripts/old-glibc.sh` (run by `scripts/setup.sh`) puts in `.deps`.
fn old_glibc() -> std::path::PathBuf {
    let dir = repo_root().join(".deps/glibc-2.31/lib/x86_64-linux-gnu");
    assert!(dir.join("ld-2.31.so").is_file(), "{} has no glibc 2.31: run `bash scripts/old-glibc.sh`", dir.display());
    dir
}

/// `tests/c/<name>.c` built by zig against glibc 2.17's symbols and linked
/// against the portable simgpu as `libcuda.so.1`, in `dir`, which then
/// also holds that driver (and NVML) under their sonames. simgpu calls
/// `memfd_create` and `getrandom`, which glibc 2.17 lacks (so its portable
/// build needs glibc 2.27, unlike the shim's): the link allows them
/// undefined, and Debian 11's C library has both.
fn compile_c_for_old_glibc(name: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let driver = glibc_floor_simgpu_lib();
    for soname in ["libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1"] {
        std::os::unix::fs::symlink(&driver, dir.join(soname)).expect("symlink in a fresh directory");
    }
    let root = repo_root();
    let program = dir.join(name);
    let out = Command::new(root.join("scripts/zig-cc.sh"))
        .args(["-std=gnu11", "-O1", "-Wno-deprecated-declarations", "-I"])
        .arg(root.join(".deps/include"))
        .arg("-I")
        .arg(root.join("tests/c"))
        .arg(root.join(format!("tests/c/{name}.c")))
        .arg("-L")
        .arg(dir)
        .args(["-lcuda", "-lpthread", "-ldl", "-Wl,--allow-shlib-undefined", "-o"])
        .arg(&program)
        .output()
        .expect("scripts/zig-cc.sh runs");
    assert!(out.status.success(), "zig cc {name}.c: {}", String::from_utf8_lossy(&out.stderr));
    program
}

/// On an image's older glibc (2.31, older than the 2.34 a shim built on
/// this host needs), the host-built shim stops every program at load (the
/// loader's "version `GLIBC_2.34' not found"); the portable one loads and
/// caps. The program,
/// the driver and the shim all run on Debian 11's loader and C library.
#[cfg(target_arch = "x86_64")]
#[test]
fn on_debian_11s_glibc_the_portable_shim_loads_and_caps() {
    let libc_dir = old_glibc();
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").shim().tenant("old-image").env("GPUSLICE_MEMORY_LIMIT", "1GiB");
    let program = compile_c_for_old_glibc("memctl", sim.dir());
    let on_old_glibc = |shim: &std::path::Path| {
        let mut cmd = sim.command(libc_dir.join("ld-2.31.so"));
        let mut path = libc_dir.clone().into_os_string();
        path.push(":");
        path.push(sim.dir());
        cmd.arg("--library-path").arg(path).arg(&program);
        cmd.env("LD_PRELOAD", shim).args(["init", "ctx", "info", "alloc:past:2G", "alloc:fits:100M"]);
        sim.run(&mut cmd)
    };

    // The loader stops the program before `main`: the job does not run.
    let host_built = on_old_glibc(&gpuslice_tests::shim_lib());
    assert!(host_built.code() != Some(0) && !host_built.stdout.contains("init"), "{host_built}");
    assert!(host_built.stderr.contains("version `GLIBC_2.34' not found (required by"), "{host_built}");

    let portable = on_old_glibc(&glibc_floor_shim_lib());
    portable.assert_success().assert_rc("init", 0).assert_rc("ctx", 0).assert_rc("past", 2).assert_rc("fits", 0);
    assert_eq!(portable.u64("info.total"), GIB, "{portable}");
    assert!(!portable.stderr.contains("cannot be preloaded"), "{portable}");
}
