//! The shim's own cost, with nothing else in the measurement: the same calls
//! as `benches/shim.rs`, but over `benches/c/nulldriver.c`, a driver whose
//! allocation is one atomic add and whose launch does nothing. Over simgpu,
//! the simulator's own locks dominate a many-thread run and hide how the
//! shim scales; over the null driver, what is measured is the shim.
//!
//! - `null_launch/{bare,shim}` and `null_alloc_free/{bare,shim}`: one call
//!   or pair, resolved through `cuGetProcAddress_v2` as the CUDA runtime does.
//! - `null_alloc_free_threads/{bare,shim}/T`: T threads at once, reported as
//!   the process's CPU time (user + system) per pair. Target: the shim's
//!   added cost at 64 threads stays within 2× of its cost at 1 thread.
//! - `null_launch_limited/{limit_100,limit_50}`: the launch of a process
//!   whose tenant has a compute limit (a second copy of the shim, loaded with
//!   `GPUSLICE_COMPUTE_LIMIT=50`): on a device whose limit the monitor raised
//!   to 100 (the launch is looked at and passed on), and on a device limited
//!   to 50 % (two timing events around each launch and the pair's charge;
//!   the null driver's events measure nothing, so nothing is throttled). A
//!   process started with a limit of 100, or none, takes `null_launch/shim`'s
//!   path: one load.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench shim_overhead`.

#[path = "compute/mod.rs"]
mod compute;

use criterion::{criterion_group, criterion_main, Criterion};
use gpuslice_tests::driver::{compare_sides, load_library, Driver};
use std::path::{Path, PathBuf};
use std::process::Command;

fn build_null_driver(dir: &Path) -> PathBuf {
    let root = gpuslice_tests::repo_root();
    let out = dir.join("libnulldriver.so");
    let status = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-I"])
        .arg(root.join(".deps/include"))
        .arg(root.join("benches/c/nulldriver.c"))
        .arg("-o")
        .arg(&out)
        .status()
        .expect("cannot run gcc");
    assert!(status.success(), "compiling benches/c/nulldriver.c failed (run scripts/setup.sh for cuda.h)");
    out
}

fn shim_over_null_driver(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("gpuslice-bench-overhead-{}", std::process::id()));
    // The shim refuses a GPUSLICE_DIR that does not exist.
    std::fs::create_dir_all(dir.join("ledger")).expect("cannot create the benchmark directory");
    let null = build_null_driver(&dir);
    let shim = gpuslice_tests::shim_lib();
    // Set before the shim reads its configuration, while only this thread runs.
    std::env::set_var("GPUSLICE_CUDA_LIB", &null);
    std::env::set_var("GPUSLICE_NVML_LIB", dir.join("no-nvml.so"));
    std::env::set_var("GPUSLICE_DIR", dir.join("ledger"));
    std::env::set_var("GPUSLICE_TENANT", "overhead");
    std::env::set_var("GPUSLICE_MEMORY_LIMIT", "40GiB");
    let null_lib = load_library(&null);
    let shim_lib = load_library(&shim);
    let sides = [("bare", Driver::resolve(&null_lib, &null)), ("shim", Driver::resolve(&shim_lib, &shim))];
    compare_sides(c, "null_", sides);
    compute::limited_launches(c, "null_", &shim, &dir);
    compute::granted_launches(c, "null_", &shim, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, shim_over_null_driver);
criterion_main!(benches);
