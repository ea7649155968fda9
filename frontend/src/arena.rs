//! First-in first-out allocation of a channel's data arena.
//!
//! Requests use arena space in submission order and the host finishes with
//! them in the same order, so the arena is a circular buffer: allocate at
//! the front, free from the back. An allocation is freed when the host can
//! no longer touch it: for a fire-and-forget request once the host has
//! advanced the request ring's head past it; for a request with a response
//! once that response (and any output in the slice) has been consumed.

use std::collections::VecDeque;

/// Allocation granularity: a cache line, so two requests never share one.
pub const ARENA_ALIGN: u64 = 64;

#[derive(Debug, Clone, Copy)]
struct Live {
    end: u64,
    req_idx: u32,
    needs_response: bool,
    responded: bool,
}

/// The allocator. Positions are monotonic byte counters; offsets are
/// positions modulo the arena size.
#[derive(Debug)]
pub struct ArenaAlloc {
    size: u64,
    alloc_pos: u64,
    free_pos: u64,
    live: VecDeque<Live>,
}

impl ArenaAlloc {
    /// An empty allocator over `size` bytes.
    pub fn new(size: u32) -> Self {
        ArenaAlloc {
            size: size.into(),
            alloc_pos: 0,
            free_pos: 0,
            live: VecDeque::new(),
        }
    }

    /// Largest single allocation that can ever succeed.
    pub fn max_alloc(&self) -> u32 {
        self.size as u32
    }

    /// Reserves `len` bytes for request `req_idx`; `None` if they are not
    /// free yet. A zero-length request gets offset 0 and no reservation.
    pub fn alloc(&mut self, len: u32, req_idx: u32, needs_response: bool) -> Option<u32> {
        if len == 0 {
            return Some(0);
        }
        let len = u64::from(len).div_ceil(ARENA_ALIGN) * ARENA_ALIGN;
        if len > self.size {
            return None;
        }
        if self.live.is_empty() && !self.alloc_pos.is_multiple_of(self.size) {
            // Nothing is reserved: start the next lap, so that a slice too
            // long for the tail end fits at offset 0 instead of waiting
            // for a reclaim that has nothing left to free.
            self.alloc_pos = self.alloc_pos.next_multiple_of(self.size);
            self.free_pos = self.alloc_pos;
        }
        let pos = self.alloc_pos % self.size;
        // Never wrap an allocation: skip the tail end of the arena instead.
        let start = if pos + len > self.size {
            self.alloc_pos + (self.size - pos)
        } else {
            self.alloc_pos
        };
        if start + len - self.free_pos > self.size {
            return None;
        }
        self.alloc_pos = start + len;
        self.live.push_back(Live {
            end: self.alloc_pos,
            req_idx,
            needs_response,
            responded: false,
        });
        Some((start % self.size) as u32)
    }

    /// Records that the response to `req_idx` was consumed.
    pub fn responded(&mut self, req_idx: u32) {
        if let Some(l) = self
            .live
            .iter_mut()
            .find(|l| l.req_idx == req_idx && l.needs_response)
        {
            l.responded = true;
        }
    }

    /// Frees what the host is done with, given the request ring's head.
    pub fn reclaim(&mut self, req_head: u32) {
        while let Some(l) = self.live.front() {
            let consumed = (req_head.wrapping_sub(l.req_idx) as i32) > 0;
            let done = if l.needs_response {
                l.responded
            } else {
                consumed
            };
            if !done {
                break;
            }
            self.free_pos = l.end;
            self.live.pop_front();
        }
        if self.live.is_empty() {
            self.free_pos = self.alloc_pos;
        }
    }

    /// Bytes currently reserved (including skipped tail ends).
    pub fn used(&self) -> u64 {
        self.alloc_pos - self.free_pos
    }

    /// Forgets every reservation (after a channel reset).
    pub fn reset(&mut self) {
        self.alloc_pos = 0;
        self.free_pos = 0;
        self.live.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_reuse_and_wrap() {
        let mut a = ArenaAlloc::new(1024);
        assert_eq!(a.alloc(100, 0, false), Some(0));
        assert_eq!(a.alloc(500, 1, false), Some(128));
        assert_eq!(
            a.alloc(500, 2, false),
            None,
            "only 384 bytes left before the end"
        );
        a.reclaim(1); // request 0 consumed
        assert_eq!(
            a.alloc(500, 2, false),
            None,
            "tail end too small, front not free"
        );
        a.reclaim(2);
        assert_eq!(a.alloc(500, 2, false), Some(0), "wraps to the start");
        assert_eq!(a.alloc(0, 3, false), Some(0), "empty requests take nothing");
        a.reclaim(3);
        assert_eq!(a.used(), 0);
    }

    #[test]
    fn an_empty_arena_takes_a_slice_of_its_whole_size_at_any_position() {
        let mut a = ArenaAlloc::new(1024);
        assert_eq!(a.alloc(640, 0, false), Some(0));
        a.reclaim(1);
        assert_eq!(a.used(), 0);
        // 384 bytes left before the end, and the slice is longer than the
        // 640 in front: only a fresh lap fits it.
        assert_eq!(a.alloc(1024, 1, true), Some(0));
        assert_eq!(a.alloc(64, 2, false), None, "the whole arena is taken");
        a.responded(1);
        a.reclaim(2);
        assert_eq!(a.alloc(64, 2, false), Some(0));
    }

    #[test]
    fn response_slices_wait_for_their_response() {
        let mut a = ArenaAlloc::new(1024);
        assert_eq!(a.alloc(512, 0, true), Some(0));
        assert_eq!(a.alloc(512, 1, true), Some(512));
        a.reclaim(2); // host consumed both requests but responses are unread
        assert_eq!(a.alloc(64, 2, true), None);
        a.responded(0);
        a.reclaim(2);
        assert_eq!(a.alloc(64, 2, true), Some(0));
        assert_eq!(a.alloc(2048, 3, false), None, "larger than the arena");
    }
}
