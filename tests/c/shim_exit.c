/* shim_exit THREADS MS: THREADS threads allocate and free 1 MiB in a loop in
 * one context while the main thread calls exit(0) after MS milliseconds, so
 * that the shim's library destructor runs while allocations are in flight.
 * Prints ready=1 once every thread has allocated at least once. */
#include "common.h"
#include <pthread.h>

static CUcontext ctx;
static volatile int started;

static void *churn(void *arg) {
    (void)arg;
    if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return NULL;
    int counted = 0;
    for (;;) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 1u << 20) == CUDA_SUCCESS) {
            if (!counted) {
                __sync_fetch_and_add(&started, 1);
                counted = 1;
            }
            cuMemFree(p);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    test_init_output();
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    int ms = argc > 2 ? atoi(argv[2]) : 50;
    CUdevice dev;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    for (int i = 0; i < threads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, churn, NULL);
    }
    while (started < threads) usleep(1000);
    printf("ready=1\n");
    usleep((useconds_t)ms * 1000u);
    exit(0);
}
