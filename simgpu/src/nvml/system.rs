//! Library lifetime, error strings, versions, and finding devices: by index,
//! by UUID and by PCI bus id.

use super::{handle, nvml_export, out, ready, write_str, NvResult, INIT_COUNT};
use crate::driver::{machine, slot_uuid_string, DRIVER_VERSION, NVML_DRIVER_VERSION};
use abi::nvml::*;
use std::ffi::{c_char, c_int, c_uint, CStr};
use std::sync::atomic::Ordering::*;

fn init() -> NvResult<()> {
    machine().map_err(|_| NVML_ERROR_UNKNOWN)?;
    INIT_COUNT.fetch_add(1, AcqRel);
    Ok(())
}

nvml_export! {
    nvmlInit_v2() { init() }
    nvmlInit() { init() }
    nvmlInitWithFlags(flags: c_uint) {
        let _ = flags; // NO_GPUS / NO_ATTACH change nothing for simulated devices
        init()
    }
    nvmlShutdown() {
        INIT_COUNT.fetch_update(AcqRel, Acquire, |c| c.checked_sub(1)).map(|_| ()).map_err(|_| NVML_ERROR_UNINITIALIZED)
    }
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

nvml_export! {
    nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) {
        write_str(version, length, NVML_DRIVER_VERSION)
    }
    nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) {
        write_str(version, length, "13.580.65.06")
    }
    nvmlSystemGetCudaDriverVersion(version: *mut c_int) {
        out(version, DRIVER_VERSION)
    }
    nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) {
        out(version, DRIVER_VERSION)
    }
    nvmlDeviceGetCount_v2(count: *mut c_uint) {
        out(count, ready()?.state.device_count())
    }
    nvmlDeviceGetCount(count: *mut c_uint) {
        out(count, ready()?.state.device_count())
    }
    nvmlDeviceGetHandleByIndex_v2(index: c_uint, dev: *mut nvmlDevice_t) {
        handle_by_index(index, dev)
    }
    nvmlDeviceGetHandleByIndex(index: c_uint, dev: *mut nvmlDevice_t) {
        handle_by_index(index, dev)
    }
    nvmlDeviceGetHandleByUUID(uuid: *const c_char, dev: *mut nvmlDevice_t) {
        let m = ready()?;
        let wanted = c_string(uuid)?.to_ascii_lowercase();
        // A `MIG-…` UUID finds its MIG device, as on a real system.
        let index = (0..m.topology.slot_count())
            .find(|&i| slot_uuid_string(m, i).to_ascii_lowercase() == wanted)
            .ok_or(NVML_ERROR_NOT_FOUND)?;
        out(dev, handle(index))
    }
    nvmlDeviceGetHandleByPciBusId_v2(pci_bus_id: *const c_char, dev: *mut nvmlDevice_t) {
        handle_by_pci_bus_id(pci_bus_id, dev)
    }
    nvmlDeviceGetHandleByPciBusId(pci_bus_id: *const c_char, dev: *mut nvmlDevice_t) {
        handle_by_pci_bus_id(pci_bus_id, dev)
    }
}

unsafe fn handle_by_index(index: c_uint, dev: *mut nvmlDevice_t) -> NvResult<()> {
    let m = ready()?;
    if index >= m.state.device_count() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: out-pointer by nvml.h's contract.
    unsafe { out(dev, handle(index as usize)) }
}

unsafe fn handle_by_pci_bus_id(pci_bus_id: *const c_char, dev: *mut nvmlDevice_t) -> NvResult<()> {
    let m = ready()?;
    // SAFETY: a NUL-terminated string by nvml.h's contract.
    let text = unsafe { c_string(pci_bus_id) }?;
    let address = super::identity::PciAddress::parse(&text).ok_or(NVML_ERROR_INVALID_ARGUMENT)?;
    let index =
        (0..m.state.device_count() as usize).find(|&i| super::identity::PciAddress::of_device(i) == address).ok_or(NVML_ERROR_NOT_FOUND)?;
    // SAFETY: out-pointer by nvml.h's contract.
    unsafe { out(dev, handle(index)) }
}

/// A string argument; null is `NVML_ERROR_INVALID_ARGUMENT`.
unsafe fn c_string(p: *const c_char) -> NvResult<String> {
    if p.is_null() {
        return Err(NVML_ERROR_INVALID_ARGUMENT);
    }
    // SAFETY: non-null, NUL-terminated by nvml.h's contract.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}
