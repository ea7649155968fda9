//! This crate's system calls: memfd creation and sealing and eventfds
//! through `rustix` (safe), polling, process spawning and nice values
//! through `libc` in small `unsafe` blocks that only hand the kernel
//! pointers to live, correctly sized local buffers. Passing file
//! descriptors over unix sockets with `SCM_RIGHTS` lives in the guest
//! transport (`fairgpu_frontend::fdpass`), which needs it to receive its
//! region, and is re-exported here. Each function is safe to call.

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use rustix::event::EventfdFlags;
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::io::Errno;

pub use fairgpu_frontend::fdpass::{recv_i64, send_i64, Received};

/// Creates an anonymous memory file (`memfd_create`) with sealing allowed.
pub fn memfd_create(name: &str) -> io::Result<OwnedFd> {
    let name = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(rustix::fs::memfd_create(
        name.as_c_str(),
        MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
    )?)
}

/// Adds `F_SEAL_*` seals to a memfd.
pub fn add_seals(fd: BorrowedFd<'_>, seals: libc::c_int) -> io::Result<()> {
    Ok(rustix::fs::fcntl_add_seals(
        fd,
        SealFlags::from_bits_retain(seals as u32),
    )?)
}

/// The seals a file carries (0 for files that cannot be sealed).
pub fn get_seals(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    match rustix::fs::fcntl_get_seals(fd) {
        Ok(seals) => Ok(seals.bits() as libc::c_int),
        // Files outside tmpfs/hugetlbfs cannot be sealed: EINVAL.
        Err(Errno::INVAL) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// An eventfd: a kernel counter that is readable while non-zero.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new non-blocking, close-on-exec eventfd with counter 0.
    pub fn new() -> io::Result<EventFd> {
        Ok(EventFd(rustix::event::eventfd(
            0,
            EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
        )?))
    }

    /// Wraps a descriptor received from a peer. Nothing checks that it is an
    /// eventfd; reads and writes on anything else simply fail.
    pub fn from_owned(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    /// Adds 1 to the counter, waking whoever polls it. A counter already at
    /// its maximum (the peer never reads) counts as signalled.
    pub fn signal(&self) -> io::Result<()> {
        match rustix::io::write(&self.0, &1u64.to_ne_bytes()) {
            Ok(n) if n == size_of::<u64>() => Ok(()),
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "short eventfd write",
            )),
            Err(Errno::AGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads and clears the counter: `Some(n)` if it was signalled `n` times,
    /// `None` if it was 0.
    pub fn take(&self) -> io::Result<Option<u64>> {
        let mut v = [0u8; size_of::<u64>()];
        match rustix::io::read(&self.0, &mut v) {
            Ok(n) if n == v.len() => Ok(Some(u64::from_ne_bytes(v))),
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "short eventfd read",
            )),
            Err(Errno::AGAIN) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Waits until one of `fds` is readable (or hung up) or `timeout_ms`
/// passes; returns, per descriptor, whether it needs attention.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> io::Result<Vec<bool>> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut pfds: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::IN))
        .collect();
    // A negative timeout waits without limit, as poll(2)'s -1 does.
    let timeout = (timeout_ms >= 0).then(|| Timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    });
    match rustix::event::poll(&mut pfds, timeout.as_ref()) {
        Ok(_) => Ok(pfds.iter().map(|p| !p.revents().is_empty()).collect()),
        Err(rustix::io::Errno::INTR) => Ok(vec![false; fds.len()]),
        Err(e) => Err(e.into()),
    }
}

/// Spawns `cmd` with the descriptors `fds` kept open across `exec` at
/// their numbers (their close-on-exec flag is cleared in the child only,
/// between fork and exec; the parent's descriptors are unchanged).
pub fn spawn_keeping(
    cmd: &mut std::process::Command,
    fds: &[BorrowedFd<'_>],
) -> io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    let keep: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let hook = move || {
        for &fd in &keep {
            // SAFETY: fcntl(F_SETFD) takes integers, touches no memory and
            // is async-signal-safe, as code between fork and exec must be.
            if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: `hook` runs in the forked child before exec; it only calls
    // fcntl and reads `keep` without allocating. The descriptors are open:
    // `fds` borrows them for the whole of this function, which spawns
    // before returning.
    unsafe { cmd.pre_exec(hook) };
    cmd.spawn()
}

/// Takes ownership of descriptor `fd`, inherited from the parent, after
/// checking that it is open; marks it close-on-exec again.
///
/// # Safety
///
/// Nothing else in this process may own or close `fd`: the caller learnt
/// its number from its parent (an argument) and takes it once.
pub unsafe fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: F_GETFD reads descriptor flags; it fails with EBADF on a
    // number that is not open and touches no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above; F_SETFD sets FD_CLOEXEC on the open descriptor.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is open (checked) and, by the caller's contract, owned
    // by nothing else in this process.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `tid` as the id `getpriority`/`setpriority` take: 0 means the caller,
/// a negative id names nobody.
fn priority_target(tid: i32) -> io::Result<Option<rustix::process::Pid>> {
    if tid < 0 {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(rustix::process::Pid::from_raw(tid))
}

/// The nice value of thread (or process) `tid`.
pub fn get_nice(tid: i32) -> io::Result<i32> {
    Ok(rustix::process::getpriority_process(priority_target(tid)?)?)
}

/// Sets the nice value of thread (or process) `tid` (on Linux,
/// `PRIO_PROCESS` with a thread id applies to that thread only). Lowering
/// it below what `RLIMIT_NICE` allows needs `CAP_SYS_NICE`: `EACCES`.
pub fn set_nice(tid: i32, nice: i32) -> io::Result<()> {
    Ok(rustix::process::setpriority_process(
        priority_target(tid)?,
        nice,
    )?)
}

/// This thread's kernel thread id.
pub fn gettid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn eventfd_counts_signals() {
        let e = EventFd::new().unwrap();
        assert_eq!(e.take().unwrap(), None);
        e.signal().unwrap();
        e.signal().unwrap();
        assert_eq!(e.take().unwrap(), Some(2));
        assert_eq!(e.take().unwrap(), None);
    }

    #[test]
    fn messages_carry_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        let e = EventFd::new().unwrap();
        send_i64(&a, -1, Some(e.as_fd())).unwrap();
        send_i64(&a, 7, None).unwrap();
        match recv_i64(&b).unwrap() {
            Received::Message(-1, Some(fd)) => {
                // The received descriptor is the same eventfd.
                let got = EventFd::from_owned(fd);
                e.signal().unwrap();
                assert_eq!(got.take().unwrap(), Some(1));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(recv_i64(&b).unwrap(), Received::Message(7, None)));
        drop(a);
        assert!(matches!(recv_i64(&b).unwrap(), Received::Closed));
    }

    #[test]
    fn spawned_children_keep_only_the_named_descriptors() {
        let kept = EventFd::new().unwrap();
        let other = EventFd::new().unwrap();
        let has = |fd: &EventFd, keep: &[BorrowedFd<'_>]| {
            let n = fd.as_fd().as_raw_fd();
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.args(["-c", &format!("[ -e /proc/self/fd/{n} ]")]);
            spawn_keeping(&mut cmd, keep)
                .unwrap()
                .wait()
                .unwrap()
                .success()
        };
        assert!(has(&kept, &[kept.as_fd()]));
        assert!(!has(&other, &[kept.as_fd()]), "close-on-exec still applies");
        // The parent's descriptor keeps its close-on-exec flag.
        // SAFETY: F_GETFD reads flags of a descriptor we own.
        let flags = unsafe { libc::fcntl(kept.as_fd().as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }

    #[test]
    fn inherited_descriptors_are_checked_and_taken() {
        use std::os::fd::IntoRawFd;
        let e = EventFd::new().unwrap();
        let raw = e.0.into_raw_fd();
        // SAFETY: `raw` was just released by its owner above.
        let owned = unsafe { take_inherited(raw) }.unwrap();
        let e = EventFd::from_owned(owned);
        e.signal().unwrap();
        assert_eq!(e.take().unwrap(), Some(1));
        // SAFETY: -1 and a number far above any open descriptor own nothing.
        assert!(unsafe { take_inherited(-1) }.is_err());
        // SAFETY: as above.
        assert!(unsafe { take_inherited(1 << 20) }.is_err());
    }

    #[test]
    fn a_thread_can_lower_its_own_priority() {
        std::thread::spawn(|| {
            let me = gettid();
            let before = get_nice(me).unwrap();
            let want = (before + 1).min(19);
            set_nice(me, want).unwrap();
            assert_eq!(get_nice(me).unwrap(), want);
            assert!(get_nice(-5).is_err());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn memfd_seals() {
        let fd = memfd_create("fairgpu-test").unwrap();
        let f = std::fs::File::from(fd);
        f.set_len(8192).unwrap();
        add_seals(f.as_fd(), libc::F_SEAL_SHRINK | libc::F_SEAL_GROW).unwrap();
        assert!(f.set_len(4096).is_err(), "shrinking a sealed memfd");
        assert!(f.set_len(16384).is_err(), "growing a sealed memfd");
        let seals = get_seals(f.as_fd()).unwrap();
        assert_eq!(seals & libc::F_SEAL_SHRINK, libc::F_SEAL_SHRINK);
    }
}
