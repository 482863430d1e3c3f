//! The shared state file: the simulated machine.
//!
//! Every process that names the same file (`SIMGPU_STATE`) maps it
//! `MAP_SHARED` and sees the same devices. The layout is `repr(C)`, atomics and
//! fixed-width integers only, pinned by const asserts. It holds, per device,
//! the used bytes (admission by compare-and-swap against the capacity, so the
//! capacity holds exactly across processes), the scheduler's ticket state and
//! utilization samples; and a table of process records.
//!
//! Creation is race-free: the first process builds a complete file under a
//! temporary name and `link(2)`s it into place; a loser of that race opens the
//! winner's file. A file of another magic, layout version or size, or one made
//! for another device configuration, is a typed error, never rewritten.
//!
//! Liveness: each process holds an OFD write lock on the first byte of its own
//! process record. When it dies, however it dies, the kernel drops the lock;
//! whoever next finds a record that is alive but unlocked (an allocation that
//! would fail, context creation, an NVML query, a scheduler waiter) reclaims it
//! with a compare-and-swap and gives its memory back to the device. The
//! reclaimer holds the dead record's lock while it works, so a reclaimer that
//! dies too is followed by another.
//!
//! # A process killed between two counters
//! A device's `used_bytes` is the sum of every record's `used_bytes` on it.
//! Changing both is two stores, and `kill -9` can land between them: with
//! the device's counter first, the device would keep bytes no record holds
//! (lost for good: no reclaim returns them); with the record's first, a
//! reclaim would return bytes the device never counted (the device would
//! then admit more than its capacity). So every change of the pair
//! (charge, uncharge, release, reclaim) is made under the device's *books*
//! lock ([`Books`]) and written to its journal first: the two values it is
//! about to store, armed last. The lock word names its holder by something
//! the kernel keeps alive only while the holder lives (its record's OFD lock
//! and the record's generation; a process with no record holds a *helper*
//! byte for the same purpose). A process that finds the lock held by a dead
//! holder takes it over and replays the holder's armed journal (both stores
//! again: they are idempotent), so the pair is always whole: the change
//! happened entirely, and the dead process's record, which reclaim then
//! drains, holds its share.

use crate::config::Config;
use crate::sys;
use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Mutex;

pub const MAGIC: u64 = u64::from_le_bytes(*b"SIMGPU\0\0");
pub const LAYOUT_VERSION: u32 = 3;
pub const MAX_DEVICES: usize = crate::config::MAX_DEVICES as usize;
pub const MAX_PROCS: usize = 256;
/// Tickets outstanding at once per device (contexts waiting for the device).
pub const TICKET_RING: usize = 1024;
pub const DEVICE_SAMPLES: usize = 64;
pub const PROC_SAMPLES: usize = 16;
/// Processes without a record (NVML-only clients, such as a monitor) that
/// can change the books at once.
pub const MAX_HELPERS: usize = 64;
/// A books lock token's index of helper `i` is `HELPER_INDEX_BASE + i`;
/// record `slot`'s is `slot + 1`.
const HELPER_INDEX_BASE: u32 = 0x1_0000;
/// Utilization sample period: NVML samples about every 1/6 s.
pub const SAMPLE_PERIOD_NS: u64 = 1_000_000_000 / 6;

/// Marker for types that live in the shared mapping: `repr(C)`, fixed-width
/// integers and atomics only, no pointers, valid when all-zero.
///
/// # Safety
/// Implementors must be valid for the all-zero bit pattern and contain no
/// pointers, `usize`, `bool` or enums.
pub unsafe trait Shared {}

#[repr(C, align(64))]
pub struct Header {
    pub magic: AtomicU64,
    pub layout_version: AtomicU32,
    /// Written last (release) by the creator.
    pub ready: AtomicU32,
    pub file_bytes: AtomicU64,
    pub device_count: AtomicU32,
    /// Devices and MIG instances together (`crate::mig::Topology`); 0 in
    /// files made before MIG, which have `device_count` slots.
    pub slot_count: AtomicU32,
    pub memory_bytes: AtomicU64,
    /// Random identity of this simulated machine; device UUIDs derive from it.
    pub instance_id: [AtomicU64; 2],
    /// `crate::mig::digest` of the MIG partitions the file was made for
    /// (0: none).
    pub mig_digest: AtomicU64,
}

#[repr(C)]
pub struct TicketHolder {
    pub ticket: AtomicU64,
    /// Process record index + 1 (0: none).
    pub proc_slot: AtomicU32,
    pub proc_generation: AtomicU32,
}

#[repr(C)]
pub struct DeviceSample {
    pub at_ns: AtomicU64,
    pub busy_ns_total: AtomicU64,
}

#[repr(C, align(64))]
pub struct DeviceShared {
    pub capacity_bytes: AtomicU64,
    pub used_bytes: AtomicU64,
    /// Ticket scheduler: the next ticket to hand out and the one being served.
    pub next_ticket: AtomicU64,
    pub now_serving: AtomicU64,
    /// Futex word bumped whenever `now_serving` moves.
    pub serve_seq: AtomicU32,
    /// Processes' worker threads sleeping on `serve_seq`.
    pub sleepers: AtomicU32,
    /// Kernel time completed on this device, all processes.
    pub busy_ns_total: AtomicU64,
    pub last_sample_ns: AtomicU64,
    pub sample_head: AtomicU64,
    /// The simulated time until which the device is taken: each holder
    /// raises it to where its work has reached, and the next holder's
    /// work starts no earlier (see `exec`'s module docs).
    pub free_at_ns: AtomicU64,
    pub samples: [DeviceSample; DEVICE_SAMPLES],
    pub tickets: [TicketHolder; TICKET_RING],
    pub books: Books,
}

/// The lock and journal under which a device's `used_bytes` and the records'
/// `used_bytes` on it change together (see the module docs).
#[repr(C, align(64))]
pub struct Books {
    /// 0 when free; else the holder's token: low 32 bits its record index + 1
    /// (or `HELPER_INDEX_BASE` + its helper index), high 32 bits that
    /// record's (or helper's) generation.
    pub lock: AtomicU64,
    /// The record the journalled change writes, + 1; 0 when no change is
    /// armed.
    pub journal_record: AtomicU32,
    pub _pad: u32,
    /// The device's `used_bytes` after the journalled change.
    pub journal_device_after: AtomicU64,
    /// The record's `used_bytes` on this device after the journalled change.
    pub journal_record_after: AtomicU64,
    pub _reserved: [u64; 4],
}

/// A byte a process without a record locks to name itself as a books holder.
#[repr(C)]
pub struct Helper {
    /// Bumped by each process that takes the helper.
    pub generation: AtomicU32,
    pub _pad: u32,
}

#[repr(C)]
pub struct ProcSample {
    pub at_us: AtomicU64,
    pub sm_util_percent: AtomicU32,
    pub _pad: u32,
}

#[repr(C)]
pub struct ProcDevice {
    pub used_bytes: AtomicU64,
    pub contexts: AtomicU32,
    pub _pad: u32,
    pub busy_ns_total: AtomicU64,
    pub last_sample_ns: AtomicU64,
    pub last_sample_busy_ns: AtomicU64,
    pub sample_head: AtomicU64,
    pub samples: [ProcSample; PROC_SAMPLES],
}

pub const PROC_FREE: u32 = 0;
pub const PROC_CLAIMED: u32 = 1;
pub const PROC_ALIVE: u32 = 2;
pub const PROC_RECLAIMING: u32 = 3;

#[repr(C, align(64))]
pub struct ProcRecord {
    pub state: AtomicU32,
    pub host_pid: AtomicU32,
    /// Bumped each time the record is claimed, so stale references (scheduler
    /// tickets) to an earlier owner are recognisable.
    pub generation: AtomicU32,
    pub _pad: u32,
    pub devices: [ProcDevice; MAX_DEVICES],
}

#[repr(C)]
pub struct Layout {
    pub header: Header,
    pub devices: [DeviceShared; MAX_DEVICES],
    pub procs: [ProcRecord; MAX_PROCS],
    pub helpers: [Helper; MAX_HELPERS],
}

// SAFETY: all of these are repr(C) atomics/integers, valid when zeroed.
unsafe impl Shared for Header {}
// SAFETY: as above.
unsafe impl Shared for DeviceShared {}
// SAFETY: as above.
unsafe impl Shared for ProcRecord {}
// SAFETY: as above.
unsafe impl Shared for Books {}
// SAFETY: as above.
unsafe impl Shared for Helper {}
// SAFETY: as above.
unsafe impl Shared for Layout {}

pub const FILE_BYTES: usize = std::mem::size_of::<Layout>();
const _: () = assert!(std::mem::size_of::<Header>() == 64);
// The MIG digest sits in what was the header's tail padding (zero in files
// made before MIG, which is the digest of no partition).
const _: () = assert!(std::mem::offset_of!(Header, mig_digest) == 56);
const _: () = assert!(std::mem::offset_of!(Layout, devices) == 64);
const _: () = assert!(std::mem::size_of::<DeviceShared>() == 128 + 64 * 16 + TICKET_RING * 16 + 64);
const _: () = assert!(std::mem::size_of::<Books>() == 64);
const _: () = assert!(std::mem::size_of::<Helper>() == 8);
const _: () = assert!(std::mem::size_of::<ProcDevice>() == 48 + PROC_SAMPLES * 16);
const _: () = assert!(std::mem::size_of::<ProcRecord>() == 64 + MAX_DEVICES * std::mem::size_of::<ProcDevice>());
const _: () = assert!(FILE_BYTES.is_multiple_of(64));

#[derive(Debug)]
pub enum StateError {
    Io { path: PathBuf, what: &'static str, err: std::io::Error },
    NotSimgpu { path: PathBuf },
    Version { path: PathBuf, found: u32 },
    Size { path: PathBuf, found: u64 },
    Mismatch { path: PathBuf, devices: u32, memory_bytes: u64, want_devices: u32, want_memory_bytes: u64 },
    MigMismatch { path: PathBuf },
    NotReady { path: PathBuf },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Io { path, what, err } => write!(f, "simgpu: cannot {what} state file {}: {err}", path.display()),
            StateError::NotSimgpu { path } => write!(f, "simgpu: {} is not a simgpu state file (bad magic); set SIMGPU_STATE to another path", path.display()),
            StateError::Version { path, found } => write!(f, "simgpu: state file {} has layout version {found}, this library uses {LAYOUT_VERSION}; remove it or set SIMGPU_STATE to another path", path.display()),
            StateError::Size { path, found } => write!(f, "simgpu: state file {} is {found} bytes, expected {FILE_BYTES}", path.display()),
            StateError::Mismatch { path, devices, memory_bytes, want_devices, want_memory_bytes } => write!(
                f,
                "simgpu: state file {} holds {devices} device(s) of {memory_bytes} bytes, but SIMGPU_DEVICES/SIMGPU_MEMORY ask for {want_devices} of {want_memory_bytes}; use the same values or another SIMGPU_STATE",
                path.display()
            ),
            StateError::MigMismatch { path } => write!(
                f,
                "simgpu: state file {} was made for other MIG partitions than SIMGPU_MIG asks for; use the same value or another SIMGPU_STATE",
                path.display()
            ),
            StateError::NotReady { path } => write!(f, "simgpu: state file {} was never finished by its creator", path.display()),
        }
    }
}

/// The mapped state file. Lives for the whole process (never unmapped).
pub struct SharedState {
    layout: &'static Layout,
    /// Our own open file description of the state file (OFD locks belong to it).
    fd: AtomicI32,
    pub path: PathBuf,
    /// This process's own record + 1 (0: none). Its own OFD lock is invisible
    /// to F_OFD_GETLK through the same open file description, so liveness
    /// checks must skip it explicitly.
    own: AtomicU32,
    /// The books token of this process when it has no record: a helper it
    /// holds (0: none taken yet). Taken under this lock, once.
    helper: Mutex<u64>,
    /// One reclaimer at a time in this process: its threads' OFD locks
    /// through one description would not keep each other out.
    reclaiming: Mutex<()>,
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> StateError + 'a {
    move |err| StateError::Io { path: path.to_path_buf(), what, err }
}

fn last_err() -> std::io::Error {
    std::io::Error::last_os_error()
}

fn cpath(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap_or_default()
}

impl SharedState {
    /// Opens (creating if needed) the state file for `config`.
    pub fn open(config: &Config) -> Result<SharedState, StateError> {
        let path = config.state_file();
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                std::fs::create_dir_all(dir).map_err(io(dir, "create the directory of"))?;
            }
        }
        let cp = cpath(&path);
        // SAFETY: `cp` is a valid NUL-terminated path.
        let mut fd = unsafe { libc::open(cp.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            let e = last_err();
            if e.raw_os_error() != Some(libc::ENOENT) {
                return Err(StateError::Io { path, what: "open", err: e });
            }
            Self::create(&path, config)?;
            // SAFETY: as above.
            fd = unsafe { libc::open(cp.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(StateError::Io { path, what: "open", err: last_err() });
            }
        }
        let state = Self::map(fd, path)?;
        state.check(config)?;
        Ok(state)
    }

    fn create(path: &Path, config: &Config) -> Result<(), StateError> {
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let ctmp = cpath(&tmp);
        // SAFETY: valid path; O_EXCL so we never share a half-built file.
        let fd = unsafe { libc::open(ctmp.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o666) };
        if fd < 0 {
            return Err(StateError::Io { path: tmp, what: "create", err: last_err() });
        }
        let result = (|| {
            // SAFETY: fd is ours and open for writing.
            if unsafe { libc::ftruncate(fd, FILE_BYTES as libc::off_t) } != 0 {
                return Err(StateError::Io { path: tmp.clone(), what: "size", err: last_err() });
            }
            let state = Self::map(fd, tmp.clone())?;
            let h = &state.layout.header;
            h.magic.store(MAGIC, Relaxed);
            h.layout_version.store(LAYOUT_VERSION, Relaxed);
            h.file_bytes.store(FILE_BYTES as u64, Relaxed);
            h.device_count.store(config.device_count, Relaxed);
            h.memory_bytes.store(config.memory_bytes, Relaxed);
            let topology = config.topology();
            h.slot_count.store(topology.slot_count().min(MAX_DEVICES) as u32, Relaxed);
            h.mig_digest.store(crate::mig::digest(&config.mig), Relaxed);
            let mut id = [0u8; 16];
            // SAFETY: `id` is a writable 16-byte buffer.
            let n = unsafe { libc::getrandom(id.as_mut_ptr().cast(), id.len(), 0) };
            if n != 16 {
                let seed = sys::now_ns() ^ ((std::process::id() as u64) << 32);
                id[..8].copy_from_slice(&seed.to_le_bytes());
                id[8..].copy_from_slice(&sys::realtime_us().to_le_bytes());
            }
            h.instance_id[0].store(u64::from_le_bytes(id[..8].try_into().unwrap_or_default()), Relaxed);
            h.instance_id[1].store(u64::from_le_bytes(id[8..].try_into().unwrap_or_default()), Relaxed);
            for (d, capacity) in state.layout.devices.iter().zip(topology.capacities(config.memory_bytes)) {
                d.capacity_bytes.store(capacity, Relaxed);
            }
            h.ready.store(1, Release);
            let cpath_final = cpath(path);
            // SAFETY: both paths are valid C strings. link fails with EEXIST if another process won.
            let rc = unsafe { libc::link(ctmp.as_ptr(), cpath_final.as_ptr()) };
            if rc != 0 && last_err().raw_os_error() != Some(libc::EEXIST) {
                return Err(StateError::Io { path: path.to_path_buf(), what: "publish", err: last_err() });
            }
            // The temporary mapping leaks by design (its fd is closed below; mapping stays valid).
            Ok(())
        })();
        // SAFETY: unlinking our own temporary name; closing our own fd.
        unsafe {
            libc::unlink(ctmp.as_ptr());
            libc::close(fd);
        }
        result
    }

    fn map(fd: i32, path: PathBuf) -> Result<SharedState, StateError> {
        // SAFETY: fstat into a zeroed stat buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open; st is writable.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(StateError::Io { path, what: "stat", err: last_err() });
        }
        if st.st_size as u64 != FILE_BYTES as u64 {
            return Err(StateError::Size { path, found: st.st_size as u64 });
        }
        // SAFETY: mapping a file we hold open, of exactly FILE_BYTES bytes.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), FILE_BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(StateError::Io { path, what: "map", err: last_err() });
        }
        // SAFETY: the mapping is FILE_BYTES long, page-aligned (so aligned for
        // Layout), never unmapped, and Layout is valid for any bit pattern its
        // creator or a zero-filled file can hold (all atomics/integers).
        let layout: &'static Layout = unsafe { &*(p as *const Layout) };
        Ok(SharedState { layout, fd: AtomicI32::new(fd), path, own: AtomicU32::new(0), helper: Mutex::new(0), reclaiming: Mutex::new(()) })
    }

    fn check(&self, config: &Config) -> Result<(), StateError> {
        let h = &self.layout.header;
        let path = self.path.clone();
        // A creator that died mid-way leaves no file (it builds under a temporary
        // name), so a present file is complete unless foreign.
        if h.magic.load(Acquire) != MAGIC {
            return Err(StateError::NotSimgpu { path });
        }
        let v = h.layout_version.load(Acquire);
        if v != LAYOUT_VERSION {
            return Err(StateError::Version { path, found: v });
        }
        if h.ready.load(Acquire) != 1 {
            return Err(StateError::NotReady { path });
        }
        let (devices, memory_bytes) = (h.device_count.load(Acquire), h.memory_bytes.load(Acquire));
        if devices != config.device_count || memory_bytes != config.memory_bytes {
            return Err(StateError::Mismatch {
                path,
                devices,
                memory_bytes,
                want_devices: config.device_count,
                want_memory_bytes: config.memory_bytes,
            });
        }
        if h.mig_digest.load(Acquire) != crate::mig::digest(&config.mig) {
            return Err(StateError::MigMismatch { path });
        }
        Ok(())
    }

    pub fn layout(&self) -> &'static Layout {
        self.layout
    }

    pub fn device_count(&self) -> u32 {
        self.layout.header.device_count.load(Relaxed).min(MAX_DEVICES as u32)
    }

    /// Devices and MIG instances: every slot that holds memory.
    pub fn slot_count(&self) -> u32 {
        let h = &self.layout.header;
        h.slot_count.load(Relaxed).max(h.device_count.load(Relaxed)).min(MAX_DEVICES as u32)
    }

    pub fn device(&self, index: usize) -> &'static DeviceShared {
        &self.layout.devices[index.min(MAX_DEVICES - 1)]
    }

    pub fn proc(&self, slot: usize) -> &'static ProcRecord {
        &self.layout.procs[slot.min(MAX_PROCS - 1)]
    }

    pub fn instance_id(&self) -> [u64; 2] {
        [self.layout.header.instance_id[0].load(Relaxed), self.layout.header.instance_id[1].load(Relaxed)]
    }

    fn lock_offset(slot: usize) -> u64 {
        (std::mem::offset_of!(Layout, procs) + slot * std::mem::size_of::<ProcRecord>()) as u64
    }

    /// The byte of record `slot` whose classic lock names its owner: beside
    /// the liveness lock's byte, never overlapping it.
    fn owner_lock_offset(slot: usize) -> u64 {
        Self::lock_offset(slot) + std::mem::offset_of!(ProcRecord, host_pid) as u64
    }

    /// The pid of record `slot`'s process as NVML reports it: the pid the
    /// asking process's namespace gives the record's owner, which the
    /// kernel tells through the owner's classic lock (a monitor in the
    /// host's PID namespace sees host pids for processes in containers, as
    /// with the real driver); where the owner is not visible (or is the
    /// asking process), the pid the owner recorded for itself.
    pub fn proc_pid(&self, slot: usize) -> u32 {
        sys::posix_lock_owner(self.fd(), Self::owner_lock_offset(slot)).unwrap_or_else(|| self.proc(slot).host_pid.load(Acquire))
    }

    /// Claims a process record for this process and locks it (liveness).
    pub fn claim_proc(&self, host_pid: u32) -> Option<usize> {
        for pass in 0..2 {
            for (slot, rec) in self.layout.procs.iter().enumerate() {
                if rec.state.compare_exchange(PROC_FREE, PROC_CLAIMED, AcqRel, Relaxed).is_err() {
                    continue;
                }
                if !sys::ofd_try_lock(self.fd(), Self::lock_offset(slot)) {
                    rec.state.store(PROC_FREE, Release);
                    continue;
                }
                rec.generation.fetch_add(1, AcqRel);
                rec.host_pid.store(host_pid, Relaxed);
                // Best effort: without it, readers see the recorded pid.
                sys::posix_try_lock(self.fd(), Self::owner_lock_offset(slot));
                for d in &rec.devices {
                    // `used_bytes` is left alone: a free record holds none,
                    // and it changes only under the books (module docs).
                    d.contexts.store(0, Relaxed);
                    d.busy_ns_total.store(0, Relaxed);
                    d.last_sample_ns.store(0, Relaxed);
                    d.last_sample_busy_ns.store(0, Relaxed);
                    for s in &d.samples {
                        s.at_us.store(0, Relaxed);
                    }
                }
                rec.state.store(PROC_ALIVE, Release);
                self.own.store(slot as u32 + 1, Release);
                return Some(slot);
            }
            if pass == 0 {
                self.reclaim_dead(None);
            }
        }
        None
    }

    /// Whether the record is held by a live process (its OFD lock is held).
    /// `own` is this process's record, whose lock is invisible to itself.
    pub fn proc_alive(&self, slot: usize, own: Option<usize>) -> bool {
        let own = own.or_else(|| self.own_slot());
        let rec = self.proc(slot);
        if rec.state.load(Acquire) != PROC_ALIVE {
            return false;
        }
        own == Some(slot) || sys::ofd_is_locked(self.fd(), Self::lock_offset(slot))
    }

    /// Releases the memory and records of processes that died (and of
    /// reclaimers that died at it). Returns how many records were reclaimed.
    pub fn reclaim_dead(&self, own: Option<usize>) -> usize {
        let own = own.or_else(|| self.own_slot());
        let _one_reclaimer = self.reclaiming.lock().unwrap_or_else(|e| e.into_inner());
        let mut reclaimed = 0;
        for (slot, rec) in self.layout.procs.iter().enumerate() {
            let state = rec.state.load(Acquire);
            if Some(slot) == own || (state != PROC_ALIVE && state != PROC_RECLAIMING) {
                continue;
            }
            // The owner, or a live reclaimer, holds the record's lock.
            if sys::ofd_is_locked(self.fd(), Self::lock_offset(slot)) {
                continue;
            }
            if !sys::ofd_try_lock(self.fd(), Self::lock_offset(slot)) {
                continue;
            }
            let state = rec.state.load(Acquire);
            if (state != PROC_ALIVE && state != PROC_RECLAIMING)
                || rec.state.compare_exchange(state, PROC_RECLAIMING, AcqRel, Relaxed).is_err()
            {
                sys::ofd_unlock(self.fd(), Self::lock_offset(slot));
                continue;
            }
            // Every device, not only those the record holds bytes on: a dead
            // holder's armed journal may name this record anywhere.
            let mut drained = true;
            for dev in 0..self.slot_count() as usize {
                drained &= self.drain(dev, slot);
                rec.devices[dev].contexts.store(0, Relaxed);
            }
            if drained {
                rec.host_pid.store(0, Relaxed);
                rec.state.store(PROC_FREE, Release);
                reclaimed += 1;
            }
            sys::ofd_unlock(self.fd(), Self::lock_offset(slot));
        }
        reclaimed
    }

    /// Takes record `slot`'s bytes on `dev` from the device, under the
    /// books; false when this process could not take the books (no token).
    fn drain(&self, dev: usize, slot: usize) -> bool {
        self.with_books(dev, |d| {
            let pd = &self.proc(slot).devices[dev.min(MAX_DEVICES - 1)];
            let taken = pd.used_bytes.load(Acquire);
            self.write_books(d, slot, dev, d.used_bytes.load(Acquire).saturating_sub(taken), 0);
        })
        .is_some()
    }

    /// This process's books token: its record's, else a helper's (taken on
    /// first use and kept for the life of the process); `None` when it has
    /// no record and every helper is taken.
    fn books_token(&self) -> Option<u64> {
        if let Some(slot) = self.own_slot() {
            let generation = self.proc(slot).generation.load(Acquire);
            return Some(((generation as u64) << 32) | (slot as u64 + 1));
        }
        let mut helper = self.helper.lock().unwrap_or_else(|e| e.into_inner());
        if *helper != 0 {
            return Some(*helper);
        }
        for (i, h) in self.layout.helpers.iter().enumerate() {
            if sys::ofd_is_locked(self.fd(), Self::helper_offset(i)) || !sys::ofd_try_lock(self.fd(), Self::helper_offset(i)) {
                continue;
            }
            let generation = h.generation.fetch_add(1, AcqRel).wrapping_add(1);
            *helper = ((generation as u64) << 32) | (HELPER_INDEX_BASE as u64 + i as u64);
            return Some(*helper);
        }
        None
    }

    fn helper_offset(i: usize) -> u64 {
        (std::mem::offset_of!(Layout, helpers) + i.min(MAX_HELPERS - 1) * std::mem::size_of::<Helper>()) as u64
    }

    /// Whether the holder named by a books token lives: its record (or
    /// helper) still has the token's generation and its lock is held.
    fn holder_alive(&self, token: u64, mine: u64) -> bool {
        if token == mine {
            // Another thread of this process.
            return true;
        }
        let (index, generation) = (token as u32, (token >> 32) as u32);
        if (1..=MAX_PROCS as u32).contains(&index) {
            let slot = index as usize - 1;
            return self.proc(slot).generation.load(Acquire) == generation
                && self.own_slot() != Some(slot)
                && sys::ofd_is_locked(self.fd(), Self::lock_offset(slot));
        }
        let Some(i) = index.checked_sub(HELPER_INDEX_BASE).map(|i| i as usize).filter(|i| *i < MAX_HELPERS) else {
            return false;
        };
        self.layout.helpers[i].generation.load(Acquire) == generation && sys::ofd_is_locked(self.fd(), Self::helper_offset(i))
    }

    /// Runs `change` holding device `dev`'s books lock, after replaying a
    /// dead holder's armed journal. `None` when this process has no token
    /// to hold the lock with.
    fn with_books<R>(&self, dev: usize, change: impl FnOnce(&DeviceShared) -> R) -> Option<R> {
        let token = self.books_token()?;
        let d = self.device(dev);
        let books = &d.books;
        let mut spins = 0u32;
        loop {
            match books.lock.compare_exchange_weak(0, token, AcqRel, Acquire) {
                Ok(_) => break,
                Err(0) => continue,
                Err(holder) => {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(128) {
                        if !self.holder_alive(holder, token) && books.lock.compare_exchange(holder, token, AcqRel, Acquire).is_ok() {
                            break;
                        }
                        if spins >= 128 * 64 {
                            // A holder stopped (SIGSTOP, a debugger): stop spinning.
                            std::thread::sleep(std::time::Duration::from_micros(200));
                        } else {
                            std::thread::yield_now();
                        }
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        self.replay(d, dev);
        let result = change(d);
        books.lock.store(0, Release);
        Some(result)
    }

    /// Writes a change of the pair (device `dev`'s `used_bytes`, record
    /// `slot`'s `used_bytes` on it), journal first. Under the books lock.
    fn write_books(&self, d: &DeviceShared, slot: usize, dev: usize, device_after: u64, record_after: u64) {
        let books = &d.books;
        books.journal_device_after.store(device_after, Relaxed);
        books.journal_record_after.store(record_after, Relaxed);
        books.journal_record.store(slot.min(MAX_PROCS - 1) as u32 + 1, Release);
        self.replay(d, dev);
    }

    /// Makes an armed journal's stores (again) and disarms it. Under the
    /// books lock.
    fn replay(&self, d: &DeviceShared, dev: usize) {
        let books = &d.books;
        let record = books.journal_record.load(Acquire);
        let Some(slot) = (record as usize).checked_sub(1) else { return };
        d.used_bytes.store(books.journal_device_after.load(Relaxed), Release);
        self.proc(slot).devices[dev.min(MAX_DEVICES - 1)].used_bytes.store(books.journal_record_after.load(Relaxed), Release);
        books.journal_record.store(0, Release);
    }

    fn fd(&self) -> i32 {
        self.fd.load(Acquire)
    }

    /// In a child after fork(): the inherited descriptor shares the parent's
    /// open file description, and with it the parent's liveness lock. Open our
    /// own, and forget the parent's record.
    pub fn reopen_after_fork(&self) -> bool {
        let cp = cpath(&self.path);
        // SAFETY: `cp` is a valid NUL-terminated path.
        let fd = unsafe { libc::open(cp.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return false;
        }
        let old = self.fd.swap(fd, AcqRel);
        // SAFETY: closing our copy of the inherited descriptor; the parent's
        // lock stays, since its open file description lives on in the parent.
        unsafe { libc::close(old) };
        self.own.store(0, Release);
        // The parent's helper byte is locked through the parent's description.
        *self.helper.lock().unwrap_or_else(|e| e.into_inner()) = 0;
        true
    }

    /// This process's record, if it claimed one.
    pub fn own_slot(&self) -> Option<usize> {
        (self.own.load(Acquire) as usize).checked_sub(1)
    }

    /// Gives the record back at a clean exit.
    pub fn release_proc(&self, slot: usize) {
        let rec = self.proc(slot);
        for dev in 0..self.slot_count() as usize {
            if rec.devices[dev].used_bytes.load(Acquire) > 0 {
                self.drain(dev, slot);
            }
            rec.devices[dev].contexts.store(0, Relaxed);
        }
        rec.state.store(PROC_FREE, Release);
        sys::posix_unlock(self.fd(), Self::owner_lock_offset(slot));
        sys::ofd_unlock(self.fd(), Self::lock_offset(slot));
    }

    /// Charges `bytes` to device `dev` for process record `slot`: succeeds only
    /// if the device's total stays within capacity. On a miss, dead
    /// processes are reclaimed and the charge retried once.
    pub fn charge(&self, dev: usize, slot: usize, bytes: u64) -> bool {
        for attempt in 0..2 {
            let charged = self.with_books(dev, |d| {
                let used = d.used_bytes.load(Acquire);
                let record = self.proc(slot).devices[dev.min(MAX_DEVICES - 1)].used_bytes.load(Acquire);
                match (used.checked_add(bytes), record.checked_add(bytes)) {
                    (Some(next), Some(record_next)) if next <= d.capacity_bytes.load(Relaxed) => {
                        self.write_books(d, slot, dev, next, record_next);
                        true
                    }
                    _ => false,
                }
            });
            if charged == Some(true) {
                return true;
            }
            if attempt == 0 && self.reclaim_dead(Some(slot)) == 0 {
                return false;
            }
        }
        false
    }

    /// Returns up to `bytes` that record `slot` holds on `dev` to the device.
    pub fn uncharge(&self, dev: usize, slot: usize, bytes: u64) {
        self.with_books(dev, |d| {
            let record = self.proc(slot).devices[dev.min(MAX_DEVICES - 1)].used_bytes.load(Acquire);
            let taken = record.min(bytes);
            self.write_books(d, slot, dev, d.used_bytes.load(Acquire).saturating_sub(taken), record - taken);
        });
    }

    /// (capacity, used) of a device, all processes.
    pub fn memory(&self, dev: usize) -> (u64, u64) {
        let d = self.device(dev);
        let cap = d.capacity_bytes.load(Relaxed);
        (cap, d.used_bytes.load(Acquire).min(cap))
    }

    /// Records a device utilization sample if a sample period has passed.
    pub fn sample_device(&self, dev: usize, now_ns: u64) {
        let d = self.device(dev);
        let last = d.last_sample_ns.load(Relaxed);
        if now_ns < last.saturating_add(SAMPLE_PERIOD_NS / 4) {
            return;
        }
        if d.last_sample_ns.compare_exchange(last, now_ns, AcqRel, Relaxed).is_err() {
            return;
        }
        let i = d.sample_head.fetch_add(1, AcqRel) as usize % DEVICE_SAMPLES;
        d.samples[i].at_ns.store(0, Release);
        d.samples[i].busy_ns_total.store(d.busy_ns_total.load(Acquire), Release);
        d.samples[i].at_ns.store(now_ns, Release);
    }

    /// Busy share of the device over about the last second, in percent.
    pub fn device_utilization_percent(&self, dev: usize) -> u32 {
        let now = sys::now_ns();
        self.sample_device(dev, now);
        let d = self.device(dev);
        let busy_now = d.busy_ns_total.load(Acquire);
        // The oldest sample at least ~1 s old, else the oldest we have.
        let mut best: Option<(u64, u64)> = None;
        for s in &d.samples {
            let at = s.at_ns.load(Acquire);
            let busy = s.busy_ns_total.load(Acquire);
            if at == 0 || at >= now || now - at > 3_000_000_000 {
                continue;
            }
            let score = (now - at).abs_diff(1_000_000_000);
            if best.is_none_or(|(bat, _)| (now - bat).abs_diff(1_000_000_000) > score) {
                best = Some((at, busy));
            }
        }
        match best {
            Some((at, busy)) if now > at => {
                let window = now - at;
                ((busy_now.saturating_sub(busy)).saturating_mul(100) / window).min(100) as u32
            }
            _ => 0,
        }
    }
}

/// Adds `bytes` to `word` unless the sum would pass `cap`.
pub fn try_add_capped(word: &AtomicU64, bytes: u64, cap: u64) -> bool {
    let mut cur = word.load(Relaxed);
    loop {
        let Some(next) = cur.checked_add(bytes) else { return false };
        if next > cap {
            return false;
        }
        match word.compare_exchange_weak(cur, next, AcqRel, Relaxed) {
            Ok(_) => return true,
            Err(seen) => cur = seen,
        }
    }
}

pub fn sub_saturating(word: &AtomicU64, bytes: u64) {
    let _ = word.fetch_update(AcqRel, Relaxed, |cur| Some(cur.saturating_sub(bytes)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(path: &Path, mem: u64) -> Config {
        Config {
            device_count: 2,
            memory_bytes: mem,
            state_path: Some(path.to_path_buf()),
            context_memory_bytes: 0,
            slice_us: 2000,
            kernel_us: 5,
            mig: Vec::new(),
            sensors: Default::default(),
        }
    }

    fn temp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("simgpu-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    #[test]
    fn capacity_is_exact_and_shared_between_mappings() {
        let p = temp("cap");
        let a = SharedState::open(&config(&p, 1 << 20)).unwrap();
        let b = SharedState::open(&config(&p, 1 << 20)).unwrap();
        let sa = a.claim_proc(1).unwrap();
        assert!(a.charge(0, sa, 1 << 19));
        assert!(a.charge(0, sa, 1 << 19));
        assert!(!b.charge(0, sa, 1));
        assert_eq!(b.memory(0), (1 << 20, 1 << 20));
        assert_eq!(b.memory(1), (1 << 20, 0));
        a.uncharge(0, sa, 1 << 19);
        assert_eq!(b.memory(0).1, 1 << 19);
        assert_eq!(a.proc(sa).devices[0].used_bytes.load(Relaxed), 1 << 19);
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn mismatch_and_garbage_are_typed_errors() {
        let p = temp("mismatch");
        SharedState::open(&config(&p, 1 << 20)).unwrap();
        assert!(matches!(SharedState::open(&config(&p, 2 << 20)), Err(StateError::Mismatch { .. })));
        std::fs::write(&p, b"hello").unwrap();
        assert!(matches!(SharedState::open(&config(&p, 1 << 20)), Err(StateError::Size { .. })));
        std::fs::write(&p, vec![7u8; FILE_BYTES]).unwrap();
        assert!(matches!(SharedState::open(&config(&p, 1 << 20)), Err(StateError::NotSimgpu { .. })));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn mig_instances_have_slots_of_their_own_size() {
        let p = temp("mig");
        let mut mig = config(&p, 8 << 20);
        mig.mig = crate::mig::parse("1=2g.35gb,1g.18gb", 2).unwrap();
        let st = SharedState::open(&mig).unwrap();
        assert_eq!((st.device_count(), st.slot_count()), (2, 4));
        assert_eq!([st.memory(0).0, st.memory(1).0, st.memory(2).0, st.memory(3).0], [8 << 20, 8 << 20, 2 << 20, 1 << 20]);
        let slot = st.claim_proc(1).unwrap();
        assert!(st.charge(3, slot, 1 << 20));
        assert!(!st.charge(3, slot, 1), "an instance is full at its own size");
        assert!(st.charge(2, slot, 1 << 20));
        // Released at exit on every slot, instances included.
        st.release_proc(slot);
        assert_eq!((st.memory(2).1, st.memory(3).1), (0, 0));
        // The same file under another partition (or none) is refused.
        assert!(matches!(SharedState::open(&config(&p, 8 << 20)), Err(StateError::MigMismatch { .. })));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_record_whose_lock_is_gone_is_reclaimed() {
        let p = temp("reclaim");
        let a = SharedState::open(&config(&p, 1 << 20)).unwrap();
        let b = SharedState::open(&config(&p, 1 << 20)).unwrap();
        let sa = a.claim_proc(11).unwrap();
        assert!(a.charge(1, sa, 4096));
        // Alive while `a`'s open file description holds its lock.
        assert_eq!(b.reclaim_dead(None), 0);
        assert!(b.proc_alive(sa, None));
        // Simulate death: drop the lock, as the kernel does when the process dies.
        sys::ofd_unlock(a.fd(), SharedState::lock_offset(sa));
        assert!(!b.proc_alive(sa, None));
        assert_eq!(b.reclaim_dead(None), 1);
        assert_eq!(b.memory(1).1, 0);
        assert_eq!(b.proc(sa).state.load(Relaxed), PROC_FREE);
        let _ = std::fs::remove_file(&p);
    }

    /// Holds `victim`'s record as a books holder that died after arming
    /// its journal: `device_step` says whether it had also stored the
    /// device's counter.
    fn die_mid_change(st: &SharedState, dev: usize, victim: usize, bytes: u64, device_step: bool) {
        let d = st.device(dev);
        let generation = st.proc(victim).generation.load(Relaxed);
        d.books.lock.store(((generation as u64) << 32) | (victim as u64 + 1), SeqCst);
        let device_after = d.used_bytes.load(SeqCst) + bytes;
        let record_after = st.proc(victim).devices[dev].used_bytes.load(SeqCst) + bytes;
        d.books.journal_device_after.store(device_after, SeqCst);
        d.books.journal_record_after.store(record_after, SeqCst);
        d.books.journal_record.store(victim as u32 + 1, SeqCst);
        if device_step {
            d.used_bytes.store(device_after, SeqCst);
        }
    }

    #[test]
    fn a_process_killed_between_the_two_counters_loses_nothing() {
        for device_step in [false, true] {
            let p = temp(&format!("killed-mid-charge-{device_step}"));
            let a = SharedState::open(&config(&p, 1 << 20)).unwrap();
            let b = SharedState::open(&config(&p, 1 << 20)).unwrap();
            let sa = a.claim_proc(1).unwrap();
            let sb = b.claim_proc(2).unwrap();
            assert!(a.charge(0, sa, 1000));
            assert!(b.charge(0, sb, 2000));
            // b is killed in the middle of charging 4096 more, holding the books.
            die_mid_change(&b, 0, sb, 4096, device_step);
            sys::ofd_unlock(b.fd(), SharedState::lock_offset(sb));
            // The next change takes the books over and completes b's change...
            assert!(a.charge(0, sa, 24));
            assert_eq!(a.memory(0).1, 1024 + 2000 + 4096);
            assert_eq!(a.proc(sb).devices[0].used_bytes.load(SeqCst), 2000 + 4096);
            // ...which reclaim then returns whole.
            assert_eq!(a.reclaim_dead(None), 1);
            assert_eq!(a.memory(0).1, 1024, "device_step={device_step}");
            a.uncharge(0, sa, 1024);
            assert_eq!(a.memory(0).1, 0);
            let _ = std::fs::remove_file(&p);
        }
    }

    #[test]
    fn a_live_holder_of_the_books_is_waited_for_not_overtaken() {
        let p = temp("live-holder");
        let a = SharedState::open(&config(&p, 1 << 20)).unwrap();
        let b = SharedState::open(&config(&p, 1 << 20)).unwrap();
        let sa = a.claim_proc(1).unwrap();
        let sb = b.claim_proc(2).unwrap();
        let generation = b.proc(sb).generation.load(Relaxed);
        let token = ((generation as u64) << 32) | (sb as u64 + 1);
        b.device(0).books.lock.store(token, SeqCst);
        let released = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| a.charge(0, sa, 512));
            std::thread::sleep(std::time::Duration::from_millis(100));
            let still_held = b.device(0).books.lock.load(SeqCst) == token;
            b.device(0).books.lock.store(0, SeqCst);
            assert!(waiter.join().unwrap());
            still_held
        });
        assert!(released, "a live holder's lock was taken over");
        assert_eq!(a.memory(0).1, 512);
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_process_without_a_record_reclaims_through_a_helper() {
        let p = temp("helper");
        let a = SharedState::open(&config(&p, 1 << 20)).unwrap();
        let monitor = SharedState::open(&config(&p, 1 << 20)).unwrap();
        let sa = a.claim_proc(1).unwrap();
        assert!(a.charge(1, sa, 8192));
        sys::ofd_unlock(a.fd(), SharedState::lock_offset(sa));
        assert_eq!(monitor.reclaim_dead(None), 1);
        assert_eq!(monitor.memory(1).1, 0);
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn capped_add() {
        let w = AtomicU64::new(10);
        assert!(try_add_capped(&w, 5, 15));
        assert!(!try_add_capped(&w, 1, 15));
        assert!(!try_add_capped(&w, u64::MAX, u64::MAX));
        sub_saturating(&w, 100);
        assert_eq!(w.load(Relaxed), 0);
    }
}
