//! The Grafana dashboard in `deploy/grafana/` is valid JSON, every panel
//! has a query, every query (the panels' and the template variables') is
//! PromQL that promtool accepts, and every metric a query names is one the
//! monitor exports: its families are read from a real `/metrics` page of a
//! monitor on the simulated GPU, so a renamed metric fails here and not on
//! an operator's empty graph.

#[path = "monitor_support/mod.rs"]
mod monitor_support;

use gpuslice_tests::{repo_root, Sim};
use monitor_support::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Command;

const DASHBOARD: &str = "deploy/grafana/gpuslice-dashboard.json";

fn dashboard() -> Value {
    let path = repo_root().join(DASHBOARD);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"))
}

/// Every query of the dashboard: (where, PromQL).
fn queries(dashboard: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let panels = dashboard["panels"].as_array().expect("panels");
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap_or("?");
        let targets = panel["targets"].as_array().map(Vec::as_slice).unwrap_or_default();
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap_or_else(|| panic!("panel {title:?}: a target without expr"));
            found.push((format!("panel {title:?}"), expr.to_string()));
        }
    }
    for variable in dashboard["templating"]["list"].as_array().expect("templating.list") {
        let query = match &variable["query"] {
            Value::Object(q) => q.get("query").and_then(Value::as_str).unwrap_or_default().to_string(),
            _ => continue,
        };
        // `label_values(SELECTOR, LABEL)` is Grafana's: its selector is PromQL.
        let selector = query
            .strip_prefix("label_values(")
            .and_then(|rest| rest.rsplit_once(','))
            .map(|(selector, _)| selector.to_string())
            .unwrap_or_else(|| panic!("variable {}: expected label_values(SELECTOR, LABEL), got {query:?}", variable["name"]));
        found.push((format!("variable {}", variable["name"]), selector));
    }
    found
}

/// Grafana's variables, as values PromQL accepts.
fn substituted(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m").replace("$instance", ".*").replace("$tenant", ".*")
}

/// The metric names an expression reads: the identifiers left once label
/// matchers, strings, ranges, grouping clauses, numbers and function calls
/// are taken out.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Label matchers and strings, blanked out.
    let mut text = String::new();
    let (mut depth_braces, mut in_string) = (0, false);
    for c in expr.chars() {
        let hidden = in_string || depth_braces > 0;
        match c {
            '"' => in_string = !in_string,
            '{' if !in_string => depth_braces += 1,
            '}' if !in_string => depth_braces -= 1,
            _ => {}
        }
        text.push(if hidden || matches!(c, '"' | '{' | '}') { ' ' } else { c });
    }
    // Ranges (`[5m]`) and grouping clauses (`by (le)`) name no metric.
    let mut cleaned = String::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        cleaned.push_str(&rest[..open]);
        rest = rest[open..].split_once(']').map_or("", |(_, after)| after);
    }
    cleaned.push_str(rest);
    let words: Vec<(usize, &str)> = {
        let mut words = Vec::new();
        let mut start = None;
        for (i, c) in cleaned.char_indices().chain(std::iter::once((cleaned.len(), ' '))) {
            let word_char = c.is_ascii_alphanumeric() || c == '_' || c == ':';
            match (start, word_char) {
                (None, true) => start = Some(i),
                (Some(s), false) => {
                    words.push((s, &cleaned[s..i]));
                    start = None;
                }
                _ => {}
            }
        }
        words
    };
    let mut names = BTreeSet::new();
    let mut skip_group = false;
    for (at, word) in words {
        let next = cleaned[at + word.len()..].trim_start().chars().next();
        if ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&word) {
            skip_group = true;
            continue;
        }
        if skip_group {
            // Inside `by (a, b)`: words until the closing parenthesis.
            if cleaned[at + word.len()..].trim_start().starts_with(')') {
                skip_group = false;
            }
            continue;
        }
        let number = word.chars().next().is_some_and(|c| c.is_ascii_digit()) || word == "Inf" || word == "NaN";
        // Aggregations may put their grouping before their parenthesis.
        let aggregation = ["sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile"]
            .contains(&word);
        let keyword = aggregation || ["and", "or", "unless", "bool", "offset"].contains(&word);
        if number || keyword || next == Some('(') {
            continue;
        }
        names.insert(word.to_string());
    }
    names
}

#[test]
fn metric_names_are_found_in_expressions() {
    assert_eq!(
        metric_names(r#"histogram_quantile(0.9, sum by (le) (rate(a_bucket{x=~"$i"}[5m]))) or vector(0)"#),
        BTreeSet::from(["a_bucket".to_string()])
    );
    assert_eq!(metric_names(r#"b{tenant="x{y}"} < +Inf and on (job) c"#), BTreeSet::from(["b".to_string(), "c".to_string()]));
    assert_eq!(metric_names("sum by (kind) (increase(d[1h]))"), BTreeSet::from(["d".to_string()]));
}

#[test]
fn every_query_is_promql_and_names_only_metrics_the_monitor_exports() {
    let dashboard = dashboard();
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string(), "a dashboard has a title and a uid");
    let queries = queries(&dashboard);
    assert!(queries.len() >= 10, "{} queries", queries.len());
    // A device-health row, between the host's panels and the tenants'.
    let rows: Vec<&str> =
        dashboard["panels"].as_array().expect("panels").iter().filter(|p| p["type"] == "row").filter_map(|p| p["title"].as_str()).collect();
    assert_eq!(rows, ["Host", "Device health", "Tenants"], "the dashboard's rows");

    // What a real monitor exports: every family, with a histogram's series.
    let sim = Sim::new().memory("1GiB").context_memory("64MiB");
    let monitor = Monitor::start(&sim, MonitorOptions::default());
    let exported = monitor.metrics();
    monitor.stop();
    let mut names: BTreeSet<String> = BTreeSet::new();
    for (family, kind) in &exported.types {
        names.insert(family.clone());
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{family}{suffix}"));
            }
        }
    }
    assert!(names.contains("gpuslice_build_info"), "{names:?}");

    let mut read = BTreeSet::new();
    for (place, expr) in &queries {
        let used = metric_names(&substituted(expr));
        assert!(!used.is_empty(), "{place}: {expr:?} reads no metric");
        for name in used {
            assert!(names.contains(&name), "{place}: {expr:?} reads {name}, which the monitor does not export");
            read.insert(name);
        }
    }
    for wanted in [
        "gpuslice_tenant_memory_used_bytes",
        "gpuslice_tenant_memory_limit_bytes",
        "gpuslice_tenant_compute_target_ratio",
        "gpuslice_tenant_compute_used_ratio",
        "gpuslice_tenant_throttled_seconds_total",
        "gpuslice_tenant_alloc_denied_total",
        "gpuslice_untracked_process_memory_bytes",
        "gpuslice_queue_jobs",
        "gpuslice_device_utilization_ratio",
        "gpuslice_tenant_allocation_info",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_SLOWDOWN_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "gpuslice_device_clocks_event_reason_active",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    ] {
        assert!(read.contains(wanted), "the dashboard shows no {wanted}");
    }

    // promtool parses each query, as a recording rule.
    let rules: Vec<String> = queries
        .iter()
        .enumerate()
        .map(|(i, (_, expr))| {
            format!("      - record: dashboard_query_{i}\n        expr: {}\n", serde_json::to_string(&substituted(expr)).unwrap())
        })
        .collect();
    let file = sim.dir().join("dashboard-queries.yaml");
    std::fs::write(&file, format!("groups:\n  - name: dashboard\n    rules:\n{}", rules.concat())).unwrap();
    let promtool = std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|dir| dir.join("promtool")).find(|p| p.is_file()))
        .expect("promtool is not installed: run `bash scripts/setup.sh` (Debian's prometheus package)");
    let out = Command::new(promtool).args(["check", "rules"]).arg(&file).output().expect("promtool runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains(&format!("SUCCESS: {} rules found", queries.len())), "{text}");
}
