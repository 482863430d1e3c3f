//! Entry points for what a simulated device cannot offer, answered as a
//! real driver answers where the feature is absent, so that a library that
//! looks every entry point up at start (the CUDA runtime does, through
//! `cuGetProcAddress`) finds them and falls back when it calls one:
//! - graphics interop (OpenGL, VDPAU, EGL): no graphics API context can be
//!   current with simgpu, so registering or connecting anything fails with
//!   `CUDA_ERROR_INVALID_GRAPHICS_CONTEXT`, and no graphics resource or EGL
//!   stream connection can exist, so a call on one fails with
//!   `CUDA_ERROR_INVALID_HANDLE`;
//! - external memory and semaphores (Vulkan, Direct3D, NvSciBuf/NvSciSync):
//!   importing is `CUDA_ERROR_NOT_SUPPORTED`, and no imported object can
//!   exist, so calls on one are `CUDA_ERROR_INVALID_HANDLE`;
//! - CUDA IPC: `CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED` is 0, and device
//!   memory here is process-private host memory (the heap is a private
//!   mapping, not a shareable file), so memory and event handles cannot be
//!   made or opened: `CUDA_ERROR_NOT_SUPPORTED`; so are pools' shareable
//!   handles and exported pointers (pool memory is process-private too,
//!   although `CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES` offers
//!   POSIX file descriptors, as `cuMemCreate`'s memory can be shared);
//! - green contexts, device resources, driver logs and asynchronous
//!   notifications: `CUDA_ERROR_NOT_SUPPORTED`, as in [`super::unsupported`];
//! - texture and surface references (no module declares one here):
//!   `CUDA_ERROR_NOT_FOUND`; sparse, planar and deferred-mapping array
//!   queries: `CUDA_ERROR_INVALID_VALUE`, the answer for an array that is
//!   not one (simgpu's arrays keep their size only, not their creation
//!   flags, so a sparse array cannot be told apart).
//!
//! Arguments are read only as far as the answer needs: a null out-pointer
//! is `CUDA_ERROR_INVALID_VALUE` first, as the driver checks it first.
//! Every argument of these functions is one machine word.

use crate::driver::driver;
use crate::ffi::cu_export;
use abi::cuda::*;

/// `CUDA_ERROR_INVALID_GRAPHICS_CONTEXT`.
const INVALID_GRAPHICS_CONTEXT: CUresult = 219;

macro_rules! absent {
    ($($code:expr => $name:ident($($arg:ident),*) $(nonnull[$($nn:ident),*])?;)*) => {$(
        cu_export!($name($($arg: usize),*) {
            $(let _ = $arg;)*
            driver()?;
            $($(if $nn == 0 { return Err(CUDA_ERROR_INVALID_VALUE); })*)?
            Err($code)
        });
    )*};
}

absent! {
    // ---- OpenGL ---------------------------------------------------------
    INVALID_GRAPHICS_CONTEXT => cuGLGetDevices(count, devices, devices_size, which) nonnull[count];
    INVALID_GRAPHICS_CONTEXT => cuGLGetDevices_v2(count, devices, devices_size, which) nonnull[count];
    INVALID_GRAPHICS_CONTEXT => cuGLCtxCreate(ctx_out, flags, device) nonnull[ctx_out];
    INVALID_GRAPHICS_CONTEXT => cuGLCtxCreate_v2(ctx_out, flags, device) nonnull[ctx_out];
    INVALID_GRAPHICS_CONTEXT => cuGraphicsGLRegisterBuffer(resource_out, buffer, flags) nonnull[resource_out];
    INVALID_GRAPHICS_CONTEXT => cuGraphicsGLRegisterImage(resource_out, image, target, flags) nonnull[resource_out];
    INVALID_GRAPHICS_CONTEXT => cuGLRegisterBufferObject(buffer);
    INVALID_GRAPHICS_CONTEXT => cuGLUnregisterBufferObject(buffer);
    INVALID_GRAPHICS_CONTEXT => cuGLMapBufferObject(dptr, size, buffer);
    INVALID_GRAPHICS_CONTEXT => cuGLMapBufferObject_v2(dptr, size, buffer);
    INVALID_GRAPHICS_CONTEXT => cuGLMapBufferObject_v2_ptds(dptr, size, buffer);
    INVALID_GRAPHICS_CONTEXT => cuGLMapBufferObjectAsync(dptr, size, buffer, stream);
    INVALID_GRAPHICS_CONTEXT => cuGLMapBufferObjectAsync_v2(dptr, size, buffer, stream);
    INVALID_GRAPHICS_CONTEXT => cuGLMapBufferObjectAsync_v2_ptsz(dptr, size, buffer, stream);
    INVALID_GRAPHICS_CONTEXT => cuGLUnmapBufferObject(buffer);
    INVALID_GRAPHICS_CONTEXT => cuGLUnmapBufferObjectAsync(buffer, stream);
    INVALID_GRAPHICS_CONTEXT => cuGLSetBufferObjectMapFlags(buffer, flags);
    // ---- VDPAU ----------------------------------------------------------
    INVALID_GRAPHICS_CONTEXT => cuVDPAUGetDevice(device_out, vdp_device, vdp_get_proc_address) nonnull[device_out];
    INVALID_GRAPHICS_CONTEXT => cuVDPAUCtxCreate(ctx_out, flags, device, vdp_device, vdp_get_proc_address) nonnull[ctx_out];
    INVALID_GRAPHICS_CONTEXT => cuVDPAUCtxCreate_v2(ctx_out, flags, device, vdp_device, vdp_get_proc_address) nonnull[ctx_out];
    INVALID_GRAPHICS_CONTEXT => cuGraphicsVDPAURegisterVideoSurface(resource_out, surface, flags) nonnull[resource_out];
    INVALID_GRAPHICS_CONTEXT => cuGraphicsVDPAURegisterOutputSurface(resource_out, surface, flags) nonnull[resource_out];
    // ---- EGL ------------------------------------------------------------
    INVALID_GRAPHICS_CONTEXT => cuGraphicsEGLRegisterImage(resource_out, image, flags) nonnull[resource_out];
    INVALID_GRAPHICS_CONTEXT => cuEGLStreamConsumerConnect(connection_out, stream) nonnull[connection_out];
    INVALID_GRAPHICS_CONTEXT => cuEGLStreamConsumerConnectWithFlags(connection_out, stream, flags) nonnull[connection_out];
    INVALID_GRAPHICS_CONTEXT => cuEGLStreamProducerConnect(connection_out, stream, width, height) nonnull[connection_out];
    CUDA_ERROR_INVALID_HANDLE => cuEGLStreamConsumerDisconnect(connection);
    CUDA_ERROR_INVALID_HANDLE => cuEGLStreamConsumerAcquireFrame(connection, resource_out, stream_out, timeout);
    CUDA_ERROR_INVALID_HANDLE => cuEGLStreamConsumerReleaseFrame(connection, resource, stream_in);
    CUDA_ERROR_INVALID_HANDLE => cuEGLStreamProducerDisconnect(connection);
    CUDA_ERROR_INVALID_HANDLE => cuEGLStreamProducerPresentFrame(connection, frame, stream_in);
    CUDA_ERROR_INVALID_HANDLE => cuEGLStreamProducerReturnFrame(connection, frame, stream_out);
    // ---- graphics resources (none can be registered) ----------------------
    CUDA_ERROR_INVALID_HANDLE => cuGraphicsUnregisterResource(resource);
    CUDA_ERROR_INVALID_HANDLE => cuGraphicsResourceSetMapFlags(resource, flags);
    CUDA_ERROR_INVALID_HANDLE => cuGraphicsResourceSetMapFlags_v2(resource, flags);
    CUDA_ERROR_INVALID_HANDLE => cuGraphicsResourceGetMappedPointer(dptr, size, resource);
    CUDA_ERROR_INVALID_HANDLE => cuGraphicsResourceGetMappedPointer_v2(dptr, size, resource);
    CUDA_ERROR_INVALID_HANDLE => cuGraphicsResourceGetMappedMipmappedArray(array_out, resource);
    CUDA_ERROR_INVALID_HANDLE => cuGraphicsSubResourceGetMappedArray(array_out, resource, index, level);
    CUDA_ERROR_INVALID_HANDLE => cuGraphicsResourceGetMappedEglFrame(frame_out, resource, index, level);
    // ---- external memory and semaphores -----------------------------------
    CUDA_ERROR_NOT_SUPPORTED => cuImportExternalMemory(memory_out, description) nonnull[memory_out, description];
    CUDA_ERROR_NOT_SUPPORTED => cuImportExternalSemaphore(semaphore_out, description) nonnull[semaphore_out, description];
    CUDA_ERROR_NOT_SUPPORTED => cuDeviceGetNvSciSyncAttributes(attributes, device, flags) nonnull[attributes];
    CUDA_ERROR_INVALID_HANDLE => cuDestroyExternalMemory(memory);
    CUDA_ERROR_INVALID_HANDLE => cuDestroyExternalSemaphore(semaphore);
    CUDA_ERROR_INVALID_HANDLE => cuExternalMemoryGetMappedBuffer(dptr, memory, description) nonnull[dptr, description];
    CUDA_ERROR_INVALID_HANDLE => cuExternalMemoryGetMappedMipmappedArray(array_out, memory, description) nonnull[array_out, description];
    // ---- IPC ------------------------------------------------------------
    CUDA_ERROR_NOT_SUPPORTED => cuIpcGetMemHandle(handle_out, dptr) nonnull[handle_out];
    CUDA_ERROR_NOT_SUPPORTED => cuIpcCloseMemHandle(dptr);
    CUDA_ERROR_NOT_SUPPORTED => cuIpcGetEventHandle(handle_out, event) nonnull[handle_out];
    CUDA_ERROR_NOT_SUPPORTED => cuMemPoolImportFromShareableHandle(pool_out, handle, handle_type, flags) nonnull[pool_out];
    CUDA_ERROR_NOT_SUPPORTED => cuMemPoolExportPointer(data_out, dptr) nonnull[data_out];
    CUDA_ERROR_NOT_SUPPORTED => cuMemPoolImportPointer(dptr_out, pool, data) nonnull[dptr_out, data];
    // ---- green contexts, resources, logs, notifications -------------------
    CUDA_ERROR_NOT_SUPPORTED => cuGreenCtxGetId(green_context, id_out);
    CUDA_ERROR_NOT_SUPPORTED => cuGreenCtxRecordEvent(green_context, event);
    CUDA_ERROR_NOT_SUPPORTED => cuGreenCtxWaitEvent(green_context, event);
    CUDA_ERROR_NOT_SUPPORTED => cuLogsCurrent(iterator_out, flags);
    CUDA_ERROR_NOT_SUPPORTED => cuLogsDumpToFile(iterator, path, flags);
    CUDA_ERROR_NOT_SUPPORTED => cuLogsDumpToMemory(iterator, buffer, size, flags);
    CUDA_ERROR_NOT_SUPPORTED => cuDeviceRegisterAsyncNotification(device, callback, user_data, handle_out);
    CUDA_ERROR_NOT_SUPPORTED => cuDeviceUnregisterAsyncNotification(device, handle);
    // cuProfilerInitialize went with the command-line profiler (CUDA 12).
    CUDA_ERROR_NOT_SUPPORTED => cuProfilerInitialize(config_file, output_file, output_mode);
}

// Deprecated and not needed since CUDA 3.0; "may fail if the needed
// OpenGL driver facilities are not available", as they are not here.
cu_export!(cuGLInit() {
    driver()?;
    Err(CUDA_ERROR_UNKNOWN)
});

// Mapping and unmapping name resources, none of which can exist.
unsafe fn map_resources(count: u32, resources: usize, stream: usize) -> crate::driver::CuResult<()> {
    let d = driver()?;
    if count == 0 || resources == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.stream(stream as u64)?;
    Err(CUDA_ERROR_INVALID_HANDLE)
}

cu_export!(cuGraphicsMapResources(count: u32, resources: usize, stream: usize) {
    map_resources(count, resources, stream)
}; cuGraphicsMapResources_ptsz);

cu_export!(cuGraphicsUnmapResources(count: u32, resources: usize, stream: usize) {
    map_resources(count, resources, stream)
}; cuGraphicsUnmapResources_ptsz);

// A pool made without the handle type asked for cannot be exported
// (`CUDA_ERROR_INVALID_VALUE`, as documented); one made with it cannot
// either here, since pool memory is process-private.
cu_export!(cuMemPoolExportToShareableHandle(handle_out: usize, pool: usize, handle_type: u32, flags: u64) {
    let d = driver()?;
    if handle_out == 0 || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let types = d.read().pools.get(&(pool as u64)).map(|p| p.handle_types).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if handle_type == 0 || types & handle_type != handle_type {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

/// `CUipcMemHandle` / `CUipcEventHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcHandle([u8; 64]);

cu_export!(cuIpcOpenMemHandle_v2(dptr_out: *mut CUdeviceptr, handle: IpcHandle, flags: u32) {
    let _ = (handle, flags);
    driver()?;
    if dptr_out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Err(CUDA_ERROR_NOT_SUPPORTED)
}; cuIpcOpenMemHandle);

cu_export!(cuIpcOpenEventHandle(event_out: *mut CUevent, handle: IpcHandle) {
    let _ = handle;
    driver()?;
    if event_out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Err(CUDA_ERROR_NOT_SUPPORTED)
});

// Semaphore operations: none can be imported, so any semaphore named is an
// invalid handle; an empty list only checks the stream.
unsafe fn external_semaphores(semaphores: usize, params: usize, count: u32, stream: usize) -> crate::driver::CuResult<()> {
    let d = driver()?;
    if count > 0 && (semaphores == 0 || params == 0) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    d.stream(stream as u64)?;
    if count > 0 {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    Ok(())
}

cu_export!(cuSignalExternalSemaphoresAsync(semaphores: usize, params: usize, count: u32, stream: usize) {
    external_semaphores(semaphores, params, count, stream)
}; cuSignalExternalSemaphoresAsync_ptsz);

cu_export!(cuWaitExternalSemaphoresAsync(semaphores: usize, params: usize, count: u32, stream: usize) {
    external_semaphores(semaphores, params, count, stream)
}; cuWaitExternalSemaphoresAsync_ptsz);

// ---- texture and surface references; special arrays ------------------------

/// A module named by handle: `CUDA_ERROR_INVALID_HANDLE` unless loaded.
fn check_module(module: usize) -> crate::driver::CuResult<()> {
    let d = driver()?;
    if d.read().modules.contains_key(&(module as u64)) {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

cu_export!(cuModuleGetTexRef(texref_out: usize, module: usize, name: *const std::ffi::c_char) {
    if texref_out == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    crate::ffi::cstr(name)?;
    check_module(module)?;
    Err(CUDA_ERROR_NOT_FOUND)
});

cu_export!(cuModuleGetSurfRef(surfref_out: usize, module: usize, name: *const std::ffi::c_char) {
    if surfref_out == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    crate::ffi::cstr(name)?;
    check_module(module)?;
    Err(CUDA_ERROR_NOT_FOUND)
});

/// An array or mipmapped array named by handle.
fn check_array(array: usize, mipmapped: bool) -> crate::driver::CuResult<()> {
    let d = driver()?;
    let objs = d.read();
    let known = if mipmapped { objs.mipmaps.contains_key(&(array as u64)) } else { objs.arrays.contains_key(&(array as u64)) };
    if known {
        Ok(())
    } else {
        Err(CUDA_ERROR_INVALID_HANDLE)
    }
}

macro_rules! plain_array {
    ($($name:ident($out:ident, $array:ident $(, $rest:ident)*) mipmapped: $mip:expr;)*) => {$(
        cu_export!($name($out: usize, $array: usize $(, $rest: usize)*) {
            $(let _ = $rest;)*
            if $out == 0 {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
            check_array($array, $mip)?;
            Err(CUDA_ERROR_INVALID_VALUE)
        });
    )*};
}

// Arrays here are taken as neither sparse, planar nor made for deferred
// mapping (see the module comment).
plain_array! {
    cuArrayGetSparseProperties(properties, array) mipmapped: false;
    cuMipmappedArrayGetSparseProperties(properties, array) mipmapped: true;
    cuArrayGetMemoryRequirements(requirements, array, device) mipmapped: false;
    cuMipmappedArrayGetMemoryRequirements(requirements, array, device) mipmapped: true;
    cuArrayGetPlane(plane_out, array, plane) mipmapped: false;
}

// A library's managed variables and unified functions: simgpu's images
// declare neither.
cu_export!(cuLibraryGetManaged(dptr: *mut CUdeviceptr, bytes: *mut usize, library: usize, name: *const std::ffi::c_char) {
    let _ = (dptr, bytes);
    driver()?;
    crate::ffi::cstr(name)?;
    if (library as u64) >> 40 != super::module::TAG_LIBRARY {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    Err(CUDA_ERROR_NOT_FOUND)
});

cu_export!(cuLibraryGetUnifiedFunction(fptr: *mut *mut std::ffi::c_void, library: usize, symbol: *const std::ffi::c_char) {
    driver()?;
    if fptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    crate::ffi::cstr(symbol)?;
    if (library as u64) >> 40 != super::module::TAG_LIBRARY {
        return Err(CUDA_ERROR_INVALID_HANDLE);
    }
    Err(CUDA_ERROR_NOT_FOUND)
});
