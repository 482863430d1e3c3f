/* pools: runs a script of stream-ordered pool operations on device 0's
 * default pool, one token per argument, printing `key=value` lines.
 *
 *   ctx                     cuCtxCreate on device 0
 *   stream:N                cuStreamCreate stream N (0..7)
 *   alloc:P:SIZE:N          cuMemAllocAsync of SIZE on stream N  -> P=rc
 *   free:P:N                cuMemFreeAsync of P on stream N      -> free.P=rc
 *   loop:COUNT:SIZE:N       cuMemAllocAsync of SIZE on stream N, then COUNT
 *                           times cuMemFreeAsync and cuMemAllocAsync of SIZE
 *                           on N -> loop.first=rc loop.admitted=K loop.refused=J
 *   kernel:N:US             a sim_sleep kernel of US microseconds on stream N
 *   sync:N                  cuStreamSynchronize of stream N
 *   ctxsync                 cuCtxSynchronize
 *   eventsync:N             cuEventRecord on stream N, cuEventSynchronize
 *   waitevent:A:B           cuEventRecord on stream B, cuStreamWaitEvent(A)
 *   threshold:SIZE|max      set CU_MEMPOOL_ATTR_RELEASE_THRESHOLD -> threshold=rc
 *   reuse:WHICH:0|1         set CU_MEMPOOL_ATTR_REUSE_<WHICH> (follow,
 *                           opportunistic, internal) -> reuse.WHICH=rc
 *   trim:SIZE               cuMemPoolTrimTo -> trim=rc
 *   resethigh               set RESERVED_MEM_HIGH and USED_MEM_HIGH to 0
 *                           -> resethigh=rc; setting 5 -> sethigh5=rc
 *   attrs:LABEL             LABEL.reserved, .used, .reserved_high,
 *                           .used_high, .threshold (bytes), .follow,
 *                           .opportunistic, .internal
 *   info:LABEL              cuMemGetInfo -> LABEL.free LABEL.total
 *   check:LABEL             attrs:LABEL, then LABEL.ready=1 and wait for a
 *                           line on stdin (a test reads the ledger there)
 *   create                  cuMemPoolCreate on device 0; the pool every later
 *                           operation names (attrs, threshold, …) -> create=rc
 *   palloc:P:SIZE:N         cuMemAllocFromPoolAsync of SIZE from that pool on
 *                           stream N -> P=rc
 *   destroy                 cuMemPoolDestroy of that pool -> destroy=rc
 *   hold                    ready=1, then wait for a line on stdin
 * Prints done=1 at the end. */
#include "common.h"

#define MAX_PTRS 16

static CUstream streams[8];
static CUmemoryPool pool;
static CUfunction sleep_kernel;
static struct {
    char name[32];
    CUdeviceptr ptr;
} ptrs[MAX_PTRS];
static int nptrs;

static CUdeviceptr *slot(const char *name) {
    for (int i = 0; i < nptrs; i++)
        if (strcmp(ptrs[i].name, name) == 0) return &ptrs[i].ptr;
    if (nptrs == MAX_PTRS) exit(64);
    snprintf(ptrs[nptrs].name, sizeof ptrs[nptrs].name, "%s", name);
    return &ptrs[nptrs++].ptr;
}

static CUstream stream_of(const char *text) {
    int n = atoi(text);
    if (n < 0 || n > 7) exit(64);
    return streams[n];
}

static uint64_t attr_u64(CUmemPool_attribute attr) {
    cuuint64_t v = 0;
    CHECK(cuMemPoolGetAttribute(pool, attr, &v));
    return v;
}

static int attr_int(CUmemPool_attribute attr) {
    int v = -1;
    CHECK(cuMemPoolGetAttribute(pool, attr, &v));
    return v;
}

static void attrs(const char *label) {
    printf("%s.reserved=%" PRIu64 "\n", label, attr_u64(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    printf("%s.used=%" PRIu64 "\n", label, attr_u64(CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
    printf("%s.reserved_high=%" PRIu64 "\n", label, attr_u64(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH));
    printf("%s.used_high=%" PRIu64 "\n", label, attr_u64(CU_MEMPOOL_ATTR_USED_MEM_HIGH));
    printf("%s.threshold=%" PRIu64 "\n", label, attr_u64(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD));
    printf("%s.follow=%d\n", label, attr_int(CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES));
    printf("%s.opportunistic=%d\n", label, attr_int(CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC));
    printf("%s.internal=%d\n", label, attr_int(CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES));
}

int main(int argc, char **argv) {
    test_init_output();
    CHECK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
    for (int i = 1; i < argc; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", argv[i]);
        char *save = NULL;
        char *op = strtok_r(buf, ":", &save);
        char *a = strtok_r(NULL, ":", &save);
        char *b = strtok_r(NULL, ":", &save);
        char *c = strtok_r(NULL, ":", &save);
        if (op == NULL) return 64;
        if (strcmp(op, "ctx") == 0) {
            CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
            sleep_kernel = load_kernel("sim_sleep");
        } else if (strcmp(op, "stream") == 0 && a) {
            CHECK(cuStreamCreate(&streams[atoi(a) & 7], CU_STREAM_NON_BLOCKING));
        } else if (strcmp(op, "alloc") == 0 && a && b && c) {
            kv_rc(a, cuMemAllocAsync(slot(a), parse_bytes(b), stream_of(c)));
        } else if (strcmp(op, "free") == 0 && a && b) {
            char key[48];
            snprintf(key, sizeof key, "free.%s", a);
            kv_rc(key, cuMemFreeAsync(*slot(a), stream_of(b)));
        } else if (strcmp(op, "loop") == 0 && a && b && c) {
            int count = atoi(a), admitted = 0, refused = 0;
            uint64_t size = parse_bytes(b);
            CUstream s = stream_of(c);
            CUdeviceptr p = 0;
            CUresult rc = kv_rc("loop.first", cuMemAllocAsync(&p, size, s));
            for (int k = 0; k < count && rc == CUDA_SUCCESS; k++) {
                CHECK(cuMemFreeAsync(p, s));
                rc = cuMemAllocAsync(&p, size, s);
                if (rc == CUDA_SUCCESS) admitted++;
                else refused++;
            }
            printf("loop.admitted=%d\nloop.refused=%d\n", admitted, refused);
        } else if (strcmp(op, "kernel") == 0 && a && b) {
            CHECK(launch_us(sleep_kernel, strtoull(b, NULL, 10), stream_of(a)));
        } else if (strcmp(op, "sync") == 0 && a) {
            CHECK(cuStreamSynchronize(stream_of(a)));
        } else if (strcmp(op, "ctxsync") == 0) {
            CHECK(cuCtxSynchronize());
        } else if (strcmp(op, "eventsync") == 0 && a) {
            CUevent e;
            CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
            CHECK(cuEventRecord(e, stream_of(a)));
            CHECK(cuEventSynchronize(e));
        } else if (strcmp(op, "waitevent") == 0 && a && b) {
            CUevent e;
            CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
            CHECK(cuEventRecord(e, stream_of(b)));
            CHECK(cuStreamWaitEvent(stream_of(a), e, 0));
        } else if (strcmp(op, "threshold") == 0 && a) {
            cuuint64_t v = strcmp(a, "max") == 0 ? UINT64_MAX : parse_bytes(a);
            kv_rc("threshold", cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v));
        } else if (strcmp(op, "reuse") == 0 && a && b) {
            CUmemPool_attribute attr = strcmp(a, "follow") == 0          ? CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES
                                       : strcmp(a, "opportunistic") == 0 ? CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC
                                                                         : CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
            int v = atoi(b);
            char key[48];
            snprintf(key, sizeof key, "reuse.%s", a);
            kv_rc(key, cuMemPoolSetAttribute(pool, attr, &v));
        } else if (strcmp(op, "trim") == 0 && a) {
            kv_rc("trim", cuMemPoolTrimTo(pool, parse_bytes(a)));
        } else if (strcmp(op, "resethigh") == 0) {
            cuuint64_t zero = 0, five = 5;
            CUresult rc = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero);
            if (rc == CUDA_SUCCESS) rc = cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero);
            kv_rc("resethigh", rc);
            kv_rc("sethigh5", cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &five));
        } else if (strcmp(op, "attrs") == 0 && a) {
            attrs(a);
        } else if (strcmp(op, "info") == 0 && a) {
            size_t free_bytes = 0, total_bytes = 0;
            CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
            printf("%s.free=%zu\n%s.total=%zu\n", a, free_bytes, a, total_bytes);
        } else if (strcmp(op, "check") == 0 && a) {
            attrs(a);
            printf("%s.ready=1\n", a);
            wait_stdin_line();
        } else if (strcmp(op, "create") == 0) {
            CUmemPoolProps props;
            memset(&props, 0, sizeof props);
            props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
            props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = 0;
            kv_rc("create", cuMemPoolCreate(&pool, &props));
        } else if (strcmp(op, "palloc") == 0 && a && b && c) {
            kv_rc(a, cuMemAllocFromPoolAsync(slot(a), parse_bytes(b), pool, stream_of(c)));
        } else if (strcmp(op, "destroy") == 0) {
            kv_rc("destroy", cuMemPoolDestroy(pool));
        } else if (strcmp(op, "hold") == 0) {
            printf("ready=1\n");
            wait_stdin_line();
        } else {
            fprintf(stderr, "unknown operation %s\n", argv[i]);
            return 64;
        }
    }
    printf("done=1\n");
    return 0;
}
