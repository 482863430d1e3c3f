//! Process slots: claiming one, releasing it, and reclaiming the slots of
//! processes that died.
//!
//! Protocol (every actor, every process):
//! - the owner takes the OFD lock on its slot's byte *before* it moves the
//!   slot out of `FREE`, and drops it only *after* the slot is `FREE` again;
//! - so a slot that is not `FREE` but whose lock can be taken belongs to a
//!   dead process (or to nobody, if it was freed a moment ago: the state is
//!   re-read under the lock);
//! - a reclaimer takes that lock itself while it works, so no claimer can
//!   race it, returns the slot's bytes and frees the slot with its
//!   generation raised.
//!
//! Each step is a CAS on the slot's state word (state and generation), so a
//! stale view never wins. Liveness never depends on pids, so pid reuse and
//! PID namespaces cannot fool it.
//!
//! # A state no writer writes
//! Opening refuses a file whose slots hold an unknown state, but a tenant's
//! process can write one into its open ledger later. Such a slot is not
//! reclaimed as a dead process's: [`Ledger::reset_invalid_slots`] frees it,
//! when nobody holds its lock, returning its bytes to the tenant, and
//! reports each one ([`InvalidSlot`]), so that the monitor can say that it
//! rewrote the slot and why. Its owner, if it lives, holds the lock and is
//! left alone (its reservations and releases stop: the slot is no longer
//! `ALIVE` for its generation).

use crate::layout::{in_flight, slot_state, split_state_word, state_word, SlotRecord, SLOTS_OFFSET, SLOT_BYTES};
use crate::ofd;
use crate::process::ProcessIdentity;
use crate::{Ledger, LedgerError, MAX_SLOTS};
use std::sync::atomic::Ordering;

/// This process's slot in a ledger. Not `Clone`: one owner, released once.
#[derive(Debug)]
pub struct Slot {
    index: usize,
    generation: u32,
}

impl Slot {
    /// The slot's index in the ledger.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The slot's generation when it was claimed.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// A second handle to the same slot, for tests of stale handles.
    #[cfg(test)]
    pub(crate) fn duplicate(&self) -> Slot {
        Slot { index: self.index, generation: self.generation }
    }
}

/// A dead process's slot that was reclaimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reclaimed {
    /// The slot's index.
    pub slot_index: usize,
    /// The dead process's pid as the `/proc` it saw named it: the host pid
    /// when it shared the host's `/proc` (or its `NSpid` showed the outer
    /// pid), its namespace pid inside a container with its own `/proc`.
    pub pid: u32,
    /// Its pid in its own PID namespace.
    pub ns_pid: u32,
    /// Its PID namespace's inode.
    pub pidns_inode: u64,
    /// Bytes returned to the tenant, by device index (non-zero only).
    pub bytes_per_device: Vec<(usize, u64)>,
}

/// A slot that held a state no writer writes and was reset to free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSlot {
    /// The slot's index.
    pub slot_index: usize,
    /// The state word found (state in the low 32 bits, generation above).
    pub state_word: u64,
    /// The pid the slot named.
    pub pid: u32,
    /// Bytes returned to the tenant, by device index (non-zero only).
    pub bytes_per_device: Vec<(usize, u64)>,
}

/// A snapshot of a slot in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotView {
    /// The slot's index.
    pub index: usize,
    /// Its generation.
    pub generation: u32,
    /// [`crate::layout::slot_state`] (`CLAIMED`, `ALIVE` or `RECLAIMING`).
    pub state: u32,
    /// Pid of the owner as the `/proc` it sees names it (see
    /// [`ProcessIdentity::pid`]): the host pid only when that `/proc` is the
    /// host's; compare `pidns_inode` before matching it against host pids.
    pub pid: u32,
    /// Pid of the owner in its own PID namespace.
    pub ns_pid: u32,
    /// Inode of the owner's PID namespace.
    pub pidns_inode: u64,
    /// The owner's start time, clock ticks after boot.
    pub start_time_ticks: u64,
    /// Bytes the owner holds, by device index (non-zero only).
    pub bytes_per_device: Vec<(usize, u64)>,
    /// Whether the owner still holds the slot's lock (is alive).
    pub alive: bool,
}

impl SlotView {
    /// Bytes the owner holds on all devices together.
    pub fn total_bytes(&self) -> u64 {
        self.bytes_per_device.iter().map(|(_, b)| *b).sum()
    }
}

/// The byte locked by the owner of slot `index`: the first byte of its record.
pub fn lock_offset(index: usize) -> u64 {
    (SLOTS_OFFSET + index * SLOT_BYTES) as u64
}

/// Whether a slot state is one a process holds a slot in: `CLAIMED`,
/// `ALIVE` or `RECLAIMING` (whose holder, if it is gone, died).
fn is_owned_state(state: u32) -> bool {
    state != slot_state::FREE && state <= slot_state::RECLAIMING
}

/// Whether a slot state is one no writer writes.
fn is_invalid_state(state: u32) -> bool {
    state > slot_state::RECLAIMING
}

fn bit(index: usize) -> (usize, u64) {
    (index / 64, 1u64 << (index % 64))
}

impl Ledger {
    /// The bits of the slots this `Ledger` holds; holding the guard also
    /// keeps this process's other threads out of every lock operation on
    /// the file (see `Ledger::owned`).
    pub(crate) fn owned_bits(&self) -> std::sync::MutexGuard<'_, [u64; MAX_SLOTS / 64]> {
        self.owned.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether `passed`, a descriptor a process handed over (`SCM_RIGHTS`),
    /// is an open of this ledger's file through which slot `index`'s lock
    /// is held. Two `F_OFD_GETLK` and one `fstat`, whatever else that
    /// process holds: the lock is exclusive, so if this `Ledger`'s own
    /// description sees it held and `passed` sees no other holder, the
    /// holder is `passed`'s description. This `Ledger` must hold no lock of
    /// the slot itself (the monitor's never does).
    pub fn passed_descriptor_holds(&self, passed: std::os::fd::BorrowedFd<'_>, index: usize) -> bool {
        use std::os::fd::{AsRawFd, RawFd};
        if index >= MAX_SLOTS {
            return false;
        }
        let same_file = |a: RawFd, b: RawFd| {
            // SAFETY: fstat of two live descriptors into zeroed structs.
            let (mut x, mut y): (libc::stat, libc::stat) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
            // SAFETY: as above; both structs are valid for writes.
            let ok = unsafe { libc::fstat(a, &mut x) == 0 && libc::fstat(b, &mut y) == 0 };
            ok && (x.st_mode & libc::S_IFMT) == libc::S_IFREG && x.st_dev == y.st_dev && x.st_ino == y.st_ino
        };
        let offset = lock_offset(index);
        same_file(passed.as_raw_fd(), self.lock_fd())
            && matches!(ofd::probe(self.lock_fd(), offset), Ok(ofd::Probe::Held))
            && matches!(ofd::probe(passed.as_raw_fd(), offset), Ok(ofd::Probe::Free))
    }

    /// Whether this `Ledger` holds slot `index`'s lock.
    pub(crate) fn owns_lock(&self, index: usize) -> bool {
        let (word_index, mask) = bit(index);
        self.owned_bits().get(word_index).is_some_and(|w| w & mask != 0)
    }

    /// Claims a free slot for the calling process and locks it for as long as
    /// this `Ledger` stays open. If every slot is taken, reclaims dead ones
    /// (and resets invalid ones) once and tries again.
    pub fn claim_slot(&self) -> Result<Slot, LedgerError> {
        self.claim_slot_as(&ProcessIdentity::current())
    }

    /// [`Ledger::claim_slot`] for a caller that already read its identity
    /// (the shim reads `/proc/self` once and keeps what it learnt).
    pub fn claim_slot_as(&self, me: &ProcessIdentity) -> Result<Slot, LedgerError> {
        if let Some(slot) = self.claim_free(me)? {
            return Ok(slot);
        }
        self.reclaim_dead();
        self.reset_invalid_slots();
        self.claim_free(me)?.ok_or(LedgerError::SlotsFull)
    }

    fn claim_free(&self, me: &ProcessIdentity) -> Result<Option<Slot>, LedgerError> {
        let mut owned = self.owned_bits();
        let fd = self.lock_fd();
        for (index, record) in self.layout().slots.iter().enumerate() {
            let (word_index, mask) = bit(index);
            if owned.get(word_index).is_some_and(|w| w & mask != 0) {
                continue;
            }
            let word = record.state_word.load(Ordering::Acquire);
            let (state, generation) = split_state_word(word);
            if state != slot_state::FREE {
                continue;
            }
            if !ofd::try_lock(fd, lock_offset(index)).map_err(LedgerError::Lock)? {
                continue;
            }
            let claimed = state_word(slot_state::CLAIMED, generation);
            if record.state_word.compare_exchange(word, claimed, Ordering::AcqRel, Ordering::Acquire).is_err() {
                let _ = ofd::unlock(fd, lock_offset(index));
                continue;
            }
            record.pid.store(me.pid, Ordering::Relaxed);
            record.ns_pid.store(me.ns_pid, Ordering::Relaxed);
            record.pidns_inode.store(me.pidns_inode, Ordering::Relaxed);
            record.start_time_ticks.store(me.start_time_ticks, Ordering::Relaxed);
            // A writer that died between the two steps of a change left its
            // mark; we hold the lock of a free slot, so nobody else writes
            // here now (a releasing owner is done before it unlocks).
            let word = record.in_flight_word.load(Ordering::Acquire);
            record.in_flight_word.store(in_flight::settled(word), Ordering::SeqCst);
            // A slot is freed after its bytes were drained, but a reservation
            // of its last owner that raced the release may have landed since:
            // give it back to the tenant rather than forget it.
            self.drain_slot(record);
            record.state_word.store(state_word(slot_state::ALIVE, generation), Ordering::Release);
            if let Some(w) = owned.get_mut(word_index) {
                *w |= mask;
            }
            self.layout().usage.slots_claimed_total.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(Slot { index, generation }));
        }
        Ok(None)
    }

    /// Normal exit: gives back every byte the slot holds, frees it and drops
    /// its lock.
    pub fn release_slot(&self, slot: Slot) {
        let mut owned = self.owned_bits();
        let Some(record) = self.slot_record(slot.index) else { return };
        self.drain_slot(record);
        record.state_word.store(state_word(slot_state::FREE, slot.generation.wrapping_add(1)), Ordering::Release);
        let (word_index, mask) = bit(slot.index);
        if let Some(w) = owned.get_mut(word_index) {
            *w &= !mask;
        }
        let _ = ofd::unlock(self.lock_fd(), lock_offset(slot.index));
    }

    /// Finds slots in use whose owner is dead (nobody holds their lock),
    /// returns their bytes to the tenant and frees them. Skips the slots this
    /// `Ledger` holds itself, and those holding a state no writer writes
    /// ([`reset_invalid_slots`](Self::reset_invalid_slots) deals with them).
    pub fn reclaim_dead(&self) -> Vec<Reclaimed> {
        let owned = self.owned_bits();
        let mut reclaimed = Vec::new();
        for (index, record) in self.layout().slots.iter().enumerate() {
            let (word_index, mask) = bit(index);
            if owned.get(word_index).is_some_and(|w| w & mask != 0) {
                continue;
            }
            let state_now = split_state_word(record.state_word.load(Ordering::Acquire)).0;
            if state_now == slot_state::FREE {
                if record.bytes.iter().any(|b| b.load(Ordering::Acquire) != 0) {
                    self.drain_free_slot(index, record);
                }
                continue;
            }
            if !is_owned_state(state_now) {
                continue;
            }
            let dead = self.take_over_slot(index, record, is_owned_state, |_, record, bytes_per_device| Reclaimed {
                slot_index: index,
                pid: record.pid.load(Ordering::Relaxed),
                ns_pid: record.ns_pid.load(Ordering::Relaxed),
                pidns_inode: record.pidns_inode.load(Ordering::Relaxed),
                bytes_per_device,
            });
            if let Some(dead) = dead {
                self.layout().usage.reclaimed_processes_total.fetch_add(1, Ordering::Relaxed);
                reclaimed.push(dead);
            }
        }
        reclaimed
    }

    /// Returns the bytes of a late reservation that landed in free slot
    /// `index` after its owner released it, if nobody holds the slot's lock
    /// and the slot, read again under the lock, is still free (nobody can
    /// claim it while we hold the lock). Returns whether it drained it. The
    /// caller holds [`owned_bits`](Self::owned_bits).
    pub(crate) fn drain_free_slot(&self, index: usize, record: &SlotRecord) -> bool {
        let fd = self.lock_fd();
        if !matches!(ofd::try_lock(fd, lock_offset(index)), Ok(true)) {
            return false;
        }
        let free = split_state_word(record.state_word.load(Ordering::Acquire)).0 == slot_state::FREE;
        if free {
            self.drain_slot(record);
        }
        let _ = ofd::unlock(fd, lock_offset(index));
        free
    }

    /// Takes slot `index` over from an owner that is gone: if nobody holds
    /// the slot's lock and its state, read again under the lock, is one
    /// `wanted` accepts, marks it `RECLAIMING` (a CAS from the word read, so
    /// a stale view never wins), returns its bytes to the tenant, settles
    /// the changes its writer left in flight (a leak for the audit now, no
    /// longer in flight), lets `report` read the record (given the word
    /// found and the bytes returned), and frees the slot with its generation
    /// raised. `None`, with the slot untouched and the lock dropped,
    /// otherwise. The caller holds [`owned_bits`](Self::owned_bits).
    pub(crate) fn take_over_slot<R>(
        &self,
        index: usize,
        record: &SlotRecord,
        wanted: impl Fn(u32) -> bool,
        report: impl FnOnce(u64, &SlotRecord, Vec<(usize, u64)>) -> R,
    ) -> Option<R> {
        let fd = self.lock_fd();
        if !matches!(ofd::try_lock(fd, lock_offset(index)), Ok(true)) {
            return None;
        }
        // We hold the lock: the owner is gone. Re-read under the lock.
        let word = record.state_word.load(Ordering::Acquire);
        let (state, generation) = split_state_word(word);
        let reclaiming = state_word(slot_state::RECLAIMING, generation);
        if !wanted(state) || record.state_word.compare_exchange(word, reclaiming, Ordering::AcqRel, Ordering::Acquire).is_err() {
            let _ = ofd::unlock(fd, lock_offset(index));
            return None;
        }
        let bytes_per_device = self.drain_slot(record);
        let in_flight_word = record.in_flight_word.load(Ordering::Acquire);
        record.in_flight_word.store(in_flight::settled(in_flight_word), Ordering::SeqCst);
        let reported = report(word, record, bytes_per_device);
        record.state_word.store(state_word(slot_state::FREE, generation.wrapping_add(1)), Ordering::Release);
        let _ = ofd::unlock(fd, lock_offset(index));
        Some(reported)
    }

    /// Frees the slots holding a state no writer writes (see the module
    /// docs) whose lock nobody holds, returning their bytes to the tenant;
    /// returns each one. Skips the slots this `Ledger` holds itself.
    pub fn reset_invalid_slots(&self) -> Vec<InvalidSlot> {
        let owned = self.owned_bits();
        let mut reset = Vec::new();
        for (index, record) in self.layout().slots.iter().enumerate() {
            let (word_index, mask) = bit(index);
            if owned.get(word_index).is_some_and(|w| w & mask != 0) {
                continue;
            }
            if !is_invalid_state(split_state_word(record.state_word.load(Ordering::Acquire)).0) {
                continue;
            }
            let invalid = self.take_over_slot(index, record, is_invalid_state, |word, record, bytes_per_device| InvalidSlot {
                slot_index: index,
                state_word: word,
                pid: record.pid.load(Ordering::Relaxed),
                bytes_per_device,
            });
            reset.extend(invalid);
        }
        reset
    }

    /// The slots in use, with whether their owner is alive (holds the lock,
    /// or is this `Ledger`).
    pub fn slots(&self) -> Vec<SlotView> {
        let owned = *self.owned_bits();
        let fd = self.lock_fd();
        let mut views = Vec::new();
        for (index, record) in self.layout().slots.iter().enumerate() {
            let (state, generation) = split_state_word(record.state_word.load(Ordering::Acquire));
            if state == slot_state::FREE {
                continue;
            }
            let (word_index, mask) = bit(index);
            let mine = owned.get(word_index).is_some_and(|w| w & mask != 0);
            let alive = mine || matches!(ofd::probe(fd, lock_offset(index)), Ok(ofd::Probe::Held));
            let bytes_per_device = record
                .bytes
                .iter()
                .enumerate()
                .map(|(dev, cell)| (dev, cell.load(Ordering::Acquire)))
                .filter(|(_, bytes)| *bytes > 0)
                .collect();
            views.push(SlotView {
                index,
                generation,
                state,
                pid: record.pid.load(Ordering::Relaxed),
                ns_pid: record.ns_pid.load(Ordering::Relaxed),
                pidns_inode: record.pidns_inode.load(Ordering::Relaxed),
                start_time_ticks: record.start_time_ticks.load(Ordering::Relaxed),
                bytes_per_device,
                alive,
            });
        }
        views
    }
}

#[cfg(test)]
mod tests {
    use crate::layout::{slot_state, state_word};
    use crate::Ledger;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_slot_with_a_state_no_writer_writes_is_reset_and_reported_not_reclaimed() {
        let dir = std::env::temp_dir().join(format!("gpuslice-slots-invalid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ledger = Ledger::open_or_create(&dir, "t").unwrap();
        let dev = ledger.device_index(b"GPU-slot-invalid", 1 << 30).unwrap();
        let owner = Ledger::open(ledger.path()).unwrap();
        let slot = owner.claim_slot().unwrap();
        owner.try_reserve(&slot, dev, 4096).unwrap();
        let record = &ledger.layout().slots[slot.index()];
        let bad = state_word(7, slot.generation());
        // A live owner's slot overwritten: left alone while it lives.
        record.state_word.store(bad, Ordering::SeqCst);
        assert!(ledger.reset_invalid_slots().is_empty());
        drop(owner);
        assert!(ledger.reclaim_dead().is_empty(), "not taken for a dead process's slot");
        let reset = ledger.reset_invalid_slots();
        assert_eq!(reset.len(), 1);
        assert_eq!((reset[0].slot_index, reset[0].state_word), (slot.index(), bad));
        assert_eq!(reset[0].bytes_per_device, vec![(dev, 4096)]);
        assert_eq!(ledger.used_bytes(dev), 0, "its bytes went back to the tenant");
        assert_eq!(record.state_word.load(Ordering::SeqCst), state_word(slot_state::FREE, slot.generation() + 1));
        assert!(ledger.reset_invalid_slots().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
