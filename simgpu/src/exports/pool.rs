//! Stream-ordered allocation and memory pools.
//!
//! Pools do not cache freed memory: a free, when its stream reaches it, gives
//! the bytes straight back to the device. That is what a real pool does with
//! its default release threshold of 0 at each synchronisation, and it keeps
//! the device's used bytes exact; `cuMemPoolTrimTo` therefore has nothing to
//! trim.

use super::{h, ptr};
use crate::cu_export;
use crate::driver::{driver, Pool, TAG_POOL};
use crate::exec::Op;
use crate::ffi::{input, out};
use crate::memory as mem;
use abi::cuda::*;

cu_export!(cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    out(pool, ptr(d.devices[i].default_pool))
});

cu_export!(cuDeviceGetMemPool(pool: *mut CUmemoryPool, dev: CUdevice) {
    let d = driver()?;
    let i = d.check_device(dev)?;
    out(pool, ptr(d.devices[i].default_pool))
});

cu_export!(cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) {
    let d = driver()?;
    if pool.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = input(props)?;
    if p.allocType != CU_MEM_ALLOCATION_TYPE_PINNED || p.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let device = d.check_device(p.location.id).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    let hnd = d.new_handle(TAG_POOL);
    d.write().pools.insert(hnd, Pool { device, default: false });
    out(pool, ptr(hnd))
});

cu_export!(cuMemPoolDestroy(pool: CUmemoryPool) {
    let d = driver()?;
    let mut objs = d.write();
    match objs.pools.get(&h(pool)) {
        None => Err(CUDA_ERROR_INVALID_VALUE),
        Some(p) if p.default => Err(CUDA_ERROR_INVALID_VALUE),
        Some(_) => {
            objs.pools.remove(&h(pool));
            Ok(())
        }
    }
});

cu_export!(cuMemPoolTrimTo(pool: CUmemoryPool, min_bytes_to_keep: usize) {
    let _ = min_bytes_to_keep;
    let d = driver()?;
    if d.read().pools.contains_key(&h(pool)) { Ok(()) } else { Err(CUDA_ERROR_INVALID_VALUE) }
});

cu_export!(cuMemAllocAsync(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) {
    let d = driver()?;
    let (ctx, _s) = d.stream(h(stream))?;
    if dptr.is_null() || bytesize == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::alloc_device(d, &ctx, bytesize as u64)?;
    out(dptr, p)
}; cuMemAllocAsync_ptsz);

cu_export!(cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) {
    let d = driver()?;
    let (ctx, _s) = d.stream(h(stream))?;
    let pool_device = d.read().pools.get(&h(pool)).map(|p| p.device).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if dptr.is_null() || bytesize == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if pool_device != ctx.device {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = mem::alloc_device(d, &ctx, bytesize as u64)?;
    out(dptr, p)
}; cuMemAllocFromPoolAsync_ptsz);

cu_export!(cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) {
    let d = driver()?;
    let (ctx, s) = d.stream(h(stream))?;
    if !mem::is_live_allocation(d, dptr) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    ctx.exec.submit(Op::Free { stream: s, ptr: dptr });
    Ok(())
}; cuMemFreeAsync_ptsz);
