//! Policies that cannot do what they say, found before they bite.
//!
//! - A share above the same tenant's limit on a device can never be given
//!   (the limit is a ceiling, the share a floor): refused, in the
//!   configuration file and in `gpuslice run`'s options alike
//!   ([`share_above_limit`]).
//! - A memory cap above the device's memory limits nothing, and shares on
//!   one device that add up to more than 100 % cannot all be given at once:
//!   both are legal (a file often serves hosts with different GPUs, and a
//!   tenant with a share need not be busy), so they are warnings, from the
//!   monitor when it loads the file (`gpuslice monitor --check` says them
//!   and exits) and from `gpuslice run` ([`config_warnings`],
//!   [`run_warnings`]).

use crate::config::Config;
use crate::nvml::GpuInfo;
use crate::text::human_bytes;
use ledger::units::PerDevice;

/// Ratio × 10 000 of the whole device.
const WHOLE_DEVICE_E4: u64 = 10_000;

/// A share or limit (ratio × 10 000) as a percentage: `60`, `12.5`.
pub fn percent(ratio_e4: u32) -> String {
    let text = format!("{}.{:02}", ratio_e4 / 100, ratio_e4 % 100);
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The first device (`None`: every device) where `share` is above
/// `limit`, with both values. A device with its own value is compared with
/// the other setting's value for it (its own, else the one for every
/// device).
pub fn share_above_limit<T: Copy + PartialOrd, K: PartialEq + Clone>(
    share: &PerDevice<T, K>,
    limit: &PerDevice<T, K>,
) -> Option<(Option<K>, T, T)> {
    if let (Some(s), Some(l)) = (share.all, limit.all) {
        if s > l {
            return Some((None, s, l));
        }
    }
    share.keys().chain(limit.keys()).find_map(|key| match (share.get(key), limit.get(key)) {
        (Some(s), Some(l)) if s > l => Some((Some(key.clone()), s, l)),
        _ => None,
    })
}

/// The devices a tenant can be placed on: every GPU that is not split into
/// MIG devices, and every MIG device.
fn placeable(gpus: &[GpuInfo]) -> impl Iterator<Item = &GpuInfo> {
    gpus.iter().filter(|g| !gpus.iter().any(|m| m.parent_uuid.as_deref() == Some(g.uuid.as_str())))
}

/// `device 0 (GPU-…)`, or `MIG device of GPU 0 (MIG-…)`.
fn device_name(gpu: &GpuInfo) -> String {
    match gpu.parent_uuid {
        Some(_) => format!("MIG device {} of GPU {}", gpu.uuid, gpu.index),
        None => format!("device {} ({})", gpu.index, gpu.uuid),
    }
}

/// One warning for each configured cap or team quota above its device's
/// memory, and one for each device whose configured shares add up to more
/// than 100 %. A team's share counts once, as a tenant's does; its members'
/// own shares divide the team's part among them and are not counted again.
pub fn config_warnings(config: &Config, gpus: &[GpuInfo]) -> Vec<String> {
    let mut warnings = Vec::new();
    for gpu in placeable(gpus) {
        let mut shares = Vec::new();
        for (team, settings) in config.teams.iter().map(|(name, team)| (name, &team.settings)) {
            if let Some(quota) = settings.memory_for(&gpu.uuid, Some(gpu.index)) {
                if quota > gpu.total_bytes {
                    warnings.push(quota_warning(team, quota, gpu));
                }
            }
            if let Some(share) = settings.compute_for(&gpu.uuid, Some(gpu.index)).map(|c| c.share_ratio_e4).filter(|s| *s > 0) {
                shares.push((format!("team {team}"), share));
            }
        }
        for (tenant, settings) in &config.tenants {
            if let Some(cap) = settings.memory_for(&gpu.uuid, Some(gpu.index)) {
                if cap > gpu.total_bytes {
                    warnings.push(cap_warning(&format!("tenant {tenant}"), cap, gpu));
                }
            }
            if config.team_of(tenant).is_some() {
                continue;
            }
            if let Some(share) = settings.compute_for(&gpu.uuid, Some(gpu.index)).map(|c| c.share_ratio_e4).filter(|s| *s > 0) {
                shares.push((tenant.clone(), share));
            }
        }
        if let Some(warning) = shares_warning("the configured shares", &shares, gpu) {
            warnings.push(warning);
        }
    }
    warnings
}

fn quota_warning(team: &str, quota: u64, gpu: &GpuInfo) -> String {
    format!(
        "team {team}: the memory quota of {} on {} is above the device's {}: it limits nothing there",
        human_bytes(quota),
        device_name(gpu),
        human_bytes(gpu.total_bytes)
    )
}

fn cap_warning(who: &str, cap: u64, gpu: &GpuInfo) -> String {
    format!(
        "{who}: the memory cap of {} on {} is above the device's {}: it limits nothing there, and the tenant meets the device's own out-of-memory first",
        human_bytes(cap),
        device_name(gpu),
        human_bytes(gpu.total_bytes)
    )
}

fn shares_warning(what: &str, shares: &[(String, u32)], gpu: &GpuInfo) -> Option<String> {
    let total: u64 = shares.iter().map(|(_, s)| u64::from(*s)).sum();
    (total > WHOLE_DEVICE_E4).then(|| {
        let each: Vec<String> = shares.iter().map(|(t, s)| format!("{t} {} %", percent(*s))).collect();
        format!(
            "{}: {what} add up to {} % ({}), above 100 %: they cannot all be given while every one of these tenants has work",
            device_name(gpu),
            percent(u32::try_from(total).unwrap_or(u32::MAX)),
            each.join(", ")
        )
    })
}

/// What `gpuslice run` is about to set, and what the host holds already.
pub struct RunPolicy<'a> {
    /// The tenant the command will run as, when named.
    pub tenant: Option<&'a str>,
    /// `--memory`, by ordinal as the command sees devices.
    pub memory: Option<&'a PerDevice<u64>>,
    /// `--compute-share`, percent, by ordinal.
    pub share_percent: Option<&'a PerDevice<u32>>,
}

/// Warnings for `gpuslice run`: a cap above a device's memory, and shares
/// above 100 % on a device once this command's share joins those of the
/// tenants running there now (`running_shares`: tenant, device UUID,
/// share ratio × 10 000). `visible` are the devices the command will see,
/// in its ordinal order.
pub fn run_warnings(run: &RunPolicy<'_>, visible: &[GpuInfo], running_shares: &[(String, String, u32)]) -> Vec<String> {
    let mut warnings = Vec::new();
    let who = match run.tenant {
        Some(tenant) => format!("--memory (tenant {tenant})"),
        None => "--memory".to_string(),
    };
    for (ordinal, gpu) in (0u32..).zip(visible) {
        if let Some(cap) = run.memory.and_then(|m| m.get(&ordinal)) {
            if cap > gpu.total_bytes {
                warnings.push(cap_warning(&who, cap, gpu));
            }
        }
        if let Some(share) = run.share_percent.and_then(|s| s.get(&ordinal)) {
            let mut shares: Vec<(String, u32)> = running_shares
                .iter()
                .filter(|(tenant, uuid, _)| uuid.eq_ignore_ascii_case(&gpu.uuid) && Some(tenant.as_str()) != run.tenant)
                .map(|(tenant, _, share)| (tenant.clone(), *share))
                .collect();
            shares.push((run.tenant.unwrap_or("this command").to_string(), ledger::compute::percent_ratio_e4(share)));
            if let Some(warning) = shares_warning("--compute-share and the shares of the tenants running there", &shares, gpu) {
                warnings.push(warning);
            }
        }
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn gpu(index: u32, uuid: &str, total_bytes: u64) -> GpuInfo {
        GpuInfo { index, uuid: uuid.into(), total_bytes, ..GpuInfo::default() }
    }

    #[test]
    fn percentages_print_as_written() {
        assert_eq!(percent(6000), "60");
        assert_eq!(percent(1250), "12.5");
        assert_eq!(percent(1), "0.01");
        assert_eq!(percent(12_000), "120");
    }

    #[test]
    fn a_share_above_the_limit_is_found_on_the_device_it_is_on() {
        let all = |v: u32| PerDevice::<u32>::all_devices(v);
        let list = |entries: &[(u32, u32)]| PerDevice::<u32> { all: None, devices: entries.to_vec() };
        assert_eq!(share_above_limit(&all(60), &all(30)), Some((None, 60, 30)));
        assert_eq!(share_above_limit(&all(30), &all(60)), None);
        assert_eq!(share_above_limit(&all(30), &all(30)), None);
        assert_eq!(share_above_limit(&list(&[(1, 60)]), &all(30)), Some((Some(1), 60, 30)));
        assert_eq!(share_above_limit(&all(60), &list(&[(0, 30)])), Some((Some(0), 60, 30)));
        assert_eq!(share_above_limit(&list(&[(0, 60)]), &list(&[(1, 30)])), None, "different devices");
        assert_eq!(share_above_limit(&all(60), &PerDevice::default()), None, "no limit");
    }

    #[test]
    fn the_configuration_is_checked_against_the_devices() {
        let config = crate::config::parse(
            "[tenants.big]\nmemory = \"64GiB\"\nshare = 60\n[tenants.fits]\nmemory = { 1 = \"8GiB\" }\nshare = { 0 = 60 }\n",
        )
        .unwrap();
        let gpus = [gpu(0, "GPU-0", 16 * GIB), gpu(1, "GPU-1", 80 * GIB)];
        let warnings = config_warnings(&config, &gpus);
        assert_eq!(warnings.len(), 2, "{warnings:#?}");
        assert!(warnings[0].starts_with("tenant big: the memory cap of 64.0 GiB on device 0 (GPU-0) is above the device's 16.0 GiB"));
        assert!(warnings[1].starts_with("device 0 (GPU-0): the configured shares add up to 120 % (big 60 %, fits 60 %), above 100 %"));
        // Device 1 holds the 64 GiB cap, and only one share is on it.
        assert!(warnings.iter().all(|w| !w.contains("GPU-1")), "{warnings:#?}");
    }

    #[test]
    fn a_teams_share_counts_once_and_its_members_shares_are_not_added() {
        // Members' shares add up past 100 % within the team: they divide its
        // 50 % and are no warning. Team 50 % and outsider 40 %: 90 %.
        let text = "[teams.t]\ntenants = [\"t-*\"]\nshare = 50\nmemory = \"8GiB\"\n\
                    [tenants.t-a]\nshare = 70\n[tenants.t-b]\nshare = 70\n[tenants.outsider]\nshare = 40\n";
        let gpus = [gpu(0, "GPU-0", 16 * GIB)];
        let warnings = config_warnings(&crate::config::parse(text).unwrap(), &gpus);
        assert!(warnings.is_empty(), "{warnings:#?}");

        // Two teams of 60 % and 30 % and the outsider's 40 %: 130 %.
        let text = format!("{text}[teams.u]\ntenants = [\"u-*\"]\nshare = 30\n[teams.v]\ntenants = [\"v-*\"]\nshare = 10\n");
        let warnings = config_warnings(&crate::config::parse(&text).unwrap(), &gpus);
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].starts_with(
                "device 0 (GPU-0): the configured shares add up to 130 % (team t 50 %, team u 30 %, team v 10 %, outsider 40 %), above 100 %"
            ),
            "{warnings:#?}"
        );

        // Two teams alone past 100 %, with no tenant configured.
        let text = "[teams.a]\ntenants = [\"a-*\"]\nshare = 60\n[teams.b]\ntenants = [\"b-*\"]\nshare = 60\n";
        let warnings = config_warnings(&crate::config::parse(text).unwrap(), &gpus);
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(warnings[0].contains("add up to 120 % (team a 60 %, team b 60 %)"), "{warnings:#?}");
    }

    #[test]
    fn a_teams_memory_quota_above_the_devices_memory_is_said() {
        let config = crate::config::parse("[teams.t]\ntenants = [\"t-*\"]\nmemory = { 0 = \"32GiB\" }\n").unwrap();
        let warnings = config_warnings(&config, &[gpu(0, "GPU-0", 16 * GIB), gpu(1, "GPU-1", 16 * GIB)]);
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(
            warnings[0].starts_with("team t: the memory quota of 32.0 GiB on device 0 (GPU-0) is above the device's 16.0 GiB"),
            "{warnings:#?}"
        );
    }

    #[test]
    fn a_mig_split_gpu_is_checked_by_its_instances() {
        let config = crate::config::parse("[tenants.a]\nmemory = \"20GiB\"\n").unwrap();
        let mut mig = gpu(0, "MIG-a", 10 * GIB);
        mig.parent_uuid = Some("GPU-0".into());
        let warnings = config_warnings(&config, &[gpu(0, "GPU-0", 80 * GIB), mig]);
        assert_eq!(warnings.len(), 1, "{warnings:#?}");
        assert!(warnings[0].contains("MIG device MIG-a of GPU 0") && warnings[0].contains("10.0 GiB"), "{warnings:#?}");
    }

    #[test]
    fn run_is_checked_against_what_it_sees_and_who_runs_there() {
        let memory = PerDevice::<u64> { all: Some(8 * GIB), devices: vec![(1, 64 * GIB)] };
        let share = PerDevice::<u32>::all_devices(50);
        let run = RunPolicy { tenant: Some("me"), memory: Some(&memory), share_percent: Some(&share) };
        let visible = [gpu(3, "GPU-3", 16 * GIB), gpu(5, "GPU-5", 16 * GIB)];
        let running = [("other".to_string(), "GPU-3".to_string(), 6000), ("me".to_string(), "GPU-3".to_string(), 5000)];
        let warnings = run_warnings(&run, &visible, &running);
        assert_eq!(warnings.len(), 2, "{warnings:#?}");
        assert!(warnings[0].starts_with(
            "device 3 (GPU-3): --compute-share and the shares of the tenants running there add up to 110 % (other 60 %, me 50 %)"
        ));
        assert!(warnings[1].starts_with("--memory (tenant me): the memory cap of 64.0 GiB on device 5 (GPU-5)"), "{warnings:#?}");
        assert!(run_warnings(&RunPolicy { tenant: None, memory: Some(&memory), share_percent: None }, &visible[..1], &running).is_empty());
    }
}
