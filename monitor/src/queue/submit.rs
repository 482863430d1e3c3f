//! `gpuslice run --queue`: checks the request, writes its job file, waits
//! for the monitor's decision on the board (see [`super::store`]), then
//! execs the command with its devices and tenant, handing it the job's
//! lock. Every wait here is bounded by `--timeout`: there is no lock to
//! wait for, only the board to read again.

use super::policy::{self, Ask, Placement};
use super::store::{self, Job, JobState, Queue};
use super::{overcommit_ratio, rooms, wait, QueueArgs};
use crate::discovery;
use crate::nvml::{GpuInfo, GpuReader};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

/// `gpuslice run` exits with this when `--timeout` passes first (EX_TEMPFAIL).
pub const EXIT_TIMED_OUT: u8 = 75;
/// `gpuslice run` exits with this when the request can never fit here, or
/// the monitor refuses it.
pub const EXIT_REFUSED: u8 = 2;

/// What `gpuslice run --queue` hands the queue: its options as the queue
/// reads them, and its command as `run` would start it. The `run` verb
/// implements it where the verbs are put together (`main.rs`), so that the
/// queue, which the monitor shares, depends on no verb.
pub trait QueuedRun {
    /// The options, as given.
    fn options(&self) -> RunOptions<'_>;
    /// `--priority` as one number for the job, checked.
    fn priority(&self) -> Result<i32, String>;
    /// The command with the shim's environment set, every option checked.
    fn command(&self) -> Result<Command, String>;
}

/// The options of `gpuslice run` that the queue reads.
pub struct RunOptions<'a> {
    pub memory: Option<&'a str>,
    pub compute_limit: Option<&'a str>,
    pub tenant: Option<&'a str>,
    pub dir: Option<&'a Path>,
    pub sim: bool,
    pub queue: &'a QueueArgs,
    /// The command and its arguments.
    pub command: &'a [String],
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
    fn from_args(run: &RunOptions, priority: impl FnOnce() -> Result<i32, String>) -> Result<Submission, String> {
        let memory_bytes = match run.memory {
            None => None,
            Some(text) => match ledger::units::parse_memory(text).map_err(|e| format!("--memory {text:?}: {e}"))?.single() {
                Some(bytes) => Some(bytes),
                None => {
                    return Err(format!(
                        "--memory {text:?}: with --queue, give one size for each of the job's GPUs (like 8GiB); \
                         the queue chooses the devices, so a per-device list cannot name them"
                    ))
                }
            },
        };
        if run.tenant.is_some() {
            return Err("--tenant with --queue: the queue gives each job a tenant of its own, whose caps the monitor sets; \
                        drop --tenant"
                .into());
        }
        if let Some(name) = &run.queue.name {
            ledger::units::validate_tenant_name(name).map_err(|e| format!("--name {name:?}: {e}"))?;
        }
        if run.compute_limit.is_some_and(|l| l.contains('=')) {
            return Err("--compute-limit with --queue: give one percentage for every GPU (like 30); the queue chooses the devices".into());
        }
        Ok(Submission {
            gpus: run.queue.gpus.unwrap_or(1),
            memory_bytes,
            placement: run.queue.placement.unwrap_or_default(),
            priority: priority()?,
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

/// `gpuslice run --queue …`: waits for the monitor to admit the job, then
/// execs the command.
pub fn submit(queued: &impl QueuedRun) -> Result<ExitCode, String> {
    let run = queued.options();
    let submission = Submission::from_args(&run, || queued.priority())?;
    if run.command.is_empty() {
        return Err("no command given after --".into());
    }
    let dir = match run.dir {
        Some(dir) => std::path::absolute(dir).map_err(|e| format!("--dir {}: {e}", dir.display()))?,
        None => discovery::ledger_dir(None),
    };
    let gpus = read_devices(run.sim)?;
    // The monitor decides with its own ratio; this one only refuses at
    // once what cannot fit even so.
    let empty = rooms(&gpus, overcommit_ratio()?, &HashMap::new());
    if let Some(why) = policy::never_fits(&empty, submission.gpus, submission.ask()) {
        eprintln!("gpuslice: job refused: it can never start on this host: {why}");
        return Ok(ExitCode::from(EXIT_REFUSED));
    }
    // Checked now, so that a mistake is not found after the wait.
    let mut cmd = queued.command()?;
    if let Err(e) = check_program(&run.command[0]) {
        // Exits as the command would have: 127, as under a shell.
        eprintln!("gpuslice: {e}");
        return Ok(ExitCode::from(crate::libs::EXIT_NOT_FOUND));
    }
    let queue = Queue::at(&dir);
    queue.ensure_for_submitter()?;
    let mut job = new_job(&submission, run.command);
    // Made before the job exists, so that no board about it is missed.
    let watch = wait::QueueWatch::new(queue.dir());
    let held = queue.create_job(&mut job)?;
    eprintln!("gpuslice: queued as job {} (gpuslice queue lists it, gpuslice cancel {} ends it)", job.id, job.id);
    let deadline = submission.timeout.map(|t| Instant::now() + t);
    let (devices, tenant) = match wait_for_decision(&queue, &held, job.id, &watch, deadline) {
        Decision::Admitted { devices, tenant } => (devices, tenant),
        Decision::Refused(reason) => {
            held.remove_file();
            eprintln!("gpuslice: job {} refused: {reason}", job.id);
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
        Decision::TimedOut => {
            held.remove_file();
            eprintln!("gpuslice: job {} gave up: it was not admitted within --timeout", job.id);
            return Ok(ExitCode::from(EXIT_TIMED_OUT));
        }
    };
    drop(watch);
    cmd.env("CUDA_VISIBLE_DEVICES", devices.join(","));
    cmd.env("GPUSLICE_TENANT", &tenant);
    cmd.env("GPUSLICE_DIR", &dir);
    held.keep_across_exec()?;
    // The command inherits the job's lock: the job lasts as long as it does.
    let error = crate::libs::exec(cmd);
    drop(held);
    Ok(error.report())
}

/// The job file `run` asks for (its id is chosen as it is written).
fn new_job(submission: &Submission, command: &[String]) -> Job {
    Job {
        id: 0,
        name: submission.name.clone(),
        priority: submission.priority,
        gpus: submission.gpus,
        memory_bytes: submission.memory_bytes,
        placement: submission.placement,
        tenant: String::new(),
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
        pid: std::process::id(),
        submitted_unix_ms: store::unix_ms(),
        state: JobState::Waiting,
        devices: Vec::new(),
        started_unix_ms: None,
        command: store::shown_command(command),
        inode: 0,
        reason: None,
        team: None,
    }
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
enum Decision {
    /// The monitor admitted the job on these devices (UUIDs), as this tenant.
    Admitted { devices: Vec<String>, tenant: String },
    /// The monitor refused it, for this reason.
    Refused(String),
    /// `--timeout` passed first.
    TimedOut,
}

/// What the board says of job (`id`, `inode`): `None` while it waits.
fn decision_on(board: &store::Board, id: u64, inode: u64) -> Option<Decision> {
    if let Some(refusal) = board.refused.iter().find(|r| r.id == id && r.inode == inode) {
        return Some(Decision::Refused(refusal.reason.clone()));
    }
    let job = board.jobs.iter().find(|j| j.id == id && j.inode == inode && j.state == JobState::Running)?;
    Some(Decision::Admitted { devices: job.devices.clone(), tenant: job.tenant.clone() })
}

/// Reads the board until it decides on the job or `deadline` passes. What
/// it says of a waiting job is printed when it changes, one line each
/// time: why nothing is admitted (no monitor), or the job's place in line
/// and the monitor's reason for it.
fn wait_for_decision(queue: &Queue, held: &store::HeldJob, id: u64, watch: &wait::QueueWatch, deadline: Option<Instant>) -> Decision {
    let mut said: Option<String> = None;
    loop {
        let board = queue.read_board();
        let news = match &board {
            Ok(Some(board)) if store::process_exists(board.monitor_pid) => {
                if let Some(decision) = decision_on(board, id, held.inode()) {
                    return decision;
                }
                place_in_line(board, id, held.inode()).or_else(|| board.not_admitting.clone())
            }
            Ok(_) => Some(no_monitor(queue.dir())),
            Err(e) => Some(format!("{e}; {}", no_monitor(queue.dir()))),
        };
        if let Some(news) = news.filter(|n| said.as_ref() != Some(n)) {
            eprintln!("gpuslice: job {id} waits: {news}");
            said = Some(news);
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|l| l.is_zero()) {
            return Decision::TimedOut;
        }
        watch.wait(left.unwrap_or(wait::RECHECK));
    }
}

/// "position 2 in line: behind job 3 (priority 5)": where the board puts
/// waiting job (`id`, `inode`) among the waiting ones, and why it waits;
/// `None` if the board does not list it yet.
fn place_in_line(board: &store::Board, id: u64, inode: u64) -> Option<String> {
    let mut waiting = board.jobs.iter().filter(|j| j.state == JobState::Waiting);
    let position = waiting.position(|j| j.id == id && j.inode == inode)? + 1;
    let job = board.jobs.iter().find(|j| j.id == id && j.inode == inode)?;
    Some(match &job.reason {
        Some(reason) => format!("position {position} in line: {reason}"),
        None => format!("position {position} in line"),
    })
}

/// Why nothing is admitted without a monitor.
fn no_monitor(queue_dir: &Path) -> String {
    format!(
        "no monitor is admitting jobs from {} (start gpuslice monitor with the same --dir): only the monitor \
         knows what is committed on each GPU, so without it no job starts",
        queue_dir.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
