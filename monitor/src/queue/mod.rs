//! The admission queue: `gpuslice run --queue … -- CMD` waits until the
//! monitor admits it, then runs CMD on the devices chosen for it;
//! `gpuslice queue` lists the jobs, `gpuslice cancel ID` ends one.
//!
//! **Who runs the queue: the monitor, and only it.** A job's owner writes
//! a request (its job file, [`store`]), which is untrusted input: the
//! monitor reads it, checks it (the owner as the kernel says, a priority
//! within the owner's ceiling from the monitor's configuration), and
//! decides with one pure policy ([`policy`]) from figures only it holds:
//! what each admitted job was given, and the caps it holds for tenants
//! with live processes. It publishes its decisions on the board, which
//! only it writes; a waiting `gpuslice run --queue` reads the board and
//! acts on its own job alone. Nothing a user writes (a job file, a ledger
//! page, a lock) can change another user's place, and no user holds
//! anything another waits on. The monitor's side is
//! `monitor/src/daemon/queue.rs`.
//!
//! **Without a monitor** nothing is admitted: a job waits (as long as its
//! `--timeout` allows) and says why, once. The figures a job could compute
//! alone come from files their owners write, so there is nothing safe to
//! decide with. `gpuslice queue` then lists the jobs whose files the
//! caller can read, as waiting.
//!
//! **What is committed on a device**: for every job the monitor admitted,
//! what it gave the job (its `--memory`, or the whole device), for as long
//! as the job's file lock is held or its tenant has a live process; plus,
//! for every other tenant with a live process, the cap the monitor holds
//! for it (its configuration's, else the cap it pinned when the tenant
//! started) on each device where it holds something ([`commits_on`]): a
//! tenant capped everywhere but working on one device commits on that one. Tenants without a cap commit nothing: the queue
//! cannot know what they will use, and `gpuslice devices` shows them.
//! Commitments stay at or under device memory unless
//! `GPUSLICE_QUEUE_OVERCOMMIT` in the monitor's environment (a ratio from
//! 1 to 10, like `1.5`) lets every device count for that much more.
//!
//! **Teams**: a job whose owner a team's `users` names is that team's,
//! starts only within the team's memory quota on its devices, and runs as
//! a member of the team ([`policy`] for the rule, `daemon/queue.rs` for
//! what a team has committed).
//!
//! **What a job gets**: `CUDA_VISIBLE_DEVICES` set to its devices' UUIDs
//! (an inherited value is replaced: the queue chooses among every GPU NVML
//! lists), `GPUSLICE_MEMORY_LIMIT` set to `--memory`, and a tenant of its
//! own, `queue-<n>`, whose ledger the monitor makes for the job's owner
//! before the job starts, with the job's cap on its devices and 0 on every
//! other, and holds there while the job lives; when the job ends (however:
//! done, cancelled, killed) the monitor removes that ledger.
//!
//! **Why a job waits** is the monitor's answer too: each waiting job on
//! the board has a `reason` from the policy's look ([`policy::look`]),
//! which `gpuslice queue` shows in REASON and a waiting `run --queue`
//! prints, with its place in line, each time either changes.
//!
//! Files: `submit.rs` (`run --queue`), [`policy`] (who starts, where),
//! [`store`] (the files), [`wait`] (sleeping between reads of the board).
//! The verbs that read the queue are their own modules:
//! [`crate::queue_list`] (`gpuslice queue`), [`crate::cancel`]
//! (`gpuslice cancel`).
//!
//! ```text
//!  run --queue ─► <id>.job (0600, flock'ed) ─► monitor, each round: check, policy::admit,
//!                                              make the tenant's ledger ─► board.json
//!  run --queue ◄─ board says "running on …" ◄───────────────────────────────┘  ─► exec
//! ```

pub mod policy;
pub mod store;
mod submit;
pub mod wait;

pub use submit::{submit, QueuedRun, RunOptions};

use crate::nvml::GpuInfo;
use crate::snapshot::TenantView;
use clap::Args;
use policy::{DeviceRoom, Placement};
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
    /// (--queue) Give up waiting after this long (`90s`, `5m`, `1h 30m`, `500ms`, or seconds: `90`) and exit with 75.
    #[arg(long, value_name = "DUR", requires = "queue", value_parser = crate::duration::parse)]
    pub timeout: Option<Duration>,
    /// (--queue) Which devices that fit: the fullest (`binpack`) or the emptiest (`spread`).
    #[arg(long, value_enum, requires = "queue")]
    pub placement: Option<Placement>,
}

/// `GPUSLICE_QUEUE_OVERCOMMIT`: how much more than its memory a device may
/// have committed, as a ratio; 1 when unset.
pub fn overcommit_ratio() -> Result<f64, String> {
    let Some(value) = std::env::var_os("GPUSLICE_QUEUE_OVERCOMMIT") else { return Ok(1.0) };
    let text = value.to_string_lossy();
    match text.parse::<f64>() {
        Ok(ratio) if (1.0..=10.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("GPUSLICE_QUEUE_OVERCOMMIT={text:?}: expected a ratio from 1 to 10, like 1.5")),
    }
}

/// What each device can hold, and what is committed on it. A GPU split
/// into MIG instances is not a device of its own: CUDA cannot use it
/// whole, and its memory is its instances'; they are the devices.
pub fn rooms(gpus: &[GpuInfo], overcommit: f64, committed: &HashMap<String, u64>) -> Vec<DeviceRoom> {
    let partitioned: HashSet<&str> = gpus.iter().filter_map(|g| g.parent_uuid.as_deref()).collect();
    gpus.iter()
        .filter(|g| !partitioned.contains(g.uuid.as_str()))
        .map(|g| DeviceRoom {
            uuid: g.uuid.clone(),
            capacity_bytes: (g.total_bytes as f64 * overcommit) as u64,
            committed_bytes: committed.get(&g.uuid).copied().unwrap_or(0),
        })
        .collect()
}

/// Whether a live tenant's cap counts as committed on `device`: where it
/// holds something (a context, memory). A tenant capped on every device it
/// can see but working on one commits on that one; if it starts on another
/// later, it commits there from then on.
pub fn commits_on(device: &crate::snapshot::TenantDeviceView) -> bool {
    device.memory_used_bytes > 0
}

/// Memory committed per device UUID, as a user without the monitor can
/// estimate it for `gpuslice devices`: the caps in the ledgers of tenants
/// with a live process (what their pages say: a display, never a
/// decision). With a monitor, its board's figures are shown instead.
pub fn estimated_committed_bytes(tenants: &[TenantView]) -> HashMap<String, u64> {
    let mut committed: HashMap<String, u64> = HashMap::new();
    for tenant in tenants.iter().filter(|t| t.processes.iter().any(|p| p.alive)) {
        for device in tenant.devices.iter().filter(|d| commits_on(d)) {
            if let Some(cap) = device.memory_limit_bytes {
                let entry = committed.entry(device.uuid.clone()).or_default();
                *entry = entry.saturating_add(cap);
            }
        }
    }
    committed
}

/// What is known of the queue beside `dir`'s ledgers: the monitor's board
/// if a monitor runs, else the jobs whose files the caller can read (all
/// waiting, nothing committed).
pub struct QueueView {
    pub jobs: Vec<Job>,
    /// Memory committed per device UUID, from the board.
    pub committed_bytes: Option<HashMap<String, u64>>,
    /// Why the view is partial, if it is (no monitor).
    pub partial: Option<String>,
}

/// The queue beside `dir`'s ledgers (empty if it was never made).
pub fn view(dir: &Path) -> Result<QueueView, String> {
    let queue = Queue::at(dir);
    if !queue.exists() {
        return Ok(QueueView { jobs: Vec::new(), committed_bytes: None, partial: None });
    }
    queue.check_safe()?;
    if let Some(board) = queue.live_board() {
        return Ok(QueueView { jobs: board.jobs, committed_bytes: Some(board.committed_bytes.into_iter().collect()), partial: None });
    }
    let (mut jobs, problems) = queue.readable_jobs();
    jobs.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
    for problem in problems {
        eprintln!("gpuslice: warning: queue file {problem}");
    }
    let partial = format!(
        "no monitor runs for {}: listed are the jobs whose files you can read, all waiting (only the monitor admits jobs)",
        queue.dir().display()
    );
    Ok(QueueView { jobs, committed_bytes: None, partial: Some(partial) })
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

    #[test]
    fn a_mig_partitioned_gpu_offers_its_instances_not_itself() {
        let gpu = |uuid: &str, parent: Option<&str>, total_bytes| GpuInfo {
            uuid: uuid.into(),
            parent_uuid: parent.map(String::from),
            total_bytes,
            ..GpuInfo::default()
        };
        let gpus = [gpu("GPU-0", None, 8), gpu("MIG-a", Some("GPU-0"), 4), gpu("MIG-b", Some("GPU-0"), 2), gpu("GPU-1", None, 8)];
        let uuids: Vec<String> = rooms(&gpus, 1.0, &HashMap::new()).into_iter().map(|r| r.uuid).collect();
        assert_eq!(uuids, ["MIG-a", "MIG-b", "GPU-1"]);
    }
}
