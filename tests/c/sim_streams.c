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
 *
 *   sim_streams hostfn
 *       On one stream: a 100 ms kernel, a host function that notes the time
 *       and sleeps 100 ms, a 50 ms kernel, a stream callback. Prints
 *       submit_us, called_early (host function ran before the submitting
 *       calls returned), query (cuStreamQuery right after), host_at_us and
 *       callback_at_us (from the first launch), callback_status,
 *       callback_stream_ok, other_thread (the function ran on a thread other
 *       than the caller's), sync_us; then ptsz_called=1 when the per-thread
 *       form from cuGetProcAddress ran its function on the null stream, and
 *       null_fn_rc.
 *
 *   sim_streams wait SAME   (SAME=1: one context; 0: two devices)
 *       Stream A: a 200 ms kernel, then event E. Stream B (other context
 *       unless SAME): cuStreamWaitEvent(B, E), a host function noting the
 *       time. Prints query_b (right after), waited_at_us (host function time
 *       from the launch), sync_b_us (cuStreamSynchronize(B) from the launch),
 *       never_recorded_rc (a wait on an event never recorded, then a sync).
 *
 *   sim_streams idle
 *       Events recorded on an idle context and behind work. Prints
 *       idle_query (cuEventQuery right after a record on an idle stream),
 *       behind_query (right after a record behind a 50 ms kernel),
 *       elapsed_ms (from the first to the second), again_query (a record
 *       after cuCtxSynchronize), again_after (1 when its time is not before
 *       the second's), other_wait_rc (cuStreamSynchronize of another
 *       context's stream that waited for the idle-recorded event).
 *
 *   sim_streams due
 *       A completion seen at its time on the device's clock, not when the
 *       worker next wakes. Eighteen times: an event S recorded on an idle
 *       stream, a host function sleeping 5 ms (so that what follows is
 *       queued before the device reaches it), a 50 us kernel, event E1, a
 *       100 ms kernel, event E2; then, in turn, cuEventQuery(E1) polled until
 *       it succeeds or cuEventSynchronize(E1). Prints late_us and
 *       late_sync_us (for each way, the median of the host time from just
 *       before S's record to E1 seen complete, less the device time from S
 *       to E1) and e2_early (how many times E2 was already complete then:
 *       should be 0). Then, behind the host function, a 50 us kernel, a
 *       fill and a copy into pinned memory, E1, a 400 us kernel (one batch): prints behind_copy (the
 *       copy's last byte, in hex, after cuEventSynchronize(E1): cd).
 *
 *   sim_streams copies
 *       Stream-ordered copies and fills behind kernels. Pinned: a 150 ms
 *       kernel, cuMemsetD8Async(0xab), cuMemcpyDtoHAsync into pinned memory,
 *       an event; prints pinned_early (first byte right after queuing, in
 *       hex), query, event_query, pinned_late (after cuEventSynchronize),
 *       event_us. Staged: a 100 ms kernel, cuMemcpyHtoDAsync from a pageable
 *       buffer of 0x11 that is overwritten with 0x22 at once; prints staged
 *       (what the device holds after a synchronous read back). Pageable
 *       destination: a 100 ms kernel, cuMemsetD32Async(0x01020304),
 *       cuMemcpyDtoHAsync into pageable memory; prints pageable_us (the call's
 *       duration) and pageable (first byte at return).
 *
 *   sim_streams pools
 *       Memory pool attributes on ordinal 0's default pool and a created
 *       pool, around stream-ordered allocations of 10 MiB (MiB figures):
 *       threshold (after setting it to 1 GiB), used.N/reserved.N/high.N at
 *       each step, dropped.N (device free bytes below the start),
 *       location_id, location_type, created_used, set_high_rc (setting a
 *       high mark to non-zero), set_type_rc (setting a read-only attribute).
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
    CUmemAllocationProp prop = vmm_prop_at(CU_MEM_LOCATION_TYPE_DEVICE);
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

static double t_origin;

struct note {
    volatile double at_us;
    volatile int called;
    volatile int status;
    volatile int stream_ok;
    pthread_t thread;
    CUstream expected_stream;
    int sleep_us;
};

static void CUDA_CB note_fn(void *p) {
    struct note *n = p;
    n->at_us = now_us() - t_origin;
    n->thread = pthread_self();
    n->called = 1;
    if (n->sleep_us > 0) usleep(n->sleep_us);
}

static void CUDA_CB note_callback(CUstream stream, CUresult status, void *p) {
    struct note *n = p;
    n->at_us = now_us() - t_origin;
    n->status = status;
    n->stream_ok = stream == n->expected_stream;
    n->called = 1;
}

static int run_hostfn(void) {
    CUcontext ctx = make_ctx(0);
    (void)ctx;
    CUfunction f = load_kernel("sim_sleep");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    struct note host = {0}, cb = {0};
    host.sleep_us = 100000;
    cb.expected_stream = s;
    cb.status = -1;
    t_origin = now_us();
    CHECK(launch_us(f, 100000, s));
    CHECK(cuLaunchHostFunc(s, note_fn, &host));
    CHECK(launch_us(f, 50000, s));
    CHECK(cuStreamAddCallback(s, note_callback, &cb, 0));
    printf("submit_us=%.1f\n", now_us() - t_origin);
    printf("called_early=%d\n", host.called || cb.called);
    kv_rc("query", cuStreamQuery(s));
    CHECK(cuStreamSynchronize(s));
    printf("sync_us=%.1f\n", now_us() - t_origin);
    printf("host_at_us=%.1f\ncallback_at_us=%.1f\n", host.at_us, cb.at_us);
    printf("callback_status=%d\ncallback_stream_ok=%d\n", cb.status, cb.stream_ok);
    printf("other_thread=%d\n", host.called && !pthread_equal(host.thread, pthread_self()));
    void *fn = NULL;
    CHECK(cuGetProcAddress("cuLaunchHostFunc", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
    struct note pt = {0};
    CHECK(((CUresult(*)(CUstream, CUhostFn, void *))fn)(NULL, note_fn, &pt));
    CHECK(cuCtxSynchronize());
    printf("ptsz_called=%d\n", pt.called);
    kv_rc("null_fn_rc", cuLaunchHostFunc(s, NULL, NULL));
    return 0;
}

static int run_wait(int same) {
    CUcontext a = make_ctx(0), b = same ? a : make_ctx(1);
    CUstream sa, sb;
    CUevent e, never;
    CHECK(cuCtxSetCurrent(a));
    CUfunction f = load_kernel("sim_sleep");
    CHECK(cuStreamCreate(&sa, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&never, CU_EVENT_DISABLE_TIMING));
    CHECK(cuCtxSetCurrent(b));
    CHECK(cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
    struct note waited = {0};
    t_origin = now_us();
    CHECK(launch_us(f, 200000, sa));
    CHECK(cuEventRecord(e, sa));
    CHECK(cuStreamWaitEvent(sb, e, 0));
    CHECK(cuLaunchHostFunc(sb, note_fn, &waited));
    kv_rc("query_b", cuStreamQuery(sb));
    CHECK(cuStreamSynchronize(sb));
    printf("sync_b_us=%.1f\nwaited_at_us=%.1f\n", now_us() - t_origin, waited.at_us);
    CHECK(cuStreamWaitEvent(sb, never, 0));
    kv_rc("never_recorded_rc", cuStreamSynchronize(sb));
    return 0;
}

static int run_idle(void) {
    CUcontext a = make_ctx(0), b = make_ctx(0);
    CHECK(cuCtxSetCurrent(a));
    CUfunction f = load_kernel("sim_sleep");
    CUstream s, sb;
    CUevent first, second, again;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&first, 0));
    CHECK(cuEventCreate(&second, 0));
    CHECK(cuEventCreate(&again, 0));
    CHECK(cuEventRecord(first, s));
    kv_rc("idle_query", cuEventQuery(first));
    CHECK(launch_us(f, 50000, s));
    CHECK(cuEventRecord(second, s));
    kv_rc("behind_query", cuEventQuery(second));
    CHECK(cuEventSynchronize(second));
    float ms = 0;
    CHECK(cuEventElapsedTime(&ms, first, second));
    printf("elapsed_ms=%.3f\n", ms);
    CHECK(cuCtxSynchronize());
    CHECK(cuEventRecord(again, s));
    kv_rc("again_query", cuEventQuery(again));
    CHECK(cuEventElapsedTime(&ms, second, again));
    printf("again_after=%d\n", ms >= 0);
    CHECK(cuCtxSetCurrent(b));
    CHECK(cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamWaitEvent(sb, again, 0));
    kv_rc("other_wait_rc", cuStreamSynchronize(sb));
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int run_due(void) {
    CUcontext ctx = make_ctx(0);
    (void)ctx;
    CUfunction f = load_kernel("sim_sleep");
    CUstream s;
    CUevent start, e1, e2;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&start, 0));
    CHECK(cuEventCreate(&e1, 0));
    CHECK(cuEventCreate(&e2, 0));
    enum { REPS = 18 };
    double late_us[REPS / 2], late_sync_us[REPS / 2];
    int e2_early = 0;
    for (int i = 0; i < REPS; i++) {
        struct note hold = {.sleep_us = 5000};
        double before_us = now_us();
        CHECK(cuEventRecord(start, s));
        CHECK(cuLaunchHostFunc(s, note_fn, &hold));
        CHECK(launch_us(f, 50, s));
        CHECK(cuEventRecord(e1, s));
        CHECK(launch_us(f, 100000, s));
        CHECK(cuEventRecord(e2, s));
        int by_sync = i % 2;
        CUresult rc;
        if (by_sync) {
            CHECK(cuEventSynchronize(e1));
        } else {
            while ((rc = cuEventQuery(e1)) == CUDA_ERROR_NOT_READY) {
            }
            CHECK(rc);
        }
        double seen_us = now_us();
        if (cuEventQuery(e2) == CUDA_SUCCESS) e2_early++;
        float ms = 0;
        CHECK(cuEventElapsedTime(&ms, start, e1));
        (by_sync ? late_sync_us : late_us)[i / 2] = seen_us - before_us - 1000.0 * ms;
        CHECK(cuStreamSynchronize(s));
    }
    /* A record behind a copy in the same batch: the copy happens when the
     * worker publishes, so the record is not complete before that. */
    CUdeviceptr dbuf;
    unsigned char *pinned;
    CHECK(cuMemAlloc(&dbuf, 4096));
    CHECK(cuMemAllocHost((void **)&pinned, 4096));
    memset(pinned, 0, 4096);
    struct note hold = {.sleep_us = 5000};
    CHECK(cuLaunchHostFunc(s, note_fn, &hold));
    CHECK(launch_us(f, 50, s));
    CHECK(cuMemsetD8Async(dbuf, 0xcd, 4096, s));
    CHECK(cuMemcpyDtoHAsync(pinned, dbuf, 4096, s));
    CHECK(cuEventRecord(e1, s));
    CHECK(launch_us(f, 400, s));
    CHECK(cuEventSynchronize(e1));
    printf("behind_copy=%02x\n", pinned[4095]);
    CHECK(cuStreamSynchronize(s));
    qsort(late_us, REPS / 2, sizeof late_us[0], cmp_double);
    qsort(late_sync_us, REPS / 2, sizeof late_sync_us[0], cmp_double);
    printf("late_us=%.1f\nlate_sync_us=%.1f\ne2_early=%d\n", late_us[REPS / 4], late_sync_us[REPS / 4], e2_early);
    return 0;
}

static int run_copies(void) {
    CUcontext ctx = make_ctx(0);
    (void)ctx;
    CUfunction f = load_kernel("sim_sleep");
    CUstream s;
    CUevent e;
    CUdeviceptr dbuf;
    unsigned char *pinned, pageable[4096];
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e, CU_EVENT_DEFAULT));
    CHECK(cuMemAlloc(&dbuf, 4096));
    CHECK(cuMemsetD8(dbuf, 0, 4096));
    CHECK(cuMemAllocHost((void **)&pinned, 4096));
    memset(pinned, 0, 4096);

    double t0 = now_us();
    CHECK(launch_us(f, 150000, s));
    CHECK(cuMemsetD8Async(dbuf, 0xab, 4096, s));
    CHECK(cuMemcpyDtoHAsync(pinned, dbuf, 4096, s));
    CHECK(cuEventRecord(e, s));
    printf("pinned_early=%02x\n", pinned[4095]);
    kv_rc("query", cuStreamQuery(s));
    kv_rc("event_query", cuEventQuery(e));
    CHECK(cuEventSynchronize(e));
    printf("event_us=%.1f\npinned_late=%02x\n", now_us() - t0, pinned[4095]);

    memset(pageable, 0x11, sizeof pageable);
    CHECK(launch_us(f, 100000, s));
    CHECK(cuMemcpyHtoDAsync(dbuf, pageable, sizeof pageable, s));
    memset(pageable, 0x22, sizeof pageable);
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(pageable, dbuf, sizeof pageable));
    printf("staged=%02x\n", pageable[100]);

    memset(pageable, 0, sizeof pageable);
    CHECK(launch_us(f, 100000, s));
    CHECK(cuMemsetD32Async(dbuf, 0x01020304, 1024, s));
    double t1 = now_us();
    CHECK(cuMemcpyDtoHAsync(pageable, dbuf, sizeof pageable, s));
    printf("pageable_us=%.1f\npageable=%02x\n", now_us() - t1, pageable[0]);
    return 0;
}

static uint64_t pool_u64(CUmemoryPool pool, CUmemPool_attribute attr) {
    cuuint64_t v = 0;
    CHECK(cuMemPoolGetAttribute(pool, attr, &v));
    return v >> 20;
}

static void pool_step(CUmemoryPool pool, int step, size_t start_free) {
    printf("used.%d=%" PRIu64 "\nreserved.%d=%" PRIu64 "\nhigh.%d=%" PRIu64 "\ndropped.%d=%zu\n", step,
           pool_u64(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT), step,
           pool_u64(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), step, pool_u64(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH),
           step, (start_free - free_bytes()) >> 20);
}

static int run_pools(void) {
    CUcontext ctx = make_ctx(0);
    (void)ctx;
    CUdevice dev;
    CUmemoryPool pool, created;
    CUstream s;
    CUdeviceptr p[3], q;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    size_t start = free_bytes();
    cuuint64_t threshold = 1ull << 30;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    printf("threshold=%" PRIu64 "\n", pool_u64(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD));
    for (int i = 0; i < 3; i++) CHECK(cuMemAllocAsync(&p[i], 10u << 20, s));
    pool_step(pool, 1, start);
    CHECK(cuMemFreeAsync(p[0], s));
    CHECK(cuStreamSynchronize(s));
    pool_step(pool, 2, start);
    cuuint64_t zero = 0, five = 5;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    pool_step(pool, 3, start);
    kv_rc("set_high_rc", cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &five));
    int type = 0;
    kv_rc("set_type_rc", cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_ALLOCATION_TYPE, &type));
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CHECK(cuMemPoolCreate(&created, &props));
    CHECK(cuMemAllocFromPoolAsync(&q, 4u << 20, created, s));
    printf("created_used=%" PRIu64 "\n", pool_u64(created, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
    int id = -1, loc = -1;
    CHECK(cuMemPoolGetAttribute(created, CU_MEMPOOL_ATTR_LOCATION_ID, &id));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_LOCATION_TYPE, &loc));
    printf("location_id=%d\nlocation_type=%d\n", id, loc);
    CHECK(cuMemFree(p[1]));
    CHECK(cuMemFreeAsync(p[2], s));
    CHECK(cuMemFreeAsync(q, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolTrimTo(pool, 0));
    pool_step(pool, 4, start);
    return 0;
}

int main(int argc, char **argv) {
    test_init_output();
    CHECK(cuInit(0));
    if (argc == 2 && strcmp(argv[1], "getctx") == 0) return run_getctx();
    if (argc == 2 && strcmp(argv[1], "retain") == 0) return run_retain();
    if (argc == 2 && strcmp(argv[1], "hostfn") == 0) return run_hostfn();
    if (argc == 2 && strcmp(argv[1], "copies") == 0) return run_copies();
    if (argc == 2 && strcmp(argv[1], "pools") == 0) return run_pools();
    if (argc == 2 && strcmp(argv[1], "idle") == 0) return run_idle();
    if (argc == 2 && strcmp(argv[1], "due") == 0) return run_due();
    if (argc == 3 && strcmp(argv[1], "wait") == 0) return run_wait(atoi(argv[2]));
    fprintf(stderr, "usage: sim_streams getctx|retain|hostfn|wait SAME|idle|due|copies|pools\n");
    return 64;
}
