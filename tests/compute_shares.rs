//! Compute shares and priorities, end to end: tenants keep one simulated
//! device busy with back-to-back kernels through NVIDIA's cuda-bindings
//! (`tests/python/compute_load.py`), under the shim and a running monitor
//! that hands out the device's turn table, and each client reports the
//! share of the device it got (kernels × kernel duration / wall time).
//!
//! The bounds leave room for a loaded two-core machine; how close to its
//! target each tenant gets is for `cargo bench --bench fairness` to say.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{cu, Output, Running, Sim};
use monitor_support::{Monitor, MonitorOptions};
use std::time::Duration;

const KERNEL_US: &str = "1000";
const SECONDS: &str = "4";

fn sim() -> Sim {
    Sim::new().shim().timeout(Duration::from_secs(120))
}

/// compute_load.py as `tenant` with `envs`, started.
fn load(sim: &Sim, tenant: &str, envs: &[(&str, &str)], kernel_us: &str) -> Running {
    let mut cmd = sim.py("compute_load.py");
    cmd.env("GPUSLICE_TENANT", tenant).envs(envs.iter().copied()).args([kernel_us, SECONDS]);
    sim.spawn(&mut cmd)
}

fn share(running: Running) -> (f64, Output) {
    let out = running.wait();
    out.assert_success().assert_rc("init", cu::SUCCESS);
    (out.f64("share"), out)
}

/// Two tenants asking 25 % and 75 % of a device get it in that proportion,
/// and together keep the device busy.
#[test]
fn shares_of_25_and_75_are_delivered_in_proportion() {
    let sim = sim();
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let a = load(&sim, "small", &[("GPUSLICE_COMPUTE_SHARE", "25")], KERNEL_US);
    let b = load(&sim, "large", &[("GPUSLICE_COMPUTE_SHARE", "75")], KERNEL_US);
    let ((a, a_out), (b, b_out)) = (share(a), share(b));
    eprintln!("shares 25/75: got {a:.3} and {b:.3}");
    assert!(b > 2.0 * a && b < 4.5 * a, "asked 25/75, got {a:.3}/{b:.3}\n{a_out}\n{b_out}");
    assert!(a + b > 0.6, "together they left the device idle: {a:.3} + {b:.3}\n{a_out}\n{b_out}");
    for out in [&a_out, &b_out] {
        assert!(out.shim_log_lines().iter().all(|l| !l.contains("arbitrated by the monitor")), "{out}");
    }
}

/// A tenant whose share is 30 % and that is alone on the device gets the
/// device, as a tenant without the shim does.
#[test]
fn a_lone_tenant_with_a_share_gets_the_whole_device() {
    let sim = sim();
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let bare = Sim::new();
    let mut bare_cmd = bare.py("compute_load.py");
    bare_cmd.args([KERNEL_US, SECONDS]);
    let (shared, bare) = (load(&sim, "alone", &[("GPUSLICE_COMPUTE_SHARE", "30")], KERNEL_US), bare.spawn(&mut bare_cmd));
    let ((got, out), (bare_got, _)) = (share(shared), share(bare));
    eprintln!("share 30 alone: {got:.3} (bare {bare_got:.3})");
    assert!(got >= 0.8 * bare_got, "a lone tenant with a share got {got:.3} of the device (bare: {bare_got:.3})\n{out}");
}

/// A share without a monitor to arbitrate it is not silently ignored: the
/// process says so and runs.
#[test]
fn a_share_without_a_monitor_is_reported() {
    let sim = sim();
    let out = sim.run(sim.py("compute_load.py").env("GPUSLICE_TENANT", "lonely").env("GPUSLICE_COMPUTE_SHARE", "30").args(["1000", "0.2"]));
    out.assert_success().assert_rc("init", cu::SUCCESS);
    assert!(out.shim_log_lines().iter().any(|l| l.contains("arbitrated by the monitor")), "{out}");
}
