/* accepting_driver: a CUDA driver that says yes where simgpu says no.
 *
 * A real driver may accept calls that simgpu refuses: memory at a location
 * the shim cannot tie to a device it knows, a pool on a device outside the
 * process's view. The shim must refuse those itself, never rely on the
 * driver refusing. This driver accepts them all, so a test over it sees
 * what the shim alone decides.
 *
 * It also exports several names at one address, as libcuda does for
 * variants that share an implementation (cuCtxDestroy and cuCtxDestroy_v2,
 * cuDevicePrimaryCtxRelease and _v2, cuDevicePrimaryCtxReset and _v2), and
 * its cuGetProcAddress answers those addresses, so the shim's version table
 * is what tells the shim which of its hooks to hand out.
 *
 * Two devices of 80 GiB, one primary context each, no memory behind any
 * address.
 * A pool created with maxSize == 1 cannot tell its location (its attribute
 * queries return CUDA_ERROR_NOT_SUPPORTED); created pools report nothing
 * but their location.
 * Each device's default pool (cuDeviceGetMemPool, used by cuMemAllocAsync)
 * grows in 32 MiB chunks, as real pools do, so it grows by more than the
 * request; it reports RESERVED_MEM_CURRENT and USED_MEM_CURRENT, a free
 * returns its bytes to the pool at once (work is done at once), and
 * cuMemPoolTrimTo gives back whole chunks no allocation needs until the
 * pool reserves fewer bytes than asked to keep. Built as libcuda.so.1 by the
 * tests (tests/support: compile_c_driver).
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* cuda.h maps these API names to their newest variants; the older names
 * are exported too. */
#undef cuDeviceGetUuid
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset

#define TOTAL_BYTES (80ull << 30)
#define DEVICES 2

static atomic_ullong next_address = 1ull << 40;
static atomic_ullong next_handle = 1;
static int context_storage[DEVICES], event_storage;
static _Thread_local CUcontext current;

/* A context is the address of its device's storage. */
static CUdevice device_of(CUcontext ctx) { return (CUdevice)((int *)ctx - context_storage); }

struct pool {
    CUmemLocation location;
    int answers;
    /* The default pools: chunked growth, reserved and used bytes. */
    int chunked;
    unsigned long long reserved, used;
};

#define CHUNK_BYTES (32ull << 20)
static struct pool default_pools[DEVICES] = {
    {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, 1, 1, 0, 0},
    {{CU_MEM_LOCATION_TYPE_DEVICE, 1}, 1, 1, 0, 0},
};

/* Live allocations from the default pools. */
#define LIVE_MAX 1024
static struct { CUdeviceptr ptr; unsigned long long bytes; int device; } live[LIVE_MAX];

CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *version) { *version = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *count) { *count = DEVICES; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (ordinal < 0 || ordinal >= DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) {
    memcpy(uuid->bytes, "accepting-dev-0", 15);
    uuid->bytes[15] = (char)('0' + device);
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device) { return cuDeviceGetUuid_v2(uuid, device); }
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) { (void)device; *bytes = TOTAL_BYTES; return CUDA_SUCCESS; }

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
    if (device < 0 || device >= DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    *ctx = (CUcontext)&context_storage[device];
    return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) { (void)device; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease(CUdevice device) __attribute__((alias("cuDevicePrimaryCtxRelease_v2")));
CUresult cuDevicePrimaryCtxReset_v2(CUdevice device) { (void)device; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxReset(CUdevice device) __attribute__((alias("cuDevicePrimaryCtxReset_v2")));
CUresult cuCtxDestroy_v2(CUcontext ctx) { (void)ctx; return CUDA_SUCCESS; }
CUresult cuCtxDestroy(CUcontext ctx) __attribute__((alias("cuCtxDestroy_v2")));
CUresult cuCtxSetCurrent(CUcontext ctx) { current = ctx; return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext *ctx) { *ctx = current; return CUDA_SUCCESS; }
CUresult cuCtxPushCurrent_v2(CUcontext ctx) { current = ctx; return CUDA_SUCCESS; }
CUresult cuCtxPopCurrent_v2(CUcontext *ctx) { if (ctx) *ctx = current; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *device) {
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *device = device_of(current);
    return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize(void) { return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }
CUresult cuStreamGetCtx(CUstream stream, CUcontext *ctx) { (void)stream; *ctx = current; return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream stream) { (void)stream; return CUDA_SUCCESS; }

/* Work is done at once: every event has completed. */
CUresult cuEventCreate(CUevent *event, unsigned int flags) { (void)flags; *event = (CUevent)&event_storage; return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent event, CUstream stream) { (void)event; (void)stream; return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent event) { (void)event; return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent event) { (void)event; return CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(CUevent event) { (void)event; return CUDA_SUCCESS; }

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = TOTAL_BYTES;
    *total_bytes = TOTAL_BYTES;
    return CUDA_SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes) {
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *ptr = atomic_fetch_add(&next_address, (bytes + 511) & ~511ull);
    return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr ptr) { (void)ptr; return CUDA_SUCCESS; }

/* Any location at all. */
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
    (void)size; (void)prop; (void)flags;
    *handle = atomic_fetch_add(&next_handle, 1);
    return CUDA_SUCCESS;
}
CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { (void)handle; return CUDA_SUCCESS; }

/* Any location at all; maxSize == 1 makes a pool that cannot tell it. */
CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props) {
    struct pool *p = calloc(1, sizeof *p);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    p->location = props->location;
    p->answers = props->maxSize != 1;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}
CUresult cuMemPoolDestroy(CUmemoryPool pool) { free(pool); return CUDA_SUCCESS; }
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value) {
    const struct pool *p = (const struct pool *)pool;
    if (!p->answers) return CUDA_ERROR_NOT_SUPPORTED;
    switch (attr) {
    case CU_MEMPOOL_ATTR_LOCATION_TYPE: *(int *)value = (int)p->location.type; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_LOCATION_ID: *(int *)value = p->location.id; return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
        if (!p->chunked) return CUDA_ERROR_NOT_SUPPORTED;
        *(cuuint64_t *)value = p->reserved;
        return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        if (!p->chunked) return CUDA_ERROR_NOT_SUPPORTED;
        *(cuuint64_t *)value = p->used;
        return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
    }
}
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice device) {
    if (device < 0 || device >= DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    *pool = (CUmemoryPool)&default_pools[device];
    return CUDA_SUCCESS;
}
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep_bytes) {
    struct pool *p = (struct pool *)pool;
    while (p->chunked && p->reserved > 0 && p->reserved >= keep_bytes && p->reserved - CHUNK_BYTES >= p->used)
        p->reserved -= CHUNK_BYTES;
    return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
    (void)stream;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
CUresult cuMemAllocAsync(CUdeviceptr *ptr, size_t bytes, CUstream stream) {
    (void)stream;
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    int device = device_of(current);
    struct pool *p = &default_pools[device];
    unsigned long long size = (bytes + 511) & ~511ull;
    int slot = -1;
    for (int i = 0; i < LIVE_MAX && slot < 0; i++)
        if (live[i].ptr == 0) slot = i;
    if (slot < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (p->used + size > p->reserved) p->reserved += (size + CHUNK_BYTES - 1) / CHUNK_BYTES * CHUNK_BYTES;
    p->used += size;
    CUresult rc = cuMemAlloc_v2(ptr, bytes);
    live[slot].ptr = *ptr;
    live[slot].bytes = size;
    live[slot].device = device;
    return rc;
}
CUresult cuMemAllocFromPoolAsync(CUdeviceptr *ptr, size_t bytes, CUmemoryPool pool, CUstream stream) {
    (void)pool; (void)stream;
    return cuMemAlloc_v2(ptr, bytes);
}
CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
    (void)stream;
    for (int i = 0; i < LIVE_MAX; i++) {
        if (live[i].ptr == ptr && ptr != 0) {
            default_pools[live[i].device].used -= live[i].bytes;
            live[i].ptr = 0;
            break;
        }
    }
    return CUDA_SUCCESS;
}
CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr ptr) {
    for (int i = 0; i < LIVE_MAX; i++) {
        if (live[i].ptr != 0 && ptr >= live[i].ptr && ptr < live[i].ptr + live[i].bytes) {
            if (base) *base = live[i].ptr;
            if (size) *size = live[i].bytes;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

/* cuGetProcAddress: by API name, whatever the version, so an aliased
 * family answers its one address. */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);
struct entry { const char *name; void *fn; };
static const struct entry table[] = {
    {"cuInit", (void *)cuInit},
    {"cuGetProcAddress", (void *)cuGetProcAddress_v2},
    {"cuDeviceGet", (void *)cuDeviceGet},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount},
    {"cuCtxDestroy", (void *)cuCtxDestroy_v2},
    {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2},
    {"cuDevicePrimaryCtxReset", (void *)cuDevicePrimaryCtxReset_v2},
    {"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain},
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemCreate", (void *)cuMemCreate},
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
    *pfn = NULL;
    if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
