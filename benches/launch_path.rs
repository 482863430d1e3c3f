//! What being governed costs a launch-bound loop: launches per second of
//! one process alone on a simulated device, bare (no shim) and governed (a
//! share or a limit), the two sides interleaved round by round in one run
//! so that the machine's load moves both alike. Each row prints both rates
//! and the governed side's ratio to bare: the median over the rounds and
//! the lowest and highest.
//!
//! Rows (targets from issue "launch-path": a share ≥ 0.95, a limit ≥ 0.90,
//! PyTorch ≥ 0.97):
//! - empty kernels (`compute_load kernel 0`): the launch-bound extreme;
//! - CUDA graph launches of four empty kernels (`compute_load graph 0`);
//! - 5 µs kernels;
//! - a limit of 90, with the monitor (it keeps the limit) and without one
//!   (the tenant's own bucket); graph launches also under a limit of 99,
//!   where the limit's own hold is 0.99 and the rest is the metering's cost;
//! - a PyTorch one-op loop on 5 µs kernels (`tests/python/torch_oploop.py`;
//!   only where `bash scripts/check-pytorch.sh` installed PyTorch);
//! - a control: empty kernels bare on both sides, beside a monitor as the
//!   share's row is. Its spread is what this machine and simgpu's two
//!   threads (the launching thread and the device's worker, contending
//!   for 2 cores) do to a launch-bound loop with no shim at all, so a
//!   ratio inside it says nothing of the shim.
//!
//! Run: `cargo build --release --workspace && cargo bench --bench launch_path`
//! (`-- --seconds S --rounds R`, default 2 s and 5 rounds; `-- --only NAME`
//! for the rows whose name contains NAME). `scripts/bench.sh` runs it and
//! writes its table into docs/benchmarks.md.

#[path = "../tests/monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::Sim;
use monitor_support::{Monitor, MonitorOptions};
use std::time::Duration;

/// How a row's governed side is set up.
#[derive(Clone, Copy)]
enum Governed {
    /// `GPUSLICE_COMPUTE_SHARE=50` with a monitor running.
    Share,
    /// `GPUSLICE_COMPUTE_LIMIT=90` with a monitor running.
    LimitMonitor,
    /// `GPUSLICE_COMPUTE_LIMIT=percent` and no monitor: the tenant's
    /// bucket.
    LimitBucket { percent: u32 },
    /// Not governed: the "governed" side runs bare too (the control row).
    Bare,
}

/// What a row runs.
#[derive(Clone, Copy)]
enum Client {
    /// `compute_load ROUTE KERNEL_US`.
    C { route: &'static str, kernel_us: u64 },
    /// `torch_oploop.py` with simgpu's kernels of `kernel_us`.
    Torch { kernel_us: u64 },
}

struct Row {
    name: &'static str,
    client: Client,
    governed: Governed,
    /// The ratio to bare the row is held to (none for the control).
    target: Option<f64>,
}

fn rows() -> Vec<Row> {
    use Client::*;
    use Governed::*;
    vec![
        Row { name: "empty kernels, share", client: C { route: "kernel", kernel_us: 0 }, governed: Share, target: Some(0.95) },
        Row { name: "graph launches (4 empty), share", client: C { route: "graph", kernel_us: 0 }, governed: Share, target: Some(0.95) },
        Row { name: "5 us kernels, share", client: C { route: "kernel", kernel_us: 5 }, governed: Share, target: Some(0.95) },
        Row {
            name: "empty kernels, limit 90, monitor",
            client: C { route: "kernel", kernel_us: 0 },
            governed: LimitMonitor,
            target: Some(0.90),
        },
        Row {
            name: "empty kernels, limit 90, no monitor",
            client: C { route: "kernel", kernel_us: 0 },
            governed: LimitBucket { percent: 90 },
            target: Some(0.90),
        },
        Row {
            name: "graph launches, limit 90, no monitor",
            client: C { route: "graph", kernel_us: 0 },
            governed: LimitBucket { percent: 90 },
            target: Some(0.90),
        },
        // The bucket counts this loop's device as busy all the time (on
        // simgpu an empty graph is nothing but the device waiting for the
        // next launch, which a bracket of events cannot tell from work), so
        // a limit of 90 alone holds it at 0.90 of bare. Under 99 that hold
        // is 0.99, and the rest is what the metering costs (the samples'
        // event records), held to a share's target.
        Row {
            name: "graph launches, limit 99, no monitor",
            client: C { route: "graph", kernel_us: 0 },
            governed: LimitBucket { percent: 99 },
            target: Some(0.95),
        },
        Row { name: "PyTorch one-op loop (5 us), share", client: Torch { kernel_us: 5 }, governed: Share, target: Some(0.97) },
        Row {
            name: "control: empty kernels, bare against bare",
            client: C { route: "kernel", kernel_us: 0 },
            governed: Bare,
            target: None,
        },
    ]
}

struct Args {
    seconds: f64,
    rounds: usize,
    only: Option<String>,
}

fn args() -> Args {
    let mut args = Args { seconds: 2.0, rounds: 5, only: None };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => args.seconds = it.next().and_then(|v| v.parse().ok()).expect("--seconds takes a number"),
            "--rounds" => args.rounds = it.next().and_then(|v| v.parse().ok()).expect("--rounds takes a whole number"),
            "--only" => args.only = it.next(),
            // cargo bench passes --bench.
            _ => {}
        }
    }
    args
}

fn torch_python() -> Option<std::path::PathBuf> {
    let python = gpuslice_tests::repo_root().join(".deps/torch-venv/bin/python");
    python.is_file().then_some(python)
}

/// One run of the row's client; its rate in launches (or ops) per second.
fn once(row: &Row, governed: bool, seconds: f64) -> f64 {
    let timeout = Duration::from_secs(seconds as u64 + 120);
    let mut sim = Sim::new().timeout(timeout);
    if let Client::Torch { kernel_us } = row.client {
        sim = sim.env("SIMGPU_KERNEL_US", kernel_us.to_string());
    }
    if governed {
        sim = match row.governed {
            Governed::Share => sim.shim().tenant("governed").env("GPUSLICE_COMPUTE_SHARE", "50"),
            Governed::LimitMonitor => sim.shim().tenant("governed").env("GPUSLICE_COMPUTE_LIMIT", "90"),
            Governed::LimitBucket { percent } => sim.shim().tenant("governed").env("GPUSLICE_COMPUTE_LIMIT", percent.to_string()),
            Governed::Bare => sim,
        };
    }
    // Both sides run beside the monitor where the governed one needs it: on
    // a machine of two cores, its threads and the shim's compete with the
    // launching thread and simgpu's worker, and the bare side must see the
    // same machine.
    let _monitor = (!matches!(row.governed, Governed::LimitBucket { .. })).then(|| Monitor::start(&sim, MonitorOptions::default()));
    match row.client {
        Client::C { route, kernel_us } => {
            let mut cmd = sim.c("compute_load");
            cmd.args([route, &kernel_us.to_string(), &seconds.to_string()]);
            let out = sim.spawn(&mut cmd).wait();
            assert!(out.success(), "{}: compute_load failed:\n{out}", row.name);
            out.u64("launches") as f64 / (out.f64("wall_us") / 1e6)
        }
        Client::Torch { .. } => {
            let python = torch_python().expect("checked before");
            let mut cmd = sim.command(&python);
            cmd.arg(gpuslice_tests::repo_root().join("tests/python/torch_oploop.py")).arg(seconds.to_string());
            let out = sim.spawn(&mut cmd).wait();
            assert!(out.success(), "{}: torch_oploop.py failed:\n{out}", row.name);
            out.f64("rate")
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn rate(per_s: f64) -> String {
    if per_s >= 1e6 {
        format!("{:.2} M/s", per_s / 1e6)
    } else {
        format!("{:.0} k/s", per_s / 1e3)
    }
}

fn main() {
    let args = args();
    println!(
        "launch-bound loops, one process alone: bare against governed, {} rounds of {} s a side, interleaved",
        args.rounds, args.seconds
    );
    println!("load average before: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
    println!();
    println!("| loop | bare | governed | governed / bare (median, min–max) | target |");
    println!("|---|---|---|---|---|");
    for row in rows().iter().filter(|r| args.only.as_deref().is_none_or(|o| r.name.contains(o))) {
        if matches!(row.client, Client::Torch { .. }) && torch_python().is_none() {
            println!("| {} | not run: no PyTorch in .deps/torch-venv (bash scripts/check-pytorch.sh installs it) | | | |", row.name);
            continue;
        }
        let (mut bare, mut gov, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..args.rounds {
            // Alternate which side goes first, so that neither always runs
            // on a machine the other just warmed (or loaded).
            let (b, g) = if round % 2 == 0 {
                let b = once(row, false, args.seconds);
                (b, once(row, true, args.seconds))
            } else {
                let g = once(row, true, args.seconds);
                (once(row, false, args.seconds), g)
            };
            bare.push(b);
            gov.push(g);
            ratios.push(g / b);
        }
        let lo = ratios.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = ratios.iter().copied().fold(0.0, f64::max);
        let r = median(&mut ratios);
        let target = match row.target {
            Some(t) => format!("≥ {t:.2} {}", if r >= t { "met" } else { "NOT met" }),
            None => "none: the noise of a ratio".to_string(),
        };
        println!("| {} | {} | {} | **{r:.3}** ({lo:.3}–{hi:.3}) | {target} |", row.name, rate(median(&mut bare)), rate(median(&mut gov)),);
    }
    println!("\nload average after: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
}
