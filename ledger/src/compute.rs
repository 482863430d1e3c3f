//! Compute time: each tenant's limit on each device and the budget of
//! device time that enforces it.
//!
//! # The limit
//! A device's limit is a ratio × 10 000 of the device's time
//! ([`PolicyRecord::compute_limit_ratio_e4`]); 0 is no ceiling, and so is
//! 10 000 (the whole device). Who set it is kept beside it
//! ([`PolicyRecord::compute_limit_source`]), and a process's environment
//! applies its limit by the rule a memory cap follows
//! ([`Ledger::apply_environment`]): one decision, taken
//! against the limit in force, so processes of one tenant starting together
//! agree on one limit, and the monitor's limit always stands.
//!
//! # The bucket
//! Each (tenant, device) has one token bucket of device time, in the compute
//! page ([`ComputeRecord`]), shared by every process of the tenant:
//! - it fills at `limit × wall time` since it was last filled, measured on
//!   `CLOCK_MONOTONIC` ([`ComputeBucket::refill`]), up to a burst
//!   ([`burst_ns`]);
//! - measured device time is taken out of it after the work ran
//!   ([`ComputeBucket::charge`]), so it goes negative when work ran longer
//!   than was refilled: the debt is waited out before more work starts;
//! - a launch may start while it holds a positive amount, and otherwise
//!   waits until the refill makes it positive ([`ComputeBucket::admit`]).
//!
//! Over any interval of length `T`, the tokens that come in are at most
//! `limit × T` plus what the bucket held at its start (at most the burst),
//! and every charge comes out: the work charged within `T` is at most
//! `limit × T + burst` plus the debt left at its end. The throttle in the
//! shim keeps the uncharged part (work submitted and not yet measured)
//! bounded, so the device time a tenant gets is its limit, give or take the
//! burst and that bound.
//!
//! # The burst
//! [`burst_ns`] is what the limit earns in [`BURST_WINDOW_NS`], 100 ms (and
//! at least [`MIN_BURST_NS`]): after an idle spell the tenant may run at full
//! speed for that long before the limit holds it. Over a window of `T` the
//! tenant gets at most `limit × (T + 100 ms)`: 3.3 points above a 30 % limit
//! over one second, 1 point over ten. Smaller would not make the limit more
//! exact at the scale it is measured (NVML samples utilisation about every
//! 1/6 s), and larger would let a tenant that waits run unthrottled for
//! longer than one such sample.
//!
//! # Arithmetic that cannot go wrong
//! Every word is changed by one atomic read-modify-write (`fetch_add`, or a
//! CAS loop): no lock, and no interleaving of threads or processes loses a
//! charge. The refill claims its interval with a CAS on `refill_ns` before it
//! adds the tokens of that interval, so two refillers never add the same
//! interval twice (a refiller killed between the two steps loses one
//! interval's tokens: the safe side). Sums saturate instead of wrapping; a
//! charge is bounded ([`MAX_CHARGE_NS`]) and so is the debt ([`MIN_TOKENS_NS`]).
//!
//! # Clocks
//! `CLOCK_MONOTONIC` is one clock for every process of a host, except across
//! time namespaces, where each namespace may see it offset. A process whose
//! clock reads earlier than the bucket's last refill adds nothing (the time
//! was paid for already); when it reads more than [`CLOCK_SKEW_NS`] earlier,
//! its clock is not late but offset, and its [`BucketClock`] takes the
//! difference on from then on, so that it refills again at the tenant's
//! pace instead of waiting for its own clock to catch up.

use crate::accounts::{write_pair, write_under_epoch, ComputeLimit, Decision, PolicyPair};
use crate::layout::{ComputeRecord, PolicyRecord};
use crate::units::{parse_per_device, ListError, PerDevice};
use crate::{Ledger, PolicySource, MAX_DEVICES};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// The whole device, as a ratio × 10 000.
pub const WHOLE_DEVICE_RATIO_E4: u32 = 10_000;

/// The burst is what the limit earns in this long (see the module docs).
pub const BURST_WINDOW_NS: u64 = 100_000_000;
/// The smallest burst, so that a tiny limit still admits work promptly
/// after an idle spell.
pub const MIN_BURST_NS: i64 = 1_000_000;
/// The deepest debt the bucket records: an hour of device time. Only a
/// measurement gone wrong gets near it.
pub const MIN_TOKENS_NS: i64 = -3_600_000_000_000;
/// The most one charge takes: an hour of device time.
pub const MAX_CHARGE_NS: u64 = 3_600_000_000_000;
/// The longest wait [`ComputeBucket::admit`] asks for at once: whoever
/// waits asks again, and sees a limit changed meanwhile.
pub const MAX_WAIT_NS: u64 = 100_000_000;
/// A clock reading this much before the bucket's last refill is taken for
/// an offset clock (another time namespace), not a late reader.
pub const CLOCK_SKEW_NS: u64 = 1_000_000_000;

/// Whether a limit holds the tenant below the whole device: 0 (none) and
/// the whole device itself govern nothing.
pub fn is_limiting(ratio_e4: u32) -> bool {
    ratio_e4 > 0 && ratio_e4 < WHOLE_DEVICE_RATIO_E4
}

/// The most device time the bucket holds under a limit of `ratio_e4`.
pub fn burst_ns(ratio_e4: u32) -> i64 {
    let earned = u128::from(BURST_WINDOW_NS) * u128::from(ratio_e4.min(WHOLE_DEVICE_RATIO_E4)) / 10_000;
    i64::try_from(earned).unwrap_or(i64::MAX).max(MIN_BURST_NS)
}

/// `CLOCK_MONOTONIC` in ns: the clock of every bucket.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// One process's reading of the tenant's bucket clock: its
/// `CLOCK_MONOTONIC` plus the offset it learnt from other processes' refills
/// (see the module docs).
#[derive(Debug, Default)]
pub struct BucketClock {
    offset_ns: AtomicU64,
}

impl BucketClock {
    pub const fn new() -> BucketClock {
        BucketClock { offset_ns: AtomicU64::new(0) }
    }

    /// The bucket time for this process's raw clock reading.
    pub fn read(&self, raw_ns: u64) -> u64 {
        raw_ns.saturating_add(self.offset_ns.load(Ordering::Relaxed))
    }

    /// The bucket time now.
    pub fn now(&self) -> u64 {
        self.read(monotonic_ns())
    }

    /// Told that a reading was `by_ns` before the bucket's last refill: an
    /// offset clock, when that is more than [`CLOCK_SKEW_NS`].
    fn behind(&self, by_ns: u64) {
        if by_ns > CLOCK_SKEW_NS {
            let _ = self.offset_ns.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |o| Some(o.saturating_add(by_ns)));
        }
    }

    /// The offset this process has taken on.
    pub fn offset_ns(&self) -> u64 {
        self.offset_ns.load(Ordering::Relaxed)
    }
}

/// What a refill did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refill {
    /// Claimed the time since the last refill and added its tokens (after
    /// the burst cap: possibly none).
    Added { elapsed_ns: u64 },
    /// The reading was not after the last refill: nothing to add.
    Behind { by_ns: u64 },
}

/// Whether work may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The bucket holds device time (or the device has no limit).
    Now,
    /// The bucket is empty or in debt: the refill makes it positive in
    /// about this long (at most [`MAX_WAIT_NS`]; ask again after it).
    Wait { ns: u64 },
}

/// How long a limit of `ratio_e4` takes to refill a bucket holding
/// `tokens_ns` to a positive amount; 0 when it holds some.
pub fn wait_ns(tokens_ns: i64, ratio_e4: u32) -> u64 {
    if tokens_ns > 0 || ratio_e4 == 0 {
        return 0;
    }
    let missing = u128::from(tokens_ns.unsigned_abs()) + 1;
    let ns = (missing * 10_000).div_ceil(u128::from(ratio_e4));
    u64::try_from(ns).unwrap_or(u64::MAX).min(MAX_WAIT_NS)
}

/// One device's bucket and counters, for every process of the tenant.
#[derive(Clone, Copy)]
pub struct ComputeBucket<'a> {
    record: &'a ComputeRecord,
}

impl<'a> ComputeBucket<'a> {
    /// The bucket of a record (the ledger's, or a test's own).
    pub fn of(record: &'a ComputeRecord) -> ComputeBucket<'a> {
        ComputeBucket { record }
    }

    /// Adds what a limit of `ratio_e4` earned since the last refill, up to
    /// the burst; `now_ns` is bucket time ([`BucketClock::read`]).
    pub fn refill(&self, now_ns: u64, ratio_e4: u32) -> Refill {
        let mut last = self.record.refill_ns.load(Ordering::Acquire);
        loop {
            if now_ns <= last {
                return Refill::Behind { by_ns: last - now_ns };
            }
            match self.record.refill_ns.compare_exchange_weak(last, now_ns, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(newer) => last = newer,
            }
        }
        let elapsed_ns = now_ns - last;
        let earned = u128::from(elapsed_ns) * u128::from(ratio_e4.min(WHOLE_DEVICE_RATIO_E4)) / 10_000;
        let earned = i64::try_from(earned).unwrap_or(i64::MAX);
        let burst = burst_ns(ratio_e4);
        let _ = self.record.tokens_ns.fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
            // A bucket over the burst (the limit was lowered) comes down to it.
            Some(tokens.saturating_add(earned).min(burst))
        });
        Refill::Added { elapsed_ns }
    }

    /// Refills, then says whether work may start under a limit of
    /// `ratio_e4` (a ratio that limits nothing always admits).
    pub fn admit(&self, clock: &BucketClock, raw_now_ns: u64, ratio_e4: u32) -> Admit {
        if !is_limiting(ratio_e4) {
            return Admit::Now;
        }
        if let Refill::Behind { by_ns } = self.refill(clock.read(raw_now_ns), ratio_e4) {
            clock.behind(by_ns);
        }
        match wait_ns(self.tokens_ns(), ratio_e4) {
            0 => Admit::Now,
            ns => Admit::Wait { ns },
        }
    }

    /// Takes measured device time out of the bucket (at most
    /// [`MAX_CHARGE_NS`]; the bucket stops at [`MIN_TOKENS_NS`]) and counts it.
    pub fn charge(&self, busy_ns: u64) {
        let busy_ns = busy_ns.min(MAX_CHARGE_NS);
        if busy_ns == 0 {
            return;
        }
        let _ = self.record.tokens_ns.fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
            Some(tokens.saturating_sub(busy_ns as i64).max(MIN_TOKENS_NS).min(tokens))
        });
        self.record.busy_ns_total.fetch_add(busy_ns, Ordering::Relaxed);
    }

    /// Counts measured device time without taking it out of the bucket (a
    /// device the tenant takes turns on without a limit).
    pub fn count_busy(&self, busy_ns: u64) {
        self.record.busy_ns_total.fetch_add(busy_ns.min(MAX_CHARGE_NS), Ordering::Relaxed);
    }

    /// Counts launch calls.
    pub fn count_launches(&self, launches: u64) {
        self.record.launches_total.fetch_add(launches, Ordering::Relaxed);
    }

    /// Counts time a launch waited for the bucket.
    pub fn count_throttled(&self, ns: u64) {
        self.record.throttled_ns_total.fetch_add(ns, Ordering::Relaxed);
    }

    /// Device time the bucket holds (negative: a debt).
    pub fn tokens_ns(&self) -> i64 {
        self.record.tokens_ns.load(Ordering::Acquire)
    }
}

impl Ledger {
    fn compute_policy_record(&self, dev: usize) -> Option<&PolicyRecord> {
        self.policy(dev)
    }

    fn compute_record(&self, dev: usize) -> Option<&ComputeRecord> {
        self.layout().compute.devices.get(dev)
    }

    /// The tenant's compute limit on device `dev`, ratio × 10 000 (0: no
    /// ceiling). Read on every launch on a limited device.
    pub fn compute_limit_ratio_e4(&self, dev: usize) -> u32 {
        self.compute_policy_record(dev).map_or(0, |p| p.compute_limit_ratio_e4.load(Ordering::Acquire))
    }

    /// Who set the compute limit on device `dev`.
    pub fn compute_limit_source(&self, dev: usize) -> PolicySource {
        self.compute_policy_record(dev)
            .map_or(PolicySource::Unset, |p| PolicySource::from_u32(p.compute_limit_source.load(Ordering::Acquire)))
    }

    /// Sets the compute limit on device `dev` (the monitor, or a tool).
    pub fn set_compute_limit(&self, dev: usize, ratio_e4: u32, source: PolicySource) {
        if let Some(policy) = self.compute_policy_record(dev) {
            write_pair::<ComputeLimit>(policy, |_, _| Some((ratio_e4, source)));
        }
    }

    /// [`apply_environment`](Ledger::apply_environment) for the compute
    /// limit, a ratio × 10 000: the rule a memory cap follows.
    pub fn apply_environment_compute_limit(&self, dev: usize, ratio_e4: u32, may_replace: impl FnMut() -> bool) -> Decision<u32> {
        self.apply_environment::<ComputeLimit>(dev, ratio_e4, may_replace)
    }

    /// The compute settings of device `dev` (all zero until set).
    pub fn compute_policy(&self, dev: usize) -> crate::ComputePolicy {
        self.compute_policy_record(dev).map_or(crate::ComputePolicy::default(), |p| crate::ComputePolicy {
            share_ratio_e4: p.compute_share_ratio_e4.load(Ordering::Acquire),
            limit_ratio_e4: p.compute_limit_ratio_e4.load(Ordering::Acquire),
            priority: p.priority.load(Ordering::Acquire),
        })
    }

    /// Sets the compute settings of device `dev`, the limit as the monitor's.
    /// All of them are written under the compute epoch, so that a process
    /// applying its environment's share and priority
    /// ([`apply_environment_claim`](Self::apply_environment_claim)) either
    /// finishes before or sees the monitor's settings and stands back.
    pub fn set_compute_policy(&self, dev: usize, compute: crate::ComputePolicy) {
        if let Some(policy) = self.compute_policy_record(dev) {
            write_under_epoch(
                &policy.compute_epoch,
                || (),
                Some,
                |()| {
                    policy.compute_share_ratio_e4.store(compute.share_ratio_e4, Ordering::SeqCst);
                    policy.priority.store(compute.priority, Ordering::SeqCst);
                    ComputeLimit::write(policy, compute.limit_ratio_e4, PolicySource::Monitor);
                },
            );
        }
    }

    /// Applies a process's environment share and priority to device `dev`
    /// (each when given), unless the monitor set the device's compute
    /// settings: its configuration stands. Decided on the compute limit's
    /// source and written under the compute epoch, as the limit is
    /// ([`write_under_epoch`]): a monitor that sets the device's settings
    /// meanwhile makes the decision be taken again. Returns whether it
    /// applied them.
    pub fn apply_environment_claim(&self, dev: usize, share_ratio_e4: Option<u32>, priority: Option<i32>) -> bool {
        let Some(policy) = self.compute_policy_record(dev) else { return false };
        let mut applied = false;
        write_under_epoch(
            &policy.compute_epoch,
            || ComputeLimit::read(policy).1,
            |source| {
                applied = source != PolicySource::Monitor;
                applied.then_some(())
            },
            |()| {
                if let Some(share) = share_ratio_e4 {
                    policy.compute_share_ratio_e4.store(share.min(WHOLE_DEVICE_RATIO_E4), Ordering::SeqCst);
                }
                if let Some(priority) = priority {
                    policy.priority.store(priority, Ordering::SeqCst);
                }
            },
        );
        applied
    }

    /// The bucket of device `dev`.
    pub fn compute_bucket(&self, dev: usize) -> Option<ComputeBucket<'_>> {
        self.compute_record(dev).map(ComputeBucket::of)
    }

    /// Launch calls counted on `dev` while it had a limit.
    pub fn launches_total(&self, dev: usize) -> u64 {
        self.compute_record(dev).map_or(0, |c| c.launches_total.load(Ordering::Relaxed))
    }

    /// Device time charged on `dev`, ns.
    pub fn busy_ns_total(&self, dev: usize) -> u64 {
        self.compute_record(dev).map_or(0, |c| c.busy_ns_total.load(Ordering::Relaxed))
    }

    /// Time launches on `dev` waited for the compute limit, ns.
    pub fn throttled_ns_total(&self, dev: usize) -> u64 {
        self.compute_record(dev).map_or(0, |c| c.throttled_ns_total.load(Ordering::Relaxed))
    }
}

/// What a compute limit may look like, for error messages.
pub const COMPUTE_LIMIT_FORMAT: &str =
    "a percentage of device time from 1 to 100 for every device (30) or a per-device list like 0=30,1=60";

/// Why a compute setting (a limit, a share or a priority) was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComputeLimitError {
    /// The text holds a character that is not ASCII.
    NotAscii(char),
    /// Not a whole number of percent (as written).
    NotAPercent(String),
    /// A number with a leading zero (as written).
    LeadingZero(String),
    /// A percentage outside the range accepted (as written, and that range).
    OutOfRange { value: String, low: u32 },
    /// Not a whole number in [`PRIORITY_RANGE`] (as written).
    NotAPriority(String),
    /// A per-device entry is not `INDEX=PERCENT`.
    BadEntry(String),
    /// A device index (as written) that is not plain decimal below `MAX_DEVICES`.
    BadDeviceIndex(String),
    /// A device index appears twice.
    DuplicateDevice(u32),
}

impl fmt::Display for ComputeLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ComputeLimitError::NotAscii(c) => write!(f, "it contains U+{:04X}, which is not ASCII", *c as u32),
            ComputeLimitError::NotAPercent(text) => write!(f, "{text:?} is not a whole number of percent"),
            ComputeLimitError::LeadingZero(text) => write!(
                f,
                "{text:?} has a leading zero, which is ambiguous (HAMi-core reads 010 as octal 8); write the number \
                 without leading zeros"
            ),
            ComputeLimitError::OutOfRange { value, low } => write!(f, "{value} is not a percentage from {low} to 100"),
            ComputeLimitError::NotAPriority(text) => {
                write!(f, "{text:?} is not a whole number from {} to {}", PRIORITY_RANGE.start(), PRIORITY_RANGE.end())
            }
            ComputeLimitError::BadEntry(entry) => write!(f, "entry {entry:?} is not INDEX=PERCENT"),
            ComputeLimitError::BadDeviceIndex(index) => write!(
                f,
                "device index {index:?} is invalid: expected 0 to {} in plain decimal, without sign or leading zeros",
                MAX_DEVICES - 1
            ),
            ComputeLimitError::DuplicateDevice(index) => write!(f, "device {index} is given twice"),
        }
    }
}

impl std::error::Error for ComputeLimitError {}

impl From<ListError> for ComputeLimitError {
    fn from(e: ListError) -> Self {
        match e {
            ListError::NotAscii(c) => ComputeLimitError::NotAscii(c),
            ListError::BadEntry(entry) => ComputeLimitError::BadEntry(entry),
            ListError::BadDeviceIndex(index) => ComputeLimitError::BadDeviceIndex(index),
            ListError::DuplicateDevice(index) => ComputeLimitError::DuplicateDevice(index),
        }
    }
}

/// Parses a whole percentage from `low` to 100: ASCII digits, no sign, no
/// leading zeros, ASCII whitespace around it allowed.
pub fn parse_percent(text: &str, low: u32) -> Result<u32, ComputeLimitError> {
    if let Some(c) = text.chars().find(|c| !c.is_ascii()) {
        return Err(ComputeLimitError::NotAscii(c));
    }
    let number = text.trim_ascii();
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ComputeLimitError::NotAPercent(number.to_string()));
    }
    if number.len() > 1 && number.starts_with('0') {
        return Err(ComputeLimitError::LeadingZero(number.to_string()));
    }
    match number.parse::<u32>() {
        Ok(percent) if (low..=100).contains(&percent) => Ok(percent),
        _ => Err(ComputeLimitError::OutOfRange { value: number.to_string(), low }),
    }
}

/// Parses `GPUSLICE_COMPUTE_LIMIT` (and `GPUSLICE_COMPUTE_SHARE`): `30` or
/// `0=30,1=60`, each percentage from 1 to 100 (see [`parse_per_device`]).
pub fn parse_compute_limit(text: &str) -> Result<PerDevice<u32>, ComputeLimitError> {
    parse_per_device(text, |percent| parse_percent(percent, 1))
}

/// The priorities a tenant may have; higher is served first, 0 by default.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -1000..=1000;

/// What a priority may look like, for error messages.
pub const PRIORITY_FORMAT: &str =
    "a whole number from -1000 to 1000 (higher is served first; default 0) for every device, like 1, or per device, like 0=1,1=0";

/// A priority given as a number (the configuration's), if it is in [`PRIORITY_RANGE`].
pub fn priority_in_range(value: i64) -> Option<i32> {
    i32::try_from(value).ok().filter(|p| PRIORITY_RANGE.contains(p))
}

/// Parses one priority: a whole number in [`PRIORITY_RANGE`], an optional
/// `-`, no `+`, no leading zeros, ASCII whitespace around it allowed.
pub fn parse_priority(text: &str) -> Result<i32, ComputeLimitError> {
    if let Some(c) = text.chars().find(|c| !c.is_ascii()) {
        return Err(ComputeLimitError::NotAscii(c));
    }
    let number = text.trim_ascii();
    let digits = number.strip_prefix('-').unwrap_or(number);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ComputeLimitError::NotAPriority(number.to_string()));
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(ComputeLimitError::LeadingZero(number.to_string()));
    }
    number.parse().ok().and_then(priority_in_range).ok_or_else(|| ComputeLimitError::NotAPriority(number.to_string()))
}

/// Parses `GPUSLICE_PRIORITY`: `1` or `0=1,1=0` (see [`parse_per_device`]).
pub fn parse_priorities(text: &str) -> Result<PerDevice<i32>, ComputeLimitError> {
    parse_per_device(text, parse_priority)
}

/// A percentage as the ledger's ratio × 10 000.
pub fn percent_ratio_e4(percent: u32) -> u32 {
    percent.min(100) * 100
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, AtomicU64};

    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    fn record() -> ComputeRecord {
        ComputeRecord {
            tokens_ns: AtomicI64::new(0),
            refill_ns: AtomicU64::new(0),
            launches_total: AtomicU64::new(0),
            busy_ns_total: AtomicU64::new(0),
            throttled_ns_total: AtomicU64::new(0),
            reserved0: Default::default(),
            reserved: Default::default(),
        }
    }

    #[test]
    fn the_burst_is_what_the_limit_earns_in_the_window() {
        assert_eq!(burst_ns(3000), 30 * MS as i64);
        assert_eq!(burst_ns(10_000), 100 * MS as i64);
        assert_eq!(burst_ns(1), MIN_BURST_NS);
        assert_eq!(burst_ns(u32::MAX), 100 * MS as i64);
    }

    #[test]
    fn a_refill_adds_the_limit_times_the_time_since_the_last_up_to_the_burst() {
        let r = record();
        let bucket = ComputeBucket::of(&r);
        // A fresh bucket starts full.
        assert_eq!(bucket.refill(10 * S, 3000), Refill::Added { elapsed_ns: 10 * S });
        assert_eq!(bucket.tokens_ns(), 30 * MS as i64);
        bucket.charge(50 * MS);
        assert_eq!(bucket.tokens_ns(), -20 * MS as i64);
        // 10 ms at 30 % earns 3 ms.
        assert_eq!(bucket.refill(10 * S + 10 * MS, 3000), Refill::Added { elapsed_ns: 10 * MS });
        assert_eq!(bucket.tokens_ns(), -17 * MS as i64);
        // A long wait earns no more than the burst.
        bucket.refill(100 * S, 3000);
        assert_eq!(bucket.tokens_ns(), 30 * MS as i64);
        // A lowered limit brings a full bucket down to its own burst.
        bucket.refill(100 * S + 1, 1000);
        assert_eq!(bucket.tokens_ns(), 10 * MS as i64);
    }

    #[test]
    fn a_debt_is_waited_out_at_the_limit() {
        assert_eq!(wait_ns(1, 3000), 0);
        assert_eq!(wait_ns(0, 3000), 4);
        // 3 ms of debt at 30 %: 10 ms, and a little to be positive.
        assert_eq!(wait_ns(-3 * MS as i64, 3000), 10 * MS + 4);
        assert_eq!(wait_ns(MIN_TOKENS_NS, 1), MAX_WAIT_NS);
        assert_eq!(wait_ns(i64::MIN, 1), MAX_WAIT_NS);
        assert_eq!(wait_ns(-5, 0), 0, "no limit, no wait");
        let r = record();
        let bucket = ComputeBucket::of(&r);
        let clock = BucketClock::new();
        assert_eq!(bucket.admit(&clock, S, 3000), Admit::Now);
        bucket.charge(33 * MS);
        assert_eq!(bucket.admit(&clock, S, 3000), Admit::Wait { ns: 10 * MS + 4 });
        assert_eq!(bucket.admit(&clock, S + 10 * MS, 3000), Admit::Wait { ns: 4 });
        assert_eq!(bucket.admit(&clock, S + 10 * MS + 4, 3000), Admit::Now);
        // No limit, or the whole device, admits whatever the bucket holds.
        bucket.charge(S);
        assert_eq!(bucket.admit(&clock, S + 10 * MS + 4, 0), Admit::Now);
        assert_eq!(bucket.admit(&clock, S + 10 * MS + 4, 10_000), Admit::Now);
    }

    #[test]
    fn nothing_overflows() {
        let r = record();
        let bucket = ComputeBucket::of(&r);
        bucket.refill(u64::MAX, u32::MAX);
        assert_eq!(bucket.tokens_ns(), burst_ns(10_000));
        bucket.charge(u64::MAX);
        assert_eq!(bucket.tokens_ns(), burst_ns(10_000) - MAX_CHARGE_NS as i64);
        for _ in 0..3 {
            bucket.charge(MAX_CHARGE_NS);
        }
        assert_eq!(bucket.tokens_ns(), MIN_TOKENS_NS, "the debt stops at its floor");
        r.tokens_ns.store(i64::MIN, Ordering::SeqCst);
        bucket.charge(1);
        assert_eq!(bucket.tokens_ns(), i64::MIN, "a charge never raises a corrupt bucket");
        r.tokens_ns.store(i64::MAX, Ordering::SeqCst);
        r.refill_ns.store(0, Ordering::SeqCst);
        bucket.refill(1, 3000);
        assert_eq!(bucket.tokens_ns(), burst_ns(3000));
        assert_eq!(r.busy_ns_total.load(Ordering::SeqCst), 4 * MAX_CHARGE_NS + 1);
        bucket.count_launches(u64::MAX);
        bucket.count_throttled(7);
        assert_eq!(r.throttled_ns_total.load(Ordering::SeqCst), 7);
    }

    #[test]
    fn a_reader_behind_the_last_refill_adds_nothing() {
        let r = record();
        let bucket = ComputeBucket::of(&r);
        bucket.refill(10 * S, 3000);
        bucket.charge(30 * MS);
        assert_eq!(bucket.refill(10 * S - MS, 3000), Refill::Behind { by_ns: MS });
        assert_eq!(bucket.refill(10 * S, 3000), Refill::Behind { by_ns: 0 });
        assert_eq!(bucket.tokens_ns(), 0);
        // A late reader does not take on an offset; an offset clock does.
        let clock = BucketClock::new();
        bucket.admit(&clock, 10 * S - MS, 3000);
        assert_eq!(clock.offset_ns(), 0);
    }

    /// Two processes in time namespaces whose clocks differ by an hour share
    /// one bucket: neither gets more than the limit, and both keep getting it.
    #[test]
    fn processes_whose_clocks_differ_share_the_bucket_at_the_limit() {
        let r = record();
        let bucket = ComputeBucket::of(&r);
        let (early, late) = (BucketClock::new(), BucketClock::new());
        let hour = 3600 * S;
        // The process whose clock reads an hour ahead refills first.
        let mut real = 100 * S;
        bucket.admit(&late, real + hour, 5000);
        let start_tokens = bucket.tokens_ns();
        let mut busy = 0u64;
        // Both launch 1 ms kernels in turn for 10 s of real time, each
        // charging what it ran when admitted.
        let end = real + 10 * S;
        let mut early_admitted = 0;
        while real < end {
            for (clock, raw_offset, admitted) in [(&early, 0, &mut early_admitted), (&late, hour, &mut 0)] {
                if bucket.admit(clock, real + raw_offset, 5000) == Admit::Now {
                    bucket.charge(MS);
                    busy += MS;
                    *admitted += 1;
                }
            }
            real += MS / 2;
        }
        assert!(early.offset_ns() >= hour - S, "the early clock took the offset on: {}", early.offset_ns());
        assert!(early_admitted > 1000, "the early process keeps running: {early_admitted}");
        let allowed = 10 * S / 2 + start_tokens as u64 + MS;
        assert!(busy <= allowed && busy >= 10 * S / 2 - 20 * MS, "{busy} ns charged, at most {allowed} allowed");
    }

    #[test]
    fn concurrent_refills_add_each_interval_once() {
        let r = record();
        let bucket = ComputeBucket::of(&r);
        bucket.refill(1, 10_000);
        r.tokens_ns.store(-(10 * S as i64), Ordering::SeqCst);
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                scope.spawn(move || {
                    for i in 0..10_000u64 {
                        bucket.refill(1 + (i * 4 + t) * 1000, 10_000);
                    }
                });
            }
        });
        // Every refill reads a time within the last 40 ms: the sum of the
        // intervals added is the span from the first to the greatest reading.
        let last = r.refill_ns.load(Ordering::SeqCst);
        assert_eq!(bucket.tokens_ns(), -(10 * S as i64) + (last - 1) as i64);
    }

    #[test]
    fn compute_limits_parse_strictly() {
        assert_eq!(parse_compute_limit("30"), Ok(PerDevice::all_devices(30)));
        assert_eq!(parse_compute_limit(" 100 "), Ok(PerDevice::all_devices(100)));
        assert_eq!(parse_compute_limit("0=30,1=60").map(|l| l.devices), Ok(vec![(0, 30), (1, 60)]));
        assert_eq!(parse_compute_limit("15=1").unwrap().for_device(15), Some(1));
        for (bad, error) in [
            ("", ComputeLimitError::NotAPercent(String::new())),
            ("0", ComputeLimitError::OutOfRange { value: "0".into(), low: 1 }),
            ("101", ComputeLimitError::OutOfRange { value: "101".into(), low: 1 }),
            ("99999999999", ComputeLimitError::OutOfRange { value: "99999999999".into(), low: 1 }),
            ("030", ComputeLimitError::LeadingZero("030".into())),
            ("30%", ComputeLimitError::NotAPercent("30%".into())),
            ("0.5", ComputeLimitError::NotAPercent("0.5".into())),
            ("-5", ComputeLimitError::NotAPercent("-5".into())),
            ("3\u{a0}", ComputeLimitError::NotAscii('\u{a0}')),
            ("0=30,0=40", ComputeLimitError::DuplicateDevice(0)),
            ("0=30,00=40", ComputeLimitError::BadDeviceIndex("00".into())),
            ("16=30", ComputeLimitError::BadDeviceIndex("16".into())),
            ("0=30,", ComputeLimitError::BadEntry(String::new())),
            ("x=30", ComputeLimitError::BadEntry("x=30".into())),
            ("+1=30", ComputeLimitError::BadEntry("+1=30".into())),
            ("0=0", ComputeLimitError::OutOfRange { value: "0".into(), low: 1 }),
            ("0=30=40", ComputeLimitError::NotAPercent("30=40".into())),
        ] {
            assert_eq!(parse_compute_limit(bad), Err(error), "{bad:?}");
        }
        let message = parse_compute_limit("030").unwrap_err().to_string();
        assert!(message.contains("leading zero") && message.contains("octal"), "{message}");
        assert_eq!(parse_percent("0", 0), Ok(0));
        assert_eq!(percent_ratio_e4(30), 3000);
    }

    #[test]
    fn priorities_parse_strictly() {
        assert_eq!(parse_priorities("-3"), Ok(PerDevice::all_devices(-3)));
        assert_eq!(parse_priorities("0=1,1=0").map(|p| p.devices), Ok(vec![(0, 1), (1, 0)]));
        assert_eq!(parse_priorities(" 1000 "), Ok(PerDevice::all_devices(1000)));
        assert_eq!(parse_priorities("-1000"), Ok(PerDevice::all_devices(-1000)));
        for (bad, error) in [
            ("", ComputeLimitError::NotAPriority(String::new())),
            ("1001", ComputeLimitError::NotAPriority("1001".into())),
            ("-1001", ComputeLimitError::NotAPriority("-1001".into())),
            ("99999999999", ComputeLimitError::NotAPriority("99999999999".into())),
            ("+1", ComputeLimitError::NotAPriority("+1".into())),
            ("--1", ComputeLimitError::NotAPriority("--1".into())),
            ("-", ComputeLimitError::NotAPriority("-".into())),
            ("high", ComputeLimitError::NotAPriority("high".into())),
            ("1.5", ComputeLimitError::NotAPriority("1.5".into())),
            ("01", ComputeLimitError::LeadingZero("01".into())),
            ("-01", ComputeLimitError::LeadingZero("-01".into())),
            ("0=1,0=2", ComputeLimitError::DuplicateDevice(0)),
            ("0=1,x=2", ComputeLimitError::BadEntry("x=2".into())),
            ("1\u{a0}", ComputeLimitError::NotAscii('\u{a0}')),
        ] {
            assert_eq!(parse_priorities(bad), Err(error), "{bad:?}");
        }
        let message = parse_priorities("1001").unwrap_err().to_string();
        assert!(message.contains("-1000 to 1000"), "{message}");
        assert_eq!((priority_in_range(-1000), priority_in_range(1001), priority_in_range(i64::MIN)), (Some(-1000), None, None));
    }

    #[test]
    fn a_list_that_missed_its_device_is_found() {
        let list = parse_compute_limit("1=30").unwrap();
        assert_eq!(list.missed_device(1), Some((1, 0)));
        assert_eq!(list.missed_device(2), None);
        assert_eq!(parse_compute_limit("0=30,1=30").unwrap().missed_device(1), None);
        assert_eq!(parse_compute_limit("30").unwrap().missed_device(0), None);
    }

    fn fresh(name: &str) -> (std::path::PathBuf, Ledger) {
        let dir = std::env::temp_dir().join(format!("gpuslice-compute-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ledger = Ledger::open_or_create(&dir, "t").unwrap();
        (dir, ledger)
    }

    #[test]
    fn environment_limits_follow_the_one_decision_rule() {
        let (dir, ledger) = fresh("decide");
        assert_eq!(ledger.compute_limit_ratio_e4(0), 0);
        assert_eq!(ledger.apply_environment_compute_limit(0, 3000, || false), Decision::Set);
        assert_eq!(ledger.compute_limit_source(0), PolicySource::Environment);
        assert_eq!(ledger.apply_environment_compute_limit(0, 3000, || false), Decision::Same);
        assert_eq!(
            ledger.apply_environment_compute_limit(0, 5000, || false),
            Decision::Kept { existing: 3000, source: PolicySource::Environment }
        );
        assert_eq!(ledger.apply_environment_compute_limit(0, 5000, || true), Decision::Replaced { previous: 3000 });
        assert_eq!(ledger.compute_limit_ratio_e4(0), 5000);
        ledger.set_compute_limit(0, 2000, PolicySource::Monitor);
        assert_eq!(
            ledger.apply_environment_compute_limit(0, 5000, || true),
            Decision::Kept { existing: 2000, source: PolicySource::Monitor }
        );
        // Each device has its own.
        assert_eq!(ledger.compute_limit_ratio_e4(1), 0);
        assert_eq!(ledger.compute_limit_ratio_e4(MAX_DEVICES), 0);
        ledger.set_compute_policy(1, crate::ComputePolicy { share_ratio_e4: 1, limit_ratio_e4: 4000, priority: -2 });
        assert_eq!(ledger.compute_policy(1), crate::ComputePolicy { share_ratio_e4: 1, limit_ratio_e4: 4000, priority: -2 });
        assert_eq!(ledger.compute_limit_source(1), PolicySource::Monitor);
        // The memory cap's pair is untouched.
        assert_eq!(ledger.policy_source(0), PolicySource::Unset);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_environment_claim_stands_back_for_the_monitor_and_waits_for_its_writer() {
        let (dir, ledger) = fresh("claim");
        assert!(ledger.apply_environment_claim(0, Some(6000), Some(3)));
        assert_eq!(ledger.compute_policy(0), crate::ComputePolicy { share_ratio_e4: 6000, limit_ratio_e4: 0, priority: 3 });
        assert!(ledger.apply_environment_claim(0, Some(20_000), None), "a share above the whole device is the whole device");
        assert_eq!(ledger.compute_policy(0).share_ratio_e4, WHOLE_DEVICE_RATIO_E4);
        ledger.set_compute_policy(0, crate::ComputePolicy { share_ratio_e4: 1000, limit_ratio_e4: 0, priority: -1 });
        assert!(!ledger.apply_environment_claim(0, Some(6000), Some(3)));
        assert_eq!(ledger.compute_policy(0), crate::ComputePolicy { share_ratio_e4: 1000, limit_ratio_e4: 0, priority: -1 });
        assert!(!ledger.apply_environment_claim(MAX_DEVICES, Some(1), None));
        // A writer between its claim and its stores: the claim waits for it
        // and decides on what it wrote.
        let policy = &ledger.layout().policy.devices[1];
        let epoch = policy.compute_epoch.load(Ordering::SeqCst);
        policy.compute_epoch.store(epoch + 1, Ordering::SeqCst);
        std::thread::scope(|scope| {
            let claim = scope.spawn(|| ledger.apply_environment_claim(1, Some(5000), Some(2)));
            std::thread::sleep(std::time::Duration::from_millis(20));
            assert!(!claim.is_finished(), "the claim waits while the epoch is odd");
            ComputeLimit::write(policy, 2000, PolicySource::Monitor);
            policy.compute_epoch.store(epoch + 2, Ordering::SeqCst);
            assert!(!claim.join().unwrap(), "the monitor's settings stand");
        });
        assert_eq!(ledger.compute_policy(1), crate::ComputePolicy { share_ratio_e4: 0, limit_ratio_e4: 2000, priority: 0 });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn processes_starting_together_agree_on_one_limit() {
        let (dir, ledger) = fresh("together");
        let decisions: Vec<Decision<u32>> = std::thread::scope(|scope| {
            let handles: Vec<_> = [3000, 5000, 7000, 9000]
                .into_iter()
                .map(|ratio| {
                    let ledger = &ledger;
                    scope.spawn(move || ledger.apply_environment_compute_limit(2, ratio, || false))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(decisions.iter().filter(|d| **d == Decision::Set).count(), 1, "{decisions:?}");
        let kept = ledger.compute_limit_ratio_e4(2);
        for d in decisions {
            if let Decision::Kept { existing, .. } = d {
                assert_eq!(existing, kept);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn buckets_and_counters_are_per_device_in_the_file() {
        let (dir, ledger) = fresh("counters");
        let clock = BucketClock::new();
        let bucket = ledger.compute_bucket(1).unwrap();
        assert_eq!(bucket.admit(&clock, monotonic_ns(), 3000), Admit::Now);
        bucket.charge(5 * MS);
        bucket.count_launches(2);
        bucket.count_throttled(3);
        assert_eq!((ledger.busy_ns_total(1), ledger.launches_total(1), ledger.throttled_ns_total(1)), (5 * MS, 2, 3));
        assert_eq!((ledger.busy_ns_total(0), ledger.launches_total(0), ledger.throttled_ns_total(0)), (0, 0, 0));
        assert!(ledger.compute_bucket(MAX_DEVICES).is_none());
        // The allocators' word is on another page.
        let used = std::ptr::addr_of!(ledger.layout().usage.devices[1].used_bytes) as usize;
        let tokens = std::ptr::addr_of!(ledger.layout().compute.devices[1].tokens_ns) as usize;
        assert!(tokens.abs_diff(used) >= 4096);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
