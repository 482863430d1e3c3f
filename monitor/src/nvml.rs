//! What the driver says, through NVML: devices, their memory and
//! utilization, and per-process memory and SM utilization.
//!
//! A MIG-enabled device is read with its MIG devices: each is a [`GpuInfo`]
//! of its own (its `MIG-…` UUID, its memory, its processes, its profile and
//! its parent's UUID), listed right after its parent. The parent keeps its
//! whole memory but no processes, since every process runs in one of its
//! instances and is listed there.
//!
//! A device (not a MIG device, whose sensors are its parent's) is also read
//! for its health: temperature and its thresholds, power, clocks and why
//! they are held back, ECC errors, retired pages and remapped rows
//! ([`DeviceHealth`]). A reading the device does not support is `None`, so
//! that it is left out, never shown as zero.
//!
//! NVML is loaded at run time (by name, or from `--nvml-lib`, so the monitor
//! runs on simgpu). Without it the monitor and `status` work from the ledgers
//! alone.

use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, RetirementCause, TemperatureSensor, TemperatureThreshold};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::{Device, Nvml};
use serde::Serialize;
use std::collections::HashMap;
use std::ffi::c_uint;
use std::ffi::OsStr;
use std::path::Path;

/// One process using a device, as the driver reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuProcess {
    /// Host pid.
    pub pid: u32,
    /// Device memory it uses, context included.
    pub used_bytes: u64,
    /// Its SM utilization over the last samples, 0..1, when NVML has samples.
    pub sm_ratio: Option<f64>,
}

/// One device or MIG device, as the driver reports it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuInfo {
    /// The host's index (as `nvidia-smi` numbers devices); a MIG device's
    /// is its parent's.
    pub index: u32,
    /// `GPU-xxxxxxxx-…`, hex digits in lower case; `MIG-…` for a MIG device.
    pub uuid: String,
    /// A MIG device's parent (`GPU-…`); `None` for a device.
    pub parent_uuid: Option<String>,
    /// A MIG device's profile (`3g.71gb`), from its name.
    pub mig_profile: Option<String>,
    /// Physical memory.
    pub total_bytes: u64,
    /// Memory in use by everyone.
    pub used_bytes: u64,
    /// Busy share over NVML's last sample period, 0..1.
    pub utilization_ratio: Option<f64>,
    /// Processes with a context on the device.
    pub processes: Vec<GpuProcess>,
    /// Sensors and error counters (a device's, not a MIG device's).
    pub health: Option<DeviceHealth>,
}

/// What a device's sensors and error counters say, each `None` where the
/// device does not answer (`NVML_ERROR_NOT_SUPPORTED`, or any other error):
/// a reading that is not there is left out, never taken for zero.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct DeviceHealth {
    /// GPU die temperature, °C.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature_c: Option<u32>,
    /// Temperature at which the GPU slows down, °C.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slowdown_temperature_c: Option<u32>,
    /// Temperature at which the GPU shuts down, °C.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shutdown_temperature_c: Option<u32>,
    /// Power draw, milliwatts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_usage_mw: Option<u32>,
    /// Power management limit, milliwatts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub power_limit_mw: Option<u32>,
    /// SM clock, MHz.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<u32>,
    /// Memory clock, MHz.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_clock_mhz: Option<u32>,
    /// Why the clocks are held back: NVML's bitmask.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clocks_event_reasons: Option<u64>,
    /// The same, by name (`sw_power_cap`, `hw_thermal_slowdown`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clocks_event_reason_names: Option<Vec<&'static str>>,
    /// ECC errors since the driver loaded: corrected (single-bit) and
    /// uncorrected (double-bit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecc_corrected_volatile_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected_volatile_total: Option<u64>,
    /// ECC errors over the device's life.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecc_corrected_aggregate_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecc_uncorrected_aggregate_total: Option<u64>,
    /// Pages retired for single-bit and double-bit errors, and whether a
    /// retirement waits for a reset (devices before Ampere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired_pages_sbe: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired_pages_dbe: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retired_pages_pending: Option<bool>,
    /// Rows remapped for correctable and uncorrectable errors, whether a
    /// remapping waits for a reset, and whether one failed (Ampere on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remapped_rows_correctable: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remapped_rows_uncorrectable: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_remap_pending: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row_remap_failure: Option<bool>,
}

/// NVML's clock event reasons (`nvmlClocksEventReason*`, formerly
/// `nvmlClocksThrottleReason*`), by bit, with the names the metrics and
/// `status` use.
pub const CLOCKS_EVENT_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The reasons that mean heat holds the clocks back.
pub const THERMAL_REASONS: [&str; 3] = ["sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown"];
/// The reasons that mean the power limit holds the clocks back.
pub const POWER_REASONS: [&str; 2] = ["sw_power_cap", "hw_power_brake_slowdown"];

/// The names of the reasons set in `mask`, in bit order; unknown bits are left out.
pub fn reason_names(mask: u64) -> Vec<&'static str> {
    CLOCKS_EVENT_REASONS.iter().filter(|(bit, _)| mask & bit != 0).map(|(_, name)| *name).collect()
}

impl DeviceHealth {
    /// Whether heat or the power limit holds the clocks back now.
    pub fn throttled_by(&self) -> Option<&'static str> {
        let names = self.clocks_event_reason_names.as_deref()?;
        if names.iter().any(|n| THERMAL_REASONS.contains(n)) {
            Some("thermal")
        } else if names.iter().any(|n| POWER_REASONS.contains(n)) {
            Some("power")
        } else {
            None
        }
    }
}

/// `nvmlDeviceGetRemappedRows`, which the wrapper does not offer.
type RemappedRowsFn = unsafe extern "C" fn(RawDevice, *mut c_uint, *mut c_uint, *mut c_uint, *mut c_uint) -> c_uint;

/// How often the readings that change rarely (thresholds, the power limit,
/// error counters, retired pages, remapped rows) are read again: some of
/// them take the driver milliseconds, and the monitor looks four times a
/// second.
pub const COUNTERS_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a device's sensors, which move with its load: temperature,
/// power, clocks and why they are held back.
fn read_sensors(device: &Device<'_>, health: &mut DeviceHealth) {
    let reasons = device.current_throttle_reasons().ok().map(|r| r.bits());
    health.temperature_c = device.temperature(TemperatureSensor::Gpu).ok();
    health.power_usage_mw = device.power_usage().ok();
    health.sm_clock_mhz = device.clock_info(Clock::SM).ok();
    health.memory_clock_mhz = device.clock_info(Clock::Memory).ok();
    health.clocks_event_reasons = reasons;
    health.clocks_event_reason_names = reasons.map(reason_names);
}

/// Reads what changes rarely ([`COUNTERS_EVERY`]): thresholds, the power
/// limit and the error counters; `remapped_rows` is the library's
/// `nvmlDeviceGetRemappedRows`, when it has one.
fn read_counters(device: &Device<'_>, remapped_rows: Option<RemappedRowsFn>) -> DeviceHealth {
    let ecc = |error: MemoryError, counter: EccCounter| device.total_ecc_errors(error, counter).ok();
    let retired = |cause: RetirementCause| device.retired_pages(cause).ok().map(|pages| pages.len() as u64);
    let mut health = DeviceHealth {
        slowdown_temperature_c: device.temperature_threshold(TemperatureThreshold::Slowdown).ok(),
        shutdown_temperature_c: device.temperature_threshold(TemperatureThreshold::Shutdown).ok(),
        power_limit_mw: device.power_management_limit().ok(),
        ecc_corrected_volatile_total: ecc(MemoryError::Corrected, EccCounter::Volatile),
        ecc_uncorrected_volatile_total: ecc(MemoryError::Uncorrected, EccCounter::Volatile),
        ecc_corrected_aggregate_total: ecc(MemoryError::Corrected, EccCounter::Aggregate),
        ecc_uncorrected_aggregate_total: ecc(MemoryError::Uncorrected, EccCounter::Aggregate),
        retired_pages_sbe: retired(RetirementCause::MultipleSingleBitEccErrors),
        retired_pages_dbe: retired(RetirementCause::DoubleBitEccError),
        retired_pages_pending: device.are_pages_pending_retired().ok(),
        ..DeviceHealth::default()
    };
    if let Some(remapped_rows) = remapped_rows {
        let (mut corrected, mut uncorrected, mut pending, mut failed) = (0, 0, 0, 0);
        // SAFETY: a device handle of the same library, used while it is
        // loaded, and four valid out-pointers.
        let status = unsafe { remapped_rows(device.handle().cast(), &mut corrected, &mut uncorrected, &mut pending, &mut failed) };
        if status == 0 {
            health.remapped_rows_correctable = Some(u64::from(corrected));
            health.remapped_rows_uncorrectable = Some(u64::from(uncorrected));
            health.row_remap_pending = Some(pending != 0);
            health.row_remap_failure = Some(failed != 0);
        }
    }
    health
}

/// A loaded NVML.
pub struct GpuReader {
    nvml: Nvml,
    /// Per device, the newest utilization sample already seen (µs).
    last_sample_us: HashMap<u32, u64>,
    /// The MIG entry points, which the wrapper does not offer.
    mig: Option<MigFns>,
    /// `nvmlDeviceGetRemappedRows`, which the wrapper does not offer either.
    remapped_rows: Option<RemappedRowsFn>,
    /// Per device index, what [`read_counters`] last read, and when.
    counters: HashMap<u32, (std::time::Instant, DeviceHealth)>,
}

/// `nvmlDevice_t`, which the wrapper does not export.
type RawDevice = *mut std::ffi::c_void;
type MaxMigDeviceCountFn = unsafe extern "C" fn(RawDevice, *mut c_uint) -> c_uint;
type MigDeviceHandleByIndexFn = unsafe extern "C" fn(RawDevice, c_uint, *mut RawDevice) -> c_uint;

/// `nvmlDeviceGetMaxMigDeviceCount` and `nvmlDeviceGetMigDeviceHandleByIndex`
/// of the loaded library.
#[derive(Clone, Copy)]
struct MigFns {
    max_count: MaxMigDeviceCountFn,
    handle_by_index: MigDeviceHandleByIndexFn,
}

impl MigFns {
    /// Looks the two functions up in the library the wrapper loaded under
    /// `name` (`RTLD_NOLOAD`: the same handle, nothing new is loaded).
    fn resolve(name: &OsStr) -> Option<MigFns> {
        let cname = std::ffi::CString::new(name.as_encoded_bytes()).ok()?;
        // SAFETY: a valid C string; RTLD_NOLOAD only finds a loaded library.
        let lib = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if lib.is_null() {
            return None;
        }
        // SAFETY: `lib` is a live handle; the names are NUL-terminated.
        let (max_count, handle_by_index) = unsafe {
            (
                libc::dlsym(lib, c"nvmlDeviceGetMaxMigDeviceCount".as_ptr()),
                libc::dlsym(lib, c"nvmlDeviceGetMigDeviceHandleByIndex".as_ptr()),
            )
        };
        // SAFETY: dropping our extra reference; the wrapper's keeps it loaded.
        unsafe { libc::dlclose(lib) };
        if max_count.is_null() || handle_by_index.is_null() {
            return None;
        }
        // SAFETY: the symbols have these signatures in nvml.h.
        unsafe {
            Some(MigFns {
                max_count: std::mem::transmute::<*mut libc::c_void, MaxMigDeviceCountFn>(max_count),
                handle_by_index: std::mem::transmute::<*mut libc::c_void, MigDeviceHandleByIndexFn>(handle_by_index),
            })
        }
    }

    /// The MIG device handles under `parent`.
    fn devices(&self, parent: RawDevice) -> Vec<RawDevice> {
        let mut count: c_uint = 0;
        // SAFETY: a device handle from the same library and a valid out-pointer.
        if unsafe { (self.max_count)(parent, &mut count) } != 0 {
            return Vec::new();
        }
        (0..count.min(64))
            .filter_map(|i| {
                let mut handle: RawDevice = std::ptr::null_mut();
                // SAFETY: as above; an index with no MIG device is an error, skipped.
                (unsafe { (self.handle_by_index)(parent, i, &mut handle) } == 0 && !handle.is_null()).then_some(handle)
            })
            .collect()
    }
}

/// The names tried when no library is given: the versioned name first, since
/// hosts without the development package have only that one.
const DEFAULT_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

impl GpuReader {
    /// Loads NVML from `lib`, or by its usual names.
    pub fn load(lib: Option<&Path>) -> Result<GpuReader, String> {
        let attempt = |name: &OsStr| {
            Nvml::builder()
                .lib_path(name)
                .init()
                .map(|nvml| (nvml, name.to_owned()))
                .map_err(|e| format!("{}: {e}", name.to_string_lossy()))
        };
        let (nvml, name) = match lib {
            Some(path) => attempt(path.as_os_str())?,
            None => {
                let mut errors = Vec::new();
                let mut loaded = None;
                for name in DEFAULT_NAMES {
                    match attempt(OsStr::new(name)) {
                        Ok(nvml) => {
                            loaded = Some(nvml);
                            break;
                        }
                        Err(e) => errors.push(e),
                    }
                }
                loaded.ok_or_else(|| errors.join("; "))?
            }
        };
        let remapped_rows = lookup(&name, c"nvmlDeviceGetRemappedRows").map(|f| {
            // SAFETY: the symbol has this signature in nvml.h.
            unsafe { std::mem::transmute::<*mut libc::c_void, RemappedRowsFn>(f) }
        });
        Ok(GpuReader { nvml, last_sample_us: HashMap::new(), mig: MigFns::resolve(&name), remapped_rows, counters: HashMap::new() })
    }

    /// Reads every device, and the MIG devices of a MIG-enabled one. A
    /// device that fails to answer is skipped.
    pub fn read(&mut self) -> Result<Vec<GpuInfo>, String> {
        let GpuReader { nvml, last_sample_us, mig, remapped_rows, counters } = self;
        let now = std::time::Instant::now();
        let count = nvml.device_count().map_err(|e| format!("nvmlDeviceGetCount: {e}"))?;
        let mut gpus = Vec::new();
        for index in 0..count {
            let Ok(device) = nvml.device_by_index(index) else { continue };
            let mig_enabled = device.mig_mode().is_ok_and(|m| m.current == 1);
            let Some(mut gpu) = read_device(last_sample_us, &device, index, index) else { continue };
            let stale = counters.get(&index).is_none_or(|(at, _)| now.duration_since(*at) >= COUNTERS_EVERY);
            if stale {
                counters.insert(index, (now, read_counters(&device, *remapped_rows)));
            }
            let mut health = counters.get(&index).map(|(_, h)| h.clone()).unwrap_or_default();
            read_sensors(&device, &mut health);
            gpu.health = Some(health);
            let mut instances = Vec::new();
            if let (true, Some(mig)) = (mig_enabled, *mig) {
                // SAFETY: the handle stays valid while `self.nvml` lives.
                let parent = unsafe { device.handle() }.cast();
                for (k, handle) in mig.devices(parent).into_iter().enumerate() {
                    // SAFETY: a MIG device handle from the same library,
                    // used only while `self.nvml` lives.
                    let mig_device = unsafe { Device::new(handle.cast(), nvml) };
                    // MIG devices get sample keys of their own, past every index.
                    let key = count.saturating_add(index.saturating_mul(64)).saturating_add(k as u32);
                    let Some(mut instance) = read_device(last_sample_us, &mig_device, index, key) else { continue };
                    instance.parent_uuid = Some(gpu.uuid.clone());
                    instance.mig_profile = mig_device.name().ok().and_then(|name| mig_profile(&name));
                    instances.push(instance);
                }
                // Its processes run in its instances and are listed there.
                gpu.processes.clear();
            }
            gpus.push(gpu);
            gpus.append(&mut instances);
        }
        Ok(gpus)
    }
}

/// One device's (or MIG device's) UUID, memory, utilization and processes;
/// `sample_key` names it in `last_sample_us` (the newest utilization sample
/// already seen, µs).
fn read_device(last_sample_us: &mut HashMap<u32, u64>, device: &Device<'_>, index: u32, sample_key: u32) -> Option<GpuInfo> {
    let uuid = device.uuid().ok()?;
    let memory = device.memory_info().ok();
    let utilization_ratio = device.utilization_rates().ok().map(|u| f64::from(u.gpu) / 100.0);
    let last = last_sample_us.get(&sample_key).copied();
    let mut sm_sum: HashMap<u32, (f64, u32)> = HashMap::new();
    if let Ok(samples) = device.process_utilization_stats(last) {
        let newest = samples.iter().map(|s| s.timestamp).max();
        for sample in samples {
            let entry = sm_sum.entry(sample.pid).or_default();
            entry.0 += f64::from(sample.sm_util) / 100.0;
            entry.1 += 1;
        }
        if let Some(newest) = newest {
            last_sample_us.insert(sample_key, newest);
        }
    }
    let processes = device
        .running_compute_processes()
        .unwrap_or_default()
        .into_iter()
        .map(|p| GpuProcess {
            pid: p.pid,
            used_bytes: match p.used_gpu_memory {
                UsedGpuMemory::Used(bytes) => bytes,
                UsedGpuMemory::Unavailable => 0,
            },
            sm_ratio: sm_sum.get(&p.pid).map(|(sum, n)| sum / f64::from(*n)),
        })
        .collect();
    Some(GpuInfo {
        index,
        uuid: uuid_bytes(&uuid).map_or(uuid, |raw| uuid_string(&raw)),
        parent_uuid: None,
        mig_profile: None,
        total_bytes: memory.as_ref().map_or(0, |m| m.total),
        used_bytes: memory.as_ref().map_or(0, |m| m.used),
        utilization_ratio,
        processes,
        health: None,
    })
}

/// A symbol of the library the wrapper loaded under `name` (`RTLD_NOLOAD`:
/// the same handle, nothing new is loaded).
fn lookup(name: &OsStr, symbol: &std::ffi::CStr) -> Option<*mut libc::c_void> {
    let cname = std::ffi::CString::new(name.as_encoded_bytes()).ok()?;
    // SAFETY: a valid C string; RTLD_NOLOAD only finds a loaded library.
    let lib = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if lib.is_null() {
        return None;
    }
    // SAFETY: `lib` is a live handle; the name is NUL-terminated.
    let found = unsafe { libc::dlsym(lib, symbol.as_ptr()) };
    // SAFETY: dropping our extra reference; the wrapper's keeps it loaded.
    unsafe { libc::dlclose(lib) };
    (!found.is_null()).then_some(found)
}

/// The profile in a MIG device's name: `3g.71gb` in `NVIDIA H200 MIG
/// 3g.71gb` (or `1c.3g.71gb` for a compute instance that shares its GPU
/// instance).
pub fn mig_profile(name: &str) -> Option<String> {
    let (_, profile) = name.rsplit_once(" MIG ")?;
    let profile = profile.trim();
    (!profile.is_empty()).then(|| profile.to_string())
}

/// The raw bytes of a `GPU-…` or `MIG-…` UUID string: the ledger keys
/// devices by `cuDeviceGetUuid`'s bytes, which for a MIG device are its
/// `MIG-…` UUID's.
pub fn any_uuid_bytes(text: &str) -> Option<[u8; 16]> {
    abi::uuid::parse_uuid(text).map(|uuid| uuid.bytes)
}

/// What a device is, beyond its figures; each `None` where the driver
/// does not answer (simgpu, old drivers, unsupported queries).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceFacts {
    /// `NVIDIA H100 80GB HBM3`.
    pub name: Option<String>,
    /// `9.0`.
    pub compute_capability: Option<String>,
    /// `enabled` or `disabled`, with the mode pending after a reset if it differs.
    pub mig_mode: Option<String>,
}

impl GpuReader {
    /// The facts of device `index`, read once (they do not change while the
    /// host runs, so the monitor's rounds do not ask for them).
    pub fn describe(&self, index: u32) -> DeviceFacts {
        let Ok(device) = self.nvml.device_by_index(index) else { return DeviceFacts::default() };
        let mode = |m: u32| if m == 1 { "enabled" } else { "disabled" };
        DeviceFacts {
            name: device.name().ok(),
            compute_capability: device.cuda_compute_capability().ok().map(|c| format!("{}.{}", c.major, c.minor)),
            mig_mode: device.mig_mode().ok().map(|m| {
                if m.current == m.pending {
                    mode(m.current).to_string()
                } else {
                    format!("{} ({} after reset)", mode(m.current), mode(m.pending))
                }
            }),
        }
    }
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` for a raw 16-byte UUID, as NVML
/// prints it (lower case).
pub fn uuid_string(uuid: &[u8; 16]) -> String {
    abi::uuid::gpu_uuid(uuid).to_string()
}

/// The raw bytes of a `GPU-…` UUID string.
pub fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    abi::uuid::parse_uuid(text).filter(|uuid| uuid.kind == abi::uuid::UuidKind::Gpu).map(|uuid| uuid.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_round_trip() {
        let raw: [u8; 16] = [0x5f, 0x1c, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0xa, 0xb, 0xc, 0xff];
        let text = uuid_string(&raw);
        assert_eq!(text, "GPU-5f1c0001-0203-0405-0607-08090a0b0cff");
        assert_eq!(uuid_bytes(&text), Some(raw));
        assert_eq!(uuid_bytes(&text.to_uppercase()), Some(raw));
        assert_eq!(uuid_bytes("GPU-12"), None);
        assert_eq!(uuid_bytes("MIG-5f1c0001-0203-0405-0607-08090a0b0cff"), None);
        assert_eq!(any_uuid_bytes("MIG-5f1c0001-0203-0405-0607-08090a0b0cff"), Some(raw));
        assert_eq!(any_uuid_bytes(&text), Some(raw));
    }

    #[test]
    fn clock_event_reasons_are_named_by_bit() {
        assert_eq!(reason_names(0), Vec::<&str>::new());
        assert_eq!(reason_names(0x1), vec!["gpu_idle"]);
        assert_eq!(reason_names(0x4 | 0x40 | 0x8000), vec!["sw_power_cap", "hw_thermal_slowdown"]);
        let health = |mask| DeviceHealth { clocks_event_reason_names: Some(reason_names(mask)), ..DeviceHealth::default() };
        assert_eq!(health(0x4).throttled_by(), Some("power"));
        assert_eq!(health(0x4 | 0x20).throttled_by(), Some("thermal"));
        assert_eq!(health(0x1).throttled_by(), None);
        assert_eq!(DeviceHealth::default().throttled_by(), None);
    }

    #[test]
    fn mig_profiles_come_from_the_name() {
        assert_eq!(mig_profile("NVIDIA H200 MIG 3g.71gb").as_deref(), Some("3g.71gb"));
        assert_eq!(mig_profile("simgpu H200 MIG 1c.3g.71gb").as_deref(), Some("1c.3g.71gb"));
        assert_eq!(mig_profile("NVIDIA H200"), None);
    }

    #[test]
    fn a_missing_library_is_an_error_not_a_crash() {
        let error = GpuReader::load(Some(Path::new("/nonexistent/libnvidia-ml.so.1"))).err().unwrap();
        assert!(error.contains("/nonexistent/libnvidia-ml.so.1"), "{error}");
    }
}
