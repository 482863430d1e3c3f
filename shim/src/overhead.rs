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
    let r = real::nvml_init();
    if r != abi::nvml::NVML_SUCCESS {
        info!("context overhead not measured: NVML is not available (nvmlInit_v2 returned {r})");
        return None;
    }
    let Some(handle) = real::nvml_device_by_uuid(&device.uuid) else {
        info!("context overhead not measured: NVML does not know device {}", device.ordinal);
        return None;
    };
    let pid = ledger::process::ProcessIdentity::current().pid;
    let measured = real::nvml_process_used_bytes(handle, pid).filter(|bytes| *bytes > 0);
    if measured.is_none() {
        info!("context overhead not measured: NVML lists no memory for process {pid}");
    }
    measured
}
