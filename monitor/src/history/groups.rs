//! A window of history summed up per group of tenants: per cluster job,
//! per user or per team (`gpuslice report --by job|user|team`), beside the
//! per-tenant summary of [`super::summary`].
//!
//! Each tenant's rows on one device are first reduced to a [`SeriesUse`]
//! (one per run of rows with the same [`Origin`] and team); a grouping
//! then puts each use under a key, and [`sum_group`] adds a group's uses
//! up the same way whatever the grouping. A grouping is one variant of
//! [`Grouping`] and one function that names a use's key.
//!
//! A team is the one the monitor held the tenant in at the time
//! ([`TeamOf`], recorded with each interval from the monitor's own
//! decision), never one a tenant's name would match: a tenant that named
//! itself like a team's member is under "no team".
//!
//! The figures, per group:
//! - `held_s`: how long its holders held their slices, a holder being a
//!   job (or, for a tenant of no job, the tenant): from the start of the
//!   first interval that recorded the holder to the end of its last, added
//!   up over the holders. For a job that is the job's time on the node
//!   from its Prolog's admission to its release after the Epilog, to the
//!   history's interval (`--history-interval`, a minute by default).
//! - `share_ratio`: the shares of the devices held at the end, added up
//!   over the group's tenants and devices (a job of `--gres=shard:2` with
//!   8 shards per GPU holds 0.25). Only where the group is one job.
//! - `allocated_device_s`: device time allocated, the share times the time
//!   held, added up (a share of 0.25 for 40 s is 10 s).
//! - `used_device_s`: device time its processes were charged (compute
//!   used times the interval), added up.
//! - `memory_peak_bytes`: the most one tenant held on one device;
//!   `alloc_denied_total`: allocations refused at a cap.
//! - `memory_together_peak_bytes` (`--by team`): the most the group's
//!   tenants' peaks on one device added up to in one interval, an upper
//!   bound of what they held there at once, to set against a team's
//!   quota ([`super::store::Store::team_memory_peaks`]).

use super::aggregate::{Origin, TeamOf, TenantRow};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How `gpuslice report` groups tenants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Grouping {
    /// Each tenant on each device, with a recommendation (the default).
    #[default]
    Tenant,
    /// Each cluster job (the `job` its admission named, such as Slurm's
    /// job id); tenants of no job each under their own name.
    Job,
    /// Each user (the `user` its admission named); tenants of no user
    /// under `-`.
    User,
    /// Each team (`[teams.NAME]`, as the monitor held its tenants in
    /// them); tenants of no team under `-`.
    Team,
}

/// One tenant on one device, for as long as it had one origin in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct SeriesUse {
    pub tenant: String,
    pub device_uuid: String,
    pub origin: Option<Origin>,
    pub team: TeamOf,
    /// Start of its first interval and end of its last, Unix seconds.
    pub first_s: u64,
    pub until_s: u64,
    /// Share and cap at its last interval.
    pub share_e4: Option<u32>,
    pub memory_cap_bytes: Option<u64>,
    pub memory_peak_bytes: u64,
    /// Share × span and compute used × span, in ten-thousandths of a device-second.
    pub allocated_e4_s: u64,
    pub used_e4_s: u64,
    pub alloc_denied_total: u64,
}

/// The uses in the rows of one tenant on one device (oldest first), one
/// per run of rows with the same origin and team.
pub fn uses(rows: &[TenantRow]) -> Vec<SeriesUse> {
    // An interval's span is rounded to the nearest whole second, so that
    // short ones may overlap the next's start: each counts up to the next's
    // start.
    let spans: Vec<u64> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| rows.get(i + 1).map_or(r.span_s, |next| r.span_s.min(next.start_s.saturating_sub(r.start_s))))
        .collect();
    let mut at = 0;
    rows.chunk_by(|a, b| a.origin == b.origin && a.team == b.team)
        .filter_map(|run| {
            let run_spans = &spans[at..at + run.len()];
            at += run.len();
            let (first, last) = (run.first()?, run.last()?);
            let add = |f: &dyn Fn(&TenantRow, u64) -> u64| run.iter().zip(run_spans).map(|(r, s)| f(r, *s)).fold(0u64, u64::saturating_add);
            Some(SeriesUse {
                tenant: last.tenant.clone(),
                device_uuid: last.device_uuid.clone(),
                origin: last.origin.clone(),
                team: last.team.clone(),
                first_s: first.start_s,
                until_s: last.start_s.saturating_add(last.span_s),
                share_e4: last.compute_share_e4,
                memory_cap_bytes: last.memory_cap_bytes,
                memory_peak_bytes: run.iter().map(|r| r.memory_peak_bytes).max().unwrap_or(0),
                allocated_e4_s: add(&|r, span| u64::from(r.compute_share_e4.unwrap_or(0)).saturating_mul(span)),
                used_e4_s: add(&|r, span| {
                    if r.active_rounds > 0 {
                        u64::from(r.compute_used_e4.unwrap_or(0)).saturating_mul(span)
                    } else {
                        0
                    }
                }),
                alloc_denied_total: add(&|r, _| r.denied),
            })
        })
        .collect()
}

/// What a group's key names. Jobs and users come from admissions, which
/// only root or the monitor's user makes; a tenant's name is the tenant's
/// own choice, so a tenant of no job is kept apart from the jobs whatever
/// it calls itself (a tenant named `42` is not job 42).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupKind {
    /// A cluster job, by id.
    Job,
    /// A user, by name.
    User,
    /// A team, by name.
    Team,
    /// A tenant of no job, by its name (under `--by job`).
    Tenant,
    /// The tenants of no user (under `--by user`) or of no team (under
    /// `--by team`), under `-`.
    None,
    /// Under `--by team`: intervals written before the history recorded
    /// teams, under `?`.
    NotRecorded,
}

/// One group over the window (see the module docs for each figure).
#[derive(Debug, Clone, Serialize)]
pub struct GroupSummary {
    /// What `key` names: a job, a user, a tenant of no job, or no user.
    pub kind: GroupKind,
    /// The job id, user name or tenant name; `-` for the tenants of no user.
    pub key: String,
    pub jobs: Vec<String>,
    pub users: Vec<String>,
    pub accounts: Vec<String>,
    pub teams: Vec<String>,
    pub tenants: Vec<String>,
    pub devices: Vec<String>,
    pub first_s: u64,
    pub until_s: u64,
    pub held_s: u64,
    pub share_ratio: Option<f64>,
    pub allocated_device_s: f64,
    pub used_device_s: f64,
    pub memory_peak_bytes: u64,
    /// `--by team`: see the module docs; `None` for other groupings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_together_peak_bytes: Option<u64>,
    pub memory_cap_bytes: Option<u64>,
    pub alloc_denied_total: u64,
}

/// The key of a use under the grouping by job: its job, else its tenant,
/// each of its own kind.
pub fn job_key(use_: &SeriesUse) -> (GroupKind, String) {
    match use_.origin.as_ref().and_then(|o| o.job.clone()) {
        Some(job) => (GroupKind::Job, job),
        None => (GroupKind::Tenant, use_.tenant.clone()),
    }
}

/// The key of a use under the grouping by user: its user, else `-`.
pub fn user_key(use_: &SeriesUse) -> (GroupKind, String) {
    match use_.origin.as_ref().and_then(|o| o.user.clone()) {
        Some(user) => (GroupKind::User, user),
        None => (GroupKind::None, "-".into()),
    }
}

/// The key of a use under the grouping by team: its team, else `-`
/// (else `?` where the history did not record it).
pub fn team_key(use_: &SeriesUse) -> (GroupKind, String) {
    match &use_.team {
        TeamOf::Team(team) => (GroupKind::Team, team.clone()),
        TeamOf::NoTeam => (GroupKind::None, "-".into()),
        TeamOf::NotRecorded => (GroupKind::NotRecorded, "?".into()),
    }
}

/// Every group of `uses` under `grouping`, by key; `None` for
/// [`Grouping::Tenant`], which [`super::summary`] sums up.
pub fn group(grouping: Grouping, uses: &[SeriesUse]) -> Option<Vec<GroupSummary>> {
    let key: fn(&SeriesUse) -> (GroupKind, String) = match grouping {
        Grouping::Tenant => return None,
        Grouping::Job => job_key,
        Grouping::User => user_key,
        Grouping::Team => team_key,
    };
    let mut groups: BTreeMap<(GroupKind, String), Vec<&SeriesUse>> = BTreeMap::new();
    for use_ in uses {
        groups.entry(key(use_)).or_default().push(use_);
    }
    Some(groups.into_iter().map(|(key, members)| sum_group(grouping, key, &members)).collect())
}

/// Adds up one group's uses (see the module docs).
pub fn sum_group(grouping: Grouping, (kind, key): (GroupKind, String), members: &[&SeriesUse]) -> GroupSummary {
    let names = |f: &dyn Fn(&Origin) -> Option<String>| -> Vec<String> {
        members.iter().filter_map(|u| u.origin.as_ref().and_then(f)).collect::<BTreeSet<_>>().into_iter().collect()
    };
    // Each holder's span: its job's, or its tenant's where it has none.
    let mut spans: BTreeMap<(GroupKind, String), (u64, u64)> = BTreeMap::new();
    for u in members {
        let span = spans.entry(job_key(u)).or_insert((u.first_s, u.until_s));
        *span = (span.0.min(u.first_s), span.1.max(u.until_s));
    }
    let one_job = spans.len() == 1 && grouping == Grouping::Job;
    let add_e4 = |f: &dyn Fn(&SeriesUse) -> u64| members.iter().map(|u| f(u)).fold(0u64, u64::saturating_add) as f64 / 10_000.0;
    GroupSummary {
        kind,
        key,
        jobs: names(&|o| o.job.clone()),
        users: names(&|o| o.user.clone()),
        accounts: names(&|o| o.account.clone()),
        teams: members.iter().filter_map(|u| u.team.name().map(String::from)).collect::<BTreeSet<_>>().into_iter().collect(),
        tenants: members.iter().map(|u| u.tenant.clone()).collect::<BTreeSet<_>>().into_iter().collect(),
        // The devices it had a slice of or used: not those an admission
        // capped at 0 bytes (every device but the job's).
        devices: members
            .iter()
            .filter(|u| u.share_e4.unwrap_or(0) > 0 || u.memory_cap_bytes != Some(0) || u.memory_peak_bytes > 0)
            .map(|u| u.device_uuid.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        first_s: members.iter().map(|u| u.first_s).min().unwrap_or(0),
        until_s: members.iter().map(|u| u.until_s).max().unwrap_or(0),
        held_s: spans.values().map(|(first, until)| until.saturating_sub(*first)).fold(0u64, u64::saturating_add),
        share_ratio: one_job.then(|| add_e4(&|u| u64::from(u.share_e4.unwrap_or(0)))),
        allocated_device_s: add_e4(&|u| u.allocated_e4_s),
        used_device_s: add_e4(&|u| u.used_e4_s),
        memory_peak_bytes: members.iter().map(|u| u.memory_peak_bytes).max().unwrap_or(0),
        memory_together_peak_bytes: None,
        memory_cap_bytes: if one_job {
            members.iter().try_fold(0u64, |sum, u| u.memory_cap_bytes.map(|c| sum.saturating_add(c)))
        } else {
            None
        },
        alloc_denied_total: members.iter().map(|u| u.alloc_denied_total).fold(0u64, u64::saturating_add),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(tenant: &str, device: &str, start_s: u64, share_e4: u32, used_e4: u32, origin: Option<(&str, &str)>) -> TenantRow {
        TenantRow {
            start_s,
            span_s: 10,
            tenant: tenant.into(),
            device_uuid: device.into(),
            device_index: 0,
            rounds: 40,
            active_rounds: 40,
            memory_peak_bytes: 1 << 30,
            memory_mean_bytes: 1 << 29,
            driver_memory_peak_bytes: None,
            memory_cap_bytes: Some(2 << 30),
            compute_share_e4: Some(share_e4),
            compute_limit_e4: None,
            compute_used_e4: Some(used_e4),
            compute_target_e4: None,
            throttled_ns: 0,
            denied: 1,
            processes_peak: 1,
            cpu_e4: None,
            gpu_e4: None,
            origin: origin.map(|(job, user)| Origin { job: Some(job.into()), user: Some(user.into()), account: Some("lab".into()) }),
            team: TeamOf::NoTeam,
        }
    }

    fn all_uses(series: &[Vec<TenantRow>]) -> Vec<SeriesUse> {
        series.iter().flat_map(|rows| uses(rows)).collect()
    }

    #[test]
    fn jobs_and_users_add_up_their_tenants_time_and_device_time() {
        let series = [
            // Job 41 of alice: 25 % on GPU-0 for 30 s, half of it used.
            (0..3).map(|i| row("slurm-41", "GPU-0", 100 + i * 10, 2500, 1250, Some(("41", "alice")))).collect::<Vec<_>>(),
            // Job 42 of alice: 50 % on GPU-1 for 20 s.
            (0..2).map(|i| row("slurm-42", "GPU-1", 200 + i * 10, 5000, 5000, Some(("42", "alice")))).collect(),
            // Job 43 of bob on two devices, 12.5 % each, 10 s.
            vec![row("slurm-43", "GPU-0", 300, 1250, 0, Some(("43", "bob")))],
            vec![row("slurm-43", "GPU-1", 300, 1250, 0, Some(("43", "bob")))],
            // Job 43 had no slice of GPU-2: capped at 0 bytes, never used.
            vec![TenantRow { memory_cap_bytes: Some(0), memory_peak_bytes: 0, ..row("slurm-43", "GPU-2", 300, 0, 0, Some(("43", "bob"))) }],
            // A tenant of the configuration: no job, no user.
            vec![row("team-a", "GPU-0", 100, 1000, 1000, None)],
        ];
        let uses = all_uses(&series);
        assert!(group(Grouping::Tenant, &uses).is_none());

        let jobs = group(Grouping::Job, &uses).unwrap();
        let keys: Vec<&str> = jobs.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["41", "42", "43", "team-a"]);
        assert_eq!(jobs.iter().map(|g| g.kind).collect::<Vec<_>>(), [GroupKind::Job, GroupKind::Job, GroupKind::Job, GroupKind::Tenant]);
        let j41 = &jobs[0];
        assert_eq!((j41.held_s, j41.share_ratio, j41.allocated_device_s, j41.used_device_s), (30, Some(0.25), 7.5, 3.75));
        assert_eq!((j41.users.clone(), j41.accounts.clone(), j41.alloc_denied_total), (vec!["alice".to_string()], vec!["lab".into()], 3));
        let j43 = &jobs[2];
        assert_eq!(
            (j43.held_s, j43.share_ratio, j43.devices.clone(), j43.memory_cap_bytes),
            (10, Some(0.25), vec!["GPU-0".to_string(), "GPU-1".into()], Some(4 << 30))
        );
        assert_eq!(jobs[3].jobs, Vec::<String>::new());

        let users = group(Grouping::User, &uses).unwrap();
        let keys: Vec<&str> = users.iter().map(|g| g.key.as_str()).collect();
        // Users first, then the tenants of no user, as jobs come before
        // the tenants of no job.
        assert_eq!(keys, ["alice", "bob", "-"]);
        let alice = &users[0];
        // Two jobs: 30 s and 20 s held; 7.5 + 10 device-seconds allocated.
        assert_eq!((alice.held_s, alice.allocated_device_s, alice.used_device_s, alice.share_ratio), (50, 17.5, 13.75, None));
        assert_eq!(alice.jobs, ["41", "42"]);
        assert_eq!(users[2].tenants, ["team-a"]);
    }

    #[test]
    fn teams_add_up_their_tenants_as_the_monitor_placed_them() {
        let in_team = |team: &str, r: TenantRow| TenantRow { team: TeamOf::Team(team.into()), ..r };
        let series = [
            // lab-1 in lab for 20 s at 25 %, then (a reload) in ops for 10 s.
            (0..3)
                .map(|i| {
                    let r = row("lab-1", "GPU-0", 100 + i * 10, 2500, 2500, None);
                    in_team(if i < 2 { "lab" } else { "ops" }, r)
                })
                .collect::<Vec<_>>(),
            // lab-2 in lab on another device, 10 s at 50 %, half used.
            vec![in_team("lab", row("lab-2", "GPU-1", 100, 5000, 2500, Some(("7", "alice"))))],
            // A tenant that named itself like lab's members: the monitor put it in no team.
            vec![TenantRow { memory_peak_bytes: 8 << 30, ..row("lab-squat", "GPU-0", 100, 10_000, 10_000, None) }],
            // A row of an older layout.
            vec![TenantRow { team: TeamOf::NotRecorded, ..row("lab-1", "GPU-0", 10, 2500, 2500, None) }],
        ];
        let uses = all_uses(&series);
        let teams = group(Grouping::Team, &uses).unwrap();
        let keys: Vec<(GroupKind, &str)> = teams.iter().map(|g| (g.kind, g.key.as_str())).collect();
        assert_eq!(keys, [(GroupKind::Team, "lab"), (GroupKind::Team, "ops"), (GroupKind::None, "-"), (GroupKind::NotRecorded, "?")]);
        let lab = &teams[0];
        assert_eq!(lab.tenants, ["lab-1", "lab-2"]);
        assert_eq!(lab.teams, ["lab"]);
        // 25 % × 20 s + 50 % × 10 s held; 25 % × 20 s + 25 % × 10 s used.
        assert_eq!((lab.allocated_device_s, lab.used_device_s, lab.memory_peak_bytes), (10.0, 7.5, 1 << 30));
        assert_eq!(lab.devices, ["GPU-0", "GPU-1"]);
        assert_eq!((teams[1].tenants.clone(), teams[1].allocated_device_s), (vec!["lab-1".to_string()], 2.5));
        let none = &teams[2];
        assert_eq!((none.tenants.clone(), none.memory_peak_bytes, none.teams.len()), (vec!["lab-squat".to_string()], 8 << 30, 0));
        assert_eq!(teams[3].tenants, ["lab-1"]);
    }

    #[test]
    fn intervals_rounded_up_to_a_second_count_only_to_the_next_ones_start() {
        // Intervals of 1.25 s, each recorded as 2 s from a whole second.
        let rows: Vec<TenantRow> = [100, 101, 102, 103, 105]
            .iter()
            .map(|&start_s| TenantRow { span_s: 2, ..row("slurm-5", "GPU-0", start_s, 5000, 0, Some(("5", "alice"))) })
            .collect();
        let jobs = group(Grouping::Job, &uses(&rows)).unwrap();
        // 1 + 1 + 1 + 2 + 2 s at half a device; held from 100 to 107.
        assert_eq!((jobs[0].allocated_device_s, jobs[0].held_s), (3.5, 7));
    }

    #[test]
    fn a_tenant_name_used_again_by_another_job_counts_for_each_job() {
        let mut rows = vec![row("slurm-7", "GPU-0", 100, 2500, 0, Some(("7", "alice")))];
        rows.push(row("slurm-7", "GPU-0", 900, 5000, 0, Some(("7", "bob"))));
        let users = group(Grouping::User, &uses(&rows)).unwrap();
        assert_eq!(users.iter().map(|g| (g.key.as_str(), g.allocated_device_s)).collect::<Vec<_>>(), [("alice", 2.5), ("bob", 5.0)]);
    }

    #[test]
    fn a_tenant_named_like_a_job_is_not_that_job() {
        let series = [
            // Job 42 of alice: 25 % on GPU-0 for 20 s.
            (0..2).map(|i| row("slurm-42", "GPU-0", 100 + i * 10, 2500, 0, Some(("42", "alice")))).collect::<Vec<_>>(),
            // A tenant of no job that calls itself 42, with a bigger peak,
            // on another device, over a later span.
            (0..3).map(|i| TenantRow { memory_peak_bytes: 8 << 30, ..row("42", "GPU-1", 500 + i * 10, 10_000, 10_000, None) }).collect(),
        ];
        let uses = all_uses(&series);
        let jobs = group(Grouping::Job, &uses).unwrap();
        let keys: Vec<(GroupKind, &str)> = jobs.iter().map(|g| (g.kind, g.key.as_str())).collect();
        assert_eq!(keys, [(GroupKind::Job, "42"), (GroupKind::Tenant, "42")]);
        let job = &jobs[0];
        // The job's own figures only: none of the tenant's time, peak or device.
        assert_eq!((job.held_s, job.share_ratio, job.allocated_device_s, job.used_device_s), (20, Some(0.25), 5.0, 0.0));
        assert_eq!(
            (job.memory_peak_bytes, job.devices.clone(), job.tenants.clone()),
            (1 << 30, vec!["GPU-0".to_string()], vec!["slurm-42".to_string()])
        );
        let tenant = &jobs[1];
        assert_eq!((tenant.held_s, tenant.allocated_device_s, tenant.jobs.clone()), (30, 30.0, Vec::<String>::new()));

        // Under --by user the tenant is under `-`, apart from alice, and a
        // tenant of no job does not share a holder's span with job 42.
        let users = group(Grouping::User, &uses).unwrap();
        let keys: Vec<(GroupKind, &str)> = users.iter().map(|g| (g.kind, g.key.as_str())).collect();
        assert_eq!(keys, [(GroupKind::User, "alice"), (GroupKind::None, "-")]);
        assert_eq!((users[0].held_s, users[1].held_s), (20, 30));
        let both: Vec<&SeriesUse> = uses.iter().collect();
        assert_eq!(sum_group(Grouping::User, (GroupKind::User, "x".into()), &both).held_s, 50);
    }
}
