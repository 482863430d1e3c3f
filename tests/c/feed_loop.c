/* feed_loop: a training loop whose GPU waits on its input, or one that
 * holds its memory and does nothing, for the starved-or-idle tests.
 *
 *   feed_loop burn|sleep PAUSE_MS KERNEL_US
 *
 * Allocates 256 MiB, prints `ready=1`, then until stdin closes: launches
 * one `sim_` kernel of KERNEL_US microseconds, waits for it, and between
 * launches either burns the CPU for PAUSE_MS (`burn`: preparing the next
 * batch on the CPU) or sleeps for PAUSE_MS (`sleep`: nothing to do).
 * Prints `launches=N` when stdin closes. */
#include "common.h"

#include <poll.h>

/* Whether stdin has closed (or sent a line): the loop's stop signal. */
static int stop_requested(void) {
    struct pollfd fd = {.fd = 0, .events = POLLIN};
    return poll(&fd, 1, 0) > 0;
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc != 4 || (strcmp(argv[1], "burn") != 0 && strcmp(argv[1], "sleep") != 0)) {
        fprintf(stderr, "usage: feed_loop burn|sleep PAUSE_MS KERNEL_US\n");
        return 64;
    }
    int burn = strcmp(argv[1], "burn") == 0;
    double pause_us = atof(argv[2]) * 1000.0;
    uint64_t kernel_us = strtoull(argv[3], NULL, 10);
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr memory;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
    CHECK(cuMemAlloc(&memory, 256ull << 20));
    CUfunction f = load_kernel("sim_sleep");
    printf("ready=1\n");
    uint64_t launches = 0;
    volatile uint64_t spin = 0;
    while (!stop_requested()) {
        CHECK(launch_us(f, kernel_us, NULL));
        CHECK(cuCtxSynchronize());
        launches++;
        if (burn) {
            double until = now_us() + pause_us;
            while (now_us() < until) spin++;
        } else {
            usleep((useconds_t)pause_us);
        }
    }
    printf("launches=%" PRIu64 "\n", launches);
    CHECK(cuMemFree(memory));
    return 0;
}
