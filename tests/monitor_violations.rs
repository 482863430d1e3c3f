//! `on_violation = "kill"` never kills for a moment's state: a finding must
//! last `violation_grace` first. A process that bypasses the shim, or a
//! tenant whose driver-reported memory passes its cap, for less than the
//! grace is left alone; one that stays is killed once the grace has passed.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{cu, Sim, MIB};
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

    // Lives about a second on the GPU without the shim: seen, not killed.
    let mut brief_cmd = sim.c("memctl");
    brief_cmd.env_remove("LD_PRELOAD").args(["init", "ctx", "alloc:x:100M", "ready", "sleep:1000"]);
    let mut brief = sim.spawn(&mut brief_cmd);
    brief.wait_for("ready");
    let pid = brief.pid().to_string();
    let seen = time_until(Duration::from_secs(5), || {
        monitor.metrics().find("gpuslice_untracked_process_memory_bytes", &[("pid", &pid)]).len() == 1
    });
    assert!(seen.is_some(), "the monitor never saw the process");
    brief.wait().assert_success();
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "untracked_process")]), Some(0.0));
    assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(0.0));

    // Stays: killed, and not before the grace has passed.
    let started = Instant::now();
    let mut lasting_cmd = sim.c("memctl");
    lasting_cmd.env_remove("LD_PRELOAD").args(["init", "ctx", "alloc:x:100M", "hold"]);
    let lasting = sim.spawn(&mut lasting_cmd);
    let pid = lasting.pid();
    let died = time_until(GRACE + Duration::from_secs(10), || !pid_alive(pid));
    assert!(died.is_some(), "the lasting bypass was never killed");
    let lived = started.elapsed();
    assert!(lived >= GRACE, "killed after {lived:?}, before the grace of {GRACE:?}");
    eprintln!("lasting bypass killed {lived:?} after it started (grace {GRACE:?})");
    assert_eq!(lasting.wait().code(), None, "it died of a signal");
    let metrics = monitor.metrics();
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
        "init", "ctx", "alloc:a:600M", "ready", "wait", "alloc:b:600M", "sleep:1000", "free:b", "info:back", "wait",
        "alloc:c:600M", "hold",
    ]));
    app.wait_for("ready");
    assert_eq!(app.wait_for("a"), cu::SUCCESS.to_string());

    // Over its 1 GiB cap (by the driver's count 600M + 600M + 64M context)
    // for about a second: left alone.
    forget_usage(&sim, "team-a");
    app.send_line("go");
    assert_eq!(app.wait_for("b"), cu::SUCCESS.to_string(), "the shim admitted it: the ledger said 0 in use");
    let over_seen = time_until(Duration::from_secs(5), || {
        monitor
            .metrics()
            .value("gpuslice_tenant_driver_memory_used_bytes", &[("tenant", "team-a")])
            .is_some_and(|v| v as u64 == (600 + 600 + 64) * MIB)
    });
    assert!(over_seen.is_some(), "the monitor never saw the tenant over its cap");
    app.wait_for("back");
    std::thread::sleep(Duration::from_millis(500));
    assert!(pid_alive(app.pid()), "killed for a moment over its cap");
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "over_cap")]), Some(0.0));

    // Over for good: killed once the grace has passed.
    app.send_line("go");
    assert_eq!(app.wait_for("c"), cu::SUCCESS.to_string());
    let over_from = Instant::now();
    let pid = app.pid();
    let died = time_until(GRACE + Duration::from_secs(10), || !pid_alive(pid));
    assert!(died.is_some(), "the tenant stayed over its cap and was never killed");
    let lasted = over_from.elapsed();
    eprintln!("over-cap tenant killed {lasted:?} after it passed its cap (grace {GRACE:?})");
    assert!(lasted >= GRACE / 2, "killed {lasted:?} after passing its cap, well before the grace of {GRACE:?}");
    assert_eq!(app.wait().code(), None, "it died of a signal");
    let metrics = monitor.metrics();
    assert_eq!(metrics.value("gpuslice_violations_total", &[("kind", "over_cap")]), Some(1.0));
    assert_eq!(metrics.value("gpuslice_violation_kills_total", &[]), Some(1.0));
    let log = monitor.stop();
    assert!(log.stderr.contains("tenant team-a uses") && log.stderr.contains("killed pid"), "{log}");
}

#[test]
fn usage_that_no_process_holds_is_reported_not_corrected() {
    let sim = sim();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut app = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "hold"]));
    app.wait_for("ready");
    let labels = [("tenant", "team-a"), ("device", "0")];
    let balanced = time_until(Duration::from_secs(5), || {
        monitor.metrics().value("gpuslice_tenant_unattributed_bytes", &labels) == Some(0.0)
    });
    assert!(balanced.is_some(), "a tenant in balance shows 0");
    // As if a process had died between the two steps of a reservation.
    let path = ledger::tenant_path(&sim.ledger_dir(), "team-a");
    let ledger = ledger::Ledger::open(&path).unwrap();
    ledger.layout().usage.devices[0].used_bytes.fetch_add(10 * MIB, std::sync::atomic::Ordering::SeqCst);
    let mut metrics = monitor.metrics();
    let seen = time_until(Duration::from_secs(5), || {
        metrics = monitor.metrics();
        metrics.value("gpuslice_tenant_unattributed_bytes", &labels) == Some((10 * MIB) as f64)
    });
    assert!(seen.is_some(), "{metrics:#?}");
    assert_eq!(ledger.used_bytes(0), (100 + 64 + 10) * MIB, "reported, not corrected");
    app.wait().assert_success();
    assert_eq!(ledger.used_bytes(0), 10 * MIB, "the leak outlives the process");
    let log = monitor.stop();
    assert_eq!(log.stderr.matches("that no process holds").count(), 1, "logged once:\n{}", log.stderr);
}
