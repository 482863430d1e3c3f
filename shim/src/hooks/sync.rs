//! Synchronisation (`cuStreamSynchronize`, `cuCtxSynchronize`,
//! `cuEventSynchronize`, and the synchronous copies that wait for the
//! device's work, `cuMemcpyDtoH` and `cuMemcpy`): forwarded untouched, then,
//! only if this process has stream-ordered memory, the `cuMemFreeAsync`s the
//! wait completed are released and the pools' charges settled with what they
//! reserve now (a synchronisation is when a pool gives memory above its
//! release threshold back). An application that frees stream-ordered memory
//! and synchronises has given it back, and another process of the tenant may
//! take it from then on, not only after this process's next allocation. On
//! an arbitrated device a synchronisation in a turn also asks the helper to
//! look for idleness soon (`compute::helper::synchronized`): a training loop
//! that pauses after its `loss.item()` gives the device up at once.

use super::real_or_return;
use crate::compute::bucket::{governed, streams_changed};
use crate::guard::{boundary, Cuda, Guard};
use crate::Access;
use abi::cuda::*;
use core::ffi::c_void;

/// After a synchronisation that returned: releases the pending frees it
/// completed, if there are any.
#[inline]
fn after_synchronize() {
    let frees = crate::accounting::has_stream_ordered_state();
    let launches = governed();
    if frees || launches {
        poll_completed(frees, launches);
    }
    if crate::compute::gate::any_arbitrated() {
        crate::compute::helper::synchronized();
    }
}

#[cold]
fn poll_completed(frees: bool, launches: bool) {
    let Some(_guard) = Guard::enter() else { return };
    boundary(Cuda, || {
        if let Some(Access::Ready(rt)) = crate::runtime_if_started() {
            if frees {
                rt.poll_pending_frees();
                rt.settle_pools();
            }
            if launches {
                rt.charge_completed_launches();
            }
        }
        CUDA_SUCCESS
    });
}

macro_rules! sync_hook {
    ($(#[$meta:meta])* $name:ident($($arg:ident: $ty:ty),*)) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            let real = real_or_return!($name);
            let syncing = crate::compute::helper::Synchronizing::enter();
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { real($($arg),*) };
            drop(syncing);
            after_synchronize();
            r
        }
    };
}

sync_hook!(cuStreamSynchronize(stream: CUstream));
sync_hook!(cuStreamSynchronize_ptsz(stream: CUstream));
sync_hook!(cuCtxSynchronize());
sync_hook!(#[doc(alias = "cuCtxSynchronize")] cuCtxSynchronize_v2(ctx: CUcontext));
sync_hook!(cuEventSynchronize(event: CUevent));

// A synchronous copy to the host waits for the legacy stream's work before
// it copies, and returns when the copy is done: `cudaMemcpy` after the
// kernels of a CUDA C++ loop, numba's `copy_to_host`. For the turns it is
// a synchronisation like the others; the copies that may return before
// the device is done (to the device, within it) are not hooked.
sync_hook!(cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, bytes: usize));
sync_hook!(cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, bytes: usize));
sync_hook!(cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize));
sync_hook!(cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize));

macro_rules! stream_destroy_hook {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[no_mangle]
        pub unsafe extern "C" fn $name(stream: CUstream) -> CUresult {
            let real = real_or_return!($name);
            // SAFETY: forwarding the caller's arguments unchanged.
            let r = unsafe { real(stream) };
            streams_changed();
            r
        }
    };
}

stream_destroy_hook!(cuStreamDestroy);
stream_destroy_hook!(
    #[doc(alias = "cuStreamDestroy")]
    cuStreamDestroy_v2
);
