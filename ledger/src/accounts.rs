//! Devices, policy and usage: the tenant's cap and what it has reserved.
//!
//! Admission is one compare-and-swap loop on the tenant's `used_bytes` that
//! succeeds only if the new total stays within the cap read at that moment,
//! so no interleaving of threads or processes passes the cap. The process's
//! own slot then records the bytes, so that reclaim can return them if the
//! process dies.

use crate::layout::{device_state, in_flight, slot_state, state_word, PolicyRecord, SlotRecord, UsageRecord};
use crate::{ofd, Denied, DeviceEntry, Ledger, LedgerError, PolicySource, Slot, MAX_DEVICES};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long `device_index` waits for another live process to finish
/// writing a device entry.
const DEVICE_ENTRY_WAIT: Duration = Duration::from_secs(1);

/// How long an entry must have been `CLAIMING` before a free lock counts as
/// a dead claimer's. Claimers of this build hold the lock throughout; the
/// grace covers claimers of builds from before the lock, which finish a
/// claim in microseconds.
const DEVICE_CLAIM_GRACE: Duration = Duration::from_millis(50);

/// The byte a process appending device entry `index` locks: the entry's first.
fn device_lock_offset(index: usize) -> u64 {
    (std::mem::offset_of!(crate::layout::Header, devices) + index * std::mem::size_of::<crate::layout::DeviceRecord>()) as u64
}

/// Takes `bytes` from a tenant's `used_bytes` with one `fetch_sub`, for a
/// release or drain that has already taken them from a slot; returns what it
/// took. The counter always holds them: `used` is every slot's bytes plus
/// every change between its steps plus leaks (see `audit`), and these bytes
/// are such a change, so no interleaving of the tenant's writers makes it
/// wrap, and the hot path is one read-modify-write where a CAS loop would
/// retry under contention. Only a file damaged by a foreign writer can hold
/// less: then the excess is added back. Until it is (and for good, if
/// another release ran on the wrapped value meanwhile), the counter reads
/// as a huge value, which refuses every reservation under a finite cap and
/// never admits one; the monitor's audit returns it to the slots' sum.
///
/// A slot's own bytes are taken with [`saturating_take`] instead: a caller
/// may release more than the slot holds by mistake, and that must not
/// drain anything, however threads interleave.
pub(crate) fn take_at_most(counter: &AtomicU64, bytes: u64) -> u64 {
    let before = counter.fetch_sub(bytes, Ordering::AcqRel);
    if before >= bytes {
        return bytes;
    }
    counter.fetch_add(bytes - before, Ordering::AcqRel);
    before
}

/// Subtracts from a counter, stopping at zero; returns what was subtracted.
pub(crate) fn saturating_take(counter: &AtomicU64, bytes: u64) -> u64 {
    match counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| Some(now.saturating_sub(bytes))) {
        Ok(before) | Err(before) => before.min(bytes),
    }
}

/// How long a writer of a policy record waits for another writer before it
/// takes the record over (the other died between its claim and its stores).
const POLICY_WRITER_WAIT: Duration = Duration::from_millis(200);

/// What applying a process's environment setting to the ledger
/// ([`Ledger::apply_environment`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision<V> {
    /// Nobody had set one: this one is now.
    Set,
    /// The same value was already in force.
    Same,
    /// An environment's value was replaced (the caller is the only live process).
    Replaced { previous: V },
    /// Another value stays in force, set by `source`.
    Kept { existing: V, source: PolicySource },
}

/// A (value, source) pair of a policy record that a process's environment
/// may set, decided and written as one under its epoch word
/// ([`write_under_epoch`]): the memory cap ([`MemoryCap`]) and the compute
/// limit ([`ComputeLimit`]).
pub trait PolicyPair {
    /// The value: bytes, or a ratio × 10 000.
    type Value: Copy + PartialEq + Default;
    /// The word that orders the pair's writers.
    fn epoch(policy: &PolicyRecord) -> &AtomicU64;
    /// The pair in force.
    fn read(policy: &PolicyRecord) -> (Self::Value, PolicySource);
    /// Stores the pair (the caller holds the epoch).
    fn write(policy: &PolicyRecord, value: Self::Value, source: PolicySource);
}

/// The memory cap in bytes ([`UNLIMITED`](crate::UNLIMITED) when none), on `policy_epoch`.
pub struct MemoryCap;

impl PolicyPair for MemoryCap {
    type Value = u64;
    fn epoch(policy: &PolicyRecord) -> &AtomicU64 {
        &policy.policy_epoch
    }
    fn read(policy: &PolicyRecord) -> (u64, PolicySource) {
        (policy.memory_limit_bytes.load(Ordering::SeqCst), PolicySource::from_u32(policy.policy_source.load(Ordering::SeqCst)))
    }
    fn write(policy: &PolicyRecord, value: u64, source: PolicySource) {
        policy.memory_limit_bytes.store(value, Ordering::SeqCst);
        policy.policy_source.store(source.as_u32(), Ordering::SeqCst);
    }
}

/// The compute limit, a ratio × 10 000 (0: none), on `compute_epoch`.
pub struct ComputeLimit;

impl PolicyPair for ComputeLimit {
    type Value = u32;
    fn epoch(policy: &PolicyRecord) -> &AtomicU64 {
        &policy.compute_epoch
    }
    fn read(policy: &PolicyRecord) -> (u32, PolicySource) {
        let source = PolicySource::from_u32(policy.compute_limit_source.load(Ordering::SeqCst));
        (policy.compute_limit_ratio_e4.load(Ordering::SeqCst), source)
    }
    fn write(policy: &PolicyRecord, value: u32, source: PolicySource) {
        policy.compute_limit_ratio_e4.store(value, Ordering::SeqCst);
        policy.compute_limit_source.store(source.as_u32(), Ordering::SeqCst);
    }
}

/// Writes fields of a policy record as one decision, under its epoch
/// word: `decide` sees what `read` returns and returns what `write` is to
/// store, or `None` to leave it. The decision holds because the write
/// claims `epoch` with a CAS from the even value read before `read`: any
/// writer in between moved the epoch, and the decision is taken again on
/// what it wrote. The epoch is odd while a writer is between its claim and
/// its last store; one that stays odd past `POLICY_WRITER_WAIT` belongs to
/// a writer that died there, and is taken over. Returns whether it wrote.
/// The memory cap's pair is written on `policy_epoch`; the compute limit's
/// pair, and the share and priority beside it, on `compute_epoch`.
pub(crate) fn write_under_epoch<S, W>(
    epoch_word: &AtomicU64,
    read: impl Fn() -> S,
    mut decide: impl FnMut(S) -> Option<W>,
    write: impl FnOnce(W),
) -> bool {
    let mut odd_since: Option<(u64, Instant)> = None;
    loop {
        let epoch = epoch_word.load(Ordering::SeqCst);
        if epoch % 2 == 1 {
            // Another writer is between its claim and its last store.
            let since = match odd_since {
                Some((seen, since)) if seen == epoch => since,
                _ => {
                    odd_since = Some((epoch, Instant::now()));
                    continue;
                }
            };
            if since.elapsed() < POLICY_WRITER_WAIT {
                std::thread::sleep(Duration::from_micros(100));
                continue;
            }
            // It died there: take over with a new odd epoch below.
        }
        let Some(stores) = decide(read()) else {
            // Decided on fields no writer was changing (the epoch was even)
            // or a dead writer's leftovers; either way nothing to write.
            if epoch_word.load(Ordering::SeqCst) == epoch {
                return false;
            }
            continue;
        };
        let claim = if epoch % 2 == 1 { epoch.wrapping_add(2) } else { epoch.wrapping_add(1) };
        if epoch_word.compare_exchange(epoch, claim, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            continue;
        }
        write(stores);
        let _ = epoch_word.compare_exchange(claim, claim.wrapping_add(1), Ordering::SeqCst, Ordering::SeqCst);
        return true;
    }
}

/// Writes a policy pair as one decision (see [`write_under_epoch`]).
pub(crate) fn write_pair<P: PolicyPair>(
    policy: &PolicyRecord,
    mut decide: impl FnMut(P::Value, PolicySource) -> Option<(P::Value, PolicySource)>,
) -> bool {
    write_under_epoch(
        P::epoch(policy),
        || P::read(policy),
        |(value, source)| decide(value, source),
        |(value, source)| P::write(policy, value, source),
    )
}

/// Marks a change of usage and slot bytes in flight on a slot for as long
/// as it lives ([`in_flight`]): created before the first step, dropped after
/// the second.
pub(crate) struct InFlight<'a>(&'a SlotRecord);

impl<'a> InFlight<'a> {
    pub(crate) fn begin(record: &'a SlotRecord) -> Self {
        record.in_flight_word.fetch_add(in_flight::BEGIN, Ordering::SeqCst);
        InFlight(record)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight_word.fetch_add(in_flight::FINISH, Ordering::SeqCst);
    }
}

impl Ledger {
    pub(crate) fn policy(&self, dev: usize) -> Option<&PolicyRecord> {
        self.layout().policy.devices.get(dev)
    }

    fn usage(&self, dev: usize) -> Option<&UsageRecord> {
        self.layout().usage.devices.get(dev)
    }

    pub(crate) fn slot_record(&self, index: usize) -> Option<&SlotRecord> {
        self.layout().slots.get(index)
    }

    /// The ledger index of the GPU with this UUID, appending it to the device
    /// table if this tenant has not used it yet. Indices are stable for the
    /// life of the file, whatever order processes see their devices in.
    ///
    /// A process that appends an entry holds an OFD lock on the entry's first
    /// byte from before it moves the entry out of `EMPTY` until it is
    /// `READY`, so an entry left `CLAIMING` whose lock is free was left by a
    /// process that died there: the entry is emptied again (under its lock)
    /// and claimed anew. Nobody used its index: the dead claimer never
    /// returned it, and everybody else waited. Only an entry claimed by a
    /// live process (or left in a state no writer writes) is waited for, up
    /// to `DEVICE_ENTRY_WAIT` (a second), and then refused.
    pub fn device_index(&self, uuid: &[u8; 16], total_memory_bytes: u64) -> Result<usize, LedgerError> {
        for (index, entry) in self.layout().header.devices.iter().enumerate() {
            let deadline = Instant::now() + DEVICE_ENTRY_WAIT;
            let lock = device_lock_offset(index);
            let mut claiming_since: Option<Instant> = None;
            loop {
                match entry.state.load(Ordering::Acquire) {
                    device_state::READY => {
                        let found: Vec<u8> = entry.uuid.iter().map(|b| b.load(Ordering::Relaxed)).collect();
                        if found == uuid[..] {
                            return Ok(index);
                        }
                        break;
                    }
                    device_state::EMPTY => {
                        // Our other threads stay out while we hold the
                        // entry's lock: theirs would not conflict with ours.
                        let _threads = self.owned_bits();
                        if ofd::try_lock(self.lock_fd(), lock).map_err(LedgerError::Lock)? {
                            let claimed = entry
                                .state
                                .compare_exchange(device_state::EMPTY, device_state::CLAIMING, Ordering::AcqRel, Ordering::Acquire)
                                .is_ok();
                            if claimed {
                                for (cell, byte) in entry.uuid.iter().zip(uuid) {
                                    cell.store(*byte, Ordering::Relaxed);
                                }
                                entry.total_memory_bytes.store(total_memory_bytes, Ordering::Relaxed);
                                entry.state.store(device_state::READY, Ordering::Release);
                            }
                            let _ = ofd::unlock(self.lock_fd(), lock);
                            if claimed {
                                return Ok(index);
                            }
                            continue;
                        }
                        // Another process is between its lock and its claim.
                    }
                    device_state::CLAIMING => {
                        let since = *claiming_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= DEVICE_CLAIM_GRACE && self.take_over_dead_claim(index) {
                            claiming_since = None;
                            continue;
                        }
                    }
                    _ => {}
                }
                if Instant::now() >= deadline {
                    return Err(LedgerError::DeviceEntryStuck { index });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Err(LedgerError::DevicesFull)
    }

    /// Empties device entry `index` if it is `CLAIMING` and nobody holds its
    /// lock (its claimer died); returns whether it did.
    fn take_over_dead_claim(&self, index: usize) -> bool {
        let Some(entry) = self.layout().header.devices.get(index) else { return false };
        let _threads = self.owned_bits();
        let lock = device_lock_offset(index);
        if !matches!(ofd::try_lock(self.lock_fd(), lock), Ok(true)) {
            return false;
        }
        let emptied =
            entry.state.compare_exchange(device_state::CLAIMING, device_state::EMPTY, Ordering::AcqRel, Ordering::Acquire).is_ok();
        let _ = ofd::unlock(self.lock_fd(), lock);
        emptied
    }

    /// The device table, in index order.
    pub fn devices(&self) -> Vec<DeviceEntry> {
        let mut devices = Vec::new();
        for (index, entry) in self.layout().header.devices.iter().enumerate() {
            if entry.state.load(Ordering::Acquire) != device_state::READY {
                continue;
            }
            let mut uuid = [0u8; 16];
            for (byte, cell) in uuid.iter_mut().zip(&entry.uuid) {
                *byte = cell.load(Ordering::Relaxed);
            }
            devices.push(DeviceEntry { index, uuid, total_memory_bytes: entry.total_memory_bytes.load(Ordering::Relaxed) });
        }
        devices
    }

    /// The tenant's memory cap on device `dev` as this process is held to
    /// it: the policy page's, or the cap this process holds itself to
    /// ([`hold_cap_at_most`](Self::hold_cap_at_most)) when that is lower;
    /// [`UNLIMITED`](crate::UNLIMITED) when neither is set. An index outside the ledger
    /// reads as 0: fail closed.
    pub fn memory_limit_bytes(&self, dev: usize) -> u64 {
        let held = self.held_cap_bytes.get(dev).map_or(0, |h| h.load(Ordering::Relaxed));
        self.policy(dev).map_or(0, |p| p.memory_limit_bytes.load(Ordering::Acquire)).min(held)
    }

    /// The cap this process holds itself to on device `dev`
    /// ([`UNLIMITED`](crate::UNLIMITED) when none).
    pub fn held_cap_bytes(&self, dev: usize) -> u64 {
        self.held_cap_bytes.get(dev).map_or(crate::UNLIMITED, |h| h.load(Ordering::Relaxed))
    }

    /// Holds this process to a cap of at most `limit_bytes` on device
    /// `dev`, whatever the policy page says later: the cap its environment
    /// asked for, once it is in force. The page can still lower it (the
    /// monitor, or the tenant itself); no write to the page raises it.
    pub fn hold_cap_at_most(&self, dev: usize, limit_bytes: u64) {
        if let Some(held) = self.held_cap_bytes.get(dev) {
            held.fetch_min(limit_bytes, Ordering::Relaxed);
        }
    }

    /// Sets the cap on device `dev` (the monitor; or a tool). A cap below the
    /// current usage refuses new reservations and leaves existing ones alone.
    pub fn set_memory_limit_bytes(&self, dev: usize, limit_bytes: u64, source: PolicySource) {
        if let Some(policy) = self.policy(dev) {
            write_pair::<MemoryCap>(policy, |_, _| Some((limit_bytes, source)));
        }
    }

    /// Applies a process's environment setting `P` (its memory cap or its
    /// compute limit) to device `dev`, decided in one step against the
    /// value in force: nobody set one yet → it is set; the same value →
    /// nothing to do; a value from an environment and `may_replace()` (the
    /// caller is the tenant's only live process) → it replaces it;
    /// otherwise (the monitor's value, or other processes live) the
    /// existing value stays. A writer that changed the pair between the
    /// reading and the write makes the decision be taken again on its value
    /// (so `may_replace` may be called more than once). A device outside
    /// the ledger keeps nothing (`Kept` with the default value, `Unset`).
    pub fn apply_environment<P: PolicyPair>(
        &self,
        dev: usize,
        value: P::Value,
        mut may_replace: impl FnMut() -> bool,
    ) -> Decision<P::Value> {
        let Some(policy) = self.policy(dev) else {
            return Decision::Kept { existing: P::Value::default(), source: PolicySource::Unset };
        };
        let mut decision = Decision::Same;
        write_pair::<P>(policy, |existing, source| {
            decision = if source == PolicySource::Unset {
                Decision::Set
            } else if existing == value {
                Decision::Same
            } else if source == PolicySource::Environment && may_replace() {
                Decision::Replaced { previous: existing }
            } else {
                Decision::Kept { existing, source }
            };
            matches!(decision, Decision::Set | Decision::Replaced { .. }).then_some((value, PolicySource::Environment))
        });
        decision
    }

    /// [`apply_environment`](Self::apply_environment) for the memory cap.
    pub fn apply_environment_cap(&self, dev: usize, limit_bytes: u64, may_replace: impl FnMut() -> bool) -> Decision<u64> {
        self.apply_environment::<MemoryCap>(dev, limit_bytes, may_replace)
    }

    /// Who set the cap on device `dev`.
    pub fn policy_source(&self, dev: usize) -> PolicySource {
        self.policy(dev).map_or(PolicySource::Unset, |p| PolicySource::from_u32(p.policy_source.load(Ordering::Acquire)))
    }

    /// Device memory one context of this tenant costs on `dev`, as measured
    /// by the shim (0 until measured).
    pub fn context_overhead_bytes(&self, dev: usize) -> u64 {
        self.usage(dev).map_or(0, |u| u.context_overhead_bytes.load(Ordering::Relaxed))
    }

    /// Records the measured context overhead on `dev`.
    pub fn set_context_overhead_bytes(&self, dev: usize, bytes: u64) {
        if let Some(usage) = self.usage(dev) {
            usage.context_overhead_bytes.store(bytes, Ordering::Relaxed);
        }
    }

    /// Bytes the tenant has reserved on `dev`.
    pub fn used_bytes(&self, dev: usize) -> u64 {
        self.usage(dev).map_or(0, |u| u.used_bytes.load(Ordering::Acquire))
    }

    /// Bytes the process owning `slot` holds on `dev`, by its slot.
    pub fn slot_bytes(&self, slot: &Slot, dev: usize) -> u64 {
        self.slot_record(slot.index()).and_then(|r| r.bytes.get(dev)).map_or(0, |b| b.load(Ordering::Acquire))
    }

    /// Reservations refused on `dev` because they would pass the cap.
    pub fn alloc_denied_total(&self, dev: usize) -> u64 {
        self.usage(dev).map_or(0, |u| u.alloc_denied_total.load(Ordering::Relaxed))
    }

    /// Processes of this tenant whose slots were reclaimed after they died.
    pub fn reclaimed_processes_total(&self) -> u64 {
        self.layout().usage.reclaimed_processes_total.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` on `dev` for the process owning `slot`, if the tenant
    /// stays within its cap; call it before asking the driver, and
    /// [`release`](Self::release) if the driver then fails. Refusals count in
    /// [`alloc_denied_total`](Self::alloc_denied_total). An index outside the
    /// ledger is refused with a limit of 0.
    pub fn try_reserve(&self, slot: &Slot, dev: usize, bytes: u64) -> Result<(), Denied> {
        self.try_reserve_counting(slot, dev, bytes, true)
    }

    /// [`try_reserve`](Self::try_reserve) without counting a refusal: for a
    /// caller that will try again (after reclaiming dead processes) and
    /// counts the final refusal once with [`count_denied`](Self::count_denied).
    pub fn try_reserve_uncounted(&self, slot: &Slot, dev: usize, bytes: u64) -> Result<(), Denied> {
        self.try_reserve_counting(slot, dev, bytes, false)
    }

    /// Counts one refused allocation on `dev`.
    pub fn count_denied(&self, dev: usize) {
        if let Some(usage) = self.usage(dev) {
            usage.alloc_denied_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether `slot` is still the caller's: alive, of the generation it
    /// claimed. A released slot (its owner exiting while another thread is
    /// still inside an allocation) admits nothing and releases nothing.
    fn owns(&self, slot: &Slot) -> bool {
        self.slot_record(slot.index())
            .is_some_and(|r| r.state_word.load(Ordering::Acquire) == state_word(slot_state::ALIVE, slot.generation()))
    }

    fn try_reserve_counting(&self, slot: &Slot, dev: usize, bytes: u64, count: bool) -> Result<(), Denied> {
        let (Some(_), Some(usage), Some(record)) = (self.policy(dev), self.usage(dev), self.slot_record(slot.index())) else {
            return Err(Denied { used_bytes: 0, limit_bytes: 0, requested_bytes: bytes });
        };
        let Some(slot_bytes) = record.bytes.get(dev) else {
            return Err(Denied { used_bytes: 0, limit_bytes: 0, requested_bytes: bytes });
        };
        // In flight from before the admitting CAS to after the slot's add (or
        // the refusal): see `audit_usage`.
        let _in_flight = InFlight::begin(record);
        if !self.owns(slot) {
            return Err(Denied { used_bytes: usage.used_bytes.load(Ordering::Acquire), limit_bytes: 0, requested_bytes: bytes });
        }
        let limit_bytes = self.memory_limit_bytes(dev);
        let admitted = usage
            .used_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(bytes).filter(|total| *total <= limit_bytes));
        match admitted {
            Ok(_) => {
                slot_bytes.fetch_add(bytes, Ordering::AcqRel);
                Ok(())
            }
            Err(used_bytes) => {
                if count {
                    usage.alloc_denied_total.fetch_add(1, Ordering::Relaxed);
                }
                Err(Denied { used_bytes, limit_bytes, requested_bytes: bytes })
            }
        }
    }

    /// Returns `bytes` on `dev` from the process owning `slot` to the tenant.
    /// Never takes more than the slot holds, so a mistaken release cannot
    /// drain other processes' accounting, and nothing underflows.
    pub fn release(&self, slot: &Slot, dev: usize, bytes: u64) {
        let (Some(usage), Some(record)) = (self.usage(dev), self.slot_record(slot.index())) else { return };
        let Some(slot_bytes) = record.bytes.get(dev) else { return };
        let _in_flight = InFlight::begin(record);
        if !self.owns(slot) {
            return;
        }
        let taken = saturating_take(slot_bytes, bytes);
        take_at_most(&usage.used_bytes, taken);
    }

    /// Gives every byte a slot record holds back to the tenant; returns the
    /// non-zero amounts by device. The caller holds the slot's lock; the
    /// drain is marked in flight on the drained slot itself.
    pub(crate) fn drain_slot(&self, record: &SlotRecord) -> Vec<(usize, u64)> {
        let _in_flight = InFlight::begin(record);
        let mut drained = Vec::new();
        for (dev, cell) in record.bytes.iter().enumerate().take(MAX_DEVICES) {
            let bytes = cell.swap(0, Ordering::AcqRel);
            if bytes > 0 {
                if let Some(usage) = self.usage(dev) {
                    saturating_take(&usage.used_bytes, bytes);
                }
                drained.push((dev, bytes));
            }
        }
        drained
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::device_state;

    const UUID: [u8; 16] = *b"GPU-claim-uuid-0";

    fn fresh(name: &str) -> (std::path::PathBuf, Ledger) {
        let dir = std::env::temp_dir().join(format!("gpuslice-claim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ledger = Ledger::open_or_create(&dir, "t").unwrap();
        (dir, ledger)
    }

    #[test]
    fn an_entry_left_claiming_by_a_dead_process_is_claimed_anew() {
        let (dir, ledger) = fresh("dead");
        // A first process died between its claim and its READY.
        ledger.layout().header.devices[0].state.store(device_state::CLAIMING, Ordering::SeqCst);
        let started = Instant::now();
        assert_eq!(ledger.device_index(&UUID, 1 << 30).unwrap(), 0);
        assert!(started.elapsed() < DEVICE_ENTRY_WAIT, "{:?}", started.elapsed());
        assert_eq!(ledger.devices()[0].uuid, UUID);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_entry_a_live_process_is_claiming_is_waited_for() {
        let (dir, ledger) = fresh("live");
        let claimer = Ledger::open(ledger.path()).unwrap();
        assert!(ofd::try_lock(claimer.lock_fd(), device_lock_offset(0)).unwrap());
        ledger.layout().header.devices[0].state.store(device_state::CLAIMING, Ordering::SeqCst);
        let started = Instant::now();
        assert!(matches!(ledger.device_index(&UUID, 1 << 30), Err(LedgerError::DeviceEntryStuck { index: 0 })));
        assert!(started.elapsed() >= DEVICE_ENTRY_WAIT);
        // It dies: the next process takes the entry over.
        drop(claimer);
        assert_eq!(ledger.device_index(&UUID, 1 << 30).unwrap(), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
