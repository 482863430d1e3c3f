/* shim_stress THREADS ITERATIONS MAX_BYTES
 *
 * Makes a context, prints ready=1 and waits for a line on stdin (so that
 * several processes start together), then runs THREADS threads that each
 * allocate and free random sizes (1..MAX_BYTES) ITERATIONS times, through
 * cuMemAlloc_v2, cuMemAllocManaged, cuMemAllocAsync/cuMemFreeAsync (never
 * synchronised after a free) and cuMemCreate+cuMemMap (released before or
 * after its unmap, at random), holding up to 8 allocations at a time. Frees
 * everything, then prints ok=<successful allocations>
 * oom=<CUDA_ERROR_OUT_OF_MEMORY results> errors=<any other failure> and the
 * first unexpected result.
 *
 * shim_stress sample
 *
 * Run without the shim: prints ready=1, then samples device 0's used memory
 * (nvmlDeviceGetMemoryInfo) as fast as it can until a line arrives on stdin,
 * and prints max_used=<bytes> samples=<count>. */
#include "common.h"
#include <nvml.h>
#include <pthread.h>

enum { LIVE_MAX = 8 };
enum kind { K_ALLOC, K_MANAGED, K_ASYNC, K_VMM, K_KINDS };

struct live {
    enum kind kind;
    CUdeviceptr ptr;
    CUmemGenericAllocationHandle handle;
    size_t bytes;
};

static CUcontext ctx;
static int iterations;
static uint64_t max_bytes;
static size_t granularity;
/* SHIM_STRESS_ONLY=<kind index>: one allocation path only (diagnosis). */
static int only_kind = -1;
static long total_ok, total_oom, total_errors;
static pthread_mutex_t totals = PTHREAD_MUTEX_INITIALIZER;
static char first_error[256];

static uint64_t next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void record_error(const char *what, CUresult rc) {
    pthread_mutex_lock(&totals);
    total_errors++;
    if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s returned %d", what, (int)rc);
    pthread_mutex_unlock(&totals);
}

static CUresult release(struct live *l, CUstream s, uint64_t *seed) {
    switch (l->kind) {
    case K_ALLOC:
    case K_MANAGED: return cuMemFree(l->ptr);
    case K_ASYNC: return cuMemFreeAsync(l->ptr, s);
    case K_VMM: {
        /* The memory lives until both the release and the unmap happened. */
        CUresult rc;
        if (next(seed) % 2 == 0) {
            rc = cuMemRelease(l->handle);
            if (rc == CUDA_SUCCESS) rc = cuMemUnmap(l->ptr, l->bytes);
        } else {
            rc = cuMemUnmap(l->ptr, l->bytes);
            if (rc == CUDA_SUCCESS) rc = cuMemRelease(l->handle);
        }
        if (rc == CUDA_SUCCESS) rc = cuMemAddressFree(l->ptr, l->bytes);
        return rc;
    }
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

/* cuMemCreate + reserve + map; undone on failure. */
static CUresult vmm_alloc(struct live *l, size_t bytes, const CUmemAllocationProp *prop) {
    CUresult rc = cuMemCreate(&l->handle, bytes, prop, 0);
    if (rc != CUDA_SUCCESS) return rc;
    rc = cuMemAddressReserve(&l->ptr, bytes, 0, 0, 0);
    if (rc == CUDA_SUCCESS) {
        rc = cuMemMap(l->ptr, bytes, 0, l->handle, 0);
        if (rc != CUDA_SUCCESS) cuMemAddressFree(l->ptr, bytes);
    }
    if (rc != CUDA_SUCCESS) {
        cuMemRelease(l->handle);
        return rc;
    }
    l->bytes = bytes;
    return CUDA_SUCCESS;
}

static void *worker(void *arg) {
    uint64_t seed = (uint64_t)getpid() * 0x9e3779b97f4a7c15ull + (uint64_t)(uintptr_t)arg * 7919 + 1;
    struct live live[LIVE_MAX];
    int count = 0;
    long ok = 0, oom = 0;
    CUstream s;
    CUresult rc = cuCtxSetCurrent(ctx);
    if (rc == CUDA_SUCCESS) rc = cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
    if (rc != CUDA_SUCCESS) {
        record_error("thread setup", rc);
        return NULL;
    }
    CUmemAllocationProp prop = vmm_prop_at(CU_MEM_LOCATION_TYPE_DEVICE);
    for (int i = 0; i < iterations; i++) {
        if (count < LIVE_MAX && (count == 0 || next(&seed) % 2 == 0)) {
            struct live *l = &live[count];
            size_t bytes = 1 + next(&seed) % max_bytes;
            l->kind = (enum kind)(next(&seed) % K_KINDS);
            if (only_kind >= 0) l->kind = (enum kind)only_kind;
            switch (l->kind) {
            case K_ALLOC: rc = cuMemAlloc(&l->ptr, bytes); break;
            case K_MANAGED: rc = cuMemAllocManaged(&l->ptr, bytes, CU_MEM_ATTACH_GLOBAL); break;
            case K_ASYNC: rc = cuMemAllocAsync(&l->ptr, bytes, s); break;
            default:
                bytes = (bytes + granularity - 1) / granularity * granularity;
                rc = vmm_alloc(l, bytes, &prop);
                break;
            }
            if (rc == CUDA_SUCCESS) {
                ok++;
                count++;
            } else if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
                oom++;
            } else {
                record_error("allocation", rc);
            }
        } else {
            int victim = (int)(next(&seed) % (uint64_t)count);
            rc = release(&live[victim], s, &seed);
            if (rc != CUDA_SUCCESS) record_error("free", rc);
            live[victim] = live[--count];
        }
    }
    while (count > 0) {
        rc = release(&live[--count], s, &seed);
        if (rc != CUDA_SUCCESS) record_error("final free", rc);
    }
    rc = cuStreamSynchronize(s);
    if (rc != CUDA_SUCCESS) record_error("final synchronize", rc);
    cuStreamDestroy(s);
    pthread_mutex_lock(&totals);
    total_ok += ok;
    total_oom += oom;
    pthread_mutex_unlock(&totals);
    return NULL;
}

static volatile int sampling = 1;

static void *stop_on_line(void *arg) {
    (void)arg;
    wait_stdin_line();
    sampling = 0;
    return NULL;
}

static int sample(void) {
    nvmlDevice_t device;
    if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &device) != NVML_SUCCESS) {
        fprintf(stderr, "NVML unavailable\n");
        return 1;
    }
    pthread_t stopper;
    pthread_create(&stopper, NULL, stop_on_line, NULL);
    printf("ready=1\n");
    fflush(stdout);
    unsigned long long max_used = 0, samples = 0;
    while (sampling) {
        nvmlMemory_t memory;
        if (nvmlDeviceGetMemoryInfo(device, &memory) == NVML_SUCCESS) {
            if (memory.used > max_used) max_used = memory.used;
            samples++;
        }
    }
    pthread_join(stopper, NULL);
    printf("max_used=%llu\nsamples=%llu\n", max_used, samples);
    return 0;
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc == 2 && strcmp(argv[1], "sample") == 0) return sample();
    if (argc != 4) {
        fprintf(stderr, "usage: shim_stress THREADS ITERATIONS MAX_BYTES\n");
        return 64;
    }
    int threads = atoi(argv[1]);
    if (getenv("SHIM_STRESS_ONLY")) only_kind = atoi(getenv("SHIM_STRESS_ONLY")) % K_KINDS;
    iterations = atoi(argv[2]);
    max_bytes = parse_bytes(argv[3]);
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CUmemAllocationProp prop = vmm_prop_at(CU_MEM_LOCATION_TYPE_DEVICE);
    CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    printf("pid=%d\nready=1\n", (int)getpid());
    wait_stdin_line();
    pthread_t ids[256];
    if (threads > 256) threads = 256;
    for (int t = 0; t < threads; t++) pthread_create(&ids[t], NULL, worker, (void *)(uintptr_t)t);
    for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
    CUmemoryPool pool;
    if (cuDeviceGetDefaultMemPool(&pool, 0) == CUDA_SUCCESS) cuMemPoolTrimTo(pool, 0);
    printf("ok=%ld\noom=%ld\nerrors=%ld\nfirst_error=%s\n", total_ok, total_oom, total_errors,
           first_error[0] ? first_error : "none");
    printf("finished=1\n");
    /* Hold the context until told to exit, so the test can see the
     * process's remaining usage (its context) before it exits. */
    wait_stdin_line();
    return 0;
}
