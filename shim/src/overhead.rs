//! Measuring what one context costs on a device.
//!
//! Two ways, chosen by whether NVML's process ids mean this process:
//! - NVML lists processes by the pid of the initial PID namespace. When this
//!   process is in that namespace (`/proc/self/ns/pid` is
//!   `PROC_PID_INIT_INO`), or its `/proc` shows the pids of more than one
//!   namespace level (`NSpid:` with several fields, the first one the outer
//!   pid), the pid it knows itself by is NVML's, and right after its first
//!   context on a device NVML's figure for it is exactly that context.
//! - Otherwise (a container with its own PID namespace and `/proc`), its pid
//!   means nothing to NVML, or another process. Then the overhead is the
//!   growth of the device's used memory (NVML's device memory info) across
//!   the context's creation, bounded to a quarter of the device so that
//!   another process's allocation at that moment cannot pass for it.
//!
//! NVML is loaded lazily, only for this. Without NVML the overhead stays
//! unmeasured and contexts are not charged; the monitor's bypass check still
//! sees them. A tenant's recorded overhead is always preferred to a new
//! measurement (see `accounting::contexts`).

//!
//! Who this process is comes from what it read of `/proc/self` when it
//! claimed its slot ([`ledger::process::SelfProcess`]): nothing here reads
//! `/proc` again.

use crate::accounting::Device;
use crate::real;
use abi::nvml::nvmlDevice_t;
use ledger::process::{SelfProcess, PROC_PID_INIT_INO};

/// What was known before the context was created.
pub struct Probe {
    handle: nvmlDevice_t,
    /// NVML's used bytes of the device before, when pids cannot be matched.
    used_before_bytes: Option<u64>,
    total_bytes: u64,
}

/// Whether NVML's pids name this process as it names itself.
fn pid_is_nvmls(me: &SelfProcess) -> bool {
    me.identity.pidns_inode == PROC_PID_INIT_INO || me.nspid_levels > 1
}

/// Call before creating the process's first context on `device`.
pub fn prepare(me: &SelfProcess, device: &Device) -> Option<Probe> {
    let r = real::nvml_init();
    if r != abi::nvml::NVML_SUCCESS {
        info!("context overhead not measured: NVML is not available (nvmlInit_v2 returned {r})");
        return None;
    }
    let Some(handle) = real::nvml_device_by_uuid(&device.uuid) else {
        info!("context overhead not measured: NVML does not know device {}", device.ordinal);
        return None;
    };
    if pid_is_nvmls(me) {
        return Some(Probe { handle, used_before_bytes: None, total_bytes: 0 });
    }
    let (total_bytes, used_bytes) = real::nvml_device_memory_bytes(handle)?;
    Some(Probe { handle, used_before_bytes: Some(used_bytes), total_bytes })
}

/// Call right after the context was created: its overhead, if it can tell.
pub fn measure(me: &SelfProcess, device: &Device, probe: Probe) -> Option<u64> {
    let measured = match probe.used_before_bytes {
        None => {
            let pid = me.identity.pid;
            let found = real::nvml_process_used_bytes(probe.handle, pid);
            if found.is_none() {
                info!("context overhead not measured: NVML lists no memory for process {pid}");
            }
            found
        }
        Some(before) => {
            let (_, after) = real::nvml_device_memory_bytes(probe.handle)?;
            let grown = after.saturating_sub(before);
            if grown > probe.total_bytes / 4 {
                info!("context overhead not measured on device {}: the device grew by {grown} bytes meanwhile", device.ordinal);
                None
            } else {
                Some(grown)
            }
        }
    };
    measured.filter(|bytes| *bytes > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::process::ProcessIdentity;

    fn process(pidns_inode: u64, nspid_levels: usize) -> SelfProcess {
        SelfProcess { identity: ProcessIdentity { pid: 7, ns_pid: 7, pidns_inode, start_time_ticks: 1 }, nspid_levels }
    }

    #[test]
    fn nvml_knows_the_pid_in_the_initial_namespace_or_an_outer_proc() {
        assert!(pid_is_nvmls(&process(PROC_PID_INIT_INO, 1)));
        assert!(pid_is_nvmls(&process(4_026_532_000, 2)));
        assert!(!pid_is_nvmls(&process(4_026_532_000, 1)));
        assert!(!pid_is_nvmls(&process(0, 0)));
    }
}
