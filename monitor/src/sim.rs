//! `gpuslice sim [--device-nodes] -- CMD ARGS…`: run a command on the
//! simulated GPU, no shim.

mod device_nodes;

use crate::error::Error;
use crate::libs;
use clap::Args;
use std::process::{Command, ExitCode};

#[derive(Args)]
pub struct SimArgs {
    /// Give the command placeholder /dev/nvidia0 (one per simulated device),
    /// /dev/nvidiactl and /dev/nvidia-uvm, in a private mount namespace over
    /// the real /dev (the host's /dev is not changed). Frameworks that look
    /// for a device node before they load the driver need it (JAX takes its
    /// CUDA backend only when /dev/nvidia0 or /dev/nvidiactl exists). Needs
    /// root or CAP_SYS_ADMIN, and the overlay filesystem.
    #[arg(long)]
    pub device_nodes: bool,
    /// The command to run, and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn main(args: SimArgs) -> Result<ExitCode, Error> {
    let (program, rest) = args.command.split_first().ok_or_else(|| Error::Usage("no command given after --".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    libs::prepend_library_path(&mut cmd, &libs::simgpu_lib_dir().map_err(Error::Failed)?);
    if args.device_nodes {
        device_nodes::enter(simulated_devices()).map_err(|e| Error::Failed(format!("--device-nodes: {e}")))?;
    }
    // A command that is not there exits 127, as under a shell.
    Ok(libs::exec(cmd).report())
}

/// How many devices simgpu will simulate for the command: `SIMGPU_DEVICES`,
/// 1 when unset. A value simgpu refuses gets one node here; simgpu itself
/// then says what is wrong with it.
fn simulated_devices() -> u32 {
    std::env::var("SIMGPU_DEVICES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|n| (1..=device_nodes::MAX_DEVICES).contains(n))
        .unwrap_or(1)
}
