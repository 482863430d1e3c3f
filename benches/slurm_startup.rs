//! What the Slurm integration adds to a job's start: the wall time from
//! starting `srun --gres=shard:2` until the job's first CUDA call
//! (`cuInit`) has returned and said so on srun's output, on a plain Slurm
//! node and on one with deploy/slurm installed (the Prolog admitting the
//! tenant through the monitor, the TaskProlog putting the task under the
//! shim, the Epilog releasing it). Target: at most 50 ms more.
//!
//! Both clusters run at once (tests/slurm_support: each its own munged,
//! slurmctld and slurmd on private ports) and the runs alternate between
//! them, so that a busy moment of the machine falls on both. Each run
//! starts on an idle node: the previous job, Epilog included, is over.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench slurm_startup`.
//! Prints a table; timings are wall-clock on a possibly busy machine, so
//! compare the rows of one run.

#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;
#[path = "../tests/slurm_support/mod.rs"]
mod slurm_support;

use gpuslice_tests::compile_c;
use slurm_support::{Cluster, ClusterOptions};
use std::time::Instant;

const RUNS: usize = 20;

/// Milliseconds from starting srun to the job's `init=` line.
fn time_to_first_call(cluster: &Cluster) -> f64 {
    cluster.wait_idle();
    let mut cmd = cluster.srun(&["--gres=shard:2"], compile_c("memctl"), &["init"]);
    let started = Instant::now();
    let mut job = cluster.sim.spawn(&mut cmd);
    let rc = job.wait_for("init");
    let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(rc, "0", "cuInit failed in the job");
    job.wait().assert_success();
    elapsed_ms
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    let plain = Cluster::start(ClusterOptions { integration: false, ..Default::default() });
    let integrated = Cluster::start(ClusterOptions::default());
    // One unmeasured run each: the first job of a cluster also loads plugins.
    time_to_first_call(&plain);
    time_to_first_call(&integrated);
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        without.push(time_to_first_call(&plain));
        with.push(time_to_first_call(&integrated));
    }
    let log = integrated.integration_log();
    assert_eq!(log.matches("admitted slurm-").count(), RUNS + 1, "every measured job was admitted:\n{log}");
    for samples in [&mut without, &mut with] {
        samples.sort_by(f64::total_cmp);
    }
    println!("srun to the job's first CUDA call (cuInit returned), {RUNS} jobs each, --gres=shard:2");
    println!("{:<34} {:>10} {:>10} {:>10}", "node", "median ms", "p90 ms", "min ms");
    for (name, samples) in [("plain Slurm", &without), ("with deploy/slurm and the monitor", &with)] {
        println!("{name:<34} {:>10.1} {:>10.1} {:>10.1}", percentile(samples, 0.5), percentile(samples, 0.9), samples[0]);
    }
    println!(
        "added by the integration: {:+.1} ms at the median (target: at most +50 ms)",
        percentile(&with, 0.5) - percentile(&without, 0.5)
    );
}
