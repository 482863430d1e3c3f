//! Turns: who may run work on a device, among the tenants that share it.
//!
//! One [`TurnTable`] per physical device, shared by every process of every
//! tenant that launches there. A tenant runs work only while it holds the
//! device's *turn*; the others wait (asleep, on a futex). So at any moment
//! one tenant's work is on the device, and the timing events the shim
//! brackets each launch with measure that tenant's device time alone: time
//! sliced to other contexts never lands in a bracket, which is what makes
//! shares exact (`shim::accounting::throttle` measures; this module decides).
//!
//! # Who gets the next turn
//! Each member (tenant) has a *weight*, its target fraction of the device
//! ([`targets`]): its guaranteed share, plus the spare time of the device,
//! which goes to the highest priority first and is split by share within a
//! priority, never past a limit. Tenants without a share split what shares
//! leave equally. Every measured nanosecond of a member's work advances its
//! *virtual time* by `ns / weight` ([`TurnTable::charge`]). When the turn
//! is free, the waiting member with the lowest virtual time takes it (ties:
//! the higher priority): stride scheduling. Over any interval in which
//! members keep waiting, each gets device time in proportion to its weight,
//! to within a turn or two each: with weights summing to the whole device,
//! each gets its target. Priority works through the weights (spare time)
//! and through preemption (below), never by letting a tenant of higher
//! priority take a lower one's guaranteed share.
//!
//! # Work conservation
//! A member that does not wait takes no turn: its time goes to the members
//! that wait, in proportion to their weights, at once (not at the next
//! round of any daemon). A member that comes back after an idle spell has
//! its virtual time lifted to the least of the active members', so idling
//! banks no credit. A lone member keeps the turn for as long as nobody
//! waits and gets the whole device.
//!
//! # How a turn ends
//! The holder keeps the turn for [`QUANTUM_NS`] while others wait, or less
//! when a member of higher priority waits that is owed time (its virtual
//! time is not ahead of the holder's): that is how an inference burst is
//! served before a training job's next kernel. While a member of higher
//! priority is active on the device, a lower one keeps a single launch in
//! flight (the shim's throttle), so a burst waits for one kernel at most.
//! A member that used less than its weight (a bursty one) is behind in
//! virtual time, but never by more than [`MAX_LAG_NS`] of its own device
//! time: a quiet member banks a little credit for its next burst, not an
//! hour of it. It then stops launching,
//! waits for its work in flight to complete (the device stays busy with it,
//! so nothing is lost) and releases the turn, waking the waiters. Work that
//! overran the turn is charged all the same: the overrun is paid back in
//! virtual time, so it costs the holder its next turns, not the others.
//!
//! # Faults
//! The holder publishes until when its queued work keeps the device busy
//! ([`TurnTable::hold`]); a turn whose holder launched nothing past that
//! (plus [`IDLE_GRACE_NS`]) has lapsed and the next waiter takes it. So a
//! holder that goes idle, is stopped (SIGSTOP) or killed costs the others
//! at most what it had queued plus the grace, and never more than
//! [`MAX_TURN_NS`]: garbage in the table cannot hold the device longer. A
//! waiter that is chosen and never takes the turn (stopped, killed) loses
//! it to any other waiter after [`HANDOFF_GRACE_NS`]; a waiter stops
//! counting as one when it has not renewed its wait for [`WAIT_FRESH_NS`].
//!
//! # Trust
//! Every member can write the whole table: it is cooperative state, like a
//! tenant's own bucket. The table lives in a sealed memfd that the monitor
//! creates and hands out ([`Turns::create_sealed`], [`Turns::from_fd`]): a
//! tenant can write nonsense into it but cannot shrink it under the others,
//! so no tenant can crash another with it. Nonsense is bounded: a lapsed or
//! garbage holder is taken over, and every wait has a timeout. What a
//! member gains by lying about its own virtual time or weight is more
//! turns: as a tenant that skips the shim gets the hardware's round-robin,
//! compute shares hold tenants that do not tamper with their own processes
//! (the README's security section).
//!
//! # Clocks
//! Times are `CLOCK_MONOTONIC`, one clock for every process of a host
//! outside time namespaces. A reading from the future (garbage, or another
//! namespace) counts as lapsed.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

use crate::compute::WHOLE_DEVICE_RATIO_E4;

/// `b"GPUTURNS"` read as a little-endian `u64`.
pub const TURNS_MAGIC: u64 = u64::from_le_bytes(*b"GPUTURNS");
/// The layout of [`TurnTable`]; any change bumps it.
pub const TURNS_VERSION: u32 = 2;
/// Tenants that can take turns on one device.
pub const MAX_MEMBERS: usize = 62;
/// Size of a turn table.
pub const TURNS_BYTES: usize = 4096;

/// How long a holder keeps the turn while others wait. Short enough that a
/// 10 s window holds hundreds of turns (each tenant's error is at most one
/// turn); long enough that handing over (a futex wake) costs well under a
/// percent of the device.
pub const QUANTUM_NS: u64 = 20_000_000;
/// A holder whose queued work ended this long ago and that launched nothing
/// since has lapsed.
pub const IDLE_GRACE_NS: u64 = 2_000_000;
/// The longest a turn counts as held without being renewed.
pub const MAX_TURN_NS: u64 = 1_000_000_000;
/// A chosen waiter that has not taken a free turn after this long loses it
/// to whichever waiter comes first; the member that has just released the
/// turn waits three times as long before it takes the turn back, so that a
/// chosen waiter that is slow to get a CPU is not robbed by the holder it
/// follows.
pub const HANDOFF_GRACE_NS: u64 = 10_000_000;
/// A waiter renews its wait at least this often (each futex timeout).
pub const WAIT_RENEW_NS: u64 = 10_000_000;
/// A wait not renewed for this long is gone.
pub const WAIT_FRESH_NS: u64 = 200_000_000;
/// The most device time a member may be owed when it takes a turn, ns at
/// the smallest weight among the active members (see the module docs):
/// several turns, so that a member never loses what it is owed because
/// another's turn was long.
pub const MAX_LAG_NS: u64 = 5 * QUANTUM_NS;
/// A waiter that has waited this long without a turn launches anyway (the
/// holder is hostile, or the table is garbage) for [`BYPASS_NS`]: the
/// device is then shared as the hardware shares it, never frozen.
pub const MAX_TURN_WAIT_NS: u64 = 5_000_000_000;
/// How long a waiter that gave up on the turn launches without it before
/// it takes turns again: a holder that hands out a turn now and then
/// cannot hold another off for more than [`MAX_TURN_WAIT_NS`] in every
/// `MAX_TURN_WAIT_NS + BYPASS_NS`.
pub const BYPASS_NS: u64 = 30_000_000_000;
/// A time this far ahead of a reader's clock is garbage; less is another
/// writer's clock read a moment later.
pub const FUTURE_SLACK_NS: u64 = 1_000_000_000;
/// A member that ran or waited this recently is active (it takes part in
/// the split of the device).
pub const ACTIVE_NS: u64 = 500_000_000;

/// The first two cache lines: the turn itself.
#[repr(C)]
pub struct TurnHeader {
    /// [`TURNS_MAGIC`].
    pub magic: AtomicU64,
    /// [`TURNS_VERSION`].
    pub version: AtomicU32,
    /// The holder: member index + 1; 0 when the turn is free.
    pub holder: AtomicU32,
    /// Moves on whenever the turn changes hands: waiters sleep on it.
    pub turn_seq: AtomicU32,
    /// The member that released the turn last (index + 1).
    pub released_by: AtomicU32,
    /// When the holder's current turn began.
    pub turn_start_ns: AtomicU64,
    /// Until when the holder's queued work keeps the device busy.
    pub busy_until_ns: AtomicU64,
    /// When the turn was last released.
    pub released_ns: AtomicU64,
    /// Members that wait (one bit each; a hint, checked against each
    /// member's `waiting_ns`).
    pub waiting_mask: AtomicU64,
    /// Turns handed over.
    pub turns_total: AtomicU64,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 8],
}

/// One tenant on the device: one cache line.
#[repr(C, align(64))]
pub struct Member {
    /// The tenant's key ([`tenant_key`]); 0 when the entry is free.
    pub key: AtomicU64,
    /// Its virtual time: measured device time × 10 000 / weight.
    pub vtime: AtomicU64,
    /// When one of its processes last renewed a wait; 0 when none waits.
    pub waiting_ns: AtomicU64,
    /// When it last launched, waited or was charged.
    pub seen_ns: AtomicU64,
    /// Device time measured for it here, ns.
    pub served_ns_total: AtomicU64,
    /// Its guaranteed share, ratio × 10 000 (0 = none).
    pub share_e4: AtomicU32,
    /// Its limit, ratio × 10 000 (0 = none).
    pub limit_e4: AtomicU32,
    /// Its priority: higher first.
    pub priority: AtomicI32,
    /// Its weight, the target [`targets`] gave it at the last hand-over.
    pub weight_e4: AtomicU32,
}

/// A device's turn table.
#[repr(C)]
pub struct TurnTable {
    pub header: TurnHeader,
    pub members: [Member; MAX_MEMBERS],
}

const _: () = assert!(std::mem::size_of::<TurnHeader>() == 128);
const _: () = assert!(std::mem::size_of::<Member>() == 64);
const _: () = assert!(std::mem::size_of::<TurnTable>() == TURNS_BYTES);

/// A tenant's key in turn tables: FNV-1a of its name, never 0.
pub fn tenant_key(tenant: &str) -> u64 {
    let hash = tenant.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    hash.max(1)
}

/// One member's part in the split of a device ([`targets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    pub share_e4: u32,
    pub limit_e4: u32,
    pub priority: i32,
}

/// Each active member's target fraction of the device, ratio × 10 000, by
/// the rules of the module docs:
/// 1. Guarantees: each member's share; members without one split what the
///    shares leave (at least nothing) equally. Shares that add up past the
///    whole device are scaled down to it.
/// 2. Each guarantee is cut to the member's limit.
/// 3. What is left goes to the highest priority first; within a priority
///    it is split in proportion to the guarantees (equally when those are
///    all zero), never past a limit, and what a limit stops goes on to the
///    others, then to the next priority.
pub fn targets(claims: &[Claim]) -> Vec<u32> {
    let whole = u64::from(WHOLE_DEVICE_RATIO_E4);
    let limit = |c: &Claim| if crate::compute::is_limiting(c.limit_e4) { u64::from(c.limit_e4) } else { whole };
    let shared: u64 = claims.iter().map(|c| u64::from(c.share_e4.min(WHOLE_DEVICE_RATIO_E4))).sum();
    let unshared = claims.iter().filter(|c| c.share_e4 == 0).count() as u64;
    let equal = whole.saturating_sub(shared).checked_div(unshared).unwrap_or(0);
    let scale = |share: u64| if shared > whole { share * whole / shared } else { share };
    let guarantee: Vec<u64> = claims
        .iter()
        .map(|c| if c.share_e4 == 0 { equal } else { scale(u64::from(c.share_e4.min(WHOLE_DEVICE_RATIO_E4))) })
        .collect();
    let mut target: Vec<u64> = claims.iter().zip(&guarantee).map(|(c, g)| (*g).min(limit(c))).collect();
    let mut spare = whole.saturating_sub(target.iter().sum());
    let mut priorities: Vec<i32> = claims.iter().map(|c| c.priority).collect();
    priorities.sort_unstable_by(|a, b| b.cmp(a));
    priorities.dedup();
    for priority in priorities {
        // Water-fill this priority's members up to their limits.
        loop {
            let open: Vec<usize> =
                (0..claims.len()).filter(|&i| claims[i].priority == priority && target[i] < limit(&claims[i])).collect();
            if open.is_empty() || spare == 0 {
                break;
            }
            let weight_of = |i: usize| guarantee[i].max(1);
            let total_weight: u64 = open.iter().map(|&i| weight_of(i)).sum();
            let mut given = 0;
            for &i in &open {
                let portion = (spare * weight_of(i) / total_weight).max(1);
                let room = limit(&claims[i]) - target[i];
                let add = portion.min(room).min(spare - given);
                target[i] += add;
                given += add;
            }
            spare -= given;
            if given == 0 {
                break;
            }
        }
    }
    target.into_iter().map(|t| t.min(whole) as u32).collect()
}

/// What [`TurnTable::enter`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enter {
    /// The caller's tenant holds the turn: launch.
    Go,
    /// Wait on `turn_seq` (still at `seq`) for at most `timeout_ns`, then ask again.
    Wait { seq: u32, timeout_ns: u64 },
}

/// A member as the monitor shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberView {
    pub key: u64,
    pub claim: Claim,
    pub weight_e4: u32,
    pub served_ns_total: u64,
    pub active: bool,
    pub holds: bool,
}

fn bit(m: usize) -> u64 {
    1u64 << (m % 64)
}

impl TurnTable {
    fn member(&self, m: usize) -> Option<&Member> {
        self.members.get(m)
    }

    /// The entry of tenant `key`, claimed if it has none: `None` when the
    /// table is full.
    pub fn join(&self, key: u64, claim: Claim, now_ns: u64) -> Option<usize> {
        let found = self.members.iter().position(|m| m.key.load(Ordering::Acquire) == key);
        let index = found.or_else(|| {
            // Free entries first, then those of members gone for long.
            let free = self.members.iter().position(|m| {
                m.key.compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire).is_ok()
            });
            free.or_else(|| {
                self.members.iter().position(|m| {
                    let old = m.key.load(Ordering::Acquire);
                    let gone = now_ns.saturating_sub(m.seen_ns.load(Ordering::Relaxed)) > 60 * MAX_TURN_NS;
                    gone && m.key.compare_exchange(old, key, Ordering::AcqRel, Ordering::Acquire).is_ok() && {
                        m.vtime.store(0, Ordering::Relaxed);
                        m.served_ns_total.store(0, Ordering::Relaxed);
                        true
                    }
                })
            })
        })?;
        self.set_claim(index, claim);
        let member = self.member(index)?;
        if member.weight_e4.load(Ordering::Relaxed) == 0 {
            member.weight_e4.store(claim.share_e4.clamp(100, WHOLE_DEVICE_RATIO_E4), Ordering::Relaxed);
        }
        Some(index)
    }

    /// Publishes the member's share, limit and priority (from its policy).
    pub fn set_claim(&self, m: usize, claim: Claim) {
        if let Some(member) = self.member(m) {
            member.share_e4.store(claim.share_e4, Ordering::Relaxed);
            member.limit_e4.store(claim.limit_e4, Ordering::Relaxed);
            member.priority.store(claim.priority, Ordering::Relaxed);
        }
    }

    fn claim_of(member: &Member) -> Claim {
        Claim {
            share_e4: member.share_e4.load(Ordering::Relaxed),
            limit_e4: member.limit_e4.load(Ordering::Relaxed),
            priority: member.priority.load(Ordering::Relaxed),
        }
    }

    fn is_waiting(member: &Member, now_ns: u64) -> bool {
        let since = member.waiting_ns.load(Ordering::Acquire);
        member.key.load(Ordering::Relaxed) != 0
            && since != 0
            && since <= now_ns.saturating_add(FUTURE_SLACK_NS)
            && now_ns.saturating_sub(since) < WAIT_FRESH_NS
    }

    fn is_active(member: &Member, now_ns: u64) -> bool {
        let seen = member.seen_ns.load(Ordering::Relaxed);
        member.key.load(Ordering::Relaxed) != 0 && seen <= now_ns.saturating_add(FUTURE_SLACK_NS) && now_ns.saturating_sub(seen) < ACTIVE_NS
    }

    /// The waiter that should take a free turn: the lowest virtual time,
    /// then the highest priority.
    pub fn best_waiter(&self, now_ns: u64) -> Option<usize> {
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| Self::is_waiting(m, now_ns))
            .min_by_key(|(i, m)| (m.vtime.load(Ordering::Relaxed), std::cmp::Reverse(m.priority.load(Ordering::Relaxed)), *i))
            .map(|(i, _)| i)
    }

    /// Lifts member `m`'s virtual time to within [`MAX_LAG_NS`] (at the
    /// smallest active weight) of the least of the other active members'.
    fn bound_lag(&self, m: usize, now_ns: u64) {
        let Some(member) = self.member(m) else { return };
        let active = || self.members.iter().enumerate().filter(|(i, other)| *i != m && Self::is_active(other, now_ns));
        let least = active().map(|(_, other)| other.vtime.load(Ordering::Relaxed)).min();
        let weight = active()
            .map(|(_, other)| other.weight_e4.load(Ordering::Relaxed))
            .chain([member.weight_e4.load(Ordering::Relaxed)])
            .min()
            .unwrap_or(WHOLE_DEVICE_RATIO_E4)
            .clamp(1, WHOLE_DEVICE_RATIO_E4);
        let lag = MAX_LAG_NS.saturating_mul(u64::from(WHOLE_DEVICE_RATIO_E4)) / u64::from(weight);
        if let Some(least) = least {
            let _ = member.vtime.fetch_max(least.saturating_sub(lag), Ordering::AcqRel);
        }
    }

    /// Whether the holder's turn has lapsed (see the module docs).
    fn lapsed(&self, now_ns: u64) -> bool {
        let h = &self.header;
        let start = h.turn_start_ns.load(Ordering::Acquire);
        let busy_until = h.busy_until_ns.load(Ordering::Acquire);
        if start > now_ns.saturating_add(FUTURE_SLACK_NS) || busy_until > start.max(now_ns).saturating_add(MAX_TURN_NS) {
            return true;
        }
        let held_until = busy_until.max(start).min(start.saturating_add(MAX_TURN_NS));
        now_ns > held_until.saturating_add(IDLE_GRACE_NS)
    }

    /// Renews member `m`'s wait; lifts its virtual time if it was idle.
    fn mark_waiting(&self, m: usize, now_ns: u64) {
        let Some(member) = self.member(m) else { return };
        if member.waiting_ns.swap(now_ns, Ordering::AcqRel) == 0 {
            let seen = member.seen_ns.load(Ordering::Relaxed);
            if seen > now_ns.saturating_add(FUTURE_SLACK_NS) || now_ns.saturating_sub(seen) >= ACTIVE_NS {
                self.lift(m, now_ns);
            }
        }
        member.seen_ns.store(now_ns, Ordering::Relaxed);
        if self.header.waiting_mask.load(Ordering::Relaxed) & bit(m) == 0 {
            self.header.waiting_mask.fetch_or(bit(m), Ordering::AcqRel);
        }
    }

    /// Lifts member `m`'s virtual time to the least of the other active
    /// members': coming back from idle banks no credit.
    fn lift(&self, m: usize, now_ns: u64) {
        let least = self
            .members
            .iter()
            .enumerate()
            .filter(|(i, member)| *i != m && Self::is_active(member, now_ns))
            .map(|(_, member)| member.vtime.load(Ordering::Relaxed))
            .min();
        if let (Some(least), Some(member)) = (least, self.member(m)) {
            let _ = member.vtime.fetch_max(least, Ordering::AcqRel);
        }
    }

    /// Asks for the turn for member `m` (see [`Enter`]).
    pub fn enter(&self, m: usize, now_ns: u64) -> Enter {
        let h = &self.header;
        let me = m as u32 + 1;
        let seq = h.turn_seq.load(Ordering::Acquire);
        let holder = h.holder.load(Ordering::Acquire);
        if holder == me {
            return Enter::Go;
        }
        self.mark_waiting(m, now_ns);
        let free = holder == 0 || holder as usize > MAX_MEMBERS || self.lapsed(now_ns);
        if !free {
            let busy_until = h.busy_until_ns.load(Ordering::Relaxed);
            let timeout_ns = busy_until.saturating_add(IDLE_GRACE_NS).saturating_sub(now_ns).clamp(100_000, WAIT_RENEW_NS);
            return Enter::Wait { seq, timeout_ns };
        }
        let chosen = self.best_waiter(now_ns);
        let released_ns = h.released_ns.load(Ordering::Relaxed);
        let grace_ns = if h.released_by.load(Ordering::Relaxed) == me { 3 * HANDOFF_GRACE_NS } else { HANDOFF_GRACE_NS };
        let handoff_over = released_ns > now_ns.saturating_add(FUTURE_SLACK_NS) || now_ns.saturating_sub(released_ns) > grace_ns;
        if chosen != Some(m) && !handoff_over && holder == 0 {
            // Looked at again soon: the chosen one may take the turn and be
            // done with it well within the grace.
            let timeout_ns = released_ns.saturating_add(grace_ns).saturating_sub(now_ns).clamp(100_000, IDLE_GRACE_NS);
            return Enter::Wait { seq, timeout_ns };
        }
        if h.holder.compare_exchange(holder, me, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Enter::Wait { seq: h.turn_seq.load(Ordering::Acquire), timeout_ns: 100_000 };
        }
        h.turn_start_ns.store(now_ns, Ordering::Release);
        h.busy_until_ns.store(now_ns, Ordering::Release);
        if let Some(member) = self.member(m) {
            member.waiting_ns.store(0, Ordering::Release);
        }
        self.bound_lag(m, now_ns);
        h.waiting_mask.fetch_and(!bit(m), Ordering::AcqRel);
        h.turns_total.fetch_add(1, Ordering::Relaxed);
        self.update_weights(now_ns);
        h.turn_seq.fetch_add(1, Ordering::AcqRel);
        Enter::Go
    }

    /// Whether member `m` still holds the turn.
    pub fn holds(&self, m: usize) -> bool {
        self.header.holder.load(Ordering::Acquire) == m as u32 + 1
    }

    /// The holder says its queued work keeps the device busy until
    /// `until_ns` (called at each launch).
    pub fn hold(&self, m: usize, until_ns: u64, now_ns: u64) {
        let h = &self.header;
        if h.busy_until_ns.load(Ordering::Relaxed) < until_ns {
            h.busy_until_ns.fetch_max(until_ns, Ordering::AcqRel);
        }
        if let Some(member) = self.member(m) {
            if now_ns.saturating_sub(member.seen_ns.load(Ordering::Relaxed)) > 1_000_000 {
                member.seen_ns.store(now_ns, Ordering::Relaxed);
            }
        }
    }

    /// Whether the holder `m` should end its turn now: another member waits
    /// and the quantum is over, or one of higher priority waits that is
    /// owed time (its virtual time is not ahead of the holder's). With
    /// nobody waiting past the quantum, the holder starts a new turn of its
    /// own (so that its turn never lapses while it works).
    pub fn should_yield(&self, m: usize, now_ns: u64) -> bool {
        let h = &self.header;
        let started = h.turn_start_ns.load(Ordering::Relaxed);
        let over = started > now_ns.saturating_add(FUTURE_SLACK_NS) || now_ns.saturating_sub(started) >= QUANTUM_NS;
        let others = h.waiting_mask.load(Ordering::Relaxed) & !bit(m);
        if others == 0 {
            if over {
                h.turn_start_ns.store(now_ns, Ordering::Release);
            }
            return false;
        }
        let mine = self.member(m).map_or(i32::MIN, |member| member.priority.load(Ordering::Relaxed));
        let my_vtime = self.member(m).map_or(0, |member| member.vtime.load(Ordering::Relaxed));
        let (mut waits, mut higher) = (false, false);
        for (i, member) in self.members.iter().enumerate().filter(|(i, _)| others & bit(*i) != 0 && *i != m) {
            if Self::is_waiting(member, now_ns) {
                waits = true;
                higher |= member.priority.load(Ordering::Relaxed) > mine && member.vtime.load(Ordering::Relaxed) <= my_vtime;
            } else if i < 64 && member.waiting_ns.load(Ordering::Relaxed) == 0 {
                h.waiting_mask.fetch_and(!bit(i), Ordering::AcqRel);
            }
        }
        if !waits && over {
            h.turn_start_ns.store(now_ns, Ordering::Release);
        }
        higher || (waits && over)
    }

    /// Whether a member of higher priority than `m` was active lately: then
    /// `m` keeps little work in flight, so that a burst of theirs waits for
    /// little of `m`'s.
    pub fn outranked(&self, m: usize, now_ns: u64) -> bool {
        let mine = self.member(m).map_or(i32::MIN, |member| member.priority.load(Ordering::Relaxed));
        self.members
            .iter()
            .enumerate()
            .any(|(i, member)| i != m && Self::is_active(member, now_ns) && member.priority.load(Ordering::Relaxed) > mine)
    }

    /// Member `m` gives the turn up (its work in flight has completed).
    /// With `wants_more` (it has work waiting to launch) it counts as a
    /// waiter from that moment, so that the next turn is chosen with it.
    pub fn release(&self, m: usize, now_ns: u64, wants_more: bool) {
        let h = &self.header;
        if wants_more {
            self.mark_waiting(m, now_ns);
        }
        if h.holder.compare_exchange(m as u32 + 1, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            h.released_by.store(m as u32 + 1, Ordering::Relaxed);
            h.released_ns.store(now_ns, Ordering::Release);
            h.turn_seq.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Member `m` stops waiting (it gave up, or its process leaves).
    pub fn stop_waiting(&self, m: usize) {
        if let Some(member) = self.member(m) {
            member.waiting_ns.store(0, Ordering::Release);
        }
    }

    /// Charges `busy_ns` of measured device time to member `m`.
    pub fn charge(&self, m: usize, busy_ns: u64, now_ns: u64) {
        let Some(member) = self.member(m) else { return };
        let weight = u64::from(member.weight_e4.load(Ordering::Relaxed).clamp(1, WHOLE_DEVICE_RATIO_E4));
        let advance = busy_ns.min(crate::compute::MAX_CHARGE_NS).saturating_mul(u64::from(WHOLE_DEVICE_RATIO_E4)) / weight;
        let _ = member.vtime.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |v| Some(v.saturating_add(advance)));
        member.served_ns_total.fetch_add(busy_ns, Ordering::Relaxed);
        member.seen_ns.store(now_ns, Ordering::Relaxed);
    }

    /// Recomputes every active member's weight ([`targets`]); inactive
    /// members keep theirs for when they come back.
    pub fn update_weights(&self, now_ns: u64) {
        let active: Vec<usize> = (0..MAX_MEMBERS).filter(|&i| self.members.get(i).is_some_and(|m| Self::is_active(m, now_ns))).collect();
        let claims: Vec<Claim> = active.iter().filter_map(|&i| self.member(i)).map(Self::claim_of).collect();
        for (i, target) in active.iter().zip(targets(&claims)) {
            if let Some(member) = self.member(*i) {
                member.weight_e4.store(target.max(1), Ordering::Relaxed);
            }
        }
    }

    /// Every member, for the monitor.
    pub fn members_view(&self, now_ns: u64) -> Vec<MemberView> {
        let holder = self.header.holder.load(Ordering::Acquire) as usize;
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.key.load(Ordering::Relaxed) != 0)
            .map(|(i, m)| MemberView {
                key: m.key.load(Ordering::Relaxed),
                claim: Self::claim_of(m),
                weight_e4: m.weight_e4.load(Ordering::Relaxed),
                served_ns_total: m.served_ns_total.load(Ordering::Relaxed),
                active: Self::is_active(m, now_ns) || Self::is_waiting(m, now_ns),
                holds: holder == i + 1,
            })
            .collect()
    }
}

/// Sleeps on the table's `turn_seq` while it reads `seq`, for at most
/// `timeout_ns` (a shared futex: the table is mapped by several processes).
pub fn wait_for_turn(table: &TurnTable, seq: u32, timeout_ns: u64) {
    let ts = libc::timespec { tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t, tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 of a live shared mapping,
    // with a valid timespec; the kernel only reads both.
    unsafe {
        libc::syscall(libc::SYS_futex, table.header.turn_seq.as_ptr(), libc::FUTEX_WAIT, seq, &ts as *const libc::timespec);
    }
}

/// Wakes every process waiting on the table's `turn_seq`.
pub fn wake_waiters(table: &TurnTable) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 of a live shared mapping.
    unsafe {
        libc::syscall(libc::SYS_futex, table.header.turn_seq.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// A mapped turn table, backed by a sealed memfd.
pub struct Turns {
    fd: OwnedFd,
    table: std::ptr::NonNull<TurnTable>,
}

// SAFETY: the table is only reached through atomics.
unsafe impl Send for Turns {}
// SAFETY: as above.
unsafe impl Sync for Turns {}

const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

impl Turns {
    /// A new, initialised table in a memfd that can never change size (the
    /// monitor's, one per device).
    pub fn create_sealed(name: &str) -> io::Result<Turns> {
        let cname = std::ffi::CString::new(format!("gpuslice-turns-{name}")).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a valid NUL-terminated name; flags are constants.
        let raw = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: valid descriptor, plain integer arguments.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), TURNS_BYTES as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: valid descriptor; F_ADD_SEALS takes an int.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let turns = Turns::map(fd)?;
        turns.table().header.version.store(TURNS_VERSION, Ordering::Relaxed);
        turns.table().header.magic.store(TURNS_MAGIC, Ordering::Release);
        Ok(turns)
    }

    /// Maps a table handed over by the monitor: refused unless it is a
    /// memfd sealed against shrinking, of the right size and version.
    pub fn from_fd(fd: OwnedFd) -> Result<Turns, String> {
        // SAFETY: valid descriptor; F_GET_SEALS takes no argument.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err("the turn table is not sealed against shrinking".into());
        }
        // SAFETY: an all-zero stat is a valid out-buffer for fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid descriptor and out-pointer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || st.st_size != TURNS_BYTES as libc::off_t {
            return Err(format!("the turn table is {} bytes, not {TURNS_BYTES}", st.st_size));
        }
        let turns = Turns::map(fd).map_err(|e| format!("cannot map the turn table: {e}"))?;
        let header = &turns.table().header;
        if header.magic.load(Ordering::Acquire) != TURNS_MAGIC || header.version.load(Ordering::Relaxed) != TURNS_VERSION {
            return Err("the turn table has another layout".into());
        }
        Ok(turns)
    }

    fn map(fd: OwnedFd) -> io::Result<Turns> {
        // SAFETY: a shared mapping of the descriptor's first TURNS_BYTES;
        // the kernel checks the descriptor and the size.
        let ptr = unsafe {
            libc::mmap(std::ptr::null_mut(), TURNS_BYTES, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let table = std::ptr::NonNull::new(ptr.cast::<TurnTable>()).ok_or_else(|| io::Error::from(io::ErrorKind::Other))?;
        Ok(Turns { fd, table })
    }

    pub fn table(&self) -> &TurnTable {
        // SAFETY: a live, page-aligned mapping of TURNS_BYTES that cannot
        // shrink (sealed), whose every bit pattern is a valid TurnTable
        // (atomics of plain integers).
        unsafe { self.table.as_ref() }
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl std::fmt::Debug for Turns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turns").field("fd", &self.fd.as_raw_fd()).finish()
    }
}

impl Drop for Turns {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.table.as_ptr().cast(), TURNS_BYTES) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(share: u32, limit: u32, priority: i32) -> Claim {
        Claim { share_e4: share * 100, limit_e4: limit * 100, priority }
    }

    fn percents(claims: &[Claim]) -> Vec<u32> {
        targets(claims).into_iter().map(|t| (t + 50) / 100).collect()
    }

    #[test]
    fn targets_give_shares_then_spare_time_by_priority_within_limits() {
        // Shares that fill the device are the targets.
        assert_eq!(percents(&[claim(25, 0, 0), claim(75, 0, 0)]), vec![25, 75]);
        assert_eq!(percents(&[claim(10, 0, 0), claim(20, 0, 0), claim(30, 0, 0), claim(40, 0, 0)]), vec![10, 20, 30, 40]);
        // A lone tenant with a share of 30 gets the device, or its limit.
        assert_eq!(percents(&[claim(30, 0, 0)]), vec![100]);
        assert_eq!(percents(&[claim(30, 30, 0)]), vec![30]);
        // No shares: an equal split.
        assert_eq!(percents(&[claim(0, 0, 0), claim(0, 0, 0)]), vec![50, 50]);
        // Tenants without a share split what shares leave.
        assert_eq!(percents(&[claim(60, 0, 0), claim(0, 0, 0), claim(0, 0, 0)]), vec![60, 20, 20]);
        // Spare time goes to the higher priority first...
        assert_eq!(percents(&[claim(20, 0, 1), claim(30, 0, 0)]), vec![70, 30]);
        // ...up to its limit, then to the next.
        assert_eq!(percents(&[claim(20, 40, 1), claim(30, 0, 0)]), vec![40, 60]);
        // Within a priority, spare time is split by share.
        assert_eq!(percents(&[claim(10, 0, 0), claim(30, 0, 0)]), vec![25, 75]);
        // Shares past the whole device are scaled down to it.
        assert_eq!(percents(&[claim(80, 0, 0), claim(80, 0, 0)]), vec![50, 50]);
        // Every limit holds, even if the device then idles.
        assert_eq!(percents(&[claim(0, 20, 0), claim(0, 30, 0)]), vec![20, 30]);
        assert!(targets(&[]).is_empty());
    }

    fn table() -> Box<TurnTable> {
        // SAFETY: every field is an atomic integer, for which zero is valid.
        unsafe { Box::new(std::mem::zeroed()) }
    }

    #[test]
    fn a_lone_member_takes_the_turn_and_keeps_it() {
        let t = table();
        let a = t.join(tenant_key("a"), claim(30, 0, 0), 1_000).unwrap();
        assert_eq!(t.enter(a, 1_000), Enter::Go);
        assert!(t.holds(a));
        assert!(!t.should_yield(a, 1_000 + 10 * QUANTUM_NS), "nobody waits");
        assert_eq!(t.enter(a, 2_000), Enter::Go);
    }

    #[test]
    fn a_waiter_gets_the_turn_after_the_quantum_and_the_least_served_goes_next() {
        let t = table();
        let a = t.join(tenant_key("a"), claim(50, 0, 0), 0).unwrap();
        let b = t.join(tenant_key("b"), claim(50, 0, 0), 0).unwrap();
        let now = 1_000_000_000;
        assert_eq!(t.enter(a, now), Enter::Go);
        t.hold(a, now + 5_000_000, now);
        assert!(matches!(t.enter(b, now + 1), Enter::Wait { .. }));
        assert!(!t.should_yield(a, now + QUANTUM_NS / 2), "the quantum is not over");
        assert!(t.should_yield(a, now + QUANTUM_NS), "b waits and the quantum is over");
        t.charge(a, QUANTUM_NS, now + QUANTUM_NS);
        t.release(a, now + QUANTUM_NS, true);
        // a asks again at once, but b has the lower virtual time.
        assert!(matches!(t.enter(a, now + QUANTUM_NS + 1), Enter::Wait { .. }));
        assert_eq!(t.enter(b, now + QUANTUM_NS + 2), Enter::Go);
    }

    #[test]
    fn a_higher_priority_waiter_ends_the_turn_early_and_goes_first() {
        let t = table();
        let low = t.join(tenant_key("low"), claim(0, 0, 0), 0).unwrap();
        let high = t.join(tenant_key("high"), claim(0, 0, 1), 0).unwrap();
        let now = 1_000_000_000;
        assert_eq!(t.enter(low, now), Enter::Go);
        t.hold(low, now + 2_000_000, now);
        assert!(matches!(t.enter(high, now + 1_000), Enter::Wait { .. }));
        assert!(t.should_yield(low, now + 2_000), "a higher priority waits");
        assert!(t.outranked(low, now + 2_000));
        t.release(low, now + 3_000, true);
        assert!(matches!(t.enter(low, now + 3_500), Enter::Wait { .. }), "high goes first");
        assert_eq!(t.enter(high, now + 4_000), Enter::Go);
    }

    #[test]
    fn a_lapsed_or_garbage_turn_is_taken_over() {
        let t = table();
        let a = t.join(tenant_key("a"), claim(0, 0, 0), 0).unwrap();
        let b = t.join(tenant_key("b"), claim(0, 0, 0), 0).unwrap();
        let now = 10_000_000_000;
        assert_eq!(t.enter(a, now), Enter::Go);
        t.hold(a, now + 3_000_000, now);
        // Stopped or killed: its queued work ends, then the grace.
        assert!(matches!(t.enter(b, now + 4_000_000), Enter::Wait { .. }));
        assert_eq!(t.enter(b, now + 3_000_000 + IDLE_GRACE_NS + 1), Enter::Go);
        // A turn that began a moment "after" the reader's clock (another
        // process read its clock later) has not lapsed.
        t.header.turn_start_ns.store(now + 3_000_000 + IDLE_GRACE_NS + 1_000, Ordering::Relaxed);
        t.header.busy_until_ns.store(now + 3_000_000 + IDLE_GRACE_NS + 1_000, Ordering::Relaxed);
        assert!(!t.lapsed(now + 3_000_000 + IDLE_GRACE_NS + 2));
        // Garbage: a holder that is no member, a busy time far ahead.
        t.header.holder.store(999, Ordering::Relaxed);
        assert_eq!(t.enter(a, now + 10_000_000), Enter::Go);
        t.header.busy_until_ns.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(t.enter(b, now + 11_000_000), Enter::Go);
        t.header.turn_start_ns.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(t.enter(a, now + 12_000_000), Enter::Go);
    }

    #[test]
    fn a_chosen_waiter_that_never_comes_loses_the_turn_after_the_grace() {
        let t = table();
        let a = t.join(tenant_key("a"), claim(0, 0, 1), 0).unwrap();
        let b = t.join(tenant_key("b"), claim(0, 0, 0), 0).unwrap();
        let now = 10_000_000_000;
        assert!(matches!(t.enter(a, now), Enter::Go));
        t.release(a, now, true); // a still waits, then is stopped
        assert!(matches!(t.enter(b, now + 2), Enter::Wait { .. }), "a is chosen");
        assert_eq!(t.enter(b, now + HANDOFF_GRACE_NS + 3), Enter::Go);
    }

    #[test]
    fn the_member_that_released_waits_longer_for_a_slow_chosen_waiter() {
        let t = table();
        let a = t.join(tenant_key("a"), claim(50, 0, 0), 0).unwrap();
        let b = t.join(tenant_key("b"), claim(50, 0, 0), 0).unwrap();
        let now = 10_000_000_000;
        assert_eq!(t.enter(a, now), Enter::Go);
        assert!(matches!(t.enter(b, now + 1), Enter::Wait { .. }));
        t.charge(a, QUANTUM_NS, now + 2);
        t.release(a, now + 2, true);
        // b is chosen (less served) and slow: a waits past one grace...
        assert!(matches!(t.enter(a, now + HANDOFF_GRACE_NS + 3), Enter::Wait { .. }));
        // ...and takes the turn back after three.
        assert_eq!(t.enter(a, now + 3 * HANDOFF_GRACE_NS + 3), Enter::Go);
    }

    #[test]
    fn idling_banks_no_credit() {
        let t = table();
        let a = t.join(tenant_key("a"), claim(50, 0, 0), 0).unwrap();
        let b = t.join(tenant_key("b"), claim(50, 0, 0), 0).unwrap();
        let now = 10_000_000_000;
        assert_eq!(t.enter(a, now), Enter::Go);
        t.charge(a, 5_000_000_000, now + 5_000_000_000);
        let vtime_a = t.members[a].vtime.load(Ordering::Relaxed);
        // b comes after a long idle spell: lifted to a's virtual time.
        let _ = t.enter(b, now + 5_000_000_001);
        assert_eq!(t.members[b].vtime.load(Ordering::Relaxed), vtime_a);
    }

    #[test]
    fn charges_advance_virtual_time_by_weight() {
        let t = table();
        let a = t.join(tenant_key("a"), claim(25, 0, 0), 0).unwrap();
        let b = t.join(tenant_key("b"), claim(75, 0, 0), 0).unwrap();
        t.charge(a, 1, 1);
        t.charge(b, 1, 1);
        t.update_weights(2);
        assert_eq!((t.members[a].weight_e4.load(Ordering::Relaxed), t.members[b].weight_e4.load(Ordering::Relaxed)), (2_500, 7_500));
        let (va, vb) = (t.members[a].vtime.load(Ordering::Relaxed), t.members[b].vtime.load(Ordering::Relaxed));
        t.charge(a, 25_000_000, 3);
        t.charge(b, 75_000_000, 3);
        let da = t.members[a].vtime.load(Ordering::Relaxed) - va;
        let db = t.members[b].vtime.load(Ordering::Relaxed) - vb;
        assert_eq!(da, db, "time in proportion to weight is equal virtual time");
    }

    /// Members that always wait, each turn a quantum long: the device time
    /// each gets, by member.
    fn simulate(t: &TurnTable, members: &[usize], turns: usize) -> Vec<u64> {
        let mut now = 10_000_000_000;
        let mut served = vec![0u64; members.len()];
        for _ in 0..turns {
            for &m in members {
                let _ = t.enter(m, now);
            }
            let holder = members.iter().position(|&m| t.holds(m)).expect("someone holds the turn");
            now += QUANTUM_NS;
            t.charge(members[holder], QUANTUM_NS, now);
            served[holder] += QUANTUM_NS;
            t.release(members[holder], now, true);
            now += HANDOFF_GRACE_NS / 4;
        }
        served
    }

    #[test]
    fn saturating_members_get_their_targets_and_priority_takes_no_guarantee() {
        let t = table();
        let a = t.join(tenant_key("a"), claim(25, 0, 0), 0).unwrap();
        let b = t.join(tenant_key("b"), claim(75, 0, 0), 0).unwrap();
        let within_a_turn = |served: &[u64], want: (u64, u64)| {
            let got = (served[0] / QUANTUM_NS, served[1] / QUANTUM_NS);
            assert!(got.0.abs_diff(want.0) <= 1 && got.1.abs_diff(want.1) <= 1, "turns {got:?}, want {want:?}");
        };
        within_a_turn(&simulate(&t, &[a, b], 400), (100, 300));
        // A higher priority with no share against a share of 50: the
        // guarantees split the device, priority takes nothing from it.
        let t = table();
        let high = t.join(tenant_key("high"), claim(0, 0, 5), 0).unwrap();
        let low = t.join(tenant_key("low"), claim(50, 0, 0), 0).unwrap();
        within_a_turn(&simulate(&t, &[high, low], 400), (200, 200));
        // Spare time (shares below the whole device) goes to the higher priority.
        let t = table();
        let high = t.join(tenant_key("high"), claim(20, 0, 1), 0).unwrap();
        let low = t.join(tenant_key("low"), claim(30, 0, 0), 0).unwrap();
        within_a_turn(&simulate(&t, &[high, low], 400), (280, 120));
    }

    #[test]
    fn a_higher_priority_waiter_ahead_in_virtual_time_does_not_preempt() {
        let t = table();
        let low = t.join(tenant_key("low"), claim(50, 0, 0), 0).unwrap();
        let high = t.join(tenant_key("high"), claim(50, 0, 1), 0).unwrap();
        let now = 10_000_000_000;
        t.charge(high, 1_000_000_000, now);
        t.charge(low, 1, now);
        assert_eq!(t.enter(low, now), Enter::Go);
        assert!(matches!(t.enter(high, now + 1), Enter::Wait { .. }));
        assert!(!t.should_yield(low, now + 2), "high has had more than its share");
        assert!(t.should_yield(low, now + QUANTUM_NS), "but the quantum still ends");
    }

    #[test]
    fn a_quiet_member_banks_little_credit() {
        let t = table();
        let quiet = t.join(tenant_key("quiet"), claim(50, 0, 0), 0).unwrap();
        let busy = t.join(tenant_key("busy"), claim(50, 0, 0), 0).unwrap();
        let now = 10_000_000_000;
        t.charge(quiet, 1, now);
        t.charge(busy, 100 * QUANTUM_NS, now);
        t.update_weights(now);
        assert_eq!(t.enter(quiet, now + 1), Enter::Go);
        let behind_ns = (t.members[busy].vtime.load(Ordering::Relaxed) - t.members[quiet].vtime.load(Ordering::Relaxed)) * 5_000 / 10_000;
        assert_eq!(behind_ns, MAX_LAG_NS, "owed at most the lag, at its weight");
    }

    #[test]
    fn a_sealed_table_maps_and_an_unsealed_one_is_refused() {
        let turns = Turns::create_sealed("test").unwrap();
        // SAFETY: dup of a valid descriptor.
        let copy = unsafe { OwnedFd::from_raw_fd(libc::dup(turns.fd())) };
        let other = Turns::from_fd(copy).unwrap();
        other.table().header.turns_total.store(7, Ordering::Relaxed);
        assert_eq!(turns.table().header.turns_total.load(Ordering::Relaxed), 7, "one table");
        let file = tempfile_fd();
        assert!(Turns::from_fd(file).unwrap_err().contains("sealed"));
    }

    fn tempfile_fd() -> OwnedFd {
        let name = std::ffi::CString::new("unsealed").unwrap();
        // SAFETY: a valid name; a new descriptor that nothing else owns.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        // SAFETY: as above.
        unsafe {
            libc::ftruncate(raw, TURNS_BYTES as libc::off_t);
            OwnedFd::from_raw_fd(raw)
        }
    }
}
