//! `gpuslice run [--memory SIZE|LIST] [--compute-limit P|LIST] [--compute-share P|LIST] [--priority P|LIST] [--tenant NAME] [--dir DIR] [--sim] -- CMD ARGS…`:
//! run a command under the shim. With `--queue`, wait for room first ([`crate::queue`]).
//!
//! Every option is checked here as the shim would check the variable it
//! sets, so a mistake is a clear error before the command starts rather than
//! a command whose GPU is refused: sizes and names follow
//! [`ledger::units`] (compute limits [`ledger::compute`]), a per-device list must not miss the devices the
//! command sees under the `CUDA_VISIBLE_DEVICES` it inherits (see
//! [`MemoryLimit::missed_device`](ledger::units::MemoryLimit::missed_device)), and a relative `--dir`
//! is made absolute (the shim refuses a relative `GPUSLICE_DIR`, which would
//! give the tenant a ledger per working directory).

use crate::libs;
use clap::Args;
use ledger::units;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

#[derive(Args)]
pub struct RunArgs {
    /// Memory cap: one size for every device (`8GiB`, `512MiB`, `3000m`, bytes)
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

/// Checks `--memory` as the shim will: the grammar, then that a per-device
/// cap names a device the command can see under `visible` (its inherited
/// `CUDA_VISIBLE_DEVICES`).
fn check_memory(memory: &str, visible: Option<&str>) -> Result<(), String> {
    let limit = units::parse_memory_limit(memory).map_err(|e| format!("--memory {memory:?}: {e}"))?;
    if let Some(visible) = visible {
        let bound = units::visible_devices_at_most(visible);
        if let Some((index, uncapped)) = limit.missed_device(bound) {
            return Err(format!(
                "--memory {memory:?}: device {index} is not a device the command will see (CUDA_VISIBLE_DEVICES={visible:?} \
                 shows it at most {bound}, numbered from 0), and its device {uncapped} would have no cap; \
                 indices are the ordinals after CUDA_VISIBLE_DEVICES"
            ));
        }
    }
    Ok(())
}

/// Checks `--compute-limit` as the shim will, as [`check_memory`] does.
fn check_compute_limit(limit: &str, visible: Option<&str>) -> Result<(), String> {
    let parsed = ledger::compute::parse_compute_limit(limit)
        .map_err(|e| format!("--compute-limit {limit:?}: {e}; expected {}", ledger::compute::COMPUTE_LIMIT_FORMAT))?;
    if let Some(visible) = visible {
        let bound = units::visible_devices_at_most(visible);
        if let Some((index, unlimited)) = parsed.missed_device(bound) {
            return Err(format!(
                "--compute-limit {limit:?}: device {index} is not a device the command will see (CUDA_VISIBLE_DEVICES={visible:?} \
                 shows it at most {bound}, numbered from 0), and its device {unlimited} would have no limit; \
                 indices are the ordinals after CUDA_VISIBLE_DEVICES"
            ));
        }
    }
    Ok(())
}

impl RunArgs {
    /// The job's place in the admission queue: `--priority` as one number.
    pub fn queue_priority(&self) -> Result<i32, String> {
        match &self.priority {
            None => Ok(0),
            Some(p) => {
                check_priority(p)?;
                p.parse().map_err(|_| {
                    format!("--priority {p:?} with --queue: give one number for the job, like 1; the queue chooses the devices")
                })
            }
        }
    }
}

/// Checks `--priority`: whole numbers from -1000 to 1000, one or per device.
fn check_priority(priority: &str) -> Result<(), String> {
    let number = |text: &str| {
        let digits = text.strip_prefix('-').unwrap_or(text);
        !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && !(digits.len() > 1 && digits.starts_with('0'))
            && text.parse::<i32>().is_ok_and(|p| (-1000..=1000).contains(&p))
    };
    let ok = if priority.contains('=') {
        priority
            .split(',')
            .all(|entry| entry.split_once('=').is_some_and(|(index, p)| units::parse_device_index(index).is_ok() && number(p)))
    } else {
        number(priority)
    };
    ok.then_some(()).ok_or_else(|| {
        format!("--priority {priority:?}: expected a whole number from -1000 to 1000 (higher first), like 1, or per device, like 0=1,1=0")
    })
}

pub fn main(args: RunArgs) -> Result<ExitCode, String> {
    if args.queue.queue {
        return crate::queue::submit(&args);
    }
    Err(libs::exec(command(&args)?))
}

/// The command `args` describe, with the shim's environment set.
pub fn command(args: &RunArgs) -> Result<Command, String> {
    let (program, rest) = args.command.split_first().ok_or("no command given after --")?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    let visible = std::env::var_os("CUDA_VISIBLE_DEVICES").map(|v| v.to_string_lossy().into_owned());
    if let Some(memory) = &args.memory {
        check_memory(memory, visible.as_deref())?;
        cmd.env("GPUSLICE_MEMORY_LIMIT", memory);
    }
    if let Some(limit) = &args.compute_limit {
        check_compute_limit(limit, visible.as_deref())?;
        cmd.env("GPUSLICE_COMPUTE_LIMIT", limit);
    }
    if let Some(share) = &args.compute_share {
        ledger::compute::parse_compute_limit(share).map_err(|e| {
            format!("--compute-share {share:?}: {e}; expected a percentage from 1 to 100, like 60, or per device, like 0=60,1=25")
        })?;
        cmd.env("GPUSLICE_COMPUTE_SHARE", share);
    }
    if let Some(priority) = &args.priority {
        check_priority(priority)?;
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
    libs::prepend_preload(&mut cmd, &libs::find_library("libgpuslice.so", "GPUSLICE_SHIM_LIB")?);
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_checked_as_the_shim_checks_it() {
        assert_eq!(check_memory("1GiB", None), Ok(()));
        assert_eq!(check_memory("0=1GiB", Some("1")), Ok(()));
        assert_eq!(check_memory("1GiB", Some("")), Ok(()));
        assert_eq!(check_memory("0=1GiB,1=2GiB", Some("1")), Ok(()), "every device it sees has a cap");
        let e = check_memory("1=1GiB", Some("1")).unwrap_err();
        assert!(e.contains("device 1 is not a device the command will see") && e.contains("CUDA_VISIBLE_DEVICES=\"1\""), "{e}");
        assert!(e.contains("device 0 would have no cap"), "{e}");
        let e = check_memory("1GB", None).unwrap_err();
        assert!(e.starts_with("--memory \"1GB\"") && e.contains("ambiguous") && e.contains("write 1GiB"), "{e}");
        assert!(check_memory("99=1GiB", None).unwrap_err().contains("0 to 15"));
    }

    #[test]
    fn priorities_are_whole_numbers_in_range() {
        for good in ["0", "1", "-5", "1000", "0=1,1=0"] {
            assert_eq!(check_priority(good), Ok(()), "{good}");
        }
        for bad in ["", "01", "+1", "1001", "high", "0=1,x=2", "1.5"] {
            assert!(check_priority(bad).unwrap_err().contains("-1000 to 1000"), "{bad}");
        }
    }

    #[test]
    fn compute_limits_are_checked_as_the_shim_checks_them() {
        assert_eq!(check_compute_limit("30", None), Ok(()));
        assert_eq!(check_compute_limit("0=30,1=100", Some("1")), Ok(()));
        let e = check_compute_limit("1=30", Some("1")).unwrap_err();
        assert!(e.contains("device 1 is not a device the command will see") && e.contains("device 0 would have no limit"), "{e}");
        for (bad, says) in [("0", "from 1 to 100"), ("30%", "not a whole number"), ("030", "leading zero"), ("0=30,0=40", "twice")] {
            let e = check_compute_limit(bad, None).unwrap_err();
            assert!(e.starts_with(&format!("--compute-limit {bad:?}")) && e.contains(says) && e.contains("0=30,1=60"), "{e}");
        }
    }
}
