//! The monitor's configuration file: caps applied to running tenants without
//! a restart (on change and on SIGHUP), tenants it does not name left to
//! their environment, a bad file refused at start with line and column, and
//! a bad reload that keeps the previous configuration.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{cu, poll, Sim, MIB};
use monitor_support::*;

fn sim() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("2GiB").tenant("team-a")
}

fn limit_of(sim: &Sim, tenant_name: &str) -> (Option<u64>, String) {
    let status = status_json(sim);
    let device = &tenant(&status, tenant_name).unwrap_or_else(|| panic!("{tenant_name} missing: {status:#}"))["devices"][0];
    (device["memory_limit_bytes"].as_u64(), device["policy_source"].as_str().unwrap_or("").to_string())
}

#[test]
fn live_reconfiguration_lowers_and_raises_a_running_tenants_cap() {
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nmemory = \"1GiB\"\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), ..Default::default() });
    // The monitor created the tenant's ledger with its cap before any process ran.
    assert_eq!(limit_of(&sim, "team-a"), (Some(1024 * MIB), "monitor".into()));

    let mut app = sim.spawn(sim.c("memctl").args([
        "init",
        "ctx",
        "info:before",
        "alloc:a:512M",
        "hold",
        "alloc:b:512M",
        "info:lowered",
        "wait",
        "alloc:c:512M",
        "hold",
    ]));
    app.wait_for("ready");
    assert_eq!(app.wait_for("before.total"), (1024 * MIB).to_string(), "the file's cap wins over the environment's 2GiB");
    assert_eq!(app.wait_for("a"), cu::SUCCESS.to_string());

    write_atomically(&config, "[tenants.team-a]\nmemory = \"600MiB\"\n");
    poll::until("the lowered cap to reach the ledger", || limit_of(&sim, "team-a").0 == Some(600 * MIB));
    app.send_line("go");
    assert_eq!(app.wait_for("b"), cu::OUT_OF_MEMORY.to_string(), "a lowered cap stops new allocations");
    assert_eq!(app.wait_for("lowered.total"), (600 * MIB).to_string(), "the application sees the new cap");
    assert_eq!(tenant_used_bytes(&sim, "team-a"), Some((512 + 64) * MIB), "existing allocations are kept");

    // Raised again, through SIGHUP after an in-place edit.
    std::fs::write(&config, "[tenants.team-a]\nmemory = \"3GiB\"\n").unwrap();
    monitor.running.signal("HUP");
    poll::until("the raised cap to reach the ledger", || limit_of(&sim, "team-a").0 == Some(3072 * MIB));
    app.send_line("go");
    assert_eq!(app.wait_for("c"), cu::SUCCESS.to_string());
    app.wait().assert_success();
    let reloads = monitor.metrics().value("gpuslice_config_reloads_total", &[("result", "ok")]).unwrap();
    assert!(reloads >= 2.0, "{reloads}");
}

#[test]
fn sighup_reloads_an_unchanged_file() {
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nmemory = \"1GiB\"\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    assert_eq!(monitor.metrics().value("gpuslice_config_reloads_total", &[("result", "ok")]), Some(0.0));
    monitor.running.signal("HUP");
    monitor.metrics_until("SIGHUP to reload the configuration", |metrics| {
        metrics.value("gpuslice_config_reloads_total", &[("result", "ok")]) == Some(1.0)
    });
}

#[test]
fn tenants_the_file_does_not_name_keep_their_environment_cap() {
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nmemory = \"1GiB\"\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    let mut cmd = sim.c("memctl");
    cmd.env("GPUSLICE_TENANT", "team-b").env("GPUSLICE_MEMORY_LIMIT", "700MiB").args(["init", "ctx", "info", "hold"]);
    let mut b = sim.spawn(&mut cmd);
    b.wait_for("ready");
    // The monitor has found team-b's ledger, and applied its configuration
    // over a few more rounds.
    monitor.metrics_until("the monitor to watch team-b's ledger", |metrics| {
        metrics.value("gpuslice_tenant_memory_limit_bytes", &[("tenant", "team-b")]).is_some()
    });
    monitor.wait_rounds(2);
    assert_eq!(limit_of(&sim, "team-b"), (Some(700 * MIB), "environment".into()));
    assert_eq!(b.wait_for("info.total"), (700 * MIB).to_string());
    b.wait().assert_success();
}

#[test]
fn a_bad_configuration_refuses_to_start_with_line_and_column() {
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "on_violation = \"report\"\n[tenants.team-a]\nmemory = \"4GG\"\n").unwrap();
    let out = sim.run(&mut monitor_command(&sim, &MonitorOptions { config: Some(config.clone()), ..Default::default() }));
    assert_eq!(out.code(), Some(2), "{out}");
    let expected = format!("{}:3:10:", config.display());
    assert!(out.stderr.contains(&expected), "expected {expected} in:\n{out}");
    assert!(out.stderr.contains("4GG") && out.stderr.contains("8GiB"), "names the value and the accepted format:\n{out}");

    // An unknown key (a misspelt one would apply nothing) is refused too.
    std::fs::write(&config, "[tenants.team-a]\nmemory = \"1GiB\"\nmemroy = \"2GiB\"\n").unwrap();
    let out = sim.run(&mut monitor_command(&sim, &MonitorOptions { config: Some(config.clone()), ..Default::default() }));
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains(&format!("{}:3:1:", config.display())) && out.stderr.contains("memroy"), "{out}");
}

#[test]
fn a_bad_reload_keeps_the_previous_configuration() {
    let sim = sim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.team-a]\nmemory = \"1GiB\"\n").unwrap();
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), ..Default::default() });
    write_atomically(&config, "[tenants.team-a]\nmemory = \"1GiB\"\n[tenants.team-b\n");
    monitor.metrics_until("the bad file to be refused", |metrics| {
        metrics.value("gpuslice_config_reloads_total", &[("result", "error")]) == Some(1.0)
    });
    // Still governed by the old file: a process asking for 2GiB gets 1GiB.
    let out = sim.run(sim.c("memctl").args(["init", "ctx", "info"]));
    assert_eq!(out.u64("info.total"), 1024 * MIB, "{out}");
    assert_eq!(limit_of(&sim, "team-a"), (Some(1024 * MIB), "monitor".into()));
    let log = monitor.stop();
    let line = log.stderr.lines().find(|l| l.contains("configuration refused")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains(&format!("{}:3:", config.display())), "{line}");
}

/// Policies that cannot do what they say: a cap above the device's memory
/// and shares adding up to more than 100 % are warned about by `monitor
/// --check`, by the running monitor and by `run`; a share above the same
/// tenant's limit is refused by all three.
#[test]
fn impossible_policies_are_warned_about_or_refused_before_they_bite() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").shim();
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "[tenants.big]\nmemory = \"64GiB\"\nshare = 60\n[tenants.other]\nshare = 60\n").unwrap();
    let check = |config: &std::path::Path| {
        let mut cmd = gpuslice_command(&sim);
        cmd.args(["monitor", "--check", "--nvml-lib"]).arg(gpuslice_tests::simgpu_lib()).arg("--config").arg(config);
        sim.run(&mut cmd)
    };
    let out = check(&config);
    out.assert_success();
    let warnings: Vec<&str> = out.stderr.lines().filter(|l| l.starts_with("gpuslice: warning: ")).collect();
    assert_eq!(warnings.len(), 2, "{out}");
    assert!(
        warnings[0].contains("tenant big: the memory cap of 64.0 GiB on device 0") && warnings[0].contains("the device's 4.0 GiB"),
        "{out}"
    );
    assert!(warnings[1].contains("the configured shares add up to 120 % (big 60 %, other 60 %)"), "{out}");
    assert!(out.stdout.contains("2 tenant(s), 2 warning(s) against 1 device(s)"), "{out}");

    // The running monitor says the same, once.
    let monitor = Monitor::start(&sim, MonitorOptions { config: Some(config.clone()), ..Default::default() });
    monitor.wait_rounds(2);
    let log = monitor.stop();
    for warning in &warnings {
        let text = warning.trim_start_matches("gpuslice: warning: ");
        assert_eq!(log.stderr.matches(text).count(), 1, "{text:?} once in the monitor's log\n{}", log.stderr);
    }

    // A share above the tenant's own limit is refused, with its place.
    let refused = sim.dir().join("refused.toml");
    std::fs::write(&refused, "[tenants.a]\nlimit = 30\nshare = 60\n").unwrap();
    let out = check(&refused);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("refused.toml:3:9: tenant a: share 60 % is above its limit 30 %"), "{out}");
    let out = sim.run(&mut monitor_command(&sim, &MonitorOptions { config: Some(refused), ..Default::default() }));
    assert_eq!(out.code(), Some(2), "the monitor refuses to start with it\n{out}");

    // `run`: the same warnings, and the same refusal, before the command starts.
    let marker = sim.dir().join("ran");
    let mut run = gpuslice_command(&sim);
    run.args(["run", "--sim", "--memory", "8GiB", "--compute-share", "60", "--tenant", "t", "--dir"]).arg(sim.ledger_dir());
    let out = sim.run(run.args(["--", "touch"]).arg(&marker));
    out.assert_success();
    assert!(marker.exists(), "a warning does not stop the command\n{out}");
    assert!(out.stderr.contains("gpuslice: warning: --memory (tenant t): the memory cap of 8.0 GiB on device 0"), "{out}");
    // A share that, with those of the tenants running on the device, passes 100 %.
    let mut busy_cmd = sim.c("memctl");
    busy_cmd.env("GPUSLICE_TENANT", "busy").env("GPUSLICE_COMPUTE_SHARE", "70").args(["init", "ctx", "hold"]);
    let mut busy = sim.spawn(&mut busy_cmd);
    busy.wait_for("ready");
    let mut run = gpuslice_command(&sim);
    run.args(["run", "--sim", "--compute-share", "50", "--tenant", "t", "--dir"]).arg(sim.ledger_dir()).args(["--", "true"]);
    let out = sim.run(&mut run);
    out.assert_success();
    assert!(out.stderr.contains("add up to 120 % (busy 70 %, t 50 %), above 100 %"), "{out}");
    busy.wait().assert_success();

    let mut run = gpuslice_command(&sim);
    run.args(["run", "--sim", "--compute-share", "60", "--compute-limit", "30", "--", "touch"]).arg(sim.dir().join("never"));
    let out = sim.run(&mut run);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(out.stderr.contains("--compute-share 60 is above --compute-limit 30 on every device"), "{out}");
    assert!(!sim.dir().join("never").exists());
}
