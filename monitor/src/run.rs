//! `gpuslice run [--memory SIZE|LIST] [--tenant NAME] [--dir DIR] [--sim] -- CMD ARGS…`:
//! run a command under the shim.

use crate::libs;
use clap::Args;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(Args)]
pub struct RunArgs {
    /// Memory cap: one size for every device (`8GiB`, `512MiB`, `3000m`, bytes)
    /// or a per-device list (`0=8GiB,1=4GiB`). Sets GPUSLICE_MEMORY_LIMIT.
    #[arg(long, value_name = "SIZE|LIST")]
    pub memory: Option<String>,
    /// Tenant name (`[A-Za-z0-9._-]{1,63}`). Sets GPUSLICE_TENANT.
    #[arg(long, value_name = "NAME")]
    pub tenant: Option<String>,
    /// Ledger directory. Sets GPUSLICE_DIR.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Run on the simulated GPU (simgpu), as `gpuslice sim` does.
    #[arg(long)]
    pub sim: bool,
    /// The command to run, and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub fn main(args: RunArgs) -> Result<ExitCode, String> {
    let (program, rest) = args.command.split_first().ok_or("no command given after --")?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    if let Some(memory) = &args.memory {
        ledger::units::parse_memory_limit(memory)
            .map_err(|e| format!("--memory {memory:?}: {e}"))?;
        cmd.env("GPUSLICE_MEMORY_LIMIT", memory);
    }
    if let Some(tenant) = &args.tenant {
        ledger::units::validate_tenant_name(tenant).map_err(|e| format!("--tenant {tenant:?}: {e}"))?;
        cmd.env("GPUSLICE_TENANT", tenant);
    }
    if let Some(dir) = &args.dir {
        cmd.env("GPUSLICE_DIR", dir);
    }
    if args.sim {
        libs::prepend_library_path(&mut cmd, &libs::simgpu_lib_dir()?);
    }
    libs::prepend_preload(&mut cmd, &libs::find_library("libgpuslice.so", "GPUSLICE_SHIM_LIB")?);
    Err(libs::exec(cmd))
}
