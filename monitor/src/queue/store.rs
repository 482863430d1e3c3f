//! The queue on disk: `<ledger dir>/queue/`, one file per job, and a lock
//! file that serialises every change.
//!
//! ```text
//!  <dir>/queue/lock       flock'ed (exclusive) around every read-decide-write
//!  <dir>/queue/next-id    the next job id, a decimal number
//!  <dir>/queue/<id>.job   one job, JSON; its holder keeps it flock'ed
//! ```
//!
//! A job file is created by the `gpuslice run --queue` process that waits
//! for it, which takes an exclusive `flock` on it and keeps it: through
//! `exec` (the descriptor is inherited, not closed) and into every child of
//! the command. The kernel drops the lock when the last of those processes
//! is gone, however it ends, so a job whose file is not locked is over: its
//! file is stale and whoever holds the queue lock removes it. A waiting job
//! killed with `kill -9` thus leaves no entry, and a running job's
//! commitment ends with its processes. The holder rewrites its file in
//! place (never renames over it: the lock belongs to the inode), and only
//! under the queue lock, so readers never see half a file.

use super::policy::Placement;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The subdirectory of the ledger directory holding the queue.
pub const QUEUE_SUBDIR: &str = "queue";
/// A job file's suffix.
pub const JOB_SUFFIX: &str = ".job";
/// The largest job file read; a command line longer than this is cut in
/// the file (see [`Job::command`]).
const MAX_JOB_BYTES: usize = 64 * 1024;

/// Where a job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    /// Waiting for room.
    Waiting,
    /// Admitted: its command runs on `devices`.
    Running,
}

/// One job, as its file holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: u64,
    pub name: Option<String>,
    pub priority: i32,
    pub gpus: u32,
    /// The cap per device; `None` asks for whole devices.
    pub memory_bytes: Option<u64>,
    pub placement: Placement,
    /// The tenant its processes run as.
    pub tenant: String,
    pub uid: u32,
    /// The holder: the waiting `gpuslice`, then (same pid, after exec) the command.
    pub pid: u32,
    pub submitted_unix_ms: u64,
    pub state: JobState,
    /// Device UUIDs, once running.
    pub devices: Vec<String>,
    pub started_unix_ms: Option<u64>,
    /// The command, for people: cut to [`MAX_COMMAND_BYTES`] (see [`shown_command`]).
    pub command: Vec<String>,
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

/// Held while the queue is read or changed; dropping it unlocks.
pub struct QueueLock {
    _file: File,
}

/// A job file this process holds (and keeps locked while it lives).
pub struct HeldJob {
    file: File,
    path: PathBuf,
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

/// Milliseconds since the epoch, now.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
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

    /// Whether the queue directory exists (no job was ever queued if not).
    pub fn exists(&self) -> bool {
        self.dir.is_dir()
    }

    /// Creates the directory if missing: sticky and open to every user (as
    /// `/tmp`), so anyone on the host can queue and only a job's owner can
    /// remove its file.
    pub fn create(&self) -> Result<(), String> {
        if std::fs::symlink_metadata(&self.dir).is_err() {
            std::fs::create_dir_all(&self.dir)
                .map_err(|e| format!("cannot create the queue directory {}: {e}", self.dir.display()))?;
            std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o1777))
                .map_err(|e| format!("cannot open the queue directory {} to all users: {e}", self.dir.display()))?;
        }
        self.check_safe()
    }

    /// Refuses a queue directory that another user could have put there to
    /// steer or block the queue: a link, a directory of another user (not
    /// root), or one every user may write without the sticky bit.
    fn check_safe(&self) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(&self.dir).map_err(|e| format!("{}: {e}", self.dir.display()))?;
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        let why = if !meta.file_type().is_dir() {
            Some("it is not a directory (a link, or a file)".to_string())
        } else if meta.uid() != 0 && meta.uid() != me {
            Some(format!("it belongs to uid {}, neither root nor you", meta.uid()))
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

    /// Takes the queue lock, waiting for whoever holds it, in a directory
    /// that passes [`Queue::check_safe`] (whoever reads or changes the
    /// queue, not only whoever made it).
    pub fn lock(&self) -> Result<QueueLock, String> {
        self.check_safe()?;
        let path = self.dir.join("lock");
        // Read-only: closing it then is no write that wakes waiting jobs.
        let file = OpenOptions::new()
            .read(true)
            .write(false)
            .create(false)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .or_else(|_| create_shared(&path).and_then(|_| File::open(&path)))
            .map_err(|e| format!("cannot open the queue lock {}: {e}", path.display()))?;
        flock(&file, libc::LOCK_EX).map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
        Ok(QueueLock { _file: file })
    }

    /// The next job id (needs the lock).
    pub fn next_id(&self, _lock: &QueueLock) -> Result<u64, String> {
        let path = self.dir.join("next-id");
        let _ = create_shared(&path);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        // Past every job file, whatever the counter says (it may have been
        // cut short or written by someone else).
        let id = text.trim().parse::<u64>().unwrap_or(1).max(self.highest_job_id() + 1);
        let write = |file: &mut File| -> std::io::Result<()> {
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(format!("{}\n", id + 1).as_bytes())
        };
        write(&mut file).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(id)
    }

    /// The highest id of a job file present, 0 if none.
    fn highest_job_id(&self) -> u64 {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return 0 };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(JOB_SUFFIX)).and_then(|n| n.parse::<u64>().ok()))
            .max()
            .unwrap_or(0)
    }

    /// Creates the file of `job` and locks it (needs the lock).
    pub fn create_job(&self, job: &Job, lock: &QueueLock) -> Result<HeldJob, String> {
        let path = self.dir.join(format!("{}{JOB_SUFFIX}", job.id));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| format!("cannot create the job file {}: {e}", path.display()))?;
        flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
        let held = HeldJob { file, path };
        held.write(job, lock)?;
        Ok(held)
    }

    /// The live jobs, by id; stale files (no holder) are removed where this
    /// user may, and skipped. Files that cannot be read are named in the
    /// second list. Needs the lock.
    pub fn jobs(&self, _lock: &QueueLock) -> (Vec<Job>, Vec<String>) {
        let mut jobs = Vec::new();
        let mut problems = Vec::new();
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return (jobs, problems) };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(JOB_SUFFIX)).and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            match read_live_job(&entry.path(), id) {
                Ok(Some(job)) => jobs.push(job),
                Ok(None) => {
                    let _ = std::fs::remove_file(entry.path());
                }
                Err(e) => problems.push(format!("{}: {e}", entry.path().display())),
            }
        }
        jobs.sort_by_key(|j| j.id);
        (jobs, problems)
    }

    /// Removes the file of job `id` (needs the lock).
    pub fn remove(&self, id: u64, _lock: &QueueLock) -> std::io::Result<()> {
        std::fs::remove_file(self.dir.join(format!("{id}{JOB_SUFFIX}")))
    }
}

/// Creates `path` if missing, readable and writable by every user.
fn create_shared(path: &Path) -> std::io::Result<()> {
    match OpenOptions::new().write(true).create_new(true).mode(0o666).custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(file) => file.set_permissions(std::fs::Permissions::from_mode(0o666)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a reader that changes nothing sees of the queue: see [`Queue::peek`].
#[derive(Debug, Default)]
pub struct Peek {
    /// Jobs whose holder lives, by id.
    pub live: Vec<Job>,
    /// Stale files not yet removed (their holder ended), by id.
    pub ended: Vec<Job>,
    /// Files that are not job files, named with why.
    pub problems: Vec<String>,
}

/// How many times [`Queue::peek`] tries the queue lock before giving up.
const PEEK_TRIES: u32 = 5;
/// How long [`Queue::peek`] waits between tries.
const PEEK_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

impl Queue {
    /// Reads the queue without changing anything (no file created, no stale
    /// file removed) and without waiting long for the lock: a few
    /// non-blocking tries of a shared lock, `Ok(None)` if a job held it
    /// throughout (the reader then keeps what it saw before). For the
    /// monitor, which must not stall its round on the queue, and which
    /// treats every file in it as untrusted: reads are bounded as in
    /// [`Queue::jobs`] and a file that is not a job is only reported.
    pub fn peek(&self) -> Result<Option<Peek>, String> {
        if !self.exists() {
            return Ok(Some(Peek::default()));
        }
        self.check_safe()?;
        let path = self.dir.join("lock");
        // Read-only and never created: a reader leaves no trace and wakes no one.
        let _lock = match OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(&path) {
            Ok(file) => {
                let mut tries = 0;
                loop {
                    match flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
                        Ok(()) => break Some(file),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && tries + 1 < PEEK_TRIES => {
                            tries += 1;
                            std::thread::sleep(PEEK_PAUSE);
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                        Err(e) => return Err(format!("cannot lock {}: {e}", path.display())),
                    }
                }
            }
            // No lock file: no job ever took it, so no job file is being written.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot open the queue lock {}: {e}", path.display())),
        };
        let mut peek = Peek::default();
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return Ok(Some(peek)) };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str().and_then(|n| n.strip_suffix(JOB_SUFFIX)).and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            match read_job(&entry.path(), id, true) {
                Ok(Some((job, true))) => peek.live.push(job),
                Ok(Some((job, false))) => peek.ended.push(job),
                Ok(None) => {}
                Err(e) => peek.problems.push(format!("{}: {e}", entry.path().display())),
            }
        }
        peek.live.sort_by_key(|j| j.id);
        peek.ended.sort_by_key(|j| j.id);
        Ok(Some(peek))
    }
}

/// The job in `path` if its holder still lives, `None` if it is stale.
fn read_live_job(path: &Path, id: u64) -> Result<Option<Job>, String> {
    Ok(read_job(path, id, false)?.map(|(job, _)| job))
}

/// The job in `path` and whether its holder lives; a stale file is read
/// only if `stale_too` (else `None`).
fn read_job(path: &Path, id: u64, stale_too: bool) -> Result<Option<(Job, bool)>, String> {
    // Read-only, so that closing it wakes no waiting job.
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err("not a plain file".into());
    }
    let live = match flock(&file, libc::LOCK_SH | libc::LOCK_NB) {
        Ok(()) if !stale_too => return Ok(None),
        Ok(()) => false,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
        Err(e) => return Err(format!("cannot test its lock: {e}")),
    };
    // One read of what the file holds (a job is well under a page); a file
    // larger than MAX_JOB_BYTES is not one.
    let mut bytes = vec![0u8; MAX_JOB_BYTES + 1];
    let mut filled = 0;
    loop {
        match file.read(&mut bytes[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
        if filled > MAX_JOB_BYTES {
            return Err(format!("larger than {MAX_JOB_BYTES} bytes: not a job file"));
        }
    }
    let job: Job = serde_json::from_slice(&bytes[..filled]).map_err(|e| format!("not a job file: {e}"))?;
    if job.id != id {
        return Err(format!("its name says job {id} but it holds job {}", job.id));
    }
    Ok(Some((job, live)))
}

impl HeldJob {
    /// Rewrites the file in place (needs the lock).
    pub fn write(&self, job: &Job, _lock: &QueueLock) -> Result<(), String> {
        let text = serde_json::to_string(job).map_err(|e| e.to_string())?;
        let mut file = &self.file;
        let result = file.set_len(0).and_then(|_| file.rewind()).and_then(|_| file.write_all(text.as_bytes()));
        result.map_err(|e| format!("cannot write the job file {}: {e}", self.path.display()))
    }

    /// Removes the file (needs the lock): the job leaves the queue now,
    /// before this process (and the file lock) ends.
    pub fn remove_file(&self, _lock: &QueueLock) {
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

    fn job(id: u64) -> Job {
        Job {
            id,
            name: Some("train".into()),
            priority: 0,
            gpus: 1,
            memory_bytes: Some(1 << 30),
            placement: Placement::Binpack,
            tenant: format!("queue-{id}"),
            uid: 0,
            pid: std::process::id(),
            submitted_unix_ms: 1,
            state: JobState::Waiting,
            devices: vec![],
            started_unix_ms: None,
            command: vec!["true".into()],
        }
    }

    #[test]
    fn ids_count_up_and_held_jobs_are_listed_until_dropped() {
        let dir = temp_dir("held");
        let queue = Queue::at(&dir);
        queue.create().unwrap();
        let lock = queue.lock().unwrap();
        assert_eq!((queue.next_id(&lock).unwrap(), queue.next_id(&lock).unwrap()), (1, 2));
        let held = queue.create_job(&job(7), &lock).unwrap();
        let (jobs, problems) = queue.jobs(&lock);
        assert_eq!((jobs, problems.len()), (vec![job(7)], 0));
        // The holder gone (its descriptor closed), the file is stale and removed.
        drop(held);
        assert_eq!(queue.jobs(&lock).0, vec![]);
        assert!(!queue.dir().join("7.job").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ids_pass_every_job_file_whatever_the_counter_says() {
        let dir = temp_dir("ids");
        let queue = Queue::at(&dir);
        queue.create().unwrap();
        let lock = queue.lock().unwrap();
        let _held = queue.create_job(&job(41), &lock).unwrap();
        std::fs::write(queue.dir().join("next-id"), b"garbage").unwrap();
        assert_eq!(queue.next_id(&lock).unwrap(), 42);
        assert_eq!(queue.next_id(&lock).unwrap(), 43);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_unsafe_queue_directory_is_refused() {
        let dir = temp_dir("unsafe");
        std::fs::create_dir_all(dir.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join(QUEUE_SUBDIR)).unwrap();
        let e = Queue::at(&dir).create().unwrap_err();
        assert!(e.contains("not safe") && e.contains("not a directory"), "{e}");
        std::fs::remove_file(dir.join(QUEUE_SUBDIR)).unwrap();
        std::fs::create_dir(dir.join(QUEUE_SUBDIR)).unwrap();
        std::fs::set_permissions(dir.join(QUEUE_SUBDIR), std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Queue::at(&dir).create().unwrap_err();
        assert!(e.contains("not sticky"), "{e}");
        std::fs::set_permissions(dir.join(QUEUE_SUBDIR), std::fs::Permissions::from_mode(0o1777)).unwrap();
        Queue::at(&dir).create().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
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
    fn a_peek_changes_nothing_and_tells_live_from_ended() {
        let dir = temp_dir("peek");
        let queue = Queue::at(&dir);
        assert_eq!(queue.peek().unwrap().map(|p| p.live.len()), Some(0), "no queue yet: nothing");
        queue.create().unwrap();
        let lock = queue.lock().unwrap();
        let held = queue.create_job(&job(5), &lock).unwrap();
        let ended = queue.create_job(&job(6), &lock).unwrap();
        drop(ended);
        std::fs::write(queue.dir().join("7.job"), vec![b'x'; 100_000]).unwrap();
        // Held exclusively by a writer: the peek gives up rather than wait.
        assert!(queue.peek().unwrap().is_none());
        drop(lock);
        let peek = queue.peek().unwrap().unwrap();
        assert_eq!(peek.live, vec![job(5)]);
        assert_eq!(peek.ended, vec![job(6)]);
        assert!(peek.problems.len() == 1 && peek.problems[0].contains("not a job file"), "{:?}", peek.problems);
        assert!(queue.dir().join("6.job").exists(), "a peek removes nothing");
        drop(held);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_that_is_not_a_job_is_reported_not_trusted() {
        let dir = temp_dir("bad");
        let queue = Queue::at(&dir);
        queue.create().unwrap();
        let lock = queue.lock().unwrap();
        let held = queue.create_job(&job(3), &lock).unwrap();
        let mut bad = job(4);
        bad.gpus = 2;
        held.write(&bad, &lock).unwrap();
        let (jobs, problems) = queue.jobs(&lock);
        assert!(jobs.is_empty());
        assert!(problems[0].contains("job 3 but it holds job 4"), "{problems:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
