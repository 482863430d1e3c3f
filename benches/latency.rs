//! How soon things happen: the figures the end-to-end tests no longer bound.
//!
//! The tests check that a launch returns while its kernel is pending, that a
//! killed process's memory comes back, that a bypass is killed; how long each
//! took depends on how busy the machine is, so a bound on it failed on a
//! shared machine and said little on an idle one. This benchmark measures
//! them instead, on simgpu and with the `gpuslice` monitor, and prints one
//! table row per figure: runs, minimum, median and maximum, and the bound a
//! test once asserted, for comparison.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench latency`
//! (the artefacts are taken from `target/release`, or `GS_TEST_TARGET_DIR`).

#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{Output, Running, Sim, MIB};
use monitor_support::{kill9, pid_alive, status_json, tenant, Monitor, MonitorOptions};
use std::time::{Duration, Instant};

/// Runs of each program-based figure.
const RUNS: usize = 5;
/// Runs of each monitor-based figure (each one process and one kill).
const KILLS: usize = 10;
/// How long a figure may take before the benchmark gives up on it.
const GIVE_UP: Duration = Duration::from_secs(30);
const TENANT: &str = "bench";

struct Figure {
    what: &'static str,
    unit: &'static str,
    samples: Vec<f64>,
    /// The bound a test used to assert.
    was: &'static str,
}

impl Figure {
    fn new(what: &'static str, unit: &'static str, was: &'static str) -> Figure {
        Figure { what, unit, samples: Vec::new(), was }
    }

    fn row(&self) -> String {
        let mut sorted = self.samples.clone();
        sorted.sort_by(f64::total_cmp);
        let digits = if self.unit == "ratio" { 2 } else { 1 };
        let cell = |v: Option<&f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"));
        format!(
            "{:<58} {:>4} {:>9} {:>9} {:>9} {:<5} {}",
            self.what,
            sorted.len(),
            cell(sorted.first()),
            cell(sorted.get(sorted.len() / 2)),
            cell(sorted.last()),
            self.unit,
            self.was
        )
    }
}

fn succeeded(out: Output) -> Output {
    out.assert_success();
    out
}

/// Polls `condition` every millisecond; the time it took to hold.
fn time_until(what: &str, mut condition: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < GIVE_UP, "{what} did not happen within {GIVE_UP:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    start.elapsed()
}

fn seconds_to_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Figures from simgpu's own test programs: how soon calls return, what
/// events read, how two processes share the device.
fn simgpu_figures() -> Vec<Figure> {
    let mut launch = Figure::new("cuLaunchKernel returns (200 ms kernel, C)", "us", "was < 50 ms");
    let mut elapsed = Figure::new("cuEventElapsedTime around a 200 ms kernel (C)", "ms", "was 180..=600 ms");
    let mut submit = Figure::new("20 launches of 20 ms kernels submitted", "us", "was < 100 ms");
    let mut capture = Figure::new("stream capture of two 30 ms kernels, then drain", "us", "was < 30 ms");
    let mut graph_launch = Figure::new("cuGraphLaunch returns (two 30 ms kernels)", "us", "was < 30 ms");
    let mut host_fn = Figure::new("kernels, host function and callback queued", "us", "was < 50 ms");
    let mut py_launch = Figure::new("cuLaunchKernel returns (150 ms kernel, cuda-bindings)", "us", "was < 50 ms");
    let mut py_elapsed = Figure::new("cuEventElapsedTime around a 150 ms kernel (cuda-bindings)", "ms", "was 135..=500 ms");
    let mut share = Figure::new("device share of each of two contending processes", "ratio", "was 0.3..=0.7");
    let sim = Sim::new().memory("2GiB").context_memory("64MiB");
    for _ in 0..RUNS {
        let out = succeeded(sim.run(sim.c("sim_launch").args(["async", "200000"])));
        launch.samples.push(out.f64("launch_us"));
        elapsed.samples.push(out.f64("elapsed_ms"));
        let out = succeeded(sim.run(sim.c("sim_launch").args(["queue", "20", "20000"])));
        submit.samples.push(out.f64("submit_us"));
        let out = succeeded(sim.run(sim.c("sim_features").arg("30000")));
        capture.samples.push(out.f64("graph.capture_us"));
        graph_launch.samples.push(out.f64("graph.captured_launch_us"));
        let out = succeeded(sim.run(sim.c("sim_streams").arg("hostfn")));
        host_fn.samples.push(out.f64("submit_us"));
        let out = succeeded(sim.run(sim.py("sim_driver.py").arg("150000")));
        py_launch.samples.push(out.f64("launch_us"));
        py_elapsed.samples.push(out.f64("elapsed_ms"));
    }
    // 40 kernels of 20 ms each, both told to go at once.
    const WORK_US: f64 = 40.0 * 20_000.0;
    for _ in 0..RUNS.div_ceil(2) {
        let mut both: Vec<Running> = (0..2).map(|_| sim.spawn(sim.c("sim_launch").args(["contend", "40", "20000"]))).collect();
        for p in &mut both {
            p.wait_for("ready");
        }
        for p in &mut both {
            p.send_line("go");
        }
        for p in both {
            share.samples.push(WORK_US / succeeded(p.wait()).f64("wall_us"));
        }
    }
    vec![launch, elapsed, submit, capture, graph_launch, host_fn, py_launch, py_elapsed, share]
}

/// A tenant process under the shim holding 64 MiB until killed.
fn holder(sim: &Sim, namespaced: bool) -> Running {
    let args = ["init", "ctx", "alloc:a:64M", "hold"];
    let mut running = if namespaced {
        let mut cmd = sim.command("unshare");
        cmd.args(["--pid", "--fork", "--kill-child"]).arg(gpuslice_tests::compile_c("memctl")).args(args);
        sim.spawn(&mut cmd)
    } else {
        sim.spawn(sim.c("memctl").args(args))
    };
    running.wait_for("ready");
    running
}

/// From `kill -9` of a tenant process to its memory back in the ledger,
/// read straight from the ledger file.
fn reclaim_figure(namespaced: bool) -> Figure {
    let mut figure = if namespaced {
        Figure::new("kill -9 to memory reclaimed (other PID namespace)", "ms", "was < 1 s")
    } else {
        Figure::new("kill -9 to memory reclaimed by the monitor", "ms", "was < 1 s")
    };
    if namespaced && !std::process::Command::new("unshare").args(["--pid", "--fork", "true"]).status().is_ok_and(|s| s.success()) {
        figure.what = "kill -9 to memory reclaimed (other PID namespace): no unshare";
        return figure;
    }
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant(TENANT);
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    for _ in 0..KILLS {
        let running = holder(&sim, namespaced);
        let path = ledger::tenant_path(&sim.ledger_dir(), TENANT);
        let ledger = ledger::Ledger::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(ledger.used_bytes(0), (64 + 64) * MIB);
        let took = if namespaced {
            let status = status_json(&sim);
            let host_pid = tenant(&status, TENANT).expect("the tenant is listed")["processes"][0]["pid"].as_u64().expect("a pid");
            let start = Instant::now();
            kill9(host_pid as u32);
            let took = start.elapsed() + time_until("the reclaim", || ledger.used_bytes(0) == 0);
            let _ = running.wait();
            took
        } else {
            let start = Instant::now();
            let _ = running.kill9();
            start.elapsed() + time_until("the reclaim", || ledger.used_bytes(0) == 0)
        };
        figure.samples.push(seconds_to_ms(took));
    }
    figure
}

/// From a process without the shim holding memory to its death, with
/// `on_violation = "kill"` and no grace.
fn bypass_kill_figure() -> Figure {
    let mut figure = Figure::new("bypass holding memory to killed (no grace)", "ms", "not bounded");
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant(TENANT);
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "on_violation = \"kill\"\nviolation_grace = \"0s\"\n").expect("cannot write the configuration");
    let _monitor = Monitor::start(&sim, MonitorOptions { config: Some(config), ..Default::default() });
    for _ in 0..KILLS {
        let mut cmd = sim.c("memctl");
        cmd.env_remove("LD_PRELOAD").args(["init", "ctx", "alloc:x:64M", "hold"]);
        let mut bypass = sim.spawn(&mut cmd);
        bypass.wait_for("ready");
        let pid = bypass.pid();
        figure.samples.push(seconds_to_ms(time_until("the kill", || !pid_alive(pid))));
        let _ = bypass.wait();
    }
    figure
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut figures = simgpu_figures();
    figures.push(reclaim_figure(false));
    figures.push(reclaim_figure(true));
    figures.push(bypass_kill_figure());
    println!("{:<58} {:>4} {:>9} {:>9} {:>9} {:<5} test bound", "figure", "runs", "min", "median", "max", "unit");
    for figure in &figures {
        println!("{}", figure.row());
    }
}
