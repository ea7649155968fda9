//! The region socket of a local VM: a unix socket at the VM's region path
//! that hands each process connecting to it the region's memory, a memfd
//! sealed against shrinking and growing.
//!
//! Why not a file: mapping a file read-write needs a descriptor opened for
//! writing, and whoever holds one can `ftruncate` the file; every other
//! mapping of it (the worker's, the daemon's) then dies of SIGBUS on its
//! next access past the new end. A sealed memfd can be mapped and written
//! by every holder, but `ftruncate` on it fails with `EPERM` for all of
//! them, the daemon included.
//!
//! Protocol: the daemon accepts a connection, sends one message (the
//! little-endian i64 [`REGION_HELLO`] with the memfd attached by
//! `SCM_RIGHTS`) and closes it; the guest side is
//! [`fairgpu_frontend::map::receive_region`], which `Mapping::open` uses
//! when the region path is a socket. Who may connect is the socket file's
//! ownership and mode: the VM's [`Access`], set before the socket listens.
//!
//! Invariants: one thread per socket does the accepting, never the
//! daemon's main loop; a connection costs it one non-blocking send (an
//! 8-byte message into an empty socket buffer), so no peer can stall it;
//! the socket file is removed when the [`RegionSocket`] is dropped.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fairgpu_frontend::fdpass::send_i64;
pub use fairgpu_frontend::map::REGION_HELLO;

use fairgpu_config::perms::Access;

/// How long the accepting thread backs off after a failed `accept` (out of
/// descriptors), so that it never spins.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
/// The send of the hello: it fits an empty buffer, so this only bounds a
/// kernel that is out of memory.
const SEND_TIMEOUT: Duration = Duration::from_millis(100);

/// A bound region socket and the thread serving it.
#[derive(Debug)]
pub struct RegionSocket {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RegionSocket {
    /// Binds a unix socket at `path` (replacing a stale file or socket
    /// there) with `access`, and starts handing `memory` to every process
    /// that connects.
    pub fn bind(
        path: &Path,
        memory: File,
        name: &str,
        access: &Access,
    ) -> io::Result<RegionSocket> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener =
            fairgpu_config::perms::bind_listener(path, access).map_err(io::Error::other)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("region-{name}"))
                .spawn(move || serve(&listener, &memory, &stop))?
        };
        Ok(RegionSocket {
            path: path.to_owned(),
            stop,
            thread: Some(thread),
        })
    }

    /// Where the socket is bound.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Accepts connections until `stop`, answering each with the hello and
/// `memory`.
fn serve(listener: &UnixListener, memory: &File, stop: &AtomicBool) {
    for conn in listener.incoming() {
        // Acquire: pairs with the Release store in Drop, made before the
        // connection that wakes this accept.
        if stop.load(Ordering::Acquire) {
            return;
        }
        match conn {
            Ok(sock) => hand_over(&sock, memory),
            Err(e) => {
                tracing::debug!(error = %e, "region socket: accept failed");
                std::thread::sleep(ACCEPT_BACKOFF);
            }
        }
    }
}

/// Sends the hello and the memory on one accepted connection. A peer that
/// hung up already costs nothing but this failed send.
fn hand_over(sock: &UnixStream, memory: &File) {
    let sent = sock
        .set_write_timeout(Some(SEND_TIMEOUT))
        .and_then(|()| send_i64(sock, REGION_HELLO, Some(memory.as_fd())));
    if let Err(e) = sent {
        tracing::debug!(error = %e, "region socket: a peer left before its region was sent");
    }
}

impl Drop for RegionSocket {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load in `serve`.
        self.stop.store(true, Ordering::Release);
        // Wakes the blocked accept; if the connect fails, the socket is
        // already unusable and the thread is left to end with the process.
        let woken = UnixStream::connect(&self.path).is_ok();
        if let Some(t) = self.thread.take() {
            if woken {
                let _ = t.join();
            }
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("fairgpu-rs-{}-{name}", std::process::id()))
    }

    #[test]
    fn every_connection_receives_the_same_sealed_memory() {
        let path = temp("share");
        let memory = fairgpu_qemu::sealed_memfd("t", 1 << 16).unwrap();
        let mine = memory.try_clone().unwrap();
        let socket = RegionSocket::bind(&path, memory, "t", &Access::default()).unwrap();
        let a = fairgpu_frontend::map::receive_region(&path).unwrap();
        let b = fairgpu_frontend::map::receive_region(&path).unwrap();
        a.write_all_at(b"hello", 100).unwrap();
        let mut got = [0u8; 5];
        b.read_exact_at(&mut got, 100).unwrap();
        assert_eq!(&got, b"hello");
        assert_eq!(b.metadata().unwrap().len(), 1 << 16);
        // Nobody may resize it: not a guest, not the daemon.
        for f in [&a, &b, &mine] {
            let e = f.set_len(4096).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM), "fd {}", f.as_raw_fd());
        }
        drop(socket);
        assert!(!path.exists(), "the socket file is removed");
        assert!(fairgpu_frontend::map::receive_region(&path).is_err());
    }

    #[test]
    fn a_socket_that_sends_something_else_is_refused() {
        let path = temp("liar");
        let listener = UnixListener::bind(&path).unwrap();
        let t = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            send_i64(&s, 42, None).unwrap();
        });
        let e = fairgpu_frontend::map::receive_region(&path).unwrap_err();
        assert!(e.to_string().contains("not a fairgpu region socket"), "{e}");
        t.join().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}
