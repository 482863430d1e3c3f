/* The smallest useful CUDA process: initialise, take the primary context,
 * allocate and free once, exit. benches/startup.rs times it with and
 * without the shim. */
#include <cuda.h>
#include <stdio.h>

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr ptr;
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
        cuMemAlloc(&ptr, 1 << 20) || cuMemFree(ptr) || cuDevicePrimaryCtxRelease(dev)) {
        fprintf(stderr, "startup: a driver call failed\n");
        return 1;
    }
    return 0;
}
