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
//! own, `queue-<n>` (see [`free_tenant`]), since a cap belongs to a tenant
//! (with `--tenant`, jobs of one tenant share one cap).
//!
//! Data flow of one look (see [`wait`] for when a waiting job looks):
//!
//! ```text
//!  lock queue/lock ─► job files (stale ones removed) ─► ledgers ─► committed per device
//!                  ─► policy::admit ─► this job admitted? write "running", unlock, exec
//!                                      else unlock, sleep until a job leaves (or a while)
//! ```

pub mod policy;
pub mod store;
pub mod wait;

use crate::discovery::{self, Layout};
use crate::nvml::{GpuInfo, GpuReader};
use crate::run::RunArgs;
use crate::snapshot::TenantView;
use clap::Args;
use policy::{Ask, DeviceRoom, Placement, Request};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use store::{Job, JobState, Queue, QueueLock};

/// `gpuslice run` exits with this when `--timeout` passes first (EX_TEMPFAIL).
pub const EXIT_TIMED_OUT: u8 = 75;
/// `gpuslice run` exits with this when the request can never fit here.
pub const EXIT_REFUSED: u8 = 2;
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

/// `GPUSLICE_QUEUE_OVERCOMMIT`: how much more than its memory a device may
/// have committed, as a ratio; 1 when unset.
fn overcommit_ratio() -> Result<f64, String> {
    let Some(value) = std::env::var_os("GPUSLICE_QUEUE_OVERCOMMIT") else { return Ok(1.0) };
    let text = value.to_string_lossy();
    match text.parse::<f64>() {
        Ok(ratio) if (1.0..=10.0).contains(&ratio) => Ok(ratio),
        _ => Err(format!("GPUSLICE_QUEUE_OVERCOMMIT={text:?}: expected a ratio from 1 to 10, like 1.5")),
    }
}

/// What each device can hold, and what is committed on it.
fn rooms(gpus: &[GpuInfo], overcommit: f64, committed: &HashMap<String, u64>) -> Vec<DeviceRoom> {
    gpus.iter()
        .map(|g| DeviceRoom {
            uuid: g.uuid.clone(),
            capacity_bytes: (g.total_bytes as f64 * overcommit) as u64,
            committed_bytes: committed.get(&g.uuid).copied().unwrap_or(0),
        })
        .collect()
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

/// A job as admission sees it.
fn request_of(job: &Job) -> Request {
    Request {
        id: job.id,
        priority: job.priority,
        gpus: job.gpus,
        ask: job.memory_bytes.map_or(Ask::WholeDevice, Ask::Bytes),
        placement: job.placement,
    }
}

/// The job `run` describes, before it has an id.
struct Submission {
    gpus: u32,
    memory_bytes: Option<u64>,
    placement: Placement,
    priority: i32,
    name: Option<String>,
    timeout: Option<Duration>,
}

impl Submission {
    fn from_args(run: &RunArgs) -> Result<Submission, String> {
        let memory_bytes = match &run.memory {
            None => None,
            Some(text) => match ledger::units::parse_memory_limit(text).map_err(|e| format!("--memory {text:?}: {e}"))? {
                ledger::units::MemoryLimit::AllDevices(bytes) => Some(bytes),
                ledger::units::MemoryLimit::PerDevice(_) => {
                    return Err(format!(
                        "--memory {text:?}: with --queue, give one size for each of the job's GPUs (like 8GiB); \
                         the queue chooses the devices, so a per-device list cannot name them"
                    ))
                }
            },
        };
        if let Some(name) = &run.queue.name {
            ledger::units::validate_tenant_name(name).map_err(|e| format!("--name {name:?}: {e}"))?;
        }
        if run.compute_limit.as_deref().is_some_and(|l| l.contains('=')) {
            return Err("--compute-limit with --queue: give one percentage for every GPU (like 30); the queue chooses the devices".into());
        }
        Ok(Submission {
            gpus: run.queue.gpus.unwrap_or(1),
            memory_bytes,
            placement: run.queue.placement.unwrap_or_default(),
            priority: run.priority.unwrap_or(0),
            name: run.queue.name.clone(),
            timeout: run.queue.timeout,
        })
    }

    fn ask(&self) -> Ask {
        self.memory_bytes.map_or(Ask::WholeDevice, Ask::Bytes)
    }
}

/// NVML, from simgpu with `--sim`.
fn read_devices(sim: bool) -> Result<Vec<GpuInfo>, String> {
    let lib = if sim { Some(crate::libs::find_library("libsimgpu.so", "SIMGPU_LIB")?) } else { None };
    let gpus = GpuReader::load(lib.as_deref())
        .and_then(|mut r| r.read())
        .map_err(|e| format!("the queue needs NVML to know this host's GPUs, and NVML is not available: {e}"))?;
    if gpus.is_empty() {
        return Err("NVML reports no GPU on this host: nothing to queue for".into());
    }
    Ok(gpus)
}

/// `gpuslice run --queue …`: waits for room, then execs the command.
pub fn submit(run: &RunArgs) -> Result<ExitCode, String> {
    let submission = Submission::from_args(run)?;
    if run.command.is_empty() {
        return Err("no command given after --".into());
    }
    let dir = match &run.dir {
        Some(dir) => std::path::absolute(dir).map_err(|e| format!("--dir {}: {e}", dir.display()))?,
        None => discovery::ledger_dir(None),
    };
    let gpus = read_devices(run.sim)?;
    let overcommit = overcommit_ratio()?;
    let empty = rooms(&gpus, overcommit, &HashMap::new());
    if let Some(why) = policy::never_fits(&empty, submission.gpus, submission.ask()) {
        eprintln!("gpuslice: job refused: it can never start on this host: {why}");
        return Ok(ExitCode::from(EXIT_REFUSED));
    }
    let capacity_bytes = empty.into_iter().map(|d| (d.uuid, d.capacity_bytes)).collect();
    // Checked now, so that a mistake is not found after the wait.
    let mut cmd = crate::run::command(run)?;
    let queue = Queue::at(&dir);
    queue.create()?;
    let watch = wait::QueueWatch::new(queue.dir());
    let (held, mut job) = enqueue(&queue, &submission, run)?;
    eprintln!("gpuslice: queued as job {} (gpuslice queue lists it, gpuslice cancel {} ends it)", job.id, job.id);
    let host = Host { dir, gpus, overcommit, capacity_bytes };
    let deadline = submission.timeout.map(|t| Instant::now() + t);
    let devices = match wait_for_room(&queue, &held, &mut job, &host, &watch, deadline)? {
        Waited::Admitted(devices) => devices,
        Waited::TimedOut => {
            eprintln!("gpuslice: job {} gave up: it did not fit within --timeout", job.id);
            return Ok(ExitCode::from(EXIT_TIMED_OUT));
        }
    };
    cmd.env("CUDA_VISIBLE_DEVICES", devices.join(","));
    cmd.env("GPUSLICE_TENANT", &job.tenant);
    held.keep_across_exec()?;
    // The command inherits the job's lock: the job lasts as long as it does.
    let error = crate::libs::exec(cmd);
    drop(held);
    Err(error)
}

/// How a wait ended.
enum Waited {
    /// The job was admitted on these devices (UUIDs); its file says so.
    Admitted(Vec<String>),
    /// `--timeout` passed first; the job's file is gone.
    TimedOut,
}

/// Looks, and sleeps between looks, until `job` is admitted or `deadline` passes.
fn wait_for_room(
    queue: &Queue,
    held: &store::HeldJob,
    job: &mut Job,
    host: &Host,
    watch: &wait::QueueWatch,
    deadline: Option<Instant>,
) -> Result<Waited, String> {
    loop {
        let lock = queue.lock()?;
        let position = match look(queue, &lock, host, job.id) {
            Look::Start(devices) => {
                job.state = JobState::Running;
                job.devices = devices.clone();
                job.started_unix_ms = Some(store::unix_ms());
                held.write(job, &lock)?;
                return Ok(Waited::Admitted(devices));
            }
            Look::Wait { position } => position,
        };
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            held.remove_file(&lock);
            return Ok(Waited::TimedOut);
        }
        drop(lock);
        let recheck = watch.recheck_after(position);
        watch.wait(left.map_or(recheck, |l| l.min(recheck)));
    }
}

/// Takes an id and writes the job's file.
fn enqueue(queue: &Queue, submission: &Submission, run: &RunArgs) -> Result<(store::HeldJob, Job), String> {
    let lock = queue.lock()?;
    let id = queue.next_id(&lock)?;
    let tenant = match &run.tenant {
        Some(tenant) => tenant.clone(),
        None => free_tenant(&queue.jobs(&lock).0),
    };
    let job = Job {
        id,
        name: submission.name.clone(),
        priority: submission.priority,
        gpus: submission.gpus,
        memory_bytes: submission.memory_bytes,
        placement: submission.placement,
        tenant,
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
        pid: std::process::id(),
        submitted_unix_ms: store::unix_ms(),
        state: JobState::Waiting,
        devices: Vec::new(),
        started_unix_ms: None,
        command: store::shown_command(&run.command),
    };
    let held = queue.create_job(&job, &lock)?;
    Ok((held, job))
}

/// What a waiting job knows of its host, read once: the ledger directory
/// and NVML's devices with what each can hold.
struct Host {
    dir: PathBuf,
    gpus: Vec<GpuInfo>,
    overcommit: f64,
    capacity_bytes: HashMap<String, u64>,
}

/// What one look decided for a job.
enum Look {
    /// Start now on these devices (UUIDs).
    Start(Vec<String>),
    /// Wait; `position` jobs start before it (0: it is next).
    Wait { position: usize },
}

/// A tenant of its own for a new job: `queue-<n>`, the lowest `n` no live
/// job uses. Numbers are reused, so the ledger directory holds as many
/// queue tenants as jobs ever ran at once, not one ledger per job ever run;
/// a job's first process, alone in its tenant, sets the tenant's cap anew.
fn free_tenant(live: &[Job]) -> String {
    let used: HashSet<&str> = live.iter().map(|j| j.tenant.as_str()).collect();
    (0..).map(|n| format!("queue-{n}")).find(|t| !used.contains(t.as_str())).unwrap_or_default()
}

/// One look under the lock.
fn look(queue: &Queue, lock: &QueueLock, host: &Host, id: u64) -> Look {
    let (jobs, _) = queue.jobs(lock);
    let committed = committed_bytes(&host.capacity_bytes, &jobs, &tenants(&host.dir));
    let rooms = rooms(&host.gpus, host.overcommit, &committed);
    // A request that can never fit here (a file written by hand, or for
    // other devices) would reserve everything and block every job behind
    // it: it is left out.
    let empty: Vec<DeviceRoom> = rooms.iter().map(|r| DeviceRoom { committed_bytes: 0, ..r.clone() }).collect();
    let mut waiting: Vec<Request> = jobs
        .iter()
        .filter(|j| j.state == JobState::Waiting)
        .map(request_of)
        .filter(|r| policy::never_fits(&empty, r.gpus, r.ask).is_none())
        .collect();
    if let Some(admission) = policy::admit(&rooms, &waiting).into_iter().find(|a| a.id == id) {
        return Look::Start(admission.devices);
    }
    policy::in_order(&mut waiting);
    Look::Wait { position: waiting.iter().position(|r| r.id == id).unwrap_or(waiting.len()) }
}

/// `gpuslice queue [--dir DIR] [--json]`.
#[derive(Args)]
pub struct QueueListArgs {
    /// The ledger directory the queue lives in (default: GPUSLICE_DIR, else /run/gpuslice or the per-user fallback).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `gpuslice cancel ID [--dir DIR]`.
#[derive(Args)]
pub struct CancelArgs {
    /// The job's id, as `gpuslice queue` shows it.
    #[arg(value_name = "ID")]
    pub id: String,
    /// The ledger directory the queue lives in.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Lists the live jobs, in admission order for the waiting ones.
pub fn list(args: QueueListArgs) -> Result<ExitCode, String> {
    let dir = discovery::ledger_dir(args.dir.as_deref());
    let mut jobs = live_jobs(&dir)?;
    jobs.sort_by_key(|j| (j.state == JobState::Waiting, std::cmp::Reverse(j.priority), j.id));
    if args.json {
        let text = serde_json::to_string_pretty(&serde_json::json!({ "jobs": jobs })).map_err(|e| e.to_string())?;
        println!("{text}");
    } else {
        print!("{}", table(&jobs, store::unix_ms()));
    }
    Ok(ExitCode::SUCCESS)
}

fn table(jobs: &[Job], now_unix_ms: u64) -> String {
    let mut rows = vec![["ID", "NAME", "STATE", "PRIORITY", "GPUS", "MEMORY", "TENANT", "SINCE", "DEVICES", "COMMAND"].map(String::from).to_vec()];
    for job in jobs {
        let since_ms = job.started_unix_ms.unwrap_or(job.submitted_unix_ms);
        rows.push(vec![
            job.id.to_string(),
            job.name.clone().unwrap_or_else(|| "-".into()),
            format!("{:?}", job.state).to_lowercase(),
            job.priority.to_string(),
            job.gpus.to_string(),
            job.memory_bytes.map_or("whole GPU".into(), crate::status::human_bytes),
            job.tenant.clone(),
            format!("{}s", now_unix_ms.saturating_sub(since_ms) / 1000),
            if job.devices.is_empty() { "-".into() } else { job.devices.join(",") },
            job.command.join(" "),
        ]);
    }
    let mut out = String::new();
    crate::status::render_rows(&mut out, &rows);
    out
}

/// Ends a job: a waiting one leaves the queue, a running one's command
/// gets SIGTERM. Only the job's owner (or root) may.
pub fn cancel(args: CancelArgs) -> Result<ExitCode, String> {
    let id: u64 = args.id.parse().map_err(|_| format!("{:?} is not a job id: expected a whole number, as `gpuslice queue` shows", args.id))?;
    let dir = discovery::ledger_dir(args.dir.as_deref());
    let queue = Queue::at(&dir);
    let none = || format!("no job {id} in the queue at {} (`gpuslice queue` lists them)", queue.dir().display());
    if !queue.exists() {
        return Err(none());
    }
    let lock = queue.lock()?;
    let job = queue.jobs(&lock).0.into_iter().find(|j| j.id == id).ok_or_else(none)?;
    let path = queue.dir().join(format!("{id}{}", store::JOB_SUFFIX));
    let file = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    if me != 0 && file.uid() != me {
        return Err(format!("job {id} belongs to uid {}, not to you", file.uid()));
    }
    // The pid is what the file says: act only if that process has the file open.
    if !has_open(job.pid, file.dev(), file.ino()) {
        return Err(format!("job {id}: its process {} does not hold its file; it is ending", job.pid));
    }
    // SAFETY: kill(2) on the pid checked above.
    if unsafe { libc::kill(job.pid as libc::pid_t, libc::SIGTERM) } != 0 {
        return Err(format!("job {id}: cannot signal process {}: {}", job.pid, std::io::Error::last_os_error()));
    }
    let _ = queue.remove(id, &lock);
    match job.state {
        JobState::Waiting => println!("job {id} cancelled while waiting"),
        JobState::Running => println!("job {id} cancelled: SIGTERM sent to its command (pid {})", job.pid),
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether host process `pid` has the file (`dev`, `ino`) open.
fn has_open(pid: u32, dev: u64, ino: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    entries.flatten().any(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino))
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
    fn each_job_gets_the_lowest_tenant_no_live_job_uses() {
        assert_eq!(free_tenant(&[]), "queue-0");
        let live = [running(1, "queue-0", &[], None), running(2, "queue-2", &[], None), running(3, "team-a", &[], None)];
        assert_eq!(free_tenant(&live), "queue-1");
    }

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

    fn running(id: u64, tenant: &str, devices: &[&str], memory_bytes: Option<u64>) -> Job {
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
