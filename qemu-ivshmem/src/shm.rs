//! The shared memory an ivshmem server hands to QEMU: a sealed memfd, or an
//! existing file (a region in /dev/shm).
//!
//! QEMU maps the whole file as the device's BAR2, and a PCI BAR's size must
//! be a power of two, so every size here is one ([`bar_size`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use crate::sys;

/// Smallest BAR2 this crate creates: one page.
pub const MIN_SIZE: u64 = 4096;
/// Largest BAR2 this crate creates or accepts (64 GiB, the region limit).
pub const MAX_SIZE: u64 = 64 << 30;

/// Why shared memory could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// The size is not a power of two in range.
    #[error("shared memory size {size} is not a power of two in {MIN_SIZE}..={MAX_SIZE}")]
    BadSize {
        /// The size asked for or found.
        size: u64,
    },
    /// A system call failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ShmError {
    let what = what.into();
    move |source| ShmError::Io { what, source }
}

/// The smallest BAR size (a power of two, at least one page) that holds
/// `region_size` bytes.
pub fn bar_size(region_size: u64) -> u64 {
    region_size.max(MIN_SIZE).next_power_of_two()
}

/// Grows the file at `path` to [`bar_size`] of its length, so QEMU can map
/// it whole as BAR2 (`memory-backend-file` refuses a `size` larger than the
/// file). Whoever maps the file keeps seeing the same bytes; the new tail is
/// zero. Returns the new size.
pub fn grow_to_bar_size(path: &Path) -> Result<u64, ShmError> {
    let what = || format!("growing {} to a power of two", path.display());
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io_err(what()))?;
    let len = f.metadata().map_err(io_err(what()))?.len();
    let want = bar_size(len);
    if want > MAX_SIZE {
        return Err(ShmError::BadSize { size: want });
    }
    if want != len {
        f.set_len(want).map_err(io_err(what()))?;
    }
    Ok(want)
}

/// A new memfd of `size` bytes, zero-filled, sealed against shrinking and
/// growing (and against changing its seals): whoever it is passed to can
/// map and write it, but never truncate it under another's mapping, which
/// would turn that mapping's accesses into SIGBUS.
pub fn sealed_memfd(name: &str, size: u64) -> Result<File, ShmError> {
    let fd = sys::memfd_create(name).map_err(io_err(format!("memfd_create({name})")))?;
    let file = File::from(fd);
    file.set_len(size)
        .map_err(io_err(format!("sizing memfd {name} to {size} bytes")))?;
    sys::add_seals(
        file.as_fd(),
        libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
    )
    .map_err(io_err(format!("sealing memfd {name}")))?;
    Ok(file)
}

/// Shared memory for an ivshmem server: a file descriptor and its size.
#[derive(Debug)]
pub struct SharedMemory {
    file: File,
    size: u64,
    origin: Option<PathBuf>,
}

impl SharedMemory {
    /// A new memfd of `size` bytes (a power of two), zero-filled, sealed
    /// against shrinking and growing so that no peer can truncate it under
    /// another's mapping (which would turn accesses into SIGBUS).
    pub fn memfd(name: &str, size: u64) -> Result<SharedMemory, ShmError> {
        check_size(size)?;
        Ok(SharedMemory {
            file: sealed_memfd(name, size)?,
            size,
            origin: None,
        })
    }

    /// An existing file, e.g. a region a host created in /dev/shm. Its size
    /// must already be a power of two ([`grow_to_bar_size`]). Regular files
    /// cannot be sealed: whoever can write the file can truncate it.
    pub fn open(path: &Path) -> Result<SharedMemory, ShmError> {
        let what = || format!("opening {}", path.display());
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_err(what()))?;
        let size = file.metadata().map_err(io_err(what()))?.len();
        check_size(size)?;
        Ok(SharedMemory {
            file,
            size,
            origin: Some(path.to_owned()),
        })
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Whether the size is sealed (a memfd from [`SharedMemory::memfd`]).
    pub fn is_sealed(&self) -> bool {
        sys::get_seals(self.file.as_fd())
            .is_ok_and(|s| s & libc::F_SEAL_SHRINK == libc::F_SEAL_SHRINK)
    }

    /// The file this came from, if it was opened by path.
    pub fn origin(&self) -> Option<&Path> {
        self.origin.as_deref()
    }

    /// A path through which this process can open (and map) the memory:
    /// `/proc/self/fd/N`, valid while `self` lives.
    pub fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
    }
}

impl AsFd for SharedMemory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

fn check_size(size: u64) -> Result<(), ShmError> {
    if !(MIN_SIZE..=MAX_SIZE).contains(&size) || !size.is_power_of_two() {
        return Err(ShmError::BadSize { size });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_sizes_are_powers_of_two() {
        assert_eq!(bar_size(0), 4096);
        assert_eq!(bar_size(4096), 4096);
        assert_eq!(bar_size(4097), 8192);
        assert_eq!(bar_size(0x1000 + 2 * 0x41_1000), 16 << 20);
    }

    #[test]
    fn memfd_is_sized_and_sealed() {
        let m = SharedMemory::memfd("fairgpu-test", 1 << 20).unwrap();
        assert_eq!(m.size(), 1 << 20);
        assert!(m.is_sealed());
        let f = File::open(m.proc_path()).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 1 << 20);
        assert!(matches!(
            SharedMemory::memfd("x", 3 << 20),
            Err(ShmError::BadSize { .. })
        ));
    }

    #[test]
    fn files_grow_to_a_bar_size() {
        let path = std::env::temp_dir().join(format!("fairgpu-shm-test-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 5000]).unwrap();
        assert!(matches!(
            SharedMemory::open(&path),
            Err(ShmError::BadSize { size: 5000 })
        ));
        assert_eq!(grow_to_bar_size(&path).unwrap(), 8192);
        let m = SharedMemory::open(&path).unwrap();
        assert_eq!(m.size(), 8192);
        assert!(!m.is_sealed());
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes[..5000].iter().all(|&b| b == 7) && bytes[5000..].iter().all(|&b| b == 0));
        std::fs::remove_file(&path).unwrap();
    }
}
