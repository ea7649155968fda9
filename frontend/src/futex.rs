//! Cross-process futex wait and wake on words inside a shared mapping.
//!
//! The words live in a `MAP_SHARED` file mapping, so the shared (not
//! `PRIVATE`) futex operations are used: the kernel keys them by page and
//! offset, which two processes mapping the same file share. The calls go
//! through `rustix`, which takes the `&AtomicU32` the region hands out.

use rustix::io::Errno;
use rustix::thread::futex::{self, Flags, Timespec};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

fn timespec(timeout: Duration) -> Timespec {
    Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: timeout.subsec_nanos().into(),
    }
}

/// Sleeps while `*word == expected`, for at most `timeout`. Returns on a
/// wake, a timeout, a signal, or at once if the word already differs.
/// Errors (`EAGAIN`, `ETIMEDOUT`, `EINTR`) all mean "re-check", which every
/// caller does.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let _ = futex::wait(word, Flags::empty(), expected, Some(&timespec(timeout)));
}

/// Why the kernel cannot block on a word at all.
#[derive(Debug, thiserror::Error)]
#[error("FUTEX_WAIT is not usable on this mapping")]
pub struct Unsupported(#[source] pub std::io::Error);

/// As [`wait`], but tells a word the kernel cannot block on (`EFAULT` on a
/// PFN-mapped ivshmem BAR, `ENOSYS` without futexes) from the outcomes that
/// mean "re-check" (woken, `EAGAIN`, `ETIMEDOUT`, `EINTR`).
pub fn try_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Result<(), Unsupported> {
    match futex::wait(word, Flags::empty(), expected, Some(&timespec(timeout))) {
        Ok(()) => Ok(()),
        Err(Errno::AGAIN | Errno::TIMEDOUT | Errno::INTR) => Ok(()),
        Err(e) => Err(Unsupported(e.into())),
    }
}

/// Wakes up to `n` waiters on `word`.
pub fn wake(word: &AtomicU32, n: i32) {
    let _ = futex::wake(word, Flags::empty(), n.max(0) as u32);
}
