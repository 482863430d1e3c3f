//! Kernel launches: `cuLaunchKernel`, `cuLaunchKernelEx`,
//! `cuLaunchCooperativeKernel`. A launch validates, works out the kernel's
//! simulated run time and queues it (or records it into the graph its stream
//! is capturing).

use super::h;
use crate::driver::{driver, CuResult, Driver, Function, KernelNode, TAG_NODE};
use crate::exec::Op;
use crate::ffi::cu_export;
use crate::ffi::input;
use abi::cuda::*;
use std::ffi::{c_uint, c_void};

const CU_LAUNCH_PARAM_END: usize = 0x00;
const CU_LAUNCH_PARAM_BUFFER_POINTER: usize = 0x01;
const CU_LAUNCH_PARAM_BUFFER_SIZE: usize = 0x02;
/// Blocks that may be co-resident for a cooperative launch (SMs × blocks/SM).
const COOPERATIVE_MAX_BLOCKS: u64 = 132 * 32;
const MAX_DYNAMIC_SHARED_BYTES: u32 = 232_448;

/// A kernel's simulated run time: `sim_*` kernels run for their first
/// argument (u64 microseconds), others for `SIMGPU_KERNEL_US`.
pub unsafe fn kernel_duration_ns(d: &Driver, f: &Function, params: *mut *mut c_void, extra: *mut *mut c_void) -> CuResult<u64> {
    if !params.is_null() && !extra.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if !f.sim {
        return Ok(d.machine.config.kernel_us.saturating_mul(1000));
    }
    let first: *const u8 = if !params.is_null() {
        // SAFETY: kernelParams is an array with one pointer per kernel argument (cuda.h).
        unsafe { *params as *const u8 }
    } else if !extra.is_null() {
        // SAFETY: `extra` is a CU_LAUNCH_PARAM_END-terminated list of (key, value) pairs (cuda.h).
        unsafe { extra_buffer(extra) }
    } else {
        std::ptr::null()
    };
    if first.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: the first argument of a sim_ kernel is a u64 the caller points to.
    let us = unsafe { (first as *const u64).read_unaligned() };
    Ok(us.saturating_mul(1000))
}

unsafe fn extra_buffer(extra: *mut *mut c_void) -> *const u8 {
    let mut i = 0;
    let mut buffer: *const u8 = std::ptr::null();
    let mut size: usize = 0;
    while i < 64 {
        // SAFETY: reading the (key, value) list within its END terminator.
        let key = unsafe { *extra.add(i) } as usize;
        if key == CU_LAUNCH_PARAM_END {
            break;
        }
        // SAFETY: every non-END key is followed by its value.
        let value = unsafe { *extra.add(i + 1) };
        match key {
            CU_LAUNCH_PARAM_BUFFER_POINTER => buffer = value as *const u8,
            // SAFETY: BUFFER_SIZE's value points to a size_t.
            CU_LAUNCH_PARAM_BUFFER_SIZE if !value.is_null() => size = unsafe { *(value as *const usize) },
            _ => {}
        }
        i += 2;
    }
    if size != 0 && size < 8 {
        return std::ptr::null();
    }
    buffer
}

pub struct Dims {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_bytes: c_uint,
}

fn check_dims(dims: &Dims, cooperative: bool) -> CuResult<()> {
    let [gx, gy, gz] = dims.grid;
    let [bx, by, bz] = dims.block;
    if gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if gx > i32::MAX as u32 || gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 || bz > 64 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if (bx as u64) * (by as u64) * (bz as u64) > 1024 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if dims.shared_bytes > MAX_DYNAMIC_SHARED_BYTES {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if cooperative && (gx as u64) * (gy as u64) * (gz as u64) > COOPERATIVE_MAX_BLOCKS {
        return Err(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    }
    Ok(())
}

/// The launch path: one read of the registry, one queue push.
pub unsafe fn launch(
    f: CUfunction,
    dims: &Dims,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    cooperative: bool,
) -> CuResult<()> {
    let d = driver()?;
    let sh = h(stream);
    let (func, ctx, s) = {
        let objs = d.read();
        let func = objs.functions.get(&h(f)).cloned().ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        if sh <= 2 {
            drop(objs);
            let ctx = d.current()?;
            let s = ctx.default_stream.clone();
            (func, ctx, s)
        } else {
            let s = objs.streams.get(&sh).cloned().ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            let ctx = objs.contexts.get(&s.ctx).cloned().ok_or(CUDA_ERROR_INVALID_HANDLE)?;
            (func, ctx, s)
        }
    };
    check_dims(dims, cooperative)?;
    // SAFETY: params/extra come from the caller under cuda.h's contract.
    let duration_ns = unsafe { kernel_duration_ns(d, &func, params, extra) }?;
    if let Some(graph) = s.capturing_valid()? {
        let node = d.new_handle(TAG_NODE);
        let mut objs = d.write();
        let g = objs.graphs.get_mut(&graph).ok_or(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)?;
        g.nodes.push(node);
        objs.nodes.insert(
            node,
            (graph, KernelNode { duration_ns, func: h(f), grid: dims.grid, block: dims.block, shared_bytes: dims.shared_bytes }),
        );
        return Ok(());
    }
    ctx.exec.submit(Op::Kernel { stream: s, remaining_ns: duration_ns });
    Ok(())
}

cu_export!(cuLaunchKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) {
    launch(f, &Dims { grid: [gx, gy, gz], block: [bx, by, bz], shared_bytes }, stream, params, extra, false)
}; cuLaunchKernel_ptsz);

cu_export!(cuLaunchCooperativeKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void) {
    launch(f, &Dims { grid: [gx, gy, gz], block: [bx, by, bz], shared_bytes }, stream, params, std::ptr::null_mut(), true)
}; cuLaunchCooperativeKernel_ptsz);

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
const CU_LAUNCH_ATTRIBUTE_COOPERATIVE: c_uint = 2;

cu_export!(cuLaunchKernelEx(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) {
    let c = input(config)?;
    if c.numAttrs > 0 && c.attrs.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut cooperative = false;
    for i in 0..c.numAttrs as usize {
        let a = input(c.attrs.add(i) as *const CUlaunchAttribute)?;
        if a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && a.value[0] as u32 != 0 {
            cooperative = true;
        }
    }
    let dims = Dims { grid: [c.gridDimX, c.gridDimY, c.gridDimZ], block: [c.blockDimX, c.blockDimY, c.blockDimZ], shared_bytes: c.sharedMemBytes };
    launch(f, &dims, c.hStream, params, extra, cooperative)
}; cuLaunchKernelEx_ptsz);
