//! fairgpu's guest tools. `fairgpu-guest info` ([`info`]) answers "is this
//! guest wired to a fairgpu host, and how well?": the ivshmem devices, the
//! region header, every channel's state, the wake path the frontend chooses
//! (and why), and the round-trip latency of no-op calls. Linked as `nvcc`
//! (or as `fairgpu-guest nvcc`), it makes PTX where a program asks nvcc for
//! a cubin at run time ([`nvcc`]).
//!
//! Invariants: the tools read the region only through the frontend's
//! bounds-checked view; a region that fails validation is reported, never
//! trusted; measuring claims a channel and releases it on return.

pub mod info;
pub mod nvcc;

pub use info::{collect, InfoError, InfoOptions, Report};
