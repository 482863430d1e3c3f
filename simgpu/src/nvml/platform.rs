//! What NCCL asks NVML about the platform before it builds a communicator:
//! confidential computing (off: simgpu is no CC system), peer-to-peer
//! status between devices (any two whole devices are peers over PCIe, as
//! the driver's peer access says; there is no NVLink), the PCIe link's
//! top speed, and NVLink and fabric queries, which a board without NVLink
//! answers `NVML_ERROR_NOT_SUPPORTED`. NCCL calls the confidential
//! computing query without checking that it was found.

use super::{nvml_export, out, ready, ready_device, version_of};
use crate::nvml::spec::PCIE_GENERATION;
use abi::nvml::*;
use std::ffi::{c_uint, c_void};

/// `nvmlConfComputeSystemState_t`: environment, feature, devtools mode.
#[repr(C)]
struct ConfComputeState {
    environment: c_uint,
    cc_feature: c_uint,
    dev_tools_mode: c_uint,
}

/// `nvmlSystemConfComputeSettings_v1_t`.
#[repr(C)]
struct ConfComputeSettingsV1 {
    version: c_uint,
    environment: c_uint,
    cc_feature: c_uint,
    dev_tools_mode: c_uint,
    multi_gpu_mode: c_uint,
}

/// `NVML_STRUCT_VERSION(SystemConfComputeSettings, 1)`.
const CONF_COMPUTE_SETTINGS_V1: c_uint = std::mem::size_of::<ConfComputeSettingsV1>() as c_uint | (1 << 24);

/// `nvmlGpuP2PCapsIndex_t`: read, write, NVLink, atomics, PCI.
const P2P_CAPS_NVLINK: c_uint = 2;
const P2P_CAPS_LAST: c_uint = 4;
/// `nvmlGpuP2PStatus_t`.
const P2P_STATUS_OK: c_uint = 0;
const P2P_STATUS_NOT_SUPPORTED: c_uint = 5;

/// `NVML_PCIE_LINK_MAX_SPEED_*MBPS` by PCIe generation (1 → 2500 MB/s … 6 → 64000 MB/s).
fn pcie_max_speed_code(generation: u32) -> c_uint {
    generation.clamp(1, 6)
}

nvml_export! {
    nvmlSystemGetConfComputeState(state: *mut c_void) {
        ready()?;
        // Environment unavailable, feature disabled, devtools off.
        out(state.cast::<ConfComputeState>(), ConfComputeState { environment: 0, cc_feature: 0, dev_tools_mode: 0 })
    }
    nvmlSystemGetConfComputeSettings(settings: *mut c_void) {
        ready()?;
        let settings = settings.cast::<ConfComputeSettingsV1>();
        if version_of(settings)? != CONF_COMPUTE_SETTINGS_V1 {
            return Err(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        }
        let off = ConfComputeSettingsV1 { version: CONF_COMPUTE_SETTINGS_V1, environment: 0, cc_feature: 0, dev_tools_mode: 0, multi_gpu_mode: 0 };
        out(settings, off)
    }
    nvmlDeviceGetP2PStatus(first: nvmlDevice_t, second: nvmlDevice_t, index: c_uint, status: *mut c_uint) {
        ready_device(first)?;
        ready_device(second)?;
        let answer = match index {
            P2P_CAPS_NVLINK => P2P_STATUS_NOT_SUPPORTED,
            0..=P2P_CAPS_LAST => P2P_STATUS_OK,
            _ => return Err(NVML_ERROR_INVALID_ARGUMENT),
        };
        out(status, answer)
    }
    nvmlDeviceGetPcieLinkMaxSpeed(dev: nvmlDevice_t, max_speed: *mut c_uint) {
        ready_device(dev)?;
        out(max_speed, pcie_max_speed_code(PCIE_GENERATION))
    }
    nvmlDeviceGetNvLinkCapability(dev: nvmlDevice_t, _link: c_uint, _capability: c_uint, _result: *mut c_uint) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetGpuFabricInfoV(dev: nvmlDevice_t, _info: *mut c_void) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetPlatformInfo(dev: nvmlDevice_t, _info: *mut c_void) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_version_is_nvmls_struct_version() {
        // NVML_STRUCT_VERSION(SystemConfComputeSettings, 1): five words, version 1.
        assert_eq!(CONF_COMPUTE_SETTINGS_V1, 20 | (1 << 24));
    }

    #[test]
    fn pcie_generation_5_is_32000_mbps() {
        assert_eq!(pcie_max_speed_code(5), 5);
    }
}
