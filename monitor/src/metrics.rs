//! `/metrics`: the snapshot in the Prometheus text exposition format.
//!
//! Written by hand rather than through a metrics registry: every value is
//! recomputed from the ledgers and NVML on each round, so there is no
//! long-lived metric state to register, and the format needs only correct
//! label escaping and `HELP`/`TYPE` lines, both done here and tested.

use crate::snapshot::Snapshot;
use std::fmt::Write;

/// Counters the monitor keeps itself (not in any ledger).
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

/// Escapes a label value: backslash, double quote and newline.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

struct Family<'a> {
    out: &'a mut String,
}

impl Family<'_> {
    fn header<'o>(out: &'o mut String, name: &str, kind: &str, help: &str) -> Family<'o> {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out }
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (key, val)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{key}=\"{}\"", escape_label(val));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {}", format_value(value));
    }
}

fn format_value(value: f64) -> String {
    if value.is_infinite() {
        if value > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else if value.is_nan() {
        "NaN".into()
    } else if value.fract() == 0.0 && value.abs() < 1e17 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

/// Renders the whole exposition.
pub fn render(snapshot: &Snapshot, counters: &MonitorCounters) -> String {
    let mut out = String::new();
    let tenant_device = |name: &str, help: &str, kind: &str, out: &mut String, value: &dyn Fn(&crate::snapshot::TenantDeviceView) -> Option<f64>| {
        let mut family = Family::header(out, name, kind, help);
        for tenant in &snapshot.tenants {
            for device in &tenant.devices {
                if let Some(v) = value(device) {
                    let index = device.index.to_string();
                    family.sample(name, &[("tenant", &tenant.name), ("device", &index), ("uuid", &device.uuid)], v);
                }
            }
        }
    };
    tenant_device(
        "gpuslice_tenant_memory_used_bytes",
        "Device memory reserved by the tenant's processes, as the ledger counts it.",
        "gauge",
        &mut out,
        &|d| Some(d.memory_used_bytes as f64),
    );
    tenant_device(
        "gpuslice_tenant_memory_limit_bytes",
        "The tenant's memory cap on the device (+Inf when uncapped).",
        "gauge",
        &mut out,
        &|d| Some(d.memory_limit_bytes.map_or(f64::INFINITY, |b| b as f64)),
    );
    tenant_device(
        "gpuslice_tenant_processes",
        "Live processes of the tenant holding memory on the device.",
        "gauge",
        &mut out,
        &|d| Some(d.processes as f64),
    );
    tenant_device(
        "gpuslice_tenant_alloc_denied_total",
        "Allocations refused because they would pass the tenant's cap.",
        "counter",
        &mut out,
        &|d| Some(d.alloc_denied_total as f64),
    );
    let unattributed = |d: &crate::snapshot::TenantDeviceView, tenant: &str| {
        counters.unattributed_bytes.get(&(tenant.to_string(), d.uuid.clone())).copied().unwrap_or(0)
    };
    {
        let name = "gpuslice_tenant_unattributed_bytes";
        let mut family = Family::header(
            &mut out,
            name,
            "gauge",
            "Memory the tenant's usage counts that no process holds (a process killed while reserving).",
        );
        for tenant in &snapshot.tenants {
            for device in &tenant.devices {
                let index = device.index.to_string();
                let labels = [("tenant", tenant.name.as_str()), ("device", index.as_str()), ("uuid", device.uuid.as_str())];
                family.sample(name, &labels, unattributed(device, &tenant.name) as f64);
            }
        }
    }
    tenant_device(
        "gpuslice_tenant_driver_memory_used_bytes",
        "Device memory the driver (NVML) reports for the tenant's processes.",
        "gauge",
        &mut out,
        &|d| d.driver_memory_used_bytes.map(|b| b as f64),
    );
    {
        let name = "gpuslice_reclaimed_processes_total";
        let mut family = Family::header(&mut out, name, "counter", "Dead processes whose memory was reclaimed, by tenant.");
        for tenant in &snapshot.tenants {
            family.sample(name, &[("tenant", &tenant.name)], tenant.reclaimed_processes_total as f64);
        }
    }
    let device_family = |name: &str, help: &str, out: &mut String, value: &dyn Fn(&crate::snapshot::DeviceView) -> Option<f64>| {
        let mut family = Family::header(out, name, "gauge", help);
        for device in &snapshot.devices {
            if let Some(v) = value(device) {
                let index = device.index.to_string();
                family.sample(name, &[("device", &index), ("uuid", &device.uuid)], v);
            }
        }
    };
    device_family(
        "gpuslice_device_memory_used_bytes",
        "Device memory in use by all processes, as the driver (NVML) reports it.",
        &mut out,
        &|d| d.memory_used_bytes.map(|b| b as f64),
    );
    device_family(
        "gpuslice_device_memory_total_bytes",
        "Physical device memory.",
        &mut out,
        &|d| Some(d.memory_total_bytes as f64),
    );
    device_family(
        "gpuslice_device_utilization_ratio",
        "Share of time the device was busy over the driver's last sample period.",
        &mut out,
        &|d| d.utilization_ratio,
    );
    {
        let name = "gpuslice_untracked_process_memory_bytes";
        let mut family = Family::header(
            &mut out,
            name,
            "gauge",
            "Device memory of processes that no tenant ledger knows (they bypassed the shim).",
        );
        for p in &snapshot.untracked_processes {
            let (device, pid) = (p.device.to_string(), p.pid.to_string());
            family.sample(name, &[("device", &device), ("uuid", &p.uuid), ("pid", &pid)], p.memory_used_bytes as f64);
        }
    }
    {
        let name = "gpuslice_tenant_over_cap_bytes";
        let mut family = Family::header(
            &mut out,
            name,
            "gauge",
            "Driver-reported memory of a tenant past its cap, when that passes its context overhead.",
        );
        for o in &counters.over_cap {
            let device = o.device.to_string();
            family.sample(name, &[("tenant", &o.tenant), ("device", &device), ("uuid", &o.uuid)], o.over_bytes as f64);
        }
    }
    {
        let name = "gpuslice_violations_total";
        let mut family = Family::header(&mut out, name, "counter", "Violations found, by kind.");
        for kind in ["untracked_process", "over_cap"] {
            let value = counters.violations_total.get(kind).copied().unwrap_or(0);
            family.sample(name, &[("kind", kind)], value as f64);
        }
    }
    {
        let name = "gpuslice_violation_kills_total";
        let mut family = Family::header(&mut out, name, "counter", "Processes killed because of a violation.");
        family.sample(name, &[], counters.violation_kills_total as f64);
    }
    {
        let name = "gpuslice_config_reloads_total";
        let mut family = Family::header(&mut out, name, "counter", "Configuration reloads, by result.");
        for result in ["ok", "error"] {
            let value = counters.config_reloads_total.get(result).copied().unwrap_or(0);
            family.sample(name, &[("result", result)], value as f64);
        }
    }
    {
        let name = "gpuslice_monitor_rounds_total";
        let mut family = Family::header(&mut out, name, "counter", "Monitor rounds completed, this page's included.");
        family.sample(name, &[], counters.rounds_total as f64);
    }
    {
        let name = "gpuslice_nvml_available";
        let mut family = Family::header(&mut out, name, "gauge", "1 when NVML answers, 0 in ledger-only mode.");
        family.sample(name, &[], if snapshot.nvml { 1.0 } else { 0.0 });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{TenantDeviceView, TenantView};

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
    }

    #[test]
    fn values_render_as_prometheus_numbers() {
        assert_eq!(format_value(3.0), "3");
        assert_eq!(format_value(0.25), "0.25");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(1.8446744073709552e19), "18446744073709552000");
    }

    #[test]
    fn tenant_series_carry_tenant_device_and_uuid() {
        let snapshot = Snapshot {
            nvml: false,
            devices: vec![],
            tenants: vec![TenantView {
                name: "team-a".into(),
                devices: vec![TenantDeviceView {
                    index: 0,
                    uuid: "GPU-1".into(),
                    memory_used_bytes: 5,
                    memory_limit_bytes: None,
                    policy_source: "unset",
                    alloc_denied_total: 2,
                    context_overhead_bytes: 0,
                    processes: 1,
                    driver_memory_used_bytes: None,
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
