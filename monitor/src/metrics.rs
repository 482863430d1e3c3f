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

use crate::snapshot::{DeviceView, Snapshot, TenantDeviceView};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, GaugeValueEncoder, MetricEncoder,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt;

/// The `Content-Type` of the page [`render`] writes.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// Figures the monitor keeps or gathers itself (not in any ledger): its
/// counters, and what it reads beside the ledgers (device names, the queue).
#[derive(Debug, Clone, Default)]
pub struct MonitorCounters {
    /// Violations found, by kind (`untracked_process`, `over_cap`).
    pub violations_total: std::collections::BTreeMap<&'static str, u64>,
    /// Processes killed because of a violation.
    pub violation_kills_total: u64,
    /// Configuration reloads, by result (`ok`, `error`).
    pub config_reloads_total: std::collections::BTreeMap<&'static str, u64>,
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
}

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

/// A gauge family being written.
struct Gauges<'e>(MetricEncoder<'e>);

impl<'e> Gauges<'e> {
    fn start(encoder: &'e mut DescriptorEncoder, name: &'static str, help: &str) -> Result<Self, fmt::Error> {
        Ok(Gauges(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?))
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: impl EncodeGaugeValue) -> fmt::Result {
        ConstGauge::new(value).encode(self.0.encode_family(&labels)?)
    }
}

/// A counter family being written.
struct Counters<'e>(MetricEncoder<'e>);

impl<'e> Counters<'e> {
    /// `name` is spelled as on the page; the encoder adds the `_total` of a
    /// counter's name itself, so it is taken off here.
    fn start(encoder: &'e mut DescriptorEncoder, name: &'static str, help: &str) -> Result<Self, fmt::Error> {
        let stem = name.strip_suffix("_total").unwrap_or(name);
        Ok(Counters(encoder.encode_descriptor(stem, help, None, MetricType::Counter)?))
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: impl EncodeCounterValue) -> fmt::Result {
        ConstCounter::new(value).encode(self.0.encode_family(&labels)?)
    }
}

/// A memory cap as a gauge value: its bytes, exact, or `+Inf` when there is
/// none.
struct Cap(Option<u64>);

impl EncodeGaugeValue for Cap {
    fn encode(&self, encoder: &mut GaugeValueEncoder) -> fmt::Result {
        match self.0 {
            Some(bytes) => EncodeGaugeValue::encode(&bytes, encoder),
            None => EncodeGaugeValue::encode(&f64::INFINITY, encoder),
        }
    }
}

/// One gauge family with a series per tenant and device, labelled tenant,
/// device and uuid; a device where `value` has nothing has no series.
fn tenant_device_gauge<V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    snapshot: &Snapshot,
    name: &'static str,
    help: &str,
    value: impl Fn(&str, &TenantDeviceView) -> Option<V>,
) -> fmt::Result {
    let mut family = Gauges::start(encoder, name, help)?;
    for tenant in &snapshot.tenants {
        for device in &tenant.devices {
            if let Some(v) = value(&tenant.name, device) {
                let index = device.index.to_string();
                family.sample(&[("tenant", &tenant.name), ("device", &index), ("uuid", &device.uuid)], v)?;
            }
        }
    }
    Ok(())
}

/// One gauge family with a series per device, labelled device and uuid.
fn device_gauge<V: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    snapshot: &Snapshot,
    name: &'static str,
    help: &str,
    value: impl Fn(&DeviceView) -> Option<V>,
) -> fmt::Result {
    let mut family = Gauges::start(encoder, name, help)?;
    for device in &snapshot.devices {
        if let Some(v) = value(device) {
            let index = device.index.to_string();
            family.sample(&[("device", &index), ("uuid", &device.uuid)], v)?;
        }
    }
    Ok(())
}

impl Collector for Page {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let Page { snapshot, counters } = self;
        let e = &mut encoder;
        tenant_device_gauge(
            e,
            snapshot,
            "gpuslice_tenant_memory_used_bytes",
            "Device memory reserved by the tenant's processes, as the ledger counts it.",
            |_, d| Some(d.memory_used_bytes),
        )?;
        tenant_device_gauge(
            e,
            snapshot,
            "gpuslice_tenant_memory_limit_bytes",
            "The tenant's memory cap on the device (+Inf when uncapped).",
            |_, d| Some(Cap(d.memory_limit_bytes)),
        )?;
        tenant_device_gauge(
            e,
            snapshot,
            "gpuslice_tenant_processes",
            "Live processes of the tenant holding memory on the device.",
            |_, d| Some(d.processes),
        )?;
        {
            let name = "gpuslice_tenant_alloc_denied_total";
            let mut family = Counters::start(e, name, "Allocations refused because they would pass the tenant's cap.")?;
            for tenant in &snapshot.tenants {
                for d in &tenant.devices {
                    let index = d.index.to_string();
                    family.sample(&[("tenant", &tenant.name), ("device", &index), ("uuid", &d.uuid)], d.alloc_denied_total)?;
                }
            }
        }
        tenant_device_gauge(
            e,
            snapshot,
            "gpuslice_tenant_unattributed_bytes",
            "Memory the tenant's usage counts that no process holds (a process killed while reserving).",
            |tenant, d| Some(counters.unattributed_bytes.get(&(tenant.to_string(), d.uuid.clone())).copied().unwrap_or(0)),
        )?;
        tenant_device_gauge(
            e,
            snapshot,
            "gpuslice_tenant_driver_memory_used_bytes",
            "Device memory the driver (NVML) reports for the tenant's processes.",
            |_, d| d.driver_memory_used_bytes,
        )?;
        tenant_device_gauge(
            e,
            snapshot,
            "gpuslice_tenant_compute_target_ratio",
            "The tenant's compute target on the device as a ratio of device time: its share plus the spare time due to it by priority, within its limit; no series for a tenant with no compute setting.",
            |_, d| d.compute_target_ratio,
        )?;
        tenant_device_gauge(
            e,
            snapshot,
            "gpuslice_tenant_compute_used_ratio",
            "Device time charged to the tenant's limit over the monitor's last round, as a ratio of wall time.",
            |_, d| d.compute_used_ratio,
        )?;
        tenant_device_gauge(
            e,
            snapshot,
            "gpuslice_tenant_compute_unarbitrated_processes",
            "Processes of a tenant with a compute setting that the monitor does not arbitrate on the device (they could not reach it; they retry every second).",
            |_, d| d.compute_unarbitrated_processes.map(|n| n as f64),
        )?;
        {
            let name = "gpuslice_tenant_throttled_seconds_total";
            let mut family = Counters::start(e, name, "Time the tenant's launches were held back by its compute limit.")?;
            for tenant in &snapshot.tenants {
                for d in &tenant.devices {
                    let index = d.index.to_string();
                    family.sample(&[("tenant", &tenant.name), ("device", &index), ("uuid", &d.uuid)], d.throttled_ns_total as f64 / 1e9)?;
                }
            }
        }
        {
            let name = "gpuslice_tenant_kernel_launches_total";
            let mut family = Counters::start(e, name, "Kernel launches of the tenant on the device while a compute limit governed it.")?;
            for tenant in &snapshot.tenants {
                for d in &tenant.devices {
                    let index = d.index.to_string();
                    family.sample(&[("tenant", &tenant.name), ("device", &index), ("uuid", &d.uuid)], d.kernel_launches_total)?;
                }
            }
        }
        {
            let mut family =
                Counters::start(e, "gpuslice_reclaimed_processes_total", "Dead processes whose memory was reclaimed, by tenant.")?;
            for tenant in &snapshot.tenants {
                family.sample(&[("tenant", &tenant.name)], tenant.reclaimed_processes_total)?;
            }
        }
        device_gauge(
            e,
            snapshot,
            "gpuslice_device_memory_used_bytes",
            "Device memory in use by all processes, as the driver (NVML) reports it.",
            |d| d.memory_used_bytes,
        )?;
        device_gauge(e, snapshot, "gpuslice_device_memory_total_bytes", "Physical device memory.", |d| Some(d.memory_total_bytes))?;
        device_gauge(
            e,
            snapshot,
            "gpuslice_device_arbitrated",
            "1 while the monitor arbitrates the device's time (some tenant there has a compute setting), 0 while every process there launches freely.",
            |d| d.arbitrated.map(|a| if a { 1.0 } else { 0.0 }),
        )?;
        device_gauge(
            e,
            snapshot,
            "gpuslice_device_utilization_ratio",
            "Share of time the device was busy over the driver's last sample period.",
            |d| d.utilization_ratio,
        )?;
        {
            let mut family = Gauges::start(
                e,
                "gpuslice_untracked_process_memory_bytes",
                "Device memory of processes that no tenant ledger knows (they bypassed the shim).",
            )?;
            for p in &snapshot.untracked_processes {
                let (device, pid) = (p.device.to_string(), p.pid.to_string());
                family.sample(&[("device", &device), ("uuid", &p.uuid), ("pid", &pid)], p.memory_used_bytes)?;
            }
        }
        {
            let mut family = Gauges::start(
                e,
                "gpuslice_tenant_over_cap_bytes",
                "Driver-reported memory of a tenant past its cap, when that passes its context overhead.",
            )?;
            for o in &counters.over_cap {
                let device = o.device.to_string();
                family.sample(&[("tenant", &o.tenant), ("device", &device), ("uuid", &o.uuid)], o.over_bytes)?;
            }
        }
        {
            let mut family = Counters::start(e, "gpuslice_violations_total", "Violations found, by kind.")?;
            for kind in ["untracked_process", "over_cap", "outside_turns"] {
                family.sample(&[("kind", kind)], counters.violations_total.get(kind).copied().unwrap_or(0))?;
            }
        }
        Counters::start(e, "gpuslice_violation_kills_total", "Processes killed because of a violation.")?
            .sample(&[], counters.violation_kills_total)?;
        {
            let mut family = Counters::start(e, "gpuslice_config_reloads_total", "Configuration reloads, by result.")?;
            for result in ["ok", "error"] {
                family.sample(&[("result", result)], counters.config_reloads_total.get(result).copied().unwrap_or(0))?;
            }
        }
        {
            let mut family = Gauges::start(
                e,
                "gpuslice_device_info",
                "1 for every GPU and MIG device NVML lists, with its name, MIG profile and parent GPU (empty for a GPU); no series without NVML.",
            )?;
            for d in snapshot.devices.iter().filter(|_| snapshot.nvml) {
                let Some(name) = counters.device_names.get(&d.uuid) else { continue };
                let index = d.index.to_string();
                let labels = [
                    ("device", index.as_str()),
                    ("uuid", d.uuid.as_str()),
                    ("name", name.as_str()),
                    ("mig_profile", d.mig_profile.as_deref().unwrap_or("")),
                    ("parent_uuid", d.parent_uuid.as_deref().unwrap_or("")),
                ];
                family.sample(&labels, 1u64)?;
            }
        }
        device_gauge(
            e,
            snapshot,
            "gpuslice_device_memory_committed_bytes",
            "Memory committed on the device: caps of running queue jobs (a job without a cap commits the whole device) and of capped tenants with a live process, as `gpuslice devices` counts it.",
            |d| Some(counters.committed_bytes.get(&d.uuid).copied().unwrap_or(0)),
        )?;
        {
            let mut family = Gauges::start(e, "gpuslice_queue_jobs", "Live jobs in the host's admission queue, by state.")?;
            family.sample(&[("state", "waiting")], counters.queue.waiting)?;
            family.sample(&[("state", "running")], counters.queue.running)?;
        }
        {
            let mut family = e.encode_descriptor(
                "gpuslice_queue_wait_seconds",
                "How long admitted queue jobs waited, from submission to admission, by priority (jobs seen running by the monitor since it started).",
                None,
                MetricType::Histogram,
            )?;
            for (priority, h) in &counters.queue.wait_seconds {
                let priority = priority.to_string();
                let labels = [("priority", priority.as_str())];
                let buckets: Vec<(f64, u64)> =
                    WAIT_BUCKETS_SECONDS.iter().copied().chain([f64::INFINITY]).zip(h.per_bucket.iter().copied()).collect();
                family.encode_family(&labels)?.encode_histogram::<Vec<(String, String)>>(h.sum_seconds, h.count, &buckets, None)?;
            }
        }
        Counters::start(e, "gpuslice_monitor_rounds_total", "Monitor rounds completed, this page's included.")?
            .sample(&[], counters.rounds_total)?;
        Gauges::start(e, "gpuslice_ledgers_watched", "Tenant ledgers the monitor watches.")?.sample(&[], counters.ledgers_watched)?;
        {
            let mut family = Counters::start(
                e,
                "gpuslice_ledger_files_refused_total",
                "Ledger files not watched because of a bound (--max-ledgers-per-uid, --max-ledgers), each counted once, by bound.",
            )?;
            for reason in ["per_uid_bound", "total_bound"] {
                family.sample(&[("reason", reason)], counters.ledger_files_refused_total.get(reason).copied().unwrap_or(0))?;
            }
        }
        {
            let mut family =
                Gauges::start(e, "gpuslice_ledger_files_over_bound", "Ledger files not watched now because of a bound, by bound.")?;
            for reason in ["per_uid_bound", "total_bound"] {
                family.sample(&[("reason", reason)], counters.ledger_files_over_bound.get(reason).copied().unwrap_or(0))?;
            }
        }
        Gauges::start(e, "gpuslice_nvml_available", "1 when NVML answers, 0 in ledger-only mode.")?
            .sample(&[], u64::from(snapshot.nvml))?;
        Ok(())
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
            kernel_launches_total: 40,
            compute_busy_ns_total: 1_500_000_000,
            throttled_ns_total: 2_500_000_000,
            processes: 2,
            driver_memory_used_bytes: driver,
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
        counters.over_cap.push(OverCap { tenant: "team-a".into(), device: 0, uuid: "GPU-0".into(), over_bytes: 99 });
        counters.unattributed_bytes.insert(("team-a".into(), "GPU-1".into()), 11);
        counters.rounds_total = 12345;
        counters.device_names.insert("GPU-0".into(), "NVIDIA H200".into());
        counters.device_names.insert("GPU-1".into(), "NVIDIA \"H200\"".into());
        counters.committed_bytes.insert("GPU-0".into(), 4 << 30);
        counters.queue.waiting = 3;
        counters.queue.running = 1;
        counters.queue.wait_seconds.entry(-2).or_default().observe(0.04);
        counters.queue.wait_seconds.entry(-2).or_default().observe(7200.0);
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
# HELP gpuslice_tenant_throttled_seconds_total Time the tenant's launches were held back by its compute limit.
# TYPE gpuslice_tenant_throttled_seconds_total counter
gpuslice_tenant_throttled_seconds_total{tenant="team-a",device="0",uuid="GPU-0"} 2.5
gpuslice_tenant_throttled_seconds_total{tenant="team-a",device="1",uuid="GPU-1"} 2.5
gpuslice_tenant_throttled_seconds_total{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 2.5
# HELP gpuslice_tenant_kernel_launches_total Kernel launches of the tenant on the device while a compute limit governed it.
# TYPE gpuslice_tenant_kernel_launches_total counter
gpuslice_tenant_kernel_launches_total{tenant="team-a",device="0",uuid="GPU-0"} 40
gpuslice_tenant_kernel_launches_total{tenant="team-a",device="1",uuid="GPU-1"} 40
gpuslice_tenant_kernel_launches_total{tenant="we\\ird\"te\nnant",device="0",uuid="GPU-0"} 40
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
# HELP gpuslice_violation_kills_total Processes killed because of a violation.
# TYPE gpuslice_violation_kills_total counter
gpuslice_violation_kills_total 1
# HELP gpuslice_config_reloads_total Configuration reloads, by result.
# TYPE gpuslice_config_reloads_total counter
gpuslice_config_reloads_total{result="ok"} 0
gpuslice_config_reloads_total{result="error"} 5
# HELP gpuslice_device_info 1 for every GPU and MIG device NVML lists, with its name, MIG profile and parent GPU (empty for a GPU); no series without NVML.
# TYPE gpuslice_device_info gauge
gpuslice_device_info{device="0",uuid="GPU-0",name="NVIDIA H200",mig_profile="",parent_uuid=""} 1
gpuslice_device_info{device="1",uuid="GPU-1",name="NVIDIA \"H200\"",mig_profile="",parent_uuid=""} 1
# HELP gpuslice_device_memory_committed_bytes Memory committed on the device: caps of running queue jobs (a job without a cap commits the whole device) and of capped tenants with a live process, as `gpuslice devices` counts it.
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
# HELP gpuslice_nvml_available 1 when NVML answers, 0 in ledger-only mode.
# TYPE gpuslice_nvml_available gauge
gpuslice_nvml_available 1
"#;
        for (number, (got, want)) in text.lines().zip(expected.lines()).enumerate() {
            assert_eq!(got, want, "line {}", number + 1);
        }
        assert_eq!(text, expected);
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
