//! Usage that no process holds: finding it and giving it back.
//!
//! A tenant's `used_bytes` on a device equals the sum of every slot's bytes
//! there, except while a change is between its two steps (see
//! [`layout::in_flight`](crate::layout::in_flight)) and except for bytes
//! left counted by a writer killed between them (a *leak*: counted for the
//! tenant, held by no slot, returned by no reclaim). [`Ledger::audit_usage`]
//! takes a reading that tells the two apart, and
//! [`Ledger::correct_unattributed`] returns a leak to the tenant.
//!
//! # Why a correction never lets a tenant pass its cap
//! Write `L = used − Σ slot bytes − T`, where `T` is what changes between
//! their steps count in `used` and not in a slot (a reservation after its
//! CAS and before its slot add; a release or drain after its slot take and
//! before its usage take). Every completed change keeps `L`; a writer killed
//! between its steps turns its part of `T` into `L` for good; nothing but a
//! correction lowers `L`. So `L` only grows, and subtracting at most the `L`
//! of some earlier moment, from the `used` of a later moment at which
//! `used` has not changed, never takes a byte that a slot or a change in
//! flight will still account for.
//!
//! A reading is taken as a seqlock over the slots' in-flight words:
//! 1. read every slot's word (`W1`); if one counts a change in flight and
//!    its slot's lock is held (its owner, or a claimer or reclaimer at work,
//!    is alive), give up this time;
//! 2. read `used` (`U1`), every slot's bytes (`S`), `used` again (`U2`);
//! 3. read every word again (`W2`); give up unless `W2 == W1` and `U1 == U2`.
//!
//! Each writer adds to the word of the slot it changes before its first
//! step and after its second (sequentially consistent read-modify-writes;
//! its steps are release-acquire RMWs, our reads acquire). A change that
//! began before step 1 and is still between its steps at step 1 is seen
//! there (its slot's lock is held while its writer lives, and a writer that
//! died left a leak, which `L` rightly includes). A change whose first step
//! is visible to any read of step 2 began before that read, so its `BEGIN`
//! is visible to step 3 and `W2 != W1`; a change that finishes during the
//! window moves the finished count. So when a reading is returned, no
//! change on a live slot was between its steps or moved `used` or a slot
//! during it, and `U1 − S` is exactly `L` at that moment.
//!
//! [`Ledger::correct_unattributed`] then does one CAS of `used` from `U1`
//! to `U1 − (U1 − S)`. It fails if any reservation, release or drain
//! moved `used` since, which is then judged again from a new reading. If it
//! succeeds, `used` is `U1` at that moment, so what it takes is the `L` of
//! the reading, and `L` has not fallen since: the correction is safe even
//! if changes began on slots after the reading (a release that has taken
//! from its slot but not yet from `used` keeps its share of `T` and
//! finishes normally).
//!
//! Only one corrector per ledger may run (the monitor): two that read the
//! same leak could both succeed if `used` came back to the same value in
//! between.

use crate::layout::{in_flight, MAX_SLOTS};
use crate::{ofd, slots::lock_offset, Ledger};
use std::sync::atomic::Ordering;

/// One consistent reading of a device's usage against its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageAudit {
    /// The tenant's `used_bytes` on the device.
    pub used_bytes: u64,
    /// The sum of every slot's bytes on the device.
    pub slots_bytes: u64,
}

impl UsageAudit {
    /// Bytes the tenant's usage counts that no slot holds (a leak).
    pub fn unattributed_bytes(&self) -> u64 {
        self.used_bytes.saturating_sub(self.slots_bytes)
    }
}

impl Ledger {
    fn in_flight_words(&self) -> Vec<u64> {
        self.layout().slots.iter().map(|r| r.in_flight_word.load(Ordering::SeqCst)).collect()
    }

    /// Whether someone holds slot `index`'s lock (this `Ledger` or another
    /// process): a change marked in flight there may still finish.
    fn slot_lock_held(&self, index: usize) -> bool {
        self.owns_lock(index) || !matches!(ofd::probe(self.lock_fd(), lock_offset(index)), Ok(ofd::Probe::Free))
    }

    /// A reading of device `dev`'s usage against its slots in which nothing
    /// was in flight on a live slot and nothing moved; `None` when a change
    /// was, so that no leak can be told from it now (try again later). See
    /// the module docs for why the reading is consistent.
    pub fn audit_usage(&self, dev: usize) -> Option<UsageAudit> {
        let usage = self.layout().usage.devices.get(dev)?;
        let before = self.in_flight_words();
        for (index, word) in before.iter().enumerate().take(MAX_SLOTS) {
            if in_flight::count(*word) != 0 && self.slot_lock_held(index) {
                return None;
            }
        }
        let used_bytes = usage.used_bytes.load(Ordering::SeqCst);
        let slots_bytes = self
            .layout()
            .slots
            .iter()
            .filter_map(|r| r.bytes.get(dev))
            .fold(0u64, |sum, cell| sum.saturating_add(cell.load(Ordering::SeqCst)));
        let used_again = usage.used_bytes.load(Ordering::SeqCst);
        let after = self.in_flight_words();
        (used_bytes == used_again && before == after).then_some(UsageAudit { used_bytes, slots_bytes })
    }

    /// Returns a leak found by [`audit_usage`](Self::audit_usage) to the
    /// tenant: one CAS of `used_bytes` from the reading's value to its slots'
    /// sum. `false` when there was nothing to return or `used_bytes` moved
    /// since the reading (take a new one). Run by one corrector only (the
    /// monitor); see the module docs for why it is safe.
    pub fn correct_unattributed(&self, dev: usize, audit: &UsageAudit) -> bool {
        let Some(usage) = self.layout().usage.devices.get(dev) else { return false };
        audit.used_bytes > audit.slots_bytes
            && usage.used_bytes.compare_exchange(audit.used_bytes, audit.slots_bytes, Ordering::SeqCst, Ordering::SeqCst).is_ok()
    }
}
