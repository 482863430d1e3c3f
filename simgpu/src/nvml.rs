//! NVML, read from the same shared state as the driver: device identity,
//! memory (all processes, contexts included), utilization, and per-process
//! memory and SM utilization.
//!
//! An NVML-only process (a monitor) maps the state file but claims no process
//! record. Every per-process query first reclaims dead processes, so a killed
//! process disappears from NVML as it does on a real GPU.

use crate::driver::{device_uuid, machine, uuid_string, Machine, DEVICE_NAME, DRIVER_VERSION, NVML_DRIVER_VERSION};
use crate::state::{SharedState, PROC_ALIVE, PROC_SAMPLES, SAMPLE_PERIOD_NS};
use crate::sys;
use abi::nvml::*;
use std::ffi::{c_char, c_int, c_uint, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering::*};

type NvResult<T> = Result<T, nvmlReturn_t>;

static INIT_COUNT: AtomicU32 = AtomicU32::new(0);

/// Opaque device handles point into this table; they are validated by
/// address and never dereferenced.
static DEVICE_TOKENS: [u8; crate::state::MAX_DEVICES] = [0; crate::state::MAX_DEVICES];

fn guard(f: impl FnOnce() -> NvResult<()>) -> nvmlReturn_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NVML_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => NVML_ERROR_UNKNOWN,
    }
}

fn ready() -> NvResult<&'static Machine> {
    if INIT_COUNT.load(Acquire) == 0 {
        return Err(NVML_ERROR_UNINITIALIZED);
    }
    machine().map_err(|_| NVML_ERROR_UNINITIALIZED)
}

fn device(m: &Machine, dev: nvmlDevice_t) -> NvResult<usize> {
    let base = DEVICE_TOKENS.as_ptr() as usize;
    let addr = dev as usize;
    let index = addr.wrapping_sub(base);
    if addr < base || index >= m.state.device_count() as usize {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    Ok(index)
}

fn handle(index: usize) -> nvmlDevice_t {
    DEVICE_TOKENS.as_ptr().wrapping_add(index) as nvmlDevice_t
}

unsafe fn out<T>(p: *mut T, v: T) -> NvResult<()> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null and writable by nvml.h's contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

unsafe fn write_str(buf: *mut c_char, len: c_uint, text: &str) -> NvResult<()> {
    if buf.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (len as usize) < text.len() + 1 {
        return Err(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller provides `len` >= text.len() + 1 writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, text.len());
        *buf.add(text.len()) = 0;
    }
    Ok(())
}

fn init() -> NvResult<()> {
    machine().map_err(|_| NVML_ERROR_UNKNOWN)?;
    INIT_COUNT.fetch_add(1, AcqRel);
    Ok(())
}

#[no_mangle]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    guard(init)
}

#[no_mangle]
pub extern "C" fn nvmlInit() -> nvmlReturn_t {
    guard(init)
}

#[no_mangle]
pub extern "C" fn nvmlInitWithFlags(flags: c_uint) -> nvmlReturn_t {
    let _ = flags; // NO_GPUS / NO_ATTACH change nothing for simulated devices
    guard(init)
}

#[no_mangle]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    guard(|| {
        INIT_COUNT.fetch_update(AcqRel, Acquire, |c| c.checked_sub(1)).map(|_| ()).map_err(|_| NVML_ERROR_UNINITIALIZED)
    })
}

static ERROR_STRINGS: &[(nvmlReturn_t, &CStr)] = &[
    (NVML_SUCCESS, c"Success"),
    (NVML_ERROR_UNINITIALIZED, c"Uninitialized"),
    (NVML_ERROR_INVALID_ARGUMENT, c"Invalid Argument"),
    (NVML_ERROR_NOT_SUPPORTED, c"Not Supported"),
    (NVML_ERROR_NO_PERMISSION, c"Insufficient Permissions"),
    (NVML_ERROR_NOT_FOUND, c"Not Found"),
    (NVML_ERROR_INSUFFICIENT_SIZE, c"Insufficient Size"),
    (NVML_ERROR_DRIVER_NOT_LOADED, c"Driver Not Loaded"),
    (NVML_ERROR_LIBRARY_NOT_FOUND, c"NVML Shared Library Not Found"),
    (NVML_ERROR_FUNCTION_NOT_FOUND, c"Function Not Found"),
    (NVML_ERROR_GPU_IS_LOST, c"GPU is lost"),
    (NVML_ERROR_NO_DATA, c"No data"),
    (NVML_ERROR_ARGUMENT_VERSION_MISMATCH, c"Argument version mismatch"),
    (NVML_ERROR_UNKNOWN, c"Unknown Error"),
];

#[no_mangle]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    ERROR_STRINGS.iter().find(|(r, _)| *r == result).map_or(c"Unknown Error".as_ptr(), |(_, s)| s.as_ptr())
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    // SAFETY: buffer of `length` bytes by nvml.h's contract.
    guard(|| unsafe { write_str(version, length, NVML_DRIVER_VERSION) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    // SAFETY: buffer of `length` bytes by nvml.h's contract.
    guard(|| unsafe { write_str(version, length, "13.580.65.06") })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> nvmlReturn_t {
    // SAFETY: out-pointer by nvml.h's contract.
    guard(|| unsafe { out(version, DRIVER_VERSION) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> nvmlReturn_t {
    // SAFETY: out-pointer by nvml.h's contract.
    guard(|| unsafe { out(version, DRIVER_VERSION) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: out-pointer by nvml.h's contract.
    guard(|| unsafe { out(count, ready()?.state.device_count()) })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetCount(count: *mut c_uint) -> nvmlReturn_t {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetCount_v2(count) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, dev: *mut nvmlDevice_t) -> nvmlReturn_t {
    guard(|| {
        let m = ready()?;
        if index >= m.state.device_count() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: out-pointer by nvml.h's contract.
        unsafe { out(dev, handle(index as usize)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex(index: c_uint, dev: *mut nvmlDevice_t) -> nvmlReturn_t {
    // SAFETY: same contract.
    unsafe { nvmlDeviceGetHandleByIndex_v2(index, dev) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, dev: *mut nvmlDevice_t) -> nvmlReturn_t {
    guard(|| {
        let m = ready()?;
        if uuid.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null NUL-terminated string by nvml.h's contract.
        let wanted = unsafe { CStr::from_ptr(uuid) }.to_string_lossy().to_ascii_lowercase();
        let index = (0..m.state.device_count() as usize)
            .find(|&i| uuid_string(&device_uuid(&m.state, i)).to_ascii_lowercase() == wanted)
            .ok_or(NVML_ERROR_NOT_FOUND)?;
        // SAFETY: out-pointer by nvml.h's contract.
        unsafe { out(dev, handle(index)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetName(dev: nvmlDevice_t, name: *mut c_char, length: c_uint) -> nvmlReturn_t {
    guard(|| {
        device(ready()?, dev)?;
        // SAFETY: buffer of `length` bytes by nvml.h's contract.
        unsafe { write_str(name, length, DEVICE_NAME) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUUID(dev: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> nvmlReturn_t {
    guard(|| {
        let m = ready()?;
        let i = device(m, dev)?;
        // SAFETY: buffer of `length` bytes by nvml.h's contract.
        unsafe { write_str(uuid, length, &uuid_string(&device_uuid(&m.state, i))) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetIndex(dev: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    guard(|| {
        let i = device(ready()?, dev)?;
        // SAFETY: out-pointer by nvml.h's contract.
        unsafe { out(index, i as c_uint) }
    })
}

fn memory(m: &Machine, i: usize) -> (u64, u64) {
    m.state.reclaim_dead(None);
    m.state.memory(i)
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(dev: nvmlDevice_t, mem: *mut nvmlMemory_t) -> nvmlReturn_t {
    guard(|| {
        let m = ready()?;
        let i = device(m, dev)?;
        let (total, used) = memory(m, i);
        // SAFETY: out-pointer by nvml.h's contract.
        unsafe { out(mem, nvmlMemory_t { total, free: total - used, used }) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(dev: nvmlDevice_t, mem: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    guard(|| {
        let m = ready()?;
        let i = device(m, dev)?;
        if mem.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        // SAFETY: non-null; the caller sets `version` before the call.
        let version = unsafe { std::ptr::addr_of!((*mem).version).read_unaligned() };
        if version != nvmlMemory_v2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used) = memory(m, i);
        // SAFETY: out-pointer by nvml.h's contract.
        unsafe { out(mem, nvmlMemory_v2_t { version, total, reserved: 0, free: total - used, used }) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(dev: nvmlDevice_t, util: *mut nvmlUtilization_t) -> nvmlReturn_t {
    guard(|| {
        let m = ready()?;
        let i = device(m, dev)?;
        let gpu = m.state.device_utilization_percent(i);
        // SAFETY: out-pointer by nvml.h's contract.
        unsafe { out(util, nvmlUtilization_t { gpu, memory: 0 }) }
    })
}

/// (host pid, used bytes) of the live processes with a context on device `i`.
fn compute_processes(st: &SharedState, i: usize) -> Vec<(u32, u64)> {
    st.reclaim_dead(None);
    (0..crate::state::MAX_PROCS)
        .map(|s| st.proc(s))
        .filter(|r| r.state.load(Acquire) == PROC_ALIVE && r.devices[i].contexts.load(Acquire) > 0)
        .map(|r| (r.host_pid.load(Relaxed), r.devices[i].used_bytes.load(Acquire)))
        .collect()
}

unsafe fn running_processes<T>(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut T, make: impl Fn(u32, u64) -> T) -> nvmlReturn_t {
    guard(|| {
        let m = ready()?;
        let i = device(m, dev)?;
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let procs = compute_processes(&m.state, i);
        // SAFETY: non-null in/out count by nvml.h's contract.
        let room = unsafe { *count } as usize;
        // SAFETY: out-pointer, checked non-null.
        unsafe { out(count, procs.len() as c_uint)? };
        if procs.is_empty() {
            return Ok(());
        }
        if room < procs.len() {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        if infos.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        for (k, (pid, used)) in procs.into_iter().enumerate() {
            // SAFETY: the caller's array holds `room` >= k + 1 entries.
            unsafe { infos.add(k).write_unaligned(make(pid, used)) };
        }
        Ok(())
    })
}

/// `nvmlProcessInfo_v1_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfoV1 {
    pub pid: c_uint,
    pub used_gpu_memory: u64,
}

const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    // SAFETY: forwarding the caller's pointers under nvml.h's contract.
    unsafe { running_processes(dev, count, infos, |pid, used| nvmlProcessInfo_t { pid, usedGpuMemory: used, gpuInstanceId: NO_INSTANCE, computeInstanceId: NO_INSTANCE }) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v2(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut nvmlProcessInfo_t) -> nvmlReturn_t {
    // SAFETY: same layout (nvmlProcessInfo_v2_t) and contract.
    unsafe { nvmlDeviceGetComputeRunningProcesses_v3(dev, count, infos) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses(dev: nvmlDevice_t, count: *mut c_uint, infos: *mut ProcessInfoV1) -> nvmlReturn_t {
    // SAFETY: forwarding the caller's pointers under nvml.h's contract.
    unsafe { running_processes(dev, count, infos, |pid, used| ProcessInfoV1 { pid, used_gpu_memory: used }) }
}

/// Writes a per-process utilization sample for (record, device) if a sample
/// period has passed since the last one: SM busy share over that period.
pub fn sample_process(st: &SharedState, slot: usize, dev: usize, now_ns: u64) {
    let pd = &st.proc(slot).devices[dev];
    let last = pd.last_sample_ns.load(Acquire);
    if last != 0 && now_ns < last.saturating_add(SAMPLE_PERIOD_NS) {
        return;
    }
    if pd.last_sample_ns.compare_exchange(last, now_ns, AcqRel, Relaxed).is_err() {
        return;
    }
    let busy = pd.busy_ns_total.load(Acquire);
    let prev = pd.last_sample_busy_ns.swap(busy, AcqRel);
    if last == 0 {
        return;
    }
    let window = now_ns.saturating_sub(last).max(1);
    let util = (busy.saturating_sub(prev).saturating_mul(100) / window).min(100) as u32;
    let k = pd.sample_head.fetch_add(1, AcqRel) as usize % PROC_SAMPLES;
    let s = &pd.samples[k];
    s.at_us.store(0, Release);
    s.sm_util_percent.store(util, Release);
    s.at_us.store(sys::realtime_us(), Release);
}

/// One entry per live process with samples newer than `last_seen_us`: the
/// mean SM utilization of those samples, stamped with the newest.
fn process_samples(st: &SharedState, i: usize, last_seen_us: u64) -> Vec<nvmlProcessUtilizationSample_t> {
    st.reclaim_dead(None);
    let now = sys::now_ns();
    let mut out = Vec::new();
    for slot in 0..crate::state::MAX_PROCS {
        let r = st.proc(slot);
        if r.state.load(Acquire) != PROC_ALIVE || r.devices[i].contexts.load(Acquire) == 0 {
            continue;
        }
        sample_process(st, slot, i, now);
        let (mut n, mut sum, mut newest) = (0u64, 0u64, 0u64);
        for s in &r.devices[i].samples {
            let at = s.at_us.load(Acquire);
            if at > last_seen_us {
                n += 1;
                sum += s.sm_util_percent.load(Acquire) as u64;
                newest = newest.max(at);
            }
        }
        if let Some(mean) = sum.checked_div(n) {
            out.push(nvmlProcessUtilizationSample_t { pid: r.host_pid.load(Relaxed), timeStamp: newest, smUtil: mean as c_uint, memUtil: 0, encUtil: 0, decUtil: 0 });
        }
    }
    out
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(dev: nvmlDevice_t, utilization: *mut nvmlProcessUtilizationSample_t, count: *mut c_uint, last_seen_us: u64) -> nvmlReturn_t {
    guard(|| {
        let m = ready()?;
        let i = device(m, dev)?;
        if count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let samples = process_samples(&m.state, i, last_seen_us);
        if samples.is_empty() {
            return Err(NVML_ERROR_NOT_FOUND);
        }
        // SAFETY: non-null in/out count by nvml.h's contract.
        let room = unsafe { *count } as usize;
        // SAFETY: out-pointer, checked non-null.
        unsafe { out(count, samples.len() as c_uint)? };
        if utilization.is_null() || room < samples.len() {
            return Err(NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (k, s) in samples.into_iter().enumerate() {
            // SAFETY: the caller's buffer holds `room` >= k + 1 entries.
            unsafe { utilization.add(k).write_unaligned(s) };
        }
        Ok(())
    })
}
