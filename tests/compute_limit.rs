//! The compute limit, end to end: real processes keep a simulated device
//! busy with back-to-back kernels (`tests/c/compute_load.c`, and
//! `tests/python/compute_load.py` through NVIDIA's cuda-bindings) under the
//! shim alone, no monitor, and the tests check the share of the device they
//! got: kernels × kernel duration / wall time.
//!
//! "Not slowed" is measured against the same client without the shim, run
//! at the same time on a simulated GPU of its own, so that what a loaded
//! machine takes from both (a client descheduled between launches leaves
//! the device idle) is not blamed on the shim. The bounds leave room for a
//! noisy two-core machine; how close to its limit a tenant gets is for
//! `benches/shim.rs` to say.

use gpuslice_tests::{cu, Output, Running, Sim};
use std::time::Duration;

/// Each kernel runs this long.
const KERNEL_US: &str = "1000";
/// Each client launches for this long.
const SECONDS: &str = "2";
const TENANT: &str = "compute";

fn sim() -> Sim {
    Sim::new().shim().tenant(TENANT).timeout(Duration::from_secs(120))
}

/// `compute_load ROUTE KERNEL_US SECONDS [DEVICE [sync]]` on `sim`, started.
fn load(sim: &Sim, envs: &[(&str, &str)], args: &[&str]) -> Running {
    let mut cmd = sim.c("compute_load");
    cmd.envs(envs.iter().copied()).args(args);
    sim.spawn(&mut cmd)
}

fn finished(running: Running) -> Output {
    let out = running.wait();
    out.assert_success().assert_rc("init", cu::SUCCESS);
    out
}

/// The device share the client got.
fn share(out: &Output) -> f64 {
    out.f64("share")
}

/// The tenant's (launches, busy ns, throttled ns) on ledger device `dev`.
fn ledger_counters(sim: &Sim, tenant: &str, dev: usize) -> (u64, u64, u64) {
    let path = ledger::tenant_path(&sim.ledger_dir(), tenant);
    let ledger = ledger::Ledger::open(&path).expect("the tenant's ledger");
    (ledger.launches_total(dev), ledger.busy_ns_total(dev), ledger.throttled_ns_total(dev))
}

/// (a) A tenant alone on the device with a limit of 30 % gets about 30 %,
/// through the CUDA runtime's route (cuda-bindings resolves every entry
/// point with `cuGetProcAddress_v2`).
#[test]
fn a_tenant_alone_gets_its_limit() {
    let sim = sim().env("GPUSLICE_COMPUTE_LIMIT", "30");
    let out = sim.run(sim.py("compute_load.py").args([KERNEL_US, SECONDS]));
    out.assert_success().assert_rc("init", cu::SUCCESS);
    let share = share(&out);
    eprintln!("limit 30, alone: share {share:.3}");
    assert!((0.20..=0.40).contains(&share), "a 30 % limit gave {share:.3} of the device\n{out}");
    let (launches, busy_ns, throttled_ns) = ledger_counters(&sim, TENANT, 0);
    assert_eq!(launches, out.u64("kernels"), "every launch is counted");
    assert!(busy_ns > 0 && throttled_ns > 0, "busy {busy_ns} ns, throttled {throttled_ns} ns\n{out}");
}

/// (a) again for one process whose kernels mix lengths the bucket brackets
/// one by one (1 ms) with lengths it samples (5 µs): the samples stand for
/// the launches around them whatever their lengths.
#[test]
fn a_process_of_mixed_kernels_gets_its_limit() {
    let sim = sim().env("GPUSLICE_COMPUTE_LIMIT", "30");
    let out = finished(load(&sim, &[], &["kernel", "1000,5", SECONDS]));
    let share = share(&out);
    eprintln!("limit 30, 1 ms and 5 µs kernels in turn: share {share:.3}");
    assert!((0.20..=0.40).contains(&share), "a 30 % limit gave {share:.3} of the device\n{out}");
    assert!(out.u64("busy_us") > out.u64("kernels") / 2 * 1000, "half the kernels are 1 ms long\n{out}");
    let (launches, busy_ns, throttled_ns) = ledger_counters(&sim, TENANT, 0);
    assert_eq!(launches, out.u64("kernels"), "every launch is counted");
    assert!(busy_ns > 0 && throttled_ns > 0, "busy {busy_ns} ns, throttled {throttled_ns} ns\n{out}");
}

/// (b) Without a limit the shim does not slow a tenant down: it gets what
/// the same client gets without the shim, at the same time, from a
/// simulated GPU of its own.
#[test]
fn a_tenant_without_a_limit_is_not_slowed() {
    let (shimmed, bare) = (sim().memory_limit("8GiB"), Sim::new());
    let (with_shim, without) = (load(&shimmed, &[], &["kernel", KERNEL_US, SECONDS]), load(&bare, &[], &["kernel", KERNEL_US, SECONDS]));
    let (with_shim, without) = (finished(with_shim), finished(without));
    let (share, bare_share) = (share(&with_shim), share(&without));
    eprintln!("no limit: share {share:.3} under the shim, {bare_share:.3} without");
    assert!(share >= 0.85 * bare_share, "the shim slowed an unlimited tenant to {share:.3} (bare: {bare_share:.3})\n{with_shim}");
    assert!(share >= 0.6, "the device idled: {share:.3}\n{with_shim}");
    assert_eq!(ledger_counters(&shimmed, TENANT, 0), (0, 0, 0), "a device without a limit is not governed");
}

/// (c) The limit is the tenant's: two of its processes together stay under it.
#[test]
fn processes_of_one_tenant_share_its_limit() {
    let sim = sim().env("GPUSLICE_COMPUTE_LIMIT", "30");
    let first = load(&sim, &[], &["kernel", KERNEL_US, "3"]);
    let second = load(&sim, &[], &["kernel", KERNEL_US, "3"]);
    let (first, second) = (finished(first), finished(second));
    let kernels = first.u64("kernels") + second.u64("kernels");
    let wall_us = first.f64("wall_us").max(second.f64("wall_us"));
    let total = kernels as f64 * 1000.0 / wall_us;
    eprintln!("limit 30, two processes: {:.3} + {:.3}, together {total:.3}", share(&first), share(&second));
    assert!(total <= 0.40, "two processes of a tenant limited to 30 % got {total:.3} together\n{first}\n{second}");
    assert!(share(&first) > 0.0 && share(&second) > 0.0, "both ran\n{first}\n{second}");
}

/// (d) Every launch route is held to the limit: `cuLaunchKernelEx`,
/// cooperative launches, graph launches, their per-thread forms as
/// `cuGetProcAddress_v2` resolves them with the per-thread flag, the legacy
/// null stream, and a client that waits for every launch.
#[test]
fn every_launch_route_is_governed() {
    let routes: &[&[&str]] = &[
        &["ex", KERNEL_US, "1.5"],
        &["coop", KERNEL_US, "1.5"],
        &["graph", KERNEL_US, "1.5"],
        &["kernel_ptsz", KERNEL_US, "1.5"],
        &["ex_ptsz", KERNEL_US, "1.5"],
        &["coop_ptsz", KERNEL_US, "1.5"],
        &["graph_ptsz", KERNEL_US, "1.5"],
        &["legacy", KERNEL_US, "1.5"],
        &["kernel", KERNEL_US, "1.5", "0", "sync"],
    ];
    let mut failures = Vec::new();
    for args in routes {
        let sim = sim().env("GPUSLICE_COMPUTE_LIMIT", "20");
        let out = finished(load(&sim, &[], args));
        let share = share(&out);
        let (launches, _, throttled_ns) = ledger_counters(&sim, TENANT, 0);
        eprintln!(
            "limit 20, {}: share {share:.3}, {launches} launches counted, {:.0} ms throttled",
            args.join(" "),
            throttled_ns as f64 / 1e6
        );
        if share > 0.32 || launches != out.u64("launches") || throttled_ns == 0 {
            failures.push(format!("{}: share {share:.3}, {launches} launches counted\n{out}", args.join(" ")));
        }
    }
    assert!(failures.is_empty(), "routes not held to a 20 % limit:\n{}", failures.join("\n"));
}

/// (e) A bad limit fails closed, naming the variable, the value and what is
/// accepted; so does a tenant with a compute limit and no memory cap whose
/// ledger cannot be used (a limit must never become no limit).
#[test]
fn bad_limits_and_a_compute_only_tenant_fail_closed() {
    use ledger::compute::COMPUTE_LIMIT_FORMAT;
    let hami = "from 0 (no limit) to 100";
    for (var, value, says) in [
        ("GPUSLICE_COMPUTE_LIMIT", "0", COMPUTE_LIMIT_FORMAT),
        ("GPUSLICE_COMPUTE_LIMIT", "101", COMPUTE_LIMIT_FORMAT),
        ("GPUSLICE_COMPUTE_LIMIT", "30%", COMPUTE_LIMIT_FORMAT),
        ("GPUSLICE_COMPUTE_LIMIT", "030", "leading zero"),
        ("GPUSLICE_COMPUTE_LIMIT", "0=30,0=40", "given twice"),
        ("GPUSLICE_COMPUTE_LIMIT", "1=30", "device 0 would have no compute limit"),
        ("CUDA_DEVICE_SM_LIMIT", "150", hami),
        ("CUDA_DEVICE_SM_LIMIT", "0x1e", hami),
        ("CUDA_DEVICE_SM_LIMIT_0", "-5", hami),
    ] {
        let sim = Sim::new().shim().tenant(TENANT);
        let out = sim.run(sim.c("memctl").env(var, value).args(["init", "ctx", "alloc:a:1M"]));
        out.assert_success().assert_fails_closed("a", &[var, &format!("{value:?}"), says]);
    }
    // No memory cap, and a ledger directory that cannot be made.
    let sim = Sim::new().shim().tenant(TENANT).env("GPUSLICE_DIR", "/proc/gpuslice-cannot-be-made");
    let out = sim.run(sim.c("memctl").env("GPUSLICE_COMPUTE_LIMIT", "30").args(["init", "ctx", "alloc:a:1M"]));
    out.assert_success().assert_fails_closed("a", &["/proc/gpuslice-cannot-be-made"]);
    // Without a limit either: a ledger directory named and missing is a
    // mistake to name, not a reason to run unwatched.
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "alloc:a:1M"]));
    out.assert_success().assert_fails_closed("a", &["GPUSLICE_DIR", "/proc/gpuslice-cannot-be-made", "no such directory"]);
}

/// (f) Limits are per device: a tenant limited on device 0 is held there
/// and not slowed on device 1, even in a process that is limited on device 0.
#[test]
fn limits_are_per_device() {
    let sim = sim().devices(2).env("GPUSLICE_COMPUTE_LIMIT", "0=30");
    let bare = Sim::new();
    let limited = load(&sim, &[], &["kernel", KERNEL_US, SECONDS, "0"]);
    let free = load(&sim, &[], &["kernel", KERNEL_US, SECONDS, "1"]);
    let reference = load(&bare, &[], &["kernel", KERNEL_US, SECONDS]);
    let (limited, free, reference) = (finished(limited), finished(free), finished(reference));
    let (on_0, on_1, bare_share) = (share(&limited), share(&free), share(&reference));
    eprintln!("limit 0=30: device 0 {on_0:.3}, device 1 {on_1:.3}, without the shim {bare_share:.3}");
    assert!(on_0 <= 0.40, "device 0 is limited to 30 % and gave {on_0:.3}\n{limited}");
    assert!(on_1 >= 0.85 * bare_share, "device 1 has no limit and gave {on_1:.3} (bare: {bare_share:.3})\n{free}");
    let devices = ledger::Ledger::open(&ledger::tenant_path(&sim.ledger_dir(), TENANT)).expect("ledger").devices();
    assert_eq!(devices.len(), 2, "both devices are in the tenant's ledger");
    let (launches_1, busy_1, _) = ledger_counters(&sim, TENANT, 1);
    assert_eq!((launches_1, busy_1), (0, 0), "device 1 is not governed");
    assert_eq!(ledger_counters(&sim, TENANT, 0).0, limited.u64("launches"));
}

/// `gpuslice run --compute-limit` sets the limit (checked as the shim
/// checks it, before the command starts).
#[test]
fn gpuslice_run_sets_the_compute_limit() {
    let sim = Sim::new();
    let dir = sim.ledger_dir();
    let load = gpuslice_tests::compile_c("compute_load");
    let out = sim.run(
        sim.gpuslice()
            .args(["run", "--sim", "--compute-limit", "30", "--tenant", "cli", "--dir"])
            .arg(&dir)
            .arg("--")
            .arg(load)
            .args(["kernel", KERNEL_US, "1.5"]),
    );
    out.assert_success();
    assert!(share(&out) <= 0.40, "--compute-limit 30 gave {:.3}\n{out}", share(&out));
    let ledger = ledger::Ledger::open(&ledger::tenant_path(&dir, "cli")).expect("the ledger lives in --dir");
    assert_eq!((ledger.compute_limit_ratio_e4(0), ledger.compute_limit_source(0)), (3000, ledger::PolicySource::Environment));
    let out = sim.run(sim.gpuslice().args(["run", "--sim", "--compute-limit", "0=30,0=40", "--", "true"]));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("--compute-limit \"0=30,0=40\"") && out.stderr.contains("given twice"), "{out}");
}

/// (d, continued) The launch entry points simgpu lacks are held too, over a
/// driver of the tests' own that has them (`tests/c/launch_driver.c`):
/// the deprecated `cuLaunch`, `cuLaunchGrid` and `cuLaunchGridAsync`, and
/// `cuLaunchCooperativeKernelMultiDevice`, whose part on each device is
/// charged to that device.
#[test]
fn deprecated_and_multi_device_launches_are_governed() {
    let mut failures = Vec::new();
    for route in ["launch", "grid", "grid_async", "multi"] {
        let sim = Sim::new().driver("launch_driver").shim().tenant(TENANT).env("GPUSLICE_COMPUTE_LIMIT", "20");
        let out = sim.run(sim.c("legacy_launch").args([route, "1.5"]));
        out.assert_success().assert_rc("init", cu::SUCCESS);
        let devices = if route == "multi" { 2 } else { 1 };
        for dev in 0..devices {
            let share = out.f64(&format!("share.{dev}"));
            let (launches, busy_ns, throttled_ns) = ledger_counters(&sim, TENANT, dev);
            eprintln!("limit 20, {route}, device {dev}: share {share:.3}, {launches} launches counted, {busy_ns} ns charged, {throttled_ns} ns throttled");
            if share > 0.32 || launches != out.u64("launches") || busy_ns == 0 {
                failures.push(format!("{route} on device {dev}: share {share:.3}, {launches} launches counted\n{out}"));
            }
        }
    }
    assert!(failures.is_empty(), "routes not held to a 20 % limit:\n{}", failures.join("\n"));
}

/// A driver that refuses timing events does not let launches through
/// unmeasured: each is measured by waiting for its stream, the limit holds,
/// one warning says so, and the application runs on.
#[test]
fn without_timing_events_the_limit_still_holds() {
    let sim = Sim::new().driver("launch_driver").shim().tenant(TENANT).env("GPUSLICE_COMPUTE_LIMIT", "20");
    let out = sim.run(sim.c("legacy_launch").env("LAUNCH_DRIVER_REFUSE_EVENTS", "1").args(["grid_async", "1.5"]));
    out.assert_success().assert_rc("init", cu::SUCCESS);
    let share = out.f64("share.0");
    let (launches, busy_ns, _) = ledger_counters(&sim, TENANT, 0);
    eprintln!("limit 20, no events: share {share:.3}, {launches} launches, {busy_ns} ns charged");
    assert!(share <= 0.32 && launches == out.u64("launches") && busy_ns > 0, "share {share:.3}, {launches} launches counted\n{out}");
    let warnings: Vec<&str> = out.shim_log_lines().into_iter().filter(|l| l.contains("timing events")).collect();
    assert_eq!(warnings.len(), 1, "one line says launches are measured without events\n{out}");
}
