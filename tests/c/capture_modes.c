/* capture_modes: what a stream capture forbids, and to which thread, by the
 * mode it was begun in and the calling thread's own mode
 * (cuThreadExchangeStreamCaptureMode). The main thread captures; the
 * "other" thread is a second thread that runs one call at a time while the
 * capture is open. Each call's result is printed as `key=rc`, and each
 * capture's end as `<case>.end=rc` with `<case>.graph=0|1`. */
#define _GNU_SOURCE
#include "common.h"
#include <pthread.h>

static CUcontext ctx;
static CUstream stream;
static CUfunction kernel;

typedef CUresult (*call_fn)(void);

struct other_call {
    call_fn call;
    CUstreamCaptureMode mode;
    CUresult rc;
};

static void *run_other(void *arg) {
    struct other_call *c = arg;
    CHECK(cuCtxSetCurrent(ctx));
    CUstreamCaptureMode mode = c->mode;
    CHECK(cuThreadExchangeStreamCaptureMode(&mode));
    c->rc = c->call();
    return NULL;
}

/* Runs `call` on a new thread in interaction mode `mode`; its result. */
static CUresult on_other_thread(call_fn call, CUstreamCaptureMode mode) {
    struct other_call c = {call, mode, CUDA_ERROR_UNKNOWN};
    pthread_t t;
    if (pthread_create(&t, NULL, run_other, &c) != 0) exit(3);
    pthread_join(t, NULL);
    return c.rc;
}

static CUresult alloc_and_free(void) {
    CUdeviceptr p;
    CUresult rc = cuMemAlloc(&p, 1 << 20);
    if (rc == CUDA_SUCCESS) rc = cuMemFree(p);
    return rc;
}

static CUresult ctx_sync(void) { return cuCtxSynchronize(); }
static CUresult legacy_sync(void) { return cuStreamSynchronize(CU_STREAM_LEGACY); }
static CUdeviceptr buffer;
static CUresult sync_copy(void) {
    static unsigned char host[64];
    return cuMemcpyHtoD(buffer, host, sizeof host);
}
static CUresult end_capture(void) {
    CUgraph g = NULL;
    return cuStreamEndCapture(stream, &g);
}

static void begin(CUstreamCaptureMode mode) {
    CHECK(cuStreamBeginCapture(stream, mode));
    CHECK(launch_us(kernel, 1, stream));
}

static void end(const char *name) {
    CUgraph g = NULL;
    CUresult rc = cuStreamEndCapture(stream, &g);
    printf("%s.end=%d\n%s.graph=%d\n", name, (int)rc, name, g != NULL);
    if (g != NULL) CHECK(cuGraphDestroy(g));
}

static void status(const char *key) {
    CUstreamCaptureStatus s;
    CHECK(cuStreamIsCapturing(stream, &s));
    printf("%s=%d\n", key, (int)s);
}

int main(void) {
    test_init_output();
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    kernel = load_kernel("sim_sleep");
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&buffer, 64));

    /* Global capture: another thread in global mode may not allocate or
     * synchronise, and its attempt breaks the capture. */
    begin(CU_STREAM_CAPTURE_MODE_GLOBAL);
    kv_rc("global.other_alloc", on_other_thread(alloc_and_free, CU_STREAM_CAPTURE_MODE_GLOBAL));
    status("global.status");
    kv_rc("global.launch_after", launch_us(kernel, 1, stream));
    end("global");

    begin(CU_STREAM_CAPTURE_MODE_GLOBAL);
    kv_rc("global_sync.other_ctx_sync", on_other_thread(ctx_sync, CU_STREAM_CAPTURE_MODE_GLOBAL));
    end("global_sync");

    /* ... unless it is in relaxed mode, or thread-local mode (other
     * threads' captures are then none of its business). */
    begin(CU_STREAM_CAPTURE_MODE_GLOBAL);
    kv_rc("global_relaxed.other_alloc", on_other_thread(alloc_and_free, CU_STREAM_CAPTURE_MODE_RELAXED));
    kv_rc("global_relaxed.other_ctx_sync", on_other_thread(ctx_sync, CU_STREAM_CAPTURE_MODE_RELAXED));
    kv_rc("global_relaxed.other_legacy_sync", on_other_thread(legacy_sync, CU_STREAM_CAPTURE_MODE_RELAXED));
    kv_rc("global_thread_local.other_ctx_sync", on_other_thread(ctx_sync, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    status("global_relaxed.status");
    end("global_relaxed");

    /* Thread-local capture: other threads in global mode may; the
     * capturing thread itself may not. */
    begin(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    kv_rc("thread_local.other_alloc", on_other_thread(alloc_and_free, CU_STREAM_CAPTURE_MODE_GLOBAL));
    kv_rc("thread_local.other_ctx_sync", on_other_thread(ctx_sync, CU_STREAM_CAPTURE_MODE_GLOBAL));
    status("thread_local.status_before");
    kv_rc("thread_local.own_sync_copy", sync_copy());
    status("thread_local.status_after");
    end("thread_local");

    /* Relaxed capture: no one is forbidden, the capturing thread included. */
    begin(CU_STREAM_CAPTURE_MODE_RELAXED);
    kv_rc("relaxed.own_alloc", alloc_and_free());
    kv_rc("relaxed.other_alloc", on_other_thread(alloc_and_free, CU_STREAM_CAPTURE_MODE_GLOBAL));
    end("relaxed");

    /* A capture not begun in relaxed mode is ended by its own thread only. */
    begin(CU_STREAM_CAPTURE_MODE_GLOBAL);
    kv_rc("wrong_thread.other_end", on_other_thread(end_capture, CU_STREAM_CAPTURE_MODE_RELAXED));
    status("wrong_thread.status");
    end("wrong_thread");

    /* With no capture open, everything is allowed again. */
    kv_rc("after.other_alloc", on_other_thread(alloc_and_free, CU_STREAM_CAPTURE_MODE_GLOBAL));
    kv_rc("after.own_ctx_sync", cuCtxSynchronize());
    CHECK(cuStreamDestroy(stream));
    printf("done=1\n");
    return 0;
}
