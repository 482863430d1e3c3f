/* cap_demo: what an application sees under a gpuslice memory cap.
 *
 * It asks the driver how much memory the GPU has, then allocates 256 MiB
 * blocks until the driver says no, and prints each step. Run it bare and
 * under `gpuslice run --memory 1GiB` to see the difference; see
 * scripts/demo.sh.
 */
#include <cuda.h>
#include <stdio.h>

#define MIB (1024.0 * 1024.0)
#define CHECK(call)                                                          \
    do {                                                                     \
        CUresult rc_ = (call);                                               \
        if (rc_ != CUDA_SUCCESS) {                                           \
            const char *name_ = "?";                                         \
            cuGetErrorName(rc_, &name_);                                     \
            fprintf(stderr, "%s failed: %s (%d)\n", #call, name_, (int)rc_); \
            return 1;                                                        \
        }                                                                    \
    } while (0)

int main(void) {
    CUdevice dev;
    CUcontext ctx;
    char name[128];
    size_t free_bytes, total_bytes;
    CUdeviceptr blocks[256];
    int count = 0;

    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDeviceGetName(name, sizeof name, dev));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
    printf("device 0: %s, total %.0f MiB, free %.0f MiB\n", name, total_bytes / MIB, free_bytes / MIB);

    for (count = 0; count < 256; count++) {
        CUresult rc = cuMemAlloc(&blocks[count], 256u << 20);
        if (rc != CUDA_SUCCESS) {
            const char *err = "?";
            cuGetErrorName(rc, &err);
            printf("allocation %d of 256 MiB refused: %s\n", count + 1, err);
            break;
        }
        CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
        printf("allocated %4d MiB, free %.0f MiB\n", (count + 1) * 256, free_bytes / MIB);
    }
    for (int i = 0; i < count; i++) CHECK(cuMemFree(blocks[i]));
    CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
    printf("freed everything, free %.0f MiB of %.0f MiB\n", free_bytes / MIB, total_bytes / MIB);
    CHECK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
