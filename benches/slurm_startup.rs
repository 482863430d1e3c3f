//! What the Slurm integration adds to a job's start, on a plain Slurm node
//! and on one with deploy/slurm installed (the Prolog admitting the tenant
//! through the monitor, the TaskProlog putting the task under the shim,
//! the Epilog releasing it). Target: at most 50 ms more.
//!
//! Both clusters run at once (tests/slurm_support: each its own munged,
//! slurmctld and slurmd on private ports) and the runs alternate between
//! them, so that a busy moment of the machine falls on both. Each run
//! starts on an idle node: the previous job, Epilog included, is over.
//! Both nodes have the same two site Prologs (`prolog.d/90-site` and
//! `10-site`, which append the time they ran to a file); the integrated
//! node has gpuslice's Prolog between them (`50-gpuslice`). Every time is
//! the wall clock of this one machine, so the host's and the job's
//! timestamps compare.
//!
//! Per `sbatch --gres=shard:2` job whose script runs `memctl init clock`
//! (the time once `cuInit` has returned, taken by the job itself):
//! - sbatch to the first CUDA call: from just before `sbatch` starts. It
//!   includes the controller's wait to schedule the job, whose phase
//!   swings it by a second or more from one job to the next and from one
//!   cluster to the other: too noisy to show tens of milliseconds.
//! - the node's first Prolog to the first CUDA call: from `90-site`, the
//!   first thing slurmd runs for the job on the node, once the controller
//!   has allocated it. Everything the integration does to a starting job
//!   is in it (gpuslice's Prolog, the TaskProlog, the shim's start), and
//!   the scheduler's wait is not.
//! - the Prologs: from `90-site` to `10-site`; the integrated node's less
//!   the plain node's is gpuslice's Prolog's own time.
//!
//! And per `srun --gres=shard:2 memctl init`: from starting srun until the
//! job's `init=` line reaches srun's output.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench slurm_startup`,
//! or `BENCH_ONLY=slurm_startup bash scripts/bench.sh`, which keeps the
//! table in benches/results-slurm.md. Prints a table; timings are
//! wall-clock on a possibly busy machine, so compare the rows of one run.

#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;
#[path = "../tests/slurm_support/mod.rs"]
mod slurm_support;

use gpuslice_tests::compile_c;
use slurm_support::{Cluster, ClusterOptions};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

const RUNS: usize = 20;

/// One sbatch job's times, ms: sbatch to the first CUDA call, the node's
/// first Prolog to it, and the Prologs' span.
struct Batch {
    total_ms: f64,
    node_ms: f64,
    prologs_ms: f64,
}

fn unix_now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("the clock is before 1970").as_secs_f64()
}

fn sbatch_run(cluster: &Cluster, script: &str) -> Batch {
    cluster.wait_idle();
    let before = unix_now_s();
    let job = cluster.sbatch(&["--gres=shard:2"], script);
    let out = cluster.batch_output(&job, &format!("{job}_4294967294"));
    let get = |key: &str| -> f64 {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("job {job} printed no {key}:\n{out}"))
    };
    assert_eq!(get("init"), 0.0, "cuInit failed in job {job}:\n{out}");
    let clock = get("clock");
    let order = std::fs::read_to_string(cluster.dir().join("log/site-order")).expect("no site-order log");
    let at = |name: &str| -> f64 {
        order
            .lines()
            .find(|l| l.starts_with(&format!("prolog.d/{name} {job} ")))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} Prolog for job {job}:\n{order}"))
    };
    let (first, last) = (at("90-site"), at("10-site"));
    Batch { total_ms: (clock - before) * 1e3, node_ms: (clock - first) * 1e3, prologs_ms: (last - first) * 1e3 }
}

/// Milliseconds from starting srun to the job's `init=` line.
fn srun_run(cluster: &Cluster) -> f64 {
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

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// The median (the mean of the two middle values for an even count).
fn median(values: &[f64]) -> f64 {
    let v = sorted(values.to_vec());
    let n = v.len();
    if n.is_multiple_of(2) {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    } else {
        v[n / 2]
    }
}

fn percentile(values: &[f64], p: f64) -> f64 {
    let v = sorted(values.to_vec());
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    let plain = Cluster::start(ClusterOptions { integration: false, site_scripts: true, ..Default::default() });
    let integrated = Cluster::start(ClusterOptions { site_scripts: true, ..Default::default() });
    let memctl = compile_c("memctl");
    let script = format!("#!/bin/sh\nexec {} init clock\n", memctl.display());
    // One unmeasured run of each kind: the first job of a cluster also loads plugins.
    for cluster in [&plain, &integrated] {
        sbatch_run(cluster, &script);
        srun_run(cluster);
    }
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let (mut srun_without, mut srun_with) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        without.push(sbatch_run(&plain, &script));
        with.push(sbatch_run(&integrated, &script));
        srun_without.push(srun_run(&plain));
        srun_with.push(srun_run(&integrated));
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let log = integrated.integration_log();
    assert_eq!(log.matches("admitted slurm-").count(), 2 * RUNS + 2, "every job was admitted:\n{log}");

    let target_dir = gpuslice_tests::target_dir();
    let build = target_dir.file_name().map_or("?".into(), |n| n.to_string_lossy().to_string());
    println!(
        "Slurm job start-up, plain node against one with deploy/slurm and the monitor, {RUNS} `--gres=shard:2` jobs each, \
         alternating ({build} build, {} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("load average before: {}", load_before.trim());
    println!("| from … to the job's first CUDA call (`cuInit` returned) | plain median | with median | added, median | added, median of paired runs | plain p90 / with p90 | target |");
    println!("|---|---|---|---|---|---|---|");
    let row = |what: &str, plain: &[f64], with: &[f64], target: &str| {
        let paired: Vec<f64> = plain.iter().zip(with).map(|(p, w)| w - p).collect();
        println!(
            "| {what} | {:.1} ms | {:.1} ms | {:+.1} ms | {:+.1} ms | {:.1} / {:.1} ms | {target} |",
            median(plain),
            median(with),
            median(with) - median(plain),
            median(&paired),
            percentile(plain, 0.9),
            percentile(with, 0.9),
        );
    };
    let pick = |runs: &[Batch], f: fn(&Batch) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
    row(
        "`sbatch` (host clock before it)",
        &pick(&without, |b| b.total_ms),
        &pick(&with, |b| b.total_ms),
        "(the scheduler's wait dominates)",
    );
    row("the node's first Prolog (slurmd, after allocation)", &pick(&without, |b| b.node_ms), &pick(&with, |b| b.node_ms), "≤ +50 ms");
    row("`srun` started", &srun_without, &srun_with, "≤ +50 ms");
    println!(
        "| the Prologs alone (90-site to 10-site; with: gpuslice's between) | {:.1} ms | {:.1} ms | {:+.1} ms | {:+.1} ms | {:.1} / {:.1} ms | gpuslice's Prolog |",
        median(&pick(&without, |b| b.prologs_ms)),
        median(&pick(&with, |b| b.prologs_ms)),
        median(&pick(&with, |b| b.prologs_ms)) - median(&pick(&without, |b| b.prologs_ms)),
        median(&pick(&without, |b| b.prologs_ms).iter().zip(pick(&with, |b| b.prologs_ms)).map(|(p, w)| w - p).collect::<Vec<_>>()),
        percentile(&pick(&without, |b| b.prologs_ms), 0.9),
        percentile(&pick(&with, |b| b.prologs_ms), 0.9),
    );
    println!("load average after: {}", load_after.trim());
    let all = |runs: &[Batch], f: fn(&Batch) -> f64| runs.iter().map(|b| format!("{:.0}", f(b))).collect::<Vec<_>>().join(" ");
    eprintln!("sbatch, ms, plain: {}", all(&without, |b| b.total_ms));
    eprintln!("sbatch, ms, with:  {}", all(&with, |b| b.total_ms));
    eprintln!("node, ms, plain: {}", all(&without, |b| b.node_ms));
    eprintln!("node, ms, with:  {}", all(&with, |b| b.node_ms));
    eprintln!("prologs, ms, plain: {}", all(&without, |b| b.prologs_ms));
    eprintln!("prologs, ms, with:  {}", all(&with, |b| b.prologs_ms));
}
