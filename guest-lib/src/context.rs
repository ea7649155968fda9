//! Contexts, guest side.
//!
//! The primary context is the process's host context: the process's
//! channel and its threads' channels (`crate::state`). A context
//! `cuCtxCreate` makes is a host context of its own: a channel claimed for
//! it, which every thread that makes it current uses (taking turns), so its
//! memory, modules, streams, events, limits and sticky errors are its own,
//! and `cuCtxDestroy` hands the channel back, which frees them on the host.
//! When the region has no channel to spare (one stays free for another
//! process to start), the new context names the primary's host context
//! instead, as before, and says so once. Which context is current is a
//! per-thread stack, as in the driver; calls are sent to the host context
//! of the current one ([`host_of_current`]).

use std::cell::RefCell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

use fairgpu_frontend::cuda::Cuda;
use fairgpu_protocol::cuda::limit as host_limit;

use crate::types::{err, CUcontext, CUdevice, CUresult};
use crate::{ffi, ffi_result, state};

/// A context object.
#[derive(Debug)]
pub struct GuestContext {
    flags: AtomicU32,
    retained: AtomicU32,
    /// `cuCtxSetCacheConfig`'s `CUfunc_cache`: a preference the device may
    /// ignore, remembered so that `cuCtxGetCacheConfig` answers what was set.
    cache_config: AtomicU32,
    /// Whether it is a host context of its own (`channel`); set once, when
    /// it is made.
    own: AtomicBool,
    /// Its host context's channel while it lives (`own` contexts only).
    pub channel: Mutex<Option<Cuda>>,
    /// Kernels that can print were launched in it since its output was
    /// last taken (`crate::state::flush_output`). Relaxed: a hint; the
    /// output itself travels in order on the channel.
    pub output_pending: AtomicBool,
    /// A kernel ran in it since its managed memory was last pulled
    /// (`crate::managed`); Relaxed as `output_pending`.
    pub device_dirty: AtomicBool,
    /// `cuCtxDestroy` ended it.
    gone: AtomicBool,
}

impl GuestContext {
    const fn new(flags: u32, retained: u32) -> GuestContext {
        GuestContext {
            flags: AtomicU32::new(flags),
            retained: AtomicU32::new(retained),
            cache_config: AtomicU32::new(CACHE_PREFER_NONE),
            own: AtomicBool::new(false),
            channel: Mutex::new(None),
            output_pending: AtomicBool::new(false),
            device_dirty: AtomicBool::new(false),
            gone: AtomicBool::new(false),
        }
    }

    /// Whether it is a host context of its own.
    pub fn is_own(&self) -> bool {
        // Relaxed: set before the context's handle is given out, which the
        // program's own synchronization orders before any use in another
        // thread.
        self.own.load(Ordering::Relaxed)
    }
}

/// Which host context a call goes to: the primary's, numbered from 0 by
/// its resets (`cuDevicePrimaryCtxReset` ends one and the next call makes
/// the next), or a created context's own (its handle's value, far above
/// any such number). Created contexts are never freed, so no key is ever
/// reused.
pub type HostKey = usize;

/// Keys below this are the primary's; a created context's is the address
/// of a heap object, which is never this low.
const FIRST_CREATED_KEY: HostKey = 1 << 20;

/// How many times the primary context was reset: its key now.
static PRIMARY_GENERATION: AtomicUsize = AtomicUsize::new(0);

/// The primary context's host context now.
pub fn primary_key() -> HostKey {
    // Relaxed: a reset is ordered with the calls of other threads only by
    // the program's own synchronization, as on the driver.
    PRIMARY_GENERATION.load(Ordering::Relaxed)
}

/// Whether `key` is one of the primary's (the present one or an earlier).
pub fn is_primary_key(key: HostKey) -> bool {
    key < FIRST_CREATED_KEY
}

/// The context object behind `key` (none for the primary's keys).
pub fn by_key(key: HostKey) -> Option<&'static GuestContext> {
    if is_primary_key(key) {
        return None;
    }
    // SAFETY: keys at or above FIRST_CREATED_KEY are only made by `key_of`
    // from created contexts, which are leaked boxes that live for the rest
    // of the process.
    Some(unsafe { &*(key as *const GuestContext) })
}

/// Whether host context `key` still lives.
pub fn alive(key: HostKey) -> bool {
    match by_key(key) {
        None => key == primary_key(),
        // Relaxed: a hint for choosing a module; a call into a context that
        // went meanwhile fails with CONTEXT_IS_DESTROYED.
        Some(c) => !c.gone.load(Ordering::Relaxed),
    }
}

/// The host context of context `ctx` (null: the primary's).
pub fn key_of(ctx: CUcontext) -> HostKey {
    if ctx.is_null() || ctx == primary() || !object(ctx).is_own() {
        return primary_key();
    }
    let key = ctx as HostKey;
    debug_assert!(key >= FIRST_CREATED_KEY);
    key
}

/// The host context of the calling thread's current context (with none
/// current, the primary's: libraries load before a context is bound).
pub fn host_of_current() -> HostKey {
    key_of(current())
}

/// `CU_FUNC_CACHE_PREFER_NONE`; the values run to `PREFER_EQUAL` (3).
const CACHE_PREFER_NONE: u32 = 0;
const CACHE_PREFER_EQUAL: u32 = 3;
/// `CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE`: the banks of every device
/// since Maxwell, whatever is asked for; the values run to
/// `EIGHT_BYTE_BANK_SIZE` (2).
const SHARED_FOUR_BYTE_BANK_SIZE: u32 = 1;
const SHARED_EIGHT_BYTE_BANK_SIZE: u32 = 2;

static PRIMARY: GuestContext = GuestContext::new(0, 0);
static CREATED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

thread_local! {
    static STACK: RefCell<Vec<CUcontext>> = const { RefCell::new(Vec::new()) };
}

/// The live created contexts that have host contexts of their own.
pub fn created_own() -> Vec<&'static GuestContext> {
    let created = match CREATED.try_lock() {
        Ok(g) => g.clone(),
        Err(_) => return Vec::new(),
    };
    created
        .into_iter()
        .map(|c| object(c as CUcontext))
        .filter(|o| o.is_own())
        .collect()
}

/// The primary context's handle.
pub fn primary() -> CUcontext {
    &PRIMARY as *const GuestContext as *mut c_void
}

pub fn valid(ctx: CUcontext) -> bool {
    ctx == primary()
        || CREATED
            .lock()
            .map(|v| v.contains(&(ctx as usize)))
            .unwrap_or(false)
}

fn object(ctx: CUcontext) -> &'static GuestContext {
    if ctx == primary() {
        return &PRIMARY;
    }
    // SAFETY: `valid(ctx)` was checked by every caller, or `ctx` was on a
    // thread's stack, where only valid contexts are pushed; created
    // contexts are leaked boxes that live for the rest of the process.
    unsafe { &*(ctx as *const GuestContext) }
}

/// The calling thread's current context (null if none).
pub fn current() -> CUcontext {
    // During thread or process teardown (libcudart's exit handlers) the
    // stack may already be gone: no context is current then.
    STACK
        .try_with(|s| s.borrow().last().copied().unwrap_or(std::ptr::null_mut()))
        .unwrap_or(std::ptr::null_mut())
}

/// Fails with INVALID_CONTEXT unless the thread has a current context.
pub fn require_current() -> Result<(), CUresult> {
    state::device()?;
    if current().is_null() {
        Err(err::INVALID_CONTEXT)
    } else {
        Ok(())
    }
}

fn check_device(dev: CUdevice) -> Result<(), CUresult> {
    state::device()?;
    if dev == 0 {
        Ok(())
    } else {
        Err(err::INVALID_DEVICE)
    }
}

/// Writes `v` through an out-pointer, refusing null.
///
/// # Safety
/// `p` must be null or valid for a write of `T`.
pub unsafe fn out<T>(p: *mut T, v: T) -> Result<(), CUresult> {
    if p.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: non-null, and valid for writes per this function's contract.
    unsafe { p.write(v) };
    Ok(())
}

/// `cuDevicePrimaryCtxRetain`.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    ffi_result(|| {
        check_device(dev)?;
        PRIMARY.retained.fetch_add(1, Ordering::Relaxed);
        // SAFETY: caller passes a writable CUcontext slot (checked for null).
        unsafe { out(pctx, primary()) }
    })
}

fn primary_release(dev: CUdevice) -> CUresult {
    ffi_result(|| {
        check_device(dev)?;
        let before = PRIMARY
            .retained
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        if before == Ok(1) {
            crate::export_tables::context_destroyed(primary());
        }
        Ok(())
    })
}

/// `cuDevicePrimaryCtxRelease` (legacy ABI).
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease(dev: CUdevice) -> CUresult {
    primary_release(dev)
}

/// `cuDevicePrimaryCtxRelease_v2`.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    primary_release(dev)
}

fn primary_set_flags(dev: CUdevice, flags: u32) -> CUresult {
    ffi_result(|| {
        check_device(dev)?;
        PRIMARY.flags.store(flags, Ordering::Relaxed);
        Ok(())
    })
}

/// `cuDevicePrimaryCtxSetFlags` (legacy ABI).
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags(dev: CUdevice, flags: u32) -> CUresult {
    primary_set_flags(dev, flags)
}

/// `cuDevicePrimaryCtxSetFlags_v2`.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: CUdevice, flags: u32) -> CUresult {
    primary_set_flags(dev, flags)
}

/// `cuDevicePrimaryCtxGetState`.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxGetState(
    dev: CUdevice,
    flags: *mut u32,
    active: *mut i32,
) -> CUresult {
    ffi_result(|| {
        check_device(dev)?;
        // SAFETY: caller passes writable slots (checked for null).
        unsafe {
            out(flags, PRIMARY.flags.load(Ordering::Relaxed))?;
            out(
                active,
                i32::from(PRIMARY.retained.load(Ordering::Relaxed) > 0),
            )
        }
    })
}

/// `cuDevicePrimaryCtxReset`: the primary context's host context is
/// destroyed with everything made in it (`ContextDestroy`, for every
/// channel of the process that names it); the next call makes a fresh one.
/// Libraries load into it again at their next use; modules, memory,
/// streams and events of the old one are gone, as on the driver.
fn primary_reset(dev: CUdevice) -> CUresult {
    ffi_result(|| {
        check_device(dev)?;
        let old = primary_key();
        if old + 1 >= FIRST_CREATED_KEY {
            // The primary's keys would run into the created contexts'.
            static SAID: std::sync::Once = std::sync::Once::new();
            crate::say_once(&SAID, || {
                format!(
                    "cuDevicePrimaryCtxReset: the primary context was reset {old} times, the \
                     most a process may; this reset and later ones fail"
                )
            });
            return Err(err::OUT_OF_MEMORY);
        }
        state::flush_output_of(old);
        crate::managed::forget_context(old);
        crate::memory::forget_context(old);
        // A host that cannot destroy it (an older one) keeps it: what was
        // made in it stays until the process exits, as before.
        let _ = state::with_in(old, |cu| cu.context_destroy());
        PRIMARY_GENERATION.fetch_add(1, Ordering::Relaxed);
        crate::export_tables::context_destroyed(primary());
        Ok(())
    })
}

/// `cuDevicePrimaryCtxReset` (legacy ABI).
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxReset(dev: CUdevice) -> CUresult {
    primary_reset(dev)
}

/// `cuDevicePrimaryCtxReset_v2`.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxReset_v2(dev: CUdevice) -> CUresult {
    primary_reset(dev)
}

/// `cuCtxGetCurrent`.
#[no_mangle]
pub extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    ffi_result(|| {
        state::device()?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pctx, current()) }
    })
}

/// `cuCtxSetCurrent`: replaces the top of the thread's stack (null pops it).
#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if !ctx.is_null() && !valid(ctx) {
            return Err(err::INVALID_CONTEXT);
        }
        let _ = STACK.try_with(|s| {
            let mut s = s.borrow_mut();
            s.pop();
            if !ctx.is_null() {
                s.push(ctx);
            }
        });
        Ok(())
    })
}

/// `cuCtxPushCurrent_v2`.
#[no_mangle]
pub extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if !valid(ctx) {
            return Err(err::INVALID_CONTEXT);
        }
        let _ = STACK.try_with(|s| s.borrow_mut().push(ctx));
        Ok(())
    })
}

/// `cuCtxPopCurrent_v2`.
#[no_mangle]
pub extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let top = STACK
            .with(|s| s.borrow_mut().pop())
            .ok_or(err::INVALID_CONTEXT)?;
        if !pctx.is_null() {
            // SAFETY: non-null slot provided by the caller.
            unsafe { out(pctx, top)? };
        }
        Ok(())
    })
}

fn ctx_create(pctx: *mut CUcontext, flags: u32, dev: CUdevice) -> CUresult {
    ffi_result(|| {
        check_device(dev)?;
        if pctx.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let obj = Box::leak(Box::new(GuestContext::new(flags, 1)));
        match state::claim_context_channel() {
            Some(cu) => {
                *obj.channel.lock().unwrap_or_else(|p| p.into_inner()) = Some(cu);
                obj.own.store(true, Ordering::Relaxed);
            }
            None => shared_context_note(),
        }
        let ctx = obj as *mut GuestContext as *mut c_void;
        CREATED.lock().map_err(|_| err::UNKNOWN)?.push(ctx as usize);
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pctx, ctx)? };
        let _ = STACK.try_with(|s| s.borrow_mut().push(ctx));
        Ok(())
    })
}

/// Says once that a context was made on the primary's host context.
fn shared_context_note() {
    static SAID: std::sync::Once = std::sync::Once::new();
    crate::say_once(&SAID, || {
        "cuCtxCreate found no channel to spare in the region (one stays free for another \
         process): the new context shares the primary context's host context, so its memory is \
         freed only when the process exits and a sticky error in either is seen by both"
            .to_owned()
    });
}

/// Ends a created context: its output is printed, its channel drained and
/// handed back (the host frees what it held), and what this library keeps
/// for it forgotten. A thread that still has it current gets
/// CUDA_ERROR_CONTEXT_IS_DESTROYED.
fn destroy(ctx: CUcontext) -> Result<(), CUresult> {
    {
        let mut created = CREATED.lock().map_err(|_| err::UNKNOWN)?;
        let Some(i) = created.iter().position(|&c| c == ctx as usize) else {
            return Err(err::INVALID_CONTEXT);
        };
        created.swap_remove(i);
    }
    let _ = STACK.try_with(|s| s.borrow_mut().retain(|c| *c != ctx));
    crate::export_tables::context_destroyed(ctx);
    let obj = object(ctx);
    obj.gone.store(true, Ordering::Relaxed);
    if obj.is_own() {
        let key = ctx as HostKey;
        state::flush_output_of(key);
        crate::managed::forget_context(key);
        crate::memory::forget_context(key);
        let cu = obj.channel.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut cu) = cu {
            // Freed now, as the driver's cuCtxDestroy frees (the host would
            // also free it when the channel is handed back, a little later).
            let _ = cu.context_destroy();
            drop(cu);
        }
    }
    Ok(())
}

/// `cuCtxCreate_v2`: a new context with a host context of its own.
#[no_mangle]
pub extern "C" fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: u32, dev: CUdevice) -> CUresult {
    ctx_create(pctx, flags, dev)
}

/// `cuCtxCreate_v3` (execution-affinity parameters are ignored).
#[no_mangle]
pub extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    _params: *mut c_void,
    _n: i32,
    flags: u32,
    dev: CUdevice,
) -> CUresult {
    ctx_create(pctx, flags, dev)
}

/// `cuCtxCreate_v4` (creation parameters are ignored).
#[no_mangle]
pub extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    _params: *mut c_void,
    flags: u32,
    dev: CUdevice,
) -> CUresult {
    ctx_create(pctx, flags, dev)
}

/// `cuCtxDestroy_v2`: the context and everything made in it go (the
/// primary context is only unbound from this thread: its host context is
/// the process's).
#[no_mangle]
pub extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if ctx == primary() {
            let _ = STACK.try_with(|s| s.borrow_mut().retain(|c| *c != ctx));
            crate::export_tables::context_destroyed(ctx);
            return Ok(());
        }
        if !valid(ctx) {
            return Err(err::INVALID_CONTEXT);
        }
        destroy(ctx)
    })
}

/// `cuCtxAttach` (deprecated; PyCUDA still pairs it with `cuCtxDetach`):
/// one more use of the current context, handed back.
#[no_mangle]
pub extern "C" fn cuCtxAttach(pctx: *mut CUcontext, flags: u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if flags != 0 || pctx.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let ctx = current();
        object(ctx).retained.fetch_add(1, Ordering::Relaxed);
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pctx, ctx) }
    })
}

/// `cuCtxDetach` (deprecated): one use fewer of `ctx`, which must be
/// current; at none left, the context is destroyed as by `cuCtxDestroy`
/// (for the primary context: released, as by `cuDevicePrimaryCtxRelease`).
#[no_mangle]
pub extern "C" fn cuCtxDetach(ctx: CUcontext) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if !valid(ctx) || current() != ctx {
            return Err(err::INVALID_CONTEXT);
        }
        let before = object(ctx)
            .retained
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        match before {
            Ok(1) if ctx == primary() => {
                crate::export_tables::context_destroyed(ctx);
                Ok(())
            }
            Ok(1) => destroy(ctx),
            Ok(_) => Ok(()),
            Err(_) => Err(err::INVALID_CONTEXT),
        }
    })
}

fn ctx_get_device(dev: *mut CUdevice) -> CUresult {
    ffi_result(|| {
        require_current()?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(dev, 0) }
    })
}

/// `cuCtxGetDevice`.
#[no_mangle]
pub extern "C" fn cuCtxGetDevice(dev: *mut CUdevice) -> CUresult {
    ctx_get_device(dev)
}

/// `cuCtxGetDevice_v2` (CUDA 13: names the context).
#[no_mangle]
pub extern "C" fn cuCtxGetDevice_v2(dev: *mut CUdevice, _ctx: CUcontext) -> CUresult {
    ffi_result(|| {
        state::device()?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(dev, 0) }
    })
}

/// `cuCtxGetFlags`.
#[no_mangle]
pub extern "C" fn cuCtxGetFlags(flags: *mut u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let f = object(current()).flags.load(Ordering::Relaxed);
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(flags, f) }
    })
}

/// `cuCtxSetFlags`.
#[no_mangle]
pub extern "C" fn cuCtxSetFlags(flags: u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        object(current()).flags.store(flags, Ordering::Relaxed);
        Ok(())
    })
}

/// `cuCtxGetApiVersion`.
#[no_mangle]
pub extern "C" fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut u32) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if !ctx.is_null() && !valid(ctx) {
            return Err(err::INVALID_CONTEXT);
        }
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(version, 3020) }
    })
}

/// `cuCtxGetStreamPriorityRange`: the current context's, from the host
/// (a GPU's driver's range; SimGpu's 0 to -5).
#[no_mangle]
pub extern "C" fn cuCtxGetStreamPriorityRange(least: *mut i32, greatest: *mut i32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let (l, g) = state::with(|cu| cu.stream_priority_range())?;
        // SAFETY: null slots are allowed by the API; non-null ones are writable.
        unsafe {
            if !least.is_null() {
                out(least, l)?;
            }
            if !greatest.is_null() {
                out(greatest, g)?;
            }
        }
        Ok(())
    })
}

/// `CUlimit` values 0–9; SHMEM_SIZE (7) and CIG_ENABLED (8) describe a
/// CIG context (fairgpu's are not: 0) and can only be queried.
/// How many `CUlimit` values there are.
const LIMIT_COUNT: usize = 10;
static LIMITS: Mutex<[usize; LIMIT_COUNT]> =
    Mutex::new([1024, 1 << 20, 8 << 20, 2, 2048, 4, 128, 0, 0, 0]);
/// `CU_LIMIT_SHMEM_SIZE`.
const LIMIT_SHMEM_SIZE: u32 = 7;
/// `CU_LIMIT_CIG_ENABLED`.
const LIMIT_CIG_ENABLED: u32 = 8;

/// `cuCtxGetLimit`: the values last set (or defaults).
#[no_mangle]
pub extern "C" fn cuCtxGetLimit(value: *mut usize, limit: u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let v = *LIMITS
            .lock()
            .map_err(|_| err::UNKNOWN)?
            .get(limit as usize)
            .ok_or(err::INVALID_VALUE)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(value, v) }
    })
}

/// `cuCtxSetLimit`: the stack, printf FIFO and heap sizes go to the host,
/// whose device uses them and counts them against the VM's quota; the
/// others are remembered, not carried. A refused value leaves the old one.
#[no_mangle]
pub extern "C" fn cuCtxSetLimit(limit: u32, value: usize) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if matches!(limit, LIMIT_SHMEM_SIZE | LIMIT_CIG_ENABLED) {
            return Err(err::INVALID_VALUE);
        }
        if limit as usize >= LIMIT_COUNT {
            return Err(err::INVALID_VALUE);
        }
        // The host is asked without the table locked.
        if matches!(
            limit,
            host_limit::STACK_SIZE | host_limit::PRINTF_FIFO_SIZE | host_limit::MALLOC_HEAP_SIZE
        ) {
            state::with(|cu| cu.ctx_set_limit(limit, value as u64))?;
        }
        LIMITS.lock().map_err(|_| err::UNKNOWN)?[limit as usize] = value;
        Ok(())
    })
}

fn synchronize() -> CUresult {
    ffi_result(|| {
        require_current()?;
        state::with_sync(|cu| cu.ctx_synchronize())?;
        crate::pool::synchronized(None);
        Ok(())
    })
}

/// `cuCtxSynchronize`.
#[no_mangle]
pub extern "C" fn cuCtxSynchronize() -> CUresult {
    synchronize()
}

/// `cuCtxSynchronize_v2` (CUDA 13: names the context).
#[no_mangle]
pub extern "C" fn cuCtxSynchronize_v2(ctx: CUcontext) -> CUresult {
    ffi(|| match state::device() {
        Ok(_) if ctx.is_null() || ctx == current() => synchronize(),
        Ok(_) if !valid(ctx) => err::INVALID_CONTEXT,
        Ok(_) => ffi_result(|| {
            let key = key_of(ctx);
            let r = state::with_in(key, |cu| cu.ctx_synchronize());
            state::flush_output_of(key);
            r
        }),
        Err(e) => e,
    })
}

/// `cuCtxGetId`: a context's unique id (NULL: the current context), the
/// value the CUDA 13 export table gives for it too.
#[no_mangle]
pub extern "C" fn cuCtxGetId(ctx: CUcontext, id: *mut u64) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let ctx = if ctx.is_null() { current() } else { ctx };
        if ctx.is_null() {
            return Err(err::INVALID_CONTEXT);
        }
        if !valid(ctx) {
            return Err(err::INVALID_CONTEXT);
        }
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(id, ctx as usize as u64) }
    })
}

/// `cuProfilerInitialize`: nothing to set up; succeeds.
#[no_mangle]
pub extern "C" fn cuProfilerInitialize(
    _config: *const std::ffi::c_char,
    _output: *const std::ffi::c_char,
    _mode: u32,
) -> CUresult {
    ffi_result(|| state::device().map(|_| ()))
}

/// `cuProfilerStart`: no profiler runs in the guest; succeeds, as the
/// driver does when no profiler is attached.
#[no_mangle]
pub extern "C" fn cuProfilerStart() -> CUresult {
    ffi_result(|| state::device().map(|_| ()))
}

/// `cuProfilerStop`: see `cuProfilerStart`.
#[no_mangle]
pub extern "C" fn cuProfilerStop() -> CUresult {
    ffi_result(|| state::device().map(|_| ()))
}

/// `cuCtxGetCacheConfig`: what `cuCtxSetCacheConfig` set (default
/// `PREFER_NONE`).
#[no_mangle]
pub extern "C" fn cuCtxGetCacheConfig(config: *mut u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let c = object(current()).cache_config.load(Ordering::Relaxed);
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(config, c) }
    })
}

/// `cuCtxSetCacheConfig`: remembered; the split between L1 and shared
/// memory is the device's to choose, as on any GPU that ignores it.
#[no_mangle]
pub extern "C" fn cuCtxSetCacheConfig(config: u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if config > CACHE_PREFER_EQUAL {
            return Err(err::INVALID_VALUE);
        }
        object(current())
            .cache_config
            .store(config, Ordering::Relaxed);
        Ok(())
    })
}

/// `cuCtxGetSharedMemConfig`: four-byte banks.
#[no_mangle]
pub extern "C" fn cuCtxGetSharedMemConfig(config: *mut u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(config, SHARED_FOUR_BYTE_BANK_SIZE) }
    })
}

/// `cuCtxSetSharedMemConfig`: accepted and without effect, as on every
/// device whose bank size is fixed.
#[no_mangle]
pub extern "C" fn cuCtxSetSharedMemConfig(config: u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if config > SHARED_EIGHT_BYTE_BANK_SIZE {
            return Err(err::INVALID_VALUE);
        }
        Ok(())
    })
}

/// Checks a shared-memory configuration value (`cuFuncSetSharedMemConfig`).
pub fn shared_config_valid(config: u32) -> Result<(), CUresult> {
    if config > SHARED_EIGHT_BYTE_BANK_SIZE {
        Err(err::INVALID_VALUE)
    } else {
        Ok(())
    }
}

/// `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED`.
const PEER_ACCESS_NOT_ENABLED: CUresult = 705;
/// CUDA_ERROR_PEER_ACCESS_UNSUPPORTED.
const PEER_ACCESS_UNSUPPORTED: CUresult = 217;

/// `cuDeviceCanAccessPeer`: a VM sees one device, and a device is not its
/// own peer (as the driver answers for `dev == peer`).
#[no_mangle]
pub extern "C" fn cuDeviceCanAccessPeer(can: *mut i32, dev: CUdevice, peer: CUdevice) -> CUresult {
    ffi_result(|| {
        check_device(dev)?;
        check_device(peer)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(can, 0) }
    })
}

/// `cuDeviceGetP2PAttribute`: there is no second device to link to.
#[no_mangle]
pub extern "C" fn cuDeviceGetP2PAttribute(
    value: *mut i32,
    _attrib: u32,
    src: CUdevice,
    dst: CUdevice,
) -> CUresult {
    ffi_result(|| {
        check_device(src)?;
        check_device(dst)?;
        if value.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // The driver refuses a device paired with itself.
        Err(err::INVALID_DEVICE)
    })
}

/// `cuCtxEnablePeerAccess`: every context is on the one device, which
/// cannot be its own peer: CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, as an
/// H200's driver answers for a context of its own device.
#[no_mangle]
pub extern "C" fn cuCtxEnablePeerAccess(peer: CUcontext, flags: u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if flags != 0 {
            return Err(err::INVALID_VALUE);
        }
        if peer.is_null() || !valid(peer) {
            return Err(err::INVALID_CONTEXT);
        }
        Err(PEER_ACCESS_UNSUPPORTED)
    })
}

/// `cuCtxDisablePeerAccess`: never enabled.
#[no_mangle]
pub extern "C" fn cuCtxDisablePeerAccess(peer: CUcontext) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if peer.is_null() || !valid(peer) {
            return Err(err::INVALID_CONTEXT);
        }
        Err(PEER_ACCESS_NOT_ENABLED)
    })
}
