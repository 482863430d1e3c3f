//! Device allocations in the current context (`cuMemAlloc*`, arrays) and
//! their frees.
//!
//! - `cuMemAlloc*`, stream-ordered and array allocations are charged in
//!   the driver's 512-byte granularity, as the device holds them
//!   ([`allocation_bytes`]); pitched allocations are charged the driver's
//!   pitch × height; arrays their elements ([`array_bytes`],
//!   [`mipmapped_bytes`]).
//! - Every allocation is remembered (pointer or array handle → device,
//!   bytes, context) in `Allocations` so that its free releases exactly
//!   what was charged. A free of something unknown is forwarded and its
//!   result returned, and the ledger is left alone; so is a second free of
//!   the same pointer, which gets the driver's error.
//!
//! Stream-ordered allocations are remembered here too (their frees are in
//! [`super::stream_ordered`]); destroying a context takes its allocations
//! out (`Allocations::remove_context`, see [`super::contexts`]).

use abi::cuda::*;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

use super::{lock, Runtime};
use crate::real;

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

/// Allocations by handle, sharded so that threads rarely share a lock.
pub struct Tracker {
    shards: Box<[Shard]>,
}

/// One shard of a [`Tracker`], on cache lines of its own: a lock and its
/// map take about 56 bytes, so unpadded neighbours would share lines and
/// threads working on different shards would still take each other's lines.
#[repr(align(128))]
struct Shard(Mutex<Map>);

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
            removed.extend(lock(shard).extract_if(|_, charge| charge.ctx == ctx).map(|(_, charge)| charge));
        }
        removed
    }
}

impl Default for Tracker {
    fn default() -> Self {
        Self::new()
    }
}

/// The process's live allocations, one table per [`Kind`].
pub(super) struct Allocations {
    pointers: Tracker,
    arrays: Tracker,
}

impl Allocations {
    pub(super) fn new() -> Self {
        Self { pointers: Tracker::new(), arrays: Tracker::new() }
    }

    pub(super) fn tracker(&self, kind: Kind) -> &Tracker {
        match kind {
            Kind::Pointer => &self.pointers,
            Kind::Array => &self.arrays,
        }
    }

    /// Takes out every allocation of `kind` made in context `ctx`.
    pub(super) fn remove_context(&self, kind: Kind, ctx: usize) -> Vec<Charge> {
        self.tracker(kind).remove_context(ctx)
    }
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

impl Runtime {
    /// Remembers an allocation's charge; a handle the driver reused without
    /// our seeing its free gives back what it was charged.
    pub(super) fn remember(&self, kind: Kind, key: u64, charge: Charge) {
        if let Some(stale) = self.allocations.tracker(kind).insert(key, charge) {
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
        self.charge_around(kind, Charge { ledger_index: device.ledger_index, bytes: allocation_bytes(bytes), ctx }, call)
    }

    /// Reserves `charge` before `call` makes the allocation, remembers it
    /// under the handle `call` returns, and gives it back if the driver
    /// fails: the shape of every allocation the driver sizes as asked.
    pub(super) fn charge_around(&self, kind: Kind, charge: Charge, call: impl FnOnce() -> Result<u64, CUresult>) -> CUresult {
        if self.reserve(charge.ledger_index, charge.bytes).is_err() {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        match call() {
            Ok(key) => {
                self.remember(kind, key, charge);
                CUDA_SUCCESS
            }
            Err(r) => {
                self.release(charge.ledger_index, charge.bytes);
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

    /// Any free: forwards, and releases what was charged if the driver freed it.
    /// A pointer not charged on its own may be a pool's allocation, whose
    /// memory may leave its pool with it: the pools are settled.
    pub fn free(&self, kind: Kind, key: u64, call: impl FnOnce() -> CUresult) -> CUresult {
        let charge = self.allocations.tracker(kind).remove(key);
        let r = call();
        match charge {
            Some(charge) if r == CUDA_SUCCESS => self.release(charge.ledger_index, charge.bytes),
            Some(charge) => self.remember(kind, key, charge),
            None if r == CUDA_SUCCESS && kind == Kind::Pointer => {
                self.forget_pool_allocation(key);
                self.settle_pools();
            }
            None => {}
        }
        r
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

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
