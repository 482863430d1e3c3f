//! The bucket: a compute limit kept by the tenant's own processes, for
//! devices the monitor does not arbitrate (no monitor runs, or it has not
//! answered yet). With a monitor, the limit is the monitor's
//! (`super::gate`) and this module steps aside for that device.
//!
//! The limit is a token bucket per tenant and device in the tenant's
//! ledger (`ledger::compute`), shared by its processes: it refills at the
//! limit and measured device time is taken out of it. It needs nothing but
//! the ledger, so it holds with no monitor running; it is the tenant's to
//! write, so it holds honest processes only (docs/security.md,
//! *What remains cooperative*).
//!
//! # What is measured
//! A governed launch is bracketed by two timing events recorded on its own
//! stream, just before and just after it. When the end event has
//! completed, `cuEventElapsedTime` between the two is the device time the
//! launch is charged: it is taken out of the tenant's bucket for that
//! device. A graph launch is one bracket around the whole graph; a
//! multi-device cooperative launch one bracket per device, each charged to
//! its own device.
//!
//! Short launches are sampled, not all bracketed: three driver calls and a
//! charge beside a launch of a microsecond cost more than the launch (a
//! loop of empty kernels under a limit of 90 ran at 0.1 to 0.5 of bare).
//! While the recent launches of a process on one device last less than
//! [`SAMPLE_WORK_NS`] each, only one launch in about `SAMPLE_WORK_NS /
//! duration` (at most [`MAX_SAMPLE_EVERY`]) is bracketed, and it is
//! charged its time times the launches since the last bracketed one; the
//! others go straight to the driver, past a counter ([`unsampled`]). The
//! gaps between samples are drawn at random, so that a loop whose kernels
//! alternate in a pattern is not always sampled at the same kernel: the
//! charge is then an unbiased estimate of the device time, whose error over
//! a second of thousands of samples is far below a point. Launches of
//! [`SAMPLE_WORK_NS`] and more, processes on several devices, and launches
//! whose events the driver refused are bracketed one by one, as before.
//! Where the device keeps up with the host, the gap is longer
//! ([`sample_gap`]). Only a sampled launch asks the bucket, so an empty
//! bucket lets through at most one gap of launches, about
//! [`SAMPLE_WORK_NS`] of work ([`SAMPLE_WORK_KEPT_UP_NS`] of host time
//! where the device keeps up). A sample whose stream ran dry while it
//! waited for the bucket is passed on to the sample after the next gap
//! ([`defer_sample`]): its bracket would begin on an idle device and count
//! the time to take the launch up. One whose device caught up with the host
//! inside its bracket is charged for itself alone, and the launches it
//! stood for pass on the same way ([`caught_up_in_bracket`]).
//!
//! # How a launch flows
//! 1. The launch's stream leads to a *lane*: this process's ring of event
//!    pairs for one context, created on the first launch in that context
//!    (the events are made there, since an event and the stream it is
//!    recorded on must share a context) and recycled for ever after. The
//!    stream's lane is found through a per-thread cache keyed by the stream
//!    handle and a generation that every stream destruction moves on; a
//!    miss asks the driver for the stream's context (`cuStreamGetCtx`) with
//!    no lock held. The default streams mean the calling thread's context.
//!    A stream that is capturing a graph runs nothing: its launches pass.
//! 2. Pairs whose end event completed are charged, oldest first.
//! 3. While the bucket is empty or in debt, the launch sleeps (`nanosleep`)
//!    until the refill makes it positive, charging what completes meanwhile;
//!    the sleep counts in `throttled_ns_total`.
//! 4. A cell of the lane's ring is claimed. The ring bounds the process's
//!    uncharged work on the device: at most [`RING`] pairs, and no more than
//!    [`IN_FLIGHT_NS`] of work by the recent pair durations (2 pairs while
//!    none has been measured). At the bound the launch sleeps until the
//!    oldest pair completes.
//! 5. Start event, the driver's launch, end event; the cell is published.
//!
//! Charging also happens after each synchronisation hook, so a client that
//! waits for every launch is charged before it launches again. The launch
//! path allocates nothing and takes no lock: lanes are fixed arrays of
//! atomics, and the ring is a bounded multi-producer queue (Vyukov's) whose
//! consumers are whichever threads charge. Building a lane (once per
//! context) and the per-thread cache's misses are the only slow paths.
//!
//! # Accuracy
//! Over any interval `T`, what the tenant's launches ran on a device is
//! what was charged, plus what ran and is not charged yet. The bucket lets
//! at most `limit × T + burst` be charged (`ledger::compute`). What is not
//! charged yet is bounded by the ring: per process and context, at most
//! [`RING`] pairs, and pairs worth [`IN_FLIGHT_NS`] by the recent
//! durations, but never fewer than two. Measured on simgpu (`cargo bench
//! --bench shim -- compute_accuracy`, 1 ms kernels back to back for 5 s,
//! alone): the charged share came out at the limit plus 0.2, 0.6, 1.2 and
//! 1.8 points for limits of 10, 30, 60 and 90 %, which is the burst spread
//! over 5 s. The measurement errs on the safe side only:
//! - the bracket of a launch also counts time the device spent on other
//!   contexts while the launch was queued behind them (time-slicing), and
//!   time two of the process's own streams overlapped: a busy device is
//!   charged more than it used, and gets less than its limit, never more;
//! - it also counts the time an idle device waited for the host to submit
//!   the launch (the start event completes as soon as it is recorded):
//!   events cannot tell that wait from work. A launch-bound loop is charged
//!   about its host time per launch, and is held at its limit even where
//!   the device is mostly idle: CUDA graphs of four empty kernels on simgpu
//!   (which runs nothing for them) read 99 % USED in `gpuslice status`
//!   under a limit of 99 and 91 % under 90;
//! - a pair the driver cannot time (an error) is charged the host time from
//!   its start record to the moment it was seen complete, an upper bound of
//!   its device time; every elapsed time is also capped by that bound;
//! - a launch whose events cannot be had (the driver refused to create or
//!   record them, or every lane is taken) waits for its stream to finish
//!   (`cuStreamQuery` and sleeps) and is charged the host time from launch
//!   to completion; one warning says so, and the driver is asked for
//!   events again a second later.
//!
//! Below the limit, nothing is lost: the bucket refills whether or not the
//! device is busy, and idle time between a launch's completion and the next
//! launch is in no bracket. Work still in flight when a context is destroyed
//! is charged when it completes; the last launches of a process that exits
//! with them in flight are never charged (at most its ring).

use abi::cuda::*;
use ledger::compute::{self, Admit, BucketClock, ComputeBucket};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::accounting::Runtime;
use crate::real;

/// Event pairs per lane: the most launches of one process in flight and
/// uncharged on one context.
pub const RING: usize = 64;
/// The most uncharged work a lane keeps in flight, estimated from recent
/// pair durations: enough queued work that the device does not idle while
/// the launching thread sleeps (sleeps wake within about 100 µs), little
/// enough that the limit holds over short windows.
pub const IN_FLIGHT_NS: u64 = 20_000_000;
/// Pairs always allowed in flight: one running, one queued behind it.
const MIN_IN_FLIGHT: u64 = 2;
/// Contexts with launches this process can govern at once.
const MAX_LANES: usize = 32;
/// The shortest and the longest sleep while waiting for a pair to complete.
const MIN_POLL_NS: u64 = 20_000;
const MAX_POLL_NS: u64 = 2_000_000;
/// How long a context's destruction waits for its lane's pairs.
const DRAIN_WAIT: Duration = Duration::from_secs(2);
/// After the driver refused timing events, how long launches go without
/// asking it again.
const EVENTS_RETRY_NS: u64 = 1_000_000_000;

/// Whether any device this process sees has a limit (set at initialisation).
static GOVERNED: AtomicBool = AtomicBool::new(false);

/// Launches shorter than this are sampled (see the module docs).
pub const SAMPLE_WORK_NS: u64 = 50_000;
/// The work between samples while the device keeps up with the host
/// ([`sample_gap`]).
pub const SAMPLE_WORK_KEPT_UP_NS: u64 = 400_000;
/// The most launches one sample stands for.
pub const MAX_SAMPLE_EVERY: u64 = 1024;
/// Launches left until the next sampled one (signed: launches that race
/// past zero never wrap it into a long run of unsampled ones).
static SAMPLE_COUNTDOWN: AtomicI64 = AtomicI64::new(1);
/// How many launches the next sample stands for: the gap drawn when the
/// countdown was set.
static SAMPLE_GAP: AtomicU64 = AtomicU64::new(1);
/// Whether the last sample was passed on to the next one
/// ([`defer_sample`]).
static SAMPLE_DEFERRED: AtomicBool = AtomicBool::new(false);
/// The state of the generator of gaps (xorshift).
static SAMPLE_RNG: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);

/// Whether this launch may go unsampled: the launch path's whole cost
/// under the bucket between samples.
#[inline(always)]
pub fn unsampled() -> bool {
    SAMPLE_COUNTDOWN.fetch_sub(1, Ordering::Relaxed) > 1
}

/// A gap of mean `mean` (1 ..= 2 mean - 1, uniform).
fn draw_gap(mean: u64) -> u64 {
    if mean <= 1 {
        return 1;
    }
    let mut x = SAMPLE_RNG.load(Ordering::Relaxed);
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    SAMPLE_RNG.store(x, Ordering::Relaxed);
    1 + x % (2 * mean - 1)
}

/// The mean gap, in launches, from a sample to the next for launches of
/// `launch_ns` each (what recent samples charged per launch): one sample
/// per [`SAMPLE_WORK_NS`] of their work, or per [`SAMPLE_WORK_KEPT_UP_NS`]
/// where the device had run everything queued by the time this sample's
/// start was recorded (`kept_up`). There the charge is bounded by the host
/// time the launches were made in ([`span_ns`]), so a larger weight does
/// not multiply an error of the bracket past it, and a loop the device
/// keeps up with (CUDA graphs of empty kernels on simgpu) pays for a
/// sample's driver calls an eighth as often: under a limit of 99 it ran at
/// 0.86 of bare with one sample per 50 µs, 0.97 with one per 400 µs. Where
/// the device is behind, a bracket's error is multiplied by the weight
/// unbounded, and a gap of 200 µs overcharged 1 µs kernels 1.24 times
/// their device time against 1.09 at 50 µs: the gap stays short there,
/// and the first sample that finds the device behind shortens it again.
/// Launches of [`SAMPLE_WORK_NS`] and more are each their own sample.
fn sample_gap(launch_ns: u64, kept_up: bool) -> u64 {
    if launch_ns == 0 || launch_ns >= SAMPLE_WORK_NS {
        return 1;
    }
    if kept_up {
        SAMPLE_WORK_KEPT_UP_NS / launch_ns
    } else {
        SAMPLE_WORK_NS / launch_ns
    }
}

/// Sets the gap to the next sampled launch: `mean` launches on average.
fn next_sample(mean: u64) {
    let gap = draw_gap(mean.clamp(1, MAX_SAMPLE_EVERY));
    SAMPLE_GAP.store(gap, Ordering::Relaxed);
    SAMPLE_COUNTDOWN.store(gap as i64, Ordering::Relaxed);
}

/// How many launches a sample now stands for: the gap drawn for it, less
/// the launches still left on the countdown.
fn sample_weight() -> u64 {
    let left = SAMPLE_COUNTDOWN.load(Ordering::Relaxed).max(0) as u64;
    SAMPLE_GAP.load(Ordering::Relaxed).saturating_sub(left).max(1)
}

/// Whether the bucket governs any device of this process.
#[inline(always)]
pub fn governed() -> bool {
    GOVERNED.load(Ordering::Relaxed)
}

/// Says whether launches must come to this module.
pub(crate) fn set_governed(on: bool) {
    GOVERNED.store(on, Ordering::Relaxed);
}

/// Moves on at every stream destruction: a handle may come back as another
/// context's stream.
static STREAM_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Forgets every thread's stream-to-lane cache (a stream was destroyed).
pub fn streams_changed() {
    STREAM_GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Unique across every lane this process ever builds (and its forked
/// children's, which continue the count), so that a cached lane is never
/// mistaken for a rebuilt one.
static EPOCHS: AtomicU32 = AtomicU32::new(0);

mod lane_state {
    pub const EMPTY: u32 = 0;
    pub const BUILDING: u32 = 1;
    pub const READY: u32 = 2;
    /// Its context is gone, and its events with it; may be built again.
    pub const DEAD: u32 = 3;
}

/// One slot of a lane's ring: a pair of timing events, recycled.
struct Pair {
    /// Vyukov's sequence: `pos` free for the producer of position `pos`,
    /// `pos + 1` published, `pos + RING` consumed (free for the next round).
    seq: AtomicU64,
    start: AtomicUsize,
    end: AtomicUsize,
    /// Bucket time just before the start record: the end was seen complete
    /// later, so the pair's device time is at most the difference.
    recorded_ns: AtomicU64,
    /// Both events were recorded around a launch the driver accepted.
    measured: AtomicBool,
    /// The launches the pair stands for: itself and those not sampled
    /// before it.
    weight: AtomicU64,
    /// A bound of the device time the launches this pair stands for took
    /// (see [`span_ns`]); `u64::MAX` for none.
    span_ns: AtomicU64,
    /// Bucket time from just before the start record to just after the
    /// end record: what the host spent on the bracket.
    host_ns: AtomicU64,
}

/// This process's event pairs for one context.
struct Lane {
    state: AtomicU32,
    epoch: AtomicU32,
    ctx: AtomicUsize,
    /// The ledger index of the context's device.
    dev: AtomicUsize,
    head: AtomicU64,
    tail: AtomicU64,
    /// Recent pair durations times their weights, ns (an exponential
    /// average; 0 until measured): the work one pair stands for.
    recent_ns: AtomicU64,
    /// Recent charges of one launch, ns (an exponential average; 0 until
    /// measured): what sets the gap between samples.
    recent_launch_ns: AtomicU64,
    /// Bucket time of the last start record.
    last_record_ns: AtomicU64,

    pairs: [Pair; RING],
}

impl Lane {
    fn new() -> Lane {
        Lane {
            state: AtomicU32::new(lane_state::EMPTY),
            epoch: AtomicU32::new(0),
            ctx: AtomicUsize::new(0),
            dev: AtomicUsize::new(0),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            recent_ns: AtomicU64::new(0),
            recent_launch_ns: AtomicU64::new(0),
            last_record_ns: AtomicU64::new(0),
            pairs: std::array::from_fn(|i| Pair {
                seq: AtomicU64::new(i as u64),
                start: AtomicUsize::new(0),
                end: AtomicUsize::new(0),
                recorded_ns: AtomicU64::new(0),
                measured: AtomicBool::new(false),
                weight: AtomicU64::new(1),
                span_ns: AtomicU64::new(0),
                host_ns: AtomicU64::new(0),
            }),
        }
    }

    fn pair(&self, pos: u64) -> &Pair {
        // The index is below RING; the fallback (a constant index the
        // compiler checks) is never taken.
        self.pairs.get((pos % RING as u64) as usize).unwrap_or(&self.pairs[0])
    }

    fn is(&self, epoch: u32) -> bool {
        self.state.load(Ordering::Acquire) == lane_state::READY && self.epoch.load(Ordering::Acquire) == epoch
    }

    /// Pairs allowed in flight now (see the module docs).
    fn in_flight_bound(&self) -> u64 {
        match self.recent_ns.load(Ordering::Relaxed) {
            0 => MIN_IN_FLIGHT,
            recent => (IN_FLIGHT_NS / recent).clamp(MIN_IN_FLIGHT, RING as u64),
        }
    }

    /// How long to sleep before looking at the oldest pair again.
    fn poll_ns(&self) -> u64 {
        (self.recent_ns.load(Ordering::Relaxed) / 2).clamp(MIN_POLL_NS, MAX_POLL_NS)
    }

    /// How long until the oldest pair should complete, by the recent
    /// durations (`now_ns` in bucket time): a launch waiting for room in the
    /// ring wakes then, so that the device does not idle between one kernel
    /// and the next when few are allowed in flight.
    fn until_oldest_done_ns(&self, now_ns: u64) -> u64 {
        let recent = self.recent_ns.load(Ordering::Relaxed);
        if recent == 0 {
            return self.poll_ns();
        }
        let oldest = self.pair(self.head.load(Ordering::Acquire));
        let due = oldest.recorded_ns.load(Ordering::Relaxed).saturating_add(recent);
        due.saturating_sub(now_ns).clamp(MIN_POLL_NS, MAX_POLL_NS)
    }

    /// Claims the next cell, unless the ring is at its bound.
    fn claim(&self) -> Option<u64> {
        loop {
            let pos = self.tail.load(Ordering::Acquire);
            let head = self.head.load(Ordering::Acquire);
            if pos.saturating_sub(head) >= self.in_flight_bound() {
                return None;
            }
            let seq = self.pair(pos).seq.load(Ordering::Acquire);
            if seq == pos {
                if self.tail.compare_exchange_weak(pos, pos + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    return Some(pos);
                }
            } else if seq < pos {
                return None;
            }
        }
    }

    /// Hands a claimed cell to the consumers.
    fn publish(&self, pos: u64, measured: bool, weight: u64) {
        let pair = self.pair(pos);
        pair.weight.store(weight.max(1), Ordering::Relaxed);
        pair.measured.store(measured, Ordering::Release);
        pair.seq.store(pos + 1, Ordering::Release);
    }

    /// Charges every pair that completed, oldest first, to `bucket`;
    /// returns whether pairs remain in flight.
    fn charge_completed(&self, sink: Sink<'_>, clock: &BucketClock) -> bool {
        loop {
            let pos = self.head.load(Ordering::Acquire);
            let pair = self.pair(pos);
            let seq = pair.seq.load(Ordering::Acquire);
            if seq < pos + 1 {
                // Empty, or the oldest is still being recorded.
                return pos < self.tail.load(Ordering::Acquire);
            }
            if seq > pos + 1 {
                continue;
            }
            let busy_ns = if pair.measured.load(Ordering::Acquire) {
                let end = pair.end.load(Ordering::Relaxed) as CUevent;
                match real::event_query(end) {
                    CUDA_ERROR_NOT_READY => return true,
                    r => {
                        let bound_ns = clock.now().saturating_sub(pair.recorded_ns.load(Ordering::Relaxed));
                        let start = pair.start.load(Ordering::Relaxed) as CUevent;
                        let timed = if r == CUDA_SUCCESS { real::event_elapsed_ns(start, end).ok() } else { None };
                        timed.map_or(bound_ns, |ns| ns.min(bound_ns))
                    }
                }
            } else {
                0
            };
            if self.head.compare_exchange(pos, pos + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                if pair.measured.load(Ordering::Relaxed) {
                    let weight = pair.weight.load(Ordering::Relaxed).max(1);
                    let charged_ns =
                        sampled_charge_ns(busy_ns, weight, pair.span_ns.load(Ordering::Relaxed), pair.host_ns.load(Ordering::Relaxed));
                    sink.charge(charged_ns);
                    average(&self.recent_ns, charged_ns);
                    // The gap between samples follows what one launch is
                    // charged (a bracket the host explains is longer than
                    // the launch). One bracket that caught a preemption of
                    // the host (a millisecond around a launch of 200 ns)
                    // would hold the sampling at every launch for dozens of
                    // samples: each counts for at most four times the
                    // average.
                    let per_launch_ns = charged_ns / weight;
                    let recent_launch = self.recent_launch_ns.load(Ordering::Relaxed);
                    average(
                        &self.recent_launch_ns,
                        if recent_launch == 0 { per_launch_ns } else { per_launch_ns.min(recent_launch.saturating_mul(4)) },
                    );
                }
                pair.seq.store(pos + RING as u64, Ordering::Release);
            }
        }
    }
}

/// The bound of a sample's charge by host time ([`sampled_charge_ns`]'s
/// `span_ns`), from what the sample's stream showed (`cuStreamQuery`):
/// - it had run everything queued when the sample began to ask: the
///   launches the sample stands for ran within the host time in which they
///   were made, from the end of the last sample to this one's asking
///   (`asked_ns - last_ns`; the sample's own wait for the bucket is not
///   theirs, so a loop of empty kernels is not charged its waits);
/// - it had not then, but had by the start record: they ran by then, within
///   the host time to it (`recorded_ns - last_ns`: the device ran them
///   during the wait);
/// - it had not even then: the device is behind, and runs them later, for
///   longer than any host time says, so there is no bound (`u64::MAX`), and
///   the bracket is the device's own time on the sampled launch.
///
/// With the first bound alone, 1 µs kernels (a bracket no longer than the
/// host's time on it, while the host makes a launch in 0.3 to 0.8 µs and the
/// device falls behind) were charged the host's pace, and a tenant under a
/// limit of 30 got 55 % of the device.
fn span_ns(caught_up_at_ask: bool, caught_up_at_record: bool, asked_ns: u64, recorded_ns: u64, last_ns: u64) -> u64 {
    if last_ns == 0 {
        0
    } else if caught_up_at_ask {
        asked_ns.saturating_sub(last_ns)
    } else if caught_up_at_record {
        recorded_ns.saturating_sub(last_ns)
    } else {
        u64::MAX
    }
}

/// What a pair is charged. A pair alone is charged as measured. One that
/// stands for `weight` launches is charged its time for each of them,
/// unless the host's own time on the bracket (`host_ns`: the records and
/// the launch between them) explains it: the kernel then ended before the
/// end was recorded, and the bracket is host time, longer than the time
/// between two launches that are not sampled (a loop of empty kernels
/// would be charged several times its wall time). Such launches took no
/// more device time than the host time in which they ran (`span_ns`, from
/// [`span_ns`]) and the sampled launch its own, and the charge is the
/// smaller of the two. A bracket longer than the host's time on it is the
/// device's (kernels of a few µs behind a queue): a bound by the span there
/// undercharged 5 µs kernels threefold, since a host whose device is behind
/// is blocked by the driver's queue in bursts, and most spans are short.
fn sampled_charge_ns(busy_ns: u64, weight: u64, span_ns: u64, host_ns: u64) -> u64 {
    let estimate_ns = busy_ns.saturating_mul(weight.max(1));
    if weight <= 1 || busy_ns > host_ns {
        return estimate_ns;
    }
    estimate_ns.min(span_ns.saturating_add(busy_ns))
}

/// Gives back the cells `plans` claimed, as cells that charge nothing.
fn give_back(plans: &mut [Option<Plan<'_>>; MAX_TARGETS]) {
    for plan in plans.iter_mut().flatten() {
        if let (Route::Lane(lane), Some(pos)) = (plan.route, plan.pos.take()) {
            lane.publish(pos, false, 1);
        }
    }
}

/// Passes the sample that stood for `weight` launches on to a later
/// launch, which then stands for them, for the launches between (a gap
/// drawn as usual, of mean `mean_gap`) and for itself. A sample's stream
/// that ran everything queued while the sample waited for the bucket is
/// idle: its start event completes as soon as it is recorded, and the
/// bracket adds the host's time to submit the launch and the device's to
/// take it up to the launch's own (on simgpu, 7.6 µs around 1 µs kernels,
/// charged for each of the 48 launches the sample stood for: a tenant under
/// a limit of 30 got 20 % of the device). The launches of the gap queue
/// behind each other as before, and the later sample's bracket is its own
/// time. Not the very next launch: a sample's own driver calls take the
/// host longer than a kernel of a microsecond takes the device, which was
/// then idle again at most of those (2,000 in 3 s, charged 1.38 times their
/// device time). Only once in a row ([`SAMPLE_DEFERRED`]): a device that
/// keeps up with the host is idle at every launch, and its samples are
/// bounded by the span instead ([`span_ns`]).
fn defer_sample(weight: u64, mean_gap: u64) {
    let gap = draw_gap(mean_gap.clamp(1, MAX_SAMPLE_EVERY));
    SAMPLE_GAP.store(weight.saturating_add(gap), Ordering::Relaxed);
    SAMPLE_COUNTDOWN.store(gap as i64, Ordering::Relaxed);
    SAMPLE_DEFERRED.store(true, Ordering::Relaxed);
}

/// Whether a sample's start event had completed by the time its end was
/// recorded (asked then, not between the launch and the end record, where
/// the call would be host time inside every sample's bracket): the device
/// had then run everything queued before the bracket and may have waited,
/// inside it, for the host to submit the launch or the end (or through a
/// preemption of the host there, milliseconds). Such a bracket
/// is charged for the sampled launch only: multiplied by the launches the
/// sample stood for, it charged a tenant of 1 µs kernels under a limit of
/// 30 up to 2.5 times its device time in slow spells of this machine and
/// 1.16 times in quiet ones (1.10 to 1.22 with this check, six runs of each
/// interleaved). A start that completes later was queued behind work, so
/// the launch was submitted before the device reached it. A start that
/// completed between the launch's return and the end record passes the
/// sample's launches on too: they are charged with the next sample, not
/// lost.
fn caught_up_in_bracket(plans: &[Option<Plan<'_>>; MAX_TARGETS]) -> bool {
    plans.iter().flatten().all(|plan| match (plan.route, plan.pos) {
        (Route::Lane(lane), Some(pos)) => {
            plan.started && real::event_query(lane.pair(pos).start.load(Ordering::Relaxed) as CUevent) == CUDA_SUCCESS
        }
        _ => false,
    })
}

/// Folds `sample_ns` into the exponential average `avg` (weight 1/8).
fn average(avg: &AtomicU64, sample_ns: u64) {
    let recent = avg.load(Ordering::Relaxed);
    let averaged = if recent == 0 { sample_ns.max(1) } else { (recent - recent / 8 + sample_ns / 8).max(1) };
    avg.store(averaged, Ordering::Relaxed);
}

/// Where measured device time goes: the tenant's bucket (taken out of it
/// under a limit, counted otherwise).
#[derive(Clone, Copy)]
struct Sink<'a> {
    bucket: ComputeBucket<'a>,
    limiting: bool,
}

impl Sink<'_> {
    fn charge(&self, busy_ns: u64) {
        if self.limiting {
            self.bucket.charge(busy_ns);
        } else {
            self.bucket.count_busy(busy_ns);
        }
    }
}

/// A launch target after its stream was looked at.
#[derive(Clone, Copy)]
enum Route<'a> {
    /// Through a lane of this context.
    Lane(&'a Lane),
    /// On this ledger device, without events: measured by waiting for the stream.
    Unmeasured(usize),
    /// Nothing to govern here (a capturing stream, a device without a
    /// limit, or a stream the driver does not know, whose launch fails).
    Pass,
}

/// One stream of a launch, as the hook was given it.
#[derive(Clone, Copy)]
pub struct Target {
    pub stream: CUstream,
    /// Launched through a `_ptsz` entry point: the null stream is the
    /// calling thread's per-thread stream.
    pub per_thread: bool,
}

impl Target {
    /// The stream the launch runs on, as the plain entry points name it.
    fn stream(&self) -> CUstream {
        if self.per_thread && self.stream.is_null() {
            CU_STREAM_PER_THREAD as CUstream
        } else {
            self.stream
        }
    }

    fn is_default(&self) -> bool {
        is_default_stream(self.stream())
    }
}

#[derive(Clone, Copy)]
struct CachedLane {
    key: usize,
    generation: u64,
    lane: usize,
    epoch: u32,
}

const NO_LANE: CachedLane = CachedLane { key: 0, generation: u64::MAX, lane: 0, epoch: 0 };
const CACHE_WAYS: usize = 8;

/// Which lane the calling thread's launches went to: part of the thread's
/// state (`crate::thread`), no destructor (nothing to register or free
/// when a thread first launches).
pub(crate) struct LaneCache {
    /// Stream handle → lane, direct-mapped.
    streams: [Cell<CachedLane>; CACHE_WAYS],
    /// The last current context of a default-stream launch → lane.
    context: Cell<CachedLane>,
}

impl LaneCache {
    /// Nothing cached (a `const fn`, so that the thread-local holding it
    /// needs no lazy initialisation).
    pub(crate) const fn new() -> LaneCache {
        LaneCache { streams: [const { Cell::new(NO_LANE) }; CACHE_WAYS], context: Cell::new(NO_LANE) }
    }

    fn forget(&self) {
        self.streams.iter().for_each(|way| way.set(NO_LANE));
        self.context.set(NO_LANE);
    }
}

fn cache_way(stream: usize) -> usize {
    (stream >> 4) % CACHE_WAYS
}

/// Every lane of the process and the clock of its buckets.
pub(crate) struct Throttle {
    /// Built by [`Throttle::prepare`] when a device of the process has a
    /// limit (about 70 KiB: a process without one never touches them).
    lanes: std::sync::OnceLock<Box<[Lane]>>,
    clock: BucketClock,
    /// Warned once that launches are measured without events.
    warned_unmeasured: AtomicBool,
    /// Bucket time before which no lane is built (the driver refused events).
    build_after_ns: AtomicU64,
}

impl Throttle {
    pub(crate) fn new() -> Throttle {
        Throttle {
            lanes: std::sync::OnceLock::new(),
            clock: BucketClock::new(),
            warned_unmeasured: AtomicBool::new(false),
            build_after_ns: AtomicU64::new(0),
        }
    }

    /// Builds the lanes, once; called before the bucket may govern
    /// (`compute::refresh_mode`), never on the launch path.
    pub(crate) fn prepare(&self) {
        // Built one lane at a time: the thread initialising may have a small stack.
        self.lanes.get_or_init(|| (0..MAX_LANES).map(|_| Lane::new()).collect());
    }

    /// The lanes; none before [`Throttle::prepare`] (a launch that finds
    /// none goes unmeasured, as when every lane is taken).
    fn lanes(&self) -> &[Lane] {
        self.lanes.get().map_or(&[], |lanes| lanes)
    }

    fn lane(&self, index: usize, epoch: u32) -> Option<&Lane> {
        self.lanes().get(index).filter(|lane| lane.is(epoch))
    }

    /// The ready lane of `ctx`, with its index.
    fn find(&self, ctx: usize) -> Option<(usize, &Lane)> {
        self.lanes()
            .iter()
            .enumerate()
            .find(|(_, lane)| lane.state.load(Ordering::Acquire) == lane_state::READY && lane.ctx.load(Ordering::Acquire) == ctx)
    }
}

/// Creates every pair's events in the current context; on a refusal,
/// destroys those it made.
fn create_events(lane: &Lane) -> Result<(), CUresult> {
    let mut made = 0;
    let mut result = Ok(());
    for pair in &lane.pairs {
        let events = real::event_create_timed().and_then(|start| match real::event_create_timed() {
            Ok(end) => Ok((start, end)),
            Err(r) => {
                real::event_destroy(start);
                Err(r)
            }
        });
        match events {
            Ok((start, end)) => {
                pair.start.store(start as usize, Ordering::Relaxed);
                pair.end.store(end as usize, Ordering::Relaxed);
                made += 1;
            }
            Err(r) => {
                result = Err(r);
                break;
            }
        }
    }
    if result.is_err() {
        for pair in lane.pairs.iter().take(made) {
            real::event_destroy(pair.start.swap(0, Ordering::Relaxed) as CUevent);
            real::event_destroy(pair.end.swap(0, Ordering::Relaxed) as CUevent);
        }
    }
    result
}

/// Why a launch waits: the longest bucket refill among its targets, and
/// which targets were held back.
#[derive(Default)]
struct Wait {
    bucket_ns: u64,
    throttled: [bool; MAX_TARGETS],
}

impl Wait {
    /// Sleeps as the wait says, and counts the time as throttled on each
    /// target it held back.
    fn sleep(&self, rt: &Runtime, plans: &[Option<Plan<'_>>; MAX_TARGETS], clock: &BucketClock) {
        let before = clock.now();
        std::thread::sleep(Duration::from_nanos(self.bucket_ns.max(1)));
        let slept_ns = clock.now().saturating_sub(before);
        for (plan, _) in plans.iter().zip(self.throttled).filter(|(_, held)| *held) {
            if let Some(bucket) = plan.as_ref().and_then(|p| rt.ledger.compute_bucket(p.dev)) {
                bucket.count_throttled(slept_ns);
            }
        }
    }
}

/// The most streams one launch runs on (a multi-device cooperative launch:
/// one per device).
const MAX_TARGETS: usize = ledger::MAX_DEVICES;

/// One target's part of a launch.
#[derive(Clone, Copy)]
struct Plan<'a> {
    route: Route<'a>,
    stream: CUstream,
    dev: usize,
    ratio_e4: u32,
    /// The lane cell claimed for it.
    pos: Option<u64>,
    started: bool,
    measured: bool,
}

impl Runtime {
    /// Where device time measured on `dev` goes.
    fn sink(&self, dev: usize) -> Option<Sink<'_>> {
        let bucket = self.ledger.compute_bucket(dev)?;
        let limiting = compute::is_limiting(self.ledger.compute_limit_ratio_e4(dev));
        Some(Sink { bucket, limiting })
    }

    /// The ledger device of context `ctx`.
    pub(crate) fn device_of_context(&self, ctx: CUcontext) -> Option<usize> {
        self.context_ledger_index(ctx as usize)
            .or_else(|| real::context_device(ctx).ok().and_then(|d| self.device_by_handle(d)).map(|d| d.ledger_index))
    }

    /// The lane of `ctx`, built on the first launch there (the slow path,
    /// once per context): claims a free lane, creates its events in `ctx`,
    /// publishes it. With no lane to be had the launch is measured by its
    /// stream; a context on no device this process knows is not governed.
    #[cold]
    fn build_lane(&self, ctx: CUcontext) -> (Route<'_>, Option<(usize, u32)>) {
        let Some(dev) = self.device_of_context(ctx) else { return (Route::Pass, None) };
        let throttle = &self.throttle;
        if throttle.clock.now() < throttle.build_after_ns.load(Ordering::Relaxed) {
            return (Route::Unmeasured(dev), None);
        }
        // Another thread may be building this context's lane: wait for it.
        for _ in 0..10_000 {
            if let Some((index, lane)) = throttle.find(ctx as usize) {
                return (Route::Lane(lane), Some((index, lane.epoch.load(Ordering::Acquire))));
            }
            let building = throttle
                .lanes()
                .iter()
                .any(|lane| lane.state.load(Ordering::Acquire) == lane_state::BUILDING && lane.ctx.load(Ordering::Acquire) == ctx as usize);
            if !building {
                break;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        let claimed = throttle.lanes().iter().enumerate().find(|(_, lane)| {
            [lane_state::EMPTY, lane_state::DEAD]
                .into_iter()
                .any(|from| lane.state.compare_exchange(from, lane_state::BUILDING, Ordering::AcqRel, Ordering::Acquire).is_ok())
        });
        let Some((index, lane)) = claimed else {
            self.warn_unmeasured(format_args!("all {MAX_LANES} lanes are taken by other contexts"));
            return (Route::Unmeasured(dev), None);
        };
        lane.ctx.store(ctx as usize, Ordering::Release);
        lane.dev.store(dev, Ordering::Release);
        if let Err(r) = real::with_context(ctx, || create_events(lane)) {
            lane.ctx.store(0, Ordering::Release);
            lane.state.store(lane_state::EMPTY, Ordering::Release);
            throttle.build_after_ns.store(throttle.clock.now().saturating_add(EVENTS_RETRY_NS), Ordering::Relaxed);
            self.warn_unmeasured(format_args!("the driver refused timing events (CUresult {r})"));
            return (Route::Unmeasured(dev), None);
        }
        lane.head.store(0, Ordering::Relaxed);
        lane.tail.store(0, Ordering::Relaxed);
        lane.recent_ns.store(0, Ordering::Relaxed);
        for (i, pair) in lane.pairs.iter().enumerate() {
            pair.seq.store(i as u64, Ordering::Relaxed);
            pair.measured.store(false, Ordering::Relaxed);
        }
        let epoch = EPOCHS.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        lane.epoch.store(epoch, Ordering::Release);
        lane.state.store(lane_state::READY, Ordering::Release);
        debug!("compute limit: {RING} event pairs ready for context {ctx:?} on ledger device {dev}");
        (Route::Lane(lane), Some((index, epoch)))
    }

    fn lane_of_context(&self, ctx: CUcontext) -> (Route<'_>, Option<(usize, u32)>) {
        match self.throttle.find(ctx as usize) {
            Some((index, lane)) => (Route::Lane(lane), Some((index, lane.epoch.load(Ordering::Acquire)))),
            None => self.build_lane(ctx),
        }
    }

    /// Where a launch on `target` goes (see the module docs, step 2).
    fn route(&self, target: &Target) -> Route<'_> {
        let stream = target.stream();
        if stream as usize != 0 && stream as usize != CU_STREAM_LEGACY {
            // The legacy stream cannot capture; any other may.
            match real::stream_capturing(stream) {
                Ok(false) | Err(CUDA_ERROR_NOT_FOUND) => {}
                Ok(true) | Err(_) => return Route::Pass,
            }
        }
        if target.is_default() {
            let ctx = match real::current_context() {
                Ok(ctx) if !ctx.is_null() => ctx,
                _ => return Route::Pass,
            };
            let cached = crate::thread::with(|t| t.lanes.context.get()).filter(|c| c.key == ctx as usize);
            if let Some(lane) = cached.and_then(|c| self.throttle.lane(c.lane, c.epoch)) {
                return Route::Lane(lane);
            }
            let (route, index) = self.lane_of_context(ctx);
            if let Some((lane, epoch)) = index {
                let entry = CachedLane { key: ctx as usize, generation: 0, lane, epoch };
                crate::thread::with(|t| t.lanes.context.set(entry));
            }
            return route;
        }
        let key = stream as usize;
        let generation = STREAM_GENERATION.load(Ordering::Acquire);
        let way = cache_way(key);
        let cached = crate::thread::with(|t| t.lanes.streams.get(way).map(Cell::get))
            .flatten()
            .filter(|c| c.key == key && c.generation == generation);
        if let Some(lane) = cached.and_then(|c| self.throttle.lane(c.lane, c.epoch)) {
            return Route::Lane(lane);
        }
        let ctx = match real::stream_context(stream, false) {
            Ok(ctx) if !ctx.is_null() => ctx,
            Err(CUDA_ERROR_NOT_FOUND) => match real::current_context() {
                Ok(ctx) if !ctx.is_null() => ctx,
                _ => return Route::Pass,
            },
            _ => return Route::Pass,
        };
        let (route, index) = self.lane_of_context(ctx);
        if let Some((lane, epoch)) = index {
            let entry = CachedLane { key, generation, lane, epoch };
            crate::thread::with(|t| t.lanes.streams.get(way).map(|w| w.set(entry)));
        }
        route
    }

    /// What a launch on `target` needs: `None` when nothing is governed there.
    fn plan(&self, target: &Target) -> Option<Plan<'_>> {
        let route = self.route(target);
        let dev = match route {
            Route::Lane(lane) => lane.dev.load(Ordering::Acquire),
            Route::Unmeasured(dev) => dev,
            Route::Pass => return None,
        };
        let ratio_e4 = self.ledger.compute_limit_ratio_e4(dev);
        // A device the monitor arbitrates is not the bucket's to govern.
        (compute::is_limiting(ratio_e4) && !crate::compute::arbitrates(dev)).then_some(Plan {
            route,
            stream: target.stream(),
            dev,
            ratio_e4,
            pos: None,
            started: false,
            measured: false,
        })
    }

    /// Makes a launch on `targets` (one stream, or one per device) under the
    /// compute limit of each target's device: see the module docs.
    pub(crate) fn govern_bucket(&self, targets: &[Target], launch: impl FnOnce() -> CUresult) -> CUresult {
        let mut plans: [Option<Plan<'_>>; MAX_TARGETS] = [None; MAX_TARGETS];
        for (plan, target) in plans.iter_mut().zip(targets) {
            *plan = self.plan(target);
        }
        if plans.iter().all(Option::is_none) {
            return launch();
        }
        let clock = &self.throttle.clock;
        // This launch stands for those that went unsampled since the last
        // sample (one process on one device: see the module docs).
        // (A launch the gate sent here before the countdown ran out stands
        // for fewer.)
        let weight = if self.devices.len() == 1 { sample_weight() } else { 1 };
        // The span of the launches this one stands for runs from the end of
        // the last sample to where this one began to ask: a wait for the
        // bucket or the ring is not theirs, nor are the samples' own records
        // (both were charged as device time, so a limit held a launch-bound
        // loop below its own ceiling: graph launches under a limit of 50 ran
        // at 0.065 of bare).
        let asked_ns = clock.now();
        // Whether the launches it stands for have all run, now and after
        // the wait: what bounds their device time ([`span_ns`]). One or two
        // driver calls per sample that stands for others. Launches of the
        // same context on other streams are not looked at.
        let caught_up = |plans: &[Option<Plan<'_>>; MAX_TARGETS]| {
            weight > 1 && plans.iter().flatten().all(|plan| real::stream_query(plan.stream) == CUDA_SUCCESS)
        };
        let caught_up_at_ask = caught_up(&plans);
        self.admit_and_claim(&mut plans);
        let caught_up_at_record = caught_up_at_ask || caught_up(&plans);
        // A stream that ran dry during the wait would start the bracket at
        // once, on an idle device: see [`defer_sample`].
        let passed_on = SAMPLE_DEFERRED.swap(false, Ordering::Relaxed);
        if caught_up_at_record && !caught_up_at_ask && !passed_on {
            give_back(&mut plans);
            defer_sample(weight, self.mean_gap(&plans, false));
            return launch();
        }
        let recorded_ns = clock.now();
        for plan in plans.iter_mut().flatten() {
            if let (Route::Lane(lane), Some(pos)) = (plan.route, plan.pos) {
                let pair = lane.pair(pos);
                pair.recorded_ns.store(recorded_ns, Ordering::Relaxed);
                let last_ns = lane.last_record_ns.load(Ordering::Relaxed);
                pair.span_ns.store(span_ns(caught_up_at_ask, caught_up_at_record, asked_ns, recorded_ns, last_ns), Ordering::Relaxed);
                plan.started = real::event_record(pair.start.load(Ordering::Relaxed) as CUevent, plan.stream) == CUDA_SUCCESS;
            }
        }
        let r = launch();
        let mut unmeasured = false;
        for plan in plans.iter_mut().flatten() {
            if let (Route::Lane(lane), Some(pos)) = (plan.route, plan.pos) {
                let end = lane.pair(pos).end.load(Ordering::Relaxed) as CUevent;
                plan.measured = r == CUDA_SUCCESS && plan.started && real::event_record(end, plan.stream) == CUDA_SUCCESS;
                lane.pair(pos).host_ns.store(clock.now().saturating_sub(recorded_ns), Ordering::Relaxed);
            }
            unmeasured |= !plan.measured;
        }
        // Where the device caught up inside the bracket, the sample is
        // charged for itself and the launches it stood for pass on: see
        // [`caught_up_in_bracket`]. Asked once the end is recorded: a
        // driver call inside the bracket is host time the bracket counts.
        let alone = weight > 1 && !caught_up_at_ask && !passed_on && r == CUDA_SUCCESS && caught_up_in_bracket(&plans);
        let own_weight = if alone { 1 } else { weight };
        for plan in plans.iter().flatten() {
            if let (Route::Lane(lane), Some(pos)) = (plan.route, plan.pos) {
                lane.publish(pos, plan.measured, own_weight);
            }
        }
        // Where the next sample's span begins. (Threads that sample one lane
        // at once may both count the time since the last end: charged
        // twice, never missed.) Not here where this sample passes the
        // launches it stood for on: the next one's span must still hold
        // them, or a device idle when it asks would bound them by the
        // moment since this launch.
        if !alone {
            let sampled_ns = clock.now();
            for plan in plans.iter().flatten() {
                if let Route::Lane(lane) = plan.route {
                    lane.last_record_ns.store(sampled_ns, Ordering::Relaxed);
                }
            }
        }
        if r != CUDA_SUCCESS {
            return r;
        }
        for plan in plans.iter().flatten() {
            if let Some(bucket) = self.ledger.compute_bucket(plan.dev) {
                bucket.count_launches(own_weight);
            }
        }
        let mean_gap = if unmeasured || self.devices.len() != 1 { 1 } else { self.mean_gap(&plans, caught_up_at_record) };
        // (Also where the end record failed: the launches passed on are
        // still the next sample's, not lost.)
        if alone {
            defer_sample(weight - 1, mean_gap);
        } else {
            next_sample(mean_gap);
        }
        if unmeasured {
            self.charge_by_streams(&plans, recorded_ns);
        }
        r
    }

    /// The mean gap to the next sample after a launch on `plans`, by what
    /// each lane's recent samples charged per launch ([`sample_gap`]).
    fn mean_gap(&self, plans: &[Option<Plan<'_>>; MAX_TARGETS], kept_up: bool) -> u64 {
        let gap = |plan: &Plan<'_>| match plan.route {
            Route::Lane(lane) => sample_gap(lane.recent_launch_ns.load(Ordering::Relaxed), kept_up),
            _ => 1,
        };
        plans.iter().flatten().map(gap).min().unwrap_or(1)
    }

    /// Steps 3 to 5 of the module docs for every plan, all or nothing: a
    /// launch never holds one lane's cell while it waits for another's, so
    /// launches on several devices cannot wait for each other.
    fn admit_and_claim(&self, plans: &mut [Option<Plan<'_>>; MAX_TARGETS]) {
        let clock = &self.throttle.clock;
        loop {
            if let Some(wait) = self.admit(plans) {
                wait.sleep(self, plans, clock);
                continue;
            }
            let mut full: Option<&Lane> = None;
            for plan in plans.iter_mut().flatten() {
                if let Route::Lane(lane) = plan.route {
                    match lane.claim() {
                        Some(pos) => plan.pos = Some(pos),
                        None => {
                            full = Some(lane);
                            break;
                        }
                    }
                }
            }
            let Some(full) = full else { return };
            // Give back what was claimed and wait for the full lane's
            // oldest pair.
            give_back(plans);
            std::thread::sleep(Duration::from_nanos(full.until_oldest_done_ns(clock.now())));
        }
    }

    /// Charges what completed, then asks each plan's bucket whether the
    /// launch may go: `None` when every one says yes.
    fn admit(&self, plans: &mut [Option<Plan<'_>>; MAX_TARGETS]) -> Option<Wait> {
        let clock = &self.throttle.clock;
        let mut wait = Wait::default();
        let mut throttled = [false; MAX_TARGETS];
        for (plan, held) in plans.iter_mut().zip(throttled.iter_mut()) {
            let Some(plan) = plan else { continue };
            let Some(sink) = self.sink(plan.dev) else { continue };
            // A limit changed while this launch waited applies at once.
            plan.ratio_e4 = self.ledger.compute_limit_ratio_e4(plan.dev);
            if let Route::Lane(lane) = plan.route {
                lane.charge_completed(sink, clock);
            }
            let now_ns = compute::monotonic_ns();
            if let Admit::Wait { ns } = sink.bucket.admit(clock, now_ns, plan.ratio_e4) {
                wait.bucket_ns = wait.bucket_ns.max(ns);
                *held = true;
            }
        }
        wait.throttled = throttled;
        (wait.bucket_ns > 0).then_some(wait)
    }

    /// Charges each unmeasured target the host time from `since_ns` until
    /// its stream has run everything (sleeping between queries), and makes
    /// the calling thread look its streams up afresh.
    #[cold]
    fn charge_by_streams(&self, plans: &[Option<Plan<'_>>; MAX_TARGETS], since_ns: u64) {
        let clock = &self.throttle.clock;
        for plan in plans.iter().flatten().filter(|p| !p.measured) {
            let mut poll_ns = MIN_POLL_NS;
            while real::stream_query(plan.stream) == CUDA_ERROR_NOT_READY {
                std::thread::sleep(Duration::from_nanos(poll_ns));
                poll_ns = (poll_ns * 2).min(MAX_POLL_NS);
            }
            if let Some(sink) = self.sink(plan.dev) {
                sink.charge(clock.now().saturating_sub(since_ns));
            }
        }
        crate::thread::with(|t| t.lanes.forget());
    }

    /// Charges every pair of this process that completed (after a
    /// synchronisation: the client waited for its work, so it is done).
    pub fn charge_completed_launches(&self) {
        for lane in self.throttle.lanes().iter() {
            if lane.state.load(Ordering::Acquire) != lane_state::READY {
                continue;
            }
            if let Some(sink) = self.sink(lane.dev.load(Ordering::Acquire)) {
                lane.charge_completed(sink, &self.throttle.clock);
            }
        }
    }

    /// Before context `ctx` is destroyed (its events go with it): charges
    /// its lanes' pairs as they complete, waiting for them as the
    /// destruction would, then retires the lanes.
    pub(crate) fn forget_lanes_of(&self, ctx: usize) {
        for lane in self.throttle.lanes().iter() {
            if lane.state.load(Ordering::Acquire) != lane_state::READY || lane.ctx.load(Ordering::Acquire) != ctx {
                continue;
            }
            if let Some(sink) = self.sink(lane.dev.load(Ordering::Acquire)) {
                let until = std::time::Instant::now() + DRAIN_WAIT;
                while lane.charge_completed(sink, &self.throttle.clock) && std::time::Instant::now() < until {
                    std::thread::sleep(Duration::from_nanos(lane.poll_ns()));
                }
            }
            let _ = lane.state.compare_exchange(lane_state::READY, lane_state::DEAD, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    fn warn_unmeasured(&self, why: std::fmt::Arguments<'_>) {
        if !self.throttle.warned_unmeasured.swap(true, Ordering::Relaxed) {
            warn!("compute limit: {why}; launches there are measured by waiting for their streams, which is slower");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{defer_sample, sample_gap, sample_weight, sampled_charge_ns, span_ns, unsampled};
    use super::{SAMPLE_WORK_KEPT_UP_NS, SAMPLE_WORK_NS};

    #[test]
    fn a_deferred_sample_is_taken_over_by_the_next_sample() {
        // (The only test of this module's sampling statics.)
        defer_sample(48, 1);
        assert!(!unsampled(), "with a gap of one, the launch after a deferred sample is sampled");
        assert_eq!(sample_weight(), 49);
        // With a longer gap, the launches between are not sampled and the
        // sample at its end stands for them too.
        defer_sample(48, 10);
        let mut launches = 1;
        while unsampled() {
            launches += 1;
            assert!(launches < 20, "a gap of mean 10 is at most 19 launches");
        }
        assert_eq!(sample_weight(), 48 + launches);
    }

    #[test]
    fn samples_are_sparser_only_where_the_device_keeps_up() {
        // Graph launches charged 350 ns each, the device idle at the sample.
        assert_eq!(sample_gap(350, true), SAMPLE_WORK_KEPT_UP_NS / 350);
        // 1 µs kernels the device is behind on.
        assert_eq!(sample_gap(1_000, false), SAMPLE_WORK_NS / 1_000);
        assert!(sample_gap(1_000, true) > sample_gap(1_000, false));
        // Long launches are bracketed one by one either way, and a lane
        // with nothing measured yet samples every launch.
        assert_eq!(sample_gap(SAMPLE_WORK_NS, true), 1);
        assert_eq!(sample_gap(200_000, false), 1);
        assert_eq!(sample_gap(0, true), 1);
    }

    #[test]
    fn a_launch_alone_is_charged_as_measured() {
        assert_eq!(sampled_charge_ns(5_000, 1, 0, 0), 5_000);
        assert_eq!(sampled_charge_ns(5_000, 1, 1, 1_000_000), 5_000);
    }

    #[test]
    fn a_sample_the_host_explains_is_charged_no_more_than_the_span_and_itself() {
        // 100 launches of a loop at 120 ns each, the sample's bracket 300
        // ns of the host's 400: the estimate (30 µs) is bounded by the
        // span of the other 99 (11.88 µs) and the sample's own time.
        assert_eq!(sampled_charge_ns(300, 100, 11_880, 400), 11_880 + 300);
        // A short span never charges less than the estimate would.
        assert_eq!(sampled_charge_ns(300, 2, 1_000_000, 400), 600);
    }

    #[test]
    fn a_sample_behind_the_device_is_charged_for_each_launch_it_stands_for() {
        // A 5 µs kernel behind a queue: its bracket is longer than the
        // host's time on it, and the span says nothing of the device.
        assert_eq!(sampled_charge_ns(5_000, 10, 1_000, 800), 50_000);
    }

    #[test]
    fn launches_the_device_had_not_run_are_charged_the_estimate_not_the_span() {
        // 1 µs kernels made at 0.5 µs each: 100 of them in 50 µs of host
        // time (from 1_000_000 to 1_050_000), the sample's bracket 1 µs of
        // the host's 1.2 µs.
        let (last, asked) = (1_000_000, 1_050_000);
        // The stream still busy after the sample's wait: they take 100 µs
        // of the device, whatever the host's time.
        let unbounded = span_ns(false, false, asked, asked + 200_000, last);
        assert_eq!(sampled_charge_ns(1_000, 100, unbounded, 1_200), 100_000);
        // Idle when the sample asked: they ran within their 50 µs.
        assert_eq!(sampled_charge_ns(1_000, 100, span_ns(true, true, asked, asked + 200_000, last), 1_200), 51_000);
        // Busy when it asked, idle after a wait of 20 µs: within 70 µs.
        assert_eq!(sampled_charge_ns(1_000, 100, span_ns(false, true, asked, asked + 20_000, last), 1_200), 71_000);
        // The first sample of a lane has no span.
        assert_eq!(span_ns(false, false, asked, asked, 0), 0);
    }
}
