//! `gpuslice devices [--dir DIR] [--json]`: one row per GPU, for deciding
//! where work fits: what it is (name, compute capability, MIG mode), its
//! memory as the driver sees it (total, used, free), its utilisation, the
//! memory *committed* on it (the caps of running queue jobs and of capped
//! live tenants, as the monitor counts them for the admission queue, see
//! [`crate::queue`]; without a monitor, the caps the live tenants' ledgers
//! show) and who is on it.
//!
//! NVML says what a device is and how full it is; without NVML, one line
//! on stderr says what cannot be known, and the devices the ledgers
//! recorded are listed with what the ledgers and the queue know. In the
//! table, as in `status`, a value that is not known or does not apply is
//! `-` (a compute capability or MIG mode the driver does not give, a
//! figure without NVML); in JSON it is `null`.

use crate::discovery::HostArgs;
use crate::error::Error;
use crate::queue::store::Job;
use crate::sampler::{read_host, HostRead};
use crate::snapshot::TenantView;
use crate::text::human_bytes;
use clap::Args;
use serde::Serialize;
use std::process::ExitCode;

#[derive(Args)]
pub struct DevicesArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// A queue job on a device.
#[derive(Debug, Clone, Serialize)]
pub struct JobOnDevice {
    pub id: u64,
    pub name: Option<String>,
}

/// One GPU.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceRow {
    pub index: u32,
    pub uuid: String,
    pub name: Option<String>,
    pub compute_capability: Option<String>,
    pub memory_total_bytes: u64,
    pub memory_used_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
    pub utilization_ratio: Option<f64>,
    pub mig_mode: Option<String>,
    pub memory_committed_bytes: u64,
    /// Tenants with a live process that can use the device.
    pub tenants: Vec<String>,
    /// Queue jobs running on it.
    pub jobs: Vec<JobOnDevice>,
}

/// The whole answer.
#[derive(Debug, Clone, Serialize)]
pub struct DevicesView {
    pub nvml: bool,
    pub devices: Vec<DeviceRow>,
}

pub fn main(args: DevicesArgs) -> Result<ExitCode, Error> {
    let host = read_host(&args.host, "devices")?;
    for problem in &host.problems {
        eprintln!("gpuslice devices: warning: {problem}");
    }
    if let Some(why) = &host.nvml_missing {
        eprintln!(
            "gpuslice devices: without NVML ({why}) the GPUs' names, compute capability, memory in use, utilisation and MIG mode are unknown; listed are the devices the ledgers recorded"
        );
    }
    let view = collect(&host)?;
    if args.json {
        let text = serde_json::to_string_pretty(&view).map_err(|e| Error::Failed(format!("cannot write JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", table(&view));
    }
    Ok(ExitCode::SUCCESS)
}

/// Joins NVML, the ledgers and the queue by device UUID.
fn collect(host: &HostRead) -> Result<DevicesView, Error> {
    let refs: Vec<&ledger::Ledger> = host.ledgers.iter().collect();
    let gpus = host.nvml.as_ref().map(|(_, gpus)| gpus.as_slice());
    let snapshot = crate::snapshot::collect(&refs, gpus, &mut crate::host::LockCache::default());
    let queue = crate::queue::view(&host.dir).map_err(Error::Failed)?;
    let jobs = queue.jobs;
    let committed = queue.committed_bytes.unwrap_or_else(|| crate::queue::estimated_committed_bytes(&snapshot.tenants));
    let jobs_on = crate::queue::jobs_by_device(&jobs);
    let devices = snapshot
        .devices
        .iter()
        .map(|d| {
            let facts = host.nvml.as_ref().map(|(reader, _)| reader.describe(d.index)).unwrap_or_default();
            DeviceRow {
                index: d.index,
                uuid: d.uuid.clone(),
                name: facts.name,
                compute_capability: facts.compute_capability,
                memory_total_bytes: d.memory_total_bytes,
                memory_used_bytes: d.memory_used_bytes,
                memory_free_bytes: d.memory_used_bytes.map(|used| d.memory_total_bytes.saturating_sub(used)),
                utilization_ratio: d.utilization_ratio,
                mig_mode: facts.mig_mode,
                memory_committed_bytes: committed.get(&d.uuid).copied().unwrap_or(0),
                tenants: tenants_on(&snapshot.tenants, &d.uuid),
                jobs: jobs_on.get(&d.uuid).map_or_else(Vec::new, |jobs| jobs.iter().map(|j| on_device(j)).collect()),
            }
        })
        .collect();
    Ok(DevicesView { nvml: snapshot.nvml, devices })
}

fn on_device(job: &Job) -> JobOnDevice {
    JobOnDevice { id: job.id, name: job.name.clone() }
}

/// Tenants with a live process whose ledger lists the device.
fn tenants_on(tenants: &[TenantView], uuid: &str) -> Vec<String> {
    tenants
        .iter()
        .filter(|t| t.processes.iter().any(|p| p.alive) && t.devices.iter().any(|d| d.uuid == uuid))
        .map(|t| t.name.clone())
        .collect()
}

fn table(view: &DevicesView) -> String {
    let mut rows = vec![["INDEX", "UUID", "NAME", "CC", "TOTAL", "USED", "FREE", "UTIL", "MIG", "COMMITTED", "TENANTS", "JOBS"]
        .map(String::from)
        .to_vec()];
    let or_dash = |v: Option<u64>| v.map_or("-".into(), human_bytes);
    let list = |items: Vec<String>| if items.is_empty() { "-".to_string() } else { items.join(",") };
    for d in &view.devices {
        rows.push(vec![
            d.index.to_string(),
            d.uuid.clone(),
            d.name.clone().unwrap_or_else(|| "-".into()),
            d.compute_capability.clone().unwrap_or_else(|| "-".into()),
            human_bytes(d.memory_total_bytes),
            or_dash(d.memory_used_bytes),
            or_dash(d.memory_free_bytes),
            d.utilization_ratio.map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
            d.mig_mode.clone().unwrap_or_else(|| "-".into()),
            human_bytes(d.memory_committed_bytes),
            list(d.tenants.clone()),
            list(d.jobs.iter().map(|j| j.name.as_ref().map_or(j.id.to_string(), |n| format!("{}:{n}", j.id))).collect()),
        ]);
    }
    let mut out = String::new();
    crate::text::render_rows(&mut out, &rows);
    out
}
