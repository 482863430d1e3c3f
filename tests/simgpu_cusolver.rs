//! CuPy's linear algebra on simgpu with the cuSOLVER the frameworks
//! install today: 12.4.1 (what `pip install cupy-cuda13x[ctk]` and
//! `jax[cuda13]` bring; `scripts/setup.sh` puts it in `.deps/jax-venv`)
//! and 12.2 (PyTorch's, in `.deps/torch-venv`), bare and under a cap.
//! cuSOLVER 12.4 asks the runtime for its stream's SM resource
//! (`cuCtxGetDevResource`) before each factorisation and, where that
//! failed, found the failure as the runtime's last error after its first
//! kernel and gave up with `CUSOLVER_STATUS_EXECUTION_FAILED`; simgpu now
//! answers the query as a driver does. Kernels compute nothing, so the
//! checks are on the shapes and dtypes returned once the stream has
//! synchronised (`tests/python/models_cupy_linalg.py`). JAX's
//! `jnp.linalg` runs in `tests/simgpu_jax_training.rs`.

use gpuslice_tests::{repo_root, Output, Sim};
use std::path::PathBuf;

/// NVIDIA's math libraries as a framework's wheels install them.
fn lib_dir(venv: &str) -> PathBuf {
    let dir = repo_root().join(format!(".deps/{venv}/lib/python3.11/site-packages/nvidia/cu13/lib"));
    assert!(dir.join("libcusolver.so.12").is_file(), "{} has no cuSOLVER: run `bash scripts/setup.sh`", dir.display());
    dir
}

fn run_linalg(sim: &Sim, venv: &str) -> Output {
    let mut cmd = sim.py("models_cupy_linalg.py");
    cmd.arg(format!("--lib-dir={}", lib_dir(venv).display()));
    sim.run(&mut cmd)
}

fn check_linalg(out: &Output, cusolver: &str) {
    out.assert_success();
    assert_eq!(out.get("cusolver.version"), cusolver, "{out}");
    for (section, shapes) in [
        ("solve", "32x4"),
        ("inv", "32x32"),
        ("cholesky", "32x32"),
        ("qr", "32x16,16x16"),
        ("svd", "32x16,16,16x16"),
        ("eigh", "32,32x32"),
        ("lstsq", "16"),
    ] {
        assert_eq!(out.get(section), "ok", "cupy.linalg.{section} with cuSOLVER {cusolver}\n{out}");
        assert_eq!(out.get(&format!("{section}.shapes")), shapes, "{out}");
        assert_eq!(out.get(&format!("{section}.dtype")), "float64", "{out}");
    }
    // The SM resource of the device and of the runtime's context: the
    // H200's 132 SMs; an unknown resource type and device are refused.
    assert_eq!(out.get("resources"), "ok", "{out}");
    out.assert_rc("resources.device_rc", 0);
    assert_eq!(out.u64("resources.device_type"), 1, "CU_DEV_RESOURCE_TYPE_SM\n{out}");
    assert_eq!(out.u64("resources.device_sm_count"), 132, "{out}");
    out.assert_rc("resources.ctx_rc", 0);
    assert_eq!(out.u64("resources.ctx_sm_count"), 132, "{out}");
    out.assert_rc("resources.unknown_type_rc", 914);
    out.assert_rc("resources.bad_device_rc", 101);
    assert_eq!(out.get("done"), "1", "{out}");
}

fn bare() -> Sim {
    Sim::new().memory("1GiB").context_memory("64MiB")
}

fn capped() -> Sim {
    Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("linalg")
}

#[test]
fn cupy_linalg_with_cusolver_12_4() {
    let sim = bare();
    check_linalg(&run_linalg(&sim, "jax-venv"), "12.4.1");
}

#[test]
fn cupy_linalg_with_cusolver_12_4_under_a_cap() {
    let sim = capped();
    check_linalg(&run_linalg(&sim, "jax-venv"), "12.4.1");
}

#[test]
fn cupy_linalg_with_cusolver_12_2() {
    let sim = bare();
    check_linalg(&run_linalg(&sim, "torch-venv"), "12.2.0");
}
