//! simgpu's execution model seen by real processes: launches are
//! asynchronous and queued, synchronisation waits for the queue, events time
//! the work, graphs and the other launch forms run their kernels, and two
//! processes contending for one device each get about half of it.
//!
//! The checks are orders (a launch returned while its kernel was still
//! pending) and lower bounds that only the simulated work can make true (a
//! 1 s kernel keeps its process for at least 1 s); a slow machine passes
//! them all. How quickly calls return is measured by `benches/latency.rs`.

use gpuslice_tests::{cu, Sim};
use std::time::Instant;

/// A kernel long enough that no scheduling delay between a launch and the
/// query right after it lets it complete in between.
const LONG_KERNEL_US: u64 = 1_000_000;

/// Through cuda-bindings, each launch followed at once by `cuStreamQuery`
/// with nothing queued in between (an event record there could be what is
/// still pending): a plain launch of a 1 s kernel; a stream capture of an
/// hour-long kernel, which must leave the stream idle (if it does not, the
/// script stops at once rather than wait an hour); and a captured 1 s
/// kernel launched as a graph.
const LAUNCH_ORDER_PY: &str = r#"
import ctypes
import os
import sys
from cuda.bindings import driver as cu


def rc(key, result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    print(f"{key}={int(err)}")
    return rest[0] if len(rest) == 1 else rest


kernel_us = int(sys.argv[1])
rc("init", cu.cuInit(0))
dev = rc("device", cu.cuDeviceGet(0))
rc("set_current", cu.cuCtxSetCurrent(rc("retain", cu.cuDevicePrimaryCtxRetain(dev))))
func = rc("function", cu.cuModuleGetFunction(rc("module", cu.cuModuleLoadData(b"any image")), b"sim_sleep"))
stream = rc("stream", cu.cuStreamCreate(1))
capture_mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL


def launch(key, us):
    arg = ctypes.c_uint64(us)
    params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
    rc(key, cu.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, stream, ctypes.addressof(params), 0))


def query(key):
    status = int(cu.cuStreamQuery(stream)[0])
    print(f"{key}={status}")
    return status


launch("plain.launch", kernel_us)
query("plain.query")
rc("plain.sync", cu.cuStreamSynchronize(stream))
query("plain.query_after")

rc("hour.begin", cu.cuStreamBeginCapture(stream, capture_mode))
launch("hour.launch", 3_600_000_000)
graph = rc("hour.end", cu.cuStreamEndCapture(stream))
if query("hour.query") != 0:
    os._exit(1)
rc("hour.destroy", cu.cuGraphDestroy(graph))

rc("graph.begin", cu.cuStreamBeginCapture(stream, capture_mode))
launch("graph.capture_launch", kernel_us)
graph = rc("graph.end", cu.cuStreamEndCapture(stream))
graph_exec = rc("graph.instantiate", cu.cuGraphInstantiate(graph, 0))
rc("graph.launch", cu.cuGraphLaunch(graph_exec, stream))
query("graph.query")
rc("graph.sync", cu.cuStreamSynchronize(stream))
query("graph.query_after")
"#;

#[test]
fn launches_return_before_their_kernels_complete_and_capturing_queues_nothing() {
    let sim = Sim::new();
    let mut cmd = sim.command(gpuslice_tests::python());
    let out = sim.run(cmd.args(["-c", LAUNCH_ORDER_PY, &LONG_KERNEL_US.to_string()]));
    for key in ["plain.launch", "hour.begin", "hour.launch", "hour.end"] {
        out.assert_rc(key, cu::SUCCESS);
    }
    // A launch returns with its kernel pending; synchronising waits for it.
    out.assert_rc("plain.query", cu::NOT_READY);
    out.assert_rc("plain.query_after", cu::SUCCESS);
    // Had capturing queued the kernel, the stream would be busy for an hour
    // (had it run it, the script would not have finished).
    out.assert_rc("hour.query", cu::SUCCESS);
    for key in ["graph.capture_launch", "graph.instantiate", "graph.launch", "graph.sync"] {
        out.assert_rc(key, cu::SUCCESS);
    }
    out.assert_rc("graph.query", cu::NOT_READY);
    out.assert_rc("graph.query_after", cu::SUCCESS);
    out.assert_success();
}

#[test]
fn events_time_the_kernel_they_surround_and_synchronize_waits_for_it() {
    let sim = Sim::new();
    let started = Instant::now();
    let out = sim.run(sim.c("sim_launch").args(["async", &LONG_KERNEL_US.to_string()]));
    let lived_us = started.elapsed().as_micros() as f64;
    let kernel_us = LONG_KERNEL_US as f64;
    out.assert_success();
    // Right after the launch, the stream and the end event recorded behind
    // the kernel are pending...
    out.assert_rc("query", cu::NOT_READY);
    out.assert_rc("event_query", cu::NOT_READY);
    // ...and cuCtxSynchronize returned only once they had completed.
    out.assert_rc("query_after", cu::SUCCESS);
    assert!(out.f64("total_us") >= kernel_us * 0.975, "the kernel ran for its time\n{out}");
    out.assert_rc("elapsed", cu::SUCCESS);
    let elapsed_us = out.f64("elapsed_ms") * 1000.0;
    assert!(elapsed_us >= kernel_us * 0.9, "the events must time at least the kernel between them\n{out}");
    assert!(elapsed_us <= lived_us, "the events cannot be further apart than their process lived ({lived_us} us)\n{out}");
}

/// Kernels queued back to back run back to back: the events around them
/// are as far apart as the kernels' time, however late the simulated
/// device's worker thread wakes on a loaded machine (a real GPU does not
/// wait for a host thread between two queued kernels). Everything is queued
/// behind a first kernel, so no gap can come from the client either.
#[test]
fn events_around_queued_kernels_time_the_kernels_alone() {
    let sim = Sim::new();
    let out = sim.run(sim.py("event_gaps.py").args(["1000000", "200", "1000"]));
    out.assert_success();
    // Queried after the end event was recorded: every launch between the
    // events was queued before the device reached the first of them.
    assert_eq!(out.get("queued_before_start"), "True", "the launches were all queued behind the first kernel\n{out}");
    let (elapsed_us, expected_us) = (out.f64("elapsed_us"), out.f64("expected_us"));
    eprintln!("200 kernels of 1 ms: {elapsed_us:.1} us between the events");
    assert!(elapsed_us >= expected_us, "the events must time at least the kernels between them\n{out}");
    assert!(
        elapsed_us <= expected_us * 1.005,
        "the device idled between queued kernels: {elapsed_us:.1} us for {expected_us} us of kernels\n{out}"
    );
}

#[test]
fn synchronize_waits_for_all_queued_work() {
    let sim = Sim::new();
    let out = sim.run(sim.c("sim_launch").args(["queue", "20", "20000"]));
    out.assert_success();
    // 20 kernels of 20 ms: whatever submitting took, submitting and
    // synchronising together outlast draining the queue (~400 ms).
    assert!(out.f64("submit_us") + out.f64("sync_us") >= 380_000.0, "{out}");
}

#[test]
fn launches_block_once_about_1024_are_pending() {
    let sim = Sim::new();
    // 1500 kernels of 500 us: the first ~1024 queue at once, then each
    // launch waits for a slot, so submitting takes about 476 x 0.5 ms.
    let out = sim.run(sim.c("sim_launch").args(["queue", "1500", "500"]));
    out.assert_success();
    let submit_us = out.f64("submit_us");
    let total_us = submit_us + out.f64("sync_us");
    assert!(total_us >= 1500.0 * 500.0 * 0.97, "{out}");
    assert!(submit_us >= 150_000.0, "a full queue must block the launch\n{out}");
    assert!(out.f64("sync_us") >= 300_000.0, "about 1024 launches stay queued at the end\n{out}");
}

fn contend(sim: &Sim, processes: usize) -> Vec<f64> {
    let mut running: Vec<_> = (0..processes).map(|_| sim.spawn(sim.c("sim_launch").args(["contend", "40", "20000"]))).collect();
    for p in &mut running {
        p.wait_for("ready");
    }
    for p in &mut running {
        p.send_line("go");
    }
    running
        .into_iter()
        .map(|p| {
            let out = p.wait();
            out.assert_success();
            out.f64("wall_us")
        })
        .collect()
}

#[test]
fn two_processes_each_get_about_half_of_the_device() {
    // Each process has 40 kernels of 20 ms: 800 ms of device time. Alone it
    // needs 800 ms; sharing the device fairly, each needs about 1600 ms.
    const WORK_US: f64 = 40.0 * 20_000.0;
    let sim = Sim::new();
    let alone_us = contend(&sim, 1)[0];
    assert!(alone_us >= WORK_US * 0.97, "40 kernels of 20 ms take 800 ms: {alone_us} us");
    // Neither finishes before the other has had its turns: had one held the
    // device, it would be done in about 800 ms. At 1200 ms or more, each got
    // at most two thirds of the device while both ran, the other the rest.
    // (Only the two 'go' lines reaching them 400 ms apart could spoil that;
    // a slow machine otherwise only makes both take longer.)
    let together = contend(&sim, 2);
    for (i, wall_us) in together.iter().enumerate() {
        assert!(
            *wall_us >= WORK_US * 1.5,
            "process {i} finished its {WORK_US} us of kernels in {wall_us} us, as if alone on the device \
             (alone {alone_us} us; both: {together:?})"
        );
    }
}

#[test]
fn graphs_launch_forms_and_proc_address_variants_run_their_kernels() {
    const KERNEL_US: f64 = 30_000.0;
    let sim = Sim::new().env("SIMGPU_KERNEL_US", "60000");
    let out = sim.run(sim.c("sim_features").arg("30000"));
    out.assert_success();
    let at_least = |key: &str, us: f64| {
        assert!(out.f64(key) >= us * 0.9, "{key} must take about {us} us\n{out}");
    };
    at_least("graph.captured_run_us", 2.0 * KERNEL_US);
    at_least("graph.built_run_us", 3.0 * KERNEL_US);
    at_least("launch_ex.run_us", KERNEL_US);
    at_least("cooperative.run_us", KERNEL_US);
    at_least("plain.run_us", 60_000.0);
    out.assert_rc("ptsz.launch", cu::SUCCESS);
    at_least("ptsz.run_us", KERNEL_US);
    let resolved: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("proc.") && !l.contains(".matches=")).collect();
    assert_eq!(resolved.len(), 12, "{out}");
    for line in resolved {
        assert!(line.ends_with("=0"), "cuGetProcAddress failed: {line}\n{out}");
        let key = line.split('=').next().unwrap_or_default();
        assert_eq!(out.get(&format!("{key}.matches")), "1", "{key} resolved to the wrong variant\n{out}");
    }
}
