/* launch_driver: a CUDA driver with the launch entry points simgpu lacks:
 * cuLaunchCooperativeKernelMultiDevice and the deprecated cuLaunch,
 * cuLaunchGrid and cuLaunchGridAsync, so that the compute limit tests can
 * run them under the shim.
 *
 * Two devices, one primary context each. Each device runs its work in
 * order on one timeline: a kernel (1 ms for the deprecated entry points,
 * else its first argument, a uint64_t of microseconds, as simgpu's `sim_`
 * kernels) starts when the device is free or at once, whichever is later.
 * Timing events complete when the device reaches them, stamped with that
 * moment, so cuEventElapsedTime measures the device time between them.
 * Synchronisation sleeps until the device is free, and a launch sleeps while
 * more than QUEUE_US of work is queued ahead of it (a real driver's queue
 * fills up too). With LAUNCH_DRIVER_REFUSE_EVENTS set, cuEventCreate fails
 * (CUDA_ERROR_OUT_OF_MEMORY), as a driver out of resources may. Built as
 * libcuda.so.1 by
 * the tests (tests/support: compile_c_driver); NVML stays simgpu's.
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#undef cuDeviceGetUuid

#define DEVICES 2
#define EVENTS 8192
#define LEGACY_US 1000
#define QUEUE_US 100000

struct stream { CUdevice device; };
struct event { _Atomic uint64_t at_ns; };

static int context_storage[DEVICES];
static struct stream default_streams[DEVICES];
static struct stream streams[256];
static atomic_int next_stream;
static struct event events[EVENTS];
static atomic_int next_event;
static _Atomic uint64_t free_at_ns[DEVICES];
static _Thread_local CUcontext current;
static int function_storage;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t at_ns) {
    struct timespec ts = {(time_t)(at_ns / 1000000000ull), (long)(at_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {}
}

static CUdevice device_of_context(CUcontext ctx) { return (CUdevice)((int *)ctx - context_storage); }

/* The device of a stream: its own, or the current context's for the default streams. */
static int device_of_stream(CUstream stream, CUdevice *device) {
    uintptr_t handle = (uintptr_t)stream;
    if (handle <= 2) {
        if (!current) return 0;
        *device = device_of_context(current);
    } else {
        *device = ((struct stream *)stream)->device;
    }
    return 1;
}

/* Queues `us` of work on `device`, once the queue has room. */
static void run(CUdevice device, uint64_t us) {
    uint64_t queued_until = atomic_load(&free_at_ns[device]);
    if (queued_until > now_ns() + QUEUE_US * 1000) sleep_until(queued_until - QUEUE_US * 1000);
    uint64_t now = now_ns(), free = atomic_load(&free_at_ns[device]), end;
    do {
        end = (free > now ? free : now) + us * 1000;
    } while (!atomic_compare_exchange_weak(&free_at_ns[device], &free, end));
}

static uint64_t first_argument_us(void **params) { return params && params[0] ? *(uint64_t *)params[0] : LEGACY_US; }

CUresult cuInit(unsigned int flags) { (void)flags; return CUDA_SUCCESS; }
CUresult cuDriverGetVersion(int *version) { *version = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *count) { *count = DEVICES; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (ordinal < 0 || ordinal >= DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice device) {
    memcpy(uuid->bytes, "launch-driver-0", 15);
    uuid->bytes[15] = (char)('0' + device);
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice device) { return cuDeviceGetUuid_v2(uuid, device); }
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device) { (void)device; *bytes = 80ull << 30; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice device) {
    if (device < 0 || device >= DEVICES) return CUDA_ERROR_INVALID_DEVICE;
    default_streams[device].device = device;
    *ctx = (CUcontext)&context_storage[device];
    return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) { (void)device; return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext ctx) { current = ctx; return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext *ctx) { *ctx = current; return CUDA_SUCCESS; }
static CUcontext pushed;
CUresult cuCtxPushCurrent_v2(CUcontext ctx) { pushed = current; current = ctx; return CUDA_SUCCESS; }
CUresult cuCtxPopCurrent_v2(CUcontext *ctx) { if (ctx) *ctx = current; current = pushed; return CUDA_SUCCESS; }
CUresult cuCtxGetDevice(CUdevice *device) {
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    *device = device_of_context(current);
    return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize(void) {
    if (!current) return CUDA_ERROR_INVALID_CONTEXT;
    sleep_until(atomic_load(&free_at_ns[device_of_context(current)]));
    return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
    (void)flags;
    int i = atomic_fetch_add(&next_stream, 1);
    if (!current || i >= 256) return CUDA_ERROR_INVALID_VALUE;
    streams[i].device = device_of_context(current);
    *stream = (CUstream)&streams[i];
    return CUDA_SUCCESS;
}
CUresult cuStreamGetCtx(CUstream stream, CUcontext *ctx) {
    CUdevice device;
    if (!device_of_stream(stream, &device)) return CUDA_ERROR_INVALID_CONTEXT;
    *ctx = (CUcontext)&context_storage[device];
    return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
    (void)stream;
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
CUresult cuStreamQuery(CUstream stream) {
    CUdevice device;
    if (!device_of_stream(stream, &device)) return CUDA_ERROR_INVALID_CONTEXT;
    return now_ns() >= atomic_load(&free_at_ns[device]) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuStreamSynchronize(CUstream stream) {
    CUdevice device;
    if (!device_of_stream(stream, &device)) return CUDA_ERROR_INVALID_CONTEXT;
    sleep_until(atomic_load(&free_at_ns[device]));
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *event, unsigned int flags) {
    (void)flags;
    if (getenv("LAUNCH_DRIVER_REFUSE_EVENTS")) return CUDA_ERROR_OUT_OF_MEMORY;
    int i = atomic_fetch_add(&next_event, 1);
    if (i >= EVENTS) return CUDA_ERROR_OUT_OF_MEMORY;
    *event = (CUevent)&events[i];
    return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent event) { (void)event; return CUDA_SUCCESS; }
CUresult cuEventRecord(CUevent event, CUstream stream) {
    CUdevice device;
    if (!device_of_stream(stream, &device)) return CUDA_ERROR_INVALID_CONTEXT;
    uint64_t now = now_ns(), free = atomic_load(&free_at_ns[device]);
    atomic_store(&((struct event *)event)->at_ns, free > now ? free : now);
    return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent event) {
    return now_ns() >= atomic_load(&((struct event *)event)->at_ns) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventElapsedTime_v2(float *ms, CUevent start, CUevent end) {
    uint64_t a = atomic_load(&((struct event *)start)->at_ns), b = atomic_load(&((struct event *)end)->at_ns);
    if (now_ns() < b || now_ns() < a) return CUDA_ERROR_NOT_READY;
    *ms = (float)((double)(b - a) / 1e6);
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) { (void)image; *module = (CUmodule)&function_storage; return CUDA_SUCCESS; }
CUresult cuModuleGetFunction(CUfunction *f, CUmodule module, const char *name) {
    (void)module; (void)name;
    *f = (CUfunction)&function_storage;
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream stream, void **params, void **extra) {
    (void)f; (void)gx; (void)gy; (void)gz; (void)bx; (void)by; (void)bz; (void)shared; (void)extra;
    CUdevice device;
    if (!device_of_stream(stream, &device)) return CUDA_ERROR_INVALID_CONTEXT;
    run(device, first_argument_us(params));
    return CUDA_SUCCESS;
}
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list, unsigned int count, unsigned int flags) {
    (void)flags;
    for (unsigned i = 0; i < count; i++) {
        CUdevice device;
        if (!device_of_stream(list[i].hStream, &device)) return CUDA_ERROR_INVALID_HANDLE;
        run(device, first_argument_us(list[i].kernelParams));
    }
    return CUDA_SUCCESS;
}
CUresult cuLaunch(CUfunction f) { (void)f; return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL); }
CUresult cuLaunchGrid(CUfunction f, int w, int h) { (void)w; (void)h; return cuLaunch(f); }
CUresult cuLaunchGridAsync(CUfunction f, int w, int h, CUstream stream) {
    (void)w; (void)h;
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL);
}
