//! The admission queue and the devices on the monitor's `/metrics`, with
//! real queued jobs on simgpu: device 0 split into three MIG instances
//! beside a whole device 1.
//!
//! Jobs are shells that print `started=1` and wait for a line on stdin, so
//! the test decides when each one ends.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{simgpu_lib, Running, Sim, GIB};
use monitor_support::{gpuslice_command, Metrics, Monitor, MonitorOptions};
use serde_json::Value;

const PARTITION: &str = "0=3g.71gb,2g.35gb,1g.18gb";
const JOB_SCRIPT: &str = "echo visible=$CUDA_VISIBLE_DEVICES; echo started=1; read line || true";

/// Two 8 GiB GPUs; device 0's instances hold 4, 2 and 1 GiB.
fn sim() -> Sim {
    Sim::new().devices(2).memory("8GiB").context_memory("64MiB").env("SIMGPU_MIG", PARTITION)
}

fn submit(sim: &Sim, args: &[&str]) -> Running {
    let mut cmd = gpuslice_command(sim);
    cmd.args(["run", "--sim", "--queue", "--dir"]).arg(sim.ledger_dir()).args(args).args(["--", "sh", "-c", JOB_SCRIPT]);
    sim.spawn(&mut cmd)
}

fn devices_json(sim: &Sim) -> Value {
    let out =
        sim.run(gpuslice_command(sim).arg("devices").arg("--dir").arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()).arg("--json"));
    out.assert_success();
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("devices --json is not JSON: {e}\n{out}"))
}

fn jobs(metrics: &Metrics, state: &str) -> Option<f64> {
    metrics.value("gpuslice_queue_jobs", &[("state", state)])
}

fn waits_counted(metrics: &Metrics) -> f64 {
    metrics.find("gpuslice_queue_wait_seconds_count", &[]).iter().map(|s| s.value).sum()
}

#[test]
fn queued_jobs_devices_and_committed_memory_are_on_the_page() {
    let sim = sim();
    let monitor = Monitor::start(&sim, MonitorOptions::default());

    // Every GPU and MIG instance, with its name, profile and parent.
    let view = devices_json(&sim);
    let listed: Vec<&Value> = view["devices"].as_array().unwrap().iter().collect();
    assert_eq!(listed.len(), 5, "{view}");
    let uuid = |i: usize| listed[i]["uuid"].as_str().unwrap().to_string();
    let page = monitor.metrics_until("device info for all five devices", |m| m.find("gpuslice_device_info", &[]).len() == 5);
    assert_eq!(page.types.get("gpuslice_device_info").map(String::as_str), Some("gauge"));
    let info = |u: &str| {
        let found = page.find("gpuslice_device_info", &[("uuid", u)]);
        assert_eq!(found.len(), 1, "{u}: {found:?}");
        assert_eq!(found[0].value, 1.0);
        found[0].labels.clone()
    };
    let gpu0 = info(&uuid(0));
    assert_eq!((gpu0["name"].as_str(), gpu0["mig_profile"].as_str(), gpu0["parent_uuid"].as_str()), ("simgpu H200", "", ""));
    for (i, profile) in [(1, "3g.71gb"), (2, "2g.35gb"), (3, "1g.18gb")] {
        assert!(uuid(i).starts_with("MIG-"), "{view}");
        let labels = info(&uuid(i));
        assert_eq!(labels["name"], format!("simgpu H200 MIG {profile}"));
        assert_eq!(labels["mig_profile"], profile);
        assert_eq!(labels["parent_uuid"], uuid(0));
    }
    let gpu1 = info(&uuid(4));
    assert_eq!((gpu1["name"].as_str(), gpu1["parent_uuid"].as_str()), ("simgpu H200", ""));
    for u in (0..5).map(uuid) {
        assert_eq!(page.value("gpuslice_device_memory_committed_bytes", &[("uuid", &u)]), Some(0.0), "{u}");
    }
    assert_eq!((jobs(&page, "waiting"), jobs(&page, "running")), (Some(0.0), Some(0.0)));
    assert_eq!(page.types.get("gpuslice_queue_wait_seconds").map(String::as_str), Some("histogram"));
    assert_eq!(waits_counted(&page), 0.0);

    // a: 1 GiB, binpacked onto the 1 GiB instance. b: 6 GiB, only GPU 1
    // has room. c: 6 GiB more, waits for b.
    let mut a = submit(&sim, &["--memory", "1GiB", "--name", "a"]);
    assert_eq!(a.wait_for("visible"), uuid(3));
    let mut b = submit(&sim, &["--memory", "6GiB", "--name", "b"]);
    assert_eq!(b.wait_for("visible"), uuid(4));
    let mut c = submit(&sim, &["--memory", "6GiB", "--name", "c", "--priority", "7"]);
    let page =
        monitor.metrics_until("one job waiting and two running", |m| jobs(m, "waiting") == Some(1.0) && jobs(m, "running") == Some(2.0));
    assert_eq!(waits_counted(&page), 2.0, "a and b were admitted");
    assert_eq!(page.value("gpuslice_queue_wait_seconds_count", &[("priority", "0")]), Some(2.0));
    assert_eq!(page.value("gpuslice_queue_wait_seconds_bucket", &[("priority", "0"), ("le", "+Inf")]), Some(2.0));
    // The committed bytes are the running jobs' caps, as `gpuslice devices` counts them.
    let committed = [0.0, 0.0, 0.0, GIB as f64, 6.0 * GIB as f64];
    let devices = devices_json(&sim);
    for (i, bytes) in committed.iter().enumerate() {
        assert_eq!(page.value("gpuslice_device_memory_committed_bytes", &[("uuid", &uuid(i))]), Some(*bytes), "device {i}");
        assert_eq!(devices["devices"][i]["memory_committed_bytes"].as_f64(), Some(*bytes), "device {i}: {devices}");
    }

    // b ends: c is admitted, and its wait is counted under its priority.
    b.send_line("done");
    b.wait().assert_success();
    assert_eq!(c.wait_for("visible"), uuid(4));
    let page = monitor.metrics_until("c counted as admitted", |m| waits_counted(m) == 3.0);
    assert_eq!(page.value("gpuslice_queue_wait_seconds_count", &[("priority", "7")]), Some(1.0));
    let waited = page.value("gpuslice_queue_wait_seconds_sum", &[("priority", "7")]).unwrap();
    assert!(waited > 0.0, "c waited for b: {waited}");
    let page = monitor.metrics_until("no job waiting", |m| jobs(m, "waiting") == Some(0.0) && jobs(m, "running") == Some(2.0));
    assert_eq!(page.value("gpuslice_device_memory_committed_bytes", &[("uuid", &uuid(4))]), Some(6.0 * GIB as f64));

    // Every job over: nothing committed, nothing queued, nothing counted twice.
    for job in [&mut a, &mut c] {
        job.send_line("done");
    }
    a.wait().assert_success();
    c.wait().assert_success();
    let page = monitor.metrics_until("nothing committed", |m| {
        (0..5).all(|i| m.value("gpuslice_device_memory_committed_bytes", &[("uuid", &uuid(i))]) == Some(0.0))
    });
    assert_eq!((jobs(&page, "waiting"), jobs(&page, "running")), (Some(0.0), Some(0.0)));
    assert_eq!(waits_counted(&page), 3.0);
    monitor.stop();
}

/// Without NVML the monitor cannot see the GPUs, so it admits nothing:
/// the job waits, says why, and is counted as waiting.
#[test]
fn without_nvml_there_is_no_device_info_and_the_queue_admits_nothing() {
    let sim = sim();
    let monitor = Monitor::start(&sim, MonitorOptions { nvml: false, ..MonitorOptions::default() });
    let mut a = submit(&sim, &["--memory", "1GiB", "--name", "a"]);
    let page = monitor.metrics_until("a waiting", |m| jobs(m, "waiting") == Some(1.0));
    assert_eq!(page.value("gpuslice_nvml_available", &[]), Some(0.0));
    assert_eq!(page.types.get("gpuslice_device_info").map(String::as_str), Some("gauge"), "declared, with no series");
    assert!(page.find("gpuslice_device_info", &[]).is_empty(), "{page:#?}");
    assert_eq!((jobs(&page, "running"), waits_counted(&page)), (Some(0.0), 0.0));
    assert!(!a.has_printed("started"));
    // The client says why once it reads the board, which may be after
    // the monitor counted the job as waiting.
    a.wait_for_stderr("the monitor has no NVML");
    let out = a.kill9();
    assert!(!out.stdout.contains("started"), "{out}");
    monitor.stop();
}
