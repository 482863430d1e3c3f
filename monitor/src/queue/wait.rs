//! Sleeping until the queue changes, without spinning.
//!
//! A waiting job watches the queue directory with inotify and wakes only
//! when a job may have left: a job file removed (cancel, `--timeout`, a
//! stale file cleared) or closed after writing. The second is how a
//! holder's end is seen: the kernel closes a dead process's files, and the
//! last close of the job file its holder opened for writing is an
//! `IN_CLOSE_WRITE`, however the holder (or, after `exec`, its command and
//! their children) ended. Nothing else can let a waiting job start: a new
//! job only adds to what is committed or reserved, and a job that starts
//! was started by a look that every job woken by the same event repeats.
//! So submissions wake no one, and 200 waiting jobs do not look 200 times
//! each while they are queued. Readers open job files and the lock file
//! read-only, so reading the queue wakes no one either. Memory freed by
//! tenants outside the queue makes no event here, so a waiting job also
//! looks again after a while: [`RECHECK`] for the next job to start, longer
//! the further back it waits (see [`QueueWatch::recheck_after`]), so that
//! 200 waiting jobs cost little CPU while nothing happens.
//!
//! inotify instances are limited per user (`fs.inotify.max_user_instances`,
//! often 128). A job that cannot have one waits by sleeping and looks
//! again every [`RECHECK_WITHOUT_INOTIFY`]: slower to start, never refused.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a waiting job looks again when nothing in the queue changed.
pub const RECHECK: Duration = Duration::from_secs(2);
/// How often a waiting job without an inotify watch looks again.
pub const RECHECK_WITHOUT_INOTIFY: Duration = Duration::from_secs(1);
/// The longest a waiting job goes without looking.
pub const RECHECK_CAP: Duration = Duration::from_secs(30);
/// How much later than the job before it a woken job looks (see [`stagger`]).
pub const STAGGER_STEP: Duration = Duration::from_micros(500);
/// The longest a woken job holds back its look.
pub const STAGGER_CAP: Duration = Duration::from_millis(50);

/// How long a job with `position` jobs before it waits, once woken, before
/// it looks. One event wakes every waiting job and their looks take the
/// queue lock one at a time, in whatever order the kernel grants it; with
/// 200 waiting, the job at the head could be the last to look. Holding
/// back each job by its place lets the jobs most likely to start look
/// first, which is what the time from room freed to job started depends on.
pub fn stagger(position: usize) -> Duration {
    STAGGER_STEP.saturating_mul(u32::try_from(position).unwrap_or(u32::MAX)).min(STAGGER_CAP)
}

/// What a waiting job sleeps on: an inotify watch on the queue directory,
/// or, where none can be had, the clock.
pub enum QueueWatch {
    Inotify(OwnedFd),
    Clock,
}

impl QueueWatch {
    /// Watches `dir` for job files that go; the clock if inotify says no.
    pub fn new(dir: &Path) -> QueueWatch {
        Self::inotify(dir).map_or(QueueWatch::Clock, QueueWatch::Inotify)
    }

    fn inotify(dir: &Path) -> Result<OwnedFd, String> {
        // SAFETY: inotify_init1 takes flags only.
        let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if raw < 0 {
            return Err(format!("cannot watch the queue: inotify_init1: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        let mask = libc::IN_DELETE | libc::IN_CLOSE_WRITE | libc::IN_MOVED_FROM;
        // SAFETY: a valid inotify descriptor and a NUL-terminated path.
        if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) } < 0 {
            return Err(format!("cannot watch {}: {}", dir.display(), std::io::Error::last_os_error()));
        }
        Ok(fd)
    }

    /// How long a job with `position` jobs before it sleeps, at most,
    /// before it looks again: the base interval (shorter without inotify,
    /// since then the clock is all that wakes it) times 1 + position / 4,
    /// at most [`RECHECK_CAP`].
    pub fn recheck_after(&self, position: usize) -> Duration {
        let base = match self {
            QueueWatch::Inotify(_) => RECHECK,
            QueueWatch::Clock => RECHECK_WITHOUT_INOTIFY,
        };
        let factor = 1 + u32::try_from(position / 4).unwrap_or(u32::MAX);
        base.saturating_mul(factor).min(RECHECK_CAP)
    }

    /// Sleeps until a job file goes or `limit` passes.
    pub fn wait(&self, limit: Duration) {
        let fd = match self {
            QueueWatch::Inotify(fd) => fd,
            QueueWatch::Clock => return std::thread::sleep(limit.min(RECHECK_WITHOUT_INOTIFY)),
        };
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let mut poll = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let timeout_ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut poll, 1, timeout_ms) };
            if ready > 0 && drain_job_events(fd) {
                return;
            }
            if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return;
            }
        }
    }

}

/// Reads every pending event of inotify descriptor `fd`; whether one named a job file.
fn drain_job_events(fd: &OwnedFd) -> bool {
    let mut buffer = [0u8; 4096];
    let mut any = false;
    loop {
        // SAFETY: reading into a buffer we own, of its length.
        let read = unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
        if read <= 0 {
            return any;
        }
        any |= names_job_file(&buffer[..read as usize]);
    }
}

/// Whether a run of `inotify_event` records names a `*.job` file.
fn names_job_file(mut events: &[u8]) -> bool {
    const HEADER_BYTES: usize = std::mem::size_of::<libc::inotify_event>();
    let mut any = false;
    while events.len() >= HEADER_BYTES {
        // The name length is the header's last u32.
        let len_bytes: [u8; 4] = events[HEADER_BYTES - 4..HEADER_BYTES].try_into().unwrap_or([0; 4]);
        let name_len = u32::from_ne_bytes(len_bytes) as usize;
        let name = events.get(HEADER_BYTES..HEADER_BYTES + name_len).unwrap_or_default();
        let name = name.split(|b| *b == 0).next().unwrap_or_default();
        any |= name.ends_with(super::store::JOB_SUFFIX.as_bytes());
        events = events.get(HEADER_BYTES + name_len..).unwrap_or_default();
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_further_back_look_less_often() {
        let clock = QueueWatch::Clock;
        assert_eq!(clock.recheck_after(0), RECHECK_WITHOUT_INOTIFY);
        assert_eq!(clock.recheck_after(3), RECHECK_WITHOUT_INOTIFY);
        assert_eq!(clock.recheck_after(4), 2 * RECHECK_WITHOUT_INOTIFY);
        assert_eq!(clock.recheck_after(10_000), RECHECK_CAP);
        let start = Instant::now();
        clock.wait(Duration::from_millis(10));
        assert!(start.elapsed() >= Duration::from_millis(10));
    }

    #[test]
    fn the_head_of_the_queue_looks_first_once_woken() {
        assert_eq!(stagger(0), Duration::ZERO);
        assert_eq!(stagger(4), 4 * STAGGER_STEP);
        assert_eq!(stagger(usize::MAX), STAGGER_CAP);
    }

    #[test]
    fn a_job_file_change_wakes_and_other_files_do_not() {
        let dir = std::env::temp_dir().join(format!("gpuslice-queue-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let QueueWatch::Inotify(fd) = QueueWatch::new(&dir) else { panic!("no inotify here") };
        let watch = QueueWatch::Inotify(fd.try_clone().unwrap());
        std::fs::write(dir.join("next-id"), b"2").unwrap();
        assert!(!drain_job_events(&fd), "other files wake no one");
        // A job file created and kept open (as its holder does) wakes no one.
        let held = std::fs::File::create(dir.join("5.job")).unwrap();
        std::io::Write::write_all(&mut &held, b"{}").unwrap();
        assert!(!drain_job_events(&fd), "a new job wakes no one");
        // Its holder gone, the last close wakes.
        drop(held);
        let start = Instant::now();
        watch.wait(Duration::from_secs(60));
        assert!(start.elapsed() < Duration::from_secs(30), "woken by the job file, not the limit");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
