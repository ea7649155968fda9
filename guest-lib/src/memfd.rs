//! Small memory files that stand for shareable handles: what a process
//! passes to another of its VM (over a Unix socket, or by `fork`) as a
//! POSIX file descriptor, holding the host's token of what it names.

use std::ffi::CStr;

/// A new memfd named `name` holding `bytes` (its descriptor), or `None`.
pub fn with_bytes(name: &CStr, bytes: &[u8]) -> Option<i32> {
    // Not close-on-exec: a program may hand the number to a child it
    // executes, as it may with the driver's descriptors.
    // SAFETY: a NUL-terminated name; memfd_create returns a new
    // descriptor or -1.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is the descriptor just made; `bytes` is readable for
    // its length.
    let n = unsafe { libc::pwrite(fd, bytes.as_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // SAFETY: closing the descriptor made above.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

/// Fills `buf` from the start of descriptor `fd` (any number the caller
/// gave: a bad one, or a file too short, gives `false`).
pub fn read_at(fd: i32, buf: &mut [u8]) -> bool {
    // SAFETY: reads at most `buf.len()` bytes into `buf`; a descriptor
    // that is not open fails the read.
    let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
    n == buf.len() as isize
}
