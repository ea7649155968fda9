//! A typed CUDA driver API client over a [`Channel`]: what the guest library
//! calls, and what Rust tests and tools use directly.
//!
//! Synchronous driver calls map to synchronous requests. Calls the driver
//! runs asynchronously (kernel launches, `*Async` copies and memsets, event
//! records) are fire-and-forget: they return once queued and their errors
//! surface at the next synchronous call, as on a real driver. Stream handle
//! 0 is the NULL stream.

use fairgpu_protocol::array::{
    tex_object_to_bytes, ArrayDesc, Copy3D, ResourceDesc, TextureDesc, COPY3D_BYTES, MEM_HOST,
};
use fairgpu_protocol::cuda::{LaunchHeader, LaunchOptions, ParamInfo, MAX_PARAMS};
use fairgpu_protocol::limits::REQUEST_ARGS;
use fairgpu_protocol::{Opcode, Status};

use crate::channel::{CallError, Channel};

/// A kernel found in a module: its handle and parameter layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The function handle.
    pub handle: u64,
    /// Offset and size of each parameter in the packed buffer.
    pub params: Vec<ParamInfo>,
    /// Whether the kernel can print (device `printf`, `assert`): after
    /// launching it, take the output at the next flush point
    /// ([`Cuda::take_output`]).
    pub prints: bool,
}

impl Kernel {
    /// Packs parameter values (each exactly its parameter's size) into the
    /// buffer layout the host expects.
    pub fn pack(&self, values: &[&[u8]]) -> Result<Vec<u8>, CallError> {
        if values.len() != self.params.len() {
            return Err(CallError::Cuda(Status::INVALID_VALUE));
        }
        let mut buf = vec![0u8; ParamInfo::packed_size(&self.params) as usize];
        for (p, v) in self.params.iter().zip(values) {
            if v.len() != p.size as usize {
                return Err(CallError::Cuda(Status::INVALID_VALUE));
            }
            buf[p.offset as usize..(p.offset + p.size) as usize].copy_from_slice(v);
        }
        Ok(buf)
    }
}

/// The host side of a rectangular copy: its rows packed (width × rows ×
/// slices bytes), to send or to fill.
#[derive(Debug)]
pub enum HostRows<'a> {
    /// Neither side is the host.
    None,
    /// The source is the host.
    From(&'a [u8]),
    /// The destination is the host.
    To(&'a mut [u8]),
}

/// A box of a rectangular copy: where it starts (x bytes, row, slice)
/// and its extent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    origin: [u64; 3],
    extent: [u64; 3],
}

impl Piece {
    fn bytes(&self) -> u64 {
        self.extent.iter().product()
    }
}

/// Splits a copy of `extent` into boxes of at most `cap` bytes (`cap` >
/// 0), in the order of the packed rows, each contiguous in them: whole
/// slices, else whole rows of one slice, else pieces of one row.
fn boxes(extent: [u64; 3], cap: u64) -> Vec<Piece> {
    let [w, h, d] = extent;
    let mut out = Vec::new();
    let slice = w.saturating_mul(h);
    if slice <= cap {
        let per = (cap / slice).max(1);
        let mut z = 0;
        while z < d {
            let n = per.min(d - z);
            out.push(Piece {
                origin: [0, 0, z],
                extent: [w, h, n],
            });
            z += n;
        }
        return out;
    }
    for z in 0..d {
        if w <= cap {
            let per = cap / w;
            let mut y = 0;
            while y < h {
                let n = per.min(h - y);
                out.push(Piece {
                    origin: [0, y, z],
                    extent: [w, n, 1],
                });
                y += n;
            }
            continue;
        }
        for y in 0..h {
            let mut x = 0;
            while x < w {
                let n = cap.min(w - x);
                out.push(Piece {
                    origin: [x, y, z],
                    extent: [n, 1, 1],
                });
                x += n;
            }
        }
    }
    out
}

/// The CUDA driver API over one channel.
#[derive(Debug)]
pub struct Cuda {
    ch: Channel,
}

fn args(v: &[u64]) -> [u64; REQUEST_ARGS] {
    let mut a = [0; REQUEST_ARGS];
    a[..v.len()].copy_from_slice(v);
    a
}

impl Cuda {
    /// Wraps a claimed channel.
    pub fn new(ch: Channel) -> Self {
        Cuda { ch }
    }

    /// The channel underneath.
    pub fn channel(&mut self) -> &mut Channel {
        &mut self.ch
    }

    fn call(&mut self, op: Opcode, a: &[u64]) -> Result<[u64; 5], CallError> {
        self.ch.call(op, args(a)).map(|r| r.vals)
    }

    fn query(&mut self, op: Opcode, a: &[u64]) -> Result<bool, CallError> {
        match self.call(op, a) {
            Ok(_) => Ok(true),
            Err(CallError::Cuda(Status::NOT_READY)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// `cuDriverGetVersion`.
    pub fn driver_version(&mut self) -> Result<i32, CallError> {
        Ok(self.call(Opcode::DriverGetVersion, &[])?[0] as i32)
    }

    /// `cuDeviceGetCount`.
    pub fn device_count(&mut self) -> Result<i32, CallError> {
        Ok(self.call(Opcode::DeviceGetCount, &[])?[0] as i32)
    }

    /// `cuDeviceGetAttribute`.
    pub fn device_attribute(&mut self, attr: i32, dev: i32) -> Result<i32, CallError> {
        Ok(self.call(Opcode::DeviceGetAttribute, &[attr as u64, dev as u64])?[0] as i32)
    }

    /// `cuDeviceGetName`.
    pub fn device_name(&mut self, dev: i32) -> Result<String, CallError> {
        let mut buf = [0u8; fairgpu_protocol::cuda::MAX_DEVICE_NAME];
        let r = self
            .ch
            .call_with(Opcode::DeviceGetName, args(&[dev as u64]), &[], &mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..r.data_len as usize]).into_owned())
    }

    /// `cuDeviceTotalMem` (bounded by the VM's quota).
    pub fn device_total_mem(&mut self, dev: i32) -> Result<u64, CallError> {
        Ok(self.call(Opcode::DeviceTotalMem, &[dev as u64])?[0])
    }

    /// `cuDeviceGetUuid`.
    pub fn device_uuid(&mut self, dev: i32) -> Result<[u8; 16], CallError> {
        let v = self.call(Opcode::DeviceGetUuid, &[dev as u64])?;
        let mut u = [0u8; 16];
        u[..8].copy_from_slice(&v[0].to_le_bytes());
        u[8..].copy_from_slice(&v[1].to_le_bytes());
        Ok(u)
    }

    /// `cuCtxSynchronize`.
    pub fn ctx_synchronize(&mut self) -> Result<(), CallError> {
        self.call(Opcode::CtxSynchronize, &[]).map(|_| ())
    }

    /// `cuMemAlloc`.
    pub fn mem_alloc(&mut self, bytes: u64) -> Result<u64, CallError> {
        Ok(self.call(Opcode::MemAlloc, &[bytes])?[0])
    }

    /// `cuMemFree`.
    pub fn mem_free(&mut self, ptr: u64) -> Result<(), CallError> {
        self.call(Opcode::MemFree, &[ptr]).map(|_| ())
    }

    /// `cuMemGetInfo` → (free, total).
    pub fn mem_get_info(&mut self) -> Result<(u64, u64), CallError> {
        let v = self.call(Opcode::MemGetInfo, &[])?;
        Ok((v[0], v[1]))
    }

    /// `cuMemcpyHtoD`: returns once the host has consumed every byte.
    pub fn memcpy_htod(&mut self, dst: u64, src: &[u8]) -> Result<(), CallError> {
        self.ch
            .send_bulk(Opcode::MemcpyHtoD, args(&[dst, 0]), 0, src)
            .map(|_| ())
    }

    /// `cuMemcpyHtoDAsync`: queued in chunks; `src` may be reused at once.
    pub fn memcpy_htod_async(
        &mut self,
        dst: u64,
        src: &[u8],
        stream: u64,
    ) -> Result<(), CallError> {
        let chunk = (self.ch.max_slice() / 4) as usize;
        for (i, piece) in src.chunks(chunk).enumerate() {
            let off = (i * chunk) as u64;
            self.ch.call_async(
                Opcode::MemcpyHtoD,
                args(&[dst.wrapping_add(off), stream]),
                piece,
            )?;
        }
        Ok(())
    }

    /// `cuMemcpyDtoH` (also what `cuMemcpyDtoHAsync` needs: the bytes come
    /// back with the response).
    pub fn memcpy_dtoh(&mut self, dst: &mut [u8], src: u64, stream: u64) -> Result<(), CallError> {
        self.ch
            .recv_bulk(Opcode::MemcpyDtoH, args(&[src, stream]), 0, dst)
    }

    /// `cuMemcpyDtoD`.
    pub fn memcpy_dtod(&mut self, dst: u64, src: u64, bytes: u64) -> Result<(), CallError> {
        self.call(Opcode::MemcpyDtoD, &[dst, src, bytes, 0])
            .map(|_| ())
    }

    /// `cuMemcpyDtoDAsync`.
    pub fn memcpy_dtod_async(
        &mut self,
        dst: u64,
        src: u64,
        bytes: u64,
        stream: u64,
    ) -> Result<(), CallError> {
        self.ch
            .call_async(Opcode::MemcpyDtoD, args(&[dst, src, bytes, stream]), &[])
    }

    /// `cuArray3DCreate` → array handle.
    pub fn array_create(&mut self, desc: &ArrayDesc) -> Result<u64, CallError> {
        let r = self
            .ch
            .call_with(Opcode::ArrayCreate, args(&[]), &desc.to_bytes(), &mut [])?;
        Ok(r.vals[0])
    }

    /// `cuArrayDestroy`.
    pub fn array_destroy(&mut self, array: u64) -> Result<(), CallError> {
        self.call(Opcode::ArrayDestroy, &[array]).map(|_| ())
    }

    /// `cuMemcpy3D` (and every 2D and array copy): `host` holds the packed
    /// rows of the host side, if one side is the host. Split into boxes
    /// that fit one arena slice, each a request of its own.
    pub fn memcpy_3d(
        &mut self,
        copy: &Copy3D,
        mut host: HostRows<'_>,
        stream: u64,
    ) -> Result<(), CallError> {
        let bad = CallError::Cuda(Status::INVALID_VALUE);
        let [w, h, d] = copy.extent;
        if w == 0 || h == 0 || d == 0 {
            return Ok(());
        }
        let packed = copy.host_bytes().ok_or(bad.clone())?;
        match &host {
            HostRows::None => {
                return self
                    .ch
                    .call_with(Opcode::Memcpy3D, args(&[stream]), &copy.to_bytes(), &mut [])
                    .map(|_| ());
            }
            HostRows::From(b) if b.len() as u64 != packed => return Err(bad),
            HostRows::To(b) if b.len() as u64 != packed => return Err(bad),
            _ => {}
        }
        let cap = u64::from(self.ch.max_slice()).saturating_sub(COPY3D_BYTES as u64);
        if cap == 0 {
            return Err(bad);
        }
        for piece in boxes(copy.extent, cap) {
            let mut c = *copy;
            c.extent = piece.extent;
            for side in [&mut c.src, &mut c.dst] {
                if side.kind != MEM_HOST {
                    for (p, o) in side.pos.iter_mut().zip(piece.origin) {
                        *p = p.checked_add(o).ok_or(bad.clone())?;
                    }
                }
            }
            // Each box is a contiguous run of the packed rows.
            let [x0, y0, z0] = piece.origin;
            let at = ((z0 * h + y0) * w + x0) as usize;
            let n = piece.bytes() as usize;
            match &mut host {
                HostRows::From(b) => {
                    let mut input = c.to_bytes();
                    input.extend_from_slice(&b[at..at + n]);
                    self.ch
                        .call_with(Opcode::Memcpy3D, args(&[stream]), &input, &mut [])?;
                }
                HostRows::To(b) => {
                    let r = self.ch.call_with(
                        Opcode::Memcpy3D,
                        args(&[stream]),
                        &c.to_bytes(),
                        &mut b[at..at + n],
                    )?;
                    if r.data_len as usize != n {
                        return Err(CallError::Cuda(Status::UNKNOWN));
                    }
                }
                HostRows::None => unreachable!("handled above"),
            }
        }
        Ok(())
    }

    /// `cuTexObjectCreate` → the object, as kernels receive it.
    pub fn tex_object_create(
        &mut self,
        res: &ResourceDesc,
        tex: &TextureDesc,
    ) -> Result<u64, CallError> {
        let input = tex_object_to_bytes(res, tex);
        let r = self
            .ch
            .call_with(Opcode::TexObjectCreate, args(&[]), &input, &mut [])?;
        Ok(r.vals[0])
    }

    /// `cuTexObjectDestroy`.
    pub fn tex_object_destroy(&mut self, obj: u64) -> Result<(), CallError> {
        self.call(Opcode::TexObjectDestroy, &[obj]).map(|_| ())
    }

    /// `cuSurfObjectCreate` over an array → the object.
    pub fn surf_object_create(&mut self, array: u64) -> Result<u64, CallError> {
        Ok(self.call(Opcode::SurfObjectCreate, &[array])?[0])
    }

    /// `cuSurfObjectDestroy`.
    pub fn surf_object_destroy(&mut self, obj: u64) -> Result<(), CallError> {
        self.call(Opcode::SurfObjectDestroy, &[obj]).map(|_| ())
    }

    /// `cuMemAddressReserve` → the range's base.
    pub fn mem_address_reserve(&mut self, bytes: u64, align: u64) -> Result<u64, CallError> {
        Ok(self.call(Opcode::MemAddressReserve, &[bytes, align])?[0])
    }

    /// `cuMemAddressFree` of a whole reservation.
    pub fn mem_address_free(&mut self, base: u64, bytes: u64) -> Result<(), CallError> {
        self.call(Opcode::MemAddressFree, &[base, bytes])
            .map(|_| ())
    }

    /// `cuMemCreate` → the memory's handle.
    pub fn mem_create(&mut self, bytes: u64) -> Result<u64, CallError> {
        Ok(self.call(Opcode::MemCreate, &[bytes])?[0])
    }

    /// `cuMemCreate` asking for compressible memory (or not) → the handle
    /// and whether the memory is compressible.
    pub fn mem_create_compressible(
        &mut self,
        bytes: u64,
        compressible: bool,
    ) -> Result<(u64, bool), CallError> {
        let v = self.call(Opcode::MemCreate, &[bytes, u64::from(compressible)])?;
        Ok((v[0], v[1] == 1))
    }

    /// `cuMemRelease`.
    pub fn mem_release(&mut self, handle: u64) -> Result<(), CallError> {
        self.call(Opcode::MemRelease, &[handle]).map(|_| ())
    }

    /// `cuMemMap`.
    pub fn mem_map(
        &mut self,
        addr: u64,
        bytes: u64,
        offset: u64,
        handle: u64,
    ) -> Result<(), CallError> {
        self.call(Opcode::MemMap, &[addr, bytes, offset, handle])
            .map(|_| ())
    }

    /// `cuMemUnmap`.
    pub fn mem_unmap(&mut self, addr: u64, bytes: u64) -> Result<(), CallError> {
        self.call(Opcode::MemUnmap, &[addr, bytes]).map(|_| ())
    }

    /// `cuMemSetAccess` (`prot`: 3 read-write, 1 read-only, 0 none).
    pub fn mem_set_access(&mut self, addr: u64, bytes: u64, prot: u64) -> Result<(), CallError> {
        self.call(Opcode::MemSetAccess, &[addr, bytes, prot])
            .map(|_| ())
    }

    /// `cuMemExportToShareableHandle`: a token naming memory `handle` for
    /// the VM's other processes.
    pub fn mem_export(&mut self, handle: u64) -> Result<u64, CallError> {
        Ok(self.call(Opcode::MemExport, &[handle])?[0])
    }

    /// `cuMemImportFromShareableHandle`: another process's exported memory
    /// → (a memory handle of this channel, its size).
    pub fn mem_import(&mut self, token: u64) -> Result<(u64, u64), CallError> {
        let v = self.call(Opcode::MemImport, &[token])?;
        Ok((v[0], v[1]))
    }

    /// `cuIpcGetMemHandle`: exports the allocation holding `ptr` to the
    /// VM's other processes → (token, base, size).
    pub fn ipc_get_mem_handle(&mut self, ptr: u64) -> Result<(u64, u64, u64), CallError> {
        let v = self.call(Opcode::IpcGetMemHandle, &[ptr])?;
        Ok((v[0], v[1], v[2]))
    }

    /// `cuIpcOpenMemHandle`: opens another process's export → (base, size).
    pub fn ipc_open_mem_handle(&mut self, token: u64) -> Result<(u64, u64), CallError> {
        let v = self.call(Opcode::IpcOpenMemHandle, &[token])?;
        Ok((v[0], v[1]))
    }

    /// `cuIpcGetEventHandle`: exports event `e` to the VM's other
    /// processes → its token.
    pub fn ipc_get_event_handle(&mut self, e: u64) -> Result<u64, CallError> {
        Ok(self.call(Opcode::IpcGetEventHandle, &[e])?[0])
    }

    /// `cuIpcOpenEventHandle`: another process's exported event → an event
    /// handle of this channel.
    pub fn ipc_open_event_handle(&mut self, token: u64) -> Result<u64, CallError> {
        Ok(self.call(Opcode::IpcOpenEventHandle, &[token])?[0])
    }

    /// A token with which the process's other channels may name this
    /// channel's host context ([`Cuda::context_join`]).
    pub fn context_share(&mut self) -> Result<u64, CallError> {
        Ok(self.call(Opcode::ContextShare, &[])?[0])
    }

    /// Names, from now on, the host context `token` names (from another
    /// channel's [`Cuda::context_share`]); the first request of a channel.
    pub fn context_join(&mut self, token: u64) -> Result<(), CallError> {
        self.call(Opcode::ContextJoin, &[token]).map(drop)
    }

    /// `ContextDestroy`: this channel's own context is destroyed now (see
    /// the opcode).
    pub fn context_destroy(&mut self) -> Result<(), CallError> {
        self.call(Opcode::ContextDestroy, &[]).map(drop)
    }

    /// `cuEventRecord` answered once the host has recorded it (what
    /// follows it in other processes' streams may wait for it).
    pub fn event_record_sync(&mut self, e: u64, s: u64) -> Result<(), CallError> {
        self.call(Opcode::EventRecord, &[e, s]).map(|_| ())
    }

    /// `cuIpcCloseMemHandle`.
    pub fn ipc_close_mem_handle(&mut self, base: u64) -> Result<(), CallError> {
        self.call(Opcode::IpcCloseMemHandle, &[base]).map(|_| ())
    }

    fn memset_op(elem: u8) -> Result<Opcode, CallError> {
        match elem {
            1 => Ok(Opcode::MemsetD8),
            2 => Ok(Opcode::MemsetD16),
            4 => Ok(Opcode::MemsetD32),
            _ => Err(CallError::Cuda(Status::INVALID_VALUE)),
        }
    }

    /// `cuMemsetD8/D16/D32` (`elem` = 1, 2 or 4 bytes).
    pub fn memset(&mut self, dst: u64, value: u32, elem: u8, count: u64) -> Result<(), CallError> {
        self.call(Self::memset_op(elem)?, &[dst, u64::from(value), count, 0])
            .map(|_| ())
    }

    /// `cuMemsetD8Async/D16Async/D32Async`.
    pub fn memset_async(
        &mut self,
        dst: u64,
        value: u32,
        elem: u8,
        count: u64,
        stream: u64,
    ) -> Result<(), CallError> {
        let op = Self::memset_op(elem)?;
        self.ch
            .call_async(op, args(&[dst, u64::from(value), count, stream]), &[])
    }

    /// `cuModuleLoadData`: loads the image (fatbin, cubin or PTX) from the
    /// host's per-VM cache if it holds it, else sends it in chunks.
    pub fn module_load(&mut self, image: &[u8]) -> Result<u64, CallError> {
        if image.is_empty() {
            return Err(CallError::Cuda(Status::INVALID_VALUE));
        }
        let [lo, hi] = fairgpu_protocol::cuda::image_hash(image);
        match self.call(Opcode::ModuleLoadCached, &[lo, hi, image.len() as u64]) {
            Ok(v) => return Ok(v[0]),
            Err(CallError::Cuda(Status::NOT_FOUND)) => {}
            Err(e) => return Err(e),
        }
        self.ch.send_bulk(
            Opcode::ModuleStage,
            args(&[0, image.len() as u64]),
            0,
            image,
        )?;
        Ok(self.call(Opcode::ModuleLoad, &[image.len() as u64])?[0])
    }

    /// `cuModuleUnload`.
    pub fn module_unload(&mut self, module: u64) -> Result<(), CallError> {
        self.call(Opcode::ModuleUnload, &[module]).map(|_| ())
    }

    /// `cuModuleGetFunction`, with the kernel's parameter layout.
    pub fn module_get_function(&mut self, module: u64, name: &str) -> Result<Kernel, CallError> {
        let mut out = vec![0u8; MAX_PARAMS * 8];
        let r = self.ch.call_with(
            Opcode::ModuleGetFunction,
            args(&[module, name.len() as u64]),
            name.as_bytes(),
            &mut out,
        )?;
        let params = ParamInfo::decode_all(&out[..r.data_len as usize])
            .filter(|p| p.len() as u64 == r.vals[1])
            .ok_or_else(|| CallError::Protocol("malformed parameter layout".into()))?;
        Ok(Kernel {
            handle: r.vals[0],
            params,
            prints: r.vals[2] & 1 != 0,
        })
    }

    /// Appends to `out` everything the channel's kernels printed and the
    /// host still holds, in order.
    pub fn take_output(&mut self, out: &mut Vec<u8>) -> Result<(), CallError> {
        /// Bytes asked for per request.
        const CHUNK: usize = 64 << 10;
        /// Most bytes one call takes (a host keeps at most 1 MiB).
        const MAX_TAKEN: usize = 4 << 20;
        let mut buf = vec![0u8; CHUNK];
        loop {
            // An earlier launch's failure stays for the next call: this one
            // only takes what was printed.
            let r = self.ch.call_with_keeping_errors(
                Opcode::CtxTakeOutput,
                args(&[]),
                &[],
                &mut buf,
            )?;
            let n = (r.data_len as usize).min(buf.len());
            out.extend_from_slice(&buf[..n]);
            // Stop when nothing is left, or nothing came, or at a bound (a
            // host that keeps saying "more" would loop forever).
            if r.vals[0] == 0 || n == 0 || out.len() >= MAX_TAKEN {
                return Ok(());
            }
        }
    }

    /// `cuModuleGetGlobal`: the device address and size of module variable
    /// `name`.
    pub fn module_get_global(&mut self, module: u64, name: &str) -> Result<(u64, u64), CallError> {
        self.module_get_global_info(module, name)
            .map(|(p, s, _)| (p, s))
    }

    /// `cuModuleGetGlobal` → (address, size, whether the variable is
    /// `__managed__`).
    pub fn module_get_global_info(
        &mut self,
        module: u64,
        name: &str,
    ) -> Result<(u64, u64, bool), CallError> {
        let r = self.ch.call_with(
            Opcode::ModuleGetGlobal,
            args(&[module, name.len() as u64]),
            name.as_bytes(),
            &mut [],
        )?;
        Ok((r.vals[0], r.vals[1], r.vals[2] & 1 != 0))
    }

    /// `cuFuncGetAttribute`: the host's answer, which describes the code
    /// that runs for the function.
    pub fn func_get_attribute(&mut self, function: u64, attr: i32) -> Result<i32, CallError> {
        let attr = u64::try_from(attr).map_err(|_| CallError::Cuda(Status::INVALID_VALUE))?;
        // The i32's bits travel in the low half.
        Ok(self.call(Opcode::FuncGetAttribute, &[function, attr])?[0] as u32 as i32)
    }

    /// `cuFuncSetAttribute`.
    pub fn func_set_attribute(
        &mut self,
        function: u64,
        attr: i32,
        value: i32,
    ) -> Result<(), CallError> {
        let attr = u64::try_from(attr).map_err(|_| CallError::Cuda(Status::INVALID_VALUE))?;
        self.call(
            Opcode::FuncSetAttribute,
            &[function, attr, u64::from(value as u32)],
        )
        .map(|_| ())
    }

    /// `cuCtxSetLimit` for a limit of [`fairgpu_protocol::cuda::limit`].
    pub fn ctx_set_limit(&mut self, limit: u32, value: u64) -> Result<(), CallError> {
        self.call(Opcode::CtxSetLimit, &[u64::from(limit), value])
            .map(|_| ())
    }

    /// `cuLaunchKernel` with a packed parameter buffer (fire-and-forget).
    pub fn launch(
        &mut self,
        kernel: u64,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        params: &[u8],
    ) -> Result<(), CallError> {
        self.launch_with(
            kernel,
            grid,
            block,
            shared_mem,
            stream,
            params,
            LaunchOptions::default(),
        )
    }

    /// `cuLaunchKernelEx`: [`Self::launch`] with thread-block clusters or
    /// a cooperative launch.
    #[allow(clippy::too_many_arguments)]
    pub fn launch_with(
        &mut self,
        kernel: u64,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem: u32,
        stream: u64,
        params: &[u8],
        options: LaunchOptions,
    ) -> Result<(), CallError> {
        let hdr = LaunchHeader {
            grid,
            block,
            shared_mem,
            param_bytes: params.len() as u32,
        };
        let mut buf = Vec::with_capacity(32 + params.len());
        buf.extend_from_slice(&hdr.to_bytes());
        buf.extend_from_slice(params);
        self.ch.call_async(
            Opcode::LaunchKernel,
            args(&[kernel, stream, options.to_arg()]),
            &buf,
        )
    }

    /// `cuStreamCreate`.
    pub fn stream_create(&mut self, flags: u32) -> Result<u64, CallError> {
        self.stream_create_with_priority(flags, 0).map(|(s, _)| s)
    }

    /// `cuStreamCreateWithPriority`: the stream, and the priority it got
    /// (the host clamps it to the context's range).
    pub fn stream_create_with_priority(
        &mut self,
        flags: u32,
        priority: i32,
    ) -> Result<(u64, i32), CallError> {
        let v = self.call(
            Opcode::StreamCreate,
            &[u64::from(flags), u64::from(priority as u32)],
        )?;
        Ok((v[0], v[1] as u32 as i32))
    }

    /// `cuCtxGetStreamPriorityRange`: (least, greatest).
    pub fn stream_priority_range(&mut self) -> Result<(i32, i32), CallError> {
        let v = self.call(Opcode::StreamPriorityRange, &[])?;
        Ok((v[0] as u32 as i32, v[1] as u32 as i32))
    }

    /// `cuStreamDestroy`.
    pub fn stream_destroy(&mut self, s: u64) -> Result<(), CallError> {
        self.call(Opcode::StreamDestroy, &[s]).map(|_| ())
    }

    /// `cuStreamSynchronize`.
    pub fn stream_synchronize(&mut self, s: u64) -> Result<(), CallError> {
        self.call(Opcode::StreamSynchronize, &[s]).map(|_| ())
    }

    /// `cuStreamQuery`: true when the stream's work is done.
    pub fn stream_query(&mut self, s: u64) -> Result<bool, CallError> {
        self.query(Opcode::StreamQuery, &[s])
    }

    /// `cuStreamWaitEvent` (fire-and-forget).
    pub fn stream_wait_event(&mut self, s: u64, e: u64) -> Result<(), CallError> {
        self.ch
            .call_async(Opcode::StreamWaitEvent, args(&[s, e]), &[])
    }

    /// `cuEventCreate`.
    pub fn event_create(&mut self, flags: u32) -> Result<u64, CallError> {
        Ok(self.call(Opcode::EventCreate, &[u64::from(flags)])?[0])
    }

    /// `cuEventDestroy`.
    pub fn event_destroy(&mut self, e: u64) -> Result<(), CallError> {
        self.call(Opcode::EventDestroy, &[e]).map(|_| ())
    }

    /// `cuEventRecord` (fire-and-forget).
    pub fn event_record(&mut self, e: u64, s: u64) -> Result<(), CallError> {
        self.ch.call_async(Opcode::EventRecord, args(&[e, s]), &[])
    }

    /// `cuEventQuery`: true when the event has completed.
    pub fn event_query(&mut self, e: u64) -> Result<bool, CallError> {
        self.query(Opcode::EventQuery, &[e])
    }

    /// `cuEventSynchronize`.
    pub fn event_synchronize(&mut self, e: u64) -> Result<(), CallError> {
        self.call(Opcode::EventSynchronize, &[e]).map(|_| ())
    }

    /// `cuEventElapsedTime` in milliseconds.
    pub fn event_elapsed_ms(&mut self, start: u64, end: u64) -> Result<f32, CallError> {
        Ok(f32::from_bits(
            self.call(Opcode::EventElapsedTime, &[start, end])?[0] as u32,
        ))
    }
}

#[cfg(test)]
mod box_tests {
    use super::{boxes, Piece};

    /// Every byte of the packed rows in exactly one box, in order, each
    /// box within the cap.
    fn check(extent: [u64; 3], cap: u64) {
        let [w, h, _] = extent;
        let mut next = 0;
        for p in boxes(extent, cap) {
            assert!(p.bytes() <= cap.max(1), "{p:?} over {cap}");
            let [x, y, z] = p.origin;
            assert_eq!((z * h + y) * w + x, next, "{p:?} not contiguous");
            next += p.bytes();
        }
        assert_eq!(next, extent.iter().product::<u64>());
    }

    #[test]
    fn boxes_cover_the_packed_rows_in_order() {
        check([16, 4, 3], 1 << 20);
        check([16, 4, 3], 64);
        check([16, 4, 3], 100);
        check([16, 4, 3], 20);
        check([16, 4, 3], 7);
        check([1000, 1, 1], 300);
        check([3, 5, 7], 1);
        assert_eq!(
            boxes([8, 2, 1], 1 << 10),
            vec![Piece {
                origin: [0, 0, 0],
                extent: [8, 2, 1]
            }]
        );
    }
}
