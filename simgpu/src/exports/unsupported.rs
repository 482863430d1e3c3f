//! Entry points for features simgpu's devices report they lack, answered
//! `CUDA_ERROR_NOT_SUPPORTED` as a real driver answers on such a device:
//! multicast objects (`CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED` is 0),
//! dma-buf handles for address ranges (`DMA_BUF_SUPPORTED` is 0; NCCL asks), green
//! contexts and SM resource partitions, and driver log callbacks. They
//! exist so that a framework that looks every entry point up at start
//! (PyTorch does, through `cudaGetDriverEntryPoint`; cuBLASLt 13.10 does with
//! `dlsym` on `libcuda.so.1`, and fails handle creation when one is missing)
//! finds them, and falls back when it calls one. Their arguments are not read; each is one
//! machine word, as every argument of these functions is passed.

use crate::driver::driver;
use crate::ffi::cu_export;
use abi::cuda::*;

macro_rules! not_supported {
    ($($name:ident($($arg:ident),*);)*) => {$(
        cu_export!($name($($arg: usize),*) {
            $(let _ = $arg;)*
            driver()?;
            Err(CUDA_ERROR_NOT_SUPPORTED)
        });
    )*};
}

not_supported! {
    cuMemGetHandleForAddressRange(handle_out, device_pointer, size, handle_type, flags);
    cuMulticastAddDevice(multicast, device);
    cuMulticastBindMem(multicast, multicast_offset, memory, memory_offset, size, flags);
    cuMulticastBindMem_v2(multicast, device, multicast_offset, memory, memory_offset, size, flags);
    cuMulticastBindAddr(multicast, multicast_offset, address, size, flags);
    cuMulticastBindAddr_v2(multicast, device, multicast_offset, address, size, flags);
    cuMulticastUnbind(multicast, device, multicast_offset, size);
    cuGreenCtxCreate(green_context_out, description, device, flags);
    cuGreenCtxDestroy(green_context);
    cuCtxFromGreenCtx(context_out, green_context);
    cuGreenCtxStreamCreate(stream_out, green_context, flags, priority);
    cuGreenCtxGetDevResource(green_context, resource_out, kind);
    cuDevSmResourceSplitByCount(result, groups, input, remaining, flags, min_count);
    cuDevResourceGenerateDesc(description_out, resources, count);
    cuLogsRegisterCallback(callback, user_data, handle_out);
    cuLogsUnregisterCallback(handle);
}
