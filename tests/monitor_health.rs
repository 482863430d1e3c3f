//! Device health from NVML in the monitor's `/metrics`, `status --json` and
//! `top`: a real monitor on the simulated GPU, scraped while the device is
//! idle, under a load that a real process launches, and idle again. The
//! series must move with the load (temperature, power, clocks, why the
//! clocks are held back) and a sensor the device lacks must have no series
//! at all, never a zero.
//!
//! The load runs under a power limit of 300 W (`SIMGPU_POWER_LIMIT`), below
//! what a busy board draws, so that the power cap holds its clocks back.
//! Every comparison is before against after, with generous bounds; nothing
//! is timed.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{simgpu_lib, Sim};
use monitor_support::*;

/// The series of device 0 as dcgm-exporter labels them.
const GPU0: &[(&str, &str)] = &[("gpu", "0"), ("device", "nvidia0")];

fn value(m: &Metrics, name: &str) -> f64 {
    m.value(name, GPU0).unwrap_or_else(|| panic!("no {name} for device 0:\n{m:#?}"))
}

fn reason(m: &Metrics, reason: &str) -> Option<f64> {
    m.value("gpuslice_device_clocks_event_reason_active", &[("device", "0"), ("reason", reason)])
}

#[test]
fn device_health_series_move_with_load_and_back() {
    let sim = Sim::new().memory("2GiB").context_memory("64MiB").shim().tenant("team-load").env("SIMGPU_POWER_LIMIT", "300");
    let monitor = Monitor::start(&sim, MonitorOptions::default());

    // Idle: the device reports itself idle, at its idle clock and draw.
    let idle = monitor.metrics_until("the idle device's health", |m| {
        m.value("DCGM_FI_DEV_GPU_TEMP", GPU0).is_some() && reason(m, "gpu_idle") == Some(1.0)
    });
    let idle_temp = value(&idle, "DCGM_FI_DEV_GPU_TEMP");
    let idle_power = value(&idle, "DCGM_FI_DEV_POWER_USAGE");
    let idle_sm = value(&idle, "DCGM_FI_DEV_SM_CLOCK");
    assert_eq!(value(&idle, "DCGM_FI_DEV_POWER_MGMT_LIMIT"), 300.0);
    assert!(value(&idle, "DCGM_FI_DEV_SLOWDOWN_TEMP") > idle_temp && value(&idle, "DCGM_FI_DEV_SHUTDOWN_TEMP") > idle_temp);
    assert_eq!(reason(&idle, "sw_power_cap"), Some(0.0));
    assert_eq!(value(&idle, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), 1.0, "gpu_idle alone");
    // ECC on and no errors: zeros that are real readings, and row
    // remapping (Hopper); page retirement is not on this board: no series.
    assert_eq!(value(&idle, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), 0.0);
    assert_eq!(value(&idle, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"), 0.0);
    for name in ["DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE", "DCGM_FI_DEV_RETIRED_PENDING"] {
        assert!(idle.find(name, &[]).is_empty(), "{name} has a series on a board without page retirement");
        assert!(idle.types.contains_key(name), "{name} is still declared");
    }

    // A real process keeps the device busy with back-to-back kernels.
    let load = sim.spawn(sim.c("compute_load").args(["kernel", "2000", "30"]));
    let busy = monitor.metrics_until("the series to follow the load", |m| {
        m.value("gpuslice_device_utilization_ratio", &[("device", "0")]).is_some_and(|u| u > 0.8)
            && reason(m, "sw_power_cap") == Some(1.0)
            && m.value("DCGM_FI_DEV_GPU_TEMP", GPU0).is_some_and(|t| t >= idle_temp + 10.0)
    });
    let busy_power = value(&busy, "DCGM_FI_DEV_POWER_USAGE");
    assert!(busy_power > idle_power + 100.0 && busy_power <= 300.0, "power {idle_power} W idle, {busy_power} W busy");
    assert!(value(&busy, "DCGM_FI_DEV_SM_CLOCK") > idle_sm, "the SM clock rises from idle under load");
    assert_eq!(reason(&busy, "gpu_idle"), Some(0.0));
    let held = section_line(&top_once(&sim), "DEVICES", "0");
    assert!(held.contains("power") && held.contains(" C"), "top shows the temperature and the power cap:\n{held}");
    let status = status_json(&sim);
    let health = &status["devices"][0]["health"];
    assert!(health["temperature_c"].as_u64().is_some_and(|t| t as f64 >= idle_temp + 10.0), "{health}");
    assert_eq!(health["clocks_event_reason_names"], serde_json::json!(["sw_power_cap"]), "{health}");
    println!(
        "idle: {idle_temp} C, {idle_power} W, SM {idle_sm} MHz; busy: {} C, {busy_power} W, SM {} MHz, sw_power_cap",
        value(&busy, "DCGM_FI_DEV_GPU_TEMP"),
        value(&busy, "DCGM_FI_DEV_SM_CLOCK")
    );

    // The load gone, the device is idle again.
    load.kill9();
    let after = monitor.metrics_until("the device idle again", |m| reason(m, "gpu_idle") == Some(1.0));
    assert_eq!(reason(&after, "sw_power_cap"), Some(0.0));
    assert_eq!(value(&after, "DCGM_FI_DEV_GPU_TEMP"), idle_temp);
    assert_eq!(value(&after, "DCGM_FI_DEV_SM_CLOCK"), idle_sm);
    monitor.stop();
}

#[test]
fn a_sensor_the_device_lacks_has_no_series_never_a_zero() {
    // A board without ECC: its error counters and row remapping answer
    // NVML_ERROR_NOT_SUPPORTED.
    let sim = Sim::new().memory("1GiB").context_memory("64MiB").env("SIMGPU_ECC", "off");
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let m = monitor.metrics_until("the device's health", |m| m.value("DCGM_FI_DEV_GPU_TEMP", GPU0).is_some());
    for name in [
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_DEV_RETIRED_DBE",
    ] {
        assert!(m.find(name, &[]).is_empty(), "{name} has a series on a board without ECC:\n{:#?}", m.find(name, &[]));
        assert!(m.types.contains_key(name), "{name} is still declared");
    }
    // What the board has is there.
    for name in ["DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] {
        assert!(m.value(name, GPU0).is_some(), "no {name}");
    }
    monitor.stop();
    let status = status_json(&sim);
    let health = status["devices"][0]["health"].as_object().unwrap_or_else(|| panic!("no health in {status}"));
    assert!(health.contains_key("temperature_c"), "{health:?}");
    assert!(!health.keys().any(|k| k.starts_with("ecc_") || k.contains("remap")), "{health:?}");
}

/// One `top --once` frame.
fn top_once(sim: &Sim) -> String {
    let out = sim.run(gpuslice_command(sim).args(["top", "--once", "--dir"]).arg(sim.ledger_dir()).arg("--nvml-lib").arg(simgpu_lib()));
    out.assert_success();
    out.stdout.clone()
}

/// The row of section `title` whose first cell is `first`.
fn section_line(text: &str, title: &str, first: &str) -> String {
    let start = text.find(&format!("\n{title}\n")).unwrap_or_else(|| panic!("no {title} section:\n{text}"));
    let rows = text[start + title.len() + 2..].lines().take_while(|l| !l.is_empty());
    let found = rows.into_iter().find(|l| l.split_whitespace().next() == Some(first));
    found.unwrap_or_else(|| panic!("no row {first} in {title}:\n{text}")).to_string()
}
