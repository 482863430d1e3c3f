//! NVIDIA's own clients against simgpu: `cuda-bindings` (every entry point
//! resolved through `cuGetProcAddress_v2`, as the CUDA runtime does) and
//! `nvidia-ml-py`, in real processes, beside C programs on the same device.

use gpuslice_tests::{cu, poll, Output, Sim, GIB, MIB};
use std::time::Instant;

#[test]
fn cuda_bindings_sees_capacity_copies_and_asynchronous_launches() {
    // Long enough that no scheduling delay between the launch and the query
    // right after it lets the kernel complete in between.
    const KERNEL_US: f64 = 1_000_000.0;
    let sim = Sim::new().memory("1GiB").context_memory("256MiB");
    let started = Instant::now();
    let out = sim.run(sim.py("sim_driver.py").arg(format!("{KERNEL_US}")));
    let lived_us = started.elapsed().as_micros() as f64;
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
    // Right after the launch and the event recorded behind it, the stream is
    // busy; the kernel then runs its time. (The script records that event
    // between the launch and the query, so the query could be answering for
    // the record: simgpu_execution queries a cuda-bindings launch with
    // nothing behind it, which is what shows the launch itself returns at
    // once.)
    out.assert_rc("query", cu::NOT_READY);
    out.assert_rc("sync", cu::SUCCESS);
    assert!(out.f64("run_us") >= KERNEL_US * 0.93, "{out}");
    let elapsed_us = out.f64("elapsed_ms") * 1000.0;
    assert!(elapsed_us >= KERNEL_US * 0.9, "the events must time at least the kernel between them\n{out}");
    assert!(elapsed_us <= lived_us, "the events cannot be further apart than their process lived ({lived_us} us)\n{out}");
    out.assert_rc("proc_unknown", cu::NOT_FOUND);
    assert_eq!(out.get("proc_unknown.status"), "1", "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND\n{out}");
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
    // No confidential computing; peers over PCIe, no NVLink (status 5,
    // NVML_P2P_STATUS_NOT_SUPPORTED); a PCIe 5 link (code 5, 32000 MB/s).
    assert_eq!((out.u64("cc.environment"), out.u64("cc.feature")), (0, 0), "{out}");
    assert_eq!((out.u64("p2p.read"), out.u64("p2p.write"), out.u64("p2p.nvlink")), (0, 0, 5), "{out}");
    assert_eq!(out.u64("pcie.max_speed"), 5, "{out}");
    assert_eq!(out.u64("procs.count"), 2, "{out}");
    assert_eq!(out.u64(&format!("procs.pid.{a_pid}")), GIB + 300 * MIB, "{out}");
    assert_eq!(out.u64(&format!("procs.pid.{b_pid}")), 10 * MIB + 300 * MIB, "{out}");
}

#[test]
fn nvidia_ml_py_sees_a_busy_device_and_its_process() {
    let sim = Sim::new();
    // 1000 kernels of 20 ms keep the device busy for 20 s, longer than the
    // wait below; the process is killed once it has been seen.
    let busy = sim.spawn(sim.c("sim_launch").args(["queue", "1000", "20000"]));
    let busy_pid = busy.pid();
    let positive = |out: &Output, key: &str| out.find(key).and_then(|v| v.parse::<u64>().ok()).is_some_and(|v| v > 0);
    let out = poll::fetch_until(
        "NVML to report the device busy and the busy process's samples",
        || sim.run(sim.py("sim_nvml.py").args(["utilization", "0"])),
        |out| {
            out.success()
                && out.find("util.gpu").and_then(|v| v.parse::<u64>().ok()).is_some_and(|gpu| gpu >= 50)
                && positive(out, &format!("putil.pid.{busy_pid}"))
        },
    );
    assert!(out.u64("util.gpu") <= 100, "{out}");
    assert!(out.u64(&format!("putil.ts.{busy_pid}")) > 0, "{out}");
    let _ = busy.kill9();
}
