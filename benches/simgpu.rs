//! Cost of the simulated GPU's hot paths, measured in-process: a launch of a
//! zero-length `sim_` kernel, and a `cuMemAlloc_v2`/`cuMemFree_v2` pair.
//! Targets: under 1 µs per launch and under 2 µs per pair, so that later
//! benchmarks of the shim measure the shim, not the simulator.
//!
//! Run: `cargo build --release -p simgpu && cargo bench --bench simgpu`
//! (the library is taken from `target/release`, or `GPUSLICE_TARGET_DIR`).

use criterion::{criterion_group, criterion_main, Criterion};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::time::{Duration, Instant};

type CuResult = c_int;
type CuInit = unsafe extern "C" fn(c_uint) -> CuResult;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> CuResult;
type CuDevicePrimaryCtxRetain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> CuResult;
type CuCtxSetCurrent = unsafe extern "C" fn(*mut c_void) -> CuResult;
type CuCtxSynchronize = unsafe extern "C" fn() -> CuResult;
type CuModuleLoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> CuResult;
type CuModuleGetFunction = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> CuResult;
type CuLaunchKernel = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;
type CuMemAlloc = unsafe extern "C" fn(*mut u64, usize) -> CuResult;
type CuMemFree = unsafe extern "C" fn(u64) -> CuResult;

/// Launches between two synchronisations: well under simgpu's ~1024
/// pending launches, at which a launch would block.
const LAUNCH_BATCH: u64 = 256;

struct Driver {
    _lib: Library,
    ctx_synchronize: CuCtxSynchronize,
    launch_kernel: CuLaunchKernel,
    mem_alloc: CuMemAlloc,
    mem_free: CuMemFree,
    function: *mut c_void,
    state: std::path::PathBuf,
}

fn check(what: &str, rc: CuResult) {
    assert_eq!(rc, 0, "{what} returned {rc}");
}

impl Driver {
    fn load() -> Driver {
        let state = std::env::temp_dir().join(format!("gpuslice-bench-simgpu-{}.state", std::process::id()));
        // Set before simgpu reads its configuration, while only this thread runs.
        std::env::set_var("SIMGPU_STATE", &state);
        std::env::set_var("SIMGPU_MEMORY", "16GiB");
        let path = gpuslice_tests::simgpu_lib();
        // SAFETY: loading simgpu runs only its own initialisers.
        let lib = unsafe { Library::new(&path) }.unwrap_or_else(|e| panic!("cannot load {}: {e}", path.display()));
        macro_rules! sym {
            ($name:literal, $ty:ty) => {
                // SAFETY: the type is the symbol's cuda.h signature.
                *unsafe { lib.get::<$ty>($name) }
                    .unwrap_or_else(|e| panic!("{} lacks {}: {e}", path.display(), stringify!($name)))
            };
        }
        let init = sym!(b"cuInit\0", CuInit);
        let device_get = sym!(b"cuDeviceGet\0", CuDeviceGet);
        let retain = sym!(b"cuDevicePrimaryCtxRetain\0", CuDevicePrimaryCtxRetain);
        let set_current = sym!(b"cuCtxSetCurrent\0", CuCtxSetCurrent);
        let load_data = sym!(b"cuModuleLoadData\0", CuModuleLoadData);
        let get_function = sym!(b"cuModuleGetFunction\0", CuModuleGetFunction);
        let driver = Driver {
            ctx_synchronize: sym!(b"cuCtxSynchronize\0", CuCtxSynchronize),
            launch_kernel: sym!(b"cuLaunchKernel\0", CuLaunchKernel),
            mem_alloc: sym!(b"cuMemAlloc_v2\0", CuMemAlloc),
            mem_free: sym!(b"cuMemFree_v2\0", CuMemFree),
            function: std::ptr::null_mut(),
            state: std::path::PathBuf::new(),
            _lib: lib,
        };
        let mut device = 0;
        let mut ctx = std::ptr::null_mut();
        let mut module = std::ptr::null_mut();
        let mut function = std::ptr::null_mut();
        // SAFETY: each call gets valid out-pointers and the handles the previous calls returned.
        unsafe {
            check("cuInit", init(0));
            check("cuDeviceGet", device_get(&mut device, 0));
            check("cuDevicePrimaryCtxRetain", retain(&mut ctx, device));
            check("cuCtxSetCurrent", set_current(ctx));
            check("cuModuleLoadData", load_data(&mut module, c"bench image".as_ptr().cast()));
            check("cuModuleGetFunction", get_function(&mut function, module, c"sim_zero".as_ptr()));
        }
        Driver { function, state, ..driver }
    }

    /// Launches `count` zero-length kernels on the null stream, synchronising
    /// after every batch and at the end.
    fn launch_zero_length(&self, count: u64) -> Duration {
        let mut zero_us: u64 = 0;
        let mut args = [(&mut zero_us as *mut u64).cast::<c_void>()];
        let start = Instant::now();
        for i in 0..count {
            // SAFETY: a function from this context, a one-argument parameter
            // array pointing at a live u64, the null stream.
            let rc = unsafe {
                (self.launch_kernel)(
                    self.function,
                    1,
                    1,
                    1,
                    32,
                    1,
                    1,
                    0,
                    std::ptr::null_mut(),
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            check("cuLaunchKernel", rc);
            if (i + 1) % LAUNCH_BATCH == 0 {
                // SAFETY: no arguments; the context is current on this thread.
                check("cuCtxSynchronize", unsafe { (self.ctx_synchronize)() });
            }
        }
        // SAFETY: as above.
        check("cuCtxSynchronize", unsafe { (self.ctx_synchronize)() });
        start.elapsed()
    }

    fn alloc_free(&self, bytes: usize) {
        let mut ptr = 0u64;
        // SAFETY: a valid out-pointer; the pointer freed is the one just allocated.
        unsafe {
            check("cuMemAlloc_v2", (self.mem_alloc)(&mut ptr, bytes));
            check("cuMemFree_v2", (self.mem_free)(ptr));
        }
    }
}

fn simgpu(c: &mut Criterion) {
    let driver = Driver::load();
    let mut group = c.benchmark_group("simgpu");
    group.bench_function("launch_zero_length_kernel", |b| b.iter_custom(|iters| driver.launch_zero_length(iters)));
    group.bench_function("mem_alloc_free_1MiB", |b| b.iter(|| driver.alloc_free(1 << 20)));
    group.bench_function("mem_alloc_free_4KiB", |b| b.iter(|| driver.alloc_free(4096)));
    group.finish();
    let _ = std::fs::remove_file(&driver.state);
}

criterion_group!(benches, simgpu);
criterion_main!(benches);
