//! Leak audit: bytes a tenant's usage counts that no process slot holds.
//!
//! A tenant's `used_bytes` should equal the sum of its slots' bytes. A
//! reservation is two atomic steps (the tenant's counter, then the slot), so
//! a process killed between them leaves bytes counted for the tenant that no
//! slot holds and no reclaim returns: the tenant gets that much less than
//! its cap until its ledger is recreated (see the ledger crate's "known
//! limitation"). The same difference shows for an instant while any
//! reservation is in flight, so the audit reports it only when the tenant's
//! usage, its slots' bytes and its slots themselves (claims, frees,
//! generations) are all unchanged since the previous round.
//!
//! The monitor reports the leak (`gpuslice_tenant_unattributed_bytes` and a
//! log line) and does not correct it. A correcting compare-and-swap on
//! `used_bytes` from the observed value would be safe only if no
//! reservation could be between its two steps at that moment, and nothing in
//! the ledger says so: a process stopped (`SIGSTOP`, a debugger) between the
//! steps looks exactly like a leak for as long as it is stopped, and
//! correcting it would let the tenant pass its cap by those bytes once it
//! resumes. Correcting needs a per-slot "reservation in flight" mark in the
//! ledger itself.

use super::log;
use crate::snapshot::Snapshot;
use std::collections::HashMap;

/// (tenant, uuid).
type Key = (String, String);

/// (used bytes, slots' bytes, slots' signature) last round.
#[derive(Default)]
pub struct AuditState {
    last: HashMap<Key, (u64, u64, u64)>,
    /// Leaks reported, by key, with the amount last logged.
    reported: HashMap<Key, u64>,
}

impl AuditState {
    /// Finds persistent leaks; returns the unattributed bytes by key.
    pub fn check(&mut self, snapshot: &Snapshot) -> HashMap<Key, u64> {
        let mut now = HashMap::new();
        let mut leaks = HashMap::new();
        for tenant in &snapshot.tenants {
            for device in &tenant.devices {
                let key = (tenant.name.clone(), device.uuid.clone());
                let figures = (device.memory_used_bytes, device.slots_bytes, tenant.slots_signature);
                if self.last.get(&key) == Some(&figures) && device.memory_used_bytes > device.slots_bytes {
                    leaks.insert(key.clone(), device.memory_used_bytes - device.slots_bytes);
                }
                now.insert(key, figures);
            }
        }
        for (key, bytes) in &leaks {
            if self.reported.get(key) != Some(bytes) {
                log::warn(&format!(
                    "tenant {} device {}: the ledger counts {} ({bytes} bytes) that no process holds (a process killed \
                     while reserving); the tenant gets that much less than its cap until its ledger is recreated",
                    key.0,
                    key.1,
                    crate::status::human_bytes(*bytes)
                ));
            }
        }
        self.reported.retain(|key, _| leaks.contains_key(key));
        self.reported.extend(leaks.iter().map(|(k, v)| (k.clone(), *v)));
        self.last = now;
        leaks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::fixtures;

    fn snapshot(used_bytes: u64, slots_bytes: u64, slots_signature: u64) -> Snapshot {
        let device = crate::snapshot::TenantDeviceView { slots_bytes, ..fixtures::tenant_device(used_bytes, None, None) };
        let mut snapshot = fixtures::one_tenant(false, device, vec![]);
        snapshot.tenants[0].slots_signature = slots_signature;
        snapshot
    }

    #[test]
    fn only_a_difference_that_stays_put_is_a_leak() {
        let mut audit = AuditState::default();
        let key = ("team-a".to_string(), "GPU-0".to_string());
        // A reservation in flight: seen once, then gone.
        assert!(audit.check(&snapshot(150, 100, 1)).is_empty());
        assert!(audit.check(&snapshot(150, 150, 1)).is_empty());
        // Moving slots: not judged.
        assert!(audit.check(&snapshot(200, 150, 2)).is_empty());
        assert!(audit.check(&snapshot(200, 150, 3)).is_empty());
        // Unchanged for two rounds: 50 bytes nobody holds.
        assert_eq!(audit.check(&snapshot(200, 150, 3)).get(&key), Some(&50));
        assert_eq!(audit.check(&snapshot(200, 150, 3)).get(&key), Some(&50));
        // In balance: nothing.
        assert!(audit.check(&snapshot(150, 150, 3)).is_empty());
        assert!(audit.check(&snapshot(150, 150, 3)).is_empty());
        // More in the slots than counted is not reported as unattributed.
        audit.check(&snapshot(100, 150, 3));
        assert!(audit.check(&snapshot(100, 150, 3)).is_empty());
    }
}
