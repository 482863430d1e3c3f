/* shim_routes: reaches cuMemGetInfo/cuMemAlloc/cuMemFree through every
 * route a program can take to the driver, and for each prints
 *   route=NAME  NAME.total=B (cuMemGetInfo's total)
 *   NAME.over=rc (allocating free+1 bytes)  NAME.fit=rc (1 MiB)  NAME.free=rc
 * and, for the functions the per-thread route resolved, which library and
 * symbol they are: procaddr_ptsz.alloc.lib=FILE procaddr_ptsz.alloc.symbol=NAME
 * (the same for .free). */
#define _GNU_SOURCE
#include "common.h"
#include <dlfcn.h>

typedef CUresult (*info_fn)(size_t *, size_t *);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);

static void route(const char *name, info_fn info, alloc_fn alloc, free_fn release) {
    printf("route=%s\n", name);
    if (!info || !alloc || !release) {
        printf("%s.resolved=0\n", name);
        return;
    }
    size_t free_bytes = 0, total_bytes = 0;
    char key[96];
    snprintf(key, sizeof key, "%s.info", name);
    kv_rc(key, info(&free_bytes, &total_bytes));
    printf("%s.total=%zu\n", name, total_bytes);
    CUdeviceptr p = 0;
    snprintf(key, sizeof key, "%s.over", name);
    kv_rc(key, alloc(&p, free_bytes + 1));
    snprintf(key, sizeof key, "%s.fit", name);
    kv_rc(key, alloc(&p, 1u << 20));
    snprintf(key, sizeof key, "%s.free", name);
    kv_rc(key, release(p));
}

static gpa2_fn gpa2;
static void *resolve(const char *symbol, int version, cuuint64_t flags) {
    void *pfn = NULL;
    CUdriverProcAddressQueryResult status;
    if (gpa2(symbol, &pfn, version, flags, &status) != CUDA_SUCCESS) return NULL;
    return pfn;
}

/* Prints KEY.lib (the file name of the library holding `fn`) and
 * KEY.symbol (its exported name), as the dynamic loader tells them. */
static void describe(const char *key, void *fn) {
    Dl_info found;
    if (!fn || !dladdr(fn, &found) || !found.dli_fname || !found.dli_sname) {
        printf("%s.lib=unknown\n%s.symbol=unknown\n", key, key);
        return;
    }
    const char *file = strrchr(found.dli_fname, '/');
    printf("%s.lib=%s\n%s.symbol=%s\n", key, file ? file + 1 : found.dli_fname, key, found.dli_sname);
}

/* The per-thread-default-stream forms of the stream-ordered allocator. */
static alloc_async_fn ptsz_alloc;
static free_async_fn ptsz_free;
static CUresult ptsz_alloc_sync(CUdeviceptr *p, size_t n) {
    CUresult rc = ptsz_alloc(p, n, CU_STREAM_PER_THREAD);
    return rc == CUDA_SUCCESS ? cuStreamSynchronize(CU_STREAM_PER_THREAD) : rc;
}
static CUresult ptsz_free_sync(CUdeviceptr p) {
    CUresult rc = ptsz_free(p, CU_STREAM_PER_THREAD);
    if (rc != CUDA_SUCCESS) return rc;
    rc = cuStreamSynchronize(CU_STREAM_PER_THREAD);
    CUmemoryPool pool;
    if (rc == CUDA_SUCCESS) rc = cuDeviceGetDefaultMemPool(&pool, 0);
    return rc == CUDA_SUCCESS ? cuMemPoolTrimTo(pool, 0) : rc;
}

int main(void) {
    test_init_output();
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));

    /* 1. Symbols bound at link time. */
    route("direct", cuMemGetInfo, cuMemAlloc, cuMemFree);

    /* 2. dlsym on a handle to libcuda.so.1, as programs that dlopen the driver do. */
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
        return 2;
    }
    route("dlsym", (info_fn)dlsym(lib, "cuMemGetInfo_v2"), (alloc_fn)dlsym(lib, "cuMemAlloc_v2"),
          (free_fn)dlsym(lib, "cuMemFree_v2"));

    /* 3. cuGetProcAddress_v2 found by dlsym, as NVIDIA's cuda-bindings does. */
    gpa2 = (gpa2_fn)dlsym(lib, "cuGetProcAddress_v2");
    if (!gpa2) {
        fprintf(stderr, "no cuGetProcAddress_v2\n");
        return 2;
    }
    route("procaddr", (info_fn)resolve("cuMemGetInfo", 13000, 0), (alloc_fn)resolve("cuMemAlloc", 13000, 0),
          (free_fn)resolve("cuMemFree", 13000, 0));

    /* 4. The versions an older runtime asks for. */
    route("procaddr_3020", (info_fn)resolve("cuMemGetInfo", 3020, 0), (alloc_fn)resolve("cuMemAlloc", 3020, 0),
          (free_fn)resolve("cuMemFree", 3020, 0));

    /* 5. Per-thread default stream forms. */
    ptsz_alloc = (alloc_async_fn)resolve("cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    ptsz_free = (free_async_fn)resolve("cuMemFreeAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    describe("procaddr_ptsz.alloc", (void *)ptsz_alloc);
    describe("procaddr_ptsz.free", (void *)ptsz_free);
    route("procaddr_ptsz", (info_fn)resolve("cuMemGetInfo", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
          ptsz_alloc ? ptsz_alloc_sync : NULL, ptsz_free ? ptsz_free_sync : NULL);

    /* 6. cuGetProcAddress asked for itself, then used. */
    gpa2_fn direct = gpa2;
    gpa2 = (gpa2_fn)resolve("cuGetProcAddress", 13000, 0);
    if (gpa2) {
        route("procaddr_self", (info_fn)resolve("cuMemGetInfo", 13000, 0), (alloc_fn)resolve("cuMemAlloc", 13000, 0),
              (free_fn)resolve("cuMemFree", 13000, 0));
    } else {
        route("procaddr_self", NULL, NULL, NULL);
    }
    gpa2 = direct;

    /* 7. The four-argument cuGetProcAddress of CUDA 11. */
    gpa1_fn gpa1 = (gpa1_fn)dlsym(lib, "cuGetProcAddress");
    void *info = NULL, *alloc = NULL, *release = NULL;
    if (gpa1) {
        gpa1("cuMemGetInfo", &info, 11000, 0);
        gpa1("cuMemAlloc", &alloc, 11000, 0);
        gpa1("cuMemFree", &release, 11000, 0);
    }
    route("procaddr_v1", (info_fn)info, (alloc_fn)alloc, (free_fn)release);

    /* 8. Contexts created through the variants cuGetProcAddress picks by
     * version: _v3 at 11040, _v4 at 12050; each costs a context.
     * -> ctxv3=rc ctxv3.charged=B, ctxv4=rc ctxv4.charged=B */
    {
        typedef CUresult (*create_v3_fn)(CUcontext *, CUexecAffinityParam *, int, unsigned, CUdevice);
        typedef CUresult (*create_v4_fn)(CUcontext *, CUctxCreateParams *, unsigned, CUdevice);
        create_v3_fn v3 = (create_v3_fn)resolve("cuCtxCreate", 11040, 0);
        create_v4_fn v4 = (create_v4_fn)resolve("cuCtxCreate", 12050, 0);
        for (int which = 3; which <= 4; which++) {
            size_t before = 0, after = 0, total = 0;
            CUcontext made = NULL;
            CHECK(cuMemGetInfo(&before, &total));
            CUresult rc = CUDA_ERROR_NOT_FOUND;
            if (which == 3 && v3) rc = v3(&made, NULL, 0, 0, 0);
            if (which == 4 && v4) rc = v4(&made, NULL, 0, 0);
            char key[32];
            snprintf(key, sizeof key, "ctxv%d", which);
            kv_rc(key, rc);
            CHECK(cuMemGetInfo(&after, &total));
            printf("%s.charged=%zu\n", key, before - after);
            if (rc == CUDA_SUCCESS) CHECK(cuCtxDestroy(made));
            CHECK(cuCtxSetCurrent(ctx));
        }
    }
    printf("done=1\n");
    return 0;
}
