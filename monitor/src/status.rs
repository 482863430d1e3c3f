//! `gpuslice status [--dir DIR] [--json]`: what the ledgers and NVML say now,
//! as a table for people or JSON for scripts. Reads only; works with or
//! without a running monitor. A ledger directory named with `--dir` or
//! `GPUSLICE_DIR` that does not exist is an error (a typo must not look
//! like a host where nothing runs); the default one missing only means no
//! tenant has run here yet. The host is read as [`crate::sampler`] reads it.
//!
//! In the tables a setting that is not set (no cap, no limit, no share) is
//! `none`, and a figure that is not known or does not apply (no NVML, no
//! device) is `-`, as in `gpuslice devices`.

use crate::discovery::HostArgs;
use crate::error::Error;
use crate::sampler::collect_view;
use crate::snapshot::Snapshot;
use crate::text::{device_name, human_bytes, render_rows};
use clap::Args;
use std::fmt::Write;
use std::process::ExitCode;

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub host: HostArgs,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// The monitor's configuration, to show each team it names (`[teams]`)
    /// as this file puts tenants in them, instead of as the running monitor
    /// does (which `status` shows by itself, where it may read the
    /// monitor's directory): its members' memory against its quota, its
    /// share, what it gets and uses.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}

pub fn main(args: StatusArgs) -> Result<ExitCode, Error> {
    let view = collect_view(&args.host)?;
    for note in &view.notes {
        eprintln!("gpuslice status: {note}");
    }
    for warning in &view.warnings {
        eprintln!("gpuslice status: warning: {warning}");
    }
    let allocations = allocations(&view.dir);
    let teams = match &args.config {
        Some(path) => {
            let mut config = crate::config::load(path).map_err(|e| Error::Usage(format!("bad configuration: {e}")))?;
            // The tenants the monitor admitted are governed, as in its own
            // effective configuration (teams count only governed tenants).
            for tenant in allocations.iter().flatten().filter_map(|a| a.tenant.clone()) {
                config.tenants.entry(tenant).or_default();
            }
            // Teams that name accounts: the tenants the monitor admitted
            // with one, as its admission records say.
            let admitted = allocations
                .iter()
                .flatten()
                .filter_map(|a| Some((a.tenant.as_deref()?, a.labels.get(crate::allocation::ACCOUNT_LABEL)?.as_str())));
            config.resolve_accounts(admitted);
            // Queued jobs' tenants, in their owners' teams (`users`), as
            // the monitor's board lists the running jobs and their owners.
            if let Ok(queue) = crate::queue::view(&view.dir).map(|q| q.jobs) {
                let running = queue.iter().filter(|j| j.state == crate::queue::store::JobState::Running);
                config.join_queue_tenants(running.map(|j| (j.tenant.as_str(), j.uid)));
            }
            Some(Teams { figures: crate::teams::figures(&config, &view.snapshot), by: "by the configuration", members: None })
        }
        // The running monitor's own decision, where it published one.
        None => view.teams.as_ref().map(|membership| Teams {
            figures: crate::teams::figures_of(membership, &view.snapshot),
            by: "as the monitor holds them",
            members: Some(membership),
        }),
    };
    if args.json {
        let mut value = serde_json::to_value(&view.snapshot).map_err(|e| Error::Failed(format!("cannot write JSON: {e}")))?;
        if let (Some(object), Some(list)) = (value.as_object_mut(), &allocations) {
            object.insert("allocations".into(), serde_json::to_value(list).unwrap_or_default());
        }
        if let (Some(object), Some(teams)) = (value.as_object_mut(), &teams) {
            object.insert("teams".into(), serde_json::to_value(&teams.figures).unwrap_or_default());
            if let Some(membership) = teams.members {
                let members: serde_json::Map<String, serde_json::Value> =
                    membership.teams.iter().map(|t| (t.team.clone(), serde_json::json!(t.members))).collect();
                object.insert("team_members".into(), members.into());
            }
        }
        let text = serde_json::to_string_pretty(&value).map_err(|e| Error::Failed(format!("cannot write JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", table(&view.snapshot, &view.dir));
        if let Some(teams) = &teams {
            print!("{}", team_table(&view.snapshot, teams));
        }
        if let Some(list) = &allocations {
            print!("{}", allocation_table(list));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The tenants a cluster's node agent admitted (Kubernetes claims, Slurm
/// jobs), as the monitor's control socket lists them; `None` where no
/// monitor answers (or this user may not ask it), which the tables then
/// leave out.
fn allocations(dir: &std::path::Path) -> Option<Vec<crate::allocation::Answer>> {
    let answer = crate::allocation::call(dir, &crate::allocation::Request::List, std::time::Duration::from_secs(2)).ok()?;
    answer.ok.then(|| answer.tenants.unwrap_or_default())
}

/// The teams `status` shows, and whose word they are.
pub struct Teams<'a> {
    /// Each team on each device a member has a ledger entry for.
    pub figures: Vec<crate::teams::TeamDeviceFigures>,
    /// Whose decision: the file given, or the running monitor.
    pub by: &'static str,
    /// The monitor's membership, every team with its members.
    pub members: Option<&'a crate::teams::membership::Membership>,
}

/// Each team on each device its members used; a team of the monitor's
/// that none of its members has used a device of is one row with `-`.
pub fn team_table(snapshot: &Snapshot, teams: &Teams) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "\nTEAMS ({})", teams.by);
    let mut rows = vec![vec![
        "TEAM".into(),
        "DEVICE".into(),
        "MEMBERS".into(),
        "MEMORY HELD".into(),
        "QUOTA".into(),
        "OVER QUOTA".into(),
        "SHARE".into(),
        "LIMIT".into(),
        "TARGET".into(),
        "USED".into(),
    ]];
    let percent = |r: f64| format!("{:.0}%", r * 100.0);
    let mut idle: Vec<Vec<String>> = Vec::new();
    for team in teams.members.iter().flat_map(|m| &m.teams).filter(|t| !teams.figures.iter().any(|f| f.team == t.team)) {
        let ratio = |e4: u32| if e4 == 0 { "none".to_string() } else { percent(f64::from(e4) / 10_000.0) };
        let s = team.other_devices;
        idle.push(vec![
            team.team.clone(),
            "-".into(),
            "0".into(),
            "0 B".into(),
            s.memory_quota_bytes.map_or("none".into(), human_bytes),
            "-".into(),
            ratio(s.share_ratio_e4),
            ratio(s.limit_ratio_e4),
            "-".into(),
            "-".into(),
        ]);
    }
    for f in &teams.figures {
        rows.push(vec![
            f.team.clone(),
            device_name(snapshot, f.index, &f.uuid),
            f.members.to_string(),
            human_bytes(f.memory_used_bytes.max(f.driver_memory_used_bytes.unwrap_or(0))),
            f.memory_quota_bytes.map_or("none".into(), human_bytes),
            f.over_quota_bytes().map_or("-".into(), human_bytes),
            f.compute_share_ratio.map_or("none".into(), percent),
            f.compute_limit_ratio.map_or("none".into(), percent),
            percent(f.compute_target_ratio),
            percent(f.compute_used_ratio),
        ]);
    }
    rows.extend(idle);
    render_rows(&mut out, &rows);
    out
}

/// Who each admitted tenant is: its origin and, from its labels, the
/// Kubernetes namespace, pod and claim, or the Slurm job and user.
pub fn allocation_table(list: &[crate::allocation::Answer]) -> String {
    let mut out = String::new();
    if list.is_empty() {
        return out;
    }
    let _ = writeln!(out, "\nALLOCATIONS (admitted by a cluster's node agent)");
    let mut rows = vec![vec!["TENANT".into(), "STATE".into(), "ORIGIN".into(), "NAMESPACE".into(), "POD".into(), "CLAIM / JOB".into()]];
    for a in list {
        let label = |key: &str| a.labels.get(key).cloned().unwrap_or_else(|| "-".into());
        let claim_or_job = a.labels.get("claim").or_else(|| a.labels.get("job")).cloned().unwrap_or_else(|| "-".into());
        rows.push(vec![
            a.tenant.clone().unwrap_or_default(),
            a.state.clone().unwrap_or_else(|| "-".into()),
            label("origin"),
            label("namespace"),
            label("pod"),
            claim_or_job,
        ]);
    }
    render_rows(&mut out, &rows);
    out
}

/// The human-readable form: devices, then tenants, then their processes.
pub fn table(snapshot: &Snapshot, dir: &std::path::Path) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "ledger directory: {}   NVML: {}", dir.display(), if snapshot.nvml { "yes" } else { "no (ledger-only)" });
    if !snapshot.nvml && !snapshot.devices.is_empty() {
        // The ledgers key devices by UUID alone, in the order a tenant's
        // processes first saw them: only NVML knows the host's numbering.
        let _ = writeln!(
            out,
            "without NVML, INDEX is the order the tenants' ledgers list devices in, not the host's (nvidia-smi's) index, \
             and a MIG device's UUID is shown as GPU-…: match devices by UUID"
        );
    }
    let _ = writeln!(out, "\nDEVICES");
    let mut rows = vec![vec!["INDEX".into(), "UUID".into(), "MEMORY USED".into(), "TOTAL".into(), "UTIL".into()]];
    for d in &snapshot.devices {
        rows.push(vec![
            device_name(snapshot, d.index, &d.uuid),
            d.uuid.clone(),
            d.memory_used_bytes.map_or("-".into(), human_bytes),
            human_bytes(d.memory_total_bytes),
            d.utilization_ratio.map_or("-".into(), |r| format!("{:.0}%", r * 100.0)),
        ]);
    }
    render_rows(&mut out, &rows);

    let _ = writeln!(out, "\nTENANTS");
    let mut rows = vec![vec![
        "TENANT".into(),
        "DEVICE".into(),
        "MEMORY USED".into(),
        "CAP".into(),
        "CAP SET BY".into(),
        "PROCESSES".into(),
        "DENIED".into(),
        "DRIVER SEES".into(),
        "COMPUTE LIMIT".into(),
        "SHARE".into(),
        "PRIORITY".into(),
        "TARGET".into(),
        "USED".into(),
    ]];
    let percent = |r: f64| format!("{:.0}%", r * 100.0);
    for t in &snapshot.tenants {
        if t.devices.is_empty() {
            let mut row = vec![t.name.clone(), "-".into(), "0 B".into(), "-".into(), "-".into(), "0".into(), "0".into(), "-".into()];
            row.extend(["-".into(), "-".into(), "-".into(), "-".into(), "-".into()]);
            rows.push(row);
        }
        for d in &t.devices {
            rows.push(vec![
                t.name.clone(),
                device_name(snapshot, d.index, &d.uuid),
                human_bytes(d.memory_used_bytes),
                d.memory_limit_bytes.map_or("none".into(), human_bytes),
                d.policy_source.into(),
                d.processes.to_string(),
                d.alloc_denied_total.to_string(),
                d.driver_memory_used_bytes.map_or("-".into(), human_bytes),
                d.compute_limit_ratio.map_or("none".into(), percent),
                d.compute_share_ratio.map_or("none".into(), percent),
                d.compute_priority.to_string(),
                if crate::compute::share_unenforced(snapshot, d) {
                    "not enforced".into()
                } else {
                    d.compute_target_ratio.map_or("-".into(), percent)
                },
                d.compute_used_ratio.map_or("-".into(), percent),
            ]);
        }
    }
    render_rows(&mut out, &rows);

    let _ = writeln!(out, "\nPROCESSES");
    let mut rows = vec![vec![
        "TENANT".into(),
        "PID".into(),
        "NS PID".into(),
        "SLOT".into(),
        "MEMORY USED".into(),
        "DRIVER SEES".into(),
        "STATE".into(),
    ]];
    for t in &snapshot.tenants {
        for p in &t.processes {
            rows.push(vec![
                t.name.clone(),
                p.pid.to_string(),
                p.ns_pid.to_string(),
                p.slot.to_string(),
                human_bytes(p.memory_used_bytes),
                p.driver_memory_used_bytes.map_or("-".into(), human_bytes),
                if p.alive { "alive".into() } else { "dead, awaiting reclaim".into() },
            ]);
        }
    }
    render_rows(&mut out, &rows);
    if !snapshot.untracked_processes.is_empty() {
        let _ = writeln!(out, "\nUNTRACKED (using a GPU without the shim)");
        let mut rows = vec![vec!["DEVICE".into(), "PID".into(), "MEMORY USED".into()]];
        for u in &snapshot.untracked_processes {
            rows.push(vec![u.device.to_string(), u.pid.to_string(), human_bytes(u.memory_used_bytes)]);
        }
        render_rows(&mut out, &rows);
    }
    out
}
