//! The memory cap as one process of a tenant sees it under the shim on
//! simgpu: exact at the cap and one byte over, every allocation path and
//! context counted, the views showing the cap, and nothing changed without one.

#[path = "support/ledger_view.rs"]
mod ledger_view;

use gpuslice_tests::{cu, Output, Sim, GIB, MIB};

const TENANT: &str = "caps";

/// A 4 GiB simulated device whose contexts cost 64 MiB, and a tenant capped at `limit`.
fn capped(limit: &str) -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit(limit).tenant(TENANT)
}

#[test]
fn the_cap_is_exact_at_one_byte_over_and_after_frees() {
    let sim = capped("512MiB");
    let mut p = sim.spawn(sim.c("memctl").args([
        "init",
        "ctx",
        "info:start",
        "alloc:a:100M",
        "alloc:over:free+1",
        "alloc:b:free",
        "info:full",
        "alloc:one:1",
        "free:b",
        "info:freed",
        "alloc:c:free",
        "hold",
    ]));
    p.wait_for("ready");
    let held_bytes = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    let out = p.wait();
    out.assert_success();
    out.assert_rc("init", cu::SUCCESS).assert_rc("ctx", cu::SUCCESS).assert_rc("a", cu::SUCCESS);
    assert_eq!(out.u64("start.total"), 512 * MIB, "{out}");
    assert_eq!(out.u64("start.free"), 448 * MIB, "the context's 64 MiB count against the cap\n{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY);
    out.assert_rc("b", cu::SUCCESS);
    assert_eq!(out.u64("full.free"), 0, "{out}");
    out.assert_rc("one", cu::OUT_OF_MEMORY);
    out.assert_rc("free.b", cu::SUCCESS);
    assert_eq!(out.u64("freed.free"), 348 * MIB, "{out}");
    out.assert_rc("c", cu::SUCCESS);
    assert_eq!(held_bytes, 512 * MIB, "the ledger holds exactly the cap\n{out}");
    assert_eq!(ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0), 0, "exit releases everything");
}

#[test]
fn views_show_the_cap_and_the_tenant_usage() {
    let sim = capped("1GiB");
    let out = sim.run(sim.c("memctl").args([
        "init",
        "ctx",
        "info",
        "totalmem",
        "nvml",
        "nvml2",
        "alloc:a:100M",
        "info:after",
        "nvml:nvml_after",
    ]));
    out.assert_success();
    assert_eq!(out.u64("info.total"), GIB, "{out}");
    assert_eq!(out.u64("info.free"), GIB - 64 * MIB, "{out}");
    assert_eq!(out.u64("totalmem.bytes"), GIB, "cuDeviceTotalMem_v2 reports the cap\n{out}");
    out.assert_rc("nvml", 0);
    assert_eq!(out.u64("nvml.total"), GIB, "{out}");
    assert_eq!(out.u64("nvml.used"), 64 * MIB, "NVML used is the tenant's usage\n{out}");
    assert_eq!(out.u64("nvml.free"), GIB - 64 * MIB, "{out}");
    out.assert_rc("nvml2", 0);
    assert_eq!(out.u64("nvml2.total"), GIB, "{out}");
    assert_eq!(out.u64("nvml2.used") + out.u64("nvml2.reserved"), 64 * MIB, "{out}");
    assert_eq!(out.u64("nvml2.free"), GIB - 64 * MIB, "{out}");
    assert_eq!(out.u64("after.free"), GIB - 164 * MIB, "{out}");
    assert_eq!(out.u64("nvml_after.used"), 164 * MIB, "{out}");
    assert_eq!(out.u64("nvml_after.free"), GIB - 164 * MIB, "{out}");
}

#[test]
fn free_is_bounded_by_the_physically_free_memory() {
    // A cap larger than the device: free is what the device really has.
    let sim = Sim::new().memory("512MiB").context_memory("64MiB").memory_limit("1GiB").tenant(TENANT);
    let mut p = sim.spawn(sim.c("memctl").args(["init", "ctx", "info", "alloc:over:free+1", "alloc:all:free", "hold"]));
    p.wait_for("ready");
    let held_bytes = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    let out = p.wait();
    out.assert_success();
    // The total is the cap, or the device's size where the cap is larger
    // (README: no application sees more memory than exists).
    assert_eq!(out.u64("info.total"), 512 * MIB, "{out}");
    assert_eq!(out.u64("info.free"), 448 * MIB, "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY);
    out.assert_rc("all", cu::SUCCESS);
    assert_eq!(held_bytes, 512 * MIB, "the tenant is charged what it got\n{out}");
}

/// The values a script reports, without those that name process ids.
fn views(out: &Output) -> Vec<String> {
    out.stdout.lines().filter(|l| !l.contains(".pid.") && !l.starts_with("pid=")).map(String::from).collect()
}

#[test]
fn without_a_cap_the_application_sees_what_it_sees_without_the_shim() {
    let script = [
        "init",
        "ctx",
        "info",
        "totalmem",
        "alloc:a:100M",
        "info:after",
        "alloc:over:free+1",
        "nvml",
        "nvml2",
        "procs",
        "free:a",
        "free:a",
        "freeptr:0xdead0000",
    ];
    let bare = Sim::new().memory("2GiB").context_memory("64MiB");
    let expected = bare.run(bare.c("memctl").args(script));
    expected.assert_success();
    let shimmed = Sim::new().memory("2GiB").context_memory("64MiB").shim().tenant(TENANT);
    let out = shimmed.run(shimmed.c("memctl").args(script));
    out.assert_success();
    assert_eq!(views(&out), views(&expected), "under the shim:\n{out}\nwithout it:\n{expected}");
}

#[test]
fn each_context_costs_its_overhead() {
    let sim = Sim::new().memory("4GiB").context_memory("100MiB").memory_limit("1GiB").tenant(TENANT);
    let out = sim.run(sim.c("memctl").args(["init", "info:none", "pctx", "info:one", "ctx", "info:two", "destroyctx", "info:three"]));
    out.assert_success();
    assert_eq!(out.u64("one.free"), GIB - 100 * MIB, "{out}");
    assert_eq!(out.u64("two.free"), GIB - 200 * MIB, "{out}");
    out.assert_rc("destroyctx", cu::SUCCESS);
    assert_eq!(out.u64("three.free"), GIB - 100 * MIB, "{out}");
}

#[test]
fn every_allocation_path_is_charged_and_released() {
    let sim = capped("512MiB");
    let out = sim.run(sim.c("memctl").args([
        "init",
        "ctx",
        "gran",
        "info:m0",
        "managed:m:100M",
        "info:m1",
        "free:m",
        "info:m2",
        "info:p0",
        "pitch:p:1000:1000",
        "info:p1",
        "free:p",
        "info:p2",
        "info:a0",
        "async:a:100M",
        "info:a1",
        "free:a",
        "trim",
        "info:a2",
        "info:o0",
        "pool:o:100M",
        "info:o1",
        "free:o",
        "trim",
        "info:o2",
        "info:v0",
        "vmm:v:100M",
        "info:v1",
        "free:v",
        "info:v2",
        "info:h0",
        "vmmhost:h:100M",
        "info:h1",
        "info:r0",
        "array:r:4096:4096",
        "info:r1",
        "free:r",
        "info:r2",
        "info:d0",
        "array3d:d:256:256:64",
        "info:d1",
        "free:d",
        "info:d2",
        "info:x0",
        "mipmap:x:1024:1024:4",
        "info:x1",
        "free:x",
        "info:x2",
        "info:c0",
        "hostalloc:c:100M",
        "info:c1",
        "free:c",
    ]));
    out.assert_success();
    // Every view is the shim's (total = cap), so the differences are the ledger's charges.
    for line in out.stdout.lines().filter(|l| l.ends_with(".total=") || l.contains(".total=")) {
        assert!(line.ends_with(&format!("={}", 512 * MIB)), "{line}\n{out}");
    }
    let charged = |label: &str| out.u64(&format!("{label}0.free")) - out.u64(&format!("{label}1.free"));
    let released = |label: &str| {
        assert_eq!(
            out.u64(&format!("{label}2.free")),
            out.u64(&format!("{label}0.free")),
            "{label}: the free must give back exactly what was charged\n{out}"
        )
    };
    for key in [
        "m", "p", "a", "o", "v", "r", "d", "x", "c", "free.m", "free.p", "free.a", "free.o", "free.v", "free.r", "free.d", "free.x", "trim",
    ] {
        out.assert_rc(key, cu::SUCCESS);
    }
    assert_eq!(charged("m"), 100 * MIB, "cuMemAllocManaged\n{out}");
    released("m");
    assert_eq!(charged("p"), out.u64("p.pitch") * 1000, "cuMemAllocPitch_v2 charges pitch x height\n{out}");
    released("p");
    assert_eq!(charged("a"), 100 * MIB, "cuMemAllocAsync\n{out}");
    released("a");
    assert_eq!(charged("o"), 100 * MIB, "cuMemAllocFromPoolAsync\n{out}");
    released("o");
    assert_eq!(charged("v"), 100 * MIB, "cuMemCreate on the device\n{out}");
    released("v");
    out.assert_rc("h", cu::SUCCESS);
    assert_eq!(charged("h"), 0, "a host-located cuMemCreate is not device memory\n{out}");
    assert_eq!(charged("r"), 4096 * 4096, "cuArrayCreate_v2: width x height 1-byte elements\n{out}");
    released("r");
    assert_eq!(charged("d"), 256 * 256 * 64, "cuArray3DCreate_v2\n{out}");
    released("d");
    assert_eq!(charged("x"), 1024 * 1024 + 512 * 512 + 256 * 256 + 128 * 128, "cuMipmappedArrayCreate: the sum of its levels\n{out}");
    released("x");
    assert_eq!(charged("c"), 0, "pinned host memory is not device memory\n{out}");
}

#[test]
fn every_allocation_path_is_refused_over_the_cap() {
    let sim = capped("512MiB");
    // Leave 1 MiB under the cap (the 4 GiB device has plenty), then ask each path for 2 MiB.
    let mut p = sim.spawn(sim.c("memctl").args([
        "init",
        "ctx",
        "alloc:fill:free-1M",
        "info:left",
        "alloc:plain:2M",
        "managed:m:2M",
        "pitch:p:4096:512",
        "async:a:2M",
        "pool:o:2M",
        "vmm:v:2M",
        "array:r:2048:1024",
        "array3d:d:128:128:128",
        "mipmap:x:2048:1024:1",
        "ctx",
        "info:end",
        "hold",
    ]));
    p.wait_for("ready");
    let held_bytes = ledger_view::used_bytes(&sim.ledger_dir(), TENANT, 0);
    let out = p.wait();
    out.assert_success();
    out.assert_rc("fill", cu::SUCCESS);
    assert_eq!(out.u64("left.total"), 512 * MIB, "{out}");
    assert_eq!(out.u64("left.free"), MIB, "{out}");
    for key in ["plain", "m", "p", "a", "o", "v", "r", "d", "x"] {
        out.assert_rc(key, cu::OUT_OF_MEMORY);
    }
    assert_eq!(out.all("ctx")[1], cu::OUT_OF_MEMORY.to_string(), "a context must fit under the cap too\n{out}");
    assert_eq!(out.u64("end.free"), MIB, "refusals change nothing\n{out}");
    assert_eq!(held_bytes, 511 * MIB, "refusals charge nothing\n{out}");
}

/// A context whose memory does not fit under the cap is refused, and the
/// refusal says why: the call allocates nothing the application asked for.
#[test]
fn a_context_that_does_not_fit_is_refused_with_a_reason() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("100MiB").tenant(TENANT);
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "ctx:0", "info"]));
    out.assert_success();
    let created: Vec<&str> = out.all("ctx");
    assert_eq!(created, [cu::SUCCESS.to_string(), cu::OUT_OF_MEMORY.to_string()], "{out}");
    let lines = out.shim_log_lines();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].contains("a context on device 0 costs 67108864 bytes") && lines[0].contains("has 37748736 left"), "{out}");
}

/// A process's own page rewritten to "unlimited" (as any process of the
/// tenant can) does not raise the cap its environment asked for: the
/// process holds itself to it, in its allocations and in its views.
#[test]
fn a_page_rewritten_to_unlimited_does_not_raise_the_cap_asked_for() {
    let sim = capped("512MiB");
    let mut p = sim.spawn(sim.c("memctl").args(["init", "ctx", "ready", "wait", "alloc:big:1G", "info:after", "alloc:fits:100M"]));
    p.wait_for("ready");
    let ledger = ledger_view::open(&sim.ledger_dir(), TENANT);
    ledger.set_memory_limit_bytes(0, ledger::UNLIMITED, ledger::PolicySource::Unset);
    p.send_line("go");
    let out = p.wait();
    out.assert_success().assert_rc("big", cu::OUT_OF_MEMORY).assert_rc("fits", cu::SUCCESS);
    assert_eq!(out.u64("after.total"), 512 * MIB, "the view still shows the cap asked for\n{out}");
}
