//! The two lookup routes besides direct binding: `cuGetProcAddress`
//! (`_v2`) and `dlsym`.
//!
//! Both ask the real resolver first and only then swap in our hook, so a
//! name the driver does not have stays missing, and the variant chosen is
//! the driver's (see [`crate::procaddr`]).

use super::real_or_return;
use crate::ffi;
use crate::guard::{boundary, Or};
use abi::cuda::*;
use core::ffi::{c_char, c_int, c_void, CStr};

/// Replaces the driver's answer in `*pfn` with our hook for the function
/// the driver resolved, when we hook it. The variant is identified by the
/// address the driver returned, never re-derived from the version, so an
/// older driver's older variant gets the matching hook. When one address
/// has several of our names (a driver exporting aliases), the one the
/// version table picks wins.
///
/// # Safety
/// `symbol` is null or NUL-terminated; `pfn` is null or valid for writes.
unsafe fn substitute(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
    if pfn.is_null() {
        return;
    }
    // SAFETY: checked non-null; the driver just wrote it.
    let found = unsafe { *pfn };
    if found.is_null() {
        return;
    }
    let expected = if symbol.is_null() {
        None
    } else {
        // SAFETY: checked non-null; the caller passes a NUL-terminated name.
        unsafe { CStr::from_ptr(symbol) }.to_str().ok().and_then(|name| crate::procaddr::choose(name, version, flags))
    };
    let mut chosen = None;
    for (name, hook) in super::hooks_of_real(found) {
        if chosen.is_none() || Some(name) == expected {
            chosen = Some(hook);
        }
    }
    if let Some(hook) = chosen {
        // SAFETY: `pfn` is valid for writes (the driver just wrote it).
        unsafe { *pfn = hook };
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    symbol_status: *mut c_int,
) -> CUresult {
    let table = crate::real::cuda();
    let r = match (table.and_then(|t| t.cuGetProcAddress_v2), table.and_then(|t| t.cuGetProcAddress)) {
        // SAFETY: forwarding the caller's arguments unchanged.
        (Some(real), _) => unsafe { real(symbol, pfn, cuda_version, flags, symbol_status) },
        (None, Some(real)) => {
            // SAFETY: as above; the older entry point has no status argument.
            let r = unsafe { real(symbol, pfn, cuda_version, flags) };
            // SAFETY: the caller passes null or a valid int to write the status to.
            if let Some(status) = unsafe { symbol_status.as_mut() } {
                *status = if r == CUDA_SUCCESS { CU_GET_PROC_ADDRESS_SUCCESS } else { CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND };
            }
            r
        }
        (None, None) => return CUDA_ERROR_NOT_FOUND,
    };
    if r == CUDA_SUCCESS {
        boundary((), || {
            // SAFETY: the driver accepted these arguments, so they are valid.
            unsafe { substitute(symbol, pfn, cuda_version, flags) }
        });
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) -> CUresult {
    let real = real_or_return!(cuGetProcAddress);
    // SAFETY: forwarding the caller's arguments unchanged.
    let r = unsafe { real(symbol, pfn, cuda_version, flags) };
    if r == CUDA_SUCCESS {
        boundary((), || {
            // SAFETY: the driver accepted these arguments, so they are valid.
            unsafe { substitute(symbol, pfn, cuda_version, flags) }
        });
    }
    r
}

/// Our `dlsym`, behind the exported stub: the real answer, or our hook when
/// a `cu*`/`nvml*` name we hook resolved.
unsafe extern "C" fn dlsym_impl(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    let Some(real) = ffi::real_dlsym() else { return core::ptr::null_mut() };
    // SAFETY: forwarding the caller's arguments unchanged.
    let found = unsafe { real(handle, symbol) };
    if found.is_null() || symbol.is_null() || handle == ffi::RTLD_NEXT {
        return found;
    }
    // A panic must not unwind into the caller (that aborts the process): it
    // gets the real answer instead.
    boundary(Or(found), || {
        // SAFETY: checked non-null; dlsym's caller passes a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
        if !(name.starts_with(b"cu") || name.starts_with(b"nvml")) {
            return found;
        }
        super::lookup(name).unwrap_or(found)
    })
}

/// The exported `dlsym`. glibc's `dlsym` finds `RTLD_NEXT`'s "next" from its
/// caller's return address, so for `RTLD_NEXT` this stub jumps (not calls)
/// to the real one, leaving the original caller's return address in place;
/// every other lookup jumps to [`dlsym_impl`].
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "jne 2f",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 2f",
        "jmp rax",
        "2:",
        "jmp {imp}",
        real = sym ffi::GPUSLICE_REAL_DLSYM,
        imp = sym dlsym_impl,
    )
}

/// The exported `dlsym` (portable form: `RTLD_NEXT` lookups are answered
/// relative to this library).
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void {
    // SAFETY: forwarding the caller's arguments unchanged.
    unsafe { dlsym_impl(handle, symbol) }
}
