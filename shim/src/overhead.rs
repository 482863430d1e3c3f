//! Measuring what one context costs on a device.
//!
//! Right after the process's first context on a device is created, NVML's
//! per-process figure (`nvmlDeviceGetComputeRunningProcesses_v3`) for this
//! process is exactly the context's memory: nothing else has been allocated
//! there yet. NVML is loaded lazily, only for this. Without NVML, or when it
//! does not list this process (a PID namespace it cannot see into), the
//! overhead stays unmeasured and contexts are not charged; the monitor's
//! bypass check still sees them.

use crate::accounting::Device;
use crate::real;

/// The memory NVML reports for this process on `device`, if it can tell.
pub fn measure(device: &Device) -> Option<u64> {
    if real::nvml_init() != abi::nvml::NVML_SUCCESS {
        return None;
    }
    let handle = real::nvml_device_by_uuid(&device.uuid).ok()?;
    let pid = ledger::process::ProcessIdentity::current().pid;
    real::nvml_process_used_bytes(handle, pid).filter(|bytes| *bytes > 0)
}
