//! Copies and fills beyond one dimension or one range, and managed-memory
//! calls on lists of ranges, built on the one- and two-dimensional forms
//! in [`super::memory`], so that they check and order exactly as those do:
//! - a 3D copy is one 2D copy per slice (arrays hold no bytes here, so an
//!   array side is `CUDA_ERROR_NOT_SUPPORTED`, as in 2D);
//! - a 3D peer copy names each side's context, which must exist; under
//!   unified addressing the copy itself is a 3D copy;
//! - a 2D fill is one fill per row; a 16-bit fill writes its pattern from
//!   a host buffer (staged, as a copy from pageable memory is), in chunks;
//! - a batch of copies is each copy in order on the stream;
//! - managed memory lives in one place here, so prefetching, discarding
//!   and attaching move nothing: they check their arguments as the driver
//!   does and succeed, and range attributes answer as for memory that was
//!   never advised or prefetched.

use super::memory::{
    cuMemcpy2DAsync_v2, cuMemcpy2D_v2, cuMemcpyAsync, cuMemcpyHtoDAsync_v2, cuMemcpyHtoD_v2, cuMemsetD32Async, cuMemsetD32_v2,
    cuMemsetD8Async, cuMemsetD8_v2, CudaMemcpy2d,
};
use crate::driver::{driver, CuResult, Driver};
use crate::ffi::cu_export;
use crate::ffi::input;
use crate::memory::{self as mem, check_device_range};
use abi::cuda::*;
use std::ffi::{c_int, c_uint, c_void};

/// `CUDA_MEMCPY3D` (the `_v2` layout); in `CUDA_MEMCPY3D_PEER` the two
/// reserved words are the source and destination contexts.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CudaMemcpy3d {
    pub src_x_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub src_context: CUcontext,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub dst_context: CUcontext,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

const _: () = assert!(std::mem::size_of::<CudaMemcpy3d>() == 200);
const _: () = assert!(std::mem::offset_of!(CudaMemcpy3d, dst_x_bytes) == 88);
const _: () = assert!(std::mem::offset_of!(CudaMemcpy3d, depth) == 192);

/// Slice `z` of a 3D copy as a 2D copy: the slice's first row is row
/// `y + (z0 + z) * height` of the side's pitched rows.
fn slice(p: &CudaMemcpy3d, z: usize) -> CuResult<CudaMemcpy2d> {
    let row = |y: usize, z0: usize, height: usize| {
        z0.checked_add(z).and_then(|zz| zz.checked_mul(height)).and_then(|r| r.checked_add(y)).ok_or(CUDA_ERROR_INVALID_VALUE)
    };
    Ok(CudaMemcpy2d {
        src_x_bytes: p.src_x_bytes,
        src_y: row(p.src_y, p.src_z, p.src_height)?,
        src_memory_type: p.src_memory_type,
        src_host: p.src_host,
        src_device: p.src_device,
        src_array: p.src_array,
        src_pitch: p.src_pitch,
        dst_x_bytes: p.dst_x_bytes,
        dst_y: row(p.dst_y, p.dst_z, p.dst_height)?,
        dst_memory_type: p.dst_memory_type,
        dst_host: p.dst_host,
        dst_device: p.dst_device,
        dst_array: p.dst_array,
        dst_pitch: p.dst_pitch,
        width_bytes: p.width_bytes,
        height: p.height,
    })
}

/// A 3D copy: checks the shape, then one 2D copy per slice, synchronous or
/// on `stream`.
fn copy_3d(p: &CudaMemcpy3d, stream: Option<CUstream>) -> CuResult<()> {
    driver()?;
    // A slice's rows must fit the declared height of each pitched side.
    let fits = |y: usize, height: usize, memory_type: c_uint| memory_type == 3 || p.depth <= 1 || y.saturating_add(p.height) <= height;
    if !fits(p.src_y, p.src_height, p.src_memory_type) || !fits(p.dst_y, p.dst_height, p.dst_memory_type) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if p.src_lod != 0 || p.dst_lod != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if p.depth == 0 {
        // Nothing to copy; the 2D form still checks both sides.
        let s = slice(&CudaMemcpy3d { height: 0, ..*p }, 0)?;
        return result(unsafe_copy_2d(&s, stream));
    }
    for z in 0..p.depth {
        let s = slice(p, z)?;
        result(unsafe_copy_2d(&s, stream))?;
    }
    Ok(())
}

fn unsafe_copy_2d(s: &CudaMemcpy2d, stream: Option<CUstream>) -> CUresult {
    // SAFETY: `s` is a valid CUDA_MEMCPY2D for the duration of the call;
    // its host pointers are the caller's, under cuda.h's contract.
    unsafe {
        match stream {
            None => cuMemcpy2D_v2(s),
            Some(st) => cuMemcpy2DAsync_v2(s, st),
        }
    }
}

fn result(r: CUresult) -> CuResult<()> {
    if r == CUDA_SUCCESS {
        Ok(())
    } else {
        Err(r)
    }
}

/// A peer copy's contexts: both must exist.
fn check_contexts(d: &Driver, p: &CudaMemcpy3d) -> CuResult<()> {
    for ctx in [p.src_context, p.dst_context] {
        if ctx.is_null() {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        d.context(ctx as u64)?;
    }
    Ok(())
}

cu_export!(cuMemcpy3D_v2(params: *const CudaMemcpy3d) {
    copy_3d(&input(params)?, None)
}; cuMemcpy3D_v2_ptds);

cu_export!(cuMemcpy3DAsync_v2(params: *const CudaMemcpy3d, stream: CUstream) {
    copy_3d(&input(params)?, Some(stream))
}; cuMemcpy3DAsync_v2_ptsz);

cu_export!(cuMemcpy3DPeer(params: *const CudaMemcpy3d) {
    let p = input(params)?;
    check_contexts(driver()?, &p)?;
    copy_3d(&p, None)
}; cuMemcpy3DPeer_ptds);

cu_export!(cuMemcpy3DPeerAsync(params: *const CudaMemcpy3d, stream: CUstream) {
    let p = input(params)?;
    check_contexts(driver()?, &p)?;
    copy_3d(&p, Some(stream))
}; cuMemcpy3DPeerAsync_ptsz);

// The CUDA 2.x forms take `unsigned int` fields in another layout; every
// header since CUDA 3.2 maps the names to the `_v2` forms.
cu_export!(cuMemcpy3D(params: *const c_void) {
    let _ = params;
    driver()?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

cu_export!(cuMemcpy3DAsync(params: *const c_void, stream: CUstream) {
    let _ = (params, stream);
    driver()?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

// ---- 2D fills -------------------------------------------------------------

fn fill_2d(dst: CUdeviceptr, pitch: usize, value: u8, width: usize, height: usize, stream: Option<CUstream>) -> CuResult<()> {
    driver()?;
    if height > 1 && pitch < width {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    for row in 0..height {
        let at =
            dst.checked_add((row as u64).checked_mul(pitch as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        // SAFETY: plain values; the 1D fill checks the range.
        let r = unsafe {
            match stream {
                None => cuMemsetD8_v2(at, value, width),
                Some(s) => cuMemsetD8Async(at, value, width, s),
            }
        };
        result(r)?;
    }
    Ok(())
}

cu_export!(cuMemsetD2D8_v2(dst: CUdeviceptr, pitch: usize, value: u8, width: usize, height: usize) {
    fill_2d(dst, pitch, value, width, height, None)
}; cuMemsetD2D8_v2_ptds);

cu_export!(cuMemsetD2D8Async(dst: CUdeviceptr, pitch: usize, value: u8, width: usize, height: usize, stream: CUstream) {
    fill_2d(dst, pitch, value, width, height, Some(stream))
}; cuMemsetD2D8Async_ptsz);

cu_export!(cuMemsetD2D8(dst: c_uint, pitch: c_uint, value: u8, width: c_uint, height: c_uint) {
    let _ = (dst, pitch, value, width, height);
    driver()?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

/// Elements of a 16-bit fill written per copy: 1 MiB of pattern.
const FILL16_CHUNK_ELEMENTS: usize = 1 << 19;

/// `n` 16-bit elements of `value` at `dst`, as a copy of the pattern from
/// host memory: synchronous, or in order on `stream`.
fn fill_16(dst: CUdeviceptr, value: u16, n: usize, stream: Option<CUstream>) -> CuResult<()> {
    driver()?;
    if !dst.is_multiple_of(2) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let pattern: Vec<u16> = vec![value; n.min(FILL16_CHUNK_ELEMENTS)];
    let mut done = 0usize;
    while done < n {
        let count = (n - done).min(FILL16_CHUNK_ELEMENTS);
        let at = dst + 2 * done as u64;
        // SAFETY: `pattern` holds at least `count` elements for the call
        // (an asynchronous copy from pageable memory stages it at the call).
        let r = unsafe {
            match stream {
                None => cuMemcpyHtoD_v2(at, pattern.as_ptr().cast(), 2 * count),
                Some(s) => cuMemcpyHtoDAsync_v2(at, pattern.as_ptr().cast(), 2 * count, s),
            }
        };
        result(r)?;
        done += count;
    }
    Ok(())
}

cu_export!(cuMemsetD16_v2(dst: CUdeviceptr, value: u16, n: usize) {
    fill_16(dst, value, n, None)
}; cuMemsetD16_v2_ptds);

cu_export!(cuMemsetD16Async(dst: CUdeviceptr, value: u16, n: usize, stream: CUstream) {
    fill_16(dst, value, n, Some(stream))
}; cuMemsetD16Async_ptsz);

/// A 2D fill of 16- or 32-bit elements: one 1D fill per row.
fn fill_2d_wide(
    dst: CUdeviceptr,
    pitch: usize,
    value: u32,
    element_bytes: usize,
    width: usize,
    height: usize,
    stream: Option<CUstream>,
) -> CuResult<()> {
    driver()?;
    if height > 1 && pitch < width.saturating_mul(element_bytes) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    for row in 0..height {
        let at =
            dst.checked_add((row as u64).checked_mul(pitch as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?).ok_or(CUDA_ERROR_INVALID_VALUE)?;
        if element_bytes == 2 {
            fill_16(at, value as u16, width, stream)?;
        } else {
            // SAFETY: plain values; the 1D fill checks the range.
            result(unsafe {
                match stream {
                    None => cuMemsetD32_v2(at, value, width),
                    Some(s) => cuMemsetD32Async(at, value, width, s),
                }
            })?;
        }
    }
    Ok(())
}

cu_export!(cuMemsetD2D16_v2(dst: CUdeviceptr, pitch: usize, value: u16, width: usize, height: usize) {
    fill_2d_wide(dst, pitch, value.into(), 2, width, height, None)
}; cuMemsetD2D16_v2_ptds);

cu_export!(cuMemsetD2D16Async(dst: CUdeviceptr, pitch: usize, value: u16, width: usize, height: usize, stream: CUstream) {
    fill_2d_wide(dst, pitch, value.into(), 2, width, height, Some(stream))
}; cuMemsetD2D16Async_ptsz);

cu_export!(cuMemsetD2D32_v2(dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize) {
    fill_2d_wide(dst, pitch, value, 4, width, height, None)
}; cuMemsetD2D32_v2_ptds);

cu_export!(cuMemsetD2D32Async(dst: CUdeviceptr, pitch: usize, value: c_uint, width: usize, height: usize, stream: CUstream) {
    fill_2d_wide(dst, pitch, value, 4, width, height, Some(stream))
}; cuMemsetD2D32Async_ptsz);

// The 32-bit-pointer forms (see `cuMemsetD2D8`).
cu_export!(cuMemsetD16(dst: c_uint, value: u16, n: c_uint) {
    let _ = (dst, value, n);
    driver()?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

cu_export!(cuMemsetD2D16(dst: c_uint, pitch: c_uint, value: u16, width: c_uint, height: c_uint) {
    let _ = (dst, pitch, value, width, height);
    driver()?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

cu_export!(cuMemsetD2D32(dst: c_uint, pitch: c_uint, value: c_uint, width: c_uint, height: c_uint) {
    let _ = (dst, pitch, value, width, height);
    driver()?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

// ---- batches of copies ------------------------------------------------------

/// `CUmemcpyAttributes`: source access order, source and destination
/// location hints, flags.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemcpyAttributes {
    pub src_access_order: c_uint,
    pub src_loc_hint: super::memory::MemLocation,
    pub dst_loc_hint: super::memory::MemLocation,
    pub flags: c_uint,
}

const _: () = assert!(std::mem::size_of::<MemcpyAttributes>() == 24);

/// `CU_MEMCPY_SRC_ACCESS_ORDER_STREAM` .. `_ANY`; 0 is INVALID.
const SRC_ACCESS_ORDER_MAX: c_uint = 3;
/// `CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`.
const MEMCPY_FLAGS: c_uint = 0x1;

/// Copies `count` ranges in order on `stream`. Each attribute applies from
/// its index to the next one's; the first index must be 0. On failure,
/// `fail_index` names the copy that failed (`usize::MAX`: none did, the
/// arguments were wrong).
#[allow(clippy::too_many_arguments)]
unsafe fn batch(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    attr_idxs: *const usize,
    num_attrs: usize,
    fail_index: *mut usize,
    stream: CUstream,
) -> CuResult<()> {
    let d = driver()?;
    // SAFETY: null or writable (cuda.h's contract).
    unsafe { crate::ffi::out_opt(fail_index, usize::MAX) };
    if count == 0
        || dsts.is_null()
        || srcs.is_null()
        || sizes.is_null()
        || num_attrs == 0
        || num_attrs > count
        || attrs.is_null()
        || attr_idxs.is_null()
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // The legacy stream is not allowed: a batch is asynchronous by design.
    if stream as u64 == 1 || stream.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.stream(stream as u64)?;
    let mut previous = None;
    for i in 0..num_attrs {
        // SAFETY: both arrays hold num_attrs entries (cuda.h's contract).
        let (a, at) = unsafe { (attrs.add(i).read_unaligned(), attr_idxs.add(i).read_unaligned()) };
        let ordered = previous.is_none_or(|p| at > p);
        if (i == 0 && at != 0)
            || !ordered
            || at >= count
            || a.src_access_order == 0
            || a.src_access_order > SRC_ACCESS_ORDER_MAX
            || a.flags & !MEMCPY_FLAGS != 0
        {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        previous = Some(at);
    }
    for i in 0..count {
        // SAFETY: the three arrays hold `count` entries (cuda.h's contract).
        let (dst, src, n) = unsafe { (dsts.add(i).read_unaligned(), srcs.add(i).read_unaligned(), sizes.add(i).read_unaligned()) };
        // SAFETY: plain values; the 1D copy checks both ranges.
        if let Err(e) = result(unsafe { cuMemcpyAsync(dst, src, n, stream) }) {
            // SAFETY: null or writable (cuda.h's contract).
            unsafe { crate::ffi::out_opt(fail_index, i) };
            return Err(e);
        }
    }
    Ok(())
}

cu_export!(cuMemcpyBatchAsync(dsts: *const CUdeviceptr, srcs: *const CUdeviceptr, sizes: *const usize, count: usize, attrs: *const MemcpyAttributes, attr_idxs: *const usize, num_attrs: usize, fail_index: *mut usize, stream: CUstream) {
    batch(dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs, fail_index, stream)
}; cuMemcpyBatchAsync_ptsz);

cu_export!(cuMemcpyBatchAsync_v2(dsts: *const CUdeviceptr, srcs: *const CUdeviceptr, sizes: *const usize, count: usize, attrs: *const MemcpyAttributes, attr_idxs: *const usize, num_attrs: usize, stream: CUstream) {
    batch(dsts, srcs, sizes, count, attrs, attr_idxs, num_attrs, std::ptr::null_mut(), stream)
}; cuMemcpyBatchAsync_v2_ptsz);

// One copy with attributes: the attributes are checked as a batch's are
// (they are hints), and the copy is ordered on the stream.
cu_export!(cuMemcpyWithAttributesAsync(dst: CUdeviceptr, src: CUdeviceptr, size: usize, attr: *const MemcpyAttributes, stream: CUstream) {
    driver()?;
    let a = input(attr)?;
    if a.src_access_order == 0 || a.src_access_order > SRC_ACCESS_ORDER_MAX || a.flags & !MEMCPY_FLAGS != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    result(cuMemcpyAsync(dst, src, size, stream))
}; cuMemcpyWithAttributesAsync_ptsz);

cu_export!(cuMemcpy3DWithAttributesAsync(op: *const c_void, flags: u64, stream: CUstream) {
    let d = driver()?;
    if op.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.stream(stream as u64)?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
}; cuMemcpy3DWithAttributesAsync_ptsz);

// Batches of 3D operations name arrays or pitched memory through operands
// simgpu does not model (arrays hold no bytes here): each is refused.
cu_export!(cuMemcpy3DBatchAsync(num_ops: usize, ops: *const c_void, fail_index: *mut usize, flags: u64, stream: CUstream) {
    let d = driver()?;
    crate::ffi::out_opt(fail_index, usize::MAX);
    if num_ops == 0 || ops.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.stream(stream as u64)?;
    crate::ffi::out_opt(fail_index, 0);
    Err(CUDA_ERROR_NOT_SUPPORTED)
}; cuMemcpy3DBatchAsync_ptsz);

cu_export!(cuMemcpy3DBatchAsync_v2(num_ops: usize, ops: *const c_void, flags: u64, stream: CUstream) {
    let d = driver()?;
    if num_ops == 0 || ops.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.stream(stream as u64)?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
}; cuMemcpy3DBatchAsync_v2_ptsz);

// ---- managed memory ---------------------------------------------------------

/// Managed memory covering `[ptr, ptr + n)`.
fn check_managed(d: &Driver, ptr: CUdeviceptr, n: usize) -> CuResult<mem::DeviceMemoryInfo> {
    if n == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_device_range(d, ptr, n as u64)?;
    match mem::device_memory_info(d, ptr) {
        Some(m) if m.managed => Ok(m),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn check_location(d: &Driver, l: super::memory::MemLocation) -> CuResult<()> {
    match l.type_ {
        CU_MEM_LOCATION_TYPE_DEVICE => d.check_device(l.id).map(drop),
        CU_MEM_LOCATION_TYPE_HOST | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => Ok(()),
        CU_MEM_LOCATION_TYPE_HOST_NUMA if l.id == 0 => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// Checks a list of managed ranges and, when given, prefetch locations
/// (each applying from its index on, the first at 0).
#[allow(clippy::too_many_arguments)]
unsafe fn managed_batch(
    dptrs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    locations: Option<(*const super::memory::MemLocation, *const usize, usize)>,
    flags: u64,
    stream: CUstream,
) -> CuResult<()> {
    let d = driver()?;
    if count == 0 || dptrs.is_null() || sizes.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.stream(stream as u64)?;
    for i in 0..count {
        // SAFETY: both arrays hold `count` entries (cuda.h's contract).
        let (p, n) = unsafe { (dptrs.add(i).read_unaligned(), sizes.add(i).read_unaligned()) };
        check_managed(d, p, n)?;
    }
    if let Some((locs, idxs, n)) = locations {
        if n == 0 || n > count || locs.is_null() || idxs.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for i in 0..n {
            // SAFETY: both arrays hold `n` entries (cuda.h's contract).
            let (l, at) = unsafe { (locs.add(i).read_unaligned(), idxs.add(i).read_unaligned()) };
            if (i == 0 && at != 0) || at >= count {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            check_location(d, l)?;
        }
    }
    Ok(())
}

cu_export!(cuMemPrefetchBatchAsync(dptrs: *const CUdeviceptr, sizes: *const usize, count: usize, locs: *const super::memory::MemLocation, loc_idxs: *const usize, num_locs: usize, flags: u64, stream: CUstream) {
    managed_batch(dptrs, sizes, count, Some((locs, loc_idxs, num_locs)), flags, stream)
}; cuMemPrefetchBatchAsync_ptsz);

cu_export!(cuMemDiscardBatchAsync(dptrs: *const CUdeviceptr, sizes: *const usize, count: usize, flags: u64, stream: CUstream) {
    managed_batch(dptrs, sizes, count, None, flags, stream)
}; cuMemDiscardBatchAsync_ptsz);

cu_export!(cuMemDiscardAndPrefetchBatchAsync(dptrs: *const CUdeviceptr, sizes: *const usize, count: usize, locs: *const super::memory::MemLocation, loc_idxs: *const usize, num_locs: usize, flags: u64, stream: CUstream) {
    managed_batch(dptrs, sizes, count, Some((locs, loc_idxs, num_locs)), flags, stream)
}; cuMemDiscardAndPrefetchBatchAsync_ptsz);

/// `CU_MEM_ATTACH_GLOBAL`, `_HOST`, `_SINGLE`.
const ATTACH_FLAGS: [c_uint; 3] = [0x1, 0x2, 0x4];

// Every stream here reaches all managed memory (concurrent managed access
// is reported), so attaching changes no access; it checks and succeeds.
cu_export!(cuStreamAttachMemAsync(stream: CUstream, dptr: CUdeviceptr, length: usize, flags: c_uint) {
    let d = driver()?;
    d.stream(stream as u64)?;
    if !ATTACH_FLAGS.contains(&flags) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let m = check_managed(d, dptr, length.max(1))?;
    // The length must be 0 (the whole allocation) or the allocation's size
    // from its start.
    if length != 0 && (dptr != m.base || length as u64 != m.size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
}; cuStreamAttachMemAsync_ptsz);

/// `CUmem_range_attribute`.
const RANGE_READ_MOSTLY: c_uint = 1;
const RANGE_PREFERRED_LOCATION: c_uint = 2;
const RANGE_ACCESSED_BY: c_uint = 3;
const RANGE_LAST_PREFETCH_LOCATION: c_uint = 4;
const RANGE_PREFERRED_LOCATION_TYPE: c_uint = 5;
const RANGE_PREFERRED_LOCATION_ID: c_uint = 6;
const RANGE_LAST_PREFETCH_LOCATION_TYPE: c_uint = 7;
const RANGE_LAST_PREFETCH_LOCATION_ID: c_uint = 8;
/// `CU_DEVICE_INVALID`.
const DEVICE_INVALID: c_int = -2;

/// One range attribute into `data` (`size` bytes): the answers for managed
/// memory with no advice and no prefetch recorded (advice and prefetches
/// move nothing here, and are not remembered).
unsafe fn range_attribute(data: *mut c_void, size: usize, attribute: c_uint) -> CuResult<()> {
    if data.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let words = |value: c_int| -> CuResult<()> {
        if size == 0 || !size.is_multiple_of(4) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        for i in 0..size / 4 {
            // SAFETY: `data` holds `size` bytes (cuda.h's contract).
            unsafe { data.cast::<c_int>().add(i).write_unaligned(value) };
        }
        Ok(())
    };
    match attribute {
        RANGE_ACCESSED_BY => words(DEVICE_INVALID),
        _ if size != 4 => Err(CUDA_ERROR_INVALID_VALUE),
        RANGE_READ_MOSTLY => words(0),
        RANGE_PREFERRED_LOCATION | RANGE_LAST_PREFETCH_LOCATION => words(DEVICE_INVALID),
        RANGE_PREFERRED_LOCATION_TYPE | RANGE_LAST_PREFETCH_LOCATION_TYPE => words(CU_MEM_LOCATION_TYPE_INVALID as c_int),
        RANGE_PREFERRED_LOCATION_ID | RANGE_LAST_PREFETCH_LOCATION_ID => words(0),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

cu_export!(cuMemRangeGetAttribute(data: *mut c_void, size: usize, attribute: c_uint, dptr: CUdeviceptr, count: usize) {
    let d = driver()?;
    check_managed(d, dptr, count)?;
    range_attribute(data, size, attribute)
});

cu_export!(cuMemRangeGetAttributes(data: *mut *mut c_void, sizes: *const usize, attributes: *const c_uint, num: usize, dptr: CUdeviceptr, count: usize) {
    let d = driver()?;
    if num == 0 || data.is_null() || sizes.is_null() || attributes.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_managed(d, dptr, count)?;
    for i in 0..num {
        range_attribute(*data.add(i), *sizes.add(i), *attributes.add(i))?;
    }
    Ok(())
});
