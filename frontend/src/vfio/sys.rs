//! The raw vfio interface (`linux/vfio.h`): ioctl numbers, the argument
//! structs with pinned layouts, eventfds, `poll`, positional reads and
//! writes, and mapping a device region. Every function is safe to call: the
//! unsafe blocks only hand the kernel live, correctly sized buffers or
//! descriptors this process owns.

use std::ffi::CString;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::time::Duration;

use vfio_bindings::bindings::vfio as linux;

/// `VFIO_TYPE` (`';'`) in the ioctl number's type byte.
const VFIO_TYPE: u64 = linux::VFIO_TYPE as u64;
/// `VFIO_BASE`: the first vfio ioctl's number.
const VFIO_BASE: u64 = linux::VFIO_BASE as u64;

/// `_IO(VFIO_TYPE, VFIO_BASE + n)`: vfio ioctls carry neither a direction
/// nor a size in their number; the size travels in each struct's `argsz`.
/// (The bindings crate has the structs and flags but not these numbers.)
const fn vfio_io(n: u64) -> u64 {
    (VFIO_TYPE << 8) | (VFIO_BASE + n)
}

/// Returns `VFIO_API_VERSION` (container).
pub const VFIO_GET_API_VERSION: u64 = vfio_io(0);
/// Whether the container supports an IOMMU type (container).
pub const VFIO_CHECK_EXTENSION: u64 = vfio_io(1);
/// Selects the container's IOMMU type (container).
pub const VFIO_SET_IOMMU: u64 = vfio_io(2);
/// Fills a [`GroupStatus`] (group).
pub const VFIO_GROUP_GET_STATUS: u64 = vfio_io(3);
/// Puts the group into a container (group; argument: the container fd).
pub const VFIO_GROUP_SET_CONTAINER: u64 = vfio_io(4);
/// Opens a device of the group by name (group; argument: the PCI address).
pub const VFIO_GROUP_GET_DEVICE_FD: u64 = vfio_io(6);
/// Fills a [`DeviceInfo`] (device).
pub const VFIO_DEVICE_GET_INFO: u64 = vfio_io(7);
/// Fills a [`RegionInfo`] (device).
pub const VFIO_DEVICE_GET_REGION_INFO: u64 = vfio_io(8);
/// Fills an [`IrqInfo`] (device).
pub const VFIO_DEVICE_GET_IRQ_INFO: u64 = vfio_io(9);
/// Configures interrupts from an [`IrqSetEventfd`] (device).
pub const VFIO_DEVICE_SET_IRQS: u64 = vfio_io(10);

/// The only vfio API version there is.
pub const VFIO_API_VERSION: i32 = linux::VFIO_API_VERSION as i32;
/// Type 1 IOMMU (the argument of `VFIO_CHECK_EXTENSION`/`VFIO_SET_IOMMU`).
pub const VFIO_TYPE1_IOMMU: u64 = linux::VFIO_TYPE1_IOMMU as u64;
/// Type 1 IOMMU, version 2 semantics (preferred).
pub const VFIO_TYPE1V2_IOMMU: u64 = linux::VFIO_TYPE1v2_IOMMU as u64;
/// No IOMMU at all (`enable_unsafe_noiommu_mode`; no DMA protection).
pub const VFIO_NOIOMMU_IOMMU: u64 = linux::VFIO_NOIOMMU_IOMMU as u64;

pub use linux::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_GROUP_FLAGS_VIABLE, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_REGION_INFO_FLAG_MMAP,
};

/// `struct vfio_group_status`.
pub type GroupStatus = linux::vfio_group_status;
/// `struct vfio_device_info` (the capability fields are not used).
pub type DeviceInfo = linux::vfio_device_info;
/// `struct vfio_region_info`.
pub type RegionInfo = linux::vfio_region_info;
/// `struct vfio_irq_info`.
pub type IrqInfo = linux::vfio_irq_info;

/// `struct vfio_irq_set` followed by one eventfd: triggers one vector. The
/// bindings end `vfio_irq_set` in a flexible array, so this fixed form of
/// it stays ours.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct IrqSetEventfd {
    /// Size of this struct, the eventfd included.
    pub argsz: u32,
    /// `VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER`.
    pub flags: u32,
    /// Interrupt index.
    pub index: u32,
    /// First vector.
    pub start: u32,
    /// Vectors (1: `fd`).
    pub count: u32,
    /// The eventfd (`-1` detaches the vector).
    pub fd: i32,
}
const _: () = assert!(size_of::<IrqSetEventfd>() == 24);
const _: () = assert!(offset_of!(IrqSetEventfd, fd) == 20);
const _: () = assert!(offset_of!(IrqSetEventfd, fd) == size_of::<linux::vfio_irq_set>());

/// An ioctl whose argument is an integer value.
pub fn ioctl_val(fd: BorrowedFd<'_>, req: u64, arg: u64) -> io::Result<i32> {
    // SAFETY: the vfio ioctls called with a value argument (GET_API_VERSION,
    // CHECK_EXTENSION, SET_IOMMU) read no memory through it.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as libc::c_ulong, arg as libc::c_ulong) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r)
}

/// Marks the vfio argument structs, whose first field is `argsz`.
///
/// # Safety
///
/// The type is `repr(C)`, starts with a `u32` `argsz`, and is the struct
/// (or a kernel-accepted prefix of it) that the ioctls used with it expect.
pub unsafe trait VfioArg: Copy {}
// SAFETY: the next four are the header's structs as bindgen generated
// them (`repr(C)`, `argsz` first, layouts asserted in the bindings crate).
unsafe impl VfioArg for GroupStatus {}
// SAFETY: as above, `struct vfio_device_info`.
unsafe impl VfioArg for DeviceInfo {}
// SAFETY: as above, `struct vfio_region_info`.
unsafe impl VfioArg for RegionInfo {}
// SAFETY: as above, `struct vfio_irq_info`.
unsafe impl VfioArg for IrqInfo {}
// SAFETY: `struct vfio_irq_set` with one `__s32` of data, layout asserted.
unsafe impl VfioArg for IrqSetEventfd {}

/// An ioctl that reads and/or fills `arg`, whose `argsz` is set here.
pub fn ioctl_struct<T: VfioArg>(fd: BorrowedFd<'_>, req: u64, arg: &mut T) -> io::Result<()> {
    let argsz = size_of::<T>() as u32;
    // SAFETY: T starts with a u32 argsz (VfioArg's contract) and `arg` is a
    // live, aligned, exclusive T.
    unsafe { (arg as *mut T).cast::<u32>().write(argsz) };
    // SAFETY: `arg` points to a live T of `argsz` bytes that the kernel may
    // read and write for the duration of the call (VfioArg's contract).
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as libc::c_ulong, arg as *mut T) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `VFIO_GROUP_SET_CONTAINER`: the argument is a pointer to the fd.
pub fn group_set_container(group: BorrowedFd<'_>, container: BorrowedFd<'_>) -> io::Result<()> {
    let fd: i32 = container.as_raw_fd();
    // SAFETY: the kernel reads one i32 through the pointer to a live local.
    let r = unsafe {
        libc::ioctl(
            group.as_raw_fd(),
            VFIO_GROUP_SET_CONTAINER as libc::c_ulong,
            &fd as *const i32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `VFIO_GROUP_GET_DEVICE_FD`: opens the device named `name` (a PCI
/// address such as `0000:00:03.0`).
pub fn group_get_device_fd(group: BorrowedFd<'_>, name: &str) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: the kernel reads a NUL-terminated string from a live CString.
    let r = unsafe {
        libc::ioctl(
            group.as_raw_fd(),
            VFIO_GROUP_GET_DEVICE_FD as libc::c_ulong,
            name.as_ptr(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success the ioctl returned a new descriptor nobody owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Reads `buf.len()` bytes at `off` of the device fd.
pub fn pread_exact(fd: BorrowedFd<'_>, buf: &mut [u8], off: u64) -> io::Result<()> {
    let want = buf.len();
    match rustix::io::pread(fd, buf, off)? {
        n if n == want => Ok(()),
        _ => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
    }
}

/// Writes `buf` at `off` of the device fd.
pub fn pwrite_all(fd: BorrowedFd<'_>, buf: &[u8], off: u64) -> io::Result<()> {
    match rustix::io::pwrite(fd, buf, off)? {
        n if n == buf.len() => Ok(()),
        _ => Err(io::Error::from(io::ErrorKind::WriteZero)),
    }
}

/// A shared read-write mapping of `len` bytes at `off` of `fd`, unmapped on
/// drop. Only its address and length leave this module.
#[derive(Debug)]
pub struct DeviceMapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a plain address range; every access to it goes through
// `RegionView`, whose accesses are valid from any thread.
unsafe impl Send for DeviceMapping {}
// SAFETY: as above; the struct has no interior state.
unsafe impl Sync for DeviceMapping {}

impl DeviceMapping {
    /// Maps `len` bytes of `fd` at `off` (page-aligned, as vfio's region
    /// offsets are).
    pub fn new(fd: BorrowedFd<'_>, off: u64, len: usize) -> io::Result<DeviceMapping> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // SAFETY: a fresh MAP_SHARED mapping chosen by the kernel; nothing
        // else aliases it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                off as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(DeviceMapping { ptr, len })
    }

    /// The mapping's first byte.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// The mapped length.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Drop for DeviceMapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping; the views that kept it alive are gone.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A new non-blocking, close-on-exec eventfd.
pub fn eventfd() -> io::Result<OwnedFd> {
    use rustix::event::EventfdFlags;
    Ok(rustix::event::eventfd(
        0,
        EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
    )?)
}

/// Reads and resets a non-blocking eventfd's counter; 0 if it was zero.
pub fn eventfd_take(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut v = [0u8; 8];
    match rustix::io::read(fd, &mut v) {
        Ok(8) => Ok(u64::from_ne_bytes(v)),
        Ok(_) => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
        Err(rustix::io::Errno::AGAIN) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// Adds 1 to an eventfd's counter.
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    match rustix::io::write(fd, &1u64.to_ne_bytes()) {
        Ok(8) => Ok(()),
        Ok(_) => Err(io::Error::from(io::ErrorKind::WriteZero)),
        // The counter is at its maximum: it is signalled already.
        Err(rustix::io::Errno::AGAIN) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Waits until `fd` is readable or `timeout` passes; true if readable.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut p = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
    // At least 1 ms, as before: a zero timeout would spin its callers.
    let timeout = timeout.max(Duration::from_millis(1));
    let ts = Timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as i64,
        tv_nsec: timeout.subsec_nanos().into(),
    };
    match rustix::event::poll(&mut p, Some(&ts)) {
        Ok(n) => Ok(n > 0 && p[0].revents().contains(PollFlags::IN)),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn ioctl_numbers_match_linux_vfio_h() {
        // _IO(';', 100 + n) from <linux/vfio.h>.
        assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
        assert_eq!(VFIO_SET_IOMMU, 0x3b66);
        assert_eq!(VFIO_GROUP_GET_DEVICE_FD, 0x3b6a);
        assert_eq!(VFIO_DEVICE_SET_IRQS, 0x3b6e);
    }

    #[test]
    fn eventfd_counts_signals_and_resets_on_read() {
        let fd = eventfd().expect("eventfd");
        assert_eq!(eventfd_take(fd.as_fd()).expect("empty read"), 0);
        assert!(!poll_readable(fd.as_fd(), Duration::from_millis(1)).expect("poll"));
        eventfd_signal(fd.as_fd()).expect("signal");
        eventfd_signal(fd.as_fd()).expect("signal");
        assert!(poll_readable(fd.as_fd(), Duration::from_millis(100)).expect("poll"));
        assert_eq!(eventfd_take(fd.as_fd()).expect("read"), 2);
        assert_eq!(eventfd_take(fd.as_fd()).expect("read"), 0);
    }
}
