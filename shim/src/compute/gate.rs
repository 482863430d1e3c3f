//! The gate: whether a launch may go now, by the monitor's grant on its
//! device.
//!
//! One [`Seat`] per device this process joined: the device's grant page
//! (mapped read-only, never unmapped), this tenant's member index there,
//! and the grant word this process last launched under ([`Seat::announced`]).
//! A launch whose every seat still shows the word it announced goes at once
//! ([`clear`]: one load of the page's word and one of `announced` per seat,
//! no syscall, no lock, no clock). Anything else takes [`pass`], which
//! reads the new word:
//! - a grant that lets this tenant launch is announced (and, the first time
//!   this process launches in a turn, reported `Busy` to the monitor);
//! - a shallow grant lets the launch go only once its stream has finished
//!   what it had queued, so this process keeps one launch in flight there
//!   (a tenant of higher priority is active), or, where the page says two
//!   (`shallow_launches`: this tenant fills in for one that paused), once
//!   the launch before last has run;
//! - any other grant makes the launch wait: the process says `Want` (again
//!   at each change of the grant that does not let it launch), and sleeps
//!   on the word (a futex) until it changes.
//!
//! The seat's `state` counts this process's `Busy`/`Idle` reports (odd:
//! busy); each report carries its count, so the monitor can drop one that
//! another thread's later report overtook. The helper thread
//! ([`super::helper`]) sends `Idle` and `Done`; launching threads send
//! `Want` and `Busy`.

use ledger::broker::Op;
use ledger::grants::{Grant, GrantPage};
use ledger::team_usage::TeamUsagePage;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Devices one process can join.
pub const MAX_SEATS: usize = ledger::MAX_DEVICES;
/// The longest one sleep on the grant word; the wait then looks again (the
/// monitor may have gone away, which the helper notices).
const WAIT_SLICE_NS: u64 = 50_000_000;

/// This process on one device.
pub struct Seat {
    /// The grant page; null when not joined or when the monitor went away
    /// (the device is then not arbitrated for this process).
    page: AtomicPtr<GrantPage>,
    /// The grant word this process launched under; 0 sends the next launch
    /// through [`pass`].
    pub announced: AtomicU32,
    /// This tenant's member index on the device.
    member: AtomicU32,
    /// The ledger index of the device.
    pub dev: AtomicUsize,
    /// `Busy`/`Idle` reports so far (odd: busy).
    pub state: AtomicU32,
    /// The connection to the monitor (-1: none).
    pub conn: AtomicI32,
    /// Time launches waited here, ns.
    pub waited_ns_total: AtomicU64,
    /// A launch passed the gate since the helper last looked.
    pub launched: AtomicBool,
    /// When a running monitor refused this process a place here
    /// (monotonic ns; 0: it did not, or it has one since).
    refused_at_ns: AtomicU64,
    /// This tenant's team's page on the device, when its team has a memory
    /// quota there (`crate::accounting::team`); kept when the monitor goes
    /// away, replaced by the next monitor's.
    team: AtomicPtr<TeamUsagePage>,
    /// The team's quota as last read from the grant page, bytes.
    pub team_quota_bytes: AtomicU64,
    /// Bytes this process has reserved in its team's page and not given back.
    pub team_charged_bytes: AtomicU64,
}

/// Seats a running monitor refused: while there is one, every launch takes
/// the slow path, which holds launches on such a device ([`refused_wait`]).
static REFUSED_SEATS: AtomicUsize = AtomicUsize::new(0);

/// How long a launch on a device whose monitor refused this process waits
/// for a place before it fails: the helper asks again meanwhile.
pub const REFUSED_WAIT_NS: u64 = 3_000_000_000;

impl Seat {
    const fn new() -> Seat {
        Seat {
            page: AtomicPtr::new(std::ptr::null_mut()),
            announced: AtomicU32::new(0),
            member: AtomicU32::new(0),
            dev: AtomicUsize::new(usize::MAX),
            state: AtomicU32::new(0),
            conn: AtomicI32::new(-1),
            waited_ns_total: AtomicU64::new(0),
            launched: AtomicBool::new(false),
            refused_at_ns: AtomicU64::new(0),
            team: AtomicPtr::new(std::ptr::null_mut()),
            team_quota_bytes: AtomicU64::new(ledger::UNLIMITED),
            team_charged_bytes: AtomicU64::new(0),
        }
    }

    /// The team's page, if the monitor handed one over.
    pub fn team(&self) -> Option<&'static TeamUsagePage> {
        let page = self.team.load(Ordering::Acquire);
        // SAFETY: team pages are leaked writable mappings
        // (`TeamUsage::leak`), never unmapped, and every bit pattern is a
        // valid page.
        unsafe { page.as_ref() }
    }

    /// Takes the team's page a (new) monitor handed over.
    pub fn set_team(&self, team: &'static TeamUsagePage) {
        self.team.store(team as *const TeamUsagePage as *mut TeamUsagePage, Ordering::Release);
    }

    /// The page, if the seat is joined.
    pub fn page(&self) -> Option<&'static GrantPage> {
        let page = self.page.load(Ordering::Acquire);
        // SAFETY: pages are leaked read-only mappings (`Grants::leak`),
        // never unmapped, and every bit pattern is a valid page.
        unsafe { page.as_ref() }
    }

    pub fn member(&self) -> u32 {
        self.member.load(Ordering::Relaxed)
    }

    /// A running monitor refused this process a place on the seat's device
    /// at `now_ns` (kept from the first refusal until it has one).
    pub fn refuse(&self, now_ns: u64) {
        if self.refused_at_ns.compare_exchange(0, now_ns.max(1), Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            REFUSED_SEATS.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// When a running monitor refused this process a place here, if it did
    /// and the process has none since.
    pub fn refused_at_ns(&self) -> Option<u64> {
        Some(self.refused_at_ns.load(Ordering::Acquire)).filter(|&t| t != 0)
    }

    /// No monitor answers any more: nobody arbitrates the device.
    pub fn clear_refusal(&self) {
        if self.refused_at_ns.swap(0, Ordering::AcqRel) != 0 {
            REFUSED_SEATS.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Takes a page the monitor handed over for ledger device `dev`.
    pub fn join(&self, page: &'static GrantPage, member: u32, dev: usize, conn: i32) {
        self.clear_refusal();
        self.member.store(member, Ordering::Relaxed);
        self.dev.store(dev, Ordering::Relaxed);
        self.conn.store(conn, Ordering::Relaxed);
        self.state.store(0, Ordering::Relaxed);
        self.announced.store(0, Ordering::Relaxed);
        self.page.store(page as *const GrantPage as *mut GrantPage, Ordering::Release);
    }

    /// The monitor went away: launches here go ungoverned until it is back.
    pub fn orphan(&self) {
        self.page.store(std::ptr::null_mut(), Ordering::Release);
        self.conn.store(-1, Ordering::Relaxed);
        self.announced.store(0, Ordering::Relaxed);
    }

    /// Sends `op` to the monitor, never blocking: a monitor that does not
    /// read is stuck, and the message would not help.
    pub fn send(&self, op: Op, seq: u32) {
        let fd = self.conn.load(Ordering::Relaxed);
        if fd < 0 {
            return;
        }
        let bytes = ledger::broker::encode(op, seq);
        // SAFETY: a send of a live local buffer on a descriptor this seat
        // owns (closed only by the helper after orphaning the seat).
        unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    }

    /// Reports `Busy`, unless this process already is.
    pub fn report_busy(&self) {
        let state = self.state.load(Ordering::Acquire);
        if state.is_multiple_of(2) && self.state.compare_exchange(state, state + 1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.send(Op::Busy, state + 1);
        }
    }

    /// Counts this process busy without telling the monitor (it was granted
    /// after a `Want`, which the monitor counts as busy).
    fn mark_busy(&self) {
        let state = self.state.load(Ordering::Acquire);
        if state.is_multiple_of(2) {
            let _ = self.state.compare_exchange(state, state + 1, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Counts this process idle; returns the report's number if it was busy.
    pub fn mark_idle(&self) -> Option<u32> {
        let state = self.state.load(Ordering::Acquire);
        (state % 2 == 1 && self.state.compare_exchange(state, state + 1, Ordering::AcqRel, Ordering::Acquire).is_ok()).then_some(state + 1)
    }
}

static SEATS: [Seat; MAX_SEATS] = [const { Seat::new() }; MAX_SEATS];
/// Seats in use, from the first.
static SEAT_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Every seat in use.
pub fn seats() -> impl Iterator<Item = &'static Seat> {
    SEATS.iter().take(SEAT_COUNT.load(Ordering::Acquire))
}

/// A free seat for ledger device `dev` (or the one it already has).
pub fn seat_for(dev: usize) -> Option<&'static Seat> {
    if let Some(seat) = seats().find(|s| s.dev.load(Ordering::Relaxed) == dev) {
        return Some(seat);
    }
    let index = SEAT_COUNT.load(Ordering::Acquire);
    let seat = SEATS.get(index)?;
    seat.dev.store(dev, Ordering::Relaxed);
    SEAT_COUNT.store(index + 1, Ordering::Release);
    Some(seat)
}

/// The joined seat of ledger device `dev`.
pub fn joined(dev: usize) -> Option<&'static Seat> {
    seats().find(|s| s.dev.load(Ordering::Relaxed) == dev && s.page().is_some())
}

/// What the launch path found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Every joined device shows the grant this process launched under,
    /// and none is arbitrated (or none is joined).
    Open,
    /// The same, and some device is arbitrated: the launch counts towards
    /// the next checkpoint (`super::checkpoint`).
    Arbitrated,
    /// Some grant changed (or the helper asked for a look): the launch
    /// goes through [`pass`].
    Changed,
}

/// Whether every joined seat still shows the grant this process launched
/// under: the launch path's whole check.
#[inline(always)]
pub fn check() -> Check {
    if REFUSED_SEATS.load(Ordering::Relaxed) != 0 {
        return Check::Changed;
    }
    let count = SEAT_COUNT.load(Ordering::Relaxed);
    let mut arbitrated = false;
    for seat in SEATS.iter().take(count) {
        let page = seat.page.load(Ordering::Relaxed);
        if page.is_null() {
            continue;
        }
        // SAFETY: as in `Seat::page`.
        let word = unsafe { (*page).header.grant.load(Ordering::Acquire) };
        if word != seat.announced.load(Ordering::Relaxed) {
            return Check::Changed;
        }
        arbitrated |= !Grant(word).is_open();
    }
    if arbitrated {
        Check::Arbitrated
    } else {
        Check::Open
    }
}

/// Whether any joined device's grant is shallow now (see [`Pass::Shallow`]).
pub fn any_shallow() -> bool {
    seats().filter_map(Seat::page).any(|page| page.grant().is_shallow())
}

/// Whether any joined device is arbitrated now.
pub fn any_arbitrated() -> bool {
    seats().filter_map(Seat::page).any(|page| !page.grant().is_open())
}

/// What [`pass`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Launch.
    Go,
    /// Launch once the stream has finished what it queued.
    Shallow,
}

/// Waits until `seat`'s grant lets this process launch (see the module docs).
pub fn pass(seat: &Seat) -> Pass {
    let mut waited_since: Option<std::time::Instant> = None;
    // The grant under which this wait last said `Want`: it says so again
    // whenever the grant moves on without letting it launch (the monitor may
    // have granted and revoked its tenant while this process could not run,
    // stopped or descheduled, and then counts it as not waiting).
    let mut asked_under: Option<u32> = None;
    let result = loop {
        let Some(page) = seat.page() else { break Pass::Go };
        let word = page.grant();
        if word.lets(seat.member()) {
            seat.launched.store(true, Ordering::Release);
            if !word.is_open() {
                seat.report_busy();
            }
            if word.is_shallow() {
                break Pass::Shallow;
            }
            seat.announced.store(word.0, Ordering::Relaxed);
            break Pass::Go;
        }
        if asked_under != Some(word.0) {
            seat.send(Op::Want, 0);
            seat.mark_busy();
            asked_under = Some(word.0);
        }
        waited_since.get_or_insert_with(std::time::Instant::now);
        ledger::grants::wait_for_change(page, word.0, WAIT_SLICE_NS);
    };
    if let Some(since) = waited_since {
        seat.waited_ns_total.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }
    result
}

/// Forgets every seat and closes its connection (a forked child, alone in
/// its process: the connections are its parent's). Async-signal-safe.
pub fn forget_all() {
    REFUSED_SEATS.store(0, Ordering::Relaxed);
    for seat in &SEATS {
        seat.refused_at_ns.store(0, Ordering::Relaxed);
        seat.page.store(std::ptr::null_mut(), Ordering::Relaxed);
        let fd = seat.conn.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: close of a descriptor only this seat names.
            unsafe { libc::close(fd) };
        }
    }
    SEAT_COUNT.store(0, Ordering::Release);
}

/// What a launch on a device whose monitor refused this process may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The seat has a place now (or never was refused): go on.
    Placed,
    /// No place came within [`REFUSED_WAIT_NS`] of the refusal.
    Fail,
}

/// Whether a running monitor refused this process on some device.
pub fn any_refused() -> bool {
    REFUSED_SEATS.load(Ordering::Relaxed) != 0
}

/// Holds a launch on `seat` while a running monitor refuses this process
/// a place there: until the helper gets one, or [`REFUSED_WAIT_NS`] after
/// the first refusal. A process the monitor does not arbitrate never runs
/// beside those it does (it would take their turns).
pub fn refused_wait(seat: &Seat) -> Refused {
    loop {
        let Some(since_ns) = seat.refused_at_ns() else { return Refused::Placed };
        if seat.page().is_some() {
            return Refused::Placed;
        }
        if ledger::compute::monotonic_ns().saturating_sub(since_ns) >= REFUSED_WAIT_NS {
            return Refused::Fail;
        }
        super::helper::wake();
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
