//! `cuInit` and contexts: each context is charged its overhead.

use super::{dispatch, real_or_return};
use crate::guard::{boundary, Cuda, Guard};
use crate::real::ok_then;
use crate::Access;
use abi::cuda::*;
use core::ffi::{c_int, c_uint, c_void};

/// Initialises the shim before the driver: an invalid environment or an
/// unusable ledger fails here with `CUDA_ERROR_NOT_PERMITTED`, and the
/// driver is never initialised.
#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> CUresult {
    let real = real_or_return!(cuInit);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(flags) };
    let Some(_guard) = Guard::enter() else { return forward() };
    boundary(Cuda, || match crate::runtime() {
        Err(r) => r,
        Ok(Access::Refused(r)) => r,
        Ok(_) => forward(),
    })
}

macro_rules! create_hook {
    ($(#[$meta:meta])* $name:ident($($arg:ident: $ty:ty),*)) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(pctx: *mut CUcontext, $($arg: $ty,)* dev: CUdevice) -> CUresult {
            let real = real_or_return!($name);
            // SAFETY: forwarding the caller's arguments unchanged.
            let forward = move || unsafe { real(pctx, $($arg,)* dev) };
            dispatch(forward, |rt| {
                // SAFETY: on success the driver wrote the context to `pctx`.
                let r = rt.create_context(dev, || ok_then(forward(), || unsafe { *pctx }));
                if r == CUDA_SUCCESS {
                    crate::compute::join::join_device(rt, dev);
                }
                r
            })
        }
    };
}

create_hook!(cuCtxCreate(flags: c_uint));
create_hook!(cuCtxCreate_v2(flags: c_uint));
create_hook!(cuCtxCreate_v3(params: *mut c_void, params_count: c_int, flags: c_uint));
create_hook!(#[doc(alias = "cuCtxCreate")] cuCtxCreate_v4(params: *mut c_void, flags: c_uint));

macro_rules! destroy_hook {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(ctx: CUcontext) -> CUresult {
            let real = real_or_return!($name);
            // SAFETY: forwarding the caller's arguments unchanged.
            let forward = move || unsafe { real(ctx) };
            dispatch(forward, |rt| rt.destroy_context(ctx, forward))
        }
    };
}

destroy_hook!(cuCtxDestroy);
destroy_hook!(
    #[doc(alias = "cuCtxDestroy")]
    cuCtxDestroy_v2
);

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    let real = real_or_return!(cuDevicePrimaryCtxRetain);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(pctx, dev) };
    dispatch(forward, |rt| {
        // SAFETY: on success the driver wrote the context to `pctx`.
        let r = rt.retain_primary(dev, || ok_then(forward(), || unsafe { *pctx }));
        if r == CUDA_SUCCESS {
            crate::compute::join::join_device(rt, dev);
        }
        r
    })
}

macro_rules! primary_hook {
    ($(#[$meta:meta])* $name:ident => $method:ident) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(dev: CUdevice) -> CUresult {
            let real = real_or_return!($name);
            // SAFETY: forwarding the caller's arguments unchanged.
            let forward = move || unsafe { real(dev) };
            dispatch(forward, |rt| rt.$method(dev, forward))
        }
    };
}

primary_hook!(cuDevicePrimaryCtxRelease => release_primary);
primary_hook!(#[doc(alias = "cuDevicePrimaryCtxRelease")] cuDevicePrimaryCtxRelease_v2 => release_primary);
primary_hook!(cuDevicePrimaryCtxReset => reset_primary);
primary_hook!(#[doc(alias = "cuDevicePrimaryCtxReset")] cuDevicePrimaryCtxReset_v2 => reset_primary);
