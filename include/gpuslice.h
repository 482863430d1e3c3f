/*
 * gpuslice.h - the layout of a gpuslice ledger file, for C tools.
 *
 * One file per tenant, <GPUSLICE_DIR>/<tenant>.ledger, mapped MAP_SHARED by
 * every process of the tenant and by the monitor. This header mirrors
 * ledger/src/layout.rs; ledger/tests/c_layout.rs checks that sizes and
 * offsets agree. All multi-byte words are native-endian and must be accessed
 * atomically (e.g. __atomic_load_n / __atomic_compare_exchange_n) once the
 * file is published.
 *
 * Rules a writer must follow:
 *  - Never write to a file whose magic, layout_version, sizes or
 *    `initialised` word differ from the constants below.
 *  - A memory reservation is a compare-and-swap on usage.devices[d].used_bytes
 *    that keeps it <= policy.devices[d].memory_limit_bytes, then an add to the
 *    process's slots[i].bytes[d].
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
#define GPUSLICE_LAYOUT_VERSION 4u
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

/* struct gpuslice_policy.policy_source */
#define GPUSLICE_POLICY_UNSET 0u
#define GPUSLICE_POLICY_ENVIRONMENT 1u
#define GPUSLICE_POLICY_MONITOR 2u

/* One GPU the tenant has used, keyed by UUID. */
struct gpuslice_device {
    uint32_t state;
    uint32_t reserved0;
    uint8_t uuid[16];
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
    uint32_t reserved0;
    uint64_t created_unix_s;
    char tenant_name[64]; /* NUL-padded */
    struct gpuslice_device devices[GPUSLICE_MAX_DEVICES];
    uint8_t reserved[GPUSLICE_PAGE_BYTES - 128 - GPUSLICE_MAX_DEVICES * 64];
};

/* What the tenant may use on one device. */
struct gpuslice_policy {
    uint64_t memory_limit_bytes; /* GPUSLICE_UNLIMITED when no cap */
    uint32_t policy_source;
    uint32_t compute_share_ratio_e4; /* ratio x 10000, 0 = none */
    uint32_t compute_limit_ratio_e4; /* ratio x 10000, 0 = no ceiling */
    int32_t priority;
    /* Writers of memory_limit_bytes + policy_source claim it with a CAS from
       the even value they decided on to an odd one, store both, then make it
       even again: the pair changes as one decision. */
    uint64_t policy_epoch;
    uint64_t reserved[4];
};

/* Page 1. */
struct gpuslice_policy_page {
    struct gpuslice_policy devices[GPUSLICE_MAX_DEVICES];
    uint8_t reserved[GPUSLICE_PAGE_BYTES - GPUSLICE_MAX_DEVICES * 64];
};

/* What the tenant uses on one device. */
struct gpuslice_usage {
    uint64_t used_bytes;
    uint64_t alloc_denied_total;
    uint64_t context_overhead_bytes;
    uint64_t launches_total;
    uint64_t throttled_ns_total;
    int64_t compute_tokens;
    uint64_t compute_refill_ns;
    uint64_t reserved;
};

/* Page 2. */
struct gpuslice_usage_page {
    struct gpuslice_usage devices[GPUSLICE_MAX_DEVICES];
    uint64_t reclaimed_processes_total;
    uint64_t slots_claimed_total;
    uint8_t reserved[GPUSLICE_PAGE_BYTES - GPUSLICE_MAX_DEVICES * 64 - 16];
};

/* One process of the tenant. */
struct gpuslice_slot {
    uint64_t state_word;
    /* Low 32 bits: reservations/releases between their two steps (usage,
       then slot; or slot, then usage); high 32 bits: how many finished.
       A writer adds GPUSLICE_IN_FLIGHT_BEGIN before its first step and
       GPUSLICE_IN_FLIGHT_FINISH after its second. */
    uint64_t in_flight_word;
    /* By device index. state_word, in_flight_word and bytes[0..5] share the
       record's first cache line: the owner's threads touch them together. */
    uint64_t bytes[GPUSLICE_MAX_DEVICES];
    uint32_t pid;         /* as the ledger directory's /proc sees it */
    uint32_t ns_pid;      /* in the process's own PID namespace */
    uint64_t pidns_inode; /* of /proc/self/ns/pid */
    uint64_t start_time_ticks;
    uint64_t reserved[3];
};

/* A whole ledger file. */
struct gpuslice_ledger {
    struct gpuslice_header header;
    struct gpuslice_policy_page policy;
    struct gpuslice_usage_page usage;
    struct gpuslice_slot slots[GPUSLICE_MAX_SLOTS];
};

#define GPUSLICE_POLICY_OFFSET offsetof(struct gpuslice_ledger, policy)
#define GPUSLICE_USAGE_OFFSET offsetof(struct gpuslice_ledger, usage)
#define GPUSLICE_SLOTS_OFFSET offsetof(struct gpuslice_ledger, slots)
#define GPUSLICE_SLOT_BYTES sizeof(struct gpuslice_slot)
#define GPUSLICE_FILE_BYTES sizeof(struct gpuslice_ledger)
/* The byte the owner of slot i keeps locked: the first byte of its record. */
#define GPUSLICE_SLOT_LOCK_OFFSET(i) (GPUSLICE_SLOTS_OFFSET + (size_t)(i) * GPUSLICE_SLOT_BYTES)

_Static_assert(sizeof(struct gpuslice_device) == 64, "gpuslice_device size");
_Static_assert(offsetof(struct gpuslice_device, uuid) == 8, "gpuslice_device.uuid");
_Static_assert(offsetof(struct gpuslice_device, total_memory_bytes) == 24, "gpuslice_device.total_memory_bytes");
_Static_assert(sizeof(struct gpuslice_header) == GPUSLICE_PAGE_BYTES, "gpuslice_header size");
_Static_assert(offsetof(struct gpuslice_header, layout_version) == 8, "gpuslice_header.layout_version");
_Static_assert(offsetof(struct gpuslice_header, file_bytes) == 40, "gpuslice_header.file_bytes");
_Static_assert(offsetof(struct gpuslice_header, initialised) == 48, "gpuslice_header.initialised");
_Static_assert(offsetof(struct gpuslice_header, tenant_name) == 64, "gpuslice_header.tenant_name");
_Static_assert(offsetof(struct gpuslice_header, devices) == 128, "gpuslice_header.devices");
_Static_assert(sizeof(struct gpuslice_policy) == 64, "gpuslice_policy size");
_Static_assert(offsetof(struct gpuslice_policy, policy_source) == 8, "gpuslice_policy.policy_source");
_Static_assert(offsetof(struct gpuslice_policy, priority) == 20, "gpuslice_policy.priority");
_Static_assert(sizeof(struct gpuslice_policy_page) == GPUSLICE_PAGE_BYTES, "gpuslice_policy_page size");
_Static_assert(sizeof(struct gpuslice_usage) == 64, "gpuslice_usage size");
_Static_assert(offsetof(struct gpuslice_usage, compute_refill_ns) == 48, "gpuslice_usage.compute_refill_ns");
_Static_assert(sizeof(struct gpuslice_usage_page) == GPUSLICE_PAGE_BYTES, "gpuslice_usage_page size");
_Static_assert(offsetof(struct gpuslice_usage_page, reclaimed_processes_total) == 1024, "gpuslice_usage_page.reclaimed_processes_total");
_Static_assert(sizeof(struct gpuslice_slot) == 192, "gpuslice_slot size");
_Static_assert(offsetof(struct gpuslice_slot, in_flight_word) == 8, "gpuslice_slot.in_flight_word");
_Static_assert(offsetof(struct gpuslice_slot, bytes) == 16, "gpuslice_slot.bytes");
_Static_assert(offsetof(struct gpuslice_slot, pid) == 144, "gpuslice_slot.pid");
_Static_assert(offsetof(struct gpuslice_slot, start_time_ticks) == 160, "gpuslice_slot.start_time_ticks");
_Static_assert(offsetof(struct gpuslice_ledger, policy) == GPUSLICE_PAGE_BYTES, "policy page offset");
_Static_assert(offsetof(struct gpuslice_ledger, usage) == 2 * GPUSLICE_PAGE_BYTES, "usage page offset");
_Static_assert(offsetof(struct gpuslice_ledger, slots) == 3 * GPUSLICE_PAGE_BYTES, "slots offset");
_Static_assert(sizeof(struct gpuslice_ledger) == 3 * GPUSLICE_PAGE_BYTES + GPUSLICE_MAX_SLOTS * 192, "file size");

#endif /* GPUSLICE_H */
