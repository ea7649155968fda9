//! Stream-ordered allocation: `cuMemAllocAsync`, `cuMemFreeAsync` and
//! memory pools.
//!
//! A pool's memory is ordinary device memory of the VM, allocated through
//! the channel like `cuMemAlloc`'s and counted against the same quota. As
//! the driver's pools do, a pool reserves memory in chunks (at least
//! [`CHUNK`], 2 MiB) and hands out pieces of them, so most allocations and
//! frees cross no channel at all; its RESERVED counters are the chunks it
//! holds, its USED ones what is allocated from them.
//!
//! Reuse and release, as the driver documents them:
//! - A piece freed with `cuMemFreeAsync` is free *in that stream's order*:
//!   the next allocation on the same stream may reuse it at once (the work
//!   before the free runs first), another stream only after a
//!   synchronization shows the free done (`cuCtxSynchronize`,
//!   `cuStreamSynchronize` of the freeing stream, or `cuEventSynchronize`
//!   or a successful `cuEventQuery` of an event recorded on it after the
//!   free). No reuse follows a stream's wait for an event
//!   (`REUSE_FOLLOW_EVENT_DEPENDENCIES` is kept, not acted on): such an
//!   allocation gets other memory, never memory still in use.
//! - Memory is handed back to the VM's quota at a synchronization
//!   (`cuCtxSynchronize`, `cuStreamSynchronize`, `cuEventSynchronize`):
//!   then each pool releases its wholly free chunks while it holds more
//!   than its release threshold (0 by default: everything free). Until then
//!   freed memory stays reserved and `cuMemAlloc` cannot have it, as on a
//!   GPU. `cuMemPoolTrimTo` releases wholly free chunks down to its bound.
//! - A pool allocation that finds the quota full first synchronizes the
//!   context and releases the pool's free chunks, then tries once more.
//!
//! Pools are process objects, like the driver's: handles are boxes of
//! this library, checked on every call. Only device 0 exists. A chunk
//! belongs to the context current when it was reserved, and serves
//! allocations made in that context only.
//!
//! IPC (where the host supports IPC of memory, see `ipc.rs`): a pool made
//! with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` reserves nothing ahead
//! (each allocation is its own, so that it has an IPC token of its own, and
//! a free returns it once the stream's work before it is done). It exports
//! as a file
//! descriptor (a memfd naming this library's pool), which another process
//! of the VM imports as a pool of its own; a pointer from the exported
//! pool exports as the 64 bytes of `cuMemPoolExportPointer`, carrying the
//! host's IPC token of its allocation, and `cuMemPoolImportPointer` opens
//! it. Freeing an imported pointer (`cuMemFreeAsync`, `cuMemFree`) closes
//! it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::c_void;
use std::sync::Mutex;

use crate::context::{out, require_current, HostKey};
use crate::memory::{device_alloc, device_free};
use crate::stream::stream_handle;
use crate::types::{err, CUdevice, CUdeviceptr, CUresult, CUstream};
use crate::{ffi_result, state};

/// `CUmemoryPool`.
pub type CUmemoryPool = *mut c_void;

/// A pool's settings and counters.
#[derive(Debug, Default, Clone)]
struct Pool {
    /// REUSE_FOLLOW_EVENT_DEPENDENCIES, REUSE_ALLOW_OPPORTUNISTIC,
    /// REUSE_ALLOW_INTERNAL_DEPENDENCIES (all 1 by default).
    reuse: [i32; 3],
    release_threshold: u64,
    used: u64,
    used_high: u64,
    /// Bytes of the chunks it holds (for a pool that reserves nothing
    /// ahead, what is allocated).
    reserved: u64,
    reserved_high: u64,
    /// Made with POSIX file-descriptor handles: it and its pointers export.
    exportable: bool,
    /// Imported from another process: only imported pointers come from it.
    imported: bool,
}

impl Pool {
    fn new() -> Pool {
        Pool {
            reuse: [1; 3],
            ..Pool::default()
        }
    }

    /// Whether it reserves chunks and hands out pieces of them.
    fn suballocates(&self) -> bool {
        !self.exportable && !self.imported
    }
}

/// Smallest chunk a pool reserves, and the granularity of larger ones (the
/// driver's pools grow by 2 MiB as well).
pub const CHUNK: u64 = 2 << 20;
/// Alignment of a piece inside its chunk (at least what `cuMemAlloc`
/// promises, 256 bytes).
const ALIGN: u64 = 512;

/// A free range of a chunk: its length and, while it was freed in one
/// stream's order and no synchronization has shown that done, that stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FreeRange {
    len: u64,
    pending: Option<Pending>,
}

/// Where a free is in stream order: its stream, and the number of the
/// latest free in the range (frees are numbered in the order they are
/// made), so that an event recorded after them shows them done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    stream: usize,
    seq: u64,
}

/// The `pending` stream of ranges freed in a destroyed stream's order: no
/// stream has it (a handle is an address or a host handle, never all ones),
/// and only a synchronization of the whole context settles it.
const RETIRED: usize = usize::MAX;

/// Device memory a pool reserved: one allocation of the VM.
#[derive(Debug)]
struct Chunk {
    /// The pool's handle (a destroyed pool's chunks are released once free).
    pool: usize,
    /// The host context it was allocated in.
    ctx: HostKey,
    size: u64,
    /// Offset → free range, disjoint, neighbours with the same `pending`
    /// merged.
    free: BTreeMap<u64, FreeRange>,
}

impl Chunk {
    /// Whether nothing in it is allocated or waiting for its stream.
    fn wholly_free(&self) -> bool {
        self.free.len() == 1
            && self.free.get(&0)
                == Some(&FreeRange {
                    len: self.size,
                    pending: None,
                })
    }

    /// Takes `need` bytes from the lowest range that may serve `stream`.
    fn take(&mut self, need: u64, stream: usize) -> Option<u64> {
        let (&off, &r) = self
            .free
            .iter()
            .find(|(_, r)| r.len >= need && r.pending.is_none_or(|p| p.stream == stream))?;
        self.free.remove(&off);
        if r.len > need {
            self.free.insert(
                off + need,
                FreeRange {
                    len: r.len - need,
                    pending: r.pending,
                },
            );
        }
        Some(off)
    }

    /// Returns `off..off + len`, free in `pending`'s order.
    fn give(&mut self, off: u64, len: u64, pending: Option<Pending>) {
        self.free.insert(off, FreeRange { len, pending });
        self.merge();
    }

    /// Marks what was pending in `stream` (every stream: `None`) free for
    /// all, if freed no later than free number `upto`.
    fn settle(&mut self, stream: Option<usize>, upto: u64) {
        for r in self.free.values_mut() {
            if r.pending
                .is_some_and(|p| stream.is_none_or(|s| s == p.stream) && p.seq <= upto)
            {
                r.pending = None;
            }
        }
        self.merge();
    }

    /// What is pending in `stream`'s order waits for a synchronization of
    /// the whole context instead.
    fn retire(&mut self, stream: usize) {
        for p in self.free.values_mut().filter_map(|r| r.pending.as_mut()) {
            if p.stream == stream {
                p.stream = RETIRED;
            }
        }
        self.merge();
    }

    fn merge(&mut self) {
        let mut merged: BTreeMap<u64, FreeRange> = BTreeMap::new();
        for (off, r) in std::mem::take(&mut self.free) {
            if let Some((&prev, last)) = merged.iter_mut().next_back() {
                let same = match (last.pending, r.pending) {
                    (None, None) => true,
                    (Some(a), Some(b)) => a.stream == b.stream,
                    _ => false,
                };
                if prev + last.len == off && same {
                    last.len += r.len;
                    last.pending = last.pending.zip(r.pending).map(|(a, b)| Pending {
                        stream: a.stream,
                        seq: a.seq.max(b.seq),
                    });
                    continue;
                }
            }
            merged.insert(off, r);
        }
        self.free = merged;
    }
}

struct Pools {
    /// Live pools by handle.
    pools: HashMap<usize, Pool>,
    /// Handles created by `cuMemPoolCreate` (the default pool is not).
    created: HashSet<usize>,
    /// The device's current pool (`cuDeviceSetMemPool`), if not the default.
    current: Option<usize>,
    /// Allocations from pools: address → (pool, bytes).
    allocs: HashMap<u64, (usize, u64)>,
    /// Chunks of suballocating pools by base address.
    chunks: BTreeMap<u64, Chunk>,
    /// The number of the latest free in stream order.
    frees: u64,
    /// Events recorded outside captures: event → (its stream, the number
    /// of the latest free then), for `cuEventSynchronize` and
    /// `cuEventQuery` to show those frees done.
    events: HashMap<usize, (usize, u64)>,
    /// Pointers imported from other processes: address → the opened
    /// allocation's base.
    imports: HashMap<u64, u64>,
    /// The last created pool's handle (odd numbers, never reused while a
    /// pool holds them).
    next: usize,
}

impl Pools {
    /// No pools, not even the default one.
    fn empty() -> Pools {
        Pools {
            pools: HashMap::new(),
            created: HashSet::new(),
            current: None,
            allocs: HashMap::new(),
            chunks: BTreeMap::new(),
            frees: 0,
            events: HashMap::new(),
            imports: HashMap::new(),
            next: 0,
        }
    }

    /// Adds a created (or imported) pool; returns its handle: an odd
    /// number from a counter, never the default pool's (a static's
    /// address) nor a live pool's.
    fn add(&mut self, pool: Pool) -> usize {
        loop {
            self.next = self.next.wrapping_add(2) | 1;
            if self.next != default_pool() && !self.pools.contains_key(&self.next) {
                break;
            }
        }
        let h = self.next;
        self.pools.insert(h, pool);
        self.created.insert(h);
        h
    }

    /// A piece of `need` bytes for `size` requested from one of `pool`'s
    /// chunks in context `ctx`, reusable by `stream`; counted as used.
    fn take_piece(
        &mut self,
        pool: usize,
        ctx: HostKey,
        stream: usize,
        need: u64,
        size: u64,
    ) -> Option<u64> {
        let (base, off) = self
            .chunks
            .iter_mut()
            .filter(|(_, c)| c.pool == pool && c.ctx == ctx)
            .find_map(|(&base, c)| c.take(need, stream).map(|off| (base, off)))?;
        let ptr = base + off;
        self.count_alloc(pool, ptr, size);
        Some(ptr)
    }

    fn count_alloc(&mut self, pool: usize, ptr: u64, size: u64) {
        if let Some(pl) = self.pools.get_mut(&pool) {
            pl.used = pl.used.saturating_add(size);
            pl.used_high = pl.used_high.max(pl.used);
            pl.reserved_high = pl.reserved_high.max(pl.reserved);
        }
        self.allocs.insert(ptr, (pool, size));
    }

    /// The chunk holding `ptr`, by its base.
    fn chunk_of(&self, ptr: u64) -> Option<u64> {
        let (&base, c) = self.chunks.range(..=ptr).next_back()?;
        (ptr < base + c.size).then_some(base)
    }

    /// Gives a piece back to its chunk, free in `stream`'s order (`None`:
    /// free for all); `None` if `ptr` is not a piece of a chunk.
    fn give_back(&mut self, ptr: u64, stream: Option<usize>) -> Option<Result<(), CUresult>> {
        let base = self.chunk_of(ptr)?;
        let Some((pool, bytes)) = self.allocs.remove(&ptr) else {
            // Inside a chunk but not a live piece: freed already, or not
            // an address an allocation returned.
            return Some(Err(err::INVALID_VALUE));
        };
        if let Some(pl) = self.pools.get_mut(&pool) {
            pl.used = pl.used.saturating_sub(bytes);
        }
        self.frees += 1;
        let pending = stream.map(|stream| Pending {
            stream,
            seq: self.frees,
        });
        let c = self.chunks.get_mut(&base).expect("chunk_of found it");
        c.give(ptr - base, piece_len(bytes), pending);
        Some(Ok(()))
    }

    /// After a synchronization of `stream` (every stream: `None`) in
    /// `ctx`: what was freed in its order, up to free number `upto`, is
    /// free for every stream.
    fn settle(&mut self, ctx: HostKey, stream: Option<usize>, upto: u64) {
        for c in self.chunks.values_mut().filter(|c| c.ctx == ctx) {
            c.settle(stream, upto);
        }
    }

    /// Takes out of the books the wholly free chunks to hand back to the
    /// VM and returns their bases: those of `bound`'s pool while it holds
    /// more than `bound`'s bytes, or (no `bound`) of every pool above its
    /// release threshold; and those of destroyed pools.
    fn release(&mut self, bound: Option<(usize, u64)>) -> Vec<u64> {
        let free: Vec<(u64, usize, u64)> = self
            .chunks
            .iter()
            .filter(|(_, c)| c.wholly_free() && bound.is_none_or(|(h, _)| h == c.pool))
            .map(|(&b, c)| (b, c.pool, c.size))
            .collect();
        let mut gone = Vec::new();
        for (base, h, size) in free {
            let release = self.pools.get(&h).is_none_or(|pl| {
                pl.reserved > bound.map_or(pl.release_threshold, |(_, keep)| keep)
            });
            if release {
                self.chunks.remove(&base);
                if let Some(pl) = self.pools.get_mut(&h) {
                    pl.reserved = pl.reserved.saturating_sub(size);
                }
                gone.push(base);
            }
        }
        gone
    }

    /// Whether `pool` holds any chunk in `ctx` with free room.
    fn has_room(&self, pool: usize, ctx: HostKey) -> bool {
        self.chunks
            .values()
            .any(|c| c.pool == pool && c.ctx == ctx && !c.free.is_empty())
    }
}

/// Bytes a piece of `size` requested takes in its chunk.
fn piece_len(size: u64) -> u64 {
    size.max(1).div_ceil(ALIGN).saturating_mul(ALIGN)
}

/// Hands chunks back to the VM (their bookkeeping is gone already).
fn free_chunks(bases: Vec<u64>) {
    for b in bases {
        // A failure here (the channel gone, the context's memory freed
        // with it) leaves nothing of ours to clean up.
        let _ = device_free(b);
    }
}

/// After a synchronization of `stream` (`None`: the whole context) in the
/// current context: what was freed in it is free for every stream, and
/// pools above their release threshold hand their wholly free chunks
/// back.
pub fn synchronized(stream: Option<CUstream>) {
    let ctx = crate::context::host_of_current();
    let gone = with(|p| {
        p.settle(ctx, stream.map(|s| s as usize), u64::MAX);
        Ok(p.release(None))
    });
    if let Ok(g) = gone {
        free_chunks(g);
    }
}

/// After `cuStreamDestroy`: what was freed in that stream's order and not
/// yet shown done waits for a synchronization of the whole context, so
/// that a later stream given the same handle cannot take it while the
/// destroyed stream's work may still use it.
pub fn stream_destroyed(s: CUstream) {
    let _ = with(|p| {
        for c in p.chunks.values_mut() {
            c.retire(s as usize);
        }
        Ok(())
    });
}

/// `cuEventRecord` of `e` on stream `s` (outside a capture): the frees in
/// `s`'s order made so far are done once `e` is.
pub fn event_recorded(e: usize, s: CUstream) {
    let _ = with(|p| {
        let upto = p.frees;
        p.events.insert(e, (s as usize, upto));
        Ok(())
    });
}

/// `cuEventDestroy`.
pub fn event_destroyed(e: usize) {
    let _ = with(|p| Ok(p.events.remove(&e)));
}

/// After `cuEventSynchronize` of `e`, or `cuEventQuery` finding it done:
/// what its stream freed before it was recorded is free for every stream,
/// and pools above their release threshold hand wholly free chunks back.
pub fn event_done(e: usize) {
    let ctx = crate::context::host_of_current();
    let gone = with(|p| {
        if let Some(&(stream, upto)) = p.events.get(&e) {
            p.settle(ctx, Some(stream), upto);
        }
        Ok(p.release(None))
    });
    if let Ok(g) = gone {
        free_chunks(g);
    }
}

/// Forgets the chunks and pieces of a destroyed context (its host context
/// freed the memory).
pub fn forget_context(key: HostKey) {
    let _ = with(|p| {
        let gone: Vec<(u64, usize, u64)> = p
            .chunks
            .iter()
            .filter(|(_, c)| c.ctx == key)
            .map(|(&b, c)| (b, c.pool, c.size))
            .collect();
        for (base, pool, size) in gone {
            p.chunks.remove(&base);
            if let Some(pl) = p.pools.get_mut(&pool) {
                pl.reserved = pl.reserved.saturating_sub(size);
            }
            let inside: Vec<u64> = p
                .allocs
                .keys()
                .copied()
                .filter(|&a| a >= base && a < base + size)
                .collect();
            for a in inside {
                release(p, a);
            }
        }
        Ok(())
    });
}

/// `cuMemFree` of a piece of a pool's chunk: after the context's work
/// (which may still use it), free for every stream. `None` if `ptr` is
/// not such a piece.
pub fn free_piece_now(ptr: CUdeviceptr) -> Option<Result<(), CUresult>> {
    let inside = with(|p| Ok(p.chunk_of(ptr).is_some())).unwrap_or(false);
    if !inside {
        return None;
    }
    if let Err(e) = state::with_sync(|cu| cu.ctx_synchronize()) {
        return Some(Err(e));
    }
    with(|p| Ok(p.give_back(ptr, None))).ok().flatten()
}

static POOLS: Mutex<Option<Pools>> = Mutex::new(None);

/// The default pool's handle: the address of a static, so never a created
/// pool's.
static DEFAULT_POOL: u8 = 0;

fn default_pool() -> usize {
    &DEFAULT_POOL as *const u8 as usize
}

fn with<T>(f: impl FnOnce(&mut Pools) -> Result<T, CUresult>) -> Result<T, CUresult> {
    let mut g = POOLS.lock().map_err(|_| err::UNKNOWN)?;
    let p = g.get_or_insert_with(|| {
        let mut p = Pools::empty();
        p.pools.insert(default_pool(), Pool::new());
        p
    });
    f(p)
}

fn device0(dev: CUdevice) -> Result<(), CUresult> {
    state::device()?;
    if dev == 0 {
        Ok(())
    } else {
        Err(err::INVALID_DEVICE)
    }
}

/// Forgets a pool allocation freed by `cuMemFree` (synchronously).
pub fn forget(ptr: CUdeviceptr) {
    let _ = with(|p| {
        release(p, ptr);
        Ok(())
    });
}

/// Takes an allocation of its own (or a piece whose chunk is gone) out of
/// the books.
fn release(p: &mut Pools, ptr: CUdeviceptr) {
    if let Some((pool, bytes)) = p.allocs.remove(&ptr) {
        if let Some(pool) = p.pools.get_mut(&pool) {
            pool.used = pool.used.saturating_sub(bytes);
            if !pool.suballocates() {
                pool.reserved = pool.reserved.saturating_sub(bytes);
            }
        }
    }
}

fn alloc_from(
    pool: usize,
    dptr: *mut CUdeviceptr,
    size: usize,
    stream: CUstream,
) -> Result<(), CUresult> {
    if dptr.is_null() {
        return Err(err::INVALID_VALUE);
    }
    let suballocates = with(|p| {
        p.pools
            .get(&pool)
            .map(Pool::suballocates)
            .ok_or(err::INVALID_VALUE)
    })?;
    let ptr = if suballocates {
        piece(pool, size as u64, stream as usize)?
    } else {
        own_allocation(pool, size as u64)?
    };
    // SAFETY: non-null slot provided by the caller.
    unsafe { out(dptr, ptr) }
}

/// An allocation of its own for a pool that reserves nothing ahead.
fn own_allocation(pool: usize, size: u64) -> Result<u64, CUresult> {
    let ptr = device_alloc(size)?;
    book(pool, ptr, size, |p| p.count_alloc(pool, ptr, size))
}

/// Books `bytes` of device memory just allocated at `base` as reserved by
/// `pool`, with what `place` records; frees it again if the pool was
/// destroyed meanwhile by another thread.
fn book(
    pool: usize,
    base: u64,
    bytes: u64,
    place: impl FnOnce(&mut Pools),
) -> Result<u64, CUresult> {
    let booked = with(|p| {
        let pl = p.pools.get_mut(&pool).ok_or(err::INVALID_VALUE)?;
        pl.reserved = pl.reserved.saturating_add(bytes);
        place(p);
        Ok(())
    });
    if let Err(e) = booked {
        let _ = device_free(base);
        return Err(e);
    }
    Ok(base)
}

/// A piece of one of `pool`'s chunks, reserving a new chunk if none has
/// room; if the VM's quota is full, the pool's free chunks are handed back
/// first (after synchronizing the context) and the reservation tried once
/// more.
fn piece(pool: usize, size: u64, stream: usize) -> Result<u64, CUresult> {
    require_current()?;
    if size == 0 {
        return Err(err::INVALID_VALUE);
    }
    let need = piece_len(size);
    let ctx = crate::context::host_of_current();
    if let Some(ptr) = with(|p| Ok(p.take_piece(pool, ctx, stream, need, size)))? {
        return Ok(ptr);
    }
    let chunk = need.div_ceil(CHUNK).saturating_mul(CHUNK);
    let (base, got) = match reserve(chunk, need) {
        Err(err::OUT_OF_MEMORY) if with(|p| Ok(p.has_room(pool, ctx)))? => {
            state::with_sync(|cu| cu.ctx_synchronize())?;
            let gone = with(|p| {
                p.settle(ctx, None, u64::MAX);
                Ok(p.release(Some((pool, 0))))
            })?;
            free_chunks(gone);
            if let Some(ptr) = with(|p| Ok(p.take_piece(pool, ctx, stream, need, size)))? {
                return Ok(ptr);
            }
            reserve(chunk, need)?
        }
        r => r?,
    };
    book(pool, base, got, |p| {
        let mut free = BTreeMap::new();
        if got > need {
            free.insert(
                need,
                FreeRange {
                    len: got - need,
                    pending: None,
                },
            );
        }
        p.chunks.insert(
            base,
            Chunk {
                pool,
                ctx,
                size: got,
                free,
            },
        );
        p.count_alloc(pool, base, size);
    })
}

/// Reserves a chunk of `chunk` bytes, or of just `need` if the quota has
/// no room for the rounded size; its base and size.
fn reserve(chunk: u64, need: u64) -> Result<(u64, u64), CUresult> {
    match device_alloc(chunk) {
        Ok(b) => Ok((b, chunk)),
        Err(err::OUT_OF_MEMORY) if chunk > need => device_alloc(need).map(|b| (b, need)),
        Err(e) => Err(e),
    }
}

/// INVALID_VALUE unless `pool` is a live pool's handle.
fn known(pool: usize) -> Result<(), CUresult> {
    with(|p| {
        if p.pools.contains_key(&pool) {
            Ok(())
        } else {
            Err(err::INVALID_VALUE)
        }
    })
}

fn current_pool() -> Result<usize, CUresult> {
    with(|p| Ok(p.current.unwrap_or_else(default_pool)))
}

/// `cuMemAllocAsync`: from the device's current pool.
#[no_mangle]
pub extern "C" fn cuMemAllocAsync(dptr: *mut CUdeviceptr, size: usize, s: CUstream) -> CUresult {
    let s = crate::stream::resolve(s);
    // In a capture: an allocation node of the graph.
    if let Some(r) = crate::graph::captured_alloc(s, size, dptr) {
        return r;
    }
    ffi_result(|| alloc_from(current_pool()?, dptr, size, s))
}

/// `cuMemAllocAsync_ptsz`.
#[no_mangle]
pub extern "C" fn cuMemAllocAsync_ptsz(
    dptr: *mut CUdeviceptr,
    size: usize,
    s: CUstream,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuMemAllocAsync(dptr, size, s)
}

/// `cuMemAllocFromPoolAsync`.
#[no_mangle]
pub extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    s: CUstream,
) -> CUresult {
    let s = crate::stream::resolve(s);
    if let Some(r) = crate::graph::captured_alloc(s, size, dptr) {
        return r;
    }
    ffi_result(|| alloc_from(pool as usize, dptr, size, s))
}

/// `cuMemAllocFromPoolAsync_ptsz`.
#[no_mangle]
pub extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: CUmemoryPool,
    s: CUstream,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuMemAllocFromPoolAsync(dptr, size, pool, s)
}

/// `cuMemFreeAsync`: once the work already queued in the stream is done.
#[no_mangle]
pub extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, s: CUstream) -> CUresult {
    let s = crate::stream::resolve(s);
    ffi_result(|| {
        state::device()?;
        if dptr == 0 {
            return Err(err::INVALID_VALUE);
        }
        if !crate::memory::is_device(dptr) {
            return Err(err::INVALID_VALUE);
        }
        // In a capture: a free node (of a graph allocation).
        if let Some(r) = crate::graph::captured_free(s, dptr) {
            return match r {
                err::SUCCESS => Ok(()),
                e => Err(e),
            };
        }
        if let Some(r) = crate::graph_mem::end(dptr, Some(s)) {
            return match r {
                err::SUCCESS => Ok(()),
                e => Err(e),
            };
        }
        // A piece of a chunk: free in the stream's order, no round trip.
        if let Some(r) = with(|p| Ok(p.give_back(dptr, Some(s as usize))))? {
            return r;
        }
        state::with(|cu| cu.stream_synchronize(stream_handle(s)))?;
        if let Some(r) = free_imported(dptr) {
            return r;
        }
        device_free(dptr)?;
        with(|p| {
            release(p, dptr);
            Ok(())
        })
    })
}

/// `cuMemFreeAsync_ptsz`.
#[no_mangle]
pub extern "C" fn cuMemFreeAsync_ptsz(dptr: CUdeviceptr, s: CUstream) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuMemFreeAsync(dptr, s)
}

/// `cuDeviceGetDefaultMemPool`.
#[no_mangle]
pub extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut CUmemoryPool, dev: CUdevice) -> CUresult {
    ffi_result(|| {
        device0(dev)?;
        with(|_| Ok(()))?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pool, default_pool() as CUmemoryPool) }
    })
}

/// `cuDeviceGetMemPool`: the pool `cuMemAllocAsync` uses.
#[no_mangle]
pub extern "C" fn cuDeviceGetMemPool(pool: *mut CUmemoryPool, dev: CUdevice) -> CUresult {
    ffi_result(|| {
        device0(dev)?;
        let p = current_pool()?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pool, p as CUmemoryPool) }
    })
}

/// `cuDeviceSetMemPool`.
#[no_mangle]
pub extern "C" fn cuDeviceSetMemPool(dev: CUdevice, pool: CUmemoryPool) -> CUresult {
    ffi_result(|| {
        device0(dev)?;
        with(|p| {
            let h = pool as usize;
            if !p.pools.contains_key(&h) {
                return Err(err::INVALID_VALUE);
            }
            p.current = (h != default_pool()).then_some(h);
            Ok(())
        })
    })
}

/// `CUmemPoolProps`' leading fields (the rest is reserved or Windows-only).
#[repr(C)]
struct PoolProps {
    alloc_type: u32,
    handle_types: u32,
    location_type: u32,
    location_id: i32,
}

/// `cuMemPoolCreate`: pinned device memory of device 0, no IPC handles.
///
/// # Safety
/// `props` must be null or point to a `CUmemPoolProps`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(
    pool: *mut CUmemoryPool,
    props: *const c_void,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if pool.is_null() || props.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a CUmemPoolProps, which
        // begins with these four 32-bit fields.
        let pr = unsafe { &*props.cast::<PoolProps>() };
        // CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_LOCATION_TYPE_DEVICE.
        if pr.alloc_type != 1 || pr.location_type != 1 {
            return Err(err::INVALID_VALUE);
        }
        if pr.location_id != 0 {
            return Err(err::INVALID_DEVICE);
        }
        // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR only.
        if pr.handle_types & !POSIX_FD != 0 {
            return Err(err::NOT_SUPPORTED);
        }
        let h = with(|p| {
            Ok(p.add(Pool {
                exportable: pr.handle_types == POSIX_FD,
                ..Pool::new()
            }))
        })?;
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(pool, h as CUmemoryPool) }
    })
}

/// `cuMemPoolDestroy`: a created pool; its outstanding allocations stay
/// valid until freed.
#[no_mangle]
pub extern "C" fn cuMemPoolDestroy(pool: CUmemoryPool) -> CUresult {
    ffi_result(|| {
        state::device()?;
        with(|p| {
            let h = pool as usize;
            if !p.created.remove(&h) {
                return Err(err::INVALID_VALUE);
            }
            p.pools.remove(&h);
            if p.current == Some(h) {
                p.current = None;
            }
            // Its wholly free chunks go now, the others once their pieces
            // are freed and a synchronization shows it.
            Ok(p.release(Some((h, 0))))
        })
        .map(free_chunks)
    })
}

/// `cuMemPoolTrimTo`: hands wholly free chunks back while the pool holds
/// more than `keep` bytes. Memory freed in a stream's order that no
/// synchronization has shown done stays.
#[no_mangle]
pub extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, keep: usize) -> CUresult {
    ffi_result(|| {
        state::device()?;
        known(pool as usize)?;
        let h = pool as usize;
        let gone = with(|p| Ok(p.release(Some((h, keep as u64)))))?;
        free_chunks(gone);
        Ok(())
    })
}

/// `CUmemPool_attribute` values.
mod attr {
    pub const REUSE_FOLLOW_EVENT_DEPENDENCIES: i32 = 1;
    pub const REUSE_ALLOW_INTERNAL_DEPENDENCIES: i32 = 3;
    pub const RELEASE_THRESHOLD: i32 = 4;
    pub const RESERVED_MEM_CURRENT: i32 = 5;
    pub const RESERVED_MEM_HIGH: i32 = 6;
    pub const USED_MEM_CURRENT: i32 = 7;
    pub const USED_MEM_HIGH: i32 = 8;
}

/// `cuMemPoolSetAttribute`: the reuse flags and release threshold; the
/// high-water marks may be reset to 0.
///
/// # Safety
/// `value` must point to an `int` (reuse flags) or a `cuuint64_t`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: CUmemoryPool,
    a: i32,
    value: *const c_void,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if value.is_null() {
            return Err(err::INVALID_VALUE);
        }
        with(|p| {
            let pl = p
                .pools
                .get_mut(&(pool as usize))
                .ok_or(err::INVALID_VALUE)?;
            match a {
                attr::REUSE_FOLLOW_EVENT_DEPENDENCIES..=attr::REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                    // SAFETY: the caller passes an int for these.
                    pl.reuse[(a - 1) as usize] = unsafe { value.cast::<i32>().read_unaligned() };
                }
                attr::RELEASE_THRESHOLD => {
                    // SAFETY: the caller passes a cuuint64_t for this one.
                    pl.release_threshold = unsafe { value.cast::<u64>().read_unaligned() };
                }
                attr::RESERVED_MEM_HIGH | attr::USED_MEM_HIGH => {
                    // SAFETY: as above; only 0 (a reset) is allowed.
                    if unsafe { value.cast::<u64>().read_unaligned() } != 0 {
                        return Err(err::INVALID_VALUE);
                    }
                    if a == attr::USED_MEM_HIGH {
                        pl.used_high = pl.used;
                    } else {
                        pl.reserved_high = pl.reserved;
                    }
                }
                _ => return Err(err::INVALID_VALUE),
            }
            Ok(())
        })
    })
}

/// `cuMemPoolGetAttribute`.
///
/// # Safety
/// `value` must be writable as an `int` (reuse flags) or a `cuuint64_t`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: CUmemoryPool,
    a: i32,
    value: *mut c_void,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let pl = with(|p| {
            p.pools
                .get(&(pool as usize))
                .cloned()
                .ok_or(err::INVALID_VALUE)
        })?;
        let wide = match a {
            attr::REUSE_FOLLOW_EVENT_DEPENDENCIES..=attr::REUSE_ALLOW_INTERNAL_DEPENDENCIES => {
                // SAFETY: the caller passes a writable int (checked for null).
                return unsafe { out(value.cast::<i32>(), pl.reuse[(a - 1) as usize]) };
            }
            attr::RELEASE_THRESHOLD => pl.release_threshold,
            attr::RESERVED_MEM_CURRENT => pl.reserved,
            attr::USED_MEM_CURRENT => pl.used,
            attr::RESERVED_MEM_HIGH => pl.reserved_high,
            attr::USED_MEM_HIGH => pl.used_high,
            _ => return Err(err::INVALID_VALUE),
        };
        // SAFETY: the caller passes a writable cuuint64_t (checked for null).
        unsafe { out(value.cast::<u64>(), wide) }
    })
}

/// `CUmemAccessDesc`: a location and its access flags.
#[repr(C)]
struct AccessDesc {
    location_type: u32,
    location_id: i32,
    flags: u32,
}

/// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
const PROT_READWRITE: u32 = 3;

/// `cuMemPoolSetAccess`: device 0 always has read-write access; asking for
/// it again succeeds, anything else is refused.
///
/// # Safety
/// `map` must point to `count` `CUmemAccessDesc`s.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAccess(
    pool: CUmemoryPool,
    map: *const c_void,
    count: usize,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        known(pool as usize)?;
        if count > 0 && map.is_null() {
            return Err(err::INVALID_VALUE);
        }
        for i in 0..count {
            // SAFETY: the caller passes `count` descriptors.
            let d = unsafe { &*map.cast::<AccessDesc>().add(i) };
            if d.location_type != 1 || d.location_id != 0 || d.flags != PROT_READWRITE {
                return Err(err::INVALID_VALUE);
            }
        }
        Ok(())
    })
}

/// `cuMemPoolGetAccess`: read-write from device 0.
///
/// # Safety
/// `location` must point to a `CUmemLocation`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAccess(
    flags: *mut u32,
    pool: CUmemoryPool,
    location: *const c_void,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        known(pool as usize)?;
        if location.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; a CUmemLocation is (type, id), two 32-bit fields.
        let (ty, id) = unsafe {
            let l = location.cast::<u32>();
            (l.read_unaligned(), l.add(1).read_unaligned() as i32)
        };
        let v = if ty == 1 && id == 0 {
            PROT_READWRITE
        } else {
            0
        };
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(flags, v) }
    })
}

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const POSIX_FD: u32 = 1;
/// What this library's exported pools and pointers start with.
const POOL_MAGIC: [u8; 8] = *b"fgpupool";
const PTR_MAGIC: [u8; 8] = *b"fgpupptr";

/// Closes `ptr` if it was imported from another process's pool; `None`
/// if it was not.
pub fn free_imported(ptr: CUdeviceptr) -> Option<Result<(), CUresult>> {
    let base = with(|p| Ok(p.imports.remove(&ptr))).ok().flatten()?;
    Some(crate::ipc::close(base))
}

/// `cuMemPoolExportToShareableHandle`: a file descriptor (a memfd naming
/// this pool) for another process of the VM.
#[no_mangle]
pub extern "C" fn cuMemPoolExportToShareableHandle(
    handle: *mut c_void,
    pool: CUmemoryPool,
    kind: u32,
    flags: u64,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if handle.is_null() || kind != POSIX_FD || flags != 0 {
            return Err(err::INVALID_VALUE);
        }
        let exportable = with(|p| Ok(p.pools.get(&(pool as usize)).map(|pl| pl.exportable)))?;
        if exportable != Some(true) {
            return Err(err::INVALID_VALUE);
        }
        let mut text = [0u8; 24];
        text[..8].copy_from_slice(&POOL_MAGIC);
        text[8..16].copy_from_slice(&(pool as u64).to_le_bytes());
        text[16..24].copy_from_slice(&u64::from(std::process::id()).to_le_bytes());
        let fd = crate::memfd::with_bytes(c"fairgpu-mempool", &text).ok_or(err::OUT_OF_MEMORY)?;
        // SAFETY: the caller passes room for an `int` (POSIX handle type).
        unsafe { handle.cast::<i32>().write(fd) };
        Ok(())
    })
}

/// `cuMemPoolImportFromShareableHandle`: a pool of this process standing
/// for the exporter's, which imported pointers come from.
#[no_mangle]
pub extern "C" fn cuMemPoolImportFromShareableHandle(
    pool_out: *mut CUmemoryPool,
    handle: *mut c_void,
    kind: u32,
    flags: u64,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if pool_out.is_null() || kind != POSIX_FD || flags != 0 {
            return Err(err::INVALID_VALUE);
        }
        let fd = i32::try_from(handle as usize).map_err(|_| err::INVALID_VALUE)?;
        let mut text = [0u8; 24];
        if !crate::memfd::read_at(fd, &mut text) || text[..8] != POOL_MAGIC {
            return Err(err::INVALID_VALUE);
        }
        let h = with(|p| {
            Ok(p.add(Pool {
                imported: true,
                ..Pool::new()
            }))
        })?;
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(pool_out, h as CUmemoryPool) }
    })
}

/// `CUmemPoolPtrExportData`: 64 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PoolPtrExportData {
    reserved: [u8; 64],
}

/// `cuMemPoolExportPointer`: a pointer of an exportable pool, for another
/// process of the VM.
#[no_mangle]
pub extern "C" fn cuMemPoolExportPointer(
    data: *mut PoolPtrExportData,
    ptr: CUdeviceptr,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if data.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let exportable = with(|p| {
            Ok(p.allocs
                .get(&ptr)
                .and_then(|(pool, _)| p.pools.get(pool))
                .is_some_and(|pl| pl.exportable))
        })?;
        if !exportable {
            return Err(err::INVALID_VALUE);
        }
        let (token, base, size) = state::with(|cu| cu.ipc_get_mem_handle(ptr))?;
        let mut d = [0u8; 64];
        d[..8].copy_from_slice(&PTR_MAGIC);
        d[8..16].copy_from_slice(&token.to_le_bytes());
        d[16..24].copy_from_slice(&base.to_le_bytes());
        d[24..32].copy_from_slice(&size.to_le_bytes());
        d[32..40].copy_from_slice(&(ptr - base).to_le_bytes());
        // SAFETY: caller passes writable export data (checked for null).
        unsafe { out(data, PoolPtrExportData { reserved: d }) }
    })
}

/// `cuMemPoolImportPointer`: opens another process's pool pointer, from
/// a pool imported from its exporter.
#[no_mangle]
pub extern "C" fn cuMemPoolImportPointer(
    ptr_out: *mut CUdeviceptr,
    pool: CUmemoryPool,
    data: *const PoolPtrExportData,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if ptr_out.is_null() || data.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let imported = with(|p| Ok(p.pools.get(&(pool as usize)).is_some_and(|pl| pl.imported)))?;
        // SAFETY: non-null; the caller passes the exporter's 64 bytes.
        let d = unsafe { data.read_unaligned() }.reserved;
        if !imported || d[..8] != PTR_MAGIC {
            return Err(err::INVALID_VALUE);
        }
        let word = |i: usize| u64::from_le_bytes(d[i..i + 8].try_into().expect("8 bytes"));
        let (token, offset) = (word(8), word(32));
        let base = crate::ipc::open_token(token)?;
        let ptr = base + offset;
        with(|p| {
            p.imports.insert(ptr, base);
            Ok(())
        })?;
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(ptr_out, ptr) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pending in `stream`'s order, as free number `seq`.
    fn at(stream: usize, seq: u64) -> Option<Pending> {
        Some(Pending { stream, seq })
    }

    fn chunk(size: u64) -> Chunk {
        let mut free = BTreeMap::new();
        free.insert(
            0,
            FreeRange {
                len: size,
                pending: None,
            },
        );
        Chunk {
            pool: 1,
            ctx: 0,
            size,
            free,
        }
    }

    fn pools_with(pool: Pool) -> (Pools, usize) {
        let mut p = Pools::empty();
        let h = p.add(pool);
        (p, h)
    }

    /// A pool with `n` wholly free chunks of [`CHUNK`] bytes at 4 GiB,
    /// 8 GiB, ...
    fn pool_with_chunks(n: u64) -> (Pools, usize) {
        let (mut p, h) = pools_with(Pool::new());
        for i in 0..n {
            p.chunks.insert(
                (i + 1) << 32,
                Chunk {
                    pool: h,
                    ..chunk(CHUNK)
                },
            );
        }
        p.pools.get_mut(&h).unwrap().reserved = n * CHUNK;
        (p, h)
    }

    #[test]
    fn a_piece_freed_in_a_streams_order_serves_that_stream_only_until_settled() {
        let mut c = chunk(4096);
        assert_eq!(c.take(1024, 7), Some(0));
        assert_eq!(c.take(1024, 7), Some(1024));
        c.give(0, 1024, at(7, 1));
        // Stream 8 may not have it: stream 7's work before the free may
        // still use it.
        assert_eq!(c.take(1024, 8), Some(2048));
        // Stream 7 may.
        assert_eq!(c.take(1024, 7), Some(0));
        c.give(0, 1024, at(7, 1));
        c.settle(Some(9), u64::MAX);
        assert_eq!(c.free.get(&0).map(|r| r.pending), Some(at(7, 1)));
        c.settle(Some(7), u64::MAX);
        assert_eq!(c.take(1024, 8), Some(0));
    }

    #[test]
    fn an_event_shows_done_only_the_frees_made_before_it_was_recorded() {
        let (mut p, h) = pool_with_chunks(1);
        let half = CHUNK / 2;
        let a = p.take_piece(h, 0, 4, half, half).unwrap();
        let b = p.take_piece(h, 0, 4, half, half).unwrap();
        p.give_back(a, Some(4)).unwrap().unwrap();
        let upto = p.frees;
        p.give_back(b, Some(4)).unwrap().unwrap();
        let c = p.chunks.values_mut().next().unwrap();
        // Merged into one range, it is as late as its latest free.
        c.settle(Some(4), upto);
        assert!(!c.wholly_free());
        assert_eq!(c.take(1024, 5), None);
        c.settle(Some(4), upto + 1);
        assert!(c.wholly_free());
    }

    #[test]
    fn what_a_destroyed_stream_freed_waits_for_a_whole_synchronization() {
        let mut c = chunk(2048);
        assert_eq!(c.take(2048, 7), Some(0));
        c.give(0, 2048, at(7, 1));
        c.retire(7);
        // A new stream with the destroyed one's handle does not get it,
        // nor does a synchronization of that handle settle it.
        assert_eq!(c.take(1024, 7), None);
        c.settle(Some(7), u64::MAX);
        assert_eq!(c.take(1024, 7), None);
        c.settle(None, u64::MAX);
        assert_eq!(c.take(1024, 7), Some(0));
    }

    #[test]
    fn freed_neighbours_merge_and_a_chunk_is_wholly_free_only_when_settled() {
        let mut c = chunk(4096);
        let a = c.take(2048, 1).unwrap();
        let b = c.take(2048, 1).unwrap();
        assert!(c.free.is_empty());
        c.give(b, 2048, at(1, 1));
        c.give(a, 2048, at(2, 1));
        // Different streams: two ranges, not one, and not wholly free.
        assert_eq!(c.free.len(), 2);
        assert!(!c.wholly_free());
        c.settle(None, u64::MAX);
        assert_eq!(c.free.len(), 1);
        assert!(c.wholly_free());
        assert_eq!(c.take(4096, 5), Some(0));
        assert_eq!(c.take(1, 5), None);
    }

    #[test]
    fn pieces_are_aligned_and_counted_as_requested() {
        assert_eq!(piece_len(1), ALIGN);
        assert_eq!(piece_len(ALIGN), ALIGN);
        assert_eq!(piece_len(ALIGN + 1), 2 * ALIGN);
        let (mut p, h) = pool_with_chunks(1);
        let x = p.take_piece(h, 0, 3, piece_len(100), 100).unwrap();
        let y = p.take_piece(h, 0, 3, piece_len(100), 100).unwrap();
        assert_eq!((x, y), (1 << 32, (1 << 32) + ALIGN));
        assert_eq!(p.pools[&h].used, 200);
        // Another context's allocation does not come from this chunk.
        assert_eq!(p.take_piece(h, 1, 3, 512, 512), None);
        assert_eq!(p.give_back(x, Some(3)), Some(Ok(())));
        // Twice, or an address inside a piece: refused, nothing changes.
        assert_eq!(p.give_back(x, Some(3)), Some(Err(err::INVALID_VALUE)));
        assert_eq!(p.give_back(y + 8, Some(3)), Some(Err(err::INVALID_VALUE)));
        assert_eq!(p.pools[&h].used, 100);
        // Not a chunk's address at all: not ours to answer.
        assert_eq!(p.give_back(5, None), None);
    }

    #[test]
    fn a_synchronization_releases_wholly_free_chunks_above_the_threshold_only() {
        let (mut p, h) = pool_with_chunks(3);
        let busy = p.take_piece(h, 0, 1, 512, 512).unwrap();
        let pending = p.take_piece(h, 0, 1, CHUNK, CHUNK).unwrap();
        let pending_chunk = p.chunk_of(pending).unwrap();
        assert_ne!(p.chunk_of(busy), Some(pending_chunk));
        p.give_back(pending, Some(1)).unwrap().unwrap();
        // Threshold: keep one chunk's worth.
        p.pools.get_mut(&h).unwrap().release_threshold = CHUNK;
        // Before the freeing stream is settled, only the untouched chunk
        // is wholly free.
        let gone = p.release(None);
        assert_eq!(gone.len(), 1);
        assert_ne!(gone[0], pending_chunk);
        assert_eq!(p.pools[&h].reserved, 2 * CHUNK);
        p.settle(0, Some(1), u64::MAX);
        // Now the freed chunk is too, but the pool holds no more than
        // its threshold beyond it: one goes, the busy one stays.
        assert_eq!(p.release(None), vec![pending_chunk]);
        assert_eq!(p.pools[&h].reserved, CHUNK);
        assert!(p.chunk_of(busy).is_some());
        // Trimming to 0 cannot take a chunk with a live piece.
        assert!(p.release(Some((h, 0))).is_empty());
        p.give_back(busy, None).unwrap().unwrap();
        assert_eq!(p.release(Some((h, 0))).len(), 1);
        assert_eq!(p.pools[&h].reserved, 0);
    }

    #[test]
    fn a_destroyed_pools_chunks_go_once_wholly_free() {
        let (mut p, h) = pool_with_chunks(1);
        p.pools.get_mut(&h).unwrap().release_threshold = u64::MAX;
        let x = p.take_piece(h, 0, 1, 512, 512).unwrap();
        p.pools.remove(&h);
        assert!(p.release(None).is_empty());
        p.give_back(x, Some(1)).unwrap().unwrap();
        assert!(p.release(None).is_empty());
        p.settle(0, None, u64::MAX);
        assert_eq!(p.release(None), vec![1 << 32]);
    }
}
