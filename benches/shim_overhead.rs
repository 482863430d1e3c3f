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
//!
//! Run: `cargo build --release --workspace && cargo bench --bench shim_overhead`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gpuslice_tests::driver::{load_library, Driver};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const PAIR_BYTES: usize = 1 << 20;
const THREAD_COUNTS: [usize; 4] = [1, 4, 16, 64];

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

fn shim_over_null_driver(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("gpuslice-bench-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("cannot create the benchmark directory");
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

    let mut group = c.benchmark_group("null_launch");
    for (name, driver) in sides {
        group.bench_function(name, |b| {
            driver.make_current();
            b.iter_custom(|iters| driver.launch_zero_length(iters))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("null_alloc_free");
    for (name, driver) in sides {
        group.bench_function(name, |b| {
            driver.make_current();
            b.iter(|| driver.alloc_free(PAIR_BYTES))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("null_alloc_free_threads");
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

criterion_group!(benches, shim_over_null_driver);
criterion_main!(benches);
