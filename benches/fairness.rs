//! The fairness benchmark: tenants with compute shares, limits and
//! priorities keep one simulated device busy at once (NVIDIA's
//! cuda-bindings, `tests/python/fairness_load.py`), under the shim and a
//! running monitor, and each reports how many kernels completed in every
//! 100 ms. For each scenario it prints every tenant's target against what
//! it got, over the 10 s window that starts after 1 s of convergence and
//! in every 2 s window within it, and writes an SVG chart of each tenant's
//! share over time to `target/fairness/<scenario>.svg`.
//!
//! "Got" is the tenant's kernel time as a share of all the kernel time the
//! device ran in the window: simgpu's worker itself runs a little less than
//! the whole wall time on a loaded machine, and a share is a share of what
//! the device does. A limited tenant's is its kernel time as a share of the
//! wall time: a limit is a ceiling on device time. A lone tenant is measured against the same client
//! without the shim, run just before.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench fairness`
//! (`-- --seconds N` for shorter runs, `-- --only NAME` for one scenario).
//! On a debug build: `GS_TEST_TARGET_DIR=target/debug cargo bench --bench fairness`.

#[path = "../tests/compute_support/mod.rs"]
mod compute_support;
#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;
// The chart `gpuslice demo` draws, so both read the same way.
#[path = "../monitor/src/chart.rs"]
mod chart;

use gpuslice_tests::{Running, Sim};
use monitor_support::{Monitor, MonitorOptions};
use std::path::PathBuf;
use std::time::Duration;

/// One tenant of a scenario.
#[derive(Clone)]
struct Tenant {
    name: &'static str,
    /// Device ordinal its client runs on.
    device: u32,
    /// `GPUSLICE_COMPUTE_SHARE` as written, when per device.
    shares: Option<&'static str>,
    share: Option<u32>,
    limit: Option<u32>,
    kernel_us: u64,
    /// Stops after this many seconds (the rest of the run it is idle).
    stop_after_s: Option<f64>,
    /// A training loop that synchronises every step: kernels per step and
    /// µs of host work after each (`fairness_load.py steps`); `None`:
    /// kernels back to back.
    steps: Option<(u32, u32)>,
    /// The steps end in a synchronous `cuMemcpyDtoH` rather than a
    /// `cuStreamSynchronize` (`fairness_load.py steps … copy`).
    steps_end_in_copy: bool,
    /// `GPUSLICE_PRIORITY`, when set.
    priority: Option<i32>,
}

fn tenant(name: &'static str, share: Option<u32>, limit: Option<u32>, kernel_us: u64) -> Tenant {
    Tenant {
        name,
        device: 0,
        shares: None,
        share,
        limit,
        kernel_us,
        stop_after_s: None,
        steps: None,
        steps_end_in_copy: false,
        priority: None,
    }
}

/// A tenant of 500 µs kernels that synchronises every `per_step` of them,
/// with `host_us` of host work between steps.
fn stepper(name: &'static str, share: u32, per_step: u32, host_us: u32) -> Tenant {
    Tenant { steps: Some((per_step, host_us)), ..tenant(name, Some(share), None, 500) }
}

/// The same loop, each step ending in a synchronous copy to the host.
fn copier(name: &'static str, share: u32, per_step: u32, host_us: u32) -> Tenant {
    Tenant { steps_end_in_copy: true, ..stepper(name, share, per_step, host_us) }
}

struct Scenario {
    name: &'static str,
    tenants: Vec<Tenant>,
    /// Each tenant's target, percent of the device.
    targets: Vec<f64>,
}

fn scenarios() -> Vec<Scenario> {
    let t = tenant;
    vec![
        Scenario { name: "25-75", tenants: vec![t("a", Some(25), None, 1000), t("b", Some(75), None, 1000)], targets: vec![25.0, 75.0] },
        Scenario { name: "10-90", tenants: vec![t("a", Some(10), None, 1000), t("b", Some(90), None, 1000)], targets: vec![10.0, 90.0] },
        Scenario {
            name: "10-20-30-40",
            tenants: vec![
                t("a", Some(10), None, 1000),
                t("b", Some(20), None, 1000),
                t("c", Some(30), None, 1000),
                t("d", Some(40), None, 1000),
            ],
            targets: vec![10.0, 20.0, 30.0, 40.0],
        },
        Scenario {
            name: "mixed-kernels-25-75",
            tenants: vec![t("short", Some(25), None, 50), t("long", Some(75), None, 5000)],
            targets: vec![25.0, 75.0],
        },
        Scenario {
            name: "two-devices",
            tenants: vec![
                Tenant { device: 0, shares: Some("0=25,1=75"), ..t("a", None, None, 1000) },
                Tenant { device: 0, shares: Some("0=75,1=25"), ..t("b", None, None, 1000) },
                Tenant { device: 1, shares: Some("0=25,1=75"), ..t("a", None, None, 1000) },
                Tenant { device: 1, shares: Some("0=75,1=25"), ..t("b", None, None, 1000) },
            ],
            targets: vec![25.0, 75.0, 75.0, 25.0],
        },
        Scenario {
            name: "25-75-100us",
            tenants: vec![t("a", Some(25), None, 100), t("b", Some(75), None, 100)],
            targets: vec![25.0, 75.0],
        },
        // Launch-bound tenants: kernels of 5 µs and of 1 µs, which the
        // checkpoints let hundreds of launches go between them.
        Scenario { name: "25-75-5us", tenants: vec![t("a", Some(25), None, 5), t("b", Some(75), None, 5)], targets: vec![25.0, 75.0] },
        Scenario { name: "25-75-1us", tenants: vec![t("a", Some(25), None, 1), t("b", Some(75), None, 1)], targets: vec![25.0, 75.0] },
        // Training loops that synchronise every step (`loss.item()`).
        Scenario { name: "sync-1ms-25-75", tenants: vec![stepper("a", 25, 2, 0), stepper("b", 75, 2, 0)], targets: vec![25.0, 75.0] },
        Scenario { name: "sync-2ms-25-75", tenants: vec![stepper("a", 25, 4, 0), stepper("b", 75, 4, 0)], targets: vec![25.0, 75.0] },
        Scenario { name: "sync-10ms-25-75", tenants: vec![stepper("a", 25, 20, 0), stepper("b", 75, 20, 0)], targets: vec![25.0, 75.0] },
        Scenario { name: "sync-40ms-25-75", tenants: vec![stepper("a", 25, 80, 0), stepper("b", 75, 80, 0)], targets: vec![25.0, 75.0] },
        Scenario {
            name: "sync-10ms-host-2ms-25-75",
            tenants: vec![stepper("a", 25, 20, 2000), stepper("b", 75, 20, 2000)],
            targets: vec![25.0, 75.0],
        },
        Scenario {
            name: "copy-10ms-host-2ms-25-75",
            tenants: vec![copier("a", 25, 20, 2000), copier("b", 75, 20, 2000)],
            targets: vec![25.0, 75.0],
        },
        Scenario {
            name: "sync-2ms-25-vs-75",
            tenants: vec![stepper("a", 25, 4, 0), tenant("b", Some(75), None, 500)],
            targets: vec![25.0, 75.0],
        },
        Scenario {
            name: "25-vs-sync-2ms-75",
            tenants: vec![tenant("a", Some(25), None, 500), stepper("b", 75, 4, 0)],
            targets: vec![25.0, 75.0],
        },
        // Limits and priorities beside shares, 2 ms kernels back to back.
        // Targets by the monitor's rule (`sched::targets`): shares first,
        // members without one split what they leave, each cut to its
        // limit, then the spare time by priority within limits.
        Scenario { name: "limit-30-alone", tenants: vec![t("b", None, Some(30), 2000)], targets: vec![30.0] },
        // Near the whole device: turns of about 100 ms, whose budget
        // refills while they run.
        Scenario { name: "limit-90-alone", tenants: vec![t("b", None, Some(90), 2000)], targets: vec![90.0] },
        Scenario {
            name: "limit-30-beside-share-60",
            tenants: vec![t("a", Some(60), None, 2000), t("b", None, Some(30), 2000)],
            targets: vec![70.0, 30.0],
        },
        Scenario {
            name: "limit-30-prio-1-beside-share-60",
            tenants: vec![t("a", Some(60), None, 2000), Tenant { priority: Some(1), ..t("b", None, Some(30), 2000) }],
            targets: vec![70.0, 30.0],
        },
        Scenario {
            name: "share-10-prio-1-limit-50-beside-share-40",
            tenants: vec![Tenant { priority: Some(1), ..t("a", Some(10), Some(50), 2000) }, t("b", Some(40), None, 2000)],
            targets: vec![50.0, 50.0],
        },
        Scenario {
            name: "share-25-prio-1-beside-share-75",
            tenants: vec![Tenant { priority: Some(1), ..t("a", Some(25), None, 2000) }, t("b", Some(75), None, 2000)],
            targets: vec![25.0, 75.0],
        },
        // Teams (`[teams.NAME]` in the monitor's configuration, see
        // `team_config`): team a's one tenant against team b's four, the
        // teams at 50 / 50. Each b tenant gets an eighth, not a fifth.
        Scenario {
            name: "teams-1-vs-4",
            tenants: vec![
                t("solo", None, None, 1000),
                t("b-1", None, None, 1000),
                t("b-2", None, None, 1000),
                t("b-3", None, None, 1000),
                t("b-4", None, None, 1000),
            ],
            targets: vec![50.0, 12.5, 12.5, 12.5, 12.5],
        },
        Scenario {
            // The same teams, every tenant a loop that synchronises every
            // 10 ms step (20 kernels of 500 µs).
            name: "teams-1-vs-4-sync-10ms",
            tenants: ["solo", "b-1", "b-2", "b-3", "b-4"]
                .into_iter()
                .map(|name| Tenant { steps: Some((20, 0)), ..tenant(name, None, None, 500) })
                .collect(),
            targets: vec![50.0, 12.5, 12.5, 12.5, 12.5],
        },
        Scenario {
            name: "no-shares-3",
            tenants: vec![t("a", None, None, 1000), t("b", None, None, 1000), t("c", None, None, 1000)]
                .into_iter()
                .map(|mut x| {
                    x.share = Some(0);
                    x
                })
                .collect(),
            targets: vec![33.3, 33.3, 33.3],
        },
    ]
}

struct Args {
    seconds: f64,
    only: Option<String>,
}

fn args() -> Args {
    let mut args = Args { seconds: 12.0, only: None };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => args.seconds = it.next().and_then(|s| s.parse().ok()).unwrap_or(args.seconds),
            "--only" => args.only = it.next(),
            _ => {}
        }
    }
    args
}

/// Kernel time per 100 ms bin of one tenant, µs.
fn busy_bins(out: &gpuslice_tests::Output, kernel_us: u64) -> Vec<f64> {
    let mut bins = Vec::new();
    for line in out.stdout.lines() {
        let mut fields = line.split_whitespace();
        let (Some(b), Some(n)) = (fields.next().and_then(|f| f.strip_prefix("bin=")), fields.next().and_then(|f| f.strip_prefix("n=")))
        else {
            continue;
        };
        let (Ok(b), Ok(n)) = (b.parse::<usize>(), n.parse::<f64>()) else { continue };
        if bins.len() <= b {
            bins.resize(b + 1, 0.0);
        }
        bins[b] = n * kernel_us as f64;
    }
    bins
}

/// Seconds since the Unix epoch: the clients' shared time base.
fn epoch_now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn spawn(sim: &Sim, t: &Tenant, seconds: f64, epoch_s: f64) -> Running {
    let mut cmd = sim.py("fairness_load.py");
    cmd.env("GPUSLICE_TENANT", t.name).env("FAIRNESS_EPOCH", format!("{epoch_s:.6}"));
    if let Some(share) = t.share.filter(|s| *s > 0) {
        cmd.env("GPUSLICE_COMPUTE_SHARE", share.to_string());
    }
    if let Some(shares) = t.shares {
        cmd.env("GPUSLICE_COMPUTE_SHARE", shares);
    }
    if t.share == Some(0) {
        // No share, but a compute setting, so that the tenant takes turns.
        cmd.env("GPUSLICE_PRIORITY", "1");
    }
    if let Some(limit) = t.limit {
        cmd.env("GPUSLICE_COMPUTE_LIMIT", limit.to_string());
    }
    if let Some(priority) = t.priority {
        cmd.env("GPUSLICE_PRIORITY", priority.to_string());
    }
    let run_s = t.stop_after_s.unwrap_or(seconds).to_string();
    match t.steps {
        Some((per_step, host_us)) => cmd.args([
            "steps",
            &t.kernel_us.to_string(),
            &per_step.to_string(),
            &host_us.to_string(),
            &run_s,
            if t.steps_end_in_copy { "copy" } else { "sync" },
        ]),
        None => cmd.args(["saturate", &t.kernel_us.to_string(), &run_s, &t.device.to_string()]),
    };
    sim.spawn(&mut cmd)
}

fn sum(bins: &[f64], from: usize, to: usize) -> f64 {
    bins.iter().skip(from).take(to.saturating_sub(from)).sum()
}

/// The monitor's configuration for a scenario of teams. Only tenants the
/// monitor governs are members, so the file names each.
fn team_config(scenario: &str) -> Option<&'static str> {
    scenario.starts_with("teams-1-vs-4").then_some(
        "[teams.a]\ntenants = [\"solo\"]\nshare = 50\n[teams.b]\ntenants = [\"b-*\"]\nshare = 50\n\
         [tenants.solo]\n[tenants.b-1]\n[tenants.b-2]\n[tenants.b-3]\n[tenants.b-4]\n",
    )
}

/// Runs a scenario; returns each tenant's kernel time per bin.
fn run(scenario: &Scenario, seconds: f64) -> Vec<Vec<f64>> {
    let devices = scenario.tenants.iter().map(|t| t.device + 1).max().unwrap_or(1);
    let sim = Sim::new().shim().devices(devices).timeout(Duration::from_secs(seconds as u64 + 120));
    // A share needs the monitor (it arbitrates the device).
    let config = team_config(scenario.name).map(|text| {
        let path = sim.dir().join("monitor.toml");
        std::fs::write(&path, text).expect("write the monitor's configuration");
        path
    });
    let _monitor = Monitor::start(&sim, MonitorOptions { config, ..MonitorOptions::default() });
    // Every client counts from one epoch, a moment after they are all
    // spawned, and runs past the run's end by its own start-up time.
    let epoch_s = epoch_now_s() + 0.5;
    let running: Vec<Running> = scenario.tenants.iter().map(|t| spawn(&sim, t, seconds + 1.0, epoch_s)).collect();
    running
        .into_iter()
        .zip(&scenario.tenants)
        .map(|(r, t)| {
            let out = r.wait();
            if !out.success() {
                eprintln!("{}: tenant {} failed:\n{out}", scenario.name, t.name);
            }
            busy_bins(&out, t.kernel_us)
        })
        .collect()
}

fn chart(name: &str, series: &[(String, f64)], bins: &[Vec<f64>], devices: &[u32]) -> Result<PathBuf, String> {
    let dir = gpuslice_tests::repo_root().join("target/fairness");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("{name}.svg"));
    // 500 ms points: each tenant's share of its device's kernel time.
    let len = bins.iter().map(Vec::len).max().unwrap_or(0) / 5;
    let lines: Vec<chart::Series> = bins
        .iter()
        .zip(devices)
        .zip(series)
        .map(|((b, device), (label, target))| chart::Series {
            label: label.clone(),
            points: (0..len)
                .filter_map(|i| {
                    let total: f64 = bins.iter().zip(devices).filter(|(_, d)| *d == device).map(|(o, _)| sum(o, i * 5, i * 5 + 5)).sum();
                    (total > 0.0).then(|| (i as f64 * 0.5, 100.0 * sum(b, i * 5, i * 5 + 5) / total))
                })
                .collect(),
            target_percent: Some(*target),
        })
        .collect();
    let title = format!("gpuslice fairness {name} on a simulated GPU: each tenant's share of its device's time");
    chart::Chart { title: &title, series: &lines, band_points: Some(2.0) }.write(&path)?;
    Ok(path)
}

fn fairness(scenario: &Scenario, seconds: f64) {
    let bins = run(scenario, seconds);
    let names: Vec<&str> = scenario.tenants.iter().map(|t| t.name).collect();
    // The 10 s window after 1 s of convergence (shorter runs: what is left).
    let (from, to) = (10, ((seconds * 10.0) as usize).min(110));
    let devices: Vec<u32> = scenario.tenants.iter().map(|t| t.device).collect();
    // Each tenant's share is of its own device's kernel time.
    let on_device = |d: u32| bins.iter().zip(&devices).filter(move |(_, dev)| **dev == d).map(|(b, _)| b);
    println!("\n{}: target vs got over {:.0}-{:.0} s", scenario.name, from as f64 / 10.0, to as f64 / 10.0);
    println!("  {:<8} {:>6} {:>7} {:>7} {:>7}   2 s windows", "tenant", "device", "target", "got", "error");
    let mut worst: f64 = 0.0;
    for (((b, name), target), device) in bins.iter().zip(&names).zip(&scenario.targets).zip(&devices) {
        let total: f64 = on_device(*device).map(|o| sum(o, from, to)).sum();
        let got = if total > 0.0 { 100.0 * sum(b, from, to) / total } else { 0.0 };
        let windows: Vec<String> = (from..to)
            .step_by(20)
            .map(|w| {
                let t: f64 = on_device(*device).map(|o| sum(o, w, w + 20)).sum();
                format!("{:5.1}", if t > 0.0 { 100.0 * sum(b, w, w + 20) / t } else { 0.0 })
            })
            .collect();
        // A limit is a fraction of the device's wall time, not of what it ran.
        let limited = scenario.tenants.iter().find(|t| t.name == *name && t.device == *device).is_some_and(|t| t.limit.is_some());
        let of_wall = 100.0 * sum(b, from, to) / ((to - from) as f64 * 100_000.0);
        let (got, note) = if limited { (of_wall, "  (of wall time: a limit)") } else { (got, "") };
        worst = worst.max((got - target).abs());
        println!("  {:<8} {:>6} {:>6.1}% {:>6.1}% {:>+6.1}   {}{note}", name, device, target, got, got - target, windows.join(" "));
    }
    let wall_us = (to - from) as f64 * 100_000.0;
    let device_count = devices.iter().max().map_or(1, |d| d + 1);
    for d in 0..device_count {
        let total: f64 = on_device(d).map(|o| sum(o, from, to)).sum();
        println!("  device {d} busy {:.1}% of wall time", 100.0 * total / wall_us);
    }
    println!("  worst error {worst:.1} points");
    let series: Vec<(String, f64)> = scenario
        .tenants
        .iter()
        .zip(&scenario.targets)
        .map(|(t, target)| {
            let mut label = t.name.to_string();
            if device_count > 1 {
                label += &format!(" (device {})", t.device);
            }
            // The share on this device (a per-device list's entry for it).
            match (t.share.is_some() || t.shares.is_some(), t.limit) {
                (true, _) => label += &format!(", share {target:.0}"),
                (false, Some(limit)) => label += &format!(", limit {limit}"),
                (false, None) if team_config(scenario.name).is_some() => label += ", its team's share",
                (false, None) => label += ", no setting",
            }
            (label, *target)
        })
        .collect();
    match chart(scenario.name, &series, &bins, &devices) {
        Ok(path) => println!("  chart: {}", path.display()),
        Err(e) => println!("  chart not written: {e}"),
    }
}

/// A lone tenant: its share of the wall time, and the bare client's.
fn alone(seconds: f64) {
    let bare_sim = Sim::new().timeout(Duration::from_secs(seconds as u64 + 120));
    let mut bare = bare_sim.py("fairness_load.py");
    bare.args(["saturate", "1000", &seconds.to_string()]);
    let bare = busy_bins(&bare_sim.run(&mut bare), 1000);
    let (from, to) = (10, ((seconds * 10.0) as usize).min(110));
    let wall_us = (to - from) as f64 * 100_000.0;
    let bare_ratio = sum(&bare, from, to) / wall_us;
    println!("\nalone: share of wall time (the same client without the shim: {:.1}%)", 100.0 * bare_ratio);
    for (label, t) in
        [("share 30, no limit", tenant("alone", Some(30), None, 1000)), ("share 30, limit 30", tenant("alone", Some(30), Some(30), 1000))]
    {
        let scenario = Scenario { name: "alone", tenants: vec![t], targets: vec![] };
        let bins = run(&scenario, seconds);
        let ratio = sum(&bins[0], from, to) / wall_us;
        println!("  {label:<20} got {:5.1}% of wall time = {:5.1}% of what the device ran bare", 100.0 * ratio, 100.0 * ratio / bare_ratio);
    }
}

/// Priority: bursts of 20 × 200 µs every 50 ms at priority 1, alone and
/// against a priority-0 tenant (share 50) saturating the device with 2 ms
/// kernels.
fn priority(seconds: f64) {
    let burst = |sim: &Sim| {
        let mut cmd = sim.py("fairness_load.py");
        cmd.env("GPUSLICE_TENANT", "inference").env("GPUSLICE_PRIORITY", "1").args(["burst", "200", "20", "50", &seconds.to_string()]);
        sim.spawn(&mut cmd)
    };
    let latencies = |out: gpuslice_tests::Output| {
        let mut v: Vec<f64> = out.all("burst_us").iter().filter_map(|s| s.parse().ok()).skip(10).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let pct = compute_support::percentile;
    let sim = Sim::new().shim().timeout(Duration::from_secs(seconds as u64 + 120));
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let lone = latencies(burst(&sim).wait());
    let high = burst(&sim);
    let low = spawn(&sim, &tenant("training", Some(50), None, 2000), seconds, epoch_now_s());
    let (shared, low_out) = (latencies(high.wait()), low.wait());
    let low_bins = busy_bins(&low_out, 2000);
    let (from, to) = (10, ((seconds * 10.0) as usize).min(110));
    let low_ratio = sum(&low_bins, from, to) / ((to - from) as f64 * 100_000.0);
    let high_ratio = 20.0 * 200.0 / 50_000.0;
    println!("\npriority: bursts of 20 x 200 us every 50 ms (priority 1) against 2 ms kernels back to back (priority 0)");
    println!("  burst latency alone:     p50 {:6.0} us  p99 {:6.0} us", pct(&lone, 0.5), pct(&lone, 0.99));
    println!(
        "  burst latency shared:    p50 {:6.0} us  p99 {:6.0} us  (p99 {:.2}x alone)",
        pct(&shared, 0.5),
        pct(&shared, 0.99),
        pct(&shared, 0.99) / pct(&lone, 0.99)
    );
    println!(
        "  low priority got {:.1}% of wall time; the rest after the bursts is {:.1}%: {:.0}% of it",
        100.0 * low_ratio,
        100.0 * (1.0 - high_ratio),
        100.0 * low_ratio / (1.0 - high_ratio)
    );
}

/// Priority against a loop that synchronises every step: a training loop
/// of 20 × 50 µs steps (priority 0) beside bursts of 20 × 200 µs every
/// 50 ms (priority 1) that come and go in cycles of 1.5 s on and off
/// (`compute_support::priority_loop`, as `tests/compute_loops.rs` runs it).
fn priority_loop(seconds: f64) {
    let sim = Sim::new().shim().timeout(Duration::from_secs(seconds as u64 + 120));
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let cycles = ((seconds / 3.0) as usize).max(3);
    let run = compute_support::priority_loop(&sim, cycles, 1.5);
    println!("\npriority_loop: a training loop that synchronises every step beside priority bursts, {cycles} cycles of 1.5 s on and off");
    println!("  {}", run.summary());
}

/// Throughput with short kernels: how many 5 µs kernels one process
/// without the shim runs, against two tenants with shares of 50 under the
/// shim and a monitor, and two processes without the shim. The C client
/// (`tests/c/compute_load.c`): a Python client cannot launch 5 µs kernels
/// as fast as the device runs them.
fn throughput(seconds: f64) {
    let client = |sim: &Sim, tenant: &str, share: Option<&str>| {
        let mut cmd = sim.c("compute_load");
        cmd.env("GPUSLICE_TENANT", tenant);
        if let Some(share) = share {
            cmd.env("GPUSLICE_COMPUTE_SHARE", share);
        }
        cmd.args(["kernel", "5", &seconds.to_string()]);
        sim.spawn(&mut cmd)
    };
    let rate = |outs: Vec<gpuslice_tests::Output>| -> (f64, Vec<f64>) {
        let each: Vec<f64> = outs.iter().map(|o| o.u64("kernels") as f64 / (o.f64("wall_us") / 1e6)).collect();
        (each.iter().sum(), each)
    };
    let bare = Sim::new().timeout(Duration::from_secs(seconds as u64 + 120));
    let (one, _) = rate(vec![client(&bare, "bare", None).wait()]);
    let bare2 = Sim::new().timeout(Duration::from_secs(seconds as u64 + 120));
    let (two_bare, _) = rate(vec![client(&bare2, "a", None), client(&bare2, "b", None)].into_iter().map(|r| r.wait()).collect());
    let shared = Sim::new().shim().timeout(Duration::from_secs(seconds as u64 + 120));
    let _monitor = Monitor::start(&shared, MonitorOptions::default());
    let (two_shares, each) =
        rate(vec![client(&shared, "a", Some("25")), client(&shared, "b", Some("75"))].into_iter().map(|r| r.wait()).collect());
    println!("\nthroughput with 5 us kernels (kernels per second, C client):");
    println!("  one process, no shim:             {one:9.0}");
    println!("  two processes, no shim:           {two_bare:9.0}  ({:.2}x one)", two_bare / one);
    println!(
        "  two tenants, shares 25 / 75:      {two_shares:9.0}  ({:.2}x one; {:.1} % / {:.1} %)",
        two_shares / one,
        100.0 * each[0] / two_shares.max(1.0),
        100.0 * each.get(1).copied().unwrap_or(0.0) / two_shares.max(1.0)
    );
}

/// Starts two `torch_oploop.py` tenants' loops together, once both are
/// ready: each times its own loop, so the one ready first would run alone
/// before the other's loop began, and the other alone after it ended.
fn together(mut a: Running, mut b: Running) -> (Running, Running) {
    a.wait_for("started");
    b.wait_for("started");
    a.send_line("go");
    b.send_line("go");
    (a, b)
}

/// PyTorch clients (opt-in: `bash scripts/check-pytorch.sh` installs
/// PyTorch into `.deps/torch-venv`): the op rate of a one-op loop
/// (`tests/python/torch_oploop.py`, 5 µs kernels) bare, alone under the shim
/// with a share of 50, and two tenants with shares of 25 and 75.
fn pytorch(seconds: f64) {
    let python = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".deps/torch-venv/bin/python");
    if !python.is_file() {
        println!("\npytorch: not run: no PyTorch at {} (bash scripts/check-pytorch.sh installs it)", python.display());
        return;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/torch_oploop.py");
    let client = |sim: &Sim, tenant: &str, share: Option<&str>| {
        let mut cmd = sim.command(&python);
        cmd.arg(&script).arg(seconds.to_string()).env("GPUSLICE_TENANT", tenant);
        if let Some(share) = share {
            cmd.env("GPUSLICE_COMPUTE_SHARE", share);
        }
        sim.spawn(&mut cmd)
    };
    let sim = |shim: bool| {
        let sim = Sim::new().env("SIMGPU_KERNEL_US", "5").timeout(Duration::from_secs(seconds as u64 + 180));
        if shim {
            sim.shim()
        } else {
            sim
        }
    };
    let bare_sim = sim(false);
    let bare = client(&bare_sim, "bare", None).wait().f64("rate");
    let alone_sim = sim(true);
    let alone = {
        let _monitor = Monitor::start(&alone_sim, MonitorOptions::default());
        client(&alone_sim, "alone", Some("50")).wait().f64("rate")
    };
    let pair_sim = sim(true);
    let _monitor = Monitor::start(&pair_sim, MonitorOptions::default());
    let (a, b) = together(client(&pair_sim, "a", Some("25")), client(&pair_sim, "b", Some("75")));
    let (a, b) = (a.wait().f64("rate"), b.wait().f64("rate"));
    println!("\npytorch one-op loop (5 us kernels), ops per second:");
    println!("  bare:                       {bare:9.0}");
    println!("  alone with share 50:        {alone:9.0}  ({:.3}x bare)", alone / bare);
    println!("  two tenants, shares 25/75:  {:9.0} + {:9.0}  ({:.1} % / {:.1} %)", a, b, 100.0 * a / (a + b), 100.0 * b / (a + b));
    // The same loop reading a value back (`.item()`) every op, and an MLP
    // trained with `loss.item()` every step, as two tenants of 25 and 75.
    let item_sim = Sim::new().shim().env("SIMGPU_KERNEL_US", "500").timeout(Duration::from_secs(seconds as u64 + 180));
    let _item_monitor = Monitor::start(&item_sim, MonitorOptions::default());
    let oploop = |tenant: &str, share: &str| {
        let mut cmd = item_sim.command(&python);
        cmd.arg(&script).arg(seconds.to_string()).arg("1").env("GPUSLICE_TENANT", tenant).env("GPUSLICE_COMPUTE_SHARE", share);
        item_sim.spawn(&mut cmd)
    };
    let (a, b) = together(oploop("a", "25"), oploop("b", "75"));
    let (a, b) = (a.wait().f64("rate"), b.wait().f64("rate"));
    println!("  one op and .item() each (500 us kernels), 25/75: {:.1} % / {:.1} %", 100.0 * a / (a + b), 100.0 * b / (a + b));
    let train = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/torch_train_load.py");
    let mlp = |tenant: &str, share: &str| {
        let mut cmd = item_sim.command(&python);
        cmd.arg(&train).arg(seconds.to_string()).arg("item").env("GPUSLICE_TENANT", tenant).env("GPUSLICE_COMPUTE_SHARE", share);
        let mut running = item_sim.spawn(&mut cmd);
        running.wait_for("started");
        running
    };
    let (mut a, mut b) = (mlp("a", "25"), mlp("b", "75"));
    a.send_line("go");
    b.send_line("go");
    let (a, b) = (a.wait().u64("steps") as f64, b.wait().u64("steps") as f64);
    println!(
        "  MLP with loss.item() every step (500 us kernels), 25/75: {:.1} % / {:.1} % of the steps",
        100.0 * a / (a + b),
        100.0 * b / (a + b)
    );
}

/// The C client (`tests/c/compute_load.c`) synchronising every 4 kernels of
/// 500 µs, two tenants of 25 and 75: a loop with no Python in it.
fn c_sync(seconds: f64) {
    let sim = Sim::new().shim().timeout(Duration::from_secs(seconds as u64 + 120));
    let _monitor = Monitor::start(&sim, MonitorOptions::default());
    let client = |tenant: &str, share: &str| {
        let mut cmd = sim.c("compute_load");
        cmd.env("GPUSLICE_TENANT", tenant).env("GPUSLICE_COMPUTE_SHARE", share).args([
            "kernel",
            "500",
            &seconds.to_string(),
            "0",
            "sync=4",
        ]);
        sim.spawn(&mut cmd)
    };
    let (a, b) = (client("a", "25"), client("b", "75"));
    let (a, b) = (a.wait(), b.wait());
    let (ka, kb) = (a.u64("kernels") as f64, b.u64("kernels") as f64);
    let busy = (ka + kb) * 500.0 / a.f64("wall_us").max(b.f64("wall_us"));
    println!(
        "\nC client synchronising every 4 kernels of 500 us, shares 25/75: {:.1} % / {:.1} % (device busy {:.1} %)",
        100.0 * ka / (ka + kb),
        100.0 * kb / (ka + kb),
        100.0 * busy
    );
}

fn main() {
    let args = args();
    let wanted = |name: &str| args.only.as_deref().is_none_or(|o| o == name);
    for scenario in scenarios().iter().filter(|s| wanted(s.name)) {
        fairness(scenario, args.seconds);
    }
    if wanted("alone") {
        alone(args.seconds);
    }
    if wanted("priority") {
        priority(args.seconds);
    }
    if wanted("priority_loop") {
        priority_loop(args.seconds);
    }
    if wanted("throughput") {
        throughput(args.seconds.min(6.0));
    }
    if wanted("c-sync") {
        c_sync(args.seconds.min(8.0));
    }
    if wanted("pytorch") {
        pytorch(args.seconds.min(8.0));
    }
}
