//! `cuGetProcAddress`: (name, requested CUDA version, flags) -> entry point.
//!
//! One list, below, names every exported driver function by its base name
//! with the CUDA version each variant appeared in (as `cudaTypedefs.h` names
//! them: `PFN_cuMemAlloc_v3020` is `cuMemAlloc_v2`), and its per-thread
//! default-stream variants. The table refers to the exported functions
//! themselves, so a name in it cannot point at a function that does not
//! exist. The newest variant whose version is <= the requested one wins;
//! `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM` selects the `_ptsz`/`_ptds`
//! list where a function has one.

use crate::exports::{
    array::*, context::*, device::*, event::*, graph::*, host_register::*, init::*, launch::*, memory::*, module::*, peer::*, pointer::*,
    pool::*, stream::*, tensor_map::*, unsupported::*, vmm::*,
};
use crate::exports::{dev_resource::*, device_extra::*, graph_nodes::*, interop::*, memcpy3d::*, texture::*};
use crate::ffi::{cstr, guard, out, out_opt};
use abi::cuda::*;
use std::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

#[derive(Debug, PartialEq, Eq)]
pub struct Variant {
    pub version: i32,
    pub symbol: &'static str,
    pub addr: usize,
}

pub struct Entry {
    pub name: &'static str,
    pub normal: Vec<Variant>,
    pub per_thread: Vec<Variant>,
}

macro_rules! proc_table {
    ($($base:ident => [$($ver:literal : $sym:ident),+] $(ptsz [$($pver:literal : $psym:ident),+])? ;)*) => {
        fn build() -> Vec<Entry> {
            vec![$(Entry {
                name: stringify!($base),
                normal: vec![$(Variant { version: $ver, symbol: stringify!($sym), addr: $sym as *const () as usize }),+],
                per_thread: vec![$($(Variant { version: $pver, symbol: stringify!($psym), addr: $psym as *const () as usize }),+)?],
            }),*]
        }
    };
}

proc_table! {
    cuInit => [2000: cuInit];
    cuDriverGetVersion => [2020: cuDriverGetVersion];
    cuGetErrorName => [6000: cuGetErrorName];
    cuGetErrorString => [6000: cuGetErrorString];
    cuGetExportTable => [3000: cuGetExportTable];
    cuGetProcAddress => [11030: cuGetProcAddress, 12000: cuGetProcAddress_v2];
    cuDeviceGet => [2000: cuDeviceGet];
    cuDeviceGetCount => [2000: cuDeviceGetCount];
    cuDeviceGetName => [2000: cuDeviceGetName];
    cuDeviceGetUuid => [9020: cuDeviceGetUuid, 11040: cuDeviceGetUuid_v2];
    cuDeviceTotalMem => [2000: cuDeviceTotalMem, 3020: cuDeviceTotalMem_v2];
    cuDeviceGetAttribute => [2000: cuDeviceGetAttribute];
    cuDeviceGetPCIBusId => [4010: cuDeviceGetPCIBusId];
    cuDeviceComputeCapability => [2000: cuDeviceComputeCapability];
    cuDeviceGetDefaultMemPool => [11020: cuDeviceGetDefaultMemPool];
    cuDeviceGetMemPool => [11020: cuDeviceGetMemPool];
    cuDeviceSetMemPool => [11020: cuDeviceSetMemPool];
    cuDevicePrimaryCtxRetain => [7000: cuDevicePrimaryCtxRetain];
    cuDevicePrimaryCtxRelease => [7000: cuDevicePrimaryCtxRelease, 11000: cuDevicePrimaryCtxRelease_v2];
    cuDevicePrimaryCtxReset => [7000: cuDevicePrimaryCtxReset, 11000: cuDevicePrimaryCtxReset_v2];
    cuDevicePrimaryCtxGetState => [7000: cuDevicePrimaryCtxGetState];
    cuDevicePrimaryCtxSetFlags => [7000: cuDevicePrimaryCtxSetFlags, 11000: cuDevicePrimaryCtxSetFlags_v2];
    cuCtxCreate => [2000: cuCtxCreate, 3020: cuCtxCreate_v2, 11040: cuCtxCreate_v3, 12050: cuCtxCreate_v4];
    cuCtxDestroy => [2000: cuCtxDestroy, 4000: cuCtxDestroy_v2];
    cuCtxSetCurrent => [4000: cuCtxSetCurrent];
    cuCtxGetCurrent => [4000: cuCtxGetCurrent];
    cuCtxPushCurrent => [2000: cuCtxPushCurrent, 4000: cuCtxPushCurrent_v2];
    cuCtxPopCurrent => [2000: cuCtxPopCurrent, 4000: cuCtxPopCurrent_v2];
    cuCtxSynchronize => [2000: cuCtxSynchronize, 13000: cuCtxSynchronize_v2];
    cuCtxGetDevice => [2000: cuCtxGetDevice, 13000: cuCtxGetDevice_v2];
    cuCtxGetFlags => [7000: cuCtxGetFlags];
    cuCtxGetApiVersion => [3020: cuCtxGetApiVersion];
    cuCtxGetId => [12000: cuCtxGetId];
    cuCtxGetStreamPriorityRange => [5050: cuCtxGetStreamPriorityRange];
    cuMemAlloc => [2000: cuMemAlloc, 3020: cuMemAlloc_v2];
    cuMemFree => [2000: cuMemFree, 3020: cuMemFree_v2];
    cuMemAllocPitch => [2000: cuMemAllocPitch, 3020: cuMemAllocPitch_v2];
    cuMemAllocManaged => [6000: cuMemAllocManaged];
    cuMemAllocHost => [2000: cuMemAllocHost, 3020: cuMemAllocHost_v2];
    cuMemHostAlloc => [2020: cuMemHostAlloc];
    cuMemFreeHost => [2000: cuMemFreeHost];
    cuMemHostGetDevicePointer => [2020: cuMemHostGetDevicePointer, 3020: cuMemHostGetDevicePointer_v2];
    cuMemHostRegister => [4000: cuMemHostRegister, 6050: cuMemHostRegister_v2];
    cuMemHostUnregister => [4000: cuMemHostUnregister];
    cuMemGetInfo => [2000: cuMemGetInfo, 3020: cuMemGetInfo_v2];
    cuMemGetAddressRange => [2000: cuMemGetAddressRange, 3020: cuMemGetAddressRange_v2];
    cuMemcpy => [4000: cuMemcpy] ptsz [7000: cuMemcpy_ptds];
    cuMemcpyAsync => [4000: cuMemcpyAsync] ptsz [7000: cuMemcpyAsync_ptsz];
    cuMemcpyHtoD => [2000: cuMemcpyHtoD, 3020: cuMemcpyHtoD_v2] ptsz [7000: cuMemcpyHtoD_v2_ptds];
    cuMemcpyDtoH => [2000: cuMemcpyDtoH, 3020: cuMemcpyDtoH_v2] ptsz [7000: cuMemcpyDtoH_v2_ptds];
    cuMemcpyDtoD => [2000: cuMemcpyDtoD, 3020: cuMemcpyDtoD_v2] ptsz [7000: cuMemcpyDtoD_v2_ptds];
    cuMemcpyHtoDAsync => [2000: cuMemcpyHtoDAsync, 3020: cuMemcpyHtoDAsync_v2] ptsz [7000: cuMemcpyHtoDAsync_v2_ptsz];
    cuMemcpyDtoHAsync => [2000: cuMemcpyDtoHAsync, 3020: cuMemcpyDtoHAsync_v2] ptsz [7000: cuMemcpyDtoHAsync_v2_ptsz];
    cuMemcpyDtoDAsync => [3000: cuMemcpyDtoDAsync, 3020: cuMemcpyDtoDAsync_v2] ptsz [7000: cuMemcpyDtoDAsync_v2_ptsz];
    cuMemsetD8 => [2000: cuMemsetD8, 3020: cuMemsetD8_v2] ptsz [7000: cuMemsetD8_v2_ptds];
    cuMemsetD32 => [2000: cuMemsetD32, 3020: cuMemsetD32_v2] ptsz [7000: cuMemsetD32_v2_ptds];
    cuMemsetD8Async => [3020: cuMemsetD8Async] ptsz [7000: cuMemsetD8Async_ptsz];
    cuMemsetD32Async => [3020: cuMemsetD32Async] ptsz [7000: cuMemsetD32Async_ptsz];
    cuMemAllocAsync => [11020: cuMemAllocAsync] ptsz [11020: cuMemAllocAsync_ptsz];
    cuMemAllocFromPoolAsync => [11020: cuMemAllocFromPoolAsync] ptsz [11020: cuMemAllocFromPoolAsync_ptsz];
    cuMemFreeAsync => [11020: cuMemFreeAsync] ptsz [11020: cuMemFreeAsync_ptsz];
    cuMemPoolCreate => [11020: cuMemPoolCreate];
    cuMemPoolDestroy => [11020: cuMemPoolDestroy];
    cuMemPoolTrimTo => [11020: cuMemPoolTrimTo];
    cuMemPoolSetAttribute => [11020: cuMemPoolSetAttribute];
    cuMemPoolGetAttribute => [11020: cuMemPoolGetAttribute];
    cuMemCreate => [10020: cuMemCreate];
    cuMemRelease => [10020: cuMemRelease];
    cuMemExportToShareableHandle => [10020: cuMemExportToShareableHandle];
    cuMulticastCreate => [12010: cuMulticastCreate];
    cuMulticastAddDevice => [12010: cuMulticastAddDevice];
    cuMulticastBindMem => [12010: cuMulticastBindMem, 13010: cuMulticastBindMem_v2];
    cuMulticastBindAddr => [12010: cuMulticastBindAddr, 13010: cuMulticastBindAddr_v2];
    cuMulticastUnbind => [12010: cuMulticastUnbind];
    cuGreenCtxCreate => [12040: cuGreenCtxCreate];
    cuGreenCtxDestroy => [12040: cuGreenCtxDestroy];
    cuCtxFromGreenCtx => [12040: cuCtxFromGreenCtx];
    cuGreenCtxStreamCreate => [12050: cuGreenCtxStreamCreate];
    cuGreenCtxGetDevResource => [12040: cuGreenCtxGetDevResource];
    cuMemGetHandleForAddressRange => [11070: cuMemGetHandleForAddressRange];
    cuStreamGetGreenCtx => [12040: cuStreamGetGreenCtx];
    cuDeviceGetDevResource => [12040: cuDeviceGetDevResource];
    cuDevSmResourceSplitByCount => [12040: cuDevSmResourceSplitByCount];
    cuDevResourceGenerateDesc => [12040: cuDevResourceGenerateDesc];
    cuLogsRegisterCallback => [12090: cuLogsRegisterCallback];
    cuLogsUnregisterCallback => [12090: cuLogsUnregisterCallback];
    cuMulticastGetGranularity => [12010: cuMulticastGetGranularity];
    cuMemGetAllocationPropertiesFromHandle => [10020: cuMemGetAllocationPropertiesFromHandle];
    cuMemImportFromShareableHandle => [10020: cuMemImportFromShareableHandle];
    cuMemAddressReserve => [10020: cuMemAddressReserve];
    cuMemAddressFree => [10020: cuMemAddressFree];
    cuMemMap => [10020: cuMemMap];
    cuMemUnmap => [10020: cuMemUnmap];
    cuMemSetAccess => [10020: cuMemSetAccess];
    cuMemRetainAllocationHandle => [11000: cuMemRetainAllocationHandle];
    cuMemGetAllocationGranularity => [10020: cuMemGetAllocationGranularity];
    cuArrayCreate => [2000: cuArrayCreate, 3020: cuArrayCreate_v2];
    cuArray3DCreate => [2000: cuArray3DCreate, 3020: cuArray3DCreate_v2];
    cuArrayDestroy => [2000: cuArrayDestroy];
    cuMipmappedArrayCreate => [5000: cuMipmappedArrayCreate];
    cuMipmappedArrayDestroy => [5000: cuMipmappedArrayDestroy];
    cuModuleLoad => [2000: cuModuleLoad];
    cuModuleLoadData => [2000: cuModuleLoadData];
    cuModuleLoadDataEx => [2010: cuModuleLoadDataEx];
    cuModuleLoadFatBinary => [2000: cuModuleLoadFatBinary];
    cuModuleGetFunction => [2000: cuModuleGetFunction];
    cuModuleUnload => [2000: cuModuleUnload];
    cuModuleGetFunctionCount => [12040: cuModuleGetFunctionCount];
    cuModuleEnumerateFunctions => [12040: cuModuleEnumerateFunctions];
    cuModuleGetGlobal => [3020: cuModuleGetGlobal_v2];
    cuModuleGetLoadingMode => [11070: cuModuleGetLoadingMode];
    cuLibraryLoadData => [12000: cuLibraryLoadData];
    cuLibraryLoadFromFile => [12000: cuLibraryLoadFromFile];
    cuLibraryUnload => [12000: cuLibraryUnload];
    cuLibraryGetKernel => [12000: cuLibraryGetKernel];
    cuLibraryGetKernelCount => [12040: cuLibraryGetKernelCount];
    cuLibraryEnumerateKernels => [12040: cuLibraryEnumerateKernels];
    cuLibraryGetModule => [12000: cuLibraryGetModule];
    cuLibraryGetGlobal => [12000: cuLibraryGetGlobal];
    cuKernelGetFunction => [12000: cuKernelGetFunction];
    cuKernelGetLibrary => [12050: cuKernelGetLibrary];
    cuKernelGetName => [12030: cuKernelGetName];
    cuKernelGetAttribute => [12000: cuKernelGetAttribute];
    cuKernelSetAttribute => [12000: cuKernelSetAttribute];
    cuKernelSetCacheConfig => [12000: cuKernelSetCacheConfig];
    cuFuncGetModule => [11000: cuFuncGetModule];
    cuFuncGetName => [12030: cuFuncGetName];
    cuFuncGetAttribute => [2020: cuFuncGetAttribute];
    cuFuncSetAttribute => [9000: cuFuncSetAttribute];
    cuFuncSetCacheConfig => [3000: cuFuncSetCacheConfig];
    cuOccupancyMaxActiveBlocksPerMultiprocessor => [6050: cuOccupancyMaxActiveBlocksPerMultiprocessor];
    cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags => [7000: cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags];
    cuOccupancyMaxPotentialBlockSize => [6050: cuOccupancyMaxPotentialBlockSize];
    cuOccupancyMaxPotentialBlockSizeWithFlags => [7000: cuOccupancyMaxPotentialBlockSizeWithFlags];
    cuLinkCreate => [5050: cuLinkCreate, 6050: cuLinkCreate_v2];
    cuLinkAddData => [5050: cuLinkAddData, 6050: cuLinkAddData_v2];
    cuLinkAddFile => [5050: cuLinkAddFile, 6050: cuLinkAddFile_v2];
    cuLinkComplete => [5050: cuLinkComplete];
    cuLinkDestroy => [5050: cuLinkDestroy];
    cuLaunchKernel => [4000: cuLaunchKernel] ptsz [7000: cuLaunchKernel_ptsz];
    cuLaunchKernelEx => [11060: cuLaunchKernelEx] ptsz [11060: cuLaunchKernelEx_ptsz];
    cuLaunchCooperativeKernel => [9000: cuLaunchCooperativeKernel] ptsz [9000: cuLaunchCooperativeKernel_ptsz];
    cuStreamCreate => [2000: cuStreamCreate];
    cuStreamCreateWithPriority => [5050: cuStreamCreateWithPriority];
    cuStreamDestroy => [2000: cuStreamDestroy, 4000: cuStreamDestroy_v2];
    cuStreamSynchronize => [2000: cuStreamSynchronize] ptsz [7000: cuStreamSynchronize_ptsz];
    cuStreamQuery => [2000: cuStreamQuery] ptsz [7000: cuStreamQuery_ptsz];
    cuStreamGetPriority => [5050: cuStreamGetPriority] ptsz [7000: cuStreamGetPriority_ptsz];
    cuStreamGetFlags => [5050: cuStreamGetFlags] ptsz [7000: cuStreamGetFlags_ptsz];
    cuStreamGetCtx => [9020: cuStreamGetCtx, 12050: cuStreamGetCtx_v2] ptsz [9020: cuStreamGetCtx_ptsz, 12050: cuStreamGetCtx_v2_ptsz];
    cuStreamWaitEvent => [3020: cuStreamWaitEvent] ptsz [7000: cuStreamWaitEvent_ptsz];
    cuStreamAddCallback => [5000: cuStreamAddCallback] ptsz [7000: cuStreamAddCallback_ptsz];
    cuLaunchHostFunc => [10000: cuLaunchHostFunc] ptsz [10000: cuLaunchHostFunc_ptsz];
    cuStreamBeginCapture => [10000: cuStreamBeginCapture, 10010: cuStreamBeginCapture_v2] ptsz [10000: cuStreamBeginCapture_ptsz, 10010: cuStreamBeginCapture_v2_ptsz];
    cuStreamEndCapture => [10000: cuStreamEndCapture] ptsz [10000: cuStreamEndCapture_ptsz];
    cuStreamIsCapturing => [10000: cuStreamIsCapturing] ptsz [10000: cuStreamIsCapturing_ptsz];
    cuStreamWriteValue32 => [8000: cuStreamWriteValue32, 11070: cuStreamWriteValue32_v2] ptsz [8000: cuStreamWriteValue32_ptsz, 11070: cuStreamWriteValue32_v2_ptsz];
    cuStreamWaitValue32 => [8000: cuStreamWaitValue32, 11070: cuStreamWaitValue32_v2] ptsz [8000: cuStreamWaitValue32_ptsz, 11070: cuStreamWaitValue32_v2_ptsz];
    cuStreamWriteValue64 => [9000: cuStreamWriteValue64, 11070: cuStreamWriteValue64_v2] ptsz [9000: cuStreamWriteValue64_ptsz, 11070: cuStreamWriteValue64_v2_ptsz];
    cuStreamWaitValue64 => [9000: cuStreamWaitValue64, 11070: cuStreamWaitValue64_v2] ptsz [9000: cuStreamWaitValue64_ptsz, 11070: cuStreamWaitValue64_v2_ptsz];
    cuStreamGetCaptureInfo => [10010: cuStreamGetCaptureInfo, 11030: cuStreamGetCaptureInfo_v2, 12030: cuStreamGetCaptureInfo_v3] ptsz [10010: cuStreamGetCaptureInfo_ptsz, 11030: cuStreamGetCaptureInfo_v2_ptsz, 12030: cuStreamGetCaptureInfo_v3_ptsz];
    cuEventCreate => [2000: cuEventCreate];
    cuEventRecord => [2000: cuEventRecord] ptsz [7000: cuEventRecord_ptsz];
    cuEventQuery => [2000: cuEventQuery];
    cuEventSynchronize => [2000: cuEventSynchronize];
    cuEventElapsedTime => [2000: cuEventElapsedTime, 12080: cuEventElapsedTime_v2];
    cuEventDestroy => [2000: cuEventDestroy, 4000: cuEventDestroy_v2];
    cuGraphCreate => [10000: cuGraphCreate];
    cuGraphAddKernelNode => [10000: cuGraphAddKernelNode, 12000: cuGraphAddKernelNode_v2];
    cuGraphGetNodes => [10000: cuGraphGetNodes];
    cuGraphInstantiate => [10000: cuGraphInstantiate, 11000: cuGraphInstantiate_v2, 12000: cuGraphInstantiateWithFlags];
    cuGraphInstantiateWithFlags => [11040: cuGraphInstantiateWithFlags];
    cuGraphLaunch => [10000: cuGraphLaunch] ptsz [10000: cuGraphLaunch_ptsz];
    cuGraphExecDestroy => [10000: cuGraphExecDestroy];
    cuGraphDestroy => [10000: cuGraphDestroy];
    cuCtxGetLimit => [3010: cuCtxGetLimit];
    cuCtxSetLimit => [3010: cuCtxSetLimit];
    cuCtxGetCacheConfig => [3020: cuCtxGetCacheConfig];
    cuCtxSetCacheConfig => [3020: cuCtxSetCacheConfig];
    cuCtxGetSharedMemConfig => [4020: cuCtxGetSharedMemConfig];
    cuCtxSetSharedMemConfig => [4020: cuCtxSetSharedMemConfig];
    cuCtxResetPersistingL2Cache => [11000: cuCtxResetPersistingL2Cache];
    cuDeviceCanAccessPeer => [4000: cuDeviceCanAccessPeer];
    cuDeviceGetP2PAttribute => [8000: cuDeviceGetP2PAttribute];
    cuCtxEnablePeerAccess => [4000: cuCtxEnablePeerAccess];
    cuCtxDisablePeerAccess => [4000: cuCtxDisablePeerAccess];
    cuMemcpyPeer => [4000: cuMemcpyPeer] ptsz [7000: cuMemcpyPeer_ptds];
    cuMemcpyPeerAsync => [4000: cuMemcpyPeerAsync] ptsz [7000: cuMemcpyPeerAsync_ptsz];
    cuMemcpy2D => [3020: cuMemcpy2D_v2] ptsz [7000: cuMemcpy2D_v2_ptds];
    cuMemcpy2DUnaligned => [3020: cuMemcpy2DUnaligned_v2] ptsz [7000: cuMemcpy2DUnaligned_v2_ptds];
    cuMemcpy2DAsync => [3020: cuMemcpy2DAsync_v2] ptsz [7000: cuMemcpy2DAsync_v2_ptsz];
    cuMemPrefetchAsync => [8000: cuMemPrefetchAsync, 12020: cuMemPrefetchAsync_v2] ptsz [8000: cuMemPrefetchAsync_ptsz, 12020: cuMemPrefetchAsync_v2_ptsz];
    cuMemAdvise => [8000: cuMemAdvise, 12020: cuMemAdvise_v2];
    cuMemHostGetFlags => [2030: cuMemHostGetFlags];
    cuPointerGetAttribute => [4000: cuPointerGetAttribute];
    cuPointerGetAttributes => [7000: cuPointerGetAttributes];
    cuPointerSetAttribute => [6000: cuPointerSetAttribute];
    cuMemGetDefaultMemPool => [13000: cuMemGetDefaultMemPool];
    cuMemGetMemPool => [13000: cuMemGetMemPool];
    cuMemSetMemPool => [13000: cuMemSetMemPool];
    cuMemPoolSetAccess => [11020: cuMemPoolSetAccess];
    cuMemPoolGetAccess => [11020: cuMemPoolGetAccess];
    cuTensorMapEncodeTiled => [12000: cuTensorMapEncodeTiled];
    cuTensorMapEncodeIm2col => [12000: cuTensorMapEncodeIm2col];
    cuTensorMapReplaceAddress => [12000: cuTensorMapReplaceAddress];
    cuOccupancyAvailableDynamicSMemPerBlock => [10020: cuOccupancyAvailableDynamicSMemPerBlock];
    cuOccupancyMaxActiveClusters => [11070: cuOccupancyMaxActiveClusters];
    cuOccupancyMaxPotentialClusterSize => [11070: cuOccupancyMaxPotentialClusterSize];
    cuFuncGetParamInfo => [12040: cuFuncGetParamInfo];
    cuKernelGetParamInfo => [12040: cuKernelGetParamInfo];
    cuFuncIsLoaded => [12040: cuFuncIsLoaded];
    cuFuncLoad => [12040: cuFuncLoad];
    cuEventRecordWithFlags => [11010: cuEventRecordWithFlags] ptsz [11010: cuEventRecordWithFlags_ptsz];
    cuThreadExchangeStreamCaptureMode => [10010: cuThreadExchangeStreamCaptureMode];
    cuStreamGetId => [12000: cuStreamGetId] ptsz [12000: cuStreamGetId_ptsz];
    cuStreamGetDevice => [12080: cuStreamGetDevice] ptsz [12080: cuStreamGetDevice_ptsz];
    cuStreamGetAttribute => [11000: cuStreamGetAttribute] ptsz [11000: cuStreamGetAttribute_ptsz];
    cuStreamSetAttribute => [11000: cuStreamSetAttribute] ptsz [11000: cuStreamSetAttribute_ptsz];
    cuStreamCopyAttributes => [11000: cuStreamCopyAttributes] ptsz [11000: cuStreamCopyAttributes_ptsz];
    cuStreamBatchMemOp => [8000: cuStreamBatchMemOp, 11070: cuStreamBatchMemOp_v2] ptsz [8000: cuStreamBatchMemOp_ptsz, 11070: cuStreamBatchMemOp_v2_ptsz];
    cuGraphUpload => [11010: cuGraphUpload] ptsz [11010: cuGraphUpload_ptsz];
    cuUserObjectCreate => [11030: cuUserObjectCreate];
    cuUserObjectRetain => [11030: cuUserObjectRetain];
    cuUserObjectRelease => [11030: cuUserObjectRelease];
    cuGraphRetainUserObject => [11030: cuGraphRetainUserObject];
    cuGraphReleaseUserObject => [11030: cuGraphReleaseUserObject];
    cuGraphInstantiateWithParams => [12000: cuGraphInstantiateWithParams] ptsz [12000: cuGraphInstantiateWithParams_ptsz];
    cuGraphExecGetFlags => [12000: cuGraphExecGetFlags];
    cuGraphNodeGetType => [10000: cuGraphNodeGetType];
    cuGraphKernelNodeGetParams => [10000: cuGraphKernelNodeGetParams, 12000: cuGraphKernelNodeGetParams_v2];
    cuGraphExecKernelNodeSetParams => [10010: cuGraphExecKernelNodeSetParams, 12000: cuGraphExecKernelNodeSetParams_v2];
    cuGraphAddEmptyNode => [10000: cuGraphAddEmptyNode];
    cuDeviceGetGraphMemAttribute => [11040: cuDeviceGetGraphMemAttribute];
    cuDeviceSetGraphMemAttribute => [11040: cuDeviceSetGraphMemAttribute];
    cuDeviceGraphMemTrim => [11040: cuDeviceGraphMemTrim];
    // What the CUDA 13 runtime and NVIDIA's libraries look up at start
    // besides the above (features a simulated device lacks included).
    cuArray3DGetDescriptor => [2000: cuArray3DGetDescriptor, 3020: cuArray3DGetDescriptor_v2];
    cuArrayGetDescriptor => [2000: cuArrayGetDescriptor, 3020: cuArrayGetDescriptor_v2];
    cuArrayGetMemoryRequirements => [11060: cuArrayGetMemoryRequirements];
    cuArrayGetPlane => [11020: cuArrayGetPlane];
    cuArrayGetSparseProperties => [11010: cuArrayGetSparseProperties];
    cuCtxDetach => [2000: cuCtxDetach];
    cuCtxGetDevResource => [12040: cuCtxGetDevResource];
    cuCtxRecordEvent => [12050: cuCtxRecordEvent];
    cuCtxWaitEvent => [12050: cuCtxWaitEvent];
    cuDestroyExternalMemory => [10000: cuDestroyExternalMemory];
    cuDestroyExternalSemaphore => [10000: cuDestroyExternalSemaphore];
    cuDeviceGetByPCIBusId => [4010: cuDeviceGetByPCIBusId];
    cuDeviceGetHostAtomicCapabilities => [13000: cuDeviceGetHostAtomicCapabilities];
    cuDeviceGetNvSciSyncAttributes => [10020: cuDeviceGetNvSciSyncAttributes];
    cuDeviceGetP2PAtomicCapabilities => [13000: cuDeviceGetP2PAtomicCapabilities];
    cuDeviceGetTexture1DLinearMaxWidth => [11010: cuDeviceGetTexture1DLinearMaxWidth];
    cuDeviceRegisterAsyncNotification => [12040: cuDeviceRegisterAsyncNotification];
    cuDeviceUnregisterAsyncNotification => [12040: cuDeviceUnregisterAsyncNotification];
    cuEGLStreamConsumerAcquireFrame => [7000: cuEGLStreamConsumerAcquireFrame];
    cuEGLStreamConsumerConnect => [7000: cuEGLStreamConsumerConnect];
    cuEGLStreamConsumerConnectWithFlags => [8000: cuEGLStreamConsumerConnectWithFlags];
    cuEGLStreamConsumerDisconnect => [7000: cuEGLStreamConsumerDisconnect];
    cuEGLStreamConsumerReleaseFrame => [7000: cuEGLStreamConsumerReleaseFrame];
    cuEGLStreamProducerConnect => [7000: cuEGLStreamProducerConnect];
    cuEGLStreamProducerDisconnect => [7000: cuEGLStreamProducerDisconnect];
    cuEGLStreamProducerPresentFrame => [7000: cuEGLStreamProducerPresentFrame];
    cuEGLStreamProducerReturnFrame => [7000: cuEGLStreamProducerReturnFrame];
    cuExternalMemoryGetMappedBuffer => [10000: cuExternalMemoryGetMappedBuffer];
    cuExternalMemoryGetMappedMipmappedArray => [10000: cuExternalMemoryGetMappedMipmappedArray];
    cuFlushGPUDirectRDMAWrites => [11030: cuFlushGPUDirectRDMAWrites];
    cuFuncSetSharedMemConfig => [4020: cuFuncSetSharedMemConfig];
    cuGLCtxCreate => [2000: cuGLCtxCreate, 3020: cuGLCtxCreate_v2];
    cuGLGetDevices => [4010: cuGLGetDevices, 6050: cuGLGetDevices_v2];
    cuGLInit => [2000: cuGLInit];
    cuGLMapBufferObject => [2000: cuGLMapBufferObject, 3020: cuGLMapBufferObject_v2] ptsz [7000: cuGLMapBufferObject_v2_ptds];
    cuGLMapBufferObjectAsync => [2030: cuGLMapBufferObjectAsync, 3020: cuGLMapBufferObjectAsync_v2] ptsz [7000: cuGLMapBufferObjectAsync_v2_ptsz];
    cuGLRegisterBufferObject => [2000: cuGLRegisterBufferObject];
    cuGLSetBufferObjectMapFlags => [2030: cuGLSetBufferObjectMapFlags];
    cuGLUnmapBufferObject => [2000: cuGLUnmapBufferObject];
    cuGLUnmapBufferObjectAsync => [2030: cuGLUnmapBufferObjectAsync];
    cuGLUnregisterBufferObject => [2000: cuGLUnregisterBufferObject];
    cuGraphAddChildGraphNode => [10000: cuGraphAddChildGraphNode];
    cuGraphAddDependencies => [10000: cuGraphAddDependencies, 12030: cuGraphAddDependencies_v2];
    cuGraphAddEventRecordNode => [11010: cuGraphAddEventRecordNode];
    cuGraphAddEventWaitNode => [11010: cuGraphAddEventWaitNode];
    cuGraphAddExternalSemaphoresSignalNode => [11020: cuGraphAddExternalSemaphoresSignalNode];
    cuGraphAddExternalSemaphoresWaitNode => [11020: cuGraphAddExternalSemaphoresWaitNode];
    cuGraphAddHostNode => [10000: cuGraphAddHostNode];
    cuGraphAddMemAllocNode => [11040: cuGraphAddMemAllocNode];
    cuGraphAddMemFreeNode => [11040: cuGraphAddMemFreeNode];
    cuGraphAddMemcpyNode => [10000: cuGraphAddMemcpyNode];
    cuGraphAddMemsetNode => [10000: cuGraphAddMemsetNode];
    cuGraphAddNode => [12020: cuGraphAddNode, 12030: cuGraphAddNode_v2, 13040: cuGraphAddNode_v3];
    cuGraphChildGraphNodeGetGraph => [10000: cuGraphChildGraphNodeGetGraph];
    cuGraphClone => [10000: cuGraphClone];
    cuGraphConditionalHandleCreate => [12030: cuGraphConditionalHandleCreate];
    cuGraphDebugDotPrint => [11030: cuGraphDebugDotPrint];
    cuGraphDestroyNode => [10000: cuGraphDestroyNode];
    cuGraphEventRecordNodeGetEvent => [11010: cuGraphEventRecordNodeGetEvent];
    cuGraphEventRecordNodeSetEvent => [11010: cuGraphEventRecordNodeSetEvent];
    cuGraphEventWaitNodeGetEvent => [11010: cuGraphEventWaitNodeGetEvent];
    cuGraphEventWaitNodeSetEvent => [11010: cuGraphEventWaitNodeSetEvent];
    cuGraphExecChildGraphNodeSetParams => [11010: cuGraphExecChildGraphNodeSetParams];
    cuGraphExecEventRecordNodeSetEvent => [11010: cuGraphExecEventRecordNodeSetEvent];
    cuGraphExecEventWaitNodeSetEvent => [11010: cuGraphExecEventWaitNodeSetEvent];
    cuGraphExecExternalSemaphoresSignalNodeSetParams => [11020: cuGraphExecExternalSemaphoresSignalNodeSetParams];
    cuGraphExecExternalSemaphoresWaitNodeSetParams => [11020: cuGraphExecExternalSemaphoresWaitNodeSetParams];
    cuGraphExecHostNodeSetParams => [10020: cuGraphExecHostNodeSetParams];
    cuGraphExecMemcpyNodeSetParams => [10020: cuGraphExecMemcpyNodeSetParams];
    cuGraphExecMemsetNodeSetParams => [10020: cuGraphExecMemsetNodeSetParams];
    cuGraphExecNodeSetParams => [12020: cuGraphExecNodeSetParams];
    cuGraphExecUpdate => [10020: cuGraphExecUpdate, 12000: cuGraphExecUpdate_v2];
    cuGraphExternalSemaphoresSignalNodeGetParams => [11020: cuGraphExternalSemaphoresSignalNodeGetParams];
    cuGraphExternalSemaphoresSignalNodeSetParams => [11020: cuGraphExternalSemaphoresSignalNodeSetParams];
    cuGraphExternalSemaphoresWaitNodeGetParams => [11020: cuGraphExternalSemaphoresWaitNodeGetParams];
    cuGraphExternalSemaphoresWaitNodeSetParams => [11020: cuGraphExternalSemaphoresWaitNodeSetParams];
    cuGraphGetEdges => [10000: cuGraphGetEdges, 12030: cuGraphGetEdges_v2];
    cuGraphGetRootNodes => [10000: cuGraphGetRootNodes];
    cuGraphHostNodeGetParams => [10000: cuGraphHostNodeGetParams];
    cuGraphHostNodeSetParams => [10000: cuGraphHostNodeSetParams];
    cuGraphKernelNodeCopyAttributes => [11000: cuGraphKernelNodeCopyAttributes];
    cuGraphKernelNodeGetAttribute => [11000: cuGraphKernelNodeGetAttribute];
    cuGraphKernelNodeSetAttribute => [11000: cuGraphKernelNodeSetAttribute];
    cuGraphKernelNodeSetParams => [10000: cuGraphKernelNodeSetParams, 12000: cuGraphKernelNodeSetParams_v2];
    cuGraphMemAllocNodeGetParams => [11040: cuGraphMemAllocNodeGetParams];
    cuGraphMemFreeNodeGetParams => [11040: cuGraphMemFreeNodeGetParams];
    cuGraphMemcpyNodeGetParams => [10000: cuGraphMemcpyNodeGetParams];
    cuGraphMemcpyNodeSetParams => [10000: cuGraphMemcpyNodeSetParams];
    cuGraphMemsetNodeGetParams => [10000: cuGraphMemsetNodeGetParams];
    cuGraphMemsetNodeSetParams => [10000: cuGraphMemsetNodeSetParams];
    cuGraphNodeFindInClone => [10000: cuGraphNodeFindInClone];
    cuGraphNodeGetDependencies => [10000: cuGraphNodeGetDependencies, 12030: cuGraphNodeGetDependencies_v2];
    cuGraphNodeGetDependentNodes => [10000: cuGraphNodeGetDependentNodes, 12030: cuGraphNodeGetDependentNodes_v2];
    cuGraphNodeGetEnabled => [11060: cuGraphNodeGetEnabled];
    cuGraphNodeSetEnabled => [11060: cuGraphNodeSetEnabled];
    cuGraphNodeSetParams => [12020: cuGraphNodeSetParams, 13040: cuGraphNodeSetParams_v2];
    cuGraphRemoveDependencies => [10000: cuGraphRemoveDependencies, 12030: cuGraphRemoveDependencies_v2];
    cuGraphicsEGLRegisterImage => [7000: cuGraphicsEGLRegisterImage];
    cuGraphicsGLRegisterBuffer => [3000: cuGraphicsGLRegisterBuffer];
    cuGraphicsGLRegisterImage => [3000: cuGraphicsGLRegisterImage];
    cuGraphicsMapResources => [3000: cuGraphicsMapResources] ptsz [7000: cuGraphicsMapResources_ptsz];
    cuGraphicsResourceGetMappedEglFrame => [7000: cuGraphicsResourceGetMappedEglFrame];
    cuGraphicsResourceGetMappedMipmappedArray => [5000: cuGraphicsResourceGetMappedMipmappedArray];
    cuGraphicsResourceGetMappedPointer => [3000: cuGraphicsResourceGetMappedPointer, 3020: cuGraphicsResourceGetMappedPointer_v2];
    cuGraphicsResourceSetMapFlags => [3000: cuGraphicsResourceSetMapFlags, 6050: cuGraphicsResourceSetMapFlags_v2];
    cuGraphicsSubResourceGetMappedArray => [3000: cuGraphicsSubResourceGetMappedArray];
    cuGraphicsUnmapResources => [3000: cuGraphicsUnmapResources] ptsz [7000: cuGraphicsUnmapResources_ptsz];
    cuGraphicsUnregisterResource => [3000: cuGraphicsUnregisterResource];
    cuGraphicsVDPAURegisterOutputSurface => [3010: cuGraphicsVDPAURegisterOutputSurface];
    cuGraphicsVDPAURegisterVideoSurface => [3010: cuGraphicsVDPAURegisterVideoSurface];
    cuGreenCtxGetId => [12090: cuGreenCtxGetId];
    cuGreenCtxRecordEvent => [12040: cuGreenCtxRecordEvent];
    cuGreenCtxWaitEvent => [12040: cuGreenCtxWaitEvent];
    cuImportExternalMemory => [10000: cuImportExternalMemory];
    cuImportExternalSemaphore => [10000: cuImportExternalSemaphore];
    cuIpcCloseMemHandle => [4010: cuIpcCloseMemHandle];
    cuIpcGetEventHandle => [4010: cuIpcGetEventHandle];
    cuIpcGetMemHandle => [4010: cuIpcGetMemHandle];
    cuIpcOpenEventHandle => [4010: cuIpcOpenEventHandle];
    cuIpcOpenMemHandle => [4010: cuIpcOpenMemHandle, 11000: cuIpcOpenMemHandle_v2];
    cuLibraryGetManaged => [12000: cuLibraryGetManaged];
    cuLibraryGetUnifiedFunction => [12000: cuLibraryGetUnifiedFunction];
    cuLogsCurrent => [12090: cuLogsCurrent];
    cuLogsDumpToFile => [12090: cuLogsDumpToFile];
    cuLogsDumpToMemory => [12090: cuLogsDumpToMemory];
    cuMemDiscardAndPrefetchBatchAsync => [13000: cuMemDiscardAndPrefetchBatchAsync] ptsz [13000: cuMemDiscardAndPrefetchBatchAsync_ptsz];
    cuMemDiscardBatchAsync => [13000: cuMemDiscardBatchAsync] ptsz [13000: cuMemDiscardBatchAsync_ptsz];
    cuMemPoolExportPointer => [11020: cuMemPoolExportPointer];
    cuMemPoolExportToShareableHandle => [11020: cuMemPoolExportToShareableHandle];
    cuMemPoolImportFromShareableHandle => [11020: cuMemPoolImportFromShareableHandle];
    cuMemPoolImportPointer => [11020: cuMemPoolImportPointer];
    cuMemPrefetchBatchAsync => [13000: cuMemPrefetchBatchAsync] ptsz [13000: cuMemPrefetchBatchAsync_ptsz];
    cuMemRangeGetAttribute => [8000: cuMemRangeGetAttribute];
    cuMemRangeGetAttributes => [8000: cuMemRangeGetAttributes];
    cuMemcpy3D => [2000: cuMemcpy3D, 3020: cuMemcpy3D_v2] ptsz [7000: cuMemcpy3D_v2_ptds];
    cuMemcpy3DAsync => [2000: cuMemcpy3DAsync, 3020: cuMemcpy3DAsync_v2] ptsz [7000: cuMemcpy3DAsync_v2_ptsz];
    cuMemcpy3DBatchAsync => [12080: cuMemcpy3DBatchAsync, 13000: cuMemcpy3DBatchAsync_v2] ptsz [12080: cuMemcpy3DBatchAsync_ptsz, 13000: cuMemcpy3DBatchAsync_v2_ptsz];
    cuMemcpy3DPeer => [4000: cuMemcpy3DPeer] ptsz [7000: cuMemcpy3DPeer_ptds];
    cuMemcpy3DPeerAsync => [4000: cuMemcpy3DPeerAsync] ptsz [7000: cuMemcpy3DPeerAsync_ptsz];
    cuMemcpyBatchAsync => [12080: cuMemcpyBatchAsync, 13000: cuMemcpyBatchAsync_v2] ptsz [12080: cuMemcpyBatchAsync_ptsz, 13000: cuMemcpyBatchAsync_v2_ptsz];
    cuMemsetD2D8 => [2000: cuMemsetD2D8, 3020: cuMemsetD2D8_v2] ptsz [7000: cuMemsetD2D8_v2_ptds];
    cuMemsetD2D8Async => [3020: cuMemsetD2D8Async] ptsz [7000: cuMemsetD2D8Async_ptsz];
    cuGraphGetId => [13010: cuGraphGetId];
    cuGraphExecGetId => [13010: cuGraphExecGetId];
    cuGraphNodeGetContainingGraph => [13010: cuGraphNodeGetContainingGraph];
    cuGraphNodeGetLocalId => [13010: cuGraphNodeGetLocalId];
    cuGraphNodeGetToolsId => [13010: cuGraphNodeGetToolsId];
    cuGraphNodeGetParams => [13020: cuGraphNodeGetParams];
    cuFuncGetParamCount => [13020: cuFuncGetParamCount];
    cuKernelGetParamCount => [13020: cuKernelGetParamCount];
    cuMemcpyWithAttributesAsync => [13020: cuMemcpyWithAttributesAsync] ptsz [13020: cuMemcpyWithAttributesAsync_ptsz];
    cuMemcpy3DWithAttributesAsync => [13020: cuMemcpy3DWithAttributesAsync] ptsz [13020: cuMemcpy3DWithAttributesAsync_ptsz];
    cuMemsetD16 => [2000: cuMemsetD16, 3020: cuMemsetD16_v2] ptsz [7000: cuMemsetD16_v2_ptds];
    cuMemsetD16Async => [3020: cuMemsetD16Async] ptsz [7000: cuMemsetD16Async_ptsz];
    cuMemsetD2D16 => [2000: cuMemsetD2D16, 3020: cuMemsetD2D16_v2] ptsz [7000: cuMemsetD2D16_v2_ptds];
    cuMemsetD2D16Async => [3020: cuMemsetD2D16Async] ptsz [7000: cuMemsetD2D16Async_ptsz];
    cuMemsetD2D32 => [2000: cuMemsetD2D32, 3020: cuMemsetD2D32_v2] ptsz [7000: cuMemsetD2D32_v2_ptds];
    cuMemsetD2D32Async => [3020: cuMemsetD2D32Async] ptsz [7000: cuMemsetD2D32Async_ptsz];
    cuMipmappedArrayGetLevel => [5000: cuMipmappedArrayGetLevel];
    cuMipmappedArrayGetMemoryRequirements => [11060: cuMipmappedArrayGetMemoryRequirements];
    cuMipmappedArrayGetSparseProperties => [11010: cuMipmappedArrayGetSparseProperties];
    cuModuleGetSurfRef => [3000: cuModuleGetSurfRef];
    cuModuleGetTexRef => [2000: cuModuleGetTexRef];
    cuProfilerInitialize => [4000: cuProfilerInitialize];
    cuProfilerStart => [4000: cuProfilerStart];
    cuProfilerStop => [4000: cuProfilerStop];
    cuSignalExternalSemaphoresAsync => [10000: cuSignalExternalSemaphoresAsync] ptsz [10000: cuSignalExternalSemaphoresAsync_ptsz];
    cuStreamAttachMemAsync => [6000: cuStreamAttachMemAsync] ptsz [7000: cuStreamAttachMemAsync_ptsz];
    cuStreamBeginCaptureToGraph => [12030: cuStreamBeginCaptureToGraph] ptsz [12030: cuStreamBeginCaptureToGraph_ptsz];
    cuStreamUpdateCaptureDependencies => [11030: cuStreamUpdateCaptureDependencies, 12030: cuStreamUpdateCaptureDependencies_v2] ptsz [11030: cuStreamUpdateCaptureDependencies_ptsz, 12030: cuStreamUpdateCaptureDependencies_v2_ptsz];
    cuSurfObjectCreate => [5000: cuSurfObjectCreate];
    cuSurfObjectDestroy => [5000: cuSurfObjectDestroy];
    cuSurfObjectGetResourceDesc => [5000: cuSurfObjectGetResourceDesc];
    cuTexObjectCreate => [5000: cuTexObjectCreate];
    cuTexObjectDestroy => [5000: cuTexObjectDestroy];
    cuTexObjectGetResourceDesc => [5000: cuTexObjectGetResourceDesc];
    cuTexObjectGetResourceViewDesc => [5000: cuTexObjectGetResourceViewDesc];
    cuTexObjectGetTextureDesc => [5000: cuTexObjectGetTextureDesc];
    cuVDPAUCtxCreate => [3010: cuVDPAUCtxCreate, 3020: cuVDPAUCtxCreate_v2];
    cuVDPAUGetDevice => [3010: cuVDPAUGetDevice];
    cuWaitExternalSemaphoresAsync => [10000: cuWaitExternalSemaphoresAsync] ptsz [10000: cuWaitExternalSemaphoresAsync_ptsz];
}

pub fn table() -> &'static [Entry] {
    static TABLE: OnceLock<Vec<Entry>> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// Outcome of a lookup, as `CUdriverProcAddressQueryResult` reports it.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Found(&'static Variant),
    NotFound,
    VersionNotSufficient,
}

pub fn lookup(name: &str, cuda_version: i32, per_thread: bool) -> Lookup {
    let Some(entry) = table().iter().find(|e| e.name == name) else { return Lookup::NotFound };
    let newest = |list: &'static [Variant]| list.iter().filter(|v| v.version <= cuda_version).max_by_key(|v| v.version);
    let pick = if per_thread { newest(&entry.per_thread).or_else(|| newest(&entry.normal)) } else { newest(&entry.normal) };
    match pick {
        Some(v) => Lookup::Found(v),
        None => Lookup::VersionNotSufficient,
    }
}

unsafe fn get_proc_address(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64, status: *mut c_int) -> CUresult {
    guard(|| {
        if pfn.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        // SAFETY: checked non-null; valid for writes by cuda.h's contract.
        unsafe { out(pfn, std::ptr::null_mut())? };
        // SAFETY: `symbol` is a NUL-terminated name by cuda.h's contract (null is checked).
        let name = unsafe { cstr(symbol) }?.to_str().map_err(|_| CUDA_ERROR_NOT_FOUND);
        if flags & !(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let per_thread = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM != 0;
        let result = match name {
            Ok(n) => lookup(n, cuda_version, per_thread),
            Err(_) => Lookup::NotFound,
        };
        // SAFETY (all three): `status` may be null (checked by out_opt) and is otherwise writable.
        match result {
            Lookup::Found(v) => {
                unsafe { out_opt(status, CU_GET_PROC_ADDRESS_SUCCESS) };
                unsafe { out(pfn, v.addr as *mut c_void) }
            }
            Lookup::NotFound => {
                crate::log::simgpu_debug!("cuGetProcAddress: {} not found", name.unwrap_or("(not UTF-8)"));
                unsafe { out_opt(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) };
                Err(CUDA_ERROR_NOT_FOUND)
            }
            Lookup::VersionNotSufficient => {
                unsafe { out_opt(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) };
                Err(CUDA_ERROR_NOT_FOUND)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    cuda_version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CUresult {
    // SAFETY: forwarding the caller's arguments under the same contract.
    unsafe { get_proc_address(symbol, pfn, cuda_version, flags, status) }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, cuda_version: c_int, flags: u64) -> CUresult {
    // SAFETY: forwarding the caller's arguments; no status pointer.
    unsafe { get_proc_address(symbol, pfn, cuda_version, flags, std::ptr::null_mut()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, v: i32, pt: bool) -> Option<&'static str> {
        match lookup(name, v, pt) {
            Lookup::Found(v) => Some(v.symbol),
            _ => None,
        }
    }

    #[test]
    fn picks_the_newest_variant_not_newer_than_asked() {
        assert_eq!(sym("cuMemAlloc", 3020, false), Some("cuMemAlloc_v2"));
        assert_eq!(sym("cuMemAlloc", 2000, false), Some("cuMemAlloc"));
        assert_eq!(sym("cuMemAlloc", 13000, false), Some("cuMemAlloc_v2"));
        assert_eq!(sym("cuCtxCreate", 12050, false), Some("cuCtxCreate_v4"));
        assert_eq!(sym("cuCtxCreate", 12000, false), Some("cuCtxCreate_v3"));
        assert_eq!(sym("cuGraphInstantiate", 12000, false), Some("cuGraphInstantiateWithFlags"));
        assert_eq!(sym("cuGetProcAddress", 12000, false), Some("cuGetProcAddress_v2"));
        assert_eq!(sym("cuCtxSynchronize", 12090, false), Some("cuCtxSynchronize"));
        assert_eq!(sym("cuCtxSynchronize", 13000, false), Some("cuCtxSynchronize_v2"));
        assert_eq!(lookup("cuMemAllocAsync", 11000, false), Lookup::VersionNotSufficient);
        assert_eq!(lookup("cuNoSuchThing", 13000, false), Lookup::NotFound);
    }

    #[test]
    fn per_thread_flag_selects_ptsz_forms() {
        assert_eq!(sym("cuLaunchKernel", 12000, true), Some("cuLaunchKernel_ptsz"));
        assert_eq!(sym("cuMemcpyHtoD", 12000, true), Some("cuMemcpyHtoD_v2_ptds"));
        assert_eq!(sym("cuStreamBeginCapture", 10010, true), Some("cuStreamBeginCapture_v2_ptsz"));
        // No per-thread form: the normal one.
        assert_eq!(sym("cuMemAlloc", 12000, true), Some("cuMemAlloc_v2"));
        // Per-thread form newer than asked: fall back.
        assert_eq!(sym("cuLaunchKernel", 4000, true), Some("cuLaunchKernel"));
    }

    /// The typedef headers' text: `cudaTypedefs.h` (scripts/setup.sh puts
    /// it in .deps/include) and the interop ones (OpenGL, EGL, VDPAU,
    /// profiler) that NVIDIA's runtime wheel ships beside it.
    fn typedef_headers() -> String {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let main = root.join(".deps/include/cudaTypedefs.h");
        let mut text = std::fs::read_to_string(&main).unwrap_or_else(|e| panic!("{}: {e}: run scripts/setup.sh", main.display()));
        let wheel = root.join(".deps/jax-venv/lib/python3.11/site-packages/nvidia/cu13/include");
        for name in ["cudaGLTypedefs.h", "cudaEGLTypedefs.h", "cudaVDPAUTypedefs.h", "cudaProfilerTypedefs.h"] {
            let path = wheel.join(name);
            text += &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}: run scripts/setup.sh", path.display()));
        }
        text
    }

    #[test]
    fn every_variant_is_a_typedef_of_its_version() {
        // `PFN_<name>_v<version>[_ptsz|_ptds]` is how the headers name the
        // variant of <name> that appeared in <version>.
        let text = typedef_headers();
        let mut missing = Vec::new();
        for e in table() {
            let normal = e.normal.iter().map(|v| (v, String::new()));
            let per_thread = e.per_thread.iter().map(|v| (v, v.symbol[v.symbol.len() - 5..].to_string()));
            for (v, suffix) in normal.chain(per_thread) {
                let typedef = format!("PFN_{}_v{}{})(", e.name, v.version, suffix);
                // cuda.h maps cuGraphInstantiate to cuGraphInstantiateWithFlags
                // from 12.0; the header names no typedef for that.
                if !text.contains(&typedef) && v.symbol != "cuGraphInstantiateWithFlags" {
                    missing.push(format!("{} ({})", typedef, v.symbol));
                }
            }
        }
        assert!(missing.is_empty(), "no such typedef: {missing:?}");
    }

    #[test]
    fn every_name_is_unique_and_versions_ascend() {
        let t = table();
        for (i, e) in t.iter().enumerate() {
            assert!(t[i + 1..].iter().all(|o| o.name != e.name), "{} twice", e.name);
            assert!(e.normal.windows(2).all(|w| w[0].version < w[1].version), "{}", e.name);
            assert!(e.normal.iter().chain(&e.per_thread).all(|v| v.symbol.starts_with(e.name) || e.name == "cuGraphInstantiate"));
        }
    }
}
