//! Managed memory and mapped host memory: memory that the program's CPU
//! code and its kernels both address.
//!
//! In API remoting the guest's pages and the device's memory are apart, so
//! each such range is a **mirror**: a device allocation (counted against
//! the VM's quota) and the CPU bytes the program touches, kept coherent at
//! the points where CUDA lets each side look:
//!
//! - **Before a kernel runs**, what the CPU changed is pushed: each mirror
//!   keeps a copy of what the device is known to hold (`clean`), and the
//!   pages where the CPU bytes differ from it are copied to the device.
//! - **At a synchronization** (context, stream or event synchronize, a
//!   query that reports completion, a blocking copy), if a kernel ran since
//!   the last pull, the context is synchronized and every mirror's device
//!   bytes are pulled: pages the device changed replace the CPU's, pages it
//!   did not change keep whatever the CPU wrote meanwhile (they are pushed
//!   before the next kernel).
//! - **Copies and memsets** that name a mirror treat it as host memory
//!   (after a pull, so that they see what kernels wrote); the next kernel
//!   gets their result through the push.
//!
//! This is the model CUDA gives devices without concurrent managed access
//! (`CONCURRENT_MANAGED_ACCESS` = 0, which the device reports): the CPU
//! must not touch managed memory while kernels run. The common pattern —
//! the CPU writes, a kernel runs, the program synchronizes, the CPU reads —
//! is exact. Costs: the CPU holds each mirror twice (its bytes and
//! `clean`), every launch compares the mirrors' bytes (no transfer unless
//! something changed), every synchronization after a launch moves every
//! mirror's bytes from the device.
//!
//! Managed memory (`cuMemAllocManaged`) and mapped host memory
//! (`cuMemHostAlloc` with `DEVICEMAP`) are mapped at the device address
//! itself, so one pointer is valid on both sides as unified addressing
//! promises; if that address is taken in this process the allocation fails
//! with CUDA_ERROR_OUT_OF_MEMORY. Registered host memory
//! (`cuMemHostRegister` with `DEVICEMAP`) stays where the program put it;
//! its device pointer (`cuMemHostGetDevicePointer`) is a different address.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::context::{self, out, require_current, HostKey};
use crate::ffi_result;
use crate::memory::{device_alloc, device_free, slice, slice_mut};
use crate::state;
use crate::types::{err, CUdeviceptr, CUresult, CUstream};

/// Pages compared and moved as units.
const PAGE: usize = 4096;

/// What a mirror is, for attributes and for how it goes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `cuMemAllocManaged`.
    Managed,
    /// `cuMemHostAlloc(DEVICEMAP)`: `flags` as given.
    HostMapped { flags: u32 },
    /// `cuMemHostRegister(DEVICEMAP)` of the program's own memory.
    Registered { flags: u32 },
    /// A `__managed__` variable of module `module` (the module object's
    /// address), mirrored at its device address.
    ModuleVar { module: usize },
}

impl Kind {
    /// Whether the memory is managed (`cuMemAllocManaged` or a
    /// `__managed__` variable), as pointer attributes report it.
    pub fn is_managed(self) -> bool {
        matches!(self, Kind::Managed | Kind::ModuleVar { .. })
    }
}

#[derive(Debug)]
struct Mirror {
    kind: Kind,
    /// Where the CPU addresses it.
    cpu: usize,
    /// Where kernels address it.
    dev: u64,
    len: usize,
    /// The device allocation holding `dev..dev + len`.
    alloc: u64,
    /// What the device holds, as far as this process knows.
    clean: Vec<u8>,
    /// The host context whose memory holds it (the current one when it
    /// was made): pushes and pulls go there.
    ctx: HostKey,
}

static MIRRORS: Mutex<Vec<Mirror>> = Mutex::new(Vec::new());
/// A kernel ran since the mirrors were last pulled. Relaxed: set after a
/// launch request is sent and read by this process's later
/// synchronizations, which the channel's lock orders.
/// This is the primary's host context's; a created context has its own
/// (`GuestContext::device_dirty`).
static DEVICE_DIRTY: AtomicBool = AtomicBool::new(false);

/// The flag of host context `key` ([`DEVICE_DIRTY`]).
fn device_dirty(key: HostKey) -> &'static AtomicBool {
    match context::by_key(key) {
        Some(c) => &c.device_dirty,
        None => &DEVICE_DIRTY,
    }
}
/// Whether any mirror exists (a fast path for programs without any).
static ANY: AtomicBool = AtomicBool::new(false);

fn mirrors() -> std::sync::MutexGuard<'static, Vec<Mirror>> {
    MIRRORS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The mirror whose CPU bytes hold `[p, p + n)`: its kind, CPU base,
/// device base and length.
pub fn find_cpu(p: usize, n: usize) -> Option<(Kind, usize, u64, usize)> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    mirrors()
        .iter()
        .find(|m| p >= m.cpu && p.checked_add(n).is_some_and(|e| e <= m.cpu + m.len.max(1)))
        .map(|m| (m.kind, m.cpu, m.dev, m.len))
}

/// The mirror whose device bytes hold `[p, p + n)`, as [`find_cpu`].
pub fn find_dev(p: u64, n: u64) -> Option<(Kind, usize, u64, usize)> {
    if !ANY.load(Ordering::Relaxed) {
        return None;
    }
    mirrors()
        .iter()
        .find(|m| {
            p >= m.dev
                && p.checked_add(n)
                    .is_some_and(|e| e <= m.dev + m.len.max(1) as u64)
        })
        .map(|m| (m.kind, m.cpu, m.dev, m.len))
}

/// If `[p, p + n)` lies in a mirror as a kernel addresses it, the CPU
/// address of the same bytes: copies and memsets use those, after
/// [`pull`] brought what kernels wrote.
pub fn host_view(p: u64, n: u64) -> Option<usize> {
    let (_, cpu, dev, _) = find_dev(p, n)?;
    Some(cpu + (p - dev) as usize)
}

/// Whether `[p, p + n)` lies in a mirror's CPU bytes (where the device
/// address differs, as for registered memory).
pub fn is_cpu(p: usize, n: usize) -> bool {
    find_cpu(p, n).is_some()
}

/// Pushes what the CPU changed in every mirror of the current context
/// since the device last saw it, before a kernel runs there.
pub fn push() -> Result<(), CUresult> {
    if !ANY.load(Ordering::Relaxed) {
        return Ok(());
    }
    let key = context::host_of_current();
    let mut ms = mirrors();
    for m in ms.iter_mut().filter(|m| m.ctx == key) {
        // SAFETY: the mirror's CPU bytes are mapped (or registered by the
        // program) for its whole length while it exists.
        let cpu = slice(m.cpu as *const c_void, m.len)?;
        let mut off = 0;
        while off < m.len {
            let end = (off + PAGE).min(m.len);
            if cpu[off..end] == m.clean[off..end] {
                off = end;
                continue;
            }
            // A run of changed pages, one copy.
            let mut run_end = end;
            while run_end < m.len {
                let next = (run_end + PAGE).min(m.len);
                if cpu[run_end..next] == m.clean[run_end..next] {
                    break;
                }
                run_end = next;
            }
            let data = &cpu[off..run_end];
            state::with(|cu| cu.memcpy_htod(m.dev + off as u64, data))?;
            m.clean[off..run_end].copy_from_slice(data);
            off = run_end;
        }
    }
    Ok(())
}

/// Records that a kernel was launched: the next synchronization pulls.
pub fn note_launch() {
    if ANY.load(Ordering::Relaxed) {
        device_dirty(context::host_of_current()).store(true, Ordering::Relaxed);
    }
}

/// Brings what kernels wrote to the mirrors' CPU bytes, if a kernel ran
/// since the last pull: the context is synchronized first, so every
/// kernel's writes are in. A page the device did not change keeps the
/// CPU's bytes. Errors are left for the program's own calls to report.
pub fn pull() {
    if !ANY.load(Ordering::Relaxed)
        || !device_dirty(context::host_of_current()).swap(false, Ordering::Relaxed)
    {
        return;
    }
    if state::with(|cu| cu.ctx_synchronize()).is_err() {
        return;
    }
    let key = context::host_of_current();
    let mut ms = mirrors();
    for m in ms.iter_mut().filter(|m| m.ctx == key) {
        let mut dev = vec![0u8; m.len];
        if state::with(|cu| cu.memcpy_dtoh(&mut dev, m.dev, 0)).is_err() {
            continue;
        }
        let Ok(cpu) = slice_mut(m.cpu as *mut c_void, m.len) else {
            continue;
        };
        for off in (0..m.len).step_by(PAGE) {
            let end = (off + PAGE).min(m.len);
            if dev[off..end] == m.clean[off..end] {
                continue;
            }
            if cpu[off..end] != m.clean[off..end] {
                // Both sides wrote this page since the push: the CPU while
                // a kernel ran. Bytes only one side changed take that
                // side's value; a byte both changed has no right answer
                // (a GPU without concurrent managed access would have
                // faulted the CPU's access): the device's stays, and the
                // synchronization fails instead of returning wrong data.
                for i in off..end {
                    if cpu[i] != m.clean[i] && dev[i] != m.clean[i] && cpu[i] != dev[i] {
                        if !CONFLICT.swap(true, Ordering::Relaxed) {
                            eprintln!(
                                "fairgpu guest-lib: the CPU wrote managed memory at {:#x} while a kernel wrote it too \
                                 (concurrent managed access is not supported: CONCURRENT_MANAGED_ACCESS is 0); \
                                 the synchronization fails with CUDA_ERROR_ILLEGAL_STATE",
                                m.cpu + i
                            );
                        }
                        cpu[i] = dev[i];
                    } else if cpu[i] == m.clean[i] {
                        cpu[i] = dev[i];
                    }
                }
            } else {
                cpu[off..end].copy_from_slice(&dev[off..end]);
            }
            m.clean[off..end].copy_from_slice(&dev[off..end]);
        }
    }
}

/// Set when a pull found a byte both the CPU and a kernel changed.
static CONFLICT: AtomicBool = AtomicBool::new(false);

/// `CUDA_ERROR_ILLEGAL_STATE`.
const ILLEGAL_STATE: CUresult = 401;

/// Whether a pull found the CPU and a kernel writing the same managed
/// bytes since the last look: the error the synchronization returns.
pub fn conflict() -> Result<(), CUresult> {
    if CONFLICT.swap(false, Ordering::Relaxed) {
        Err(ILLEGAL_STATE)
    } else {
        Ok(())
    }
}

/// A device allocation of `len` bytes with a page-aligned address inside
/// it, and CPU memory mapped at that very address: (allocation, address).
fn alloc_shared(len: usize) -> Result<(u64, u64), CUresult> {
    let mapped = len
        .checked_next_multiple_of(PAGE)
        .ok_or(err::INVALID_VALUE)?;
    let alloc = device_alloc((mapped + PAGE) as u64)?;
    let addr = (alloc as usize).next_multiple_of(PAGE);
    // SAFETY: a fresh anonymous private mapping; MAP_FIXED_NOREPLACE never
    // replaces an existing mapping of the process (it fails instead).
    let p = unsafe {
        libc::mmap(
            addr as *mut c_void,
            mapped,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED || p as usize != addr {
        if p != libc::MAP_FAILED {
            // SAFETY: a mapping this function just made (an old kernel that
            // ignored the flag placed it elsewhere).
            unsafe { libc::munmap(p, mapped) };
        }
        let _ = device_free(alloc);
        eprintln!(
            "fairgpu guest-lib: cannot map {len} bytes of managed or mapped memory at device address {addr:#x} (taken in this process)"
        );
        return Err(err::OUT_OF_MEMORY);
    }
    Ok((alloc, addr as u64))
}

fn insert(m: Mirror) {
    if let Ok(mut a) = ADVICE.lock() {
        a.remove(&m.dev);
    }
    mirrors().push(m);
    ANY.store(true, Ordering::Relaxed);
}

/// Removes the mirror `pred` picks; returns it.
fn remove(pred: impl Fn(&Mirror) -> bool) -> Option<Mirror> {
    let mut ms = mirrors();
    let i = ms.iter().position(pred)?;
    let m = ms.swap_remove(i);
    if ms.is_empty() {
        ANY.store(false, Ordering::Relaxed);
    }
    Some(m)
}

/// Unmaps and frees a mirror mapped at its device address.
fn release_shared(m: &Mirror) -> Result<(), CUresult> {
    let mapped = m.len.next_multiple_of(PAGE);
    // SAFETY: the mapping `alloc_shared` made for this mirror, which is
    // gone from the table: nothing of this library refers to it any more.
    unsafe { libc::munmap(m.cpu as *mut c_void, mapped) };
    device_free(m.alloc)
}

/// `CU_MEM_ATTACH_GLOBAL`, `_HOST`, `_SINGLE`.
const ATTACH_GLOBAL: u32 = 1;
const ATTACH_HOST: u32 = 2;
const ATTACH_SINGLE: u32 = 4;

/// `cuMemAllocManaged`.
#[no_mangle]
pub extern "C" fn cuMemAllocManaged(dptr: *mut CUdeviceptr, size: usize, flags: u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if dptr.is_null() || size == 0 || !matches!(flags, ATTACH_GLOBAL | ATTACH_HOST) {
            return Err(err::INVALID_VALUE);
        }
        let (alloc, addr) = alloc_shared(size)?;
        insert(Mirror {
            kind: Kind::Managed,
            cpu: addr as usize,
            dev: addr,
            len: size,
            alloc,
            clean: vec![0; size],
            ctx: context::host_of_current(),
        });
        // SAFETY: non-null, writable per the API.
        unsafe { out(dptr, addr) }
    })
}

/// Frees a mirror by the pointer the program holds (managed: by
/// `cuMemFree`; mapped host memory: by `cuMemFreeHost`). `Ok(false)` if
/// `p` starts no mirror of that family.
pub fn free(p: u64, host_alloc: bool) -> Result<bool, CUresult> {
    let Some(m) = remove(|m| {
        m.dev == p
            && match m.kind {
                Kind::Managed => !host_alloc,
                Kind::HostMapped { .. } => host_alloc,
                Kind::Registered { .. } | Kind::ModuleVar { .. } => false,
            }
    }) else {
        return Ok(false);
    };
    release_shared(&m)?;
    Ok(true)
}

/// `CU_MEMHOSTALLOC_DEVICEMAP`, `CU_MEMHOSTREGISTER_DEVICEMAP`.
pub const DEVICEMAP: u32 = 0x02;

/// `cuMemHostAlloc` with `DEVICEMAP`: host memory mapped at its device
/// address.
pub fn host_alloc_mapped(size: usize, flags: u32) -> Result<*mut c_void, CUresult> {
    let (alloc, addr) = alloc_shared(size)?;
    insert(Mirror {
        kind: Kind::HostMapped { flags },
        cpu: addr as usize,
        dev: addr,
        len: size,
        alloc,
        clean: vec![0; size],
        ctx: context::host_of_current(),
    });
    Ok(addr as *mut c_void)
}

/// `cuMemHostRegister` with `DEVICEMAP`: the program's memory, mirrored
/// by a device allocation.
pub fn register_mapped(p: *mut c_void, size: usize, flags: u32) -> Result<(), CUresult> {
    if find_cpu(p as usize, size).is_some() {
        return Err(fairgpu_protocol::Status(712).0); // HOST_MEMORY_ALREADY_REGISTERED
    }
    let dev = device_alloc(size as u64)?;
    insert(Mirror {
        kind: Kind::Registered { flags },
        cpu: p as usize,
        dev,
        len: size,
        alloc: dev,
        // The device starts zeroed; the next push sends what differs.
        clean: vec![0; size],
        ctx: context::host_of_current(),
    });
    Ok(())
}

/// `cuMemHostUnregister` of mirrored memory: `Ok(false)` if `p` is not.
pub fn unregister(p: *mut c_void) -> Result<bool, CUresult> {
    let Some(m) = remove(|m| m.cpu == p as usize && matches!(m.kind, Kind::Registered { .. }))
    else {
        return Ok(false);
    };
    // The device's last writes belong to the program's memory.
    if device_dirty(m.ctx).load(Ordering::Relaxed)
        && state::with_in(m.ctx, |cu| cu.ctx_synchronize()).is_ok()
    {
        let mut dev = vec![0u8; m.len];
        if state::with_in(m.ctx, |cu| cu.memcpy_dtoh(&mut dev, m.dev, 0)).is_ok() {
            let cpu = slice_mut(p, m.len)?;
            for off in (0..m.len).step_by(PAGE) {
                let end = (off + PAGE).min(m.len);
                if dev[off..end] != m.clean[off..end] {
                    cpu[off..end].copy_from_slice(&dev[off..end]);
                }
            }
        }
    }
    device_free(m.dev)?;
    Ok(true)
}

/// `cuMemHostGetDevicePointer_v2`.
#[no_mangle]
pub extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut CUdeviceptr,
    p: *mut c_void,
    flags: u32,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if flags != 0 {
            return Err(err::INVALID_VALUE);
        }
        let (_, cpu, dev, _) = find_cpu(p as usize, 1)
            .filter(|(k, ..)| !k.is_managed())
            .ok_or(err::INVALID_VALUE)?;
        // SAFETY: writable per the API (checked for null).
        unsafe { out(pdptr, dev + (p as usize - cpu) as u64) }
    })
}

/// `cuMemHostGetFlags`: the flags mapped memory was allocated or
/// registered with.
#[no_mangle]
pub extern "C" fn cuMemHostGetFlags(pflags: *mut u32, p: *mut c_void) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let flags = match find_cpu(p as usize, 1) {
            Some((Kind::HostMapped { flags } | Kind::Registered { flags }, ..)) => flags,
            _ => crate::memory::host_flags(p as usize).ok_or(err::INVALID_VALUE)?,
        };
        // SAFETY: writable per the API (checked for null).
        unsafe { out(pflags, flags) }
    })
}

/// Checks that `[p, p + n)` is managed memory of this process.
fn managed_range(p: CUdeviceptr, n: usize) -> Result<(), CUresult> {
    match find_dev(p, n as u64) {
        Some((k, ..)) if k.is_managed() && n > 0 => Ok(()),
        _ => Err(err::INVALID_VALUE),
    }
}

/// Pages this library mapped for `__managed__` variables, and how many
/// variables lie in each (variables of one module share pages).
static VAR_PAGES: Mutex<BTreeMap<usize, u32>> = Mutex::new(BTreeMap::new());

/// Maps the CPU pages holding `[at, at + len)` for module variables (a
/// page already mapped for another variable is shared); on failure, none.
fn map_var_pages(at: usize, len: usize) -> Result<(), CUresult> {
    let first = at & !(PAGE - 1);
    let end = (at + len).next_multiple_of(PAGE);
    let mut pages = VAR_PAGES.lock().map_err(|_| err::UNKNOWN)?;
    let mut done = Vec::new();
    for page in (first..end).step_by(PAGE) {
        if let Some(c) = pages.get_mut(&page) {
            *c += 1;
            done.push(page);
            continue;
        }
        // SAFETY: a fresh anonymous private mapping of one page;
        // MAP_FIXED_NOREPLACE never replaces a mapping of the process.
        let p = unsafe {
            libc::mmap(
                page as *mut c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p as usize != page {
            if p != libc::MAP_FAILED {
                // SAFETY: the mapping just made, elsewhere.
                unsafe { libc::munmap(p, PAGE) };
            }
            unmap_var_pages_locked(&mut pages, &done);
            eprintln!(
                "fairgpu guest-lib: cannot map the __managed__ variable at device address {at:#x} \
                 for the CPU (the address is taken in this process)"
            );
            return Err(err::OUT_OF_MEMORY);
        }
        pages.insert(page, 1);
        done.push(page);
    }
    Ok(())
}

fn unmap_var_pages_locked(pages: &mut BTreeMap<usize, u32>, which: &[usize]) {
    for page in which {
        if let Some(c) = pages.get_mut(page) {
            *c -= 1;
            if *c == 0 {
                pages.remove(page);
                // SAFETY: a page `map_var_pages` mapped that no variable
                // uses any more.
                unsafe { libc::munmap(*page as *mut c_void, PAGE) };
            }
        }
    }
}

/// A `__managed__` variable at device address `dev` of `len` bytes, of
/// module `module`: the CPU addresses the same bytes at the same address
/// (as cudart hands the program that address), kept coherent as managed
/// memory is. Its current bytes (the initializer) come from the device.
pub fn adopt_module_var(dev: u64, len: usize, module: usize) -> Result<(), CUresult> {
    if len == 0 || find_dev(dev, len as u64).is_some() {
        return Ok(());
    }
    let mut bytes = vec![0u8; len];
    state::with(|cu| cu.memcpy_dtoh(&mut bytes, dev, 0))?;
    map_var_pages(dev as usize, len)?;
    let cpu = slice_mut(dev as *mut c_void, len)?;
    cpu.copy_from_slice(&bytes);
    insert(Mirror {
        kind: Kind::ModuleVar { module },
        cpu: dev as usize,
        dev,
        len,
        alloc: 0,
        clean: bytes,
        ctx: context::host_of_current(),
    });
    Ok(())
}

/// Forgets the mirrors of a destroyed context, whose host context freed
/// their device memory: what this library mapped for them is unmapped
/// (the program's own registered memory stays the program's).
pub fn forget_context(key: HostKey) {
    while let Some(m) = remove(|m| m.ctx == key) {
        match m.kind {
            Kind::Managed | Kind::HostMapped { .. } => {
                // SAFETY: the mapping `alloc_shared` made for this mirror,
                // gone from the table: nothing of this library refers to it.
                unsafe { libc::munmap(m.cpu as *mut c_void, m.len.next_multiple_of(PAGE)) };
            }
            Kind::ModuleVar { .. } => unmap_var_pages_of(&m),
            Kind::Registered { .. } => {}
        }
    }
}

/// Unmaps the pages of a forgotten module variable that no other
/// variable uses.
fn unmap_var_pages_of(m: &Mirror) {
    let first = m.cpu & !(PAGE - 1);
    let end = (m.cpu + m.len).next_multiple_of(PAGE);
    let pages: Vec<usize> = (first..end).step_by(PAGE).collect();
    if let Ok(mut p) = VAR_PAGES.lock() {
        unmap_var_pages_locked(&mut p, &pages);
    }
}

/// Forgets the `__managed__` variables of an unloaded module and unmaps
/// the pages no other variable uses.
pub fn forget_module_vars(module: usize) {
    while let Some(m) = remove(|m| m.kind == Kind::ModuleVar { module }) {
        unmap_var_pages_of(&m);
    }
}

/// A prefetch to the device pushes the CPU's changes now; to the CPU
/// (`CU_DEVICE_CPU`, -1) it pulls.
fn prefetch(p: CUdeviceptr, n: usize, to_cpu: bool) -> CUresult {
    ffi_result(|| {
        require_current()?;
        managed_range(p, n)?;
        let place = if to_cpu { PLACE_CPU } else { PLACE_DEVICE };
        mark_pages(p, n, |b| (b & !PREFETCH_MASK) | place << PREFETCH_SHIFT)?;
        if to_cpu {
            pull();
            Ok(())
        } else {
            push()
        }
    })
}

/// `CUmemLocation`: type (1 device, 2 host, 3 host NUMA, 4 host NUMA
/// current), id.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemLocation {
    pub kind: u32,
    pub id: i32,
}

fn location_is_cpu(l: MemLocation) -> Result<bool, CUresult> {
    match (l.kind, l.id) {
        (1, 0) => Ok(false),
        (2..=4, _) => Ok(true),
        _ => Err(err::INVALID_DEVICE),
    }
}

/// `cuMemPrefetchAsync`.
#[no_mangle]
pub extern "C" fn cuMemPrefetchAsync(p: CUdeviceptr, n: usize, dev: i32, _s: CUstream) -> CUresult {
    match dev {
        0 => prefetch(p, n, false),
        -1 => prefetch(p, n, true),
        _ => err::INVALID_DEVICE,
    }
}

/// `cuMemPrefetchAsync_ptsz`.
#[no_mangle]
pub extern "C" fn cuMemPrefetchAsync_ptsz(
    p: CUdeviceptr,
    n: usize,
    dev: i32,
    s: CUstream,
) -> CUresult {
    cuMemPrefetchAsync(p, n, dev, s)
}

/// `cuMemPrefetchAsync_v2`.
#[no_mangle]
pub extern "C" fn cuMemPrefetchAsync_v2(
    p: CUdeviceptr,
    n: usize,
    loc: MemLocation,
    _flags: u32,
    _s: CUstream,
) -> CUresult {
    match location_is_cpu(loc) {
        Ok(cpu) => prefetch(p, n, cpu),
        Err(e) => e,
    }
}

/// `cuMemPrefetchAsync_v2_ptsz`.
#[no_mangle]
pub extern "C" fn cuMemPrefetchAsync_v2_ptsz(
    p: CUdeviceptr,
    n: usize,
    loc: MemLocation,
    flags: u32,
    s: CUstream,
) -> CUresult {
    cuMemPrefetchAsync_v2(p, n, loc, flags, s)
}

/// Advice is accepted and has no effect: where the bytes live is this
/// library's business (see the module documentation).
fn advise(p: CUdeviceptr, n: usize, advice: u32, cpu: bool) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if !(1..=6).contains(&advice) {
            return Err(err::INVALID_VALUE);
        }
        managed_range(p, n)?;
        let place = if cpu { PLACE_CPU } else { PLACE_DEVICE };
        let accessed = if cpu { ACCESSED_CPU } else { ACCESSED_DEVICE };
        mark_pages(p, n, |b| match advice {
            1 => b | READ_MOSTLY,
            2 => b & !READ_MOSTLY,
            3 => (b & !PREFERRED_MASK) | place << PREFERRED_SHIFT,
            4 => b & !PREFERRED_MASK,
            5 => b | accessed,
            _ => b & !accessed,
        })
    })
}

// What `cuMemAdvise` and `cuMemPrefetchAsync` said of each page of a
// managed range, for `cuMemRangeGetAttribute`: one byte per page.
const READ_MOSTLY: u8 = 1;
const PREFERRED_SHIFT: u8 = 1;
const PREFERRED_MASK: u8 = 3 << PREFERRED_SHIFT;
const ACCESSED_DEVICE: u8 = 1 << 3;
const ACCESSED_CPU: u8 = 1 << 4;
const PREFETCH_SHIFT: u8 = 5;
const PREFETCH_MASK: u8 = 3 << PREFETCH_SHIFT;
/// A place in the two-bit fields: none, the device, the CPU.
const PLACE_DEVICE: u8 = 1;
const PLACE_CPU: u8 = 2;

/// Per mirror (by device base), a byte per page, made at the first advice
/// or prefetch.
static ADVICE: Mutex<BTreeMap<u64, Vec<u8>>> = Mutex::new(BTreeMap::new());

/// The mirror holding `[p, p + n)` and the page indices the range covers.
fn pages_of(p: CUdeviceptr, n: usize) -> Result<(u64, usize, std::ops::Range<usize>), CUresult> {
    let (kind, _, dev, len) = find_dev(p, n.max(1) as u64).ok_or(err::INVALID_VALUE)?;
    if !kind.is_managed() || n == 0 {
        return Err(err::INVALID_VALUE);
    }
    let off = (p - dev) as usize;
    Ok((dev, len, off / PAGE..(off + n).div_ceil(PAGE)))
}

/// Applies `f` to the advice byte of each page of `[p, p + n)`.
fn mark_pages(p: CUdeviceptr, n: usize, f: impl Fn(u8) -> u8) -> Result<(), CUresult> {
    let (dev, len, pages) = pages_of(p, n)?;
    let mut a = ADVICE.lock().map_err(|_| err::UNKNOWN)?;
    let bytes = a.entry(dev).or_insert_with(|| vec![0; len.div_ceil(PAGE)]);
    for b in &mut bytes[pages] {
        *b = f(*b);
    }
    Ok(())
}

/// `CU_DEVICE_CPU`, `CU_DEVICE_INVALID`.
const DEVICE_CPU: i32 = -1;
const DEVICE_INVALID: i32 = -2;

/// `cuMemRangeGetAttribute` on managed memory: what was advised and
/// prefetched for every page of the range (`CU_DEVICE_INVALID`, or not
/// read-mostly, where the pages differ).
#[no_mangle]
pub extern "C" fn cuMemRangeGetAttribute(
    data: *mut c_void,
    size: usize,
    attr: u32,
    p: CUdeviceptr,
    n: usize,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if data.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let (dev, _, pages) = pages_of(p, n)?;
        let bytes: Vec<u8> = {
            let a = ADVICE.lock().map_err(|_| err::UNKNOWN)?;
            match a.get(&dev) {
                Some(b) => b[pages].to_vec(),
                None => vec![0; pages.len()],
            }
        };
        let all = |f: &dyn Fn(u8) -> bool| bytes.iter().all(|&b| f(b));
        // The place a two-bit field names on every page, if it is one.
        let place = |shift: u8| -> Option<u8> {
            let first = (bytes[0] >> shift) & 3;
            (first != 0 && all(&|b| (b >> shift) & 3 == first)).then_some(first)
        };
        let ordinal = |pl: Option<u8>| match pl {
            Some(PLACE_DEVICE) => 0,
            Some(PLACE_CPU) => DEVICE_CPU,
            _ => DEVICE_INVALID,
        };
        // `CUmemLocationType`: invalid 0, device 1, host 2.
        let kind = |pl: Option<u8>| match pl {
            Some(PLACE_DEVICE) => 1,
            Some(PLACE_CPU) => 2,
            _ => 0,
        };
        let one = |v: i32| -> Result<(), CUresult> {
            if size != 4 {
                return Err(err::INVALID_VALUE);
            }
            // SAFETY: non-null, and the caller says it holds 4 bytes.
            unsafe { data.cast::<i32>().write_unaligned(v) };
            Ok(())
        };
        match attr {
            // READ_MOSTLY
            1 => one(i32::from(all(&|b| b & READ_MOSTLY != 0))),
            // PREFERRED_LOCATION, LAST_PREFETCH_LOCATION
            2 => one(ordinal(place(PREFERRED_SHIFT))),
            4 => one(ordinal(place(PREFETCH_SHIFT))),
            // their _TYPE and _ID forms
            5 => one(kind(place(PREFERRED_SHIFT))),
            6 => one(0),
            7 => one(kind(place(PREFETCH_SHIFT))),
            8 => one(0),
            // ACCESSED_BY: the places set on every page, then INVALID.
            3 => {
                if size == 0 || !size.is_multiple_of(4) {
                    return Err(err::INVALID_VALUE);
                }
                let mut list = Vec::new();
                if all(&|b| b & ACCESSED_DEVICE != 0) {
                    list.push(0);
                }
                if all(&|b| b & ACCESSED_CPU != 0) {
                    list.push(DEVICE_CPU);
                }
                for i in 0..size / 4 {
                    let v = list.get(i).copied().unwrap_or(DEVICE_INVALID);
                    // SAFETY: non-null, `size` bytes per the caller.
                    unsafe { data.cast::<i32>().add(i).write_unaligned(v) };
                }
                Ok(())
            }
            _ => Err(err::INVALID_VALUE),
        }
    })
}

/// `cuMemRangeGetAttributes`: each attribute into its own buffer.
#[no_mangle]
pub extern "C" fn cuMemRangeGetAttributes(
    data: *mut *mut c_void,
    sizes: *mut usize,
    attrs: *mut u32,
    count: usize,
    p: CUdeviceptr,
    n: usize,
) -> CUresult {
    ffi_result(|| {
        if data.is_null() || sizes.is_null() || attrs.is_null() || count == 0 || count > 64 {
            return Err(err::INVALID_VALUE);
        }
        for i in 0..count {
            // SAFETY: the caller passes `count` (bounded) entries in each
            // array.
            let (d, sz, a) = unsafe { (*data.add(i), *sizes.add(i), *attrs.add(i)) };
            match cuMemRangeGetAttribute(d, sz, a, p, n) {
                err::SUCCESS => {}
                e => return Err(e),
            }
        }
        Ok(())
    })
}

/// `cuMemAdvise`.
#[no_mangle]
pub extern "C" fn cuMemAdvise(p: CUdeviceptr, n: usize, advice: u32, dev: i32) -> CUresult {
    if dev != 0 && dev != -1 {
        return err::INVALID_DEVICE;
    }
    advise(p, n, advice, dev == -1)
}

/// `cuMemAdvise_v2`.
#[no_mangle]
pub extern "C" fn cuMemAdvise_v2(
    p: CUdeviceptr,
    n: usize,
    advice: u32,
    loc: MemLocation,
) -> CUresult {
    match location_is_cpu(loc) {
        Ok(cpu) => advise(p, n, advice, cpu),
        Err(e) => e,
    }
}

/// `cuStreamAttachMemAsync`: accepted for managed memory; every stream
/// sees every mirror.
#[no_mangle]
pub extern "C" fn cuStreamAttachMemAsync(
    _s: CUstream,
    p: CUdeviceptr,
    n: usize,
    flags: u32,
) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if !matches!(flags, ATTACH_GLOBAL | ATTACH_HOST | ATTACH_SINGLE) {
            return Err(err::INVALID_VALUE);
        }
        // Length 0: the whole allocation.
        managed_range(p, n.max(1))
    })
}

/// `cuStreamAttachMemAsync_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamAttachMemAsync_ptsz(
    s: CUstream,
    p: CUdeviceptr,
    n: usize,
    flags: u32,
) -> CUresult {
    cuStreamAttachMemAsync(s, p, n, flags)
}
