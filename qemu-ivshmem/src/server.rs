//! An ivshmem server: QEMU's `ivshmem-doorbell` device connects to it over
//! a unix stream socket and receives the shared memory and the eventfds of
//! every peer (QEMU `docs/specs/ivshmem-spec.rst`, protocol version 0).
//!
//! Every message is a little-endian i64, optionally with one descriptor
//! attached by `SCM_RIGHTS`. To a new client the server sends:
//!
//! 1. `0`, the protocol version, without a descriptor;
//! 2. the client's peer id, without a descriptor;
//! 3. `-1` with the shared memory;
//! 4. for every existing peer, then for the client itself, that peer's id
//!    once per vector, each with the eventfd of that (peer, vector).
//!
//! Existing clients are told of the new peer the same way (its id once per
//! vector, with its eventfds) and of a departed peer by its id without a
//! descriptor.
//!
//! The host is a peer too: [`HOST_PEER_ID`], present before any client. A
//! guest that writes `(HOST_PEER_ID << 16) | vector` to its device's
//! Doorbell register (BAR0 offset 12) makes the host's eventfd for that
//! vector readable: [`Event::Doorbell`]. The host interrupts a guest by
//! signalling that guest's eventfd ([`Interrupter`]); QEMU turns it into the
//! guest's MSI-X vector.
//!
//! Invariants: the server owns every eventfd it hands out (clients get
//! duplicates); at most `max_peers` clients and `vectors` vectors, so at
//! most `(max_peers + 1) * vectors` eventfds; a client that sends anything,
//! stops reading (a send blocks longer than `send_timeout`) or hangs up is
//! dropped and the others are told it left; no client can fail the server.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::shm::SharedMemory;
use crate::sys::{self, EventFd};

/// The ivshmem protocol version this server speaks.
pub const PROTOCOL_VERSION: i64 = 0;
/// The host's own peer id: guests ring `(HOST_PEER_ID << 16) | vector`.
pub const HOST_PEER_ID: u16 = 0;
/// Most vectors a server accepts (QEMU's `vectors=` of the device).
pub const MAX_VECTORS: u16 = 64;
/// Most clients a server accepts.
pub const MAX_PEERS: u16 = 64;
/// Most eventfds a server forwards to its guests ([`IvshmemServer::forward`]).
pub const MAX_FORWARDS: usize = 16;
/// How long [`IvshmemServer::run`] sleeps in `poll` before re-checking its
/// shutdown flag.
const RUN_SLICE: Duration = Duration::from_millis(100);

/// How a server is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The VM (or region) name, for log lines.
    pub name: String,
    /// Interrupt vectors per peer: the device's `vectors=`, 1..=[`MAX_VECTORS`].
    pub vectors: u16,
    /// Clients served at once, 1..=[`MAX_PEERS`]. A region belongs to one
    /// VM, so one is the default; a restarted QEMU reconnects after the old
    /// connection's hangup is seen.
    pub max_peers: u16,
    /// How long a send to a client may block before the client is dropped.
    pub send_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            name: "ivshmem".into(),
            vectors: 1,
            max_peers: 1,
            send_timeout: Duration::from_secs(1),
        }
    }
}

/// Why the server could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A configuration value is out of range.
    #[error("{field} = {value} is outside 1..={max}")]
    Config {
        /// The field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// Its largest allowed value.
        max: u64,
    },
    /// Another server is listening on the socket path.
    #[error("{0} is in use by a running server")]
    InUse(PathBuf),
    /// More than [`MAX_FORWARDS`] forwarded eventfds.
    #[error("more than {MAX_FORWARDS} forwarded eventfds")]
    TooManyForwards,
    /// A path exists that is not a socket.
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
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

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServerError {
    let what = what.into();
    move |source| ServerError::Io { what, source }
}

/// Why a guest could not be interrupted.
#[derive(Debug, thiserror::Error)]
pub enum InterruptError {
    /// No such peer is connected.
    #[error("no peer {0} is connected")]
    NoPeer(u16),
    /// The vector is out of range.
    #[error("vector {vector} outside 0..{vectors}")]
    NoVector {
        /// The vector asked for.
        vector: u16,
        /// Vectors per peer.
        vectors: u16,
    },
    /// Writing the eventfd failed.
    #[error("signalling peer {peer} vector {vector}")]
    Io {
        /// The peer.
        peer: u16,
        /// The vector.
        vector: u16,
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// Something that happened while serving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A client connected and received its setup.
    Connected {
        /// Its peer id.
        peer: u16,
    },
    /// A client was dropped.
    Disconnected {
        /// Its peer id.
        peer: u16,
        /// Why.
        reason: String,
    },
    /// A connection was refused before it became a peer.
    Refused {
        /// Why.
        reason: String,
    },
    /// Guests rang the host's doorbell for `vector`, `count` times since
    /// the last report.
    Doorbell {
        /// The vector.
        vector: u16,
        /// How many rings the eventfd counted.
        count: u64,
    },
    /// A forwarded eventfd ([`IvshmemServer::forward`]) was signalled and
    /// `vector` was raised in every connected guest.
    Forwarded {
        /// The vector raised.
        vector: u16,
        /// How many signals the eventfd counted (raised once for all).
        count: u64,
        /// How many guests were interrupted.
        peers: usize,
    },
}

type PeerTable = BTreeMap<u16, Vec<Arc<EventFd>>>;

/// Signals guests' eventfds: the host → guest interrupt. Cheap to clone
/// and usable from any thread while the server runs.
#[derive(Debug, Clone)]
pub struct Interrupter {
    peers: Arc<Mutex<PeerTable>>,
    vectors: u16,
}

impl Interrupter {
    /// Raises `vector` in peer `peer`.
    pub fn interrupt(&self, peer: u16, vector: u16) -> Result<(), InterruptError> {
        if vector >= self.vectors {
            return Err(InterruptError::NoVector {
                vector,
                vectors: self.vectors,
            });
        }
        let fd = {
            let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            let fds = peers.get(&peer).ok_or(InterruptError::NoPeer(peer))?;
            fds[vector as usize].clone()
        };
        fd.signal().map_err(|source| InterruptError::Io {
            peer,
            vector,
            source,
        })
    }

    /// Raises `vector` in every connected guest; returns how many were
    /// signalled.
    pub fn interrupt_all(&self, vector: u16) -> usize {
        let ids: Vec<u16> = {
            let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
            peers.keys().copied().collect()
        };
        ids.into_iter()
            .filter(|&p| self.interrupt(p, vector).is_ok())
            .count()
    }

    /// The connected guests' peer ids.
    pub fn peers(&self) -> Vec<u16> {
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        peers.keys().copied().collect()
    }
}

/// One connected client.
#[derive(Debug)]
struct Peer {
    stream: UnixStream,
    vectors: Vec<Arc<EventFd>>,
}

/// The server: a listening socket, the shared memory, the host peer's
/// eventfds and the connected clients. Single-threaded: drive it with
/// [`IvshmemServer::poll`] or [`IvshmemServer::run`].
#[derive(Debug)]
pub struct IvshmemServer {
    listener: UnixListener,
    path: PathBuf,
    shm: SharedMemory,
    cfg: ServerConfig,
    host: Vec<EventFd>,
    peers: BTreeMap<u16, Peer>,
    table: Arc<Mutex<PeerTable>>,
    last_id: u16,
    forwards: Vec<(Arc<EventFd>, u16)>,
}

impl IvshmemServer {
    /// Listens on `path` and serves `shm`. A stale socket left by a dead
    /// server is replaced; a live one is an error.
    pub fn bind(
        path: &Path,
        shm: SharedMemory,
        cfg: ServerConfig,
    ) -> Result<IvshmemServer, ServerError> {
        Self::bind_with(path, shm, cfg, |p| UnixListener::bind(p))
    }

    /// [`IvshmemServer::bind`] with the listening socket made by `listen`
    /// (given the path, after a stale socket is removed): a caller that
    /// must set the socket's owner and mode before anyone can connect
    /// binds it itself.
    pub fn bind_with(
        path: &Path,
        shm: SharedMemory,
        cfg: ServerConfig,
        listen: impl FnOnce(&Path) -> io::Result<UnixListener>,
    ) -> Result<IvshmemServer, ServerError> {
        let check = |field, value: u16, max: u16| {
            if value == 0 || value > max {
                return Err(ServerError::Config {
                    field,
                    value: value.into(),
                    max: max.into(),
                });
            }
            Ok(())
        };
        check("vectors", cfg.vectors, MAX_VECTORS)?;
        check("max_peers", cfg.max_peers, MAX_PEERS)?;
        remove_stale_socket(path)?;
        let listener = listen(path).map_err(io_err(format!("binding {}", path.display())))?;
        listener
            .set_nonblocking(true)
            .map_err(io_err("making the listener non-blocking"))?;
        let host = (0..cfg.vectors)
            .map(|_| EventFd::new())
            .collect::<io::Result<Vec<_>>>()
            .map_err(io_err("creating the host's eventfds"))?;
        tracing::info!(
            vm = %cfg.name,
            socket = %path.display(),
            size = shm.size(),
            vectors = cfg.vectors,
            "ivshmem server listening"
        );
        Ok(IvshmemServer {
            listener,
            path: path.to_owned(),
            shm,
            cfg,
            host,
            peers: BTreeMap::new(),
            table: Arc::new(Mutex::new(BTreeMap::new())),
            last_id: HOST_PEER_ID,
            forwards: Vec::new(),
        })
    }

    /// The socket path.
    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    /// The shared memory served.
    pub fn shared_memory(&self) -> &SharedMemory {
        &self.shm
    }

    /// The configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.cfg
    }

    /// The connected clients' peer ids.
    pub fn peers(&self) -> Vec<u16> {
        self.peers.keys().copied().collect()
    }

    /// The host's eventfd for `vector`, readable while guests have rung it
    /// (for callers that poll it themselves instead of [`Self::poll`]).
    pub fn host_doorbell(&self, vector: u16) -> Option<BorrowedFd<'_>> {
        self.host.get(vector as usize).map(|e| e.as_fd())
    }

    /// A handle that raises interrupts in guests.
    pub fn interrupter(&self) -> Interrupter {
        Interrupter {
            peers: self.table.clone(),
            vectors: self.cfg.vectors,
        }
    }

    /// Forwards `fd` to the guests: whenever it is signalled (by another
    /// thread or process holding it, e.g. a host serving loop that has
    /// answered a sleeping guest), [`Self::poll`] raises `vector` in every
    /// connected guest once and reports [`Event::Forwarded`]. Lets a process
    /// that cannot hold the guests' eventfds (they change when a VM
    /// reconnects) interrupt them through one eventfd that does not.
    pub fn forward(&mut self, fd: Arc<EventFd>, vector: u16) -> Result<(), ServerError> {
        if vector >= self.cfg.vectors {
            return Err(ServerError::Config {
                field: "forwarded vector + 1",
                value: u64::from(vector) + 1,
                max: self.cfg.vectors.into(),
            });
        }
        if self.forwards.len() >= MAX_FORWARDS {
            return Err(ServerError::TooManyForwards);
        }
        self.forwards.push((fd, vector));
        Ok(())
    }

    /// Waits up to `timeout` for connections, hangups and doorbells, handles
    /// them, and returns what happened. Errors are the server's own (poll
    /// failing); a client's misbehaviour is an [`Event::Disconnected`].
    pub fn poll(&mut self, timeout: Duration) -> Result<Vec<Event>, ServerError> {
        let ids: Vec<u16> = self.peers.keys().copied().collect();
        let ready = {
            let mut fds: Vec<BorrowedFd<'_>> =
                Vec::with_capacity(1 + ids.len() + self.host.len() + self.forwards.len());
            fds.push(self.listener.as_fd());
            fds.extend(self.peers.values().map(|p| p.stream.as_fd()));
            fds.extend(self.host.iter().map(|e| e.as_fd()));
            fds.extend(self.forwards.iter().map(|(e, _)| e.as_fd()));
            let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
            sys::poll_readable(&fds, ms).map_err(io_err("polling"))?
        };
        let mut events = Vec::new();
        let (listener_ready, rest) = ready.split_first().expect("the listener is polled");
        let (peer_ready, rest) = rest.split_at(ids.len());
        let (host_ready, forward_ready) = rest.split_at(self.host.len());
        for (vector, _) in host_ready.iter().enumerate().filter(|(_, &r)| r) {
            match self.host[vector].take() {
                Ok(Some(count)) => events.push(Event::Doorbell {
                    vector: vector as u16,
                    count,
                }),
                Ok(None) => {}
                Err(e) => {
                    return Err(io_err(format!("reading host eventfd {vector}"))(e));
                }
            }
        }
        for (i, _) in forward_ready.iter().enumerate().filter(|(_, &r)| r) {
            let (fd, vector) = &self.forwards[i];
            match fd.take() {
                Ok(Some(count)) => {
                    let peers = self.interrupter().interrupt_all(*vector);
                    events.push(Event::Forwarded {
                        vector: *vector,
                        count,
                        peers,
                    });
                }
                Ok(None) => {}
                Err(e) => return Err(io_err(format!("reading forwarded eventfd {i}"))(e)),
            }
        }
        let mut gone = Vec::new();
        for (&id, _) in ids.iter().zip(peer_ready).filter(|(_, &r)| r) {
            if let Some(reason) = self.check_client(id) {
                gone.push((id, reason));
            }
        }
        self.remove_peers(gone, &mut events);
        if *listener_ready {
            self.accept_all(&mut events);
        }
        Ok(events)
    }

    /// Serves until `shutdown` becomes true, handing every event to
    /// `on_event`. Returns the error that stopped the server, if any.
    pub fn run(
        &mut self,
        shutdown: &AtomicBool,
        mut on_event: impl FnMut(&Event),
    ) -> Result<(), ServerError> {
        while !shutdown.load(Ordering::Relaxed) {
            for ev in self.poll(RUN_SLICE)? {
                on_event(&ev);
            }
        }
        Ok(())
    }

    /// A readable client socket: clients never send, so this is a hangup
    /// or misbehaviour. Returns why the client must go, if it must.
    fn check_client(&mut self, id: u16) -> Option<String> {
        let peer = self.peers.get(&id)?;
        let mut buf = [0u8; 64];
        // Readable per poll, so this does not block; descriptors a client
        // sent with its bytes are closed when the kernel frees the message.
        match (&peer.stream).read(&mut buf) {
            Ok(0) => Some("hung up".into()),
            Ok(n) => Some(format!("sent {n} unexpected bytes")),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => None,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            Err(e) => Some(format!("socket error: {e}")),
        }
    }

    fn accept_all(&mut self, events: &mut Vec<Event>) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream, events),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // ECONNABORTED, EMFILE...: this connection is lost, the
                    // server is not; the next poll tries again.
                    tracing::warn!(vm = %self.cfg.name, error = %e, "accept failed");
                    events.push(Event::Refused {
                        reason: format!("accept: {e}"),
                    });
                    return;
                }
            }
        }
    }

    /// Makes a new connection a peer: sends its setup and tells the others.
    fn admit(&mut self, stream: UnixStream, events: &mut Vec<Event>) {
        let refuse = |events: &mut Vec<Event>, reason: String| {
            tracing::warn!(vm = %self.cfg.name, %reason, "ivshmem client refused");
            events.push(Event::Refused { reason });
        };
        if self.peers.len() >= self.cfg.max_peers as usize {
            // Dropping the stream closes it: QEMU reports the EOF.
            return refuse(
                events,
                format!("already {} peers (max_peers)", self.peers.len()),
            );
        }
        let Some(id) = self.next_id() else {
            return refuse(events, "no free peer id".into());
        };
        let setup = || -> io::Result<Vec<Arc<EventFd>>> {
            stream.set_nonblocking(false)?;
            stream.set_write_timeout(Some(self.cfg.send_timeout))?;
            stream.set_read_timeout(Some(Duration::from_millis(10)))?;
            let vectors = (0..self.cfg.vectors)
                .map(|_| EventFd::new().map(Arc::new))
                .collect::<io::Result<Vec<_>>>()?;
            sys::send_i64(&stream, PROTOCOL_VERSION, None)?;
            sys::send_i64(&stream, id.into(), None)?;
            sys::send_i64(&stream, -1, Some(self.shm.as_fd()))?;
            for fd in &self.host {
                sys::send_i64(&stream, HOST_PEER_ID.into(), Some(fd.as_fd()))?;
            }
            for (&other, p) in &self.peers {
                for fd in &p.vectors {
                    sys::send_i64(&stream, other.into(), Some(fd.as_fd()))?;
                }
            }
            for fd in &vectors {
                sys::send_i64(&stream, id.into(), Some(fd.as_fd()))?;
            }
            Ok(vectors)
        };
        let started = Instant::now();
        let vectors = match setup() {
            Ok(v) => v,
            Err(e) => return refuse(events, format!("sending setup to peer {id}: {e}")),
        };
        // Tell the existing clients; whoever cannot be told is dropped.
        let mut gone = Vec::new();
        for (&other, p) in &self.peers {
            for fd in &vectors {
                if let Err(e) = sys::send_i64(&p.stream, id.into(), Some(fd.as_fd())) {
                    gone.push((other, format!("announcing peer {id}: {e}")));
                    break;
                }
            }
        }
        self.last_id = id;
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, vectors.clone());
        self.peers.insert(id, Peer { stream, vectors });
        tracing::info!(
            vm = %self.cfg.name,
            peer = id,
            setup_us = started.elapsed().as_micros() as u64,
            "ivshmem client connected"
        );
        events.push(Event::Connected { peer: id });
        self.remove_peers(gone, events);
    }

    /// The next free client id after the last one given, so a departed id
    /// is not reused at once.
    fn next_id(&self) -> Option<u16> {
        let max = MAX_PEERS;
        (1..=max)
            .map(|k| (self.last_id.wrapping_sub(1).wrapping_add(k) % max) + 1)
            .find(|id| !self.peers.contains_key(id))
    }

    /// Drops peers and tells the rest; peers that cannot be told go too.
    fn remove_peers(&mut self, mut gone: Vec<(u16, String)>, events: &mut Vec<Event>) {
        while let Some((id, reason)) = gone.pop() {
            if self.peers.remove(&id).is_none() {
                continue;
            }
            self.table
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            tracing::info!(vm = %self.cfg.name, peer = id, %reason, "ivshmem client left");
            events.push(Event::Disconnected { peer: id, reason });
            for (&other, p) in &self.peers {
                if let Err(e) = sys::send_i64(&p.stream, id.into(), None) {
                    if !gone.iter().any(|(g, _)| *g == other) {
                        gone.push((other, format!("announcing departure of {id}: {e}")));
                    }
                }
            }
        }
    }
}

impl Drop for IvshmemServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Removes a socket file nobody listens on; refuses to touch anything else.
fn remove_stale_socket(path: &Path) -> Result<(), ServerError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(format!("checking {}", path.display()))(e)),
    };
    if !meta.file_type().is_socket() {
        return Err(ServerError::NotASocket(path.to_owned()));
    }
    if UnixStream::connect(path).is_ok() {
        return Err(ServerError::InUse(path.to_owned()));
    }
    std::fs::remove_file(path).map_err(io_err(format!("removing stale {}", path.display())))
}
