//! Killing and restarting the monitor loses nothing: tenants keep running
//! under their caps, and the new monitor rebuilds its view from the ledgers.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{cu, Sim, MIB};
use monitor_support::*;

#[test]
fn monitor_restart_with_tenants_running() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("2GiB").tenant("team-a");
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nmemory = \"1GiB\"\n").unwrap();
    let first = Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), ..Default::default() });
    let mut app = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:512M", "hold", "alloc:b:512M", "hold"]));
    let mut doomed = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:d:64M", "hold"]));
    app.wait_for("ready");
    doomed.wait_for("ready");
    let expected = ((512 + 64 + 64 + 64) * MIB) as f64;
    first.metrics_until("the first monitor to see both processes", |metrics| {
        metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-a")]) == Some(expected)
    });
    let _ = first.running.kill9();

    // While no monitor runs, a tenant process dies.
    let _ = doomed.kill9();
    let second = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    // The new monitor reclaims it, and sees the survivor as before.
    let metrics = second.metrics_until("the new monitor to reclaim the dead process and see the survivor", |metrics| {
        metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-a")]) == Some(((512 + 64) * MIB) as f64)
    });
    assert_eq!(metrics.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", "team-a")]), Some((1024 * MIB) as f64));
    assert_eq!(metrics.value("gpuslice_tenant_processes", &[("tenant", "team-a")]), Some(1.0));
    assert_eq!(metrics.value("gpuslice_reclaimed_processes_total", &[("tenant", "team-a")]), Some(1.0));
    // The survivor is still under its cap: 512M more would pass 1GiB.
    app.send_line("go");
    assert_eq!(app.wait_for("b"), cu::OUT_OF_MEMORY.to_string());
    app.wait().assert_success();
}
