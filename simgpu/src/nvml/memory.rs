//! Device memory as NVML reports it (every process's allocations and
//! contexts, from the shared state) and the BAR1 aperture.

use super::spec::{bar1_total_bytes, BAR1_USED_BYTES};
use super::types::Bar1Memory;
use super::{nvml_export, out, ready_device, ready_slot, version_of};
use crate::driver::Machine;
use abi::nvml::*;

/// (total, used) bytes of slot `s`, after reclaiming dead processes: a
/// MIG device's own; a partitioned device's whole memory, of which its
/// instances use the sum of what each uses.
fn memory(m: &Machine, s: usize) -> (u64, u64) {
    m.state.reclaim_dead(None);
    let (total, used) = m.state.memory(s);
    let instances = m.topology.instance_slots(s);
    if instances.is_empty() {
        return (total, used);
    }
    (total, instances.iter().map(|&i| m.state.memory(i).1).sum::<u64>().min(total))
}

nvml_export! {
    nvmlDeviceGetMemoryInfo(dev: nvmlDevice_t, mem: *mut nvmlMemory_t) {
        let (m, s) = ready_slot(dev)?;
        let (total, used) = memory(m, s);
        out(mem, nvmlMemory_t { total, free: total.saturating_sub(used), used })
    }
    nvmlDeviceGetMemoryInfo_v2(dev: nvmlDevice_t, mem: *mut nvmlMemory_v2_t) {
        let (m, s) = ready_slot(dev)?;
        let version = version_of(mem)?;
        if version != nvmlMemory_v2 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let (total, used) = memory(m, s);
        out(mem, nvmlMemory_v2_t { version, total, reserved: 0, free: total.saturating_sub(used), used })
    }
    nvmlDeviceGetBAR1MemoryInfo(dev: nvmlDevice_t, bar1: *mut Bar1Memory) {
        let (m, i) = ready_device(dev)?;
        let total = bar1_total_bytes(m.state.memory(i).0);
        out(bar1, Bar1Memory { bar1Total: total, bar1Free: total - BAR1_USED_BYTES, bar1Used: BAR1_USED_BYTES })
    }
}
