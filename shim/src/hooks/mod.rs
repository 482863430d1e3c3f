//! The exported hooks, grouped by CUDA area, and the one list of them.
//!
//! # The list
//! [`hooked_functions!`] below is the only place that names the hooked
//! symbols. Each entry gives the hook (`module::symbol`, a `#[no_mangle]`
//! function of that module), its C signature, and for a driver function its
//! `cuGetProcAddress` family, the CUDA version it appeared in
//! (`1000 × major + 10 × minor`, as `cudaTypedefs.h` spells it in
//! `PFN_<family>_v<version>`) and `per_thread` for a per-thread
//! default-stream (`_ptsz`) form. Everything that must agree with the list
//! is generated from it:
//! - the real function's slot, `real::cuda().<symbol>` (or
//!   `real::nvml()`), of the listed signature (`real`);
//! - the variant in the `cuGetProcAddress` version table
//!   (`crate::procaddr`);
//! - [`lookup`] (`dlsym`: a handle lookup of a hooked name returns our
//!   hook), [`hooks_of_real`] (`cuGetProcAddress`: the address the driver
//!   resolved is compared with the real table's, so the caller gets our
//!   hook for exactly the variant the driver chose) and, for tests,
//!   [`HOOKED`];
//! - a compile-time check that the hook has exactly the listed signature.
//!
//! A name that is not exported from the module, a hook whose signature
//! differs from its entry, or a slot listed twice does not compile; unit
//! tests hold each family and version to `cudaTypedefs.h` and `cuda.h`.
//!
//! # Adding a hook
//! 1. Write the hook in the module of its CUDA area: a `#[no_mangle] pub
//!    unsafe extern "C" fn` with the driver's name and signature that takes
//!    the real function with [`real_or_return!`] and decides through
//!    [`dispatch`] and the core (`crate::accounting`).
//! 2. Add its entry to [`hooked_functions!`]. When it is a new family, also
//!    list the family's variants the shim does not hook in
//!    `procaddr::UNHOOKED_VARIANTS`, so that the version table still matches
//!    `cudaTypedefs.h` and asking for them passes the driver's answer
//!    through.
//!
//! Functions the shim only calls on its own behalf are listed in `real`,
//! not here.

#![allow(non_snake_case)]

use crate::accounting::Runtime;
use crate::ffi::CUDA_LAUNCH_PARAMS;
use crate::guard::{boundary, Cuda, Guard};
use crate::Access;
use abi::cuda::*;
use abi::nvml::*;
use core::ffi::{c_char, c_int, c_uint, c_void};

pub mod context;
pub mod info;
pub mod launch;
pub mod memory;
pub mod nvml;
pub mod procaddr;
pub mod sync;

/// The one list of hooked functions (see the module docs): hands it to
/// `$make!`, after `own { … }`, the caller's own tokens. Each driver entry
/// reads `module::symbol(C argument types) -> CUresult => family since
/// version [per_thread];`, each NVML entry `module::symbol(C argument
/// types) -> nvmlReturn_t;`. The types are resolved where `$make!` expands,
/// so its module imports the CUDA and NVML types.
macro_rules! hooked_functions {
    ($make:ident { $($own:tt)* }) => {
        $make! {
            own { $($own)* }
            cuda {
                context::cuInit(c_uint) -> CUresult
                    => cuInit since 2000;
                procaddr::cuGetProcAddress(*const c_char, *mut *mut c_void, c_int, u64) -> CUresult
                    => cuGetProcAddress since 11030;
                procaddr::cuGetProcAddress_v2(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CUresult
                    => cuGetProcAddress since 12000;
                memory::cuMemAlloc_v2(*mut CUdeviceptr, usize) -> CUresult
                    => cuMemAlloc since 3020;
                memory::cuMemAllocPitch_v2(*mut CUdeviceptr, *mut usize, usize, usize, c_uint) -> CUresult
                    => cuMemAllocPitch since 3020;
                memory::cuMemAllocManaged(*mut CUdeviceptr, usize, c_uint) -> CUresult
                    => cuMemAllocManaged since 6000;
                memory::cuMemAllocAsync(*mut CUdeviceptr, usize, CUstream) -> CUresult
                    => cuMemAllocAsync since 11020;
                memory::cuMemAllocAsync_ptsz(*mut CUdeviceptr, usize, CUstream) -> CUresult
                    => cuMemAllocAsync since 11020 per_thread;
                memory::cuMemAllocFromPoolAsync(*mut CUdeviceptr, usize, CUmemoryPool, CUstream) -> CUresult
                    => cuMemAllocFromPoolAsync since 11020;
                memory::cuMemAllocFromPoolAsync_ptsz(*mut CUdeviceptr, usize, CUmemoryPool, CUstream) -> CUresult
                    => cuMemAllocFromPoolAsync since 11020 per_thread;
                memory::cuMemCreate(*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationProp, u64) -> CUresult
                    => cuMemCreate since 10020;
                memory::cuArrayCreate_v2(*mut CUarray, *const CUDA_ARRAY_DESCRIPTOR) -> CUresult
                    => cuArrayCreate since 3020;
                memory::cuArray3DCreate_v2(*mut CUarray, *const CUDA_ARRAY3D_DESCRIPTOR) -> CUresult
                    => cuArray3DCreate since 3020;
                memory::cuMipmappedArrayCreate(*mut CUmipmappedArray, *const CUDA_ARRAY3D_DESCRIPTOR, c_uint) -> CUresult
                    => cuMipmappedArrayCreate since 5000;
                memory::cuMemFree_v2(CUdeviceptr) -> CUresult
                    => cuMemFree since 3020;
                memory::cuMemFreeAsync(CUdeviceptr, CUstream) -> CUresult
                    => cuMemFreeAsync since 11020;
                memory::cuMemFreeAsync_ptsz(CUdeviceptr, CUstream) -> CUresult
                    => cuMemFreeAsync since 11020 per_thread;
                memory::cuMemPoolDestroy(CUmemoryPool) -> CUresult
                    => cuMemPoolDestroy since 11020;
                memory::cuMemRelease(CUmemGenericAllocationHandle) -> CUresult
                    => cuMemRelease since 10020;
                memory::cuMemRetainAllocationHandle(*mut CUmemGenericAllocationHandle, *mut c_void) -> CUresult
                    => cuMemRetainAllocationHandle since 11000;
                memory::cuMemMap(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, u64) -> CUresult
                    => cuMemMap since 10020;
                memory::cuMemUnmap(CUdeviceptr, usize) -> CUresult
                    => cuMemUnmap since 10020;
                memory::cuArrayDestroy(CUarray) -> CUresult
                    => cuArrayDestroy since 2000;
                memory::cuMipmappedArrayDestroy(CUmipmappedArray) -> CUresult
                    => cuMipmappedArrayDestroy since 5000;
                context::cuCtxCreate(*mut CUcontext, c_uint, CUdevice) -> CUresult
                    => cuCtxCreate since 2000;
                context::cuCtxCreate_v2(*mut CUcontext, c_uint, CUdevice) -> CUresult
                    => cuCtxCreate since 3020;
                context::cuCtxCreate_v3(*mut CUcontext, *mut c_void, c_int, c_uint, CUdevice) -> CUresult
                    => cuCtxCreate since 11040;
                context::cuCtxCreate_v4(*mut CUcontext, *mut c_void, c_uint, CUdevice) -> CUresult
                    => cuCtxCreate since 12050;
                context::cuCtxDestroy(CUcontext) -> CUresult
                    => cuCtxDestroy since 2000;
                context::cuCtxDestroy_v2(CUcontext) -> CUresult
                    => cuCtxDestroy since 4000;
                context::cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice) -> CUresult
                    => cuDevicePrimaryCtxRetain since 7000;
                context::cuDevicePrimaryCtxRelease(CUdevice) -> CUresult
                    => cuDevicePrimaryCtxRelease since 7000;
                context::cuDevicePrimaryCtxRelease_v2(CUdevice) -> CUresult
                    => cuDevicePrimaryCtxRelease since 11000;
                context::cuDevicePrimaryCtxReset(CUdevice) -> CUresult
                    => cuDevicePrimaryCtxReset since 7000;
                context::cuDevicePrimaryCtxReset_v2(CUdevice) -> CUresult
                    => cuDevicePrimaryCtxReset since 11000;
                info::cuMemGetInfo_v2(*mut usize, *mut usize) -> CUresult
                    => cuMemGetInfo since 3020;
                info::cuDeviceTotalMem_v2(*mut usize, CUdevice) -> CUresult
                    => cuDeviceTotalMem since 3020;
                sync::cuStreamSynchronize(CUstream) -> CUresult
                    => cuStreamSynchronize since 2000;
                sync::cuStreamSynchronize_ptsz(CUstream) -> CUresult
                    => cuStreamSynchronize since 7000 per_thread;
                sync::cuCtxSynchronize() -> CUresult
                    => cuCtxSynchronize since 2000;
                sync::cuCtxSynchronize_v2(CUcontext) -> CUresult
                    => cuCtxSynchronize since 13000;
                sync::cuEventSynchronize(CUevent) -> CUresult
                    => cuEventSynchronize since 2000;
                sync::cuMemcpyDtoH_v2(*mut c_void, CUdeviceptr, usize) -> CUresult
                    => cuMemcpyDtoH since 3020;
                sync::cuMemcpyDtoH_v2_ptds(*mut c_void, CUdeviceptr, usize) -> CUresult
                    => cuMemcpyDtoH since 7000 per_thread;
                sync::cuMemcpy(CUdeviceptr, CUdeviceptr, usize) -> CUresult
                    => cuMemcpy since 4000;
                sync::cuMemcpy_ptds(CUdeviceptr, CUdeviceptr, usize) -> CUresult
                    => cuMemcpy since 7000 per_thread;
                sync::cuStreamDestroy(CUstream) -> CUresult
                    => cuStreamDestroy since 2000;
                sync::cuStreamDestroy_v2(CUstream) -> CUresult
                    => cuStreamDestroy since 4000;
                launch::cuLaunchKernel(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void) -> CUresult
                    => cuLaunchKernel since 4000;
                launch::cuLaunchKernel_ptsz(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void, *mut *mut c_void) -> CUresult
                    => cuLaunchKernel since 7000 per_thread;
                launch::cuLaunchKernelEx(*const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void) -> CUresult
                    => cuLaunchKernelEx since 11060;
                launch::cuLaunchKernelEx_ptsz(*const CUlaunchConfig, CUfunction, *mut *mut c_void, *mut *mut c_void) -> CUresult
                    => cuLaunchKernelEx since 11060 per_thread;
                launch::cuLaunchCooperativeKernel(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void) -> CUresult
                    => cuLaunchCooperativeKernel since 9000;
                launch::cuLaunchCooperativeKernel_ptsz(CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream, *mut *mut c_void) -> CUresult
                    => cuLaunchCooperativeKernel since 9000 per_thread;
                launch::cuLaunchCooperativeKernelMultiDevice(*mut CUDA_LAUNCH_PARAMS, c_uint, c_uint) -> CUresult
                    => cuLaunchCooperativeKernelMultiDevice since 9000;
                launch::cuGraphLaunch(CUgraphExec, CUstream) -> CUresult
                    => cuGraphLaunch since 10000;
                launch::cuGraphLaunch_ptsz(CUgraphExec, CUstream) -> CUresult
                    => cuGraphLaunch since 10000 per_thread;
                launch::cuLaunch(CUfunction) -> CUresult
                    => cuLaunch since 2000;
                launch::cuLaunchGrid(CUfunction, c_int, c_int) -> CUresult
                    => cuLaunchGrid since 2000;
                launch::cuLaunchGridAsync(CUfunction, c_int, c_int, CUstream) -> CUresult
                    => cuLaunchGridAsync since 2000;
            }
            nvml {
                nvml::nvmlDeviceGetMemoryInfo(nvmlDevice_t, *mut nvmlMemory_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t, *mut nvmlMemory_v2_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_v1_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t, *mut c_uint, *mut nvmlProcessInfo_t) -> nvmlReturn_t;
                nvml::nvmlDeviceGetProcessUtilization(nvmlDevice_t, *mut nvmlProcessUtilizationSample_t, *mut c_uint, u64) -> nvmlReturn_t;
            }
        }
    };
}
pub(crate) use hooked_functions;

/// Generates the hooks' side of the list: the signature checks, [`HOOKED`],
/// [`lookup`] and [`hooks_of_real`].
macro_rules! hook_list {
    (
        own {}
        cuda { $($module:ident::$name:ident($($arg:ty),*) -> $ret:ty => $family:ident since $since:literal $($per_thread:ident)?;)* }
        nvml { $($nmodule:ident::$nname:ident($($narg:ty),*) -> $nret:ty;)* }
    ) => {
        // Each hook has exactly the C signature of its entry, which is its
        // real slot's: a hook that drifted from it does not compile.
        $(const _: unsafe extern "C" fn($($arg),*) -> $ret = $module::$name;)*
        $(const _: unsafe extern "C" fn($($narg),*) -> $nret = $nmodule::$nname;)*

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

hooked_functions!(hook_list {});

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
    boundary(Cuda, || match crate::runtime() {
        Err(r) => r,
        Ok(Access::Refused(r)) => r,
        Ok(Access::PassThrough) => forward(),
        Ok(Access::Ready(rt)) => account(rt),
    })
}
