//! `gpuslice`: the command-line front of gpuslice.
//!
//! Each verb lives in its own module: `sim` (run a command on the
//! simulated GPU), `run` (run a command under the shim), `daemon` (the host
//! monitor), `status` (what the ledgers and NVML say now), `devices` (the
//! GPUs and what is committed on them), `queue_list` and `cancel` (the
//! admission queue that `run --queue` joins), `tenant` (allocations that a
//! cluster's node agent hands the monitor), `top` (the live view), `report` (the history against the
//! slices), `demo`.
//! A verb depends on the shared modules, never on another verb, and the
//! shared modules on no verb; this file puts them together.
#![deny(unsafe_op_in_unsafe_fn)]

// The verbs.
mod cancel;
mod daemon;
mod demo;
mod devices;
mod queue_list;
mod report;
mod run;
mod sim;
mod status;
mod tenant;
mod top;

// Shared by the verbs.
mod activity;
mod allocation;
mod chart;
mod compute;
mod config;
mod discovery;
mod driver_check;
mod duration;
mod error;
mod history;
mod host;
mod libs;
mod metrics;
mod nvml;
mod policy_check;
mod queue;
mod sampler;
mod sigbus;
mod snapshot;
mod teams;
mod text;

use clap::{Parser, Subcommand};
use error::Error;
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
      gpuslice monitor --dir /run/gpuslice --config /etc/gpuslice/monitor.toml --listen :9494\n  \
      curl -s 127.0.0.1:9494/metrics")]
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
    /// Whether the shim is preloaded into this process (used by `gpuslice run`).
    #[command(hide = true, name = "shim-probe")]
    ShimProbe,
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
    Queue(queue_list::QueueListArgs),
    /// End a queued job: a waiting one leaves the queue, a running one's command gets SIGTERM.
    #[command(after_help = "Example:\n  \
      gpuslice cancel 7        # the ID column of gpuslice queue\n  \
      gpuslice cancel train    # or the job's --name, when one job of yours has it")]
    Cancel(cancel::CancelArgs),
    /// Admit or release a monitor-owned tenant: the path by which Slurm's prolog or Kubernetes' DRA plugin hands the node an allocation.
    #[command(after_help = "Examples:\n  \
      gpuslice tenant admit slurm-42 --device 0 --memory 4GiB --share 25 --owner-uid 1000\n  \
      gpuslice tenant release slurm-42\n  \
      gpuslice tenant list")]
    Tenant(tenant::TenantArgs),
    /// A live view of devices, tenants, processes and the queue; refreshes in place, q quits.
    #[command(after_help = "Examples:\n  \
      gpuslice top\n  \
      gpuslice top --dir /run/gpuslice --interval 500ms\n  \
      gpuslice top --once    # one frame as plain text, for scripts")]
    Top(top::TopArgs),
    /// What each tenant used over the monitor's history against its cap, share and limit, with a recommendation.
    #[command(after_help = "Examples:\n  \
      sudo gpuslice report                # the last 7 days\n  \
      sudo gpuslice report --since 30d --json")]
    Report(report::ReportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim::main(args),
        // `run` keeps exit 2 for every failure of its own (see `error`).
        Command::Run(args) => run::main(args).map_err(Error::Usage),
        Command::Monitor(args) => daemon::main(args),
        Command::Status(args) => status::main(args),
        Command::Demo(args) => demo::main(args),
        Command::DemoWorker(args) => demo::worker::main(args),
        Command::ShimProbe => Ok(libs::shim_probe()),
        Command::Devices(args) => devices::main(args),
        Command::Queue(args) => queue_list::list(args),
        Command::Cancel(args) => cancel::cancel(args),
        Command::Tenant(args) => tenant::main(args),
        Command::Top(args) => top::main(args),
        Command::Report(args) => report::main(args),
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("gpuslice: {error}");
            error.exit_code()
        }
    }
}

/// `run --queue` hands itself to the queue as a [`queue::QueuedRun`].
impl queue::QueuedRun for run::RunArgs {
    fn options(&self) -> queue::RunOptions<'_> {
        queue::RunOptions {
            memory: self.memory.as_deref(),
            compute_limit: self.compute_limit.as_deref(),
            tenant: self.tenant.as_deref(),
            dir: self.dir.as_deref(),
            sim: self.sim,
            queue: &self.queue,
            command: &self.command,
        }
    }

    fn priority(&self) -> Result<i32, String> {
        self.queue_priority()
    }

    fn command(&self) -> Result<std::process::Command, String> {
        run::command(self)
    }
}
