//! Contexts: primary-context retain/release/reset, create/destroy, the
//! per-thread current-context stack, synchronisation.

use super::{h, ptr};
use crate::ffi::cu_export;
use crate::driver::{driver, with_ctx_stack, CuResult, Driver};
use crate::exec::lock;
use crate::ffi::{out, out_opt};
use abi::cuda::*;
use std::ffi::{c_int, c_uint, c_void};

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

cu_export!(cuCtxSynchronize() {
    let d = driver()?;
    let ctx = d.current()?;
    ctx.exec.synchronize();
    crate::pool::release_after_sync(d, ctx.device);
    Ok(())
});

cu_export!(cuCtxSynchronize_v2(ctx: CUcontext) {
    let d = driver()?;
    let ctx = d.context(h(ctx))?;
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
