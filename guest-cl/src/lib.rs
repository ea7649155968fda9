//! fairgpu's OpenCL installable client driver (`cl_khr_icd`).
//!
//! An OpenCL ICD loader (ocl-icd, the Khronos loader) finds this library
//! through an `.icd` file naming it, asks it for its platforms with
//! `clIcdGetPlatformIDsKHR`, and from then on calls it through the dispatch
//! table that every object it hands out points to. The library forwards an
//! OpenCL 1.2 feature set (buffers, images and samplers, programs from
//! source or binary, kernels, in-order and out-of-order queues, events) to
//! the fairgpu host over one channel per process, with the opcodes of
//! [`fairgpu_protocol::opencl`].
//!
//! Invariants:
//! - only `clIcdGetPlatformIDsKHR`, `clGetExtensionFunctionAddress` and
//!   `clGetPlatformInfo` are exported; every other entry point is reached
//!   through the dispatch table ([`dispatch`]), whose slots follow
//!   `struct _cl_icd_dispatch` of `CL/cl_icd.h` exactly and are never null;
//! - no panic crosses the C ABI: every entry point runs its body through
//!   [`guard`] or [`guard_obj`];
//! - every object pointer the application passes is looked up in the
//!   registry of live objects ([`registry`]) before use: a stale or foreign
//!   pointer gets the type's `CL_INVALID_*` error;
//! - platform, device and context are guest-side objects; queues, buffers,
//!   images, samplers, programs and kernels hold the host's opaque handles;
//!   events are named by ids this library chooses ([`event`]).
//!
//! Environment: `FAIRGPU_REGION` (local mode; else the ivshmem device),
//! `FAIRGPU_GUEST_LOG` (`0` silences the once-per-name log of unsupported
//! calls, `trace` adds every failing call, `calls` every call), plus the
//! frontend's `FAIRGPU_SPIN_US`, `FAIRGPU_HOST_TIMEOUT_MS`.

#![allow(non_snake_case)]
// The entry points are the C ABI of OpenCL: they receive raw pointers by
// contract; marking them `unsafe` would change nothing for their C callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]
// C signatures have as many parameters as the API has.
#![allow(clippy::too_many_arguments)]

pub mod dispatch;
pub mod raw;
pub mod rect;
pub mod types;

mod conn;
mod context;
mod event;
mod image;
mod include;
mod kernel;
mod mem;
mod platform;
mod program;
mod registry;
mod sampler;

use std::collections::HashSet;
use std::io::Write as _;
use std::sync::{Mutex, OnceLock};

use types::{Handle, CL_INVALID_OPERATION, CL_OUT_OF_HOST_MEMORY, CL_SUCCESS};

/// What the library reports on stderr (`FAIRGPU_GUEST_LOG`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum LogLevel {
    /// `0`: nothing.
    Off,
    /// The default: each unsupported entry point once, and why the host
    /// could not be reached.
    Unsupported,
    /// `trace`: also every failing call.
    Trace,
    /// `calls`: every call, with its status.
    Calls,
}

pub(crate) fn log_level() -> LogLevel {
    static LEVEL: OnceLock<LogLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("FAIRGPU_GUEST_LOG").as_deref() {
        Ok("0") => LogLevel::Off,
        Ok("trace") => LogLevel::Trace,
        Ok("calls") => LogLevel::Calls,
        _ => LogLevel::Unsupported,
    })
}

/// Writes one line to stderr (never panics, unlike `eprintln!`).
pub(crate) fn log(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "fairgpu opencl: {line}");
}

fn trace(name: &str, status: i32) {
    let level = log_level();
    if level == LogLevel::Calls || (status != CL_SUCCESS && level >= LogLevel::Trace) {
        log(format_args!("{name} -> {status}"));
    }
}

/// Runs an entry point's body: its error is the return value, a panic
/// becomes CL_OUT_OF_HOST_MEMORY instead of unwinding into C.
pub(crate) fn guard(name: &'static str, f: impl FnOnce() -> Result<(), i32>) -> i32 {
    let r = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => CL_SUCCESS,
        Ok(Err(e)) => e,
        Err(_) => CL_OUT_OF_HOST_MEMORY,
    };
    trace(name, r);
    r
}

/// Runs the body of an entry point that returns an object (or pointer):
/// the status goes to `errcode_ret` (when non-null), null on failure.
pub(crate) fn guard_obj(
    name: &'static str,
    errcode_ret: *mut i32,
    f: impl FnOnce() -> Result<Handle, i32>,
) -> Handle {
    let (h, r) = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(h)) => (h, CL_SUCCESS),
        Ok(Err(e)) => (std::ptr::null_mut(), e),
        Err(_) => (std::ptr::null_mut(), CL_OUT_OF_HOST_MEMORY),
    };
    trace(name, r);
    // SAFETY: errcode_ret is null or the application's writable cl_int.
    unsafe { raw::set(errcode_ret, r) };
    h
}

/// What every unimplemented entry point does: logs its name once (unless
/// `FAIRGPU_GUEST_LOG=0`) and returns CL_INVALID_OPERATION.
pub(crate) fn unsupported(name: &'static str) -> i32 {
    static SEEN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let first = SEEN
        .lock()
        .map(|mut s| s.get_or_insert_with(HashSet::new).insert(name))
        .unwrap_or(false);
    if first && log_level() != LogLevel::Off {
        log(format_args!("{name} is not supported"));
    }
    CL_INVALID_OPERATION
}
