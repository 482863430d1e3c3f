//! Stream-ordered memory: `cuMemAllocAsync`, `cuMemAllocFromPoolAsync` and
//! `cuMemFreeAsync` (and their `_ptsz` forms).
//!
//! # What is charged: what the pools reserve
//! A stream-ordered allocation comes from a memory pool: the device's
//! current pool (`cuDeviceGetMemPool`) for `cuMemAllocAsync`, the named one
//! for `cuMemAllocFromPoolAsync`. A pool *reserves* device memory and hands
//! it out; a freed block stays reserved (up to the pool's release
//! threshold, which cuda.core sets to the maximum) and is reused by later
//! allocations in stream order. What the device has lost is the pool's
//! reserved memory, not its live allocations, so that is what the tenant
//! is charged: for each pool this process allocated from, the ledger holds
//! exactly the pool's `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT` as last read
//! (`PoolCharge::charged_bytes`), on the pool's device.
//!
//! - An allocation of `n` bytes reserves `n` (rounded as the driver rounds)
//!   before the call, then reads the pool's reserved memory and *settles*:
//!   growth is paid from that reservation (and any excess reserved more),
//!   the rest of the reservation is released. A block the driver reused
//!   costs nothing, so a pool that keeps its freed memory serves a free
//!   and a re-allocation at no extra charge.
//! - When the reservation is refused, this process's pools on that device
//!   give back what they hold unused (`cuMemPoolTrimTo(pool, 0)`: only
//!   memory whose free its stream has reached goes), are settled, and the
//!   reservation is tried again. When it is still refused and the pool
//!   holds at least `n` bytes unused, those wait for frees their streams
//!   have not reached: the allocating stream is synchronised (not while it
//!   captures a graph), the pools trimmed and settled again, and the
//!   reservation tried a last time. So a free and a re-allocation on one
//!   stream at a full cap are admitted: the freed block is either reused
//!   or given back first. Otherwise the allocation is refused with
//!   `CUDA_ERROR_OUT_OF_MEMORY`, counted as one denial.
//! - `cuMemFreeAsync` of a pool allocation changes nothing: the pool keeps
//!   the block. Pools shrink when the driver gives memory back: at a
//!   synchronisation (above the release threshold), at a trim, when a
//!   context or pool goes. The charges are settled after each stream,
//!   context or event synchronisation and each context destruction (see
//!   `hooks::sync`, [`super::contexts`]), before each view
//!   ([`super::views`]) and before any refusal ([`super::admission`]).
//!
//! - `cuMemPoolDestroy` (hooked): the driver gives the pool's unused memory
//!   back at once, and each live allocation's when it is freed. Those keep
//!   a charge of their own (their size as the driver tells it), released
//!   by their free as any pointer's; the rest of the pool's charge goes.
//!   So destroying a pool never frees the cap while its memory is held.
//!
//! Why the device never holds more for the tenant than the ledger: a pool
//! grows only inside an allocation call, and every allocation call is made
//! with `n` bytes reserved, counted as in flight for its pool
//! (`PoolCharge::in_flight_bytes`, `outstanding_bytes`), and settles after
//! it. Settlements are ordered by one lock; each pays the growth it sees,
//! whichever call made it, from what the calls in flight reserved, and
//! then retires its own `n`, releasing only what the ledger holds beyond
//! what the calls still unsettled reserved. A call that has grown the pool
//! grew it by at most its `n`, so what stays covers every call that may
//! still grow it, as long as the driver grows a pool by at most the
//! request (simgpu does): no pool passes the cap, not even for the length
//! of a call, and no call is refused for another's growth. A driver that
//! grows a pool by more (real pools grow in larger chunks) is charged the
//! excess as it appears; when the cap cannot take it the allocation is
//! undone (freed on its stream, the stream synchronised, the pool trimmed
//! back to what it reserved before the call) and refused, so no pool
//! holds more than the cap allows past the call that grew it. Why the
//! ledger is not above it for long: shrinks happen only at the moments
//! listed above, and each is followed by a settlement; a pool the driver
//! no longer answers for is released whole (a destroyed one's live
//! allocations keep their own charge, see above). A trim the application
//! makes itself is seen at the next view, synchronisation or refusal: the
//! error is on the safe side.
//!
//! The price of never calling without a reservation: at a full cap, memory
//! a pool holds unused that no trim can give back (on a real driver, the
//! free part of a chunk live allocations still use) cannot serve a new
//! allocation, though the driver might have placed it there without
//! growing; the allocation is refused. With simgpu, whose pools grow by the
//! request, every unused block can be trimmed once its stream reaches it.
//!
//! The one lock held across a driver call here is the pools' list, across
//! `cuMemPoolGetAttribute` only: a query that cannot call back into the
//! shim, and the only way to keep the reads and the ledger in one order.
//!
//! A driver that cannot report a pool's reserved memory (the attribute
//! query fails) is charged per allocation instead, as any other pointer
//! (see [`super::memory`]), with the free below.
//!
//! # Frees of memory not from a pool
//! `cuMemFreeAsync` of a pointer charged per allocation (`cuMemAlloc`, or a
//! pool that cannot report) keeps the charge until the stream reaches the
//! free, as the driver keeps the memory until then: an event recorded right
//! after the free is polled (oldest per stream first) at each admission,
//! each view and after each synchronisation while frees are pending, and
//! the charge goes when it completes. A free completed without a
//! synchronisation stays charged until this process's next such call: the
//! error is on the safe side. Destroying the context drops its pending
//! frees with it (`PendingFrees::remove_context`).
//!
//! Owns `PendingFrees`, `Pools` and the process-wide count of both
//! ([`has_stream_ordered_state`]), which lets the synchronisation hooks skip
//! all of this with one load.

use abi::cuda::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::memory::allocation_bytes;
use super::{lock, Charge, Kind, Runtime};
use crate::placement::{self, Placement};
use crate::real;

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

/// The `cuMemFreeAsync`s of this process that wait for their stream.
pub(super) struct PendingFrees {
    list: Mutex<Vec<PendingFree>>,
    next_id: AtomicU64,
}

/// How many `cuMemFreeAsync`s of this process wait for their stream
/// (`PendingFrees::list.len()`). A static, not a field, so that the
/// synchronisation hooks decide with one load, without looking the runtime
/// up, that there is nothing to do.
static PENDING_FREES: AtomicUsize = AtomicUsize::new(0);

/// How many pools this process is charged for (`Pools::list.len()`), for
/// the same reason.
static CHARGED_POOLS: AtomicUsize = AtomicUsize::new(0);

/// Whether this process has stream-ordered memory a synchronisation may
/// give back: a `cuMemFreeAsync` waiting for its stream, or a pool.
#[inline]
pub fn has_stream_ordered_state() -> bool {
    PENDING_FREES.load(Ordering::Acquire) != 0 || CHARGED_POOLS.load(Ordering::Acquire) != 0
}

/// A pool this process allocated from, and what the ledger holds for it.
#[derive(Clone, Copy, Debug)]
struct PoolCharge {
    pool: usize,
    ledger_index: usize,
    /// The pool's reserved memory as last read, all of it charged.
    charged_bytes: u64,
    /// What the allocation calls from this pool that have not settled yet
    /// reserved, together: the most they may still make it grow.
    in_flight_bytes: u64,
    /// What of those reservations the ledger still holds beyond
    /// `charged_bytes`: a settlement pays the growth it finds from it,
    /// whichever call made the growth, and it is never left below what the
    /// unsettled calls may still grow by.
    outstanding_bytes: u64,
}

/// The pools this process is charged for.
pub(super) struct Pools {
    list: Mutex<Vec<PoolCharge>>,
    /// The live allocations from them, by pointer: the pool each came from
    /// and what it was asked for. Charged with their pool; what a pool's
    /// destruction leaves behind ([`Runtime::destroy_pool`]).
    live: Mutex<HashMap<u64, (usize, Charge)>>,
}

impl Pools {
    pub(super) fn new() -> Self {
        // A forked child's copy counts its parent's pools, which are not
        // its own.
        CHARGED_POOLS.store(0, Ordering::Release);
        Self { list: Mutex::new(Vec::new()), live: Mutex::new(HashMap::new()) }
    }

    /// Forgets the live pool allocations of context `ctx`: gone with it.
    pub(super) fn remove_context(&self, ctx: usize) {
        lock(&self.live).retain(|_, (_, charge)| charge.ctx != ctx);
    }
}

/// What a settlement could not charge: the pool grew past the cap.
struct Overdrawn;

/// Whether `stream` captures a graph (where nothing may synchronise it);
/// a stream the driver cannot tell about counts as capturing.
fn capturing(stream: CUstream, per_thread: bool) -> bool {
    let stream = if per_thread && stream.is_null() { CU_STREAM_PER_THREAD as CUstream } else { stream };
    real::stream_capturing(stream).unwrap_or(true)
}

/// What `pool` reserves and no live allocation uses; 0 when the driver
/// cannot tell.
fn pool_unused_bytes(pool: CUmemoryPool) -> u64 {
    let reserved = real::pool_bytes(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    let used = real::pool_bytes(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    match (reserved, used) {
        (Ok(reserved), Ok(used)) => reserved.saturating_sub(used),
        _ => 0,
    }
}

/// One key per stream: the null stream is the legacy default stream, or the
/// per-thread one for `_ptsz` callers.
fn stream_key(stream: CUstream, per_thread: bool) -> u64 {
    match stream as u64 {
        0 if per_thread => CU_STREAM_PER_THREAD as u64,
        0 => CU_STREAM_LEGACY as u64,
        other => other,
    }
}

impl PendingFrees {
    pub(super) fn new() -> Self {
        // A forked child's copy counts its parent's pending frees, which
        // are not its own.
        PENDING_FREES.store(0, Ordering::Release);
        Self { list: Mutex::new(Vec::new()), next_id: AtomicU64::new(0) }
    }

    /// Takes out the pending frees of memory of context `ctx`: gone with it
    /// (their events went with the context too, so they are not destroyed).
    pub(super) fn remove_context(&self, ctx: usize) -> Vec<Charge> {
        let mut pending = lock(&self.list);
        let gone: Vec<Charge> = pending.extract_if(.., |p| p.charge.ctx == ctx).map(|p| p.charge).collect();
        PENDING_FREES.store(pending.len(), Ordering::Release);
        gone
    }
}

impl Runtime {
    /// `cuMemAllocAsync` and `cuMemAllocFromPoolAsync` on `stream`: charged
    /// by what the pool reserves (see the module docs).
    ///
    /// `pool` (`cuMemAllocFromPoolAsync`): the memory comes from the pool's
    /// device (`CU_MEMPOOL_ATTR_LOCATION_*`), which is charged even when the
    /// stream is on another device; a driver that refuses the pairing gets
    /// the last word. A host pool is not charged; a managed pool without a
    /// location is charged to the stream's device; a pool on a device this
    /// process does not see, or whose location the driver cannot tell, is
    /// refused. Without `pool`, the stream's device's current pool.
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
        let (device, pool) = match pool {
            None => (stream_device, real::device_mem_pool(stream_device.cu_device).ok()),
            Some(pool) => {
                let location = match real::pool_location(pool) {
                    Ok(location) => location,
                    Err(r) => {
                        warn!("cuMemAllocFromPoolAsync refused: the driver cannot say where the pool's memory lives ({r}), so it could not be charged to a cap");
                        return r;
                    }
                };
                let device = match placement::of_pool(location) {
                    Placement::Unplaced => stream_device,
                    placed => match self.placed_device(placed, "cuMemAllocFromPoolAsync") {
                        Ok(Some(device)) => device,
                        Ok(None) => return call().err().unwrap_or(CUDA_SUCCESS),
                        Err(r) => return r,
                    },
                };
                (device, Some(pool))
            }
        };
        let charge = Charge { ledger_index: device.ledger_index, bytes: allocation_bytes(bytes), ctx };
        match pool.filter(|&pool| real::pool_bytes(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT).is_ok()) {
            Some(pool) => self.alloc_from_pool(pool, charge, stream, per_thread, call),
            // A driver that cannot tell what the pool reserves: charged
            // per allocation.
            None => self.charge_around(Kind::Pointer, charge, call),
        }
    }

    /// An allocation of `charge.bytes` from `pool`, charged by the pool's
    /// growth (see the module docs).
    fn alloc_from_pool(
        &self,
        pool: CUmemoryPool,
        charge: Charge,
        stream: CUstream,
        per_thread: bool,
        call: impl FnOnce() -> Result<u64, CUresult>,
    ) -> CUresult {
        let dev = charge.ledger_index;
        if self.reserve_uncounted(dev, charge.bytes).is_ok() {
            return self.call_and_settle(pool, charge, charge.bytes, stream, per_thread, call);
        }
        // The cap is full. Memory this process's pools hold unused goes
        // back first.
        self.trim_pools(dev);
        if self.reserve_uncounted(dev, charge.bytes).is_ok() {
            return self.call_and_settle(pool, charge, charge.bytes, stream, per_thread, call);
        }
        // Unused memory the pool could not give back waits for frees its
        // streams have not reached: those on this stream are reached by
        // synchronising it (never while it captures a graph).
        if pool_unused_bytes(pool) >= charge.bytes && !capturing(stream, per_thread) {
            let _ = real::stream_synchronize(stream, per_thread);
            self.trim_pools(dev);
            if self.reserve_uncounted(dev, charge.bytes).is_ok() {
                return self.call_and_settle(pool, charge, charge.bytes, stream, per_thread, call);
            }
        }
        self.count_denied(dev);
        debug!("denied {} bytes from a stream-ordered pool on ledger device {dev}", charge.bytes);
        CUDA_ERROR_OUT_OF_MEMORY
    }

    /// Makes the allocation with `reserved_bytes` reserved for it, settles
    /// the pool, and undoes the allocation when its growth cannot be
    /// charged.
    fn call_and_settle(
        &self,
        pool: CUmemoryPool,
        charge: Charge,
        reserved_bytes: u64,
        stream: CUstream,
        per_thread: bool,
        call: impl FnOnce() -> Result<u64, CUresult>,
    ) -> CUresult {
        let dev = charge.ledger_index;
        let before_bytes = self.pool_charged_bytes(pool);
        self.begin_pool_call(pool, dev, reserved_bytes);
        let ptr = match call() {
            Ok(ptr) => ptr,
            Err(r) => {
                let _ = self.settle_pool(pool, dev, reserved_bytes);
                return r;
            }
        };
        if self.settle_pool(pool, dev, reserved_bytes).is_ok() {
            lock(&self.pools.live).insert(ptr, (pool as usize, charge));
            return CUDA_SUCCESS;
        }
        // The pool grew past the cap: give the block back, wait for the
        // stream to reach the free, and have the pool return what it grew
        // by.
        let _ = real::mem_free_async(ptr, stream, per_thread);
        if !capturing(stream, per_thread) {
            let _ = real::stream_synchronize(stream, per_thread);
        }
        let keep_bytes = before_bytes.min(self.pool_charged_bytes(pool));
        let _ = real::pool_trim_to(pool, keep_bytes);
        if self.settle_pool(pool, dev, 0).is_err() {
            warn!("a stream-ordered pool on ledger device {dev} holds more than the cap and would not give it back");
        }
        self.count_denied(dev);
        debug!("denied a stream-ordered allocation on ledger device {dev}: its pool grew past the cap");
        CUDA_ERROR_OUT_OF_MEMORY
    }

    /// A pool allocation was freed: its pool holds its memory now.
    pub(super) fn forget_pool_allocation(&self, ptr: u64) {
        lock(&self.pools.live).remove(&ptr);
    }

    /// `cuMemPoolDestroy`: the driver gives the pool's unused memory back
    /// at once and each live allocation's memory when it is freed. So each
    /// live allocation keeps a charge of its own, its size as the driver
    /// tells it (`cuMemGetAddressRange`), released by its free like any
    /// pointer's, and the rest of the pool's charge is released.
    pub fn destroy_pool(&self, pool: CUmemoryPool, call: impl FnOnce() -> CUresult) -> CUresult {
        let r = call();
        if r != CUDA_SUCCESS {
            return r;
        }
        let key = pool as usize;
        let orphans: Vec<(u64, Charge)> = {
            let mut live = lock(&self.pools.live);
            let ptrs: Vec<u64> = live.iter().filter(|(_, (p, _))| *p == key).map(|(ptr, _)| *ptr).collect();
            ptrs.into_iter().filter_map(|ptr| live.remove(&ptr).map(|(_, charge)| (ptr, charge))).collect()
        };
        // The pool's charge leaves its entry now; allocation calls still in
        // flight from it (an application race) retire their own
        // reservations when they settle.
        let (ledger_index, charged_bytes) = {
            let mut pools = lock(&self.pools.list);
            let Some(entry) = pools.iter_mut().find(|p| p.pool == key) else { return r };
            let taken = (entry.ledger_index, entry.charged_bytes);
            entry.charged_bytes = 0;
            if entry.in_flight_bytes == 0 {
                entry.pool = 0;
            }
            pools.retain(|p| p.pool != 0);
            CHARGED_POOLS.store(pools.len(), Ordering::Release);
            taken
        };
        let mut left_bytes = charged_bytes;
        for (ptr, charge) in orphans {
            let bytes = real::allocation_size_bytes(ptr).unwrap_or(0).min(left_bytes);
            if bytes > 0 {
                left_bytes -= bytes;
                self.remember(Kind::Pointer, ptr, Charge { bytes, ..charge });
            }
        }
        self.release(ledger_index, left_bytes);
        r
    }

    /// What the ledger holds for `pool` now.
    fn pool_charged_bytes(&self, pool: CUmemoryPool) -> u64 {
        lock(&self.pools.list).iter().find(|p| p.pool == pool as usize).map_or(0, |p| p.charged_bytes)
    }

    /// Counts `reserved_bytes`, just reserved in the ledger for an
    /// allocation from `pool` on ledger device `dev`, as in flight for it.
    fn begin_pool_call(&self, pool: CUmemoryPool, dev: usize, reserved_bytes: u64) {
        let mut pools = lock(&self.pools.list);
        match pools.iter_mut().find(|p| p.pool == pool as usize) {
            Some(entry) => {
                entry.in_flight_bytes += reserved_bytes;
                entry.outstanding_bytes += reserved_bytes;
            }
            None => {
                pools.push(PoolCharge {
                    pool: pool as usize,
                    ledger_index: dev,
                    charged_bytes: 0,
                    in_flight_bytes: reserved_bytes,
                    outstanding_bytes: reserved_bytes,
                });
                CHARGED_POOLS.store(pools.len(), Ordering::Release);
            }
        }
    }

    /// Brings `pool`'s charge to what it reserves now and retires the
    /// `reserved_bytes` an allocation call counted in flight
    /// ([`Runtime::begin_pool_call`]), releasing what of them no growth
    /// took. `Err` when growth could not be charged (the pool is then
    /// charged what fitted).
    fn settle_pool(&self, pool: CUmemoryPool, dev: usize, reserved_bytes: u64) -> Result<(), Overdrawn> {
        let mut pools = lock(&self.pools.list);
        let Some(entry) = pools.iter_mut().find(|p| p.pool == pool as usize) else {
            // Destroyed meanwhile: what it held was settled then.
            self.release(dev, reserved_bytes);
            return Ok(());
        };
        let result = self.settle_entry(entry, reserved_bytes);
        let before = pools.len();
        pools.retain(|p| p.pool != 0);
        if pools.len() != before {
            CHARGED_POOLS.store(pools.len(), Ordering::Release);
        }
        result
    }

    /// Settles one pool (the pools' lock held): growth is paid from what
    /// the calls in flight reserved, then from the cap; a shrink is
    /// released. Then the settling call's `retire_bytes` leave the
    /// in-flight total, and what the ledger holds for calls beyond what the
    /// rest may still grow by is released. (A call that grew may settle
    /// after one that did not, which paid its growth: each retirement
    /// keeps enough for every call that has not settled, so none is ever
    /// uncovered.) A pool the driver no longer answers for is released
    /// and, once no call is in flight, marked gone (`pool` = 0).
    fn settle_entry(&self, entry: &mut PoolCharge, retire_bytes: u64) -> Result<(), Overdrawn> {
        let dev = entry.ledger_index;
        let mut result = Ok(());
        let now = real::pool_bytes(entry.pool as CUmemoryPool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        let gone = now.is_err();
        match now {
            Err(_) => {
                self.release(dev, entry.charged_bytes);
                entry.charged_bytes = 0;
            }
            Ok(now_bytes) if now_bytes <= entry.charged_bytes => {
                self.release(dev, entry.charged_bytes - now_bytes);
                entry.charged_bytes = now_bytes;
            }
            Ok(now_bytes) => {
                let growth = now_bytes - entry.charged_bytes;
                let paid = growth.min(entry.outstanding_bytes);
                entry.outstanding_bytes -= paid;
                entry.charged_bytes += paid;
                let rest = growth - paid;
                if rest > 0 {
                    match self.reserve_plain(dev, rest) {
                        Ok(()) => entry.charged_bytes += rest,
                        Err(_) => result = Err(Overdrawn),
                    }
                }
            }
        }
        entry.in_flight_bytes = entry.in_flight_bytes.saturating_sub(retire_bytes);
        let excess = entry.outstanding_bytes.saturating_sub(entry.in_flight_bytes);
        entry.outstanding_bytes -= excess;
        self.release(dev, excess);
        if gone && entry.in_flight_bytes == 0 {
            entry.pool = 0;
        }
        result
    }

    /// Settles every pool this process is charged for.
    pub fn settle_pools(&self) {
        if CHARGED_POOLS.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut pools = lock(&self.pools.list);
        for entry in pools.iter_mut() {
            if self.settle_entry(entry, 0).is_err() {
                // Growth no allocation of ours paid for (made outside the
                // shim's view): charged as far as the cap allows.
                debug!("a stream-ordered pool on ledger device {} grew past the cap", entry.ledger_index);
            }
        }
        pools.retain(|p| p.pool != 0);
        CHARGED_POOLS.store(pools.len(), Ordering::Release);
    }

    /// Has this process's pools on ledger device `dev` give back the memory
    /// they hold unused, and settles them.
    fn trim_pools(&self, dev: usize) {
        let on_dev: Vec<usize> = lock(&self.pools.list).iter().filter(|p| p.ledger_index == dev).map(|p| p.pool).collect();
        if on_dev.is_empty() {
            return;
        }
        for pool in on_dev {
            let _ = real::pool_trim_to(pool as CUmemoryPool, 0);
        }
        self.settle_pools();
    }

    /// `cuMemFreeAsync`: a pool's allocation stays in its pool, charged as
    /// the pool's reserved memory. Memory charged per allocation stays
    /// charged until the stream reaches the free: an event recorded right
    /// after it tells when; a stream whose event cannot be recorded
    /// releases at once.
    pub fn free_async(&self, ptr: u64, stream: CUstream, per_thread: bool, call: impl FnOnce() -> CUresult) -> CUresult {
        let charge = self.allocations.tracker(Kind::Pointer).remove(ptr);
        let r = call();
        let Some(charge) = charge else {
            if r == CUDA_SUCCESS {
                self.forget_pool_allocation(ptr);
            }
            return r;
        };
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
                let id = self.pending_frees.next_id.fetch_add(1, Ordering::Relaxed);
                let mut pending = lock(&self.pending_frees.list);
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
        if PENDING_FREES.load(Ordering::Acquire) == 0 {
            return;
        }
        let snapshot: Vec<(u64, u64, usize)> = lock(&self.pending_frees.list).iter().map(|p| (p.id, p.stream, p.event)).collect();
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
            let mut pending = lock(&self.pending_frees.list);
            let finished: Vec<PendingFree> = pending.extract_if(.., |p| done.contains(&p.id)).collect();
            PENDING_FREES.store(pending.len(), Ordering::Release);
            finished
        };
        for p in finished {
            real::event_destroy(p.event as CUevent);
            self.release(p.charge.ledger_index, p.charge.bytes);
        }
    }
}
