//! Finding, mapping and validating the region from the guest side.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fairgpu_protocol::layout::{Layout, RegionHeader, MAGIC};
use fairgpu_protocol::region::RegionView;

use crate::map::{ivshmem_bars, ivshmem_doorbell_registers, Mapping};
use crate::pci::{self, IvshmemDevice};
use crate::vfio::{InterruptWait, MapBars, VfioDevice, VfioPaths, HOST_TO_GUEST_VECTOR};
use crate::wake::WaitMode;
use crate::wake::{error_chain, WaitPreference, WakeChoice, WAIT_ENV};
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
        Self::new(Mapping::open(path)?.view()).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is too small for ivshmem registers", path.display()),
            )
        })
    }

    /// The registers in `regs` (BAR0), if it is large enough to hold them.
    pub(crate) fn new(regs: RegionView) -> Option<DoorbellRegister> {
        regs.atomic_u32(DOORBELL_REG).ok()?;
        Some(DoorbellRegister { regs })
    }

    /// Rings the host's `vector`: QEMU signals the host peer's eventfd.
    pub fn ring_host(&self, vector: u16) {
        let reg = self.regs.atomic_u32(DOORBELL_REG).expect("checked in new");
        // Relaxed: an MMIO write that QEMU handles synchronously; the
        // region writes it announces were ordered before it by the caller's
        // SeqCst fence.
        reg.store((HOST_PEER_ID << 16) | u32::from(vector), Ordering::Relaxed);
    }
}

/// Environment variable naming the region file in local mode.
pub const REGION_ENV: &str = "FAIRGPU_REGION";

/// A mapped region whose header passed validation, with the way its host
/// wakes this process's waiting channels.
#[derive(Debug)]
pub struct GuestRegion {
    view: RegionView,
    layout: Layout,
    path: PathBuf,
    doorbell: Option<DoorbellRegister>,
    wake: WakeChoice,
    irq: Option<Arc<InterruptWait>>,
    device: Option<IvshmemDevice>,
    /// Declared last: the mappings above may be the device's.
    vfio: Option<VfioDevice>,
}

/// Maps a region file, validates its header, returns the view and layout.
fn map_and_validate(path: &Path) -> Result<(RegionView, Layout), OpenError> {
    let map = Mapping::open(path).map_err(|source| OpenError::Map {
        path: path.to_owned(),
        source,
    })?;
    let view = map.view();
    let layout = validate(&view, path)?;
    Ok((view, layout))
}

fn validate(view: &RegionView, path: &Path) -> Result<Layout, OpenError> {
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
    Layout::from_header(&header, view.len() as u64).map_err(|source| OpenError::Layout {
        path: path.to_owned(),
        source,
    })
}

fn interrupt_reason(vfio: &VfioDevice, bars: &str) -> String {
    format!(
        "MSI-X vector {HOST_TO_GUEST_VECTOR} of {} through vfio-pci (IOMMU group {}, {}, {} vectors); {bars}",
        vfio.addr(),
        vfio.group(),
        vfio.iommu(),
        vfio.vectors()
    )
}

impl GuestRegion {
    /// Maps the region at `path` (a shm file or an ivshmem `resource2`) and
    /// validates its header, choosing the wake path as [`crate::wake`]
    /// describes ([`WAIT_ENV`] may force one). For the BAR2 of an
    /// `ivshmem-doorbell` device, also maps the device's Doorbell register.
    pub fn open(path: &Path) -> Result<Arc<GuestRegion>, OpenError> {
        let (pref, unknown) = WaitPreference::from_env();
        let mut r = Self::build(path, pref)?;
        if let Some(v) = unknown {
            r.wake.reason = format!(
                "{WAIT_ENV}={v:?} is not auto, futex, msix or backoff; {}",
                r.wake.reason
            );
        }
        Ok(Arc::new(r))
    }

    /// As [`GuestRegion::open`], with an explicit preference.
    pub fn open_with(path: &Path, pref: WaitPreference) -> Result<Arc<GuestRegion>, OpenError> {
        Self::build(path, pref).map(Arc::new)
    }

    fn build(path: &Path, pref: WaitPreference) -> Result<GuestRegion, OpenError> {
        let device =
            pci::device_of_bar(path).filter(|_| path.file_name().is_some_and(|n| n == "resource2"));
        let Some(device) = device else {
            return Self::on_file(path, pref);
        };
        let wants_irq = matches!(pref, WaitPreference::Auto | WaitPreference::Interrupt);
        let (view, layout) = match map_and_validate(path) {
            Ok(m) => m,
            // The sysfs files are root's; a user given the vfio group can
            // still map the BARs through vfio.
            Err(OpenError::Map { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied
                    && wants_irq
                    && device.is_doorbell() =>
            {
                let why = format!("{} is not accessible: {source}", path.display());
                return match VfioDevice::open(&device, &VfioPaths::default(), MapBars::Yes) {
                    Ok(v) => Self::through_vfio(path, device, v, pref, &why),
                    Err(e) => Err(OpenError::Map {
                        path: path.to_owned(),
                        source: std::io::Error::new(
                            source.kind(),
                            format!("{source}; through vfio neither: {}", error_chain(&e)),
                        ),
                    }),
                };
            }
            Err(e) => return Err(e),
        };
        // Without the register the guest still works: the host's block
        // slice bounds how long a request waits for a sleeping host.
        let doorbell =
            ivshmem_doorbell_registers(path).and_then(|r| DoorbellRegister::open(&r).ok());
        let not_tried = match pref {
            WaitPreference::Futex => Some(format!("{WAIT_ENV}=futex")),
            WaitPreference::SleepBackoff => Some(format!("{WAIT_ENV}=backoff")),
            _ if !device.is_doorbell() => Some(format!(
                "{} is an ivshmem-plain device: it has no MSI-X",
                device.addr
            )),
            _ => None,
        };
        let why_not = match not_tried {
            Some(w) => w,
            // The BARs stay mapped through sysfs, so that other processes
            // can map them too (see `crate::vfio` on sharing).
            None => match VfioDevice::open(&device, &VfioPaths::default(), MapBars::No) {
                Ok(vfio) => {
                    let wake = WakeChoice {
                        mode: WaitMode::Interrupt,
                        forced: pref == WaitPreference::Interrupt,
                        reason: interrupt_reason(&vfio, "BARs mapped through sysfs"),
                    };
                    return Ok(GuestRegion {
                        view,
                        layout,
                        path: path.to_owned(),
                        doorbell,
                        wake,
                        irq: Some(vfio.interrupts().clone()),
                        device: Some(device),
                        vfio: Some(vfio),
                    });
                }
                Err(source) if pref == WaitPreference::Interrupt => {
                    return Err(OpenError::Interrupt {
                        path: path.to_owned(),
                        source,
                    })
                }
                Err(e) => format!("no MSI-X through vfio: {}", error_chain(&e)),
            },
        };
        if pref == WaitPreference::Interrupt {
            return Err(OpenError::NoInterruptPath {
                path: path.to_owned(),
                why: why_not,
            });
        }
        let wake = match pref {
            WaitPreference::Futex => WakeChoice {
                mode: WaitMode::Futex,
                forced: true,
                reason: format!(
                    "{why_not} (a futex cannot block on a PCI BAR: the first block falls back \
                     to the sleep backoff)"
                ),
            },
            _ => WakeChoice {
                mode: WaitMode::SleepBackoff,
                forced: pref == WaitPreference::SleepBackoff,
                reason: format!(
                    "{why_not}; a futex cannot block on a PCI BAR: sleeping with a bounded backoff"
                ),
            },
        };
        Ok(GuestRegion {
            view,
            layout,
            path: path.to_owned(),
            doorbell,
            wake,
            irq: None,
            device: Some(device),
            vfio: None,
        })
    }

    /// A region that is a plain file (local mode).
    fn on_file(path: &Path, pref: WaitPreference) -> Result<GuestRegion, OpenError> {
        let (view, layout) = map_and_validate(path)?;
        let wake = match pref {
            WaitPreference::Interrupt => {
                return Err(OpenError::NoInterruptPath {
                    path: path.to_owned(),
                    why: "it is not an ivshmem device's BAR2".into(),
                })
            }
            WaitPreference::SleepBackoff => WakeChoice {
                mode: WaitMode::SleepBackoff,
                forced: true,
                reason: format!("{WAIT_ENV}=backoff"),
            },
            WaitPreference::Auto | WaitPreference::Futex => WakeChoice {
                mode: WaitMode::Futex,
                forced: pref == WaitPreference::Futex,
                reason: "the region is a shared file: the host's futex wake reaches this \
                         process (falls back to a sleep backoff if the kernel refuses the futex)"
                    .into(),
            },
        };
        Ok(GuestRegion {
            view,
            layout,
            path: path.to_owned(),
            doorbell: None,
            wake,
            irq: None,
            device: None,
            vfio: None,
        })
    }

    /// The region through the vfio device's own BAR mappings.
    fn through_vfio(
        path: &Path,
        device: IvshmemDevice,
        vfio: VfioDevice,
        pref: WaitPreference,
        why: &str,
    ) -> Result<GuestRegion, OpenError> {
        let view = vfio
            .bar2()
            .cloned()
            .ok_or_else(|| OpenError::NoInterruptPath {
                path: path.to_owned(),
                why: "vfio did not map BAR2".into(),
            })?;
        let layout = validate(&view, path)?;
        let doorbell = vfio.bar0().and_then(|r| DoorbellRegister::new(r.clone()));
        let wake = WakeChoice {
            mode: WaitMode::Interrupt,
            forced: pref == WaitPreference::Interrupt,
            reason: interrupt_reason(&vfio, &format!("BARs mapped through vfio ({why})")),
        };
        Ok(GuestRegion {
            view,
            layout,
            path: path.to_owned(),
            doorbell,
            wake,
            irq: Some(vfio.interrupts().clone()),
            device: Some(device),
            vfio: Some(vfio),
        })
    }

    /// A region file whose host wakes come from `irq` instead of the futex,
    /// as a device's MSI-X vector would deliver them: the interrupt path of
    /// the channel without a VM, for tests and for hosts that signal the
    /// eventfd themselves.
    pub fn open_with_interrupts(
        path: &Path,
        irq: Arc<InterruptWait>,
    ) -> Result<Arc<GuestRegion>, OpenError> {
        let (view, layout) = map_and_validate(path)?;
        Ok(Arc::new(GuestRegion {
            view,
            layout,
            path: path.to_owned(),
            doorbell: None,
            wake: WakeChoice {
                mode: WaitMode::Interrupt,
                forced: true,
                reason: "an interrupt eventfd given by the caller".into(),
            },
            irq: Some(irq),
            device: None,
            vfio: None,
        }))
    }

    /// The region named by `FAIRGPU_REGION`, else the first ivshmem device
    /// whose BAR2 holds a fairgpu region.
    pub fn discover() -> Result<Arc<GuestRegion>, OpenError> {
        if let Some(p) = std::env::var_os(REGION_ENV) {
            return Self::open(Path::new(&p));
        }
        let mut last = None;
        for bar in ivshmem_bars(Path::new(pci::SYSFS_PCI_DEVICES)) {
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

    /// The wake path this region's channels use, and why.
    pub fn wake(&self) -> &WakeChoice {
        &self.wake
    }

    /// The interrupt waiter, on the MSI-X path.
    pub fn interrupts(&self) -> Option<&Arc<InterruptWait>> {
        self.irq.as_ref()
    }

    /// The ivshmem device the region is the BAR2 of, if it is one.
    pub fn device(&self) -> Option<&IvshmemDevice> {
        self.device.as_ref()
    }

    /// The device opened through vfio, on the MSI-X path.
    pub fn vfio(&self) -> Option<&VfioDevice> {
        self.vfio.as_ref()
    }
}
