//! `gpuslice cancel ID [--dir DIR]`: ends a job, waiting or running.
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
pub fn cancel(args: CancelArgs) -> Result<ExitCode, Error> {
    let id: u64 = args
        .id
        .parse()
        .map_err(|_| Error::Usage(format!("{:?} is not a job id: expected a whole number, as `gpuslice queue` shows", args.id)))?;
    let dir = discovery::ledger_dir(args.dir.as_deref());
    let queue = Queue::at(&dir);
    let none = || Error::Usage(format!("no job {id} in the queue at {} (`gpuslice queue` lists them)", queue.dir().display()));
    if !queue.exists() {
        return Err(none());
    }
    queue.check_safe().map_err(Error::Failed)?;
    let path = queue.job_path(id);
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
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

/// Whether host process `pid` has the file (`dev`, `ino`) open.
fn has_open(pid: u32, dev: u64, ino: u64) -> bool {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    entries.flatten().any(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.dev() == dev && m.ino() == ino))
}
