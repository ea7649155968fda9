//! The process-wide connection to the host.
//!
//! The first `clIcdGetPlatformIDsKHR` maps the region and claims a channel;
//! every forwarded call then takes the channel's lock, so the threads of a
//! process serialize on it. The channel is released at exit.
//!
//! # Errors of fire-and-forget requests
//! Enqueues are fire-and-forget: the host reports a failure with its next
//! response. Only synchronization points (`clFinish`, `clWaitForEvents`,
//! reads, maps that read, blocking maps) return such an error; other
//! synchronous calls ([`Conn::call`]) leave it with the channel, and bulk
//! transfers, which need it out of the way, keep it here
//! ([`Conn::take_pending`]) for the next synchronization point.

use std::sync::{Mutex, MutexGuard, OnceLock};

use fairgpu_frontend::{CallError, Channel, GuestRegion, Reply, WaitConfig};
use fairgpu_protocol::limits::REQUEST_ARGS;
use fairgpu_protocol::opencl::cl_error;
use fairgpu_protocol::Opcode;

use crate::types::CL_OUT_OF_RESOURCES;
use crate::{log, log_level, LogLevel};

/// The claimed channel and what is pending on it.
#[derive(Debug)]
pub struct Conn {
    ch: Channel,
    /// Fire-and-forget requests went out since the last synchronous call
    /// that reported earlier failures.
    dirty: bool,
    /// The first failure of a fire-and-forget request, taken from the
    /// channel and not yet reported.
    pending: Option<i32>,
}

static INIT: OnceLock<Result<(), String>> = OnceLock::new();
static CONN: Mutex<Option<Conn>> = Mutex::new(None);
/// Host objects whose last guest reference went, to release with the
/// channel's next use (their `Drop` never waits for the channel).
static RELEASES: Mutex<Vec<(Opcode, u64)>> = Mutex::new(Vec::new());

fn lock() -> MutexGuard<'static, Option<Conn>> {
    CONN.lock().unwrap_or_else(|p| p.into_inner())
}

fn open() -> Result<Conn, String> {
    let region = GuestRegion::discover().map_err(|e| format!("no fairgpu region: {e}"))?;
    let ch = Channel::claim(region, WaitConfig::from_env())
        .map_err(|e| format!("cannot claim a channel: {e}"))?;
    Ok(Conn {
        ch,
        dirty: false,
        pending: None,
    })
}

/// Connects once per process; later calls return the first outcome.
pub fn init() -> bool {
    INIT.get_or_init(|| match open() {
        Ok(c) => {
            *lock() = Some(c);
            // Release the channel at a normal exit; a killed process has its
            // channel reclaimed by the host.
            extern "C" fn release_at_exit() {
                if let Ok(mut g) = CONN.lock() {
                    drop(g.take());
                }
            }
            // SAFETY: registers a plain extern "C" function with no arguments.
            unsafe { libc::atexit(release_at_exit) };
            Ok(())
        }
        Err(why) => {
            if log_level() != LogLevel::Off {
                log(format_args!("{why}; the fairgpu platform is not available"));
            }
            Err(why)
        }
    })
    .is_ok()
}

/// Whether the channel was claimed.
pub fn connected() -> bool {
    matches!(INIT.get(), Some(Ok(())))
}

/// Runs `f` on the channel (CL_OUT_OF_RESOURCES when there is none).
/// Host releases queued by objects' `Drop` go out first.
pub fn with<T>(f: impl FnOnce(&mut Conn) -> Result<T, i32>) -> Result<T, i32> {
    let mut g = lock();
    let c = g.as_mut().ok_or(CL_OUT_OF_RESOURCES)?;
    c.flush_releases();
    f(c)
}

/// Queues the release of a host object (`op` with `args[0] = handle`),
/// sent at once if the channel is free, else with its next use. Never
/// blocks: a `Drop` may run while this thread holds the channel.
pub fn release_later(op: Opcode, handle: u64) {
    if handle == 0 {
        return;
    }
    RELEASES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((op, handle));
    if let Ok(mut g) = CONN.try_lock() {
        if let Some(c) = g.as_mut() {
            c.flush_releases();
        }
    }
}

/// The request arguments: `v` then zeros.
pub fn args(v: &[u64]) -> [u64; REQUEST_ARGS] {
    let mut a = [0; REQUEST_ARGS];
    a[..v.len()].copy_from_slice(v);
    a
}

fn err(e: &CallError) -> i32 {
    cl_error(e.status())
}

impl Conn {
    fn flush_releases(&mut self) {
        let queued = std::mem::take(&mut *RELEASES.lock().unwrap_or_else(|p| p.into_inner()));
        for (op, h) in queued {
            // A failure (a dead channel) leaves nothing to release.
            let _ = self.fire(op, &[h], &[]);
        }
    }

    fn stash(&mut self, e: i32) {
        self.pending.get_or_insert(e);
    }

    /// Largest arena slice of one request.
    pub fn max_slice(&self) -> usize {
        self.ch.max_slice() as usize
    }

    /// A synchronous call that leaves earlier requests' failures for a
    /// synchronization point.
    pub fn call(
        &mut self,
        op: Opcode,
        a: &[u64],
        input: &[u8],
        output: &mut [u8],
    ) -> Result<Reply, i32> {
        self.ch
            .call_with_keeping_errors(op, args(a), input, output)
            .map_err(|e| err(&e))
    }

    /// A synchronous call whose reply values are not needed; an earlier
    /// request's failure reported with it is kept for
    /// [`Conn::take_pending`], and the call itself succeeded.
    pub fn exec(
        &mut self,
        op: Opcode,
        a: &[u64],
        input: &[u8],
        output: &mut [u8],
    ) -> Result<(), i32> {
        match self.ch.call_with(op, args(a), input, output) {
            Ok(_) => {
                self.dirty = false;
                Ok(())
            }
            Err(CallError::Deferred(s)) => {
                self.dirty = false;
                self.stash(cl_error(s));
                Ok(())
            }
            Err(e) => Err(err(&e)),
        }
    }

    /// A fire-and-forget request; `input` must fit one arena slice.
    pub fn fire(&mut self, op: Opcode, a: &[u64], input: &[u8]) -> Result<(), i32> {
        self.ch
            .call_async(op, args(a), input)
            .map_err(|e| err(&e))?;
        self.dirty = true;
        Ok(())
    }

    /// Collects earlier requests' failures into the pending slot, so that
    /// a bulk transfer's errors are its own.
    fn drain(&mut self) -> Result<(), i32> {
        if self.dirty {
            self.exec(Opcode::Nop, &[], &[], &mut [])?;
        }
        Ok(())
    }

    /// Sends `data` with `op` in pipelined chunks (`args[offset_arg]`
    /// advances per chunk); returns once the host consumed it all.
    pub fn send(
        &mut self,
        op: Opcode,
        a: &[u64],
        offset_arg: usize,
        data: &[u8],
    ) -> Result<(), i32> {
        self.drain()?;
        match self.ch.send_bulk(op, args(a), offset_arg, data) {
            Ok(_) => Ok(()),
            Err(CallError::Deferred(s)) => {
                self.stash(cl_error(s));
                Ok(())
            }
            Err(e) => Err(err(&e)),
        }
    }

    /// Receives `out.len()` bytes with `op` in pipelined chunks.
    pub fn recv(
        &mut self,
        op: Opcode,
        a: &[u64],
        offset_arg: usize,
        out: &mut [u8],
    ) -> Result<(), i32> {
        self.drain()?;
        match self.ch.recv_bulk(op, args(a), offset_arg, out) {
            Ok(()) => Ok(()),
            Err(CallError::Deferred(s)) => {
                // Not after a drain; kept for the record all the same.
                self.stash(cl_error(s));
                Ok(())
            }
            Err(e) => Err(err(&e)),
        }
    }

    /// At a synchronization point: the first failure of earlier
    /// fire-and-forget requests that was taken from the channel, if any.
    pub fn take_pending(&mut self) -> Result<(), i32> {
        match self.pending.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
