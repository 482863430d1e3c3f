//! Compute figures per tenant and device, as the monitor's arbiter holds
//! them and its grant pages show them: each member's settings ([`Claim`]),
//! target and charged device time ([`MemberView`], [`DeviceReport`]),
//! joined into a snapshot by [`fill_from_reports`]; and the used ratio,
//! the growth of charged time over wall time between two looks
//! ([`ComputeState`]).
//!
//! Where the arbiter knows a tenant on a device, every figure is the
//! monitor's own. Elsewhere (a tenant that runs without the monitor's
//! arbitration, under a limit its own processes keep) the charged time is
//! the counter the tenant's processes write in its ledger: for watching,
//! not for judging.
//!
//! The monitor fills these from its arbiter; `status`, `top` and the demo
//! read a monitor's grant pages ([`DeviceReport::from_page`]).

use crate::nvml::any_uuid_bytes;
use crate::snapshot::Snapshot;
use ledger::compute::WHOLE_DEVICE_RATIO_E4;
use ledger::grants::{member_state, tenant_key, GrantPage};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// One member's compute settings, as the monitor holds them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Claim {
    pub share_e4: u32,
    pub limit_e4: u32,
    pub priority: i32,
}

impl Claim {
    /// Whether this is any compute setting at all.
    pub fn any(&self) -> bool {
        self.share_e4 > 0 || ledger::compute::is_limiting(self.limit_e4) || self.priority != 0
    }
    /// Whether the limit holds the member under the whole device.
    pub fn limited(&self) -> bool {
        ledger::compute::is_limiting(self.limit_e4)
    }
}

/// A member as metrics and `status` show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemberView {
    pub key: u64,
    pub claim: Claim,
    pub weight_e4: u32,
    pub served_ns_total: u64,
    pub active: bool,
    pub holds: bool,
    pub processes: u32,
}

impl MemberView {
    /// The members of a grant page, read by whoever holds it (a monitor's
    /// or a read-only one).
    pub fn of_page(page: &GrantPage) -> Vec<MemberView> {
        let holder = page.grant().code();
        page.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.key.load(Ordering::Acquire) != 0)
            .map(|(i, m)| {
                let state = m.state.load(Ordering::Relaxed);
                MemberView {
                    key: m.key.load(Ordering::Relaxed),
                    claim: Claim {
                        share_e4: m.share_e4.load(Ordering::Relaxed),
                        limit_e4: m.limit_e4.load(Ordering::Relaxed),
                        priority: m.priority.load(Ordering::Relaxed),
                    },
                    weight_e4: m.weight_e4.load(Ordering::Relaxed),
                    served_ns_total: m.served_ns_total.load(Ordering::Relaxed),
                    active: state == member_state::WAITING || state == member_state::HOLDING,
                    holds: holder == i as u32 + 1,
                    processes: m.processes.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

/// One device as the arbiter last saw it.
#[derive(Debug, Clone, Default)]
pub struct DeviceReport {
    pub arbitrated: bool,
    pub members: Vec<(String, MemberView)>,
    /// Connected processes: (tenant, host pid); known to the monitor only
    /// (`processes_known`).
    pub processes: Vec<(String, u32)>,
    pub processes_known: bool,
    /// Processes that were late to finish their work after a revoke, ever.
    pub late_total: u64,
    /// The last late processes: (tenant, host pid).
    pub late: Vec<(String, u32)>,
}

impl DeviceReport {
    /// A device's report from its page, naming the members among `tenants`.
    pub fn from_page(page: &ledger::grants::GrantPage, tenants: &[String]) -> DeviceReport {
        let name = |key: u64| tenants.iter().find(|t| tenant_key(t) == key).cloned().unwrap_or_default();
        DeviceReport {
            arbitrated: page.header.arbitrated.load(std::sync::atomic::Ordering::Relaxed) != 0,
            members: MemberView::of_page(page).into_iter().map(|m| (name(m.key), m)).collect(),
            ..DeviceReport::default()
        }
    }
}

/// Whether `device`, a tenant's on one device of `snapshot`, has a share
/// or priority that nothing enforces: no monitor arbitrates that device
/// (no grant page for it), so its processes share it as the hardware does.
/// A limit is still kept, by the tenant's own processes.
pub fn share_unenforced(snapshot: &Snapshot, device: &crate::snapshot::TenantDeviceView) -> bool {
    let has_share_or_priority = device.compute_share_ratio.is_some() || device.compute_priority != 0;
    has_share_or_priority && snapshot.devices.iter().any(|d| d.uuid == device.uuid && d.arbitrated.is_none())
}

/// One line per device whose shares or priorities nothing enforces (see
/// [`share_unenforced`]), naming the tenants, for `status` and `top`.
pub fn unenforced_notes(snapshot: &Snapshot) -> Vec<String> {
    let mut notes = Vec::new();
    for d in &snapshot.devices {
        let tenants: Vec<&str> = snapshot
            .tenants
            .iter()
            .filter(|t| t.devices.iter().any(|td| td.uuid == d.uuid && share_unenforced(snapshot, td)))
            .map(|t| t.name.as_str())
            .collect();
        if !tenants.is_empty() {
            notes.push(format!(
                "device {}: no monitor arbitrates its time, so the shares and priorities of {} are NOT enforced there: \
                 its processes share it as the hardware does (start the monitor: `gpuslice monitor`)",
                d.index,
                tenants.join(", ")
            ));
        }
    }
    notes
}

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

/// Fills each tenant device that `report_of` (the monitor's arbiter, or a
/// device's grant page) knows with the arbiter's figures, never the
/// tenant's: its settings (configured or pinned), its target (its weight
/// while active, else its limit or share), and the device time it was
/// charged (`compute_busy_ns_total`, from which the used ratio comes).
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
                if report.as_ref().is_some_and(|r| r.processes_known) {
                    // The monitor's own figures say it holds no place in the
                    // turns: it was charged nothing. Its ledger's counter is
                    // its own writing, and never stands in for a charge.
                    device.compute_member = Some(false);
                    device.compute_busy_ns_total = 0;
                }
                continue;
            };
            if report.as_ref().is_some_and(|r| r.processes_known) {
                device.compute_member = Some(true);
            }
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
