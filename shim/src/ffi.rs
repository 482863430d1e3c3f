//! The C functions of the loader and libc that the shim calls, and the one
//! piece of it that must bypass our own `dlsym`: the real `dlsym`.
//!
//! The shim exports `dlsym` (see `hooks::procaddr`), so a plain call to
//! `dlsym` from inside this library would land in our own export. The real one
//! is found with `dlvsym(RTLD_NEXT, "dlsym", <glibc version>)` and kept in
//! [`REAL_DLSYM`], which the exported `dlsym` stub also reads.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};

/// `RTLD_NEXT` on glibc.
pub const RTLD_NEXT: *mut c_void = -1isize as *mut c_void;

pub type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

extern "C" {
    fn dlvsym(handle: *mut c_void, symbol: *const c_char, version: *const c_char) -> *mut c_void;
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn pthread_atfork(
        prepare: Option<unsafe extern "C" fn()>,
        parent: Option<unsafe extern "C" fn()>,
        child: Option<unsafe extern "C" fn()>,
    ) -> c_int;
}

/// The real `dlsym`, or null until [`real_dlsym`] first runs. Read by the
/// exported `dlsym` stub, which jumps to it for `RTLD_NEXT` lookups so that
/// the loader still sees the original caller.
pub static GPUSLICE_REAL_DLSYM: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// The real `dlsym` of libc. glibc 2.34 moved it into libc proper with a new
/// version; older ones only have 2.2.5.
pub fn real_dlsym() -> Option<DlsymFn> {
    let mut found = GPUSLICE_REAL_DLSYM.load(Ordering::Acquire);
    if found.is_null() {
        for version in [c"GLIBC_2.34", c"GLIBC_2.2.5"] {
            // SAFETY: dlvsym takes NUL-terminated strings, which these literals are.
            found = unsafe { dlvsym(RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
            if !found.is_null() {
                break;
            }
        }
        if found.is_null() {
            return None;
        }
        GPUSLICE_REAL_DLSYM.store(found, Ordering::Release);
    }
    // SAFETY: `found` is the address of libc's dlsym, whose C type is DlsymFn.
    Some(unsafe { core::mem::transmute::<*mut c_void, DlsymFn>(found) })
}

/// Looks `name` up in `handle` with the real `dlsym`.
pub fn lookup(handle: *mut c_void, name: &CStr) -> *mut c_void {
    match real_dlsym() {
        // SAFETY: `name` is NUL-terminated; `handle` came from dlopen or is a
        // pseudo-handle, both of which dlsym accepts.
        Some(dlsym) => unsafe { dlsym(handle, name.as_ptr()) },
        None => core::ptr::null_mut(),
    }
}

/// `dlopen(path, RTLD_NOW | RTLD_LOCAL)`; null when it cannot be loaded.
pub fn open_library(path: &CStr) -> *mut c_void {
    // SAFETY: `path` is NUL-terminated; dlopen has no other preconditions.
    unsafe { dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) }
}

/// `dlerror()`'s message for the last failed `dlopen` of this thread.
pub fn last_dl_error() -> String {
    // SAFETY: dlerror has no preconditions; it returns null or a
    // NUL-terminated string valid until the next dl call of this thread,
    // copied here before any.
    let message = unsafe { libc::dlerror() };
    if message.is_null() {
        return "no reason given".to_string();
    }
    // SAFETY: non-null, NUL-terminated (see above).
    unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()
}

/// Registers the fork handler that runs in the child.
pub fn at_fork_child(child: unsafe extern "C" fn()) {
    // SAFETY: a plain function pointer with no captured state; pthread_atfork
    // only stores it.
    let _ = unsafe { pthread_atfork(None, None, Some(child)) };
}

/// Closes a file descriptor, ignoring errors.
pub fn close_fd(fd: c_int) {
    // SAFETY: closing a descriptor has no memory-safety preconditions; the
    // caller owns `fd` and never uses it again.
    let _ = unsafe { libc::close(fd) };
}

/// `CUDA_LAUNCH_PARAMS` (`cuLaunchCooperativeKernelMultiDevice`), as cuda.h
/// declares it; the shim reads only `hStream`.
#[repr(C)]
#[allow(non_camel_case_types, non_snake_case)]
pub struct CUDA_LAUNCH_PARAMS {
    pub function: abi::cuda::CUfunction,
    pub gridDimX: core::ffi::c_uint,
    pub gridDimY: core::ffi::c_uint,
    pub gridDimZ: core::ffi::c_uint,
    pub blockDimX: core::ffi::c_uint,
    pub blockDimY: core::ffi::c_uint,
    pub blockDimZ: core::ffi::c_uint,
    pub sharedMemBytes: core::ffi::c_uint,
    pub hStream: abi::cuda::CUstream,
    pub kernelParams: *mut *mut core::ffi::c_void,
}

const _: () = {
    assert!(core::mem::size_of::<CUDA_LAUNCH_PARAMS>() == 56);
    assert!(core::mem::offset_of!(CUDA_LAUNCH_PARAMS, hStream) == 40);
};
