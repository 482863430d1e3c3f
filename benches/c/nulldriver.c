/* nulldriver: the least a CUDA driver can be, for measuring the shim alone.
 *
 * One 80 GiB device, one context, allocations that hand out addresses from
 * a counter and cost one atomic add, launches that do nothing, and timing
 * events that complete at once and measure nothing (what the shim's compute
 * limit records around each launch on a limited device). Under it,
 * what a benchmark of the shim measures is the shim: no simulated device
 * state, no driver locks to contend on. benches/shim_overhead.rs builds it
 * and loads it as the shim's real driver (GPUSLICE_CUDA_LIB).
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define TOTAL_BYTES (80ull << 30)

static atomic_ullong next_address = 1ull << 40;
static atomic_llong used_bytes;
static int context_storage;
static CUcontext const the_context = (CUcontext)&context_storage;
static _Thread_local CUcontext current;

CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *version) { *version = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *count) { *count = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) {
    (void)device;
    memcpy(uuid->bytes, "nulldriver-dev-0", 16);
    return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) { (void)device; *bytes = TOTAL_BYTES; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) { (void)device; *ctx = the_context; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) { (void)device; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext ctx) { current = ctx; return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext *ctx) { *ctx = current; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *device) {
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *device = 0;
    return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize(void) { return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }
CUresult cuModuleLoadData(CUmodule *module, const void *image) { (void)image; *module = (CUmodule)&context_storage; return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction *fn, CUmodule module, const char *name) {
    (void)module; (void)name;
    *fn = (CUfunction)&context_storage;
    return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream stream, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)stream; (void)params; (void)extra;
    return CUDA_SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *ptr = atomic_fetch_add_explicit(&next_address, (bytes + 511) & ~511ull, memory_order_relaxed);
    atomic_fetch_add_explicit(&used_bytes, (long long)bytes, memory_order_relaxed);
    return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr ptr) { (void)ptr; return CUDA_SUCCESS; }

/* Events: handles from a counter; every record completes at once. */
static atomic_ullong next_event = 1;
CUresult cuEventCreate(CUevent *event, unsigned int flags) {
    (void)flags;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *event = (CUevent)(uintptr_t)(atomic_fetch_add_explicit(&next_event, 1, memory_order_relaxed) << 4);
    return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent event, CUstream stream) { (void)event; (void)stream; return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent event) { (void)event; return CUDA_SUCCESS; }
CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end) {
    (void)start; (void)end;
    *ms = 0.0f;
    return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent event) { (void)event; return CUDA_SUCCESS; }
CUresult cuStreamQuery(CUstream stream) { (void)stream; return CUDA_SUCCESS; }
CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
    (void)stream;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = TOTAL_BYTES;
    *total_bytes = TOTAL_BYTES;
    return CUDA_SUCCESS;
}

struct entry { const char *name; void *fn; };
static const struct entry table[] = {
    {"cuInit", (void *)cuInit},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount},
    {"cuDeviceGet", (void *)cuDeviceGet},
    {"cuDeviceGetUuid", (void *)cuDeviceGetUuid_v2},
    {"cuDeviceTotalMem", (void *)cuDeviceTotalMem_v2},
    {"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2},
    {"cuCtxSetCurrent", (void *)cuCtxSetCurrent},
    {"cuCtxGetCurrent", (void *)cuCtxGetCurrent},
    {"cuCtxGetDevice", (void *)cuCtxGetDevice},
    {"cuCtxSynchronize", (void *)cuCtxSynchronize},
    {"cuModuleLoadData", (void *)cuModuleLoadData},
    {"cuModuleGetFunction", (void *)cuModuleGetFunction},
    {"cuLaunchKernel", (void *)cuLaunchKernel},
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemGetInfo", (void *)cuMemGetInfo_v2},
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status) {
    (void)version; (void)flags;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, symbol) == 0) {
            *pfn = table[i].fn;
            if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    }
    if (strcmp(symbol, "cuGetProcAddress") == 0) {
        *pfn = (void *)cuGetProcAddress_v2;
        if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    *pfn = NULL;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
