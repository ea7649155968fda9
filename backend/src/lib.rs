//! The fairgpu host: the daemon and the per-VM worker. The `fairgpu`
//! command (crate `fairgpu-cli`) runs them; benchmarks, the demo and
//! `top` (crate `fairgpu-benches`) drive them from outside.
//!
//! - [`host`]: create a region and serve its channels (rings, validation,
//!   dispatch, failure isolation, waiting).
//! - [`transport_ops`]: the transport's own no-op and bulk-copy opcodes.
//! - [`daemon`]: `fairgpu serve`, one supervised [`worker`] process per VM,
//!   configured by [`config`], observed through [`stats`] and [`control`].
//! - [`sched`]: the daemon's GPU scheduler thread; [`grants`]: its control
//!   block shared with the workers; [`accounting`]: the worker's side
//!   (issue only under the grant, measure GPU time).
//! - [`executor`] (the `fairgpu-executor` crate): the `GpuExecutor` seam,
//!   SimGpu and the CudaExecutor; [`cuda_ops`] validates each CUDA request
//!   before an executor sees it.
//! - [`perms`]: who may open the regions, sockets and files the daemon
//!   creates.
//!
//! Invariants: a guest's bad request fails that request; a guest's corrupt
//! ring fails that channel; nothing a guest writes can stop the server or
//! touch another channel.

pub use fairgpu_executor as executor;
pub use fairgpu_executor::clock;

pub mod accounting;
pub mod config;
pub mod control;
pub mod cuda_ops;
pub mod daemon;
pub mod grants;
pub mod host;
pub mod perms;
pub mod process;
pub mod qemu;
pub mod region_socket;
pub mod sched;
pub mod stats;
pub mod transport_ops;
pub mod worker;
