//! Bypass detection: memory the ledgers do not account for.
//!
//! Two kinds, both from NVML:
//! - an *untracked process*: it uses GPU memory and no ledger slot maps to
//!   its host pid (it did not load the shim);
//! - a tenant *over its cap*: the driver reports more memory for its
//!   processes than its cap plus one context's overhead (the shim charges
//!   contexts too, so anything past that escaped the shim).
//!
//! A finding must hold for two rounds in a row before it counts, so that a
//! process caught between creating its context and claiming its slot is
//! not reported. Each episode is logged and counted once; with
//! `on_violation = "kill"` the offending processes get `SIGKILL`.

use super::log;
use crate::config::OnViolation;
use crate::host;
use crate::metrics::{MonitorCounters, OverCap};
use crate::snapshot::Snapshot;
use std::collections::{HashMap, HashSet};

/// What the previous rounds saw.
#[derive(Default)]
pub struct ViolationState {
    /// Untracked (pid, start time) seen last round, and whether reported.
    untracked: HashMap<(u32, u64), bool>,
    /// Over-cap (tenant, uuid) seen last round, and whether reported.
    over_cap: HashMap<(String, String), bool>,
}

fn kill(pid: u32, start_time_ticks: u64, why: &str, counters: &mut MonitorCounters) {
    if pid <= 1 || pid == std::process::id() || !host::same_process(pid, start_time_ticks) {
        return;
    }
    // SAFETY: kill(2) with a pid checked above to still be the process found.
    let rc = unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    if rc == 0 {
        counters.violation_kills_total += 1;
        log::warn(&format!("killed pid {pid}: {why}"));
    } else {
        log::error(&format!("cannot kill pid {pid} ({why}): {}", std::io::Error::last_os_error()));
    }
}

impl ViolationState {
    pub fn check(&mut self, snapshot: &Snapshot, on_violation: OnViolation, counters: &mut MonitorCounters) {
        if !snapshot.nvml {
            counters.over_cap.clear();
            return;
        }
        // Untracked processes.
        let mut seen = HashMap::new();
        for u in &snapshot.untracked_processes {
            let Some(start) = host::start_time_of(u.pid) else { continue };
            let key = (u.pid, start);
            let reported = match self.untracked.get(&key) {
                None => false,
                Some(true) => true,
                Some(false) => {
                    *counters.violations_total.entry("untracked_process").or_default() += 1;
                    log::warn(&format!(
                        "pid {} uses {} on device {} ({}) but no tenant ledger knows it: it bypassed the shim",
                        u.pid,
                        crate::status::human_bytes(u.memory_used_bytes),
                        u.device,
                        u.uuid
                    ));
                    if on_violation == OnViolation::Kill {
                        kill(u.pid, start, "untracked GPU process", counters);
                    }
                    true
                }
            };
            seen.insert(key, reported);
        }
        self.untracked = seen;

        // Tenants over their cap.
        let mut seen = HashMap::new();
        let mut over_now = Vec::new();
        for tenant in &snapshot.tenants {
            for device in &tenant.devices {
                let (Some(limit), Some(driver)) = (device.memory_limit_bytes, device.driver_memory_used_bytes) else {
                    continue;
                };
                let tolerance = limit.saturating_add(device.context_overhead_bytes);
                if driver <= tolerance {
                    continue;
                }
                let over_bytes = driver - limit;
                let key = (tenant.name.clone(), device.uuid.clone());
                let reported = match self.over_cap.get(&key) {
                    None => false,
                    Some(true) => true,
                    Some(false) => {
                        *counters.violations_total.entry("over_cap").or_default() += 1;
                        log::warn(&format!(
                            "tenant {} uses {} on device {} ({}) by the driver's count, over its cap of {} by more than \
                             its context overhead ({}): memory escaped the shim",
                            tenant.name,
                            crate::status::human_bytes(driver),
                            device.index,
                            device.uuid,
                            crate::status::human_bytes(limit),
                            crate::status::human_bytes(device.context_overhead_bytes)
                        ));
                        if on_violation == OnViolation::Kill {
                            for p in tenant.processes.iter().filter(|p| p.alive && p.driver_memory_used_bytes.is_some()) {
                                if p.driver_memory_used_bytes.unwrap_or(0) > 0 {
                                    kill(p.pid, p.start_time_ticks, &format!("tenant {} over its cap", tenant.name), counters);
                                }
                            }
                        }
                        true
                    }
                };
                if reported {
                    over_now.push(OverCap {
                        tenant: tenant.name.clone(),
                        device: device.index,
                        uuid: device.uuid.clone(),
                        over_bytes,
                    });
                }
                seen.insert(key, reported);
            }
        }
        let ended: HashSet<_> = self.over_cap.keys().filter(|k| !seen.contains_key(*k)).cloned().collect();
        for (tenant, uuid) in ended {
            if self.over_cap.get(&(tenant.clone(), uuid.clone())) == Some(&true) {
                log::info(&format!("tenant {tenant} is back within its cap on device {uuid}"));
            }
        }
        self.over_cap = seen;
        counters.over_cap = over_now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{TenantDeviceView, TenantView};

    fn snapshot(driver_bytes: u64) -> Snapshot {
        Snapshot {
            nvml: true,
            devices: vec![],
            tenants: vec![TenantView {
                name: "team-a".into(),
                devices: vec![TenantDeviceView {
                    index: 0,
                    uuid: "GPU-0".into(),
                    memory_used_bytes: 100,
                    memory_limit_bytes: Some(100),
                    policy_source: "monitor",
                    alloc_denied_total: 0,
                    context_overhead_bytes: 10,
                    processes: 1,
                    driver_memory_used_bytes: Some(driver_bytes),
                }],
                processes: vec![],
                reclaimed_processes_total: 0,
            }],
            untracked_processes: vec![],
        }
    }

    #[test]
    fn over_cap_counts_past_the_context_overhead_once_per_episode() {
        let mut state = ViolationState::default();
        let mut counters = MonitorCounters::default();
        // Within cap + one context's overhead: fine.
        for _ in 0..3 {
            state.check(&snapshot(110), OnViolation::Report, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), None);
        // Past it: counted on the second round in a row, once.
        state.check(&snapshot(150), OnViolation::Report, &mut counters);
        assert_eq!(counters.violations_total.get("over_cap"), None);
        assert!(counters.over_cap.is_empty());
        for _ in 0..3 {
            state.check(&snapshot(150), OnViolation::Report, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), Some(&1));
        assert_eq!(counters.over_cap.len(), 1);
        assert_eq!(counters.over_cap[0].over_bytes, 50);
        // Back within: the gauge clears; a new episode counts again.
        state.check(&snapshot(100), OnViolation::Report, &mut counters);
        assert!(counters.over_cap.is_empty());
        state.check(&snapshot(200), OnViolation::Report, &mut counters);
        state.check(&snapshot(200), OnViolation::Report, &mut counters);
        assert_eq!(counters.violations_total.get("over_cap"), Some(&2));
    }

    #[test]
    fn nothing_is_judged_without_nvml() {
        let mut state = ViolationState::default();
        let mut counters = MonitorCounters::default();
        let mut snap = snapshot(1000);
        snap.nvml = false;
        for _ in 0..3 {
            state.check(&snap, OnViolation::Kill, &mut counters);
        }
        assert!(counters.violations_total.is_empty());
        assert_eq!(counters.violation_kills_total, 0);
    }
}
