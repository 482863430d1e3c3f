//! The exported hooks, grouped by CUDA area, and the one list of them.
//!
//! [`hook_list!`] below is the only place that names the hooked symbols. It
//! generates [`HOOKED`] and [`lookup`], which answer both `dlsym` (a handle
//! lookup of a hooked name returns our hook) and `cuGetProcAddress` (when the
//! driver resolved a variant we hook, the caller gets our hook); the symbols
//! themselves are the `#[no_mangle]` functions the list points at, so a name
//! in the list that is not exported does not compile.

#![allow(non_snake_case)]

use crate::accounting::Runtime;
use crate::guard::{boundary, Guard};
use crate::Access;
use abi::cuda::*;
use core::ffi::c_void;

pub mod context;
pub mod info;
pub mod launch;
pub mod memory;
pub mod nvml;
pub mod procaddr;

macro_rules! hook_list {
    ($($module:ident :: $name:ident),* $(,)?) => {
        /// Every symbol the shim hooks.
        #[allow(dead_code)]
        pub const HOOKED: &[&str] = &[$(stringify!($name)),*];

        /// Our hook for `name`, if we hook it.
        pub fn lookup(name: &[u8]) -> Option<*mut c_void> {
            $(
                if name == stringify!($name).as_bytes() {
                    return Some($module::$name as *mut c_void);
                }
            )*
            None
        }
    };
}

hook_list! {
    context::cuInit,
    procaddr::cuGetProcAddress,
    procaddr::cuGetProcAddress_v2,
    memory::cuMemAlloc_v2,
    memory::cuMemAllocPitch_v2,
    memory::cuMemAllocManaged,
    memory::cuMemAllocAsync,
    memory::cuMemAllocAsync_ptsz,
    memory::cuMemAllocFromPoolAsync,
    memory::cuMemAllocFromPoolAsync_ptsz,
    memory::cuMemCreate,
    memory::cuArrayCreate_v2,
    memory::cuArray3DCreate_v2,
    memory::cuMipmappedArrayCreate,
    memory::cuMemFree_v2,
    memory::cuMemFreeAsync,
    memory::cuMemFreeAsync_ptsz,
    memory::cuMemRelease,
    memory::cuMemRetainAllocationHandle,
    memory::cuMemMap,
    memory::cuMemUnmap,
    memory::cuArrayDestroy,
    memory::cuMipmappedArrayDestroy,
    context::cuCtxCreate,
    context::cuCtxCreate_v2,
    context::cuCtxCreate_v3,
    context::cuCtxCreate_v4,
    context::cuCtxDestroy,
    context::cuCtxDestroy_v2,
    context::cuDevicePrimaryCtxRetain,
    context::cuDevicePrimaryCtxRelease,
    context::cuDevicePrimaryCtxRelease_v2,
    context::cuDevicePrimaryCtxReset,
    context::cuDevicePrimaryCtxReset_v2,
    info::cuMemGetInfo_v2,
    info::cuDeviceTotalMem_v2,
    nvml::nvmlDeviceGetMemoryInfo,
    nvml::nvmlDeviceGetMemoryInfo_v2,
}

/// The real driver function `$name`, or return `CUDA_ERROR_NOT_FOUND` from
/// the hook (the library lacks it).
macro_rules! real_or_return {
    ($name:ident) => {
        match crate::real::cuda().and_then(|t| t.$name) {
            Some(f) => f,
            None => return abi::cuda::CUDA_ERROR_NOT_FOUND,
        }
    };
}
pub(crate) use real_or_return;

/// The shape of every accounted hook: outside the shim's own work on this
/// thread, with the process ready, `account`; otherwise `forward` (or the
/// refusal).
pub fn dispatch(forward: impl FnOnce() -> CUresult, account: impl FnOnce(&'static Runtime) -> CUresult) -> CUresult {
    let Some(_guard) = Guard::enter() else { return forward() };
    boundary(|| match crate::runtime() {
        Err(r) => r,
        Ok(Access::Refused(r)) => r,
        Ok(Access::PassThrough) => forward(),
        Ok(Access::Ready(rt)) => account(rt),
    })
}

/// `Ok(value)` when the driver call succeeded.
pub fn ok_then<T>(r: CUresult, value: impl FnOnce() -> T) -> Result<T, CUresult> {
    if r == CUDA_SUCCESS {
        Ok(value())
    } else {
        Err(r)
    }
}
