//! Model workloads on simgpu: PyTorch training through cuBLAS and cuDNN,
//! events and stream waits, a CUDA graph replayed, the cudaMallocAsync
//! allocator and a copy between two simulated devices; CuPy's cuBLAS,
//! cuFFT and cuSOLVER calls; cuda.core's managed memory resource, private
//! pools and pinned memory. Each scenario is one
//! real process that runs several sections and prints what each saw
//! (`tests/python/models_*.py`); kernels compute nothing, so the checks are
//! on what the libraries return and where memory lives, and a copy between
//! devices is checked byte for byte (device memory is host memory here).
//!
//! PyTorch lives in `.deps/torch-venv`, which `scripts/setup.sh` installs;
//! without it the PyTorch tests fail, saying so (a test that passes
//! without running checks nothing). The CuPy tests take NVIDIA's math
//! libraries (cuBLAS, cuFFT, cuSOLVER) from the same place: PyTorch's
//! CUDA 13 wheels install them, CuPy's does not.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{repo_root, Output, Sim};
use monitor_support::{Monitor, MonitorOptions};
use std::path::PathBuf;

/// The PyTorch virtualenv's Python.
fn torch_python() -> Option<PathBuf> {
    let path = repo_root().join(".deps/torch-venv/bin/python");
    assert!(path.is_file(), "{} is missing: scripts/setup.sh installs PyTorch", path.display());
    Some(path)
}

fn run_torch(sim: &Sim, sections: &[&str]) -> Option<Output> {
    let python = torch_python()?;
    let mut cmd = sim.command(python);
    cmd.arg(repo_root().join("tests/python/models_torch.py")).args(sections);
    Some(sim.run(&mut cmd))
}

fn assert_section(out: &Output, name: &str) {
    assert_eq!(out.get(name), "ok", "section {name}\n{out}");
}

/// Two 16 GiB devices; the tests below take what they need of them.
fn two_devices() -> Sim {
    Sim::new().devices(2).memory("16GiB").context_memory("256MiB")
}

fn check_training(out: &Output) {
    out.assert_success();
    for (section, steps) in [("mlp", 3), ("conv", 3), ("conv_no_cudnn", 1)] {
        assert_eq!(out.u64(&format!("{section}.steps")), steps, "{out}");
        assert_eq!(out.get(&format!("{section}.state_device")), "cuda:0", "{out}");
    }
    assert_section(out, "mlp");
    assert_section(out, "conv");
    assert_eq!(out.get("mlp.fp16_matmul_shape"), "(64, 64)", "{out}");
    assert_section(out, "graph");
    assert_eq!(out.get("graph.replays"), "10", "{out}");
    assert_section(out, "nccl");
    assert_eq!((out.get("nccl.backend"), out.u64("nccl.world_size")), ("nccl", 1), "{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn pytorch_trains_an_mlp_and_a_conv_net_and_replays_a_graph() {
    let sim = two_devices();
    let Some(out) = run_torch(&sim, &["mlp", "conv", "graph", "nccl", "events", "devices"]) else { return };
    check_training(&out);
    // Events: twenty 256x256 matmuls of 5 µs simulated each lie between
    // the two records.
    assert_section(&out, "events");
    let elapsed_ms = out.f64("events.elapsed_ms");
    assert!((0.1..1000.0).contains(&elapsed_ms), "event timing measures the simulated kernels: {elapsed_ms} ms\n{out}");
    assert_eq!(out.get("events.side_query"), "1", "{out}");
    // Devices: peers, and a 4 MiB tensor copied there and back intact.
    assert_section(&out, "devices");
    assert_eq!(out.u64("devices.count"), 2, "{out}");
    assert_eq!(out.get("devices.can_access_peer"), "1", "{out}");
    assert_eq!(out.get("devices.copy_device"), "cuda:1", "{out}");
    assert_eq!(out.get("devices.copy_equal"), "1", "{out}");
    assert_eq!(out.get("devices.back_equal"), "1", "{out}");
}

/// `torch.compile`: Inductor's Triton kernels are compiled on the CPU and
/// loaded and launched through simgpu, bare and under a cap.
#[test]
fn pytorch_compiles_a_function_and_runs_it() {
    for sim in [two_devices(), two_devices().memory_limit("2GiB").tenant("compiled")] {
        let Some(out) = run_torch(&sim, &["compiled"]) else { return };
        out.assert_success();
        assert_section(&out, "compiled");
        assert_eq!(out.get("compiled.device"), "cuda:0", "{out}");
        assert_eq!(out.get("compiled.shape"), "(4096,)", "{out}");
        assert_eq!(out.u64("compiled.graphs"), 1, "one graph compiled\n{out}");
    }
}

#[test]
fn pytorch_trains_under_a_memory_cap() {
    let sim = two_devices().memory_limit("2GiB").tenant("models");
    let Some(out) = run_torch(&sim, &["mlp", "conv", "graph", "nccl"]) else { return };
    check_training(&out);
}

/// Under a share, with the monitor arbitrating the device (every launch
/// gated, every turn's end drained by the shim's helper thread, a graph
/// captured and replayed meanwhile), the same training runs. The capture
/// pauses halfway, so the helper finds the process idle and synchronises
/// the context during PyTorch's global-mode capture: allowed only because
/// the helper is in relaxed mode (simgpu enforces capture modes; without
/// it the capture ends `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`).
#[test]
fn pytorch_trains_under_a_share_with_the_monitor() {
    let sim = two_devices().shim().tenant("shared").env("GPUSLICE_COMPUTE_SHARE", "50").env("GPUSLICE_LOG", "info");
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let Some(out) = run_torch(&sim, &["mlp", "conv", "graph", "nccl"]) else { return };
    check_training(&out);
    assert!(out.shim_log_lines().iter().all(|l| !l.contains("arbitrated by the monitor")), "it ran unarbitrated\n{out}");
    monitor.metrics_until("the tenant's share", |m| {
        m.value("gpuslice_tenant_compute_target_ratio", &[("tenant", "shared"), ("device", "0")]).is_some()
    });
}

#[test]
fn pytorch_cuda_malloc_async_reports_memory_stats() {
    let sim = two_devices().env("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync");
    let Some(out) = run_torch(&sim, &["async_alloc", "graph"]) else { return };
    out.assert_success();
    assert_section(&out, "async_alloc");
    // One live 64 MiB tensor: the pool's used and reserved memory.
    assert_eq!(out.u64("async_alloc.allocated_bytes"), 64 << 20, "{out}");
    assert!(out.u64("async_alloc.reserved_bytes") >= 64 << 20, "{out}");
    assert_section(&out, "graph");
}

/// The directory of NVIDIA's math libraries in the PyTorch virtualenv.
fn math_lib_dir() -> PathBuf {
    let dir = repo_root().join(".deps/torch-venv/lib/python3.11/site-packages/nvidia/cu13/lib");
    assert!(
        dir.join("libcublas.so.13").is_file(),
        "{} has no cuBLAS: scripts/setup.sh installs PyTorch and its CUDA libraries",
        dir.display()
    );
    dir
}

/// Each simulated kernel runs this long: a library call timed between two
/// events takes at least this only if it launched a kernel there.
const CUPY_KERNEL_US: u64 = 100_000;

fn run_cupy(sim: &Sim) -> Output {
    let mut cmd = sim.py("models_cupy.py");
    cmd.arg(format!("--lib-dir={}", math_lib_dir().display())).args(["matmul", "matmul_fp16", "fft", "solve"]);
    cmd.env("SIMGPU_KERNEL_US", CUPY_KERNEL_US.to_string());
    sim.run(&mut cmd)
}

/// cuBLAS (matmul in fp32 and fp16), cuFFT (fft) and cuSOLVER (solve)
/// initialise their handles and plans and launch their kernels in stream
/// order: each call's time between two events covers at least one
/// simulated kernel.
fn check_cupy(out: &Output) {
    out.assert_success();
    for (section, dtype) in [("matmul", "float32"), ("matmul_fp16", "float16"), ("fft", "complex64"), ("solve", "float64")] {
        assert_section(out, section);
        assert_eq!(out.get(&format!("{section}.dtype")), dtype, "{out}");
        let elapsed_ms = out.f64(&format!("{section}.elapsed_ms"));
        assert!(elapsed_ms * 1000.0 >= CUPY_KERNEL_US as f64, "{section} launched no kernel between its events: {elapsed_ms} ms\n{out}");
    }
    assert_eq!(out.get("matmul.shape"), "128x32", "{out}");
    assert_eq!(out.get("matmul_fp16.shape"), "128x32", "{out}");
    assert_eq!(out.get("solve.shape"), "16x4", "{out}");
    assert_eq!(out.u64("fft.len"), 1024, "{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn cupy_runs_cublas_cufft_and_cusolver() {
    check_cupy(&run_cupy(&two_devices()));
}

#[test]
fn cupy_runs_cublas_cufft_and_cusolver_under_a_memory_cap() {
    check_cupy(&run_cupy(&two_devices().memory_limit("1GiB").tenant("models")));
}

/// Under a share, with the monitor arbitrating the device: every kernel
/// the libraries launch waits for the tenant's turn.
#[test]
fn cupy_runs_cublas_cufft_and_cusolver_under_a_share_with_the_monitor() {
    let sim = two_devices().shim().tenant("shared").env("GPUSLICE_COMPUTE_SHARE", "50").env("GPUSLICE_LOG", "info");
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let out = run_cupy(&sim);
    check_cupy(&out);
    assert!(out.shim_log_lines().iter().all(|l| !l.contains("arbitrated by the monitor")), "it ran unarbitrated\n{out}");
    monitor.metrics_until("the tenant's share", |m| {
        m.value("gpuslice_tenant_compute_target_ratio", &[("tenant", "shared"), ("device", "0")]).is_some()
    });
}

fn check_cuda_core(out: &Output) {
    out.assert_success();
    assert_section(out, "managed");
    assert_eq!(out.get("managed.is_managed"), "1", "{out}");
    assert_eq!(out.u64("managed.size"), 1 << 20, "{out}");
    assert_section(out, "private_pool");
    assert_eq!(out.get("private_pool.closed"), "1", "{out}");
    // simgpu's devices report no host memory pools
    // (CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED is 0), so a pinned
    // pool is refused as a driver refuses it on such a device.
    assert!(out.get("pinned").contains("CUDA_ERROR_NOT_SUPPORTED"), "{out}");
    // A graph built by stream capture, completed and launched three times.
    assert_section(out, "graph");
    assert_eq!(out.get("graph.launches"), "3", "{out}");
    // The user object cuda.core ties to its graphs: alive while the graph
    // or its executable is, destroyed after both; the flag is required.
    assert_section(out, "user_objects");
    assert_eq!(out.get("user_objects.after_graph"), "0", "the executable still holds it\n{out}");
    assert_eq!(out.get("user_objects.after_exec"), "1", "{out}");
    assert_eq!(out.get("user_objects.without_flag"), "1", "CUDA_ERROR_INVALID_VALUE\n{out}");
    assert_eq!(out.get("done"), "1", "{out}");
}

#[test]
fn cuda_core_memory_resources_pools_and_graphs() {
    let sim = two_devices();
    check_cuda_core(&sim.run(sim.py("models_core.py").args(["managed", "private_pool", "pinned", "graph", "user_objects"])));
}

#[test]
fn cuda_core_memory_resources_pools_and_graphs_under_a_cap() {
    let sim = two_devices().memory_limit("1GiB").tenant("models");
    check_cuda_core(&sim.run(sim.py("models_core.py").args(["managed", "private_pool", "pinned", "graph", "user_objects"])));
}

/// Two PyTorch training loops, tenants admitted with shares of 25 % and
/// 75 % of one device (as a cluster's node agent admits them), both keeping
/// it busy: the monitor splits the device between them in that proportion.
/// Each step launches the same kernels, so the steps each made while both
/// ran are its part of the device's time.
#[test]
fn two_pytorch_training_loops_split_the_device_by_their_shares() {
    const SECONDS: &str = "6";
    let sim = two_devices().shim().env("SIMGPU_KERNEL_US", "500");
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    for (tenant, share) in [("small", "25"), ("large", "75")] {
        let mut admit = monitor_support::gpuslice_command(&sim);
        admit.args(["tenant", "admit", tenant, "--device", "0", "--share", share, "--dir"]).arg(sim.ledger_dir());
        sim.run(&mut admit).assert_success();
    }
    let Some(python) = torch_python() else { return };
    let start = |tenant: &str| {
        let mut cmd = sim.command(&python);
        cmd.arg(repo_root().join("tests/python/torch_train_load.py")).arg(SECONDS).env("GPUSLICE_TENANT", tenant);
        let mut running = sim.spawn(&mut cmd);
        running.wait_for("started");
        running
    };
    let (mut small, mut large) = (start("small"), start("large"));
    small.send_line("go");
    large.send_line("go");
    let (small, large) = (small.wait(), large.wait());
    let (small_marks, large_marks) = (marks(&small), marks(&large));
    // The stretch both ran through, less a second at the start (both
    // joining the arbiter) and half a second at the end.
    let from = small_marks[0].0.max(large_marks[0].0) + 1.0;
    let to = small_marks.last().map_or(0.0, |m| m.0).min(large_marks.last().map_or(0.0, |m| m.0)) - 0.5;
    assert!(to - from > 2.0, "the two ran together for too short a time\n{small}\n{large}");
    let (a, b) = (steps_between(&small_marks, from, to), steps_between(&large_marks, from, to));
    let split = 100.0 * a / (a + b);
    eprintln!("shares 25/75: {a:.1} and {b:.1} steps in {:.1} s, {split:.1} % / {:.1} %", to - from, 100.0 - split);
    assert!((split - 25.0).abs() <= 2.0, "asked 25/75, got {split:.1} % / {:.1} %\n{small}\n{large}", 100.0 - split);
    for out in [&small, &large] {
        assert!(out.shim_log_lines().iter().all(|l| !l.contains("arbitrated by the monitor")), "it ran unarbitrated\n{out}");
    }
    drop(monitor);
}

/// The `mark=T:N` lines of a training load: (seconds, steps done).
fn marks(out: &Output) -> Vec<(f64, f64)> {
    let marks: Vec<(f64, f64)> =
        out.all("mark").iter().filter_map(|m| m.split_once(':')).filter_map(|(t, n)| Some((t.parse().ok()?, n.parse().ok()?))).collect();
    assert!(marks.len() >= 2, "no progress marks\n{out}");
    marks
}

/// Steps done between `from` and `to`, interpolated between marks.
fn steps_between(marks: &[(f64, f64)], from: f64, to: f64) -> f64 {
    let at = |t: f64| {
        let after = marks.iter().position(|m| m.0 >= t).unwrap_or(marks.len() - 1).max(1);
        let ((t0, n0), (t1, n1)) = (marks[after - 1], marks[after]);
        if t1 > t0 {
            n0 + (n1 - n0) * ((t - t0) / (t1 - t0)).clamp(0.0, 1.0)
        } else {
            n1
        }
    };
    at(to) - at(from)
}
