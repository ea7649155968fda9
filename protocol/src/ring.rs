//! The single-producer single-consumer ring protocol.
//!
//! Indices are free-running `u32` counters; a slot is `index & (entries - 1)`.
//! The producer owns `tail`, the consumer owns `head`; each side keeps the
//! authoritative copy of its own index in private memory and only *publishes*
//! it to the shared word, so a hostile peer that scribbles over our index
//! changes nothing we rely on. The peer's index is read, checked
//! (`tail - head <= entries`), and refused as corruption if impossible.
//!
//! Memory ordering (see `docs/memory-ordering.md`):
//! - Producer: write slot, then `tail.store(Release)`. Pairs with the
//!   consumer's `tail.load(Acquire)`: a consumer that sees the new tail sees
//!   the slot's contents.
//! - Consumer: read slot (and everything the descriptor points to, such as
//!   arena bytes), then `head.store(Release)`. Pairs with the producer's
//!   `head.load(Acquire)`: a producer that sees the new head may overwrite the
//!   slot, because the consumer's reads happened before.
//!
//! The algorithm is written once against [`RingMem`], so the same code runs
//! over shared memory ([`crate::region::ShmRing`]) and under the loom model
//! checker (`tests/ring_loom.rs`).

use std::sync::atomic::Ordering;

/// Storage of one ring: two indices and `capacity` slots.
pub trait RingMem {
    /// The descriptor type.
    type Slot: Copy;
    /// Number of slots; a power of two.
    fn capacity(&self) -> u32;
    /// Loads the consumer index.
    fn load_head(&self, order: Ordering) -> u32;
    /// Publishes the consumer index.
    fn store_head(&self, v: u32, order: Ordering);
    /// Loads the producer index.
    fn load_tail(&self, order: Ordering) -> u32;
    /// Publishes the producer index.
    fn store_tail(&self, v: u32, order: Ordering);
    /// Writes slot `i` (`i < capacity`).
    fn write_slot(&self, i: u32, v: &Self::Slot);
    /// Copies slot `i` out (`i < capacity`).
    fn read_slot(&self, i: u32) -> Self::Slot;
}

/// The peer published an index no correct peer could have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ring indices corrupt: head {head}, tail {tail}, capacity {capacity}")]
pub struct Corrupt {
    /// Consumer index as seen.
    pub head: u32,
    /// Producer index as seen.
    pub tail: u32,
    /// Ring capacity.
    pub capacity: u32,
}

/// Why a push did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// Every slot is in use; try again after the consumer advances.
    #[error("ring full")]
    Full,
    /// The consumer's index is impossible.
    #[error(transparent)]
    Corrupt(#[from] Corrupt),
}

/// The producing side of a ring.
#[derive(Debug)]
pub struct Producer<M: RingMem> {
    mem: M,
    tail: u32,
    head_cache: u32,
}

impl<M: RingMem> Producer<M> {
    /// Takes the producer role, starting at index `start` (the value both
    /// sides agreed on, normally 0 after a channel reset).
    pub fn new(mem: M, start: u32) -> Self {
        Producer {
            mem,
            tail: start,
            head_cache: start,
        }
    }

    /// Our (authoritative) producer index.
    pub fn tail(&self) -> u32 {
        self.tail
    }

    /// Reloads the consumer's index and returns it, checked.
    pub fn refresh_head(&mut self) -> Result<u32, Corrupt> {
        // Acquire: pairs with the consumer's Release store of head, so its
        // reads of the slots it released happened before we overwrite them.
        let head = self.mem.load_head(Ordering::Acquire);
        let used = self.tail.wrapping_sub(head);
        if used > self.mem.capacity() {
            return Err(Corrupt {
                head,
                tail: self.tail,
                capacity: self.mem.capacity(),
            });
        }
        self.head_cache = head;
        Ok(head)
    }

    /// Slots free as far as we know without touching shared memory.
    pub fn free_cached(&self) -> u32 {
        self.mem.capacity() - self.tail.wrapping_sub(self.head_cache)
    }

    /// Whether one more descriptor fits, reloading the consumer's index
    /// only when the cached one says the ring is full.
    pub fn has_space(&mut self) -> Result<bool, Corrupt> {
        if self.free_cached() > 0 {
            return Ok(true);
        }
        self.refresh_head()?;
        Ok(self.free_cached() > 0)
    }

    /// Appends one descriptor.
    pub fn try_push(&mut self, v: &M::Slot) -> Result<(), PushError> {
        if self.tail.wrapping_sub(self.head_cache) >= self.mem.capacity() {
            self.refresh_head()?;
            if self.tail.wrapping_sub(self.head_cache) >= self.mem.capacity() {
                return Err(PushError::Full);
            }
        }
        self.mem
            .write_slot(self.tail & (self.mem.capacity() - 1), v);
        self.tail = self.tail.wrapping_add(1);
        // Release: publishes the slot written above; pairs with the
        // consumer's Acquire load of tail in `Consumer::peek`.
        self.mem.store_tail(self.tail, Ordering::Release);
        Ok(())
    }

    /// The storage, for callers that need the raw words (doorbells).
    pub fn mem(&self) -> &M {
        &self.mem
    }
}

/// The consuming side of a ring.
#[derive(Debug)]
pub struct Consumer<M: RingMem> {
    mem: M,
    head: u32,
    tail_cache: u32,
}

impl<M: RingMem> Consumer<M> {
    /// Takes the consumer role, starting at index `start`.
    pub fn new(mem: M, start: u32) -> Self {
        Consumer {
            mem,
            head: start,
            tail_cache: start,
        }
    }

    /// Our (authoritative) consumer index.
    pub fn head(&self) -> u32 {
        self.head
    }

    /// Number of descriptors available, reloading the producer's index.
    pub fn available(&mut self) -> Result<u32, Corrupt> {
        // Acquire: pairs with the producer's Release store of tail in
        // `Producer::try_push`; slots below the loaded tail are fully written.
        let tail = self.mem.load_tail(Ordering::Acquire);
        let avail = tail.wrapping_sub(self.head);
        if avail > self.mem.capacity() {
            return Err(Corrupt {
                head: self.head,
                tail,
                capacity: self.mem.capacity(),
            });
        }
        self.tail_cache = tail;
        Ok(avail)
    }

    /// Copies out the oldest descriptor without releasing its slot.
    /// Call [`Consumer::advance`] once done with it (and with any arena
    /// bytes it points to).
    pub fn peek(&mut self) -> Result<Option<M::Slot>, Corrupt> {
        if self.head == self.tail_cache && self.available()? == 0 {
            return Ok(None);
        }
        Ok(Some(
            self.mem.read_slot(self.head & (self.mem.capacity() - 1)),
        ))
    }

    /// Releases the slot returned by the last successful [`Consumer::peek`].
    pub fn advance(&mut self) {
        debug_assert!(
            self.head != self.tail_cache,
            "advance without a peeked slot"
        );
        self.head = self.head.wrapping_add(1);
        // Release: our reads of the slot (and its arena data) happen before
        // the producer may reuse them; pairs with the Acquire load of head in
        // `Producer::refresh_head`.
        self.mem.store_head(self.head, Ordering::Release);
    }

    /// `peek` followed by `advance`.
    pub fn pop(&mut self) -> Result<Option<M::Slot>, Corrupt> {
        let v = self.peek()?;
        if v.is_some() {
            self.advance();
        }
        Ok(v)
    }

    /// The storage, for callers that need the raw words.
    pub fn mem(&self) -> &M {
        &self.mem
    }
}

/// A ring in private memory: for tests and the model checker's sibling.
#[derive(Debug)]
pub struct LocalRing<T: Copy> {
    head: std::sync::atomic::AtomicU32,
    tail: std::sync::atomic::AtomicU32,
    slots: Vec<std::sync::Mutex<T>>,
}

impl<T: Copy + Default> LocalRing<T> {
    /// A ring of `capacity` (power of two) default slots.
    pub fn new(capacity: u32) -> Self {
        assert!(capacity.is_power_of_two());
        LocalRing {
            head: 0.into(),
            tail: 0.into(),
            slots: (0..capacity)
                .map(|_| std::sync::Mutex::new(T::default()))
                .collect(),
        }
    }

    /// Overwrites the producer index, as a hostile producer would.
    pub fn corrupt_tail(&self, v: u32) {
        self.tail.store(v, Ordering::Relaxed);
    }
    /// Overwrites the consumer index, as a hostile consumer would.
    pub fn corrupt_head(&self, v: u32) {
        self.head.store(v, Ordering::Relaxed);
    }
}

impl<T: Copy> RingMem for &LocalRing<T> {
    type Slot = T;
    fn capacity(&self) -> u32 {
        self.slots.len() as u32
    }
    fn load_head(&self, o: Ordering) -> u32 {
        self.head.load(o)
    }
    fn store_head(&self, v: u32, o: Ordering) {
        self.head.store(v, o)
    }
    fn load_tail(&self, o: Ordering) -> u32 {
        self.tail.load(o)
    }
    fn store_tail(&self, v: u32, o: Ordering) {
        self.tail.store(v, o)
    }
    fn write_slot(&self, i: u32, v: &T) {
        *self.slots[i as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = *v;
    }
    fn read_slot(&self, i: u32) -> T {
        *self.slots[i as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    #[test]
    fn full_and_empty() {
        let r = LocalRing::<u64>::new(8);
        let mut p = Producer::new(&r, 0);
        let mut c = Consumer::new(&r, 0);
        assert_eq!(c.pop(), Ok(None));
        for i in 0..8 {
            p.try_push(&i).unwrap();
        }
        assert_eq!(p.try_push(&99), Err(PushError::Full));
        assert_eq!(c.pop(), Ok(Some(0)));
        p.try_push(&8).unwrap();
        for i in 1..=8 {
            assert_eq!(c.pop(), Ok(Some(i)));
        }
        assert_eq!(c.pop(), Ok(None));
    }

    #[test]
    fn wraps_around_u32() {
        let r = LocalRing::<u64>::new(8);
        let start = u32::MAX - 3;
        r.corrupt_head(start);
        r.corrupt_tail(start);
        let mut p = Producer::new(&r, start);
        let mut c = Consumer::new(&r, start);
        for i in 0..100u64 {
            p.try_push(&i).unwrap();
            if i % 3 == 0 {
                p.try_push(&(i + 1000)).unwrap();
                assert_eq!(c.pop(), Ok(Some(i)));
                assert_eq!(c.pop(), Ok(Some(i + 1000)));
            } else {
                assert_eq!(c.pop(), Ok(Some(i)));
            }
        }
        assert!(p.tail() < start, "index wrapped");
    }

    #[test]
    fn impossible_indices_are_corruption() {
        let r = LocalRing::<u64>::new(8);
        let mut c = Consumer::new(&r, 0);
        r.corrupt_tail(9);
        assert!(matches!(c.pop(), Err(Corrupt { tail: 9, .. })));
        r.corrupt_tail(u32::MAX); // "behind" the head: also impossible
        assert!(c.pop().is_err());

        let r = LocalRing::<u64>::new(8);
        let mut p = Producer::new(&r, 0);
        for i in 0..8 {
            p.try_push(&i).unwrap();
        }
        r.corrupt_head(100);
        assert!(matches!(p.try_push(&1), Err(PushError::Corrupt(_))));
        // A head that is merely stale (not yet advanced) is fine.
        r.corrupt_head(0);
        assert_eq!(p.try_push(&1), Err(PushError::Full));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(u64),
        Pop,
    }

    proptest! {
        /// Any interleaving of pushes and pops behaves like a bounded FIFO,
        /// starting anywhere in the index space (wraparound included).
        #[test]
        fn behaves_like_bounded_fifo(
            cap_log in 3u32..6,
            start in any::<u32>(),
            ops in proptest::collection::vec(
                prop_oneof![any::<u64>().prop_map(Op::Push), Just(Op::Pop)], 0..400),
        ) {
            let cap = 1u32 << cap_log;
            let r = LocalRing::<u64>::new(cap);
            r.corrupt_head(start);
            r.corrupt_tail(start);
            let mut p = Producer::new(&r, start);
            let mut c = Consumer::new(&r, start);
            let mut model = VecDeque::new();
            for op in ops {
                match op {
                    Op::Push(v) => {
                        let res = p.try_push(&v);
                        if model.len() == cap as usize {
                            prop_assert_eq!(res, Err(PushError::Full));
                        } else {
                            prop_assert_eq!(res, Ok(()));
                            model.push_back(v);
                        }
                    }
                    Op::Pop => prop_assert_eq!(c.pop(), Ok(model.pop_front())),
                }
                // The producer's cached view never overstates the free space.
                prop_assert!(p.free_cached() as usize <= cap as usize - model.len());
            }
        }

        /// Two threads, random sizes: everything pushed is popped once, in order.
        #[test]
        fn threaded_transfer_is_exact(cap_log in 3u32..7, n in 1u64..3000) {
            let cap = 1u32 << cap_log;
            let r = LocalRing::<u64>::new(cap);
            std::thread::scope(|s| {
                s.spawn(|| {
                    let mut p = Producer::new(&r, 0);
                    for i in 0..n {
                        while p.try_push(&i) == Err(PushError::Full) {
                            std::hint::spin_loop();
                        }
                    }
                });
                let mut c = Consumer::new(&r, 0);
                let mut next = 0;
                while next < n {
                    if let Some(v) = c.pop().unwrap() {
                        assert_eq!(v, next);
                        next += 1;
                    }
                }
            });
        }
    }
}
