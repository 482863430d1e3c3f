/* memctl: runs a script of driver and NVML memory operations given as
 * arguments, one token per operation, and prints the result of each as
 * `key=value` lines. Tests compose the scenarios they need from it.
 *
 *   init                      cuInit(0)                                -> init=rc
 *   ctx[:DEV]                 cuCtxCreate on device DEV (default 0)     -> ctx=rc
 *   pctx[:DEV]                retain the primary context, make current  -> pctx=rc
 *   destroyctx                cuCtxDestroy of the context made by ctx   -> destroyctx=rc
 *   reset[:DEV]               cuDevicePrimaryCtxReset_v2 on device DEV  -> reset=rc
 *   info[:LABEL]              cuMemGetInfo_v2     -> LABEL=rc LABEL.free=B LABEL.total=B
 *   totalmem[:DEV]            cuDeviceTotalMem_v2 -> totalmem=rc totalmem.bytes=B
 *   alloc:NAME:SIZE           cuMemAlloc_v2                             -> NAME=rc
 *       SIZE is bytes with an optional K/M/G (binary) suffix, or `free`,
 *       `free+N`, `free-N`: relative to what cuMemGetInfo reports now.
 *   pitch:NAME:W:H            cuMemAllocPitch_v2 (4-byte elements) -> NAME=rc NAME.pitch=B
 *   managed:NAME:SIZE         cuMemAllocManaged (global)                -> NAME=rc
 *   hostalloc:NAME:SIZE       cuMemAllocHost_v2                         -> NAME=rc
 *   async:NAME:SIZE           cuMemAllocAsync on the null stream, then synchronise
 *   pool:NAME:SIZE            cuMemAllocFromPoolAsync from a pool made on first use
 *   vmm:NAME:SIZE             cuMemCreate, device-located               -> NAME=rc
 *   vmmhost:NAME:SIZE         cuMemCreate, host-located                 -> NAME=rc
 *   map:NAME                  reserve an address range and cuMemMap the handle NAME -> map.NAME=rc
 *   unmap:NAME                cuMemUnmap the range map:NAME mapped, free the range  -> unmap.NAME=rc
 *   array:NAME:W:H            cuArrayCreate_v2, 1-byte elements
 *   array3d:NAME:W:H:D        cuArray3DCreate_v2, 1-byte elements
 *   mipmap:NAME:W:H:LEVELS    cuMipmappedArrayCreate, 1-byte elements
 *   free:NAME                 the free matching how NAME was made       -> free.NAME=rc
 *                             (freeing twice frees twice: double frees)
 *   freeptr:VALUE             cuMemFree_v2 of an arbitrary address      -> freeptr=rc
 *   trim                      cuMemPoolTrimTo(pool, 0) on the default and own pool
 *   gran                      cuMemGetAllocationGranularity -> gran=rc gran.min=B gran.rec=B
 *   nvml[:LABEL]              nvmlDeviceGetMemoryInfo -> LABEL=rc LABEL.total/used/free=B
 *   nvml2[:LABEL]             nvmlDeviceGetMemoryInfo_v2 -> LABEL=rc LABEL.total/used/free/reserved=B
 *   procs[:LABEL]             nvmlDeviceGetComputeRunningProcesses_v3
 *                             -> LABEL=rc LABEL.count=N LABEL.self=B LABEL.pid.<pid>=B
 *   pid                       -> pid=<getpid()>
 *   clock                     -> clock=<seconds since the epoch, to the microsecond>
 *   ready                     -> ready=1
 *   mark:LABEL                -> LABEL=1 (a checkpoint a test can wait for)
 *   hold                      -> ready=1, then wait for a line on stdin (or EOF)
 *   wait                      wait for a line on stdin (or EOF)
 *   sleep:MS                  sleep
 *   exit:N                    exit(N) at once (a normal exit), holding whatever is held
 *   kill9                     SIGKILL itself, holding whatever is held
 */
#include "common.h"
#include <nvml.h>
#include <signal.h>

enum kind { K_DEV, K_MANAGED, K_HOST, K_ASYNC, K_POOL, K_VMM, K_ARRAY, K_MIPMAP };

struct object {
    char name[64];
    enum kind kind;
    CUdeviceptr ptr;
    void *host;
    CUmemGenericAllocationHandle handle;
    CUarray array;
    CUmipmappedArray mipmap;
    uint64_t size;
    CUdeviceptr va;
};

static struct object objects[1024];
static int object_count;
static CUcontext created_ctx;
static CUmemoryPool own_pool;
static CUmemoryPool device_pools[16];
static int nvml_ready;

static struct object *new_object(const char *name, enum kind kind) {
    if (object_count == (int)(sizeof objects / sizeof objects[0])) {
        fprintf(stderr, "too many objects\n");
        exit(64);
    }
    struct object *o = &objects[object_count++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->kind = kind;
    return o;
}

static struct object *find_object(const char *name) {
    for (int i = object_count - 1; i >= 0; i--)
        if (strcmp(objects[i].name, name) == 0) return &objects[i];
    fprintf(stderr, "no object named %s\n", name);
    exit(64);
}

/* Splits `op:a:b:c` in place into at most 5 fields; returns the count. */
static int split(char *token, char **fields) {
    int n = 0;
    fields[n++] = token;
    for (char *p = token; *p && n < 5; p++) {
        if (*p == ':') {
            *p = '\0';
            fields[n++] = p + 1;
        }
    }
    return n;
}

static uint64_t size_arg(const char *text) {
    if (strncmp(text, "free", 4) == 0) {
        size_t free_bytes = 0, total_bytes = 0;
        CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
        const char *rest = text + 4;
        if (*rest == '\0') return free_bytes;
        if (*rest == '+') return free_bytes + parse_bytes(rest + 1);
        if (*rest == '-') return free_bytes - parse_bytes(rest + 1);
        fprintf(stderr, "not a size: %s\n", text);
        exit(64);
    }
    return parse_bytes(text);
}


static void need_nvml(void) {
    if (!nvml_ready) {
        nvmlReturn_t rc = nvmlInit_v2();
        printf("nvmlinit=%d\n", (int)rc);
        if (rc != NVML_SUCCESS) exit(3);
        nvml_ready = 1;
    }
}

static CUresult free_object(struct object *o) {
    switch (o->kind) {
    case K_DEV:
    case K_MANAGED: return cuMemFree(o->ptr);
    case K_HOST: return cuMemFreeHost(o->host);
    case K_ASYNC:
    case K_POOL: {
        CUresult rc = cuMemFreeAsync(o->ptr, NULL);
        if (rc != CUDA_SUCCESS) return rc;
        return cuStreamSynchronize(NULL);
    }
    case K_VMM: return cuMemRelease(o->handle);
    case K_ARRAY: return cuArrayDestroy(o->array);
    case K_MIPMAP: return cuMipmappedArrayDestroy(o->mipmap);
    }
    return CUDA_ERROR_INVALID_VALUE;
}

static void array_desc(CUDA_ARRAY3D_DESCRIPTOR *d, const char *w, const char *h, const char *depth) {
    memset(d, 0, sizeof *d);
    d->Width = parse_bytes(w);
    d->Height = parse_bytes(h);
    d->Depth = depth ? parse_bytes(depth) : 0;
    d->Format = CU_AD_FORMAT_UNSIGNED_INT8;
    d->NumChannels = 1;
}

int main(int argc, char **argv) {
    test_init_output();
    char key[128];
    for (int i = 1; i < argc; i++) {
        char *f[5] = {0};
        int n = split(argv[i], f);
        const char *op = f[0];
        if (strcmp(op, "init") == 0) {
            kv_rc("init", cuInit(0));
        } else if (strcmp(op, "ctx") == 0 || strcmp(op, "pctx") == 0) {
            CUdevice dev;
            CUresult rc = cuDeviceGet(&dev, n > 1 ? atoi(f[1]) : 0);
            if (rc == CUDA_SUCCESS) {
                if (op[0] == 'c') {
                    rc = cuCtxCreate(&created_ctx, NULL, 0, dev);
                } else {
                    CUcontext primary;
                    rc = cuDevicePrimaryCtxRetain(&primary, dev);
                    if (rc == CUDA_SUCCESS) rc = cuCtxSetCurrent(primary);
                }
            }
            kv_rc(op, rc);
        } else if (strcmp(op, "destroyctx") == 0) {
            kv_rc("destroyctx", cuCtxDestroy(created_ctx));
        } else if (strcmp(op, "reset") == 0) {
            CUdevice dev;
            CUresult rc = cuDeviceGet(&dev, n > 1 ? atoi(f[1]) : 0);
            if (rc == CUDA_SUCCESS) rc = cuDevicePrimaryCtxReset(dev);
            kv_rc("reset", rc);
        } else if (strcmp(op, "info") == 0) {
            const char *label = n > 1 ? f[1] : "info";
            size_t free_bytes = 0, total_bytes = 0;
            kv_rc(label, cuMemGetInfo(&free_bytes, &total_bytes));
            printf("%s.free=%zu\n%s.total=%zu\n", label, free_bytes, label, total_bytes);
        } else if (strcmp(op, "totalmem") == 0) {
            size_t bytes = 0;
            kv_rc("totalmem", cuDeviceTotalMem(&bytes, n > 1 ? atoi(f[1]) : 0));
            printf("totalmem.bytes=%zu\n", bytes);
        } else if (strcmp(op, "alloc") == 0 && n == 3) {
            struct object *o = new_object(f[1], K_DEV);
            kv_rc(f[1], cuMemAlloc(&o->ptr, size_arg(f[2])));
        } else if (strcmp(op, "pitch") == 0 && n == 4) {
            struct object *o = new_object(f[1], K_DEV);
            size_t pitch = 0;
            kv_rc(f[1], cuMemAllocPitch(&o->ptr, &pitch, parse_bytes(f[2]), parse_bytes(f[3]), 4));
            printf("%s.pitch=%zu\n", f[1], pitch);
        } else if (strcmp(op, "managed") == 0 && n == 3) {
            struct object *o = new_object(f[1], K_MANAGED);
            kv_rc(f[1], cuMemAllocManaged(&o->ptr, size_arg(f[2]), CU_MEM_ATTACH_GLOBAL));
        } else if (strcmp(op, "hostalloc") == 0 && n == 3) {
            struct object *o = new_object(f[1], K_HOST);
            kv_rc(f[1], cuMemAllocHost(&o->host, size_arg(f[2])));
        } else if (strcmp(op, "async") == 0 && n == 3) {
            struct object *o = new_object(f[1], K_ASYNC);
            CUresult rc = cuMemAllocAsync(&o->ptr, size_arg(f[2]), NULL);
            if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(NULL);
            kv_rc(f[1], rc);
        } else if (strcmp(op, "pool") == 0 && n == 4) {
            /* pool:NAME:SIZE:DEV - from a pool located on device DEV, on the
               current context's null stream. */
            struct object *o = new_object(f[1], K_POOL);
            int dev = atoi(f[3]) & 15;
            CUresult rc = CUDA_SUCCESS;
            if (!device_pools[dev]) {
                CUmemPoolProps props;
                memset(&props, 0, sizeof props);
                props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
                props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                props.location.id = dev;
                rc = cuMemPoolCreate(&device_pools[dev], &props);
                kv_rc("poolcreate", rc);
            }
            if (rc == CUDA_SUCCESS) rc = cuMemAllocFromPoolAsync(&o->ptr, size_arg(f[2]), device_pools[dev], NULL);
            if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(NULL);
            kv_rc(f[1], rc);
        } else if (strcmp(op, "pool") == 0 && n == 3) {
            struct object *o = new_object(f[1], K_POOL);
            CUresult rc = CUDA_SUCCESS;
            if (!own_pool) {
                CUmemPoolProps props;
                memset(&props, 0, sizeof props);
                props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
                props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                props.location.id = 0;
                rc = cuMemPoolCreate(&own_pool, &props);
                kv_rc("poolcreate", rc);
            }
            if (rc == CUDA_SUCCESS) rc = cuMemAllocFromPoolAsync(&o->ptr, size_arg(f[2]), own_pool, NULL);
            if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(NULL);
            kv_rc(f[1], rc);
        } else if ((strcmp(op, "vmm") == 0 || strcmp(op, "vmmhost") == 0) && n == 3) {
            struct object *o = new_object(f[1], K_VMM);
            CUmemAllocationProp prop =
                vmm_prop_at(op[3] == 'h' ? CU_MEM_LOCATION_TYPE_HOST : CU_MEM_LOCATION_TYPE_DEVICE);
            o->size = size_arg(f[2]);
            kv_rc(f[1], cuMemCreate(&o->handle, o->size, &prop, 0));
        } else if (strcmp(op, "map") == 0 && n == 2) {
            struct object *o = find_object(f[1]);
            snprintf(key, sizeof key, "map.%s", f[1]);
            CUresult rc = cuMemAddressReserve(&o->va, o->size, 0, 0, 0);
            if (rc == CUDA_SUCCESS) rc = cuMemMap(o->va, o->size, 0, o->handle, 0);
            kv_rc(key, rc);
        } else if (strcmp(op, "unmap") == 0 && n == 2) {
            struct object *o = find_object(f[1]);
            snprintf(key, sizeof key, "unmap.%s", f[1]);
            CUresult rc = cuMemUnmap(o->va, o->size);
            if (rc == CUDA_SUCCESS) rc = cuMemAddressFree(o->va, o->size);
            kv_rc(key, rc);
        } else if (strcmp(op, "array") == 0 && n == 4) {
            struct object *o = new_object(f[1], K_ARRAY);
            CUDA_ARRAY_DESCRIPTOR d;
            memset(&d, 0, sizeof d);
            d.Width = parse_bytes(f[2]);
            d.Height = parse_bytes(f[3]);
            d.Format = CU_AD_FORMAT_UNSIGNED_INT8;
            d.NumChannels = 1;
            kv_rc(f[1], cuArrayCreate(&o->array, &d));
        } else if (strcmp(op, "array3d") == 0 && n == 5) {
            struct object *o = new_object(f[1], K_ARRAY);
            CUDA_ARRAY3D_DESCRIPTOR d;
            array_desc(&d, f[2], f[3], f[4]);
            kv_rc(f[1], cuArray3DCreate(&o->array, &d));
        } else if (strcmp(op, "mipmap") == 0 && n == 5) {
            struct object *o = new_object(f[1], K_MIPMAP);
            CUDA_ARRAY3D_DESCRIPTOR d;
            array_desc(&d, f[2], f[3], NULL);
            kv_rc(f[1], cuMipmappedArrayCreate(&o->mipmap, &d, (unsigned)atoi(f[4])));
        } else if (strcmp(op, "free") == 0 && n == 2) {
            snprintf(key, sizeof key, "free.%s", f[1]);
            kv_rc(key, free_object(find_object(f[1])));
        } else if (strcmp(op, "freeptr") == 0 && n == 2) {
            kv_rc("freeptr", cuMemFree((CUdeviceptr)strtoull(f[1], NULL, 0)));
        } else if (strcmp(op, "trim") == 0) {
            CUmemoryPool def;
            CUresult rc = cuDeviceGetDefaultMemPool(&def, 0);
            if (rc == CUDA_SUCCESS) rc = cuMemPoolTrimTo(def, 0);
            if (rc == CUDA_SUCCESS && own_pool) rc = cuMemPoolTrimTo(own_pool, 0);
            kv_rc("trim", rc);
        } else if (strcmp(op, "gran") == 0) {
            size_t min = 0, rec = 0;
            CUmemAllocationProp prop = vmm_prop_at(CU_MEM_LOCATION_TYPE_DEVICE);
            CUresult rc = cuMemGetAllocationGranularity(&min, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
            if (rc == CUDA_SUCCESS)
                rc = cuMemGetAllocationGranularity(&rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
            kv_rc("gran", rc);
            printf("gran.min=%zu\ngran.rec=%zu\n", min, rec);
        } else if (strcmp(op, "nvml") == 0 || strcmp(op, "nvml2") == 0) {
            const char *label = n > 1 ? f[1] : op;
            need_nvml();
            nvmlDevice_t dev;
            nvmlReturn_t rc = nvmlDeviceGetHandleByIndex_v2(0, &dev);
            if (op[4] == '2') {
                nvmlMemory_v2_t m;
                memset(&m, 0, sizeof m);
                m.version = nvmlMemory_v2;
                if (rc == NVML_SUCCESS) rc = nvmlDeviceGetMemoryInfo_v2(dev, &m);
                printf("%s=%d\n%s.total=%llu\n%s.used=%llu\n%s.free=%llu\n%s.reserved=%llu\n", label, (int)rc,
                       label, m.total, label, m.used, label, m.free, label, m.reserved);
            } else {
                nvmlMemory_t m;
                memset(&m, 0, sizeof m);
                if (rc == NVML_SUCCESS) rc = nvmlDeviceGetMemoryInfo(dev, &m);
                printf("%s=%d\n%s.total=%llu\n%s.used=%llu\n%s.free=%llu\n", label, (int)rc, label, m.total,
                       label, m.used, label, m.free);
            }
        } else if (strcmp(op, "procs") == 0) {
            const char *label = n > 1 ? f[1] : "procs";
            need_nvml();
            nvmlDevice_t dev;
            nvmlProcessInfo_t infos[64];
            unsigned int count = 64;
            nvmlReturn_t rc = nvmlDeviceGetHandleByIndex_v2(0, &dev);
            if (rc == NVML_SUCCESS) rc = nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos);
            printf("%s=%d\n%s.count=%u\n", label, (int)rc, label, rc == NVML_SUCCESS ? count : 0);
            unsigned long long self = 0;
            for (unsigned j = 0; rc == NVML_SUCCESS && j < count; j++) {
                printf("%s.pid.%u=%llu\n", label, infos[j].pid, infos[j].usedGpuMemory);
                if (infos[j].pid == (unsigned)getpid()) self = infos[j].usedGpuMemory;
            }
            printf("%s.self=%llu\n", label, self);
        } else if (strcmp(op, "pid") == 0) {
            printf("pid=%d\n", (int)getpid());
        } else if (strcmp(op, "clock") == 0) {
            struct timespec now;
            clock_gettime(CLOCK_REALTIME, &now);
            printf("clock=%lld.%06ld\n", (long long)now.tv_sec, now.tv_nsec / 1000);
        } else if (strcmp(op, "ready") == 0) {
            printf("ready=1\n");
        } else if (strcmp(op, "mark") == 0 && n == 2) {
            printf("%s=1\n", f[1]);
        } else if (strcmp(op, "hold") == 0) {
            printf("ready=1\n");
            wait_stdin_line();
        } else if (strcmp(op, "wait") == 0) {
            wait_stdin_line();
        } else if (strcmp(op, "sleep") == 0 && n == 2) {
            usleep((useconds_t)atoi(f[1]) * 1000u);
        } else if (strcmp(op, "exit") == 0 && n == 2) {
            exit(atoi(f[1]));
        } else if (strcmp(op, "kill9") == 0) {
            fflush(stdout);
            kill(getpid(), SIGKILL);
        } else {
            fprintf(stderr, "unknown operation or wrong field count: %s\n", argv[i]);
            return 64;
        }
    }
    printf("done=1\n");
    return 0;
}
