//! The opcode space.
//!
//! | range           | owner                                              |
//! |-----------------|----------------------------------------------------|
//! | `0x0000`        | never valid (a zeroed slot is not a request)       |
//! | `0x0001-0x00ff` | transport: no-op, bulk copies, channel control     |
//! | `0x0100-0x0fff` | CUDA driver API calls                              |
//! | `0x1000-0x1fff` | OpenCL calls (`crate::opencl`)                     |
//! | `0x2000-0xffff` | reserved                                           |
//!
//! A host that receives an opcode it does not know fails that request with
//! CUDA_ERROR_NOT_SUPPORTED; the channel stays up.

/// Operations a request can ask for.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// Does nothing; answers with `vals[0] = args[0]`. Used to measure the
    /// round trip.
    Nop = 0x0001,
    /// Copies the request's arena slice into the host's per-channel scratch
    /// buffer at offset `args[0]`. Used to measure bulk bandwidth.
    CopyIn = 0x0002,
    /// Copies `arena_len` bytes of the scratch buffer from offset `args[0]`
    /// into the request's arena slice.
    CopyOut = 0x0003,

    // CUDA driver API; arguments and results are documented in
    // `crate::cuda` and docs/wire-protocol.md.
    /// `cuDriverGetVersion` → `vals[0]`.
    DriverGetVersion = 0x0100,
    /// `cuDeviceGetCount` → `vals[0]`.
    DeviceGetCount = 0x0101,
    /// `cuDeviceGetAttribute(args[0] = attribute, args[1] = ordinal)` → `vals[0]` (i32).
    DeviceGetAttribute = 0x0102,
    /// `cuDeviceGetName(args[0] = ordinal)` → name bytes in the arena.
    DeviceGetName = 0x0103,
    /// `cuDeviceTotalMem(args[0] = ordinal)` → `vals[0]`, bounded by the VM's quota.
    DeviceTotalMem = 0x0104,
    /// `cuDeviceGetUuid(args[0] = ordinal)` → 16 bytes in `vals[0..2]`.
    DeviceGetUuid = 0x0105,
    /// `cuCtxSynchronize`.
    CtxSynchronize = 0x0110,
    /// Takes what the channel's kernels printed (device `printf`, failed
    /// `assert`s): as many bytes as the arena slice holds, written there;
    /// `vals[0]` = bytes still waiting.
    CtxTakeOutput = 0x0111,
    /// `cuCtxSetLimit(args[0] = limit, args[1] = value)` for STACK_SIZE,
    /// PRINTF_FIFO_SIZE and MALLOC_HEAP_SIZE ([`crate::cuda::limit`]),
    /// all charged against the VM's quota; the heap's size cannot change
    /// once a kernel that uses the heap has run (INVALID_VALUE).
    CtxSetLimit = 0x0112,
    /// `cuMemAlloc(args[0] = bytes)` → `vals[0]` = device pointer.
    MemAlloc = 0x0120,
    /// `cuMemFree(args[0] = device pointer)`.
    MemFree = 0x0121,
    /// `cuMemGetInfo` → `vals[0]` = free, `vals[1]` = total (quota view).
    MemGetInfo = 0x0122,
    /// `cuMemcpyHtoD(args[0] = dst, args[1] = stream)`, data in the arena.
    MemcpyHtoD = 0x0123,
    /// `cuMemcpyDtoH(args[0] = src, args[1] = stream)`, `arena_len` bytes back.
    MemcpyDtoH = 0x0124,
    /// `cuMemcpyDtoD(args[0] = dst, args[1] = src, args[2] = bytes, args[3] = stream)`.
    MemcpyDtoD = 0x0125,
    /// `cuMemsetD8(args[0] = dst, args[1] = value, args[2] = count, args[3] = stream)`.
    MemsetD8 = 0x0126,
    /// `cuMemsetD16`, arguments as `MemsetD8`.
    MemsetD16 = 0x0127,
    /// `cuMemsetD32`, arguments as `MemsetD8`.
    MemsetD32 = 0x0128,
    /// Stages part of a module image: `args[0]` = offset, `args[1]` = total
    /// size; data in the arena. Offset 0 starts a new image.
    ModuleStage = 0x0130,
    /// Loads the staged image (`args[0]` = its size) → `vals[0]` = module.
    ModuleLoad = 0x0131,
    /// `cuModuleUnload(args[0] = module)`.
    ModuleUnload = 0x0132,
    /// `cuModuleGetFunction(args[0] = module, args[1] = name length)`, name in the arena →
    /// `vals[0]` = function, `vals[1]` = parameter count, `vals[2]` = flags
    /// (bit 0: the kernel can print), layout in the arena.
    ModuleGetFunction = 0x0133,
    /// Loads an image the host already holds for this VM, named by its
    /// [`crate::cuda::image_hash`] (`args[0]`, `args[1]`) and size
    /// (`args[2]`) → `vals[0]` = module; `NOT_FOUND` if not cached.
    ModuleLoadCached = 0x0134,
    /// `cuFuncGetAttribute(args[0] = function, args[1] = attribute)` →
    /// `vals[0]` (i32), describing the code the executor runs.
    FuncGetAttribute = 0x0135,
    /// `cuFuncSetAttribute(args[0] = function, args[1] = attribute,
    /// args[2] = value as i32)`.
    FuncSetAttribute = 0x0136,
    /// `cuModuleGetGlobal(args[0] = module, args[1] = name length)`, name
    /// in the arena → `vals[0]` = device address, `vals[1]` = size.
    ModuleGetGlobal = 0x0137,
    /// `cuLaunchKernel(args[0] = function, args[1] = stream)`, arena:
    /// [`crate::cuda::LaunchHeader`] then the packed parameters.
    LaunchKernel = 0x0140,
    /// A graph launch: `args[0]` steps, each an asynchronous request of
    /// the kinds [`crate::cuda::graph_step_allowed`] lists, packed in the
    /// arena ([`crate::cuda::graph_steps`]). The host answers once it has
    /// queued them; each then runs as its own piece of device work, in
    /// order, before the channel's next request.
    GraphLaunch = 0x0141,
    /// `cuStreamCreateWithPriority(args[0] = flags, args[1] = priority,
    /// an i32, clamped by the host to the context's range)` → `vals[0]` =
    /// stream, `vals[1]` = the priority it has (i32).
    StreamCreate = 0x0150,
    /// `cuStreamDestroy(args[0] = stream)`.
    StreamDestroy = 0x0151,
    /// `cuStreamSynchronize(args[0] = stream)`.
    StreamSynchronize = 0x0152,
    /// `cuStreamQuery(args[0] = stream)`: SUCCESS or NOT_READY.
    StreamQuery = 0x0153,
    /// `cuStreamWaitEvent(args[0] = stream, args[1] = event)`.
    StreamWaitEvent = 0x0154,
    /// `cuCtxGetStreamPriorityRange` of the channel's context → `vals[0]` =
    /// least priority, `vals[1]` = greatest (i32 each; both 0 where the
    /// executor has no priorities).
    StreamPriorityRange = 0x0155,
    /// `cuEventCreate(args[0] = flags)` → `vals[0]` = event.
    EventCreate = 0x0160,
    /// `cuEventDestroy(args[0] = event)`.
    EventDestroy = 0x0161,
    /// `cuEventRecord(args[0] = event, args[1] = stream)`.
    EventRecord = 0x0162,
    /// `cuEventQuery(args[0] = event)`: SUCCESS or NOT_READY.
    EventQuery = 0x0163,
    /// `cuEventSynchronize(args[0] = event)`.
    EventSynchronize = 0x0164,
    /// `cuEventElapsedTime(args[0] = start, args[1] = end)` → `vals[0]` = f32 bits, ms.
    EventElapsedTime = 0x0165,
    /// `cuArray3DCreate`: arena holds a [`crate::array::ArrayDesc`] →
    /// `vals[0]` = array.
    ArrayCreate = 0x0170,
    /// `cuArrayDestroy(args[0] = array)`.
    ArrayDestroy = 0x0171,
    /// A rectangular copy (`cuMemcpy2D/3D`, to and from arrays,
    /// `args[0]` = stream): arena holds a [`crate::array::Copy3D`], then the
    /// packed host data when the source is the host; when the destination
    /// is the host, the packed data comes back in the arena.
    Memcpy3D = 0x0172,
    /// `cuTexObjectCreate`: arena holds a [`crate::array::ResourceDesc`] and
    /// a [`crate::array::TextureDesc`] → `vals[0]` = the object, as kernels
    /// receive it.
    TexObjectCreate = 0x0173,
    /// `cuTexObjectDestroy(args[0] = object)`.
    TexObjectDestroy = 0x0174,
    /// `cuSurfObjectCreate(args[0] = array)` → `vals[0]` = the object.
    SurfObjectCreate = 0x0175,
    /// `cuSurfObjectDestroy(args[0] = object)`.
    SurfObjectDestroy = 0x0176,

    // The virtual-memory API; see `crate::cuda::VMM_GRANULARITY`.
    /// `cuMemAddressReserve(args[0] = bytes, args[1] = alignment)` →
    /// `vals[0]` = the range's base (no memory behind it).
    MemAddressReserve = 0x0180,
    /// `cuMemAddressFree(args[0] = base, args[1] = bytes)`: a whole
    /// reservation with nothing mapped in it.
    MemAddressFree = 0x0181,
    /// `cuMemCreate(args[0] = bytes, args[1] = 1 for compressible memory)`
    /// → `vals[0]` = a handle to that much device memory, charged against
    /// the VM's quota, `vals[1]` = 1 if it is compressible.
    MemCreate = 0x0182,
    /// `cuMemRelease(args[0] = handle)`: the memory goes once unmapped.
    MemRelease = 0x0183,
    /// `cuMemMap(args[0] = address, args[1] = bytes, args[2] = offset into
    /// the memory, args[3] = handle)`.
    MemMap = 0x0184,
    /// `cuMemUnmap(args[0] = address, args[1] = bytes)`: whole mappings.
    MemUnmap = 0x0185,
    /// `cuMemSetAccess(args[0] = address, args[1] = bytes, args[2] = 3
    /// read-write, 1 read-only, 0 none)`: whole mappings.
    MemSetAccess = 0x0186,
    /// `cuMemExportToShareableHandle(args[0] = memory handle)` →
    /// `vals[0]` = a token naming the memory, for another process of the
    /// VM (the same token for the same memory).
    MemExport = 0x0187,
    /// `cuMemImportFromShareableHandle(args[0] = token)` → `vals[0]` = a
    /// memory handle of this channel naming the exporter's memory,
    /// `vals[1]` = its size.
    MemImport = 0x0188,

    // CUDA IPC between processes of one VM (one worker serves them all).
    /// `cuIpcGetMemHandle(args[0] = a device pointer inside an allocation
    /// of the channel)` → `vals[0]` = the export's token, `vals[1]` = the
    /// allocation's base, `vals[2]` = its size.
    IpcGetMemHandle = 0x0190,
    /// `cuIpcOpenMemHandle(args[0] = token)` from another channel of the
    /// VM → `vals[0]` = base, `vals[1]` = size.
    IpcOpenMemHandle = 0x0191,
    /// `cuIpcCloseMemHandle(args[0] = base)` of an opened handle.
    IpcCloseMemHandle = 0x0192,
    /// `cuIpcGetEventHandle(args[0] = event)` → `vals[0]` = the export's
    /// token.
    IpcGetEventHandle = 0x0193,
    /// `cuIpcOpenEventHandle(args[0] = token)` from another channel of the
    /// VM → `vals[0]` = an event handle of this channel naming it
    /// (`EventDestroy` closes it).
    IpcOpenEventHandle = 0x0194,

    // Channels of one guest process that share its host context (a
    // channel per thread; see docs/guest.md).
    /// The channel's context may be joined by the process's other
    /// channels → `vals[0]` = a token naming it (the same for every ask
    /// while the channel's claim lasts). Makes no context itself.
    ContextShare = 0x01a0,
    /// `args[0]` = a token `ContextShare` gave another channel of the VM:
    /// this channel, which must not have made a context yet, names that
    /// channel's context from now on; its requests are ordered with the
    /// other members' by their call ids (one counter per process).
    ContextJoin = 0x01a1,
    /// The channel's context is destroyed now (`cuCtxDestroy` of a context
    /// made with `cuCtxCreate`, which has a channel of its own;
    /// `cuDevicePrimaryCtxReset` on the process's channel, for every
    /// channel that joined it): its memory, modules, streams and events are
    /// freed and counted back to the VM's quota; a later request of any of
    /// its channels makes a fresh one. No context yet: nothing to do.
    ContextDestroy = 0x01a2,

    // OpenCL; arguments and results are documented in `crate::opencl`.
    /// `clGetDeviceInfo(args[0] = param)` of the channel's host device → the
    /// value's bytes in the arena, `vals[0]` = its full size. The host
    /// bounds memory sizes by the VM's quota.
    ClGetDeviceInfo = 0x1000,
    /// `clGetPlatformInfo(args[0] = param)` of the host platform → as `ClGetDeviceInfo`.
    ClGetPlatformInfo = 0x1001,
    /// `clCreateCommandQueue(args[0] = properties)` → `vals[0]` = queue.
    ClCreateQueue = 0x1010,
    /// Releases queue `args[0]` (after finishing it).
    ClReleaseQueue = 0x1011,
    /// `clFinish(args[0] = queue)`.
    ClFinish = 0x1012,
    /// `clFlush(args[0] = queue)`.
    ClFlush = 0x1013,
    /// `clCreateBuffer(args[0] = flags, args[1] = size)` → `vals[0]` = buffer.
    /// Host-pointer flags are the guest's business: initial data follows as
    /// a `ClWriteBuffer`.
    ClCreateBuffer = 0x1020,
    /// `clCreateSubBuffer(args[0] = parent, args[1] = flags, args[2] =
    /// origin, args[3] = size)` → `vals[0]` = buffer.
    ClCreateSubBuffer = 0x1021,
    /// Releases buffer `args[0]`.
    ClReleaseMem = 0x1022,
    /// `clEnqueueWriteBuffer(args[0] = queue, args[1] = buffer, args[2] =
    /// offset, args[4] = event)`, the data in the arena.
    ClWriteBuffer = 0x1023,
    /// `clEnqueueReadBuffer(args[0] = queue, args[1] = buffer, args[2] =
    /// offset, args[4] = event)` → `arena_len` bytes in the arena (blocking).
    ClReadBuffer = 0x1024,
    /// `clEnqueueCopyBuffer(args[0] = queue, args[1] = src, args[2] = dst,
    /// args[4] = event)`, arena: src offset, dst offset, size (u64 words).
    ClCopyBuffer = 0x1025,
    /// `clEnqueueFillBuffer(args[0] = queue, args[1] = buffer, args[2] =
    /// offset, args[3] = size, args[4] = event)`, the pattern in the arena.
    ClFillBuffer = 0x1026,
    /// Stages part of a program's source or binary: `args[0]` = offset,
    /// `args[1]` = total size; data in the arena. Offset 0 starts anew.
    ClProgramStage = 0x1030,
    /// Creates and builds a program from the staged bytes (`args[0]` = 0:
    /// source, 1: binary; `args[1]` = staged size; `args[2]` = program to
    /// replace or 0), options in the arena → `vals[0]` = program, `vals[1]`
    /// = the build's OpenCL status (0 or negative, as i64 bits).
    ClBuildProgram = 0x1031,
    /// The build log of program `args[0]` → bytes in the arena, `vals[0]` = full length.
    ClProgramLog = 0x1032,
    /// Bytes of program `args[0]`'s binary from offset `args[1]` → arena,
    /// `vals[0]` = its total size.
    ClProgramBinary = 0x1033,
    /// `CL_PROGRAM_KERNEL_NAMES` of program `args[0]` → arena, `vals[0]` = full length.
    ClProgramKernelNames = 0x1034,
    /// Releases program `args[0]`.
    ClReleaseProgram = 0x1035,
    /// `clCreateKernel(args[0] = program, args[1] = name length)`, the name in
    /// the arena → `vals[0]` = kernel, `vals[1]` = its argument count.
    ClCreateKernel = 0x1040,
    /// Releases kernel `args[0]`.
    ClReleaseKernel = 0x1041,
    /// `clGetKernelWorkGroupInfo(args[0] = kernel, args[1] = param)` → as `ClGetDeviceInfo`.
    ClKernelWorkGroupInfo = 0x1042,
    /// `clGetKernelArgInfo(args[0] = kernel, args[1] = index, args[2] = param)` → as `ClGetDeviceInfo`.
    ClKernelArgInfo = 0x1043,
    /// `clEnqueueNDRangeKernel(args[0] = queue, args[1] = kernel, args[4] =
    /// event)`, arena: [`crate::opencl::NdRangeHeader`] then the arguments.
    ClNdRange = 0x1050,
    /// `clEnqueueMarkerWithWaitList(args[0] = queue, args[4] = event)`.
    ClMarker = 0x1051,
    /// A barrier on queue `args[0]` that waits for the events (u64 ids) in the
    /// arena; with none, for every command queued before it.
    ClWaitList = 0x1052,
    /// `clWaitForEvents` of the events (u64 ids) in the arena.
    ClWaitEvents = 0x1060,
    /// `CL_EVENT_COMMAND_EXECUTION_STATUS` of event `args[0]` → `vals[0]` (i64 bits).
    ClEventStatus = 0x1061,
    /// Profiling times of event `args[0]` → `vals[0..4]` = queued, submit, start, end (ns).
    ClEventProfiling = 0x1062,
    /// Forgets event `args[0]`.
    ClReleaseEvent = 0x1063,
    /// `clCreateImage(args[0] = flags)`, arena: a [`crate::opencl::ImageDesc`]
    /// → `vals[0]` = the image (a memory object, in the buffers' handle
    /// space), `vals[1]` = element size, `vals[2]` = its bytes.
    ClCreateImage = 0x1027,
    /// `clGetSupportedImageFormats(args[0] = flags, args[1] = image type)` →
    /// `(order, type)` u32 pairs in the arena, `vals[0]` = how many there are.
    ClImageFormats = 0x1028,
    /// `clEnqueueWriteImage(args[0] = queue, args[1] = image, args[4] =
    /// event)`, arena: a [`crate::opencl::ImageRegion`] then the region's
    /// bytes, packed (rows of `region[0]` elements, no padding).
    ClWriteImage = 0x1029,
    /// `clEnqueueReadImage(args[0] = queue, args[1] = image, args[4] =
    /// event)`, arena: a [`crate::opencl::ImageRegion`] → the region's bytes,
    /// packed, from offset 0 of the arena (blocking).
    ClReadImage = 0x102a,
    /// `clEnqueueCopyImage(args[0] = queue, args[1] = src, args[2] = dst,
    /// args[4] = event)`, arena: src origin, dst origin, region (u64 words).
    ClCopyImage = 0x102b,
    /// `clEnqueueCopyImageToBuffer(args[0] = queue, args[1] = image, args[2] =
    /// buffer, args[4] = event)`, arena: origin, region, buffer offset (u64 words).
    ClCopyImageToBuffer = 0x102c,
    /// `clEnqueueCopyBufferToImage(args[0] = queue, args[1] = buffer, args[2] =
    /// image, args[4] = event)`, arena: buffer offset, origin, region (u64 words).
    ClCopyBufferToImage = 0x102d,
    /// `clCreateSampler(args[0] = normalized coordinates, args[1] = addressing
    /// mode, args[2] = filter mode)` → `vals[0]` = sampler.
    ClCreateSampler = 0x1044,
    /// Releases sampler `args[0]`.
    ClReleaseSampler = 0x1045,
}

/// The first opcode of the CUDA driver API range.
pub const CUDA_FIRST: u16 = 0x0100;
/// The last opcode of the CUDA driver API range.
pub const CUDA_LAST: u16 = 0x0fff;

impl Opcode {
    /// Whether this is an OpenCL call (`0x1000..=0x1fff`).
    pub fn is_opencl(self) -> bool {
        (crate::opencl::CL_FIRST..=crate::opencl::CL_LAST).contains(&(self as u16))
    }
}

/// An opcode this protocol version does not define.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown opcode {0:#06x}")]
pub struct UnknownOpcode(pub u16);

impl TryFrom<u16> for Opcode {
    type Error = UnknownOpcode;

    fn try_from(v: u16) -> Result<Self, Self::Error> {
        Opcode::ALL
            .iter()
            .copied()
            .find(|op| *op as u16 == v)
            .ok_or(UnknownOpcode(v))
    }
}

impl Opcode {
    /// Every opcode, for exhaustive tests and documentation.
    pub const ALL: [Opcode; 106] = [
        Opcode::Nop,
        Opcode::CopyIn,
        Opcode::CopyOut,
        Opcode::DriverGetVersion,
        Opcode::DeviceGetCount,
        Opcode::DeviceGetAttribute,
        Opcode::DeviceGetName,
        Opcode::DeviceTotalMem,
        Opcode::DeviceGetUuid,
        Opcode::CtxSynchronize,
        Opcode::CtxTakeOutput,
        Opcode::CtxSetLimit,
        Opcode::MemAlloc,
        Opcode::MemFree,
        Opcode::MemGetInfo,
        Opcode::MemcpyHtoD,
        Opcode::MemcpyDtoH,
        Opcode::MemcpyDtoD,
        Opcode::MemsetD8,
        Opcode::MemsetD16,
        Opcode::MemsetD32,
        Opcode::ModuleStage,
        Opcode::ModuleLoad,
        Opcode::ModuleUnload,
        Opcode::ModuleGetFunction,
        Opcode::ModuleLoadCached,
        Opcode::FuncGetAttribute,
        Opcode::FuncSetAttribute,
        Opcode::ModuleGetGlobal,
        Opcode::LaunchKernel,
        Opcode::GraphLaunch,
        Opcode::StreamCreate,
        Opcode::StreamDestroy,
        Opcode::StreamSynchronize,
        Opcode::StreamQuery,
        Opcode::StreamWaitEvent,
        Opcode::StreamPriorityRange,
        Opcode::EventCreate,
        Opcode::EventDestroy,
        Opcode::EventRecord,
        Opcode::EventQuery,
        Opcode::EventSynchronize,
        Opcode::EventElapsedTime,
        Opcode::ArrayCreate,
        Opcode::ArrayDestroy,
        Opcode::Memcpy3D,
        Opcode::TexObjectCreate,
        Opcode::TexObjectDestroy,
        Opcode::SurfObjectCreate,
        Opcode::SurfObjectDestroy,
        Opcode::MemAddressReserve,
        Opcode::MemAddressFree,
        Opcode::MemCreate,
        Opcode::MemRelease,
        Opcode::MemMap,
        Opcode::MemUnmap,
        Opcode::MemSetAccess,
        Opcode::MemExport,
        Opcode::MemImport,
        Opcode::IpcGetMemHandle,
        Opcode::IpcOpenMemHandle,
        Opcode::IpcCloseMemHandle,
        Opcode::IpcGetEventHandle,
        Opcode::IpcOpenEventHandle,
        Opcode::ContextShare,
        Opcode::ContextJoin,
        Opcode::ContextDestroy,
        Opcode::ClGetDeviceInfo,
        Opcode::ClGetPlatformInfo,
        Opcode::ClCreateQueue,
        Opcode::ClReleaseQueue,
        Opcode::ClFinish,
        Opcode::ClFlush,
        Opcode::ClCreateBuffer,
        Opcode::ClCreateSubBuffer,
        Opcode::ClReleaseMem,
        Opcode::ClWriteBuffer,
        Opcode::ClReadBuffer,
        Opcode::ClCopyBuffer,
        Opcode::ClFillBuffer,
        Opcode::ClProgramStage,
        Opcode::ClBuildProgram,
        Opcode::ClProgramLog,
        Opcode::ClProgramBinary,
        Opcode::ClProgramKernelNames,
        Opcode::ClReleaseProgram,
        Opcode::ClCreateKernel,
        Opcode::ClReleaseKernel,
        Opcode::ClKernelWorkGroupInfo,
        Opcode::ClKernelArgInfo,
        Opcode::ClNdRange,
        Opcode::ClMarker,
        Opcode::ClWaitList,
        Opcode::ClWaitEvents,
        Opcode::ClEventStatus,
        Opcode::ClEventProfiling,
        Opcode::ClReleaseEvent,
        Opcode::ClCreateImage,
        Opcode::ClImageFormats,
        Opcode::ClWriteImage,
        Opcode::ClReadImage,
        Opcode::ClCopyImage,
        Opcode::ClCopyImageToBuffer,
        Opcode::ClCopyBufferToImage,
        Opcode::ClCreateSampler,
        Opcode::ClReleaseSampler,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_zero() {
        for op in Opcode::ALL {
            assert_eq!(Opcode::try_from(op as u16), Ok(op));
        }
        assert_eq!(Opcode::try_from(0), Err(UnknownOpcode(0)));
        assert_eq!(Opcode::try_from(0x7777), Err(UnknownOpcode(0x7777)));
        for op in Opcode::ALL {
            let v = op as u16;
            assert!(
                v < 0x0100
                    || (CUDA_FIRST..=CUDA_LAST).contains(&v)
                    || (crate::opencl::CL_FIRST..=crate::opencl::CL_LAST).contains(&v),
                "{op:?} outside its range"
            );
        }
    }
}
