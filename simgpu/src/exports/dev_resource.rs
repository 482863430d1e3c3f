//! Device resources (`cuDeviceGetDevResource`, `cuCtxGetDevResource`): the
//! streaming multiprocessors a device, or a context on it, may use. A
//! driver answers these for every device and context since CUDA 12.4;
//! libraries size their launches by them (cuSOLVER 12.4 asks the runtime
//! for its stream's SMs before each factorisation, and a failed query
//! left as the runtime's last error fails the factorisation with
//! `CUSOLVER_STATUS_EXECUTION_FAILED`). Splitting the SMs into green
//! contexts stays unsupported (see `unsupported.rs`), so a context's
//! resource is its device's.
//!
//! `CUdevResource` is 144 bytes in every ABI version: the type, 92 bytes
//! of padding, then the union (`CUdevSmResource` first) and, since CUDA
//! 13, a `nextResource` pointer.

use crate::driver::{driver, CuResult, Driver};
use crate::ffi::cu_export;
use abi::cuda::*;
use std::ffi::{c_uint, c_void};

/// `CUDA_ERROR_INVALID_RESOURCE_TYPE`.
const CUDA_ERROR_INVALID_RESOURCE_TYPE: CUresult = 914;
/// `CU_DEV_RESOURCE_TYPE_SM`.
const RESOURCE_SM: c_uint = 1;
/// `CU_DEV_RESOURCE_TYPE_WORKQUEUE_CONFIG`, `CU_DEV_RESOURCE_TYPE_WORKQUEUE`.
const RESOURCE_WORKQUEUE_CONFIG: c_uint = 1000;
const RESOURCE_WORKQUEUE: c_uint = 10000;

const RESOURCE_BYTES: usize = 144;
const UNION_OFFSET: usize = 96;

/// Hopper partitions SMs for green contexts in groups of at least 8
/// (cuda.h, `cuDevSmResourceSplitByCount`), scheduled together in pairs.
const MIN_SM_PARTITION: u32 = 8;
const SM_COSCHEDULED_ALIGNMENT: u32 = 2;

/// The SMs of the device at physical index `physical`: its MIG instance's
/// where it is one, the whole H200's otherwise.
fn sm_count(d: &Driver, physical: usize) -> CuResult<u32> {
    let t = &d.machine.topology;
    Ok(match t.instance(physical) {
        Some(instance) => instance.profile.sm_count,
        None => super::device::attribute(16, t.physical(physical))? as u32,
    })
}

/// Writes the SM resource of the device at `physical` to `resource`.
///
/// # Safety
/// `resource` is null or valid for a write of a `CUdevResource`.
unsafe fn write_resource(d: &Driver, physical: usize, resource: *mut c_void, kind: c_uint) -> CuResult<()> {
    if resource.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    match kind {
        RESOURCE_SM => {}
        // Workqueues are not modelled.
        RESOURCE_WORKQUEUE_CONFIG | RESOURCE_WORKQUEUE => return Err(CUDA_ERROR_NOT_SUPPORTED),
        _ => return Err(CUDA_ERROR_INVALID_RESOURCE_TYPE),
    }
    let mut bytes = [0u8; RESOURCE_BYTES];
    bytes[..4].copy_from_slice(&RESOURCE_SM.to_ne_bytes());
    // smCount, minSmPartitionSize, smCoscheduledAlignment, flags, localityDomainId.
    let sm = [sm_count(d, physical)?, MIN_SM_PARTITION, SM_COSCHEDULED_ALIGNMENT, 0, 0];
    for (i, v) in sm.iter().enumerate() {
        bytes[UNION_OFFSET + 4 * i..UNION_OFFSET + 4 * i + 4].copy_from_slice(&v.to_ne_bytes());
    }
    // SAFETY: `resource` is non-null and holds a CUdevResource (contract).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), resource.cast::<u8>(), RESOURCE_BYTES) };
    Ok(())
}

cu_export!(cuDeviceGetDevResource(device: CUdevice, resource: *mut c_void, kind: c_uint) {
    let d = driver()?;
    let physical = d.check_device(device)?;
    write_resource(d, physical, resource, kind)
});

cu_export!(cuCtxGetDevResource(context: CUcontext, resource: *mut c_void, kind: c_uint) {
    let d = driver()?;
    let c = d.context(super::h(context))?;
    write_resource(d, c.device, resource, kind)
});
