//! simgpu's execution model seen by real processes: launches are
//! asynchronous and queued, synchronisation waits for the queue, events time
//! the work, graphs and the other launch forms run their kernels, and two
//! processes contending for one device each get about half of it.

use gpuslice_tests::{cu, Sim};

#[test]
fn launches_return_before_their_work_completes() {
    let sim = Sim::new();
    let out = sim.run(sim.c("sim_launch").args(["async", "200000"]));
    out.assert_success();
    assert!(out.f64("launch_us") < 50_000.0, "a 200 ms kernel's launch must return at once\n{out}");
    out.assert_rc("query", cu::NOT_READY);
    out.assert_rc("event_query", cu::NOT_READY);
    assert!(out.f64("sync_us") >= 140_000.0, "cuCtxSynchronize must wait for the kernel\n{out}");
    assert!(out.f64("total_us") >= 195_000.0, "{out}");
    out.assert_rc("query_after", cu::SUCCESS);
    out.assert_rc("elapsed", cu::SUCCESS);
    let elapsed_ms = out.f64("elapsed_ms");
    assert!((180.0..=600.0).contains(&elapsed_ms), "events must time the 200 ms kernel\n{out}");
}

#[test]
fn synchronize_waits_for_all_queued_work() {
    let sim = Sim::new();
    let out = sim.run(sim.c("sim_launch").args(["queue", "20", "20000"]));
    out.assert_success();
    // 20 kernels of 20 ms: submitting is quick, draining takes ~400 ms.
    assert!(out.f64("submit_us") < 100_000.0, "{out}");
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
    let mut running: Vec<_> =
        (0..processes).map(|_| sim.spawn(sim.c("sim_launch").args(["contend", "40", "20000"]))).collect();
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
    let together = contend(&sim, 2);
    for (i, wall_us) in together.iter().enumerate() {
        let share_ratio = WORK_US / wall_us;
        assert!(
            (0.3..=0.7).contains(&share_ratio),
            "process {i} got {share_ratio:.2} of the device ({WORK_US} us of kernels took {wall_us} us; \
             alone {alone_us} us; both: {together:?})"
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
    assert!(out.f64("graph.capture_us") < KERNEL_US, "capturing must not run kernels\n{out}");
    assert!(out.f64("graph.captured_launch_us") < KERNEL_US, "a graph launch is asynchronous\n{out}");
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
