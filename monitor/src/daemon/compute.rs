//! Compute figures per tenant and device: the arbiter's settings, targets
//! and charged device time ([`fill_from_arbiter`]), and the used ratio, the
//! growth of charged time over wall time each round ([`ComputeState`]).
//!
//! Where the arbiter knows a tenant on a device, every figure is the
//! monitor's own. Elsewhere (a tenant that runs without the monitor's
//! arbitration, under a limit its own processes keep) the charged time is
//! the counter the tenant's processes write in its ledger: for watching,
//! not for judging.

use super::arbiter::{sched::Claim, DeviceReport, Shared};
use crate::config::Config;
use crate::nvml::{any_uuid_bytes, GpuInfo};
use crate::snapshot::Snapshot;
use ledger::compute::WHOLE_DEVICE_RATIO_E4;
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

/// Hands the arbiter what this round learnt: the devices NVML lists (kept
/// as they were while NVML fails), the configuration's compute settings by
/// tenant and device, and the tenants' directories.
pub fn share_with_arbiter(shared: &Shared, config: &Config, dir: &std::path::Path, gpus: Option<&[GpuInfo]>, with_nvml: bool) {
    if let Some(gpus) = gpus {
        let uuids = gpus.iter().filter_map(|g| any_uuid_bytes(&g.uuid)).collect();
        *shared.nvml_uuids.lock().unwrap_or_else(|e| e.into_inner()) = Some(uuids);
    } else if !with_nvml {
        *shared.nvml_uuids.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    let known: Vec<[u8; 16]> = shared.nvml_uuids.lock().unwrap_or_else(|e| e.into_inner()).iter().flatten().copied().collect::<Vec<_>>();
    let index_of = |uuid: &[u8; 16]| gpus.and_then(|g| g.iter().find(|d| any_uuid_bytes(&d.uuid).as_ref() == Some(uuid)).map(|d| d.index));
    let mut configured = HashMap::new();
    for (tenant, tenant_config) in &config.tenants {
        let mut devices = HashMap::new();
        for uuid in known.iter().chain(shared.views.lock().unwrap_or_else(|e| e.into_inner()).keys()) {
            let text = gpus
                .and_then(|g| g.iter().find(|d| any_uuid_bytes(&d.uuid).as_ref() == Some(uuid)).map(|d| d.uuid.clone()))
                .unwrap_or_else(|| crate::nvml::uuid_string(uuid));
            if let Some(p) = tenant_config.compute_for(&text, index_of(uuid)) {
                devices.insert(*uuid, Claim { share_e4: p.share_ratio_e4, limit_e4: p.limit_ratio_e4, priority: p.priority });
            }
        }
        configured.insert(tenant.clone(), devices);
    }
    *shared.configured.lock().unwrap_or_else(|e| e.into_inner()) = configured;
    let mut ceilings = shared.priority_ceilings.lock().unwrap_or_else(|e| e.into_inner());
    if *ceilings != config.priority_ceilings {
        *ceilings = config.priority_ceilings.clone();
    }
    drop(ceilings);
    let tenants = crate::discovery::tenants_dir(dir);
    let dirs: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&tenants)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
        .collect();
    *shared.tenant_dirs.lock().unwrap_or_else(|e| e.into_inner()) = dirs;
}

/// Fills each tenant device the arbiter knows with the arbiter's figures,
/// never the tenant's: its settings (configured or pinned), its target
/// (its weight while active, else its limit or share), and the device time
/// it was charged (`compute_busy_ns_total`, from which the used ratio comes).
pub fn fill_from_arbiter(snapshot: &mut Snapshot, shared: &Shared) {
    fill_from_reports(snapshot, |uuid| shared.report(uuid));
}

/// [`fill_from_arbiter`] with each device's report from `report_of`.
pub fn fill_from_reports(snapshot: &mut Snapshot, mut report_of: impl FnMut(&[u8; 16]) -> Option<DeviceReport>) {
    let mut reports: HashMap<String, Option<DeviceReport>> = HashMap::new();
    for device in &mut snapshot.devices {
        let report = reports.entry(device.uuid.clone()).or_insert_with(|| any_uuid_bytes(&device.uuid).and_then(|u| report_of(&u)));
        device.arbitrated = report.as_ref().map(|r| r.arbitrated);
    }
    for tenant in &mut snapshot.tenants {
        for device in &mut tenant.devices {
            let report = reports.entry(device.uuid.clone()).or_insert_with(|| any_uuid_bytes(&device.uuid).and_then(|u| report_of(&u)));
            if let Some(report) = report.as_ref().filter(|r| r.processes_known) {
                // Processes of a tenant with a compute setting that did not
                // join the monitor: not arbitrated (no monitor when they
                // started, or they cannot reach it), and said so.
                let has_setting =
                    device.compute_share_ratio.is_some() || device.compute_limit_ratio.is_some() || device.compute_priority != 0;
                let joined = |pid: u32| report.processes.iter().any(|(t, p)| *t == tenant.name && *p == pid);
                let here = tenant.processes.iter().filter(|p| p.alive && p.confirmed && p.devices.iter().any(|d| d.uuid == device.uuid));
                let missing = here.filter(|p| !joined(p.pid)).count() as u64;
                device.compute_unarbitrated_processes = has_setting.then_some(missing);
            }
            let Some(member) = report.as_ref().and_then(|r| r.members.iter().find(|(name, _)| *name == tenant.name)).map(|(_, m)| *m)
            else {
                // Not on the device now: what it is due when it comes back.
                device.compute_target_ratio = device.compute_limit_ratio.or(device.compute_share_ratio);
                continue;
            };
            let ratio = |e4: u32| (e4 > 0).then(|| f64::from(e4.min(WHOLE_DEVICE_RATIO_E4)) / 10_000.0);
            device.compute_share_ratio = ratio(member.claim.share_e4);
            device.compute_limit_ratio = ratio(member.claim.limit_e4).filter(|_| ledger::compute::is_limiting(member.claim.limit_e4));
            device.compute_priority = member.claim.priority;
            device.compute_busy_ns_total = member.served_ns_total;
            device.compute_target_ratio =
                if member.active { ratio(member.weight_e4) } else { device.compute_limit_ratio.or(device.compute_share_ratio) };
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
