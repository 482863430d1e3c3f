//! Sleeping until the queue changes, without spinning.
//!
//! A waiting job watches the queue directory with inotify and wakes when a
//! job file is created, rewritten (a job started), removed, or closed after
//! writing. The last is how a holder's death is seen: the kernel closes a
//! dead process's files, and closing the job file that the holder opened
//! for writing is an `IN_CLOSE_WRITE`, however the holder ended. Readers
//! open job files read-only and the lock file read-only, so reading the
//! queue wakes no one. Memory freed by tenants outside the queue makes no
//! event here, so a waiting job also looks again every [`RECHECK`].

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// How often a waiting job looks again when nothing in the queue changed.
pub const RECHECK: Duration = Duration::from_secs(2);

/// An inotify watch on the queue directory.
pub struct QueueWatch {
    fd: OwnedFd,
}

impl QueueWatch {
    /// Watches `dir` for changes to job files.
    pub fn new(dir: &Path) -> Result<QueueWatch, String> {
        // SAFETY: inotify_init1 takes flags only.
        let raw = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        if raw < 0 {
            return Err(format!("cannot watch the queue: inotify_init1: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        let mask = libc::IN_CREATE | libc::IN_DELETE | libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_MOVED_TO | libc::IN_MOVED_FROM;
        // SAFETY: a valid inotify descriptor and a NUL-terminated path.
        if unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), mask) } < 0 {
            return Err(format!("cannot watch {}: {}", dir.display(), std::io::Error::last_os_error()));
        }
        Ok(QueueWatch { fd })
    }

    /// Sleeps until a job file changes or `limit` passes.
    pub fn wait(&self, limit: Duration) {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            let mut poll = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            let timeout_ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd.
            let ready = unsafe { libc::poll(&mut poll, 1, timeout_ms) };
            if ready > 0 && self.drain_job_events() {
                return;
            }
            if ready < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return;
            }
        }
    }

    /// Reads every pending event; whether one named a job file.
    fn drain_job_events(&self) -> bool {
        let mut buffer = [0u8; 4096];
        let mut any = false;
        loop {
            // SAFETY: reading into a buffer we own, of its length.
            let read = unsafe { libc::read(self.fd.as_raw_fd(), buffer.as_mut_ptr().cast(), buffer.len()) };
            if read <= 0 {
                return any;
            }
            any |= names_job_file(&buffer[..read as usize]);
        }
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
    fn a_job_file_change_wakes_and_other_files_do_not() {
        let dir = std::env::temp_dir().join(format!("gpuslice-queue-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let watch = QueueWatch::new(&dir).unwrap();
        std::fs::write(dir.join("next-id"), b"2").unwrap();
        assert!(!watch.drain_job_events(), "other files wake no one");
        std::fs::write(dir.join("5.job"), b"{}").unwrap();
        let start = Instant::now();
        watch.wait(Duration::from_secs(60));
        assert!(start.elapsed() < Duration::from_secs(30), "woken by the job file, not the limit");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
