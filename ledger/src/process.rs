//! Who the calling process is, in the words a slot records: pid as its
//! `/proc` names it, pid in its own namespace, PID-namespace inode and start time. Read once, when a
//! process claims its slot.

use std::os::unix::fs::MetadataExt;

/// The identity recorded in a process slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// Pid as the `/proc` this process sees names it: the first `NSpid`
    /// field of `/proc/self/status`, or `getpid()` when there is none. In a
    /// container with its own PID namespace and `/proc` this is the
    /// namespace pid, not the host's (which NVML reports).
    pub pid: u32,
    /// `getpid()`: the pid in the process's own PID namespace.
    pub ns_pid: u32,
    /// Inode of `/proc/self/ns/pid` (0 when it cannot be read).
    pub pidns_inode: u64,
    /// Field 22 of `/proc/self/stat`, clock ticks after boot (0 when unreadable).
    pub start_time_ticks: u64,
}

impl ProcessIdentity {
    /// The calling process.
    pub fn current() -> ProcessIdentity {
        // SAFETY: getpid has no preconditions and cannot fail.
        let ns_pid = unsafe { libc::getpid() } as u32;
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let pid = first_nspid(&status).unwrap_or(ns_pid);
        let pidns_inode = std::fs::metadata("/proc/self/ns/pid").map(|m| m.ino()).unwrap_or(0);
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let start_time_ticks = start_time_ticks(&stat).unwrap_or(0);
        ProcessIdentity { pid, ns_pid, pidns_inode, start_time_ticks }
    }
}

/// The first pid of the `NSpid:` line of a `/proc/PID/status` text.
pub fn first_nspid(status: &str) -> Option<u32> {
    let line = status.lines().find_map(|line| line.strip_prefix("NSpid:"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The start time (field 22) of a `/proc/PID/stat` text. The command name
/// (field 2) may hold spaces and parentheses, so fields are counted after the
/// last `)`.
pub fn start_time_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // Fields after the command start at field 3 (state); field 22 is the 20th of them.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nspid_first_field_is_the_outer_pid() {
        let status = "Name:\tpython\nPid:\t7\nNSpid:\t4242\t7\nNStgid:\t4242\t7\n";
        assert_eq!(first_nspid(status), Some(4242));
        assert_eq!(first_nspid("Name:\tx\n"), None);
    }

    #[test]
    fn start_time_survives_odd_command_names() {
        let stat = "12 (a) b (c) S 1 12 12 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(start_time_ticks(stat), Some(98765));
        assert_eq!(start_time_ticks("garbage"), None);
    }

    #[test]
    fn current_process_reads_its_own_identity() {
        let me = ProcessIdentity::current();
        assert_eq!(me.ns_pid, std::process::id());
        assert!(me.start_time_ticks > 0);
        assert!(me.pidns_inode > 0);
    }
}
