//! NVML's memory view: total is the cap, used is the tenant's usage.
//!
//! A process that uses NVML without CUDA (a monitoring tool under the shim)
//! initialises the shim here when the environment sets a cap, so that it
//! sees the cap too; without a cap it is left alone.

#![allow(non_snake_case)]

use crate::accounting::capped_view;
use crate::guard::{boundary_nvml, Guard};
use crate::{real, Access};
use abi::nvml::*;
use ledger::UNLIMITED;

enum View {
    Real,
    Capped { limit_bytes: u64, used_bytes: u64 },
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
        View::Capped { limit_bytes, used_bytes }
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
        View::Capped { limit_bytes, used_bytes } => {
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
        Some(_guard) => boundary_nvml(|| {
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
