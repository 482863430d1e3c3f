//! Stream-ordered memory: `cuMemAllocAsync`, `cuMemAllocFromPoolAsync` and
//! `cuMemFreeAsync` (and their `_ptsz` forms).
//!
//! - Stream-ordered allocations are charged to the context and device of
//!   their stream (`cuStreamGetCtx`; the null, legacy and per-thread
//!   streams mean the calling thread's context, see [`super::devices`]);
//!   `cuMemAllocFromPoolAsync` charges the pool's device
//!   (`CU_MEMPOOL_ATTR_LOCATION_ID`), where the driver takes the memory,
//!   even when the stream is on another device. They are remembered with
//!   the other pointers (see [`super::memory`]).
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
//!   Destroying the context drops its pending frees with it
//!   (`PendingFrees::remove_context`).
//!
//! Owns `PendingFrees` and the process-wide count of them
//! ([`has_pending_frees`]), which lets the synchronisation hooks skip all of
//! this with one load.

use abi::cuda::*;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::devices::{STREAM_LEGACY, STREAM_PER_THREAD};
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

/// Whether any `cuMemFreeAsync` of this process waits for its stream.
#[inline]
pub fn has_pending_frees() -> bool {
    PENDING_FREES.load(Ordering::Acquire) != 0
}

/// One key per stream: the null stream is the legacy default stream, or the
/// per-thread one for `_ptsz` callers.
fn stream_key(stream: CUstream, per_thread: bool) -> u64 {
    match stream as u64 {
        0 if per_thread => STREAM_PER_THREAD,
        0 => STREAM_LEGACY,
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
    }
}

impl Runtime {
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
        self.charge_around(Kind::Pointer, Charge { ledger_index: device.ledger_index, bytes: allocation_bytes(bytes), ctx }, call)
    }

    /// `cuMemFreeAsync`: the charge stays until the stream reaches the free.
    /// An event recorded right after it tells when; a stream whose event
    /// cannot be recorded releases at once.
    pub fn free_async(&self, ptr: u64, stream: CUstream, per_thread: bool, call: impl FnOnce() -> CUresult) -> CUresult {
        let charge = self.allocations.tracker(Kind::Pointer).remove(ptr);
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
        if !has_pending_frees() {
            return;
        }
        let snapshot: Vec<(u64, u64, usize)> =
            lock(&self.pending_frees.list).iter().map(|p| (p.id, p.stream, p.event)).collect();
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
}
