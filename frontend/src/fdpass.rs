//! Passing file descriptors over unix sockets (`SCM_RIGHTS`): one
//! little-endian i64 per message, with at most one descriptor attached.
//! The ivshmem server protocol is made of such messages, and so is the
//! daemon's hand-over of a local VM's sealed region ([`crate::map`]).
//!
//! The control-message handling is `rustix`'s: received descriptors arrive
//! as `OwnedFd`s, and any left in the receive buffer are closed when it
//! drops, so no descriptor a peer sends can leak.

use rustix::io::Errno;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Room for a control message with a few descriptors (a peer may attach
/// more than the one we keep; they are received and closed).
const CMSG_BYTES: usize = rustix::cmsg_space!(ScmRights(8));

/// Sends one little-endian i64, with `fd` attached by `SCM_RIGHTS` if
/// given, as a single `sendmsg`. A short write is an error: on a stream
/// socket the peer would otherwise see a torn message. `MSG_NOSIGNAL` turns
/// a closed peer into `EPIPE`, not `SIGPIPE`.
pub fn send_i64(sock: &UnixStream, value: i64, fd: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let bytes = value.to_le_bytes();
    let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    loop {
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io::Error::other(
                "control buffer too small for one descriptor",
            ));
        }
        match rustix::net::sendmsg(
            sock,
            &[IoSlice::new(&bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(n) if n == bytes.len() => return Ok(()),
            Ok(_) => return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg")),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
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
/// any. Extra descriptors are closed. Received descriptors are `CLOEXEC`.
/// Honours the socket's read timeout (`WouldBlock`/`TimedOut` errors).
pub fn recv_i64(sock: &UnixStream) -> io::Result<Received> {
    let mut bytes = [0u8; 8];
    let mut got = 0usize;
    let mut fd: Option<OwnedFd> = None;
    let mut space = [MaybeUninit::<u8>::uninit(); CMSG_BYTES];
    while got < bytes.len() {
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r = rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut bytes[got..])],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        );
        let n = match r {
            Ok(m) => m.bytes,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                for received in received {
                    // Keep the first descriptor; drop (close) the others.
                    if fd.is_none() {
                        fd = Some(received);
                    }
                }
            }
        }
        if n == 0 {
            if got == 0 && fd.is_none() {
                return Ok(Received::Closed);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed inside a message",
            ));
        }
        got += n;
    }
    Ok(Received::Message(i64::from_le_bytes(bytes), fd))
}
