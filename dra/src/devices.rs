//! The node's devices, from NVML: every GPU, or on a MIG-enabled GPU its
//! MIG devices in its place (the monitor admits no tenant on a partitioned
//! GPU itself), with what the ResourceSlice says of them.

use nvml_wrapper::{Device, Nvml};
use std::ffi::{c_uint, c_void, OsStr};
use std::path::Path;

/// One GPU or MIG device.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuDevice {
    /// `GPU-…` or `MIG-…`, lower-case hex.
    pub uuid: String,
    /// As NVML names it (`NVIDIA H200`, `NVIDIA H200 MIG 3g.71gb`).
    pub product_name: String,
    /// `(major, minor)`, where the driver says.
    pub compute_capability: Option<(i32, i32)>,
    /// A MIG device's profile (`3g.71gb`).
    pub mig_profile: Option<String>,
    /// A MIG device's GPU.
    pub parent_uuid: Option<String>,
    pub memory_bytes: u64,
}

/// `nvmlDevice_t`.
type RawDevice = *mut c_void;
type MaxMigCountFn = unsafe extern "C" fn(RawDevice, *mut c_uint) -> c_uint;
type MigHandleFn = unsafe extern "C" fn(RawDevice, c_uint, *mut RawDevice) -> c_uint;

/// Reads every device NVML lists. `lib` names the library (simgpu's in
/// the tests); `None` loads `libnvidia-ml.so.1`.
pub fn read_devices(lib: Option<&Path>) -> Result<Vec<GpuDevice>, String> {
    let name = lib.map_or(OsStr::new("libnvidia-ml.so.1"), Path::as_os_str);
    let nvml = Nvml::builder().lib_path(name).init().map_err(|e| format!("cannot load NVML from {}: {e}", name.to_string_lossy()))?;
    let mig = mig_functions(name);
    let count = nvml.device_count().map_err(|e| format!("nvmlDeviceGetCount: {e}"))?;
    let mut devices = Vec::new();
    for index in 0..count {
        let device = nvml.device_by_index(index).map_err(|e| format!("NVML device {index}: {e}"))?;
        let Some(gpu) = describe(&device) else { continue };
        let mig_on = device.mig_mode().is_ok_and(|m| m.current == 1);
        let parent_uuid = gpu.uuid.clone();
        let (true, Some((max_count, handle_by_index))) = (mig_on, mig) else {
            devices.push(gpu);
            continue;
        };
        // SAFETY: the handle stays valid while `nvml` lives.
        let parent: RawDevice = unsafe { device.handle() }.cast();
        let mut slots: c_uint = 0;
        // SAFETY: a device handle of this library and a valid out-pointer.
        if unsafe { max_count(parent, &mut slots) } != 0 {
            continue;
        }
        for slot in 0..slots.min(64) {
            let mut handle: RawDevice = std::ptr::null_mut();
            // SAFETY: as above; an empty slot is an error, skipped.
            if unsafe { handle_by_index(parent, slot, &mut handle) } != 0 || handle.is_null() {
                continue;
            }
            // SAFETY: a MIG device handle of this library, used while `nvml` lives.
            let instance = unsafe { Device::new(handle.cast(), &nvml) };
            if let Some(mut mig) = describe(&instance) {
                mig.mig_profile = mig.product_name.rsplit_once(" MIG ").map(|(_, p)| p.trim().to_string());
                mig.parent_uuid = Some(parent_uuid.clone());
                devices.push(mig);
            }
        }
    }
    Ok(devices)
}

fn describe(device: &Device<'_>) -> Option<GpuDevice> {
    let uuid = abi::uuid::parse_uuid(&device.uuid().ok()?)?.to_string();
    Some(GpuDevice {
        uuid,
        product_name: device.name().unwrap_or_default(),
        compute_capability: device.cuda_compute_capability().ok().map(|c| (c.major, c.minor)),
        mig_profile: None,
        parent_uuid: None,
        memory_bytes: device.memory_info().ok()?.total,
    })
}

/// `nvmlDeviceGetMaxMigDeviceCount` and `nvmlDeviceGetMigDeviceHandleByIndex`
/// of the library loaded as `name`, which the wrapper does not offer.
fn mig_functions(name: &OsStr) -> Option<(MaxMigCountFn, MigHandleFn)> {
    let cname = std::ffi::CString::new(name.as_encoded_bytes()).ok()?;
    // SAFETY: a valid C string; RTLD_NOLOAD only finds the loaded library.
    let lib = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if lib.is_null() {
        return None;
    }
    // SAFETY: a live handle and NUL-terminated names.
    let (count, handle) = unsafe {
        (libc::dlsym(lib, c"nvmlDeviceGetMaxMigDeviceCount".as_ptr()), libc::dlsym(lib, c"nvmlDeviceGetMigDeviceHandleByIndex".as_ptr()))
    };
    // SAFETY: drops our extra reference; the wrapper's keeps it loaded.
    unsafe { libc::dlclose(lib) };
    if count.is_null() || handle.is_null() {
        return None;
    }
    // SAFETY: nvml.h declares the two functions with these signatures.
    unsafe { Some((std::mem::transmute::<*mut c_void, MaxMigCountFn>(count), std::mem::transmute::<*mut c_void, MigHandleFn>(handle))) }
}
