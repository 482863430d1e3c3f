//! `gpuslice status [--dir DIR] [--json]`: what the ledgers and NVML say now,
//! as a table for people or JSON for scripts. Reads only; works with or
//! without a running monitor. A ledger directory named with `--dir` or
//! `GPUSLICE_DIR` that does not exist is an error (a typo must not look
//! like a host where nothing runs); the default one missing only means no
//! tenant has run here yet.
//!
//! [`Sampler`] is how both `status` and `top` read the host; `status`
//! looks once ([`collect_view`]), `top` keeps one sampler and looks every
//! refresh.

use crate::daemon::compute::ComputeState;
use crate::discovery::{self, HostArgs, Layout};
use crate::nvml::GpuReader;
use crate::snapshot::{self, Snapshot};
use clap::Args;
use ledger::Ledger;
use std::fmt::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// What `status` and `devices` read: the ledgers, and NVML when it answers.
pub struct HostRead {
    /// The ledger directory.
    pub dir: std::path::PathBuf,
    /// One ledger per tenant.
    pub ledgers: Vec<Ledger>,
    /// Ledger files not used, in words.
    pub problems: Vec<String>,
    /// NVML, loaded, with what it said now; `None` without it.
    pub nvml: Option<(GpuReader, Vec<crate::nvml::GpuInfo>)>,
    /// Why NVML is not there (`--no-nvml`, or the loader's error).
    pub nvml_missing: Option<String>,
}

/// Opens the ledgers and NVML as `host` says, for the command `verb`
/// (named in notes on stderr). A ledger directory named with `--dir` or
/// `GPUSLICE_DIR` that does not exist is an error; NVML failing to load is
/// one only where `--nvml-lib` names it.
pub fn read_host(host: &discovery::HostArgs, verb: &str) -> Result<HostRead, String> {
    // A ledger cut short while it is read must not kill the command.
    let _ = crate::daemon::sigbus::install();
    let dir = discovery::ledger_dir(host.dir.as_deref());
    let named =
        if host.dir.is_some() { Some("--dir") } else { std::env::var_os("GPUSLICE_DIR").filter(|v| !v.is_empty()).map(|_| "GPUSLICE_DIR") };
    let (ledgers, problems) = match discovery::open_ledgers(&dir, host.layout) {
        Ok(found) => found,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match named {
            Some(source) => return Err(format!("the ledger directory {} ({source}) does not exist", dir.display())),
            None => {
                eprintln!("gpuslice {verb}: no ledger directory at {} yet: no tenant has run on this host", dir.display());
                (Vec::new(), Vec::new())
            }
        },
        Err(e) => return Err(format!("cannot read the ledger directory {}: {e}", dir.display())),
    };
    let (nvml, nvml_missing) = if host.no_nvml {
        (None, Some("--no-nvml".to_string()))
    } else {
        let loaded = GpuReader::load(host.nvml_lib.as_deref()).and_then(|mut r| r.read().map(|gpus| (r, gpus)));
        match loaded {
            Ok(found) => (Some(found), None),
            Err(e) if host.nvml_lib.is_some() => return Err(format!("cannot use NVML: {e}")),
            Err(e) => (None, Some(e)),
        }
    };
    Ok(HostRead { dir, ledgers, problems, nvml, nvml_missing })
}

/// One look at the host, as `status` and `top` show it.
pub struct View {
    /// The ledger directory read.
    pub dir: PathBuf,
    /// The ledgers, NVML and the monitor's grant pages, joined.
    pub snapshot: Snapshot,
    /// Notes for the reader that are no fault (no ledger directory yet).
    pub notes: Vec<String>,
    /// Ledgers that were skipped, and why.
    pub warnings: Vec<String>,
}

/// Reads the host again and again: the ledgers (listed anew each time, so
/// new tenants appear), NVML (loaded once) and the monitor's grant pages.
/// Device time used is a rate, so a sampler keeps each look's counters and
/// gives the next look the rate since then.
pub struct Sampler {
    dir: PathBuf,
    /// What named the directory (`--dir` or `GPUSLICE_DIR`), if anything.
    named: Option<&'static str>,
    layout: Layout,
    gpus: Option<GpuReader>,
    /// Whether NVML was asked for by path: then failing to read it is an error.
    nvml_named: bool,
    locks: crate::host::LockCache,
    compute: ComputeState,
}

impl Sampler {
    /// Loads NVML unless told not to; a missing default NVML means
    /// ledger-only, a library named with `--nvml-lib` that fails is an error.
    pub fn new(host: &HostArgs) -> Result<Sampler, String> {
        // A ledger cut short while it is read must not kill the reader.
        let _ = crate::daemon::sigbus::install();
        let named = if host.dir.is_some() {
            Some("--dir")
        } else {
            std::env::var_os("GPUSLICE_DIR").filter(|v| !v.is_empty()).map(|_| "GPUSLICE_DIR")
        };
        let gpus = if host.no_nvml {
            None
        } else {
            match GpuReader::load(host.nvml_lib.as_deref()) {
                Ok(reader) => Some(reader),
                Err(e) if host.nvml_lib.is_some() => return Err(format!("cannot use NVML: {e}")),
                Err(_) => None,
            }
        };
        Ok(Sampler {
            dir: discovery::ledger_dir(host.dir.as_deref()),
            named,
            layout: host.layout,
            gpus,
            nvml_named: host.nvml_lib.is_some(),
            locks: crate::host::LockCache::default(),
            compute: ComputeState::default(),
        })
    }

    /// One look. A ledger directory named with `--dir` or `GPUSLICE_DIR`
    /// that does not exist is an error; the default one missing is a note.
    pub fn look(&mut self) -> Result<View, String> {
        let dir = &self.dir;
        let mut notes = Vec::new();
        let files = match discovery::ledger_files(dir) {
            Ok(files) => files,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match self.named {
                Some(source) => return Err(format!("the ledger directory {} ({source}) does not exist", dir.display())),
                None => {
                    notes.push(format!("no ledger directory at {} yet: no tenant has run on this host", dir.display()));
                    Vec::new()
                }
            },
            Err(e) => return Err(format!("cannot read the ledger directory {}: {e}", dir.display())),
        };
        let (files, shadowed) = discovery::one_per_tenant(files, self.layout);
        let mut ledgers = Vec::new();
        let mut warnings: Vec<String> = shadowed
            .iter()
            .map(|f| format!("tenant {} also has {}, not shown ({} layout preferred)", f.tenant, f.path.display(), self.layout.name()))
            .collect();
        for file in files {
            match Ledger::open(&file.path) {
                Ok(ledger) => match discovery::check_tenant(&file, &ledger.tenant()) {
                    Ok(()) => ledgers.push(ledger),
                    Err(e) => warnings.push(e),
                },
                Err(e) => warnings.push(e.to_string()),
            }
        }
        let gpus = match self.gpus.as_mut().map(GpuReader::read) {
            Some(Ok(gpus)) => Some(gpus),
            Some(Err(e)) if self.nvml_named => return Err(format!("cannot use NVML: {e}")),
            Some(Err(_)) | None => None,
        };
        let refs: Vec<&Ledger> = ledgers.iter().collect();
        let mut snapshot = snapshot::collect(&refs, gpus.as_deref(), &mut self.locks);
        // Settings, targets and charged time come from the monitor's grant
        // pages, when one runs (it answers root and its own user).
        let names: Vec<String> = snapshot.tenants.iter().map(|t| t.name.clone()).collect();
        crate::daemon::compute::fill_from_reports(&mut snapshot, |uuid| {
            let grants = ledger::broker::view(dir, uuid).ok()?;
            Some(crate::daemon::arbiter::DeviceReport::from_page(grants.page(), &names))
        });
        self.compute.fill(&mut snapshot, Instant::now());
        for device in &snapshot.devices {
            match device.arbitrated {
                Some(true) => notes.push(format!("device {}: its time is arbitrated by the monitor", device.index)),
                Some(false) => notes.push(format!("device {}: not arbitrated (no tenant there has a compute setting)", device.index)),
                None => {}
            }
        }
        Ok(View { dir: dir.clone(), snapshot, notes, warnings })
    }
}

/// Whether a tenant is limited or shares a device: then the device time
/// it used is worth a second look.
fn has_compute_policy(snapshot: &Snapshot) -> bool {
    snapshot.tenants.iter().flat_map(|t| &t.devices).any(|d| d.compute_limit_ratio.is_some() || d.compute_share_ratio.is_some())
}

/// One view for a reader that looks once: where a tenant has a compute
/// policy, it looks twice, a monitor round apart, to give the rate.
pub fn collect_view(host: &HostArgs) -> Result<View, String> {
    let mut sampler = Sampler::new(host)?;
    let view = sampler.look()?;
    if !has_compute_policy(&view.snapshot) {
        return Ok(view);
    }
    std::thread::sleep(crate::daemon::ROUND);
    sampler.look()
}

pub fn main(args: StatusArgs) -> Result<ExitCode, String> {
    let view = collect_view(&args.host)?;
    for note in &view.notes {
        eprintln!("gpuslice status: {note}");
    }
    for warning in &view.warnings {
        eprintln!("gpuslice status: warning: {warning}");
    }
    if args.json {
        let text = serde_json::to_string_pretty(&view.snapshot).map_err(|e| format!("cannot write JSON: {e}"))?;
        println!("{text}");
    } else {
        print!("{}", table(&view.snapshot, &view.dir));
    }
    Ok(ExitCode::SUCCESS)
}

/// A size for people: `512.0 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A device's name in the tables: its index, and for a MIG device its
/// parent's index and its profile (`0 MIG 3g.71gb`).
pub(crate) fn device_name(snapshot: &Snapshot, index: u32, uuid: &str) -> String {
    match snapshot.devices.iter().find(|d| d.uuid == uuid).and_then(|d| d.mig_profile.as_ref()) {
        Some(profile) => format!("{index} MIG {profile}"),
        None => index.to_string(),
    }
}

pub fn render_rows(out: &mut String, rows: &[Vec<String>]) {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> =
        (0..columns).map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)).collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let width = widths.get(c).copied().unwrap_or(0);
            let _ = write!(line, "{cell:<width$}  ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// The human-readable form: devices, then tenants, then their processes.
pub fn table(snapshot: &Snapshot, dir: &std::path::Path) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "ledger directory: {}   NVML: {}", dir.display(), if snapshot.nvml { "yes" } else { "no (ledger-only)" });
    let _ = writeln!(out, "\nDEVICES");
    let mut rows = vec![vec!["INDEX".into(), "UUID".into(), "MEMORY USED".into(), "TOTAL".into(), "UTIL".into()]];
    for d in &snapshot.devices {
        rows.push(vec![
            device_name(snapshot, d.index, &d.uuid),
            d.uuid.clone(),
            d.memory_used_bytes.map_or("-".into(), human_bytes),
            human_bytes(d.memory_total_bytes),
            d.utilization_ratio.map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
        ]);
    }
    render_rows(&mut out, &rows);

    let _ = writeln!(out, "\nTENANTS");
    let mut rows = vec![vec![
        "TENANT".into(),
        "DEVICE".into(),
        "MEMORY USED".into(),
        "CAP".into(),
        "CAP SET BY".into(),
        "PROCESSES".into(),
        "DENIED".into(),
        "DRIVER SEES".into(),
        "COMPUTE LIMIT".into(),
        "SHARE".into(),
        "PRIORITY".into(),
        "TARGET".into(),
        "USED".into(),
    ]];
    let percent = |r: f64| format!("{:.0}%", r * 100.0);
    for t in &snapshot.tenants {
        if t.devices.is_empty() {
            let mut row = vec![t.name.clone(), "-".into(), "0 B".into(), "-".into(), "-".into(), "0".into(), "0".into(), "-".into()];
            row.extend(["-".into(), "-".into(), "-".into(), "-".into(), "-".into()]);
            rows.push(row);
        }
        for d in &t.devices {
            rows.push(vec![
                t.name.clone(),
                device_name(snapshot, d.index, &d.uuid),
                human_bytes(d.memory_used_bytes),
                d.memory_limit_bytes.map_or("none".into(), human_bytes),
                d.policy_source.into(),
                d.processes.to_string(),
                d.alloc_denied_total.to_string(),
                d.driver_memory_used_bytes.map_or("-".into(), human_bytes),
                d.compute_limit_ratio.map_or("none".into(), percent),
                d.compute_share_ratio.map_or("-".into(), percent),
                d.compute_priority.to_string(),
                d.compute_target_ratio.map_or("-".into(), percent),
                d.compute_used_ratio.map_or("-".into(), percent),
            ]);
        }
    }
    render_rows(&mut out, &rows);

    let _ = writeln!(out, "\nPROCESSES");
    let mut rows = vec![vec![
        "TENANT".into(),
        "PID".into(),
        "NS PID".into(),
        "SLOT".into(),
        "MEMORY USED".into(),
        "DRIVER SEES".into(),
        "STATE".into(),
    ]];
    for t in &snapshot.tenants {
        for p in &t.processes {
            rows.push(vec![
                t.name.clone(),
                p.pid.to_string(),
                p.ns_pid.to_string(),
                p.slot.to_string(),
                human_bytes(p.memory_used_bytes),
                p.driver_memory_used_bytes.map_or("-".into(), human_bytes),
                if p.alive { "alive".into() } else { "dead, awaiting reclaim".into() },
            ]);
        }
    }
    render_rows(&mut out, &rows);
    if !snapshot.untracked_processes.is_empty() {
        let _ = writeln!(out, "\nUNTRACKED (using a GPU without the shim)");
        let mut rows = vec![vec!["DEVICE".into(), "PID".into(), "MEMORY USED".into()]];
        for u in &snapshot.untracked_processes {
            rows.push(vec![u.device.to_string(), u.pid.to_string(), human_bytes(u.memory_used_bytes)]);
        }
        render_rows(&mut out, &rows);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_for_people() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(512 << 20), "512.0 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }
}
