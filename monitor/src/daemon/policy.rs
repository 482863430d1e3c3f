//! Applies the monitor's policy to the tenants' ledgers, every round.
//!
//! The policy page of a ledger is the tenant's to write, so it is never the
//! authority; it is where honest shims read the cap on every allocation.
//! The authority lives with the monitor:
//! - for the tenants the configuration names, the configuration: each cap
//!   it sets is written to the policy page with source `Monitor`;
//! - for the others, the first cap the monitor sees for the tenant is
//!   *pinned*: the least of what its ledger's page says (set from its first
//!   process's environment) and what its processes asked for when they
//!   joined the arbiter (each says the cap its environment asked for, before
//!   its first allocation; a page rewritten to "unlimited" before the
//!   monitor looked then still pins the asked cap). The pin is kept in the
//!   monitor's own state file (`<dir>/.monitor/pinned.toml`, which no
//!   tenant can write) for as long as the tenant has live processes, and
//!   written back over any other value the tenant puts in its page. A
//!   tenant can lower its cap (that only refuses it memory); it cannot
//!   raise it. When its last process is gone the pin goes, so the next run
//!   starts from its own environment again.
//!
//! Every round rewrites what differs, so a change (or a tenant's rewrite)
//! applies within a round: a lowered cap refuses new allocations and leaves
//! existing ones alone. The bypass check judges the driver's figures
//! against [`PolicyState::cap_for`], never against the page. A cap the file
//! stops naming stays as it was last set (never silently uncapped).

use super::ledgers::LedgerSet;
use super::log;
use crate::config::Config;
use crate::nvml::{any_uuid_bytes, uuid_string, GpuInfo};
use ledger::{PolicySource, UNLIMITED};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Pinned caps by tenant, then device UUID.
type Pinned = BTreeMap<String, BTreeMap<String, u64>>;

/// Remembers which warnings were given, so each is given once.
#[derive(Default)]
pub struct PolicyState {
    warned: HashSet<String>,
    /// Caps pinned for tenants the configuration does not name.
    pinned: Pinned,
    /// Where the pins are kept across restarts; `None` keeps them in memory.
    pinned_path: Option<PathBuf>,
    /// The caps of the queue's admitted jobs' tenants, by tenant, then
    /// device UUID: an authority like the configuration (nothing pinned
    /// from their pages).
    queue_caps: HashMap<String, BTreeMap<String, u64>>,
}

/// `<dir>/.monitor`: the monitor's own directory, 0700, which discovery
/// skips (a dot-name) and no tenant can write.
pub fn state_dir(dir: &Path) -> PathBuf {
    crate::allocation::state_dir(dir)
}

fn load_pinned(path: &Path) -> Result<Pinned, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Pinned::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn show(bytes: u64) -> String {
    if bytes == UNLIMITED {
        "none".into()
    } else {
        crate::text::human_bytes(bytes)
    }
}

impl PolicyState {
    /// The state for ledger directory `dir`, with the pins a previous run
    /// kept in `<dir>/.monitor/pinned.toml`.
    pub fn new(dir: &Path) -> Result<PolicyState, String> {
        let state = state_dir(dir);
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let ours = |meta: &std::fs::Metadata| meta.is_dir() && meta.uid() == me && meta.mode() & 0o077 == 0;
        if let Ok(meta) = std::fs::symlink_metadata(&state) {
            if !ours(&meta) {
                // Someone else made it (the ledger directory is open to
                // every user): it is not the monitor's, so it goes aside.
                let aside = dir.join(format!(".monitor.untrusted-{}", std::process::id()));
                std::fs::rename(&state, &aside).map_err(|e| {
                    format!(
                        "{} is not the monitor's (uid {}, mode {:o}) and cannot be moved aside: {e}",
                        state.display(),
                        meta.uid(),
                        meta.mode() & 0o7777
                    )
                })?;
                log::warn(&format!(
                    "{} was not the monitor's (uid {}, mode {:o}): moved to {}",
                    state.display(),
                    meta.uid(),
                    meta.mode() & 0o7777,
                    aside.display()
                ));
            }
        }
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&state)
            .or_else(|e| if e.kind() == std::io::ErrorKind::AlreadyExists { Ok(()) } else { Err(e) })
            .map_err(|e| format!("cannot create the monitor's state directory {}: {e}", state.display()))?;
        let meta = std::fs::symlink_metadata(&state).map_err(|e| format!("{}: {e}", state.display()))?;
        if !ours(&meta) {
            return Err(format!(
                "{} must be a directory owned by uid {me} with mode 0700 (it holds the monitor's pinned caps); \
                 found uid {}, mode {:o}",
                state.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ));
        }
        let path = state.join("pinned.toml");
        let pinned = load_pinned(&path)?;
        Ok(PolicyState { warned: HashSet::new(), pinned, pinned_path: Some(path), queue_caps: HashMap::new() })
    }

    /// The cap the monitor holds `tenant` to on device `uuid`: the
    /// configuration's, else the pinned one; `None` when there is none.
    pub fn cap_for(&self, config: &Config, tenant: &str, uuid: &str, host_index: Option<u32>) -> Option<u64> {
        if let Some(caps) = self.queue_caps.get(tenant) {
            let wanted = any_uuid_bytes(uuid);
            return Some(caps.iter().find(|(u, _)| wanted.is_some() && any_uuid_bytes(u) == wanted).map_or(0, |(_, bytes)| *bytes));
        }
        if config.tenants.contains_key(tenant) {
            return config.memory_for(tenant, uuid, host_index);
        }
        self.pinned.get(tenant).and_then(|caps| caps.get(uuid)).copied()
    }

    /// Whether `tenant` is a queue job's tenant this round.
    pub fn is_queue_tenant(&self, tenant: &str) -> bool {
        self.queue_caps.contains_key(tenant)
    }

    /// The queue's admitted jobs' caps (`QueueState::caps`), this round's.
    pub fn set_queue_caps(&mut self, caps: HashMap<String, BTreeMap<String, u64>>) {
        self.queue_caps = caps;
    }

    /// A state holding `bytes` pinned for `tenant` on `uuid`.
    #[cfg(test)]
    pub fn with_pin(mut self, tenant: &str, uuid: &str, bytes: u64) -> PolicyState {
        self.pinned.entry(tenant.into()).or_default().insert(uuid.into(), bytes);
        self
    }

    fn save_pinned(&mut self) {
        let Some(path) = &self.pinned_path else { return };
        let text = match toml::to_string(&self.pinned) {
            Ok(text) => text,
            Err(e) => return log::error(&format!("cannot record the pinned caps: {e}")),
        };
        let tmp = path.with_extension("toml.tmp");
        if let Err(e) = std::fs::write(&tmp, text).and_then(|_| std::fs::rename(&tmp, path)) {
            log::error(&format!("cannot record the pinned caps in {}: {e}", path.display()));
        }
    }

    /// Pins the first cap each unnamed tenant shows, holds its page to it,
    /// and lets the pins of tenants with no live process go.
    fn pin(&mut self, config: &Config, ledgers: &LedgerSet, asked: &super::arbiter::Shared) {
        let mut changed = false;
        let mut present = HashSet::new();
        for ledger in ledgers.ledgers() {
            let tenant = ledger.tenant();
            if config.tenants.contains_key(&tenant) || self.queue_caps.contains_key(&tenant) {
                continue;
            }
            present.insert(tenant.clone());
            if !ledger.slots().iter().any(|s| s.alive) {
                changed |= self.pinned.remove(&tenant).is_some();
                asked.forget_asked(&tenant);
                continue;
            }
            for entry in ledger.devices() {
                let uuid = uuid_string(&entry.uuid);
                let page = ledger.memory_limit_bytes(entry.index);
                let pinned = self.pinned.get(&tenant).and_then(|caps| caps.get(&uuid)).copied();
                let wanted = page.min(asked.asked_cap(&tenant, &entry.uuid).unwrap_or(UNLIMITED));
                match pinned {
                    None if wanted != UNLIMITED => {
                        self.pinned.entry(tenant.clone()).or_default().insert(uuid.clone(), wanted);
                        changed = true;
                        log::info(&format!("tenant {tenant} device {uuid}: memory cap {} pinned while it runs", show(wanted)));
                        if page > wanted {
                            ledger.set_memory_limit_bytes(entry.index, wanted, PolicySource::Monitor);
                            log::warn(&format!(
                                "tenant {tenant} device {uuid}: its ledger says a cap of {}, but its processes asked for {}; \
                                 that is the cap",
                                show(page),
                                show(wanted)
                            ));
                        }
                    }
                    Some(cap) if page > cap => {
                        ledger.set_memory_limit_bytes(entry.index, cap, PolicySource::Monitor);
                        log::warn(&format!(
                            "tenant {tenant} device {uuid}: its ledger asked for a cap of {}; the pinned cap of {} stays",
                            show(page),
                            show(cap)
                        ));
                    }
                    _ => {}
                }
            }
        }
        let before = self.pinned.len();
        self.pinned.retain(|tenant, _| present.contains(tenant));
        if changed || self.pinned.len() != before {
            self.save_pinned();
        }
    }

    /// Forgets which warnings were given: a new configuration is warned
    /// about afresh (the pins stay).
    pub fn configuration_changed(&mut self) {
        self.warned.clear();
    }

    fn warn_once(&mut self, message: String) {
        if self.warned.insert(message.clone()) {
            log::warn(&message);
        }
    }

    /// Applies the configuration and the pins; `asked` holds what the
    /// tenants' processes asked for when they joined.
    pub fn apply(&mut self, config: &Config, ledgers: &mut LedgerSet, gpus: Option<&[GpuInfo]>, asked: &super::arbiter::Shared) {
        self.pin(config, ledgers, asked);
        for message in gpus.map(|gpus| crate::policy_check::config_warnings(config, gpus)).unwrap_or_default() {
            self.warn_once(message);
        }
        for (tenant, tenant_config) in &config.tenants {
            if tenant_config.is_empty() {
                continue;
            }
            let Some(ledger) = ledgers.ensure_tenant(tenant) else { continue };
            let all_gpus = gpus.unwrap_or_default();
            // A MIG-enabled GPU runs nothing itself: its MIG devices are
            // entered instead.
            let partitioned = |g: &GpuInfo| all_gpus.iter().any(|m| m.parent_uuid.as_deref() == Some(g.uuid.as_str()));
            for gpu in all_gpus.iter().filter(|g| !partitioned(g)) {
                if let Some(raw) = any_uuid_bytes(&gpu.uuid) {
                    if let Err(e) = ledger.device_index(&raw, gpu.total_bytes) {
                        self.warn_once(format!("tenant {tenant}: cannot enter device {}: {e}", gpu.uuid));
                    }
                }
            }
            for message in gpus.map(|gpus| tenant_config.unmatched_devices(tenant, gpus)).unwrap_or_default() {
                self.warn_once(message);
            }
            if gpus.is_none() && tenant_config.uses_host_indices() {
                self.warn_once(format!(
                    "tenant {tenant}: caps by device index need NVML to know which device an index means; \
                     they are not applied in ledger-only mode (caps for all devices and by UUID are)"
                ));
            }
            for entry in ledger.devices() {
                // NVML's name for the device: `MIG-…` for a MIG device.
                let gpu = all_gpus.iter().find(|g| any_uuid_bytes(&g.uuid) == Some(entry.uuid));
                let uuid = gpu.map_or_else(|| uuid_string(&entry.uuid), |g| g.uuid.clone());
                let host_index = gpu.map(|g| g.index);
                if let Some(compute) = tenant_config.compute_for(&uuid, host_index) {
                    let (now, source) = (ledger.compute_policy(entry.index), ledger.compute_limit_source(entry.index));
                    if now != compute || source != PolicySource::Monitor {
                        ledger.set_compute_policy(entry.index, compute);
                        log::info(&format!(
                            "tenant {tenant} device {uuid}: compute {} ({})",
                            show_compute(compute),
                            was(show_compute(now), source)
                        ));
                    }
                }
                let Some(cap) = tenant_config.memory_for(&uuid, host_index) else { continue };
                let (now, source) = (ledger.memory_limit_bytes(entry.index), ledger.policy_source(entry.index));
                if now != cap || source != PolicySource::Monitor {
                    ledger.set_memory_limit_bytes(entry.index, cap, PolicySource::Monitor);
                    let used = ledger.used_bytes(entry.index);
                    let note = if used > cap {
                        format!("; {} in use stays, new allocations are refused until usage drops below the cap", show(used))
                    } else {
                        String::new()
                    };
                    log::info(&format!("tenant {tenant} device {uuid}: memory cap {} ({}){note}", show(cap), was(show(now), source)));
                }
            }
        }
    }
}

/// `share 60%, limit none, priority 0`.
/// What a setting was before the monitor's, for the log: `was X, set by
/// the tenant's environment`, or `none before` when nothing had set it.
fn was(before: String, source: PolicySource) -> String {
    match source {
        PolicySource::Unset => "none before".to_string(),
        source => format!("was {before}, set by {}", source.name()),
    }
}

fn show_compute(c: ledger::ComputePolicy) -> String {
    let percent =
        |ratio_e4: u32| if ratio_e4 == 0 { "none".to_string() } else { format!("{}%", crate::allocation::ratio_percent(ratio_e4)) };
    format!("share {}, limit {}, priority {}", percent(c.share_ratio_e4), percent(c.limit_ratio_e4), c.priority)
}
