//! What the shim adds to the calls it sits on, measured against the bare
//! simulated GPU in the same process and the same run.
//!
//! Both sides are reached the way the CUDA runtime reaches the driver: every
//! entry point is resolved through `cuGetProcAddress_v2`, once from
//! `libsimgpu.so` ("bare") and once from `libgpuslice.so` ("shim"), whose
//! real driver is that same `libsimgpu.so` (`GPUSLICE_CUDA_LIB`), so both
//! sides drive one simulated GPU.
//!
//! - `launch/{bare,shim}`: a zero-length kernel launch (batches of 256, then
//!   a synchronise). Target: the shim adds ≤ 20 ns with no compute limit.
//! - `alloc_free/{bare,shim}`: a 1 MiB `cuMemAlloc_v2`/`cuMemFree_v2` pair
//!   under a cap. Target: the shim adds ≤ 300 ns.
//! - `alloc_free_threads/{bare,shim}/T`: the same pair from T threads at
//!   once, reported as the process's CPU time (user + system, from
//!   `getrusage`) per pair, so that oversubscribing a small machine — time
//!   threads spend waiting for a core — does not show as cost, while
//!   contention (cache-line transfers, lock hand-offs, futex wake-ups) does.
//!   Target: the shim's added cost at 64 threads stays within 2× of its
//!   cost at 1 thread.
//!
//! - `launch_limited/{limit_100,limit_50}`: the launch of a process whose
//!   tenant has a compute limit (`benches/compute/mod.rs`): passed on from a
//!   device whose limit is 100, and bracketed by timing events on a device
//!   limited to 50 % (zero-length kernels: nothing to throttle).
//! - `launch_granted/share_50`: the launch of a process whose tenant has a
//!   share, alone on a device the monitor arbitrates: it holds the grant,
//!   and each launch reads it and counts towards the next checkpoint.
//!   Target: ≤ 20 ns over the bare launch.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench shim`.
//! `cargo bench --bench shim -- compute_accuracy` instead measures how close
//! to its limit a tenant gets (about 40 s; see `compute::accuracy`).

#[path = "compute/mod.rs"]
mod compute;

use criterion::{criterion_group, Criterion};
use gpuslice_tests::driver::{compare_sides, load_library, Driver};

fn shim_vs_bare(c: &mut Criterion) {
    let simgpu = gpuslice_tests::simgpu_lib();
    let shim = gpuslice_tests::shim_lib();
    let dir = std::env::temp_dir().join(format!("gpuslice-bench-shim-{}", std::process::id()));
    // The shim refuses a GPUSLICE_DIR that does not exist.
    std::fs::create_dir_all(dir.join("ledger")).expect("cannot create the benchmark directory");
    // Set before either library reads its configuration, while only this
    // thread runs.
    std::env::set_var("SIMGPU_STATE", dir.join("simgpu.state"));
    std::env::set_var("SIMGPU_MEMORY", "80GiB");
    std::env::set_var("GPUSLICE_CUDA_LIB", &simgpu);
    std::env::set_var("GPUSLICE_NVML_LIB", &simgpu);
    std::env::set_var("GPUSLICE_DIR", dir.join("ledger"));
    std::env::set_var("GPUSLICE_TENANT", "bench");
    std::env::set_var("GPUSLICE_MEMORY_LIMIT", "40GiB");
    let simgpu_lib = load_library(&simgpu);
    let shim_lib = load_library(&shim);
    let sides = [("bare", Driver::resolve(&simgpu_lib, &simgpu)), ("shim", Driver::resolve(&shim_lib, &shim))];
    compare_sides(c, "", sides);
    compute::limited_launches(c, "", &shim, &dir);
    compute::granted_launches(c, "", &shim, &dir);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, shim_vs_bare);

fn main() {
    if std::env::args().any(|a| a == "compute_accuracy") {
        compute::accuracy();
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
