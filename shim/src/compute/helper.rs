//! The helper thread: this process's side of the monitor's arbitration
//! that no launching thread can do, because it happens while they launch
//! nothing.
//!
//! - **Revoke.** The monitor ends this tenant's turn with a `Revoke` on a
//!   seat's connection. The helper waits until every context of this
//!   process on that device has run what it queued
//!   (`Runtime::drain_device`), then says `Done`: the turn is charged until
//!   then, and the next tenant's work never shares the device with this
//!   one's tail.
//! - **Idle.** While this process is busy in its tenant's turn, the helper
//!   looks every [`PROBE`]: it clears the seat's `announced` word, so the
//!   next launch passes through the gate and says so (`launched`). A
//!   period with no launch means the process stopped launching; the helper
//!   then waits for its work to finish and says `Idle`, so the monitor
//!   stops charging the tenant and can hand the device on. While a thread
//!   of the process is inside a synchronisation ([`Synchronizing`]), such
//!   a period is that wait, and the look it asks for when it returns
//!   decides instead (the helper does not wait for the work beside it). A
//!   synchronisation in a turn (a training loop's `loss.item()`) asks for
//!   a look [`AFTER_SYNC`] later (`synchronized`): a loop that pauses
//!   there for host work gives the device up at once. A loop whose last
//!   [`PAUSES_TO_LEARN`] synchronisations were each followed by such a
//!   pause (a data loader's step after every `loss.item()`) is looked at
//!   [`AFTER_SYNC_PAUSING`] after the next one instead, so the device is
//!   not left idle for the 300 µs; if it launches within [`AFTER_SYNC`]
//!   after all, the early look was wrong and the next one waits the whole
//!   [`AFTER_SYNC`] again (`pauses_after`). A wrong look costs only the
//!   tenant itself: it said `Idle` and asks for the device back, keeping
//!   its place.
//! - **The monitor going away.** A connection that closes orphans its seat:
//!   launches there go ungoverned, with one warning, and the helper asks a
//!   monitor for the device again every [`RETRY`], saying so once.
//!
//! It sleeps in `poll(2)` on the seats' connections the rest of the time,
//! and asks the kernel for short slices ([`HELPER_SLICE`]), so that when it
//! wakes it runs at once rather than after the slice of whatever holds the
//! CPU, its own process's host work included.
//! It never touches the launch path's state but through the seats' atomics.
//! It starts with the process's first seat (its first context), not at
//! initialisation, and its loop allocates nothing.

use super::gate::{self, Seat};
use crate::accounting::Runtime;
use ledger::broker::{Op, MESSAGE_BYTES};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a busy process is looked at for idleness.
pub const PROBE: Duration = Duration::from_millis(2);
/// After a synchronisation returned in a turn (a training loop's
/// `loss.item()`), how long without a launch makes the process idle: a loop
/// that goes straight on keeps its turn, one that pauses for host work
/// gives the device up at once instead of a [`PROBE`] or two later.
pub const AFTER_SYNC: Duration = Duration::from_micros(300);
/// How soon after a synchronisation a loop that has been pausing after
/// its synchronisations is looked at: long enough for an interpreter's
/// next launch when it goes straight on (a Python loop's takes tens of
/// µs), so that a loop descheduled past [`AFTER_SYNC`] now and then is
/// rarely taken for idle. At 20 µs, with two tenants' Python loops on
/// 2 cores, a tenant of one op and `.item()` each seemed to lose turns to
/// such mistakes (one run; the row varies by as much between runs).
pub const AFTER_SYNC_PAUSING: Duration = Duration::from_micros(100);
/// How many synchronisations in a row, each followed by a pause longer
/// than [`AFTER_SYNC`], make the next look come [`AFTER_SYNC_PAUSING`]
/// after the synchronisation.
pub const PAUSES_TO_LEARN: u32 = 3;
/// When the look that a synchronisation asked for is due (monotonic ns; 0:
/// none asked).
static LOOK_AT_NS: AtomicU64 = AtomicU64::new(0);
/// When an early look's verdict is checked: [`AFTER_SYNC`] after its
/// synchronisation (monotonic ns; 0: none pending).
static CHECK_AT_NS: AtomicU64 = AtomicU64::new(0);
/// Synchronisations in a row each followed by a pause past [`AFTER_SYNC`]
/// (capped at [`PAUSES_TO_LEARN`]).
static PAUSES_IN_A_ROW: AtomicU32 = AtomicU32::new(0);

/// How long after a synchronisation its look comes, given how many
/// synchronisations before it were each followed by a long pause.
pub fn look_delay(pauses_in_a_row: u32) -> Duration {
    if pauses_in_a_row >= PAUSES_TO_LEARN {
        AFTER_SYNC_PAUSING
    } else {
        AFTER_SYNC
    }
}

/// What a synchronisation's look (and, for an early look, its check at
/// [`AFTER_SYNC`]) found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterSync {
    /// The process was not busy in a turn: nothing learned.
    NotHeld,
    /// It launched again within [`AFTER_SYNC`].
    WentOn,
    /// It launched nothing for [`AFTER_SYNC`] (or, at an early look, up to
    /// the look and then up to the check).
    Paused,
}

/// The count of long pauses in a row after one more synchronisation.
pub fn pauses_after(pauses_in_a_row: u32, found: AfterSync) -> u32 {
    match found {
        AfterSync::NotHeld => pauses_in_a_row,
        AfterSync::WentOn => 0,
        AfterSync::Paused => pauses_in_a_row.saturating_add(1).min(PAUSES_TO_LEARN),
    }
}

/// A synchronisation returned: if this process is busy in a turn, look
/// for idleness [`look_delay`] from now (the next launch, if it comes,
/// goes through the gate and says so).
pub fn synchronized() {
    // An early look not checked yet: this synchronisation came first, and
    // if the process launched in between, it went on after all.
    if CHECK_AT_NS.swap(0, Ordering::AcqRel) != 0 && went_on_since(SYNC_COUNTDOWN.load(Ordering::Acquire), gate::seats()) {
        PAUSES_IN_A_ROW.store(pauses_after(0, AfterSync::WentOn), Ordering::Relaxed);
    }
    let mut busy = false;
    for seat in gate::seats() {
        if holds_busy(seat) {
            seat.launched.store(false, Ordering::Release);
            busy = true;
        }
    }
    if busy {
        // Launches that go the fast way move the checkpoint countdown; one
        // that goes the slow way sets `launched`: either says the process
        // went on (the launch path is left as it is).
        SYNC_COUNTDOWN.store(super::launch_marker(), Ordering::Release);
        let now_ns = ledger::compute::monotonic_ns();
        let delay = look_delay(PAUSES_IN_A_ROW.load(Ordering::Relaxed));
        let check_at_ns = if delay < AFTER_SYNC { now_ns.saturating_add(AFTER_SYNC.as_nanos() as u64) } else { 0 };
        CHECK_AT_NS.store(check_at_ns, Ordering::Release);
        LOOK_AT_NS.store(now_ns.saturating_add(delay.as_nanos() as u64), Ordering::Release);
        wake();
    }
}

/// Threads of this process inside a synchronisation now.
static SYNCING: AtomicU32 = AtomicU32::new(0);

/// One thread inside a synchronisation (`cuStreamSynchronize` and its
/// kind), for as long as it lives. While one is, a period without launches
/// is that wait, not idleness: the probe leaves the process alone and the
/// look the synchronisation asks for when it returns decides. (The probe
/// used to drain the device meanwhile, and on a loaded host its wake-up
/// came milliseconds after the synchronisation's own, in the host work
/// after it: every look due then came late.)
pub struct Synchronizing;

impl Synchronizing {
    pub fn enter() -> Self {
        SYNCING.fetch_add(1, Ordering::AcqRel);
        Synchronizing
    }
}

impl Drop for Synchronizing {
    fn drop(&mut self) {
        SYNCING.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whether a thread of this process is inside a synchronisation now.
fn synchronizing() -> bool {
    SYNCING.load(Ordering::Acquire) != 0
}

/// The checkpoint countdown when the last synchronisation returned.
static SYNC_COUNTDOWN: AtomicU32 = AtomicU32::new(0);
/// How often a seat without a monitor asks for one again.
pub const RETRY: Duration = Duration::from_secs(1);
/// How often a seat a running monitor refused asks again (launches there
/// are held meanwhile).
pub const REFUSED_RETRY: Duration = Duration::from_millis(100);

static STARTED: AtomicBool = AtomicBool::new(false);
/// An eventfd the helper also waits on: a seat joined, look again now (a
/// helper asleep for a second would miss its first turns' revokes).
static WAKE: AtomicI32 = AtomicI32::new(-1);

/// Wakes the helper (a seat was joined).
pub fn wake() {
    let fd = WAKE.load(Ordering::Acquire);
    if fd >= 0 {
        let one: u64 = 1;
        // SAFETY: an 8-byte write from a live local to the helper's eventfd.
        unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
    }
}

/// The helper's stack: it polls, reads short messages and drains.
const STACK_BYTES: usize = 256 * 1024;

/// Starts the helper, once per process. It is a bare pthread, not a
/// `std::thread`: std's thread start registers a thread-local destructor
/// (an allocation, and with it a malloc arena of the thread's own) that a
/// thread which never exits on its own has no use for.
pub fn start(rt: &'static Runtime) {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    if WAKE.load(Ordering::Acquire) < 0 {
        // SAFETY: eventfd with valid flags; the descriptor is kept for the
        // life of the process.
        WAKE.store(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) }, Ordering::Release);
    }
    if let Err(e) = spawn(rt) {
        STARTED.store(false, Ordering::Release);
        warn!("cannot start the compute helper thread ({e}): turns on the devices this process uses may be held longer than needed");
    }
}

/// A detached thread running [`run`].
fn spawn(rt: &'static Runtime) -> std::io::Result<()> {
    // SAFETY: an all-zero attribute object is what pthread_attr_init
    // overwrites.
    let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
    // SAFETY: `attr` is a live local, initialised here and destroyed below;
    // the size is above PTHREAD_STACK_MIN.
    let r = unsafe {
        let r = libc::pthread_attr_init(&mut attr);
        if r != 0 {
            return Err(std::io::Error::from_raw_os_error(r));
        }
        let mut r = libc::pthread_attr_setstacksize(&mut attr, STACK_BYTES);
        if r == 0 {
            r = libc::pthread_attr_setdetachstate(&mut attr, libc::PTHREAD_CREATE_DETACHED);
        }
        r
    };
    let mut thread: libc::pthread_t = 0;
    let r = if r == 0 {
        // SAFETY: `thread` and `attr` are live locals; the argument is a
        // `&'static Runtime`, valid for as long as the thread runs.
        unsafe { libc::pthread_create(&mut thread, &attr, helper_main, (rt as *const Runtime).cast_mut().cast()) }
    } else {
        r
    };
    // SAFETY: `attr` was initialised above.
    unsafe { libc::pthread_attr_destroy(&mut attr) };
    if r != 0 {
        return Err(std::io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// The thread's entry: names the thread (itself: one `prctl`, where naming
/// it from outside writes a `/proc` file), then runs; no panic unwinds out
/// of it into libc.
extern "C" fn helper_main(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: PR_SET_NAME reads a NUL-terminated name (the kernel keeps its
    // first 15 bytes).
    unsafe { libc::prctl(libc::PR_SET_NAME, c"gpuslice-arbiter".as_ptr()) };
    ledger::sched::ask_for_short_slices(HELPER_SLICE);
    // SAFETY: `spawn` passes a `&'static Runtime`.
    let rt: &'static Runtime = unsafe { &*arg.cast_const().cast::<Runtime>() };
    crate::guard::boundary((), || run(rt));
    std::ptr::null_mut()
}

/// The slice this thread asks the kernel's fair scheduler for: when it
/// wakes it runs at once instead of after the current slice of whatever
/// occupies the CPU (its own process's main thread, busy with host work,
/// among them); see [`ledger::sched::ask_for_short_slices`].
pub const HELPER_SLICE: Duration = Duration::from_micros(100);

/// Forgets the thread (a forked child has none).
pub fn forget() {
    STARTED.store(false, Ordering::Release);
    // The eventfd is the parent's too: the child makes its own.
    WAKE.store(-1, Ordering::Release);
}

fn run(rt: &'static Runtime) {
    let _guard = crate::guard::Guard::enter();
    let mut armed = [false; gate::MAX_SEATS];
    let mut relaxed = false;
    let mut last_retry = Instant::now();
    // The loop allocates nothing: a thread's first allocation makes it a
    // malloc arena of its own (a 128 MiB reservation, trimmed), a cost every
    // short process would pay for a thread that mostly sleeps.
    const NO_FD: libc::pollfd = libc::pollfd { fd: -1, events: 0, revents: 0 };
    loop {
        let mut joined: [Option<(usize, &'static Seat)>; gate::MAX_SEATS] = [None; gate::MAX_SEATS];
        let mut fds = [NO_FD; gate::MAX_SEATS + 1];
        let mut count = 0;
        for (i, seat) in gate::seats().enumerate() {
            if seat.page().is_none() {
                continue;
            }
            if let (Some(slot), Some(fd)) = (joined.get_mut(count), fds.get_mut(count)) {
                *slot = Some((i, seat));
                *fd = libc::pollfd { fd: seat.conn.load(Ordering::Relaxed), events: libc::POLLIN, revents: 0 };
                count += 1;
            }
        }
        let joined = joined.get(..count).unwrap_or_default();
        // Its drains must neither fail nor spoil a graph the application
        // captures meanwhile (PyTorch's CUDA graphs capture in the global
        // mode); it drains only on a joined seat, so it says so only then.
        if count > 0 && !relaxed {
            crate::real::relax_capture_mode_of_this_thread();
            relaxed = true;
        }
        // On an arbitrated device the helper looks every PROBE: a grant can
        // come at any moment, and the turn it starts must end as soon as the
        // process goes idle (a 1 s sleep here kept an inference tenant's
        // every turn for a whole quantum).
        let arbitrated = joined.iter().flatten().any(|(_, s)| s.page().is_some_and(|p| !p.grant().is_open()));
        let timeout = if arbitrated {
            PROBE
        } else if gate::any_refused() {
            REFUSED_RETRY
        } else {
            RETRY
        };
        let now_ns = ledger::compute::monotonic_ns();
        let timeout = [LOOK_AT_NS.load(Ordering::Acquire), CHECK_AT_NS.load(Ordering::Acquire)]
            .into_iter()
            .filter(|&at| at != 0)
            .fold(timeout, |t, at| t.min(Duration::from_nanos(at.saturating_sub(now_ns))));
        let wake = WAKE.load(Ordering::Acquire);
        if let Some(fd) = fds.get_mut(count) {
            *fd = libc::pollfd { fd: wake, events: libc::POLLIN, revents: 0 };
        }
        let polled = fds.get_mut(..=count).unwrap_or_default();
        // To the microsecond: a look due in 300 µs must not wait a whole
        // millisecond (`poll` counts in milliseconds).
        let wait = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
        // SAFETY: `polled` is a live array of `polled.len()` pollfd, and
        // `wait` a live timespec; no signal mask is passed.
        let n = unsafe { libc::ppoll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, &wait, std::ptr::null()) };
        if polled.last().is_some_and(|f| f.revents != 0) {
            let mut count = [0u8; 8];
            // SAFETY: an 8-byte read into a live local from our eventfd.
            unsafe { libc::read(wake, count.as_mut_ptr().cast(), 8) };
        }
        if n > 0 {
            for (&(_, seat), fd) in joined.iter().flatten().zip(polled.iter()) {
                if fd.revents != 0 {
                    read_messages(rt, seat, fd.revents);
                }
            }
        }
        let look_at = LOOK_AT_NS.load(Ordering::Acquire);
        if look_at != 0 && ledger::compute::monotonic_ns() >= look_at {
            LOOK_AT_NS.store(0, Ordering::Release);
            // No launch since the synchronisation: idle now, as a probe
            // that found a period without launches would say.
            let marker = SYNC_COUNTDOWN.load(Ordering::Acquire);
            let mut found = AfterSync::NotHeld;
            for &(i, seat) in joined.iter().flatten() {
                match idle_after_sync(rt, seat, marker) {
                    AfterSync::Paused => {
                        found = AfterSync::Paused;
                        if let Some(armed) = armed.get_mut(i) {
                            *armed = false;
                        }
                    }
                    AfterSync::WentOn if found == AfterSync::NotHeld => found = AfterSync::WentOn,
                    _ => {}
                }
            }
            // An early look that found a pause is judged at its check.
            if !(found == AfterSync::Paused && CHECK_AT_NS.load(Ordering::Acquire) != 0) {
                CHECK_AT_NS.store(0, Ordering::Release);
                PAUSES_IN_A_ROW.store(pauses_after(PAUSES_IN_A_ROW.load(Ordering::Relaxed), found), Ordering::Relaxed);
            }
        }
        let check_at = CHECK_AT_NS.load(Ordering::Acquire);
        if check_at != 0 && LOOK_AT_NS.load(Ordering::Acquire) == 0 && ledger::compute::monotonic_ns() >= check_at {
            CHECK_AT_NS.store(0, Ordering::Release);
            // The early look said idle: right if nothing was launched up
            // to AFTER_SYNC after the synchronisation.
            let marker = SYNC_COUNTDOWN.load(Ordering::Acquire);
            let found =
                if went_on_since(marker, joined.iter().flatten().map(|&(_, seat)| seat)) { AfterSync::WentOn } else { AfterSync::Paused };
            PAUSES_IN_A_ROW.store(pauses_after(PAUSES_IN_A_ROW.load(Ordering::Relaxed), found), Ordering::Relaxed);
        }
        for &(i, seat) in joined.iter().flatten() {
            if let Some(armed) = armed.get_mut(i) {
                probe(rt, seat, armed);
            }
        }
        let retry_every = if gate::any_refused() { REFUSED_RETRY } else { RETRY };
        if last_retry.elapsed() >= retry_every {
            last_retry = Instant::now();
            super::join::retry(rt);
        }
    }
}

/// Whether the process launched since the synchronisation whose launch
/// marker was `marker`: a launch the fast way moves the marker, one the
/// slow way sets `launched` on the seats.
fn went_on_since<'a>(marker: u32, mut seats: impl Iterator<Item = &'a Seat>) -> bool {
    super::launch_marker() != marker || seats.any(|s| s.launched.load(Ordering::Acquire))
}

/// Whether this process is busy in its tenant's turn on `seat`.
fn holds_busy(seat: &Seat) -> bool {
    let Some(page) = seat.page() else { return false };
    let word = page.grant();
    seat.state.load(Ordering::Relaxed) % 2 == 1 && !word.is_open() && word.lets(seat.member())
}

/// The look a synchronisation asked for: says `Idle` if `seat` is busy in
/// a turn and the process launched nothing since (`marker`, the launch
/// marker then), its work drained ([`AfterSync::Paused`]).
fn idle_after_sync(rt: &Runtime, seat: &Seat, marker: u32) -> AfterSync {
    let went_on = || went_on_since(marker, std::iter::once(seat));
    if !holds_busy(seat) {
        return AfterSync::NotHeld;
    }
    if went_on() {
        return AfterSync::WentOn;
    }
    rt.drain_device(seat.dev.load(Ordering::Relaxed));
    if went_on() {
        return AfterSync::WentOn;
    }
    if let Some(n) = seat.mark_idle() {
        seat.send(Op::Idle, n);
    }
    // A launch that raced with the report says so again.
    if went_on() {
        seat.report_busy();
    }
    AfterSync::Paused
}

/// One look for idleness (see the module docs).
fn probe(rt: &Runtime, seat: &Seat, armed: &mut bool) {
    let launched = &seat.launched;
    if !holds_busy(seat) {
        *armed = false;
        return;
    }
    if *armed && !launched.load(Ordering::Acquire) && !synchronizing() {
        // Nothing launched for a whole period: wait for what is queued.
        rt.drain_device(seat.dev.load(Ordering::Relaxed));
        if !launched.load(Ordering::Acquire) {
            if let Some(n) = seat.mark_idle() {
                seat.send(Op::Idle, n);
            }
            // A launch that raced with the report says so again.
            if launched.load(Ordering::Acquire) {
                seat.report_busy();
            }
        }
        *armed = false;
        return;
    }
    launched.store(false, Ordering::Release);
    seat.announced.store(0, Ordering::Release);
    *armed = true;
}

fn read_messages(rt: &Runtime, seat: &Seat, revents: libc::c_short) {
    let fd = seat.conn.load(Ordering::Relaxed);
    let mut buf = [0u8; MESSAGE_BYTES * 8];
    // SAFETY: a read into a live local buffer of its length.
    let n = if revents & libc::POLLIN != 0 { unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) } } else { 0 };
    if n <= 0 {
        if n == 0 || revents & (libc::POLLHUP | libc::POLLERR) != 0 {
            gone(seat, fd);
        }
        return;
    }
    let count = n as usize / MESSAGE_BYTES;
    for chunk in buf.chunks_exact(MESSAGE_BYTES).take(count) {
        let mut message = [0u8; MESSAGE_BYTES];
        message.copy_from_slice(chunk);
        if let Some((Op::Revoke, _)) = ledger::broker::decode(&message) {
            rt.drain_device(seat.dev.load(Ordering::Relaxed));
            let _ = seat.mark_idle();
            seat.announced.store(0, Ordering::Release);
            seat.send(Op::Done, 0);
        }
    }
}

/// The monitor closed the connection: the seat is orphaned until a monitor
/// hands the device out again. The descriptor is shut down, not closed: a
/// launching thread may still be sending on it, and a closed number could
/// name another file by then.
fn gone(seat: &Seat, fd: i32) {
    seat.orphan();
    // SAFETY: shutdown of the connection this seat owned.
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
    warn!(
        "the monitor stopped arbitrating ledger device {}: launches there are not governed until a monitor is back (looked for every {} s)",
        seat.dev.load(Ordering::Relaxed),
        RETRY.as_secs()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_that_paused_after_its_last_synchronisations_is_looked_at_early() {
        assert_eq!(look_delay(0), AFTER_SYNC);
        assert_eq!(look_delay(PAUSES_TO_LEARN - 1), AFTER_SYNC);
        assert_eq!(look_delay(PAUSES_TO_LEARN), AFTER_SYNC_PAUSING);
        assert!(AFTER_SYNC_PAUSING < AFTER_SYNC);
    }

    #[test]
    fn pauses_count_up_to_the_threshold_and_one_launch_resets_them() {
        let mut n = 0;
        for _ in 0..PAUSES_TO_LEARN + 3 {
            n = pauses_after(n, AfterSync::Paused);
        }
        assert_eq!(n, PAUSES_TO_LEARN, "capped");
        assert_eq!(pauses_after(n, AfterSync::NotHeld), n, "a look outside a turn learns nothing");
        assert_eq!(pauses_after(n, AfterSync::WentOn), 0);
        assert_eq!(look_delay(pauses_after(n, AfterSync::WentOn)), AFTER_SYNC);
    }
}
