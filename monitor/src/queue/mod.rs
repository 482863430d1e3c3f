//! The admission queue: `gpuslice run --queue … -- CMD` waits until its
//! slice fits on this host, then runs CMD on the devices chosen for it;
//! `gpuslice queue` lists the jobs, `gpuslice cancel ID` ends one.
//!
//! **Who runs the queue: nobody in particular.** There is no queue daemon,
//! and the monitor plays no part: each waiting `gpuslice run --queue` is its
//! job's holder. Every decision is taken under one lock file by whichever
//! job looks, from what is on disk (the job files, [`store`]) and in the
//! ledgers, with one pure policy ([`policy`]) that every job computes alike,
//! and each job acts only on itself. So the queue works on a host where no
//! monitor runs (as memory caps do), a monitor restart loses nothing, and
//! a crash cannot leak a reservation: a job exists exactly as long as the
//! kernel says its holder's file lock does, and the holder *is* the job
//! (it execs the command, which inherits the lock, as do its children).
//!
//! **What is committed on a device**: the caps of running jobs (a job
//! without `--memory` commits the whole device), plus, for every tenant
//! outside those jobs with a live process, its cap on each device in its
//! ledger. Tenants without a cap commit nothing: the queue cannot know what
//! they will use, and `gpuslice devices` shows them. Commitments stay at or
//! under device memory unless `GPUSLICE_QUEUE_OVERCOMMIT` (a ratio from 1
//! to 10, like `1.5`) lets every device count for that much more.
//!
//! **What a job gets**: `CUDA_VISIBLE_DEVICES` set to its devices' UUIDs
//! (an inherited value is replaced: the queue chooses among every GPU NVML
//! lists), `GPUSLICE_MEMORY_LIMIT` set to `--memory`, and a tenant of its
//! own, `queue-<n>` (the lowest number no live job uses, so that ledgers are
//! reused, not one left per job ever run), since a cap belongs to a tenant
//! (with `--tenant`, jobs of one tenant share one cap).
//!
//! Files: `submit.rs` (`run --queue`), `list.rs` (`gpuslice queue`),
//! `cancel.rs` (`gpuslice cancel`), [`policy`] (who starts, where),
//! [`store`] (the files), [`wait`] (sleeping between looks).
//!
//! Data flow of one look (see [`wait`] for when a waiting job looks):
//!
//! ```text
//!  lock queue/lock ─► job files (stale ones removed) ─► ledgers ─► committed per device
//!                  ─► policy::admit ─► this job admitted? write "running", unlock, exec
//!                                      else unlock, sleep until a job leaves (or a while)
//! ```

mod cancel;
mod list;
pub mod policy;
pub mod store;
mod submit;
pub mod wait;

pub use cancel::{cancel, CancelArgs};
pub use list::{list, QueueListArgs};
pub use submit::submit;

use crate::discovery::{self, Layout};
use crate::snapshot::TenantView;
use clap::Args;
use policy::Placement;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;
use store::{Job, JobState, Queue};

/// Most GPUs one job may ask for.
const MAX_GPUS: u32 = 64;

/// The queue's options of `gpuslice run` (`--priority` is `run`'s own).
#[derive(Args, Debug, Default)]
pub struct QueueArgs {
    /// Wait in this host's admission queue until the job fits (see `gpuslice queue`).
    #[arg(long)]
    pub queue: bool,
    /// (--queue) How many GPUs the job needs, each with --memory free (default 1).
    #[arg(long, value_name = "N", requires = "queue", value_parser = clap::value_parser!(u32).range(1..=MAX_GPUS as i64))]
    pub gpus: Option<u32>,
    /// (--queue) A name to find the job by in `gpuslice queue` (`[A-Za-z0-9._-]{1,63}`).
    #[arg(long, value_name = "NAME", requires = "queue")]
    pub name: Option<String>,
    /// (--queue) Give up waiting after this long (`90s`, `5m`, `1h`, `500ms`) and exit with 75.
    #[arg(long, value_name = "DUR", requires = "queue", value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// (--queue) Which devices that fit: the fullest (`binpack`) or the emptiest (`spread`).
    #[arg(long, value_enum, requires = "queue")]
    pub placement: Option<Placement>,
}

/// `90s`, `5m`, `1h`, `500ms`: a whole number and a unit.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let expected = "expected a whole number and a unit: 500ms, 90s, 5m or 1h";
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().map_err(|_| format!("{text:?}: {expected}"))?;
    let millis_per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{text:?}: {expected}")),
    };
    number.checked_mul(millis_per).map(Duration::from_millis).ok_or_else(|| format!("{text:?}: too long"))
}

/// Memory committed per device UUID: running jobs' caps (or whole devices,
/// `capacity_bytes`), and capped live tenants outside those jobs. A tenant
/// that is also a running job's is counted once, by the larger figure.
pub fn committed_bytes(capacity_bytes: &HashMap<String, u64>, jobs: &[Job], tenants: &[TenantView]) -> HashMap<String, u64> {
    let mut by_device_tenant: HashMap<(String, String), u64> = HashMap::new();
    for job in jobs.iter().filter(|j| j.state == JobState::Running) {
        for uuid in &job.devices {
            let bytes = job.memory_bytes.unwrap_or_else(|| capacity_bytes.get(uuid).copied().unwrap_or(u64::MAX));
            let entry = by_device_tenant.entry((uuid.clone(), job.tenant.clone())).or_default();
            *entry = entry.saturating_add(bytes);
        }
    }
    for tenant in tenants.iter().filter(|t| t.processes.iter().any(|p| p.alive)) {
        for device in &tenant.devices {
            if let Some(cap) = device.memory_limit_bytes {
                let entry = by_device_tenant.entry((device.uuid.clone(), tenant.name.clone())).or_default();
                *entry = (*entry).max(cap);
            }
        }
    }
    let mut committed: HashMap<String, u64> = HashMap::new();
    for ((uuid, _), bytes) in by_device_tenant {
        let entry = committed.entry(uuid).or_default();
        *entry = entry.saturating_add(bytes);
    }
    committed
}

/// The tenants of the ledgers in `dir`, as `status` sees them (no NVML).
pub fn tenants(dir: &Path) -> Vec<TenantView> {
    let _ = crate::daemon::sigbus::install();
    let Ok((ledgers, _)) = discovery::open_ledgers(dir, Layout::Flat) else { return Vec::new() };
    let refs: Vec<&ledger::Ledger> = ledgers.iter().collect();
    crate::snapshot::collect(&refs, None, &mut crate::host::LockCache::default()).tenants
}

/// The live jobs of the queue beside `dir`'s ledgers (none if it was never used).
pub fn live_jobs(dir: &Path) -> Result<Vec<Job>, String> {
    let queue = Queue::at(dir);
    if !queue.exists() {
        return Ok(Vec::new());
    }
    let lock = queue.lock()?;
    let (jobs, problems) = queue.jobs(&lock);
    for problem in problems {
        eprintln!("gpuslice: warning: queue file {problem}");
    }
    Ok(jobs)
}

/// The jobs running on each device, by UUID: for `gpuslice devices`.
pub fn jobs_by_device(jobs: &[Job]) -> HashMap<String, Vec<&Job>> {
    let mut by_device: HashMap<String, Vec<&Job>> = HashMap::new();
    for job in jobs.iter().filter(|j| j.state == JobState::Running) {
        let unique: HashSet<&String> = job.devices.iter().collect();
        for uuid in unique {
            by_device.entry(uuid.clone()).or_default().push(job);
        }
    }
    by_device
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::fixtures;

    #[test]
    fn durations_are_a_number_and_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "5", "s", "1.5s", "-1s", "5 m", "5min"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("500ms, 90s, 5m or 1h"), "{bad}: {e}");
        }
    }

    pub(super) fn running(id: u64, tenant: &str, devices: &[&str], memory_bytes: Option<u64>) -> Job {
        Job {
            id,
            name: None,
            priority: 0,
            gpus: devices.len() as u32,
            memory_bytes,
            placement: Placement::Binpack,
            tenant: tenant.into(),
            uid: 0,
            pid: 1,
            submitted_unix_ms: 0,
            state: JobState::Running,
            devices: devices.iter().map(|d| d.to_string()).collect(),
            started_unix_ms: Some(0),
            command: vec![],
        }
    }

    #[test]
    fn committed_counts_jobs_and_capped_live_tenants_once() {
        let capacity: HashMap<String, u64> = [("GPU-0".to_string(), 100), ("GPU-1".to_string(), 100)].into();
        let jobs = vec![running(1, "queue-1", &["GPU-0", "GPU-1"], Some(10)), running(2, "queue-2", &["GPU-1"], None)];
        let alive = |alive| crate::snapshot::ProcessView {
            pid: 1,
            ns_pid: 1,
            slot: 0,
            alive,
            confirmed: true,
            memory_used_bytes: 0,
            driver_memory_used_bytes: None,
            sm_utilization_ratio: None,
            start_time_ticks: 0,
            devices: vec![],
        };
        // team-a: capped at 30 on GPU-0, alive. queue-1's own ledger: cap 10, alive (counted once).
        let mut tenants = fixtures::one_tenant(false, fixtures::tenant_device(0, Some(30), None), vec![alive(true)]).tenants;
        let mut own = tenants[0].clone();
        own.name = "queue-1".into();
        own.devices[0].memory_limit_bytes = Some(10);
        let mut gone = tenants[0].clone();
        gone.name = "team-gone".into();
        gone.processes = vec![alive(false)];
        tenants.extend([own, gone]);
        let committed = committed_bytes(&capacity, &jobs, &tenants);
        assert_eq!(committed.get("GPU-0"), Some(&40));
        assert_eq!(committed.get("GPU-1"), Some(&110), "a whole-device job commits all of it");
    }
}
