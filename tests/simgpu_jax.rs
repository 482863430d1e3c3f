//! JAX on simgpu, bare and under gpuslice: a jitted matmul and what JAX's
//! allocator reports (`memory_stats`), on a whole simulated device, under a
//! 1 GiB cap with JAX's default preallocation and with each documented
//! setting, and under a compute share with the monitor arbitrating. Each
//! scenario is one JAX process (`tests/python/models_jax.py`) run by
//! `gpuslice sim --device-nodes`, since JAX takes its CUDA backend only
//! where `/dev/nvidia0` exists; the placeholder nodes are tested here too.
//! Every run checks that XLA created its cuBLAS handle.
//!
//! JAX lives in `.deps/jax-venv`, which `scripts/setup.sh` installs;
//! without it these tests fail, saying so (a test that passes without
//! running checks nothing).

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{repo_root, wrap_as_user, Output, Sim, GIB, MIB};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The JAX virtualenv's Python.
fn jax_python() -> PathBuf {
    let path = repo_root().join(".deps/jax-venv/bin/python");
    assert!(path.is_file(), "{} is missing: scripts/setup.sh installs JAX", path.display());
    path
}

/// One simulated 16 GiB device; a context costs 256 MiB. Compiling and
/// starting JAX takes seconds of CPU, more on a busy two-core machine.
fn sim() -> Sim {
    Sim::new().memory("16GiB").context_memory("256MiB").timeout(Duration::from_secs(300))
}

/// `gpuslice sim --device-nodes -- python models_jax.py SECTIONS…`.
fn jax_command(sim: &Sim, sections: &[&str]) -> Command {
    let mut cmd = sim.gpuslice();
    cmd.args(["sim", "--device-nodes", "--"]).arg(jax_python()).arg(repo_root().join("tests/python/models_jax.py")).args(sections);
    cmd
}

fn assert_section(out: &Output, name: &str) {
    assert_eq!(out.get(name), "ok", "section {name}\n{out}");
}

/// XLA's log line when `cublasCreate` fails; it then leaves every dot to
/// its own Triton kernels.
const NO_CUBLAS: &str = "failed to create cublas handle";

/// The CUDA backend was taken, XLA created its cuBLAS handle, and a jitted
/// matmul ran on the device.
fn check_gpu_matmul(out: &Output) {
    assert!(!out.stderr.contains(NO_CUBLAS), "cuBLAS did not initialise\n{out}");
    assert_section(out, "devices");
    assert_eq!(out.get("devices.backend"), "gpu", "JAX fell back to the CPU\n{out}");
    assert_eq!(out.u64("devices.count"), 1, "{out}");
    assert_section(out, "matmul");
    assert_eq!(out.get("matmul.shape"), "256x256", "{out}");
    assert_eq!(out.get("matmul.dtype"), "float32", "{out}");
    assert_eq!(out.get("matmul.device"), "cuda:0", "{out}");
    // A 64 MiB array is counted by JAX's allocator.
    assert_section(out, "memory");
    assert_eq!(out.u64("memory.array_bytes"), 64 * MIB, "{out}");
    assert!(out.u64("memory.in_use_growth") >= 64 * MIB, "{out}");
}

/// XLA's log line when a device allocation is refused (its allocator then
/// asks again for 90 % of it, and so on).
const REFUSED: &str = "Failed to allocate device memory";

#[test]
fn jax_runs_a_jitted_matmul_on_a_whole_device() {
    let sim = sim();
    let out = sim.run(&mut jax_command(&sim, &["devices", "matmul", "memory", "oversize"]));
    out.assert_success();
    check_gpu_matmul(&out);
    assert_eq!(out.get("devices.kind"), "simgpu H200", "{out}");
    // JAX preallocates 75 % of the device's total memory, and gets it.
    assert_eq!(out.u64("memory.bytes_limit"), 12 * GIB, "{out}");
    assert_eq!(out.u64("memory.pool_bytes"), 12 * GIB, "{out}");
    assert!(!out.stderr.contains(REFUSED), "{out}");
    // 1.5 GiB fits in the 12 GiB pool.
    assert_eq!(out.get("oversize.result"), "allocated 1610612736", "{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

/// With XLA's Triton GEMMs off, a jitted matmul is compiled into a
/// cuBLASLt call and runs (by default XLA's autotuner picks between its
/// Triton kernels and cuBLASLt by the simulated times of both).
#[test]
fn jax_compiles_a_matmul_to_cublaslt_and_runs_it() {
    let sim = sim();
    let mut cmd = jax_command(&sim, &["devices", "blas"]);
    cmd.env("XLA_FLAGS", "--xla_gpu_enable_triton_gemm=false");
    let out = sim.run(&mut cmd);
    out.assert_success();
    assert_eq!(out.get("devices.backend"), "gpu", "JAX fell back to the CPU\n{out}");
    assert!(!out.stderr.contains(NO_CUBLAS), "cuBLAS did not initialise\n{out}");
    assert_section(&out, "blas");
    assert_eq!(out.get("blas.targets"), "__cublas$lt$matmul", "{out}");
    assert_eq!(out.get("blas.shape"), "256x256", "{out}");
}

/// A 1 GiB slice is a 1 GiB GPU to JAX: `cuMemGetInfo` reports 1 GiB in
/// all, and the context's 256 MiB are used of it, as on a real device. So
/// JAX's default preallocation, 75 % of the total (768 MiB), does not fit:
/// the driver call is refused with CUDA_ERROR_OUT_OF_MEMORY (XLA logs it),
/// XLA's allocator backs off to 90 % of it, and the program runs within the
/// cap. Past the pool, an allocation is refused as on a 1 GiB device.
#[test]
fn jax_under_a_1gib_cap_default_preallocation_is_refused_then_backs_off() {
    let sim = sim().memory_limit("1GiB").tenant("jax");
    let mut running = sim.spawn(&mut jax_command(&sim, &["devices", "matmul", "memory", "oversize", "hold"]));
    running.wait_for("holding");
    let used = monitor_support::tenant_used_bytes(&sim, "jax").expect("the tenant has a ledger");
    running.send_line("go");
    let out = running.wait();
    out.assert_success();
    check_gpu_matmul(&out);
    assert_eq!(out.u64("memory.bytes_limit"), 768 * MIB, "75 % of the cap, as JAX sees the cap as the total\n{out}");
    assert!(
        out.stderr.contains(&format!("{REFUSED} of 768.00MiB")) && out.stderr.contains("CUDA_ERROR_OUT_OF_MEMORY"),
        "the default preallocation is refused over the cap\n{out}"
    );
    let pool = out.u64("memory.pool_bytes");
    assert!(pool > 0 && pool < 768 * MIB, "the allocator backed off to a pool under 768 MiB: {pool}\n{out}");
    assert!(out.get("oversize.result").starts_with("refused"), "{out}");
    assert!(used <= GIB && used >= pool + 256 * MIB, "the tenant's usage {used} holds the pool and the context, within the cap\n{out}");
}

/// The two settings docs/frameworks.md gives for a slice: preallocation off (JAX
/// takes memory as it needs it, up to 75 % of the cap) or a fraction that
/// leaves room for the context. Neither has an allocation refused.
#[test]
fn jax_under_a_1gib_cap_with_the_documented_settings() {
    let sim = sim().memory_limit("1GiB").tenant("jax");
    let mut on_demand = jax_command(&sim, &["devices", "matmul", "memory", "oversize"]);
    on_demand.env("XLA_PYTHON_CLIENT_PREALLOCATE", "false");
    let out = sim.run(&mut on_demand);
    out.assert_success();
    check_gpu_matmul(&out);
    assert!(!out.stderr.contains(REFUSED), "preallocation off: nothing is refused\n{out}");
    assert_eq!(out.u64("memory.bytes_limit"), 768 * MIB, "{out}");
    assert!(out.u64("memory.pool_bytes_after") < 768 * MIB, "memory is taken as needed\n{out}");
    assert!(out.get("oversize.result").starts_with("refused"), "{out}");

    let mut fraction = jax_command(&sim, &["devices", "matmul", "memory", "oversize"]);
    fraction.env("XLA_PYTHON_CLIENT_MEM_FRACTION", ".5");
    let out = sim.run(&mut fraction);
    out.assert_success();
    check_gpu_matmul(&out);
    assert!(!out.stderr.contains(REFUSED), "half the cap fits beside the context\n{out}");
    assert_eq!(out.u64("memory.bytes_limit"), 512 * MIB, "{out}");
    assert_eq!(out.u64("memory.pool_bytes"), 512 * MIB, "preallocated whole\n{out}");
    assert!(out.get("oversize.result").starts_with("refused"), "{out}");
}

/// `--device-nodes`: the command sees placeholder nodes (empty files, not
/// devices), one per simulated device, and the rest of /dev as before
/// (`/dev/null`, a writable `/dev/shm`); the host's /dev is not changed.
#[test]
fn device_nodes_are_placeholders_the_host_never_sees() {
    let host_had = Path::new("/dev/nvidia0").exists() || Path::new("/dev/nvidiactl").exists();
    let sim = sim().devices(2);
    let script = "stat -c '%n %F %a' /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm | sed 's/^/node=/'; \
                  test -c /dev/null && echo null=1; f=/dev/shm/gpuslice-test-$$; touch $f && rm $f && echo shm=1";
    // Its staging directory is made in TMPDIR: here, this test's own.
    let tmp = sim.dir().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = sim.run(sim.gpuslice().env("TMPDIR", &tmp).args(["sim", "--device-nodes", "--", "sh", "-c", script]));
    out.assert_success();
    let nodes = out.all("node");
    for name in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"] {
        assert!(nodes.contains(&format!("/dev/{name} regular empty file 666").as_str()), "/dev/{name}\n{out}");
    }
    assert_eq!(out.get("null"), "1", "{out}");
    assert_eq!(out.get("shm"), "1", "{out}");
    assert_eq!(Path::new("/dev/nvidia0").exists() || Path::new("/dev/nvidiactl").exists(), host_had, "the host's /dev changed");
    let left: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
    if !host_had {
        let out = sim.run(sim.gpuslice().args(["sim", "--", "sh", "-c", "test -e /dev/nvidia0 || echo absent=1"]));
        assert_eq!(out.get("absent"), "1", "without --device-nodes there is no node\n{out}");
    }
}

/// Without the privilege to make a mount namespace, `--device-nodes` fails
/// before the command starts and says what it needs.
#[test]
fn device_nodes_without_privilege_fail_saying_what_is_needed() {
    let sim = sim();
    let mut cmd = sim.gpuslice();
    cmd.args(["sim", "--device-nodes", "--", "sh", "-c", "echo started=1"]);
    let out = sim.run(&mut wrap_as_user(65534, &cmd));
    assert_eq!(out.code(), Some(1), "{out}");
    assert!(out.find("started").is_none(), "the command must not run without its nodes\n{out}");
    assert!(out.stderr.contains("--device-nodes") && out.stderr.contains("CAP_SYS_ADMIN"), "{out}");
}
