/* shim_async: stream-ordered allocation under the shim, one scenario per run.
 *
 *   shim_async otherdev   two devices; a stream of device 1 while device 0's
 *                         context is current: cuMemAllocAsync x4 of 400 MiB
 *                         -> async0..3=rc, dev0.free/dev1.free (MiB views)
 *   shim_async freeasync  800 MiB, a 1.5 s kernel, cuMemFreeAsync on its
 *                         stream, then cuMemAlloc 800 MiB at once
 *                         -> b=rc, driver.self (NVML bytes of this process,
 *                         or driver.self.error),
 *                         then after the stream syncs: c=rc
 *   shim_async reuse      cuMemAllocAsync 800 MiB, kernel, cuMemFreeAsync and
 *                         cuMemAllocAsync 800 MiB on the same stream
 *                         -> again=rc (the pool reuses the freed block),
 *                         other=rc (another stream, 800 MiB more), views
 *                         pending/synced; then again is freed and the stream
 *                         synchronised (the pool gives the block back):
 *                         view released, after=rc (800 MiB anew)
 *   shim_async syncfree HOW
 *                         cuMemAlloc 300 MiB, a 300 ms kernel, cuMemFreeAsync
 *                         on its stream, then one synchronisation: HOW is
 *                         stream (cuStreamSynchronize), ptsz (the per-thread
 *                         form, resolved by cuGetProcAddress), ctx
 *                         (cuCtxSynchronize), ctx2 (cuCtxSynchronize_v2) or
 *                         event (cuEventSynchronize of an event recorded after
 *                         the free) -> synced=rc, then ready=1 and no further
 *                         driver call until a line arrives on stdin
 * Each prints done=1 at the end; `hold` as a second argument waits for a
 * line on stdin before exiting (ready=1 first). */
#include "common.h"
#include <nvml.h>

#define MiB (1ull << 20)

/* Prints driver.self=<NVML's used bytes of this process on device 0>, or
 * driver.self.error=<what failed> (and no driver.self) when NVML cannot
 * tell, so a test never mistakes a failure for zero. */
static void print_nvml_self_bytes(void) {
    nvmlDevice_t dev;
    nvmlProcessInfo_t infos[64];
    unsigned count = 64;
    nvmlReturn_t rc = nvmlInit_v2();
    if (rc != NVML_SUCCESS) { printf("driver.self.error=nvmlInit_v2:%d\n", (int)rc); return; }
    rc = nvmlDeviceGetHandleByIndex_v2(0, &dev);
    if (rc != NVML_SUCCESS) { printf("driver.self.error=nvmlDeviceGetHandleByIndex_v2:%d\n", (int)rc); return; }
    rc = nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos);
    if (rc != NVML_SUCCESS) { printf("driver.self.error=nvmlDeviceGetComputeRunningProcesses_v3:%d\n", (int)rc); return; }
    for (unsigned i = 0; i < count; i++) {
        if (infos[i].pid == (unsigned)getpid()) {
            printf("driver.self=%llu\n", (unsigned long long)infos[i].usedGpuMemory);
            return;
        }
    }
    printf("driver.self.error=pid %d not listed\n", (int)getpid());
}

static void view(const char *label) {
    size_t free_bytes = 0, total_bytes = 0;
    kv_rc(label, cuMemGetInfo(&free_bytes, &total_bytes));
    printf("%s.free=%zu\n%s.total=%zu\n", label, free_bytes, label, total_bytes);
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc < 2) return 64;
    const char *mode = argv[1];
    CHECK(cuInit(0));
    CUdevice d0;
    CHECK(cuDeviceGet(&d0, 0));
    if (strcmp(mode, "otherdev") == 0) {
        CUdevice d1;
        CUcontext c0, c1;
        CUstream s1;
        CHECK(cuDeviceGet(&d1, 1));
        CHECK(cuCtxCreate(&c1, NULL, 0, d1));
        CHECK(cuStreamCreate(&s1, 0));
        CHECK(cuCtxCreate(&c0, NULL, 0, d0)); /* current: device 0 */
        char key[32];
        for (int i = 0; i < 4; i++) {
            CUdeviceptr p;
            snprintf(key, sizeof key, "async%d", i);
            kv_rc(key, cuMemAllocAsync(&p, 400 * MiB, s1));
        }
        CHECK(cuCtxSetCurrent(c1));
        CHECK(cuStreamSynchronize(s1));
        view("dev1");
        CHECK(cuCtxSetCurrent(c0));
        view("dev0");
        kv_rc("destroy1", cuCtxDestroy(c1));
        view("dev0_after");
    } else if (strcmp(mode, "freeasync") == 0 || strcmp(mode, "reuse") == 0) {
        CUcontext c;
        CUstream s, other;
        CHECK(cuCtxCreate(&c, NULL, 0, d0));
        CHECK(cuStreamCreate(&s, 0));
        CHECK(cuStreamCreate(&other, 0));
        CUfunction sleep_kernel = load_kernel("sim_sleep");
        CUdeviceptr a, b, c2;
        if (mode[0] == 'f') {
            CHECK(cuMemAlloc(&a, 800 * MiB));
        } else {
            CHECK(cuMemAllocAsync(&a, 800 * MiB, s));
        }
        CHECK(launch_us(sleep_kernel, 1500000, s));
        kv_rc("freeasync", cuMemFreeAsync(a, s));
        if (mode[0] == 'f') {
            CUresult rc = kv_rc("b", cuMemAlloc(&b, 800 * MiB));
            print_nvml_self_bytes();
            view("pending");
            CHECK(cuStreamSynchronize(s));
            view("synced");
            if (rc == CUDA_SUCCESS) CHECK(cuMemFree(b));
            kv_rc("c", cuMemAlloc(&c2, 800 * MiB));
        } else {
            CUresult again = kv_rc("again", cuMemAllocAsync(&c2, 800 * MiB, s));
            CUresult other_rc = kv_rc("other", cuMemAllocAsync(&b, 800 * MiB, other));
            print_nvml_self_bytes();
            view("pending");
            CHECK(cuStreamSynchronize(s));
            view("synced");
            if (again == CUDA_SUCCESS) CHECK(cuMemFreeAsync(c2, s));
            if (other_rc == CUDA_SUCCESS) CHECK(cuMemFreeAsync(b, other));
            CHECK(cuStreamSynchronize(other));
            CHECK(cuStreamSynchronize(s));
            view("released");
            kv_rc("after", cuMemAllocAsync(&c2, 800 * MiB, s));
            CHECK(cuStreamSynchronize(s));
        }
    } else if (strcmp(mode, "syncfree") == 0 && argc > 2) {
        const char *how = argv[2];
        CUcontext c;
        CUstream s;
        CUevent e;
        CUdeviceptr a;
        CHECK(cuCtxCreate(&c, NULL, 0, d0));
        CHECK(cuStreamCreate(&s, 0));
        CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
        CUresult (*sync_ptsz)(CUstream) = NULL;
        if (strcmp(how, "ptsz") == 0)
            CHECK(cuGetProcAddress("cuStreamSynchronize", (void **)&sync_ptsz, 12000,
                                   CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL));
        CUfunction sleep_kernel = load_kernel("sim_sleep");
        CHECK(cuMemAlloc(&a, 300 * MiB));
        CHECK(launch_us(sleep_kernel, 300000, s));
        kv_rc("freeasync", cuMemFreeAsync(a, s));
        CUresult rc;
        if (strcmp(how, "stream") == 0) rc = cuStreamSynchronize(s);
        else if (strcmp(how, "ptsz") == 0) rc = sync_ptsz(s);
        else if (strcmp(how, "ctx") == 0) rc = cuCtxSynchronize();
        else if (strcmp(how, "ctx2") == 0) rc = cuCtxSynchronize_v2(c);
        else if (strcmp(how, "event") == 0) {
            CHECK(cuEventRecord(e, s));
            rc = cuEventSynchronize(e);
        } else {
            fprintf(stderr, "unknown synchronisation %s\n", how);
            return 64;
        }
        kv_rc("synced", rc);
        printf("ready=1\n");
        wait_stdin_line();
        printf("done=1\n");
        return 0;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 64;
    }
    if (argc > 2 && strcmp(argv[2], "hold") == 0) {
        printf("ready=1\n");
        wait_stdin_line();
    }
    printf("done=1\n");
    return 0;
}
