//! fairgpu's protocol: everything both sides of the shared region agree on.
//!
//! - [`layout`]: the versioned region header and where every channel, index,
//!   slot and arena lives.
//! - [`ring`]: the single-producer single-consumer ring algorithm.
//! - [`region`]: bounds-checked volatile access to a mapped region, and the
//!   rings over it.
//! - [`wire`]: request and response descriptors, their validation, CUresult
//!   status codes.
//! - [`opcode`]: the opcode space.
//! - [`limits`]: named bounds on every guest-controlled size.
//! - [`handle`]: opaque per-VM handles.
//! - [`array`]: CUDA arrays, rectangular copies, texture and surface
//!   objects as they cross the wire.
//!
//! Invariants this crate upholds:
//! - no Rust reference to non-atomic bytes of the region is ever created;
//! - each side keeps its own ring index privately and only publishes it, and
//!   checks the peer's index before use (`tail - head <= entries`);
//! - a descriptor is copied out once, then validated, then used;
//! - every size from the region is checked against [`limits`] before use.
//!
//! No I/O and no CUDA here: mapping lives in the frontend, serving in the
//! backend.

pub mod array;
pub mod cuda;
pub mod handle;
pub mod layout;
pub mod limits;
pub mod opcode;
pub mod opencl;
pub mod region;
pub mod ring;
pub mod wire;

pub use layout::{Layout, RegionConfig, RegionHeader};
pub use opcode::Opcode;
pub use wire::{Request, Response, Status};
