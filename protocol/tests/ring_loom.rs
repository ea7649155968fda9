//! Model-checks the ring protocol with loom: every interleaving and every
//! weak-memory outcome loom can produce for one producer and one consumer.
//!
//! The slots are loom `UnsafeCell`s, so if the ring's orderings did not
//! order the slot accesses (for example a Relaxed tail store), loom would
//! report a data race on them; values are checked for order and integrity.

use fairgpu_protocol::ring::{Consumer, Producer, PushError, RingMem};
use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicU32;
use loom::sync::Arc;
use std::sync::atomic::Ordering;

struct LoomRing {
    head: AtomicU32,
    tail: AtomicU32,
    slots: Vec<UnsafeCell<u64>>,
}

#[derive(Clone)]
struct Mem(Arc<LoomRing>);

impl RingMem for Mem {
    type Slot = u64;
    fn capacity(&self) -> u32 {
        self.0.slots.len() as u32
    }
    fn load_head(&self, o: Ordering) -> u32 {
        self.0.head.load(o)
    }
    fn store_head(&self, v: u32, o: Ordering) {
        self.0.head.store(v, o)
    }
    fn load_tail(&self, o: Ordering) -> u32 {
        self.0.tail.load(o)
    }
    fn store_tail(&self, v: u32, o: Ordering) {
        self.0.tail.store(v, o)
    }
    fn write_slot(&self, i: u32, v: &u64) {
        // SAFETY: loom checks this access for races with read_slot; the ring
        // protocol must make it exclusive.
        self.0.slots[i as usize].with_mut(|p| unsafe { *p = *v });
    }
    fn read_slot(&self, i: u32) -> u64 {
        // SAFETY: as above.
        self.0.slots[i as usize].with(|p| unsafe { *p })
    }
}

fn ring(cap: usize, start: u32) -> Mem {
    Mem(Arc::new(LoomRing {
        head: AtomicU32::new(start),
        tail: AtomicU32::new(start),
        slots: (0..cap).map(|_| UnsafeCell::new(0)).collect(),
    }))
}

/// Three values through a two-slot ring: forces a full ring, slot reuse and
/// index wraparound (starting just below u32::MAX).
#[test]
fn spsc_transfer_is_race_free_and_ordered() {
    loom::model(|| {
        let mem = ring(2, u32::MAX - 1);
        let pmem = mem.clone();
        let producer = loom::thread::spawn(move || {
            let mut p = Producer::new(pmem, u32::MAX - 1);
            for v in 1..=3u64 {
                loop {
                    match p.try_push(&(v * 11)) {
                        Ok(()) => break,
                        Err(PushError::Full) => loom::thread::yield_now(),
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        });
        let mut c = Consumer::new(mem, u32::MAX - 1);
        let mut got = Vec::new();
        while got.len() < 3 {
            match c.pop().expect("a correct producer never corrupts") {
                Some(v) => got.push(v),
                None => loom::thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert_eq!(got, vec![11, 22, 33]);
    });
}

/// The consumer's peek/advance split: the producer can never overwrite a
/// slot the consumer is still reading between peek and advance.
#[test]
fn peeked_slot_is_not_overwritten_before_advance() {
    loom::model(|| {
        let mem = ring(2, 0);
        let pmem = mem.clone();
        let producer = loom::thread::spawn(move || {
            let mut p = Producer::new(pmem, 0);
            let mut pushed = 0;
            for v in [5u64, 6, 7] {
                while p.try_push(&v).is_err() {
                    loom::thread::yield_now();
                }
                pushed += 1;
            }
            pushed
        });
        let mut c = Consumer::new(mem, 0);
        let mut seen = Vec::new();
        while seen.len() < 3 {
            if let Some(v) = c.peek().unwrap() {
                loom::thread::yield_now();
                // Re-reading the slot after a yield must still give the same value.
                assert_eq!(c.mem().read_slot(c.head() & 1), v);
                c.advance();
                seen.push(v);
            } else {
                loom::thread::yield_now();
            }
        }
        assert_eq!(producer.join().unwrap(), 3);
        assert_eq!(seen, vec![5, 6, 7]);
    });
}
