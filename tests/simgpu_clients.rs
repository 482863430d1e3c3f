//! NVIDIA's own clients against simgpu: `cuda-bindings` (every entry point
//! resolved through `cuGetProcAddress_v2`, as the CUDA runtime does) and
//! `nvidia-ml-py`, in real processes, beside C programs on the same device.

use gpuslice_tests::{cu, Sim, GIB, MIB};

#[test]
fn cuda_bindings_sees_capacity_copies_and_asynchronous_launches() {
    let sim = Sim::new().memory("1GiB").context_memory("256MiB");
    let out = sim.run(sim.py("sim_driver.py").arg("150000"));
    out.assert_success();
    for key in ["init", "version", "count", "device", "name", "cc_major", "total", "retain", "set_current", "info"] {
        out.assert_rc(key, cu::SUCCESS);
    }
    assert_eq!(out.u64("driver_version"), 13000, "{out}");
    assert_eq!(out.u64("device_count"), 1, "{out}");
    assert!(!out.get("device_name").is_empty(), "{out}");
    assert_eq!(out.u64("cc_major.value"), 9, "{out}");
    assert_eq!(out.u64("total_mem"), GIB, "{out}");
    assert_eq!(out.u64("info.free"), GIB - 256 * MIB, "{out}");
    out.assert_rc("over", cu::OUT_OF_MEMORY);
    out.assert_rc("all", cu::SUCCESS);
    out.assert_rc("one", cu::OUT_OF_MEMORY);
    out.assert_rc("free_all", cu::SUCCESS);
    assert_eq!(out.u64("info_after.free"), GIB - 256 * MIB, "{out}");
    assert_eq!(out.get("copy_ok"), "1", "{out}");
    out.assert_rc("launch", cu::SUCCESS);
    assert!(out.f64("launch_us") < 50_000.0, "{out}");
    out.assert_rc("query", cu::NOT_READY);
    assert!(out.f64("run_us") >= 140_000.0, "{out}");
    let elapsed_ms = out.f64("elapsed_ms");
    assert!((135.0..=500.0).contains(&elapsed_ms), "{out}");
    out.assert_rc("proc_unknown", cu::NOT_FOUND);
    if let Some(status) = out.find("proc_unknown.status") {
        assert_eq!(status, "1", "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND\n{out}");
    }
}

#[test]
fn nvidia_ml_py_reports_memory_and_processes_as_the_driver_does() {
    let sim = Sim::new().memory("8GiB").context_memory("300MiB");
    let mut a = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:1G", "pid", "info", "hold"]));
    let a_pid = a.wait_for("pid");
    let mut b = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:b:10M", "pid", "info", "hold"]));
    let b_pid = b.wait_for("pid");
    b.wait_for("info.free");
    let out = sim.run(sim.py("sim_nvml.py").arg("memory"));
    a.close_stdin();
    b.close_stdin();
    let b_out = b.wait();
    a.wait().assert_success();
    out.assert_success();

    assert_eq!(out.u64("count"), 1, "{out}");
    assert!(out.get("uuid").starts_with("GPU-"), "{out}");
    assert_eq!(out.u64("index_by_uuid"), 0, "{out}");
    assert_eq!(out.u64("mem.total"), 8 * GIB, "{out}");
    // B's driver view was taken after both processes allocated.
    assert_eq!(out.u64("mem.free"), b_out.u64("info.free"), "NVML free == driver free\n{out}\n{b_out}");
    assert_eq!(out.u64("mem.used"), 8 * GIB - b_out.u64("info.free"), "{out}");
    assert_eq!(out.u64("mem2.total"), 8 * GIB, "{out}");
    assert_eq!(out.u64("mem2.free"), out.u64("mem.free"), "{out}");
    assert_eq!(out.u64("procs.count"), 2, "{out}");
    assert_eq!(out.u64(&format!("procs.pid.{a_pid}")), GIB + 300 * MIB, "{out}");
    assert_eq!(out.u64(&format!("procs.pid.{b_pid}")), 10 * MIB + 300 * MIB, "{out}");
}

#[test]
fn nvidia_ml_py_sees_a_busy_device_and_its_process() {
    let sim = Sim::new();
    // 100 kernels of 20 ms keep the device busy for 2 s.
    let busy = sim.spawn(sim.c("sim_launch").args(["queue", "100", "20000"]));
    let busy_pid = busy.pid();
    let out = sim.run(sim.py("sim_nvml.py").args(["utilization", "1.2"]));
    busy.wait().assert_success();
    out.assert_success();
    let gpu = out.u64("util.gpu");
    assert!(gpu >= 50, "a device busy for the whole last second must report high utilization\n{out}");
    let sm = out.u64(&format!("putil.pid.{busy_pid}"));
    assert!(sm > 0, "the busy process must have utilization samples\n{out}");
    assert!(out.u64(&format!("putil.ts.{busy_pid}")) > 0, "{out}");
}
