//! The fairgpu daemon (`fairgpu serve`): one supervised vGPU worker process
//! per VM (crate `fairgpu-worker`), the GPU scheduler thread that hands
//! the grant to the workers in turn, the control socket, and the daemon's
//! side of QEMU VMs. The configuration is crate `fairgpu-config`; the
//! `fairgpu` command (crate `fairgpu-cli`) starts it.
//!
//! - [`daemon`]: creates every VM's region, runs and restarts its worker,
//!   publishes status; stops cleanly on SIGTERM.
//! - [`sched`]: the GPU scheduler thread over the grant file
//!   (`fairgpu_worker::grants`), with the CPU coordinator of GPU-centric
//!   co-scheduling.
//! - [`control`]: the control socket (`status`, `set-weight`), its client
//!   and the status table.
//! - [`region_socket`]: hands a local VM's sealed region memory to each
//!   guest process that connects.
//! - [`qemu`]: ivshmem-doorbell server and the QEMU CPU coordinator.
//!
//! Invariants: nothing a guest writes can stop the daemon or reach another
//! VM: guests touch only their region, which the daemon never trusts; a
//! worker that dies is restarted and only its own VM's channels fail.

pub mod control;
pub mod daemon;
pub mod qemu;
pub mod region_socket;
pub mod sched;
