//! The client side of the ivshmem server protocol, as QEMU's device speaks
//! it: for tests of the server without QEMU, and for host-side tools that
//! want to join a region as a peer.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::server::{MAX_PEERS, MAX_VECTORS, PROTOCOL_VERSION};
use crate::sys::{self, EventFd, Received};

/// Why a client could not join or follow the server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket failed.
    #[error("ivshmem socket")]
    Io(#[from] io::Error),
    /// The server closed the connection.
    #[error("the server closed the connection")]
    Closed,
    /// The server broke the protocol.
    #[error("protocol violation: {0}")]
    Protocol(String),
}

/// A change the server announced after the setup.
#[derive(Debug)]
pub enum Update {
    /// An eventfd of `peer`; the n-th one of a peer is its vector n-1.
    Vector {
        /// The peer.
        peer: u16,
        /// Its eventfd for the next vector.
        fd: EventFd,
    },
    /// `peer` left.
    Gone {
        /// The peer.
        peer: u16,
    },
}

/// A connected client.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    id: u16,
    shm: OwnedFd,
}

impl Client {
    /// Connects and reads the fixed part of the setup: version, own id and
    /// the shared memory. Eventfds follow as [`Update`]s. Every read waits at
    /// most `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(timeout))?;
        let version = match sys::recv_i64(&stream)? {
            Received::Message(v, None) => v,
            Received::Message(_, Some(_)) => {
                return Err(ClientError::Protocol(
                    "version came with a descriptor".into(),
                ))
            }
            Received::Closed => return Err(ClientError::Closed),
        };
        if version != PROTOCOL_VERSION {
            return Err(ClientError::Protocol(format!("version {version}")));
        }
        let id = match sys::recv_i64(&stream)? {
            Received::Message(id, None) if (0..=i64::from(u16::MAX)).contains(&id) => id as u16,
            Received::Message(id, _) => {
                return Err(ClientError::Protocol(format!("bad id message {id}")))
            }
            Received::Closed => return Err(ClientError::Closed),
        };
        let shm = match sys::recv_i64(&stream)? {
            Received::Message(-1, Some(fd)) => fd,
            Received::Message(m, _) => {
                return Err(ClientError::Protocol(format!(
                    "expected the shared memory, got {m}"
                )))
            }
            Received::Closed => return Err(ClientError::Closed),
        };
        Ok(Client { stream, id, shm })
    }

    /// This client's peer id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The connection to the server.
    pub fn socket(&self) -> &UnixStream {
        &self.stream
    }

    /// The shared memory descriptor.
    pub fn shared_memory(&self) -> &OwnedFd {
        &self.shm
    }

    /// The next update, waiting at most the connect timeout.
    pub fn next_update(&self) -> Result<Update, ClientError> {
        match sys::recv_i64(&self.stream)? {
            Received::Closed => Err(ClientError::Closed),
            Received::Message(m, _) if !(0..=i64::from(u16::MAX)).contains(&m) => {
                Err(ClientError::Protocol(format!("peer id {m}")))
            }
            Received::Message(m, Some(fd)) => Ok(Update::Vector {
                peer: m as u16,
                fd: EventFd::from_owned(fd),
            }),
            Received::Message(m, None) => Ok(Update::Gone { peer: m as u16 }),
        }
    }

    /// Reads updates until this client's own `vectors` eventfds arrived (the
    /// server sends them last in the setup). Returns every peer's eventfds
    /// by id, this client's included.
    pub fn read_setup(&self, vectors: u16) -> Result<BTreeMap<u16, Vec<EventFd>>, ClientError> {
        if vectors == 0 || vectors > MAX_VECTORS {
            return Err(ClientError::Protocol(format!("{vectors} vectors")));
        }
        let mut peers: BTreeMap<u16, Vec<EventFd>> = BTreeMap::new();
        while peers.get(&self.id).map_or(0, Vec::len) < vectors as usize {
            match self.next_update()? {
                Update::Vector { peer, fd } => {
                    let fds = peers.entry(peer).or_default();
                    if fds.len() >= vectors as usize {
                        return Err(ClientError::Protocol(format!(
                            "more than {vectors} eventfds for peer {peer}"
                        )));
                    }
                    fds.push(fd);
                    if peers.len() > MAX_PEERS as usize + 1 {
                        return Err(ClientError::Protocol("too many peers".into()));
                    }
                }
                Update::Gone { peer } => {
                    peers.remove(&peer);
                }
            }
        }
        Ok(peers)
    }
}
