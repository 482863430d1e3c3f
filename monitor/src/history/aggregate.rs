//! Folds the monitor's rounds (four a second) into one row per tenant and
//! device, and one per device, for each interval (a minute by default).
//!
//! Per tenant and device an interval keeps: the peak and mean of the memory
//! the ledger holds, the peak the driver reports (NVML), the cap, share and
//! limit as they were at its end, the mean of the compute used and of the
//! target, the refusals and throttled time that happened in it, and the
//! most live processes seen at once. A round counts as *active* when the
//! tenant had a live process or held memory on the device; the report sizes
//! tenants from active intervals only, so a tenant that works one day a
//! week is sized by that day.
//!
//! Refusals and throttled time are counters in the ledger; an interval gets
//! their growth. A counter that goes down was started afresh (a new ledger)
//! and counts from zero. A tenant the monitor sees in its first round
//! counts from what its counters held then (what happened before was not
//! seen, and may be in the history already); one that appears later counts
//! from zero.

use crate::snapshot::Snapshot;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// Tenant-and-device rows one interval may hold at most: the monitor
/// watches a bounded number of ledgers (`--max-ledgers`), and this bounds
/// the history even if it watched more.
pub const MAX_TENANT_ROWS: usize = 4096;
/// Device rows one interval may hold at most.
pub const MAX_DEVICE_ROWS: usize = 1024;

/// A ratio of a device as an integer of ten-thousandths (`0.25` is 2500),
/// the way the ledger holds compute settings; clamped to the whole device
/// (a used ratio measured over a round can come out a little above 1).
pub fn ratio_e4(ratio: f64) -> u32 {
    if ratio.is_finite() {
        (ratio.clamp(0.0, 1.0) * 10_000.0).round() as u32
    } else {
        0
    }
}

/// One tenant on one device over one interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRow {
    /// Unix time the interval began, seconds.
    pub start_s: u64,
    /// How long it lasted, seconds (at least 1).
    pub span_s: u64,
    pub tenant: String,
    /// `GPU-…` or `MIG-…`.
    pub device_uuid: String,
    /// The host index of the device at the interval's end.
    pub device_index: u32,
    /// Rounds folded in.
    pub rounds: u32,
    /// Rounds in which the tenant had a live process or held memory here.
    pub active_rounds: u32,
    pub memory_peak_bytes: u64,
    pub memory_mean_bytes: u64,
    /// The most the driver reported for the tenant's processes (NVML only).
    pub driver_memory_peak_bytes: Option<u64>,
    /// The cap at the interval's end; `None`: none.
    pub memory_cap_bytes: Option<u64>,
    /// Compute share and limit at the interval's end (ten-thousandths).
    pub compute_share_e4: Option<u32>,
    pub compute_limit_e4: Option<u32>,
    /// Mean compute used and target over the rounds that had one.
    pub compute_used_e4: Option<u32>,
    pub compute_target_e4: Option<u32>,
    /// Throttled time and refused allocations in the interval.
    pub throttled_ns: u64,
    pub denied: u64,
    /// The most live processes seen at once.
    pub processes_peak: u32,
    /// Mean CPU time of its live processes over the rounds that read it,
    /// in ten-thousandths of a core (above 10 000 for more than one core).
    pub cpu_e4: Option<u32>,
    /// Mean SM utilization of its processes on the device (NVML only).
    pub gpu_e4: Option<u32>,
    /// The cluster job and user the tenant was admitted for, at the
    /// interval's end; `None`: not an admitted tenant of a job.
    pub origin: Option<Origin>,
    /// The team the monitor held the tenant in over the interval.
    pub team: TeamOf,
}

/// The team of a tenant's interval, as the monitor decided it
/// ([`crate::teams::membership`]): from its configuration and admissions,
/// never from anything the tenant wrote, so a tenant that names itself
/// like a team's member is in no team here either.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "team")]
pub enum TeamOf {
    /// In no team.
    #[default]
    NoTeam,
    /// In this team.
    Team(String),
    /// Written before the history recorded teams (layouts 1 to 3).
    NotRecorded,
}

impl TeamOf {
    /// The team's name, where it was in one.
    pub fn name(&self) -> Option<&str> {
        match self {
            TeamOf::Team(name) => Some(name),
            _ => None,
        }
    }
}

/// Whose a tenant is in the cluster's terms: the job, user and account
/// its admission named (the `job`, `user` and `account` labels of
/// `gpuslice tenant admit`). Only root or the monitor's user can admit
/// (the control socket checks the peer), so these are the node agent's
/// word (Slurm's Prolog, as root, from slurmd's environment), never a
/// tenant's: a job's processes cannot name themselves another's.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Origin {
    pub job: Option<String>,
    pub user: Option<String>,
    pub account: Option<String>,
}

impl Origin {
    /// The origin an admission's labels name; `None` when they name no
    /// job and no user.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Option<Origin> {
        let get = |key: &str| labels.get(key).filter(|v| !v.is_empty()).cloned();
        let origin = Origin { job: get("job"), user: get("user"), account: get("account") };
        (origin.job.is_some() || origin.user.is_some()).then_some(origin)
    }
}

/// One device over one interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRow {
    pub start_s: u64,
    pub span_s: u64,
    pub device_uuid: String,
    pub device_index: u32,
    pub rounds: u32,
    pub memory_total_bytes: u64,
    /// The most memory the driver reported in use (NVML only).
    pub memory_used_peak_bytes: Option<u64>,
    /// Mean busy share (NVML only).
    pub utilization_e4: Option<u32>,
    /// The hottest it ran, °C, and the most power it drew, mW (NVML only,
    /// where the device reports them).
    pub temperature_peak_c: Option<u32>,
    pub power_peak_mw: Option<u32>,
    /// Rounds in which heat or the power limit held its clocks back (where
    /// the device reports why its clocks are held back).
    pub throttled_rounds: Option<u32>,
}

/// What one interval wrote: the rows, and how many tenant-and-device
/// pairs were left out over [`MAX_TENANT_ROWS`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    pub tenants: Vec<TenantRow>,
    pub devices: Vec<DeviceRow>,
    pub left_out: usize,
}

#[derive(Default)]
struct TenantAcc {
    device_index: u32,
    rounds: u32,
    active_rounds: u32,
    memory_peak_bytes: u64,
    memory_sum_bytes: u128,
    driver_memory_peak_bytes: Option<u64>,
    memory_cap_bytes: Option<u64>,
    compute_share_e4: Option<u32>,
    compute_limit_e4: Option<u32>,
    used_sum_e4: u64,
    used_rounds: u32,
    target_sum_e4: u64,
    target_rounds: u32,
    throttled_ns: u64,
    denied: u64,
    processes_peak: u32,
    cpu_sum_e4: u64,
    cpu_rounds: u32,
    gpu_sum_e4: u64,
    gpu_rounds: u32,
    origin: Option<Origin>,
    team: Option<String>,
}

#[derive(Default)]
struct DeviceAcc {
    device_index: u32,
    rounds: u32,
    memory_total_bytes: u64,
    memory_used_peak_bytes: Option<u64>,
    util_sum_e4: u64,
    util_rounds: u32,
    temperature_peak_c: Option<u32>,
    power_peak_mw: Option<u32>,
    throttled_rounds: Option<u32>,
}

/// The counters of a tenant on a device as last seen.
#[derive(Clone, Copy)]
struct Counters {
    throttled_ns_total: u64,
    denied_total: u64,
}

/// Growth of a counter from `last` to `now`; a counter that went down was
/// started afresh, so all of `now` is new.
pub fn counter_growth(last: u64, now: u64) -> u64 {
    if now >= last {
        now - last
    } else {
        now
    }
}

/// The open interval and the counters it measures growth from.
#[derive(Default)]
pub struct Aggregator {
    /// Unix time the open interval began, ms; `None`: no round yet.
    start_ms: Option<u64>,
    tenants: BTreeMap<(String, String), TenantAcc>,
    devices: BTreeMap<String, DeviceAcc>,
    left_out: HashSet<(String, String)>,
    last: HashMap<(String, String), Counters>,
    seen_a_round: bool,
    /// The origin of each tenant the monitor holds an allocation of
    /// (admitted, or released while processes of it live), and of each
    /// one whose allocation went this round.
    origins: BTreeMap<String, Origin>,
    /// The allocations' origins as given at the last round.
    allocated: BTreeMap<String, Origin>,
    /// The team of each tenant the monitor holds in one, and of each one
    /// that left its team this round (as origins).
    teams: BTreeMap<String, String>,
    /// The teams as given at the last round.
    teamed: BTreeMap<String, String>,
}

impl Aggregator {
    /// When the open interval began (Unix ms); `None` when it has no round.
    pub fn started_ms(&self) -> Option<u64> {
        self.start_ms
    }

    /// The origins of the tenants the monitor holds an allocation of from
    /// now on (its admissions, see [`Origin`]: admitted, or released while
    /// processes of it live); a tenant not in it has none. One whose
    /// allocation went since the last round keeps its origin for this round
    /// alone (its ledger, removed as it went, may still be in this round's
    /// snapshot): after that its name is anyone's, and a tenant that makes
    /// a ledger of that name anew is nobody's job, however soon it does.
    pub fn set_origins(&mut self, origins: impl IntoIterator<Item = (String, Origin)>) {
        let now: BTreeMap<String, Origin> = origins.into_iter().collect();
        let mut went = std::mem::replace(&mut self.allocated, now.clone());
        went.retain(|tenant, _| !now.contains_key(tenant));
        went.extend(now);
        self.origins = went;
    }

    /// The team of each tenant the monitor holds in one from now on (its
    /// decision, [`crate::teams::membership::Membership::pairs`]); a tenant
    /// not in it is in none. As with origins, a tenant that left its team
    /// since the last round keeps it for this round alone.
    pub fn set_teams(&mut self, teams: impl IntoIterator<Item = (String, String)>) {
        let now: BTreeMap<String, String> = teams.into_iter().collect();
        let mut went = std::mem::replace(&mut self.teamed, now.clone());
        went.retain(|tenant, _| !now.contains_key(tenant));
        went.extend(now);
        self.teams = went;
    }

    /// Whether the open interval must close before `snapshot`, taken at
    /// Unix time `now_ms`, is folded: a tenant in it has a row of one
    /// origin open and this round would be another's (its allocation went
    /// and a ledger of its name was made anew, or it was admitted), and a
    /// row is one holder's; or a tenant in it is in another team (or none)
    /// from this round on (a reload, an admission), and a row is one
    /// team's. Not within the second the interval began: an
    /// interval is keyed by its start's second.
    pub fn holder_changes(&self, snapshot: &Snapshot, now_ms: u64) -> bool {
        let Some(start_ms) = self.start_ms else { return false };
        if now_ms / 1000 <= start_ms / 1000 {
            return false;
        }
        snapshot.tenants.iter().any(|tenant| {
            let origin = self.origins.get(&tenant.name);
            let team = self.teams.get(&tenant.name);
            tenant.devices.iter().any(|device| {
                self.tenants
                    .get(&(tenant.name.clone(), device.uuid.clone()))
                    .is_some_and(|acc| acc.origin.as_ref() != origin || acc.team.as_ref() != team)
            })
        })
    }

    /// Folds one round, taken at Unix time `now_ms`, into the open interval.
    pub fn fold(&mut self, snapshot: &Snapshot, now_ms: u64) {
        self.start_ms.get_or_insert(now_ms);
        let first_round = !self.seen_a_round;
        self.seen_a_round = true;
        let mut seen: HashMap<(String, String), Counters> = HashMap::new();
        for tenant in &snapshot.tenants {
            for device in &tenant.devices {
                let key = (tenant.name.clone(), device.uuid.clone());
                let now = Counters { throttled_ns_total: device.throttled_ns_total, denied_total: device.alloc_denied_total };
                // First seen: from what it held at the monitor's first
                // round, else from zero (see the module docs).
                let last = self.last.get(&key).copied().unwrap_or(if first_round {
                    now
                } else {
                    Counters { throttled_ns_total: 0, denied_total: 0 }
                });
                seen.insert(key.clone(), now);
                if !self.tenants.contains_key(&key) && self.tenants.len() >= MAX_TENANT_ROWS {
                    self.left_out.insert(key);
                    continue;
                }
                let acc = self.tenants.entry(key).or_default();
                // Kept for the interval once seen: a released tenant's last
                // rounds are still its job's (one row per tenant and device
                // per interval).
                if let Some(origin) = self.origins.get(&tenant.name) {
                    acc.origin = Some(origin.clone());
                }
                if let Some(team) = self.teams.get(&tenant.name) {
                    acc.team = Some(team.clone());
                }
                acc.device_index = device.index;
                acc.rounds += 1;
                if device.processes > 0 || device.memory_used_bytes > 0 {
                    acc.active_rounds += 1;
                }
                acc.memory_peak_bytes = acc.memory_peak_bytes.max(device.memory_used_bytes);
                acc.memory_sum_bytes += u128::from(device.memory_used_bytes);
                if let Some(driver) = device.driver_memory_used_bytes {
                    acc.driver_memory_peak_bytes = Some(acc.driver_memory_peak_bytes.unwrap_or(0).max(driver));
                }
                acc.memory_cap_bytes = device.memory_limit_bytes;
                acc.compute_share_e4 = device.compute_share_ratio.map(ratio_e4);
                acc.compute_limit_e4 = device.compute_limit_ratio.map(ratio_e4);
                if let Some(used) = device.compute_used_ratio {
                    acc.used_sum_e4 += u64::from(ratio_e4(used));
                    acc.used_rounds += 1;
                }
                if let Some(target) = device.compute_target_ratio {
                    acc.target_sum_e4 += u64::from(ratio_e4(target));
                    acc.target_rounds += 1;
                }
                acc.throttled_ns = acc.throttled_ns.saturating_add(counter_growth(last.throttled_ns_total, now.throttled_ns_total));
                acc.denied = acc.denied.saturating_add(counter_growth(last.denied_total, now.denied_total));
                acc.processes_peak = acc.processes_peak.max(u32::try_from(device.processes).unwrap_or(u32::MAX));
                if let Some(cores) = device.cpu_cores.filter(|c| c.is_finite()) {
                    acc.cpu_sum_e4 += (cores.clamp(0.0, 100_000.0) * 10_000.0).round() as u64;
                    acc.cpu_rounds += 1;
                }
                if let Some(sm) = device.sm_utilization_ratio {
                    acc.gpu_sum_e4 += u64::from(ratio_e4(sm));
                    acc.gpu_rounds += 1;
                }
            }
        }
        // A tenant-and-device pair not seen this round starts from zero
        // when it comes back (its ledger was made anew).
        self.last = seen;
        for device in &snapshot.devices {
            if !self.devices.contains_key(&device.uuid) && self.devices.len() >= MAX_DEVICE_ROWS {
                continue;
            }
            let acc = self.devices.entry(device.uuid.clone()).or_default();
            acc.device_index = device.index;
            acc.rounds += 1;
            acc.memory_total_bytes = device.memory_total_bytes;
            if let Some(used) = device.memory_used_bytes {
                acc.memory_used_peak_bytes = Some(acc.memory_used_peak_bytes.unwrap_or(0).max(used));
            }
            if let Some(util) = device.utilization_ratio {
                acc.util_sum_e4 += u64::from(ratio_e4(util));
                acc.util_rounds += 1;
            }
            if let Some(health) = &device.health {
                if let Some(t) = health.temperature_c {
                    acc.temperature_peak_c = Some(acc.temperature_peak_c.unwrap_or(0).max(t));
                }
                if let Some(mw) = health.power_usage_mw {
                    acc.power_peak_mw = Some(acc.power_peak_mw.unwrap_or(0).max(mw));
                }
                if health.clocks_event_reasons.is_some() {
                    let held = u32::from(health.throttled_by().is_some());
                    acc.throttled_rounds = Some(acc.throttled_rounds.unwrap_or(0) + held);
                }
            }
        }
    }

    /// Closes the open interval at Unix time `now_ms` and returns its rows;
    /// `None` when no round was folded since the last close.
    pub fn close(&mut self, now_ms: u64) -> Option<Batch> {
        let start_ms = self.start_ms.take()?;
        let start_s = start_ms / 1000;
        // To the nearest second: an interval closes at the first round
        // past its length (a minute and up to a round, 250 ms, more), and
        // rounded up each would count a second too many.
        let span_s = (now_ms.saturating_sub(start_ms).saturating_add(500) / 1000).max(1);
        let mean = |sum: u64, n: u32| (n > 0).then(|| u32::try_from(sum / u64::from(n)).unwrap_or(u32::MAX));
        let tenants = std::mem::take(&mut self.tenants)
            .into_iter()
            .map(|((tenant, device_uuid), acc)| TenantRow {
                start_s,
                span_s,
                tenant,
                device_uuid,
                device_index: acc.device_index,
                rounds: acc.rounds,
                active_rounds: acc.active_rounds,
                memory_peak_bytes: acc.memory_peak_bytes,
                memory_mean_bytes: u64::try_from(acc.memory_sum_bytes / u128::from(acc.rounds.max(1))).unwrap_or(u64::MAX),
                driver_memory_peak_bytes: acc.driver_memory_peak_bytes,
                memory_cap_bytes: acc.memory_cap_bytes,
                compute_share_e4: acc.compute_share_e4,
                compute_limit_e4: acc.compute_limit_e4,
                compute_used_e4: mean(acc.used_sum_e4, acc.used_rounds),
                compute_target_e4: mean(acc.target_sum_e4, acc.target_rounds),
                throttled_ns: acc.throttled_ns,
                denied: acc.denied,
                processes_peak: acc.processes_peak,
                cpu_e4: mean(acc.cpu_sum_e4, acc.cpu_rounds),
                gpu_e4: mean(acc.gpu_sum_e4, acc.gpu_rounds),
                origin: acc.origin,
                team: acc.team.map_or(TeamOf::NoTeam, TeamOf::Team),
            })
            .collect();
        let devices = std::mem::take(&mut self.devices)
            .into_iter()
            .map(|(device_uuid, acc)| DeviceRow {
                start_s,
                span_s,
                device_uuid,
                device_index: acc.device_index,
                rounds: acc.rounds,
                memory_total_bytes: acc.memory_total_bytes,
                memory_used_peak_bytes: acc.memory_used_peak_bytes,
                utilization_e4: mean(acc.util_sum_e4, acc.util_rounds),
                temperature_peak_c: acc.temperature_peak_c,
                power_peak_mw: acc.power_peak_mw,
                throttled_rounds: acc.throttled_rounds,
            })
            .collect();
        let left_out = std::mem::take(&mut self.left_out).len();
        Some(Batch { tenants, devices, left_out })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::fixtures::{one_tenant, tenant_device};
    use crate::snapshot::TenantDeviceView;

    fn round(used: u64, denied: u64, throttled_ns: u64, processes: u64) -> Snapshot {
        let device = TenantDeviceView {
            alloc_denied_total: denied,
            throttled_ns_total: throttled_ns,
            processes,
            compute_share_ratio: Some(0.25),
            compute_used_ratio: Some(0.1),
            ..tenant_device(used, Some(1 << 30), Some(used.saturating_add(5)))
        };
        one_tenant(true, device, vec![])
    }

    #[test]
    fn an_interval_keeps_peak_mean_counters_growth_and_settings() {
        let mut agg = Aggregator::default();
        // First round of the monitor: counters already at 7 and 1000 are old.
        agg.fold(&round(100, 7, 1000, 1), 60_000);
        agg.fold(&round(300, 9, 1500, 2), 60_250);
        agg.fold(&round(200, 10, 1600, 1), 60_500);
        let batch = agg.close(120_000).unwrap();
        assert_eq!(batch.tenants.len(), 1);
        let row = &batch.tenants[0];
        assert_eq!((row.start_s, row.span_s, row.rounds, row.active_rounds), (60, 60, 3, 3));
        assert_eq!((row.memory_peak_bytes, row.memory_mean_bytes), (300, 200));
        assert_eq!(row.driver_memory_peak_bytes, Some(305));
        assert_eq!(row.memory_cap_bytes, Some(1 << 30));
        assert_eq!((row.denied, row.throttled_ns), (3, 600));
        assert_eq!(row.processes_peak, 2);
        assert_eq!((row.compute_share_e4, row.compute_used_e4, row.compute_limit_e4), (Some(2500), Some(1000), None));
        assert!(agg.close(130_000).is_none(), "nothing folded since");

        // The next interval counts on from the last round, not from zero.
        agg.fold(&round(0, 12, 1600, 0), 120_250);
        let row = agg.close(180_000).unwrap().tenants.remove(0);
        assert_eq!((row.denied, row.throttled_ns, row.active_rounds), (2, 0, 0));
    }

    #[test]
    fn a_tenants_origin_comes_from_its_admission_and_ends_with_its_allocation() {
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        // What a DRA claim carries names no job or user: no origin.
        assert_eq!(Origin::from_labels(&labels(&[("origin", "kubernetes"), ("pod", "p")])), None);
        let origin = Origin::from_labels(&labels(&[("origin", "slurm"), ("job", "42"), ("user", "alice"), ("account", "")]));
        assert_eq!(origin, Some(Origin { job: Some("42".into()), user: Some("alice".into()), account: None }));
        let tenant = round(1, 0, 0, 1).tenants[0].name.clone();
        let mut agg = Aggregator::default();
        agg.fold(&round(1, 0, 0, 1), 0);
        agg.set_origins([(tenant.clone(), origin.clone().unwrap())]);
        agg.fold(&round(1, 0, 0, 1), 250);
        assert_eq!(agg.close(1000).unwrap().tenants[0].origin, origin);
        // Released while its processes live: still an allocation, still its job's.
        agg.set_origins([(tenant.clone(), origin.clone().unwrap())]);
        agg.fold(&round(1, 0, 0, 1), 1250);
        assert_eq!(agg.close(2000).unwrap().tenants[0].origin, origin);
        // Its allocation went this round (its ledger still in the snapshot):
        // its job's for this round.
        agg.set_origins([]);
        assert!(!agg.holder_changes(&round(1, 0, 0, 1), 2250), "nothing open");
        agg.fold(&round(1, 0, 0, 1), 2250);
        // A ledger of that name made anew at once, seen in the very next
        // round: nobody's, though a tenant of that name was seen each round;
        // the open interval, the job's, closes before it is folded.
        agg.set_origins([]);
        assert!(!agg.holder_changes(&round(1, 0, 0, 1), 2500), "not within the second the interval began");
        assert!(agg.holder_changes(&round(1, 0, 0, 1), 3250));
        assert_eq!(agg.close(3250).unwrap().tenants[0].origin, origin);
        agg.fold(&round(1, 0, 0, 1), 3250);
        assert!(!agg.holder_changes(&round(1, 0, 0, 1), 3500), "the same holder");
        assert_eq!(agg.close(4000).unwrap().tenants[0].origin, None);
        agg.set_origins([]);
        agg.fold(&round(1, 0, 0, 1), 4250);
        assert_eq!(agg.close(5000).unwrap().tenants[0].origin, None);
        // Admitted again (another job of that tenant name): the new job's.
        let other = Origin { job: Some("43".into()), user: Some("bob".into()), account: None };
        agg.set_origins([(tenant.clone(), other.clone())]);
        agg.fold(&round(1, 0, 0, 1), 5250);
        assert_eq!(agg.close(6000).unwrap().tenants[0].origin, Some(other));
    }

    #[test]
    fn a_tenants_team_is_the_monitors_and_a_change_closes_the_interval() {
        let tenant = round(1, 0, 0, 1).tenants[0].name.clone();
        let team = |name: &str| TeamOf::Team(name.into());
        let mut agg = Aggregator::default();
        agg.set_teams([(tenant.clone(), "lab".to_string())]);
        agg.fold(&round(1, 0, 0, 1), 0);
        assert!(!agg.holder_changes(&round(1, 0, 0, 1), 1250), "the same team");
        agg.fold(&round(1, 0, 0, 1), 1250);
        // A reload moves it to another team: the open interval, lab's, closes.
        agg.set_teams([(tenant.clone(), "ops".to_string())]);
        assert!(agg.holder_changes(&round(1, 0, 0, 1), 2250));
        assert_eq!(agg.close(2250).unwrap().tenants[0].team, team("lab"));
        agg.fold(&round(1, 0, 0, 1), 2250);
        // It leaves every team (its admission went): ops' for this round alone.
        agg.set_teams([]);
        assert!(!agg.holder_changes(&round(1, 0, 0, 1), 3250), "kept for the round it went");
        agg.fold(&round(1, 0, 0, 1), 3250);
        agg.set_teams([]);
        assert!(agg.holder_changes(&round(1, 0, 0, 1), 4250));
        assert_eq!(agg.close(4250).unwrap().tenants[0].team, team("ops"));
        agg.fold(&round(1, 0, 0, 1), 4250);
        assert_eq!(agg.close(5000).unwrap().tenants[0].team, TeamOf::NoTeam);
    }

    #[test]
    fn an_intervals_span_is_to_the_nearest_second_at_least_one() {
        let span = |from_ms: u64, to_ms: u64| {
            let mut agg = Aggregator::default();
            agg.fold(&round(1, 0, 0, 1), from_ms);
            agg.close(to_ms).unwrap().tenants[0].span_s
        };
        assert_eq!((span(0, 60_240), span(0, 1_240), span(0, 1_600), span(0, 100)), (60, 1, 2, 1));
    }

    #[test]
    fn a_counter_that_goes_down_was_started_afresh() {
        assert_eq!(counter_growth(10, 15), 5);
        assert_eq!(counter_growth(10, 3), 3);
        assert_eq!(counter_growth(u64::MAX, 0), 0);
        let mut agg = Aggregator::default();
        agg.fold(&round(1, 50, 0, 1), 0);
        agg.fold(&round(1, 2, 0, 1), 250);
        assert_eq!(agg.close(1000).unwrap().tenants[0].denied, 2);
    }

    #[test]
    fn a_tenant_that_appears_later_counts_from_zero_and_one_that_leaves_too() {
        let mut agg = Aggregator::default();
        agg.fold(&Snapshot { nvml: false, devices: vec![], tenants: vec![], untracked_processes: vec![] }, 0);
        agg.fold(&round(1, 4, 0, 1), 250);
        // Gone for a round, then back with a new ledger's counters.
        agg.fold(&Snapshot { nvml: false, devices: vec![], tenants: vec![], untracked_processes: vec![] }, 500);
        agg.fold(&round(1, 1, 0, 1), 750);
        assert_eq!(agg.close(1000).unwrap().tenants[0].denied, 5);
    }

    #[test]
    fn lying_counters_saturate_instead_of_overflowing() {
        let mut agg = Aggregator::default();
        agg.fold(&round(u64::MAX, 0, 0, u64::MAX), 0);
        for i in 0..4 {
            // Up to the top, then down to zero: each swing counts, saturating.
            let v = if i % 2 == 0 { u64::MAX } else { 0 };
            agg.fold(&round(u64::MAX, v, v, u64::MAX), 250 * (i + 1));
        }
        let row = agg.close(2000).unwrap().tenants.remove(0);
        assert_eq!((row.denied, row.throttled_ns), (u64::MAX, u64::MAX));
        assert_eq!((row.memory_peak_bytes, row.memory_mean_bytes), (u64::MAX, u64::MAX));
        assert_eq!(row.processes_peak, u32::MAX);
    }

    #[test]
    fn rows_are_bounded_per_interval() {
        let mut agg = Aggregator::default();
        let tenants = (0..MAX_TENANT_ROWS + 3)
            .map(|i| crate::snapshot::TenantView {
                name: format!("t{i}"),
                devices: vec![tenant_device(1, None, None)],
                processes: vec![],
                reclaimed_processes_total: 0,
            })
            .collect();
        agg.fold(&Snapshot { nvml: false, devices: vec![], tenants, untracked_processes: vec![] }, 0);
        let batch = agg.close(1000).unwrap();
        assert_eq!((batch.tenants.len(), batch.left_out), (MAX_TENANT_ROWS, 3));
    }

    #[test]
    fn ratios_are_ten_thousandths_clamped() {
        assert_eq!(ratio_e4(0.123_45), 1235);
        assert_eq!(ratio_e4(-1.0), 0);
        assert_eq!(ratio_e4(f64::NAN), 0);
        assert_eq!(ratio_e4(1.0035), 10_000);
        assert_eq!(ratio_e4(1e9), 10_000);
    }
}
