//! The process-wide connection to the host and what is cached from it.
//!
//! `cuInit` maps the region, claims a channel and asks the host, once, for
//! everything about the device that later calls read (name, memory, UUID,
//! attributes). Every forwarded call then takes the channel's lock: threads
//! of one process serialize on the producer side of their channel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use fairgpu_frontend::cuda::Cuda;
use fairgpu_frontend::{CallError, Channel, GuestRegion, WaitConfig};

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
static CONN: Mutex<Option<Cuda>> = Mutex::new(None);

fn connect() -> Result<DeviceInfo, CUresult> {
    let region = GuestRegion::discover().map_err(|e| {
        eprintln!("fairgpu guest-lib: no fairgpu region: {e}");
        err::NO_DEVICE
    })?;
    let ch = Channel::claim(region, WaitConfig::from_env()).map_err(|e| {
        eprintln!("fairgpu guest-lib: cannot claim a channel: {e}");
        err::NO_DEVICE
    })?;
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
    *CONN.lock().unwrap_or_else(|p| p.into_inner()) = Some(cu);
    // Release the channel when the process exits normally; a killed process
    // has its channel reclaimed by the host.
    extern "C" fn release_at_exit() {
        // What kernels printed and no synchronization took yet is printed
        // now, as the driver does when the context goes.
        flush_output();
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

/// Kernels that can print were launched since their output was last
/// taken. Relaxed: a hint within this process; the output itself travels
/// in order on the channel, behind the launches that made it, and a flag
/// set after a flush took it is seen by a later flush.
static OUTPUT_PENDING: AtomicBool = AtomicBool::new(false);

/// Records the launch of a kernel that can print.
pub fn note_printing_launch() {
    OUTPUT_PENDING.store(true, Ordering::Relaxed);
}

/// Writes what the kernels printed to the program's stdout, as the driver
/// does at synchronization points; nothing to do (no round trip) unless a
/// kernel that can print was launched since the last flush.
pub fn flush_output() {
    if !OUTPUT_PENDING.swap(false, Ordering::Relaxed) {
        return;
    }
    let mut out = Vec::new();
    {
        let mut g = CONN.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(cu) = g.as_mut() {
            // An error leaves what came so far; the call that failed says why.
            let _ = cu.take_output(&mut out);
        }
    }
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

/// Runs `f` on the channel; maps its error to a CUresult.
pub fn with<T>(f: impl FnOnce(&mut Cuda) -> Result<T, CallError>) -> Result<T, CUresult> {
    device()?;
    let mut g = CONN.lock().unwrap_or_else(|p| p.into_inner());
    let cu = g.as_mut().ok_or(err::NOT_INITIALIZED)?;
    f(cu).map_err(|e| e.status().0)
}
