//! The library against a fake host: a thread that serves one channel of a
//! region file with a model of the OpenCL opcodes (buffers and images are
//! byte vectors, images packed, every command completes at once, and the
//! one kernel the model runs, `iota`, writes `i * mul` to element `i` of
//! its buffer; `sample` only checks that it got an image and a sampler). It checks
//! what the guest sends (arguments, chunking, wait lists, events) without a
//! real OpenCL host; the tests through the real host are elsewhere.
//!
//! The connection is process-wide, so everything runs in one test.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::path::PathBuf;
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fairgpu_frontend::map::Mapping;
use fairgpu_protocol::layout::{Layout, CH_GUEST_GEN, CH_HOST_GEN, MAGIC};
use fairgpu_protocol::opencl::*;
use fairgpu_protocol::region::{RegionView, RequestRing, ResponseRing};
use fairgpu_protocol::ring::{Consumer, Producer, PushError};
use fairgpu_protocol::wire::REQ_NEEDS_RESPONSE;
use fairgpu_protocol::{Opcode, RegionConfig, Response};

use crate::types::*;
use crate::{context, event, image, kernel, mem, platform, program, sampler};

/// What the fake host holds for the channel.
#[derive(Debug, Default)]
struct Model {
    next: u64,
    queues: HashSet<u64>,
    roots: HashMap<u64, Vec<u8>>,
    /// Buffer → (root, offset, size).
    bufs: HashMap<u64, (u64, usize, usize)>,
    staged: Vec<u8>,
    /// Program → (source, build status).
    programs: HashMap<u64, (Vec<u8>, i32)>,
    /// Kernel → (name, argument count).
    kernels: HashMap<u64, (String, u32)>,
    events: HashSet<u64>,
    /// Programs built with `-cl-kernel-arg-info`.
    arg_info: HashSet<u64>,
    /// Kernel → address qualifiers and type names, for those of such programs.
    qualifiers: HashMap<u64, Vec<(u32, String)>>,
    /// Image → extent and element size (its bytes are a root).
    images: HashMap<u64, ([u64; 3], u64)>,
    samplers: HashSet<u64>,
    /// Every request: opcode, args, arena length.
    log: Vec<(Opcode, [u64; 5], usize)>,
}

type Outcome = Result<([u64; 5], Vec<u8>), i32>;

fn ok(vals: &[u64]) -> Outcome {
    let mut v = [0; 5];
    v[..vals.len()].copy_from_slice(vals);
    Ok((v, Vec::new()))
}

fn info(value: &[u8], cap: usize) -> Outcome {
    Ok((
        [value.len() as u64, 0, 0, 0, 0],
        value[..value.len().min(cap)].to_vec(),
    ))
}

/// `kernel void NAME(args)` declarations of a source: names and counts.
fn kernels_of(src: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    for part in src.split("kernel void ").skip(1) {
        let name: String = part
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let params = part
            .split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .map_or("", |p| p.0);
        let n = if params.trim().is_empty() {
            0
        } else {
            params.split(',').count() as u32
        };
        out.push((name, n));
    }
    out
}

/// The address qualifiers and type names of kernel `name`'s parameters
/// (images are global, as PoCL reports them).
fn qualifiers_of(src: &str, name: &str) -> Vec<(u32, String)> {
    let decl = format!("kernel void {name}(");
    let params = src
        .split_once(&decl)
        .and_then(|(_, r)| r.split_once(')'))
        .map_or("", |p| p.0);
    params
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let words: Vec<&str> = p.split_whitespace().collect();
            let mut q = match words[0] {
                "global" | "__global" => 0x119B,
                "local" | "__local" => 0x119C,
                "constant" | "__constant" => 0x119D,
                _ => 0x119E,
            };
            let ty: Vec<&str> = words[..words.len() - 1]
                .iter()
                .copied()
                .filter(|w| {
                    !matches!(
                        *w,
                        "global" | "local" | "constant" | "read_only" | "write_only" | "const"
                    )
                })
                .collect();
            let mut ty = ty.join(" ");
            if words[words.len() - 1].starts_with('*') {
                ty.push('*');
            }
            if ty.starts_with("image") {
                q = 0x119B;
            }
            (q, ty)
        })
        .collect()
}

/// Offset of pixel (x, y, z) of a packed image of `extent`.
fn pixel(extent: [u64; 3], elem: u64, at: [u64; 3]) -> usize {
    (((at[2] * extent[1] + at[1]) * extent[0] + at[0]) * elem) as usize
}

/// The packed bytes of box `r` of an image, or (`data`) writes them.
fn image_box(
    bytes: &mut [u8],
    extent: [u64; 3],
    elem: u64,
    r: ImageRegion,
    data: Option<&[u8]>,
) -> Vec<u8> {
    let row = (r.region[0] * elem) as usize;
    let mut out = Vec::new();
    let mut from = 0;
    for z in 0..r.region[2] {
        for y in 0..r.region[1] {
            let o = pixel(
                extent,
                elem,
                [r.origin[0], r.origin[1] + y, r.origin[2] + z],
            );
            match data {
                Some(d) => {
                    bytes[o..o + row].copy_from_slice(&d[from..from + row]);
                    from += row;
                }
                None => out.extend_from_slice(&bytes[o..o + row]),
            }
        }
    }
    out
}

impl Model {
    fn handle(&mut self, op: Opcode, a: [u64; 5], input: &[u8], cap: usize) -> Outcome {
        self.log.push((op, a, input.len().max(cap)));
        let event = |m: &mut Model| -> Result<(), i32> {
            if a[4] != 0 && !m.events.insert(a[4]) {
                return Err(CL_INVALID_EVENT);
            }
            Ok(())
        };
        match op {
            Opcode::Nop => ok(&[a[0]]),
            Opcode::ClGetDeviceInfo => match a[0] as u32 {
                CL_DEVICE_TYPE => info(&CL_DEVICE_TYPE_GPU.to_ne_bytes(), cap),
                CL_DEVICE_EXTENSIONS => info(b"cl_khr_fp64 cl_khr_gl_sharing cl_khr_icd\0", cap),
                CL_DEVICE_MAX_MEM_ALLOC_SIZE => info(&(64u64 << 20).to_ne_bytes(), cap),
                CL_DEVICE_IMAGE_SUPPORT => info(&CL_TRUE.to_ne_bytes(), cap),
                CL_DEVICE_IMAGE2D_MAX_WIDTH => info(&(1usize << 17).to_ne_bytes(), cap),
                CL_DEVICE_IMAGE2D_MAX_HEIGHT
                | CL_DEVICE_IMAGE3D_MAX_WIDTH
                | CL_DEVICE_IMAGE3D_MAX_HEIGHT
                | CL_DEVICE_IMAGE3D_MAX_DEPTH
                | CL_DEVICE_IMAGE_MAX_ARRAY_SIZE => info(&2048usize.to_ne_bytes(), cap),
                0x102B => info(b"fake device\0", cap),
                _ => Err(CL_INVALID_VALUE),
            },
            Opcode::ClCreateQueue => {
                self.next += 1;
                self.queues.insert(self.next);
                ok(&[self.next])
            }
            Opcode::ClReleaseQueue if self.queues.remove(&a[0]) => ok(&[]),
            Opcode::ClReleaseQueue => Err(CL_INVALID_COMMAND_QUEUE),
            Opcode::ClFinish | Opcode::ClFlush => ok(&[]),
            Opcode::ClCreateBuffer => {
                self.next += 1;
                self.roots.insert(self.next, vec![0; a[1] as usize]);
                self.bufs.insert(self.next, (self.next, 0, a[1] as usize));
                ok(&[self.next])
            }
            Opcode::ClCreateSubBuffer => {
                let &(root, off, size) = self.bufs.get(&a[0]).ok_or(CL_INVALID_MEM_OBJECT)?;
                if a[2] + a[3] > size as u64 {
                    return Err(CL_INVALID_VALUE);
                }
                self.next += 1;
                self.bufs
                    .insert(self.next, (root, off + a[2] as usize, a[3] as usize));
                ok(&[self.next])
            }
            Opcode::ClReleaseMem => {
                let (root, _, _) = self.bufs.remove(&a[0]).ok_or(CL_INVALID_MEM_OBJECT)?;
                if root == a[0] {
                    self.roots.remove(&root);
                }
                self.images.remove(&a[0]);
                ok(&[])
            }
            Opcode::ClCreateImage => {
                let d = ImageDesc::from_bytes(input[..IMAGE_DESC].try_into().expect("a desc"));
                let extent = d.extent().ok_or(CL_INVALID_IMAGE_DESCRIPTOR)?;
                let elem = image::element_size(d.order, d.channel_type)? as u64;
                if extent.contains(&0) {
                    return Err(CL_INVALID_IMAGE_SIZE);
                }
                let size = extent.iter().product::<u64>() * elem;
                self.next += 1;
                self.roots.insert(self.next, vec![0; size as usize]);
                self.bufs.insert(self.next, (self.next, 0, size as usize));
                self.images.insert(self.next, (extent, elem));
                ok(&[self.next, elem, size])
            }
            Opcode::ClImageFormats => {
                let pairs = [
                    (CL_RGBA, CL_UNORM_INT8),
                    (CL_RX, CL_FLOAT),
                    (CL_R, CL_FLOAT),
                ];
                let bytes: Vec<u8> = pairs
                    .iter()
                    .flat_map(|(o, t)| o.to_le_bytes().into_iter().chain(t.to_le_bytes()))
                    .collect();
                Ok(([3, 0, 0, 0, 0], bytes[..bytes.len().min(cap)].to_vec()))
            }
            Opcode::ClWriteImage | Opcode::ClReadImage => {
                if a[0] != 0 && !self.queues.contains(&a[0]) {
                    return Err(CL_INVALID_COMMAND_QUEUE);
                }
                let r = ImageRegion::from_bytes(input).ok_or(CL_INVALID_VALUE)?;
                let &(extent, elem) = self.images.get(&a[1]).ok_or(CL_INVALID_MEM_OBJECT)?;
                let n = r.bytes(elem).ok_or(CL_INVALID_VALUE)? as usize;
                if !r.within(extent) {
                    return Err(CL_INVALID_VALUE);
                }
                let write = op == Opcode::ClWriteImage;
                if (write && input.len() != IMAGE_REGION + n) || (!write && n > cap) {
                    return Err(CL_INVALID_VALUE);
                }
                event(self)?;
                let bytes = self.roots.get_mut(&a[1]).expect("root");
                let data = write.then(|| &input[IMAGE_REGION..]);
                let out = image_box(bytes, extent, elem, r, data);
                Ok(([n as u64, 0, 0, 0, 0], out))
            }
            Opcode::ClCopyImage | Opcode::ClCopyImageToBuffer | Opcode::ClCopyBufferToImage => {
                let w = decode_words(input).ok_or(CL_INVALID_VALUE)?;
                let (src, dst) = (a[1], a[2]);
                let packed = match op {
                    Opcode::ClCopyImage | Opcode::ClCopyImageToBuffer => {
                        let &(e, el) = self.images.get(&src).ok_or(CL_INVALID_MEM_OBJECT)?;
                        let r = ImageRegion {
                            origin: [w[0], w[1], w[2]],
                            region: if op == Opcode::ClCopyImage {
                                [w[6], w[7], w[8]]
                            } else {
                                [w[3], w[4], w[5]]
                            },
                        };
                        if !r.within(e) {
                            return Err(CL_INVALID_VALUE);
                        }
                        image_box(self.roots.get_mut(&src).expect("root"), e, el, r, None)
                    }
                    _ => {
                        let &(root, off, size) =
                            self.bufs.get(&src).ok_or(CL_INVALID_MEM_OBJECT)?;
                        let &(_, el) = self.images.get(&dst).ok_or(CL_INVALID_MEM_OBJECT)?;
                        let n = (w[4] * w[5] * w[6] * el) as usize;
                        let from = off + w[0] as usize;
                        if w[0] as usize + n > size {
                            return Err(CL_INVALID_VALUE);
                        }
                        self.roots[&root][from..from + n].to_vec()
                    }
                };
                match op {
                    Opcode::ClCopyImageToBuffer => {
                        let &(root, off, size) =
                            self.bufs.get(&dst).ok_or(CL_INVALID_MEM_OBJECT)?;
                        let at = w[6] as usize;
                        if self.images.contains_key(&dst) || at + packed.len() > size {
                            return Err(CL_INVALID_VALUE);
                        }
                        let bytes = self.roots.get_mut(&root).expect("root");
                        bytes[off + at..off + at + packed.len()].copy_from_slice(&packed);
                    }
                    _ => {
                        let &(e, el) = self.images.get(&dst).ok_or(CL_INVALID_MEM_OBJECT)?;
                        let r = if op == Opcode::ClCopyImage {
                            ImageRegion {
                                origin: [w[3], w[4], w[5]],
                                region: [w[6], w[7], w[8]],
                            }
                        } else {
                            ImageRegion {
                                origin: [w[1], w[2], w[3]],
                                region: [w[4], w[5], w[6]],
                            }
                        };
                        if !r.within(e) {
                            return Err(CL_INVALID_VALUE);
                        }
                        let bytes = self.roots.get_mut(&dst).expect("root");
                        image_box(bytes, e, el, r, Some(&packed));
                    }
                }
                event(self)?;
                ok(&[])
            }
            Opcode::ClCreateSampler => {
                if a[0] > 1 {
                    return Err(CL_INVALID_VALUE);
                }
                self.next += 1;
                self.samplers.insert(self.next);
                ok(&[self.next])
            }
            Opcode::ClReleaseSampler if self.samplers.remove(&a[0]) => ok(&[]),
            Opcode::ClReleaseSampler => Err(CL_INVALID_SAMPLER),
            Opcode::ClWriteBuffer | Opcode::ClReadBuffer | Opcode::ClFillBuffer => {
                if a[0] != 0 && !self.queues.contains(&a[0]) {
                    return Err(CL_INVALID_COMMAND_QUEUE);
                }
                let &(root, off, size) = self.bufs.get(&a[1]).ok_or(CL_INVALID_MEM_OBJECT)?;
                let len = match op {
                    Opcode::ClWriteBuffer => input.len(),
                    Opcode::ClReadBuffer => cap,
                    _ => a[3] as usize,
                };
                let start = a[2] as usize;
                if start + len > size {
                    return Err(CL_INVALID_VALUE);
                }
                event(self)?;
                let bytes =
                    &mut self.roots.get_mut(&root).expect("root")[off + start..off + start + len];
                match op {
                    Opcode::ClWriteBuffer => bytes.copy_from_slice(input),
                    Opcode::ClReadBuffer => return Ok(([0; 5], bytes.to_vec())),
                    _ => {
                        for (i, b) in bytes.iter_mut().enumerate() {
                            *b = input[i % input.len()];
                        }
                    }
                }
                ok(&[])
            }
            Opcode::ClCopyBuffer => {
                let w = decode_words(input).ok_or(CL_INVALID_VALUE)?;
                let &(sr, so, ss) = self.bufs.get(&a[1]).ok_or(CL_INVALID_MEM_OBJECT)?;
                let &(dr, dof, ds) = self.bufs.get(&a[2]).ok_or(CL_INVALID_MEM_OBJECT)?;
                let (s, d, n) = (w[0] as usize, w[1] as usize, w[2] as usize);
                if s + n > ss || d + n > ds {
                    return Err(CL_INVALID_VALUE);
                }
                event(self)?;
                let tmp = self.roots[&sr][so + s..so + s + n].to_vec();
                self.roots.get_mut(&dr).expect("root")[dof + d..dof + d + n].copy_from_slice(&tmp);
                ok(&[])
            }
            Opcode::ClProgramStage => {
                if a[0] == 0 {
                    self.staged.clear();
                }
                if a[0] != self.staged.len() as u64 {
                    return Err(CL_INVALID_VALUE);
                }
                self.staged.extend_from_slice(input);
                ok(&[])
            }
            Opcode::ClBuildProgram => {
                if a[1] != self.staged.len() as u64 {
                    return Err(CL_INVALID_VALUE);
                }
                if a[2] != 0 {
                    self.programs.remove(&a[2]).ok_or(CL_INVALID_PROGRAM)?;
                }
                let src = std::mem::take(&mut self.staged);
                let status = if src.windows(6).any(|w| w == b"#error") || input == b"-bad" {
                    CL_BUILD_PROGRAM_FAILURE
                } else {
                    0
                };
                self.next += 1;
                self.programs.insert(self.next, (src, status));
                if input
                    .split(|&b| b == b' ')
                    .any(|w| w == b"-cl-kernel-arg-info")
                {
                    self.arg_info.insert(self.next);
                }
                ok(&[self.next, i64::from(status) as u64])
            }
            Opcode::ClProgramLog => {
                let (_, status) = self.programs.get(&a[0]).ok_or(CL_INVALID_PROGRAM)?;
                let log: &[u8] = if *status == 0 {
                    b"\0"
                } else {
                    b"error: #error found\0"
                };
                info(log, cap)
            }
            Opcode::ClProgramBinary => {
                let (src, _) = self.programs.get(&a[0]).ok_or(CL_INVALID_PROGRAM)?;
                let mut bin = b"BIN:".to_vec();
                bin.extend_from_slice(src);
                let from = a[1] as usize;
                let rest = &bin[from..];
                Ok((
                    [bin.len() as u64, 0, 0, 0, 0],
                    rest[..rest.len().min(cap)].to_vec(),
                ))
            }
            Opcode::ClProgramKernelNames => {
                let (src, _) = self.programs.get(&a[0]).ok_or(CL_INVALID_PROGRAM)?;
                let names: Vec<String> = kernels_of(&String::from_utf8_lossy(src))
                    .into_iter()
                    .map(|k| k.0)
                    .collect();
                let mut v = names.join(";").into_bytes();
                v.push(0);
                info(&v, cap)
            }
            Opcode::ClReleaseProgram => self
                .programs
                .remove(&a[0])
                .map(|_| ([0; 5], Vec::new()))
                .ok_or(CL_INVALID_PROGRAM),
            Opcode::ClCreateKernel => {
                let (src, status) = self.programs.get(&a[0]).ok_or(CL_INVALID_PROGRAM)?;
                if *status != 0 {
                    return Err(CL_INVALID_PROGRAM_EXECUTABLE);
                }
                let name = String::from_utf8_lossy(input).into_owned();
                let (_, n) = kernels_of(&String::from_utf8_lossy(src))
                    .into_iter()
                    .find(|k| k.0 == name)
                    .ok_or(CL_INVALID_KERNEL_NAME)?;
                let q = qualifiers_of(&String::from_utf8_lossy(src), &name);
                self.next += 1;
                if self.arg_info.contains(&a[0]) {
                    self.qualifiers.insert(self.next, q);
                }
                self.kernels.insert(self.next, (name, n));
                ok(&[self.next, u64::from(n)])
            }
            Opcode::ClReleaseKernel => self
                .kernels
                .remove(&a[0])
                .map(|_| ([0; 5], Vec::new()))
                .ok_or(CL_INVALID_KERNEL),
            Opcode::ClKernelWorkGroupInfo => info(&256usize.to_ne_bytes(), cap),
            Opcode::ClKernelArgInfo => {
                // CL_KERNEL_ARG_ADDRESS_QUALIFIER and _TYPE_NAME of a kernel
                // whose program kept its argument information; else not
                // available.
                let q = self.qualifiers.get(&a[0]).ok_or(-19)?;
                let (qual, ty) = q.get(a[1] as usize).ok_or(CL_INVALID_ARG_INDEX)?;
                match a[2] {
                    0x1196 => info(&qual.to_ne_bytes(), cap),
                    0x1198 => info(format!("{ty}\0").as_bytes(), cap),
                    _ => Err(CL_INVALID_VALUE),
                }
            }
            Opcode::ClNdRange => {
                if !self.queues.contains(&a[0]) {
                    return Err(CL_INVALID_COMMAND_QUEUE);
                }
                let h =
                    NdRangeHeader::from_bytes(input[..NDRANGE_HEADER].try_into().expect("header"));
                let (name, n) = self.kernels.get(&a[1]).cloned().ok_or(CL_INVALID_KERNEL)?;
                if h.nargs != n {
                    return Err(CL_INVALID_KERNEL_ARGS);
                }
                let args =
                    decode_args(&input[NDRANGE_HEADER..], n).map_err(|_| CL_INVALID_ARG_VALUE)?;
                if name == "iota" {
                    let (KernelArg::Mem(b), KernelArg::Bytes(mul)) = (&args[0], &args[1]) else {
                        return Err(CL_INVALID_ARG_VALUE);
                    };
                    let mul = u32::from_ne_bytes(mul[..4].try_into().expect("u32"));
                    let &(root, off, size) = self.bufs.get(b).ok_or(CL_INVALID_MEM_OBJECT)?;
                    let data = self.roots.get_mut(&root).expect("root");
                    for i in h.offset[0]..h.offset[0] + h.global[0] {
                        let at = off + 4 * i as usize;
                        if at + 4 <= off + size {
                            data[at..at + 4].copy_from_slice(&(i as u32 * mul).to_ne_bytes());
                        }
                    }
                }
                if name == "sample" {
                    let (KernelArg::Mem(i), KernelArg::Sampler(s)) = (&args[0], &args[1]) else {
                        return Err(CL_INVALID_ARG_VALUE);
                    };
                    if !self.images.contains_key(i) || !self.samplers.contains(s) {
                        return Err(CL_INVALID_ARG_VALUE);
                    }
                }
                // As a real host: a failed command makes no event.
                event(self)?;
                ok(&[])
            }
            Opcode::ClMarker => {
                if a[4] == 0 {
                    return Err(CL_INVALID_VALUE);
                }
                event(self)?;
                ok(&[])
            }
            Opcode::ClWaitList | Opcode::ClWaitEvents => {
                let ids = decode_words(input).ok_or(CL_INVALID_VALUE)?;
                if ids.is_empty() || ids.iter().any(|i| !self.events.contains(i)) {
                    return Err(CL_INVALID_EVENT_WAIT_LIST);
                }
                ok(&[])
            }
            Opcode::ClEventStatus | Opcode::ClEventProfiling | Opcode::ClReleaseEvent
                if !self.events.contains(&a[0]) =>
            {
                Err(CL_INVALID_EVENT)
            }
            Opcode::ClEventStatus => ok(&[0]),
            Opcode::ClEventProfiling => ok(&[10, 20, 30, 40]),
            Opcode::ClReleaseEvent => {
                self.events.remove(&a[0]);
                ok(&[])
            }
            _ => Err(CL_INVALID_OPERATION),
        }
    }
}

/// Serves channel 0 of the region at `path` forever.
fn serve(view: RegionView, layout: Layout, model: Arc<Mutex<Model>>) {
    let offs = layout.channel(0).expect("channel 0");
    let word = |rel| view.atomic_u32(offs.at(rel)).expect("in the region");
    let generation = loop {
        match word(CH_GUEST_GEN).load(Ordering::Acquire) {
            0 => std::thread::sleep(Duration::from_millis(1)),
            g => break g,
        }
    };
    word(CH_HOST_GEN).store(generation, Ordering::Release);
    let mut req = Consumer::new(
        RequestRing::requests(&view, &layout, &offs).expect("ring"),
        0,
    );
    let mut resp = Producer::new(
        ResponseRing::responses(&view, &layout, &offs).expect("ring"),
        0,
    );
    let mut deferred = 0u32;
    loop {
        // Peeked, and consumed only once served: the guest reuses the
        // arena slice of a consumed fire-and-forget request.
        let Some(r) = req.peek().expect("a sane ring") else {
            std::thread::sleep(Duration::from_micros(20));
            continue;
        };
        let base = offs.arena + r.arena_off as usize;
        let mut input = vec![0u8; r.arena_len as usize];
        view.read_bytes(base, &mut input).expect("arena");
        let needs = r.flags & REQ_NEEDS_RESPONSE != 0;
        let cap = if needs { r.arena_len as usize } else { 0 };
        let out = match Opcode::try_from(r.opcode) {
            Ok(op) => model.lock().unwrap().handle(op, r.args, &input, cap),
            Err(_) => Err(CL_INVALID_OPERATION),
        };
        let status = match &out {
            Ok(_) => 0,
            Err(e) => cl_status(*e).0,
        };
        req.advance();
        if !needs {
            if status != 0 && deferred == 0 {
                deferred = status;
            }
            continue;
        }
        let (vals, bytes) = out.unwrap_or_default();
        view.write_bytes(base, &bytes).expect("arena");
        let answer = Response {
            call_id: r.call_id,
            status,
            deferred: std::mem::take(&mut deferred),
            arena_off: r.arena_off,
            arena_len: bytes.len() as u32,
            vals,
        };
        loop {
            match resp.try_push(&answer) {
                Ok(()) => break,
                Err(PushError::Full) => std::thread::sleep(Duration::from_micros(20)),
                Err(e) => panic!("response ring: {e:?}"),
            }
        }
    }
}

fn start() -> (Arc<Mutex<Model>>, PathBuf) {
    let cfg = RegionConfig {
        channels: 1,
        arena_size: 256 * 1024,
        ..RegionConfig::default()
    };
    let layout = Layout::new(&cfg).expect("a valid layout");
    let path = std::env::temp_dir().join(format!("fairgpu-cl-{}", std::process::id()));
    let map = Mapping::create(&path, layout.region_size()).expect("the region file");
    let view = map.view();
    let mut header = layout.header();
    header.magic = 0;
    view.write_obj(0, &header).expect("the header");
    view.atomic_u64(0)
        .expect("magic")
        .store(MAGIC, Ordering::Release);
    // The environment is read at the first connection, below.
    std::env::set_var("FAIRGPU_REGION", &path);
    std::env::set_var("FAIRGPU_WAIT", "backoff");
    std::env::set_var("FAIRGPU_HOST_TIMEOUT_MS", "0");
    let model = Arc::new(Mutex::new(Model::default()));
    let m = model.clone();
    std::thread::spawn(move || {
        let _keep = map;
        serve(view, layout, m)
    });
    (model, path)
}

fn h<T>(p: &mut T) -> *mut T {
    p as *mut T
}

fn cstr_info(f: impl Fn(usize, *mut c_void, *mut usize) -> i32) -> String {
    let mut n = 0usize;
    assert_eq!(f(0, null_mut(), &mut n), CL_SUCCESS);
    let mut b = vec![0u8; n];
    assert_eq!(f(n, b.as_mut_ptr().cast(), null_mut()), CL_SUCCESS);
    assert_eq!(b.pop(), Some(0), "NUL-terminated");
    String::from_utf8(b).unwrap()
}

fn word_info<T: Copy + Default>(f: impl Fn(usize, *mut c_void, *mut usize) -> i32) -> T {
    let mut v = T::default();
    let mut n = 0usize;
    assert_eq!(
        f(size_of::<T>(), (&mut v as *mut T).cast(), &mut n),
        CL_SUCCESS
    );
    assert_eq!(n, size_of::<T>());
    v
}

static CALLBACKS: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_event(_e: Handle, status: i32, ud: *mut c_void) {
    assert_eq!(status, CL_COMPLETE);
    assert_eq!(ud as usize, 7);
    CALLBACKS.fetch_add(1, Ordering::SeqCst);
}

extern "C" fn on_mem_gone(_m: Handle, ud: *mut c_void) {
    CALLBACKS.fetch_add(ud as u32, Ordering::SeqCst);
}

const IOTA: &str = "kernel void iota(global uint *out, uint mul) { out[get_global_id(0)] = get_global_id(0) * mul; }\nkernel void other(global int *a, local int *b, int c) {}\n";

#[test]
fn the_library_drives_a_fake_host() {
    let (model, path) = start();
    let mut err = 0i32;

    // Platform and device.
    let mut plat: Handle = null_mut();
    let mut n = 0u32;
    assert_eq!(
        platform::clIcdGetPlatformIDsKHR(1, &mut plat, &mut n),
        CL_SUCCESS
    );
    assert_eq!((n, plat), (1, platform::platform()));
    let name = cstr_info(|s, v, r| platform::get_platform_info(plat, CL_PLATFORM_NAME, s, v, r));
    assert_eq!(name, "fairgpu");
    let mut dev: Handle = null_mut();
    assert_eq!(
        platform::clGetDeviceIDs(plat, CL_DEVICE_TYPE_GPU, 1, &mut dev, &mut n),
        CL_SUCCESS
    );
    assert_eq!(
        platform::clGetDeviceIDs(plat, CL_DEVICE_TYPE_CPU, 1, &mut dev, &mut n),
        CL_DEVICE_NOT_FOUND
    );
    assert_eq!(
        platform::clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &mut dev, null_mut()),
        CL_SUCCESS
    );
    let ext = cstr_info(|s, v, r| platform::clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, s, v, r));
    assert_eq!(ext, "cl_khr_fp64 cl_khr_icd");
    let ver = cstr_info(|s, v, r| platform::clGetDeviceInfo(dev, CL_DEVICE_VERSION, s, v, r));
    assert_eq!(ver, "OpenCL 1.2 fairgpu");
    let dname = cstr_info(|s, v, r| platform::clGetDeviceInfo(dev, 0x102B, s, v, r));
    assert_eq!(dname, "fake device");
    let p: usize = word_info(|s, v, r| platform::clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, s, v, r));
    assert_eq!(p, plat as usize);
    let mut small = 0u8;
    assert_eq!(
        platform::clGetDeviceInfo(dev, CL_DEVICE_TYPE, 1, h(&mut small).cast(), null_mut()),
        CL_INVALID_VALUE
    );
    assert_eq!(
        platform::clGetDeviceInfo(dev, 0x7777, 0, null_mut(), &mut 0),
        CL_INVALID_VALUE
    );
    assert_eq!(
        platform::clGetDeviceInfo(0x1234 as Handle, CL_DEVICE_TYPE, 0, null_mut(), &mut 0),
        CL_INVALID_DEVICE
    );

    // Context and queues.
    let props = [CL_CONTEXT_PLATFORM, plat as isize, 0];
    let ctx = context::clCreateContext(props.as_ptr(), 1, &dev, None, null_mut(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let q = context::clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &mut err);
    assert_eq!(err, CL_SUCCESS);
    let bad =
        context::clCreateCommandQueue(ctx, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &mut err);
    assert!(bad.is_null());
    assert_eq!(err, CL_INVALID_QUEUE_PROPERTIES);
    let qp = [u64::from(CL_QUEUE_PROPERTIES), 0, 0];
    let q2 = context::clCreateCommandQueueWithProperties(ctx, dev, qp.as_ptr(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let refs: u32 =
        word_info(|s, v, r| context::clGetContextInfo(ctx, CL_CONTEXT_REFERENCE_COUNT, s, v, r));
    assert_eq!(refs, 3, "the context is counted by its queues");

    // A buffer with initial data larger than one arena slice, read back.
    let big: Vec<u8> = (0..600_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let buf = mem::clCreateBuffer(
        ctx,
        CL_MEM_COPY_HOST_PTR,
        big.len(),
        big.as_ptr() as *mut c_void,
        &mut err,
    );
    assert_eq!(err, CL_SUCCESS);
    let mut back = vec![0u8; big.len()];
    let mut ev: Handle = null_mut();
    let r = mem::clEnqueueReadBuffer(
        q,
        buf,
        CL_TRUE,
        0,
        big.len(),
        back.as_mut_ptr().cast(),
        0,
        null(),
        &mut ev,
    );
    assert_eq!(r, CL_SUCCESS);
    if let Some(i) = (0..big.len()).find(|&i| back[i] != big[i]) {
        let m = model.lock().unwrap();
        let ops: Vec<_> = m.log.iter().map(|l| (l.0, l.1, l.2)).collect();
        panic!(
            "byte {i} differs: {} != {}; requests {ops:?}",
            back[i], big[i]
        );
    }
    let ty: u32 = word_info(|s, v, r| event::clGetEventInfo(ev, CL_EVENT_COMMAND_TYPE, s, v, r));
    assert_eq!(ty, CL_COMMAND_READ_BUFFER);
    let st: i32 =
        word_info(|s, v, r| event::clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, s, v, r));
    assert_eq!(st, CL_COMPLETE);
    let end: u64 =
        word_info(|s, v, r| event::clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, s, v, r));
    assert_eq!(end, 40);
    assert_eq!(
        event::clSetEventCallback(ev, CL_COMPLETE, Some(on_event), 7 as *mut c_void),
        CL_SUCCESS
    );
    assert_eq!(
        CALLBACKS.load(Ordering::SeqCst),
        1,
        "a complete event calls back at once"
    );
    assert_eq!(event::clReleaseEvent(ev), CL_SUCCESS);
    assert_eq!(event::clReleaseEvent(ev), CL_INVALID_EVENT);

    // A small write with an event, a wait list, a wait.
    let mut wev: Handle = null_mut();
    let r = mem::clEnqueueWriteBuffer(
        q,
        buf,
        CL_FALSE,
        16,
        4,
        [1u8, 2, 3, 4].as_ptr().cast(),
        0,
        null(),
        &mut wev,
    );
    assert_eq!(r, CL_SUCCESS);
    assert_eq!(
        event::clSetEventCallback(wev, CL_COMPLETE, Some(on_event), 7 as *mut c_void),
        CL_SUCCESS
    );
    let mut cev: Handle = null_mut();
    let r = mem::clEnqueueCopyBuffer(q2, buf, buf, 16, 1000, 4, 1, &wev, &mut cev);
    assert_eq!(r, CL_SUCCESS);
    assert_eq!(event::clWaitForEvents(1, &cev), CL_SUCCESS);
    assert_eq!(
        mem::clEnqueueCopyBuffer(q, buf, buf, 0, 2, 4, 0, null(), null_mut()),
        CL_MEM_COPY_OVERLAP
    );
    assert_eq!(context::clFinish(q), CL_SUCCESS);
    assert_eq!(
        CALLBACKS.load(Ordering::SeqCst),
        2,
        "clFinish completes the write's event"
    );
    let mut four = [0u8; 4];
    assert_eq!(
        mem::clEnqueueReadBuffer(
            q,
            buf,
            CL_TRUE,
            1000,
            4,
            four.as_mut_ptr().cast(),
            0,
            null(),
            null_mut()
        ),
        CL_SUCCESS
    );
    assert_eq!(four, [1, 2, 3, 4]);
    {
        let m = model.lock().unwrap();
        let waits: Vec<_> = m.log.iter().filter(|l| l.0 == Opcode::ClWaitList).collect();
        assert_eq!(waits.len(), 1, "the copy waited for the write");
        let big_writes = m
            .log
            .iter()
            .filter(|l| l.0 == Opcode::ClWriteBuffer && l.1[0] == 0)
            .count();
        assert!(
            big_writes >= 2,
            "the initial data came in chunks on queue 0"
        );
    }
    for e in [wev, cev] {
        assert_eq!(event::clReleaseEvent(e), CL_SUCCESS);
    }

    // Fill, and a rectangle out of a 2D buffer.
    let fill = 0xABCDu16;
    let r = mem::clEnqueueFillBuffer(
        q,
        buf,
        (&fill as *const u16).cast(),
        2,
        0,
        64,
        0,
        null(),
        null_mut(),
    );
    assert_eq!(r, CL_SUCCESS);
    assert_eq!(
        mem::clEnqueueFillBuffer(
            q,
            buf,
            (&fill as *const u16).cast(),
            2,
            1,
            64,
            0,
            null(),
            null_mut()
        ),
        CL_INVALID_VALUE
    );
    // A 16 x 8 buffer of bytes (row pitch 16): write a 4 x 3 block at (2, 1).
    let grid = mem::clCreateBuffer(ctx, 0, 128, null_mut(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let zeros = [0u8; 128];
    assert_eq!(
        mem::clEnqueueWriteBuffer(
            q,
            grid,
            CL_TRUE,
            0,
            128,
            zeros.as_ptr().cast(),
            0,
            null(),
            null_mut()
        ),
        CL_SUCCESS
    );
    let block: Vec<u8> = (1..=12).collect();
    let (bo, ho, region) = ([2usize, 1, 0], [0usize; 3], [4usize, 3, 1]);
    let r = mem::clEnqueueWriteBufferRect(
        q,
        grid,
        CL_TRUE,
        bo.as_ptr(),
        ho.as_ptr(),
        region.as_ptr(),
        16,
        0,
        4,
        0,
        block.as_ptr().cast(),
        0,
        null(),
        null_mut(),
    );
    assert_eq!(r, CL_SUCCESS);
    let mut all = [0u8; 128];
    assert_eq!(
        mem::clEnqueueReadBuffer(
            q,
            grid,
            CL_TRUE,
            0,
            128,
            all.as_mut_ptr().cast(),
            0,
            null(),
            null_mut()
        ),
        CL_SUCCESS
    );
    for y in 0..8 {
        for x in 0..16 {
            let want = if (1..4).contains(&y) && (2..6).contains(&x) {
                ((y - 1) * 4 + (x - 2) + 1) as u8
            } else {
                0
            };
            assert_eq!(all[y * 16 + x], want, "({x}, {y})");
        }
    }
    let mut out = [0u8; 12];
    let r = mem::clEnqueueReadBufferRect(
        q,
        grid,
        CL_TRUE,
        bo.as_ptr(),
        ho.as_ptr(),
        region.as_ptr(),
        16,
        0,
        0,
        0,
        out.as_mut_ptr().cast(),
        0,
        null(),
        null_mut(),
    );
    assert_eq!(r, CL_SUCCESS);
    assert_eq!(&out[..], &block[..]);
    let r = mem::clEnqueueReadBufferRect(
        q,
        grid,
        CL_TRUE,
        [14usize, 0, 0].as_ptr(),
        ho.as_ptr(),
        region.as_ptr(),
        16,
        0,
        0,
        0,
        out.as_mut_ptr().cast(),
        0,
        null(),
        null_mut(),
    );
    assert_eq!(
        r, CL_SUCCESS,
        "a row may run past its pitch while inside the buffer"
    );
    let r = mem::clEnqueueReadBufferRect(
        q,
        grid,
        CL_TRUE,
        [0usize, 6, 0].as_ptr(),
        ho.as_ptr(),
        region.as_ptr(),
        16,
        0,
        0,
        0,
        out.as_mut_ptr().cast(),
        0,
        null(),
        null_mut(),
    );
    assert_eq!(r, CL_INVALID_VALUE, "rows 6..9 of an 8-row buffer");

    // Sub-buffers and maps.
    let region = [32usize, 16];
    let sub = mem::clCreateSubBuffer(
        grid,
        0,
        CL_BUFFER_CREATE_TYPE_REGION,
        region.as_ptr().cast(),
        &mut err,
    );
    assert_eq!(err, CL_SUCCESS);
    let off: usize = word_info(|s, v, r| mem::clGetMemObjectInfo(sub, CL_MEM_OFFSET, s, v, r));
    assert_eq!(off, 32);
    let p = mem::clEnqueueMapBuffer(
        q,
        sub,
        CL_TRUE,
        CL_MAP_READ | CL_MAP_WRITE,
        0,
        16,
        0,
        null(),
        null_mut(),
        &mut err,
    );
    assert_eq!(err, CL_SUCCESS);
    let count: u32 = word_info(|s, v, r| mem::clGetMemObjectInfo(sub, CL_MEM_MAP_COUNT, s, v, r));
    assert_eq!(count, 1);
    {
        // SAFETY: the map holds 16 bytes until the unmap.
        let mapped = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), 16) };
        assert_eq!(&mapped[..], &all[32..48]);
        mapped.copy_from_slice(&[9; 16]);
    }
    assert_eq!(
        mem::clEnqueueUnmapMemObject(q, sub, p, 0, null(), null_mut()),
        CL_SUCCESS
    );
    assert_eq!(
        mem::clEnqueueUnmapMemObject(q, sub, p, 0, null(), null_mut()),
        CL_INVALID_VALUE
    );
    assert_eq!(
        mem::clEnqueueReadBuffer(
            q,
            grid,
            CL_TRUE,
            0,
            128,
            all.as_mut_ptr().cast(),
            0,
            null(),
            null_mut()
        ),
        CL_SUCCESS
    );
    assert_eq!(&all[32..48], &[9; 16]);
    assert_eq!(
        mem::clSetMemObjectDestructorCallback(sub, Some(on_mem_gone), 100 as *mut c_void),
        CL_SUCCESS
    );
    let before = CALLBACKS.load(Ordering::SeqCst);
    assert_eq!(
        mem::clReleaseMemObject(grid),
        CL_SUCCESS,
        "the sub-buffer keeps it"
    );
    let refs: u32 =
        word_info(|s, v, r| mem::clGetMemObjectInfo(sub, CL_MEM_REFERENCE_COUNT, s, v, r));
    assert_eq!(refs, 1);
    assert_eq!(mem::clReleaseMemObject(sub), CL_SUCCESS);
    assert_eq!(CALLBACKS.load(Ordering::SeqCst), before + 100);
    assert_eq!(mem::clReleaseMemObject(sub), CL_INVALID_MEM_OBJECT);

    // Programs and kernels.
    let src = std::ffi::CString::new(IOTA).unwrap();
    let prog = program::clCreateProgramWithSource(ctx, 1, &src.as_ptr(), null(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let k = kernel::clCreateKernel(prog, c"iota".as_ptr(), &mut err);
    assert!(k.is_null());
    assert_eq!(err, CL_INVALID_PROGRAM_EXECUTABLE);
    assert_eq!(
        program::clBuildProgram(
            prog,
            0,
            null(),
            c"-cl-fast-relaxed-math".as_ptr(),
            None,
            null_mut()
        ),
        CL_SUCCESS
    );
    let names =
        cstr_info(|s, v, r| program::clGetProgramInfo(prog, CL_PROGRAM_KERNEL_NAMES, s, v, r));
    assert_eq!(names, "iota;other");
    let nk: usize =
        word_info(|s, v, r| program::clGetProgramInfo(prog, CL_PROGRAM_NUM_KERNELS, s, v, r));
    assert_eq!(nk, 2);
    let bsize: usize =
        word_info(|s, v, r| program::clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, s, v, r));
    assert_eq!(bsize, 4 + IOTA.len());
    let mut bin = vec![0u8; bsize];
    let mut bp = bin.as_mut_ptr();
    assert_eq!(
        program::clGetProgramInfo(prog, CL_PROGRAM_BINARIES, 8, h(&mut bp).cast(), null_mut()),
        CL_SUCCESS
    );
    assert_eq!(&bin[..4], b"BIN:");
    let k = kernel::clCreateKernel(prog, c"iota".as_ptr(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    assert_eq!(
        program::clBuildProgram(prog, 0, null(), null(), None, null_mut()),
        CL_INVALID_OPERATION
    );
    let nargs: u32 = word_info(|s, v, r| kernel::clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, s, v, r));
    assert_eq!(nargs, 2);
    let out = mem::clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, 64 * 4, null_mut(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let global = [48usize];
    let offset = [8usize];
    let r = kernel::clEnqueueNDRangeKernel(
        q,
        k,
        1,
        offset.as_ptr(),
        global.as_ptr(),
        null(),
        0,
        null(),
        null_mut(),
    );
    assert_eq!(r, CL_INVALID_KERNEL_ARGS);
    assert_eq!(
        kernel::clSetKernelArg(k, 0, size_of::<Handle>(), (&out as *const Handle).cast()),
        CL_SUCCESS
    );
    assert_eq!(
        kernel::clSetKernelArg(k, 1, 4, (&3u32 as *const u32).cast()),
        CL_SUCCESS
    );
    assert_eq!(
        kernel::clSetKernelArg(k, 2, 4, (&3u32 as *const u32).cast()),
        CL_INVALID_ARG_INDEX
    );
    let mut kev: Handle = null_mut();
    let r = kernel::clEnqueueNDRangeKernel(
        q,
        k,
        1,
        offset.as_ptr(),
        global.as_ptr(),
        null(),
        0,
        null(),
        &mut kev,
    );
    assert_eq!(r, CL_SUCCESS);
    let mut res = [0u32; 64];
    let r = mem::clEnqueueReadBuffer(
        q,
        out,
        CL_TRUE,
        0,
        256,
        res.as_mut_ptr().cast(),
        1,
        &kev,
        null_mut(),
    );
    assert_eq!(r, CL_SUCCESS);
    for (i, v) in res.iter().enumerate() {
        let want = if (8..56).contains(&i) {
            i as u32 * 3
        } else {
            0
        };
        assert_eq!(*v, want, "element {i}");
    }
    let wg: usize = word_info(|s, v, r| kernel::clGetKernelWorkGroupInfo(k, dev, 0x11B0, s, v, r));
    assert_eq!(wg, 256);
    assert_eq!(event::clReleaseEvent(kev), CL_SUCCESS);

    // A launch the host fails: the wait on its event reports why, once.
    let gone = mem::clCreateBuffer(ctx, 0, 256, null_mut(), &mut err);
    assert_eq!(
        kernel::clSetKernelArg(k, 0, size_of::<Handle>(), (&gone as *const Handle).cast()),
        CL_SUCCESS
    );
    assert_eq!(mem::clReleaseMemObject(gone), CL_SUCCESS);
    let r = kernel::clEnqueueNDRangeKernel(
        q,
        k,
        1,
        null(),
        global.as_ptr(),
        null(),
        0,
        null(),
        &mut kev,
    );
    assert_eq!(r, CL_SUCCESS, "launches are fire-and-forget");
    assert_eq!(event::clWaitForEvents(1, &kev), CL_INVALID_MEM_OBJECT);
    assert_eq!(context::clFinish(q), CL_SUCCESS);
    let st: i32 =
        word_info(|s, v, r| event::clGetEventInfo(kev, CL_EVENT_COMMAND_EXECUTION_STATUS, s, v, r));
    assert_eq!(st, CL_OUT_OF_RESOURCES, "the host never made that event");
    assert_eq!(event::clReleaseEvent(kev), CL_SUCCESS);
    assert_eq!(
        context::clFinish(q),
        CL_SUCCESS,
        "and nothing releases it there"
    );
    assert_eq!(
        kernel::clSetKernelArg(k, 0, size_of::<Handle>(), (&out as *const Handle).cast()),
        CL_SUCCESS
    );
    let mut ks = [null_mut::<c_void>(); 2];
    let mut nks = 0u32;
    assert_eq!(
        kernel::clCreateKernelsInProgram(prog, 2, ks.as_mut_ptr(), &mut nks),
        CL_SUCCESS
    );
    assert_eq!(nks, 2);
    let kname =
        cstr_info(|s, v, r| kernel::clGetKernelInfo(ks[1], CL_KERNEL_FUNCTION_NAME, s, v, r));
    assert_eq!(kname, "other");
    assert_eq!(kernel::clSetKernelArg(ks[1], 1, 64, null()), CL_SUCCESS);

    // With argument information, clSetKernelArg checks what it gets.
    let prog2 = program::clCreateProgramWithSource(ctx, 1, &src.as_ptr(), null(), &mut err);
    let opts = c"-cl-kernel-arg-info -DX=1";
    assert_eq!(
        program::clBuildProgram(prog2, 0, null(), opts.as_ptr(), None, null_mut()),
        CL_SUCCESS
    );
    let k2 = kernel::clCreateKernel(prog2, c"other".as_ptr(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let bad_mem = 0x1234usize;
    let set = |i: u32, size: usize, v: *const c_void| kernel::clSetKernelArg(k2, i, size, v);
    assert_eq!(
        set(0, 3, (&out as *const Handle).cast()),
        CL_INVALID_ARG_SIZE
    );
    assert_eq!(
        set(0, 8, (&bad_mem as *const usize).cast()),
        CL_INVALID_MEM_OBJECT
    );
    assert_eq!(set(0, 8, (&out as *const Handle).cast()), CL_SUCCESS);
    assert_eq!(
        set(1, 4, (&3u32 as *const u32).cast()),
        CL_INVALID_ARG_VALUE
    );
    assert_eq!(set(1, 256, null()), CL_SUCCESS);
    assert_eq!(set(2, 4, null()), CL_INVALID_ARG_VALUE);
    assert_eq!(set(2, 4, (&3u32 as *const u32).cast()), CL_SUCCESS);
    let opt = cstr_info(|s, v, r| {
        program::clGetProgramBuildInfo(prog2, dev, CL_PROGRAM_BUILD_OPTIONS, s, v, r)
    });
    assert_eq!(opt, "-cl-kernel-arg-info -DX=1");
    assert_eq!(kernel::clReleaseKernel(k2), CL_SUCCESS);
    assert_eq!(program::clReleaseProgram(prog2), CL_SUCCESS);

    // A failed build keeps its log.
    let bad_src = std::ffi::CString::new("#error nope\n").unwrap();
    let bad = program::clCreateProgramWithSource(ctx, 1, &bad_src.as_ptr(), null(), &mut err);
    assert_eq!(
        program::clBuildProgram(bad, 1, &dev, null(), None, null_mut()),
        CL_BUILD_PROGRAM_FAILURE
    );
    let st: i32 = word_info(|s, v, r| {
        program::clGetProgramBuildInfo(bad, dev, CL_PROGRAM_BUILD_STATUS, s, v, r)
    });
    assert_eq!(st, CL_BUILD_ERROR);
    let log = cstr_info(|s, v, r| {
        program::clGetProgramBuildInfo(bad, dev, CL_PROGRAM_BUILD_LOG, s, v, r)
    });
    assert_eq!(log, "error: #error found");

    images(ctx, q, dev, &model);

    // Garbage and freed handles.
    assert_eq!(
        mem::clReleaseMemObject(0x10 as Handle),
        CL_INVALID_MEM_OBJECT
    );
    assert_eq!(context::clFinish(buf), CL_INVALID_COMMAND_QUEUE);
    assert_eq!(
        kernel::clSetKernelArg(prog, 0, 4, null()),
        CL_INVALID_KERNEL
    );

    // Releasing everything releases the host objects.
    for kk in [k, ks[0], ks[1]] {
        assert_eq!(kernel::clReleaseKernel(kk), CL_SUCCESS);
    }
    for pp in [prog, bad] {
        assert_eq!(program::clReleaseProgram(pp), CL_SUCCESS);
    }
    for b in [buf, out] {
        assert_eq!(mem::clReleaseMemObject(b), CL_SUCCESS);
    }
    for qq in [q, q2] {
        assert_eq!(context::clReleaseCommandQueue(qq), CL_SUCCESS);
    }
    assert_eq!(context::clReleaseContext(ctx), CL_SUCCESS);
    assert_eq!(context::clReleaseContext(ctx), CL_INVALID_CONTEXT);
    // The releases go out with the next use of the channel.
    let _ = platform::host_info(Opcode::Nop, &[]);
    let m = model.lock().unwrap();
    assert!(m.bufs.is_empty(), "{:?}", m.bufs.keys());
    assert!(m.programs.is_empty());
    assert!(m.kernels.is_empty());
    assert!(m.queues.is_empty());
    assert!(m.events.is_empty(), "{:?}", m.events);
    assert!(m.images.is_empty() && m.samplers.is_empty());
    drop(m);
    let _ = std::fs::remove_file(path);
}

fn desc(image_type: u32, extent: [usize; 4], pitches: [usize; 2]) -> image::ClImageDesc {
    image::ClImageDesc {
        image_type,
        width: extent[0],
        height: extent[1],
        depth: extent[2],
        array_size: extent[3],
        row_pitch: pitches[0],
        slice_pitch: pitches[1],
        num_mip_levels: 0,
        num_samples: 0,
        buffer: null_mut(),
    }
}

const RGBA8: image::ClImageFormat = image::ClImageFormat {
    order: CL_RGBA,
    channel_type: CL_UNORM_INT8,
};

const R32F: image::ClImageFormat = image::ClImageFormat {
    order: CL_R,
    channel_type: CL_FLOAT,
};

/// Reads the whole of 2D image `img` (`w` x `h` pixels of 4 bytes), packed.
fn read_all(q: Handle, img: Handle, w: usize, h: usize) -> Vec<u8> {
    let mut back = vec![0u8; w * h * 4];
    let r = image::clEnqueueReadImage(
        q,
        img,
        CL_TRUE,
        [0usize; 3].as_ptr(),
        [w, h, 1].as_ptr(),
        0,
        0,
        back.as_mut_ptr().cast(),
        0,
        null(),
        null_mut(),
    );
    assert_eq!(r, CL_SUCCESS);
    back
}

const SAMPLE: &str =
    "kernel void sample(read_only image2d_t img, sampler_t s, global float *out) {}\n";

fn images(ctx: Handle, q: Handle, dev: Handle, model: &Arc<Mutex<Model>>) {
    use image::*;
    let mut err = 0i32;
    let support: u32 =
        word_info(|s, v, r| platform::clGetDeviceInfo(dev, CL_DEVICE_IMAGE_SUPPORT, s, v, r));
    assert_eq!(support, CL_TRUE);

    // Formats: the host's, less those the library does not carry.
    let mut n = 0u32;
    let t2 = CL_MEM_OBJECT_IMAGE2D;
    assert_eq!(
        clGetSupportedImageFormats(ctx, CL_MEM_READ_ONLY, t2, 0, null_mut(), &mut n),
        CL_SUCCESS
    );
    assert_eq!(n, 2, "CL_Rx is not carried");
    let mut fmts = [R32F; 2];
    assert_eq!(
        clGetSupportedImageFormats(ctx, 0, t2, 2, fmts.as_mut_ptr(), null_mut()),
        CL_SUCCESS
    );
    assert_eq!(
        (fmts[0].order, fmts[0].channel_type),
        (CL_RGBA, CL_UNORM_INT8)
    );
    assert_eq!(
        clGetSupportedImageFormats(ctx, 0, CL_MEM_OBJECT_IMAGE1D_BUFFER, 0, null_mut(), &mut n),
        CL_SUCCESS
    );
    assert_eq!(n, 0);
    assert_eq!(
        clGetSupportedImageFormats(ctx, 0, CL_MEM_OBJECT_BUFFER, 0, null_mut(), &mut n),
        CL_INVALID_VALUE
    );

    // A 400 x 200 RGBA8 image from host memory with a padded row pitch
    // (320 KB: several arena slices), read back exactly.
    let (w, h, pitch) = (400usize, 200usize, 1700usize);
    let src: Vec<u8> = (0..pitch * h).map(|i| (i * 7 % 253) as u8).collect();
    let d = desc(t2, [w, h, 0, 0], [pitch, 0]);
    let img = clCreateImage(
        ctx,
        CL_MEM_COPY_HOST_PTR,
        &RGBA8,
        &d,
        src.as_ptr() as *mut c_void,
        &mut err,
    );
    assert_eq!(err, CL_SUCCESS);
    let back = read_all(q, img, w, h);
    for y in 0..h {
        assert_eq!(
            &back[y * w * 4..(y + 1) * w * 4],
            &src[y * pitch..y * pitch + w * 4],
            "row {y}"
        );
    }
    {
        let m = model.lock().unwrap();
        let writes = m
            .log
            .iter()
            .filter(|l| l.0 == Opcode::ClWriteImage && l.1[0] == 0)
            .count();
        assert!(writes >= 2, "the initial pixels came in pieces on queue 0");
    }
    let mt: u32 = word_info(|s, v, r| mem::clGetMemObjectInfo(img, CL_MEM_TYPE, s, v, r));
    assert_eq!(mt, t2);
    let size: usize = word_info(|s, v, r| mem::clGetMemObjectInfo(img, CL_MEM_SIZE, s, v, r));
    assert_eq!(size, w * h * 4);
    let info = |p: u32| -> usize { word_info(|s, v, r| clGetImageInfo(img, p, s, v, r)) };
    assert_eq!(info(CL_IMAGE_ELEMENT_SIZE), 4);
    assert_eq!(info(CL_IMAGE_ROW_PITCH), w * 4);
    assert_eq!(info(CL_IMAGE_SLICE_PITCH), 0);
    assert_eq!((info(CL_IMAGE_WIDTH), info(CL_IMAGE_HEIGHT)), (w, h));
    assert_eq!((info(CL_IMAGE_DEPTH), info(CL_IMAGE_ARRAY_SIZE)), (0, 0));
    let f: [u32; 2] = word_info(|s, v, r| clGetImageInfo(img, CL_IMAGE_FORMAT, s, v, r));
    assert_eq!(f, [CL_RGBA, CL_UNORM_INT8]);
    let levels: u32 = word_info(|s, v, r| clGetImageInfo(img, CL_IMAGE_NUM_MIP_LEVELS, s, v, r));
    assert_eq!(levels, 0);

    // A sub-box written from memory with padded rows, then read through a map.
    let (o, reg) = ([5usize, 7, 0], [3usize, 2, 1]);
    let mut block = [0u8; 20 + 12];
    for (i, b) in block.iter_mut().enumerate() {
        *b = 200 + i as u8 % 50;
    }
    let r = clEnqueueWriteImage(
        q,
        img,
        CL_TRUE,
        o.as_ptr(),
        reg.as_ptr(),
        20,
        0,
        block.as_ptr().cast(),
        0,
        null(),
        null_mut(),
    );
    assert_eq!(r, CL_SUCCESS);
    let (mut rp, mut sp) = (0usize, 7usize);
    let p = clEnqueueMapImage(
        q,
        img,
        CL_TRUE,
        CL_MAP_READ | CL_MAP_WRITE,
        o.as_ptr(),
        reg.as_ptr(),
        &mut rp,
        &mut sp,
        0,
        null(),
        null_mut(),
        &mut err,
    );
    assert_eq!(err, CL_SUCCESS);
    assert_eq!((rp, sp), (12, 0));
    {
        // SAFETY: the map holds 2 rows of 12 bytes until the unmap.
        let mapped = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), 24) };
        assert_eq!(&mapped[..12], &block[..12]);
        assert_eq!(&mapped[12..], &block[20..32]);
        mapped[0] = 1;
        mapped[23] = 2;
    }
    assert_eq!(
        mem::clEnqueueUnmapMemObject(q, img, p, 0, null(), null_mut()),
        CL_SUCCESS
    );
    let back = read_all(q, img, w, h);
    assert_eq!(back[(7 * w + 5) * 4], 1);
    assert_eq!(back[(8 * w + 7) * 4 + 3], 2);
    assert_eq!(back[(8 * w + 7) * 4 + 2], block[20 + 10]);

    // Copies: image to buffer to another image, then image to image.
    let buf = mem::clCreateBuffer(ctx, 0, w * h * 4, null_mut(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let all = [w, h, 1];
    let zero = [0usize; 3];
    assert_eq!(
        clEnqueueCopyImageToBuffer(
            q,
            img,
            buf,
            zero.as_ptr(),
            all.as_ptr(),
            0,
            0,
            null(),
            null_mut()
        ),
        CL_SUCCESS
    );
    let d2 = desc(t2, [w, h, 0, 0], [0, 0]);
    let img2 = clCreateImage(ctx, 0, &RGBA8, &d2, null_mut(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    assert_eq!(
        clEnqueueCopyBufferToImage(
            q,
            buf,
            img2,
            0,
            zero.as_ptr(),
            all.as_ptr(),
            0,
            null(),
            null_mut()
        ),
        CL_SUCCESS
    );
    assert_eq!(read_all(q, img2, w, h), back);
    assert_eq!(
        clEnqueueCopyImageToBuffer(
            q,
            img,
            buf,
            zero.as_ptr(),
            all.as_ptr(),
            4,
            0,
            null(),
            null_mut()
        ),
        CL_INVALID_VALUE,
        "past the buffer's end"
    );
    let (so, dof, small) = ([0usize, 0, 0], [10usize, 10, 0], [4usize, 4, 1]);
    assert_eq!(
        clEnqueueCopyImage(
            q,
            img,
            img2,
            so.as_ptr(),
            dof.as_ptr(),
            small.as_ptr(),
            0,
            null(),
            null_mut()
        ),
        CL_SUCCESS
    );
    assert_eq!(
        clEnqueueCopyImage(
            q,
            img,
            img,
            so.as_ptr(),
            [2usize, 2, 0].as_ptr(),
            small.as_ptr(),
            0,
            null(),
            null_mut()
        ),
        CL_MEM_COPY_OVERLAP
    );
    let got = read_all(q, img2, w, h);
    assert_eq!(&got[(10 * w + 10) * 4..(10 * w + 14) * 4], &back[..16]);

    // Fill: one converted pixel, replicated.
    let color = [0.0f32, 1.0, 0.5, 1.0];
    assert_eq!(
        clEnqueueFillImage(
            q,
            img2,
            color.as_ptr().cast(),
            zero.as_ptr(),
            [2usize, 1, 1].as_ptr(),
            0,
            null(),
            null_mut()
        ),
        CL_SUCCESS
    );
    let got = read_all(q, img2, w, h);
    assert_eq!(&got[..8], &[0, 255, 128, 255, 0, 255, 128, 255]);

    // Buffers' commands refuse images, and boxes stay inside.
    let mut four = [0u8; 4];
    assert_eq!(
        mem::clEnqueueReadBuffer(
            q,
            img,
            CL_TRUE,
            0,
            4,
            four.as_mut_ptr().cast(),
            0,
            null(),
            null_mut()
        ),
        CL_INVALID_MEM_OBJECT
    );
    assert_eq!(
        clEnqueueReadImage(
            q,
            buf,
            CL_TRUE,
            zero.as_ptr(),
            [1usize, 1, 1].as_ptr(),
            0,
            0,
            four.as_mut_ptr().cast(),
            0,
            null(),
            null_mut()
        ),
        CL_INVALID_MEM_OBJECT
    );
    assert_eq!(
        clEnqueueReadImage(
            q,
            img,
            CL_TRUE,
            [w, 0, 0].as_ptr(),
            [1usize, 1, 1].as_ptr(),
            0,
            0,
            four.as_mut_ptr().cast(),
            0,
            null(),
            null_mut()
        ),
        CL_INVALID_VALUE
    );
    assert_eq!(
        clEnqueueReadImage(
            q,
            img,
            CL_TRUE,
            zero.as_ptr(),
            [1usize, 1, 2].as_ptr(),
            0,
            0,
            four.as_mut_ptr().cast(),
            0,
            null(),
            null_mut()
        ),
        CL_INVALID_VALUE
    );

    // Creation errors.
    let bad = |f: &ClImageFormat, d: &ClImageDesc, flags: u64, p: *mut c_void| {
        let mut e = 0;
        let h = clCreateImage(ctx, flags, f, d, p, &mut e);
        assert!(h.is_null());
        e
    };
    let some = src.as_ptr() as *mut c_void;
    assert_eq!(
        bad(&RGBA8, &desc(t2, [0, 4, 0, 0], [0, 0]), 0, null_mut()),
        CL_INVALID_IMAGE_SIZE
    );
    assert_eq!(
        bad(&RGBA8, &desc(t2, [4, 4, 0, 0], [16, 0]), 0, null_mut()),
        CL_INVALID_IMAGE_DESCRIPTOR
    );
    assert_eq!(
        bad(
            &RGBA8,
            &desc(t2, [4, 4, 0, 0], [12, 0]),
            CL_MEM_COPY_HOST_PTR,
            some
        ),
        CL_INVALID_IMAGE_DESCRIPTOR
    );
    assert_eq!(
        bad(
            &RGBA8,
            &desc(t2, [4, 4, 0, 0], [0, 0]),
            CL_MEM_COPY_HOST_PTR,
            null_mut()
        ),
        CL_INVALID_HOST_PTR
    );
    assert_eq!(
        bad(&RGBA8, &desc(t2, [1 << 18, 4, 0, 0], [0, 0]), 0, null_mut()),
        CL_INVALID_IMAGE_SIZE
    );
    let rgb8 = ClImageFormat {
        order: CL_RGB,
        channel_type: CL_UNORM_INT8,
    };
    assert_eq!(
        bad(&rgb8, &desc(t2, [4, 4, 0, 0], [0, 0]), 0, null_mut()),
        CL_INVALID_IMAGE_FORMAT_DESCRIPTOR
    );
    assert_eq!(
        bad(
            &RGBA8,
            &desc(CL_MEM_OBJECT_IMAGE1D_BUFFER, [4, 0, 0, 0], [0, 0]),
            0,
            null_mut()
        ),
        CL_INVALID_OPERATION
    );
    let e = clCreateImage(ctx, 0, &RGBA8, null(), null_mut(), &mut err);
    assert!(e.is_null());
    assert_eq!(err, CL_INVALID_IMAGE_DESCRIPTOR);
    let e = clCreateImage3D(ctx, 0, &RGBA8, 4, 4, 1, 0, 0, null_mut(), &mut err);
    assert!(e.is_null());
    assert_eq!(err, CL_INVALID_IMAGE_SIZE, "a 1.0 3D image has depth > 1");

    // A 3D R32F image with padded slices, and a sub-box read.
    let (x, y, z) = (8usize, 5usize, 4usize);
    let (rowp, slicep) = (x * 4 + 8, (x * 4 + 8) * (y + 1));
    let mut vol = vec![0u8; slicep * z];
    for k in 0..z {
        for j in 0..y {
            for i in 0..x {
                let v = (k * 100 + j * 10 + i) as f32;
                let at = k * slicep + j * rowp + i * 4;
                vol[at..at + 4].copy_from_slice(&v.to_ne_bytes());
            }
        }
    }
    let img3 = clCreateImage3D(
        ctx,
        CL_MEM_USE_HOST_PTR,
        &R32F,
        x,
        y,
        z,
        rowp,
        slicep,
        vol.as_mut_ptr().cast(),
        &mut err,
    );
    assert_eq!(err, CL_SUCCESS);
    let mut part = [0f32; 2 * 2 * 3];
    let r = clEnqueueReadImage(
        q,
        img3,
        CL_TRUE,
        [1usize, 2, 1].as_ptr(),
        [2usize, 2, 3].as_ptr(),
        0,
        0,
        part.as_mut_ptr().cast(),
        0,
        null(),
        null_mut(),
    );
    assert_eq!(r, CL_SUCCESS);
    let want: Vec<f32> = (1..4)
        .flat_map(|k| (2..4).flat_map(move |j| (1..3).map(move |i| (k * 100 + j * 10 + i) as f32)))
        .collect();
    assert_eq!(&part[..], &want[..]);
    let sp3: usize = word_info(|s, v, r| clGetImageInfo(img3, CL_IMAGE_SLICE_PITCH, s, v, r));
    assert_eq!(sp3, x * 4 * y);
    // A map of a USE_HOST_PTR image is the host memory, with its pitches.
    let (mut rp, mut sp) = (0usize, 0usize);
    let p = clEnqueueMapImage(
        q,
        img3,
        CL_TRUE,
        CL_MAP_WRITE,
        [1usize, 1, 1].as_ptr(),
        [1usize, 1, 1].as_ptr(),
        &mut rp,
        &mut sp,
        0,
        null(),
        null_mut(),
        &mut err,
    );
    assert_eq!(err, CL_SUCCESS);
    assert_eq!(p as usize, vol.as_ptr() as usize + slicep + rowp + 4);
    assert_eq!((rp, sp), (rowp, slicep));
    // SAFETY: the mapped pixel is 4 bytes of `vol`.
    unsafe { p.cast::<f32>().write_unaligned(-1.0) };
    assert_eq!(
        mem::clEnqueueUnmapMemObject(q, img3, p, 0, null(), null_mut()),
        CL_SUCCESS
    );
    let mut one = 0f32;
    let r = clEnqueueReadImage(
        q,
        img3,
        CL_TRUE,
        [1usize, 1, 1].as_ptr(),
        [1usize, 1, 1].as_ptr(),
        0,
        0,
        (&mut one as *mut f32).cast(),
        0,
        null(),
        null_mut(),
    );
    assert_eq!(r, CL_SUCCESS);
    assert_eq!(one, -1.0);

    // A 1D image wider than an arena slice: parts of a row.
    let wide = 100_000usize;
    let d1 = desc(CL_MEM_OBJECT_IMAGE1D, [wide, 0, 0, 0], [0, 0]);
    let img1 = clCreateImage(ctx, 0, &R32F, &d1, null_mut(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let line: Vec<f32> = (0..wide).map(|i| i as f32 * 0.5).collect();
    let mut wev: Handle = null_mut();
    let r = clEnqueueWriteImage(
        q,
        img1,
        CL_FALSE,
        zero.as_ptr(),
        [wide, 1, 1].as_ptr(),
        0,
        0,
        line.as_ptr().cast(),
        0,
        null(),
        &mut wev,
    );
    assert_eq!(r, CL_SUCCESS);
    let mut got = vec![0f32; wide];
    let r = clEnqueueReadImage(
        q,
        img1,
        CL_TRUE,
        zero.as_ptr(),
        [wide, 1, 1].as_ptr(),
        0,
        0,
        got.as_mut_ptr().cast(),
        1,
        &wev,
        null_mut(),
    );
    assert_eq!(r, CL_SUCCESS);
    assert!(got == line);
    assert_eq!(event::clReleaseEvent(wev), CL_SUCCESS);

    // Samplers, and a kernel that takes an image and a sampler.
    let smp = sampler::clCreateSampler(
        ctx,
        CL_FALSE,
        CL_ADDRESS_CLAMP_TO_EDGE,
        CL_FILTER_NEAREST,
        &mut err,
    );
    assert_eq!(err, CL_SUCCESS);
    let sinfo = |p: u32| -> u32 { word_info(|s, v, r| sampler::clGetSamplerInfo(smp, p, s, v, r)) };
    assert_eq!(sinfo(CL_SAMPLER_NORMALIZED_COORDS), CL_FALSE);
    assert_eq!(sinfo(CL_SAMPLER_ADDRESSING_MODE), CL_ADDRESS_CLAMP_TO_EDGE);
    assert_eq!(sinfo(CL_SAMPLER_FILTER_MODE), CL_FILTER_NEAREST);
    assert_eq!(sinfo(CL_SAMPLER_REFERENCE_COUNT), 1);
    let sctx: usize =
        word_info(|s, v, r| sampler::clGetSamplerInfo(smp, CL_SAMPLER_CONTEXT, s, v, r));
    assert_eq!(sctx, ctx as usize);
    assert_eq!(sampler::clRetainSampler(smp), CL_SUCCESS);
    assert_eq!(sinfo(CL_SAMPLER_REFERENCE_COUNT), 2);
    assert_eq!(sampler::clReleaseSampler(smp), CL_SUCCESS);
    let props = [
        u64::from(CL_SAMPLER_FILTER_MODE),
        u64::from(CL_FILTER_LINEAR),
        0,
    ];
    let smp2 = sampler::clCreateSamplerWithProperties(ctx, props.as_ptr(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let norm: u32 =
        word_info(|s, v, r| sampler::clGetSamplerInfo(smp2, CL_SAMPLER_NORMALIZED_COORDS, s, v, r));
    assert_eq!(norm, CL_TRUE);
    let bad_s = sampler::clCreateSampler(ctx, CL_TRUE, 0x1200, CL_FILTER_NEAREST, &mut err);
    assert!(bad_s.is_null());
    assert_eq!(err, CL_INVALID_VALUE);

    let text = std::ffi::CString::new(SAMPLE).unwrap();
    let prog = program::clCreateProgramWithSource(ctx, 1, &text.as_ptr(), null(), &mut err);
    assert_eq!(
        program::clBuildProgram(prog, 0, null(), null(), None, null_mut()),
        CL_SUCCESS
    );
    let k = kernel::clCreateKernel(prog, c"sample".as_ptr(), &mut err);
    assert_eq!(err, CL_SUCCESS);
    let set = |i: u32, v: &Handle| {
        kernel::clSetKernelArg(k, i, size_of::<Handle>(), (v as *const Handle).cast())
    };
    assert_eq!(set(0, &buf), CL_INVALID_MEM_OBJECT, "a buffer for an image");
    assert_eq!(set(1, &img), CL_INVALID_SAMPLER);
    assert_eq!(
        set(2, &img),
        CL_INVALID_MEM_OBJECT,
        "an image for a pointer"
    );
    assert_eq!(set(0, &img), CL_SUCCESS);
    assert_eq!(set(1, &smp), CL_SUCCESS);
    assert_eq!(set(2, &buf), CL_SUCCESS);
    let one = [1usize];
    let mut kev: Handle = null_mut();
    assert_eq!(
        kernel::clEnqueueNDRangeKernel(q, k, 1, null(), one.as_ptr(), null(), 0, null(), &mut kev),
        CL_SUCCESS
    );
    assert_eq!(
        event::clWaitForEvents(1, &kev),
        CL_SUCCESS,
        "the host got an image and a sampler"
    );
    assert_eq!(event::clReleaseEvent(kev), CL_SUCCESS);

    assert_eq!(kernel::clReleaseKernel(k), CL_SUCCESS);
    assert_eq!(program::clReleaseProgram(prog), CL_SUCCESS);
    for s in [smp, smp2] {
        assert_eq!(sampler::clReleaseSampler(s), CL_SUCCESS);
    }
    assert_eq!(sampler::clReleaseSampler(smp), CL_INVALID_SAMPLER);
    for m in [img, img2, img3, img1, buf] {
        assert_eq!(mem::clReleaseMemObject(m), CL_SUCCESS);
    }
}
