//! Finding, mapping and validating the region from the guest side.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fairgpu_protocol::layout::{Layout, RegionHeader, MAGIC};
use fairgpu_protocol::region::RegionView;

use crate::map::{ivshmem_bars, ivshmem_doorbell_registers, Mapping};
use crate::OpenError;

/// The host's peer id on an ivshmem server: fairgpu's server
/// (`fairgpu-qemu`) is always peer 0 and gives guests ids from 1.
pub const HOST_PEER_ID: u32 = 0;
/// The ivshmem Doorbell register's offset in BAR0.
const DOORBELL_REG: usize = 12;

/// An `ivshmem-doorbell` device's registers: writing
/// `(peer << 16) | vector` to Doorbell signals that peer's eventfd.
#[derive(Debug)]
pub struct DoorbellRegister {
    regs: RegionView,
}

impl DoorbellRegister {
    /// Maps the register BAR at `path` (sysfs `resource0`).
    pub fn open(path: &Path) -> std::io::Result<DoorbellRegister> {
        let regs = Mapping::open(path)?.view();
        // Fails on a BAR too small to hold the register.
        regs.atomic_u32(DOORBELL_REG).map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is too small for ivshmem registers", path.display()),
            )
        })?;
        Ok(DoorbellRegister { regs })
    }

    /// Rings the host's `vector`: QEMU signals the host peer's eventfd.
    pub fn ring_host(&self, vector: u16) {
        let reg = self.regs.atomic_u32(DOORBELL_REG).expect("checked in open");
        // Relaxed: an MMIO write that QEMU handles synchronously; the
        // region writes it announces were ordered before it by the caller's
        // SeqCst fence.
        reg.store((HOST_PEER_ID << 16) | u32::from(vector), Ordering::Relaxed);
    }
}

/// Environment variable naming the region file in local mode.
pub const REGION_ENV: &str = "FAIRGPU_REGION";

/// A mapped region whose header passed validation.
#[derive(Debug)]
pub struct GuestRegion {
    view: RegionView,
    layout: Layout,
    path: PathBuf,
    doorbell: Option<DoorbellRegister>,
}

impl GuestRegion {
    /// Maps the region at `path` (a shm file or an ivshmem `resource2`) and
    /// validates its header. For the BAR2 of an `ivshmem-doorbell` device,
    /// also maps the device's Doorbell register.
    pub fn open(path: &Path) -> Result<Arc<GuestRegion>, OpenError> {
        let map = Mapping::open(path).map_err(|source| OpenError::Map {
            path: path.to_owned(),
            source,
        })?;
        let view = map.view();
        // Acquire: pairs with the host's Release store of the magic, which it
        // writes after every other header field.
        let magic = view.atomic_u64(0).map_err(|_| OpenError::TooSmall {
            path: path.to_owned(),
        })?;
        if magic.load(Ordering::Acquire) != MAGIC {
            return Err(OpenError::NotARegion {
                path: path.to_owned(),
            });
        }
        let header: RegionHeader = view.read_obj(0).map_err(|_| OpenError::TooSmall {
            path: path.to_owned(),
        })?;
        let layout = Layout::from_header(&header, view.len() as u64).map_err(|source| {
            OpenError::Layout {
                path: path.to_owned(),
                source,
            }
        })?;
        // Without the register the guest still works: the host's block
        // slice bounds how long a request waits for a sleeping host.
        let doorbell =
            ivshmem_doorbell_registers(path).and_then(|r| DoorbellRegister::open(&r).ok());
        Ok(Arc::new(GuestRegion {
            view,
            layout,
            path: path.to_owned(),
            doorbell,
        }))
    }

    /// The region named by `FAIRGPU_REGION`, else the first ivshmem device
    /// whose BAR2 holds a fairgpu region.
    pub fn discover() -> Result<Arc<GuestRegion>, OpenError> {
        if let Some(p) = std::env::var_os(REGION_ENV) {
            return Self::open(Path::new(&p));
        }
        let mut last = None;
        for bar in ivshmem_bars(Path::new("/sys/bus/pci/devices")) {
            match Self::open(&bar) {
                Ok(r) => return Ok(r),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(OpenError::NoRegion))
    }

    /// The validated layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The view of the whole region.
    pub fn view(&self) -> &RegionView {
        &self.view
    }

    /// The Doorbell register that wakes the host across a VM boundary, if
    /// the region is an `ivshmem-doorbell` device's BAR2.
    pub fn doorbell(&self) -> Option<&DoorbellRegister> {
        self.doorbell.as_ref()
    }

    /// Where the region was mapped from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
