//! What `/proc` says about a tenant's process, for the process panel: its
//! user, command line and age; and the kill that the panel offers, which
//! only root or the process's owner may send, only to the very process
//! shown (same start time), never to a pid a ledger merely names.

use std::collections::HashMap;

/// One process as the kernel describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    /// Real, effective and saved user ids (`Uid:` in `/proc/PID/status`).
    pub uids: [u32; 3],
    /// The effective user's name, or its number.
    pub user: String,
    /// The command line, control characters replaced (a tenant chooses
    /// its own `argv`, and it must not write escape codes to the screen).
    pub command: String,
    /// Clock ticks after boot (field 22 of `/proc/PID/stat`).
    pub start_time_ticks: u64,
    /// How long it has run.
    pub elapsed_s: Option<u64>,
    /// Whether this `top` may list its open files: then the snapshot's
    /// lock check could be made, and a process it did not confirm does
    /// not hold the slot that names it.
    pub fds_readable: bool,
}

/// User names by uid, looked up once each.
#[derive(Default)]
pub struct Users {
    names: HashMap<u32, String>,
}

impl Users {
    pub fn name(&mut self, uid: u32) -> String {
        self.names.entry(uid).or_insert_with(|| crate::host::user_name(uid).unwrap_or_else(|| uid.to_string())).clone()
    }
}

/// Text that is safe to print to a terminal: every control character
/// (escape, newline, NUL) becomes `?`.
pub fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { '?' } else { c }).collect()
}

/// `argv` joined by spaces; for a process with none (a kernel thread, or
/// one that cleared it), its name in brackets, as `ps` shows it.
fn command_line(cmdline: &[u8], comm: &str) -> String {
    let args: Vec<String> = cmdline.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| printable(&String::from_utf8_lossy(a))).collect();
    if args.is_empty() {
        format!("[{}]", printable(comm.trim_end()))
    } else {
        args.join(" ")
    }
}

/// Field 22 of `/proc/PID/stat`, counted after the `(comm)` that may hold
/// spaces and parentheses.
fn stat_start_time_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

fn uids(status: &str) -> Option<[u32; 3]> {
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    let mut ids = line.split_whitespace().map(|v| v.parse::<u32>());
    Some([ids.next()?.ok()?, ids.next()?.ok()?, ids.next()?.ok()?])
}

fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

fn uptime_s() -> Option<f64> {
    std::fs::read_to_string("/proc/uptime").ok()?.split_whitespace().next()?.parse().ok()
}

/// What the kernel says about `pid`; `None` once it is gone (or hidden,
/// as in another PID namespace).
pub fn read(pid: u32, users: &mut Users) -> Option<ProcInfo> {
    let dir = format!("/proc/{pid}");
    let status = std::fs::read_to_string(format!("{dir}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let uids = uids(&status)?;
    let start = stat_start_time_ticks(&stat)?;
    let cmdline = std::fs::read(format!("{dir}/cmdline")).unwrap_or_default();
    let comm = std::fs::read_to_string(format!("{dir}/comm")).unwrap_or_default();
    let elapsed_s = uptime_s().map(|up| (up as u64).saturating_sub(start / clock_ticks_per_s()));
    let fds_readable = std::fs::read_dir(format!("{dir}/fd")).is_ok();
    Some(ProcInfo {
        uids,
        user: users.name(uids[1]),
        command: command_line(&cmdline, &comm),
        start_time_ticks: start,
        elapsed_s,
        fds_readable,
    })
}

/// `1:02:03`, `12:34`, or days: how long a process has run, as `ps` says it.
pub fn elapsed_text(elapsed_s: u64) -> String {
    let (days, rest) = (elapsed_s / 86_400, elapsed_s % 86_400);
    let (hours, minutes, seconds) = (rest / 3600, rest % 3600 / 60, rest % 60);
    match (days, hours) {
        (0, 0) => format!("{minutes}:{seconds:02}"),
        (0, _) => format!("{hours}:{minutes:02}:{seconds:02}"),
        _ => format!("{days}d{hours:02}h"),
    }
}

/// Who is asking: real and effective user ids of this process.
pub fn me() -> (u32, u32) {
    // SAFETY: getuid and geteuid have no preconditions and cannot fail.
    unsafe { (libc::getuid(), libc::geteuid()) }
}

/// Whether the kernel lets `me` (real, effective) signal a process with
/// `target` uids: root, or a match of either id with the target's real
/// or saved one (kill(2)).
pub fn may_signal(me: (u32, u32), target: [u32; 3]) -> bool {
    let (real, effective) = me;
    effective == 0 || [real, effective].iter().any(|id| *id == target[0] || *id == target[2])
}

/// Why a kill was not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillError {
    /// The pid now names another process, or none.
    Gone,
    /// The kernel refused (errno text).
    Refused(String),
}

/// Sends `signal` to `pid` if it is still the process that started at
/// `start_time_ticks`. (A pid can be reused between the look and the
/// key; the check narrows that window to the one system call.)
pub fn signal(pid: u32, start_time_ticks: u64, signal: libc::c_int) -> Result<(), KillError> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|_| KillError::Gone)?;
    if stat_start_time_ticks(&stat) != Some(start_time_ticks) {
        return Err(KillError::Gone);
    }
    let pid = libc::pid_t::try_from(pid).map_err(|_| KillError::Gone)?;
    // SAFETY: kill has no memory preconditions; `pid` is positive, so it
    // names one process, never a group.
    if pid > 0 && unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(KillError::Refused(std::io::Error::last_os_error().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process() {
        let mut users = Users::default();
        let me = read(std::process::id(), &mut users).expect("this process is in /proc");
        let (real, effective) = super::me();
        assert_eq!((me.uids[0], me.uids[1]), (real, effective));
        assert!(!me.command.is_empty() && !me.command.contains('\0'), "{me:?}");
        assert!(me.elapsed_s.is_some() && me.fds_readable);
        assert!(read(u32::MAX, &mut users).is_none());
        if effective == 0 {
            assert_eq!(users.name(0), "root");
        }
    }

    #[test]
    fn parsing() {
        assert_eq!(stat_start_time_ticks("12 (a) b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 4242 99"), Some(4242));
        assert_eq!(stat_start_time_ticks("12 (x"), None);
        assert_eq!(uids("Name:\tx\nUid:\t1000\t1001\t1002\t1003\n"), Some([1000, 1001, 1002]));
        assert_eq!(command_line(b"python\0train.py\0--lr\x1b[31m\0", "python\n"), "python train.py --lr?[31m");
        assert_eq!(command_line(b"", "kworker/0:1\n"), "[kworker/0:1]");
        assert_eq!(elapsed_text(5), "0:05");
        assert_eq!(elapsed_text(3723), "1:02:03");
        assert_eq!(elapsed_text(90_000), "1d01h");
    }

    #[test]
    fn who_may_signal() {
        assert!(may_signal((1000, 0), [5, 5, 5]), "root");
        assert!(may_signal((1000, 1000), [1000, 1000, 1000]), "the owner");
        assert!(may_signal((1000, 1000), [7, 7, 1000]), "the saved id");
        assert!(!may_signal((1000, 1000), [1001, 1000, 1001]), "only the effective id matches: the kernel refuses");
        assert!(!may_signal((1000, 1000), [0, 0, 0]));
    }

    #[test]
    fn a_reused_pid_is_not_signalled() {
        let mut users = Users::default();
        let me = read(std::process::id(), &mut users).unwrap();
        // Signal 0 checks without sending.
        assert_eq!(signal(std::process::id(), me.start_time_ticks, 0), Ok(()));
        assert_eq!(signal(std::process::id(), me.start_time_ticks + 1, 0), Err(KillError::Gone));
        assert_eq!(signal(u32::MAX, 0, 0), Err(KillError::Gone));
    }
}
