//! JAX trains on simgpu: a jitted training step (an MLP, `jax.value_and_grad`,
//! an optax-style Adam update) run for several steps with XLA's command
//! buffers on, as they are by default, bare, under a 1 GiB cap and under a
//! compute share with the monitor arbitrating. On the simulated sm_90
//! device XLA builds each step's kernels into a CUDA graph whose edges are
//! programmatic (edge data: from port 1, type programmatic), which simgpu
//! once refused; `SIMGPU_LOG=debug` has simgpu say how many edges each
//! instantiated graph has and how many are programmatic, and the tests
//! check that such a graph was built. Kernels compute nothing, so the
//! checks are on shapes, dtypes, where arrays live and how many steps ran
//! (`tests/python/models_jax_train.py`). Each run also calls `jnp.linalg`
//! (solve, inv, cholesky, qr, svd, eigh) through the cuSOLVER 12.4 that
//! JAX's wheels install.
//!
//! JAX lives in `.deps/jax-venv`, which `scripts/setup.sh` installs;
//! without it these tests fail, saying so. `gpuslice sim --device-nodes`
//! needs root or CAP_SYS_ADMIN, as in `tests/simgpu_jax.rs`.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{repo_root, Output, Sim};
use monitor_support::{Monitor, MonitorOptions};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

const STEPS: u64 = 8;

fn jax_python() -> PathBuf {
    let path = repo_root().join(".deps/jax-venv/bin/python");
    assert!(path.is_file(), "{} is missing: scripts/setup.sh installs JAX", path.display());
    path
}

/// One simulated 16 GiB device; a context costs 256 MiB. Compiling the
/// step takes seconds of CPU, more on a busy machine.
fn sim() -> Sim {
    Sim::new().memory("16GiB").context_memory("256MiB").env("SIMGPU_LOG", "debug").timeout(Duration::from_secs(400))
}

fn train_command(sim: &Sim, sections: &[&str]) -> Command {
    let mut cmd = sim.gpuslice();
    cmd.args(["sim", "--device-nodes", "--"])
        .arg(jax_python())
        .arg(repo_root().join("tests/python/models_jax_train.py"))
        .args(sections)
        .env("TRAIN_STEPS", STEPS.to_string());
    cmd
}

/// The largest graph simgpu instantiated: (nodes, edges, programmatic edges).
fn largest_graph(out: &Output) -> Option<(u64, u64, u64)> {
    out.stderr
        .lines()
        .filter_map(|l| l.split("graph instantiated: ").nth(1))
        .filter_map(|rest| {
            let n: Vec<u64> = rest.split(|c: char| !c.is_ascii_digit()).filter_map(|w| w.parse().ok()).collect();
            (n.len() == 3).then(|| (n[0], n[1], n[2]))
        })
        .max()
}

fn check_training(out: &Output) {
    out.assert_success();
    assert_eq!(out.get("devices.backend"), "gpu", "JAX fell back to the CPU\n{out}");
    assert_eq!(out.get("flags.xla_flags"), "", "command buffers are left at XLA's default\n{out}");
    assert_eq!(out.get("grad"), "ok", "{out}");
    assert_eq!(out.get("grad.shape"), "128x64", "{out}");
    assert_eq!(out.get("grad.device"), "cuda:0", "{out}");
    assert_eq!(out.get("train"), "ok", "{out}");
    assert_eq!(out.u64("train.steps"), STEPS, "{out}");
    assert_eq!(out.get("train.loss_shape"), "()", "{out}");
    assert_eq!(out.get("train.loss_dtype"), "float32", "{out}");
    assert_eq!(out.get("train.param_shapes"), "64x256;256x256;256x10", "{out}");
    assert_eq!(out.get("train.param_device"), "cuda:0", "{out}");
    assert_eq!(out.get("train.opt_count_dtype"), "int32", "{out}");
    // jnp.linalg through the cuSOLVER JAX's wheels install (12.4).
    assert_eq!(out.get("linalg"), "ok", "{out}");
    for (call, shapes) in
        [("solve", "32x4"), ("inv", "32x32"), ("cholesky", "32x32"), ("qr", "32x16,16x16"), ("svd", "32x16,16,16x16"), ("eigh", "32,32x32")]
    {
        assert_eq!(out.get(&format!("linalg.{call}")), shapes, "jnp.linalg.{call}\n{out}");
    }
    // The step ran as a command buffer: a CUDA graph of several kernels
    // joined by programmatic edges.
    let (nodes, edges, programmatic) = largest_graph(out).unwrap_or_else(|| panic!("no CUDA graph was instantiated\n{out}"));
    assert!(nodes >= 4 && edges >= 3, "a graph of {nodes} nodes and {edges} edges\n{out}");
    assert!(programmatic >= 1, "no programmatic edge in the step's graph ({nodes} nodes, {edges} edges)\n{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn jax_trains_an_mlp_with_grad_and_adam_through_command_buffers() {
    let sim = sim();
    check_training(&sim.run(&mut train_command(&sim, &["devices", "flags", "grad", "train", "linalg"])));
}

/// Under a 1 GiB cap JAX's default preallocation (75 % of the cap) leaves
/// too little beside the context for cuSOLVER's handle, whose workspace
/// is allocated outside XLA's pool (`gpusolverDnCreate` fails, as on a
/// 1 GiB GPU); with half the cap preallocated, as docs/frameworks.md advises for
/// a slice, everything runs.
#[test]
fn jax_trains_under_a_1gib_cap() {
    let sim = sim().memory_limit("1GiB").tenant("jax-train");
    let mut cmd = train_command(&sim, &["devices", "flags", "grad", "train", "linalg"]);
    cmd.env("XLA_PYTHON_CLIENT_MEM_FRACTION", ".5");
    check_training(&sim.run(&mut cmd));
}

/// Under a 50 % share the monitor arbitrates every launch of the
/// training process, graph launches included, and the steps complete.
#[test]
fn jax_trains_under_a_share_with_the_monitor() {
    let sim = sim().shim().tenant("shared").env("GPUSLICE_COMPUTE_SHARE", "50").env("GPUSLICE_LOG", "info");
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut running = sim.spawn(&mut train_command(&sim, &["devices", "flags", "grad", "train", "linalg", "hold"]));
    running.wait_for("holding");
    let labels = [("tenant", "shared"), ("device", "0")];
    monitor.metrics_until("the JAX process arbitrated by the monitor", |m| {
        m.value("gpuslice_tenant_processes", &labels) == Some(1.0)
            && m.value("gpuslice_tenant_compute_unarbitrated_processes", &labels) == Some(0.0)
            && m.find("gpuslice_device_arbitrated", &[("device", "0")]).first().is_some_and(|s| s.value == 1.0)
    });
    running.send_line("go");
    let out = running.wait();
    check_training(&out);
    assert!(out.shim_log_lines().iter().all(|l| !l.contains("arbitrated by the monitor")), "it ran unarbitrated\n{out}");
    monitor.metrics_until("the tenant's share", |m| m.value("gpuslice_tenant_compute_target_ratio", &labels) == Some(0.5));
}
