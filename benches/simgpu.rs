//! Cost of the simulated GPU's hot paths, measured in-process: a launch of a
//! zero-length `sim_` kernel, and a `cuMemAlloc_v2`/`cuMemFree_v2` pair.
//! Targets: under 1 µs per launch and under 2 µs per pair, so that the
//! benchmarks of the shim (`benches/shim.rs`) measure the shim, not the
//! simulator.
//!
//! Run: `cargo build --release -p simgpu && cargo bench --bench simgpu`
//! (the library is taken from `target/release`, or `GS_TEST_TARGET_DIR`).

use criterion::{criterion_group, criterion_main, Criterion};
use gpuslice_tests::driver::{load_library, Driver};

fn simgpu(c: &mut Criterion) {
    let state = std::env::temp_dir().join(format!("gpuslice-bench-simgpu-{}.state", std::process::id()));
    // Set before simgpu reads its configuration, while only this thread runs.
    std::env::set_var("SIMGPU_STATE", &state);
    std::env::set_var("SIMGPU_MEMORY", "16GiB");
    let path = gpuslice_tests::simgpu_lib();
    let lib = load_library(&path);
    let driver = Driver::resolve(&lib, &path);

    let mut group = c.benchmark_group("simgpu");
    group.bench_function("launch_zero_length_kernel", |b| b.iter_custom(|iters| driver.launch_zero_length(iters)));
    group.bench_function("mem_alloc_free_1MiB", |b| b.iter(|| driver.alloc_free(1 << 20)));
    group.bench_function("mem_alloc_free_4KiB", |b| b.iter(|| driver.alloc_free(4096)));
    group.finish();
    let _ = std::fs::remove_file(&state);
}

criterion_group!(benches, simgpu);
criterion_main!(benches);
