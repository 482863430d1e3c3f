//! The device time each tenant's shims charged against its compute limit,
//! as a ratio of wall time over the last round.
//!
//! The shims add what each kernel took on the device (its two events'
//! elapsed time) to a counter in the tenant's ledger; the monitor reads the
//! counter every round and divides its growth by the round's wall time.
//! The counter is the tenant's to write, so the figure is for watching, not
//! for judging.

use super::turns::TurnTables;
use crate::snapshot::Snapshot;
use std::collections::HashMap;
use std::time::Instant;

/// The counters of the last round, by (tenant, uuid).
#[derive(Default)]
pub struct ComputeState {
    last: HashMap<(String, String), (u64, Instant)>,
}

impl ComputeState {
    /// Sets each limited (or ever charged) tenant device's
    /// `compute_used_ratio` from its growth since the last round.
    pub fn fill(&mut self, snapshot: &mut Snapshot, now: Instant) {
        let mut next = HashMap::new();
        for tenant in &mut snapshot.tenants {
            for device in &mut tenant.devices {
                if device.compute_limit_ratio.is_none() && device.compute_share_ratio.is_none() && device.compute_busy_ns_total == 0 {
                    continue;
                }
                let key = (tenant.name.clone(), device.uuid.clone());
                if let Some((busy_ns, at)) = self.last.get(&key) {
                    let wall_ns = now.duration_since(*at).as_nanos() as f64;
                    let grown_ns = device.compute_busy_ns_total.checked_sub(*busy_ns);
                    if let (true, Some(grown_ns)) = (wall_ns > 0.0, grown_ns) {
                        device.compute_used_ratio = Some(grown_ns as f64 / wall_ns);
                    }
                }
                next.insert(key, (device.compute_busy_ns_total, now));
            }
        }
        self.last = next;
    }
}

/// Sets each tenant device's `compute_target_ratio`: the weight the
/// device's turn table gave the tenant while it is active there, else its
/// limit or, failing that, its share (what it is due when it comes back).
pub fn fill_targets(snapshot: &mut Snapshot, tables: &TurnTables) {
    fill_targets_from(snapshot, |uuid| tables.members(uuid));
}

/// [`fill_targets`] with each device's members from `members_of` (the
/// monitor's own tables, or those `gpuslice status` asks the monitor for).
pub fn fill_targets_from(snapshot: &mut Snapshot, mut members_of: impl FnMut(&[u8; 16]) -> Vec<ledger::turns::MemberView>) {
    let mut members: HashMap<String, Vec<ledger::turns::MemberView>> = HashMap::new();
    for tenant in &mut snapshot.tenants {
        let key = ledger::turns::tenant_key(&tenant.name);
        for device in &mut tenant.devices {
            let table = members
                .entry(device.uuid.clone())
                .or_insert_with(|| crate::nvml::uuid_bytes(&device.uuid).map(|uuid| members_of(&uuid)).unwrap_or_default());
            // The table is the tenants' to write: a weight past the whole
            // device is garbage, and shown as the whole device at most.
            let turns = table
                .iter()
                .find(|m| m.key == key && m.active)
                .map(|m| f64::from(m.weight_e4.min(ledger::compute::WHOLE_DEVICE_RATIO_E4)) / 10_000.0);
            device.compute_target_ratio = turns.or(device.compute_limit_ratio).or(device.compute_share_ratio);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{fixtures, TenantDeviceView};
    use std::time::Duration;

    fn snapshot(limit: Option<f64>, busy_ns: u64) -> Snapshot {
        let device = fixtures::tenant_device(0, None, None);
        fixtures::one_tenant(true, TenantDeviceView { compute_limit_ratio: limit, compute_busy_ns_total: busy_ns, ..device }, vec![])
    }

    #[test]
    fn the_used_ratio_is_the_growth_of_charged_time_over_wall_time() {
        let mut state = ComputeState::default();
        let t0 = Instant::now();
        let mut first = snapshot(Some(0.3), 1_000_000_000);
        state.fill(&mut first, t0);
        assert_eq!(first.tenants[0].devices[0].compute_used_ratio, None, "one round says nothing");
        let mut second = snapshot(Some(0.3), 1_075_000_000);
        state.fill(&mut second, t0 + Duration::from_millis(250));
        let used = second.tenants[0].devices[0].compute_used_ratio.unwrap();
        assert!((used - 0.3).abs() < 1e-9, "{used}");
        // A counter that went backwards (a new ledger) says nothing.
        let mut third = snapshot(Some(0.3), 5);
        state.fill(&mut third, t0 + Duration::from_millis(500));
        assert_eq!(third.tenants[0].devices[0].compute_used_ratio, None);
        // No limit and nothing ever charged: no figure.
        let mut idle = snapshot(None, 0);
        state.fill(&mut idle, t0 + Duration::from_millis(750));
        assert_eq!(idle.tenants[0].devices[0].compute_used_ratio, None);
    }
}
