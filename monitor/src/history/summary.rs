//! A window of history summed up per tenant and device, and the rule that
//! turns it into a recommendation.
//!
//! Figures are taken over *active* intervals only (those in which the
//! tenant had a live process or held memory on the device, see
//! [`super::aggregate`]): peak, p95 and p99 of memory are over the
//! intervals' peaks (the most each minute held), and the compute
//! percentiles over the intervals' mean compute used. A percentile is the
//! nearest rank: the smallest value that at least that share of the
//! intervals do not exceed.
//!
//! The rule, for memory: p99 plus [`HEADROOM_PERCENT`], rounded up to a
//! whole [`MEMORY_STEP_BYTES`] (at least one step). If that is below the
//! cap and no allocation was refused in the window, it "would do"; a
//! refused allocation means the cap was reached, so it is never lowered
//! then. For a share or a limit: p99 of compute used plus the same
//! headroom, rounded up to a whole [`COMPUTE_STEP_E4`] (5 % of the device,
//! at least one step); a limit that throttled the tenant in the window is
//! never lowered. Compute used counts the spare time a tenant got beyond
//! its share, so a tenant that uses more than its share is told to keep it.

use super::aggregate::{DeviceRow, TenantRow};
use crate::text::human_bytes;
use serde::Serialize;

/// Headroom above p99, in percent.
pub const HEADROOM_PERCENT: u64 = 10;
/// Memory recommendations are whole multiples of this.
pub const MEMORY_STEP_BYTES: u64 = 512 << 20;
/// Share and limit recommendations are whole multiples of this (5 %).
pub const COMPUTE_STEP_E4: u64 = 500;

/// The nearest-rank percentile `p` (0 < p ≤ 100) of `sorted` (ascending);
/// `None` when it is empty.
pub fn percentile(sorted: &[u64], p: u64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len() as u64;
    // The rank is ceil(p/100 × n), from 1.
    let rank = (p.clamp(1, 100) * n).div_ceil(100).max(1);
    sorted.get(usize::try_from(rank - 1).unwrap_or(usize::MAX)).copied().or(sorted.last().copied())
}

/// `value` plus the headroom, rounded up to a whole `step`, at least one step.
pub fn with_headroom(value: u64, step: u64) -> u64 {
    let step = u128::from(step.max(1));
    let need = (u128::from(value) * u128::from(100 + HEADROOM_PERCENT)).div_ceil(100);
    let rounded = need.div_ceil(step).max(1) * step;
    u64::try_from(rounded).unwrap_or(u64::MAX)
}

/// What the rule says about a cap, share or limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The recommendation is below the setting.
    Lower,
    /// The setting is used, or was reached: keep it.
    Keep,
    /// There is no setting; the recommendation is what would hold the use.
    Set,
    /// Nothing to size from: no active interval, or no figure recorded.
    NoData,
}

/// A recommendation: the verdict, the value it proposes and one line for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advice {
    pub verdict: Verdict,
    /// Bytes for memory, ten-thousandths of a device for compute.
    pub recommended: Option<u64>,
    pub text: String,
}

/// A duration for people: `7d`, `6d 23h`, `3h 12m`, `12m`, `40s`.
pub fn short_duration(seconds: u64) -> String {
    let (d, h, m, s) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h {m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d {h}h"),
    }
}

/// A share of the device for people: `12.5 %`, `15 %`.
pub fn percent_e4(e4: u64) -> String {
    if e4.is_multiple_of(100) {
        format!("{} %", e4 / 100)
    } else {
        format!("{:.1} %", e4 as f64 / 100.0)
    }
}

/// The memory rule (see the module docs). `over_s` is how long the figures
/// cover, for the text.
pub fn recommend_memory(cap_bytes: Option<u64>, p99_bytes: Option<u64>, peak_bytes: u64, denied: u64, over_s: u64) -> Advice {
    let Some(p99) = p99_bytes else {
        return Advice { verdict: Verdict::NoData, recommended: None, text: "no activity in the window: nothing to size from".into() };
    };
    let suggested = with_headroom(p99, MEMORY_STEP_BYTES);
    let over = short_duration(over_s);
    let peak_note = if peak_bytes > suggested { format!(" (peak {} is above it)", human_bytes(peak_bytes)) } else { String::new() };
    let Some(cap) = cap_bytes else {
        return Advice {
            verdict: Verdict::Set,
            recommended: Some(suggested),
            text: format!("no cap, p99 {} over {over}: a cap of {} would hold it{peak_note}", human_bytes(p99), human_bytes(suggested)),
        };
    };
    let head = format!("cap {}, p99 {} over {over}", human_bytes(cap), human_bytes(p99));
    if denied > 0 {
        return Advice {
            verdict: Verdict::Keep,
            recommended: Some(cap),
            text: format!("{head}: {denied} allocation(s) refused at the cap: keep it, or raise it if the job needed them"),
        };
    }
    if suggested < cap {
        Advice {
            verdict: Verdict::Lower,
            recommended: Some(suggested),
            text: format!("{head}: {} would do{peak_note}", human_bytes(suggested)),
        }
    } else {
        Advice { verdict: Verdict::Keep, recommended: Some(cap), text: format!("{head}: keep it") }
    }
}

/// Which compute setting [`recommend_compute`] judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputeSetting {
    Share,
    Limit,
}

/// The share and limit rule (see the module docs); `None` when the tenant
/// has no such setting.
pub fn recommend_compute(
    setting: ComputeSetting,
    value_e4: Option<u32>,
    used_p99_e4: Option<u32>,
    throttled_ns: u64,
    over_s: u64,
) -> Option<Advice> {
    let value = u64::from(value_e4?);
    let name = match setting {
        ComputeSetting::Share => "share",
        ComputeSetting::Limit => "limit",
    };
    let Some(p99) = used_p99_e4.map(u64::from) else {
        return Some(Advice {
            verdict: Verdict::NoData,
            recommended: None,
            text: format!("{name} {}: no compute use recorded in the window", percent_e4(value)),
        });
    };
    let suggested = with_headroom(p99, COMPUTE_STEP_E4);
    let head = format!("{name} {}, p99 used {} over {}", percent_e4(value), percent_e4(p99), short_duration(over_s));
    if setting == ComputeSetting::Limit && throttled_ns > 0 {
        return Some(Advice {
            verdict: Verdict::Keep,
            recommended: Some(value),
            text: format!("{head}: throttled {} at the limit: keep it, or raise it", short_duration(throttled_ns / 1_000_000_000)),
        });
    }
    Some(if suggested < value {
        Advice { verdict: Verdict::Lower, recommended: Some(suggested), text: format!("{head}: {} would do", percent_e4(suggested)) }
    } else {
        Advice { verdict: Verdict::Keep, recommended: Some(value), text: format!("{head}: keep it") }
    })
}

/// One tenant on one device over a window.
#[derive(Debug, Clone, Serialize)]
pub struct TenantSummary {
    pub tenant: String,
    pub device_uuid: String,
    pub device_index: u32,
    /// Time the history covers for this pair, and the part of it active.
    pub recorded_s: u64,
    pub active_s: u64,
    /// The cap at the last interval; `None`: none.
    pub memory_cap_bytes: Option<u64>,
    pub memory_peak_bytes: u64,
    pub memory_p95_bytes: Option<u64>,
    pub memory_p99_bytes: Option<u64>,
    /// The most the driver reported for the tenant (NVML only).
    pub driver_memory_peak_bytes: Option<u64>,
    /// Share and limit at the last interval, ratios of the device.
    pub compute_share_ratio: Option<f64>,
    pub compute_limit_ratio: Option<f64>,
    /// Compute used (mean and p99 over active intervals) and mean target.
    pub compute_used_mean_ratio: Option<f64>,
    pub compute_used_p99_ratio: Option<f64>,
    pub compute_target_mean_ratio: Option<f64>,
    pub alloc_denied_total: u64,
    pub throttled_seconds: f64,
    pub processes_peak: u32,
    pub memory_advice: Advice,
    pub share_advice: Option<Advice>,
    pub limit_advice: Option<Advice>,
    /// Mean CPU time of its processes over active intervals, in cores.
    pub cpu_mean_cores: Option<f64>,
    /// Mean device time of its processes over active intervals: NVML's SM
    /// utilization, or the compute it was charged where that is more.
    pub gpu_mean_ratio: Option<f64>,
    /// Busy, starved or idle over the window, by the rule of `activity`.
    pub activity: Option<crate::activity::Activity>,
    /// What to change for a starved or idle tenant, in words.
    pub activity_advice: Option<String>,
}

fn ratio(e4: u64) -> f64 {
    e4 as f64 / 10_000.0
}

/// Sums up the rows of one tenant on one device (`rows` non-empty, oldest first).
pub fn summarize_one(rows: &[TenantRow]) -> Option<TenantSummary> {
    let last = rows.last()?;
    let active: Vec<&TenantRow> = rows.iter().filter(|r| r.active_rounds > 0).collect();
    let mut peaks: Vec<u64> = active.iter().map(|r| r.memory_peak_bytes).collect();
    peaks.sort_unstable();
    let mut used: Vec<u64> = active.iter().filter_map(|r| r.compute_used_e4.map(u64::from)).collect();
    used.sort_unstable();
    let used_mean = (!used.is_empty()).then(|| used.iter().sum::<u64>() / used.len() as u64);
    let targets: Vec<u64> = active.iter().filter_map(|r| r.compute_target_e4.map(u64::from)).collect();
    let target_mean = (!targets.is_empty()).then(|| targets.iter().sum::<u64>() / targets.len() as u64);
    let recorded_s = rows.iter().map(|r| r.span_s).fold(0u64, u64::saturating_add);
    let active_s = active.iter().map(|r| r.span_s).fold(0u64, u64::saturating_add);
    let denied = rows.iter().map(|r| r.denied).fold(0u64, u64::saturating_add);
    let throttled_ns = rows.iter().map(|r| r.throttled_ns).fold(0u64, u64::saturating_add);
    let memory_p99 = percentile(&peaks, 99);
    let used_p99 = percentile(&used, 99).map(|v| u32::try_from(v).unwrap_or(u32::MAX));
    let peak = peaks.last().copied().unwrap_or(0);
    let mean_of = |values: Vec<u64>| (!values.is_empty()).then(|| ratio(values.iter().sum::<u64>() / values.len() as u64));
    let cpu_mean_cores = mean_of(active.iter().filter_map(|r| r.cpu_e4.map(u64::from)).collect());
    let gpu_mean_ratio = mean_of(
        active
            .iter()
            .filter_map(|r| match (r.gpu_e4, r.compute_used_e4) {
                (Some(sm), Some(used)) => Some(u64::from(sm.max(used))),
                (Some(sm), None) => Some(u64::from(sm)),
                // Compute used alone, from a history without SM samples,
                // is not enough to call a tenant idle.
                (None, _) => None,
            })
            .collect(),
    );
    let mean_memory = active.iter().map(|r| u128::from(r.memory_mean_bytes)).sum::<u128>() / (active.len().max(1) as u128);
    let mean_memory = u64::try_from(mean_memory).unwrap_or(u64::MAX);
    let activity = crate::activity::classify(mean_memory, gpu_mean_ratio, cpu_mean_cores);
    let activity_advice = activity
        .and_then(|a| crate::activity::advice(a, gpu_mean_ratio.unwrap_or(0.0), cpu_mean_cores.unwrap_or(0.0), &human_bytes(mean_memory)));
    Some(TenantSummary {
        tenant: last.tenant.clone(),
        device_uuid: last.device_uuid.clone(),
        device_index: last.device_index,
        recorded_s,
        active_s,
        memory_cap_bytes: last.memory_cap_bytes,
        memory_peak_bytes: peak,
        memory_p95_bytes: percentile(&peaks, 95),
        memory_p99_bytes: memory_p99,
        driver_memory_peak_bytes: active.iter().filter_map(|r| r.driver_memory_peak_bytes).max(),
        compute_share_ratio: last.compute_share_e4.map(|v| ratio(v.into())),
        compute_limit_ratio: last.compute_limit_e4.map(|v| ratio(v.into())),
        compute_used_mean_ratio: used_mean.map(ratio),
        compute_used_p99_ratio: used_p99.map(|v| ratio(v.into())),
        compute_target_mean_ratio: target_mean.map(ratio),
        alloc_denied_total: denied,
        throttled_seconds: throttled_ns as f64 / 1e9,
        processes_peak: rows.iter().map(|r| r.processes_peak).max().unwrap_or(0),
        memory_advice: recommend_memory(last.memory_cap_bytes, memory_p99, peak, denied, recorded_s),
        share_advice: recommend_compute(ComputeSetting::Share, last.compute_share_e4, used_p99, throttled_ns, recorded_s),
        limit_advice: recommend_compute(ComputeSetting::Limit, last.compute_limit_e4, used_p99, throttled_ns, recorded_s),
        cpu_mean_cores,
        gpu_mean_ratio,
        activity,
        activity_advice,
    })
}

/// Sums up every tenant and device of `rows` (sorted by tenant, device,
/// then time); `report` sums up one pair at a time with [`summarize_one`].
#[cfg(test)]
pub fn summarize(rows: &[TenantRow]) -> Vec<TenantSummary> {
    rows.chunk_by(|a, b| a.tenant == b.tenant && a.device_uuid == b.device_uuid).filter_map(summarize_one).collect()
}

/// One device over a window.
#[derive(Debug, Clone, Serialize)]
pub struct DeviceSummary {
    pub device_uuid: String,
    pub device_index: u32,
    pub recorded_s: u64,
    pub memory_total_bytes: u64,
    /// The most memory the driver reported in use (NVML only).
    pub memory_used_peak_bytes: Option<u64>,
    /// Mean busy share (NVML only).
    pub utilization_mean_ratio: Option<f64>,
    /// The hottest it ran, °C (where the device reports it).
    pub temperature_peak_c: Option<u32>,
    /// The most power it drew, W (where the device reports it).
    pub power_peak_watts: Option<f64>,
    /// Share of the rounds in which heat or the power limit held its
    /// clocks back (where the device reports why).
    pub throttled_ratio: Option<f64>,
}

/// Sums up every device of `rows` (sorted by device, then time).
pub fn summarize_devices(rows: &[DeviceRow]) -> Vec<DeviceSummary> {
    rows.chunk_by(|a, b| a.device_uuid == b.device_uuid)
        .filter_map(|rows| {
            let last = rows.last()?;
            let utils: Vec<u64> = rows.iter().filter_map(|r| r.utilization_e4.map(u64::from)).collect();
            Some(DeviceSummary {
                device_uuid: last.device_uuid.clone(),
                device_index: last.device_index,
                recorded_s: rows.iter().map(|r| r.span_s).fold(0u64, u64::saturating_add),
                memory_total_bytes: last.memory_total_bytes,
                memory_used_peak_bytes: rows.iter().filter_map(|r| r.memory_used_peak_bytes).max(),
                utilization_mean_ratio: (!utils.is_empty()).then(|| ratio(utils.iter().sum::<u64>() / utils.len() as u64)),
                temperature_peak_c: rows.iter().filter_map(|r| r.temperature_peak_c).max(),
                power_peak_watts: rows.iter().filter_map(|r| r.power_peak_mw).max().map(|mw| f64::from(mw) / 1000.0),
                throttled_ratio: {
                    let known: Vec<&DeviceRow> = rows.iter().filter(|r| r.throttled_rounds.is_some()).collect();
                    let rounds: u64 = known.iter().map(|r| u64::from(r.rounds)).sum();
                    let held: u64 = known.iter().filter_map(|r| r.throttled_rounds).map(u64::from).sum();
                    (rounds > 0).then(|| held as f64 / rounds as f64)
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    #[test]
    fn percentiles_are_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 99), Some(99));
        assert_eq!(percentile(&values, 95), Some(95));
        assert_eq!(percentile(&values, 100), Some(100));
        assert_eq!(percentile(&[7], 99), Some(7));
        assert_eq!(percentile(&[1, 2], 50), Some(1));
        assert_eq!(percentile(&[1, 2], 51), Some(2));
        assert_eq!(percentile(&[], 99), None);
        // 1,000 values: p99 is the 990th.
        let values: Vec<u64> = (0..1000).collect();
        assert_eq!(percentile(&values, 99), Some(989));
    }

    #[test]
    fn headroom_is_ten_percent_rounded_up_to_the_step() {
        // The example: p99 5.2 GiB → 5.72 GiB → 6 GiB.
        assert_eq!(with_headroom(5 * GIB + GIB / 5, MEMORY_STEP_BYTES), 6 * GIB);
        // 465 MiB + 10 % = 511.5 MiB: one step; 466 MiB + 10 % = 512.6 MiB: two.
        assert_eq!(with_headroom(465 * MIB, MEMORY_STEP_BYTES), 512 * MIB);
        assert_eq!(with_headroom(466 * MIB, MEMORY_STEP_BYTES), 1024 * MIB);
        assert_eq!(with_headroom(0, MEMORY_STEP_BYTES), MEMORY_STEP_BYTES);
        assert_eq!(with_headroom(1, MEMORY_STEP_BYTES), MEMORY_STEP_BYTES);
        assert_eq!(with_headroom(u64::MAX, MEMORY_STEP_BYTES), u64::MAX);
        // Compute: p99 12 % → 13.2 % → 15 %.
        assert_eq!(with_headroom(1200, COMPUTE_STEP_E4), 1500);
        assert_eq!(with_headroom(4545, COMPUTE_STEP_E4), 5000);
        assert_eq!(with_headroom(4546, COMPUTE_STEP_E4), 5500);
    }

    #[test]
    fn memory_rule() {
        let week = 7 * 86_400;
        let a = recommend_memory(Some(16 * GIB), Some(5 * GIB + GIB / 5), 5 * GIB + GIB / 2, 0, week);
        assert_eq!(a.verdict, Verdict::Lower);
        assert_eq!(a.recommended, Some(6 * GIB));
        assert_eq!(a.text, "cap 16.0 GiB, p99 5.2 GiB over 7d: 6.0 GiB would do");
        // A peak above the recommendation is said.
        let a = recommend_memory(Some(16 * GIB), Some(5 * GIB), 9 * GIB, 0, week);
        assert!(a.text.ends_with("p99 5.0 GiB over 7d: 5.5 GiB would do (peak 9.0 GiB is above it)"), "{}", a.text);
        // Close to the cap: keep.
        let a = recommend_memory(Some(6 * GIB), Some(5 * GIB + GIB / 5), 6 * GIB, 0, week);
        assert_eq!((a.verdict, a.recommended), (Verdict::Keep, Some(6 * GIB)));
        // Refusals: never lowered, however little was used.
        let a = recommend_memory(Some(16 * GIB), Some(GIB), GIB, 3, week);
        assert_eq!(a.verdict, Verdict::Keep);
        assert!(a.text.contains("3 allocation(s) refused"), "{}", a.text);
        // No cap: what would hold it.
        let a = recommend_memory(None, Some(GIB), GIB, 0, 3600);
        assert_eq!((a.verdict, a.recommended), (Verdict::Set, Some(GIB + 512 * MIB)));
        assert_eq!(a.text, "no cap, p99 1.0 GiB over 1h: a cap of 1.5 GiB would hold it");
        // Idle.
        assert_eq!(recommend_memory(Some(GIB), None, 0, 0, week).verdict, Verdict::NoData);
    }

    #[test]
    fn compute_rule() {
        let day = 86_400;
        let share = recommend_compute(ComputeSetting::Share, Some(5000), Some(1200), 0, day).unwrap();
        assert_eq!((share.verdict.clone(), share.recommended), (Verdict::Lower, Some(1500)));
        assert_eq!(share.text, "share 50 %, p99 used 12 % over 1d: 15 % would do");
        // Using more than the share (spare time): keep.
        let share = recommend_compute(ComputeSetting::Share, Some(2500), Some(8000), 0, day).unwrap();
        assert_eq!(share.verdict, Verdict::Keep);
        // A limit that throttled is kept, one that did not is judged as a share is.
        let limit = recommend_compute(ComputeSetting::Limit, Some(3000), Some(500), 5_000_000_000, day).unwrap();
        assert_eq!(limit.verdict, Verdict::Keep);
        assert!(limit.text.contains("throttled 5s"), "{}", limit.text);
        let limit = recommend_compute(ComputeSetting::Limit, Some(3000), Some(500), 0, day).unwrap();
        assert_eq!((limit.verdict, limit.recommended), (Verdict::Lower, Some(1000)));
        assert!(recommend_compute(ComputeSetting::Share, None, Some(500), 0, day).is_none());
        assert_eq!(recommend_compute(ComputeSetting::Share, Some(500), None, 0, day).unwrap().verdict, Verdict::NoData);
    }

    fn row(start_s: u64, peak: u64, active: bool) -> TenantRow {
        TenantRow {
            start_s,
            span_s: 60,
            tenant: "team-a".into(),
            device_uuid: "GPU-0".into(),
            device_index: 0,
            rounds: 240,
            active_rounds: if active { 240 } else { 0 },
            memory_peak_bytes: peak,
            memory_mean_bytes: peak / 2,
            driver_memory_peak_bytes: None,
            memory_cap_bytes: Some(16 * GIB),
            compute_share_e4: Some(5000),
            compute_limit_e4: None,
            compute_used_e4: Some(if active { 1000 } else { 0 }),
            compute_target_e4: None,
            throttled_ns: 10,
            denied: 0,
            processes_peak: u32::from(active),
            cpu_e4: None,
            gpu_e4: None,
            origin: None,
            team: crate::history::aggregate::TeamOf::NoTeam,
        }
    }

    #[test]
    fn a_summary_sizes_from_active_intervals_only() {
        // 100 active minutes with peaks 1..=100 MiB, and 900 idle ones.
        let mut rows: Vec<TenantRow> = (1..=100).map(|i| row(i * 60, i * MIB, true)).collect();
        rows.extend((101..1001).map(|i| row(i * 60, 0, false)));
        let s = summarize(&rows).remove(0);
        assert_eq!((s.recorded_s, s.active_s), (1000 * 60, 100 * 60));
        assert_eq!((s.memory_peak_bytes, s.memory_p95_bytes, s.memory_p99_bytes), (100 * MIB, Some(95 * MIB), Some(99 * MIB)));
        assert_eq!(s.compute_used_p99_ratio, Some(0.1));
        assert_eq!(s.memory_advice.recommended, Some(512 * MIB));
        assert_eq!(s.share_advice.unwrap().recommended, Some(1500));
        assert!(s.limit_advice.is_none());
        assert_eq!(s.throttled_seconds, 1000.0 * 10.0 / 1e9);
        assert_eq!(s.processes_peak, 1);
    }

    #[test]
    fn durations_for_people() {
        assert_eq!(short_duration(40), "40s");
        assert_eq!(short_duration(12 * 60 + 5), "12m");
        assert_eq!(short_duration(3 * 3600 + 12 * 60), "3h 12m");
        assert_eq!(short_duration(7 * 86_400), "7d");
        assert_eq!(short_duration(6 * 86_400 + 23 * 3600 + 59 * 60), "6d 23h");
        assert_eq!(percent_e4(1250), "12.5 %");
        assert_eq!(percent_e4(1500), "15 %");
    }
}
