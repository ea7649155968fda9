//! The process's connections to the host and what is cached from them.
//!
//! `cuInit` maps the region, claims the process's channel and asks the
//! host, once, for everything about the device that later calls read
//! (name, memory, UUID, attributes). That thread's calls use that channel;
//! every other thread that makes a call claims a channel of its own (up to
//! [`thread_channels`] of them, then it shares the process's), which names
//! the same host context (`ContextJoin`), so that threads issue
//! concurrently and one's synchronization does not hold another's calls. Every
//! channel of the process takes its call ids from one counter, by which
//! the host keeps the order between threads that the program's own
//! synchronization gave their calls (docs/guest.md).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use fairgpu_frontend::cuda::Cuda;
use fairgpu_frontend::{CallError, Channel, GuestRegion, WaitConfig};

use crate::context::{self, HostKey};
use crate::types::{err, CUresult};

/// The driver version this library implements (the ABI it exports), as
/// `cuDriverGetVersion` reports it: CUDA 13.0. libcudart 12.x accepts any
/// version >= 12000; libcudart 13.x needs >= 13000.
pub const DRIVER_VERSION: i32 = 13000;

/// Highest `CUdevice_attribute` value answered; attributes the host does
/// not report read as 0, as a real driver's "not applicable" ones do.
pub const MAX_ATTRIBUTE: i32 = 160;

/// fairgpu's own device attributes (outside CUDA's numbering), asked of
/// the host with the others and answered by `cuDeviceGetAttribute` where
/// the host knows them; INVALID_VALUE elsewhere, as NVIDIA's driver says.
pub const OWN_ATTRIBUTES: [i32; 2] = [
    fairgpu_protocol::cuda::ATTR_GUEST_GRAPH_CONDITIONALS,
    fairgpu_protocol::cuda::ATTR_EXECUTES_PTX_ONLY,
];

/// What the guest knows about the one device.
#[derive(Debug)]
pub struct DeviceInfo {
    /// `cuDeviceGetName`.
    pub name: String,
    /// `cuDeviceTotalMem` (quota-bounded).
    pub total_mem: u64,
    /// `cuDeviceGetUuid`.
    pub uuid: [u8; 16],
    /// Attribute values the host reported.
    pub attrs: HashMap<i32, i32>,
}

impl DeviceInfo {
    /// An attribute's value: the host's, else 0 within the known range.
    pub fn attribute(&self, a: i32) -> Result<i32, CUresult> {
        if OWN_ATTRIBUTES.contains(&a) {
            return self.attrs.get(&a).copied().ok_or(err::INVALID_VALUE);
        }
        if !(1..=MAX_ATTRIBUTE).contains(&a) {
            return Err(err::INVALID_VALUE);
        }
        Ok(self.attrs.get(&a).copied().unwrap_or(0))
    }
}

static INIT: OnceLock<Result<DeviceInfo, CUresult>> = OnceLock::new();
/// The process's channel.
static CONN: Mutex<Option<Cuda>> = Mutex::new(None);
/// The region, for the channels of threads.
static REGION: OnceLock<Arc<GuestRegion>> = OnceLock::new();
/// The call-id counter of every channel of the process.
static CALL_IDS: OnceLock<Arc<AtomicU64>> = OnceLock::new();
/// The token with which threads' channels join the process's context,
/// asked at `cuInit` (when the process's channel is surely free; none if
/// the host refused).
static SHARE: OnceLock<Option<u64>> = OnceLock::new();

/// Most channels of their own the threads of one process may hold.
pub const MAX_THREAD_CHANNELS: usize = 32;
/// How many they hold by default: channels are the VM's, shared by all
/// its processes.
pub const DEFAULT_THREAD_CHANNELS: usize = 4;
/// Environment variable that sets how many (0: every thread uses the
/// process's channel).
pub const THREAD_CHANNELS_ENV: &str = "FAIRGPU_THREAD_CHANNELS";

/// The threads' channels: a thread that claimed one holds its index
/// (`MINE`) until it exits. Each has its own lock, which only its thread
/// takes, but for the process's exit, which takes what it can.
static THREADS: [Mutex<Option<Cuda>>; MAX_THREAD_CHANNELS] =
    [const { Mutex::new(None) }; MAX_THREAD_CHANNELS];
/// Which entries of `THREADS` a thread holds.
static TAKEN: [AtomicBool; MAX_THREAD_CHANNELS] =
    [const { AtomicBool::new(false) }; MAX_THREAD_CHANNELS];

/// A thread's own channel, as far as it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mine {
    /// Never needed one.
    Untried,
    /// Holds `THREADS[i]`.
    Slot(usize),
    /// Could not get one: uses the process's channel.
    Shared,
}

/// Releases a thread's channel when the thread exits (after what it
/// issued has run: dropping a channel drains it).
struct Release(usize);

impl Drop for Release {
    fn drop(&mut self) {
        let cu = THREADS[self.0]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        drop(cu);
        // Release: the entry is empty before another thread may take it;
        // pairs with the Acquire of the compare_exchange in `own_channel`.
        TAKEN[self.0].store(false, Ordering::Release);
    }
}

thread_local! {
    static MINE: Cell<Mine> = const { Cell::new(Mine::Untried) };
    static PINNED: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread connected (it uses the process's channel).
    static CONNECTED_HERE: Cell<bool> = const { Cell::new(false) };
    static RELEASE: Cell<Option<Release>> = const { Cell::new(None) };
}

/// How many channels of their own the process's threads may hold
/// ([`THREAD_CHANNELS_ENV`], at most [`MAX_THREAD_CHANNELS`]).
pub fn thread_channels() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    *N.get_or_init(|| {
        std::env::var(THREAD_CHANNELS_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_THREAD_CHANNELS)
            .min(MAX_THREAD_CHANNELS)
    })
}

fn call_ids() -> Arc<AtomicU64> {
    CALL_IDS.get_or_init(|| Arc::new(AtomicU64::new(1))).clone()
}

/// The calling thread's own channel, claimed now if it has none and may
/// have one; None if it uses the process's channel.
fn own_channel() -> Option<usize> {
    match MINE.with(Cell::get) {
        Mine::Slot(i) => return Some(i),
        Mine::Shared => return None,
        Mine::Untried => {}
    }
    // Whatever happens below, this thread asks once.
    MINE.with(|m| m.set(Mine::Shared));
    let i = (0..thread_channels()).find(|&i| {
        // Acquire: pairs with the Release store of the thread that gave
        // the entry back (its channel is gone from it).
        TAKEN[i]
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    })?;
    match join_new_channel() {
        Some(cu) => {
            *THREADS[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(cu);
            MINE.with(|m| m.set(Mine::Slot(i)));
            RELEASE.with(|r| r.set(Some(Release(i))));
            Some(i)
        }
        None => {
            TAKEN[i].store(false, Ordering::Release);
            None
        }
    }
}

/// A channel of its own for a context `cuCtxCreate` makes (a host context
/// of its own, made at its first call); None if the region has fewer than
/// two free channels (the last stays for another process to start) or the
/// claim fails.
pub fn claim_context_channel() -> Option<Cuda> {
    let region = REGION.get()?.clone();
    if Channel::free_channels(&region) < 2 {
        return None;
    }
    let ch = Channel::claim(region, WaitConfig::from_env()).ok()?;
    Some(Cuda::new(ch))
}

/// A new channel that names the process's host context.
fn join_new_channel() -> Option<Cuda> {
    let region = REGION.get()?.clone();
    let token = (*SHARE.get()?)?;
    // A thread does not take the VM's last free channel: another process
    // needs one to start. No free channel, or the host refuses: the thread
    // shares the process's channel.
    if Channel::free_channels(&region) < 2 {
        return None;
    }
    let ch = Channel::claim(region, WaitConfig::from_env()).ok()?;
    let mut cu = Cuda::new(ch);
    cu.channel().share_call_ids(call_ids());
    cu.context_join(token).ok()?;
    Some(cu)
}

fn connect() -> Result<DeviceInfo, CUresult> {
    let region = GuestRegion::discover().map_err(|e| {
        eprintln!("fairgpu guest-lib: no fairgpu region: {e}");
        err::NO_DEVICE
    })?;
    let _ = REGION.set(region.clone());
    let mut ch = Channel::claim(region, WaitConfig::from_env()).map_err(|e| {
        eprintln!("fairgpu guest-lib: cannot claim a channel: {e}");
        err::NO_DEVICE
    })?;
    ch.share_call_ids(call_ids());
    CONNECTED_HERE.with(|c| c.set(true));
    let mut cu = Cuda::new(ch);
    let status = |e: CallError| e.status().0;
    let name = cu.device_name(0).map_err(status)?;
    let total_mem = cu.device_total_mem(0).map_err(status)?;
    let uuid = cu.device_uuid(0).map_err(status)?;
    let mut attrs = HashMap::new();
    for a in (1..=MAX_ATTRIBUTE).chain(OWN_ATTRIBUTES) {
        match cu.device_attribute(a, 0) {
            Ok(v) => {
                attrs.insert(a, v);
            }
            Err(CallError::Cuda(_)) => {}
            Err(e) => return Err(status(e)),
        }
    }
    let _ = SHARE.set(cu.context_share().ok());
    *CONN.lock().unwrap_or_else(|p| p.into_inner()) = Some(cu);
    // Release the channel when the process exits normally; a killed process
    // has its channel reclaimed by the host.
    extern "C" fn release_at_exit() {
        // What kernels printed and no synchronization took yet is printed
        // now, as the driver does when the context goes.
        flush_output();
        // Created contexts' channels first (what each printed is written,
        // what each issued runs), then threads' channels (each drains what
        // its thread issued); a thread still inside a call keeps its
        // channel, which the host reclaims when the process is gone.
        for c in crate::context::created_own() {
            flush_output_of(c as *const _ as usize);
            if let Ok(mut g) = c.channel.try_lock() {
                drop(g.take());
            }
        }
        for t in &THREADS {
            if let Ok(mut g) = t.try_lock() {
                drop(g.take());
            }
        }
        if let Ok(mut g) = CONN.lock() {
            drop(g.take());
        }
    }
    // SAFETY: registers a plain extern "C" function with no arguments.
    unsafe { libc::atexit(release_at_exit) };
    Ok(DeviceInfo {
        name,
        total_mem,
        uuid,
        attrs,
    })
}

/// `cuInit`: connects once; later calls return the first outcome.
pub fn init() -> Result<&'static DeviceInfo, CUresult> {
    INIT.get_or_init(connect).as_ref().map_err(|e| *e)
}

/// The device, if `cuInit` succeeded.
pub fn device() -> Result<&'static DeviceInfo, CUresult> {
    match INIT.get() {
        Some(r) => r.as_ref().map_err(|e| *e),
        None => Err(err::NOT_INITIALIZED),
    }
}

/// Kernels that can print were launched in the primary's host context
/// since its output was last taken (a created context has its own flag,
/// `GuestContext::output_pending`). Relaxed: a hint within this process;
/// the output itself travels in order on the channel, behind the launches
/// that made it, and a flag set after a flush took it is seen by a later
/// flush.
static OUTPUT_PENDING: AtomicBool = AtomicBool::new(false);

/// The output flag of host context `key`.
fn output_pending(key: HostKey) -> &'static AtomicBool {
    match context::by_key(key) {
        Some(c) => &c.output_pending,
        None => &OUTPUT_PENDING,
    }
}

/// Records the launch of a kernel that can print (in the current context).
pub fn note_printing_launch() {
    output_pending(context::host_of_current()).store(true, Ordering::Relaxed);
}

/// Writes what the current context's kernels printed to the program's
/// stdout, as the driver does at synchronization points; nothing to do (no
/// round trip) unless a kernel that can print was launched since the last
/// flush.
pub fn flush_output() {
    flush_output_of(context::host_of_current());
}

/// [`flush_output`] for host context `key`.
pub fn flush_output_of(key: HostKey) {
    if !output_pending(key).swap(false, Ordering::Relaxed) {
        return;
    }
    let mut out = Vec::new();
    // An error leaves what came so far; the call that failed says why.
    let _ = with_in(key, |cu| cu.take_output(&mut out));
    write_output(&out);
}

/// Writes printed output records to the C library's `stdout` (printf) or
/// `stderr` (assert messages), behind what the program printed itself, and
/// flushes them.
fn write_output(bytes: &[u8]) {
    unsafe extern "C" {
        /// The C library's standard output stream.
        static mut stdout: *mut libc::FILE;
        /// The C library's standard error stream.
        static mut stderr: *mut libc::FILE;
    }
    for (stream, text) in fairgpu_protocol::cuda::output_records(bytes) {
        // SAFETY: `stdout` and `stderr` are the C library's streams, valid
        // for the life of the process (read by value, no reference taken);
        // fwrite reads `text.len()` bytes of a live slice; fwrite and
        // fflush lock the stream themselves.
        unsafe {
            let out = if stream == fairgpu_protocol::cuda::STDERR {
                stderr
            } else {
                stdout
            };
            if !out.is_null() && !text.is_empty() {
                libc::fwrite(text.as_ptr().cast(), 1, text.len(), out);
                libc::fflush(out);
            }
        }
    }
}

/// [`with`] at a point where the driver flushes kernels' printed output
/// (synchronizations, blocking copies, module unloads): the output is
/// written after `f`, whatever `f` returned (a failed `assert`'s message
/// comes with the error it caused), and managed memory is pulled.
pub fn with_sync<T>(f: impl FnOnce(&mut Cuda) -> Result<T, CallError>) -> Result<T, CUresult> {
    let r = with(f);
    flush_output();
    // What kernels wrote to managed and mapped memory is the CPU's now.
    crate::managed::pull();
    match (r, crate::managed::conflict()) {
        (Ok(v), Ok(())) => Ok(v),
        (Ok(_), Err(e)) | (Err(e), _) => Err(e),
    }
}

/// Runs `f` on a channel of the current context's host context (for the
/// primary's: the calling thread's own channel, else the process's); maps
/// its error to a CUresult.
pub fn with<T>(f: impl FnOnce(&mut Cuda) -> Result<T, CallError>) -> Result<T, CUresult> {
    with_in(context::host_of_current(), f)
}

/// [`with`] on host context `key`, whichever context is current.
pub fn with_in<T>(
    key: HostKey,
    f: impl FnOnce(&mut Cuda) -> Result<T, CallError>,
) -> Result<T, CUresult> {
    device()?;
    if let Some(c) = context::by_key(key) {
        let g = c.channel.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            return Err(err::CONTEXT_IS_DESTROYED);
        }
        return run(g, f);
    }
    if key != context::primary_key() {
        // The primary's host context before a reset.
        return Err(err::CONTEXT_IS_DESTROYED);
    }
    match MINE.with(Cell::get) {
        Mine::Slot(i) => {
            let g = THREADS[i].lock().unwrap_or_else(|p| p.into_inner());
            if g.is_some() {
                return run(g, f);
            }
            // Released already (this thread is exiting: its other
            // thread-locals' destructors still make calls).
        }
        // A thread other than the one that connected gets a channel of its
        // own if it may (not in the middle of a graph launch it gathers on
        // the process's channel).
        Mine::Untried if !CONNECTED_HERE.with(Cell::get) && !PINNED.with(Cell::get) => {
            if let Some(i) = own_channel() {
                return on(&THREADS[i], f);
            }
        }
        _ => {}
    }
    on(&CONN, f)
}

/// Keeps the calling thread on the channel it uses now until the guard
/// goes: what a graph launch gathers on one channel (`begin_batch`) must
/// not continue on another.
pub fn pin_channel() -> Pin {
    Pin(PINNED.with(|p| p.replace(true)))
}

/// See [`pin_channel`]; holds the state before it.
pub struct Pin(bool);

impl Drop for Pin {
    fn drop(&mut self) {
        PINNED.with(|p| p.set(self.0));
    }
}

fn on<T>(
    m: &Mutex<Option<Cuda>>,
    f: impl FnOnce(&mut Cuda) -> Result<T, CallError>,
) -> Result<T, CUresult> {
    run(m.lock().unwrap_or_else(|p| p.into_inner()), f)
}

fn run<T>(
    mut g: std::sync::MutexGuard<'_, Option<Cuda>>,
    f: impl FnOnce(&mut Cuda) -> Result<T, CallError>,
) -> Result<T, CUresult> {
    let cu = g.as_mut().ok_or(err::NOT_INITIALIZED)?;
    f(cu).map_err(|e| e.status().0)
}
