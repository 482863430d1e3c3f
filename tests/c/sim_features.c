/* sim_features: the wider driver surface on the simulated GPU, each part
 * checked by what the application can observe (bytes copied back, memory
 * charged and released, time a kernel takes to complete).
 *
 *   sim_features KERNEL_US
 * Kernels run KERNEL_US microseconds; timings are printed in microseconds. */
#define _GNU_SOURCE
#include "common.h"
#include <dlfcn.h>

static uint64_t kernel_us;
static CUfunction kernel;

static size_t free_now(void) {
    size_t free_bytes = 0, total_bytes = 0;
    CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
    return free_bytes;
}

static void copies(void) {
    enum { N = 1 << 20 };
    static unsigned char host[N], back[N];
    CUdeviceptr a, b;
    CHECK(cuMemAlloc(&a, N));
    CHECK(cuMemAlloc(&b, N));
    CHECK(cuMemsetD8(a, 0x5a, N));
    CHECK(cuMemcpyDtoH(back, a, N));
    int memset_ok = 1;
    for (int i = 0; i < N; i++) memset_ok &= back[i] == 0x5a;
    printf("copy.memset_ok=%d\n", memset_ok);
    CHECK(cuMemsetD32(a, 0x01020304u, N / 4));
    CHECK(cuMemcpyDtoH(back, a, 8));
    printf("copy.memset32_ok=%d\n", back[0] == 4 && back[1] == 3 && back[4] == 4);
    for (int i = 0; i < N; i++) host[i] = (unsigned char)(i * 7 + 3);
    CHECK(cuMemcpyHtoD(a, host, N));
    CHECK(cuMemcpyDtoD(b, a, N));
    memset(back, 0, N);
    CHECK(cuMemcpyDtoH(back, b, N));
    printf("copy.roundtrip_ok=%d\n", memcmp(host, back, N) == 0);
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    memset(back, 0, N);
    CHECK(cuMemcpyHtoDAsync(a, host + 1, N - 1, s));
    CHECK(cuMemcpyDtoDAsync(b, a, N - 1, s));
    CHECK(cuMemcpyDtoHAsync(back, b, N - 1, s));
    CHECK(cuStreamSynchronize(s));
    printf("copy.async_ok=%d\n", memcmp(host + 1, back, N - 1) == 0);
    CUdeviceptr base = 0;
    size_t size = 0;
    CHECK(cuMemGetAddressRange(&base, &size, a + 100));
    printf("copy.range_ok=%d\n", base == a && size >= N);
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(a));
    CHECK(cuMemFree(b));
}

static void vmm(void) {
    CUmemAllocationProp prop = vmm_prop_at(CU_MEM_LOCATION_TYPE_DEVICE);
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    size_t size = 2 * gran;
    size_t before = free_now();
    CUmemGenericAllocationHandle handle;
    CHECK(cuMemCreate(&handle, size, &prop, 0));
    printf("vmm.charged=%zu\nvmm.size=%zu\n", before - free_now(), size);
    CUdeviceptr va;
    CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK(cuMemMap(va, size, 0, handle, 0));
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuMemSetAccess(va, size, &access, 1));
    unsigned int in = 0xfeedbeef, out = 0;
    CHECK(cuMemcpyHtoD(va + size - 4, &in, 4));
    CHECK(cuMemcpyDtoH(&out, va + size - 4, 4));
    printf("vmm.copy_ok=%d\n", in == out);
    CHECK(cuMemUnmap(va, size));
    CHECK(cuMemAddressFree(va, size));
    CHECK(cuMemRelease(handle));
    printf("vmm.released=%zu\n", free_now() - (before - size));
}

static void pools(void) {
    const size_t size = 8u << 20;
    size_t before = free_now();
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr p;
    CHECK(cuMemAllocAsync(&p, size, s));
    CHECK(cuStreamSynchronize(s));
    printf("pool.default_charged=%zu\n", before - free_now());
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    CUmemoryPool def;
    CHECK(cuDeviceGetDefaultMemPool(&def, 0));
    CHECK(cuMemPoolTrimTo(def, 0));
    printf("pool.default_after_trim=%zu\n", before - free_now());

    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool pool;
    CHECK(cuMemPoolCreate(&pool, &props));
    CHECK(cuMemAllocFromPoolAsync(&p, size, pool, s));
    CHECK(cuStreamSynchronize(s));
    printf("pool.own_charged=%zu\n", before - free_now());
    CHECK(cuMemFreeAsync(p, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolDestroy(pool));
    printf("pool.own_after_destroy=%zu\n", before - free_now());
    CHECK(cuStreamDestroy(s));
}

static void arrays(void) {
    size_t before = free_now();
    CUDA_ARRAY_DESCRIPTOR d2;
    memset(&d2, 0, sizeof d2);
    d2.Width = 1024;
    d2.Height = 1024;
    d2.Format = CU_AD_FORMAT_FLOAT;
    d2.NumChannels = 4;
    CUarray a;
    CHECK(cuArrayCreate(&a, &d2));
    printf("array.charged=%zu\narray.bytes=%d\n", before - free_now(), 1024 * 1024 * 16);
    CHECK(cuArrayDestroy(a));
    printf("array.after_destroy=%zu\n", before - free_now());

    CUDA_ARRAY3D_DESCRIPTOR d3;
    memset(&d3, 0, sizeof d3);
    d3.Width = 256;
    d3.Height = 256;
    d3.Depth = 16;
    d3.Format = CU_AD_FORMAT_UNSIGNED_INT32;
    d3.NumChannels = 1;
    CHECK(cuArray3DCreate(&a, &d3));
    printf("array3d.charged=%zu\narray3d.bytes=%d\n", before - free_now(), 256 * 256 * 16 * 4);
    CHECK(cuArrayDestroy(a));
    printf("array3d.after_destroy=%zu\n", before - free_now());

    d3.Depth = 0;
    CUmipmappedArray m;
    CHECK(cuMipmappedArrayCreate(&m, &d3, 4));
    printf("mipmap.charged=%zu\nmipmap.level0_bytes=%d\n", before - free_now(), 256 * 256 * 4);
    CHECK(cuMipmappedArrayDestroy(m));
    printf("mipmap.after_destroy=%zu\n", before - free_now());
}

/* Time from `start` until `stream` has drained. */
static double drain_us(CUstream stream, double start) {
    CHECK(cuStreamSynchronize(stream));
    return now_us() - start;
}

static void graphs(void) {
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    /* Capture two kernels: nothing runs while capturing. */
    double t0 = now_us();
    CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CHECK(launch_us(kernel, kernel_us, s));
    CHECK(launch_us(kernel, kernel_us, s));
    CUgraph captured;
    CHECK(cuStreamEndCapture(s, &captured));
    printf("graph.capture_us=%.0f\n", drain_us(s, t0));
    CUgraphExec exec;
    CHECK(cuGraphInstantiate(&exec, captured, 0));
    t0 = now_us();
    CHECK(cuGraphLaunch(exec, s));
    printf("graph.captured_launch_us=%.0f\n", now_us() - t0);
    printf("graph.captured_run_us=%.0f\n", drain_us(s, t0));
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(captured));

    /* Build a chain of three kernel nodes by hand. */
    CUgraph built;
    CHECK(cuGraphCreate(&built, 0));
    CUgraphNode nodes[3];
    uint64_t us = kernel_us;
    void *args[] = {&us};
    CUDA_KERNEL_NODE_PARAMS params;
    memset(&params, 0, sizeof params);
    params.func = kernel;
    params.gridDimX = params.gridDimY = params.gridDimZ = 1;
    params.blockDimX = 32;
    params.blockDimY = params.blockDimZ = 1;
    params.kernelParams = args;
    for (int i = 0; i < 3; i++)
        CHECK(cuGraphAddKernelNode(&nodes[i], built, i ? &nodes[i - 1] : NULL, i ? 1 : 0, &params));
    CHECK(cuGraphInstantiate(&exec, built, 0));
    t0 = now_us();
    CHECK(cuGraphLaunch(exec, s));
    printf("graph.built_run_us=%.0f\n", drain_us(s, t0));
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(built));
    CHECK(cuStreamDestroy(s));
}

static void launches(void) {
    CUstream s;
    CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, 0));
    uint64_t us = kernel_us;
    void *args[] = {&us};
    CUlaunchConfig config;
    memset(&config, 0, sizeof config);
    config.gridDimX = config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 32;
    config.blockDimY = config.blockDimZ = 1;
    config.hStream = s;
    double t0 = now_us();
    CHECK(cuLaunchKernelEx(&config, kernel, args, NULL));
    printf("launch_ex.run_us=%.0f\n", drain_us(s, t0));
    t0 = now_us();
    CHECK(cuLaunchCooperativeKernel(kernel, 1, 1, 1, 32, 1, 1, 0, s, args));
    printf("cooperative.run_us=%.0f\n", drain_us(s, t0));
    /* A kernel whose name does not start with sim_ runs SIMGPU_KERNEL_US. */
    CUmodule module;
    CUfunction plain;
    CHECK(cuModuleLoadData(&module, "another image"));
    CHECK(cuModuleGetFunction(&plain, module, "vector_add"));
    t0 = now_us();
    CHECK(cuLaunchKernel(plain, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
    printf("plain.run_us=%.0f\n", drain_us(s, t0));
    CHECK(cuModuleUnload(module));
    CHECK(cuStreamDestroy(s));
}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void **, void **);

static void *proc(const char *name, int version, cuuint64_t flags, const char *key) {
    void *pfn = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    kv_rc(key, cuGetProcAddress(name, &pfn, version, flags, &status));
    return pfn;
}

static void proc_address(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) {
        fprintf(stderr, "libcuda.so.1 is not loaded: %s\n", dlerror());
        exit(2);
    }
    struct {
        const char *name;
        int version;
        cuuint64_t flags;
        const char *expected;
    } cases[] = {
        {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
        {"cuMemGetInfo", 13000, 0, "cuMemGetInfo_v2"},
        {"cuMemFree", 13000, 0, "cuMemFree_v2"},
        {"cuDeviceTotalMem", 13000, 0, "cuDeviceTotalMem_v2"},
        {"cuCtxDestroy", 13000, 0, "cuCtxDestroy_v2"},
        {"cuLaunchKernel", 13000, 0, "cuLaunchKernel"},
        {"cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuLaunchKernel_ptsz"},
        {"cuMemcpyHtoD", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoD_v2_ptds"},
        {"cuMemcpyHtoDAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemcpyHtoDAsync_v2_ptsz"},
        {"cuStreamBeginCapture", 13000, 0, "cuStreamBeginCapture_v2"},
        {"cuMemAllocAsync", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAllocAsync_ptsz"},
        {"cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2"},
    };
    char key[160];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(key, sizeof key, "proc.%s.%d.%llu", cases[i].name, cases[i].version,
                 (unsigned long long)cases[i].flags);
        void *got = proc(cases[i].name, cases[i].version, cases[i].flags, key);
        void *want = dlsym(lib, cases[i].expected);
        printf("%s.matches=%d\n", key, got != NULL && got == want);
    }
    /* A _ptsz launch on the per-thread default stream runs the kernel. */
    launch_fn ptsz = (launch_fn)proc("cuLaunchKernel", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                                     "ptsz.resolve");
    if (ptsz) {
        uint64_t us = kernel_us;
        void *args[] = {&us};
        double t0 = now_us();
        kv_rc("ptsz.launch", ptsz(kernel, 1, 1, 1, 32, 1, 1, 0, CU_STREAM_PER_THREAD, args, NULL));
        CHECK(cuCtxSynchronize());
        printf("ptsz.run_us=%.0f\n", now_us() - t0);
    }
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc != 2) {
        fprintf(stderr, "usage: sim_features KERNEL_US\n");
        return 64;
    }
    kernel_us = strtoull(argv[1], NULL, 10);
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    kernel = load_kernel("sim_sleep");
    copies();
    vmm();
    pools();
    arrays();
    graphs();
    launches();
    proc_address();
    printf("done=1\n");
    return 0;
}
