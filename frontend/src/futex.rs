//! Cross-process futex wait and wake on words inside a shared mapping.
//!
//! The words live in a `MAP_SHARED` file mapping, so the non-private futex
//! operations are used: the kernel keys them by page and offset, which two
//! processes mapping the same file share.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `*word == expected`, for at most `timeout`. Returns on a
/// wake, a timeout, a signal, or at once if the word already differs.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call;
    // FUTEX_WAIT only reads it; `ts` outlives the call. Errors (EAGAIN,
    // ETIMEDOUT, EINTR) all mean "re-check", which every caller does.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// Why the kernel cannot block on a word at all.
#[derive(Debug, thiserror::Error)]
#[error("FUTEX_WAIT is not usable on this mapping")]
pub struct Unsupported(#[source] pub std::io::Error);

/// As [`wait`], but tells a word the kernel cannot block on (`EFAULT` on a
/// PFN-mapped ivshmem BAR, `ENOSYS` without futexes) from the outcomes that
/// mean "re-check" (woken, `EAGAIN`, `ETIMEDOUT`, `EINTR`).
pub fn try_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Result<(), Unsupported> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: as in `wait`: `word` is a valid, aligned u32 for the call,
    // FUTEX_WAIT only reads it, and `ts` outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::ETIMEDOUT | libc::EINTR) => Ok(()),
        _ => Err(Unsupported(e)),
    }
}

/// Wakes up to `n` waiters on `word`.
pub fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access it.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n) };
}
