/* sim_visible: what the driver API and NVML show under CUDA_VISIBLE_DEVICES.
 *
 *   sim_visible
 *       Prints init (cuInit's result), count (cuDeviceGetCount, -1 if it
 *       failed), then for each ordinal N: dev.N.uuid (GPU-... as NVML prints
 *       it), dev.N.pci (cuDeviceGetPCIBusId), dev.N.ctx_device (cuCtxGetDevice
 *       in a context created on ordinal N) and dev.N.free (cuMemGetInfo_v2 free
 *       bytes there). get_past_end is cuDeviceGet(count). Then nvml.count and
 *       nvml.N.uuid for every NVML device. If argv[1] is given, allocates that
 *       many bytes in ordinal 0's context and prints nvml.N.used after it.
 */
#include "common.h"
#include <nvml.h>

static void uuid_text(const CUuuid *u, char *out) {
    const unsigned char *b = (const unsigned char *)u->bytes;
    sprintf(out, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
            b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

int main(int argc, char **argv) {
    test_init_output();
    kv_rc("init", cuInit(0));
    int count = -1;
    if (cuDeviceGetCount(&count) != CUDA_SUCCESS) count = -1;
    printf("count=%d\n", count);
    CUcontext first = NULL;
    for (int i = 0; i < count; i++) {
        CUdevice dev;
        CHECK(cuDeviceGet(&dev, i));
        CUuuid u;
        char text[64], pci[32];
        CHECK(cuDeviceGetUuid(&u, dev));
        uuid_text(&u, text);
        CHECK(cuDeviceGetPCIBusId(pci, sizeof pci, dev));
        printf("dev.%d.uuid=%s\ndev.%d.pci=%s\n", i, text, i, pci);
        CUcontext ctx;
        CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
        CUdevice seen = -1;
        CHECK(cuCtxGetDevice(&seen));
        size_t free_bytes = 0, total_bytes = 0;
        CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
        printf("dev.%d.ctx_device=%d\ndev.%d.free=%zu\n", i, (int)seen, i, free_bytes);
        if (i == 0) first = ctx;
        else CHECK(cuCtxDestroy(ctx));
    }
    if (count >= 0) {
        CUdevice dev;
        kv_rc("get_past_end", cuDeviceGet(&dev, count));
    }
    if (argc > 1 && first != NULL) {
        CUdeviceptr p;
        CHECK(cuCtxSetCurrent(first));
        CHECK(cuMemAlloc(&p, parse_bytes(argv[1])));
    }
    if (nvmlInit_v2() != NVML_SUCCESS) {
        printf("nvml.count=-1\n");
        return 0;
    }
    unsigned int n = 0;
    if (nvmlDeviceGetCount_v2(&n) != NVML_SUCCESS) n = 0;
    printf("nvml.count=%u\n", n);
    for (unsigned int i = 0; i < n; i++) {
        nvmlDevice_t d;
        char text[96];
        nvmlMemory_t mem;
        if (nvmlDeviceGetHandleByIndex_v2(i, &d) != NVML_SUCCESS) continue;
        if (nvmlDeviceGetUUID(d, text, sizeof text) == NVML_SUCCESS) printf("nvml.%u.uuid=%s\n", i, text);
        if (nvmlDeviceGetMemoryInfo(d, &mem) == NVML_SUCCESS) printf("nvml.%u.used=%llu\n", i, (unsigned long long)mem.used);
    }
    nvmlShutdown();
    return 0;
}
