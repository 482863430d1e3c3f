//! C structs from nvml.h that the `abi` crate does not define, with their
//! sizes pinned so a layout mistake fails the build rather than a client.
#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_uint};
use std::mem::{offset_of, size_of};

/// `NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE` (legacy) and
/// `NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE`.
pub const PCI_BUS_ID_LEGACY_BYTES: usize = 16;
pub const PCI_BUS_ID_BYTES: usize = 32;

/// `nvmlPciInfo_t`, as `nvmlDeviceGetPciInfo_v3` fills it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PciInfo {
    pub busIdLegacy: [c_char; PCI_BUS_ID_LEGACY_BYTES],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub busId: [c_char; PCI_BUS_ID_BYTES],
}
const _: () = assert!(size_of::<PciInfo>() == 68 && offset_of!(PciInfo, busId) == 36);

/// The `nvmlPciInfo_t` of headers before `_v3` (a 16-byte `busId` first,
/// then four reserved words), which `nvmlDeviceGetPciInfo` and `_v2` fill:
/// programs built against those headers pass a buffer of this size.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PciInfoV1 {
    pub busId: [c_char; PCI_BUS_ID_LEGACY_BYTES],
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub reserved: [c_uint; 4],
}
const _: () = assert!(size_of::<PciInfoV1>() == 52);

/// `nvmlPciInfoExt_v1_t`; `version` must be [`PCI_INFO_EXT_V1`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PciInfoExt {
    pub version: c_uint,
    pub domain: c_uint,
    pub bus: c_uint,
    pub device: c_uint,
    pub pciDeviceId: c_uint,
    pub pciSubSystemId: c_uint,
    pub baseClass: c_uint,
    pub subClass: c_uint,
    pub busId: [c_char; PCI_BUS_ID_BYTES],
}
const _: () = assert!(size_of::<PciInfoExt>() == 64);

/// `NVML_STRUCT_VERSION(name, ver)`: the struct's size with the version in
/// the top byte.
pub const fn struct_version(bytes: usize, version: u32) -> c_uint {
    bytes as c_uint | (version << 24)
}

/// `nvmlPciInfoExt_v1`.
pub const PCI_INFO_EXT_V1: c_uint = struct_version(size_of::<PciInfoExt>(), 1);

/// `nvmlBAR1Memory_t`, in bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Bar1Memory {
    pub bar1Total: u64,
    pub bar1Free: u64,
    pub bar1Used: u64,
}
const _: () = assert!(size_of::<Bar1Memory>() == 24);

/// `nvmlTemperature_v1_t`; `version` must be [`TEMPERATURE_V1`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TemperatureV1 {
    pub version: c_uint,
    pub sensorType: c_uint,
    pub temperature: c_int,
}
const _: () = assert!(size_of::<TemperatureV1>() == 12);

/// `nvmlTemperature_v1`.
pub const TEMPERATURE_V1: c_uint = struct_version(size_of::<TemperatureV1>(), 1);

/// `nvmlFieldValue_t`. `value` is the 8-byte `nvmlValue_t` union, written
/// here through its `unsigned int` member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FieldValue {
    pub fieldId: c_uint,
    pub scopeId: c_uint,
    pub timestamp: i64,
    pub latencyUsec: i64,
    pub valueType: c_uint,
    pub nvmlReturn: c_uint,
    pub value: u64,
}
const _: () = assert!(size_of::<FieldValue>() == 40 && offset_of!(FieldValue, value) == 32);

/// `nvmlProcessInfo_v1_t`, for the unversioned process-list queries.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfoV1 {
    pub pid: c_uint,
    pub usedGpuMemory: u64,
}
const _: () = assert!(size_of::<ProcessInfoV1>() == 16);

/// `nvmlProcessInfo_v2_t` (`nvmlProcessInfo_t`), for `_v2` and `_v3`.
pub use abi::nvml::nvmlProcessInfo_t as ProcessInfoV2;
const _: () = assert!(size_of::<ProcessInfoV2>() == 24);
