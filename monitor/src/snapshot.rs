//! One consistent view of a host: every tenant's ledger, and (when NVML is
//! there) what the driver says, joined by device UUID and host pid.
//!
//! `gpuslice status`, the monitor's `/metrics` and its violation checks all
//! read this view, so they never disagree.

use crate::host::{LockCache, LockCheck, PidResolver, SlotLock};
use crate::nvml::{any_uuid_bytes, uuid_string, GpuInfo};
use ledger::{Ledger, UNLIMITED};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// How often the monitor takes a snapshot and acts on it: its round. A
/// reader that needs a rate (`status`) looks twice, a round apart.
pub const ROUND: Duration = Duration::from_millis(250);

/// A device as the host sees it.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceView {
    /// Host index (NVML), or the first ledger index it was seen at without NVML.
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// Physical memory.
    pub memory_total_bytes: u64,
    /// Driver-reported memory in use (NVML only).
    pub memory_used_bytes: Option<u64>,
    /// Driver-reported busy share (NVML only).
    pub utilization_ratio: Option<f64>,
    /// A MIG device's parent (`GPU-…`; NVML only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_uuid: Option<String>,
    /// A MIG device's profile, such as `3g.71gb` (NVML only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mig_profile: Option<String>,
    /// Whether the monitor arbitrates its time (some tenant there has a
    /// compute setting); `None` when the monitor holds no grant page for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arbitrated: Option<bool>,
    /// Its sensors and error counters (NVML only; a device's, not a MIG
    /// device's); a reading the device lacks is left out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::nvml::DeviceHealth>,
}

/// A tenant on one device.
#[derive(Debug, Clone, Serialize)]
pub struct TenantDeviceView {
    /// Host index when known (NVML), else the ledger's index.
    pub index: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// Reserved in the ledger.
    pub memory_used_bytes: u64,
    /// The cap; `None` when there is none.
    pub memory_limit_bytes: Option<u64>,
    /// Who set the cap.
    pub policy_source: &'static str,
    /// Refused allocations.
    pub alloc_denied_total: u64,
    /// Measured context overhead.
    pub context_overhead_bytes: u64,
    /// The tenant's compute limit (hard ceiling on device time), as a
    /// ratio of the device; `None` when there is none.
    pub compute_limit_ratio: Option<f64>,
    /// Device time the tenant's shims charged against the limit, as a
    /// ratio of wall time over the monitor's last round (daemon only).
    pub compute_used_ratio: Option<f64>,
    /// The tenant's guaranteed share of device time; `None` when there is none.
    pub compute_share_ratio: Option<f64>,
    /// The tenant's priority on the device (higher first; 0 by default).
    pub compute_priority: i32,
    /// What the device's turns give the tenant now, as a ratio of device
    /// time: its share plus the spare time it is due, within its limit
    /// (daemon only; its limit, when it has one and takes no turns).
    pub compute_target_ratio: Option<f64>,
    /// Processes of the tenant here that the monitor does not arbitrate
    /// (no connection to it) although the tenant has a compute setting;
    /// `None` when that is not known (no monitor, or `status`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_unarbitrated_processes: Option<u64>,
    /// Whether the tenant holds a place in the monitor's turns on the
    /// device (daemon only; `None` where the monitor does not arbitrate
    /// it). A tenant without one was charged nothing, whatever its ledger
    /// says: its ledger's counters are its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_member: Option<bool>,
    /// Kernel launches on the device while it was limited.
    pub kernel_launches_total: u64,
    /// Device time charged against the limit, ns.
    pub compute_busy_ns_total: u64,
    /// Time launches were held back by the limit, ns.
    pub throttled_ns_total: u64,
    /// Live processes holding memory on the device.
    pub processes: u64,
    /// Memory the driver reports for the tenant's processes (NVML only).
    pub driver_memory_used_bytes: Option<u64>,
    /// SM utilization of the tenant's processes on the device, as a ratio
    /// of the device (NVML only: 0 where it sampled none of them). Like the
    /// two below, a rate of the moment: `status --json` leaves them out, so
    /// that two looks at an unchanged host read the same; `top` shows them.
    #[serde(skip)]
    pub sm_utilization_ratio: Option<f64>,
    /// CPU time of the tenant's live processes, in cores, as the monitor
    /// reads `/proc` (see `activity`); `None` until read.
    #[serde(skip)]
    pub cpu_cores: Option<f64>,
    /// Busy, starved or idle (see `activity`); `None` where it holds no
    /// memory here or a figure is not known.
    #[serde(skip)]
    pub activity: Option<crate::activity::Activity>,
}

/// A process of a tenant.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessView {
    /// Host pid: verified for a live process; for a dead one, as it recorded it.
    pub pid: u32,
    /// Pid inside its own PID namespace.
    pub ns_pid: u32,
    /// Ledger slot.
    pub slot: usize,
    /// Whether it still holds its slot lock.
    pub alive: bool,
    /// Whether the kernel confirms that this host pid holds the slot's lock
    /// (see `host`). Only such a process is ever acted on; a live slot whose
    /// named process does not hold its lock is a false claim and attributes
    /// nothing. A process that holds slots in several ledgers (only it can
    /// take their locks) is confirmed in each, and so judged under each.
    pub confirmed: bool,
    /// Reserved in the ledger, all devices.
    pub memory_used_bytes: u64,
    /// Driver-reported memory, all devices (NVML only).
    pub driver_memory_used_bytes: Option<u64>,
    /// SM utilization (NVML only, when sampled).
    pub sm_utilization_ratio: Option<f64>,
    #[serde(skip)]
    pub start_time_ticks: u64,
    /// Per device where the driver lists it (NVML only, live processes).
    #[serde(skip)]
    pub devices: Vec<ProcessDeviceView>,
}

/// A live process on one device: what its ledger slot holds there and what
/// the driver reports for it. The difference is what the shim did not
/// charge, such as a context whose overhead it could not measure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessDeviceView {
    /// `GPU-…`.
    pub uuid: String,
    /// Reserved in its slot.
    pub ledger_bytes: u64,
    /// Driver-reported.
    pub driver_bytes: u64,
}

/// One tenant.
#[derive(Debug, Clone, Serialize)]
pub struct TenantView {
    /// Its name.
    pub name: String,
    /// Devices it has used.
    pub devices: Vec<TenantDeviceView>,
    /// Its processes.
    pub processes: Vec<ProcessView>,
    /// Dead processes whose memory was reclaimed, ever.
    pub reclaimed_processes_total: u64,
}

/// A process using a device that no ledger knows: it bypassed the shim.
#[derive(Debug, Clone, Serialize)]
pub struct UntrackedView {
    /// Host device index.
    pub device: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// Host pid.
    pub pid: u32,
    /// Driver-reported memory.
    pub memory_used_bytes: u64,
}

/// The whole view.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Whether NVML answered.
    pub nvml: bool,
    /// Devices.
    pub devices: Vec<DeviceView>,
    /// Tenants, by name.
    pub tenants: Vec<TenantView>,
    /// Processes on the GPUs that no ledger knows (NVML only).
    pub untracked_processes: Vec<UntrackedView>,
}

/// Builds the view from open ledgers and, if available, NVML's answer.
/// `locks` remembers the lock checks of earlier rounds.
pub fn collect(ledgers: &[&Ledger], gpus: Option<&[GpuInfo]>, locks: &mut LockCache) -> Snapshot {
    let mut resolver = PidResolver::new();
    let host_index_of: HashMap<&str, u32> = gpus.unwrap_or_default().iter().map(|g| (g.uuid.as_str(), g.index)).collect();
    // A ledger names a device by its raw UUID; NVML names a MIG device
    // `MIG-…`, not `GPU-…`.
    let nvml_uuid_of: HashMap<[u8; 16], &str> =
        gpus.unwrap_or_default().iter().filter_map(|g| Some((any_uuid_bytes(&g.uuid)?, g.uuid.as_str()))).collect();
    let name_of = |raw: &[u8; 16]| nvml_uuid_of.get(raw).map_or_else(|| uuid_string(raw), |u| u.to_string());
    // Driver-reported memory and SM share by (uuid, pid) and by pid.
    let mut driver_by_uuid_pid: HashMap<(&str, u32), u64> = HashMap::new();
    let mut sm_by_pid: HashMap<u32, f64> = HashMap::new();
    let mut sm_by_uuid_pid: HashMap<(&str, u32), f64> = HashMap::new();
    for gpu in gpus.unwrap_or_default() {
        for p in &gpu.processes {
            *driver_by_uuid_pid.entry((gpu.uuid.as_str(), p.pid)).or_default() += p.used_bytes;
            if let Some(sm) = p.sm_ratio {
                *sm_by_pid.entry(p.pid).or_default() += sm;
                *sm_by_uuid_pid.entry((gpu.uuid.as_str(), p.pid)).or_default() += sm;
            }
        }
    }

    let mut devices: BTreeMap<String, DeviceView> = BTreeMap::new();
    for gpu in gpus.unwrap_or_default() {
        devices.insert(
            gpu.uuid.clone(),
            DeviceView {
                index: gpu.index,
                uuid: gpu.uuid.clone(),
                memory_total_bytes: gpu.total_bytes,
                memory_used_bytes: Some(gpu.used_bytes),
                utilization_ratio: gpu.utilization_ratio,
                parent_uuid: gpu.parent_uuid.clone(),
                mig_profile: gpu.mig_profile.clone(),
                arbitrated: None,
                health: gpu.health.clone(),
            },
        );
    }

    let mut tracked_pids: HashSet<u32> = HashSet::new();
    let mut tenants = Vec::new();
    for ledger in ledgers {
        let entries = ledger.devices();
        let uuid_of: HashMap<usize, String> = entries.iter().map(|d| (d.index, name_of(&d.uuid))).collect();
        for entry in &entries {
            let uuid = name_of(&entry.uuid);
            devices.entry(uuid.clone()).or_insert(DeviceView {
                index: entry.index as u32,
                uuid,
                memory_total_bytes: entry.total_memory_bytes,
                memory_used_bytes: None,
                utilization_ratio: None,
                parent_uuid: None,
                mig_profile: None,
                arbitrated: None,
                health: None,
            });
        }
        let slots = ledger.slots();
        let mut processes = Vec::new();
        let mut per_device_processes: HashMap<usize, u64> = HashMap::new();
        let mut driver_per_device: HashMap<usize, u64> = HashMap::new();
        let mut sm_per_device: HashMap<usize, f64> = HashMap::new();
        for slot in &slots {
            // A live process is named by its host pid once the kernel says it
            // holds the slot's lock (or cannot say); a dead one by the pid it
            // recorded (which may since have been reused).
            let found = if slot.alive { resolver.host_pid(slot) } else { None };
            let check = match (found, SlotLock::of(ledger, slot.index)) {
                (Some(pid), Some(lock)) => locks.check(pid, slot.start_time_ticks, &lock, slot.generation),
                (Some(_), None) => LockCheck::Unknown,
                (None, _) => LockCheck::DoesNot,
            };
            let resolved = found.filter(|_| check != LockCheck::DoesNot);
            if let Some(pid) = resolved {
                tracked_pids.insert(pid);
            }
            let pid = resolved.unwrap_or(slot.pid);
            let mut driver_total = None;
            let mut process_devices = Vec::new();
            if let (Some(_), Some(pid)) = (gpus, resolved) {
                let mut total = 0;
                for (index, uuid) in &uuid_of {
                    if let Some(sm) = sm_by_uuid_pid.get(&(uuid.as_str(), pid)) {
                        *sm_per_device.entry(*index).or_default() += sm;
                    }
                    if let Some(bytes) = driver_by_uuid_pid.get(&(uuid.as_str(), pid)) {
                        total += bytes;
                        *driver_per_device.entry(*index).or_default() += bytes;
                        let ledger_bytes = slot.bytes_per_device.iter().find(|(dev, _)| dev == index).map_or(0, |(_, b)| *b);
                        process_devices.push(ProcessDeviceView { uuid: uuid.clone(), ledger_bytes, driver_bytes: *bytes });
                    }
                }
                driver_total = Some(total);
            }
            if slot.alive {
                for (dev, _) in &slot.bytes_per_device {
                    *per_device_processes.entry(*dev).or_default() += 1;
                }
            }
            processes.push(ProcessView {
                pid,
                ns_pid: slot.ns_pid,
                slot: slot.index,
                alive: slot.alive,
                confirmed: check == LockCheck::Holds,
                memory_used_bytes: slot.total_bytes(),
                driver_memory_used_bytes: driver_total,
                sm_utilization_ratio: sm_by_pid.get(&pid).copied(),
                start_time_ticks: slot.start_time_ticks,
                devices: process_devices,
            });
        }
        let tenant_devices = entries
            .iter()
            .map(|entry| {
                let uuid = name_of(&entry.uuid);
                let limit = ledger.memory_limit_bytes(entry.index);
                TenantDeviceView {
                    index: host_index_of.get(uuid.as_str()).copied().unwrap_or(entry.index as u32),
                    uuid,
                    memory_used_bytes: ledger.used_bytes(entry.index),
                    memory_limit_bytes: (limit != UNLIMITED).then_some(limit),
                    policy_source: ledger.policy_source(entry.index).name(),
                    alloc_denied_total: ledger.alloc_denied_total(entry.index),
                    context_overhead_bytes: ledger.context_overhead_bytes(entry.index),
                    compute_limit_ratio: {
                        let ratio_e4 = ledger.compute_limit_ratio_e4(entry.index);
                        ledger::compute::is_limiting(ratio_e4).then(|| f64::from(ratio_e4) / 10_000.0)
                    },
                    compute_used_ratio: None,
                    compute_share_ratio: {
                        let share_e4 = ledger.compute_policy(entry.index).share_ratio_e4;
                        (share_e4 > 0).then(|| f64::from(share_e4) / 10_000.0)
                    },
                    compute_priority: ledger.compute_policy(entry.index).priority,
                    compute_target_ratio: None,
                    compute_unarbitrated_processes: None,
                    compute_member: None,
                    kernel_launches_total: ledger.launches_total(entry.index),
                    compute_busy_ns_total: ledger.busy_ns_total(entry.index),
                    throttled_ns_total: ledger.throttled_ns_total(entry.index),
                    processes: per_device_processes.get(&entry.index).copied().unwrap_or(0),
                    driver_memory_used_bytes: gpus.map(|_| driver_per_device.get(&entry.index).copied().unwrap_or(0)),
                    sm_utilization_ratio: gpus.map(|_| sm_per_device.get(&entry.index).copied().unwrap_or(0.0).min(1.0)),
                    cpu_cores: None,
                    activity: None,
                }
            })
            .collect();
        tenants.push(TenantView {
            name: ledger.tenant(),
            devices: tenant_devices,
            processes,
            reclaimed_processes_total: ledger.reclaimed_processes_total(),
        });
    }
    tenants.sort_by(|a, b| a.name.cmp(&b.name));

    let mut untracked_processes = Vec::new();
    for gpu in gpus.unwrap_or_default() {
        for p in &gpu.processes {
            if !tracked_pids.contains(&p.pid) {
                untracked_processes.push(UntrackedView {
                    device: gpu.index,
                    uuid: gpu.uuid.clone(),
                    pid: p.pid,
                    memory_used_bytes: p.used_bytes,
                });
            }
        }
    }
    let mut devices: Vec<DeviceView> = devices.into_values().collect();
    // By index, then in NVML's order (a MIG device after its parent, in
    // the parent's MIG index order), then by UUID.
    let nvml_order: HashMap<&str, usize> = gpus.unwrap_or_default().iter().enumerate().map(|(i, g)| (g.uuid.as_str(), i)).collect();
    devices.sort_by_key(|d| (d.index, nvml_order.get(d.uuid.as_str()).copied().unwrap_or(usize::MAX), d.uuid.clone()));
    Snapshot { nvml: gpus.is_some(), devices, tenants, untracked_processes }
}

/// Small views for the unit tests of the modules that judge snapshots.
#[cfg(test)]
pub mod fixtures {
    use super::*;

    /// Tenant `team-a` on device 0 (`GPU-0`) with these figures, nothing else set.
    pub fn tenant_device(used_bytes: u64, limit_bytes: Option<u64>, driver_bytes: Option<u64>) -> TenantDeviceView {
        TenantDeviceView {
            index: 0,
            uuid: "GPU-0".into(),
            memory_used_bytes: used_bytes,
            memory_limit_bytes: limit_bytes,
            policy_source: "unset",
            alloc_denied_total: 0,
            context_overhead_bytes: 0,
            compute_limit_ratio: None,
            compute_used_ratio: None,
            compute_share_ratio: None,
            compute_priority: 0,
            compute_target_ratio: None,
            compute_unarbitrated_processes: None,
            compute_member: None,
            kernel_launches_total: 0,
            compute_busy_ns_total: 0,
            throttled_ns_total: 0,
            processes: 1,
            driver_memory_used_bytes: driver_bytes,
            sm_utilization_ratio: None,
            cpu_cores: None,
            activity: None,
        }
    }

    /// A snapshot of one tenant, `team-a`, on one device.
    pub fn one_tenant(nvml: bool, device: TenantDeviceView, processes: Vec<ProcessView>) -> Snapshot {
        Snapshot {
            nvml,
            devices: vec![],
            tenants: vec![TenantView { name: "team-a".into(), devices: vec![device], processes, reclaimed_processes_total: 0 }],
            untracked_processes: vec![],
        }
    }
}
