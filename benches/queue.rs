//! The admission queue under load: 200 jobs waiting behind one that holds
//! the whole (simulated) GPU, on simgpu.
//!
//! Figures, each over a few runs (min, median, max):
//! - submitting 200 jobs until `gpuslice queue` lists them all as waiting;
//! - `gpuslice queue --json` with 200 jobs;
//! - admission latency: from the holder's end to the first waiting job's
//!   command printing, and to all 200 running;
//! - the CPU time all waiting `gpuslice` processes spent while the 200 waited
//!   for 2 s with nothing happening (the cost of waiting, not spinning).
//!
//! Run: `cargo build --release --workspace && cargo bench --bench queue`
//! (artefacts from `target/release`, or `GS_TEST_TARGET_DIR=target/debug`).
//!
//! A monitor runs, and admits the jobs. The run below was measured when
//! each waiting job decided for itself, before the monitor admitted them:
//! One run on a 2-core VM shared with other builds (load average 7.6),
//! release build, medians of 3: submit 200 jobs 1.4 s; `gpuslice queue
//! --json` 10 ms; holder ends → first command runs 31 ms, → all 200 run
//! 1.9 s; 200 waiting processes use 0.39 s of CPU per 2 s idle (128 of them
//! had inotify instances, the host's `max_user_instances`; the other 72
//! wait on the clock).

#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{gpuslice_bin, Running, Sim};
use monitor_support::{Monitor, MonitorOptions};
use std::process::Command;
use std::time::{Duration, Instant};

const JOBS: usize = 200;
const RUNS: usize = 3;
const GIVE_UP: Duration = Duration::from_secs(300);
const JOB_SCRIPT: &str = "echo started=1; read line || true";

fn gpuslice(sim: &Sim) -> Command {
    let mut cmd = sim.command(gpuslice_bin());
    cmd.env_remove("LD_PRELOAD");
    cmd
}

fn submit(sim: &Sim, memory: Option<&str>) -> Running {
    let mut cmd = gpuslice(sim);
    cmd.args(["run", "--sim", "--queue", "--dir"]).arg(sim.ledger_dir());
    if let Some(memory) = memory {
        cmd.args(["--memory", memory]);
    }
    sim.spawn(cmd.args(["--", "sh", "-c", JOB_SCRIPT]))
}

fn queue_json(sim: &Sim) -> serde_json::Value {
    let out = sim.run(gpuslice(sim).args(["queue", "--json", "--dir"]).arg(sim.ledger_dir()));
    out.assert_success();
    serde_json::from_str(&out.stdout).expect("queue --json is JSON")
}

fn waiting(sim: &Sim) -> usize {
    queue_json(sim)["jobs"].as_array().map_or(0, |jobs| jobs.iter().filter(|j| j["state"] == "waiting").count())
}

/// Polls `condition` every `interval`; the time it took to hold.
fn time_until(what: &str, interval: Duration, mut condition: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < GIVE_UP, "{what} did not happen within {GIVE_UP:?}");
        std::thread::sleep(interval);
    }
    start.elapsed()
}

/// User + system CPU time of process `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are fields 14 and 15, i.e. 11 and 12 after the name.
    fields.get(11).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0) + fields.get(12).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0)
}

struct Figures {
    submit_ms: Vec<f64>,
    list_ms: Vec<f64>,
    first_ms: Vec<f64>,
    all_ms: Vec<f64>,
    idle_cpu_ms: Vec<f64>,
}

fn one_run(figures: &mut Figures) {
    let sim = Sim::new().devices(1).memory("16GiB");
    // The monitor admits the jobs.
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let mut holder = submit(&sim, None);
    holder.wait_for("started");
    let start = Instant::now();
    let mut jobs: Vec<Running> = (0..JOBS).map(|_| submit(&sim, Some("64MiB"))).collect();
    // Each look is a `gpuslice queue` process: not too often.
    time_until("all jobs to wait", Duration::from_millis(50), || waiting(&sim) == JOBS);
    figures.submit_ms.push(start.elapsed().as_secs_f64() * 1e3);

    let start = Instant::now();
    let listed = queue_json(&sim);
    figures.list_ms.push(start.elapsed().as_secs_f64() * 1e3);
    assert_eq!(listed["jobs"].as_array().map(Vec::len), Some(JOBS + 1));

    // SAFETY: sysconf has no preconditions.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let before: u64 = jobs.iter().map(|j| cpu_ticks(j.pid())).sum();
    std::thread::sleep(Duration::from_secs(2));
    let after: u64 = jobs.iter().map(|j| cpu_ticks(j.pid())).sum();
    figures.idle_cpu_ms.push((after - before) as f64 / ticks_per_s * 1e3);

    let start = Instant::now();
    holder.wait().assert_success();
    let mut first = None;
    let mut started = [false; JOBS];
    time_until("all jobs to start", Duration::from_millis(1), || {
        for (i, job) in jobs.iter_mut().enumerate() {
            if !started[i] && job.has_printed("started") {
                started[i] = true;
                first.get_or_insert_with(|| start.elapsed());
            }
        }
        started.iter().all(|s| *s)
    });
    figures.all_ms.push(start.elapsed().as_secs_f64() * 1e3);
    figures.first_ms.push(first.unwrap_or_default().as_secs_f64() * 1e3);
    for job in jobs.drain(..) {
        job.wait().assert_success();
    }
}

fn row(what: &str, samples: &[f64]) -> String {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let cell = |v: Option<&f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.1}"));
    format!(
        "{what:<62} {:>4} {:>9} {:>9} {:>9} ms",
        sorted.len(),
        cell(sorted.first()),
        cell(sorted.get(sorted.len() / 2)),
        cell(sorted.last())
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut figures = Figures { submit_ms: vec![], list_ms: vec![], first_ms: vec![], all_ms: vec![], idle_cpu_ms: vec![] };
    for _ in 0..RUNS {
        one_run(&mut figures);
    }
    println!("{:<62} {:>4} {:>9} {:>9} {:>9}", "figure (200 jobs queued)", "runs", "min", "median", "max");
    println!("{}", row("submit 200 jobs until all are listed waiting", &figures.submit_ms));
    println!("{}", row("gpuslice queue --json", &figures.list_ms));
    println!("{}", row("holder ends -> first waiting job's command runs", &figures.first_ms));
    println!("{}", row("holder ends -> all 200 commands run", &figures.all_ms));
    println!("{}", row("CPU of the 200 waiting processes over 2 s idle", &figures.idle_cpu_ms));
}
