/* shim_fork MODE
 *
 * The parent makes a context and allocates 100 MiB, then forks.
 *   nocuda  the child uses no CUDA: it exits normally at once.
 *   cuda    the child makes its own context, allocates 50 MiB, prints
 *           child.* lines and child.ready=1, then waits for a line on stdin
 *           and exits normally.
 * The parent waits for the child, then prints parent.* lines (its own view
 * after the child is gone, and whether it can still allocate and free) and
 * parent.ready=1, and waits for a line on stdin before exiting. */
#include "common.h"
#include <sys/wait.h>

static void info(const char *label) {
    size_t free_bytes = 0, total_bytes = 0;
    CUresult rc = cuMemGetInfo(&free_bytes, &total_bytes);
    printf("%s=%d\n%s.free=%zu\n%s.total=%zu\n", label, (int)rc, label, free_bytes, label, total_bytes);
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc != 2 || (strcmp(argv[1], "nocuda") != 0 && strcmp(argv[1], "cuda") != 0)) {
        fprintf(stderr, "usage: shim_fork nocuda|cuda\n");
        return 64;
    }
    CUcontext ctx;
    CUdeviceptr held;
    CHECK(cuInit(0));
    CHECK(cuCtxCreate(&ctx, NULL, 0, 0));
    CHECK(cuMemAlloc(&held, 100u << 20));
    printf("parent.pid=%d\n", (int)getpid());
    info("parent.before");
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 2;
    }
    if (child == 0) {
        printf("child.pid=%d\n", (int)getpid());
        if (argv[1][0] == 'c') {
            CUcontext own;
            CUdeviceptr mine;
            kv_rc("child.init", cuInit(0));
            kv_rc("child.ctx", cuCtxCreate(&own, NULL, 0, 0));
            kv_rc("child.alloc", cuMemAlloc(&mine, 50u << 20));
            info("child.info");
            printf("child.ready=1\n");
            wait_stdin_line();
        } else {
            volatile uint64_t sum = 0;
            for (int i = 0; i < 1000000; i++) sum += (uint64_t)i;
            printf("child.done=1\n");
        }
        exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    printf("child.exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    info("parent.after");
    CUdeviceptr extra;
    kv_rc("parent.alloc", cuMemAlloc(&extra, 10u << 20));
    kv_rc("parent.free", cuMemFree(extra));
    printf("parent.ready=1\n");
    wait_stdin_line();
    kv_rc("parent.free_held", cuMemFree(held));
    return 0;
}
