/* compute_load: keeps one device busy with back-to-back kernels, for the
 * compute limit tests.
 *
 *   compute_load ROUTE KERNEL_US SECONDS [DEVICE [sync|sync=N]]
 *
 * Launches `sim_` kernels of KERNEL_US microseconds through ROUTE for
 * SECONDS of wall time (on device DEVICE, default 0), then waits for all of
 * them, and prints:
 *   launches=N   launch calls made
 *   kernels=K    kernels they ran (a graph launch runs its nodes)
 *   busy_us=B    the kernels' time: the sum of their lengths
 *   wall_us=W    from the first launch until the last kernel completed
 *   share=S      B / W: the share of the device it got
 * KERNEL_US may be a comma-separated list of lengths (at most
 * MAX_LENGTHS, e.g. `1000,5`): the launches take them in turn, one
 * process of mixed kernels (not with the graph routes).
 * With `sync`, it waits for each launch before the next (a client that
 * never fills the queue); with `sync=N`, for every N launches (a training
 * loop that synchronises every step of N kernels). With GS_TEST_START_AT=T (seconds since the
 * epoch), it waits until the clock reads T before its first launch, so
 * that clients started apart (in containers, say) load the device over the
 * same stretch of time; it prints late_ms=L, how long after T it began.
 *
 * ROUTE is one of
 *   kernel, ex, coop, graph             cuLaunchKernel, cuLaunchKernelEx,
 *                                       cuLaunchCooperativeKernel, cuGraphLaunch
 *                                       on a stream of its own;
 *   kernel_ptsz, ex_ptsz, coop_ptsz,    the same entry points as
 *   graph_ptsz                          cuGetProcAddress_v2 resolves them with
 *                                       CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
 *                                       on the per-thread default stream;
 *   legacy                              cuLaunchKernel on the legacy null stream.
 * The graph routes capture GRAPH_NODES kernels from a stream into a graph
 * and launch that.
 */
#include "common.h"

#define GRAPH_NODES 4
#define MAX_LENGTHS 8

typedef CUresult (*launch_kernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, CUstream, void **, void **);
typedef CUresult (*launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*launch_coop_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                   CUstream, void **);
typedef CUresult (*graph_launch_fn)(CUgraphExec, CUstream);
typedef CUresult (*stream_sync_fn)(CUstream);

static launch_kernel_fn launch_kernel = cuLaunchKernel;
static launch_ex_fn launch_ex = cuLaunchKernelEx;
static launch_coop_fn launch_coop = cuLaunchCooperativeKernel;
static graph_launch_fn graph_launch = cuGraphLaunch;
static stream_sync_fn stream_sync = cuStreamSynchronize;

/* The per-thread variant of `name`, as the CUDA runtime of a program built
 * with --default-stream per-thread resolves it. */
static void *per_thread(const char *name) {
    void *fn = NULL;
    CUdriverProcAddressQueryResult status;
    CHECK(cuGetProcAddress_v2(name, &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
    if (fn == NULL || status != CU_GET_PROC_ADDRESS_SUCCESS) {
        fprintf(stderr, "%s did not resolve\n", name);
        exit(2);
    }
    return fn;
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc < 4 || argc > 6) {
        fprintf(stderr, "usage: compute_load ROUTE KERNEL_US SECONDS [DEVICE [sync|sync=N]]\n");
        return 64;
    }
    const char *route = argv[1];
    uint64_t lengths_us[MAX_LENGTHS];
    size_t n_lengths = 0;
    for (const char *p = argv[2];;) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (n_lengths == MAX_LENGTHS || end == p || *p == '-' || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "KERNEL_US is a length in microseconds or a comma-separated list of up to %d, not %s\n",
                    MAX_LENGTHS, argv[2]);
            return 64;
        }
        lengths_us[n_lengths++] = v;
        if (*end == '\0') break;
        p = end + 1;
    }
    uint64_t kernel_us = lengths_us[0];
    double seconds = atof(argv[3]);
    int ordinal = argc > 4 ? atoi(argv[4]) : 0;
    uint64_t sync_every = 0;
    if (argc > 5 && strcmp(argv[5], "sync") == 0) sync_every = 1;
    if (argc > 5 && strncmp(argv[5], "sync=", 5) == 0) sync_every = strtoull(argv[5] + 5, NULL, 10);
    size_t route_len = strlen(route);
    int ptsz = route_len > 5 && strcmp(route + route_len - 5, "_ptsz") == 0;

    CUdevice dev;
    CUcontext ctx;
    kv_rc("init", cuInit(0));
    CHECK(cuDeviceGet(&dev, ordinal));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUfunction f = load_kernel("sim_sleep");

    CUstream own;
    CHECK(cuStreamCreate(&own, CU_STREAM_NON_BLOCKING));
    CUstream stream = own;
    if (ptsz) {
        launch_kernel = (launch_kernel_fn)per_thread("cuLaunchKernel");
        launch_ex = (launch_ex_fn)per_thread("cuLaunchKernelEx");
        launch_coop = (launch_coop_fn)per_thread("cuLaunchCooperativeKernel");
        graph_launch = (graph_launch_fn)per_thread("cuGraphLaunch");
        stream_sync = (stream_sync_fn)per_thread("cuStreamSynchronize");
        stream = NULL; /* the calling thread's per-thread stream */
    } else if (strcmp(route, "legacy") == 0) {
        stream = NULL;
    }

    void *args[] = {&kernel_us};
    CUlaunchConfig config;
    memset(&config, 0, sizeof config);
    config.gridDimX = config.gridDimY = config.gridDimZ = 1;
    config.blockDimX = 32;
    config.blockDimY = config.blockDimZ = 1;
    config.hStream = stream;

    int graph = strncmp(route, "graph", 5) == 0;
    if (graph && n_lengths > 1) {
        fprintf(stderr, "the graph routes take one kernel length, not %s\n", argv[2]);
        return 64;
    }
    CUgraphExec exec = NULL;
    if (graph) {
        /* Launches while a stream captures are recorded, not run. */
        CUgraph g;
        CHECK(cuStreamBeginCapture(own, CU_STREAM_CAPTURE_MODE_GLOBAL));
        for (int i = 0; i < GRAPH_NODES; i++) CHECK(launch_us(f, kernel_us, own));
        CHECK(cuStreamEndCapture(own, &g));
        CHECK(cuGraphInstantiate(&exec, g, 0));
    }
    int per_launch = graph ? GRAPH_NODES : 1;

    const char *start_at = getenv("GS_TEST_START_AT");
    if (start_at) {
        struct timespec ts;
        double at = atof(start_at), now;
        for (;;) {
            clock_gettime(CLOCK_REALTIME, &ts);
            now = (double)ts.tv_sec + ts.tv_nsec / 1e9;
            if (now >= at) break;
            usleep(500);
        }
        printf("late_ms=%.1f\n", (now - at) * 1e3);
    }

    uint64_t launches = 0, busy_us = 0;
    double t0 = now_us();
    double until = t0 + seconds * 1e6;
    while (now_us() < until) {
        CUresult rc;
        /* The driver copies the parameters at the launch. */
        kernel_us = lengths_us[launches % n_lengths];
        if (graph) {
            rc = graph_launch(exec, stream);
        } else if (strncmp(route, "ex", 2) == 0) {
            rc = launch_ex(&config, f, args, NULL);
        } else if (strncmp(route, "coop", 4) == 0) {
            rc = launch_coop(f, 1, 1, 1, 32, 1, 1, 0, stream, args);
        } else if (strncmp(route, "kernel", 6) == 0 || strcmp(route, "legacy") == 0) {
            rc = launch_kernel(f, 1, 1, 1, 32, 1, 1, 0, stream, args, NULL);
        } else {
            fprintf(stderr, "unknown route %s\n", route);
            return 64;
        }
        if (rc != CUDA_SUCCESS) {
            printf("launch=%d\n", (int)rc);
            return 1;
        }
        launches++;
        busy_us += kernel_us * (uint64_t)per_launch;
        if (sync_every && launches % sync_every == 0) CHECK(stream_sync(stream));
    }
    CHECK(cuCtxSynchronize());
    CHECK(stream_sync(stream));
    double wall_us = now_us() - t0;
    uint64_t kernels = launches * per_launch;
    printf("launches=%" PRIu64 "\n", launches);
    printf("kernels=%" PRIu64 "\n", kernels);
    printf("busy_us=%" PRIu64 "\n", busy_us);
    printf("wall_us=%.0f\n", wall_us);
    printf("share=%.4f\n", (double)busy_us / wall_us);
    return 0;
}
