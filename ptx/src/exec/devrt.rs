//! The CUDA device runtime of dynamic parallelism: kernels, copies and
//! fills launched by device code, with the streams, events, memory and
//! per-thread errors of its API (`cudaLaunchDevice`, `cudaStreamCreate…`,
//! `cudaMalloc`, `cudaGetLastError` and the rest that nvcc calls as
//! `__cudaCDP2…` under `-rdc=true`).
//!
//! # The model
//!
//! A grid's threads only *queue* work ([`DeviceWork`]), in the order they
//! launch it; when the grid's last block has ended, the work runs in that
//! order, each item to completion (a kernel with everything it launched
//! in turn) before the next, and tail launches (`cudaStreamTailLaunch`)
//! after all the rest ([`crate::Module`] does this). This is one of the
//! executions CUDA allows: a child grid may start any time after its
//! launch and must end before its parent is complete; work in one stream
//! runs in launch order and a grid is complete only with its children, so
//! running everything launched earlier to completion first keeps every
//! stream's and every event's order (a launch that waits on an event
//! comes after the recording). Since CUDA 12 a parent cannot wait for its
//! children (device-side `cudaDeviceSynchronize` is gone), so no correct
//! program can tell. Nothing of a later launch runs concurrently with an
//! earlier one: a program that spins until a sibling launched later has
//! written something never ends (on a GPU it may or may not).
//!
//! A parameter buffer (`cudaGetParameterBuffer[V2]`) is a block of the
//! context's device heap ([`crate::Memory::malloc`]) from its handing out
//! to its launch, which copies the parameters and frees it; one never
//! launched is freed when its grid ends.
//!
//! # Limits, as a GPU's device runtime has them
//!
//! - Nesting: a grid at depth [`MAX_DEPTH`] − 1 (the host's launch is
//!   depth 0) cannot launch (`cudaErrorLaunchMaxDepthExceeded`).
//! - Pending work: at most [`crate::Limits::pending_launches`] items
//!   (65,536 by default) holding at most [`MAX_PENDING_BYTES`] of
//!   parameters queued and not yet started, over the whole tree; a launch
//!   beyond fails with `cudaErrorLaunchPendingCountExceeded`. A GPU keeps
//!   `cudaLimitDevRuntimePendingLaunchCount` launches (2,048 by default)
//!   in a fixed pool and more in a virtualized one, bounded by memory;
//!   SimGpu has no fixed pool and ignores that limit.
//! - Every launched item costs [`crate::BLOCK_SETUP_COST`] of the
//!   launch's instruction budget when it is queued, and copies and fills a
//!   thread-instruction per 8 bytes when they run: a launch, however many
//!   grids it spawns, stays within the one budget of the host's launch.
//!
//! A call's error is returned and kept as the calling thread's last error
//! (`cudaGetLastError` returns and clears it, `cudaPeekAtLastError`
//! returns it). `cudaGetErrorString`, `cudaDeviceSynchronize` and the
//! rest of the API are not provided: a thread that reaches one fails the
//! launch naming it.

use std::collections::HashMap;

use super::{Launch, Warp};
use crate::ir::{DevRt, DevRtCall, Func, Space};
use crate::{Error, BLOCK_SETUP_COST};

/// Most levels of grids: the host's launch and 23 levels of children, as
/// on NVIDIA's GPUs.
pub const MAX_DEPTH: u32 = 24;

/// Most launches queued and not yet started over a launch's whole tree,
/// by default ([`crate::Limits::pending_launches`]).
pub const DEFAULT_PENDING_LAUNCHES: u32 = 1 << 16;

/// Most bytes of parameters the queued launches of one tree may hold.
pub const MAX_PENDING_BYTES: u64 = 64 << 20;

/// Most parameter buffers a grid may hold at once (handed out, not yet
/// launched); each is also a block of the device heap.
const MAX_BUFFERS: usize = 1 << 16;

/// Most threads of one grid whose last error is not `cudaSuccess` that
/// are remembered; a thread's error beyond is still returned by the call.
const MAX_ERRORS: usize = 1 << 16;

/// `cudaStream_t` values of the per-grid streams.
const STREAM_TAIL_LAUNCH: u64 = 0x3;

/// The first handle of a stream or event made on the device.
const FIRST_HANDLE: u64 = 0x1000;

/// `cudaError_t` values the device runtime returns.
pub mod code {
    pub const SUCCESS: u32 = 0;
    pub const INVALID_VALUE: u32 = 1;
    pub const MEMORY_ALLOCATION: u32 = 2;
    pub const INVALID_CONFIGURATION: u32 = 9;
    pub const INVALID_MEMCPY_DIRECTION: u32 = 21;
    pub const LAUNCH_MAX_DEPTH_EXCEEDED: u32 = 65;
    pub const LAUNCH_PENDING_COUNT_EXCEEDED: u32 = 69;
    pub const INVALID_DEVICE_FUNCTION: u32 = 98;
}

/// One item of work a grid's threads launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DeviceWork {
    /// A kernel of the module (its index in the module's functions).
    Kernel {
        func: usize,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        params: Vec<u8>,
        tail: bool,
    },
    /// `cudaMemcpyAsync` of device memory.
    Copy {
        dst: u64,
        src: u64,
        len: u64,
        tail: bool,
    },
    /// `cudaMemsetAsync`.
    Fill {
        dst: u64,
        value: u8,
        len: u64,
        tail: bool,
    },
}

impl DeviceWork {
    /// Whether it was launched into `cudaStreamTailLaunch`.
    pub(crate) fn tail(&self) -> bool {
        match *self {
            DeviceWork::Kernel { tail, .. }
            | DeviceWork::Copy { tail, .. }
            | DeviceWork::Fill { tail, .. } => tail,
        }
    }

    /// Bytes of parameters it holds.
    pub(crate) fn bytes(&self) -> u64 {
        match self {
            DeviceWork::Kernel { params, .. } => params.len() as u64,
            _ => 0,
        }
    }
}

/// Work queued and not yet started: items, and the bytes of their
/// parameters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pending {
    pub items: u64,
    pub bytes: u64,
}

/// What a kernel's launch needs of its module to launch others.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kernels<'a> {
    /// Each kernel's address and index in `funcs`.
    pub entries: &'a [(u64, usize)],
    pub funcs: &'a [Func],
}

/// The kernel a `GetParameterBufferV2` named, with its shape.
#[derive(Debug, Clone, Copy)]
struct Target {
    func: usize,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
}

/// The device runtime's state in one grid.
#[derive(Debug)]
pub(crate) struct DeviceSide<'a> {
    kernels: Kernels<'a>,
    /// This grid's level: 0 for the host's launch.
    depth: u32,
    /// Items queued by the grid's ancestors and not yet started.
    pending_outside: Pending,
    pending_limit: u32,
    /// Parameter bytes of the items in `work`.
    work_bytes: u64,
    /// What the grid's threads launched, in order.
    pub work: Vec<DeviceWork>,
    /// Parameter buffers handed out and not yet launched: the kernel
    /// named (V2) or none (the older form names it at launch).
    buffers: HashMap<u64, Option<Target>>,
    /// Last errors other than `cudaSuccess`, by block and thread.
    errors: HashMap<(u64, u32), u32>,
    next_handle: u64,
}

impl<'a> DeviceSide<'a> {
    pub(crate) fn new(
        kernels: Kernels<'a>,
        depth: u32,
        pending_outside: Pending,
        pending_limit: u32,
    ) -> DeviceSide<'a> {
        DeviceSide {
            kernels,
            depth,
            pending_outside,
            pending_limit,
            work_bytes: 0,
            work: Vec::new(),
            buffers: HashMap::new(),
            errors: HashMap::new(),
            next_handle: FIRST_HANDLE,
        }
    }

    fn entry(&self, addr: u64) -> Option<usize> {
        self.kernels
            .entries
            .iter()
            .find(|(a, _)| *a == addr)
            .map(|&(_, i)| i)
    }

    fn handle(&mut self) -> u64 {
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(0x10);
        h
    }

    /// The parameter buffers never launched, to be freed.
    pub(crate) fn take_buffers(&mut self) -> Vec<u64> {
        self.buffers.drain().map(|(a, _)| a).collect()
    }
}

/// Whether a launch's shape is one a GPU takes.
fn shape_ok(grid: [u32; 3], block: [u32; 3], shared: u32) -> bool {
    let threads: u64 = block.iter().map(|&v| u64::from(v)).product();
    !grid.contains(&0)
        && !block.contains(&0)
        && threads <= super::MAX_BLOCK_THREADS
        && block[0] <= 1024
        && block[1] <= 1024
        && block[2] <= 64
        && grid[0] < 1 << 31
        && grid[1] <= 65535
        && grid[2] <= 65535
        && u64::from(shared) <= super::MAX_SHARED_BYTES
}

impl Launch<'_> {
    /// One thread's (lane `l`'s) call of the device runtime.
    pub(super) fn devrt(&mut self, w: &Warp, l: usize, c: &DevRtCall) -> Result<(), Error> {
        if self.device.is_none() {
            return Err(Error::Unsupported {
                what: format!(
                    "{:?} of the device runtime outside a module's launch",
                    c.call
                ),
            });
        }
        let a = &c.args;
        // A pointer result, or a `cudaError_t`.
        let (value, wide) = match c.call {
            DevRt::GetParameterBufferV2 => {
                let func = self.param_u64(w, l, a[0])?;
                let grid = self.arg_dim3(w, l, a[1])?;
                let block = self.arg_dim3(w, l, a[2])?;
                let shared = self.arg_u32(w, l, a[3])?;
                (
                    self.parameter_buffer(w, l, Some((func, grid, block, shared)), 8)?,
                    true,
                )
            }
            DevRt::GetParameterBuffer => {
                let align = self.param_u64(w, l, a[0])?;
                let size = self.param_u64(w, l, a[1])?;
                let b = match align <= 16 && size <= u64::from(crate::MAX_PARAM_BYTES) {
                    true => self.parameter_buffer(w, l, None, size)?,
                    false => {
                        self.result(w, l, code::INVALID_VALUE);
                        0
                    }
                };
                (b, true)
            }
            DevRt::LaunchDeviceV2 => {
                let buf = self.param_u64(w, l, a[0])?;
                let stream = self.param_u64(w, l, a[1])?;
                let d = self.device.as_mut().expect("checked");
                let r = match d.buffers.get(&buf) {
                    Some(Some(t)) => {
                        let t = *t;
                        d.buffers.remove(&buf);
                        self.launch_kernel(t, buf, stream)?
                    }
                    _ => code::INVALID_VALUE,
                };
                (u64::from(self.result(w, l, r)), false)
            }
            DevRt::LaunchDevice => {
                let func = self.param_u64(w, l, a[0])?;
                let buf = self.param_u64(w, l, a[1])?;
                let grid = self.arg_dim3(w, l, a[2])?;
                let block = self.arg_dim3(w, l, a[3])?;
                let shared = self.arg_u32(w, l, a[4])?;
                let stream = self.param_u64(w, l, a[5])?;
                let d = self.device.as_mut().expect("checked");
                let r = match (d.buffers.contains_key(&buf), d.entry(func)) {
                    (true, Some(func)) => {
                        d.buffers.remove(&buf);
                        let t = Target {
                            func,
                            grid,
                            block,
                            shared,
                        };
                        self.launch_kernel(t, buf, stream)?
                    }
                    (true, None) => code::INVALID_DEVICE_FUNCTION,
                    (false, _) => code::INVALID_VALUE,
                };
                (u64::from(self.result(w, l, r)), false)
            }
            DevRt::StreamCreateWithFlags | DevRt::EventCreateWithFlags => {
                let at = self.param_u64(w, l, a[0])?;
                let h = self.device.as_mut().expect("checked").handle();
                self.store(w, l, Space::Generic, at, &h.to_le_bytes())?;
                (0, false)
            }
            // Every order they could ask for holds already (see the
            // module's documentation).
            DevRt::StreamDestroy
            | DevRt::EventRecord
            | DevRt::EventRecordWithFlags
            | DevRt::EventDestroy
            | DevRt::StreamWaitEvent => (0, false),
            DevRt::GetLastError | DevRt::PeekAtLastError => {
                let key = self.thread_key(w, l);
                let d = self.device.as_mut().expect("checked");
                let r = match c.call {
                    DevRt::GetLastError => d.errors.remove(&key),
                    _ => d.errors.get(&key).copied(),
                };
                (u64::from(r.unwrap_or(code::SUCCESS)), false)
            }
            DevRt::GetDevice | DevRt::GetDeviceCount => {
                let at = self.param_u64(w, l, a[0])?;
                let v: i32 = if c.call == DevRt::GetDevice { 0 } else { 1 };
                self.store(w, l, Space::Generic, at, &v.to_le_bytes())?;
                (0, false)
            }
            DevRt::Malloc => {
                let at = self.param_u64(w, l, a[0])?;
                let size = self.param_u64(w, l, a[1])?;
                let p = if size == 0 { 0 } else { self.mem.malloc(size) };
                self.store(w, l, Space::Generic, at, &p.to_le_bytes())?;
                let r = if p == 0 && size != 0 {
                    code::MEMORY_ALLOCATION
                } else {
                    code::SUCCESS
                };
                (u64::from(self.result(w, l, r)), false)
            }
            DevRt::Free => {
                let p = self.param_u64(w, l, a[0])?;
                let r = match p == 0 || self.mem.free(p).is_ok() {
                    true => code::SUCCESS,
                    false => code::INVALID_VALUE,
                };
                (u64::from(self.result(w, l, r)), false)
            }
            DevRt::MemcpyAsync => {
                let dst = self.param_u64(w, l, a[0])?;
                let src = self.param_u64(w, l, a[1])?;
                let len = self.param_u64(w, l, a[2])?;
                let kind = self.arg_u32(w, l, a[3])?;
                let stream = self.param_u64(w, l, a[4])?;
                let tail = stream == STREAM_TAIL_LAUNCH;
                // cudaMemcpyDeviceToDevice or cudaMemcpyDefault: device
                // code reaches no host memory.
                let r = match kind {
                    3 | 4 => self.queue(DeviceWork::Copy {
                        dst,
                        src,
                        len,
                        tail,
                    })?,
                    _ => code::INVALID_MEMCPY_DIRECTION,
                };
                (u64::from(self.result(w, l, r)), false)
            }
            DevRt::MemsetAsync => {
                let dst = self.param_u64(w, l, a[0])?;
                let value = self.arg_u32(w, l, a[1])? as u8;
                let len = self.param_u64(w, l, a[2])?;
                let stream = self.param_u64(w, l, a[3])?;
                let tail = stream == STREAM_TAIL_LAUNCH;
                let r = self.queue(DeviceWork::Fill {
                    dst,
                    value,
                    len,
                    tail,
                })?;
                (u64::from(self.result(w, l, r)), false)
            }
        };
        if let Some(ret) = c.ret {
            match wide {
                true => self.store(w, l, Space::Param, u64::from(ret), &value.to_le_bytes())?,
                false => {
                    let v = value as u32;
                    self.store(w, l, Space::Param, u64::from(ret), &v.to_le_bytes())?
                }
            }
        }
        Ok(())
    }

    /// Hands out a parameter buffer of `size` bytes, or of the named
    /// kernel's parameters; 0 (and the thread's last error) if none.
    fn parameter_buffer(
        &mut self,
        w: &Warp,
        l: usize,
        target: Option<(u64, [u32; 3], [u32; 3], u32)>,
        size: u64,
    ) -> Result<u64, Error> {
        let d = self.device.as_ref().expect("checked");
        let (target, size) = match target {
            None => (None, size),
            Some((func, grid, block, shared)) => match d.entry(func) {
                Some(i) => (
                    Some(Target {
                        func: i,
                        grid,
                        block,
                        shared,
                    }),
                    u64::from(d.kernels.funcs[i].param_bytes),
                ),
                None => {
                    self.result(w, l, code::INVALID_DEVICE_FUNCTION);
                    return Ok(0);
                }
            },
        };
        if d.buffers.len() >= MAX_BUFFERS {
            self.result(w, l, code::LAUNCH_PENDING_COUNT_EXCEEDED);
            return Ok(0);
        }
        let at = self.mem.malloc(size.max(1));
        if at == 0 {
            self.result(w, l, code::MEMORY_ALLOCATION);
            return Ok(0);
        }
        self.device
            .as_mut()
            .expect("checked")
            .buffers
            .insert(at, target);
        Ok(at)
    }

    /// Queues kernel `t` with the parameters in buffer `buf` (which it
    /// frees); the `cudaError_t` of the launch.
    fn launch_kernel(&mut self, t: Target, buf: u64, stream: u64) -> Result<u32, Error> {
        let d = self.device.as_ref().expect("checked");
        let n = d.kernels.funcs[t.func].param_bytes as usize;
        let mut params = vec![0u8; n];
        self.mem.read(buf, &mut params)?;
        self.mem.free(buf)?;
        if !shape_ok(t.grid, t.block, t.shared) {
            return Ok(code::INVALID_CONFIGURATION);
        }
        self.queue(DeviceWork::Kernel {
            func: t.func,
            grid: t.grid,
            block: t.block,
            shared: t.shared,
            params,
            tail: stream == STREAM_TAIL_LAUNCH,
        })
    }

    /// Queues `work` if the nesting depth and the pending count allow.
    fn queue(&mut self, work: DeviceWork) -> Result<u32, Error> {
        let d = self.device.as_ref().expect("checked");
        if d.depth + 1 >= MAX_DEPTH {
            return Ok(code::LAUNCH_MAX_DEPTH_EXCEEDED);
        }
        let items = d.pending_outside.items + d.work.len() as u64;
        let bytes = d.pending_outside.bytes + d.work_bytes + work.bytes();
        if items >= u64::from(d.pending_limit) || bytes > MAX_PENDING_BYTES {
            return Ok(code::LAUNCH_PENDING_COUNT_EXCEEDED);
        }
        self.charge_setup(BLOCK_SETUP_COST)?;
        let d = self.device.as_mut().expect("checked");
        d.work_bytes += work.bytes();
        d.work.push(work);
        Ok(code::SUCCESS)
    }

    /// Keeps `r` as lane `l`'s last error unless it is `cudaSuccess`;
    /// returns it.
    fn result(&mut self, w: &Warp, l: usize, r: u32) -> u32 {
        if r != code::SUCCESS {
            let key = self.thread_key(w, l);
            let d = self.device.as_mut().expect("checked");
            if d.errors.len() < MAX_ERRORS || d.errors.contains_key(&key) {
                d.errors.insert(key, r);
            }
        }
        r
    }

    /// Lane `l`'s thread: its block, linear in the grid, and its index in
    /// the block.
    fn thread_key(&self, w: &Warp, l: usize) -> (u64, u32) {
        let [x, y, z] = self.ctaid.map(u64::from);
        let [gx, gy, _] = self.dims.grid.map(u64::from);
        (x + gx * (y + gy * z), w.id * 32 + l as u32)
    }

    fn arg_u32(&mut self, w: &Warp, l: usize, at: u32) -> Result<u32, Error> {
        let mut b = [0u8; 4];
        self.load(w, l, Space::Param, u64::from(at), &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// A `dim3` argument (three 32-bit words).
    fn arg_dim3(&mut self, w: &Warp, l: usize, at: u32) -> Result<[u32; 3], Error> {
        Ok([
            self.arg_u32(w, l, at)?,
            self.arg_u32(w, l, at + 4)?,
            self.arg_u32(w, l, at + 8)?,
        ])
    }
}
