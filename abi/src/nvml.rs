//! NVML types and constants (`nvml.h`).
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use core::ffi::c_uint;

/// `nvmlReturn_t`.
pub type nvmlReturn_t = c_uint;

pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;
pub const NVML_ERROR_INVALID_ARGUMENT: nvmlReturn_t = 2;
pub const NVML_ERROR_NOT_SUPPORTED: nvmlReturn_t = 3;
pub const NVML_ERROR_NO_PERMISSION: nvmlReturn_t = 4;
pub const NVML_ERROR_NOT_FOUND: nvmlReturn_t = 6;
pub const NVML_ERROR_INSUFFICIENT_SIZE: nvmlReturn_t = 7;
pub const NVML_ERROR_DRIVER_NOT_LOADED: nvmlReturn_t = 9;
pub const NVML_ERROR_LIBRARY_NOT_FOUND: nvmlReturn_t = 12;
pub const NVML_ERROR_FUNCTION_NOT_FOUND: nvmlReturn_t = 13;
pub const NVML_ERROR_GPU_IS_LOST: nvmlReturn_t = 15;
pub const NVML_ERROR_NO_DATA: nvmlReturn_t = 21;
pub const NVML_ERROR_ARGUMENT_VERSION_MISMATCH: nvmlReturn_t = 25;
pub const NVML_ERROR_UNKNOWN: nvmlReturn_t = 999;

#[repr(C)]
pub struct nvmlDevice_st {
    _private: [u8; 0],
}
/// `nvmlDevice_t`.
pub type nvmlDevice_t = *mut nvmlDevice_st;

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlMemory_t {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`; `version` must be `nvmlMemory_v2`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlMemory_v2_t {
    pub version: c_uint,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

/// `NVML_STRUCT_VERSION(Memory, 2)`.
pub const nvmlMemory_v2: c_uint = (core::mem::size_of::<nvmlMemory_v2_t>() as c_uint) | (2 << 24);

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlUtilization_t {
    pub gpu: c_uint,
    pub memory: c_uint,
}

/// `nvmlProcessInfo_v1_t`, used by the unversioned process-list queries.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlProcessInfo_v1_t {
    pub pid: c_uint,
    pub usedGpuMemory: u64,
}

/// `nvmlProcessInfo_t` (the `_v2` layout, used by `..._v2` and `..._v3` queries).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlProcessInfo_t {
    pub pid: c_uint,
    pub usedGpuMemory: u64,
    pub gpuInstanceId: c_uint,
    pub computeInstanceId: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct nvmlProcessUtilizationSample_t {
    pub pid: c_uint,
    pub timeStamp: u64,
    pub smUtil: c_uint,
    pub memUtil: c_uint,
    pub encUtil: c_uint,
    pub decUtil: c_uint,
}

pub const NVML_DEVICE_NAME_V2_BUFFER_SIZE: usize = 96;
pub const NVML_DEVICE_UUID_V2_BUFFER_SIZE: usize = 96;
pub const NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE: usize = 80;
