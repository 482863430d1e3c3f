//! Modes a device is in, as an H200 in a data-centre host reports them:
//! compute mode default, persistence on, ECC on with no errors and no
//! remapped rows (`SIMGPU_ECC=off`: a board without ECC, whose counters
//! are not supported), no page retirement (Hopper remaps rows instead of
//! retiring pages, so NVML answers `NVML_ERROR_NOT_SUPPORTED`), no display,
//! MIG enabled where `SIMGPU_MIG` partitions the device, else disabled.
//! The driver model is a Windows notion: on Linux NVML answers
//! `NVML_ERROR_NOT_SUPPORTED`, and so does simgpu.

use super::{handle, nvml_export, out, ready, ready_device, ready_slot, slot, NvResult};
use abi::nvml::*;
use std::ffi::c_uint;

/// `nvmlEnableState_t`.
const NVML_FEATURE_DISABLED: c_uint = 0;
const NVML_FEATURE_ENABLED: c_uint = 1;
/// `NVML_COMPUTEMODE_DEFAULT`.
const NVML_COMPUTEMODE_DEFAULT: c_uint = 0;
/// `NVML_DEVICE_MIG_DISABLE` and `NVML_DEVICE_MIG_ENABLE`.
const NVML_DEVICE_MIG_DISABLE: c_uint = 0;
const NVML_DEVICE_MIG_ENABLE: c_uint = 1;
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
        let (m, _) = ready_device(dev)?;
        current_and_pending(current, pending, if m.config.sensors.ecc { NVML_FEATURE_ENABLED } else { NVML_FEATURE_DISABLED })
    }
    nvmlDeviceGetTotalEccErrors(dev: nvmlDevice_t, error_type: c_uint, counter_type: c_uint, count: *mut u64) {
        let (m, _) = ready_device(dev)?;
        if error_type >= MEMORY_ERROR_TYPES || counter_type >= ECC_COUNTER_TYPES || count.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        if !m.config.sensors.ecc {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        out(count, 0)
    }
    nvmlDeviceGetRemappedRows(dev: nvmlDevice_t, corr_rows: *mut c_uint, unc_rows: *mut c_uint, is_pending: *mut c_uint, failure_occurred: *mut c_uint) {
        let (m, _) = ready_device(dev)?;
        if corr_rows.is_null() || unc_rows.is_null() || is_pending.is_null() || failure_occurred.is_null() {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        if !m.config.sensors.ecc {
            return Err(NVML_ERROR_NOT_SUPPORTED);
        }
        out(corr_rows, 0)?;
        out(unc_rows, 0)?;
        out(is_pending, 0)?;
        out(failure_occurred, 0)
    }
    nvmlDeviceGetRetiredPages(dev: nvmlDevice_t, _cause: c_uint, _page_count: *mut c_uint, _addresses: *mut u64) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetRetiredPages_v2(dev: nvmlDevice_t, _cause: c_uint, _page_count: *mut c_uint, _addresses: *mut u64, _timestamps: *mut u64) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetRetiredPagesPendingStatus(dev: nvmlDevice_t, _is_pending: *mut c_uint) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetMigMode(dev: nvmlDevice_t, current: *mut c_uint, pending: *mut c_uint) {
        let (m, i) = ready_device(dev)?;
        let mode = if m.topology.is_partitioned(i) { NVML_DEVICE_MIG_ENABLE } else { NVML_DEVICE_MIG_DISABLE };
        current_and_pending(current, pending, mode)
    }
    nvmlDeviceIsMigDeviceHandle(dev: nvmlDevice_t, is_mig_device: *mut c_uint) {
        let (m, s) = ready_slot(dev)?;
        out(is_mig_device, c_uint::from(m.topology.instance(s).is_some()))
    }
    nvmlDeviceGetMaxMigDeviceCount(dev: nvmlDevice_t, count: *mut c_uint) {
        // The most MIG devices that can exist under the device: zero when
        // MIG is disabled.
        let (m, i) = ready_device(dev)?;
        out(count, if m.topology.is_partitioned(i) { crate::mig::MAX_INSTANCES_PER_GPU } else { 0 })
    }
    nvmlDeviceGetMigDeviceHandleByIndex(dev: nvmlDevice_t, index: c_uint, mig_device: *mut nvmlDevice_t) {
        let (m, i) = ready_device(dev)?;
        // Without MIG, and past the most MIG devices the GPU can hold, every
        // index is out of range; within it, an index with no instance is
        // not found.
        if !m.topology.is_partitioned(i) || index >= crate::mig::MAX_INSTANCES_PER_GPU {
            return Err(NVML_ERROR_INVALID_ARGUMENT);
        }
        let slot = m.topology.instance_slot(i, index).ok_or(NVML_ERROR_NOT_FOUND)?;
        out(mig_device, handle(slot))
    }
    nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig_device: nvmlDevice_t, dev: *mut nvmlDevice_t) {
        let m = ready()?;
        // A full GPU's handle is not a MIG device handle.
        let instance = m.topology.instance(slot(m, mig_device)?).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
        out(dev, handle(instance.parent))
    }
    nvmlDeviceGetGpuInstanceId(dev: nvmlDevice_t, id: *mut c_uint) {
        let (m, s) = ready_slot(dev)?;
        let instance = m.topology.instance(s).ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        out(id, instance.gpu_instance_id())
    }
    nvmlDeviceGetComputeInstanceId(dev: nvmlDevice_t, id: *mut c_uint) {
        let (m, s) = ready_slot(dev)?;
        let instance = m.topology.instance(s).ok_or(NVML_ERROR_NOT_SUPPORTED)?;
        out(id, instance.compute_instance_id())
    }
}
