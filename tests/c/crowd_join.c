/* crowd_join: a hostile tenant's process under the shim that keeps its own
 * arbiter connections open so that the shim's join on device 0 finds the
 * process's quota taken, then launches as any process does.
 *
 *   crowd_join SOCKET CONNECTIONS KERNEL_US SECONDS gate|raw|hold [TENANT SLOT_BASE SLOT_BYTES DEVICE]
 *
 * Without TENANT, a thread connects CONNECTIONS times to SOCKET (the
 * monitor's .arbiter.sock) and says nothing, and does it again every 300 ms
 * before the monitor's hello deadline closes them. With it, the process
 * joins device DEVICE CONNECTIONS times as TENANT, naming the slot its shim
 * holds (found by the lock /proc/self/fdinfo shows, at SLOT_BASE + slot *
 * SLOT_BYTES), and keeps those connections. `hold` launches nothing: it
 * keeps its connections for SECONDS. `gate` launches through the
 * shim as any process does; `raw` through the driver's own cuLaunchKernel,
 * found as tests/c/skip_gate.c finds it. Prints `started=1`, then
 * `kernels=K` if every launch went, or `launch_error=RC after=K`.
 */
#define _GNU_SOURCE
#include "common.h"
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <libgen.h>

typedef CUresult (*launch_kernel_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, CUstream, void **, void **);
typedef void *(*dlsym_fn)(void *, const char *);

static const char *sock_path;
static int crowd;
static int fds[4096];

static void open_all(void) {
    for (int i = 0; i < crowd && i < 4096; i++) {
        if (fds[i] > 0) close(fds[i]);
        fds[i] = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        strncpy(a.sun_path, sock_path, sizeof(a.sun_path) - 1);
        if (connect(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0) {
            close(fds[i]);
            fds[i] = -1;
        }
    }
}

/* The descriptor through which the shim holds its slot's lock. */
static int ledger_fd = -1;

/* The slot whose lock this process's shim holds, from /proc/self/fdinfo. */
static long own_slot(long base, long stride) {
    for (int fd = 0; fd < 1024; fd++) {
        char path[64], line[256];
        snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
        FILE *f = fopen(path, "r");
        if (f == NULL) continue;
        while (fgets(line, sizeof line, f)) {
            char *at = strstr(line, "OFDLCK ADVISORY  WRITE");
            long start, end;
            char file[64];
            if (at && sscanf(at, "OFDLCK ADVISORY  WRITE %*d %63s %ld %ld", file, &start, &end) == 3 && start >= base &&
                (start - base) % stride == 0) {
                fclose(f);
                ledger_fd = fd;
                return (start - base) / stride;
            }
        }
        fclose(f);
    }
    return -1;
}

/* Joins device `ordinal` `crowd` times as `tenant` with this process's slot. */
static int join_all(const char *tenant, long slot, int ordinal) {
    CUdevice d1;
    CUuuid uuid;
    if (cuDeviceGet(&d1, ordinal) != CUDA_SUCCESS || cuDeviceGetUuid(&uuid, d1) != CUDA_SUCCESS) return 0;
    unsigned char hello[104] = {0};
    uint32_t words[4] = {0x31485347u /* GSH1 */, 3, (uint32_t)slot, 1};
    memcpy(hello, words, sizeof words);
    memcpy(hello + 16, uuid.bytes, 16);
    strncpy((char *)hello + 32, tenant, 63);
    uint64_t unlimited = UINT64_MAX;
    memcpy(hello + 96, &unlimited, 8);
    int joined = 0;
    for (int i = 0; i < crowd && i < 4096; i++) {
        fds[i] = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        strncpy(a.sun_path, sock_path, sizeof(a.sun_path) - 1);
        /* The hello, with the ledger's descriptor as the shim sends it. */
        struct iovec iov = {.iov_base = hello, .iov_len = sizeof hello};
        union {
            struct cmsghdr align;
            char buf[CMSG_SPACE(sizeof(int))];
        } control;
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf};
        struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
        cmsg->cmsg_level = SOL_SOCKET;
        cmsg->cmsg_type = SCM_RIGHTS;
        cmsg->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cmsg), &ledger_fd, sizeof(int));
        if (connect(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0 || sendmsg(fds[i], &msg, 0) != sizeof hello) continue;
        unsigned char answer[8];
        if (read(fds[i], answer, sizeof answer) == sizeof answer && answer[0] == 1)
            joined++;
        else if (joined == 0 && i == 0)
            printf("first_refusal=%d\n", answer[1]);
    }
    return joined;
}

static void *crowder(void *arg) {
    (void)arg;
    for (;;) {
        usleep(300000);
        open_all();
    }
    return NULL;
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc != 6 && argc != 10) {
        fprintf(stderr, "usage: crowd_join SOCKET CONNECTIONS KERNEL_US SECONDS gate|raw|hold [TENANT SLOT_BASE SLOT_BYTES DEVICE]\n");
        return 64;
    }
    /* A socket path longer than sun_path reaches it through the directory's descriptor. */
    static char short_path[128];
    char dir_buf[4096], base_buf[256];
    snprintf(dir_buf, sizeof dir_buf, "%s", argv[1]);
    snprintf(base_buf, sizeof base_buf, "%s", argv[1]);
    int dir_fd = open(dirname(dir_buf), O_PATH | O_DIRECTORY);
    snprintf(short_path, sizeof short_path, "/proc/self/fd/%d/%s", dir_fd, basename(base_buf));
    sock_path = short_path;
    crowd = atoi(argv[2]);
    uint64_t kernel_us = strtoull(argv[3], NULL, 10);
    double seconds = atof(argv[4]);
    CUdevice dev;
    CUcontext ctx;
    kv_rc("init", cuInit(0));
    if (argc == 10) {
        long slot = own_slot(atol(argv[7]), atol(argv[8]));
        printf("slot=%ld\n", slot);
        printf("joined=%d\n", join_all(argv[6], slot, atoi(argv[9])));
        if (strcmp(argv[5], "hold") == 0) {
            printf("started=1\n");
            sleep((unsigned)seconds);
            return 0;
        }
    } else {
        open_all();
        pthread_t t;
        pthread_create(&t, NULL, crowder, NULL);
    }
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CUfunction f = load_kernel("sim_sleep");
    CUstream stream;
    CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    launch_kernel_fn launch = cuLaunchKernel;
    if (strcmp(argv[5], "raw") == 0) {
        dlsym_fn raw_dlsym = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
        if (raw_dlsym == NULL) raw_dlsym = (dlsym_fn)dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
        void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        launch = raw_dlsym && driver ? (launch_kernel_fn)raw_dlsym(driver, "cuLaunchKernel") : NULL;
        if (launch == NULL || launch == (launch_kernel_fn)cuLaunchKernel) {
            fprintf(stderr, "the driver's own cuLaunchKernel was not found\n");
            return 3;
        }
    }
    printf("started=1\n");
    void *args[] = {&kernel_us};
    uint64_t kernels = 0;
    double until = now_us() + seconds * 1e6;
    while (now_us() < until) {
        CUresult rc = launch(f, 1, 1, 1, 32, 1, 1, 0, stream, args, NULL);
        if (rc != CUDA_SUCCESS) {
            printf("launch_error=%d after=%llu\n", (int)rc, (unsigned long long)kernels);
            return 2;
        }
        kernels++;
        if (kernels % 4 == 0) CHECK(cuStreamSynchronize(stream));
    }
    CHECK(cuStreamSynchronize(stream));
    printf("kernels=%llu\n", (unsigned long long)kernels);
    return 0;
}
