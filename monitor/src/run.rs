//! `gpuslice run [--memory SIZE|LIST] [--compute-limit P|LIST] [--compute-share P|LIST] [--priority P|LIST] [--tenant NAME] [--dir DIR] [--sim] -- CMD ARGS…`:
//! run a command under the shim. With `--queue`, wait for room first ([`crate::queue`]).
//!
//! Every option is checked here as the shim would check the variable it
//! sets, so a mistake is a clear error before the command starts rather than
//! a command whose GPU is refused: sizes and names follow
//! [`ledger::units`] (compute settings [`ledger::compute`]), a per-device list must not miss the devices the
//! command sees under the `CUDA_VISIBLE_DEVICES` it inherits (see
//! [`PerDevice::missed_device`]), and a relative `--dir`
//! is made absolute (the shim refuses a relative `GPUSLICE_DIR`, which would
//! give the tenant a ledger per working directory).

use crate::libs;
use crate::policy_check;
use clap::Args;
use ledger::compute;
use ledger::units::{self, PerDevice};
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(Args)]
pub struct RunArgs {
    /// Memory cap: one size for every device (`8GiB`, `8Gi`, `512MiB`, `3000m`, `4096B`)
    /// or a per-device list (`0=8GiB,1=4GiB`). Sets GPUSLICE_MEMORY_LIMIT.
    #[arg(long, value_name = "SIZE|LIST")]
    pub memory: Option<String>,
    /// Ceiling on device time, percent: one for every device (`30`) or a
    /// per-device list (`0=30,1=60`). Sets GPUSLICE_COMPUTE_LIMIT.
    #[arg(long, value_name = "P|LIST")]
    pub compute_limit: Option<String>,
    /// Guaranteed share of device time while the command has work, percent:
    /// one for every device (`60`) or a per-device list (`0=60,1=25`).
    /// Arbitrated by the monitor. Sets GPUSLICE_COMPUTE_SHARE.
    #[arg(long, value_name = "P|LIST")]
    pub compute_share: Option<String>,
    /// Scheduling priority, higher first (-1000 to 1000, default 0): one for
    /// every device or a per-device list (`0=1,1=0`). Sets GPUSLICE_PRIORITY;
    /// with --queue (one number) it also orders the queue.
    #[arg(long, value_name = "P|LIST", allow_hyphen_values = true)]
    pub priority: Option<String>,
    /// Tenant name (`[A-Za-z0-9._-]{1,63}`, not starting with `.`). Sets GPUSLICE_TENANT.
    #[arg(long, value_name = "NAME")]
    pub tenant: Option<String>,
    /// Ledger directory, made absolute. Sets GPUSLICE_DIR.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Run on the simulated GPU (simgpu), as `gpuslice sim` does.
    #[arg(long)]
    pub sim: bool,
    #[command(flatten)]
    pub queue: crate::queue::QueueArgs,
    /// The command to run, and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Checks a per-device option (`--memory`, `--compute-limit`, …) as the
/// shim checks the variable it sets: the grammar (`parse`, whose error
/// `expected` completes), then that a per-device list gives a `what` to every
/// device the command can see under `visible` (its inherited
/// `CUDA_VISIBLE_DEVICES`) when it names one the command cannot see.
fn check_per_device<T: Copy, E: std::fmt::Display>(
    option: &str,
    text: &str,
    parse: impl Fn(&str) -> Result<PerDevice<T>, E>,
    expected: Option<&str>,
    what: &str,
    visible: Option<&str>,
) -> Result<PerDevice<T>, String> {
    let setting = parse(text).map_err(|e| match expected {
        Some(format) => format!("{option} {text:?}: {e}; expected {format}"),
        None => format!("{option} {text:?}: {e}"),
    })?;
    if let Some(visible) = visible {
        let bound = units::visible_devices_at_most(visible);
        if let Some((index, unset)) = setting.missed_device(bound) {
            return Err(format!(
                "{option} {text:?}: device {index} is not a device the command will see (CUDA_VISIBLE_DEVICES={visible:?} \
                 shows it at most {bound}, numbered from 0), and its device {unset} would have no {what}; \
                 indices are the ordinals after CUDA_VISIBLE_DEVICES"
            ));
        }
    }
    Ok(setting)
}

/// Checks `--memory` as the shim will.
fn check_memory(memory: &str, visible: Option<&str>) -> Result<PerDevice<u64>, String> {
    check_per_device("--memory", memory, units::parse_memory, None, "cap", visible)
}

/// Checks `--compute-limit` as the shim will.
fn check_compute_limit(limit: &str, visible: Option<&str>) -> Result<PerDevice<u32>, String> {
    check_per_device("--compute-limit", limit, compute::parse_compute_limit, Some(compute::COMPUTE_LIMIT_FORMAT), "limit", visible)
}

/// What `--compute-share` may look like, for error messages.
const SHARE_FORMAT: &str = "a percentage from 1 to 100, like 60, or per device, like 0=60,1=25";

/// Checks `--compute-share` as the shim will.
fn check_compute_share(share: &str, visible: Option<&str>) -> Result<PerDevice<u32>, String> {
    check_per_device("--compute-share", share, compute::parse_compute_limit, Some(SHARE_FORMAT), "share", visible)
}

/// Checks `--priority`: whole numbers from -1000 to 1000, one or per device.
fn check_priority(priority: &str, visible: Option<&str>) -> Result<PerDevice<i32>, String> {
    check_per_device("--priority", priority, compute::parse_priorities, Some(compute::PRIORITY_FORMAT), "priority", visible)
}

/// Refuses a `--compute-share` above `--compute-limit` on a device: the
/// share could never be given.
fn check_share_within_limit(share: &PerDevice<u32>, limit: &PerDevice<u32>) -> Result<(), String> {
    match policy_check::share_above_limit(share, limit) {
        None => Ok(()),
        Some((device, share, limit)) => {
            let on = device.map_or_else(|| "on every device".to_string(), |d| format!("on device {d}"));
            Err(format!(
                "--compute-share {share} is above --compute-limit {limit} {on}: a share is device time guaranteed and a limit \
                 a ceiling, so the share could never be given; lower the share or raise the limit"
            ))
        }
    }
}

/// Warnings about what the host holds (see [`policy_check::run_warnings`]):
/// the devices from NVML (simgpu's with `--sim`), the shares of the
/// tenants with live processes from the ledgers. Whatever cannot be read
/// gives no warning: the command still runs, capped as asked.
fn host_warnings(args: &RunArgs, policy: &policy_check::RunPolicy<'_>, visible: Option<&str>) -> Vec<String> {
    let nvml_lib = if args.sim { libs::simgpu_lib_dir().ok().map(|dir| dir.join("libnvidia-ml.so.1")) } else { None };
    let Ok(gpus) = crate::nvml::GpuReader::load(nvml_lib.as_deref()).and_then(|mut reader| reader.read()) else {
        return Vec::new();
    };
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => crate::discovery::ledger_dir(None),
    };
    // A ledger cut short while it is read must not stop the command.
    let _ = crate::sigbus::install();
    let ledgers = crate::discovery::open_ledgers(&dir, crate::discovery::Layout::Flat).map(|(l, _)| l).unwrap_or_default();
    let refs: Vec<&ledger::Ledger> = ledgers.iter().collect();
    let snapshot = crate::snapshot::collect(&refs, Some(&gpus), &mut crate::host::LockCache::default());
    let running_shares: Vec<(String, String, u32)> = snapshot
        .tenants
        .iter()
        .flat_map(|t| t.devices.iter().map(move |d| (t, d)))
        .filter(|(_, d)| d.processes > 0)
        .filter_map(|(t, d)| Some((t.name.clone(), d.uuid.clone(), (d.compute_share_ratio? * 10_000.0).round() as u32)))
        .collect();
    policy_check::run_warnings(policy, &seen_by_the_command(&gpus, visible), &running_shares)
}

/// The devices the command will see, in its ordinal order: every device
/// NVML lists that is not split into MIG devices, or those
/// `CUDA_VISIBLE_DEVICES` names (by index or UUID), up to the first entry
/// that names none, as the driver reads it.
fn seen_by_the_command(gpus: &[crate::nvml::GpuInfo], visible: Option<&str>) -> Vec<crate::nvml::GpuInfo> {
    let split = |g: &crate::nvml::GpuInfo| gpus.iter().any(|m| m.parent_uuid.as_deref() == Some(g.uuid.as_str()));
    let Some(visible) = visible else {
        return gpus.iter().filter(|g| !split(g)).cloned().collect();
    };
    let mut seen = Vec::new();
    for entry in visible.split(',').map(str::trim) {
        let found = match entry.parse::<u32>() {
            Ok(index) => gpus.iter().find(|g| g.parent_uuid.is_none() && g.index == index),
            Err(_) => gpus.iter().find(|g| !entry.is_empty() && g.uuid.to_ascii_lowercase().starts_with(&entry.to_ascii_lowercase())),
        };
        match found {
            Some(gpu) => seen.push(gpu.clone()),
            None => break,
        }
    }
    seen
}

impl RunArgs {
    /// The job's place in the admission queue: `--priority` as one number.
    pub fn queue_priority(&self) -> Result<i32, String> {
        match &self.priority {
            None => Ok(0),
            Some(p) => check_priority(p, None)?.single().ok_or_else(|| {
                format!("--priority {p:?} with --queue: give one number for the job, like 1; the queue chooses the devices")
            }),
        }
    }
}

pub fn main(args: RunArgs) -> Result<ExitCode, String> {
    if args.queue.queue {
        return crate::queue::submit(&args);
    }
    // A command that is not there exits 127, as under a shell.
    Ok(libs::exec(command(&args)?).report())
}

/// The command `args` describe, with the shim's environment set.
pub fn command(args: &RunArgs) -> Result<Command, String> {
    let (program, rest) = args.command.split_first().ok_or("no command given after --")?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    let visible = std::env::var_os("CUDA_VISIBLE_DEVICES").map(|v| v.to_string_lossy().into_owned());
    let mut memory_caps = None;
    if let Some(memory) = &args.memory {
        memory_caps = Some(check_memory(memory, visible.as_deref())?);
        cmd.env("GPUSLICE_MEMORY_LIMIT", memory);
    }
    let mut limits = None;
    if let Some(limit) = &args.compute_limit {
        limits = Some(check_compute_limit(limit, visible.as_deref())?);
        cmd.env("GPUSLICE_COMPUTE_LIMIT", limit);
    }
    let mut shares = None;
    if let Some(share) = &args.compute_share {
        shares = Some(check_compute_share(share, visible.as_deref())?);
        cmd.env("GPUSLICE_COMPUTE_SHARE", share);
    }
    if let (Some(share), Some(limit)) = (&shares, &limits) {
        check_share_within_limit(share, limit)?;
    }
    if let Some(priority) = &args.priority {
        check_priority(priority, visible.as_deref())?;
        cmd.env("GPUSLICE_PRIORITY", priority);
    }
    if let Some(tenant) = &args.tenant {
        units::validate_tenant_name(tenant).map_err(|e| format!("--tenant {tenant:?}: {e}"))?;
        cmd.env("GPUSLICE_TENANT", tenant);
    }
    if let Some(dir) = &args.dir {
        let absolute = std::path::absolute(dir).map_err(|e| format!("--dir {}: {e}", dir.display()))?;
        cmd.env("GPUSLICE_DIR", absolute);
    }
    if args.sim {
        libs::prepend_library_path(&mut cmd, &libs::simgpu_lib_dir()?);
    } else {
        crate::driver_check::check_cuda_driver()?;
    }
    if memory_caps.is_some() || shares.is_some() {
        let policy =
            policy_check::RunPolicy { tenant: args.tenant.as_deref(), memory: memory_caps.as_ref(), share_percent: shares.as_ref() };
        for warning in host_warnings(args, &policy, visible.as_deref()) {
            eprintln!("gpuslice: warning: {warning}");
        }
    }
    let shim = libs::find_library("libgpuslice.so", "GPUSLICE_SHIM_LIB")?;
    libs::check_shim_preloads(&shim)?;
    libs::prepend_preload(&mut cmd, &shim);
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_checked_as_the_shim_checks_it() {
        assert!(check_memory("1GiB", None).is_ok());
        assert!(check_memory("0=1GiB", Some("1")).is_ok());
        assert!(check_memory("1GiB", Some("")).is_ok());
        assert!(check_memory("0=1GiB,1=2GiB", Some("1")).is_ok(), "every device it sees has a cap");
        let e = check_memory("1=1GiB", Some("1")).unwrap_err();
        assert!(e.contains("device 1 is not a device the command will see") && e.contains("CUDA_VISIBLE_DEVICES=\"1\""), "{e}");
        assert!(e.contains("device 0 would have no cap"), "{e}");
        let e = check_memory("1GB", None).unwrap_err();
        assert!(e.starts_with("--memory \"1GB\"") && e.contains("ambiguous") && e.contains("write 1GiB"), "{e}");
        assert!(check_memory("99=1GiB", None).unwrap_err().contains("0 to 15"));
    }

    #[test]
    fn a_share_above_the_limit_is_refused() {
        let e = check_share_within_limit(&check_compute_share("60", None).unwrap(), &check_compute_limit("30", None).unwrap()).unwrap_err();
        assert!(e.starts_with("--compute-share 60 is above --compute-limit 30 on every device"), "{e}");
        let e =
            check_share_within_limit(&check_compute_share("20", None).unwrap(), &check_compute_limit("1=10", None).unwrap()).unwrap_err();
        assert!(e.starts_with("--compute-share 20 is above --compute-limit 10 on device 1"), "{e}");
        assert!(check_share_within_limit(&check_compute_share("30", None).unwrap(), &check_compute_limit("30", None).unwrap()).is_ok());
    }

    #[test]
    fn priorities_are_whole_numbers_in_range() {
        for good in ["0", "1", "-5", "1000", "0=1,1=0"] {
            assert!(check_priority(good, None).is_ok(), "{good}");
        }
        for bad in ["", "01", "+1", "1001", "high", "0=1,x=2", "1.5"] {
            let e = check_priority(bad, None).unwrap_err();
            assert!(e.starts_with(&format!("--priority {bad:?}: ")) && e.contains("-1000 to 1000"), "{e}");
        }
        let e = check_priority("1=5", Some("0")).unwrap_err();
        assert!(e.contains("device 1 is not a device the command will see") && e.contains("device 0 would have no priority"), "{e}");
    }

    #[test]
    fn compute_limits_are_checked_as_the_shim_checks_them() {
        assert!(check_compute_limit("30", None).is_ok());
        assert!(check_compute_limit("0=30,1=100", Some("1")).is_ok());
        let e = check_compute_limit("1=30", Some("1")).unwrap_err();
        assert!(e.contains("device 1 is not a device the command will see") && e.contains("device 0 would have no limit"), "{e}");
        for (bad, says) in [("0", "from 1 to 100"), ("30%", "not a whole number"), ("030", "leading zero"), ("0=30,0=40", "twice")] {
            let e = check_compute_limit(bad, None).unwrap_err();
            assert!(e.starts_with(&format!("--compute-limit {bad:?}")) && e.contains(says) && e.contains("0=30,1=60"), "{e}");
        }
        let e = check_compute_share("1=60", Some("0")).unwrap_err();
        assert!(e.contains("device 1 is not a device the command will see") && e.contains("device 0 would have no share"), "{e}");
        let e = check_compute_share("0", None).unwrap_err();
        assert!(e.starts_with("--compute-share \"0\"") && e.contains("from 1 to 100") && e.contains("0=60,1=25"), "{e}");
    }
}
