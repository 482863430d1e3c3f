//! The real driver and NVML entry points, in typed slots resolved once.
//!
//! `libcuda.so.1` (or `GPUSLICE_CUDA_LIB`) and `libnvidia-ml.so.1` (or
//! `GPUSLICE_NVML_LIB`) are opened with `dlopen(RTLD_NOW | RTLD_LOCAL)`, found
//! the way the loader finds them, so `LD_LIBRARY_PATH` works; if the
//! application already loaded them this is the same copy. Every function the
//! shim forwards to is looked up there with the real `dlsym` into a table that
//! is built on first use and then only read: the hot path never looks
//! anything up. A slot is `None` when the library lacks that function.
//! Each name is looked up in the library's own symbol table first
//! ([`crate::symbols`]: one hash lookup, where `dlsym` costs about 900
//! instructions), and with `dlsym` wherever that table cannot answer.
//!
//! The slots of the hooked functions come from the hook list
//! (`hooks::hooked_functions!`), so a hook and its slot cannot drift apart;
//! the functions listed here are those the shim calls on its own behalf
//! without hooking them (`cuCtxGetCurrent`, `nvmlInit_v2`, …).

#![allow(non_snake_case)]

use crate::ffi;
use crate::ffi::CUDA_LAUNCH_PARAMS;
use abi::cuda::*;
use abi::nvml::*;
use abi::uuid::{UuidKind, UuidText};
use core::ffi::{c_char, c_int, c_uint, c_void};
use std::ffi::CString;
use std::sync::OnceLock;

macro_rules! function_table {
    ($(#[$meta:meta])* $table:ident { $($name:ident: fn($($arg:ty),*) -> $ret:ty;)* }) => {
        $(#[$meta])*
        pub struct $table {
            $(pub $name: Option<unsafe extern "C" fn($($arg),*) -> $ret>,)*
        }

        impl $table {
            fn resolve(handle: *mut c_void) -> Self {
                let symbols = crate::symbols::Table::of(handle);
                Self {
                    $($name: {
                        // The name is checked, and hashed, when the shim is
                        // compiled.
                        const NAME: &core::ffi::CStr = cstr(concat!(stringify!($name), "\0"));
                        const HASH: u32 = crate::symbols::gnu_hash(stringify!($name).as_bytes());
                        let found = find(symbols.as_ref(), handle, NAME, HASH);
                        if found.is_null() {
                            None
                        } else {
                            // SAFETY: the library exports this name with the C
                            // signature declared here (cuda.h / nvml.h).
                            Some(unsafe {
                                core::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(found)
                            })
                        }
                    },)*
                }
            }
        }
    };
}

/// `name` in the library `handle`: from its own symbol table where that
/// answers (one hash lookup), else from the real `dlsym`.
fn find(symbols: Option<&crate::symbols::Table>, handle: *mut c_void, name: &core::ffi::CStr, hash: u32) -> *mut c_void {
    match symbols.map(|t| t.find_hashed(name, hash)) {
        Some(crate::symbols::Found::At(address)) => address,
        _ => ffi::lookup(handle, name),
    }
}

/// A `&CStr` from a literal that `concat!` ended with a NUL (evaluated at
/// compile time: a name that is not one does not compile).
const fn cstr(text: &'static str) -> &'static core::ffi::CStr {
    match core::ffi::CStr::from_bytes_with_nul(text.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("not a NUL-terminated name"),
    }
}

/// Builds the real tables from the hook list (`hooks::hooked_functions!`)
/// and the functions the shim calls on its own behalf, given in `own`.
macro_rules! real_tables {
    (
        own {
            cuda { $($cuda_own:tt)* }
            nvml { $($nvml_own:tt)* }
        }
        cuda { $($module:ident::$name:ident($($arg:ty),*) -> $ret:ty => $family:ident since $since:literal $($per_thread:ident)?;)* }
        nvml { $($nmodule:ident::$nname:ident($($narg:ty),*) -> $nret:ty;)* }
    ) => {
        function_table! {
            /// The driver functions the shim hooks and forwards to, and
            /// those it calls on its own behalf.
            Cuda { $($name: fn($($arg),*) -> $ret;)* $($cuda_own)* }
        }

        function_table! {
            /// The NVML functions the shim hooks and forwards to, and those
            /// it measures with.
            Nvml { $($nname: fn($($narg),*) -> $nret;)* $($nvml_own)* }
        }
    };
}

crate::hooks::hooked_functions! {
    real_tables {
        // The functions the shim calls itself and does not hook; the hooked
        // ones come from the list.
        cuda {
            cuDeviceGetCount: fn(*mut c_int) -> CUresult;
            cuDeviceGet: fn(*mut CUdevice, c_int) -> CUresult;
            cuDeviceGetUuid: fn(*mut CUuuid, CUdevice) -> CUresult;
            cuDeviceGetUuid_v2: fn(*mut CUuuid, CUdevice) -> CUresult;
            cuCtxGetCurrent: fn(*mut CUcontext) -> CUresult;
            cuCtxGetDevice: fn(*mut CUdevice) -> CUresult;
            cuCtxPushCurrent_v2: fn(CUcontext) -> CUresult;
            cuCtxPopCurrent_v2: fn(*mut CUcontext) -> CUresult;
            cuStreamGetCtx: fn(CUstream, *mut CUcontext) -> CUresult;
            cuStreamGetCtx_ptsz: fn(CUstream, *mut CUcontext) -> CUresult;
            cuEventCreate: fn(*mut CUevent, c_uint) -> CUresult;
            cuEventRecord: fn(CUevent, CUstream) -> CUresult;
            cuEventRecord_ptsz: fn(CUevent, CUstream) -> CUresult;
            cuEventQuery: fn(CUevent) -> CUresult;
            cuEventDestroy_v2: fn(CUevent) -> CUresult;
            cuEventElapsedTime: fn(*mut f32, CUevent, CUevent) -> CUresult;
            cuEventElapsedTime_v2: fn(*mut f32, CUevent, CUevent) -> CUresult;
            cuStreamQuery: fn(CUstream) -> CUresult;
            cuStreamIsCapturing: fn(CUstream, *mut c_uint) -> CUresult;
            cuThreadExchangeStreamCaptureMode: fn(*mut c_uint) -> CUresult;
            cuMemPoolGetAttribute: fn(CUmemoryPool, c_uint, *mut c_void) -> CUresult;
            cuMemPoolTrimTo: fn(CUmemoryPool, usize) -> CUresult;
            cuDeviceGetMemPool: fn(*mut CUmemoryPool, CUdevice) -> CUresult;
            cuMemGetAddressRange_v2: fn(*mut CUdeviceptr, *mut usize, CUdeviceptr) -> CUresult;
        }
        nvml {
            nvmlInit_v2: fn() -> nvmlReturn_t;
            nvmlDeviceGetHandleByUUID: fn(*const c_char, *mut nvmlDevice_t) -> nvmlReturn_t;
            nvmlDeviceGetCount_v2: fn(*mut c_uint) -> nvmlReturn_t;
            nvmlDeviceGetHandleByIndex_v2: fn(c_uint, *mut nvmlDevice_t) -> nvmlReturn_t;
            nvmlDeviceGetUUID: fn(nvmlDevice_t, *mut c_char, c_uint) -> nvmlReturn_t;
        }
    }
}

static CUDA: OnceLock<Option<Cuda>> = OnceLock::new();
static NVML: OnceLock<Option<Nvml>> = OnceLock::new();

fn library_path(variable: &str, default: &str) -> Option<CString> {
    let path =
        std::env::var_os(variable).filter(|p| !p.is_empty()).map(|p| p.into_encoded_bytes()).unwrap_or_else(|| default.as_bytes().to_vec());
    CString::new(path).ok()
}

fn load<T>(cell: &'static OnceLock<Option<T>>, variable: &str, default: &str, resolve: fn(*mut c_void) -> T) -> Option<&'static T> {
    if let Some(loaded) = cell.get() {
        return loaded.as_ref();
    }
    // A thread resolving a table (a library constructor calling back into
    // the shim) gets `None` instead of a deadlock.
    if crate::thread::with(|t| t.resolving.get()).unwrap_or(true) {
        return None;
    }
    crate::thread::with(|t| t.resolving.set(true));
    let loaded = cell.get_or_init(|| {
        let path = library_path(variable, default)?;
        let handle = ffi::open_library(&path);
        if handle.is_null() {
            // Said once (the table is never loaded again): a path the
            // administrator gave must not fail every call without a word.
            if std::env::var_os(variable).is_some_and(|v| !v.is_empty()) {
                let why = ffi::last_dl_error();
                crate::log::write(
                    crate::config::LogLevel::Error,
                    format_args!("{variable}={:?} is invalid: it cannot be loaded ({why}); every call to it fails", path.to_string_lossy()),
                );
            }
            return None;
        }
        Some(resolve(handle))
    });
    crate::thread::with(|t| t.resolving.set(false));
    loaded.as_ref()
}

/// The real driver, loaded on first use; `None` when it cannot be loaded.
pub fn cuda() -> Option<&'static Cuda> {
    load(&CUDA, "GPUSLICE_CUDA_LIB", "libcuda.so.1", Cuda::resolve)
}

/// Real NVML, loaded on first use; `None` when it cannot be loaded.
pub fn nvml() -> Option<&'static Nvml> {
    load(&NVML, "GPUSLICE_NVML_LIB", "libnvidia-ml.so.1", Nvml::resolve)
}

// Safe wrappers for the queries the shim makes on its own behalf. Each owns
// its out-parameters, so the only precondition left is the driver's own.

macro_rules! call {
    ($table:expr, $name:ident ( $($arg:expr),* )) => {
        match $table.and_then(|t| t.$name) {
            // SAFETY: the arguments are valid for this entry point: out
            // pointers point at locals of the caller, handles came from the
            // driver.
            Some(f) => unsafe { f($($arg),*) },
            None => CUDA_ERROR_NOT_FOUND,
        }
    };
}

/// `Ok(value())` when the driver call succeeded, `Err(result)` otherwise:
/// `value` (which reads what the call wrote) runs only after a success.
pub fn ok_then<T>(result: CUresult, value: impl FnOnce() -> T) -> Result<T, CUresult> {
    if result == CUDA_SUCCESS {
        Ok(value())
    } else {
        Err(result)
    }
}

/// `cuInit(flags)` on the real driver.
pub fn init(flags: c_uint) -> CUresult {
    call!(cuda(), cuInit(flags))
}

/// `cuCtxGetCurrent`: the calling thread's context (null when none).
pub fn current_context() -> Result<CUcontext, CUresult> {
    let mut ctx: CUcontext = core::ptr::null_mut();
    let r = call!(cuda(), cuCtxGetCurrent(&mut ctx));
    ok_then(r, || ctx)
}

/// `cuCtxGetDevice`: the device of the calling thread's context.
pub fn current_device() -> Result<CUdevice, CUresult> {
    let mut dev: CUdevice = 0;
    let r = call!(cuda(), cuCtxGetDevice(&mut dev));
    ok_then(r, || dev)
}

/// `CU_EVENT_DISABLE_TIMING`.
const EVENT_DISABLE_TIMING: c_uint = 0x2;

/// `cuStreamGetCtx` (`_ptsz` for a per-thread default-stream caller): the
/// context `stream` belongs to.
pub fn stream_context(stream: CUstream, per_thread: bool) -> Result<CUcontext, CUresult> {
    let mut ctx: CUcontext = core::ptr::null_mut();
    let r = if per_thread { call!(cuda(), cuStreamGetCtx_ptsz(stream, &mut ctx)) } else { call!(cuda(), cuStreamGetCtx(stream, &mut ctx)) };
    ok_then(r, || ctx)
}

/// Where a memory pool takes its memory from (`CU_MEMPOOL_ATTR_LOCATION_*`),
/// or the driver's error when it cannot say.
pub fn pool_location(pool: CUmemoryPool) -> Result<CUmemLocation, CUresult> {
    let mut location_type: c_int = 0;
    let mut location_id: c_int = 0;
    let r = call!(cuda(), cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_LOCATION_TYPE, (&mut location_type as *mut c_int).cast()));
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    let r = call!(cuda(), cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_LOCATION_ID, (&mut location_id as *mut c_int).cast()));
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    Ok(CUmemLocation { type_: location_type as c_uint, id: location_id })
}

/// A `cuuint64_t` attribute of a memory pool (`CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`,
/// `…_USED_MEM_CURRENT`).
pub fn pool_bytes(pool: CUmemoryPool, attribute: c_uint) -> Result<u64, CUresult> {
    let mut bytes: u64 = 0;
    let r = call!(cuda(), cuMemPoolGetAttribute(pool, attribute, (&mut bytes as *mut u64).cast()));
    ok_then(r, || bytes)
}

/// `cuMemPoolTrimTo`: the pool gives back unused memory until it reserves
/// at most `keep_bytes` (or has nothing unused left).
pub fn pool_trim_to(pool: CUmemoryPool, keep_bytes: u64) -> CUresult {
    call!(cuda(), cuMemPoolTrimTo(pool, usize::try_from(keep_bytes).unwrap_or(usize::MAX)))
}

/// `cuDeviceGetMemPool`: the pool `cuMemAllocAsync` takes memory from on
/// `device`.
pub fn device_mem_pool(device: CUdevice) -> Result<CUmemoryPool, CUresult> {
    let mut pool: CUmemoryPool = core::ptr::null_mut();
    let r = call!(cuda(), cuDeviceGetMemPool(&mut pool, device));
    ok_then(r, || pool)
}

/// The size of the allocation that starts at `ptr` (`cuMemGetAddressRange_v2`);
/// `None` when no allocation starts there.
pub fn allocation_size_bytes(ptr: CUdeviceptr) -> Option<u64> {
    let mut base: CUdeviceptr = 0;
    let mut size: usize = 0;
    let r = call!(cuda(), cuMemGetAddressRange_v2(&mut base, &mut size, ptr));
    (r == CUDA_SUCCESS && base == ptr).then_some(size as u64)
}

/// `cuMemFreeAsync` (`_ptsz` for a per-thread caller), used to undo an
/// allocation the cap cannot hold.
pub fn mem_free_async(ptr: CUdeviceptr, stream: CUstream, per_thread: bool) -> CUresult {
    if per_thread {
        call!(cuda(), cuMemFreeAsync_ptsz(ptr, stream))
    } else {
        call!(cuda(), cuMemFreeAsync(ptr, stream))
    }
}

/// `cuStreamSynchronize` (`_ptsz` for a per-thread caller).
pub fn stream_synchronize(stream: CUstream, per_thread: bool) -> CUresult {
    if per_thread {
        call!(cuda(), cuStreamSynchronize_ptsz(stream))
    } else {
        call!(cuda(), cuStreamSynchronize(stream))
    }
}

/// Waits for everything context `ctx` has queued, from a thread where
/// another context (or none) is current.
pub fn ctx_synchronize_in(ctx: CUcontext) -> CUresult {
    match with_context(ctx, || ok_then(call!(cuda(), cuCtxSynchronize()), || ())) {
        Ok(()) => CUDA_SUCCESS,
        Err(r) => r,
    }
}

/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
const CAPTURE_MODE_RELAXED: c_uint = 2;

/// Puts the calling thread in the relaxed stream-capture mode: its own
/// synchronisations (a drain) are then allowed while another thread of the
/// application captures a graph in the global mode, and do not invalidate
/// that capture. A driver without the call has no capture to spoil.
pub fn relax_capture_mode_of_this_thread() {
    let mut mode: c_uint = CAPTURE_MODE_RELAXED;
    let _ = call!(cuda(), cuThreadExchangeStreamCaptureMode(&mut mode));
}

/// The device of context `ctx`: pushed, asked, popped (the calling thread's
/// current context is unchanged afterwards).
pub fn context_device(ctx: CUcontext) -> Result<CUdevice, CUresult> {
    let r = call!(cuda(), cuCtxPushCurrent_v2(ctx));
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    let device = current_device();
    let mut popped: CUcontext = core::ptr::null_mut();
    let _ = call!(cuda(), cuCtxPopCurrent_v2(&mut popped));
    device
}

/// An event recorded on `stream` now, created in context `ctx` (the
/// stream's), leaving the calling thread's current context as it was.
pub fn record_event(ctx: CUcontext, stream: CUstream, per_thread: bool) -> Result<CUevent, CUresult> {
    with_context(ctx, || {
        let mut event: CUevent = core::ptr::null_mut();
        let mut r = call!(cuda(), cuEventCreate(&mut event, EVENT_DISABLE_TIMING));
        if r == CUDA_SUCCESS {
            r = if per_thread { call!(cuda(), cuEventRecord_ptsz(event, stream)) } else { call!(cuda(), cuEventRecord(event, stream)) };
            if r != CUDA_SUCCESS {
                let _ = call!(cuda(), cuEventDestroy_v2(event));
            }
        }
        ok_then(r, || event)
    })
}

/// Runs `f` with `ctx` current on the calling thread (pushed and popped
/// when another is current), or returns the push's error.
pub fn with_context<T>(ctx: CUcontext, f: impl FnOnce() -> Result<T, CUresult>) -> Result<T, CUresult> {
    let current = current_context()?;
    let pushed = current != ctx && !ctx.is_null();
    if pushed {
        let r = call!(cuda(), cuCtxPushCurrent_v2(ctx));
        if r != CUDA_SUCCESS {
            return Err(r);
        }
    }
    let result = f();
    if pushed {
        let mut popped: CUcontext = core::ptr::null_mut();
        let _ = call!(cuda(), cuCtxPopCurrent_v2(&mut popped));
    }
    result
}

/// `cuEventCreate` with timing, in the current context.
pub fn event_create_timed() -> Result<CUevent, CUresult> {
    let mut event: CUevent = core::ptr::null_mut();
    let r = call!(cuda(), cuEventCreate(&mut event, 0));
    ok_then(r, || event)
}

/// `cuEventRecord` (`stream` as the launch named it: `CU_STREAM_PER_THREAD`
/// stands for a per-thread caller's null stream).
pub fn event_record(event: CUevent, stream: CUstream) -> CUresult {
    call!(cuda(), cuEventRecord(event, stream))
}

/// `cuEventElapsedTime_v2` (or the first version) of two completed events,
/// in ns; a negative or non-finite answer is an error.
pub fn event_elapsed_ns(start: CUevent, end: CUevent) -> Result<u64, CUresult> {
    let mut ms: f32 = 0.0;
    let mut r = call!(cuda(), cuEventElapsedTime_v2(&mut ms, start, end));
    if r == CUDA_ERROR_NOT_FOUND {
        r = call!(cuda(), cuEventElapsedTime(&mut ms, start, end));
    }
    if r != CUDA_SUCCESS {
        return Err(r);
    }
    if !ms.is_finite() || ms < 0.0 {
        return Err(CUDA_ERROR_UNKNOWN);
    }
    // Saturates: f64 to u64 conversion clamps.
    Ok((f64::from(ms) * 1e6) as u64)
}

/// `cuStreamQuery`: `CUDA_SUCCESS` once everything submitted to it ran.
pub fn stream_query(stream: CUstream) -> CUresult {
    call!(cuda(), cuStreamQuery(stream))
}

/// Whether `stream` is capturing a graph (`cuStreamIsCapturing`): work
/// launched there is recorded, not run.
pub fn stream_capturing(stream: CUstream) -> Result<bool, CUresult> {
    let mut status: c_uint = 0;
    let r = call!(cuda(), cuStreamIsCapturing(stream, &mut status));
    ok_then(r, || status != 0)
}

/// `cuEventQuery`: `CUDA_SUCCESS` once the stream passed it,
/// `CUDA_ERROR_NOT_READY` before.
pub fn event_query(event: CUevent) -> CUresult {
    call!(cuda(), cuEventQuery(event))
}

/// `cuEventDestroy_v2`.
pub fn event_destroy(event: CUevent) {
    let _ = call!(cuda(), cuEventDestroy_v2(event));
}

/// `cuDeviceGetCount`.
pub fn device_count() -> Result<c_int, CUresult> {
    let mut count: c_int = 0;
    let r = call!(cuda(), cuDeviceGetCount(&mut count));
    ok_then(r, || count)
}

/// `cuDeviceGet`: the handle of device `ordinal`.
pub fn device_get(ordinal: c_int) -> Result<CUdevice, CUresult> {
    let mut dev: CUdevice = 0;
    let r = call!(cuda(), cuDeviceGet(&mut dev, ordinal));
    ok_then(r, || dev)
}

/// `cuDeviceGetUuid_v2` (or the first version when the driver lacks it).
pub fn device_uuid(dev: CUdevice) -> Result<[u8; 16], CUresult> {
    let mut uuid = CUuuid::default();
    let mut r = call!(cuda(), cuDeviceGetUuid_v2(&mut uuid, dev));
    if r == CUDA_ERROR_NOT_FOUND {
        r = call!(cuda(), cuDeviceGetUuid(&mut uuid, dev));
    }
    ok_then(r, || uuid.bytes.map(|b| b as u8))
}

/// `cuDeviceTotalMem_v2`: physical memory of `dev` in bytes.
pub fn device_total_mem_bytes(dev: CUdevice) -> Result<u64, CUresult> {
    let mut bytes: usize = 0;
    let r = call!(cuda(), cuDeviceTotalMem_v2(&mut bytes, dev));
    ok_then(r, || bytes as u64)
}

/// `cuMemFree_v2`, used to undo an allocation the cap cannot hold.
pub fn mem_free(ptr: CUdeviceptr) -> CUresult {
    call!(cuda(), cuMemFree_v2(ptr))
}

/// `cuCtxDestroy_v2`, used to undo a context the cap cannot hold.
pub fn ctx_destroy(ctx: CUcontext) -> CUresult {
    call!(cuda(), cuCtxDestroy_v2(ctx))
}

/// `cuDevicePrimaryCtxRelease_v2`, used to undo a retain the cap cannot hold.
pub fn primary_ctx_release(dev: CUdevice) -> CUresult {
    call!(cuda(), cuDevicePrimaryCtxRelease_v2(dev))
}

macro_rules! nvml_call {
    ($name:ident ( $($arg:expr),* )) => {
        match nvml().and_then(|t| t.$name) {
            // SAFETY: out pointers point at locals of the caller and sizes
            // match them; device handles came from NVML.
            Some(f) => unsafe { f($($arg),*) },
            None => NVML_ERROR_FUNCTION_NOT_FOUND,
        }
    };
}

/// `nvmlInit_v2`; NVML counts initialisations, so calling it once more than
/// the application does is harmless.
pub fn nvml_init() -> nvmlReturn_t {
    nvml_call!(nvmlInit_v2())
}

/// The NVML device with the CUDA UUID `uuid`: `nvmlDeviceGetHandleByUUID`,
/// or a walk over NVML's devices comparing their UUIDs when NVML does not
/// take that spelling.
pub fn nvml_device_by_uuid(uuid: &[u8; 16]) -> Option<nvmlDevice_t> {
    // A MIG device's `cuDeviceGetUuid` bytes are its `MIG-…` UUID's, and
    // NVML finds it only by that name.
    for kind in [UuidKind::Gpu, UuidKind::Mig] {
        let Ok(text) = CString::new(UuidText { kind, bytes: *uuid }.to_string()) else { continue };
        let mut dev: nvmlDevice_t = core::ptr::null_mut();
        if nvml_call!(nvmlDeviceGetHandleByUUID(text.as_ptr(), &mut dev)) == NVML_SUCCESS {
            return Some(dev);
        }
    }
    let mut count: c_uint = 0;
    if nvml_call!(nvmlDeviceGetCount_v2(&mut count)) != NVML_SUCCESS {
        return None;
    }
    (0..count).find_map(|index| {
        let mut dev: nvmlDevice_t = core::ptr::null_mut();
        let found = nvml_call!(nvmlDeviceGetHandleByIndex_v2(index, &mut dev)) == NVML_SUCCESS;
        (found && nvml_device_uuid(dev).as_ref() == Some(uuid)).then_some(dev)
    })
}

/// `nvmlDeviceGetUUID` parsed back into 16 bytes.
pub fn nvml_device_uuid(dev: nvmlDevice_t) -> Option<[u8; 16]> {
    let mut buf = [0 as c_char; NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    let r = nvml_call!(nvmlDeviceGetUUID(dev, buf.as_mut_ptr(), buf.len() as c_uint));
    if r != NVML_SUCCESS {
        return None;
    }
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    abi::uuid::parse_uuid(std::str::from_utf8(&bytes).ok()?).map(|uuid| uuid.bytes)
}

/// The memory NVML reports for process `pid` on `dev`
/// (`nvmlDeviceGetComputeRunningProcesses_v3`), asking again with room for
/// every process when the first buffer is too small.
pub fn nvml_process_used_bytes(dev: nvmlDevice_t, pid: u32) -> Option<u64> {
    let mut infos = vec![nvmlProcessInfo_t::default(); 64];
    for _ in 0..4 {
        let mut count = infos.len() as c_uint;
        let r = nvml_call!(nvmlDeviceGetComputeRunningProcesses_v3(dev, &mut count, infos.as_mut_ptr()));
        if r == NVML_ERROR_INSUFFICIENT_SIZE {
            infos.resize((count as usize).max(infos.len() * 2).saturating_add(16), nvmlProcessInfo_t::default());
            continue;
        }
        if r != NVML_SUCCESS {
            return None;
        }
        return infos.iter().take(count as usize).find(|i| i.pid == pid).map(|i| i.usedGpuMemory);
    }
    None
}

/// NVML's (total, used) bytes of device `dev` (the real figures).
pub fn nvml_device_memory_bytes(dev: nvmlDevice_t) -> Option<(u64, u64)> {
    let mut memory = nvmlMemory_t::default();
    let r = nvml_call!(nvmlDeviceGetMemoryInfo(dev, &mut memory));
    (r == NVML_SUCCESS).then_some((memory.total, memory.used))
}
