//! How long the one local path takes: `gpuslice tenant admit` and
//! `gpuslice tenant release`, each a whole command (process start, the
//! request over the control socket, the monitor's round that decides it,
//! creates the tenant's ledger and writes its caps, the answer), against a
//! monitor on simgpu with 8 devices. Prints min, median, p95 and max over
//! the runs, and the same for `gpuslice --version` (the cost of starting
//! the command alone), so that the monitor's part can be read off.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench admission`
//! (artefacts from `target/release`, or `GS_TEST_TARGET_DIR=target/debug`).

#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{gpuslice_bin, Sim};
use monitor_support::{Monitor, MonitorOptions};
use std::process::Command;
use std::time::{Duration, Instant};

const RUNS: usize = 40;

fn gpuslice(sim: &Sim) -> Command {
    let mut cmd = sim.command(gpuslice_bin());
    cmd.env_remove("LD_PRELOAD");
    cmd
}

fn timed(mut cmd: Command) -> Duration {
    let start = Instant::now();
    let out = cmd.output().expect("gpuslice runs");
    let took = start.elapsed();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    took
}

fn row(name: &str, mut runs: Vec<Duration>) {
    runs.sort();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| &runs[((runs.len() - 1) as f64 * q).round() as usize];
    println!("| {name:<28} | {:>7.1} | {:>7.1} | {:>7.1} | {:>7.1} |", ms(&runs[0]), ms(at(0.5)), ms(at(0.95)), ms(at(1.0)));
}

fn main() {
    let sim = Sim::new().devices(8).memory("16GiB").context_memory("64MiB");
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let (mut admit, mut release, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..RUNS {
        let tenant = format!("job-{run}");
        let device = (run % 8).to_string();
        let mut cmd = gpuslice(&sim);
        cmd.args(["tenant", "admit", &tenant, "--device", &device, "--memory", "4GiB", "--share", "25", "--owner-uid", "1000"]);
        cmd.arg("--dir").arg(sim.ledger_dir());
        admit.push(timed(cmd));
        let mut cmd = gpuslice(&sim);
        cmd.args(["tenant", "release", &tenant, "--dir"]).arg(sim.ledger_dir());
        release.push(timed(cmd));
        let mut cmd = gpuslice(&sim);
        cmd.arg("--version");
        bare.push(timed(cmd));
    }
    println!("{RUNS} runs each, wall time of the whole command in ms");
    println!("| command                      |     min |  median |     p95 |     max |");
    println!("|------------------------------|---------|---------|---------|---------|");
    row("gpuslice tenant admit", admit);
    row("gpuslice tenant release", release);
    row("gpuslice --version", bare);
    drop(monitor);
}
