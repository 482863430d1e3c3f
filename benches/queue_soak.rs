//! The admission queue soak, on simgpu: 8 GPUs of 8 GiB, 4 of them split
//! into two MIG instances each (3g.71gb and 2g.35gb: 4 and 2 GiB; simgpu
//! holds at most 16 devices and instances together), so the queue places
//! onto 12 devices: 8 instances and 4 whole GPUs (a split GPU is placed
//! through its instances only).
//!
//! 1. **Soak**: 1,000 short jobs (`QUEUE_SOAK_JOBS`) of mixed size (256 MiB
//!    to 4 GiB, one GPU or two) and priority (0, 5, 10), at most
//!    [`WINDOW`] submitted and not yet ended at a time, each sleeping 50 to
//!    400 ms; a random 10 % are killed with SIGKILL at a random moment
//!    (waiting or running, whichever they are by then). Each job's command
//!    first writes a marker file named after the job and its pid, holding
//!    the time it started. Afterwards it checks, and fails if not:
//!    - committed memory on every device returns to exactly 0 and the queue
//!      is empty (`gpuslice devices --json`, `gpuslice queue --json`);
//!    - no job lost or run twice: every job not killed exited 0 with one
//!      marker, and no job has more than one;
//!    - priority order: no job starts more than [`ORDER_MARGIN`] before a
//!      job queued before it (a lower job id, from `gpuslice: queued as job
//!      N`) with no lower priority that asks for no more (as many GPUs or
//!      fewer, as much memory or less): such a pass is not backfill, since
//!      the earlier job would have fitted wherever the later one did. Passes
//!      by jobs that ask less (backfill, `monitor/src/queue/policy.rs`) are
//!      counted and printed. The margin is for each job's own look: a job
//!      the plan admits starts when it looks itself.
//! 2. **Admission latency with 200 queued jobs**: the 12 devices held by 12
//!    whole-device jobs, 200 jobs of 512 MiB waiting; one holder at a time
//!    ends, and the time from its end to the first waiting job's command
//!    starting is measured (target ≤ 50 ms).
//! 3. **Queue overhead on a job that fits at once**: `gpuslice run --sim
//!    --memory 512MiB -- true` with and without `--queue`, on an empty
//!    queue, medians of alternating runs (target ≤ 10 ms added).
//!
//! Run: `cargo build --release --workspace && cargo bench --bench queue_soak`
//! (artefacts from `target/release`, or `GS_TEST_TARGET_DIR=target/debug`).
//! A benchmark, not a test: it prints figures and fails only when a check of
//! the soak fails.

#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{gpuslice_bin, simgpu_lib, Sim};
use monitor_support::{Monitor, MonitorOptions};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Two instances per split GPU: simgpu holds at most 16 devices and
/// instances together.
const PARTITION: &str = "0=3g.71gb,2g.35gb;1=3g.71gb,2g.35gb;2=3g.71gb,2g.35gb;3=3g.71gb,2g.35gb";
/// Devices the queue places onto: 4 × 2 instances and 4 whole GPUs.
const PLACES: usize = 12;
/// Jobs submitted and not yet ended, at most, during the soak.
const WINDOW: usize = 48;
const SIZES_MIB: [u64; 5] = [256, 512, 1024, 2048, 4096];
const PRIORITIES: [i32; 4] = [0, 0, 5, 10];
/// How much later than a job behind it a job may start without the order
/// check calling it passed. The monitor admits jobs together, in one round,
/// and each then reads the board and starts when it is woken, so on a
/// loaded 2-core machine with 48 waiting a job admitted first may start
/// several hundred ms after one admitted with it.
const ORDER_MARGIN: Duration = Duration::from_millis(1000);
const QUEUED: usize = 200;
const FREES: usize = 8;
const OVERHEAD_RUNS: usize = 15;
const GIVE_UP: Duration = Duration::from_secs(600);

/// A small deterministic generator (xorshift64*), so a run can be repeated.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn sim() -> Sim {
    Sim::new().devices(8).memory("8GiB").context_memory("64MiB").env("SIMGPU_MIG", PARTITION).timeout(GIVE_UP)
}

fn gpuslice(sim: &Sim) -> Command {
    let mut cmd = sim.command(gpuslice_bin());
    cmd.env_remove("LD_PRELOAD");
    cmd
}

fn json(sim: &Sim, args: &[&str]) -> serde_json::Value {
    let mut cmd = gpuslice(sim);
    cmd.args(args).arg("--dir").arg(sim.ledger_dir()).arg("--json");
    if args[0] == "devices" {
        cmd.arg("--nvml-lib").arg(simgpu_lib());
    }
    let out = sim.run(&mut cmd);
    out.assert_success();
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{args:?} --json is not JSON: {e}\n{out}"))
}

fn committed_total(sim: &Sim) -> u64 {
    json(sim, &["devices"])["devices"].as_array().unwrap().iter().map(|d| d["memory_committed_bytes"].as_u64().unwrap()).sum()
}

fn queue_states(sim: &Sim) -> (usize, usize) {
    let doc = json(sim, &["queue"]);
    let jobs = doc["jobs"].as_array().cloned().unwrap_or_default();
    let count = |state: &str| jobs.iter().filter(|j| j["state"] == state).count();
    (count("waiting"), count("running"))
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos())
}

/// `gpuslice run --sim --queue ARGS -- sh -c SCRIPT MARKER DURATION`: the
/// command writes `MARKER.<pid>` holding the time it started (ns), then
/// sleeps DURATION (or, for `-`, until its stdin closes).
fn queued(sim: &Sim, args: &[String], marker: &Path, duration: &str) -> Command {
    let mut cmd = gpuslice(sim);
    cmd.args(["run", "--sim", "--queue", "--dir"]).arg(sim.ledger_dir()).args(args);
    cmd.args(["--", "sh", "-c", r#"date +%s%N > "$0.$$"; if [ "$1" = - ]; then read line; else sleep "$1"; fi"#]);
    cmd.arg(marker).arg(duration);
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    // Its own process group, so that the whole job (the command's children
    // too) can be ended at the end of a run.
    cmd.process_group(0);
    cmd
}

/// Ends a job and everything it started.
fn kill_group(child: &mut Child) {
    // SAFETY: kill has no memory preconditions; the group is the child's own.
    unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    let _ = child.wait();
}

/// The start times (ns) in the marker files of each job, by job key.
fn markers(dir: &Path) -> HashMap<String, Vec<u128>> {
    let mut found: HashMap<String, Vec<u128>> = HashMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some((key, _pid)) = name.rsplit_once('.') else { continue };
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        found.entry(key.to_string()).or_default().push(text.trim().parse().unwrap_or(0));
    }
    found
}

fn poll_until(what: &str, interval: Duration, mut condition: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < GIVE_UP, "{what} did not happen within {GIVE_UP:?}");
        std::thread::sleep(interval);
    }
    start.elapsed()
}

struct Spec {
    index: usize,
    priority: i32,
    gpus: u32,
    memory_mib: u64,
    duration_ms: u64,
    kill_after: Option<Duration>,
}

struct Outcome {
    spec: Spec,
    submitted_ns: u128,
    /// Killed, and whether it had started by then.
    killed: Option<bool>,
    exit_ok: bool,
}

fn soak(jobs: usize, seed: u64) {
    let sim = sim();
    // The monitor admits the jobs.
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let marker_dir = sim.dir().join("markers");
    std::fs::create_dir_all(&marker_dir).unwrap();
    let stderr_dir = sim.dir().join("stderr");
    std::fs::create_dir_all(&stderr_dir).unwrap();
    let mut rng = Rng(seed | 1);
    let mut pending: Vec<Spec> = Vec::new();
    for index in 0..jobs {
        let priority = PRIORITIES[rng.below(PRIORITIES.len() as u64) as usize];
        let gpus = if rng.below(10) == 0 { 2 } else { 1 };
        let memory_mib = SIZES_MIB[rng.below(SIZES_MIB.len() as u64) as usize];
        let duration_ms = 50 + rng.below(351);
        // Killed before its command would end on its own, whether it is
        // still waiting by then or running.
        let kill_after = (rng.below(10) == 0).then(|| Duration::from_millis(rng.below(duration_ms)));
        pending.push(Spec { index, priority, gpus, memory_mib, duration_ms, kill_after });
    }
    pending.reverse();
    let mut live: Vec<(Spec, Child, Instant, u128)> = Vec::new();
    let mut done: Vec<Outcome> = Vec::new();
    let mut killed_at: HashMap<usize, bool> = HashMap::new();
    let start = Instant::now();
    while !pending.is_empty() || !live.is_empty() {
        assert!(start.elapsed() < GIVE_UP, "the soak did not end within {GIVE_UP:?}");
        while live.len() < WINDOW {
            let Some(spec) = pending.pop() else { break };
            let args = vec![
                "--priority".to_string(),
                spec.priority.to_string(),
                "--gpus".into(),
                spec.gpus.to_string(),
                "--memory".into(),
                format!("{}MiB", spec.memory_mib),
                "--name".into(),
                format!("soak-{}", spec.index),
            ];
            let submitted_ns = now_ns();
            let duration = format!("{:.3}", spec.duration_ms as f64 / 1e3);
            let mut cmd = queued(&sim, &args, &marker_dir.join(format!("job{}", spec.index)), &duration);
            // `gpuslice: queued as job N …`: the job's id, its place in the order.
            cmd.stderr(std::fs::File::create(stderr_dir.join(format!("job{}", spec.index))).unwrap());
            let child = cmd.spawn().expect("cannot start gpuslice");
            live.push((spec, child, Instant::now(), submitted_ns));
        }
        let mut i = 0;
        while i < live.len() {
            let (spec, child, spawned, _) = &mut live[i];
            if let Some(after) = spec.kill_after {
                if spawned.elapsed() >= after && !killed_at.contains_key(&spec.index) {
                    let started = std::fs::read_dir(&marker_dir)
                        .unwrap()
                        .flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with(&format!("job{}.", spec.index)));
                    let _ = child.kill();
                    killed_at.insert(spec.index, started);
                }
            }
            match child.try_wait().expect("cannot wait for a job") {
                Some(status) => {
                    let (spec, _, _, submitted_ns) = live.swap_remove(i);
                    let killed = killed_at.get(&spec.index).copied();
                    done.push(Outcome { spec, submitted_ns, killed, exit_ok: status.success() });
                }
                None => i += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let soak_time = start.elapsed();
    // Killed commands' children (`sleep`) hold the job until they end.
    let drained = poll_until("committed memory to return to 0", Duration::from_millis(100), || committed_total(&sim) == 0);
    let (waiting, running) = queue_states(&sim);

    let found = markers(&marker_dir);
    // A job killed between its shell creating the marker and `date` writing
    // it leaves an empty one: it started, at an unknown time.
    let started = |index: usize| found.contains_key(&format!("job{index}"));
    let started_ns = |index: usize| found.get(&format!("job{index}")).and_then(|v| v.iter().copied().filter(|t| *t > 0).min());
    let twice: Vec<usize> =
        done.iter().map(|o| o.spec.index).filter(|i| found.get(&format!("job{i}")).is_some_and(|v| v.len() > 1)).collect();
    let lost: Vec<usize> =
        done.iter().filter(|o| o.killed.is_none() && (!o.exit_ok || started_ns(o.spec.index).is_none())).map(|o| o.spec.index).collect();
    let killed_waiting = done.iter().filter(|o| o.killed == Some(false)).count();
    let killed_running = done.iter().filter(|o| o.killed == Some(true)).count();
    let killed_waiting_ran = done.iter().filter(|o| o.killed == Some(false) && started(o.spec.index)).count();

    // Priority order, among jobs whose ids say which was queued first.
    let id_of = |index: usize| -> Option<u64> {
        let text = std::fs::read_to_string(stderr_dir.join(format!("job{index}"))).ok()?;
        text.split("queued as job ").nth(1)?.split_whitespace().next()?.parse().ok()
    };
    let ids: HashMap<usize, u64> = done.iter().filter_map(|o| Some((o.spec.index, id_of(o.spec.index)?))).collect();
    let margin = ORDER_MARGIN.as_nanos();
    let t0_ns = done.iter().map(|o| o.submitted_ns).min().unwrap_or(0);
    let mut passes = 0;
    let mut violations = Vec::new();
    // The longest a job started after a later one asking no less: the
    // stagger of the looks, not a decision of the policy, below the margin.
    let mut longest_lag_ns = 0u128;
    for a in &done {
        let (Some(a_start), Some(a_id)) = (started_ns(a.spec.index), ids.get(&a.spec.index)) else { continue };
        for b in &done {
            let (Some(b_start), Some(b_id)) = (started_ns(b.spec.index), ids.get(&b.spec.index)) else { continue };
            // a was queued before b (so waiting when b started) and comes first in the order.
            let a_first = a_id < b_id && a.spec.priority >= b.spec.priority;
            let asks_no_less = a.spec.gpus <= b.spec.gpus && a.spec.memory_mib <= b.spec.memory_mib;
            if a_first && asks_no_less && b_start < a_start {
                longest_lag_ns = longest_lag_ns.max(a_start - b_start);
            }
            if !a_first || b_start + margin >= a_start {
                continue;
            }
            passes += 1;
            if asks_no_less {
                let ms = |ns: u128| (ns.saturating_sub(t0_ns) / 1_000_000) as u64;
                violations.push(format!(
                    "job {a_id} (priority {}, {} x {} MiB, submitted at {} ms, started at {} ms{}) passed by job {b_id} (priority {}, {} x {} MiB, submitted at {} ms, started at {} ms)",
                    a.spec.priority, a.spec.gpus, a.spec.memory_mib, ms(a.submitted_ns), ms(a_start),
                    if a.killed.is_some() { ", killed" } else { "" },
                    b.spec.priority, b.spec.gpus, b.spec.memory_mib, ms(b.submitted_ns), ms(b_start)
                ));
            }
        }
    }

    println!("soak: {jobs} jobs (seed {seed}), {PLACES} devices, at most {WINDOW} submitted at once: {:.1} s", soak_time.as_secs_f64());
    println!(
        "  killed with SIGKILL: {} while waiting ({killed_waiting_ran} of them had started by the kill), {killed_running} while running",
        killed_waiting
    );
    println!(
        "  after the last job: committed memory 0 after {:.0} ms; queue waiting {waiting}, running {running}",
        drained.as_secs_f64() * 1e3
    );
    println!("  jobs lost: {}; jobs run twice: {}; markers: {}", lost.len(), twice.len(), found.values().map(Vec::len).sum::<usize>());
    println!(
        "  priority order: {passes} starts more than {} ms before a job queued earlier with no lower priority; {} of them by a job asking no less (not backfill)",
        ORDER_MARGIN.as_millis(),
        violations.len()
    );
    println!(
        "  longest a job started after a later one of no higher priority asking no less: {:.1} ms (their looks' order, within the margin)",
        longest_lag_ns as f64 / 1e6
    );
    assert!(lost.is_empty(), "jobs lost: {lost:?}");
    assert!(twice.is_empty(), "jobs run twice: {twice:?}");
    assert_eq!((waiting, running), (0, 0), "the queue is not empty");
    assert!(violations.is_empty(), "priority order broken:\n{}", violations.join("\n"));
}

/// Admission latency with [`QUEUED`] jobs waiting, in ms, one per freed device.
fn admission_latency() -> Vec<f64> {
    let sim = sim();
    // The monitor admits the jobs.
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let marker_dir = sim.dir().join("markers");
    let holder_dir = sim.dir().join("holders");
    std::fs::create_dir_all(&marker_dir).unwrap();
    std::fs::create_dir_all(&holder_dir).unwrap();
    let mut holders: Vec<Child> = (0..PLACES)
        .map(|i| {
            let mut cmd = queued(&sim, &["--name".into(), format!("holder-{i}")], &holder_dir.join(format!("holder{i}")), "-");
            cmd.stdin(Stdio::piped()).spawn().expect("cannot start a holder")
        })
        .collect();
    poll_until("the holders to run", Duration::from_millis(100), || queue_states(&sim) == (0, PLACES));
    let mut waiting: Vec<Child> = (0..QUEUED)
        .map(|i| {
            let args = ["--memory".to_string(), "512MiB".into(), "--name".into(), format!("waiting-{i}")];
            queued(&sim, &args, &marker_dir.join(format!("job{i}")), "600").spawn().expect("cannot start a job")
        })
        .collect();
    poll_until("200 jobs to wait", Duration::from_millis(200), || queue_states(&sim) == (QUEUED, PLACES));
    std::thread::sleep(Duration::from_secs(1));
    // inotify instances are limited per user (often 128, shared with every
    // other process of the user): the others wait on the clock.
    let watching = waiting.iter().filter(|c| has_inotify(c.id())).count();
    println!("  waiting jobs with an inotify watch: {watching} of {QUEUED} (fs.inotify.max_user_instances is per user)");
    let mut latencies = Vec::new();
    let mut breakdown: Vec<(f64, f64)> = Vec::new();
    // Whole GPUs and instances alike: the holders in the order they got their devices.
    for holder in holders.iter_mut().take(FREES) {
        let freed_ns = now_ns();
        // The holder's `read` ends; its command, and the job, with it.
        let mut stdin = holder.stdin.take().expect("a holder has a stdin");
        let _ = writeln!(stdin, "done");
        drop(stdin);
        // A marker read while its command writes it reads as 0: not yet started.
        let first_after = || markers(&marker_dir).values().flatten().copied().filter(|t| *t > freed_ns).min();
        poll_until("a waiting job to start", Duration::from_millis(1), || first_after().is_some());
        let _ = holder.wait();
        let first = first_after().unwrap_or(freed_ns);
        latencies.push((first - freed_ns) as f64 / 1e6);
        // Where the time went: to the look that admitted it (the job file's
        // `started_unix_ms`, ms), then to its command running (exec).
        let admitted_ms = admissions_after(&sim, freed_ns);
        if let Some(admitted_ms) = admitted_ms {
            let admitted_ns = u128::from(admitted_ms) * 1_000_000;
            breakdown.push(((admitted_ns.saturating_sub(freed_ns)) as f64 / 1e6, (first.saturating_sub(admitted_ns)) as f64 / 1e6));
        }
        // Let the jobs that fit in the freed room start before the next one.
        std::thread::sleep(Duration::from_secs(1));
    }
    for child in holders.iter_mut().chain(waiting.iter_mut()) {
        kill_group(child);
    }
    let cell = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(", ");
    println!(
        "  per free, ms: freed -> admitted (job file) [{}]; admitted -> command runs [{}]",
        cell(&breakdown.iter().map(|b| b.0).collect::<Vec<_>>()),
        cell(&breakdown.iter().map(|b| b.1).collect::<Vec<_>>())
    );
    latencies
}

/// Whether process `pid` holds an inotify instance.
fn has_inotify(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy().contains("inotify"))))
        .unwrap_or(false)
}

/// The earliest admission time (ms since the epoch) of a running job
/// admitted after `after_ns`, from the job files.
fn admissions_after(sim: &Sim, after_ns: u128) -> Option<u64> {
    let after_ms = (after_ns / 1_000_000) as u64;
    std::fs::read_dir(sim.ledger_dir().join("queue"))
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".job"))
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(e.path()).ok()?).ok())
        .filter_map(|job| job["started_unix_ms"].as_u64())
        .filter(|t| *t >= after_ms)
        .min()
}

/// Start-up of a job that fits at once, without and with `--queue`, in ms.
fn queue_overhead() -> (Vec<f64>, Vec<f64>) {
    let sim = sim();
    // The monitor admits the jobs.
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let (mut plain, mut with_queue) = (Vec::new(), Vec::new());
    for _ in 0..OVERHEAD_RUNS {
        for queue in [false, true] {
            let mut cmd = gpuslice(&sim);
            cmd.args(["run", "--sim", "--dir"]).arg(sim.ledger_dir()).args(["--memory", "512MiB"]);
            if queue {
                cmd.arg("--queue");
            }
            cmd.args(["--", "true"]).stdout(Stdio::null()).stderr(Stdio::null());
            let start = Instant::now();
            let status = cmd.status().expect("cannot run gpuslice");
            let ms = start.elapsed().as_secs_f64() * 1e3;
            assert!(status.success(), "gpuslice run{} -- true failed", if queue { " --queue" } else { "" });
            if queue { &mut with_queue } else { &mut plain }.push(ms);
        }
    }
    (plain, with_queue)
}

fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let _: PathBuf = gpuslice_bin();
    let jobs = std::env::var("QUEUE_SOAK_JOBS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let seed = std::env::var("QUEUE_SOAK_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(20261130);
    soak(jobs, seed);

    let latencies = admission_latency();
    let mut sorted = latencies.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "admission with {QUEUED} queued, {PLACES} devices: device freed -> first waiting job's command runs: median {:.1} ms, max {:.1} ms over {} frees ({})",
        median(&latencies),
        sorted.last().copied().unwrap_or(f64::NAN),
        latencies.len(),
        if sorted.last().is_some_and(|m| *m <= 50.0) { "target <= 50 ms met" } else { "target <= 50 ms not met" }
    );

    let (plain, with_queue) = queue_overhead();
    let added = median(&with_queue) - median(&plain);
    println!(
        "start-up of a job that fits at once: gpuslice run {:.1} ms, with --queue {:.1} ms (medians of {OVERHEAD_RUNS}): the queue adds {added:.1} ms ({})",
        median(&plain),
        median(&with_queue),
        if added <= 10.0 { "target <= 10 ms met" } else { "target <= 10 ms not met" }
    );
}
