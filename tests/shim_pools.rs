//! Stream-ordered pools as a real driver keeps them, and the shim charging
//! what they hold: simgpu's pools keep freed blocks reserved and reuse
//! them in stream order; under a cap the tenant is charged exactly what its
//! pools reserve, a reuse at a full cap is admitted, a pool never reserves
//! past the cap, and unused pool memory is trimmed before a refusal.

#[path = "support/ledger_view.rs"]
mod ledger_view;

use gpuslice_tests::{cu, Running, Sim, GIB, MIB};
use std::time::{Duration, Instant};

const TENANT: &str = "pools";

fn capped(limit: &str) -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit(limit).tenant(TENANT)
}

/// At each `check:LABEL` of the child: the ledger's usage, less the
/// context's 64 MiB, and what the pool reserves there.
fn step(sim: &Sim, p: &mut Running, label: &str) -> (u64, u64) {
    p.wait_for(&format!("{label}.ready"));
    let reserved: u64 = p.wait_for(&format!("{label}.reserved")).parse().unwrap_or(u64::MAX);
    let charged = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0).saturating_sub(64 * MIB);
    p.send_line("go");
    (charged, reserved)
}

#[test]
fn simgpu_pool_attributes_behave_as_cuda_h_documents() {
    let sim = Sim::new().memory("1GiB").context_memory("64MiB");
    let out = sim.run(sim.c("pools").args([
        "ctx",
        "stream:1",
        "stream:2",
        "info:start",
        "attrs:fresh",
        "alloc:a:10M:1",
        "alloc:b:20M:1",
        "attrs:two",
        "free:a:1",
        "attrs:freed",
        // The stream reaches the free; the synchronisation gives back what
        // is above the release threshold (0 by default).
        "sync:1",
        "attrs:synced",
        "info:after_sync",
        // With the threshold at the maximum (as cuda.core sets it) a freed
        // block stays reserved through synchronisations.
        "threshold:max",
        "free:b:1",
        "ctxsync",
        "eventsync:1",
        "attrs:kept",
        "info:kept",
        // Reused whole by a smaller allocation on the same stream.
        "alloc:c:5M:1",
        "attrs:reused",
        "resethigh",
        "attrs:reset",
        "free:c:1",
        "sync:1",
        "trim:8M",
        "attrs:trimmed8",
        "trim:0",
        "attrs:trimmed",
        "info:trimmed",
    ]));
    out.assert_success();
    let attrs = |label: &str| {
        [
            out.u64(&format!("{label}.reserved")) / MIB,
            out.u64(&format!("{label}.used")) / MIB,
            out.u64(&format!("{label}.reserved_high")) / MIB,
            out.u64(&format!("{label}.used_high")) / MIB,
        ]
    };
    // [reserved, used, reserved high, used high] in MiB.
    assert_eq!(attrs("fresh"), [0, 0, 0, 0], "{out}");
    assert_eq!(out.u64("fresh.threshold"), 0, "the default release threshold\n{out}");
    assert_eq!(
        [out.i64("fresh.follow"), out.i64("fresh.opportunistic"), out.i64("fresh.internal")],
        [1, 1, 1],
        "the reuse policies are on by default\n{out}"
    );
    assert_eq!(attrs("two"), [30, 30, 30, 30], "{out}");
    assert_eq!(attrs("freed"), [30, 20, 30, 30], "a freed block stays reserved\n{out}");
    assert_eq!(attrs("synced"), [20, 20, 30, 30], "a synchronisation releases above the threshold\n{out}");
    assert_eq!(out.u64("start.free") - out.u64("after_sync.free"), 20 * MIB, "the device counts reserved memory\n{out}");
    assert_eq!(out.u64("kept.threshold"), u64::MAX, "{out}");
    assert_eq!(attrs("kept"), [20, 0, 30, 30], "kept under the threshold\n{out}");
    assert_eq!(out.u64("start.free") - out.u64("kept.free"), 20 * MIB, "the device still holds it\n{out}");
    assert_eq!(attrs("reused"), [20, 20, 30, 30], "the 20 MiB block serves a 5 MiB request whole\n{out}");
    out.assert_rc("resethigh", cu::SUCCESS).assert_rc("sethigh5", cu::INVALID_VALUE);
    assert_eq!(attrs("reset"), [20, 20, 20, 20], "a reset mark starts at the current figure\n{out}");
    out.assert_rc("trim", cu::SUCCESS);
    assert_eq!(attrs("trimmed8"), [0, 0, 20, 20], "the one 20 MiB block cannot be kept in part\n{out}");
    assert_eq!(attrs("trimmed"), [0, 0, 20, 20], "{out}");
    assert_eq!(out.u64("trimmed.free"), out.u64("start.free"), "{out}");
}

/// A block freed on one stream is reused by another only as the reuse
/// policies allow: after the free completed (opportunistic), after an
/// event dependency, or within one context (internal dependencies).
#[test]
fn simgpu_pools_reuse_across_streams_as_their_policies_allow() {
    let sim = Sim::new().memory("1GiB").context_memory("64MiB");
    let out = sim.run(sim.c("pools").args([
        "ctx",
        "stream:1",
        "stream:2",
        "threshold:max",
        "reuse:internal:0",
        "reuse:opportunistic:0",
        "reuse:follow:0",
        "attrs:policy",
        // Freed behind a kernel on stream 1: stream 2 may not take it.
        "alloc:a:10M:1",
        "kernel:1:200000",
        "free:a:1",
        "alloc:b:10M:2",
        "attrs:no_reuse",
        // An event dependency on stream 1 past the free lets stream 2 reuse.
        "reuse:follow:1",
        "waitevent:2:1",
        "alloc:d:10M:2",
        "attrs:followed",
        "free:b:2",
        "free:d:2",
        "ctxsync",
        "trim:0",
        "attrs:emptied",
        // Within one context the driver may order them itself.
        "reuse:follow:0",
        "reuse:internal:1",
        "alloc:e:10M:1",
        "kernel:1:200000",
        "free:e:1",
        "alloc:f:10M:2",
        "attrs:internal",
    ]));
    out.assert_success();
    assert_eq!([out.i64("policy.follow"), out.i64("policy.opportunistic"), out.i64("policy.internal")], [0, 0, 0], "{out}");
    out.assert_rc("b", cu::SUCCESS).assert_rc("d", cu::SUCCESS).assert_rc("f", cu::SUCCESS);
    assert_eq!(out.u64("no_reuse.reserved"), 20 * MIB, "stream 2 could not reuse: the pool grew\n{out}");
    assert_eq!(out.u64("followed.reserved"), 20 * MIB, "d reused a's block after the event\n{out}");
    assert_eq!(out.u64("followed.used"), 20 * MIB, "{out}");
    assert_eq!(out.u64("emptied.reserved"), 0, "{out}");
    assert_eq!(out.u64("internal.reserved"), 10 * MIB, "f reused e's block within the context\n{out}");
}

/// The loop from the issue: at a full cap, 50 frees and re-allocations on
/// one stream are all admitted, because the pool reuses the block, and the
/// ledger holds exactly what the pool reserves.
#[test]
fn same_stream_free_and_alloc_at_a_full_cap_are_all_admitted() {
    let sim = capped("256MiB");
    let mut p =
        sim.spawn(sim.c("pools").args(["ctx", "stream:1", "info:start", "loop:50:192M:1", "check:looped", "sync:1", "check:synced"]));
    assert_eq!(step(&sim, &mut p, "looped"), (192 * MIB, 192 * MIB));
    assert_eq!(step(&sim, &mut p, "synced"), (192 * MIB, 192 * MIB), "the last block is live");
    let out = p.wait();
    out.assert_success();
    assert_eq!(out.u64("start.free"), 192 * MIB, "the cap is full with one allocation\n{out}");
    out.assert_rc("loop.first", cu::SUCCESS);
    assert_eq!((out.i64("loop.admitted"), out.i64("loop.refused")), (50, 0), "{out}");
}

/// A pool never reserves past the cap: an allocation that would make it
/// grow past is refused with CUDA_ERROR_OUT_OF_MEMORY, also when the pool
/// holds a freed block the driver may not reuse on that stream (its free
/// is not reached yet), while on the freeing stream it is admitted.
#[test]
fn a_pool_never_reserves_past_the_cap() {
    let sim = capped("256MiB");
    let mut p = sim.spawn(sim.c("pools").args([
        "ctx",
        "stream:1",
        "stream:2",
        "stream:3",
        "threshold:max",
        "reuse:internal:0",
        "reuse:opportunistic:0",
        "reuse:follow:0",
        "alloc:a:100M:1",
        "alloc:b:92M:2",
        "check:full",
        "alloc:over:1M:3",
        "check:over",
        "kernel:1:300000",
        "free:a:1",
        "check:freed",
        "alloc:elsewhere:100M:3",
        "check:elsewhere",
        "alloc:same:100M:1",
        "check:same",
    ]));
    assert_eq!(step(&sim, &mut p, "full"), (192 * MIB, 192 * MIB));
    assert_eq!(step(&sim, &mut p, "over"), (192 * MIB, 192 * MIB));
    assert_eq!(step(&sim, &mut p, "freed"), (192 * MIB, 192 * MIB), "the freed block stays reserved and charged");
    assert_eq!(step(&sim, &mut p, "elsewhere"), (192 * MIB, 192 * MIB), "nothing grew");
    assert_eq!(step(&sim, &mut p, "same"), (192 * MIB, 192 * MIB), "the freed block made room");
    let out = p.wait();
    out.assert_success();
    out.assert_rc("a", cu::SUCCESS).assert_rc("b", cu::SUCCESS);
    out.assert_rc("over", cu::OUT_OF_MEMORY);
    out.assert_rc("elsewhere", cu::OUT_OF_MEMORY);
    out.assert_rc("same", cu::SUCCESS);
    assert_eq!(out.u64("elsewhere.reserved_high"), 192 * MIB, "the pool never reserved past the cap\n{out}");
    assert_eq!(out.u64("same.used"), 192 * MIB, "{out}");
}

/// An allocation that fits only once the tenant's pools give back what
/// they hold unused is admitted: the shim trims them first. The freed
/// block is on another stream and too small to be reused.
#[test]
fn unused_pool_memory_is_trimmed_before_a_refusal() {
    let sim = capped("256MiB");
    let mut p = sim.spawn(sim.c("pools").args([
        "ctx",
        "stream:1",
        "stream:2",
        // As cuda.core does: freed memory is kept through synchronisations.
        "threshold:max",
        "alloc:a:96M:1",
        "free:a:1",
        "sync:1",
        "check:kept",
        "alloc:b:160M:2",
        "check:trimmed",
        "alloc:c:40M:2",
        "check:full",
    ]));
    assert_eq!(step(&sim, &mut p, "kept"), (96 * MIB, 96 * MIB), "the freed block is reserved and charged");
    assert_eq!(step(&sim, &mut p, "trimmed"), (160 * MIB, 160 * MIB), "the pool gave the block back, then grew");
    assert_eq!(step(&sim, &mut p, "full"), (160 * MIB, 160 * MIB), "40 MiB more would pass the cap");
    let out = p.wait();
    out.assert_success();
    out.assert_rc("b", cu::SUCCESS);
    out.assert_rc("c", cu::OUT_OF_MEMORY);
    assert_eq!(out.u64("trimmed.used"), 160 * MIB, "{out}");
}

/// A synchronisation that makes the pool give memory back returns it to
/// the tenant at once, and the views agree with the ledger.
#[test]
fn memory_a_pool_gives_back_leaves_the_ledger_and_the_views() {
    let sim = capped("1GiB");
    let mut p = sim.spawn(sim.c("pools").args([
        "ctx",
        "stream:1",
        "alloc:a:300M:1",
        "kernel:1:200000",
        "free:a:1",
        "check:pending",
        "info:pending",
        "sync:1",
        "check:released",
        "info:released",
    ]));
    assert_eq!(step(&sim, &mut p, "pending"), (300 * MIB, 300 * MIB));
    assert_eq!(step(&sim, &mut p, "released"), (0, 0));
    let out = p.wait();
    out.assert_success();
    assert_eq!(out.u64("pending.free"), GIB - 364 * MIB, "{out}");
    assert_eq!(out.u64("released.free"), GIB - 64 * MIB, "{out}");
}

/// Destroying a pool frees the cap only of what the pool held unused: its
/// live allocations keep their memory until they are freed, and their
/// charge with it, so a pool cannot be used to hold more than the cap.
#[test]
fn a_destroyed_pools_live_allocations_stay_charged_until_freed() {
    let sim = capped("256MiB");
    let mut p = sim.spawn(sim.c("pools").args([
        "ctx",
        "stream:1",
        "create",
        "threshold:max",
        "palloc:a:100M:1",
        "palloc:b:50M:1",
        "free:b:1",
        "sync:1",
        "check:before",
        "destroy",
        "hold",
        "alloc:again:150M:1",
        "free:a:1",
        "sync:1",
        "info:after",
        "alloc:fits:150M:1",
    ]));
    assert_eq!(step(&sim, &mut p, "before"), (150 * MIB, 150 * MIB), "the freed 50 MiB block is kept");
    p.wait_for("ready");
    let after_destroy = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    p.send_line("go");
    let out = p.wait();
    out.assert_success();
    out.assert_rc("create", cu::SUCCESS).assert_rc("a", cu::SUCCESS).assert_rc("destroy", cu::SUCCESS);
    assert_eq!(after_destroy, 164 * MIB, "the unused block went with the pool; a is still held\n{out}");
    out.assert_rc("again", cu::OUT_OF_MEMORY);
    assert_eq!(out.u64("after.free"), 192 * MIB, "freeing a released its charge\n{out}");
    out.assert_rc("fits", cu::SUCCESS);
}

/// A driver whose pools grow in chunks larger than the request (as real
/// ones do, here 32 MiB): the chunk is charged as it appears, and a growth
/// the cap cannot take is undone (the allocation freed, the pool trimmed
/// back) and refused, leaving the pool within the cap.
#[test]
fn a_pool_that_grows_past_the_cap_in_chunks_is_trimmed_back_and_refused() {
    let sim = Sim::new().driver("accepting_driver").memory_limit("90MiB").tenant(TENANT);
    let mut p = sim.spawn(sim.c("memctl").args([
        "init",
        "pctx",
        "async:a:10M",
        "mark:one_chunk",
        "wait",
        "async:c:50M",
        "info:after_c",
        "mark:refused",
        "wait",
        "async:d:10M",
        "info:end",
    ]));
    p.wait_for("one_chunk");
    let one_chunk = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    p.send_line("go");
    p.wait_for("refused");
    let after_refusal = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    p.send_line("go");
    let out = p.wait();
    out.assert_success();
    out.assert_rc("a", cu::SUCCESS);
    assert_eq!(one_chunk, 32 * MIB, "10 MiB took a whole chunk\n{out}");
    // c fits the cap (32 + 50 MiB) but makes the pool grow by two chunks,
    // to 96 MiB: undone, the pool is back at one chunk.
    out.assert_rc("c", cu::OUT_OF_MEMORY);
    assert_eq!(after_refusal, 32 * MIB, "{out}");
    assert_eq!(out.u64("after_c.free"), 58 * MIB, "{out}");
    assert_eq!(out.all("c").len(), 1, "{out}");
    // d fits in the chunk: no growth, admitted.
    out.assert_rc("d", cu::SUCCESS);
    assert_eq!(out.u64("end.free"), 58 * MIB, "{out}");
}

/// The loop through cuda.core, which takes memory from the
/// device's pool with the release threshold at the maximum: at a full cap
/// every free and re-allocation on the stream is admitted, and the tenant
/// is charged exactly what the pool reserves.
#[test]
fn cuda_core_frees_and_reallocates_at_a_full_cap() {
    let sim = capped("256MiB");
    let mut p = sim.spawn(sim.py("core_pools.py").args(["192", "50"]));
    p.wait_for("ready");
    let charged = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    p.send_line("go");
    let out = p.wait();
    out.assert_success();
    assert_eq!(out.get("first"), "ok", "{out}");
    assert_eq!((out.i64("admitted"), out.i64("refused")), (50, 0), "{out}");
    assert_eq!(out.u64("threshold"), u64::MAX, "cuda.core keeps freed memory in the pool\n{out}");
    assert_eq!(out.u64("reserved"), 192 * MIB, "{out}");
    assert_eq!(charged, 64 * MIB + out.u64("reserved"), "the context and what the pool reserves\n{out}");
    assert_eq!(out.u64("free"), 0, "{out}");
}

/// 4 processes x 16 threads, each thread on a stream of its own, allocate
/// from the pool and free on their streams without ever synchronising, at
/// a full cap (so growth, reuse across streams, trims and synchronisations
/// before refusals all race): the device never holds more than the cap for
/// the tenant, sampled as fast as NVML answers, nor does the ledger.
#[test]
fn concurrent_pool_allocations_never_pass_the_cap_on_the_device() {
    const CAP_BYTES: u64 = 256 * MIB;
    let sim = Sim::new().memory("4GiB").context_memory("16MiB").memory_limit("256MiB").tenant(TENANT).timeout(Duration::from_secs(120));
    let mut sampler_cmd = sim.c("shim_stress");
    sampler_cmd.env_remove("LD_PRELOAD").arg("sample");
    let mut sampler = sim.spawn(&mut sampler_cmd);
    sampler.wait_for("ready");
    // SHIM_STRESS_ONLY=2: cuMemAllocAsync and cuMemFreeAsync only.
    let mut procs: Vec<_> =
        (0..4).map(|_| sim.spawn(sim.c("shim_stress").env("SHIM_STRESS_ONLY", "2").args(["16", "1000", "8M"]))).collect();
    for p in &mut procs {
        p.wait_for("ready");
    }
    let ledger = ledger_view::open(&sim.ledger_dir(), TENANT);
    for p in &mut procs {
        p.send_line("go");
    }
    let mut max_used = 0;
    let started = Instant::now();
    let mut finished = 0;
    while finished < procs.len() && started.elapsed() < Duration::from_secs(110) {
        for _ in 0..200 {
            max_used = max_used.max(ledger.used_bytes(0));
            std::thread::sleep(Duration::from_micros(50));
        }
        finished = procs.iter_mut().map(|p| p.has_printed("finished")).filter(|done| *done).count();
    }
    sampler.send_line("stop");
    let device = sampler.wait();
    device.assert_success();
    let (mut ok, mut oom) = (0, 0);
    for out in procs.into_iter().map(|p| p.wait()) {
        out.assert_success();
        assert_eq!(out.u64("errors"), 0, "no allocation or free may fail except with OUT_OF_MEMORY\n{out}");
        ok += out.u64("ok");
        oom += out.u64("oom");
    }
    assert!(oom > 0 && ok > 0, "the load must reach the cap to test it: ok={ok} oom={oom}");
    assert!(max_used <= CAP_BYTES, "the ledger reached {max_used} bytes, over the cap of {CAP_BYTES}");
    assert!(device.u64("samples") > 100, "the device was hardly sampled\n{device}");
    assert!(
        device.u64("max_used") <= CAP_BYTES,
        "the device held {} bytes for the tenant, over its cap of {CAP_BYTES}\n{device}",
        device.u64("max_used")
    );
    assert_eq!(ledger.used_bytes(0), 0, "usage must end at exactly zero");
}
