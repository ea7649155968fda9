//! Passing file descriptors over unix sockets (`SCM_RIGHTS`): one
//! little-endian i64 per message, with at most one descriptor attached.
//! The ivshmem server protocol is made of such messages, and so is the
//! daemon's hand-over of a local VM's sealed region ([`crate::map`]).
//!
//! Each function is safe to call; the unsafe blocks inside only hand the
//! kernel pointers to live, correctly sized local buffers, and take
//! ownership of the descriptors the kernel installed for this process.

use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// Bytes of control buffer one descriptor's control message takes.
// SAFETY: CMSG_SPACE is pure arithmetic on its argument.
const FD_SPACE: usize = unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize;
/// The `cmsg_len` of one descriptor's control message.
// SAFETY: CMSG_LEN is pure arithmetic on its argument.
const FD_LEN: usize = unsafe { libc::CMSG_LEN(size_of::<RawFd>() as u32) } as usize;
/// The `cmsg_len` of a control message with no data.
// SAFETY: CMSG_LEN is pure arithmetic on its argument.
const EMPTY_LEN: usize = unsafe { libc::CMSG_LEN(0) } as usize;
const _: () = assert!(FD_SPACE <= size_of::<CmsgBuf>());

/// Room for a control message with a few descriptors.
#[repr(C)]
union CmsgBuf {
    _align: libc::cmsghdr,
    bytes: [u8; 64],
}

/// Sends one little-endian i64, with `fd` attached by `SCM_RIGHTS` if
/// given, as a single `sendmsg`. A short write is an error: on a stream
/// socket the peer would otherwise see a torn message.
pub fn send_i64(sock: &UnixStream, value: i64, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let bytes = value.to_le_bytes();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr and control buffer are valid values.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let mut cbuf = CmsgBuf { bytes: [0; 64] };
    if let Some(fd) = fd {
        msg.msg_control = (&mut cbuf as *mut CmsgBuf).cast();
        msg.msg_controllen = FD_SPACE as _;
        // SAFETY: msg_control points at `cbuf`, aligned for cmsghdr and at
        // least FD_SPACE bytes long, so the first header is non-null and
        // lies inside it.
        let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        let header = libc::cmsghdr {
            cmsg_len: FD_LEN as _,
            cmsg_level: libc::SOL_SOCKET,
            cmsg_type: libc::SCM_RIGHTS,
        };
        // SAFETY: `cmsg` points at the start of `cbuf`, valid for a header.
        unsafe { cmsg.write(header) };
        // SAFETY: the data of the header at `cmsg` starts inside `cbuf`.
        let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<RawFd>();
        // SAFETY: FD_LEN bytes from `cmsg` lie inside `cbuf`, so the int
        // after the header does; CMSG_DATA need not be aligned for it.
        unsafe { data.write_unaligned(fd.as_raw_fd()) };
    }
    loop {
        // SAFETY: `msg` points at `iov`, `bytes` and `cbuf`, all alive for
        // the call; MSG_NOSIGNAL turns a closed peer into EPIPE, not SIGPIPE.
        let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if r == bytes.len() as isize {
            return Ok(());
        }
        if r >= 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// What [`recv_i64`] read.
#[derive(Debug)]
pub enum Received {
    /// One message, with the descriptor that came with it, if any.
    Message(i64, Option<OwnedFd>),
    /// The peer closed the connection at a message boundary.
    Closed,
}

/// Receives one little-endian i64 and the descriptor attached to it, if
/// any. Extra descriptors in the same control message are closed. Honours
/// the socket's read timeout (`WouldBlock`/`TimedOut` errors).
pub fn recv_i64(sock: &UnixStream) -> io::Result<Received> {
    let mut bytes = [0u8; 8];
    let mut got = 0usize;
    let mut fd: Option<OwnedFd> = None;
    while got < bytes.len() {
        let mut iov = libc::iovec {
            iov_base: bytes[got..].as_mut_ptr().cast(),
            iov_len: bytes.len() - got,
        };
        let mut cbuf = CmsgBuf { bytes: [0; 64] };
        // SAFETY: an all-zero msghdr is a valid value.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = (&mut cbuf as *mut CmsgBuf).cast();
        msg.msg_controllen = size_of::<CmsgBuf>() as _;
        // SAFETY: `msg` points at `iov` (inside `bytes`) and `cbuf`, alive
        // for the call; MSG_CMSG_CLOEXEC marks received descriptors CLOEXEC.
        let r = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for received in take_fds(&msg) {
            // Keep the first descriptor of the message; drop (close) others.
            if fd.is_none() {
                fd = Some(received);
            }
        }
        if r == 0 {
            if got == 0 && fd.is_none() {
                return Ok(Received::Closed);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside a message",
            ));
        }
        got += r as usize;
    }
    Ok(Received::Message(i64::from_le_bytes(bytes), fd))
}

/// Takes ownership of every descriptor in `msg`'s `SCM_RIGHTS` messages.
fn take_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut out = Vec::new();
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR/NXTHDR walk only
    // within msg_control..msg_control+msg_controllen, which the kernel
    // wrote, and return null at its end.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: `cmsg` is a non-null header inside the control buffer.
        let header = unsafe { cmsg.read_unaligned() };
        let (level, kind, len) = (
            header.cmsg_level,
            header.cmsg_type,
            header.cmsg_len as usize,
        );
        if level == libc::SOL_SOCKET && kind == libc::SCM_RIGHTS {
            let n = len.saturating_sub(EMPTY_LEN) / size_of::<RawFd>();
            // SAFETY: the data of the header at `cmsg` starts inside the
            // control buffer.
            let data = unsafe { libc::CMSG_DATA(cmsg) }.cast::<RawFd>();
            for i in 0..n {
                // SAFETY: the kernel wrote `n` descriptors after the header,
                // inside the control buffer; they may be unaligned.
                let raw = unsafe { data.wrapping_add(i).read_unaligned() };
                if raw >= 0 {
                    // SAFETY: SCM_RIGHTS installed `raw` in this process for
                    // us; nothing else owns it.
                    out.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
        // SAFETY: as for CMSG_FIRSTHDR; returns null past the end.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    out
}
