//! The safe core: what each allocation, free, context and view call does to
//! the tenant's ledger. Hooks hand it a closure that makes the driver call;
//! the core decides around it.
//!
//! - Admission is a reservation in the ledger *before* the driver is called,
//!   rolled back if the driver fails, so no interleaving of threads or
//!   processes passes the cap. A refusal first reclaims dead processes'
//!   slots (`Ledger::reclaim_dead`) and tries once more.
//! - `cuMemAlloc*`, stream-ordered and array allocations are charged in
//!   the driver's 512-byte granularity, as the device holds them.
//! - Every allocation is remembered (pointer, VMM handle or array handle →
//!   device, bytes, context) so that its free releases exactly what was
//!   charged. A free of something unknown is forwarded and its result
//!   returned, and the ledger is left alone; so is a second free of the same
//!   pointer, which gets the driver's error.
//! - VMM (`cuMemCreate`) memory lives while its handle is referenced (the
//!   create, plus each `cuMemRetainAllocationHandle`) or mapped
//!   (`cuMemMap`): `cuMemRelease` of a mapped handle keeps the charge, and the
//!   handle's last `cuMemUnmap` releases it, as the driver frees it then.
//! - Stream-ordered allocations (`cuMemAllocAsync`, `cuMemAllocFromPoolAsync`)
//!   are charged to the context and device of their stream (`cuStreamGetCtx`;
//!   the null, legacy and per-thread streams mean the calling thread's
//!   context); `cuMemAllocFromPoolAsync` charges the pool's device
//!   (`CU_MEMPOOL_ATTR_LOCATION_ID`), where the driver takes the memory,
//!   even when the stream is on another device.
//! - Memory whose location the caller names (`cuMemCreate`, a pool) and
//!   that cannot be tied to a device this process knows is refused, never
//!   passed uncharged (see `placement`); host memory is not charged.
//! - `cuMemFreeAsync` keeps the charge until the stream reaches the free, as
//!   the driver keeps the memory until then: an event recorded right after
//!   the free is polled (oldest per stream first) at each admission, each
//!   denial, each view (`cuMemGetInfo`, NVML) and after each stream,
//!   context or event synchronisation while frees are pending (see
//!   `hooks::sync`), and the charge goes when it completes. So any
//!   allocation right after a pending free, on the same stream too, is
//!   refused for the bytes still in flight (a driver that reuses them in
//!   stream order would not need them, but one that takes new memory at the
//!   call holds both until the stream gets there). A free completed
//!   without a synchronisation (the stream simply got there) stays charged
//!   until this process's next such call: the error is on the safe side.
//!   Destroying the context drops its pending frees with it.
//! - Destroying a context (or the last release or a reset of a primary one)
//!   frees the memory allocated in it, as the driver does, and the charges
//!   go with it.
//! - Each context costs its measured overhead (`Ledger::context_overhead_bytes`).
//!   The first process of a tenant to create a context on a device measures it
//!   (see `overhead`: NVML's figure for this process, or the device's growth
//!   across the creation when NVML's pids are not this process's) and records
//!   it; later contexts reserve it before they are created.
//!
//! No lock of this module is held across a driver call, except the
//! per-device primary-context lock: the driver's retain count and our charge
//! must change together, and primary retains are rare and never on the
//! allocation or launch path.

use abi::cuda::*;
use ledger::{Denied, Ledger, Slot, UNLIMITED};
use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::placement::{self, Placement};
use crate::real;

/// One device as this process sees it.
#[derive(Clone, Copy, Debug)]
pub struct Device {
    /// Ordinal after `CUDA_VISIBLE_DEVICES`.
    pub ordinal: i32,
    /// The driver's handle for it.
    pub cu_device: CUdevice,
    /// Its index in the tenant's ledger.
    pub ledger_index: usize,
    pub uuid: [u8; 16],
}

/// What one allocation was charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charge {
    pub ledger_index: usize,
    pub bytes: u64,
    /// The context it lives in (0: not bound to one, such as VMM handles).
    pub ctx: usize,
}

/// Which table an allocation is remembered in (their handles may collide).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `CUdeviceptr` from the `cuMemAlloc*` family.
    Pointer,
    /// `CUarray` or `CUmipmappedArray`.
    Array,
}

/// A hasher for addresses: mixes the bits so that aligned pointers spread.
#[derive(Default)]
pub struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        let z = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z ^ (z >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8 | u64::from(*b)).rotate_left(5);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Map = HashMap<u64, Charge, BuildHasherDefault<AddressHasher>>;

const SHARDS: usize = 64;

/// How many threads are inside a ledger change, counted in cache-line
/// padded shards so that threads of a busy process do not all bounce one
/// line: a thread counts itself in the shard its thread-local index picks.
/// The destructor's exit handshake needs only "is any thread inside": the
/// sum over shards. Every increment and the `exiting` flag are sequentially
/// consistent, so a thread either sees `exiting` or is seen by [`any`].
///
/// [`any`]: InLedger::any
struct InLedger {
    shards: [PaddedCount; IN_LEDGER_SHARDS],
    /// Never used in practice: where a thread would count itself if its
    /// shard index were out of range.
    spare: AtomicUsize,
}

const IN_LEDGER_SHARDS: usize = 64;

#[repr(align(128))]
struct PaddedCount(AtomicUsize);

thread_local! {
    static IN_LEDGER_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

static NEXT_IN_LEDGER_SHARD: AtomicUsize = AtomicUsize::new(0);

/// Leaves the ledger on drop.
struct Entered<'a>(&'a AtomicUsize);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InLedger {
    fn new() -> Self {
        Self { shards: std::array::from_fn(|_| PaddedCount(AtomicUsize::new(0))), spare: AtomicUsize::new(0) }
    }

    /// Counts the calling thread in until the guard drops. A thread whose
    /// thread-locals are gone (exit) uses shard 0.
    fn enter(&self) -> Entered<'_> {
        let index = IN_LEDGER_SHARD
            .try_with(|shard| {
                if shard.get() == usize::MAX {
                    shard.set(NEXT_IN_LEDGER_SHARD.fetch_add(1, Ordering::Relaxed) % IN_LEDGER_SHARDS);
                }
                shard.get()
            })
            .unwrap_or(0);
        let count = self.shards.get(index % IN_LEDGER_SHARDS).map_or(&self.spare, |shard| &shard.0);
        count.fetch_add(1, Ordering::SeqCst);
        Entered(count)
    }

    /// Whether any thread is inside a ledger change.
    fn any(&self) -> bool {
        self.shards.iter().map(|shard| &shard.0).chain([&self.spare]).any(|count| count.load(Ordering::SeqCst) != 0)
    }
}

/// Allocations by handle, sharded so that threads rarely share a lock.
pub struct Tracker {
    shards: Box<[Shard]>,
}

/// One shard of a [`Tracker`], on cache lines of its own: a lock and its
/// map take about 56 bytes, so unpadded neighbours would share lines and
/// threads working on different shards would still take each other's lines.
#[repr(align(128))]
struct Shard(Mutex<Map>);

/// Bumped whenever a context of this process may have been destroyed.
static CONTEXT_GENERATION: AtomicU64 = AtomicU64::new(0);

#[derive(Clone, Copy)]
struct LastContext {
    ctx: usize,
    cu_device: CUdevice,
    generation: u64,
}

thread_local! {
    static LAST_CONTEXT: Cell<LastContext> =
        const { Cell::new(LastContext { ctx: 0, cu_device: 0, generation: u64::MAX }) };
}

fn contexts_changed() {
    CONTEXT_GENERATION.fetch_add(1, Ordering::AcqRel);
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Tracker {
    pub fn new() -> Self {
        Self { shards: (0..SHARDS).map(|_| Shard(Mutex::new(Map::default()))).collect() }
    }

    fn shard(&self, key: u64) -> Option<&Mutex<Map>> {
        let index = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize;
        self.shards.get(index).map(|shard| &shard.0)
    }

    /// Remembers `key`; returns the charge it replaces (a handle the driver
    /// reused without our seeing its free).
    pub fn insert(&self, key: u64, charge: Charge) -> Option<Charge> {
        self.shard(key).and_then(|s| lock(s).insert(key, charge))
    }

    pub fn remove(&self, key: u64) -> Option<Charge> {
        self.shard(key).and_then(|s| lock(s).remove(&key))
    }

    /// Removes every allocation made in context `ctx`.
    pub fn remove_context(&self, ctx: usize) -> Vec<Charge> {
        let mut removed = Vec::new();
        for Shard(shard) in self.shards.iter() {
            lock(shard).retain(|_, charge| {
                if charge.ctx == ctx {
                    removed.push(*charge);
                    false
                } else {
                    true
                }
            });
        }
        removed
    }
}

impl Default for Tracker {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Clone, Copy, Debug)]
struct ContextRecord {
    ctx: usize,
    ledger_index: usize,
    charged_bytes: u64,
}

#[derive(Default)]
struct Primary {
    retains: u32,
    ctx: usize,
    charged_bytes: u64,
    charged: bool,
}

/// A `cuMemCreate` handle: its memory lives while the handle is referenced
/// (the create and each `cuMemRetainAllocationHandle`, until matching
/// `cuMemRelease`s) or mapped anywhere; the driver frees it when the last
/// of both goes.
#[derive(Clone, Copy, Debug)]
struct VmmHandle {
    charge: Charge,
    refs: u32,
    mappings: u32,
}

impl VmmHandle {
    fn dead(&self) -> bool {
        self.refs == 0 && self.mappings == 0
    }
}

/// The VMM handles of this process and where they are mapped.
#[derive(Default)]
struct Vmm {
    handles: HashMap<u64, VmmHandle>,
    /// Mapped address → (handle, size).
    mappings: BTreeMap<u64, (u64, u64)>,
}

/// A `cuMemFreeAsync` the driver accepted but whose stream has not reached
/// it yet: the memory is still the application's until `event` completes.
#[derive(Clone, Copy, Debug)]
struct PendingFree {
    id: u64,
    /// The stream, normalised ([`stream_key`]).
    stream: u64,
    /// Recorded right after the free; null when none could be recorded.
    event: usize,
    /// What is still charged for it (less what a later allocation on the
    /// same stream took over).
    charge: Charge,
}

/// How many `cuMemFreeAsync`s of this process wait for their stream
/// (`Runtime::pending_frees.len()`). A static, not a field, so that the
/// synchronisation hooks decide with one load, without looking the runtime
/// up, that there is nothing to do.
static PENDING_FREES: AtomicUsize = AtomicUsize::new(0);

/// Whether any `cuMemFreeAsync` of this process waits for its stream.
#[inline]
pub fn has_pending_frees() -> bool {
    PENDING_FREES.load(Ordering::Acquire) != 0
}

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD`.
const STREAM_LEGACY: u64 = 0x1;
const STREAM_PER_THREAD: u64 = 0x2;

/// One key per stream: the null stream is the legacy default stream, or the
/// per-thread one for `_ptsz` callers.
fn stream_key(stream: CUstream, per_thread: bool) -> u64 {
    match stream as u64 {
        0 if per_thread => STREAM_PER_THREAD,
        0 => STREAM_LEGACY,
        other => other,
    }
}

/// Everything the shim knows in a process that is accounting.
pub struct Runtime {
    pub ledger: Ledger,
    pub slot: Slot,
    pub devices: Vec<Device>,
    /// The process that built this runtime (a forked child must not use it).
    pub owner_pid: u32,
    pointers: Tracker,
    vmm: Mutex<Vmm>,
    arrays: Tracker,
    contexts: Mutex<Vec<ContextRecord>>,
    primaries: Vec<Mutex<Primary>>,
    pending_frees: Mutex<Vec<PendingFree>>,
    next_pending_id: AtomicU64,
    /// Set by the library destructor: from then on nothing is admitted.
    exiting: AtomicBool,
    /// Threads inside a ledger reservation or release now; the destructor
    /// waits for them so that exit never cuts one between its two ledger
    /// steps (tenant counter and slot), which would leave bytes counted for
    /// the tenant that no slot holds.
    in_ledger: InLedger,
}

/// The granularity in which the driver hands out `cuMemAlloc*`, stream-
/// ordered and array memory: 512 bytes (pitched rows use the same, see
/// [`pitch_estimate_bytes`]). A smaller charge would let the device hold
/// more than the cap (up to 511 bytes an allocation).
pub const ALLOCATION_GRANULARITY_BYTES: u64 = 512;

/// What an allocation of `bytes` takes on the device: rounded up to
/// [`ALLOCATION_GRANULARITY_BYTES`].
pub fn allocation_bytes(bytes: u64) -> u64 {
    bytes.div_ceil(ALLOCATION_GRANULARITY_BYTES).saturating_mul(ALLOCATION_GRANULARITY_BYTES)
}

/// Bytes a pitched allocation of `width` bytes per row is assumed to take
/// before the driver says its pitch: rows rounded up to 512 bytes, the
/// largest pitch alignment current GPUs use. Corrected after the call.
pub fn pitch_estimate_bytes(width: u64, height: u64) -> u64 {
    width.div_ceil(512).saturating_mul(512).saturating_mul(height)
}

/// What `cuMemGetInfo`/NVML report under a cap: total is the cap (never more
/// than the device has), free is what the tenant may still reserve, never
/// more than is physically free. Nothing underflows.
pub fn capped_view(limit_bytes: u64, used_bytes: u64, free_bytes: u64, total_bytes: u64) -> (u64, u64) {
    if limit_bytes == UNLIMITED {
        return (free_bytes, total_bytes);
    }
    let total = limit_bytes.min(total_bytes);
    let free = total.saturating_sub(used_bytes).min(free_bytes);
    (free, total)
}

impl Runtime {
    pub fn new(ledger: Ledger, slot: Slot, devices: Vec<Device>) -> Self {
        let primaries = devices.iter().map(|_| Mutex::new(Primary::default())).collect();
        // A forked child's copy counts its parent's pending frees, which
        // are not its own.
        PENDING_FREES.store(0, Ordering::Release);
        Self {
            ledger,
            slot,
            devices,
            owner_pid: std::process::id(),
            pointers: Tracker::new(),
            vmm: Mutex::new(Vmm::default()),
            arrays: Tracker::new(),
            contexts: Mutex::new(Vec::new()),
            primaries,
            pending_frees: Mutex::new(Vec::new()),
            next_pending_id: AtomicU64::new(0),
            exiting: AtomicBool::new(false),
            in_ledger: InLedger::new(),
        }
    }

    fn tracker(&self, kind: Kind) -> &Tracker {
        match kind {
            Kind::Pointer => &self.pointers,
            Kind::Array => &self.arrays,
        }
    }

    pub fn device_by_handle(&self, cu_device: CUdevice) -> Option<&Device> {
        self.devices.iter().find(|d| d.cu_device == cu_device)
    }

    pub fn device_by_ordinal(&self, ordinal: i32) -> Option<&Device> {
        self.devices.iter().find(|d| d.ordinal == ordinal)
    }

    pub fn device_by_uuid(&self, uuid: &[u8; 16]) -> Option<&Device> {
        self.devices.iter().find(|d| &d.uuid == uuid)
    }

    /// The calling thread's context and its device. A context's device never
    /// changes, so each thread remembers the last (context, device) pair it
    /// asked about; any context destruction in the process invalidates every
    /// thread's memory (a handle may be reused by a context on another device).
    fn current(&self) -> Result<(usize, &Device), CUresult> {
        let ctx = real::current_context()?;
        if ctx.is_null() {
            return Err(CUDA_ERROR_INVALID_CONTEXT);
        }
        let ctx = ctx as usize;
        let generation = CONTEXT_GENERATION.load(Ordering::Acquire);
        let cached = LAST_CONTEXT
            .try_with(Cell::get)
            .ok()
            .filter(|c| c.ctx == ctx && c.generation == generation)
            .map(|c| c.cu_device);
        let cu_device = match cached {
            Some(cu_device) => cu_device,
            None => {
                let cu_device = real::current_device()?;
                let _ = LAST_CONTEXT.try_with(|c| c.set(LastContext { ctx, cu_device, generation }));
                cu_device
            }
        };
        let device = self.device_by_handle(cu_device).ok_or(CUDA_ERROR_INVALID_DEVICE)?;
        Ok((ctx, device))
    }

    /// Reserves `bytes` on ledger device `dev`; on refusal reclaims dead
    /// processes and tries once more.
    pub fn reserve(&self, dev: usize, bytes: u64) -> Result<(), Denied> {
        let _entered = self.in_ledger.enter();
        if self.exiting.load(Ordering::SeqCst) {
            Err(Denied { used_bytes: 0, limit_bytes: 0, requested_bytes: bytes })
        } else {
            self.reserve_in_ledger(dev, bytes)
        }
    }

    /// Exit: refuses every later reservation and release and waits (up to
    /// `limit`) for those in progress, so that none is cut between its
    /// ledger steps. `true` when none is left (the first caller only): the
    /// slot may then be released. `false` when one is still running: the
    /// slot must be left alone, to be reclaimed once the process is gone.
    /// (Every thread adds itself to `in_ledger` before it reads `exiting`,
    /// and we set `exiting` before we read `in_ledger`, all sequentially
    /// consistent: a thread either sees `exiting` or is seen here.)
    pub fn stop_admitting(&self, limit: std::time::Duration) -> bool {
        if self.exiting.swap(true, Ordering::SeqCst) {
            return false;
        }
        let deadline = std::time::Instant::now() + limit;
        while self.in_ledger.any() {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        }
        true
    }

    fn reserve_in_ledger(&self, dev: usize, bytes: u64) -> Result<(), Denied> {
        self.poll_pending_frees();
        let Err(denied) = self.ledger.try_reserve_uncounted(&self.slot, dev, bytes) else { return Ok(()) };
        let reclaimed = self.ledger.reclaim_dead();
        for dead in &reclaimed {
            info!("reclaimed slot {} of dead process {}: {:?}", dead.slot_index, dead.pid, dead.bytes_per_device);
        }
        let result = if reclaimed.is_empty() { Err(denied) } else { self.ledger.try_reserve_uncounted(&self.slot, dev, bytes) };
        if let Err(denied) = &result {
            // One refused allocation, counted once however often it was tried.
            self.ledger.count_denied(dev);
            debug!("denied {denied} on ledger device {dev}");
        }
        result
    }

    pub fn release(&self, dev: usize, bytes: u64) {
        let _entered = self.in_ledger.enter();
        // Once the destructor has begun, the slot is drained (or left to
        // reclaim) as a whole: no change may touch it after the destructor
        // stopped waiting, or exit could cut it between its two steps.
        if !self.exiting.load(Ordering::SeqCst) {
            self.ledger.release(&self.slot, dev, bytes);
        }
    }

    fn remember(&self, kind: Kind, key: u64, charge: Charge) {
        if let Some(stale) = self.tracker(kind).insert(key, charge) {
            self.release(stale.ledger_index, stale.bytes);
        }
    }

    /// An allocation of `bytes` in the current context. `call` makes it and
    /// returns its handle.
    pub fn alloc(&self, kind: Kind, bytes: u64, call: impl FnOnce() -> Result<u64, CUresult>) -> CUresult {
        let (ctx, device) = match self.current() {
            Ok(found) => found,
            Err(r) => return r,
        };
        let dev = device.ledger_index;
        let bytes = allocation_bytes(bytes);
        if self.reserve(dev, bytes).is_err() {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        match call() {
            Ok(key) => {
                self.remember(kind, key, Charge { ledger_index: dev, bytes, ctx });
                CUDA_SUCCESS
            }
            Err(r) => {
                self.release(dev, bytes);
                r
            }
        }
    }

    /// `cuMemAllocPitch`: charges the driver's pitch × height. `call`
    /// returns (pointer, pitch).
    pub fn alloc_pitch(&self, width: u64, height: u64, call: impl FnOnce() -> Result<(u64, u64), CUresult>) -> CUresult {
        let (ctx, device) = match self.current() {
            Ok(found) => found,
            Err(r) => return r,
        };
        let dev = device.ledger_index;
        let estimate = pitch_estimate_bytes(width, height);
        if self.reserve(dev, estimate).is_err() {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        let (ptr, pitch_bytes) = match call() {
            Ok(found) => found,
            Err(r) => {
                self.release(dev, estimate);
                return r;
            }
        };
        let actual = pitch_bytes.saturating_mul(height);
        if actual > estimate {
            if self.reserve(dev, actual - estimate).is_err() {
                let _ = real::mem_free(ptr);
                self.release(dev, estimate);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
        } else {
            self.release(dev, estimate - actual);
        }
        self.remember(Kind::Pointer, ptr, Charge { ledger_index: dev, bytes: actual, ctx });
        CUDA_SUCCESS
    }

    /// The known device that memory at `placement` is charged to, `None`
    /// for host memory (not charged), or the refusal, with one warning
    /// line, when the shim cannot tie it to a device it knows (see
    /// [`placement`]).
    fn placed_device(&self, placement: Placement, call_name: &str) -> Result<Option<&Device>, CUresult> {
        let unattributable = |location_type| {
            warn!(
                "{call_name} at {} ({location_type}) refused: gpuslice cannot tie that location to one device, so its memory could not be charged to a cap",
                placement::type_name(location_type)
            );
            Err(CUDA_ERROR_NOT_SUPPORTED)
        };
        match placement {
            Placement::Host => Ok(None),
            Placement::Device(ordinal) => match self.device_by_ordinal(ordinal) {
                Some(device) => Ok(Some(device)),
                None => {
                    warn!("{call_name} on device {ordinal} refused: this process does not see that device, so its memory could not be charged to a cap");
                    Err(CUDA_ERROR_INVALID_DEVICE)
                }
            },
            // Callers charge an unplaced managed pool where its work runs;
            // one that reaches here has no device either.
            Placement::Unplaced => unattributable(CU_MEM_LOCATION_TYPE_INVALID),
            Placement::Unattributable(location_type) => unattributable(location_type),
        }
    }

    /// `cuMemCreate` of `bytes` at `location`: charged to the device it
    /// names, passed through for host memory, refused where no known device
    /// can be charged. `call` returns the handle.
    pub fn alloc_on_device(&self, location: CUmemLocation, bytes: u64, call: impl FnOnce() -> Result<u64, CUresult>) -> CUresult {
        let device = match self.placed_device(placement::of_allocation(location), "cuMemCreate") {
            Ok(Some(device)) => device,
            Ok(None) => return call().err().unwrap_or(CUDA_SUCCESS),
            Err(r) => return r,
        };
        let dev = device.ledger_index;
        if self.reserve(dev, bytes).is_err() {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        match call() {
            Ok(key) => {
                let handle = VmmHandle { charge: Charge { ledger_index: dev, bytes, ctx: 0 }, refs: 1, mappings: 0 };
                // A value the driver reused was freed without our seeing it.
                if let Some(stale) = lock(&self.vmm).handles.insert(key, handle) {
                    self.release(stale.charge.ledger_index, stale.charge.bytes);
                }
                CUDA_SUCCESS
            }
            Err(r) => {
                self.release(dev, bytes);
                r
            }
        }
    }

    /// Any free: forwards, and releases what was charged if the driver freed it.
    pub fn free(&self, kind: Kind, key: u64, call: impl FnOnce() -> CUresult) -> CUresult {
        let charge = self.tracker(kind).remove(key);
        let r = call();
        if let Some(charge) = charge {
            if r == CUDA_SUCCESS {
                self.release(charge.ledger_index, charge.bytes);
            } else {
                self.remember(kind, key, charge);
            }
        }
        r
    }

    /// The context a stream belongs to and its device: the stream's own
    /// (`cuStreamGetCtx`); the null, legacy and per-thread streams, or a
    /// driver without `cuStreamGetCtx`, mean the calling thread's context.
    fn stream_context(&self, stream: CUstream, per_thread: bool) -> Result<(usize, &Device), CUresult> {
        if matches!(stream as u64, 0 | STREAM_LEGACY | STREAM_PER_THREAD) {
            return self.current();
        }
        let ctx = match real::stream_context(stream, per_thread) {
            Ok(ctx) if !ctx.is_null() => ctx,
            Ok(_) | Err(CUDA_ERROR_NOT_FOUND) => return self.current(),
            Err(r) => return Err(r),
        };
        let key = ctx as usize;
        let known = lock(&self.contexts).iter().find(|c| c.ctx == key).map(|c| c.ledger_index).or_else(|| {
            self.devices.iter().zip(&self.primaries).find_map(|(d, p)| {
                let p = lock(p);
                (p.charged && p.ctx == key).then_some(d.ledger_index)
            })
        });
        let device = match known {
            Some(index) => self.devices.iter().find(|d| d.ledger_index == index),
            None => self.device_by_handle(real::context_device(ctx)?),
        };
        device.map(|d| (key, d)).ok_or(CUDA_ERROR_INVALID_DEVICE)
    }

    /// `cuMemAllocAsync` and `cuMemAllocFromPoolAsync` on `stream`: charged
    /// to the stream's context and device. A pending free on the same stream
    /// is not counted as room: a driver may reuse its bytes in stream order,
    /// but one that takes new memory at the call (simgpu, or a pool that
    /// must grow) holds both until the stream reaches the free.
    ///
    /// `pool` (`cuMemAllocFromPoolAsync`): the memory comes from the pool's
    /// device (`CU_MEMPOOL_ATTR_LOCATION_*`), which is charged even when the
    /// stream is on another device; a driver that refuses the pairing gets
    /// the last word (the reservation is rolled back with its error). A
    /// host pool is not charged; a managed pool without a location is
    /// charged to the stream's device; a pool on a device this process does
    /// not see, or whose location the driver cannot tell, is refused.
    pub fn alloc_async(
        &self,
        bytes: u64,
        stream: CUstream,
        per_thread: bool,
        pool: Option<CUmemoryPool>,
        call: impl FnOnce() -> Result<u64, CUresult>,
    ) -> CUresult {
        let (ctx, stream_device) = match self.stream_context(stream, per_thread) {
            Ok(found) => found,
            Err(r) => return r,
        };
        let device = match pool {
            None => stream_device,
            Some(pool) => {
                let location = match real::pool_location(pool) {
                    Ok(location) => location,
                    Err(r) => {
                        warn!("cuMemAllocFromPoolAsync refused: the driver cannot say where the pool's memory lives ({r}), so it could not be charged to a cap");
                        return r;
                    }
                };
                match placement::of_pool(location) {
                    Placement::Unplaced => stream_device,
                    placed => match self.placed_device(placed, "cuMemAllocFromPoolAsync") {
                        Ok(Some(device)) => device,
                        Ok(None) => return call().err().unwrap_or(CUDA_SUCCESS),
                        Err(r) => return r,
                    },
                }
            }
        };
        let dev = device.ledger_index;
        let bytes = allocation_bytes(bytes);
        if self.reserve(dev, bytes).is_err() {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        match call() {
            Ok(ptr) => {
                self.remember(Kind::Pointer, ptr, Charge { ledger_index: dev, bytes, ctx });
                CUDA_SUCCESS
            }
            Err(r) => {
                self.release(dev, bytes);
                r
            }
        }
    }

    /// `cuMemFreeAsync`: the charge stays until the stream reaches the free.
    /// An event recorded right after it tells when; a stream whose event
    /// cannot be recorded releases at once.
    pub fn free_async(&self, ptr: u64, stream: CUstream, per_thread: bool, call: impl FnOnce() -> CUresult) -> CUresult {
        let charge = self.pointers.remove(ptr);
        let r = call();
        let Some(charge) = charge else { return r };
        if r != CUDA_SUCCESS {
            self.remember(Kind::Pointer, ptr, charge);
            return r;
        }
        let event_ctx = match self.stream_context(stream, per_thread) {
            Ok((ctx, _)) => ctx as CUcontext,
            Err(_) => charge.ctx as CUcontext,
        };
        match real::record_event(event_ctx, stream, per_thread) {
            Ok(event) => {
                let id = self.next_pending_id.fetch_add(1, Ordering::Relaxed);
                let mut pending = lock(&self.pending_frees);
                pending.push(PendingFree { id, stream: stream_key(stream, per_thread), event: event as usize, charge });
                PENDING_FREES.store(pending.len(), Ordering::Release);
            }
            Err(e) => {
                debug!("no event after cuMemFreeAsync ({e}); its {} bytes are released now", charge.bytes);
                self.release(charge.ledger_index, charge.bytes);
            }
        }
        r
    }

    /// Releases the pending frees whose stream has reached them. Streams run
    /// in order, so only each stream's oldest unfinished free is asked about.
    /// No lock is held while the driver answers.
    pub fn poll_pending_frees(&self) {
        if !has_pending_frees() {
            return;
        }
        let snapshot: Vec<(u64, u64, usize)> = lock(&self.pending_frees).iter().map(|p| (p.id, p.stream, p.event)).collect();
        let mut waiting: Vec<u64> = Vec::new();
        let mut done: Vec<u64> = Vec::new();
        for (id, stream, event) in snapshot {
            if waiting.contains(&stream) {
                continue;
            }
            if real::event_query(event as CUevent) == CUDA_ERROR_NOT_READY {
                waiting.push(stream);
            } else {
                // Reached, or the event is gone with its context or stream:
                // either way the driver no longer holds the memory for it.
                done.push(id);
            }
        }
        if done.is_empty() {
            return;
        }
        let finished: Vec<PendingFree> = {
            let mut pending = lock(&self.pending_frees);
            let mut finished = Vec::new();
            pending.retain(|p| {
                if done.contains(&p.id) {
                    finished.push(*p);
                    false
                } else {
                    true
                }
            });
            PENDING_FREES.store(pending.len(), Ordering::Release);
            finished
        };
        for p in finished {
            real::event_destroy(p.event as CUevent);
            self.release(p.charge.ledger_index, p.charge.bytes);
        }
    }

    /// `cuMemRelease`: drops one reference; the charge goes when the handle
    /// is neither referenced nor mapped, which is when the driver frees it.
    /// Decided before the call (the driver may hand the value out again the
    /// moment it frees it) and undone if the driver refuses.
    pub fn release_vmm(&self, key: u64, call: impl FnOnce() -> CUresult) -> CUresult {
        let before = {
            let mut vmm = lock(&self.vmm);
            let before = vmm.handles.get(&key).copied();
            if let Some(mut handle) = before {
                handle.refs = handle.refs.saturating_sub(1);
                if handle.dead() {
                    vmm.handles.remove(&key);
                } else {
                    vmm.handles.insert(key, handle);
                }
            }
            before
        };
        let r = call();
        let Some(before) = before else { return r };
        if r != CUDA_SUCCESS {
            lock(&self.vmm).handles.insert(key, before);
        } else if before.refs <= 1 && before.mappings == 0 {
            self.release(before.charge.ledger_index, before.charge.bytes);
        }
        r
    }

    /// `cuMemRetainAllocationHandle`: one more reference to a handle.
    pub fn retain_vmm(&self, call: impl FnOnce() -> Result<u64, CUresult>) -> CUresult {
        match call() {
            Ok(key) => {
                if let Some(handle) = lock(&self.vmm).handles.get_mut(&key) {
                    handle.refs = handle.refs.saturating_add(1);
                }
                CUDA_SUCCESS
            }
            Err(r) => r,
        }
    }

    /// `cuMemMap` of `handle` at `va`: a mapped handle's memory stays.
    pub fn map_vmm(&self, va: u64, size: u64, key: u64, call: impl FnOnce() -> CUresult) -> CUresult {
        let r = call();
        if r == CUDA_SUCCESS {
            let mut vmm = lock(&self.vmm);
            if let Some(handle) = vmm.handles.get_mut(&key) {
                handle.mappings = handle.mappings.saturating_add(1);
                vmm.mappings.insert(va, (key, size));
            }
        }
        r
    }

    /// `cuMemUnmap` of `[va, va + size)`: every mapping that starts there is
    /// gone; a handle that is neither mapped nor referenced is freed.
    /// Decided after the call: a mapping keeps its handle's value from being
    /// reused until the driver unmaps it, and a value reused right after
    /// replaced our record (releasing its charge) before we look.
    pub fn unmap_vmm(&self, va: u64, size: u64, call: impl FnOnce() -> CUresult) -> CUresult {
        let r = call();
        if r != CUDA_SUCCESS {
            return r;
        }
        let mut freed = Vec::new();
        {
            let mut vmm = lock(&self.vmm);
            let end = va.saturating_add(size.max(1));
            let starts: Vec<u64> = vmm.mappings.range(va..end).map(|(start, _)| *start).collect();
            for start in starts {
                let Some((key, _)) = vmm.mappings.remove(&start) else { continue };
                let Some(handle) = vmm.handles.get_mut(&key) else { continue };
                handle.mappings = handle.mappings.saturating_sub(1);
                if handle.dead() {
                    if let Some(gone) = vmm.handles.remove(&key) {
                        freed.push(gone.charge);
                    }
                }
            }
        }
        for charge in freed {
            self.release(charge.ledger_index, charge.bytes);
        }
        r
    }

    fn release_context_memory(&self, ctx: usize) {
        for tracker in [&self.pointers, &self.arrays] {
            for charge in tracker.remove_context(ctx) {
                self.release(charge.ledger_index, charge.bytes);
            }
        }
        // Pending frees of memory of that context: gone with it (their
        // events went with the context too, so they are not destroyed).
        let gone: Vec<Charge> = {
            let mut pending = lock(&self.pending_frees);
            let mut gone = Vec::new();
            pending.retain(|p| {
                if p.charge.ctx == ctx {
                    gone.push(p.charge);
                    false
                } else {
                    true
                }
            });
            PENDING_FREES.store(pending.len(), Ordering::Release);
            gone
        };
        for charge in gone {
            self.release(charge.ledger_index, charge.bytes);
        }
    }

    fn has_context_on(&self, dev: usize) -> bool {
        lock(&self.contexts).iter().any(|c| c.ledger_index == dev)
            || self
                .devices
                .iter()
                .zip(&self.primaries)
                .any(|(d, p)| d.ledger_index == dev && lock(p).charged)
    }

    /// Charges a new context on `device` around `create`. Reserves the
    /// tenant's known overhead first; if none is known and this is the
    /// process's first context there, measures it after creation.
    fn charge_context(&self, device: &Device, first_here: bool, create: impl FnOnce() -> Result<usize, CUresult>) -> Result<(usize, u64), CUresult> {
        let dev = device.ledger_index;
        let known_bytes = self.ledger.context_overhead_bytes(dev);
        if self.reserve(dev, known_bytes).is_err() {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        let probe = if known_bytes == 0 && first_here { crate::overhead::prepare(device) } else { None };
        let ctx = match create() {
            Ok(ctx) => ctx,
            Err(r) => {
                self.release(dev, known_bytes);
                return Err(r);
            }
        };
        let Some(probe) = probe else { return Ok((ctx, known_bytes)) };
        let Some(measured_bytes) = crate::overhead::measure(device, probe) else { return Ok((ctx, 0)) };
        info!("context overhead on device {} measured at {measured_bytes} bytes", device.ordinal);
        // Another process of the tenant may have recorded it meanwhile: theirs stands.
        let recorded_bytes = self.ledger.context_overhead_bytes(dev);
        let bytes = if recorded_bytes != 0 { recorded_bytes } else { measured_bytes };
        if recorded_bytes == 0 {
            self.ledger.set_context_overhead_bytes(dev, measured_bytes);
        }
        if self.reserve(dev, bytes).is_err() {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
        Ok((ctx, bytes))
    }

    /// `cuCtxCreate*`: `create` makes the context and returns it.
    pub fn create_context(&self, cu_device: CUdevice, create: impl FnOnce() -> Result<CUcontext, CUresult>) -> CUresult {
        let Some(device) = self.device_by_handle(cu_device) else {
            return create().err().unwrap_or(CUDA_SUCCESS);
        };
        let first_here = !self.has_context_on(device.ledger_index);
        let mut created: CUcontext = core::ptr::null_mut();
        let charged = self.charge_context(device, first_here, || {
            created = create()?;
            Ok(created as usize)
        });
        match charged {
            Ok((ctx, bytes)) => {
                lock(&self.contexts).push(ContextRecord { ctx, ledger_index: device.ledger_index, charged_bytes: bytes });
                CUDA_SUCCESS
            }
            Err(r) => {
                if !created.is_null() {
                    let _ = real::ctx_destroy(created);
                }
                r
            }
        }
    }

    /// `cuCtxDestroy*`.
    pub fn destroy_context(&self, ctx: CUcontext, destroy: impl FnOnce() -> CUresult) -> CUresult {
        let key = ctx as usize;
        let record = {
            let mut contexts = lock(&self.contexts);
            contexts.iter().position(|c| c.ctx == key).map(|i| contexts.swap_remove(i))
        };
        let r = destroy();
        contexts_changed();
        if let Some(record) = record {
            if r == CUDA_SUCCESS {
                self.release(record.ledger_index, record.charged_bytes);
                self.release_context_memory(key);
            } else {
                lock(&self.contexts).push(record);
            }
        }
        r
    }

    fn primary(&self, cu_device: CUdevice) -> Option<(&Device, &Mutex<Primary>)> {
        self.devices.iter().zip(&self.primaries).find(|(d, _)| d.cu_device == cu_device)
    }

    /// `cuDevicePrimaryCtxRetain`: the retain that brings the primary
    /// context into being is charged its overhead.
    pub fn retain_primary(&self, cu_device: CUdevice, retain: impl FnOnce() -> Result<CUcontext, CUresult>) -> CUresult {
        let Some((device, primary)) = self.primary(cu_device) else {
            return retain().err().unwrap_or(CUDA_SUCCESS);
        };
        let first_here = !self.has_context_on(device.ledger_index);
        let mut p = lock(primary);
        if p.charged {
            return match retain() {
                Ok(_) => {
                    p.retains = p.retains.saturating_add(1);
                    CUDA_SUCCESS
                }
                Err(r) => r,
            };
        }
        let mut retained = false;
        let charged = self.charge_context(device, first_here, || {
            let ctx = retain()?;
            retained = true;
            Ok(ctx as usize)
        });
        match charged {
            Ok((ctx, bytes)) => {
                *p = Primary { retains: p.retains.saturating_add(1), ctx, charged_bytes: bytes, charged: true };
                CUDA_SUCCESS
            }
            Err(r) => {
                if retained {
                    // Created but over the cap: give the retain back.
                    let _ = real::primary_ctx_release(cu_device);
                }
                r
            }
        }
    }

    fn uncharge_primary(&self, dev: usize, p: &mut Primary) {
        contexts_changed();
        if p.charged {
            p.charged = false;
            self.release(dev, p.charged_bytes);
            self.release_context_memory(p.ctx);
        }
    }

    /// `cuDevicePrimaryCtxRelease*`: the last release frees the context.
    pub fn release_primary(&self, cu_device: CUdevice, release: impl FnOnce() -> CUresult) -> CUresult {
        let Some((device, primary)) = self.primary(cu_device) else { return release() };
        let mut p = lock(primary);
        let r = release();
        if r == CUDA_SUCCESS {
            p.retains = p.retains.saturating_sub(1);
            if p.retains == 0 {
                self.uncharge_primary(device.ledger_index, &mut p);
            }
        }
        r
    }

    /// `cuDevicePrimaryCtxReset*`: the context, its memory and its retains
    /// are gone; the next retain charges again.
    pub fn reset_primary(&self, cu_device: CUdevice, reset: impl FnOnce() -> CUresult) -> CUresult {
        let Some((device, primary)) = self.primary(cu_device) else { return reset() };
        let mut p = lock(primary);
        let r = reset();
        if r == CUDA_SUCCESS {
            // The driver drops every retain with the context.
            p.retains = 0;
            self.uncharge_primary(device.ledger_index, &mut p);
        }
        r
    }

    /// The cap and usage of ledger device `dev`, for views.
    pub fn limit_and_used(&self, dev: usize) -> (u64, u64) {
        self.poll_pending_frees();
        (self.ledger.memory_limit_bytes(dev), self.ledger.used_bytes(dev))
    }

    /// `cuMemGetInfo_v2` of the current device, given the driver's figures.
    pub fn mem_info_view(&self, free_bytes: u64, total_bytes: u64) -> (u64, u64) {
        let Ok(device) = real::current_device() else { return (free_bytes, total_bytes) };
        let Some(device) = self.device_by_handle(device) else { return (free_bytes, total_bytes) };
        let (limit_bytes, used_bytes) = self.limit_and_used(device.ledger_index);
        capped_view(limit_bytes, used_bytes, free_bytes, total_bytes)
    }

    /// `cuDeviceTotalMem_v2` of `cu_device`, given the driver's figure.
    pub fn total_mem_view(&self, cu_device: CUdevice, total_bytes: u64) -> u64 {
        let Some(device) = self.device_by_handle(cu_device) else { return total_bytes };
        let limit_bytes = self.ledger.memory_limit_bytes(device.ledger_index);
        if limit_bytes == UNLIMITED {
            total_bytes
        } else {
            limit_bytes.min(total_bytes)
        }
    }
}

/// Bytes per element of a CUDA array format, channels included; `None` for
/// formats whose size the shim does not know.
pub fn element_bytes(format: u32, channels: u32) -> Option<u64> {
    let per_channel: u64 = match format {
        0x01 | 0x08 => 1,
        0x02 | 0x09 | 0x10 => 2,
        0x03 | 0x0a | 0x20 => 4,
        0xc0 | 0xc6 => return Some(1),
        0xc1 | 0xc3 | 0xc7 | 0xc9 => return Some(2),
        0xc2 | 0xc4 | 0xc8 | 0xca => return Some(4),
        0xc5 | 0xcb => return Some(8),
        _ => return None,
    };
    Some(per_channel * u64::from(channels.max(1)))
}

/// Bytes charged for an array: width × height × depth elements (0 counts as
/// 1). Formats the shim does not know are charged 16 bytes an element, the
/// widest element CUDA arrays have, so an unknown format can only be
/// over-charged.
pub fn array_bytes(width: u64, height: u64, depth: u64, format: u32, channels: u32) -> u64 {
    let element = element_bytes(format, channels).unwrap_or(16);
    width.max(1).saturating_mul(height.max(1)).saturating_mul(depth.max(1)).saturating_mul(element)
}

/// Bytes of a mipmapped array: the sum of its levels, each half the last
/// in every dimension the array has (never below 1).
pub fn mipmapped_bytes(width: u64, height: u64, depth: u64, format: u32, channels: u32, levels: u32) -> u64 {
    let mut total: u64 = 0;
    for level in 0..levels.clamp(1, 64) {
        let shrink = |d: u64| if d == 0 { 0 } else { (d >> level).max(1) };
        total = total.saturating_add(array_bytes(shrink(width), shrink(height), shrink(depth), format, channels));
    }
    total
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn view_is_the_cap_and_never_underflows() {
        let gib = 1u64 << 30;
        assert_eq!(capped_view(UNLIMITED, 5, 10 * gib, 16 * gib), (10 * gib, 16 * gib));
        assert_eq!(capped_view(gib, gib / 4, 10 * gib, 16 * gib), (3 * gib / 4, gib));
        // Usage above the cap (the cap was lowered): free is 0, not 17 TB.
        assert_eq!(capped_view(gib, 2 * gib, 10 * gib, 16 * gib), (0, gib));
        // Physically less free than the cap allows.
        assert_eq!(capped_view(4 * gib, 0, gib, 16 * gib), (gib, 4 * gib));
        // A cap above the device: the device.
        assert_eq!(capped_view(32 * gib, 0, 16 * gib, 16 * gib), (16 * gib, 16 * gib));
    }

    #[test]
    fn pitch_estimate_rounds_rows_up() {
        assert_eq!(pitch_estimate_bytes(1, 10), 5120);
        assert_eq!(pitch_estimate_bytes(512, 3), 1536);
        assert_eq!(pitch_estimate_bytes(513, 2), 2048);
        assert_eq!(pitch_estimate_bytes(u64::MAX, 2), u64::MAX);
    }

    #[test]
    fn array_sizes() {
        assert_eq!(array_bytes(100, 0, 0, 0x20, 4), 1600);
        assert_eq!(array_bytes(10, 10, 10, 0x01, 1), 1000);
        assert_eq!(array_bytes(10, 10, 0, 0x10, 2), 400);
        assert_eq!(array_bytes(4, 4, 0, 0x91, 4), 256);
        // levels 8x8, 4x4, 2x2, 1x1 of 4-byte elements
        assert_eq!(mipmapped_bytes(8, 8, 0, 0x20, 1, 4), (64 + 16 + 4 + 1) * 4);
        assert_eq!(mipmapped_bytes(8, 0, 0, 0x01, 1, 10), 8 + 4 + 2 + 1 + 6);
    }

    #[test]
    fn tracker_releases_exactly_what_was_charged() {
        let t = Tracker::new();
        let c = |bytes, ctx| Charge { ledger_index: 0, bytes, ctx };
        for i in 0..1000u64 {
            assert_eq!(t.insert(i << 21, c(i, (i % 3) as usize)), None);
        }
        assert_eq!(t.remove(5 << 21), Some(c(5, 2)));
        assert_eq!(t.remove(5 << 21), None);
        let in_ctx_1 = t.remove_context(1);
        assert_eq!(in_ctx_1.len(), 333);
        assert_eq!(in_ctx_1.iter().map(|c| c.bytes).sum::<u64>(), (0..1000).filter(|i| i % 3 == 1).sum::<u64>());
        assert_eq!(t.insert(7 << 21, c(1, 0)), None);
        assert_eq!(t.insert(8 << 21, c(1, 0)), Some(c(8, 2)));
    }
}
