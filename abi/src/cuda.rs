//! CUDA driver API types and constants (`cuda.h`).
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]

use core::ffi::{c_char, c_int, c_uint, c_void};

/// `CUresult`: every driver call returns one.
pub type CUresult = c_uint;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_DEINITIALIZED: CUresult = 4;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_IMAGE: CUresult = 200;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_CONTEXT_ALREADY_CURRENT: CUresult = 202;
pub const CUDA_ERROR_INVALID_SOURCE: CUresult = 300;
pub const CUDA_ERROR_FILE_NOT_FOUND: CUresult = 301;
pub const CUDA_ERROR_OPERATING_SYSTEM: CUresult = 304;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
pub const CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: CUresult = 701;
pub const CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE: CUresult = 708;
pub const CUDA_ERROR_CONTEXT_IS_DESTROYED: CUresult = 709;
pub const CUDA_ERROR_LAUNCH_FAILED: CUresult = 719;
pub const CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE: CUresult = 720;
pub const CUDA_ERROR_NOT_PERMITTED: CUresult = 800;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;
pub const CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: CUresult = 901;
pub const CUDA_ERROR_STREAM_CAPTURE_UNMATCHED: CUresult = 903;
pub const CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CUresult = 906;
pub const CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD: CUresult = 908;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUmemGenericAllocationHandle = u64;

macro_rules! opaque_handle {
    ($($handle:ident => $opaque:ident),* $(,)?) => {$(
        #[repr(C)]
        pub struct $opaque {
            _private: [u8; 0],
        }
        pub type $handle = *mut $opaque;
    )*};
}

opaque_handle! {
    CUcontext => CUctx_st,
    CUmodule => CUmod_st,
    CUfunction => CUfunc_st,
    CUstream => CUstream_st,
    CUevent => CUevent_st,
    CUarray => CUarray_st,
    CUmipmappedArray => CUmipmappedArray_st,
    CUmemoryPool => CUmemPoolHandle_st,
    CUgraph => CUgraph_st,
    CUgraphNode => CUgraphNode_st,
    CUgraphExec => CUgraphExec_st,
    CUlibrary => CUlib_st,
    CUkernel => CUkern_st,
    CUuserObject => CUuserObject_st,
}

/// `CU_STREAM_LEGACY`: the handle value that names the legacy default stream.
pub const CU_STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD`: the handle value that names the calling thread's
/// default stream.
pub const CU_STREAM_PER_THREAD: usize = 0x2;

/// Whether a stream handle names a default stream (null, legacy or
/// per-thread) rather than a stream of its own.
pub fn is_default_stream(stream: CUstream) -> bool {
    matches!(stream as usize, 0 | CU_STREAM_LEGACY | CU_STREAM_PER_THREAD)
}

/// `CUuuid`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUuuid {
    pub bytes: [c_char; 16],
}

/// `CUDA_ARRAY_DESCRIPTOR` (`_v2`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_ARRAY_DESCRIPTOR {
    pub Width: usize,
    pub Height: usize,
    pub Format: c_uint,
    pub NumChannels: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR` (`_v2`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_ARRAY3D_DESCRIPTOR {
    pub Width: usize,
    pub Height: usize,
    pub Depth: usize,
    pub Format: c_uint,
    pub NumChannels: c_uint,
    pub Flags: c_uint,
}

/// `CUmemLocation`. The C type holds a union of `int id` and two bytes; `id`
/// covers both for layout purposes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemLocation {
    pub type_: c_uint,
    pub id: c_int,
}

pub const CU_MEM_LOCATION_TYPE_INVALID: c_uint = 0;
pub const CU_MEM_LOCATION_TYPE_DEVICE: c_uint = 1;
pub const CU_MEM_LOCATION_TYPE_HOST: c_uint = 2;
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA: c_uint = 3;
pub const CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT: c_uint = 4;
pub const CU_MEM_LOCATION_TYPE_INVISIBLE: c_uint = 5;
pub const CU_MEM_LOCATION_TYPE_DEVICE_LOCALITY_DOMAIN: c_uint = 6;

pub const CU_MEM_ALLOCATION_TYPE_PINNED: c_uint = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CUmemAllocationProp_allocFlags {
    pub compressionType: u8,
    pub gpuDirectRDMACapable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp` (`_v1`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAllocationProp {
    pub type_: c_uint,
    pub requestedHandleTypes: c_uint,
    pub location: CUmemLocation,
    pub win32HandleMetaData: *mut c_void,
    pub allocFlags: CUmemAllocationProp_allocFlags,
}

/// `CUmemAccessDesc` (`_v1`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: c_uint,
}

/// `CUmemPoolProps` (`_v1`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUmemPoolProps {
    pub allocType: c_uint,
    pub handleTypes: c_uint,
    pub location: CUmemLocation,
    pub win32SecurityAttributes: *mut c_void,
    pub maxSize: usize,
    pub usage: u16,
    pub gpuDirectRDMACapable: u8,
    pub reserved: [u8; 53],
}

/// `CUlaunchAttribute`: an id and a 64-byte value union.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUlaunchAttribute {
    pub id: c_uint,
    pub pad: [c_char; 4],
    pub value: [u64; 8],
}

/// `CUlaunchConfig`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUlaunchConfig {
    pub gridDimX: c_uint,
    pub gridDimY: c_uint,
    pub gridDimZ: c_uint,
    pub blockDimX: c_uint,
    pub blockDimY: c_uint,
    pub blockDimZ: c_uint,
    pub sharedMemBytes: c_uint,
    pub hStream: CUstream,
    pub attrs: *mut CUlaunchAttribute,
    pub numAttrs: c_uint,
}

/// `cuGetProcAddress` flags.
pub const CU_GET_PROC_ADDRESS_DEFAULT: u64 = 0;
pub const CU_GET_PROC_ADDRESS_LEGACY_STREAM: u64 = 1 << 0;
pub const CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// `CUdriverProcAddressQueryResult`.
pub const CU_GET_PROC_ADDRESS_SUCCESS: c_int = 0;
pub const CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND: c_int = 1;
pub const CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT: c_int = 2;

/// `CUDA_KERNEL_NODE_PARAMS_v1` (`cuGraphAddKernelNode`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_KERNEL_NODE_PARAMS_v1 {
    pub func: CUfunction,
    pub gridDimX: c_uint,
    pub gridDimY: c_uint,
    pub gridDimZ: c_uint,
    pub blockDimX: c_uint,
    pub blockDimY: c_uint,
    pub blockDimZ: c_uint,
    pub sharedMemBytes: c_uint,
    pub kernelParams: *mut *mut c_void,
    pub extra: *mut *mut c_void,
}

/// `CUDA_KERNEL_NODE_PARAMS` (`_v2`, `cuGraphAddKernelNode_v2`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CUDA_KERNEL_NODE_PARAMS {
    pub func: CUfunction,
    pub gridDimX: c_uint,
    pub gridDimY: c_uint,
    pub gridDimZ: c_uint,
    pub blockDimX: c_uint,
    pub blockDimY: c_uint,
    pub blockDimZ: c_uint,
    pub sharedMemBytes: c_uint,
    pub kernelParams: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: CUkernel,
    pub ctx: CUcontext,
}

// Stream contexts, host functions and memory-pool attributes.
opaque_handle! {
    CUgreenCtx => CUgreenCtx_st,
}

/// `CUhostFn` (`cuLaunchHostFunc`).
pub type CUhostFn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;
/// `CUstreamCallback` (`cuStreamAddCallback`).
pub type CUstreamCallback = Option<unsafe extern "C" fn(stream: CUstream, status: CUresult, user_data: *mut c_void)>;

/// `CUmemPool_attribute`.
pub const CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: c_uint = 1;
pub const CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: c_uint = 2;
pub const CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: c_uint = 3;
pub const CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: c_uint = 4;
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: c_uint = 5;
pub const CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: c_uint = 6;
pub const CU_MEMPOOL_ATTR_USED_MEM_CURRENT: c_uint = 7;
pub const CU_MEMPOOL_ATTR_USED_MEM_HIGH: c_uint = 8;
pub const CU_MEMPOOL_ATTR_ALLOCATION_TYPE: c_uint = 9;
pub const CU_MEMPOOL_ATTR_EXPORT_HANDLE_TYPES: c_uint = 10;
pub const CU_MEMPOOL_ATTR_LOCATION_ID: c_uint = 11;
pub const CU_MEMPOOL_ATTR_LOCATION_TYPE: c_uint = 12;
pub const CU_MEMPOOL_ATTR_MAX_POOL_SIZE: c_uint = 13;

/// Driver entry points as function pointer types, for programs that look
/// them up with `dlsym` or `cuGetProcAddress` (`cudaTypedefs.h` names them
/// `PFN_<symbol>_v<version>`; here the version is left off).
pub type PFN_cuInit = unsafe extern "C" fn(flags: c_uint) -> CUresult;
pub type PFN_cuDeviceGet = unsafe extern "C" fn(device: *mut CUdevice, ordinal: c_int) -> CUresult;
pub type PFN_cuDevicePrimaryCtxRetain = unsafe extern "C" fn(pctx: *mut CUcontext, dev: CUdevice) -> CUresult;
pub type PFN_cuCtxSetCurrent = unsafe extern "C" fn(ctx: CUcontext) -> CUresult;
pub type PFN_cuModuleLoadData = unsafe extern "C" fn(module: *mut CUmodule, image: *const c_void) -> CUresult;
pub type PFN_cuModuleGetFunction = unsafe extern "C" fn(hfunc: *mut CUfunction, hmod: CUmodule, name: *const c_char) -> CUresult;
pub type PFN_cuStreamCreate = unsafe extern "C" fn(phStream: *mut CUstream, Flags: c_uint) -> CUresult;
pub type PFN_cuLaunchKernel = unsafe extern "C" fn(
    f: CUfunction,
    gridDimX: c_uint,
    gridDimY: c_uint,
    gridDimZ: c_uint,
    blockDimX: c_uint,
    blockDimY: c_uint,
    blockDimZ: c_uint,
    sharedMemBytes: c_uint,
    hStream: CUstream,
    kernelParams: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult;
pub type PFN_cuStreamSynchronize = unsafe extern "C" fn(hStream: CUstream) -> CUresult;
pub type PFN_cuMemAlloc_v2 = unsafe extern "C" fn(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult;
pub type PFN_cuMemFree_v2 = unsafe extern "C" fn(dptr: CUdeviceptr) -> CUresult;
pub type PFN_cuMemGetInfo_v2 = unsafe extern "C" fn(free: *mut usize, total: *mut usize) -> CUresult;
