//! Accounting that follows the driver's lifetimes, not the call that asked:
//! VMM memory lives until its last unmap, stream-ordered allocations belong
//! to the stream's device, a stream-ordered free returns memory only when
//! the stream reaches it, and a pool's freed block stays charged while the
//! pool keeps it. Each test runs real processes under the shim on
//! simgpu and checks what the application saw, what the ledger holds and,
//! where it matters, what the simulated driver itself reports.

#[path = "support/ledger_view.rs"]
mod ledger_view;

use gpuslice_tests::{cu, Sim, GIB, MIB};

const TENANT: &str = "acct";

fn capped(limit: &str) -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit(limit).tenant(TENANT)
}

#[test]
fn vmm_memory_stays_charged_until_its_last_unmap() {
    let sim = capped("1GiB");
    let mut p = sim.spawn(sim.c("memctl").args([
        "init",
        "ctx",
        "vmm:v1:600M",
        "map:v1",
        "free:v1",
        "info:released",
        "vmm:v2:600M",
        "unmap:v1",
        "info:unmapped",
        "vmm:v3:600M",
        "map:v3",
        "free:v3",
        "hold",
    ]));
    p.wait_for("ready");
    let held_bytes = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    let out = p.wait();
    out.assert_success();
    out.assert_rc("v1", cu::SUCCESS).assert_rc("map.v1", cu::SUCCESS).assert_rc("free.v1", cu::SUCCESS);
    assert_eq!(out.u64("released.free"), GIB - 664 * MIB, "a released but mapped handle is still memory\n{out}");
    out.assert_rc("v2", cu::OUT_OF_MEMORY);
    out.assert_rc("unmap.v1", cu::SUCCESS);
    assert_eq!(out.u64("unmapped.free"), GIB - 64 * MIB, "the last unmap frees it\n{out}");
    out.assert_rc("v3", cu::SUCCESS).assert_rc("map.v3", cu::SUCCESS);
    assert_eq!(held_bytes, 664 * MIB, "the mapped, released v3 is held\n{out}");
    assert_eq!(ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), 0, "exit releases everything");
}

#[test]
fn stream_ordered_allocations_are_charged_to_the_streams_device() {
    let sim = capped("1GiB").devices(2);
    let mut p = sim.spawn(sim.c("shim_async").args(["otherdev", "hold"]));
    p.wait_for("ready");
    let dev0_bytes = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    let dev1_bytes = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 1);
    let out = p.wait();
    out.assert_success();
    out.assert_rc("async0", cu::SUCCESS).assert_rc("async1", cu::SUCCESS);
    out.assert_rc("async2", cu::OUT_OF_MEMORY).assert_rc("async3", cu::OUT_OF_MEMORY);
    assert_eq!(out.u64("dev1.free"), GIB - 864 * MIB, "device 1 holds its context and 800 MiB\n{out}");
    assert_eq!(out.u64("dev0.free"), GIB - 64 * MIB, "device 0 holds only its context\n{out}");
    out.assert_rc("destroy1", cu::SUCCESS);
    assert_eq!(out.u64("dev0_after.free"), GIB - 64 * MIB, "{out}");
    assert_eq!(dev1_bytes, 0, "destroying device 1's context released it and its memory\n{out}");
    assert_eq!(dev0_bytes, 64 * MIB, "device 0 still holds its context\n{out}");
}

/// `cuMemAllocFromPoolAsync` takes its memory from the pool's device, so
/// that device is charged, whatever device the stream is on. simgpu refuses
/// the pairing; a driver that accepts it (as a real one may, given peer
/// access) shows where the charge goes.
#[test]
fn a_pool_of_another_device_is_charged_to_the_pools_device() {
    let sim = Sim::new().driver("accepting_driver").memory_limit("0=128MiB,1=1GiB").tenant(TENANT);
    // A pool on device 1 (location type 1, id 1); the stream, the null one,
    // is on device 0.
    let out = sim.run(sim.c("shim_placement").args(["init", "pool:p:1:1:100M", "info:dev0", "ctx:1", "info:dev1"]));
    out.assert_success().assert_rc("p", cu::SUCCESS);
    assert_eq!(out.u64("dev0.free"), 128 * MIB, "the stream's device is not charged\n{out}");
    assert_eq!(out.u64("dev1.free"), GIB - 100 * MIB, "the pool's device is\n{out}");
}

/// When the driver refuses the pairing (simgpu does), its error stands and
/// nothing stays charged, even though the stream's device is full.
#[test]
fn a_refused_pool_allocation_leaves_nothing_charged() {
    let sim = capped("0=128MiB,1=1GiB").devices(2);
    let out = sim.run(sim.c("memctl").args(["init", "ctx:0", "alloc:a:free", "pool:p:100M:1", "pool:q:1M:0", "ready"]));
    out.assert_success().assert_rc("a", cu::SUCCESS).assert_rc("poolcreate", cu::SUCCESS);
    // Device 0 is full; the pool's device 1 has room: the driver decides.
    out.assert_rc("p", cu::INVALID_VALUE);
    out.assert_rc("q", cu::OUT_OF_MEMORY);
    let dir = sim.ledger_dir();
    assert_eq!(ledger_view::used_bytes(&dir, TENANT, 0), 0, "{out}");
    assert_eq!(ledger_view::used_bytes(&dir, TENANT, 1), 0, "{out}");
}

#[test]
fn a_pool_of_another_device_is_refused_when_that_device_is_full() {
    let sim = capped("0=1GiB,1=64MiB").devices(2);
    let out = sim.run(sim.c("memctl").args(["init", "ctx:0", "pool:p:100M:1", "pool:q:100M:0"]));
    out.assert_success();
    out.assert_rc("p", cu::OUT_OF_MEMORY);
    out.assert_rc("q", cu::SUCCESS);
}

#[test]
fn a_stream_ordered_free_returns_memory_when_the_stream_reaches_it() {
    let sim = capped("1GiB");
    let out = sim.run(sim.c("shim_async").arg("freeasync"));
    out.assert_success();
    out.assert_rc("freeasync", cu::SUCCESS);
    out.assert_rc("b", cu::OUT_OF_MEMORY);
    // The context and the 800 MiB the stream has not freed yet: nothing of b.
    assert_eq!(out.u64("driver.self"), 864 * MIB, "what the driver holds for us\n{out}");
    assert_eq!(out.u64("pending.free"), GIB - 864 * MIB, "{out}");
    assert_eq!(out.u64("synced.free"), GIB - 64 * MIB, "{out}");
    out.assert_rc("c", cu::SUCCESS);
}

/// A pending `cuMemFreeAsync` of a pool's block leaves the block in its
/// pool: the next allocation on the same stream reuses it at a full cap
/// (the driver takes no new memory for it), while an allocation that would
/// make the pool grow past the cap is refused. A synchronisation gives the
/// block back (release threshold 0) and the charge goes with it.
#[test]
fn a_pending_free_is_reused_on_its_stream_and_no_room_elsewhere() {
    let sim = capped("1GiB");
    let mut p = sim.spawn(sim.c("shim_async").args(["reuse", "hold"]));
    p.wait_for("ready");
    let held_bytes = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    let out = p.wait();
    out.assert_success();
    out.assert_rc("freeasync", cu::SUCCESS);
    out.assert_rc("again", cu::SUCCESS);
    out.assert_rc("other", cu::OUT_OF_MEMORY);
    // The context and the one 800 MiB block, reused: nothing of the refused
    // allocation.
    assert_eq!(out.u64("driver.self"), 864 * MIB, "what the driver holds for us\n{out}");
    assert_eq!(out.u64("pending.free"), GIB - 864 * MIB, "{out}");
    assert_eq!(out.u64("synced.free"), GIB - 864 * MIB, "the reused block is live\n{out}");
    assert_eq!(out.u64("released.free"), GIB - 64 * MIB, "freed and synchronised, the pool gave it back\n{out}");
    out.assert_rc("after", cu::SUCCESS);
    assert_eq!(held_bytes, 864 * MIB, "{out}");
}

#[test]
fn exiting_while_threads_allocate_loses_no_bytes() {
    let sim = capped("1GiB");
    for round in 0..6 {
        let out = sim.run(sim.c("shim_exit").args(["6", &(5 + round * 3).to_string()]));
        assert_eq!(out.code(), Some(0), "{out}");
        // The library destructor released the slot with everything it held:
        // nothing is left to reclaim.
        let ledger = ledger_view::open(&sim.ledger_dir(), TENANT);
        assert_eq!(ledger.used_bytes(0), 0, "round {round}: the exit left bytes charged\n{out}");
        assert!(ledger.slots().is_empty(), "round {round}: the exit left its slot in use\n{out}");
    }
}

/// `unshare --pid --fork --mount-proc PROGRAM ARGS…`: PROGRAM runs as pid 1
/// of a new PID namespace with its own `/proc`, as in a container.
fn in_own_pid_namespace(sim: &Sim, program: &std::path::Path, args: &[&str]) -> std::process::Command {
    gpuslice_tests::require_pid_namespaces();
    let mut cmd = sim.command("unshare");
    cmd.args(["--pid", "--fork", "--mount-proc"]).arg(program).args(args);
    cmd
}

#[test]
fn a_context_in_its_own_pid_namespace_is_charged_its_own_overhead() {
    let sim = capped("1GiB");
    let memctl = gpuslice_tests::compile_c("memctl");
    // Another container on the same GPU, also pid 1 in its namespace, holding 2 GiB.
    let mut holder_cmd = in_own_pid_namespace(&sim, &memctl, &["init", "ctx", "alloc:big:2G", "hold"]);
    holder_cmd.env_remove("LD_PRELOAD");
    let mut holder = sim.spawn(&mut holder_cmd);
    holder.wait_for("ready");
    let mut p = sim.spawn(&mut in_own_pid_namespace(&sim, &memctl, &["init", "ctx", "info", "pid", "hold"]));
    p.wait_for("ready");
    let held_bytes = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    let out = p.wait();
    holder.close_stdin();
    let holder_out = holder.wait();
    holder_out.assert_success();
    out.assert_success();
    assert_eq!(out.u64("pid"), 1, "the tenant runs as pid 1 of its namespace\n{out}");
    out.assert_rc("ctx", cu::SUCCESS);
    assert_eq!(out.u64("info.free"), GIB - 64 * MIB, "its context costs the context's 64 MiB\n{out}");
    assert_eq!(held_bytes, 64 * MIB, "{out}");
    assert_eq!(ledger_view::open(&sim.ledger_dir(), TENANT).context_overhead_bytes(0), 64 * MIB);
}

/// Bytes the slot of `pid` holds on all devices (0 when it holds none).
fn slot_bytes(sim: &Sim, pid: u32) -> u64 {
    ledger_view::slot_of(&sim.ledger_dir(), TENANT, pid).map_or(0, |s| s.total_bytes())
}

/// Destroying a context releases its overhead and its memory at once; a
/// later `cuMemFree_v2` of a pointer that lived there is the driver's to
/// answer, and it moves nothing in the ledger.
#[test]
fn a_free_after_its_context_was_destroyed_gets_the_driver_error_and_releases_nothing() {
    let bare = Sim::new().memory("4GiB").context_memory("64MiB");
    let expected = bare.run(bare.c("memctl").args(["init", "ctx", "alloc:a:100M", "destroyctx", "free:a"]));
    expected.assert_success().assert_rc("destroyctx", cu::SUCCESS);
    assert_ne!(expected.i64("free.a"), cu::SUCCESS, "{expected}");

    let sim = capped("512MiB");
    let mut p = sim.spawn(sim.c("memctl").args([
        "init",
        "ctx",
        "alloc:a:100M",
        "pid",
        "mark:held",
        "wait",
        "destroyctx",
        "free:a",
        "mark:destroyed",
        "wait",
        "ctx",
        "info:after",
        "alloc:over:free+1",
        "alloc:b:free",
        "hold",
    ]));
    let pid: u32 = p.wait_for("pid").parse().expect("pid");
    p.wait_for("held");
    let held = (ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), slot_bytes(&sim, pid));
    p.send_line("go");
    p.wait_for("destroyed");
    let destroyed = (ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), slot_bytes(&sim, pid));
    p.send_line("go");
    p.wait_for("b");
    let full = (ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), slot_bytes(&sim, pid));
    let out = p.wait();
    out.assert_success().assert_rc("destroyctx", cu::SUCCESS);
    assert_eq!(out.i64("free.a"), expected.i64("free.a"), "the driver's own answer\n{out}\n{expected}");
    assert_eq!(held, (164 * MIB, 164 * MIB), "context and allocation\n{out}");
    assert_eq!(destroyed, (0, 0), "the destroy released both; the late free released nothing more\n{out}");
    assert_eq!(out.u64("after.free"), 448 * MIB, "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("b", cu::SUCCESS);
    assert_eq!(full, (512 * MIB, 512 * MIB), "{out}");
    assert_eq!(ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), 0, "exit releases everything\n{out}");
}

/// `cuDevicePrimaryCtxReset_v2` destroys the primary context with every
/// allocation made in it: their charges and the context's overhead are
/// released exactly once (another context's share in the same slot is
/// untouched, so a second release would show), a later free of one of them
/// is the driver's to answer, and the next retain charges the overhead again.
#[test]
fn a_primary_context_reset_releases_its_memory_once_and_a_new_retain_charges_again() {
    let bare = Sim::new().memory("4GiB").context_memory("64MiB");
    let expected = bare.run(bare.c("memctl").args(["init", "pctx", "alloc:a:100M", "reset", "free:a"]));
    expected.assert_success().assert_rc("reset", cu::SUCCESS);

    let sim = capped("512MiB");
    let mut p = sim.spawn(sim.c("memctl").args([
        "init",
        "ctx",
        "alloc:k:30M",
        "pctx",
        "alloc:a:100M",
        "managed:m:50M",
        "array:r:1024:1024",
        "pid",
        "mark:held",
        "wait",
        "reset",
        "procs:driver",
        "free:a",
        "reset",
        "mark:reset2",
        "wait",
        "pctx",
        "info:after",
        "alloc:over:free+1",
        "alloc:b:free",
        "hold",
    ]));
    let pid: u32 = p.wait_for("pid").parse().expect("pid");
    p.wait_for("held");
    let held = (ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), slot_bytes(&sim, pid));
    p.send_line("go");
    p.wait_for("reset2");
    let after_reset = (ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), slot_bytes(&sim, pid));
    p.send_line("go");
    p.wait_for("b");
    let full = (ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), slot_bytes(&sim, pid));
    let out = p.wait();
    out.assert_success();
    for key in ["ctx", "k", "pctx", "a", "m", "r"] {
        out.assert_rc(key, cu::SUCCESS);
    }
    // Two contexts (64 MiB each), 30 + 100 + 50 + 1 MiB of allocations.
    assert_eq!(held, (309 * MIB, 309 * MIB), "{out}");
    assert_eq!(out.all("reset"), ["0", "0"], "{out}");
    assert_eq!(out.u64("driver.self"), 94 * MIB, "the driver holds only the other context and its 30 MiB\n{out}");
    assert_eq!(out.i64("free.a"), expected.i64("free.a"), "the driver's own answer\n{out}\n{expected}");
    assert_eq!(after_reset, (94 * MIB, 94 * MIB), "released exactly once, the other context's share untouched\n{out}");
    assert_eq!(out.u64("after.free"), (512 - 94 - 64) * MIB, "the new retain is charged its overhead\n{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("b", cu::SUCCESS);
    assert_eq!(full, (512 * MIB, 512 * MIB), "{out}");
    assert_eq!(ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), 0, "exit releases everything\n{out}");
}

/// A completed `cuMemFreeAsync` is released by the synchronisation that
/// waited for it, in every form: process A frees behind a 300 ms kernel,
/// synchronises and then makes no driver call at all; process B of the same
/// tenant, waiting on a pipe until A has synchronised, is admitted for
/// memory that fits only once A's free is returned.
#[test]
fn a_synchronisation_returns_completed_stream_ordered_frees_to_the_tenant() {
    for how in ["stream", "ptsz", "ctx", "ctx2", "event"] {
        let sim = capped("512MiB");
        let mut b = sim.spawn(sim.c("memctl").args(["init", "ctx", "mark:waiting", "wait", "alloc:b:300M", "hold"]));
        b.wait_for("waiting");
        let mut a = sim.spawn(sim.c("shim_async").args(["syncfree", how]));
        a.wait_for("synced");
        let after_sync = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
        b.send_line("go");
        b.wait_for("b");
        let after_b = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
        let a = a.wait();
        let b = b.wait();
        a.assert_success().assert_rc("freeasync", cu::SUCCESS).assert_rc("synced", cu::SUCCESS);
        b.assert_success().assert_rc("ctx", cu::SUCCESS);
        assert_eq!(after_sync, 128 * MIB, "{how}: only the two contexts are charged once A synchronised\n{a}");
        b.assert_rc("b", cu::SUCCESS);
        assert_eq!(after_b, 428 * MIB, "{how}\n{b}");
        assert_eq!(ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), 0, "{how}");
    }
}
