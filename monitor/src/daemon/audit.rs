//! Leak audit: bytes a tenant's usage counts that no process slot holds,
//! found and returned to the tenant.
//!
//! A tenant's `used_bytes` equals the sum of its slots' bytes except while a
//! reservation or release is between its two steps, and except for bytes
//! left counted by a process killed between them (a leak: no reclaim
//! returns them). Each change is marked in flight on its slot, so
//! `Ledger::audit_usage` gives a reading only when no change on a live slot
//! was in flight or moved anything during it; a process stopped (`SIGSTOP`,
//! a debugger) between its steps holds the audit up instead of looking like
//! a leak. The ledger crate's `audit` module says why such a reading is
//! exact and why the correcting compare-and-swap can never let a tenant
//! pass its cap.
//!
//! Each round, per tenant and device: a reading with unattributed bytes
//! that equals the previous round's reading (same usage, same slots' sum)
//! is corrected by `Ledger::correct_unattributed` (a CAS of `used_bytes`
//! from the reading's value; if usage moved, the next rounds judge again).
//! The monitor must be the only corrector of a ledger directory.
//! `gpuslice_tenant_unattributed_bytes` shows a leak seen twice and not
//! (yet) corrected; each correction is logged.

use super::log;
use ledger::{Ledger, UsageAudit};
use std::collections::HashMap;

/// (tenant, uuid).
type Key = (String, String);

/// The readings of the previous round.
#[derive(Default)]
pub struct AuditState {
    last: HashMap<Key, UsageAudit>,
}

impl AuditState {
    /// Audits every device of every ledger and corrects leaks seen twice;
    /// returns the leaks left uncorrected, by key.
    pub fn check<'a>(&mut self, ledgers: impl IntoIterator<Item = &'a Ledger>) -> HashMap<Key, u64> {
        let mut now = HashMap::new();
        let mut leaks = HashMap::new();
        for ledger in ledgers {
            let tenant = ledger.tenant();
            for device in ledger.devices() {
                let key = (tenant.clone(), crate::nvml::uuid_string(&device.uuid));
                let Some(reading) = ledger.audit_usage(device.index) else { continue };
                let leaked = reading.unattributed_bytes();
                if leaked > 0 && self.last.get(&key) == Some(&reading) {
                    if ledger.correct_unattributed(device.index, &reading) {
                        log::warn(&format!(
                            "tenant {} device {}: returned {} ({leaked} bytes) that the ledger counted and no process \
                             held (a process killed while reserving or releasing)",
                            key.0,
                            key.1,
                            crate::text::human_bytes(leaked)
                        ));
                        continue;
                    }
                    leaks.insert(key.clone(), leaked);
                }
                now.insert(key, reading);
            }
        }
        self.last = now;
        leaks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger::layout::in_flight;
    use std::sync::atomic::Ordering;

    const UUID: [u8; 16] = *b"GPU-audit-uuid-1";

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("gpuslice-audit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// A half-done reservation of `owner`: marked in flight on its slot,
    /// the tenant's counter raised, the slot's bytes not.
    fn cut_reservation(owner: &Ledger, slot: &ledger::Slot, bytes: u64) {
        owner.layout().slots[slot.index()].in_flight_word.fetch_add(in_flight::BEGIN, Ordering::SeqCst);
        owner.layout().usage.devices[0].used_bytes.fetch_add(bytes, Ordering::SeqCst);
    }

    #[test]
    fn a_leak_is_corrected_on_its_second_sighting_and_a_live_change_in_flight_never() {
        let dir = temp_dir("leak");
        let monitor_view = Ledger::open_or_create(&dir, "team-a").unwrap();
        let dev = monitor_view.device_index(&UUID, 1 << 30).unwrap();
        let owner = Ledger::open(monitor_view.path()).unwrap();
        let slot = owner.claim_slot().unwrap();
        owner.try_reserve(&slot, dev, 100).unwrap();
        let mut audit = AuditState::default();
        assert!(audit.check([&monitor_view]).is_empty());

        // A live owner between its steps (stopped): never corrected.
        cut_reservation(&owner, &slot, 50);
        for _ in 0..5 {
            assert!(audit.check([&monitor_view]).is_empty());
        }
        assert_eq!(monitor_view.used_bytes(dev), 150);

        // It dies there: a leak. Seen once, then corrected.
        drop(owner);
        assert!(audit.check([&monitor_view]).is_empty());
        assert_eq!(monitor_view.used_bytes(dev), 150, "not on the first sighting");
        assert!(audit.check([&monitor_view]).is_empty());
        assert_eq!(monitor_view.used_bytes(dev), 100, "corrected on the second");
        audit.check([&monitor_view]);
        assert_eq!(monitor_view.used_bytes(dev), 100, "corrected once");
        monitor_view.reclaim_dead();
        assert_eq!(monitor_view.used_bytes(dev), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_changing_difference_is_not_corrected() {
        let dir = temp_dir("moving");
        let monitor_view = Ledger::open_or_create(&dir, "team-a").unwrap();
        let dev = monitor_view.device_index(&UUID, 1 << 30).unwrap();
        let dead = Ledger::open(monitor_view.path()).unwrap();
        let dead_slot = dead.claim_slot().unwrap();
        cut_reservation(&dead, &dead_slot, 30);
        drop(dead);
        let owner = Ledger::open(monitor_view.path()).unwrap();
        let slot = owner.claim_slot().unwrap();
        let mut audit = AuditState::default();
        for round in 1..=4u64 {
            owner.try_reserve(&slot, dev, round).unwrap();
            assert!(audit.check([&monitor_view]).is_empty());
        }
        assert_eq!(monitor_view.used_bytes(dev), 30 + 10, "usage moved every round: not judged");
        audit.check([&monitor_view]);
        assert_eq!(monitor_view.used_bytes(dev), 10, "still for a round: corrected");
        owner.release_slot(slot);
        monitor_view.reclaim_dead();
        assert_eq!(monitor_view.used_bytes(dev), 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
