//! Thin wrappers over the few system calls simgpu needs: clocks, futexes on
//! shared memory, OFD locks, and the host pid.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// `CLOCK_MONOTONIC` in nanoseconds: system-wide, so comparable between
/// processes sharing the state file.
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Wall-clock microseconds since the epoch (NVML timestamps).
pub fn realtime_us() -> u64 {
    clock_ns(libc::CLOCK_REALTIME) / 1000
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Sleeps until the monotonic clock reaches `deadline_ns` (never busy-spins).
pub fn sleep_until_ns(deadline_ns: u64) {
    let ts =
        libc::timespec { tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t, tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long };
    loop {
        // SAFETY: `ts` is a valid timespec; a null remainder is allowed with TIMER_ABSTIME.
        let rc = unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// Asks the kernel for a small timer slack on this thread, so simulated
/// kernel times are not stretched by the default 50 µs slack.
pub fn set_small_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes an integer argument and only affects this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
}

/// Waits while `*word == expected`, at most `timeout`. Shared (no
/// FUTEX_PRIVATE_FLAG): the word lives in a MAP_SHARED mapping that other
/// processes wake.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: `word` is a live, aligned u32; the kernel only reads it and the timespec.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec, 0usize, 0u32) };
}

/// Wakes every waiter on `word`, in any process.
pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAKE does not access memory beyond the address.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}

/// The pid the host sees: the first field of `NSpid:` in /proc/self/status
/// (the outermost namespace), falling back to getpid().
pub fn host_pid() -> u32 {
    if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
        for line in status.lines() {
            if let Some(rest) = line.strip_prefix("NSpid:") {
                if let Some(Ok(pid)) = rest.split_whitespace().next().map(str::parse::<u32>) {
                    return pid;
                }
            }
        }
    }
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// Takes a classic (process-owned) write lock on one byte; false if
/// another process has it. The kernel drops it when the process exits, or
/// when the process closes any descriptor of the file.
pub fn posix_try_lock(fd: i32, offset: u64) -> bool {
    ofd_lock(fd, libc::F_SETLK, libc::F_WRLCK, offset).is_some()
}

/// Drops the lock taken by [`posix_try_lock`].
pub fn posix_unlock(fd: i32, offset: u64) {
    let _ = ofd_lock(fd, libc::F_SETLK, libc::F_UNLCK, offset);
}

/// The process that holds a classic lock on the byte, as the caller's PID
/// namespace numbers it: the kernel translates the owner's pid into the
/// asking process's namespace (0 when the owner is not visible there), as
/// the real driver reports pids as the host sees them. `None` when no other
/// process holds it or the owner is not visible.
pub fn posix_lock_owner(fd: i32, offset: u64) -> Option<u32> {
    let fl = ofd_lock(fd, libc::F_GETLK, libc::F_WRLCK, offset)?;
    (fl.l_type != libc::F_UNLCK as libc::c_short && fl.l_pid > 0).then_some(fl.l_pid as u32)
}

/// Whether process `pid` (as this process's /proc shows it) is stopped:
/// state `T` (a signal) or `t` (a tracer) in /proc/<pid>/stat. A process
/// that cannot be read counts as running.
pub fn process_is_stopped(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command name, which is in parentheses and may hold any byte.
    stat.rfind(')')
        .and_then(|end| stat.get(end + 1..))
        .and_then(|rest| rest.split_whitespace().next())
        .is_some_and(|state| matches!(state, "T" | "t"))
}

fn ofd_lock(fd: i32, cmd: libc::c_int, kind: libc::c_int, offset: u64) -> Option<libc::flock> {
    // SAFETY: flock is plain old data; all-zero is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = offset as libc::off_t;
    fl.l_len = 1;
    fl.l_pid = 0;
    // SAFETY: `fl` is a valid flock; fcntl only reads/writes it.
    let rc = unsafe { libc::fcntl(fd, cmd, &mut fl as *mut libc::flock) };
    (rc == 0).then_some(fl)
}

/// Takes an exclusive OFD lock on one byte; false if another holder has it.
pub fn ofd_try_lock(fd: i32, offset: u64) -> bool {
    ofd_lock(fd, libc::F_OFD_SETLK, libc::F_WRLCK, offset).is_some()
}

/// Drops the lock taken by [`ofd_try_lock`].
pub fn ofd_unlock(fd: i32, offset: u64) {
    let _ = ofd_lock(fd, libc::F_OFD_SETLK, libc::F_UNLCK, offset);
}

/// Whether some other open file description holds a lock on the byte.
/// Locks held through `fd` itself are not reported (the caller skips its own).
pub fn ofd_is_locked(fd: i32, offset: u64) -> bool {
    match ofd_lock(fd, libc::F_OFD_GETLK, libc::F_WRLCK, offset) {
        Some(fl) => fl.l_type != libc::F_UNLCK as libc::c_short,
        // Cannot tell: assume alive, never reclaim on doubt.
        None => true,
    }
}
