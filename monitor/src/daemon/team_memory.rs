//! Teams' memory quotas, enforced at allocation: the monitor keeps one
//! team page (`ledger::team_usage`) per team and device where the team has
//! a quota, and the arbiter hands it to the processes of the team's
//! members when they join the device (with the quota in their records of
//! the grant page). Their shims then reserve in it before their own
//! ledgers, so the members together never pass the quota.
//!
//! This module, on the main loop, each round:
//! - makes the pages of every team and device with a quota, counted from
//!   what the members' ledgers hold when it is made ([`TeamMemory::sync`]);
//!   a page whose quota a reload took away stays, with no quota, while its
//!   team is in the file (its members' processes go on counting in it),
//!   and goes with its team;
//! - gives back to the team what the monitor reclaimed from a member's dead
//!   process ([`TeamMemory::reclaimed`]);
//! - audits each page against the sum of its members' ledgers
//!   ([`TeamMemory::audit`]). Under the shims' order (team first on a
//!   reservation, tenant first on a release) the page never holds less than
//!   that sum, and more only while a change is between its two steps. A
//!   difference that stays (one way, in both readings of the page around
//!   the ledgers') for [`AUDIT_ROUNDS`] rounds is corrected by the least of
//!   it: that is a process killed between its steps, bytes a
//!   process held before it had the page, a monitor restarted, or a member
//!   that wrote the page. A member that lowers its own ledger is already
//!   past its own cap as far as the shim can tell; the monitor reports
//!   both from NVML (`gpuslice_team_memory_over_quota_bytes`).

use super::arbiter::Shared;
use super::log;
use crate::config::Config;
use crate::nvml::GpuInfo;
use ledger::team_usage::TeamUsage;
use ledger::Ledger;
use std::collections::HashMap;
use std::sync::Arc;

/// Rounds a difference between a page and its members' ledgers must stay
/// (of one sign) before the audit corrects it: a second at the monitor's
/// 250 ms round.
pub const AUDIT_ROUNDS: u32 = 4;

/// A team's page on one device, as the arbiter hands it over.
#[derive(Clone)]
pub struct TeamPage {
    pub quota_bytes: u64,
    pub usage: Arc<TeamUsage>,
}

/// The pages, by (team, device UUID): the main loop writes it, the arbiter reads it.
pub type TeamPages = HashMap<(String, [u8; 16]), TeamPage>;

/// A difference the audit has seen, round after round.
#[derive(Debug, Default, Clone, Copy)]
struct Drift {
    /// The least (by size) difference, sum of ledgers − page, seen so far.
    least: i64,
    rounds: u32,
}

#[derive(Default)]
pub struct TeamMemory {
    drift: HashMap<(String, [u8; 16]), Drift>,
}

/// What `tenant` holds on `uuid` by its ledger.
fn held_on(ledger: &Ledger, uuid: &[u8; 16]) -> u64 {
    ledger.devices().iter().find(|d| d.uuid == *uuid).map_or(0, |d| ledger.used_bytes(d.index))
}

/// What the members of team `team` hold on `uuid` by their ledgers.
fn members_hold(config: &Config, team: &str, uuid: &[u8; 16], ledgers: &[&Ledger]) -> u64 {
    ledgers
        .iter()
        .filter(|l| config.team_of(&l.tenant()).is_some_and(|(name, _)| name == team))
        .fold(0u64, |sum, l| sum.saturating_add(held_on(l, uuid)))
}

impl TeamMemory {
    /// Makes the pages of every team and device with a quota and drops the
    /// others (see the module docs).
    pub fn sync(&mut self, config: &Config, ledgers: &[&Ledger], gpus: Option<&[GpuInfo]>, shared: &Shared) {
        // The devices: NVML's, or, without NVML, those the ledgers list.
        let mut devices: Vec<([u8; 16], Option<u32>)> = match gpus {
            Some(gpus) => gpus.iter().filter_map(|g| Some((crate::nvml::uuid_bytes(&g.uuid)?, Some(g.index)))).collect(),
            None => Vec::new(),
        };
        if gpus.is_none() {
            for ledger in ledgers {
                for d in ledger.devices() {
                    if !devices.iter().any(|(u, _)| *u == d.uuid) {
                        devices.push((d.uuid, None));
                    }
                }
            }
        }
        let mut pages = shared.team_pages.lock().unwrap_or_else(|e| e.into_inner());
        // A page whose quota went (a reload) is kept, with no quota, while
        // its team is in the file: its members' processes still count in
        // it, so a quota that comes back finds the team's total right.
        pages.retain(|(team, _), _| config.teams.contains_key(team));
        for page in pages.values_mut() {
            page.quota_bytes = ledger::UNLIMITED;
        }
        for (team, team_config) in &config.teams {
            for (uuid, host_index) in &devices {
                let Some(quota_bytes) = team_config.settings.memory_for(&crate::nvml::uuid_string(uuid), *host_index) else { continue };
                let key = (team.clone(), *uuid);
                if let Some(page) = pages.get_mut(&key) {
                    page.quota_bytes = quota_bytes;
                    continue;
                }
                let held = members_hold(config, team, uuid, ledgers);
                match TeamUsage::create(team, held) {
                    Ok(usage) => {
                        pages.insert(key, TeamPage { quota_bytes, usage: Arc::new(usage) });
                    }
                    Err(e) => log::limited(
                        &format!("team-page-{team}"),
                        log::Level::Warn,
                        &format!("team {team}: cannot make its memory page ({e}): its quota is reported, not enforced at allocation"),
                    ),
                }
            }
        }
        self.drift.retain(|key, _| pages.contains_key(key));
    }

    /// What the monitor reclaimed from a dead process of `tenant` (on ledger
    /// device entries of `ledger`) leaves its team's pages.
    pub fn reclaimed(&self, config: &Config, ledger: &Ledger, bytes_per_device: &[(usize, u64)], shared: &Shared) {
        let Some((team, _)) = config.team_of(&ledger.tenant()) else { return };
        let devices = ledger.devices();
        let pages = shared.team_pages.lock().unwrap_or_else(|e| e.into_inner());
        for (dev, bytes) in bytes_per_device {
            let Some(device) = devices.iter().find(|d| d.index == *dev) else { continue };
            if let Some(page) = pages.get(&(team.to_string(), device.uuid)) {
                page.usage.page().release(*bytes);
            }
        }
    }

    /// Audits every page against its members' ledgers (see the module docs).
    pub fn audit(&mut self, config: &Config, ledgers: &[&Ledger], shared: &Shared) {
        let pages: Vec<((String, [u8; 16]), TeamPage)> =
            shared.team_pages.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (key, page) in pages {
            let (team, uuid) = &key;
            let counter = page.usage.page();
            let before = counter.used_bytes();
            let held = members_hold(config, team, uuid, ledgers);
            let after = counter.used_bytes();
            // The page read before and after the ledgers: a round counts
            // only when both readings are off the same way, by the smaller
            // of the two. So a change between the reads (a member's
            // allocation) is not taken for a drift, and a member that
            // keeps writing the page cannot keep the audit from counting.
            let off =
                |page_bytes: u64| (i128::from(held) - i128::from(page_bytes)).clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
            let (first, second) = (off(before), off(after));
            if first == 0 || second == 0 || (first > 0) != (second > 0) {
                self.drift.remove(&key);
                continue;
            }
            let difference = if first.unsigned_abs() < second.unsigned_abs() { first } else { second };
            let drift = self.drift.entry(key.clone()).or_default();
            if drift.rounds > 0 && (drift.least > 0) == (difference > 0) {
                drift.rounds += 1;
                if difference.unsigned_abs() < drift.least.unsigned_abs() {
                    drift.least = difference;
                }
            } else {
                *drift = Drift { least: difference, rounds: 1 };
            }
            if drift.rounds >= AUDIT_ROUNDS {
                let least = drift.least;
                self.drift.remove(&key);
                counter.correct_by(least);
                log::limited(
                    &format!("team-audit-{team}"),
                    log::Level::Info,
                    &format!(
                        "team {team}: its memory on device {} counted {} where its members' ledgers hold {}: corrected by {}{}",
                        crate::nvml::uuid_string(uuid),
                        crate::text::human_bytes(after),
                        crate::text::human_bytes(held),
                        if least < 0 { "-" } else { "+" },
                        crate::text::human_bytes(least.unsigned_abs())
                    ),
                );
            }
        }
    }
}
