//! Surviving a ledger file cut short under a mapping.
//!
//! A shared mapping of a file that shrinks faults (`SIGBUS`) on the next
//! access to a page past the file's new end. A tenant can truncate its own
//! ledger at any moment, so a process that maps ledgers it does not trust
//! (the monitor, which maps every tenant's) must survive that. Such a
//! process installs a `SIGBUS` handler that calls [`absorb_fault`] and then
//! calls [`enable`]; from then on every ledger it maps is *guarded*: it is
//! listed in a fixed table that the handler reads. When a fault's address
//! lies in a guarded mapping, the handler maps private zero pages over the
//! whole mapping (`mmap` with `MAP_FIXED | MAP_ANONYMOUS`), marks it
//! poisoned and returns; the faulting access runs again on zeros, which
//! every reader in this crate takes for an empty ledger (free slots, no
//! devices, nothing in use). The owner then finds the mark
//! ([`Ledger::damage`](crate::Ledger::damage)) and drops the ledger.
//! Wayland compositors treat their clients' shared memory the same way.
//!
//! Why not avoid the fault instead: the monitor must change ledgers with
//! atomic read-modify-writes (reclaim, caps, corrections), which only a
//! shared mapping offers; a length check before each access leaves a window
//! between the check and the access; and Linux has no seal or lock that
//! stops the owner of a regular file from shortening it.
//!
//! Guarding is off unless enabled, and the shim never enables it: it never
//! installs signal handlers. A tenant's own processes that map a ledger
//! their own user truncates still die; only that user can do it (ledger
//! files are mode 0600 or 0660, see [`open`](crate::Ledger::open_or_create)).

use crate::layout::FILE_BYTES;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Ledgers one process can map while guarding is on.
pub const MAX_GUARDED: usize = 4096;

/// `start` of an entry being filled in (never a mapping's address, which is
/// page-aligned).
const RESERVED: usize = 1;

struct Entry {
    /// Address of the mapping; 0 when the entry is free.
    start: AtomicUsize,
    /// Set by the handler when it replaced the mapping.
    poisoned: AtomicBool,
}

static ENTRIES: [Entry; MAX_GUARDED] = [const { Entry { start: AtomicUsize::new(0), poisoned: AtomicBool::new(false) } }; MAX_GUARDED];
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Guards every ledger this process maps from now on. Call it only after a
/// `SIGBUS` handler that calls [`absorb_fault`] is installed.
pub fn enable() {
    ENABLED.store(true, Ordering::SeqCst);
}

/// Whether ledgers mapped now are guarded.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::SeqCst)
}

/// A guarded mapping's entry in the table; freed on drop, which must come
/// before the mapping is unmapped.
pub(crate) struct Guard(usize);

impl Guard {
    /// Whether the handler replaced the mapping with zero pages.
    pub(crate) fn poisoned(&self) -> bool {
        ENTRIES.get(self.0).is_some_and(|e| e.poisoned.load(Ordering::Acquire))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(entry) = ENTRIES.get(self.0) {
            entry.start.store(0, Ordering::Release);
        }
    }
}

/// Lists a mapping of `FILE_BYTES` at `start`, if guarding is on. An error
/// when the table is full: the caller must not use such a mapping.
pub(crate) fn register(start: usize) -> io::Result<Option<Guard>> {
    if !enabled() {
        return Ok(None);
    }
    for (index, entry) in ENTRIES.iter().enumerate() {
        if entry.start.compare_exchange(0, RESERVED, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            entry.poisoned.store(false, Ordering::Release);
            entry.start.store(start, Ordering::Release);
            return Ok(Some(Guard(index)));
        }
    }
    Err(io::Error::other(format!("more than {MAX_GUARDED} ledgers are mapped at once")))
}

/// For a `SIGBUS` handler: if `address` lies in a guarded ledger mapping,
/// replaces that mapping with private zero pages, marks it poisoned and
/// returns `true` (return from the handler: the access runs again). `false`
/// otherwise: the fault is not a ledger's and the handler should let it
/// take its default course. Async-signal-safe: atomics and one `mmap`.
pub fn absorb_fault(address: usize) -> bool {
    for entry in &ENTRIES {
        let start = entry.start.load(Ordering::Acquire);
        if start <= RESERVED || address < start || address - start >= FILE_BYTES {
            continue;
        }
        // SAFETY: replaces exactly the pages of a mapping this crate made
        // and still owns (its entry is freed before it is unmapped); the
        // new pages are readable, writable and zero, as the old ones would
        // read from a file of zeros, so every reference into it stays valid.
        let replaced = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                FILE_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if replaced == libc::MAP_FAILED {
            return false;
        }
        entry.poisoned.store(true, Ordering::Release);
        return true;
    }
    false
}
