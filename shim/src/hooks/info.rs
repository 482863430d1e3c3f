//! Virtualised views of device memory: the cap appears as the whole GPU.

use super::{dispatch, real_or_return};
use abi::cuda::*;

/// Total is the cap, free is what the tenant may still reserve (never more
/// than is physically free). Without a cap the driver's figures pass through.
#[no_mangle]
#[doc(alias = "cuMemGetInfo")]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    let real = real_or_return!(cuMemGetInfo_v2);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(free, total) };
    dispatch(forward, |rt| {
        let r = forward();
        if r == CUDA_SUCCESS && !free.is_null() && !total.is_null() {
            // SAFETY: the driver just wrote both through these pointers.
            let (f, t) = unsafe { (*free as u64, *total as u64) };
            let (f, t) = rt.mem_info_view(f, t);
            // SAFETY: as above; both are valid for writes.
            unsafe {
                *free = f as usize;
                *total = t as usize;
            }
        }
        r
    })
}

/// The cap of `dev`, when it has one.
#[no_mangle]
#[doc(alias = "cuDeviceTotalMem")]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    let real = real_or_return!(cuDeviceTotalMem_v2);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(bytes, dev) };
    dispatch(forward, |rt| {
        let r = forward();
        if r == CUDA_SUCCESS && !bytes.is_null() {
            // SAFETY: the driver just wrote through this pointer.
            unsafe { *bytes = rt.total_mem_view(dev, *bytes as u64) as usize };
        }
        r
    })
}
