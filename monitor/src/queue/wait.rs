//! Sleeping until the monitor's board changes, without spinning.
//!
//! A waiting job watches the queue directory with inotify and wakes when
//! the board is replaced (the monitor renames a new one over it: an
//! `IN_MOVED_TO` named [`BOARD_FILE`]). Nothing else can change what the
//! job is told, so submissions and job files wake no one. It also reads
//! the board again every [`RECHECK`], whatever happens: a missed event
//! costs at most that.
//!
//! inotify instances are limited per user (`fs.inotify.max_user_instances`,
//! often 128). A job that cannot have one sleeps [`RECHECK`] between
//! reads: slower to start, never refused.

use super::store::BOARD_FILE;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a waiting job reads the board when nothing woke it.
pub const RECHECK: Duration = Duration::from_secs(1);

/// What a waiting job sleeps on: an inotify watch on the queue directory,
/// or, where none can be had, the clock.
pub enum QueueWatch {
    Inotify(OwnedFd),
    Clock,
}

impl QueueWatch {
    /// Watches `dir` for a new board; the clock if inotify says no.
    pub fn new(dir: &Path) -> QueueWatch {
        Self::inotify(dir).map_or(QueueWatch::Clock, QueueWatch::Inotify)
    }

    fn inotify(dir: &Path) -> Result<OwnedFd, String> {
        watch_dir(dir, libc::IN_MOVED_TO)
    }

    /// Sleeps until the board is replaced or `limit` (at most [`RECHECK`]) passes.
    pub fn wait(&self, limit: Duration) {
        let limit = limit.min(RECHECK);
        let fd = match self {
            QueueWatch::Inotify(fd) => fd,
            QueueWatch::Clock => return std::thread::sleep(limit),
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
            if ready > 0 && drain_board_events(fd) {
                return;
            }
            if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return std::thread::sleep(left);
            }
        }
    }
}

/// A non-blocking inotify descriptor watching `dir` for the events of `mask`.
pub fn watch_dir(dir: &Path, mask: u32) -> Result<OwnedFd, String> {
    // SAFETY: inotify_init1 takes flags only.
    let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if raw < 0 {
        return Err(format!("cannot watch the queue: inotify_init1: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid inotify descriptor and a NUL-terminated path.
    if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) } < 0 {
        return Err(format!("cannot watch {}: {}", dir.display(), std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// Reads every pending event of inotify descriptor `fd`; whether one named the board.
fn drain_board_events(fd: &OwnedFd) -> bool {
    drain_events(fd, |name| name == BOARD_FILE.as_bytes())
}

/// Reads every pending event of inotify descriptor `fd`; whether the name
/// of one passed `wanted`.
pub fn drain_events(fd: &OwnedFd, wanted: impl Fn(&[u8]) -> bool) -> bool {
    let mut buffer = [0u8; 4096];
    let mut any = false;
    loop {
        // SAFETY: reading into a buffer we own, of its length.
        let read = unsafe { libc::read(fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
        if read <= 0 {
            return any;
        }
        any |= names_any(buffer.get(..read as usize).unwrap_or_default(), &wanted);
    }
}

/// Whether a run of `inotify_event` records names a file `wanted` passes.
fn names_any(mut events: &[u8], wanted: &impl Fn(&[u8]) -> bool) -> bool {
    const HEADER_BYTES: usize = std::mem::size_of::<libc::inotify_event>();
    let mut any = false;
    while events.len() >= HEADER_BYTES {
        // The name length is the header's last u32.
        let len_bytes: [u8; 4] = events.get(HEADER_BYTES - 4..HEADER_BYTES).and_then(|b| b.try_into().ok()).unwrap_or([0; 4]);
        let name_len = u32::from_ne_bytes(len_bytes) as usize;
        let name = events.get(HEADER_BYTES..HEADER_BYTES + name_len).unwrap_or_default();
        let name = name.split(|b| *b == 0).next().unwrap_or_default();
        any |= wanted(name);
        events = events.get(HEADER_BYTES + name_len..).unwrap_or_default();
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_waits_at_most_recheck() {
        let start = Instant::now();
        QueueWatch::Clock.wait(Duration::from_millis(10));
        assert!(start.elapsed() >= Duration::from_millis(10));
    }

    #[test]
    fn a_new_board_wakes_and_other_files_do_not() {
        let dir = std::env::temp_dir().join(format!("gpuslice-queue-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let QueueWatch::Inotify(fd) = QueueWatch::new(&dir) else { panic!("no inotify here") };
        let watch = QueueWatch::Inotify(fd.try_clone().unwrap());
        std::fs::write(dir.join("tmp"), b"{}").unwrap();
        std::fs::rename(dir.join("tmp"), dir.join("5.job")).unwrap();
        assert!(!drain_board_events(&fd), "a job file wakes no one");
        std::fs::write(dir.join("tmp"), b"{}").unwrap();
        std::fs::rename(dir.join("tmp"), dir.join(BOARD_FILE)).unwrap();
        let start = Instant::now();
        watch.wait(Duration::from_secs(60));
        assert!(start.elapsed() < RECHECK, "woken by the board, not the clock");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
