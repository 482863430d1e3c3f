//! The exported hooks, grouped by CUDA area, and the one list of them.
//!
//! [`hook_list!`] below is the only place that names the hooked symbols. It
//! generates [`HOOKED`], [`lookup`] (`dlsym`: a handle lookup of a hooked
//! name returns our hook) and [`hooks_of_real`] (`cuGetProcAddress`: the
//! address the driver resolved is compared with the real table's, so the
//! caller gets our hook for exactly the variant the driver chose). The
//! symbols are the `#[no_mangle]` functions the list points at and the real
//! slots are fields of `real::Cuda` of the same names, so a name in the list
//! that is not exported or not in the real table does not compile.

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
pub mod sync;

macro_rules! hook_list {
    (cuda { $($module:ident :: $name:ident),* $(,)? } nvml { $($nmodule:ident :: $nname:ident),* $(,)? }) => {
        /// Every symbol the shim hooks (checked against the version table).
        #[cfg(test)]
        pub const HOOKED: &[&str] = &[$(stringify!($name),)* $(stringify!($nname)),*];

        /// Our hook for `name`, if we hook it.
        pub fn lookup(name: &[u8]) -> Option<*mut c_void> {
            $(
                if name == stringify!($name).as_bytes() {
                    return Some($module::$name as *mut c_void);
                }
            )*
            $(
                if name == stringify!($nname).as_bytes() {
                    return Some($nmodule::$nname as *mut c_void);
                }
            )*
            None
        }

        /// The driver functions we hook whose real address is `real`, with
        /// our hook for each (several when the driver exports one function
        /// under more than one name).
        pub fn hooks_of_real(real: *mut c_void) -> impl Iterator<Item = (&'static str, *mut c_void)> {
            let table = crate::real::cuda();
            [$((stringify!($name), table.and_then(|t| t.$name).map(|f| f as *mut c_void), $module::$name as *mut c_void)),*]
                .into_iter()
                .filter(move |(_, found, _)| *found == Some(real))
                .map(|(name, _, hook)| (name, hook))
        }
    };
}

hook_list! {
    cuda {
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
        sync::cuStreamSynchronize,
        sync::cuStreamSynchronize_ptsz,
        sync::cuCtxSynchronize,
        sync::cuCtxSynchronize_v2,
        sync::cuEventSynchronize,
    }
    nvml {
        nvml::nvmlDeviceGetMemoryInfo,
        nvml::nvmlDeviceGetMemoryInfo_v2,
    }
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
