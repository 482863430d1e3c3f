//! Pointer attributes (`cuPointerGetAttribute`, `cuPointerGetAttributes`,
//! `cuPointerSetAttribute`): what the driver knows of an address under
//! unified addressing. Device allocations (plain, managed, from a pool) and
//! VMM mappings answer as device memory; pinned (`cuMemAllocHost`,
//! `cuMemHostAlloc`) and registered host memory as host memory, whose
//! device address is its own address. Any other address is not a CUDA
//! pointer: the single query refuses it with `CUDA_ERROR_INVALID_VALUE`,
//! the multiple query answers it with empty values, as cuda.h says.
//!
//! Each attribute is written at the width its callers read it, which
//! cuda.h leaves to the prose ("a boolean", "an integer"): booleans as a
//! 32-bit integer (NVIDIA's Python bindings read them into a C `int`,
//! XLA's `GetPointerMemorySpace` and the CUDA runtime's
//! `cudaPointerGetAttributes` into an `unsigned int` they have not
//! zeroed: a one-byte write leaves the runtime calling pinned memory
//! managed, so PyTorch's `is_pinned()` says false), the memory type and
//! access flags as `unsigned int`, ordinals as `int`, sizes as `size_t`,
//! identifiers, handle masks and addresses as 64-bit values.

use crate::driver::{driver, CuResult, Driver};
use crate::ffi::cu_export;
use crate::memory::device_memory_info;
use abi::cuda::*;
use std::ffi::{c_uint, c_void};

const CU_MEMORYTYPE_HOST: c_uint = 1;
const CU_MEMORYTYPE_DEVICE: c_uint = 2;
const CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE: c_uint = 3;

/// A boolean attribute's value as the driver writes it: a 32-bit integer.
type CuBool = c_uint;

// `CUpointer_attribute`
const CONTEXT: c_uint = 1;
const MEMORY_TYPE: c_uint = 2;
const DEVICE_POINTER: c_uint = 3;
const HOST_POINTER: c_uint = 4;
const P2P_TOKENS: c_uint = 5;
const SYNC_MEMOPS: c_uint = 6;
const BUFFER_ID: c_uint = 7;
const IS_MANAGED: c_uint = 8;
const DEVICE_ORDINAL: c_uint = 9;
const IS_LEGACY_CUDA_IPC_CAPABLE: c_uint = 10;
const RANGE_START_ADDR: c_uint = 11;
const RANGE_SIZE: c_uint = 12;
const MAPPED: c_uint = 13;
const ALLOWED_HANDLE_TYPES: c_uint = 14;
const IS_GPU_DIRECT_RDMA_CAPABLE: c_uint = 15;
const ACCESS_FLAGS: c_uint = 16;
const MEMPOOL_HANDLE: c_uint = 17;
const MAPPING_SIZE: c_uint = 18;
const MAPPING_BASE_ADDR: c_uint = 19;
const MEMORY_BLOCK_ID: c_uint = 20;
const IS_HW_DECOMPRESS_CAPABLE: c_uint = 21;
const LOCALITY_DOMAIN_ORDINAL: c_uint = 22;

/// What an address is, as far as pointer attributes go.
struct Pointee {
    host: bool,
    managed: bool,
    /// The ordinal of the device it belongs to (host memory: -1).
    ordinal: i32,
    ctx: u64,
    base: u64,
    size: u64,
    pool: u64,
    /// A `cuMemAlloc` allocation, which legacy IPC can share.
    ipc_capable: bool,
}

fn classify(d: &Driver, p: u64) -> Option<Pointee> {
    if p == 0 {
        return None;
    }
    if let Some(m) = device_memory_info(d, p) {
        return Some(Pointee {
            host: false,
            managed: m.managed,
            ordinal: d.ordinal_of(m.device),
            ctx: m.ctx,
            base: m.base,
            size: m.size,
            pool: m.pool,
            ipc_capable: !m.vmm && m.pool == 0 && !m.managed,
        });
    }
    let pinned = d.read().host_allocs.iter().find(|(&b, &s)| p >= b && p < b + s as u64).map(|(&b, &s)| (b, s as u64));
    let registered = || super::host_register::registry().find(p).map(|(b, r)| (b, r.bytes));
    let (base, size) = pinned.or_else(registered)?;
    // Pinned memory belongs to the context that was current when it was
    // pinned; simgpu keeps no record of which, so it names the current one.
    let ctx = d.current().map(|c| c.handle).unwrap_or(0);
    Some(Pointee { host: true, managed: false, ordinal: -1, ctx, base, size, pool: 0, ipc_capable: false })
}

/// Writes one attribute of `p` to `data`; `Err` when the attribute does not
/// apply (or is unknown).
///
/// # Safety
/// `data` is valid for a write of the attribute's type (cuda.h).
unsafe fn write_attribute(data: *mut c_void, attribute: c_uint, address: u64, p: &Pointee) -> CuResult<()> {
    // SAFETY (every write below): `data` is non-null (checked by the
    // callers) and sized for the attribute by this function's contract.
    unsafe {
        match attribute {
            CONTEXT => data.cast::<u64>().write_unaligned(p.ctx),
            MEMORY_TYPE => data.cast::<c_uint>().write_unaligned(if p.host { CU_MEMORYTYPE_HOST } else { CU_MEMORYTYPE_DEVICE }),
            DEVICE_POINTER => data.cast::<u64>().write_unaligned(address),
            // Device memory has no host address, unless it is managed.
            HOST_POINTER if p.host || p.managed => data.cast::<u64>().write_unaligned(address),
            SYNC_MEMOPS | IS_GPU_DIRECT_RDMA_CAPABLE | IS_HW_DECOMPRESS_CAPABLE => data.cast::<CuBool>().write_unaligned(0),
            BUFFER_ID | MEMORY_BLOCK_ID => data.cast::<u64>().write_unaligned(p.base),
            IS_MANAGED => data.cast::<CuBool>().write_unaligned(CuBool::from(p.managed)),
            DEVICE_ORDINAL | LOCALITY_DOMAIN_ORDINAL => data.cast::<i32>().write_unaligned(p.ordinal),
            IS_LEGACY_CUDA_IPC_CAPABLE => data.cast::<CuBool>().write_unaligned(CuBool::from(p.ipc_capable)),
            RANGE_START_ADDR | MAPPING_BASE_ADDR => data.cast::<u64>().write_unaligned(p.base),
            RANGE_SIZE | MAPPING_SIZE => data.cast::<usize>().write_unaligned(p.size as usize),
            MAPPED => data.cast::<CuBool>().write_unaligned(1),
            ALLOWED_HANDLE_TYPES => data.cast::<u64>().write_unaligned(0),
            ACCESS_FLAGS => data.cast::<c_uint>().write_unaligned(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE),
            MEMPOOL_HANDLE => data.cast::<u64>().write_unaligned(p.pool),
            // GPUDirect tokens (nv-p2p.h) are not available on simgpu.
            P2P_TOKENS => return Err(CUDA_ERROR_NOT_SUPPORTED),
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        }
    }
    Ok(())
}

cu_export!(cuPointerGetAttribute(data: *mut c_void, attribute: c_uint, address: CUdeviceptr) {
    let d = driver()?;
    if data.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = classify(d, address).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    write_attribute(data, attribute, address, &p)
});

// Several attributes at once. An address that is not a CUDA pointer is
// not an error here: each attribute gets its empty value (null context,
// memory type 0, ordinal -2 as the driver reports for "no device").
cu_export!(cuPointerGetAttributes(count: c_uint, attributes: *mut c_uint, data: *mut *mut c_void, address: CUdeviceptr) {
    let d = driver()?;
    if count == 0 || attributes.is_null() || data.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let pointee = classify(d, address);
    for i in 0..count as usize {
        let attribute = *attributes.add(i);
        let slot = *data.add(i);
        if slot.is_null() {
            continue;
        }
        match &pointee {
            Some(p) => match write_attribute(slot, attribute, address, p) {
                Ok(()) => {}
                // A host pointer to device memory has no value: null.
                Err(_) if attribute == HOST_POINTER => slot.cast::<u64>().write_unaligned(0),
                Err(e) => return Err(e),
            },
            None => match attribute {
                CONTEXT | DEVICE_POINTER | HOST_POINTER | BUFFER_ID | MEMORY_BLOCK_ID | RANGE_START_ADDR | MAPPING_BASE_ADDR | ALLOWED_HANDLE_TYPES | MEMPOOL_HANDLE => slot.cast::<u64>().write_unaligned(0),
                MEMORY_TYPE | ACCESS_FLAGS => slot.cast::<c_uint>().write_unaligned(0),
                RANGE_SIZE | MAPPING_SIZE => slot.cast::<usize>().write_unaligned(0),
                DEVICE_ORDINAL | LOCALITY_DOMAIN_ORDINAL => slot.cast::<i32>().write_unaligned(-2),
                SYNC_MEMOPS | IS_MANAGED | IS_LEGACY_CUDA_IPC_CAPABLE | MAPPED | IS_GPU_DIRECT_RDMA_CAPABLE | IS_HW_DECOMPRESS_CAPABLE => slot.cast::<CuBool>().write_unaligned(0),
                _ => return Err(CUDA_ERROR_INVALID_VALUE),
            },
        }
    }
    Ok(())
});

// Only `SYNC_MEMOPS` can be set; simgpu's copies are already synchronous
// where the attribute would make them so, so setting it changes nothing.
cu_export!(cuPointerSetAttribute(value: *const c_void, attribute: c_uint, address: CUdeviceptr) {
    let d = driver()?;
    if value.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let p = classify(d, address).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if attribute != SYNC_MEMOPS || p.host {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(())
});
