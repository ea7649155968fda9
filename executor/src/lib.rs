//! `GpuExecutor`: the only seam between request handling and a device.
//!
//! An executor drives one device for one worker process (one VM). Each guest
//! channel gets its own context ([`GpuExecutor::create_context`]); every
//! other call names the context it acts in. Identifiers an executor hands
//! out ([`CtxId`], [`ModId`], [`FnId`], [`StreamId`], [`EventId`]) never
//! reach the guest: the request layer maps them to opaque per-channel
//! handles. Device pointers do reach the guest (kernels need real
//! addresses), but the request layer checks every pointer and range against
//! the channel's own allocations before calling the executor, so an executor
//! may trust the ranges it is given.
//!
//! Implementations:
//! - [`sim::SimGpu`]: the embedded default without a GPU, a model of a
//!   non-preemptive GPU that executes PTX with `fairgpu-ptx`.
//! - [`cuda::CudaExecutor`]: a real NVIDIA GPU through cudarc.
//!
//! Besides: decoding of the module images guests send (fatbins, compressed
//! entries: `cuda::prepare_image`, `sim::parse_image`), the VM's
//! host-memory budget that everything an executor keeps for a guest is
//! charged to ([`host_memory`]), and the host clock that SimGpu's shared
//! device timeline and the worker's accounting share ([`clock`]).
//!
//! This crate knows nothing of rings, channels or the daemon: the worker
//! (`fairgpu`'s request layer) validates every request before it reaches an
//! executor.

pub mod clock;
pub mod cuda;
pub mod host_memory;
pub mod opencl;
pub mod sim;

use fairgpu_protocol::cuda::ParamInfo;
use fairgpu_protocol::Status;

pub use fairgpu_protocol::array::{ArrayDesc, TextureDesc};
pub use fairgpu_protocol::cuda::LaunchOptions;

/// A device address.
pub type DevPtr = u64;

macro_rules! ids {
    ($($(#[$m:meta])* $name:ident),*) => {$(
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub u64);
    )*};
}

ids!(
    /// A context (one per guest channel).
    CtxId,
    /// A loaded module.
    ModId,
    /// A kernel of a loaded module.
    FnId,
    /// A stream.
    StreamId,
    /// An event.
    EventId,
    /// A CUDA array.
    ArrayId,
    /// Device memory made by `cuMemCreate` (the virtual-memory API).
    PhysId
);

/// Where one side of a rectangular copy is, resolved by the request layer
/// (pointers and arrays checked against the context's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// The guest's bytes, packed: rows of the copy's width, one after the
    /// other ([`HostData`]).
    Host,
    /// Device memory: `pitch` bytes per row, `height` rows per slice.
    Device {
        ptr: DevPtr,
        pitch: u64,
        height: u64,
    },
    /// A CUDA array.
    Array(ArrayId),
}

/// One side of a rectangular copy and where in it the copy starts (x in
/// bytes, y in rows, z in slices).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RectSide {
    pub place: Place,
    pub pos: [u64; 3],
}

/// A rectangular copy (`cuMemcpy3D`): `extent` is bytes per row, rows,
/// slices; none is zero, and every byte it touches lies inside its side
/// (the request layer checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RectCopy {
    pub src: RectSide,
    pub dst: RectSide,
    pub extent: [u64; 3],
}

/// The guest's side of a rectangular copy: packed rows to send, or room
/// for them to come back.
#[derive(Debug)]
pub enum HostData<'a> {
    /// Neither side is the host.
    None,
    /// The source is the host.
    From(&'a [u8]),
    /// The destination is the host.
    To(&'a mut [u8]),
}

/// What a texture object reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TexResource {
    /// A CUDA array.
    Array(ArrayId),
    /// Linear device memory of `bytes` bytes (`tex1Dfetch`).
    Linear {
        ptr: DevPtr,
        format: u32,
        channels: u32,
        bytes: u64,
    },
    /// Pitched device memory: `width` elements per row.
    Pitch2D {
        ptr: DevPtr,
        format: u32,
        channels: u32,
        width: u64,
        height: u64,
        pitch: u64,
    },
}

/// CU_DEVICE_ATTRIBUTE values the request layer and tests refer to by name.
pub mod attr {
    /// CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK.
    pub const MAX_THREADS_PER_BLOCK: i32 = 1;
    /// CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT.
    pub const MULTIPROCESSOR_COUNT: i32 = 16;
    /// CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR.
    pub const MAX_THREADS_PER_MULTIPROCESSOR: i32 = 39;
    /// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR.
    pub const COMPUTE_CAPABILITY_MAJOR: i32 = 75;
    /// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR.
    pub const COMPUTE_CAPABILITY_MINOR: i32 = 76;
    /// CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN.
    pub const MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: i32 = 97;
}

/// `CUfunction_attribute` values.
pub mod func_attr {
    /// Most threads a block of this function may have.
    pub const MAX_THREADS_PER_BLOCK: i32 = 0;
    /// Static shared memory per block, bytes.
    pub const SHARED_SIZE_BYTES: i32 = 1;
    /// User constant memory, bytes.
    pub const CONST_SIZE_BYTES: i32 = 2;
    /// Local memory per thread, bytes.
    pub const LOCAL_SIZE_BYTES: i32 = 3;
    /// Registers per thread.
    pub const NUM_REGS: i32 = 4;
    /// PTX virtual architecture the function was compiled for (major × 10 + minor).
    pub const PTX_VERSION: i32 = 5;
    /// Binary architecture of the code that runs (major × 10 + minor).
    pub const BINARY_VERSION: i32 = 6;
    /// Whether compiled with `-Xptxas --dlcm=ca`.
    pub const CACHE_MODE_CA: i32 = 7;
    /// Most dynamic shared memory a launch may ask for (settable).
    pub const MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
    /// Preferred shared-memory carveout, percent or -1 (settable).
    pub const PREFERRED_SHARED_MEMORY_CARVEOUT: i32 = 9;
    /// The last attribute CUDA 12/13 define
    /// (`CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE`).
    pub const LAST: i32 = 15;
}

/// What the guest learns about the device.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceProps {
    /// Marketing name, e.g. "NVIDIA H100 80GB HBM3" or "fairgpu SimGpu".
    pub name: String,
    /// Device memory in bytes (before any VM quota).
    pub total_mem: u64,
    /// Device UUID.
    pub uuid: [u8; 16],
    /// Driver version as `cuDriverGetVersion` reports it (e.g. 12090).
    pub driver_version: i32,
    /// `(CUdevice_attribute, value)` pairs; attributes not listed are
    /// reported as unsupported.
    pub attributes: Vec<(i32, i32)>,
}

/// Device attributes that advertise a feature fairgpu does not carry
/// across the remoting boundary yet, with the feature's name: a device
/// reports them as 0 whatever the hardware has, so that programs take
/// their fallback instead of failing (or computing wrong data) in a call
/// that is not forwarded. Remove an entry when its feature works end to end.
pub const UNREMOTED_FEATURES: &[(i32, &str)] = &[
    (88, "PAGEABLE_MEMORY_ACCESS"),
    (89, "CONCURRENT_MANAGED_ACCESS"),
    (91, "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM"),
    (92, "CAN_USE_STREAM_MEM_OPS_V1"),
    (93, "CAN_USE_64_BIT_STREAM_MEM_OPS_V1"),
    (94, "CAN_USE_STREAM_WAIT_VALUE_NOR_V1"),
    (96, "COOPERATIVE_MULTI_DEVICE_LAUNCH"),
    (100, "PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES"),
    (101, "DIRECT_MANAGED_MEM_ACCESS_FROM_HOST"),
    (104, "HANDLE_TYPE_WIN32_HANDLE_SUPPORTED"),
    (105, "HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED"),
    (110, "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED"),
    (112, "SPARSE_CUDA_ARRAY_SUPPORTED"),
    (114, "TIMELINE_SEMAPHORE_INTEROP_SUPPORTED"),
    (116, "GPU_DIRECT_RDMA_SUPPORTED"),
    (119, "MEMPOOL_SUPPORTED_HANDLE_TYPES"),
];

impl DeviceProps {
    /// Reports every attribute of [`UNREMOTED_FEATURES`] as 0.
    pub fn mask_unremoted_features(&mut self) {
        for (attr, value) in &mut self.attributes {
            if UNREMOTED_FEATURES.iter().any(|(a, _)| a == attr) {
                *value = 0;
            }
        }
    }

    /// The value of attribute `a`, if the device reports it.
    pub fn attribute(&self, a: i32) -> Option<i32> {
        self.attributes
            .iter()
            .find(|(k, _)| *k == a)
            .map(|(_, v)| *v)
    }
}

/// Launch geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Grid dimensions in blocks.
    pub grid: [u32; 3],
    /// Block dimensions in threads.
    pub block: [u32; 3],
    /// Dynamic shared memory per block in bytes.
    pub shared_mem: u32,
    /// Thread-block clusters and cooperative launch.
    pub options: LaunchOptions,
    /// Run only this box of the grid's blocks (kernel slicing,
    /// docs/long-kernels.md); `None`: the whole grid.
    pub part: Option<GridPart>,
}

/// A box of a grid's blocks that one sub-launch of a sliced kernel runs:
/// blocks `offset ..offset + extent` in each dimension. The kernel sees
/// the block indices and grid size of the whole launch (`%ctaid` counts
/// from the box's offset, `%nctaid` is [`LaunchConfig::grid`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GridPart {
    /// The box's first block.
    pub offset: [u32; 3],
    /// The box's size in blocks (none zero).
    pub extent: [u32; 3],
}

impl GridPart {
    /// Blocks in the box.
    pub fn blocks(&self) -> u64 {
        self.extent.iter().map(|&v| u64::from(v)).product()
    }

    /// Whether the box is non-empty and lies inside `grid`.
    pub fn fits(&self, grid: [u32; 3]) -> bool {
        (0..3).all(|d| {
            self.extent[d] > 0
                && u64::from(self.offset[d]) + u64::from(self.extent[d]) <= u64::from(grid[d])
        })
    }
}

/// Why a kernel cannot run as parts of its grid; it then runs whole.
pub type Unsliceable = &'static str;

/// A request that ran past the VM's limit on one request's device time
/// (the runaway guard, docs/long-kernels.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runaway {
    /// The context whose kernel overran.
    pub ctx: CtxId,
    /// The kernel's name.
    pub kernel: String,
    /// How long it had run when it was noticed, ns.
    pub ran_ns: u64,
}

impl LaunchConfig {
    /// A plain launch of this geometry.
    pub const fn new(grid: [u32; 3], block: [u32; 3], shared_mem: u32) -> LaunchConfig {
        LaunchConfig {
            grid,
            block,
            shared_mem,
            options: LaunchOptions {
                cluster: [1, 1, 1],
                cooperative: false,
            },
            part: None,
        }
    }

    /// Blocks in the whole grid (saturating: the worker refuses grids past
    /// `fairgpu_protocol::cuda::MAX_GRID`, whose count fits).
    pub fn blocks(&self) -> u64 {
        self.grid
            .iter()
            .fold(1u64, |n, &v| n.saturating_mul(u64::from(v)))
    }
}

/// Why an executor call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExecError {
    /// A driver call returned an error.
    #[error("{call} failed: {status}")]
    Driver {
        /// The driver function.
        call: &'static str,
        /// Its result.
        status: Status,
    },
    /// No usable device (no libcuda, no GPU, init failed).
    #[error("no usable GPU: {0}")]
    NoDevice(String),
    /// The device is out of memory.
    #[error("out of device memory allocating {0} bytes")]
    OutOfMemory(u64),
    /// The VM's host-memory budget cannot hold what the call needs
    /// (`host_memory` in its configuration).
    #[error("{0}")]
    HostMemory(#[from] host_memory::HostMemoryExceeded),
    /// A module image the executor cannot load.
    #[error("invalid module image: {0}")]
    InvalidImage(String),
    /// A kernel name not in the module.
    #[error("no kernel named {0:?} in the module")]
    NotFound(String),
    /// SimGpu met a kernel its cost model does not cover.
    #[error("SimGpu cannot emulate kernel {0:?} (add it to [sim] kernels in the configuration)")]
    CannotEmulate(String),
    /// SimGpu cannot execute a kernel's code (PTX its interpreter does not
    /// implement, or cannot parse).
    #[error("SimGpu cannot execute kernel {kernel:?}: {reason}")]
    CannotExecute {
        /// The kernel.
        kernel: String,
        /// What the interpreter met.
        reason: String,
    },
    /// An identifier or argument the executor does not know.
    #[error("invalid {0}")]
    Invalid(&'static str),
    /// Queried work has not finished.
    #[error("not ready")]
    NotReady,
    /// What the executor does not implement.
    #[error("not supported: {0}")]
    Unsupported(&'static str),
}

impl ExecError {
    /// The CUresult the guest sees: the one mapping from executor errors to
    /// CUDA codes on the host side.
    pub fn status(&self) -> Status {
        match self {
            ExecError::Driver { status, .. } => *status,
            ExecError::NoDevice(_) => Status::NO_DEVICE,
            ExecError::OutOfMemory(_) | ExecError::HostMemory(_) => Status::OUT_OF_MEMORY,
            ExecError::InvalidImage(_) => Status::INVALID_IMAGE,
            ExecError::NotFound(_) => Status::NOT_FOUND,
            ExecError::CannotEmulate(_) | ExecError::CannotExecute { .. } => Status::NOT_SUPPORTED,
            ExecError::Invalid(_) => Status::INVALID_VALUE,
            ExecError::NotReady => Status::NOT_READY,
            ExecError::Unsupported(_) => Status::NOT_SUPPORTED,
        }
    }
}

/// Result of executor calls.
pub type ExecResult<T> = Result<T, ExecError>;

/// What a synchronization waits for ([`GpuExecutor::sync_pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncTarget {
    /// Every stream of the context.
    Context,
    /// One stream (`None`: the legacy default stream).
    Stream(Option<StreamId>),
    /// An event's last record.
    Event(EventId),
}

/// The work a synchronization waits for, as issued when it was marked
/// ([`GpuExecutor::sync_mark`]); opaque to the caller.
#[derive(Debug, PartialEq, Eq)]
pub struct SyncMark(pub u64);

/// Whether a mark's work is done ([`GpuExecutor::sync_pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPending {
    /// Done (or failed: the synchronization answers the error).
    Done,
    /// Modelled to end in this long (SimGpu).
    In(std::time::Duration),
    /// Running, for how long more the executor cannot tell (a real GPU).
    Running,
}

/// One device, driven for one VM. `None` as a stream means the NULL stream.
pub trait GpuExecutor: Send {
    /// The device's properties.
    fn device(&self) -> &DeviceProps;
    /// Device memory currently free on the device (all VMs together).
    fn device_free_mem(&mut self) -> ExecResult<u64>;
    /// Device time consumed by this executor's kernels so far, in ns.
    fn gpu_time_ns(&mut self) -> u64;

    /// Creates a context for one guest channel.
    fn create_context(&mut self) -> ExecResult<CtxId>;
    /// Destroys a context and everything in it (allocations, modules,
    /// streams, events).
    fn destroy_context(&mut self, ctx: CtxId);
    /// Waits for all work of the context.
    fn synchronize(&mut self, ctx: CtxId) -> ExecResult<()>;
    /// How long ago the work issued to the context so far completed, if the
    /// executor keeps the device's own clock (SimGpu): accounting charges a
    /// synchronised stretch up to that instant rather than up to when the
    /// waiting thread ran again. Zero if it has not completed; `None` when
    /// unknown (a real GPU, whose synchronisation returns within
    /// microseconds of the work's end).
    fn completed_ago(&mut self, _ctx: CtxId) -> Option<std::time::Duration> {
        None
    }

    /// A snapshot of the work synchronization `what` of `ctx` waits for
    /// (the work issued to it so far), when the executor can tell that
    /// work's end without waiting: SimGpu on the real clock (the modelled
    /// end), a real GPU (marker events recorded now). Work issued later, by
    /// other threads of the guest, is not part of it, as a driver's
    /// synchronization waits only for what was issued before it. `None`:
    /// unknown (a virtual clock, a bad handle, too many streams): the caller
    /// serves the synchronization, which waits. A mark is ended by
    /// [`GpuExecutor::sync_marked`] or [`GpuExecutor::sync_forget`].
    fn sync_mark(&mut self, _ctx: CtxId, _what: SyncTarget) -> Option<SyncMark> {
        None
    }

    /// Whether the work of `mark` is done, without waiting.
    fn sync_pending(&mut self, _ctx: CtxId, _mark: &SyncMark) -> SyncPending {
        SyncPending::Done
    }

    /// The synchronization of `mark`: waits for its work alone (done
    /// already, or nearly) and answers as the synchronization would, its
    /// errors included. Ends the mark.
    fn sync_marked(&mut self, ctx: CtxId, mark: SyncMark) -> ExecResult<()> {
        self.synchronize(ctx)?;
        self.sync_forget(ctx, mark);
        Ok(())
    }

    /// Ends a mark without synchronizing (its request was not served as
    /// marked). A mark of a context already destroyed is ignored.
    fn sync_forget(&mut self, _ctx: CtxId, _mark: SyncMark) {}

    /// Whether a sticky error ([`Status::is_sticky`]) in one context
    /// leaves every context of this executor's process unusable, as on a
    /// real CUDA driver (new contexts included: `cuCtxCreate` then fails
    /// with the same error). The worker then has to be replaced by a fresh
    /// process once the faulting guest is gone (`CudaOps::recycle_due` in the worker).
    /// SimGpu keeps its contexts apart, so its sticky errors stay in the
    /// faulting context.
    fn sticky_errors_poison_process(&self) -> bool {
        false
    }

    /// Allocates `bytes` of device memory.
    fn mem_alloc(&mut self, ctx: CtxId, bytes: u64) -> ExecResult<DevPtr>;
    /// Frees an allocation made by `mem_alloc` in this context.
    fn mem_free(&mut self, ctx: CtxId, ptr: DevPtr) -> ExecResult<()>;
    /// Whether memory made by `phys_create` is compressible when asked
    /// for (`CU_MEM_ALLOCATION_COMP_GENERIC`): SimGpu's memory is, as
    /// compression changes no byte a program reads (its cost model does
    /// not model it). The CUDA executor does not ask its driver for it.
    fn compresses(&self) -> bool {
        false
    }
    /// Device memory a context's call stacks take with `per_thread` bytes
    /// of stack a thread (`cuCtxSetLimit(STACK_SIZE)`), counted against
    /// the VM's quota: a GPU's driver reserves that much for every thread
    /// the device can hold at once. SimGpu bounds each launch's stacks
    /// itself (host memory, per launch): 0.
    fn stack_reserve(&self, _per_thread: u64) -> u64 {
        0
    }
    /// Whether [`GpuExecutor::mem_move`] works: an allocation can change
    /// contexts (SimGpu, whose contexts are tables of one process's
    /// memory), which the request layer uses to let a process of the VM
    /// reach memory another exported to it (CUDA IPC).
    fn moves_memory(&self) -> bool {
        false
    }
    /// Moves the allocation `mem_alloc` made at `ptr` from context `from`
    /// to context `to`, unchanged (same address, same bytes): from then
    /// on it is `to`'s, for kernels, copies and frees alike.
    fn mem_move(&mut self, from: CtxId, to: CtxId, ptr: DevPtr) -> ExecResult<()> {
        let _ = (from, to, ptr);
        Err(ExecError::Unsupported(
            "allocations moving between contexts (CUDA IPC)",
        ))
    }
    /// Moves event `e` from context `from` to context `to`, with its
    /// recorded state, as [`GpuExecutor::mem_move`] moves memory.
    fn event_move(&mut self, from: CtxId, to: CtxId, e: EventId) -> ExecResult<()> {
        let _ = (from, to, e);
        Err(ExecError::Unsupported(
            "events moving between contexts (CUDA IPC)",
        ))
    }

    // The virtual-memory API. The request layer checks every range and
    // handle first: sizes, offsets and addresses are multiples of
    // `VMM_GRANULARITY`, a mapping lies in one reservation of the context
    // over no other mapping, `offset + bytes` lies in the memory, and
    // unmaps, access changes and frees name whole mappings and whole
    // reservations with nothing mapped.

    /// Reserves `bytes` of device address space aligned to `align` (a
    /// power of two, at least the granularity), with no memory behind it.
    fn va_reserve(&mut self, _ctx: CtxId, _bytes: u64, _align: u64) -> ExecResult<DevPtr> {
        Err(ExecError::Unsupported("the virtual-memory API"))
    }
    /// Frees a reservation with nothing mapped in it.
    fn va_free(&mut self, _ctx: CtxId, _base: DevPtr, _bytes: u64) -> ExecResult<()> {
        Err(ExecError::Unsupported("the virtual-memory API"))
    }
    /// Makes `bytes` of device memory, to be mapped.
    fn phys_create(&mut self, _ctx: CtxId, _bytes: u64) -> ExecResult<PhysId> {
        Err(ExecError::Unsupported("the virtual-memory API"))
    }
    /// Frees memory made by `phys_create` that is mapped nowhere.
    fn phys_release(&mut self, _ctx: CtxId, _mem: PhysId) -> ExecResult<()> {
        Err(ExecError::Unsupported("the virtual-memory API"))
    }
    /// Moves memory `mem` that `phys_create` made from context `from`'s
    /// table to `to`'s, unchanged (same handle, same bytes), so that `to`
    /// may map and release it: a shareable handle another process of the
    /// VM imported (`cuMemImportFromShareableHandle`). The request layer
    /// keeps which context holds it.
    fn phys_move(&mut self, _from: CtxId, _to: CtxId, _mem: PhysId) -> ExecResult<()> {
        Err(ExecError::Unsupported(
            "memory of the virtual-memory API moving between contexts (shareable handles)",
        ))
    }
    /// Maps `bytes` of memory `mem` from `offset` at `addr`.
    fn map(
        &mut self,
        _ctx: CtxId,
        _addr: DevPtr,
        _bytes: u64,
        _offset: u64,
        _mem: PhysId,
    ) -> ExecResult<()> {
        Err(ExecError::Unsupported("the virtual-memory API"))
    }
    /// Unmaps the mapping at `addr` of `bytes`.
    fn unmap(&mut self, _ctx: CtxId, _addr: DevPtr, _bytes: u64) -> ExecResult<()> {
        Err(ExecError::Unsupported("the virtual-memory API"))
    }
    /// Sets the device's access to the mappings in `addr..addr + bytes`:
    /// `prot` 3 read-write, 1 read-only, 0 none (`CUmemAccess_flags`).
    fn set_access(
        &mut self,
        _ctx: CtxId,
        _addr: DevPtr,
        _bytes: u64,
        _prot: u32,
    ) -> ExecResult<()> {
        Err(ExecError::Unsupported("the virtual-memory API"))
    }
    /// Copies host bytes to the device.
    fn memcpy_htod(
        &mut self,
        ctx: CtxId,
        dst: DevPtr,
        src: &[u8],
        stream: Option<StreamId>,
    ) -> ExecResult<()>;
    /// Copies device bytes to the host; returns once `dst` holds them.
    fn memcpy_dtoh(
        &mut self,
        ctx: CtxId,
        dst: &mut [u8],
        src: DevPtr,
        stream: Option<StreamId>,
    ) -> ExecResult<()>;
    /// Copies between device ranges.
    fn memcpy_dtod(
        &mut self,
        ctx: CtxId,
        dst: DevPtr,
        src: DevPtr,
        bytes: u64,
        stream: Option<StreamId>,
    ) -> ExecResult<()>;
    /// Sets `count` elements of `elem_size` (1, 2 or 4) bytes to `value`.
    fn memset(
        &mut self,
        ctx: CtxId,
        dst: DevPtr,
        value: u32,
        elem_size: u8,
        count: u64,
        stream: Option<StreamId>,
    ) -> ExecResult<()>;

    /// Loads a module from a fatbin, cubin or PTX image.
    fn module_load(&mut self, ctx: CtxId, image: &[u8]) -> ExecResult<ModId>;
    /// Unloads a module (its functions become invalid).
    fn module_unload(&mut self, ctx: CtxId, module: ModId) -> ExecResult<()>;
    /// Looks a kernel up by name; returns it and its parameter layout.
    fn function(
        &mut self,
        ctx: CtxId,
        module: ModId,
        name: &str,
    ) -> ExecResult<(FnId, Vec<ParamInfo>)>;
    /// `cuModuleGetGlobal`: the device address and size of the module
    /// variable (`__device__`, `__constant__`) `name`. Copies and memsets
    /// reach it as device memory of the context, and the module's kernels
    /// see what they write.
    fn module_global(&mut self, ctx: CtxId, module: ModId, name: &str)
        -> ExecResult<(DevPtr, u64)>;
    /// Whether module variable `name` (at `ptr`, as [`Self::module_global`]
    /// gave it) is `__managed__`: the guest program addresses it from the
    /// CPU too, so the guest library keeps a copy of it coherent.
    fn module_global_managed(
        &mut self,
        _ctx: CtxId,
        _module: ModId,
        _name: &str,
        _ptr: DevPtr,
    ) -> bool {
        false
    }
    /// Whether function `f` can print (device `printf` or `assert`): its
    /// launches may leave output for [`GpuExecutor::take_output`].
    fn function_prints(&mut self, _ctx: CtxId, _f: FnId) -> bool {
        false
    }
    /// Takes up to `max` bytes of what the context's kernels printed, in
    /// order, and says how many more wait. An executor whose device prints
    /// elsewhere (a real driver prints to the worker's own stdout) has none.
    fn take_output(&mut self, _ctx: CtxId, _max: usize) -> ExecResult<(Vec<u8>, u64)> {
        Ok((Vec::new(), 0))
    }
    /// `cuCtxSetLimit` for a limit of [`fairgpu_protocol::cuda::limit`]
    /// (the worker has charged a heap size to the VM's quota). The heap's
    /// size cannot change once the context's heap exists.
    fn set_limit(&mut self, ctx: CtxId, limit: u32, value: u64) -> ExecResult<()>;
    /// Whether launches of `f` use the context's device heap (`malloc`,
    /// `new`): the worker charges the default heap to the VM at the first.
    /// False where the executor cannot tell.
    fn function_uses_heap(&mut self, _ctx: CtxId, _f: FnId) -> bool {
        false
    }
    /// `cuFuncGetAttribute`: a [`func_attr`] value of function `f`, which
    /// describes the code this executor runs for it.
    fn function_attribute(&mut self, ctx: CtxId, f: FnId, attr: i32) -> ExecResult<i32>;
    /// `cuFuncSetAttribute`: sets a settable [`func_attr`] of `f`.
    fn set_function_attribute(
        &mut self,
        ctx: CtxId,
        f: FnId,
        attr: i32,
        value: i32,
    ) -> ExecResult<()>;
    /// Launches a kernel with its packed parameter buffer.
    fn launch(
        &mut self,
        ctx: CtxId,
        f: FnId,
        cfg: &LaunchConfig,
        params: &[u8],
        stream: Option<StreamId>,
    ) -> ExecResult<()>;

    /// Whether `f` can run as parts of its grid ([`LaunchConfig::part`]);
    /// if not, why. By default no kernel can.
    fn sliceable(&mut self, _ctx: CtxId, _f: FnId) -> Result<(), Unsliceable> {
        Err("this executor cannot run part of a grid")
    }
    /// Prepare modules loaded from now on for kernel slicing (CudaExecutor:
    /// PTX modules get part companions). SimGpu needs nothing.
    fn set_slicing(&mut self, _on: bool) {}
    /// The device time a launch of `f` over `blocks` blocks is predicted to
    /// take, from the durations of its earlier launches (ns per block);
    /// `None` until one was measured.
    fn predict_ns(&mut self, _ctx: CtxId, _f: FnId, _blocks: u64) -> Option<u64> {
        None
    }
    /// The runaway guard: one request may use at most `limit` of device
    /// time (`None`: no limit). See [`GpuExecutor::runaway`].
    fn set_request_limit(&mut self, _limit: Option<std::time::Duration>) {}
    /// A kernel that has run past the request limit and that this executor
    /// cannot stop itself (CudaExecutor: the driver does not end a
    /// context's running kernel; only the process's exit does). Looked at
    /// without blocking; the worker's answer is to fail the VM's channels
    /// and exit. SimGpu ends the modelled kernel at the limit itself (a
    /// sticky CUDA_ERROR_LAUNCH_TIMEOUT) and never reports one here.
    fn runaway(&mut self) -> Option<Runaway> {
        None
    }
    /// Requests the runaway guard ended so far.
    fn runaways(&self) -> u64 {
        0
    }

    /// `cuArray3DCreate`: an array of a validated description, counted
    /// against the device's memory.
    fn array_create(&mut self, ctx: CtxId, desc: &ArrayDesc) -> ExecResult<ArrayId>;
    /// `cuArrayDestroy`.
    fn array_destroy(&mut self, ctx: CtxId, a: ArrayId) -> ExecResult<()>;
    /// `cuMemcpy3D`: a rectangular copy between device memory, arrays and
    /// the guest's bytes, ordered on `stream`. Returns once `host` is
    /// consumed or filled.
    fn memcpy_rect(
        &mut self,
        ctx: CtxId,
        copy: &RectCopy,
        host: HostData<'_>,
        stream: Option<StreamId>,
    ) -> ExecResult<()>;
    /// `cuTexObjectCreate`: returns the object's value, as kernels receive
    /// it in their parameters.
    fn tex_object_create(
        &mut self,
        ctx: CtxId,
        res: &TexResource,
        tex: &TextureDesc,
    ) -> ExecResult<u64>;
    /// `cuTexObjectDestroy` of an object this context created.
    fn tex_object_destroy(&mut self, ctx: CtxId, t: u64) -> ExecResult<()>;
    /// `cuSurfObjectCreate` over an array created with surface load/store.
    fn surf_object_create(&mut self, ctx: CtxId, a: ArrayId) -> ExecResult<u64>;
    /// `cuSurfObjectDestroy` of an object this context created.
    fn surf_object_destroy(&mut self, ctx: CtxId, s: u64) -> ExecResult<()>;

    /// Creates a stream.
    fn stream_create(&mut self, ctx: CtxId, flags: u32) -> ExecResult<StreamId>;
    /// `cuCtxGetStreamPriorityRange` of the context: (least, greatest),
    /// greatest ≤ least (lower numbers are higher priorities); (0, 0) for
    /// a device without stream priorities.
    fn stream_priority_range(&mut self, ctx: CtxId) -> ExecResult<(i32, i32)>;
    /// Creates a stream of `priority`, which the caller has clamped to
    /// [`GpuExecutor::stream_priority_range`].
    fn stream_create_with_priority(
        &mut self,
        ctx: CtxId,
        flags: u32,
        priority: i32,
    ) -> ExecResult<StreamId>;
    /// Destroys a stream (pending work still completes).
    fn stream_destroy(&mut self, ctx: CtxId, s: StreamId) -> ExecResult<()>;
    /// Waits for the stream's work.
    fn stream_synchronize(&mut self, ctx: CtxId, s: Option<StreamId>) -> ExecResult<()>;
    /// Whether the stream's work is done (`Err(NotReady)` if not).
    fn stream_query(&mut self, ctx: CtxId, s: Option<StreamId>) -> ExecResult<()>;
    /// Makes later work on `s` wait for `e`.
    fn stream_wait_event(&mut self, ctx: CtxId, s: Option<StreamId>, e: EventId) -> ExecResult<()>;

    /// Creates an event.
    fn event_create(&mut self, ctx: CtxId, flags: u32) -> ExecResult<EventId>;
    /// Destroys an event.
    fn event_destroy(&mut self, ctx: CtxId, e: EventId) -> ExecResult<()>;
    /// Records an event on a stream.
    fn event_record(&mut self, ctx: CtxId, e: EventId, s: Option<StreamId>) -> ExecResult<()>;
    /// Whether the event has completed (`Err(NotReady)` if not).
    fn event_query(&mut self, ctx: CtxId, e: EventId) -> ExecResult<()>;
    /// Waits for the event.
    fn event_synchronize(&mut self, ctx: CtxId, e: EventId) -> ExecResult<()>;
    /// Milliseconds between two completed events.
    fn event_elapsed_ms(&mut self, ctx: CtxId, start: EventId, end: EventId) -> ExecResult<f32>;
}
