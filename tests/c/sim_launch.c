/* sim_launch: kernel launches, streams and events on the simulated GPU.
 *
 *   sim_launch async US
 *       Launches one `sim_` kernel of US microseconds on a new stream between
 *       two events and reports what the application sees:
 *       launch_us (time the launch call took), query (cuStreamQuery right
 *       after), event_query (cuEventQuery of the end event right after),
 *       sync_us (time cuCtxSynchronize took), query_after, elapsed_ms
 *       (cuEventElapsedTime between the events).
 *
 *   sim_launch contend COUNT US
 *       Makes a context, prints ready=1, waits for a line on stdin, then
 *       launches COUNT kernels of US microseconds each on the null stream and
 *       synchronises; prints wall_us (from the go line to completion).
 *
 *   sim_launch queue COUNT US
 *       Launches COUNT kernels of US microseconds without synchronising and
 *       prints submit_us (time to submit all), then sync_us.
 */
#include "common.h"

static CUfunction setup(void) {
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    return load_kernel("sim_sleep");
}

static int run_async(uint64_t us) {
    CUfunction f = setup();
    CUstream stream;
    CUevent start, end;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CHECK(cuEventCreate(&end, CU_EVENT_DEFAULT));
    CHECK(cuEventRecord(start, stream));
    double t0 = now_us();
    CHECK(launch_us(f, us, stream));
    double t1 = now_us();
    CHECK(cuEventRecord(end, stream));
    CUresult query = cuStreamQuery(stream);
    CUresult event_query = cuEventQuery(end);
    double t2 = now_us();
    CHECK(cuCtxSynchronize());
    double t3 = now_us();
    CUresult query_after = cuStreamQuery(stream);
    float elapsed_ms = -1.0f;
    CUresult elapsed = cuEventElapsedTime(&elapsed_ms, start, end);
    printf("launch_us=%.1f\n", t1 - t0);
    kv_rc("query", query);
    kv_rc("event_query", event_query);
    printf("sync_us=%.1f\n", t3 - t2);
    printf("total_us=%.1f\n", t3 - t0);
    kv_rc("query_after", query_after);
    kv_rc("elapsed", elapsed);
    printf("elapsed_ms=%.3f\n", elapsed_ms);
    CHECK(cuEventDestroy(start));
    CHECK(cuEventDestroy(end));
    CHECK(cuStreamDestroy(stream));
    return 0;
}

static int run_contend(int count, uint64_t us) {
    CUfunction f = setup();
    printf("ready=1\n");
    wait_stdin_line();
    double t0 = now_us();
    for (int i = 0; i < count; i++) CHECK(launch_us(f, us, NULL));
    CHECK(cuCtxSynchronize());
    printf("wall_us=%.0f\n", now_us() - t0);
    return 0;
}

static int run_queue(int count, uint64_t us) {
    CUfunction f = setup();
    double t0 = now_us();
    for (int i = 0; i < count; i++) CHECK(launch_us(f, us, NULL));
    double t1 = now_us();
    CHECK(cuCtxSynchronize());
    printf("submit_us=%.0f\n", t1 - t0);
    printf("sync_us=%.0f\n", now_us() - t1);
    return 0;
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc == 3 && strcmp(argv[1], "async") == 0) return run_async(strtoull(argv[2], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "contend") == 0)
        return run_contend(atoi(argv[2]), strtoull(argv[3], NULL, 10));
    if (argc == 4 && strcmp(argv[1], "queue") == 0) return run_queue(atoi(argv[2]), strtoull(argv[3], NULL, 10));
    fprintf(stderr, "usage: sim_launch async US | contend COUNT US | queue COUNT US\n");
    return 64;
}
