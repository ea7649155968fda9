//! fairgpu's benchmarks, experiments and end-to-end checks: everything that
//! drives the daemon from outside, as an operator or a guest would.
//!
//! - [`bench`]: `fairgpu bench transport`, the transport between two
//!   processes (round trip, submission rate, bulk bandwidth, a Unix-socket
//!   baseline).
//! - [`fairness`]: `fairgpu bench fairness`, FairGV's fairness experiments
//!   on the daemon (harness, observer, metrics, SVG charts).
//! - [`workload`]: `fairgpu __workload`, the closed-loop CUDA workload
//!   generator (FairGV Table 3 profiles, Throttle, custom mixes) that loads
//!   `libcuda.so.1` as CUDA programs do.
//! - [`demo`]: `fairgpu demo`; [`top`]: `fairgpu top`, a running daemon's
//!   GPU shares, live.
//! - [`gpu_check`]: `fairgpu gpu-check`, the end-to-end check of the GPU
//!   path against the CPU.
//!
//! This crate uses the daemon's crates only for what an operator's tool
//! uses: the configuration (`fairgpu-config`), the control socket and its
//! status (`fairgpu-daemon`), process helpers (`fairgpu-worker`). Nothing
//! here runs inside the daemon or a worker.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use fairgpu_frontend::GuestRegion;

pub mod bench;
pub mod demo;
pub mod fairness;
pub mod gpu_check;
pub mod top;
pub mod workload;

/// Opens a region, waiting up to `timeout` for its host to create it.
pub fn open_region_wait(path: &Path, timeout: Duration) -> anyhow::Result<Arc<GuestRegion>> {
    let start = Instant::now();
    loop {
        match GuestRegion::open(path) {
            Ok(r) => return Ok(r),
            Err(e) if start.elapsed() > timeout => {
                return Err(e)
                    .with_context(|| format!("waiting for the host to create {}", path.display()))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}
