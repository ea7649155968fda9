//! Streams and events. Their handles are the host's opaque handles carried
//! as pointer-sized values; the NULL stream and `CU_STREAM_LEGACY` name the
//! host's NULL stream.
//!
//! The per-thread default stream (`CU_STREAM_PER_THREAD`, and the NULL
//! stream given to a `_ptsz` entry point, which libcudart calls for
//! programs built with `--default-stream per-thread`) is a stream of the
//! thread's own, as with the driver: made on the host at the thread's first
//! use, with no flags (so it orders with the legacy NULL stream, and not
//! with the other streams), and destroyed when the thread exits.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crate::context::{self, out, require_current, HostKey};
use crate::ffi_result;
use crate::state;
use crate::types::{err, CUcontext, CUevent, CUresult, CUstream};

/// `CU_STREAM_LEGACY`.
const STREAM_LEGACY: usize = 0x1;
/// `CU_STREAM_PER_THREAD`.
const STREAM_PER_THREAD: usize = 0x2;

static FLAGS: Mutex<Option<HashMap<u64, u32>>> = Mutex::new(None);
/// Created streams whose priority is not 0 (the host's clamp applied).
static PRIORITY: Mutex<Option<HashMap<u64, i32>>> = Mutex::new(None);
/// The context each created stream was made in (`cuStreamGetCtx`).
static OWNER: Mutex<Option<HashMap<u64, usize>>> = Mutex::new(None);

fn note_owner(h: u64) {
    if let Ok(mut m) = OWNER.lock() {
        m.get_or_insert_with(HashMap::new)
            .insert(h, context::current() as usize);
    }
}

/// `CU_STREAM_NON_BLOCKING`.
const STREAM_NON_BLOCKING: u32 = 0x1;

/// Whether created stream `h` is a blocking one (ordered with the legacy
/// NULL stream) of the current context.
pub fn blocking_in_current_context(h: u64) -> bool {
    let flags = FLAGS
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&h).copied()));
    let owner = OWNER
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&h).copied()));
    flags.is_some_and(|f| f & STREAM_NON_BLOCKING == 0)
        && owner == Some(context::current() as usize)
}

fn forget_owner(h: u64) {
    if let Ok(mut m) = OWNER.lock() {
        m.get_or_insert_with(HashMap::new).remove(&h);
    }
}

/// The calling thread's per-thread default streams: one per host context
/// it used one in, as (context, host handle).
struct PerThread(RefCell<Vec<(HostKey, u64)>>);

impl Drop for PerThread {
    fn drop(&mut self) {
        for (key, h) in self.0.take() {
            // Work queued on it still runs; the host frees the stream
            // when it is done, as the driver does. A destroyed context
            // took its streams with it.
            let _ = state::with_in(key, |cu| cu.stream_destroy(h));
            if let Ok(mut m) = FLAGS.lock() {
                m.get_or_insert_with(HashMap::new).remove(&h);
            }
            forget_owner(h);
        }
    }
}

thread_local! {
    static PER_THREAD: PerThread = const { PerThread(RefCell::new(Vec::new())) };
}

/// The calling thread's per-thread default stream in the current context,
/// made at its first use there; `None` if it cannot be made (no context,
/// the host refused), in which case the legacy NULL stream stands in (it
/// orders no less).
fn per_thread_stream() -> Option<u64> {
    let key = context::host_of_current();
    PER_THREAD
        .try_with(|p| {
            if let Some(&(_, h)) = p.0.borrow().iter().find(|(k, _)| *k == key) {
                return Some(h);
            }
            let h = state::with(|cu| cu.stream_create(0)).ok()?;
            if let Ok(mut m) = FLAGS.lock() {
                m.get_or_insert_with(HashMap::new).insert(h, 0);
            }
            p.0.borrow_mut().push((key, h));
            note_owner(h);
            Some(h)
        })
        .ok()
        .flatten()
}

/// The stream a call names, resolving the per-thread default stream
/// (`CU_STREAM_PER_THREAD`, or the NULL stream for a `_ptsz` entry point)
/// to the thread's own stream. Called at the entry points, before any
/// lock is taken (it may ask the host for the stream).
pub fn per_thread_default(s: CUstream) -> CUstream {
    resolve(if s.is_null() {
        STREAM_PER_THREAD as CUstream
    } else {
        s
    })
}

/// `s` with `CU_STREAM_PER_THREAD` resolved to the thread's own stream.
pub fn resolve(s: CUstream) -> CUstream {
    if s as usize == STREAM_PER_THREAD {
        if let Some(h) = per_thread_stream() {
            return h as usize as CUstream;
        }
    }
    s
}

/// The host handle a `CUstream` names (0: the NULL stream). The
/// per-thread default stream must have been resolved ([`resolve`]);
/// unresolved, it names the legacy NULL stream.
pub fn stream_handle(s: CUstream) -> u64 {
    match s as usize {
        0 | STREAM_LEGACY | STREAM_PER_THREAD => 0,
        h => h as u64,
    }
}

fn create(ps: *mut CUstream, flags: u32, priority: i32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if ps.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let (h, got) = state::with(|cu| cu.stream_create_with_priority(flags, priority))?;
        if let Ok(mut m) = FLAGS.lock() {
            m.get_or_insert_with(HashMap::new).insert(h, flags);
        }
        if got != 0 {
            if let Ok(mut m) = PRIORITY.lock() {
                m.get_or_insert_with(HashMap::new).insert(h, got);
            }
        }
        note_owner(h);
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(ps, h as usize as CUstream) }
    })
}

/// `cuStreamCreate`.
#[no_mangle]
pub extern "C" fn cuStreamCreate(ps: *mut CUstream, flags: u32) -> CUresult {
    create(ps, flags, 0)
}

/// `cuStreamCreateWithPriority`: the host clamps `priority` to the
/// context's range (`cuCtxGetStreamPriorityRange`), as the driver does.
#[no_mangle]
pub extern "C" fn cuStreamCreateWithPriority(
    ps: *mut CUstream,
    flags: u32,
    priority: i32,
) -> CUresult {
    create(ps, flags, priority)
}

/// `cuStreamDestroy_v2`.
#[no_mangle]
pub extern "C" fn cuStreamDestroy_v2(s: CUstream) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let h = stream_handle(s);
        if h == 0 {
            return Err(err::INVALID_HANDLE);
        }
        state::with(|cu| cu.stream_destroy(h))?;
        crate::pool::stream_destroyed(s);
        if let Ok(mut m) = FLAGS.lock() {
            m.get_or_insert_with(HashMap::new).remove(&h);
        }
        if let Ok(mut m) = PRIORITY.lock() {
            m.get_or_insert_with(HashMap::new).remove(&h);
        }
        forget_owner(h);
        Ok(())
    })
}

/// A synchronous call of a `_ptds` entry point: `f` issued on the calling
/// thread's per-thread default stream, which is then synchronized, so that
/// the call is ordered with that stream alone, as with the driver (the
/// legacy stream would also wait for every other thread's blocking
/// streams). Refused, with nothing issued, while the stream is captured.
pub fn on_per_thread_stream(f: impl FnOnce(CUstream) -> CUresult) -> CUresult {
    let s = per_thread_default(std::ptr::null_mut());
    if let Err(e) = crate::graph::refuse_if_capturing(stream_handle(s)) {
        return e;
    }
    match f(s) {
        err::SUCCESS => synchronize(s),
        e => e,
    }
}

fn synchronize(s: CUstream) -> CUresult {
    ffi_result(|| {
        require_current()?;
        crate::graph::refuse_if_capturing(stream_handle(s))?;
        state::with_sync(|cu| cu.stream_synchronize(stream_handle(s)))?;
        crate::pool::synchronized(Some(s));
        Ok(())
    })
}

fn query(s: CUstream) -> CUresult {
    ffi_result(|| {
        require_current()?;
        // Not while capturing: it invalidates the capture, as the driver's.
        crate::graph::refuse_if_capturing(stream_handle(s))?;
        match state::with(|cu| cu.stream_query(stream_handle(s)))? {
            true => {
                crate::managed::pull();
                crate::managed::conflict()
            }
            false => Err(fairgpu_protocol::Status::NOT_READY.0),
        }
    })
}

fn wait_event(s: CUstream, e: CUevent) -> CUresult {
    if let Some(r) = crate::graph::wait_event(s, e as usize) {
        return r;
    }
    ffi_result(|| {
        require_current()?;
        state::with(|cu| cu.stream_wait_event(stream_handle(s), e as u64))
    })
}

/// `cuStreamSynchronize`.
#[no_mangle]
pub extern "C" fn cuStreamSynchronize(s: CUstream) -> CUresult {
    let s = crate::stream::resolve(s);
    synchronize(s)
}
/// `cuStreamSynchronize_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamSynchronize_ptsz(s: CUstream) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    synchronize(s)
}
/// `cuStreamQuery`.
#[no_mangle]
pub extern "C" fn cuStreamQuery(s: CUstream) -> CUresult {
    let s = crate::stream::resolve(s);
    query(s)
}
/// `cuStreamQuery_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamQuery_ptsz(s: CUstream) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    query(s)
}
/// `cuStreamWaitEvent`.
#[no_mangle]
pub extern "C" fn cuStreamWaitEvent(s: CUstream, e: CUevent, flags: u32) -> CUresult {
    let s = crate::stream::resolve(s);
    wait_event_with_flags(s, e, flags)
}
/// `cuStreamWaitEvent_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamWaitEvent_ptsz(s: CUstream, e: CUevent, flags: u32) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    wait_event_with_flags(s, e, flags)
}

/// `cuStreamWaitEvent`: in a capture, `CU_EVENT_WAIT_EXTERNAL` makes an
/// event wait node (the graph's launches wait for the event's record
/// outside the graph).
fn wait_event_with_flags(s: CUstream, e: CUevent, flags: u32) -> CUresult {
    if flags & !EVENT_WAIT_EXTERNAL != 0 {
        return err::INVALID_VALUE;
    }
    if flags & EVENT_WAIT_EXTERNAL != 0 {
        if let Some(r) = crate::graph::captured(s, || Ok(crate::graph::Work::EventWait(e as usize)))
        {
            return r;
        }
    }
    wait_event(s, e)
}

/// `cuStreamGetFlags`.
#[no_mangle]
pub extern "C" fn cuStreamGetFlags(s: CUstream, flags: *mut u32) -> CUresult {
    let s = crate::stream::resolve(s);
    ffi_result(|| {
        require_current()?;
        let h = stream_handle(s);
        let f = FLAGS
            .lock()
            .ok()
            .and_then(|m| m.as_ref().and_then(|m| m.get(&h).copied()))
            .unwrap_or(0);
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(flags, f) }
    })
}

/// `cuStreamGetFlags_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetFlags_ptsz(s: CUstream, flags: *mut u32) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuStreamGetFlags(s, flags)
}

/// `cuStreamGetPriority_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetPriority_ptsz(s: CUstream, priority: *mut i32) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuStreamGetPriority(s, priority)
}

/// `cuStreamGetCtx_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetCtx_ptsz(s: CUstream, pctx: *mut CUcontext) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuStreamGetCtx(s, pctx)
}

/// `cuStreamGetCtx_v2`: the stream's context; there are no green contexts.
#[no_mangle]
pub extern "C" fn cuStreamGetCtx_v2(
    s: CUstream,
    pctx: *mut CUcontext,
    green: *mut *mut c_void,
) -> CUresult {
    let s = crate::stream::resolve(s);
    ffi_result(|| {
        if pctx.is_null() && green.is_null() {
            return Err(err::INVALID_VALUE);
        }
        if !green.is_null() {
            // SAFETY: non-null slot provided by the caller.
            unsafe { out(green, std::ptr::null_mut())? };
        }
        if !pctx.is_null() {
            match cuStreamGetCtx(s, pctx) {
                err::SUCCESS => {}
                e => return Err(e),
            }
        }
        Ok(())
    })
}

/// `cuStreamGetCtx_v2_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetCtx_v2_ptsz(
    s: CUstream,
    pctx: *mut CUcontext,
    green: *mut *mut c_void,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuStreamGetCtx_v2(s, pctx, green)
}

/// `cuStreamGetDevice`: every stream is on the VM's one device.
#[no_mangle]
pub extern "C" fn cuStreamGetDevice(_s: CUstream, dev: *mut i32) -> CUresult {
    ffi_result(|| {
        state::device()?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(dev, 0) }
    })
}

/// `cuStreamGetDevice_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetDevice_ptsz(s: CUstream, dev: *mut i32) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuStreamGetDevice(s, dev)
}

/// `cuStreamGetPriority`: what the stream was created with, clamped
/// (0 for the NULL stream, per-thread streams and `cuStreamCreate`'s).
#[no_mangle]
pub extern "C" fn cuStreamGetPriority(s: CUstream, priority: *mut i32) -> CUresult {
    let s = resolve(s);
    ffi_result(|| {
        let h = stream_handle(s);
        let p = PRIORITY
            .lock()
            .ok()
            .and_then(|m| m.as_ref().and_then(|m| m.get(&h).copied()))
            .unwrap_or(0);
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(priority, p) }
    })
}

/// `cuStreamGetCtx`: the context a stream was made in (the NULL stream's:
/// the current context).
#[no_mangle]
pub extern "C" fn cuStreamGetCtx(s: CUstream, pctx: *mut CUcontext) -> CUresult {
    let s = resolve(s);
    ffi_result(|| {
        state::device()?;
        let h = stream_handle(s);
        let ctx = if h == 0 {
            require_current()?;
            context::current()
        } else {
            let owner = OWNER
                .lock()
                .map_err(|_| err::UNKNOWN)?
                .as_ref()
                .and_then(|m| m.get(&h).copied())
                .ok_or(err::INVALID_HANDLE)?;
            owner as CUcontext
        };
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pctx, ctx) }
    })
}

type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;
type StreamCallback = Option<unsafe extern "C" fn(CUstream, CUresult, *mut c_void)>;

fn host_func(s: CUstream, f: HostFn, data: *mut c_void) -> CUresult {
    if let Some(r) = crate::graph::captured(s, || {
        let f = f.ok_or(err::INVALID_VALUE)?;
        Ok(crate::graph::Work::Host {
            f: f as usize,
            data: data as usize,
        })
    }) {
        return r;
    }
    ffi_result(|| {
        require_current()?;
        let f = f.ok_or(err::INVALID_VALUE)?;
        // The function runs once the stream's earlier work is done: here,
        // after synchronizing it, on the calling thread.
        state::with(|cu| cu.stream_synchronize(stream_handle(s)))?;
        // SAFETY: calling the application's callback with its own data, as
        // the API contract says.
        unsafe { f(data) };
        Ok(())
    })
}

/// `cuLaunchHostFunc`.
#[no_mangle]
pub extern "C" fn cuLaunchHostFunc(s: CUstream, f: HostFn, data: *mut c_void) -> CUresult {
    let s = crate::stream::resolve(s);
    host_func(s, f, data)
}
/// `cuLaunchHostFunc_ptsz`.
#[no_mangle]
pub extern "C" fn cuLaunchHostFunc_ptsz(s: CUstream, f: HostFn, data: *mut c_void) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    host_func(s, f, data)
}

fn add_callback(s: CUstream, cb: StreamCallback, data: *mut c_void) -> CUresult {
    ffi_result(|| {
        require_current()?;
        crate::graph::refuse_if_capturing(stream_handle(s))?;
        let cb = cb.ok_or(err::INVALID_VALUE)?;
        let status = match state::with(|cu| cu.stream_synchronize(stream_handle(s))) {
            Ok(()) => err::SUCCESS,
            Err(e) => e,
        };
        // SAFETY: the application's callback with its own arguments.
        unsafe { cb(s, status, data) };
        Ok(())
    })
}

/// `cuStreamAddCallback`.
#[no_mangle]
pub extern "C" fn cuStreamAddCallback(
    s: CUstream,
    cb: StreamCallback,
    data: *mut c_void,
    _flags: u32,
) -> CUresult {
    let s = crate::stream::resolve(s);
    add_callback(s, cb, data)
}
/// `cuStreamAddCallback_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamAddCallback_ptsz(
    s: CUstream,
    cb: StreamCallback,
    data: *mut c_void,
    _flags: u32,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    add_callback(s, cb, data)
}

/// `cuEventCreate`.
#[no_mangle]
pub extern "C" fn cuEventCreate(pe: *mut CUevent, flags: u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if pe.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // The driver makes an interprocess event only without timing (an
        // H200's answers CUDA_ERROR_INVALID_VALUE at creation).
        if crate::ipc::timed_interprocess(flags) {
            return Err(err::INVALID_VALUE);
        }
        let h = state::with(|cu| cu.event_create(flags))?;
        crate::ipc::event_created(h, flags);
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(pe, h as usize as CUevent) }
    })
}

/// `cuEventDestroy_v2`.
#[no_mangle]
pub extern "C" fn cuEventDestroy_v2(e: CUevent) -> CUresult {
    ffi_result(|| {
        require_current()?;
        state::with(|cu| cu.event_destroy(e as u64))?;
        crate::ipc::event_destroyed(e as u64);
        crate::pool::event_destroyed(e as usize);
        crate::graph::event_recorded_outside(e as usize);
        Ok(())
    })
}

/// CU_EVENT_RECORD_EXTERNAL: in a capture, an event record node.
const EVENT_RECORD_EXTERNAL: u32 = 1;
/// CU_EVENT_WAIT_EXTERNAL: in a capture, an event wait node.
const EVENT_WAIT_EXTERNAL: u32 = 1;

fn record(e: CUevent, s: CUstream) -> CUresult {
    if let Some(r) = crate::graph::record_event(e as usize, s) {
        return r;
    }
    crate::graph::event_recorded_outside(e as usize);
    ffi_result(|| {
        require_current()?;
        if crate::ipc::is_shared_event(e as u64) {
            state::with(|cu| cu.event_record_sync(e as u64, stream_handle(s)))?;
        } else {
            state::with(|cu| cu.event_record(e as u64, stream_handle(s)))?;
        }
        crate::pool::event_recorded(e as usize, s);
        Ok(())
    })
}

/// `cuEventRecord`.
#[no_mangle]
pub extern "C" fn cuEventRecord(e: CUevent, s: CUstream) -> CUresult {
    let s = crate::stream::resolve(s);
    record(e, s)
}
/// `cuEventRecord_ptsz`.
#[no_mangle]
pub extern "C" fn cuEventRecord_ptsz(e: CUevent, s: CUstream) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    record(e, s)
}
/// `cuEventRecord` with flags: in a capture, `CU_EVENT_RECORD_EXTERNAL`
/// makes an event record node (the graph's launches record the event);
/// without it the event only orders work inside the capture.
fn record_with_flags(e: CUevent, s: CUstream, flags: u32) -> CUresult {
    if flags & !EVENT_RECORD_EXTERNAL != 0 {
        return err::INVALID_VALUE;
    }
    if flags & EVENT_RECORD_EXTERNAL != 0 {
        if let Some(r) =
            crate::graph::captured(s, || Ok(crate::graph::Work::EventRecord(e as usize)))
        {
            return r;
        }
    }
    record(e, s)
}

/// `cuEventRecordWithFlags`.
#[no_mangle]
pub extern "C" fn cuEventRecordWithFlags(e: CUevent, s: CUstream, flags: u32) -> CUresult {
    let s = crate::stream::resolve(s);
    record_with_flags(e, s, flags)
}
/// `cuEventRecordWithFlags_ptsz`.
#[no_mangle]
pub extern "C" fn cuEventRecordWithFlags_ptsz(e: CUevent, s: CUstream, flags: u32) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    record_with_flags(e, s, flags)
}

/// `cuEventQuery`.
#[no_mangle]
pub extern "C" fn cuEventQuery(e: CUevent) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if crate::graph::recorded_in_capture(e as usize) {
            return Err(err::INVALID_VALUE);
        }
        match state::with(|cu| cu.event_query(e as u64))? {
            true => {
                crate::managed::pull();
                crate::pool::event_done(e as usize);
                crate::managed::conflict()
            }
            false => Err(fairgpu_protocol::Status::NOT_READY.0),
        }
    })
}

/// `cuEventSynchronize`.
#[no_mangle]
pub extern "C" fn cuEventSynchronize(e: CUevent) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if crate::graph::recorded_in_capture(e as usize) {
            return Err(err::INVALID_VALUE);
        }
        state::with_sync(|cu| cu.event_synchronize(e as u64))?;
        crate::pool::event_done(e as usize);
        Ok(())
    })
}

fn elapsed(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let v = state::with(|cu| cu.event_elapsed_ms(start as u64, end as u64))?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(ms, v) }
    })
}

/// `cuEventElapsedTime`.
#[no_mangle]
pub extern "C" fn cuEventElapsedTime(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    elapsed(ms, start, end)
}
/// `cuEventElapsedTime_v2`.
#[no_mangle]
pub extern "C" fn cuEventElapsedTime_v2(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult {
    elapsed(ms, start, end)
}

fn stream_id(s: CUstream, id: *mut u64) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let h = stream_handle(s);
        // The NULL and legacy streams are one stream on the host: one id.
        // A created stream's id (a thread's per-thread default stream's
        // too) is its host handle, never 0 and never reused while it
        // lives.
        if h != 0 {
            let known = FLAGS
                .lock()
                .map_err(|_| err::UNKNOWN)?
                .as_ref()
                .is_some_and(|m| m.contains_key(&h));
            if !known {
                return Err(err::INVALID_HANDLE);
            }
        }
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(id, h) }
    })
}

/// `cuStreamGetId`: a stream's unique id.
#[no_mangle]
pub extern "C" fn cuStreamGetId(s: CUstream, id: *mut u64) -> CUresult {
    let s = crate::stream::resolve(s);
    stream_id(s, id)
}

/// `cuStreamGetId_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetId_ptsz(s: CUstream, id: *mut u64) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    stream_id(s, id)
}

/// `CUlaunchAttributeValue`: a 64-byte union.
type AttrValue = [u8; 64];

/// Stream attributes are hints here (access policy windows, the
/// synchronization policy, priorities, memory-sync domains): kept per
/// stream so `cuStreamGetAttribute` reads back what was set, not carried to
/// the host (a kernel computes the same with or without them).
static STREAM_ATTRS: Mutex<Option<HashMap<(u64, u32), AttrValue>>> = Mutex::new(None);

/// Attribute ids valid for streams.
fn stream_attribute(attr: u32) -> bool {
    // ACCESS_POLICY_WINDOW, SYNCHRONIZATION_POLICY, PRIORITY,
    // MEM_SYNC_DOMAIN_MAP, MEM_SYNC_DOMAIN.
    matches!(attr, 1 | 3 | 8 | 9 | 10)
}

fn set_attribute(s: CUstream, attr: u32, value: *const AttrValue) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if value.is_null() || !stream_attribute(attr) {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a CUlaunchAttributeValue.
        let v = unsafe { value.read_unaligned() };
        STREAM_ATTRS
            .lock()
            .map_err(|_| err::UNKNOWN)?
            .get_or_insert_with(HashMap::new)
            .insert((stream_handle(s), attr), v);
        Ok(())
    })
}

fn get_attribute(s: CUstream, attr: u32, value: *mut AttrValue) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if value.is_null() || !stream_attribute(attr) {
            return Err(err::INVALID_VALUE);
        }
        let v = STREAM_ATTRS
            .lock()
            .map_err(|_| err::UNKNOWN)?
            .as_ref()
            .and_then(|m| m.get(&(stream_handle(s), attr)).copied())
            .unwrap_or([0; 64]);
        // SAFETY: non-null; the caller's CUlaunchAttributeValue.
        unsafe { value.write_unaligned(v) };
        Ok(())
    })
}

/// `cuStreamSetAttribute`.
#[no_mangle]
pub extern "C" fn cuStreamSetAttribute(
    s: CUstream,
    attr: u32,
    value: *const AttrValue,
) -> CUresult {
    let s = crate::stream::resolve(s);
    set_attribute(s, attr, value)
}
/// `cuStreamSetAttribute_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamSetAttribute_ptsz(
    s: CUstream,
    attr: u32,
    value: *const AttrValue,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    set_attribute(s, attr, value)
}
/// `cuStreamGetAttribute`.
#[no_mangle]
pub extern "C" fn cuStreamGetAttribute(s: CUstream, attr: u32, value: *mut AttrValue) -> CUresult {
    let s = crate::stream::resolve(s);
    get_attribute(s, attr, value)
}
/// `cuStreamGetAttribute_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetAttribute_ptsz(
    s: CUstream,
    attr: u32,
    value: *mut AttrValue,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    get_attribute(s, attr, value)
}

fn copy_attributes(dst: CUstream, src: CUstream) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let mut g = STREAM_ATTRS.lock().map_err(|_| err::UNKNOWN)?;
        let m = g.get_or_insert_with(HashMap::new);
        let (from, to) = (stream_handle(src), stream_handle(dst));
        let copied: Vec<(u32, AttrValue)> = m
            .iter()
            .filter(|((s, _), _)| *s == from)
            .map(|((_, a), v)| (*a, *v))
            .collect();
        for (a, v) in copied {
            m.insert((to, a), v);
        }
        Ok(())
    })
}

/// `cuStreamCopyAttributes`.
#[no_mangle]
pub extern "C" fn cuStreamCopyAttributes(dst: CUstream, src: CUstream) -> CUresult {
    copy_attributes(dst, src)
}
/// `cuStreamCopyAttributes_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamCopyAttributes_ptsz(dst: CUstream, src: CUstream) -> CUresult {
    copy_attributes(per_thread_default(dst), per_thread_default(src))
}

/// `cuCtxResetPersistingL2Cache`: persisting lines are a cache hint; there
/// is nothing to demote.
#[no_mangle]
pub extern "C" fn cuCtxResetPersistingL2Cache() -> CUresult {
    ffi_result(require_current)
}
