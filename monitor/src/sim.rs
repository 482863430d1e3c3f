//! `gpuslice sim -- CMD ARGS…`: run a command on the simulated GPU, no shim.

use crate::error::Error;
use crate::libs;
use clap::Args;
use std::process::{Command, ExitCode};

#[derive(Args)]
pub struct SimArgs {
    /// The command to run, and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn main(args: SimArgs) -> Result<ExitCode, Error> {
    let (program, rest) = args.command.split_first().ok_or_else(|| Error::Usage("no command given after --".into()))?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    libs::prepend_library_path(&mut cmd, &libs::simgpu_lib_dir().map_err(Error::Failed)?);
    // A command that is not there exits 127, as under a shell.
    Ok(libs::exec(cmd).report())
}
