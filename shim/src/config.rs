//! The shim's configuration: read from the environment once, into a static.
//!
//! | variable | meaning |
//! |---|---|
//! | `GPUSLICE_MEMORY_LIMIT` | cap for every device (`8GiB`) or per device (`0=8GiB,1=4GiB`) |
//! | `CUDA_DEVICE_MEMORY_LIMIT` | HAMi-core's cap for every device (`3000m`, bytes) |
//! | `CUDA_DEVICE_MEMORY_LIMIT_<i>` | HAMi-core's cap for device `i`, overriding the one above |
//! | `GPUSLICE_COMPUTE_LIMIT` | ceiling on device time, percent, for every device (`30`) or per device (`0=30,1=60`) |
//! | `CUDA_DEVICE_SM_LIMIT` | HAMi-core's ceiling for every device, percent; `0` is none |
//! | `CUDA_DEVICE_SM_LIMIT_<i>` | HAMi-core's ceiling for device `i`; `0` leaves the one above |
//! | `GPUSLICE_TENANT` | tenant name; unset, the process's cgroup names it (see below) |
//! | `GPUSLICE_DIR` | ledger directory, an absolute path (default: `ledger::default_dir()`) |
//! | `GPUSLICE_LOG` | `error`, `warn` (default), `info` or `debug`, to stderr |
//!
//! When `GPUSLICE_MEMORY_LIMIT` is set the HAMi-core memory variables are
//! ignored, and when `GPUSLICE_COMPUTE_LIMIT` is set HAMi-core's
//! `CUDA_DEVICE_SM_LIMIT*` are. HAMi-core reads `CUDA_DEVICE_SM_LIMIT=0` (and
//! anything at or above 100) as no limit and lets a per-device value of `0`
//! fall back to `CUDA_DEVICE_SM_LIMIT`; here `0` keeps those meanings, 100 is
//! the whole device (no ceiling either), and a value above 100 is refused,
//! since it is no percentage. A limit of 100 is accepted as written and
//! limits nothing.
//! Device indices are the ordinals the process sees, after
//! `CUDA_VISIBLE_DEVICES`. A value that does not parse (an empty one
//! included) is an error: the shim fails closed, it never reads a typo as
//! "no cap". Values follow [`ledger::units`]: ASCII only, no leading zeros,
//! no `GB`, no size without a unit (`4096B` for bytes) except in HAMi-core's
//! `CUDA_DEVICE_MEMORY_LIMIT*`, where a plain number is bytes as HAMi-core
//! documents it. Beyond the grammar, a tenant's tricks are refused too:
//! - a per-device cap that missed its device: one for a device the process
//!   does not see while a device it sees has no cap (`1=1GiB` with
//!   `CUDA_VISIBLE_DEVICES=1`, `CUDA_DEVICE_MEMORY_LIMIT_7` on a one-GPU
//!   process), since the typo would mean "no cap": refused here when
//!   `CUDA_VISIBLE_DEVICES` already shows it, and by
//!   [`Setting::check_ordinals`] once the driver has counted the devices.
//!   A list that caps every device the process sees may name more: one list
//!   is often shared by processes that each see part of the host's (or the
//!   pod's) devices, as launchers that set `CUDA_VISIBLE_DEVICES` per worker
//!   do;
//! - a `GPUSLICE_` variable the shim does not read (a misspelt name would
//!   mean its setting silently not applied);
//! - the same for compute limits: a per-device limit for a device the
//!   process does not see while a device it sees has none;
//! - a variable this module reads that appears twice in the environment (a
//!   crafted `envp`), since which copy counts depends on who reads it;
//! - a relative `GPUSLICE_DIR` (each working directory would get a ledger of
//!   its own, and the tenant a cap per directory).
//!
//! # The tenant without `GPUSLICE_TENANT`
//! The process's container names it: the last component of the most
//! specific path in `/proc/self/cgroup`, the unified (v2) hierarchy's first,
//! then the v1 memory controller's (on hybrid hosts v2's path is often `/`
//! while the memory controller names the container), then any other
//! controller's. When every path is `/` (a private cgroup namespace, or no
//! container at all) nothing tells this container apart from its
//! neighbours: with a cap or a compute limit set, the shim fails closed and
//! asks for `GPUSLICE_TENANT` rather than let every such container share one
//! cap under `default`; without either the process is accounted as `default`.
//! No other identity is guessed: namespace inode numbers are reused once a
//! container is gone and change when it restarts, and the hostname or a pod
//! name in the environment is no more authoritative than `GPUSLICE_TENANT`.

use ledger::compute::{self, ComputeLimitError, COMPUTE_LIMIT_FORMAT, PRIORITY_FORMAT};
use ledger::units::{self, PerDevice, MEMORY_LIMIT_FORMAT, TENANT_FORMAT};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How much the shim says on stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum LogLevel {
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

pub const LOG_FORMAT: &str = "one of error, warn, info, debug";

const OURS: &str = "GPUSLICE_MEMORY_LIMIT";
const HAMI: &str = "CUDA_DEVICE_MEMORY_LIMIT";
const OURS_COMPUTE: &str = "GPUSLICE_COMPUTE_LIMIT";
const HAMI_COMPUTE: &str = "CUDA_DEVICE_SM_LIMIT";
const VISIBLE: &str = "CUDA_VISIBLE_DEVICES";

/// A per-device setting the environment asks for (a memory cap, a compute
/// limit or share, a priority), with where each value was written, for
/// messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting<T> {
    /// The values, by device ordinal.
    pub values: PerDevice<T>,
    /// The variable the setting came from: ours, or HAMi-core's (for every
    /// device, whose `…_<i>` variables may add single devices).
    pub source: &'static str,
    /// The value of `source` as written (empty when it is unset).
    pub value: String,
    /// The variables that set single devices on their own (HAMi-core's
    /// `…_<i>`): ordinal, variable and value.
    pub device_variables: Vec<(u32, String, String)>,
    /// What the setting is, for messages: `cap`, `compute limit`, …
    pub what: &'static str,
}

/// The memory caps the environment asks for, bytes.
pub type MemoryCaps = Setting<u64>;
/// The compute limits (or shares) the environment asks for, percent.
pub type ComputeLimits = Setting<u32>;
/// The scheduling priorities the environment asks for: higher first.
pub type Priorities = Setting<i32>;

impl<T: Copy> Setting<T> {
    /// Nothing set, from `source`.
    fn unset(source: &'static str, what: &'static str) -> Self {
        Setting { values: PerDevice::default(), source, value: String::new(), device_variables: Vec::new(), what }
    }

    /// The value of device `ordinal`, if the environment sets one.
    pub fn for_device(&self, ordinal: u32) -> Option<T> {
        self.values.for_device(ordinal)
    }

    /// Whether any device has a value.
    pub fn any(&self) -> bool {
        self.values.is_set()
    }

    /// Refuses a per-device value that missed its device, now that the
    /// driver says the process sees `device_count` devices: a value for a
    /// device it does not see while one it sees has none (see the module
    /// docs; `1=5` in a process that sees one device would otherwise be
    /// ignored silently). Call it at registration, before anything is
    /// applied.
    pub fn check_ordinals(&self, device_count: u32) -> Result<(), ConfigError> {
        self.check_below(device_count, &devices_seen(device_count))
    }

    /// Refuses a value for a device at or above `visible` while a device
    /// below it has none: the list missed its device, and the typo would
    /// mean no cap (or limit, …).
    fn check_below(&self, visible: u32, seen: &str) -> Result<(), ConfigError> {
        let Some((ordinal, unset)) = self.values.missed_device(visible) else { return Ok(()) };
        let (variable, value) = match self.device_variables.iter().find(|(o, _, _)| *o == ordinal) {
            Some((_, variable, value)) => (variable.as_str(), value.as_str()),
            None => (self.source, self.value.as_str()),
        };
        Err(ConfigError {
            variable: variable.to_string(),
            value: Some(value.to_string()),
            expected: format!(
                "device {ordinal} is not a device this process sees ({seen}; indices are the ordinals after {VISIBLE}), \
                 and its device {unset} would have no {}",
                self.what
            ),
        })
    }
}

/// Describes the devices a process sees, after the driver counted them.
fn devices_seen(device_count: u32) -> String {
    match device_count {
        0 => "it sees no device".to_string(),
        1 => "it sees 1 device, index 0".to_string(),
        n => format!("it sees {n} devices, indices 0 to {}", n - 1),
    }
}

/// Everything the shim reads from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub memory: MemoryCaps,
    pub compute: ComputeLimits,
    /// Compute shares, percent (`GPUSLICE_COMPUTE_SHARE`).
    pub share: ComputeLimits,
    pub priority: Priorities,
    pub tenant: String,
    pub dir: PathBuf,
    /// Whether `GPUSLICE_DIR` named `dir` (else it is the default, which
    /// the shim may create).
    pub dir_given: bool,
    pub log_level: LogLevel,
}

/// A variable whose value (or absence) the shim refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub variable: String,
    /// The value as written; `None` when the variable is unset.
    pub value: Option<String>,
    /// What was wrong and what is accepted.
    pub expected: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => write!(f, "{}={:?} is invalid: {}", self.variable, value, self.expected),
            None => write!(f, "{} is unset: {}", self.variable, self.expected),
        }
    }
}

fn invalid(variable: &str, value: &str, expected: impl fmt::Display) -> ConfigError {
    ConfigError { variable: variable.to_string(), value: Some(value.to_string()), expected: expected.to_string() }
}

/// The environment as name/value pairs, in order, duplicates kept; a value
/// that is not UTF-8 is kept lossily (its bytes become U+FFFD) so that it
/// is refused with a readable message.
pub type Vars = Vec<(String, String)>;

/// The one value of `name`; a name set twice is refused.
fn get<'a>(vars: &'a Vars, name: &str) -> Result<Option<&'a str>, ConfigError> {
    let mut values = vars.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let first = values.next();
    match values.next() {
        None => Ok(first),
        Some(second) => Err(ConfigError {
            variable: name.to_string(),
            value: first.map(str::to_string),
            expected: format!(
                "{name} is set twice in the environment (also to {second:?}), and which one counts depends on who \
                 reads it; set it once"
            ),
        }),
    }
}

/// Reads one of our per-device variables, `name`, with `parse` (each
/// follows [`ledger::units::parse_per_device`]); `message` says what was
/// wrong and what is accepted. `None` when it is unset.
fn ours<T: Copy, E>(
    vars: &Vars,
    name: &'static str,
    what: &'static str,
    parse: impl Fn(&str) -> Result<PerDevice<T>, E>,
    message: impl Fn(E) -> String,
) -> Result<Option<Setting<T>>, ConfigError> {
    let Some(value) = get(vars, name)? else { return Ok(None) };
    let values = parse(value).map_err(|e| invalid(name, value, message(e)))?;
    Ok(Some(Setting { values, value: value.to_string(), ..Setting::unset(name, what) }))
}

/// Reads one of HAMi-core's per-device settings: `name` for every device
/// and `name_<i>` for device `i`, which wins over it. `value` parses one
/// value of a variable (`None`: the value means no setting, and a device's
/// leaves the one for every device).
fn hami<T: Copy>(
    vars: &Vars,
    name: &'static str,
    what: &'static str,
    value: impl Fn(&str, &str) -> Result<Option<T>, ConfigError>,
) -> Result<Setting<T>, ConfigError> {
    let mut setting = Setting::unset(name, what);
    if let Some(written) = get(vars, name)? {
        setting.values.all = value(name, written)?;
        setting.value = written.to_string();
    }
    let mut devices = Vec::new();
    for (variable, written) in vars {
        let Some(index) = variable.strip_prefix(name).and_then(|rest| rest.strip_prefix('_')) else { continue };
        // HAMi-core reads CUDA_DEVICE_MEMORY_LIMIT_0, never _00: one spelling
        // per device, so two variables cannot name the same one.
        let ordinal = units::parse_device_index(index)
            .map_err(|e| invalid(variable, written, format!("the suffix of {name}_<i> must be a device index: {e}")))?;
        get(vars, variable)?;
        if let Some(parsed) = value(variable, written)? {
            devices.push((ordinal, parsed, variable, written));
        }
    }
    devices.sort_unstable_by_key(|(ordinal, ..)| *ordinal);
    for (ordinal, parsed, variable, written) in devices {
        setting.values.insert(ordinal, parsed).map_err(|_| invalid(variable, written, format!("device {ordinal} is given twice")))?;
        setting.device_variables.push((ordinal, variable.clone(), written.clone()));
    }
    Ok(setting)
}

fn parse_caps(vars: &Vars) -> Result<MemoryCaps, ConfigError> {
    let message = |e| match e {
        units::ParseError::NotASize => format!("expected {MEMORY_LIMIT_FORMAT}"),
        other => other.to_string(),
    };
    if let Some(caps) = ours(vars, OURS, "cap", units::parse_memory, message)? {
        return Ok(caps);
    }
    hami(vars, HAMI, "cap", |variable, value| units::parse_hami_size(value).map(Some).map_err(|e| invalid(variable, value, e)))
}

/// What HAMi-core's `CUDA_DEVICE_SM_LIMIT*` may look like, for error messages.
const HAMI_COMPUTE_FORMAT: &str = "a percentage of device time from 0 (no limit) to 100";

fn compute_error(variable: &str, value: &str, e: ComputeLimitError, format: &str) -> ConfigError {
    invalid(variable, value, format!("{e}; expected {format}"))
}

fn parse_limits(vars: &Vars) -> Result<ComputeLimits, ConfigError> {
    let message = |e| format!("{e}; expected {COMPUTE_LIMIT_FORMAT}");
    if let Some(limits) = ours(vars, OURS_COMPUTE, "compute limit", compute::parse_compute_limit, message)? {
        return Ok(limits);
    }
    // HAMi-core: 0 is no limit; a per-device 0 leaves the one for every device.
    hami(vars, HAMI_COMPUTE, "compute limit", |variable, value| {
        let percent = compute::parse_percent(value, 0).map_err(|e| compute_error(variable, value, e, HAMI_COMPUTE_FORMAT))?;
        Ok((percent > 0).then_some(percent))
    })
}

const OURS_SHARE: &str = "GPUSLICE_COMPUTE_SHARE";
const OURS_PRIORITY: &str = "GPUSLICE_PRIORITY";
const HAMI_PRIORITY: &str = "CUDA_TASK_PRIORITY";
/// What `GPUSLICE_COMPUTE_SHARE` may look like, for error messages.
const SHARE_FORMAT: &str = "a percentage of device time from 1 to 100 for every device, like 60, or per device, like 0=60,1=25";
/// What HAMi-core's `CUDA_TASK_PRIORITY` may be, for error messages.
const HAMI_PRIORITY_FORMAT: &str = "0 (HAMi's high priority, gpuslice priority 1) or 1 (low, gpuslice priority 0)";

fn parse_shares(vars: &Vars) -> Result<ComputeLimits, ConfigError> {
    let shares = ours(vars, OURS_SHARE, "share", compute::parse_compute_limit, |e| format!("{e}; expected {SHARE_FORMAT}"))?;
    Ok(shares.unwrap_or_else(|| Setting::unset(OURS_SHARE, "share")))
}

fn parse_priorities(vars: &Vars) -> Result<Priorities, ConfigError> {
    let message = |e| format!("{e}; expected {PRIORITY_FORMAT}");
    if let Some(priorities) = ours(vars, OURS_PRIORITY, "priority", compute::parse_priorities, message)? {
        return Ok(priorities);
    }
    // HAMi-core: 0 is its high tier, 1 its low one.
    let mut priorities = Setting::unset(HAMI_PRIORITY, "priority");
    if let Some(value) = get(vars, HAMI_PRIORITY)? {
        priorities.values.all = Some(match value {
            "0" => 1,
            "1" => 0,
            _ => return Err(invalid(HAMI_PRIORITY, value, HAMI_PRIORITY_FORMAT)),
        });
        priorities.value = value.to_string();
    }
    Ok(priorities)
}

/// The last component of `path` when it tells a cgroup apart: not the root
/// (`/`), nor `.` or `..` (the way out of a cgroup namespace).
fn distinguishing_name(path: &str) -> Option<&str> {
    let last = path.trim_end_matches('/').rsplit('/').next()?;
    (!matches!(last, "" | "." | "..")).then_some(last)
}

/// Derives a tenant name from `/proc/self/cgroup`: the last component of
/// the most specific path (see the module docs), with characters outside
/// the tenant alphabet replaced, at most the last 63 kept (container ids
/// are unique at their end as well as their start) and a leading dot
/// replaced. `None` when no path tells the process apart.
pub fn tenant_from_cgroup(text: &str) -> Option<String> {
    let (mut unified, mut memory, mut others) = (None, None, Vec::new());
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next()) else { continue };
        if controllers.is_empty() {
            unified = unified.or(Some(path));
        } else if controllers.split(',').any(|c| c == "memory") {
            memory = memory.or(Some(path));
        } else {
            others.push(path);
        }
    }
    let last = unified.into_iter().chain(memory).chain(others).find_map(distinguishing_name)?;
    let cleaned: Vec<char> =
        last.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    let skip = cleaned.len().saturating_sub(63);
    let mut name: String = cleaned.into_iter().skip(skip).collect();
    if name.starts_with('.') {
        name.replace_range(..1, "_");
    }
    units::validate_tenant_name(&name).ok()?;
    Some(name)
}

fn parse_dir(vars: &Vars) -> Result<PathBuf, ConfigError> {
    const DIR: &str = "GPUSLICE_DIR";
    let dir = match get(vars, DIR)? {
        Some("") => return Err(invalid(DIR, "", "a directory path; unset it for the default")),
        Some(value) if value.contains(char::REPLACEMENT_CHARACTER) => {
            return Err(invalid(DIR, value, "an absolute directory path in UTF-8"))
        }
        Some(value) if !Path::new(value).is_absolute() => {
            return Err(invalid(
                DIR,
                value,
                "an absolute directory path (a relative one names another ledger in every working directory, \
                 so a tenant's processes would not share one cap); unset it for the default",
            ))
        }
        Some(value) => PathBuf::from(value),
        None => ledger::default_dir(),
    };
    if !dir.is_absolute() {
        return Err(ConfigError {
            variable: DIR.into(),
            value: None,
            expected: format!(
                "the default ledger directory {:?} is relative (XDG_RUNTIME_DIR is); set {DIR} to an absolute path",
                dir.display().to_string()
            ),
        });
    }
    Ok(dir)
}

/// The `GPUSLICE_` variables the shim reads.
const SHIM_VARIABLES: &[&str] = &[
    "GPUSLICE_MEMORY_LIMIT",
    "GPUSLICE_COMPUTE_LIMIT",
    "GPUSLICE_COMPUTE_SHARE",
    "GPUSLICE_PRIORITY",
    "GPUSLICE_TENANT",
    "GPUSLICE_DIR",
    "GPUSLICE_LOG",
    "GPUSLICE_CUDA_LIB",
    "GPUSLICE_NVML_LIB",
];

/// `GPUSLICE_` variables of gpuslice's own tools, which the shim leaves
/// alone: `gpuslice run`'s library override and the queue's overcommit
/// ratio (read by the monitor, and possibly left in a queued command's
/// environment). Nothing else: the test and benchmark harness's settings
/// are named `GS_TEST_…`, outside the product's prefix.
const TOOL_VARIABLES: &[&str] = &["GPUSLICE_SHIM_LIB", "GPUSLICE_QUEUE_OVERCOMMIT"];

/// Refuses a `GPUSLICE_` variable the shim would not apply: a misspelt
/// name (`GPUSLICE_MEMORY_LIMT`) would otherwise mean no cap, and a share
/// or a priority would mean none, silently.
fn check_names(vars: &Vars) -> Result<(), ConfigError> {
    for (name, value) in vars.iter().filter(|(k, _)| k.starts_with("GPUSLICE_")) {
        let name = name.as_str();
        if SHIM_VARIABLES.contains(&name) || TOOL_VARIABLES.contains(&name) {
            continue;
        }
        let expected = format!(
            "{name} is not a gpuslice variable, so its setting would be ignored (a misspelt name must not mean \
             no cap); the shim reads {}",
            SHIM_VARIABLES.join(", ")
        );
        return Err(invalid(name, value, expected));
    }
    Ok(())
}

/// Parses the environment. `cgroup` is the text of `/proc/self/cgroup`,
/// read only when `GPUSLICE_TENANT` is unset.
pub fn parse(vars: &Vars, cgroup: impl FnOnce() -> Option<String>) -> Result<Config, ConfigError> {
    check_names(vars)?;
    let log_level = match get(vars, "GPUSLICE_LOG")? {
        None => LogLevel::Warn,
        Some(value) => match value.trim_ascii().to_ascii_lowercase().as_str() {
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            _ => return Err(invalid("GPUSLICE_LOG", value, LOG_FORMAT)),
        },
    };
    let memory = parse_caps(vars)?;
    let compute = parse_limits(vars)?;
    let share = parse_shares(vars)?;
    let priority = parse_priorities(vars)?;
    // The driver shows at most one device per CUDA_VISIBLE_DEVICES entry,
    // and reads the first copy of the variable, as getenv does.
    if let Some(visible) = vars.iter().find(|(k, _)| k == VISIBLE).map(|(_, v)| v) {
        let bound = units::visible_devices_at_most(visible);
        let seen = format!("{VISIBLE}={visible:?} shows it at most {bound}");
        memory.check_below(bound, &seen)?;
        compute.check_below(bound, &seen)?;
        share.check_below(bound, &seen)?;
    }
    let tenant = match get(vars, "GPUSLICE_TENANT")? {
        Some(value) => {
            units::validate_tenant_name(value).map_err(|e| invalid("GPUSLICE_TENANT", value, e))?;
            value.to_string()
        }
        None => match cgroup().as_deref().and_then(tenant_from_cgroup) {
            Some(name) => name,
            None if memory.any() || compute.any() || share.any() || priority.any() => {
                let (source, what) = if memory.any() {
                    (memory.source, "cap")
                } else if compute.any() {
                    (compute.source, "limit")
                } else if share.any() {
                    (share.source, "share")
                } else {
                    (priority.source, "priority")
                };
                return Err(ConfigError {
                    variable: "GPUSLICE_TENANT".into(),
                    value: None,
                    expected: format!(
                        "{source} sets a {what}, and /proc/self/cgroup does not tell this container apart from others \
                         (every path is /), so the {what} would be shared with every such container as tenant \
                         \"default\"; set GPUSLICE_TENANT to name the tenant ({TENANT_FORMAT})",
                    ),
                });
            }
            None => "default".to_string(),
        },
    };
    let dir = parse_dir(vars)?;
    let dir_given = vars.iter().any(|(k, _)| k == "GPUSLICE_DIR");
    Ok(Config { memory, compute, share, priority, tenant, dir, dir_given, log_level })
}

/// Whether this module reads the variable `name`.
fn is_read(name: &[u8]) -> bool {
    name.starts_with(b"GPUSLICE_")
        || name.starts_with(HAMI.as_bytes())
        || name.starts_with(HAMI_COMPUTE.as_bytes())
        || name == HAMI_PRIORITY.as_bytes()
        || name == VISIBLE.as_bytes()
}

/// The variable in one `NAME=value` entry of the environment, if `keep`
/// takes its name. The name ends at the first `=` after its first byte,
/// as std's `vars_os` splits; an entry without one is no variable.
fn read_entry(entry: &[u8], keep: impl Fn(&[u8]) -> bool) -> Option<(String, String)> {
    let split = entry.iter().skip(1).position(|&b| b == b'=')? + 1;
    let (name, value) = (entry.get(..split)?, entry.get(split + 1..)?);
    keep(name).then(|| (String::from_utf8_lossy(name).into_owned(), String::from_utf8_lossy(value).into_owned()))
}

extern "C" {
    /// The process's environment: a null-terminated array of `NAME=value`
    /// strings (`environ(7)`). Mutable: `setenv` and `putenv` may move it.
    static mut environ: *const *const core::ffi::c_char;
}

/// The variables this module reads, copied out of the environment in
/// order. The environment is walked in place: `std::env::vars_os` would
/// copy every variable first, tens of allocations in every process that
/// starts under the shim for the few it reads.
fn environment() -> Vars {
    environment_where(is_read)
}

/// The variables whose names `keep` takes, in order (see [`environment`]).
fn environment_where(keep: impl Fn(&[u8]) -> bool) -> Vars {
    // SAFETY: a read of libc's pointer, by value and without a reference
    // to the static.
    let entries = unsafe { core::ptr::addr_of!(environ).read() };
    // SAFETY: `environ` is null or a null-terminated array of
    // NUL-terminated strings. No thread changes the environment during the
    // walk: the assumption std's `vars_os` makes of C code too (its lock
    // covers only std's own `set_var`, and the shim sets no variable).
    unsafe { walk(entries, keep) }
}

/// The entries of `entries` whose names `keep` takes, in order.
///
/// # Safety
/// `entries` is null, or points to an array of pointers ending with a null
/// one, each before it a NUL-terminated string; none of them changes or is
/// freed during the call.
unsafe fn walk(entries: *const *const core::ffi::c_char, keep: impl Fn(&[u8]) -> bool) -> Vars {
    let mut vars = Vars::new();
    let mut entry = entries;
    while !entry.is_null() {
        // SAFETY: `entry` points into the array, at or before its null.
        let text = unsafe { *entry };
        if text.is_null() {
            break;
        }
        // SAFETY: an element before the null is a NUL-terminated string
        // (the caller's promise), copied before the next one is read.
        let bytes = unsafe { core::ffi::CStr::from_ptr(text) }.to_bytes();
        vars.extend(read_entry(bytes, &keep));
        // SAFETY: the null was not reached, so the next element is still
        // within the array.
        entry = unsafe { entry.add(1) };
    }
    vars
}

static CONFIG: OnceLock<Result<Config, ConfigError>> = OnceLock::new();

/// The configuration, parsed on first use.
pub fn get_config() -> &'static Result<Config, ConfigError> {
    CONFIG.get_or_init(|| parse(&environment(), || std::fs::read_to_string("/proc/self/cgroup").ok()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The cgroup of a process in a container of its own.
    const CONTAINER: &str = "0::/system.slice/docker-0123abcd.scope\n";

    fn parse_vars(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        parse(&vars(pairs), || Some(CONTAINER.to_string()))
    }

    fn refused(pairs: &[(&str, &str)]) -> ConfigError {
        parse_vars(pairs).expect_err("must be refused")
    }

    #[test]
    fn one_size_caps_every_device() {
        let c = parse_vars(&[("GPUSLICE_MEMORY_LIMIT", "1.5GiB"), ("GPUSLICE_TENANT", "a")]).unwrap();
        assert_eq!(c.memory.for_device(0), Some(3 << 29));
        assert_eq!(c.memory.for_device(7), Some(3 << 29));
        assert_eq!(c.tenant, "a");
    }

    #[test]
    fn per_device_list_caps_only_listed_devices() {
        let c = parse_vars(&[("GPUSLICE_MEMORY_LIMIT", "0=8GiB,1=4G")]).unwrap();
        assert_eq!(c.memory.for_device(0), Some(8 << 30));
        assert_eq!(c.memory.for_device(1), Some(4 << 30));
        assert_eq!(c.memory.for_device(2), None);
    }

    #[test]
    fn hami_variables_are_read_and_ours_win() {
        let c = parse_vars(&[("CUDA_DEVICE_MEMORY_LIMIT", "3000m"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "1g")]).unwrap();
        assert_eq!(c.memory.for_device(0), Some(3000 << 20));
        assert_eq!(c.memory.for_device(1), Some(1 << 30));
        assert_eq!(c.memory.source, "CUDA_DEVICE_MEMORY_LIMIT");
        let c = parse_vars(&[("CUDA_DEVICE_MEMORY_LIMIT", "3000m"), ("GPUSLICE_MEMORY_LIMIT", "1GiB")]).unwrap();
        assert_eq!(c.memory.for_device(0), Some(1 << 30));
        let c = parse_vars(&[("CUDA_DEVICE_MEMORY_LIMIT_0", "100m")]).unwrap();
        assert_eq!(c.memory.for_device(0), Some(100 << 20));
        assert_eq!(c.memory.for_device(1), None);
    }

    #[test]
    fn no_variables_means_no_cap() {
        let c = parse(&vars(&[]), || None).unwrap();
        assert!(!c.memory.any());
        assert_eq!(c.tenant, "default");
        assert_eq!(c.log_level, LogLevel::Warn);
    }

    #[test]
    fn typos_are_errors_naming_variable_value_and_format() {
        for (name, value) in [
            ("GPUSLICE_MEMORY_LIMIT", "4GG"),
            ("GPUSLICE_MEMORY_LIMIT", ""),
            ("GPUSLICE_MEMORY_LIMIT", "0"),
            ("GPUSLICE_MEMORY_LIMIT", "0=1GiB,x=2GiB"),
            ("GPUSLICE_MEMORY_LIMIT", "010G"),
            ("GPUSLICE_MEMORY_LIMIT", "1GB"),
            ("GPUSLICE_MEMORY_LIMIT", "1GiB\u{a0}"),
            ("GPUSLICE_MEMORY_LIMIT", "99=1GiB"),
            ("GPUSLICE_MEMORY_LIMIT", "0=1GiB,00=2GiB"),
            ("CUDA_DEVICE_MEMORY_LIMIT", "lots"),
            ("CUDA_DEVICE_MEMORY_LIMIT", "010g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_a", "1g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_00", "1g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_99", "1g"),
            ("CUDA_DEVICE_MEMORY_LIMIT_", "1g"),
            ("GPUSLICE_TENANT", "bad/name"),
            ("GPUSLICE_TENANT", ".hidden"),
            ("GPUSLICE_TENANT", ""),
            ("GPUSLICE_LOG", "loud"),
            ("GPUSLICE_LOG", "warn\u{a0}"),
            ("GPUSLICE_DIR", ""),
            ("GPUSLICE_DIR", "ledgers"),
            ("GPUSLICE_DIR", "./ledgers"),
            ("GPUSLICE_DIR", "/run/\u{fffd}"),
        ] {
            let e = refused(&[(name, value)]);
            assert_eq!(e.variable, name);
            let text = e.to_string();
            assert!(text.contains(name) && text.contains(&format!("{value:?}")), "{text}");
        }
        let e = refused(&[("GPUSLICE_MEMORY_LIMIT", "4GG")]);
        assert!(e.to_string().contains("0=8GiB,1=4GiB"), "{e}");
        let e = refused(&[("GPUSLICE_MEMORY_LIMIT", "1GB")]);
        assert!(e.to_string().contains("ambiguous") && e.to_string().contains("1GiB"), "{e}");
        let e = refused(&[("GPUSLICE_TENANT", ".hidden")]);
        assert!(e.to_string().contains(TENANT_FORMAT), "{e}");
        let e = refused(&[("GPUSLICE_DIR", "ledgers")]);
        assert!(e.to_string().contains("absolute"), "{e}");
    }

    #[test]
    fn a_misspelt_gpuslice_variable_or_a_bad_share_or_priority_is_refused() {
        for (name, says) in [
            ("GPUSLICE_MEMORY_LIMT", "not a gpuslice variable"),
            ("GPUSLICE_TENNANT", "not a gpuslice variable"),
            ("GPUSLICE_COMPUTE_SHARE", SHARE_FORMAT),
            ("GPUSLICE_PRIORITY", PRIORITY_FORMAT),
            ("CUDA_TASK_PRIORITY", HAMI_PRIORITY_FORMAT),
        ] {
            let e = refused(&[(name, "1GiB")]);
            assert_eq!(e.variable, name);
            assert!(e.to_string().contains(says), "{e}");
        }
        for name in ["GPUSLICE_SHIM_LIB", "GPUSLICE_QUEUE_OVERCOMMIT", "GPUSLICE_CUDA_LIB", "GPUSLICE_NVML_LIB"] {
            assert!(parse_vars(&[(name, "x")]).is_ok(), "{name}");
        }
        // The test harness's settings are not the product's.
        for name in ["GPUSLICE_TEST_WAIT_S", "GPUSLICE_TARGET_DIR", "GPUSLICE_BLESS", "GPUSLICE_LEDGER_TEST_CHILD_DIR"] {
            let e = refused(&[(name, "1")]);
            assert!(e.variable == name && e.to_string().contains("not a gpuslice variable"), "{e}");
        }
        assert!(parse_vars(&[("GPUSLICE_COMPUTE_LIMIT", "30")]).is_ok());
    }

    #[test]
    fn shares_and_priorities_for_every_device_or_per_device() {
        let c = parse_vars(&[("GPUSLICE_COMPUTE_SHARE", "0=60,1=25"), ("GPUSLICE_PRIORITY", "-3")]).unwrap();
        assert_eq!((c.share.for_device(0), c.share.for_device(1), c.share.for_device(2)), (Some(60), Some(25), None));
        assert_eq!((c.priority.for_device(0), c.priority.for_device(7)), (Some(-3), Some(-3)));
        let c = parse_vars(&[("GPUSLICE_PRIORITY", "0=1,1=0")]).unwrap();
        assert_eq!((c.priority.for_device(0), c.priority.for_device(1), c.priority.for_device(2)), (Some(1), Some(0), None));
        // HAMi's two tiers: 0 is high.
        assert_eq!(parse_vars(&[("CUDA_TASK_PRIORITY", "0")]).unwrap().priority.for_device(0), Some(1));
        assert_eq!(parse_vars(&[("CUDA_TASK_PRIORITY", "1")]).unwrap().priority.for_device(0), Some(0));
        // Ours wins over HAMi's.
        assert_eq!(parse_vars(&[("CUDA_TASK_PRIORITY", "0"), ("GPUSLICE_PRIORITY", "5")]).unwrap().priority.for_device(0), Some(5));
        for (name, value) in [
            ("GPUSLICE_COMPUTE_SHARE", "0"),
            ("GPUSLICE_COMPUTE_SHARE", "101"),
            ("GPUSLICE_COMPUTE_SHARE", "30%"),
            ("GPUSLICE_PRIORITY", "1001"),
            ("GPUSLICE_PRIORITY", "01"),
            ("GPUSLICE_PRIORITY", "+1"),
            ("GPUSLICE_PRIORITY", "0=1,0=2"),
            ("GPUSLICE_PRIORITY", "high"),
            ("CUDA_TASK_PRIORITY", "2"),
        ] {
            assert_eq!(refused(&[(name, value)]).variable, name, "{name}={value}");
        }
    }

    #[test]
    fn compute_limits_for_every_device_or_per_device() {
        let c = parse_vars(&[("GPUSLICE_COMPUTE_LIMIT", "30")]).unwrap();
        assert_eq!((c.compute.for_device(0), c.compute.for_device(15)), (Some(30), Some(30)));
        assert_eq!(c.compute.source, "GPUSLICE_COMPUTE_LIMIT");
        assert!(!c.memory.any(), "a compute limit alone caps no memory");
        let c = parse_vars(&[("GPUSLICE_COMPUTE_LIMIT", "0=30,1=100")]).unwrap();
        assert_eq!((c.compute.for_device(0), c.compute.for_device(1), c.compute.for_device(2)), (Some(30), Some(100), None));
        let c = parse_vars(&[]).unwrap();
        assert!(!c.compute.any());
    }

    #[test]
    fn hami_sm_limits_keep_their_meaning_and_ours_win() {
        let c = parse_vars(&[("CUDA_DEVICE_SM_LIMIT", "50")]).unwrap();
        assert_eq!((c.compute.for_device(0), c.compute.source), (Some(50), "CUDA_DEVICE_SM_LIMIT"));
        // 0 is no limit, for every device; a per-device 0 leaves the one for every device.
        let c = parse_vars(&[("CUDA_DEVICE_SM_LIMIT", "0")]).unwrap();
        assert!(!c.compute.any());
        let c = parse_vars(&[("CUDA_DEVICE_SM_LIMIT", "40"), ("CUDA_DEVICE_SM_LIMIT_1", "0"), ("CUDA_DEVICE_SM_LIMIT_2", "20")]).unwrap();
        assert_eq!((c.compute.for_device(0), c.compute.for_device(1), c.compute.for_device(2)), (Some(40), Some(40), Some(20)));
        let c = parse_vars(&[("CUDA_DEVICE_SM_LIMIT_0", "25")]).unwrap();
        assert_eq!((c.compute.for_device(0), c.compute.for_device(1)), (Some(25), None));
        let c = parse_vars(&[("CUDA_DEVICE_SM_LIMIT", "100")]).unwrap();
        assert_eq!(c.compute.for_device(0), Some(100));
        let c =
            parse_vars(&[("CUDA_DEVICE_SM_LIMIT", "50"), ("CUDA_DEVICE_SM_LIMIT_0", "60"), ("GPUSLICE_COMPUTE_LIMIT", "1=30")]).unwrap();
        assert_eq!((c.compute.for_device(0), c.compute.for_device(1)), (None, Some(30)));
        assert_eq!(c.compute.source, "GPUSLICE_COMPUTE_LIMIT");
    }

    #[test]
    fn bad_compute_limits_are_refused_naming_variable_value_and_format() {
        for (name, value, says) in [
            ("GPUSLICE_COMPUTE_LIMIT", "", "0=30,1=60"),
            ("GPUSLICE_COMPUTE_LIMIT", "0", "from 1 to 100"),
            ("GPUSLICE_COMPUTE_LIMIT", "101", "from 1 to 100"),
            ("GPUSLICE_COMPUTE_LIMIT", "30%", "not a whole number"),
            ("GPUSLICE_COMPUTE_LIMIT", "030", "leading zero"),
            ("GPUSLICE_COMPUTE_LIMIT", "0=30,0=40", "given twice"),
            ("GPUSLICE_COMPUTE_LIMIT", "16=30", "0 to 15"),
            ("GPUSLICE_COMPUTE_LIMIT", "0=30,00=40", "leading zeros"),
            ("GPUSLICE_COMPUTE_LIMIT", "3\u{a0}", "not ASCII"),
            ("CUDA_DEVICE_SM_LIMIT", "150", "from 0 (no limit) to 100"),
            ("CUDA_DEVICE_SM_LIMIT", "0x1e", "not a whole number"),
            ("CUDA_DEVICE_SM_LIMIT", "050", "octal"),
            ("CUDA_DEVICE_SM_LIMIT", "", "not a whole number"),
            ("CUDA_DEVICE_SM_LIMIT_1", "lots", "not a whole number"),
            ("CUDA_DEVICE_SM_LIMIT_01", "30", "device index"),
            ("CUDA_DEVICE_SM_LIMIT_", "30", "device index"),
        ] {
            let e = refused(&[(name, value)]);
            assert_eq!(e.variable, name);
            let text = e.to_string();
            assert!(text.contains(name) && text.contains(&format!("{value:?}")) && text.contains(says), "{text}");
        }
        for name in ["GPUSLICE_COMPUTE_LIMIT", "CUDA_DEVICE_SM_LIMIT", "CUDA_DEVICE_SM_LIMIT_0"] {
            let e = refused(&[(name, "30"), (name, "30")]);
            assert!(e.to_string().contains("set twice"), "{e}");
        }
    }

    #[test]
    fn a_compute_limit_for_a_device_the_process_cannot_see_is_refused() {
        for (name, value) in [("GPUSLICE_COMPUTE_LIMIT", "1=30"), ("CUDA_DEVICE_SM_LIMIT_1", "30")] {
            let e = refused(&[(name, value), ("CUDA_VISIBLE_DEVICES", "1")]);
            assert_eq!((e.variable.as_str(), e.value.as_deref()), (name, Some(value)));
            assert!(e.to_string().contains("device 0 would have no compute limit"), "{e}");
        }
        let c = parse_vars(&[("GPUSLICE_COMPUTE_LIMIT", "0=30,3=60")]).unwrap();
        assert_eq!(c.compute.check_ordinals(4), Ok(()));
        assert_eq!(c.compute.check_ordinals(1), Ok(()));
        let e = c.compute.check_ordinals(2).unwrap_err();
        assert!(e.to_string().contains("device 3") && e.to_string().contains("device 1 would have no compute limit"), "{e}");
    }

    #[test]
    fn a_compute_limit_without_a_tenant_the_cgroup_can_name_is_refused() {
        let all_root = "0::/\n";
        let e = parse(&vars(&[("GPUSLICE_COMPUTE_LIMIT", "30")]), || Some(all_root.into())).unwrap_err();
        assert_eq!(e.variable, "GPUSLICE_TENANT");
        assert!(e.to_string().contains("GPUSLICE_COMPUTE_LIMIT sets a limit"), "{e}");
        assert!(parse(&vars(&[("GPUSLICE_COMPUTE_LIMIT", "30"), ("GPUSLICE_TENANT", "a")]), || Some(all_root.into())).is_ok());
    }

    #[test]
    fn a_variable_set_twice_is_refused() {
        for name in [
            "GPUSLICE_MEMORY_LIMIT",
            "CUDA_DEVICE_MEMORY_LIMIT",
            "CUDA_DEVICE_MEMORY_LIMIT_0",
            "GPUSLICE_TENANT",
            "GPUSLICE_DIR",
            "GPUSLICE_LOG",
        ] {
            let value = match name {
                "GPUSLICE_TENANT" => "a",
                "GPUSLICE_DIR" => "/tmp",
                "GPUSLICE_LOG" => "warn",
                _ => "1g",
            };
            let e = refused(&[(name, value), (name, value)]);
            assert_eq!(e.variable, name);
            assert!(e.to_string().contains("set twice"), "{e}");
        }
    }

    #[test]
    fn a_cap_for_a_device_the_process_cannot_see_is_refused() {
        // CUDA_VISIBLE_DEVICES=1 shows one device, ordinal 0.
        for (name, value) in
            [("GPUSLICE_MEMORY_LIMIT", "1=1GiB"), ("GPUSLICE_MEMORY_LIMIT", "1=1GiB,2=1GiB"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "1g")]
        {
            let e = refused(&[(name, value), ("CUDA_VISIBLE_DEVICES", "1")]);
            assert_eq!((e.variable.as_str(), e.value.as_deref()), (name, Some(value)));
            let text = e.to_string();
            assert!(text.contains("device 1 is not a device this process sees") && text.contains("CUDA_VISIBLE_DEVICES=\"1\""), "{text}");
            assert!(text.contains("device 0 would have no cap"), "{text}");
        }
        let c = parse_vars(&[("GPUSLICE_MEMORY_LIMIT", "0=1GiB"), ("CUDA_VISIBLE_DEVICES", "1")]).unwrap();
        assert_eq!(c.memory.for_device(0), Some(1 << 30));
        let c = parse_vars(&[("GPUSLICE_MEMORY_LIMIT", "1GiB"), ("CUDA_VISIBLE_DEVICES", "")]).unwrap();
        assert_eq!(c.memory.check_ordinals(0), Ok(()), "a cap for every device names none in particular");
        // One list for processes that each see part of the devices: every
        // device this one sees has its cap.
        for vars in [
            vec![("GPUSLICE_MEMORY_LIMIT", "0=1GiB,1=2GiB"), ("CUDA_VISIBLE_DEVICES", "1")],
            vec![("CUDA_DEVICE_MEMORY_LIMIT_0", "1g"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "1g"), ("CUDA_VISIBLE_DEVICES", "1")],
            vec![("CUDA_DEVICE_MEMORY_LIMIT", "1g"), ("CUDA_DEVICE_MEMORY_LIMIT_1", "2g"), ("CUDA_VISIBLE_DEVICES", "1")],
        ] {
            let c = parse_vars(&vars).unwrap();
            assert_eq!(c.memory.for_device(0), Some(1 << 30), "{vars:?}");
            assert_eq!(c.memory.check_ordinals(1), Ok(()), "{vars:?}");
        }

        // Once the driver has counted the devices.
        let c = parse_vars(&[("GPUSLICE_MEMORY_LIMIT", "0=1GiB,3=2GiB")]).unwrap();
        assert_eq!(c.memory.check_ordinals(4), Ok(()));
        assert_eq!(c.memory.check_ordinals(1), Ok(()));
        let e = c.memory.check_ordinals(2).unwrap_err();
        assert_eq!(e.variable, "GPUSLICE_MEMORY_LIMIT");
        assert!(
            e.to_string().contains("device 3") && e.to_string().contains("indices 0 to 1") && e.to_string().contains("device 1 would"),
            "{e}"
        );
        let c = parse_vars(&[("CUDA_DEVICE_MEMORY_LIMIT_2", "1g")]).unwrap();
        let e = c.memory.check_ordinals(1).unwrap_err();
        assert_eq!((e.variable.as_str(), e.value.as_deref()), ("CUDA_DEVICE_MEMORY_LIMIT_2", Some("1g")));
        assert!(e.to_string().contains("it sees 1 device, index 0"), "{e}");
        assert_eq!(c.memory.check_ordinals(0), Ok(()), "no device to leave uncapped");
    }

    #[test]
    fn an_absolute_dir_is_taken_as_written() {
        let c = parse_vars(&[("GPUSLICE_DIR", "/run/team-a")]).unwrap();
        assert_eq!(c.dir, PathBuf::from("/run/team-a"));
    }

    #[test]
    fn tenant_comes_from_the_cgroup_when_unset() {
        assert_eq!(tenant_from_cgroup(CONTAINER).as_deref(), Some("docker-0123abcd.scope"));
        let long = format!("0::/kubepods/cri-containerd-{}.scope", "a".repeat(64));
        let name = tenant_from_cgroup(&long).unwrap();
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("a.scope"));
        let v1 = "12:cpu,cpuacct:/x\n4:memory:/docker/abc\n";
        assert_eq!(tenant_from_cgroup(v1).as_deref(), Some("abc"));
        let c = parse(&vars(&[]), || Some(CONTAINER.to_string())).unwrap();
        assert_eq!(c.tenant, "docker-0123abcd.scope");
    }

    #[test]
    fn the_most_specific_cgroup_path_names_the_tenant() {
        // A hybrid host: v2's path is the root, the memory controller names
        // the container.
        let hybrid = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/63aff46715a06a1a0e46b7b7b7c2806d\n1:cpu:/\n0::/\n";
        assert_eq!(tenant_from_cgroup(hybrid).as_deref(), Some("63aff46715a06a1a0e46b7b7b7c2806d"));
        // v2 wins when it names something.
        let both = "4:memory:/docker/abc\n0::/system.slice/docker-def.scope\n";
        assert_eq!(tenant_from_cgroup(both).as_deref(), Some("docker-def.scope"));
        // A memory controller shared with others (cpu,memory) still counts as memory.
        let joint = "3:cpu:/\n2:cpuacct,memory:/kubepods/besteffort/pod1234/cafe\n0::/\n";
        assert_eq!(tenant_from_cgroup(joint).as_deref(), Some("cafe"));
        // Any other controller, when neither v2 nor memory names one.
        let pids_only = "5:pids:/docker/feed\n4:memory:/\n0::/\n";
        assert_eq!(tenant_from_cgroup(pids_only).as_deref(), Some("feed"));
        // A trailing slash does not hide the last component.
        assert_eq!(tenant_from_cgroup("0::/lxc/box/\n").as_deref(), Some("box"));
    }

    #[test]
    fn a_cgroup_that_tells_nothing_apart_names_no_tenant() {
        for text in [
            "0::/\n",
            "9:name=systemd:/\n4:memory:/\n0::/\n",
            // Outside a cgroup namespace's root.
            "0::/..\n",
            "0::/../..\n",
            "",
            "garbage\n",
            "0:/\n",
        ] {
            assert_eq!(tenant_from_cgroup(text), None, "{text:?}");
        }
        // Seen from inside a cgroup namespace, a sibling's path still names it.
        assert_eq!(tenant_from_cgroup("0::/../sibling\n").as_deref(), Some("sibling"));
    }

    #[test]
    fn cgroup_names_are_cleaned_into_tenant_names() {
        assert_eq!(tenant_from_cgroup("0::/a/.hidden\n").as_deref(), Some("_hidden"));
        assert_eq!(tenant_from_cgroup("0::/a/we ird:ü\n").as_deref(), Some("we_ird__"));
        // Cut to the last 63 characters, the name would start with the dot.
        let long = format!("0::/x/{}.{}", "b".repeat(5), "c".repeat(62));
        assert_eq!(tenant_from_cgroup(&long), Some(format!("_{}", "c".repeat(62))));
    }

    #[test]
    fn a_cap_without_a_tenant_that_the_cgroup_can_name_is_refused() {
        let all_root = "9:name=systemd:/\n4:memory:/\n0::/\n";
        for cap in [("GPUSLICE_MEMORY_LIMIT", "1GiB"), ("CUDA_DEVICE_MEMORY_LIMIT", "1g"), ("CUDA_DEVICE_MEMORY_LIMIT_0", "1g")] {
            for cgroup in [Some(all_root.to_string()), None] {
                let e = parse(&vars(&[cap]), || cgroup.clone()).unwrap_err();
                assert_eq!((e.variable.as_str(), e.value.as_deref()), ("GPUSLICE_TENANT", None));
                let text = e.to_string();
                assert!(
                    text.contains("GPUSLICE_TENANT is unset") && text.contains("/proc/self/cgroup") && text.contains(TENANT_FORMAT),
                    "{text}"
                );
            }
        }
        // Naming the tenant is enough; no cap, no sharing to fear.
        let c = parse(&vars(&[("GPUSLICE_MEMORY_LIMIT", "1GiB"), ("GPUSLICE_TENANT", "a")]), || Some(all_root.into())).unwrap();
        assert_eq!(c.tenant, "a");
        let c = parse(&vars(&[]), || Some(all_root.into())).unwrap();
        assert_eq!(c.tenant, "default");
    }

    #[test]
    fn an_environment_entry_is_split_at_its_first_equals_sign_and_kept_only_if_read() {
        let pair = |n: &str, v: &str| Some((n.to_string(), v.to_string()));
        let read_entry = |entry: &[u8]| read_entry(entry, is_read);
        assert_eq!(read_entry(b"GPUSLICE_TENANT=team-a"), pair("GPUSLICE_TENANT", "team-a"));
        assert_eq!(read_entry(b"GPUSLICE_DIR=/a=b"), pair("GPUSLICE_DIR", "/a=b"));
        assert_eq!(read_entry(b"GPUSLICE_MEMORY_LIMIT="), pair("GPUSLICE_MEMORY_LIMIT", ""));
        assert_eq!(read_entry(b"CUDA_DEVICE_MEMORY_LIMIT_0=1g"), pair("CUDA_DEVICE_MEMORY_LIMIT_0", "1g"));
        assert_eq!(read_entry(b"CUDA_DEVICE_SM_LIMIT=30"), pair("CUDA_DEVICE_SM_LIMIT", "30"));
        assert_eq!(read_entry(b"CUDA_VISIBLE_DEVICES=1,0"), pair("CUDA_VISIBLE_DEVICES", "1,0"));
        assert_eq!(read_entry(b"CUDA_TASK_PRIORITY=1"), pair("CUDA_TASK_PRIORITY", "1"));
        // Not read: other names, a longer name where the name must match
        // whole, an entry with no `=`, an empty entry.
        assert_eq!(read_entry(b"PATH=/usr/bin"), None);
        assert_eq!(read_entry(b"CUDA_VISIBLE_DEVICES_X=1"), None);
        assert_eq!(read_entry(b"GPUSLICE_TENANT"), None);
        assert_eq!(read_entry(b""), None);
        // A leading `=` belongs to the name (as std splits), which is then
        // `=GPUSLICE_TENANT`, not a variable the shim reads.
        assert_eq!(read_entry(b"=GPUSLICE_TENANT=a"), None);
        assert_eq!(super::read_entry(b"=X=1", |_| true), pair("=X", "1"));
        // A value that is not UTF-8 is kept, lossily, to be refused by name.
        assert_eq!(read_entry(b"GPUSLICE_TENANT=a\xffb"), pair("GPUSLICE_TENANT", "a\u{FFFD}b"));
    }

    #[test]
    fn every_variable_the_configuration_knows_is_copied_out_of_the_environment() {
        let mut names: Vec<String> = SHIM_VARIABLES.iter().chain(TOOL_VARIABLES).map(|n| n.to_string()).collect();
        for hami in [HAMI, HAMI_COMPUTE] {
            names.push(hami.to_string());
            names.push(format!("{hami}_0"));
        }
        names.extend([HAMI_PRIORITY.to_string(), VISIBLE.to_string()]);
        for name in &names {
            assert!(is_read(name.as_bytes()), "{name} is known to the configuration but not copied out of the environment");
        }
    }

    /// A null-terminated array of C strings, as `environ` is.
    struct Environ {
        _strings: Vec<std::ffi::CString>,
        pointers: Vec<*const core::ffi::c_char>,
    }

    fn environ_of(entries: &[&[u8]]) -> Environ {
        let strings: Vec<std::ffi::CString> = entries.iter().map(|e| std::ffi::CString::new(*e).unwrap()).collect();
        let mut pointers: Vec<*const core::ffi::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        pointers.push(core::ptr::null());
        Environ { _strings: strings, pointers }
    }

    #[test]
    fn the_walk_keeps_order_and_duplicates_and_stops_at_the_null() {
        // SAFETY: a null array is allowed.
        assert_eq!(unsafe { walk(core::ptr::null(), is_read) }, Vars::new());
        let empty = environ_of(&[]);
        // SAFETY: a live array holding only its null.
        assert_eq!(unsafe { walk(empty.pointers.as_ptr(), is_read) }, Vars::new());
        let env = environ_of(&[b"GPUSLICE_TENANT=a", b"NOEQ", b"PATH=/bin", b"=X=1", b"GPUSLICE_\xff=1", b"GPUSLICE_TENANT=b"]);
        // SAFETY: a live, null-terminated array of live C strings.
        let vars = unsafe { walk(env.pointers.as_ptr(), is_read) };
        let expected: Vars = [("GPUSLICE_TENANT", "a"), ("GPUSLICE_\u{FFFD}", "1"), ("GPUSLICE_TENANT", "b")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(vars, expected);
        // Both values reach the parser, which refuses a name set twice.
        let twice: Vars = vars.iter().filter(|(k, _)| k == "GPUSLICE_TENANT").cloned().collect();
        let refused = parse(&twice, || None).unwrap_err().to_string();
        assert!(refused.contains("set twice"), "{refused}");
    }

    #[test]
    fn the_environment_walk_finds_every_variable_std_finds() {
        let by_std: Vars = std::env::vars_os().map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned())).collect();
        assert!(!by_std.is_empty(), "the test runs with an empty environment: nothing to compare");
        assert_eq!(environment_where(|_| true), by_std);
    }
}
