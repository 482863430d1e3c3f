//! Tests of `accounts.rs` that pin down what its own tests and
//! `tests.rs` leave loose: the policy epoch protocol's take-over of a dead
//! writer (on a bare epoch word, with timings it must keep), refusals that
//! are not counted, and the byte a device entry's claimer locks (spelled
//! out, not computed with the function under test).

use crate::accounts::write_under_epoch;
use crate::layout::device_state;
use crate::tests::within;
use crate::{ofd, Denied, Ledger, LedgerError, PolicySource, MAX_DEVICES};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// `write_under_epoch` on a (value, source) pair, decided and written as
/// two arguments.
fn write_pair_under_epoch(
    epoch: &AtomicU64,
    read: impl Fn() -> (u64, PolicySource),
    mut decide: impl FnMut(u64, PolicySource) -> Option<(u64, PolicySource)>,
    write: impl FnOnce(u64, PolicySource),
) -> bool {
    write_under_epoch(epoch, read, |(value, source)| decide(value, source), |(value, source)| write(value, source))
}

/// How long a writer waits before it takes over from one that stays
/// between its claim and its last store (`POLICY_WRITER_WAIT`).
const WRITER_WAIT: Duration = Duration::from_millis(200);

/// Long enough for any run of the protocol here, short of a hang.
const HANG: Duration = Duration::from_secs(10);

/// A fresh ledger of tenant "t" in its own directory, removed on drop.
struct Fresh {
    dir: std::path::PathBuf,
    ledger: Ledger,
}

impl Fresh {
    fn new(name: &str) -> Fresh {
        let dir = std::env::temp_dir().join(format!("gpuslice-accounts-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ledger = Ledger::open_or_create(&dir, "t").unwrap();
        Fresh { dir, ledger }
    }
}

impl Drop for Fresh {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A value and source pair kept in process memory, as a policy record keeps
/// one in the file.
#[derive(Default)]
struct Pair {
    value: Mutex<(u64, u32)>,
    /// Writes made, with when each was made.
    writes: Mutex<Vec<Instant>>,
}

impl Pair {
    fn read(&self) -> (u64, PolicySource) {
        let (value, source) = *self.value.lock().unwrap();
        (value, PolicySource::from_u32(source))
    }

    fn write(&self, value: u64, source: PolicySource) {
        *self.value.lock().unwrap() = (value, source.as_u32());
        self.writes.lock().unwrap().push(Instant::now());
    }

    fn writes(&self) -> Vec<Instant> {
        self.writes.lock().unwrap().clone()
    }
}

/// `write_pair_under_epoch` on `epoch` and `pair`, always writing `value`
/// from the monitor.
fn write_value(epoch: &AtomicU64, pair: &Pair, value: u64) -> bool {
    write_pair_under_epoch(epoch, || pair.read(), |_, _| Some((value, PolicySource::Monitor)), |v, s| pair.write(v, s))
}

#[test]
fn a_writer_on_an_even_epoch_writes_once_and_leaves_it_even_and_moved() {
    let (epoch, pair) = (AtomicU64::new(6), Pair::default());
    let started = Instant::now();
    assert!(write_value(&epoch, &pair, 5), "it wrote, and says so");
    assert!(started.elapsed() < WRITER_WAIT, "nobody was writing: no wait");
    assert_eq!(pair.read(), (5, PolicySource::Monitor));
    assert_eq!(pair.writes().len(), 1);
    assert_eq!(epoch.load(Ordering::SeqCst), 8, "claimed at 7, released at 8");
}

#[test]
fn a_decision_to_leave_the_pair_writes_nothing_and_says_so() {
    let (epoch, pair) = (Arc::new(AtomicU64::new(4)), Arc::new(Pair::default()));
    let (e, p) = (Arc::clone(&epoch), Arc::clone(&pair));
    let wrote = within(HANG, move || write_pair_under_epoch(&e, || p.read(), |_, _| None, |v, s| p.write(v, s)));
    assert!(!wrote);
    assert!(pair.writes().is_empty());
    assert_eq!(epoch.load(Ordering::SeqCst), 4, "nothing claimed");
}

#[test]
fn a_decision_to_leave_a_pair_that_changed_under_it_is_taken_again() {
    let (epoch, pair) = (AtomicU64::new(4), Pair::default());
    let mut asked = 0;
    let wrote = write_pair_under_epoch(
        &epoch,
        || pair.read(),
        |_, _| {
            asked += 1;
            if asked == 1 {
                // Another writer claims, writes and releases meanwhile.
                epoch.fetch_add(2, Ordering::SeqCst);
            }
            None
        },
        |v, s| pair.write(v, s),
    );
    assert!(!wrote);
    assert_eq!(asked, 2, "decided again on what the other writer wrote");
    assert_eq!(epoch.load(Ordering::SeqCst), 6);
}

#[test]
fn a_writer_that_died_after_its_claim_is_taken_over_after_the_wait_and_not_before() {
    let (epoch, pair) = (Arc::new(AtomicU64::new(9)), Arc::new(Pair::default()));
    let (e, p) = (Arc::clone(&epoch), Arc::clone(&pair));
    let started = Instant::now();
    let wrote = within(HANG, move || write_value(&e, &p, 3));
    assert!(wrote);
    let writes = pair.writes();
    assert_eq!(writes.len(), 1);
    let waited = writes[0] - started;
    assert!(waited >= WRITER_WAIT, "took over a claim after {waited:?}, before the writer could be judged dead");
    assert_eq!(pair.read(), (3, PolicySource::Monitor));
    assert_eq!(epoch.load(Ordering::SeqCst), 12, "taken over at 11 (odd, past the dead claim), released at 12");
}

#[test]
fn a_writer_that_is_still_moving_the_epoch_is_not_taken_over() {
    // A first writer holds the record (odd epoch); the writer under test
    // must wait. Before the wait is up, the epoch moves to another odd value
    // (the record changed hands between two live writers); the wait starts
    // again from there, so no take-over comes before the move plus the wait.
    for attempt in 0.. {
        assert!(attempt < 5, "the epoch never moved before the waiting writer took over");
        let (epoch, pair) = (Arc::new(AtomicU64::new(1)), Arc::new(Pair::default()));
        let (e, p) = (Arc::clone(&epoch), Arc::clone(&pair));
        let writer = std::thread::spawn(move || within(HANG, move || write_value(&e, &p, 7)));
        std::thread::sleep(WRITER_WAIT / 2);
        // Taken before the move: the writer cannot see it any earlier.
        let moved_at = Instant::now();
        let moved = epoch.compare_exchange(1, 3, Ordering::SeqCst, Ordering::SeqCst).is_ok();
        assert!(writer.join().unwrap());
        if !moved {
            // The waiting writer got there first (this thread slept past the
            // wait): nothing was tested; again.
            continue;
        }
        let writes = pair.writes();
        assert_eq!(writes.len(), 1);
        assert!(
            writes[0] >= moved_at + WRITER_WAIT,
            "took over {:?} after the epoch moved, less than the wait",
            writes[0].saturating_duration_since(moved_at)
        );
        assert_eq!(epoch.load(Ordering::SeqCst), 6, "taken over at 5, released at 6");
        return;
    }
}

#[test]
fn a_refusal_that_will_be_tried_again_is_not_counted() {
    let fresh = Fresh::new("uncounted");
    let ledger = &fresh.ledger;
    let dev = ledger.device_index(b"GPU-uncounted-00", 1 << 30).unwrap();
    ledger.set_memory_limit_bytes(dev, 10 * MIB, PolicySource::Monitor);
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, 8 * MIB).unwrap();
    let denied = ledger.try_reserve_uncounted(&slot, dev, 4 * MIB).unwrap_err();
    assert_eq!(denied, Denied { used_bytes: 8 * MIB, limit_bytes: 10 * MIB, requested_bytes: 4 * MIB });
    assert_eq!(ledger.used_bytes(dev), 8 * MIB, "a refusal moves nothing");
    assert_eq!(ledger.slots()[0].bytes_per_device, vec![(dev, 8 * MIB)]);
    assert_eq!(ledger.alloc_denied_total(dev), 0, "and is not counted");
    // The caller counts the final refusal once.
    ledger.count_denied(dev);
    assert_eq!(ledger.alloc_denied_total(dev), 1);
    ledger.count_denied(MAX_DEVICES);
    assert_eq!(ledger.alloc_denied_total(dev), 1, "a device outside the ledger counts nowhere");
    // Within the cap it admits, like try_reserve.
    ledger.try_reserve_uncounted(&slot, dev, 2 * MIB).unwrap();
    assert_eq!(ledger.used_bytes(dev), 10 * MIB);
    assert_eq!(ledger.slots()[0].bytes_per_device, vec![(dev, 10 * MIB)]);
    ledger.release_slot(slot);
}

/// The byte a process appending device entry `index` locks, as
/// `include/gpuslice.h` places the entry: the device table starts at byte
/// 128 of the header, 64 bytes an entry.
fn device_entry_byte(index: usize) -> u64 {
    128 + 64 * index as u64
}

#[test]
fn a_device_entry_claimer_locks_the_entry_s_first_byte() {
    let fresh = Fresh::new("device-lock");
    let ledger = &fresh.ledger;
    assert_eq!(ledger.device_index(b"GPU-lock-byte-00", 1 << 30).unwrap(), 0);
    assert_eq!(ledger.device_index(b"GPU-lock-byte-01", 1 << 30).unwrap(), 1);
    // A live process is between its claim of entry 2 and its READY.
    let claimer = Ledger::open(ledger.path()).unwrap();
    assert!(ofd::try_lock(claimer.lock_fd(), device_entry_byte(2)).unwrap());
    ledger.layout().header.devices[2].state.store(device_state::CLAIMING, Ordering::SeqCst);
    assert!(
        matches!(ledger.device_index(b"GPU-lock-byte-02", 1 << 30), Err(LedgerError::DeviceEntryStuck { index: 2 })),
        "a live claimer's entry was taken over: its lock was looked for at another byte"
    );
    drop(claimer);
    assert_eq!(ledger.device_index(b"GPU-lock-byte-02", 1 << 30).unwrap(), 2, "a dead claimer's entry is taken over");
}

#[test]
fn a_release_past_a_usage_a_foreign_writer_lowered_ends_at_zero_not_wrapped() {
    let fresh = Fresh::new("take-at-most");
    let ledger = &fresh.ledger;
    let dev = ledger.device_index(b"GPU-take-at-most", 1 << 30).unwrap();
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, 10 * MIB).unwrap();
    // The file was damaged: usage says less than the slot holds.
    ledger.layout().usage.devices[dev].used_bytes.store(4 * MIB, Ordering::SeqCst);
    ledger.release(&slot, dev, 10 * MIB);
    assert_eq!(ledger.used_bytes(dev), 0, "the excess taken is added back");
    assert!(ledger.slots()[0].bytes_per_device.is_empty(), "the slot gave all it held");
    ledger.release_slot(slot);
}

/// How long an entry must have been `CLAIMING`, its lock free, before it
/// is taken for a dead claimer's (`DEVICE_CLAIM_GRACE`).
const CLAIM_GRACE: Duration = Duration::from_millis(50);

#[test]
fn an_entry_left_claiming_without_a_lock_is_taken_over_only_after_the_grace() {
    let fresh = Fresh::new("claim-grace");
    let ledger = &fresh.ledger;
    // A claimer of a build from before the lock, or a dead one: no lock.
    ledger.layout().header.devices[0].state.store(device_state::CLAIMING, Ordering::SeqCst);
    let started = Instant::now();
    assert_eq!(ledger.device_index(b"GPU-claim-grace0", 1 << 30).unwrap(), 0);
    let waited = started.elapsed();
    assert!(waited >= CLAIM_GRACE, "taken over after {waited:?}: a claimer without the lock had no time to finish");
    assert_eq!(ledger.devices()[0].uuid, *b"GPU-claim-grace0");
}

#[test]
fn a_process_holds_itself_to_the_cap_it_holds_whatever_the_page_says() {
    let fresh = Fresh::new("held-cap");
    let ledger = &fresh.ledger;
    let dev = ledger.device_index(b"GPU-held-cap-000", 1 << 30).unwrap();
    assert_eq!(ledger.held_cap_bytes(dev), crate::UNLIMITED);
    ledger.hold_cap_at_most(dev, 6 * MIB);
    ledger.hold_cap_at_most(dev, 9 * MIB);
    assert_eq!(ledger.held_cap_bytes(dev), 6 * MIB, "held only lower");
    assert_eq!(ledger.held_cap_bytes(dev + 1), crate::UNLIMITED, "on its device only");
    assert_eq!(ledger.held_cap_bytes(MAX_DEVICES), crate::UNLIMITED);
    ledger.hold_cap_at_most(MAX_DEVICES, 1);
    // The page raised to unlimited (by the tenant): the held cap stays.
    ledger.set_memory_limit_bytes(dev, crate::UNLIMITED, PolicySource::Environment);
    assert_eq!(ledger.memory_limit_bytes(dev), 6 * MIB);
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, 6 * MIB).unwrap();
    let denied = ledger.try_reserve(&slot, dev, 1).unwrap_err();
    assert_eq!(denied, Denied { used_bytes: 6 * MIB, limit_bytes: 6 * MIB, requested_bytes: 1 });
    // The page lowers it further.
    ledger.set_memory_limit_bytes(dev, 2 * MIB, PolicySource::Monitor);
    assert_eq!(ledger.memory_limit_bytes(dev), 2 * MIB);
    ledger.release_slot(slot);
}

#[test]
fn the_context_overhead_is_kept_per_device() {
    let fresh = Fresh::new("overhead");
    let ledger = &fresh.ledger;
    let dev = ledger.device_index(b"GPU-overhead-000", 1 << 30).unwrap();
    assert_eq!(ledger.context_overhead_bytes(dev), 0, "0 until measured");
    ledger.set_context_overhead_bytes(dev, 300 * MIB);
    assert_eq!(ledger.context_overhead_bytes(dev), 300 * MIB);
    assert_eq!(ledger.context_overhead_bytes(dev + 1), 0);
    ledger.set_context_overhead_bytes(MAX_DEVICES, 1);
    assert_eq!(ledger.context_overhead_bytes(MAX_DEVICES), 0);
    let other = Ledger::open(ledger.path()).unwrap();
    assert_eq!(other.context_overhead_bytes(dev), 300 * MIB, "in the file, for every process");
}

#[test]
fn every_reclaimed_process_is_counted() {
    let fresh = Fresh::new("reclaimed-count");
    let ledger = &fresh.ledger;
    assert_eq!(ledger.reclaimed_processes_total(), 0);
    let dead: Vec<Ledger> = (0..3).map(|_| Ledger::open(ledger.path()).unwrap()).collect();
    for process in &dead {
        process.claim_slot().unwrap();
    }
    drop(dead);
    assert_eq!(ledger.reclaim_dead().len(), 3);
    assert_eq!(ledger.reclaimed_processes_total(), 3);
}

/// Each pair is written under its own epoch word, which a write moves by
/// two (claimed odd, released even): the cap on `policy_epoch`, the compute
/// limit on `compute_epoch`, and neither on the other's.
#[test]
fn each_pair_is_written_under_its_own_epoch() {
    let fresh = Fresh::new("own-epoch");
    let ledger = &fresh.ledger;
    let dev = ledger.device_index(b"GPU-own-epoch-00", 1 << 30).unwrap();
    let record = &ledger.layout().policy.devices[dev];
    let words = || (record.policy_epoch.load(Ordering::SeqCst), record.compute_epoch.load(Ordering::SeqCst));
    let before = words();
    ledger.set_compute_limit(dev, 3000, PolicySource::Monitor);
    assert_eq!(words(), (before.0, before.1 + 2), "the compute limit moved only compute_epoch");
    ledger.set_memory_limit_bytes(dev, 8 * MIB, PolicySource::Monitor);
    assert_eq!(words(), (before.0 + 2, before.1 + 2), "the cap moved only policy_epoch");
}
