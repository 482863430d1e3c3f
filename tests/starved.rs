//! Starved or idle: two tenants hold memory on the simulated GPU and launch
//! one short kernel every 50 ms. One burns the CPU between launches (it
//! prepares its next batch: its GPU waits on input), the other sleeps (it
//! holds its memory for nothing). `top` and `report`, reading the CPU time
//! of their processes from `/proc` beside their device time, must tell them
//! apart, and the report must say what to change for each.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{poll, simgpu_lib, Running, Sim};
use monitor_support::*;

/// A `feed_loop` of `tenant` that `burn`s or `sleep`s 50 ms between
/// launches of a 1 ms kernel.
fn feeder(sim: &Sim, tenant: &str, mode: &str) -> Running {
    let mut cmd = sim.c("feed_loop");
    cmd.env("GPUSLICE_TENANT", tenant).args([mode, "50", "1000"]);
    let mut app = sim.spawn(&mut cmd);
    app.wait_for("ready");
    app
}

/// The cells of `tenant`'s row in the TENANTS section of a `top --once` frame.
fn top_row(text: &str, tenant: &str) -> Option<String> {
    let start = text.find("\nTENANTS\n")?;
    text[start..].lines().skip(2).take_while(|l| !l.is_empty()).find(|l| l.split_whitespace().nth(1) == Some(tenant)).map(String::from)
}

#[test]
fn a_tenant_busy_on_its_cpu_is_starved_and_one_that_sleeps_is_idle() {
    let sim = Sim::new().memory("2GiB").context_memory("64MiB").shim();
    let monitor = Monitor::start(&sim, MonitorOptions { args: vec!["--history-interval".into(), "1s".into()], ..Default::default() });
    let starved = feeder(&sim, "loader", "burn");
    let idle = feeder(&sim, "holder", "sleep");

    // `top`: each tenant's activity, with the figures behind it.
    let mut frame = String::new();
    poll::until("top to tell the two apart", || {
        let out =
            sim.run(gpuslice_command(&sim).args(["top", "--once", "--dir"]).arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()));
        out.assert_success();
        frame = out.stdout.clone();
        let row = |t| top_row(&frame, t).unwrap_or_default();
        row("loader").contains("starved (") && row("holder").contains("idle (")
    });
    println!("{}\n{}", top_row(&frame, "loader").unwrap_or_default(), top_row(&frame, "holder").unwrap_or_default());

    // `report`, from the monitor's history: a few intervals of each.
    let report = || {
        let out = sim.run(gpuslice_command(&sim).args(["report", "--since", "1h", "--json", "--dir"]).arg(sim.ledger_dir()));
        out.assert_success();
        serde_json::from_str::<serde_json::Value>(&out.stdout).unwrap_or_else(|e| panic!("report --json: {e}\n{out}"))
    };
    let mut json = serde_json::Value::Null;
    poll::until("the report to tell the two apart", || {
        json = report();
        let activity = |t: &str| {
            json["tenants"]
                .as_array()
                .and_then(|ts| ts.iter().find(|x| x["tenant"] == t))
                .map(|x| x["activity"].clone())
                .unwrap_or_default()
        };
        activity("loader") == "starved" && activity("holder") == "idle"
    });
    let out = sim.run(gpuslice_command(&sim).args(["report", "--since", "1h", "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    let text = &out.stdout;
    let advice = |tenant: &str| {
        let start = text.find(&format!("\n{tenant} on device 0:\n")).unwrap_or_else(|| panic!("no advice for {tenant}:\n{text}"));
        text[start + 1..]
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .find(|l| l.starts_with("  activity:"))
            .unwrap_or_default()
            .to_string()
    };
    assert!(advice("loader").contains("starved") && advice("loader").contains("more data-loader workers"), "{text}");
    assert!(advice("holder").contains("idle") && advice("holder").contains("a smaller slice"), "{text}");
    println!("{}\n{}", advice("loader"), advice("holder"));

    drop(starved);
    drop(idle);
    monitor.stop();
}
