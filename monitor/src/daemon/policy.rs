//! Applies the configuration to the tenants' ledgers, every round.
//!
//! For each tenant the file names, its ledger is opened (created if needed),
//! every host device NVML knows is entered in its device table, and each cap
//! the file sets is written to the policy page with source `Monitor`. The
//! shim reads the cap on every allocation, so a change applies at once: a
//! lowered cap refuses new allocations and leaves existing ones alone.
//! Tenants the file does not name keep what their environment set; a cap the
//! file stops naming stays as it was last set (never silently uncapped).

use super::ledgers::LedgerSet;
use super::log;
use crate::config::Config;
use crate::nvml::{uuid_bytes, uuid_string, GpuInfo};
use ledger::{PolicySource, UNLIMITED};
use std::collections::HashSet;

/// Remembers which warnings were given, so each is given once.
#[derive(Default)]
pub struct PolicyState {
    warned: HashSet<String>,
}

fn show(bytes: u64) -> String {
    if bytes == UNLIMITED {
        "none".into()
    } else {
        crate::status::human_bytes(bytes)
    }
}

impl PolicyState {
    fn warn_once(&mut self, message: String) {
        if self.warned.insert(message.clone()) {
            log::warn(&message);
        }
    }

    pub fn apply(&mut self, config: &Config, ledgers: &mut LedgerSet, gpus: Option<&[GpuInfo]>) {
        for (tenant, tenant_config) in &config.tenants {
            if tenant_config.memory_bytes.is_empty() {
                continue;
            }
            let Some(ledger) = ledgers.ensure_tenant(tenant) else { continue };
            for gpu in gpus.unwrap_or_default() {
                if let Some(raw) = uuid_bytes(&gpu.uuid) {
                    if let Err(e) = ledger.device_index(&raw, gpu.total_bytes) {
                        self.warn_once(format!("tenant {tenant}: cannot enter device {}: {e}", gpu.uuid));
                    }
                }
            }
            if gpus.is_none() && tenant_config.uses_host_indices() {
                self.warn_once(format!(
                    "tenant {tenant}: caps by device index need NVML to know which device an index means; \
                     they are not applied in ledger-only mode (caps for all devices and by UUID are)"
                ));
            }
            for entry in ledger.devices() {
                let uuid = uuid_string(&entry.uuid);
                let host_index = gpus.and_then(|g| g.iter().find(|g| g.uuid == uuid)).map(|g| g.index);
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
                    log::info(&format!(
                        "tenant {tenant} device {uuid}: memory cap {} (was {}, set by {}){note}",
                        show(cap),
                        show(now),
                        source.name()
                    ));
                }
            }
        }
    }
}
