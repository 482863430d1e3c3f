//! A CUDA driver loaded in-process for the benchmarks: the entry points the
//! hot-path benchmarks call, resolved through one library's
//! `cuGetProcAddress_v2` — the route the CUDA runtime takes — so that the same
//! code measures bare simgpu and simgpu under the shim.

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

/// The version a CUDA 12 runtime asks for. (At 13000 `cuCtxSynchronize`
/// resolves to `_v2`, which takes a context.)
const CUDA_VERSION: c_int = 12090;

/// Launches between two synchronisations: well under simgpu's ~1024
/// pending launches, at which a launch would block.
pub const LAUNCH_BATCH: u64 = 256;

fn check(what: &str, rc: CuResult) {
    assert_eq!(rc, 0, "{what} returned {rc}");
}

/// The driver entry points as one library resolves them, with a current
/// primary context on device 0 and a zero-length `sim_` kernel.
#[derive(Clone, Copy)]
pub struct Driver {
    ctx_set_current: CuCtxSetCurrent,
    ctx_synchronize: CuCtxSynchronize,
    launch_kernel: CuLaunchKernel,
    mem_alloc: CuMemAlloc,
    mem_free: CuMemFree,
    ctx: *mut c_void,
    function: *mut c_void,
}

// SAFETY: the handles are driver handles, usable from any thread once the
// context is made current there (`make_current`).
unsafe impl Send for Driver {}
// SAFETY: as above; the struct holds no interior state.
unsafe impl Sync for Driver {}

impl Driver {
    /// Resolves the entry points through `lib`'s `cuGetProcAddress_v2`,
    /// initialises the driver and makes device 0's primary context current.
    /// `lib` must outlive the returned value.
    pub fn resolve(lib: &Library, path: &Path) -> Driver {
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
        }
        driver.make_current();
        // SAFETY: the context is current; valid out-pointers, a NUL-terminated
        // image and name, and the module just loaded.
        unsafe {
            check("cuModuleLoadData", load_data(&mut module, c"bench image".as_ptr().cast()));
            check("cuModuleGetFunction", get_function(&mut driver.function, module, c"sim_zero".as_ptr()));
        }
        driver
    }

    /// Makes the driver's context current on the calling thread.
    pub fn make_current(&self) {
        // SAFETY: a context this driver returned.
        check("cuCtxSetCurrent", unsafe { (self.ctx_set_current)(self.ctx) });
    }

    /// Launches `count` zero-length kernels on the null stream, synchronising
    /// after every `LAUNCH_BATCH` and at the end; returns the wall time.
    pub fn launch_zero_length(&self, count: u64) -> Duration {
        let mut zero_us: u64 = 0;
        let mut args = [(&mut zero_us as *mut u64).cast::<c_void>()];
        let start = Instant::now();
        for i in 0..count {
            // SAFETY: a function of the current context, one argument
            // pointing at a live u64, the null stream.
            let rc = unsafe {
                (self.launch_kernel)(self.function, 1, 1, 1, 32, 1, 1, 0, std::ptr::null_mut(), args.as_mut_ptr(), std::ptr::null_mut())
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

    /// One `cuMemAlloc_v2`/`cuMemFree_v2` pair of `bytes`.
    pub fn alloc_free(&self, bytes: usize) {
        let mut ptr = 0u64;
        // SAFETY: a valid out-pointer; the pointer freed is the one just allocated.
        unsafe {
            check("cuMemAlloc_v2", (self.mem_alloc)(&mut ptr, bytes));
            check("cuMemFree_v2", (self.mem_free)(ptr));
        }
    }
}

/// Loads a library for a benchmark, with a clear message when it is missing.
pub fn load_library(path: &Path) -> Library {
    // SAFETY: loading runs only the library's own initialisers; simgpu and
    // the shim do their work on the first driver call.
    unsafe { Library::new(path) }.unwrap_or_else(|e| panic!("cannot load {}: {e}", path.display()))
}

/// The pair size of the alloc/free benchmarks.
pub const PAIR_BYTES: usize = 1 << 20;
/// Thread counts of the many-thread alloc/free benchmark.
pub const THREAD_COUNTS: [usize; 4] = [1, 4, 16, 64];

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

/// `pairs` alloc/free pairs spread over `threads` threads; returns the
/// process's CPU time they took, scaled to exactly `pairs`. CPU time counts
/// contention (cache-line transfers, lock hand-offs, futex wake-ups) but
/// not time spent waiting for a core, which a small machine would otherwise
/// show as cost.
pub fn alloc_free_threads(driver: &Driver, threads: usize, pairs: u64) -> Duration {
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

/// The three comparisons every shim benchmark makes between its sides
/// (`bare`, `shim`): a zero-length launch, an alloc/free pair, and the pair
/// from 1 to 64 threads. Group names start with `prefix`.
pub fn compare_sides(c: &mut criterion::Criterion, prefix: &str, sides: [(&str, Driver); 2]) {
    let mut group = c.benchmark_group(format!("{prefix}launch"));
    for (name, driver) in sides {
        group.bench_function(name, |b| {
            driver.make_current();
            b.iter_custom(|iters| driver.launch_zero_length(iters))
        });
    }
    group.finish();

    let mut group = c.benchmark_group(format!("{prefix}alloc_free"));
    for (name, driver) in sides {
        group.bench_function(name, |b| {
            driver.make_current();
            b.iter(|| driver.alloc_free(PAIR_BYTES))
        });
    }
    group.finish();

    let mut group = c.benchmark_group(format!("{prefix}alloc_free_threads"));
    group.sample_size(20);
    for threads in THREAD_COUNTS {
        for (name, driver) in sides {
            group.bench_with_input(criterion::BenchmarkId::new(name, threads), &threads, |b, &threads| {
                b.iter_custom(|iters| alloc_free_threads(&driver, threads, iters))
            });
        }
    }
    group.finish();
}
