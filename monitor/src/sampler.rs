//! How `status`, `devices` and `top` read the host: the ledgers, NVML when
//! it answers, and the monitor's grant pages.
//!
//! A ledger directory named with `--dir` or `GPUSLICE_DIR` that does not
//! exist is an error (a typo must not look like a host where nothing
//! runs); the default one missing only means no tenant has run here yet.
//! [`read_host`] reads the ledgers and NVML once, for `devices`; a
//! [`Sampler`] reads everything again at each look, for `status` (which
//! looks once, [`collect_view`]) and `top` (which keeps one sampler and
//! looks every refresh).

use crate::compute::ComputeState;
use crate::discovery::{self, HostArgs, Layout};
use crate::error::Error;
use crate::nvml::GpuReader;
use crate::snapshot::{self, Snapshot};
use ledger::Ledger;
use std::path::PathBuf;
use std::time::Instant;

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
pub fn read_host(host: &discovery::HostArgs, verb: &str) -> Result<HostRead, Error> {
    // A ledger cut short while it is read must not kill the command.
    let _ = crate::sigbus::install();
    let dir = discovery::ledger_dir(host.dir.as_deref());
    let named =
        if host.dir.is_some() { Some("--dir") } else { std::env::var_os("GPUSLICE_DIR").filter(|v| !v.is_empty()).map(|_| "GPUSLICE_DIR") };
    let (ledgers, problems) = match discovery::open_ledgers(&dir, host.layout) {
        Ok(found) => found,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match named {
            Some(source) => return Err(Error::Usage(format!("the ledger directory {} ({source}) does not exist", dir.display()))),
            None => {
                eprintln!("gpuslice {verb}: no ledger directory at {} yet: no tenant has run on this host", dir.display());
                (Vec::new(), Vec::new())
            }
        },
        Err(e) => return Err(Error::Failed(format!("cannot read the ledger directory {}: {e}", dir.display()))),
    };
    let (nvml, nvml_missing) = if host.no_nvml {
        (None, Some("--no-nvml".to_string()))
    } else {
        let loaded = GpuReader::load(host.nvml_lib.as_deref()).and_then(|mut r| r.read().map(|gpus| (r, gpus)));
        match loaded {
            Ok(found) => (Some(found), None),
            Err(e) if host.nvml_lib.is_some() => return Err(Error::Failed(format!("cannot use NVML: {e}"))),
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
    /// Who is in which team, as the running monitor published it (it
    /// answers root and its own user); `None` without one, or without teams.
    pub teams: Option<crate::teams::membership::Membership>,
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
    cpu: crate::activity::CpuClock,
}

impl Sampler {
    /// Loads NVML unless told not to; a missing default NVML means
    /// ledger-only, a library named with `--nvml-lib` that fails is an error.
    pub fn new(host: &HostArgs) -> Result<Sampler, Error> {
        // A ledger cut short while it is read must not kill the reader.
        let _ = crate::sigbus::install();
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
                Err(e) if host.nvml_lib.is_some() => return Err(Error::Failed(format!("cannot use NVML: {e}"))),
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
            cpu: crate::activity::CpuClock::default(),
        })
    }

    /// One look. A ledger directory named with `--dir` or `GPUSLICE_DIR`
    /// that does not exist is an error; the default one missing is a note.
    pub fn look(&mut self) -> Result<View, Error> {
        let dir = &self.dir;
        let mut notes = Vec::new();
        let files = match discovery::ledger_files(dir) {
            Ok(files) => files,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match self.named {
                Some(source) => return Err(Error::Usage(format!("the ledger directory {} ({source}) does not exist", dir.display()))),
                None => {
                    notes.push(format!("no ledger directory at {} yet: no tenant has run on this host", dir.display()));
                    Vec::new()
                }
            },
            Err(e) => return Err(Error::Failed(format!("cannot read the ledger directory {}: {e}", dir.display()))),
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
            Some(Err(e)) if self.nvml_named => return Err(Error::Failed(format!("cannot use NVML: {e}"))),
            Some(Err(_)) | None => None,
        };
        let refs: Vec<&Ledger> = ledgers.iter().collect();
        let mut snapshot = snapshot::collect(&refs, gpus.as_deref(), &mut self.locks);
        // Settings, targets and charged time come from the monitor's grant
        // pages, when one runs (it answers root and its own user).
        let names: Vec<String> = snapshot.tenants.iter().map(|t| t.name.clone()).collect();
        crate::compute::fill_from_reports(&mut snapshot, |uuid| {
            let grants = ledger::broker::view(dir, uuid).ok()?;
            Some(crate::compute::DeviceReport::from_page(grants.page(), &names))
        });
        self.compute.fill(&mut snapshot, Instant::now());
        self.cpu.fill(&mut snapshot, Instant::now());
        notes.extend(crate::compute::unenforced_notes(&snapshot));
        for device in &snapshot.devices {
            match device.arbitrated {
                Some(true) => notes.push(format!("device {}: its time is arbitrated by the monitor", device.index)),
                Some(false) => notes.push(format!("device {}: not arbitrated (no tenant there has a compute setting)", device.index)),
                None => {}
            }
        }
        let teams = crate::teams::membership::read(dir);
        Ok(View { dir: dir.clone(), snapshot, notes, warnings, teams })
    }
}

/// Whether a tenant is limited or shares a device, or is in one of the
/// monitor's teams: then the device time it used is worth a second look.
fn has_compute_policy(view: &View) -> bool {
    let snapshot = &view.snapshot;
    snapshot.tenants.iter().flat_map(|t| &t.devices).any(|d| d.compute_limit_ratio.is_some() || d.compute_share_ratio.is_some())
        || view.teams.as_ref().is_some_and(|m| snapshot.tenants.iter().any(|t| m.team_of(&t.name).is_some()))
}

/// Whether a tenant holds memory with a live process: then what it does
/// with it (busy, starved or idle) is a rate of its CPU time.
fn holds_memory(view: &View) -> bool {
    view.snapshot.tenants.iter().flat_map(|t| &t.devices).any(|d| d.memory_used_bytes > 0 && d.processes > 0)
}

/// One view for a reader that looks once: where a tenant has a compute
/// policy, it looks twice, a monitor round apart, to give the rate.
pub fn collect_view(host: &HostArgs) -> Result<View, Error> {
    collect_view_where(host, has_compute_policy)
}

/// The same, looking twice also where a tenant holds memory, so that its
/// activity has a CPU rate (`top --once`).
pub fn collect_view_with_activity(host: &HostArgs) -> Result<View, Error> {
    collect_view_where(host, |s| has_compute_policy(s) || holds_memory(s))
}

fn collect_view_where(host: &HostArgs, twice: impl Fn(&View) -> bool) -> Result<View, Error> {
    let mut sampler = Sampler::new(host)?;
    let view = sampler.look()?;
    if !twice(&view) {
        return Ok(view);
    }
    std::thread::sleep(crate::snapshot::ROUND);
    sampler.look()
}
