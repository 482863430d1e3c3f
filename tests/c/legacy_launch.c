/* legacy_launch: the launch entry points simgpu lacks, for the compute
 * limit tests over tests/c/launch_driver.c.
 *
 *   legacy_launch ROUTE SECONDS
 *
 * Launches back to back for SECONDS through ROUTE, then waits for every
 * device it used, and prints launches=N, wall_us=W and, per device D it
 * used, share.D=S (D's kernel time over W). Every kernel runs 1 ms.
 *   launch      cuLaunch (the current context's device, 0)
 *   grid        cuLaunchGrid
 *   grid_async  cuLaunchGridAsync on a stream of its own
 *   multi       cuLaunchCooperativeKernelMultiDevice: one kernel on each of
 *               devices 0 and 1, each on a stream of its own
 * The entry points are looked up with dlsym in libcuda.so.1, as a program
 * that loads the driver itself does.
 */
#include <dlfcn.h>

#include "common.h"

typedef CUresult (*launch_fn)(CUfunction);
typedef CUresult (*grid_fn)(CUfunction, int, int);
typedef CUresult (*grid_async_fn)(CUfunction, int, int, CUstream);
typedef CUresult (*multi_fn)(CUDA_LAUNCH_PARAMS *, unsigned int, unsigned int);

static void *lookup(const char *name) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW);
    void *fn = driver ? dlsym(driver, name) : NULL;
    if (fn == NULL) {
        fprintf(stderr, "%s not found\n", name);
        exit(2);
    }
    return fn;
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc != 3) {
        fprintf(stderr, "usage: legacy_launch ROUTE SECONDS\n");
        return 64;
    }
    const char *route = argv[1];
    double seconds = atof(argv[2]);
    int multi = strcmp(route, "multi") == 0;
    int devices = multi ? 2 : 1;
    CUcontext ctx[2];
    CUstream stream[2];
    CUfunction f;
    uint64_t us = 1000;
    void *args[] = {&us};
    kv_rc("init", cuInit(0));
    for (int d = devices - 1; d >= 0; d--) {
        CUdevice dev;
        CHECK(cuDeviceGet(&dev, d));
        CHECK(cuDevicePrimaryCtxRetain(&ctx[d], dev));
        CHECK(cuCtxSetCurrent(ctx[d]));
        CHECK(cuStreamCreate(&stream[d], CU_STREAM_NON_BLOCKING));
    }
    f = load_kernel("sim_sleep");
    launch_fn launch = (launch_fn)lookup("cuLaunch");
    grid_fn grid = (grid_fn)lookup("cuLaunchGrid");
    grid_async_fn grid_async = (grid_async_fn)lookup("cuLaunchGridAsync");
    multi_fn launch_multi = multi ? (multi_fn)lookup("cuLaunchCooperativeKernelMultiDevice") : NULL;
    CUDA_LAUNCH_PARAMS list[2];
    memset(list, 0, sizeof list);
    for (int d = 0; d < devices; d++) {
        list[d].function = f;
        list[d].gridDimX = list[d].gridDimY = list[d].gridDimZ = 1;
        list[d].blockDimX = 32;
        list[d].blockDimY = list[d].blockDimZ = 1;
        list[d].hStream = stream[d];
        list[d].kernelParams = args;
    }

    uint64_t launches = 0;
    double t0 = now_us();
    while (now_us() < t0 + seconds * 1e6) {
        CUresult rc;
        if (multi) rc = launch_multi(list, 2, 0);
        else if (strcmp(route, "launch") == 0) rc = launch(f);
        else if (strcmp(route, "grid") == 0) rc = grid(f, 1, 1);
        else if (strcmp(route, "grid_async") == 0) rc = grid_async(f, 1, 1, stream[0]);
        else {
            fprintf(stderr, "unknown route %s\n", route);
            return 64;
        }
        if (rc != CUDA_SUCCESS) {
            printf("launch=%d\n", (int)rc);
            return 1;
        }
        launches++;
    }
    for (int d = 0; d < devices; d++) {
        CHECK(cuCtxSetCurrent(ctx[d]));
        CHECK(cuCtxSynchronize());
    }
    double wall_us = now_us() - t0;
    printf("launches=%" PRIu64 "\n", launches);
    printf("wall_us=%.0f\n", wall_us);
    for (int d = 0; d < devices; d++) printf("share.%d=%.4f\n", d, (double)launches * (double)us / wall_us);
    return 0;
}
