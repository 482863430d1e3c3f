//! Stream-ordered memory pools, kept as a real driver keeps them.
//!
//! A pool's memory is *reserved* (taken from the device, charged to this
//! process in the shared state, so NVML and `cuMemGetInfo` show it used)
//! and, of that, *used* (handed out to live allocations). The difference
//! is the pool's free blocks:
//! - `cuMemFreeAsync` of a pool allocation returns its block to the pool at
//!   the call, still reserved, tagged with the freeing stream and the
//!   free's position there; when the stream reaches the free the block is
//!   marked done.
//! - An allocation from the pool first looks for a free block at least as
//!   large as its request (the smallest such) that it may reuse: one freed
//!   on the same stream (stream order makes that safe), one whose free is
//!   done (`CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC`), one whose freeing
//!   stream this stream has waited on past the free with
//!   `cuStreamWaitEvent` (`…_REUSE_FOLLOW_EVENT_DEPENDENCIES`), or one freed
//!   on another stream of the same context (`…_REUSE_ALLOW_INTERNAL_DEPENDENCIES`:
//!   a context's streams run in one queue here, so that order is the
//!   dependency the driver would insert). A reused block is used whole.
//!   Otherwise the pool grows by the request (rounded to 512 B); a device
//!   that is full first gets back this pool's done free blocks.
//! - At a synchronisation (stream, context or event) the pools of that
//!   device give back done free blocks while they reserve more than their
//!   release threshold (`CU_MEMPOOL_ATTR_RELEASE_THRESHOLD`, 0 by default,
//!   as in the driver); `cuMemPoolTrimTo` does the same down to its
//!   argument (largest blocks first, of equal ones the most recently
//!   freed). Blocks whose free the stream has not reached stay.
//! - Destroying a context gives back the free blocks of memory allocated in
//!   it or freed on its streams, and frees its live allocations; destroying
//!   a pool gives back its free blocks.
//!
//! `CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT`/`_HIGH` and `USED_MEM_CURRENT`/
//! `_HIGH` report these figures; setting a high-water mark to 0 resets it
//! to the current figure.
//!
//! Lock order: the object registry, then a pool's blocks, then a device
//! heap.

use crate::alloc::charge_size;
use crate::driver::{Context, CuResult, Driver, Pool};
use crate::exec::{lock, Op, Stream};
use crate::memory::{self as mem, Block, DeviceHeap};
use abi::cuda::*;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::Arc;

/// A pool's figures and its free blocks.
#[derive(Default)]
pub struct PoolBlocks {
    pub used_bytes: u64,
    pub used_high_bytes: u64,
    pub reserved_bytes: u64,
    pub reserved_high_bytes: u64,
    free: Vec<FreeBlock>,
}

/// A block returned to its pool by `cuMemFreeAsync`, still reserved.
struct FreeBlock {
    /// Offset in the device heap, whose range stays allocated.
    offset: u64,
    len: u64,
    /// The context it was allocated in.
    ctx: u64,
    /// The stream that freed it, that stream's context, and the free's
    /// position on it (`Stream::submitted` once the free is queued).
    stream: u64,
    free_ctx: u64,
    position: u64,
    /// Names the queued free, which marks the block done.
    token: u64,
    /// The stream has reached the free.
    done: bool,
}

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// The `CU_MEMPOOL_ATTR_REUSE_*` flags of a pool.
#[derive(Clone, Copy)]
struct Reuse {
    follow_event_dependencies: bool,
    opportunistic: bool,
    internal_dependencies: bool,
}

impl Reuse {
    fn of(pool: &Pool) -> Reuse {
        let flag = |i: usize| pool.reuse.get(i).is_some_and(|f| f.load(Relaxed) != 0);
        Reuse { follow_event_dependencies: flag(0), opportunistic: flag(1), internal_dependencies: flag(2) }
    }
}

impl PoolBlocks {
    fn note_used(&mut self, bytes: u64) {
        self.used_bytes += bytes;
        self.used_high_bytes = self.used_high_bytes.max(self.used_bytes);
    }

    fn note_reserved(&mut self, bytes: u64) {
        self.reserved_bytes += bytes;
        self.reserved_high_bytes = self.reserved_high_bytes.max(self.reserved_bytes);
    }

    /// The smallest free block of at least `bytes` that `stream` may reuse.
    fn reusable(&self, bytes: u64, stream: &Stream, reuse: Reuse) -> Option<usize> {
        self.free
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len >= bytes)
            .filter(|(_, b)| {
                b.stream == stream.handle
                    || (reuse.opportunistic && b.done)
                    || (reuse.follow_event_dependencies && stream.has_waited_for(b.stream, b.position))
                    || (reuse.internal_dependencies && b.free_ctx == stream.ctx)
            })
            .min_by_key(|(_, b)| b.len)
            .map(|(i, _)| i)
    }

    /// Gives back to the device the free blocks `which` selects, largest
    /// first and, of equal ones, the most recently freed first (the pool
    /// keeps what it has held longest), while the pool reserves more than
    /// `keep_bytes`.
    fn give_back(&mut self, d: &Driver, device: usize, heap: &DeviceHeap, keep_bytes: u64, which: impl Fn(&FreeBlock) -> bool) {
        self.free.sort_by_key(|b| std::cmp::Reverse((b.len, b.token)));
        let mut i = 0;
        while i < self.free.len() && self.reserved_bytes > keep_bytes {
            if which(&self.free[i]) {
                let b = self.free.remove(i);
                mem::return_to_device(d, device, heap, b.offset);
                self.reserved_bytes = self.reserved_bytes.saturating_sub(b.len);
            } else {
                i += 1;
            }
        }
    }
}

/// `cuMemAllocAsync`/`cuMemAllocFromPoolAsync` of `bytes` from `pool_handle`
/// on `stream` of `ctx`: a reused block, or new memory.
pub fn alloc(d: &Driver, ctx: &Context, stream: &Stream, bytes: u64, pool_handle: u64) -> CuResult<u64> {
    let charged = charge_size(bytes).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let objs = d.read();
    let pool = objs.pools.get(&pool_handle).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let heap = mem::heap(d, pool.device)?;
    let mut blocks = lock(&pool.blocks);
    if let Some(i) = blocks.reusable(charged, stream, Reuse::of(pool)) {
        let b = blocks.free.swap_remove(i);
        lock(&heap.inner).blocks.insert(b.offset, Block { ctx: ctx.handle, pool: pool_handle, managed: pool.managed });
        blocks.note_used(b.len);
        return Ok(heap.base + b.offset);
    }
    let st = &d.machine.state;
    if !st.charge(pool.device, d.own_slot(), charged) {
        // A pool that must grow on a full device first gives back what it
        // holds unused.
        blocks.give_back(d, pool.device, heap, 0, |b| b.done);
        if !st.charge(pool.device, d.own_slot(), charged) {
            return Err(CUDA_ERROR_OUT_OF_MEMORY);
        }
    }
    let mut inner = lock(&heap.inner);
    let Some(offset) = inner.ranges.alloc(charged) else {
        drop(inner);
        st.uncharge(pool.device, d.own_slot(), charged);
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    };
    inner.blocks.insert(offset, Block { ctx: ctx.handle, pool: pool_handle, managed: pool.managed });
    drop(inner);
    blocks.note_reserved(charged);
    blocks.note_used(charged);
    Ok(heap.base + offset)
}

/// `cuMemFreeAsync` of `ptr` on `stream` of `ctx`: a pool's block goes back
/// to its pool now (reusable in stream order) and is marked done when the
/// stream reaches the free; any other allocation is freed then.
pub fn free_async(d: &Driver, ctx: &Context, stream: &Arc<Stream>, ptr: u64) -> CuResult<()> {
    let (_, heap) = mem::heap_of(d, ptr).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let offset = ptr - heap.base;
    let pool_handle = lock(&heap.inner).blocks.get(&offset).map(|b| b.pool).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let objs = d.read();
    let token = match objs.pools.get(&pool_handle) {
        // Not from a pool, or from one destroyed since: freed in stream order.
        None => 0,
        Some(pool) => {
            let mut blocks = lock(&pool.blocks);
            let mut inner = lock(&heap.inner);
            // Gone meanwhile: freed twice at once.
            let block = inner.blocks.remove(&offset).ok_or(CUDA_ERROR_INVALID_VALUE)?;
            let len = inner.ranges.containing(offset).map_or(0, |(_, len)| len);
            drop(inner);
            let token = NEXT_TOKEN.fetch_add(1, Relaxed);
            blocks.used_bytes = blocks.used_bytes.saturating_sub(len);
            blocks.free.push(FreeBlock {
                offset,
                len,
                ctx: block.ctx,
                stream: stream.handle,
                free_ctx: ctx.handle,
                position: stream.submitted.load(Acquire) + 1,
                token,
                done: false,
            });
            token
        }
    };
    drop(objs);
    ctx.exec.submit(Op::Free { stream: stream.clone(), ptr, token });
    Ok(())
}

/// The worker reached a pool block's free (`token` from [`free_async`]).
pub fn free_reached(d: &Driver, token: u64) {
    let objs = d.read();
    for pool in objs.pools.values() {
        let mut blocks = lock(&pool.blocks);
        if let Some(b) = blocks.free.iter_mut().find(|b| b.token == token) {
            b.done = true;
            return;
        }
    }
}

/// A live pool allocation freed with `cuMemFree`: its bytes leave the pool
/// with it.
pub fn forget_block(d: &Driver, pool_handle: u64, len: u64) {
    if let Some(pool) = d.read().pools.get(&pool_handle) {
        let mut blocks = lock(&pool.blocks);
        blocks.used_bytes = blocks.used_bytes.saturating_sub(len);
        blocks.reserved_bytes = blocks.reserved_bytes.saturating_sub(len);
    }
}

/// `cuMemPoolTrimTo`: gives back done free blocks while the pool reserves
/// more than `keep_bytes`.
pub fn trim_to(d: &Driver, pool_handle: u64, keep_bytes: u64) -> CuResult<()> {
    let objs = d.read();
    let pool = objs.pools.get(&pool_handle).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let Ok(heap) = mem::heap(d, pool.device) else { return Ok(()) };
    lock(&pool.blocks).give_back(d, pool.device, heap, keep_bytes, |b| b.done);
    Ok(())
}

/// After a synchronisation on `device`: each pool there gives back done
/// free blocks above its release threshold.
pub fn release_after_sync(d: &Driver, device: usize) {
    let Ok(heap) = mem::heap(d, device) else { return };
    let objs = d.read();
    for pool in objs.pools.values().filter(|p| p.device == device) {
        let keep_bytes = pool.release_threshold_bytes.load(Relaxed);
        lock(&pool.blocks).give_back(d, device, heap, keep_bytes, |b| b.done);
    }
}

/// Context `ctx` is destroyed: the free blocks of memory allocated in it or
/// freed on its streams go back to the device.
pub fn forget_context(d: &Driver, ctx: &Context) {
    let Ok(heap) = mem::heap(d, ctx.device) else { return };
    let objs = d.read();
    for pool in objs.pools.values().filter(|p| p.device == ctx.device) {
        lock(&pool.blocks).give_back(d, ctx.device, heap, 0, |b| b.ctx == ctx.handle || b.free_ctx == ctx.handle);
    }
}

/// A pool being destroyed gives back all its free blocks; its live
/// allocations are freed on their own.
pub fn destroy(d: &Driver, pool: &Pool) {
    if let Ok(heap) = mem::heap(d, pool.device) {
        lock(&pool.blocks).give_back(d, pool.device, heap, 0, |_| true);
    }
}
