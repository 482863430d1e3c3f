//! The state gpuslice's shim and monitor share, and the rules for changing
//! it. Two kinds, with two different trust models:
//!
//! - **Per tenant: the ledger.** One shared-memory file per tenant, mapped
//!   writable by every process of the tenant and by the monitor, holding
//!   the tenant's policy, its usage, its device time budgets and one slot
//!   per process. Everything in it may have been written by the tenant, so
//!   it is input to the monitor, never truth (see [`open`](Ledger::open)
//!   and [`guard`] for how a reader survives a hostile one).
//! - **Across tenants: compute arbitration.** [`grants`]: one page per
//!   device, written by the monitor alone and sealed before any tenant maps
//!   it (read-only), saying which tenant may launch there now. [`broker`]:
//!   the socket protocol by which a process gets that page and tells the
//!   monitor what is its own (that it wants the device, is busy, is done).
//!
//! Beside them, [`units`] parses the sizes, ratios and names that both sides
//! read from configuration and the environment.
//!
//! The ledger is used by the shim (in every tenant process) and by the
//! monitor. Its bytes are described in [`layout`] (and, for C, in
//! `include/gpuslice.h`); this crate is the safe way to read and change them:
//!
//! - [`Ledger::open_or_create`] finds or creates `<dir>/<tenant>.ledger`
//!   (race-free, for the creator's users only, in a directory no other user
//!   controls: the `open` module sets out who creates what, with which
//!   owner and mode); [`Ledger::open`] opens an existing one (monitor,
//!   status) without ever waiting or writing.
//! - [`guard`] lets a process that maps ledgers it does not trust (the
//!   monitor) survive one being cut short under it, and
//!   [`Ledger::damage`] says when a mapped file changed in a way no writer
//!   changes it.
//! - [`MappedLedger`] keeps a ledger mapped without holding a descriptor
//!   (a watcher of many ledgers, the monitor), and [`MappedLedger::attach`]
//!   gives it one again, for as long as it needs locks, only while the
//!   path still names the mapped file.
//! - [`Ledger::device_index`] maps a GPU's UUID to its index in the file.
//! - [`Ledger::claim_slot`] gives the calling process its slot, locked with
//!   an OFD lock for as long as the process lives.
//! - [`Ledger::try_reserve`] and [`Ledger::release`] move bytes in and out of
//!   the tenant's usage; a reservation that would pass the cap is refused,
//!   however many threads and processes race.
//! - [`Ledger::reclaim_dead`] returns the bytes of processes that died
//!   without releasing them: their slot is still alive in the file, but the
//!   kernel dropped their lock.
//! - [`compute`]: each device's compute limit and the token bucket of
//!   device time that holds the tenant's processes to it.
//!
//! # Released slots
//! A slot admits and releases only for the generation that claimed it, so a
//! thread still allocating while its process releases the slot at exit
//! cannot move bytes through it afterwards. A reservation that passed that
//! check just before the release lands in the free slot; the next claim of
//! the slot, or any [`Ledger::reclaim_dead`], returns it to the tenant. No
//! byte is ever forgotten.
//!
//! - [`Ledger::audit_usage`] and [`Ledger::correct_unattributed`] find and
//!   return bytes the tenant's usage counts that no slot holds.
//!
//! # A writer killed between two steps
//! A reservation is two atomic steps: the tenant's counter, then the
//! process's slot (a release: the slot, then the counter). A process killed
//! between the two (a window of a few instructions) leaves those bytes
//! counted for the tenant but not in its slot, so reclaim cannot return
//! them. The error is in the safe direction: the tenant gets less than its
//! cap, never more (the opposite order would let the same crash undercount
//! the tenant past its cap). Every change is marked in flight on its slot
//! ([`layout::in_flight`]), so a corrector (the monitor) can tell such a
//! leak from a change that is merely slow, or stopped, between its steps,
//! and return it ([`audit`] says why that is safe).
#![deny(unsafe_op_in_unsafe_fn)]

mod accounts;
pub mod audit;
pub mod broker;
pub mod compute;
mod error;
pub mod grants;
pub mod guard;
pub mod layout;
mod memfd;
mod ofd;
mod open;
pub mod process;
pub mod sched;
mod slots;
pub mod team_usage;
pub mod units;

pub use accounts::{ComputeLimit, Decision, MemoryCap, PolicyPair};
pub use audit::UsageAudit;
pub use compute::{Admit, BucketClock, ComputeBucket};
pub use error::{Denied, LedgerError, OpenError};
pub use layout::{MAX_DEVICES, MAX_SLOTS, UNLIMITED};
pub use open::{Damage, FileAccess, FileKind, CREATION_WAIT};
pub use slots::{lock_offset as slot_lock_offset, InvalidSlot, Reclaimed, Slot, SlotView};

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// File name suffix of ledger files.
pub const LEDGER_SUFFIX: &str = ".ledger";

/// The ledger directory when `GPUSLICE_DIR` is not set: `/run/gpuslice` if it
/// can be created and written and is safe, else `$XDG_RUNTIME_DIR/gpuslice`
/// (same test), else `/tmp/gpuslice-<uid>`, which the first
/// [`Ledger::open_or_create`] creates 0700 and which is refused unless it is
/// this user's own, mode 0700 and no link (see [`open`](Ledger::open_or_create)).
/// Creates the directory it picks when it can, except the last.
pub fn default_dir() -> PathBuf {
    let mut candidates = vec![PathBuf::from("/run/gpuslice")];
    if let Some(runtime) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        candidates.push(Path::new(&runtime).join("gpuslice"));
    }
    first_usable_dir(candidates)
}

/// Whether `dir` is one of the directories [`default_dir`] may pick: the
/// ones gpuslice creates itself when they are missing.
pub fn is_default_dir(dir: &Path) -> bool {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()).map(|r| Path::new(&r).join("gpuslice"));
    dir == Path::new("/run/gpuslice") || runtime.as_deref() == Some(dir) || dir == open::fallback_dir()
}

/// The first of `candidates` that can be created and written and is safe,
/// else `/tmp/gpuslice-<uid>` (not created here).
fn first_usable_dir(candidates: impl IntoIterator<Item = PathBuf>) -> PathBuf {
    for dir in candidates {
        if open::prepare_dir(&dir).is_ok() && writable(&dir) {
            return dir;
        }
    }
    open::fallback_dir()
}

fn writable(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { return false };
    // SAFETY: c_path is a valid NUL-terminated string that outlives the call.
    unsafe { libc::access(c_path.as_ptr(), libc::W_OK | libc::X_OK) == 0 }
}

/// The ledger file of `tenant` in `dir`: `<dir>/<tenant>.ledger`.
pub fn tenant_path(dir: &Path, tenant: &str) -> PathBuf {
    dir.join(format!("{tenant}{LEDGER_SUFFIX}"))
}

/// Who set a device's memory cap or compute limit. Stored as a `u32` in the
/// policy page ([`layout::policy_source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicySource {
    /// No cap set.
    Unset,
    /// Set by the tenant's first process from its environment.
    Environment,
    /// Set by the monitor from its configuration file (the authority for the
    /// tenants it names).
    Monitor,
}

impl PolicySource {
    /// The value stored in the file.
    pub fn as_u32(self) -> u32 {
        match self {
            PolicySource::Unset => layout::policy_source::UNSET,
            PolicySource::Environment => layout::policy_source::ENVIRONMENT,
            PolicySource::Monitor => layout::policy_source::MONITOR,
        }
    }

    /// Reads a stored value; unknown values read as `Unset` (open rejects
    /// them, so only a writer racing with corruption can produce one).
    pub fn from_u32(value: u32) -> PolicySource {
        match value {
            layout::policy_source::ENVIRONMENT => PolicySource::Environment,
            layout::policy_source::MONITOR => PolicySource::Monitor,
            _ => PolicySource::Unset,
        }
    }

    /// A lower-case name for people and JSON.
    pub fn name(self) -> &'static str {
        match self {
            PolicySource::Unset => "unset",
            PolicySource::Environment => "environment",
            PolicySource::Monitor => "monitor",
        }
    }
}

/// One device of the ledger's device table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceEntry {
    /// Its index in the ledger (policy and usage records, slot bytes).
    pub index: usize,
    /// The GPU's UUID.
    pub uuid: [u8; 16],
    /// Its physical memory.
    pub total_memory_bytes: u64,
}

/// Compute time settings of one device (stored in the policy page).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComputePolicy {
    /// Guaranteed share of device time, ratio × 10 000 (0 = none).
    pub share_ratio_e4: u32,
    /// Ceiling on device time, ratio × 10 000 (0 = no ceiling).
    pub limit_ratio_e4: u32,
    /// Higher runs first when time is spare.
    pub priority: i32,
}

/// An open, mapped ledger file.
///
/// Holds the file descriptor whose open file description carries this
/// process's slot locks: dropping the `Ledger` (or exiting) drops them, and
/// the slots become reclaimable.
pub struct Ledger {
    map: Arc<open::Mapping>,
    file: File,
    path: PathBuf,
    /// Slots whose lock this open file description holds (one bit each).
    /// Guards every lock operation, since locks of one description never
    /// conflict with each other and the kernel cannot tell our threads apart.
    owned: Mutex<[u64; MAX_SLOTS / 64]>,
    /// The most this process's own reservations may bring the tenant's
    /// usage to, by device: its environment's cap once applied
    /// ([`hold_cap_at_most`](Self::hold_cap_at_most)). Process memory, not
    /// the file: a tenant that rewrites its policy page does not raise it.
    held_cap_bytes: [std::sync::atomic::AtomicU64; MAX_DEVICES],
}

impl Ledger {
    /// Opens `<dir>/<tenant>.ledger`, creating `dir` and the file if needed
    /// (the file for the creator's user alone: [`FileAccess::Creator`]).
    /// Concurrent first processes agree on one file: each builds a complete
    /// file under a temporary name and publishes it with `link(2)`, which
    /// only the first can do. A directory another user could tamper with is
    /// refused ([`OpenError::UnsafeDir`]); a file still being created by a
    /// creator of another kind is waited for, up to [`CREATION_WAIT`].
    pub fn open_or_create(dir: &Path, tenant: &str) -> Result<Ledger, OpenError> {
        Ledger::open_or_create_with(dir, tenant, FileAccess::Creator)
    }

    /// [`open_or_create`](Self::open_or_create), creating the file with
    /// `access` if it does not exist.
    pub fn open_or_create_with(dir: &Path, tenant: &str, access: FileAccess) -> Result<Ledger, OpenError> {
        if units::validate_tenant_name(tenant).is_err() {
            return Err(OpenError::BadTenantName { tenant: tenant.to_string() });
        }
        open::prepare_dir(dir)?;
        let path = tenant_path(dir, tenant);
        match Ledger::open_waiting(&path) {
            Err(OpenError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            other => return other.and_then(|ledger| ledger.check_tenant(tenant)),
        }
        open::create(dir, tenant, &path, access)?;
        Ledger::open_waiting(&path).and_then(|ledger| ledger.check_tenant(tenant))
    }

    fn check_tenant(self, tenant: &str) -> Result<Ledger, OpenError> {
        let stored = self.tenant();
        if stored == tenant {
            Ok(self)
        } else {
            Err(OpenError::OtherTenant { path: self.path.clone(), stored, expected: tenant.to_string() })
        }
    }

    /// Opens an existing ledger file (the monitor, `gpuslice status`). Never
    /// writes to it, and never waits: a file that is empty or not yet
    /// initialised is an error at once ([`OpenError::is_uninitialised`]);
    /// see [`OpenError`] for what else it refuses.
    pub fn open(path: &Path) -> Result<Ledger, OpenError> {
        let (file, map) = open::open_existing(path, false)?;
        Ok(Ledger::of(map, file, path))
    }

    fn of(map: open::Mapping, file: File, path: &Path) -> Ledger {
        Ledger::of_shared(Arc::new(map), file, path)
    }

    fn of_shared(map: Arc<open::Mapping>, file: File, path: &Path) -> Ledger {
        let held_cap_bytes = std::array::from_fn(|_| std::sync::atomic::AtomicU64::new(UNLIMITED));
        Ledger { map, file, path: path.to_path_buf(), owned: Mutex::new([0; MAX_SLOTS / 64]), held_cap_bytes }
    }

    fn open_waiting(path: &Path) -> Result<Ledger, OpenError> {
        let (file, map) = open::open_existing(path, true)?;
        Ok(Ledger::of(map, file, path))
    }

    /// Whether the file changed under this mapping in a way no gpuslice
    /// writer changes it (cut short, resized, its header overwritten), so
    /// that nothing read from it can be trusted; `None` while it is sound.
    /// A process that guards its mappings ([`guard`]) survives the faults
    /// of a file cut short, and finds them here.
    pub fn damage(&self) -> Option<Damage> {
        open::damage(&self.file, &self.map)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tenant's name, as stored in the file.
    pub fn tenant(&self) -> String {
        open::tenant_of(self.layout()).unwrap_or_default()
    }

    /// The raw mapped layout, for readers that need a field this API does not
    /// wrap. Write only through its atomics and
    /// only as [`layout`] documents.
    pub fn layout(&self) -> &layout::LedgerFile {
        self.map.file()
    }

    /// The descriptor that carries this process's slot locks. A child created
    /// by `fork` shares it: it should close its copy (e.g. in a
    /// `pthread_atfork` child handler) so that the parent's death still drops
    /// the parent's locks, and open its own `Ledger` if it uses the GPU.
    pub fn lock_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// This ledger's mapping, to keep without a descriptor once this
    /// `Ledger` is dropped (see [`MappedLedger`]). Meant for a `Ledger` that
    /// holds no slot lock: its locks go when it is dropped.
    pub fn keep_mapped(&self) -> std::io::Result<MappedLedger> {
        let meta = self.file.metadata()?;
        Ok(MappedLedger { map: Arc::clone(&self.map), path: self.path.clone(), dev: meta.dev(), ino: meta.ino() })
    }
}

/// A ledger kept mapped without an open descriptor: what a watcher of many
/// ledgers holds between the moments it needs locks, so that the number of
/// ledgers it watches is not bounded by its descriptor limit. Reading and
/// writing the mapped words needs no descriptor; probing, taking or
/// dropping a slot's lock, and checking the file's length, need a
/// [`Ledger`], which [`attach`](Self::attach) gives.
pub struct MappedLedger {
    map: Arc<open::Mapping>,
    path: PathBuf,
    dev: u64,
    ino: u64,
}

/// Why [`MappedLedger::attach`] gave no [`Ledger`].
#[derive(Debug)]
pub enum AttachError {
    /// The path could not be opened (gone, or out of descriptors).
    Io(std::io::Error),
    /// The path names another file than the one mapped.
    Replaced,
}

impl std::fmt::Display for AttachError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AttachError::Io(e) => write!(f, "cannot open it again: {e}"),
            AttachError::Replaced => write!(f, "its path now names another file"),
        }
    }
}

impl MappedLedger {
    /// Opens the file at the mapped path again (never following a link)
    /// and, if it is still the very file mapped (same device and inode),
    /// returns a full [`Ledger`] over the same mapping. Dropping that
    /// `Ledger` closes the descriptor and keeps the mapping here.
    pub fn attach(&self) -> Result<Ledger, AttachError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path)
            .map_err(AttachError::Io)?;
        let meta = file.metadata().map_err(AttachError::Io)?;
        if (meta.dev(), meta.ino()) != (self.dev, self.ino) {
            return Err(AttachError::Replaced);
        }
        Ok(Ledger::of_shared(Arc::clone(&self.map), file, &self.path))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The mapped file's inode.
    pub fn inode(&self) -> u64 {
        self.ino
    }

    /// The tenant's name, as stored in the file.
    pub fn tenant(&self) -> String {
        open::tenant_of(self.map.file()).unwrap_or_default()
    }
}

#[cfg(test)]
mod accounts_tests;
#[cfg(test)]
mod tests;
