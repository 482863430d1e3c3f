//! What the compute tests share (`tests/compute_shares.rs`,
//! `tests/compute_hostile.rs`): one test at a time, a simulated GPU under
//! the shim, and saturating clients whose per-bin counts say how much of
//! the device each got.

#![allow(dead_code)]

use gpuslice_tests::{Output, Running, Sim};
use std::time::Duration;

/// These tests measure device time against wall time: one at a time, so
/// that they do not take each other's CPU (two cores run them).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn sim() -> Sim {
    Sim::new().shim().timeout(Duration::from_secs(120))
}

/// Kernel time per 100 ms bin since the client's first launch, µs
/// (`tests/python/fairness_load.py saturate`).
pub fn busy_bins(out: &Output, kernel_us: f64) -> Vec<f64> {
    let mut bins = Vec::new();
    for line in out.stdout.lines() {
        let mut fields = line.split_whitespace();
        let bin = fields.next().and_then(|f| f.strip_prefix("bin=")).and_then(|b| b.parse::<usize>().ok());
        let n = fields.next().and_then(|f| f.strip_prefix("n=")).and_then(|n| n.parse::<f64>().ok());
        if let (Some(bin), Some(n)) = (bin, n) {
            if bins.len() <= bin {
                bins.resize(bin + 1, 0.0);
            }
            bins[bin] = n * kernel_us;
        }
    }
    bins
}

/// The share of wall time `bins` ran between `from_s` and `to_s`.
pub fn busy_ratio(bins: &[f64], from_s: f64, to_s: f64) -> f64 {
    let (from, to) = ((from_s * 10.0) as usize, (to_s * 10.0) as usize);
    bins.iter().skip(from).take(to - from).sum::<f64>() / ((to - from) as f64 * 100_000.0)
}

/// fairness_load.py saturating the device with 1 ms kernels as `tenant`,
/// started.
pub fn saturate(sim: &Sim, tenant: &str, envs: &[(&str, &str)], seconds: &str) -> Running {
    let mut cmd = sim.py("fairness_load.py");
    cmd.env("GPUSLICE_TENANT", tenant).envs(envs.iter().copied()).args(["saturate", "1000", seconds]);
    let mut running = sim.spawn(&mut cmd);
    running.wait_for("started");
    running
}
