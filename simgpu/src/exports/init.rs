//! Initialisation, versions, error strings, export table.

use crate::driver::{self, DRIVER_VERSION};
use crate::ffi::cu_export;
use crate::ffi::{out, out_opt};
use abi::cuda::*;
use std::ffi::{c_char, c_int, c_uint, c_void};

cu_export!(cuInit(flags: c_uint) { driver::init(flags) });

cu_export!(cuDriverGetVersion(version: *mut c_int) { out(version, DRIVER_VERSION) });

cu_export!(cuGetExportTable(table: *mut *const c_void, id: *const CUuuid) {
    super::export_table::get(table, id)
});

/// (code, name, description) for every code simgpu can return, and the other
/// common ones.
static ERRORS: &[(CUresult, &std::ffi::CStr, &std::ffi::CStr)] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (100, c"CUDA_ERROR_NO_DEVICE", c"no CUDA-capable device is detected"),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (200, c"CUDA_ERROR_INVALID_IMAGE", c"device kernel image is invalid"),
    (201, c"CUDA_ERROR_INVALID_CONTEXT", c"invalid device context"),
    (202, c"CUDA_ERROR_CONTEXT_ALREADY_CURRENT", c"context already current"),
    (208, c"CUDA_ERROR_NOT_MAPPED", c"resource not mapped"),
    (300, c"CUDA_ERROR_INVALID_SOURCE", c"device kernel image is invalid"),
    (301, c"CUDA_ERROR_FILE_NOT_FOUND", c"file not found"),
    (304, c"CUDA_ERROR_OPERATING_SYSTEM", c"OS call failed or operation not supported on this OS"),
    (400, c"CUDA_ERROR_INVALID_HANDLE", c"invalid resource handle"),
    (401, c"CUDA_ERROR_ILLEGAL_STATE", c"the operation cannot be performed in the present state"),
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (700, c"CUDA_ERROR_ILLEGAL_ADDRESS", c"an illegal memory access was encountered"),
    (701, c"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", c"too many resources requested for launch"),
    (702, c"CUDA_ERROR_LAUNCH_TIMEOUT", c"the launch timed out and was terminated"),
    (708, c"CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", c"primary context active"),
    (709, c"CUDA_ERROR_CONTEXT_IS_DESTROYED", c"context is destroyed"),
    (719, c"CUDA_ERROR_LAUNCH_FAILED", c"unspecified launch failure"),
    (720, c"CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", c"too many blocks in cooperative launch"),
    (800, c"CUDA_ERROR_NOT_PERMITTED", c"operation not permitted"),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (900, c"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", c"operation not permitted when stream is capturing"),
    (901, c"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", c"operation failed due to a previous error during capture"),
    (903, c"CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", c"capture was not initiated in this stream"),
    (906, c"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", c"operation would make the legacy stream depend on a capturing blocking stream"),
    (908, c"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", c"attempt to terminate a thread-local capture sequence from another thread"),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

fn lookup(code: CUresult) -> Option<&'static (CUresult, &'static std::ffi::CStr, &'static std::ffi::CStr)> {
    ERRORS.iter().find(|(c, _, _)| *c == code)
}

cu_export!(cuGetErrorName(error: CUresult, pstr: *mut *const c_char) {
    match lookup(error) {
        Some((_, name, _)) => out(pstr, name.as_ptr()),
        None => {
            out_opt(pstr, std::ptr::null());
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }
});

cu_export!(cuGetErrorString(error: CUresult, pstr: *mut *const c_char) {
    match lookup(error) {
        Some((_, _, text)) => out(pstr, text.as_ptr()),
        None => {
            out_opt(pstr, std::ptr::null());
            Err(CUDA_ERROR_INVALID_VALUE)
        }
    }
});
