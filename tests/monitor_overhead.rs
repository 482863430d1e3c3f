//! Context overhead published by the monitor: a tenant process whose shim
//! cannot measure what a context costs (no NVML in its container, or a PID
//! namespace with its own `/proc`, where its pid means nothing to NVML)
//! charges its contexts nothing. The monitor knows its host pid, measures the
//! overhead from the driver's figures and writes it into the tenant's
//! ledger; the tenant's later contexts are charged for it.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{compile_c, simgpu_lib, Sim, MIB};
use monitor_support::*;
use std::time::Duration;

const TENANT: &str = "team-a";

fn tenant_device(sim: &Sim) -> serde_json::Value {
    let status = status_json(sim);
    tenant(&status, TENANT).map(|t| t["devices"][0].clone()).unwrap_or(serde_json::Value::Null)
}

/// `memctl ARGS` as pid 1 of a new PID namespace, with the driver (simgpu as
/// libcuda.so.1) but no NVML library in reach, as in a container that has
/// only the CUDA driver mounted. (Not with its own `/proc`: there simgpu,
/// unlike a real driver, cannot learn the host pid it should report.)
fn namespaced(sim: &Sim, args: &[&str]) -> gpuslice_tests::Running {
    gpuslice_tests::require_pid_namespaces();
    let cuda_only = sim.dir().join("cuda-only");
    if !cuda_only.exists() {
        std::fs::create_dir_all(&cuda_only).unwrap();
        std::os::unix::fs::symlink(simgpu_lib(), cuda_only.join("libcuda.so.1")).unwrap();
        std::os::unix::fs::symlink(simgpu_lib(), cuda_only.join("libcuda.so")).unwrap();
    }
    let mut cmd = sim.command("unshare");
    cmd.env("LD_LIBRARY_PATH", &cuda_only);
    cmd.args(["--pid", "--fork", "--kill-child"]).arg(compile_c("memctl")).args(args);
    sim.spawn(&mut cmd)
}

#[test]
fn the_monitor_measures_the_context_overhead_for_namespaced_tenants() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant(TENANT);
    let monitor = Monitor::start(&sim, MonitorOptions::default());

    let mut first = namespaced(&sim, &["init", "ctx", "alloc:a:100M", "pid", "hold"]);
    first.wait_for("ready");
    assert_eq!(first.wait_for("pid"), "1");
    let unmeasured_by_the_shim = tenant_device(&sim)["memory_used_bytes"].as_u64() == Some(100 * MIB);
    let mut device = tenant_device(&sim);
    let published = time_until(Duration::from_secs(5), || {
        device = tenant_device(&sim);
        device["context_overhead_bytes"].as_u64() == Some(64 * MIB)
    });
    assert!(published.is_some(), "the overhead never reached the ledger: {device:#}");

    // A later process of the tenant, also namespaced, is charged its context.
    let mut second = namespaced(&sim, &["init", "ctx", "alloc:b:100M", "hold"]);
    second.wait_for("ready");
    let status = status_json(&sim);
    let processes = tenant(&status, TENANT).unwrap()["processes"].as_array().unwrap().clone();
    assert_eq!(processes.len(), 2, "{status:#}");
    let charged: Vec<u64> = processes.iter().map(|p| p["memory_used_bytes"].as_u64().unwrap()).collect();
    assert!(charged.contains(&((100 + 64) * MIB)), "the second process's context is charged: {status:#}");
    if unmeasured_by_the_shim {
        assert!(charged.contains(&(100 * MIB)), "{status:#}");
        let log = monitor.stop();
        assert!(log.stderr.contains("context overhead measured at 64.0 MiB"), "{log}");
    } else {
        eprintln!("the shim measured the overhead itself; the monitor left its figure alone");
    }
    let _ = first.kill9();
    let _ = second.kill9();
}
