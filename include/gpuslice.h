/*
 * gpuslice.h - the layout of a gpuslice ledger file, for C tools.
 *
 * Generated from ledger/src/layout.rs (C names and comments in
 * ledger/tests/c_header/mod.rs); do not edit. After changing either, run
 *     GPUSLICE_BLESS=1 cargo test -p gpuslice-ledger --test c_layout
 *
 * One file per tenant, <GPUSLICE_DIR>/<tenant>.ledger, mapped MAP_SHARED by
 * every process of the tenant and by the monitor. All multi-byte words are
 * native-endian and must be accessed atomically (e.g. __atomic_load_n /
 * __atomic_compare_exchange_n) once the file is published.
 *
 * Rules a writer must follow:
 *  - Never write to a file whose magic, layout_version, sizes or
 *    `initialised` word differ from the constants below.
 *  - A memory reservation is a compare-and-swap on usage.devices[d].used_bytes
 *    that keeps it <= policy.devices[d].memory_limit_bytes, then an add to the
 *    process's slots[i].bytes[d].
 *  - Device time is taken out of compute.devices[d].tokens_ns after the work
 *    ran (an atomic subtract); only the CAS on refill_ns that claims an
 *    interval may add that interval's tokens.
 *  - A process owning slot i holds an OFD write lock (F_OFD_SETLK) on the one
 *    byte at GPUSLICE_SLOT_LOCK_OFFSET(i), taken before the slot leaves FREE
 *    and dropped after it is FREE again. A slot that is not FREE and whose
 *    lock can be taken belongs to a dead process.
 */
#ifndef GPUSLICE_H
#define GPUSLICE_H

#include <stddef.h>
#include <stdint.h>

#define GPUSLICE_MAX_DEVICES 16
#define GPUSLICE_MAX_SLOTS 1024
#define GPUSLICE_UNLIMITED UINT64_MAX
#define GPUSLICE_PAGE_BYTES 4096

/* "GPUSLICE" read as a little-endian uint64_t. */
#define GPUSLICE_MAGIC UINT64_C(0x4543494C53555047)
#define GPUSLICE_LAYOUT_VERSION 5u
/* struct gpuslice_slot.in_flight_word increments */
#define GPUSLICE_IN_FLIGHT_BEGIN UINT64_C(1)
#define GPUSLICE_IN_FLIGHT_FINISH UINT64_C(0xFFFFFFFF)
/* "INIT" read as a little-endian uint32_t; 0 = still being created. */
#define GPUSLICE_INITIALISED UINT32_C(0x54494E49)

/* struct gpuslice_device.state */
#define GPUSLICE_DEVICE_EMPTY 0u
#define GPUSLICE_DEVICE_CLAIMING 1u
#define GPUSLICE_DEVICE_READY 2u

/* Low 32 bits of struct gpuslice_slot.state_word; the high 32 bits are the
 * slot's generation, raised each time the slot becomes FREE again. */
#define GPUSLICE_SLOT_FREE 0u
#define GPUSLICE_SLOT_CLAIMED 1u
#define GPUSLICE_SLOT_ALIVE 2u
#define GPUSLICE_SLOT_RECLAIMING 3u

/* struct gpuslice_policy.policy_source and .compute_limit_source */
#define GPUSLICE_POLICY_UNSET 0u
#define GPUSLICE_POLICY_ENVIRONMENT 1u
#define GPUSLICE_POLICY_MONITOR 2u

/* One GPU the tenant has used, keyed by UUID. */
struct gpuslice_device {
    uint32_t state; /* GPUSLICE_DEVICE_*; uuid and total are valid once READY */
    uint32_t reserved0;
    uint8_t uuid[16]; /* as cuDeviceGetUuid returns it */
    uint64_t total_memory_bytes;
    uint64_t reserved[4];
};

/* Page 0: identity, sizes and the device table. */
struct gpuslice_header {
    uint64_t magic;
    uint32_t layout_version;
    uint32_t header_bytes;
    uint32_t policy_offset;
    uint32_t usage_offset;
    uint32_t slots_offset;
    uint32_t slot_bytes;
    uint32_t max_devices;
    uint32_t max_slots;
    uint64_t file_bytes;
    uint32_t initialised; /* written last, with release ordering */
    /* GPUSLICE_COMPUTE_OFFSET; 0 in files created before the field was
     * written (it was reserved), whose compute page is there all the same. */
    uint32_t compute_offset;
    uint64_t created_unix_s;
    char tenant_name[64]; /* NUL-padded */
    struct gpuslice_device devices[GPUSLICE_MAX_DEVICES]; /* appended as the tenant first uses them */
    uint8_t reserved[2944]; /* pads the header to one page */
};

/* What the tenant may use on one device. */
struct gpuslice_policy {
    uint64_t memory_limit_bytes; /* GPUSLICE_UNLIMITED when no cap */
    uint32_t policy_source; /* GPUSLICE_POLICY_*: who set the cap */
    uint32_t compute_share_ratio_e4; /* ratio x 10000, 0 = none */
    uint32_t compute_limit_ratio_e4; /* ratio x 10000; 0 and 10000 (the whole device) = no ceiling */
    int32_t priority; /* higher runs first when time is spare */
    /* Writers of memory_limit_bytes + policy_source claim it with a CAS from
     * the even value they decided on to an odd one, store both, then make it
     * even again: the pair changes as one decision. */
    uint64_t policy_epoch;
    uint32_t compute_limit_source; /* GPUSLICE_POLICY_*: who set the compute limit */
    uint32_t reserved0;
    uint64_t compute_epoch; /* as policy_epoch, for compute_limit_ratio_e4 + compute_limit_source */
    uint64_t reserved[2];
};

/* Page 1: what the tenant may use, by device index. */
struct gpuslice_policy_page {
    struct gpuslice_policy devices[GPUSLICE_MAX_DEVICES];
    uint8_t reserved[3072]; /* pads the policy to one page */
};

/* What the tenant uses on one device. */
struct gpuslice_usage {
    uint64_t used_bytes; /* the sum of the slots' bytes[d]; admission is a CAS on it */
    uint64_t alloc_denied_total;
    uint64_t context_overhead_bytes;
    uint64_t reserved[5];
};

/* Page 2: usage by device index, then tenant-wide counters. */
struct gpuslice_usage_page {
    struct gpuslice_usage devices[GPUSLICE_MAX_DEVICES];
    uint64_t reclaimed_processes_total;
    uint64_t slots_claimed_total;
    uint8_t reserved[3056]; /* pads the usage to one page */
};

/* The tenant's device time on one device: a token bucket and its counters. */
struct gpuslice_compute {
    /* Device time left, ns; negative: measured work ran past the refill.
     * Refilled at limit x elapsed CLOCK_MONOTONIC time since refill_ns (a
     * CAS on refill_ns claims the interval first), up to the limit's earnings
     * in 100 ms; measured busy time is subtracted after the work ran. */
    int64_t tokens_ns;
    uint64_t refill_ns; /* CLOCK_MONOTONIC ns of the last refill */
    uint64_t launches_total; /* launch calls while the device had a limit */
    uint64_t busy_ns_total; /* device time charged, ns */
    uint64_t throttled_ns_total; /* time launches waited for the bucket, ns */
    uint64_t reserved0[3];
    uint64_t reserved[8]; /* the second cache line, for shares */
};

/* Page 3: device time by device index, two cache lines per device. */
struct gpuslice_compute_page {
    struct gpuslice_compute devices[GPUSLICE_MAX_DEVICES];
    uint8_t reserved[2048]; /* pads the compute state to one page */
};

/* One process of the tenant. */
struct gpuslice_slot {
    uint64_t state_word; /* low 32 bits: GPUSLICE_SLOT_*; high 32 bits: generation */
    /* Low 32 bits: reservations/releases between their two steps (usage,
     * then slot; or slot, then usage); high 32 bits: how many finished.
     * A writer adds GPUSLICE_IN_FLIGHT_BEGIN before its first step and
     * GPUSLICE_IN_FLIGHT_FINISH after its second. */
    uint64_t in_flight_word;
    /* By device index. state_word, in_flight_word and bytes[0..5] share the
     * record's first cache line: the owner's threads touch them together. */
    uint64_t bytes[GPUSLICE_MAX_DEVICES];
    uint32_t pid; /* as the ledger directory's /proc sees it */
    uint32_t ns_pid; /* in the process's own PID namespace */
    uint64_t pidns_inode; /* of /proc/self/ns/pid */
    uint64_t start_time_ticks; /* clock ticks after boot, /proc/PID/stat field 22 */
    uint64_t reserved[3];
};

/* A whole ledger file. */
struct gpuslice_ledger {
    struct gpuslice_header header;
    struct gpuslice_policy_page policy;
    struct gpuslice_usage_page usage;
    struct gpuslice_compute_page compute;
    struct gpuslice_slot slots[GPUSLICE_MAX_SLOTS]; /* never compacted */
};

#define GPUSLICE_POLICY_OFFSET offsetof(struct gpuslice_ledger, policy)
#define GPUSLICE_USAGE_OFFSET offsetof(struct gpuslice_ledger, usage)
#define GPUSLICE_COMPUTE_OFFSET offsetof(struct gpuslice_ledger, compute)
#define GPUSLICE_SLOTS_OFFSET offsetof(struct gpuslice_ledger, slots)
#define GPUSLICE_SLOT_BYTES sizeof(struct gpuslice_slot)
#define GPUSLICE_FILE_BYTES sizeof(struct gpuslice_ledger)
/* The byte the owner of slot i keeps locked: the first byte of its record. */
#define GPUSLICE_SLOT_LOCK_OFFSET(i) (GPUSLICE_SLOTS_OFFSET + (size_t)(i) * GPUSLICE_SLOT_BYTES)

/* The layout as ledger/src/layout.rs pins it. */
_Static_assert(sizeof(struct gpuslice_device) == 64, "gpuslice_device size");
_Static_assert(offsetof(struct gpuslice_device, state) == 0, "gpuslice_device.state");
_Static_assert(offsetof(struct gpuslice_device, reserved0) == 4, "gpuslice_device.reserved0");
_Static_assert(offsetof(struct gpuslice_device, uuid) == 8, "gpuslice_device.uuid");
_Static_assert(offsetof(struct gpuslice_device, total_memory_bytes) == 24, "gpuslice_device.total_memory_bytes");
_Static_assert(offsetof(struct gpuslice_device, reserved) == 32, "gpuslice_device.reserved");
_Static_assert(sizeof(struct gpuslice_header) == 4096, "gpuslice_header size");
_Static_assert(offsetof(struct gpuslice_header, magic) == 0, "gpuslice_header.magic");
_Static_assert(offsetof(struct gpuslice_header, layout_version) == 8, "gpuslice_header.layout_version");
_Static_assert(offsetof(struct gpuslice_header, header_bytes) == 12, "gpuslice_header.header_bytes");
_Static_assert(offsetof(struct gpuslice_header, policy_offset) == 16, "gpuslice_header.policy_offset");
_Static_assert(offsetof(struct gpuslice_header, usage_offset) == 20, "gpuslice_header.usage_offset");
_Static_assert(offsetof(struct gpuslice_header, slots_offset) == 24, "gpuslice_header.slots_offset");
_Static_assert(offsetof(struct gpuslice_header, slot_bytes) == 28, "gpuslice_header.slot_bytes");
_Static_assert(offsetof(struct gpuslice_header, max_devices) == 32, "gpuslice_header.max_devices");
_Static_assert(offsetof(struct gpuslice_header, max_slots) == 36, "gpuslice_header.max_slots");
_Static_assert(offsetof(struct gpuslice_header, file_bytes) == 40, "gpuslice_header.file_bytes");
_Static_assert(offsetof(struct gpuslice_header, initialised) == 48, "gpuslice_header.initialised");
_Static_assert(offsetof(struct gpuslice_header, compute_offset) == 52, "gpuslice_header.compute_offset");
_Static_assert(offsetof(struct gpuslice_header, created_unix_s) == 56, "gpuslice_header.created_unix_s");
_Static_assert(offsetof(struct gpuslice_header, tenant_name) == 64, "gpuslice_header.tenant_name");
_Static_assert(offsetof(struct gpuslice_header, devices) == 128, "gpuslice_header.devices");
_Static_assert(offsetof(struct gpuslice_header, reserved) == 1152, "gpuslice_header.reserved");
_Static_assert(sizeof(struct gpuslice_policy) == 64, "gpuslice_policy size");
_Static_assert(offsetof(struct gpuslice_policy, memory_limit_bytes) == 0, "gpuslice_policy.memory_limit_bytes");
_Static_assert(offsetof(struct gpuslice_policy, policy_source) == 8, "gpuslice_policy.policy_source");
_Static_assert(offsetof(struct gpuslice_policy, compute_share_ratio_e4) == 12, "gpuslice_policy.compute_share_ratio_e4");
_Static_assert(offsetof(struct gpuslice_policy, compute_limit_ratio_e4) == 16, "gpuslice_policy.compute_limit_ratio_e4");
_Static_assert(offsetof(struct gpuslice_policy, priority) == 20, "gpuslice_policy.priority");
_Static_assert(offsetof(struct gpuslice_policy, policy_epoch) == 24, "gpuslice_policy.policy_epoch");
_Static_assert(offsetof(struct gpuslice_policy, compute_limit_source) == 32, "gpuslice_policy.compute_limit_source");
_Static_assert(offsetof(struct gpuslice_policy, reserved0) == 36, "gpuslice_policy.reserved0");
_Static_assert(offsetof(struct gpuslice_policy, compute_epoch) == 40, "gpuslice_policy.compute_epoch");
_Static_assert(offsetof(struct gpuslice_policy, reserved) == 48, "gpuslice_policy.reserved");
_Static_assert(sizeof(struct gpuslice_policy_page) == 4096, "gpuslice_policy_page size");
_Static_assert(offsetof(struct gpuslice_policy_page, devices) == 0, "gpuslice_policy_page.devices");
_Static_assert(offsetof(struct gpuslice_policy_page, reserved) == 1024, "gpuslice_policy_page.reserved");
_Static_assert(sizeof(struct gpuslice_usage) == 64, "gpuslice_usage size");
_Static_assert(offsetof(struct gpuslice_usage, used_bytes) == 0, "gpuslice_usage.used_bytes");
_Static_assert(offsetof(struct gpuslice_usage, alloc_denied_total) == 8, "gpuslice_usage.alloc_denied_total");
_Static_assert(offsetof(struct gpuslice_usage, context_overhead_bytes) == 16, "gpuslice_usage.context_overhead_bytes");
_Static_assert(offsetof(struct gpuslice_usage, reserved) == 24, "gpuslice_usage.reserved");
_Static_assert(sizeof(struct gpuslice_usage_page) == 4096, "gpuslice_usage_page size");
_Static_assert(offsetof(struct gpuslice_usage_page, devices) == 0, "gpuslice_usage_page.devices");
_Static_assert(offsetof(struct gpuslice_usage_page, reclaimed_processes_total) == 1024, "gpuslice_usage_page.reclaimed_processes_total");
_Static_assert(offsetof(struct gpuslice_usage_page, slots_claimed_total) == 1032, "gpuslice_usage_page.slots_claimed_total");
_Static_assert(offsetof(struct gpuslice_usage_page, reserved) == 1040, "gpuslice_usage_page.reserved");
_Static_assert(sizeof(struct gpuslice_compute) == 128, "gpuslice_compute size");
_Static_assert(offsetof(struct gpuslice_compute, tokens_ns) == 0, "gpuslice_compute.tokens_ns");
_Static_assert(offsetof(struct gpuslice_compute, refill_ns) == 8, "gpuslice_compute.refill_ns");
_Static_assert(offsetof(struct gpuslice_compute, launches_total) == 16, "gpuslice_compute.launches_total");
_Static_assert(offsetof(struct gpuslice_compute, busy_ns_total) == 24, "gpuslice_compute.busy_ns_total");
_Static_assert(offsetof(struct gpuslice_compute, throttled_ns_total) == 32, "gpuslice_compute.throttled_ns_total");
_Static_assert(offsetof(struct gpuslice_compute, reserved0) == 40, "gpuslice_compute.reserved0");
_Static_assert(offsetof(struct gpuslice_compute, reserved) == 64, "gpuslice_compute.reserved");
_Static_assert(sizeof(struct gpuslice_compute_page) == 4096, "gpuslice_compute_page size");
_Static_assert(offsetof(struct gpuslice_compute_page, devices) == 0, "gpuslice_compute_page.devices");
_Static_assert(offsetof(struct gpuslice_compute_page, reserved) == 2048, "gpuslice_compute_page.reserved");
_Static_assert(sizeof(struct gpuslice_slot) == 192, "gpuslice_slot size");
_Static_assert(offsetof(struct gpuslice_slot, state_word) == 0, "gpuslice_slot.state_word");
_Static_assert(offsetof(struct gpuslice_slot, in_flight_word) == 8, "gpuslice_slot.in_flight_word");
_Static_assert(offsetof(struct gpuslice_slot, bytes) == 16, "gpuslice_slot.bytes");
_Static_assert(offsetof(struct gpuslice_slot, pid) == 144, "gpuslice_slot.pid");
_Static_assert(offsetof(struct gpuslice_slot, ns_pid) == 148, "gpuslice_slot.ns_pid");
_Static_assert(offsetof(struct gpuslice_slot, pidns_inode) == 152, "gpuslice_slot.pidns_inode");
_Static_assert(offsetof(struct gpuslice_slot, start_time_ticks) == 160, "gpuslice_slot.start_time_ticks");
_Static_assert(offsetof(struct gpuslice_slot, reserved) == 168, "gpuslice_slot.reserved");
_Static_assert(sizeof(struct gpuslice_ledger) == 212992, "gpuslice_ledger size");
_Static_assert(offsetof(struct gpuslice_ledger, header) == 0, "gpuslice_ledger.header");
_Static_assert(offsetof(struct gpuslice_ledger, policy) == 4096, "gpuslice_ledger.policy");
_Static_assert(offsetof(struct gpuslice_ledger, usage) == 8192, "gpuslice_ledger.usage");
_Static_assert(offsetof(struct gpuslice_ledger, compute) == 12288, "gpuslice_ledger.compute");
_Static_assert(offsetof(struct gpuslice_ledger, slots) == 16384, "gpuslice_ledger.slots");

#endif /* GPUSLICE_H */
