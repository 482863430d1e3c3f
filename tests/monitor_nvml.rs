//! What the monitor learns from NVML (simgpu's, through `--nvml-lib`):
//! driver-reported memory attributed to tenants by host pid, the device's
//! utilization as its tenants' kernels keep it busy, processes that
//! bypass the shim shown as untracked (and killed when configured), and the
//! ledger-only mode when there is no NVML at all.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{poll, Sim, MIB};
use monitor_support::*;

fn sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-a")
}

#[test]
fn driver_memory_is_attributed_to_tenants() {
    let sim = sim();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut a = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:200M", "hold"]));
    let mut b_cmd = sim.c("memctl");
    b_cmd.env("GPUSLICE_TENANT", "team-b").args(["init", "ctx", "alloc:b:300M", "hold"]);
    let mut b = sim.spawn(&mut b_cmd);
    a.wait_for("ready");
    b.wait_for("ready");

    let expect_a = (200 + 64) * MIB;
    let expect_b = (300 + 64) * MIB;
    let metrics = monitor.metrics_until("NVML's figures to reach both tenants", |metrics| {
        metrics.value("gpuslice_tenant_driver_memory_used_bytes", &[("tenant", "team-b")]).is_some_and(|v| v > 0.0)
            && metrics.value("gpuslice_tenant_driver_memory_used_bytes", &[("tenant", "team-a")]).is_some_and(|v| v > 0.0)
    });
    let driver_a = metrics.value("gpuslice_tenant_driver_memory_used_bytes", &[("tenant", "team-a"), ("device", "0")]).unwrap();
    let driver_b = metrics.value("gpuslice_tenant_driver_memory_used_bytes", &[("tenant", "team-b"), ("device", "0")]).unwrap();
    assert_eq!(driver_a as u64, expect_a, "NVML's per-process memory of team-a's process");
    assert_eq!(driver_b as u64, expect_b);
    assert_eq!(metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-a")]), Some(expect_a as f64));
    assert_eq!(metrics.value("gpuslice_tenant_processes", &[("tenant", "team-b")]), Some(1.0));
    let device_used = metrics.value("gpuslice_device_memory_used_bytes", &[("device", "0")]).unwrap();
    assert!(device_used as u64 >= expect_a + expect_b, "device used {device_used}");
    let total = metrics.value("gpuslice_device_memory_total_bytes", &[("device", "0")]).unwrap();
    assert_eq!(total as u64, 4096 * MIB);
    // The tenants hold memory and run nothing: the device has been idle.
    assert_eq!(metrics.value("gpuslice_device_utilization_ratio", &[("device", "0")]), Some(0.0), "{metrics:#?}");
    assert!(metrics.find("gpuslice_untracked_process_memory_bytes", &[]).is_empty(), "{metrics:#?}");
    // The same uuid label names the device in tenant and device series.
    let uuid = &metrics.find("gpuslice_device_memory_used_bytes", &[("device", "0")])[0].labels["uuid"];
    assert!(uuid.starts_with("GPU-"));
    assert!(metrics.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", "team-a"), ("uuid", uuid)]).is_some());

    // status agrees, process by process.
    let status = status_json(&sim);
    let pa = &tenant(&status, "team-a").unwrap()["processes"][0];
    assert_eq!(pa["pid"].as_u64(), Some(a.pid() as u64));
    assert_eq!(pa["driver_memory_used_bytes"].as_u64(), Some(expect_a));
    a.wait().assert_success();
    b.wait().assert_success();
}

#[test]
fn device_utilization_follows_a_busy_tenant() {
    let sim = sim();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let utilization = |metrics: &Metrics| metrics.value("gpuslice_device_utilization_ratio", &[("device", "0")]);
    assert_eq!(utilization(&monitor.metrics()), Some(0.0), "nothing has run on the device yet");

    // 1000 kernels of 20 ms: busy for 20 s, far longer than the wait.
    let busy = sim.spawn(sim.c("sim_launch").args(["queue", "1000", "20000"]));
    let metrics = monitor.metrics_until("the device to show the tenant's kernels as utilization", |metrics| {
        utilization(metrics).is_some_and(|ratio| ratio >= 0.5)
    });
    assert!(utilization(&metrics).is_some_and(|ratio| ratio <= 1.0), "{metrics:#?}");

    // Once the work is gone, the device is idle again.
    let _ = busy.kill9();
    monitor.metrics_until("the device to go idle after the busy tenant was killed", |metrics| utilization(metrics) == Some(0.0));
}

#[test]
fn a_process_without_the_shim_shows_as_untracked() {
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "violation_grace = \"500ms\"\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let mut tracked = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "hold"]));
    let mut bypass_cmd = sim.c("memctl");
    bypass_cmd.env_remove("LD_PRELOAD").args(["init", "ctx", "alloc:x:700M", "hold"]);
    let mut bypass = sim.spawn(&mut bypass_cmd);
    tracked.wait_for("ready");
    bypass.wait_for("ready");
    let bypass_pid = bypass.pid().to_string();

    let metrics = monitor.metrics_until("the bypass to be counted", |metrics| {
        metrics.value("gpuslice_violations_total", &[("kind", "untracked_process")]) == Some(1.0)
    });
    let untracked = metrics.find("gpuslice_untracked_process_memory_bytes", &[]);
    assert_eq!(untracked.len(), 1, "only the process without the shim is untracked: {untracked:#?}");
    assert_eq!(untracked[0].labels["pid"], bypass_pid);
    assert_eq!(untracked[0].value as u64, (700 + 64) * MIB);
    let status = status_json(&sim);
    assert_eq!(status["untracked_processes"][0]["pid"].as_u64(), Some(bypass.pid() as u64), "{status:#}");

    // Reported, not killed, by default.
    assert!(pid_alive(bypass.pid()));
    bypass.wait().assert_success();
    tracked.wait().assert_success();
    let log = monitor.stop();
    let lines: Vec<&str> = log.stderr.lines().filter(|l| l.contains("bypassed the shim")).collect();
    assert_eq!(lines.len(), 1, "one log line per episode:\n{}", log.stderr);
    assert!(lines[0].contains(&format!("pid {bypass_pid}")), "{}", lines[0]);
}

#[test]
fn on_violation_kill_kills_the_bypassing_process() {
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "on_violation = \"kill\"\nviolation_grace = \"0s\"\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let mut tracked = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "hold"]));
    let mut bypass_cmd = sim.c("memctl");
    bypass_cmd.env_remove("LD_PRELOAD").args(["init", "ctx", "alloc:x:100M", "hold"]);
    let mut bypass = sim.spawn(&mut bypass_cmd);
    tracked.wait_for("ready");
    bypass.wait_for("ready");
    let pid = bypass.pid();
    poll::until("the bypassing process to be killed", || !pid_alive(pid));
    let out = bypass.wait();
    assert_eq!(out.code(), None, "it died of a signal: {out}");
    assert!(pid_alive(tracked.pid()), "the process under the shim is left alone");
    assert_eq!(monitor.metrics_after_this_round().value("gpuslice_violation_kills_total", &[]), Some(1.0));
    tracked.wait().assert_success();
}

#[test]
fn without_nvml_the_monitor_runs_ledger_only_with_one_warning() {
    let sim = sim();
    let monitor = Monitor::start(&sim, MonitorOptions { nvml: false, ..Default::default() });
    let (status, health) = monitor.get("/healthz");
    assert_eq!(status, 200);
    assert!(health.contains("mode: ledger-only"), "{health}");
    let mut tenant_process = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "hold"]));
    tenant_process.wait_for("ready");
    let metrics = monitor.metrics_until("the tenant's ledger usage on the page", |metrics| {
        metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-a")]) == Some(((100 + 64) * MIB) as f64)
    });
    assert_eq!(metrics.value("gpuslice_nvml_available", &[]), Some(0.0));
    assert!(metrics.find("gpuslice_device_memory_used_bytes", &[]).is_empty());
    assert!(metrics.find("gpuslice_tenant_driver_memory_used_bytes", &[]).is_empty());
    assert_eq!(metrics.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", "team-a")]), Some((1024 * MIB) as f64));

    // Reclaim needs no NVML.
    let _ = tenant_process.kill9();
    monitor.metrics_until("the killed process's memory to be reclaimed", |metrics| {
        metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-a")]) == Some(0.0)
    });
    let log = monitor.stop();
    let warnings: Vec<&str> = log.stderr.lines().filter(|l| l.contains("ledger-only")).collect();
    assert_eq!(warnings.len(), 1, "exactly one warning:\n{}", log.stderr);
    assert!(warnings[0].contains(" WARN ") && warnings[0].contains("NVML is not available"), "{}", warnings[0]);
}
