//! `gpuslice monitor --check`: what the monitor would say about its
//! configuration on this host, without starting it.
//!
//! The file is parsed as a (re)load parses it (a refusal exits 2 with the
//! line and column), then checked against the devices NVML shows: caps for
//! devices this host lacks, caps above a device's memory, shares that add
//! up to more than 100 % on a device ([`crate::policy_check`]). Each
//! finding is a warning on stderr; the exit code is 0, since the monitor
//! would run with this file.

use super::MonitorArgs;
use crate::config;
use crate::error::Error;
use crate::nvml::GpuReader;
use std::process::ExitCode;

pub fn main(args: &MonitorArgs) -> Result<ExitCode, Error> {
    let Some(path) = &args.config else {
        return Err(Error::Usage("--check needs --config FILE: the configuration to check".into()));
    };
    let config = config::load(path).map_err(|e| Error::Usage(format!("bad configuration: {e}")))?;
    let gpus = if args.host.no_nvml {
        None
    } else {
        match GpuReader::load(args.host.nvml_lib.as_deref()).and_then(|mut reader| reader.read()) {
            Ok(gpus) => Some(gpus),
            Err(e) if args.host.nvml_lib.is_some() => return Err(Error::Failed(format!("cannot use NVML: {e}"))),
            Err(e) => {
                eprintln!("gpuslice: NVML is not available ({e}): the file was not checked against this host's devices");
                None
            }
        }
    };
    let mut warnings = Vec::new();
    if let Some(gpus) = &gpus {
        for (tenant, settings) in &config.tenants {
            warnings.extend(settings.unmatched_devices(tenant, gpus));
        }
        warnings.extend(crate::policy_check::config_warnings(&config, gpus));
    }
    for warning in &warnings {
        eprintln!("gpuslice: warning: {warning}");
    }
    let devices = gpus.map_or_else(String::new, |g| format!(" against {} device(s)", g.len()));
    println!("{}: {} tenant(s), {} warning(s){devices}", path.display(), config.tenants.len(), warnings.len());
    Ok(ExitCode::SUCCESS)
}
