//! Allocation, frees, queries, copies and fills.
//!
//! Synchronous copies first wait for the context's queued work (the legacy
//! default stream orders them after it) and copy at the call.
//!
//! Asynchronous copies and fills are queued on their stream and performed by
//! the worker when the stream reaches them, so a copy behind a long kernel
//! completes after it (stream queries, events and synchronisation show it).
//! Host memory is treated as the driver treats it: pinned memory
//! (`cuMemAllocHost`/`cuMemHostAlloc`) is read or written when the copy runs;
//! a pageable source is staged at the call (up to [`STAGE_MAX_BYTES`], beyond
//! that the call waits for its stream and copies); a pageable destination
//! makes the call wait until the copy has run. A stream being captured copies
//! at the call, as before capture existed here.

use crate::driver::{driver, CuResult, Driver};
use crate::exec::{Op, Transfer};
use crate::ffi::cu_export;
use crate::ffi::{out, out_opt};
use crate::memory::{self as mem, check_device_range};
use abi::cuda::*;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering::Acquire;

// Allocating and freeing (device, managed and pinned host memory) are
// potentially unsafe during a stream capture (see `crate::capture`).

cu_export!(cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) {
    let d = driver()?;
    crate::capture::check_unsafe_call()?;
    let ctx = d.current()?;
    if dptr.is_null() || bytesize == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::alloc_device(d, &ctx, bytesize as u64)?;
    out(dptr, p)
});

cu_export!(cuMemAllocManaged(dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint) {
    let d = driver()?;
    crate::capture::check_unsafe_call()?;
    let ctx = d.current()?;
    if dptr.is_null() || bytesize == 0 || !matches!(flags, 1 | 2) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::alloc_managed(d, &ctx, bytesize as u64)?;
    out(dptr, p)
});

cu_export!(cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, ppitch: *mut usize, width: usize, height: usize, element_size: c_uint) {
    let d = driver()?;
    crate::capture::check_unsafe_call()?;
    let ctx = d.current()?;
    if dptr.is_null() || ppitch.is_null() || width == 0 || height == 0 || !matches!(element_size, 4 | 8 | 16) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let pitch = mem::pitch_for(width as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let bytes = pitch.checked_mul(height as u64).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    let p = mem::alloc_device(d, &ctx, bytes)?;
    out(ppitch, pitch as usize)?;
    out(dptr, p)
});

cu_export!(cuMemFree_v2(dptr: CUdeviceptr) {
    let d = driver()?;
    crate::capture::check_unsafe_call()?;
    if dptr == 0 {
        return Ok(());
    }
    mem::free_device(d, dptr)
});

cu_export!(cuMemGetInfo_v2(free: *mut usize, total: *mut usize) {
    let d = driver()?;
    let ctx = d.current()?;
    if free.is_null() || total.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (cap, used) = d.machine.state.memory(ctx.device);
    out(free, (cap - used) as usize)?;
    out(total, cap as usize)
});

cu_export!(cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) {
    let d = driver()?;
    let ctx = d.current()?;
    if free.is_null() || total.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (cap, used) = d.machine.state.memory(ctx.device);
    out(free, (cap - used).min(u32::MAX as u64) as c_uint)?;
    out(total, cap.min(u32::MAX as u64) as c_uint)
});

cu_export!(cuMemGetAddressRange_v2(pbase: *mut CUdeviceptr, psize: *mut usize, dptr: CUdeviceptr) {
    let d = driver()?;
    d.current()?;
    let (base, size) = mem::address_range(d, dptr)?;
    out_opt(pbase, base);
    out_opt(psize, size as usize);
    Ok(())
});

cu_export!(cuMemAllocHost_v2(pp: *mut *mut c_void, bytesize: usize) {
    let d = driver()?;
    crate::capture::check_unsafe_call()?;
    d.current()?;
    if pp.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::alloc_host(d, bytesize)?;
    out(pp, p as *mut c_void)
});

cu_export!(cuMemAllocHost(pp: *mut *mut c_void, bytesize: c_uint) {
    cuMemAllocHost_v2(pp, bytesize as usize).into_result()
});

cu_export!(cuMemHostAlloc(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) {
    let d = driver()?;
    crate::capture::check_unsafe_call()?;
    d.current()?;
    if pp.is_null() || flags & !0x7 != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::alloc_host(d, bytesize)?;
    out(pp, p as *mut c_void)
});

cu_export!(cuMemFreeHost(p: *mut c_void) {
    let d = driver()?;
    crate::capture::check_unsafe_call()?;
    mem::free_host(d, p as u64)
});

cu_export!(cuMemHostGetDevicePointer_v2(pdptr: *mut CUdeviceptr, p: *mut c_void, flags: c_uint) {
    let d = driver()?;
    d.current()?;
    let pinned = d.read().host_allocs.iter().any(|(&b, &s)| (p as u64) >= b && (p as u64) < b + s as u64);
    let registered = super::host_register::registry().find(p as u64).is_some();
    if pdptr.is_null() || flags != 0 || !(pinned || registered) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(pdptr, p as u64)
}; cuMemHostGetDevicePointer);

/// Result helper so a forwarding export can reuse another's code.
trait IntoResult {
    fn into_result(self) -> CuResult<()>;
}
impl IntoResult for CUresult {
    fn into_result(self) -> CuResult<()> {
        if self == CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self)
        }
    }
}

/// What a copy's argument must be.
#[derive(Clone, Copy)]
enum Side {
    /// A device pointer: inside a live allocation, mapping or pinned buffer.
    Device,
    /// A host pointer, or any pointer under unified addressing (`cuMemcpy`).
    Host,
}

/// Whether `[p, p+n)` is memory the worker may touch later (device or pinned).
fn device_visible(d: &Driver, p: u64, n: usize) -> bool {
    check_device_range(d, p, n as u64).is_ok()
}

/// Checks one side of a copy; returns whether it is device-visible memory.
fn check_side(d: &Driver, p: u64, n: usize, side: Side) -> CuResult<bool> {
    match side {
        Side::Device => check_device_range(d, p, n as u64).map(|()| true),
        Side::Host if p == 0 => Err(CUDA_ERROR_INVALID_VALUE),
        Side::Host => Ok(device_visible(d, p, n)),
    }
}

/// Where a copy or fill is ordered: after the whole context (the synchronous
/// forms, on the legacy default stream), or on a stream.
#[derive(Clone, Copy)]
enum Order {
    Sync,
    Stream(CUstream),
}

impl Order {
    /// Resolves the stream (reporting a bad one first) or, for the
    /// synchronous forms, waits for the context's queued work.
    fn begin(self, d: &Driver) -> CuResult<()> {
        match self {
            Order::Sync => {
                // The legacy stream's work: a potentially unsafe call
                // while a capture forbids it.
                crate::capture::check_unsafe_call()?;
                d.current()?.exec.synchronize()
            }
            Order::Stream(s) => drop(d.stream(s as u64)?),
        }
        Ok(())
    }
}

/// Every copy: check the arguments as the driver does, then copy at once
/// (synchronous forms) or in stream order.
fn copy(order: Order, dst: u64, dst_side: Side, src: u64, src_side: Side, n: usize) -> CuResult<()> {
    let d = driver()?;
    order.begin(d)?;
    if n == 0 {
        return Ok(());
    }
    let src_device = check_side(d, src, n, src_side)?;
    let dst_device = check_side(d, dst, n, dst_side)?;
    match order {
        Order::Sync => {
            mem::run_transfer(d, &Transfer::Copy { dst, src, n, dst_host: !dst_device, src_host: !src_device });
            Ok(())
        }
        Order::Stream(stream) => copy_async(d, stream, dst, src, n, dst_device, src_device),
    }
}

/// Every fill: `n` elements of `value`'s width at `dst`.
fn fill(order: Order, dst: u64, value: u32, width: u64, n: usize) -> CuResult<()> {
    let d = driver()?;
    order.begin(d)?;
    if !dst.is_multiple_of(width) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if n == 0 {
        return Ok(());
    }
    check_device_range(d, dst, (n as u64).checked_mul(width).ok_or(CUDA_ERROR_INVALID_VALUE)?)?;
    let transfer = match width {
        1 => Transfer::Fill8 { dst, value: value as u8, n },
        _ => Transfer::Fill32 { dst, value, n },
    };
    match order {
        Order::Sync => {
            mem::run_transfer(d, &transfer);
            Ok(())
        }
        Order::Stream(stream) => enqueue(d, stream, transfer, false),
    }
}

/// Largest pageable source an asynchronous copy stages instead of waiting.
pub const STAGE_MAX_BYTES: usize = 64 << 20;

/// Queues `transfer` on `stream`; with `wait`, returns once it has run.
fn enqueue(d: &Driver, stream: CUstream, transfer: Transfer, wait: bool) -> CuResult<()> {
    let (ctx, s) = d.stream(stream as u64)?;
    if s.capturing_valid()?.is_some() {
        mem::run_transfer(d, &transfer);
        return Ok(());
    }
    ctx.exec.submit(Op::Transfer { stream: s.clone(), transfer });
    if wait {
        let target = s.submitted.load(Acquire);
        ctx.exec.wait_until(|| s.completed.load(Acquire) >= target);
    }
    Ok(())
}

/// A stream-ordered copy whose sides were checked by the caller: `*_device`
/// says whether each side is device or pinned memory.
fn copy_async(d: &Driver, stream: CUstream, dst: u64, src: u64, n: usize, dst_device: bool, src_device: bool) -> CuResult<()> {
    if !src_device && dst_device && n <= STAGE_MAX_BYTES {
        // SAFETY: a pageable source is the caller's n-byte buffer (cuda.h's contract).
        let data: Box<[u8]> = unsafe { std::slice::from_raw_parts(src as *const u8, n) }.into();
        return enqueue(d, stream, Transfer::Write { dst, data }, false);
    }
    // Pageable memory on the other side (or a source too large to stage):
    // the call returns once the copy has run.
    let copy = Transfer::Copy { dst, src, n, dst_host: !dst_device, src_host: !src_device };
    enqueue(d, stream, copy, !(dst_device && src_device))
}

cu_export!(cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) {
    copy(Order::Sync, dst, Side::Device, src as u64, Side::Host, n)
}; cuMemcpyHtoD_v2_ptds);

cu_export!(cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) {
    copy(Order::Sync, dst as u64, Side::Host, src, Side::Device, n)
}; cuMemcpyDtoH_v2_ptds);

cu_export!(cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
    copy(Order::Sync, dst, Side::Device, src, Side::Device, n)
}; cuMemcpyDtoD_v2_ptds);

cu_export!(cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
    copy(Order::Sync, dst, Side::Host, src, Side::Host, n)
}; cuMemcpy_ptds);

cu_export!(cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, stream: CUstream) {
    copy(Order::Stream(stream), dst, Side::Device, src as u64, Side::Host, n)
}; cuMemcpyHtoDAsync_v2_ptsz);

cu_export!(cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: CUstream) {
    copy(Order::Stream(stream), dst as u64, Side::Host, src, Side::Device, n)
}; cuMemcpyDtoHAsync_v2_ptsz);

cu_export!(cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream) {
    copy(Order::Stream(stream), dst, Side::Device, src, Side::Device, n)
}; cuMemcpyDtoDAsync_v2_ptsz);

cu_export!(cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream) {
    copy(Order::Stream(stream), dst, Side::Host, src, Side::Host, n)
}; cuMemcpyAsync_ptsz);

cu_export!(cuMemsetD8_v2(dst: CUdeviceptr, value: u8, n: usize) {
    fill(Order::Sync, dst, value.into(), 1, n)
}; cuMemsetD8_v2_ptds);

cu_export!(cuMemsetD32_v2(dst: CUdeviceptr, value: c_uint, n: usize) {
    fill(Order::Sync, dst, value, 4, n)
}; cuMemsetD32_v2_ptds);

cu_export!(cuMemsetD8Async(dst: CUdeviceptr, value: u8, n: usize, stream: CUstream) {
    fill(Order::Stream(stream), dst, value.into(), 1, n)
}; cuMemsetD8Async_ptsz);

cu_export!(cuMemsetD32Async(dst: CUdeviceptr, value: c_uint, n: usize, stream: CUstream) {
    fill(Order::Stream(stream), dst, value, 4, n)
}; cuMemsetD32Async_ptsz);

/// The original 32-bit-pointer entry points (`CUdeviceptr_v1`, `unsigned
/// int` sizes). Device addresses here are above 4 GiB and cannot be
/// represented, so these report `CUDA_ERROR_NOT_SUPPORTED` instead of
/// truncating; every header since CUDA 3.2 maps the names to the `_v2` forms.
macro_rules! legacy_32bit {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        cu_export!($name($($arg: $ty),*) {
            $(let _ = $arg;)*
            driver()?;
            Err(CUDA_ERROR_NOT_SUPPORTED)
        });
    )*};
}

legacy_32bit! {
    cuMemAlloc(dptr: *mut c_uint, bytesize: c_uint);
    cuMemFree(dptr: c_uint);
    cuMemAllocPitch(dptr: *mut c_uint, ppitch: *mut c_uint, width: c_uint, height: c_uint, element_size: c_uint);
    cuMemGetAddressRange(pbase: *mut c_uint, psize: *mut c_uint, dptr: c_uint);
    cuMemcpyHtoD(dst: c_uint, src: *const c_void, n: c_uint);
    cuMemcpyDtoH(dst: *mut c_void, src: c_uint, n: c_uint);
    cuMemcpyDtoD(dst: c_uint, src: c_uint, n: c_uint);
    cuMemcpyHtoDAsync(dst: c_uint, src: *const c_void, n: c_uint, stream: CUstream);
    cuMemcpyDtoHAsync(dst: *mut c_void, src: c_uint, n: c_uint, stream: CUstream);
    cuMemcpyDtoDAsync(dst: c_uint, src: c_uint, n: c_uint, stream: CUstream);
    cuMemsetD8(dst: c_uint, value: u8, n: c_uint);
    cuMemsetD32(dst: c_uint, value: c_uint, n: c_uint);
}

// ---- copies between devices ------------------------------------------------

/// The context a peer copy names: a live one, or (null) the current one.
fn named_context(d: &Driver, ctx: CUcontext) -> CuResult<std::sync::Arc<crate::driver::Context>> {
    let handle = ctx as u64;
    if handle == 0 {
        return d.current();
    }
    d.read().contexts.get(&handle).cloned().ok_or(CUDA_ERROR_INVALID_CONTEXT)
}

/// Each side must be memory of its context's device.
fn check_peer_side(d: &Driver, p: u64, n: usize, ctx: &crate::driver::Context) -> CuResult<()> {
    check_device_range(d, p, n as u64)?;
    match mem::device_memory_info(d, p) {
        Some(m) if m.device != ctx.device => Err(CUDA_ERROR_INVALID_VALUE),
        _ => Ok(()),
    }
}

// A copy between two contexts' memory (devices share the host's memory
// here, so it is a plain copy). Synchronous: after both contexts' queued
// work, as the legacy stream orders it.
cu_export!(cuMemcpyPeer(dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize) {
    let d = driver()?;
    let (dc, sc) = (named_context(d, dst_ctx)?, named_context(d, src_ctx)?);
    crate::capture::check_unsafe_call()?;
    if n == 0 {
        return Ok(());
    }
    check_peer_side(d, dst, n, &dc)?;
    check_peer_side(d, src, n, &sc)?;
    dc.exec.synchronize();
    sc.exec.synchronize();
    mem::run_transfer(d, &Transfer::Copy { dst, src, n, dst_host: false, src_host: false });
    Ok(())
}; cuMemcpyPeer_ptds);

// Asynchronous: in the order of `stream`, which belongs to either context.
cu_export!(cuMemcpyPeerAsync(dst: CUdeviceptr, dst_ctx: CUcontext, src: CUdeviceptr, src_ctx: CUcontext, n: usize, stream: CUstream) {
    let d = driver()?;
    let (dc, sc) = (named_context(d, dst_ctx)?, named_context(d, src_ctx)?);
    d.stream(stream as u64)?;
    if n == 0 {
        return Ok(());
    }
    check_peer_side(d, dst, n, &dc)?;
    check_peer_side(d, src, n, &sc)?;
    enqueue(d, stream, Transfer::Copy { dst, src, n, dst_host: false, src_host: false }, false)
}; cuMemcpyPeerAsync_ptsz);

// ---- two-dimensional copies ----------------------------------------------

/// `CUDA_MEMCPY2D` (the `_v2` layout, with `size_t` fields).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CudaMemcpy2d {
    pub src_x_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub src_pitch: usize,
    pub dst_x_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub dst_pitch: usize,
    pub width_bytes: usize,
    pub height: usize,
}

// `CUmemorytype`
const MEMORYTYPE_HOST: c_uint = 1;
const MEMORYTYPE_DEVICE: c_uint = 2;
const MEMORYTYPE_ARRAY: c_uint = 3;
const MEMORYTYPE_UNIFIED: c_uint = 4;

/// One side of a 2D copy: its first byte and how it is checked.
fn side_2d(memory_type: c_uint, host: u64, device: u64, pitch: usize, x: usize, y: usize, width: usize) -> CuResult<(u64, Side)> {
    let (base, side) = match memory_type {
        MEMORYTYPE_HOST => (host, Side::Host),
        MEMORYTYPE_DEVICE => (device, Side::Device),
        MEMORYTYPE_UNIFIED => (device, Side::Host),
        // CUDA arrays hold no addressable bytes in simgpu.
        MEMORYTYPE_ARRAY => return Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    if pitch < x.saturating_add(width) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let offset = y.checked_mul(pitch).and_then(|o| o.checked_add(x)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    Ok((base.checked_add(offset as u64).ok_or(CUDA_ERROR_INVALID_VALUE)?, side))
}

/// A 2D copy, one row after another in the copy's order.
fn copy_2d(order: Order, p: &CudaMemcpy2d) -> CuResult<()> {
    let (src, src_side) = side_2d(p.src_memory_type, p.src_host as u64, p.src_device, p.src_pitch, p.src_x_bytes, p.src_y, p.width_bytes)?;
    let (dst, dst_side) = side_2d(p.dst_memory_type, p.dst_host as u64, p.dst_device, p.dst_pitch, p.dst_x_bytes, p.dst_y, p.width_bytes)?;
    if p.height == 0 || p.width_bytes == 0 {
        return Ok(());
    }
    for row in 0..p.height as u64 {
        copy(order, dst + row * p.dst_pitch as u64, dst_side, src + row * p.src_pitch as u64, src_side, p.width_bytes)?;
    }
    Ok(())
}

cu_export!(cuMemcpy2D_v2(params: *const CudaMemcpy2d) {
    copy_2d(Order::Sync, &crate::ffi::input(params)?)
}; cuMemcpy2D_v2_ptds, cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned_v2_ptds);

cu_export!(cuMemcpy2DAsync_v2(params: *const CudaMemcpy2d, stream: CUstream) {
    copy_2d(Order::Stream(stream), &crate::ffi::input(params)?)
}; cuMemcpy2DAsync_v2_ptsz);

// ---- unified memory hints --------------------------------------------------

/// `CUmemLocation` as cuda.h lays it out (type, id).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemLocation {
    pub type_: c_uint,
    pub id: std::ffi::c_int,
}

/// Checks a prefetch or advice range: managed memory, or (with unified
/// addressing and pageable access absent) nothing else.
fn check_managed_range(d: &Driver, ptr: CUdeviceptr, n: usize) -> CuResult<()> {
    if n == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_device_range(d, ptr, n as u64)?;
    match mem::device_memory_info(d, ptr) {
        Some(m) if m.managed => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

fn check_location(d: &Driver, l: MemLocation) -> CuResult<()> {
    match l.type_ {
        CU_MEM_LOCATION_TYPE_DEVICE => d.check_device(l.id).map(drop),
        CU_MEM_LOCATION_TYPE_HOST | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => Ok(()),
        CU_MEM_LOCATION_TYPE_HOST_NUMA if l.id == 0 => Ok(()),
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

// Managed memory lives in one place here (host memory the device uses), so
// a prefetch moves nothing: it is ordered on its stream and completes there.
cu_export!(cuMemPrefetchAsync_v2(ptr: CUdeviceptr, n: usize, location: MemLocation, flags: c_uint, stream: CUstream) {
    let d = driver()?;
    if flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.stream(stream as u64)?;
    check_location(d, location)?;
    check_managed_range(d, ptr, n)
}; cuMemPrefetchAsync_v2_ptsz);

cu_export!(cuMemPrefetchAsync(ptr: CUdeviceptr, n: usize, device: CUdevice, stream: CUstream) {
    let d = driver()?;
    d.stream(stream as u64)?;
    // CU_DEVICE_CPU (-1) names the host.
    if device != -1 {
        d.check_device(device)?;
    }
    check_managed_range(d, ptr, n)
}; cuMemPrefetchAsync_ptsz);

/// `CUmem_advise`: SET/UNSET of READ_MOSTLY, PREFERRED_LOCATION, ACCESSED_BY.
const MEM_ADVISE_LAST: c_uint = 6;

// Advice changes where a real driver places managed pages; here there is
// one place, so it is checked and has no further effect.
cu_export!(cuMemAdvise_v2(ptr: CUdeviceptr, n: usize, advice: c_uint, location: MemLocation) {
    let d = driver()?;
    if !(1..=MEM_ADVISE_LAST).contains(&advice) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_location(d, location)?;
    check_managed_range(d, ptr, n)
});

cu_export!(cuMemAdvise(ptr: CUdeviceptr, n: usize, advice: c_uint, device: CUdevice) {
    let d = driver()?;
    if !(1..=MEM_ADVISE_LAST).contains(&advice) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if device != -1 {
        d.check_device(device)?;
    }
    check_managed_range(d, ptr, n)
});

/// `CU_MEMHOSTALLOC_*` flags a pinned allocation reports. simgpu does not
/// keep the flags each was made with; every pinned buffer is portable and
/// mapped under unified addressing, so it reports those two.
const CU_MEMHOSTALLOC_PORTABLE: c_uint = 0x01;
const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 0x02;

cu_export!(cuMemHostGetFlags(flags: *mut c_uint, p: *mut c_void) {
    let d = driver()?;
    let a = p as u64;
    let pinned = d.read().host_allocs.iter().any(|(&b, &s)| a >= b && a < b + s as u64);
    let registered = super::host_register::registry().find(a).map(|(_, r)| r.flags);
    match (pinned, registered) {
        (true, _) => out(flags, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
        (false, Some(f)) => out(flags, f),
        (false, None) => Err(CUDA_ERROR_INVALID_VALUE),
    }
});
