//! Modes a device is in, as an H200 in a data-centre host reports them:
//! compute mode default, persistence on, ECC on with no errors, no display,
//! MIG disabled. The driver model is a Windows notion: on Linux NVML answers
//! `NVML_ERROR_NOT_SUPPORTED`, and so does simgpu.

use super::{nvml_export, out, ready_device, NvResult};
use abi::nvml::*;
use std::ffi::c_uint;

/// `nvmlEnableState_t`.
const NVML_FEATURE_DISABLED: c_uint = 0;
const NVML_FEATURE_ENABLED: c_uint = 1;
/// `NVML_COMPUTEMODE_DEFAULT`.
const NVML_COMPUTEMODE_DEFAULT: c_uint = 0;
/// `NVML_DEVICE_MIG_DISABLE`.
const NVML_DEVICE_MIG_DISABLE: c_uint = 0;
/// `nvmlMemoryErrorType_t` and `nvmlEccCounterType_t` each have two values.
const MEMORY_ERROR_TYPES: c_uint = 2;
const ECC_COUNTER_TYPES: c_uint = 2;

/// Writes one state to two out-pointers (current and pending), both required.
unsafe fn current_and_pending(current: *mut c_uint, pending: *mut c_uint, value: c_uint) -> NvResult<()> {
    if current.is_null() || pending.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: both checked non-null; writable by nvml.h's contract.
    unsafe {
        out(current, value)?;
        out(pending, value)
    }
}

nvml_export! {
    nvmlDeviceGetComputeMode(dev: nvmlDevice_t, mode: *mut c_uint) {
        ready_device(dev)?;
        out(mode, NVML_COMPUTEMODE_DEFAULT)
    }
    nvmlDeviceGetPersistenceMode(dev: nvmlDevice_t, mode: *mut c_uint) {
        ready_device(dev)?;
        out(mode, NVML_FEATURE_ENABLED)
    }
    nvmlDeviceGetDisplayMode(dev: nvmlDevice_t, display: *mut c_uint) {
        ready_device(dev)?;
        out(display, NVML_FEATURE_DISABLED)
    }
    nvmlDeviceGetDisplayActive(dev: nvmlDevice_t, active: *mut c_uint) {
        ready_device(dev)?;
        out(active, NVML_FEATURE_DISABLED)
    }
    nvmlDeviceGetDriverModel_v2(dev: nvmlDevice_t, _current: *mut c_uint, _pending: *mut c_uint) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetDriverModel(dev: nvmlDevice_t, _current: *mut c_uint, _pending: *mut c_uint) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetEccMode(dev: nvmlDevice_t, current: *mut c_uint, pending: *mut c_uint) {
        ready_device(dev)?;
        current_and_pending(current, pending, NVML_FEATURE_ENABLED)
    }
    nvmlDeviceGetTotalEccErrors(dev: nvmlDevice_t, error_type: c_uint, counter_type: c_uint, count: *mut u64) {
        ready_device(dev)?;
        if error_type >= MEMORY_ERROR_TYPES || counter_type >= ECC_COUNTER_TYPES {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        out(count, 0)
    }
    nvmlDeviceGetMigMode(dev: nvmlDevice_t, current: *mut c_uint, pending: *mut c_uint) {
        ready_device(dev)?;
        current_and_pending(current, pending, NVML_DEVICE_MIG_DISABLE)
    }
    nvmlDeviceIsMigDeviceHandle(dev: nvmlDevice_t, is_mig_device: *mut c_uint) {
        ready_device(dev)?;
        out(is_mig_device, 0)
    }
    nvmlDeviceGetMaxMigDeviceCount(dev: nvmlDevice_t, count: *mut c_uint) {
        ready_device(dev)?;
        out(count, 0)
    }
    nvmlDeviceGetMigDeviceHandleByIndex(dev: nvmlDevice_t, _index: c_uint, _mig_device: *mut nvmlDevice_t) {
        ready_device(dev)?;
        // With MIG disabled there are no MIG devices: every index is out of range.
        Err(NVML_ERROR_INVALID_ARGUMENT)
    }
    nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig_device: nvmlDevice_t, _dev: *mut nvmlDevice_t) {
        ready_device(mig_device)?;
        // A full GPU's handle is not a MIG device handle.
        Err(NVML_ERROR_INVALID_ARGUMENT)
    }
    nvmlDeviceGetGpuInstanceId(dev: nvmlDevice_t, _id: *mut c_uint) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetComputeInstanceId(dev: nvmlDevice_t, _id: *mut c_uint) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
}
