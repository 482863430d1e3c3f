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

/// The `p` quantile (0 to 1) of `sorted`, by the nearest rank below.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted.get(((sorted.len().max(1) - 1) as f64 * p) as usize).copied().unwrap_or(f64::NAN)
}

/// A training loop of priority 0 beside an inference tenant's bursts of
/// priority 1, measured in cycles of bursts on and off
/// ([`priority_loop`]).
pub struct PriorityLoop {
    /// The part of its steps the training loop lost in each cycle's
    /// on-phase against the off-phase beside it.
    pub lost: Vec<f64>,
    /// Burst latencies alone and beside the training loop, µs, sorted.
    pub alone_us: Vec<f64>,
    pub shared_us: Vec<f64>,
}

impl PriorityLoop {
    /// The part of the device the bursts use: 20 kernels of 200 µs every 50 ms.
    pub const USED: f64 = 20.0 * 200.0 / 50_000.0;

    pub fn median_lost(&self) -> f64 {
        let mut lost = self.lost.clone();
        lost.sort_by(f64::total_cmp);
        percentile(&lost, 0.5)
    }

    pub fn summary(&self) -> String {
        let each = self.lost.iter().map(|l| format!("{:.1}", 100.0 * l)).collect::<Vec<_>>().join(", ");
        let (a, s) = (&self.alone_us, &self.shared_us);
        format!(
            "training loop beside bursts using {:.0} %: lost {:.1} % of its steps (median of {} cycles: {each}); \
             burst latency alone p50 {:.0} us p99 {:.0} us, shared p50 {:.0} us ({:.2}x) p99 {:.0} us ({:.2}x)",
            100.0 * Self::USED,
            100.0 * self.median_lost(),
            self.lost.len(),
            percentile(a, 0.5),
            percentile(a, 0.99),
            percentile(s, 0.5),
            percentile(s, 0.5) / percentile(a, 0.5),
            percentile(s, 0.99),
            percentile(s, 0.99) / percentile(a, 0.99),
        )
    }
}

/// Runs a training loop (steps of 20 kernels of 50 µs, synchronised every
/// step, priority 0) beside an inference tenant's bursts (20 kernels of
/// 200 µs every 50 ms, priority 1) on `sim`, whose monitor runs. The bursts
/// come and go in `cycles` of `on_s` seconds on and as many off, and the
/// training loop's steps in each on-phase are set against those in the
/// off-phase after it: the two halves of a cycle share the host's spell,
/// which one measurement alone and one shared, seconds apart, did not (the
/// same build lost 11 % in one attempt and 29 % in the next). The bursts'
/// latency alone is measured first, over 3 s.
pub fn priority_loop(sim: &Sim, cycles: usize, on_s: f64) -> PriorityLoop {
    let bursts = |seconds: &str, epoch: Option<&str>| {
        let mut cmd = sim.py("fairness_load.py");
        cmd.env("GPUSLICE_TENANT", "inference").env("GPUSLICE_PRIORITY", "1").args(["burst", "200", "20", "50", seconds]);
        if let Some(epoch) = epoch {
            cmd.env("FAIRNESS_EPOCH", epoch).args([on_s.to_string(), on_s.to_string()]);
        }
        sim.spawn(&mut cmd)
    };
    let latencies = |out: &Output, skip: usize| {
        let mut v: Vec<f64> = out.all("burst_us").iter().filter_map(|s| s.parse().ok()).skip(skip).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let alone_us = latencies(&bursts("3", None).wait(), 5);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let epoch = format!("{:.3}", now.as_secs_f64() + 1.0);
    let seconds = format!("{}", 1.0 + 2.0 * on_s * cycles as f64);
    let mut train = sim.py("fairness_load.py");
    train.env("GPUSLICE_TENANT", "training").env("FAIRNESS_EPOCH", &epoch).args(["steps", "50", "20", "0", &seconds]);
    let train = sim.spawn(&mut train);
    let shared = bursts(&seconds, Some(&epoch));
    let (train, shared) = (train.wait(), shared.wait());
    let shared_us = latencies(&shared, 0);
    // Kernels of finished steps per 100 ms since the epoch.
    let kernels = busy_bins(&train, 1.0);
    let steps_per_s = |from_s: f64, to_s: f64| -> f64 {
        let bins = (from_s * 10.0).round() as usize..(to_s * 10.0).round() as usize;
        bins.map(|b| kernels.get(b).copied().unwrap_or(0.0)).sum::<f64>() / 20.0 / (to_s - from_s)
    };
    // Each cycle: steps a second with bursts (past their first 0.2 s) and
    // without (past the 0.5 s for which a tenant of priority 1 that ran
    // counts as active, and the training loop keeps its queue short).
    let lost = (0..cycles)
        .map(|k| {
            let on = 2.0 * on_s * k as f64;
            let alone = steps_per_s(on + on_s + 0.7, on + 2.0 * on_s);
            assert!(alone > 0.0, "the training loop made no step in cycle {k}'s off-phase, with no bursts\n{train}");
            1.0 - steps_per_s(on + 0.2, on + on_s) / alone
        })
        .collect();
    PriorityLoop { lost, alone_us, shared_us }
}
