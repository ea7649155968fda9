//! SimGpu: a model of one non-preemptive GPU shared by every worker on the
//! host, with device memory in host RAM. The embedded default without a GPU:
//! CI, the demo and the fairness experiments run on it.
//!
//! # The model
//!
//! - **Device time** advances only by modelled work. A kernel's duration
//!   comes from the cost model ([`SimConfig::kernels`], plus the built-in
//!   [`SPIN_KERNEL`]) or from the instructions it executed, never from how
//!   long anything took on the host. All SimGpus of a host share one
//!   [`SimDevice`] timeline; a launch reserves `[start, start + duration)`
//!   on it with `start = max(stream ready, launch arrival, device
//!   busy-until)`, so kernels run one at a time, first served in the order
//!   they reserve, across every process. Nothing preempts a kernel.
//! - **Streams** each have a ready time: the end of their last kernel. A
//!   launch starts no earlier than its stream is ready and makes the stream
//!   ready at the kernel's end. The NULL stream is the legacy default stream:
//!   an operation on it is ordered after the prior work of every blocking
//!   stream of its context, and work on blocking streams is ordered after
//!   it; streams created with `CU_STREAM_NON_BLOCKING` are not.
//! - **Copies and memsets** change memory at once, when issued, and so do
//!   executed kernels (below): everything a context does to memory happens
//!   in issue order, which is one order a GPU could have run it in (stream
//!   order, event waits and the NULL stream all follow issue order). They
//!   take no device time but are ordered (a copy to the host returns when
//!   its stream reaches it, as does any copy on the NULL stream from the
//!   host).
//! - **Events** record the time their stream reaches them (`max(stream
//!   ready, now)`); they complete when the device clock passes it. Elapsed
//!   times between events are differences of modelled times, hence exact.
//! - **Waiting** (synchronize, event and stream waits) sleeps until the
//!   modelled time, which a kernel's modelled end bounds.
//! - **Memory**: each allocation is a zeroed `Vec<u8>` at a synthetic,
//!   256-byte-aligned device address. Addresses start at
//!   `0x7000_0000_0000`, are never reused by an executor, and are separated
//!   by a guard gap, so a stale or one-past-the-end pointer never aliases a
//!   live allocation. All contexts of an executor together may hold at most
//!   [`SimConfig::memory_bytes`].
//! - **Modules** are PTX text or fatbins with PTX (plain, LZ4 or zstd);
//!   SimGpu reads the kernels' names and parameter layouts from the
//!   `.entry` declarations and keeps the PTX ([`parse_module`]).
//!
//! # Executing kernels
//!
//! At launch, after the launch's checks, SimGpu runs the kernel's PTX with
//! the `fairgpu-ptx` interpreter, synchronously on the worker's thread,
//! against the context's allocations: a global access must lie within one
//! live allocation of the context, else the kernel faults. A module's PTX
//! is parsed at the first launch that needs it; a PTX the interpreter
//! cannot parse does not stop the module from loading, only its kernels
//! from executing. Modules of a VM that load the same PTX text share one
//! copy of it, parsed once; each loaded module has its own module-scope
//! variables. A VM keeps at most 256 MiB of distinct PTX (64 MiB per
//! module): a module beyond still loads, but its kernels cannot execute.
//!
//! - **Timing-only kernels** do not execute: the built-in [`SPIN_KERNEL`],
//!   and kernels configured with `execute = false` (kernels that spin on a
//!   clock, such as the fairness workload's). They change no memory.
//! - **Timing is the cost model's, never the host's**: a kernel's modelled
//!   duration is its configured cost, or for a kernel the cost model does
//!   not list, `executed_base_us` plus its executed instruction count at
//!   `executed_instructions_per_us` ([`SimConfig`]). The kernel is
//!   reserved on the timeline as issued at the moment its launch arrived,
//!   so the host time spent interpreting takes no device time: event
//!   times and [`GpuExecutor::gpu_time_ns`] are the same whether a kernel
//!   executes or not.
//! - **CPU is bounded**: a launch may execute at most
//!   [`SimConfig::max_instructions`] instructions (over all its threads,
//!   with a fixed cost for each block's setup, so that a grid of many tiny
//!   blocks is bounded too).
//!   Executing happens while the worker serves the launch, under its VM's
//!   grant when the daemon schedules the GPU: a launch that executes for
//!   seconds keeps the other VMs' work waiting that long in wall-clock
//!   time (the scheduler sees an overrun), though it is charged only its
//!   modelled duration.
//! - **Errors** map to CUDA errors in one place ([`execution_error`]): an
//!   access outside the allocations (each rounded up to its 256-byte
//!   granule, as a GPU hands out memory: a kernel's access a few bytes
//!   past the end of an array does not fault there either; a read within
//!   [`READ_SLACK`] of an allocation, outside every one, reads zeros, as a
//!   GPU's larger pages make a stencil's halo read harmless) is a sticky
//!   CUDA_ERROR_ILLEGAL_ADDRESS, a misaligned one a sticky
//!   CUDA_ERROR_MISALIGNED_ADDRESS, `trap` a sticky
//!   CUDA_ERROR_LAUNCH_FAILED, an exhausted instruction budget or a barrier
//!   that can never complete a sticky CUDA_ERROR_LAUNCH_TIMEOUT (sticky: the
//!   context fails every later call, as on a GPU, whose memory the kernel
//!   may have half written). PTX the interpreter does not implement fails
//!   the launch with CUDA_ERROR_NOT_SUPPORTED ([`ExecError::CannotExecute`],
//!   whether or not the cost model lists the kernel: `execute = false`
//!   runs it timing-only), not sticky, and a warning in the daemon's log
//!   naming the instruction; if the kernel had already written global
//!   memory when it met the instruction, a sticky CUDA_ERROR_LAUNCH_FAILED
//!   instead. A kernel never silently computes something else than a GPU
//!   would.
//!
//! # Invariants
//!
//! - The executor's [`GpuExecutor::gpu_time_ns`] is exactly the sum of the
//!   modelled durations of its launches; device reservations are disjoint.
//! - Every guest-derived value (image bytes, pointers, sizes, parameter
//!   buffers) is checked; a bad one is an error, never a panic.

mod config;
mod device;
mod image;
mod shared;
#[cfg(test)]
pub(crate) use self::image::tests as image_tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use fairgpu_protocol::cuda::{limit, ParamInfo};
use fairgpu_protocol::Status;
use fairgpu_ptx as ptx;

pub use config::{
    KernelCost, SimConfig, DEFAULT_EXECUTED_BASE_US, DEFAULT_EXECUTED_INSTRUCTIONS_PER_US,
    DEFAULT_MAX_INSTRUCTIONS, MAX_KERNEL_NS, SPIN_KERNEL,
};
pub use device::{SimDevice, DEVICE_FILE_LEN};
pub use image::{parse_image, parse_module, ImageError, KernelDecl, ModuleImage, PtxSource};

use self::config::{Cost, CostModel, KernelModel};
use super::host_memory::{HostCharge, HostMemory, HostMemoryExceeded};
use super::{
    attr, func_attr, ArrayDesc, ArrayId, CtxId, DevPtr, DeviceProps, EventId, ExecError,
    ExecResult, FnId, GpuExecutor, HostData, LaunchConfig, ModId, PhysId, Place, RectCopy,
    StreamId, TexResource, TextureDesc,
};
use fairgpu_protocol::array::ArrayKind;

/// First device address an executor hands out.
const BASE_ADDR: u64 = 0x7000_0000_0000;
/// Where modules' variables are (`cuModuleGetGlobal`): each module that
/// has some gets a slot of [`VARS_SLOT`] bytes of addresses below
/// [`BASE_ADDR`], reused once the module is unloaded or its context
/// destroyed. The slots are the executor's, shared by its contexts, so no
/// two contexts' variables (nor allocations) share an address, as in one
/// process's unified address space on a GPU.
const VARS_BASE: u64 = 0x6000_0000_0000;
/// Addresses per module's variables: more than `ptx::MAX_GLOBALS`.
const VARS_SLOT: u64 = 1 << 28;
const _: () = assert!(VARS_SLOT > fairgpu_ptx::MAX_GLOBALS as u64);
/// How many modules with variables the VM's contexts may hold at once.
const MAX_VAR_SLOTS: u64 = (BASE_ADDR - VARS_BASE) / VARS_SLOT;
// Allocations only grow upwards from BASE_ADDR, so they never meet the
// interpreter's windows for shared, local, parameter and module memory.
const _: () = {
    let windows = [
        ptx::SHARED_WINDOW,
        ptx::LOCAL_WINDOW,
        ptx::PARAM_WINDOW,
        ptx::GLOBALS_BASE,
    ];
    let mut i = 0;
    while i < windows.len() {
        assert!(windows[i] + ptx::WINDOW_SIZE <= BASE_ADDR);
        i += 1;
    }
};
/// Alignment of every allocation.
const ALLOC_ALIGN: u64 = 256;
/// Unused addresses after each allocation.
const GUARD: u64 = 256;
/// How far from an allocation of its context a kernel's read outside every
/// allocation reads zeros instead of faulting. A GPU maps device memory in
/// pages of 64 KiB to 2 MiB, so a read a row before or after an array (a
/// stencil's halo that the kernel then ignores: Rodinia's srad_v2 reads one
/// row before its image) lands in mapped memory there and does not fault;
/// what it reads is whatever lies there, here zeros, never another
/// context's data. Writes outside the granules still fault.
const READ_SLACK: u64 = 64 * 1024;
/// The virtual-memory API's granularity.
const VMM_GRANULARITY: u64 = fairgpu_protocol::cuda::VMM_GRANULARITY;
/// CU_STREAM_NON_BLOCKING.
const STREAM_NON_BLOCKING: u32 = 0x1;
/// CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS.
const EVENT_FLAGS: u32 = 0x7;
/// CU_EVENT_DISABLE_TIMING.
const EVENT_DISABLE_TIMING: u32 = 0x2;
/// Distinct warnings (kernel and cause) logged; later ones are not.
const WARN_NAMES_MAX: usize = 256;
/// Most threads in one block (the device attribute).
const MAX_BLOCK_THREADS: u64 = 1024;
/// Largest block dimensions and grid dimensions (the device attributes).
const MAX_BLOCK_DIM: [u32; 3] = [1024, 1024, 64];
const MAX_GRID_DIM: [u32; 3] = fairgpu_protocol::cuda::MAX_GRID;
/// Most dynamic shared memory per block (the opt-in attribute).
const MAX_SHARED_BYTES: u32 = 232_448;
/// Shared memory per block a launch gets without opting in (the device's
/// MAX_SHARED_MEMORY_PER_BLOCK): a function's default
/// MAX_DYNAMIC_SHARED_SIZE_BYTES is this less its static shared memory.
const DEFAULT_SHARED_BYTES: u32 = 49_152;
/// Bytes of printed output a context holds until the guest takes them
/// (the driver's default CU_LIMIT_PRINTF_FIFO_SIZE); more is dropped.
const PRINTF_FIFO: usize = 1 << 20;
/// Registers per thread a kernel reports at most (the hardware's limit);
/// SimGpu has no register file and reports the PTX's own count up to it.
const MAX_REPORTED_REGS: u32 = 255;
/// Most bytes of distinct PTX text one executor (one VM's worker) keeps
/// for its modules; texts beyond are not kept and their kernels cannot
/// execute. A text loaded again is shared, not kept twice.
const MAX_KEPT_PTX_TOTAL: usize = 256 * 1024 * 1024;
/// CUDA_ERROR_LAUNCH_TIMEOUT.
const LAUNCH_TIMEOUT: Status = Status(702);
/// CUDA_ERROR_MISALIGNED_ADDRESS.
const MISALIGNED_ADDRESS: Status = Status(716);
/// CUDA_ERROR_ILLEGAL_INSTRUCTION: a call to an address that holds no
/// function.
const ILLEGAL_INSTRUCTION: Status = Status(715);
/// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE.
const COOPERATIVE_LAUNCH_TOO_LARGE: Status = Status(720);
/// Bytes of a cooperative launch's grid workspace (`{size, barrier}`).
const GRID_WORKSPACE: u64 = 8;
/// What one multiprocessor holds (the device attributes
/// MAX_THREADS_PER_MULTIPROCESSOR, MAX_SHARED_MEMORY_PER_MULTIPROCESSOR and
/// MAX_BLOCKS_PER_MULTIPROCESSOR).
const SM_THREADS: u64 = 2048;
const SM_SHARED: u64 = 233_472;
const SM_BLOCKS: u64 = 32;
/// Most live blocks a device heap holds (its bookkeeping is host memory):
/// `malloc` gives NULL beyond.
const MAX_HEAP_BLOCKS: usize = 1 << 20;
/// Driver version SimGpu reports.
const DRIVER_VERSION: i32 = 12080;

/// A launchable kernel.
struct Function {
    module: u64,
    name: String,
    params: Vec<ParamInfo>,
    model: KernelModel,
    /// Values set by `cuFuncSetAttribute`, by attribute.
    set: [Option<i32>; func_attr::LAST as usize + 1],
    /// Modelled ns per block of its last launch (the history kernel
    /// slicing predicts from).
    ns_per_block: Option<f64>,
    /// Whether its PTX calls `malloc`/`free`, once known.
    uses_heap: Option<bool>,
    /// Host time its last executed launch took, times the threads it ran
    /// on: about what it would take on one. Whether the next launch is
    /// worth spreading over threads ([`PARALLEL_MIN_NS`]).
    host_ns: Option<u64>,
}

/// A launch runs its blocks on several host threads ([`SimConfig::threads`])
/// if the kernel's previous launch took at least this long on one, and at
/// its first launch (the threads' start, some tens of µs, is paid once per
/// kernel; a few long-running blocks, as a persistent GEMM launches, give
/// no other sign of their length).
const PARALLEL_MIN_NS: u64 = 2_000_000;
/// The host threads `threads = 0` means at most.
const MAX_AUTO_THREADS: usize = 8;

/// `ns` split pro rata: the share of `part` blocks out of `whole`.
fn share_of(ns: u64, part: u64, whole: u64) -> u64 {
    if part >= whole || whole == 0 {
        return ns;
    }
    (u128::from(ns) * u128::from(part) / u128::from(whole)) as u64
}

/// A loaded module.
struct Module {
    /// Kernel name -> parameter layout.
    kernels: HashMap<String, Vec<ParamInfo>>,
    /// The PTX texts its kernels run from; `None` where the executor's
    /// bound on kept PTX left a text out.
    programs: Vec<Option<Program>>,
    /// Kernel name -> index in `programs`.
    source_of: HashMap<String, usize>,
    /// The `NN` of each program's `.target sm_NN` (0: none), by index.
    archs: Vec<u32>,
    /// The kernel table's bytes, charged while the module is loaded.
    _charge: HostCharge,
}

/// A PTX text, shared by every module of the executor that loaded the same
/// text, and parsed once, by the first launch that executes from it. The
/// parsed module is charged to the VM's host memory while it is kept.
struct SharedPtx {
    text: String,
    parsed: OnceLock<Result<(ptx::Module, HostCharge), ptx::Error>>,
    /// The text's bytes, charged while it is kept.
    _charge: HostCharge,
}

/// Why a launch could not get the code it runs.
enum ProgramError {
    /// The PTX does not parse (for every launch from it).
    Ptx(ptx::Error),
    /// The VM's host memory cannot hold the parsed module or the module's
    /// variables (for now: another launch may fit once memory is freed).
    HostMemory(HostMemoryExceeded),
    /// The context holds [`MAX_VAR_SLOTS`] modules with variables.
    TooManyModules,
}

impl SharedPtx {
    /// The parsed module, parsing the text if no launch has yet. A parse
    /// error is kept; a refused charge is not (the parse is retried).
    fn parsed(&self, budget: &Arc<HostMemory>) -> Result<&ptx::Module, ProgramError> {
        if self.parsed.get().is_none() {
            let parsed = match ptx::Module::parse(&self.text) {
                Ok(m) => {
                    let bytes = m.host_bytes() as u64;
                    let charge = budget
                        .charge(bytes, "a parsed PTX module")
                        .map_err(ProgramError::HostMemory)?;
                    Ok((m, charge))
                }
                Err(e) => Err(e),
            };
            // Single-threaded per executor: nothing set it meanwhile.
            let _ = self.parsed.set(parsed);
        }
        match self.parsed.get() {
            Some(Ok((m, _))) => Ok(m),
            Some(Err(e)) => Err(ProgramError::Ptx(e.clone())),
            None => unreachable!("set above"),
        }
    }
}

/// One PTX text of a loaded module, with that module's module-scope
/// variables (created by its first launch, charged to the VM's host
/// memory while the module is loaded).
struct Program {
    ptx: Arc<SharedPtx>,
    /// The module's variables, once a launch or `cuModuleGetGlobal` needed
    /// them, and the address of their bytes in the context's allocations
    /// (None when there are none): between launches the bytes live there,
    /// so copies and memsets reach them as any device memory.
    globals: Option<(ptx::Globals, Option<DevPtr>, HostCharge)>,
}

impl Program {
    fn new(ptx: Arc<SharedPtx>) -> Program {
        Program { ptx, globals: None }
    }

    /// The parsed module (parsing it if no launch has yet), this module's
    /// variables and their address in `allocs`, creating them there (in a
    /// slot of `slots`) the first time.
    fn parsed(
        &mut self,
        budget: &Arc<HostMemory>,
        allocs: &mut BTreeMap<DevPtr, Vec<u8>>,
        slots: &mut VarSlots,
    ) -> Result<(&ptx::Module, &mut ptx::Globals, Option<DevPtr>), ProgramError> {
        let m = self.ptx.parsed(budget)?;
        if self.globals.is_none() {
            let charge = budget
                .charge(m.globals_len() as u64, "a module's variables")
                .map_err(ProgramError::HostMemory)?;
            let mut globals = m.globals();
            let base = if globals.is_empty() {
                None
            } else {
                let base = slots.take().ok_or(ProgramError::TooManyModules)?;
                globals.set_alias(base);
                allocs.insert(base, globals.take_bytes());
                Some(base)
            };
            self.globals = Some((globals, base, charge));
        }
        let (globals, base, _) = self.globals.as_mut().expect("created above");
        Ok((m, globals, *base))
    }

    /// Gives the variables' slot back and drops their bytes.
    fn release(&mut self, allocs: &mut BTreeMap<DevPtr, Vec<u8>>, slots: &mut VarSlots) {
        if let Some((_, Some(base), _)) = self.globals.take() {
            allocs.remove(&base);
            slots.give(base);
        }
    }
}

/// The slots of module variables (see [`VARS_BASE`]).
#[derive(Default)]
struct VarSlots {
    next: u64,
    free: Vec<DevPtr>,
}

impl VarSlots {
    fn take(&mut self) -> Option<DevPtr> {
        if let Some(b) = self.free.pop() {
            return Some(b);
        }
        if self.next >= MAX_VAR_SLOTS {
            return None;
        }
        self.next += 1;
        Some(VARS_BASE + (self.next - 1) * VARS_SLOT)
    }

    fn give(&mut self, base: DevPtr) {
        self.free.push(base);
    }
}

/// The executor's variable slots, locked (by one thread at a time: the
/// executor's; a poisoned lock still holds consistent slots).
fn lock(slots: &Mutex<VarSlots>) -> std::sync::MutexGuard<'_, VarSlots> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for Context {
    /// A context that goes (destroyed, or its VM's guest gone) gives its
    /// modules' variable slots back to the executor.
    fn drop(&mut self) {
        let mut slots = lock(&self.var_slots);
        for m in self.modules.values_mut() {
            for p in m.programs.iter_mut().flatten() {
                p.release(&mut self.allocs, &mut slots);
            }
        }
    }
}

/// The distinct PTX texts an executor keeps, by FNV-1a 64 hash.
struct PtxTexts {
    by_hash: HashMap<u64, Vec<Weak<SharedPtx>>>,
    /// Most bytes kept ([`MAX_KEPT_PTX_TOTAL`]).
    limit: usize,
}

impl PtxTexts {
    fn new(limit: usize) -> PtxTexts {
        PtxTexts {
            by_hash: HashMap::new(),
            limit,
        }
    }

    /// The shared copy of `text`: an existing one if a live module holds
    /// the same text, else a new one if the texts kept stay within the
    /// limit, else `None`.
    fn share(&mut self, text: String, budget: &Arc<HostMemory>) -> Option<Arc<SharedPtx>> {
        let hash = config::fnv1a64(text.as_bytes());
        self.by_hash.retain(|_, v| {
            v.retain(|w| w.strong_count() > 0);
            !v.is_empty()
        });
        if let Some(same) = self
            .by_hash
            .get(&hash)
            .into_iter()
            .flatten()
            .filter_map(Weak::upgrade)
            .find(|p| p.text == text)
        {
            return Some(same);
        }
        let kept: usize = self
            .by_hash
            .values()
            .flatten()
            .filter_map(Weak::upgrade)
            .map(|p| p.text.len())
            .sum();
        if kept.saturating_add(text.len()) > self.limit {
            return None;
        }
        let charge = budget.charge(text.len() as u64, "a PTX text").ok()?;
        let shared = Arc::new(SharedPtx {
            text,
            parsed: OnceLock::new(),
            _charge: charge,
        });
        self.by_hash
            .entry(hash)
            .or_default()
            .push(Arc::downgrade(&shared));
        Some(shared)
    }
}

/// The greatest (numerically lowest) stream priority SimGpu accepts; the
/// least is 0: six levels, 0 to -5 (on a GPU the range is its driver's).
pub const SIM_GREATEST_STREAM_PRIORITY: i32 = -5;

struct Stream {
    /// Device time at which all work issued to the stream is done.
    ready: u64,
    /// Ordered with the NULL stream (not `CU_STREAM_NON_BLOCKING`).
    blocking: bool,
}

struct Event {
    flags: u32,
    /// Device time the event completes; `None` until recorded.
    time: Option<u64>,
}

/// One guest channel's objects.
#[derive(Default)]
struct Context {
    /// Base address -> bytes.
    allocs: BTreeMap<DevPtr, Vec<u8>>,
    /// The sizes `mem_alloc` was asked for, by base address: what copies,
    /// memsets and the accounting use. Their bytes above are that rounded
    /// up to the granule, which kernels may touch (see `mem_alloc`).
    sizes: HashMap<DevPtr, u64>,
    modules: HashMap<u64, Module>,
    functions: HashMap<u64, Function>,
    /// (module, kernel name) -> function, so a kernel has one handle.
    function_ids: HashMap<(u64, String), u64>,
    streams: HashMap<u64, Stream>,
    /// Ready time of the NULL stream.
    null_ready: u64,
    events: HashMap<u64, Event>,
    /// Set by a faulting kernel: every later call of the context fails.
    sticky: Option<ExecError>,
    /// A kernel the runaway guard ended: from its modelled end (device
    /// time) on, the error is sticky. Before it the kernel still runs, as
    /// on a GPU, whose guard fires only when the limit has passed.
    timeout: Option<(u64, ExecError)>,
    /// Addresses of its modules' variables: the executor's slots.
    var_slots: Arc<Mutex<VarSlots>>,
    /// What its kernels printed and the guest has not taken yet (at most
    /// [`PRINTF_FIFO`] bytes), and its charge to the VM's host memory.
    output: Vec<u8>,
    output_charge: Option<HostCharge>,
    /// CUDA arrays: handle -> where its elements lie (an allocation of
    /// this context) and its description.
    arrays: HashMap<u64, SimArray>,
    /// Texture and surface objects: value -> what kernels read through it.
    textures: HashMap<u64, ptx::texture::Texture>,
    surfaces: HashMap<u64, ptx::texture::Image>,
    /// `cuCtxSetLimit` values: the printf FIFO's and the device heap's
    /// sizes (`None`: the driver's defaults).
    printf_fifo: Option<usize>,
    heap_size: Option<u64>,
    /// The device heap, made at the first launch of a kernel that uses it:
    /// its allocation (in `allocs`) and its blocks.
    heap: Option<ptx::heap::DeviceHeap>,
    /// The grid workspace of its cooperative launches (8 bytes, zeroed
    /// before each), made at the first.
    grid_workspace: Option<DevPtr>,
    /// The virtual-memory API: reserved address ranges (base -> bytes),
    /// memory made by `phys_create`, and its mappings. A mapping the
    /// device may access (read-write) holds its memory's bytes in
    /// `allocs`, like an allocation; otherwise they stay in `phys`, and a
    /// kernel's access faults as on a GPU.
    reservations: BTreeMap<DevPtr, u64>,
    phys: HashMap<u64, PhysMem>,
    mappings: BTreeMap<DevPtr, u64>,
}

/// Memory made by `cuMemCreate`.
struct PhysMem {
    size: u64,
    /// Its bytes, unless a read-write mapping holds them in `allocs`.
    bytes: Option<Vec<u8>>,
    /// Where it is mapped.
    mapped_at: Option<DevPtr>,
}

/// A CUDA array: its elements packed densely in an allocation (rows, then
/// slices, layers or faces).
struct SimArray {
    base: DevPtr,
    desc: ArrayDesc,
    kind: ArrayKind,
}

impl SimArray {
    fn image(&self) -> ptx::texture::Image {
        use ptx::texture::Shape;
        let [w, h, d] = self.desc.extent();
        let row = self.desc.byte_extent()[0];
        ptx::texture::Image {
            shape: match self.kind {
                ArrayKind::D1 => Shape::Array1D,
                ArrayKind::D2 => Shape::Array2D,
                ArrayKind::D3 => Shape::Array3D,
                ArrayKind::Layered1D => Shape::Layered1D,
                ArrayKind::Layered2D => Shape::Layered2D,
                ArrayKind::Cubemap => Shape::Cubemap,
                ArrayKind::LayeredCubemap => Shape::LayeredCubemap,
            },
            base: self.base,
            // Validated at creation.
            format: ptx::texture::ChannelFormat::from_cuda(self.desc.format)
                .unwrap_or(ptx::texture::ChannelFormat::U8),
            channels: self.desc.channels,
            width: w,
            height: h,
            depth: d,
            row_pitch: row,
            slice_pitch: row.saturating_mul(h),
        }
    }
}

/// The texels a texture over linear or pitched device memory reads.
fn memory_image(res: &TexResource) -> ExecResult<ptx::texture::Image> {
    use ptx::texture::{ChannelFormat, Image, Shape};
    let channel =
        |format| ChannelFormat::from_cuda(format).ok_or(ExecError::Invalid("texture format"));
    let (shape, base, format, channels, width, height, pitch) = match *res {
        TexResource::Array(_) => return Err(ExecError::Invalid("not a memory resource")),
        TexResource::Linear {
            ptr,
            format,
            channels,
            bytes,
        } => {
            let f = channel(format)?;
            let e = u64::from(f.bytes()) * u64::from(channels);
            (Shape::Linear, ptr, f, channels, bytes / e.max(1), 1, bytes)
        }
        TexResource::Pitch2D {
            ptr,
            format,
            channels,
            width,
            height,
            pitch,
        } => (
            Shape::Pitch2D,
            ptr,
            channel(format)?,
            channels,
            width,
            height,
            pitch,
        ),
    };
    Ok(Image {
        shape,
        base,
        format,
        channels,
        width,
        height,
        depth: 1,
        row_pitch: pitch,
        slice_pitch: pitch.saturating_mul(height),
    })
}

/// One side of a rectangular copy, resolved: the allocation holding it
/// (`None`: the guest's packed bytes), the offset of its first byte there,
/// and its row pitch and rows per slice.
#[derive(Clone, Copy)]
struct RectLayout {
    alloc: Option<DevPtr>,
    first: usize,
    pitch: u64,
    rows: u64,
}

fn rect_side(c: &Context, side: &super::RectSide, extent: [u64; 3]) -> ExecResult<RectLayout> {
    let [w, h, d] = extent;
    let (base, pitch, rows) = match side.place {
        Place::Host => {
            return Ok(RectLayout {
                alloc: None,
                first: 0,
                pitch: w,
                rows: h,
            })
        }
        Place::Device { ptr, pitch, height } => (ptr, pitch, height),
        Place::Array(a) => {
            let arr = c.arrays.get(&a.0).ok_or(ExecError::Invalid("array"))?;
            let [row, rows, _] = arr.desc.byte_extent();
            (arr.base, row, rows)
        }
    };
    let bad = || ExecError::Invalid("copy range");
    let [x, y, z] = side.pos;
    let first = z
        .checked_mul(rows)
        .and_then(|r| r.checked_add(y))
        .and_then(|r| r.checked_mul(pitch))
        .and_then(|o| o.checked_add(x))
        .and_then(|o| o.checked_add(base))
        .ok_or_else(bad)?;
    // The last row's end, relative to the first byte.
    let span = (d - 1)
        .checked_mul(rows)
        .and_then(|r| r.checked_add(h - 1))
        .and_then(|r| r.checked_mul(pitch))
        .and_then(|o| o.checked_add(w))
        .ok_or_else(bad)?;
    let (alloc, off) = c.locate(first, span)?;
    Ok(RectLayout {
        alloc: Some(alloc),
        first: off,
        pitch,
        rows,
    })
}

/// The rows of a copy: their length, and each row's (source, destination)
/// offsets, in order. Rows that follow each other without a gap on both
/// sides are one row. The offsets lie within the spans `rect_side` found
/// in their allocations (or within the packed host bytes), so they do not
/// overflow.
fn rect_rows(
    src: &RectLayout,
    dst: &RectLayout,
    extent: [u64; 3],
) -> ExecResult<(usize, impl Iterator<Item = (usize, usize)>)> {
    let [w, h, d] = extent;
    let dense = |l: &RectLayout| l.pitch == w && (d == 1 || l.rows == h);
    let (n, h, d) = if dense(src) && dense(dst) {
        (usize_len(w.saturating_mul(h).saturating_mul(d))?, 1, 1)
    } else {
        (usize_len(w)?, h, d)
    };
    let at = |l: &RectLayout, y: u64, z: u64| l.first + ((z * l.rows + y) * l.pitch) as usize;
    let (s, t) = (*src, *dst);
    Ok((
        n,
        (0..d).flat_map(move |z| (0..h).map(move |y| (at(&s, y, z), at(&t, y, z)))),
    ))
}

fn sampler(t: &TextureDesc) -> ExecResult<ptx::texture::Sampler> {
    use fairgpu_protocol::array::{
        TRSF_NORMALIZED_COORDINATES, TRSF_READ_AS_INTEGER, TRSF_SEAMLESS_CUBEMAP, TRSF_SRGB,
    };
    let mode = |m: u32| {
        ptx::texture::AddressMode::from_cuda(m).ok_or(ExecError::Invalid("texture address mode"))
    };
    Ok(ptx::texture::Sampler {
        address: [
            mode(t.address[0])?,
            mode(t.address[1])?,
            mode(t.address[2])?,
        ],
        linear: t.filter == 1,
        normalized_coords: t.flags & TRSF_NORMALIZED_COORDINATES != 0,
        read_normalized: t.flags & TRSF_READ_AS_INTEGER == 0,
        srgb: t.flags & TRSF_SRGB != 0,
        seamless_cubemap: t.flags & TRSF_SEAMLESS_CUBEMAP != 0,
        border: t.border,
    })
}

impl Context {
    /// Function `f`, the module it is in, and the index of the PTX text it
    /// runs from in that module (None when no kept text defines it).
    fn function(&self, f: FnId) -> ExecResult<(&Function, &Module, Option<usize>)> {
        let func = self
            .functions
            .get(&f.0)
            .ok_or(ExecError::Invalid("function"))?;
        let module = self
            .modules
            .get(&func.module)
            .ok_or(ExecError::Invalid("module"))?;
        Ok((func, module, module.source_of.get(&func.name).copied()))
    }

    /// The allocation holding `[ptr, ptr + len)`: its base and the offset of
    /// `ptr` in it.
    fn locate(&self, ptr: DevPtr, len: u64) -> ExecResult<(DevPtr, usize)> {
        let bad = ExecError::Invalid("device range outside the context's allocations");
        let (&base, bytes) = self.allocs.range(..=ptr).next_back().ok_or(bad.clone())?;
        let size = self.sizes.get(&base).copied().unwrap_or(bytes.len() as u64);
        let off = ptr - base;
        match off.checked_add(len) {
            Some(end) if end <= size => Ok((base, off as usize)),
            _ => Err(bad),
        }
    }

    fn bytes(&self, ptr: DevPtr, len: usize) -> ExecResult<&[u8]> {
        let (base, off) = self.locate(ptr, len as u64)?;
        self.allocs
            .get(&base)
            .and_then(|b| b.get(off..off + len))
            .ok_or(ExecError::Invalid("device range"))
    }

    fn bytes_mut(&mut self, ptr: DevPtr, len: usize) -> ExecResult<&mut [u8]> {
        let (base, off) = self.locate(ptr, len as u64)?;
        self.allocs
            .get_mut(&base)
            .and_then(|b| b.get_mut(off..off + len))
            .ok_or(ExecError::Invalid("device range"))
    }

    fn stream(&self, s: StreamId) -> ExecResult<&Stream> {
        self.streams.get(&s.0).ok_or(ExecError::Invalid("stream"))
    }

    /// When work issued now to `s` may start (no state change).
    fn ready(&self, s: Option<StreamId>) -> ExecResult<u64> {
        Ok(match s {
            // Legacy default stream: after every blocking stream's work.
            None => self
                .streams
                .values()
                .filter(|st| st.blocking)
                .map(|st| st.ready)
                .fold(self.null_ready, u64::max),
            Some(s) => {
                let st = self.stream(s)?;
                if st.blocking {
                    st.ready.max(self.null_ready)
                } else {
                    st.ready
                }
            }
        })
    }

    /// Issues an operation to `s`: returns when it may start and makes the
    /// stream's later work follow it.
    fn enqueue(&mut self, s: Option<StreamId>) -> ExecResult<u64> {
        let t0 = self.ready(s)?;
        self.set_ready(s, t0)?;
        Ok(t0)
    }

    fn set_ready(&mut self, s: Option<StreamId>, t: u64) -> ExecResult<()> {
        match s {
            None => self.null_ready = t,
            Some(s) => {
                self.streams
                    .get_mut(&s.0)
                    .ok_or(ExecError::Invalid("stream"))?
                    .ready = t
            }
        }
        Ok(())
    }

    /// When all work of the context is done.
    fn all_ready(&self) -> u64 {
        self.streams
            .values()
            .map(|st| st.ready)
            .fold(self.null_ready, u64::max)
    }

    fn event(&self, e: EventId) -> ExecResult<&Event> {
        self.events.get(&e.0).ok_or(ExecError::Invalid("event"))
    }

    /// Bytes of the guest's allocations (module variables, below
    /// [`BASE_ADDR`], are charged to host memory instead).
    fn allocated(&self) -> u64 {
        let allocations: u64 = self
            .allocs
            .range(BASE_ADDR..)
            .filter(|(base, _)| !self.mappings.contains_key(base))
            .map(|(base, b)| self.sizes.get(base).copied().unwrap_or(b.len() as u64))
            .sum();
        allocations + self.phys.values().map(|p| p.size).sum::<u64>()
    }
}

/// The SimGpu executor of one worker. See the module documentation for the
/// model.
pub struct SimGpu {
    props: DeviceProps,
    memory_bytes: u64,
    costs: CostModel,
    device: SimDevice,
    contexts: HashMap<u64, Context>,
    next_id: u64,
    next_addr: u64,
    /// The addresses of every context's module variables.
    var_slots: Arc<Mutex<VarSlots>>,
    /// Bytes allocated across all contexts.
    used: u64,
    gpu_time_ns: u64,
    /// Bounds on one executed launch.
    limits: ptx::Limits,
    /// Host threads one launch's blocks may run on ([`SimConfig::threads`]).
    threads: usize,
    /// The PTX texts of every context's modules.
    ptx_texts: PtxTexts,
    executed: Executed,
    warned: HashSet<String>,
    /// [`SimConfig::sticky_poisons_process`].
    poison_process: bool,
    /// The sticky error that poisoned every context, with `poison_process`.
    poisoned: Option<ExecError>,
    /// The VM's host-memory budget: parsed modules and module variables.
    host_memory: Arc<HostMemory>,
    /// The runaway guard: most device time one launch may take, ns.
    request_limit: Option<u64>,
    /// Launches the runaway guard ended.
    runaways: u64,
}

/// What the executor's executed kernels did, summed over its launches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Executed {
    /// Launches that executed to completion.
    pub launches: u64,
    /// Instructions they executed, summed over threads.
    pub instructions: u64,
    /// Threads they ran.
    pub threads: u64,
    /// Host time spent executing them, ns.
    pub host_ns: u64,
    /// Those whose blocks ran on several host threads.
    pub parallel_launches: u64,
}

impl fmt::Debug for SimGpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimGpu")
            .field("name", &self.props.name)
            .field("memory_bytes", &self.memory_bytes)
            .field("used", &self.used)
            .field("contexts", &self.contexts.len())
            .field("gpu_time_ns", &self.gpu_time_ns)
            .field("device", &self.device)
            .finish()
    }
}

/// A stable UUID from the device name (FNV-1a, version 8 "custom").
fn uuid_from_name(name: &str) -> [u8; 16] {
    let fnv = |seed: u64| {
        name.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let mut u = [0u8; 16];
    u[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    u[8..].copy_from_slice(&fnv(0x6c62_272e_07bb_0142).to_be_bytes());
    u[6] = (u[6] & 0x0f) | 0x80;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

/// CUdevice_attribute values of an H100-like device.
fn attributes(sm_count: u32) -> Vec<(i32, i32)> {
    let sm = i32::try_from(sm_count).unwrap_or(i32::MAX);
    vec![
        (attr::MAX_THREADS_PER_BLOCK, 1024),
        (2, 1024),       // MAX_BLOCK_DIM_X
        (3, 1024),       // MAX_BLOCK_DIM_Y
        (4, 64),         // MAX_BLOCK_DIM_Z
        (5, i32::MAX),   // MAX_GRID_DIM_X
        (6, 65535),      // MAX_GRID_DIM_Y
        (7, 65535),      // MAX_GRID_DIM_Z
        (8, 49152),      // MAX_SHARED_MEMORY_PER_BLOCK
        (9, 65536),      // TOTAL_CONSTANT_MEMORY
        (10, 32),        // WARP_SIZE
        (11, i32::MAX),  // MAX_PITCH
        (12, 65536),     // MAX_REGISTERS_PER_BLOCK
        (13, 1_980_000), // CLOCK_RATE (kHz)
        (14, 512),       // TEXTURE_ALIGNMENT
        (15, 1),         // GPU_OVERLAP
        (attr::MULTIPROCESSOR_COUNT, sm),
        (17, 0), // KERNEL_EXEC_TIMEOUT
        (18, 0), // INTEGRATED
        (19, 1), // CAN_MAP_HOST_MEMORY
        (20, 0), // COMPUTE_MODE (default)
        // Texture and surface limits, an H100's.
        (21, 131_072),           // MAXIMUM_TEXTURE1D_WIDTH
        (22, 131_072),           // MAXIMUM_TEXTURE2D_WIDTH
        (23, 65_536),            // MAXIMUM_TEXTURE2D_HEIGHT
        (24, 16_384),            // MAXIMUM_TEXTURE3D_WIDTH
        (25, 16_384),            // MAXIMUM_TEXTURE3D_HEIGHT
        (26, 16_384),            // MAXIMUM_TEXTURE3D_DEPTH
        (27, 32_768),            // MAXIMUM_TEXTURE2D_LAYERED_WIDTH
        (28, 32_768),            // MAXIMUM_TEXTURE2D_LAYERED_HEIGHT
        (29, 2048),              // MAXIMUM_TEXTURE2D_LAYERED_LAYERS
        (30, 512),               // SURFACE_ALIGNMENT
        (42, 32_768),            // MAXIMUM_TEXTURE1D_LAYERED_WIDTH
        (43, 2048),              // MAXIMUM_TEXTURE1D_LAYERED_LAYERS
        (45, 32_768),            // MAXIMUM_TEXTURE2D_GATHER_WIDTH
        (46, 32_768),            // MAXIMUM_TEXTURE2D_GATHER_HEIGHT
        (51, 32),                // TEXTURE_PITCH_ALIGNMENT
        (52, 32_768),            // MAXIMUM_TEXTURECUBEMAP_WIDTH
        (53, 32_768),            // MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH
        (54, 2046),              // MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS
        (55, 32_768),            // MAXIMUM_SURFACE1D_WIDTH
        (56, 131_072),           // MAXIMUM_SURFACE2D_WIDTH
        (57, 65_536),            // MAXIMUM_SURFACE2D_HEIGHT
        (58, 16_384),            // MAXIMUM_SURFACE3D_WIDTH
        (59, 16_384),            // MAXIMUM_SURFACE3D_HEIGHT
        (60, 16_384),            // MAXIMUM_SURFACE3D_DEPTH
        (61, 32_768),            // MAXIMUM_SURFACE1D_LAYERED_WIDTH
        (62, 2048),              // MAXIMUM_SURFACE1D_LAYERED_LAYERS
        (63, 32_768),            // MAXIMUM_SURFACE2D_LAYERED_WIDTH
        (64, 32_768),            // MAXIMUM_SURFACE2D_LAYERED_HEIGHT
        (65, 2048),              // MAXIMUM_SURFACE2D_LAYERED_LAYERS
        (66, 32_768),            // MAXIMUM_SURFACECUBEMAP_WIDTH
        (67, 32_768),            // MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH
        (68, 2046),              // MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS
        (70, 131_072),           // MAXIMUM_TEXTURE2D_LINEAR_WIDTH
        (71, 65_000),            // MAXIMUM_TEXTURE2D_LINEAR_HEIGHT
        (72, 2_097_120),         // MAXIMUM_TEXTURE2D_LINEAR_PITCH
        (31, 1),                 // CONCURRENT_KERNELS
        (32, 0),                 // ECC_ENABLED
        (33, 0),                 // PCI_BUS_ID
        (34, 0),                 // PCI_DEVICE_ID
        (36, 2_619_000),         // MEMORY_CLOCK_RATE (kHz)
        (37, 5120),              // GLOBAL_MEMORY_BUS_WIDTH
        (38, 52_428_800),        // L2_CACHE_SIZE
        (39, SM_THREADS as i32), // MAX_THREADS_PER_MULTIPROCESSOR
        (40, 2),                 // ASYNC_ENGINE_COUNT
        (41, 1),                 // UNIFIED_ADDRESSING
        (50, 0),                 // PCI_DOMAIN_ID
        (attr::COMPUTE_CAPABILITY_MAJOR, 9),
        (attr::COMPUTE_CAPABILITY_MINOR, 0),
        (78, 1),                 // STREAM_PRIORITIES_SUPPORTED
        (81, SM_SHARED as i32),  // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        (82, 65536),             // MAX_REGISTERS_PER_MULTIPROCESSOR
        (83, 1),                 // MANAGED_MEMORY (mirrored by the guest library)
        (89, 0),                 // CONCURRENT_MANAGED_ACCESS
        (95, 1),                 // COOPERATIVE_LAUNCH (blocks interleaved, all resident)
        (120, 0),                // CLUSTER_LAUNCH (no thread-block clusters)
        (84, 0),                 // MULTI_GPU_BOARD
        (97, 232_448),           // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        (106, SM_BLOCKS as i32), // MAX_BLOCKS_PER_MULTIPROCESSOR
        (111, 1024),             // RESERVED_SHARED_MEMORY_PER_BLOCK (the interpreter's)
        // Persisting-L2 set-aside (three quarters of L2) and the largest
        // access policy window: hints the guest library accepts and the
        // model ignores, as a cache may.
        (108, 39_321_600),  // MAX_PERSISTING_L2_CACHE_SIZE
        (109, 134_213_632), // MAX_ACCESS_POLICY_WINDOW_SIZE
        (115, 1),           // MEMORY_POOLS_SUPPORTED (the guest library's pools)
        (102, 1),           // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED (whole-memory mappings)
        (107, 1),           // GENERIC_COMPRESSION_SUPPORTED (cuMemCreate's, a no-op here)
        (119, 1),           // MEMPOOL_SUPPORTED_HANDLE_TYPES: POSIX descriptors (IPC in a VM)
        (103, 1),           // HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED (cuMemCreate's, in a VM)
        (69, 1 << 28),      // MAXIMUM_TEXTURE1D_LINEAR_WIDTH (an H100's)
        // The interpreter stores a conditional's value at its handle.
        (fairgpu_protocol::cuda::ATTR_GUEST_GRAPH_CONDITIONALS, 1),
        // PTX only: a module of machine code alone does not load.
        (fairgpu_protocol::cuda::ATTR_EXECUTES_PTX_ONLY, 1),
    ]
}

impl SimGpu {
    /// An executor modelling the device `cfg` describes, on the shared
    /// timeline `device`. Fails if `cfg` does not validate.
    pub fn new(cfg: SimConfig, device: SimDevice) -> ExecResult<SimGpu> {
        cfg.validate()
            .map_err(|e| ExecError::NoDevice(format!("invalid [sim] configuration: {e}")))?;
        Ok(SimGpu {
            props: DeviceProps {
                uuid: uuid_from_name(&cfg.name),
                name: cfg.name.clone(),
                total_mem: cfg.memory_bytes,
                driver_version: DRIVER_VERSION,
                attributes: attributes(cfg.sm_count),
            },
            memory_bytes: cfg.memory_bytes,
            costs: CostModel::new(&cfg),
            device,
            contexts: HashMap::new(),
            next_id: 1,
            next_addr: BASE_ADDR,
            var_slots: Arc::default(),
            used: 0,
            gpu_time_ns: 0,
            limits: ptx::Limits {
                max_instructions: cfg.max_instructions,
                ..ptx::Limits::default()
            },
            threads: match cfg.threads {
                0 => std::thread::available_parallelism()
                    .map_or(1, usize::from)
                    .min(MAX_AUTO_THREADS),
                n => n as usize,
            },
            executed: Executed::default(),
            ptx_texts: PtxTexts::new(MAX_KEPT_PTX_TOTAL),
            warned: HashSet::new(),
            poison_process: cfg.sticky_poisons_process,
            poisoned: None,
            request_limit: None,
            runaways: 0,
            host_memory: HostMemory::unlimited(),
        })
    }

    /// Charges what the guests make this executor hold on the host (parsed
    /// modules, module variables) to `budget`, the VM's.
    pub fn with_host_memory(mut self, budget: Arc<HostMemory>) -> SimGpu {
        self.host_memory = budget;
        self
    }

    /// What this executor's executed kernels did so far.
    pub fn executed(&self) -> Executed {
        self.executed
    }

    /// The shared device timeline this executor runs on.
    pub fn sim_device(&self) -> &SimDevice {
        &self.device
    }

    /// The device time an event was recorded at (`None` if never recorded);
    /// for diagnostics and tests.
    pub fn event_time_ns(&self, ctx: CtxId, e: EventId) -> ExecResult<Option<u64>> {
        Ok(self.ctx(ctx)?.event(e)?.time)
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Makes `err` sticky for context `ctx`, and for the whole process
    /// when sticky errors poison it ([`SimConfig::sticky_poisons_process`]).
    fn set_sticky(&mut self, ctx: CtxId, err: &ExecError) {
        if let Some(c) = self.contexts.get_mut(&ctx.0) {
            c.sticky = Some(err.clone());
        }
        if self.poison_process && self.poisoned.is_none() {
            self.poisoned = Some(err.clone());
        }
    }

    fn ctx(&self, ctx: CtxId) -> ExecResult<&Context> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        let c = self
            .contexts
            .get(&ctx.0)
            .ok_or(ExecError::Invalid("context"))?;
        match (&c.sticky, &c.timeout) {
            (Some(e), _) => Err(e.clone()),
            (None, Some((at, e))) if self.device.now_ns() >= *at => Err(e.clone()),
            (None, _) => Ok(c),
        }
    }

    fn ctx_mut(&mut self, ctx: CtxId) -> ExecResult<&mut Context> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        // A runaway's timeout that has come is sticky from now on.
        let due = self.contexts.get(&ctx.0).and_then(|c| match &c.timeout {
            Some((at, e)) if c.sticky.is_none() && self.device.now_ns() >= *at => Some(e.clone()),
            _ => None,
        });
        if let Some(e) = due {
            self.set_sticky(ctx, &e);
        }
        let c = self
            .contexts
            .get_mut(&ctx.0)
            .ok_or(ExecError::Invalid("context"))?;
        match &c.sticky {
            Some(e) => Err(e.clone()),
            None => Ok(c),
        }
    }

    /// Waits until device time `t`, for context `ctx`: then fails if the
    /// context failed meanwhile (a runaway's timeout came).
    fn wait_for(&mut self, ctx: CtxId, t: u64) -> ExecResult<()> {
        self.device.wait_until(t);
        self.ctx_mut(ctx).map(drop)
    }

    /// Logs `msg` about kernel `name` once per distinct `(name, cause)`, for
    /// at most [`WARN_NAMES_MAX`] of them: guests trigger these.
    fn warn_once(&mut self, name: &str, cause: &str, msg: &str) {
        if self.warned.len() < WARN_NAMES_MAX && self.warned.insert(format!("{name}\0{cause}")) {
            tracing::warn!(kernel = name, cause, "{msg}");
        }
    }

    /// Runs kernel `f` of context `ctx` to completion; the error is the
    /// guest's (see [`execution_error`]).
    /// Charges the context's printed output to the VM's host memory; what
    /// does not fit the budget is dropped.
    /// Makes the context's device heap if it has none: an allocation of
    /// the heap's size (the worker charged it to the VM's quota), or, when
    /// the device cannot hold it, an empty heap whose `malloc` gives NULL.
    fn make_heap(&mut self, ctx: CtxId) -> ExecResult<()> {
        let c = self.ctx(ctx)?;
        if c.heap.is_some() {
            return Ok(());
        }
        let size = c.heap_size.unwrap_or(limit::DEFAULT_HEAP);
        let (base, heap) = match self.mem_alloc(ctx, size.max(1)) {
            Ok(base) => (base, ptx::heap::Heap::new(size, MAX_HEAP_BLOCKS)),
            Err(e) => {
                tracing::warn!(bytes = size, error = %e, "no room for the device heap: device malloc gives NULL");
                (0, ptx::heap::Heap::new(0, 0))
            }
        };
        let heap = ptx::heap::DeviceHeap { base, heap };
        self.ctx_mut(ctx)?.heap = Some(heap);
        Ok(())
    }

    /// The context's grid workspace for a cooperative launch (made at the
    /// first), zeroed: cooperative groups' grid barrier counts there.
    fn grid_workspace(&mut self, ctx: CtxId) -> ExecResult<DevPtr> {
        let at = match self.ctx(ctx)?.grid_workspace {
            Some(a) => a,
            None => {
                let a = self.mem_alloc(ctx, GRID_WORKSPACE)?;
                self.ctx_mut(ctx)?.grid_workspace = Some(a);
                a
            }
        };
        if let Some(b) = self.ctx_mut(ctx)?.allocs.get_mut(&at) {
            b.fill(0);
        }
        Ok(at)
    }

    /// A cooperative launch must fit on the device at once: its blocks
    /// at most what the multiprocessors hold of its geometry (threads in
    /// whole warps, shared memory and blocks per multiprocessor, as the
    /// occupancy calculator counts them).
    fn check_resident(&mut self, ctx: CtxId, f: FnId, cfg: &LaunchConfig) -> ExecResult<()> {
        let static_shared = self.kernel_info(ctx, f).map_or(0, |i| i.static_shared);
        let threads: u64 = cfg.block.iter().map(|&b| u64::from(b)).product();
        let warps = threads.div_ceil(32) * 32;
        let smem = u64::from(static_shared) + u64::from(cfg.shared_mem);
        let by_threads = SM_THREADS / warps.max(1);
        let by_shared = SM_SHARED.checked_div(smem).unwrap_or(u64::MAX);
        let per_sm = by_threads.min(by_shared).min(SM_BLOCKS);
        // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT.
        let sms = self.props.attribute(16).unwrap_or(0).max(0) as u64;
        let resident = per_sm * sms;
        if cfg.blocks() > resident {
            return Err(ExecError::Driver {
                call: "cuLaunchCooperativeKernel",
                status: COOPERATIVE_LAUNCH_TOO_LARGE,
            });
        }
        Ok(())
    }

    fn charge_output(&mut self, ctx: CtxId, budget: &Arc<HostMemory>) {
        let Some(c) = self.contexts.get_mut(&ctx.0) else {
            return;
        };
        let want = c.output.len() as u64;
        let charge = c.output_charge.get_or_insert_with(|| budget.empty());
        if charge.bytes() != want && charge.resize(want, "printed output").is_err() {
            let kept = usize::try_from(charge.bytes())
                .unwrap_or(0)
                .min(c.output.len());
            c.output.truncate(kept);
            c.output.shrink_to(kept);
        }
    }

    /// The `NN` of the `.target sm_NN` of the PTX function `f` runs from:
    /// the code SimGpu executes for it. [`image::SIM_ARCH`] when the text
    /// names no target.
    fn function_arch(&self, ctx: CtxId, f: FnId) -> ExecResult<u32> {
        let (_, module, source) = self.ctx(ctx)?.function(f)?;
        let arch = source
            .and_then(|i| module.archs.get(i))
            .copied()
            .unwrap_or(0);
        Ok(if arch == 0 { image::SIM_ARCH } else { arch })
    }

    /// What kernel `f` needs of the device, from its parsed PTX (parsing it
    /// if no launch has yet, charged as a launch's parse is).
    fn kernel_info(&mut self, ctx: CtxId, f: FnId) -> ExecResult<ptx::KernelInfo> {
        let budget = self.host_memory.clone();
        let (func, module, source) = self.ctx(ctx)?.function(f)?;
        let name = func.name.clone();
        let cannot = |reason: String| ExecError::CannotExecute {
            kernel: name.clone(),
            reason,
        };
        let program = source
            .and_then(|i| module.programs.get(i))
            .and_then(Option::as_ref)
            .ok_or_else(|| cannot("its PTX was not kept".into()))?;
        match program.ptx.parsed(&budget) {
            Ok(m) => m
                .kernel_info(&name)
                .ok_or_else(|| cannot("its PTX does not define it".into())),
            Err(ProgramError::Ptx(e)) => {
                // Said here too: a program that asks for the kernel's
                // attributes (occupancy, cudaFuncGetAttributes) first may
                // stop at that error and never launch it.
                let reason = e.to_string();
                let msg = format!(
                    "SimGpu cannot execute this kernel: {reason}; its attribute queries and launches fail"
                );
                self.warn_once(&name, &reason, &msg);
                Err(cannot(reason))
            }
            Err(ProgramError::HostMemory(e)) => Err(ExecError::HostMemory(e)),
            Err(ProgramError::TooManyModules) => Err(too_many_modules()),
        }
    }

    /// Most dynamic shared memory a launch of `f` may ask for: what
    /// `cuFuncSetAttribute` set, else the default less the kernel's static
    /// shared memory (the whole default if its PTX cannot be parsed: its
    /// launch fails for that reason, or it is timing-only).
    fn max_dynamic_shared(&mut self, ctx: CtxId, f: FnId) -> ExecResult<u32> {
        let func = self
            .ctx(ctx)?
            .functions
            .get(&f.0)
            .ok_or(ExecError::Invalid("function"))?;
        if let Some(v) = func.set[func_attr::MAX_DYNAMIC_SHARED_SIZE_BYTES as usize] {
            return Ok(u32::try_from(v).unwrap_or(0));
        }
        Ok(match self.kernel_info(ctx, f) {
            Ok(info) => DEFAULT_SHARED_BYTES.saturating_sub(info.static_shared),
            Err(ExecError::CannotExecute { .. }) => DEFAULT_SHARED_BYTES,
            Err(e) => return Err(e),
        })
    }

    fn execute(
        &mut self,
        ctx: CtxId,
        f: FnId,
        cfg: &LaunchConfig,
        params: &[u8],
    ) -> ExecResult<ptx::RunStats> {
        check_geometry(cfg)?;
        if self.function_uses_heap(ctx, f) {
            self.make_heap(ctx)?;
        }
        let workspace = match cfg.options.cooperative {
            true => Some(self.grid_workspace(ctx)?),
            false => None,
        };
        let limits = self.limits;
        let most_threads = self.threads;
        let budget = self.host_memory.clone();
        let started = Instant::now();
        let c = self.ctx_mut(ctx)?;
        let func = c
            .functions
            .get(&f.0)
            .ok_or(ExecError::Invalid("function"))?;
        let name = func.name.clone();
        let blocks = cfg
            .part
            .map_or(cfg.grid, |p| p.extent)
            .iter()
            .map(|&v| u64::from(v))
            .product::<u64>();
        // Spread over threads: a kernel that took a while last time, or a
        // first launch.
        let threads = match func.host_ns {
            _ if most_threads < 2 || blocks < 2 || workspace.is_some() => 1,
            Some(ns) if ns < PARALLEL_MIN_NS => 1,
            _ => most_threads,
        };
        let module = c
            .modules
            .get_mut(&func.module)
            .ok_or(ExecError::Invalid("module"))?;
        let dims = ptx::Dims {
            grid: cfg.grid,
            block: cfg.block,
            shared_bytes: cfg.shared_mem,
            part: cfg.part.map(|p| ptx::Part {
                offset: p.offset,
                extent: p.extent,
            }),
            cooperative: workspace,
        };
        let mut memory = Allocations {
            allocs: &mut c.allocs,
            textures: &c.textures,
            surfaces: &c.surfaces,
            heap: c.heap.as_mut(),
            wrote: false,
        };
        let slots = &c.var_slots;
        let output = &mut c.output;
        let mut used_threads = 1usize;
        let printf_fifo = c.printf_fifo.unwrap_or(PRINTF_FIFO);
        let ran = match module
            .source_of
            .get(&name)
            .and_then(|&i| module.programs.get_mut(i))
            .and_then(Option::as_mut)
        {
            None => Err(ptx::Error::Unsupported {
                what: format!(
                    "its PTX was not kept (a module keeps at most {} MiB of PTX, a VM {} MiB, within its host memory)",
                    image::MAX_KEPT_PTX >> 20,
                    MAX_KEPT_PTX_TOTAL >> 20
                ),
            }),
            Some(program) => match program.parsed(&budget, memory.allocs, &mut lock(slots)) {
                Err(ProgramError::Ptx(e)) => Err(e),
                Err(ProgramError::HostMemory(e)) => {
                    tracing::debug!(kernel = %name, error = %e, "launch refused");
                    return Err(ExecError::HostMemory(e));
                }
                Err(ProgramError::TooManyModules) => return Err(too_many_modules()),
                Ok((m, globals, base)) => {
                    // The variables' bytes are the kernel's while it runs
                    // (at their own addresses and at `base`, through the
                    // alias), and the context's memory again after.
                    let lent = match base {
                        None => Ok(()),
                        Some(b) => match memory.allocs.remove(&b).map(|v| globals.put_bytes(v)) {
                            Some(Ok(())) => Ok(()),
                            Some(Err(v)) => {
                                memory.allocs.insert(b, v);
                                Err(())
                            }
                            None => Err(()),
                        },
                    };
                    match lent {
                        Err(()) => Err(ptx::Error::BadLaunch("the module's variables are missing".into())),
                        Ok(()) => {
                            let shared = match threads > 1 && m.kernel_runs_in_parallel(&name) {
                                true => shared::SharedAllocs::new(
                                    &mut *memory.allocs,
                                    memory.textures,
                                    memory.surfaces,
                                ),
                                false => None,
                            };
                            let ran = match shared {
                                Some(shared) => {
                                    let ran = m.run_parallel(
                                        globals, &name, &dims, params, &shared, &limits, threads,
                                    );
                                    memory.wrote |= shared.wrote();
                                    used_threads = threads;
                                    ran
                                }
                                None => m.run_with_output(
                                    globals,
                                    &name,
                                    &dims,
                                    params,
                                    &mut memory,
                                    &limits,
                                    output,
                                    printf_fifo,
                                ),
                            };
                            if let Some(b) = base {
                                memory.allocs.insert(b, globals.take_bytes());
                            }
                            ran
                        }
                    }
                }
            },
        };
        let wrote = memory.wrote;
        self.charge_output(ctx, &budget);
        match ran {
            Ok(stats) => {
                let host_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                if let Some(func) = self
                    .contexts
                    .get_mut(&ctx.0)
                    .and_then(|c| c.functions.get_mut(&f.0))
                {
                    func.host_ns = Some(host_ns.saturating_mul(used_threads as u64));
                }
                tracing::debug!(
                    kernel = %name,
                    host_threads = used_threads,
                    threads = stats.threads,
                    instructions = stats.instructions,
                    host_us = host_ns / 1000,
                    instructions_per_s = stats.instructions.saturating_mul(1_000_000_000) / host_ns.max(1),
                    "kernel executed"
                );
                let e = &mut self.executed;
                e.launches += 1;
                e.instructions = e.instructions.saturating_add(stats.instructions);
                e.threads = e.threads.saturating_add(stats.threads);
                e.host_ns = e.host_ns.saturating_add(host_ns);
                e.parallel_launches += u64::from(used_threads > 1);
                Ok(stats)
            }
            Err(e) => {
                let (err, sticky) = execution_error(&name, &e, wrote);
                if let ptx::Error::Parse { .. }
                | ptx::Error::Unsupported { .. }
                | ptx::Error::NoKernel(_) = &e
                {
                    let reason = e.to_string();
                    let msg = format!(
                        "SimGpu cannot execute this kernel: {reason}; its launches fail with {}",
                        err.status()
                    );
                    self.warn_once(&name, &reason, &msg);
                } else {
                    tracing::debug!(kernel = %name, error = %e, sticky, "launch failed");
                }
                if sticky {
                    self.set_sticky(ctx, &err);
                }
                Err(err)
            }
        }
    }
}

/// The launch geometry a GPU accepts; checked before a kernel executes,
/// as the interpreter's memory grows with it.
fn too_many_modules() -> ExecError {
    ExecError::Driver {
        call: "cuModuleLoad",
        status: Status::OUT_OF_MEMORY,
    }
}

fn check_geometry(cfg: &LaunchConfig) -> ExecResult<()> {
    // Saturating: a product of three u32 can pass u64.
    let threads = cfg
        .block
        .iter()
        .fold(1u64, |n, &d| n.saturating_mul(u64::from(d)));
    let dims_ok = cfg.block.iter().zip(MAX_BLOCK_DIM).all(|(&d, m)| d <= m)
        && cfg.grid.iter().zip(MAX_GRID_DIM).all(|(&d, m)| d <= m);
    if !dims_ok || threads > MAX_BLOCK_THREADS {
        return Err(ExecError::Invalid(
            "block or grid dimensions above the device's limits",
        ));
    }
    if cfg.shared_mem > MAX_SHARED_BYTES {
        return Err(ExecError::Invalid(
            "dynamic shared memory above the device's limit",
        ));
    }
    Ok(())
}

/// The one mapping from interpreter errors to what the guest sees; `true`
/// if the error is sticky (the context fails every later call). `wrote`:
/// the kernel wrote global memory before it stopped. A kernel that stopped
/// for a reason of SimGpu's (PTX it cannot execute) or a bad launch is not
/// sticky unless it had written: then the context's memory holds half a
/// result, and the error is a sticky CUDA_ERROR_LAUNCH_FAILED.
fn execution_error(kernel: &str, e: &ptx::Error, wrote: bool) -> (ExecError, bool) {
    let fault = |status| ExecError::Driver {
        call: "cuLaunchKernel",
        status,
    };
    match e {
        // A texture or surface handle of nothing: the descriptor fetch
        // faults, as an out-of-bounds access does.
        // A free of what the heap did not give corrupts it on a GPU.
        ptx::Error::OutOfBounds { .. }
        | ptx::Error::InvalidHandle { .. }
        | ptx::Error::BadFree { .. }
        | ptx::Error::StackOverflow(_) => (fault(Status::ILLEGAL_ADDRESS), true),
        ptx::Error::BadCall { .. } => (fault(ILLEGAL_INSTRUCTION), true),
        ptx::Error::Misaligned { .. } => (fault(MISALIGNED_ADDRESS), true),
        ptx::Error::Trap => (fault(Status::LAUNCH_FAILED), true),
        ptx::Error::Assert => (fault(Status::ASSERT), true),
        ptx::Error::Budget(_) | ptx::Error::Deadlock(..) => (fault(LAUNCH_TIMEOUT), true),
        _ if wrote => (fault(Status::LAUNCH_FAILED), true),
        ptx::Error::BadLaunch(_) => (fault(Status::INVALID_VALUE), false),
        ptx::Error::Parse { .. } | ptx::Error::Unsupported { .. } | ptx::Error::NoKernel(_) => (
            ExecError::CannotExecute {
                kernel: kernel.to_owned(),
                reason: e.to_string(),
            },
            false,
        ),
    }
}

/// Global memory of one executed launch: the context's allocations, each
/// to the end of its granule. An access must lie within one of them.
struct Allocations<'a> {
    allocs: &'a mut BTreeMap<DevPtr, Vec<u8>>,
    textures: &'a HashMap<u64, ptx::texture::Texture>,
    surfaces: &'a HashMap<u64, ptx::texture::Image>,
    /// The context's device heap, if it has one.
    heap: Option<&'a mut ptx::heap::DeviceHeap>,
    /// Whether the kernel wrote any of them.
    wrote: bool,
}

impl Allocations<'_> {
    /// Whether `[addr, addr + len)`, outside every allocation, lies within
    /// [`READ_SLACK`] of one (after its granule's end or before its start).
    fn in_read_slack(&self, addr: u64, len: usize) -> bool {
        let Some(end) = addr.checked_add(len as u64) else {
            return false;
        };
        // The allocations on either side; a range that overlaps one (across
        // its end) is not in the slack.
        let prev = self
            .allocs
            .range(..=addr)
            .next_back()
            .map(|(&b, v)| b + v.len() as u64);
        let next = self.allocs.range(addr..).next().map(|(&b, _)| b);
        if prev.is_some_and(|e| e > addr) || next.is_some_and(|b| b < end) {
            return false;
        }
        prev.is_some_and(|e| end - e <= READ_SLACK) || next.is_some_and(|b| b - addr <= READ_SLACK)
    }

    fn span(&mut self, addr: u64, len: usize) -> Result<&mut [u8], ptx::Error> {
        let out = || ptx::Error::OutOfBounds {
            space: "global",
            addr,
            len: len as u64,
        };
        let (&base, bytes) = self.allocs.range_mut(..=addr).next_back().ok_or_else(out)?;
        let off = usize::try_from(addr - base).map_err(|_| out())?;
        let end = off.checked_add(len).ok_or_else(out)?;
        bytes.get_mut(off..end).ok_or_else(out)
    }
}

/// The allocation holding `[addr, addr + len)`, found once for the lanes
/// of a warp that hit the same one (the common case: a warp reads
/// neighbouring elements of one array).
struct Hit<'m> {
    base: u64,
    bytes: &'m mut Vec<u8>,
}

impl Hit<'_> {
    /// The offset of `[addr, addr + len)` in this allocation, if inside.
    fn offset(&self, addr: u64, len: usize) -> Option<usize> {
        Self::offset_in(self.base, self.bytes.len(), addr, len)
    }

    fn offset_in(base: u64, size: usize, addr: u64, len: usize) -> Option<usize> {
        let off = usize::try_from(addr.checked_sub(base)?).ok()?;
        (off.checked_add(len)? <= size).then_some(off)
    }

    /// Whether `[addr, addr + len)` lies in the `size` bytes at `base`.
    fn covers(base: u64, size: usize, addr: u64, len: usize) -> bool {
        Self::offset_in(base, size, addr, len).is_some()
    }
}

impl Allocations<'_> {
    /// Calls `each` with each lane's bytes. A read (`slack`) outside the
    /// allocations but within [`READ_SLACK`] of one gets zeros.
    fn lanes(
        &mut self,
        lanes: u32,
        addrs: &[u64; 32],
        len: usize,
        slack: bool,
        mut each: impl FnMut(usize, &mut [u8]),
    ) -> Result<(), ptx::Error> {
        let mut hit: Option<Hit> = None;
        let mut m = lanes;
        while m != 0 {
            let l = m.trailing_zeros() as usize;
            m &= m - 1;
            let addr = addrs[l];
            let off = match hit.as_ref().and_then(|h| h.offset(addr, len)) {
                Some(off) => off,
                None => {
                    let out = || ptx::Error::OutOfBounds {
                        space: "global",
                        addr,
                        len: len as u64,
                    };
                    hit = None;
                    let inside = self
                        .allocs
                        .range(..=addr)
                        .next_back()
                        .is_some_and(|(&b, v)| Hit::covers(b, v.len(), addr, len));
                    if !inside {
                        if slack && self.in_read_slack(addr, len) {
                            each(l, &mut [0u8; 32][..len]);
                            continue;
                        }
                        return Err(out());
                    }
                    let (&base, bytes) =
                        self.allocs.range_mut(..=addr).next_back().ok_or_else(out)?;
                    let h = Hit { base, bytes };
                    let off = h.offset(addr, len).ok_or_else(out)?;
                    hit = Some(h);
                    off
                }
            };
            let h = hit.as_mut().expect("set above");
            each(l, &mut h.bytes[off..off + len]);
        }
        Ok(())
    }
}

impl ptx::Memory for Allocations<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), ptx::Error> {
        if let Ok(bytes) = self.span(addr, buf.len()) {
            ptx::copy_element(buf, bytes);
            return Ok(());
        }
        if self.in_read_slack(addr, buf.len()) {
            buf.fill(0);
            return Ok(());
        }
        self.span(addr, buf.len()).map(|_| ())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), ptx::Error> {
        ptx::copy_element(self.span(addr, data.len())?, data);
        self.wrote = true;
        Ok(())
    }

    fn read_lanes(
        &mut self,
        lanes: u32,
        addrs: &[u64; 32],
        len: usize,
        out: &mut [[u8; 32]; 32],
    ) -> Result<(), ptx::Error> {
        self.lanes(lanes, addrs, len, true, |l, bytes| {
            ptx::copy_element(&mut out[l][..len], bytes)
        })
    }

    fn write_lanes(
        &mut self,
        lanes: u32,
        addrs: &[u64; 32],
        len: usize,
        data: &[[u8; 32]; 32],
    ) -> Result<(), ptx::Error> {
        let mut wrote = false;
        let r = self.lanes(lanes, addrs, len, false, |l, bytes| {
            ptx::copy_element(bytes, &data[l][..len]);
            wrote = true;
        });
        self.wrote |= wrote;
        r
    }

    fn malloc(&mut self, size: u64) -> u64 {
        self.heap.as_mut().map_or(0, |h| h.malloc(size))
    }

    fn free(&mut self, addr: u64) -> Result<(), ptx::Error> {
        match &mut self.heap {
            Some(h) => h.free(addr),
            None => Err(ptx::Error::BadFree { addr }),
        }
    }

    fn texture(&self, handle: u64) -> Option<ptx::texture::Texture> {
        self.textures.get(&handle).copied()
    }

    fn surface(&self, handle: u64) -> Option<ptx::texture::Image> {
        self.surfaces.get(&handle).copied()
    }
}

fn usize_len(n: u64) -> ExecResult<usize> {
    usize::try_from(n).map_err(|_| ExecError::Invalid("size"))
}

impl GpuExecutor for SimGpu {
    fn device(&self) -> &DeviceProps {
        &self.props
    }

    fn device_free_mem(&mut self) -> ExecResult<u64> {
        Ok(self.memory_bytes.saturating_sub(self.used))
    }

    fn gpu_time_ns(&mut self) -> u64 {
        self.gpu_time_ns
    }

    fn sticky_errors_poison_process(&self) -> bool {
        self.poison_process
    }

    fn create_context(&mut self) -> ExecResult<CtxId> {
        if let Some(e) = &self.poisoned {
            return Err(e.clone());
        }
        let id = self.id();
        let mut c = Context::default();
        c.var_slots = self.var_slots.clone();
        self.contexts.insert(id, c);
        Ok(CtxId(id))
    }

    fn destroy_context(&mut self, ctx: CtxId) {
        if let Some(c) = self.contexts.remove(&ctx.0) {
            self.used = self.used.saturating_sub(c.allocated());
        }
    }

    fn synchronize(&mut self, ctx: CtxId) -> ExecResult<()> {
        let t = self.ctx(ctx)?.all_ready();
        self.wait_for(ctx, t)
    }

    fn sync_mark(&mut self, ctx: CtxId, what: crate::SyncTarget) -> Option<crate::SyncMark> {
        if self.device.is_virtual() {
            // Waiting moves a virtual clock: nothing to wait for meanwhile.
            return None;
        }
        let c = self.ctx(ctx).ok()?;
        // The modelled end of the work issued so far: later work does not
        // move it.
        let t = match what {
            crate::SyncTarget::Context => c.all_ready(),
            crate::SyncTarget::Stream(s) => c.ready(s).ok()?,
            crate::SyncTarget::Event(e) => c.event(e).ok()?.time.unwrap_or(0),
        };
        Some(crate::SyncMark(t))
    }

    fn sync_pending(&mut self, _ctx: CtxId, mark: &crate::SyncMark) -> crate::SyncPending {
        let now = self.device.now_ns();
        if now >= mark.0 {
            crate::SyncPending::Done
        } else {
            crate::SyncPending::In(std::time::Duration::from_nanos(mark.0 - now))
        }
    }

    fn sync_marked(&mut self, ctx: CtxId, mark: crate::SyncMark) -> ExecResult<()> {
        self.wait_for(ctx, mark.0)
    }

    fn completed_ago(&mut self, ctx: CtxId) -> Option<std::time::Duration> {
        let t = self.ctx(ctx).ok()?.all_ready();
        let now = self.device.now_ns();
        Some(std::time::Duration::from_nanos(now.saturating_sub(t)))
    }

    fn mem_alloc(&mut self, ctx: CtxId, bytes: u64) -> ExecResult<DevPtr> {
        self.ctx(ctx)?;
        if bytes == 0 {
            return Err(ExecError::Invalid("zero-byte allocation"));
        }
        // A GPU hands out memory in granules: a kernel's access a little
        // past the end of an allocation (a common, benign bug: real
        // programs and test suites have them) lands in the rest of its
        // granule and does not fault. So an allocation here is its
        // requested size rounded up to ALLOC_ALIGN; beyond that (the guard
        // gap, other allocations' granules) an access faults. Copies are
        // checked against the requested size by the worker, as the
        // driver checks them.
        let granule = bytes
            .checked_next_multiple_of(ALLOC_ALIGN)
            .ok_or(ExecError::OutOfMemory(bytes))?;
        if bytes > self.memory_bytes.saturating_sub(self.used) {
            return Err(ExecError::OutOfMemory(bytes));
        }
        let len = usize::try_from(granule).map_err(|_| ExecError::OutOfMemory(bytes))?;
        let addr = self.next_addr;
        let next = granule
            .checked_add(GUARD)
            .and_then(|b| addr.checked_add(b))
            .ok_or(ExecError::OutOfMemory(bytes))?;
        // Probe before committing: `vec!` aborts the process if the host is
        // out of memory, `try_reserve` reports it.
        Vec::<u8>::new()
            .try_reserve_exact(len)
            .map_err(|_| ExecError::OutOfMemory(bytes))?;
        let c = self.ctx_mut(ctx)?;
        // Zeroed allocations come from the OS lazily: untouched device
        // memory costs no host RAM.
        c.allocs.insert(addr, vec![0u8; len]);
        c.sizes.insert(addr, bytes);
        self.next_addr = next;
        self.used += bytes;
        Ok(addr)
    }

    fn mem_free(&mut self, ctx: CtxId, ptr: DevPtr) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        if c.heap.as_ref().is_some_and(|h| h.base == ptr) {
            return Err(ExecError::Invalid("the device heap is not an allocation"));
        }
        let b = (ptr >= BASE_ADDR)
            .then(|| c.allocs.remove(&ptr))
            .flatten()
            .ok_or(ExecError::Invalid(
                "pointer is not an allocation of this context",
            ))?;
        let size = c.sizes.remove(&ptr).unwrap_or(b.len() as u64);
        self.used = self.used.saturating_sub(size);
        Ok(())
    }

    fn moves_memory(&self) -> bool {
        true
    }

    fn compresses(&self) -> bool {
        true
    }

    fn mem_move(&mut self, from: CtxId, to: CtxId, ptr: DevPtr) -> ExecResult<()> {
        // Bookkeeping, not device work: it works in a context a fault made
        // sticky too, so that lent memory always goes back to its owner.
        if !self.contexts.contains_key(&to.0) {
            return Err(ExecError::Invalid("context"));
        }
        let c = self
            .contexts
            .get_mut(&from.0)
            .ok_or(ExecError::Invalid("context"))?;
        let bytes = (ptr >= BASE_ADDR)
            .then(|| c.allocs.remove(&ptr))
            .flatten()
            .ok_or(ExecError::Invalid(
                "pointer is not an allocation of this context",
            ))?;
        let size = c.sizes.remove(&ptr);
        let c = self
            .contexts
            .get_mut(&to.0)
            .ok_or(ExecError::Invalid("context"))?;
        c.allocs.insert(ptr, bytes);
        if let Some(size) = size {
            c.sizes.insert(ptr, size);
        }
        Ok(())
    }

    fn event_move(&mut self, from: CtxId, to: CtxId, e: EventId) -> ExecResult<()> {
        // Bookkeeping, as `mem_move`; an event's time is on the device's
        // one timeline, so it means the same in any context.
        if !self.contexts.contains_key(&to.0) {
            return Err(ExecError::Invalid("context"));
        }
        let ev = self
            .contexts
            .get_mut(&from.0)
            .and_then(|c| c.events.remove(&e.0))
            .ok_or(ExecError::Invalid("event"))?;
        self.contexts
            .get_mut(&to.0)
            .ok_or(ExecError::Invalid("context"))?
            .events
            .insert(e.0, ev);
        Ok(())
    }

    fn va_reserve(&mut self, ctx: CtxId, bytes: u64, align: u64) -> ExecResult<DevPtr> {
        self.ctx(ctx)?;
        let align = align.max(VMM_GRANULARITY);
        let addr = self
            .next_addr
            .checked_next_multiple_of(align)
            .ok_or(ExecError::OutOfMemory(bytes))?;
        let next = addr
            .checked_add(bytes)
            .and_then(|e| e.checked_add(GUARD))
            .ok_or(ExecError::OutOfMemory(bytes))?;
        self.ctx_mut(ctx)?.reservations.insert(addr, bytes);
        self.next_addr = next;
        Ok(addr)
    }

    fn va_free(&mut self, ctx: CtxId, base: DevPtr, bytes: u64) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        match c.reservations.get(&base) {
            Some(&b) if b == bytes => {
                c.reservations.remove(&base);
                Ok(())
            }
            _ => Err(ExecError::Invalid("not a reservation of this context")),
        }
    }

    fn phys_create(&mut self, ctx: CtxId, bytes: u64) -> ExecResult<PhysId> {
        self.ctx(ctx)?;
        if bytes == 0 || bytes > self.memory_bytes.saturating_sub(self.used) {
            return Err(ExecError::OutOfMemory(bytes));
        }
        let len = usize::try_from(bytes).map_err(|_| ExecError::OutOfMemory(bytes))?;
        Vec::<u8>::new()
            .try_reserve_exact(len)
            .map_err(|_| ExecError::OutOfMemory(bytes))?;
        let id = self.id();
        self.ctx_mut(ctx)?.phys.insert(
            id,
            PhysMem {
                size: bytes,
                bytes: Some(vec![0u8; len]),
                mapped_at: None,
            },
        );
        self.used += bytes;
        Ok(PhysId(id))
    }

    fn phys_release(&mut self, ctx: CtxId, mem: PhysId) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        match c.phys.get(&mem.0) {
            Some(p) if p.mapped_at.is_none() => {}
            _ => return Err(ExecError::Invalid("memory that is mapped or unknown")),
        }
        let p = c.phys.remove(&mem.0).expect("checked");
        self.used = self.used.saturating_sub(p.size);
        Ok(())
    }

    fn phys_move(&mut self, from: CtxId, to: CtxId, mem: PhysId) -> ExecResult<()> {
        // Bookkeeping, as `mem_move`: it works between contexts a fault
        // made sticky too, so that memory other contexts hold is never
        // lost with one of them. Memory moves only while mapped nowhere:
        // its bytes are then its own, not a mapping's.
        if !self.contexts.contains_key(&to.0) {
            return Err(ExecError::Invalid("context"));
        }
        let c = self
            .contexts
            .get_mut(&from.0)
            .ok_or(ExecError::Invalid("context"))?;
        match c.phys.get(&mem.0) {
            Some(p) if p.mapped_at.is_none() => {}
            Some(_) => {
                return Err(ExecError::Unsupported(
                    "on SimGpu, a second mapping of a cuMemCreate allocation (one process maps it while another has it mapped)",
                ))
            }
            None => return Err(ExecError::Invalid("memory handle")),
        }
        let p = c.phys.remove(&mem.0).expect("checked");
        self.contexts
            .get_mut(&to.0)
            .expect("checked above")
            .phys
            .insert(mem.0, p);
        Ok(())
    }

    fn map(
        &mut self,
        ctx: CtxId,
        addr: DevPtr,
        bytes: u64,
        offset: u64,
        mem: PhysId,
    ) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        let p = c
            .phys
            .get_mut(&mem.0)
            .ok_or(ExecError::Invalid("memory handle"))?;
        // Each mapping is an allocation of its own here, holding the
        // memory's bytes: one mapping of the whole memory at a time.
        if offset != 0 || bytes != p.size || p.mapped_at.is_some() {
            return Err(ExecError::Unsupported(
                "on SimGpu, a mapping of part of a cuMemCreate allocation, or a second mapping of one",
            ));
        }
        p.mapped_at = Some(addr);
        c.mappings.insert(addr, mem.0);
        Ok(())
    }

    fn unmap(&mut self, ctx: CtxId, addr: DevPtr, _bytes: u64) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        let mem = c
            .mappings
            .remove(&addr)
            .ok_or(ExecError::Invalid("not a mapping"))?;
        let taken = c.allocs.remove(&addr);
        c.sizes.remove(&addr);
        if let Some(p) = c.phys.get_mut(&mem) {
            p.mapped_at = None;
            if let Some(b) = taken {
                p.bytes = Some(b);
            }
        }
        Ok(())
    }

    fn set_access(&mut self, ctx: CtxId, addr: DevPtr, bytes: u64, prot: u32) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        let end = addr.saturating_add(bytes);
        let inside: Vec<(DevPtr, u64)> =
            c.mappings.range(addr..end).map(|(&a, &m)| (a, m)).collect();
        match prot {
            3 => {
                for (a, m) in inside {
                    if let Some(p) = c.phys.get_mut(&m) {
                        if let Some(b) = p.bytes.take() {
                            c.allocs.insert(a, b);
                            c.sizes.insert(a, p.size);
                        }
                    }
                }
                Ok(())
            }
            0 => {
                for (a, m) in inside {
                    if let Some(b) = c.allocs.remove(&a) {
                        c.sizes.remove(&a);
                        if let Some(p) = c.phys.get_mut(&m) {
                            p.bytes = Some(b);
                        }
                    }
                }
                Ok(())
            }
            _ => Err(ExecError::Unsupported(
                "read-only mappings on SimGpu (its kernels' stores are not checked against them)",
            )),
        }
    }

    fn memcpy_htod(
        &mut self,
        ctx: CtxId,
        dst: DevPtr,
        src: &[u8],
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        c.bytes(dst, src.len())?;
        let t0 = c.enqueue(stream)?;
        c.bytes_mut(dst, src.len())?.copy_from_slice(src);
        if stream.is_none() {
            // Synchronous copy: returns once the NULL stream reached it.
            return self.wait_for(ctx, t0);
        }
        Ok(())
    }

    fn memcpy_dtoh(
        &mut self,
        ctx: CtxId,
        dst: &mut [u8],
        src: DevPtr,
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        c.bytes(src, dst.len())?;
        let t0 = c.enqueue(stream)?;
        dst.copy_from_slice(c.bytes(src, dst.len())?);
        // The bytes are the guest's once its stream reaches the copy.
        self.wait_for(ctx, t0)
    }

    fn memcpy_dtod(
        &mut self,
        ctx: CtxId,
        dst: DevPtr,
        src: DevPtr,
        bytes: u64,
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        let n = usize_len(bytes)?;
        let c = self.ctx_mut(ctx)?;
        let (sbase, soff) = c.locate(src, bytes)?;
        let (dbase, doff) = c.locate(dst, bytes)?;
        c.enqueue(stream)?;
        if sbase == dbase {
            if let Some(b) = c.allocs.get_mut(&sbase) {
                // memmove semantics for overlapping ranges.
                b.copy_within(soff..soff + n, doff);
            }
        } else if let Some(s) = c.allocs.remove(&sbase) {
            if let Some(d) = c.allocs.get_mut(&dbase) {
                d[doff..doff + n].copy_from_slice(&s[soff..soff + n]);
            }
            c.allocs.insert(sbase, s);
        }
        Ok(())
    }

    fn memset(
        &mut self,
        ctx: CtxId,
        dst: DevPtr,
        value: u32,
        elem_size: u8,
        count: u64,
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        if !matches!(elem_size, 1 | 2 | 4) {
            return Err(ExecError::Invalid("memset element size"));
        }
        if !dst.is_multiple_of(u64::from(elem_size)) {
            return Err(ExecError::Invalid(
                "memset destination not aligned to its element size",
            ));
        }
        let bytes = count
            .checked_mul(u64::from(elem_size))
            .ok_or(ExecError::Invalid("memset size"))?;
        let n = usize_len(bytes)?;
        let c = self.ctx_mut(ctx)?;
        c.bytes(dst, n)?;
        c.enqueue(stream)?;
        let out = c.bytes_mut(dst, n)?;
        let pattern = value.to_le_bytes();
        match elem_size {
            1 => out.fill(pattern[0]),
            k => {
                let k = usize::from(k);
                out.chunks_exact_mut(k)
                    .for_each(|e| e.copy_from_slice(&pattern[..k]));
            }
        }
        Ok(())
    }

    fn module_load(&mut self, ctx: CtxId, image: &[u8]) -> ExecResult<ModId> {
        self.ctx(ctx)?;
        let img = parse_module(image).map_err(|e| ExecError::InvalidImage(e.to_string()))?;
        // Names, layouts and map entries: what the table holds, roughly.
        let table: usize = img
            .kernels
            .iter()
            .map(|k| 2 * k.name.len() + k.params.len() * size_of::<ParamInfo>() + 128)
            .sum();
        let charge = self
            .host_memory
            .charge(table as u64, "a module's kernel table")?;
        let id = self.id();
        let archs = img.ptx.iter().map(|p| p.arch).collect();
        let module = Module {
            archs,
            kernels: img
                .kernels
                .into_iter()
                .map(|k| (k.name, k.params))
                .collect(),
            programs: img
                .ptx
                .into_iter()
                .map(|p| {
                    self.ptx_texts
                        .share(p.text, &self.host_memory)
                        .map(Program::new)
                })
                .collect(),
            source_of: img.source_of,
            _charge: charge,
        };
        self.ctx_mut(ctx)?.modules.insert(id, module);
        Ok(ModId(id))
    }

    fn module_unload(&mut self, ctx: CtxId, module: ModId) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        let mut m = c
            .modules
            .remove(&module.0)
            .ok_or(ExecError::Invalid("module"))?;
        for p in m.programs.iter_mut().flatten() {
            p.release(&mut c.allocs, &mut lock(&c.var_slots));
        }
        c.functions.retain(|_, f| f.module != module.0);
        c.function_ids.retain(|(m, _), _| *m != module.0);
        Ok(())
    }

    fn function(
        &mut self,
        ctx: CtxId,
        module: ModId,
        name: &str,
    ) -> ExecResult<(FnId, Vec<ParamInfo>)> {
        let id = self.next_id;
        let model = self.costs.lookup(name);
        let c = self.ctx_mut(ctx)?;
        let params = c
            .modules
            .get(&module.0)
            .ok_or(ExecError::Invalid("module"))?
            .kernels
            .get(name)
            .ok_or_else(|| ExecError::NotFound(name.to_owned()))?
            .clone();
        let key = (module.0, name.to_owned());
        if let Some(&f) = c.function_ids.get(&key) {
            return Ok((FnId(f), params));
        }
        c.function_ids.insert(key, id);
        c.functions.insert(
            id,
            Function {
                module: module.0,
                name: name.to_owned(),
                params: params.clone(),
                model,
                set: Default::default(),
                ns_per_block: None,
                uses_heap: None,
                host_ns: None,
            },
        );
        self.next_id += 1;
        Ok((FnId(id), params))
    }

    fn set_limit(&mut self, ctx: CtxId, which: u32, value: u64) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        match which {
            // Local memory is bounded per thread by the interpreter.
            limit::STACK_SIZE => {}
            limit::PRINTF_FIFO_SIZE => {
                c.printf_fifo = Some(usize::try_from(value).unwrap_or(usize::MAX));
            }
            limit::MALLOC_HEAP_SIZE => {
                if c.heap.is_some() {
                    return Err(ExecError::Invalid(
                        "the device heap's size is fixed once a kernel that uses it has run",
                    ));
                }
                c.heap_size = Some(value);
            }
            _ => return Err(ExecError::Invalid("limit")),
        }
        Ok(())
    }

    fn function_uses_heap(&mut self, ctx: CtxId, f: FnId) -> bool {
        let known = |g: &mut SimGpu| {
            g.ctx(ctx)
                .ok()
                .and_then(|c| c.functions.get(&f.0))
                .and_then(|func| func.uses_heap)
        };
        if let Some(v) = known(self) {
            return v;
        }
        let v = self.kernel_info(ctx, f).is_ok_and(|i| i.uses_heap);
        if let Some(func) = self
            .ctx_mut(ctx)
            .ok()
            .and_then(|c| c.functions.get_mut(&f.0))
        {
            func.uses_heap = Some(v);
        }
        v
    }

    fn function_prints(&mut self, ctx: CtxId, f: FnId) -> bool {
        let budget = self.host_memory.clone();
        let Ok((func, module, source)) = self.ctx(ctx).and_then(|c| c.function(f)) else {
            return false;
        };
        source
            .and_then(|i| module.programs.get(i))
            .and_then(Option::as_ref)
            .and_then(|p| p.ptx.parsed(&budget).ok())
            .is_some_and(|m| m.kernel_prints(&func.name))
    }

    fn take_output(&mut self, ctx: CtxId, max: usize) -> ExecResult<(Vec<u8>, u64)> {
        let budget = self.host_memory.clone();
        let c = self
            .contexts
            .get_mut(&ctx.0)
            .ok_or(ExecError::Invalid("context"))?;
        let n = max.min(c.output.len());
        let taken: Vec<u8> = c.output.drain(..n).collect();
        let left = c.output.len() as u64;
        if c.output.is_empty() {
            c.output = Vec::new();
        }
        self.charge_output(ctx, &budget);
        Ok((taken, left))
    }

    fn module_global(
        &mut self,
        ctx: CtxId,
        module: ModId,
        name: &str,
    ) -> ExecResult<(DevPtr, u64)> {
        let budget = self.host_memory.clone();
        let c = self.ctx_mut(ctx)?;
        let m = c
            .modules
            .get_mut(&module.0)
            .ok_or(ExecError::Invalid("module"))?;
        // The variables of the (first) PTX text that declares `name`: a
        // module's kernels normally all run from one text.
        for p in m.programs.iter_mut().flatten() {
            match p.parsed(&budget, &mut c.allocs, &mut lock(&c.var_slots)) {
                Ok((_, globals, base)) => {
                    if let (Some((addr, size)), Some(base)) = (globals.symbol(name), base) {
                        return Ok((base + (addr - ptx::GLOBALS_BASE), size));
                    }
                }
                Err(ProgramError::Ptx(_)) => {}
                Err(ProgramError::HostMemory(e)) => return Err(ExecError::HostMemory(e)),
                Err(ProgramError::TooManyModules) => return Err(too_many_modules()),
            }
        }
        Err(ExecError::NotFound(name.to_owned()))
    }

    fn module_global_managed(
        &mut self,
        ctx: CtxId,
        module: ModId,
        name: &str,
        _ptr: DevPtr,
    ) -> bool {
        let budget = self.host_memory.clone();
        let Ok(c) = self.ctx_mut(ctx) else {
            return false;
        };
        let Some(m) = c.modules.get_mut(&module.0) else {
            return false;
        };
        for p in m.programs.iter_mut().flatten() {
            if let Ok((_, globals, _)) = p.parsed(&budget, &mut c.allocs, &mut lock(&c.var_slots)) {
                if globals.symbol(name).is_some() {
                    return globals.is_managed(name);
                }
            }
        }
        false
    }

    fn function_attribute(&mut self, ctx: CtxId, f: FnId, a: i32) -> ExecResult<i32> {
        let arch = self.function_arch(ctx, f)?;
        let set = {
            let func = &self.ctx(ctx)?.functions[&f.0];
            usize::try_from(a)
                .ok()
                .and_then(|i| func.set.get(i).copied().flatten())
        };
        let to_i32 = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        Ok(match a {
            func_attr::MAX_THREADS_PER_BLOCK => {
                // The device's limit, or the kernel's launch bound below it.
                let bound = match self.kernel_info(ctx, f) {
                    Ok(info) => info
                        .max_threads
                        .or(info
                            .reqntid
                            .map(|r| r.iter().fold(1u32, |a, &b| a.saturating_mul(b))))
                        .map_or(MAX_BLOCK_THREADS, u64::from),
                    Err(_) => MAX_BLOCK_THREADS,
                };
                bound.min(MAX_BLOCK_THREADS) as i32
            }
            // The code that runs is the PTX itself: both versions are its
            // target (a fatbin's PTX for compute_100 runs as compute_100
            // code, and a program tuning itself by PTX_VERSION must see
            // that, not the device's 9.0).
            func_attr::PTX_VERSION | func_attr::BINARY_VERSION => to_i32(arch),
            func_attr::CACHE_MODE_CA => 0,
            func_attr::PREFERRED_SHARED_MEMORY_CARVEOUT => set.unwrap_or(-1),
            10..=func_attr::LAST => set.unwrap_or(0),
            func_attr::SHARED_SIZE_BYTES
            | func_attr::CONST_SIZE_BYTES
            | func_attr::LOCAL_SIZE_BYTES
            | func_attr::NUM_REGS
            | func_attr::MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                let info = self.kernel_info(ctx, f)?;
                match a {
                    func_attr::SHARED_SIZE_BYTES => to_i32(info.static_shared),
                    func_attr::CONST_SIZE_BYTES => to_i32(info.const_bytes),
                    func_attr::LOCAL_SIZE_BYTES => to_i32(info.local_bytes),
                    func_attr::NUM_REGS => to_i32(info.registers.clamp(1, MAX_REPORTED_REGS)),
                    _ => to_i32(self.max_dynamic_shared(ctx, f)?),
                }
            }
            _ => return Err(ExecError::Invalid("function attribute")),
        })
    }

    fn set_function_attribute(
        &mut self,
        ctx: CtxId,
        f: FnId,
        a: i32,
        value: i32,
    ) -> ExecResult<()> {
        self.function_arch(ctx, f)?;
        let ok = match a {
            func_attr::MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                let info = self.kernel_info(ctx, f)?;
                u32::try_from(value)
                    .is_ok_and(|v| v <= MAX_SHARED_BYTES.saturating_sub(info.static_shared))
            }
            func_attr::PREFERRED_SHARED_MEMORY_CARVEOUT => (-1..=100).contains(&value),
            // Cluster dimensions, non-portable sizes, scheduling policy.
            11..=func_attr::LAST => value >= 0,
            _ => false,
        };
        if !ok {
            return Err(ExecError::Invalid("function attribute or value"));
        }
        let func = self
            .ctx_mut(ctx)?
            .functions
            .get_mut(&f.0)
            .ok_or(ExecError::Invalid("function"))?;
        func.set[a as usize] = Some(value);
        Ok(())
    }

    fn launch(
        &mut self,
        ctx: CtxId,
        f: FnId,
        cfg: &LaunchConfig,
        params: &[u8],
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        if cfg.grid.contains(&0) || cfg.block.contains(&0) {
            return Err(ExecError::Invalid("zero grid or block dimension"));
        }
        // Thread-block clusters (distributed shared memory, cluster
        // barriers) are not modelled: refused, as a device without
        // CLUSTER_LAUNCH would. A cooperative launch runs its blocks
        // interleaved, all resident at once: refused if the device could
        // not hold them all.
        if cfg.options.cooperative {
            self.check_resident(ctx, f, cfg)?;
        }
        if cfg.options.cluster != [1, 1, 1] {
            return Err(ExecError::Driver {
                call: "cuLaunchKernelEx (thread-block clusters)",
                status: Status::NOT_SUPPORTED,
            });
        }
        // The kernel is issued now: executing it below takes no device time.
        let issued = self.device.now_ns();
        let c = self.ctx_mut(ctx)?;
        let func = c
            .functions
            .get(&f.0)
            .ok_or(ExecError::Invalid("function"))?;
        if (params.len() as u64) < ParamInfo::packed_size(&func.params) {
            return Err(ExecError::Invalid(
                "parameter buffer shorter than the kernel's parameter layout",
            ));
        }
        // An unknown stream fails the launch before the kernel executes.
        c.ready(stream)?;
        if cfg.shared_mem > 0 && cfg.shared_mem > self.max_dynamic_shared(ctx, f)? {
            return Err(ExecError::Invalid(
                "dynamic shared memory above the function's MAX_DYNAMIC_SHARED_SIZE_BYTES",
            ));
        }
        // The kernel's launch bounds, as the driver enforces them.
        let mut syncs_grid = false;
        if let Ok(info) = self.kernel_info(ctx, f) {
            syncs_grid = info.syncs_grid;
            let threads = cfg.block.iter().map(|&d| u64::from(d)).product::<u64>();
            if info.max_threads.is_some_and(|m| threads > u64::from(m)) {
                return Err(ExecError::Invalid(
                    "block larger than the kernel's launch bound (.maxntid)",
                ));
            }
            if info.reqntid.is_some_and(|r| r != cfg.block) {
                return Err(ExecError::Invalid(
                    "block shape other than the kernel requires (.reqntid)",
                ));
            }
        }
        // A kernel that synchronizes the grid, launched without the
        // cooperative flag: a GPU's driver gives every launch a grid
        // workspace, so its barrier works when all the blocks happen to be
        // resident at once. SimGpu then runs it as a cooperative launch
        // (blocks interleaved); one that cannot be resident finds no
        // workspace and traps, where a GPU would wait forever.
        let mut run = *cfg;
        if syncs_grid && cfg.part.is_none() && self.check_resident(ctx, f, cfg).is_ok() {
            run.options.cooperative = true;
        }
        let c = self.ctx_mut(ctx)?;
        let func = c
            .functions
            .get(&f.0)
            .ok_or(ExecError::Invalid("function"))?;
        let model = func.model;
        if model.cost == Some(Cost::Fault) {
            let e = ExecError::Driver {
                call: "cuLaunchKernel",
                status: Status::ILLEGAL_ADDRESS,
            };
            self.set_sticky(ctx, &e);
            return Err(e);
        }
        // A configured duration is checked before the kernel executes: a
        // launch refused for it changes no memory.
        let configured = match model.cost {
            Some(cost) => Some(cost.duration_ns(&func.params, params)?),
            None => None,
        };
        // A part of a sliced launch: its blocks' share of a configured
        // duration (an executed part counts its own instructions).
        let blocks = match cfg.part {
            None => cfg.blocks(),
            Some(p) if p.fits(cfg.grid) => p.blocks(),
            Some(_) => return Err(ExecError::Invalid("grid part outside the grid")),
        };
        let configured = configured.map(|ns| share_of(ns, blocks, cfg.blocks()));
        let duration = match (model.execute, configured) {
            (true, configured) => {
                let stats = self.execute(ctx, f, &run, params)?;
                configured.unwrap_or_else(|| self.costs.executed_duration_ns(stats.instructions))
            }
            (false, Some(ns)) => ns,
            // Not reachable from a validated configuration: a kernel
            // without a cost always executes.
            (false, None) => return Err(ExecError::CannotEmulate(func.name.clone())),
        };
        // The runaway guard: the modelled kernel ends at the limit, and
        // from then on the context fails with a sticky
        // CUDA_ERROR_LAUNCH_TIMEOUT (before it, the kernel runs and the
        // launch itself succeeds, as on a GPU).
        let (duration, overran) = match self.request_limit {
            Some(limit) if duration > limit => (limit, true),
            _ => (duration, false),
        };
        let c = self.ctx_mut(ctx)?;
        if let Some(func) = c.functions.get_mut(&f.0) {
            func.ns_per_block = Some(duration as f64 / blocks.max(1) as f64);
        }
        let t0 = c.enqueue(stream)?;
        let (_start, end) = self.device.reserve_issued(t0, issued, duration);
        self.ctx_mut(ctx)?.set_ready(stream, end)?;
        self.gpu_time_ns += duration;
        if overran {
            let name = self
                .ctx(ctx)?
                .functions
                .get(&f.0)
                .map(|f| f.name.clone())
                .unwrap_or_default();
            tracing::warn!(kernel = %name, limit_ms = duration as f64 / 1e6, "runaway guard: the kernel ran past the VM's limit on one request and was ended there (CUDA_ERROR_LAUNCH_TIMEOUT)");
            self.runaways += 1;
            let e = ExecError::Driver {
                call: "cuLaunchKernel (runaway guard)",
                status: LAUNCH_TIMEOUT,
            };
            self.ctx_mut(ctx)?.timeout = Some((end, e));
        }
        Ok(())
    }

    fn sliceable(&mut self, ctx: CtxId, f: FnId) -> Result<(), crate::Unsliceable> {
        // SimGpu runs any box of any grid, but a kernel that launches
        // work from the device runs whole, as on CudaExecutor: its
        // children would start between the parts.
        let budget = self.host_memory.clone();
        let Ok((func, module, source)) = self.ctx(ctx).and_then(|c| c.function(f)) else {
            return Err("unknown function");
        };
        let launches = source
            .and_then(|i| module.programs.get(i))
            .and_then(Option::as_ref)
            .and_then(|p| p.ptx.parsed(&budget).ok())
            .is_some_and(|m| m.kernel_launches(&func.name));
        match launches {
            true => Err("launches work from the device"),
            false => Ok(()),
        }
    }

    fn predict_ns(&mut self, ctx: CtxId, f: FnId, blocks: u64) -> Option<u64> {
        let per = self.ctx(ctx).ok()?.functions.get(&f.0)?.ns_per_block?;
        Some((per * blocks as f64).min(u64::MAX as f64) as u64)
    }

    fn runaways(&self) -> u64 {
        self.runaways
    }

    fn set_request_limit(&mut self, limit: Option<std::time::Duration>) {
        self.request_limit = limit.map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64);
    }

    fn array_create(&mut self, ctx: CtxId, desc: &ArrayDesc) -> ExecResult<ArrayId> {
        let kind = desc.validate().map_err(ExecError::Invalid)?;
        let base = self.mem_alloc(ctx, desc.total_bytes())?;
        let id = self.id();
        let c = self.ctx_mut(ctx)?;
        c.arrays.insert(
            id,
            SimArray {
                base,
                desc: *desc,
                kind,
            },
        );
        Ok(ArrayId(id))
    }

    fn array_destroy(&mut self, ctx: CtxId, a: ArrayId) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        let arr = c.arrays.remove(&a.0).ok_or(ExecError::Invalid("array"))?;
        // Objects still naming it read freed memory: their fetches fail
        // bounds checks (a GPU leaves this undefined).
        self.mem_free(ctx, arr.base)
    }

    fn memcpy_rect(
        &mut self,
        ctx: CtxId,
        copy: &RectCopy,
        host: HostData<'_>,
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        let [w, h, d] = copy.extent;
        if copy.extent.contains(&0) {
            return Err(ExecError::Invalid("empty copy"));
        }
        let c = self.ctx_mut(ctx)?;
        let src = rect_side(c, &copy.src, copy.extent)?;
        let dst = rect_side(c, &copy.dst, copy.extent)?;
        let packed = usize_len(w.saturating_mul(h).saturating_mul(d))?;
        match &host {
            HostData::From(b) if b.len() != packed => return Err(ExecError::Invalid("host data")),
            HostData::To(b) if b.len() != packed => return Err(ExecError::Invalid("host data")),
            _ => {}
        }
        let t0 = c.enqueue(stream)?;
        // Rows as (source offset, destination offset, length): each side's
        // allocation was found once above, so a copy of many short rows
        // costs a slice copy per row.
        let (n, rows) = rect_rows(&src, &dst, copy.extent)?;
        let bad = || ExecError::Invalid("copy range");
        match (src.alloc, dst.alloc, host) {
            (None, Some(db), HostData::From(b)) => {
                let dv = c.allocs.get_mut(&db).ok_or_else(bad)?;
                for (so, dof) in rows {
                    dv.get_mut(dof..dof + n)
                        .ok_or_else(bad)?
                        .copy_from_slice(b.get(so..so + n).ok_or_else(bad)?);
                }
            }
            (Some(sb), None, HostData::To(b)) => {
                let sv = c.allocs.get(&sb).ok_or_else(bad)?;
                for (so, dof) in rows {
                    b.get_mut(dof..dof + n)
                        .ok_or_else(bad)?
                        .copy_from_slice(sv.get(so..so + n).ok_or_else(bad)?);
                }
            }
            (Some(sb), Some(db), HostData::None) if sb == db => {
                let v = c.allocs.get_mut(&sb).ok_or_else(bad)?;
                for (so, dof) in rows {
                    if so.max(dof) + n > v.len() {
                        return Err(bad());
                    }
                    v.copy_within(so..so + n, dof);
                }
            }
            (Some(sb), Some(db), HostData::None) => {
                let sv = c.allocs.remove(&sb).ok_or_else(bad)?;
                let copied = match c.allocs.get_mut(&db) {
                    None => Err(bad()),
                    Some(dv) => rows.into_iter().try_for_each(|(so, dof)| {
                        dv.get_mut(dof..dof + n)
                            .ok_or_else(bad)?
                            .copy_from_slice(sv.get(so..so + n).ok_or_else(bad)?);
                        Ok(())
                    }),
                };
                c.allocs.insert(sb, sv);
                copied?;
            }
            _ => return Err(ExecError::Invalid("host data")),
        }
        if stream.is_none() || matches!(copy.dst.place, Place::Host) {
            // Synchronous, or the bytes are the guest's once its stream
            // reaches the copy.
            return self.wait_for(ctx, t0);
        }
        Ok(())
    }

    fn tex_object_create(
        &mut self,
        ctx: CtxId,
        res: &TexResource,
        tex: &TextureDesc,
    ) -> ExecResult<u64> {
        let sampler = sampler(tex)?;
        let id = self.id();
        let c = self.ctx_mut(ctx)?;
        let image = match *res {
            TexResource::Array(a) => c
                .arrays
                .get(&a.0)
                .ok_or(ExecError::Invalid("array"))?
                .image(),
            TexResource::Linear { .. } | TexResource::Pitch2D { .. } => {
                let image = memory_image(res)?;
                // The last row ends `width` elements into it.
                let span = image
                    .row_pitch
                    .saturating_mul(image.height.saturating_sub(1))
                    .saturating_add(image.width.saturating_mul(image.element_bytes()));
                c.locate(image.base, span)?;
                image
            }
        };
        c.textures
            .insert(id, ptx::texture::Texture { image, sampler });
        Ok(id)
    }

    fn tex_object_destroy(&mut self, ctx: CtxId, t: u64) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        c.textures
            .remove(&t)
            .map(|_| ())
            .ok_or(ExecError::Invalid("texture object"))
    }

    fn surf_object_create(&mut self, ctx: CtxId, a: ArrayId) -> ExecResult<u64> {
        let id = self.id();
        let c = self.ctx_mut(ctx)?;
        // Any array, as NVIDIA's driver allows (CUDA_ARRAY3D_SURFACE_LDST
        // is not required by driver 580).
        let arr = c.arrays.get(&a.0).ok_or(ExecError::Invalid("array"))?;
        let image = arr.image();
        c.surfaces.insert(id, image);
        Ok(id)
    }

    fn surf_object_destroy(&mut self, ctx: CtxId, s: u64) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        c.surfaces
            .remove(&s)
            .map(|_| ())
            .ok_or(ExecError::Invalid("surface object"))
    }

    fn stream_create(&mut self, ctx: CtxId, flags: u32) -> ExecResult<StreamId> {
        if flags & !STREAM_NON_BLOCKING != 0 {
            return Err(ExecError::Invalid("stream flags"));
        }
        let id = self.id();
        self.ctx_mut(ctx)?.streams.insert(
            id,
            Stream {
                ready: 0,
                blocking: flags & STREAM_NON_BLOCKING == 0,
            },
        );
        Ok(StreamId(id))
    }

    fn stream_priority_range(&mut self, ctx: CtxId) -> ExecResult<(i32, i32)> {
        self.ctx(ctx)?;
        Ok((0, SIM_GREATEST_STREAM_PRIORITY))
    }

    fn stream_create_with_priority(
        &mut self,
        ctx: CtxId,
        flags: u32,
        priority: i32,
    ) -> ExecResult<StreamId> {
        if !(SIM_GREATEST_STREAM_PRIORITY..=0).contains(&priority) {
            return Err(ExecError::Invalid("stream priority"));
        }
        // A hint, as CUDA defines it ("no functional guarantee on
        // execution order"): the device model serves work in the order it
        // is reserved, whatever the stream's priority.
        self.stream_create(ctx, flags)
    }

    fn stream_destroy(&mut self, ctx: CtxId, s: StreamId) -> ExecResult<()> {
        // Its reservations stay on the device timeline: pending work
        // completes.
        self.ctx_mut(ctx)?
            .streams
            .remove(&s.0)
            .map(drop)
            .ok_or(ExecError::Invalid("stream"))
    }

    fn stream_synchronize(&mut self, ctx: CtxId, s: Option<StreamId>) -> ExecResult<()> {
        let t = self.ctx(ctx)?.ready(s)?;
        self.wait_for(ctx, t)
    }

    fn stream_query(&mut self, ctx: CtxId, s: Option<StreamId>) -> ExecResult<()> {
        let t = self.ctx(ctx)?.ready(s)?;
        if self.device.now_ns() >= t {
            Ok(())
        } else {
            Err(ExecError::NotReady)
        }
    }

    fn stream_wait_event(&mut self, ctx: CtxId, s: Option<StreamId>, e: EventId) -> ExecResult<()> {
        let c = self.ctx_mut(ctx)?;
        let at = c.event(e)?.time;
        let t0 = c.enqueue(s)?;
        // An event never recorded is complete: nothing to wait for.
        c.set_ready(s, t0.max(at.unwrap_or(0)))
    }

    fn event_create(&mut self, ctx: CtxId, flags: u32) -> ExecResult<EventId> {
        if flags & !EVENT_FLAGS != 0 {
            return Err(ExecError::Invalid("event flags"));
        }
        let id = self.id();
        self.ctx_mut(ctx)?
            .events
            .insert(id, Event { flags, time: None });
        Ok(EventId(id))
    }

    fn event_destroy(&mut self, ctx: CtxId, e: EventId) -> ExecResult<()> {
        self.ctx_mut(ctx)?
            .events
            .remove(&e.0)
            .map(drop)
            .ok_or(ExecError::Invalid("event"))
    }

    fn event_record(&mut self, ctx: CtxId, e: EventId, s: Option<StreamId>) -> ExecResult<()> {
        let now = self.device.now_ns();
        let c = self.ctx_mut(ctx)?;
        c.event(e)?;
        // The stream reaches the event when its prior work is done, and not
        // before the event is issued.
        let t = c.enqueue(s)?.max(now);
        if let Some(ev) = c.events.get_mut(&e.0) {
            ev.time = Some(t);
        }
        Ok(())
    }

    fn event_query(&mut self, ctx: CtxId, e: EventId) -> ExecResult<()> {
        match self.ctx(ctx)?.event(e)?.time {
            Some(t) if self.device.now_ns() < t => Err(ExecError::NotReady),
            _ => Ok(()),
        }
    }

    fn event_synchronize(&mut self, ctx: CtxId, e: EventId) -> ExecResult<()> {
        if let Some(t) = self.ctx(ctx)?.event(e)?.time {
            return self.wait_for(ctx, t);
        }
        Ok(())
    }

    fn event_elapsed_ms(&mut self, ctx: CtxId, start: EventId, end: EventId) -> ExecResult<f32> {
        let c = self.ctx(ctx)?;
        let (a, b) = (c.event(start)?, c.event(end)?);
        // As the driver: an event without timing, or never recorded, is an
        // invalid handle for cuEventElapsedTime.
        let no_timing = ExecError::Driver {
            call: "cuEventElapsedTime",
            status: fairgpu_protocol::Status::INVALID_HANDLE,
        };
        if (a.flags | b.flags) & EVENT_DISABLE_TIMING != 0 {
            return Err(no_timing);
        }
        let (Some(ta), Some(tb)) = (a.time, b.time) else {
            return Err(no_timing);
        };
        if self.device.now_ns() < ta.max(tb) {
            return Err(ExecError::NotReady);
        }
        Ok(((i128::from(tb) - i128::from(ta)) as f64 / 1e6) as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::image::tests::{fatbin, vecadd_layout, VECADD_PTX};
    use super::*;
    use proptest::prelude::*;

    const SPIN_PTX: &str = ".version 8.4\n.target sm_90\n.address_size 64\n\
        .visible .entry _Z12fairgpu_spinm(\n\t.param .u64 _Z12fairgpu_spinm_param_0\n)\n{\n\tret;\n}\n";
    const MS: u64 = 1_000_000;
    const LC: LaunchConfig = LaunchConfig::new([1, 1, 1], [32, 1, 1], 0);

    fn gpu(device: &SimDevice) -> SimGpu {
        SimGpu::new(SimConfig::default(), device.clone()).expect("default config")
    }

    #[test]
    fn rectangular_copies_move_rows_within_and_between_allocations() {
        use crate::{ArrayDesc, RectSide};
        let mut g = gpu(&SimDevice::private());
        let ctx = g.create_context().expect("context");
        // 1-byte rows, 64 per slice, 256 slices: 16,384 rows.
        let (w, h, d) = (1u64, 64u64, 256u64);
        let a = g.mem_alloc(ctx, 4 * h * d).expect("alloc");
        let b = g.mem_alloc(ctx, 3 * h * d).expect("alloc");
        let data: Vec<u8> = (0..4 * h * d).map(|i| (i * 7 % 251) as u8).collect();
        g.memcpy_htod(ctx, a, &data, None).expect("fill");
        let dev = |ptr, pitch| Place::Device {
            ptr,
            pitch,
            height: h,
        };
        let side = |place, pos| RectSide { place, pos };
        // Column 2 of `a` (pitch 4) to column 1 of `b` (pitch 3).
        let copy = RectCopy {
            src: side(dev(a, 4), [2, 0, 0]),
            dst: side(dev(b, 3), [1, 0, 0]),
            extent: [w, h, d],
        };
        g.memcpy_rect(ctx, &copy, HostData::None, None)
            .expect("copy");
        let mut got = vec![0u8; (3 * h * d) as usize];
        g.memcpy_dtoh(ctx, &mut got, b, None).expect("read");
        for r in 0..(h * d) as usize {
            assert_eq!(got[3 * r + 1], data[4 * r + 2], "row {r}");
            assert_eq!(got[3 * r], 0);
        }
        // Within one allocation: column 2 onto column 0.
        let within = RectCopy {
            src: side(dev(a, 4), [2, 0, 0]),
            dst: side(dev(a, 4), [0, 0, 0]),
            extent: [w, h, d],
        };
        g.memcpy_rect(ctx, &within, HostData::None, None)
            .expect("copy");
        let mut got = vec![0u8; (4 * h * d) as usize];
        g.memcpy_dtoh(ctx, &mut got, a, None).expect("read");
        for r in 0..(h * d) as usize {
            assert_eq!(got[4 * r], data[4 * r + 2], "row {r}");
            assert_eq!(got[4 * r + 1..4 * r + 4], data[4 * r + 1..4 * r + 4]);
        }
        // Dense on both sides: host bytes into a whole 3D array and back.
        let desc = ArrayDesc {
            width: 4,
            height: h,
            depth: d,
            format: 0x01,
            channels: 1,
            flags: 0,
        };
        let arr = g.array_create(ctx, &desc).expect("array");
        let whole = RectCopy {
            src: side(Place::Host, [0; 3]),
            dst: side(Place::Array(arr), [0; 3]),
            extent: [4, h, d],
        };
        g.memcpy_rect(ctx, &whole, HostData::From(&data), None)
            .expect("up");
        let mut back = vec![0u8; data.len()];
        let down = RectCopy {
            src: side(Place::Array(arr), [0; 3]),
            dst: side(Place::Host, [0; 3]),
            extent: [4, h, d],
        };
        g.memcpy_rect(ctx, &down, HostData::To(&mut back), None)
            .expect("down");
        assert_eq!(back, data);
        // A box past the array's end, and host data of the wrong size.
        let past = RectCopy {
            extent: [4, h, d + 1],
            ..down
        };
        let mut more = vec![0u8; (4 * h * (d + 1)) as usize];
        assert!(g
            .memcpy_rect(ctx, &past, HostData::To(&mut more), None)
            .is_err());
        assert!(g
            .memcpy_rect(ctx, &down, HostData::To(&mut back[1..]), None)
            .is_err());
    }

    /// A context with the spin kernel loaded.
    fn spin_ctx(g: &mut SimGpu) -> (CtxId, FnId) {
        let ctx = g.create_context().expect("context");
        let m = g.module_load(ctx, SPIN_PTX.as_bytes()).expect("load");
        let (f, layout) = g.function(ctx, m, "_Z12fairgpu_spinm").expect("function");
        assert_eq!(layout, [ParamInfo { offset: 0, size: 8 }]);
        (ctx, f)
    }

    fn spin(g: &mut SimGpu, ctx: CtxId, f: FnId, ns: u64, s: Option<StreamId>) {
        g.launch(ctx, f, &LC, &ns.to_le_bytes(), s).expect("launch");
    }

    #[test]
    fn copies_at_odd_offsets_and_sizes() {
        let mut g = gpu(&SimDevice::private());
        let ctx = g.create_context().expect("context");
        let a = g.mem_alloc(ctx, 1001).expect("alloc");
        let b = g.mem_alloc(ctx, 37).expect("alloc");
        assert_eq!(a % ALLOC_ALIGN, 0);
        assert_eq!(b % ALLOC_ALIGN, 0);
        assert!(b >= a + 1001 + GUARD);

        let src: Vec<u8> = (1..=17).collect();
        g.memcpy_htod(ctx, a + 3, &src, None).expect("htod");
        let mut out = [0xffu8; 30];
        g.memcpy_dtoh(ctx, &mut out, a + 1, None).expect("dtoh");
        let mut want = [0u8; 30];
        want[2..19].copy_from_slice(&src);
        assert_eq!(out, want);

        // Overlapping copy within one allocation behaves like memmove.
        g.memcpy_dtod(ctx, a + 5, a + 3, 17, None).expect("dtod");
        let mut out = [0u8; 24];
        g.memcpy_dtoh(ctx, &mut out, a, None).expect("dtoh");
        let mut want = [0u8; 24];
        want[3..5].copy_from_slice(&src[..2]);
        want[5..22].copy_from_slice(&src);
        assert_eq!(out, want);

        // Across allocations, ending exactly at the end of the destination.
        g.memcpy_dtod(ctx, b + 20, a + 5, 17, None).expect("dtod");
        let mut out = [0u8; 17];
        g.memcpy_dtoh(ctx, &mut out, b + 20, None).expect("dtoh");
        assert_eq!(out.as_slice(), src.as_slice());

        // Memsets of every element size, odd counts.
        g.memset(ctx, a + 1, 0xab, 1, 3, None).expect("memset8");
        g.memset(ctx, a + 4, 0xbeef, 2, 3, None).expect("memset16");
        g.memset(ctx, a + 12, 0x0102_0304, 4, 1, None)
            .expect("memset32");
        let mut out = [0u8; 17];
        g.memcpy_dtoh(ctx, &mut out, a, None).expect("dtoh");
        assert_eq!(
            out,
            [
                0, 0xab, 0xab, 0xab, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, src[5], src[6], 4, 3, 2,
                1, src[11]
            ]
        );
        assert_eq!(
            g.memset(ctx, a + 1, 0, 2, 1, None),
            Err(ExecError::Invalid(
                "memset destination not aligned to its element size"
            ))
        );
        assert!(g.memset(ctx, a, 0, 3, 1, None).is_err());
        assert!(g.memset(ctx, a, 0, 4, u64::MAX, None).is_err());

        // Bad ranges are errors, not panics.
        let invalid = |r: ExecResult<()>| assert!(matches!(r, Err(ExecError::Invalid(_))), "{r:?}");
        invalid(g.memcpy_htod(ctx, a + 1000, &[1, 2], None));
        invalid(g.memcpy_htod(ctx, a + 1001 + 8, &[1], None));
        invalid(g.memcpy_htod(ctx, a - 1, &[1], None));
        invalid(g.memcpy_dtoh(ctx, &mut [0u8; 38], b, None));
        invalid(g.memcpy_dtod(ctx, b, a, 38, None));
        invalid(g.memcpy_dtod(ctx, b, a, u64::MAX, None));
        invalid(g.memset(ctx, b + 36, 0, 1, 2, None));
        invalid(g.memcpy_htod(ctx, u64::MAX, &[1], None));
        // Another context's memory is not this context's.
        let other = g.create_context().expect("context");
        invalid(g.memcpy_htod(other, a, &[1], None));
        invalid(g.mem_free(other, a));
    }

    #[test]
    fn out_of_memory_and_accounting() {
        let cfg = SimConfig {
            memory_bytes: 1000,
            ..SimConfig::default()
        };
        let mut g = SimGpu::new(cfg, SimDevice::private()).expect("gpu");
        let c1 = g.create_context().expect("context");
        let c2 = g.create_context().expect("context");
        let a = g.mem_alloc(c1, 600).expect("alloc");
        assert_eq!(g.device_free_mem(), Ok(400));
        assert_eq!(g.mem_alloc(c2, 401), Err(ExecError::OutOfMemory(401)));
        assert_eq!(
            g.mem_alloc(c2, u64::MAX),
            Err(ExecError::OutOfMemory(u64::MAX))
        );
        g.mem_alloc(c2, 400).expect("exactly the rest");
        assert_eq!(g.device_free_mem(), Ok(0));
        g.mem_free(c1, a).expect("free");
        assert_eq!(g.device_free_mem(), Ok(600));
        g.destroy_context(c2);
        assert_eq!(g.device_free_mem(), Ok(1000));
        assert!(g.mem_alloc(c1, 0).is_err());
        assert!(g.mem_alloc(c2, 1).is_err());
    }

    #[test]
    fn freed_pointers_are_stale_forever() {
        let mut g = gpu(&SimDevice::private());
        let ctx = g.create_context().expect("context");
        let a = g.mem_alloc(ctx, 4096).expect("alloc");
        g.mem_free(ctx, a).expect("free");
        assert!(g.mem_free(ctx, a).is_err());
        assert!(g.memcpy_htod(ctx, a, &[1], None).is_err());
        assert!(g.memcpy_htod(ctx, a + 100, &[1], None).is_err());
        // A new allocation of the same size gets a new address.
        let b = g.mem_alloc(ctx, 4096).expect("alloc");
        assert!(b > a + 4096);
        assert!(g.memcpy_htod(ctx, a, &[1], None).is_err());
        // Freeing by an interior pointer is refused.
        assert!(g.mem_free(ctx, b + 8).is_err());
    }

    /// An allocation moved to another context is that context's, bytes
    /// and all, and no longer the first's; it moves back unchanged, also
    /// out of a context a fault made sticky.
    #[test]
    fn allocations_move_between_contexts_whole() {
        let mut g = gpu(&SimDevice::private());
        assert!(g.moves_memory());
        let (a, b) = (
            g.create_context().expect("context"),
            g.create_context().expect("context"),
        );
        let p = g.mem_alloc(a, 1000).expect("alloc");
        g.memcpy_htod(a, p, &[7; 1000], None).expect("fill");
        g.mem_move(a, b, p).expect("move");
        assert!(g.memcpy_htod(a, p, &[1], None).is_err());
        let mut back = [0u8; 1000];
        g.memcpy_dtoh(b, &mut back, p, None)
            .expect("read where it went");
        assert_eq!(back, [7; 1000]);
        g.memcpy_htod(b, p + 10, &[9], None)
            .expect("write where it went");
        // Its requested size went with it: past it, copies are refused.
        assert!(g.memcpy_htod(b, p + 999, &[1, 2], None).is_err());
        assert!(g.mem_move(a, b, p).is_err(), "no longer the first's");
        assert!(g.mem_move(b, a, p + 8).is_err(), "an interior pointer");
        g.set_sticky(b, &ExecError::Invalid("a fault"));
        g.mem_move(b, a, p).expect("back, from a sticky context");
        g.memcpy_dtoh(a, &mut back, p, None).expect("read");
        assert_eq!((back[9], back[10], back[11]), (7, 9, 7));
        g.mem_free(a, p).expect("free");
    }

    #[test]
    fn virtual_memory_moves_between_contexts_sticky_or_not_and_never_while_mapped() {
        let mut g = gpu(&SimDevice::private());
        let (a, b) = (
            g.create_context().expect("context"),
            g.create_context().expect("context"),
        );
        let bytes = fairgpu_protocol::cuda::VMM_GRANULARITY;
        let m = g.phys_create(a, bytes).expect("create");
        // Into a sticky context and out again: the memory is never lost.
        g.set_sticky(b, &ExecError::Invalid("a fault"));
        g.phys_move(a, b, m).expect("into a sticky context");
        assert!(g.phys_move(a, b, m).is_err(), "no longer the first's");
        g.phys_move(b, a, m).expect("out of a sticky context");
        assert!(
            g.phys_move(a, CtxId(u64::MAX), m).is_err(),
            "no such context"
        );
        let addr = g.va_reserve(a, bytes, bytes).expect("reserve");
        g.map(a, addr, bytes, 0, m).expect("map");
        assert!(
            matches!(g.phys_move(a, b, m), Err(ExecError::Unsupported(_))),
            "mapped"
        );
        g.unmap(a, addr, bytes).expect("unmap");
        g.phys_release(a, m).expect("release where it is");
        assert!(g.phys_release(a, m).is_err(), "released once");
    }

    #[test]
    fn modules_from_ptx_and_fatbin() {
        let mut g = gpu(&SimDevice::private());
        let ctx = g.create_context().expect("context");
        for image in [
            VECADD_PTX.as_bytes().to_vec(),
            fatbin(VECADD_PTX.as_bytes(), 0),
        ] {
            let m = g.module_load(ctx, &image).expect("load");
            let (f1, layout) = g.function(ctx, m, "_Z6vecAddPKfS0_Pfi").expect("function");
            assert_eq!(layout, vecadd_layout());
            let (f2, _) = g.function(ctx, m, "_Z6vecAddPKfS0_Pfi").expect("function");
            assert_eq!(f1, f2);
            let (_, layout) = g.function(ctx, m, "_Z5applyc6ParamsPd").expect("function");
            assert_eq!(ParamInfo::packed_size(&layout), 40);
            assert_eq!(
                g.function(ctx, m, "vecAdd"),
                Err(ExecError::NotFound("vecAdd".into()))
            );
            g.module_unload(ctx, m).expect("unload");
            assert!(g.function(ctx, m, "_Z6vecAddPKfS0_Pfi").is_err());
            assert!(g
                .launch(ctx, f1, &LC, &[0; 28], None)
                .is_err_and(|e| e == ExecError::Invalid("function")));
        }
        let compressed = fatbin(VECADD_PTX.as_bytes(), 0x2000);
        let Err(ExecError::InvalidImage(msg)) = g.module_load(ctx, &compressed) else {
            panic!("a fatbin whose compressed PTX cannot be decompressed loaded");
        };
        assert!(msg.contains("no PTX entry could be read or decompressed"));
        assert!(matches!(
            g.module_load(ctx, b"MZ\x90\0"),
            Err(ExecError::InvalidImage(_))
        ));
    }

    #[test]
    fn timing_only_kernels_take_their_configured_time() {
        let cfg = SimConfig {
            kernels: vec![KernelCost {
                name: "vecAdd".into(),
                duration_us: Some(5.0),
                duration_param: None,
                duration_hash: false,
                fault: false,
                execute: Some(false),
            }],
            ..SimConfig::default()
        };
        let mut g = SimGpu::new(cfg, SimDevice::private_virtual(0)).expect("gpu");
        let ctx = g.create_context().expect("context");
        let m = g.module_load(ctx, VECADD_PTX.as_bytes()).expect("load");
        let (f, _) = g.function(ctx, m, "_Z6vecAddPKfS0_Pfi").expect("function");
        assert!(g.launch(ctx, f, &LC, &[0; 27], None).is_err());
        g.launch(ctx, f, &LC, &[0; 28], None).expect("launch");
        g.launch(ctx, f, &LC, &[0; 28], None).expect("launch");
        assert_eq!(g.gpu_time_ns(), 10_000);
        assert_eq!(g.executed(), Executed::default(), "nothing executed");
    }

    #[test]
    fn two_executors_share_one_device() {
        let dev = SimDevice::private_virtual(1_000);
        let (mut a, mut b) = (gpu(&dev), gpu(&dev));
        let (ca, fa) = spin_ctx(&mut a);
        let (cb, fb) = spin_ctx(&mut b);
        let mut kernels = Vec::new(); // (duration, event recorded after it)
        for i in 0..6u64 {
            let (g, ctx, f) = if i % 2 == 0 {
                (&mut a, ca, fa)
            } else {
                (&mut b, cb, fb)
            };
            let d = (i + 1) * 100_000;
            spin(g, ctx, f, d, None);
            let e = g.event_create(ctx, 0).expect("event");
            g.event_record(ctx, e, None).expect("record");
            let end = g.event_time_ns(ctx, e).expect("event").expect("recorded");
            kernels.push((end - d, end));
        }
        assert_eq!(a.gpu_time_ns(), 100_000 * (1 + 3 + 5));
        assert_eq!(b.gpu_time_ns(), 100_000 * (2 + 4 + 6));
        assert_eq!(dev.busy_total_ns(), 100_000 * 21);
        // Kernels ran one at a time, in launch order, back to back.
        assert_eq!(kernels[0].0, 1_000);
        for w in kernels.windows(2) {
            assert_eq!(w[0].1, w[1].0, "{kernels:?}");
        }
    }

    #[test]
    fn concurrent_workers_never_overlap_on_the_device() {
        let dev = SimDevice::private();
        let workers: Vec<_> = (0..2u64)
            .map(|w| {
                let dev = dev.clone();
                std::thread::spawn(move || {
                    let mut g = gpu(&dev);
                    let (ctx, f) = spin_ctx(&mut g);
                    let s = g.stream_create(ctx, 0).expect("stream");
                    let mut out = Vec::new();
                    for i in 0..20u64 {
                        let d = 20_000 + 7_000 * ((w + i) % 5);
                        spin(&mut g, ctx, f, d, Some(s));
                        let e = g.event_create(ctx, 0).expect("event");
                        g.event_record(ctx, e, Some(s)).expect("record");
                        let end = g.event_time_ns(ctx, e).expect("event").expect("recorded");
                        out.push((end - d, end));
                    }
                    g.synchronize(ctx).expect("sync");
                    (out, g.gpu_time_ns())
                })
            })
            .collect();
        let mut all = Vec::new();
        let mut total = 0;
        for w in workers {
            let (k, t) = w.join().expect("worker");
            assert_eq!(t, k.iter().map(|(s, e)| e - s).sum::<u64>());
            total += t;
            all.extend(k);
        }
        all.sort_unstable();
        for w in all.windows(2) {
            assert!(w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
        }
        assert_eq!(dev.busy_total_ns(), total);
    }

    #[test]
    fn events_measure_modelled_time_exactly() {
        let mut g = gpu(&SimDevice::private_virtual(5 * MS));
        let (ctx, f) = spin_ctx(&mut g);
        let s = g.stream_create(ctx, 0).expect("stream");
        let (e0, e1) = (
            g.event_create(ctx, 0).expect("e"),
            g.event_create(ctx, 0).expect("e"),
        );
        let no_timing = Err(ExecError::Driver {
            call: "cuEventElapsedTime",
            status: fairgpu_protocol::Status::INVALID_HANDLE,
        });
        assert_eq!(g.event_elapsed_ms(ctx, e0, e1), no_timing);
        // Never recorded: complete.
        assert_eq!(g.event_query(ctx, e0), Ok(()));
        g.event_record(ctx, e0, Some(s)).expect("record");
        spin(&mut g, ctx, f, 2 * MS, Some(s));
        g.event_record(ctx, e1, Some(s)).expect("record");
        assert_eq!(g.event_query(ctx, e1), Err(ExecError::NotReady));
        assert_eq!(g.event_elapsed_ms(ctx, e0, e1), Err(ExecError::NotReady));
        g.event_synchronize(ctx, e1).expect("sync");
        assert_eq!(g.event_query(ctx, e1), Ok(()));
        let ms = g.event_elapsed_ms(ctx, e0, e1).expect("elapsed");
        assert!((ms - 2.0).abs() < 1e-3, "{ms}");
        assert!((g.event_elapsed_ms(ctx, e1, e0).expect("elapsed") + 2.0).abs() < 1e-3);

        let nt = g.event_create(ctx, EVENT_DISABLE_TIMING).expect("event");
        g.event_record(ctx, nt, Some(s)).expect("record");
        assert_eq!(g.event_elapsed_ms(ctx, e0, nt), no_timing);
        assert!(g.event_create(ctx, 0x100).is_err());
    }

    #[test]
    fn stream_priorities_are_taken_within_the_range() {
        let dev = SimDevice::private_virtual(0);
        let mut g = gpu(&dev);
        let (ctx, f) = spin_ctx(&mut g);
        assert_eq!(
            g.stream_priority_range(ctx),
            Ok((0, SIM_GREATEST_STREAM_PRIORITY))
        );
        assert!(g.stream_priority_range(CtxId(9999)).is_err());
        for p in SIM_GREATEST_STREAM_PRIORITY..=0 {
            let s = g
                .stream_create_with_priority(ctx, STREAM_NON_BLOCKING, p)
                .expect("in range");
            spin(&mut g, ctx, f, MS, Some(s));
            g.stream_synchronize(ctx, Some(s)).expect("sync");
        }
        // Outside it (the caller clamps) or with bad flags: refused.
        for (flags, p) in [(0, 1), (0, SIM_GREATEST_STREAM_PRIORITY - 1), (0x4, -1)] {
            assert!(g.stream_create_with_priority(ctx, flags, p).is_err());
        }
    }

    #[test]
    fn stream_query_and_synchronize() {
        let dev = SimDevice::private_virtual(0);
        let mut g = gpu(&dev);
        let (ctx, f) = spin_ctx(&mut g);
        let s = g.stream_create(ctx, 0).expect("stream");
        assert_eq!(g.stream_query(ctx, Some(s)), Ok(()));
        spin(&mut g, ctx, f, 3 * MS, Some(s));
        assert_eq!(g.stream_query(ctx, Some(s)), Err(ExecError::NotReady));
        assert_eq!(g.stream_query(ctx, None), Err(ExecError::NotReady));
        assert_eq!(
            g.completed_ago(ctx),
            Some(std::time::Duration::ZERO),
            "not done yet"
        );
        g.stream_synchronize(ctx, Some(s)).expect("sync");
        assert_eq!(dev.now_ns(), 3 * MS);
        // The device's own completion instant: the waiter's delay does not
        // count (the virtual clock moves on without work).
        dev.wait_until(5 * MS);
        assert_eq!(
            g.completed_ago(ctx),
            Some(std::time::Duration::from_millis(2))
        );
        assert_eq!(g.stream_query(ctx, Some(s)), Ok(()));
        assert!(g.stream_query(ctx, Some(StreamId(999))).is_err());
        g.stream_destroy(ctx, s).expect("destroy");
        assert!(g.stream_destroy(ctx, s).is_err());
        assert!(g.stream_create(ctx, 0x4).is_err());
    }

    #[test]
    fn synchronize_sleeps_on_the_real_clock() {
        let mut g = gpu(&SimDevice::private());
        let (ctx, f) = spin_ctx(&mut g);
        let s = g.stream_create(ctx, 0).expect("stream");
        let (e0, e1) = (
            g.event_create(ctx, 0).expect("e"),
            g.event_create(ctx, 0).expect("e"),
        );
        let t = std::time::Instant::now();
        g.event_record(ctx, e0, Some(s)).expect("record");
        spin(&mut g, ctx, f, 3 * MS, Some(s));
        g.event_record(ctx, e1, Some(s)).expect("record");
        g.stream_synchronize(ctx, Some(s)).expect("sync");
        assert!(t.elapsed() >= std::time::Duration::from_millis(3));
        assert_eq!(g.stream_query(ctx, Some(s)), Ok(()));
        assert!(g.event_elapsed_ms(ctx, e0, e1).expect("elapsed") >= 3.0 - 1e-3);
        assert_eq!(g.gpu_time_ns(), 3 * MS);
    }

    #[test]
    fn a_marked_synchronization_waits_for_the_work_issued_before_it_alone() {
        use crate::{SyncPending, SyncTarget};
        // A virtual clock moves only by waiting: nothing to mark.
        let mut v = gpu(&SimDevice::private_virtual(0));
        let (vctx, _) = spin_ctx(&mut v);
        assert_eq!(v.sync_mark(vctx, SyncTarget::Context), None);

        let mut g = gpu(&SimDevice::private());
        let (ctx, f) = spin_ctx(&mut g);
        let a = g.stream_create(ctx, STREAM_NON_BLOCKING).expect("stream");
        let b = g.stream_create(ctx, STREAM_NON_BLOCKING).expect("stream");
        let e = g.event_create(ctx, 0).expect("event");
        spin(&mut g, ctx, f, 3 * MS, Some(a));
        g.event_record(ctx, e, Some(a)).expect("record");
        let whole = g.sync_mark(ctx, SyncTarget::Context).expect("real clock");
        let on_a = g.sync_mark(ctx, SyncTarget::Stream(Some(a))).expect("a");
        let event = g.sync_mark(ctx, SyncTarget::Event(e)).expect("event");
        assert_eq!(whole, on_a, "a's work is all the context's so far");
        assert_eq!(event, on_a);
        // Work issued after the marks (another thread's): a minute of it.
        spin(&mut g, ctx, f, 60_000 * MS, Some(b));
        g.sync_marked(ctx, whole).expect("marked synchronization");
        assert_eq!(g.sync_pending(ctx, &on_a), SyncPending::Done);
        assert_eq!(
            g.stream_query(ctx, Some(a)),
            Ok(()),
            "the marked work is done"
        );
        assert_eq!(
            g.stream_query(ctx, Some(b)),
            Err(ExecError::NotReady),
            "the later work was not waited for"
        );
        // Marked now, the context's synchronization waits for b's minute.
        let later = g.sync_mark(ctx, SyncTarget::Context).expect("marked");
        assert!(
            matches!(g.sync_pending(ctx, &later), SyncPending::In(d) if d > std::time::Duration::from_secs(1))
        );
        g.sync_forget(ctx, later);
    }

    #[test]
    fn the_runaway_guard_fails_the_context_from_the_limit_on_not_before() {
        let dev = SimDevice::private_virtual(0);
        let mut g = gpu(&dev);
        g.set_request_limit(Some(std::time::Duration::from_millis(20)));
        let (ctx, f) = spin_ctx(&mut g);
        let (other, of) = spin_ctx(&mut g);
        // A minute asked for: the launch succeeds, the kernel runs.
        spin(&mut g, ctx, f, 60_000 * MS, None);
        assert_eq!(g.runaways(), 1);
        assert_eq!(g.stream_query(ctx, None), Err(ExecError::NotReady));
        g.mem_alloc(ctx, 8)
            .expect("still running: the context works");
        // The synchronize returns at the limit, with the timeout.
        let r = g.synchronize(ctx);
        assert_eq!(r.expect_err("timed out").status(), LAUNCH_TIMEOUT);
        assert_eq!(dev.now_ns(), 20 * MS, "waited exactly the limit");
        assert_eq!(g.gpu_time_ns(), 20 * MS, "charged the limit");
        let later = g.mem_alloc(ctx, 8).map(drop);
        assert_eq!(later.expect_err("sticky").status(), LAUNCH_TIMEOUT);
        // Another context queues behind the ended kernel, and is untouched.
        spin(&mut g, other, of, MS, None);
        g.synchronize(other).expect("the other context");
        assert_eq!(dev.now_ns(), 21 * MS);
    }

    #[test]
    fn null_stream_orders_with_blocking_streams_only() {
        let mut g = gpu(&SimDevice::private_virtual(0));
        let (ctx, f) = spin_ctx(&mut g);
        let blocking = g.stream_create(ctx, 0).expect("stream");
        let other = g.stream_create(ctx, 0).expect("stream");
        let free = g.stream_create(ctx, STREAM_NON_BLOCKING).expect("stream");
        let ev = |g: &mut SimGpu, s| {
            let e = g.event_create(ctx, 0).expect("event");
            g.event_record(ctx, e, s).expect("record");
            g.event_time_ns(ctx, e).expect("event").expect("recorded")
        };
        spin(&mut g, ctx, f, MS, Some(blocking));
        // A non-blocking stream does not wait for anything.
        assert_eq!(ev(&mut g, Some(free)), 0);
        // The NULL stream waits for the blocking stream's kernel...
        assert_eq!(ev(&mut g, None), MS);
        // ...and a blocking stream issued after the NULL stream waits for it.
        assert_eq!(ev(&mut g, Some(other)), MS);
        assert_eq!(ev(&mut g, Some(free)), 0);

        // stream_wait_event raises a stream's ready time to the event's.
        spin(&mut g, ctx, f, 2 * MS, Some(free));
        let e = g.event_create(ctx, 0).expect("event");
        g.event_record(ctx, e, Some(free)).expect("record");
        let fresh = g.stream_create(ctx, STREAM_NON_BLOCKING).expect("stream");
        assert_eq!(ev(&mut g, Some(fresh)), 0);
        g.stream_wait_event(ctx, Some(fresh), e).expect("wait");
        assert_eq!(ev(&mut g, Some(fresh)), 3 * MS);

        g.synchronize(ctx).expect("sync");
        assert_eq!(g.sim_device().now_ns(), 3 * MS);
    }

    #[test]
    fn device_properties() {
        let g = gpu(&SimDevice::private());
        let p = g.device();
        assert_eq!(p.name, "fairgpu SimGpu");
        assert_eq!(p.total_mem, 16 << 30);
        assert_eq!(p.driver_version, 12080);
        assert_eq!(p.attribute(attr::MULTIPROCESSOR_COUNT), Some(132));
        assert_eq!(p.attribute(attr::MAX_THREADS_PER_BLOCK), Some(1024));
        assert_eq!(p.attribute(attr::COMPUTE_CAPABILITY_MAJOR), Some(9));
        assert_eq!(p.attribute(5), Some(i32::MAX));
        assert_eq!(p.attribute(83), Some(1));
        assert_eq!(p.attribute(89), Some(0));
        assert_eq!(p.attribute(9999), None);
        assert_eq!(p.uuid, uuid_from_name("fairgpu SimGpu"));
        assert_ne!(p.uuid, uuid_from_name("fairgpu SimGpu 2"));
        assert!(SimGpu::new(
            SimConfig {
                sm_count: 0,
                ..SimConfig::default()
            },
            SimDevice::private()
        )
        .is_err());
    }

    proptest! {
        #[test]
        fn module_load_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut g = gpu(&SimDevice::private());
            let ctx = g.create_context().expect("context");
            match g.module_load(ctx, &bytes) {
                Ok(_) | Err(ExecError::InvalidImage(_)) => {}
                Err(e) => prop_assert!(false, "unexpected {e:?}"),
            }
        }
    }

    #[test]
    fn a_faulting_kernel_poisons_its_context_only() {
        let cfg = SimConfig {
            kernels: vec![KernelCost {
                name: "fault".into(),
                duration_us: None,
                duration_param: None,
                duration_hash: false,
                fault: true,
                execute: None,
            }],
            ..SimConfig::default()
        };
        let mut g = SimGpu::new(cfg, SimDevice::private()).expect("sim");
        let (a, b) = (g.create_context().unwrap(), g.create_context().unwrap());
        let ptx = ".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry fault(\n.param .u64 p\n)\n{\nret;\n}\n";
        let m = g.module_load(a, ptx.as_bytes()).unwrap();
        let (f, _) = g.function(a, m, "fault").unwrap();
        let lc = LaunchConfig::new([1; 3], [1; 3], 0);
        let illegal = |r: ExecResult<()>| {
            r.is_err_and(|e| e.status() == fairgpu_protocol::Status::ILLEGAL_ADDRESS)
        };
        assert!(illegal(g.launch(a, f, &lc, &[0; 8], None)));
        assert!(illegal(g.synchronize(a)), "sticky");
        assert!(g
            .mem_alloc(a, 64)
            .is_err_and(|e| e.status() == fairgpu_protocol::Status::ILLEGAL_ADDRESS));
        // Another context is untouched, and destroying the bad one works.
        let p = g.mem_alloc(b, 64).expect("other context works");
        g.memset(b, p, 7, 1, 64, None).expect("memset");
        g.destroy_context(a);
        g.synchronize(b).expect("still fine");
    }

    /// Hand-written PTX in the form nvcc emits: `fill(out, n)` stores
    /// `3 * i` to `out[i]` for every thread `i < n`; `forever` never ends;
    /// `trapper` traps.
    const FILL_PTX: &str = ".version 7.0\n.target sm_50\n.address_size 64\n\n\
        .visible .entry fill(\n\t.param .u64 fill_param_0,\n\t.param .u32 fill_param_1\n)\n{\n\
        \t.reg .pred %p<2>;\n\t.reg .b32 %r<7>;\n\t.reg .b64 %rd<5>;\n\n\
        \tld.param.u64 %rd1, [fill_param_0];\n\tld.param.u32 %r2, [fill_param_1];\n\
        \tmov.u32 %r3, %ctaid.x;\n\tmov.u32 %r4, %ntid.x;\n\tmov.u32 %r5, %tid.x;\n\
        \tmad.lo.s32 %r1, %r3, %r4, %r5;\n\tsetp.ge.u32 %p1, %r1, %r2;\n\t@%p1 bra $L__done;\n\
        \tcvta.to.global.u64 %rd2, %rd1;\n\tmul.wide.u32 %rd3, %r1, 4;\n\tadd.s64 %rd4, %rd2, %rd3;\n\
        \tmul.lo.s32 %r6, %r1, 3;\n\tst.global.u32 [%rd4], %r6;\n$L__done:\n\tret;\n}\n\n\
        .visible .entry forever()\n{\n$L__top:\n\tbra.uni $L__top;\n}\n\n\
        .visible .entry trapper()\n{\n\ttrap;\n}\n";
    /// A module whose only kernel uses an instruction no interpreter of
    /// ours implements (Hopper's warpgroup MMA fence).
    const WGMMA_PTX: &str = ".version 8.0\n.target sm_90a\n.address_size 64\n\n\
        .visible .entry hopper(\n\t.param .u64 hopper_param_0\n)\n{\n\
        \twgmma.fence.sync.aligned;\n\tret;\n}\n";

    /// Function attributes describe the PTX SimGpu runs: a fatbin's
    /// compute_100 PTX reports PTX_VERSION 100 on this 9.0 device, so host
    /// code tuning itself by it (CUB) matches the device code. Reporting the
    /// device's 9.0 gave CuPy's CUB reductions wrong sums.
    #[test]
    fn function_attributes_describe_the_code_that_runs() {
        let ptx = |target: &str| {
            format!(
                ".version 8.0\n{target}.address_size 64\n\
                 .const .align 4 .b8 table[40];\n\
                 .visible .entry k(.param .u64 p)\n{{\n\
                 .reg .b32 %r<4>;\n.shared .align 4 .b8 tile[1200];\n.local .align 8 .b8 spill[24];\n\
                 mov.u32 %r1, %tid.x;\nret;\n}}\n"
            )
        };
        let mut g = gpu(&SimDevice::private());
        let ctx = g.create_context().unwrap();
        for (target, want) in [(".target sm_100\n", 100), (".target sm_75\n", 75), ("", 90)] {
            let m = g.module_load(ctx, ptx(target).as_bytes()).unwrap();
            let (f, _) = g.function(ctx, m, "k").unwrap();
            let at = |g: &mut SimGpu, a| g.function_attribute(ctx, f, a).unwrap();
            assert_eq!(at(&mut g, func_attr::PTX_VERSION), want, "{target:?}");
            assert_eq!(at(&mut g, func_attr::BINARY_VERSION), want, "{target:?}");
            assert_eq!(at(&mut g, func_attr::SHARED_SIZE_BYTES), 1200);
            assert_eq!(at(&mut g, func_attr::CONST_SIZE_BYTES), 40);
            assert_eq!(at(&mut g, func_attr::LOCAL_SIZE_BYTES), 24);
            assert_eq!(at(&mut g, func_attr::MAX_THREADS_PER_BLOCK), 1024);
            assert_eq!(
                at(&mut g, func_attr::MAX_DYNAMIC_SHARED_SIZE_BYTES),
                49152 - 1200
            );
            assert_eq!(at(&mut g, func_attr::PREFERRED_SHARED_MEMORY_CARVEOUT), -1);
        }
        // A fatbin whose only PTX is for compute_100 runs it, and says so.
        let fb = fatbin(ptx(".target sm_100\n").as_bytes(), 0);
        let m = g.module_load(ctx, &fb).unwrap();
        let (f, _) = g.function(ctx, m, "k").unwrap();
        assert_eq!(
            g.function_attribute(ctx, f, func_attr::PTX_VERSION)
                .unwrap(),
            100
        );
        assert!(matches!(
            g.function_attribute(ctx, f, 16),
            Err(ExecError::Invalid(_))
        ));
        assert!(matches!(
            g.function_attribute(ctx, FnId(999_999), 0),
            Err(ExecError::Invalid(_))
        ));
    }

    /// Module variables are context memory at their own addresses: copies
    /// reach them, kernels see the bytes (by symbol and through the
    /// address), they cost no device memory, cannot be freed as an
    /// allocation, and their addresses go with the module.
    #[test]
    fn module_variables_live_at_their_own_addresses() {
        let ptx = ".version 8.0\n.target sm_80\n.address_size 64\n\
            .global .align 8 .u64 var[2] = {11, 22};\n\
            .visible .entry k(.param .u64 p)\n{\n.reg .b64 %rd<4>;\n\
            ld.param.u64 %rd1, [p];\nld.global.u64 %rd2, [var+8];\n\
            st.global.u64 [%rd1], %rd2;\nmov.u64 %rd3, 99;\nst.global.u64 [var], %rd3;\nret;\n}\n";
        let mut g = gpu(&SimDevice::private());
        let ctx = g.create_context().unwrap();
        let free = g.device_free_mem().unwrap();
        let m = g.module_load(ctx, ptx.as_bytes()).unwrap();
        let (addr, size) = g.module_global(ctx, m, "var").unwrap();
        assert_eq!(size, 16);
        assert!(matches!(
            g.module_global(ctx, m, "nope"),
            Err(ExecError::NotFound(_))
        ));
        assert_eq!(
            g.device_free_mem().unwrap(),
            free,
            "variables are not allocations"
        );
        assert!(g.mem_free(ctx, addr).is_err());
        g.memcpy_htod(ctx, addr + 8, &77u64.to_le_bytes(), None)
            .unwrap();
        let (k, _) = g.function(ctx, m, "k").unwrap();
        let lc = LaunchConfig::new([1, 1, 1], [1, 1, 1], 0);
        // Its own address as the kernel's pointer: the alias reaches the
        // variables while the kernel runs with them.
        g.launch(ctx, k, &lc, &addr.to_le_bytes(), None).unwrap();
        let mut b = [0u8; 16];
        g.memcpy_dtoh(ctx, &mut b, addr, None).unwrap();
        assert_eq!(
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            99,
            "stored by symbol"
        );
        assert_eq!(
            u64::from_le_bytes(b[8..].try_into().unwrap()),
            77,
            "written by the host"
        );
        let out = g.mem_alloc(ctx, 8).unwrap();
        g.launch(ctx, k, &lc, &out.to_le_bytes(), None).unwrap();
        g.memcpy_dtoh(ctx, &mut b[..8], out, None).unwrap();
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), 77);
        g.module_unload(ctx, m).unwrap();
        assert!(
            g.memcpy_dtoh(ctx, &mut b, addr, None).is_err(),
            "gone with the module"
        );
        // A new module gets fresh variables (the slot is reused).
        let m = g.module_load(ctx, ptx.as_bytes()).unwrap();
        let (again, _) = g.module_global(ctx, m, "var").unwrap();
        assert_eq!(again, addr);
        g.memcpy_dtoh(ctx, &mut b, again, None).unwrap();
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), 11);
    }

    /// Two contexts' module variables never share an address (one address
    /// space for the VM, as UVA gives a process), and a destroyed
    /// context's slots serve later modules.
    #[test]
    fn module_variables_of_two_contexts_have_distinct_addresses() {
        let ptx = ".version 8.0\n.target sm_80\n.address_size 64\n\
            .global .align 8 .u64 var = 5;\n\
            .visible .entry k()\n{\nret;\n}\n";
        let mut g = gpu(&SimDevice::private());
        let a = g.create_context().unwrap();
        let b = g.create_context().unwrap();
        let ma = g.module_load(a, ptx.as_bytes()).unwrap();
        let mb = g.module_load(b, ptx.as_bytes()).unwrap();
        let (va, _) = g.module_global(a, ma, "var").unwrap();
        let (vb, _) = g.module_global(b, mb, "var").unwrap();
        assert_ne!(va, vb, "each context's variable at its own address");
        g.memcpy_htod(a, va, &9u64.to_le_bytes(), None).unwrap();
        let mut bytes = [0u8; 8];
        g.memcpy_dtoh(b, &mut bytes, vb, None).unwrap();
        assert_eq!(u64::from_le_bytes(bytes), 5, "b's variable is b's");
        assert!(
            g.memcpy_dtoh(b, &mut bytes, va, None).is_err(),
            "a's variable is not b's memory"
        );
        g.destroy_context(a);
        let c = g.create_context().unwrap();
        let mc = g.module_load(c, ptx.as_bytes()).unwrap();
        let (vc, _) = g.module_global(c, mc, "var").unwrap();
        assert_eq!(vc, va, "the destroyed context's slot is used again");
        g.memcpy_dtoh(c, &mut bytes, vc, None).unwrap();
        assert_eq!(u64::from_le_bytes(bytes), 5, "fresh variables");
    }

    /// Launches are held to MAX_DYNAMIC_SHARED_SIZE_BYTES: 48 KiB less the
    /// static shared memory by default, up to the opt-in limit once set.
    #[test]
    fn dynamic_shared_memory_is_held_to_the_function_attribute() {
        let mut g = gpu(&SimDevice::private());
        let ctx = g.create_context().unwrap();
        let m = g.module_load(ctx, FILL_PTX.as_bytes()).unwrap();
        let (fill, _) = g.function(ctx, m, "fill").unwrap();
        let out = g.mem_alloc(ctx, 64 * 4).unwrap();
        let launch = |g: &mut SimGpu, shared_mem| {
            let lc = LaunchConfig::new([1, 1, 1], [64, 1, 1], shared_mem);
            g.launch(ctx, fill, &lc, &fill_params(out, 64), None)
        };
        launch(&mut g, 49152).expect("the default limit");
        assert!(matches!(launch(&mut g, 49153), Err(ExecError::Invalid(_))));
        let max = func_attr::MAX_DYNAMIC_SHARED_SIZE_BYTES;
        assert!(
            g.set_function_attribute(ctx, fill, max, 232_449).is_err(),
            "above opt-in"
        );
        assert!(g.set_function_attribute(ctx, fill, max, -1).is_err());
        assert!(
            g.set_function_attribute(ctx, fill, func_attr::NUM_REGS, 8)
                .is_err(),
            "read-only"
        );
        g.set_function_attribute(ctx, fill, max, 100_000).unwrap();
        assert_eq!(g.function_attribute(ctx, fill, max).unwrap(), 100_000);
        launch(&mut g, 100_000).expect("opted in");
        assert!(matches!(
            launch(&mut g, 100_001),
            Err(ExecError::Invalid(_))
        ));
        assert_eq!(read_u32s(&mut g, ctx, out, 3), [0, 3, 6]);
    }

    fn fill_params(out: DevPtr, n: u32) -> Vec<u8> {
        let mut p = out.to_le_bytes().to_vec();
        p.extend_from_slice(&n.to_le_bytes());
        p
    }

    fn read_u32s(g: &mut SimGpu, ctx: CtxId, ptr: DevPtr, n: usize) -> Vec<u32> {
        let mut b = vec![0u8; n * 4];
        g.memcpy_dtoh(ctx, &mut b, ptr, None).expect("dtoh");
        b.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()
    }

    /// The virtual-memory API: memory mapped into a reserved range is what
    /// kernels and copies reach once access is set, keeps its bytes across
    /// unmapping, and counts as device memory until released; before access
    /// is set a kernel's store faults.
    #[test]
    fn virtual_memory_mappings_hold_their_memory() {
        const GRAN: u64 = VMM_GRANULARITY;
        let mut g = gpu(&SimDevice::private_virtual(0));
        assert_eq!(g.device().attribute(102), Some(1));
        let ctx = g.create_context().expect("context");
        let m = g.module_load(ctx, FILL_PTX.as_bytes()).unwrap();
        let (fill, _) = g.function(ctx, m, "fill").unwrap();
        let free0 = g.device_free_mem().unwrap();
        let base = g.va_reserve(ctx, 2 * GRAN, 0).unwrap();
        assert_eq!(base % GRAN, 0);
        assert_eq!(
            g.device_free_mem().unwrap(),
            free0,
            "a reservation is no memory"
        );
        let a = g.phys_create(ctx, GRAN).unwrap();
        let b = g.phys_create(ctx, GRAN).unwrap();
        assert_eq!(g.device_free_mem().unwrap(), free0 - 2 * GRAN);
        g.map(ctx, base, GRAN, 0, a).unwrap();
        g.map(ctx, base + GRAN, GRAN, 0, b).unwrap();
        // Part of a memory, or a second mapping of one: refused here.
        let other = g.va_reserve(ctx, GRAN, 0).unwrap();
        assert_eq!(
            g.map(ctx, other, GRAN, 0, a).unwrap_err().status(),
            Status::NOT_SUPPORTED
        );
        g.set_access(ctx, base, 2 * GRAN, 3).unwrap();
        let lc = LaunchConfig::new([1, 1, 1], [64, 1, 1], 0);
        g.launch(ctx, fill, &lc, &fill_params(base + GRAN, 64), None)
            .unwrap();
        let want: Vec<u32> = (0..64).map(|i| i * 3).collect();
        assert_eq!(read_u32s(&mut g, ctx, base + GRAN, 64), want);
        // Mapped again elsewhere, the memory keeps its bytes.
        g.unmap(ctx, base + GRAN, GRAN).unwrap();
        g.map(ctx, other, GRAN, 0, b).unwrap();
        g.set_access(ctx, other, GRAN, 3).unwrap();
        assert_eq!(read_u32s(&mut g, ctx, other, 64), want);
        // Access revoked: a kernel's store faults (sticky, as on a GPU).
        g.set_access(ctx, base, GRAN, 0).unwrap();
        assert!(g.memcpy_htod(ctx, base, &[1, 2, 3, 4], None).is_err());
        g.launch(ctx, fill, &lc, &fill_params(base, 64), None).ok();
        assert!(
            g.synchronize(ctx).is_err(),
            "a store into a mapping without access"
        );
        g.destroy_context(ctx);
        assert_eq!(g.device_free_mem().unwrap(), free0, "memory left behind");
    }

    /// `.maxntid` and `.reqntid`: launches outside them are refused with
    /// CUDA_ERROR_INVALID_VALUE and MAX_THREADS_PER_BLOCK reports them.
    #[test]
    fn launch_bounds_are_enforced_and_reported() {
        let ptx = ".version 7.0\n.target sm_50\n.address_size 64\n\
            .visible .entry capped() .maxntid 128, 1, 1 .minnctapersm 2\n{\n\tret;\n}\n\
            .visible .entry shaped() .reqntid 64, 2\n{\n\tret;\n}\n\
            .visible .entry free()\n{\n\tret;\n}\n";
        let mut g = gpu(&SimDevice::private_virtual(0));
        let ctx = g.create_context().expect("context");
        let m = g.module_load(ctx, ptx.as_bytes()).expect("load");
        let f = |g: &mut SimGpu, name| g.function(ctx, m, name).expect("function").0;
        let (capped, shaped, free) = (f(&mut g, "capped"), f(&mut g, "shaped"), f(&mut g, "free"));
        let lc = |block| LaunchConfig::new([1, 1, 1], block, 0);
        let max = func_attr::MAX_THREADS_PER_BLOCK;
        assert_eq!(g.function_attribute(ctx, capped, max), Ok(128));
        assert_eq!(g.function_attribute(ctx, shaped, max), Ok(128));
        assert_eq!(g.function_attribute(ctx, free, max), Ok(1024));
        g.launch(ctx, capped, &lc([128, 1, 1]), &[], None)
            .expect("within");
        g.launch(ctx, capped, &lc([32, 2, 2]), &[], None)
            .expect("within");
        let refused =
            |r: ExecResult<()>| assert_eq!(r.expect_err("refused").status(), Status::INVALID_VALUE);
        refused(g.launch(ctx, capped, &lc([256, 1, 1]), &[], None));
        g.launch(ctx, shaped, &lc([64, 2, 1]), &[], None)
            .expect("its shape");
        refused(g.launch(ctx, shaped, &lc([128, 1, 1]), &[], None));
        g.launch(ctx, free, &lc([1024, 1, 1]), &[], None)
            .expect("any");
        // Not sticky: the context still works.
        g.synchronize(ctx).expect("synchronize");
    }

    #[test]
    fn kernel_memory_is_the_allocations_to_the_end_of_their_granules() {
        let mut g = gpu(&SimDevice::private());
        let ctx = g.create_context().expect("context");
        let a = g.mem_alloc(ctx, 100).expect("alloc");
        let b = g.mem_alloc(ctx, 64).expect("alloc");
        let freed = g.mem_alloc(ctx, 64).expect("alloc");
        g.mem_free(ctx, freed).expect("free");
        let c = g.contexts.get_mut(&ctx.0).expect("context");
        let mut mem = Allocations {
            allocs: &mut c.allocs,
            textures: &c.textures,
            surfaces: &c.surfaces,
            heap: None,
            wrote: false,
        };
        use ptx::Memory as _;
        mem.write(a + 96, &[1, 2, 3, 4]).expect("last bytes of a");
        let mut buf = [0u8; 4];
        mem.read(a + 96, &mut buf).expect("read back");
        assert_eq!(buf, [1, 2, 3, 4]);
        mem.write(b, &[9; 64]).expect("all of b");
        // Past the 100 bytes asked for, to the end of a's 256-byte granule:
        // no fault, as on a GPU.
        mem.write(a + 100, &[5; 4]).expect("just past the end");
        mem.read(a + 252, &mut buf)
            .expect("the granule's last bytes");
        assert_eq!(buf, [0; 4]);
        let oob = |r: Result<(), ptx::Error>| {
            assert!(
                matches!(
                    r,
                    Err(ptx::Error::OutOfBounds {
                        space: "global",
                        ..
                    })
                ),
                "{r:?}"
            )
        };
        // Across the granule's end, the guard gap, a span across two
        // allocations, below the first, freed memory, the top of the
        // address space: no write lands there.
        oob(mem.write(a + 253, &[0; 4]));
        oob(mem.write(a + 256, &[1; 4]));
        oob(mem.write(b - 2, &[1; 4]));
        oob(mem.write(a - 4, &[1; 4]));
        oob(mem.write(freed, &[1]));
        // Reads there, near an allocation of the context (a stencil's
        // halo, as a GPU's pages are larger than its allocations), give
        // zeros; a read across an allocation's edge, or far from every
        // allocation, faults.
        for at in [a + 256, a + 300, a - 4, a - READ_SLACK, freed + 8, b + 256] {
            buf = [7; 4];
            mem.read(at, &mut buf).expect("a read near an allocation");
            assert_eq!(buf, [0; 4], "{at:#x}");
        }
        let mut lanes = [[7u8; 32]; 32];
        let mut addrs = [b; 32];
        addrs[3] = a - 64;
        addrs[5] = b + 4096;
        mem.read_lanes(u32::MAX, &addrs, 4, &mut lanes)
            .expect("lanes near allocations");
        assert_eq!(lanes[0][..4], [9; 4]);
        assert_eq!(lanes[3][..4], [0; 4]);
        assert_eq!(lanes[5][..4], [0; 4]);
        oob(mem.read(b - 2, &mut buf));
        oob(mem.read(a - READ_SLACK - 4, &mut buf));
        oob(mem.read(b + 256 + READ_SLACK, &mut buf));
        oob(mem.read(0, &mut buf));
        oob(mem.read(u64::MAX - 1, &mut buf));
        assert_eq!(
            mem.read(a + 254, &mut buf),
            Err(ptx::Error::OutOfBounds {
                space: "global",
                addr: a + 254,
                len: 4
            })
        );
        // Nothing outside the allocations was written, nothing inside
        // changed by the refused accesses.
        let mut all = vec![0u8; 100];
        g.memcpy_dtoh(ctx, &mut all, a, None).expect("dtoh");
        assert_eq!(&all[96..], &[1, 2, 3, 4]);
        assert!(all[..96].iter().all(|&x| x == 0));
        // Another context's allocations are not this context's memory.
        let other = g.create_context().expect("context");
        let c = g.contexts.get_mut(&other.0).expect("context");
        let mut mem = Allocations {
            allocs: &mut c.allocs,
            textures: &c.textures,
            surfaces: &c.surfaces,
            heap: None,
            wrote: false,
        };
        oob(mem.read(a, &mut buf));
    }

    #[test]
    fn executed_kernels_compute_and_cost_their_instructions() {
        let dev = SimDevice::private_virtual(0);
        let mut g = gpu(&dev);
        let ctx = g.create_context().expect("context");
        let m = g.module_load(ctx, FILL_PTX.as_bytes()).expect("load");
        let (fill, _) = g.function(ctx, m, "fill").expect("function");
        let n = 1000u32;
        let out = g.mem_alloc(ctx, u64::from(n) * 4).expect("alloc");
        let lc = LaunchConfig::new([4, 1, 1], [256, 1, 1], 0);
        g.launch(ctx, fill, &lc, &fill_params(out, n), None)
            .expect("launch");
        let want: Vec<u32> = (0..n).map(|i| 3 * i).collect();
        assert_eq!(read_u32s(&mut g, ctx, out, n as usize), want);
        let ex = g.executed();
        assert_eq!((ex.launches, ex.threads), (1, 1024));
        assert!(ex.instructions >= 1024, "{ex:?}");
        // Not in the cost model: the default base plus its instructions.
        let model = CostModel::new(&SimConfig::default());
        assert_eq!(g.gpu_time_ns(), model.executed_duration_ns(ex.instructions));
        assert_eq!(dev.busy_total_ns(), g.gpu_time_ns());
    }

    /// A large launch of a kernel whose blocks do not talk to each other
    /// runs on several host threads: the same memory, statistics, device
    /// time and errors as on one.
    #[test]
    fn large_launches_run_on_several_threads_with_the_results_of_one() {
        let run = |threads: u32| {
            let cfg = SimConfig {
                threads,
                ..SimConfig::default()
            };
            let mut g = SimGpu::new(cfg, SimDevice::private_virtual(0)).expect("gpu");
            let ctx = g.create_context().expect("context");
            let m = g.module_load(ctx, FILL_PTX.as_bytes()).expect("load");
            let (fill, _) = g.function(ctx, m, "fill").expect("function");
            // 2^18 threads, the last 1,000 of them past the end of `out`
            // (the kernel checks its bound).
            let n = (1u32 << 18) - 1000;
            let out = g.mem_alloc(ctx, u64::from(n) * 4).expect("alloc");
            let lc = LaunchConfig::new([1024, 1, 1], [256, 1, 1], 0);
            g.launch(ctx, fill, &lc, &fill_params(out, n), None)
                .expect("launch");
            let data = read_u32s(&mut g, ctx, out, n as usize);
            let ok = (g.executed(), g.gpu_time_ns());
            // The same kernel told the buffer is larger: blocks past its
            // granule fault, and the context with them.
            let err = g
                .launch(ctx, fill, &lc, &fill_params(out, 1 << 18), None)
                .and_then(|()| g.synchronize(ctx))
                .expect_err("faults")
                .status();
            (data, ok, err)
        };
        let (data, (ex, gpu_ns), err) = run(4);
        assert_eq!(
            data,
            (0..(1u32 << 18) - 1000).map(|i| 3 * i).collect::<Vec<_>>()
        );
        assert_eq!(ex.parallel_launches, 1, "{ex:?}");
        assert_eq!(err, Status::ILLEGAL_ADDRESS);
        let (data1, (ex1, gpu_ns1), err1) = run(1);
        assert_eq!(ex1.parallel_launches, 0);
        assert_eq!(data1, data);
        assert_eq!(
            (ex1.launches, ex1.instructions, ex1.threads, gpu_ns1),
            (ex.launches, ex.instructions, ex.threads, gpu_ns)
        );
        assert_eq!(err1, err);
    }

    /// The same launches with `fill` executed and timing-only give the
    /// same device times: execution never changes timing.
    #[test]
    fn timing_is_the_same_whether_kernels_execute_or_not() {
        let run = |execute: bool| {
            let cfg = SimConfig {
                kernels: vec![KernelCost {
                    name: "fill".into(),
                    duration_us: Some(7.0),
                    duration_param: None,
                    duration_hash: false,
                    fault: false,
                    execute: Some(execute),
                }],
                ..SimConfig::default()
            };
            let dev = SimDevice::private_virtual(1_000);
            let mut g = SimGpu::new(cfg, dev.clone()).expect("gpu");
            let ctx = g.create_context().expect("context");
            let m = g.module_load(ctx, FILL_PTX.as_bytes()).expect("load");
            let (fill, _) = g.function(ctx, m, "fill").expect("function");
            let sm = g.module_load(ctx, SPIN_PTX.as_bytes()).expect("load");
            let (spin_k, _) = g.function(ctx, sm, "_Z12fairgpu_spinm").expect("function");
            let out = g.mem_alloc(ctx, 4096).expect("alloc");
            let s = g.stream_create(ctx, 0).expect("stream");
            let mut times = Vec::new();
            for i in 0..4u32 {
                let e = g.event_create(ctx, 0).expect("event");
                let lc = LaunchConfig {
                    grid: [4, 1, 1],
                    ..LC
                };
                g.launch(ctx, fill, &lc, &fill_params(out, 32 * i), Some(s))
                    .expect("fill");
                spin(&mut g, ctx, spin_k, 3 * MS, Some(s));
                g.event_record(ctx, e, Some(s)).expect("record");
                times.push(g.event_time_ns(ctx, e).expect("event").expect("recorded"));
            }
            g.synchronize(ctx).expect("sync");
            let data = read_u32s(&mut g, ctx, out, 96);
            (
                times,
                g.gpu_time_ns(),
                dev.busy_total_ns(),
                data,
                g.executed(),
            )
        };
        let (t1, gpu1, busy1, data1, ex1) = run(true);
        let (t0, gpu0, busy0, data0, ex0) = run(false);
        assert_eq!(t1, t0);
        assert_eq!((gpu1, busy1), (gpu0, busy0));
        assert_eq!(gpu1, 4 * (7_000 + 3 * MS));
        let step = 7_000 + 3 * MS;
        assert_eq!(t1, (1..=4).map(|k| 1_000 + k * step).collect::<Vec<_>>());
        // Only the executed run wrote memory.
        assert_eq!(data1, (0..96).map(|i| 3 * i).collect::<Vec<u32>>());
        assert!(data0.iter().all(|&x| x == 0));
        assert_eq!(ex1.launches, 4);
        assert_eq!(ex0, Executed::default());
    }

    #[test]
    fn faulting_kernels_poison_their_context_only() {
        let cfg = SimConfig {
            max_instructions: 10_000,
            ..SimConfig::default()
        };
        let mut g = SimGpu::new(cfg, SimDevice::private_virtual(0)).expect("gpu");
        let status_of = |r: ExecResult<()>| r.expect_err("fails").status();
        let setup = |g: &mut SimGpu| {
            let ctx = g.create_context().expect("context");
            let m = g.module_load(ctx, FILL_PTX.as_bytes()).expect("load");
            let f = |g: &mut SimGpu, name| g.function(ctx, m, name).expect("function").0;
            let fns = (f(g, "fill"), f(g, "forever"), f(g, "trapper"));
            let out = g.mem_alloc(ctx, 64).expect("alloc");
            (ctx, fns, out)
        };
        let (good, (fill, _, _), good_out) = setup(&mut g);

        // Out of bounds: 65 threads into 16 words (the 64 bytes' granule
        // holds 64 words).
        let (ctx, (f, _, _), out) = setup(&mut g);
        let lc3 = LaunchConfig {
            grid: [3, 1, 1],
            ..LC
        };
        let r = g.launch(ctx, f, &lc3, &fill_params(out, 65), None);
        assert_eq!(status_of(r), Status::ILLEGAL_ADDRESS);
        assert_eq!(
            status_of(g.synchronize(ctx)),
            Status::ILLEGAL_ADDRESS,
            "sticky"
        );
        // A freed buffer faults too.
        let (ctx, (f, _, _), out) = setup(&mut g);
        g.mem_free(ctx, out).expect("free");
        let r = g.launch(ctx, f, &LC, &fill_params(out, 1), None);
        assert_eq!(status_of(r), Status::ILLEGAL_ADDRESS);
        // The instruction budget.
        let (ctx, (_, forever, _), _) = setup(&mut g);
        let r = g.launch(ctx, forever, &LC, &[], None);
        assert_eq!(status_of(r), LAUNCH_TIMEOUT);
        assert_eq!(status_of(g.mem_alloc(ctx, 8).map(drop)), LAUNCH_TIMEOUT);
        // trap.
        let (ctx, (_, _, trapper), _) = setup(&mut g);
        let r = g.launch(ctx, trapper, &LC, &[], None);
        assert_eq!(status_of(r), Status::LAUNCH_FAILED);
        assert_eq!(status_of(g.synchronize(ctx)), Status::LAUNCH_FAILED);
        // A launch on an unknown stream fails before it executes.
        let r = g.launch(
            good,
            fill,
            &LC,
            &fill_params(good_out, 16),
            Some(StreamId(9999)),
        );
        assert_eq!(r, Err(ExecError::Invalid("stream")));
        assert_eq!(read_u32s(&mut g, good, good_out, 16), vec![0; 16]);
        // None of it touched the first context, and no fault was charged
        // device time.
        g.launch(good, fill, &LC, &fill_params(good_out, 16), None)
            .expect("still works");
        assert_eq!(
            read_u32s(&mut g, good, good_out, 16),
            (0..16).map(|i| 3 * i).collect::<Vec<u32>>()
        );
        assert_eq!(g.executed().launches, 1);
        // Launch geometry beyond a GPU's is refused before executing.
        let big = LaunchConfig::new([1, 1, 1], [1024, 2, 1], 0);
        assert!(matches!(
            g.launch(good, fill, &big, &fill_params(good_out, 0), None),
            Err(ExecError::Invalid(_))
        ));
        g.synchronize(good).expect("not sticky");
    }

    #[test]
    fn unsupported_ptx_fails_launches_without_poisoning() {
        let cfg = SimConfig {
            kernels: vec![KernelCost {
                name: "timed".into(),
                duration_us: Some(1.0),
                duration_param: None,
                duration_hash: false,
                fault: false,
                execute: Some(false),
            }],
            ..SimConfig::default()
        };
        let mut g = SimGpu::new(cfg, SimDevice::private_virtual(0)).expect("gpu");
        let ctx = g.create_context().expect("context");
        // The module loads although its PTX cannot execute.
        let text = format!("{WGMMA_PTX}\n.visible .entry timed()\n{{\n\tret;\n}}\n");
        let m = g.module_load(ctx, text.as_bytes()).expect("load");
        let (hopper, layout) = g.function(ctx, m, "hopper").expect("function");
        assert_eq!(layout, [ParamInfo { offset: 0, size: 8 }]);
        let out = g.mem_alloc(ctx, 8).expect("alloc");
        for _ in 0..2 {
            let err = g
                .launch(ctx, hopper, &LC, &out.to_le_bytes(), None)
                .expect_err("cannot execute");
            assert_eq!(err.status(), Status::NOT_SUPPORTED);
            let ExecError::CannotExecute { kernel, reason } = &err else {
                panic!("{err:?}");
            };
            assert_eq!(kernel, "hopper");
            assert!(reason.contains("wgmma"), "names the instruction: {reason}");
        }
        // Not sticky; the timing-only kernel of the same module runs.
        g.synchronize(ctx).expect("not sticky");
        let (timed, _) = g.function(ctx, m, "timed").expect("function");
        g.launch(ctx, timed, &LC, &[], None).expect("timing-only");
        assert_eq!(g.gpu_time_ns(), 1_000);
    }

    #[test]
    fn the_spin_kernel_never_executes() {
        // Its PTX spins on %globaltimer: executed, it would exhaust any
        // budget.
        let spin_ptx = include_str!("../../../benches/kernels/fairgpu.ptx");
        let cfg = SimConfig {
            max_instructions: 100,
            ..SimConfig::default()
        };
        let mut g = SimGpu::new(cfg, SimDevice::private_virtual(0)).expect("gpu");
        let ctx = g.create_context().expect("context");
        let m = g.module_load(ctx, spin_ptx.as_bytes()).expect("load");
        let (f, _) = g.function(ctx, m, SPIN_KERNEL).expect("function");
        spin(&mut g, ctx, f, 2 * MS, None);
        g.synchronize(ctx).expect("sync");
        assert_eq!(g.gpu_time_ns(), 2 * MS);
        assert_eq!(g.executed(), Executed::default());
    }

    #[test]
    fn fatbins_run_the_ptx_of_the_best_architecture() {
        // Two PTX entries: sm_80 writes 3i, sm_100 writes garbage.
        let other = FILL_PTX
            .replace(".target sm_50", ".target sm_100")
            .replace("mul.lo.s32 %r6, %r1, 3;", "mul.lo.s32 %r6, %r1, 5;");
        let best = FILL_PTX.replace(".target sm_50", ".target sm_80");
        let mut image = fatbin(other.as_bytes(), 0);
        image.extend(fatbin(best.as_bytes(), 0));
        let mut g = gpu(&SimDevice::private_virtual(0));
        let ctx = g.create_context().expect("context");
        let m = g.module_load(ctx, &image).expect("load");
        let (fill, _) = g.function(ctx, m, "fill").expect("function");
        let out = g.mem_alloc(ctx, 64).expect("alloc");
        g.launch(ctx, fill, &LC, &fill_params(out, 16), None)
            .expect("launch");
        assert_eq!(
            read_u32s(&mut g, ctx, out, 16),
            (0..16).map(|i| 3 * i).collect::<Vec<u32>>()
        );
    }

    proptest! {
        /// A kernel storing through a guest-chosen pointer writes exactly
        /// its range when that lies in one allocation and is aligned, and
        /// otherwise faults having written nothing outside that range.
        #[test]
        fn stores_land_in_one_allocation_or_fault(
            start in 0u64..3 * 1024,
            n in 0u32..80,
        ) {
            let mut g = gpu(&SimDevice::private_virtual(0));
            let ctx = g.create_context().expect("context");
            let m = g.module_load(ctx, FILL_PTX.as_bytes()).expect("load");
            let (fill, _) = g.function(ctx, m, "fill").expect("function");
            let bufs: Vec<DevPtr> = (0..3).map(|_| g.mem_alloc(ctx, 200).expect("alloc")).collect();
            let out = bufs[0] - 256 + start;
            let lc = LaunchConfig { grid: [3, 1, 1], ..LC };
            let r = g.launch(ctx, fill, &lc, &fill_params(out, n), None);
            let end = out + 4 * u64::from(n);
            // Each 200-byte allocation's granule is 256 bytes.
            let inside = n == 0 || bufs.iter().any(|&b| out >= b && end <= b + 256);
            let aligned = n == 0 || out.is_multiple_of(4);
            match &r {
                Ok(()) => prop_assert!(inside && aligned, "{out:#x}+{n} ran"),
                Err(e) if !aligned => prop_assert_eq!(e.status(), MISALIGNED_ADDRESS),
                Err(e) => {
                    prop_assert!(!inside, "{out:#x}+{n}: {e:?}");
                    prop_assert_eq!(e.status(), Status::ILLEGAL_ADDRESS);
                }
            }
            let allocs = &g.contexts[&ctx.0].allocs;
            for (&base, bytes) in allocs {
                for (k, &byte) in bytes.iter().enumerate() {
                    let a = base + k as u64;
                    if a < out || a >= end {
                        prop_assert_eq!(byte, 0, "byte at {:#x} outside the store's range", a);
                    } else if r.is_ok() {
                        let i = ((a - out) / 4) as u32;
                        prop_assert_eq!(byte, (3 * i).to_le_bytes()[((a - out) % 4) as usize]);
                    }
                }
            }
        }
    }

    #[test]
    fn modules_share_ptx_text_but_not_variables() {
        let ptx = ".version 7.0\n.target sm_50\n.address_size 64\n\n\
            .global .align 4 .u32 counter = 5;\n\n\
            .visible .entry bump(\n\t.param .u64 bump_param_0\n)\n{\n\
            \t.reg .b32 %r<3>;\n\t.reg .b64 %rd<3>;\n\n\
            \tld.param.u64 %rd1, [bump_param_0];\n\tcvta.to.global.u64 %rd2, %rd1;\n\
            \tld.global.u32 %r1, [counter];\n\tadd.s32 %r2, %r1, 1;\n\
            \tst.global.u32 [counter], %r2;\n\tst.global.u32 [%rd2], %r2;\n\tret;\n}\n";
        let mut g = gpu(&SimDevice::private_virtual(0));
        let ctx = g.create_context().expect("context");
        let out = g.mem_alloc(ctx, 4).expect("alloc");
        let (a, b) = (
            g.module_load(ctx, ptx.as_bytes()).expect("load"),
            g.module_load(ctx, ptx.as_bytes()).expect("load"),
        );
        let program = |g: &SimGpu, m: ModId| {
            let c = &g.contexts[&ctx.0];
            Arc::clone(&c.modules[&m.0].programs[0].as_ref().expect("kept").ptx)
        };
        assert!(Arc::ptr_eq(&program(&g, a), &program(&g, b)), "one copy");
        let one = LaunchConfig::new([1; 3], [1; 3], 0);
        let bump = |g: &mut SimGpu, m: ModId| {
            let (f, _) = g.function(ctx, m, "bump").expect("function");
            g.launch(ctx, f, &one, &out.to_le_bytes(), None)
                .expect("launch");
            read_u32s(g, ctx, out, 1)[0]
        };
        // Each loaded module has its own `counter`, kept across launches.
        assert_eq!(bump(&mut g, a), 6);
        assert_eq!(bump(&mut g, a), 7);
        assert_eq!(bump(&mut g, b), 6);
        assert_eq!(bump(&mut g, a), 8);
        // Reloaded after an unload: fresh variables.
        g.module_unload(ctx, a).expect("unload");
        let c = g.module_load(ctx, ptx.as_bytes()).expect("load");
        assert_eq!(bump(&mut g, c), 6);
    }

    #[test]
    fn kept_ptx_is_bounded_and_shared() {
        let budget = HostMemory::unlimited();
        let mut texts = PtxTexts::new(100);
        let a = texts.share("a".repeat(60), &budget).expect("fits");
        let again = texts.share("a".repeat(60), &budget).expect("shared");
        assert!(Arc::ptr_eq(&a, &again));
        assert!(
            texts.share("b".repeat(41), &budget).is_none(),
            "over the limit"
        );
        let b = texts.share("b".repeat(40), &budget).expect("fits exactly");
        assert_eq!(budget.used(), 100, "kept texts are charged once");
        // Texts no module holds any more do not count.
        drop((a, again));
        assert_eq!(budget.used(), 40);
        let c = texts.share("c".repeat(60), &budget).expect("room again");
        assert_eq!(c.text.len() + b.text.len(), 100);
        assert_eq!(texts.by_hash.len(), 2);
        // A budget that cannot hold a text keeps it out.
        let small = HostMemory::new(10);
        assert!(texts.share("d".repeat(11), &small).is_none());
    }

    /// The attack: load many modules whose PTX declares a 16 MiB `.global`
    /// array and launch a kernel of each. Every module got its own copy of
    /// the variables in the worker's memory, counted nowhere: 64 MiB of
    /// device quota grew the worker to gigabytes. Now the variables are
    /// charged to the VM's host memory: the launch that would pass it fails
    /// with CUDA_ERROR_OUT_OF_MEMORY, nothing else does, and unloading
    /// gives the memory back.
    #[test]
    fn module_globals_cannot_grow_the_worker_past_the_vms_host_memory() {
        const BIG: u64 = 16 << 20;
        let ptx = format!(
            ".version 7.0\n.target sm_50\n.address_size 64\n\n\
             .global .align 4 .b8 big[{BIG}];\n\n\
             .visible .entry touch()\n{{\n\t.reg .b32 %r<2>;\n\
             \tmov.u32 %r1, 1;\n\tst.global.u32 [big], %r1;\n\tret;\n}}\n"
        );
        let budget = HostMemory::new(64 << 20);
        let mut g = gpu(&SimDevice::private_virtual(0)).with_host_memory(budget.clone());
        let ctx = g.create_context().expect("context");
        let one = LaunchConfig::new([1; 3], [1; 3], 0);
        let mut loaded = Vec::new();
        let mut refused = None;
        for i in 0..40 {
            let m = g.module_load(ctx, ptx.as_bytes()).expect("load");
            let (f, _) = g.function(ctx, m, "touch").expect("function");
            loaded.push(m);
            if let Err(e) = g.launch(ctx, f, &one, &[], None) {
                refused = Some((i, e));
                break;
            }
        }
        let (i, e) = refused.expect("some launch was refused");
        assert_eq!(e.status(), Status::OUT_OF_MEMORY, "{e}");
        assert!(i < 4, "refused only at module {i}");
        assert!(budget.used() <= budget.limit());
        // Refused for memory, not broken: the context still works, and
        // unloading a module makes room for the next one's variables.
        let first = loaded.remove(0);
        g.module_unload(ctx, first).expect("unload");
        let last = *loaded.last().expect("a module");
        let (f, _) = g.function(ctx, last, "touch").expect("function");
        g.launch(ctx, f, &one, &[], None)
            .expect("a launch once memory is free");
        for m in loaded {
            g.module_unload(ctx, m).expect("unload");
        }
        g.destroy_context(ctx);
        assert_eq!(budget.used(), 0, "everything charged was given back");
    }

    #[test]
    fn a_kernel_stopped_after_writing_poisons_its_context() {
        // Stores, then meets an instruction SimGpu cannot execute.
        let ptx = ".version 8.0\n.target sm_90a\n.address_size 64\n\n\
            .visible .entry half_done(\n\t.param .u64 half_done_param_0\n)\n{\n\
            \t.reg .b32 %r<2>;\n\t.reg .b64 %rd<3>;\n\n\
            \tld.param.u64 %rd1, [half_done_param_0];\n\tcvta.to.global.u64 %rd2, %rd1;\n\
            \tmov.u32 %r1, 7;\n\tst.global.u32 [%rd2], %r1;\n\
            \twgmma.fence.sync.aligned;\n\tret;\n}\n";
        let mut g = gpu(&SimDevice::private_virtual(0));
        let ctx = g.create_context().expect("context");
        let m = g.module_load(ctx, ptx.as_bytes()).expect("load");
        let (f, _) = g.function(ctx, m, "half_done").expect("function");
        let out = g.mem_alloc(ctx, 4).expect("alloc");
        let err = g
            .launch(ctx, f, &LC, &out.to_le_bytes(), None)
            .expect_err("cannot finish");
        assert_eq!(err.status(), Status::LAUNCH_FAILED);
        assert_eq!(
            g.synchronize(ctx).map_err(|e| e.status()),
            Err(Status::LAUNCH_FAILED),
            "sticky: memory holds half a result"
        );
        assert_eq!(g.gpu_time_ns(), 0);
    }
}
