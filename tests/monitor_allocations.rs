//! The one local path (`gpuslice tenant admit|release|list`, the monitor's
//! control socket): an allocation becomes a monitor-owned tenant whose caps
//! are in place before its first process starts, which no word of its
//! processes can raise, which no other user can take, and which is gone,
//! with everything it held, once it is released and its processes end.

#[path = "support/ledger_view.rs"]
mod ledger_view;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{compile_c, poll, Sim};
use monitor_support::{gpuslice_command, Monitor, MonitorOptions};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

const OWNER_UID: u32 = 1000;
const OTHER_UID: u32 = 1001;
const GIB: u64 = 1 << 30;

/// A simulated host of two 4 GiB devices, shared by every user, with its monitor.
fn host(layout: &str) -> (Sim, Monitor) {
    let sim = Sim::new().devices(2).memory("4GiB").context_memory("64MiB").shim();
    sim.share_the_gpu();
    let options = MonitorOptions { args: vec!["--layout".into(), layout.into()], ..Default::default() };
    let monitor = Monitor::start(&sim, options);
    (sim, monitor)
}

/// `gpuslice tenant ARGS --dir <the test's ledger directory>`.
fn tenant(sim: &Sim, args: &[&str]) -> gpuslice_tests::Output {
    let mut cmd = gpuslice_command(sim);
    cmd.arg("tenant").args(args).arg("--dir").arg(sim.ledger_dir());
    sim.run(&mut cmd)
}

fn json(out: &gpuslice_tests::Output) -> serde_json::Value {
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not one JSON answer ({e}):\n{out}"))
}

/// `memctl` as `uid`, a process of `tenant` in `ledger_dir`.
fn memctl_as(sim: &Sim, uid: u32, tenant: &str, ledger_dir: &Path) -> std::process::Command {
    let mut cmd = sim.as_user(uid, uid, &[], compile_c("memctl"));
    cmd.env("GPUSLICE_TENANT", tenant).env("GPUSLICE_DIR", ledger_dir);
    cmd
}

#[test]
fn an_admitted_tenant_is_capped_from_its_first_process_and_only_its_owner_opens_it() {
    let (sim, monitor) = host("flat");
    let owner = OWNER_UID.to_string();
    let out = tenant(
        &sim,
        &["admit", "slurm-7", "--device", "0", "--memory", "1GiB", "--share", "25", "--owner-uid", &owner, "--label", "origin=slurm"],
    );
    out.assert_success();
    // Answered only once the ledger holds the caps: no round to wait for.
    let ledger_path = sim.ledger_dir().join("slurm-7.ledger");
    assert_eq!(out.get("ledger"), ledger_path.to_str().unwrap(), "{out}");
    assert_eq!(out.get("state"), "admitted");
    let meta = std::fs::metadata(&ledger_path).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (OWNER_UID, 0o600), "the ledger is its owner's alone");
    let ledger = ledger_view::open(&sim.ledger_dir(), "slurm-7");
    let caps: Vec<u64> = ledger.devices().iter().map(|d| ledger.memory_limit_bytes(d.index)).collect();
    assert_eq!(caps, vec![GIB, 0], "1 GiB on the allocated device, nothing on the other");
    drop(ledger);
    // Where it came from is on /metrics, to join with the tenant's series.
    monitor.metrics_until("the allocation's info series", |m| {
        m.value("gpuslice_tenant_allocation_info", &[("tenant", "slurm-7"), ("state", "admitted"), ("origin", "slurm")]) == Some(1.0)
    });

    // Its process, lying about its cap, sees 1 GiB as the device and gets no more.
    let mut cmd = memctl_as(&sim, OWNER_UID, "slurm-7", &sim.ledger_dir());
    cmd.env("GPUSLICE_MEMORY_LIMIT", "3GiB").env("CUDA_DEVICE_MEMORY_LIMIT", "3g");
    cmd.args(["init", "ctx", "info", "alloc:a:free", "alloc:past:64M", "hold"]);
    let mut running = sim.spawn(&mut cmd);
    running.wait_for("ready");
    let out = tenant(&sim, &["list", "--json"]);
    out.assert_success();
    let listed = json(&out);
    let entry = &listed["tenants"][0];
    assert_eq!(entry["tenant"], "slurm-7", "{listed}");
    assert_eq!(entry["live_processes"], 1, "{listed}");
    assert_eq!(entry["labels"]["origin"], "slurm", "{listed}");

    // Another user cannot be this tenant.
    let mut other = memctl_as(&sim, OTHER_UID, "slurm-7", &sim.ledger_dir());
    other.args(["init", "ctx", "alloc:x:1M"]);
    sim.run(&mut other).assert_fails_closed("x", &["slurm-7"]);

    // Released while its process lives: it keeps the caps it runs under.
    let out = tenant(&sim, &["release", "slurm-7", "--json"]);
    out.assert_success();
    let released = json(&out);
    assert_eq!(released["state"], "released", "{released}");
    assert_eq!(released["live_processes"], 1, "{released}");
    assert!(released["held_bytes"].as_u64().unwrap() >= GIB - 64 * 1024 * 1024, "{released}");
    assert_eq!(ledger_view::memory_limit_bytes(&sim.ledger_dir(), "slurm-7", 0), GIB);
    running.close_stdin();
    let out = running.wait();
    out.assert_rc("init", 0).assert_rc("ctx", 0).assert_rc("a", 0).assert_rc("past", 2);
    assert_eq!(out.u64("info.total"), GIB, "{out}");
    // Once its process is gone, so is its ledger, and nothing is left listed.
    poll::until("the released tenant's ledger removed", || !ledger_path.exists());
    let listed = json(&tenant(&sim, &["list", "--json"]));
    assert_eq!(listed["tenants"].as_array().map(Vec::len), Some(0), "{listed}");
    monitor.metrics_until("no allocation left on /metrics", |m| m.find("gpuslice_tenant_allocation_info", &[]).is_empty());
    drop(monitor);
}

#[test]
fn a_file_another_user_put_under_an_allocated_name_goes_aside() {
    let (sim, monitor) = host("flat");
    // Another user becomes tenant slurm-8 first, with its own ledger.
    let mut squat = memctl_as(&sim, OTHER_UID, "slurm-8", &sim.ledger_dir());
    squat.args(["init", "ctx", "alloc:a:1M"]);
    sim.run(&mut squat).assert_rc("a", 0);
    let path = sim.ledger_dir().join("slurm-8.ledger");
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), OTHER_UID);

    let owner = OWNER_UID.to_string();
    tenant(&sim, &["admit", "slurm-8", "--device", "0", "--memory", "512MiB", "--owner-uid", &owner]).assert_success();
    assert_eq!(std::fs::metadata(&path).unwrap().uid(), OWNER_UID, "the allocated tenant's ledger is its owner's");
    let aside = std::fs::read_dir(sim.ledger_dir())
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with(".slurm-8.ledger.moved-aside"));
    assert!(aside, "the squatter's ledger was moved aside");
    // The squatter cannot use the name any more; the owner gets its cap.
    let mut again = memctl_as(&sim, OTHER_UID, "slurm-8", &sim.ledger_dir());
    again.args(["init", "ctx", "alloc:a:1M"]);
    sim.run(&mut again).assert_fails_closed("a", &["slurm-8"]);
    let mut owner_cmd = memctl_as(&sim, OWNER_UID, "slurm-8", &sim.ledger_dir());
    owner_cmd.args(["init", "ctx", "info", "alloc:a:600M"]);
    let out = sim.run(&mut owner_cmd);
    out.assert_rc("a", 2);
    assert_eq!(out.u64("info.total"), 512 << 20, "{out}");
    drop(monitor);
}

#[test]
fn what_cannot_be_given_is_refused_with_the_reason() {
    let (sim, monitor) = host("flat");
    let refused = |args: &[&str], says: &str| {
        let out = tenant(&sim, args);
        assert_eq!(out.code(), Some(1), "{out}");
        assert!(out.stderr.contains(says), "expected {says:?}:\n{out}");
    };
    refused(&["admit", "a", "--device", "0", "--memory", "5GiB"], "more than the device's 4.0 GiB");
    refused(&["admit", "a", "--device", "7"], "no device 7");
    refused(&["admit", "a", "--device", "0", "--share", "60", "--limit", "30"], "above the limit");
    tenant(&sim, &["admit", "a", "--device", "0", "--memory", "3GiB", "--share", "75"]).assert_success();
    refused(&["admit", "b", "--device", "0", "--share", "30"], "add up to 105%");
    refused(&["admit", "b", "--device", "0", "--memory", "2GiB"], "add up to 5.0 GiB");
    // Usage mistakes are found before the monitor is asked.
    let out = tenant(&sim, &["admit", "b", "--device", "0", "--memory", "1=1GiB"]);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("not one of --device"), "{out}");
    // Only root or the monitor's user reaches the socket.
    let mut cmd = sim.as_user(OWNER_UID, OWNER_UID, &[], gpuslice_tests::gpuslice_bin());
    cmd.env_remove("LD_PRELOAD").args(["tenant", "admit", "mine", "--device", "0", "--dir"]).arg(sim.ledger_dir());
    let out = sim.run(&mut cmd);
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(out.stderr.contains("only root or the monitor's own user"), "{out}");
    drop(monitor);
}

#[test]
fn allocations_outlive_a_monitor_restart() {
    let (sim, monitor) = host("flat");
    tenant(&sim, &["admit", "job-1", "--device", "1", "--memory", "256MiB", "--share", "50"]).assert_success();
    monitor.stop();
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let listed = json(&tenant(&sim, &["list", "--json"]));
    assert_eq!(listed["tenants"][0]["tenant"], "job-1", "{listed}");
    // A process lying about its cap, on the allocated device, gets the allocation's.
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_TENANT", "job-1").env("GPUSLICE_MEMORY_LIMIT", "2GiB").env("CUDA_VISIBLE_DEVICES", "1");
    cmd.args(["init", "ctx", "info", "alloc:a:300M"]);
    let out = sim.run(&mut cmd);
    out.assert_rc("a", 2);
    assert_eq!(out.u64("info.total"), 256 << 20, "{out}");
    drop(monitor);
}

#[test]
fn in_the_tenant_dirs_layout_each_tenant_has_its_directory_until_it_is_released() {
    let (sim, monitor) = host("tenant-dirs");
    for round in 0..2 {
        let out = tenant(&sim, &["admit", "ns1-claim-a", "--device", "0", "--memory", "1GiB", "--share", "30"]);
        out.assert_success();
        let dir = sim.ledger_dir().join("tenants").join("ns1-claim-a");
        assert_eq!(out.get("ledger_dir"), dir.to_str().unwrap(), "{out}");
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o7777, 0o1777);
        // A pod's process sees only its own directory as GPUSLICE_DIR (a
        // pod reaches it through its bind mount; root here, since only root
        // reaches it through the private `tenants` directory).
        let mut cmd = sim.c("memctl");
        cmd.env("GPUSLICE_TENANT", "ns1-claim-a").env("GPUSLICE_DIR", &dir);
        cmd.args(["init", "ctx", "info", "alloc:a:2G"]);
        let out = sim.run(&mut cmd);
        out.assert_rc("ctx", 0).assert_rc("a", 2);
        assert_eq!(out.u64("info.total"), GIB, "round {round}: {out}");
        // The arbiter listens in the directory (again, after it was made anew).
        poll::until("the arbiter's socket in the tenant's directory", || dir.join(".arbiter.sock").exists());
        let out = tenant(&sim, &["release", "ns1-claim-a"]);
        out.assert_success();
        poll::until("the released tenant's directory removed", || !dir.exists());
    }
    drop(monitor);
}

/// On a node whose tenants all come from a scheduler (`other_tenants =
/// "refuse"`), a job that names a tenant of its own to get from under its
/// allocation is found and, in kill mode, killed; the admitted tenant's own
/// process runs on.
#[test]
fn a_process_that_names_a_tenant_of_its_own_is_killed_where_only_allocations_run() {
    let sim = Sim::new().devices(2).memory("4GiB").context_memory("64MiB").shim();
    sim.share_the_gpu();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "on_violation = \"kill\"\nviolation_grace = \"1s\"\nother_tenants = \"refuse\"\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let owner = OWNER_UID.to_string();
    tenant(&sim, &["admit", "slurm-9", "--device", "0", "--memory", "1GiB", "--owner-uid", &owner]).assert_success();

    let mut allocated = memctl_as(&sim, OWNER_UID, "slurm-9", &sim.ledger_dir());
    let mut allocated = sim.spawn(allocated.args(["init", "ctx", "alloc:a:512M", "hold"]));
    allocated.wait_for("ready");
    // The same user, as a tenant nobody admitted, with a cap of its own choosing.
    let mut escape = memctl_as(&sim, OWNER_UID, "my-own", &sim.ledger_dir());
    escape.env("GPUSLICE_MEMORY_LIMIT", "4GiB");
    let mut escape = sim.spawn(escape.args(["init", "ctx", "alloc:a:2G", "hold"]));
    escape.wait_for("ready");
    monitor.metrics_until("the ungoverned tenant found", |m| {
        m.value("gpuslice_violations_total", &[("kind", "ungoverned_tenant")]).unwrap_or(0.0) >= 1.0
    });
    let out = escape.wait();
    assert_eq!(out.status.and_then(|s| s.signal()), Some(9), "the escaping process was killed\n{out}");
    // The allocated tenant's process was judged as long and is untouched.
    monitor.wait_rounds(2);
    allocated.send_line("go");
    let out = allocated.wait();
    out.assert_success().assert_rc("a", 0);
    drop(monitor);
}
