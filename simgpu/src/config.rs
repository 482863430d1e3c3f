//! Configuration from `SIMGPU_*` environment variables, parsed once at
//! `cuInit`/`nvmlInit`. A bad value is a typed error whose message names the
//! variable, the value and the accepted format; the caller prints it and fails
//! initialisation, so a typo never silently means a default.

use crate::mig::{self, Partition, Topology};
use std::fmt;
use std::path::PathBuf;

pub const MAX_DEVICES: u32 = 16;

/// Accepted size format, shown in error messages: the one of every other
/// size gpuslice reads ([`ledger::units::parse_size`]).
pub const SIZE_FORMAT: &str = ledger::units::SIZE_FORMAT;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub device_count: u32,
    pub memory_bytes: u64,
    /// Explicit `SIMGPU_STATE`, or `None` for the default path.
    pub state_path: Option<PathBuf>,
    pub context_memory_bytes: u64,
    pub slice_us: u64,
    pub kernel_us: u64,
    /// `SIMGPU_MIG`: the partitioned devices (see [`crate::mig`]).
    pub mig: Vec<Partition>,
    /// What the board's NVML sensors report (`SIMGPU_ECC`, `SIMGPU_POWER_LIMIT`).
    pub sensors: Sensors,
}

/// Board options that change only what NVML reports, so that a reader of
/// NVML can be tried on a board without ECC or one held to a lower power
/// limit. They are per process (the state file does not hold them): the
/// process that reads NVML decides what it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sensors {
    /// `SIMGPU_ECC=off`: ECC disabled, so its counters and row remapping
    /// answer `NVML_ERROR_NOT_SUPPORTED`, as on a board without ECC.
    pub ecc: bool,
    /// `SIMGPU_POWER_LIMIT`, in watts: the enforced power limit; a load that
    /// would draw more is capped there, with a lower SM clock and
    /// `nvmlClocksEventReasonSwPowerCap`.
    pub power_limit_mw: u32,
}

impl Default for Sensors {
    fn default() -> Sensors {
        Sensors { ecc: true, power_limit_mw: crate::nvml::spec::POWER_LIMIT_MW }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub variable: &'static str,
    pub value: String,
    pub expected: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "simgpu: {}={:?} is not valid: expected {}", self.variable, self.value, self.expected)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// Parses from any variable lookup (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let device_count = match get("SIMGPU_DEVICES") {
            None => 1,
            Some(v) => match v.trim().parse::<u32>() {
                Ok(n) if (1..=MAX_DEVICES).contains(&n) => n,
                _ => return Err(err("SIMGPU_DEVICES", v, format!("a whole number from 1 to {MAX_DEVICES}"))),
            },
        };
        let memory_bytes = size_var(&get, "SIMGPU_MEMORY", 16 << 30, 1 << 20)?;
        let context_memory_bytes = size_var(&get, "SIMGPU_CONTEXT_MEMORY", 256 << 20, 0)?;
        if context_memory_bytes >= memory_bytes {
            return Err(err(
                "SIMGPU_CONTEXT_MEMORY",
                get("SIMGPU_CONTEXT_MEMORY").unwrap_or_default(),
                format!("{SIZE_FORMAT}, smaller than SIMGPU_MEMORY ({memory_bytes} bytes)"),
            ));
        }
        let slice_us = int_var(&get, "SIMGPU_SLICE_US", 2000, 10, 10_000_000)?;
        let kernel_us = int_var(&get, "SIMGPU_KERNEL_US", 5, 0, 3_600_000_000)?;
        let state_path = match get("SIMGPU_STATE") {
            None => None,
            Some(v) if v.is_empty() => return Err(err("SIMGPU_STATE", v, "a file path".into())),
            Some(v) => Some(PathBuf::from(v)),
        };
        let mig = match get("SIMGPU_MIG") {
            None => Vec::new(),
            Some(v) => mig_var(&v, device_count, memory_bytes, context_memory_bytes).map_err(|e| err("SIMGPU_MIG", v, e.to_string()))?,
        };
        let sensors = sensors_var(&get)?;
        Ok(Config { device_count, memory_bytes, state_path, context_memory_bytes, slice_us, kernel_us, mig, sensors })
    }

    /// What each slot of the state file holds: the devices, then their MIG
    /// instances.
    pub fn topology(&self) -> Topology {
        Topology::new(self.device_count, &self.mig)
    }

    /// The state file: `SIMGPU_STATE`, or one per device configuration under
    /// the user's runtime directory, so that processes started with another
    /// `SIMGPU_DEVICES`/`SIMGPU_MEMORY` get their own simulated machine
    /// instead of a mismatch error.
    pub fn state_file(&self) -> PathBuf {
        if let Some(p) = &self.state_path {
            return p.clone();
        }
        let dir = match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d).join("simgpu"),
            // SAFETY: getuid has no preconditions and cannot fail.
            _ => PathBuf::from(format!("/tmp/simgpu-{}", unsafe { libc::getuid() })),
        };
        let mig = match mig::digest(&self.mig) {
            0 => String::new(),
            d => format!("-mig{d:016x}"),
        };
        dir.join(format!("state-{}x{}{mig}", self.device_count, self.memory_bytes))
    }
}

fn err(variable: &'static str, value: String, expected: String) -> ConfigError {
    ConfigError { variable, value, expected }
}

/// `SIMGPU_MIG`: the partitions, each instance bigger than a context, and
/// every slot within the state file's device table.
fn mig_var(value: &str, device_count: u32, memory_bytes: u64, context_memory_bytes: u64) -> Result<Vec<Partition>, mig::MigError> {
    let partitions = mig::parse(value, device_count)?;
    for profile in partitions.iter().flat_map(|p| p.profiles.iter()) {
        let instance_bytes = profile.memory_bytes(memory_bytes);
        if instance_bytes <= context_memory_bytes {
            return Err(mig::MigError::TooSmall { profile: profile.name, instance_bytes, context_bytes: context_memory_bytes });
        }
    }
    let slots = Topology::new(device_count, &partitions).slot_count();
    if slots > crate::state::MAX_DEVICES {
        return Err(mig::MigError::Slots { slots, max: crate::state::MAX_DEVICES });
    }
    Ok(partitions)
}

/// `SIMGPU_ECC` (`on` or `off`) and `SIMGPU_POWER_LIMIT` (whole watts,
/// within the board's limit constraints).
fn sensors_var(get: &impl Fn(&str) -> Option<String>) -> Result<Sensors, ConfigError> {
    use crate::nvml::spec::{POWER_LIMIT_MIN_MW, POWER_LIMIT_MW};
    let mut sensors = Sensors::default();
    if let Some(v) = get("SIMGPU_ECC") {
        sensors.ecc = match v.trim() {
            "on" | "1" => true,
            "off" | "0" => false,
            _ => return Err(err("SIMGPU_ECC", v, "on or off".into())),
        };
    }
    if let Some(v) = get("SIMGPU_POWER_LIMIT") {
        let (min_w, max_w) = (POWER_LIMIT_MIN_MW / 1000, POWER_LIMIT_MW / 1000);
        let watts = v.trim().strip_suffix('W').unwrap_or(v.trim()).parse::<u32>().ok().filter(|w| (min_w..=max_w).contains(w));
        sensors.power_limit_mw = match watts {
            Some(w) => w * 1000,
            None => return Err(err("SIMGPU_POWER_LIMIT", v, format!("whole watts from {min_w} to {max_w}, such as 300 or 300W"))),
        };
    }
    Ok(sensors)
}

fn size_var(get: &impl Fn(&str) -> Option<String>, name: &'static str, default: u64, min: u64) -> Result<u64, ConfigError> {
    match get(name) {
        None => Ok(default),
        Some(v) => match parse_size(&v) {
            Some(n) if n >= min && n <= (1u64 << 46) => Ok(n),
            _ => Err(err(name, v, format!("{SIZE_FORMAT}, from {min} bytes to 64TiB"))),
        },
    }
}

fn int_var(get: &impl Fn(&str) -> Option<String>, name: &'static str, default: u64, min: u64, max: u64) -> Result<u64, ConfigError> {
    match get(name) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ => Err(err(name, v, format!("a whole number of microseconds from {min} to {max}"))),
        },
    }
}

/// Parses a size as every other gpuslice size is parsed
/// ([`ledger::units::parse_size`]: `16GiB`, `16Gi`, `3000m`, `4096B`; no
/// number without a unit), except that `0` is a size here (no context
/// overhead).
pub fn parse_size(text: &str) -> Option<u64> {
    match ledger::units::parse_size(text) {
        Ok(bytes) => Some(bytes),
        Err(ledger::units::ParseError::Zero) => Some(0),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16GiB"), Some(16 << 30));
        assert_eq!(parse_size("512MiB"), Some(512 << 20));
        assert_eq!(parse_size("1.5GiB"), Some(3 << 29));
        assert_eq!(parse_size("3000m"), Some(3000 << 20));
        assert_eq!(parse_size("4096B"), Some(4096));
        assert_eq!(parse_size("16Gi"), Some(16 << 30));
        assert_eq!(parse_size(" 2 g "), Some(2 << 30));
        // The grammar of GPUSLICE_MEMORY_LIMIT: no unit, or a decimal one, is refused.
        assert_eq!(parse_size("4096"), None);
        assert_eq!(parse_size("16GB"), None);
        assert_eq!(parse_size("4GG"), None);
        assert_eq!(parse_size("GiB"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999"), None);
    }

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_and_errors() {
        let c = cfg(&[]).unwrap();
        assert_eq!((c.device_count, c.memory_bytes, c.context_memory_bytes, c.slice_us, c.kernel_us), (1, 16 << 30, 256 << 20, 2000, 5));
        let e = cfg(&[("SIMGPU_MEMORY", "4GG")]).unwrap_err();
        assert_eq!(e.variable, "SIMGPU_MEMORY");
        assert!(e.to_string().contains("4GG") && e.to_string().contains("512MiB"));
        assert_eq!(cfg(&[("SIMGPU_DEVICES", "0")]).unwrap_err().variable, "SIMGPU_DEVICES");
        assert_eq!(cfg(&[("SIMGPU_SLICE_US", "x")]).unwrap_err().variable, "SIMGPU_SLICE_US");
        assert_eq!(cfg(&[("SIMGPU_MEMORY", "1GiB"), ("SIMGPU_CONTEXT_MEMORY", "1GiB")]).unwrap_err().variable, "SIMGPU_CONTEXT_MEMORY");
        assert_eq!(cfg(&[("SIMGPU_CONTEXT_MEMORY", "0")]).unwrap().context_memory_bytes, 0);
    }

    #[test]
    fn sensor_options() {
        assert_eq!(cfg(&[]).unwrap().sensors, Sensors::default());
        let c = cfg(&[("SIMGPU_ECC", "off"), ("SIMGPU_POWER_LIMIT", "300W")]).unwrap();
        assert_eq!((c.sensors.ecc, c.sensors.power_limit_mw), (false, 300_000));
        assert_eq!(cfg(&[("SIMGPU_POWER_LIMIT", "250")]).unwrap().sensors.power_limit_mw, 250_000);
        assert_eq!(cfg(&[("SIMGPU_ECC", "maybe")]).unwrap_err().variable, "SIMGPU_ECC");
        let e = cfg(&[("SIMGPU_POWER_LIMIT", "900")]).unwrap_err();
        assert!(e.to_string().contains("200 to 700"), "{e}");
    }

    #[test]
    fn mig_partitions_are_checked_against_the_devices() {
        let c = cfg(&[("SIMGPU_DEVICES", "2"), ("SIMGPU_MEMORY", "8GiB"), ("SIMGPU_MIG", "0=3g.71gb,1g.18gb")]).unwrap();
        assert_eq!(c.topology().slot_count(), 4);
        assert_ne!(c.state_file(), cfg(&[("SIMGPU_DEVICES", "2"), ("SIMGPU_MEMORY", "8GiB")]).unwrap().state_file());
        let e = cfg(&[("SIMGPU_MIG", "0=9g.1tb")]).unwrap_err();
        assert_eq!(e.variable, "SIMGPU_MIG");
        assert!(e.to_string().contains("9g.1tb") && e.to_string().contains("3g.71gb"), "{e}");
        // 1GiB / 8 is 128MiB: no larger than a 256MiB context.
        let e = cfg(&[("SIMGPU_MEMORY", "1GiB"), ("SIMGPU_MIG", "0=1g.18gb")]).unwrap_err();
        assert!(e.to_string().contains("SIMGPU_CONTEXT_MEMORY"), "{e}");
        let e = cfg(&[("SIMGPU_DEVICES", "16"), ("SIMGPU_MIG", "0=1g.18gb")]).unwrap_err();
        assert!(e.to_string().contains("at most 16"), "{e}");
    }
}
