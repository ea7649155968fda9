//! The process-wide connection to the host and what is cached from it.
//!
//! `cuInit` maps the region, claims a channel and asks the host, once, for
//! everything about the device that later calls read (name, memory, UUID,
//! attributes). Every forwarded call then takes the channel's lock: threads
//! of one process serialize on the producer side of their channel.

use std::collections::HashMap;
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
    for a in 1..=MAX_ATTRIBUTE {
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

/// Runs `f` on the channel; maps its error to a CUresult.
pub fn with<T>(f: impl FnOnce(&mut Cuda) -> Result<T, CallError>) -> Result<T, CUresult> {
    device()?;
    let mut g = CONN.lock().unwrap_or_else(|p| p.into_inner());
    let cu = g.as_mut().ok_or(err::NOT_INITIALIZED)?;
    f(cu).map_err(|e| e.status().0)
}
