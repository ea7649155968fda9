//! Bounds-checked volatile access to a mapped region.
//!
//! The region is shared with an untrusted peer, so no Rust reference to its
//! plain bytes is ever formed: data moves in and out by volatile reads and
//! writes (descriptors) or raw copies into private memory (bulk bytes), and
//! the only references handed out are to atomics, whose every access is a
//! well-defined atomic operation whatever the peer does. All offsets are
//! checked against the mapping length; [`RegionView::new`] is the one
//! `unsafe` entry point.

use std::any::Any;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::layout::{ChannelOffsets, Layout, CH_REQ_HEAD, CH_REQ_TAIL, CH_RESP_HEAD, CH_RESP_TAIL};
use crate::limits::DESC_SIZE;
use crate::ring::RingMem;
use crate::wire::{Pod, Request, Response};

/// An access outside the mapping or misaligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "region access at {off}+{len} (align {align}) outside mapping of {mapped} bytes or misaligned"
)]
pub struct OutOfBounds {
    /// Offset asked for.
    pub off: usize,
    /// Length asked for.
    pub len: usize,
    /// Alignment required.
    pub align: usize,
    /// Mapping length.
    pub mapped: usize,
}

/// A view of a mapped shared-memory region. Cloning is cheap; the mapping
/// stays alive as long as any view (or ring built from one) does.
#[derive(Clone)]
pub struct RegionView {
    base: NonNull<u8>,
    len: usize,
    _keepalive: Arc<dyn Any + Send + Sync>,
}

impl fmt::Debug for RegionView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegionView")
            .field("base", &self.base)
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: the view only performs atomic, volatile or raw-copy accesses, all of
// which are valid from any thread; the keepalive is itself Send + Sync.
unsafe impl Send for RegionView {}
// SAFETY: as for Send; no method hands out a non-atomic reference.
unsafe impl Sync for RegionView {}

impl RegionView {
    /// Wraps a mapping.
    ///
    /// # Safety
    /// `base..base + len` must be a readable and writable mapping, aligned to
    /// at least 64 bytes, that stays mapped for as long as `keepalive` lives,
    /// and that this process accesses only through views (never through Rust
    /// references to its bytes).
    pub unsafe fn new(
        base: NonNull<u8>,
        len: usize,
        keepalive: Arc<dyn Any + Send + Sync>,
    ) -> Self {
        RegionView {
            base,
            len,
            _keepalive: keepalive,
        }
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn ptr(&self, off: usize, len: usize, align: usize) -> Result<*mut u8, OutOfBounds> {
        let end = off.checked_add(len);
        if end.is_none_or(|e| e > self.len) || !off.is_multiple_of(align) {
            return Err(OutOfBounds {
                off,
                len,
                align,
                mapped: self.len,
            });
        }
        // SAFETY: off + len <= self.len, so the result stays inside the mapping.
        Ok(unsafe { self.base.as_ptr().add(off) })
    }

    /// A 32-bit atomic at `off` (4-byte aligned).
    pub fn atomic_u32(&self, off: usize) -> Result<&AtomicU32, OutOfBounds> {
        let p = self.ptr(off, 4, 4)?;
        // SAFETY: in bounds and aligned (checked); the mapping outlives &self
        // (keepalive); AtomicU32 has the layout of u32 and every access to it
        // is atomic, so concurrent writes by the peer are not data races.
        Ok(unsafe { &*(p as *const AtomicU32) })
    }

    /// A 64-bit atomic at `off` (8-byte aligned).
    pub fn atomic_u64(&self, off: usize) -> Result<&AtomicU64, OutOfBounds> {
        let p = self.ptr(off, 8, 8)?;
        // SAFETY: as in `atomic_u32`, for an 8-aligned 8-byte word.
        Ok(unsafe { &*(p as *const AtomicU64) })
    }

    /// Copies a `T` out of the region.
    pub fn read_obj<T: Pod>(&self, off: usize) -> Result<T, OutOfBounds> {
        let p = self.ptr(off, size_of::<T>(), align_of::<T>())?;
        // SAFETY: in bounds and aligned for T; T is Pod so any bytes the peer
        // left there form a valid T; volatile because the peer may change them.
        Ok(unsafe { std::ptr::read_volatile(p as *const T) })
    }

    /// Copies a `T` into the region.
    pub fn write_obj<T: Pod>(&self, off: usize, v: &T) -> Result<(), OutOfBounds> {
        let p = self.ptr(off, size_of::<T>(), align_of::<T>())?;
        // SAFETY: in bounds and aligned for T; volatile store of plain data.
        unsafe { std::ptr::write_volatile(p as *mut T, *v) };
        Ok(())
    }

    /// Copies `dst.len()` bytes starting at `off` into private memory.
    ///
    /// The peer may be writing the same bytes; the copy may then be torn,
    /// which is why callers validate what they copied, never the region.
    pub fn read_bytes(&self, off: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        let p = self.ptr(off, dst.len(), 1)?;
        // SAFETY: source in bounds; destination is a private &mut slice that
        // cannot overlap the region (no references into the region exist).
        unsafe { std::ptr::copy_nonoverlapping(p as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the region at `off`.
    pub fn write_bytes(&self, off: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        let p = self.ptr(off, src.len(), 1)?;
        // SAFETY: destination in bounds; source is private memory and cannot
        // overlap the region.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    /// Fills `len` bytes at `off` with `byte`.
    pub fn fill(&self, off: usize, len: usize, byte: u8) -> Result<(), OutOfBounds> {
        let p = self.ptr(off, len, 1)?;
        // SAFETY: in bounds (checked).
        unsafe { std::ptr::write_bytes(p, byte, len) };
        Ok(())
    }

    /// Copies `len` bytes inside the region from `src` to `dst` (may overlap).
    pub fn copy_within(&self, src: usize, dst: usize, len: usize) -> Result<(), OutOfBounds> {
        let s = self.ptr(src, len, 1)?;
        let d = self.ptr(dst, len, 1)?;
        // SAFETY: both ranges in bounds; `copy` tolerates overlap.
        unsafe { std::ptr::copy(s as *const u8, d, len) };
        Ok(())
    }
}

/// One ring of a channel, over the region. Offsets are validated once, at
/// construction; slot accesses are masked and so always in bounds.
#[derive(Debug)]
pub struct ShmRing<T: Pod> {
    view: RegionView,
    head: usize,
    tail: usize,
    slots: usize,
    entries: u32,
    _t: std::marker::PhantomData<T>,
}

/// The request ring of a channel.
pub type RequestRing = ShmRing<Request>;
/// The response ring of a channel.
pub type ResponseRing = ShmRing<Response>;

impl<T: Pod> ShmRing<T> {
    fn new(
        view: &RegionView,
        head: usize,
        tail: usize,
        slots: usize,
        entries: u32,
    ) -> Result<Self, OutOfBounds> {
        assert!(entries.is_power_of_two() && size_of::<T>() == DESC_SIZE);
        view.atomic_u32(head)?;
        view.atomic_u32(tail)?;
        view.ptr(slots, entries as usize * DESC_SIZE, align_of::<T>())?;
        Ok(ShmRing {
            view: view.clone(),
            head,
            tail,
            slots,
            entries,
            _t: std::marker::PhantomData,
        })
    }

    fn word(&self, off: usize) -> &AtomicU32 {
        // Checked at construction; the view never shrinks.
        self.view
            .atomic_u32(off)
            .expect("ring index offset validated at construction")
    }
}

impl ShmRing<Request> {
    /// The request ring of channel `ch`.
    pub fn requests(
        view: &RegionView,
        layout: &Layout,
        ch: &ChannelOffsets,
    ) -> Result<Self, OutOfBounds> {
        Self::new(
            view,
            ch.at(CH_REQ_HEAD),
            ch.at(CH_REQ_TAIL),
            ch.req_slots,
            layout.ring_entries(),
        )
    }
}

impl ShmRing<Response> {
    /// The response ring of channel `ch`.
    pub fn responses(
        view: &RegionView,
        layout: &Layout,
        ch: &ChannelOffsets,
    ) -> Result<Self, OutOfBounds> {
        Self::new(
            view,
            ch.at(CH_RESP_HEAD),
            ch.at(CH_RESP_TAIL),
            ch.resp_slots,
            layout.ring_entries(),
        )
    }
}

impl<T: Pod> RingMem for ShmRing<T> {
    type Slot = T;
    fn capacity(&self) -> u32 {
        self.entries
    }
    fn load_head(&self, o: Ordering) -> u32 {
        self.word(self.head).load(o)
    }
    fn store_head(&self, v: u32, o: Ordering) {
        self.word(self.head).store(v, o)
    }
    fn load_tail(&self, o: Ordering) -> u32 {
        self.word(self.tail).load(o)
    }
    fn store_tail(&self, v: u32, o: Ordering) {
        self.word(self.tail).store(v, o)
    }
    fn write_slot(&self, i: u32, v: &T) {
        let off = self.slots + (i & (self.entries - 1)) as usize * DESC_SIZE;
        self.view
            .write_obj(off, v)
            .expect("slot offset validated at construction")
    }
    fn read_slot(&self, i: u32) -> T {
        let off = self.slots + (i & (self.entries - 1)) as usize * DESC_SIZE;
        self.view
            .read_obj(off)
            .expect("slot offset validated at construction")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap_view(len: usize) -> RegionView {
        let buf: Arc<Vec<AtomicU64>> = Arc::new((0..len / 8).map(|_| AtomicU64::new(0)).collect());
        let base = NonNull::new(buf.as_ptr() as *mut u8).unwrap();
        // SAFETY: the buffer is 8-aligned, valid for `len` bytes and lives as long as the
        // keepalive; we only access it through the view. (64-byte alignment
        // is not needed by these tests.)
        unsafe { RegionView::new(base, len, buf) }
    }

    #[test]
    fn accesses_are_bounds_checked() {
        let v = heap_view(256);
        assert!(v.atomic_u32(252).is_ok());
        assert!(v.atomic_u32(253).is_err(), "misaligned");
        assert!(v.atomic_u32(256).is_err());
        assert!(v.atomic_u64(usize::MAX - 3).is_err(), "overflowing offset");
        assert!(v.read_obj::<Request>(192).is_ok());
        assert!(v.read_obj::<Request>(200).is_err());
        let mut buf = [0u8; 16];
        assert!(v.read_bytes(250, &mut buf).is_err());
        v.write_bytes(10, b"hello").unwrap();
        v.read_bytes(10, &mut buf[..5]).unwrap();
        assert_eq!(&buf[..5], b"hello");
        v.copy_within(10, 100, 5).unwrap();
        v.read_bytes(100, &mut buf[..5]).unwrap();
        assert_eq!(&buf[..5], b"hello");
    }
}
