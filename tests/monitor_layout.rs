//! Ledger layouts: with `--layout tenant-dirs` each tenant's ledger lives in
//! its own directory (`<dir>/tenants/<tenant>/`), which is all a tenant's pod
//! mounts as its `GPUSLICE_DIR`. The monitor creates the directories of the
//! tenants it configures, watches ledgers in both layouts, and refuses a
//! ledger placed under another tenant's name.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{cu, poll, Sim, MIB};
use monitor_support::*;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

fn sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("2GiB").tenant("team-a")
}

fn mode(path: &PathBuf) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o7777
}

#[test]
fn tenant_directories_and_flat_ledgers_are_watched_together() {
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nmemory = \"512MiB\"\n").unwrap();
    let monitor = Monitor::start(
        &sim,
        MonitorOptions { config: Some(config), args: vec!["--layout".into(), "tenant-dirs".into()], ..Default::default() },
    );
    let tenants = sim.ledger_dir().join("tenants");
    let team_a_dir = tenants.join("team-a");
    assert_eq!(mode(&tenants), 0o700, "only root may enter the tenants' directory");
    assert_eq!(mode(&team_a_dir), 0o1777, "every uid of the tenant may create its ledger");
    assert!(team_a_dir.join("team-a.ledger").is_file(), "the configured tenant's ledger is made in its directory");
    assert!(!sim.ledger_dir().join("team-a.ledger").exists(), "and not in the flat layout");

    // team-a runs as its pod would: its GPUSLICE_DIR is its own directory.
    let mut a_cmd = sim.c("memctl");
    a_cmd.env("GPUSLICE_DIR", &team_a_dir).args(["init", "ctx", "info", "alloc:a:256M", "alloc:big:400M", "hold"]);
    let mut a = sim.spawn(&mut a_cmd);
    // team-b uses the flat layout (single host, no isolation).
    let mut b_cmd = sim.c("memctl");
    b_cmd.env("GPUSLICE_TENANT", "team-b").args(["init", "ctx", "alloc:b:128M", "hold"]);
    let mut b = sim.spawn(&mut b_cmd);
    a.wait_for("ready");
    b.wait_for("ready");
    assert_eq!(a.wait_for("info.total"), (512 * MIB).to_string(), "the configured cap reached the pod's ledger");
    assert_eq!(a.wait_for("big"), cu::OUT_OF_MEMORY.to_string());
    assert!(sim.ledger_dir().join("team-b.ledger").is_file());

    let status = status_json(&sim);
    let a_status = tenant(&status, "team-a").unwrap_or_else(|| panic!("{status:#}"));
    assert_eq!(a_status["processes"][0]["pid"].as_u64(), Some(a.pid() as u64), "{status:#}");
    assert_eq!(a_status["devices"][0]["memory_used_bytes"].as_u64(), Some((256 + 64) * MIB));
    assert!(tenant(&status, "team-b").is_some(), "{status:#}");
    let metrics = monitor.metrics_until("the monitor to watch the flat ledger", |metrics| {
        metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-b")]) == Some(((128 + 64) * MIB) as f64)
    });
    assert_eq!(metrics.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", "team-a")]), Some((512 * MIB) as f64));

    // Reclaim works in a tenant's directory.
    let _ = a.kill9();
    poll::until("the killed process's memory to be returned", || tenant_used_bytes(&sim, "team-a") == Some(0));
    b.wait().assert_success();
    let log = monitor.stop();
    assert!(log.stderr.contains("tenant-dirs layout"), "{log}");
}

#[test]
fn a_ledger_under_another_tenants_name_is_not_watched() {
    let sim = sim();
    let monitor = Monitor::start(&sim, MonitorOptions { args: vec!["--layout".into(), "tenant-dirs".into()], ..Default::default() });
    let team_a_dir = sim.ledger_dir().join("tenants").join("team-a");
    std::fs::create_dir_all(&team_a_dir).unwrap();
    // A process in team-a's pod claims to be team-b: its ledger lands in
    // team-a's directory, where the monitor does not take it for team-b's.
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_DIR", &team_a_dir).env("GPUSLICE_TENANT", "team-b").args(["init", "ctx", "alloc:x:100M", "hold"]);
    let mut impostor = sim.spawn(&mut cmd);
    impostor.wait_for("ready");
    assert!(team_a_dir.join("team-b.ledger").is_file());
    // An honest team-a process next to it is watched.
    let mut honest_cmd = sim.c("memctl");
    honest_cmd.env("GPUSLICE_DIR", &team_a_dir).args(["init", "ctx", "alloc:a:100M", "hold"]);
    let mut honest = sim.spawn(&mut honest_cmd);
    honest.wait_for("ready");

    let metrics = monitor.metrics_until("the honest process watched and the impostor untracked", |metrics| {
        metrics.value("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-a")]) == Some(((100 + 64) * MIB) as f64)
            && !metrics.find("gpuslice_untracked_process_memory_bytes", &[]).is_empty()
    });
    assert!(metrics.find("gpuslice_tenant_memory_used_bytes", &[("tenant", "team-b")]).is_empty(), "{metrics:#?}");
    // Its GPU memory is nobody's: it shows as untracked, i.e. a bypass.
    let untracked = metrics.find("gpuslice_untracked_process_memory_bytes", &[]);
    assert_eq!(untracked.len(), 1, "{untracked:#?}");
    assert_eq!(untracked[0].labels["pid"], impostor.pid().to_string());
    let status = status_json(&sim);
    assert!(tenant(&status, "team-b").is_none(), "{status:#}");
    impostor.wait().assert_success();
    honest.wait().assert_success();
}

#[test]
fn a_symlink_in_place_of_a_ledger_is_not_followed() {
    let sim = sim();
    // team-b's real ledger, flat.
    sim.run(sim.c("memctl").env("GPUSLICE_TENANT", "team-b").args(["init", "ctx"])).assert_success();
    let team_b = sim.ledger_dir().join("team-b.ledger");
    assert!(team_b.is_file());
    // team-a's directory holds a link to it, in place of its own ledger.
    let team_a_dir = sim.ledger_dir().join("tenants").join("team-a");
    std::fs::create_dir_all(&team_a_dir).unwrap();
    std::os::unix::fs::symlink(&team_b, team_a_dir.join("team-a.ledger")).unwrap();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nmemory = \"100MiB\"\n").unwrap();
    let monitor = Monitor::start(
        &sim,
        MonitorOptions { config: Some(config), args: vec!["--layout".into(), "tenant-dirs".into()], ..Default::default() },
    );
    // The first round met the link before `ready`; two more pass it by too.
    monitor.wait_rounds(2);
    let status = status_json(&sim);
    let b = tenant(&status, "team-b").unwrap_or_else(|| panic!("{status:#}"));
    assert_ne!(b["devices"][0]["memory_limit_bytes"].as_u64(), Some(100 * MIB), "team-a's cap went through the link: {status:#}");
    assert!(tenant(&status, "team-a").is_none(), "{status:#}");
    let log = monitor.stop();
    assert!(log.stderr.contains("cannot apply the configuration of tenant team-a"), "{log}");
}

/// A monitor started by a user who is not root is that user's private
/// monitor: the directory it makes (here the user's fallback
/// `/tmp/gpuslice-<uid>`) is 0700, as that user's own processes require of
/// it, and they run under it, capped. Before, it made the directory 1777
/// and every one of them was refused. Pointed at a root's directory, it
/// refuses to start, in one line saying what it needs.
#[test]
fn a_monitor_that_is_not_root_is_its_users_private_monitor_or_refuses() {
    const UID: u32 = 43_117;
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("mine");
    sim.share_the_gpu();
    let private = PathBuf::from(format!("/tmp/gpuslice-{UID}"));
    let _ = std::fs::remove_dir_all(&private);
    let as_user = |program: PathBuf, dir: &PathBuf| {
        let mut cmd = sim.as_user(UID, UID, &[], program);
        cmd.env("GPUSLICE_DIR", dir).env_remove("XDG_RUNTIME_DIR");
        cmd
    };
    let monitor_args = ["monitor", "--listen", "127.0.0.1:0", "--no-history", "--nvml-lib"];

    // The root's directory of this test: refused, in one line.
    let mut refused = as_user(gpuslice_tests::gpuslice_bin(), &sim.ledger_dir());
    refused.env_remove("LD_PRELOAD").args(monitor_args).arg(gpuslice_tests::simgpu_lib());
    let out = sim.run(&mut refused);
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(out.stderr.contains("is root's, and this monitor runs as uid 43117") && out.stderr.contains("--dir"), "{out}");

    let mut monitor = as_user(gpuslice_tests::gpuslice_bin(), &private);
    monitor.env_remove("LD_PRELOAD").args(monitor_args).arg(gpuslice_tests::simgpu_lib());
    let mut monitor = sim.spawn(&mut monitor);
    monitor.wait_for("ready");
    assert_eq!(mode(&private), 0o700, "a private monitor's directory is its user's alone");
    let mut app = as_user(gpuslice_tests::compile_c("memctl"), &private);
    app.args(["init", "ctx", "alloc:a:100M", "alloc:big:2G"]);
    let out = sim.run(&mut app);
    out.assert_rc("a", 0).assert_rc("big", 2);
    let mut status = as_user(gpuslice_tests::gpuslice_bin(), &private);
    status.env_remove("LD_PRELOAD").args(["status", "--json", "--nvml-lib"]).arg(gpuslice_tests::simgpu_lib());
    let out = sim.run(&mut status);
    out.assert_success();
    assert!(out.stdout.contains("\"mine\""), "the private monitor's status shows its user's tenant:\n{out}");
    monitor.signal("TERM");
    monitor.wait().assert_success();
    let _ = std::fs::remove_dir_all(&private);
}
