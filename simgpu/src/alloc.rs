//! Address-range allocator for one device's reservation in one process.
//!
//! Pure arithmetic over offsets: best fit from a size-ordered free set, with
//! neighbours coalesced on free, so both operations are O(log n). Every block
//! is a multiple of [`GRANULE_BYTES`], which is also what a block is charged
//! against the device's capacity: the charge equals the address space used,
//! and "capacity is reached exactly" means exactly that many granules.

use std::collections::{BTreeMap, BTreeSet};

/// Allocation granularity and charge unit (real drivers sub-allocate small
/// sizes from larger pages; 512 B keeps charges close to the request while
/// still satisfying the 256-byte alignment that `cuMemAlloc` guarantees).
pub const GRANULE_BYTES: u64 = 512;

/// Rounds a request up to the charge unit; `None` on overflow or zero.
pub fn charge_size(bytes: u64) -> Option<u64> {
    if bytes == 0 {
        return None;
    }
    bytes.checked_add(GRANULE_BYTES - 1).map(|b| b & !(GRANULE_BYTES - 1))
}

#[derive(Debug)]
pub struct RangeAllocator {
    /// free blocks by offset -> length
    free_by_offset: BTreeMap<u64, u64>,
    /// free blocks by (length, offset)
    free_by_size: BTreeSet<(u64, u64)>,
    /// live blocks by offset -> length
    live: BTreeMap<u64, u64>,
}

impl RangeAllocator {
    pub fn new(total_bytes: u64) -> RangeAllocator {
        let total = total_bytes & !(GRANULE_BYTES - 1);
        let mut a = RangeAllocator { free_by_offset: BTreeMap::new(), free_by_size: BTreeSet::new(), live: BTreeMap::new() };
        if total > 0 {
            a.insert_free(0, total);
        }
        a
    }

    fn insert_free(&mut self, offset: u64, len: u64) {
        self.free_by_offset.insert(offset, len);
        self.free_by_size.insert((len, offset));
    }

    fn remove_free(&mut self, offset: u64, len: u64) {
        self.free_by_offset.remove(&offset);
        self.free_by_size.remove(&(len, offset));
    }

    /// Allocates `len` bytes (a multiple of the granule); returns the offset.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        if len == 0 || !len.is_multiple_of(GRANULE_BYTES) {
            return None;
        }
        let &(block_len, offset) = self.free_by_size.range((len, 0)..).next()?;
        self.remove_free(offset, block_len);
        if block_len > len {
            self.insert_free(offset + len, block_len - len);
        }
        self.live.insert(offset, len);
        Some(offset)
    }

    /// Frees the block starting exactly at `offset`; returns its length.
    pub fn free(&mut self, offset: u64) -> Option<u64> {
        let len = self.live.remove(&offset)?;
        let (mut start, mut end) = (offset, offset + len);
        if let Some((&prev, &plen)) = self.free_by_offset.range(..offset).next_back() {
            if prev + plen == start {
                self.remove_free(prev, plen);
                start = prev;
            }
        }
        if let Some(&nlen) = self.free_by_offset.get(&end) {
            self.remove_free(end, nlen);
            end += nlen;
        }
        self.insert_free(start, end - start);
        Some(len)
    }

    /// The live block containing `offset`: (start, length).
    pub fn containing(&self, offset: u64) -> Option<(u64, u64)> {
        let (&start, &len) = self.live.range(..=offset).next_back()?;
        (offset < start + len).then_some((start, len))
    }

    pub fn live_count(&self) -> usize {
        self.live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charge_rounds_to_granule() {
        assert_eq!(charge_size(1), Some(512));
        assert_eq!(charge_size(512), Some(512));
        assert_eq!(charge_size(513), Some(1024));
        assert_eq!(charge_size(0), None);
        assert_eq!(charge_size(u64::MAX), None);
    }

    #[test]
    fn fills_exactly_and_coalesces() {
        let mut a = RangeAllocator::new(4096);
        let x = a.alloc(1024).unwrap();
        let y = a.alloc(2048).unwrap();
        let z = a.alloc(1024).unwrap();
        assert_eq!(a.alloc(512), None);
        assert_eq!(a.containing(y + 100), Some((y, 2048)));
        assert_eq!(a.containing(4096), None);
        assert_eq!(a.free(y), Some(2048));
        assert_eq!(a.free(y), None);
        assert_eq!(a.free(x), Some(1024));
        // x and y coalesced into one 3 KiB block.
        assert_eq!(a.alloc(3072), Some(0));
        assert_eq!(a.free(0), Some(3072));
        assert_eq!(a.free(z), Some(1024));
        assert_eq!(a.alloc(4096), Some(0));
        assert_eq!(a.live_count(), 1);
    }

    #[test]
    fn best_fit_prefers_the_smallest_hole() {
        let mut a = RangeAllocator::new(8192);
        let b: Vec<u64> = (0..8).map(|_| a.alloc(1024).unwrap()).collect();
        a.free(b[1]);
        a.free(b[4]);
        a.free(b[5]);
        assert_eq!(a.alloc(1024), Some(b[1]));
        assert_eq!(a.alloc(2048), Some(b[4]));
        assert_eq!(a.alloc(513), None);
    }
}
