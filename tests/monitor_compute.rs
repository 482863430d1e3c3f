//! The monitor's side of compute limits: a limit the configuration names is
//! written into the tenant's ledger as the monitor's, over whatever the
//! tenant wrote, and shown in /metrics and `gpuslice status`.

#[path = "support/ledger_view.rs"]
mod ledger_view;
#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::Sim;
use monitor_support::{status_json, tenant, Monitor, MonitorOptions};

#[test]
fn a_configured_limit_is_the_monitors_and_is_shown() {
    let sim = Sim::new().memory("4GiB").devices(2);
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nlimit = { 0 = 30, all = 60 }\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let target = |m: &monitor_support::Metrics, device: &str| {
        m.value("gpuslice_tenant_compute_target_ratio", &[("tenant", "team-a"), ("device", device)])
    };
    monitor.metrics_until("team-a's limits", |m| target(m, "0") == Some(0.3) && target(m, "1") == Some(0.6));
    let ledger = ledger_view::open(&sim.ledger_dir(), "team-a");
    assert_eq!((ledger.compute_limit_ratio_e4(0), ledger.compute_limit_source(0)), (3000, ledger::PolicySource::Monitor));

    // The tenant raises its own limit; the monitor writes its own back.
    ledger.set_compute_limit(0, 0, ledger::PolicySource::Environment);
    monitor.wait_rounds(2);
    assert_eq!((ledger.compute_limit_ratio_e4(0), ledger.compute_limit_source(0)), (3000, ledger::PolicySource::Monitor));

    let status = status_json(&sim);
    let devices = &tenant(&status, "team-a").expect("team-a in status")["devices"];
    assert_eq!(devices[0]["compute_limit_ratio"].as_f64(), Some(0.3), "{status}");
    assert_eq!(devices[1]["compute_limit_ratio"].as_f64(), Some(0.6), "{status}");
    assert_eq!(devices[0]["kernel_launches_total"].as_u64(), Some(0), "{status}");
}

/// Shares and priorities from the configuration are the monitor's: written
/// into the tenants' ledgers, used by their turns, and each active tenant's
/// target (its share of the device's turns) shown in /metrics and status.
#[test]
fn configured_shares_set_the_targets_shown() {
    let sim = Sim::new().shim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.small]\nshare = 25\n[tenants.large]\nshare = 75\npriority = 1\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let load = |tenant: &str| {
        let mut cmd = sim.py("compute_load.py");
        cmd.env("GPUSLICE_TENANT", tenant).args(["1000", "4"]);
        sim.spawn(&mut cmd)
    };
    let (small, large) = (load("small"), load("large"));
    let target = |m: &monitor_support::Metrics, tenant: &str| {
        m.value("gpuslice_tenant_compute_target_ratio", &[("tenant", tenant), ("device", "0")])
    };
    monitor.metrics_until("targets of 25 % and 75 %", |m| target(m, "small") == Some(0.25) && target(m, "large") == Some(0.75));
    let status = status_json(&sim);
    let large_device = &tenant(&status, "large").expect("large in status")["devices"][0];
    assert_eq!(large_device["compute_share_ratio"].as_f64(), Some(0.75), "{status}");
    assert_eq!(large_device["compute_priority"].as_i64(), Some(1), "{status}");
    let ledger = ledger_view::open(&sim.ledger_dir(), "large");
    let policy = ledger.compute_policy(0);
    assert_eq!((policy.share_ratio_e4, policy.priority, ledger.compute_limit_source(0)), (7500, 1, ledger::PolicySource::Monitor));
    // The tenant's environment cannot raise what the configuration set.
    let mut cheat = sim.py("compute_load.py");
    cheat.env("GPUSLICE_TENANT", "small").env("GPUSLICE_COMPUTE_SHARE", "90").args(["1000", "0.1"]);
    let out = sim.run(&mut cheat);
    out.assert_success();
    assert!(out.stderr.contains("the monitor sets this tenant's compute settings"), "{out}");
    assert_eq!(ledger_view::open(&sim.ledger_dir(), "small").compute_policy(0).share_ratio_e4, 2500);
    let mut kernels = Vec::new();
    for running in [small, large] {
        let out = running.wait();
        out.assert_success();
        kernels.push(out.u64("kernels"));
    }
    // Under the monitor too, launches are counted (at each checkpoint, so
    // a process's last few may not be) and the time each tenant's launches
    // waited for the other's turns is throttled time.
    let metrics = monitor.metrics();
    for (tenant, launched) in ["small", "large"].into_iter().zip(kernels) {
        let labels = [("tenant", tenant), ("device", "0")];
        let counted = metrics.value("gpuslice_tenant_kernel_launches_total", &labels).unwrap_or(0.0) as u64;
        // Counted by checkpoints: a process's last interval may be left out,
        // and a checkpoint that a grant change brought early counts its own.
        assert!(counted * 10 >= launched * 9 && counted * 10 <= launched * 11, "{tenant}: {counted} launches counted of {launched}");
        let throttled_s = metrics.value("gpuslice_tenant_throttled_seconds_total", &labels).unwrap_or(0.0);
        eprintln!("{tenant}: {counted} launches counted of {launched}, {throttled_s:.2} s throttled");
        assert!(throttled_s > 0.1, "{tenant}: {throttled_s} s throttled in 4 s beside another tenant");
    }
}

/// Priorities are not self-chosen: a tenant the configuration does not name
/// runs at most at its user's `[priority_ceilings]` ceiling, whatever its
/// environment asks (one line says so), root is not held, and a tenant the
/// configuration names for memory only gets no priority from its
/// environment.
#[test]
fn a_priority_above_the_users_ceiling_is_held_to_it() {
    use std::os::unix::fs::PermissionsExt;
    let sim = Sim::new().shim();
    sim.share_the_gpu();
    std::fs::set_permissions(sim.ledger_dir(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[priority_ceilings]\ndefault = 0\nusers = { \"1001\" = 3 }\n[tenants.named]\nmemory = \"1GiB\"\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let hold = |tenant: &str, uid: Option<u32>| {
        let mut cmd = match uid {
            Some(uid) => sim.as_user(uid, uid, &[], gpuslice_tests::compile_c("memctl")),
            None => sim.c("memctl"),
        };
        cmd.env("GPUSLICE_TENANT", tenant).env("GPUSLICE_PRIORITY", "10").args(["init", "ctx", "hold"]);
        let mut running = sim.spawn(&mut cmd);
        running.wait_for("ready");
        running
    };
    let held = [hold("user", Some(1001)), hold("rooted", None), hold("named", None)];
    let priority = |status: &serde_json::Value, name: &str| tenant(status, name).and_then(|t| t["devices"][0]["compute_priority"].as_i64());
    let mut status = status_json(&sim);
    for _ in 0..50 {
        if [priority(&status, "user"), priority(&status, "rooted")].iter().all(Option::is_some) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        status = status_json(&sim);
    }
    assert_eq!(priority(&status, "user"), Some(3), "uid 1001's ceiling is 3\n{status}");
    assert_eq!(priority(&status, "rooted"), Some(10), "root has no ceiling\n{status}");
    assert_eq!(priority(&status, "named").unwrap_or(0), 0, "a tenant named for memory only has no priority\n{status}");
    for mut running in held {
        running.send_line("go");
        running.wait().assert_success();
    }
    let log = monitor.stop();
    let said: Vec<&str> = log.stderr.lines().filter(|l| l.contains("asks for compute priority 10")).collect();
    assert_eq!(said.len(), 1, "one line for the one tenant held to its ceiling\n{log}");
    assert!(said[0].contains("tenant user") && said[0].contains("uid 1001") && said[0].contains("runs at 3"), "{log}");
}
