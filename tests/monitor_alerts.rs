//! The Prometheus alert rules in `deploy/prometheus/` fire on what a real
//! monitor says.
//!
//! `promtool check rules` checks the file; then a monitor runs on the
//! simulated GPU while the test makes each alert's condition happen (a
//! process without the shim, a tenant over its cap, the monitor stopped, a
//! tenant whose processes are not arbitrated, a refused configuration, a
//! violation kill), scraping `/metrics` at each step. The scrapes become
//! the input series of promtool's rule unit tests (`promtool test rules`),
//! as Prometheus would have stored them: a failed scrape is `up` 0, a
//! series that leaves a scrape gets a stale marker. Each scrape stands for
//! [`REPEAT`] evaluation intervals, longer than every rule's `for`: the
//! states are real, their duration is stretched. At the end of each step
//! the unit test expects exactly the alerts that step's scrape calls for,
//! and after the first (nothing wrong) no alert at all, so a rule that
//! always fires fails as surely as one that never does.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{poll, repo_root, Sim};
use monitor_support::*;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

const RULES: &str = "deploy/prometheus/gpuslice-alerts.yaml";
/// promtool's evaluation interval, seconds.
const INTERVAL_S: usize = 15;
/// Evaluation intervals each scrape stands for: 2 minutes.
const REPEAT: usize = 8;
const JOB: &str = "gpuslice";
const INSTANCE: &str = "gpu-node-1:9494";

/// A series' or an alert's labels.
type Labels = BTreeMap<String, String>;

fn promtool() -> PathBuf {
    let found =
        std::env::var_os("PATH").and_then(|path| std::env::split_paths(&path).map(|dir| dir.join("promtool")).find(|p| p.is_file()));
    found.expect("promtool is not installed: run `bash scripts/setup.sh` (Debian's prometheus package)")
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// The rule file as JSON, through Python's YAML reader (kubernetes-validate's
/// dependency in the test virtualenv).
fn rules() -> Value {
    let python = repo_root().join(".deps/venv/bin/python");
    let script = "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)";
    let (ok, text) = run(Command::new(&python).args(["-c", script]).arg(repo_root().join(RULES)));
    assert!(ok, "cannot read {RULES} as YAML with {}: {text}", python.display());
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{RULES} as JSON: {e}"))
}

/// The rule group of the device-health alerts, which the host's real
/// scrapes cannot make fire (simgpu stays cool): their own test plays the
/// series.
const HEALTH_GROUP: &str = "gpuslice-device-health";

/// Alert name → (labels, annotations) as the rule file gives them, for the
/// alerts of the groups `keep` accepts (recording rules are left out).
fn alert_rules_of(keep: impl Fn(&str) -> bool) -> BTreeMap<String, (Labels, Labels)> {
    let strings = |v: &Value| -> Labels {
        v.as_object().map(|o| o.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect()).unwrap_or_default()
    };
    let mut alerts = BTreeMap::new();
    for group in rules()["groups"].as_array().expect("groups") {
        if !keep(group["name"].as_str().unwrap_or_default()) {
            continue;
        }
        for rule in group["rules"].as_array().expect("rules") {
            let Some(name) = rule["alert"].as_str() else { continue };
            alerts.insert(name.to_string(), (strings(&rule["labels"]), strings(&rule["annotations"])));
        }
    }
    alerts
}

/// Every alert of the file.
fn alert_rules() -> BTreeMap<String, (Labels, Labels)> {
    alert_rules_of(|_| true)
}

/// Rules of every kind, as `promtool check rules` counts them.
fn rule_count() -> usize {
    rules()["groups"].as_array().expect("groups").iter().map(|g| g["rules"].as_array().map_or(0, Vec::len)).sum()
}

/// Renders an annotation template for an alert's labels. Only
/// `{{ $labels.NAME }}` is used in the rules, so that expected text can be
/// written here; anything else in braces fails the test.
fn render(template: &str, labels: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("}}").map(|e| start + e).unwrap_or_else(|| panic!("unclosed template in {template:?}"));
        let name = rest[start + 2..end].trim().strip_prefix("$labels.").unwrap_or_else(|| panic!("only $labels.NAME: {template:?}"));
        out.push_str(labels.get(name).unwrap_or_else(|| panic!("no label {name} for {template:?}: {labels:?}")));
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

#[test]
fn the_alert_rules_pass_promtool_check() {
    let (ok, text) = run(Command::new(promtool()).args(["check", "rules"]).arg(repo_root().join(RULES)));
    assert!(ok, "{text}");
    assert!(text.contains(&format!("SUCCESS: {} rules found", rule_count())), "{text}");
}

/// `name{label="value",…}` in PromQL's series notation.
fn series_name(name: &str, labels: &BTreeMap<String, String>) -> String {
    let escape = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n");
    let pairs: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    format!("{name}{{{}}}", pairs.join(","))
}

/// The scrapes (`None`: the target could not be scraped) as promtool's
/// input series, each scrape repeated [`REPEAT`] times.
fn input_series(scrapes: &[Option<Metrics>]) -> Vec<Value> {
    let target = |mut labels: BTreeMap<String, String>| {
        labels.insert("job".into(), JOB.into());
        labels.insert("instance".into(), INSTANCE.into());
        labels
    };
    let mut series: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    let up_name = series_name("up", &target(BTreeMap::new()));
    for (at, scrape) in scrapes.iter().enumerate() {
        series.entry(up_name.clone()).or_insert_with(|| vec![None; scrapes.len()])[at] = Some(f64::from(u8::from(scrape.is_some())));
        for sample in scrape.iter().flat_map(|m| m.samples.iter()).filter(|s| s.value.is_finite()) {
            let name = series_name(&sample.name, &target(sample.labels.clone()));
            series.entry(name).or_insert_with(|| vec![None; scrapes.len()])[at] = Some(sample.value);
        }
    }
    series
        .into_iter()
        .map(|(name, values)| {
            let mut tokens = Vec::new();
            for (at, value) in values.iter().enumerate() {
                let was_there = at > 0 && values[at - 1].is_some();
                for repeat in 0..REPEAT {
                    tokens.push(match value {
                        Some(v) => format!("{v}"),
                        // Prometheus marks a series that left a scrape stale.
                        None if was_there && repeat == 0 => "stale".into(),
                        None => "_".into(),
                    });
                }
            }
            json!({ "series": name, "values": tokens.join(" ") })
        })
        .collect()
}

/// Runs `promtool test rules` on the rule file with `scrapes` as its input
/// series, expecting each `(step, alert, series)` of `expected`: the alert
/// firing at the end of that step for exactly those series (none: silent),
/// with its rule's labels, the target's and its rendered annotations.
fn promtool_test_scrapes(
    sim: &Sim,
    rules: &BTreeMap<String, (Labels, Labels)>,
    expected: &[(usize, &str, Vec<Labels>)],
    scrapes: &[Option<Metrics>],
    file_name: &str,
) {
    let alert_tests: Vec<Value> = expected
        .iter()
        .map(|(step, alert, alerts)| {
            let (rule_labels, annotations) = &rules[*alert];
            let exp: Vec<Value> = alerts
                .iter()
                .map(|series| {
                    let mut labels = series.clone();
                    labels.insert("job".into(), JOB.into());
                    labels.insert("instance".into(), INSTANCE.into());
                    labels.extend(rule_labels.clone());
                    let rendered: BTreeMap<&String, String> = annotations.iter().map(|(k, t)| (k, render(t, &labels))).collect();
                    json!({ "exp_labels": labels, "exp_annotations": rendered })
                })
                .collect();
            json!({ "eval_time": end_of(*step), "alertname": alert, "exp_alerts": exp })
        })
        .collect();
    let test = json!({
        "rule_files": [repo_root().join(RULES)],
        "evaluation_interval": format!("{INTERVAL_S}s"),
        "tests": [{ "interval": format!("{INTERVAL_S}s"), "input_series": input_series(scrapes), "alert_rule_test": alert_tests }],
    });
    let file = sim.dir().join(file_name);
    std::fs::write(&file, serde_json::to_string_pretty(&test).unwrap()).unwrap();
    let (ok, text) = run(Command::new(promtool()).args(["test", "rules"]).arg(&file));
    assert!(ok && text.contains("SUCCESS"), "promtool test rules {}:\n{text}", file.display());
}

/// The last evaluation of step `step`.
fn end_of(step: usize) -> String {
    format!("{}s", ((step + 1) * REPEAT - 1) * INTERVAL_S)
}

/// One scrape, or `None` when the monitor cannot be reached.
fn try_scrape(addr: &str) -> Option<Metrics> {
    std::net::TcpStream::connect(addr).ok()?;
    let (status, body) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    Some(Metrics::parse(&body))
}

/// The labels of each series of `name` in `scrape` whose value is above 0,
/// as an alert on `name > 0` carries them.
fn above_zero(scrape: &Metrics, name: &str) -> Vec<BTreeMap<String, String>> {
    let series: Vec<_> = scrape.samples.iter().filter(|s| s.name == name && s.value > 0.0).map(|s| s.labels.clone()).collect();
    assert!(!series.is_empty(), "the scrape has no {name} above 0: the condition did not happen\n{scrape:#?}");
    series
}

/// Plays a tenant that lowers the usage figure in its own ledger, so that
/// its shim admits more than its cap (as in tests/monitor_violations.rs).
fn forget_usage(sim: &Sim, tenant: &str) {
    let path = ledger::tenant_path(&sim.ledger_dir(), tenant);
    let ledger = ledger::Ledger::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    ledger.layout().usage.devices[0].used_bytes.store(0, std::sync::atomic::Ordering::SeqCst);
}

#[test]
fn every_alert_fires_on_real_scrapes_of_a_monitor_and_none_before() {
    let sim = Sim::new().memory("4GiB").context_memory("64MiB").memory_limit("1GiB").tenant("team-a");
    let config = sim.dir().join("monitor.toml");
    std::fs::write(&config, "on_violation = \"report\"\n").unwrap();
    let options = || MonitorOptions { config: Some(config.clone()), ..Default::default() };
    let mut monitor = Monitor::start(&sim, options());
    let mut scrapes: Vec<Option<Metrics>> = Vec::new();
    // (step, alert, the labels of each alert expected at the step's end)
    let mut expected: Vec<(usize, &str, Vec<Labels>)> = Vec::new();
    let no_labels = || vec![BTreeMap::new()];

    // 0. Nothing wrong: a tenant within its cap.
    let mut tenant = sim.spawn(sim.c("memctl").args(["init", "ctx", "alloc:a:600M", "ready", "wait", "alloc:b:600M", "hold"]));
    tenant.wait_for("ready");
    scrapes.push(Some(monitor.metrics_until("the tenant seen", |m| {
        m.value("gpuslice_tenant_processes", &[("tenant", "team-a"), ("device", "0")]) == Some(1.0)
    })));
    let rules = alert_rules();
    for alert in rules.keys() {
        expected.push((0, alert, Vec::new()));
    }

    // 1. A process on the GPU without the shim.
    let mut bypass_cmd = sim.c("memctl");
    bypass_cmd.env_remove("LD_PRELOAD").args(["init", "ctx", "alloc:x:100M", "hold"]);
    let mut bypass = sim.spawn(&mut bypass_cmd);
    bypass.wait_for("ready");
    let pid = bypass.pid().to_string();
    let scrape = monitor.metrics_until("the process without the shim seen", |m| {
        m.find("gpuslice_untracked_process_memory_bytes", &[("pid", &pid)]).len() == 1
    });
    expected.push((1, "GpusliceUntrackedProcess", above_zero(&scrape, "gpuslice_untracked_process_memory_bytes")));
    scrapes.push(Some(scrape));

    // 2. The tenant past its cap by the driver's count.
    forget_usage(&sim, "team-a");
    tenant.send_line("go");
    tenant.wait_for("b");
    let scrape = monitor.metrics_until("the tenant over its cap", |m| !m.find("gpuslice_tenant_over_cap_bytes", &[]).is_empty());
    expected.push((2, "GpusliceTenantOverCap", above_zero(&scrape, "gpuslice_tenant_over_cap_bytes")));
    scrapes.push(Some(scrape));

    // 3. The monitor stopped: the scrape fails. Meanwhile a tenant with a
    // share starts, with no monitor to join, and is stopped (SIGSTOP)
    // before it can join the next one.
    let addr = monitor.addr.clone();
    monitor.stop();
    assert!(try_scrape(&addr).is_none(), "the stopped monitor still answers");
    scrapes.push(None);
    expected.push((3, "GpusliceMonitorDown", no_labels()));
    let mut early_cmd = sim.c("memctl");
    early_cmd.env("GPUSLICE_TENANT", "early").env("GPUSLICE_COMPUTE_SHARE", "50").args(["init", "ctx", "hold"]);
    let mut early = sim.spawn(&mut early_cmd);
    early.wait_for("ready");
    early.signal("STOP");

    // 4. A new monitor: the stopped tenant cannot join it.
    monitor = Monitor::start(&sim, options());
    let scrape = monitor.metrics_until("the early tenant seen, not arbitrated", |m| {
        m.value("gpuslice_tenant_compute_unarbitrated_processes", &[("tenant", "early")]).is_some_and(|n| n > 0.0)
    });
    expected.push((4, "GpusliceDeviceNotArbitrated", above_zero(&scrape, "gpuslice_tenant_compute_unarbitrated_processes")));
    scrapes.push(Some(scrape));

    // 5. A configuration file the monitor refuses.
    write_atomically(&config, "on_violation = \"explode\"\n");
    let scrape = monitor.metrics_until("the reload refused", |m| m.value("gpuslice_config_last_reload_successful", &[]) == Some(0.0));
    expected.push((5, "GpusliceConfigReloadFailed", no_labels()));
    scrapes.push(Some(scrape));

    // 6. A good one that kills violators: the process without the shim goes.
    write_atomically(&config, "on_violation = \"kill\"\nviolation_grace = \"1s\"\n");
    let bypass_pid = bypass.pid();
    poll::until("the process without the shim killed", || !pid_alive(bypass_pid));
    let scrape = monitor.metrics_until("the kill counted", |m| m.value("gpuslice_violation_kills_total", &[]).is_some_and(|n| n >= 1.0));
    expected.push((6, "GpusliceViolationKills", no_labels()));
    scrapes.push(Some(scrape));
    early.signal("CONT");
    early.kill9();
    drop(bypass);
    drop(tenant);
    monitor.stop();

    // The unit test: every alert expected at the end of its step, with the
    // rule's labels and annotations and the target's.
    let tested: BTreeSet<&str> = expected.iter().filter(|(_, _, alerts)| !alerts.is_empty()).map(|(_, a, _)| *a).collect();
    let host_rules = alert_rules_of(|group| group != HEALTH_GROUP);
    assert_eq!(tested, host_rules.keys().map(String::as_str).collect(), "every rule of the host is shown firing");
    promtool_test_scrapes(&sim, &rules, &expected, &scrapes, "alerts-test.json");
}

/// One promtool unit test of `input_series` (series, values) at
/// `interval`, expecting at each (time, alert) exactly the alerts whose
/// series labels are given, with the rule's labels and annotations.
fn promtool_test(name: &str, interval: &str, input_series: &[(&str, &str)], cases: &[(&str, &str, Vec<Labels>)]) {
    let rules = alert_rules();
    let alert_tests: Vec<Value> = cases
        .iter()
        .map(|(at, alert, alerts)| {
            let (rule_labels, annotations) = rules.get(*alert).unwrap_or_else(|| panic!("no alert {alert} in {RULES}"));
            let exp: Vec<Value> = alerts
                .iter()
                .map(|series| {
                    let mut labels = series.clone();
                    labels.extend(rule_labels.clone());
                    let rendered: BTreeMap<&String, String> = annotations.iter().map(|(k, t)| (k, render(t, &labels))).collect();
                    json!({ "exp_labels": labels, "exp_annotations": rendered })
                })
                .collect();
            json!({ "eval_time": at, "alertname": alert, "exp_alerts": exp })
        })
        .collect();
    let series: Vec<Value> = input_series.iter().map(|(s, v)| json!({ "series": s, "values": v })).collect();
    let test = json!({
        "rule_files": [repo_root().join(RULES)],
        "evaluation_interval": interval,
        "tests": [{ "interval": interval, "input_series": series, "alert_rule_test": alert_tests }],
    });
    let dir = std::env::temp_dir().join(format!("gpuslice-alerts-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("test.json");
    std::fs::write(&file, serde_json::to_string_pretty(&test).unwrap()).unwrap();
    let (ok, text) = run(Command::new(promtool()).args(["test", "rules"]).arg(&file));
    assert!(ok && text.contains("SUCCESS"), "promtool test rules {}:\n{text}", file.display());
    let _ = std::fs::remove_dir_all(&dir);
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A monitor that stays down for a day is reported down for the whole day
/// (a rule that looked for its last scrape in a fixed window let go of it
/// once the window passed), and no longer once it answers again.
#[test]
fn a_monitor_down_for_a_day_is_reported_throughout_and_cleared_when_back() {
    let target = r#"{job="gpuslice",instance="gpu-node-1:9494"}"#;
    let up = format!("up{target}");
    let build = r#"gpuslice_build_info{job="gpuslice",instance="gpu-node-1:9494",version="1",ledger_layout_version="1"}"#;
    // One sample a minute: up for the first hour, down for 24 hours (the
    // monitor's series go stale), up again.
    let input = [(up.as_str(), "1x59 0x1440 1x20"), (build, "1x59 stale _x1440 1x20")];
    let down = || vec![labels(&[("job", "gpuslice"), ("instance", "gpu-node-1:9494")])];
    let cases = [
        ("30m", "GpusliceMonitorDown", vec![]),
        ("1h30m", "GpusliceMonitorDown", down()),
        ("7h30m", "GpusliceMonitorDown", down()),
        ("13h", "GpusliceMonitorDown", down()),
        ("24h59m", "GpusliceMonitorDown", down()),
        ("25h10m", "GpusliceMonitorDown", vec![]),
    ];
    promtool_test("monitor-down", "1m", &input, &cases);
}

/// Each device-health alert fires on series that call for it, sustained as
/// its rule asks, and clears when they stop; an idle device's `gpu_idle`
/// reason, a cool device and an unchanging error count raise nothing.
#[test]
fn the_device_health_alerts_fire_and_clear() {
    const T: &str = r#"job="gpuslice",instance="gpu-node-1:9494""#;
    let reason = |device: &str, uuid: &str, reason: &str| {
        format!(r#"gpuslice_device_clocks_event_reason_active{{{T},device="{device}",uuid="{uuid}",reason="{reason}"}}"#)
    };
    let dcgm = |name: &str, gpu: &str, uuid: &str| {
        format!(r#"{name}{{{T},gpu="{gpu}",UUID="{uuid}",device="nvidia{gpu}",modelName="NVIDIA H200"}}"#)
    };
    // One sample each 15 s. Two minutes normal, then the condition
    // (thermal on GPU 0, power on GPU 1, heat on GPU 2, errors on GPU 3),
    // then normal again.
    let series = [
        (reason("0", "GPU-0", "sw_thermal_slowdown"), "0x7 1x7 0x15"),
        (reason("0", "GPU-0", "gpu_idle"), "1x31"),
        (reason("1", "GPU-1", "sw_power_cap"), "0x7 1x7 0x15"),
        (reason("1", "GPU-1", "hw_thermal_slowdown"), "0x31"),
        (dcgm("DCGM_FI_DEV_GPU_TEMP", "2", "GPU-2"), "70x7 86x15 70x15"),
        (dcgm("DCGM_FI_DEV_SLOWDOWN_TEMP", "2", "GPU-2"), "89x39"),
        (dcgm("DCGM_FI_DEV_GPU_TEMP", "1", "GPU-1"), "80x39"),
        (dcgm("DCGM_FI_DEV_SLOWDOWN_TEMP", "1", "GPU-1"), "89x39"),
        (dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "3", "GPU-3"), "0x7 2x63"),
        (dcgm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "3", "GPU-3"), "0x7 5x63"),
        (dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0", "GPU-0"), "1x71"),
    ];
    let input: Vec<(&str, &str)> = series.iter().map(|(s, v)| (s.as_str(), *v)).collect();
    let device = |d: &str, u: &str| labels(&[("job", "gpuslice"), ("instance", "gpu-node-1:9494"), ("device", d), ("uuid", u)]);
    let gpu = |g: &str, u: &str| {
        let node = format!("nvidia{g}");
        labels(&[
            ("job", "gpuslice"),
            ("instance", "gpu-node-1:9494"),
            ("gpu", g),
            ("UUID", u),
            ("device", &node),
            ("modelName", "NVIDIA H200"),
        ])
    };
    let mut cases = Vec::new();
    for alert in ["GpusliceGpuThermalThrottling", "GpusliceGpuPowerThrottling", "GpusliceGpuNearSlowdownTemperature"] {
        // Before: nothing; the condition began at 2 minutes.
        cases.push(("1m45s", alert, vec![]));
    }
    cases.push(("2m30s", "GpusliceGpuThermalThrottling", vec![]));
    cases.push(("3m45s", "GpusliceGpuThermalThrottling", vec![device("0", "GPU-0")]));
    cases.push(("6m", "GpusliceGpuThermalThrottling", vec![]));
    cases.push(("2m30s", "GpusliceGpuPowerThrottling", vec![]));
    cases.push(("3m45s", "GpusliceGpuPowerThrottling", vec![device("1", "GPU-1")]));
    cases.push(("6m", "GpusliceGpuPowerThrottling", vec![]));
    cases.push(("3m", "GpusliceGpuNearSlowdownTemperature", vec![]));
    cases.push(("5m30s", "GpusliceGpuNearSlowdownTemperature", vec![gpu("2", "GPU-2")]));
    cases.push(("8m", "GpusliceGpuNearSlowdownTemperature", vec![]));
    cases.push(("1m45s", "GpusliceGpuUncorrectableEccErrors", vec![]));
    cases.push(("3m", "GpusliceGpuUncorrectableEccErrors", vec![gpu("3", "GPU-3")]));
    cases.push(("15m", "GpusliceGpuUncorrectableEccErrors", vec![]));
    cases.push(("1m45s", "GpusliceGpuCorrectableEccErrors", vec![]));
    cases.push(("3m", "GpusliceGpuCorrectableEccErrors", vec![gpu("3", "GPU-3")]));
    cases.push(("15m", "GpusliceGpuCorrectableEccErrors", vec![]));
    let covered: BTreeSet<&str> = cases.iter().filter(|(_, _, a)| !a.is_empty()).map(|(_, a, _)| *a).collect();
    let health = alert_rules_of(|group| group == HEALTH_GROUP);
    assert_eq!(covered, health.keys().map(String::as_str).collect(), "every device-health alert is shown firing");
    promtool_test("health", "15s", &input, &cases);
}

/// The power-throttling alert on what a real monitor says: simgpu held to
/// 300 W (`SIMGPU_POWER_LIMIT`) by a process that keeps it busy, between
/// two idle stretches. The scrapes become promtool's input as in the
/// test above; the alert fires at the end of the busy one only, with the
/// labels the monitor gives the series, and no other device-health alert
/// fires at any step.
#[test]
fn the_power_throttling_alert_fires_on_a_real_monitor_under_load() {
    let sim = Sim::new().memory("2GiB").context_memory("64MiB").shim().tenant("team-load").env("SIMGPU_POWER_LIMIT", "300");
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let capped = |m: &Metrics| m.value("gpuslice_device_clocks_event_reason_active", &[("device", "0"), ("reason", "sw_power_cap")]);
    let mut scrapes = vec![Some(monitor.metrics_until("the idle device", |m| capped(m) == Some(0.0)))];
    let load = sim.spawn(sim.c("compute_load").args(["kernel", "2000", "30"]));
    let busy = monitor.metrics_until("the power cap holding the clocks", |m| capped(m) == Some(1.0));
    let uuid = busy.find("gpuslice_device_clocks_event_reason_active", &[("device", "0")])[0].labels["uuid"].clone();
    scrapes.push(Some(busy));
    load.kill9();
    scrapes.push(Some(monitor.metrics_until("the device idle again", |m| capped(m) == Some(0.0))));
    monitor.stop();

    let rules = alert_rules_of(|group| group == HEALTH_GROUP);
    let throttled = vec![BTreeMap::from([("device".to_string(), "0".to_string()), ("uuid".to_string(), uuid)])];
    let mut expected: Vec<(usize, &str, Vec<Labels>)> = Vec::new();
    for (step, _) in scrapes.iter().enumerate() {
        for alert in rules.keys() {
            let firing = step == 1 && alert == "GpusliceGpuPowerThrottling";
            expected.push((step, alert, if firing { throttled.clone() } else { Vec::new() }));
        }
    }
    promtool_test_scrapes(&sim, &rules, &expected, &scrapes, "power-alert-test.json");
}
