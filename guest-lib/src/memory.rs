//! Memory: allocation, copies of every kind, memset, page-locked host
//! memory, pointer attributes.
//!
//! The guest keeps its own map of the device allocations it made, so that
//! unified-addressing calls (`cuMemcpy`, `cuPointerGetAttribute`) can tell a
//! device pointer from a host one without asking the host. Page-locked host
//! memory is ordinary memory of this process: there is no DMA across the
//! channel, so "pinning" changes nothing but is tracked for attributes.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crate::context::HostKey;
use crate::context::{out, require_current};
use crate::state;
use crate::stream::{on_per_thread_stream, per_thread_default, stream_handle};
use crate::types::{err, CUcontext, CUdeviceptr, CUresult, CUstream};
use crate::{context, ffi_result, managed};

static DEVICE: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());
/// The host context of each allocation in `DEVICE` (0: the primary's).
static DEVICE_CTX: Mutex<BTreeMap<u64, HostKey>> = Mutex::new(BTreeMap::new());

/// Forgets the allocations and module variables of a destroyed context
/// (its host context freed them, and the host may place another
/// context's variables there).
pub fn forget_context(key: HostKey) {
    crate::pool::forget_context(key);
    if let Ok(mut g) = GLOBALS.lock() {
        g.retain(|_, (_, _, k)| *k != key);
    }
    let gone: Vec<u64> = match DEVICE_CTX.lock() {
        Ok(mut m) => {
            let gone = m
                .iter()
                .filter(|(_, k)| **k == key)
                .map(|(p, _)| *p)
                .collect();
            m.retain(|_, k| *k != key);
            gone
        }
        Err(_) => return,
    };
    if let Ok(mut d) = DEVICE.lock() {
        for p in gone {
            d.remove(&p);
        }
    }
}

/// The context whose allocation starts at `base` (the primary if unknown).
fn owner(base: u64) -> CUcontext {
    let key = DEVICE_CTX
        .lock()
        .ok()
        .and_then(|m| m.get(&base).copied())
        .unwrap_or(0);
    if context::is_primary_key(key) {
        context::primary()
    } else {
        key as CUcontext
    }
}
/// Page-locked host memory: base → (size, flags).
static HOST: Mutex<BTreeMap<usize, (usize, u32)>> = Mutex::new(BTreeMap::new());
/// Module variables handed out by `cuModuleGetGlobal`: address → (size,
/// module, its host context). Device memory for attributes and copies,
/// never freed by `cuMemFree`; gone with their module or its context.
static GLOBALS: Mutex<BTreeMap<u64, (u64, usize, HostKey)>> = Mutex::new(BTreeMap::new());

/// Mappings of the virtual-memory API: address -> size (`vmm.rs`).
static MAPPED: Mutex<BTreeMap<u64, u64>> = Mutex::new(BTreeMap::new());

/// Records a mapping of the virtual-memory API: device memory for copies'
/// direction and attributes, never an allocation `cuMemFree` frees.
pub fn register_mapping(ptr: u64, size: u64) {
    if let Ok(mut m) = MAPPED.lock() {
        m.insert(ptr, size);
    }
}

/// Forgets a mapping (`cuMemUnmap`).
pub fn forget_mapping(ptr: u64) {
    if let Ok(mut m) = MAPPED.lock() {
        m.remove(&ptr);
    }
}

/// Records a variable the host placed at `ptr`, of a module loaded in
/// host context `ctx`.
pub fn register_global(ptr: u64, size: u64, module: usize, ctx: HostKey) -> Result<(), CUresult> {
    GLOBALS
        .lock()
        .map_err(|_| err::UNKNOWN)?
        .insert(ptr, (size, module, ctx));
    Ok(())
}

/// Forgets the variables of an unloaded module.
pub fn forget_globals(module: usize) {
    if let Ok(mut g) = GLOBALS.lock() {
        g.retain(|_, (_, m, _)| *m != module);
    }
}

fn find_global(ptr: u64) -> Option<(u64, u64)> {
    let m = GLOBALS.lock().ok()?;
    let (&base, &(size, _, _)) = m.range(..=ptr).next_back()?;
    (ptr < base + size.max(1)).then_some((base, size))
}

/// The device range (allocation or module variable) holding `ptr`.
fn find_device(ptr: u64) -> Option<(u64, u64)> {
    find(&DEVICE, ptr)
        .or_else(|| find_global(ptr))
        .or_else(|| find(&MAPPED, ptr))
}

fn find(map: &Mutex<BTreeMap<u64, u64>>, ptr: u64) -> Option<(u64, u64)> {
    let m = map.lock().ok()?;
    let (&base, &size) = m.range(..=ptr).next_back()?;
    (ptr < base + size.max(1)).then_some((base, size))
}

fn find_host(ptr: usize) -> Option<(usize, usize)> {
    let m = HOST.lock().ok()?;
    let (&base, &(size, _)) = m.range(..=ptr).next_back()?;
    (ptr < base + size.max(1)).then_some((base, size))
}

/// Whether `ptr..ptr + n` overruns the device memory of this process that
/// `ptr` lies in (an allocation, a module variable, a mapping): `false`
/// when it fits or `ptr` is not known here (the host checks it then).
pub fn overruns_device(ptr: u64, n: usize) -> bool {
    find_device(ptr).is_some_and(|(base, size)| {
        ptr.checked_add(n as u64)
            .is_none_or(|end| end > base + size)
    })
}

/// Whether `ptr` lies in a device allocation of this process that is not
/// managed or mapped host memory (whose addresses copies treat as host
/// memory, see `managed.rs`).
pub fn is_device(ptr: u64) -> bool {
    find_device(ptr).is_some() && managed::host_view(ptr, 1).is_none()
}

/// The flags page-locked host memory at `p` was allocated or registered
/// with.
pub fn host_flags(p: usize) -> Option<u32> {
    let m = HOST.lock().ok()?;
    let (&base, &(size, flags)) = m.range(..=p).next_back()?;
    (p < base + size.max(1)).then_some(flags)
}

pub(crate) fn slice<'a>(p: *const c_void, n: usize) -> Result<&'a [u8], CUresult> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: the caller of the driver function guarantees `p` points at `n`
    // readable bytes of host memory for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) })
}

pub(crate) fn slice_mut<'a>(p: *mut c_void, n: usize) -> Result<&'a mut [u8], CUresult> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: the caller guarantees `p` points at `n` writable bytes of host
    // memory, not aliased by anything we hold, for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n) })
}

/// Allocates `size` bytes of device memory, counted against the VM's
/// quota, and records it as this process's.
pub fn device_alloc(size: u64) -> Result<u64, CUresult> {
    require_current()?;
    if size == 0 {
        return Err(err::INVALID_VALUE);
    }
    let p = state::with(|cu| cu.mem_alloc(size))?;
    DEVICE.lock().map_err(|_| err::UNKNOWN)?.insert(p, size);
    DEVICE_CTX
        .lock()
        .map_err(|_| err::UNKNOWN)?
        .insert(p, context::host_of_current());
    Ok(p)
}

/// Frees an allocation of this process (0: nothing).
pub fn device_free(dptr: CUdeviceptr) -> Result<(), CUresult> {
    state::device()?;
    if dptr == 0 {
        return Ok(());
    }
    state::with(|cu| cu.mem_free(dptr))?;
    DEVICE.lock().map_err(|_| err::UNKNOWN)?.remove(&dptr);
    DEVICE_CTX.lock().map_err(|_| err::UNKNOWN)?.remove(&dptr);
    Ok(())
}

fn alloc(dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    ffi_result(|| {
        if dptr.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let p = device_alloc(size as u64)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(dptr, p) }
    })
}

/// `cuMemAlloc_v2`.
#[no_mangle]
pub extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, size: usize) -> CUresult {
    alloc(dptr, size)
}

/// `cuMemAllocPitch_v2`: rows padded to 256 bytes.
#[no_mangle]
pub extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    _elem: u32,
) -> CUresult {
    ffi_result(|| {
        let p = width
            .checked_next_multiple_of(256)
            .ok_or(err::INVALID_VALUE)?;
        let total = p.checked_mul(height).ok_or(err::INVALID_VALUE)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pitch, p)? };
        match alloc(dptr, total) {
            err::SUCCESS => Ok(()),
            e => Err(e),
        }
    })
}

/// `cuMemFree_v2`.
#[no_mangle]
pub extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    ffi_result(|| {
        if managed::free(dptr, false)? {
            return Ok(());
        }
        // A graph's allocation: freed until the graph allocates it again.
        if let Some(r) = crate::graph_mem::end(dptr, None) {
            return match r {
                err::SUCCESS => Ok(()),
                e => Err(e),
            };
        }
        // Another process's pool pointer, imported: closed.
        if let Some(r) = crate::pool::free_imported(dptr) {
            return r;
        }
        // A piece of a pool's chunk: back to its pool.
        if let Some(r) = crate::pool::free_piece_now(dptr) {
            return r;
        }
        device_free(dptr)?;
        crate::pool::forget(dptr);
        Ok(())
    })
}

/// `cuMemGetInfo_v2`: the VM's quota-bounded view.
#[no_mangle]
pub extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let (f, t) = state::with(|cu| cu.mem_get_info())?;
        // SAFETY: caller passes writable slots (checked for null).
        unsafe {
            out(free, f as usize)?;
            out(total, t as usize)
        }
    })
}

/// `cuMemGetAddressRange_v2`.
#[no_mangle]
pub extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CUdeviceptr,
    size: *mut usize,
    dptr: CUdeviceptr,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let (b, s) = match managed::find_dev(dptr, 1) {
            Some((_, _, dev, len)) => (dev, len as u64),
            None => find_device(dptr).ok_or(err::NOT_FOUND)?,
        };
        // SAFETY: either slot may be null per the API; non-null ones are writable.
        unsafe {
            if !base.is_null() {
                out(base, b)?;
            }
            if !size.is_null() {
                out(size, s as usize)?;
            }
        }
        Ok(())
    })
}

/// A copy or memset that names managed or mapped memory by its device
/// address works on its CPU bytes, after what kernels wrote was pulled.
fn mirrored(p: u64, n: usize) -> Option<*mut c_void> {
    let h = managed::host_view(p, n as u64)?;
    managed::pull();
    Some(h as *mut c_void)
}

/// Copies between host ranges (either may be a mirror's CPU bytes).
fn host_copy(dst: *mut c_void, src: *const c_void, n: usize) -> Result<(), CUresult> {
    let from = slice(src, n)?.to_vec();
    slice_mut(dst, n)?.copy_from_slice(&from);
    Ok(())
}

/// A copy or memset issued on a capturing stream becomes a graph node.
fn captured_copy(stream: Option<CUstream>, work: crate::graph::Work) -> Option<CUresult> {
    crate::graph::captured(stream?, || Ok(work))
}

fn htod(dst: CUdeviceptr, src: *const c_void, n: usize, stream: Option<CUstream>) -> CUresult {
    let copy = crate::graph::Work::Copy {
        dst,
        src: src as u64,
        n,
    };
    if let Some(r) = captured_copy(stream, copy) {
        return r;
    }
    ffi_result(|| {
        require_current()?;
        if let Some(h) = mirrored(dst, n) {
            return host_copy(h, src, n);
        }
        if managed::is_cpu(src as usize, n) {
            managed::pull();
        }
        let data = slice(src, n)?;
        match stream {
            None => state::with(|cu| cu.memcpy_htod(dst, data)),
            Some(s) => {
                let s = stream_handle(s);
                state::with(|cu| cu.memcpy_htod_async(dst, data, s))
            }
        }
    })
}

fn dtoh(dst: *mut c_void, src: CUdeviceptr, n: usize, stream: CUstream) -> CUresult {
    let copy = crate::graph::Work::Copy {
        dst: dst as u64,
        src,
        n,
    };
    if let Some(r) = captured_copy(Some(stream), copy) {
        return r;
    }
    ffi_result(|| {
        require_current()?;
        if let Some(h) = mirrored(src, n) {
            return host_copy(dst, h, n);
        }
        let out = slice_mut(dst, n)?;
        let s = stream_handle(stream);
        // Also for the async form: the bytes come back with the response,
        // so this is a blocking copy, where printed output is flushed.
        state::with_sync(|cu| cu.memcpy_dtoh(out, src, s))
    })
}

fn dtod(dst: CUdeviceptr, src: CUdeviceptr, n: usize, stream: Option<CUstream>) -> CUresult {
    if let Some(r) = captured_copy(stream, crate::graph::Work::Copy { dst, src, n }) {
        return r;
    }
    match (mirrored(dst, n), mirrored(src, n)) {
        (Some(d), Some(s)) => return ffi_result(|| host_copy(d, s, n)),
        (Some(d), None) => return dtoh(d, src, n, stream.unwrap_or(std::ptr::null_mut())),
        (None, Some(s)) => return htod(dst, s, n, stream),
        (None, None) => {}
    }
    ffi_result(|| {
        require_current()?;
        match stream {
            None => state::with(|cu| cu.memcpy_dtod(dst, src, n as u64)),
            Some(s) => {
                let s = stream_handle(s);
                state::with(|cu| cu.memcpy_dtod_async(dst, src, n as u64, s))
            }
        }
    })
}

/// Copies with unified addressing: the kind follows from which side is a
/// device allocation of this process.
fn any(dst: u64, src: u64, n: usize, stream: Option<CUstream>) -> CUresult {
    match (is_device(dst), is_device(src)) {
        (true, true) => dtod(dst, src, n, stream),
        (true, false) => htod(dst, src as *const c_void, n, stream),
        (false, true) => dtoh(
            dst as *mut c_void,
            src,
            n,
            stream.unwrap_or(std::ptr::null_mut()),
        ),
        (false, false) => ffi_result(|| {
            require_current()?;
            if managed::is_cpu(dst as usize, n) || managed::is_cpu(src as usize, n) {
                managed::pull();
            }
            host_copy(dst as *mut c_void, src as *const c_void, n)
        }),
    }
}

/// `cuMemcpyPeer*`: both contexts are on the VM's one device, so this is
/// a device-to-device copy once they are known to be contexts.
fn peer(
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    n: usize,
    stream: Option<CUstream>,
) -> CUresult {
    if let Err(e) = state::device() {
        return e;
    }
    if !context::valid(dst_ctx) || !context::valid(src_ctx) {
        return err::INVALID_CONTEXT;
    }
    dtod(dst, src, n, stream)
}

macro_rules! export {
    ($($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*) => $body:expr;)*) => {$(
        $(#[$m])*
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> CUresult { $body }
    )*};
}

export! {
    /// `cuMemcpyHtoD_v2`.
    fn cuMemcpyHtoD_v2(dst: CUdeviceptr, src: *const c_void, n: usize) => htod(dst, src, n, None);
    /// `cuMemcpyHtoD_v2_ptds`.
    fn cuMemcpyHtoD_v2_ptds(dst: CUdeviceptr, src: *const c_void, n: usize) => on_per_thread_stream(|s| htod(dst, src, n, Some(s)));
    /// `cuMemcpyHtoDAsync_v2`.
    fn cuMemcpyHtoDAsync_v2(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream) => htod(dst, src, n, Some(crate::stream::resolve(s)));
    /// `cuMemcpyHtoDAsync_v2_ptsz`.
    fn cuMemcpyHtoDAsync_v2_ptsz(dst: CUdeviceptr, src: *const c_void, n: usize, s: CUstream) => htod(dst, src, n, Some(crate::stream::per_thread_default(s)));
    /// `cuMemcpyDtoH_v2`.
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: CUdeviceptr, n: usize) => dtoh(dst, src, n, std::ptr::null_mut());
    /// `cuMemcpyDtoH_v2_ptds`.
    fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: CUdeviceptr, n: usize) => dtoh(dst, src, n, per_thread_default(std::ptr::null_mut()));
    /// `cuMemcpyDtoHAsync_v2`.
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream) => dtoh(dst, src, n, crate::stream::resolve(s));
    /// `cuMemcpyDtoHAsync_v2_ptsz`.
    fn cuMemcpyDtoHAsync_v2_ptsz(dst: *mut c_void, src: CUdeviceptr, n: usize, s: CUstream) => dtoh(dst, src, n, crate::stream::per_thread_default(s));
    /// `cuMemcpyDtoD_v2`.
    fn cuMemcpyDtoD_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize) => dtod(dst, src, n, None);
    /// `cuMemcpyDtoD_v2_ptds`.
    fn cuMemcpyDtoD_v2_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) => on_per_thread_stream(|s| dtod(dst, src, n, Some(s)));
    /// `cuMemcpyDtoDAsync_v2`.
    fn cuMemcpyDtoDAsync_v2(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) => dtod(dst, src, n, Some(crate::stream::resolve(s)));
    /// `cuMemcpyDtoDAsync_v2_ptsz`.
    fn cuMemcpyDtoDAsync_v2_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) => dtod(dst, src, n, Some(crate::stream::per_thread_default(s)));
    /// `cuMemcpyPeer`.
    fn cuMemcpyPeer(dst: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize) => peer(dst, dc, src, sc, n, None);
    /// `cuMemcpyPeer_ptds`.
    fn cuMemcpyPeer_ptds(dst: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize) => on_per_thread_stream(|s| peer(dst, dc, src, sc, n, Some(s)));
    /// `cuMemcpyPeerAsync`.
    fn cuMemcpyPeerAsync(dst: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize, s: CUstream) => peer(dst, dc, src, sc, n, Some(crate::stream::resolve(s)));
    /// `cuMemcpyPeerAsync_ptsz`.
    fn cuMemcpyPeerAsync_ptsz(dst: CUdeviceptr, dc: CUcontext, src: CUdeviceptr, sc: CUcontext, n: usize, s: CUstream) => peer(dst, dc, src, sc, n, Some(crate::stream::per_thread_default(s)));
    /// `cuMemcpy` (unified addressing).
    fn cuMemcpy(dst: CUdeviceptr, src: CUdeviceptr, n: usize) => any(dst, src, n, None);
    /// `cuMemcpy_ptds`.
    fn cuMemcpy_ptds(dst: CUdeviceptr, src: CUdeviceptr, n: usize) => on_per_thread_stream(|s| any(dst, src, n, Some(s)));
    /// `cuMemcpyAsync` (unified addressing).
    fn cuMemcpyAsync(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) => any(dst, src, n, Some(crate::stream::resolve(s)));
    /// `cuMemcpyAsync_ptsz`.
    fn cuMemcpyAsync_ptsz(dst: CUdeviceptr, src: CUdeviceptr, n: usize, s: CUstream) => any(dst, src, n, Some(crate::stream::per_thread_default(s)));
    /// `cuMemsetD8_v2`.
    fn cuMemsetD8_v2(dst: CUdeviceptr, v: u8, n: usize) => memset(dst, v.into(), 1, n, None);
    /// `cuMemsetD8_v2_ptds`.
    fn cuMemsetD8_v2_ptds(dst: CUdeviceptr, v: u8, n: usize) => on_per_thread_stream(|s| memset(dst, v.into(), 1, n, Some(s)));
    /// `cuMemsetD16_v2`.
    fn cuMemsetD16_v2(dst: CUdeviceptr, v: u16, n: usize) => memset(dst, v.into(), 2, n, None);
    /// `cuMemsetD16_v2_ptds`.
    fn cuMemsetD16_v2_ptds(dst: CUdeviceptr, v: u16, n: usize) => on_per_thread_stream(|s| memset(dst, v.into(), 2, n, Some(s)));
    /// `cuMemsetD32_v2`.
    fn cuMemsetD32_v2(dst: CUdeviceptr, v: u32, n: usize) => memset(dst, v, 4, n, None);
    /// `cuMemsetD32_v2_ptds`.
    fn cuMemsetD32_v2_ptds(dst: CUdeviceptr, v: u32, n: usize) => on_per_thread_stream(|s| memset(dst, v, 4, n, Some(s)));
    /// `cuMemsetD8Async`.
    fn cuMemsetD8Async(dst: CUdeviceptr, v: u8, n: usize, s: CUstream) => memset(dst, v.into(), 1, n, Some(crate::stream::resolve(s)));
    /// `cuMemsetD8Async_ptsz`.
    fn cuMemsetD8Async_ptsz(dst: CUdeviceptr, v: u8, n: usize, s: CUstream) => memset(dst, v.into(), 1, n, Some(crate::stream::per_thread_default(s)));
    /// `cuMemsetD16Async`.
    fn cuMemsetD16Async(dst: CUdeviceptr, v: u16, n: usize, s: CUstream) => memset(dst, v.into(), 2, n, Some(crate::stream::resolve(s)));
    /// `cuMemsetD16Async_ptsz`.
    fn cuMemsetD16Async_ptsz(dst: CUdeviceptr, v: u16, n: usize, s: CUstream) => memset(dst, v.into(), 2, n, Some(crate::stream::per_thread_default(s)));
    /// `cuMemsetD32Async`.
    fn cuMemsetD32Async(dst: CUdeviceptr, v: u32, n: usize, s: CUstream) => memset(dst, v, 4, n, Some(crate::stream::resolve(s)));
    /// `cuMemsetD32Async_ptsz`.
    fn cuMemsetD32Async_ptsz(dst: CUdeviceptr, v: u32, n: usize, s: CUstream) => memset(dst, v, 4, n, Some(crate::stream::per_thread_default(s)));
    /// `cuMemsetD2D8_v2`.
    fn cuMemsetD2D8_v2(dst: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize) => memset_2d(dst, pitch, v.into(), 1, w, h, None);
    /// `cuMemsetD2D8_v2_ptds`.
    fn cuMemsetD2D8_v2_ptds(dst: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize) => on_per_thread_stream(|s| memset_2d(dst, pitch, v.into(), 1, w, h, Some(s)));
    /// `cuMemsetD2D16_v2`.
    fn cuMemsetD2D16_v2(dst: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize) => memset_2d(dst, pitch, v.into(), 2, w, h, None);
    /// `cuMemsetD2D16_v2_ptds`.
    fn cuMemsetD2D16_v2_ptds(dst: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize) => on_per_thread_stream(|s| memset_2d(dst, pitch, v.into(), 2, w, h, Some(s)));
    /// `cuMemsetD2D32_v2`.
    fn cuMemsetD2D32_v2(dst: CUdeviceptr, pitch: usize, v: u32, w: usize, h: usize) => memset_2d(dst, pitch, v, 4, w, h, None);
    /// `cuMemsetD2D32_v2_ptds`.
    fn cuMemsetD2D32_v2_ptds(dst: CUdeviceptr, pitch: usize, v: u32, w: usize, h: usize) => on_per_thread_stream(|s| memset_2d(dst, pitch, v, 4, w, h, Some(s)));
    /// `cuMemsetD2D8Async`.
    fn cuMemsetD2D8Async(dst: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize, s: CUstream) => memset_2d(dst, pitch, v.into(), 1, w, h, Some(crate::stream::resolve(s)));
    /// `cuMemsetD2D8Async_ptsz`.
    fn cuMemsetD2D8Async_ptsz(dst: CUdeviceptr, pitch: usize, v: u8, w: usize, h: usize, s: CUstream) => memset_2d(dst, pitch, v.into(), 1, w, h, Some(crate::stream::per_thread_default(s)));
    /// `cuMemsetD2D16Async`.
    fn cuMemsetD2D16Async(dst: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize, s: CUstream) => memset_2d(dst, pitch, v.into(), 2, w, h, Some(crate::stream::resolve(s)));
    /// `cuMemsetD2D16Async_ptsz`.
    fn cuMemsetD2D16Async_ptsz(dst: CUdeviceptr, pitch: usize, v: u16, w: usize, h: usize, s: CUstream) => memset_2d(dst, pitch, v.into(), 2, w, h, Some(crate::stream::per_thread_default(s)));
    /// `cuMemsetD2D32Async`.
    fn cuMemsetD2D32Async(dst: CUdeviceptr, pitch: usize, v: u32, w: usize, h: usize, s: CUstream) => memset_2d(dst, pitch, v, 4, w, h, Some(crate::stream::resolve(s)));
    /// `cuMemsetD2D32Async_ptsz`.
    fn cuMemsetD2D32Async_ptsz(dst: CUdeviceptr, pitch: usize, v: u32, w: usize, h: usize, s: CUstream) => memset_2d(dst, pitch, v, 4, w, h, Some(crate::stream::per_thread_default(s)));
}

/// `cuMemsetD2D*`: `height` rows of `width` elements, `pitch` bytes apart,
/// each row one memset (a stream capture records the whole as one node).
/// Graph replay of a memset node comes here too.
pub(crate) fn memset_2d(
    dst: CUdeviceptr,
    pitch: usize,
    value: u32,
    elem: u8,
    width: usize,
    height: usize,
    stream: Option<CUstream>,
) -> CUresult {
    let row = match width.checked_mul(usize::from(elem)) {
        Some(r) if height <= 1 || pitch >= r => r,
        _ => return err::INVALID_VALUE,
    };
    let Some(span) = pitch
        .checked_mul(height.saturating_sub(1))
        .and_then(|b| b.checked_add(row))
    else {
        return err::INVALID_VALUE;
    };
    if dst.checked_add(span as u64).is_none() {
        return err::INVALID_VALUE;
    }
    let work = crate::graph::Work::Memset {
        dst,
        pitch,
        value,
        elem,
        width,
        height,
    };
    if let Some(r) = captured_copy(stream, work) {
        return r;
    }
    for r in 0..height {
        let at = dst + (r * pitch) as u64;
        let rc = memset(at, value, elem, width, stream);
        if rc != err::SUCCESS {
            return rc;
        }
    }
    err::SUCCESS
}

fn memset(dst: CUdeviceptr, value: u32, elem: u8, n: usize, stream: Option<CUstream>) -> CUresult {
    let work = crate::graph::Work::Memset {
        dst,
        pitch: 0,
        value,
        elem,
        width: n,
        height: 1,
    };
    if let Some(r) = captured_copy(stream, work) {
        return r;
    }
    ffi_result(|| {
        require_current()?;
        let bytes = n.checked_mul(usize::from(elem)).ok_or(err::INVALID_VALUE)?;
        if let Some(h) = mirrored(dst, bytes) {
            let pattern = value.to_le_bytes();
            let out = slice_mut(h, bytes)?;
            for e in out.chunks_exact_mut(usize::from(elem)) {
                e.copy_from_slice(&pattern[..usize::from(elem)]);
            }
            return Ok(());
        }
        match stream {
            None => state::with(|cu| cu.memset(dst, value, elem, n as u64)),
            Some(s) => {
                let s = stream_handle(s);
                state::with(|cu| cu.memset_async(dst, value, elem, n as u64, s))
            }
        }
    })
}

fn host_alloc(pp: *mut *mut c_void, size: usize, flags: u32) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if size == 0 || pp.is_null() {
            return Err(err::INVALID_VALUE);
        }
        if flags & managed::DEVICEMAP != 0 {
            require_current()?;
            let p = managed::host_alloc_mapped(size, flags)?;
            // SAFETY: `pp` is non-null (checked) and writable per the API.
            return unsafe { out(pp, p) };
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: posix_memalign writes a fresh allocation into `p`.
        if unsafe { libc::posix_memalign(&mut p, 4096, size) } != 0 {
            return Err(err::OUT_OF_MEMORY);
        }
        HOST.lock()
            .map_err(|_| err::UNKNOWN)?
            .insert(p as usize, (size, flags));
        // SAFETY: `pp` is non-null (checked) and writable per the API.
        unsafe { out(pp, p) }
    })
}

/// `cuMemAllocHost_v2`: page-aligned memory of this process.
#[no_mangle]
pub extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> CUresult {
    host_alloc(pp, size, 0)
}

/// `cuMemHostAlloc`: as `cuMemAllocHost`; with `DEVICEMAP`, memory that
/// kernels address too (see `managed.rs`). The other flags (portable,
/// write-combined) change nothing here.
#[no_mangle]
pub extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, flags: u32) -> CUresult {
    if flags & !0x7 != 0 {
        return err::INVALID_VALUE;
    }
    host_alloc(pp, size, flags)
}

/// `cuMemFreeHost`.
#[no_mangle]
pub extern "C" fn cuMemFreeHost(p: *mut c_void) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if managed::free(p as u64, true)? {
            return Ok(());
        }
        let removed = HOST.lock().map_err(|_| err::UNKNOWN)?.remove(&(p as usize));
        if removed.is_none() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: `p` came from posix_memalign in host_alloc and is freed once.
        unsafe { libc::free(p) };
        Ok(())
    })
}

/// `cuMemHostRegister_v2`: nothing to pin across a channel; recorded.
/// With `DEVICEMAP`, kernels reach the memory through the device pointer
/// `cuMemHostGetDevicePointer` gives (see `managed.rs`).
#[no_mangle]
pub extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: u32) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if p.is_null() || size == 0 || flags & !0xf != 0 {
            return Err(err::INVALID_VALUE);
        }
        if flags & managed::DEVICEMAP != 0 {
            require_current()?;
            managed::register_mapped(p, size, flags)?;
        }
        HOST.lock()
            .map_err(|_| err::UNKNOWN)?
            .insert(p as usize, (size, flags));
        Ok(())
    })
}

/// `cuMemHostUnregister`.
#[no_mangle]
pub extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CUresult {
    ffi_result(|| {
        state::device()?;
        managed::unregister(p)?;
        HOST.lock()
            .map_err(|_| err::UNKNOWN)?
            .remove(&(p as usize))
            .map(|_| ())
            .ok_or(err::INVALID_VALUE)
    })
}

const ATTR_CONTEXT: i32 = 1;
const ATTR_MEMORY_TYPE: i32 = 2;
const ATTR_DEVICE_POINTER: i32 = 3;
const ATTR_HOST_POINTER: i32 = 4;
const ATTR_IS_MANAGED: i32 = 8;
const ATTR_DEVICE_ORDINAL: i32 = 9;
const ATTR_RANGE_START: i32 = 11;
const ATTR_RANGE_SIZE: i32 = 12;
const ATTR_MAPPED: i32 = 13;
const MEMORYTYPE_HOST: u32 = 1;
const MEMORYTYPE_DEVICE: u32 = 2;

/// Writes one pointer attribute; `Ok(false)` if `ptr` is unknown memory.
///
/// # Safety
/// `data` must be writable for the attribute's type.
unsafe fn pointer_attribute(
    data: *mut c_void,
    attr: i32,
    ptr: CUdeviceptr,
) -> Result<bool, CUresult> {
    if let Some(m) = managed::find_dev(ptr, 1).or_else(|| managed::find_cpu(ptr as usize, 1)) {
        // SAFETY: as this function's.
        return unsafe { mirror_attribute(data, attr, ptr, m) }.map(|()| true);
    }
    let dev = find_device(ptr);
    let host = find_host(ptr as usize);
    let known = dev.is_some() || host.is_some();
    let (base, size) = dev
        .or(host.map(|(b, s)| (b as u64, s as u64)))
        .unwrap_or((0, 0));
    // SAFETY: per this function's contract `data` is writable for the type
    // each attribute documents (pointer-sized, u32 or i32).
    unsafe {
        match attr {
            ATTR_CONTEXT => out(
                data.cast::<*mut c_void>(),
                if known {
                    owner(base)
                } else {
                    std::ptr::null_mut()
                },
            )?,
            ATTR_MEMORY_TYPE => out(
                data.cast::<u32>(),
                match (dev.is_some(), host.is_some()) {
                    (true, _) => MEMORYTYPE_DEVICE,
                    (_, true) => MEMORYTYPE_HOST,
                    _ => 0,
                },
            )?,
            ATTR_DEVICE_POINTER => out(data.cast::<u64>(), if dev.is_some() { ptr } else { 0 })?,
            ATTR_HOST_POINTER => out(data.cast::<u64>(), if host.is_some() { ptr } else { 0 })?,
            ATTR_IS_MANAGED | ATTR_MAPPED => out(data.cast::<u32>(), 0)?,
            ATTR_DEVICE_ORDINAL => out(data.cast::<i32>(), if known { 0 } else { -2 })?,
            ATTR_RANGE_START => out(data.cast::<u64>(), base)?,
            ATTR_RANGE_SIZE => out(data.cast::<usize>(), size as usize)?,
            _ => return Err(err::INVALID_VALUE),
        }
    }
    Ok(known)
}

/// One pointer attribute of managed or mapped memory.
///
/// # Safety
/// `data` must be writable for the attribute's type.
unsafe fn mirror_attribute(
    data: *mut c_void,
    attr: i32,
    ptr: CUdeviceptr,
    (kind, cpu, dev, len): (managed::Kind, usize, u64, usize),
) -> Result<(), CUresult> {
    let in_dev = ptr >= dev && ptr - dev < len as u64;
    let off = if in_dev { ptr - dev } else { ptr - cpu as u64 };
    let managed = kind.is_managed();
    // SAFETY: per this function's contract `data` is writable for the type
    // each attribute documents.
    unsafe {
        match attr {
            ATTR_CONTEXT => out(data.cast::<*mut c_void>(), context::primary()),
            ATTR_MEMORY_TYPE => out(
                data.cast::<u32>(),
                if managed {
                    MEMORYTYPE_DEVICE
                } else {
                    MEMORYTYPE_HOST
                },
            ),
            ATTR_DEVICE_POINTER => out(data.cast::<u64>(), dev + off),
            ATTR_HOST_POINTER => out(data.cast::<u64>(), cpu as u64 + off),
            ATTR_IS_MANAGED => out(data.cast::<u32>(), u32::from(managed)),
            ATTR_MAPPED => out(data.cast::<u32>(), 0),
            ATTR_DEVICE_ORDINAL => out(data.cast::<i32>(), 0),
            ATTR_RANGE_START => out(data.cast::<u64>(), if in_dev { dev } else { cpu as u64 }),
            ATTR_RANGE_SIZE => out(data.cast::<usize>(), len),
            _ => Err(err::INVALID_VALUE),
        }
    }
}

/// `cuPointerGetAttribute`: INVALID_VALUE for memory this process did not
/// get from the driver.
#[no_mangle]
pub extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attr: i32,
    ptr: CUdeviceptr,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if data.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: `data` is non-null and writable for the attribute per the API.
        match unsafe { pointer_attribute(data, attr, ptr) }? {
            true => Ok(()),
            false => Err(err::INVALID_VALUE),
        }
    })
}

/// `cuPointerGetAttributes`: unknown memory reads as unregistered (type 0).
#[no_mangle]
pub extern "C" fn cuPointerGetAttributes(
    n: u32,
    attrs: *const i32,
    data: *mut *mut c_void,
    ptr: CUdeviceptr,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if n > 0 && (attrs.is_null() || data.is_null()) {
            return Err(err::INVALID_VALUE);
        }
        for i in 0..n as usize {
            // SAFETY: the caller passes arrays of `n` attributes and data slots.
            let (a, d) = unsafe { (*attrs.add(i), *data.add(i)) };
            if d.is_null() {
                continue;
            }
            // SAFETY: each data slot is writable for its attribute per the API.
            unsafe { pointer_attribute(d, a, ptr)? };
        }
        Ok(())
    })
}
