//! The tables of one frame, built from a [`Snapshot`], the queue and what
//! `/proc` says of each process: devices, teams (where the running monitor
//! published who is in which), tenants (memory against cap, compute
//! against target), processes, untracked processes and the queue.
//! `--once` and the live view show the same tables; see [`super::table`].

use super::procinfo::{elapsed_text, ProcInfo, Users};
use super::table::{self, Bar, Cell, Column, Table, Tone};
use crate::queue::store::{Job, JobState};
use crate::snapshot::{ProcessView, Snapshot, TenantDeviceView, TenantView};
use crate::text::{device_name, human_bytes};
use std::collections::HashMap;

/// The order of the tenant and process rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// By device, then tenant (processes: then pid).
    Device,
    /// Most memory first.
    Memory,
    /// Most device time first (tenants: used; processes: SM).
    Compute,
    /// By tenant name.
    Tenant,
    /// By pid (tenants: by device).
    Pid,
}

impl SortKey {
    pub const ALL: [SortKey; 5] = [SortKey::Device, SortKey::Memory, SortKey::Compute, SortKey::Tenant, SortKey::Pid];

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Device => "device",
            SortKey::Memory => "memory",
            SortKey::Compute => "compute",
            SortKey::Tenant => "tenant",
            SortKey::Pid => "pid",
        }
    }

    pub fn next(self) -> SortKey {
        let at = SortKey::ALL.iter().position(|k| *k == self).unwrap_or(0);
        SortKey::ALL[(at + 1) % SortKey::ALL.len()]
    }
}

/// How the rows are ordered: a key, and whether reversed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sort {
    pub key: SortKey,
    pub reversed: bool,
}

impl Default for Sort {
    fn default() -> Sort {
        Sort { key: SortKey::Device, reversed: false }
    }
}

/// Everything a frame is built from besides the snapshot.
pub struct Extra<'a> {
    pub jobs: &'a [QueuedJob],
    /// `/proc` facts by host pid, for live processes.
    pub procs: &'a HashMap<u32, ProcInfo>,
    pub sort: Sort,
    /// Who is in which team, as the running monitor holds them.
    pub teams: Option<&'a crate::teams::membership::Membership>,
}

/// The titles of the tables that take a selection.
pub const TENANTS: &str = "TENANTS";
pub const PROCESSES: &str = "PROCESSES";

fn percent(ratio: f64) -> String {
    format!("{:.0}%", ratio * 100.0)
}

/// Memory near a cap or a device's total (90%) is worth a look; over it,
/// an alert.
pub fn fill_tone(used_bytes: u64, of_bytes: u64) -> Tone {
    if used_bytes > of_bytes {
        Tone::Alert
    } else if used_bytes.saturating_mul(10) >= of_bytes.saturating_mul(9) {
        Tone::Warn
    } else {
        Tone::Plain
    }
}

/// `used of` as a percentage cell, `-` where the whole is unknown or zero.
pub fn fill_cell(used_bytes: Option<u64>, of_bytes: Option<u64>) -> Cell {
    match (used_bytes, of_bytes) {
        (Some(used), Some(of)) if of > 0 => Cell::toned(percent(used as f64 / of as f64), fill_tone(used, of)),
        _ => Cell::plain("-"),
    }
}

/// A bar of `used` against `of` (a cap, or the device when there is none).
fn memory_bar(used_bytes: u64, of_bytes: Option<u64>) -> Cell {
    match of_bytes {
        Some(of) if of > 0 => Cell::bar(Bar { fill_ratio: used_bytes as f64 / of as f64, mark_ratio: None }, fill_tone(used_bytes, of)),
        _ => Cell::bar(Bar { fill_ratio: 0.0, mark_ratio: None }, Tone::Plain),
    }
}

/// Each device's UUID cut to its prefix and first 8 hex digits, longer
/// where two devices would read the same.
pub fn short_uuids(uuids: &[&str]) -> HashMap<String, String> {
    let mut short = HashMap::new();
    for uuid in uuids {
        let mut length = "GPU-".len() + 8;
        while length < uuid.len() && uuids.iter().any(|other| other != uuid && other.get(..length) == uuid.get(..length)) {
            length += 1;
        }
        short.insert(uuid.to_string(), uuid.get(..length.min(uuid.len())).unwrap_or(uuid).to_string());
    }
    short
}

/// The device table's columns, then `$extra`.
macro_rules! device_columns {
    ($($extra:expr),*) => {
        &[
            table::text("DEVICE", 0),
            table::text("UUID", 3),
            table::text("MEMORY USED / TOTAL", 0),
            table::bar("MEMORY", 2),
            table::text("USE", 1),
            table::text("UTIL", 1),
            table::bar("BUSY", 4),
            table::text("TENANTS", 2),
            $($extra),*
        ]
    };
}

pub const DEVICE_COLUMNS: &[Column] = device_columns!();

/// The same, with the devices' health, where NVML reads it.
pub const DEVICE_HEALTH_COLUMNS: &[Column] = device_columns!(table::text("TEMP", 9), table::text("POWER", 9), table::text("HELD BY", 9));

/// A device's temperature against its slowdown threshold, its power draw,
/// and what holds its clocks back (heat or the power limit), each `-`
/// where the device does not report it.
fn health_cells(d: &crate::snapshot::DeviceView) -> [Cell; 3] {
    let Some(h) = d.health.as_ref() else { return ["-", "-", "-"].map(Cell::plain) };
    let temperature = match (h.temperature_c, h.slowdown_temperature_c) {
        (Some(t), Some(slow)) if t + 5 >= slow => Cell::toned(format!("{t} C"), Tone::Alert),
        (Some(t), _) => Cell::plain(format!("{t} C")),
        (None, _) => Cell::plain("-"),
    };
    let power = match (h.power_usage_mw, h.power_limit_mw) {
        (Some(draw), Some(limit)) => Cell::plain(format!("{} / {} W", draw / 1000, limit / 1000)),
        (Some(draw), None) => Cell::plain(format!("{} W", draw / 1000)),
        _ => Cell::plain("-"),
    };
    let held = match h.throttled_by() {
        Some(by) => Cell::toned(by.to_string(), Tone::Warn),
        None => Cell::plain("-"),
    };
    [temperature, power, held]
}

pub fn devices(snapshot: &Snapshot) -> Table {
    let uuids: Vec<&str> = snapshot.devices.iter().map(|d| d.uuid.as_str()).collect();
    let short = short_uuids(&uuids);
    let with_health = snapshot.devices.iter().any(|d| d.health.is_some());
    let mut rows = Vec::new();
    let mut keys = Vec::new();
    for d in &snapshot.devices {
        let name = device_name(snapshot, d.index, &d.uuid);
        // A MIG instance hangs under its parent when the parent is listed.
        let under_parent = d.parent_uuid.as_ref().is_some_and(|p| snapshot.devices.iter().any(|other| &other.uuid == p));
        let tenants = snapshot.tenants.iter().filter(|t| t.devices.iter().any(|td| td.uuid == d.uuid)).count();
        let mut uuid = Cell::plain(d.uuid.clone());
        uuid.short = short.get(&d.uuid).cloned();
        rows.push(vec![
            Cell::plain(if under_parent { format!("└ {name}") } else { name }),
            uuid,
            Cell::plain(format!("{} / {}", d.memory_used_bytes.map_or("-".into(), human_bytes), human_bytes(d.memory_total_bytes))),
            memory_bar(d.memory_used_bytes.unwrap_or(0), Some(d.memory_total_bytes)),
            fill_cell(d.memory_used_bytes, Some(d.memory_total_bytes)),
            Cell::plain(d.utilization_ratio.map_or("-".into(), percent)),
            Cell::bar(Bar { fill_ratio: d.utilization_ratio.unwrap_or(0.0), mark_ratio: None }, Tone::Plain),
            Cell::plain(tenants.to_string()),
        ]);
        if with_health {
            if let Some(row) = rows.last_mut() {
                row.extend(health_cells(d));
            }
        }
        keys.push(d.uuid.clone());
    }
    let columns = if with_health { DEVICE_HEALTH_COLUMNS } else { DEVICE_COLUMNS };
    Table { title: "DEVICES", columns, rows, keys, empty: "no device: NVML did not answer and no ledger names one" }
}

/// Short names (`status` spells them out); the bars are the live view's.
pub const TENANT_COLUMNS: &[Column] = &[
    table::text("DEVICE", 0),
    table::text("TENANT", 0),
    table::text("MEMORY", 0),
    table::text("CAP", 1),
    table::bar("CAP USE", 3),
    table::text("OF CAP", 5),
    table::text("PROCS", 6),
    table::text("DENIED", 4),
    table::text("LIMIT", 7),
    table::text("SHARE", 7),
    table::text("PRIO", 8),
    table::text("TARGET", 2),
    table::text("USED", 1),
    table::bar("COMPUTE", 3),
    table::text("ACTIVITY", 9),
];

/// Busy, starved or idle (see `activity`), with the figures behind it.
fn activity_cell(d: &TenantDeviceView) -> Cell {
    let Some(activity) = d.activity else { return Cell::plain("-") };
    let gpu = match (d.sm_utilization_ratio, d.compute_used_ratio) {
        (Some(sm), Some(used)) => sm.max(used),
        (sm, used) => sm.or(used).unwrap_or(0.0),
    };
    let text = format!("{} (GPU {}, CPU {})", activity.name(), percent(gpu), percent(d.cpu_cores.unwrap_or(0.0)));
    match activity {
        crate::activity::Activity::Busy => Cell::plain(text),
        _ => Cell::toned(text, Tone::Warn),
    }
}

fn tenant_row(snapshot: &Snapshot, t: &TenantView, d: &TenantDeviceView) -> Vec<Cell> {
    vec![
        Cell::plain(device_name(snapshot, d.index, &d.uuid)),
        Cell::plain(t.name.clone()),
        Cell::plain(human_bytes(d.memory_used_bytes)),
        Cell::plain(d.memory_limit_bytes.map_or("none".into(), human_bytes)),
        memory_bar(d.memory_used_bytes, d.memory_limit_bytes.or_else(|| device_total(snapshot, &d.uuid))),
        fill_cell(Some(d.memory_used_bytes), d.memory_limit_bytes),
        Cell::plain(d.processes.to_string()),
        Cell::toned(d.alloc_denied_total.to_string(), if d.alloc_denied_total > 0 { Tone::Alert } else { Tone::Plain }),
        Cell::plain(d.compute_limit_ratio.map_or("none".into(), percent)),
        Cell::plain(d.compute_share_ratio.map_or("-".into(), percent)),
        Cell::plain(d.compute_priority.to_string()),
        if crate::compute::share_unenforced(snapshot, d) {
            Cell::toned("not enforced".to_string(), Tone::Warn)
        } else {
            Cell::plain(d.compute_target_ratio.map_or("-".into(), percent))
        },
        Cell::plain(d.compute_used_ratio.map_or("-".into(), percent)),
        {
            let over = matches!((d.compute_used_ratio, d.compute_limit_ratio), (Some(u), Some(l)) if u > l + 0.05);
            Cell::bar(
                Bar { fill_ratio: d.compute_used_ratio.unwrap_or(0.0), mark_ratio: d.compute_target_ratio },
                if over { Tone::Warn } else { Tone::Plain },
            )
        },
        activity_cell(d),
    ]
}

fn device_total(snapshot: &Snapshot, uuid: &str) -> Option<u64> {
    snapshot.devices.iter().find(|d| d.uuid == uuid).map(|d| d.memory_total_bytes)
}

/// Tenants by device (in the devices' order) unless sorted otherwise;
/// tenants that used no device last.
pub fn tenants(snapshot: &Snapshot, sort: Sort) -> Table {
    let order = |uuid: &str| snapshot.devices.iter().position(|d| d.uuid == uuid).unwrap_or(usize::MAX);
    let mut pairs: Vec<_> = snapshot.tenants.iter().flat_map(|t| t.devices.iter().map(move |d| (t, d))).collect();
    pairs.sort_by_key(|(t, d)| (order(&d.uuid), t.name.as_str()));
    // Stable: equals keep the device order.
    match sort.key {
        SortKey::Device | SortKey::Pid => {}
        SortKey::Memory => pairs.sort_by_key(|(_, d)| std::cmp::Reverse(d.memory_used_bytes)),
        SortKey::Compute => {
            pairs.sort_by(|(_, a), (_, b)| b.compute_used_ratio.unwrap_or(0.0).total_cmp(&a.compute_used_ratio.unwrap_or(0.0)))
        }
        SortKey::Tenant => pairs.sort_by_key(|(t, _)| t.name.as_str()),
    }
    if sort.reversed {
        pairs.reverse();
    }
    let mut rows = Vec::new();
    let mut keys = Vec::new();
    for (t, d) in pairs {
        rows.push(tenant_row(snapshot, t, d));
        keys.push(format!("{}\0{}", t.name, d.uuid));
    }
    for t in snapshot.tenants.iter().filter(|t| t.devices.is_empty()) {
        let mut row = vec![Cell::plain("-"), Cell::plain(t.name.clone()), Cell::plain("0 B"), Cell::plain("-"), memory_bar(0, None)];
        row.extend(["-", "0", "0", "-", "-", "-", "-", "-"].map(Cell::plain));
        row.push(Cell::bar(Bar { fill_ratio: 0.0, mark_ratio: None }, Tone::Plain));
        row.push(Cell::plain("-"));
        rows.push(row);
        keys.push(t.name.clone());
    }
    Table { title: TENANTS, columns: TENANT_COLUMNS, rows, keys, empty: "no tenant: no ledger in the directory" }
}

/// One row per team and device its members have a ledger entry for; the
/// bars are the live view's.
pub const TEAM_COLUMNS: &[Column] = &[
    table::text("TEAM", 0),
    table::text("DEVICE", 0),
    table::text("MEMBERS", 4),
    table::text("HELD", 0),
    table::text("QUOTA", 1),
    table::bar("QUOTA USE", 3),
    table::text("OF QUOTA", 5),
    table::text("SHARE", 6),
    table::text("LIMIT", 6),
    table::text("TARGET", 2),
    table::text("USED", 1),
    table::bar("COMPUTE", 3),
    table::text("TENANTS", 8),
];

/// The teams as the running monitor holds them (`status` shows the same):
/// what their members hold on each device against the team's quota (the
/// larger of their ledgers and what the driver sees), the team's share and
/// limit, and its target and use; a team none of whose members holds a
/// ledger entry is one row with `-`.
pub fn teams(snapshot: &Snapshot, membership: &crate::teams::membership::Membership) -> Table {
    let figures = crate::teams::figures_of(membership, snapshot);
    let ratio = |e4: u32| if e4 == 0 { "none".to_string() } else { percent(f64::from(e4) / 10_000.0) };
    let mut rows = Vec::new();
    let mut keys = Vec::new();
    for f in &figures {
        let held = f.memory_used_bytes.max(f.driver_memory_used_bytes.unwrap_or(0));
        let of = f.memory_quota_bytes.or_else(|| device_total(snapshot, &f.uuid));
        let members: Vec<&str> = snapshot
            .tenants
            .iter()
            .filter(|t| t.devices.iter().any(|d| d.uuid == f.uuid) && membership.team_of(&t.name).is_some_and(|team| team.team == f.team))
            .map(|t| t.name.as_str())
            .collect();
        let over = f.over_quota_bytes().is_some_and(|e| e > 0);
        rows.push(vec![
            Cell::plain(f.team.clone()),
            Cell::plain(device_name(snapshot, f.index, &f.uuid)),
            Cell::plain(f.members.to_string()),
            Cell::toned(human_bytes(held), if over { Tone::Alert } else { Tone::Plain }),
            Cell::plain(f.memory_quota_bytes.map_or("none".into(), human_bytes)),
            memory_bar(held, of),
            fill_cell(Some(held), f.memory_quota_bytes),
            Cell::plain(f.compute_share_ratio.map_or("none".into(), percent)),
            Cell::plain(f.compute_limit_ratio.map_or("none".into(), percent)),
            Cell::plain(percent(f.compute_target_ratio)),
            Cell::plain(percent(f.compute_used_ratio)),
            Cell::bar(Bar { fill_ratio: f.compute_used_ratio, mark_ratio: Some(f.compute_target_ratio) }, Tone::Plain),
            Cell::plain(members.join(",")),
        ]);
        keys.push(format!("{}\0{}", f.team, f.uuid));
    }
    for team in membership.teams.iter().filter(|t| !figures.iter().any(|f| f.team == t.team)) {
        let s = team.other_devices;
        let mut row = vec![Cell::plain(team.team.clone()), Cell::plain("-"), Cell::plain("0"), Cell::plain("0 B")];
        row.push(Cell::plain(s.memory_quota_bytes.map_or("none".into(), human_bytes)));
        row.push(memory_bar(0, None));
        row.push(Cell::plain("-"));
        row.extend([ratio(s.share_ratio_e4), ratio(s.limit_ratio_e4), "-".into(), "-".into()].map(Cell::plain));
        row.push(Cell::bar(Bar { fill_ratio: 0.0, mark_ratio: None }, Tone::Plain));
        row.push(Cell::plain("-"));
        rows.push(row);
        keys.push(team.team.clone());
    }
    Table { title: "TEAMS", columns: TEAM_COLUMNS, rows, keys, empty: "" }
}

pub const PROCESS_COLUMNS: &[Column] = &[
    table::text("PID", 0),
    table::text("USER", 1),
    table::text("TENANT", 0),
    table::text("DEVICE", 2),
    table::text("MEMORY", 0),
    table::text("DRIVER SEES", 6),
    table::text("SM", 1),
    table::text("TIME", 5),
    table::text("STATE", 4),
    table::rest("COMMAND", 3),
];

/// A process's devices by their names in the tables (NVML only).
fn process_devices(snapshot: &Snapshot, p: &ProcessView) -> String {
    let names: Vec<String> = p
        .devices
        .iter()
        .map(|pd| {
            snapshot.devices.iter().find(|d| d.uuid == pd.uuid).map_or_else(|| "?".into(), |d| device_name(snapshot, d.index, &d.uuid))
        })
        .collect();
    if names.is_empty() {
        "-".into()
    } else {
        names.join(",")
    }
}

/// The key that names a process row: its tenant and pid.
pub fn process_key(tenant: &str, pid: u32) -> String {
    format!("{tenant}\0{pid}")
}

/// Every tenant's processes, by device (the first they use, those the
/// driver does not list last), tenant and pid unless sorted otherwise.
pub fn processes(snapshot: &Snapshot, extra: &Extra) -> Table {
    let mut all: Vec<(&TenantView, &ProcessView)> = snapshot.tenants.iter().flat_map(|t| t.processes.iter().map(move |p| (t, p))).collect();
    let first_device = |p: &ProcessView| {
        p.devices.iter().filter_map(|pd| snapshot.devices.iter().position(|d| d.uuid == pd.uuid)).min().unwrap_or(usize::MAX)
    };
    all.sort_by_key(|(t, p)| (first_device(p), t.name.as_str(), p.pid));
    // What `/proc` says is shown only for a process that is the one its
    // slot names, or that this `top` cannot check (another user's, when
    // not root); a slot naming a pid that the kernel shows not holding
    // its lock is a false claim, and the process it names is not the
    // tenant's.
    let state_and_info = |p: &ProcessView| -> (Cell, Option<&ProcInfo>) {
        let info = extra.procs.get(&p.pid);
        match (p.alive, p.confirmed, info) {
            (false, ..) => (Cell::toned("dead, awaiting reclaim", Tone::Warn), None),
            (true, true, info) => (Cell::plain("alive"), info),
            (true, false, Some(info)) if info.fds_readable => (Cell::toned("false claim", Tone::Alert), None),
            (true, false, info) => (Cell::toned("unverified", Tone::Warn), info),
        }
    };
    match extra.sort.key {
        SortKey::Device => {}
        SortKey::Tenant => all.sort_by_key(|(t, p)| (t.name.as_str(), p.pid)),
        SortKey::Memory => all.sort_by_key(|(_, p)| std::cmp::Reverse(p.memory_used_bytes)),
        SortKey::Compute => {
            all.sort_by(|(_, a), (_, b)| b.sm_utilization_ratio.unwrap_or(0.0).total_cmp(&a.sm_utilization_ratio.unwrap_or(0.0)))
        }
        SortKey::Pid => all.sort_by_key(|(_, p)| p.pid),
    }
    if extra.sort.reversed {
        all.reverse();
    }
    let mut rows = Vec::new();
    let mut keys = Vec::new();
    for (t, p) in all {
        let (state, proc) = state_and_info(p);
        rows.push(vec![
            Cell::plain(p.pid.to_string()),
            Cell::plain(proc.map_or("-".into(), |i| i.user.clone())),
            Cell::plain(t.name.clone()),
            Cell::plain(process_devices(snapshot, p)),
            Cell::plain(human_bytes(p.memory_used_bytes)),
            Cell::plain(p.driver_memory_used_bytes.map_or("-".into(), human_bytes)),
            Cell::plain(p.sm_utilization_ratio.map_or("-".into(), percent)),
            Cell::plain(proc.and_then(|i| i.elapsed_s).map_or("-".into(), elapsed_text)),
            state,
            Cell::plain(proc.map_or("-".into(), |i| i.command.clone())),
        ]);
        keys.push(process_key(&t.name, p.pid));
    }
    Table { title: PROCESSES, columns: PROCESS_COLUMNS, rows, keys, empty: "no process holds a ledger slot" }
}

pub const UNTRACKED_COLUMNS: &[Column] = &[table::text("DEVICE", 0), table::text("PID", 0), table::text("MEMORY USED", 0)];

pub fn untracked(snapshot: &Snapshot) -> Table {
    let rows: Vec<Vec<Cell>> = snapshot
        .untracked_processes
        .iter()
        .map(|u| {
            vec![
                Cell::plain(u.device.to_string()),
                Cell::plain(u.pid.to_string()),
                Cell::toned(human_bytes(u.memory_used_bytes), Tone::Warn),
            ]
        })
        .collect();
    let keys = snapshot.untracked_processes.iter().map(|u| format!("{}\0{}", u.uuid, u.pid)).collect();
    Table { title: "UNTRACKED (using a GPU without the shim)", columns: UNTRACKED_COLUMNS, rows, keys, empty: "" }
}

pub const QUEUE_COLUMNS: &[Column] = &[
    table::text("JOB", 0),
    table::text("NAME", 3),
    table::text("USER", 1),
    table::text("TENANT", 0),
    table::text("PRIO", 4),
    table::text("MEMORY", 1),
    table::text("DEVICES", 4),
    table::text("STATE", 0),
    table::text("FOR", 2),
    table::rest("REASON", 1),
];

/// A live job of the admission queue and its owner's name.
pub struct QueuedJob {
    pub job: Job,
    /// The job file's owner (as the kernel says), by name or number.
    pub user: String,
}

/// The admission queue's live jobs in `dir` (none when it cannot be read),
/// running ones first, then the waiting ones in the order they will start.
pub fn queued_jobs(dir: &std::path::Path, users: &mut Users) -> Vec<QueuedJob> {
    let mut jobs = crate::queue::view(dir).map(|v| v.jobs).unwrap_or_default();
    // Stable: the waiting jobs keep the board's order, the order they start in.
    jobs.sort_by_key(|j| j.state == JobState::Waiting);
    jobs.into_iter().map(|job| QueuedJob { user: users.name(job.uid), job }).collect()
}

/// The queue's table. REASON is why a waiting job waits, in the monitor's
/// own words from its board (which device, how much memory short, which
/// job it is behind), never anything the job's owner wrote.
pub fn queue(jobs: &[QueuedJob]) -> Table {
    let now_ms = crate::queue::store::unix_ms();
    let rows = jobs
        .iter()
        .map(|QueuedJob { job, user }| {
            let since_ms = job.started_unix_ms.unwrap_or(job.submitted_unix_ms);
            vec![
                Cell::plain(job.id.to_string()),
                Cell::plain(job.name.as_deref().map_or_else(|| "-".into(), super::procinfo::printable)),
                Cell::plain(super::procinfo::printable(user)),
                Cell::plain(if job.tenant.is_empty() { "-".into() } else { job.tenant.clone() }),
                Cell::plain(job.priority.to_string()),
                Cell::plain(job.memory_bytes.map_or("whole GPU".into(), human_bytes)),
                Cell::plain(if job.devices.is_empty() { "-".into() } else { job.devices.len().to_string() }),
                Cell::plain(format!("{:?}", job.state).to_lowercase()),
                Cell::plain(format!("{}s", now_ms.saturating_sub(since_ms) / 1000)),
                Cell::plain(job.reason.as_deref().filter(|r| !r.is_empty()).map_or_else(|| "-".into(), super::procinfo::printable)),
            ]
        })
        .collect();
    let keys = jobs.iter().map(|j| j.job.id.to_string()).collect();
    Table { title: "QUEUE", columns: QUEUE_COLUMNS, rows, keys, empty: "" }
}

/// The tables of one frame, in screen order: devices, tenants and
/// processes always; teams (after the devices), untracked processes and the
/// queue when there are some.
pub fn tables(snapshot: &Snapshot, extra: &Extra) -> Vec<Table> {
    let mut tables = vec![devices(snapshot)];
    if let Some(membership) = extra.teams.filter(|m| !m.teams.is_empty()) {
        tables.push(teams(snapshot, membership));
    }
    tables.extend([tenants(snapshot, extra.sort), processes(snapshot, extra)]);
    if !snapshot.untracked_processes.is_empty() {
        tables.push(untracked(snapshot));
    }
    if !extra.jobs.is_empty() {
        tables.push(queue(extra.jobs));
    }
    tables
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_uuids_stay_unique() {
        let a = "GPU-3f2a9c1e-0000-1111-2222-333344445555";
        let b = "GPU-3f2a9c1e-0000-1111-2222-999944445555";
        let c = "MIG-12345678-aaaa-bbbb-cccc-ddddeeeeffff";
        let short = short_uuids(&[a, b, c]);
        assert_eq!(short[c], "MIG-12345678");
        assert_eq!(short[a], "GPU-3f2a9c1e-0000-1111-2222-3");
        assert_eq!(short[b], "GPU-3f2a9c1e-0000-1111-2222-9");
        assert_eq!(short_uuids(&["GPU-0"])["GPU-0"], "GPU-0");
    }

    #[test]
    fn tones() {
        assert_eq!(fill_tone(89, 100), Tone::Plain);
        assert_eq!(fill_tone(90, 100), Tone::Warn);
        assert_eq!(fill_tone(101, 100), Tone::Alert);
        assert_eq!(fill_cell(Some(1), Some(0)).text, "-");
        assert!(queue(&[]).rows.is_empty());
    }

    #[test]
    fn sort_keys_cycle() {
        let mut key = SortKey::Device;
        let mut seen = vec![];
        for _ in 0..SortKey::ALL.len() {
            seen.push(key.name());
            key = key.next();
        }
        assert_eq!(key, SortKey::Device);
        assert_eq!(seen, ["device", "memory", "compute", "tenant", "pid"]);
    }
}
