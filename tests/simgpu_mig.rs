//! MIG on the simulated GPU: `SIMGPU_MIG` partitions device 0 of two into
//! three H200 instances (3g.71gb, 2g.35gb, 1g.18gb), each an eighth of
//! `SIMGPU_MEMORY` per memory slice. NVML answers the MIG queries, CUDA
//! enumerates the instances in their parent's place beside the whole
//! device 1 (the MIG user guide's rules for R570+ drivers, see
//! `simgpu/src/visible.rs`), `CUDA_VISIBLE_DEVICES` selects an instance by
//! its `MIG-` UUID, and the shim caps a tenant inside one instance.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{cu, Output, Running, Sim, GIB, MIB};
use monitor_support::*;

const PARTITION: &str = "0=3g.71gb,2g.35gb,1g.18gb";
/// The instances' memory on an 8GiB device: 4, 2 and 1 memory slices.
const INSTANCE_BYTES: [u64; 3] = [4 * GIB, 2 * GIB, GIB];
const CONTEXT_BYTES: u64 = 64 * MIB;

fn sim() -> Sim {
    Sim::new().devices(2).memory("8GiB").context_memory("64MiB").env("SIMGPU_MIG", PARTITION)
}

fn nvml(sim: &Sim) -> Output {
    let out = sim.run(&mut sim.py("mig_nvml.py"));
    out.assert_success();
    out
}

fn cuda(sim: &Sim, visible: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = sim.py("mig_cuda.py");
    cmd.args(args);
    if let Some(v) = visible {
        cmd.env("CUDA_VISIBLE_DEVICES", v);
    }
    let out = sim.run(&mut cmd);
    out.assert_success();
    out
}

/// The `MIG-…` UUIDs of device 0's instances, in NVML index order.
fn mig_uuids(out: &Output) -> Vec<String> {
    (0..3).map(|k| out.get(&format!("dev.0.mig.{k}.uuid")).to_string()).collect()
}

/// A UUID without its `GPU-`/`MIG-` prefix: what `cuDeviceGetUuid` gives.
fn hex(uuid: &str) -> &str {
    &uuid[4..]
}

/// Starts a process that holds 100MiB on ordinal 0 until its stdin closes.
fn hold(sim: &Sim, visible: &str) -> Running {
    let mut cmd = sim.py("mig_cuda.py");
    cmd.args(["alloc", "hold"]).env("CUDA_VISIBLE_DEVICES", visible);
    let mut running = sim.spawn(&mut cmd);
    running.wait_for("ready");
    running
}

#[test]
fn nvml_reports_each_instance_with_its_memory_uuid_and_processes() {
    let sim = sim();
    let out = nvml(&sim);
    assert_eq!(out.i64("count"), 2, "a partitioned GPU stays one NVML device\n{out}");
    assert_eq!((out.get("dev.0.mig_mode"), out.get("dev.1.mig_mode")), ("1/1", "0/0"), "{out}");
    assert_eq!((out.i64("dev.0.max_mig"), out.i64("dev.1.max_mig")), (7, 0), "{out}");
    assert_eq!(out.u64("dev.0.total"), 8 * GIB, "the parent keeps its whole memory\n{out}");
    let parent = out.get("dev.0.uuid").to_string();
    let uuids = mig_uuids(&out);
    for (k, (profile, bytes)) in ["3g.71gb", "2g.35gb", "1g.18gb"].iter().zip(INSTANCE_BYTES).enumerate() {
        let key = |name: &str| format!("dev.0.mig.{k}.{name}");
        assert!(uuids[k].starts_with("MIG-") && uuids[k].len() == 40, "{}\n{out}", uuids[k]);
        assert_eq!(out.get(&key("name")), format!("simgpu H200 MIG {profile}"), "{out}");
        assert_eq!(out.i64(&key("is_mig")), 1, "{out}");
        assert_eq!(out.get(&key("parent")), parent, "{out}");
        assert_eq!((out.i64(&key("gi")), out.i64(&key("ci"))), (k as i64 + 1, 0), "{out}");
        assert_eq!((out.u64(&key("total")), out.u64(&key("used"))), (bytes, 0), "{out}");
        assert_eq!(out.get(&key("by_uuid")), uuids[k], "nvmlDeviceGetHandleByUUID finds a MIG device\n{out}");
    }
    for k in 3..7 {
        assert_eq!(out.get(&format!("dev.0.mig.{k}.error")), "NotFound", "{out}");
    }
    assert_eq!(out.get("dev.0.past_end"), "InvalidArgument", "{out}");
    assert_eq!(out.i64("dev.0.is_mig"), 0, "{out}");
    assert!(uuids[0] != uuids[1] && uuids[1] != uuids[2], "{out}");

    // A process on the 2g instance shows there (context + 100MiB), on its
    // parent with the instance's ids, and nowhere else.
    let mut holder = hold(&sim, &uuids[1]);
    let pid = holder.pid();
    let out = nvml(&sim);
    let held = CONTEXT_BYTES + 100 * MIB;
    assert_eq!(out.get(&format!("dev.0.mig.1.proc.{pid}")), format!("{held}/2/0"), "{out}");
    assert_eq!((out.i64("dev.0.mig.0.procs"), out.i64("dev.0.mig.1.procs"), out.i64("dev.0.mig.2.procs")), (0, 1, 0), "{out}");
    assert_eq!(out.u64("dev.0.mig.1.used"), held, "{out}");
    assert_eq!((out.u64("dev.0.mig.0.used"), out.u64("dev.0.mig.2.used")), (0, 0), "{out}");
    assert_eq!(out.get(&format!("dev.0.proc.{pid}")), format!("{held}/2/0"), "{out}");
    assert_eq!(out.u64("dev.0.used"), held, "{out}");
    assert_eq!((out.i64("dev.1.procs"), out.u64("dev.1.used")), (0, 0), "{out}");
    holder.close_stdin();
    holder.wait().assert_success();
}

#[test]
fn cuda_enumerates_the_instances_in_their_gpus_place_beside_the_whole_gpu() {
    let sim = sim();
    let nv = nvml(&sim);
    let uuids = mig_uuids(&nv);
    let whole = nv.get("dev.1.uuid").to_string();
    let out = cuda(&sim, None, &["enum"]);
    out.assert_rc("init", cu::SUCCESS);
    assert_eq!(out.i64("count"), 4, "three instances and the whole GPU\n{out}");
    let expected = [
        ("simgpu H200 MIG 3g.71gb", hex(&uuids[0]), INSTANCE_BYTES[0], 60),
        ("simgpu H200 MIG 2g.35gb", hex(&uuids[1]), INSTANCE_BYTES[1], 32),
        ("simgpu H200 MIG 1g.18gb", hex(&uuids[2]), INSTANCE_BYTES[2], 16),
        ("simgpu H200", hex(&whole), 8 * GIB, 132),
    ];
    for (i, (name, uuid, total, sms)) in expected.iter().enumerate() {
        let key = |k: &str| format!("dev.{i}.{k}");
        assert_eq!(out.get(&key("name")), *name, "{out}");
        assert_eq!(out.get(&key("uuid")), *uuid, "cuDeviceGetUuid is the MIG UUID\n{out}");
        assert_eq!(out.u64(&key("total")), *total, "{out}");
        assert_eq!(out.i64(&key("sms")), *sms, "{out}");
    }

    // Indices and GPU UUIDs of the partitioned GPU stand for its instances.
    let out = cuda(&sim, Some("1,0"), &["enum"]);
    assert_eq!(out.i64("count"), 4, "{out}");
    assert_eq!((out.get("dev.0.uuid"), out.get("dev.1.uuid")), (hex(&whole), hex(&uuids[0])), "{out}");
    let out = cuda(&sim, Some(&format!("{},{}", uuids[2], nv.get("dev.0.uuid"))), &["enum"]);
    // The second entry names the 1g instance again: the list ends there.
    assert_eq!(out.i64("count"), 1, "{out}");
    // The pre-R470 form: MIG-<GPU UUID>/<GPU instance>/<compute instance>.
    let out = cuda(&sim, Some(&format!("MIG-{}/3/0,1", nv.get("dev.0.uuid"))), &["enum"]);
    assert_eq!(out.i64("count"), 2, "{out}");
    assert_eq!((out.get("dev.0.uuid"), out.get("dev.1.uuid")), (hex(&uuids[2]), hex(&whole)), "{out}");
}

#[test]
fn a_mig_uuid_selects_one_instance_whose_memory_ends_at_its_size() {
    let sim = sim();
    let uuids = mig_uuids(&nvml(&sim));
    let out = cuda(&sim, Some(&uuids[1]), &["alloc"]);
    assert_eq!(out.i64("count"), 1, "{out}");
    assert_eq!(out.get("uuid"), hex(&uuids[1]), "{out}");
    assert_eq!(out.u64("total_mem"), INSTANCE_BYTES[1], "{out}");
    assert_eq!(out.u64("info.total"), INSTANCE_BYTES[1], "{out}");
    assert_eq!(out.u64("info.free"), INSTANCE_BYTES[1] - CONTEXT_BYTES, "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("all", cu::SUCCESS).assert_rc("one", cu::OUT_OF_MEMORY);
    // A unique prefix names the instance too.
    let out = cuda(&sim, Some(&uuids[2][..12]), &["alloc"]);
    assert_eq!((out.i64("count"), out.u64("total_mem")), (1, INSTANCE_BYTES[2]), "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("all", cu::SUCCESS).assert_rc("one", cu::OUT_OF_MEMORY);
}

#[test]
fn a_tenant_capped_inside_an_instance_shows_there() {
    // A 1536MiB cap inside the 4GiB instance: the views show the cap.
    let sim = sim().memory_limit("1536MiB").tenant("team-mig");
    let nv = nvml(&sim);
    let uuids = mig_uuids(&nv);
    let out = cuda(&sim, Some(&uuids[0]), &["alloc"]);
    assert_eq!(out.u64("total_mem"), 1536 * MIB, "{out}");
    assert_eq!(out.u64("info.total"), 1536 * MIB, "{out}");
    assert!(out.u64("info.free") <= 1536 * MIB, "free is within the cap\n{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("all", cu::SUCCESS).assert_rc("one", cu::OUT_OF_MEMORY);

    // The same cap inside the 1GiB instance: the instance is smaller.
    let out = cuda(&sim, Some(&uuids[2]), &["alloc"]);
    assert_eq!((out.u64("total_mem"), out.u64("info.total")), (GIB, GIB), "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("all", cu::SUCCESS).assert_rc("one", cu::OUT_OF_MEMORY);

    // A holder in the 3g instance: status puts the tenant on the instance.
    let mut holder = hold(&sim, &uuids[0]);
    let status = status_json(&sim);
    let devices = status["devices"].as_array().expect("a devices array");
    let instance = devices.iter().find(|d| d["uuid"] == uuids[0].as_str()).unwrap_or_else(|| panic!("no {} in {status}", uuids[0]));
    assert_eq!(instance["index"], 0, "{status}");
    assert_eq!(instance["parent_uuid"], nv.get("dev.0.uuid"), "{status}");
    assert_eq!(instance["mig_profile"], "3g.71gb", "{status}");
    assert_eq!(instance["memory_total_bytes"].as_u64(), Some(INSTANCE_BYTES[0]), "{status}");
    let tenant_devices = tenant(&status, "team-mig").expect("the tenant")["devices"].as_array().unwrap().clone();
    let on_instance: Vec<&serde_json::Value> = tenant_devices.iter().filter(|d| d["uuid"] == uuids[0].as_str()).collect();
    assert_eq!(on_instance.len(), 1, "{status}");
    assert_eq!(on_instance[0]["memory_used_bytes"].as_u64(), Some(CONTEXT_BYTES + 100 * MIB), "{status}");
    assert_eq!(on_instance[0]["memory_limit_bytes"].as_u64(), Some(1536 * MIB), "{status}");
    assert_eq!(on_instance[0]["processes"], 1, "{status}");
    assert_eq!(on_instance[0]["driver_memory_used_bytes"].as_u64(), Some(CONTEXT_BYTES + 100 * MIB), "{status}");
    assert!(tenant_devices.iter().all(|d| d["uuid"] != nv.get("dev.0.uuid")), "the partitioned GPU itself holds nothing\n{status}");
    assert_eq!(tenant(&status, "team-mig").unwrap()["processes"][0]["pid"].as_u64(), Some(holder.pid() as u64), "{status}");
    assert!(status["untracked_processes"].as_array().is_none_or(|p| p.is_empty()), "{status}");

    // The table names the instance by its parent's index and its profile.
    let out = sim
        .run(gpuslice_command(&sim).arg("status").arg("--dir").arg(sim.ledger_dir()).arg("--nvml-lib").arg(gpuslice_tests::simgpu_lib()));
    out.assert_success();
    // The table lists the instances after their GPU, in NVML's order, and
    // the tenant's row on the 3g instance names it.
    let names: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("0 ")).map(|l| l.split("  ").next().unwrap_or("")).collect();
    assert_eq!(names, ["0", "0 MIG 3g.71gb", "0 MIG 2g.35gb", "0 MIG 1g.18gb"], "{out}");
    assert!(out.stdout.lines().any(|l| l.starts_with("0 MIG 3g.71gb") && l.contains(&uuids[0])), "{out}");
    assert!(out.stdout.lines().any(|l| l.starts_with("team-mig") && l.contains("0 MIG 3g.71gb") && l.contains("164.0 MiB")), "{out}");

    // The monitor's /metrics put the tenant on the instance too. (Its
    // socket's path holds this test's name, which must stay short.)
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let metrics = monitor.metrics();
    let labels = [("tenant", "team-mig"), ("device", "0"), ("uuid", uuids[0].as_str())];
    assert_eq!(metrics.value("gpuslice_tenant_memory_used_bytes", &labels), Some((CONTEXT_BYTES + 100 * MIB) as f64), "{metrics:#?}");
    assert_eq!(metrics.value("gpuslice_tenant_memory_limit_bytes", &labels), Some((1536 * MIB) as f64), "{metrics:#?}");
    monitor.stop();
    holder.close_stdin();
    holder.wait().assert_success();
}

#[test]
fn the_monitor_caps_by_mig_uuid() {
    // The monitor's file caps the tenant on the 2g instance only; the
    // monitor enters the instances (not their GPU) into its ledger.
    let sim = sim().shim().tenant("team-cfg");
    let nv = nvml(&sim);
    let uuids = mig_uuids(&nv);
    let config = sim.dir().join("monitor.toml");
    std::fs::write(
        &config,
        format!("[tenants.team-cfg]\nmemory = {{ \"{}\" = \"768MiB\" }}\n", uuids[1].to_uppercase().replacen("MIG-", "mig-", 1)),
    )
    .unwrap();
    let _monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let status = status_json(&sim);
    let devices = tenant(&status, "team-cfg").expect("the tenant")["devices"].as_array().unwrap().clone();
    let limit_on = |uuid: &str| devices.iter().find(|d| d["uuid"] == uuid).map(|d| d["memory_limit_bytes"].clone());
    assert_eq!(limit_on(&uuids[1]), Some(serde_json::json!(768 * MIB)), "{status}");
    assert_eq!(limit_on(&uuids[0]), Some(serde_json::Value::Null), "{status}");
    assert_eq!(limit_on(nv.get("dev.0.uuid")), None, "{status}");

    let out = cuda(&sim, Some(&uuids[1]), &["alloc"]);
    assert_eq!((out.u64("total_mem"), out.u64("info.total")), (768 * MIB, 768 * MIB), "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY).assert_rc("all", cu::SUCCESS).assert_rc("one", cu::OUT_OF_MEMORY);
    let out = cuda(&sim, Some(&uuids[0]), &["alloc"]);
    assert_eq!(out.u64("total_mem"), INSTANCE_BYTES[0], "another instance is not capped\n{out}");
}

#[test]
fn a_bad_partition_fails_initialisation_and_names_what_is_accepted() {
    for (value, explains) in [
        ("0=3g.40gb", "1g.18gb, 1g.35gb, 2g.35gb, 3g.71gb, 4g.71gb, 7g.141gb"),
        ("0=4g.71gb,4g.71gb", "at most 1 instance(s) of 4g.71gb"),
        ("0=4g.71gb,3g.71gb,1g.18gb", "8 compute and 9 memory slices"),
        ("2=1g.18gb", "a device index from 0 to 1"),
    ] {
        let sim = Sim::new().devices(2).memory("8GiB").context_memory("64MiB").env("SIMGPU_MIG", value);
        let mut cmd = sim.py("mig_cuda.py");
        cmd.arg("enum");
        let out = sim.run(&mut cmd);
        out.assert_rc("init", cu::INVALID_VALUE);
        assert!(out.stderr.contains("SIMGPU_MIG") && out.stderr.contains(explains), "SIMGPU_MIG={value}\n{out}");
    }
}
