//! The monitor's configuration file (TOML): which tenants it governs, their
//! memory caps, compute limits, shares and priorities per device, who may
//! ask for which queue priority, and what to do about violations.
//!
//! ```toml
//! on_violation = "report"          # or "kill"; default "report"
//! other_tenants = "allow"          # or "refuse": see OtherTenants
//! account_teams = false            # true: every admitted account (a Kubernetes namespace, a Slurm account) is a team
//! violation_grace = "5s"           # how long a finding must last before it counts
//!
//! [tenants.team-a]
//! memory = "8GiB"                  # every device
//!
//! [tenants.team-b]
//! memory = { 0 = "8GiB", "GPU-5f1c…" = "4GiB" }   # by host device index or UUID
//! limit = 30                       # compute: at most 30 % of each device's time
//! # limit = { 0 = 30, all = 60 }   # or by device, with the same keys as memory
//! share = 60                       # compute: 60 % of each device's time guaranteed while it has work
//! priority = 1                     # higher is served first (default 0), from -1000 to 1000
//!
//! [priority_ceilings]              # who may ask for which priority (`gpuslice run --queue --priority`)
//! default = 0                      # everyone not named below; default 0
//! users = { alice = 10, "1001" = 5 }      # by user name or uid: this ceiling, whatever their groups say
//! groups = { ml-team = 100 }       # by group name or gid: the highest of a user's groups counts
//!
//! [teams.research]                # tenants grouped (see crate::teams)
//! tenants = ["alice-*", "bert"]    # names or patterns; a tenant belongs to at most one team
//! accounts = ["physics"]           # and/or: tenants admitted with the label account=physics
//! users = ["alice", "1001"]        # and/or: the queued jobs (`run --queue`) of these Unix users
//! share = 50                       # the team's part, divided among its busy members
//! limit = 70                       # its members together
//!
//! [share_ceilings]                 # the most device share a user's self-declared tenants hold together
//! default = 100                    # everyone not named below; default 100 (a whole device)
//! users = { bob = 20 }             # same keys as [priority_ceilings]; a whole percentage from 0 to 100
//! ```
//!
//! A tenant the file does not name declares its own share (its processes'
//! environment). Such shares divide only what the configured shares of the
//! device's active tenants leave, and all the self-declared tenants of one
//! user count as one, held to that user's `[share_ceilings]` entry: a user
//! gains nothing by splitting its work into many tenants.
//!
//! Root may ask for any priority. A request above the caller's ceiling is
//! refused ([`Config::priority_ceiling`]). User and group names are looked
//! up when the file is read: a name this host does not know is an error.
//!
//! `limit`, `share` and `priority` each take one value for every device or
//! a table by device. A tenant with any of them has its compute settings
//! from this file alone: the others are 0 (no limit, no share, priority 0)
//! whatever its processes' environment says.
//!
//! The file is the authority for the tenants it names; other tenants keep
//! the caps their processes set from their environment. Every error carries
//! the line and column it was found at: a device key is checked where it is
//! written, a size where its value is.
//!
//! A device key is `all` (or `*`), a host index written plainly (`0` to
//! `MAX_DEVICES - 1`, no sign or leading zeros) or a UUID in the form
//! `nvidia-smi -L` prints (`GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, or
//! `MIG-…` for a MIG device, any case). A host index names a GPU and its
//! MIG devices alike. Anything else is refused, since a key that matches no device would
//! apply nothing, silently; two keys naming one device are refused too. An
//! index no ledger can hold (`99`) is an error here. An index or UUID that is
//! well formed but names no device of this host cannot be known while
//! parsing (the same file often serves hosts with different GPUs, and a GPU
//! can fall off the bus), so the file is accepted and
//! [`TenantConfig::unmatched_devices`] names each such cap, for the monitor
//! to warn about once per reload: refusing the file would leave every other
//! cap in it unenforced on the hosts where it does not fit.

use crate::nvml::GpuInfo;
use crate::teams::{MemberPattern, MemberUser, TeamConfig};
use ledger::units::{self, DuplicateDevice, PerDevice};
use serde::de::{self, MapAccess};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

/// How long a violation must last before it is counted and acted on, when
/// the file does not say: long enough for the transient states of a
/// well-behaved tenant (memory freed with `cuMemFreeAsync` that its stream
/// has not reached yet, a context being set up) to pass.
pub const DEFAULT_VIOLATION_GRACE: Duration = Duration::from_secs(5);

/// What the monitor does when it finds a violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnViolation {
    /// Log it and count it in a metric.
    #[default]
    Report,
    /// Also kill the offending processes (`SIGKILL`).
    Kill,
}

/// What the monitor makes of a process in a tenant that nobody governs:
/// neither this file names it, nor a cluster's node agent admitted it
/// (`gpuslice tenant`), nor the queue started it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OtherTenants {
    /// Such a tenant keeps the caps its processes set from their
    /// environment (a shared server where users cap themselves).
    #[default]
    Allow,
    /// A process of such a tenant that uses a GPU is a violation
    /// (`ungoverned_tenant`), reported or killed by `on_violation`: on a
    /// node whose every tenant comes from a scheduler, a process that names
    /// a tenant of its own (a new `GPUSLICE_TENANT`, another
    /// `GPUSLICE_DIR`) to get from under its allocation gains nothing.
    Refuse,
}

/// Which single device a setting applies to (`all` is [`PerDevice::all`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceKey {
    /// The host's device index, as NVML and `nvidia-smi` number them.
    HostIndex(u32),
    /// A device UUID, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, or a MIG
    /// device's `MIG-…`.
    Uuid(String),
}

/// One tenant the file governs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TenantConfig {
    /// Memory caps; a device-specific entry wins over the one for all.
    pub memory_bytes: PerDevice<u64, DeviceKey>,
    /// Compute limits (hard ceilings on device time), ratio × 10 000; a
    /// device-specific entry wins over the one for all.
    pub compute_limit_ratio_e4: PerDevice<u32, DeviceKey>,
    /// Compute shares (guaranteed device time), ratio × 10 000.
    pub compute_share_ratio_e4: PerDevice<u32, DeviceKey>,
    /// Priorities (higher first).
    pub priority: PerDevice<i32, DeviceKey>,
}

impl TenantConfig {
    /// The cap for a device known by UUID and (with NVML) host index.
    pub fn memory_for(&self, uuid: &str, host_index: Option<u32>) -> Option<u64> {
        by_device(&self.memory_bytes, uuid, host_index)
    }

    /// The compute limit for a device, ratio × 10 000.
    #[cfg(test)]
    pub fn compute_limit_for(&self, uuid: &str, host_index: Option<u32>) -> Option<u32> {
        by_device(&self.compute_limit_ratio_e4, uuid, host_index)
    }

    /// The compute settings for a device, when the file gives it any.
    pub fn compute_for(&self, uuid: &str, host_index: Option<u32>) -> Option<ledger::ComputePolicy> {
        let limit = by_device(&self.compute_limit_ratio_e4, uuid, host_index);
        let share = by_device(&self.compute_share_ratio_e4, uuid, host_index);
        let priority = by_device(&self.priority, uuid, host_index);
        (limit.is_some() || share.is_some() || priority.is_some()).then(|| ledger::ComputePolicy {
            share_ratio_e4: share.unwrap_or(0),
            limit_ratio_e4: limit.unwrap_or(0),
            priority: priority.unwrap_or(0),
        })
    }

    /// Whether the file gives the tenant any setting.
    pub fn is_empty(&self) -> bool {
        !(self.memory_bytes.is_set()
            || self.compute_limit_ratio_e4.is_set()
            || self.compute_share_ratio_e4.is_set()
            || self.priority.is_set())
    }

    /// Whether some cap needs NVML to know which device it means.
    pub fn uses_host_indices(&self) -> bool {
        self.memory_bytes
            .keys()
            .chain(self.compute_limit_ratio_e4.keys())
            .chain(self.compute_share_ratio_e4.keys())
            .chain(self.priority.keys())
            .any(|k| matches!(k, DeviceKey::HostIndex(_)))
    }

    /// One message for each cap of `tenant` that names a device (by index
    /// or UUID) that none of `gpus`, the devices NVML shows on this host,
    /// is: such a cap applies to nothing. The file cannot know this when it
    /// is parsed; the monitor says it once per reload.
    pub fn unmatched_devices(&self, tenant: &str, gpus: &[GpuInfo]) -> Vec<String> {
        let shown = match gpus.len() {
            0 => "NVML shows no device".to_string(),
            1 => "NVML shows 1 device".to_string(),
            n => format!("NVML shows {n} devices"),
        };
        let mut messages = Vec::new();
        for (key, bytes) in &self.memory_bytes.devices {
            let missing = match key {
                DeviceKey::HostIndex(index) => {
                    (!gpus.iter().any(|g| g.index == *index)).then(|| format!("this host has no device {index} ({shown})"))
                }
                DeviceKey::Uuid(uuid) => (!gpus.iter().any(|g| g.uuid.eq_ignore_ascii_case(uuid)))
                    .then(|| format!("no device of this host has UUID {uuid} ({shown})")),
            };
            if let Some(missing) = missing {
                let device = match key {
                    DeviceKey::HostIndex(index) => index.to_string(),
                    DeviceKey::Uuid(uuid) => uuid.clone(),
                };
                messages
                    .push(format!("tenant {tenant}: the memory cap of {bytes} bytes for device {device} applies to nothing: {missing}"));
            }
        }
        messages
    }
}

/// A whole, validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// What to do about violations.
    pub on_violation: OnViolation,
    /// Whether tenants nobody governs may use a GPU.
    pub other_tenants: OtherTenants,
    /// How long a violation must last before it counts.
    pub violation_grace: Duration,
    /// Tenants by name.
    pub tenants: BTreeMap<String, TenantConfig>,
    /// Who may ask for which priority.
    pub priority_ceilings: PriorityCeilings,
    /// The most share each user's self-declared tenants hold together on a
    /// device, ratio × 10 000 (`[share_ceilings]`).
    pub share_ceilings: PriorityCeilings,
    /// Teams by name ([`crate::teams`]); no tenant belongs to two.
    pub teams: BTreeMap<String, TeamConfig>,
    /// Whether every account a cluster engine admits tenants with (a
    /// Kubernetes namespace, a Slurm account) is a team of its own where no
    /// team names it: the team of that name, or one with no settings
    /// ([`Config::resolve_accounts`]).
    pub account_teams: bool,
}

/// The highest priority each user may ask for (`[priority_ceilings]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PriorityCeilings {
    /// For users named neither here nor through a group.
    pub default: i32,
    /// By uid: wins over the user's groups.
    pub users: BTreeMap<u32, i32>,
    /// By gid: a user in several gets the highest.
    pub groups: BTreeMap<u32, i32>,
}

impl PriorityCeilings {
    /// Share ceilings with nothing named: a whole device for everyone.
    pub fn whole_share() -> PriorityCeilings {
        PriorityCeilings { default: ledger::compute::WHOLE_DEVICE_RATIO_E4 as i32, ..PriorityCeilings::default() }
    }

    /// See [`Config::priority_ceiling`].
    pub fn of(&self, uid: u32, gids: &[u32]) -> i32 {
        if uid == 0 {
            return i32::MAX;
        }
        if let Some(ceiling) = self.users.get(&uid) {
            return *ceiling;
        }
        gids.iter().filter_map(|gid| self.groups.get(gid)).copied().max().unwrap_or(self.default)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            on_violation: OnViolation::default(),
            other_tenants: OtherTenants::default(),
            violation_grace: DEFAULT_VIOLATION_GRACE,
            tenants: BTreeMap::new(),
            priority_ceilings: PriorityCeilings::default(),
            share_ceilings: PriorityCeilings::whole_share(),
            teams: BTreeMap::new(),
            account_teams: false,
        }
    }
}

impl Config {
    /// The highest priority user `uid`, member of `gids`, may ask for:
    /// unlimited for root; else the user's own entry; else the highest
    /// entry of its groups; else the default (0 unless the file says).
    pub fn priority_ceiling(&self, uid: u32, gids: &[u32]) -> i32 {
        self.priority_ceilings.of(uid, gids)
    }

    /// Puts admitted tenants in the teams that name their accounts:
    /// `admitted` is each tenant the monitor's control socket admitted
    /// (root or the monitor's user only) with the `account` label its
    /// admission recorded. A tenant whose account a team names belongs to
    /// that team, whatever another team's patterns say of its name; a
    /// tenant whose account no team names is left to the patterns, or, with
    /// `account_teams`, belongs to the team named as its account (made,
    /// with no settings, when the file has none of that name).
    pub fn resolve_accounts<'a>(&mut self, admitted: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for team in self.teams.values_mut() {
            team.by_account.clear();
            team.by_user.clear();
            team.claimed_elsewhere.clear();
        }
        for (tenant, account) in admitted {
            let named = self.teams.iter().find(|(_, t)| t.names_account(account)).map(|(name, _)| name.clone());
            let owner = match named {
                Some(owner) => owner,
                None if self.account_teams && units::validate_tenant_name(account).is_ok() => {
                    self.teams.entry(account.to_string()).or_default();
                    account.to_string()
                }
                None => continue,
            };
            for (name, team) in self.teams.iter_mut() {
                if *name == owner {
                    team.by_account.insert(tenant.to_string());
                } else {
                    team.claimed_elsewhere.insert(tenant.to_string());
                }
            }
        }
    }

    /// The team whose `users` names user `uid`: its queued jobs' team.
    pub fn team_of_user(&self, uid: u32) -> Option<&str> {
        self.teams.iter().find(|(_, t)| t.names_user(uid)).map(|(name, _)| name.as_str())
    }

    /// Puts queued jobs' tenants in the teams of their owners: `jobs` is
    /// each job the monitor's queue holds (admitted, with a tenant) and its
    /// owner's uid as the monitor read it from the job file. A tenant whose
    /// owner a team's `users` names joins the governed tenants (with no
    /// settings of its own: the queue holds its caps) and that team,
    /// whatever another team's patterns say of its name; one whose owner no
    /// team names is left as it was. Run after
    /// [`Config::resolve_accounts`], which starts afresh.
    pub fn join_queue_tenants<'a>(&mut self, jobs: impl IntoIterator<Item = (&'a str, u32)>) {
        for (tenant, uid) in jobs {
            let Some(owner) = self.team_of_user(uid).map(str::to_string) else { continue };
            self.tenants.entry(tenant.to_string()).or_default();
            for (name, team) in self.teams.iter_mut() {
                if *name == owner {
                    team.by_user.insert(tenant.to_string());
                } else {
                    team.claimed_elsewhere.insert(tenant.to_string());
                }
            }
        }
    }

    /// The team `tenant` belongs to, by this file alone: a tenant the
    /// configuration governs (named in `[tenants]`, or admitted by a cluster
    /// engine, whose admissions join `tenants` in the monitor's effective
    /// configuration) that a team's entry names. A tenant that only named
    /// itself (its `GPUSLICE_TENANT`) is in no team, whatever its name: a
    /// pattern such as `alice-*` would otherwise be anyone's to match, and a
    /// team's settings and priority anyone's to take past their ceilings.
    /// Accounts count as [`Config::resolve_accounts`] was given them.
    pub fn team_of(&self, tenant: &str) -> Option<(&str, &TeamConfig)> {
        if !self.tenants.contains_key(tenant) {
            return None;
        }
        self.teams.iter().find(|(_, team)| team.has(tenant)).map(|(name, team)| (name.as_str(), team))
    }

    /// The cap the file sets for `tenant` on a device, if it names one.
    pub fn memory_for(&self, tenant: &str, uuid: &str, host_index: Option<u32>) -> Option<u64> {
        self.tenants.get(tenant)?.memory_for(uuid, host_index)
    }
}

/// What a duration may look like, for error messages.
pub const DURATION_FORMAT: &str = crate::duration::FORMAT;

/// Parses a duration in the one grammar of every duration gpuslice reads
/// ([`crate::duration`]); `None` when it is not one.
pub fn parse_duration(text: &str) -> Option<Duration> {
    crate::duration::parse(text).ok()
}

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, if it came from one.
    pub path: Option<String>,
    /// 1-based line and column of the error, when known.
    pub position: Option<(usize, usize)>,
    /// What was wrong and what is accepted.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.path, self.position) {
            (Some(path), Some((line, column))) => write!(f, "{path}:{line}:{column}: {}", self.message),
            (Some(path), None) => write!(f, "{path}: {}", self.message),
            (None, Some((line, column))) => write!(f, "line {line}, column {column}: {}", self.message),
            (None, None) => write!(f, "{}", self.message),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    on_violation: Option<toml::Spanned<String>>,
    #[serde(default)]
    other_tenants: Option<toml::Spanned<String>>,
    #[serde(default)]
    violation_grace: Option<toml::Spanned<String>>,
    #[serde(default)]
    tenants: BTreeMap<String, toml::Spanned<RawTenant>>,
    #[serde(default)]
    priority_ceilings: Option<toml::Spanned<RawCeilings>>,
    #[serde(default)]
    share_ceilings: Option<toml::Spanned<RawCeilings>>,
    #[serde(default)]
    teams: BTreeMap<String, toml::Spanned<RawTeam>>,
    #[serde(default)]
    account_teams: Option<bool>,
}

/// A `[teams.NAME]` table: its members, and the settings a tenant may have.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTeam {
    #[serde(default)]
    tenants: Option<toml::Spanned<Vec<toml::Spanned<String>>>>,
    #[serde(default)]
    accounts: Option<toml::Spanned<Vec<toml::Spanned<String>>>>,
    #[serde(default)]
    users: Option<toml::Spanned<Vec<toml::Spanned<String>>>>,
    #[serde(default)]
    memory: Option<toml::Spanned<RawMemory>>,
    #[serde(default)]
    limit: Option<toml::Spanned<toml::Value>>,
    #[serde(default)]
    share: Option<toml::Spanned<toml::Value>>,
    #[serde(default)]
    priority: Option<toml::Spanned<toml::Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCeilings {
    #[serde(default)]
    default: Option<toml::Spanned<toml::Value>>,
    #[serde(default)]
    users: BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>,
    #[serde(default)]
    groups: BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>>,
}

/// The accepted form of a priority ceiling, for messages.
const CEILING_FORMAT: &str = "a whole number from -1000 to 1000, like 10";

/// A user (`users = { NAME = … }`) or group key: a name this host knows, or a number.
#[derive(Clone, Copy)]
enum Principal {
    User,
    Group,
}

impl Principal {
    fn word(self) -> &'static str {
        match self {
            Principal::User => "user",
            Principal::Group => "group",
        }
    }

    /// The uid or gid `key` names.
    fn id_of(self, key: &str) -> Result<u32, String> {
        if let Ok(id) = key.parse::<u32>() {
            return Ok(id);
        }
        let found = match self {
            Principal::User => crate::host::uid_by_name(key),
            Principal::Group => crate::host::gid_by_name(key),
        };
        found.ok_or_else(|| format!("no {} {key:?} on this host: give a {0} name it knows or a number", self.word()))
    }
}

/// Parses `[priority_ceilings]`.
fn priority_ceilings(
    raw: &RawCeilings,
    at: &impl Fn(std::ops::Range<usize>, String) -> ConfigError,
) -> Result<PriorityCeilings, ConfigError> {
    ceilings(raw, "priority_ceilings", CEILING_FORMAT, priority_value, PriorityCeilings::default(), at)
}

/// The accepted form of a share ceiling, for messages.
const SHARE_CEILING_FORMAT: &str = "a whole percentage from 0 to 100, like 20";

/// Parses `[share_ceilings]` (kept as ratio × 10 000).
fn share_ceilings(raw: &RawCeilings, at: &impl Fn(std::ops::Range<usize>, String) -> ConfigError) -> Result<PriorityCeilings, ConfigError> {
    let percent = |value: &toml::Value| value.as_integer().filter(|p| (0..=100).contains(p)).map(|p| p as i32 * 100);
    ceilings(raw, "share_ceilings", SHARE_CEILING_FORMAT, percent, PriorityCeilings::whole_share(), at)
}

/// Parses a table of ceilings by user and group, named `section`.
fn ceilings(
    raw: &RawCeilings,
    section: &str,
    format: &str,
    value_of: impl Fn(&toml::Value) -> Option<i32>,
    mut ceilings: PriorityCeilings,
    at: &impl Fn(std::ops::Range<usize>, String) -> ConfigError,
) -> Result<PriorityCeilings, ConfigError> {
    let ceiling = |what: String, value: &toml::Spanned<toml::Value>| {
        value_of(value.get_ref()).ok_or_else(|| at(value.span(), format!("{section}: {what} = {}: expected {format}", value.get_ref())))
    };
    if let Some(default) = &raw.default {
        ceilings.default = ceiling("default".into(), default)?;
    }
    for (principal, entries, into) in
        [(Principal::User, &raw.users, &mut ceilings.users), (Principal::Group, &raw.groups, &mut ceilings.groups)]
    {
        for (key, value) in entries {
            let id = principal.id_of(key.get_ref()).map_err(|e| at(key.span(), format!("{section}: {e}")))?;
            let word = principal.word();
            let parsed = ceiling(format!("{word} {:?}", key.get_ref()), value)?;
            if into.insert(id, parsed).is_some() {
                return Err(at(key.span(), format!("{section}: {word} {:?} is {word} {id}, named twice", key.get_ref())));
            }
        }
    }
    Ok(ceilings)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    #[serde(default)]
    memory: Option<toml::Spanned<RawMemory>>,
    #[serde(default)]
    limit: Option<toml::Spanned<toml::Value>>,
    #[serde(default)]
    share: Option<toml::Spanned<toml::Value>>,
    #[serde(default)]
    priority: Option<toml::Spanned<toml::Value>>,
}

/// A device-keyed setting: the UUID's entry, else the host index's, else `all`.
fn by_device<T: Copy>(setting: &PerDevice<T, DeviceKey>, uuid: &str, host_index: Option<u32>) -> Option<T> {
    setting
        .listed(&DeviceKey::Uuid(uuid.to_ascii_lowercase()))
        .or_else(|| host_index.and_then(|i| setting.listed(&DeviceKey::HostIndex(i))))
        .or(setting.all)
}

/// Gives `device` (`None`: every device) its value; a device named twice
/// is refused (`Err`), the first value kept.
fn set_device<T: Copy>(setting: &mut PerDevice<T, DeviceKey>, device: Option<DeviceKey>, value: T) -> Result<(), DuplicateDevice> {
    match device {
        None if setting.all.is_some() => Err(DuplicateDevice),
        None => {
            setting.all = Some(value);
            Ok(())
        }
        Some(device) => setting.insert(device, value),
    }
}

/// The accepted forms of `share`, for messages.
const SHARE_FORMAT: &str = "a whole percentage from 1 to 100, like 60, or a table like { 0 = 60, all = 25 }";
/// The accepted forms of `priority`, for messages.
const PRIORITY_FORMAT: &str = "a whole number from -1000 to 1000 (higher first, default 0), or a table like { 0 = 1, all = 0 }";

fn priority_value(value: &toml::Value) -> Option<i32> {
    ledger::compute::priority_in_range(value.as_integer()?)
}

/// Parses one device-keyed setting (`limit`, `share`, `priority`): one
/// value for every device or a table by device.
fn device_setting<T: Copy>(
    who: &str,
    setting: &str,
    format: &str,
    raw: &toml::Spanned<toml::Value>,
    value_of: impl Fn(&toml::Value) -> Option<T>,
    at: &impl Fn(std::ops::Range<usize>, String) -> ConfigError,
) -> Result<PerDevice<T, DeviceKey>, ConfigError> {
    let bad = |what: String| at(raw.span(), format!("{who}: {setting} {what}: expected {format}"));
    let mut values = PerDevice::default();
    match raw.get_ref() {
        toml::Value::Table(entries) => {
            for (key, value) in entries {
                let device = parse_device_key(key).map_err(|e| at(raw.span(), format!("{who}: {setting}: {e}")))?;
                let parsed = value_of(value).ok_or_else(|| bad(format!("for device {key:?} = {value}")))?;
                set_device(&mut values, device, parsed).map_err(|DuplicateDevice| bad(format!("names device {key:?} twice")))?;
            }
        }
        value => {
            let parsed = value_of(value).ok_or_else(|| bad(format!("= {value}")))?;
            values.all = Some(parsed);
        }
    }
    values.devices.sort_by(|(a, _), (b, _)| a.cmp(b));
    Ok(values)
}

/// The accepted forms of `limit`, for messages.
const LIMIT_FORMAT: &str = "a whole percentage from 1 to 100, like 30, or a table like { 0 = 30, \"GPU-…\" = 60, all = 50 }";

/// One percentage of a `limit`, as ratio × 10 000.
fn limit_value(value: &toml::Value) -> Option<u32> {
    let percent = value.as_integer()?;
    (1..=100).contains(&percent).then(|| ledger::compute::percent_ratio_e4(percent as u32))
}

/// What a tenant's `memory` may be, with the place of every key and value
/// of a table kept so that an error points at the entry itself.
enum RawMemory {
    AllDevices(String),
    PerDevice(Vec<(toml::Spanned<String>, toml::Spanned<toml::Value>)>),
}

/// The accepted forms of `memory`, for messages.
const MEMORY_FORMAT: &str = "a size like \"8GiB\" or a table like { 0 = \"8GiB\", \"GPU-…\" = \"4GiB\" }";

impl<'de> Deserialize<'de> for RawMemory {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> de::Visitor<'de> for Visitor {
            type Value = RawMemory;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(MEMORY_FORMAT)
            }
            fn visit_str<E: de::Error>(self, size: &str) -> Result<RawMemory, E> {
                Ok(RawMemory::AllDevices(size.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawMemory, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<toml::Spanned<String>>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(RawMemory::PerDevice(entries))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// 1-based line and column (in characters) of a byte offset in `text`; an
/// offset past the end or inside a character counts from the character
/// boundary before it.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = text.get(..end).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |nl| nl + 1);
    let line = before.matches('\n').count() + 1;
    let column = before.get(line_start..).unwrap_or_default().chars().count() + 1;
    (line, column)
}

/// Parses a configuration from text.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let at =
        |span: std::ops::Range<usize>, message: String| ConfigError { path: None, position: Some(line_column(text, span.start)), message };
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        // The TOML parser says nothing more than the place for some errors
        // (`a =` with no value).
        let message = match e.message().trim() {
            "" => "invalid TOML: something is missing here (a value, a quote or a bracket)".to_string(),
            message => message.to_string(),
        };
        ConfigError { path: None, position: e.span().map(|span| line_column(text, span.start)), message }
    })?;
    let on_violation = match &raw.on_violation {
        None => OnViolation::Report,
        Some(value) => match value.get_ref().as_str() {
            "report" => OnViolation::Report,
            "kill" => OnViolation::Kill,
            other => {
                return Err(at(value.span(), format!("on_violation = {other:?}: expected \"report\" or \"kill\"")));
            }
        },
    };
    let violation_grace = match &raw.violation_grace {
        None => DEFAULT_VIOLATION_GRACE,
        Some(value) => crate::duration::parse(value.get_ref()).map_err(|e| at(value.span(), format!("violation_grace = {e}")))?,
    };
    let mut tenants = BTreeMap::new();
    for (name, tenant) in raw.tenants {
        if let Err(e) = units::validate_tenant_name(&name) {
            return Err(at(tenant.span(), format!("tenant name {name:?} is invalid: {e}")));
        }
        let config = settings(&format!("tenant {name}"), tenant.get_ref(), &at)?;
        tenants.insert(name, config);
    }
    let priority_ceilings = match &raw.priority_ceilings {
        Some(raw) => priority_ceilings(raw.get_ref(), &at)?,
        None => PriorityCeilings::default(),
    };
    let share_ceilings = match &raw.share_ceilings {
        Some(raw) => share_ceilings(raw.get_ref(), &at)?,
        None => PriorityCeilings::whole_share(),
    };
    let other_tenants = match &raw.other_tenants {
        None => OtherTenants::Allow,
        Some(value) => match value.get_ref().as_str() {
            "allow" => OtherTenants::Allow,
            "refuse" => OtherTenants::Refuse,
            other => return Err(at(value.span(), format!("other_tenants = {other:?}: expected \"allow\" or \"refuse\""))),
        },
    };
    let account_teams = raw.account_teams.unwrap_or(false);
    let mut teams = BTreeMap::new();
    for (name, team) in raw.teams {
        if let Err(e) = units::validate_tenant_name(&name) {
            let e = e.to_string().replace("tenant name", "team name");
            return Err(at(team.span(), format!("team name {name:?} is invalid: {e}")));
        }
        let span = team.span();
        let raw = team.into_inner();
        let who = format!("team {name}");
        for (key, list) in [("tenants", &raw.tenants), ("accounts", &raw.accounts), ("users", &raw.users)] {
            if let Some(list) = list.as_ref().filter(|l| l.get_ref().is_empty()) {
                return Err(at(
                    list.span(),
                    format!(
                        "{who}: {key} = []: name at least one, like tenants = [\"alice-*\", \"bert\"], accounts = [\"physics\"] \
                         or users = [\"alice\"]"
                    ),
                ));
            }
        }
        if raw.tenants.is_none() && raw.accounts.is_none() && raw.users.is_none() && !account_teams {
            return Err(at(
                span.clone(),
                format!(
                    "{who}: it names no members: give tenants = [names or patterns], accounts = [cluster accounts], \
                     users = [Unix users, for their queued jobs], or several \
                     (or set account_teams = true, and the team is its own name's account)"
                ),
            ));
        }
        let mut members = Vec::new();
        for entry in raw.tenants.iter().flat_map(|l| l.get_ref()) {
            crate::teams::validate_pattern(entry.get_ref()).map_err(|e| at(entry.span(), format!("{who}: tenants: {e}")))?;
            members.push(MemberPattern { pattern: entry.get_ref().clone(), line: line_column(text, entry.span().start).0 });
        }
        let mut accounts = Vec::new();
        for entry in raw.accounts.iter().flat_map(|l| l.get_ref()) {
            crate::teams::validate_account(entry.get_ref()).map_err(|e| at(entry.span(), format!("{who}: accounts: {e}")))?;
            accounts.push(MemberPattern { pattern: entry.get_ref().clone(), line: line_column(text, entry.span().start).0 });
        }
        let mut users = Vec::new();
        for entry in raw.users.iter().flat_map(|l| l.get_ref()) {
            let uid = Principal::User.id_of(entry.get_ref()).map_err(|e| at(entry.span(), format!("{who}: users: {e}")))?;
            users.push(MemberUser { uid, name: entry.get_ref().clone(), line: line_column(text, entry.span().start).0 });
        }
        let as_tenant = RawTenant { memory: raw.memory, limit: raw.limit, share: raw.share, priority: raw.priority };
        let settings = settings(&who, &as_tenant, &at).map_err(|e| if e.position.is_none() { at(span.clone(), e.message) } else { e })?;
        teams.insert(name, TeamConfig { members, accounts, users, settings, ..TeamConfig::default() });
    }
    crate::teams::check_disjoint(&teams, |line, message| ConfigError { path: None, position: Some((line, 1)), message })?;
    Ok(Config { on_violation, other_tenants, violation_grace, tenants, priority_ceilings, share_ceilings, teams, account_teams })
}

/// Parses the settings a tenant or a team may have (`memory`, `limit`,
/// `share`, `priority`); `who` names it in messages ("tenant a", "team b").
fn settings(who: &str, raw: &RawTenant, at: &impl Fn(std::ops::Range<usize>, String) -> ConfigError) -> Result<TenantConfig, ConfigError> {
    let mut config = TenantConfig::default();
    match raw.memory.as_ref().map(|memory| (memory, memory.get_ref())) {
        None => {}
        Some((memory, RawMemory::AllDevices(size))) => {
            let bytes = units::parse_size(size).map_err(|e| at(memory.span(), format!("{who}: memory = {size:?}: {e}")))?;
            config.memory_bytes.all = Some(bytes);
        }
        Some((_, RawMemory::PerDevice(entries))) => {
            // The first spelling of each device, to name both on a duplicate.
            let mut spelled: BTreeMap<Option<DeviceKey>, &str> = BTreeMap::new();
            for (key, size) in entries {
                let device = parse_device_key(key.get_ref()).map_err(|e| at(key.span(), format!("{who}: {e}")))?;
                let text = size.get_ref().as_str().ok_or_else(|| {
                    at(size.span(), format!("{who}: memory for device {}: expected {}", key.get_ref(), units::SIZE_FORMAT))
                })?;
                let bytes = units::parse_size(text)
                    .map_err(|e| at(size.span(), format!("{who}: memory for device {}: {text:?}: {e}", key.get_ref())))?;
                if let Some(first) = spelled.insert(device.clone(), key.get_ref()) {
                    return Err(at(key.span(), format!("{who}: device {:?} is given twice (also as {first:?})", key.get_ref())));
                }
                // A device spelled once is set once.
                let _ = set_device(&mut config.memory_bytes, device, bytes);
            }
            config.memory_bytes.devices.sort_by(|(a, _), (b, _)| a.cmp(b));
        }
    }
    if let Some(limit) = &raw.limit {
        config.compute_limit_ratio_e4 = device_setting(who, "limit", LIMIT_FORMAT, limit, limit_value, &at)?;
    }
    if let Some(share) = &raw.share {
        config.compute_share_ratio_e4 = device_setting(who, "share", SHARE_FORMAT, share, limit_value, &at)?;
    }
    if let Some(priority) = &raw.priority {
        config.priority = device_setting(who, "priority", PRIORITY_FORMAT, priority, priority_value, &at)?;
    }
    if let (Some(share), Some(_)) = (&raw.share, &raw.limit) {
        share_within_limit(who, &config).map_err(|message| at(share.span(), message))?;
    }
    Ok(config)
}

/// Refuses a share above the same tenant's limit on a device: a share is
/// time guaranteed, a limit a ceiling, so it could never be given.
fn share_within_limit(who: &str, config: &TenantConfig) -> Result<(), String> {
    let Some((device, share, limit)) =
        crate::policy_check::share_above_limit(&config.compute_share_ratio_e4, &config.compute_limit_ratio_e4)
    else {
        return Ok(());
    };
    let on = match device {
        None => "on every device".to_string(),
        Some(DeviceKey::HostIndex(index)) => format!("on device {index}"),
        Some(DeviceKey::Uuid(uuid)) => format!("on device {uuid}"),
    };
    Err(format!(
        "{who}: share {} % is above its limit {} % {on}: a share is device time guaranteed and a limit a ceiling, \
         so the share could never be given; lower the share or raise the limit",
        crate::policy_check::percent(share),
        crate::policy_check::percent(limit)
    ))
}

/// The accepted form of a device UUID key.
pub const UUID_FORMAT: &str =
    "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (MIG-… for a MIG device) with hex digits, as nvidia-smi -L prints it";

/// A device key of a per-device table (see the module docs; `None` for
/// `all`), or why it is not one.
fn parse_device_key(key: &str) -> Result<Option<DeviceKey>, String> {
    if key.eq_ignore_ascii_case("all") || key == "*" {
        return Ok(None);
    }
    if !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) {
        return units::parse_device_index(key).map(|index| Some(DeviceKey::HostIndex(index))).map_err(|e| e.to_string());
    }
    if key.get(..4).is_some_and(|prefix| prefix.eq_ignore_ascii_case("gpu-") || prefix.eq_ignore_ascii_case("mig-")) {
        let groups: Vec<&str> = key.get(4..).unwrap_or_default().split('-').collect();
        let canonical =
            groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12]) && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
        return if canonical {
            Ok(Some(DeviceKey::Uuid(key.to_ascii_lowercase())))
        } else {
            Err(format!("device {key:?} is not a UUID: expected {UUID_FORMAT}"))
        };
    }
    Err(format!("device {key:?} is not a device index (0, 1, …), a UUID ({UUID_FORMAT}) or \"all\""))
}

/// Reads and parses a configuration file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        path: Some(path.display().to_string()),
        position: None,
        message: format!("cannot read the configuration: {e}"),
    })?;
    parse(&text).map_err(|e| ConfigError { path: Some(path.display().to_string()), ..e })
}

#[cfg(test)]
mod limit_tests {
    use super::*;

    #[test]
    fn a_limit_is_a_percentage_for_every_device_or_by_device() {
        let config = parse("[tenants.a]\nlimit = 30\n[tenants.b]\nlimit = { 0 = 20, all = 50 }\n").unwrap();
        assert_eq!(config.tenants["a"].compute_limit_for("GPU-x", Some(3)), Some(3000));
        assert_eq!(config.tenants["b"].compute_limit_for("GPU-x", Some(0)), Some(2000));
        assert_eq!(config.tenants["b"].compute_limit_for("GPU-x", Some(1)), Some(5000));
        assert!(!config.tenants["a"].memory_bytes.is_set());
    }

    #[test]
    fn a_bad_limit_is_refused_at_its_place() {
        for text in [
            "[tenants.a]\nlimit = 0\n",
            "[tenants.a]\nlimit = 101\n",
            "[tenants.a]\nlimit = \"30\"\n",
            "[tenants.a]\nlimit = 30.5\n",
            "[tenants.a]\nlimit = { 99 = 30 }\n",
            "[tenants.a]\nlimit = { 0 = -1 }\n",
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains("line 2, column"), "{text}: {e}");
            assert!(e.contains("limit"), "{text}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn full_configuration() {
        let config = parse(
            r#"
on_violation = "kill"
[tenants.team-a]
memory = "8GiB"
[tenants."team.b"]
memory = { 0 = "2GiB", all = "1G", "GPU-00112233-4455-6677-8899-AABBCCDDEEFF" = "3000m" }
[tenants.uncapped]
"#,
        )
        .unwrap();
        assert_eq!(config.on_violation, OnViolation::Kill);
        assert_eq!(config.violation_grace, DEFAULT_VIOLATION_GRACE);
        assert_eq!(config.memory_for("team-a", "GPU-x", Some(0)), Some(8 * GIB));
        assert_eq!(config.memory_for("nobody", "GPU-x", Some(0)), None);
        assert_eq!(config.tenants["team-a"].memory_for("GPU-x", Some(0)), Some(8 * GIB));
        let b = &config.tenants["team.b"];
        assert_eq!(b.memory_for("GPU-other", Some(0)), Some(2 * GIB));
        assert_eq!(b.memory_for("GPU-other", Some(1)), Some(GIB));
        assert_eq!(b.memory_for("GPU-00112233-4455-6677-8899-aabbccddeeff", Some(1)), Some(3000 << 20));
        assert!(b.uses_host_indices());
        assert_eq!(config.tenants["uncapped"].memory_for("GPU-x", Some(0)), None);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("0s"), Some(Duration::ZERO));
        // One grammar with `--timeout` and `top --interval`: bare seconds too.
        assert_eq!(parse_duration("5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_duration("5h"), Some(Duration::from_secs(5 * 3600)));
        for bad in ["", "s", "-1s", "1e3s", "5 s s", "99999999m"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert_eq!(parse("violation_grace = \"250ms\"\n").unwrap().violation_grace, Duration::from_millis(250));
        let e = error("\nviolation_grace = \"soon\"\n");
        assert_eq!(e.position, Some((2, 19)), "{e}");
        assert!(e.message.starts_with("violation_grace = \"soon\"") && e.message.contains(crate::duration::FORMAT), "{e}");
    }

    #[test]
    fn a_share_above_the_limit_is_refused_where_it_is_written() {
        let e = error("[tenants.a]\nlimit = 30\nshare = 60\n");
        assert_eq!(e.position, Some((3, 9)), "{e}");
        assert!(e.message.starts_with("tenant a: share 60 % is above its limit 30 % on every device"), "{e}");
        let e = error("[tenants.a]\nlimit = { 1 = 30, all = 80 }\nshare = 60\n");
        assert!(e.message.contains("share 60 % is above its limit 30 % on device 1"), "{e}");
        assert!(parse("[tenants.a]\nlimit = 60\nshare = 60\n").is_ok());
        assert!(parse("[tenants.a]\nlimit = { 0 = 30 }\nshare = { 1 = 60 }\n").is_ok(), "different devices");
    }

    #[test]
    fn a_size_without_a_unit_is_refused_and_kubernetes_units_are_read() {
        let e = error("[tenants.a]\nmemory = \"3\"\n");
        assert!(e.message.contains("\"3\" has no unit") && e.message.contains("3B if you mean bytes"), "{e}");
        assert_eq!(parse("[tenants.a]\nmemory = \"8Gi\"\n").unwrap().tenants["a"].memory_bytes.all, Some(8 << 30));
        assert_eq!(parse("[tenants.a]\nmemory = \"4096B\"\n").unwrap().tenants["a"].memory_bytes.all, Some(4096));
    }

    #[test]
    fn empty_file_governs_nobody() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    fn error(text: &str) -> ConfigError {
        parse(text).expect_err("must be refused")
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = error("[tenants.a]\nmemory = \"4GG\"\n");
        assert_eq!(e.position, Some((2, 10)), "{e}");
        assert!(e.message.contains("8GiB"), "{e}");

        let e = error("on_violation = \"explode\"\n");
        assert_eq!(e.position, Some((1, 16)), "{e}");
        assert!(e.message.contains("\"report\" or \"kill\""), "{e}");

        let e = error("[tenants.a]\nmemory = 3\n");
        assert_eq!(e.position.map(|p| p.0), Some(2), "{e}");

        let e = error("[tenants.a]\nmemroy = \"1G\"\n");
        assert_eq!(e.position.map(|p| p.0), Some(2), "{e}");
        assert!(e.message.contains("memroy"), "{e}");

        let e = error("[tenants.a\n");
        assert_eq!(e.position.map(|p| p.0), Some(1), "{e}");

        let e = error("[tenants.a]\nmemory =");
        assert_eq!(e.position, Some((2, 9)), "{e}");
        assert!(e.message.contains("missing"), "{e}");

        let e = error("\n\n[tenants.a]\nmemory = { gpu7 = \"1G\" }\n");
        assert_eq!(e.position.map(|p| p.0), Some(4), "{e}");

        let e = error("[tenants.\"a/b\"]\nmemory = \"1G\"\n");
        assert!(e.message.contains("invalid"), "{e}");
        assert_eq!(e.position.map(|p| p.0), Some(1), "{e}");
    }

    #[test]
    fn device_keys_are_refused_where_they_are_written() {
        let cases: &[(&str, (usize, usize), &str)] = &[
            // No ledger holds a device 99: an error at the key.
            ("[tenants.a]\nmemory = { 0 = \"1G\", 99 = \"1G\" }\n", (2, 22), "\"99\""),
            ("[tenants.a]\nmemory = { 00 = \"1G\" }\n", (2, 12), "leading zeros"),
            ("[tenants.a]\nmemory = { \"+1\" = \"1G\" }\n", (2, 12), "not a device index"),
            ("[tenants.a]\nmemory = { \" 1\" = \"1G\" }\n", (2, 12), "not a device index"),
            // Malformed UUIDs: no dashes, a short group, a letter that is not hex.
            ("[tenants.a]\nmemory = { \"GPU-00112233445566778899aabbccddeeff\" = \"1G\" }\n", (2, 12), "not a UUID"),
            ("[tenants.a]\nmemory = { \"GPU-0011223-4455-6677-8899-aabbccddeeff0\" = \"1G\" }\n", (2, 12), "not a UUID"),
            ("[tenants.a]\nmemory = { \"GPU-0011223g-4455-6677-8899-aabbccddeeff\" = \"1G\" }\n", (2, 12), "not a UUID"),
            ("[tenants.a]\nmemory = { \"MIG-00112233-4455-6677-8899\" = \"1G\" }\n", (2, 12), "not a UUID"),
            ("[tenants.a]\nmemory = { \"MIG-GPU-00112233-4455-6677-8899-aabbccddeeff/1/0\" = \"1G\" }\n", (2, 12), "not a UUID"),
            // One device under two spellings.
            ("[tenants.a]\nmemory = { all = \"1G\", \"*\" = \"2G\" }\n", (2, 24), "given twice"),
            (
                "[tenants.a]\nmemory = { \"GPU-00112233-4455-6677-8899-AABBCCDDEEFF\" = \"1G\", \"gpu-00112233-4455-6677-8899-aabbccddeeff\" = \"2G\" }\n",
                (2, 63),
                "given twice",
            ),
        ];
        for (text, position, says) in cases {
            let e = error(text);
            assert_eq!(e.position, Some(*position), "{text}\n{e}");
            assert!(e.message.contains(says) && e.message.contains("tenant a"), "{text}\n{e}");
        }
        // A MIG device's UUID is a key of its own.
        let mig = parse("[tenants.a]\nmemory = { \"MIG-00112233-4455-6677-8899-AABBCCDDEEFF\" = \"1G\" }\n").unwrap();
        assert_eq!(mig.tenants["a"].memory_for("MIG-00112233-4455-6677-8899-aabbccddeeff", Some(0)), Some(1 << 30));
        assert_eq!(mig.tenants["a"].memory_for("GPU-00112233-4455-6677-8899-aabbccddeeff", Some(0)), None);
        let e = error("[tenants.a]\nmemory = { \"GPU-0011\" = \"1G\" }\n");
        assert!(e.message.contains(UUID_FORMAT), "{e}");
        let e = error("[tenants.a]\nmemory = { 99 = \"1G\" }\n");
        assert!(e.message.contains("0 to 15"), "{e}");
    }

    #[test]
    fn sizes_are_refused_where_they_are_written() {
        let e = error("[tenants.a]\nmemory = { 0 = \"1G\", 1 = \"010G\" }\n");
        assert_eq!(e.position, Some((2, 26)), "{e}");
        assert!(e.message.contains("leading zero"), "{e}");
        let e = error("[tenants.a]\nmemory = \"1GiB\u{a0}\"\n");
        assert_eq!(e.position, Some((2, 10)), "{e}");
        assert!(e.message.contains("U+00A0"), "{e}");
        let e = error("[tenants.a]\nmemory = \"1GB\"\n");
        assert!(e.message.contains("ambiguous") && e.message.contains("1GiB"), "{e}");
        let e = error("[tenants.a]\nmemory = { 0 = 5 }\n");
        assert_eq!(e.position, Some((2, 16)), "{e}");
        let e = error("[tenants.\".hidden\"]\nmemory = \"1G\"\n");
        assert!(e.message.contains(units::TENANT_FORMAT) && e.message.contains("starts with '.'"), "{e}");
        assert_eq!(parse_duration("5s\u{a0}"), None);
    }

    fn gpu(index: u32, uuid: &str) -> GpuInfo {
        GpuInfo { index, uuid: uuid.into(), ..GpuInfo::default() }
    }

    #[test]
    fn caps_for_devices_this_host_does_not_have_are_named() {
        let config = parse(
            "[tenants.b]\nmemory = { all = \"1G\", 0 = \"2G\", 1 = \"2G\", \"GPU-00112233-4455-6677-8899-AABBCCDDEEFF\" = \"3G\" }\n",
        )
        .unwrap();
        let b = &config.tenants["b"];
        let one = [gpu(0, "GPU-aaaaaaaa-4455-6677-8899-aabbccddeeff")];
        let messages = b.unmatched_devices("b", &one);
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(
            messages[0].contains("tenant b") && messages[0].contains("device 1 ") && messages[0].contains("NVML shows 1 device"),
            "{messages:?}"
        );
        assert!(messages[1].contains("gpu-00112233-4455-6677-8899-aabbccddeeff"), "{messages:?}");
        let both = [gpu(0, "GPU-aaaaaaaa-4455-6677-8899-aabbccddeeff"), gpu(1, "GPU-00112233-4455-6677-8899-aabbccddeeff")];
        assert_eq!(b.unmatched_devices("b", &both), Vec::<String>::new());
        assert_eq!(b.unmatched_devices("b", &[]).len(), 3);
    }

    #[test]
    fn line_and_column_never_split_a_character() {
        assert_eq!(line_column("ü\nab", 1), (1, 1));
        assert_eq!(line_column("ü\nab", 3), (2, 1));
        assert_eq!(line_column("ü\nab", 99), (2, 3));
        assert_eq!(line_column("", 5), (1, 1));
    }

    mod random {
        use super::*;
        use proptest::prelude::*;

        /// Lines that look like a configuration, broken in every way.
        fn toml_ish_line() -> impl Strategy<Value = String> {
            let name = prop_oneof![Just("team-a".to_string()), Just("\".x\"".to_string()), "[a-z.\"/ü]{0,6}"];
            let size = prop_oneof![
                Just("\"8GiB\"".to_string()),
                Just("\"010G\"".to_string()),
                Just("3".to_string()),
                "\"[0-9. a-zA-Z\u{a0}]{0,8}\"",
            ];
            let key = prop_oneof![
                Just("0".to_string()),
                Just("99".to_string()),
                Just("all".to_string()),
                Just("\"GPU-00112233-4455-6677-8899-aabbccddeeff\"".to_string()),
                "\"[GPUgpu0-9a-f-]{0,44}\"",
                "[0-9]{1,3}",
            ];
            prop_oneof![
                name.prop_map(|n| format!("[tenants.{n}]")),
                size.clone().prop_map(|s| format!("memory = {s}")),
                prop::collection::vec((key, size), 0..4).prop_map(|entries| {
                    let inner: Vec<String> = entries.into_iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    format!("memory = {{ {} }}", inner.join(", "))
                }),
                "(on_violation|violation_grace|memroy|limit) = \"[a-z0-9.]{0,6}\"",
                "[\\[\\]{}=\",. a-z0-9\u{a0}ü#\t]{0,20}",
                any::<String>(),
            ]
        }

        fn check(text: &str) -> Result<(), TestCaseError> {
            match parse(text) {
                Ok(config) => {
                    for (name, tenant) in &config.tenants {
                        prop_assert!(units::validate_tenant_name(name).is_ok(), "{name:?}");
                        prop_assert!(tenant.memory_bytes.devices.iter().map(|(_, b)| b).chain(&tenant.memory_bytes.all).all(|b| *b > 0));
                    }
                }
                Err(e) => {
                    let lines = text.split('\n').count();
                    let Some((line, column)) = e.position else {
                        return Err(TestCaseError::fail(format!("no line and column: {e}\n{text:?}")));
                    };
                    prop_assert!(line >= 1 && line <= lines && column >= 1, "{e} in {lines} lines\n{text:?}");
                    prop_assert!(!e.message.is_empty());
                    let place = format!("line {line}, column {column}: ");
                    prop_assert!(e.to_string().starts_with(&place), "{e}");
                }
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

            #[test]
            fn toml_ish_files_never_panic_and_every_error_has_a_place(lines in prop::collection::vec(toml_ish_line(), 0..8)) {
                check(&lines.join("\n"))?;
            }

            #[test]
            fn any_text_never_panics_and_every_error_has_a_place(text in any::<String>()) {
                check(&text)?;
            }
        }
    }

    #[test]
    fn display_is_path_line_column() {
        let e = ConfigError { path: Some("/etc/g.toml".into()), position: Some((3, 7)), message: "bad".into() };
        assert_eq!(e.to_string(), "/etc/g.toml:3:7: bad");
    }

    #[test]
    fn priority_ceilings_by_user_then_group_then_default_and_root_unlimited() {
        let config =
            parse("[priority_ceilings]\ndefault = -1\nusers = { \"1001\" = 5, root = 3 }\ngroups = { \"50\" = 100, \"51\" = 20 }\n")
                .unwrap();
        assert_eq!(config.priority_ceiling(0, &[]), i32::MAX, "root may ask for anything, whatever the file says");
        assert_eq!(config.priority_ceiling(1001, &[50]), 5, "a user's own entry wins over its groups");
        assert_eq!(config.priority_ceiling(1002, &[51, 50]), 100, "the highest of a user's groups");
        assert_eq!(config.priority_ceiling(1003, &[7]), -1);
        assert_eq!(Config::default().priority_ceiling(1003, &[7]), 0, "0 when the file says nothing");
    }

    #[test]
    fn share_ceilings_are_whole_percentages_by_user_then_group_then_default() {
        let config = parse("[share_ceilings]\ndefault = 50\nusers = { \"1001\" = 20 }\ngroups = { \"50\" = 30 }\n").unwrap();
        assert_eq!(config.share_ceilings.of(1001, &[50]), 2000);
        assert_eq!(config.share_ceilings.of(1002, &[50]), 3000);
        assert_eq!(config.share_ceilings.of(1003, &[]), 5000);
        assert_eq!(Config::default().share_ceilings.of(1003, &[]), 10_000, "a whole device unless the file says");
        let err = parse("[share_ceilings]\ndefault = 101\n").unwrap_err().to_string();
        assert!(err.contains("share_ceilings: default = 101: expected a whole percentage from 0 to 100"), "{err}");
    }

    #[test]
    fn bad_priority_ceilings_are_refused_at_their_place() {
        for (text, says) in [
            ("[priority_ceilings]\ndefault = 1001\n", "default = 1001: expected a whole number from -1000 to 1000"),
            ("[priority_ceilings]\nusers = { \"1001\" = \"high\" }\n", "user \"1001\" = \"high\""),
            ("[priority_ceilings]\nusers = { no-such-user-here = 1 }\n", "no user \"no-such-user-here\" on this host"),
            ("[priority_ceilings]\ngroups = { no-such-group-here = 1 }\n", "no group \"no-such-group-here\""),
            ("[priority_ceilings]\nusers = { root = 1, \"0\" = 2 }\n", "named twice"),
            ("[priority_ceilings]\nceiling = 1\n", "unknown field"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains("line 2, column") && e.contains(says), "{text}: {e}");
        }
    }
}

#[cfg(test)]
mod team_tests {
    use super::*;

    #[test]
    fn a_team_names_its_tenants_and_has_a_tenants_settings() {
        let config = parse(
            "[teams.research]\ntenants = [\"alice-*\", \"bert\"]\nmemory = \"40GiB\"\nshare = 50\nlimit = 70\npriority = 1\n\
             [teams.ops]\ntenants = [\"ops-?\"]\nshare = { 0 = 20, all = 30 }\n\
             [tenants.alice-7]\n[tenants.bert]\n[tenants.ops-1]\n[tenants.ops-12]\n[tenants.alice]\n",
        )
        .unwrap();
        let (name, team) = config.team_of("alice-7").unwrap();
        assert_eq!(name, "research");
        assert_eq!(team.settings.memory_for("GPU-x", Some(0)), Some(40 << 30));
        let p = team.settings.compute_for("GPU-x", Some(0)).unwrap();
        assert_eq!((p.share_ratio_e4, p.limit_ratio_e4, p.priority), (5000, 7000, 1));
        assert_eq!(config.team_of("bert").unwrap().0, "research");
        assert_eq!(config.team_of("ops-1").unwrap().0, "ops");
        assert_eq!(config.teams["ops"].settings.compute_for("GPU-x", Some(1)).unwrap().share_ratio_e4, 3000);
        assert!(config.team_of("ops-12").is_none());
        assert!(config.team_of("alice").is_none());
        // A name the configuration does not govern joins no team, whatever
        // pattern it matches.
        assert!(config.team_of("alice-8").is_none());
        assert_eq!(config.teams["research"].members[1].line, 2);
    }

    #[test]
    fn a_tenant_two_teams_name_is_refused_naming_both_lines() {
        for (text, lines) in [
            ("[teams.a]\ntenants = [\"bert\"]\n[teams.b]\ntenants = [\"x\",\n \"bert\"]\n", ["(line 2)", "(line 5)"]),
            ("[teams.a]\ntenants = [\"alice-*\"]\n[teams.b]\ntenants = [\"*-b\"]\n", ["(line 2)", "(line 4)"]),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains("at most one team"), "{e}");
            for line in lines {
                assert!(e.contains(line), "{text}: {e}");
            }
            assert!(e.contains("team a") && e.contains("team b"), "{e}");
        }
        // One team may name a tenant twice; disjoint patterns are fine.
        parse("[teams.a]\ntenants = [\"bert\", \"b*\"]\n[teams.b]\ntenants = [\"c*\"]\n").unwrap();
    }

    #[test]
    fn a_team_names_accounts_and_admitted_tenants_of_them_are_its_members() {
        let mut config = parse(
            "[teams.physics]\naccounts = [\"physics\", \"astro\"]\nshare = 50\n\
             [teams.chemistry]\naccounts = [\"chemistry\"]\ntenants = [\"chem-*\"]\nshare = 50\n\
             [teams.batch]\ntenants = [\"slurm-*\"]\n",
        )
        .unwrap();
        // The tenants the monitor governs (admitted ones join `tenants` in
        // its effective configuration); `y` is not one.
        for tenant in ["slurm-1", "slurm-2", "slurm-3", "slurm-4", "chem-1", "x", "z", "w"] {
            config.tenants.insert(tenant.into(), TenantConfig::default());
        }
        assert_eq!(
            config.teams["physics"].accounts.iter().map(|a| (a.pattern.as_str(), a.line)).collect::<Vec<_>>(),
            [("physics", 2), ("astro", 2)]
        );
        // Before any admission, the patterns alone.
        assert_eq!(config.team_of("slurm-1").unwrap().0, "batch");
        assert_eq!(config.team_of("chem-1").unwrap().0, "chemistry");
        config.resolve_accounts([
            ("slurm-1", "physics"),
            ("slurm-2", "astro"),
            ("slurm-3", "chemistry"),
            ("slurm-4", "biology"),
            ("x", "physics"),
        ]);
        // An account a team names wins over another team's pattern.
        assert_eq!(config.team_of("slurm-1").unwrap().0, "physics");
        assert_eq!(config.team_of("slurm-2").unwrap().0, "physics");
        assert_eq!(config.team_of("slurm-3").unwrap().0, "chemistry");
        assert!(!config.teams["batch"].has("slurm-1") && !config.teams["batch"].has("slurm-3"));
        assert_eq!(config.team_of("x").unwrap().0, "physics");
        // An account no team names: the patterns decide.
        assert_eq!(config.team_of("slurm-4").unwrap().0, "batch");
        assert_eq!(config.team_of("chem-1").unwrap().0, "chemistry");
        assert!(config.team_of("y").is_none());
        // Each tenant in exactly one team.
        for tenant in ["slurm-1", "slurm-2", "slurm-3", "slurm-4", "x", "chem-1"] {
            assert_eq!(config.teams.values().filter(|t| t.has(tenant)).count(), 1, "{tenant}");
        }
        // Resolved again (an admission released and reaped): forgotten.
        config.resolve_accounts([("slurm-2", "astro")]);
        assert_eq!(config.team_of("slurm-1").unwrap().0, "batch");
        assert_eq!(config.team_of("slurm-2").unwrap().0, "physics");
        assert!(config.team_of("x").is_none());
        // Accounts are exact: no patterns, case as written.
        config.resolve_accounts([("z", "Physics"), ("w", "phys")]);
        assert!(config.team_of("z").is_none() && config.team_of("w").is_none());
    }

    #[test]
    fn with_account_teams_every_admitted_account_is_a_team_and_a_team_of_its_name_gives_its_settings() {
        // Off (the default): a team must name its members.
        let e = parse("[teams.ml-prod]\nmemory = \"4GiB\"\n").unwrap_err().to_string();
        assert!(e.contains("names no members") && e.contains("account_teams"), "{e}");
        let mut config =
            parse("account_teams = true\n[teams.ml-prod]\nmemory = \"4GiB\"\nshare = 60\n[teams.research]\naccounts = [\"physics\"]\n")
                .unwrap();
        assert!(config.account_teams);
        for tenant in ["ml-prod.a", "ml-dev.b", "ml-dev.c", "phys.d", "self"] {
            config.tenants.insert(tenant.into(), TenantConfig::default());
        }
        config.resolve_accounts([("ml-prod.a", "ml-prod"), ("ml-dev.b", "ml-dev"), ("ml-dev.c", "ml-dev"), ("phys.d", "physics")]);
        // Its own name's team, with the file's settings.
        assert_eq!(config.team_of("ml-prod.a").unwrap().0, "ml-prod");
        assert_eq!(config.teams["ml-prod"].settings.memory_for("GPU-x", Some(0)), Some(4 << 30));
        // A team made for an account the file does not name: no settings.
        assert_eq!(config.team_of("ml-dev.b").unwrap().0, "ml-dev");
        assert_eq!(config.team_of("ml-dev.c").unwrap().0, "ml-dev");
        assert_eq!(config.teams["ml-dev"].settings, TenantConfig::default());
        // A team that names the account wins over the account's own name.
        assert_eq!(config.team_of("phys.d").unwrap().0, "research");
        assert!(!config.teams.contains_key("physics"));
        // No account, no team.
        assert!(config.team_of("self").is_none());
        // An account that is not a team name is left alone.
        let long = "a".repeat(64);
        config.resolve_accounts([("self", long.as_str())]);
        assert!(config.team_of("self").is_none());
    }

    #[test]
    fn an_account_two_teams_name_is_refused_naming_both_lines() {
        let e = parse("[teams.a]\naccounts = [\"physics\"]\n[teams.b]\ntenants = [\"x\"]\naccounts = [\"chem\",\n \"physics\"]\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("at most one team") && e.contains("\"physics\""), "{e}");
        assert!(e.contains("team a") && e.contains("team b") && e.contains("(line 2)") && e.contains("(line 6)"), "{e}");
        let e = parse("[teams.a]\naccounts = [\"physics\", \"physics\"]\n").unwrap_err().to_string();
        assert!(e.contains("team a names it twice"), "{e}");
        // Tenants and accounts are names of different things: a tenant
        // named "physics" and an account "physics" do not overlap.
        parse("[teams.a]\naccounts = [\"physics\"]\n[teams.b]\ntenants = [\"physics\", \"*\"]\n").unwrap();
    }

    #[test]
    fn a_team_names_users_and_their_queued_jobs_tenants_join_it() {
        // Numbers need no lookup; `root` is on every host.
        let mut config = parse(
            "[teams.research]\nusers = [\"1001\", \"root\"]\nmemory = \"4GiB\"\n\
             [teams.batch]\ntenants = [\"queue-*\"]\naccounts = [\"physics\"]\n\
             [teams.ops]\nusers = [\"1002\"]\n",
        )
        .unwrap();
        let research = &config.teams["research"];
        assert_eq!(
            research.users.iter().map(|u| (u.uid, u.name.as_str(), u.line)).collect::<Vec<_>>(),
            [(1001, "1001", 2), (0, "root", 2)]
        );
        assert_eq!(config.team_of_user(1001), Some("research"));
        assert_eq!(config.team_of_user(0), Some("research"));
        assert_eq!(config.team_of_user(1002), Some("ops"));
        assert_eq!(config.team_of_user(1003), None);
        config.resolve_accounts([]);
        config.join_queue_tenants([("queue-1", 1001), ("queue-2", 1002), ("queue-3", 1003)]);
        // The owner's team wins over another team's pattern, and the tenant is governed.
        assert_eq!(config.team_of("queue-1").unwrap().0, "research");
        assert!(config.tenants["queue-1"].is_empty(), "no settings of its own: the queue holds its caps");
        assert_eq!(config.team_of("queue-2").unwrap().0, "ops");
        assert!(!config.teams["batch"].has("queue-1") && !config.teams["batch"].has("queue-2"));
        // An owner in no team: left as it was (not governed, in no team).
        assert!(config.team_of("queue-3").is_none() && !config.tenants.contains_key("queue-3"));
        // Each round starts afresh: a job no longer held leaves its team.
        let mut again = parse("[teams.research]\nusers = [\"1001\"]\n").unwrap();
        again.resolve_accounts([]);
        again.join_queue_tenants([("queue-1", 1001)]);
        again.resolve_accounts([]);
        assert!(!again.teams["research"].has("queue-1"));
    }

    #[test]
    fn a_user_two_teams_name_or_an_unknown_user_is_refused_naming_the_line() {
        let e =
            parse("[teams.a]\nusers = [\"1001\"]\n[teams.b]\ntenants = [\"x\"]\nusers = [\"7\",\n \"1001\"]\n").unwrap_err().to_string();
        assert!(e.contains("at most one team") && e.contains("uid 1001"), "{e}");
        assert!(e.contains("team a") && e.contains("team b") && e.contains("(line 2)") && e.contains("(line 6)"), "{e}");
        // A name and a number of one user, in one team.
        let e = parse("[teams.a]\nusers = [\"root\", \"0\"]\n").unwrap_err().to_string();
        assert!(e.contains("team a names it twice") && e.contains("uid 0"), "{e}");
        let e = parse("[teams.a]\ntenants = [\"x\"]\nusers = [\"no-such-user-here\"]\n").unwrap_err().to_string();
        assert!(e.contains("line 3") && e.contains("team a: users: no user \"no-such-user-here\" on this host"), "{e}");
        assert!(e.contains("give a user name it knows or a number"), "{e}");
        let e = parse("[teams.a]\nusers = []\n").unwrap_err().to_string();
        assert!(e.contains("users = []: name at least one"), "{e}");
        // Users alone are members enough.
        parse("[teams.a]\nusers = [\"1001\"]\n").unwrap();
    }

    #[test]
    fn bad_team_values_are_refused_at_their_place() {
        for (text, says) in [
            ("[teams.a]\ntenants = []\n", "tenants = []: name at least one"),
            ("[teams.a]\naccounts = []\n", "accounts = []: name at least one"),
            ("[teams.a]\naccounts = [\"phys*\"]\n", "team a: accounts: \"phys*\": expected"),
            ("[teams.a]\naccounts = [\"a b\"]\n", "team a: accounts"),
            ("[teams.a]\naccounts = [\"\"]\n", "team a: accounts"),
            ("[teams.a]\nshare = 50\n", "names no members: give tenants = [names or patterns], accounts"),
            ("[teams.a]\ntenants = [\"a b\"]\n", "is not allowed"),
            ("[teams.a]\ntenants = [\"x\"]\nmemory = \"4GG\"\n", "team a: memory"),
            ("[teams.a]\ntenants = [\"x\"]\nshare = 0\n", "team a: share"),
            ("[teams.a]\ntenants = [\"x\"]\nshare = 80\nlimit = 50\n", "team a: share 80 % is above its limit"),
            ("[teams.a]\ntenants = [\"x\"]\nquota = 3\n", "unknown field"),
            ("[teams.\".a\"]\ntenants = [\"x\"]\n", "team name"),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(e.contains("line "), "{text}: {e}");
        }
    }
}
