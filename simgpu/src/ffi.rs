//! Helpers shared by every `extern "C"` entry point: the panic guard, and
//! checked access to the pointers an application passes in.
//!
//! The pointer helpers are `unsafe fn`s: their contract is cuda.h's (a
//! non-null pointer is valid for the access the API documents). Null is
//! checked here and becomes `CUDA_ERROR_INVALID_VALUE`.

use crate::driver::CuResult;
use abi::cuda::*;
use std::ffi::{c_char, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs an entry point's core; a panic becomes `CUDA_ERROR_UNKNOWN` instead of
/// unwinding into C.
#[inline]
pub fn guard(f: impl FnOnce() -> CuResult<()>) -> CUresult {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => CUDA_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => CUDA_ERROR_UNKNOWN,
    }
}

/// Writes an out-parameter.
#[inline]
pub unsafe fn out<T>(p: *mut T, v: T) -> CuResult<()> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Writes an optional out-parameter (null is allowed and ignored).
#[inline]
pub unsafe fn out_opt<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-null, and valid for writes by the caller's contract.
        unsafe { p.write_unaligned(v) };
    }
}

/// Reads an in-parameter struct.
#[inline]
pub unsafe fn input<T: Copy>(p: *const T) -> CuResult<T> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, and valid for reads by the caller's contract.
    Ok(unsafe { p.read_unaligned() })
}

/// Borrows a C string argument.
#[inline]
pub unsafe fn cstr<'a>(p: *const c_char) -> CuResult<&'a CStr> {
    if p.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, NUL-terminated by the caller's contract.
    Ok(unsafe { CStr::from_ptr(p) })
}

/// Copies `text` into a caller buffer of `len` bytes, NUL-terminated,
/// truncating like the driver does.
pub unsafe fn write_cstr(buf: *mut c_char, len: i32, text: &str) -> CuResult<()> {
    if buf.is_null() || len <= 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let n = text.len().min(len as usize - 1);
    // SAFETY: the caller provides `len` writable bytes; we write n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), buf, n);
        *buf.add(n) = 0;
    }
    Ok(())
}

/// Defines a driver entry point: `cu_export!(name(args) { body } ; aliases)`.
/// The body returns `CuResult<()>` and runs inside [`guard`]. Aliases are
/// extra exported names with the same signature (`_ptsz`/`_ptds` forms and
/// older names whose ABI is identical).
///
/// The body runs in an `unsafe` block under the contract written there, so
/// the macro stays private to this crate: every body is in this crate and is
/// read against that contract.
macro_rules! cu_export {
    ($name:ident $params:tt $body:block $(; $($alias:ident),+)?) => {
        $crate::ffi::cu_export!(@fn $name $params $body);
        $($( $crate::ffi::cu_export!(@alias $alias $name $params); )+)?
    };
    (@fn $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) $body:block) => {
        #[no_mangle]
        #[allow(unused_unsafe, clippy::too_many_arguments)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> abi::cuda::CUresult {
            let result = $crate::ffi::guard(move || -> $crate::driver::CuResult<()> {
                // SAFETY: pointer arguments come from the application under
                // cuda.h's contract; the helpers check null, and handles are
                // only ever looked up in the registry, never dereferenced.
                unsafe { $body }
            });
            if $crate::log::trace_enabled() {
                eprintln!("simgpu[{}]: trace: {} -> {}", std::process::id(), stringify!($name), result);
            }
            result
        }
    };
    (@alias $alias:ident $name:ident ( $($arg:ident : $ty:ty),* $(,)? )) => {
        #[no_mangle]
        #[allow(clippy::too_many_arguments)]
        pub unsafe extern "C" fn $alias($($arg: $ty),*) -> abi::cuda::CUresult {
            // SAFETY: same contract as the entry point it forwards to.
            unsafe { $name($($arg),*) }
        }
    };
}
pub(crate) use cu_export;
