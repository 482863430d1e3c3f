//! `/metrics`: the snapshot in the Prometheus text exposition format (0.0.4).
//!
//! The format itself (HELP and TYPE lines, label and HELP escaping, numbers,
//! `+Inf`) belongs to `prometheus-client`, the Prometheus project's Rust
//! client; this module only says which families there are and where their
//! values come from.
//!
//! Every value is recomputed from the round's [`Snapshot`] and the monitor's
//! own [`MonitorCounters`], so there are no long-lived metric objects to
//! update: [`render`] hands both to a [`Page`] collector in a registry made
//! for that one render, and the collector writes every family when the
//! registry is encoded. A family with no series this round (no untracked
//! process, no tenant over its cap) still gets its HELP and TYPE lines, so
//! that a scraper can tell "none" from "not exported".

use crate::nvml::{DeviceHealth, CLOCKS_EVENT_REASONS};
use crate::snapshot::{DeviceView, Snapshot, TenantDeviceView, TenantView, UntrackedView};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::encoding::{
    CounterValueEncoder, DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, GaugeValueEncoder, MetricEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::fmt;

/// The `Content-Type` of the page [`render`] writes.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Figures the monitor keeps or gathers itself (not in any ledger): its
/// counters, and what it reads beside the ledgers (device names, the queue).
#[derive(Debug, Clone, Default)]
pub struct MonitorCounters {
    /// Each team's figures on each device (`[teams]` of the configuration).
    pub teams: Vec<crate::teams::TeamDeviceFigures>,
    /// Violations found, by kind (`untracked_process`, `over_cap`).
    pub violations_total: std::collections::BTreeMap<&'static str, u64>,
    /// Processes killed because of a violation.
    pub violation_kills_total: u64,
    /// Configuration reloads, by result (`ok`, `error`).
    pub config_reloads_total: std::collections::BTreeMap<&'static str, u64>,
    /// Whether the last reload of the configuration was refused (the
    /// previous one is still in force).
    pub config_reload_refused: bool,
    /// Tenants over their cap by more than their context overhead, now.
    pub over_cap: Vec<OverCap>,
    /// Bytes a tenant's usage counts that no process slot holds, by
    /// (tenant, uuid), where that has lasted a round (leak audit).
    pub unattributed_bytes: std::collections::HashMap<(String, String), u64>,
    /// Rounds completed, counting the one whose page this is: a scrape that
    /// shows a higher figure than an earlier one reflects a look at the
    /// ledgers and NVML taken after that earlier scrape.
    pub rounds_total: u64,
    /// Device and MIG device names by UUID, as NVML gives them (empty
    /// without NVML: then there is no `gpuslice_device_info`).
    pub device_names: std::collections::HashMap<String, String>,
    /// Memory committed per device UUID, as `gpuslice devices` and the
    /// admission queue count it ([`crate::queue::committed_bytes`]).
    pub committed_bytes: std::collections::HashMap<String, u64>,
    /// The admission queue, as last read.
    pub queue: QueueFigures,
    /// Ledgers watched now.
    pub ledgers_watched: u64,
    /// Ledger files refused for a bound, each counted once, by reason
    /// (`per_uid_bound`, `total_bound`).
    pub ledger_files_refused_total: std::collections::BTreeMap<&'static str, u64>,
    /// Ledger files not watched now because of a bound, by reason.
    pub ledger_files_over_bound: std::collections::BTreeMap<&'static str, u64>,
    /// Tenants admitted through `gpuslice tenant`, with where they came from.
    pub allocations: Vec<AllocationInfo>,
}

/// A tenant admitted through `gpuslice tenant` (a Slurm job, a Kubernetes
/// claim), as `gpuslice_tenant_allocation_info` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllocationInfo {
    pub tenant: String,
    /// `admitted`, or `released` while processes of it still live.
    pub state: &'static str,
    /// The labels it was admitted with (`origin`, `namespace`, `pod`, …).
    pub labels: BTreeMap<String, String>,
}

/// The labels of [`AllocationInfo`] that `gpuslice_tenant_allocation_info`
/// carries, each empty where the allocation did not give it.
pub const ALLOCATION_LABELS: [&str; 6] = ["origin", "namespace", "pod", "claim", "job", "user"];

/// The admission queue, as the monitor decides it.
#[derive(Debug, Clone, Default)]
pub struct QueueFigures {
    /// Live jobs waiting for room.
    pub waiting: u64,
    /// Live jobs admitted and running.
    pub running: u64,
    /// How long admitted jobs waited, by priority.
    pub wait_seconds: std::collections::BTreeMap<i32, WaitHistogram>,
}

/// Upper bounds of the wait-time buckets, seconds: from "started at once"
/// to "waited an hour".
pub const WAIT_BUCKETS_SECONDS: [f64; 12] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 900.0, 3600.0];

/// A histogram of wait times: one count per bucket of
/// [`WAIT_BUCKETS_SECONDS`] and one past the last.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WaitHistogram {
    pub sum_seconds: f64,
    pub count: u64,
    pub per_bucket: [u64; WAIT_BUCKETS_SECONDS.len() + 1],
}

impl WaitHistogram {
    /// Counts one wait.
    pub fn observe(&mut self, seconds: f64) {
        let bucket = WAIT_BUCKETS_SECONDS.iter().position(|upper| seconds <= *upper).unwrap_or(WAIT_BUCKETS_SECONDS.len());
        self.per_bucket[bucket] += 1;
        self.count += 1;
        self.sum_seconds += seconds;
    }
}

/// A tenant whose driver-reported memory passes its cap by more than its
/// context overhead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverCap {
    /// Tenant.
    pub tenant: String,
    /// Host device index.
    pub device: u32,
    /// `GPU-…`.
    pub uuid: String,
    /// Bytes over the cap.
    pub over_bytes: u64,
}

/// Renders the whole exposition.
pub fn render(snapshot: &Snapshot, counters: &MonitorCounters) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Page { snapshot: snapshot.clone(), counters: counters.clone() }));
    let mut out = String::new();
    // Only the writer could fail, and a `String` never does.
    prometheus_text::encode(&mut out, &registry).expect("encoding into a String cannot fail");
    out
}

/// One round's figures, encoded when the registry is.
#[derive(Debug)]
struct Page {
    snapshot: Snapshot,
    counters: MonitorCounters,
}

/// A sample's value, encoded as its type says: whole numbers exactly,
/// ratios and seconds as floats, a memory cap as its bytes or `+Inf` when
/// there is none.
#[derive(Debug, Clone, Copy)]
enum Value {
    Whole(u64),
    Real(f64),
    Cap(Option<u64>),
}

impl EncodeGaugeValue for Value {
    fn encode(&self, encoder: &mut GaugeValueEncoder) -> fmt::Result {
        match *self {
            Value::Whole(n) | Value::Cap(Some(n)) => EncodeGaugeValue::encode(&n, encoder),
            Value::Real(x) => EncodeGaugeValue::encode(&x, encoder),
            Value::Cap(None) => EncodeGaugeValue::encode(&f64::INFINITY, encoder),
        }
    }
}

impl EncodeCounterValue for Value {
    fn encode(&self, encoder: &mut CounterValueEncoder) -> fmt::Result {
        match *self {
            Value::Whole(n) | Value::Cap(Some(n)) => EncodeCounterValue::encode(&n, encoder),
            Value::Real(x) => EncodeCounterValue::encode(&x, encoder),
            Value::Cap(None) => EncodeCounterValue::encode(&f64::INFINITY, encoder),
        }
    }
}

/// Labels of one series, in the order they are written.
type Labels = Vec<(&'static str, String)>;

/// Which series a family has, and where each one's value comes from.
enum Series {
    /// One per tenant and device, labelled tenant, device and uuid; none
    /// where the value is `None`.
    TenantDevice(fn(&Page, &TenantView, &TenantDeviceView) -> Option<Value>),
    /// One per tenant, labelled tenant.
    Tenant(fn(&TenantView) -> Value),
    /// One per device, labelled device and uuid; none where the value is `None`.
    Device(fn(&Page, &DeviceView) -> Option<Value>),
    /// One per device that NVML read the health of, labelled as
    /// dcgm-exporter labels its series (`gpu`, `UUID`, `device` as
    /// `nvidia<index>`, `modelName`), so that what is written for one reads
    /// the other; none where the device lacks the reading.
    Health(fn(&DeviceHealth) -> Option<Value>),
    /// One series without labels.
    One(fn(&Page) -> Value),
    /// The series the function lists, with their labels.
    Listed(fn(&Page) -> Vec<(Labels, Value)>),
    /// The queue's wait histogram, one per priority.
    QueueWaits,
}

/// One family of the page: its name as scrapers see it, HELP, TYPE, series.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    series: Series,
}

/// The page's families, in the order they are written.
const FAMILIES: &[Family] = &[
    Family {
        name: "gpuslice_tenant_memory_used_bytes",
        help: "Device memory reserved by the tenant's processes, as the ledger counts it.",
        kind: MetricType::Gauge,
        series: Series::TenantDevice(|_, _, d| Some(Value::Whole(d.memory_used_bytes))),
    },
    Family {
        name: "gpuslice_tenant_memory_limit_bytes",
        help: "The tenant's memory cap on the device (+Inf when uncapped).",
        kind: MetricType::Gauge,
        series: Series::TenantDevice(|_, _, d| Some(Value::Cap(d.memory_limit_bytes))),
    },
    Family {
        name: "gpuslice_tenant_processes",
        help: "Live processes of the tenant holding memory on the device.",
        kind: MetricType::Gauge,
        series: Series::TenantDevice(|_, _, d| Some(Value::Whole(d.processes))),
    },
    Family {
        name: "gpuslice_tenant_alloc_denied_total",
        help: "Allocations refused because they would pass the tenant's cap.",
        kind: MetricType::Counter,
        series: Series::TenantDevice(|_, _, d| Some(Value::Whole(d.alloc_denied_total))),
    },
    Family {
        name: "gpuslice_tenant_memory_pressure_ratio",
        help: "Memory the tenant holds on the device over its cap, 0 to 1 (1: nothing more fits); no series where the tenant is uncapped.",
        kind: MetricType::Gauge,
        series: Series::TenantDevice(|_, _, d| memory_pressure(d.memory_used_bytes, d.memory_limit_bytes).map(Value::Real)),
    },
    Family {
        name: "gpuslice_tenant_unattributed_bytes",
        help: "Memory the tenant's usage counts that no process holds (a process killed while reserving).",
        kind: MetricType::Gauge,
        series: Series::TenantDevice(|page, t, d| {
            Some(Value::Whole(page.counters.unattributed_bytes.get(&(t.name.clone(), d.uuid.clone())).copied().unwrap_or(0)))
        }),
    },
    Family {
        name: "gpuslice_tenant_driver_memory_used_bytes",
        help: "Device memory the driver (NVML) reports for the tenant's processes.",
        kind: MetricType::Gauge,
        series: Series::TenantDevice(|_, _, d| d.driver_memory_used_bytes.map(Value::Whole)),
    },
    Family {
        name: "gpuslice_tenant_compute_target_ratio",
        help: "The tenant's compute target on the device as a ratio of device time: its share plus the spare time due to it by priority, within its limit; no series for a tenant with no compute setting.",
        kind: MetricType::Gauge,
        series: Series::TenantDevice(|_, _, d| d.compute_target_ratio.map(Value::Real)),
    },
    Family {
        name: "gpuslice_tenant_compute_used_ratio",
        help: "Device time charged to the tenant's limit over the monitor's last round, as a ratio of wall time.",
        kind: MetricType::Gauge,
        series: Series::TenantDevice(|_, _, d| d.compute_used_ratio.map(Value::Real)),
    },
    Family {
        name: "gpuslice_tenant_compute_unarbitrated_processes",
        help: "Processes of a tenant with a compute setting that the monitor does not arbitrate on the device (they could not reach it; they retry every second).",
        kind: MetricType::Gauge,
        series: Series::TenantDevice(|_, _, d| d.compute_unarbitrated_processes.map(|n| Value::Real(n as f64))),
    },
    Family {
        name: "gpuslice_tenant_throttled_seconds_total",
        help: "Time the tenant's launches were held back: waiting for its turn on a device the monitor arbitrates, or for its compute limit's bucket without a monitor.",
        kind: MetricType::Counter,
        series: Series::TenantDevice(|_, _, d| Some(Value::Real(d.throttled_ns_total as f64 / 1e9))),
    },
    Family {
        name: "gpuslice_tenant_kernel_launches_total",
        help: "Kernel launches of the tenant on the device while the monitor arbitrated it (counted at each checkpoint) or a compute limit governed it.",
        kind: MetricType::Counter,
        series: Series::TenantDevice(|_, _, d| Some(Value::Whole(d.kernel_launches_total))),
    },
    Family {
        name: "gpuslice_team_members",
        help: "Tenants of the team (by the monitor's configuration) with a ledger entry for the device.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| team_series(page, |f| Some(Value::Whole(f.members)))),
    },
    Family {
        name: "gpuslice_team_memory_quota_bytes",
        help: "The team's memory quota on the device, from the monitor's configuration; no series for a team without one.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| team_series(page, |f| f.memory_quota_bytes.map(Value::Whole))),
    },
    Family {
        name: "gpuslice_team_memory_used_bytes",
        help: "Device memory the team's tenants hold together, by their ledgers.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| team_series(page, |f| Some(Value::Whole(f.memory_used_bytes)))),
    },
    Family {
        name: "gpuslice_team_memory_over_quota_bytes",
        help: "How far the memory the team's tenants hold passes its quota (the larger of their ledgers and NVML); no series for a team without one.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| team_series(page, |f| f.over_quota_bytes().map(Value::Whole))),
    },
    Family {
        name: "gpuslice_team_compute_share_ratio",
        help: "The team's guaranteed share of the device's time while a member has work; no series for a team without one.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| team_series(page, |f| f.compute_share_ratio.map(Value::Real))),
    },
    Family {
        name: "gpuslice_team_compute_limit_ratio",
        help: "The most of the device's time the team's tenants take together; no series for a team without a limit.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| team_series(page, |f| f.compute_limit_ratio.map(Value::Real))),
    },
    Family {
        name: "gpuslice_team_compute_target_ratio",
        help: "What the device's turns give the team's active tenants together now, as a ratio of device time.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| team_series(page, |f| Some(Value::Real(f.compute_target_ratio)))),
    },
    Family {
        name: "gpuslice_team_compute_used_ratio",
        help: "Device time charged to the team's tenants together over the monitor's last round, as a ratio of wall time.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| team_series(page, |f| Some(Value::Real(f.compute_used_ratio)))),
    },
    Family {
        name: "gpuslice_reclaimed_processes_total",
        help: "Dead processes whose memory was reclaimed, by tenant.",
        kind: MetricType::Counter,
        series: Series::Tenant(|t| Value::Whole(t.reclaimed_processes_total)),
    },
    Family {
        name: "gpuslice_device_memory_used_bytes",
        help: "Device memory in use by all processes, as the driver (NVML) reports it.",
        kind: MetricType::Gauge,
        series: Series::Device(|_, d| d.memory_used_bytes.map(Value::Whole)),
    },
    Family {
        name: "gpuslice_device_memory_total_bytes",
        help: "Physical device memory.",
        kind: MetricType::Gauge,
        series: Series::Device(|_, d| Some(Value::Whole(d.memory_total_bytes))),
    },
    Family {
        name: "gpuslice_device_arbitrated",
        help: "1 while the monitor arbitrates the device's time (some tenant there has a compute setting), 0 while every process there launches freely.",
        kind: MetricType::Gauge,
        series: Series::Device(|_, d| d.arbitrated.map(|a| Value::Real(if a { 1.0 } else { 0.0 }))),
    },
    Family {
        name: "gpuslice_device_utilization_ratio",
        help: "Share of time the device was busy over the driver's last sample period.",
        kind: MetricType::Gauge,
        series: Series::Device(|_, d| d.utilization_ratio.map(Value::Real)),
    },
    Family {
        name: "DCGM_FI_DEV_GPU_TEMP",
        help: "GPU temperature (in C), as dcgm-exporter's field of that name.",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.temperature_c.map(|c| Value::Whole(c.into()))),
    },
    Family {
        name: "DCGM_FI_DEV_SLOWDOWN_TEMP",
        help: "Temperature at which the GPU slows down (in C), as dcgm-exporter's field of that name.",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.slowdown_temperature_c.map(|c| Value::Whole(c.into()))),
    },
    Family {
        name: "DCGM_FI_DEV_SHUTDOWN_TEMP",
        help: "Temperature at which the GPU shuts down (in C), as dcgm-exporter's field of that name.",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.shutdown_temperature_c.map(|c| Value::Whole(c.into()))),
    },
    Family {
        name: "DCGM_FI_DEV_POWER_USAGE",
        help: "Power draw (in W), as dcgm-exporter's field of that name.",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.power_usage_mw.map(|mw| Value::Real(f64::from(mw) / 1000.0))),
    },
    Family {
        name: "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        help: "Power management limit (in W), as dcgm-exporter's field of that name.",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.power_limit_mw.map(|mw| Value::Real(f64::from(mw) / 1000.0))),
    },
    Family {
        name: "DCGM_FI_DEV_SM_CLOCK",
        help: "SM clock frequency (in MHz), as dcgm-exporter's field of that name.",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.sm_clock_mhz.map(|m| Value::Whole(m.into()))),
    },
    Family {
        name: "DCGM_FI_DEV_MEM_CLOCK",
        help: "Memory clock frequency (in MHz), as dcgm-exporter's field of that name.",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.memory_clock_mhz.map(|m| Value::Whole(m.into()))),
    },
    Family {
        name: "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        help: "Why the clocks are held back, NVML's bitmask (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before DCGM 3.3); gpuslice_device_clocks_event_reason_active names each bit.",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.clocks_event_reasons.map(Value::Whole)),
    },
    Family {
        name: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        help: "Single-bit (corrected) ECC errors since the driver loaded, as dcgm-exporter's field of that name (a counter).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.ecc_corrected_volatile_total.map(Value::Whole)),
    },
    Family {
        name: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        help: "Double-bit (uncorrected) ECC errors since the driver loaded, as dcgm-exporter's field of that name (a counter).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.ecc_uncorrected_volatile_total.map(Value::Whole)),
    },
    Family {
        name: "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        help: "Single-bit (corrected) ECC errors over the device's life, as dcgm-exporter's field of that name (a counter).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.ecc_corrected_aggregate_total.map(Value::Whole)),
    },
    Family {
        name: "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        help: "Double-bit (uncorrected) ECC errors over the device's life, as dcgm-exporter's field of that name (a counter).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.ecc_uncorrected_aggregate_total.map(Value::Whole)),
    },
    Family {
        name: "DCGM_FI_DEV_RETIRED_SBE",
        help: "Pages retired for single-bit ECC errors, as dcgm-exporter's field of that name (devices before Ampere).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.retired_pages_sbe.map(Value::Whole)),
    },
    Family {
        name: "DCGM_FI_DEV_RETIRED_DBE",
        help: "Pages retired for double-bit ECC errors, as dcgm-exporter's field of that name (devices before Ampere).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.retired_pages_dbe.map(Value::Whole)),
    },
    Family {
        name: "DCGM_FI_DEV_RETIRED_PENDING",
        help: "1 while a page retirement waits for a reset, as dcgm-exporter's field of that name (devices before Ampere).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.retired_pages_pending.map(|p| Value::Whole(u64::from(p)))),
    },
    Family {
        name: "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        help: "Rows remapped for correctable errors, as dcgm-exporter's field of that name (Ampere and later).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.remapped_rows_correctable.map(Value::Whole)),
    },
    Family {
        name: "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        help: "Rows remapped for uncorrectable errors, as dcgm-exporter's field of that name (Ampere and later).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.remapped_rows_uncorrectable.map(Value::Whole)),
    },
    Family {
        name: "DCGM_FI_DEV_ROW_REMAP_PENDING",
        help: "1 while a row remapping waits for a reset, as DCGM's field of that name (Ampere and later).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.row_remap_pending.map(|p| Value::Whole(u64::from(p)))),
    },
    Family {
        name: "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        help: "1 when a row remapping failed, as dcgm-exporter's field of that name (Ampere and later).",
        kind: MetricType::Gauge,
        series: Series::Health(|h| h.row_remap_failure.map(|p| Value::Whole(u64::from(p)))),
    },
    Family {
        name: "gpuslice_device_clocks_event_reason_active",
        help: "1 while the reason (NVML's clock event reasons, by name) holds the device's clocks back, else 0; no series where the device does not report its reasons.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| {
            let mut series = Vec::new();
            for device in &page.snapshot.devices {
                let Some(mask) = device.health.as_ref().and_then(|h| h.clocks_event_reasons) else { continue };
                for (bit, reason) in CLOCKS_EVENT_REASONS {
                    let labels = vec![("device", device.index.to_string()), ("uuid", device.uuid.clone()), ("reason", reason.to_string())];
                    series.push((labels, Value::Whole(u64::from(mask & bit != 0))));
                }
            }
            series
        }),
    },
    Family {
        name: "gpuslice_untracked_process_memory_bytes",
        help: "Device memory of processes that no tenant ledger knows (they bypassed the shim).",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| {
            let processes = &page.snapshot.untracked_processes;
            let labels = |p: &UntrackedView| vec![("device", p.device.to_string()), ("uuid", p.uuid.clone()), ("pid", p.pid.to_string())];
            processes.iter().map(|p| (labels(p), Value::Whole(p.memory_used_bytes))).collect()
        }),
    },
    Family {
        name: "gpuslice_tenant_over_cap_bytes",
        help: "Driver-reported memory of a tenant past its cap, when that passes its context overhead.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| {
            let labels = |o: &OverCap| vec![("tenant", o.tenant.clone()), ("device", o.device.to_string()), ("uuid", o.uuid.clone())];
            page.counters.over_cap.iter().map(|o| (labels(o), Value::Whole(o.over_bytes))).collect()
        }),
    },
    Family {
        name: "gpuslice_violations_total",
        help: "Violations found, by kind.",
        kind: MetricType::Counter,
        series: Series::Listed(|page| by_key("kind", &["untracked_process", "over_cap", "outside_turns", "ungoverned_tenant"], &page.counters.violations_total)),
    },
    Family {
        name: "gpuslice_violation_kills_total",
        help: "Processes killed because of a violation.",
        kind: MetricType::Counter,
        series: Series::One(|page| Value::Whole(page.counters.violation_kills_total)),
    },
    Family {
        name: "gpuslice_config_reloads_total",
        help: "Configuration reloads, by result.",
        kind: MetricType::Counter,
        series: Series::Listed(|page| by_key("result", &["ok", "error"], &page.counters.config_reloads_total)),
    },
    Family {
        name: "gpuslice_config_last_reload_successful",
        help: "0 when the last reload of the configuration file was refused (the previous configuration stays in force), else 1.",
        kind: MetricType::Gauge,
        series: Series::One(|page| Value::Whole(u64::from(!page.counters.config_reload_refused))),
    },
    Family {
        name: "gpuslice_device_info",
        help: "1 for every GPU and MIG device NVML lists, with its name, MIG profile and parent GPU (empty for a GPU); no series without NVML.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| {
            let Page { snapshot, counters } = page;
            let devices = snapshot.devices.iter().filter(|_| snapshot.nvml);
            let named = devices.filter_map(|d| Some((d, counters.device_names.get(&d.uuid)?)));
            named
                .map(|(d, name)| {
                    let labels = vec![
                        ("device", d.index.to_string()),
                        ("uuid", d.uuid.clone()),
                        ("name", name.clone()),
                        ("mig_profile", d.mig_profile.clone().unwrap_or_default()),
                        ("parent_uuid", d.parent_uuid.clone().unwrap_or_default()),
                    ];
                    (labels, Value::Whole(1))
                })
                .collect()
        }),
    },
    Family {
        name: "gpuslice_device_memory_committed_bytes",
        help: "Memory committed on the device: caps of running queue jobs (a job without a cap commits the whole device) and of capped tenants with a live process on the devices where they hold memory, as `gpuslice devices` counts it.",
        kind: MetricType::Gauge,
        series: Series::Device(|page, d| Some(Value::Whole(page.counters.committed_bytes.get(&d.uuid).copied().unwrap_or(0)))),
    },
    Family {
        name: "gpuslice_queue_jobs",
        help: "Live jobs in the host's admission queue, by state.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| {
            let queue = &page.counters.queue;
            vec![(vec![("state", "waiting".into())], Value::Whole(queue.waiting)), (vec![("state", "running".into())], Value::Whole(queue.running))]
        }),
    },
    Family {
        name: "gpuslice_queue_wait_seconds",
        help: "How long admitted queue jobs waited, from submission to admission, by priority (jobs seen running by the monitor since it started).",
        kind: MetricType::Histogram,
        series: Series::QueueWaits,
    },
    Family {
        name: "gpuslice_monitor_rounds_total",
        help: "Monitor rounds completed, this page's included.",
        kind: MetricType::Counter,
        series: Series::One(|page| Value::Whole(page.counters.rounds_total)),
    },
    Family {
        name: "gpuslice_ledgers_watched",
        help: "Tenant ledgers the monitor watches.",
        kind: MetricType::Gauge,
        series: Series::One(|page| Value::Whole(page.counters.ledgers_watched)),
    },
    Family {
        name: "gpuslice_ledger_files_refused_total",
        help: "Ledger files not watched because of a bound (--max-ledgers-per-uid, --max-ledgers), each counted once, by bound.",
        kind: MetricType::Counter,
        series: Series::Listed(|page| by_key("reason", &["per_uid_bound", "total_bound"], &page.counters.ledger_files_refused_total)),
    },
    Family {
        name: "gpuslice_ledger_files_over_bound",
        help: "Ledger files not watched now because of a bound, by bound.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| by_key("reason", &["per_uid_bound", "total_bound"], &page.counters.ledger_files_over_bound)),
    },
    Family {
        name: "gpuslice_tenant_allocation_info",
        help: "1 for every tenant admitted through `gpuslice tenant` (a Slurm job, a Kubernetes claim), with where it came from, to join with the tenant's series on `tenant`.",
        kind: MetricType::Gauge,
        series: Series::Listed(|page| {
            page.counters
                .allocations
                .iter()
                .map(|a| {
                    let mut labels = vec![("tenant", a.tenant.clone()), ("state", a.state.to_string())];
                    labels.extend(ALLOCATION_LABELS.iter().map(|k| (*k, a.labels.get(*k).cloned().unwrap_or_default())));
                    (labels, Value::Whole(1))
                })
                .collect()
        }),
    },
    Family {
        name: "gpuslice_build_info",
        help: "1, labelled with the monitor's version and the ledger layout version it reads and writes (a host's shims must share that layout).",
        kind: MetricType::Gauge,
        series: Series::Listed(|_| {
            let labels =
                vec![("version", env!("CARGO_PKG_VERSION").to_string()), ("ledger_layout_version", ledger::layout::LAYOUT_VERSION.to_string())];
            vec![(labels, Value::Whole(1))]
        }),
    },
    Family {
        name: "gpuslice_nvml_available",
        help: "1 when NVML answers, 0 in ledger-only mode.",
        kind: MetricType::Gauge,
        series: Series::One(|page| Value::Whole(u64::from(page.snapshot.nvml))),
    },
];

/// Held over cap, clamped to 0..=1: a ledger is the tenant's own memory, so
/// a count past the cap (or a cap of 0) reads as full, never above it. None
/// for an uncapped tenant, whose pressure is the device's.
fn memory_pressure(used_bytes: u64, limit_bytes: Option<u64>) -> Option<f64> {
    let limit = limit_bytes?;
    if limit == 0 || used_bytes >= limit {
        return Some(1.0);
    }
    Some(used_bytes as f64 / limit as f64)
}

/// One series per key of `keys`, labelled `label`, with the count `counts`
/// holds for it (0 when none).
fn by_key(label: &'static str, keys: &[&'static str], counts: &BTreeMap<&'static str, u64>) -> Vec<(Labels, Value)> {
    keys.iter().map(|key| (vec![(label, key.to_string())], Value::Whole(counts.get(key).copied().unwrap_or(0)))).collect()
}

/// Writes one sample of a gauge or counter family.
fn sample(family: &mut MetricEncoder, kind: MetricType, labels: &[(&str, &str)], value: Value) -> fmt::Result {
    let encoder = family.encode_family(&labels)?;
    match kind {
        MetricType::Counter => ConstCounter::new(value).encode(encoder),
        _ => ConstGauge::new(value).encode(encoder),
    }
}

/// One series per team and device, labelled team, device and uuid; none
/// where `value_of` says `None`.
fn team_series(page: &Page, value_of: fn(&crate::teams::TeamDeviceFigures) -> Option<Value>) -> Vec<(Labels, Value)> {
    page.counters
        .teams
        .iter()
        .filter_map(|f| {
            let labels = vec![("team", f.team.clone()), ("device", f.index.to_string()), ("uuid", f.uuid.clone())];
            value_of(f).map(|v| (labels, v))
        })
        .collect()
}

impl Page {
    /// Writes `family`'s HELP and TYPE lines, then its series.
    fn encode_family(&self, encoder: &mut DescriptorEncoder, family: &Family) -> fmt::Result {
        // The encoder adds the `_total` of a counter's name itself, so it is
        // taken off the name as scrapers see it.
        let name = match family.kind {
            MetricType::Counter => family.name.strip_suffix("_total").unwrap_or(family.name),
            _ => family.name,
        };
        let mut out = encoder.encode_descriptor(name, family.help, None, family.kind)?;
        let kind = family.kind;
        match family.series {
            Series::TenantDevice(value_of) => {
                for tenant in &self.snapshot.tenants {
                    for device in &tenant.devices {
                        if let Some(value) = value_of(self, tenant, device) {
                            let index = device.index.to_string();
                            sample(&mut out, kind, &[("tenant", &tenant.name), ("device", &index), ("uuid", &device.uuid)], value)?;
                        }
                    }
                }
            }
            Series::Tenant(value_of) => {
                for tenant in &self.snapshot.tenants {
                    sample(&mut out, kind, &[("tenant", &tenant.name)], value_of(tenant))?;
                }
            }
            Series::Device(value_of) => {
                for device in &self.snapshot.devices {
                    if let Some(value) = value_of(self, device) {
                        let index = device.index.to_string();
                        sample(&mut out, kind, &[("device", &index), ("uuid", &device.uuid)], value)?;
                    }
                }
            }
            Series::Health(value_of) => {
                for device in &self.snapshot.devices {
                    let Some(value) = device.health.as_ref().and_then(value_of) else { continue };
                    let gpu = device.index.to_string();
                    let node = format!("nvidia{}", device.index);
                    let model = self.counters.device_names.get(&device.uuid).cloned().unwrap_or_default();
                    sample(&mut out, kind, &[("gpu", &gpu), ("UUID", &device.uuid), ("device", &node), ("modelName", &model)], value)?;
                }
            }
            Series::One(value_of) => sample(&mut out, kind, &[], value_of(self))?,
            Series::Listed(list) => {
                for (labels, value) in list(self) {
                    let labels: Vec<(&str, &str)> = labels.iter().map(|(name, value)| (*name, value.as_str())).collect();
                    sample(&mut out, kind, &labels, value)?;
                }
            }
            Series::QueueWaits => {
                for (priority, h) in &self.counters.queue.wait_seconds {
                    let priority = priority.to_string();
                    let labels = [("priority", priority.as_str())];
                    let buckets: Vec<(f64, u64)> =
                        WAIT_BUCKETS_SECONDS.iter().copied().chain([f64::INFINITY]).zip(h.per_bucket.iter().copied()).collect();
                    out.encode_family(&labels)?.encode_histogram::<Vec<(String, String)>>(h.sum_seconds, h.count, &buckets, None)?;
                }
            }
        }
        Ok(())
    }
}

impl Collector for Page {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        FAMILIES.iter().try_for_each(|family| self.encode_family(&mut encoder, family))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{DeviceView, TenantDeviceView, TenantView, UntrackedView};

    fn tenant_device(index: u32, uuid: &str, used: u64, limit: Option<u64>, driver: Option<u64>) -> TenantDeviceView {
        TenantDeviceView {
            index,
            uuid: uuid.into(),
            memory_used_bytes: used,
            memory_limit_bytes: limit,
            policy_source: "config",
            alloc_denied_total: 3,
            context_overhead_bytes: 0,
            compute_limit_ratio: (index == 0).then_some(0.3),
            compute_used_ratio: (index == 0).then_some(0.25),
            compute_share_ratio: None,
            compute_priority: 0,
            compute_target_ratio: (index == 0).then_some(0.3),
            compute_unarbitrated_processes: None,
            compute_member: None,
            kernel_launches_total: 40,
            compute_busy_ns_total: 1_500_000_000,
            throttled_ns_total: 2_500_000_000,
            processes: 2,
            driver_memory_used_bytes: driver,
            sm_utilization_ratio: None,
            cpu_cores: None,
            activity: None,
        }
    }

    fn empty() -> Snapshot {
        Snapshot { nvml: false, devices: vec![], tenants: vec![], untracked_processes: vec![] }
    }

    /// Every family with at least one series, one tenant whose name needs
    /// escaping, a value past 2^53 and an uncapped device.
    fn busy_host() -> (Snapshot, MonitorCounters) {
        let snapshot = Snapshot {
            nvml: true,
            devices: vec![
                DeviceView {
                    index: 0,
                    uuid: "GPU-0".into(),
                    memory_total_bytes: 80 << 30,
                    memory_used_bytes: Some(5 << 30),
                    utilization_ratio: Some(0.25),
                    parent_uuid: None,
                    mig_profile: None,
                    arbitrated: None,
                    health: Some(crate::nvml::DeviceHealth {
                        temperature_c: Some(41),
                        slowdown_temperature_c: Some(89),
                        shutdown_temperature_c: Some(92),
                        power_usage_mw: Some(123_456),
                        power_limit_mw: Some(700_000),
                        sm_clock_mhz: Some(1980),
                        memory_clock_mhz: Some(2619),
                        clocks_event_reasons: Some(0x44),
                        clocks_event_reason_names: Some(crate::nvml::reason_names(0x44)),
                        ecc_corrected_volatile_total: Some(3),
                        ecc_uncorrected_volatile_total: Some(0),
                        ecc_corrected_aggregate_total: Some(5),
                        ecc_uncorrected_aggregate_total: Some(1),
                        remapped_rows_correctable: Some(2),
                        remapped_rows_uncorrectable: Some(0),
                        row_remap_pending: Some(false),
                        row_remap_failure: Some(true),
                        ..Default::default()
                    }),
                },
                DeviceView {
                    index: 1,
                    uuid: "GPU-1".into(),
                    memory_total_bytes: 80 << 30,
                    memory_used_bytes: None,
                    utilization_ratio: Some(1.0),
                    parent_uuid: None,
                    mig_profile: None,
                    arbitrated: None,
                    // A device that reports its temperature and nothing else.
                    health: Some(crate::nvml::DeviceHealth { temperature_c: Some(30), ..Default::default() }),
                },
            ],
            tenants: vec![
                TenantView {
                    name: "team-a".into(),
                    devices: vec![
                        tenant_device(0, "GPU-0", 1 << 30, Some(4 << 30), Some(1 << 31)),
                        tenant_device(1, "GPU-1", u64::MAX, None, None),
                    ],
                    processes: vec![],
                    reclaimed_processes_total: 7,
                },
                TenantView {
                    name: "we\\ird\"te\nnant".into(),
                    devices: vec![tenant_device(0, "GPU-0", 0, None, Some(0))],
                    processes: vec![],
                    reclaimed_processes_total: 0,
                },
            ],
            untracked_processes: vec![UntrackedView { device: 0, uuid: "GPU-0".into(), pid: 4242, memory_used_bytes: 123456789 }],
        };
        let mut counters = MonitorCounters::default();
        counters.violations_total.insert("over_cap", 2);
        counters.violation_kills_total = 1;
        counters.config_reloads_total.insert("error", 5);
        counters.config_reload_refused = true;
        counters.over_cap.push(OverCap { tenant: "team-a".into(), device: 0, uuid: "GPU-0".into(), over_bytes: 99 });
        counters.unattributed_bytes.insert(("team-a".into(), "GPU-1".into()), 11);
        counters.rounds_total = 12345;
        counters.teams.push(crate::teams::TeamDeviceFigures {
            team: "research".into(),
            index: 0,
            uuid: "GPU-0".into(),
            members: 2,
            memory_quota_bytes: Some(4 << 30),
            memory_used_bytes: 5 << 30,
            driver_memory_used_bytes: Some(3 << 30),
            compute_share_ratio: Some(0.5),
            compute_limit_ratio: None,
            compute_target_ratio: 0.75,
            compute_used_ratio: 0.5,
        });
        counters.device_names.insert("GPU-0".into(), "NVIDIA H200".into());
        counters.device_names.insert("GPU-1".into(), "NVIDIA \"H200\"".into());
        counters.committed_bytes.insert("GPU-0".into(), 4 << 30);
        counters.queue.waiting = 3;
        counters.queue.running = 1;
        counters.queue.wait_seconds.entry(-2).or_default().observe(0.04);
        counters.queue.wait_seconds.entry(-2).or_default().observe(7200.0);
        let labels = [("origin", "kubernetes"), ("namespace", "ml"), ("pod", "train-0"), ("claim", "gpu")];
        counters.allocations.push(AllocationInfo {
            tenant: "ml.gpu-1f3a".into(),
            state: "admitted",
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        });
        (snapshot, counters)
    }

    /// The whole page, line for line: names, types, HELP texts, label names
    /// and order, and the order of the families are what dashboards, alerts
    /// and the deployment guide use.
    #[test]
    fn page_is_the_documented_exposition() {
        let (snapshot, counters) = busy_host();
        let text = render(&snapshot, &counters);
        let expected = r#"# HELP gpuslice_tenant_memory_used_bytes Device memory reserved by the tenant's processes, as the ledger counts it.
# TYPE gpuslice_tenant_memory_used_bytes gauge
gpuslice_tenant_memory_used_bytes{tenant="team-a",device="0",uuid="GPU-0"} 1073741824
gpuslice_tenant_memory_used_bytes{tenant="team-a",device="1",uuid="GPU-1"} 18446744073709551615
gpuslice_tenant_memory_used_bytes{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 0
# HELP gpuslice_tenant_memory_limit_bytes The tenant's memory cap on the device (+Inf when uncapped).
# TYPE gpuslice_tenant_memory_limit_bytes gauge
gpuslice_tenant_memory_limit_bytes{tenant="team-a",device="0",uuid="GPU-0"} 4294967296
gpuslice_tenant_memory_limit_bytes{tenant="team-a",device="1",uuid="GPU-1"} +Inf
gpuslice_tenant_memory_limit_bytes{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} +Inf
# HELP gpuslice_tenant_processes Live processes of the tenant holding memory on the device.
# TYPE gpuslice_tenant_processes gauge
gpuslice_tenant_processes{tenant="team-a",device="0",uuid="GPU-0"} 2
gpuslice_tenant_processes{tenant="team-a",device="1",uuid="GPU-1"} 2
gpuslice_tenant_processes{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 2
# HELP gpuslice_tenant_alloc_denied_total Allocations refused because they would pass the tenant's cap.
# TYPE gpuslice_tenant_alloc_denied_total counter
gpuslice_tenant_alloc_denied_total{tenant="team-a",device="0",uuid="GPU-0"} 3
gpuslice_tenant_alloc_denied_total{tenant="team-a",device="1",uuid="GPU-1"} 3
gpuslice_tenant_alloc_denied_total{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 3
# HELP gpuslice_tenant_memory_pressure_ratio Memory the tenant holds on the device over its cap, 0 to 1 (1: nothing more fits); no series where the tenant is uncapped.
# TYPE gpuslice_tenant_memory_pressure_ratio gauge
gpuslice_tenant_memory_pressure_ratio{tenant="team-a",device="0",uuid="GPU-0"} 0.25
# HELP gpuslice_tenant_unattributed_bytes Memory the tenant's usage counts that no process holds (a process killed while reserving).
# TYPE gpuslice_tenant_unattributed_bytes gauge
gpuslice_tenant_unattributed_bytes{tenant="team-a",device="0",uuid="GPU-0"} 0
gpuslice_tenant_unattributed_bytes{tenant="team-a",device="1",uuid="GPU-1"} 11
gpuslice_tenant_unattributed_bytes{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 0
# HELP gpuslice_tenant_driver_memory_used_bytes Device memory the driver (NVML) reports for the tenant's processes.
# TYPE gpuslice_tenant_driver_memory_used_bytes gauge
gpuslice_tenant_driver_memory_used_bytes{tenant="team-a",device="0",uuid="GPU-0"} 2147483648
gpuslice_tenant_driver_memory_used_bytes{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 0
# HELP gpuslice_tenant_compute_target_ratio The tenant's compute target on the device as a ratio of device time: its share plus the spare time due to it by priority, within its limit; no series for a tenant with no compute setting.
# TYPE gpuslice_tenant_compute_target_ratio gauge
gpuslice_tenant_compute_target_ratio{tenant="team-a",device="0",uuid="GPU-0"} 0.3
gpuslice_tenant_compute_target_ratio{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 0.3
# HELP gpuslice_tenant_compute_used_ratio Device time charged to the tenant's limit over the monitor's last round, as a ratio of wall time.
# TYPE gpuslice_tenant_compute_used_ratio gauge
gpuslice_tenant_compute_used_ratio{tenant="team-a",device="0",uuid="GPU-0"} 0.25
gpuslice_tenant_compute_used_ratio{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 0.25
# HELP gpuslice_tenant_compute_unarbitrated_processes Processes of a tenant with a compute setting that the monitor does not arbitrate on the device (they could not reach it; they retry every second).
# TYPE gpuslice_tenant_compute_unarbitrated_processes gauge
# HELP gpuslice_tenant_throttled_seconds_total Time the tenant's launches were held back: waiting for its turn on a device the monitor arbitrates, or for its compute limit's bucket without a monitor.
# TYPE gpuslice_tenant_throttled_seconds_total counter
gpuslice_tenant_throttled_seconds_total{tenant="team-a",device="0",uuid="GPU-0"} 2.5
gpuslice_tenant_throttled_seconds_total{tenant="team-a",device="1",uuid="GPU-1"} 2.5
gpuslice_tenant_throttled_seconds_total{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 2.5
# HELP gpuslice_tenant_kernel_launches_total Kernel launches of the tenant on the device while the monitor arbitrated it (counted at each checkpoint) or a compute limit governed it.
# TYPE gpuslice_tenant_kernel_launches_total counter
gpuslice_tenant_kernel_launches_total{tenant="team-a",device="0",uuid="GPU-0"} 40
gpuslice_tenant_kernel_launches_total{tenant="team-a",device="1",uuid="GPU-1"} 40
gpuslice_tenant_kernel_launches_total{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 40
# HELP gpuslice_team_members Tenants of the team (by the monitor's configuration) with a ledger entry for the device.
# TYPE gpuslice_team_members gauge
gpuslice_team_members{team="research",device="0",uuid="GPU-0"} 2
# HELP gpuslice_team_memory_quota_bytes The team's memory quota on the device, from the monitor's configuration; no series for a team without one.
# TYPE gpuslice_team_memory_quota_bytes gauge
gpuslice_team_memory_quota_bytes{team="research",device="0",uuid="GPU-0"} 4294967296
# HELP gpuslice_team_memory_used_bytes Device memory the team's tenants hold together, by their ledgers.
# TYPE gpuslice_team_memory_used_bytes gauge
gpuslice_team_memory_used_bytes{team="research",device="0",uuid="GPU-0"} 5368709120
# HELP gpuslice_team_memory_over_quota_bytes How far the memory the team's tenants hold passes its quota (the larger of their ledgers and NVML); no series for a team without one.
# TYPE gpuslice_team_memory_over_quota_bytes gauge
gpuslice_team_memory_over_quota_bytes{team="research",device="0",uuid="GPU-0"} 1073741824
# HELP gpuslice_team_compute_share_ratio The team's guaranteed share of the device's time while a member has work; no series for a team without one.
# TYPE gpuslice_team_compute_share_ratio gauge
gpuslice_team_compute_share_ratio{team="research",device="0",uuid="GPU-0"} 0.5
# HELP gpuslice_team_compute_limit_ratio The most of the device's time the team's tenants take together; no series for a team without a limit.
# TYPE gpuslice_team_compute_limit_ratio gauge
# HELP gpuslice_team_compute_target_ratio What the device's turns give the team's active tenants together now, as a ratio of device time.
# TYPE gpuslice_team_compute_target_ratio gauge
gpuslice_team_compute_target_ratio{team="research",device="0",uuid="GPU-0"} 0.75
# HELP gpuslice_team_compute_used_ratio Device time charged to the team's tenants together over the monitor's last round, as a ratio of wall time.
# TYPE gpuslice_team_compute_used_ratio gauge
gpuslice_team_compute_used_ratio{team="research",device="0",uuid="GPU-0"} 0.5
# HELP gpuslice_reclaimed_processes_total Dead processes whose memory was reclaimed, by tenant.
# TYPE gpuslice_reclaimed_processes_total counter
gpuslice_reclaimed_processes_total{tenant="team-a"} 7
gpuslice_reclaimed_processes_total{tenant="we\\ird\"te\nnant"} 0
# HELP gpuslice_device_memory_used_bytes Device memory in use by all processes, as the driver (NVML) reports it.
# TYPE gpuslice_device_memory_used_bytes gauge
gpuslice_device_memory_used_bytes{device="0",uuid="GPU-0"} 5368709120
# HELP gpuslice_device_memory_total_bytes Physical device memory.
# TYPE gpuslice_device_memory_total_bytes gauge
gpuslice_device_memory_total_bytes{device="0",uuid="GPU-0"} 85899345920
gpuslice_device_memory_total_bytes{device="1",uuid="GPU-1"} 85899345920
# HELP gpuslice_device_arbitrated 1 while the monitor arbitrates the device's time (some tenant there has a compute setting), 0 while every process there launches freely.
# TYPE gpuslice_device_arbitrated gauge
# HELP gpuslice_device_utilization_ratio Share of time the device was busy over the driver's last sample period.
# TYPE gpuslice_device_utilization_ratio gauge
gpuslice_device_utilization_ratio{device="0",uuid="GPU-0"} 0.25
gpuslice_device_utilization_ratio{device="1",uuid="GPU-1"} 1.0
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C), as dcgm-exporter's field of that name.
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 41
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1",device="nvidia1",modelName="NVIDIA \"H200\""} 30
# HELP DCGM_FI_DEV_SLOWDOWN_TEMP Temperature at which the GPU slows down (in C), as dcgm-exporter's field of that name.
# TYPE DCGM_FI_DEV_SLOWDOWN_TEMP gauge
DCGM_FI_DEV_SLOWDOWN_TEMP{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 89
# HELP DCGM_FI_DEV_SHUTDOWN_TEMP Temperature at which the GPU shuts down (in C), as dcgm-exporter's field of that name.
# TYPE DCGM_FI_DEV_SHUTDOWN_TEMP gauge
DCGM_FI_DEV_SHUTDOWN_TEMP{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 92
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W), as dcgm-exporter's field of that name.
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 123.456
# HELP DCGM_FI_DEV_POWER_MGMT_LIMIT Power management limit (in W), as dcgm-exporter's field of that name.
# TYPE DCGM_FI_DEV_POWER_MGMT_LIMIT gauge
DCGM_FI_DEV_POWER_MGMT_LIMIT{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 700.0
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz), as dcgm-exporter's field of that name.
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 1980
# HELP DCGM_FI_DEV_MEM_CLOCK Memory clock frequency (in MHz), as dcgm-exporter's field of that name.
# TYPE DCGM_FI_DEV_MEM_CLOCK gauge
DCGM_FI_DEV_MEM_CLOCK{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 2619
# HELP DCGM_FI_DEV_CLOCKS_EVENT_REASONS Why the clocks are held back, NVML's bitmask (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS before DCGM 3.3); gpuslice_device_clocks_event_reason_active names each bit.
# TYPE DCGM_FI_DEV_CLOCKS_EVENT_REASONS gauge
DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 68
# HELP DCGM_FI_DEV_ECC_SBE_VOL_TOTAL Single-bit (corrected) ECC errors since the driver loaded, as dcgm-exporter's field of that name (a counter).
# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL gauge
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 3
# HELP DCGM_FI_DEV_ECC_DBE_VOL_TOTAL Double-bit (uncorrected) ECC errors since the driver loaded, as dcgm-exporter's field of that name (a counter).
# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL gauge
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 0
# HELP DCGM_FI_DEV_ECC_SBE_AGG_TOTAL Single-bit (corrected) ECC errors over the device's life, as dcgm-exporter's field of that name (a counter).
# TYPE DCGM_FI_DEV_ECC_SBE_AGG_TOTAL gauge
DCGM_FI_DEV_ECC_SBE_AGG_TOTAL{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 5
# HELP DCGM_FI_DEV_ECC_DBE_AGG_TOTAL Double-bit (uncorrected) ECC errors over the device's life, as dcgm-exporter's field of that name (a counter).
# TYPE DCGM_FI_DEV_ECC_DBE_AGG_TOTAL gauge
DCGM_FI_DEV_ECC_DBE_AGG_TOTAL{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 1
# HELP DCGM_FI_DEV_RETIRED_SBE Pages retired for single-bit ECC errors, as dcgm-exporter's field of that name (devices before Ampere).
# TYPE DCGM_FI_DEV_RETIRED_SBE gauge
# HELP DCGM_FI_DEV_RETIRED_DBE Pages retired for double-bit ECC errors, as dcgm-exporter's field of that name (devices before Ampere).
# TYPE DCGM_FI_DEV_RETIRED_DBE gauge
# HELP DCGM_FI_DEV_RETIRED_PENDING 1 while a page retirement waits for a reset, as dcgm-exporter's field of that name (devices before Ampere).
# TYPE DCGM_FI_DEV_RETIRED_PENDING gauge
# HELP DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS Rows remapped for correctable errors, as dcgm-exporter's field of that name (Ampere and later).
# TYPE DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS gauge
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 2
# HELP DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS Rows remapped for uncorrectable errors, as dcgm-exporter's field of that name (Ampere and later).
# TYPE DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS gauge
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 0
# HELP DCGM_FI_DEV_ROW_REMAP_PENDING 1 while a row remapping waits for a reset, as DCGM's field of that name (Ampere and later).
# TYPE DCGM_FI_DEV_ROW_REMAP_PENDING gauge
DCGM_FI_DEV_ROW_REMAP_PENDING{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 0
# HELP DCGM_FI_DEV_ROW_REMAP_FAILURE 1 when a row remapping failed, as dcgm-exporter's field of that name (Ampere and later).
# TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge
DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H200"} 1
# HELP gpuslice_device_clocks_event_reason_active 1 while the reason (NVML's clock event reasons, by name) holds the device's clocks back, else 0; no series where the device does not report its reasons.
# TYPE gpuslice_device_clocks_event_reason_active gauge
gpuslice_device_clocks_event_reason_active{device="0",uuid="GPU-0",reason="gpu_idle"} 0
gpuslice_device_clocks_event_reason_active{device="0",uuid="GPU-0",reason="applications_clocks_setting"} 0
gpuslice_device_clocks_event_reason_active{device="0",uuid="GPU-0",reason="sw_power_cap"} 1
gpuslice_device_clocks_event_reason_active{device="0",uuid="GPU-0",reason="hw_slowdown"} 0
gpuslice_device_clocks_event_reason_active{device="0",uuid="GPU-0",reason="sync_boost"} 0
gpuslice_device_clocks_event_reason_active{device="0",uuid="GPU-0",reason="sw_thermal_slowdown"} 0
gpuslice_device_clocks_event_reason_active{device="0",uuid="GPU-0",reason="hw_thermal_slowdown"} 1
gpuslice_device_clocks_event_reason_active{device="0",uuid="GPU-0",reason="hw_power_brake_slowdown"} 0
gpuslice_device_clocks_event_reason_active{device="0",uuid="GPU-0",reason="display_clock_setting"} 0
# HELP gpuslice_untracked_process_memory_bytes Device memory of processes that no tenant ledger knows (they bypassed the shim).
# TYPE gpuslice_untracked_process_memory_bytes gauge
gpuslice_untracked_process_memory_bytes{device="0",uuid="GPU-0",pid="4242"} 123456789
# HELP gpuslice_tenant_over_cap_bytes Driver-reported memory of a tenant past its cap, when that passes its context overhead.
# TYPE gpuslice_tenant_over_cap_bytes gauge
gpuslice_tenant_over_cap_bytes{tenant="team-a",device="0",uuid="GPU-0"} 99
# HELP gpuslice_violations_total Violations found, by kind.
# TYPE gpuslice_violations_total counter
gpuslice_violations_total{kind="untracked_process"} 0
gpuslice_violations_total{kind="over_cap"} 2
gpuslice_violations_total{kind="outside_turns"} 0
gpuslice_violations_total{kind="ungoverned_tenant"} 0
# HELP gpuslice_violation_kills_total Processes killed because of a violation.
# TYPE gpuslice_violation_kills_total counter
gpuslice_violation_kills_total 1
# HELP gpuslice_config_reloads_total Configuration reloads, by result.
# TYPE gpuslice_config_reloads_total counter
gpuslice_config_reloads_total{result="ok"} 0
gpuslice_config_reloads_total{result="error"} 5
# HELP gpuslice_config_last_reload_successful 0 when the last reload of the configuration file was refused (the previous configuration stays in force), else 1.
# TYPE gpuslice_config_last_reload_successful gauge
gpuslice_config_last_reload_successful 0
# HELP gpuslice_device_info 1 for every GPU and MIG device NVML lists, with its name, MIG profile and parent GPU (empty for a GPU); no series without NVML.
# TYPE gpuslice_device_info gauge
gpuslice_device_info{device="0",uuid="GPU-0",name="NVIDIA H200",mig_profile="",parent_uuid=""} 1
gpuslice_device_info{device="1",uuid="GPU-1",name="NVIDIA \"H200\"",mig_profile="",parent_uuid=""} 1
# HELP gpuslice_device_memory_committed_bytes Memory committed on the device: caps of running queue jobs (a job without a cap commits the whole device) and of capped tenants with a live process on the devices where they hold memory, as `gpuslice devices` counts it.
# TYPE gpuslice_device_memory_committed_bytes gauge
gpuslice_device_memory_committed_bytes{device="0",uuid="GPU-0"} 4294967296
gpuslice_device_memory_committed_bytes{device="1",uuid="GPU-1"} 0
# HELP gpuslice_queue_jobs Live jobs in the host's admission queue, by state.
# TYPE gpuslice_queue_jobs gauge
gpuslice_queue_jobs{state="waiting"} 3
gpuslice_queue_jobs{state="running"} 1
# HELP gpuslice_queue_wait_seconds How long admitted queue jobs waited, from submission to admission, by priority (jobs seen running by the monitor since it started).
# TYPE gpuslice_queue_wait_seconds histogram
gpuslice_queue_wait_seconds_bucket{priority="-2",le="0.01"} 0
gpuslice_queue_wait_seconds_bucket{priority="-2",le="0.05"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="0.1"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="0.25"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="0.5"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="1"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="5"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="30"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="60"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="300"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="900"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="3600"} 1
gpuslice_queue_wait_seconds_bucket{priority="-2",le="+Inf"} 2
gpuslice_queue_wait_seconds_sum{priority="-2"} 7200.04
gpuslice_queue_wait_seconds_count{priority="-2"} 2
# HELP gpuslice_monitor_rounds_total Monitor rounds completed, this page's included.
# TYPE gpuslice_monitor_rounds_total counter
gpuslice_monitor_rounds_total 12345
# HELP gpuslice_ledgers_watched Tenant ledgers the monitor watches.
# TYPE gpuslice_ledgers_watched gauge
gpuslice_ledgers_watched 0
# HELP gpuslice_ledger_files_refused_total Ledger files not watched because of a bound (--max-ledgers-per-uid, --max-ledgers), each counted once, by bound.
# TYPE gpuslice_ledger_files_refused_total counter
gpuslice_ledger_files_refused_total{reason="per_uid_bound"} 0
gpuslice_ledger_files_refused_total{reason="total_bound"} 0
# HELP gpuslice_ledger_files_over_bound Ledger files not watched now because of a bound, by bound.
# TYPE gpuslice_ledger_files_over_bound gauge
gpuslice_ledger_files_over_bound{reason="per_uid_bound"} 0
gpuslice_ledger_files_over_bound{reason="total_bound"} 0
# HELP gpuslice_tenant_allocation_info 1 for every tenant admitted through `gpuslice tenant` (a Slurm job, a Kubernetes claim), with where it came from, to join with the tenant's series on `tenant`.
# TYPE gpuslice_tenant_allocation_info gauge
gpuslice_tenant_allocation_info{tenant="ml.gpu-1f3a",state="admitted",origin="kubernetes",namespace="ml",pod="train-0",claim="gpu",job="",user=""} 1
# HELP gpuslice_build_info 1, labelled with the monitor's version and the ledger layout version it reads and writes (a host's shims must share that layout).
# TYPE gpuslice_build_info gauge
gpuslice_build_info{version="VERSION",ledger_layout_version="LAYOUT"} 1
# HELP gpuslice_nvml_available 1 when NVML answers, 0 in ledger-only mode.
# TYPE gpuslice_nvml_available gauge
gpuslice_nvml_available 1
"#;
        let expected = expected
            .replace("version=\"VERSION\"", &format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            .replace("=\"LAYOUT\"", &format!("=\"{}\"", ledger::layout::LAYOUT_VERSION));
        for (number, (got, want)) in text.lines().zip(expected.lines()).enumerate() {
            assert_eq!(got, want, "line {}", number + 1);
        }
        assert_eq!(text, expected);
    }

    #[test]
    fn memory_pressure_is_held_over_cap_within_0_and_1() {
        assert_eq!(memory_pressure(0, Some(8 << 30)), Some(0.0));
        assert_eq!(memory_pressure(6 << 30, Some(8 << 30)), Some(0.75));
        assert_eq!(memory_pressure(8 << 30, Some(8 << 30)), Some(1.0));
        // A ledger that counts more than its cap (its own writes) reads as
        // full, not as more than full.
        assert_eq!(memory_pressure(u64::MAX, Some(8 << 30)), Some(1.0));
        assert_eq!(memory_pressure(0, Some(0)), Some(1.0));
        assert_eq!(memory_pressure(5, None), None);
    }

    #[test]
    fn label_values_are_escaped() {
        let (snapshot, counters) = busy_host();
        let text = render(&snapshot, &counters);
        assert!(text.contains("gpuslice_reclaimed_processes_total{tenant=\"we\\\\ird\\\"te\\nnant\"} 0\n"), "{text}");
    }

    #[test]
    fn values_render_as_prometheus_numbers() {
        let (snapshot, counters) = busy_host();
        let text = render(&snapshot, &counters);
        // Byte counts are integers, exact past 2^53.
        assert!(text.contains("{tenant=\"team-a\",device=\"1\",uuid=\"GPU-1\"} 18446744073709551615\n"), "{text}");
        // No cap is +Inf, a cap is its bytes.
        assert!(text.contains("gpuslice_tenant_memory_limit_bytes{tenant=\"team-a\",device=\"1\",uuid=\"GPU-1\"} +Inf\n"), "{text}");
        assert!(text.contains("gpuslice_tenant_memory_limit_bytes{tenant=\"team-a\",device=\"0\",uuid=\"GPU-0\"} 4294967296\n"), "{text}");
        // Ratios are floats.
        assert!(text.contains("gpuslice_device_utilization_ratio{device=\"0\",uuid=\"GPU-0\"} 0.25\n"), "{text}");
        assert!(text.contains("gpuslice_device_utilization_ratio{device=\"1\",uuid=\"GPU-1\"} 1.0\n"), "{text}");
    }

    #[test]
    fn families_without_series_keep_help_and_type() {
        let text = render(&empty(), &MonitorCounters::default());
        for (name, kind) in [
            ("gpuslice_tenant_memory_used_bytes", "gauge"),
            ("gpuslice_tenant_alloc_denied_total", "counter"),
            ("gpuslice_tenant_driver_memory_used_bytes", "gauge"),
            ("gpuslice_reclaimed_processes_total", "counter"),
            ("gpuslice_device_utilization_ratio", "gauge"),
            ("gpuslice_untracked_process_memory_bytes", "gauge"),
            ("gpuslice_tenant_over_cap_bytes", "gauge"),
        ] {
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name}: {text}");
            assert!(!text.contains(&format!("\n{name}{{")) && !text.contains(&format!("\n{name} ")), "{name}: {text}");
        }
        assert!(text.contains("# TYPE gpuslice_monitor_rounds_total counter\ngpuslice_monitor_rounds_total 0\n"), "{text}");
        assert!(text.contains("gpuslice_nvml_available 0\n"), "{text}");
    }

    #[test]
    fn tenant_series_carry_tenant_device_and_uuid() {
        let snapshot = Snapshot {
            nvml: false,
            devices: vec![],
            tenants: vec![TenantView {
                name: "team-a".into(),
                devices: vec![TenantDeviceView {
                    uuid: "GPU-1".into(),
                    alloc_denied_total: 2,
                    ..crate::snapshot::fixtures::tenant_device(5, None, None)
                }],
                processes: vec![],
                reclaimed_processes_total: 4,
            }],
            untracked_processes: vec![],
        };
        let mut counters = MonitorCounters::default();
        counters.unattributed_bytes.insert(("team-a".into(), "GPU-1".into()), 7);
        counters.rounds_total = 12;
        let text = render(&snapshot, &counters);
        assert!(text.contains("gpuslice_tenant_unattributed_bytes{tenant=\"team-a\",device=\"0\",uuid=\"GPU-1\"} 7\n"), "{text}");
        assert!(text.contains("gpuslice_tenant_memory_used_bytes{tenant=\"team-a\",device=\"0\",uuid=\"GPU-1\"} 5\n"), "{text}");
        assert!(text.contains("gpuslice_tenant_memory_limit_bytes{tenant=\"team-a\",device=\"0\",uuid=\"GPU-1\"} +Inf\n"));
        assert!(text.contains("gpuslice_tenant_alloc_denied_total{tenant=\"team-a\",device=\"0\",uuid=\"GPU-1\"} 2\n"));
        assert!(text.contains("gpuslice_reclaimed_processes_total{tenant=\"team-a\"} 4\n"));
        assert!(text.contains("# TYPE gpuslice_tenant_alloc_denied_total counter\n"));
        assert!(text.contains("gpuslice_nvml_available 0\n"));
        assert!(text.contains("# TYPE gpuslice_monitor_rounds_total counter\ngpuslice_monitor_rounds_total 12\n"), "{text}");
        assert!(!text.contains("gpuslice_tenant_driver_memory_used_bytes{"));
    }
}
