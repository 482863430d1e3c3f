//! Virtual memory management: physical handles, address reservations,
//! mappings, access, granularity.

use crate::ffi::cu_export;
use crate::driver::driver;
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
