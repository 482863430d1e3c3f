//! Kernel launches, on every route the driver offers: `cuLaunchKernel`,
//! `cuLaunchKernelEx`, `cuLaunchCooperativeKernel` (each also `_ptsz`),
//! `cuLaunchCooperativeKernelMultiDevice`, `cuGraphLaunch` (and `_ptsz`),
//! and the deprecated `cuLaunch`, `cuLaunchGrid` and `cuLaunchGridAsync`.
//!
//! A hook asks [`clear`] (no bucket governs, and every device this process
//! joined still shows the grant it launched under: a few loads) and calls
//! the driver. Otherwise the launch goes through the gate and the bucket
//! ([`crate::compute`]) with the streams it runs on: the stream argument, the stream of `cuLaunchKernelEx`'s
//! configuration, each device's stream of a multi-device launch, or the
//! legacy default stream for `cuLaunch` and `cuLaunchGrid`. A `_ptsz` entry
//! point's null stream is the calling thread's per-thread stream.

use super::{dispatch, real_or_return};
use crate::compute::{clear, Target};
use crate::ffi::CUDA_LAUNCH_PARAMS;
use abi::cuda::*;
use core::ffi::{c_int, c_uint, c_void};

/// The governed path for a launch on one stream.
#[inline(never)]
fn govern(stream: CUstream, per_thread: bool, forward: impl FnOnce() -> CUresult + Copy) -> CUresult {
    dispatch(forward, |rt| rt.govern_launch(&[Target { stream, per_thread }], forward))
}

/// Whether a hook's name is a per-thread default-stream form (`_ptsz`), as
/// the hook list (`hooks::hooked_functions!`) names them: the flag is read
/// from the name, so it is written once, in the list.
const fn is_per_thread(name: &str) -> bool {
    matches!(name.as_bytes(), [.., b'_', b'p', b't', b's', b'z'])
}

/// A launch hook: `$name($args) on $stream`.
macro_rules! launch_hook {
    ($(#[$meta:meta])* $name:ident($($arg:ident: $ty:ty),*) on $stream:expr) => {
        $(#[$meta])*
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> CUresult {
            const PER_THREAD: bool = is_per_thread(stringify!($name));
            let real = real_or_return!($name);
            // SAFETY: forwarding the caller's arguments unchanged.
            let forward = move || unsafe { real($($arg),*) };
            if clear() {
                return forward();
            }
            govern($stream, PER_THREAD, forward)
        }
    };
}

launch_hook!(cuLaunchKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) on stream);
launch_hook!(#[doc(alias = "cuLaunchKernel")] cuLaunchKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void, extra: *mut *mut c_void) on stream);
launch_hook!(cuLaunchCooperativeKernel(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void) on stream);
launch_hook!(#[doc(alias = "cuLaunchCooperativeKernel")] cuLaunchCooperativeKernel_ptsz(f: CUfunction, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared_bytes: c_uint, stream: CUstream, params: *mut *mut c_void) on stream);
launch_hook!(cuLaunchKernelEx(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) on config_stream(config));
launch_hook!(#[doc(alias = "cuLaunchKernelEx")] cuLaunchKernelEx_ptsz(config: *const CUlaunchConfig, f: CUfunction, params: *mut *mut c_void, extra: *mut *mut c_void) on config_stream(config));
launch_hook!(cuGraphLaunch(graph: CUgraphExec, stream: CUstream) on stream);
launch_hook!(#[doc(alias = "cuGraphLaunch")] cuGraphLaunch_ptsz(graph: CUgraphExec, stream: CUstream) on stream);
launch_hook!(cuLaunch(f: CUfunction) on core::ptr::null_mut());
launch_hook!(cuLaunchGrid(f: CUfunction, width: c_int, height: c_int) on core::ptr::null_mut());
launch_hook!(cuLaunchGridAsync(f: CUfunction, width: c_int, height: c_int, stream: CUstream) on stream);

/// The stream of a `cuLaunchKernelEx` configuration (the null stream for a
/// null configuration, which the driver refuses).
fn config_stream(config: *const CUlaunchConfig) -> CUstream {
    // SAFETY: the caller passes null or a valid configuration (cuda.h).
    unsafe { config.as_ref() }.map_or(core::ptr::null_mut(), |c| c.hStream)
}

/// Launches one cooperative kernel per device, each on its own stream
/// (never a default one, by the driver's rules): each device's part is
/// bracketed and charged to that device.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchCooperativeKernelMultiDevice(list: *mut CUDA_LAUNCH_PARAMS, count: c_uint, flags: c_uint) -> CUresult {
    let real = real_or_return!(cuLaunchCooperativeKernelMultiDevice);
    // SAFETY: forwarding the caller's arguments unchanged.
    let forward = move || unsafe { real(list, count, flags) };
    if clear() || list.is_null() {
        return forward();
    }
    dispatch(forward, |rt| {
        let mut targets = [Target { stream: core::ptr::null_mut(), per_thread: false }; ledger::MAX_DEVICES];
        let count = (count as usize).min(targets.len());
        for (i, target) in targets.iter_mut().enumerate().take(count) {
            // SAFETY: the caller passes `count` parameter blocks at `list` (cuda.h).
            target.stream = unsafe { (*list.add(i)).hStream };
        }
        rt.govern_launch(targets.get(..count).unwrap_or_default(), forward)
    })
}

#[cfg(test)]
mod tests {
    use super::is_per_thread;

    #[test]
    fn the_per_thread_flag_comes_from_the_name() {
        assert!(is_per_thread("cuLaunchKernel_ptsz"));
        assert!(!is_per_thread("cuLaunchKernel"));
        assert!(!is_per_thread("_pts"));
        assert!(!is_per_thread("cuGraphLaunch_ptds"));
    }
}
