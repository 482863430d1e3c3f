/* sim_streams: streams' contexts, host functions, stream-ordered copies and
 * cross-stream waits on the simulated GPU.
 *
 *   sim_streams getctx      (needs 2 devices)
 *       cuStreamGetCtx/_v2/_ptsz for a stream of each of two contexts, the
 *       null, legacy and per-thread streams, and bad arguments. Prints
 *       <case>=1 when the context returned is the expected one, <case>_rc=N
 *       for the error cases.
 *
 *   sim_streams retain
 *       cuMemRetainAllocationHandle on a mapped VMM range: prints same_handle,
 *       and the free bytes (cuMemGetInfo) after each step: free.created,
 *       free.released_once (original reference released, range still mapped
 *       and retained), free.unmapped (retained reference still held),
 *       free.released_twice; retain_unmapped_rc for an address never mapped.
 */
#include "common.h"
#include <pthread.h>

static CUcontext make_ctx(int ordinal) {
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, ordinal));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    return ctx;
}

static size_t free_bytes(void) {
    size_t f = 0, t = 0;
    CHECK(cuMemGetInfo(&f, &t));
    return f;
}

typedef CUresult (*get_ctx_fn)(CUstream, CUcontext *);
typedef CUresult (*get_ctx_v2_fn)(CUstream, CUcontext *, CUgreenCtx *);

static int run_getctx(void) {
    CUcontext a = make_ctx(0), b = make_ctx(1), got;
    CUstream sa, sb;
    CHECK(cuCtxSetCurrent(a));
    CHECK(cuStreamCreate(&sa, CU_STREAM_NON_BLOCKING));
    CHECK(cuCtxSetCurrent(b));
    CHECK(cuStreamCreate(&sb, CU_STREAM_DEFAULT));
    /* Current is b; a's stream still belongs to a. */
    CHECK(cuStreamGetCtx(sa, &got));
    printf("stream_a=%d\n", got == a);
    CHECK(cuStreamGetCtx(sb, &got));
    printf("stream_b=%d\n", got == b);
    CHECK(cuStreamGetCtx(NULL, &got));
    printf("null_is_current=%d\n", got == b);
    CHECK(cuStreamGetCtx(CU_STREAM_LEGACY, &got));
    printf("legacy_is_current=%d\n", got == b);
    CHECK(cuStreamGetCtx(CU_STREAM_PER_THREAD, &got));
    printf("per_thread_is_current=%d\n", got == b);
    CUgreenCtx green = (CUgreenCtx)0x1234;
    CHECK(cuStreamGetCtx_v2(sa, &got, &green));
    printf("v2_stream_a=%d\nv2_green_null=%d\n", got == a, green == NULL);
    void *fn = NULL;
    CHECK(cuGetProcAddress("cuStreamGetCtx", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    got = NULL;
    CHECK(((get_ctx_v2_fn)fn)(sa, &got, NULL));
    printf("ptsz_v2_stream_a=%d\n", got == a);
    CHECK(cuGetProcAddress("cuStreamGetCtx", &fn, 12000, 0, NULL));
    got = NULL;
    CHECK(((get_ctx_fn)fn)(sb, &got));
    printf("proc_12000_stream_b=%d\n", got == b);
    kv_rc("null_out_rc", cuStreamGetCtx(sa, NULL));
    kv_rc("bad_stream_rc", cuStreamGetCtx((CUstream)0x7777, &got));
    CUcontext popped;
    while (cuCtxPopCurrent(&popped) == CUDA_SUCCESS) {
    }
    kv_rc("no_current_rc", cuStreamGetCtx(NULL, &got));
    return 0;
}

static int run_retain(void) {
    CUcontext ctx = make_ctx(0);
    (void)ctx;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t size = 64u << 20;
    CUmemGenericAllocationHandle h, again = 0;
    CUdeviceptr va;
    size_t before = free_bytes();
    CHECK(cuMemCreate(&h, size, &prop, 0));
    CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK(cuMemMap(va, size, 0, h, 0));
    printf("free.created=%zu\nfree.before=%zu\n", free_bytes(), before);
    CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + 4096)));
    printf("same_handle=%d\n", again == h);
    CHECK(cuMemRelease(h));
    printf("free.released_once=%zu\n", free_bytes());
    CHECK(cuMemUnmap(va, size));
    printf("free.unmapped=%zu\n", free_bytes());
    CHECK(cuMemRelease(again));
    printf("free.released_twice=%zu\n", free_bytes());
    kv_rc("release_again_rc", cuMemRelease(again));
    kv_rc("retain_unmapped_rc", cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)va));
    CHECK(cuMemAddressFree(va, size));
    return 0;
}

int main(int argc, char **argv) {
    test_init_output();
    CHECK(cuInit(0));
    if (argc == 2 && strcmp(argv[1], "getctx") == 0) return run_getctx();
    if (argc == 2 && strcmp(argv[1], "retain") == 0) return run_retain();
    fprintf(stderr, "usage: sim_streams getctx|retain\n");
    return 64;
}
