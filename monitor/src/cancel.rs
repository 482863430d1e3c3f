//! `gpuslice cancel ID|NAME [--dir DIR]`: ends a job, waiting or running.
//!
//! A job is named by its id or by the `--name` it was given: a name must
//! be that of exactly one of the caller's jobs (any user's, for root), so
//! that a name two jobs share never cancels the wrong one.
//!
//! The job's file says which process holds it; that is acted on only if
//! the kernel agrees (the process has that very file open), and only by
//! the file's owner or root. Nothing is locked or waited for.

use crate::discovery;
use crate::error::Error;
use crate::queue::store::{self, Queue};
use clap::Args;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;

/// `gpuslice cancel ID|NAME [--dir DIR]`.
#[derive(Args)]
pub struct CancelArgs {
    /// The job's id or name, as `gpuslice queue` shows them.
    #[arg(value_name = "ID|NAME")]
    pub id: String,
    /// The ledger directory the queue lives in.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Ends a job: a waiting one leaves the queue, a running one's command
/// gets SIGTERM. Only the job's owner (or root) may.
pub fn cancel(args: CancelArgs) -> Result<ExitCode, Error> {
    let dir = discovery::ledger_dir(args.dir.as_deref());
    let queue = Queue::at(&dir);
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    let id = match args.id.parse::<u64>() {
        Ok(id) => id,
        Err(_) => job_named(&queue, &args.id, me)?,
    };
    let none = || Error::Usage(format!("no job {id} in the queue at {} (`gpuslice queue` lists them)", queue.dir().display()));
    if !queue.exists() {
        return Err(none());
    }
    queue.check_safe().map_err(Error::Failed)?;
    let path = queue.job_path(id);
    let owner = match std::fs::symlink_metadata(&path) {
        Ok(meta) => meta.uid(),
        Err(_) => return Err(none()),
    };
    if me != 0 && owner != me {
        return Err(Error::Usage(format!("job {id} belongs to uid {owner}, not to you: only its owner or root may cancel it")));
    }
    let mut file = store::open_plain(&path).map_err(|e| Error::Failed(format!("job {id}: cannot read {}: {e}", path.display())))?;
    if !store::is_held(&file).map_err(|e| Error::Failed(format!("job {id}: cannot test its lock: {e}")))? {
        return Err(none());
    }
    let job = store::read_job(&mut file, id).map_err(|e| Error::Failed(format!("job {id}: {}: {e}", path.display())))?;
    let meta = file.metadata().map_err(|e| Error::Failed(format!("{}: {e}", path.display())))?;
    // The pid is what the file says: act only if that process has the file open.
    if !has_open(job.pid, meta.dev(), meta.ino()) {
        return Err(Error::Failed(format!("job {id}: its process {} does not hold its file; it is ending", job.pid)));
    }
    let running = queue
        .live_board()
        .is_some_and(|b| b.jobs.iter().any(|j| j.id == id && j.inode == meta.ino() && j.state == store::JobState::Running));
    // SAFETY: kill(2) on the pid checked above.
    if unsafe { libc::kill(job.pid as libc::pid_t, libc::SIGTERM) } != 0 {
        return Err(Error::Failed(format!("job {id}: cannot signal process {}: {}", job.pid, std::io::Error::last_os_error())));
    }
    let _ = std::fs::remove_file(&path);
    if running {
        println!("job {id} cancelled: SIGTERM sent to its command (pid {})", job.pid);
    } else {
        println!("job {id} cancelled while waiting");
    }
    Ok(ExitCode::SUCCESS)
}

/// The id of the one job named `name` that `me` may cancel (its own; any,
/// for root).
fn job_named(queue: &Queue, name: &str, me: u32) -> Result<u64, Error> {
    ledger::units::validate_tenant_name(name).map_err(|e| {
        Error::Usage(format!("{name:?} is neither a job id (a whole number) nor a job name: {e}; `gpuslice queue` shows both"))
    })?;
    let (jobs, _) = if queue.exists() { queue.readable_jobs() } else { (Vec::new(), Vec::new()) };
    let named: Vec<u64> = jobs.iter().filter(|j| j.name.as_deref() == Some(name) && (me == 0 || j.uid == me)).map(|j| j.id).collect();
    match named.as_slice() {
        [id] => Ok(*id),
        [] => Err(Error::Usage(format!(
            "no job named {name:?} of yours in the queue at {} (`gpuslice queue` lists them)",
            queue.dir().display()
        ))),
        ids => {
            let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
            Err(Error::Usage(format!("{} jobs are named {name:?} (ids {}): cancel one by its id", ids.len(), ids.join(", "))))
        }
    }
}

/// Whether host process `pid` has the file (`dev`, `ino`) open.
fn has_open(pid: u32, dev: u64, ino: u64) -> bool {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    entries.flatten().any(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino))
}
