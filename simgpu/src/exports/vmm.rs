//! Virtual memory management: physical handles, address reservations,
//! mappings, access, granularity.

use crate::driver::driver;
use crate::ffi::cu_export;
use crate::ffi::{input, out};
use crate::memory::{self as mem, VMM_GRANULARITY_BYTES};
use abi::cuda::*;
use std::ffi::c_ulonglong;

cu_export!(cuMemCreate(handle: *mut CUmemGenericAllocationHandle, size: usize, prop: *const CUmemAllocationProp, flags: c_ulonglong) {
    let d = driver()?;
    if handle.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = input(prop)?;
    let device = mem::check_prop(d, &p)?;
    let hnd = mem::vmm_create(d, size as u64, device)?;
    out(handle, hnd)
});

// Shareable handles: simgpu's devices report no handle type as supported
// (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_*_SUPPORTED are 0), so exporting and
// importing answer CUDA_ERROR_NOT_SUPPORTED, as a real driver does for a
// type the device lacks; frameworks that look these entry points up (and
// fall back when they are refused) find them.
cu_export!(cuMemExportToShareableHandle(shareable: *mut std::ffi::c_void, _handle: CUmemGenericAllocationHandle, _kind: std::ffi::c_uint, flags: c_ulonglong) {
    driver()?;
    if shareable.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

cu_export!(cuMemImportFromShareableHandle(handle: *mut CUmemGenericAllocationHandle, os_handle: *mut std::ffi::c_void, _kind: std::ffi::c_uint) {
    driver()?;
    if handle.is_null() || os_handle.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

cu_export!(cuMemGetAllocationPropertiesFromHandle(prop: *mut CUmemAllocationProp, handle: CUmemGenericAllocationHandle) {
    let d = driver()?;
    if prop.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let location = match mem::vmm_device(d, handle)? {
        Some(physical) => CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: d.ordinal_of(physical) },
        None => CUmemLocation { type_: CU_MEM_LOCATION_TYPE_HOST, id: 0 },
    };
    let props = CUmemAllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: 0,
        location,
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: CUmemAllocationProp_allocFlags { compressionType: 0, gpuDirectRDMACapable: 0, usage: 0, reserved: [0; 4] },
    };
    out(prop, props)
});

cu_export!(cuMemRelease(handle: CUmemGenericAllocationHandle) {
    mem::vmm_release(driver()?, handle)
});

cu_export!(cuMemRetainAllocationHandle(handle: *mut CUmemGenericAllocationHandle, addr: *mut std::ffi::c_void) {
    let d = driver()?;
    if handle.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let hnd = mem::vmm_retain(d, addr as u64)?;
    out(handle, hnd)
});

cu_export!(cuMemAddressReserve(ptr: *mut CUdeviceptr, size: usize, alignment: usize, addr: CUdeviceptr, flags: c_ulonglong) {
    let d = driver()?;
    let _ = addr; // a hint only
    if ptr.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::vmm_reserve(d, size as u64, alignment as u64)?;
    out(ptr, p)
});

cu_export!(cuMemAddressFree(ptr: CUdeviceptr, size: usize) {
    mem::vmm_free_reservation(driver()?, ptr, size as u64)
});

cu_export!(cuMemMap(ptr: CUdeviceptr, size: usize, offset: usize, handle: CUmemGenericAllocationHandle, flags: c_ulonglong) {
    let d = driver()?;
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    mem::vmm_map(d, ptr, size as u64, offset as u64, handle)
});

cu_export!(cuMemUnmap(ptr: CUdeviceptr, size: usize) {
    mem::vmm_unmap(driver()?, ptr, size as u64)
});

cu_export!(cuMemSetAccess(ptr: CUdeviceptr, size: usize, desc: *const CUmemAccessDesc, count: usize) {
    let d = driver()?;
    if desc.is_null() || count == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    for i in 0..count {
        let a = input(desc.add(i))?;
        if a.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE {
            d.check_device(a.location.id).map_err(|_| CUDA_ERROR_INVALID_DEVICE)?;
        }
        if a.flags > 3 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    // Mappings are readable and writable from the moment they are made.
    mem::vmm_check_mapped(d, ptr, size as u64)
});

cu_export!(cuMemGetAllocationGranularity(granularity: *mut usize, prop: *const CUmemAllocationProp, option: std::ffi::c_uint) {
    let d = driver()?;
    if granularity.is_null() || option > 1 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = input(prop)?;
    mem::check_prop(d, &p)?;
    out(granularity, VMM_GRANULARITY_BYTES as usize)
});

// Multicast objects: simgpu's devices report no multicast support
// (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 0), so creating one answers
// CUDA_ERROR_NOT_SUPPORTED, as on a real device without NVLink multicast.
cu_export!(cuMulticastCreate(handle: *mut CUmemGenericAllocationHandle, prop: *const std::ffi::c_void) {
    driver()?;
    if handle.is_null() || prop.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

cu_export!(cuMulticastGetGranularity(granularity: *mut usize, prop: *const std::ffi::c_void, _option: std::ffi::c_uint) {
    driver()?;
    if granularity.is_null() || prop.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Err(CUDA_ERROR_NOT_SUPPORTED)
});
