//! Compute time: which launches may go, and when.
//!
//! Two mechanisms, one per kind of host:
//! - **With a monitor** (the usual case), the monitor arbitrates every
//!   device: it keeps each device's grant page, which this process maps
//!   read-only, and decides from what it observes itself which tenant may
//!   launch there ([`gate`], the monitor's `daemon::arbiter`). Shares,
//!   priorities and limits all hold through it, and nothing this process
//!   writes can change what another tenant gets. The process joins each
//!   device it makes a context on ([`join`]); a helper thread answers the
//!   monitor's revokes and says when the process goes idle ([`helper`]).
//! - **Without one**, a limit is kept by the tenant's own processes: a
//!   token bucket of measured device time in the tenant's ledger
//!   ([`bucket`]). It is cooperative (the tenant can write its bucket), as
//!   docs/security.md says; shares and priorities need the
//!   monitor.
//!
//! # The launch path
//! [`clear`] is all a launch hook asks: no bucket governs any device of
//! this process, and every joined device still shows the grant word this
//! process last launched under. That is a relaxed load, then one acquire
//! load of a word in a read-only page and one load of the word this
//! process announced, per joined device: no syscall, no lock, no clock, no
//! timing events. Otherwise the launch goes through
//! [`Runtime::govern_launch`]: the gate of each device it runs on, then the
//! bucket where one governs.
//!
//! # How much work is in flight
//! A launch is asynchronous: work a tenant queued keeps the device busy
//! after its turn ends, and the monitor waits for it (the helper drains it)
//! before the next tenant's turn. So the queue must stay short, or one turn
//! would last as long as the driver lets a queue grow (a thousand launches
//! and more). On an arbitrated device every `interval`th launch takes the
//! slow path, records a checkpoint event on its stream and first waits for
//! the checkpoint two before it ([`checkpoint`]), so a process keeps about
//! two intervals of launches queued, and the device never idles for it (the
//! newer checkpoint's launches are still queued).
//!
//! The queue is bounded by time: the interval is set so that it holds about
//! [`QUEUED_NS`] of device work, from what the checkpoints show of a
//! launch's duration, between 1 and [`MAX_CHECKPOINT_EVERY`] launches.
//! - When the launching thread must wait for the checkpoint two back, the
//!   device is behind it, and the time between two such waits over the
//!   launches between them is a launch's duration.
//! - When that checkpoint had already completed, the device kept up: the
//!   launches it closed ran between the recording of the checkpoint before
//!   it and now, so that span over their number is an upper bound of a
//!   launch's duration (it includes host time, and any wait for a turn).
//!   The interval may grow to what that bound allows, at most doubling
//!   each time: a loop of empty kernels reaches hundreds of launches per
//!   checkpoint within a few checkpoints, and a loop of long kernels that
//!   just got its turn back (its queue empty, its last checkpoint long
//!   done) sees a long span and stays where it is.
//!
//! A checkpoint is a few driver calls (an event recorded, one queried,
//! one destroyed), so the cost per launch falls with the interval: at 64
//! launches a loop of empty kernels on simgpu ran at 0.56 of bare, at the
//! hundreds this allows 0.95 and more (`cargo bench --bench launch_path`).
//! The bound by count keeps a sudden change of kernel length from queueing
//! more than [`MAX_CHECKPOINT_EVERY`] of the new ones before the wait
//! shows it; the driver's own queue (about a thousand launches: a launch
//! past it blocks) is the tighter bound, so the count is set above it
//! (4,096) and costs a loop of graph launches (8 million a second on
//! simgpu) one checkpoint in thousands: at 1,024 it ran at 0.90 of bare,
//! at 4,096 at 0.96.

pub mod bucket;
pub mod gate;
pub mod helper;
pub mod join;

use crate::accounting::Runtime;
use crate::real;
use abi::cuda::*;
pub use bucket::Target;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// The most launches between two checkpoints on an arbitrated device.
pub const MAX_CHECKPOINT_EVERY: u32 = 4096;
/// How much work a process keeps queued on an arbitrated device, by the
/// launches' measured duration: enough that the device never idles while
/// the launching thread waits for a checkpoint, little enough that a turn
/// drains in a fraction of a quantum.
pub const QUEUED_NS: u64 = 2_000_000;

/// Said once: a launch failed for want of a place in the turns.
static REFUSED_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// How much work a process that must keep one launch in flight (a
/// shallow grant) may keep queued instead, when its launches are short
/// enough that three fit: a kernel of a tenant of higher priority waits for
/// no more than this.
pub const SHALLOW_QUEUED_NS: u64 = 600_000;
/// Launches in a row under a shallow grant that ran for at most a third of
/// [`SHALLOW_QUEUED_NS`] each (by the wait for their stream).
static SHORT_LAUNCHES: AtomicU32 = AtomicU32::new(0);
/// How many such launches in a row let a shallow grant's launches keep a
/// few in flight.
const SHORT_LAUNCHES_SEEN: u32 = 8;
/// When this process last launched through the slow path (monotonic ns).
static LAST_SLOW_LAUNCH_NS: AtomicU64 = AtomicU64::new(0);
/// Launches left until the next checkpoint.
static COUNTDOWN: AtomicU32 = AtomicU32::new(1);
/// Launches between checkpoints now (adapted at each checkpoint).
static INTERVAL: AtomicU32 = AtomicU32::new(4);

/// Whether a launch may go straight to the driver.
#[inline(always)]
pub fn clear() -> bool {
    // Under the bucket, only sampled launches take the slow path.
    if bucket::governed() && !bucket::unsampled() {
        return false;
    }
    match gate::check() {
        gate::Check::Open => true,
        gate::Check::Arbitrated => count_down(),
        gate::Check::Changed => false,
    }
}

/// One launch off the checkpoint countdown; whether launches are left
/// before the next checkpoint. A load and a store, not a locked decrement:
/// in a loop of graph launches (about 300 ns each on simgpu) the locked
/// decrement was two thirds of the hook's own time (`perf annotate`), and
/// 2 % of the loop's. Threads that launch at the same instant may lose a
/// decrement of each other's, so a checkpoint comes a launch or two late;
/// the count stops at zero, so a late store never skips one (a stale zero
/// takes the slow path, whose checkpoint sets the countdown again).
#[inline(always)]
fn count_down() -> bool {
    let left = COUNTDOWN.load(Ordering::Relaxed);
    COUNTDOWN.store(left.saturating_sub(1), Ordering::Relaxed);
    left > 1
}

/// A value that changes with every launch on an arbitrated device (the
/// checkpoint countdown): the helper compares two readings to learn
/// whether the process launched between them, at no cost to the launch.
pub fn launch_marker() -> u32 {
    COUNTDOWN.load(Ordering::Relaxed)
}

/// Whether the monitor arbitrates ledger device `dev` for this process
/// (then its limit is the monitor's, not the bucket's).
pub fn arbitrates(dev: usize) -> bool {
    gate::joined(dev).is_some()
}

/// Turns the bucket on where a device has a limit the monitor does not
/// keep (after joining, and whenever a seat is joined or orphaned).
pub fn refresh_mode(rt: &Runtime) {
    // The bucket's lanes exist before it may govern: a launch allocates
    // nothing. Only a process with a limit somewhere builds them.
    if rt.devices.iter().any(|d| ledger::compute::is_limiting(rt.ledger.compute_limit_ratio_e4(d.ledger_index))) {
        rt.throttle.prepare();
    }
    let bucket = rt
        .devices
        .iter()
        .any(|d| ledger::compute::is_limiting(rt.ledger.compute_limit_ratio_e4(d.ledger_index)) && !arbitrates(d.ledger_index));
    bucket::set_governed(bucket);
}

impl Runtime {
    /// Makes a launch on `targets` (one stream, or one per device) once
    /// each device's grant lets it, then under the bucket where one governs.
    pub fn govern_launch(&self, targets: &[Target], launch: impl FnOnce() -> CUresult) -> CUresult {
        // A stream that is capturing a graph runs nothing: its launches are
        // recorded, and neither a wait nor an event may touch it.
        if targets.iter().any(|t| real::stream_capturing(t.stream).unwrap_or(false)) {
            return if bucket::governed() { self.govern_bucket(targets, launch) } else { launch() };
        }
        // A device whose monitor refused this process a place: held until
        // it has one, failed when none comes (see `gate::refused_wait`).
        if gate::any_refused() {
            for target in targets {
                let Some(seat) = self.refused_seat_of(target) else { continue };
                if gate::refused_wait(seat) == gate::Refused::Fail {
                    if !REFUSED_SAID.swap(true, Ordering::Relaxed) {
                        warn!(
                            "a launch failed with CUDA_ERROR_NOT_PERMITTED: this process has no place in the monitor's turns on \
                             its device, and the monitor arbitrates it (the reason was logged when it refused)"
                        );
                    }
                    return CUDA_ERROR_NOT_PERMITTED;
                }
            }
        }
        // Launching from here on, however long the gate or a checkpoint
        // makes it wait: the helper must not take the wait for idleness.
        for seat in gate::seats() {
            seat.launched.store(true, Ordering::Release);
        }
        // The checkpoint first, the gate last: a launch that passed the gate
        // and then slept on a checkpoint would land after its tenant's turn
        // had ended and drained, in another tenant's turn (two tenants of
        // 100 us kernels, 25 / 75, got 29 / 63 while the monitor charged
        // 15 / 82).
        if gate::any_arbitrated() {
            if let Some(target) = targets.first() {
                let closed = checkpoint(target);
                // The launches since the last checkpoint, counted here and
                // not one by one: the fast path stays a countdown.
                if let Some(bucket) = self.seat_of(target).and_then(|seat| self.ledger.compute_bucket(seat.dev.load(Ordering::Relaxed))) {
                    bucket.count_launches(u64::from(closed));
                }
            }
        }
        // Whether this launch is one of two in flight, to be waited for by
        // the launch after next.
        let mut record_launch = false;
        for target in targets {
            let Some(seat) = self.seat_of(target) else { continue };
            loop {
                let waited_before = seat.waited_ns_total.load(Ordering::Relaxed);
                let pass = gate::pass(seat);
                let waited_ns = seat.waited_ns_total.load(Ordering::Relaxed).saturating_sub(waited_before);
                if waited_ns != 0 {
                    // The device ran others' work while this launch waited:
                    // the time to the next checkpoint says nothing of this
                    // process's launches.
                    LAST_DONE_NS.store(0, Ordering::Relaxed);
                    // Time held back for others' turns is throttled time,
                    // as a bucket's sleep is without a monitor.
                    if let Some(bucket) = self.ledger.compute_bucket(seat.dev.load(Ordering::Relaxed)) {
                        bucket.count_throttled(waited_ns);
                    }
                }
                if pass == gate::Pass::Go {
                    break;
                }
                // Short kernels: the checkpoint this launch just took (one per
                // launch on this path, each waiting for the one two before)
                // keeps at most three launches, under SHALLOW_QUEUED_NS, in
                // flight; waiting for the stream to empty before each would
                // leave the device idle between them.
                if SHORT_LAUNCHES.load(Ordering::Relaxed) >= SHORT_LAUNCHES_SEEN {
                    // Launches go the fast way again, under this grant, with
                    // checkpoints that keep SHALLOW_QUEUED_NS queued.
                    if let Some(page) = seat.page() {
                        seat.announced.store(page.grant().0, Ordering::Relaxed);
                    }
                    break;
                }
                // A tenant of higher priority is active: this launch waits
                // for its stream's queue, so one launch at most is in
                // flight. Filling in for a tenant that paused: it waits for
                // the launch before last, so two are. Then it looks at the
                // grant again, which may have moved on meanwhile: a launch
                // that waited past its turn's end must not land in the next.
                let two_in_flight = seat.page().is_some_and(|page| page.shallow_launches() >= 2);
                if two_in_flight {
                    wait_for_launch_before_last();
                } else {
                    let _ = real::stream_synchronize(target.stream, target.per_thread);
                }
                // From this process's last launch to its stream emptying (or
                // the launch before it completing): at most that launch's
                // length (its host time between launches included).
                // Launches that short, time after time, may keep a few in
                // flight.
                let now_ns = ledger::compute::monotonic_ns();
                let last_ns = LAST_SLOW_LAUNCH_NS.load(Ordering::Relaxed);
                if last_ns != 0 && now_ns.saturating_sub(last_ns).saturating_mul(3) <= SHALLOW_QUEUED_NS {
                    SHORT_LAUNCHES.fetch_add(1, Ordering::Relaxed);
                } else {
                    SHORT_LAUNCHES.store(0, Ordering::Relaxed);
                }
                if seat.page().is_none_or(|page| page.grant().lets(seat.member())) {
                    record_launch = two_in_flight;
                    break;
                }
            }
        }
        let r = if bucket::governed() { self.govern_bucket(targets, launch) } else { launch() };
        if let (true, Some(target)) = (record_launch && r == CUDA_SUCCESS, targets.first()) {
            launched_one_of_two(target);
        }
        LAST_SLOW_LAUNCH_NS.store(ledger::compute::monotonic_ns(), Ordering::Relaxed);
        // A launch that waited here (for a grant or a checkpoint) launched:
        // the helper must not take the wait for idleness.
        for seat in gate::seats() {
            seat.launched.store(true, std::sync::atomic::Ordering::Release);
        }
        r
    }

    /// The seat of the device `target` runs on, if a running monitor
    /// refused this process a place there.
    fn refused_seat_of(&self, target: &Target) -> Option<&'static gate::Seat> {
        if self.devices.len() == 1 {
            return gate::seats().find(|s| s.refused_at_ns().is_some());
        }
        let ctx = real::stream_context(target.stream, target.per_thread).ok()?;
        let dev = self.device_of_context(ctx)?;
        gate::seats().find(|s| s.dev.load(Ordering::Relaxed) == dev && s.refused_at_ns().is_some())
    }

    /// The joined seat of the device `target` runs on.
    fn seat_of(&self, target: &Target) -> Option<&'static gate::Seat> {
        let mut seats = gate::seats().filter(|s| s.page().is_some());
        let first = seats.next()?;
        if seats.next().is_none() && self.devices.len() == 1 {
            return Some(first);
        }
        let ctx = real::stream_context(target.stream, target.per_thread).ok()?;
        gate::joined(self.device_of_context(ctx)?)
    }
}

/// Events recorded after the last two launches made under a grant of two
/// launches in flight, by the launches' number modulo 2: each such launch
/// first waits for the one its number's slot holds, the launch before last.
static LAST_TWO_LAUNCHES: [AtomicUsize; 2] = [const { AtomicUsize::new(0) }; 2];
/// The number of the next launch made under such a grant.
static NEXT_OF_TWO: AtomicUsize = AtomicUsize::new(0);

/// Waits (at most [`CHECKPOINT_WAIT`]) until the launch before last made
/// under a grant of two launches in flight has run. Its successor is still
/// queued, so the device does not idle while this thread oversleeps a
/// little; the sleeps stay short, since a fill-in lasts milliseconds.
fn wait_for_launch_before_last() {
    let slot = LAST_TWO_LAUNCHES.get(NEXT_OF_TWO.load(Ordering::Relaxed) % 2);
    let event = slot.map_or(0, |s| s.swap(0, Ordering::AcqRel));
    if event == 0 {
        return;
    }
    let event = event as CUevent;
    wait_for_event(event, 100_000);
    real::event_destroy(event);
}

/// Waits until `event` has completed, or [`CHECKPOINT_WAIT`] has passed,
/// in sleeps that start at 10 µs and double up to `longest_sleep_ns`.
fn wait_for_event(event: CUevent, longest_sleep_ns: u64) {
    let until = std::time::Instant::now() + CHECKPOINT_WAIT;
    let mut sleep_ns = 10_000;
    while real::event_query(event) == CUDA_ERROR_NOT_READY && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_nanos(sleep_ns));
        sleep_ns = (sleep_ns * 2).min(longest_sleep_ns.max(1));
    }
}

/// Records, after a launch made under a grant of two launches in flight,
/// the event that the launch after next waits for.
fn launched_one_of_two(target: &Target) {
    let Ok(ctx) = real::stream_context(target.stream, target.per_thread) else { return };
    let Ok(event) = real::record_event(ctx, target.stream, target.per_thread) else { return };
    let n = NEXT_OF_TWO.fetch_add(1, Ordering::Relaxed);
    if let Some(slot) = LAST_TWO_LAUNCHES.get(n % 2) {
        let replaced = slot.swap(event as usize, Ordering::AcqRel);
        if replaced != 0 {
            real::event_destroy(replaced as CUevent);
        }
    }
}

/// Checkpoint events, oldest overwritten: at most this many outstanding.
const CHECKPOINTS: usize = 4;
static CHECKPOINT_EVENTS: [AtomicUsize; CHECKPOINTS] = [const { AtomicUsize::new(0) }; CHECKPOINTS];
static NEXT_CHECKPOINT: AtomicUsize = AtomicUsize::new(0);
/// When each checkpoint was recorded (monotonic ns), by slot.
static CHECKPOINT_AT_NS: [AtomicU64; CHECKPOINTS] = [const { AtomicU64::new(0) }; CHECKPOINTS];
/// The launches each checkpoint closed (since the one before it), by slot.
static CHECKPOINT_LAUNCHES: [AtomicU32; CHECKPOINTS] = [const { AtomicU32::new(0) }; CHECKPOINTS];
/// When the last checkpoint waited for was seen complete (monotonic ns; 0:
/// the last one had completed before it was looked at).
static LAST_DONE_NS: AtomicU64 = AtomicU64::new(0);
/// The longest a launch waits for an old checkpoint (a device that stopped
/// running work is not this process's to wait for).
const CHECKPOINT_WAIT: Duration = Duration::from_secs(5);

/// Waits for the checkpoint two before this one, then records this one on
/// `target`'s stream, and sets how many launches go until the next (see
/// the module docs). Each event has one owner at a time (taken with a
/// swap), so threads that checkpoint at once never destroy an event
/// another is looking at. Returns the launches it closed.
fn checkpoint(target: &Target) -> u32 {
    // Under a shallow grant (a tenant of higher priority is active, or this
    // one fills in for another) the queue kept is shorter.
    let shallow = gate::any_shallow();
    let queued_ns = if shallow { SHALLOW_QUEUED_NS } else { QUEUED_NS };
    let interval = INTERVAL.load(Ordering::Relaxed).max(1);
    // The launches this checkpoint closes, since the last one: the
    // interval, or fewer when a launch came this way before the countdown
    // ran out (a grant that changed, a shallow grant).
    let left = COUNTDOWN.load(Ordering::Relaxed);
    let closed = if left <= interval { interval - left } else { interval }.max(1);
    let k = NEXT_CHECKPOINT.fetch_add(1, Ordering::Relaxed);
    let two_back = CHECKPOINT_EVENTS.get((k + CHECKPOINTS - 2) % CHECKPOINTS).map(|e| e.swap(0, Ordering::AcqRel)).unwrap_or(0);
    let mut next = interval;
    if two_back != 0 {
        let event = two_back as CUevent;
        if real::event_query(event) == CUDA_ERROR_NOT_READY {
            // The device is behind this process: wait, and learn from the
            // wait how long a launch runs, to keep QUEUED_NS queued.
            // Sleeps grow to a quarter of the queue kept, so that the
            // device never runs dry while this thread oversleeps.
            wait_for_event(event, queued_ns / 4);
            let done_ns = ledger::compute::monotonic_ns();
            let last = LAST_DONE_NS.swap(done_ns, Ordering::Relaxed);
            if last != 0 {
                let per_launch_ns = (done_ns.saturating_sub(last) / u64::from(closed)).max(1);
                next = (queued_ns / 2 / per_launch_ns).clamp(1, u64::from(MAX_CHECKPOINT_EVERY)) as u32;
                if shallow && per_launch_ns.saturating_mul(3) > SHALLOW_QUEUED_NS {
                    // Launches too long for a few in flight: each waits for
                    // the stream again (the gate's shallow path).
                    SHORT_LAUNCHES.store(0, Ordering::Relaxed);
                    for seat in gate::seats() {
                        seat.announced.store(0, Ordering::Relaxed);
                    }
                }
            }
        } else {
            // The device kept up: the launches the checkpoint two back
            // closed ran between the one before it and now (module docs).
            LAST_DONE_NS.store(0, Ordering::Relaxed);
            next = kept_up_interval(k, interval, queued_ns);
        }
        real::event_destroy(event);
    }
    INTERVAL.store(next, Ordering::Relaxed);
    COUNTDOWN.store(next, Ordering::Relaxed);
    let Ok(ctx) = real::stream_context(target.stream, target.per_thread) else { return closed };
    let Ok(event) = real::record_event(ctx, target.stream, target.per_thread) else { return closed };
    if let (Some(at), Some(launches)) = (CHECKPOINT_AT_NS.get(k % CHECKPOINTS), CHECKPOINT_LAUNCHES.get(k % CHECKPOINTS)) {
        at.store(ledger::compute::monotonic_ns(), Ordering::Relaxed);
        launches.store(closed, Ordering::Relaxed);
    }
    if let Some(slot) = CHECKPOINT_EVENTS.get(k % CHECKPOINTS) {
        let replaced = slot.swap(event as usize, Ordering::AcqRel);
        if replaced != 0 {
            real::event_destroy(replaced as CUevent);
        }
    }
    closed
}

/// The interval after checkpoint `k` found the checkpoint two back
/// complete: what keeps `queued_ns / 2` per interval if a launch lasts as
/// long as the launches that checkpoint closed could have (the span from
/// the checkpoint before it to now, over their number), at most twice
/// `interval`, and never less than it.
fn kept_up_interval(k: usize, interval: u32, queued_ns: u64) -> u32 {
    let slot = |back: usize| (k + CHECKPOINTS - back) % CHECKPOINTS;
    let since_ns = CHECKPOINT_AT_NS.get(slot(3)).map_or(0, |a| a.load(Ordering::Relaxed));
    let closed = CHECKPOINT_LAUNCHES.get(slot(2)).map_or(0, |l| l.load(Ordering::Relaxed));
    let now_ns = ledger::compute::monotonic_ns();
    if since_ns == 0 || closed == 0 || k < 3 {
        return interval;
    }
    let bound_ns = (now_ns.saturating_sub(since_ns) / u64::from(closed)).max(1);
    let allowed = (queued_ns / 2 / bound_ns).min(u64::from(MAX_CHECKPOINT_EVERY)) as u32;
    allowed.min(interval.saturating_mul(2)).max(interval)
}
