//! Stream-ordered allocation and memory pools: the entry points. What a
//! pool keeps, reuses and gives back is [`crate::pool`]'s.
//!
//! `cuMemPoolGetAttribute` reports what the pool reserves on the device and
//! what of it live allocations use, now and at most (`RESERVED_MEM_*`,
//! `USED_MEM_*`); setting a high-water mark to 0 resets it to the current
//! figure, any other value is refused, as cuda.h says. The release
//! threshold and the three reuse flags are read and written as stored.

use super::{h, ptr};
use crate::driver::{driver, CuResult, Pool, TAG_POOL};
use crate::exec::lock;
use crate::ffi::cu_export;
use crate::ffi::{input, out};
use crate::memory as mem;
use crate::pool;
use abi::cuda::*;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering::*;

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

/// `CU_MEM_ALLOCATION_TYPE_MANAGED`.
const CU_MEM_ALLOCATION_TYPE_MANAGED: c_uint = 2;
/// `CU_MEM_LOCATION_TYPE_NONE`: no preferred location (managed pools).
const CU_MEM_LOCATION_TYPE_NONE: c_uint = 0;

/// The device a pool of `alloc_type` at `location` belongs to. Pools of
/// device memory (pinned or managed) are supported; host-located pools are
/// not, as simgpu's devices report (`HOST_MEMORY_POOLS_SUPPORTED` and
/// `HOST_NUMA_MEMORY_POOLS_SUPPORTED` are 0), so they are refused with
/// `CUDA_ERROR_NOT_SUPPORTED`, as a driver refuses them on such a device.
fn pool_location(d: &crate::driver::Driver, location: &CUmemLocation, alloc_type: c_uint) -> CuResult<usize> {
    if alloc_type != CU_MEM_ALLOCATION_TYPE_PINNED && alloc_type != CU_MEM_ALLOCATION_TYPE_MANAGED {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let managed = alloc_type == CU_MEM_ALLOCATION_TYPE_MANAGED;
    match location.type_ {
        CU_MEM_LOCATION_TYPE_DEVICE => d.check_device(location.id).map_err(|_| CUDA_ERROR_INVALID_VALUE),
        // Managed memory has one place here, whatever location it prefers
        // (NONE: no preference): the current device's managed pool.
        CU_MEM_LOCATION_TYPE_NONE | CU_MEM_LOCATION_TYPE_HOST | CU_MEM_LOCATION_TYPE_HOST_NUMA | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT
            if managed =>
        {
            match d.current() {
                Ok(ctx) => Ok(ctx.device),
                Err(_) => d.check_device(0),
            }
        }
        CU_MEM_LOCATION_TYPE_HOST | CU_MEM_LOCATION_TYPE_HOST_NUMA | CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT => {
            Err(CUDA_ERROR_NOT_SUPPORTED)
        }
        _ => Err(CUDA_ERROR_INVALID_VALUE),
    }
}

/// A device's default pool of `alloc_type`.
fn default_pool_of(d: &crate::driver::Driver, device: usize, alloc_type: c_uint) -> u64 {
    if alloc_type == CU_MEM_ALLOCATION_TYPE_MANAGED {
        d.devices[device].managed_pool
    } else {
        d.devices[device].default_pool
    }
}

cu_export!(cuMemGetDefaultMemPool(pool: *mut CUmemoryPool, location: *mut CUmemLocation, alloc_type: c_uint) {
    let d = driver()?;
    let device = pool_location(d, &input(location)?, alloc_type)?;
    out(pool, ptr(default_pool_of(d, device, alloc_type)))
});

// The current pool of a location stays its default pool, as
// `cuDeviceSetMemPool` keeps it (see there).
cu_export!(cuMemGetMemPool(pool: *mut CUmemoryPool, location: *mut CUmemLocation, alloc_type: c_uint) {
    let d = driver()?;
    let device = pool_location(d, &input(location)?, alloc_type)?;
    out(pool, ptr(default_pool_of(d, device, alloc_type)))
});

cu_export!(cuMemSetMemPool(location: *mut CUmemLocation, alloc_type: c_uint, pool: CUmemoryPool) {
    let d = driver()?;
    let device = pool_location(d, &input(location)?, alloc_type)?;
    let objs = d.read();
    let p = objs.pools.get(&h(pool)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if p.device != device || p.managed != (alloc_type == CU_MEM_ALLOCATION_TYPE_MANAGED) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if h(pool) != default_pool_of(d, device, alloc_type) {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    Ok(())
});

cu_export!(cuMemPoolCreate(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) {
    let d = driver()?;
    if pool.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = input(props)?;
    let managed = p.allocType == CU_MEM_ALLOCATION_TYPE_MANAGED;
    let device = pool_location(d, &p.location, p.allocType)?;
    let hnd = d.new_handle(TAG_POOL);
    d.write().pools.insert(hnd, Pool { managed, ..Pool::new(device, false, p.handleTypes) });
    out(pool, ptr(hnd))
});

cu_export!(cuMemPoolDestroy(pool: CUmemoryPool) {
    let d = driver()?;
    let mut objs = d.write();
    match objs.pools.get(&h(pool)) {
        None => Err(CUDA_ERROR_INVALID_VALUE),
        Some(p) if p.default => Err(CUDA_ERROR_INVALID_VALUE),
        Some(_) => {
            let Some(p) = objs.pools.remove(&h(pool)) else { return Err(CUDA_ERROR_INVALID_VALUE) };
            drop(objs);
            pool::destroy(d, &p);
            Ok(())
        }
    }
});

cu_export!(cuMemPoolTrimTo(pool: CUmemoryPool, min_bytes_to_keep: usize) {
    pool::trim_to(driver()?, h(pool), min_bytes_to_keep as u64)
});

cu_export!(cuMemAllocAsync(dptr: *mut CUdeviceptr, bytesize: usize, stream: CUstream) {
    let d = driver()?;
    let (ctx, s) = d.stream(h(stream))?;
    if dptr.is_null() || bytesize == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = pool::alloc(d, &ctx, &s, bytesize as u64, d.devices[ctx.device].default_pool)?;
    out(dptr, p)
}; cuMemAllocAsync_ptsz);

cu_export!(cuMemAllocFromPoolAsync(dptr: *mut CUdeviceptr, bytesize: usize, pool: CUmemoryPool, stream: CUstream) {
    let d = driver()?;
    let (ctx, s) = d.stream(h(stream))?;
    let pool_device = d.read().pools.get(&h(pool)).map(|p| p.device).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if dptr.is_null() || bytesize == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if pool_device != ctx.device {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = pool::alloc(d, &ctx, &s, bytesize as u64, h(pool))?;
    out(dptr, p)
}; cuMemAllocFromPoolAsync_ptsz);

cu_export!(cuMemFreeAsync(dptr: CUdeviceptr, stream: CUstream) {
    let d = driver()?;
    let (ctx, s) = d.stream(h(stream))?;
    if !mem::is_live_allocation(d, dptr) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    pool::free_async(d, &ctx, &s, dptr)
}; cuMemFreeAsync_ptsz);

/// Reads or writes one `CUmemPool_attribute` through the caller's pointer.
unsafe fn pool_attribute(pool: CUmemoryPool, attr: c_uint, value: *mut c_void, set: bool) -> CuResult<()> {
    let d = driver()?;
    if value.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let objs = d.read();
    let p = objs.pools.get(&h(pool)).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let v64 = value as *mut u64;
    let v32 = value as *mut c_uint;
    // SAFETY (all accesses below): `value` is non-null and points to the
    // attribute's value type (int, enum or cuuint64_t) by cuda.h's contract.
    match attr {
        CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
        | CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
        | CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
            let flag = &p.reuse[(attr - 1) as usize];
            match set {
                true => flag.store(u32::from(unsafe { v32.read_unaligned() } != 0), Relaxed),
                false => unsafe { v32.write_unaligned(flag.load(Relaxed)) },
            }
        }
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD => match set {
            true => p.release_threshold_bytes.store(unsafe { v64.read_unaligned() }, Relaxed),
            false => unsafe { v64.write_unaligned(p.release_threshold_bytes.load(Relaxed)) },
        },
        CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH | CU_MEMPOOL_ATTR_USED_MEM_HIGH => {
            let mut b = lock(&p.blocks);
            let reserved = attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH;
            match set {
                // Only 0 may be set: it resets the mark to the current figure.
                true if unsafe { v64.read_unaligned() } != 0 => return Err(CUDA_ERROR_INVALID_VALUE),
                true if reserved => b.reserved_high_bytes = b.reserved_bytes,
                true => b.used_high_bytes = b.used_bytes,
                false => unsafe { v64.write_unaligned(if reserved { b.reserved_high_bytes } else { b.used_high_bytes }) },
            }
        }
        _ if set => return Err(CUDA_ERROR_INVALID_VALUE),
        CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT => unsafe { v64.write_unaligned(lock(&p.blocks).reserved_bytes) },
        CU_MEMPOOL_ATTR_USED_MEM_CURRENT => unsafe { v64.write_unaligned(lock(&p.blocks).used_bytes) },
        CU_MEMPOOL_ATTR_ALLOCATION_TYPE => unsafe {
            v32.write_unaligned(if p.managed { CU_MEM_ALLOCATION_TYPE_MANAGED } else { CU_MEM_ALLOCATION_TYPE_PINNED })
        },
        CU_MEMPOOL_ATTR_EXPORT_HANDLE_TYPES => unsafe { v32.write_unaligned(p.handle_types) },
        CU_MEMPOOL_ATTR_LOCATION_ID => unsafe { v32.write_unaligned(d.ordinal_of(p.device) as c_uint) },
        CU_MEMPOOL_ATTR_LOCATION_TYPE => unsafe { v32.write_unaligned(CU_MEM_LOCATION_TYPE_DEVICE) },
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    Ok(())
}

cu_export!(cuMemPoolSetAttribute(pool: CUmemoryPool, attr: c_uint, value: *mut c_void) {
    pool_attribute(pool, attr, value, true)
});

cu_export!(cuMemPoolGetAttribute(pool: CUmemoryPool, attr: c_uint, value: *mut c_void) {
    pool_attribute(pool, attr, value, false)
});

/// `CUmemAccess_flags`: NONE, READ, READWRITE.
const CU_MEM_ACCESS_FLAGS_PROT_NONE: c_uint = 0;
const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_uint = 3;

/// Access granted to other devices' contexts, by (pool, physical device).
static POOL_ACCESS: std::sync::Mutex<Option<std::collections::HashMap<(u64, usize), c_uint>>> = std::sync::Mutex::new(None);

// A pool's memory is always read-write to its own device, which cannot be
// changed; a peer device may be given access where peer access is
// possible ([`super::peer::can_access`]).
cu_export!(cuMemPoolSetAccess(pool: CUmemoryPool, map: *const CUmemAccessDesc, count: usize) {
    let d = driver()?;
    if count > 0 && map.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let device = d.read().pools.get(&h(pool)).map(|p| p.device).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let mut granted = Vec::new();
    for i in 0..count {
        let desc = input(map.add(i))?;
        if desc.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE || desc.flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE || desc.flags == 2 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let peer = d.check_device(desc.location.id)?;
        if peer == device {
            if desc.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            continue;
        }
        if !super::peer::can_access(d, peer, device) {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        granted.push(((h(pool), peer), desc.flags));
    }
    lock(&POOL_ACCESS).get_or_insert_with(Default::default).extend(granted);
    Ok(())
});

cu_export!(cuMemPoolGetAccess(flags: *mut c_uint, pool: CUmemoryPool, location: *mut CUmemLocation) {
    let d = driver()?;
    let device = d.read().pools.get(&h(pool)).map(|p| p.device).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let l = input(location)?;
    if l.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let peer = d.check_device(l.id)?;
    let granted = if peer == device {
        CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    } else {
        lock(&POOL_ACCESS).as_ref().and_then(|m| m.get(&(h(pool), peer)).copied()).unwrap_or(CU_MEM_ACCESS_FLAGS_PROT_NONE)
    };
    out(flags, granted)
});
