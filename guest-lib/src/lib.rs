//! The guest library: a drop-in `libcuda.so.1` that forwards the CUDA driver
//! API over [`fairgpu_frontend`](../fairgpu_frontend/index.html).
//!
//! Not built yet: this crate reserves its place in the workspace. The
//! transport it will sit on is complete in `fairgpu-frontend`.
