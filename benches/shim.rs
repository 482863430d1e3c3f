//! What the shim adds to the calls it sits on, measured against the bare
//! simulated GPU in the same process and the same run.
//!
//! Both sides are reached the way the CUDA runtime reaches the driver: every
//! entry point is resolved through `cuGetProcAddress_v2` (version 12090,
//! default flags), once from `libsimgpu.so` ("bare") and once from
//! `libgpuslice.so` ("shim"), whose real driver is that same `libsimgpu.so`
//! (`GPUSLICE_CUDA_LIB`), so both sides drive one simulated GPU.
//!
//! - `launch/{bare,shim}`: a zero-length kernel launch (batches of 256, then
//!   a synchronise). Target: the shim adds ≤ 20 ns with no compute limit.
//! - `alloc_free/{bare,shim}`: a 1 MiB `cuMemAlloc_v2`/`cuMemFree_v2` pair
//!   under a cap. Target: the shim adds ≤ 300 ns.
//! - `alloc_free_threads/{bare,shim}/T`: the same pair from T threads at
//!   once, reported as CPU time per pair (wall time × the cores the threads
//!   can use ÷ pairs), so oversubscribing a small machine does not show as
//!   cost. Target: the shim's added cost at 64 threads stays within 2× of
//!   its cost at 1 thread.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench shim`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use libloading::Library;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::path::Path;
use std::time::{Duration, Instant};

type CuResult = c_int;
type GetProcAddress = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;
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

/// A CUDA 12 runtime's view: at 13000 `cuCtxSynchronize` resolves to `_v2`, which takes a context.
const CUDA_VERSION: c_int = 12090;
const LAUNCH_BATCH: u64 = 256;
const PAIR_BYTES: usize = 1 << 20;
const THREAD_COUNTS: [usize; 4] = [1, 4, 16, 64];

fn check(what: &str, rc: CuResult) {
    assert_eq!(rc, 0, "{what} returned {rc}");
}

/// One side of the comparison: the driver entry points as resolved through
/// one library's `cuGetProcAddress_v2`.
#[derive(Clone, Copy)]
struct Driver {
    ctx_set_current: CuCtxSetCurrent,
    ctx_synchronize: CuCtxSynchronize,
    launch_kernel: CuLaunchKernel,
    mem_alloc: CuMemAlloc,
    mem_free: CuMemFree,
    ctx: *mut c_void,
    function: *mut c_void,
}

// SAFETY: the handles are driver handles, usable from any thread once the
// context is made current there (which every benchmark thread does).
unsafe impl Send for Driver {}
unsafe impl Sync for Driver {}

impl Driver {
    fn resolve(lib: &Library, path: &Path) -> Driver {
        // SAFETY: cuGetProcAddress_v2 has this signature in cuda.h.
        let get: GetProcAddress = *unsafe { lib.get::<GetProcAddress>(b"cuGetProcAddress_v2\0") }
            .unwrap_or_else(|e| panic!("{} lacks cuGetProcAddress_v2: {e}", path.display()));
        let proc_address = |name: &CStr| -> *mut c_void {
            let mut pfn = std::ptr::null_mut();
            let mut status = -1;
            // SAFETY: a NUL-terminated name and valid out-pointers.
            let rc = unsafe { get(name.as_ptr(), &mut pfn, CUDA_VERSION, 0, &mut status) };
            check(&format!("cuGetProcAddress_v2({name:?})"), rc);
            assert!(!pfn.is_null() && status == 0, "{name:?} did not resolve (status {status})");
            pfn
        };
        macro_rules! resolve {
            ($name:literal, $ty:ty) => {
                // SAFETY: the driver returns the entry point of that name,
                // whose cuda.h signature is $ty.
                unsafe { std::mem::transmute::<*mut c_void, $ty>(proc_address($name)) }
            };
        }
        let init = resolve!(c"cuInit", CuInit);
        let device_get = resolve!(c"cuDeviceGet", CuDeviceGet);
        let retain = resolve!(c"cuDevicePrimaryCtxRetain", CuDevicePrimaryCtxRetain);
        let load_data = resolve!(c"cuModuleLoadData", CuModuleLoadData);
        let get_function = resolve!(c"cuModuleGetFunction", CuModuleGetFunction);
        let mut driver = Driver {
            ctx_set_current: resolve!(c"cuCtxSetCurrent", CuCtxSetCurrent),
            ctx_synchronize: resolve!(c"cuCtxSynchronize", CuCtxSynchronize),
            launch_kernel: resolve!(c"cuLaunchKernel", CuLaunchKernel),
            mem_alloc: resolve!(c"cuMemAlloc", CuMemAlloc),
            mem_free: resolve!(c"cuMemFree", CuMemFree),
            ctx: std::ptr::null_mut(),
            function: std::ptr::null_mut(),
        };
        let mut device = 0;
        let mut module = std::ptr::null_mut();
        // SAFETY: valid out-pointers, and handles the previous calls returned.
        unsafe {
            check("cuInit", init(0));
            check("cuDeviceGet", device_get(&mut device, 0));
            check("cuDevicePrimaryCtxRetain", retain(&mut driver.ctx, device));
            check("cuCtxSetCurrent", (driver.ctx_set_current)(driver.ctx));
            check("cuModuleLoadData", load_data(&mut module, b"bench image\0".as_ptr().cast()));
            check("cuModuleGetFunction", get_function(&mut driver.function, module, c"sim_zero".as_ptr()));
        }
        driver
    }

    fn make_current(&self) {
        // SAFETY: a context this driver returned.
        check("cuCtxSetCurrent", unsafe { (self.ctx_set_current)(self.ctx) });
    }

    fn launch_zero_length(&self, count: u64) -> Duration {
        let mut zero_us: u64 = 0;
        let mut args = [(&mut zero_us as *mut u64).cast::<c_void>()];
        let start = Instant::now();
        for i in 0..count {
            // SAFETY: a function of the current context, one argument
            // pointing at a live u64, the null stream.
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
                // SAFETY: the context is current on this thread.
                check("cuCtxSynchronize", unsafe { (self.ctx_synchronize)() });
            }
        }
        // SAFETY: as above.
        check("cuCtxSynchronize", unsafe { (self.ctx_synchronize)() });
        start.elapsed()
    }

    fn alloc_free(&self) {
        let mut ptr = 0u64;
        // SAFETY: a valid out-pointer; the pointer freed is the one just allocated.
        unsafe {
            check("cuMemAlloc_v2", (self.mem_alloc)(&mut ptr, PAIR_BYTES));
            check("cuMemFree_v2", (self.mem_free)(ptr));
        }
    }

    /// `pairs` alloc/free pairs spread over `threads` threads; returns CPU
    /// time per pair as defined in the module docs, times `pairs`.
    fn alloc_free_threads(&self, threads: usize, pairs: u64) -> Duration {
        let per_thread = pairs.div_ceil(threads as u64).max(1);
        let start = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    self.make_current();
                    for _ in 0..per_thread {
                        self.alloc_free();
                    }
                });
            }
        });
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()).min(threads);
        let done = (per_thread * threads as u64) as f64;
        Duration::from_secs_f64(start.elapsed().as_secs_f64() * cores as f64 * pairs as f64 / done)
    }
}

struct Sides {
    bare: Driver,
    shim: Driver,
    _libs: (Library, Library),
    _dir: std::path::PathBuf,
}

fn load() -> Sides {
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
    // SAFETY: loading runs only the libraries' own initialisers.
    let simgpu_lib = unsafe { Library::new(&simgpu) }.unwrap_or_else(|e| panic!("{}: {e}", simgpu.display()));
    // SAFETY: as above; the shim does its work on the first driver call.
    let shim_lib = unsafe { Library::new(&shim) }.unwrap_or_else(|e| panic!("{}: {e}", shim.display()));
    let bare = Driver::resolve(&simgpu_lib, &simgpu);
    let shim_driver = Driver::resolve(&shim_lib, &shim);
    Sides { bare, shim: shim_driver, _libs: (simgpu_lib, shim_lib), _dir: dir }
}

fn shim_vs_bare(c: &mut Criterion) {
    let sides = load();
    let sides_list = [("bare", sides.bare), ("shim", sides.shim)];

    let mut group = c.benchmark_group("launch");
    for (name, driver) in sides_list {
        group.bench_function(name, |b| {
            driver.make_current();
            b.iter_custom(|iters| driver.launch_zero_length(iters))
        });
    }
    group.finish();

    let mut group = c.benchmark_group("alloc_free");
    for (name, driver) in sides_list {
        group.bench_function(name, |b| {
            driver.make_current();
            b.iter(|| driver.alloc_free())
        });
    }
    group.finish();

    let mut group = c.benchmark_group("alloc_free_threads");
    group.sample_size(20);
    for threads in THREAD_COUNTS {
        for (name, driver) in sides_list {
            group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
                b.iter_custom(|iters| driver.alloc_free_threads(threads, iters))
            });
        }
    }
    group.finish();
    let _ = std::fs::remove_dir_all(&sides._dir);
}

criterion_group!(benches, shim_vs_bare);
criterion_main!(benches);
