//! CUDA arrays: charged at width × height × depth × element size, no backing
//! memory (simulated kernels never read them).

use super::{h, ptr};
use crate::driver::driver;
use crate::ffi::cu_export;
use crate::ffi::{input, out};
use crate::memory::{self as mem, array_bytes};
use abi::cuda::*;
use std::ffi::c_uint;

cu_export!(cuArrayCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) {
    let d = driver()?;
    if handle.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let a = input(desc)?;
    let bytes = array_bytes(a.Width, a.Height, 0, a.Format, a.NumChannels)?;
    let hnd = mem::create_array(d, bytes, false)?;
    out(handle, ptr(hnd))
});

cu_export!(cuArray3DCreate_v2(handle: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR) {
    let d = driver()?;
    if handle.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let a = input(desc)?;
    if a.Height == 0 && a.Depth != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let bytes = array_bytes(a.Width, a.Height, a.Depth, a.Format, a.NumChannels)?;
    let hnd = mem::create_array(d, bytes, false)?;
    out(handle, ptr(hnd))
});

cu_export!(cuArrayDestroy(handle: CUarray) {
    mem::destroy_array(driver()?, h(handle), false)
});

cu_export!(cuMipmappedArrayCreate(handle: *mut CUmipmappedArray, desc: *const CUDA_ARRAY3D_DESCRIPTOR, levels: c_uint) {
    let d = driver()?;
    if handle.is_null() || levels == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let a = input(desc)?;
    let (mut w, mut hh, mut dd) = (a.Width, a.Height, a.Depth);
    let mut total = 0u64;
    for _ in 0..levels {
        total = total.checked_add(array_bytes(w, hh, dd, a.Format, a.NumChannels)?).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if w == 1 && hh <= 1 && dd <= 1 {
            break;
        }
        w = (w / 2).max(1);
        hh = if hh == 0 { 0 } else { (hh / 2).max(1) };
        dd = if dd == 0 { 0 } else { (dd / 2).max(1) };
    }
    let hnd = mem::create_array(d, total, true)?;
    out(handle, ptr(hnd))
});

cu_export!(cuMipmappedArrayDestroy(handle: CUmipmappedArray) {
    mem::destroy_array(driver()?, h(handle), true)
});

// The CUDA 2.x array entry points take `unsigned int` dimensions; their
// descriptors have another layout. Not representable here.
cu_export!(cuArrayCreate(handle: *mut CUarray, desc: *const std::ffi::c_void) {
    let _ = (handle, desc);
    driver()?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

cu_export!(cuArray3DCreate(handle: *mut CUarray, desc: *const std::ffi::c_void) {
    let _ = (handle, desc);
    driver()?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});
