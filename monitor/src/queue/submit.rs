//! `gpuslice run --queue`: checks the request, queues it, waits for room
//! (looking under the queue lock, see [`look`]), then execs the command with
//! its devices and cap, handing it the job's lock.

use super::policy::{self, Ask, DeviceRoom, Placement, Request};
use super::store::{self, Job, JobState, Queue, QueueLock};
use super::{committed_bytes, tenants, wait};
use crate::discovery;
use crate::nvml::{GpuInfo, GpuReader};
use crate::run::RunArgs;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `gpuslice run` exits with this when `--timeout` passes first (EX_TEMPFAIL).
pub const EXIT_TIMED_OUT: u8 = 75;
/// `gpuslice run` exits with this when the request can never fit here.
pub const EXIT_REFUSED: u8 = 2;

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

/// What each device can hold, and what is committed on it. A GPU split
/// into MIG instances is not a device of its own: CUDA cannot use it
/// whole, and its memory is its instances'; they are the devices.
fn rooms(gpus: &[GpuInfo], overcommit: f64, committed: &HashMap<String, u64>) -> Vec<DeviceRoom> {
    let partitioned: std::collections::HashSet<&str> = gpus.iter().filter_map(|g| g.parent_uuid.as_deref()).collect();
    gpus.iter()
        .filter(|g| !partitioned.contains(g.uuid.as_str()))
        .map(|g| DeviceRoom {
            uuid: g.uuid.clone(),
            capacity_bytes: (g.total_bytes as f64 * overcommit) as u64,
            committed_bytes: committed.get(&g.uuid).copied().unwrap_or(0),
        })
        .collect()
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
            priority: run.queue_priority()?,
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
    check_program(&run.command[0])?;
    let queue = Queue::at(&dir);
    queue.create()?;
    let (held, mut job) = enqueue(&queue, &submission, run)?;
    eprintln!("gpuslice: queued as job {} (gpuslice queue lists it, gpuslice cancel {} ends it)", job.id, job.id);
    let host = Host { dir, gpus, overcommit, capacity_bytes };
    let deadline = submission.timeout.map(|t| Instant::now() + t);
    let devices = match wait_for_room(&queue, &held, &mut job, &host, deadline)? {
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

/// Whether `program` names something `exec` can run, as the shell would
/// find it: a path, or a name on `PATH`. A job is not queued for hours to
/// fail on a typo.
fn check_program(program: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |path: &std::path::Path| path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let found = if program.contains('/') {
        runnable(std::path::Path::new(program))
    } else {
        std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| runnable(&dir.join(program))))
    };
    if found {
        Ok(())
    } else {
        Err(format!("cannot run {program:?}: no such executable file (on PATH, or at that path); nothing was queued"))
    }
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
    deadline: Option<Instant>,
) -> Result<Waited, String> {
    // Made only once the job has to wait: a job that fits at once never
    // pays for one (closing an inotify watch, as `exec` does, can take
    // milliseconds while the kernel waits for its readers).
    let mut watch: Option<wait::QueueWatch> = None;
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
        let Some(watch) = &watch else {
            // Look again now that the watch sees every later change: one
            // made between the first look and the watch would be missed.
            watch = Some(wait::QueueWatch::new(queue.dir()));
            continue;
        };
        let recheck = watch.recheck_after(position);
        watch.wait(left.map_or(recheck, |l| l.min(recheck)));
        std::thread::sleep(wait::stagger(position));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::tests::running;

    #[test]
    fn a_program_must_be_found_before_the_job_is_queued() {
        assert_eq!(check_program("sh"), Ok(()));
        assert_eq!(check_program("/bin/sh"), Ok(()));
        let e = check_program("no-such-program-here").unwrap_err();
        assert!(e.contains("\"no-such-program-here\"") && e.contains("nothing was queued"), "{e}");
        let plain = std::env::temp_dir().join(format!("gpuslice-not-executable-{}", std::process::id()));
        std::fs::write(&plain, b"echo").unwrap();
        std::fs::set_permissions(&plain, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        assert!(check_program(plain.to_str().unwrap()).is_err(), "not executable");
        let _ = std::fs::remove_file(&plain);
    }

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

    #[test]
    fn each_job_gets_the_lowest_tenant_no_live_job_uses() {
        assert_eq!(free_tenant(&[]), "queue-0");
        let live = [running(1, "queue-0", &[], None), running(2, "queue-2", &[], None), running(3, "team-a", &[], None)];
        assert_eq!(free_tenant(&live), "queue-1");
    }
}
