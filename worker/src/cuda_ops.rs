//! The CUDA driver API on the host: validates each CUDA request of a
//! channel and executes it through a [`GpuExecutor`].
//!
//! One `CudaOps` serves one VM (one worker process). Each channel that makes
//! a CUDA call gets its own executor context, created at its first call and
//! destroyed when the channel is reset (owner released it, died, or a new
//! generation claimed it), which frees its memory, modules, streams and
//! events.
//!
//! Invariants:
//! - every handle the guest sends is looked up in the channel's own tables
//!   ([`HandleTable`]: index + generation, and a tag per context, so that
//!   a handle of one of the VM's contexts is refused in another); nothing
//!   of another channel or VM is reachable;
//! - every device pointer and length is checked to lie inside one of the
//!   channel's own allocations before the executor sees it;
//! - allocations count against the VM's device-memory quota, and memory
//!   queries report the quota-bounded view;
//! - sizes from the guest are bounded by the limits of `protocol::cuda`
//!   before anything is allocated.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Instant;

use fairgpu_protocol::array::{
    tex_object_from_bytes, ArrayDesc, Copy3D, CopySide, ARRAY_DESC_BYTES, COPY3D_BYTES, MEM_ARRAY,
    MEM_DEVICE, MEM_HOST, RESOURCE_ARRAY, RESOURCE_LINEAR, RESOURCE_PITCH2D, TEX_OBJECT_BYTES,
};
use fairgpu_protocol::cuda::{
    graph_steps, image_hash, limit, GraphStep, LaunchHeader, LaunchOptions, ParamInfo,
    GRAPH_STEP_HEADER, MAX_DEVICE_NAME, MAX_IMAGE_CACHE, MAX_MODULE_IMAGE, MAX_NAME, MAX_OBJECTS,
    MAX_RESERVATION, VMM_GRANULARITY,
};
use fairgpu_protocol::handle::{self, Handle, HandleTable};
use fairgpu_protocol::wire::ValidRequest;
use fairgpu_protocol::{Opcode, Status};
use serde::Serialize;

use crate::accounting::{Mark, Meter};
use crate::host::{Answer, ArenaSlice, Handler, Resume};
use crate::slicing::{Plan, SliceJob, Slicer, SlicingConfig};
use crate::transport_ops::TransportOps;
use fairgpu_executor::host_memory::{HostCharge, HostMemory};
use fairgpu_executor::{
    ArrayId, CtxId, DevPtr, EventId, ExecError, FnId, GpuExecutor, HostData, LaunchConfig, ModId,
    PhysId, Place, RectCopy, RectSide, StreamId, SyncPending, SyncTarget, TexResource,
};

/// `CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED`.
const GENERIC_COMPRESSION_SUPPORTED: i32 = 107;
/// `CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES`.
const MEMPOOL_SUPPORTED_HANDLE_TYPES: i32 = 119;

/// What a VM uses, for status and accounting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Device memory allocated by the VM's guests, bytes.
    pub mem_used: u64,
    /// The VM's device-memory quota, bytes.
    pub mem_quota: u64,
    /// Live contexts (guest processes that made CUDA calls).
    pub contexts: u32,
    /// Device time consumed by the VM's kernels, ns.
    pub gpu_time_ns: u64,
    /// Requests served.
    pub calls: u64,
    /// Kernel launches served (accepted by the executor).
    pub kernels: u64,
    /// Host memory held for the VM's guests, bytes.
    pub host_mem_used: u64,
    /// The VM's host-memory budget, bytes.
    pub host_mem_limit: u64,
}

#[derive(Debug)]
struct Function {
    id: FnId,
    module: Handle,
    params: Vec<ParamInfo>,
    /// Whether the kernel can print (the executor's answer).
    prints: bool,
}

/// One channel's CUDA state.
#[derive(Debug)]
struct Context {
    ctx: CtxId,
    /// Allocation base → size.
    allocs: BTreeMap<DevPtr, u64>,
    /// Module variables the guest asked for: address → (size, module).
    /// Copies and memsets may use them as they use allocations.
    globals: BTreeMap<DevPtr, (u64, Handle)>,
    modules: HandleTable<ModId>,
    functions: HandleTable<Function>,
    /// (module handle, executor function) -> its handle: asking for the
    /// same kernel again returns the same handle, as the driver does, so a
    /// guest cannot mint a handle (and a copy of the layout) per request.
    function_of: HashMap<(u64, u64), Handle>,
    streams: HandleTable<StreamId>,
    events: HandleTable<EventId>,
    /// CUDA arrays and their descriptions (sizes count against the quota).
    arrays: HandleTable<(ArrayId, ArrayDesc)>,
    array_bytes: u64,
    /// The device heap's size (`cuCtxSetLimit`), what of the VM's quota
    /// it holds, and whether a kernel that uses it has run (its size is
    /// fixed from then on).
    heap_limit: u64,
    heap_charge: u64,
    heap_fixed: bool,
    /// What of the VM's quota the printf FIFO size the guest set holds
    /// (the driver's default 1 MiB is not charged).
    fifo_charge: u64,
    /// What of the VM's quota the call stacks the guest asked for hold
    /// ([`GpuExecutor::stack_reserve`]; the driver's default is not
    /// charged).
    stack_charge: u64,
    /// Texture and surface objects, by the value the executor gave them
    /// (what kernels receive): only these may be destroyed.
    tex_objects: HashSet<u64>,
    surf_objects: HashSet<u64>,
    /// Module images being staged, by channel (each member of a shared
    /// context stages its own), and the size announced for each.
    staging: HashMap<u32, (Vec<u8>, u64)>,
    /// Accounting events ready for reuse, and how many exist.
    acct_free: Vec<EventId>,
    acct_events: usize,
    /// Bytes of parameter layouts `functions` hold.
    param_bytes: u64,
    /// The virtual-memory API: reserved ranges (base -> bytes), memory
    /// made by `MemCreate` (charged against the quota until freed), and
    /// mappings (address -> mapping). Copies and memsets may use a mapping
    /// once the device has access to it.
    reservations: BTreeMap<DevPtr, u64>,
    vmem: HandleTable<VMem>,
    vmem_bytes: u64,
    mappings: BTreeMap<DevPtr, Mapping>,
    /// CUDA IPC: this context's allocations other channels may open (base
    /// -> token), allocations the guest freed while opened elsewhere
    /// (base -> bytes: still this context's memory, still charged, freed
    /// at the last close), and exports of other channels this one opened
    /// (base -> the open).
    exported: HashMap<DevPtr, u64>,
    zombies: BTreeMap<DevPtr, u64>,
    imports: BTreeMap<DevPtr, Import>,
    /// The same for events: this context's exported events (-> token),
    /// those destroyed here while opened elsewhere, and other channels'
    /// events opened here (-> token, and how many handles name it).
    ev_exported: HashMap<EventId, u64>,
    ev_zombies: HashSet<EventId>,
    ev_imports: HashMap<EventId, (u64, u32)>,
    /// Graph launches whose steps have not all run, by channel (each
    /// member of a shared context has its own), and the bytes charged for
    /// them (their requests' data, kept until their last step has run).
    /// The charge is kept apart from the jobs, one of which is taken out
    /// while one of its steps runs, so that the context's charge holds
    /// meanwhile.
    graphs: HashMap<u32, GraphJob>,
    graph_bytes: u64,
    /// What this context is charged against the VM's host memory: at
    /// least [`Context::host_bytes`], and before a request at least that
    /// plus what the request may add ([`growth_bound`]).
    held: HostCharge,
}

/// A `GraphLaunch` queued on a channel: its request's data (a private
/// copy) and the steps still to run, each a request of its own kind
/// (`fairgpu_protocol::cuda::graph_steps`).
#[derive(Debug)]
struct GraphJob {
    data: Vec<u8>,
    /// What of the context's `graph_bytes` this job holds.
    charge: u64,
    steps: VecDeque<GraphStep>,
    call_id: u64,
    vcpu: u32,
}

impl GraphJob {
    /// The request step `s` stands for: answered already (the graph
    /// launch was), its data in the job's copy.
    fn request(&self, s: &GraphStep) -> ValidRequest {
        ValidRequest {
            op: s.op,
            needs_response: false,
            call_id: self.call_id,
            vcpu: self.vcpu,
            arena: 0..s.data.len() as u32,
            args: s.args,
        }
    }
}

/// Host memory charged for a queued graph launch of `data` bytes: the
/// copy, and each step's entry (at most one per [`GRAPH_STEP_HEADER`]
/// bytes).
fn graph_charge(data: usize) -> u64 {
    let entries = data / GRAPH_STEP_HEADER;
    (data + entries * std::mem::size_of::<GraphStep>()) as u64
}

/// Memory made by `MemCreate`.
#[derive(Debug)]
struct VMem {
    id: PhysId,
    bytes: u64,
    /// Mappings of it that exist.
    mapped: u32,
    /// `MemRelease` came while it was mapped: it goes with its last
    /// mapping.
    released: bool,
    /// The token of [`CudaOps::vmem_shared`] naming it, once exported or
    /// when imported: then the memory is the VM's, not this context's,
    /// and goes with the last handle of any context.
    shared: Option<u64>,
}

/// Memory of the virtual-memory API that a channel exported
/// (`MemExport`): each context that imported it has a handle of its own
/// naming it.
#[derive(Debug)]
struct SharedVMem {
    id: PhysId,
    bytes: u64,
    /// The context whose executor table holds the memory now (slot,
    /// context): it moves to a context that maps it.
    home: (u32, CtxId),
    /// The contexts with a handle of it, once per handle.
    holders: Vec<(u32, CtxId)>,
}

/// An allocation a channel exported for CUDA IPC.
#[derive(Debug, Clone, Copy)]
struct Export {
    /// The slot of the exporting context ([`CudaOps::slot`]).
    ch: u32,
    ctx: CtxId,
    base: DevPtr,
    bytes: u64,
    /// Opens by other channels not yet closed.
    opened: u32,
}

/// An event a channel exported for CUDA IPC.
#[derive(Debug, Clone, Copy)]
struct EventExport {
    /// The slot of the exporting context ([`CudaOps::slot`]).
    ch: u32,
    ctx: CtxId,
    event: EventId,
    /// Handles of other channels that name it.
    opened: u32,
}

/// A channel's open of another channel's export.
#[derive(Debug, Clone, Copy)]
struct Import {
    token: u64,
    bytes: u64,
    /// Times this channel opened it, less closes.
    opens: u32,
}

/// One `MemMap`.
#[derive(Debug, Clone, Copy)]
struct Mapping {
    bytes: u64,
    mem: Handle,
    /// The device may access it (`MemSetAccess` read or read-write).
    accessible: bool,
}

/// Host memory charged for any context, besides its tables: the context
/// itself, its accounting events (at most [`MAX_ACCT_EVENTS`]) and the
/// executor's bookkeeping for it.
const CONTEXT_BYTES: u64 = 64 << 10;
/// Host memory charged for each allocation and each function lookup entry
/// (a map node, with room for the allocator's overhead).
const ENTRY_BYTES: u64 = 64;
/// How far a context's charge may stay above what it holds before it is
/// given back, so that most requests take no atomic operation.
const SETTLE_SLACK: u64 = 64 << 10;

/// At most how many bytes request `req` can add to its context's
/// [`Context::host_bytes`]: one entry in each table, plus a staging
/// buffer's announced size when the request starts one (later chunks fill
/// that capacity and add nothing), plus for a function lookup its
/// parameter layout (written back into the arena, so no larger than it).
fn growth_bound(req: &ValidRequest, arena: &ArenaSlice<'_>) -> u64 {
    // A push grows a table by two slots' worth (`HandleTable::host_bytes`);
    // no slot is larger than 128 bytes.
    let tables = 4 * 2 * 128 + 2 * ENTRY_BYTES;
    match req.op {
        Opcode::ModuleStage if req.args[0] == 0 => tables + req.args[1].min(MAX_MODULE_IMAGE),
        Opcode::ModuleGetFunction => tables + arena.len() as u64,
        Opcode::GraphLaunch => tables + graph_charge(arena.len()),
        _ => tables,
    }
}

impl Context {
    /// A context whose handles carry `tag` ([`HandleTable::tagged`]).
    fn new(ctx: CtxId, held: HostCharge, tag: u16) -> Self {
        Context {
            ctx,
            allocs: BTreeMap::new(),
            globals: BTreeMap::new(),
            modules: HandleTable::tagged(MAX_OBJECTS, tag),
            functions: HandleTable::tagged(MAX_OBJECTS, tag),
            function_of: HashMap::new(),
            streams: HandleTable::tagged(MAX_OBJECTS, tag),
            events: HandleTable::tagged(MAX_OBJECTS, tag),
            arrays: HandleTable::tagged(MAX_OBJECTS, tag),
            array_bytes: 0,
            heap_limit: limit::DEFAULT_HEAP,
            heap_charge: 0,
            heap_fixed: false,
            fifo_charge: 0,
            stack_charge: 0,
            tex_objects: HashSet::new(),
            surf_objects: HashSet::new(),
            staging: HashMap::new(),
            acct_free: Vec::new(),
            acct_events: 0,
            param_bytes: 0,
            reservations: BTreeMap::new(),
            exported: HashMap::new(),
            zombies: BTreeMap::new(),
            imports: BTreeMap::new(),
            ev_exported: HashMap::new(),
            ev_zombies: HashSet::new(),
            ev_imports: HashMap::new(),
            vmem: HandleTable::tagged(MAX_OBJECTS, tag),
            vmem_bytes: 0,
            mappings: BTreeMap::new(),
            graphs: HashMap::new(),
            graph_bytes: 0,
            held,
        }
    }

    /// Host memory this context holds for its guest, as charged: a fixed
    /// part, the staging buffer's announced size (its capacity), each
    /// handle table's slots, each allocation and lookup entry, and the
    /// functions' parameter layouts.
    fn host_bytes(&self) -> u64 {
        CONTEXT_BYTES
            + self.staging.values().map(|s| s.1).sum::<u64>()
            + self.modules.host_bytes()
            + self.functions.host_bytes()
            + self.streams.host_bytes()
            + self.events.host_bytes()
            + self.arrays.host_bytes()
            + self.vmem.host_bytes()
            + ENTRY_BYTES
                * (self.allocs.len()
                    + self.function_of.len()
                    + self.globals.len()
                    + self.tex_objects.len()
                    + self.surf_objects.len()
                    + self.reservations.len()
                    + self.mappings.len()
                    + self.exported.len()
                    + self.zombies.len()
                    + self.imports.len()
                    + self.ev_exported.len()
                    + self.ev_zombies.len()
                    + self.ev_imports.len()) as u64
            + self.param_bytes
            + self.graph_bytes
    }

    /// Grows the charge to cover what a request bounded by `bound` may
    /// add; refused (out of memory) before the request does anything.
    fn reserve(&mut self, bound: u64) -> Result<(), Status> {
        let need = self.host_bytes() + bound;
        if self.held.bytes() < need {
            self.held
                .resize(need, "a channel's CUDA tables and staging buffer")
                .map_err(|_| Status::OUT_OF_MEMORY)?;
        }
        Ok(())
    }

    /// Brings the charge back near what the context holds after a request.
    fn settle(&mut self) {
        let have = self.host_bytes();
        let held = self.held.bytes();
        if held > have + 2 * SETTLE_SLACK || held < have {
            // Shrinking always succeeds; growing here is only a safety net
            // (`reserve` charged the request's bound before it ran).
            let _ = self.held.resize(
                have + SETTLE_SLACK,
                "a channel's CUDA tables and staging buffer",
            );
        }
    }

    /// Checks that `ptr..ptr + len` lies inside one allocation, or one
    /// module variable the guest was given.
    fn check_range(&self, ptr: DevPtr, len: u64) -> Result<(), Status> {
        let end = ptr.checked_add(len).ok_or(Status::INVALID_VALUE)?;
        match self.allocs.range(..=ptr).next_back() {
            Some((&base, &size)) if end <= base + size => return Ok(()),
            _ => {}
        }
        match self.mappings.range(..=ptr).next_back() {
            Some((&base, m)) if m.accessible && end <= base + m.bytes => return Ok(()),
            _ => {}
        }
        // Opened through IPC: lent to this context for each request.
        match self.imports.range(..=ptr).next_back() {
            Some((&base, i)) if end <= base + i.bytes => return Ok(()),
            _ => {}
        }
        match self.globals.range(..=ptr).next_back() {
            Some((&base, &(size, _))) if end <= base + size => Ok(()),
            _ => Err(Status::INVALID_VALUE),
        }
    }

    /// The mappings `addr..addr + bytes` covers, each whole: at least one,
    /// and none cut by either end.
    fn whole_mappings(&self, addr: DevPtr, bytes: u64) -> Result<Vec<(DevPtr, Mapping)>, Status> {
        let end = addr.checked_add(bytes).ok_or(Status::INVALID_VALUE)?;
        if let Some((&a, m)) = self.mappings.range(..addr).next_back() {
            if a + m.bytes > addr {
                return Err(Status::INVALID_VALUE);
            }
        }
        let inside: Vec<(DevPtr, Mapping)> = self
            .mappings
            .range(addr..end)
            .map(|(&a, &m)| (a, m))
            .collect();
        if inside.is_empty() || inside.iter().any(|(a, m)| a + m.bytes > end) {
            return Err(Status::INVALID_VALUE);
        }
        Ok(inside)
    }

    /// The function guest handle `h` names, while its module is loaded.
    fn function(&self, h: u64) -> Result<&Function, Status> {
        let f = self
            .functions
            .get(Handle(h))
            .map_err(|_| Status::INVALID_HANDLE)?;
        self.modules
            .get(f.module)
            .map_err(|_| Status::INVALID_HANDLE)?;
        Ok(f)
    }

    fn stream(&self, h: u64) -> Result<Option<StreamId>, Status> {
        if h == 0 {
            return Ok(None);
        }
        self.streams
            .get(Handle(h))
            .map(|s| Some(*s))
            .map_err(|_| Status::INVALID_HANDLE)
    }

    fn array(&self, h: u64) -> Result<&(ArrayId, ArrayDesc), Status> {
        self.arrays
            .get(Handle(h))
            .map_err(|_| Status::INVALID_HANDLE)
    }

    /// One side of a rectangular copy, checked: device ranges inside one
    /// allocation, boxes inside their array.
    fn copy_side(&self, s: &CopySide, extent: [u64; 3]) -> Result<Place, Status> {
        match s.kind {
            MEM_HOST => Ok(Place::Host),
            MEM_DEVICE => {
                let (first, end) = s.device_span(extent).ok_or(Status::INVALID_VALUE)?;
                self.check_range(first, end - first)?;
                Ok(Place::Device {
                    ptr: s.base,
                    pitch: s.pitch,
                    height: s.height,
                })
            }
            MEM_ARRAY => {
                let (id, desc) = self.array(s.base)?;
                if !s.fits_array(desc, extent) {
                    return Err(Status::INVALID_VALUE);
                }
                Ok(Place::Array(*id))
            }
            _ => Err(Status::INVALID_VALUE),
        }
    }

    fn event(&self, h: u64) -> Result<EventId, Status> {
        self.events
            .get(Handle(h))
            .copied()
            .map_err(|_| Status::INVALID_HANDLE)
    }
}

/// Host memory a parameter layout holds.
fn param_bytes(params: &[ParamInfo]) -> u64 {
    std::mem::size_of_val(params) as u64
}

/// Module images this VM loaded, by hash, so that a process loading the
/// same fatbin (every process of a CUDA application does) sends it once.
/// Bounded by [`MAX_IMAGE_CACHE`] bytes, oldest evicted first.
#[derive(Debug, Default)]
struct ImageCache {
    images: VecDeque<([u64; 2], std::sync::Arc<[u8]>, HostCharge)>,
    bytes: u64,
}

impl ImageCache {
    fn get(&self, hash: [u64; 2], size: u64) -> Option<std::sync::Arc<[u8]>> {
        self.images
            .iter()
            .find(|(h, i, _)| *h == hash && i.len() as u64 == size)
            .map(|(_, i, _)| i.clone())
    }

    /// Keeps `image`, charged to the VM's host memory; an image the
    /// budget cannot hold is not cached (only later loads pay for it).
    fn insert(&mut self, image: std::sync::Arc<[u8]>, budget: &std::sync::Arc<HostMemory>) {
        let hash = image_hash(&image);
        if image.len() as u64 > MAX_IMAGE_CACHE || self.get(hash, image.len() as u64).is_some() {
            return;
        }
        // Evicted first, so that the budget sees the room they leave.
        while self.bytes + image.len() as u64 > MAX_IMAGE_CACHE {
            let Some((_, old, _)) = self.images.pop_front() else {
                break;
            };
            self.bytes -= old.len() as u64;
        }
        let Ok(charge) = budget.charge(image.len() as u64, "a cached module image") else {
            return;
        };
        self.bytes += image.len() as u64;
        self.images.push_back((hash, image, charge));
    }
}

/// The CUDA request handler of one VM.
pub struct CudaOps {
    exec: Box<dyn GpuExecutor>,
    vm: String,
    quota: u64,
    mem_used: u64,
    contexts: Vec<Option<Context>>,
    transport: TransportOps,
    buf: Vec<u8>,
    calls: u64,
    kernels: u64,
    images: ImageCache,
    /// The VM's host-memory budget (cached images here; the executor
    /// charges its own holdings to the same budget).
    host_memory: std::sync::Arc<HostMemory>,
    /// The first sticky error seen while the executor's sticky errors
    /// poison the whole process (a real GPU): the worker must be replaced.
    poisoned: Option<Status>,
    /// Which launches are sliced ([`crate::slicing`]).
    slicer: Slicer,
    /// Each channel's sliced launch still in progress.
    jobs: Vec<Option<SliceJob>>,
    /// Kernel slicing and runaway guard counts.
    long: LongKernelCounts,
    /// Kernels already reported as not sliceable (bounded).
    reported: HashSet<(CtxId, FnId)>,
    /// The VM's OpenCL calls; their buffers count in `mem_used` too.
    cl: crate::cl_ops::ClOps,
    /// CUDA IPC exports of the VM's channels, by token, and what makes
    /// tokens (a key of this process's random hasher over a counter).
    ipc: HashMap<u64, Export>,
    ipc_events: HashMap<u64, EventExport>,
    /// Exported memory of the virtual-memory API, by token.
    vmem_shared: HashMap<u64, SharedVMem>,
    ipc_keys: std::collections::hash_map::RandomState,
    ipc_next: u64,
    /// Channels that share another channel's context (`ContextJoin`):
    /// channel -> the slot of `contexts` its context lives in, for every
    /// member of a shared context (the slot's own channel included). A
    /// channel without an entry has its context in its own slot.
    leader: Vec<Option<u32>>,
    /// Tokens `ContextShare` gave out -> the slot of the context they name.
    shares: HashMap<u64, u32>,
    /// The synchronization each channel has put aside, marked
    /// ([`Handler::sync_wait`]).
    marks: HashMap<u32, Marked>,
    /// The tag of the context made last ([`Context::new`]).
    next_tag: u16,
}

/// A synchronization put aside: the request (opcode and handle) and the
/// executor's snapshot of the work it waits for.
#[derive(Debug)]
struct Marked {
    op: Opcode,
    arg: u64,
    ctx: CtxId,
    mark: fairgpu_executor::SyncMark,
}

/// What kernel slicing and the runaway guard did (`status`, `top`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LongKernelCounts {
    /// Launches run as parts.
    pub sliced: u64,
    /// Parts launched.
    pub parts: u64,
    /// Launches predicted long that ran whole: not sliceable.
    pub unsliceable: u64,
}

/// A synchronization of a shared context's member that would wait
/// longer than this is put aside while the other members are served
/// ([`Handler::sync_wait`]), and served this much before its work is
/// due to end (then waited for in the executor, which ends the wait
/// within microseconds of the work's end).
const PUT_ASIDE_FROM: std::time::Duration = std::time::Duration::from_micros(500);
const WAKE_AHEAD: std::time::Duration = std::time::Duration::from_micros(250);
/// How often a synchronization put aside whose end the executor cannot
/// foresee (a real GPU) is asked about again.
const POLL_RUNNING: std::time::Duration = std::time::Duration::from_micros(100);

/// Most `ContextShare` tokens alive at once: one per channel at most
/// (a channel asks again and gets the same one), so this only bounds a
/// broken caller.
const MAX_SHARES: usize = 4096;

/// Kernels reported as not sliceable at most (each once).
const MAX_REPORTED: usize = 256;

impl std::fmt::Debug for CudaOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaOps")
            .field("vm", &self.vm)
            .field("quota", &self.quota)
            .field("mem_used", &self.mem_used)
            .finish_non_exhaustive()
    }
}

/// A kernel or variable name of `len` bytes at the start of the arena:
/// UTF-8, no NUL, at most [`MAX_NAME`] bytes.
fn read_name(len: u64, arena: &ArenaSlice<'_>) -> Result<String, Status> {
    let len = usize::try_from(len).map_err(|_| Status::INVALID_VALUE)?;
    if len == 0 || len > MAX_NAME || len > arena.len() {
        return Err(Status::INVALID_VALUE);
    }
    let mut name = vec![0u8; len];
    arena.read(0, &mut name)?;
    let name = String::from_utf8(name).map_err(|_| Status::INVALID_VALUE)?;
    if name.contains('\0') {
        return Err(Status::INVALID_VALUE);
    }
    Ok(name)
}

/// Where channel `ch`'s context lives in `contexts`, given `leader`
/// ([`CudaOps`]'s field): its own slot, or for a member of a shared
/// context the slot of that context.
fn slot_of(leader: &[Option<u32>], ch: u32) -> usize {
    leader
        .get(ch as usize)
        .copied()
        .flatten()
        .map_or(ch as usize, |l| l as usize)
}

fn exec_err(e: ExecError) -> Status {
    e.status()
}

fn vals(v: &[u64]) -> Answer {
    let mut a = Answer::default();
    a.vals[..v.len()].copy_from_slice(v);
    a
}

impl CudaOps {
    /// A handler for VM `vm` whose guests may allocate `memory_quota` bytes.
    pub fn new(exec: Box<dyn GpuExecutor>, vm: String, memory_quota: u64) -> CudaOps {
        CudaOps {
            exec,
            quota: memory_quota,
            mem_used: 0,
            contexts: Vec::new(),
            transport: TransportOps::default(),
            buf: Vec::new(),
            calls: 0,
            kernels: 0,
            images: ImageCache::default(),
            poisoned: None,
            host_memory: HostMemory::unlimited(),
            slicer: Slicer {
                cfg: SlicingConfig::OFF,
            },
            jobs: Vec::new(),
            long: LongKernelCounts::default(),
            reported: HashSet::new(),
            cl: crate::cl_ops::ClOps::new(vm.clone(), HostMemory::unlimited()),
            vm,
            ipc: HashMap::new(),
            ipc_events: HashMap::new(),
            vmem_shared: HashMap::new(),
            ipc_keys: std::collections::hash_map::RandomState::new(),
            ipc_next: 0,
            leader: Vec::new(),
            shares: HashMap::new(),
            marks: HashMap::new(),
            next_tag: 0,
        }
    }

    /// The mark of the synchronization `req` of channel `ch` in `ctx`, if
    /// it was put aside; a stale mark (another request) is forgotten.
    fn take_mark(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        ctx: CtxId,
    ) -> Option<fairgpu_executor::SyncMark> {
        let m = self.marks.remove(&ch)?;
        if m.op == req.op && m.arg == req.args[0] && m.ctx == ctx {
            return Some(m.mark);
        }
        self.exec.sync_forget(m.ctx, m.mark);
        None
    }

    /// Forgets channel `ch`'s mark, if any.
    fn forget_mark(&mut self, ch: u32) {
        if let Some(m) = self.marks.remove(&ch) {
            self.exec.sync_forget(m.ctx, m.mark);
        }
    }

    /// Slices long launches as `cfg` says ([`crate::slicing`]).
    pub fn with_slicing(mut self, cfg: SlicingConfig) -> CudaOps {
        self.slicer = Slicer { cfg };
        self
    }

    /// A kernel the executor reports as run away, with the channel whose
    /// context launched it (see [`GpuExecutor::runaway`]).
    pub fn runaway(&mut self) -> Option<(fairgpu_executor::Runaway, Option<u32>)> {
        let r = self.exec.runaway()?;
        let ch = self
            .contexts
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.ctx == r.ctx))
            .map(|i| i as u32);
        Some((r, ch))
    }

    /// Requests the executor's runaway guard ended so far.
    pub fn executor_runaways(&self) -> u64 {
        self.exec.runaways()
    }

    /// What kernel slicing did so far.
    pub fn long_kernels(&self) -> LongKernelCounts {
        self.long
    }

    /// Whether and how to slice a launch of `f` with geometry `cfg`.
    fn slice_plan(&mut self, ctx: CtxId, f: FnId, cfg: &LaunchConfig) -> Plan {
        if !self.slicer.cfg.enabled {
            return Plan::Whole;
        }
        let predicted = self.exec.predict_ns(ctx, f, cfg.blocks());
        let plan = self.slicer.plan(cfg.grid, predicted);
        if plan == Plan::Whole {
            return plan;
        }
        let why = if cfg.options.cooperative {
            Err("a cooperative launch (grid-wide barriers need every block resident)")
        } else if cfg.options.cluster != [1, 1, 1] {
            Err("a launch with thread-block clusters")
        } else {
            self.exec.sliceable(ctx, f)
        };
        match why {
            Ok(()) => plan,
            Err(why) => {
                self.long.unsliceable += 1;
                if self.reported.len() < MAX_REPORTED && self.reported.insert((ctx, f)) {
                    tracing::info!(
                        vm = %self.vm,
                        predicted_ms = predicted.map(|ns| ns as f64 / 1e6),
                        blocks = cfg.blocks(),
                        "a long kernel runs whole: {why}"
                    );
                }
                Plan::Whole
            }
        }
    }

    /// Launches `cfg` whole or as the first of its parts, leaving the
    /// rest on channel `ch`.
    #[allow(clippy::too_many_arguments)]
    fn launch_sliced(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        ctx: CtxId,
        f: FnId,
        cfg: LaunchConfig,
        stream: Option<StreamId>,
    ) -> Result<Answer, Status> {
        let Plan::Sliced(mut parts) = self.slice_plan(ctx, f, &cfg) else {
            return self
                .exec
                .launch(ctx, f, &cfg, &self.buf, stream)
                .map_err(exec_err)
                .map(|_| Answer::default());
        };
        let first = parts.next();
        let part_cfg = LaunchConfig { part: first, ..cfg };
        self.exec
            .launch(ctx, f, &part_cfg, &self.buf, stream)
            .map_err(exec_err)?;
        self.long.sliced += 1;
        self.long.parts += 1;
        let i = ch as usize;
        if self.jobs.len() <= i {
            self.jobs.resize_with(i + 1, || None);
        }
        self.jobs[i] = Some(SliceJob {
            req: req.clone(),
            ctx,
            f,
            cfg,
            params: self.buf.clone(),
            stream,
            parts,
        });
        Ok(Answer::default())
    }

    /// Charges what this handler keeps for the guests to `budget`, the
    /// VM's (give the executor the same one).
    pub fn with_host_memory(mut self, budget: std::sync::Arc<HostMemory>) -> CudaOps {
        self.transport = TransportOps::new(budget.clone());
        self.cl = crate::cl_ops::ClOps::new(self.vm.clone(), budget.clone());
        self.host_memory = budget;
        self
    }

    /// What the VM uses now.
    pub fn usage(&mut self) -> Usage {
        Usage {
            mem_used: self.mem_used,
            mem_quota: self.quota,
            contexts: self.contexts.iter().filter(|c| c.is_some()).count() as u32,
            gpu_time_ns: self.exec.gpu_time_ns() + self.cl.device_time_ns(),
            calls: self.calls,
            kernels: self.kernels,
            host_mem_used: self.host_memory.used(),
            host_mem_limit: self.host_memory.limit(),
        }
    }

    /// Notes `status` if it is a sticky error that poisons the executor's
    /// process (see [`GpuExecutor::sticky_errors_poison_process`]).
    fn note_error(&mut self, ch: u32, status: Status) {
        if self.poisoned.is_none() && status.is_sticky() && self.exec.sticky_errors_poison_process()
        {
            tracing::warn!(
                vm = %self.vm,
                channel = ch,
                %status,
                "sticky GPU error: this worker's CUDA state is lost; it is replaced once its guests have let go"
            );
            self.poisoned = Some(status);
        }
    }

    /// The sticky error that poisoned this worker's GPU state, once no
    /// context is left: every guest that saw the error has released its
    /// channel, so the worker can be replaced by a fresh process without
    /// taking anything from a guest that could still use it. Until then
    /// every call of every context fails with that error, as in a native
    /// process after a device fault.
    pub fn recycle_due(&self) -> Option<Status> {
        self.poisoned
            .filter(|_| self.contexts.iter().all(Option::is_none))
    }

    /// The executor, for callers that need device properties.
    pub fn executor(&mut self) -> &mut dyn GpuExecutor {
        self.exec.as_mut()
    }

    /// Where channel `ch`'s context lives in `contexts` ([`slot_of`]).
    fn slot(&self, ch: u32) -> usize {
        slot_of(&self.leader, ch)
    }

    /// The channels that name the context in slot `slot`.
    fn members(&self, slot: usize) -> Vec<u32> {
        let mut m: Vec<u32> = (0..self.leader.len() as u32)
            .filter(|&c| self.leader[c as usize] == Some(slot as u32))
            .collect();
        if m.is_empty() {
            m.push(slot as u32);
        }
        m
    }

    fn context(&mut self, ch: u32) -> Result<&mut Context, Status> {
        let i = self.slot(ch);
        if self.contexts.len() <= i {
            self.contexts.resize_with(i + 1, || None);
        }
        if self.contexts[i].is_none() {
            let held = self
                .host_memory
                .charge(CONTEXT_BYTES + SETTLE_SLACK, "a channel's CUDA context")
                .map_err(|_| Status::OUT_OF_MEMORY)?;
            let ctx = match self.exec.create_context() {
                Ok(ctx) => ctx,
                Err(e) => {
                    tracing::warn!(vm = %self.vm, channel = ch, error = %e, "cannot create a context");
                    self.note_error(ch, e.status());
                    return Err(e.status());
                }
            };
            // Each context of the VM gets the next tag no live context
            // holds, so that no two live contexts (and no context made soon
            // after another) accept each other's handles. A VM has at most
            // MAX_CHANNELS contexts, far fewer than the tags: one is free.
            const _: () = assert!(fairgpu_protocol::limits::MAX_CHANNELS < handle::MAX_TAG as u32);
            let live: HashSet<u16> = self
                .contexts
                .iter()
                .flatten()
                .map(|c| c.streams.tag())
                .collect();
            loop {
                self.next_tag = self.next_tag % handle::MAX_TAG + 1;
                if !live.contains(&self.next_tag) {
                    break;
                }
            }
            self.contexts[i] = Some(Context::new(ctx, held, self.next_tag));
        }
        Ok(self.contexts[i].as_mut().expect("created above"))
    }

    /// `ContextJoin`: channel `ch`, which has made no context yet, names
    /// from now on the context that `token` (from `ContextShare`) names.
    fn join(&mut self, ch: u32, token: u64) -> Result<(), Status> {
        let slot = *self.shares.get(&token).ok_or(Status::INVALID_VALUE)?;
        let i = ch as usize;
        let own = self.contexts.get(i).is_some_and(Option::is_some);
        let member = self.leader.get(i).copied().flatten().is_some();
        if own || member || slot == ch {
            // A channel joins before it makes or names a context, and not
            // its own.
            return Err(Status::INVALID_CONTEXT);
        }
        let n = (i.max(slot as usize)) + 1;
        if self.leader.len() < n {
            self.leader.resize(n, None);
        }
        self.leader[slot as usize] = Some(slot);
        self.leader[i] = Some(slot);
        static LIMIT: crate::host::RateLimit = crate::host::RateLimit::new();
        if let Some(suppressed) = LIMIT.admit() {
            tracing::info!(
                vm = %self.vm,
                channel = ch,
                slot,
                suppressed,
                "a thread's channel joined its process's context"
            );
        }
        Ok(())
    }

    /// Channel `ch` goes and others still name its context: what was the
    /// channel's own (a graph launch, a module being staged) goes with it,
    /// the context stays; when it lived in `ch`'s slot (which a new claim
    /// of the channel will use) it moves to a remaining member's.
    fn leave(&mut self, ch: u32, slot: usize, members: &[u32]) {
        if let Some(cx) = self.contexts.get_mut(slot).and_then(Option::as_mut) {
            if let Some(job) = cx.graphs.remove(&ch) {
                cx.graph_bytes -= job.charge;
            }
            cx.staging.remove(&ch);
            cx.settle();
        }
        self.leader[ch as usize] = None;
        let rest: Vec<u32> = members.iter().copied().filter(|&m| m != ch).collect();
        let mut at = slot as u32;
        if slot == ch as usize {
            at = rest[0];
            if self.contexts.len() <= at as usize {
                self.contexts.resize_with(at as usize + 1, || None);
            }
            self.contexts[at as usize] = self.contexts[slot].take();
            for l in self.leader.iter_mut().flatten() {
                if *l == slot as u32 {
                    *l = at;
                }
            }
            for e in self.ipc.values_mut().filter(|e| e.ch == slot as u32) {
                e.ch = at;
            }
            for x in self.ipc_events.values_mut().filter(|x| x.ch == slot as u32) {
                x.ch = at;
            }
            for s in self.shares.values_mut().filter(|s| **s == slot as u32) {
                *s = at;
            }
            // Shared virtual memory names its holders and home by slot.
            for s in self.vmem_shared.values_mut() {
                for h in s.holders.iter_mut().chain(std::iter::once(&mut s.home)) {
                    if h.0 == slot as u32 {
                        h.0 = at;
                    }
                }
            }
        }
        if let [last] = rest[..] {
            // Alone again: the context lives in its own slot (`at == last`).
            self.leader[last as usize] = None;
        }
        tracing::debug!(vm = %self.vm, channel = ch, slot = at, "channel left a shared context");
    }

    /// The slot of the shared context channel `ch` names, if it names one
    /// with other channels.
    pub fn group(&self, ch: u32) -> Option<u32> {
        self.leader.get(ch as usize).copied().flatten()
    }

    /// Runs `f` with the allocations channel `ch` opened through IPC lent
    /// to its context (moved there from their exporters' contexts, and
    /// back afterwards), so that its kernels, copies and memsets reach
    /// them as its own. Only executors that move memory have imports.
    fn with_imports<T>(&mut self, ch: u32, f: impl FnOnce(&mut Self) -> T) -> T {
        let mut lent = Vec::new();
        if let Some(Some(cx)) = self.contexts.get(slot_of(&self.leader, ch)) {
            for (&base, i) in &cx.imports {
                let Some(e) = self.ipc.get(&i.token) else {
                    continue;
                };
                let owner = self.contexts.get(e.ch as usize).and_then(Option::as_ref);
                if owner.is_some_and(|o| {
                    o.ctx == e.ctx
                        && (o.allocs.contains_key(&base) || o.zombies.contains_key(&base))
                }) {
                    lent.push((base, e.ctx, cx.ctx));
                }
            }
        }
        let mut events = Vec::new();
        if let Some(Some(cx)) = self.contexts.get(slot_of(&self.leader, ch)) {
            for (&e, &(token, _)) in &cx.ev_imports {
                let Some(x) = self.ipc_events.get(&token) else {
                    continue;
                };
                let owner = self.contexts.get(x.ch as usize).and_then(Option::as_ref);
                if owner.is_some_and(|o| o.ctx == x.ctx) {
                    events.push((e, x.ctx, cx.ctx));
                }
            }
        }
        lent.retain(|&(base, from, to)| self.exec.mem_move(from, to, base).is_ok());
        events.retain(|&(e, from, to)| self.exec.event_move(from, to, e).is_ok());
        let r = f(self);
        for (base, from, to) in lent {
            if let Err(e) = self.exec.mem_move(to, from, base) {
                tracing::error!(vm = %self.vm, channel = ch, error = %e, "an IPC allocation lent to a channel did not go back");
            }
        }
        for (ev, from, to) in events {
            if let Err(e) = self.exec.event_move(to, from, ev) {
                tracing::error!(vm = %self.vm, channel = ch, error = %e, "an IPC event lent to a channel did not go back");
            }
        }
        r
    }

    /// A fresh IPC token: not 0, not guessable from earlier ones.
    fn ipc_token(&mut self) -> u64 {
        use std::hash::BuildHasher;
        loop {
            self.ipc_next += 1;
            let t = self.ipc_keys.hash_one(self.ipc_next);
            if t != 0
                && !self.ipc.contains_key(&t)
                && !self.ipc_events.contains_key(&t)
                && !self.vmem_shared.contains_key(&t)
                && !self.shares.contains_key(&t)
            {
                return t;
            }
        }
    }

    /// Channel `ch`'s context goes: its opens are closed (freeing memory
    /// whose exporter let go of it), and its exports end, so other
    /// channels' opens of them go too (their addresses fault from then
    /// on, as freed memory does).
    fn ipc_forget(&mut self, ch: u32) {
        let Some(Some(cx)) = self.contexts.get_mut(slot_of(&self.leader, ch)) else {
            return;
        };
        let imports: Vec<(DevPtr, Import)> = std::mem::take(&mut cx.imports).into_iter().collect();
        for (base, i) in imports {
            self.ipc_close_one(base, i.token, i.opens);
        }
        let ctx = self.contexts[slot_of(&self.leader, ch)]
            .as_ref()
            .map(|c| c.ctx);
        let gone: Vec<u64> = self
            .ipc
            .iter()
            .filter(|(_, e)| e.ch == ch && Some(e.ctx) == ctx)
            .map(|(t, _)| *t)
            .collect();
        for t in &gone {
            self.ipc.remove(t);
        }
        // Events: this channel's opens close; its exports end (other
        // channels' handles of them stay, naming nothing that works).
        let ev_imports: Vec<(EventId, (u64, u32))> = self.contexts[slot_of(&self.leader, ch)]
            .as_mut()
            .map(|cx| cx.ev_imports.drain().collect())
            .unwrap_or_default();
        for (_, (token, n)) in ev_imports {
            self.ipc_event_close(token, n);
        }
        self.ipc_events
            .retain(|_, x| !(x.ch == ch && Some(x.ctx) == ctx));
        if !gone.is_empty() {
            for cx in self.contexts.iter_mut().flatten() {
                cx.imports.retain(|_, i| !gone.contains(&i.token));
            }
        }
    }

    /// `n` handles of exported event `token` are gone: at the last, an
    /// event its exporter destroyed meanwhile is destroyed.
    fn ipc_event_close(&mut self, token: u64, n: u32) {
        let Some(x) = self.ipc_events.get_mut(&token) else {
            return;
        };
        x.opened = x.opened.saturating_sub(n);
        if x.opened > 0 {
            return;
        }
        let x = *x;
        let Some(Some(owner)) = self.contexts.get_mut(x.ch as usize) else {
            return;
        };
        if owner.ctx != x.ctx || !owner.ev_zombies.contains(&x.event) {
            return;
        }
        owner.ev_zombies.remove(&x.event);
        owner.ev_exported.remove(&x.event);
        self.ipc_events.remove(&token);
        let _ = self.exec.event_destroy(x.ctx, x.event);
    }

    /// `opens` opens of export `token` at `base` are closed: at the last,
    /// memory its exporter freed meanwhile is freed.
    fn ipc_close_one(&mut self, base: DevPtr, token: u64, opens: u32) {
        let Some(e) = self.ipc.get_mut(&token) else {
            return;
        };
        e.opened = e.opened.saturating_sub(opens);
        if e.opened > 0 {
            return;
        }
        let e = *e;
        let Some(Some(owner)) = self.contexts.get_mut(e.ch as usize) else {
            return;
        };
        if owner.ctx != e.ctx || !owner.zombies.contains_key(&base) {
            return;
        }
        if self.exec.mem_free(e.ctx, base).is_ok() {
            owner.zombies.remove(&base);
            owner.exported.remove(&base);
            self.ipc.remove(&token);
            self.mem_used -= e.bytes;
        }
    }

    /// Loads `image` into channel `ch`'s context; returns the module handle.
    fn load_module(&mut self, ch: u32, ctx: CtxId, image: &[u8]) -> Result<u64, Status> {
        let full = self.contexts[slot_of(&self.leader, ch)]
            .as_ref()
            .is_none_or(|cx| cx.modules.len() >= MAX_OBJECTS);
        if full {
            return Err(Status::OUT_OF_MEMORY);
        }
        let m = self.exec.module_load(ctx, image).map_err(|e| {
            tracing::debug!(vm = %self.vm, channel = ch, error = %e, "module load refused");
            e.status()
        })?;
        let cx = self.contexts[slot_of(&self.leader, ch)]
            .as_mut()
            .expect("context exists");
        Ok(cx.modules.insert(m).map_err(|_| Status::OUT_OF_MEMORY)?.0)
    }

    fn device_ordinal(arg: u64) -> Result<(), Status> {
        if arg == 0 {
            Ok(())
        } else {
            Err(Status::INVALID_DEVICE)
        }
    }

    fn cuda(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        arena: &ArenaSlice<'_>,
    ) -> Result<Answer, Status> {
        let a = req.args;
        let props = self.exec.device();
        match req.op {
            Opcode::DriverGetVersion => return Ok(vals(&[props.driver_version as u64])),
            Opcode::DeviceGetCount => return Ok(vals(&[1])),
            Opcode::DeviceGetAttribute => {
                Self::device_ordinal(a[1])?;
                let attr = i32::try_from(a[0]).map_err(|_| Status::INVALID_VALUE)?;
                let mut v = props.attribute(attr).ok_or(Status::INVALID_VALUE)?;
                // Compressible memory is advertised where `MemCreate`
                // makes it (a GPU's driver would, but the request layer
                // does not ask it to).
                if attr == GENERIC_COMPRESSION_SUPPORTED && !self.exec.compresses() {
                    v = 0;
                }
                // Pools export (IPC) where memory moves between contexts.
                if attr == MEMPOOL_SUPPORTED_HANDLE_TYPES && !self.exec.moves_memory() {
                    v = 0;
                }
                return Ok(vals(&[v as u32 as u64]));
            }
            Opcode::DeviceGetName => {
                Self::device_ordinal(a[0])?;
                let name = props.name.as_bytes();
                let n = name.len().min(MAX_DEVICE_NAME).min(arena.len());
                arena.write(0, &name[..n])?;
                return Ok(Answer {
                    vals: [n as u64, 0, 0, 0, 0],
                    out_len: n as u32,
                });
            }
            Opcode::DeviceTotalMem => {
                Self::device_ordinal(a[0])?;
                return Ok(vals(&[props.total_mem.min(self.quota)]));
            }
            Opcode::DeviceGetUuid => {
                Self::device_ordinal(a[0])?;
                let u = props.uuid;
                let lo = u64::from_le_bytes(u[..8].try_into().expect("8 bytes"));
                let hi = u64::from_le_bytes(u[8..].try_into().expect("8 bytes"));
                return Ok(vals(&[lo, hi]));
            }
            Opcode::MemGetInfo => {
                let total = props.total_mem.min(self.quota);
                let device_free = self.exec.device_free_mem().map_err(exec_err)?;
                let free = (self.quota.saturating_sub(self.mem_used)).min(device_free);
                return Ok(vals(&[free, total]));
            }
            _ => {}
        }
        if req.op == Opcode::ContextJoin {
            return self.join(ch, a[0]).map(|_| Answer::default());
        }
        if req.op == Opcode::ContextDestroy {
            // The context goes for every channel that names it (a shared
            // context's members keep naming its slot, where their next
            // request makes a fresh one), with what they had in progress.
            let slot = self.slot(ch);
            for m in self.members(slot) {
                if let Some(job) = self.jobs.get_mut(m as usize) {
                    *job = None;
                }
                self.forget_mark(m);
            }
            self.drop_context(slot as u32);
            return Ok(Answer::default());
        }
        if req.op == Opcode::ContextShare {
            // Made no context: a process asks at `cuInit`, before it may
            // need one.
            let slot = slot_of(&self.leader, ch) as u32;
            let known = self.shares.iter().find(|(_, s)| **s == slot);
            let token = match known {
                Some((&t, _)) => t,
                None => {
                    if self.shares.len() >= MAX_SHARES {
                        return Err(Status::OUT_OF_MEMORY);
                    }
                    let t = self.ipc_token();
                    self.shares.insert(t, slot);
                    t
                }
            };
            return Ok(vals(&[token]));
        }
        let quota = self.quota;
        let mem_used = self.mem_used;
        let cx = self.context(ch)?;
        cx.reserve(growth_bound(req, arena))?;
        let ctx = cx.ctx;
        match req.op {
            Opcode::CtxSynchronize => match self.take_mark(ch, req, ctx) {
                Some(mark) => self.exec.sync_marked(ctx, mark),
                None => self.exec.synchronize(ctx),
            }
            .map_err(exec_err)
            .map(|_| Answer::default()),
            Opcode::CtxTakeOutput => {
                // Works in a context a failed assert made sticky: its
                // message is what the guest needs to see.
                let (text, left) = self.exec.take_output(ctx, arena.len()).map_err(exec_err)?;
                arena.write(0, &text)?;
                Ok(Answer {
                    vals: [left, 0, 0, 0, 0],
                    out_len: text.len() as u32,
                })
            }
            Opcode::CtxSetLimit => {
                // The heap, the printf FIFO and the call stacks are device
                // memory the driver reserves for the context: all count
                // against the quota (the stacks as much as the executor
                // reserves for them: a GPU's driver, one stack for every
                // thread the device holds at once).
                let which = u32::try_from(a[0]).map_err(|_| Status::INVALID_VALUE)?;
                let value = a[1];
                let (held, charge) = match which {
                    limit::PRINTF_FIFO_SIZE => (cx.fifo_charge, value),
                    limit::MALLOC_HEAP_SIZE if cx.heap_fixed => return Err(Status::INVALID_VALUE),
                    limit::MALLOC_HEAP_SIZE => (cx.heap_charge, value),
                    limit::STACK_SIZE if value <= limit::DEFAULT_STACK => (cx.stack_charge, 0),
                    limit::STACK_SIZE => (cx.stack_charge, self.exec.stack_reserve(value)),
                    _ => return Err(Status::INVALID_VALUE),
                };
                let others = mem_used - held;
                if others.checked_add(charge).is_none_or(|u| u > quota) {
                    return Err(Status::OUT_OF_MEMORY);
                }
                self.exec.set_limit(ctx, which, value).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                match which {
                    limit::MALLOC_HEAP_SIZE => {
                        cx.heap_charge = value;
                        cx.heap_limit = value;
                    }
                    limit::STACK_SIZE => cx.stack_charge = charge,
                    _ => cx.fifo_charge = value,
                }
                self.mem_used = others + charge;
                Ok(Answer::default())
            }
            Opcode::MemAlloc => {
                let bytes = a[0];
                if bytes == 0 {
                    return Err(Status::INVALID_VALUE);
                }
                if mem_used.checked_add(bytes).is_none_or(|u| u > quota)
                    || cx.allocs.len() >= MAX_OBJECTS
                {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let ptr = self.exec.mem_alloc(ctx, bytes).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.allocs.insert(ptr, bytes);
                self.mem_used += bytes;
                Ok(vals(&[ptr]))
            }
            Opcode::MemFree => {
                if !cx.allocs.contains_key(&a[0]) {
                    return Err(Status::INVALID_VALUE);
                }
                // Memory other channels have opened stays until they close
                // it; this channel can no longer use it.
                if let Some(&token) = cx.exported.get(&a[0]) {
                    let cx = self.contexts[slot_of(&self.leader, ch)]
                        .as_mut()
                        .expect("context exists");
                    if self.ipc.get(&token).is_some_and(|e| e.opened > 0) {
                        let size = cx.allocs.remove(&a[0]).unwrap_or(0);
                        cx.zombies.insert(a[0], size);
                        return Ok(Answer::default());
                    }
                    cx.exported.remove(&a[0]);
                    self.ipc.remove(&token);
                }
                // The quota is credited only once the executor has freed the
                // memory: a free refused (a sticky context) leaves it
                // allocated, so it stays counted until the context goes.
                self.exec.mem_free(ctx, a[0]).map_err(exec_err)?;
                let size = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .and_then(|cx| cx.allocs.remove(&a[0]))
                    .ok_or(Status::INVALID_VALUE)?;
                self.mem_used -= size;
                Ok(Answer::default())
            }
            Opcode::MemAddressReserve => {
                let (bytes, align) = (a[0], a[1]);
                if bytes == 0
                    || !bytes.is_multiple_of(VMM_GRANULARITY)
                    || bytes > MAX_RESERVATION
                    || (align != 0 && (!align.is_power_of_two() || align > MAX_RESERVATION))
                {
                    return Err(Status::INVALID_VALUE);
                }
                if cx.reservations.len() >= MAX_OBJECTS {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let base = self
                    .exec
                    .va_reserve(ctx, bytes, align.max(VMM_GRANULARITY))
                    .map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.reservations.insert(base, bytes);
                Ok(vals(&[base]))
            }
            Opcode::MemAddressFree => {
                let (base, bytes) = (a[0], a[1]);
                if cx.reservations.get(&base) != Some(&bytes)
                    || cx.mappings.range(base..base + bytes).next().is_some()
                {
                    return Err(Status::INVALID_VALUE);
                }
                self.exec.va_free(ctx, base, bytes).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.reservations.remove(&base);
                Ok(Answer::default())
            }
            Opcode::MemCreate => {
                let bytes = a[0];
                if bytes == 0 || !bytes.is_multiple_of(VMM_GRANULARITY) {
                    return Err(Status::INVALID_VALUE);
                }
                if mem_used.checked_add(bytes).is_none_or(|u| u > quota) {
                    return Err(Status::OUT_OF_MEMORY);
                }
                // CU_MEM_ALLOCATION_COMP_NONE or _GENERIC.
                if a[1] > 1 {
                    return Err(Status::INVALID_VALUE);
                }
                let compressed = a[1] == 1 && self.exec.compresses();
                let id = self.exec.phys_create(ctx, bytes).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                let h = match cx.vmem.insert(VMem {
                    id,
                    bytes,
                    mapped: 0,
                    released: false,
                    shared: None,
                }) {
                    Ok(h) => h,
                    Err(_) => {
                        let _ = self.exec.phys_release(ctx, id);
                        return Err(Status::OUT_OF_MEMORY);
                    }
                };
                cx.vmem_bytes += bytes;
                self.mem_used += bytes;
                Ok(vals(&[h.0, u64::from(compressed)]))
            }
            Opcode::MemRelease => {
                let h = Handle(a[0]);
                let m = cx.vmem.get_mut(h).map_err(|_| Status::INVALID_VALUE)?;
                if m.released {
                    return Err(Status::INVALID_VALUE);
                }
                if m.mapped > 0 {
                    // Freed with its last mapping, as with the driver.
                    m.released = true;
                    return Ok(Answer::default());
                }
                self.vmem_free(self.slot(ch), ctx, h)?;
                Ok(Answer::default())
            }
            Opcode::MemMap => {
                let (addr, bytes, offset, h) = (a[0], a[1], a[2], Handle(a[3]));
                if bytes == 0
                    || [addr, bytes, offset]
                        .iter()
                        .any(|v| !v.is_multiple_of(VMM_GRANULARITY))
                {
                    return Err(Status::INVALID_VALUE);
                }
                let end = addr.checked_add(bytes).ok_or(Status::INVALID_VALUE)?;
                let reserved = cx
                    .reservations
                    .range(..=addr)
                    .next_back()
                    .is_some_and(|(&b, &n)| end <= b + n);
                let overlaps = cx
                    .mappings
                    .range(..end)
                    .next_back()
                    .is_some_and(|(&m, map)| m + map.bytes > addr);
                let m = cx.vmem.get(h).map_err(|_| Status::INVALID_VALUE)?;
                if !reserved
                    || overlaps
                    || m.released
                    || offset.checked_add(bytes).is_none_or(|e| e > m.bytes)
                    || cx.mappings.len() >= MAX_OBJECTS
                {
                    return Err(Status::INVALID_VALUE);
                }
                let (id, shared) = (m.id, m.shared);
                let here = (self.slot(ch) as u32, ctx);
                if let Some(s) = shared.and_then(|t| self.vmem_shared.get_mut(&t)) {
                    if s.home != here {
                        self.exec.phys_move(s.home.1, ctx, id).map_err(exec_err)?;
                        s.home = here;
                    }
                }
                self.exec
                    .map(ctx, addr, bytes, offset, id)
                    .map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.mappings.insert(
                    addr,
                    Mapping {
                        bytes,
                        mem: h,
                        accessible: false,
                    },
                );
                if let Ok(m) = cx.vmem.get_mut(h) {
                    m.mapped += 1;
                }
                Ok(Answer::default())
            }
            Opcode::MemUnmap => {
                let inside = cx.whole_mappings(a[0], a[1])?;
                for (addr, map) in inside {
                    self.exec.unmap(ctx, addr, map.bytes).map_err(exec_err)?;
                    let cx = self.contexts[slot_of(&self.leader, ch)]
                        .as_mut()
                        .expect("context exists");
                    cx.mappings.remove(&addr);
                    let Ok(m) = cx.vmem.get_mut(map.mem) else {
                        continue;
                    };
                    m.mapped -= 1;
                    if m.released && m.mapped == 0 {
                        self.vmem_free(self.slot(ch), ctx, map.mem)?;
                    }
                }
                Ok(Answer::default())
            }
            Opcode::MemExport => {
                let h = Handle(a[0]);
                let m = cx.vmem.get(h).map_err(|_| Status::INVALID_VALUE)?;
                if m.released {
                    return Err(Status::INVALID_VALUE);
                }
                if let Some(t) = m.shared {
                    return Ok(vals(&[t]));
                }
                let (id, bytes) = (m.id, m.bytes);
                if self.vmem_shared.len() >= MAX_OBJECTS {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let token = self.ipc_token();
                let here = (self.slot(ch) as u32, ctx);
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                if let Ok(m) = cx.vmem.get_mut(h) {
                    m.shared = Some(token);
                }
                // The VM's from now on: its charge goes with the last handle.
                cx.vmem_bytes -= bytes;
                self.vmem_shared.insert(
                    token,
                    SharedVMem {
                        id,
                        bytes,
                        home: here,
                        holders: vec![here],
                    },
                );
                Ok(vals(&[token]))
            }
            Opcode::MemImport => {
                let token = a[0];
                let s = self.vmem_shared.get(&token).ok_or(Status::INVALID_VALUE)?;
                let (id, bytes) = (s.id, s.bytes);
                if s.holders.len() >= MAX_OBJECTS {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                let h = cx
                    .vmem
                    .insert(VMem {
                        id,
                        bytes,
                        mapped: 0,
                        released: false,
                        shared: Some(token),
                    })
                    .map_err(|_| Status::OUT_OF_MEMORY)?;
                let here = (self.slot(ch) as u32, ctx);
                if let Some(s) = self.vmem_shared.get_mut(&token) {
                    s.holders.push(here);
                }
                Ok(vals(&[h.0, bytes]))
            }
            Opcode::IpcGetMemHandle => {
                let found = cx.allocs.range(..=a[0]).next_back().map(|(&b, &n)| (b, n));
                let known = cx.exported.get(&found.map_or(0, |f| f.0)).copied();
                let full = cx.exported.len() >= MAX_OBJECTS;
                if !self.exec.moves_memory() {
                    return Err(Status::NOT_SUPPORTED);
                }
                let (base, bytes) = match found {
                    Some((b, n)) if a[0] < b + n => (b, n),
                    _ => return Err(Status::INVALID_VALUE),
                };
                if let Some(t) = known {
                    return Ok(vals(&[t, base, bytes]));
                }
                if full {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let token = self.ipc_token();
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.exported.insert(base, token);
                self.ipc.insert(
                    token,
                    Export {
                        ch: self.slot(ch) as u32,
                        ctx,
                        base,
                        bytes,
                        opened: 0,
                    },
                );
                Ok(vals(&[token, base, bytes]))
            }
            Opcode::IpcOpenMemHandle => {
                let e = *self.ipc.get(&a[0]).ok_or(Status::INVALID_VALUE)?;
                if e.ch == self.slot(ch) as u32 {
                    // As the driver: a process cannot open its own export.
                    return Err(Status::INVALID_CONTEXT);
                }
                let live = self
                    .contexts
                    .get(e.ch as usize)
                    .and_then(Option::as_ref)
                    .is_some_and(|o| o.ctx == e.ctx && o.allocs.contains_key(&e.base));
                if !live {
                    return Err(Status::INVALID_VALUE);
                }
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                let full = cx.imports.len() >= MAX_OBJECTS;
                match cx.imports.get_mut(&e.base) {
                    Some(i) if i.token == a[0] => i.opens += 1,
                    Some(_) => return Err(Status::INVALID_VALUE),
                    None if full => return Err(Status::OUT_OF_MEMORY),
                    None => {
                        cx.imports.insert(
                            e.base,
                            Import {
                                token: a[0],
                                bytes: e.bytes,
                                opens: 1,
                            },
                        );
                    }
                }
                if let Some(e) = self.ipc.get_mut(&a[0]) {
                    e.opened += 1;
                }
                Ok(vals(&[e.base, e.bytes]))
            }
            Opcode::IpcCloseMemHandle => {
                let i = *cx.imports.get(&a[0]).ok_or(Status::INVALID_VALUE)?;
                if i.opens > 1 {
                    if let Some(i) = cx.imports.get_mut(&a[0]) {
                        i.opens -= 1;
                    }
                } else {
                    cx.imports.remove(&a[0]);
                }
                self.ipc_close_one(a[0], i.token, 1);
                Ok(Answer::default())
            }
            Opcode::MemSetAccess => {
                let (addr, bytes) = (a[0], a[1]);
                let prot = match a[2] {
                    0 => 0,
                    1 => 1,
                    3 => 3,
                    _ => return Err(Status::INVALID_VALUE),
                };
                let inside = cx.whole_mappings(addr, bytes)?;
                self.exec
                    .set_access(ctx, addr, bytes, prot)
                    .map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                for (a, _) in inside {
                    if let Some(m) = cx.mappings.get_mut(&a) {
                        m.accessible = prot != 0;
                    }
                }
                Ok(Answer::default())
            }
            Opcode::MemcpyHtoD => {
                let len = arena.len();
                cx.check_range(a[0], len as u64)?;
                let stream = cx.stream(a[1])?;
                self.buf.resize(len, 0);
                arena.read(0, &mut self.buf)?;
                self.exec
                    .memcpy_htod(ctx, a[0], &self.buf, stream)
                    .map_err(exec_err)?;
                Ok(Answer::default())
            }
            Opcode::MemcpyDtoH => {
                let len = arena.len();
                cx.check_range(a[0], len as u64)?;
                let stream = cx.stream(a[1])?;
                self.buf.resize(len, 0);
                self.exec
                    .memcpy_dtoh(ctx, &mut self.buf, a[0], stream)
                    .map_err(exec_err)?;
                arena.write(0, &self.buf)?;
                Ok(Answer {
                    vals: [0; 5],
                    out_len: len as u32,
                })
            }
            Opcode::MemcpyDtoD => {
                cx.check_range(a[0], a[2])?;
                cx.check_range(a[1], a[2])?;
                let stream = cx.stream(a[3])?;
                self.exec
                    .memcpy_dtod(ctx, a[0], a[1], a[2], stream)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::MemsetD8 | Opcode::MemsetD16 | Opcode::MemsetD32 => {
                let elem: u8 = match req.op {
                    Opcode::MemsetD8 => 1,
                    Opcode::MemsetD16 => 2,
                    _ => 4,
                };
                let bytes = a[2]
                    .checked_mul(u64::from(elem))
                    .ok_or(Status::INVALID_VALUE)?;
                cx.check_range(a[0], bytes)?;
                if !a[0].is_multiple_of(u64::from(elem)) {
                    return Err(Status::INVALID_VALUE);
                }
                let stream = cx.stream(a[3])?;
                self.exec
                    .memset(ctx, a[0], a[1] as u32, elem, a[2], stream)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::ModuleStage => {
                let (off, total) = (a[0], a[1]);
                if total == 0 || total > MAX_MODULE_IMAGE {
                    return Err(Status::INVALID_VALUE);
                }
                if off == 0 {
                    // Its whole announced size at once (and charged so,
                    // `growth_bound`): the chunks never reallocate it. The
                    // old buffer is freed first.
                    cx.staging.remove(&ch);
                    cx.staging
                        .insert(ch, (Vec::with_capacity(total as usize), total));
                }
                let end = off
                    .checked_add(arena.len() as u64)
                    .ok_or(Status::INVALID_VALUE)?;
                let Some((staged, announced)) = cx.staging.get_mut(&ch) else {
                    return Err(Status::INVALID_VALUE);
                };
                if off != staged.len() as u64 || total != *announced || end > total {
                    return Err(Status::INVALID_VALUE);
                }
                let start = staged.len();
                staged.resize(end as usize, 0);
                arena.read(0, &mut staged[start..])?;
                Ok(Answer::default())
            }
            Opcode::ModuleLoad => {
                let staged = cx
                    .staging
                    .get(&ch)
                    .is_some_and(|(b, t)| a[0] != 0 && a[0] == b.len() as u64 && a[0] == *t);
                if !staged {
                    return Err(Status::INVALID_VALUE);
                }
                let (staged, _) = cx.staging.remove(&ch).expect("checked above");
                let image: std::sync::Arc<[u8]> = staged.into();
                let h = self.load_module(ch, ctx, &image)?;
                self.images.insert(image, &self.host_memory);
                Ok(vals(&[h]))
            }
            Opcode::ModuleLoadCached => {
                let image = self
                    .images
                    .get([a[0], a[1]], a[2])
                    .ok_or(Status::NOT_FOUND)?;
                Ok(vals(&[self.load_module(ch, ctx, &image)?]))
            }
            Opcode::ModuleUnload => {
                let h = Handle(a[0]);
                let m = cx.modules.remove(h).map_err(|_| Status::INVALID_HANDLE)?;
                let mut shed = 0;
                cx.functions.retain(|f| {
                    let keep = f.module != h;
                    if !keep {
                        shed += param_bytes(&f.params);
                    }
                    keep
                });
                cx.param_bytes -= shed;
                cx.function_of.retain(|(m, _), _| *m != h.0);
                cx.globals.retain(|_, (_, m)| *m != h);
                self.exec
                    .module_unload(ctx, m)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::ModuleGetFunction => {
                let h = Handle(a[0]);
                let m = *cx.modules.get(h).map_err(|_| Status::INVALID_HANDLE)?;
                let name = read_name(a[1], arena)?;
                let (id, params) = self.exec.function(ctx, m, &name).map_err(exec_err)?;
                let layout = ParamInfo::encode_all(&params);
                if layout.len() > arena.len() {
                    return Err(Status::INVALID_VALUE);
                }
                arena.write(0, &layout)?;
                let n = params.len() as u64;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                let key = (h.0, id.0);
                let (f, prints) = match cx.function_of.get(&key) {
                    Some(&f) => (f, cx.functions.get(f).is_ok_and(|f| f.prints)),
                    None => {
                        // Asked of the executor once per function (it may
                        // parse the module's PTX).
                        let prints = self.exec.function_prints(ctx, id);
                        let cx = self.contexts[slot_of(&self.leader, ch)]
                            .as_mut()
                            .expect("context exists");
                        let bytes = param_bytes(&params);
                        let f = cx
                            .functions
                            .insert(Function {
                                id,
                                module: h,
                                params,
                                prints,
                            })
                            .map_err(|_| Status::OUT_OF_MEMORY)?;
                        cx.function_of.insert(key, f);
                        cx.param_bytes += bytes;
                        (f, prints)
                    }
                };
                Ok(Answer {
                    vals: [f.0, n, u64::from(prints), 0, 0],
                    out_len: layout.len() as u32,
                })
            }
            Opcode::ModuleGetGlobal => {
                let h = Handle(a[0]);
                let m = *cx.modules.get(h).map_err(|_| Status::INVALID_HANDLE)?;
                let name = read_name(a[1], arena)?;
                if cx.globals.len() >= MAX_OBJECTS {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let (ptr, size) = self.exec.module_global(ctx, m, &name).map_err(exec_err)?;
                let managed = self.exec.module_global_managed(ctx, m, &name, ptr);
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                if size > 0 {
                    cx.globals.insert(ptr, (size, h));
                }
                Ok(vals(&[ptr, size, u64::from(managed)]))
            }
            Opcode::FuncGetAttribute | Opcode::FuncSetAttribute => {
                let f = cx.function(a[0])?;
                let id = f.id;
                let attr = i32::try_from(a[1]).map_err(|_| Status::INVALID_VALUE)?;
                if req.op == Opcode::FuncGetAttribute {
                    let v = self
                        .exec
                        .function_attribute(ctx, id, attr)
                        .map_err(exec_err)?;
                    // The i32's bits, as the guest reads them back.
                    return Ok(vals(&[u64::from(v as u32)]));
                }
                // The value travels as an i32's bits in the low half.
                let value = u32::try_from(a[2]).map_err(|_| Status::INVALID_VALUE)? as i32;
                self.exec
                    .set_function_attribute(ctx, id, attr, value)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::LaunchKernel => {
                let f = cx.function(a[0])?;
                let stream = cx.stream(a[1])?;
                let mut hb = [0u8; 32];
                arena.read(0, &mut hb)?;
                let hdr = LaunchHeader::from_bytes(&hb);
                hdr.validate().map_err(|_| Status::INVALID_VALUE)?;
                let n = hdr.param_bytes as usize;
                if 32 + n > arena.len() || (n as u64) < ParamInfo::packed_size(&f.params) {
                    return Err(Status::INVALID_VALUE);
                }
                let id = f.id;
                // The first kernel that uses the device heap fixes its
                // size, and a heap the guest did not size (the default)
                // is charged now.
                let need = cx.heap_limit.saturating_sub(cx.heap_charge);
                if !cx.heap_fixed && self.exec.function_uses_heap(ctx, id) {
                    if mem_used.checked_add(need).is_none_or(|u| u > quota) {
                        return Err(Status::OUT_OF_MEMORY);
                    }
                    let cx = self.contexts[slot_of(&self.leader, ch)]
                        .as_mut()
                        .expect("context exists");
                    cx.heap_charge += need;
                    cx.heap_fixed = true;
                    self.mem_used += need;
                }
                self.buf.resize(n, 0);
                arena.read(32, &mut self.buf)?;
                let options =
                    LaunchOptions::from_arg(a[2], hdr.grid).map_err(|_| Status::INVALID_VALUE)?;
                let cfg = LaunchConfig {
                    grid: hdr.grid,
                    block: hdr.block,
                    shared_mem: hdr.shared_mem,
                    options,
                    part: None,
                };
                self.launch_sliced(ch, req, ctx, id, cfg, stream)
            }
            Opcode::GraphLaunch => {
                // The server resumes a queued graph before it reads the
                // channel's next request, so none is queued here.
                if cx.graphs.contains_key(&ch) {
                    return Err(Status::INVALID_VALUE);
                }
                let mut data = vec![0u8; arena.len()];
                arena.read(0, &mut data)?;
                let steps = graph_steps(&data, a[0]).map_err(|why| {
                    tracing::debug!(channel = ch, "graph launch refused: {why}");
                    Status::INVALID_VALUE
                })?;
                let charge = graph_charge(data.len());
                cx.graph_bytes += charge;
                cx.graphs.insert(
                    ch,
                    GraphJob {
                        data,
                        charge,
                        steps: steps.into(),
                        call_id: req.call_id,
                        vcpu: req.vcpu,
                    },
                );
                Ok(Answer::default())
            }
            Opcode::ArrayCreate => {
                let mut b = [0u8; ARRAY_DESC_BYTES];
                arena.read(0, &mut b)?;
                let desc = ArrayDesc::from_bytes(&b);
                desc.validate().map_err(|_| Status::INVALID_VALUE)?;
                let bytes = desc.total_bytes();
                if mem_used.checked_add(bytes).is_none_or(|u| u > quota)
                    || cx.arrays.len() >= MAX_OBJECTS
                {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let id = self.exec.array_create(ctx, &desc).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                match cx.arrays.insert((id, desc)) {
                    Ok(h) => {
                        cx.array_bytes += bytes;
                        self.mem_used += bytes;
                        Ok(vals(&[h.0]))
                    }
                    Err(_) => {
                        let _ = self.exec.array_destroy(ctx, id);
                        Err(Status::OUT_OF_MEMORY)
                    }
                }
            }
            Opcode::ArrayDestroy => {
                let &(id, desc) = cx.array(a[0])?;
                self.exec.array_destroy(ctx, id).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.arrays
                    .remove(Handle(a[0]))
                    .map_err(|_| Status::INVALID_HANDLE)?;
                cx.array_bytes -= desc.total_bytes();
                self.mem_used -= desc.total_bytes();
                Ok(Answer::default())
            }
            Opcode::Memcpy3D => {
                let mut b = [0u8; COPY3D_BYTES];
                arena.read(0, &mut b)?;
                let c = Copy3D::from_bytes(&b);
                let packed = c.host_bytes().ok_or(Status::INVALID_VALUE)?;
                if c.extent.contains(&0) {
                    return Err(Status::INVALID_VALUE);
                }
                let copy = RectCopy {
                    src: RectSide {
                        place: cx.copy_side(&c.src, c.extent)?,
                        pos: c.src.pos,
                    },
                    dst: RectSide {
                        place: cx.copy_side(&c.dst, c.extent)?,
                        pos: c.dst.pos,
                    },
                    extent: c.extent,
                };
                let stream = cx.stream(a[0])?;
                let (from_host, to_host) =
                    (copy.src.place == Place::Host, copy.dst.place == Place::Host);
                if from_host && to_host {
                    return Err(Status::INVALID_VALUE);
                }
                let data = usize::try_from(packed).map_err(|_| Status::INVALID_VALUE)?;
                if from_host {
                    if COPY3D_BYTES + data != arena.len() {
                        return Err(Status::INVALID_VALUE);
                    }
                    self.buf.resize(data, 0);
                    arena.read(COPY3D_BYTES, &mut self.buf)?;
                    self.exec
                        .memcpy_rect(ctx, &copy, HostData::From(&self.buf), stream)
                        .map_err(exec_err)?;
                    return Ok(Answer::default());
                }
                if to_host {
                    if data > arena.len() {
                        return Err(Status::INVALID_VALUE);
                    }
                    self.buf.resize(data, 0);
                    self.exec
                        .memcpy_rect(ctx, &copy, HostData::To(&mut self.buf), stream)
                        .map_err(exec_err)?;
                    arena.write(0, &self.buf)?;
                    return Ok(Answer {
                        vals: [0; 5],
                        out_len: data as u32,
                    });
                }
                self.exec
                    .memcpy_rect(ctx, &copy, HostData::None, stream)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::TexObjectCreate => {
                let mut b = [0u8; TEX_OBJECT_BYTES];
                arena.read(0, &mut b)?;
                let (res, tex) = tex_object_from_bytes(&b);
                tex.validate().map_err(|_| Status::INVALID_VALUE)?;
                let resource = match res.kind {
                    RESOURCE_ARRAY => TexResource::Array(cx.array(res.base)?.0),
                    RESOURCE_LINEAR | RESOURCE_PITCH2D => {
                        let (first, end) = res.device_span().map_err(|_| Status::INVALID_VALUE)?;
                        cx.check_range(first, end - first)?;
                        if res.kind == RESOURCE_LINEAR {
                            TexResource::Linear {
                                ptr: res.base,
                                format: res.format,
                                channels: res.channels,
                                bytes: res.width,
                            }
                        } else {
                            TexResource::Pitch2D {
                                ptr: res.base,
                                format: res.format,
                                channels: res.channels,
                                width: res.width,
                                height: res.height,
                                pitch: res.pitch,
                            }
                        }
                    }
                    _ => return Err(Status::INVALID_VALUE),
                };
                if cx.tex_objects.len() >= MAX_OBJECTS {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let t = self
                    .exec
                    .tex_object_create(ctx, &resource, &tex)
                    .map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.tex_objects.insert(t);
                Ok(vals(&[t]))
            }
            Opcode::TexObjectDestroy => {
                if !cx.tex_objects.contains(&a[0]) {
                    return Err(Status::INVALID_VALUE);
                }
                self.exec.tex_object_destroy(ctx, a[0]).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.tex_objects.remove(&a[0]);
                Ok(Answer::default())
            }
            Opcode::SurfObjectCreate => {
                // Any array: NVIDIA's driver (580, on an H200) makes a
                // surface over an array created without SURFACE_LDST too.
                let &(id, _) = cx.array(a[0])?;
                if cx.surf_objects.len() >= MAX_OBJECTS {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let s = self.exec.surf_object_create(ctx, id).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.surf_objects.insert(s);
                Ok(vals(&[s]))
            }
            Opcode::SurfObjectDestroy => {
                if !cx.surf_objects.contains(&a[0]) {
                    return Err(Status::INVALID_VALUE);
                }
                self.exec.surf_object_destroy(ctx, a[0]).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.surf_objects.remove(&a[0]);
                Ok(Answer::default())
            }
            Opcode::StreamCreate => {
                let flags = u32::try_from(a[0]).map_err(|_| Status::INVALID_VALUE)?;
                if cx.streams.len() >= MAX_OBJECTS {
                    return Err(Status::OUT_OF_MEMORY);
                }
                // An i32 in the low word; the driver clamps priorities to
                // the context's range, and so does the host.
                let asked = u32::try_from(a[1]).map_err(|_| Status::INVALID_VALUE)? as i32;
                let (s, priority) = if asked == 0 {
                    (self.exec.stream_create(ctx, flags).map_err(exec_err)?, 0)
                } else {
                    let (least, greatest) =
                        self.exec.stream_priority_range(ctx).map_err(exec_err)?;
                    let p = asked.clamp(greatest.min(least), least.max(greatest));
                    let s = self
                        .exec
                        .stream_create_with_priority(ctx, flags, p)
                        .map_err(exec_err)?;
                    (s, p)
                };
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                let h = cx.streams.insert(s).map_err(|_| Status::OUT_OF_MEMORY)?;
                Ok(vals(&[h.0, u64::from(priority as u32)]))
            }
            Opcode::StreamPriorityRange => {
                let (least, greatest) = self.exec.stream_priority_range(ctx).map_err(exec_err)?;
                Ok(vals(&[u64::from(least as u32), u64::from(greatest as u32)]))
            }
            Opcode::StreamDestroy => {
                let s = cx
                    .streams
                    .remove(Handle(a[0]))
                    .map_err(|_| Status::INVALID_HANDLE)?;
                self.exec
                    .stream_destroy(ctx, s)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::StreamSynchronize => {
                let s = cx.stream(a[0])?;
                match self.take_mark(ch, req, ctx) {
                    Some(mark) => self.exec.sync_marked(ctx, mark),
                    None => self.exec.stream_synchronize(ctx, s),
                }
                .map_err(exec_err)
                .map(|_| Answer::default())
            }
            Opcode::StreamQuery => {
                let s = cx.stream(a[0])?;
                self.exec
                    .stream_query(ctx, s)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::StreamWaitEvent => {
                let s = cx.stream(a[0])?;
                let e = cx.event(a[1])?;
                self.exec
                    .stream_wait_event(ctx, s, e)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::EventCreate => {
                let flags = u32::try_from(a[0]).map_err(|_| Status::INVALID_VALUE)?;
                if cx.events.len() >= MAX_OBJECTS {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let e = self.exec.event_create(ctx, flags).map_err(exec_err)?;
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                Ok(vals(&[cx
                    .events
                    .insert(e)
                    .map_err(|_| Status::OUT_OF_MEMORY)?
                    .0]))
            }
            Opcode::EventDestroy => {
                let e = cx
                    .events
                    .remove(Handle(a[0]))
                    .map_err(|_| Status::INVALID_HANDLE)?;
                // Another channel's event opened here: this handle goes.
                if let Some((token, n)) = cx.ev_imports.get(&e).copied() {
                    if n > 1 {
                        cx.ev_imports.insert(e, (token, n - 1));
                    } else {
                        cx.ev_imports.remove(&e);
                    }
                    self.ipc_event_close(token, 1);
                    return Ok(Answer::default());
                }
                // An exported event others still name stays until they
                // let go of it.
                if let Some(&token) = cx.ev_exported.get(&e) {
                    let cx = self.contexts[slot_of(&self.leader, ch)]
                        .as_mut()
                        .expect("context exists");
                    if self.ipc_events.get(&token).is_some_and(|x| x.opened > 0) {
                        cx.ev_zombies.insert(e);
                        return Ok(Answer::default());
                    }
                    cx.ev_exported.remove(&e);
                    self.ipc_events.remove(&token);
                }
                self.exec
                    .event_destroy(ctx, e)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::IpcGetEventHandle => {
                let e = cx.event(a[0])?;
                let known = cx.ev_exported.get(&e).copied();
                let foreign = cx.ev_imports.contains_key(&e);
                let full = cx.ev_exported.len() >= MAX_OBJECTS;
                if !self.exec.moves_memory() {
                    return Err(Status::NOT_SUPPORTED);
                }
                if foreign {
                    return Err(Status::INVALID_VALUE);
                }
                if let Some(t) = known {
                    return Ok(vals(&[t]));
                }
                if full {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let token = self.ipc_token();
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                cx.ev_exported.insert(e, token);
                self.ipc_events.insert(
                    token,
                    EventExport {
                        ch: self.slot(ch) as u32,
                        ctx,
                        event: e,
                        opened: 0,
                    },
                );
                Ok(vals(&[token]))
            }
            Opcode::IpcOpenEventHandle => {
                let x = *self.ipc_events.get(&a[0]).ok_or(Status::INVALID_VALUE)?;
                if x.ch == self.slot(ch) as u32 {
                    return Err(Status::INVALID_CONTEXT);
                }
                let live = self
                    .contexts
                    .get(x.ch as usize)
                    .and_then(Option::as_ref)
                    .is_some_and(|o| o.ctx == x.ctx && !o.ev_zombies.contains(&x.event));
                if !live {
                    return Err(Status::INVALID_VALUE);
                }
                let cx = self.contexts[slot_of(&self.leader, ch)]
                    .as_mut()
                    .expect("context exists");
                if cx.events.len() >= MAX_OBJECTS {
                    return Err(Status::OUT_OF_MEMORY);
                }
                let h = cx
                    .events
                    .insert(x.event)
                    .map_err(|_| Status::OUT_OF_MEMORY)?;
                let n = cx.ev_imports.get(&x.event).map_or(0, |i| i.1);
                cx.ev_imports.insert(x.event, (a[0], n + 1));
                if let Some(x) = self.ipc_events.get_mut(&a[0]) {
                    x.opened += 1;
                }
                Ok(vals(&[h.0]))
            }
            Opcode::EventRecord => {
                let e = cx.event(a[0])?;
                let s = cx.stream(a[1])?;
                self.exec
                    .event_record(ctx, e, s)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::EventQuery => {
                let e = cx.event(a[0])?;
                self.exec
                    .event_query(ctx, e)
                    .map_err(exec_err)
                    .map(|_| Answer::default())
            }
            Opcode::EventSynchronize => {
                let e = cx.event(a[0])?;
                match self.take_mark(ch, req, ctx) {
                    Some(mark) => self.exec.sync_marked(ctx, mark),
                    None => self.exec.event_synchronize(ctx, e),
                }
                .map_err(exec_err)
                .map(|_| Answer::default())
            }
            Opcode::EventElapsedTime => {
                let start = cx.event(a[0])?;
                let end = cx.event(a[1])?;
                let ms = self
                    .exec
                    .event_elapsed_ms(ctx, start, end)
                    .map_err(exec_err)?;
                Ok(vals(&[u64::from(ms.to_bits())]))
            }
            // Handled before a context is needed, or by the transport.
            Opcode::Nop
            | Opcode::ContextJoin
            | Opcode::ContextShare
            | Opcode::ContextDestroy
            | Opcode::CopyIn
            | Opcode::CopyOut
            | Opcode::DriverGetVersion
            | Opcode::DeviceGetCount
            | Opcode::DeviceGetAttribute
            | Opcode::DeviceGetName
            | Opcode::DeviceTotalMem
            | Opcode::DeviceGetUuid
            | Opcode::MemGetInfo => unreachable!("dispatched earlier"),
            Opcode::ClGetDeviceInfo
            | Opcode::ClGetPlatformInfo
            | Opcode::ClCreateQueue
            | Opcode::ClReleaseQueue
            | Opcode::ClFinish
            | Opcode::ClFlush
            | Opcode::ClCreateBuffer
            | Opcode::ClCreateSubBuffer
            | Opcode::ClReleaseMem
            | Opcode::ClWriteBuffer
            | Opcode::ClReadBuffer
            | Opcode::ClCopyBuffer
            | Opcode::ClFillBuffer
            | Opcode::ClProgramStage
            | Opcode::ClBuildProgram
            | Opcode::ClProgramLog
            | Opcode::ClProgramBinary
            | Opcode::ClProgramKernelNames
            | Opcode::ClReleaseProgram
            | Opcode::ClCreateKernel
            | Opcode::ClReleaseKernel
            | Opcode::ClKernelWorkGroupInfo
            | Opcode::ClKernelArgInfo
            | Opcode::ClNdRange
            | Opcode::ClMarker
            | Opcode::ClWaitList
            | Opcode::ClWaitEvents
            | Opcode::ClEventStatus
            | Opcode::ClEventProfiling
            | Opcode::ClReleaseEvent
            | Opcode::ClCreateImage
            | Opcode::ClImageFormats
            | Opcode::ClWriteImage
            | Opcode::ClReadImage
            | Opcode::ClCopyImage
            | Opcode::ClCopyImageToBuffer
            | Opcode::ClCopyBufferToImage
            | Opcode::ClCreateSampler
            | Opcode::ClReleaseSampler => {
                unreachable!("OpenCL requests go to ClOps")
            }
        }
    }
}

impl CudaOps {
    /// A CUDA driver request of channel `ch` (not the transport's, not
    /// OpenCL's), with the channel's imported allocations lent to it.
    fn cuda_request(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        arena: &ArenaSlice<'_>,
    ) -> Result<Answer, Status> {
        // IPC's own requests change what is lent: they run without. So do
        // the requests that destroy or rename the channel's context: what
        // is lent is the exporter's, and must not go with the borrower's
        // context.
        let r = if matches!(
            req.op,
            Opcode::IpcGetMemHandle
                | Opcode::IpcOpenMemHandle
                | Opcode::IpcCloseMemHandle
                | Opcode::IpcGetEventHandle
                | Opcode::IpcOpenEventHandle
                | Opcode::EventDestroy
                | Opcode::ContextDestroy
                | Opcode::ContextJoin
                | Opcode::ContextShare
        ) {
            self.cuda(ch, req, arena)
        } else {
            self.with_imports(ch, |ops| ops.cuda(ch, req, arena))
        };
        if let Some(Some(cx)) = self.contexts.get_mut(slot_of(&self.leader, ch)) {
            cx.settle();
        }
        r
    }

    /// Counts a served request of opcode `op`: a launch the executor
    /// took, or the channel's error.
    fn served(&mut self, ch: u32, op: Opcode, r: &Result<Answer, Status>) {
        match r {
            Ok(_) if op == Opcode::LaunchKernel => self.kernels += 1,
            Ok(_) => {}
            Err(status) => self.note_error(ch, *status),
        }
    }

    /// Runs the next step of the graph launch queued on channel `ch`, as
    /// the request it stands for. A failed step ends the launch: its error
    /// is the channel's next deferred one, and the steps after it do not
    /// run (as a faulting kernel ends the work queued behind it).
    fn graph_step(&mut self, ch: u32) -> Resume {
        let Some(cx) = self
            .contexts
            .get_mut(slot_of(&self.leader, ch))
            .and_then(Option::as_mut)
        else {
            return Resume::Nothing;
        };
        let Some(mut job) = cx.graphs.remove(&ch) else {
            return Resume::Nothing;
        };
        let Some(step) = job.steps.pop_front() else {
            cx.graph_bytes -= job.charge;
            return Resume::Nothing;
        };
        let req = job.request(&step);
        let r = self.cuda_request(ch, &req, &ArenaSlice::private(&job.data[step.data]));
        self.served(ch, req.op, &r);
        if let Some(cx) = self
            .contexts
            .get_mut(slot_of(&self.leader, ch))
            .and_then(Option::as_mut)
        {
            if r.is_ok() && !job.steps.is_empty() {
                cx.graphs.insert(ch, job);
            } else {
                cx.graph_bytes -= job.charge;
                cx.settle();
            }
        }
        Resume::Ran(r.map(drop))
    }
}

impl Handler for CudaOps {
    fn handle(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        arena: &ArenaSlice<'_>,
    ) -> Result<Answer, Status> {
        self.calls += 1;
        let result = match req.op {
            Opcode::Nop | Opcode::CopyIn | Opcode::CopyOut => self.transport.handle(ch, req, arena),
            op if op.is_opencl() => {
                let before = self.cl.used();
                let left = self.quota.saturating_sub(self.mem_used);
                let r = self.cl.handle(ch, req, arena, self.quota, left);
                self.mem_used = self.mem_used - before + self.cl.used();
                r
            }
            _ => self.cuda_request(ch, req, arena),
        };
        self.served(ch, req.op, &result);
        result
    }

    fn resume(&mut self, ch: u32) -> Resume {
        let Some(job) = self.jobs.get_mut(ch as usize).and_then(Option::as_mut) else {
            return self.graph_step(ch);
        };
        let Some(part) = job.parts.next() else {
            self.jobs[ch as usize] = None;
            return Resume::Nothing;
        };
        let cfg = LaunchConfig {
            part: Some(part),
            ..job.cfg
        };
        let (jctx, jf, params, jstream) = (job.ctx, job.f, job.params.clone(), job.stream);
        let r = self.with_imports(ch, |ops| {
            ops.exec
                .launch(jctx, jf, &cfg, &params, jstream)
                .map_err(exec_err)
        });
        self.long.parts += 1;
        let job = self.jobs[ch as usize]
            .as_mut()
            .expect("the job resumed above");
        if r.is_err() || job.parts.is_done() {
            // A failed part ends the launch (its error is the channel's
            // deferred one); the last part ends it too.
            self.jobs[ch as usize] = None;
        }
        if let Err(status) = r {
            self.note_error(ch, status);
        }
        Resume::Ran(r.map(drop))
    }

    fn group(&self, ch: u32) -> Option<u32> {
        CudaOps::group(self, ch)
    }

    fn sync_wait(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        again: bool,
    ) -> Option<std::time::Duration> {
        let cx = self
            .contexts
            .get(slot_of(&self.leader, ch))
            .and_then(Option::as_ref)?;
        let ctx = cx.ctx;
        // A bad handle is answered now (with its error).
        let what = match req.op {
            Opcode::StreamSynchronize => SyncTarget::Stream(cx.stream(req.args[0]).ok()?),
            Opcode::EventSynchronize => SyncTarget::Event(cx.event(req.args[0]).ok()?),
            Opcode::CtxSynchronize => SyncTarget::Context,
            _ => return None,
        };
        // Asked again about the same request: its mark stands (the work
        // issued after it, by the other members, is not waited for).
        let kept = if again {
            self.marks
                .remove(&ch)
                .filter(|m| m.op == req.op && m.arg == req.args[0] && m.ctx == ctx)
        } else {
            self.forget_mark(ch);
            None
        };
        let marked = match kept {
            Some(m) => m,
            None => Marked {
                op: req.op,
                arg: req.args[0],
                ctx,
                mark: self.exec.sync_mark(ctx, what)?,
            },
        };
        let pending = self.exec.sync_pending(ctx, &marked.mark);
        self.marks.insert(ch, marked);
        match pending {
            SyncPending::Done => None,
            // A short wait is served now: the executor ends it within
            // microseconds of the work's end, as a wake-up would not.
            SyncPending::In(d) => (d > PUT_ASIDE_FROM).then(|| d - WAKE_AHEAD),
            SyncPending::Running => Some(POLL_RUNNING),
        }
    }

    fn unfinished(&self, ch: u32) -> Option<ValidRequest> {
        if let Some(Some(j)) = self.jobs.get(ch as usize) {
            return Some(j.req.clone());
        }
        let g = self
            .contexts
            .get(slot_of(&self.leader, ch))?
            .as_ref()?
            .graphs
            .get(&ch)?;
        g.steps.front().map(|s| g.request(s))
    }

    fn reset(&mut self, ch: u32) {
        if let Some(job) = self.jobs.get_mut(ch as usize) {
            *job = None;
        }
        self.forget_mark(ch);
        self.transport.reset(ch);
        let before = self.cl.used();
        self.cl.reset(ch);
        self.mem_used -= before - self.cl.used();
        let slot = slot_of(&self.leader, ch);
        let members = self.members(slot);
        if members.len() > 1 {
            self.leave(ch, slot, &members);
            return;
        }
        self.shares.retain(|_, s| *s != ch);
        self.drop_context(ch);
    }
}

impl CudaOps {
    /// Memory handle `h` of the context in `slot` (`ctx`) goes, released
    /// and mapped nowhere by it. Memory of its own is freed; exported
    /// memory is freed with the last handle of any context. An executor
    /// that refuses the free (a sticky context) leaves everything as it
    /// was, still counted.
    fn vmem_free(&mut self, slot: usize, ctx: CtxId, h: Handle) -> Result<(), Status> {
        let cx = self.contexts[slot].as_mut().expect("context exists");
        let m = cx.vmem.get(h).map_err(|_| Status::INVALID_VALUE)?;
        let (id, bytes, shared) = (m.id, m.bytes, m.shared);
        let Some(token) = shared else {
            self.exec.phys_release(ctx, id).map_err(exec_err)?;
            let cx = self.contexts[slot].as_mut().expect("context exists");
            let _ = cx.vmem.remove(h);
            cx.vmem_bytes -= bytes;
            self.mem_used -= bytes;
            return Ok(());
        };
        let here = (slot as u32, ctx);
        let Some(s) = self.vmem_shared.get_mut(&token) else {
            // Its memory went with another context.
            let cx = self.contexts[slot].as_mut().expect("context exists");
            let _ = cx.vmem.remove(h);
            return Ok(());
        };
        if s.holders.len() == 1 {
            self.exec.phys_release(s.home.1, id).map_err(exec_err)?;
            self.vmem_shared.remove(&token);
            self.mem_used -= bytes;
        } else if let Some(i) = s.holders.iter().position(|&x| x == here) {
            s.holders.swap_remove(i);
        }
        let cx = self.contexts[slot].as_mut().expect("context exists");
        let _ = cx.vmem.remove(h);
        Ok(())
    }

    /// The context in `slot` goes: its handles of exported memory go, and
    /// memory still held elsewhere that its table holds moves to a
    /// context that has a handle of it (unmapped here first, so that its
    /// bytes go with it).
    fn vmem_forget(&mut self, slot: usize) {
        let Some(cx) = self.contexts.get(slot).and_then(Option::as_ref) else {
            return;
        };
        let ctx = cx.ctx;
        let here = (slot as u32, ctx);
        let mine: Vec<(DevPtr, u64)> = cx
            .mappings
            .iter()
            .filter(|(_, m)| cx.vmem.get(m.mem).is_ok_and(|v| v.shared.is_some()))
            .map(|(&a, m)| (a, m.bytes))
            .collect();
        for (addr, bytes) in mine {
            let _ = self.exec.unmap(ctx, addr, bytes);
        }
        let tokens: Vec<u64> = self
            .vmem_shared
            .iter()
            .filter(|(_, s)| s.holders.contains(&here) || s.home == here)
            .map(|(&t, _)| t)
            .collect();
        for t in tokens {
            let Some(s) = self.vmem_shared.get_mut(&t) else {
                continue;
            };
            s.holders.retain(|&x| x != here);
            if s.home != here {
                if s.holders.is_empty() {
                    // This context held the last handle and another
                    // context's table holds the memory: it goes now. If
                    // that context refuses the free (sticky), the memory
                    // stays counted and goes with it.
                    let (home, id, bytes) = (s.home.1, s.id, s.bytes);
                    if self.exec.phys_release(home, id).is_ok() {
                        self.vmem_shared.remove(&t);
                        self.mem_used -= bytes;
                    }
                }
                continue;
            }
            let (id, bytes) = (s.id, s.bytes);
            let next = s.holders.first().copied();
            let moved = next.is_some_and(|to| self.exec.phys_move(ctx, to.1, id).is_ok());
            match (moved, next) {
                (true, Some(to)) => {
                    if let Some(s) = self.vmem_shared.get_mut(&t) {
                        s.home = to;
                    }
                }
                _ => {
                    // The last handle, or memory that cannot move: it goes
                    // with this context (other handles of it then name
                    // nothing: mapping them fails, releasing them works).
                    if next.is_some() {
                        tracing::warn!(vm = %self.vm, "shared memory of a context that went could not move to another holder");
                    }
                    self.vmem_shared.remove(&t);
                    self.mem_used -= bytes;
                }
            }
        }
    }

    /// Destroys the context channel `ch` names, if it has made one: its
    /// memory, modules, streams and events go, its exports end and its
    /// imports close, and their bytes count back to the VM's quota. For a
    /// shared context, `ch` is its slot (whose own channel is a member).
    fn drop_context(&mut self, ch: u32) {
        self.ipc_forget(ch);
        self.vmem_forget(slot_of(&self.leader, ch));
        if let Some(cx) = self
            .contexts
            .get_mut(slot_of(&self.leader, ch))
            .and_then(Option::take)
        {
            let freed: u64 = cx.allocs.values().sum::<u64>()
                + cx.zombies.values().sum::<u64>()
                + cx.array_bytes
                + cx.heap_charge
                + cx.fifo_charge
                + cx.stack_charge
                + cx.vmem_bytes;
            self.mem_used -= freed;
            self.exec.destroy_context(cx.ctx);
            tracing::debug!(vm = %self.vm, channel = ch, freed, "context destroyed");
        }
    }
}

/// The bit that marks an accounting mark as OpenCL's: its `ctx` is then
/// `CL_MARK | the channel's OpenCL life` and its `event` a mark id of
/// `ClOps` (executor context ids are small counters, never this high).
const CL_MARK: u64 = 1 << 63;

/// Most accounting events one channel's context holds.
const MAX_ACCT_EVENTS: usize = 1024;

impl CudaOps {
    /// The live context of channel `ch` that `m` was recorded in.
    fn mark_ctx(&mut self, m: Mark) -> Option<&mut Context> {
        self.contexts
            .get_mut(slot_of(&self.leader, m.ch))?
            .as_mut()
            .filter(|cx| cx.ctx == m.ctx)
    }
}

impl Meter for CudaOps {
    fn sync_channel(&mut self, ch: u32) -> Instant {
        self.cl.finish(ch);
        let Some(Some(cx)) = self.contexts.get(slot_of(&self.leader, ch)) else {
            return Instant::now();
        };
        let _ = self.exec.synchronize(cx.ctx);
        let ago = self.exec.completed_ago(cx.ctx);
        let now = Instant::now();
        ago.and_then(|d| now.checked_sub(d)).unwrap_or(now)
    }

    fn channel_busy(&mut self, ch: u32) -> bool {
        let Some(Some(cx)) = self.contexts.get(slot_of(&self.leader, ch)) else {
            return false;
        };
        let exec = &mut self.exec;
        std::iter::once(None)
            .chain(cx.streams.values().map(|&s| Some(s)))
            .any(|s| matches!(exec.stream_query(cx.ctx, s), Err(ExecError::NotReady)))
    }

    fn mark(&mut self, ch: u32, req: &ValidRequest) -> Option<Mark> {
        let a = req.args;
        if req.op.is_opencl() {
            // Every OpenCL enqueue names its queue in args[0].
            let (generation, id) = self.cl.mark(ch, a[0])?;
            return Some(Mark {
                ch,
                ctx: CtxId(CL_MARK | generation),
                event: EventId(id),
            });
        }
        let handle = match req.op {
            Opcode::LaunchKernel
            | Opcode::MemcpyHtoD
            | Opcode::MemcpyDtoH
            | Opcode::EventRecord => a[1],
            Opcode::MemcpyDtoD | Opcode::MemsetD8 | Opcode::MemsetD16 | Opcode::MemsetD32 => a[3],
            Opcode::StreamWaitEvent | Opcode::StreamSynchronize | Opcode::Memcpy3D => a[0],
            // Context-wide or stream-less: the NULL stream orders after the
            // context's blocking streams.
            _ => 0,
        };
        let cx = self.contexts.get_mut(slot_of(&self.leader, ch))?.as_mut()?;
        let stream = cx.stream(handle).ok()?;
        let event = match cx.acct_free.pop() {
            Some(e) => e,
            None if cx.acct_events < MAX_ACCT_EVENTS => {
                let e = self.exec.event_create(cx.ctx, 0).ok()?;
                cx.acct_events += 1;
                e
            }
            None => return None,
        };
        if self.exec.event_record(cx.ctx, event, stream).is_err() {
            cx.acct_free.push(event);
            return None;
        }
        Some(Mark {
            ch,
            ctx: cx.ctx,
            event,
        })
    }

    fn mark_done(&mut self, m: Mark) -> Option<bool> {
        if m.ctx.0 & CL_MARK != 0 {
            return self.cl.mark_done(m.ch, m.ctx.0 & !CL_MARK, m.event.0);
        }
        let ctx = self.mark_ctx(m)?.ctx;
        match self.exec.event_query(ctx, m.event) {
            Ok(()) => Some(true),
            Err(ExecError::NotReady) => Some(false),
            Err(_) => None,
        }
    }

    fn mark_pending(&mut self, m: Mark) -> Option<std::time::Duration> {
        if m.ctx.0 & CL_MARK != 0 {
            return None;
        }
        let ctx = self.mark_ctx(m)?.ctx;
        let mark = self.exec.sync_mark(ctx, SyncTarget::Event(m.event))?;
        let pending = self.exec.sync_pending(ctx, &mark);
        self.exec.sync_forget(ctx, mark);
        match pending {
            SyncPending::Done => Some(std::time::Duration::ZERO),
            SyncPending::In(d) => Some(d),
            SyncPending::Running => None,
        }
    }

    fn mark_elapsed_ns(&mut self, a: Mark, b: Mark) -> Option<i64> {
        if a.ch != b.ch || a.ctx != b.ctx {
            return None;
        }
        if a.ctx.0 & CL_MARK != 0 {
            return self
                .cl
                .mark_elapsed_ns(a.ch, a.ctx.0 & !CL_MARK, a.event.0, b.event.0);
        }
        let ctx = self.mark_ctx(a)?.ctx;
        let ms = self.exec.event_elapsed_ms(ctx, a.event, b.event).ok()?;
        Some((f64::from(ms) * 1e6).round() as i64)
    }

    fn unmark(&mut self, m: Mark) {
        if m.ctx.0 & CL_MARK != 0 {
            self.cl.unmark(m.ch, m.ctx.0 & !CL_MARK, m.event.0);
            return;
        }
        if let Some(cx) = self.mark_ctx(m) {
            cx.acct_free.push(m.event);
        }
    }

    fn device_time_ns(&mut self) -> u64 {
        self.exec.gpu_time_ns() + self.cl.device_time_ns()
    }
}
