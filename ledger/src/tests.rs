//! Unit tests of the ledger: each on its own temporary directory.

use super::*;
use crate::layout::{self, FILE_BYTES, LAYOUT_VERSION, MAGIC};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

const UUID: [u8; 16] = *b"GPU-0-uuid-bytes";
const MIB: u64 = 1 << 20;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("gpuslice-ledger-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh ledger of tenant "t" in its own directory, with one 1 GiB
/// device registered; the directory lives as long as the returned guard.
fn one_device_ledger() -> (TempDir, Ledger, usize) {
    let dir = TempDir::new();
    let ledger = Ledger::open_or_create(&dir.0, "t").unwrap();
    let dev = ledger.device_index(&UUID, 1 << 30).unwrap();
    (dir, ledger, dev)
}

/// Runs `f` on a thread of its own and returns what it returns; if it
/// takes longer than `limit`, ends the whole test process, failing. A
/// thread that loops for ever cannot be stopped, and the same loop holds up
/// every other test that reaches it (here or in other modules), so a
/// panic would fail this test and leave the run hanging.
pub(crate) fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = done_tx.send(f());
    });
    match done_rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the worker returned without sending"),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            // Past the test harness's capture of this thread's output,
            // which ends with the process.
            let test = std::thread::current().name().unwrap_or("a test").to_string();
            let _ = writeln!(std::io::stderr(), "{test}: did not finish within {limit:?}; ending the test run");
            std::process::exit(101)
        }
    }
}

fn file_bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn create_then_reopen_sees_the_same_file() {
    let dir = TempDir::new();
    let ledger = Ledger::open_or_create(&dir.0.join("nested"), "team-a").unwrap();
    assert_eq!(ledger.tenant(), "team-a");
    assert_eq!(ledger.path(), tenant_path(&dir.0.join("nested"), "team-a"));
    let meta = std::fs::metadata(ledger.path()).unwrap();
    assert_eq!(meta.len(), FILE_BYTES as u64);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "only the creator's user can open it");
    let dev = ledger.device_index(&UUID, 80 << 30).unwrap();
    assert_eq!(dev, 0);
    assert_eq!(ledger.memory_limit_bytes(dev), UNLIMITED);
    assert_eq!(ledger.policy_source(dev), PolicySource::Unset);
    ledger.set_memory_limit_bytes(dev, 4 << 30, PolicySource::Monitor);

    let other = Ledger::open(ledger.path()).unwrap();
    assert_eq!(other.device_index(&UUID, 80 << 30).unwrap(), 0);
    assert_eq!(other.device_index(b"GPU-1-uuid-bytes", 40 << 30).unwrap(), 1);
    assert_eq!(other.memory_limit_bytes(0), 4 << 30);
    assert_eq!(other.policy_source(0), PolicySource::Monitor);
    let devices = ledger.devices();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[1], DeviceEntry { index: 1, uuid: *b"GPU-1-uuid-bytes", total_memory_bytes: 40 << 30 });
    // No temporary files are left behind.
    assert_eq!(std::fs::read_dir(dir.0.join("nested")).unwrap().count(), 1);
}

#[test]
fn bad_tenant_names_are_refused() {
    let dir = TempDir::new();
    for bad in ["", "a/b", "..", "x y"] {
        let error = Ledger::open_or_create(&dir.0, bad).err().unwrap();
        assert!(matches!(error, OpenError::BadTenantName { .. }), "{bad:?}: {error}");
    }
}

#[test]
fn concurrent_first_processes_agree_on_one_file() {
    let dir = TempDir::new();
    let dir_path = Arc::new(dir.0.clone());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let dir_path = Arc::clone(&dir_path);
            std::thread::spawn(move || {
                let ledger = Ledger::open_or_create(&dir_path, "race").unwrap();
                ledger.device_index(&UUID, 1 << 30).unwrap();
                let _ = ledger.apply_environment_cap(0, 100 * MIB, || false);
                ledger.memory_limit_bytes(0)
            })
        })
        .collect();
    for thread in threads {
        assert_eq!(thread.join().unwrap(), 100 * MIB);
    }
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 1);
}

fn expect_error_and_untouched(path: &Path, check: impl Fn(&OpenError) -> bool) -> String {
    let before = file_bytes(path);
    let error = Ledger::open(path).err().expect("open must refuse the file");
    assert!(check(&error), "unexpected error: {error:?}");
    let error_via_create = Ledger::open_or_create(path.parent().unwrap(), "t").err().expect("must refuse");
    assert!(check(&error_via_create), "unexpected error: {error_via_create:?}");
    assert_eq!(file_bytes(path), before, "the file was rewritten");
    let message = error.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    message
}

fn valid_file(dir: &Path) -> PathBuf {
    let ledger = Ledger::open_or_create(dir, "t").unwrap();
    ledger.path().to_path_buf()
}

#[test]
fn wrong_magic_is_not_a_ledger() {
    let dir = TempDir::new();
    let path = valid_file(&dir.0);
    let mut bytes = file_bytes(&path);
    bytes[..8].copy_from_slice(b"NOTMINE!");
    std::fs::write(&path, &bytes).unwrap();
    let message = expect_error_and_untouched(&path, |e| matches!(e, OpenError::NotALedger { .. }));
    assert!(message.contains("not a gpuslice ledger"), "{message}");
}

#[test]
fn other_layout_version_is_refused() {
    let dir = TempDir::new();
    let path = valid_file(&dir.0);
    let mut bytes = file_bytes(&path);
    bytes[8..12].copy_from_slice(&(LAYOUT_VERSION + 1).to_ne_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let message = expect_error_and_untouched(
        &path,
        |e| matches!(e, OpenError::OtherVersion { found, expected, .. } if *found == LAYOUT_VERSION + 1 && *expected == LAYOUT_VERSION),
    );
    assert!(
        message.contains(&format!("version {}", LAYOUT_VERSION + 1)) && message.contains(&format!("version {LAYOUT_VERSION}")),
        "{message}"
    );
}

#[test]
fn truncated_file_is_refused() {
    let dir = TempDir::new();
    let path = valid_file(&dir.0);
    let bytes = file_bytes(&path);
    std::fs::write(&path, &bytes[..FILE_BYTES / 2]).unwrap();
    expect_error_and_untouched(
        &path,
        |e| matches!(e, OpenError::Truncated { len, expected, .. } if *len == (FILE_BYTES / 2) as u64 && *expected == FILE_BYTES as u64),
    );
}

#[test]
fn garbage_is_refused() {
    let dir = TempDir::new();
    let path = dir.0.join("t.ledger");
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let garbage: Vec<u8> = (0..FILE_BYTES)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    std::fs::write(&path, &garbage).unwrap();
    expect_error_and_untouched(&path, |e| matches!(e, OpenError::NotALedger { .. }));
}

#[test]
fn corrupt_field_is_refused() {
    let dir = TempDir::new();
    let path = valid_file(&dir.0);
    let mut bytes = file_bytes(&path);
    // Slot 3's state word: 7 is no state.
    let offset = layout::SLOTS_OFFSET + 3 * layout::SLOT_BYTES;
    bytes[offset..offset + 8].copy_from_slice(&7u64.to_ne_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let message = expect_error_and_untouched(&path, |e| matches!(e, OpenError::Corrupt { field, .. } if field == "slots[3].state_word"));
    assert!(message.contains("corrupt"), "{message}");
}

/// Offset of the header's `compute_offset` word.
const COMPUTE_OFFSET_AT: usize = std::mem::offset_of!(layout::Header, compute_offset);

#[test]
fn the_header_says_where_the_compute_page_is() {
    let dir = TempDir::new();
    let path = valid_file(&dir.0);
    let bytes = file_bytes(&path);
    let stored = u32::from_ne_bytes(bytes[COMPUTE_OFFSET_AT..COMPUTE_OFFSET_AT + 4].try_into().unwrap());
    assert_eq!(stored as usize, layout::COMPUTE_OFFSET);
    assert_eq!(stored, 3 * 4096);
}

#[test]
fn a_file_from_before_compute_offset_still_opens() {
    let dir = TempDir::new();
    let path = valid_file(&dir.0);
    let mut bytes = file_bytes(&path);
    // The word was reserved, zero, in files of earlier builds of this version.
    bytes[COMPUTE_OFFSET_AT..COMPUTE_OFFSET_AT + 4].copy_from_slice(&0u32.to_ne_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let ledger = Ledger::open(&path).unwrap();
    assert_eq!(ledger.tenant(), "t");
    assert!(ledger.damage().is_none());
    assert_eq!(file_bytes(&path), bytes, "opening never writes the field in");
}

#[test]
fn a_compute_offset_that_names_another_place_is_refused() {
    for wrong in [layout::USAGE_OFFSET as u32, layout::COMPUTE_OFFSET as u32 + 1, u32::MAX] {
        let dir = TempDir::new();
        let path = valid_file(&dir.0);
        let mut bytes = file_bytes(&path);
        bytes[COMPUTE_OFFSET_AT..COMPUTE_OFFSET_AT + 4].copy_from_slice(&wrong.to_ne_bytes());
        std::fs::write(&path, &bytes).unwrap();
        expect_error_and_untouched(
            &path,
            |e| matches!(e, OpenError::Corrupt { field, value, .. } if field == "compute_offset" && *value == wrong as u64),
        );
    }
}

#[test]
fn zero_length_file_stays_refused_and_untouched() {
    let dir = TempDir::new();
    let path = dir.0.join("t.ledger");
    std::fs::write(&path, b"").unwrap();
    expect_error_and_untouched(&path, |e| matches!(e, OpenError::Truncated { len: 0, .. }));
}

#[test]
fn zero_length_file_being_created_is_waited_for() {
    let dir = TempDir::new();
    // A complete ledger made elsewhere stands for what a concurrent creator
    // will write.
    let source_dir = TempDir::new();
    let complete = file_bytes(&valid_file(&source_dir.0));
    let path = dir.0.join("t.ledger");
    std::fs::write(&path, b"").unwrap();
    let writer_path = path.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        std::fs::write(&writer_path, complete).unwrap();
    });
    let ledger = Ledger::open_or_create(&dir.0, "t").unwrap();
    writer.join().unwrap();
    assert_eq!(ledger.tenant(), "t");
    assert_eq!(ledger.memory_limit_bytes(0), UNLIMITED);
}

#[test]
fn magic_constant_spells_gpuslice() {
    assert_eq!(&MAGIC.to_le_bytes(), b"GPUSLICE");
}

#[test]
fn reserve_is_exact_at_the_cap_and_frees_make_room() {
    let (_dir, ledger, dev) = one_device_ledger();
    ledger.set_memory_limit_bytes(dev, 10 * MIB, PolicySource::Monitor);
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, 10 * MIB).unwrap();
    let denied = ledger.try_reserve(&slot, dev, 1).unwrap_err();
    assert_eq!(denied, Denied { used_bytes: 10 * MIB, limit_bytes: 10 * MIB, requested_bytes: 1 });
    assert_eq!(ledger.alloc_denied_total(dev), 1);
    ledger.release(&slot, dev, 4 * MIB);
    ledger.try_reserve(&slot, dev, 4 * MIB).unwrap();
    assert_eq!(ledger.used_bytes(dev), 10 * MIB);
    // A lowered cap refuses new reservations and keeps the old ones.
    ledger.set_memory_limit_bytes(dev, 5 * MIB, PolicySource::Monitor);
    assert!(ledger.try_reserve(&slot, dev, 1).is_err());
    assert_eq!(ledger.used_bytes(dev), 10 * MIB);
    ledger.release_slot(slot);
    assert_eq!(ledger.used_bytes(dev), 0);
    assert!(ledger.slots().is_empty());
}

#[test]
fn release_saturates_and_never_takes_other_processes_bytes() {
    let (_dir, ledger, dev) = one_device_ledger();
    let other = Ledger::open(ledger.path()).unwrap();
    let mine = ledger.claim_slot().unwrap();
    let theirs = other.claim_slot().unwrap();
    ledger.try_reserve(&mine, dev, 100).unwrap();
    other.try_reserve(&theirs, dev, 1000).unwrap();
    ledger.release(&mine, dev, 5000);
    assert_eq!(ledger.used_bytes(dev), 1000);
    ledger.release(&mine, dev, 1);
    assert_eq!(ledger.used_bytes(dev), 1000);
    other.release(&theirs, dev, u64::MAX);
    assert_eq!(ledger.used_bytes(dev), 0);
    other.release(&theirs, dev, 1);
    assert_eq!(ledger.used_bytes(dev), 0);
}

#[test]
fn out_of_range_device_fails_closed() {
    let dir = TempDir::new();
    let ledger = Ledger::open_or_create(&dir.0, "t").unwrap();
    let slot = ledger.claim_slot().unwrap();
    assert_eq!(ledger.memory_limit_bytes(MAX_DEVICES), 0);
    assert!(ledger.try_reserve(&slot, MAX_DEVICES, 1).is_err());
}

#[test]
fn an_environment_cap_is_set_once_and_replaced_only_when_allowed() {
    let (_dir, ledger, dev) = one_device_ledger();
    assert_eq!(ledger.apply_environment_cap(dev, 8 * MIB, || false), Decision::Set);
    assert_eq!(ledger.policy_source(dev), PolicySource::Environment);
    assert_eq!(ledger.apply_environment_cap(dev, 8 * MIB, || true), Decision::Same);
    assert_eq!(
        ledger.apply_environment_cap(dev, 9 * MIB, || false),
        Decision::Kept { existing: 8 * MIB, source: PolicySource::Environment }
    );
    assert_eq!(ledger.memory_limit_bytes(dev), 8 * MIB);
    assert_eq!(ledger.apply_environment_cap(dev, 9 * MIB, || true), Decision::Replaced { previous: 8 * MIB });
    assert_eq!(ledger.memory_limit_bytes(dev), 9 * MIB);
    ledger.set_memory_limit_bytes(dev, 2 * MIB, PolicySource::Monitor);
    assert_eq!(ledger.apply_environment_cap(dev, 8 * MIB, || true), Decision::Kept { existing: 2 * MIB, source: PolicySource::Monitor });
    assert_eq!(ledger.policy_source(dev), PolicySource::Monitor);
    assert_eq!(ledger.layout().policy.devices[dev].policy_epoch.load(Ordering::SeqCst) % 2, 0);
}

#[test]
fn a_cap_written_while_a_process_decides_is_never_overwritten_by_a_stale_decision() {
    let (_dir, ledger, dev) = one_device_ledger();
    assert_eq!(ledger.apply_environment_cap(dev, 8 * MIB, || false), Decision::Set);
    let monitor = Ledger::open(ledger.path()).unwrap();
    // The process has read an environment's cap and finds itself alone; at
    // that moment the monitor sets its cap. The process must decide again.
    let mut asked = 0;
    let decision = ledger.apply_environment_cap(dev, 9 * MIB, || {
        asked += 1;
        if asked == 1 {
            monitor.set_memory_limit_bytes(dev, 3 * MIB, PolicySource::Monitor);
        }
        true
    });
    assert_eq!(decision, Decision::Kept { existing: 3 * MIB, source: PolicySource::Monitor });
    assert_eq!((ledger.memory_limit_bytes(dev), ledger.policy_source(dev)), (3 * MIB, PolicySource::Monitor));
    // Two processes deciding together: exactly one decision wins.
    let other = Ledger::open(ledger.path()).unwrap();
    ledger.set_memory_limit_bytes(dev, 8 * MIB, PolicySource::Environment);
    let decision = ledger.apply_environment_cap(dev, 9 * MIB, || {
        let _ = other.apply_environment_cap(dev, 10 * MIB, || true);
        true
    });
    assert_eq!(
        decision,
        Decision::Replaced { previous: 10 * MIB },
        "the decision taken on a cap that changed under it was taken again, on the new cap"
    );
    assert_eq!(ledger.memory_limit_bytes(dev), 9 * MIB);
}

#[test]
fn a_policy_writer_that_died_mid_write_is_taken_over() {
    let (dir, ledger, dev) = one_device_ledger();
    // Claimed the record (odd epoch) and died before its stores.
    ledger.layout().policy.devices[dev].policy_epoch.store(1, Ordering::SeqCst);
    let started = std::time::Instant::now();
    // Never waited for for ever: a writer that does not take over fails here.
    let ledger = within(Duration::from_secs(10), move || {
        assert_eq!(ledger.apply_environment_cap(dev, 8 * MIB, || false), Decision::Set);
        ledger
    });
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(ledger.memory_limit_bytes(dev), 8 * MIB);
    assert_eq!(ledger.layout().policy.devices[dev].policy_epoch.load(Ordering::SeqCst) % 2, 0);
    drop(dir);
}

#[test]
fn concurrent_reserve_never_passes_the_cap_and_ends_at_zero() {
    let dir = TempDir::new();
    let cap = 64 * MIB;
    {
        let ledger = Ledger::open_or_create(&dir.0, "t").unwrap();
        let dev = ledger.device_index(&UUID, 1 << 30).unwrap();
        ledger.set_memory_limit_bytes(dev, cap, PolicySource::Monitor);
    }
    let dir_path = Arc::new(dir.0.clone());
    let max_seen = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..16u64)
        .map(|seed| {
            let dir_path = Arc::clone(&dir_path);
            let max_seen = Arc::clone(&max_seen);
            std::thread::spawn(move || {
                // Each thread stands for a process: its own open file and slot.
                let ledger = Ledger::open_or_create(&dir_path, "t").unwrap();
                let slot = ledger.claim_slot().unwrap();
                let mut held: Vec<u64> = Vec::new();
                let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut denied = 0u64;
                for _ in 0..20_000 {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    if state % 3 == 0 && !held.is_empty() {
                        let bytes = held.swap_remove((state as usize / 3) % held.len());
                        ledger.release(&slot, 0, bytes);
                    } else {
                        let bytes = (state >> 8) % (8 * MIB) + 1;
                        match ledger.try_reserve(&slot, 0, bytes) {
                            Ok(()) => held.push(bytes),
                            Err(_) => denied += 1,
                        }
                    }
                    max_seen.fetch_max(ledger.used_bytes(0), Ordering::Relaxed);
                }
                for bytes in held {
                    ledger.release(&slot, 0, bytes);
                }
                ledger.release_slot(slot);
                denied
            })
        })
        .collect();
    let denied: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let ledger = Ledger::open(&tenant_path(&dir.0, "t")).unwrap();
    assert!(max_seen.load(Ordering::Relaxed) <= cap, "usage passed the cap: {}", max_seen.load(Ordering::Relaxed));
    assert!(denied > 0, "the test never reached the cap, so it proved nothing");
    assert_eq!(ledger.alloc_denied_total(0), denied);
    assert_eq!(ledger.used_bytes(0), 0);
    assert!(ledger.slots().is_empty());
}

#[test]
fn slots_are_reused_with_a_new_generation() {
    let dir = TempDir::new();
    let ledger = Ledger::open_or_create(&dir.0, "t").unwrap();
    let first = ledger.claim_slot().unwrap();
    let (index, generation) = (first.index(), first.generation());
    let views = ledger.slots();
    assert_eq!(views.len(), 1);
    assert!(views[0].alive);
    assert_eq!(views[0].ns_pid, std::process::id());
    ledger.release_slot(first);
    let again = ledger.claim_slot().unwrap();
    assert_eq!(again.index(), index);
    assert_eq!(again.generation(), generation + 1);
}

#[test]
fn reclaim_skips_live_slots_of_this_and_other_open_files() {
    let (_dir, ledger, dev) = one_device_ledger();
    let other = Ledger::open(ledger.path()).unwrap();
    let mine = ledger.claim_slot().unwrap();
    let theirs = other.claim_slot().unwrap();
    ledger.try_reserve(&mine, dev, 7).unwrap();
    other.try_reserve(&theirs, dev, 11).unwrap();
    assert!(ledger.reclaim_dead().is_empty());
    assert!(other.reclaim_dead().is_empty());
    assert_eq!(ledger.used_bytes(dev), 18);
    // Closing the other file is its owner's death: its lock goes away. A
    // test beside this one that spawns a process may have forked while the
    // file was open, and its child holds the lock until it execs: a later
    // round reclaims the slot, as the monitor's next round would.
    drop(other);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut reclaimed = ledger.reclaim_dead();
    while reclaimed.is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
        reclaimed = ledger.reclaim_dead();
    }
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].slot_index, theirs.index());
    assert_eq!(reclaimed[0].bytes_per_device, vec![(dev, 11)]);
    assert_eq!(ledger.used_bytes(dev), 7);
    assert_eq!(ledger.reclaimed_processes_total(), 1);
    assert_eq!(ledger.slots().len(), 1);
}

#[test]
fn a_free_slot_s_late_bytes_are_drained_only_while_it_is_free_and_nobody_holds_it() {
    let (_dir, ledger, dev) = one_device_ledger();
    let owner = Ledger::open(ledger.path()).unwrap();
    let slot = owner.claim_slot().unwrap();
    let index = slot.index();
    let record = &ledger.layout().slots[index];
    owner.try_reserve(&slot, dev, 5 * MIB).unwrap();
    // Its owner died: the slot is ALIVE and nobody holds its lock. Read
    // again under the lock, it is no free slot: its bytes are a dead
    // process's, for reclaim to return with the slot.
    drop(owner);
    assert!(!ledger.drain_free_slot(index, record));
    assert_eq!((ledger.used_bytes(dev), record.bytes[dev].load(Ordering::SeqCst)), (5 * MIB, 5 * MIB));
    assert_eq!(ledger.reclaim_dead().len(), 1);
    assert_eq!(ledger.used_bytes(dev), 0);

    // A late reservation lands in the free slot while a process holds its
    // lock (a claimer at work): left to that claimer.
    record.bytes[dev].fetch_add(3 * MIB, Ordering::SeqCst);
    ledger.layout().usage.devices[dev].used_bytes.fetch_add(3 * MIB, Ordering::SeqCst);
    let claimer = Ledger::open(ledger.path()).unwrap();
    assert!(ofd::try_lock(claimer.lock_fd(), slot_lock_offset(index)).unwrap());
    assert!(!ledger.drain_free_slot(index, record));
    assert!(ledger.reclaim_dead().is_empty());
    assert_eq!(ledger.used_bytes(dev), 3 * MIB, "drained under a claimer's lock");
    drop(claimer);
    assert!(ledger.reclaim_dead().is_empty(), "a free slot is no dead process");
    assert_eq!((ledger.used_bytes(dev), record.bytes[dev].load(Ordering::SeqCst)), (0, 0));
    assert_eq!(ledger.reclaimed_processes_total(), 1);
    // The lock was dropped again: a claim finds the slot.
    assert_eq!(ledger.claim_slot().unwrap().index(), index);
}

#[test]
fn a_slot_is_taken_over_only_in_a_state_the_taker_wants_read_again_under_its_lock() {
    let (_dir, ledger, dev) = one_device_ledger();
    let owner = Ledger::open(ledger.path()).unwrap();
    let slot = owner.claim_slot().unwrap();
    let (index, generation) = (slot.index(), slot.generation());
    owner.try_reserve(&slot, dev, 6 * MIB).unwrap();
    half_done_reservation(&owner, &slot, dev, MIB);
    drop(owner);
    let record = &ledger.layout().slots[index];
    let alive = layout::state_word(layout::slot_state::ALIVE, generation);
    let in_flight_before = record.in_flight_word.load(Ordering::SeqCst);
    // A taker that wants another state (its first look saw one) leaves it
    // whole, and drops the lock.
    let refused = ledger.take_over_slot(index, record, |state| state == layout::slot_state::CLAIMED, |_, _, _| ());
    assert!(refused.is_none());
    assert_eq!(record.state_word.load(Ordering::SeqCst), alive);
    assert_eq!(record.in_flight_word.load(Ordering::SeqCst), in_flight_before);
    assert_eq!((ledger.used_bytes(dev), record.bytes[dev].load(Ordering::SeqCst)), (7 * MIB, 6 * MIB));
    let other = Ledger::open(ledger.path()).unwrap();
    assert!(ofd::try_lock(other.lock_fd(), slot_lock_offset(index)).unwrap(), "the lock was dropped");
    // While another process holds the lock, nobody takes the slot over.
    let held = ledger.take_over_slot(index, record, |state| state == layout::slot_state::ALIVE, |_, _, _| ());
    assert!(held.is_none());
    assert_eq!(record.state_word.load(Ordering::SeqCst), alive);
    drop(other);
    // One that wants it: RECLAIMING while it drains, then free, one
    // generation on, its bytes back, its writer's change settled.
    let taken = ledger.take_over_slot(
        index,
        record,
        |state| state == layout::slot_state::ALIVE,
        |word, record, bytes| (word, record.state_word.load(Ordering::SeqCst), in_flight_count(&ledger, index), bytes),
    );
    let reclaiming = layout::state_word(layout::slot_state::RECLAIMING, generation);
    assert_eq!(taken, Some((alive, reclaiming, 0, vec![(dev, 6 * MIB)])));
    assert_eq!(record.state_word.load(Ordering::SeqCst), layout::state_word(layout::slot_state::FREE, generation + 1));
    // Nothing in flight; finished: the drain, then the settling.
    assert_eq!(record.in_flight_word.load(Ordering::SeqCst), ((in_flight_before >> 32) + 2) << 32);
    assert_eq!((ledger.used_bytes(dev), record.bytes[dev].load(Ordering::SeqCst)), (MIB, 0), "the half-done MiB is a leak now");
    let other = Ledger::open(ledger.path()).unwrap();
    assert!(ofd::try_lock(other.lock_fd(), slot_lock_offset(index)).unwrap(), "the lock was dropped");
}

#[test]
fn a_slot_view_totals_its_bytes_over_every_device() {
    let (_dir, ledger, dev) = one_device_ledger();
    let second = ledger.device_index(b"GPU-1-uuid-bytes", 1 << 30).unwrap();
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, 3 * MIB).unwrap();
    ledger.try_reserve(&slot, second, 4 * MIB).unwrap();
    let views = ledger.slots();
    assert_eq!(views[0].bytes_per_device, vec![(dev, 3 * MIB), (second, 4 * MIB)]);
    assert_eq!(views[0].total_bytes(), 7 * MIB);
    ledger.release_slot(slot);
}

#[test]
fn a_slot_a_reclaimer_died_on_is_reclaimed_not_reset() {
    let (_dir, ledger, dev) = one_device_ledger();
    let owner = Ledger::open(ledger.path()).unwrap();
    let slot = owner.claim_slot().unwrap();
    owner.try_reserve(&slot, dev, 2 * MIB).unwrap();
    drop(owner);
    // A reclaimer marked it RECLAIMING and died before it freed it.
    let record = &ledger.layout().slots[slot.index()];
    record.state_word.store(layout::state_word(layout::slot_state::RECLAIMING, slot.generation()), Ordering::SeqCst);
    assert!(ledger.reset_invalid_slots().is_empty(), "RECLAIMING is a state writers write");
    let reclaimed = ledger.reclaim_dead();
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].bytes_per_device, vec![(dev, 2 * MIB)]);
    assert_eq!(ledger.used_bytes(dev), 0);
}

#[test]
fn stray_bytes_of_a_free_slot_on_every_device_are_all_returned() {
    let (_dir, ledger, _dev) = one_device_ledger();
    let slot = ledger.claim_slot().unwrap();
    let index = slot.index();
    ledger.release_slot(slot);
    let record = &ledger.layout().slots[index];
    for dev in 0..MAX_DEVICES {
        record.bytes[dev].fetch_add(MIB, Ordering::SeqCst);
        ledger.layout().usage.devices[dev].used_bytes.fetch_add(MIB, Ordering::SeqCst);
    }
    assert!(ledger.reclaim_dead().is_empty());
    for dev in 0..MAX_DEVICES {
        assert_eq!((ledger.used_bytes(dev), record.bytes[dev].load(Ordering::SeqCst)), (0, 0), "device {dev}");
    }
}

#[test]
fn a_ledger_holding_more_than_64_slots_never_reclaims_its_own() {
    let (_dir, ledger, dev) = one_device_ledger();
    let slots: Vec<Slot> = (0..66).map(|_| ledger.claim_slot().unwrap()).collect();
    for slot in &slots {
        ledger.try_reserve(slot, dev, 1).unwrap();
    }
    let mut slots = slots.into_iter();
    let first = slots.next().unwrap();
    let sixty_fifth = slots.nth(63).unwrap();
    assert_eq!((first.index(), sixty_fifth.index()), (0, 64));
    // Releasing slot 64 must not make slot 0 look like another process's.
    ledger.release_slot(sixty_fifth);
    assert!(ledger.reclaim_dead().is_empty(), "a slot of this Ledger was taken for a dead process's");
    assert_eq!(ledger.used_bytes(dev), 65);
    assert_eq!(ledger.slots().iter().filter(|view| view.alive).count(), 65);
}

#[test]
fn the_audit_waits_for_a_change_in_flight_on_a_slot_of_its_own_ledger() {
    let (_dir, ledger, dev) = one_device_ledger();
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, MIB).unwrap();
    // This very Ledger is between the two steps of a change: its lock is its
    // own, which a probe through its own descriptor does not see.
    half_done_reservation(&ledger, &slot, dev, MIB);
    assert_eq!(ledger.audit_usage(dev), None, "a live change in flight taken for a leak");
    let other = Ledger::open(ledger.path()).unwrap();
    assert_eq!(other.audit_usage(dev), None);
}

/// The ledger directory `child_process_helper` opens.
const CHILD_DIR_VAR: &str = "GS_TEST_LEDGER_CHILD_DIR";

/// Not a test on its own: the child process of
/// `reclaim_returns_the_bytes_of_a_killed_process`, which runs it by name
/// with `--ignored`. Run any other way, it fails rather than pass having
/// checked nothing.
#[test]
#[ignore = "the child process of reclaim_returns_the_bytes_of_a_killed_process, which runs it"]
fn child_process_helper() {
    let dir = std::env::var_os(CHILD_DIR_VAR)
        .unwrap_or_else(|| panic!("{CHILD_DIR_VAR} is unset: run reclaim_returns_the_bytes_of_a_killed_process instead"));
    let ledger = Ledger::open_or_create(Path::new(&dir), "t").unwrap();
    let dev = ledger.device_index(&UUID, 1 << 30).unwrap();
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, 3 * MIB).unwrap();
    println!("LEDGER-CHILD-READY slot={}", slot.index());
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// A child process of a test, killed and reaped when the guard drops, so
/// that no test leaves one behind, whether it passes or fails.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // An error means it was already reaped: nothing is left to kill.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long the child of `reclaim_returns_the_bytes_of_a_killed_process`
/// has to say it holds its slot.
const CHILD_READY_WAIT: Duration = Duration::from_secs(60);

#[test]
fn reclaim_returns_the_bytes_of_a_killed_process() {
    let (dir, ledger, dev) = one_device_ledger();
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "tests::child_process_helper", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_VAR, &dir.0)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let child_pid = child.0.id();
    // Read on a thread of its own, so that a child that neither speaks nor
    // exits fails the test (and is killed) instead of holding it up.
    let stdout = child.0.stdout.take().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ready = BufReader::new(stdout).lines().map_while(Result::ok).any(|line| line.contains("LEDGER-CHILD-READY"));
        let _ = ready_tx.send(ready);
    });
    match ready_rx.recv_timeout(CHILD_READY_WAIT) {
        Ok(true) => {}
        Ok(false) | Err(_) => {
            let status = child.0.try_wait().ok().flatten();
            panic!("the child never claimed its slot (did tests::child_process_helper run?); its exit status: {status:?}");
        }
    }
    assert_eq!(ledger.used_bytes(dev), 3 * MIB);
    let views = ledger.slots();
    assert_eq!(views.len(), 1);
    assert!(views[0].alive);
    assert_eq!(views[0].ns_pid, child_pid);
    assert!(ledger.reclaim_dead().is_empty(), "a live process was reclaimed");

    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    assert!(!ledger.slots()[0].alive);
    let reclaimed = ledger.reclaim_dead();
    assert_eq!(reclaimed.len(), 1);
    assert_eq!(reclaimed[0].ns_pid, child_pid);
    assert_eq!(reclaimed[0].bytes_per_device, vec![(dev, 3 * MIB)]);
    assert_eq!(ledger.used_bytes(dev), 0);
    assert!(ledger.slots().is_empty());
    assert!(ledger.reclaim_dead().is_empty(), "reclaimed twice");
}

/// The guard kills a child that a failing test leaves running.
#[test]
fn a_test_child_is_killed_when_its_guard_drops() {
    let child = KillOnDrop(Command::new("sleep").arg("600").stdin(Stdio::null()).spawn().unwrap());
    let pid = child.0.id() as libc::pid_t;
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _child = child;
        panic!("an assertion failed while the child ran");
    }));
    assert!(panicked.is_err());
    // Reaped by the guard: no process of that pid is this process's child now.
    // SAFETY: waitpid with a null status pointer and WNOHANG only asks.
    let waited = unsafe { libc::waitpid(pid, std::ptr::null_mut(), libc::WNOHANG) };
    assert_eq!(waited, -1, "the child is still this process's: it was not killed and reaped");
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ECHILD));
}

/// The fallback order of `default_dir`, on candidates inside a temporary
/// directory (the real `/run/gpuslice` is never touched): a candidate that
/// cannot be created (its parent is a file, which stops root too) is
/// skipped, the next is created and a ledger file can be made in it; with
/// none usable the answer is the per-user directory under `/tmp`.
#[test]
fn the_default_dir_is_the_first_candidate_that_can_be_created_and_written() {
    let dir = TempDir::new();
    let blocker = dir.0.join("not-a-dir");
    std::fs::write(&blocker, b"").unwrap();
    let unusable = blocker.join("gpuslice");
    let runtime = dir.0.join("xdg").join("gpuslice");
    let picked = first_usable_dir([unusable.clone(), runtime.clone()]);
    assert_eq!(picked, runtime);
    assert!(runtime.is_dir());
    let ledger = Ledger::open_or_create(&picked, "t").unwrap();
    assert!(ledger.path().starts_with(&runtime));
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    assert_eq!(first_usable_dir([unusable]), PathBuf::from(format!("/tmp/gpuslice-{uid}")));
}

#[test]
fn a_released_slot_admits_nothing_and_stray_bytes_are_never_lost() {
    let (_dir, ledger, dev) = one_device_ledger();
    ledger.set_memory_limit_bytes(dev, 100 * MIB, PolicySource::Monitor);
    let slot = ledger.claim_slot().unwrap();
    let late = slot.duplicate();
    ledger.try_reserve(&slot, dev, 10 * MIB).unwrap();
    ledger.release_slot(slot);
    assert_eq!(ledger.used_bytes(dev), 0);
    // A thread still inside an allocation when the slot was released.
    assert!(ledger.try_reserve(&late, dev, 5 * MIB).is_err(), "a freed slot admits nothing");
    assert_eq!(ledger.used_bytes(dev), 0);
    // One that passed the check just before the release: its bytes landed in
    // the free slot. Whoever claims or reclaims the slot next returns them.
    let record = &ledger.layout().slots[late.index()];
    record.bytes[dev].fetch_add(7 * MIB, Ordering::AcqRel);
    ledger.layout().usage.devices[dev].used_bytes.fetch_add(7 * MIB, Ordering::AcqRel);
    assert_eq!(ledger.reclaim_dead().len(), 0, "a free slot is no dead process");
    assert_eq!(ledger.used_bytes(dev), 0, "reclaim returns stray bytes of free slots");
    record.bytes[dev].fetch_add(3 * MIB, Ordering::AcqRel);
    ledger.layout().usage.devices[dev].used_bytes.fetch_add(3 * MIB, Ordering::AcqRel);
    let again = ledger.claim_slot().unwrap();
    assert_eq!(again.index(), late.index());
    assert_eq!(ledger.used_bytes(dev), 0, "a claim returns what the free slot held");
    // A release through the stale copy never takes the new owner's bytes.
    ledger.try_reserve(&again, dev, 4 * MIB).unwrap();
    ledger.release(&late, dev, 4 * MIB);
    assert_eq!(ledger.used_bytes(dev), 4 * MIB);
    ledger.release_slot(again);
    assert_eq!(ledger.used_bytes(dev), 0);
}

/// A reservation cut between its two steps: marked in flight on `slot`, the
/// tenant's counter raised, the slot's bytes not.
fn half_done_reservation(ledger: &Ledger, slot: &Slot, dev: usize, bytes: u64) {
    let record = &ledger.layout().slots[slot.index()];
    record.in_flight_word.fetch_add(layout::in_flight::BEGIN, Ordering::SeqCst);
    ledger.layout().usage.devices[dev].used_bytes.fetch_add(bytes, Ordering::SeqCst);
}

#[test]
fn a_reservation_cut_by_death_is_corrected_but_not_while_its_owner_lives() {
    let (_dir, ledger, dev) = one_device_ledger();
    let owner = Ledger::open(ledger.path()).unwrap();
    let slot = owner.claim_slot().unwrap();
    owner.try_reserve(&slot, dev, 7 * MIB).unwrap();
    assert_eq!(ledger.audit_usage(dev), Some(UsageAudit { used_bytes: 7 * MIB, slots_bytes: 7 * MIB }));
    assert!(!ledger.correct_unattributed(dev, &ledger.audit_usage(dev).unwrap()), "nothing to correct");

    half_done_reservation(&owner, &slot, dev, 10 * MIB);
    // Its owner lives (stopped, say): the change may still finish.
    for _ in 0..3 {
        assert_eq!(ledger.audit_usage(dev), None, "a live owner's change in flight is not a leak");
    }
    assert_eq!(ledger.used_bytes(dev), 17 * MIB);
    // The owner dies between the steps: the kernel drops its lock.
    drop(owner);
    let audit = ledger.audit_usage(dev).expect("a dead writer's mark does not hold the audit up");
    assert_eq!(audit, UsageAudit { used_bytes: 17 * MIB, slots_bytes: 7 * MIB });
    assert_eq!(audit.unattributed_bytes(), 10 * MIB);
    assert!(ledger.correct_unattributed(dev, &audit));
    assert_eq!(ledger.used_bytes(dev), 7 * MIB);
    assert!(!ledger.correct_unattributed(dev, &audit), "corrected once");
    // Reclaim returns what the slot held; the tenant ends at exactly zero.
    assert_eq!(ledger.reclaim_dead().len(), 1);
    assert_eq!(ledger.used_bytes(dev), 0);
    assert_eq!(in_flight_count(&ledger, slot.index()), 0, "reclaim settles the dead owner's mark");
    assert_eq!(ledger.audit_usage(dev), Some(UsageAudit { used_bytes: 0, slots_bytes: 0 }));
}

fn in_flight_count(ledger: &Ledger, index: usize) -> u32 {
    layout::in_flight::count(ledger.layout().slots[index].in_flight_word.load(Ordering::SeqCst))
}

#[test]
fn a_correction_from_a_reading_that_usage_has_left_fails() {
    let (_dir, ledger, dev) = one_device_ledger();
    let dead = Ledger::open(ledger.path()).unwrap();
    let dead_slot = dead.claim_slot().unwrap();
    half_done_reservation(&dead, &dead_slot, dev, 5 * MIB);
    drop(dead);
    let audit = ledger.audit_usage(dev).unwrap();
    assert_eq!(audit.unattributed_bytes(), 5 * MIB);
    // A reservation lands after the reading.
    let slot = ledger.claim_slot().unwrap();
    ledger.try_reserve(&slot, dev, MIB).unwrap();
    assert!(!ledger.correct_unattributed(dev, &audit), "usage moved: judge again");
    assert_eq!(ledger.used_bytes(dev), 6 * MIB);
    let again = ledger.audit_usage(dev).unwrap();
    assert_eq!(again, UsageAudit { used_bytes: 6 * MIB, slots_bytes: MIB });
    assert!(ledger.correct_unattributed(dev, &again));
    ledger.release_slot(slot);
    assert_eq!(ledger.used_bytes(dev), 0);
    assert_eq!(in_flight_count(&ledger, dead_slot.index()), 1, "the dead writer's mark stays until its slot is reclaimed");
    assert_eq!(ledger.reclaim_dead().len(), 1);
    assert_eq!(in_flight_count(&ledger, dead_slot.index()), 0, "reclaim settled the mark");
    assert_eq!(ledger.used_bytes(dev), 0);
}

/// Workers, each its own "process" (its own open file and slot), reserve
/// and release in rounds; at the end of each round they all stop between
/// changes until the auditor lets them go. The auditor audits all the time:
/// while workers run, a reading may be refused but one that is returned must
/// be consistent; once every worker has stopped, nothing is in flight, so a
/// reading must be returned and must count exactly what the workers hold.
#[test]
fn an_auditor_racing_busy_processes_never_finds_a_leak_that_is_not_there() {
    const WORKERS: u64 = 4;
    const ROUNDS: u64 = 100;
    const CHANGES_PER_ROUND: u64 = 1000;
    // Each worker holds this across all its rounds, so that a reading has
    // something to count.
    let held_bytes = |worker: u64| (worker + 1) * MIB;
    let held_total_bytes: u64 = (0..WORKERS).map(held_bytes).sum();
    let (_dir, ledger, dev) = one_device_ledger();
    ledger.set_memory_limit_bytes(dev, 64 * MIB, PolicySource::Monitor);
    // Workers done with this round's changes; the auditor resets it.
    let stopped = Arc::new(AtomicU64::new(0));
    // Stopped workers wait here for the auditor.
    let round_end = Arc::new(Barrier::new(WORKERS as usize + 1));
    let mut workers: Vec<_> = (0..WORKERS)
        .map(|worker| {
            let path = ledger.path().to_path_buf();
            let (stopped, round_end) = (Arc::clone(&stopped), Arc::clone(&round_end));
            std::thread::spawn(move || {
                let own = Ledger::open(&path).unwrap();
                let slot = own.claim_slot().unwrap();
                own.try_reserve(&slot, dev, held_bytes(worker)).unwrap();
                let mut admitted = 0u64;
                for round in 0..ROUNDS {
                    for n in 0..CHANGES_PER_ROUND {
                        let bytes = ((round + n) % 7 + 1 + worker) * 4096;
                        if own.try_reserve(&slot, dev, bytes).is_ok() {
                            own.release(&slot, dev, bytes);
                            admitted += 1;
                        }
                    }
                    stopped.fetch_add(1, Ordering::SeqCst);
                    round_end.wait();
                }
                own.release(&slot, dev, held_bytes(worker));
                own.release_slot(slot);
                admitted
            })
        })
        .collect();

    // Readings returned while at least one worker was changing usage
    // throughout, and readings refused (a change was in flight).
    let (mut racing_readings, mut refused_readings) = (0u64, 0u64);
    for round in 0..ROUNDS {
        while stopped.load(Ordering::SeqCst) < WORKERS {
            if let Some(ended) = workers.iter().position(|w| w.is_finished()) {
                let _ = workers.swap_remove(ended).join();
                panic!("a worker ended in round {round} before its last");
            }
            if let Some(audit) = ledger.audit_usage(dev) {
                assert_eq!(audit.used_bytes, audit.slots_bytes, "an inconsistent reading was returned: {audit:?}");
                // A worker that has not stopped yet was in the middle of its
                // round's changes from before the reading to after it.
                if stopped.load(Ordering::SeqCst) < WORKERS {
                    racing_readings += 1;
                }
            } else {
                refused_readings += 1;
            }
        }
        let audit = ledger
            .audit_usage(dev)
            .unwrap_or_else(|| panic!("round {round}: every worker stopped between changes, yet the audit was refused"));
        assert_eq!(audit, UsageAudit { used_bytes: held_total_bytes, slots_bytes: held_total_bytes }, "round {round}");
        stopped.store(0, Ordering::SeqCst);
        round_end.wait();
    }
    let admitted: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
    eprintln!(
        "{admitted} reservations; {racing_readings} readings returned and {refused_readings} refused while workers ran, \
         {ROUNDS} while they stopped"
    );
    // Without readings taken while workers changed usage, the consistency
    // check above checked nothing.
    assert!(racing_readings > 0, "no reading was returned while the workers ran ({refused_readings} refused)");
    assert_eq!(admitted, WORKERS * ROUNDS * CHANGES_PER_ROUND, "the cap refused a change: the workers raced less than planned");
    assert_eq!(ledger.used_bytes(dev), 0);
}

#[test]
fn only_the_description_that_holds_a_slots_lock_proves_it() {
    use std::os::fd::AsFd;
    let (dir, holder, _) = one_device_ledger();
    let slot = holder.claim_slot().unwrap();
    let monitor = Ledger::open(&tenant_path(&dir.0, "t")).unwrap();
    let holder_fd = holder.file.as_fd();
    assert!(monitor.passed_descriptor_holds(holder_fd, slot.index()), "the holder's own description");
    assert!(!monitor.passed_descriptor_holds(holder_fd, slot.index() + 1), "a slot nobody holds");
    assert!(!monitor.passed_descriptor_holds(holder_fd, MAX_SLOTS), "a slot past the end");
    let another_open = std::fs::File::open(tenant_path(&dir.0, "t")).unwrap();
    assert!(!monitor.passed_descriptor_holds(another_open.as_fd(), slot.index()), "an open of the same file that holds nothing");
    let other_file = std::fs::File::open("/proc/self/exe").unwrap();
    assert!(!monitor.passed_descriptor_holds(other_file.as_fd(), slot.index()), "another file");
    // A descriptor duplicated from the holder's is the same description.
    let copy = holder.file.try_clone().unwrap();
    assert!(monitor.passed_descriptor_holds(copy.as_fd(), slot.index()));
}
