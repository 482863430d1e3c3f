//! The bytes of a ledger file, as every process maps them.
//!
//! A ledger file is one [`LedgerFile`]: a header page (identity, sizes and the
//! device table), a policy page (what the tenant may use, written by the
//! monitor or by the tenant's first process), a usage page (what the tenant
//! uses now, written by every process of the tenant), a compute page (each
//! device's budget of device time and its counters, written by every launch
//! of the tenant on a device with a limit) and [`MAX_SLOTS`] process slots.
//! Each part starts a 4 KiB page of its own, at an offset the header
//! records. The policy page is no more protected than the others: every
//! process of the tenant maps the whole file writable, and writes the
//! policy page too (its first process sets the cap its environment asks
//! for). So the page is what the tenant says, never what holds it: a
//! process holds itself to its environment's cap in its own memory
//! (`Ledger::hold_cap_at_most`), and the monitor holds a tenant to the cap
//! it configured or pinned, writing it back over a raised one and judging
//! the tenant by what NVML reports, not by this file.
//!
//! Compute state has a page of its own, and each device's record two cache
//! lines of its own, because its writers are not the allocators: every
//! allocation of the tenant CASes `used_bytes`, and every launch on a
//! limited device adds to its bucket. Kept on one line, each would make the
//! other's cache line travel between cores. 128 bytes per device keep
//! neighbouring devices apart too, also under the adjacent-line prefetch of
//! x86 cores, which fetches lines in 128-byte pairs.
//!
//! Every type here implements [`SharedLayout`]. `include/gpuslice.h` declares
//! the same layout for C and is generated from this module (with the C names
//! and comments of `tests/c_header/mod.rs`); `tests/c_layout.rs` fails when
//! it differs. After changing the layout, regenerate it with
//! `GPUSLICE_BLESS=1 cargo test -p gpuslice-ledger --test c_layout`.

use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8};

/// Devices per host that one ledger can describe.
pub const MAX_DEVICES: usize = 16;
/// Process slots per tenant: at most this many processes of one tenant use
/// the GPU at the same time.
pub const MAX_SLOTS: usize = 1024;
/// A memory cap that caps nothing.
pub const UNLIMITED: u64 = u64::MAX;

/// `b"GPUSLICE"` read as a little-endian `u64`: the first eight bytes of
/// every ledger file.
pub const MAGIC: u64 = u64::from_le_bytes(*b"GPUSLICE");
/// The layout described by this module. Any change of size, offset or
/// meaning bumps it; a process never maps a file of another version. A
/// reserved word may be given a meaning without a bump when its zero, which
/// every earlier file holds, still means what it meant
/// ([`Header::compute_offset`]).
pub const LAYOUT_VERSION: u32 = 5;
/// The value of [`Header::initialised`] once the creator has written
/// everything else ("INIT" in ASCII). Zero means "still being created";
/// anything else is corruption.
pub const INITIALISED: u32 = u32::from_le_bytes(*b"INIT");

/// Size of one page of the layout.
pub const PAGE_BYTES: usize = 4096;
/// Size of a whole ledger file.
pub const FILE_BYTES: usize = size_of::<LedgerFile>();
/// Offset of the policy page in the file.
pub const POLICY_OFFSET: usize = offset_of!(LedgerFile, policy);
/// Offset of the usage page in the file.
pub const USAGE_OFFSET: usize = offset_of!(LedgerFile, usage);
/// Offset of the compute page in the file.
pub const COMPUTE_OFFSET: usize = offset_of!(LedgerFile, compute);
/// Offset of the first process slot in the file.
pub const SLOTS_OFFSET: usize = offset_of!(LedgerFile, slots);
/// Size of one process slot.
pub const SLOT_BYTES: usize = size_of::<SlotRecord>();

/// Device table entry states ([`DeviceRecord::state`]).
pub mod device_state {
    /// Never used.
    pub const EMPTY: u32 = 0;
    /// A process is writing the UUID and total memory.
    pub const CLAIMING: u32 = 1;
    /// UUID and total memory are written and never change.
    pub const READY: u32 = 2;
}

/// Process slot states, the low 32 bits of [`SlotRecord::state_word`].
///
/// `FREE → CLAIMED → ALIVE → (RECLAIMING →) FREE`, each step a CAS on the
/// whole word, whose high 32 bits are the slot's generation. The generation
/// grows by one each time the slot becomes free again, so a stale view of a
/// slot can never win a CAS against its next owner.
pub mod slot_state {
    /// Nobody uses the slot.
    pub const FREE: u32 = 0;
    /// A process holds the slot's lock and is filling in its identity.
    pub const CLAIMED: u32 = 1;
    /// A process owns the slot; it holds the slot's lock while it lives.
    pub const ALIVE: u32 = 2;
    /// The owner died; a reclaimer holds the lock and is returning its bytes.
    pub const RECLAIMING: u32 = 3;
}

/// The [`SlotRecord::in_flight_word`] protocol.
///
/// Every change of a tenant's `used_bytes` goes with a change of one slot's
/// `bytes`, in two atomic steps: a reservation adds to `used_bytes` (the CAS
/// that admits it) and then to the slot; a release or a drain takes from the
/// slot and then from `used_bytes`. Between the two steps the tenant counts
/// bytes that no slot holds. Around both steps the writer adds [`BEGIN`] to
/// the word of the slot whose bytes it changes (before the first step) and
/// [`FINISH`] after the second (or after a refused CAS), each with
/// sequentially consistent ordering. So:
/// - a count of zero on a slot means no change is between its steps there;
/// - an unchanged word means no change began or finished there meanwhile
///   (the finished count moves with every one).
///
/// A writer killed between the steps leaves the count set on a slot whose
/// lock the kernel dropped: those bytes are a leak, and only there may a
/// set count be ignored. See `Ledger::audit_usage`.
pub mod in_flight {
    /// Added before the first step: one more in flight.
    pub const BEGIN: u64 = 1;
    /// Added after the second step: one fewer in flight, one more finished.
    pub const FINISH: u64 = (1 << 32) - 1;

    /// Changes in flight in a word.
    pub const fn count(word: u64) -> u32 {
        word as u32
    }

    /// The word with nothing in flight and its finished count moved on, for
    /// whoever takes a slot over from a dead writer (under the slot's lock).
    pub const fn settled(word: u64) -> u64 {
        ((word >> 32).wrapping_add(1)) << 32
    }
}

/// Who set a device's memory cap ([`PolicyRecord::policy_source`]) or its
/// compute limit ([`PolicyRecord::compute_limit_source`]).
pub mod policy_source {
    /// Nothing was set.
    pub const UNSET: u32 = 0;
    /// The tenant's first process set it from its environment.
    pub const ENVIRONMENT: u32 = 1;
    /// The monitor set it from its configuration file.
    pub const MONITOR: u32 = 2;
}

/// Types that live in a ledger file shared by unrelated processes.
///
/// # Safety
/// An implementor promises that the type
/// - is `#[repr(C)]` and its size and field offsets are pinned by `const`
///   asserts (here) and by `include/gpuslice.h`;
/// - holds only fixed-width integers, atomics of them and byte arrays: no
///   pointers, references, `usize`, `bool`, Rust enums or niches, so that any
///   bit pattern is a valid value (a corrupt file is wrong, never undefined
///   behaviour);
/// - is written only through atomics once the file is visible to others (plain
///   byte arrays are written only before the file is published, or never);
/// - is all-zero when freshly created, except for what the creator sets before
///   it publishes the file.
pub unsafe trait SharedLayout: Sync + Sized {}

/// The first page: identity, sizes and the device table.
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: AtomicU64,
    /// [`LAYOUT_VERSION`].
    pub layout_version: AtomicU32,
    /// `size_of::<Header>()`.
    pub header_bytes: AtomicU32,
    /// [`POLICY_OFFSET`].
    pub policy_offset: AtomicU32,
    /// [`USAGE_OFFSET`].
    pub usage_offset: AtomicU32,
    /// [`SLOTS_OFFSET`].
    pub slots_offset: AtomicU32,
    /// [`SLOT_BYTES`].
    pub slot_bytes: AtomicU32,
    /// [`MAX_DEVICES`].
    pub max_devices: AtomicU32,
    /// [`MAX_SLOTS`].
    pub max_slots: AtomicU32,
    /// [`FILE_BYTES`].
    pub file_bytes: AtomicU64,
    /// [`INITIALISED`] once the creator has written everything else; written
    /// last, with release ordering.
    pub initialised: AtomicU32,
    /// [`COMPUTE_OFFSET`]; 0 in files created before this field was written
    /// (it was reserved, zero), whose compute page is at [`COMPUTE_OFFSET`]
    /// all the same. Opening refuses any other value.
    pub compute_offset: AtomicU32,
    /// When the file was created, seconds since the Unix epoch.
    pub created_unix_s: AtomicU64,
    /// The tenant's name, NUL-padded (at most 63 bytes, so always ends in NUL).
    pub tenant_name: [AtomicU8; 64],
    /// Devices by UUID, appended as processes of the tenant first use them.
    pub devices: [DeviceRecord; MAX_DEVICES],
    /// Pads the header to one page.
    pub reserved: [u8; PAGE_BYTES - 128 - MAX_DEVICES * 64],
}

/// One entry of the device table: which physical GPU a device index means.
#[repr(C)]
pub struct DeviceRecord {
    /// [`device_state`]: the UUID and total are valid once this is `READY`.
    pub state: AtomicU32,
    /// Reserved, zero.
    pub reserved0: AtomicU32,
    /// The device's UUID, as `cuDeviceGetUuid` returns it.
    pub uuid: [AtomicU8; 16],
    /// The device's physical memory.
    pub total_memory_bytes: AtomicU64,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 4],
}

/// What the tenant may use on one device.
#[repr(C)]
pub struct PolicyRecord {
    /// The memory cap; [`UNLIMITED`] when none is set. Read by the shim on
    /// every allocation, so a lowered cap applies at once.
    pub memory_limit_bytes: AtomicU64,
    /// [`policy_source`]: who set the cap.
    pub policy_source: AtomicU32,
    /// Guaranteed share of device time, as a ratio × 10 000 (0 = none).
    pub compute_share_ratio_e4: AtomicU32,
    /// Hard ceiling on device time, as a ratio × 10 000 (0 = no ceiling;
    /// 10 000, the whole device, caps nothing either). Read by the shim on
    /// every launch on a limited device, so a changed limit applies at once.
    pub compute_limit_ratio_e4: AtomicU32,
    /// Scheduling priority: higher runs first when time is spare.
    pub priority: AtomicI32,
    /// Orders the writers of `memory_limit_bytes` and `policy_source`, so
    /// that the pair is decided and written as one: odd while a writer is
    /// between its claim (a CAS from the even value it decided on) and its
    /// last store, even otherwise. A writer that finds it odd for long took
    /// over from a dead one. Readers of the cap alone need not look at it.
    pub policy_epoch: AtomicU64,
    /// [`policy_source`]: who set `compute_limit_ratio_e4`.
    pub compute_limit_source: AtomicU32,
    /// Reserved, zero.
    pub reserved0: AtomicU32,
    /// Orders the writers of `compute_limit_ratio_e4` and
    /// `compute_limit_source` as `policy_epoch` orders the cap's.
    pub compute_epoch: AtomicU64,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 2],
}

/// The policy page: one record per device index of the device table.
#[repr(C)]
pub struct PolicyPage {
    /// By device index.
    pub devices: [PolicyRecord; MAX_DEVICES],
    /// Pads the policy to one page.
    pub reserved: [u8; PAGE_BYTES - MAX_DEVICES * 64],
}

/// What the tenant uses on one device.
#[repr(C)]
pub struct UsageRecord {
    /// Bytes reserved by all processes of the tenant: the sum of their slots'
    /// bytes on this device. Admission is a CAS on this word.
    pub used_bytes: AtomicU64,
    /// Allocations refused because they would pass the cap.
    pub alloc_denied_total: AtomicU64,
    /// Device memory one context costs, as measured by the shim.
    pub context_overhead_bytes: AtomicU64,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 5],
}

/// The usage page: per-device usage, then tenant-wide counters.
#[repr(C)]
pub struct UsagePage {
    /// By device index.
    pub devices: [UsageRecord; MAX_DEVICES],
    /// Processes whose slots were reclaimed after they died.
    pub reclaimed_processes_total: AtomicU64,
    /// Slots ever claimed (processes that used the GPU).
    pub slots_claimed_total: AtomicU64,
    /// Pads the usage to one page.
    pub reserved: [u8; PAGE_BYTES - MAX_DEVICES * 64 - 16],
}

/// The tenant's device time on one device: a token bucket shared by every
/// process of the tenant, and its counters. Written only on devices with a
/// compute limit (see `crate::compute` for the arithmetic).
///
/// The first line holds everything a launch and a charge touch; the second
/// is kept for the monitor's arbitration of shares.
#[repr(C)]
pub struct ComputeRecord {
    /// Device time the tenant may still start work with, ns; negative when
    /// measured work ran past what was refilled (a debt the throttle waits
    /// out).
    pub tokens_ns: AtomicI64,
    /// When the bucket was last refilled: the tenant's monotonic clock, ns.
    pub refill_ns: AtomicU64,
    /// Launch calls on this device while it had a limit (a graph launch
    /// counts once).
    pub launches_total: AtomicU64,
    /// Device time charged to the bucket: measured work, ns.
    pub busy_ns_total: AtomicU64,
    /// Time launches waited for the bucket to refill, ns.
    pub throttled_ns_total: AtomicU64,
    /// Reserved, zero.
    pub reserved0: [AtomicU64; 3],
    /// Reserved, zero: the second cache line, for shares.
    pub reserved: [AtomicU64; 8],
}

/// The compute page: one record per device index, each on two cache lines
/// of its own.
#[repr(C)]
pub struct ComputePage {
    /// By device index.
    pub devices: [ComputeRecord; MAX_DEVICES],
    /// Pads the compute state to one page.
    pub reserved: [u8; PAGE_BYTES - MAX_DEVICES * 128],
}

/// One process of the tenant.
///
/// The owner holds an OFD write lock on the first byte of its record
/// (`SLOTS_OFFSET + index * SLOT_BYTES`) for as long as it lives; the kernel
/// drops the lock however the process ends.
///
/// Every reservation and release of the owner touches `state_word` (its
/// ownership check), `in_flight_word` (twice) and `bytes[dev]`: they are the
/// record's first words, so that for devices 0 to 5 all of it is one cache
/// line (a record is 192 bytes, three whole lines, and the slots start on a
/// page), which the owner's threads then pass between them instead of two.
#[repr(C)]
pub struct SlotRecord {
    /// Low 32 bits: [`slot_state`]; high 32 bits: generation.
    pub state_word: AtomicU64,
    /// Reservations and releases in flight on this slot: low 32 bits count
    /// those begun and not finished, high 32 bits count those finished (see
    /// [`in_flight`]). Written by the owner around each change of the
    /// tenant's usage and this slot's bytes, and by a claimer or reclaimer
    /// (holding the slot's lock) around draining it.
    pub in_flight_word: AtomicU64,
    /// Bytes this process has reserved, by device index.
    pub bytes: [AtomicU64; MAX_DEVICES],
    /// The owner's pid as the `/proc` the owner sees names it (first `NSpid`
    /// field): the host pid only when that `/proc` belongs to the host's PID
    /// namespace.
    pub pid: AtomicU32,
    /// The owner's pid in its own PID namespace.
    pub ns_pid: AtomicU32,
    /// Inode of the owner's PID namespace (`/proc/self/ns/pid`).
    pub pidns_inode: AtomicU64,
    /// The owner's start time, clock ticks after boot (`/proc/PID/stat` field 22).
    pub start_time_ticks: AtomicU64,
    /// Reserved, zero.
    pub reserved: [AtomicU64; 3],
}

/// A whole ledger file.
#[repr(C)]
pub struct LedgerFile {
    /// Identity, sizes, devices.
    pub header: Header,
    /// Caps and compute settings.
    pub policy: PolicyPage,
    /// Usage and counters.
    pub usage: UsagePage,
    /// Device time budgets and counters.
    pub compute: ComputePage,
    /// Process slots, never compacted.
    pub slots: [SlotRecord; MAX_SLOTS],
}

// SAFETY: each type below is repr(C), holds only atomics of fixed-width
// integers and byte arrays, and is pinned by the asserts that follow.
unsafe impl SharedLayout for Header {}
// SAFETY: as above.
unsafe impl SharedLayout for DeviceRecord {}
// SAFETY: as above.
unsafe impl SharedLayout for PolicyRecord {}
// SAFETY: as above.
unsafe impl SharedLayout for PolicyPage {}
// SAFETY: as above.
unsafe impl SharedLayout for UsageRecord {}
// SAFETY: as above.
unsafe impl SharedLayout for UsagePage {}
// SAFETY: as above.
unsafe impl SharedLayout for ComputeRecord {}
// SAFETY: as above.
unsafe impl SharedLayout for ComputePage {}
// SAFETY: as above.
unsafe impl SharedLayout for SlotRecord {}
// SAFETY: as above.
unsafe impl SharedLayout for LedgerFile {}

/// Packs a slot state and generation into a [`SlotRecord::state_word`].
pub const fn state_word(state: u32, generation: u32) -> u64 {
    ((generation as u64) << 32) | state as u64
}

/// Splits a [`SlotRecord::state_word`] into (state, generation).
pub const fn split_state_word(word: u64) -> (u32, u32) {
    (word as u32, (word >> 32) as u32)
}

const _: () = {
    assert!(size_of::<Header>() == PAGE_BYTES);
    assert!(offset_of!(Header, magic) == 0);
    assert!(offset_of!(Header, layout_version) == 8);
    assert!(offset_of!(Header, header_bytes) == 12);
    assert!(offset_of!(Header, policy_offset) == 16);
    assert!(offset_of!(Header, usage_offset) == 20);
    assert!(offset_of!(Header, slots_offset) == 24);
    assert!(offset_of!(Header, slot_bytes) == 28);
    assert!(offset_of!(Header, max_devices) == 32);
    assert!(offset_of!(Header, max_slots) == 36);
    assert!(offset_of!(Header, file_bytes) == 40);
    assert!(offset_of!(Header, initialised) == 48);
    assert!(offset_of!(Header, compute_offset) == 52);
    assert!(offset_of!(Header, created_unix_s) == 56);
    assert!(offset_of!(Header, tenant_name) == 64);
    assert!(offset_of!(Header, devices) == 128);

    assert!(size_of::<DeviceRecord>() == 64);
    assert!(offset_of!(DeviceRecord, state) == 0);
    assert!(offset_of!(DeviceRecord, uuid) == 8);
    assert!(offset_of!(DeviceRecord, total_memory_bytes) == 24);

    assert!(size_of::<PolicyRecord>() == 64);
    assert!(offset_of!(PolicyRecord, memory_limit_bytes) == 0);
    assert!(offset_of!(PolicyRecord, policy_source) == 8);
    assert!(offset_of!(PolicyRecord, compute_share_ratio_e4) == 12);
    assert!(offset_of!(PolicyRecord, compute_limit_ratio_e4) == 16);
    assert!(offset_of!(PolicyRecord, priority) == 20);
    assert!(offset_of!(PolicyRecord, policy_epoch) == 24);
    assert!(offset_of!(PolicyRecord, compute_limit_source) == 32);
    assert!(offset_of!(PolicyRecord, compute_epoch) == 40);
    assert!(size_of::<PolicyPage>() == PAGE_BYTES);

    assert!(size_of::<UsageRecord>() == 64);
    assert!(offset_of!(UsageRecord, used_bytes) == 0);
    assert!(offset_of!(UsageRecord, alloc_denied_total) == 8);
    assert!(offset_of!(UsageRecord, context_overhead_bytes) == 16);
    assert!(size_of::<UsagePage>() == PAGE_BYTES);
    assert!(offset_of!(UsagePage, reclaimed_processes_total) == 1024);
    assert!(offset_of!(UsagePage, slots_claimed_total) == 1032);

    assert!(size_of::<ComputeRecord>() == 128);
    assert!(offset_of!(ComputeRecord, tokens_ns) == 0);
    assert!(offset_of!(ComputeRecord, refill_ns) == 8);
    assert!(offset_of!(ComputeRecord, launches_total) == 16);
    assert!(offset_of!(ComputeRecord, busy_ns_total) == 24);
    assert!(offset_of!(ComputeRecord, throttled_ns_total) == 32);
    assert!(offset_of!(ComputeRecord, reserved) == 64);
    assert!(size_of::<ComputePage>() == PAGE_BYTES);
    // Each device's record starts a 128-byte pair of lines.
    assert!(COMPUTE_OFFSET.is_multiple_of(128));

    assert!(size_of::<SlotRecord>() == 192);
    assert!(offset_of!(SlotRecord, state_word) == 0);
    assert!(offset_of!(SlotRecord, in_flight_word) == 8);
    assert!(offset_of!(SlotRecord, bytes) == 16);
    assert!(offset_of!(SlotRecord, pid) == 144);
    assert!(offset_of!(SlotRecord, ns_pid) == 148);
    assert!(offset_of!(SlotRecord, pidns_inode) == 152);
    assert!(offset_of!(SlotRecord, start_time_ticks) == 160);
    // The owner's hot words for device 0 share the record's first line.
    assert!(offset_of!(SlotRecord, bytes) + 8 <= 64);
    assert!(SLOTS_OFFSET.is_multiple_of(64) && size_of::<SlotRecord>().is_multiple_of(64));

    assert!(offset_of!(LedgerFile, header) == 0);
    assert!(POLICY_OFFSET == PAGE_BYTES);
    assert!(USAGE_OFFSET == 2 * PAGE_BYTES);
    assert!(COMPUTE_OFFSET == 3 * PAGE_BYTES);
    assert!(SLOTS_OFFSET == 4 * PAGE_BYTES);
    assert!(FILE_BYTES == 4 * PAGE_BYTES + MAX_SLOTS * 192);
    assert!(std::mem::align_of::<LedgerFile>() <= PAGE_BYTES);
};
