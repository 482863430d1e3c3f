//! Who the calling process is, in the words a slot records: pid as its
//! `/proc` names it, pid in its own namespace, PID-namespace inode and start
//! time. Read once, when a process claims its slot, by [`SelfProcess::read`],
//! which the shim keeps for whatever else needs it (how many PID namespaces
//! deep the process is), so that `/proc/self` is read once per process.
//!
//! A process in the initial PID namespace (the usual case outside
//! containers) is named by its own pid in every `/proc` it can see itself
//! in, so `/proc/self/status` is not read at all there: a stat of
//! `/proc/self/ns/pid` and one read of `/proc/self/stat` (the start time)
//! are the whole cost.

use std::io::Read;
use std::os::unix::fs::MetadataExt;

/// `PROC_PID_INIT_INO`: the inode of the initial PID namespace.
pub const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

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

/// What one look at `/proc/self` tells about the calling process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfProcess {
    /// What its slot records.
    pub identity: ProcessIdentity,
    /// How many pids the `NSpid:` line of its status has: 1 in the initial
    /// PID namespace, more when the `/proc` it sees is an outer namespace's
    /// (the first is then that namespace's pid), 0 when unknown.
    pub nspid_levels: usize,
}

impl SelfProcess {
    /// Reads the calling process's identity: a stat of `/proc/self/ns/pid`,
    /// `/proc/self/status` only outside the initial PID namespace, and
    /// `/proc/self/stat`, each read with one buffer (no allocation).
    pub fn read() -> SelfProcess {
        // SAFETY: getpid has no preconditions and cannot fail.
        let ns_pid = unsafe { libc::getpid() } as u32;
        let pidns_inode = std::fs::metadata("/proc/self/ns/pid").map(|m| m.ino()).unwrap_or(0);
        let mut buf = [0u8; 4096];
        let (pid, nspid_levels) = if pidns_inode == PROC_PID_INIT_INO {
            // In the initial namespace the only `/proc` that shows this
            // process is that namespace's: NSpid is getpid() alone.
            (ns_pid, 1)
        } else {
            proc_text("/proc/self/status", &mut buf, |status| (first_nspid(status).unwrap_or(ns_pid), nspid_levels(status)))
        };
        let start_time_ticks = proc_text("/proc/self/stat", &mut buf, start_time_ticks).unwrap_or(0);
        SelfProcess { identity: ProcessIdentity { pid, ns_pid, pidns_inode, start_time_ticks }, nspid_levels }
    }
}

/// `f` of a `/proc` file's text: read into `buf` when it fits (always, but
/// for a status file with thousands of groups), else read whole; empty
/// when it cannot be read.
fn proc_text<T>(path: &str, buf: &mut [u8], f: impl FnOnce(&str) -> T) -> T {
    match read_small(path, buf) {
        Some(text) => f(text),
        None => f(&std::fs::read_to_string(path).unwrap_or_default()),
    }
}

impl ProcessIdentity {
    /// The calling process.
    pub fn current() -> ProcessIdentity {
        SelfProcess::read().identity
    }
}

/// A small `/proc` file read into `buf` with as few reads as it takes (one,
/// then the one that says end of file); `None` when it cannot be read, is
/// not UTF-8 or does not fit (a file that fills `buf` exactly counts as one
/// that does not).
fn read_small<'a>(path: &str, buf: &'a mut [u8]) -> Option<&'a str> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut len = 0;
    loop {
        let rest = buf.get_mut(len..)?;
        if rest.is_empty() {
            return None;
        }
        match file.read(rest) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    std::str::from_utf8(buf.get(..len)?).ok()
}

/// The number of pids on the `NSpid:` line of a `/proc/PID/status` text.
pub fn nspid_levels(status: &str) -> usize {
    status.lines().find_map(|l| l.strip_prefix("NSpid:")).map_or(0, |l| l.split_whitespace().count())
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

    /// The shortcut in the initial PID namespace names the process as its
    /// status would, and the stat read with one buffer gives what a whole
    /// read of the file gives.
    #[test]
    fn one_look_agrees_with_reading_the_files() {
        let me = SelfProcess::read();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert_eq!(me.identity.pid, first_nspid(&status).unwrap());
        assert_eq!(me.nspid_levels, nspid_levels(&status));
        assert_eq!(me.identity.start_time_ticks, start_time_ticks(&stat).unwrap());
    }

    #[test]
    fn nspid_levels_counts_namespaces() {
        assert_eq!(nspid_levels("Name:\tx\nNSpid:\t4242\t7\n"), 2);
        assert_eq!(nspid_levels("NSpid:\t7\n"), 1);
        assert_eq!(nspid_levels("Name:\tx\n"), 0);
    }

    #[test]
    fn small_reads_refuse_what_does_not_fit_and_the_reader_then_reads_it_whole() {
        let mut tiny = [0u8; 8];
        assert_eq!(read_small("/proc/self/stat", &mut tiny), None);
        assert_eq!(read_small("/nonexistent/gpuslice", &mut tiny), None);
        let ticks = proc_text("/proc/self/stat", &mut tiny, start_time_ticks);
        assert_eq!(ticks, start_time_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap()));
        assert!(ticks.is_some());
        assert_eq!(proc_text("/nonexistent/gpuslice", &mut tiny, str::len), 0);
    }
}
