//! `gpuslice devices`: one row per simulated GPU, with the memory committed
//! on it by capped live tenants and running queue jobs.

use gpuslice_tests::{gpuslice_bin, poll, simgpu_lib, Sim, GIB, MIB};
use serde_json::Value;
use std::process::Command;

/// `gpuslice` with this test's environment, and no shim of its own.
fn gpuslice(sim: &Sim) -> Command {
    let mut cmd = sim.command(gpuslice_bin());
    cmd.env_remove("LD_PRELOAD");
    cmd
}

fn devices_json(sim: &Sim) -> Value {
    let out = sim.run(gpuslice(sim).arg("devices").arg("--dir").arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()).arg("--json"));
    out.assert_success();
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("devices --json is not JSON: {e}\n{out}"))
}

fn committed(view: &Value) -> Vec<u64> {
    view["devices"].as_array().unwrap().iter().map(|d| d["memory_committed_bytes"].as_u64().unwrap()).collect()
}

fn tenants(view: &Value, device: usize) -> Vec<String> {
    view["devices"][device]["tenants"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_string()).collect()
}

fn sim() -> Sim {
    Sim::new().devices(2).memory("4GiB").context_memory("64MiB")
}

#[test]
fn two_devices_and_the_caps_of_live_tenants_committed_on_them() {
    let sim = sim();
    let idle = devices_json(&sim);
    assert_eq!(idle["nvml"], true);
    let devices = idle["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    for (index, d) in devices.iter().enumerate() {
        assert_eq!(d["index"], index as u64);
        assert!(d["uuid"].as_str().unwrap().starts_with("GPU-"), "{d}");
        assert_eq!(d["name"], "simgpu H200");
        assert_eq!(d["memory_total_bytes"].as_u64(), Some(4 * GIB));
        assert_eq!(d["memory_used_bytes"].as_u64(), Some(0));
        assert_eq!(d["memory_free_bytes"].as_u64(), Some(4 * GIB));
        // What NVML answers (simgpu: an H200, MIG off).
        assert_eq!((d["compute_capability"].as_str(), d["mig_mode"].as_str()), (Some("9.0"), Some("disabled")), "{d}");
    }
    assert_eq!(committed(&idle), [0, 0]);
    let uuid_1 = devices[1]["uuid"].as_str().unwrap().to_string();

    // team-a sees both devices with a 1 GiB cap and works on device 0: its
    // cap is committed there only. team-b sees only device 1, where its
    // context is.
    let mut a_cmd = sim.c("memctl");
    a_cmd.env("LD_PRELOAD", gpuslice_tests::shim_lib()).env("GPUSLICE_DIR", sim.ledger_dir());
    a_cmd.env("GPUSLICE_TENANT", "team-a").env("GPUSLICE_MEMORY_LIMIT", "1GiB");
    let mut a = sim.spawn(a_cmd.args(["init", "ctx", "alloc:a:100M", "hold"]));
    a.wait_for("ready");
    let mut b_cmd = sim.c("memctl");
    b_cmd.env("LD_PRELOAD", gpuslice_tests::shim_lib()).env("GPUSLICE_DIR", sim.ledger_dir());
    b_cmd.env("GPUSLICE_TENANT", "team-b").env("GPUSLICE_MEMORY_LIMIT", "512MiB").env("CUDA_VISIBLE_DEVICES", &uuid_1);
    let mut b = sim.spawn(b_cmd.args(["init", "ctx", "hold"]));
    b.wait_for("ready");

    let busy = devices_json(&sim);
    assert_eq!(committed(&busy), [GIB, 512 * MIB]);
    assert_eq!(tenants(&busy, 0), ["team-a"]);
    assert_eq!(tenants(&busy, 1), ["team-a", "team-b"]);
    assert_eq!(busy["devices"][0]["memory_used_bytes"].as_u64(), Some((64 + 100) * MIB));
    assert_eq!(busy["devices"][1]["memory_used_bytes"].as_u64(), Some(64 * MIB));

    // A tenant's commitment ends with its processes.
    a.wait().assert_success();
    let after = poll::fetch_until("team-a's cap to be released", || devices_json(&sim), |v| committed(v) == [0, 512 * MIB]);
    assert_eq!(tenants(&after, 1), ["team-b"]);
    b.wait().assert_success();
}

#[test]
fn the_table_shows_what_the_driver_says() {
    let sim = sim();
    let out = sim.run(gpuslice(&sim).arg("devices").arg("--dir").arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()));
    out.assert_success();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two devices\n{out}");
    for column in ["INDEX", "UUID", "NAME", "CC", "TOTAL", "USED", "FREE", "UTIL", "MIG", "COMMITTED", "TENANTS", "JOBS"] {
        assert!(lines[0].split_whitespace().any(|c| c == column), "no {column} column\n{out}");
    }
    for row in &lines[1..] {
        assert!(row.contains(" 9.0 ") && row.contains(" disabled ") && row.contains("4.0 GiB"), "{row}");
    }
}

#[test]
fn without_nvml_one_line_says_what_cannot_be_known() {
    let sim = sim();
    let mut tenant = sim.c("memctl");
    tenant.env("LD_PRELOAD", gpuslice_tests::shim_lib()).env("GPUSLICE_DIR", sim.ledger_dir());
    tenant.env("GPUSLICE_TENANT", "team-a").env("GPUSLICE_MEMORY_LIMIT", "1GiB");
    let mut a = sim.spawn(tenant.args(["init", "ctx", "hold"]));
    a.wait_for("ready");
    let out = sim.run(gpuslice(&sim).arg("devices").arg("--dir").arg(sim.ledger_dir()).arg("--no-nvml").arg("--json"));
    out.assert_success();
    let notes: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(notes.len(), 1, "one line\n{out}");
    assert!(notes[0].contains("without NVML") && notes[0].contains("MIG mode are unknown"), "{out}");
    let view: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(view["nvml"], false);
    // What the ledgers know stays: the devices and the committed caps (its
    // cap on device 0, where its context is; nothing on device 1).
    assert_eq!(committed(&view), [GIB, 0]);
    assert!(view["devices"][0]["memory_used_bytes"].is_null());
    a.wait().assert_success();
}
