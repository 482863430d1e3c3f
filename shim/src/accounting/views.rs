//! Virtualised views of device memory, so that frameworks size themselves
//! to the cap.
//!
//! Under a cap, `cuMemGetInfo_v2` reports total = cap and free = min(cap −
//! used, physically free); `cuDeviceTotalMem_v2` reports the cap; NVML's
//! memory info reports total = cap and used = the tenant's usage (see
//! `hooks::nvml`). No value ever underflows, and none is larger than the
//! device. Without a cap, the driver's figures pass through. A member of a
//! team with a memory quota on the device sees the smaller of its own room
//! and its team's ([`with_team`]): total = min(cap, quota), free = the
//! room it may still reserve. Pending
//! stream-ordered frees that completed are released, and the pools'
//! charges settled, before a view is taken, so that it shows them gone.
//!
//! NVML's running-process lists, under a cap, hold only the tenant's own
//! processes ([`Runtime::tenant_pids`], [`keep_tenant_processes`]): a
//! process is the tenant's when a live slot of its ledger records its pid
//! as the process's own `/proc` names it (`SlotView::pid`), which is the
//! pid NVML lists wherever that `/proc` is the host's, and is what simgpu
//! lists everywhere. A process in a container with its own PID namespace
//! and `/proc`, on a real driver, records its namespace pid while NVML
//! lists host pids: such processes are then not listed, rather than other
//! tenants' shown.
//!
//! Owns no state: it reads the cap, the usage and the slots from the
//! ledger.

use abi::cuda::*;
use ledger::UNLIMITED;

use super::Runtime;
use crate::real;

/// What `cuMemGetInfo`/NVML report under a cap: total is the cap (never more
/// than the device has), free is what the tenant may still reserve, never
/// more than is physically free. Nothing underflows.
pub fn capped_view(limit_bytes: u64, used_bytes: u64, free_bytes: u64, total_bytes: u64) -> (u64, u64) {
    if limit_bytes == UNLIMITED {
        return (free_bytes, total_bytes);
    }
    let total = limit_bytes.min(total_bytes);
    let free = total.saturating_sub(used_bytes).min(free_bytes);
    (free, total)
}

/// The (limit, used) a view shows for a tenant at (`limit_bytes`,
/// `used_bytes`) in a team at `team` (quota, the team's total), if any: the
/// limit is the smaller of cap and quota, and the room it leaves (limit −
/// used) is the smaller of the tenant's and the team's. Nothing underflows.
pub fn with_team(limit_bytes: u64, used_bytes: u64, team: Option<(u64, u64)>) -> (u64, u64) {
    let Some((quota_bytes, team_used_bytes)) = team else { return (limit_bytes, used_bytes) };
    let limit = limit_bytes.min(quota_bytes);
    let room = limit_bytes.saturating_sub(used_bytes).min(quota_bytes.saturating_sub(team_used_bytes)).min(limit);
    (limit, limit - room)
}

/// Keeps the entries of an NVML process list whose pid is one of the
/// tenant's `pids`, in NVML's order.
pub fn keep_tenant_processes<T>(list: &mut Vec<T>, pids: &[u32], pid_of: impl Fn(&T) -> u32) {
    list.retain(|entry| pids.contains(&pid_of(entry)));
}

impl Runtime {
    /// The cap and usage of ledger device `dev` for views, the team's
    /// quota and total folded in ([`with_team`]).
    pub fn limit_and_used(&self, dev: usize) -> (u64, u64) {
        self.poll_pending_frees();
        self.settle_pools();
        let team = super::team::TeamRoom::of(dev).map(|t| (t.quota_bytes, t.used_bytes()));
        with_team(self.ledger.memory_limit_bytes(dev), self.ledger.used_bytes(dev), team)
    }

    /// `cuMemGetInfo_v2` of the current device, given the driver's figures.
    pub fn mem_info_view(&self, free_bytes: u64, total_bytes: u64) -> (u64, u64) {
        let Ok(device) = real::current_device() else { return (free_bytes, total_bytes) };
        let Some(device) = self.device_by_handle(device) else { return (free_bytes, total_bytes) };
        let (limit_bytes, used_bytes) = self.limit_and_used(device.ledger_index);
        capped_view(limit_bytes, used_bytes, free_bytes, total_bytes)
    }

    /// The pids of the tenant's live processes (this one included), as
    /// their own `/proc` names them.
    pub fn tenant_pids(&self) -> Vec<u32> {
        self.ledger.slots().into_iter().filter(|slot| slot.alive).map(|slot| slot.pid).collect()
    }

    /// `cuDeviceTotalMem_v2` of `cu_device`, given the driver's figure.
    pub fn total_mem_view(&self, cu_device: CUdevice, total_bytes: u64) -> u64 {
        let Some(device) = self.device_by_handle(cu_device) else { return total_bytes };
        let quota_bytes = super::team::TeamRoom::of(device.ledger_index).map_or(UNLIMITED, |t| t.quota_bytes);
        let limit_bytes = self.ledger.memory_limit_bytes(device.ledger_index).min(quota_bytes);
        if limit_bytes == UNLIMITED {
            total_bytes
        } else {
            limit_bytes.min(total_bytes)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn a_team_view_shows_the_smaller_room() {
        let gib = 1u64 << 30;
        // No team: as it was.
        assert_eq!(with_team(4 * gib, gib, None), (4 * gib, gib));
        // The team has less room (1 GiB of 10) than the tenant (3 of 4).
        assert_eq!(with_team(4 * gib, gib, Some((10 * gib, 9 * gib))), (4 * gib, 3 * gib));
        // The quota is below the cap; the tenant's own room is smaller.
        assert_eq!(with_team(4 * gib, 3 * gib, Some((2 * gib, 0))), (2 * gib, gib));
        // No cap, a quota: the team's room.
        assert_eq!(with_team(UNLIMITED, 0, Some((8 * gib, 6 * gib))), (8 * gib, 6 * gib));
        // A team past its quota (a reload shrank it): no room, no underflow.
        assert_eq!(with_team(4 * gib, gib, Some((2 * gib, 5 * gib))), (2 * gib, 2 * gib));
        assert_eq!(capped_view(2 * gib, 2 * gib, 10 * gib, 16 * gib), (0, 2 * gib));
    }

    #[test]
    fn a_process_list_keeps_the_tenants_pids_in_order() {
        let mut list = vec![(7u32, 1u64), (42, 2), (8, 3), (9, 4)];
        keep_tenant_processes(&mut list, &[9, 7, 100], |entry| entry.0);
        assert_eq!(list, vec![(7, 1), (9, 4)]);
        keep_tenant_processes(&mut list, &[], |entry| entry.0);
        assert!(list.is_empty());
    }

    #[test]
    fn view_is_the_cap_and_never_underflows() {
        let gib = 1u64 << 30;
        assert_eq!(capped_view(UNLIMITED, 5, 10 * gib, 16 * gib), (10 * gib, 16 * gib));
        assert_eq!(capped_view(gib, gib / 4, 10 * gib, 16 * gib), (3 * gib / 4, gib));
        // Usage above the cap (the cap was lowered): free is 0, not 17 TB.
        assert_eq!(capped_view(gib, 2 * gib, 10 * gib, 16 * gib), (0, gib));
        // Physically less free than the cap allows.
        assert_eq!(capped_view(4 * gib, 0, gib, 16 * gib), (gib, 4 * gib));
        // A cap above the device: the device.
        assert_eq!(capped_view(32 * gib, 0, 16 * gib, 16 * gib), (16 * gib, 16 * gib));
    }
}
