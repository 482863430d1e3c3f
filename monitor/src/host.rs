//! From a ledger slot to a host pid; and who a uid is (its name, its groups).
//!
//! A slot records the pid its process saw in its own `/proc` (the host pid
//! when that `/proc` is the host's), its pid inside its PID namespace, the
//! namespace's inode and its start time. The monitor trusts a recorded pid
//! only if the host's `/proc/<pid>` shows the same namespace and start time;
//! otherwise it looks for the process by (namespace inode, pid in namespace,
//! start time) among all host processes. So attribution holds across PID
//! namespaces and pid reuse cannot fool it.
//!
//! All of that is what the tenant wrote, so it only *finds* a candidate.
//! What ties a process to a slot is the kernel's word: the process holds
//! the slot's OFD lock on that very ledger file ([`LockCheck`]). A tenant
//! can write any pid into its ledger, but it cannot make another tenant's
//! process open its file and lock its slot, so it can never have that
//! process counted as its own, or killed as its own.

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

/// A slot's lock: which file (device and inode, as `fstat` reports them)
/// and which byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotLock {
    pub dev: u64,
    pub ino: u64,
    pub offset: u64,
}

impl SlotLock {
    /// The lock of slot `index` of `ledger`, or `None` if the file cannot
    /// be inspected.
    pub fn of(ledger: &ledger::Ledger, index: usize) -> Option<SlotLock> {
        // SAFETY: fstat on the ledger's own open descriptor, into a zeroed
        // struct the kernel fills in.
        let mut stat: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: as above; `stat` is valid for writes.
        if unsafe { libc::fstat(ledger.lock_fd(), &mut stat) } != 0 {
            return None;
        }
        Some(SlotLock { dev: stat.st_dev, ino: stat.st_ino, offset: ledger::slot_lock_offset(index) })
    }
}

/// What the kernel says about a process and a slot's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockCheck {
    /// One of the process's open files is the ledger and holds the lock.
    Holds,
    /// The process does not hold it (or does not exist).
    DoesNot,
    /// Its open files cannot be read (no permission): nothing is known.
    Unknown,
}

/// Whether one `lock:` line of a `/proc/<pid>/fdinfo/<fd>` names an OFD
/// write lock covering `lock`:
/// `lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10010993 128 128`
/// (major:minor in hex, then the inode, then the first and last byte or EOF).
pub fn lock_line_covers(line: &str, lock: &SlotLock) -> bool {
    let Some(rest) = line.strip_prefix("lock:") else { return false };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // [id:, OFDLCK, ADVISORY, WRITE, pid, maj:min:ino, start, end]
    let [_, kind, _, access, _, file, start, end] = fields[..] else { return false };
    if kind != "OFDLCK" || access != "WRITE" {
        return false;
    }
    let mut parts = file.split(':');
    let (Some(major), Some(minor), Some(ino), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(major), Ok(minor), Ok(ino)) = (u32::from_str_radix(major, 16), u32::from_str_radix(minor, 16), ino.parse::<u64>()) else {
        return false;
    };
    let same_file = ino == lock.ino && libc::makedev(major, minor) == lock.dev;
    let Ok(start) = start.parse::<u64>() else { return false };
    let covers_end = end == "EOF" || end.parse::<u64>().is_ok_and(|end| end >= lock.offset);
    same_file && start <= lock.offset && covers_end
}

/// The most open files of one process looked at for a lock: a process
/// with more (a hostile one) cannot make each look cost seconds. A process
/// under the shim opens its ledger early, among its first descriptors.
pub const MAX_FDS_SCANNED: usize = 4096;

/// Whether host process `pid` holds `lock`, by its open files under
/// `proc_root` (`/proc`).
pub fn check_lock(proc_root: &Path, pid: u32, lock: &SlotLock) -> LockCheck {
    let dir = proc_root.join(pid.to_string());
    let entries = match std::fs::read_dir(dir.join("fd")) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return LockCheck::Unknown,
        Err(_) => return LockCheck::DoesNot,
    };
    for entry in entries.flatten().take(MAX_FDS_SCANNED) {
        // The link is followed to the open file itself, renamed or not.
        let Ok(meta) = std::fs::metadata(entry.path()) else { continue };
        if meta.dev() != lock.dev || meta.ino() != lock.ino {
            continue;
        }
        let Ok(info) = std::fs::read_to_string(dir.join("fdinfo").join(entry.file_name())) else { continue };
        if info.lines().any(|line| lock_line_covers(line, lock)) {
            return LockCheck::Holds;
        }
    }
    LockCheck::DoesNot
}

/// Whether host process `pid` holds an OFD lock on any file, by its open
/// files under `proc_root` (`/proc`); a process under the shim holds its
/// slot's. When its open files cannot be read, the answer is yes: nothing
/// is known, and the caller acts only on a no.
pub fn holds_any_ofd_lock(proc_root: &Path, pid: u32) -> bool {
    let dir = proc_root.join(pid.to_string()).join("fdinfo");
    let Ok(entries) = std::fs::read_dir(&dir) else { return proc_root.join(pid.to_string()).exists() };
    entries.flatten().take(MAX_FDS_SCANNED).any(|entry| {
        std::fs::read_to_string(entry.path())
            .is_ok_and(|info| info.lines().any(|line| line.starts_with("lock:") && line.contains("OFDLCK")))
    })
}

/// Remembers which (process, slot lock) pairs the kernel confirmed, so
/// each is looked up once: a process keeps its slot's lock until it exits
/// or releases the slot, and either frees the slot (a new claim is a new
/// generation, checked anew).
#[derive(Default)]
pub struct LockCache {
    confirmed: std::collections::HashSet<(u32, u64, SlotLock, u32)>,
}

impl LockCache {
    /// Whether host pid `pid` (started at `start_time_ticks`) holds the lock
    /// of a slot of generation `generation`.
    pub fn check(&mut self, pid: u32, start_time_ticks: u64, lock: &SlotLock, generation: u32) -> LockCheck {
        let key = (pid, start_time_ticks, *lock, generation);
        if self.confirmed.contains(&key) {
            return LockCheck::Holds;
        }
        let found = check_lock(Path::new("/proc"), pid, lock);
        if found == LockCheck::Holds {
            // Bounded: forget everything now and then rather than track exits.
            if self.confirmed.len() >= 65_536 {
                self.confirmed.clear();
            }
            self.confirmed.insert(key);
        }
        found
    }
}

/// Whether `pid` still names the process that started at `start_time_ticks`.
pub fn same_process(pid: u32, start_time_ticks: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|stat| ledger::process::start_time_ticks(&stat))
        == Some(start_time_ticks)
}

/// The start time of a host process, if it exists.
pub fn start_time_of(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|stat| ledger::process::start_time_ticks(&stat))
}

/// Room for the strings `getpwnam_r` and `getgrnam_r` return.
const NSS_BUFFER_BYTES: usize = 64 * 1024;

/// The account name of `uid`, through the C library (so NSS sources such
/// as LDAP are asked too).
pub fn user_name(uid: u32) -> Option<String> {
    let mut buffer = vec![0 as libc::c_char; 4096];
    // SAFETY: `passwd` is a plain C struct of integers and pointers, for
    // which all zeroes is a valid value; getpwuid_r fills it.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local that outlasts the call, and
    // the buffer's length is the one passed.
    let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    if rc != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success `pw_name` points to a NUL-terminated string inside
    // `buffer`, which is still alive.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// The uid of user `name`, as this host's user database says.
pub fn uid_by_name(name: &str) -> Option<u32> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: a zeroed passwd struct is a valid value to fill in.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; NSS_BUFFER_BYTES];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and the buffer's length is given.
    let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut entry, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    (rc == 0 && !found.is_null()).then_some(entry.pw_uid)
}

/// The gid of group `name`, as this host's group database says.
pub fn gid_by_name(name: &str) -> Option<u32> {
    let name = std::ffi::CString::new(name).ok()?;
    // SAFETY: a zeroed group struct is a valid value to fill in.
    let mut entry: libc::group = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; NSS_BUFFER_BYTES];
    let mut found: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and the buffer's length is given.
    let rc = unsafe { libc::getgrnam_r(name.as_ptr(), &mut entry, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    (rc == 0 && !found.is_null()).then_some(entry.gr_gid)
}

/// The groups of user `uid` as the user database says (its primary group
/// and every group that lists it); empty for a uid it does not know. What a
/// user is by the host's own records, not what one of its processes claims.
pub fn groups_of(uid: u32) -> Vec<u32> {
    // SAFETY: a zeroed passwd struct is a valid value to fill in.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buffer = vec![0 as libc::c_char; NSS_BUFFER_BYTES];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and the buffer's length is given.
    let rc = unsafe { libc::getpwuid_r(uid, &mut entry, buffer.as_mut_ptr(), buffer.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return Vec::new();
    }
    let mut groups: Vec<libc::gid_t> = vec![0; 256];
    loop {
        let mut count = groups.len() as libc::c_int;
        // SAFETY: pw_name points into `buffer`, alive here; `groups` holds `count` entries.
        let rc = unsafe { libc::getgrouplist(entry.pw_name, entry.pw_gid, groups.as_mut_ptr(), &mut count) };
        if rc >= 0 {
            groups.truncate(count.max(0) as usize);
            return groups;
        }
        if groups.len() >= 65_536 {
            return vec![entry.pw_gid];
        }
        let wanted = (count.max(0) as usize).max(groups.len() * 2);
        groups.resize(wanted, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::process::ProcessIdentity;

    #[test]
    fn a_process_holding_any_ofd_lock_is_known_by_its_fdinfo() {
        let proc_root = std::env::temp_dir().join(format!("gpuslice-host-locks-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&proc_root);
        for (pid, info) in [
            (10, "pos:\t0\nflags:\t02\nlock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10010993 128 128\n"),
            (11, "pos:\t0\nflags:\t02\nlock:\t1: POSIX  ADVISORY  WRITE 11 fe:00:99 0 EOF\n"),
            (12, "pos:\t0\nflags:\t02\n"),
        ] {
            std::fs::create_dir_all(proc_root.join(format!("{pid}/fdinfo"))).unwrap();
            std::fs::write(proc_root.join(format!("{pid}/fdinfo/3")), info).unwrap();
        }
        assert!(holds_any_ofd_lock(&proc_root, 10));
        assert!(!holds_any_ofd_lock(&proc_root, 11), "a POSIX lock is no slot's");
        assert!(!holds_any_ofd_lock(&proc_root, 12));
        assert!(!holds_any_ofd_lock(&proc_root, 13), "a process that is gone holds nothing");
        let _ = std::fs::remove_dir_all(&proc_root);
    }

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
    fn lock_lines_must_name_the_file_the_byte_and_a_write_ofd_lock() {
        let dev = libc::makedev(0xfe, 0);
        let lock = SlotLock { dev, ino: 10010993, offset: 128 };
        assert!(lock_line_covers("lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10010993 128 128", &lock));
        assert!(lock_line_covers("lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10010993 0 EOF", &lock));
        for other in [
            "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10010993 129 200", // another byte
            "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10010994 128 128", // another file
            "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:01:10010993 128 128", // another device
            "lock:\t1: POSIX  ADVISORY  WRITE 77 fe:00:10010993 128 128", // not an OFD lock
            "lock:\t1: OFDLCK ADVISORY  READ -1 fe:00:10010993 128 128",  // a read lock
            "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:10010993 128",     // cut short
            "pos:\t0",
        ] {
            assert!(!lock_line_covers(other, &lock), "{other}");
        }
    }

    #[test]
    fn the_kernel_says_which_process_holds_a_slot_lock() {
        let dir = std::env::temp_dir().join(format!("gpuslice-host-test-{}", std::process::id()));
        let ledger = ledger::Ledger::open_or_create(&dir, "locks").unwrap();
        let slot = ledger.claim_slot().unwrap();
        let mine = SlotLock::of(&ledger, slot.index()).unwrap();
        let other = SlotLock::of(&ledger, slot.index() + 1).unwrap();
        let proc_root = Path::new("/proc");
        assert_eq!(check_lock(proc_root, std::process::id(), &mine), LockCheck::Holds);
        assert_eq!(check_lock(proc_root, std::process::id(), &other), LockCheck::DoesNot);
        // Another process (our parent) holds nothing of it.
        let parent = std::os::unix::process::parent_id();
        assert_eq!(check_lock(proc_root, parent, &mine), LockCheck::DoesNot);
        ledger.release_slot(slot);
        assert_eq!(check_lock(proc_root, std::process::id(), &mine), LockCheck::DoesNot);
        let _ = std::fs::remove_dir_all(&dir);
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
