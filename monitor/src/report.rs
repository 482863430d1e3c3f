//! `gpuslice report [--since 7d] [--by tenant|job|user|team] [--json] [--dir DIR]`:
//! what each tenant used over a window of the monitor's history, against
//! its cap, share and limit, with a recommendation by the rule of
//! [`crate::history::summary`]; or, `--by job`, `--by user` and `--by
//! team`, what each cluster job, user or team held and used
//! ([`crate::history::groups`]).
//!
//! The history is `<dir>/.monitor/history.sqlite`, in the monitor's own
//! directory (mode 0700): only root, or the user the monitor runs as, can
//! read it. Reads only; the monitor may be running.

use crate::discovery;
use crate::error::Error;
use crate::history::groups::{self, GroupKind, GroupSummary, Grouping};
use crate::history::store::{OpenError, Store};
use crate::history::summary::{self, percent_e4, short_duration, DeviceSummary, TenantSummary};
use crate::text::{human_bytes, render_rows};
use crate::top::procinfo::printable;
use clap::Args;
use serde::Serialize;
use std::fmt::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Args)]
pub struct ReportArgs {
    /// The ledger directory whose monitor kept the history (default: GPUSLICE_DIR, else /run/gpuslice).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
    /// How far back to look: a duration such as 7d, 24h or 2w.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = parse_since)]
    pub since: Duration,
    /// What to sum up: each tenant on each device, each cluster job, each
    /// user (the job and user its admission named, e.g. by Slurm's Prolog),
    /// or each team (as the monitor held its tenants in `[teams.NAME]`).
    #[arg(long, value_name = "GROUPING", value_enum, default_value_t = Grouping::Tenant)]
    pub by: Grouping,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// The history file to read (default: the one the monitor of --dir
    /// names, else <dir>/.monitor/history.sqlite).
    #[arg(long, value_name = "FILE")]
    pub history_file: Option<std::path::PathBuf>,
}

/// `--since`: a duration in gpuslice's one grammar ([`crate::duration`]).
fn parse_since(text: &str) -> Result<Duration, String> {
    crate::duration::parse(text)
}

/// The whole report, as `--json` prints it.
#[derive(Serialize)]
pub struct Report {
    pub history: String,
    /// The window asked for, Unix seconds.
    pub since_s: u64,
    pub until_s: u64,
    /// The oldest interval the history holds at all, Unix seconds.
    pub oldest_s: Option<u64>,
    /// The grouping asked for.
    pub by: Grouping,
    /// `--by tenant`: each tenant on each device (empty for another grouping).
    pub tenants: Vec<TenantSummary>,
    /// `--by job`, `--by user` or `--by team`: each group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<GroupSummary>>,
    pub devices: Vec<DeviceSummary>,
    /// The rule behind the recommendations, in words.
    pub rule: String,
}

/// The rule, as the report states it.
pub fn rule_text() -> String {
    format!(
        "memory: p99 of each active minute's peak, plus {}%, rounded up to a whole {}; never lowered after a refused allocation. \
         share and limit: p99 of each active minute's compute used, plus {}%, rounded up to a whole {}; a limit that throttled is never lowered.",
        summary::HEADROOM_PERCENT,
        human_bytes(summary::MEMORY_STEP_BYTES),
        summary::HEADROOM_PERCENT,
        percent_e4(summary::COMPUTE_STEP_E4),
    )
}

pub fn main(args: ReportArgs) -> Result<ExitCode, Error> {
    let dir = discovery::ledger_dir(args.dir.as_deref());
    if std::fs::metadata(&dir).is_err() {
        return Err(Error::Usage(format!("{}: no such ledger directory", dir.display())));
    }
    let path = args.history_file.clone().unwrap_or_else(|| crate::history::recorded_path(&dir));
    let store = Store::open_read(&path).map_err(|e| match e {
        OpenError::Missing => Error::Usage(format!(
            "no history at {}: the monitor of {} has not written one (it writes a row a minute; it may run with --no-history, or on another --dir)",
            path.display(),
            dir.display()
        )),
        OpenError::Denied(detail) => Error::Failed(format!(
            "cannot read the history ({detail}): it is in the monitor's own directory (mode 0700), which only root \
             or the monitor's user may read: run `gpuslice report` as root (e.g. with sudo)"
        )),
        OpenError::Other(detail) => Error::Failed(format!("cannot read the history: {detail}")),
    })?;
    let until_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let since_s = until_s.saturating_sub(args.since.as_secs());
    // One tenant and device at a time: a month of many is never in memory.
    let mut tenants = Vec::new();
    // A read that fails past the opening (a damaged page, a value of the
    // wrong type) names the file too.
    let failed = |e: String| Error::Failed(format!("{}: {e}", path.display()));
    // Grouped, a use per tenant and device (a few numbers) is kept instead.
    let mut uses = Vec::new();
    store
        .each_tenant_series(since_s, |rows| match args.by {
            Grouping::Tenant => tenants.extend(summary::summarize_one(rows)),
            _ => uses.extend(groups::uses(rows)),
        })
        .map_err(failed)?;
    let mut groups = groups::group(args.by, &uses);
    if let (Grouping::Team, Some(groups)) = (args.by, groups.as_mut()) {
        let peaks = store.team_memory_peaks(since_s).map_err(failed)?;
        for g in groups.iter_mut().filter(|g| g.kind == GroupKind::Team) {
            g.memory_together_peak_bytes = peaks.iter().filter(|(team, _, _)| *team == g.key).map(|(_, _, held)| *held).max();
        }
    }
    let mut devices = Vec::new();
    store.each_device_series(since_s, |rows| devices.extend(summary::summarize_devices(rows))).map_err(failed)?;
    let report = Report {
        history: path.display().to_string(),
        since_s,
        until_s,
        oldest_s: store.oldest_s().map_err(failed)?,
        by: args.by,
        tenants,
        groups,
        devices,
        rule: rule_text(),
    };
    if args.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| Error::Failed(format!("cannot write JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", table(&report));
    }
    Ok(ExitCode::SUCCESS)
}

/// The longest name a table shows; a tenant name is at most 63 bytes.
const NAME_SHOWN_MAX: usize = 128;

/// A name from the history as a table shows it. The file is read as
/// found: a newline or an escape code in a name must not forge a row or
/// drive the terminal, and a name of megabytes must neither flood the
/// screen nor overflow a column's width (which panics when formatted).
/// `--json` gives the name whole.
fn shown(name: &str) -> String {
    let mut text = printable(name);
    if let Some((cut, _)) = text.char_indices().nth(NAME_SHOWN_MAX) {
        text.truncate(cut);
        text.push('…');
    }
    text
}

fn time(unix_s: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(unix_s)).to_string()
}

/// The report for people: memory, then compute, then devices, then the rule.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "history: {}", report.history);
    let _ = writeln!(
        out,
        "window: {} to {} ({}){}",
        time(report.since_s),
        time(report.until_s),
        short_duration(report.until_s - report.since_s),
        match report.oldest_s {
            Some(oldest) if oldest > report.since_s => format!("; the history begins {}", time(oldest)),
            None => "; the history is empty".into(),
            _ => String::new(),
        }
    );
    if let Some(groups) = &report.groups {
        group_table(&mut out, report.by, groups);
        return out;
    }
    if report.tenants.is_empty() {
        let _ = writeln!(out, "\nno tenant recorded in the window");
        return out;
    }
    let dash = || "-".to_string();
    let _ = writeln!(out, "\nMEMORY");
    let mut rows =
        vec![["TENANT", "DEVICE", "RECORDED", "ACTIVE", "CAP", "PEAK", "P95", "P99", "REFUSED", "PROCS"].map(String::from).to_vec()];
    for t in &report.tenants {
        rows.push(vec![
            shown(&t.tenant),
            t.device_index.to_string(),
            short_duration(t.recorded_s),
            short_duration(t.active_s),
            t.memory_cap_bytes.map_or("none".into(), human_bytes),
            human_bytes(t.memory_peak_bytes),
            t.memory_p95_bytes.map_or_else(dash, human_bytes),
            t.memory_p99_bytes.map_or_else(dash, human_bytes),
            t.alloc_denied_total.to_string(),
            t.processes_peak.to_string(),
        ]);
    }
    render_rows(&mut out, &rows);

    let _ = writeln!(out, "\nCOMPUTE");
    let pct = |r: Option<f64>| r.map_or_else(dash, |r| percent_e4((r * 10_000.0).round() as u64));
    let mut rows = vec![["TENANT", "DEVICE", "SHARE", "LIMIT", "TARGET", "USED MEAN", "USED P99", "THROTTLED"].map(String::from).to_vec()];
    for t in &report.tenants {
        rows.push(vec![
            shown(&t.tenant),
            t.device_index.to_string(),
            pct(t.compute_share_ratio),
            pct(t.compute_limit_ratio),
            pct(t.compute_target_mean_ratio),
            pct(t.compute_used_mean_ratio),
            pct(t.compute_used_p99_ratio),
            short_duration(t.throttled_seconds as u64),
        ]);
    }
    render_rows(&mut out, &rows);

    let _ = writeln!(out, "\nACTIVITY");
    let cores = |c: Option<f64>| c.map_or_else(dash, |c| format!("{:.0} %", c * 100.0));
    let mut rows = vec![["TENANT", "DEVICE", "GPU MEAN", "CPU MEAN", "STATE"].map(String::from).to_vec()];
    for t in &report.tenants {
        rows.push(vec![
            shown(&t.tenant),
            t.device_index.to_string(),
            pct(t.gpu_mean_ratio),
            cores(t.cpu_mean_cores),
            t.activity.map_or_else(dash, |a| a.name().to_string()),
        ]);
    }
    render_rows(&mut out, &rows);

    let _ = writeln!(out, "\nRECOMMENDATIONS");
    for t in &report.tenants {
        let _ = writeln!(out, "{} on device {}:", shown(&t.tenant), t.device_index);
        let _ = writeln!(out, "  memory: {}", t.memory_advice.text);
        for advice in [&t.share_advice, &t.limit_advice].into_iter().flatten() {
            let _ = writeln!(out, "  compute: {}", advice.text);
        }
        if let Some(advice) = &t.activity_advice {
            let _ = writeln!(out, "  activity: {advice}");
        }
    }

    if !report.devices.is_empty() {
        let _ = writeln!(out, "\nDEVICES");
        let mut rows =
            vec![["INDEX", "UUID", "TOTAL", "PEAK USED", "MEAN UTIL", "PEAK TEMP", "PEAK POWER", "CLOCKS HELD"].map(String::from).to_vec()];
        for d in &report.devices {
            rows.push(vec![
                d.device_index.to_string(),
                shown(&d.device_uuid),
                human_bytes(d.memory_total_bytes),
                d.memory_used_peak_bytes.map_or_else(dash, human_bytes),
                pct(d.utilization_mean_ratio),
                d.temperature_peak_c.map_or_else(dash, |t| format!("{t} C")),
                d.power_peak_watts.map_or_else(dash, |w| format!("{w:.0} W")),
                pct(d.throttled_ratio),
            ]);
        }
        render_rows(&mut out, &rows);
    }
    let _ = writeln!(out, "\nrule: {}", report.rule);
    out
}

/// The table of `--by job`, `--by user` or `--by team`.
fn group_table(out: &mut String, by: Grouping, groups: &[GroupSummary]) {
    if groups.is_empty() {
        let _ = writeln!(out, "\nno tenant recorded in the window");
        return;
    }
    let list =
        |names: &[String]| if names.is_empty() { "-".to_string() } else { names.iter().map(|n| shown(n)).collect::<Vec<_>>().join(",") };
    let seconds = |s: f64| format!("{s:.1}s");
    let (title, head) = match by {
        Grouping::User => ("BY USER", ["USER", "JOBS", "ACCOUNTS", "TENANTS"]),
        Grouping::Team => ("BY TEAM", ["TEAM", "USERS", "ACCOUNTS", "TENANTS"]),
        _ => ("BY JOB", ["JOB", "USER", "ACCOUNT", "TENANTS"]),
    };
    let _ = writeln!(out, "\n{title}");
    let mut rows = vec![head.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    rows[0].extend(["DEVICES", "SHARE", "HELD", "DEVICE TIME HELD", "DEVICE TIME USED", "MEMORY PEAK", "REFUSED"].map(String::from));
    if by == Grouping::Team {
        rows[0].push("TOGETHER PEAK".into());
    }
    for g in groups {
        // A tenant of no job is shown as such: its name is its own choice
        // and may look like a job's id.
        // Under --by team, a tenant of no team is said to be one.
        let key = match (g.kind, by) {
            (GroupKind::Tenant, _) => format!("tenant {}", shown(&g.key)),
            (GroupKind::None, Grouping::Team) => "(no team)".into(),
            (GroupKind::NotRecorded, _) => "(not recorded)".into(),
            _ => shown(&g.key),
        };
        let mut row = match by {
            Grouping::User => vec![key, g.jobs.len().to_string(), list(&g.accounts), list(&g.tenants)],
            Grouping::Team => vec![key, list(&g.users), list(&g.accounts), list(&g.tenants)],
            _ => vec![key, list(&g.users), list(&g.accounts), list(&g.tenants)],
        };
        row.extend([
            g.devices.len().to_string(),
            g.share_ratio.map_or_else(|| "-".into(), |r| percent_e4((r * 10_000.0).round() as u64)),
            short_duration(g.held_s),
            seconds(g.allocated_device_s),
            seconds(g.used_device_s),
            human_bytes(g.memory_peak_bytes),
            g.alloc_denied_total.to_string(),
        ]);
        if by == Grouping::Team {
            row.push(g.memory_together_peak_bytes.map_or_else(|| "-".into(), human_bytes));
        }
        rows.push(row);
    }
    render_rows(out, &rows);
    let _ = writeln!(
        out,
        "\nHELD: from the first to the last interval recorded of each job (or tenant of no job), added up; \
         DEVICE TIME: share (held) or compute charged (used) times the time, in device-seconds{}",
        if by == Grouping::Team {
            "; MEMORY PEAK: the most one tenant held on one device; TOGETHER PEAK: the most the team's tenants' peaks on one \
             device added up to in one interval (at most what they held there at once), for its quota; (no team): tenants \
             the monitor held in no team; (not recorded): intervals written before the history recorded teams"
        } else {
            ""
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::aggregate::TenantRow;

    #[test]
    fn the_table_shows_each_tenants_figures_and_recommendation() {
        let gib = 1u64 << 30;
        let rows: Vec<TenantRow> = (0..100)
            .map(|i| TenantRow {
                start_s: 1_000_000 + i * 60,
                span_s: 60,
                tenant: "team-a".into(),
                device_uuid: "GPU-0".into(),
                device_index: 0,
                rounds: 240,
                active_rounds: 240,
                memory_peak_bytes: 5 * gib + gib / 5,
                memory_mean_bytes: 5 * gib,
                driver_memory_peak_bytes: None,
                memory_cap_bytes: Some(16 * gib),
                compute_share_e4: Some(5000),
                compute_limit_e4: None,
                compute_used_e4: Some(1200),
                compute_target_e4: Some(5000),
                throttled_ns: 0,
                denied: 0,
                processes_peak: 3,
                cpu_e4: Some(9000),
                gpu_e4: Some(200),
                origin: None,
                team: crate::history::aggregate::TeamOf::NoTeam,
            })
            .collect();
        let report = Report {
            history: "/run/gpuslice/.monitor/history.sqlite".into(),
            since_s: 1_000_000,
            until_s: 1_000_000 + 7 * 86_400,
            oldest_s: Some(1_000_000),
            by: Grouping::Tenant,
            tenants: summary::summarize(&rows),
            groups: None,
            devices: vec![],
            rule: rule_text(),
        };
        let text = table(&report);
        let memory_row: Vec<&str> = text
            .lines()
            .find(|l| l.starts_with("team-a") && l.contains("GiB"))
            .unwrap_or_else(|| panic!("{text}"))
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(memory_row, ["team-a", "0", "1h 40m", "1h 40m", "16.0 GiB", "5.2 GiB", "5.2 GiB", "5.2 GiB", "0", "3"], "{text}");
        assert!(text.contains("  memory: cap 16.0 GiB, p99 5.2 GiB over 1h 40m: 6.0 GiB would do\n"), "{text}");
        assert!(text.contains("  compute: share 50 %, p99 used 12 % over 1h 40m: 15 % would do\n"), "{text}");
        // 12 % of the device charged, 90 % of a core busy: busy by the rule.
        let activity_row: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "ACTIVITY")
            .find(|l| l.starts_with("team-a"))
            .unwrap_or_else(|| panic!("{text}"))
            .split_whitespace()
            .collect();
        assert_eq!(activity_row, ["team-a", "0", "12", "%", "90", "%", "busy"], "{text}");
        assert!(text.contains("rule: memory: p99 of each active minute's peak, plus 10%, rounded up to a whole 512.0 MiB"), "{text}");
    }

    /// A busy minute of `tenant` on GPU-0 from `start_s`, holding 1 GiB,
    /// with no settings, job or team: what the tests below vary.
    fn minute_of(tenant: &str, start_s: u64) -> TenantRow {
        TenantRow {
            start_s,
            span_s: 60,
            tenant: tenant.into(),
            device_uuid: "GPU-0".into(),
            device_index: 0,
            rounds: 240,
            active_rounds: 240,
            memory_peak_bytes: 1 << 30,
            memory_mean_bytes: 1 << 30,
            driver_memory_peak_bytes: None,
            memory_cap_bytes: None,
            compute_share_e4: None,
            compute_limit_e4: None,
            compute_used_e4: None,
            compute_target_e4: None,
            throttled_ns: 0,
            denied: 0,
            processes_peak: 1,
            cpu_e4: None,
            gpu_e4: None,
            origin: None,
            team: crate::history::aggregate::TeamOf::NoTeam,
        }
    }

    #[test]
    fn the_job_table_shows_each_jobs_user_share_and_time_and_names_are_made_printable() {
        let row = |tenant: &str, job: &str, user: &str, start_s: u64| TenantRow {
            memory_cap_bytes: Some(2 << 30),
            compute_share_e4: Some(2500),
            compute_used_e4: Some(1000),
            origin: Some(crate::history::aggregate::Origin {
                job: Some(job.into()),
                user: Some(user.into()),
                account: Some("physics".into()),
            }),
            ..minute_of(tenant, start_s)
        };
        let rows: Vec<TenantRow> = (0..10).map(|i| row("slurm-42", "42", "alice\nforged", 1_000_000 + i * 60)).collect();
        let mut uses = groups::uses(&rows);
        // A tenant of no job that calls itself 42 is a group of its own, shown as a tenant.
        uses.extend(groups::uses(&[TenantRow { origin: None, ..row("42", "-", "-", 1_000_000) }]));
        let report = Report {
            history: "h".into(),
            since_s: 1_000_000,
            until_s: 1_000_000 + 3600,
            oldest_s: Some(1_000_000),
            by: Grouping::Job,
            tenants: vec![],
            groups: groups::group(Grouping::Job, &uses),
            devices: vec![],
            rule: rule_text(),
        };
        let text = table(&report);
        let tenant: Vec<&str> =
            text.lines().find(|l| l.starts_with("tenant 42 ")).unwrap_or_else(|| panic!("{text}")).split_whitespace().collect();
        assert_eq!(tenant[..6], ["tenant", "42", "-", "-", "42", "1"], "{text}");
        let line: Vec<&str> = text.lines().find(|l| l.starts_with("42 ")).unwrap_or_else(|| panic!("{text}")).split_whitespace().collect();
        // 25 % for 10 minutes: 150 device-seconds held, 60 used (10 %).
        assert_eq!(
            line,
            ["42", "alice?forged", "physics", "slurm-42", "1", "25", "%", "10m", "150.0s", "60.0s", "1.0", "GiB", "0"],
            "{text}"
        );
    }

    #[test]
    fn the_team_table_says_which_tenants_are_in_no_team() {
        use crate::history::aggregate::TeamOf;
        let row = |tenant: &str, team: TeamOf, start_s: u64| TenantRow { compute_used_e4: Some(2500), team, ..minute_of(tenant, start_s) };
        let mut uses = groups::uses(&(0..10).map(|i| row("lab-1", TeamOf::Team("lab".into()), 1_000_000 + i * 60)).collect::<Vec<_>>());
        uses.extend(groups::uses(&[row("lab-squat", TeamOf::NoTeam, 1_000_000)]));
        uses.extend(groups::uses(&[row("lab-1", TeamOf::NotRecorded, 900_000)]));
        let mut grouped = groups::group(Grouping::Team, &uses).unwrap();
        grouped[0].memory_together_peak_bytes = Some(3 << 30);
        let report = Report {
            history: "h".into(),
            since_s: 900_000,
            until_s: 1_000_000 + 3600,
            oldest_s: Some(900_000),
            by: Grouping::Team,
            tenants: vec![],
            groups: Some(grouped),
            devices: vec![],
            rule: rule_text(),
        };
        let text = table(&report);
        let cells = |start: &str| -> Vec<String> {
            let line = text.lines().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("{text}"));
            line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect()
        };
        // 25 % of the device for 10 minutes: 150 device-seconds used.
        assert_eq!(cells("lab "), ["lab", "-", "-", "lab-1", "1", "-", "10m", "0.0s", "150.0s", "1.0 GiB", "0", "3.0 GiB"], "{text}");
        assert_eq!(cells("(no team) ")[..4], ["(no team)", "-", "-", "lab-squat"], "{text}");
        assert_eq!(cells("(not recorded) ")[..4], ["(not recorded)", "-", "-", "lab-1"], "{text}");
        assert!(text.contains("\nBY TEAM\nTEAM "), "{text}");
    }

    #[test]
    fn a_bad_since_says_what_is_accepted() {
        assert_eq!(parse_since("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert!(parse_since("7 dayz").unwrap_err().contains(crate::duration::FORMAT));
    }
}
