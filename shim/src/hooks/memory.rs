//! Device allocations and their frees. Each hook forwards with the caller's
//! arguments; the accounting core decides around the call.

use super::{dispatch, real_or_return};
use crate::accounting::{array_bytes, mipmapped_bytes, Kind};
use crate::real::ok_then;
use abi::cuda::*;
use core::ffi::{c_uint, c_void};

/// A `cuMemAlloc`-style hook: `$real(dptr, bytesize, rest…)` writes a pointer.
macro_rules! alloc_hook {
    ($(#[$meta:meta])* $name:ident($($arg:ident: $ty:ty),*)) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(dptr: *mut CUdeviceptr, bytesize: usize $(, $arg: $ty)*) -> CUresult {
            let real = real_or_return!($name);
            // SAFETY: forwarding the caller's arguments unchanged.
            let forward = move || unsafe { real(dptr, bytesize $(, $arg)*) };
            dispatch(forward, |rt| {
                rt.alloc(Kind::Pointer, bytesize as u64, || {
                    // SAFETY: on success the driver wrote the pointer to `dptr`.
                    ok_then(forward(), || unsafe { *dptr })
                })
            })
        }
    };
}

/// A free-style hook: `$real(key, rest…)`.
macro_rules! free_hook {
    ($(#[$meta:meta])* $name:ident($key:ident: $key_ty:ty $(, $arg:ident: $ty:ty)*) => $kind:expr) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($key: $key_ty $(, $arg: $ty)*) -> CUresult {
            let real = real_or_return!($name);
            // SAFETY: forwarding the caller's arguments unchanged.
            let forward = move || unsafe { real($key $(, $arg)*) };
            dispatch(forward, |rt| rt.free($kind, $key as u64, forward))
        }
    };
}

alloc_hook!(
    #[doc(alias = "cuMemAlloc")]
    cuMemAlloc_v2()
);
alloc_hook!(cuMemAllocManaged(flags: c_uint));

/// A stream-ordered allocation hook: charged to the stream's context, on
/// the pool's device when it names a pool.
macro_rules! async_alloc_hook {
    ($name:ident($($arg:ident: $ty:ty),*), pool = $pool:expr, per_thread = $per_thread:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dptr: *mut CUdeviceptr, bytesize: usize $(, $arg: $ty)*, stream: CUstream) -> CUresult {
            let real = real_or_return!($name);
            // SAFETY: forwarding the caller's arguments unchanged.
            let forward = move || unsafe { real(dptr, bytesize $(, $arg)*, stream) };
            dispatch(forward, |rt| {
                rt.alloc_async(bytesize as u64, stream, $per_thread, $pool, || {
                    // SAFETY: on success the driver wrote the pointer to `dptr`.
                    ok_then(forward(), || unsafe { *dptr })
                })
            })
        }
    };
}

/// A stream-ordered free hook: released when the stream reaches it.
macro_rules! async_free_hook {
    ($name:ident, per_thread = $per_thread:expr) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(dptr: CUdeviceptr, stream: CUstream) -> CUresult {
            let real = real_or_return!($name);
            // SAFETY: forwarding the caller's arguments unchanged.
            let forward = move || unsafe { real(dptr, stream) };
            dispatch(forward, |rt| rt.free_async(dptr, stream, $per_thread, forward))
        }
    };
}

async_alloc_hook!(cuMemAllocAsync(), pool = None, per_thread = false);
async_alloc_hook!(cuMemAllocAsync_ptsz(), pool = None, per_thread = true);
async_alloc_hook!(cuMemAllocFromPoolAsync(pool: CUmemoryPool), pool = Some(pool), per_thread = false);
async_alloc_hook!(cuMemAllocFromPoolAsync_ptsz(pool: CUmemoryPool), pool = Some(pool), per_thread = true);
async_free_hook!(cuMemFreeAsync, per_thread = false);
async_free_hook!(cuMemFreeAsync_ptsz, per_thread = true);

free_hook!(#[doc(alias = "cuMemFree")] cuMemFree_v2(dptr: CUdeviceptr) => Kind::Pointer);

/// The pool's memory goes with it, except what its live allocations hold:
/// that stays charged until each is freed.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult {
    let real = real_or_return!(cuMemPoolDestroy);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(pool) };
    dispatch(forward, |rt| rt.destroy_pool(pool, forward))
}
free_hook!(cuArrayDestroy(array: CUarray) => Kind::Array);
free_hook!(cuMipmappedArrayDestroy(array: CUmipmappedArray) => Kind::Array);

/// Charged the driver's pitch × height.
#[no_mangle]
#[doc(alias = "cuMemAllocPitch")]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width_bytes: usize,
    height: usize,
    element_size_bytes: c_uint,
) -> CUresult {
    let real = real_or_return!(cuMemAllocPitch_v2);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(dptr, pitch, width_bytes, height, element_size_bytes) };
    dispatch(forward, |rt| {
        rt.alloc_pitch(width_bytes as u64, height as u64, || {
            // SAFETY: on success the driver wrote the pointer and the pitch.
            ok_then(forward(), || unsafe { (*dptr, *pitch as u64) })
        })
    })
}

/// Charged to the device the handle's location names; host-located handles
/// pass through (see `placement`).
#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CUresult {
    let real = real_or_return!(cuMemCreate);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(handle, size, prop, flags) };
    // SAFETY: the caller passes a valid property struct or null.
    let Some(location) = (unsafe { prop.as_ref() }).map(|p| p.location) else {
        // No properties, no location: nothing could be charged, and this is
        // the driver's own answer to a null `prop`.
        return CUDA_ERROR_INVALID_VALUE;
    };
    dispatch(forward, |rt| {
        rt.alloc_on_device(location, size as u64, || {
            // SAFETY: on success the driver wrote the handle.
            ok_then(forward(), || unsafe { *handle })
        })
    })
}

/// The shape of the array hooks: charges what the caller's descriptor
/// asks for (`bytes`) around `forward`, the real call, which writes the
/// new handle to `array` on success. A null descriptor is the driver's to
/// refuse.
///
/// # Safety
/// `array` and `desc` are the caller's arguments, which `forward` passes on
/// unchanged: `desc` is null or valid, and `array` valid for the driver to
/// write.
unsafe fn create_array<D: Copy, H>(
    array: *mut *mut H,
    desc: *const D,
    bytes: impl FnOnce(&D) -> u64,
    forward: impl Fn() -> CUresult + Copy,
) -> CUresult {
    // SAFETY: the caller passes a valid descriptor or null.
    let Some(d) = (unsafe { desc.as_ref() }).copied() else { return forward() };
    let bytes = bytes(&d);
    dispatch(forward, |rt| {
        // SAFETY: on success the driver wrote the handle.
        rt.alloc(Kind::Array, bytes, || ok_then(forward(), || unsafe { *array } as u64))
    })
}

#[no_mangle]
#[doc(alias = "cuArrayCreate")]
pub unsafe extern "C" fn cuArrayCreate_v2(array: *mut CUarray, desc: *const CUDA_ARRAY_DESCRIPTOR) -> CUresult {
    let real = real_or_return!(cuArrayCreate_v2);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(array, desc) };
    let bytes = |d: &CUDA_ARRAY_DESCRIPTOR| array_bytes(d.Width as u64, d.Height as u64, 0, d.Format, d.NumChannels);
    // SAFETY: the caller's arguments, forwarded unchanged.
    unsafe { create_array(array, desc, bytes, forward) }
}

#[no_mangle]
#[doc(alias = "cuArray3DCreate")]
pub unsafe extern "C" fn cuArray3DCreate_v2(array: *mut CUarray, desc: *const CUDA_ARRAY3D_DESCRIPTOR) -> CUresult {
    let real = real_or_return!(cuArray3DCreate_v2);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(array, desc) };
    let bytes = |d: &CUDA_ARRAY3D_DESCRIPTOR| array_bytes(d.Width as u64, d.Height as u64, d.Depth as u64, d.Format, d.NumChannels);
    // SAFETY: the caller's arguments, forwarded unchanged.
    unsafe { create_array(array, desc, bytes, forward) }
}

/// Charged the sum of its levels.
#[no_mangle]
pub unsafe extern "C" fn cuMipmappedArrayCreate(
    array: *mut CUmipmappedArray,
    desc: *const CUDA_ARRAY3D_DESCRIPTOR,
    levels: c_uint,
) -> CUresult {
    let real = real_or_return!(cuMipmappedArrayCreate);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(array, desc, levels) };
    let bytes =
        |d: &CUDA_ARRAY3D_DESCRIPTOR| mipmapped_bytes(d.Width as u64, d.Height as u64, d.Depth as u64, d.Format, d.NumChannels, levels);
    // SAFETY: the caller's arguments, forwarded unchanged.
    unsafe { create_array(array, desc, bytes, forward) }
}

/// The charge stays while the handle is mapped: the driver frees it at the
/// last of release and unmap.
#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: CUmemGenericAllocationHandle) -> CUresult {
    let real = real_or_return!(cuMemRelease);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(handle) };
    dispatch(forward, |rt| rt.release_vmm(handle, forward))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(handle: *mut CUmemGenericAllocationHandle, addr: *mut c_void) -> CUresult {
    let real = real_or_return!(cuMemRetainAllocationHandle);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(handle, addr) };
    dispatch(forward, |rt| {
        // SAFETY: on success the driver wrote the handle.
        rt.retain_vmm(|| ok_then(forward(), || unsafe { *handle }))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: CUmemGenericAllocationHandle,
    flags: u64,
) -> CUresult {
    let real = real_or_return!(cuMemMap);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(ptr, size, offset, handle, flags) };
    dispatch(forward, |rt| rt.map_vmm(ptr, size as u64, handle, forward))
}

#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    let real = real_or_return!(cuMemUnmap);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(ptr, size) };
    dispatch(forward, |rt| rt.unmap_vmm(ptr, size as u64, forward))
}
