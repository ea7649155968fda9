//! The OpenCL request handler of one VM (`0x1000..=0x1fff`).
//!
//! Every channel that makes an OpenCL request gets one host context on the
//! host's OpenCL device ([`fairgpu_executor::opencl`]), opened on the first
//! such request of the worker. Queues, buffers, programs and kernels are
//! opaque per-channel handles; events are ids the guest chose, looked up in
//! the channel's own map. Every request is validated here before it reaches
//! the platform: handles, byte ranges against the buffer's size, argument
//! lists against the kernel's argument count, wait lists, build options.
//! Buffer bytes count against the VM's device-memory quota, shared with
//! its CUDA allocations; staged program bytes against its host-memory
//! budget.
//!
//! A program is compiled on the host, so its source must not reach the
//! host's files: `#include` directives are refused with a build log that
//! says so, `-I` options are dropped (the directories are the guest's), and
//! any option outside OpenCL's documented compiler options is refused
//! (docs/threat-model.md).

use std::collections::HashMap;
use std::sync::Arc;

use fairgpu_executor::host_memory::{HostCharge, HostMemory};
use fairgpu_executor::opencl::{self as ocl, Arg, ClHost, Event, Range};
use fairgpu_protocol::handle::{Handle, HandleError, HandleTable};
use fairgpu_protocol::opencl::*;
use fairgpu_protocol::wire::ValidRequest;
use fairgpu_protocol::{Opcode, Status};

use crate::host::{Answer, ArenaSlice};

/// `CL_DEVICE_QUEUE_PROPERTIES`.
const DEVICE_QUEUE_PROPERTIES: u32 = 0x102A;
/// `CL_DEVICE_GLOBAL_MEM_SIZE`.
const DEVICE_GLOBAL_MEM_SIZE: u32 = 0x101F;
/// `CL_DEVICE_MAX_MEM_ALLOC_SIZE`.
const DEVICE_MAX_MEM_ALLOC_SIZE: u32 = 0x1010;
/// The access bits of `cl_mem_flags` (READ_WRITE, WRITE_ONLY, READ_ONLY);
/// host-pointer bits are the guest library's business.
const MEM_ACCESS: u64 = 0x7;
/// Most live objects of each kind per channel.
const MAX_OBJECTS: usize = 1 << 16;
/// Most bytes of a build log returned.
const MAX_LOG: usize = 1 << 20;

struct Buffer {
    mem: ocl::Mem,
    size: u64,
    /// Quota bytes this buffer holds (0 for a sub-buffer).
    charged: u64,
    /// An image's extent (pixels; array layers last), element size and
    /// format (channel order, channel type).
    image: Option<([u64; 3], u64, (u32, u32))>,
}

struct Program {
    program: ocl::Program,
    built: bool,
    /// The binary, once asked for (paged out by offset).
    binary: Option<Vec<u8>>,
    /// Our own log, for a build refused before it reached the compiler.
    refused: Option<String>,
}

struct Kernel {
    kernel: ocl::Kernel,
    nargs: u32,
    /// What each argument takes, when the platform reports argument
    /// information (programs are built with `-cl-kernel-arg-info`).
    specs: Option<Vec<ArgSpec>>,
}

/// What one kernel argument takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArgSpec {
    /// A buffer (`__global` or `__constant` pointer), or NULL.
    Buffer,
    /// An image (`image2d_t`, …).
    Image,
    /// A sampler (`sampler_t`).
    Sampler,
    /// `__local` memory: a size.
    Local,
    /// By-value bytes.
    Value,
}

impl ArgSpec {
    /// From an argument's address qualifier and type name.
    fn of(qual: u32, type_name: &str) -> Option<ArgSpec> {
        let t = type_name.trim();
        // The image types are `image1d_t` … `image2d_array_depth_t`; a
        // pointer to a struct named `imagedata` is a buffer.
        let image = t.starts_with("image") && t.ends_with("_t") && !t.contains(['*', ' ']);
        Some(if image {
            ArgSpec::Image
        } else if t == "sampler_t" {
            ArgSpec::Sampler
        } else {
            match qual {
                ADDRESS_GLOBAL | ADDRESS_CONSTANT => ArgSpec::Buffer,
                ADDRESS_LOCAL => ArgSpec::Local,
                ADDRESS_PRIVATE => ArgSpec::Value,
                _ => return None,
            }
        })
    }
}

/// `CL_KERNEL_ARG_TYPE_NAME`.
const KERNEL_ARG_TYPE_NAME: u32 = 0x1198;

/// `CL_KERNEL_ARG_ADDRESS_QUALIFIER`.
const KERNEL_ARG_ADDRESS_QUALIFIER: u32 = 0x1196;
/// `CL_KERNEL_ARG_ADDRESS_GLOBAL`, `_LOCAL`, `_CONSTANT`, `_PRIVATE`.
const ADDRESS_GLOBAL: u32 = 0x119B;
const ADDRESS_LOCAL: u32 = 0x119C;
const ADDRESS_CONSTANT: u32 = 0x119D;
const ADDRESS_PRIVATE: u32 = 0x119E;

/// Whether argument `a` may be set on an argument that takes `spec`
/// (`image`: whether a memory handle names an image): a buffer pointer
/// takes a buffer (by-value bytes there would be a pointer the guest made
/// up, which a platform dereferences: PoCL crashes), an image an image, a
/// sampler a sampler, `__local` a size, anything else bytes.
fn arg_fits(spec: ArgSpec, a: &KernelArg, image: impl Fn(u64) -> Option<bool>) -> bool {
    match (spec, a) {
        (ArgSpec::Buffer, KernelArg::Mem(0)) => true,
        (ArgSpec::Buffer, KernelArg::Mem(h)) => image(*h) == Some(false),
        (ArgSpec::Image, KernelArg::Mem(h)) => image(*h) == Some(true),
        (ArgSpec::Sampler, KernelArg::Sampler(_))
        | (ArgSpec::Local, KernelArg::Local(_))
        | (ArgSpec::Value, KernelArg::Bytes(_)) => true,
        _ => false,
    }
}

/// One channel's OpenCL state. Field order is drop order: objects before
/// their context.
struct Channel {
    /// Which of the worker's channel lives this is (marks of an earlier
    /// one are void).
    generation: u64,
    /// `events` accounting's marks: markers by mark id.
    marks: HashMap<u64, Event>,
    next_mark: u64,
    /// The end of the last command counted (device clock, ns).
    last_end: u64,
    /// Events of the device work issued, oldest first, whose device time
    /// is not yet counted.
    timed: std::collections::VecDeque<Event>,
    events: HashMap<u64, Event>,
    kernels: HandleTable<Kernel>,
    samplers: HandleTable<ocl::Sampler>,
    programs: HandleTable<Program>,
    buffers: HandleTable<Buffer>,
    queues: HandleTable<ocl::Queue>,
    internal: ocl::Queue,
    staging: Vec<u8>,
    staging_total: u64,
    staging_charge: HostCharge,
    _ctx: ocl::Context,
}

/// The OpenCL side of a VM's worker.
pub struct ClOps {
    vm: String,
    host: Option<Result<ClHost, String>>,
    channels: Vec<Option<Channel>>,
    host_memory: Arc<HostMemory>,
    /// Bytes of OpenCL buffers live (all channels).
    used: u64,
    /// Device time of the OpenCL work completed, ns (profiling start to
    /// end of each command).
    device_ns: u64,
    /// Channel lives begun.
    generations: u64,
}

/// Most accounting marks one channel holds.
const MAX_MARKS: usize = 1024;

/// Most commands one channel has timed but not counted: beyond, the
/// oldest is waited for.
const MAX_TIMED: usize = 4096;

impl std::fmt::Debug for ClOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClOps")
            .field("vm", &self.vm)
            .field("used", &self.used)
            .finish_non_exhaustive()
    }
}

fn cl(e: i32) -> Status {
    cl_status(e)
}

fn handle_err(kind: i32) -> impl Fn(HandleError) -> Status {
    move |e| match e {
        HandleError::Invalid(_) => cl(kind),
        HandleError::Full(_) => cl(CL_OUT_OF_RESOURCES),
    }
}

fn vals(v: &[u64]) -> Answer {
    let mut a = Answer::default();
    a.vals[..v.len()].copy_from_slice(v);
    a
}

/// Writes as much of `value` as the arena slice holds from `from`; `vals[0]`
/// is the value's full size.
fn info_answer(value: &[u8], from: usize, arena: &ArenaSlice<'_>) -> Result<Answer, Status> {
    let rest = value.get(from..).ok_or(cl(CL_INVALID_VALUE))?;
    let n = rest.len().min(arena.len());
    arena.write(0, &rest[..n])?;
    Ok(Answer {
        vals: [value.len() as u64, 0, 0, 0, 0],
        out_len: n as u32,
    })
}

fn read_arena(arena: &ArenaSlice<'_>) -> Result<Vec<u8>, Status> {
    let mut b = vec![0u8; arena.len()];
    arena.read(0, &mut b)?;
    Ok(b)
}

fn in_range(offset: u64, len: u64, size: u64) -> Result<(), Status> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(cl(CL_INVALID_VALUE)),
    }
}

/// The options a program is built with: OpenCL's documented compiler
/// options only; `-I dir` is dropped (a guest directory). `Err` names the
/// option refused.
pub fn sanitize_options(options: &str) -> Result<String, String> {
    let mut out = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-I" {
            words.next();
            continue;
        }
        if w.starts_with("-I") {
            continue;
        }
        if w == "-D" {
            let def = words
                .next()
                .ok_or_else(|| "-D without a name".to_string())?;
            out.push(format!("-D{def}"));
            continue;
        }
        let ok = w.starts_with("-D")
            || w.starts_with("-cl-")
            || matches!(
                w,
                "-w" | "-Werror" | "-g" | "-create-library" | "-enable-link-options"
            );
        if !ok {
            return Err(w.to_string());
        }
        out.push(w.to_string());
    }
    Ok(out.join(" "))
}

/// The first line of `src` that would have the compiler look at a file:
/// an `#include` (`#include_next`, `#import`, `#embed`) directive or a
/// `__has_include` test.
pub fn include_line(src: &[u8]) -> Option<usize> {
    src.split(|&b| b == b'\n').position(|line| {
        let t = line.trim_ascii_start();
        let directive = t.first() == Some(&b'#') && {
            let d = t[1..].trim_ascii_start();
            d.starts_with(b"include") || d.starts_with(b"import") || d.starts_with(b"embed")
        };
        directive || line.windows(13).any(|w| w == b"__has_include")
    })
}

impl ClOps {
    /// The OpenCL handler of VM `vm`.
    pub fn new(vm: String, host_memory: Arc<HostMemory>) -> ClOps {
        ClOps {
            vm,
            host: None,
            channels: Vec::new(),
            host_memory,
            used: 0,
            device_ns: 0,
            generations: 0,
        }
    }

    /// Bytes of OpenCL buffers live.
    pub fn used(&self) -> u64 {
        self.used
    }

    fn host(&mut self) -> Result<&ClHost, Status> {
        let vm = &self.vm;
        let h = self.host.get_or_insert_with(|| {
            let want = std::env::var("FAIRGPU_OPENCL_PLATFORM").ok();
            let r = ClHost::open(want.as_deref());
            match &r {
                Ok(h) => {
                    tracing::info!(vm = %vm, platform = %h.platform_name, "OpenCL platform opened")
                }
                Err(e) => tracing::warn!(vm = %vm, "OpenCL requests fail: {e}"),
            }
            r
        });
        h.as_ref().map_err(|_| cl(CL_OUT_OF_RESOURCES))
    }

    fn channel(&mut self, ch: u32) -> Result<(&ClHost, &mut Channel), Status> {
        let i = ch as usize;
        if self.channels.len() <= i {
            self.channels.resize_with(i + 1, || None);
        }
        if self.channels[i].is_none() {
            let budget = self.host_memory.clone();
            let host = self.host()?;
            let ctx = host.context().map_err(cl)?;
            let internal = host.queue(&ctx, 0).map_err(cl)?;
            self.generations += 1;
            self.channels[i] = Some(Channel {
                generation: self.generations,
                marks: HashMap::new(),
                next_mark: 0,
                last_end: 0,
                timed: std::collections::VecDeque::new(),
                events: HashMap::new(),
                kernels: HandleTable::new(MAX_OBJECTS),
                samplers: HandleTable::new(MAX_OBJECTS),
                programs: HandleTable::new(MAX_OBJECTS),
                buffers: HandleTable::new(MAX_OBJECTS),
                queues: HandleTable::new(MAX_OBJECTS),
                internal,
                staging: Vec::new(),
                staging_total: 0,
                staging_charge: budget.empty(),
                _ctx: ctx,
            });
            tracing::debug!(vm = %self.vm, channel = ch, "OpenCL context created");
        }
        let host = self
            .host
            .as_ref()
            .and_then(|h| h.as_ref().ok())
            .ok_or(cl(CL_OUT_OF_RESOURCES))?;
        let cx = self.channels[i].as_mut().ok_or(cl(CL_OUT_OF_RESOURCES))?;
        Ok((host, cx))
    }

    /// Device time of the OpenCL work completed so far, ns.
    pub fn device_time_ns(&mut self) -> u64 {
        for cx in self.channels.iter_mut().flatten() {
            self.device_ns += count_completed(cx, false);
        }
        self.device_ns
    }

    /// `events` accounting: a marker on queue `queue` of channel `ch`
    /// (complete when everything queued before it is), as (channel life,
    /// mark id).
    pub fn mark(&mut self, ch: u32, queue_h: u64) -> Option<(u64, u64)> {
        let cx = self.channels.get_mut(ch as usize)?.as_mut()?;
        if cx.marks.len() >= MAX_MARKS {
            return None;
        }
        let ev = queue(cx, queue_h).ok()?.marker().ok()?;
        cx.next_mark += 1;
        cx.marks.insert(cx.next_mark, ev);
        Some((cx.generation, cx.next_mark))
    }

    fn mark_event(&self, ch: u32, generation: u64, id: u64) -> Option<&Event> {
        let cx = self.channels.get(ch as usize)?.as_ref()?;
        if cx.generation != generation {
            return None;
        }
        cx.marks.get(&id)
    }

    /// Whether a mark is complete; `None` if void or failed.
    pub fn mark_done(&self, ch: u32, generation: u64, id: u64) -> Option<bool> {
        match self.mark_event(ch, generation, id)?.status().ok()? {
            0 => Some(true),
            s if s > 0 => Some(false),
            _ => None,
        }
    }

    /// Device nanoseconds from mark `a` to mark `b` (their completion
    /// times).
    pub fn mark_elapsed_ns(&self, ch: u32, generation: u64, a: u64, b: u64) -> Option<i64> {
        let ta = self.mark_event(ch, generation, a)?.profiling().ok()?[3];
        let tb = self.mark_event(ch, generation, b)?.profiling().ok()?[3];
        Some(tb as i64 - ta as i64)
    }

    /// Forgets a mark.
    pub fn unmark(&mut self, ch: u32, generation: u64, id: u64) {
        if let Some(Some(cx)) = self.channels.get_mut(ch as usize) {
            if cx.generation == generation {
                cx.marks.remove(&id);
            }
        }
    }

    /// Whether channel `ch` has OpenCL state.
    pub fn active(&self, ch: u32) -> bool {
        matches!(self.channels.get(ch as usize), Some(Some(_)))
    }

    /// Finishes every queue of channel `ch` (the accounting's synchronize).
    pub fn finish(&mut self, ch: u32) {
        if let Some(Some(cx)) = self.channels.get_mut(ch as usize) {
            let _ = cx.internal.finish();
            for q in cx.queues.values() {
                let _ = q.finish();
            }
            self.device_ns += count_completed(cx, false);
        }
    }

    /// Frees everything channel `ch` made.
    pub fn reset(&mut self, ch: u32) {
        if let Some(cx) = self.channels.get_mut(ch as usize).and_then(Option::take) {
            let freed: u64 = cx.buffers.values().map(|b| b.charged).sum();
            self.used -= freed;
            // Queued work finishes before its objects go.
            for q in cx.queues.values() {
                let _ = q.finish();
            }
            let _ = cx.internal.finish();
            let mut cx = cx;
            self.device_ns += count_completed(&mut cx, true);
            drop(cx);
            tracing::debug!(vm = %self.vm, channel = ch, freed, "OpenCL context destroyed");
        }
    }

    /// Handles one OpenCL request of channel `ch`. `quota_left` is what the
    /// VM may still allocate (its CUDA allocations included).
    pub fn handle(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        arena: &ArenaSlice<'_>,
        quota: u64,
        quota_left: u64,
    ) -> Result<Answer, Status> {
        let a = req.args;
        let param = |v: u64| u32::try_from(v).map_err(|_| cl(CL_INVALID_VALUE));
        match req.op {
            Opcode::ClGetDeviceInfo => {
                let p = param(a[0])?;
                let host = self.host()?;
                let mut v = host.device_info(p, MAX_INFO_BYTES).map_err(cl)?;
                if matches!(p, DEVICE_GLOBAL_MEM_SIZE | DEVICE_MAX_MEM_ALLOC_SIZE) && v.len() == 8 {
                    let n = u64::from_le_bytes(v[..8].try_into().expect("8 bytes"));
                    v.copy_from_slice(&n.min(quota).to_le_bytes());
                }
                return info_answer(&v, 0, arena);
            }
            Opcode::ClGetPlatformInfo => {
                let v = self
                    .host()?
                    .platform_info(param(a[0])?, MAX_INFO_BYTES)
                    .map_err(cl)?;
                return info_answer(&v, 0, arena);
            }
            _ => {}
        }
        let budget_used = self.used;
        let (host, cx) = self.channel(ch)?;
        let want_event = |id: u64, cx: &Channel| -> Result<bool, Status> {
            if id == 0 {
                return Ok(false);
            }
            if cx.events.contains_key(&id) {
                return Err(cl(CL_INVALID_EVENT));
            }
            if cx.events.len() >= MAX_EVENTS {
                return Err(cl(CL_OUT_OF_RESOURCES));
            }
            Ok(true)
        };
        match req.op {
            Opcode::ClGetDeviceInfo | Opcode::ClGetPlatformInfo => unreachable!("answered above"),
            Opcode::ClCreateQueue => {
                const OUT_OF_ORDER: u64 = 1 << 0;
                const PROFILING: u64 = 1 << 1;
                let supported = host
                    .device_info(DEVICE_QUEUE_PROPERTIES, 8)
                    .ok()
                    .and_then(|v| Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?)))
                    .unwrap_or(0);
                if a[0] & !(PROFILING | (supported & OUT_OF_ORDER)) != 0 {
                    return Err(cl(-35)); // CL_INVALID_QUEUE_PROPERTIES
                }
                // Always profiled on the host: the accounting may use it.
                let q = host
                    .queue(&cx._ctx, PROFILING | (a[0] & OUT_OF_ORDER))
                    .map_err(cl)?;
                let h = cx
                    .queues
                    .insert(q)
                    .map_err(handle_err(CL_OUT_OF_RESOURCES))?;
                Ok(vals(&[h.0]))
            }
            Opcode::ClReleaseQueue => {
                let q = cx
                    .queues
                    .remove(Handle(a[0]))
                    .map_err(handle_err(CL_INVALID_COMMAND_QUEUE))?;
                let _ = q.finish();
                Ok(Answer::default())
            }
            Opcode::ClFinish | Opcode::ClFlush => {
                let q = queue(cx, a[0])?;
                let r = if req.op == Opcode::ClFinish {
                    q.finish()
                } else {
                    q.flush()
                };
                r.map_err(cl)?;
                Ok(Answer::default())
            }
            Opcode::ClCreateBuffer => {
                let size = a[1];
                if size == 0 {
                    return Err(cl(CL_INVALID_BUFFER_SIZE));
                }
                if size > quota_left {
                    return Err(cl(CL_MEM_OBJECT_ALLOCATION_FAILURE));
                }
                let mem = host.buffer(&cx._ctx, a[0] & MEM_ACCESS, size).map_err(cl)?;
                let h = cx
                    .buffers
                    .insert(Buffer {
                        mem,
                        size,
                        charged: size,
                        image: None,
                    })
                    .map_err(handle_err(CL_OUT_OF_RESOURCES))?;
                self.used = budget_used + size;
                Ok(vals(&[h.0]))
            }
            Opcode::ClCreateSubBuffer => {
                let parent = buffer(cx, a[0])?;
                if a[3] == 0 {
                    return Err(cl(CL_INVALID_BUFFER_SIZE));
                }
                in_range(a[2], a[3], parent.size)?;
                let mem = host
                    .sub_buffer(&parent.mem, a[1] & MEM_ACCESS, a[2], a[3])
                    .map_err(cl)?;
                let h = cx
                    .buffers
                    .insert(Buffer {
                        mem,
                        size: a[3],
                        charged: 0,
                        image: None,
                    })
                    .map_err(handle_err(CL_OUT_OF_RESOURCES))?;
                Ok(vals(&[h.0]))
            }
            Opcode::ClReleaseMem => {
                let b = cx
                    .buffers
                    .remove(Handle(a[0]))
                    .map_err(handle_err(CL_INVALID_MEM_OBJECT))?;
                self.used = budget_used - b.charged;
                Ok(Answer::default())
            }
            Opcode::ClWriteBuffer => {
                let data = read_arena(arena)?;
                let b = buffer(cx, a[1])?;
                in_range(a[2], data.len() as u64, b.size)?;
                want_event(a[4], cx)?;
                let want = true;
                let q = queue(cx, a[0])?;
                let b = buffer(cx, a[1])?;
                let ev = q.write(&b.mem, a[2], &data, &[], want).map_err(cl)?;
                keep_event(cx, a[4], ev);
                Ok(Answer::default())
            }
            Opcode::ClReadBuffer => {
                let b = buffer(cx, a[1])?;
                in_range(a[2], arena.len() as u64, b.size)?;
                want_event(a[4], cx)?;
                let want = true;
                let mut out = vec![0u8; arena.len()];
                let q = queue(cx, a[0])?;
                let ev = q.read(&b.mem, a[2], &mut out, &[], want).map_err(cl)?;
                keep_event(cx, a[4], ev);
                arena.write(0, &out)?;
                Ok(Answer {
                    vals: [0; 5],
                    out_len: out.len() as u32,
                })
            }
            Opcode::ClCopyBuffer => {
                let w = decode_words(&read_arena(arena)?)
                    .filter(|w| w.len() == 3)
                    .ok_or(cl(CL_INVALID_VALUE))?;
                let (so, dof, size) = (w[0], w[1], w[2]);
                let (src, dst) = (buffer(cx, a[1])?, buffer(cx, a[2])?);
                if size == 0 {
                    return Err(cl(CL_INVALID_VALUE));
                }
                in_range(so, size, src.size)?;
                in_range(dof, size, dst.size)?;
                want_event(a[4], cx)?;
                let want = true;
                let q = queue(cx, a[0])?;
                let ev = q
                    .copy(&src.mem, &dst.mem, so, dof, size, &[], want)
                    .map_err(cl)?;
                keep_event(cx, a[4], ev);
                Ok(Answer::default())
            }
            Opcode::ClFillBuffer => {
                let pattern = read_arena(arena)?;
                let n = pattern.len() as u64;
                if pattern.is_empty()
                    || pattern.len() > MAX_PATTERN
                    || !n.is_power_of_two()
                    || !a[2].is_multiple_of(n)
                    || !a[3].is_multiple_of(n)
                {
                    return Err(cl(CL_INVALID_VALUE));
                }
                let b = buffer(cx, a[1])?;
                in_range(a[2], a[3], b.size)?;
                want_event(a[4], cx)?;
                let want = true;
                let q = queue(cx, a[0])?;
                let ev = q
                    .fill(&b.mem, &pattern, a[2], a[3], &[], want)
                    .map_err(cl)?;
                keep_event(cx, a[4], ev);
                Ok(Answer::default())
            }
            Opcode::ClCreateImage => {
                let raw = read_arena(arena)?;
                let desc = ImageDesc::from_bytes(
                    raw.get(..IMAGE_DESC)
                        .and_then(|b| b.try_into().ok())
                        .ok_or(cl(CL_INVALID_VALUE))?,
                );
                let extent = desc.extent().ok_or(cl(CL_INVALID_IMAGE_DESCRIPTOR))?;
                if desc.reserved != 0 {
                    return Err(cl(CL_INVALID_VALUE));
                }
                if extent.contains(&0) {
                    return Err(cl(CL_INVALID_IMAGE_SIZE));
                }
                let img = host
                    .image(
                        &cx._ctx,
                        a[0] & MEM_ACCESS,
                        (desc.order, desc.channel_type),
                        (
                            desc.image_type,
                            [desc.width, desc.height, desc.depth, desc.array_size],
                        ),
                    )
                    .map_err(cl)?;
                if img.bytes > quota_left {
                    return Err(cl(CL_MEM_OBJECT_ALLOCATION_FAILURE));
                }
                let (elem, bytes) = (img.elem, img.bytes);
                if elem == 0 {
                    return Err(cl(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR));
                }
                let h = cx
                    .buffers
                    .insert(Buffer {
                        mem: img.mem,
                        size: bytes,
                        charged: bytes,
                        image: Some((extent, elem, (desc.order, desc.channel_type))),
                    })
                    .map_err(handle_err(CL_OUT_OF_RESOURCES))?;
                self.used = budget_used + bytes;
                Ok(vals(&[h.0, elem, bytes]))
            }
            Opcode::ClImageFormats => {
                let t = param(a[1])?;
                let fmts = host
                    .image_formats(&cx._ctx, a[0] & MEM_ACCESS, t, MAX_INFO_BYTES / 8)
                    .map_err(cl)?;
                let bytes: Vec<u8> = fmts
                    .iter()
                    .flat_map(|(o, t)| o.to_le_bytes().into_iter().chain(t.to_le_bytes()))
                    .collect();
                let mut ans = info_answer(&bytes, 0, arena)?;
                ans.vals[0] = fmts.len() as u64;
                Ok(ans)
            }
            Opcode::ClWriteImage | Opcode::ClReadImage => {
                let raw = read_arena(arena)?;
                let r = ImageRegion::from_bytes(&raw).ok_or(cl(CL_INVALID_VALUE))?;
                let (_, extent, elem, _) = image(cx, a[1])?;
                in_image(r.origin, r.region, extent)?;
                let n = r.bytes(elem).ok_or(cl(CL_INVALID_VALUE))?;
                want_event(a[4], cx)?;
                let q = queue(cx, a[0])?;
                let (mem, ..) = image(cx, a[1])?;
                let ev = if req.op == Opcode::ClWriteImage {
                    let data = raw.get(IMAGE_REGION..).unwrap_or_default();
                    if data.len() as u64 != n {
                        return Err(cl(CL_INVALID_VALUE));
                    }
                    q.write_image(mem, r.origin, r.region, data, true)
                        .map_err(cl)?
                } else {
                    if n > arena.len() as u64 {
                        return Err(cl(CL_INVALID_VALUE));
                    }
                    let mut out = vec![0u8; n as usize];
                    let ev = q
                        .read_image(mem, r.origin, r.region, &mut out, true)
                        .map_err(cl)?;
                    arena.write(0, &out)?;
                    keep_event(cx, a[4], ev);
                    return Ok(Answer {
                        vals: [n, 0, 0, 0, 0],
                        out_len: n as u32,
                    });
                };
                keep_event(cx, a[4], ev);
                Ok(Answer::default())
            }
            Opcode::ClCopyImage => {
                let w = words(arena, 9)?;
                let (so, dof, region) = (three(&w[0..3]), three(&w[3..6]), three(&w[6..9]));
                let (src, se, _, s_format) = image(cx, a[1])?;
                let (dst, de, _, d_format) = image(cx, a[2])?;
                in_image(so, region, se)?;
                in_image(dof, region, de)?;
                if s_format != d_format {
                    return Err(cl(CL_IMAGE_FORMAT_MISMATCH));
                }
                want_event(a[4], cx)?;
                let ev = queue(cx, a[0])?
                    .copy_image(src, dst, [so, dof, region], true)
                    .map_err(cl)?;
                keep_event(cx, a[4], ev);
                Ok(Answer::default())
            }
            Opcode::ClCopyImageToBuffer | Opcode::ClCopyBufferToImage => {
                let w = words(arena, 7)?;
                let to_buffer = req.op == Opcode::ClCopyImageToBuffer;
                let (origin, region, offset) = if to_buffer {
                    (three(&w[0..3]), three(&w[3..6]), w[6])
                } else {
                    (three(&w[1..4]), three(&w[4..7]), w[0])
                };
                let (ih, bh) = if to_buffer {
                    (a[1], a[2])
                } else {
                    (a[2], a[1])
                };
                let (img, extent, elem, _) = image(cx, ih)?;
                let buf = buffer(cx, bh)?;
                in_image(origin, region, extent)?;
                let n = (ImageRegion { origin, region })
                    .bytes(elem)
                    .ok_or(cl(CL_INVALID_VALUE))?;
                in_range(offset, n, buf.size)?;
                want_event(a[4], cx)?;
                let q = queue(cx, a[0])?;
                let ev = if to_buffer {
                    q.copy_image_to_buffer(img, &buf.mem, [origin, region], offset, true)
                } else {
                    q.copy_buffer_to_image(&buf.mem, img, offset, [origin, region], true)
                }
                .map_err(cl)?;
                keep_event(cx, a[4], ev);
                Ok(Answer::default())
            }
            Opcode::ClCreateSampler => {
                if a[0] > 1 {
                    return Err(cl(CL_INVALID_VALUE));
                }
                let smp = host
                    .sampler(&cx._ctx, a[0] == 1, param(a[1])?, param(a[2])?)
                    .map_err(cl)?;
                let h = cx
                    .samplers
                    .insert(smp)
                    .map_err(handle_err(CL_OUT_OF_RESOURCES))?;
                Ok(vals(&[h.0]))
            }
            Opcode::ClReleaseSampler => {
                cx.samplers
                    .remove(Handle(a[0]))
                    .map_err(handle_err(CL_INVALID_SAMPLER))?;
                Ok(Answer::default())
            }
            Opcode::ClProgramStage => {
                let (off, total) = (a[0], a[1]);
                if total == 0 || total > MAX_PROGRAM_BYTES {
                    return Err(cl(CL_INVALID_VALUE));
                }
                if off == 0 {
                    cx.staging = Vec::new();
                    cx.staging_charge
                        .resize(total, "a staged OpenCL program")
                        .map_err(|_| cl(CL_OUT_OF_HOST_MEMORY))?;
                    cx.staging = Vec::with_capacity(total as usize);
                    cx.staging_total = total;
                }
                let end = off
                    .checked_add(arena.len() as u64)
                    .ok_or(cl(CL_INVALID_VALUE))?;
                if off != cx.staging.len() as u64 || total != cx.staging_total || end > total {
                    return Err(cl(CL_INVALID_VALUE));
                }
                let start = cx.staging.len();
                cx.staging.resize(end as usize, 0);
                arena.read(0, &mut cx.staging[start..])?;
                Ok(Answer::default())
            }
            Opcode::ClBuildProgram => {
                if a[0] > 1
                    || a[1] == 0
                    || a[1] != cx.staging.len() as u64
                    || a[1] != cx.staging_total
                {
                    return Err(cl(CL_INVALID_VALUE));
                }
                let raw = read_arena(arena)?;
                if raw.len() > MAX_BUILD_OPTIONS {
                    return Err(cl(CL_INVALID_BUILD_OPTIONS));
                }
                let options = String::from_utf8(raw).map_err(|_| cl(CL_INVALID_BUILD_OPTIONS))?;
                if a[2] != 0 {
                    cx.programs
                        .remove(Handle(a[2]))
                        .map_err(handle_err(CL_INVALID_PROGRAM))?;
                }
                let bytes = std::mem::take(&mut cx.staging);
                cx.staging_total = 0;
                let _ = cx.staging_charge.resize(0, "a staged OpenCL program");
                let options = match sanitize_options(&options) {
                    // Argument information lets launches be checked
                    // against the kernel's address qualifiers.
                    Ok(o) if !o.split_whitespace().any(|w| w == "-cl-kernel-arg-info") => {
                        format!("{o} -cl-kernel-arg-info")
                    }
                    Ok(o) => o,
                    Err(bad) => {
                        tracing::info!(vm = %self.vm, option = %bad, "OpenCL build option refused");
                        return Err(cl(CL_INVALID_BUILD_OPTIONS));
                    }
                };
                let (program, refused) = if a[0] == 0 {
                    let p = host.program_from_source(&cx._ctx, &bytes).map_err(cl)?;
                    let refused = include_line(&bytes).map(|line| {
                        format!(
                            "<source>:{}: error: the program names a file (#include, __has_include): it is compiled on the host, which has none of the guest's files; fairgpu's guest library inlines the headers it finds, so this one was not found there\n",
                            line + 1
                        )
                    });
                    (p, refused)
                } else {
                    (
                        host.program_from_binary(&cx._ctx, &bytes).map_err(cl)?,
                        None,
                    )
                };
                let status = if refused.is_some() {
                    CL_BUILD_PROGRAM_FAILURE
                } else {
                    host.build(&program, &options)
                };
                let h = cx
                    .programs
                    .insert(Program {
                        program,
                        built: status == CL_SUCCESS,
                        binary: None,
                        refused,
                    })
                    .map_err(handle_err(CL_OUT_OF_RESOURCES))?;
                Ok(vals(&[h.0, i64::from(status) as u64]))
            }
            Opcode::ClProgramLog => {
                let p = program(cx, a[0])?;
                let log = match &p.refused {
                    Some(r) => r.clone().into_bytes(),
                    None => host.build_log(&p.program, MAX_LOG).map_err(cl)?,
                };
                info_answer(&log, 0, arena)
            }
            Opcode::ClProgramBinary => {
                let p = cx
                    .programs
                    .get_mut(Handle(a[0]))
                    .map_err(handle_err(CL_INVALID_PROGRAM))?;
                if !p.built {
                    return Err(cl(CL_INVALID_PROGRAM_EXECUTABLE));
                }
                if p.binary.is_none() {
                    p.binary = Some(
                        host.binary(&p.program, MAX_PROGRAM_BYTES as usize)
                            .map_err(cl)?,
                    );
                }
                let from = usize::try_from(a[1]).map_err(|_| cl(CL_INVALID_VALUE))?;
                info_answer(p.binary.as_deref().unwrap_or_default(), from, arena)
            }
            Opcode::ClProgramKernelNames => {
                let p = program(cx, a[0])?;
                if !p.built {
                    return Err(cl(CL_INVALID_PROGRAM_EXECUTABLE));
                }
                let names = host.kernel_names(&p.program, MAX_INFO_BYTES).map_err(cl)?;
                info_answer(&names, 0, arena)
            }
            Opcode::ClReleaseProgram => {
                cx.programs
                    .remove(Handle(a[0]))
                    .map_err(handle_err(CL_INVALID_PROGRAM))?;
                Ok(Answer::default())
            }
            Opcode::ClCreateKernel => {
                let len = usize::try_from(a[1]).map_err(|_| cl(CL_INVALID_VALUE))?;
                if len == 0 || len > 4096 || len > arena.len() {
                    return Err(cl(CL_INVALID_VALUE));
                }
                let mut name = vec![0u8; len];
                arena.read(0, &mut name)?;
                let name = String::from_utf8(name).map_err(|_| cl(CL_INVALID_KERNEL_NAME))?;
                if name.contains('\0') {
                    return Err(cl(CL_INVALID_KERNEL_NAME));
                }
                let p = program(cx, a[0])?;
                if !p.built {
                    return Err(cl(CL_INVALID_PROGRAM_EXECUTABLE));
                }
                let (kernel, nargs) = host.kernel(&p.program, &name).map_err(cl)?;
                if nargs > MAX_KERNEL_ARGS {
                    return Err(cl(CL_OUT_OF_RESOURCES));
                }
                let specs = (0..nargs)
                    .map(|i| {
                        let q = host
                            .arg_info(&kernel, i, KERNEL_ARG_ADDRESS_QUALIFIER, 4)
                            .ok()?;
                        let q = u32::from_le_bytes(q.get(..4)?.try_into().ok()?);
                        let t = host.arg_info(&kernel, i, KERNEL_ARG_TYPE_NAME, 1024).ok()?;
                        ArgSpec::of(q, &ocl::cstr(&t))
                    })
                    .collect::<Option<Vec<ArgSpec>>>();
                if specs.is_none() && nargs > 0 {
                    tracing::debug!(kernel = %name, "no argument information: by-value arguments are not checked against buffer pointers");
                }
                let h = cx
                    .kernels
                    .insert(Kernel {
                        kernel,
                        nargs,
                        specs,
                    })
                    .map_err(handle_err(CL_OUT_OF_RESOURCES))?;
                Ok(vals(&[h.0, u64::from(nargs)]))
            }
            Opcode::ClReleaseKernel => {
                cx.kernels
                    .remove(Handle(a[0]))
                    .map_err(handle_err(CL_INVALID_KERNEL))?;
                Ok(Answer::default())
            }
            Opcode::ClKernelWorkGroupInfo => {
                let k = kernel(cx, a[0])?;
                let v = host
                    .work_group_info(&k.kernel, param(a[1])?, MAX_INFO_BYTES)
                    .map_err(cl)?;
                info_answer(&v, 0, arena)
            }
            Opcode::ClKernelArgInfo => {
                let k = kernel(cx, a[0])?;
                let index = param(a[1])?;
                if index >= k.nargs {
                    return Err(cl(CL_INVALID_ARG_INDEX));
                }
                let v = host
                    .arg_info(&k.kernel, index, param(a[2])?, MAX_INFO_BYTES)
                    .map_err(cl)?;
                info_answer(&v, 0, arena)
            }
            Opcode::ClNdRange => {
                let raw = read_arena(arena)?;
                if raw.len() < NDRANGE_HEADER {
                    return Err(cl(CL_INVALID_VALUE));
                }
                let hdr =
                    NdRangeHeader::from_bytes(raw[..NDRANGE_HEADER].try_into().expect("header"));
                let range = nd_range(&hdr)?;
                let k = kernel(cx, a[1])?;
                if hdr.nargs != k.nargs {
                    return Err(cl(CL_INVALID_KERNEL_ARGS));
                }
                let decoded = decode_args(&raw[NDRANGE_HEADER..], hdr.nargs)
                    .map_err(|_| cl(CL_INVALID_ARG_VALUE))?;
                let unknown = |h: u64| h != 0 && cx.buffers.get(Handle(h)).is_err();
                if decoded
                    .iter()
                    .any(|a| matches!(a, KernelArg::Mem(h) if unknown(*h)))
                {
                    return Err(cl(CL_INVALID_MEM_OBJECT));
                }
                if let Some(specs) = &k.specs {
                    let image = |h: u64| cx.buffers.get(Handle(h)).ok().map(|b| b.image.is_some());
                    if specs
                        .iter()
                        .zip(&decoded)
                        .any(|(&s, a)| !arg_fits(s, a, image))
                    {
                        return Err(cl(CL_INVALID_ARG_VALUE));
                    }
                }
                let mut args = Vec::with_capacity(decoded.len());
                for d in &decoded {
                    args.push(match d {
                        KernelArg::Bytes(b) => Arg::Bytes(b),
                        KernelArg::Mem(0) => Arg::Mem(None),
                        KernelArg::Mem(h) => Arg::Mem(Some(
                            &cx.buffers
                                .get(Handle(*h))
                                .map_err(handle_err(CL_INVALID_MEM_OBJECT))?
                                .mem,
                        )),
                        KernelArg::Local(n) => Arg::Local(*n as usize),
                        KernelArg::Sampler(h) => Arg::Sampler(
                            cx.samplers
                                .get(Handle(*h))
                                .map_err(handle_err(CL_INVALID_SAMPLER))?,
                        ),
                    });
                }
                want_event(a[4], cx)?;
                let want = true;
                let q = queue(cx, a[0])?;
                if a[0] == 0 {
                    return Err(cl(CL_INVALID_COMMAND_QUEUE));
                }
                let ev = q
                    .nd_range(&k.kernel, &args, &range, &[], want)
                    .map_err(cl)?;
                keep_event(cx, a[4], ev);
                Ok(Answer::default())
            }
            Opcode::ClMarker => {
                if a[4] == 0 {
                    return Err(cl(CL_INVALID_VALUE));
                }
                want_event(a[4], cx)?;
                let ev = queue(cx, a[0])?.marker().map_err(cl)?;
                keep_event(cx, a[4], Some(ev));
                Ok(Answer::default())
            }
            Opcode::ClWaitList | Opcode::ClWaitEvents => {
                let ids = decode_words(&read_arena(arena)?).ok_or(cl(CL_INVALID_VALUE))?;
                // An empty wait list is a barrier behind every command
                // queued before it (out-of-order queues); waiting for no
                // events is not a request.
                let empty_ok = req.op == Opcode::ClWaitList;
                if (ids.is_empty() && !empty_ok) || ids.len() > MAX_WAIT_LIST {
                    return Err(cl(CL_INVALID_VALUE));
                }
                let events = ids
                    .iter()
                    .map(|id| cx.events.get(id).ok_or(cl(CL_INVALID_EVENT_WAIT_LIST)))
                    .collect::<Result<Vec<_>, _>>()?;
                if req.op == Opcode::ClWaitList {
                    queue(cx, a[0])?.barrier(&events).map_err(cl)?;
                } else {
                    Event::wait(&events).map_err(cl)?;
                }
                Ok(Answer::default())
            }
            Opcode::ClEventStatus => {
                let e = cx.events.get(&a[0]).ok_or(cl(CL_INVALID_EVENT))?;
                let s = e.status().map_err(cl)?;
                Ok(vals(&[i64::from(s) as u64]))
            }
            Opcode::ClEventProfiling => {
                let e = cx.events.get(&a[0]).ok_or(cl(CL_INVALID_EVENT))?;
                // The guest asks only about commands it saw complete.
                let t = e.profiling_settled().map_err(cl)?;
                Ok(vals(&t))
            }
            Opcode::ClReleaseEvent => {
                cx.events.remove(&a[0]).ok_or(cl(CL_INVALID_EVENT))?;
                Ok(Answer::default())
            }
            _ => Err(Status::NOT_SUPPORTED),
        }
    }
}

/// Counts the device time of the channel's completed commands (all of
/// them with `wait`), in order, stopping at the first unfinished one.
///
/// A command's device time is from its submission to the device, or the
/// end of the channel's previous command if that is later, to its end:
/// the time the device spent on it including its launch (on PoCL, tens of
/// microseconds of the device's own threads between submission and
/// start), which is what synchronising accounting charges and what no
/// other VM can use meanwhile. Overlapping commands are not counted
/// twice.
fn count_completed(cx: &mut Channel, wait: bool) -> u64 {
    let mut ns = 0;
    while let Some(e) = cx.timed.front() {
        if wait {
            let _ = Event::wait(&[e]);
        }
        match e.status() {
            Ok(s) if s > 0 => break,
            Ok(0) => {
                if let Ok([_, submit, _, end]) = e.profiling() {
                    ns += end.saturating_sub(submit.max(cx.last_end));
                    cx.last_end = cx.last_end.max(end);
                }
            }
            _ => {}
        }
        cx.timed.pop_front();
    }
    ns
}

/// Keeps the event of a command issued: the guest's under its id (when it
/// asked for one), and a reference for the device-time count.
fn keep_event(cx: &mut Channel, id: u64, ev: Option<Event>) {
    let Some(ev) = ev else {
        return;
    };
    if cx.timed.len() >= MAX_TIMED {
        if let Some(oldest) = cx.timed.pop_front() {
            let _ = Event::wait(&[&oldest]);
            cx.timed.push_front(oldest);
        }
    }
    if id == 0 {
        cx.timed.push_back(ev);
        return;
    }
    if let Ok(timed) = ev.retain() {
        cx.timed.push_back(timed);
    }
    cx.events.insert(id, ev);
}

/// Queue `h`; 0 is the channel's internal queue.
fn queue(cx: &Channel, h: u64) -> Result<&ocl::Queue, Status> {
    if h == 0 {
        return Ok(&cx.internal);
    }
    cx.queues
        .get(Handle(h))
        .map_err(handle_err(CL_INVALID_COMMAND_QUEUE))
}

/// Buffer `h` (not an image).
fn buffer(cx: &Channel, h: u64) -> Result<&Buffer, Status> {
    cx.buffers
        .get(Handle(h))
        .ok()
        .filter(|b| b.image.is_none())
        .ok_or(cl(CL_INVALID_MEM_OBJECT))
}

/// An image's memory object, extent, element size and format.
type ImageRef<'a> = (&'a ocl::Mem, [u64; 3], u64, (u32, u32));

/// Image `h`.
fn image(cx: &Channel, h: u64) -> Result<ImageRef<'_>, Status> {
    let b = cx
        .buffers
        .get(Handle(h))
        .map_err(handle_err(CL_INVALID_MEM_OBJECT))?;
    let (extent, elem, format) = b.image.ok_or(cl(CL_INVALID_MEM_OBJECT))?;
    Ok((&b.mem, extent, elem, format))
}

/// The `n` u64 words of a request's arena.
fn words(arena: &ArenaSlice<'_>, n: usize) -> Result<Vec<u64>, Status> {
    decode_words(&read_arena(arena)?)
        .filter(|w| w.len() == n)
        .ok_or(cl(CL_INVALID_VALUE))
}

fn three(w: &[u64]) -> [u64; 3] {
    [w[0], w[1], w[2]]
}

/// A box given by the guest: non-empty and within `extent`.
fn in_image(origin: [u64; 3], region: [u64; 3], extent: [u64; 3]) -> Result<(), Status> {
    if (ImageRegion { origin, region }).within(extent) {
        Ok(())
    } else {
        Err(cl(CL_INVALID_VALUE))
    }
}

fn program(cx: &Channel, h: u64) -> Result<&Program, Status> {
    cx.programs
        .get(Handle(h))
        .map_err(handle_err(CL_INVALID_PROGRAM))
}

fn kernel(cx: &Channel, h: u64) -> Result<&Kernel, Status> {
    cx.kernels
        .get(Handle(h))
        .map_err(handle_err(CL_INVALID_KERNEL))
}

/// Most work-items of one launch (2^40): far beyond any real device, small
/// enough that no product overflows.
const MAX_WORK_ITEMS: u64 = 1 << 40;

/// The launch geometry of `h`, checked.
fn nd_range(h: &NdRangeHeader) -> Result<Range, Status> {
    if !(1..=3).contains(&h.dims) || h.has_local > 1 || h.reserved != 0 {
        return Err(cl(CL_INVALID_WORK_DIMENSION));
    }
    let d = h.dims as usize;
    let mut items: u64 = 1;
    let mut range = Range {
        dims: h.dims,
        offset: [0; 3],
        global: [1; 3],
        local: (h.has_local == 1).then_some([1; 3]),
    };
    for i in 0..d {
        let g = h.global[i];
        if g == 0 {
            return Err(cl(CL_INVALID_GLOBAL_WORK_SIZE));
        }
        items = items
            .checked_mul(g)
            .filter(|&n| n <= MAX_WORK_ITEMS)
            .ok_or(cl(CL_INVALID_GLOBAL_WORK_SIZE))?;
        if h.offset[i]
            .checked_add(g)
            .is_none_or(|e| e > MAX_WORK_ITEMS)
        {
            return Err(cl(CL_INVALID_GLOBAL_OFFSET));
        }
        range.global[i] = g as usize;
        range.offset[i] = h.offset[i] as usize;
        if let Some(l) = range.local.as_mut() {
            if h.local[i] == 0 || h.local[i] > g {
                return Err(cl(CL_INVALID_WORK_GROUP_SIZE));
            }
            l[i] = h.local[i] as usize;
        }
    }
    Ok(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_options_keep_documented_ones_and_drop_guest_directories() {
        assert_eq!(
            sanitize_options("-D N=4 -DX -I /home/u/inc -I/x -cl-fast-relaxed-math -w").unwrap(),
            "-DN=4 -DX -cl-fast-relaxed-math -w"
        );
        assert_eq!(
            sanitize_options("-include /etc/passwd").unwrap_err(),
            "-include"
        );
        assert_eq!(sanitize_options("-Xclang -load").unwrap_err(), "-Xclang");
        assert_eq!(sanitize_options("").unwrap(), "");
        assert!(sanitize_options("-D").is_err());
    }

    #[test]
    fn include_directives_are_found() {
        assert_eq!(include_line(b"kernel void k() {}\n"), None);
        assert_eq!(
            include_line(b"// x\n  #  include \"/etc/shadow\"\n"),
            Some(1)
        );
        assert_eq!(include_line(b"#include <a.h>"), Some(0));
        assert_eq!(include_line(b"#define include 1\n"), None);
        assert_eq!(include_line(b"#if __has_include(\"/etc/x\")\n"), Some(0));
        assert_eq!(include_line(b"\n#embed \"/etc/x\"\n"), Some(1));
    }

    #[test]
    fn arguments_must_be_what_the_kernel_takes() {
        assert_eq!(ArgSpec::of(ADDRESS_GLOBAL, "float*"), Some(ArgSpec::Buffer));
        assert_eq!(
            ArgSpec::of(ADDRESS_GLOBAL, "image2d_t"),
            Some(ArgSpec::Image)
        );
        assert_eq!(
            ArgSpec::of(ADDRESS_GLOBAL, "image1d_array_t"),
            Some(ArgSpec::Image)
        );
        assert_eq!(
            ArgSpec::of(ADDRESS_GLOBAL, "imagedata*"),
            Some(ArgSpec::Buffer)
        );
        assert_eq!(
            ArgSpec::of(ADDRESS_PRIVATE, "image_t_like"),
            Some(ArgSpec::Value)
        );
        assert_eq!(
            ArgSpec::of(ADDRESS_PRIVATE, "sampler_t"),
            Some(ArgSpec::Sampler)
        );
        assert_eq!(ArgSpec::of(ADDRESS_LOCAL, "float*"), Some(ArgSpec::Local));
        assert_eq!(ArgSpec::of(ADDRESS_PRIVATE, "uint"), Some(ArgSpec::Value));
        assert_eq!(ArgSpec::of(7, "uint"), None);
        // Handle 5 is a buffer, 6 an image, anything else unknown.
        let image = |h: u64| match h {
            5 => Some(false),
            6 => Some(true),
            _ => None,
        };
        let fits = |s, a: KernelArg| arg_fits(s, &a, image);
        assert!(fits(ArgSpec::Buffer, KernelArg::Mem(5)));
        assert!(fits(ArgSpec::Buffer, KernelArg::Mem(0)), "NULL");
        assert!(
            !fits(ArgSpec::Buffer, KernelArg::Mem(6)),
            "an image for a buffer"
        );
        assert!(
            !fits(ArgSpec::Buffer, KernelArg::Bytes(vec![0; 8])),
            "a made-up pointer"
        );
        assert!(!fits(ArgSpec::Buffer, KernelArg::Mem(9)));
        assert!(fits(ArgSpec::Image, KernelArg::Mem(6)));
        assert!(!fits(ArgSpec::Image, KernelArg::Mem(5)));
        assert!(!fits(ArgSpec::Image, KernelArg::Mem(0)));
        assert!(fits(ArgSpec::Sampler, KernelArg::Sampler(1)));
        assert!(!fits(ArgSpec::Sampler, KernelArg::Bytes(vec![0; 8])));
        assert!(fits(ArgSpec::Local, KernelArg::Local(64)));
        assert!(!fits(ArgSpec::Local, KernelArg::Bytes(vec![0; 8])));
        assert!(fits(ArgSpec::Value, KernelArg::Bytes(vec![0; 4])));
        assert!(!fits(ArgSpec::Value, KernelArg::Mem(5)));
    }

    #[test]
    fn geometry_is_checked() {
        let mut h = NdRangeHeader {
            dims: 2,
            global: [64, 8, 0],
            ..Default::default()
        };
        let r = nd_range(&h).unwrap();
        assert_eq!((r.global, r.local), ([64, 8, 1], None));
        h.dims = 4;
        assert!(nd_range(&h).is_err());
        h.dims = 1;
        h.global[0] = 0;
        assert!(nd_range(&h).is_err());
        h.global = [1 << 30, 1 << 30, 1];
        h.dims = 2;
        assert!(nd_range(&h).is_err(), "2^60 work-items");
        h.global = [64, 1, 1];
        h.dims = 1;
        h.has_local = 1;
        h.local = [128, 0, 0];
        assert!(nd_range(&h).is_err(), "local larger than global");
        h.local = [16, 0, 0];
        assert_eq!(nd_range(&h).unwrap().local, Some([16, 1, 1]));
        h.offset[0] = u64::MAX;
        assert!(nd_range(&h).is_err());
    }
}
