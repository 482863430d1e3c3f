//! Teams: groups of tenants that the monitor's configuration file, and
//! nothing else, names.
//!
//! ```toml
//! [teams.research]
//! tenants = ["alice-*", "bert"]   # names or patterns (`*`: any run of characters, `?`: one)
//! accounts = ["physics"]          # cluster accounts (exact names): the tenants admitted with one
//! share = 50                      # the team's guaranteed part of each device while a member has work
//! limit = 70                      # the most its members take together
//! priority = 0
//! memory = "40GiB"                # its members' quota on each device, held at allocation
//! ```
//!
//! `share`, `limit`, `priority` and `memory` take the forms a tenant's do
//! (one value, or a table by device). Membership is decided here, from the
//! file alone: a tenant's environment, its ledger and its processes have no
//! word in it. The entries select among the tenants the monitor governs
//! (named in `[tenants]`, or admitted by a cluster engine:
//! `Config::team_of`): a tenant that only named itself is in no team, since
//! any user may give a process any free name, a pattern's included. A tenant that two teams name, by name or by patterns that
//! can both match one name, is an error when the file is read, and the error
//! names both entries with their lines.
//!
//! `users`: the Unix users (names, or uids as numbers) whose queued jobs
//! (`gpuslice run --queue`) belong to the team. A queued job's owner is the
//! owner of its job file as the monitor reads it, never what the job says,
//! and its tenant (`queue-<id>`) is the team's member while the monitor
//! holds the job ([`crate::config::Config::join_queue_tenants`]), so its
//! processes get the team's memory page, compute part and status rows like
//! any member. The queue starts a job of the team only while the team has
//! room for it ([`crate::queue::policy`]). A name this host does not know,
//! or a user two teams name, is an error when the file is read. `users`
//! says nothing about the user's other tenants: those join teams by
//! `tenants` or `accounts`.
//!
//! `accounts`: a tenant that the monitor's control socket admitted (root or
//! the monitor's user only: a Slurm Prolog, the DRA plugin) with the label
//! `account=NAME` belongs to the team that names `NAME`, for as long as the
//! monitor keeps the admission. The label is read from the monitor's own
//! admission records, never from anything the tenant writes (its
//! environment, its ledger). An account two teams name is an error when the
//! file is read. Whether a tenant's name matches a pattern of another team
//! cannot be known until it is admitted: its account wins, and the pattern
//! no longer claims it ([`crate::config::Config::resolve_accounts`]).
//!
//! Compute: the arbiter splits a device between teams (and tenants in no
//! team) by the teams' settings, then each team's part between its active
//! members by their own shares ([`crate::daemon::arbiter::teams`]). So a
//! team gains nothing by starting more tenants or processes.

use crate::config::{ConfigError, TenantConfig};

pub mod membership;

/// One entry of a team's `tenants`: a tenant name or a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberPattern {
    /// As written.
    pub pattern: String,
    /// 1-based line of the entry in the file.
    pub line: usize,
}

impl MemberPattern {
    /// Whether `tenant` is one this entry names.
    pub fn matches(&self, tenant: &str) -> bool {
        glob_matches(self.pattern.as_bytes(), tenant.as_bytes())
    }
}

/// One team the file names.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TeamConfig {
    /// Who belongs to it by name.
    pub members: Vec<MemberPattern>,
    /// The accounts whose admitted tenants belong to it (exact names; the
    /// `pattern` field holds the account).
    pub accounts: Vec<MemberPattern>,
    /// Its quota (`memory_bytes`), limit, share and priority, by device.
    pub settings: TenantConfig,
    /// Tenants admitted with one of `accounts`, as the monitor's admission
    /// records say ([`crate::config::Config::resolve_accounts`]).
    pub by_account: std::collections::BTreeSet<String>,
    /// Tenants admitted with an account another team names, or queue jobs'
    /// tenants whose owner another team's `users` names: no pattern of this
    /// team claims them.
    pub claimed_elsewhere: std::collections::BTreeSet<String>,
    /// The Unix users whose queued jobs belong to it, as the monitor
    /// resolved the names when it read the file (the `pattern` field holds
    /// the entry as written).
    pub users: Vec<MemberUser>,
    /// Queued jobs' tenants whose owner `users` names, as the monitor's
    /// queue records say ([`crate::config::Config::join_queue_tenants`]).
    pub by_user: std::collections::BTreeSet<String>,
}

/// One entry of a team's `users`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberUser {
    /// The user's uid, looked up when the file was read.
    pub uid: u32,
    /// The entry as written: a user name or a number.
    pub name: String,
    /// 1-based line of the entry in the file.
    pub line: usize,
}

impl TeamConfig {
    /// Whether `tenant` belongs to this team: admitted with one of its
    /// accounts, a queued job's tenant of one of its users, or named by its
    /// patterns and claimed by no other team in those two ways.
    pub fn has(&self, tenant: &str) -> bool {
        self.by_account.contains(tenant)
            || self.by_user.contains(tenant)
            || (!self.claimed_elsewhere.contains(tenant) && self.members.iter().any(|m| m.matches(tenant)))
    }

    /// Whether user `uid` is one of this team's `users`.
    pub fn names_user(&self, uid: u32) -> bool {
        self.users.iter().any(|u| u.uid == uid)
    }

    /// Whether `account` is one of this team's.
    pub fn names_account(&self, account: &str) -> bool {
        self.accounts.iter().any(|a| a.pattern == account)
    }
}

/// The accepted form of an `accounts` entry, for messages.
pub const ACCOUNT_FORMAT: &str =
    "an account name as the admission's `account` label holds it: 1 to 64 characters from A-Z a-z 0-9 _ - . (exact, no patterns)";

/// Checks one `accounts` entry.
pub fn validate_account(account: &str) -> Result<(), String> {
    let ok =
        !account.is_empty() && account.len() <= 64 && account.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!("{account:?}: expected {ACCOUNT_FORMAT}"))
    }
}

/// The accepted form of a `tenants` entry, for messages.
pub const PATTERN_FORMAT: &str =
    "a tenant name ([A-Za-z0-9._-], at most 63 characters) or a pattern of those with * (any run of characters) and ? (one character)";

/// Checks one `tenants` entry.
pub fn validate_pattern(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err(format!("an empty entry: expected {PATTERN_FORMAT}"));
    }
    if let Some(c) = pattern.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '*' | '?'))) {
        return Err(format!("{pattern:?}: {c:?} is not allowed: expected {PATTERN_FORMAT}"));
    }
    if !pattern.contains(['*', '?']) {
        return ledger::units::validate_tenant_name(pattern).map_err(|e| format!("{pattern:?}: {e}"));
    }
    if pattern.len() > 255 {
        return Err(format!("{pattern:?}: longer than 255 characters"));
    }
    Ok(())
}

/// Whether `name` matches `pattern` (`*` any run, `?` one character).
fn glob_matches(pattern: &[u8], name: &[u8]) -> bool {
    // Iterative with one backtrack point: linear in practice, and never
    // exponential (a later `*` replaces the earlier backtrack point).
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Whether some tenant name matches both patterns: the two entries would
/// put one tenant in two teams. A dynamic programme over the two patterns'
/// positions (at most 256 × 256 states).
pub fn patterns_overlap(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut seen = vec![false; (a.len() + 1) * (b.len() + 1)];
    let mut stack = vec![(0usize, 0usize)];
    while let Some((i, j)) = stack.pop() {
        let cell = i * (b.len() + 1) + j;
        if seen[cell] {
            continue;
        }
        seen[cell] = true;
        if i == a.len() && j == b.len() {
            return true;
        }
        match (a.get(i), b.get(j)) {
            (Some(b'*'), _) => {
                // `*` of `a` matches nothing more, or takes in `b`'s next token.
                stack.push((i + 1, j));
                if j < b.len() {
                    stack.push((i, j + 1));
                }
            }
            (_, Some(b'*')) => {
                stack.push((i, j + 1));
                if i < a.len() {
                    stack.push((i + 1, j));
                }
            }
            (Some(&x), Some(&y)) if x == y || x == b'?' || y == b'?' => stack.push((i + 1, j + 1)),
            _ => {}
        }
    }
    false
}

/// Refuses a tenant that two teams could both claim; `at_line` makes the
/// error at an entry's line.
pub fn check_disjoint(
    teams: &std::collections::BTreeMap<String, TeamConfig>,
    at_line: impl Fn(usize, String) -> ConfigError,
) -> Result<(), ConfigError> {
    let entries: Vec<(&str, &MemberPattern)> =
        teams.iter().flat_map(|(team, t)| t.members.iter().map(move |m| (team.as_str(), m))).collect();
    for (k, (team_a, a)) in entries.iter().enumerate() {
        for (team_b, b) in entries.iter().skip(k + 1) {
            if team_a == team_b || !patterns_overlap(&a.pattern, &b.pattern) {
                continue;
            }
            let how = if a.pattern == b.pattern { "both name".to_string() } else { "can both match".to_string() };
            return Err(at_line(
                b.line,
                format!(
                    "team {team_b}: {:?} (line {}) and team {team_a}: {:?} (line {}) {how} one tenant; a tenant belongs to at most one team",
                    b.pattern, b.line, a.pattern, a.line
                ),
            ));
        }
    }
    let users: Vec<(&str, &MemberUser)> = teams.iter().flat_map(|(team, t)| t.users.iter().map(move |u| (team.as_str(), u))).collect();
    for (k, (team_a, a)) in users.iter().enumerate() {
        if let Some((team_b, b)) = users.iter().skip(k + 1).find(|(_, b)| b.uid == a.uid) {
            let whom = if team_a == team_b {
                format!("team {team_b} names it twice")
            } else {
                "a user's queued jobs belong to at most one team".into()
            };
            return Err(at_line(
                b.line,
                format!(
                    "team {team_b}: user {:?} (line {}) and team {team_a}: user {:?} (line {}) are both uid {}; {whom}",
                    b.name, b.line, a.name, a.line, a.uid
                ),
            ));
        }
    }
    let accounts: Vec<(&str, &MemberPattern)> =
        teams.iter().flat_map(|(team, t)| t.accounts.iter().map(move |a| (team.as_str(), a))).collect();
    for (k, (team_a, a)) in accounts.iter().enumerate() {
        if let Some((team_b, b)) = accounts.iter().skip(k + 1).find(|(_, b)| b.pattern == a.pattern) {
            let whom =
                if team_a == team_b { format!("team {team_b} names it twice") } else { "a tenant belongs to at most one team".into() };
            return Err(at_line(
                b.line,
                format!(
                    "team {team_b}: account {:?} (line {}) and team {team_a}: account {:?} (line {}) name one account; {whom}",
                    b.pattern, b.line, a.pattern, a.line
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_names() {
        let m = |p: &str, n: &str| glob_matches(p.as_bytes(), n.as_bytes());
        assert!(m("alice-*", "alice-1"));
        assert!(m("alice-*", "alice-"));
        assert!(!m("alice-*", "alice"));
        assert!(m("bert", "bert"));
        assert!(!m("bert", "berta"));
        assert!(m("*-gpu-?", "x-gpu-1"));
        assert!(!m("*-gpu-?", "x-gpu-12"));
        assert!(m("*a*b*", "xxaxxbxx"));
        assert!(!m("*a*b*", "xxbxxaxx"));
        assert!(m("*", "anything"));
    }

    #[test]
    fn overlapping_patterns_are_found_and_disjoint_ones_are_not() {
        for (a, b) in [("alice-*", "alice-b"), ("alice-*", "*-b"), ("a*", "*z"), ("?", "x"), ("bert", "bert"), ("a*c", "ab*"), ("*", "x")] {
            assert!(patterns_overlap(a, b), "{a} {b}");
            assert!(patterns_overlap(b, a), "{b} {a}");
        }
        for (a, b) in [("alice-*", "bob-*"), ("a?", "abc"), ("*x", "*y"), ("bert", "bert2"), ("a*c", "b*")] {
            assert!(!patterns_overlap(a, b), "{a} {b}");
            assert!(!patterns_overlap(b, a), "{b} {a}");
        }
    }

    #[test]
    fn a_teams_figures_sum_its_members_and_its_excess_takes_the_larger_of_ledgers_and_nvml() {
        use crate::snapshot::fixtures::{one_tenant, tenant_device};
        let config = crate::config::parse(
            "[teams.t]\ntenants = [\"team-*\", \"other\"]\nmemory = \"1GiB\"\nshare = 40\n[tenants.team-a]\n[tenants.other]\n[tenants.outsider]\n",
        )
        .unwrap();
        let gib = 1u64 << 30;
        let mut snapshot = one_tenant(true, tenant_device(gib / 2, None, Some(gib)), vec![]);
        let mut second = snapshot.tenants[0].clone();
        second.name = "other".into();
        second.devices[0].memory_used_bytes = gib;
        second.devices[0].driver_memory_used_bytes = Some(gib / 4);
        let mut outsider = snapshot.tenants[0].clone();
        outsider.name = "outsider".into();
        snapshot.tenants.extend([second, outsider]);
        let figures = figures(&config, &snapshot);
        assert_eq!(figures.len(), 1, "{figures:?}");
        let f = &figures[0];
        assert_eq!((f.members, f.memory_used_bytes, f.driver_memory_used_bytes), (2, gib + gib / 2, Some(gib + gib / 4)));
        assert_eq!((f.memory_quota_bytes, f.compute_share_ratio, f.compute_limit_ratio), (Some(gib), Some(0.4), None));
        assert_eq!(f.over_quota_bytes(), Some(gib / 2));
        // The excess is said once per episode, and its end once.
        let mut over = std::collections::BTreeSet::new();
        say_over_quota(&figures, &mut over);
        assert!(over.contains(&("t".to_string(), "GPU-0".to_string())));
        say_over_quota(&[], &mut over);
        assert!(over.is_empty());
    }

    #[test]
    fn a_member_toggling_its_ledger_across_the_quota_is_said_a_burst_per_window_and_the_rest_counted() {
        use crate::daemon::log::{Decision, Level, Limiter, BURST_LINES, WINDOW};
        let gib = 1u64 << 30;
        let team = |name: &str, used: u64| TeamDeviceFigures {
            team: name.into(),
            index: 0,
            uuid: "GPU-0".into(),
            members: 1,
            memory_quota_bytes: Some(gib),
            memory_used_bytes: used,
            driver_memory_used_bytes: Some(gib / 2),
            compute_share_ratio: None,
            compute_limit_ratio: None,
            compute_target_ratio: 0.0,
            compute_used_ratio: 0.0,
        };
        let (mut limiter, t0) = (Limiter::default(), std::time::Instant::now());
        let mut written: Vec<(String, Level, String)> = Vec::new();
        let mut over = std::collections::BTreeSet::new();
        // 100 rounds: team `a`'s member writes 2 GiB then 0 in its ledger in
        // turn; team `b` goes over once, in the last round.
        for round in 0..100u32 {
            let a = team("a", if round % 2 == 0 { 2 * gib } else { 0 });
            let figures = if round == 99 { vec![a, team("b", 2 * gib)] } else { vec![a] };
            say_over_quota_to(&figures, &mut over, &mut |key, level, message| {
                if limiter.admit(key, level, t0) == Decision::Write {
                    written.push((key.to_string(), level, message.to_string()));
                }
            });
        }
        let about_a: Vec<&(String, Level, String)> = written.iter().filter(|(k, _, _)| k.contains("team a'")).collect();
        assert_eq!(about_a.len(), BURST_LINES as usize, "{written:?}");
        assert!(about_a[0].2.contains("1073741824 bytes over its quota"), "{about_a:?}");
        assert_eq!(about_a[1].2, "team a: back within its memory quota on device GPU-0");
        // Another team is not held back by the first.
        assert!(written.iter().any(|(k, l, m)| k.contains("team b'") && *l == Level::Warn && m.starts_with("team b:")), "{written:?}");
        // The window's end says how many lines about team a were left out.
        let ended = limiter.expire(t0 + WINDOW, false);
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!(
            (ended[0].0.as_str(), ended[0].1, ended[0].2),
            ("team a's memory quota on device GPU-0", Level::Warn, 100 - u64::from(BURST_LINES))
        );
    }

    #[test]
    fn bad_entries_are_refused_with_what_is_accepted() {
        for bad in ["", "a b", "a/b", "-rf", ".hidden", "ü*"] {
            let e = validate_pattern(bad).unwrap_err();
            assert!(e.contains("expected") || e.contains("starts with"), "{bad:?}: {e}");
        }
        for good in ["alice", "alice-*", "*", "job-??", "a.b_c-*"] {
            assert_eq!(validate_pattern(good), Ok(()), "{good}");
        }
    }
}

/// One team on one device, as `/metrics` shows it: its settings from the
/// configuration, and what its members hold and get, summed from the
/// monitor's own figures (the members' ledgers as the snapshot reads them,
/// the arbiter's targets and charges).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TeamDeviceFigures {
    pub team: String,
    /// Host index and UUID of the device.
    pub index: u32,
    pub uuid: String,
    /// Members with a ledger entry for the device.
    pub members: u64,
    /// The team's memory quota there; `None` when it has none.
    pub memory_quota_bytes: Option<u64>,
    /// What its members hold there together (their ledgers' usage).
    pub memory_used_bytes: u64,
    /// What the driver (NVML) reports for its members' processes there
    /// together; `None` without NVML.
    pub driver_memory_used_bytes: Option<u64>,
    /// The team's share and limit there, ratios of the device.
    pub compute_share_ratio: Option<f64>,
    pub compute_limit_ratio: Option<f64>,
    /// The sum of its active members' targets (the team's part now).
    pub compute_target_ratio: f64,
    /// The device time charged to its members over the last round, as a
    /// ratio of wall time.
    pub compute_used_ratio: f64,
}

impl TeamDeviceFigures {
    /// How far what the team holds passes its quota: the larger of its
    /// members' ledgers and what the driver reports for their processes
    /// (a member can lower its own ledger's figure, not NVML's).
    pub fn over_quota_bytes(&self) -> Option<u64> {
        let quota = self.memory_quota_bytes?;
        Some(self.memory_used_bytes.max(self.driver_memory_used_bytes.unwrap_or(0)).saturating_sub(quota))
    }
}

/// Says once per episode (a team's device in `over`) when a team holds
/// more than its quota, naming the excess, and when it is back within it.
/// A quota lowered below what a team holds frees nothing a process holds.
/// An episode starts and ends on figures a member writes (its ledger), so
/// a member that moves its figure across the quota each round would have
/// both lines said each round: they are limited per team and device like
/// other repeated complaints, and what was left out is counted.
pub fn say_over_quota(figures: &[TeamDeviceFigures], over: &mut std::collections::BTreeSet<(String, String)>) {
    say_over_quota_to(figures, over, &mut |key, level, message| crate::daemon::log::limited(key, level, message));
}

/// The key under which the quota lines of a team's device are limited.
fn quota_log_key(team: &str, uuid: &str) -> String {
    format!("team {team}'s memory quota on device {uuid}")
}

/// [`say_over_quota`], each line handed to `say` with its key and level.
fn say_over_quota_to(
    figures: &[TeamDeviceFigures],
    over: &mut std::collections::BTreeSet<(String, String)>,
    say: &mut dyn FnMut(&str, crate::daemon::log::Level, &str),
) {
    use crate::daemon::log::Level;
    let mut now = std::collections::BTreeSet::new();
    for f in figures {
        let Some(excess) = f.over_quota_bytes().filter(|e| *e > 0) else { continue };
        let key = (f.team.clone(), f.uuid.clone());
        if !over.contains(&key) {
            say(
                &quota_log_key(&f.team, &f.uuid),
                Level::Warn,
                &format!(
                    "team {}: its tenants hold {} bytes on device {} ({}), {excess} bytes over its quota of {} bytes; nothing they hold is freed",
                    f.team,
                    f.memory_used_bytes.max(f.driver_memory_used_bytes.unwrap_or(0)),
                    f.index,
                    f.uuid,
                    f.memory_quota_bytes.unwrap_or(0)
                ),
            );
        }
        now.insert(key);
    }
    for (team, uuid) in over.difference(&now) {
        say(&quota_log_key(team, uuid), Level::Info, &format!("team {team}: back within its memory quota on device {uuid}"));
    }
    *over = now;
}

/// Each team's figures on each device some member has used, by the
/// configuration (`status --config`; the monitor's own round).
pub fn figures(config: &crate::config::Config, snapshot: &crate::snapshot::Snapshot) -> Vec<TeamDeviceFigures> {
    figures_with(snapshot, |tenant, uuid, host_index| {
        let (name, team) = config.team_of(tenant)?;
        Some((name.to_string(), membership::Settings::of(&team.settings, uuid, host_index)))
    })
}

/// The same, by the membership the monitor decided ([`membership::read`]).
pub fn figures_of(membership: &membership::Membership, snapshot: &crate::snapshot::Snapshot) -> Vec<TeamDeviceFigures> {
    figures_with(snapshot, |tenant, uuid, _| {
        let team = membership.team_of(tenant)?;
        Some((team.team.clone(), team.settings(uuid)))
    })
}

/// Each team's figures, `team_of` naming a tenant's team and its settings
/// on a device (UUID, host index where NVML numbers it).
fn figures_with(
    snapshot: &crate::snapshot::Snapshot,
    team_of: impl Fn(&str, &str, Option<u32>) -> Option<(String, membership::Settings)>,
) -> Vec<TeamDeviceFigures> {
    let ratio = |e4: u32| (e4 > 0).then(|| f64::from(e4) / 10_000.0);
    let mut out: Vec<TeamDeviceFigures> = Vec::new();
    for tenant in &snapshot.tenants {
        for device in &tenant.devices {
            let host_index = snapshot.nvml.then_some(device.index);
            let Some((team_name, settings)) = team_of(&tenant.name, &device.uuid, host_index) else { continue };
            let at = match out.iter().position(|f| f.team == team_name && f.uuid == device.uuid) {
                Some(at) => at,
                None => {
                    out.push(TeamDeviceFigures {
                        team: team_name,
                        index: device.index,
                        uuid: device.uuid.clone(),
                        members: 0,
                        memory_quota_bytes: settings.memory_quota_bytes,
                        memory_used_bytes: 0,
                        driver_memory_used_bytes: None,
                        compute_share_ratio: ratio(settings.share_ratio_e4),
                        compute_limit_ratio: ratio(settings.limit_ratio_e4),
                        compute_target_ratio: 0.0,
                        compute_used_ratio: 0.0,
                    });
                    out.len() - 1
                }
            };
            let f = &mut out[at];
            f.members += 1;
            f.memory_used_bytes = f.memory_used_bytes.saturating_add(device.memory_used_bytes);
            if let Some(driver) = device.driver_memory_used_bytes {
                f.driver_memory_used_bytes = Some(f.driver_memory_used_bytes.unwrap_or(0).saturating_add(driver));
            }
            // Active members' targets: those in the device's turns (where a
            // reader of the grant pages does not know who is, those with a
            // live process there).
            if device.compute_member.unwrap_or(device.processes > 0) {
                f.compute_target_ratio += device.compute_target_ratio.unwrap_or(0.0);
            }
            f.compute_used_ratio += device.compute_used_ratio.unwrap_or(0.0);
        }
    }
    out.sort_by(|a, b| (&a.team, a.index).cmp(&(&b.team, b.index)));
    out
}
