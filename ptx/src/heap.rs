//! The device heap of a context: what kernels' `malloc` and `free` (and
//! C++ `new`/`delete`, which nvcc lowers to them) allocate from.
//!
//! A fixed range of offsets (its size is `CU_LIMIT_MALLOC_HEAP_SIZE`)
//! handed out in 16-byte granules, best fit: the smallest free range that
//! holds a request, split; freed blocks merge with free neighbours. Every
//! operation is a few B-tree steps, so a kernel that allocates in a loop
//! pays for each call what its instruction budget already charges, and
//! the bookkeeping is bounded by [`Heap::max_blocks`] live blocks (a
//! request beyond it fails as one the heap cannot hold: `malloc` gives
//! NULL). The caller maps offsets to device addresses.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::Error;

/// Alignment and granule of every block (what CUDA guarantees).
pub const GRANULE: u64 = 16;

/// A heap's free ranges and live blocks.
#[derive(Debug, Clone)]
pub struct Heap {
    size: u64,
    /// Free ranges by (length, offset), for best fit.
    by_len: BTreeSet<(u64, u64)>,
    /// The same ranges by offset → length, for merging.
    by_off: BTreeMap<u64, u64>,
    /// Live blocks: offset → length (granules included).
    live: HashMap<u64, u64>,
    max_blocks: usize,
}

impl Heap {
    /// A heap of `size` bytes (rounded down to a granule) holding at most
    /// `max_blocks` live blocks.
    pub fn new(size: u64, max_blocks: usize) -> Heap {
        let size = size - size % GRANULE;
        let mut h = Heap {
            size,
            by_len: BTreeSet::new(),
            by_off: BTreeMap::new(),
            live: HashMap::new(),
            max_blocks,
        };
        if size > 0 {
            h.insert_free(0, size);
        }
        h
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// How many blocks are live.
    pub fn live_blocks(&self) -> usize {
        self.live.len()
    }

    /// The bound on live blocks.
    pub fn max_blocks(&self) -> usize {
        self.max_blocks
    }

    /// Bytes not in live blocks.
    pub fn free_bytes(&self) -> u64 {
        self.by_off.values().sum()
    }

    /// The offset of a new block of at least `len` bytes (at least one
    /// granule), `None` if no free range holds it or the heap has
    /// [`Heap::max_blocks`] live blocks.
    pub fn alloc(&mut self, len: u64) -> Option<u64> {
        if self.live.len() >= self.max_blocks {
            return None;
        }
        let need = len.max(1).checked_next_multiple_of(GRANULE)?;
        let &(have, off) = self.by_len.range((need, 0)..).next()?;
        self.remove_free(off, have);
        if have > need {
            self.insert_free(off + need, have - need);
        }
        self.live.insert(off, need);
        Some(off)
    }

    /// Gives back the block at `off`; false (and nothing changes) if no
    /// live block starts there.
    pub fn free(&mut self, off: u64) -> bool {
        let Some(mut len) = self.live.remove(&off) else {
            return false;
        };
        let mut start = off;
        if let Some((&prev, &plen)) = self.by_off.range(..off).next_back() {
            if prev + plen == off {
                self.remove_free(prev, plen);
                start = prev;
                len += plen;
            }
        }
        let next = start + len;
        if let Some(&nlen) = self.by_off.get(&next) {
            self.remove_free(next, nlen);
            len += nlen;
        }
        self.insert_free(start, len);
        true
    }

    fn insert_free(&mut self, off: u64, len: u64) {
        self.by_len.insert((len, off));
        self.by_off.insert(off, len);
    }

    fn remove_free(&mut self, off: u64, len: u64) {
        self.by_len.remove(&(len, off));
        self.by_off.remove(&off);
    }
}

/// A heap placed at device address `base`: what a [`crate::Memory`]
/// implementation's `malloc` and `free` need.
#[derive(Debug, Clone)]
pub struct DeviceHeap {
    pub base: u64,
    pub heap: Heap,
}

impl DeviceHeap {
    /// The address of a new block of `size` bytes; 0 if none fits.
    pub fn malloc(&mut self, size: u64) -> u64 {
        self.heap.alloc(size).map_or(0, |off| self.base + off)
    }

    /// Frees the block at `addr`; [`Error::BadFree`] if none starts there.
    pub fn free(&mut self, addr: u64) -> Result<(), Error> {
        if addr >= self.base && self.heap.free(addr - self.base) {
            Ok(())
        } else {
            Err(Error::BadFree { addr })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn blocks_are_aligned_disjoint_and_come_back_merged() {
        let mut h = Heap::new(1024, 100);
        let a = h.alloc(1).unwrap();
        let b = h.alloc(17).unwrap();
        let c = h.alloc(100).unwrap();
        for (x, y) in [(a, b), (b, c)] {
            assert_eq!(x % GRANULE, 0);
            assert_eq!(y % GRANULE, 0);
        }
        assert_eq!(h.free_bytes(), 1024 - 16 - 32 - 112);
        assert!(h.alloc(1024).is_none(), "more than is free");
        assert!(h.free(b));
        assert!(!h.free(b), "a second free of one block is refused");
        assert!(!h.free(b + 16), "not the start of a block");
        assert!(h.free(a));
        assert!(h.free(c));
        assert_eq!(h.free_bytes(), 1024);
        assert_eq!(h.alloc(1024), Some(0), "the ranges merged back into one");
    }

    #[test]
    fn live_blocks_are_bounded() {
        let mut h = Heap::new(1 << 20, 3);
        assert!(h.alloc(16).is_some());
        assert!(h.alloc(16).is_some());
        assert!(h.alloc(16).is_some());
        assert_eq!(h.alloc(16), None);
        assert_eq!(h.live_blocks(), 3);
    }

    #[test]
    fn a_heap_of_zero_bytes_gives_nothing() {
        let mut h = Heap::new(0, 10);
        assert_eq!(h.alloc(1), None);
        assert_eq!(h.alloc(u64::MAX), None);
    }

    proptest! {
        /// Any sequence of allocations and frees: live blocks never
        /// overlap or leave the heap, and free plus live bytes is the size.
        #[test]
        fn blocks_never_overlap(ops in proptest::collection::vec((any::<bool>(), 0u64..300, any::<prop::sample::Index>()), 1..200)) {
            let mut h = Heap::new(4096, 64);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (alloc, len, pick) in ops {
                if alloc || live.is_empty() {
                    if let Some(off) = h.alloc(len) {
                        let need = len.max(1).next_multiple_of(GRANULE);
                        prop_assert!(off + need <= 4096);
                        for &(o, l) in &live {
                            prop_assert!(off + need <= o || o + l <= off, "overlap");
                        }
                        live.push((off, need));
                    }
                } else {
                    let (off, _) = live.swap_remove(pick.index(live.len()));
                    prop_assert!(h.free(off));
                }
                let used: u64 = live.iter().map(|b| b.1).sum();
                prop_assert_eq!(h.free_bytes() + used, 4096);
                prop_assert_eq!(h.live_blocks(), live.len());
            }
            for (off, _) in live {
                prop_assert!(h.free(off));
            }
            prop_assert_eq!(h.alloc(4096), Some(0));
        }
    }
}
