//! Bypass detection: memory the ledgers do not account for, and device
//! time outside a tenant's turns.
//!
//! Three kinds, all from NVML (the third is [`ViolationState::check_compute`]):
//! - an *untracked process*: it uses GPU memory and no ledger slot maps to
//!   its host pid (it did not load the shim);
//! - a tenant *over its cap*: the driver reports more memory for its
//!   processes than its cap plus one context's overhead (the shim charges
//!   contexts too, so anything past that escaped the shim). The cap is the
//!   monitor's (`policy`): the configuration's for the tenants it names,
//!   else the one pinned when the tenant was first seen, never what the
//!   tenant's ledger says now (a tenant can rewrite that). The
//!   overhead is the ledger's figure bounded by what the monitor measured
//!   itself (see `overhead`), so a tenant cannot widen the tolerance by
//!   writing a large figure.
//!
//! Only processes the kernel ties to the tenant count as its own (they hold
//! a slot's lock in its ledger, see `host`), and only those are killed: a
//! slot that names another process attributes nothing and kills nothing. A
//! process that holds slots in several ledgers (only it can take those
//! locks, so only it gains by it) is the own process of each of them and is
//! judged under each, so the strictest of their caps holds it.
//!
//! When the round could not see every ledger (the directory could not be
//! listed, a watched ledger could not be opened again), a process no
//! watched ledger knows may be in one unseen: it is judged as untracked
//! only if it holds no lock at all, which every process under the shim
//! does ([`keep_only_lockless_untracked`]), so that bypass is still caught
//! and nobody honest is killed for what the monitor could not see.
//!
//! A finding counts only once it has lasted `violation_grace` (and at least
//! two rounds): a well-behaved tenant passes through states that look like
//! violations for a moment, such as a process caught between creating its
//! context and claiming its slot, or between the driver's answer to an
//! allocation and the shim's record of it. Memory a stream-ordered pool
//! keeps after its allocations were freed is no such state: the shim
//! charges each pool's reserved memory, so the driver's figure and the
//! ledger's agree while a pool retains it. Each episode is then logged and
//! counted once; with `on_violation = "kill"` the offending processes get
//! `SIGKILL`.
//!
//! A cap lowered below what a tenant already holds is not a violation: the
//! tenant keeps its existing allocations (the shim only refuses new ones),
//! so the monitor allows what it held when it saw the cap drop, shrinking
//! that allowance as the tenant frees memory, down to the cap.

use super::log;
use super::overhead::OverheadState;
use super::policy::PolicyState;
use crate::config::{Config, OnViolation, OtherTenants};
use crate::host;
use crate::metrics::{MonitorCounters, OverCap};
use crate::snapshot::Snapshot;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Drops from the untracked processes those that hold any OFD lock (a
/// slot's, perhaps, in a ledger this round could not see); see the module
/// docs.
pub fn keep_only_lockless_untracked(snapshot: &mut Snapshot) {
    snapshot.untracked_processes.retain(|u| !host::holds_any_ofd_lock(std::path::Path::new("/proc"), u.pid));
}

/// One finding followed across rounds.
#[derive(Debug, Clone, Copy)]
struct Episode {
    first_seen: Instant,
    rounds: u32,
    /// Whether it was counted (and acted on).
    counted: bool,
}

impl Episode {
    /// Advances the episode `previous` (if any) by one round at `now`;
    /// returns it and whether it must be counted now.
    fn advance(previous: Option<Episode>, now: Instant, grace: Duration) -> (Episode, bool) {
        let mut episode = previous.unwrap_or(Episode { first_seen: now, rounds: 0, counted: false });
        episode.rounds += 1;
        let due = !episode.counted && episode.rounds >= 2 && now.duration_since(episode.first_seen) >= grace;
        if due {
            episode.counted = true;
        }
        (episode, due)
    }
}

/// What a tenant may hold on a device without being over its cap.
#[derive(Debug, Clone, Copy)]
struct Allowance {
    cap_bytes: u64,
    allowed_bytes: u64,
}

/// What the previous rounds saw.
#[derive(Default)]
pub struct ViolationState {
    /// Untracked processes by (pid, start time).
    untracked: HashMap<(u32, u64), Episode>,
    /// Over-cap findings by (tenant, uuid).
    over_cap: HashMap<(String, String), Episode>,
    /// Allowances by (tenant, uuid).
    allowances: HashMap<(String, String), Allowance>,
    /// Device time past the monitor's charge by (tenant, uuid): an average
    /// over rounds, and the episode while it is past the tolerance.
    compute: HashMap<(String, String), (f64, Option<Episode>)>,
    /// Processes of tenants nobody governs (`other_tenants = "refuse"`), by
    /// (pid, start time).
    ungoverned: HashMap<(u32, u64), Episode>,
    /// The arbiter stalled during this round (see [`Self::arbiter_stalled`]).
    arbiter_stalled: bool,
}

/// How far a tenant's processes may run past the device time the monitor
/// charged it, as a ratio of the device (NVML samples are coarse and lag
/// by up to a sample period, about 1/6 s).
pub const COMPUTE_TOLERANCE: f64 = 0.15;
/// The weight of each round in the average of the excess.
const COMPUTE_SMOOTHING: f64 = 0.3;

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
    /// Judges one round's snapshot taken at `now`.
    /// Says that the arbiter's loop did not go round for a while during
    /// this round: nobody was granted a turn meanwhile, so NVML's figures
    /// against the turns say nothing, and no one is judged (or killed) for
    /// running outside them; what was averaged so far is forgotten.
    pub fn arbiter_stalled(&mut self, stalled: bool) {
        self.arbiter_stalled = stalled;
        if stalled {
            self.compute.clear();
        }
    }

    pub fn check(
        &mut self,
        snapshot: &Snapshot,
        config: &Config,
        policy: &PolicyState,
        overheads: &OverheadState,
        now: Instant,
        counters: &mut MonitorCounters,
    ) {
        if !snapshot.nvml {
            counters.over_cap.clear();
            return;
        }
        let (grace, on_violation) = (config.violation_grace, config.on_violation);
        // Untracked processes.
        let mut seen = HashMap::new();
        for u in &snapshot.untracked_processes {
            let Some(start) = host::start_time_of(u.pid) else { continue };
            let key = (u.pid, start);
            let (episode, due) = Episode::advance(self.untracked.get(&key).copied(), now, grace);
            if due {
                *counters.violations_total.entry("untracked_process").or_default() += 1;
                log::warn(&format!(
                    "pid {} uses {} on device {} ({}) but no tenant ledger knows it: it bypassed the shim",
                    u.pid,
                    crate::text::human_bytes(u.memory_used_bytes),
                    u.device,
                    u.uuid
                ));
                if on_violation == OnViolation::Kill {
                    kill(u.pid, start, "untracked GPU process", counters);
                }
            }
            seen.insert(key, episode);
        }
        self.untracked = seen;

        // Tenants over their cap.
        let mut seen = HashMap::new();
        let mut allowances = HashMap::new();
        let mut over_now = Vec::new();
        for tenant in &snapshot.tenants {
            for device in &tenant.devices {
                let cap = policy.cap_for(config, &tenant.name, &device.uuid, Some(device.index));
                let (Some(cap_bytes), Some(driver)) = (cap, device.driver_memory_used_bytes) else { continue };
                let key = (tenant.name.clone(), device.uuid.clone());
                // Past the cap, allow what the ledger says the tenant holds,
                // but never more than it was allowed last round: so only a
                // cap that drops grants anything, and it shrinks as the
                // tenant frees. A new or raised cap allows just the cap.
                let allowed_bytes = match self.allowances.get(&key) {
                    Some(a) if cap_bytes <= a.cap_bytes => cap_bytes.max(device.memory_used_bytes.min(a.allowed_bytes)),
                    _ => cap_bytes,
                };
                allowances.insert(key.clone(), Allowance { cap_bytes, allowed_bytes });
                let overhead_bytes = overheads.tolerated_bytes(&tenant.name, &device.uuid, device.context_overhead_bytes);
                let tolerance = allowed_bytes.saturating_add(overhead_bytes);
                if driver <= tolerance {
                    continue;
                }
                let over_bytes = driver - allowed_bytes;
                let (episode, due) = Episode::advance(self.over_cap.get(&key).copied(), now, grace);
                if due {
                    *counters.violations_total.entry("over_cap").or_default() += 1;
                    log::warn(&format!(
                        "tenant {} uses {} on device {} ({}) by the driver's count, over its cap of {} by more than \
                         its context overhead ({}) for {:.1} s: memory escaped the shim",
                        tenant.name,
                        crate::text::human_bytes(driver),
                        device.index,
                        device.uuid,
                        crate::text::human_bytes(allowed_bytes),
                        crate::text::human_bytes(overhead_bytes),
                        now.duration_since(episode.first_seen).as_secs_f64()
                    ));
                    if on_violation == OnViolation::Kill {
                        let own = |p: &&crate::snapshot::ProcessView| p.alive && p.confirmed;
                        for p in tenant.processes.iter().filter(own).filter(|p| p.driver_memory_used_bytes.unwrap_or(0) > 0) {
                            kill(p.pid, p.start_time_ticks, &format!("tenant {} over its cap", tenant.name), counters);
                        }
                    }
                }
                if episode.counted {
                    over_now.push(OverCap { tenant: tenant.name.clone(), device: device.index, uuid: device.uuid.clone(), over_bytes });
                }
                seen.insert(key, episode);
            }
        }
        for ((tenant, uuid), episode) in &self.over_cap {
            if episode.counted && !seen.contains_key(&(tenant.clone(), uuid.clone())) {
                log::info(&format!("tenant {tenant} is back within its cap on device {uuid}"));
            }
        }
        self.over_cap = seen;
        self.allowances = allowances;
        counters.over_cap = over_now;
        self.check_ungoverned(snapshot, config, policy, now, counters);
        self.check_compute(snapshot, config, now, counters);
    }

    /// With `other_tenants = "refuse"`: a process on a GPU (by the driver's
    /// count) in a tenant that neither the configuration names, nor an
    /// allocation admitted (both are in `config`), nor the queue started.
    /// Only processes the kernel ties to the tenant's ledger count, as for
    /// the other kinds.
    fn check_ungoverned(
        &mut self,
        snapshot: &Snapshot,
        config: &Config,
        policy: &PolicyState,
        now: Instant,
        counters: &mut MonitorCounters,
    ) {
        if config.other_tenants != OtherTenants::Refuse {
            self.ungoverned.clear();
            return;
        }
        let mut seen = HashMap::new();
        let governed = |tenant: &str| config.tenants.contains_key(tenant) || policy.is_queue_tenant(tenant);
        for tenant in snapshot.tenants.iter().filter(|t| !governed(&t.name)) {
            let on_gpu = |p: &&crate::snapshot::ProcessView| p.alive && p.confirmed && p.driver_memory_used_bytes.unwrap_or(0) > 0;
            for process in tenant.processes.iter().filter(on_gpu) {
                let key = (process.pid, process.start_time_ticks);
                let (episode, due) = Episode::advance(self.ungoverned.get(&key).copied(), now, config.violation_grace);
                if due {
                    *counters.violations_total.entry("ungoverned_tenant").or_default() += 1;
                    log::warn(&format!(
                        "pid {} uses a GPU as tenant {}, which nobody governs (not in the configuration, not admitted, not a queue job), and other_tenants is \"refuse\"",
                        process.pid,
                        log::bounded(&tenant.name)
                    ));
                    if config.on_violation == OnViolation::Kill {
                        kill(process.pid, process.start_time_ticks, &format!("tenant {} is governed by nobody", tenant.name), counters);
                    }
                }
                seen.insert(key, episode);
            }
        }
        self.ungoverned = seen;
    }

    /// Device time outside a tenant's turns: on a device the monitor
    /// arbitrates, a tenant's processes run only in its turns, so NVML's
    /// per-process utilization summed over them cannot exceed the share of
    /// the round the monitor charged the tenant (its turns' busy wall time,
    /// which a limit bounds too). A tenant whose excess, averaged over
    /// rounds, stays past [`COMPUTE_TOLERANCE`] for `violation_grace` ran
    /// work outside its turns: a process that skips the shim's gate, or one
    /// that did not finish its work when its turn ended.
    fn check_compute(&mut self, snapshot: &Snapshot, config: &Config, now: Instant, counters: &mut MonitorCounters) {
        if self.arbiter_stalled {
            return;
        }
        let arbitrated = |uuid: &str| snapshot.devices.iter().any(|d| d.uuid == uuid && d.arbitrated == Some(true));
        let mut seen = HashMap::new();
        for tenant in &snapshot.tenants {
            let own: Vec<&crate::snapshot::ProcessView> = tenant.processes.iter().filter(|p| p.alive && p.confirmed).collect();
            for device in tenant.devices.iter().filter(|d| arbitrated(&d.uuid)) {
                // A tenant with no place in the device's turns was given
                // none of it, whatever its ledger says.
                let used = if device.compute_member == Some(false) { Some(0.0) } else { device.compute_used_ratio };
                let Some(used) = used else { continue };
                let on_device = |p: &&&crate::snapshot::ProcessView| p.devices.iter().any(|d| d.uuid == device.uuid);
                let ran: f64 = own.iter().filter(on_device).filter_map(|p| p.sm_utilization_ratio).sum();
                let key = (tenant.name.clone(), device.uuid.clone());
                let (average, previous) = self.compute.get(&key).copied().unwrap_or((0.0, None));
                let average = average * (1.0 - COMPUTE_SMOOTHING) + (ran - used) * COMPUTE_SMOOTHING;
                if average <= COMPUTE_TOLERANCE {
                    if previous.is_some_and(|e| e.counted) {
                        log::info(&format!("tenant {} runs within its turns again on device {}", tenant.name, device.uuid));
                    }
                    seen.insert(key, (average, None));
                    continue;
                }
                let (episode, due) = Episode::advance(previous, now, config.violation_grace);
                if due {
                    *counters.violations_total.entry("outside_turns").or_default() += 1;
                    log::warn(&format!(
                        "tenant {} ran {:.0} % of device {} ({}) by NVML's count while the monitor's turns gave it {:.0} %, \
                         for {:.1} s: work ran outside its turns (a process skipped the shim's gate or kept running after its turn)",
                        tenant.name,
                        ran * 100.0,
                        device.index,
                        device.uuid,
                        used * 100.0,
                        now.duration_since(episode.first_seen).as_secs_f64()
                    ));
                    if config.on_violation == OnViolation::Kill {
                        for p in own.iter().filter(on_device).filter(|p| p.sm_utilization_ratio.unwrap_or(0.0) > 0.0) {
                            kill(p.pid, p.start_time_ticks, &format!("tenant {} ran outside its turns", tenant.name), counters);
                        }
                    }
                }
                seen.insert(key, (average, Some(episode)));
            }
        }
        self.compute = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{fixtures, TenantDeviceView};

    const MS: Duration = Duration::from_millis(1);

    fn snapshot(driver_bytes: u64, limit_bytes: u64, used_bytes: u64) -> Snapshot {
        let device = fixtures::tenant_device(used_bytes, Some(limit_bytes), Some(driver_bytes));
        fixtures::one_tenant(true, TenantDeviceView { context_overhead_bytes: 10, ..device }, vec![])
    }

    /// One round, with the snapshot's cap as the one the monitor pinned and
    /// nothing measured of the overhead.
    fn judge(state: &mut ViolationState, snap: &Snapshot, config: &Config, now: Instant, counters: &mut MonitorCounters) {
        let mut policy = PolicyState::default();
        for tenant in &snap.tenants {
            for d in &tenant.devices {
                if let Some(cap) = d.memory_limit_bytes {
                    policy = policy.with_pin(&tenant.name, &d.uuid, cap);
                }
            }
        }
        state.check(snap, config, &policy, &OverheadState::default(), now, counters);
    }

    fn config(grace: Duration) -> Config {
        Config { violation_grace: grace, ..Config::default() }
    }

    #[test]
    fn over_cap_counts_past_the_context_overhead_once_per_episode() {
        let (mut state, mut counters, config, t0) =
            (ViolationState::default(), MonitorCounters::default(), config(Duration::ZERO), Instant::now());
        // Within cap + one context's overhead: fine.
        for i in 0..3 {
            judge(&mut state, &snapshot(110, 100, 100), &config, t0 + i * 250 * MS, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), None);
        // Past it: counted on the second round in a row, once.
        judge(&mut state, &snapshot(150, 100, 100), &config, t0 + 1000 * MS, &mut counters);
        assert_eq!(counters.violations_total.get("over_cap"), None);
        assert!(counters.over_cap.is_empty());
        for i in 0..3 {
            judge(&mut state, &snapshot(150, 100, 100), &config, t0 + (1250 + i * 250) * MS, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), Some(&1));
        assert_eq!(counters.over_cap.len(), 1);
        assert_eq!(counters.over_cap[0].over_bytes, 50);
        // Back within: the gauge clears; a new episode counts again.
        judge(&mut state, &snapshot(100, 100, 100), &config, t0 + 2000 * MS, &mut counters);
        assert!(counters.over_cap.is_empty());
        judge(&mut state, &snapshot(200, 100, 100), &config, t0 + 2250 * MS, &mut counters);
        judge(&mut state, &snapshot(200, 100, 100), &config, t0 + 2500 * MS, &mut counters);
        assert_eq!(counters.violations_total.get("over_cap"), Some(&2));
    }

    #[test]
    fn a_finding_shorter_than_the_grace_is_not_counted_a_longer_one_is() {
        let (mut state, mut counters, config, t0) =
            (ViolationState::default(), MonitorCounters::default(), config(5000 * MS), Instant::now());
        // Over for 3 s (e.g. a cuMemFreeAsync the stream has not reached), then back.
        for i in 0..=12 {
            judge(&mut state, &snapshot(300, 100, 100), &config, t0 + i * 250 * MS, &mut counters);
        }
        judge(&mut state, &snapshot(100, 100, 100), &config, t0 + 3250 * MS, &mut counters);
        assert_eq!(counters.violations_total.get("over_cap"), None);
        assert!(counters.over_cap.is_empty());
        // Over again, for good: counted once 5 s have passed since it began, not before.
        let t1 = t0 + 4000 * MS;
        for i in 0..20 {
            judge(&mut state, &snapshot(300, 100, 100), &config, t1 + i * 250 * MS, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), None, "4.75 s < 5 s");
        judge(&mut state, &snapshot(300, 100, 100), &config, t1 + 5000 * MS, &mut counters);
        assert_eq!(counters.violations_total.get("over_cap"), Some(&1));
        assert_eq!(counters.over_cap.len(), 1);
    }

    #[test]
    fn a_cap_lowered_below_what_a_tenant_holds_is_no_violation() {
        let (mut state, mut counters, config, t0) =
            (ViolationState::default(), MonitorCounters::default(), config(Duration::ZERO), Instant::now());
        judge(&mut state, &snapshot(500, 1000, 500), &config, t0, &mut counters);
        // Cap lowered to 100 while 500 are held: allowed, for as long as they are held.
        for i in 1..5 {
            judge(&mut state, &snapshot(500, 100, 500), &config, t0 + i * 250 * MS, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), None);
        // It frees down to 300: the allowance shrinks with it...
        judge(&mut state, &snapshot(300, 100, 300), &config, t0 + 1500 * MS, &mut counters);
        // ...so memory past 300 that the ledger does not know is a violation.
        judge(&mut state, &snapshot(450, 100, 300), &config, t0 + 1750 * MS, &mut counters);
        judge(&mut state, &snapshot(450, 100, 300), &config, t0 + 2000 * MS, &mut counters);
        assert_eq!(counters.violations_total.get("over_cap"), Some(&1));
        assert_eq!(counters.over_cap[0].over_bytes, 150);
        // A ledger raising its own usage figure does not raise the allowance.
        let mut counters = MonitorCounters::default();
        let mut state = ViolationState::default();
        for i in 0..3 {
            judge(&mut state, &snapshot(900, 100, 900), &config, t0 + i * 250 * MS, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), Some(&1));
    }

    #[test]
    fn the_configured_cap_wins_over_the_ledgers() {
        let (mut state, mut counters, t0) = (ViolationState::default(), MonitorCounters::default(), Instant::now());
        let config = crate::config::parse("violation_grace = \"0s\"\n[tenants.team-a]\nmemory = \"100B\"\n").unwrap();
        // The tenant raised the cap in its own ledger to 1000; the file says 100.
        for i in 0..3 {
            judge(&mut state, &snapshot(500, 1000, 90), &config, t0 + i * 250 * MS, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), Some(&1));
    }

    #[test]
    fn the_pinned_cap_wins_over_the_ledgers() {
        let (mut state, mut counters, config, t0) =
            (ViolationState::default(), MonitorCounters::default(), config(Duration::ZERO), Instant::now());
        let policy = PolicyState::default().with_pin("team-a", "GPU-0", 100);
        // The tenant raised the cap in its own ledger to 1000; the monitor pinned 100.
        for i in 0..3 {
            state.check(&snapshot(500, 1000, 90), &config, &policy, &OverheadState::default(), t0 + i * 250 * MS, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), Some(&1));
    }

    #[test]
    fn a_ledgers_claimed_context_overhead_widens_the_tolerance_only_up_to_the_bound() {
        let (mut state, mut counters, config, t0) =
            (ViolationState::default(), MonitorCounters::default(), config(Duration::ZERO), Instant::now());
        let gib = 1u64 << 30;
        let policy = PolicyState::default().with_pin("team-a", "GPU-0", gib);
        let mut snap = snapshot(gib + super::super::overhead::MAX_CONTEXT_OVERHEAD_BYTES + 1, gib, gib);
        snap.tenants[0].devices[0].context_overhead_bytes = 1 << 60;
        for i in 0..3 {
            state.check(&snap, &config, &policy, &OverheadState::default(), t0 + i * 250 * MS, &mut counters);
        }
        assert_eq!(counters.violations_total.get("over_cap"), Some(&1));
    }

    #[test]
    fn nothing_is_judged_without_nvml() {
        let (mut state, mut counters, t0) = (ViolationState::default(), MonitorCounters::default(), Instant::now());
        let config = Config { on_violation: OnViolation::Kill, ..config(Duration::ZERO) };
        let mut snap = snapshot(1000, 100, 100);
        snap.nvml = false;
        for i in 0..3 {
            judge(&mut state, &snap, &config, t0 + i * 250 * MS, &mut counters);
        }
        assert!(counters.violations_total.is_empty());
        assert_eq!(counters.violation_kills_total, 0);
    }
}
