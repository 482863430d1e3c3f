//! `gpuslice`: the command-line front of gpuslice.
//!
//! Each subcommand lives in its own module: `sim` (run a command on the
//! simulated GPU), `run` (run a command under the shim), `daemon` (the host
//! monitor), `status` (what the ledgers and NVML say now), `devices` (the
//! GPUs and what is committed on them), `queue` and `cancel` (the admission
//! queue that `run --queue` joins), `top` (the live view), `demo`.
#![deny(unsafe_op_in_unsafe_fn)]

mod config;
mod daemon;
mod demo;
mod devices;
mod discovery;
mod driver_check;
mod host;
mod libs;
mod metrics;
mod nvml;
mod queue;
mod run;
mod sim;
mod snapshot;
mod status;
mod top;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "gpuslice",
    version,
    about = "Share NVIDIA GPUs between tenants: memory caps and compute time slices",
    after_help = "Examples:\n  \
      gpuslice run --memory 8GiB --tenant team-a -- python train.py\n  \
      gpuslice run --sim --memory 1GiB -- ./my-cuda-program\n  \
      gpuslice status\n  \
      gpuslice top\n\n\
      Each verb's --help has its own examples."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command on the simulated GPU (simgpu), with no shim.
    #[command(after_help = "Example:\n  \
      SIMGPU_DEVICES=2 SIMGPU_MEMORY=16GiB gpuslice sim -- ./my-cuda-program    # two simulated 16 GiB devices")]
    Sim(sim::SimArgs),
    /// Run a command under the gpuslice shim.
    #[command(after_help = "Examples:\n  \
      gpuslice run --memory 8GiB --tenant team-a -- python train.py\n  \
      gpuslice run --memory 0=8GiB,1=4GiB --compute-limit 30 -- ./serve\n  \
      gpuslice run --sim --memory 1GiB -- ./my-cuda-program    # no GPU: on the simulated one")]
    Run(run::RunArgs),
    /// The host daemon: reclaims dead processes, applies the configuration, watches NVML, serves /metrics.
    #[command(after_help = "Example:\n  \
      gpuslice monitor --dir /run/gpuslice --config /etc/gpuslice/monitor.toml --listen 0.0.0.0:9400\n  \
      curl -s 127.0.0.1:9400/metrics")]
    Monitor(daemon::MonitorArgs),
    /// Print the tenants, devices and processes the ledgers and NVML know now.
    #[command(after_help = "Examples:\n  \
      gpuslice status\n  \
      gpuslice status --dir /run/gpuslice --json")]
    Status(status::StatusArgs),
    /// Show gpuslice sharing a simulated GPU: caps, shares, priority and the queue, for about 20 s.
    Demo(demo::DemoArgs),
    /// A workload of the demo (used by `gpuslice demo`).
    #[command(hide = true)]
    DemoWorker(demo::worker::WorkerArgs),
    /// List the GPUs: memory, committed caps, MIG mode, tenants and queued jobs on each.
    #[command(after_help = "Examples:\n  \
      gpuslice devices\n  \
      gpuslice devices --json")]
    Devices(devices::DevicesArgs),
    /// List the jobs of the admission queue (`gpuslice run --queue`).
    #[command(after_help = "Examples:\n  \
      gpuslice run --queue --memory 20GiB --priority 1 --name serve -- python serve.py &\n  \
      gpuslice queue\n  \
      gpuslice queue --json")]
    Queue(queue::QueueListArgs),
    /// End a queued job: a waiting one leaves the queue, a running one's command gets SIGTERM.
    #[command(after_help = "Example:\n  \
      gpuslice cancel 7    # the ID column of gpuslice queue")]
    Cancel(queue::CancelArgs),
    /// A live view of devices, tenants, processes and the queue; refreshes in place, q quits.
    #[command(after_help = "Examples:\n  \
      gpuslice top\n  \
      gpuslice top --dir /run/gpuslice --interval 500ms\n  \
      gpuslice top --once    # one frame as plain text, for scripts")]
    Top(top::TopArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::main(args),
        Command::Run(args) => run::main(args),
        Command::Monitor(args) => daemon::main(args),
        Command::Status(args) => status::main(args),
        Command::Demo(args) => demo::main(args),
        Command::DemoWorker(args) => demo::worker::main(args),
        Command::Devices(args) => devices::main(args),
        Command::Queue(args) => queue::list(args),
        Command::Cancel(args) => queue::cancel(args),
        Command::Top(args) => top::main(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("gpuslice: {message}");
            ExitCode::from(2)
        }
    }
}
