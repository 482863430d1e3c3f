/* sim_errors: bad handles and bad arguments, and the CUresult each gets.
 * Prints `<case>=<rc>` for every case; the test holds the expected codes. */
#include "common.h"

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);

int main(void) {
    test_init_output();
    CUdevice dev = 0;
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    int count = 0, value = 0;
    char name[64];

    /* Before cuInit. */
    kv_rc("pre.device_get", cuDeviceGet(&dev, 0));
    kv_rc("pre.device_count", cuDeviceGetCount(&count));
    kv_rc("pre.mem_alloc", cuMemAlloc(&ptr, 1024));
    kv_rc("pre.mem_get_info", cuMemGetInfo(&bytes, &bytes));

    CHECK(cuInit(0));
    /* Null output pointers. */
    kv_rc("null.device_count", cuDeviceGetCount(NULL));
    kv_rc("null.device_get", cuDeviceGet(NULL, 0));
    kv_rc("null.device_name", cuDeviceGetName(NULL, 64, 0));
    kv_rc("null.total_mem", cuDeviceTotalMem(NULL, 0));
    kv_rc("null.driver_version", cuDriverGetVersion(NULL));
    /* Bad device ordinals. */
    kv_rc("ordinal.device_get", cuDeviceGet(&dev, 99));
    kv_rc("ordinal.device_get_negative", cuDeviceGet(&dev, -1));
    kv_rc("ordinal.device_name", cuDeviceGetName(name, sizeof name, 99));
    kv_rc("ordinal.total_mem", cuDeviceTotalMem(&bytes, 99));
    kv_rc("ordinal.attribute", cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 99));
    kv_rc("ordinal.primary_retain", cuDevicePrimaryCtxRetain((CUcontext[1]){0}, 99));
    kv_rc("attribute.unknown", cuDeviceGetAttribute(&value, (CUdevice_attribute)99999, 0));
    /* No current context. */
    kv_rc("noctx.mem_alloc", cuMemAlloc(&ptr, 1024));
    kv_rc("noctx.mem_get_info", cuMemGetInfo(&bytes, &bytes));
    kv_rc("noctx.ctx_get_device", cuCtxGetDevice(&dev));

    /* Destroyed and made-up contexts. */
    CUcontext doomed, primary;
    CHECK(cuCtxCreate(&doomed, NULL, 0, 0));
    CHECK(cuCtxDestroy(doomed));
    kv_rc("ctx.destroyed.push", cuCtxPushCurrent(doomed));
    kv_rc("ctx.destroyed.destroy", cuCtxDestroy(doomed));
    kv_rc("ctx.madeup.set_current", cuCtxSetCurrent((CUcontext)(uintptr_t)0x5eed0000));
    kv_rc("ctx.madeup.destroy", cuCtxDestroy((CUcontext)(uintptr_t)0x5eed0000));
    CHECK(cuDevicePrimaryCtxRetain(&primary, 0));
    CHECK(cuCtxSetCurrent(primary));

    /* Memory. */
    kv_rc("mem.alloc_null", cuMemAlloc(NULL, 1024));
    kv_rc("mem.alloc_zero", cuMemAlloc(&ptr, 0));
    kv_rc("mem.free_unknown", cuMemFree((CUdeviceptr)0xdead0000ull));
    CHECK(cuMemAlloc(&ptr, 1 << 20));
    kv_rc("mem.free_first", cuMemFree(ptr));
    kv_rc("mem.free_again", cuMemFree(ptr));
    size_t pitch = 0;
    kv_rc("mem.pitch_bad_element", cuMemAllocPitch(&ptr, &pitch, 256, 16, 3));
    kv_rc("mem.get_info_null", cuMemGetInfo(NULL, NULL));

    /* Virtual memory management: sizes must be multiples of the granularity. */
    CUmemAllocationProp prop = vmm_prop_at(CU_MEM_LOCATION_TYPE_DEVICE);
    size_t gran = 0;
    CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    printf("vmm.granularity=%zu\n", gran);
    CUmemGenericAllocationHandle handle;
    kv_rc("vmm.create_unaligned", cuMemCreate(&handle, gran + 1, &prop, 0));
    kv_rc("vmm.create_zero", cuMemCreate(&handle, 0, &prop, 0));
    prop.location.id = 99;
    kv_rc("vmm.create_bad_device", cuMemCreate(&handle, gran, &prop, 0));

    /* Streams, events, kernels given handles that are not theirs. */
    kv_rc("stream.madeup_sync", cuStreamSynchronize((CUstream)(uintptr_t)0x5eed0010));
    kv_rc("stream.madeup_query", cuStreamQuery((CUstream)(uintptr_t)0x5eed0010));
    kv_rc("event.madeup_sync", cuEventSynchronize((CUevent)(uintptr_t)0x5eed0020));
    kv_rc("event.madeup_record", cuEventRecord((CUevent)(uintptr_t)0x5eed0020, NULL));
    kv_rc("launch.null_function", cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    kv_rc("launch.madeup_function",
          cuLaunchKernel((CUfunction)(uintptr_t)0x5eed0030, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
    CUmodule module;
    CUfunction function;
    CHECK(cuModuleLoadData(&module, "any image"));
    kv_rc("module.function_null_name", cuModuleGetFunction(&function, module, NULL));
    kv_rc("module.madeup_get_function",
          cuModuleGetFunction(&function, (CUmodule)(uintptr_t)0x5eed0040, "sim_sleep"));

    /* Entry points. */
    void *pfn = NULL;
    CUdriverProcAddressQueryResult status = (CUdriverProcAddressQueryResult)-1;
    kv_rc("proc.unknown", cuGetProcAddress("cuDoesNotExist", &pfn, 13000, 0, &status));
    printf("proc.unknown.status=%d\n", (int)status);
    printf("proc.unknown.null=%d\n", pfn == NULL);
    status = (CUdriverProcAddressQueryResult)-1;
    kv_rc("proc.too_new", cuGetProcAddress("cuMemAllocAsync", &pfn, 11000, 0, &status));
    printf("proc.too_new.status=%d\n", (int)status);
    status = (CUdriverProcAddressQueryResult)-1;
    pfn = NULL;
    kv_rc("proc.known", cuGetProcAddress("cuMemAlloc", &pfn, 13000, 0, &status));
    printf("proc.known.status=%d\n", (int)status);
    if (pfn) {
        CUdeviceptr p = 0;
        kv_rc("proc.known.call", ((alloc_fn)pfn)(&p, 4096));
        kv_rc("proc.known.free", cuMemFree(p));
    }
    kv_rc("proc.null_status", cuGetProcAddress("cuInit", &pfn, 13000, 0, NULL));
    const void *table = NULL;
    CUuuid id;
    memset(&id, 0x42, sizeof id);
    kv_rc("export_table", cuGetExportTable(&table, &id));

    /* Error names. */
    const char *text = NULL;
    kv_rc("error_name", cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &text));
    printf("error_name.text=%s\n", text ? text : "(null)");
    kv_rc("error_name.unknown", cuGetErrorName((CUresult)99999, &text));
    text = NULL;
    kv_rc("error_string", cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &text));
    printf("error_string.empty=%d\n", text == NULL || text[0] == '\0');
    printf("survived=1\n");
    return 0;
}
