//! fairgpu's guest library: a drop-in `libcuda.so.1`.
//!
//! Applications (and NVIDIA's libcudart, static or shared, 12.x and 13.x)
//! load this library as the CUDA driver. It exports every `cu*` symbol of the
//! driver ABI, generated from one declaration list (`api/driver_api.tsv`):
//! the implemented ones forward to the fairgpu host over the frontend's
//! channel; the rest return CUDA_ERROR_NOT_SUPPORTED and log their name once.
//!
//! Invariants:
//! - no panic crosses the C ABI: every exported function runs its body
//!   through [`ffi`], which turns a panic into CUDA_ERROR_UNKNOWN;
//! - the host never sees guest pointers; the guest never sees host
//!   pointers: modules, functions and libraries are guest-side objects that
//!   hold the host's opaque handles;
//! - device attributes and kernel parameter layouts are asked of the host
//!   once and cached here.
//!
//! Environment: `FAIRGPU_REGION` (local mode; else the ivshmem device),
//! `FAIRGPU_GUEST_LOG` (`0` silences the once-per-name log of unsupported
//! calls, `trace` adds every failing call, `calls` every call), plus the frontend's `FAIRGPU_SPIN_US`, `FAIRGPU_HOST_TIMEOUT_MS`.

#![allow(non_snake_case)]
// The exported functions are the C ABI of the CUDA driver: they receive raw
// pointers by contract and check them for null before use; marking them
// `unsafe` would change nothing for their C callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
// Blocks that read an argument array and write the caller's out-pointers
// hold several raw-pointer operations under one `// SAFETY:` argument.
#![allow(clippy::multiple_unsafe_ops_per_block)]

pub mod types;

mod array;
mod batch;
mod context;
mod device;
mod driver;
pub mod export_tables;
mod graph;
mod graph_mem;
mod hooks;
mod integrity;
mod ipc;
mod launch;
mod legacy;
mod link;
mod linked;
mod managed;
mod md2;
mod memfd;
mod memory;
mod module;
mod pool;
mod proc_address;
mod state;
mod stream;
mod vmm;

use std::collections::HashSet;
use std::sync::Mutex;

use types::{err, CUresult};

/// The generated stubs and the `cuGetProcAddress` table.
pub mod generated {
    include!(concat!(env!("OUT_DIR"), "/driver_api.rs"));
}

/// Runs an exported function's body: a panic becomes CUDA_ERROR_UNKNOWN
/// instead of unwinding into C.
///
/// With `FAIRGPU_GUEST_LOG=trace`, every call that fails is reported on
/// stderr with its status and the entry point's place in this library's
/// source (for finding which call a program stumbled on); with `calls`,
/// every call.
#[track_caller]
pub(crate) fn ffi(f: impl FnOnce() -> CUresult) -> CUresult {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(err::UNKNOWN);
    if log_level() == LogLevel::Calls || (r != err::SUCCESS && log_level() >= LogLevel::Trace) {
        let at = std::panic::Location::caller();
        eprintln!(
            "fairgpu guest-lib: status {r} from the entry point at {}:{}",
            at.file(),
            at.line()
        );
    }
    r
}

/// Prints `message` on stderr once per `said`, unless the log is off
/// (`FAIRGPU_GUEST_LOG=0`).
pub(crate) fn say_once(said: &std::sync::Once, message: impl FnOnce() -> String) {
    if log_level() == LogLevel::Off {
        return;
    }
    said.call_once(|| eprintln!("fairgpu guest-lib: {}", message()));
}

/// What the library reports on stderr (`FAIRGPU_GUEST_LOG`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum LogLevel {
    /// `0`: nothing.
    Off,
    /// The default: each unsupported call (or export-table slot) once.
    Unsupported,
    /// `trace`: also every failing call.
    Trace,
    /// `calls`: every call, with its status.
    Calls,
}

pub(crate) fn log_level() -> LogLevel {
    static LEVEL: std::sync::OnceLock<LogLevel> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("FAIRGPU_GUEST_LOG").as_deref() {
        Ok("0") => LogLevel::Off,
        Ok("trace") => LogLevel::Trace,
        Ok("calls") => LogLevel::Calls,
        _ => LogLevel::Unsupported,
    })
}

/// Like [`ffi`] for bodies that use `?` on `Result<(), CUresult>`.
#[track_caller]
pub(crate) fn ffi_result(f: impl FnOnce() -> Result<(), CUresult>) -> CUresult {
    ffi(|| match f() {
        Ok(()) => err::SUCCESS,
        Err(e) => e,
    })
}

/// What every unimplemented entry point does.
pub(crate) fn unsupported(name: &'static str) -> CUresult {
    static SEEN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let first = SEEN
        .lock()
        .map(|mut s| s.get_or_insert_with(HashSet::new).insert(name))
        .unwrap_or(false);
    if first && log_level() != LogLevel::Off {
        eprintln!("fairgpu guest-lib: {name} is not supported (CUDA_ERROR_NOT_SUPPORTED)");
    }
    err::NOT_SUPPORTED
}
