//! `on_violation = "kill"` never kills for a moment's state: a finding must
//! last `violation_grace` first. A process that bypasses the shim, or a
//! tenant whose driver-reported memory passes its cap, for less than the
//! grace is left alone; one that stays is killed once the grace has passed.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{cu, poll, Sim, MIB};
use monitor_support::*;
use std::time::{Duration, Instant};

const GRACE: Duration = Duration::from_secs(3);

fn sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-a")
}

fn kill_monitor(sim: &Sim) -> Monitor {
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, format!("on_violation = \"kill\"\nviolation_grace = \"{}ms\"\n", GRACE.as_millis())).unwrap();
    Monitor::start(sim, MonitorOptions { config: Some(config), ..Default::default() })
}

#[test]
fn a_bypass_shorter_than_the_grace_is_left_alone_a_lasting_one_is_killed() {
    let sim = sim();
    let monitor = kill_monitor(&sim);

    // On the GPU without the shim only until the monitor has seen it (well
    // within the grace): seen, not killed.
    let mut brief_cmd = sim.c("memctl");
    brief_cmd.env_remove("LD_PRELOAD").args(["init", "ctx", "alloc:x:100M", "hold"]);
    let mut brief = sim.spawn(&mut brief_cmd);
    brief.wait_for("ready");
    let pid = brief.pid().to_string();
    monitor.metrics_until("the monitor to see the process without the shim", |metrics| {
        metrics.find("gpuslice_untracked_process_memory_bytes", &[("pid", &pid)]).len() == 1
    });
    brief.wait().assert_success();
    monitor.wait_rounds(2);
    let metrics = monitor.metrics();
    assert!(metrics.find("gpuslice_untracked_process_memory_bytes", &[("pid", &pid)]).is_empty(), "{metrics:#?}");
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "untracked_process")]), Some(0.0));
    assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(0.0));

    // Stays: killed, and not before the grace has passed (counted from
    // before the process existed, so a slow machine only makes it longer).
    let started = Instant::now();
    let mut lasting_cmd = sim.c("memctl");
    lasting_cmd.env_remove("LD_PRELOAD").args(["init", "ctx", "alloc:x:100M", "hold"]);
    let lasting = sim.spawn(&mut lasting_cmd);
    let pid = lasting.pid();
    poll::until("the lasting bypass to be killed", || !pid_alive(pid));
    let lived = started.elapsed();
    assert!(lived >= GRACE, "killed after {lived:?}, before the grace of {GRACE:?}");
    assert_eq!(lasting.wait().code(), None, "it died of a signal");
    let metrics = monitor.metrics_after_this_round();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "untracked_process")]), Some(1.0));
    assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(1.0));
}

/// Plays a tenant that lowers the usage figure in its own ledger, so that
/// its shim admits more than its cap: the driver then reports more memory
/// than the cap allows, which only the monitor can see.
fn forget_usage(sim: &Sim, tenant: &str) {
    let path = ledger::tenant_path(&sim.ledger_dir(), tenant);
    let ledger = ledger::Ledger::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ledger.layout().usage.devices[0].used_bytes.store(0, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn a_tenant_briefly_over_its_cap_is_left_alone_a_lasting_one_is_killed() {
    let sim = sim();
    let monitor = kill_monitor(&sim);
    let mut app = sim.spawn(sim.c("memctl").args([
        "init",
        "ctx",
        "alloc:a:600M",
        "ready",
        "wait",
        "alloc:b:600M",
        "wait",
        "free:b",
        "info:back",
        "wait",
        "alloc:c:600M",
        "hold",
    ]));
    app.wait_for("ready");
    assert_eq!(app.wait_for("a"), cu::SUCCESS.to_string());
    let over_bytes = ((600 + 600 + 64) * MIB) as f64;
    let driver_bytes = |metrics: &Metrics| metrics.value("gpuslice_tenant_driver_memory_used_bytes", &[("tenant", "team-a")]);

    // Over its 1 GiB cap (by the driver's count 600M + 600M + 64M context)
    // only until the monitor has seen it (well within the grace): left alone.
    forget_usage(&sim, "team-a");
    app.send_line("go");
    assert_eq!(app.wait_for("b"), cu::SUCCESS.to_string(), "the shim admitted it: the ledger said 0 in use");
    monitor.metrics_until("the monitor to see the tenant over its cap", |metrics| driver_bytes(metrics) == Some(over_bytes));
    app.send_line("go");
    app.wait_for("back");
    monitor.metrics_until("the monitor to see the tenant back within its cap", |metrics| {
        driver_bytes(metrics) == Some(((600 + 64) * MIB) as f64)
    });
    // That page is of a round after the whole episode: a kill would be done.
    assert!(pid_alive(app.pid()), "killed for a moment over its cap");
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "over_cap")]), Some(0.0));

    // Over for good: killed, and not before the grace has passed (counted
    // from before the allocation that passes the cap).
    let over_from = Instant::now();
    app.send_line("go");
    assert_eq!(app.wait_for("c"), cu::SUCCESS.to_string());
    let pid = app.pid();
    poll::until("the tenant that stayed over its cap to be killed", || !pid_alive(pid));
    let lasted = over_from.elapsed();
    assert!(lasted >= GRACE, "killed {lasted:?} after passing its cap, before the grace of {GRACE:?}");
    assert_eq!(app.wait().code(), None, "it died of a signal");
    let metrics = monitor.metrics_after_this_round();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "over_cap")]), Some(1.0));
    assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(1.0));
    let log = monitor.stop();
    assert!(log.stderr.contains("tenant team-a uses") && log.stderr.contains("killed pid"), "{log}");
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on the test's own child.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, signal) }, 0);
}

#[test]
fn a_leak_is_returned_but_a_stopped_process_in_flight_is_left_alone() {
    use ledger::layout::in_flight;
    use std::sync::atomic::Ordering::SeqCst;
    let sim = sim();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut app = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "hold"]));
    app.wait_for("ready");
    let path = ledger::tenant_path(&sim.ledger_dir(), "team-a");
    let ledger = ledger::Ledger::open(&path).unwrap();
    let held = (100 + 64) * MIB;
    assert_eq!(ledger.used_bytes(0), held);
    let slots = ledger.slots();
    assert_eq!(slots.len(), 1);
    let record = &ledger.layout().slots[slots[0].index];
    let used = &ledger.layout().usage.devices[0].used_bytes;

    // The process is stopped between the two steps of a reservation: marked
    // in flight on its slot, counted for the tenant, not yet in its slot.
    signal(app.pid(), libc::SIGSTOP);
    record.in_flight_word.fetch_add(in_flight::BEGIN, SeqCst);
    used.fetch_add(10 * MIB, SeqCst);
    monitor.wait_rounds(8);
    assert_eq!(ledger.used_bytes(0), held + 10 * MIB, "a reservation in flight of a live process was taken away");
    // It resumes and finishes the reservation.
    record.bytes[0].fetch_add(10 * MIB, SeqCst);
    record.in_flight_word.fetch_add(in_flight::FINISH, SeqCst);
    signal(app.pid(), libc::SIGCONT);
    monitor.wait_rounds(4);
    assert_eq!(ledger.used_bytes(0), held + 10 * MIB, "a balanced tenant was corrected");

    // A process killed between the steps: counted, held by no slot, nothing
    // in flight. The monitor returns it.
    used.fetch_add(7 * MIB, SeqCst);
    poll::fetch_until("the leak to be returned", || ledger.used_bytes(0), |used| *used == held + 10 * MIB);
    monitor.wait_rounds(3);
    assert_eq!(ledger.used_bytes(0), held + 10 * MIB, "returned once");
    assert_eq!(monitor.metrics().value("gpuslice_tenant_unattributed_bytes", &[("tenant", "team-a"), ("device", "0")]), Some(0.0));
    app.wait().assert_success();
    assert_eq!(ledger.used_bytes(0), 0, "the tenant ends at exactly zero");
    let log = monitor.stop();
    assert_eq!(log.stderr.matches("that the ledger counted and no process held").count(), 1, "logged once:\n{}", log.stderr);
}

/// Memory a stream-ordered pool keeps after its allocations were freed is
/// device memory the tenant holds, and the shim charges it: the driver's
/// figure and the ledger's agree, so a pool that retains its blocks for
/// longer than the grace is neither a bypass nor over the cap.
#[test]
fn a_pools_retained_memory_is_charged_and_no_violation() {
    let sim = sim();
    let monitor = kill_monitor(&sim);
    let mut app =
        sim.spawn(sim.c("pools").args(["ctx", "stream:1", "threshold:max", "alloc:a:900M:1", "free:a:1", "sync:1", "attrs:kept", "hold"]));
    app.wait_for("ready");
    assert_eq!(ledger_used_bytes(&sim), 964 * MIB, "the context and the retained block are charged");
    std::thread::sleep(GRACE + Duration::from_millis(500));
    monitor.wait_rounds(2);
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "over_cap")]), Some(0.0), "{metrics:#?}");
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "untracked_process")]), Some(0.0), "{metrics:#?}");
    assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(0.0));
    assert!(pid_alive(app.pid()), "the tenant was left alone");
    app.send_line("go");
    let out = app.wait();
    out.assert_success();
    assert_eq!(out.u64("kept.reserved"), 900 * MIB, "{out}");
    assert_eq!(out.u64("kept.used"), 0, "{out}");
}

fn ledger_used_bytes(sim: &Sim) -> u64 {
    let path = ledger::tenant_path(&sim.ledger_dir(), "team-a");
    let ledger = ledger::Ledger::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ledger.used_bytes(0)
}
