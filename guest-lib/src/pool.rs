//! Stream-ordered allocation: `cuMemAllocAsync`, `cuMemFreeAsync` and
//! memory pools.
//!
//! A pool's memory is ordinary device memory of the VM, allocated and
//! freed through the channel like `cuMemAlloc`'s and counted against the
//! same quota. Nothing is cached: a pool keeps no memory reserved beyond
//! what is allocated from it (its RESERVED counters equal its USED ones,
//! `cuMemPoolTrimTo` has nothing to release), so a VM's quota is never held
//! by freed memory.
//!
//! Stream order: an allocation exists from the moment `cuMemAllocAsync`
//! returns, which is no later than the stream reaches it. A free waits for
//! the work already in its stream before the memory goes back, so kernels
//! and copies queued before `cuMemFreeAsync` still see it.
//!
//! Pools are process objects, like the driver's: handles are boxes of
//! this library, checked on every call. Only device 0 exists.
//!
//! IPC (where the host supports IPC of memory, see `ipc.rs`): a pool made
//! with `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` exports as a file
//! descriptor (a memfd naming this library's pool), which another process
//! of the VM imports as a pool of its own; a pointer from the exported
//! pool exports as the 64 bytes of `cuMemPoolExportPointer`, carrying the
//! host's IPC token of its allocation, and `cuMemPoolImportPointer` opens
//! it. Freeing an imported pointer (`cuMemFreeAsync`, `cuMemFree`) closes
//! it.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::Mutex;

use crate::context::out;
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
    /// Pointers imported from other processes: address → the opened
    /// allocation's base.
    imports: HashMap<u64, u64>,
    /// The last created pool's handle (odd numbers, never reused while a
    /// pool holds them).
    next: usize,
}

impl Pools {
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
        let mut pools = HashMap::new();
        pools.insert(default_pool(), Pool::new());
        Pools {
            pools,
            created: HashSet::new(),
            current: None,
            allocs: HashMap::new(),
            imports: HashMap::new(),
            next: 0,
        }
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

fn release(p: &mut Pools, ptr: CUdeviceptr) {
    if let Some((pool, bytes)) = p.allocs.remove(&ptr) {
        if let Some(pool) = p.pools.get_mut(&pool) {
            pool.used = pool.used.saturating_sub(bytes);
        }
    }
}

fn alloc_from(pool: usize, dptr: *mut CUdeviceptr, size: usize) -> Result<(), CUresult> {
    if dptr.is_null() {
        return Err(err::INVALID_VALUE);
    }
    known(pool)?;
    let ptr = device_alloc(size as u64)?;
    let recorded = with(|p| {
        let Some(pl) = p.pools.get_mut(&pool) else {
            // Destroyed meanwhile by another thread.
            return Err(err::INVALID_VALUE);
        };
        pl.used = pl.used.saturating_add(size as u64);
        pl.used_high = pl.used_high.max(pl.used);
        pl.reserved_high = pl.reserved_high.max(pl.used);
        p.allocs.insert(ptr, (pool, size as u64));
        Ok(())
    });
    if let Err(e) = recorded {
        let _ = device_free(ptr);
        return Err(e);
    }
    // SAFETY: non-null slot provided by the caller.
    unsafe { out(dptr, ptr) }
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
    ffi_result(|| alloc_from(current_pool()?, dptr, size))
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
    ffi_result(|| alloc_from(pool as usize, dptr, size))
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
            Ok(())
        })
    })
}

/// `cuMemPoolTrimTo`: nothing is kept beyond what is allocated.
#[no_mangle]
pub extern "C" fn cuMemPoolTrimTo(pool: CUmemoryPool, _keep: usize) -> CUresult {
    ffi_result(|| {
        state::device()?;
        known(pool as usize)
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
                        pl.reserved_high = pl.used;
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
            attr::RESERVED_MEM_CURRENT | attr::USED_MEM_CURRENT => pl.used,
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
        // SAFETY: a NUL-terminated name; memfd_create returns a new
        // descriptor or -1.
        let fd = unsafe { libc::memfd_create(c"fairgpu-mempool".as_ptr(), 0) };
        if fd < 0 {
            return Err(err::OUT_OF_MEMORY);
        }
        // SAFETY: `fd` is the descriptor just made; `text` is readable.
        let n = unsafe { libc::pwrite(fd, text.as_ptr().cast(), text.len(), 0) };
        if n != text.len() as isize {
            // SAFETY: closing the descriptor made above.
            unsafe { libc::close(fd) };
            return Err(err::OUT_OF_MEMORY);
        }
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
        // SAFETY: reads at most `text.len()` bytes into `text` from a
        // descriptor number the caller gave (a bad one fails the read).
        let n = unsafe { libc::pread(fd, text.as_mut_ptr().cast(), text.len(), 0) };
        if n != text.len() as isize || text[..8] != POOL_MAGIC {
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
