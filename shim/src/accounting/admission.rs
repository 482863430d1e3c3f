//! Admission: reserving and releasing bytes in the tenant's ledger.
//!
//! Admission is a reservation in the ledger *before* the driver is called,
//! rolled back if the driver fails, so no interleaving of threads or
//! processes passes the cap. A refusal first reclaims dead processes' slots
//! (`Ledger::reclaim_dead`) and tries once more; a refused allocation is
//! counted once, however often it was tried. Each reservation first
//! releases the stream-ordered frees that completed, and a refusal first
//! settles the stream-ordered pools' charges with what they reserve now
//! (see [`super::stream_ordered`]).
//!
//! Owns the exit handshake (`Admission`): the library destructor calls
//! [`Runtime::stop_admitting`], after which nothing is reserved or released
//! in the ledger, and waits for the threads that are between a
//! reservation's or release's two ledger steps (tenant counter and slot).

use ledger::Denied;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::Runtime;

/// Whether the process is exiting, and who is inside a ledger change.
pub(super) struct Admission {
    /// Set by the library destructor: from then on nothing is admitted.
    exiting: AtomicBool,
    /// Threads inside a ledger reservation or release now; the destructor
    /// waits for them so that exit never cuts one between its two ledger
    /// steps (tenant counter and slot), which would leave bytes counted for
    /// the tenant that no slot holds.
    in_ledger: InLedger,
}

impl Admission {
    pub(super) fn new() -> Self {
        Self { exiting: AtomicBool::new(false), in_ledger: InLedger::new() }
    }
}

/// How many threads are inside a ledger change, counted in cache-line
/// padded shards so that threads of a busy process do not all bounce one
/// line: a thread counts itself in the shard its thread-local index picks.
/// The destructor's exit handshake needs only "is any thread inside": the
/// sum over shards. Every increment and the `exiting` flag are sequentially
/// consistent, so a thread either sees `exiting` or is seen by [`any`].
///
/// [`any`]: InLedger::any
struct InLedger {
    shards: [PaddedCount; IN_LEDGER_SHARDS],
    /// Never used in practice: where a thread would count itself if its
    /// shard index were out of range.
    spare: AtomicUsize,
}

const IN_LEDGER_SHARDS: usize = 64;

#[repr(align(128))]
struct PaddedCount(AtomicUsize);

static NEXT_IN_LEDGER_SHARD: AtomicUsize = AtomicUsize::new(0);

/// Leaves the ledger on drop.
struct Entered<'a>(&'a AtomicUsize);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InLedger {
    fn new() -> Self {
        Self { shards: std::array::from_fn(|_| PaddedCount(AtomicUsize::new(0))), spare: AtomicUsize::new(0) }
    }

    /// Counts the calling thread in until the guard drops. A thread whose
    /// thread-locals are gone (exit) uses shard 0.
    fn enter(&self) -> Entered<'_> {
        let index = crate::thread::with(|t| {
            let shard = &t.in_ledger_shard;
            if shard.get() == usize::MAX {
                shard.set(NEXT_IN_LEDGER_SHARD.fetch_add(1, Ordering::Relaxed) % IN_LEDGER_SHARDS);
            }
            shard.get()
        })
        .unwrap_or(0);
        let count = self.shards.get(index % IN_LEDGER_SHARDS).map_or(&self.spare, |shard| &shard.0);
        count.fetch_add(1, Ordering::SeqCst);
        Entered(count)
    }

    /// Whether any thread is inside a ledger change.
    fn any(&self) -> bool {
        self.shards.iter().map(|shard| &shard.0).chain([&self.spare]).any(|count| count.load(Ordering::SeqCst) != 0)
    }
}

impl Runtime {
    /// Reserves `bytes` on ledger device `dev`; on refusal reclaims dead
    /// processes and tries once more.
    pub fn reserve(&self, dev: usize, bytes: u64) -> Result<(), Denied> {
        self.reserve_counting(dev, bytes, true)
    }

    /// As [`Runtime::reserve`], but a refusal is not counted: the caller
    /// has another way to make room and counts its own final refusal
    /// ([`Runtime::count_denied`]).
    pub(super) fn reserve_uncounted(&self, dev: usize, bytes: u64) -> Result<(), Denied> {
        self.reserve_counting(dev, bytes, false)
    }

    /// One refused allocation on ledger device `dev`.
    pub(super) fn count_denied(&self, dev: usize) {
        self.ledger.count_denied(dev);
    }

    /// Reserves `bytes` as they are, with nothing done first or on refusal:
    /// for growth the driver already made (see [`super::stream_ordered`]),
    /// which must not wait on anything that might call back here.
    pub(super) fn reserve_plain(&self, dev: usize, bytes: u64) -> Result<(), Denied> {
        let _entered = self.admission.in_ledger.enter();
        if self.admission.exiting.load(Ordering::SeqCst) {
            Err(Denied { used_bytes: 0, limit_bytes: 0, requested_bytes: bytes })
        } else {
            self.try_reserve_in_team(dev, bytes)
        }
    }

    fn reserve_counting(&self, dev: usize, bytes: u64, count: bool) -> Result<(), Denied> {
        let _entered = self.admission.in_ledger.enter();
        if self.admission.exiting.load(Ordering::SeqCst) {
            Err(Denied { used_bytes: 0, limit_bytes: 0, requested_bytes: bytes })
        } else {
            self.reserve_in_ledger(dev, bytes, count)
        }
    }

    /// Exit: refuses every later reservation and release and waits (up to
    /// `limit`) for those in progress, so that none is cut between its
    /// ledger steps. `true` when none is left (the first caller only): the
    /// slot may then be released. `false` when one is still running: the
    /// slot must be left alone, to be reclaimed once the process is gone.
    /// (Every thread adds itself to `in_ledger` before it reads `exiting`,
    /// and we set `exiting` before we read `in_ledger`, all sequentially
    /// consistent: a thread either sees `exiting` or is seen here.)
    pub fn stop_admitting(&self, limit: std::time::Duration) -> bool {
        if self.admission.exiting.swap(true, Ordering::SeqCst) {
            return false;
        }
        let deadline = std::time::Instant::now() + limit;
        while self.admission.in_ledger.any() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    fn reserve_in_ledger(&self, dev: usize, bytes: u64, count: bool) -> Result<(), Denied> {
        self.poll_pending_frees();
        let Err(_) = self.try_reserve_in_team(dev, bytes) else { return Ok(()) };
        // Pools that gave memory back since they were last asked (the
        // application trimmed one, or the driver did) make room too.
        self.settle_pools();
        let Err(denied) = self.try_reserve_in_team(dev, bytes) else { return Ok(()) };
        let reclaimed = self.ledger.reclaim_dead();
        for dead in &reclaimed {
            info!("reclaimed slot {} of dead process {}: {:?}", dead.slot_index, dead.pid, dead.bytes_per_device);
            for (dead_dev, dead_bytes) in &dead.bytes_per_device {
                Runtime::team_forgets_dead(*dead_dev, *dead_bytes);
            }
        }
        let result = if reclaimed.is_empty() { Err(denied) } else { self.try_reserve_in_team(dev, bytes) };
        if let Err(denied) = &result {
            // One refused allocation, counted once however often it was tried.
            if count {
                self.ledger.count_denied(dev);
            }
            debug!("denied {denied} on ledger device {dev}");
        }
        result
    }

    pub fn release(&self, dev: usize, bytes: u64) {
        let _entered = self.admission.in_ledger.enter();
        // Once the destructor has begun, the slot is drained (or left to
        // reclaim) as a whole: no change may touch it after the destructor
        // stopped waiting, or exit could cut it between its two steps.
        if !self.admission.exiting.load(Ordering::SeqCst) {
            self.release_in_team(dev, bytes);
        }
    }
}
