//! fairgpu's QEMU integration: an ivshmem server, shared memory for it,
//! QEMU command lines and libvirt XML for a VM's fairgpu device, and a QMP
//! client.
//!
//! - [`IvshmemServer`] speaks QEMU's ivshmem server protocol (version 0) on
//!   a unix socket to `ivshmem-doorbell` devices: it hands out the shared
//!   memory ([`SharedMemory`]: a sealed memfd or a region file) and one
//!   eventfd per (peer, vector). The host is peer [`HOST_PEER_ID`]: guests
//!   ring it through BAR0's Doorbell register ([`Event::Doorbell`]) and it
//!   interrupts guests through [`Interrupter`].
//! - [`qemu_args`] and [`libvirt_xml`] turn a validated [`VmSpec`] into the
//!   `ivshmem-plain` or `ivshmem-doorbell` device of a VM.
//! - [`Qmp`] reads each vCPU's host thread id (`query-cpus-fast`).
//! - [`HostWaker`] turns a guest's doorbell into the futex wake the host's
//!   serving loop blocks on.
//! - [`os`]: descriptors handed to a child process (a daemon's worker) and
//!   thread nice values (nudging a VM's vCPU threads).
//!
//! Invariants: all `unsafe` lives in the private `sys` module (memfd,
//! eventfd, `SCM_RIGHTS`, poll); the server is bounded (peers, vectors,
//! send timeout) and a misbehaving client only loses its own connection;
//! every QMP read is bounded in time and size; BAR sizes are powers of two.

mod sys;

pub mod client;
pub mod cmdline;
pub mod qmp;
pub mod server;
pub mod shm;
pub mod wake;

/// Process and thread operations a host daemon needs around QEMU: keeping
/// descriptors open for a child it spawns, taking them in the child, and
/// reading or changing a thread's nice value.
pub mod os {
    pub use crate::sys::{get_nice, gettid, set_nice, spawn_keeping, take_inherited};
}

pub use cmdline::{libvirt_xml, qemu_args, Device, SpecError, VmSpec};
pub use qmp::{Qmp, QmpError, VcpuThread};
pub use server::{
    Event, InterruptError, Interrupter, IvshmemServer, ServerConfig, ServerError, HOST_PEER_ID,
};
pub use shm::{bar_size, grow_to_bar_size, sealed_memfd, SharedMemory, ShmError};
pub use sys::EventFd;
pub use wake::{HostWaker, WakeError};
