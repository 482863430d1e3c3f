//! `gpuslice`: the command-line front of gpuslice.
//!
//! Each subcommand lives in its own module: `sim` (run a command on the
//! simulated GPU), `run` (run a command under the shim), `daemon` (the host
//! monitor), `status` (what the ledgers and NVML say now), `devices` (the
//! GPUs and what is committed on them), `queue` and `cancel` (the admission
//! queue that `run --queue` joins).
#![deny(unsafe_op_in_unsafe_fn)]

mod config;
mod daemon;
mod devices;
mod discovery;
mod host;
mod libs;
mod metrics;
mod nvml;
mod queue;
mod run;
mod sim;
mod snapshot;
mod status;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "gpuslice", version, about = "Share NVIDIA GPUs between tenants: memory caps and compute time slices")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a command on the simulated GPU (simgpu), with no shim.
    Sim(sim::SimArgs),
    /// Run a command under the gpuslice shim.
    Run(run::RunArgs),
    /// The host daemon: reclaims dead processes, applies the configuration, watches NVML, serves /metrics.
    Monitor(daemon::MonitorArgs),
    /// Print the tenants, devices and processes the ledgers and NVML know now.
    Status(status::StatusArgs),
    /// List the GPUs: memory, committed caps, MIG mode, tenants and queued jobs on each.
    Devices(devices::DevicesArgs),
    /// List the jobs of the admission queue (`gpuslice run --queue`).
    Queue(queue::QueueListArgs),
    /// End a queued job: a waiting one leaves the queue, a running one's command gets SIGTERM.
    Cancel(queue::CancelArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::main(args),
        Command::Run(args) => run::main(args),
        Command::Monitor(args) => daemon::main(args),
        Command::Status(args) => status::main(args),
        Command::Devices(args) => devices::main(args),
        Command::Queue(args) => queue::list(args),
        Command::Cancel(args) => queue::cancel(args),
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("gpuslice: {message}");
            ExitCode::from(2)
        }
    }
}
