//! The monitor reclaims a killed process's memory, by the kernel-held slot
//! lock: in the same PID namespace and in another one, with no other process
//! of the tenant asking for room; and never a live process's. (How soon after
//! the death is a figure `benches/latency.rs` reports, not a test's business.)

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{compile_c, poll, Sim, MIB};
use monitor_support::*;

const TENANT: &str = "team-a";

fn tenant_sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant(TENANT)
}

/// Host pid of the tenant's only live process, from `status --json`.
fn only_process(sim: &Sim) -> (u64, u64, u64) {
    let status = status_json(sim);
    let processes = tenant(&status, TENANT).expect("tenant listed")["processes"].as_array().unwrap().clone();
    assert_eq!(processes.len(), 1, "{status:#}");
    let p = &processes[0];
    (p["pid"].as_u64().unwrap(), p["ns_pid"].as_u64().unwrap(), p["memory_used_bytes"].as_u64().unwrap())
}

#[test]
fn a_killed_process_is_reclaimed() {
    let sim = tenant_sim();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut tenant_process = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:256M", "hold"]));
    tenant_process.wait_for("ready");
    let pid = tenant_process.pid() as u64;
    let (status_pid, _, held) = only_process(&sim);
    assert_eq!(status_pid, pid);
    assert_eq!(held, (256 + 64) * MIB, "the allocation and the context are charged");
    assert_eq!(tenant_used_bytes(&sim, TENANT), Some((256 + 64) * MIB));

    let _ = tenant_process.kill9();
    poll::until("the killed process's memory to be returned", || tenant_used_bytes(&sim, TENANT) == Some(0));
    let status = status_json(&sim);
    assert_eq!(tenant(&status, TENANT).unwrap()["processes"].as_array().unwrap().len(), 0, "{status:#}");
    assert_eq!(tenant(&status, TENANT).unwrap()["reclaimed_processes_total"], 1);
    let metrics = monitor.metrics_after_this_round();
    assert_eq!(metrics.value("gpuslice_reclaimed_processes_total", &[("tenant", TENANT)]), Some(1.0));
    let log = monitor.stop();
    assert!(log.stderr.contains("reclaimed slot") && log.stderr.contains(&format!("dead pid {pid}")), "{log}");
}

#[test]
fn a_killed_process_in_another_pid_namespace_is_reclaimed() {
    gpuslice_tests::require_pid_namespaces();
    let sim = tenant_sim();
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let memctl = compile_c("memctl");
    let mut cmd = sim.command("unshare");
    cmd.args(["--pid", "--fork", "--kill-child"]).arg(&memctl).args(["init", "ctx", "alloc:a:128M", "pid", "hold"]);
    let mut namespaced = sim.spawn(&mut cmd);
    namespaced.wait_for("ready");
    assert_eq!(namespaced.wait_for("pid"), "1", "memctl runs as pid 1 of its own namespace");

    let (host_pid, ns_pid, held) = only_process(&sim);
    assert_eq!(ns_pid, 1);
    assert_ne!(host_pid, 1, "status maps the slot to the host pid");
    assert_ne!(host_pid, namespaced.pid() as u64, "the tenant is unshare's child, not unshare");
    assert!(pid_alive(host_pid as u32));
    assert_eq!(held, (128 + 64) * MIB);

    kill9(host_pid as u32);
    poll::until("the killed namespaced process's memory to be returned", || tenant_used_bytes(&sim, TENANT) == Some(0));
    let unshare = namespaced.wait();
    assert!(!unshare.success(), "unshare reports its child's death: {unshare}");
}

#[test]
fn a_live_process_is_never_reclaimed() {
    let sim = tenant_sim();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut tenant_process = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "hold"]));
    tenant_process.wait_for("ready");
    // Several monitor rounds look at it; the live process keeps what it holds.
    monitor.wait_rounds(4);
    assert_eq!(tenant_used_bytes(&sim, TENANT), Some((100 + 64) * MIB));
    assert_eq!(monitor.metrics().value("gpuslice_reclaimed_processes_total", &[("tenant", TENANT)]), Some(0.0));
    tenant_process.wait().assert_success();
    assert_eq!(tenant_used_bytes(&sim, TENANT), Some(0), "a normal exit releases everything");
}
