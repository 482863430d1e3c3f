/* Shared helpers of the C test programs.
 *
 * Programs print one `key=value` line per fact on stdout (line-buffered, so a
 * test can wait for a line while the program is still running); the Rust
 * test parses them. Diagnostics go to stderr. */
#ifndef GS_TEST_COMMON_H
#define GS_TEST_COMMON_H

#include <cuda.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static inline void test_init_output(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

/* Prints `key=rc` and returns rc. */
static inline CUresult kv_rc(const char *key, CUresult rc) {
    printf("%s=%d\n", key, (int)rc);
    return rc;
}

/* Exits with status 2 after printing `fatal=<rc>` when a call that the
 * program depends on fails. */
#define CHECK(call)                                                                        \
    do {                                                                                   \
        CUresult check_rc_ = (call);                                                       \
        if (check_rc_ != CUDA_SUCCESS) {                                                   \
            fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #call,          \
                    (int)check_rc_);                                                       \
            printf("fatal=%d\n", (int)check_rc_);                                          \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

/* Properties of a VMM allocation (cuMemCreate) located on `type`, id 0. */
static inline CUmemAllocationProp vmm_prop_at(CUmemLocationType type) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = type;
    prop.location.id = 0;
    return prop;
}

static inline double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Parses `123`, `4096`, `1KiB`, `512MiB`, `1GiB` (binary suffixes, also
 * `K`, `M`, `G`). Exits on anything else. */
static inline uint64_t parse_bytes(const char *text) {
    char *end = NULL;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno != 0 || end == text) {
        fprintf(stderr, "not a size: %s\n", text);
        exit(64);
    }
    uint64_t scale = 1;
    if (*end == 'K') scale = 1ull << 10;
    else if (*end == 'M') scale = 1ull << 20;
    else if (*end == 'G') scale = 1ull << 30;
    else if (*end != '\0') {
        fprintf(stderr, "not a size: %s\n", text);
        exit(64);
    }
    return (uint64_t)value * scale;
}

/* Blocks until a line arrives on stdin, or stdin closes. */
static inline void wait_stdin_line(void) {
    char line[256];
    (void)!fgets(line, sizeof line, stdin);
}

/* Loads any module image (simgpu accepts any) and returns the named kernel. */
static inline CUfunction load_kernel(const char *name) {
    static const char image[] = "gpuslice test module";
    CUmodule module;
    CUfunction function;
    CHECK(cuModuleLoadData(&module, image));
    CHECK(cuModuleGetFunction(&function, module, name));
    return function;
}

/* Launches a `sim_` kernel that runs for `us` microseconds on `stream`. */
static inline CUresult launch_us(CUfunction f, uint64_t us, CUstream stream) {
    void *args[] = {&us};
    return cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, stream, args, NULL);
}

#endif
