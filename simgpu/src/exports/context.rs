//! Contexts: primary-context retain/release/reset, create/destroy, the
//! per-thread current-context stack, synchronisation.

use super::{h, ptr};
use crate::driver::{driver, with_ctx_stack, CuResult, Driver};
use crate::exec::lock;
use crate::ffi::cu_export;
use crate::ffi::{out, out_opt};
use abi::cuda::*;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::Ordering::Relaxed;

const CTX_FLAGS_MASK: u32 = 0xff;

fn create(d: &'static Driver, pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CuResult<()> {
    if pctx.is_null() || flags & !CTX_FLAGS_MASK != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let i = d.check_device(dev)?;
    let ctx = d.create_context(i, false, flags)?;
    with_ctx_stack(|s| s.push(ctx.handle))?;
    // SAFETY: checked non-null above; valid for writes by cuda.h's contract.
    unsafe { out(pctx, ptr(ctx.handle)) }
}

cu_export!(cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: CUdevice) {
    create(driver()?, pctx, flags, dev)
}; cuCtxCreate);

cu_export!(cuCtxCreate_v3(pctx: *mut CUcontext, params: *mut c_void, num_params: c_int, flags: c_uint, dev: CUdevice) {
    if num_params < 0 || (num_params > 0 && params.is_null()) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    create(driver()?, pctx, flags, dev)
});

cu_export!(cuCtxCreate_v4(pctx: *mut CUcontext, params: *mut c_void, flags: c_uint, dev: CUdevice) {
    let _ = params;
    create(driver()?, pctx, flags, dev)
});

cu_export!(cuCtxDestroy_v2(ctx: CUcontext) {
    let d = driver()?;
    let c = d.read().contexts.get(&h(ctx)).cloned().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    if c.primary {
        // The primary context is destroyed through cuDevicePrimaryCtxRelease/Reset.
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    d.destroy_context(c.handle)
}; cuCtxDestroy);

cu_export!(cuCtxSetCurrent(ctx: CUcontext) {
    let d = driver()?;
    let handle = h(ctx);
    // A primary context's handle is valid while the context is inactive
    // (the runtime makes it current before retaining it); using it then
    // fails in the call that needs it, as `d.current()` finds no context.
    let primary = d.devices.iter().any(|rt| rt.primary_handle == handle);
    if handle != 0 && !primary && !d.read().contexts.contains_key(&handle) {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    with_ctx_stack(|s| {
        s.pop();
        if handle != 0 {
            s.push(handle);
        }
    })
});

cu_export!(cuCtxGetCurrent(pctx: *mut CUcontext) {
    driver()?;
    let cur = crate::driver::current_ctx_handle().unwrap_or(0);
    out(pctx, ptr(cur))
});

cu_export!(cuCtxPushCurrent_v2(ctx: CUcontext) {
    let d = driver()?;
    let handle = h(ctx);
    if !d.read().contexts.contains_key(&handle) {
        return Err(CUDA_ERROR_INVALID_CONTEXT);
    }
    with_ctx_stack(|s| s.push(handle))
}; cuCtxPushCurrent);

cu_export!(cuCtxPopCurrent_v2(pctx: *mut CUcontext) {
    driver()?;
    let top = with_ctx_stack(|s| s.pop())?.ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
    out_opt(pctx, ptr(top));
    Ok(())
}; cuCtxPopCurrent);

// Synchronising a context is potentially unsafe during a stream capture
// (see `crate::capture`).
cu_export!(cuCtxSynchronize() {
    let d = driver()?;
    let ctx = d.current()?;
    crate::capture::check_unsafe_call()?;
    ctx.exec.synchronize();
    crate::pool::release_after_sync(d, ctx.device);
    Ok(())
});

cu_export!(cuCtxSynchronize_v2(ctx: CUcontext) {
    let d = driver()?;
    let ctx = d.context(h(ctx))?;
    crate::capture::check_unsafe_call()?;
    ctx.exec.synchronize();
    crate::pool::release_after_sync(d, ctx.device);
    Ok(())
});

cu_export!(cuCtxGetDevice(device: *mut CUdevice) {
    let d = driver()?;
    let c = d.current()?;
    out(device, d.ordinal_of(c.device))
});

cu_export!(cuCtxGetDevice_v2(device: *mut CUdevice, ctx: CUcontext) {
    let d = driver()?;
    let c = d.context(h(ctx))?;
    out(device, d.ordinal_of(c.device))
});

cu_export!(cuCtxGetFlags(flags: *mut c_uint) {
    let c = driver()?.current()?;
    out(flags, c.flags)
});

cu_export!(cuCtxGetId(ctx: CUcontext, ctx_id: *mut u64) {
    let c = driver()?.context(h(ctx))?;
    out(ctx_id, c.id)
});

cu_export!(cuCtxGetApiVersion(ctx: CUcontext, version: *mut c_uint) {
    driver()?.context(h(ctx))?;
    out(version, 3020)
});

cu_export!(cuCtxGetStreamPriorityRange(least: *mut c_int, greatest: *mut c_int) {
    driver()?;
    out_opt(least, 0);
    out_opt(greatest, -5);
    Ok(())
});

cu_export!(cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    if pctx.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let handle = d.primary_retain(i)?;
    out(pctx, ptr(handle))
});

cu_export!(cuDevicePrimaryCtxRelease_v2(dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    d.primary_release(i)
}; cuDevicePrimaryCtxRelease);

cu_export!(cuDevicePrimaryCtxReset_v2(dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    d.primary_reset(i)
}; cuDevicePrimaryCtxReset);

cu_export!(cuDevicePrimaryCtxGetState(dev: CUdevice, flags: *mut c_uint, active: *mut c_int) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    if flags.is_null() || active.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = lock(&d.devices[i].primary);
    out(flags, p.flags)?;
    out(active, c_int::from(p.ctx.is_some()))
});

cu_export!(cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: c_uint) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    if flags & !CTX_FLAGS_MASK != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    lock(&d.devices[i].primary).flags = flags;
    Ok(())
}; cuDevicePrimaryCtxSetFlags);

// ---- limits and cache preferences ------------------------------------------

/// `CUDA_ERROR_UNSUPPORTED_LIMIT`.
const CUDA_ERROR_UNSUPPORTED_LIMIT: CUresult = 215;
const CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: usize = 3;
const CU_LIMIT_MAX_L2_FETCH_GRANULARITY: usize = 5;
const CU_LIMIT_PERSISTING_L2_CACHE_SIZE: usize = 6;
const CU_LIMIT_SHMEM_SIZE: usize = 7;
const CU_LIMIT_CIG_ENABLED: usize = 8;
const CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED: usize = 9;
/// The persisting L2 set-aside a device allows
/// (`CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE`).
const MAX_PERSISTING_L2_BYTES: u64 = 32_505_856;

fn limit_index(limit: c_uint) -> CuResult<usize> {
    let i = limit as usize;
    if i >= crate::driver::LIMIT_COUNT {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(i)
}

cu_export!(cuCtxGetLimit(pvalue: *mut usize, limit: c_uint) {
    let ctx = driver()?.current()?;
    let i = limit_index(limit)?;
    out(pvalue, ctx.settings.limits[i].load(Relaxed) as usize)
});

// A request the driver may round or clamp (cuda.h): the L2 hints are
// clamped to what the device has; the device-runtime sync depth applies
// below compute capability 9.0 only, and simgpu's devices have no CIG, so
// those are unsupported limits here; the shared-memory size is fixed.
cu_export!(cuCtxSetLimit(limit: c_uint, value: usize) {
    let ctx = driver()?.current()?;
    let i = limit_index(limit)?;
    let value = value as u64;
    let stored = match i {
        CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH | CU_LIMIT_CIG_ENABLED | CU_LIMIT_CIG_SHMEM_FALLBACK_ENABLED => return Err(CUDA_ERROR_UNSUPPORTED_LIMIT),
        CU_LIMIT_SHMEM_SIZE => return Err(CUDA_ERROR_INVALID_VALUE),
        CU_LIMIT_MAX_L2_FETCH_GRANULARITY => value.min(128),
        CU_LIMIT_PERSISTING_L2_CACHE_SIZE => value.min(MAX_PERSISTING_L2_BYTES),
        _ => value,
    };
    ctx.settings.limits[i].store(stored, Relaxed);
    Ok(())
});

cu_export!(cuCtxGetCacheConfig(pconfig: *mut c_uint) {
    let ctx = driver()?.current()?;
    out(pconfig, ctx.settings.cache_config.load(Relaxed))
});

cu_export!(cuCtxSetCacheConfig(config: c_uint) {
    let ctx = driver()?.current()?;
    if config > 3 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    ctx.settings.cache_config.store(config, Relaxed);
    Ok(())
});

// Shared-memory bank size: fixed at four bytes since Maxwell; the calls
// remain and report or accept the setting.
cu_export!(cuCtxGetSharedMemConfig(pconfig: *mut c_uint) {
    let ctx = driver()?.current()?;
    out(pconfig, ctx.settings.shared_mem_config.load(Relaxed))
});

cu_export!(cuCtxSetSharedMemConfig(config: c_uint) {
    let ctx = driver()?.current()?;
    if config > 2 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    ctx.settings.shared_mem_config.store(config, Relaxed);
    Ok(())
});

cu_export!(cuCtxResetPersistingL2Cache() {
    driver()?.current()?;
    Ok(())
});
