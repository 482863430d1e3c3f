//! The device scheduler: one context runs at a time, round-robin between the
//! contexts that have pending work, across every process sharing the state
//! file.
//!
//! A ticket lock in the shared mapping gives exactly that order: a context
//! with work takes a ticket and waits (futex on `serve_seq`, shared, with a
//! timeout) until it is served; it runs for up to one slice, then, if another
//! ticket is waiting, passes the device on and takes a new ticket at the back.
//! Each ticket's holder (process record + generation) is published in a ring,
//! so a waiter that times out can tell a holder that died (its record is no
//! longer alive: the OFD lock is gone) and skip it: a dead owner never wedges
//! the device. Nor does a stopped one (SIGSTOP): on a real GPU the work a
//! stopped process queued runs on and the others' work after it, so a
//! waiter skips a holder whose process is stopped once it has held the
//! device past [`STOPPED_AFTER_NS`]; when it continues, its worker finds
//! the device served to another and queues again.

use crate::state::{SharedState, TICKET_RING};
use crate::sys;
use std::sync::atomic::Ordering::*;
use std::time::Duration;

/// How long a waiter sleeps before checking the holder's liveness.
const LIVENESS_POLL: Duration = Duration::from_millis(20);
/// A holder whose process is stopped is skipped once it has held the device
/// this long.
pub const STOPPED_AFTER_NS: u64 = 50_000_000;
/// A ticket taken but never published is treated as abandoned after this long.
const UNPUBLISHED_GRACE_NS: u64 = 1_000_000_000;
/// A holder's work reaches at most a batch (half a millisecond) past the
/// real clock; a published mark further ahead than this is not from this
/// boot.
const FREE_AT_SLACK_NS: u64 = 1_000_000_000;

pub struct Scheduler<'a> {
    pub state: &'a SharedState,
    pub device: usize,
    pub own_slot: usize,
}

impl Scheduler<'_> {
    /// Blocks until this caller owns the device; returns its ticket.
    pub fn acquire(&self) -> u64 {
        let d = self.state.device(self.device);
        let generation = self.state.proc(self.own_slot).generation.load(Acquire);
        'retake: loop {
            let t = d.next_ticket.fetch_add(1, AcqRel);
            let h = &d.tickets[(t % TICKET_RING as u64) as usize];
            h.proc_slot.store(self.own_slot as u32 + 1, Relaxed);
            h.proc_generation.store(generation, Relaxed);
            h.ticket.store(t, Release);
            let mut unpublished_since: Option<(u64, u64)> = None;
            let mut serving_since: Option<(u64, u64)> = None;
            loop {
                let seq = d.serve_seq.load(Acquire);
                let serving = d.now_serving.load(Acquire);
                if serving == t {
                    return t;
                }
                if serving > t {
                    // Skipped as abandoned (we stalled for over a second
                    // between taking and publishing): queue again.
                    continue 'retake;
                }
                d.sleepers.fetch_add(1, AcqRel);
                if d.serve_seq.load(Acquire) == seq {
                    sys::futex_wait(&d.serve_seq, seq, LIVENESS_POLL);
                }
                d.sleepers.fetch_sub(1, AcqRel);
                if d.now_serving.load(Acquire) == serving {
                    self.skip_if_dead(serving, &mut unpublished_since);
                    self.skip_if_stopped(serving, &mut serving_since);
                }
            }
        }
    }

    fn skip_if_dead(&self, serving: u64, unpublished_since: &mut Option<(u64, u64)>) {
        let d = self.state.device(self.device);
        let h = &d.tickets[(serving % TICKET_RING as u64) as usize];
        let dead = if h.ticket.load(Acquire) != serving {
            let now = sys::now_ns();
            match *unpublished_since {
                Some((t, since)) if t == serving => now.saturating_sub(since) > UNPUBLISHED_GRACE_NS,
                _ => {
                    *unpublished_since = Some((serving, now));
                    false
                }
            }
        } else {
            let slot = h.proc_slot.load(Acquire) as usize;
            let generation = h.proc_generation.load(Acquire);
            slot == 0 || {
                let slot = slot - 1;
                self.state.proc(slot).generation.load(Acquire) != generation || !self.state.proc_alive(slot, Some(self.own_slot))
            }
        };
        if dead && d.now_serving.compare_exchange(serving, serving + 1, AcqRel, Relaxed).is_ok() {
            d.serve_seq.fetch_add(1, AcqRel);
            sys::futex_wake_all(&d.serve_seq);
        }
    }

    /// Skips the holder of `serving` when its process is stopped and it has
    /// held the device for [`STOPPED_AFTER_NS`] as this waiter saw it.
    fn skip_if_stopped(&self, serving: u64, serving_since: &mut Option<(u64, u64)>) {
        let now = sys::now_ns();
        let since = match *serving_since {
            Some((t, since)) if t == serving => since,
            _ => {
                *serving_since = Some((serving, now));
                return;
            }
        };
        if now.saturating_sub(since) < STOPPED_AFTER_NS {
            return;
        }
        let d = self.state.device(self.device);
        let h = &d.tickets[(serving % TICKET_RING as u64) as usize];
        let slot = h.proc_slot.load(Acquire) as usize;
        if h.ticket.load(Acquire) != serving || slot == 0 {
            return;
        }
        let pid = self.state.proc(slot - 1).host_pid.load(Acquire);
        if pid != 0 && sys::process_is_stopped(pid) && d.now_serving.compare_exchange(serving, serving + 1, AcqRel, Relaxed).is_ok() {
            d.serve_seq.fetch_add(1, AcqRel);
            sys::futex_wake_all(&d.serve_seq);
        }
    }

    /// Whether `ticket` is still the one served (a stopped holder may have
    /// been skipped meanwhile).
    pub fn still_serving(&self, ticket: u64) -> bool {
        self.state.device(self.device).now_serving.load(Acquire) == ticket
    }

    /// Where the device's previous holders left off on the simulated clock
    /// (the holder's work starts no earlier), as of the real time `now_ns`.
    /// A mark further ahead than any holder publishes is from an earlier
    /// boot (the state file outlived it) and counts as none.
    pub fn free_at_ns(&self, now_ns: u64) -> u64 {
        let at = self.state.device(self.device).free_at_ns.load(Acquire);
        if at > now_ns.saturating_add(FREE_AT_SLACK_NS) {
            0
        } else {
            at
        }
    }

    /// Records, while holding the device, that its work reaches `at_ns` on
    /// the simulated clock (read at the real time `now_ns`); replaces a
    /// mark from an earlier boot.
    pub fn hold_until_ns(&self, at_ns: u64, now_ns: u64) {
        let word = &self.state.device(self.device).free_at_ns;
        if word.load(Acquire) > now_ns.saturating_add(FREE_AT_SLACK_NS) {
            word.store(at_ns, Release);
        } else {
            word.fetch_max(at_ns, AcqRel);
        }
    }

    /// Passes the device on.
    pub fn release(&self, ticket: u64) {
        let d = self.state.device(self.device);
        if d.now_serving.compare_exchange(ticket, ticket + 1, AcqRel, Relaxed).is_ok() {
            d.serve_seq.fetch_add(1, AcqRel);
            if d.sleepers.load(Acquire) > 0 {
                sys::futex_wake_all(&d.serve_seq);
            }
        }
    }

    /// Whether another context is queued behind `ticket`.
    pub fn others_waiting(&self, ticket: u64) -> bool {
        self.state.device(self.device).next_ticket.load(Acquire) > ticket + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn state(name: &str) -> (SharedState, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("simgpu-unit-sched-{name}-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let config = Config {
            device_count: 1,
            memory_bytes: 1 << 20,
            state_path: Some(path.clone()),
            context_memory_bytes: 0,
            slice_us: 2000,
            kernel_us: 5,
            mig: Vec::new(),
            sensors: Default::default(),
        };
        (SharedState::open(&config).expect("a state file"), path)
    }

    #[test]
    fn the_free_mark_only_rises_and_a_mark_from_another_boot_is_ignored_then_replaced() {
        let (state, path) = state("free-at");
        let sched = Scheduler { state: &state, device: 0, own_slot: 0 };
        let now = 5_000_000_000;
        assert_eq!(sched.free_at_ns(now), 0, "a fresh device is free");
        sched.hold_until_ns(now + 300_000, now);
        sched.hold_until_ns(now - 1_000, now);
        assert_eq!(sched.free_at_ns(now), now + 300_000, "a later holder's work never starts before an earlier one's ended");
        // A mark hours ahead of this clock: the file outlived a reboot.
        state.device(0).free_at_ns.store(now + 7_200_000_000_000, Relaxed);
        assert_eq!(sched.free_at_ns(now), 0, "a mark from another boot would stall every launch for hours");
        sched.hold_until_ns(now + 100, now);
        assert_eq!(sched.free_at_ns(now), now + 100, "the first holder replaces it");
        drop(state);
        let _ = std::fs::remove_file(&path);
    }
}
