/* skip_gate: a hostile tenant's process that loads the shim (so it holds a
 * slot of its tenant and its context is charged) but launches through the
 * driver's own cuLaunchKernel, found with glibc's dlsym reached through
 * dlvsym (which the shim does not answer): its launches skip the gate and
 * run outside its tenant's turns.
 *
 *   skip_gate KERNEL_US SECONDS
 *
 * Prints `started`, then, if it lives to the end, kernels=K.
 */
#define _GNU_SOURCE
#include "common.h"
#include <dlfcn.h>

typedef CUresult (*launch_kernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, CUstream, void **, void **);
typedef void *(*dlsym_fn)(void *, const char *);

int main(int argc, char **argv) {
    test_init_output();
    if (argc != 3) {
        fprintf(stderr, "usage: skip_gate KERNEL_US SECONDS\n");
        return 64;
    }
    uint64_t kernel_us = strtoull(argv[1], NULL, 10);
    double seconds = atof(argv[2]);
    CUdevice dev;
    CUcontext ctx;
    kv_rc("init", cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUfunction f = load_kernel("sim_sleep");
    CUstream stream;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

    dlsym_fn raw_dlsym = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    if (raw_dlsym == NULL) raw_dlsym = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    launch_kernel_fn launch = raw_dlsym && driver ? (launch_kernel_fn)raw_dlsym(driver, "cuLaunchKernel") : NULL;
    if (launch == NULL || launch == (launch_kernel_fn)cuLaunchKernel) {
        fprintf(stderr, "the driver's own cuLaunchKernel was not found\n");
        return 3;
    }
    printf("started=1\n");
    void *args[] = {&kernel_us};
    uint64_t kernels = 0;
    double until = now_us() + seconds * 1e6;
    while (now_us() < until) {
        CHECK(launch(f, 1, 1, 1, 32, 1, 1, 0, stream, args, NULL));
        kernels++;
        if (kernels % 4 == 0) CHECK(cuStreamSynchronize(stream));
    }
    CHECK(cuStreamSynchronize(stream));
    printf("kernels=%llu\n", (unsigned long long)kernels);
    return 0;
}
