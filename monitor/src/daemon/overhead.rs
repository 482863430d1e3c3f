//! Context overhead, measured by the monitor for shims that cannot measure it.
//!
//! The shim reserves each context's device memory in the ledger. It learns
//! that overhead by finding its own pid in NVML's process list, which fails
//! in a PID namespace with its own `/proc` (a container): NVML names host
//! pids. Such a process charges its contexts nothing, so its tenant holds
//! more than its ledger says.
//!
//! The monitor knows every process's host pid. For a tenant whose ledger has
//! no overhead for a device, it takes each live process's driver-reported
//! memory there minus what its slot holds there; where a process shows the
//! same two figures in two rounds in a row (no allocation in flight), the
//! difference is what its contexts cost. The smallest such difference among
//! the tenant's processes (most likely a process with one context) is
//! written into that tenant's ledger, and the tenant's later contexts are
//! charged for it. A process with several contexts overstates it: the tenant
//! then gets a little less memory, never more.
//!
//! Each tenant's figure comes from its own processes only and goes into its
//! own ledger only, so no tenant can change what another is charged.
//!
//! The ledger's figure is the tenant's to write, so the bypass check never
//! takes it as it is: the overhead it tolerates past a cap is at most what
//! the monitor measured itself for that tenant and device, or
//! [`MAX_CONTEXT_OVERHEAD_BYTES`] where it has measured nothing
//! ([`OverheadState::tolerated_bytes`]).

/// The most context overhead the bypass check believes a ledger that the
/// monitor could not check: above any single context on current data-centre
/// GPUs (a few hundred MiB), and a bound on what a tenant lying about its
/// overhead can hold past its cap unflagged.
pub const MAX_CONTEXT_OVERHEAD_BYTES: u64 = 1 << 30;

use super::ledgers::LedgerSet;
use super::log;
use crate::nvml::uuid_string;
use crate::snapshot::Snapshot;
use std::collections::HashMap;

/// (tenant, uuid, host pid, start time).
type ProcessKey = (String, String, u32, u64);

/// (driver bytes, ledger bytes) of one process on one device in one round.
type Figures = (u64, u64);

/// The overhead found for each (tenant, uuid).
type Found = HashMap<(String, String), u64>;

/// The figures of the previous round, to tell stable ones.
#[derive(Default)]
pub struct OverheadState {
    /// (driver bytes, ledger bytes) by process and device.
    last: HashMap<ProcessKey, Figures>,
    /// What the monitor measured itself, by (tenant, uuid): the smallest
    /// figure seen.
    measured: Found,
}

/// The overhead to publish for each (tenant, uuid) that has none, from this
/// round's figures and the last round's.
fn measure(snapshot: &Snapshot, last: &HashMap<ProcessKey, Figures>) -> (Found, HashMap<ProcessKey, Figures>) {
    let total_of: HashMap<&str, u64> = snapshot.devices.iter().map(|d| (d.uuid.as_str(), d.memory_total_bytes)).collect();
    let mut now = HashMap::new();
    let mut found: Found = HashMap::new();
    for tenant in &snapshot.tenants {
        for device in tenant.devices.iter().filter(|d| d.context_overhead_bytes == 0) {
            for p in tenant.processes.iter().filter(|p| p.alive) {
                let Some(d) = p.devices.iter().find(|d| d.uuid == device.uuid) else { continue };
                let key = (tenant.name.clone(), d.uuid.clone(), p.pid, p.start_time_ticks);
                let figures = (d.driver_bytes, d.ledger_bytes);
                now.insert(key.clone(), figures);
                let difference = d.driver_bytes.saturating_sub(d.ledger_bytes);
                // Half the device is far past any context's cost: something
                // else (memory that bypassed the shim) is in that figure.
                let plausible = total_of.get(d.uuid.as_str()).is_some_and(|total| difference <= total / 2);
                if last.get(&key) == Some(&figures) && difference > 0 && plausible {
                    let entry = found.entry((tenant.name.clone(), device.uuid.clone())).or_insert(difference);
                    *entry = (*entry).min(difference);
                }
            }
        }
    }
    (found, now)
}

impl OverheadState {
    /// The context overhead the bypass check tolerates for `tenant` on
    /// device `uuid` when its ledger claims `claimed_bytes`.
    pub fn tolerated_bytes(&self, tenant: &str, uuid: &str, claimed_bytes: u64) -> u64 {
        let bound = self.measured.get(&(tenant.to_string(), uuid.to_string())).copied();
        claimed_bytes.min(bound.unwrap_or(MAX_CONTEXT_OVERHEAD_BYTES))
    }

    /// Measures, and publishes into the ledgers that have no figure yet.
    pub fn publish(&mut self, snapshot: &Snapshot, ledgers: &LedgerSet) {
        if !snapshot.nvml {
            self.last.clear();
            return;
        }
        let (found, now) = measure(snapshot, &self.last);
        self.last = now;
        for (key, bytes) in &found {
            let entry = self.measured.entry(key.clone()).or_insert(*bytes);
            *entry = (*entry).min(*bytes);
        }
        for ((tenant, uuid), bytes) in found {
            let Some(ledger) = ledgers.ledgers().find(|l| l.tenant() == tenant) else { continue };
            let Some(entry) = ledger.devices().into_iter().find(|e| uuid_string(&e.uuid) == uuid) else { continue };
            if ledger.context_overhead_bytes(entry.index) != 0 {
                continue;
            }
            ledger.set_context_overhead_bytes(entry.index, bytes);
            log::info(&format!(
                "tenant {tenant} device {uuid}: context overhead measured at {} ({bytes} bytes) from the driver's \
                 figures; its processes' new contexts are charged for it",
                crate::text::human_bytes(bytes)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{fixtures, DeviceView, ProcessDeviceView, ProcessView, TenantDeviceView};

    fn process(pid: u32, ledger_bytes: u64, driver_bytes: u64) -> ProcessView {
        ProcessView {
            pid,
            ns_pid: 1,
            slot: pid as usize,
            alive: true,
            confirmed: true,
            memory_used_bytes: ledger_bytes,
            driver_memory_used_bytes: Some(driver_bytes),
            sm_utilization_ratio: None,
            start_time_ticks: 7,
            devices: vec![ProcessDeviceView { uuid: "GPU-0".into(), ledger_bytes, driver_bytes }],
        }
    }

    fn snapshot(overhead_bytes: u64, processes: Vec<ProcessView>) -> Snapshot {
        let device = TenantDeviceView { context_overhead_bytes: overhead_bytes, ..fixtures::tenant_device(0, None, Some(0)) };
        let mut snapshot = fixtures::one_tenant(true, device, processes);
        snapshot.devices = vec![DeviceView {
            index: 0,
            uuid: "GPU-0".into(),
            memory_total_bytes: 1000,
            memory_used_bytes: Some(0),
            utilization_ratio: None,
            parent_uuid: None,
            mig_profile: None,
            arbitrated: None,
            health: None,
        }];
        snapshot
    }

    fn key() -> (String, String) {
        ("team-a".into(), "GPU-0".into())
    }

    #[test]
    fn the_tolerated_overhead_is_the_ledgers_bounded_by_what_the_monitor_measured() {
        let mut state = OverheadState::default();
        let huge = 1u64 << 60;
        assert_eq!(state.tolerated_bytes("team-a", "GPU-0", huge), MAX_CONTEXT_OVERHEAD_BYTES);
        assert_eq!(state.tolerated_bytes("team-a", "GPU-0", 64), 64);
        state.measured.insert(key(), 80);
        assert_eq!(state.tolerated_bytes("team-a", "GPU-0", huge), 80);
        assert_eq!(state.tolerated_bytes("team-a", "GPU-0", 64), 64);
        assert_eq!(state.tolerated_bytes("team-b", "GPU-0", huge), MAX_CONTEXT_OVERHEAD_BYTES);
    }

    #[test]
    fn a_stable_difference_is_measured_the_smallest_wins() {
        let snap = snapshot(0, vec![process(10, 100, 164), process(11, 50, 178)]);
        let (found, last) = measure(&snap, &HashMap::new());
        assert!(found.is_empty(), "one round is not enough");
        let (found, _) = measure(&snap, &last);
        assert_eq!(found.get(&key()), Some(&64));
    }

    #[test]
    fn moving_figures_a_known_overhead_and_implausible_ones_are_not_measured() {
        let (_, last) = measure(&snapshot(0, vec![process(10, 100, 164)]), &HashMap::new());
        // An allocation in flight: the figures moved.
        let (found, _) = measure(&snapshot(0, vec![process(10, 200, 264)]), &last);
        assert!(found.is_empty());
        // The ledger already has a figure.
        let snap = snapshot(64, vec![process(10, 100, 164)]);
        let (_, last) = measure(&snap, &HashMap::new());
        assert!(measure(&snap, &last).0.is_empty());
        // More than half the device: not a context.
        let snap = snapshot(0, vec![process(10, 100, 700)]);
        let (_, last) = measure(&snap, &HashMap::new());
        assert!(measure(&snap, &last).0.is_empty());
        // The ledger charged everything the driver sees.
        let snap = snapshot(0, vec![process(10, 164, 164)]);
        let (_, last) = measure(&snap, &HashMap::new());
        assert!(measure(&snap, &last).0.is_empty());
    }
}
