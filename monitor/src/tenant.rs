//! `gpuslice tenant admit|release|list`: the one local path by which a
//! cluster's node agent (Slurm's prolog and epilog, the Kubernetes DRA
//! plugin) turns an allocation into a monitor-owned tenant, and lets it go
//! (see [`crate::allocation`]). Root, or the monitor's own user, only.

use crate::allocation::{self, Admission, Answer, DeviceSlice, Request};
use crate::error::Error;
use crate::text::human_bytes;
use clap::{Args, Subcommand};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct TenantArgs {
    #[command(subcommand)]
    command: TenantCommand,
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Make NAME a monitor-owned tenant with these slices; returns once its ledger holds them.
    #[command(after_help = "Examples:\n  \
      gpuslice tenant admit slurm-42 --device 0 --memory 4GiB --share 25 --owner-uid 1000 --label origin=slurm\n  \
      gpuslice tenant admit infer --device 0,1 --memory 0=8GiB,1=4GiB --share 30 --limit 50\n  \
      gpuslice tenant admit whole --device GPU-5f1c0a2e-0000-0000-0000-000000000000 --share 100")]
    Admit(AdmitArgs),
    /// Stop governing NAME as allocated; its ledger goes once none of its processes lives.
    Release(ReleaseArgs),
    /// The admitted tenants, and the released ones whose processes still live.
    List(ListArgs),
}

#[derive(Args)]
struct Common {
    /// The ledger directory of the monitor to ask (default: GPUSLICE_DIR, else /run/gpuslice).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// How long to wait for the monitor's answer.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    timeout: String,
    /// Print the monitor's answer as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct AdmitArgs {
    /// The tenant: 1 to 63 characters from A-Z a-z 0-9 . _ -.
    name: String,
    /// The devices allocated, by host index (as nvidia-smi numbers them) or UUID, comma-separated;
    /// every other device gets a cap of 0 bytes.
    #[arg(long, value_name = "DEVICES", required = true, value_delimiter = ',')]
    device: Vec<String>,
    /// The memory cap: one size for every listed device (8GiB, 512MiB) or per device (0=8GiB,1=4GiB).
    /// Without it, the whole memory of each listed device.
    #[arg(long, value_name = "SIZE")]
    memory: Option<String>,
    /// The share of each listed device's time guaranteed while the tenant has work, in percent
    /// (25, 37.5), or per device (0=25,1=50).
    #[arg(long, value_name = "PERCENT")]
    share: Option<String>,
    /// The most of each listed device's time the tenant may have, in percent, or per device.
    #[arg(long, value_name = "PERCENT")]
    limit: Option<String>,
    /// Priority on the listed devices (higher first), -1000 to 1000.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// In the flat layout, the user (uid) whose processes may open the tenant's ledger.
    #[arg(long, value_name = "UID")]
    owner_uid: Option<u32>,
    /// Metadata kept with the tenant (origin=slurm, job=42); repeatable.
    #[arg(long, value_name = "KEY=VALUE")]
    label: Vec<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct ReleaseArgs {
    /// The tenant to release.
    name: String,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct ListArgs {
    #[command(flatten)]
    common: Common,
}

pub fn main(args: TenantArgs) -> Result<ExitCode, Error> {
    let (request, common) = match args.command {
        TenantCommand::Admit(admit) => (Request::Admit(admission(&admit)?), admit.common),
        TenantCommand::Release(release) => {
            ledger::units::validate_tenant_name(&release.name).map_err(|e| Error::Usage(format!("tenant name {:?}: {e}", release.name)))?;
            (Request::Release { tenant: release.name }, release.common)
        }
        TenantCommand::List(list) => (Request::List, list.common),
    };
    let timeout = crate::config::parse_duration(&common.timeout)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Error::Usage(format!("--timeout {:?}: expected {}", common.timeout, crate::config::DURATION_FORMAT)))?;
    let dir = crate::discovery::ledger_dir(common.dir.as_deref());
    let answer = allocation::call(&dir, &request, timeout)?;
    if common.json {
        let text = serde_json::to_string(&answer).map_err(|e| Error::Failed(format!("cannot encode the answer: {e}")))?;
        println!("{text}");
    }
    if !answer.ok {
        return Err(Error::Failed(answer.error.unwrap_or_else(|| "the monitor refused without a reason".into())));
    }
    if !common.json {
        match &request {
            Request::List => print_list(&answer),
            _ => print_answer(&answer),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The admission `args` ask for, or the usage mistake in them.
fn admission(args: &AdmitArgs) -> Result<Admission, Error> {
    ledger::units::validate_tenant_name(&args.name).map_err(|e| Error::Usage(format!("tenant name {:?}: {e}", args.name)))?;
    let devices: Vec<String> = args.device.iter().map(|d| d.trim_ascii().to_string()).collect();
    if let Some(empty) = devices.iter().position(String::is_empty) {
        return Err(Error::Usage(format!("--device: entry {} is empty; expected indices or UUIDs separated by commas", empty + 1)));
    }
    let size = |text: &str| ledger::units::parse_size(text).map_err(|e| e.to_string());
    let percent = |text: &str| {
        text.trim_ascii()
            .parse::<f64>()
            .ok()
            .filter(|p| allocation::percent_ratio_e4(*p).is_some())
            .ok_or_else(|| "expected a percentage from 0.01 to 100, like 25 or 37.5".to_string())
    };
    let memory = per_device("--memory", args.memory.as_deref(), &devices, size)?;
    let share = per_device("--share", args.share.as_deref(), &devices, percent)?;
    let limit = per_device("--limit", args.limit.as_deref(), &devices, percent)?;
    let mut labels = BTreeMap::new();
    for label in &args.label {
        let (key, value) =
            label.split_once('=').ok_or_else(|| Error::Usage(format!("--label {label:?}: expected KEY=VALUE, like origin=slurm")))?;
        if labels.insert(key.to_string(), value.to_string()).is_some() {
            return Err(Error::Usage(format!("--label: {key} is given twice")));
        }
    }
    let devices = devices
        .iter()
        .enumerate()
        .map(|(i, device)| DeviceSlice {
            device: device.clone(),
            memory_bytes: memory.get(i).copied().flatten(),
            share_percent: share.get(i).copied().flatten(),
            limit_percent: limit.get(i).copied().flatten(),
        })
        .collect();
    Ok(Admission { tenant: args.name.clone(), owner_uid: args.owner_uid, devices, priority: args.priority, labels })
}

/// A value per listed device from `text`: one value for all of them, or
/// `DEVICE=VALUE,…` naming devices as `--device` does.
fn per_device<T: Copy>(
    option: &str,
    text: Option<&str>,
    devices: &[String],
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<Option<T>>, Error> {
    let Some(text) = text else { return Ok(vec![None; devices.len()]) };
    if !text.contains('=') {
        let value = parse(text).map_err(|e| Error::Usage(format!("{option} {text:?}: {e}")))?;
        return Ok(vec![Some(value); devices.len()]);
    }
    let mut values = vec![None; devices.len()];
    for entry in text.split(',') {
        let (key, value) = entry
            .split_once('=')
            .ok_or_else(|| Error::Usage(format!("{option}: entry {entry:?} is not DEVICE=VALUE (DEVICE as given to --device)")))?;
        let key = key.trim_ascii();
        let at = devices.iter().position(|d| d.eq_ignore_ascii_case(key)).ok_or_else(|| {
            Error::Usage(format!("{option}: device {key:?} is not one of --device ({}); give each as --device names it", devices.join(",")))
        })?;
        let parsed = parse(value).map_err(|e| Error::Usage(format!("{option}: device {key}: {value:?}: {e}")))?;
        if values.get(at).is_some_and(Option::is_some) {
            return Err(Error::Usage(format!("{option}: device {key} is given twice")));
        }
        if let Some(slot) = values.get_mut(at) {
            *slot = Some(parsed);
        }
    }
    Ok(values)
}

fn percent_text(p: Option<f64>) -> String {
    p.map_or_else(|| "none".to_string(), |p| format!("{p}%"))
}

/// `KEY=VALUE` lines, for scripts (a prolog reads `ledger_dir`).
fn print_answer(answer: &Answer) {
    let mut lines = Vec::new();
    lines.extend(answer.tenant.as_ref().map(|t| format!("tenant={t}")));
    lines.extend(answer.state.as_ref().map(|s| format!("state={s}")));
    lines.extend(answer.ledger_dir.as_ref().map(|d| format!("ledger_dir={}", d.display())));
    lines.extend(answer.ledger.as_ref().map(|l| format!("ledger={}", l.display())));
    for device in &answer.devices {
        lines.push(format!(
            "device={} memory={} share={} limit={}",
            device.uuid,
            device.memory_bytes.map_or_else(|| "none".to_string(), |b| b.to_string()),
            percent_text(device.share_percent),
            percent_text(device.limit_percent)
        ));
    }
    lines.extend(answer.live_processes.map(|n| format!("live_processes={n}")));
    lines.extend(answer.held_bytes.map(|n| format!("held_bytes={n}")));
    lines.extend(answer.message.as_ref().map(|m| format!("message={m}")));
    println!("{}", lines.join("\n"));
}

fn print_list(answer: &Answer) {
    let tenants = answer.tenants.as_deref().unwrap_or_default();
    if tenants.is_empty() {
        println!("no tenant is admitted");
        return;
    }
    let mut rows = vec![["TENANT", "STATE", "OWNER", "DEVICES", "PROCS", "HELD", "LABELS"].map(String::from).to_vec()];
    for tenant in tenants {
        let devices: Vec<String> = tenant
            .devices
            .iter()
            .map(|d| {
                let memory = d.memory_bytes.map_or_else(|| "whole".to_string(), human_bytes);
                let share = d.share_percent.map(|p| format!(" {p}%")).unwrap_or_default();
                format!("{} {memory}{share}", short_uuid(&d.uuid))
            })
            .collect();
        rows.push(vec![
            tenant.tenant.clone().unwrap_or_default(),
            tenant.state.clone().unwrap_or_default(),
            tenant.owner_uid.map_or_else(|| "root".to_string(), |u| u.to_string()),
            devices.join("; "),
            tenant.live_processes.unwrap_or(0).to_string(),
            human_bytes(tenant.held_bytes.unwrap_or(0)),
            tenant.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" "),
        ]);
    }
    let mut out = String::new();
    crate::text::render_rows(&mut out, &rows);
    print!("{out}");
}

/// `GPU-5f1c0a2e` for `GPU-5f1c0a2e-…`: enough to tell a host's devices apart.
fn short_uuid(uuid: &str) -> &str {
    uuid.get(..12).unwrap_or(uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devices(list: &[&str]) -> Vec<String> {
        list.iter().map(|d| d.to_string()).collect()
    }

    fn size(text: &str) -> Result<u64, String> {
        ledger::units::parse_size(text).map_err(|e| e.to_string())
    }

    #[test]
    fn one_value_for_every_device_or_one_per_device() {
        let two = devices(&["0", "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"]);
        assert_eq!(per_device("--memory", Some("4GiB"), &two, size).unwrap(), vec![Some(4 << 30), Some(4 << 30)]);
        assert_eq!(per_device("--memory", None, &two, size).unwrap(), vec![None, None]);
        assert_eq!(
            per_device("--memory", Some("gpu-AAAAAAAA-bbbb-cccc-dddd-eeeeeeeeeeee=1GiB"), &two, size).unwrap(),
            vec![None, Some(1 << 30)]
        );
        let e = per_device("--memory", Some("1=4GiB"), &two, size).unwrap_err().to_string();
        assert!(e.contains("device \"1\" is not one of --device"), "{e}");
        let e = per_device("--memory", Some("0=4GiB,0=2GiB"), &two, size).unwrap_err().to_string();
        assert!(e.contains("given twice"), "{e}");
        let e = per_device("--memory", Some("0=lots"), &two, size).unwrap_err().to_string();
        assert!(e.contains("device 0") && e.contains("\"lots\""), "{e}");
    }
}
