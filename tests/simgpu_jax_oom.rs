//! A JAX step larger than the device raises JAX's own out-of-memory error
//! and the process goes on, bare on a 1 GiB simulated device and under a
//! 1 GiB cap on a 16 GiB one (`tests/python/models_jax.py`, sections
//! `step_oom` and `after`).
//!
//! The step's 4 GiB result never reaches the driver: XLA's allocator (BFC)
//! serves every buffer from the pool it took at start-up (75 % of the
//! total `cuMemGetInfo` reports: the device's, or the cap's under the
//! shim), finds no room, waits up to 10 s for memory to be freed (its
//! `AllocatorRetry`, as on a real GPU), then fails the step with
//! `RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.00GiB`.
//! Nothing the step took is left in use, and a small step runs after it.
//!
//! Both processes run at once (each spends most of its time in that
//! wait); a hang fails the test at the child deadline instead of hanging CI.
//!
//! JAX lives in `.deps/jax-venv`, which `scripts/setup.sh` installs;
//! without it this test fails, saying so. `gpuslice sim --device-nodes`
//! needs root or CAP_SYS_ADMIN, as in `tests/simgpu_jax.rs`.

use gpuslice_tests::{repo_root, Output, Sim, MIB};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

fn jax_python() -> PathBuf {
    let path = repo_root().join(".deps/jax-venv/bin/python");
    assert!(path.is_file(), "{} is missing: scripts/setup.sh installs JAX", path.display());
    path
}

/// A context costs 256 MiB. JAX starts in seconds of CPU and the failed
/// step waits 10 s; the deadline is generous for a busy two-core machine.
fn sim() -> Sim {
    Sim::new().context_memory("256MiB").timeout(Duration::from_secs(240))
}

fn oom_command(sim: &Sim) -> Command {
    let mut cmd = sim.gpuslice();
    cmd.args(["sim", "--device-nodes", "--"])
        .arg(jax_python())
        .arg(repo_root().join("tests/python/models_jax.py"))
        .args(["devices", "step_oom", "after"]);
    cmd
}

fn check_oom_then_a_small_step(out: &Output) {
    out.assert_success();
    assert_eq!(out.get("devices.backend"), "gpu", "JAX fell back to the CPU\n{out}");
    // JAX sees 1 GiB in all and gives its pool 75 % of it.
    assert_eq!(out.u64("step_oom.bytes_limit"), 768 * MIB, "{out}");
    assert_eq!(out.get("step_oom"), "ok", "{out}");
    assert!(out.get("step_oom.result").starts_with("raised"), "the step larger than the device must raise\n{out}");
    let message = out.get("step_oom.message");
    assert!(
        message.starts_with("RESOURCE_EXHAUSTED: Out of memory while trying to allocate 4.00GiB"),
        "JAX's own out-of-memory error: {message}\n{out}"
    );
    assert!(out.stderr.contains("ran out of memory trying to allocate 4.00GiB"), "XLA's allocator refused the step\n{out}");
    assert_eq!(out.u64("step_oom.in_use_after"), out.u64("step_oom.in_use_before"), "the failed step left memory in use\n{out}");
    assert_eq!(out.get("after"), "ok", "a small step after the error\n{out}");
    assert_eq!(out.get("after.shape"), "256", "{out}");
    assert_eq!(out.get("after.device"), "cuda:0", "{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn a_jax_step_larger_than_the_device_raises_out_of_memory_bare_and_under_a_cap() {
    let bare = sim().memory("1GiB");
    let capped = sim().memory("16GiB").memory_limit("1GiB").tenant("jax-oom");
    let running_bare = bare.spawn(&mut oom_command(&bare));
    let running_capped = capped.spawn(&mut oom_command(&capped));
    let (bare_out, capped_out) = (running_bare.wait(), running_capped.wait());
    check_oom_then_a_small_step(&bare_out);
    check_oom_then_a_small_step(&capped_out);
}
