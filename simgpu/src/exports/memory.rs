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

use crate::cu_export;
use crate::driver::{driver, CuResult, Driver};
use crate::ffi::{out, out_opt};
use crate::exec::{Op, Transfer};
use crate::memory::{self as mem, check_device_range};
use abi::cuda::*;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering::Acquire;

cu_export!(cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) {
    let d = driver()?;
    let ctx = d.current()?;
    if dptr.is_null() || bytesize == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::alloc_device(d, &ctx, bytesize as u64)?;
    out(dptr, p)
});

cu_export!(cuMemAllocManaged(dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint) {
    let d = driver()?;
    let ctx = d.current()?;
    if dptr.is_null() || bytesize == 0 || !matches!(flags, 1 | 2) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::alloc_device(d, &ctx, bytesize as u64)?;
    out(dptr, p)
});

cu_export!(cuMemAllocPitch_v2(dptr: *mut CUdeviceptr, ppitch: *mut usize, width: usize, height: usize, element_size: c_uint) {
    let d = driver()?;
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
    d.current()?;
    if pp.is_null() || flags & !0x7 != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::alloc_host(d, bytesize)?;
    out(pp, p as *mut c_void)
});

cu_export!(cuMemFreeHost(p: *mut c_void) {
    let d = driver()?;
    mem::free_host(d, p as u64)
});

cu_export!(cuMemHostGetDevicePointer_v2(pdptr: *mut CUdeviceptr, p: *mut c_void, flags: c_uint) {
    let d = driver()?;
    d.current()?;
    if pdptr.is_null() || flags != 0 || !d.read().host_allocs.iter().any(|(&b, &s)| (p as u64) >= b && (p as u64) < b + s as u64) {
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
        if self == CUDA_SUCCESS { Ok(()) } else { Err(self) }
    }
}

unsafe fn copy(dst: u64, src: u64, n: usize) {
    if n > 0 {
        // SAFETY: callers validated the device side against live allocations;
        // the host side is the application's buffer under cuda.h's contract.
        // `copy` (memmove) tolerates overlapping device ranges.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, n) };
    }
}

fn wait_legacy(d: &Driver) -> CuResult<()> {
    d.current()?.exec.synchronize();
    Ok(())
}

fn htod(d: &Driver, dst: CUdeviceptr, src: *const c_void, n: usize) -> CuResult<()> {
    if n == 0 {
        return Ok(());
    }
    if src.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_device_range(d, dst, n as u64)?;
    // SAFETY: dst range checked; src is the caller's n-byte buffer.
    unsafe { copy(dst, src as u64, n) };
    Ok(())
}

fn dtoh(d: &Driver, dst: *mut c_void, src: CUdeviceptr, n: usize) -> CuResult<()> {
    if n == 0 {
        return Ok(());
    }
    if dst.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_device_range(d, src, n as u64)?;
    // SAFETY: src range checked; dst is the caller's n-byte buffer.
    unsafe { copy(dst as u64, src, n) };
    Ok(())
}

fn dtod(d: &Driver, dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> CuResult<()> {
    if n == 0 {
        return Ok(());
    }
    check_device_range(d, dst, n as u64)?;
    check_device_range(d, src, n as u64)?;
    // SAFETY: both ranges checked against live allocations.
    unsafe { copy(dst, src, n) };
    Ok(())
}

fn unified(dst: u64, src: u64, n: usize) -> CuResult<()> {
    if n == 0 {
        return Ok(());
    }
    if dst == 0 || src == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: unified addressing: both are addresses in this process (device
    // pointers are host addresses here), valid by the caller's contract.
    unsafe { copy(dst, src, n) };
    Ok(())
}

cu_export!(cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) {
    let d = driver()?;
    wait_legacy(d)?;
    htod(d, dst, src, n)
}; cuMemcpyHtoD_v2_ptds);

cu_export!(cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) {
    let d = driver()?;
    wait_legacy(d)?;
    dtoh(d, dst, src, n)
}; cuMemcpyDtoH_v2_ptds);

cu_export!(cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
    let d = driver()?;
    wait_legacy(d)?;
    dtod(d, dst, src, n)
}; cuMemcpyDtoD_v2_ptds);

cu_export!(cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) {
    let d = driver()?;
    wait_legacy(d)?;
    unified(dst, src, n)
}; cuMemcpy_ptds);

/// Largest pageable source an asynchronous copy stages instead of waiting.
pub const STAGE_MAX_BYTES: usize = 64 << 20;

/// Whether `[p, p+n)` is memory the worker may touch later (device or pinned).
fn device_visible(d: &Driver, p: u64, n: usize) -> bool {
    check_device_range(d, p, n as u64).is_ok()
}

/// Queues `transfer` on `stream`; with `wait`, returns once it has run.
fn enqueue(d: &Driver, stream: CUstream, transfer: Transfer, wait: bool) -> CuResult<()> {
    let (ctx, s) = d.stream(stream as u64)?;
    if s.capturing().is_some() {
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
    if !src_device && n <= STAGE_MAX_BYTES {
        // SAFETY: a pageable source is the caller's n-byte buffer (cuda.h's contract).
        let data: Box<[u8]> = unsafe { std::slice::from_raw_parts(src as *const u8, n) }.into();
        let write = Transfer::Write { dst, data };
        return match dst_device {
            true => enqueue(d, stream, write, false),
            // Pageable to pageable: fully synchronous.
            false => enqueue(d, stream, Transfer::Copy { dst, src, n, dst_host: true, src_host: true }, true),
        };
    }
    let copy = Transfer::Copy { dst, src, n, dst_host: !dst_device, src_host: !src_device };
    enqueue(d, stream, copy, !(dst_device && src_device))
}

cu_export!(cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, stream: CUstream) {
    let d = driver()?;
    d.stream(stream as u64)?;
    if n == 0 {
        return Ok(());
    }
    if src.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_device_range(d, dst, n as u64)?;
    copy_async(d, stream, dst, src as u64, n, true, device_visible(d, src as u64, n))
}; cuMemcpyHtoDAsync_v2_ptsz);

cu_export!(cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: CUstream) {
    let d = driver()?;
    d.stream(stream as u64)?;
    if n == 0 {
        return Ok(());
    }
    if dst.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    check_device_range(d, src, n as u64)?;
    copy_async(d, stream, dst as u64, src, n, device_visible(d, dst as u64, n), true)
}; cuMemcpyDtoHAsync_v2_ptsz);

cu_export!(cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream) {
    let d = driver()?;
    d.stream(stream as u64)?;
    if n == 0 {
        return Ok(());
    }
    check_device_range(d, dst, n as u64)?;
    check_device_range(d, src, n as u64)?;
    copy_async(d, stream, dst, src, n, true, true)
}; cuMemcpyDtoDAsync_v2_ptsz);

cu_export!(cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: CUstream) {
    let d = driver()?;
    d.stream(stream as u64)?;
    if n == 0 {
        return Ok(());
    }
    if dst == 0 || src == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    copy_async(d, stream, dst, src, n, device_visible(d, dst, n), device_visible(d, src, n))
}; cuMemcpyAsync_ptsz);

fn memset8(d: &Driver, dst: CUdeviceptr, value: u8, n: usize) -> CuResult<()> {
    if n == 0 {
        return Ok(());
    }
    check_device_range(d, dst, n as u64)?;
    // SAFETY: range checked against a live allocation.
    unsafe { std::ptr::write_bytes(dst as *mut u8, value, n) };
    Ok(())
}

fn memset32(d: &Driver, dst: CUdeviceptr, value: u32, n: usize) -> CuResult<()> {
    if dst % 4 != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if n == 0 {
        return Ok(());
    }
    let bytes = (n as u64).checked_mul(4).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    check_device_range(d, dst, bytes)?;
    // SAFETY: range checked and 4-byte aligned.
    let words = unsafe { std::slice::from_raw_parts_mut(dst as *mut u32, n) };
    words.fill(value);
    Ok(())
}

cu_export!(cuMemsetD8_v2(dst: CUdeviceptr, value: u8, n: usize) {
    let d = driver()?;
    wait_legacy(d)?;
    memset8(d, dst, value, n)
}; cuMemsetD8_v2_ptds);

cu_export!(cuMemsetD32_v2(dst: CUdeviceptr, value: c_uint, n: usize) {
    let d = driver()?;
    wait_legacy(d)?;
    memset32(d, dst, value, n)
}; cuMemsetD32_v2_ptds);

cu_export!(cuMemsetD8Async(dst: CUdeviceptr, value: u8, n: usize, stream: CUstream) {
    let d = driver()?;
    d.stream(stream as u64)?;
    if n == 0 {
        return Ok(());
    }
    check_device_range(d, dst, n as u64)?;
    enqueue(d, stream, Transfer::Fill8 { dst, value, n }, false)
}; cuMemsetD8Async_ptsz);

cu_export!(cuMemsetD32Async(dst: CUdeviceptr, value: c_uint, n: usize, stream: CUstream) {
    let d = driver()?;
    d.stream(stream as u64)?;
    if dst % 4 != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if n == 0 {
        return Ok(());
    }
    check_device_range(d, dst, (n as u64).checked_mul(4).ok_or(CUDA_ERROR_INVALID_VALUE)?)?;
    enqueue(d, stream, Transfer::Fill32 { dst, value, n }, false)
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
