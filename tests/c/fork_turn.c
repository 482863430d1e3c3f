/* fork_turn: a process under the shim that forks while it holds its
 * tenant's turn, and both go on launching.
 *
 *   fork_turn KERNEL_US SECONDS
 *
 * The parent launches KERNEL_US kernels for half a second (taking turns),
 * then forks right after a launch, with work in flight. The child makes a
 * context of its own and launches for SECONDS; the parent goes on for
 * SECONDS too, then waits for the child. Prints `started=1`, then
 * `child.kernels=K`, `child.status=S` and `parent.kernels=K`. */
#include "common.h"
#include <sys/wait.h>

static uint64_t launch_for(CUfunction f, CUstream stream, uint64_t kernel_us, double seconds) {
    uint64_t kernels = 0;
    double until = now_us() + seconds * 1e6;
    while (now_us() < until) {
        CHECK(launch_us(f, kernel_us, stream));
        kernels++;
        if (kernels % 4 == 0) CHECK(cuStreamSynchronize(stream));
    }
    CHECK(cuStreamSynchronize(stream));
    return kernels;
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc != 3) {
        fprintf(stderr, "usage: fork_turn KERNEL_US SECONDS\n");
        return 64;
    }
    uint64_t kernel_us = strtoull(argv[1], NULL, 10);
    double seconds = atof(argv[2]);
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, 0));
    CUfunction f = load_kernel("sim_sleep");
    CUstream stream;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    printf("started=1\n");
    uint64_t before = launch_for(f, stream, kernel_us, 0.5);
    /* Work in flight and the turn held: fork now. */
    CHECK(launch_us(f, kernel_us, stream));
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 3;
    if (child == 0) {
        CUcontext own;
        CHECK(cuCtxCreate(&own, NULL, 0, 0));
        CUfunction g = load_kernel("sim_sleep");
        CUstream s;
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        printf("child.kernels=%llu\n", (unsigned long long)launch_for(g, s, kernel_us, seconds));
        fflush(stdout);
        _exit(0);
    }
    uint64_t after = launch_for(f, stream, kernel_us, seconds);
    int status = 0;
    waitpid(child, &status, 0);
    printf("child.status=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    printf("parent.kernels=%llu\n", (unsigned long long)(before + after));
    return 0;
}
