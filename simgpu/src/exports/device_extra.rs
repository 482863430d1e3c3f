//! Device and context queries and controls that the CUDA runtime looks up
//! at start besides the everyday ones: finding a device by PCI bus id,
//! limits and atomic capabilities, the profiler switches, context-wide
//! event records and waits, and deprecated calls kept for old binaries.

use super::device::cuDeviceGetPCIBusId;
use super::event::{cuEventRecord, cuEventSynchronize};
use super::h;
use super::peer::can_access;
use crate::driver::{driver, CuResult};
use crate::ffi::{cstr, cu_export, out};
use abi::cuda::*;
use std::ffi::{c_char, c_int, c_uint};

/// A PCI bus id as the driver compares them: lower case, with the domain
/// (`0000:`) when it was left out.
fn normalise_bus_id(id: &str) -> String {
    let id = id.trim().to_ascii_lowercase();
    if id.matches(':').count() == 1 {
        format!("0000:{id}")
    } else {
        id
    }
}

cu_export!(cuDeviceGetByPCIBusId(dev: *mut CUdevice, pci_bus_id: *const c_char) {
    let d = driver()?;
    if dev.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let wanted = normalise_bus_id(&cstr(pci_bus_id)?.to_string_lossy());
    for ordinal in 0..d.device_count() as CUdevice {
        let mut buf = [0 as c_char; 32];
        if cuDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as c_int, ordinal) != CUDA_SUCCESS {
            continue;
        }
        let id = std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy();
        if normalise_bus_id(&id) == wanted {
            return out(dev, ordinal);
        }
    }
    Err(CUDA_ERROR_INVALID_DEVICE)
});

/// `CUarray_format` values and their element sizes in bytes.
fn format_bytes(format: c_uint) -> Option<usize> {
    match format {
        0x01 | 0x08 => Some(1),        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => Some(2), // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => Some(4), // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        _ => None,
    }
}

/// Texels a 1D texture bound to linear memory may hold: the device limit
/// (`CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH`, 2^28 on compute
/// capability 9.0) for every element size.
const TEXTURE1D_LINEAR_MAX_WIDTH: usize = 1 << 28;

cu_export!(cuDeviceGetTexture1DLinearMaxWidth(max_width: *mut usize, format: c_uint, num_channels: c_uint, dev: CUdevice) {
    let d = driver()?;
    d.check_device(dev)?;
    if format_bytes(format).is_none() || ![1, 2, 4].contains(&num_channels) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    out(max_width, TEXTURE1D_LINEAR_MAX_WIDTH)
});

/// `CU_ATOMIC_OPERATION_*` (0 ..= FLOAT_MAX).
const ATOMIC_OPERATION_COUNT: c_uint = 13;
/// `CU_ATOMIC_CAPABILITY_*`.
const ATOMIC_SIGNED: c_uint = 1 << 0;
const ATOMIC_UNSIGNED: c_uint = 1 << 1;
const ATOMIC_REDUCTION: c_uint = 1 << 2;
const ATOMIC_SCALAR_32: c_uint = 1 << 3;
const ATOMIC_SCALAR_64: c_uint = 1 << 4;

/// What a link with native atomics offers for one operation: 32- and
/// 64-bit scalars; integer operations on signed and unsigned values, and
/// the arithmetic and bitwise ones as reductions too.
fn native_capabilities(operation: c_uint) -> c_uint {
    let scalar = ATOMIC_SCALAR_32 | ATOMIC_SCALAR_64;
    match operation {
        0..=2 => scalar | ATOMIC_SIGNED | ATOMIC_UNSIGNED | ATOMIC_REDUCTION,
        3 | 4 => scalar | ATOMIC_UNSIGNED,
        5..=7 => scalar | ATOMIC_SIGNED | ATOMIC_UNSIGNED | ATOMIC_REDUCTION,
        8 | 9 => scalar | ATOMIC_SIGNED | ATOMIC_UNSIGNED,
        _ => scalar | ATOMIC_REDUCTION,
    }
}

/// Fills `capabilities` for each operation: `native` says whether the link
/// has native atomics (0 for every operation otherwise).
unsafe fn atomic_capabilities(capabilities: *mut c_uint, operations: *const c_uint, count: c_uint, native: bool) -> CuResult<()> {
    if capabilities.is_null() || operations.is_null() || count == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    for i in 0..count as usize {
        // SAFETY: both arrays hold `count` entries (cuda.h's contract).
        let op = unsafe { operations.add(i).read_unaligned() };
        if op >= ATOMIC_OPERATION_COUNT {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    for i in 0..count as usize {
        // SAFETY: as above.
        unsafe {
            let op = operations.add(i).read_unaligned();
            capabilities.add(i).write_unaligned(if native { native_capabilities(op) } else { 0 });
        }
    }
    Ok(())
}

// Host memory is reached over PCIe here, with no native atomics
// (`CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED` is 0).
cu_export!(cuDeviceGetHostAtomicCapabilities(capabilities: *mut c_uint, operations: *const c_uint, count: c_uint, dev: CUdevice) {
    driver()?.check_device(dev)?;
    atomic_capabilities(capabilities, operations, count, false)
});

// Between two linked devices, native atomics as `cuDeviceGetP2PAttribute`
// reports them (`CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED`).
cu_export!(cuDeviceGetP2PAtomicCapabilities(capabilities: *mut c_uint, operations: *const c_uint, count: c_uint, src: CUdevice, dst: CUdevice) {
    let d = driver()?;
    let a = d.check_device(src)?;
    let b = d.check_device(dst)?;
    if a == b {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    atomic_capabilities(capabilities, operations, count, can_access(d, a, b))
});

/// `CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX`, and the two scopes
/// (`_TO_OWNER`, `_TO_ALL_DEVICES`).
const FLUSH_TARGET_CURRENT_CTX: c_uint = 0;
const FLUSH_SCOPES: [c_uint; 2] = [100, 200];

// No flush option is offered (`CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS`
// is 0): there is no GPUDirect RDMA writer to a simulated device.
cu_export!(cuFlushGPUDirectRDMAWrites(target: c_uint, scope: c_uint) {
    let d = driver()?;
    if target != FLUSH_TARGET_CURRENT_CTX || !FLUSH_SCOPES.contains(&scope) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.current()?;
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

// No profiler is attached to a simulated device: starting and stopping
// collection need a context and change nothing.
cu_export!(cuProfilerStart() {
    driver()?.current().map(drop)
});

cu_export!(cuProfilerStop() {
    driver()?.current().map(drop)
});

// Deprecated since CUDA 4: a context made by cuCtxCreate is destroyed
// (its usage count is one).
cu_export!(cuCtxDetach(ctx: CUcontext) {
    driver()?;
    match super::context::cuCtxDestroy_v2(ctx) {
        CUDA_SUCCESS => Ok(()),
        e => Err(e),
    }
});

/// `CUsharedconfig`: DEFAULT_BANK_SIZE, FOUR_BYTE, EIGHT_BYTE.
const SHARED_CONFIG_MAX: c_uint = 2;

// Deprecated: the bank size is fixed on this architecture, so the setting
// is checked and has no effect.
cu_export!(cuFuncSetSharedMemConfig(func: CUfunction, config: c_uint) {
    let d = driver()?;
    if !d.read().functions.contains_key(&h(func)) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    if config > SHARED_CONFIG_MAX {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
});

// Records in `event` all the work queued in `ctx` so far. simgpu's events
// stand for one point in one stream, so the call waits for the context's
// work and records the event on the current context's default stream,
// where nothing of that work is left to precede it; later work in the
// context is not captured, as documented.
cu_export!(cuCtxRecordEvent(ctx: CUcontext, event: CUevent) {
    let d = driver()?;
    if ctx.is_null() {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    let c = d.context(h(ctx))?;
    if !d.read().events.contains_key(&h(event)) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    crate::capture::check_unsafe_call()?;
    c.exec.synchronize();
    match cuEventRecord(event, std::ptr::null_mut()) {
        CUDA_SUCCESS => Ok(()),
        e => Err(e),
    }
});

// Makes all later work in `ctx` wait for `event`: the call returns once the
// event has completed, so no later work can start before it.
cu_export!(cuCtxWaitEvent(ctx: CUcontext, event: CUevent) {
    let d = driver()?;
    if ctx.is_null() {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    d.context(h(ctx))?;
    if !d.read().events.contains_key(&h(event)) {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    match cuEventSynchronize(event) {
        CUDA_SUCCESS => Ok(()),
        e => Err(e),
    }
});

// A kernel's parameter list is not kept (its layout is only read from the
// image when a launch needs sizes), so the count answers as the per-index
// query does: for a valid function, `CUDA_ERROR_NOT_SUPPORTED`.
cu_export!(cuFuncGetParamCount(func: CUfunction, count: *mut usize) {
    driver()?;
    if count.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let (mut offset, mut size) = (0usize, 0usize);
    match super::module::cuFuncGetParamInfo(func, 0, &mut offset, &mut size) {
        CUDA_SUCCESS => Err(CUDA_ERROR_NOT_SUPPORTED),
        e => Err(e),
    }
}; cuKernelGetParamCount);
