//! `gpuslice status`: the JSON document scripts read and the table people
//! read, with and without a running monitor.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{Sim, MIB};
use monitor_support::*;

#[test]
fn status_json_lists_tenants_devices_and_processes() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-a");
    let mut a = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "alloc:denied:2G", "hold"]));
    let mut b_cmd = sim.c("memctl");
    b_cmd.env("GPUSLICE_TENANT", "team-b").env_remove("GPUSLICE_MEMORY_LIMIT").args(["init", "ctx", "alloc:b:300M", "hold"]);
    let mut b = sim.spawn(&mut b_cmd);
    a.wait_for("ready");
    b.wait_for("ready");

    // No monitor is running.
    let status = status_json(&sim);
    let tenants = status["tenants"].as_array().expect("a tenants array");
    let names: Vec<&str> = tenants.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["team-a", "team-b"]);
    let a_dev = &tenant(&status, "team-a").unwrap()["devices"][0];
    assert_eq!(a_dev["index"], 0);
    assert!(a_dev["uuid"].as_str().unwrap().starts_with("GPU-"));
    assert_eq!(a_dev["memory_used_bytes"].as_u64(), Some((100 + 64) * MIB));
    assert_eq!(a_dev["memory_limit_bytes"].as_u64(), Some(1024 * MIB));
    assert_eq!(a_dev["alloc_denied_total"], 1);
    let b_dev = &tenant(&status, "team-b").unwrap()["devices"][0];
    assert!(b_dev["memory_limit_bytes"].is_null(), "no cap is null: {b_dev}");
    assert_eq!(b_dev["uuid"], a_dev["uuid"]);
    let a_procs = tenant(&status, "team-a").unwrap()["processes"].as_array().unwrap();
    assert_eq!(a_procs.len(), 1);
    assert_eq!(a_procs[0]["pid"].as_u64(), Some(a.pid() as u64));
    assert_eq!(a_procs[0]["memory_used_bytes"].as_u64(), Some((100 + 64) * MIB));
    assert_eq!(status["devices"][0]["memory_total_bytes"].as_u64(), Some(4096 * MIB));

    // The table: devices, then tenants, then processes.
    let out = sim
        .run(gpuslice_command(&sim).arg("status").arg("--dir").arg(sim.ledger_dir()).arg("--nvml-lib").arg(gpuslice_tests::simgpu_lib()));
    out.assert_success();
    let text = &out.stdout;
    let section = |name: &str| text.find(&format!("\n{name}\n")).unwrap_or_else(|| panic!("no {name} section:\n{text}"));
    let (d, t, p) = (section("DEVICES"), section("TENANTS"), section("PROCESSES"));
    assert!(d < t && t < p, "{text}");
    let a_row = text[t..p].lines().find(|l| l.starts_with("team-a")).unwrap_or_else(|| panic!("{text}"));
    assert!(a_row.contains("164.0 MiB") && a_row.contains("1.0 GiB"), "{a_row}");
    assert!(text[p..].lines().any(|l| l.starts_with("team-b") && l.contains(&b.pid().to_string())), "{text}");
    assert!(!text.contains("without NVML"), "with NVML the indices are the host's\n{text}");
    // Without NVML the table says that its indices are not the host's.
    let out = sim.run(gpuslice_command(&sim).arg("status").arg("--dir").arg(sim.ledger_dir()).arg("--no-nvml"));
    out.assert_success();
    assert!(out.stdout.contains("NVML: no") && out.stdout.contains("not the host's (nvidia-smi's) index"), "{out}");

    // With a monitor running, the same answers.
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let again = status_json(&sim);
    for name in ["team-a", "team-b"] {
        assert_eq!(tenant(&again, name).unwrap()["devices"], tenant(&status, name).unwrap()["devices"], "{name}");
    }
    a.wait().assert_success();
    b.wait().assert_success();
}

#[test]
fn metrics_page_is_valid_prometheus_text() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-a");
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut app = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:100M", "alloc:no:1G", "hold"]));
    app.wait_for("ready");
    let metrics = monitor.metrics_until("the refused allocation to be counted", |metrics| {
        metrics.value("gpuslice_tenant_alloc_denied_total", &[("tenant", "team-a")]) == Some(1.0)
    });
    for (name, kind) in [
        ("gpuslice_tenant_memory_used_bytes", "gauge"),
        ("gpuslice_tenant_memory_limit_bytes", "gauge"),
        ("gpuslice_tenant_processes", "gauge"),
        ("gpuslice_tenant_alloc_denied_total", "counter"),
        ("gpuslice_reclaimed_processes_total", "counter"),
        ("gpuslice_device_memory_used_bytes", "gauge"),
        ("gpuslice_device_utilization_ratio", "gauge"),
        ("gpuslice_untracked_process_memory_bytes", "gauge"),
        ("gpuslice_monitor_rounds_total", "counter"),
    ] {
        assert_eq!(metrics.types.get(name).map(String::as_str), Some(kind), "{name}");
    }
    for sample in metrics.find("gpuslice_tenant_memory_used_bytes", &[]) {
        let keys: Vec<&str> = sample.labels.keys().map(String::as_str).collect();
        assert_eq!(keys, ["device", "tenant", "uuid"]);
    }
    assert_eq!(metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-a")]), Some(((100 + 64) * MIB) as f64));
    assert_eq!(metrics.value("gpuslice_tenant_processes", &[("tenant", "team-a")]), Some(1.0));
    let (status, body) = monitor.get("/healthz");
    assert_eq!(status, 200);
    assert!(body.starts_with("ok\n") && body.contains("mode: nvml"), "{body}");
    assert_eq!(monitor.get("/nope").0, 404);
    app.wait().assert_success();
}
