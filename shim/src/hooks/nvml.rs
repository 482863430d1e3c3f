//! NVML as a capped tenant sees it: its own device.
//!
//! - Memory info: total is the cap, used is the tenant's usage.
//! - The running-process lists (`nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses`
//!   in their unversioned, `_v2` and `_v3` forms, as nvitop and
//!   nvidia-smi read them) hold only the tenant's own processes: those
//!   whose pid a live slot of its ledger records (see
//!   `accounting::views`), so the processes listed and the used memory
//!   shown agree. Other tenants' processes are not shown, nor their
//!   utilization samples (`nvmlDeviceGetProcessUtilization`).
//!
//! A process without a cap, and the monitor (which does not load the
//! shim), see NVML's figures and every process. A process that uses NVML
//! without CUDA (a monitoring tool under the shim) initialises the shim
//! here when the environment sets a cap, so that it sees the cap too;
//! without a cap it is left alone.

#![allow(non_snake_case)]

use crate::accounting::{capped_view, keep_tenant_processes, Runtime};
use crate::guard::{boundary, Guard, Nvml};
use crate::{real, Access};
use abi::nvml::*;
use core::ffi::c_uint;
use ledger::UNLIMITED;

enum View {
    Real,
    Capped { rt: &'static Runtime, limit_bytes: u64, used_bytes: u64 },
    Refused,
}

fn view(device: nvmlDevice_t) -> View {
    let access = match crate::runtime_if_started() {
        Some(access) => access,
        None if crate::config().is_none_or(|c| c.memory.any()) => match crate::runtime() {
            Ok(access) => access,
            Err(_) => return View::Real,
        },
        None => return View::Real,
    };
    let rt = match access {
        Access::Ready(rt) => rt,
        Access::PassThrough => return View::Real,
        Access::Refused(_) => return View::Refused,
    };
    let Some(uuid) = real::nvml_device_uuid(device) else { return View::Real };
    let Some(dev) = rt.device_by_uuid(&uuid) else { return View::Real };
    let (limit_bytes, used_bytes) = rt.limit_and_used(dev.ledger_index);
    if limit_bytes == UNLIMITED {
        View::Real
    } else {
        View::Capped { rt, limit_bytes, used_bytes }
    }
}

macro_rules! nvml_real_or_return {
    ($name:ident) => {
        match real::nvml().and_then(|t| t.$name) {
            Some(f) => f,
            None => return NVML_ERROR_FUNCTION_NOT_FOUND,
        }
    };
}

/// Applies the view to the driver's (total, free, used); returns the new
/// ones, or `None` to leave them.
fn apply(device: nvmlDevice_t, total: u64, free: u64) -> Result<Option<(u64, u64, u64)>, nvmlReturn_t> {
    match view(device) {
        View::Real => Ok(None),
        View::Refused => Err(NVML_ERROR_NO_PERMISSION),
        View::Capped { limit_bytes, used_bytes, .. } => {
            let (free, total) = capped_view(limit_bytes, used_bytes, free, total);
            Ok(Some((total, free, used_bytes.min(total))))
        }
    }
}

/// The two layouts of NVML's memory record, seen through the fields the
/// view changes.
trait MemoryRecord: Copy {
    fn total_free(&self) -> (u64, u64);
    fn set_view(&mut self, total: u64, free: u64, used: u64);
}

impl MemoryRecord for nvmlMemory_t {
    fn total_free(&self) -> (u64, u64) {
        (self.total, self.free)
    }
    fn set_view(&mut self, total: u64, free: u64, used: u64) {
        *self = nvmlMemory_t { total, free, used };
    }
}

impl MemoryRecord for nvmlMemory_v2_t {
    fn total_free(&self) -> (u64, u64) {
        (self.total, self.free)
    }
    fn set_view(&mut self, total: u64, free: u64, used: u64) {
        self.total = total;
        self.free = free;
        self.used = used;
        self.reserved = 0;
    }
}

/// Asks NVML into a private copy, applies the view, and writes the caller's
/// record only when the answer is a success: an error leaves it untouched.
///
/// # Safety
/// `memory` is null or valid for reads and writes of a `T`.
unsafe fn memory_info<T: MemoryRecord>(
    device: nvmlDevice_t,
    memory: *mut T,
    real: unsafe extern "C" fn(nvmlDevice_t, *mut T) -> nvmlReturn_t,
) -> nvmlReturn_t {
    // SAFETY: the caller's record is valid (or null, which NVML refuses);
    // the copy carries its version word for the `_v2` call.
    let Some(mut copy) = (unsafe { memory.as_ref() }).copied() else {
        // SAFETY: forwarding the caller's arguments unchanged.
        return unsafe { real(device, memory) };
    };
    // SAFETY: `copy` is a valid record of the right type.
    let r = unsafe { real(device, &mut copy) };
    if r != NVML_SUCCESS {
        return r;
    }
    let r = match Guard::enter() {
        None => r,
        Some(_guard) => boundary(Nvml, || {
            let (total, free) = copy.total_free();
            match apply(device, total, free) {
                Err(e) => e,
                Ok(None) => r,
                Ok(Some((total, free, used))) => {
                    copy.set_view(total, free, used);
                    r
                }
            }
        }),
    };
    if r == NVML_SUCCESS {
        // SAFETY: checked non-null above; valid for writes.
        unsafe { *memory = copy };
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(device: nvmlDevice_t, memory: *mut nvmlMemory_t) -> nvmlReturn_t {
    let real = nvml_real_or_return!(nvmlDeviceGetMemoryInfo);
    // SAFETY: the caller passes a valid record or null.
    unsafe { memory_info(device, memory, real) }
}

#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(device: nvmlDevice_t, memory: *mut nvmlMemory_v2_t) -> nvmlReturn_t {
    let real = nvml_real_or_return!(nvmlDeviceGetMemoryInfo_v2);
    // SAFETY: the caller passes a valid record or null.
    unsafe { memory_info(device, memory, real) }
}

/// The two layouts of NVML's process record, seen through their pid.
trait ProcessRecord: Copy + Default {
    fn pid(&self) -> u32;
}

impl ProcessRecord for nvmlProcessInfo_v1_t {
    fn pid(&self) -> u32 {
        self.pid
    }
}

impl ProcessRecord for nvmlProcessInfo_t {
    fn pid(&self) -> u32 {
        self.pid
    }
}

type ProcessList<T> = unsafe extern "C" fn(nvmlDevice_t, *mut c_uint, *mut T) -> nvmlReturn_t;

/// NVML's whole list, asked again with more room while it grows.
fn whole_list<T: ProcessRecord>(device: nvmlDevice_t, real: ProcessList<T>) -> Result<Vec<T>, nvmlReturn_t> {
    let mut infos: Vec<T> = Vec::new();
    for _ in 0..8 {
        let mut count = infos.len() as c_uint;
        let buffer = if infos.is_empty() { core::ptr::null_mut() } else { infos.as_mut_ptr() };
        // SAFETY: `count` is a local; `buffer` is null with a count of 0 or
        // holds `count` records.
        match unsafe { real(device, &mut count, buffer) } {
            NVML_SUCCESS => {
                infos.truncate(count as usize);
                return Ok(infos);
            }
            NVML_ERROR_INSUFFICIENT_SIZE => infos = vec![T::default(); (count as usize).saturating_add(8)],
            error => return Err(error),
        }
    }
    Err(NVML_ERROR_UNKNOWN)
}

/// A process-list query under a cap: NVML's list less other tenants'
/// processes, answered with NVML's protocol (`*count` in: the room in
/// `infos`; out: how many there are; too little room is
/// `NVML_ERROR_INSUFFICIENT_SIZE`).
///
/// # Safety
/// `count` is null or valid for reads and writes; `infos` is null or holds
/// `*count` records.
unsafe fn running_processes<T: ProcessRecord>(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut T,
    real: ProcessList<T>,
) -> nvmlReturn_t {
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = || unsafe { real(device, count, infos) };
    if count.is_null() {
        return forward();
    }
    let Some(_guard) = Guard::enter() else { return forward() };
    boundary(Nvml, || {
        let rt = match view(device) {
            View::Real => return forward(),
            View::Refused => return NVML_ERROR_NO_PERMISSION,
            View::Capped { rt, .. } => rt,
        };
        let mut list = match whole_list(device, real) {
            Ok(list) => list,
            Err(error) => return error,
        };
        keep_tenant_processes(&mut list, &rt.tenant_pids(), T::pid);
        // SAFETY: checked non-null; valid for reads and writes by nvml.h's contract.
        let room = unsafe { count.read_unaligned() } as usize;
        // SAFETY: as above.
        unsafe { count.write_unaligned(list.len() as c_uint) };
        if list.is_empty() {
            return NVML_SUCCESS;
        }
        if room < list.len() {
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if infos.is_null() {
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        for (k, info) in list.into_iter().enumerate() {
            // SAFETY: the caller's array holds `room` >= k + 1 records.
            unsafe { infos.add(k).write_unaligned(info) };
        }
        NVML_SUCCESS
    })
}

/// Exports one process-list hook per (name, record).
macro_rules! process_list_hooks {
    ($($name:ident: $info:ty;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(device: nvmlDevice_t, count: *mut c_uint, infos: *mut $info) -> nvmlReturn_t {
            let real = nvml_real_or_return!($name);
            // SAFETY: the caller's pointers under nvml.h's contract.
            unsafe { running_processes(device, count, infos, real) }
        }
    )*};
}

process_list_hooks! {
    nvmlDeviceGetComputeRunningProcesses: nvmlProcessInfo_v1_t;
    nvmlDeviceGetComputeRunningProcesses_v2: nvmlProcessInfo_t;
    nvmlDeviceGetComputeRunningProcesses_v3: nvmlProcessInfo_t;
    nvmlDeviceGetGraphicsRunningProcesses: nvmlProcessInfo_v1_t;
    nvmlDeviceGetGraphicsRunningProcesses_v2: nvmlProcessInfo_t;
    nvmlDeviceGetGraphicsRunningProcesses_v3: nvmlProcessInfo_t;
    nvmlDeviceGetMPSComputeRunningProcesses: nvmlProcessInfo_v1_t;
    nvmlDeviceGetMPSComputeRunningProcesses_v2: nvmlProcessInfo_t;
    nvmlDeviceGetMPSComputeRunningProcesses_v3: nvmlProcessInfo_t;
}

/// `nvmlDeviceGetProcessUtilization` under a cap: the samples of the
/// tenant's own processes, with NVML's protocol (`*count` in: the room in
/// `utilization`; out: how many there are; none is `NVML_ERROR_NOT_FOUND`).
#[no_mangle]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    last_seen_time_stamp: u64,
) -> nvmlReturn_t {
    let real = nvml_real_or_return!(nvmlDeviceGetProcessUtilization);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = || unsafe { real(device, utilization, count, last_seen_time_stamp) };
    if count.is_null() {
        return forward();
    }
    let Some(_guard) = Guard::enter() else { return forward() };
    boundary(Nvml, || {
        let rt = match view(device) {
            View::Real => return forward(),
            View::Refused => return NVML_ERROR_NO_PERMISSION,
            View::Capped { rt, .. } => rt,
        };
        let mut samples: Vec<nvmlProcessUtilizationSample_t> = Vec::new();
        let mut complete = false;
        for _ in 0..8 {
            let mut n = samples.len() as c_uint;
            let buffer = if samples.is_empty() { core::ptr::null_mut() } else { samples.as_mut_ptr() };
            // SAFETY: `n` is a local; `buffer` is null with a count of 0 or
            // holds `n` samples.
            match unsafe { real(device, buffer, &mut n, last_seen_time_stamp) } {
                NVML_SUCCESS => {
                    samples.truncate(n as usize);
                    complete = true;
                    break;
                }
                NVML_ERROR_NOT_FOUND => {
                    samples.clear();
                    complete = true;
                    break;
                }
                NVML_ERROR_INSUFFICIENT_SIZE => samples = vec![nvmlProcessUtilizationSample_t::default(); (n as usize).saturating_add(8)],
                error => return error,
            }
        }
        if !complete {
            return NVML_ERROR_UNKNOWN;
        }
        keep_tenant_processes(&mut samples, &rt.tenant_pids(), |sample| sample.pid);
        if samples.is_empty() {
            return NVML_ERROR_NOT_FOUND;
        }
        // SAFETY: checked non-null; valid for reads and writes by nvml.h's contract.
        let room = unsafe { count.read_unaligned() } as usize;
        // SAFETY: as above.
        unsafe { count.write_unaligned(samples.len() as c_uint) };
        if utilization.is_null() || room < samples.len() {
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (k, sample) in samples.into_iter().enumerate() {
            // SAFETY: the caller's array holds `room` >= k + 1 samples.
            unsafe { utilization.add(k).write_unaligned(sample) };
        }
        NVML_SUCCESS
    })
}
