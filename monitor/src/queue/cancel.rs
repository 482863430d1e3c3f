//! `gpuslice cancel ID [--dir DIR]`: ends a job, waiting or running.

use super::store::{self, JobState, Queue};
use crate::discovery;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

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
