//! The monitor's side of compute limits: a limit the configuration names is
//! written into the tenant's ledger as the monitor's, over whatever the
//! tenant wrote, and shown in /metrics and `gpuslice status`.

#[path = "monitor_support/mod.rs"]
mod monitor_support;
#[path = "support/ledger_view.rs"]
mod ledger_view;

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
