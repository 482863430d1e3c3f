//! A team's memory quota: the reservation one level above the tenant's.
//!
//! A member of a team with a memory quota on a device holds the team's
//! page there (`ledger::team_usage`), handed over by the monitor when the
//! process joined the device ([`crate::compute::join`]). Every reservation
//! on the device is then made in the team's page first, within the quota
//! the monitor wrote in the tenant's record of the grant page, and in the
//! tenant's ledger second; a refusal of the second gives the first back
//! ([`Runtime::try_reserve_in_team`]). A release goes the other way.
//!
//! The process keeps count of what it has reserved in the team's page
//! (`Seat::team_charged_bytes`), so that it never gives back more than it
//! took: bytes it held before it had a page (reserved before it joined, or
//! while no monitor ran) are in the team's total only once the monitor's
//! audit has added them. It gives its whole count back at exit; the
//! monitor does so for a process that died.
//!
//! Once the monitor goes away the process keeps its page and the quota it
//! last read, so a team is not let past its quota by an outage; a new
//! monitor hands over a new page, counted from its members' ledgers.

use ledger::grants::GrantPage;
use ledger::team_usage::TeamUsagePage;
use ledger::Denied;
use std::sync::atomic::Ordering;

use super::Runtime;
use crate::compute::gate::{self, Seat};

/// The team's page, its quota and this process's seat on ledger device
/// `dev`, for a member of a team with a quota there.
pub(super) struct TeamRoom {
    page: &'static TeamUsagePage,
    seat: &'static Seat,
    pub quota_bytes: u64,
}

impl TeamRoom {
    /// Of ledger device `dev`, if this process holds its team's page there.
    pub fn of(dev: usize) -> Option<TeamRoom> {
        let seat = gate::seats().find(|s| s.dev.load(Ordering::Relaxed) == dev)?;
        let page = seat.team()?;
        let quota_bytes = match seat.page() {
            Some(grants) => {
                let quota = quota_in(grants, seat.member());
                seat.team_quota_bytes.store(quota, Ordering::Relaxed);
                quota
            }
            None => seat.team_quota_bytes.load(Ordering::Relaxed),
        };
        Some(TeamRoom { page, seat, quota_bytes })
    }

    /// Bytes the team holds.
    pub fn used_bytes(&self) -> u64 {
        self.page.used_bytes()
    }

    fn try_reserve(&self, bytes: u64) -> Result<(), Denied> {
        self.page.try_reserve(bytes, self.quota_bytes).map_err(|used_bytes| Denied {
            used_bytes,
            limit_bytes: self.quota_bytes,
            requested_bytes: bytes,
        })?;
        self.seat.team_charged_bytes.fetch_add(bytes, Ordering::AcqRel);
        Ok(())
    }

    /// Gives back `bytes`, never more than this process reserved here.
    fn release(&self, bytes: u64) {
        let taken = take_charged(&self.seat.team_charged_bytes, bytes);
        self.page.release(taken);
    }
}

/// Takes at most `bytes` from a process's own count, never below zero;
/// what it took.
fn take_charged(charged: &std::sync::atomic::AtomicU64, bytes: u64) -> u64 {
    match charged.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| Some(now.saturating_sub(bytes))) {
        Ok(before) | Err(before) => before.min(bytes),
    }
}

/// The team's quota member `member` reads on a grant page.
fn quota_in(grants: &GrantPage, member: u32) -> u64 {
    grants.members.get(member as usize).map_or(ledger::UNLIMITED, |m| m.team_memory_quota_bytes().load(Ordering::Acquire))
}

impl Runtime {
    /// Reserves `bytes` on ledger device `dev` in the team's page (when
    /// this process has one there) and then in the tenant's ledger, or in
    /// neither.
    pub(super) fn try_reserve_in_team(&self, dev: usize, bytes: u64) -> Result<(), Denied> {
        let team = TeamRoom::of(dev);
        if let Some(team) = &team {
            team.try_reserve(bytes)?;
        }
        let tenant = self.ledger.try_reserve_uncounted(&self.slot, dev, bytes);
        if let (Err(_), Some(team)) = (&tenant, &team) {
            team.release(bytes);
        }
        tenant
    }

    /// Gives `bytes` on ledger device `dev` back to the tenant and then to
    /// the team.
    pub(super) fn release_in_team(&self, dev: usize, bytes: u64) {
        self.ledger.release(&self.slot, dev, bytes);
        if let Some(team) = TeamRoom::of(dev) {
            team.release(bytes);
        }
    }

    /// What a dead process of this tenant held on ledger device `dev`, just
    /// reclaimed here, leaves the team's total too.
    pub(super) fn team_forgets_dead(dev: usize, bytes: u64) {
        if let Some(team) = TeamRoom::of(dev) {
            team.page.release(bytes);
        }
    }
}

/// Takes the team's page the monitor handed over with `seat`'s device.
/// The first one is charged what this process already holds there (its
/// context, made before it could join), whatever the quota: that memory is
/// held, and the team's total must show it. A page from a later monitor
/// was counted from the members' ledgers when it was made, this process's
/// slot included.
pub fn take_page(rt: &Runtime, seat: &Seat, page: &'static TeamUsagePage) {
    if seat.team().is_none() {
        let held = rt.ledger.slot_bytes(&rt.slot, seat.dev.load(Ordering::Relaxed));
        page.used_bytes.fetch_add(held, Ordering::AcqRel);
        seat.team_charged_bytes.fetch_add(held, Ordering::AcqRel);
    }
    seat.set_team(page);
}

/// Exit: gives back everything this process reserved in its teams' pages
/// (after its slot in the tenant's ledger was released, as a release
/// goes).
pub fn release_all_at_exit() {
    for seat in gate::seats() {
        if let Some(page) = seat.team() {
            page.release(seat.team_charged_bytes.swap(0, Ordering::AcqRel));
        }
    }
}
