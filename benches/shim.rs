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
//! Run: `cargo build --release --workspace && cargo bench --bench shim`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gpuslice_tests::driver::{load_library, Driver};
use std::time::Duration;

const PAIR_BYTES: usize = 1 << 20;
const THREAD_COUNTS: [usize; 4] = [1, 4, 16, 64];

/// CPU time this process has used so far, all threads, user and system.
fn process_cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value, which getrusage overwrites.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid out-pointer.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    assert_eq!(rc, 0, "getrusage failed");
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// `pairs` alloc/free pairs spread over `threads` threads; returns the CPU
/// time they took, scaled to exactly `pairs`.
fn alloc_free_threads(driver: &Driver, threads: usize, pairs: u64) -> Duration {
    let per_thread = pairs.div_ceil(threads as u64).max(1);
    let start = process_cpu_time();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                driver.make_current();
                for _ in 0..per_thread {
                    driver.alloc_free(PAIR_BYTES);
                }
            });
        }
    });
    let done = (per_thread * threads as u64) as f64;
    Duration::from_secs_f64((process_cpu_time() - start).as_secs_f64() * pairs as f64 / done)
}

fn shim_vs_bare(c: &mut Criterion) {
    let simgpu = gpuslice_tests::simgpu_lib();
    let shim = gpuslice_tests::shim_lib();
    let dir = std::env::temp_dir().join(format!("gpuslice-bench-shim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("cannot create the benchmark directory");
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

    let mut group = c.benchmark_group("launch");
    for (name, driver) in sides {
        group.bench_function(name, |b| {
            driver.make_current();
            b.iter_custom(|iters| driver.launch_zero_length(iters))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("alloc_free");
    for (name, driver) in sides {
        group.bench_function(name, |b| {
            driver.make_current();
            b.iter(|| driver.alloc_free(PAIR_BYTES))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("alloc_free_threads");
    group.sample_size(20);
    for threads in THREAD_COUNTS {
        for (name, driver) in sides {
            group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
                b.iter_custom(|iters| alloc_free_threads(&driver, threads, iters))
            });
        }
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, shim_vs_bare);
criterion_main!(benches);
