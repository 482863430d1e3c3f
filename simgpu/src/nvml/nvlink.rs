//! NVLink: simgpu's devices have no NVLink links (the link-count field
//! value is 0), so per-link queries answer `NVML_ERROR_NOT_SUPPORTED`, as
//! NVML does on a board without NVLink. PyTorch looks these up at start.

use super::{nvml_export, ready_device};
use abi::nvml::*;
use std::ffi::{c_uint, c_void};

nvml_export! {
    nvmlDeviceGetNvLinkRemoteDeviceType(dev: nvmlDevice_t, _link: c_uint, _kind: *mut c_uint) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetNvLinkRemotePciInfo_v2(dev: nvmlDevice_t, _link: c_uint, _pci: *mut c_void) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
    nvmlDeviceGetNvLinkState(dev: nvmlDevice_t, _link: c_uint, _active: *mut c_uint) {
        ready_device(dev)?;
        Err(NVML_ERROR_NOT_SUPPORTED)
    }
}
