//! Context overhead published by the monitor: a tenant process whose shim
//! cannot measure what a context costs (no NVML in its container, or a PID
//! namespace with its own `/proc`, where its pid means nothing to NVML)
//! charges its contexts nothing. The monitor knows its host pid, measures the
//! overhead from the driver's figures and writes it into the tenant's
//! ledger; the tenant's later contexts are charged for it.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{compile_c, poll, simgpu_lib, Sim, MIB};
use monitor_support::*;

const TENANT: &str = "team-a";

fn tenant_device(sim: &Sim) -> serde_json::Value {
    let status = status_json(sim);
    tenant(&status, TENANT).map(|t| t["devices"][0].clone()).unwrap_or(serde_json::Value::Null)
}

/// `memctl ARGS` as pid 1 of a new PID namespace, with the driver (simgpu as
/// libcuda.so.1) but no NVML library in reach, as in a container that has
/// only the CUDA driver mounted. (Not with its own `/proc`: there simgpu,
/// unlike a real driver, cannot learn the host pid it should report.)
///
/// The loader could still find an NVML of the host's (`ld.so.cache`), with
/// which the shim would measure the overhead itself and leave the monitor
/// nothing to do; `GPUSLICE_NVML_LIB` naming a file that does not exist
/// makes sure the shim has none, on any host.
fn namespaced(sim: &Sim, args: &[&str]) -> gpuslice_tests::Running {
    gpuslice_tests::require_pid_namespaces();
    let cuda_only = sim.dir().join("cuda-only");
    if !cuda_only.exists() {
        std::fs::create_dir_all(&cuda_only).unwrap();
        std::os::unix::fs::symlink(simgpu_lib(), cuda_only.join("libcuda.so.1")).unwrap();
        std::os::unix::fs::symlink(simgpu_lib(), cuda_only.join("libcuda.so")).unwrap();
    }
    let no_nvml = cuda_only.join("libnvidia-ml.so.1");
    assert!(!no_nvml.exists());
    let mut cmd = sim.command("unshare");
    cmd.env("LD_LIBRARY_PATH", &cuda_only).env("GPUSLICE_NVML_LIB", &no_nvml);
    cmd.args(["--pid", "--fork", "--kill-child"]).arg(compile_c("memctl")).args(args);
    sim.spawn(&mut cmd)
}

/// Each live process of the tenant and what its slot is charged, by pid.
fn charges(sim: &Sim) -> Vec<(u64, u64)> {
    let status = status_json(sim);
    let processes = tenant(&status, TENANT).unwrap_or_else(|| panic!("{status:#}"))["processes"].as_array().unwrap().clone();
    let mut charged: Vec<(u64, u64)> =
        processes.iter().map(|p| (p["pid"].as_u64().unwrap(), p["memory_used_bytes"].as_u64().unwrap())).collect();
    charged.sort();
    charged
}

#[test]
fn the_monitor_measures_the_context_overhead_for_namespaced_tenants() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant(TENANT);
    let monitor = Monitor::start(&sim, MonitorOptions::default());

    let mut first = namespaced(&sim, &["init", "ctx", "alloc:a:100M", "pid", "hold"]);
    first.wait_for("ready");
    assert_eq!(first.wait_for("pid"), "1");
    // The shim could not measure its context: it charged the allocation alone.
    let first_charges = charges(&sim);
    assert_eq!(first_charges.len(), 1, "{first_charges:?}");
    let first_pid = first_charges[0].0;
    assert_eq!(first_charges[0].1, 100 * MIB, "the shim charged a context it could not measure");
    let device = poll::fetch_until(
        "the monitor to publish the context overhead in the tenant's ledger",
        || tenant_device(&sim),
        |device| device["context_overhead_bytes"].as_u64() == Some(64 * MIB),
    );
    assert_eq!(device["memory_used_bytes"].as_u64(), Some(100 * MIB), "publishing charges no live process: {device:#}");

    // A later process of the tenant, also namespaced, is charged its context;
    // the first one keeps what it was charged.
    let mut second = namespaced(&sim, &["init", "ctx", "alloc:b:100M", "hold"]);
    second.wait_for("ready");
    let both = charges(&sim);
    assert_eq!(both.len(), 2, "{both:?}");
    let second_charge = both.iter().find(|(pid, _)| *pid != first_pid).unwrap_or_else(|| panic!("{both:?}")).1;
    assert_eq!(second_charge, (100 + 64) * MIB, "the second process's context is charged: {both:?}");
    assert!(both.contains(&(first_pid, 100 * MIB)), "{both:?}");
    let log = monitor.stop();
    assert!(log.stderr.contains("context overhead measured at 64.0 MiB"), "{log}");
    let _ = first.kill9();
    let _ = second.kill9();
}
