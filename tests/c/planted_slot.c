/* planted_slot LEDGER SIZE [LEDGER...]: a hostile process of a tenant that
 * does not load the shim. It writes a slot for itself into the tenant's
 * ledger (as the shim would: it takes the slot's OFD lock and marks it
 * alive with its own identity) and claims an enormous context overhead for
 * device 0, and does the same in each further LEDGER (so that several
 * ledgers claim it), then allocates SIZE bytes straight from the driver,
 * none of it charged. Prints slot=<index> (the first ledger's), then
 * big=<rc> and ready=1, and holds until a line (or EOF) arrives on stdin. */
#define _GNU_SOURCE
#include "common.h"
#include "../../include/gpuslice.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

static uint64_t start_time_ticks(void) {
    char buf[4096];
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f || !fgets(buf, sizeof buf, f)) exit(2);
    fclose(f);
    char *p = strrchr(buf, ')');
    /* Field 22; p points at the end of field 2. */
    for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* Plants a slot for this process in the ledger at `path`; returns its index. */
static int plant(const char *path) {
    int fd = open(path, O_RDWR);
    if (fd < 0) { perror(path); exit(2); }
    struct gpuslice_ledger *ledger = mmap(NULL, GPUSLICE_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ledger == MAP_FAILED) { perror("mmap"); exit(2); }
    int index = -1;
    for (int i = 0; i < GPUSLICE_MAX_SLOTS && index < 0; i++) {
        struct gpuslice_slot *s = &ledger->slots[i];
        uint64_t word = __atomic_load_n(&s->state_word, __ATOMIC_ACQUIRE);
        if ((uint32_t)word != GPUSLICE_SLOT_FREE) continue;
        struct flock lock = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = (off_t)GPUSLICE_SLOT_LOCK_OFFSET(i), .l_len = 1};
        if (fcntl(fd, F_OFD_SETLK, &lock) != 0) continue;
        uint64_t alive = (word & 0xffffffff00000000ull) | GPUSLICE_SLOT_ALIVE;
        if (!__atomic_compare_exchange_n(&s->state_word, &word, alive, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
        struct stat ns;
        if (stat("/proc/self/ns/pid", &ns) != 0) exit(2);
        __atomic_store_n(&s->pid, (uint32_t)getpid(), __ATOMIC_RELEASE);
        __atomic_store_n(&s->ns_pid, (uint32_t)getpid(), __ATOMIC_RELEASE);
        __atomic_store_n(&s->pidns_inode, (uint64_t)ns.st_ino, __ATOMIC_RELEASE);
        __atomic_store_n(&s->start_time_ticks, start_time_ticks(), __ATOMIC_RELEASE);
        index = i;
    }
    if (index < 0) { fprintf(stderr, "planted_slot: no free slot in %s\n", path); exit(2); }
    __atomic_store_n(&ledger->usage.devices[0].context_overhead_bytes, 1ull << 60, __ATOMIC_RELEASE);
    return index;
}

int main(int argc, char **argv) {
    test_init_output();
    if (argc < 3) return 64;
    printf("slot=%d\n", plant(argv[1]));
    for (int i = 3; i < argc; i++) plant(argv[i]);

    CUcontext ctx;
    CUdeviceptr big;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    kv_rc("big", cuMemAlloc(&big, parse_bytes(argv[2])));
    printf("ready=1\n");
    char line[64];
    if (!fgets(line, sizeof line, stdin)) return 0;
    return 0;
}
