//! The queue on disk: `<ledger dir>/queue/`, one file per job written by
//! the job's owner, and one board written by the monitor.
//!
//! ```text
//!  <dir>/queue/            root's, mode 1777 (sticky): made by the monitor at start
//!  <dir>/queue/<id>.job    one job's request, JSON, 0600: its owner's alone; its holder keeps it flock'ed
//!  <dir>/queue/board.json  the monitor's decisions, JSON, 0644, root's: read by everyone
//! ```
//!
//! **Nothing here is shared for writing, and nothing is waited on.** A job
//! file is its owner's (0600, in a sticky directory: no other user can
//! open, rewrite, lock or remove it), and it is only a request: how many
//! GPUs, how much memory, what priority. Where a job runs and what it
//! commits is decided by the monitor and written to the board, which only
//! the monitor (root) writes. There is no queue lock: the monitor is the
//! one reader that decides, so there is nothing to serialise between users,
//! and no lock another user could hold to freeze the queue.
//!
//! A job file is created by the `gpuslice run --queue` process that waits
//! for it, which takes an exclusive `flock` on it and keeps it: through
//! `exec` (the descriptor is inherited) and into every child of the
//! command. The kernel drops the lock when the last of those processes is
//! gone, however it ends, so a job whose file is not locked is over. The
//! file is complete before it has its name: it is written under a
//! temporary name and published with `link(2)`, which fails if the id is
//! taken (the next id is then tried), so no reader sees half a file and no
//! counter file is shared.

use super::policy::Placement;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The subdirectory of the ledger directory holding the queue.
pub const QUEUE_SUBDIR: &str = "queue";
/// A job file's suffix.
pub const JOB_SUFFIX: &str = ".job";
/// The monitor's board, in the queue directory.
pub const BOARD_FILE: &str = "board.json";
/// The queue directory's mode: every user may queue, none may remove
/// another's file.
pub const QUEUE_DIR_MODE: u32 = 0o1777;
/// The largest job file read; a command line longer than this is cut in
/// the file (see [`Job::command`]).
const MAX_JOB_BYTES: usize = 64 * 1024;
/// The largest board read.
const MAX_BOARD_BYTES: usize = 64 << 20;
/// How many ids past the highest one seen a submission tries before it
/// gives up (each taken id is a job file made by someone else meanwhile).
const ID_TRIES: u64 = 1000;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for room.
    Waiting,
    /// Admitted: its command runs on `devices`.
    Running,
}

/// One job. In a job file, only the request is read (`name`, `priority`,
/// `gpus`, `memory_bytes`, `placement`, `pid`, `command`); on the board,
/// every field is the monitor's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: u64,
    pub name: Option<String>,
    pub priority: i32,
    pub gpus: u32,
    /// The cap per device; `None` asks for whole devices.
    pub memory_bytes: Option<u64>,
    pub placement: Placement,
    /// The tenant its processes run as (the monitor's choice).
    pub tenant: String,
    /// The owner: on the board, the job file's owner as the kernel says.
    pub uid: u32,
    /// The holder: the waiting `gpuslice`, then (same pid, after exec) the command.
    pub pid: u32,
    /// On the board: when the monitor first saw the job.
    pub submitted_unix_ms: u64,
    pub state: JobState,
    /// Device UUIDs, once running.
    pub devices: Vec<String>,
    pub started_unix_ms: Option<u64>,
    /// The command, for people: cut to [`MAX_COMMAND_BYTES`] (see [`shown_command`]).
    pub command: Vec<String>,
    /// On the board: the job file's inode, which tells this job from an
    /// earlier one of the same id.
    #[serde(default)]
    pub inode: u64,
    /// On the board, for a waiting job: why it waits, in the monitor's
    /// words (which device, how much memory short, or which job it is
    /// behind). Never read from a job file.
    #[serde(default)]
    pub reason: Option<String>,
    /// On the board: the team whose `users` names the owner, by the
    /// monitor's configuration. Never read from a job file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
}

/// A job the monitor refused, and why (one line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    pub id: u64,
    pub inode: u64,
    pub uid: u32,
    pub reason: String,
}

/// What the monitor publishes about the queue, each time it changes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Board {
    /// The monitor's pid: a board whose monitor is gone is stale.
    pub monitor_pid: u32,
    /// Why the monitor admits nothing now (no NVML), if so.
    pub not_admitting: Option<String>,
    /// The highest job id the monitor has seen: new ids start past it.
    pub highest_id: u64,
    /// Live jobs: running ones, then waiting ones in the order they start.
    pub jobs: Vec<Job>,
    /// Jobs refused, until their files go.
    pub refused: Vec<Refusal>,
    /// Memory committed per device UUID, as the monitor counts it.
    pub committed_bytes: BTreeMap<String, u64>,
}

/// The most of a command line a job file keeps.
pub const MAX_COMMAND_BYTES: usize = 4096;

/// `command` as a job file keeps it: whole if short, else its first
/// arguments up to [`MAX_COMMAND_BYTES`] and `…`.
pub fn shown_command(command: &[String]) -> Vec<String> {
    let mut shown = Vec::new();
    let mut bytes = 0;
    for arg in command {
        bytes += arg.len() + 1;
        if bytes > MAX_COMMAND_BYTES {
            shown.push("…".to_string());
            break;
        }
        shown.push(arg.clone());
    }
    shown
}

/// The queue directory.
pub struct Queue {
    dir: PathBuf,
}

/// A job file this process holds (and keeps locked while it lives).
pub struct HeldJob {
    file: File,
    path: PathBuf,
    inode: u64,
}

fn flock(file: &File, operation: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor this File owns.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(());
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Whether the holder of job file `file` still lives: it keeps an
/// exclusive lock, so a shared one cannot be had. Never waits.
pub fn is_held(file: &File) -> std::io::Result<bool> {
    match flock(file, libc::LOCK_SH | libc::LOCK_NB) {
        Ok(()) => {
            flock(file, libc::LOCK_UN)?;
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(true),
        Err(e) => Err(e),
    }
}

/// Milliseconds since the epoch, now.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The id in a job file's name, `<id>.job`.
pub fn job_id_of(name: &std::ffi::OsStr) -> Option<u64> {
    let id = name.to_str()?.strip_suffix(JOB_SUFFIX)?;
    // One spelling per id: no sign, no leading zeros.
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) || (id.len() > 1 && id.starts_with('0')) {
        return None;
    }
    id.parse().ok()
}

/// Reads at most `limit` bytes of `file`; more is an error.
fn read_bounded(file: &mut File, limit: usize) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1).read_to_end(&mut bytes).map_err(|e| e.to_string())?;
    if bytes.len() > limit {
        return Err(format!("larger than {limit} bytes"));
    }
    Ok(bytes)
}

/// Opens `path` to read, never following a link and never blocking (a
/// FIFO put in its place cannot hold the reader up); a plain file only.
pub fn open_plain(path: &Path) -> std::io::Result<File> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a plain file"));
    }
    Ok(file)
}

/// The job in the open job file `file`, named `<id>.job`.
pub fn read_job(file: &mut File, id: u64) -> Result<Job, String> {
    file.rewind().map_err(|e| e.to_string())?;
    let bytes = read_bounded(file, MAX_JOB_BYTES).map_err(|e| format!("not a job file: {e}"))?;
    let job: Job = serde_json::from_slice(&bytes).map_err(|e| format!("not a job file: {e}"))?;
    if job.id != id {
        return Err(format!("its name says job {id} but it holds job {}", job.id));
    }
    Ok(job)
}

impl Queue {
    /// The queue beside the ledgers in `ledger_dir`; nothing is created.
    pub fn at(ledger_dir: &Path) -> Queue {
        Queue { dir: ledger_dir.join(QUEUE_SUBDIR) }
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether the queue directory exists.
    pub fn exists(&self) -> bool {
        self.dir.is_dir()
    }

    /// The path of job `id`'s file.
    pub fn job_path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id}{JOB_SUFFIX}"))
    }

    /// For the monitor: makes the directory this process's (root's), mode
    /// 1777, whatever was there. A directory of another user, or anything
    /// that is not a directory, is moved aside (the ledger directory is
    /// open to every user, so anyone could have made it first); returns
    /// what was done, for the log.
    pub fn prepare(&self) -> Result<Option<String>, String> {
        let me = effective_uid();
        let mut done = None;
        if let Ok(meta) = std::fs::symlink_metadata(&self.dir) {
            if !meta.is_dir() || meta.uid() != me {
                let aside = self.dir.with_file_name(format!(".{QUEUE_SUBDIR}.untrusted-{}", std::process::id()));
                std::fs::rename(&self.dir, &aside).map_err(|e| {
                    format!("{} is not the monitor's (uid {}) and cannot be moved aside: {e}", self.dir.display(), meta.uid())
                })?;
                done = Some(format!("{} was not the monitor's (uid {}): moved to {}", self.dir.display(), meta.uid(), aside.display()));
            }
        }
        match std::fs::DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create the queue directory {}: {e}", self.dir.display())),
        }
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(QUEUE_DIR_MODE))
            .map_err(|e| format!("cannot set the mode of the queue directory {} to {QUEUE_DIR_MODE:04o}: {e}", self.dir.display()))?;
        self.check_safe()?;
        Ok(done)
    }

    /// For a submitter: the directory must be there and safe. Root, or the
    /// owner of a ledger directory no one else may write (a per-user
    /// fallback), may make it; any other user is told to start the monitor,
    /// which makes it.
    pub fn ensure_for_submitter(&self) -> Result<(), String> {
        if std::fs::symlink_metadata(&self.dir).is_err() {
            let parent = self.dir.parent().unwrap_or(Path::new("/"));
            let me = effective_uid();
            let private = std::fs::metadata(parent).is_ok_and(|m| m.uid() == me && m.mode() & 0o022 == 0);
            if me != 0 && !private {
                return Err(format!(
                    "the queue directory {} does not exist: the monitor makes it when it starts (gpuslice monitor --dir {}); \
                     no job can be admitted without it",
                    self.dir.display(),
                    parent.display()
                ));
            }
            self.prepare()?;
        }
        self.check_safe()
    }

    /// Refuses a queue directory that another user could have put there to
    /// steer the queue: a link, a directory of another user (not root), or
    /// one every user may write without the sticky bit.
    pub fn check_safe(&self) -> Result<(), String> {
        let meta = std::fs::symlink_metadata(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        let me = effective_uid();
        let why = if !meta.file_type().is_dir() {
            Some("it is not a directory (a link, or a file)".to_string())
        } else if meta.uid() != 0 && meta.uid() != me {
            Some(format!("it belongs to uid {}, neither root nor you; the monitor makes it root's when it starts", meta.uid()))
        } else if meta.mode() & 0o002 != 0 && meta.mode() & 0o1000 == 0 {
            Some("every user may write it and it is not sticky (mode 1777 is)".to_string())
        } else {
            None
        };
        match why {
            Some(why) => Err(format!("the queue directory {} is not safe to use: {why}", self.dir.display())),
            None => Ok(()),
        }
    }

    /// The ids of the job files present, in no order.
    pub fn job_ids(&self) -> Vec<u64> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Vec::new() };
        entries.flatten().filter_map(|e| job_id_of(&e.file_name())).collect()
    }

    /// Writes `job` (its id chosen here: past every job file present and
    /// every id the board has seen) as a new job file, locked by this
    /// process; `job.id` is set to the id it got.
    pub fn create_job(&self, job: &mut Job) -> Result<HeldJob, String> {
        let tmp = self.dir.join(format!(".{}.{}.tmp", std::process::id(), unix_ms()));
        let _ = std::fs::remove_file(&tmp);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| format!("cannot create a job file in {}: {e}", self.dir.display()))?;
        let result = self.publish(&mut file, &tmp, job);
        let _ = std::fs::remove_file(&tmp);
        let path = result?;
        let inode = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.ino();
        Ok(HeldJob { file, path, inode })
    }

    /// Locks the temporary file `tmp` and links it under the first free id.
    fn publish(&self, file: &mut File, tmp: &Path, job: &mut Job) -> Result<PathBuf, String> {
        flock(file, libc::LOCK_EX | libc::LOCK_NB).map_err(|e| format!("cannot lock {}: {e}", tmp.display()))?;
        let board_highest = self.read_board().ok().flatten().map_or(0, |b| b.highest_id);
        let first = self.job_ids().into_iter().max().unwrap_or(0).max(board_highest).saturating_add(1);
        for id in first..first.saturating_add(ID_TRIES) {
            job.id = id;
            let text = serde_json::to_string(job).map_err(|e| e.to_string())?;
            let written = file.set_len(0).and_then(|_| file.rewind()).and_then(|_| file.write_all(text.as_bytes()));
            written.map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
            let path = self.job_path(id);
            match std::fs::hard_link(tmp, &path) {
                Ok(()) => return Ok(path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot create the job file {}: {e}", path.display())),
            }
        }
        Err(format!("no free job id from {first} to {} in {}", first.saturating_add(ID_TRIES - 1), self.dir.display()))
    }

    /// The monitor's board, if there is one that the monitor wrote: a
    /// plain file owned by the queue directory's owner (root). `Ok(None)`
    /// when there is none.
    pub fn read_board(&self) -> Result<Option<Board>, String> {
        let path = self.dir.join(BOARD_FILE);
        let mut file = match open_plain(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let dir_owner = std::fs::symlink_metadata(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?.uid();
        let owner = file.metadata().map_err(|e| format!("{}: {e}", path.display()))?.uid();
        if owner != dir_owner {
            return Err(format!("{} belongs to uid {owner}, not to the monitor (uid {dir_owner}): ignored", path.display()));
        }
        let bytes = read_bounded(&mut file, MAX_BOARD_BYTES).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_slice(&bytes).map(Some).map_err(|e| format!("{}: not a board: {e}", path.display()))
    }

    /// The board, if its monitor still runs.
    pub fn live_board(&self) -> Option<Board> {
        self.read_board().ok().flatten().filter(|b| process_exists(b.monitor_pid))
    }

    /// For the monitor: replaces the board with `board`, whole (written
    /// under a temporary name, then renamed over it).
    pub fn write_board(&self, board: &Board) -> Result<(), String> {
        let text = serde_json::to_string(board).map_err(|e| e.to_string())?;
        let tmp = self.dir.join(format!(".board.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let write = || -> std::io::Result<()> {
            let mut file =
                OpenOptions::new().write(true).create_new(true).mode(0o644).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&tmp)?;
            file.set_permissions(std::fs::Permissions::from_mode(0o644))?;
            file.write_all(text.as_bytes())?;
            std::fs::rename(&tmp, self.dir.join(BOARD_FILE))
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write the queue board in {}: {e}", self.dir.display())
        })
    }

    /// The live jobs whose files this user can read, when no monitor
    /// publishes a board: each as its file says, waiting. Files that
    /// cannot be read are named in the second list (other users' files,
    /// 0600, are not: they are simply not shown).
    pub fn readable_jobs(&self) -> (Vec<Job>, Vec<String>) {
        let (mut jobs, mut problems) = (Vec::new(), Vec::new());
        for id in self.job_ids() {
            let path = self.job_path(id);
            let mut file = match open_plain(&path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied || e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    problems.push(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            if !is_held(&file).unwrap_or(false) {
                continue;
            }
            match (read_job(&mut file, id), file.metadata()) {
                (Ok(mut job), Ok(meta)) => {
                    job.uid = meta.uid();
                    job.inode = meta.ino();
                    job.state = JobState::Waiting;
                    job.devices.clear();
                    job.started_unix_ms = None;
                    // Only the monitor says why a job waits.
                    job.reason = None;
                    jobs.push(job);
                }
                (Err(e), _) => problems.push(format!("{}: {e}", path.display())),
                (_, Err(e)) => problems.push(format!("{}: {e}", path.display())),
            }
        }
        jobs.sort_by_key(|j| j.id);
        (jobs, problems)
    }
}

/// Whether process `pid` exists (it may be another user's).
pub fn process_exists(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

impl HeldJob {
    /// Its inode: the board names the job by id and inode.
    pub fn inode(&self) -> u64 {
        self.inode
    }

    /// Its path.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the file: the job leaves the queue now, before this process
    /// (and the file lock) ends.
    pub fn remove_file(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// Lets the lock outlive `exec`: the command, and every child it
    /// makes, inherit the descriptor, so the job lasts as long as they do.
    pub fn keep_across_exec(&self) -> Result<(), String> {
        let fd = self.file.as_raw_fd();
        // SAFETY: fcntl on a descriptor this HeldJob owns.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0 {
            return Err(format!("cannot keep the job lock across exec: {}", std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gpuslice-queue-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub(crate) fn job(id: u64) -> Job {
        Job {
            id,
            name: Some("train".into()),
            priority: 0,
            gpus: 1,
            memory_bytes: Some(1 << 30),
            placement: Placement::Binpack,
            tenant: String::new(),
            uid: 0,
            pid: std::process::id(),
            submitted_unix_ms: 1,
            state: JobState::Waiting,
            devices: vec![],
            started_unix_ms: None,
            command: vec!["true".into()],
            inode: 0,
            reason: None,
            team: None,
        }
    }

    #[test]
    fn ids_count_up_past_every_file_and_the_board() {
        let dir = temp_dir("ids");
        let queue = Queue::at(&dir);
        queue.prepare().unwrap();
        let mut first = job(0);
        let held = queue.create_job(&mut first).unwrap();
        assert_eq!(first.id, 1);
        assert_eq!(std::fs::metadata(held.path()).unwrap().mode() & 0o7777, 0o600, "a job file is its owner's alone");
        std::fs::write(queue.job_path(41), b"planted").unwrap();
        let mut second = job(0);
        let _held2 = queue.create_job(&mut second).unwrap();
        assert_eq!(second.id, 42);
        queue.write_board(&Board { highest_id: 100, monitor_pid: std::process::id(), ..Board::default() }).unwrap();
        let mut third = job(0);
        let _held3 = queue.create_job(&mut third).unwrap();
        assert_eq!(third.id, 101);
        let leftovers: Vec<_> =
            std::fs::read_dir(queue.dir()).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".tmp")).collect();
        assert!(leftovers.is_empty(), "no temporary file is left: {leftovers:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_held_job_is_live_until_its_holder_goes() {
        let dir = temp_dir("held");
        let queue = Queue::at(&dir);
        queue.prepare().unwrap();
        let mut mine = Job { reason: Some("first in line".into()), ..job(0) };
        let held = queue.create_job(&mut mine).unwrap();
        let mut reader = open_plain(held.path()).unwrap();
        assert!(is_held(&reader).unwrap());
        assert_eq!(read_job(&mut reader, mine.id).unwrap(), mine);
        let listed = queue.readable_jobs().0;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].reason, None, "only the monitor says why a job waits, never its file");
        drop(held);
        assert!(!is_held(&reader).unwrap(), "the holder gone, so is the lock");
        assert!(is_held(&reader).is_ok_and(|h| !h), "testing twice changes nothing");
        assert!(queue.readable_jobs().0.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unsafe_queue_directory_is_refused_and_the_monitor_takes_it_back() {
        let dir = temp_dir("unsafe");
        std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join(QUEUE_SUBDIR)).unwrap();
        let e = Queue::at(&dir).check_safe().unwrap_err();
        assert!(e.contains("not safe") && e.contains("not a directory"), "{e}");
        let moved = Queue::at(&dir).prepare().unwrap();
        assert!(moved.is_some_and(|m| m.contains("moved to")));
        let meta = std::fs::symlink_metadata(dir.join(QUEUE_SUBDIR)).unwrap();
        assert!(meta.is_dir() && meta.mode() & 0o7777 == QUEUE_DIR_MODE);
        std::fs::set_permissions(dir.join(QUEUE_SUBDIR), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Queue::at(&dir).check_safe().unwrap_err();
        assert!(e.contains("not sticky"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn job_names_have_one_spelling() {
        use std::ffi::OsStr;
        assert_eq!(job_id_of(OsStr::new("12.job")), Some(12));
        for bad in ["012.job", "+1.job", ".job", "1.job.tmp", "a.job", "18446744073709551616.job"] {
            assert_eq!(job_id_of(OsStr::new(bad)), None, "{bad}");
        }
    }

    #[test]
    fn long_commands_are_cut_for_the_file() {
        let short = vec!["python".to_string(), "train.py".to_string()];
        assert_eq!(shown_command(&short), short);
        let long: Vec<String> = (0..10_000).map(|i| format!("--arg{i}")).collect();
        let shown = shown_command(&long);
        assert_eq!(shown.last().map(String::as_str), Some("…"));
        assert!(shown.iter().map(|a| a.len() + 1).sum::<usize>() <= MAX_COMMAND_BYTES + 4);
    }

    #[test]
    fn a_file_that_is_not_a_job_is_reported_not_trusted() {
        let dir = temp_dir("bad");
        std::fs::write(dir.join("4.job"), serde_json::to_string(&job(3)).unwrap()).unwrap();
        let mut file = open_plain(&dir.join("4.job")).unwrap();
        assert!(read_job(&mut file, 4).unwrap_err().contains("job 4 but it holds job 3"));
        std::fs::write(dir.join("5.job"), vec![b'x'; MAX_JOB_BYTES + 10]).unwrap();
        let mut file = open_plain(&dir.join("5.job")).unwrap();
        assert!(read_job(&mut file, 5).unwrap_err().contains("not a job file"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_board_not_written_by_the_directorys_owner_is_ignored() {
        let dir = temp_dir("board");
        let queue = Queue::at(&dir);
        queue.prepare().unwrap();
        assert_eq!(queue.read_board(), Ok(None));
        let board = Board { monitor_pid: std::process::id(), highest_id: 7, ..Board::default() };
        queue.write_board(&board).unwrap();
        assert_eq!(queue.read_board(), Ok(Some(board.clone())));
        assert!(queue.live_board().is_some());
        std::os::unix::fs::chown(queue.dir().join(BOARD_FILE), Some(4242), None).unwrap();
        assert!(queue.read_board().unwrap_err().contains("not to the monitor"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
