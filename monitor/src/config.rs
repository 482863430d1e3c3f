//! The monitor's configuration file (TOML): which tenants it governs, their
//! memory caps per device, and what to do about violations.
//!
//! ```toml
//! on_violation = "report"          # or "kill"; default "report"
//! violation_grace = "5s"           # how long a finding must last before it counts
//!
//! [tenants.team-a]
//! memory = "8GiB"                  # every device
//!
//! [tenants.team-b]
//! memory = { 0 = "8GiB", "GPU-5f1c…" = "4GiB" }   # by host device index or UUID
//! ```
//!
//! The file is the authority for the tenants it names; other tenants keep
//! the caps their processes set from their environment. Every error carries
//! the line and column it was found at.

use ledger::units;
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

/// The accepted form of `violation_grace`.
pub const DURATION_FORMAT: &str = "a duration like \"5s\", \"500ms\", \"1.5s\" or \"2m\"";

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

/// Which device a cap applies to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeviceKey {
    /// Every device.
    All,
    /// The host's device index, as NVML and `nvidia-smi` number them.
    HostIndex(u32),
    /// A device UUID, `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    Uuid(String),
}

/// One tenant the file governs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TenantConfig {
    /// Memory caps; a device-specific entry wins over `All`.
    pub memory_bytes: BTreeMap<DeviceKey, u64>,
}

impl TenantConfig {
    /// The cap for a device known by UUID and (with NVML) host index.
    pub fn memory_for(&self, uuid: &str, host_index: Option<u32>) -> Option<u64> {
        if let Some(bytes) = self.memory_bytes.get(&DeviceKey::Uuid(uuid.to_ascii_lowercase())) {
            return Some(*bytes);
        }
        if let Some(bytes) = host_index.and_then(|i| self.memory_bytes.get(&DeviceKey::HostIndex(i))) {
            return Some(*bytes);
        }
        self.memory_bytes.get(&DeviceKey::All).copied()
    }

    /// Whether some cap needs NVML to know which device it means.
    pub fn uses_host_indices(&self) -> bool {
        self.memory_bytes.keys().any(|k| matches!(k, DeviceKey::HostIndex(_)))
    }
}

/// A whole, validated configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// What to do about violations.
    pub on_violation: OnViolation,
    /// How long a violation must last before it counts.
    pub violation_grace: Duration,
    /// Tenants by name.
    pub tenants: BTreeMap<String, TenantConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config { on_violation: OnViolation::default(), violation_grace: DEFAULT_VIOLATION_GRACE, tenants: BTreeMap::new() }
    }
}

impl Config {
    /// The cap the file sets for `tenant` on a device, if it names one.
    pub fn memory_for(&self, tenant: &str, uuid: &str, host_index: Option<u32>) -> Option<u64> {
        self.tenants.get(tenant)?.memory_for(uuid, host_index)
    }
}

/// Parses a duration: a non-negative number and a unit (`ms`, `s`, `m`).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        _ => return None,
    };
    (seconds.is_finite() && seconds <= 86_400.0).then(|| Duration::from_secs_f64(seconds))
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
    violation_grace: Option<toml::Spanned<String>>,
    #[serde(default)]
    tenants: BTreeMap<String, toml::Spanned<RawTenant>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTenant {
    #[serde(default)]
    memory: Option<toml::Spanned<toml::Value>>,
}

/// 1-based line and column of a byte offset in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rfind('\n').map_or(before.chars().count(), |nl| before[nl + 1..].chars().count()) + 1;
    (line, column)
}

/// Parses a configuration from text.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    let at = |span: std::ops::Range<usize>, message: String| ConfigError {
        path: None,
        position: Some(line_column(text, span.start)),
        message,
    };
    let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError {
        path: None,
        position: e.span().map(|span| line_column(text, span.start)),
        message: e.message().trim().to_string(),
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
        Some(value) => parse_duration(value.get_ref())
            .ok_or_else(|| at(value.span(), format!("violation_grace = {:?}: expected {DURATION_FORMAT}", value.get_ref())))?,
    };
    let mut tenants = BTreeMap::new();
    for (name, tenant) in raw.tenants {
        if units::validate_tenant_name(&name).is_err() {
            return Err(at(tenant.span(), format!("tenant name {name:?} is invalid: expected {}", units::TENANT_FORMAT)));
        }
        let mut config = TenantConfig::default();
        if let Some(memory) = tenant.get_ref().memory.as_ref() {
            let expected = format!(
                "tenant {name}: memory must be a size like \"8GiB\" or a table like {{ 0 = \"8GiB\", \"GPU-…\" = \"4GiB\" }}"
            );
            match memory.get_ref() {
                toml::Value::String(size) => {
                    let bytes = units::parse_size(size)
                        .map_err(|e| at(memory.span(), format!("tenant {name}: memory = {size:?}: {e}")))?;
                    config.memory_bytes.insert(DeviceKey::All, bytes);
                }
                toml::Value::Table(map) => {
                    for (key, size) in map {
                        let device = parse_device_key(key).ok_or_else(|| {
                            at(
                                memory.span(),
                                format!(
                                    "tenant {name}: device {key:?} is not a device index (0, 1, …), a UUID (GPU-…) or \"all\""
                                ),
                            )
                        })?;
                        let size = size.as_str().ok_or_else(|| at(memory.span(), expected.clone()))?;
                        let bytes = units::parse_size(size)
                            .map_err(|e| at(memory.span(), format!("tenant {name}: memory for device {key}: {size:?}: {e}")))?;
                        if config.memory_bytes.insert(device, bytes).is_some() {
                            return Err(at(memory.span(), format!("tenant {name}: device {key} is given twice")));
                        }
                    }
                }
                _ => return Err(at(memory.span(), expected)),
            }
        }
        tenants.insert(name, config);
    }
    Ok(Config { on_violation, violation_grace, tenants })
}

fn parse_device_key(key: &str) -> Option<DeviceKey> {
    let key = key.trim();
    if key.eq_ignore_ascii_case("all") || key == "*" {
        return Some(DeviceKey::All);
    }
    if let Ok(index) = key.parse::<u32>() {
        return Some(DeviceKey::HostIndex(index));
    }
    let lower = key.to_ascii_lowercase();
    let hex: String = lower.strip_prefix("gpu-")?.chars().filter(|c| *c != '-').collect();
    (hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit())).then_some(DeviceKey::Uuid(lower))
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
        for bad in ["", "5", "s", "-1s", "5h", "1e3s", "5 s s", "99999999m"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert_eq!(parse("violation_grace = \"250ms\"\n").unwrap().violation_grace, Duration::from_millis(250));
        let e = error("\nviolation_grace = \"soon\"\n");
        assert_eq!(e.position, Some((2, 19)), "{e}");
        assert!(e.message.contains("\"5s\""), "{e}");
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

        let e = error("\n\n[tenants.a]\nmemory = { gpu7 = \"1G\" }\n");
        assert_eq!(e.position.map(|p| p.0), Some(4), "{e}");

        let e = error("[tenants.\"a/b\"]\nmemory = \"1G\"\n");
        assert!(e.message.contains("invalid"), "{e}");
        assert_eq!(e.position.map(|p| p.0), Some(1), "{e}");
    }

    #[test]
    fn display_is_path_line_column() {
        let e = ConfigError { path: Some("/etc/g.toml".into()), position: Some((3, 7)), message: "bad".into() };
        assert_eq!(e.to_string(), "/etc/g.toml:3:7: bad");
    }
}
