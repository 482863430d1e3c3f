//! From a ledger slot to a host pid.
//!
//! A slot records the pid its process saw in its own `/proc` (the host pid
//! when that `/proc` is the host's), its pid inside its PID namespace, the
//! namespace's inode and its start time. The monitor trusts a recorded pid
//! only if the host's `/proc/<pid>` shows the same namespace and start time;
//! otherwise it looks for the process by (namespace inode, pid in namespace,
//! start time) among all host processes. So attribution holds across PID
//! namespaces and pid reuse cannot fool it.

use ledger::process::{first_nspid, start_time_ticks};
use ledger::SlotView;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What the host's `/proc` says about one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ProcFacts {
    pidns_inode: u64,
    ns_pid: u32,
    start_time_ticks: u64,
}

fn facts(proc_root: &Path, pid: u32) -> Option<ProcFacts> {
    let dir = proc_root.join(pid.to_string());
    let pidns_inode = std::fs::metadata(dir.join("ns/pid")).ok()?.ino();
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    // The innermost pid is the last NSpid field.
    let ns_pid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|p| p.parse().ok())
        .or_else(|| first_nspid(&status))?;
    Some(ProcFacts { pidns_inode, ns_pid, start_time_ticks: start_time_ticks(&stat)? })
}

/// Resolves slots to host pids; caches a scan of `/proc` for one round.
pub struct PidResolver {
    proc_root: std::path::PathBuf,
    scan: Option<HashMap<(u64, u32, u64), u32>>,
}

impl PidResolver {
    /// A resolver for the host's `/proc`.
    pub fn new() -> PidResolver {
        PidResolver { proc_root: "/proc".into(), scan: None }
    }

    fn matches(slot: &SlotView, facts: ProcFacts) -> bool {
        facts.start_time_ticks == slot.start_time_ticks
            && (slot.pidns_inode == 0 || facts.pidns_inode == slot.pidns_inode)
            && facts.ns_pid == slot.ns_pid
    }

    /// The host pid of a live slot's process, if it can be found.
    pub fn host_pid(&mut self, slot: &SlotView) -> Option<u32> {
        if slot.pid != 0 {
            if let Some(found) = facts(&self.proc_root, slot.pid) {
                if Self::matches(slot, found) {
                    return Some(slot.pid);
                }
            }
        }
        let proc_root = self.proc_root.clone();
        let scan = self.scan.get_or_insert_with(|| {
            let mut map = HashMap::new();
            if let Ok(entries) = std::fs::read_dir(&proc_root) {
                for entry in entries.flatten() {
                    let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
                    if let Some(f) = facts(&proc_root, pid) {
                        map.insert((f.pidns_inode, f.ns_pid, f.start_time_ticks), pid);
                    }
                }
            }
            map
        });
        scan.get(&(slot.pidns_inode, slot.ns_pid, slot.start_time_ticks)).copied()
    }
}

/// Whether `pid` still names the process that started at `start_time_ticks`.
pub fn same_process(pid: u32, start_time_ticks: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| ledger::process::start_time_ticks(&stat))
        == Some(start_time_ticks)
}

/// The start time of a host process, if it exists.
pub fn start_time_of(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|stat| ledger::process::start_time_ticks(&stat))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::process::ProcessIdentity;

    fn view_of(me: ProcessIdentity) -> SlotView {
        SlotView {
            index: 0,
            generation: 0,
            state: 2,
            pid: me.pid,
            ns_pid: me.ns_pid,
            pidns_inode: me.pidns_inode,
            start_time_ticks: me.start_time_ticks,
            bytes_per_device: vec![],
            alive: true,
        }
    }

    #[test]
    fn finds_this_process_by_recorded_pid_and_by_scan() {
        let me = ProcessIdentity::current();
        let mut resolver = PidResolver::new();
        assert_eq!(resolver.host_pid(&view_of(me)), Some(std::process::id()));
        // A wrong recorded pid (as from a container's own /proc) is found by scan.
        let mut view = view_of(me);
        view.pid = 1;
        assert_eq!(resolver.host_pid(&view), Some(std::process::id()));
        // A reused pid (other start time) is not this process.
        let mut view = view_of(me);
        view.start_time_ticks += 1;
        assert_eq!(resolver.host_pid(&view), None);
        assert!(same_process(me.pid, me.start_time_ticks));
    }
}
