//! `gpuslice demo`: gpuslice sharing one simulated GPU between tenants, in
//! about twenty seconds, with nothing to set up.
//!
//! It starts a monitor with a configuration, and under `gpuslice run --sim`:
//! - **training**, a job with a compute share of 60 % that keeps the device
//!   busy with 2 ms kernels;
//! - **inference**, a service at priority 1 (share 20 %) that sends bursts
//!   of 20 short kernels every 50 ms;
//! - **notebook**, capped at 1 GiB, that asks for more, is refused
//!   (`CUDA_ERROR_OUT_OF_MEMORY`) and goes on;
//! - two **queued jobs** (`gpuslice run --queue`) that each need 8 GiB and
//!   start when room frees up.
//!
//! Every second it shows each tenant's memory against its cap, its compute
//! target (from the monitor's grant page) against what it used (the device
//! time the monitor charged it), time held back, and the queue. At the end it prints a summary
//! and writes an SVG chart of each tenant's share of the device over time.
//! The workloads are this binary's hidden `demo-worker` verb.

pub mod worker;

use clap::Args;
use ledger::Ledger;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(Args)]
#[command(
    after_help = "Example:\n  gpuslice demo                # about 20 seconds, chart in ./gpuslice-demo.svg\n  gpuslice demo --seconds 30 --chart /tmp/demo.svg"
)]
pub struct DemoArgs {
    /// How long the tenants run.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Where the chart of each tenant's share over time goes.
    #[arg(long, default_value = "gpuslice-demo.svg")]
    pub chart: PathBuf,
}

/// The simulated device's memory.
const DEVICE_MEMORY: &str = "16GiB";
/// How long inference's bursts run alone first, in seconds.
const ALONE_S: &str = "2";
const CONFIG: &str = "\
[tenants.training]
memory = \"6GiB\"
share = 60

[tenants.inference]
memory = \"2GiB\"
share = 20
priority = 1

[tenants.notebook]
memory = \"1GiB\"
";

/// One child the demo started, with what it printed.
struct Job {
    name: String,
    child: Child,
}

/// What the demo knows about one tenant over time.
#[derive(Default)]
struct Seen {
    /// (seconds since start, share of the device used in the last second).
    used: Vec<(f64, f64)>,
    last_busy_ns: Option<u64>,
    target: Option<f64>,
    /// The tenant's setting as the table shows it ("share 60", "-").
    setting: String,
    /// The most device time the monitor has charged the tenant, in all.
    charged_ns: u64,
}

pub fn main(args: DemoArgs) -> Result<ExitCode, crate::error::Error> {
    run_in_work_dir(&args).map_err(crate::error::Error::Failed)
}

/// The demo, in a working directory of its own that it removes after.
fn run_in_work_dir(args: &DemoArgs) -> Result<ExitCode, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let work = std::env::temp_dir().join(format!("gpuslice-demo-{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("cannot create {}: {e}", work.display()))?;
    let result = run(args, &exe, &work);
    let _ = std::fs::remove_dir_all(&work);
    result
}

fn base_command(exe: &Path, work: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env("SIMGPU_STATE", work.join("simgpu.state"))
        .env("SIMGPU_MEMORY", DEVICE_MEMORY)
        .env("GPUSLICE_DIR", work.join("ledger"))
        .env_remove("GPUSLICE_MEMORY_LIMIT")
        .env_remove("GPUSLICE_COMPUTE_LIMIT")
        .env_remove("GPUSLICE_COMPUTE_SHARE")
        .env_remove("GPUSLICE_PRIORITY")
        .env_remove("GPUSLICE_TENANT")
        .stdin(Stdio::null());
    cmd
}

/// `gpuslice run --sim [run_args] -- gpuslice demo-worker [worker]`.
fn spawn_worker(exe: &Path, work: &Path, name: &str, run_args: &[&str], worker: &[String]) -> Result<Job, String> {
    let mut cmd = base_command(exe, work);
    cmd.arg("run").arg("--sim").args(run_args).arg("--").arg(exe).arg("demo-worker").args(worker);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().map_err(|e| format!("cannot start {name}: {e}"))?;
    Ok(Job { name: name.into(), child })
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

fn run(args: &DemoArgs, exe: &Path, work: &Path) -> Result<ExitCode, String> {
    let seconds = args.seconds.max(8);
    let config = work.join("monitor.toml");
    std::fs::write(&config, CONFIG).map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    let simgpu = crate::libs::find_library("libsimgpu.so", "SIMGPU_LIB")?;
    let mut monitor = base_command(exe, work)
        .arg("monitor")
        .arg("--dir")
        .arg(work.join("ledger"))
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .arg("--nvml-lib")
        .arg(&simgpu)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the monitor: {e}"))?;
    wait_for_ready(&mut monitor)?;
    println!("gpuslice demo: one simulated {DEVICE_MEMORY} GPU, a monitor, three tenants and two queued jobs, for {seconds} s\n");
    println!("First, inference's bursts alone on the device for {ALONE_S} s, to compare with the same bursts beside training later.");
    let alone = spawn_worker(exe, work, "inference alone", &["--tenant", "inference"], &strings(&["infer", "200", "20", "50", ALONE_S]))?;
    let alone = alone.child.wait_with_output().map_err(|e| format!("inference alone: {e}"))?;
    let alone = String::from_utf8_lossy(&alone.stdout).into_owned();
    let alone_line = burst_figures(&alone)
        .map_or_else(|| "(no figures from the bursts alone)".to_string(), |(p50, p99)| format!("alone: median {p50}, p99 {p99}"));
    println!("{alone_line}\n");

    let training_s = (seconds * 6 / 10).to_string();
    let run_s = seconds.to_string();
    let mut jobs = vec![
        spawn_worker(exe, work, "training", &["--tenant", "training"], &strings(&["train", "2000", &training_s]))?,
        spawn_worker(exe, work, "inference", &["--tenant", "inference"], &strings(&["infer", "200", "20", "50", &run_s]))?,
        spawn_worker(exe, work, "notebook", &["--tenant", "notebook"], &strings(&["notebook", "256", &run_s]))?,
    ];
    std::thread::sleep(Duration::from_millis(500));
    let job_s = (seconds / 6).max(2).to_string();
    for n in 1..=2 {
        let name = format!("job-{n}");
        jobs.push(spawn_worker(exe, work, &name, &["--queue", "--memory", "8GiB", "--name", &name], &strings(&["train", "1000", &job_s]))?);
        std::thread::sleep(Duration::from_millis(200));
    }

    let start = Instant::now();
    let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
    let tty = std::io::stdout().is_terminal();
    let mut last = Instant::now();
    while start.elapsed() < Duration::from_secs(seconds + 2) && jobs.iter_mut().any(|j| matches!(j.child.try_wait(), Ok(None))) {
        std::thread::sleep(Duration::from_secs(1).saturating_sub(last.elapsed()));
        let wall_ns = last.elapsed().as_nanos() as f64;
        last = Instant::now();
        let frame = frame(exe, work, start.elapsed().as_secs_f64(), wall_ns, &mut seen);
        if tty {
            print!("\x1b[2J\x1b[H{frame}");
        } else {
            println!("{frame}");
        }
        let _ = std::io::stdout().flush();
    }

    let mut outputs = BTreeMap::new();
    for mut job in jobs {
        let _ = job.child.kill();
        let out = job.child.wait_with_output().map_err(|e| format!("{}: {e}", job.name))?;
        outputs.insert(job.name, String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr));
    }
    let _ = monitor.kill();
    let _ = monitor.wait();
    println!("{}", summary(&outputs, &alone, &seen));
    match chart(&args.chart, &seen) {
        Ok(()) => println!("chart of each tenant's share of the device over time: {}", args.chart.display()),
        Err(e) => println!("no chart: {e}"),
    }
    Ok(ExitCode::SUCCESS)
}

fn wait_for_ready(monitor: &mut Child) -> Result<(), String> {
    use std::io::BufRead;
    let stdout = monitor.stdout.take().ok_or("the monitor has no output")?;
    let mut lines = std::io::BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        if line.map_err(|e| e.to_string())?.starts_with("ready=") {
            // Keep reading in the background so the monitor never blocks on a full pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return Ok(());
        }
    }
    Err("the monitor stopped before it was ready".into())
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// One frame of the live table.
fn frame(exe: &Path, work: &Path, at_s: f64, wall_ns: f64, seen: &mut BTreeMap<String, Seen>) -> String {
    let dir = work.join("ledger");
    let mut out = format!("gpuslice demo   t = {at_s:4.1} s   (simulated {DEVICE_MEMORY} GPU, device 0)\n\n");
    out += &format!(
        "{:<11} {:<19} {:>6}  {:<14} {:>6} {:>5} {:>5} {:>9}\n",
        "TENANT", "MEMORY used / cap", "DENIED", "SETTING", "TARGET", "USED", "SPARE", "HELD BACK"
    );
    let files = crate::discovery::ledger_files(&dir).unwrap_or_default();
    let uuid = files.iter().find_map(|f| Ledger::open(&f.path).ok().and_then(|l| l.devices().first().map(|d| d.uuid)));
    let members =
        uuid.and_then(|u| ledger::broker::view(&dir, &u).ok()).map(|g| crate::compute::MemberView::of_page(g.page())).unwrap_or_default();
    // The tenant furthest over its target this second, explained below the table.
    let mut most_spare: Option<(String, f64, f64)> = None;
    for file in &files {
        let Ok(ledger) = Ledger::open(&file.path) else { continue };
        let tenant = ledger.tenant();
        let policy = ledger.compute_policy(0);
        let key = ledger::grants::tenant_key(&tenant);
        let member = members.iter().find(|m| m.key == key);
        // The monitor's charge where it arbitrates the tenant, else the
        // tenant's own count.
        let busy_ns = member.map_or_else(|| ledger.busy_ns_total(0), |m| m.served_ns_total);
        let entry = seen.entry(tenant.clone()).or_default();
        if let Some(m) = member {
            entry.charged_ns = entry.charged_ns.max(m.served_ns_total);
        }
        let used = entry.last_busy_ns.map(|b| busy_ns.saturating_sub(b) as f64 / wall_ns.max(1.0));
        entry.last_busy_ns = Some(busy_ns);
        if let Some(used) = used {
            entry.used.push((at_s, used));
        }
        // What the monitor guarantees the tenant on its grant page; a share
        // the tenant is not using this second is still its target.
        // (A tenant with no share is guaranteed nothing: it gets what
        // shares leave.)
        entry.target = (policy.share_ratio_e4 > 0)
            .then(|| member.filter(|m| m.active).map_or(f64::from(policy.share_ratio_e4), |m| f64::from(m.weight_e4)) / 10_000.0);
        entry.setting = match (policy.share_ratio_e4, policy.priority) {
            (0, 0) => "-".to_string(),
            (s, 0) => format!("share {}", s / 100),
            (0, p) => format!("priority {p}"),
            (s, p) => format!("share {} pri {p}", s / 100),
        };
        let spare = match (used, entry.target) {
            (Some(used), Some(target)) => (used - target).max(0.0),
            _ => 0.0,
        };
        if let (Some(used), Some(target)) = (used, entry.target) {
            if spare >= 0.02 && most_spare.as_ref().is_none_or(|(_, _, s)| spare > *s) {
                most_spare = Some((tenant.clone(), used, target));
            }
        }
        let cap = ledger.memory_limit_bytes(0);
        out += &format!(
            "{:<11} {:<19} {:>6}  {:<14} {:>6} {:>5} {:>5} {:>7.1} s\n",
            tenant,
            format!("{} / {}", gib(ledger.used_bytes(0)), if cap == ledger::layout::UNLIMITED { "none".into() } else { gib(cap) }),
            ledger.alloc_denied_total(0),
            entry.setting,
            entry.target.map_or("-".into(), |t| format!("{:.0}%", t * 100.0)),
            used.map_or("-".into(), |u| format!("{:.0}%", u * 100.0)),
            if spare > 0.0 { format!("{:.0}%", spare * 100.0) } else { "-".into() },
            ledger.throttled_ns_total(0) as f64 / 1e9,
        );
    }
    out += "\nDENIED: allocations refused at the cap (CUDA_ERROR_OUT_OF_MEMORY); the process goes on.\n";
    out += "TARGET: the device time a share guarantees. USED: what the monitor charged last second.\n";
    if let Some((tenant, used, target)) = most_spare {
        out += &format!(
            "SPARE: {tenant} used {:.0}% against a {:.0}% target. A share is a floor, not a ceiling:\n       the other {:.0} points are time no other tenant asked for, given rather than left idle.\n",
            used * 100.0,
            target * 100.0,
            (used - target) * 100.0
        );
    }
    out += "\nQUEUE\n";
    out += &queue_lines(exe, work);
    out
}

/// The queue as `gpuslice queue --json` gives it, in the columns a
/// person watching the demo needs.
fn queue_lines(exe: &Path, work: &Path) -> String {
    let out = base_command(exe, work).args(["queue", "--json"]).stderr(Stdio::null()).output();
    let jobs = match out {
        Ok(out) if out.status.success() => serde_json::from_slice::<serde_json::Value>(&out.stdout).ok(),
        _ => None,
    };
    let Some(jobs) = jobs.as_ref().and_then(|v| v["jobs"].as_array()) else { return "(the queue cannot be read)\n".into() };
    if jobs.is_empty() {
        return "(empty)\n".into();
    }
    let mut text = format!("{:<4} {:<6} {:<8} {:>8}  {}\n", "ID", "NAME", "STATE", "MEMORY", "REASON");
    for job in jobs {
        let memory = job["memory_bytes"].as_u64().map_or("whole GPU".into(), gib);
        text += &format!(
            "{:<4} {:<6} {:<8} {:>8}  {}\n",
            job["id"].as_u64().map_or("?".into(), |id| id.to_string()),
            job["name"].as_str().unwrap_or("-"),
            job["state"].as_str().unwrap_or("?"),
            memory,
            job["reason"].as_str().unwrap_or("-")
        );
    }
    text
}

/// The median and p99 a burst worker printed (`p50_us=… p99_us=…`), in ms.
fn burst_figures(output: &str) -> Option<(String, String)> {
    let field = |key: &str| {
        let us = output.split_whitespace().find_map(|w| w.strip_prefix(key)).and_then(|v| v.parse::<f64>().ok())?;
        Some(format!("{:.1} ms", us / 1000.0))
    };
    Some((field("p50_us=")?, field("p99_us=")?))
}

fn summary(outputs: &BTreeMap<String, String>, alone: &str, seen: &BTreeMap<String, Seen>) -> String {
    let mut out = String::from("\nSUMMARY\n");
    let find = |name: &str, key: &str| {
        outputs.get(name).and_then(|o| o.lines().find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix(key).map(str::to_string))))
    };
    let wall_s = find("training", "wall_s=").and_then(|w| w.parse::<f64>().ok());
    match (seen.get("training").map(|s| s.charged_ns), wall_s) {
        (Some(charged_ns), Some(wall_s)) if charged_ns > 0 && wall_s > 0.0 => {
            let used = charged_ns as f64 / 1e9 / wall_s;
            out += &format!(
                "training   share 60 %: used {:.0} % of the device's time over its {wall_s:.1} s run (the monitor's charge):\n           its 60 % and {:.0} points no one else asked for\n",
                used * 100.0,
                (used * 100.0 - 60.0).max(0.0)
            )
        }
        _ => out += "training   share 60 %: no device time seen\n",
    }
    let beside = outputs.get("inference").and_then(|o| burst_figures(o));
    match (beside, burst_figures(alone)) {
        (Some((p50, p99)), Some((alone_p50, alone_p99))) => {
            out += &format!(
                "inference  priority 1: bursts of 20 x 200 us took {p50} (median) and {p99} (p99) beside training;\n           the same bursts alone: {alone_p50} and {alone_p99}\n"
            )
        }
        _ => out += "inference  priority 1: no burst figures\n",
    }
    match outputs.get("notebook").and_then(|o| o.lines().find(|l| l.starts_with("refused"))) {
        Some(line) => out += &format!("notebook   cap 1 GiB: {line}\n"),
        None => out += "notebook   cap 1 GiB: no refusal seen\n",
    }
    for job in ["job-1", "job-2"] {
        match find(job, "kernels=") {
            Some(kernels) => out += &format!("{job}      queued for 8 GiB: started when room freed up and ran {kernels} kernels\n"),
            None => out += &format!("{job}      queued for 8 GiB: did not run within the demo\n"),
        }
    }
    out
}

fn chart(path: &Path, seen: &BTreeMap<String, Seen>) -> Result<(), String> {
    let series: Vec<crate::chart::Series> = seen
        .iter()
        .filter(|(_, s)| s.used.iter().any(|(_, u)| *u > 0.0))
        .map(|(tenant, s)| crate::chart::Series {
            label: match (s.setting.as_str(), tenant.starts_with("queue-")) {
                (_, true) => format!("{tenant}, the queued jobs"),
                ("-", false) => tenant.clone(),
                (setting, false) => format!("{tenant}, {setting}"),
            },
            points: s.used.iter().map(|(t, u)| (*t, u * 100.0)).collect(),
            target_percent: s.target.map(|t| t * 100.0),
        })
        .collect();
    let title = format!("gpuslice demo on a simulated GPU (simgpu, {DEVICE_MEMORY}): each tenant's share of device time");
    crate::chart::Chart { title: &title, series: &series, band_points: None }.write(path)
}
