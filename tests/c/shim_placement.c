/* shim_placement: allocations at named locations, and cuGetProcAddress over
 * aliased driver functions, for a run over the accepting driver
 * (accepting_driver.c), which says yes to all of them.
 *
 * Usage: shim_placement OP...; each OP prints key=value lines:
 *   init                          cuInit, retain device 0's primary context, make it current
 *   ctx:N                         retain device N's primary context, make it current
 *   vmm:NAME:TYPE:ID:SIZE         cuMemCreate at location (TYPE, ID)      -> NAME=rc
 *   nullprop:NAME                 cuMemCreate without properties           -> NAME=rc
 *   pool:NAME:TYPE:ID:SIZE        cuMemPoolCreate at (TYPE, ID), then cuMemAllocFromPoolAsync
 *                                 on the null stream                       -> NAME=rc
 *   mutepool:NAME:SIZE            the same from a pool that cannot tell its location
 *   info:LABEL                    cuMemGetInfo_v2 -> LABEL.free=B LABEL.total=B
 *   proc:NAME:VERSION:SYMBOL      cuGetProcAddress_v2(NAME, VERSION, 0); whether the answer is
 *                                 dlsym(RTLD_DEFAULT, SYMBOL) -> proc.NAME.VERSION=rc
 *                                 proc.NAME.VERSION.is=SYMBOL or "other"
 */
#define _GNU_SOURCE
#include "common.h"
#include <dlfcn.h>

static CUresult pool_alloc(CUmemLocationType type, int id, size_t max_size, size_t bytes) {
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = type;
    props.location.id = id;
    props.maxSize = max_size;
    CUmemoryPool pool;
    CHECK(cuMemPoolCreate(&pool, &props));
    CUdeviceptr ptr;
    return cuMemAllocFromPoolAsync(&ptr, bytes, pool, NULL);
}

int main(int argc, char **argv) {
    test_init_output();
    for (int i = 1; i < argc; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", argv[i]);
        char *f[6] = {0};
        int n = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ":", &save); tok && n < 6; tok = strtok_r(NULL, ":", &save)) f[n++] = tok;
        const char *op = f[0];
        if (strcmp(op, "init") == 0) {
            CUdevice dev;
            CUcontext ctx;
            CHECK(cuInit(0));
            CHECK(cuDeviceGet(&dev, 0));
            CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
            CHECK(cuCtxSetCurrent(ctx));
        } else if (strcmp(op, "ctx") == 0 && n == 2) {
            CUdevice dev;
            CUcontext ctx;
            CHECK(cuDeviceGet(&dev, atoi(f[1])));
            CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
            CHECK(cuCtxSetCurrent(ctx));
        } else if (strcmp(op, "vmm") == 0 && n == 5) {
            CUmemAllocationProp prop = vmm_prop_at((CUmemLocationType)atoi(f[2]));
            prop.location.id = atoi(f[3]);
            CUmemGenericAllocationHandle handle;
            kv_rc(f[1], cuMemCreate(&handle, parse_bytes(f[4]), &prop, 0));
        } else if (strcmp(op, "nullprop") == 0 && n == 2) {
            CUmemGenericAllocationHandle handle;
            kv_rc(f[1], cuMemCreate(&handle, 2 << 20, NULL, 0));
        } else if (strcmp(op, "pool") == 0 && n == 5) {
            kv_rc(f[1], pool_alloc((CUmemLocationType)atoi(f[2]), atoi(f[3]), 0, parse_bytes(f[4])));
        } else if (strcmp(op, "mutepool") == 0 && n == 3) {
            kv_rc(f[1], pool_alloc(CU_MEM_LOCATION_TYPE_DEVICE, 0, 1, parse_bytes(f[2])));
        } else if (strcmp(op, "info") == 0 && n == 2) {
            size_t free_bytes = 0, total_bytes = 0;
            CHECK(cuMemGetInfo(&free_bytes, &total_bytes));
            printf("%s.free=%zu\n%s.total=%zu\n", f[1], free_bytes, f[1], total_bytes);
        } else if (strcmp(op, "proc") == 0 && n == 4) {
            void *fn = NULL;
            CUdriverProcAddressQueryResult status;
            int version = atoi(f[2]);
            CUresult rc = cuGetProcAddress(f[1], &fn, version, 0, &status);
            printf("proc.%s.%d=%d\n", f[1], version, (int)rc);
            void *expected = dlsym(RTLD_DEFAULT, f[3]);
            printf("proc.%s.%d.is=%s\n", f[1], version, fn && fn == expected ? f[3] : "other");
        } else {
            fprintf(stderr, "shim_placement: bad op %s\n", argv[i]);
            return 64;
        }
    }
    return 0;
}
