//! The shim's configuration: read from the environment once, into a static.
//!
//! | variable | meaning |
//! |---|---|
//! | `GPUSLICE_MEMORY_LIMIT` | cap for every device (`8GiB`) or per device (`0=8GiB,1=4GiB`) |
//! | `CUDA_DEVICE_MEMORY_LIMIT` | HAMi-core's cap for every device (`3000m`, bytes) |
//! | `CUDA_DEVICE_MEMORY_LIMIT_<i>` | HAMi-core's cap for device `i`, overriding the one above |
//! | `GPUSLICE_TENANT` | tenant name; unset, the process's cgroup names it, else `default` |
//! | `GPUSLICE_DIR` | ledger directory (default: `ledger::default_dir()`) |
//! | `GPUSLICE_LOG` | `error`, `warn` (default), `info` or `debug`, to stderr |
//!
//! When `GPUSLICE_MEMORY_LIMIT` is set the HAMi-core variables are ignored.
//! Device indices are the ordinals the process sees, after
//! `CUDA_VISIBLE_DEVICES`. A value that does not parse (an empty one
//! included) is an error: the shim fails closed, it never reads a typo as
//! "no cap".

use ledger::units::{self, MemoryLimit, MEMORY_LIMIT_FORMAT, TENANT_FORMAT};
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
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

/// The memory caps the environment asks for, by device ordinal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryCaps {
    /// Cap of every device not listed in `per_device`.
    pub all_devices_bytes: Option<u64>,
    /// Caps of single devices.
    pub per_device: Vec<(u32, u64)>,
    /// The variable the caps came from, for messages.
    pub source: &'static str,
}

impl MemoryCaps {
    /// The cap of device `ordinal`, if the environment sets one.
    pub fn for_device(&self, ordinal: u32) -> Option<u64> {
        self.per_device
            .iter()
            .find(|(i, _)| *i == ordinal)
            .map(|(_, b)| *b)
            .or(self.all_devices_bytes)
    }

    /// Whether any device has a cap.
    pub fn any(&self) -> bool {
        self.all_devices_bytes.is_some() || !self.per_device.is_empty()
    }
}

/// Everything the shim reads from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub memory: MemoryCaps,
    pub tenant: String,
    pub dir: PathBuf,
    pub log_level: LogLevel,
}

/// A variable whose value the shim refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub variable: String,
    pub value: String,
    pub expected: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={:?} is invalid: {}", self.variable, self.value, self.expected)
    }
}

fn invalid(variable: &str, value: &str, expected: impl fmt::Display) -> ConfigError {
    ConfigError { variable: variable.to_string(), value: value.to_string(), expected: expected.to_string() }
}

/// The environment as name/value pairs; a value that is not UTF-8 is kept
/// lossily so that it is refused with a readable message.
pub type Vars = Vec<(String, String)>;

fn get<'a>(vars: &'a Vars, name: &str) -> Option<&'a str> {
    vars.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn parse_caps(vars: &Vars) -> Result<MemoryCaps, ConfigError> {
    const OURS: &str = "GPUSLICE_MEMORY_LIMIT";
    const HAMI: &str = "CUDA_DEVICE_MEMORY_LIMIT";
    if let Some(value) = get(vars, OURS) {
        let limit = units::parse_memory_limit(value).map_err(|e| match e {
            units::ParseError::NotASize => invalid(OURS, value, format!("expected {MEMORY_LIMIT_FORMAT}")),
            other => invalid(OURS, value, other),
        })?;
        return Ok(match limit {
            MemoryLimit::AllDevices(bytes) => MemoryCaps { all_devices_bytes: Some(bytes), per_device: Vec::new(), source: OURS },
            MemoryLimit::PerDevice(list) => MemoryCaps { all_devices_bytes: None, per_device: list, source: OURS },
        });
    }
    let mut caps = MemoryCaps { source: HAMI, ..MemoryCaps::default() };
    if let Some(value) = get(vars, HAMI) {
        caps.all_devices_bytes = Some(units::parse_size(value).map_err(|e| invalid(HAMI, value, e))?);
    }
    for (name, value) in vars {
        let Some(index) = name.strip_prefix(HAMI).and_then(|rest| rest.strip_prefix('_')) else { continue };
        let ordinal: u32 = index
            .parse()
            .map_err(|_| invalid(name, value, format!("the suffix of {HAMI}_<i> must be a device index")))?;
        let bytes = units::parse_size(value).map_err(|e| invalid(name, value, e))?;
        caps.per_device.retain(|(i, _)| *i != ordinal);
        caps.per_device.push((ordinal, bytes));
    }
    caps.per_device.sort_unstable();
    Ok(caps)
}

/// Derives a tenant name from `/proc/self/cgroup`: the last component of
/// the unified (v2) path, or of the memory controller's path on v1, with
/// characters outside the tenant alphabet replaced and at most the last 63
/// kept (container ids are unique at their end as well as their start).
pub fn tenant_from_cgroup(text: &str) -> Option<String> {
    let lines: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?, parts.next()?))
        })
        .collect();
    let path = lines
        .iter()
        .find(|(controllers, _)| controllers.is_empty())
        .or_else(|| lines.iter().find(|(c, _)| c.split(',').any(|c| c == "memory")))
        .or_else(|| lines.first())
        .map(|(_, path)| *path)?;
    let last = path.trim_end_matches('/').rsplit('/').next()?;
    let cleaned: String =
        last.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    let skip = cleaned.chars().count().saturating_sub(63);
    let name: String = cleaned.chars().skip(skip).collect();
    units::validate_tenant_name(&name).ok()?;
    Some(name)
}

/// Parses the environment. `cgroup` is the text of `/proc/self/cgroup`,
/// read only when `GPUSLICE_TENANT` is unset.
pub fn parse(vars: &Vars, cgroup: impl FnOnce() -> Option<String>) -> Result<Config, ConfigError> {
    let log_level = match get(vars, "GPUSLICE_LOG") {
        None => LogLevel::Warn,
        Some(value) => match value.trim().to_ascii_lowercase().as_str() {
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            _ => return Err(invalid("GPUSLICE_LOG", value, LOG_FORMAT)),
        },
    };
    let memory = parse_caps(vars)?;
    let tenant = match get(vars, "GPUSLICE_TENANT") {
        Some(value) => {
            units::validate_tenant_name(value).map_err(|_| invalid("GPUSLICE_TENANT", value, TENANT_FORMAT))?;
            value.to_string()
        }
        None => cgroup().as_deref().and_then(tenant_from_cgroup).unwrap_or_else(|| "default".to_string()),
    };
    let dir = match get(vars, "GPUSLICE_DIR") {
        Some("") => return Err(invalid("GPUSLICE_DIR", "", "a directory path; unset it for the default")),
        Some(value) => PathBuf::from(value),
        None => ledger::default_dir(),
    };
    Ok(Config { memory, tenant, dir, log_level })
}

fn environment() -> Vars {
    std::env::vars_os()
        .filter(|(k, _)| {
            let k = k.as_encoded_bytes();
            k.starts_with(b"GPUSLICE_") || k.starts_with(b"CUDA_DEVICE_MEMORY_LIMIT")
        })
        .map(|(k, v): (OsString, OsString)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
        .collect()
}

static CONFIG: OnceLock<Result<Config, ConfigError>> = OnceLock::new();

/// The configuration, parsed on first use.
pub fn get_config() -> &'static Result<Config, ConfigError> {
    CONFIG.get_or_init(|| parse(&environment(), || std::fs::read_to_string("/proc/self/cgroup").ok()))
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, the form NVML uses.
pub fn format_uuid(uuid: &[u8; 16]) -> String {
    let mut text = String::from("GPU-");
    for (i, b) in uuid.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text.push('-');
        }
        text.push_str(&format!("{b:02x}"));
    }
    text
}

/// Parses NVML's UUID text back into bytes (any prefix before the hex, such
/// as `GPU-` or `MIG-`, is skipped).
pub fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.split_once('-').map(|(_, rest)| rest).unwrap_or(text).bytes().filter(|b| *b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (slot, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *slot = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vars {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn parse_vars(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        parse(&vars(pairs), || None)
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
        let c = parse_vars(&[]).unwrap();
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
            ("CUDA_DEVICE_MEMORY_LIMIT", "lots"),
            ("CUDA_DEVICE_MEMORY_LIMIT_a", "1g"),
            ("GPUSLICE_TENANT", "bad/name"),
            ("GPUSLICE_TENANT", ""),
            ("GPUSLICE_LOG", "loud"),
            ("GPUSLICE_DIR", ""),
        ] {
            let e = parse_vars(&[(name, value)]).unwrap_err();
            assert_eq!(e.variable, name);
            let text = e.to_string();
            assert!(text.contains(name) && text.contains(&format!("{value:?}")), "{text}");
        }
        let e = parse_vars(&[("GPUSLICE_MEMORY_LIMIT", "4GG")]).unwrap_err();
        assert!(e.to_string().contains("0=8GiB,1=4GiB"), "{e}");
    }

    #[test]
    fn tenant_comes_from_the_cgroup_when_unset() {
        let v2 = "0::/system.slice/docker-0123abcd.scope\n";
        assert_eq!(tenant_from_cgroup(v2).as_deref(), Some("docker-0123abcd.scope"));
        let long = format!("0::/kubepods/cri-containerd-{}.scope", "a".repeat(64));
        let name = tenant_from_cgroup(&long).unwrap();
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("a.scope"));
        let v1 = "12:cpu,cpuacct:/x\n4:memory:/docker/abc\n";
        assert_eq!(tenant_from_cgroup(v1).as_deref(), Some("abc"));
        assert_eq!(tenant_from_cgroup("0::/\n"), None);
        let c = parse(&vars(&[]), || Some(v2.to_string())).unwrap();
        assert_eq!(c.tenant, "docker-0123abcd.scope");
    }

    #[test]
    fn uuids_round_trip_through_nvml_text() {
        let uuid: [u8; 16] = core::array::from_fn(|i| (i * 17) as u8);
        let text = format_uuid(&uuid);
        assert_eq!(text.len(), 40);
        assert_eq!(parse_uuid(&text), Some(uuid));
        assert_eq!(parse_uuid("GPU-123"), None);
    }
}
