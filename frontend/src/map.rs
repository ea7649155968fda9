//! Mapping a region into this process: a shm file (local mode), an ivshmem
//! BAR2 through sysfs (in a VM), or a new file the host creates.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use fairgpu_protocol::region::RegionView;

/// A `MAP_SHARED` mapping of a whole file, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    path: PathBuf,
}

// SAFETY: the mapping is a plain address range; every access to it goes
// through `RegionView`, whose accesses are valid from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself has no interior state.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps an existing file (or sysfs `resource2`) read-write, whole. If
    /// `path` is a unix socket, it is a local VM's region socket: the
    /// daemon answers a connection with the region's sealed memfd
    /// ([`receive_region`]), which is mapped instead.
    pub fn open(path: &Path) -> io::Result<Arc<Mapping>> {
        use std::os::unix::fs::FileTypeExt;
        let file = if std::fs::metadata(path)?.file_type().is_socket() {
            receive_region(path)?
        } else {
            OpenOptions::new().read(true).write(true).open(path)?
        };
        let len = file.metadata()?.len();
        Self::map(&file, len, path)
    }

    /// Creates `path` (replacing a stale one) with `len` zero bytes and maps it.
    /// The file is readable and writable by its owner only; a caller that
    /// shares it (a region file) widens the mode afterwards.
    pub fn create(path: &Path, len: usize) -> io::Result<Arc<Mapping>> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        file.set_len(len as u64)?;
        Self::map(&file, len as u64, path)
    }

    fn map(file: &File, len: u64, path: &Path) -> io::Result<Arc<Mapping>> {
        if len == 0 || len > fairgpu_protocol::limits::MAX_REGION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "size {len} outside 1..={}",
                    fairgpu_protocol::limits::MAX_REGION
                ),
            ));
        }
        let len = len as usize;
        // SAFETY: a fresh MAP_SHARED mapping of an open file descriptor; the
        // kernel picks the (page-aligned) address; nothing else aliases it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Arc::new(Mapping {
            ptr,
            len,
            path: path.to_owned(),
        }))
    }

    /// The mapped length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never true for a successful map).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file this maps.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A bounds-checked view that keeps this mapping alive.
    pub fn view(self: &Arc<Self>) -> RegionView {
        // SAFETY: ptr..ptr+len is our page-aligned read-write mapping, kept
        // alive by the Arc passed as keepalive; this crate never forms
        // references to its bytes.
        unsafe { RegionView::new(self.ptr, self.len, self.clone()) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping and the last view holding it is gone.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The first message on a region socket: "fgregion" as a little-endian
/// i64, with the region's memfd attached.
pub const REGION_HELLO: i64 = i64::from_le_bytes(*b"fgregion");
/// How long [`receive_region`] waits for the daemon's answer.
const HANDOVER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Connects to the region socket at `path` and receives the region's
/// memory: a memfd sealed against shrinking and growing, so that no
/// process holding it (this one included) can truncate it under another's
/// mapping. Anything else the socket sends is refused.
pub fn receive_region(path: &Path) -> io::Result<File> {
    use crate::fdpass::{recv_i64, Received};
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let sock = std::os::unix::net::UnixStream::connect(path)?;
    sock.set_read_timeout(Some(HANDOVER_TIMEOUT))?;
    let fd = match recv_i64(&sock)? {
        Received::Message(REGION_HELLO, Some(fd)) => fd,
        Received::Message(REGION_HELLO, None) => {
            return Err(bad(format!(
                "{}: no region came with the hello",
                path.display()
            )))
        }
        Received::Message(..) | Received::Closed => {
            return Err(bad(format!(
                "{} is not a fairgpu region socket",
                path.display()
            )))
        }
    };
    use rustix::fs::SealFlags;
    let want = SealFlags::SHRINK | SealFlags::GROW;
    let sealed = rustix::fs::fcntl_get_seals(&fd).is_ok_and(|seals| seals.contains(want));
    if !sealed {
        return Err(bad(format!(
            "{}: the region passed is not sealed against resizing",
            path.display()
        )));
    }
    Ok(File::from(fd))
}

/// sysfs paths of the BAR2 (`resource2`) of every ivshmem PCI device
/// (vendor 0x1af4, device 0x1110), in directory order.
pub fn ivshmem_bars(sysfs_pci: &Path) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(sysfs_pci) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = dir
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|d| {
            let id = |f: &str| std::fs::read_to_string(d.join(f)).map(|s| s.trim().to_lowercase());
            id("vendor").is_ok_and(|v| v == "0x1af4") && id("device").is_ok_and(|v| v == "0x1110")
        })
        .map(|d| d.join("resource2"))
        .filter(|p| p.exists())
        .collect();
    out.sort();
    out
}

/// The register BAR (`resource0`) of the ivshmem device whose BAR2 is
/// `bar2`, if that device is an `ivshmem-doorbell` (it has an MSI-X BAR,
/// `resource1`; `ivshmem-plain` has none and ignores Doorbell writes).
pub fn ivshmem_doorbell_registers(bar2: &Path) -> Option<PathBuf> {
    if bar2.file_name()? != "resource2" {
        return None;
    }
    let dir = bar2.parent()?;
    let regs = dir.join("resource0");
    (regs.exists() && dir.join("resource1").exists()).then_some(regs)
}
