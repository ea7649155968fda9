//! The host → guest wake of a VM: the ivshmem device's MSI-X vector,
//! received by this process through vfio-pci.
//!
//! An `ivshmem-doorbell` device raises MSI-X vector `v` in the guest when
//! the host signals that guest's eventfd for `v` (QEMU's ivshmem server
//! protocol). The guest kernel has no ivshmem driver, and `uio_pci_generic`
//! gets no MSI-X; vfio-pci hands the vectors to userspace as eventfds
//! (`VFIO_DEVICE_SET_IRQS`), with stock modules, as long as the guest has an
//! IOMMU (QEMU `-device intel-iommu,intremap=on`, guest `intel_iommu=on`)
//! or, where the kernel has it, vfio's no-IOMMU mode.
//!
//! Vector assignment (both sides):
//! - [`GUEST_TO_HOST_VECTOR`] (0): the guest rings the host peer's vector 0
//!   through the Doorbell register (BAR0 offset 12);
//! - [`HOST_TO_GUEST_VECTOR`] (1): the host raises the guest's vector 1 to
//!   wake a channel that published `guest_sleeping`. The device therefore
//!   needs `vectors=2`.
//!
//! [`VfioDevice::open`] binds the device to vfio-pci if it has no driver
//! (`driver_override`, then `bind`), opens its group and a container (type1
//! IOMMU, or no-IOMMU where that is the only mode), optionally maps BAR0 and
//! BAR2 through the device fd ([`MapBars`]), enables bus mastering (MSI-X
//! messages are memory writes) and attaches an eventfd to vector 1.
//!
//! Sharing: a vfio group can be open in one process at a time; a second
//! process gets `EBUSY` and falls back to the sleep backoff. It still maps
//! the BARs through sysfs, unless the first process mapped them through
//! vfio: vfio-pci then claims the BARs' memory, and with
//! `CONFIG_IO_STRICT_DEVMEM` (Debian's default) the kernel refuses sysfs
//! mappings of claimed memory. Root therefore maps through sysfs and uses
//! vfio for the interrupt only; a process that may open the vfio group but
//! not the sysfs files (a user given `/dev/vfio/N`) maps through vfio.
//!
//! [`InterruptWait`] lets any number of threads (channels) of the process
//! wait for that eventfd without stealing each other's wake-ups: one thread
//! polls, the others wait on a condition variable for the epoch to move.

mod sys;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use fairgpu_protocol::region::RegionView;

use crate::pci::IvshmemDevice;

/// The vector the guest rings on the host peer (Doorbell register).
pub const GUEST_TO_HOST_VECTOR: u16 = 0;
/// The guest's vector the host raises to wake a sleeping channel.
pub const HOST_TO_GUEST_VECTOR: u32 = 1;
/// The driver that hands a device's interrupts to userspace.
pub const VFIO_PCI: &str = "vfio-pci";

/// Where vfio's files are; the defaults are the real ones, tests point
/// them into a temporary tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfioPaths {
    /// `/sys/bus/pci/drivers`.
    pub pci_drivers: PathBuf,
    /// `/dev/vfio`.
    pub dev_vfio: PathBuf,
    /// vfio's `enable_unsafe_noiommu_mode` parameter (absent where the
    /// kernel lacks the mode, as Debian's do).
    pub noiommu_param: PathBuf,
}

impl Default for VfioPaths {
    fn default() -> Self {
        VfioPaths {
            pci_drivers: PathBuf::from("/sys/bus/pci/drivers"),
            dev_vfio: PathBuf::from("/dev/vfio"),
            noiommu_param: PathBuf::from("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode"),
        }
    }
}

/// Why the interrupt path is not available.
#[derive(Debug, thiserror::Error)]
pub enum VfioError {
    /// The device is bound to a driver other than vfio-pci.
    #[error("{addr} is bound to {driver}, not {VFIO_PCI}")]
    BoundElsewhere {
        /// PCI address.
        addr: String,
        /// Its driver.
        driver: String,
    },
    /// vfio-pci is not loaded.
    #[error("{VFIO_PCI} is not loaded (modprobe vfio-pci)")]
    NoVfioDriver,
    /// Binding the device to vfio-pci failed.
    #[error("binding {addr} to {VFIO_PCI}: writing {file}")]
    Bind {
        /// PCI address.
        addr: String,
        /// The sysfs file written.
        file: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The bind was written but the device has no vfio-pci driver after it.
    #[error("{addr} is still not bound to {VFIO_PCI} after binding it (see the kernel log)")]
    NotBound {
        /// PCI address.
        addr: String,
    },
    /// The device has no IOMMU group: the guest has no IOMMU.
    #[error(
        "{addr} has no IOMMU group: the guest has no IOMMU (QEMU: -machine q35 \
         -device intel-iommu,intremap=on before the device, kernel: intel_iommu=on; \
         or vfio's enable_unsafe_noiommu_mode where the kernel has it)"
    )]
    NoIommuGroup {
        /// PCI address.
        addr: String,
    },
    /// Another process has the device's vfio group open.
    #[error("{path} is open in another process")]
    GroupBusy {
        /// The group's device node.
        path: PathBuf,
    },
    /// The group's device node could not be opened.
    #[error("opening {path}")]
    OpenGroup {
        /// The group's device node.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Some device of the group is bound to a non-vfio driver.
    #[error("vfio group {group} is not viable: bind every device of it to {VFIO_PCI}")]
    NotViable {
        /// The group.
        group: u32,
    },
    /// The container offers no IOMMU type this module can use.
    #[error("the vfio container supports neither type1 nor no-IOMMU")]
    NoIommuType,
    /// The vfio API version is not 0.
    #[error("vfio API version {0} (expected 0)")]
    ApiVersion(i32),
    /// A vfio call failed.
    #[error("vfio: {what}")]
    Call {
        /// What was being done.
        what: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The device is not what an ivshmem device looks like through vfio.
    #[error("{addr} through vfio: {why}")]
    Device {
        /// PCI address.
        addr: String,
        /// What is wrong.
        why: String,
    },
    /// The device has too few MSI-X vectors for the host → guest wake.
    #[error(
        "{addr} has {count} MSI-X vectors; the host → guest wake is vector \
         {HOST_TO_GUEST_VECTOR} (QEMU: ivshmem-doorbell,vectors=2)"
    )]
    TooFewVectors {
        /// PCI address.
        addr: String,
        /// Its MSI-X vectors.
        count: u32,
    },
}

fn call(what: &'static str) -> impl FnOnce(io::Error) -> VfioError {
    move |source| VfioError::Call { what, source }
}

/// The IOMMU backend of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IommuType {
    /// Type 1, version 2.
    Type1v2,
    /// Type 1.
    Type1,
    /// No IOMMU (unsafe mode: no DMA isolation; this module maps no DMA).
    NoIommu,
}

impl std::fmt::Display for IommuType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            IommuType::Type1v2 => "type1v2",
            IommuType::Type1 => "type1",
            IommuType::NoIommu => "no-IOMMU",
        })
    }
}

/// Whether vfio's no-IOMMU mode is on (then vfio-pci makes a group for a
/// device the IOMMU does not cover).
pub fn noiommu_enabled(paths: &VfioPaths) -> bool {
    std::fs::read_to_string(&paths.noiommu_param).is_ok_and(|v| matches!(v.trim(), "Y" | "y" | "1"))
}

/// Makes sure `dev` is bound to vfio-pci, binding it if it has no driver.
/// Needs root (sysfs writes). A device without an IOMMU group is not
/// touched unless vfio's no-IOMMU mode is on: vfio-pci would refuse it.
pub fn ensure_bound(dev: &IvshmemDevice, paths: &VfioPaths) -> Result<(), VfioError> {
    let driver_of = |d: &IvshmemDevice| {
        std::fs::read_link(d.dir.join("driver"))
            .ok()
            .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
    };
    match driver_of(dev) {
        Some(d) if d == VFIO_PCI => return Ok(()),
        Some(d) => {
            return Err(VfioError::BoundElsewhere {
                addr: dev.addr.clone(),
                driver: d,
            })
        }
        None => {}
    }
    if dev.iommu_group.is_none() && !noiommu_enabled(paths) {
        return Err(VfioError::NoIommuGroup {
            addr: dev.addr.clone(),
        });
    }
    let vfio = paths.pci_drivers.join(VFIO_PCI);
    if !vfio.is_dir() {
        return Err(VfioError::NoVfioDriver);
    }
    let write = |file: PathBuf, what: &str| {
        std::fs::write(&file, what).map_err(|source| VfioError::Bind {
            addr: dev.addr.clone(),
            file,
            source,
        })
    };
    // driver_override makes vfio-pci (and only it) match this one device,
    // without teaching vfio-pci the id of every ivshmem device (new_id).
    write(dev.dir.join("driver_override"), VFIO_PCI)?;
    let bound = write(vfio.join("bind"), &dev.addr).and_then(|()| match driver_of(dev) {
        Some(d) if d == VFIO_PCI => Ok(()),
        _ => Err(VfioError::NotBound {
            addr: dev.addr.clone(),
        }),
    });
    if bound.is_err() {
        // Leave the device as it was found: no override.
        let _ = std::fs::write(dev.dir.join("driver_override"), "\n");
    }
    bound
}

/// The device node of `dev`'s vfio group and whether it is a no-IOMMU
/// group (vfio names those `noiommu-N`).
pub fn group_node(
    dev: &IvshmemDevice,
    paths: &VfioPaths,
) -> Result<(u32, PathBuf, bool), VfioError> {
    let group = dev.iommu_group.ok_or_else(|| VfioError::NoIommuGroup {
        addr: dev.addr.clone(),
    })?;
    let plain = paths.dev_vfio.join(group.to_string());
    let noiommu = paths.dev_vfio.join(format!("noiommu-{group}"));
    if !plain.exists() && noiommu.exists() {
        return Ok((group, noiommu, true));
    }
    Ok((group, plain, false))
}

/// Whether [`VfioDevice::open`] maps the BARs through the device fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapBars {
    /// Interrupts only: the caller maps the BARs through sysfs.
    No,
    /// BAR2 (required) and BAR0 (if vfio allows) through vfio.
    Yes,
}

/// An ivshmem device opened through vfio: MSI-X vector
/// [`HOST_TO_GUEST_VECTOR`] attached to an eventfd, and its BARs mapped if
/// asked for.
#[derive(Debug)]
pub struct VfioDevice {
    addr: String,
    group: u32,
    iommu: IommuType,
    bar0: Option<RegionView>,
    bar2: Option<RegionView>,
    vectors: u32,
    irq: Arc<InterruptWait>,
    // Dropped last (declaration order): the device, then its group, then
    // the container. The mappings above hold their own file references.
    _device: OwnedFd,
    _group: OwnedFd,
    _container: OwnedFd,
}

impl VfioDevice {
    /// Opens `dev` through vfio (binding it to vfio-pci first if it has no
    /// driver).
    pub fn open(
        dev: &IvshmemDevice,
        paths: &VfioPaths,
        bars: MapBars,
    ) -> Result<VfioDevice, VfioError> {
        ensure_bound(dev, paths)?;
        // Binding may have made the group (no-IOMMU mode): look again.
        let dev = &IvshmemDevice::from_sysfs(&dev.dir).unwrap_or_else(|| dev.clone());
        let (group_id, node, noiommu) = group_node(dev, paths)?;
        let group = open_rw(&node).map_err(|source| match source.raw_os_error() {
            Some(libc::EBUSY) => VfioError::GroupBusy { path: node.clone() },
            _ => VfioError::OpenGroup {
                path: node.clone(),
                source,
            },
        })?;
        let mut status = sys::GroupStatus::default();
        sys::ioctl_struct(group.as_fd(), sys::VFIO_GROUP_GET_STATUS, &mut status)
            .map_err(call("VFIO_GROUP_GET_STATUS"))?;
        if status.flags & sys::VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(VfioError::NotViable { group: group_id });
        }
        let container_node = paths.dev_vfio.join("vfio");
        let container = open_rw(&container_node).map_err(|source| VfioError::OpenGroup {
            path: container_node,
            source,
        })?;
        let api = sys::ioctl_val(container.as_fd(), sys::VFIO_GET_API_VERSION, 0)
            .map_err(call("VFIO_GET_API_VERSION"))?;
        if api != sys::VFIO_API_VERSION {
            return Err(VfioError::ApiVersion(api));
        }
        let has = |ext| {
            sys::ioctl_val(container.as_fd(), sys::VFIO_CHECK_EXTENSION, ext).is_ok_and(|r| r > 0)
        };
        let iommu = if noiommu {
            has(sys::VFIO_NOIOMMU_IOMMU).then_some(IommuType::NoIommu)
        } else if has(sys::VFIO_TYPE1V2_IOMMU) {
            Some(IommuType::Type1v2)
        } else if has(sys::VFIO_TYPE1_IOMMU) {
            Some(IommuType::Type1)
        } else {
            None
        }
        .ok_or(VfioError::NoIommuType)?;
        sys::group_set_container(group.as_fd(), container.as_fd())
            .map_err(call("VFIO_GROUP_SET_CONTAINER"))?;
        let iommu_arg = match iommu {
            IommuType::Type1v2 => sys::VFIO_TYPE1V2_IOMMU,
            IommuType::Type1 => sys::VFIO_TYPE1_IOMMU,
            IommuType::NoIommu => sys::VFIO_NOIOMMU_IOMMU,
        };
        sys::ioctl_val(container.as_fd(), sys::VFIO_SET_IOMMU, iommu_arg)
            .map_err(call("VFIO_SET_IOMMU"))?;
        let device = sys::group_get_device_fd(group.as_fd(), &dev.addr)
            .map_err(call("VFIO_GROUP_GET_DEVICE_FD"))?;
        let bad = |why: String| VfioError::Device {
            addr: dev.addr.clone(),
            why,
        };

        let mut info = sys::DeviceInfo::default();
        sys::ioctl_struct(device.as_fd(), sys::VFIO_DEVICE_GET_INFO, &mut info)
            .map_err(call("VFIO_DEVICE_GET_INFO"))?;
        if info.flags & sys::VFIO_DEVICE_FLAGS_PCI == 0
            || info.num_regions <= sys::VFIO_PCI_CONFIG_REGION_INDEX
            || info.num_irqs <= sys::VFIO_PCI_MSIX_IRQ_INDEX
        {
            return Err(bad(format!(
                "not a PCI device with config space and MSI-X (flags {:#x}, {} regions, {} irq indexes)",
                info.flags, info.num_regions, info.num_irqs
            )));
        }
        let region = |index: u32| {
            let mut r = sys::RegionInfo {
                index,
                ..Default::default()
            };
            sys::ioctl_struct(device.as_fd(), sys::VFIO_DEVICE_GET_REGION_INFO, &mut r)
                .map_err(call("VFIO_DEVICE_GET_REGION_INFO"))?;
            Ok::<_, VfioError>(r)
        };
        let map = |r: &sys::RegionInfo| -> Result<RegionView, VfioError> {
            if r.flags & sys::VFIO_REGION_INFO_FLAG_MMAP == 0 {
                return Err(bad(format!("BAR{} cannot be mapped", r.index)));
            }
            let len = usize::try_from(r.size)
                .ok()
                .filter(|&l| l >= 64 && r.size <= fairgpu_protocol::limits::MAX_REGION)
                .ok_or_else(|| bad(format!("BAR{} has size {}", r.index, r.size)))?;
            let m = Arc::new(
                sys::DeviceMapping::new(device.as_fd(), r.offset, len)
                    .map_err(call("mapping a BAR"))?,
            );
            // SAFETY: ptr..ptr+len is the fresh read-write mapping `m`, kept
            // alive by the keepalive Arc; this crate never forms references
            // to its bytes.
            Ok(unsafe { RegionView::new(m.ptr(), m.len(), m.clone()) })
        };
        let (bar0, bar2) = match bars {
            MapBars::No => (None, None),
            // The Doorbell register: without it the guest still works (the
            // host's block slice bounds a sleeping host's delay).
            MapBars::Yes => (map(&region(0)?).ok(), Some(map(&region(2)?)?)),
        };
        let config = region(sys::VFIO_PCI_CONFIG_REGION_INDEX)?;

        let mut irqs = sys::IrqInfo {
            index: sys::VFIO_PCI_MSIX_IRQ_INDEX,
            ..Default::default()
        };
        sys::ioctl_struct(device.as_fd(), sys::VFIO_DEVICE_GET_IRQ_INFO, &mut irqs)
            .map_err(call("VFIO_DEVICE_GET_IRQ_INFO"))?;
        if irqs.count <= HOST_TO_GUEST_VECTOR {
            return Err(VfioError::TooFewVectors {
                addr: dev.addr.clone(),
                count: irqs.count,
            });
        }

        // Bus mastering: an MSI-X message is a memory write by the device,
        // which QEMU drops while the command register's bit 2 is clear.
        let mut cmd = [0u8; 2];
        sys::pread_exact(device.as_fd(), &mut cmd, config.offset + PCI_COMMAND)
            .map_err(call("reading the PCI command register"))?;
        let cmd = u16::from_le_bytes(cmd) | PCI_COMMAND_MASTER;
        sys::pwrite_all(
            device.as_fd(),
            &cmd.to_le_bytes(),
            config.offset + PCI_COMMAND,
        )
        .map_err(call("enabling bus mastering"))?;

        let efd = sys::eventfd().map_err(call("eventfd"))?;
        let mut set = sys::IrqSetEventfd {
            flags: sys::VFIO_IRQ_SET_DATA_EVENTFD | sys::VFIO_IRQ_SET_ACTION_TRIGGER,
            index: sys::VFIO_PCI_MSIX_IRQ_INDEX,
            start: HOST_TO_GUEST_VECTOR,
            count: 1,
            fd: std::os::fd::AsRawFd::as_raw_fd(&efd),
            ..Default::default()
        };
        // vfio enables MSI-X with start + count vectors and attaches the
        // eventfd to the last one; vector 0 stays without a trigger.
        sys::ioctl_struct(device.as_fd(), sys::VFIO_DEVICE_SET_IRQS, &mut set)
            .map_err(call("VFIO_DEVICE_SET_IRQS (MSI-X)"))?;

        Ok(VfioDevice {
            addr: dev.addr.clone(),
            group: group_id,
            iommu,
            bar0,
            bar2,
            vectors: irqs.count,
            irq: Arc::new(InterruptWait::new(efd)),
            _device: device,
            _group: group,
            _container: container,
        })
    }

    /// The device's PCI address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Its IOMMU group.
    pub fn group(&self) -> u32 {
        self.group
    }

    /// The container's IOMMU type.
    pub fn iommu(&self) -> IommuType {
        self.iommu
    }

    /// MSI-X vectors of the device.
    pub fn vectors(&self) -> u32 {
        self.vectors
    }

    /// BAR2 (the shared memory), if mapped through vfio.
    pub fn bar2(&self) -> Option<&RegionView> {
        self.bar2.as_ref()
    }

    /// BAR0 (the registers), if mapped through vfio (and vfio allows it).
    pub fn bar0(&self) -> Option<&RegionView> {
        self.bar0.as_ref()
    }

    /// The waiter on vector [`HOST_TO_GUEST_VECTOR`].
    pub fn interrupts(&self) -> &Arc<InterruptWait> {
        &self.irq
    }
}

/// Offset of the PCI command register in config space.
const PCI_COMMAND: u64 = 4;
/// The command register's Bus Master Enable bit.
const PCI_COMMAND_MASTER: u16 = 1 << 2;

fn open_rw(path: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map(OwnedFd::from)
}

/// Waiting on an interrupt eventfd from any number of threads.
///
/// Every interrupt the eventfd counted moves an epoch. A waiter reads the
/// epoch before it publishes that it sleeps ([`InterruptWait::epoch`]) and
/// then waits for the epoch to move past it ([`InterruptWait::wait_past`]):
/// an interrupt that arrives between the two is not lost, since the
/// eventfd stays readable until someone reads it, and whoever reads it
/// moves the epoch. One waiter at a time polls the eventfd; the others
/// wait on a condition variable it notifies.
#[derive(Debug)]
pub struct InterruptWait {
    fd: OwnedFd,
    state: Mutex<IrqState>,
    moved: Condvar,
    received: AtomicU64,
}

#[derive(Debug, Default)]
struct IrqState {
    epoch: u64,
    polling: bool,
}

impl InterruptWait {
    /// Waits on `fd`, a non-blocking eventfd.
    pub fn new(fd: OwnedFd) -> InterruptWait {
        InterruptWait {
            fd,
            state: Mutex::new(IrqState::default()),
            moved: Condvar::new(),
            received: AtomicU64::new(0),
        }
    }

    /// A waiter on a fresh eventfd that [`InterruptWait::signal`] raises:
    /// the interrupt path without a device, for tests.
    pub fn for_tests() -> io::Result<InterruptWait> {
        Ok(InterruptWait::new(sys::eventfd()?))
    }

    /// Raises the eventfd as an interrupt would.
    pub fn signal(&self) -> io::Result<()> {
        sys::eventfd_signal(self.fd.as_fd())
    }

    /// The current epoch: read it before publishing that you sleep.
    pub fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Interrupts received so far (eventfd counts).
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, IrqState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks until the epoch differs from `seen` (true) or `timeout`
    /// passes (false).
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if st.epoch != seen {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            if st.polling {
                st = self
                    .moved
                    .wait_timeout(st, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                continue;
            }
            st.polling = true;
            drop(st);
            let got = sys::poll_readable(self.fd.as_fd(), deadline - now).and_then(|readable| {
                match readable {
                    true => sys::eventfd_take(self.fd.as_fd()),
                    false => Ok(0),
                }
            });
            st = self.lock();
            st.polling = false;
            if let Ok(n) = got {
                if n > 0 {
                    st.epoch += 1;
                    self.received.fetch_add(n, Ordering::Relaxed);
                }
            }
            self.moved.notify_all();
            got?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_device(root: &Path, driver: Option<&str>, group: Option<u32>) -> IvshmemDevice {
        let dir = root.join("devices/0000:00:03.0");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("vendor"), "0x1af4\n").unwrap();
        std::fs::write(dir.join("device"), "0x1110\n").unwrap();
        if let Some(d) = driver {
            std::fs::create_dir_all(root.join("drivers").join(d)).unwrap();
            std::os::unix::fs::symlink(root.join("drivers").join(d), dir.join("driver")).unwrap();
        }
        if let Some(g) = group {
            std::os::unix::fs::symlink(format!("../iommu_groups/{g}"), dir.join("iommu_group"))
                .unwrap();
        }
        IvshmemDevice::from_sysfs(&dir).expect("an ivshmem device")
    }

    fn tree(name: &str) -> (PathBuf, VfioPaths) {
        let root = std::env::temp_dir().join(format!("fairgpu-vfio-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("drivers")).unwrap();
        std::fs::create_dir_all(root.join("dev-vfio")).unwrap();
        let paths = VfioPaths {
            pci_drivers: root.join("drivers"),
            dev_vfio: root.join("dev-vfio"),
            noiommu_param: root.join("enable_unsafe_noiommu_mode"),
        };
        (root, paths)
    }

    #[test]
    fn a_device_bound_to_vfio_pci_needs_no_binding() {
        let (root, paths) = tree("bound");
        let dev = fake_device(&root, Some(VFIO_PCI), Some(3));
        ensure_bound(&dev, &paths).expect("already bound");
        assert!(!dev.dir.join("driver_override").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_device_of_another_driver_is_left_alone() {
        let (root, paths) = tree("other");
        let dev = fake_device(&root, Some("uio_pci_generic"), Some(3));
        let e = ensure_bound(&dev, &paths).unwrap_err();
        assert!(
            matches!(&e, VfioError::BoundElsewhere { driver, .. } if driver == "uio_pci_generic"),
            "{e}"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn binding_needs_the_vfio_pci_driver_loaded() {
        let (root, paths) = tree("nodriver");
        let dev = fake_device(&root, None, Some(3));
        assert!(matches!(
            ensure_bound(&dev, &paths),
            Err(VfioError::NoVfioDriver)
        ));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn binding_writes_driver_override_then_bind_and_checks_the_result() {
        let (root, paths) = tree("bind");
        let dev = fake_device(&root, None, Some(3));
        std::fs::create_dir_all(paths.pci_drivers.join(VFIO_PCI)).unwrap();
        // A fake sysfs does not bind anything: the check after must notice,
        // and the override is taken back.
        let e = ensure_bound(&dev, &paths).unwrap_err();
        assert!(matches!(e, VfioError::NotBound { .. }), "{e}");
        assert_eq!(
            std::fs::read_to_string(paths.pci_drivers.join(VFIO_PCI).join("bind")).unwrap(),
            dev.addr
        );
        assert_eq!(
            std::fs::read_to_string(dev.dir.join("driver_override")).unwrap(),
            "\n"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_device_without_an_iommu_group_is_not_touched() {
        let (root, paths) = tree("nogroup");
        let dev = fake_device(&root, None, None);
        std::fs::create_dir_all(paths.pci_drivers.join(VFIO_PCI)).unwrap();
        let e = ensure_bound(&dev, &paths).unwrap_err();
        assert!(matches!(e, VfioError::NoIommuGroup { .. }), "{e}");
        assert!(!dev.dir.join("driver_override").exists());
        assert!(!paths.pci_drivers.join(VFIO_PCI).join("bind").exists());
        // In no-IOMMU mode vfio-pci makes the group itself: bind.
        std::fs::write(&paths.noiommu_param, "Y\n").unwrap();
        let e = ensure_bound(&dev, &paths).unwrap_err();
        assert!(matches!(e, VfioError::NotBound { .. }), "{e}");
        assert!(paths.pci_drivers.join(VFIO_PCI).join("bind").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn group_nodes_without_an_iommu_and_in_no_iommu_mode() {
        let (root, paths) = tree("group");
        let none = fake_device(&root, Some(VFIO_PCI), None);
        assert!(matches!(
            group_node(&none, &paths),
            Err(VfioError::NoIommuGroup { .. })
        ));
        std::fs::remove_dir_all(&root).unwrap();

        let (root, paths) = tree("group2");
        let dev = fake_device(&root, Some(VFIO_PCI), Some(5));
        let (g, node, noiommu) = group_node(&dev, &paths).unwrap();
        assert_eq!((g, noiommu), (5, false));
        assert_eq!(node, paths.dev_vfio.join("5"));
        std::fs::write(paths.dev_vfio.join("noiommu-5"), "").unwrap();
        let (_, node, noiommu) = group_node(&dev, &paths).unwrap();
        assert!(noiommu);
        assert_eq!(node, paths.dev_vfio.join("noiommu-5"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn opening_fails_cleanly_without_a_group_node() {
        let (root, paths) = tree("open");
        let dev = fake_device(&root, Some(VFIO_PCI), Some(9));
        let e = VfioDevice::open(&dev, &paths, MapBars::No).unwrap_err();
        assert!(matches!(e, VfioError::OpenGroup { .. }), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_interrupt_before_the_wait_is_not_lost() {
        let w = InterruptWait::for_tests().unwrap();
        let seen = w.epoch();
        w.signal().unwrap();
        assert!(w.wait_past(seen, Duration::from_secs(10)).unwrap());
        assert_eq!(w.received(), 1);
        // Nothing new: times out.
        let seen = w.epoch();
        assert!(!w.wait_past(seen, Duration::from_millis(5)).unwrap());
    }

    #[test]
    fn one_interrupt_wakes_every_waiting_thread() {
        let w = Arc::new(InterruptWait::for_tests().unwrap());
        let seen = w.epoch();
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let w = w.clone();
                std::thread::spawn(move || w.wait_past(seen, Duration::from_secs(10)).unwrap())
            })
            .collect();
        w.signal().unwrap();
        for t in waiters {
            assert!(t.join().unwrap(), "a waiter timed out instead of waking");
        }
        assert_eq!(w.received(), 1);
    }
}
