//! The monitor's side of the compute figures: what each round hands the
//! arbiter ([`share_with_arbiter`]), and the arbiter's figures read back
//! into the round's snapshot ([`fill_from_arbiter`]). What the figures
//! mean, and how a reader without the arbiter gets them from the grant
//! pages, is [`crate::compute`].

use super::arbiter::Shared;
use crate::compute::{fill_from_reports, Claim};
use crate::config::Config;
use crate::nvml::{any_uuid_bytes, GpuInfo};
use crate::snapshot::Snapshot;
use std::collections::HashMap;

/// Hands the arbiter what this round learnt: the devices NVML lists (kept
/// as they were while NVML fails), the configuration's compute settings by
/// tenant and device, and the tenants' directories.
pub fn share_with_arbiter(shared: &Shared, config: &Config, dir: &std::path::Path, gpus: Option<&[GpuInfo]>, with_nvml: bool) {
    if let Some(gpus) = gpus {
        let uuids = gpus.iter().filter_map(|g| any_uuid_bytes(&g.uuid)).collect();
        *shared.nvml_uuids.lock().unwrap_or_else(|e| e.into_inner()) = Some(uuids);
    } else if !with_nvml {
        *shared.nvml_uuids.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
    let known: Vec<[u8; 16]> = shared.nvml_uuids.lock().unwrap_or_else(|e| e.into_inner()).iter().flatten().copied().collect::<Vec<_>>();
    let index_of = |uuid: &[u8; 16]| gpus.and_then(|g| g.iter().find(|d| any_uuid_bytes(&d.uuid).as_ref() == Some(uuid)).map(|d| d.index));
    let mut configured = HashMap::new();
    for (tenant, tenant_config) in &config.tenants {
        let mut devices = HashMap::new();
        for uuid in known.iter().chain(shared.views.lock().unwrap_or_else(|e| e.into_inner()).keys()) {
            let text = gpus
                .and_then(|g| g.iter().find(|d| any_uuid_bytes(&d.uuid).as_ref() == Some(uuid)).map(|d| d.uuid.clone()))
                .unwrap_or_else(|| crate::nvml::uuid_string(uuid));
            if let Some(p) = tenant_config.compute_for(&text, index_of(uuid)) {
                devices.insert(*uuid, Claim { share_e4: p.share_ratio_e4, limit_e4: p.limit_ratio_e4, priority: p.priority });
            }
        }
        configured.insert(tenant.clone(), devices);
    }
    *shared.configured.lock().unwrap_or_else(|e| e.into_inner()) = configured;
    let mut teams = Vec::new();
    for (name, team) in &config.teams {
        let mut claims = HashMap::new();
        for uuid in known.iter().chain(shared.views.lock().unwrap_or_else(|e| e.into_inner()).keys()) {
            let text = gpus
                .and_then(|g| g.iter().find(|d| any_uuid_bytes(&d.uuid).as_ref() == Some(uuid)).map(|d| d.uuid.clone()))
                .unwrap_or_else(|| crate::nvml::uuid_string(uuid));
            if let Some(p) = team.settings.compute_for(&text, index_of(uuid)) {
                claims.insert(*uuid, Claim { share_e4: p.share_ratio_e4, limit_e4: p.limit_ratio_e4, priority: p.priority });
            }
        }
        teams.push(super::arbiter::ArbiterTeam { name: name.clone(), config: team.clone(), claims });
    }
    let mut shared_teams = shared.teams.lock().unwrap_or_else(|e| e.into_inner());
    if *shared_teams != teams {
        *shared_teams = teams;
    }
    drop(shared_teams);
    let mut ceilings = shared.priority_ceilings.lock().unwrap_or_else(|e| e.into_inner());
    if *ceilings != config.priority_ceilings {
        *ceilings = config.priority_ceilings.clone();
    }
    drop(ceilings);
    let mut shares = shared.share_ceilings.lock().unwrap_or_else(|e| e.into_inner());
    if shares.as_ref() != Some(&config.share_ceilings) {
        *shares = Some(config.share_ceilings.clone());
    }
    drop(shares);
    let tenants = crate::discovery::tenants_dir(dir);
    let dirs: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&tenants)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| Some((e.file_name().to_str()?.to_string(), e.path())))
        .collect();
    *shared.tenant_dirs.lock().unwrap_or_else(|e| e.into_inner()) = dirs;
}

/// Fills each tenant device the arbiter knows with the arbiter's figures,
/// never the tenant's: its settings (configured or pinned), its target
/// (its weight while active, else its limit or share), and the device time
/// it was charged (`compute_busy_ns_total`, from which the used ratio comes).
pub fn fill_from_arbiter(snapshot: &mut Snapshot, shared: &Shared) {
    fill_from_reports(snapshot, |uuid| shared.report(uuid));
}
