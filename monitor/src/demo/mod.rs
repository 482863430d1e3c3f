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
    println!("{}", summary(&outputs, &seen));
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
    out += &format!("{:<11} {:>21}  {:>9} {:>7} {:>7}  {:>10}\n", "TENANT", "MEMORY used / cap", "SETTING", "TARGET", "USED", "HELD BACK");
    let files = crate::discovery::ledger_files(&dir).unwrap_or_default();
    let uuid = files.iter().find_map(|f| Ledger::open(&f.path).ok().and_then(|l| l.devices().first().map(|d| d.uuid)));
    let members =
        uuid.and_then(|u| ledger::broker::view(&dir, &u).ok()).map(|g| crate::compute::MemberView::of_page(g.page())).unwrap_or_default();
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
        let used = entry.last_busy_ns.map(|b| busy_ns.saturating_sub(b) as f64 / wall_ns.max(1.0));
        entry.last_busy_ns = Some(busy_ns);
        if let Some(used) = used {
            entry.used.push((at_s, used));
        }
        entry.target = member.filter(|m| m.active).map(|m| f64::from(m.weight_e4) / 10_000.0);
        let cap = ledger.memory_limit_bytes(0);
        let setting = match (policy.share_ratio_e4, policy.priority) {
            (0, 0) => "-".to_string(),
            (s, 0) => format!("share {}", s / 100),
            (0, p) => format!("prio {p}"),
            (s, p) => format!("{}% p{p}", s / 100),
        };
        out += &format!(
            "{:<11} {:>21}  {:>9} {:>7} {:>7}  {:>8.1} s\n",
            tenant,
            format!("{} / {}", gib(ledger.used_bytes(0)), if cap == ledger::layout::UNLIMITED { "none".into() } else { gib(cap) }),
            setting,
            entry.target.map_or("-".into(), |t| format!("{:.0}%", t * 100.0)),
            used.map_or("-".into(), |u| format!("{:.0}%", u * 100.0)),
            ledger.throttled_ns_total(0) as f64 / 1e9,
        );
    }
    out += "\nQUEUE\n";
    out += &queue_lines(exe, work);
    out
}

/// `gpuslice queue` as the demo's jobs see it.
fn queue_lines(exe: &Path, work: &Path) -> String {
    let out = base_command(exe, work).arg("queue").stderr(Stdio::null()).output();
    match out {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
        _ => "(the queue cannot be read)\n".into(),
    }
}

fn summary(outputs: &BTreeMap<String, String>, seen: &BTreeMap<String, Seen>) -> String {
    let mut out = String::from("\nSUMMARY\n");
    let find = |name: &str, key: &str| {
        outputs.get(name).and_then(|o| o.lines().find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix(key).map(str::to_string))))
    };
    let average = |tenant: &str| {
        let used = &seen.get(tenant)?.used;
        (!used.is_empty()).then(|| used.iter().map(|(_, u)| u).sum::<f64>() / used.len() as f64)
    };
    if let (Some(share), Some(avg)) = (find("training", "share="), average("training")) {
        out += &format!(
            "training   share 60 %: got {share} of the device over its run ({:.0} % on average per second); alone otherwise\n",
            avg * 100.0
        );
    }
    if let (Some(p50), Some(p99)) = (find("inference", "p50_us="), find("inference", "p99_us=")) {
        out += &format!("inference  priority 1: bursts of 20 x 200 us took {p50} us (median), {p99} us (p99) beside the training job\n");
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
    use plotters::prelude::*;
    let draw = || -> Result<(), Box<dyn std::error::Error>> {
        let end_s = seen.values().flat_map(|s| s.used.iter().map(|(t, _)| *t)).fold(1.0, f64::max);
        let root = SVGBackend::new(path, (800, 400)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption("gpuslice demo: each tenant's share of the device", ("sans-serif", 20))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(45)
            .build_cartesian_2d(0.0..end_s, 0.0..100.0)?;
        chart.configure_mesh().x_desc("seconds").y_desc("% of device time").draw()?;
        for (i, (tenant, s)) in seen.iter().filter(|(_, s)| s.used.iter().any(|(_, u)| *u > 0.0)).enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let points: Vec<(f64, f64)> = s.used.iter().map(|(t, u)| (*t, (u * 100.0).min(100.0))).collect();
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                .label(tenant.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        }
        chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| e.to_string())
}
