//! The demo's workloads (`gpuslice demo-worker`, hidden): small CUDA
//! programs that reach the driver as any application does, through
//! `dlopen("libcuda.so.1")` and `dlsym`, so that under `gpuslice run` the
//! shim governs them like any other program. On simgpu a kernel named
//! `sim_sleep` with one 64-bit argument occupies the device for that many
//! microseconds.
//!
//! - `train KERNEL_US SECONDS`: kernels back to back; prints `kernels=` and
//!   the share of the device it got.
//! - `infer KERNEL_US COUNT PERIOD_MS SECONDS`: a burst of COUNT kernels
//!   every PERIOD_MS, each waited for; prints the median and p99 burst time.
//! - `notebook STEP_MIB HOLD_S`: allocates STEP_MIB at a time until the cap
//!   refuses, says so, frees everything, allocates once more (it survived)
//!   and holds that for HOLD_S.

use crate::error::Error;
use abi::cuda::{self, CUdeviceptr, CUfunction, CUresult, CUstream, CUDA_SUCCESS};
use clap::Args;
use std::ffi::{c_void, CString};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct WorkerArgs {
    /// train, infer or notebook, then its numbers.
    #[arg(required = true)]
    pub job: Vec<String>,
}

/// The driver entry points the workloads use, with the types `cuda.h`
/// declares ([`abi::cuda`]).
struct Cuda {
    init: cuda::PFN_cuInit,
    device_get: cuda::PFN_cuDeviceGet,
    primary_retain: cuda::PFN_cuDevicePrimaryCtxRetain,
    ctx_set_current: cuda::PFN_cuCtxSetCurrent,
    module_load_data: cuda::PFN_cuModuleLoadData,
    module_get_function: cuda::PFN_cuModuleGetFunction,
    stream_create: cuda::PFN_cuStreamCreate,
    launch_kernel: cuda::PFN_cuLaunchKernel,
    stream_synchronize: cuda::PFN_cuStreamSynchronize,
    mem_alloc: cuda::PFN_cuMemAlloc_v2,
    mem_free: cuda::PFN_cuMemFree_v2,
    mem_get_info: cuda::PFN_cuMemGetInfo_v2,
}

fn symbol<T: Copy>(handle: *mut c_void, name: &str) -> Result<T, String> {
    let cname = CString::new(name).map_err(|_| format!("bad symbol name {name}"))?;
    // SAFETY: a valid handle from dlopen and a NUL-terminated name.
    let ptr = unsafe { libc::dlsym(handle, cname.as_ptr()) };
    if ptr.is_null() {
        return Err(format!("libcuda.so.1 has no {name}"));
    }
    // SAFETY: T is the function pointer type cuda.h declares for `name`
    // (pointer-sized), and `ptr` is that function.
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&ptr) })
}

impl Cuda {
    fn load() -> Result<Cuda, String> {
        let name = CString::new("libcuda.so.1").map_err(|e| e.to_string())?;
        // SAFETY: a NUL-terminated library name.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW) };
        if handle.is_null() {
            return Err("cannot load libcuda.so.1".into());
        }
        Ok(Cuda {
            init: symbol(handle, "cuInit")?,
            device_get: symbol(handle, "cuDeviceGet")?,
            primary_retain: symbol(handle, "cuDevicePrimaryCtxRetain")?,
            ctx_set_current: symbol(handle, "cuCtxSetCurrent")?,
            module_load_data: symbol(handle, "cuModuleLoadData")?,
            module_get_function: symbol(handle, "cuModuleGetFunction")?,
            stream_create: symbol(handle, "cuStreamCreate")?,
            launch_kernel: symbol(handle, "cuLaunchKernel")?,
            stream_synchronize: symbol(handle, "cuStreamSynchronize")?,
            mem_alloc: symbol(handle, "cuMemAlloc_v2")?,
            mem_free: symbol(handle, "cuMemFree_v2")?,
            mem_get_info: symbol(handle, "cuMemGetInfo_v2")?,
        })
    }
}

fn check(what: &str, r: CUresult) -> Result<(), String> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: CUresult {r}"))
    }
}

/// A context on device 0 with the `sim_sleep` kernel and a stream.
struct Device {
    cuda: Cuda,
    kernel: CUfunction,
    stream: CUstream,
}

impl Device {
    fn open() -> Result<Device, String> {
        let cuda = Cuda::load()?;
        let (mut dev, mut ctx, mut module, mut kernel, mut stream) =
            (0, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut());
        let image = b"demo image\0";
        let name = CString::new("sim_sleep").map_err(|e| e.to_string())?;
        // SAFETY: each call gets valid out-pointers and the arguments cuda.h
        // documents; the handles come from the calls before it.
        unsafe {
            check("cuInit", (cuda.init)(0))?;
            check("cuDeviceGet", (cuda.device_get)(&mut dev, 0))?;
            check("cuDevicePrimaryCtxRetain", (cuda.primary_retain)(&mut ctx, dev))?;
            check("cuCtxSetCurrent", (cuda.ctx_set_current)(ctx))?;
            check("cuModuleLoadData", (cuda.module_load_data)(&mut module, image.as_ptr().cast()))?;
            check("cuModuleGetFunction", (cuda.module_get_function)(&mut kernel, module, name.as_ptr()))?;
            check("cuStreamCreate", (cuda.stream_create)(&mut stream, 0))?;
        }
        Ok(Device { cuda, kernel, stream })
    }

    fn launch(&self, kernel_us: u64) -> Result<(), String> {
        let mut arg = kernel_us;
        let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
        // SAFETY: a kernel and stream of this context; `params` points at one
        // argument, alive for the call (the driver copies it).
        let r =
            unsafe { (self.cuda.launch_kernel)(self.kernel, 1, 1, 1, 32, 1, 1, 0, self.stream, params.as_mut_ptr(), std::ptr::null_mut()) };
        check("cuLaunchKernel", r)
    }

    fn synchronize(&self) -> Result<(), String> {
        // SAFETY: a stream of this context.
        check("cuStreamSynchronize", unsafe { (self.cuda.stream_synchronize)(self.stream) })
    }
}

fn number<T: std::str::FromStr>(job: &[String], i: usize, what: &str) -> Result<T, Error> {
    job.get(i).and_then(|v| v.parse().ok()).ok_or_else(|| Error::Usage(format!("demo-worker: {what} expected as argument {i}")))
}

pub fn main(args: WorkerArgs) -> Result<ExitCode, Error> {
    let job = &args.job;
    match job.first().map(String::as_str) {
        Some("train") => train(number(job, 1, "KERNEL_US")?, number(job, 2, "SECONDS")?),
        Some("infer") => {
            infer(number(job, 1, "KERNEL_US")?, number(job, 2, "COUNT")?, number(job, 3, "PERIOD_MS")?, number(job, 4, "SECONDS")?)
        }
        Some("notebook") => notebook(number(job, 1, "STEP_MIB")?, number(job, 2, "HOLD_S")?),
        _ => return Err(Error::Usage("demo-worker: expected train, infer or notebook".into())),
    }
    .map_err(Error::Failed)?;
    Ok(ExitCode::SUCCESS)
}

fn train(kernel_us: u64, seconds: f64) -> Result<(), String> {
    let device = Device::open()?;
    let start = Instant::now();
    let mut kernels = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        device.launch(kernel_us)?;
        kernels += 1;
    }
    device.synchronize()?;
    let wall_us = start.elapsed().as_secs_f64() * 1e6;
    println!("kernels={kernels} wall_s={:.3}", wall_us / 1e6);
    Ok(())
}

fn infer(kernel_us: u64, count: u32, period_ms: u64, seconds: f64) -> Result<(), String> {
    let device = Device::open()?;
    let start = Instant::now();
    let mut latencies_us = Vec::new();
    let mut next = start;
    while start.elapsed().as_secs_f64() < seconds {
        let burst = Instant::now();
        for _ in 0..count {
            device.launch(kernel_us)?;
        }
        device.synchronize()?;
        latencies_us.push(burst.elapsed().as_secs_f64() * 1e6);
        next += Duration::from_millis(period_ms);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    latencies_us.sort_by(f64::total_cmp);
    let at = |p: f64| latencies_us.get(((latencies_us.len() as f64 - 1.0) * p) as usize).copied().unwrap_or(0.0);
    println!("bursts={} p50_us={:.0} p99_us={:.0}", latencies_us.len(), at(0.5), at(0.99));
    Ok(())
}

fn notebook(step_mib: usize, hold_s: u64) -> Result<(), String> {
    let device = Device::open()?;
    let cuda = &device.cuda;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: valid out-pointers.
    check("cuMemGetInfo", unsafe { (cuda.mem_get_info)(&mut free, &mut total) })?;
    println!("sees total={} MiB free={} MiB", total >> 20, free >> 20);
    let mut held = Vec::new();
    loop {
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: a valid out-pointer.
        let r = unsafe { (cuda.mem_alloc)(&mut ptr, step_mib << 20) };
        if r != CUDA_SUCCESS {
            println!("refused at {} MiB: CUresult {r} (CUDA_ERROR_OUT_OF_MEMORY is 2), the notebook goes on", held.len() * step_mib);
            break;
        }
        held.push(ptr);
        if held.len() > 1024 {
            break;
        }
    }
    for ptr in held.drain(..) {
        // SAFETY: memory this process allocated and has not freed.
        unsafe { (cuda.mem_free)(ptr) };
    }
    let mut ptr: CUdeviceptr = 0;
    // SAFETY: a valid out-pointer.
    check("cuMemAlloc after the refusal", unsafe { (cuda.mem_alloc)(&mut ptr, step_mib << 20) })?;
    println!("allocated {step_mib} MiB again after freeing: still running");
    std::thread::sleep(Duration::from_secs(hold_s));
    Ok(())
}
