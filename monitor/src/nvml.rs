//! What the driver says, through NVML: devices, their memory and
//! utilization, and per-process memory and SM utilization.
//!
//! NVML is loaded at run time (by name, or from `--nvml-lib`, so the monitor
//! runs on simgpu). Without it the monitor and `status` work from the ledgers
//! alone.

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::Nvml;
use std::collections::HashMap;
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

/// One device, as the driver reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuInfo {
    /// The host's index (as `nvidia-smi` numbers devices).
    pub index: u32,
    /// `GPU-xxxxxxxx-…`, hex digits in lower case.
    pub uuid: String,
    /// Physical memory.
    pub total_bytes: u64,
    /// Memory in use by everyone.
    pub used_bytes: u64,
    /// Busy share over NVML's last sample period, 0..1.
    pub utilization_ratio: Option<f64>,
    /// Processes with a context on the device.
    pub processes: Vec<GpuProcess>,
}

/// A loaded NVML.
pub struct GpuReader {
    nvml: Nvml,
    /// Per device, the newest utilization sample already seen (µs).
    last_sample_us: HashMap<u32, u64>,
}

/// The names tried when no library is given: the versioned name first, since
/// hosts without the development package have only that one.
const DEFAULT_NAMES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

impl GpuReader {
    /// Loads NVML from `lib`, or by its usual names.
    pub fn load(lib: Option<&Path>) -> Result<GpuReader, String> {
        let attempt = |name: &OsStr| Nvml::builder().lib_path(name).init().map_err(|e| format!("{}: {e}", name.to_string_lossy()));
        let nvml = match lib {
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
        Ok(GpuReader { nvml, last_sample_us: HashMap::new() })
    }

    /// Reads every device. A device that fails to answer is skipped.
    pub fn read(&mut self) -> Result<Vec<GpuInfo>, String> {
        let count = self.nvml.device_count().map_err(|e| format!("nvmlDeviceGetCount: {e}"))?;
        let mut gpus = Vec::new();
        for index in 0..count {
            let Ok(device) = self.nvml.device_by_index(index) else { continue };
            let Ok(uuid) = device.uuid() else { continue };
            let memory = device.memory_info().ok();
            let utilization_ratio = device.utilization_rates().ok().map(|u| f64::from(u.gpu) / 100.0);
            let last = self.last_sample_us.get(&index).copied();
            let mut sm_sum: HashMap<u32, (f64, u32)> = HashMap::new();
            if let Ok(samples) = device.process_utilization_stats(last) {
                let newest = samples.iter().map(|s| s.timestamp).max();
                for sample in samples {
                    let entry = sm_sum.entry(sample.pid).or_default();
                    entry.0 += f64::from(sample.sm_util) / 100.0;
                    entry.1 += 1;
                }
                if let Some(newest) = newest {
                    self.last_sample_us.insert(index, newest);
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
            gpus.push(GpuInfo {
                index,
                uuid: uuid_bytes(&uuid).map_or(uuid, |raw| uuid_string(&raw)),
                total_bytes: memory.as_ref().map_or(0, |m| m.total),
                used_bytes: memory.as_ref().map_or(0, |m| m.used),
                utilization_ratio,
                processes,
            });
        }
        Ok(gpus)
    }
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
    let hex: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// The raw bytes of a `GPU-…` UUID string.
pub fn uuid_bytes(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.get(4..)?.bytes().filter(|b| *b != b'-').collect();
    if !text.get(..4)?.eq_ignore_ascii_case("gpu-") || hex.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (byte, pair) in bytes.iter_mut().zip(hex.chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(bytes)
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
    }

    #[test]
    fn a_missing_library_is_an_error_not_a_crash() {
        let error = GpuReader::load(Some(Path::new("/nonexistent/libnvidia-ml.so.1"))).err().unwrap();
        assert!(error.contains("/nonexistent/libnvidia-ml.so.1"), "{error}");
    }
}
