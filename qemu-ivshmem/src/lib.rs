//! QEMU integration: the ivshmem server protocol, memfd regions, eventfds,
//! QEMU command lines, libvirt XML and the QMP client.
//!
//! Not built yet: this crate reserves its place in the workspace.
