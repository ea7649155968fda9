//! `CudaExecutor`: a real NVIDIA GPU through the CUDA driver API.
//!
//! cudarc (`driver` + `dynamic-loading`) finds and loads libcuda; the
//! executor resolves the entry points it needs once, into a table of
//! function pointers (`api.rs`: a missing symbol is an error at
//! construction, never a panic later, and results are plain integers, so a
//! code the bindings do not list is not undefined behaviour), and calls
//! them directly. This is the only module of the host that touches cudarc.
//!
//! # What needs a real GPU
//!
//! Everything that reaches the driver: construction on a host with libcuda,
//! contexts, memory, module loading (PTX, cubin, fatbin), launches, streams,
//! events and device-time accounting. It needs an NVIDIA driver for CUDA
//! 12.4 or newer (`cuFuncGetParamInfo`). On a host without libcuda,
//! [`CudaExecutor::new`] returns [`ExecError::NoDevice`] naming libcuda; it
//! never panics.
//!
//! # What has been verified
//!
//! This module has been compiled and unit-tested on machines without a GPU
//! and without libcuda; it has **not yet run on hardware**. The unit tests
//! cover the pure parts (result mapping, parameter-buffer checks, parameter
//! layouts, module-image checks, PTX NUL termination) and drive the whole
//! executor against a fake driver (`fake.rs`) that checks the calls it
//! receives: the current context, handles, launch buffers, copies, timing
//! events and that destroying a context or dropping the executor releases
//! everything. `scripts/gpu-check.sh` runs `fairgpu gpu-check` on a GPU host.
//!
//! # Choices
//!
//! - One CUDA context per guest channel (`cuCtxCreate_v2`,
//!   `CU_CTX_SCHED_BLOCKING_SYNC`, so waits sleep instead of spinning), made
//!   current before every call on it: the executor may move between threads.
//! - Identifiers handed out index this executor's tables; a context's table
//!   holds the handles created in it, so an object of one context is never
//!   reachable through another.
//! - Host-to-device copies on a non-NULL stream are issued with
//!   `cuMemcpyHtoDAsync_v2` and followed by `cuStreamSynchronize`: the source
//!   is a request buffer that is reused once the call returns, so the copy
//!   must be complete by then, and it must stay ordered after earlier work on
//!   that stream (a synchronous copy on the NULL stream would not be, for a
//!   non-blocking stream). Device-to-host copies on a stream do the same, so
//!   they return once the destination holds the data. On the NULL stream the
//!   synchronous calls give both guarantees. Device-to-device copies and
//!   memsets stay asynchronous.
//! - Launches pass the packed parameter buffer through `extra`
//!   (`CU_LAUNCH_PARAM_BUFFER_POINTER` / `_SIZE`), after checking its size
//!   against the kernel's layout from `cuFuncGetParamInfo`; the driver copies
//!   the parameters before `cuLaunchKernel` returns.
//! - Device time: every launch is bracketed by a pair of timing events on
//!   its stream. Pairs wait in a queue bounded by [`MAX_PENDING_TIMINGS`];
//!   completed pairs are harvested without blocking (`cuEventQuery`) by
//!   [`GpuExecutor::gpu_time_ns`] and every synchronize (measuring without
//!   stopping the GPU). A full queue waits for its oldest pair. A pair
//!   measures from the stream reaching the launch to the kernel's end, so
//!   kernels overlapping on several streams, or sharing the GPU with other
//!   contexts by time-slicing, are each counted in full: an upper bound of
//!   the device time used. Destroying a context waits at most
//!   [`DESTROY_WAIT`] for its launches; the time of launches still running
//!   then is not counted.
//! - Guest module images are checked before `cuModuleLoadData`, which reads
//!   them through a bare pointer (see `image.rs`).

mod api;
mod arrays;
#[cfg(test)]
mod fake;
mod image;

pub use image::prepare_image;

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{c_int, c_uint, c_void, CStr, CString};
use std::ptr;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{
    CUarray, CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream,
    CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT, CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT,
    CU_LAUNCH_PARAM_END_AS_INT,
};
use fairgpu_protocol::cuda::{LaunchOptions, ParamInfo, MAX_PARAMS, MAX_PARAM_BYTES};
use fairgpu_protocol::Status;

use self::api::{
    Api, CuResult, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_READY,
    CUDA_ERROR_OUT_OF_MEMORY, CUDA_SUCCESS,
};
use super::{
    ArrayDesc, ArrayId, CtxId, DevPtr, DeviceProps, EventId, ExecError, ExecResult, FnId,
    GpuExecutor, HostData, LaunchConfig, ModId, PhysId, RectCopy, StreamId, SyncMark, SyncPending,
    SyncTarget, TexResource, TextureDesc,
};

/// Highest `CUdevice_attribute` value queried for [`DeviceProps`].
pub const MAX_ATTRIBUTE: i32 = 150;
/// Most launches whose timing events may be pending at once; a launch
/// beyond this waits for the oldest.
pub const MAX_PENDING_TIMINGS: usize = 4096;
/// How long destroying a context waits for its launches to finish, so
/// that their device time counts.
pub const DESTROY_WAIT: Duration = Duration::from_secs(1);
/// The runaway guard's waits: how long they spin before they sleep, how
/// long they sleep between looks, and how often they harvest the whole
/// timing queue (for runaways).
const AWAIT_SPIN: Duration = Duration::from_millis(1);
const AWAIT_SLEEP: Duration = Duration::from_micros(20);
const AWAIT_HARVEST_EVERY: Duration = Duration::from_millis(1);
/// Timing events kept for reuse per context.
const SPARE_TIMING_EVENTS: usize = 256;
/// CU_CTX_SCHED_BLOCKING_SYNC.
const CTX_FLAGS: c_uint = 4;
/// CU_EVENT_DEFAULT: timing enabled.
const CU_EVENT_DEFAULT: c_uint = 0;
/// CU_EVENT_DISABLE_TIMING: the lighter event a marker needs.
const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// Marker events kept for reuse per context.
const SPARE_MARKERS: usize = 64;
/// A context synchronization with more streams than this is not put
/// aside (one marker event per stream): it is served, and waits.
const MAX_MARKED_STREAMS: usize = 64;
/// CUDA_ERROR_STUB_LIBRARY.
const CUDA_ERROR_STUB_LIBRARY: CuResult = 34;

/// A PTX kernel for checks on hardware:
/// `add_one(unsigned *data, unsigned n)` adds 1 to each of `n` words, one
/// thread per word. Parameter layout: `[(0, 8), (8, 4)]`.
pub const ADD_ONE_PTX: &str = "\
.version 7.0
.target sm_50
.address_size 64

.visible .entry add_one(
    .param .u64 add_one_param_0,
    .param .u32 add_one_param_1
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<7>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [add_one_param_0];
    ld.param.u32 %r2, [add_one_param_1];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra $L__BB0_2;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    add.s32 %r6, %r6, 1;
    st.global.u32 [%rd4], %r6;
$L__BB0_2:
    ret;
}
";

/// The one mapping from a driver result to an executor result:
/// `CUDA_SUCCESS` is `Ok`, `CUDA_ERROR_NOT_READY` is
/// [`ExecError::NotReady`], anything else is [`ExecError::Driver`] with the
/// code unchanged. Call sites refine a few codes where they know more
/// (out of memory for an allocation, an unknown kernel name).
fn check(call: &'static str, result: CuResult) -> ExecResult<()> {
    match result {
        CUDA_SUCCESS => Ok(()),
        CUDA_ERROR_NOT_READY => Err(ExecError::NotReady),
        code => Err(ExecError::Driver {
            call,
            status: Status(code),
        }),
    }
}

/// Checks a packed parameter buffer of `len` bytes against a kernel's
/// layout: it must hold every parameter and fit the protocol's limit.
/// Longer buffers (a guest's own `extra` buffer with tail padding) pass.
pub fn check_param_buffer(layout: &[ParamInfo], len: usize) -> ExecResult<()> {
    let need = ParamInfo::packed_size(layout);
    if (len as u64) < need || len > MAX_PARAM_BYTES as usize {
        return Err(ExecError::Invalid("kernel parameter buffer size"));
    }
    Ok(())
}

/// Collects a kernel's parameter layout from `info(index)`, which returns
/// what `cuFuncGetParamInfo` returns for that index: its result, offset
/// and size. Stops at the first `CUDA_ERROR_INVALID_VALUE` (no such
/// parameter); refuses kernels with more than [`MAX_PARAMS`] parameters or
/// more than [`MAX_PARAM_BYTES`] of them.
fn collect_layout(
    mut info: impl FnMut(usize) -> (CuResult, usize, usize),
) -> ExecResult<Vec<ParamInfo>> {
    let mut layout = Vec::new();
    for index in 0..=MAX_PARAMS {
        let (result, offset, size) = info(index);
        if result == CUDA_ERROR_INVALID_VALUE {
            if ParamInfo::packed_size(&layout) > u64::from(MAX_PARAM_BYTES) {
                return Err(ExecError::Invalid(
                    "kernel parameters larger than 32764 bytes",
                ));
            }
            return Ok(layout);
        }
        check("cuFuncGetParamInfo", result)?;
        if index == MAX_PARAMS {
            break;
        }
        let too_big = || ExecError::Invalid("kernel parameters larger than 32764 bytes");
        layout.push(ParamInfo {
            offset: u32::try_from(offset).map_err(|_| too_big())?,
            size: u32::try_from(size).map_err(|_| too_big())?,
        });
    }
    Err(ExecError::Invalid(
        "kernel with more parameters than the protocol allows",
    ))
}

/// Milliseconds from `cuEventElapsedTime` as whole nanoseconds (0 for
/// anything not a positive finite number).
fn ms_to_ns(ms: f32) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (f64::from(ms) * 1e6).round() as u64
    } else {
        0
    }
}

/// A launch's parameters, copied into 8-byte-aligned storage zero-padded
/// to a multiple of 16 bytes, so that the driver reading whole words of
/// the last parameter stays inside memory we own.
#[derive(Debug)]
struct ParamBuffer {
    words: Vec<u64>,
    len: usize,
}

impl ParamBuffer {
    fn new(params: &[u8]) -> ParamBuffer {
        let mut words = vec![0u64; params.len().div_ceil(16) * 2];
        for (word, chunk) in words.iter_mut().zip(params.chunks(8)) {
            let mut bytes = [0u8; 8];
            bytes[..chunk.len()].copy_from_slice(chunk);
            // Native order: the word holds exactly these bytes in memory.
            *word = u64::from_ne_bytes(bytes);
        }
        ParamBuffer {
            words,
            len: params.len(),
        }
    }

    /// The buffer's bytes as the driver will read them.
    #[cfg(test)]
    fn bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }
}

/// A kernel looked up in a module.
#[derive(Debug)]
struct Function {
    raw: CUfunction,
    module: u64,
    layout: Vec<ParamInfo>,
    /// Its name in the module.
    name: String,
    /// Its part companion (kernel slicing), looked up at the first
    /// sliced launch.
    part: Option<PartFunction>,
    /// Measured device time per block of its last completed launch, ns.
    ns_per_block: Option<f64>,
}

/// A kernel's companion entry that runs a box of its grid
/// (`fairgpu_ptx::part`): the kernel's parameters, then the box's offset
/// and the whole grid's size as six `u32`.
#[derive(Debug, Clone)]
struct PartFunction {
    raw: CUfunction,
    layout: Vec<ParamInfo>,
}

/// A loaded module and the kernels looked up in it, by name.
#[derive(Debug)]
struct Module {
    raw: CUmodule,
    by_name: HashMap<String, u64>,
    /// Each kernel's part companion, or why it has none; `None` when the
    /// module was not loaded from PTX with companions.
    parts: Option<HashMap<String, Result<String, &'static str>>>,
}

/// One context and every handle created in it.
#[derive(Debug)]
struct Context {
    raw: CUcontext,
    allocs: HashSet<DevPtr>,
    modules: HashMap<u64, Module>,
    functions: HashMap<u64, Function>,
    streams: HashMap<u64, CUstream>,
    events: HashMap<u64, CUevent>,
    /// Timing events not in use, for the next launches.
    spare_timing: Vec<CUevent>,
    /// Synchronizations put aside (`GpuExecutor::sync_mark`), by mark id,
    /// and marker events not in use.
    marks: HashMap<u64, Mark>,
    spare_markers: Vec<CUevent>,
    arrays: HashMap<u64, CUarray>,
    /// Texture and surface objects: their values are what kernels receive.
    textures: HashSet<u64>,
    surfaces: HashSet<u64>,
    /// The virtual-memory API: reservations (base -> bytes), memory made
    /// by `cuMemCreate` (id -> the driver's handle), mappings (address ->
    /// bytes).
    reservations: HashMap<DevPtr, usize>,
    phys: HashMap<u64, u64>,
    mappings: HashMap<DevPtr, usize>,
}

/// What a synchronization put aside waits for.
#[derive(Debug)]
enum Mark {
    /// Marker events recorded when it was marked, one on each stream it
    /// waits for: done when all are.
    Markers(Vec<CUevent>),
    /// The guest's event (by id: another thread may destroy it meanwhile).
    Event(u64),
}

/// Launches whose device time has not been collected yet.
#[derive(Debug, Clone, Copy)]
struct TimingPair {
    ctx: u64,
    /// The kernel and how many blocks the launch ran.
    f: u64,
    blocks: u64,
    /// When the launch was first seen running (its start event done, its
    /// end not), for the runaway guard.
    running_since: Option<Instant>,
    /// `None` for the NULL stream. Work on one stream completes in order,
    /// so once a pair is unfinished the later pairs of its stream are too.
    stream: Option<u64>,
    start: CUevent,
    end: CUevent,
}

/// A real NVIDIA GPU, driven for one VM. See the module docs.
pub struct CudaExecutor {
    api: &'static Api,
    ordinal: usize,
    device: CUdevice,
    props: DeviceProps,
    contexts: HashMap<u64, Context>,
    /// The device's primary context, retained only to answer
    /// `device_free_mem` while no context of ours exists.
    primary: Option<CUcontext>,
    next_id: u64,
    pending: VecDeque<TimingPair>,
    gpu_time_ns: u64,
    destroy_wait: Duration,
    /// Load PTX modules with part companions (kernel slicing).
    slicing: bool,
    /// The runaway guard's limit on one launch's running time.
    request_limit: Option<Duration>,
    /// The launch found past the limit, once.
    runaway: Option<super::Runaway>,
    /// Launches found past the limit.
    runaways: u64,
}

// SAFETY: the raw handles are owned by this executor alone and are only
// used through `&mut self`. The driver API is thread-safe and a context
// may be made current on any thread; every call first makes its context
// current on the calling thread, so moving the executor between threads is
// sound.
unsafe impl Send for CudaExecutor {}

impl std::fmt::Debug for CudaExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaExecutor")
            .field("ordinal", &self.ordinal)
            .field("device", &self.props.name)
            .field("contexts", &self.contexts.len())
            .field("pending_timings", &self.pending.len())
            .field("gpu_time_ns", &self.gpu_time_ns)
            .finish()
    }
}

/// Makes `raw` current on the calling thread.
fn set_current(api: &Api, raw: CUcontext) -> ExecResult<()> {
    // SAFETY: `raw` is a live context of this executor: the tables hold
    // only contexts not yet destroyed.
    check("cuCtxSetCurrent", unsafe { (api.cuCtxSetCurrent)(raw) })
}

/// Device time between two completed events, 0 if the driver cannot say.
fn elapsed_ns(api: &Api, start: CUevent, end: CUevent) -> u64 {
    let mut ms = 0f32;
    // SAFETY: `ms` is a valid out-pointer; both events are live timing
    // events of the current context.
    let result = unsafe { (api.cuEventElapsedTime)(&mut ms, start, end) };
    match check("cuEventElapsedTime", result) {
        Ok(()) => ms_to_ns(ms),
        Err(e) => {
            tracing::debug!("device time of a launch lost: {e}");
            0
        }
    }
}

/// Destroys an event, logging a failure (teardown goes on regardless).
fn destroy_event(api: &Api, event: CUevent) {
    // SAFETY: `event` is a live event that no table refers to any more.
    let result = unsafe { (api.cuEventDestroy_v2)(event) };
    if let Err(e) = check("cuEventDestroy_v2", result) {
        tracing::debug!("{e}");
    }
}

impl Context {
    fn new(raw: CUcontext) -> Context {
        Context {
            raw,
            allocs: HashSet::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            streams: HashMap::new(),
            events: HashMap::new(),
            spare_timing: Vec::new(),
            marks: HashMap::new(),
            spare_markers: Vec::new(),
            arrays: HashMap::new(),
            textures: HashSet::new(),
            surfaces: HashSet::new(),
            reservations: HashMap::new(),
            phys: HashMap::new(),
            mappings: HashMap::new(),
        }
    }

    /// The handle of stream `s` of this context (null for the NULL stream).
    fn stream(&self, s: Option<StreamId>) -> ExecResult<CUstream> {
        match s {
            None => Ok(ptr::null_mut()),
            Some(id) => self
                .streams
                .get(&id.0)
                .copied()
                .ok_or(ExecError::Invalid("stream")),
        }
    }

    fn event(&self, e: EventId) -> ExecResult<CUevent> {
        self.events
            .get(&e.0)
            .copied()
            .ok_or(ExecError::Invalid("event"))
    }

    /// A timing event; the context must be current.
    fn timing_event(&mut self, api: &Api) -> ExecResult<CUevent> {
        if let Some(e) = self.spare_timing.pop() {
            return Ok(e);
        }
        let mut e: CUevent = ptr::null_mut();
        // SAFETY: `e` is a valid out-pointer; the context is current.
        check("cuEventCreate", unsafe {
            (api.cuEventCreate)(&mut e, CU_EVENT_DEFAULT)
        })?;
        Ok(e)
    }

    /// Two timing events for one launch; the context must be current.
    fn timing_pair(&mut self, api: &Api) -> ExecResult<(CUevent, CUevent)> {
        let start = self.timing_event(api)?;
        match self.timing_event(api) {
            Ok(end) => Ok((start, end)),
            Err(e) => {
                self.spare_timing.push(start);
                Err(e)
            }
        }
    }

    /// Returns a timing event for reuse, or destroys it if enough are kept.
    fn recycle(&mut self, api: &Api, event: CUevent) {
        if self.spare_timing.len() < SPARE_TIMING_EVENTS {
            self.spare_timing.push(event);
        } else {
            destroy_event(api, event);
        }
    }

    /// A marker event recorded on `stream` now; the context must be
    /// current.
    fn marker(&mut self, api: &Api, stream: CUstream) -> ExecResult<CUevent> {
        let e = match self.spare_markers.pop() {
            Some(e) => e,
            None => {
                let mut e: CUevent = ptr::null_mut();
                // SAFETY: `e` is a valid out-pointer; the context is current.
                check("cuEventCreate", unsafe {
                    (api.cuEventCreate)(&mut e, CU_EVENT_DISABLE_TIMING)
                })?;
                e
            }
        };
        // SAFETY: `e` is a live event and `stream` null or a live stream,
        // both of the current context.
        match check("cuEventRecord", unsafe { (api.cuEventRecord)(e, stream) }) {
            Ok(()) => Ok(e),
            Err(err) => {
                self.retire_markers(api, vec![e]);
                Err(err)
            }
        }
    }

    /// Keeps marker events for reuse, destroying those past the bound.
    fn retire_markers(&mut self, api: &Api, events: Vec<CUevent>) {
        for e in events {
            if self.spare_markers.len() < SPARE_MARKERS {
                self.spare_markers.push(e);
            } else {
                destroy_event(api, e);
            }
        }
    }

    /// Releases every object of the context, logging failures; the context
    /// must be current. `timing` are the events of its pending launches.
    fn release_all(&mut self, api: &Api, timing: Vec<CUevent>) {
        let mut failures = 0usize;
        let mut note = |call: &'static str, result: CuResult| {
            if check(call, result).is_err() {
                failures += 1;
            }
        };
        let markers: Vec<CUevent> = self
            .marks
            .drain()
            .flat_map(|(_, m)| match m {
                Mark::Markers(v) => v,
                Mark::Event(_) => Vec::new(),
            })
            .collect();
        for event in timing
            .into_iter()
            .chain(self.spare_timing.drain(..))
            .chain(markers)
            .chain(self.spare_markers.drain(..))
            .chain(self.events.drain().map(|(_, e)| e))
        {
            // SAFETY: a live event of this context, removed from its table.
            note("cuEventDestroy_v2", unsafe {
                (api.cuEventDestroy_v2)(event)
            });
        }
        for (_, stream) in self.streams.drain() {
            // SAFETY: a live stream of this context, removed from its table.
            note("cuStreamDestroy_v2", unsafe {
                (api.cuStreamDestroy_v2)(stream)
            });
        }
        for t in self.textures.drain() {
            // SAFETY: a live texture object of this context, removed from
            // its table.
            note("cuTexObjectDestroy", unsafe { (api.cuTexObjectDestroy)(t) });
        }
        for s in self.surfaces.drain() {
            // SAFETY: a live surface object of this context, removed from
            // its table.
            note("cuSurfObjectDestroy", unsafe {
                (api.cuSurfObjectDestroy)(s)
            });
        }
        for (_, array) in self.arrays.drain() {
            // SAFETY: a live array of this context, removed from its table
            // (the objects reading it are gone above).
            note("cuArrayDestroy", unsafe { (api.cuArrayDestroy)(array) });
        }
        self.functions.clear();
        for (_, module) in self.modules.drain() {
            // SAFETY: a live module of this context, removed from its table
            // together with its functions.
            note("cuModuleUnload", unsafe {
                (api.cuModuleUnload)(module.raw)
            });
        }
        for ptr in self.allocs.drain() {
            // SAFETY: an allocation of this context, removed from its table.
            note("cuMemFree_v2", unsafe { (api.cuMemFree_v2)(ptr) });
        }
        // Mappings before the memory and the address ranges they use.
        for (addr, bytes) in self.mappings.drain() {
            // SAFETY: a mapping this context made, removed from its table.
            note("cuMemUnmap", unsafe { (api.cuMemUnmap)(addr, bytes) });
        }
        for (_, handle) in self.phys.drain() {
            // SAFETY: memory this context made, now mapped nowhere.
            note("cuMemRelease", unsafe { (api.cuMemRelease)(handle) });
        }
        for (base, bytes) in self.reservations.drain() {
            // SAFETY: a reservation of this context, now with nothing mapped.
            note("cuMemAddressFree", unsafe {
                (api.cuMemAddressFree)(base, bytes)
            });
        }
        if failures > 0 {
            tracing::debug!("{failures} objects of a destroyed context failed to release");
        }
    }
}

/// A driver error of `call` during construction, as [`ExecError::NoDevice`].
fn no_device(what: String, e: ExecError) -> ExecError {
    let hint = match e.status() {
        Status(CUDA_ERROR_STUB_LIBRARY) => {
            " (the libcuda found is the toolkit's stub library, not the driver's)"
        }
        _ => "",
    };
    ExecError::NoDevice(format!("{what}: {e}{hint}"))
}

/// Reads what the guest learns about `device`.
fn query_props(api: &Api, device: CUdevice) -> ExecResult<DeviceProps> {
    let mut name = [0u8; 256];
    // SAFETY: `name` is a writable buffer of the length passed.
    check("cuDeviceGetName", unsafe {
        (api.cuDeviceGetName)(name.as_mut_ptr().cast(), name.len() as c_int, device)
    })?;
    let name = match CStr::from_bytes_until_nul(&name) {
        Ok(s) => s.to_string_lossy().into_owned(),
        Err(_) => String::from_utf8_lossy(&name).into_owned(),
    };

    let mut total = 0usize;
    // SAFETY: `total` is a valid out-pointer.
    check("cuDeviceTotalMem_v2", unsafe {
        (api.cuDeviceTotalMem_v2)(&mut total, device)
    })?;

    let mut uuid = [0u8; 16];
    if let Some(get_uuid) = api.device_get_uuid {
        // SAFETY: `uuid` is the 16-byte `CUuuid` the call writes.
        check("cuDeviceGetUuid", unsafe { get_uuid(&mut uuid, device) })?;
    }

    let mut driver_version: c_int = 0;
    // SAFETY: `driver_version` is a valid out-pointer.
    check("cuDriverGetVersion", unsafe {
        (api.cuDriverGetVersion)(&mut driver_version)
    })?;

    let mut attributes = Vec::new();
    for attr in 1..=MAX_ATTRIBUTE {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out-pointer; an attribute the driver
        // does not know is an error result, not undefined behaviour (the
        // attribute is passed as a plain integer).
        let result = unsafe { (api.cuDeviceGetAttribute)(&mut value, attr, device) };
        if result == CUDA_SUCCESS {
            attributes.push((attr, value));
        }
    }

    let mut props = DeviceProps {
        name,
        total_mem: total as u64,
        uuid,
        driver_version,
        attributes,
    };
    // The hardware has concurrent managed access, cooperative launches
    // and more that guest-lib does not forward yet: the guest must not be
    // told they work (an H100 reported MANAGED_MEMORY = 1 while the guest's
    // cudaMallocManaged still failed with cudaErrorNotSupported).
    props.mask_unremoted_features();
    Ok(props)
}

impl CudaExecutor {
    /// Opens device `ordinal`: loads libcuda, initialises the driver and
    /// reads the device's properties. Without libcuda, a usable driver or
    /// the device, returns [`ExecError::NoDevice`] saying which; never
    /// panics.
    pub fn new(ordinal: usize) -> ExecResult<CudaExecutor> {
        let api = Api::get().map_err(ExecError::NoDevice)?;
        CudaExecutor::with_api(api, ordinal)
    }

    fn with_api(api: &'static Api, ordinal: usize) -> ExecResult<CudaExecutor> {
        // SAFETY: `cuInit` has no preconditions; its flags must be 0.
        check("cuInit", unsafe { (api.cuInit)(0) })
            .map_err(|e| no_device("CUDA driver initialisation failed".to_string(), e))?;
        let index = c_int::try_from(ordinal)
            .map_err(|_| ExecError::NoDevice(format!("no CUDA device {ordinal}")))?;
        let mut device: CUdevice = 0;
        // SAFETY: `device` is a valid out-pointer; the driver is initialised.
        check("cuDeviceGet", unsafe {
            (api.cuDeviceGet)(&mut device, index)
        })
        .map_err(|e| no_device(format!("no CUDA device {ordinal}"), e))?;
        let props = query_props(api, device)?;
        tracing::info!(
            device = %props.name,
            ordinal,
            driver_version = props.driver_version,
            "CUDA device opened"
        );
        Ok(CudaExecutor {
            api,
            ordinal,
            device,
            props,
            contexts: HashMap::new(),
            primary: None,
            next_id: 1,
            pending: VecDeque::new(),
            gpu_time_ns: 0,
            destroy_wait: DESTROY_WAIT,
            slicing: false,
            request_limit: None,
            runaway: None,
            runaways: 0,
        })
    }

    /// The PTX a fatbin's kernels run from on this device when the driver
    /// would compile it anyway: the fatbin has no cubin this GPU runs
    /// (same major version, minor at most the device's) and one PTX text,
    /// for an architecture the device has, that declares every kernel.
    /// Loading that text with part companions costs no compilation the
    /// fatbin would not have cost; a fatbin with SASS for this GPU is
    /// loaded as it is (its kernels run whole).
    fn jit_ptx_of_fatbin(&self, image: &[u8]) -> Option<String> {
        let m = crate::sim::parse_module(image).ok()?;
        let major = u32::try_from(self.props.attribute(75)?).ok()?;
        let minor = u32::try_from(self.props.attribute(76)?).ok()?;
        let runs_sass = m
            .cubin_archs
            .iter()
            .any(|&a| a / 10 == major && a % 10 <= minor);
        let [src] = m.ptx.as_slice() else {
            return None;
        };
        let all_there = m
            .kernels
            .iter()
            .all(|k| m.source_of.get(&k.name) == Some(&0));
        (!runs_sass && all_there && src.arch <= major * 10 + minor).then(|| src.text.clone())
    }

    /// The device ordinal this executor drives.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Launches whose device time has not been collected yet.
    pub fn pending_timings(&self) -> usize {
        self.pending.len()
    }

    /// A fresh identifier (never reused).
    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The context `ctx`, made current on the calling thread.
    /// Makes `ctx` current and gives the driver's handle of its function
    /// `f`.
    fn raw_function(&mut self, ctx: CtxId, f: FnId) -> ExecResult<CUfunction> {
        Ok(self
            .enter(ctx)?
            .functions
            .get(&f.0)
            .ok_or(ExecError::Invalid("function"))?
            .raw)
    }

    fn enter(&mut self, ctx: CtxId) -> ExecResult<&mut Context> {
        let c = self
            .contexts
            .get_mut(&ctx.0)
            .ok_or(ExecError::Invalid("context"))?;
        set_current(self.api, c.raw)?;
        Ok(c)
    }

    /// Adds the device time of every completed launch, without blocking.
    /// Leaves an arbitrary context current.
    fn harvest(&mut self) {
        let api = self.api;
        let contexts = &mut self.contexts;
        let total = &mut self.gpu_time_ns;
        let mut blocked: HashSet<(u64, Option<u64>)> = HashSet::new();
        let mut current: Option<u64> = None;
        let limit = self.request_limit;
        let mut overran: Option<super::Runaway> = None;
        self.pending.retain_mut(|p| {
            let key = (p.ctx, p.stream);
            if blocked.contains(&key) {
                return true;
            }
            let Some(c) = contexts.get_mut(&p.ctx) else {
                // Its context is gone, and the events with it.
                return false;
            };
            if current != Some(p.ctx) {
                if set_current(api, c.raw).is_err() {
                    blocked.insert(key);
                    return true;
                }
                current = Some(p.ctx);
            }
            // SAFETY: `p.end` is a live event of the current context: the
            // events of a pending pair are released only after it leaves
            // the queue.
            match check("cuEventQuery", unsafe { (api.cuEventQuery)(p.end) }) {
                Ok(()) => {
                    let ns = elapsed_ns(api, p.start, p.end);
                    *total = total.saturating_add(ns);
                    if let Some(f) = c.functions.get_mut(&p.f) {
                        f.ns_per_block = Some(ns as f64 / p.blocks.max(1) as f64);
                    }
                    c.recycle(api, p.start);
                    c.recycle(api, p.end);
                    false
                }
                Err(ExecError::NotReady) => {
                    blocked.insert(key);
                    // The oldest unfinished launch of its stream: running
                    // once its start event is done.
                    if let Some(limit) = limit {
                        // SAFETY: as for `p.end`.
                        let started = unsafe { (api.cuEventQuery)(p.start) } == CUDA_SUCCESS;
                        if started {
                            let since = *p.running_since.get_or_insert_with(Instant::now);
                            let ran = since.elapsed();
                            if ran > limit && overran.is_none() {
                                overran = Some(super::Runaway {
                                    ctx: CtxId(p.ctx),
                                    kernel: c
                                        .functions
                                        .get(&p.f)
                                        .map_or_else(String::new, |f| f.name.clone()),
                                    ran_ns: ran.as_nanos().min(u128::from(u64::MAX)) as u64,
                                });
                            }
                        }
                    }
                    true
                }
                Err(e) => {
                    tracing::debug!("device time of a launch lost: {e}");
                    destroy_event(api, p.start);
                    destroy_event(api, p.end);
                    false
                }
            }
        });
        if let Some(r) = overran {
            if self.runaway.is_none() {
                tracing::error!(kernel = %r.kernel, ran_ms = r.ran_ns as f64 / 1e6, "runaway guard: a kernel ran past the VM's limit on one request's device time");
                self.runaways += 1;
                self.runaway = Some(r);
            }
        }
    }

    /// The runaway guard's wait: with a limit, waits without blocking in
    /// the driver until no launch of `ctx` (on stream `stream`, when given)
    /// is unfinished, looking for runaways meanwhile; then a blocking
    /// driver wait only waits for copies. A runaway found (here or
    /// before) fails the wait with CUDA_ERROR_LAUNCH_TIMEOUT. Without a
    /// limit it returns at once.
    fn await_launches(&mut self, ctx: CtxId, stream: Option<Option<u64>>) -> ExecResult<()> {
        if self.request_limit.is_none() {
            return Ok(());
        }
        let api = self.api;
        let started = Instant::now();
        let mut harvested: Option<Instant> = None;
        let mut tails: Vec<(Option<u64>, CUevent)> = Vec::new();
        loop {
            let now = Instant::now();
            // The whole queue (device time, history, runaways) at the
            // first look and then about every millisecond.
            if harvested.is_none_or(|t| now.duration_since(t) >= AWAIT_HARVEST_EVERY) {
                harvested = Some(now);
                self.harvest();
                if self.runaway.is_some() {
                    return Err(ExecError::Driver {
                        call: "runaway guard",
                        status: Status::LAUNCH_TIMEOUT,
                    });
                }
            }
            // Between, only the last launch of each stream waited for: a
            // stream's work completes in order.
            tails.clear();
            for p in &self.pending {
                if p.ctx != ctx.0 || stream.is_some_and(|s| p.stream != s) {
                    continue;
                }
                match tails.iter_mut().find(|(s, _)| *s == p.stream) {
                    Some(t) => t.1 = p.end,
                    None => tails.push((p.stream, p.end)),
                }
            }
            if tails.is_empty() {
                return Ok(());
            }
            let Some(c) = self.contexts.get(&ctx.0) else {
                return Ok(());
            };
            set_current(api, c.raw)?;
            // SAFETY: every tail is the end event of a pending pair of the
            // current context (live until the pair leaves the queue).
            let done = tails
                .iter()
                .all(|&(_, e)| unsafe { (api.cuEventQuery)(e) } != CUDA_ERROR_NOT_READY);
            if done {
                self.harvest();
                return Ok(());
            }
            // Spin (yielding) through the first millisecond, as the
            // driver's own synchronize would for a short kernel, then
            // sleep briefly: a long wait costs little CPU and overshoots
            // its kernel's end by ~20 µs (workers sleep with a 1 ns timer
            // slack).
            if now.duration_since(started) < AWAIT_SPIN {
                std::thread::yield_now();
            } else {
                std::thread::sleep(AWAIT_SLEEP);
            }
        }
    }

    /// Keeps the timing queue under its bound: harvests, then waits for
    /// the oldest launches while it is still full. Leaves an arbitrary
    /// context current.
    fn make_room_for_timing(&mut self) {
        if self.pending.len() < MAX_PENDING_TIMINGS {
            return;
        }
        self.harvest();
        if self.request_limit.is_some() {
            // Wait for the oldest launch without blocking in the driver.
            if let Some(ctx) = self.pending.front().map(|p| CtxId(p.ctx)) {
                let stream = self.pending.front().map(|p| p.stream);
                let _ = self.await_launches(ctx, stream);
            }
            if self.pending.len() < MAX_PENDING_TIMINGS || self.runaway.is_some() {
                return;
            }
        }
        let api = self.api;
        while self.pending.len() >= MAX_PENDING_TIMINGS {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let Some(c) = self.contexts.get_mut(&p.ctx) else {
                continue;
            };
            if set_current(api, c.raw).is_ok() {
                // SAFETY: `p.end` is a live event of the current context,
                // just taken off the queue.
                let waited = check("cuEventSynchronize", unsafe {
                    (api.cuEventSynchronize)(p.end)
                });
                if waited.is_ok() {
                    self.gpu_time_ns = self
                        .gpu_time_ns
                        .saturating_add(elapsed_ns(api, p.start, p.end));
                }
            }
            c.recycle(api, p.start);
            c.recycle(api, p.end);
        }
    }

    /// A stream of context `ctx` that `create` makes through the driver
    /// (`call` names it in errors), kept in the context's table.
    fn new_stream(
        &mut self,
        ctx: CtxId,
        call: &'static str,
        create: impl FnOnce(&Api, *mut CUstream) -> api::CuResult,
    ) -> ExecResult<StreamId> {
        let id = self.fresh_id();
        let api = self.api;
        let c = self.enter(ctx)?;
        let mut raw: CUstream = ptr::null_mut();
        check(call, create(api, &mut raw))?;
        c.streams.insert(id, raw);
        Ok(StreamId(id))
    }

    /// The retained primary context (retaining it on first use).
    fn primary_context(&mut self) -> ExecResult<CUcontext> {
        if let Some(raw) = self.primary {
            return Ok(raw);
        }
        let mut raw: CUcontext = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; `self.device` came from
        // `cuDeviceGet`.
        check("cuDevicePrimaryCtxRetain", unsafe {
            (self.api.cuDevicePrimaryCtxRetain)(&mut raw, self.device)
        })?;
        self.primary = Some(raw);
        Ok(raw)
    }

    /// Collects device time after a synchronize call and passes its
    /// result on.
    fn synchronized(&mut self, waited: ExecResult<()>) -> ExecResult<()> {
        self.harvest();
        waited
    }
}

/// The part companion of function `f` of context `c` (current), looked up
/// at its first use: the module must have one for it, and its layout must
/// be the kernel's followed by six 4-byte parameters.
fn part_function(api: &Api, c: &mut Context, f: FnId) -> ExecResult<PartFunction> {
    let func = c
        .functions
        .get(&f.0)
        .ok_or(ExecError::Invalid("function"))?;
    if let Some(p) = &func.part {
        return Ok(p.clone());
    }
    let m = c
        .modules
        .get(&func.module)
        .ok_or(ExecError::Invalid("module"))?;
    let Some(Some(Ok(name))) = m.parts.as_ref().map(|p| p.get(&func.name)) else {
        return Err(ExecError::Invalid(
            "a part of a kernel that cannot be sliced",
        ));
    };
    let cname = CString::new(name.as_str()).map_err(|_| ExecError::NotFound(name.clone()))?;
    let mut raw: CUfunction = ptr::null_mut();
    // SAFETY: `raw` is a valid out-pointer, `m.raw` a live module of the
    // current context, `cname` NUL-terminated and alive for the call.
    check("cuModuleGetFunction", unsafe {
        (api.cuModuleGetFunction)(&mut raw, m.raw, cname.as_ptr())
    })?;
    let layout = collect_layout(|index| {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `raw` is a live function of the current context; both are
        // valid out-pointers.
        let result = unsafe { (api.cuFuncGetParamInfo)(raw, index, &mut offset, &mut size) };
        (result, offset, size)
    })?;
    let n = func.layout.len();
    let ok = layout.len() == n + 6
        && layout[..n] == func.layout[..]
        && layout[n..].iter().all(|p| p.size == 4);
    if !ok {
        return Err(ExecError::Invalid(
            "a part companion whose parameters are not the kernel's plus six u32",
        ));
    }
    let p = PartFunction { raw, layout };
    if let Some(func) = c.functions.get_mut(&f.0) {
        func.part = Some(p.clone());
    }
    Ok(p)
}

/// `cuLaunchKernelEx`'s attributes for a launch's options (clusters larger
/// than one block, cooperative).
fn launch_attributes(o: &LaunchOptions) -> Vec<api::LaunchAttribute> {
    let mut attrs = Vec::with_capacity(2);
    if o.cluster != [1, 1, 1] {
        let mut a = api::LaunchAttribute {
            id: api::LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
            ..Default::default()
        };
        a.value[..3].copy_from_slice(&o.cluster);
        attrs.push(a);
    }
    if o.cooperative {
        let mut a = api::LaunchAttribute {
            id: api::LAUNCH_ATTRIBUTE_COOPERATIVE,
            ..Default::default()
        };
        a.value[0] = 1;
        attrs.push(a);
    }
    attrs
}

impl Drop for CudaExecutor {
    fn drop(&mut self) {
        let ids: Vec<u64> = self.contexts.keys().copied().collect();
        for id in ids {
            self.destroy_context(CtxId(id));
        }
        if self.primary.take().is_some() {
            // SAFETY: the primary context was retained once by this
            // executor; this is the matching release.
            let result = unsafe { (self.api.cuDevicePrimaryCtxRelease_v2)(self.device) };
            if let Err(e) = check("cuDevicePrimaryCtxRelease_v2", result) {
                tracing::debug!("{e}");
            }
        }
    }
}

impl GpuExecutor for CudaExecutor {
    fn device(&self) -> &DeviceProps {
        &self.props
    }

    fn sticky_errors_poison_process(&self) -> bool {
        // Measured on an H100 (driver 580): after one context's kernel hit
        // an illegal address, cuCtxCreate_v2 in the same process returned
        // CUDA_ERROR_ILLEGAL_ADDRESS for every later guest.
        true
    }

    fn device_free_mem(&mut self) -> ExecResult<u64> {
        let raw = match self.contexts.values().next() {
            Some(c) => c.raw,
            None => self.primary_context()?,
        };
        set_current(self.api, raw)?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid out-pointers; a context is current.
        check("cuMemGetInfo_v2", unsafe {
            (self.api.cuMemGetInfo_v2)(&mut free, &mut total)
        })?;
        Ok(free as u64)
    }

    fn gpu_time_ns(&mut self) -> u64 {
        self.harvest();
        self.gpu_time_ns
    }

    fn create_context(&mut self) -> ExecResult<CtxId> {
        let mut raw: CUcontext = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; `self.device` came from
        // `cuDeviceGet`.
        check("cuCtxCreate_v2", unsafe {
            (self.api.cuCtxCreate_v2)(&mut raw, CTX_FLAGS, self.device)
        })?;
        // cuCtxCreate pushed the context on this thread's stack; pop it so
        // the stack does not grow with every context (calls use
        // cuCtxSetCurrent, which replaces the top).
        let mut popped: CUcontext = ptr::null_mut();
        // SAFETY: `popped` is a valid out-pointer; the new context is on top
        // of the calling thread's stack.
        let result = unsafe { (self.api.cuCtxPopCurrent_v2)(&mut popped) };
        if let Err(e) = check("cuCtxPopCurrent_v2", result) {
            tracing::debug!("{e}");
        }
        let id = self.fresh_id();
        self.contexts.insert(id, Context::new(raw));
        Ok(CtxId(id))
    }

    fn destroy_context(&mut self, ctx: CtxId) {
        let api = self.api;
        if !self.contexts.contains_key(&ctx.0) {
            return;
        }
        // Give its launches a bounded time to finish, so that their device
        // time counts; never wait on a runaway kernel.
        let deadline = Instant::now() + self.destroy_wait;
        loop {
            self.harvest();
            if !self.pending.iter().any(|p| p.ctx == ctx.0) || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        // With the guard, a launch still running is waited for up to the
        // limit: cuCtxDestroy would wait for it with no bound at all (an
        // H200's driver did not return in 40 s). A runaway leaves the
        // context to the process's exit.
        if self.await_launches(ctx, None).is_err() {
            tracing::warn!("a context with a runaway kernel is left to the worker's exit");
            return;
        }
        let Some(mut c) = self.contexts.remove(&ctx.0) else {
            return;
        };
        let mut timing = Vec::new();
        self.pending.retain(|p| {
            if p.ctx == ctx.0 {
                timing.extend([p.start, p.end]);
                false
            } else {
                true
            }
        });
        // Release what we can even if the context cannot be made current;
        // destroying it frees the rest.
        let _ = set_current(api, c.raw);
        c.release_all(api, timing);
        // SAFETY: `c.raw` is a live context; it is out of the table and no
        // handle of it remains in any table.
        let result = unsafe { (api.cuCtxDestroy_v2)(c.raw) };
        if let Err(e) = check("cuCtxDestroy_v2", result) {
            tracing::warn!("destroying a context: {e}");
        }
    }

    fn synchronize(&mut self, ctx: CtxId) -> ExecResult<()> {
        let api = self.api;
        self.enter(ctx)?;
        self.await_launches(ctx, None)?;
        self.enter(ctx)?;
        // SAFETY: the context is current.
        let waited = check("cuCtxSynchronize", unsafe { (api.cuCtxSynchronize)() });
        self.synchronized(waited)
    }

    fn sync_mark(&mut self, ctx: CtxId, what: SyncTarget) -> Option<SyncMark> {
        let id = self.fresh_id();
        let api = self.api;
        let c = self.enter(ctx).ok()?;
        let mark = match what {
            SyncTarget::Event(e) => {
                c.event(e).ok()?;
                Mark::Event(e.0)
            }
            SyncTarget::Stream(s) => {
                // The legacy NULL stream's marker completes after the
                // blocking streams' earlier work, as its synchronization.
                let raw = c.stream(s).ok()?;
                Mark::Markers(vec![c.marker(api, raw).ok()?])
            }
            SyncTarget::Context => {
                if c.streams.len() > MAX_MARKED_STREAMS {
                    return None;
                }
                // The NULL stream and every stream (non-blocking ones do not
                // order with the NULL stream).
                let streams: Vec<CUstream> = std::iter::once(ptr::null_mut())
                    .chain(c.streams.values().copied())
                    .collect();
                let mut markers = Vec::with_capacity(streams.len());
                for raw in streams {
                    match c.marker(api, raw) {
                        Ok(e) => markers.push(e),
                        Err(_) => {
                            c.retire_markers(api, markers);
                            return None;
                        }
                    }
                }
                Mark::Markers(markers)
            }
        };
        c.marks.insert(id, mark);
        Some(SyncMark(id))
    }

    fn sync_pending(&mut self, ctx: CtxId, mark: &SyncMark) -> SyncPending {
        let api = self.api;
        if self.runaway.is_some() {
            // Served now: its synchronization fails.
            return SyncPending::Done;
        }
        let Ok(c) = self.enter(ctx) else {
            return SyncPending::Done;
        };
        let running = |e: CUevent| {
            // SAFETY: `e` is a live event of the current context: a marker
            // is released only with its mark, and a guest's event is looked
            // up in the context's table.
            unsafe { (api.cuEventQuery)(e) == CUDA_ERROR_NOT_READY }
        };
        let done = match c.marks.get(&mark.0) {
            None => true,
            Some(Mark::Event(e)) => c.events.get(e).is_none_or(|&raw| !running(raw)),
            Some(Mark::Markers(v)) => !v.iter().any(|&e| running(e)),
        };
        if done {
            return SyncPending::Done;
        }
        if self.request_limit.is_some() {
            // Meanwhile the runaway guard watches the launches, as the
            // synchronization's own wait would.
            self.harvest();
            if self.runaway.is_some() {
                return SyncPending::Done;
            }
        }
        SyncPending::Running
    }

    fn sync_marked(&mut self, ctx: CtxId, mark: SyncMark) -> ExecResult<()> {
        let api = self.api;
        if self.runaway.is_some() {
            self.sync_forget(ctx, mark);
            return Err(ExecError::Driver {
                call: "runaway guard",
                status: Status::LAUNCH_TIMEOUT,
            });
        }
        let c = self.enter(ctx)?;
        let waited = match c.marks.remove(&mark.0) {
            None => return self.synchronize(ctx),
            Some(Mark::Event(e)) => {
                let raw = c.event(EventId(e))?;
                // SAFETY: a live event of the current context.
                check("cuEventSynchronize", unsafe {
                    (api.cuEventSynchronize)(raw)
                })
            }
            Some(Mark::Markers(markers)) => {
                let mut waited = Ok(());
                for &e in &markers {
                    // SAFETY: a live marker event of the current context.
                    let r = check("cuEventSynchronize", unsafe { (api.cuEventSynchronize)(e) });
                    if waited.is_ok() {
                        waited = r;
                    }
                }
                c.retire_markers(api, markers);
                waited
            }
        };
        self.synchronized(waited)
    }

    fn sync_forget(&mut self, ctx: CtxId, mark: SyncMark) {
        let api = self.api;
        let Ok(c) = self.enter(ctx) else {
            return;
        };
        if let Some(Mark::Markers(markers)) = c.marks.remove(&mark.0) {
            c.retire_markers(api, markers);
        }
    }

    fn mem_alloc(&mut self, ctx: CtxId, bytes: u64) -> ExecResult<DevPtr> {
        let size = usize::try_from(bytes).map_err(|_| ExecError::OutOfMemory(bytes))?;
        let api = self.api;
        let c = self.enter(ctx)?;
        let mut p: CUdeviceptr = 0;
        // SAFETY: `p` is a valid out-pointer; the context is current.
        let result = unsafe { (api.cuMemAlloc_v2)(&mut p, size) };
        if result == CUDA_ERROR_OUT_OF_MEMORY {
            return Err(ExecError::OutOfMemory(bytes));
        }
        check("cuMemAlloc_v2", result)?;
        c.allocs.insert(p);
        Ok(p)
    }

    fn mem_free(&mut self, ctx: CtxId, ptr: DevPtr) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        if !c.allocs.remove(&ptr) {
            return Err(ExecError::Invalid("device pointer"));
        }
        // SAFETY: `ptr` is an allocation of the current context, now out
        // of its table.
        check("cuMemFree_v2", unsafe { (api.cuMemFree_v2)(ptr) })
    }

    fn va_reserve(&mut self, ctx: CtxId, bytes: u64, align: u64) -> ExecResult<DevPtr> {
        let size = usize::try_from(bytes).map_err(|_| ExecError::OutOfMemory(bytes))?;
        let align = usize::try_from(align).map_err(|_| ExecError::Invalid("alignment"))?;
        let api = self.api;
        let c = self.enter(ctx)?;
        let mut p: CUdeviceptr = 0;
        // SAFETY: `p` is a valid out-pointer; no fixed address is asked for.
        let result = unsafe { (api.cuMemAddressReserve)(&mut p, size, align, 0, 0) };
        if result == CUDA_ERROR_OUT_OF_MEMORY {
            return Err(ExecError::OutOfMemory(bytes));
        }
        check("cuMemAddressReserve", result)?;
        c.reservations.insert(p, size);
        Ok(p)
    }

    fn va_free(&mut self, ctx: CtxId, base: DevPtr, bytes: u64) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        match c.reservations.get(&base) {
            Some(&b) if b as u64 == bytes => {}
            _ => return Err(ExecError::Invalid("reservation")),
        }
        let size = c.reservations.remove(&base).expect("checked");
        // SAFETY: a reservation of this context with nothing mapped (the
        // request layer checked), now out of its table.
        check("cuMemAddressFree", unsafe {
            (api.cuMemAddressFree)(base, size)
        })
    }

    fn phys_create(&mut self, ctx: CtxId, bytes: u64) -> ExecResult<PhysId> {
        let size = usize::try_from(bytes).map_err(|_| ExecError::OutOfMemory(bytes))?;
        let api = self.api;
        let ordinal = i32::try_from(self.ordinal).map_err(|_| ExecError::Invalid("device"))?;
        let id = self.fresh_id();
        let c = self.enter(ctx)?;
        let prop = api::MemAllocationProp {
            alloc_type: 1,
            handle_types: 0,
            location_type: 1,
            location_id: ordinal,
            win32_metadata: ptr::null_mut(),
            flags: [0; 8],
        };
        let mut h: u64 = 0;
        // SAFETY: `h` is a valid out-pointer, `prop` a complete description.
        let result = unsafe { (api.cuMemCreate)(&mut h, size, &prop, 0) };
        if result == CUDA_ERROR_OUT_OF_MEMORY {
            return Err(ExecError::OutOfMemory(bytes));
        }
        check("cuMemCreate", result)?;
        c.phys.insert(id, h);
        Ok(PhysId(id))
    }

    fn phys_release(&mut self, ctx: CtxId, mem: PhysId) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let h = c
            .phys
            .remove(&mem.0)
            .ok_or(ExecError::Invalid("memory handle"))?;
        // SAFETY: memory this context made, mapped nowhere (the request
        // layer checked), now out of its table.
        check("cuMemRelease", unsafe { (api.cuMemRelease)(h) })
    }

    fn phys_move(&mut self, from: CtxId, to: CtxId, mem: PhysId) -> ExecResult<()> {
        // The driver's allocation handles belong to the process, not to a
        // context: only which context's table releases it changes.
        if !self.contexts.contains_key(&to.0) {
            return Err(ExecError::Invalid("context"));
        }
        let h = self
            .contexts
            .get_mut(&from.0)
            .ok_or(ExecError::Invalid("context"))?
            .phys
            .remove(&mem.0)
            .ok_or(ExecError::Invalid("memory handle"))?;
        self.contexts
            .get_mut(&to.0)
            .expect("checked")
            .phys
            .insert(mem.0, h);
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
        let size = usize::try_from(bytes).map_err(|_| ExecError::Invalid("size"))?;
        let offset = usize::try_from(offset).map_err(|_| ExecError::Invalid("offset"))?;
        let api = self.api;
        let c = self.enter(ctx)?;
        let h = *c
            .phys
            .get(&mem.0)
            .ok_or(ExecError::Invalid("memory handle"))?;
        // SAFETY: the range lies in a reservation of this context over no
        // other mapping, and `offset + size` inside the memory (checked by
        // the request layer).
        check("cuMemMap", unsafe {
            (api.cuMemMap)(addr, size, offset, h, 0)
        })?;
        c.mappings.insert(addr, size);
        Ok(())
    }

    fn unmap(&mut self, ctx: CtxId, addr: DevPtr, bytes: u64) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        match c.mappings.get(&addr) {
            Some(&b) if b as u64 == bytes => {}
            _ => return Err(ExecError::Invalid("mapping")),
        }
        let size = c.mappings.remove(&addr).expect("checked");
        // SAFETY: a whole mapping of this context, now out of its table.
        check("cuMemUnmap", unsafe { (api.cuMemUnmap)(addr, size) })
    }

    fn set_access(&mut self, ctx: CtxId, addr: DevPtr, bytes: u64, prot: u32) -> ExecResult<()> {
        let size = usize::try_from(bytes).map_err(|_| ExecError::Invalid("size"))?;
        let api = self.api;
        let ordinal = i32::try_from(self.ordinal).map_err(|_| ExecError::Invalid("device"))?;
        self.enter(ctx)?;
        let desc = api::MemAccessDesc {
            location_type: 1,
            location_id: ordinal,
            flags: prot,
        };
        // SAFETY: the range is whole mappings of this context (checked by
        // the request layer); one descriptor.
        check("cuMemSetAccess", unsafe {
            (api.cuMemSetAccess)(addr, size, &desc, 1)
        })
    }

    fn memcpy_htod(
        &mut self,
        ctx: CtxId,
        dst: DevPtr,
        src: &[u8],
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        // Copies wait behind the stream's kernels: bounded by the guard.
        self.await_launches(ctx, stream.map(|s| Some(s.0)))?;
        let api = self.api;
        let c = self.enter(ctx)?;
        let s = c.stream(stream)?;
        let host = src.as_ptr().cast::<c_void>();
        if s.is_null() {
            // SAFETY: `src` is readable for its length; the request layer
            // checked the device range. The call returns once `src` may be
            // reused.
            return check("cuMemcpyHtoD_v2", unsafe {
                (api.cuMemcpyHtoD_v2)(dst, host, src.len())
            });
        }
        // SAFETY: as above; `s` is a live stream of the current context.
        // `src` outlives the copy: the stream is synchronized below before
        // this function returns.
        check("cuMemcpyHtoDAsync_v2", unsafe {
            (api.cuMemcpyHtoDAsync_v2)(dst, host, src.len(), s)
        })?;
        // SAFETY: `s` is a live stream of the current context.
        check("cuStreamSynchronize", unsafe {
            (api.cuStreamSynchronize)(s)
        })
    }

    fn memcpy_dtoh(
        &mut self,
        ctx: CtxId,
        dst: &mut [u8],
        src: DevPtr,
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        // Copies wait behind the stream's kernels: bounded by the guard.
        self.await_launches(ctx, stream.map(|s| Some(s.0)))?;
        let api = self.api;
        let c = self.enter(ctx)?;
        let s = c.stream(stream)?;
        let host = dst.as_mut_ptr().cast::<c_void>();
        if s.is_null() {
            // SAFETY: `dst` is writable for its length; the request layer
            // checked the device range. The call returns once `dst` holds
            // the data.
            return check("cuMemcpyDtoH_v2", unsafe {
                (api.cuMemcpyDtoH_v2)(host, src, dst.len())
            });
        }
        // SAFETY: as above; `s` is a live stream of the current context.
        // `dst` outlives the copy: the stream is synchronized below before
        // this function returns.
        check("cuMemcpyDtoHAsync_v2", unsafe {
            (api.cuMemcpyDtoHAsync_v2)(host, src, dst.len(), s)
        })?;
        // SAFETY: `s` is a live stream of the current context.
        check("cuStreamSynchronize", unsafe {
            (api.cuStreamSynchronize)(s)
        })
    }

    fn memcpy_dtod(
        &mut self,
        ctx: CtxId,
        dst: DevPtr,
        src: DevPtr,
        bytes: u64,
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        let size = usize::try_from(bytes).map_err(|_| ExecError::Invalid("copy size"))?;
        let api = self.api;
        let c = self.enter(ctx)?;
        let s = c.stream(stream)?;
        if s.is_null() {
            // SAFETY: device addresses only (checked by the request layer);
            // the context is current.
            return check("cuMemcpyDtoD_v2", unsafe {
                (api.cuMemcpyDtoD_v2)(dst, src, size)
            });
        }
        // SAFETY: as above; `s` is a live stream of the current context.
        check("cuMemcpyDtoDAsync_v2", unsafe {
            (api.cuMemcpyDtoDAsync_v2)(dst, src, size, s)
        })
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
        let n = usize::try_from(count).map_err(|_| ExecError::Invalid("memset count"))?;
        let bad_value = |_| ExecError::Invalid("memset value");
        let api = self.api;
        let c = self.enter(ctx)?;
        let s = c.stream(stream)?;
        // Every call below: device addresses only (checked by the request
        // layer); the context is current and `s` is null or a live stream
        // of it.
        match (elem_size, s.is_null()) {
            (1, true) => {
                let v = u8::try_from(value).map_err(bad_value)?;
                // SAFETY: see above.
                check("cuMemsetD8_v2", unsafe { (api.cuMemsetD8_v2)(dst, v, n) })
            }
            (1, false) => {
                let v = u8::try_from(value).map_err(bad_value)?;
                // SAFETY: see above.
                check("cuMemsetD8Async", unsafe {
                    (api.cuMemsetD8Async)(dst, v, n, s)
                })
            }
            (2, true) => {
                let v = u16::try_from(value).map_err(bad_value)?;
                // SAFETY: see above.
                check("cuMemsetD16_v2", unsafe { (api.cuMemsetD16_v2)(dst, v, n) })
            }
            (2, false) => {
                let v = u16::try_from(value).map_err(bad_value)?;
                // SAFETY: see above.
                check("cuMemsetD16Async", unsafe {
                    (api.cuMemsetD16Async)(dst, v, n, s)
                })
            }
            (4, true) => {
                // SAFETY: see above.
                check("cuMemsetD32_v2", unsafe {
                    (api.cuMemsetD32_v2)(dst, value, n)
                })
            }
            (4, false) => {
                // SAFETY: see above.
                check("cuMemsetD32Async", unsafe {
                    (api.cuMemsetD32Async)(dst, value, n, s)
                })
            }
            _ => Err(ExecError::Invalid("memset element size")),
        }
    }

    fn module_load(&mut self, ctx: CtxId, image: &[u8]) -> ExecResult<ModId> {
        let image = image::prepare_image(image).map_err(ExecError::InvalidImage)?;
        let id = self.fresh_id();
        let api = self.api;
        // Kernel slicing: a PTX module is loaded with a part companion of
        // each kernel that can have one (`fairgpu_ptx::part`), in the same
        // module so that its variables stay shared.
        let text = match image::ptx_text(&image) {
            _ if !self.slicing => None,
            Some(text) => Some(text.to_owned()),
            None => self.jit_ptx_of_fatbin(&image),
        };
        let parted = match text {
            Some(text) => {
                let p = fairgpu_ptx::add_part_entries(&text);
                p.entries.iter().any(|e| e.part.is_ok()).then(|| {
                    let mut bytes = p.text.into_bytes();
                    bytes.push(0);
                    let parts = p.entries.into_iter().map(|e| (e.name, e.part)).collect();
                    (bytes, parts)
                })
            }
            _ => None,
        };
        let c = self.enter(ctx)?;
        let load = |bytes: &[u8]| {
            let mut raw: CUmodule = ptr::null_mut();
            // SAFETY: `raw` is a valid out-pointer; the context is current.
            // `bytes` was checked by `prepare_image` (PTX ends in a NUL, and
            // the extents a cubin or fatbin declares lie inside the buffer),
            // or is PTX text we made, NUL-terminated: the driver reads only
            // memory we own. It keeps its own copy of what it needs.
            check("cuModuleLoadData", unsafe {
                (api.cuModuleLoadData)(&mut raw, bytes.as_ptr().cast())
            })
            .map(|()| raw)
        };
        let (raw, parts) = match parted {
            Some((bytes, parts)) => match load(&bytes) {
                Ok(raw) => (raw, Some(parts)),
                Err(e) => {
                    // The guest's own text decides: loaded as it came.
                    tracing::info!("a module with part companions did not load ({e}); loading it as sent, unsliced");
                    (load(&image)?, None)
                }
            },
            None => (load(&image)?, None),
        };
        c.modules.insert(
            id,
            Module {
                raw,
                by_name: HashMap::new(),
                parts,
            },
        );
        Ok(ModId(id))
    }

    fn module_unload(&mut self, ctx: CtxId, module: ModId) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let m = c
            .modules
            .remove(&module.0)
            .ok_or(ExecError::Invalid("module"))?;
        c.functions.retain(|_, f| f.module != module.0);
        // SAFETY: a live module of the current context, now out of its
        // table together with its functions.
        check("cuModuleUnload", unsafe { (api.cuModuleUnload)(m.raw) })
    }

    fn function(
        &mut self,
        ctx: CtxId,
        module: ModId,
        name: &str,
    ) -> ExecResult<(FnId, Vec<ParamInfo>)> {
        let id = self.fresh_id();
        let api = self.api;
        let c = self.enter(ctx)?;
        let m = c
            .modules
            .get_mut(&module.0)
            .ok_or(ExecError::Invalid("module"))?;
        if let Some(&known) = m.by_name.get(name) {
            if let Some(f) = c.functions.get(&known) {
                return Ok((FnId(known), f.layout.clone()));
            }
        }
        let cname = CString::new(name).map_err(|_| ExecError::NotFound(name.to_string()))?;
        let mut raw: CUfunction = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer, `m.raw` a live module of the
        // current context, `cname` a NUL-terminated string alive for the
        // call.
        let result = unsafe { (api.cuModuleGetFunction)(&mut raw, m.raw, cname.as_ptr()) };
        if result == CUDA_ERROR_NOT_FOUND {
            return Err(ExecError::NotFound(name.to_string()));
        }
        check("cuModuleGetFunction", result)?;
        let layout = collect_layout(|index| {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: `raw` is a live function of the current context; both
            // are valid out-pointers.
            let result = unsafe { (api.cuFuncGetParamInfo)(raw, index, &mut offset, &mut size) };
            (result, offset, size)
        })?;
        m.by_name.insert(name.to_string(), id);
        c.functions.insert(
            id,
            Function {
                raw,
                module: module.0,
                layout: layout.clone(),
                name: name.to_string(),
                part: None,
                ns_per_block: None,
            },
        );
        Ok((FnId(id), layout))
    }

    fn module_global(
        &mut self,
        ctx: CtxId,
        module: ModId,
        name: &str,
    ) -> ExecResult<(DevPtr, u64)> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let raw = c
            .modules
            .get(&module.0)
            .ok_or(ExecError::Invalid("module"))?
            .raw;
        let cname = CString::new(name).map_err(|_| ExecError::NotFound(name.to_string()))?;
        let (mut ptr, mut size): (CUdeviceptr, usize) = (0, 0);
        // SAFETY: `raw` is a live module of the current context, both
        // out-pointers are valid, `cname` is NUL-terminated and alive.
        let result =
            unsafe { (api.cuModuleGetGlobal_v2)(&mut ptr, &mut size, raw, cname.as_ptr()) };
        if result == CUDA_ERROR_NOT_FOUND {
            return Err(ExecError::NotFound(name.to_string()));
        }
        check("cuModuleGetGlobal_v2", result)?;
        Ok((ptr, size as u64))
    }

    fn module_global_managed(
        &mut self,
        ctx: CtxId,
        _module: ModId,
        _name: &str,
        ptr: DevPtr,
    ) -> bool {
        /// `CU_POINTER_ATTRIBUTE_IS_MANAGED`.
        const IS_MANAGED: c_int = 8;
        let api = self.api;
        if self.enter(ctx).is_err() {
            return false;
        }
        let mut managed: c_uint = 0;
        // SAFETY: the attribute is an unsigned int written through a
        // valid out-pointer; `ptr` is a module variable of the current
        // context.
        let result = unsafe {
            (api.cuPointerGetAttribute)((&mut managed as *mut c_uint).cast(), IS_MANAGED, ptr)
        };
        result == CUDA_SUCCESS && managed != 0
    }

    fn function_attribute(&mut self, ctx: CtxId, f: FnId, attr: i32) -> ExecResult<i32> {
        let api = self.api;
        let raw = self.raw_function(ctx, f)?;
        let mut v: c_int = 0;
        // SAFETY: `raw` is a live function of the current context and `v`
        // a valid out-pointer; the driver checks the attribute.
        let result = unsafe { (api.cuFuncGetAttribute)(&mut v, attr, raw) };
        check("cuFuncGetAttribute", result)?;
        Ok(v)
    }

    fn stack_reserve(&self, per_thread: u64) -> u64 {
        let threads = [
            super::attr::MULTIPROCESSOR_COUNT,
            super::attr::MAX_THREADS_PER_MULTIPROCESSOR,
        ]
        .map(|a| u64::try_from(self.props.attribute(a).unwrap_or(0)).unwrap_or(0));
        per_thread
            .saturating_mul(threads[0])
            .saturating_mul(threads[1])
    }

    fn set_limit(&mut self, ctx: CtxId, limit: u32, value: u64) -> ExecResult<()> {
        let api = self.api;
        self.enter(ctx)?;
        let limit = c_int::try_from(limit).map_err(|_| ExecError::Invalid("limit"))?;
        let value = usize::try_from(value).map_err(|_| ExecError::Invalid("limit value"))?;
        // SAFETY: the context is current; the driver checks both values.
        check("cuCtxSetLimit", unsafe {
            (api.cuCtxSetLimit)(limit, value)
        })
    }

    fn set_function_attribute(
        &mut self,
        ctx: CtxId,
        f: FnId,
        attr: i32,
        value: i32,
    ) -> ExecResult<()> {
        let api = self.api;
        let raw = self.raw_function(ctx, f)?;
        // SAFETY: `raw` is a live function of the current context; the
        // driver checks the attribute and value.
        let result = unsafe { (api.cuFuncSetAttribute)(raw, attr, value) };
        check("cuFuncSetAttribute", result)
    }

    fn launch(
        &mut self,
        ctx: CtxId,
        f: FnId,
        cfg: &LaunchConfig,
        params: &[u8],
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        self.make_room_for_timing();
        let api = self.api;
        let c = self.enter(ctx)?;
        let func = c
            .functions
            .get(&f.0)
            .ok_or(ExecError::Invalid("function"))?;
        check_param_buffer(&func.layout, params.len())?;
        let s = c.stream(stream)?;
        // A part of a sliced launch runs the kernel's companion over the
        // box, with the box's offset and the grid's size appended.
        let (raw, takes_params, grid, params, blocks) = match cfg.part {
            None => (
                func.raw,
                !func.layout.is_empty(),
                cfg.grid,
                std::borrow::Cow::Borrowed(params),
                cfg.blocks(),
            ),
            Some(part) => {
                if !part.fits(cfg.grid) {
                    return Err(ExecError::Invalid("grid part outside the grid"));
                }
                let packed = ParamInfo::packed_size(&func.layout) as usize;
                let pf = part_function(api, c, f)?;
                let mut buf = params[..packed].to_vec();
                let extra = &pf.layout[pf.layout.len() - 6..];
                let words = [part.offset, cfg.grid].concat();
                for (p, v) in extra.iter().zip(words) {
                    let at = p.offset as usize;
                    if buf.len() < at + 4 {
                        buf.resize(at + 4, 0);
                    }
                    buf[at..at + 4].copy_from_slice(&v.to_ne_bytes());
                }
                (
                    pf.raw,
                    true,
                    part.extent,
                    std::borrow::Cow::Owned(buf),
                    part.blocks(),
                )
            }
        };

        let mut buffer = ParamBuffer::new(&params);
        let mut size: usize = buffer.len;
        let mut extra: [*mut c_void; 5] = [
            ptr::without_provenance_mut(CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize),
            buffer.words.as_mut_ptr().cast(),
            ptr::without_provenance_mut(CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize),
            (&raw mut size).cast(),
            ptr::without_provenance_mut(CU_LAUNCH_PARAM_END_AS_INT as usize),
        ];
        // A kernel without parameters gets neither parameter form.
        let extra_ptr = if !takes_params {
            ptr::null_mut()
        } else {
            extra.as_mut_ptr()
        };

        let (start, end) = c.timing_pair(api)?;
        // SAFETY: `start` is a live event and `s` null or a live stream of
        // the current context.
        if let Err(e) = check("cuEventRecord", unsafe { (api.cuEventRecord)(start, s) }) {
            c.recycle(api, start);
            c.recycle(api, end);
            return Err(e);
        }
        let [gx, gy, gz] = grid;
        let [bx, by, bz] = cfg.block;
        // SAFETY: `raw` is a live function and `s` null or a live stream of
        // the current context. `extra` is null or a CU_LAUNCH_PARAM_END-
        // terminated list naming `buffer` (at least `size` readable bytes,
        // checked against the kernel's layout above) and `size`; the driver
        // copies the parameters before returning, and both outlive the call.
        let launched = if cfg.options.is_plain() {
            // SAFETY: see above.
            check("cuLaunchKernel", unsafe {
                (api.cuLaunchKernel)(
                    raw,
                    gx,
                    gy,
                    gz,
                    bx,
                    by,
                    bz,
                    cfg.shared_mem,
                    s,
                    ptr::null_mut(),
                    extra_ptr,
                )
            })
        } else {
            let mut attrs = launch_attributes(&cfg.options);
            let config = api::LaunchConfigC {
                grid,
                block: cfg.block,
                shared_mem: cfg.shared_mem,
                stream: s,
                attrs: attrs.as_mut_ptr(),
                num_attrs: attrs.len() as u32,
            };
            // SAFETY: as for cuLaunchKernel above; `config` and the
            // attributes it points at (cuda.h's layouts, sizes asserted in
            // `api`) live across the call, which copies them.
            check("cuLaunchKernelEx", unsafe {
                (api.cuLaunchKernelEx)(&config, raw, ptr::null_mut(), extra_ptr)
            })
        };
        if let Err(e) = launched {
            c.recycle(api, start);
            c.recycle(api, end);
            return Err(e);
        }
        // SAFETY: as for `start`.
        if let Err(e) = check("cuEventRecord", unsafe { (api.cuEventRecord)(end, s) }) {
            // The kernel is queued; only its device time is lost.
            tracing::debug!("device time of a launch lost: {e}");
            c.recycle(api, start);
            c.recycle(api, end);
            return Ok(());
        }
        self.pending.push_back(TimingPair {
            ctx: ctx.0,
            f: f.0,
            blocks,
            running_since: None,
            stream: stream.map(|s| s.0),
            start,
            end,
        });
        Ok(())
    }

    fn sliceable(&mut self, ctx: CtxId, f: FnId) -> Result<(), super::Unsliceable> {
        let c = self.contexts.get(&ctx.0).ok_or("unknown context")?;
        let func = c.functions.get(&f.0).ok_or("unknown function")?;
        let m = c.modules.get(&func.module).ok_or("unknown module")?;
        match m.parts.as_ref() {
            None if !self.slicing => Err("kernel slicing is off"),
            None => Err("its module was not loaded from PTX (a cubin or fatbin has no PTX to cut)"),
            Some(parts) => match parts.get(&func.name) {
                Some(Ok(_)) => Ok(()),
                Some(Err(why)) => Err(why),
                None => Err("the kernel is not an entry of its module's PTX"),
            },
        }
    }

    fn set_slicing(&mut self, on: bool) {
        self.slicing = on;
    }

    fn predict_ns(&mut self, ctx: CtxId, f: FnId, blocks: u64) -> Option<u64> {
        let per = self
            .contexts
            .get(&ctx.0)?
            .functions
            .get(&f.0)?
            .ns_per_block?;
        Some((per * blocks as f64).min(u64::MAX as f64) as u64)
    }

    fn set_request_limit(&mut self, limit: Option<Duration>) {
        self.request_limit = limit;
    }

    fn runaway(&mut self) -> Option<super::Runaway> {
        self.runaway.clone()
    }

    fn runaways(&self) -> u64 {
        self.runaways
    }

    fn array_create(&mut self, ctx: CtxId, desc: &ArrayDesc) -> ExecResult<ArrayId> {
        desc.validate().map_err(ExecError::Invalid)?;
        let d = arrays::array_descriptor(desc)?;
        let id = self.fresh_id();
        let api = self.api;
        let c = self.enter(ctx)?;
        let mut raw: CUarray = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer and `d` a complete
        // descriptor; the context is current.
        check("cuArray3DCreate_v2", unsafe {
            (api.cuArray3DCreate_v2)(&mut raw, &d)
        })?;
        c.arrays.insert(id, raw);
        Ok(ArrayId(id))
    }

    fn array_destroy(&mut self, ctx: CtxId, a: ArrayId) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let raw = c.arrays.remove(&a.0).ok_or(ExecError::Invalid("array"))?;
        // SAFETY: a live array of the current context, now out of its table.
        check("cuArrayDestroy", unsafe { (api.cuArrayDestroy)(raw) })
    }

    fn memcpy_rect(
        &mut self,
        ctx: CtxId,
        copy: &RectCopy,
        mut host: HostData<'_>,
        stream: Option<StreamId>,
    ) -> ExecResult<()> {
        // Copies wait behind the stream's kernels: bounded by the guard.
        self.await_launches(ctx, stream.map(|s| Some(s.0)))?;
        let api = self.api;
        let c = self.enter(ctx)?;
        let s = c.stream(stream)?;
        let p = arrays::memcpy3d(c, copy, &mut host)?;
        if s.is_null() {
            // SAFETY: `p` names live arrays of the current context, device
            // ranges the request layer checked, and a host buffer of
            // exactly the packed rows (checked in `memcpy3d`) that outlives
            // this synchronous call.
            return check("cuMemcpy3D_v2", unsafe { (api.cuMemcpy3D_v2)(&p) });
        }
        // SAFETY: as above; `s` is a live stream of the current context.
        // The host buffer outlives the copy: the stream is synchronized
        // below before this function returns.
        check("cuMemcpy3DAsync_v2", unsafe {
            (api.cuMemcpy3DAsync_v2)(&p, s)
        })?;
        // SAFETY: `s` is a live stream of the current context.
        check("cuStreamSynchronize", unsafe {
            (api.cuStreamSynchronize)(s)
        })
    }

    fn tex_object_create(
        &mut self,
        ctx: CtxId,
        res: &TexResource,
        tex: &TextureDesc,
    ) -> ExecResult<u64> {
        tex.validate().map_err(ExecError::Invalid)?;
        let api = self.api;
        let c = self.enter(ctx)?;
        let r = arrays::resource(c, res)?;
        let t = arrays::texture(tex);
        let mut obj = 0u64;
        // SAFETY: `obj` is a valid out-pointer; `r` and `t` are complete
        // descriptions naming a live array of the current context or
        // device memory the request layer checked; no view description.
        check("cuTexObjectCreate", unsafe {
            (api.cuTexObjectCreate)(&mut obj, &r, &t, ptr::null())
        })?;
        c.textures.insert(obj);
        Ok(obj)
    }

    fn tex_object_destroy(&mut self, ctx: CtxId, t: u64) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        if !c.textures.remove(&t) {
            return Err(ExecError::Invalid("texture object"));
        }
        // SAFETY: a live texture object of the current context, now out of
        // its table.
        check("cuTexObjectDestroy", unsafe { (api.cuTexObjectDestroy)(t) })
    }

    fn surf_object_create(&mut self, ctx: CtxId, a: ArrayId) -> ExecResult<u64> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let r = arrays::resource(c, &TexResource::Array(a))?;
        let mut obj = 0u64;
        // SAFETY: `obj` is a valid out-pointer; `r` names a live array of
        // the current context.
        check("cuSurfObjectCreate", unsafe {
            (api.cuSurfObjectCreate)(&mut obj, &r)
        })?;
        c.surfaces.insert(obj);
        Ok(obj)
    }

    fn surf_object_destroy(&mut self, ctx: CtxId, s: u64) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        if !c.surfaces.remove(&s) {
            return Err(ExecError::Invalid("surface object"));
        }
        // SAFETY: a live surface object of the current context, now out of
        // its table.
        check("cuSurfObjectDestroy", unsafe {
            (api.cuSurfObjectDestroy)(s)
        })
    }

    fn stream_create(&mut self, ctx: CtxId, flags: u32) -> ExecResult<StreamId> {
        self.new_stream(ctx, "cuStreamCreate", |api, raw| {
            // SAFETY: `raw` is a valid out-pointer; the context is current;
            // the driver checks `flags`.
            unsafe { (api.cuStreamCreate)(raw, flags) }
        })
    }

    fn stream_priority_range(&mut self, ctx: CtxId) -> ExecResult<(i32, i32)> {
        let api = self.api;
        self.enter(ctx)?;
        let (mut least, mut greatest): (c_int, c_int) = (0, 0);
        // SAFETY: both are valid out-pointers; the context is current.
        check("cuCtxGetStreamPriorityRange", unsafe {
            (api.cuCtxGetStreamPriorityRange)(&mut least, &mut greatest)
        })?;
        Ok((least, greatest))
    }

    fn stream_create_with_priority(
        &mut self,
        ctx: CtxId,
        flags: u32,
        priority: i32,
    ) -> ExecResult<StreamId> {
        self.new_stream(ctx, "cuStreamCreateWithPriority", |api, raw| {
            // SAFETY: `raw` is a valid out-pointer; the context is current;
            // the driver checks `flags` and clamps `priority`.
            unsafe { (api.cuStreamCreateWithPriority)(raw, flags, priority) }
        })
    }

    fn stream_destroy(&mut self, ctx: CtxId, s: StreamId) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let raw = c.streams.remove(&s.0).ok_or(ExecError::Invalid("stream"))?;
        // SAFETY: a live stream of the current context, now out of its
        // table.
        check("cuStreamDestroy_v2", unsafe {
            (api.cuStreamDestroy_v2)(raw)
        })
    }

    fn stream_synchronize(&mut self, ctx: CtxId, s: Option<StreamId>) -> ExecResult<()> {
        let api = self.api;
        self.enter(ctx)?.stream(s)?;
        // The NULL stream orders after every blocking stream: all launches.
        self.await_launches(ctx, s.map(|s| Some(s.0)))?;
        let raw = self.enter(ctx)?.stream(s)?;
        // SAFETY: `raw` is null or a live stream of the current context.
        let waited = check("cuStreamSynchronize", unsafe {
            (api.cuStreamSynchronize)(raw)
        });
        self.synchronized(waited)
    }

    fn stream_query(&mut self, ctx: CtxId, s: Option<StreamId>) -> ExecResult<()> {
        let api = self.api;
        let raw = self.enter(ctx)?.stream(s)?;
        // SAFETY: `raw` is null or a live stream of the current context.
        check("cuStreamQuery", unsafe { (api.cuStreamQuery)(raw) })
    }

    fn stream_wait_event(&mut self, ctx: CtxId, s: Option<StreamId>, e: EventId) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let raw_s = c.stream(s)?;
        let raw_e = c.event(e)?;
        // SAFETY: `raw_s` is null or a live stream, `raw_e` a live event,
        // both of the current context; flags must be 0.
        check("cuStreamWaitEvent", unsafe {
            (api.cuStreamWaitEvent)(raw_s, raw_e, 0)
        })
    }

    fn event_create(&mut self, ctx: CtxId, flags: u32) -> ExecResult<EventId> {
        let id = self.fresh_id();
        let api = self.api;
        let c = self.enter(ctx)?;
        let mut raw: CUevent = ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the context is current; the
        // driver checks `flags`.
        check("cuEventCreate", unsafe {
            (api.cuEventCreate)(&mut raw, flags)
        })?;
        c.events.insert(id, raw);
        Ok(EventId(id))
    }

    fn event_destroy(&mut self, ctx: CtxId, e: EventId) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let raw = c.events.remove(&e.0).ok_or(ExecError::Invalid("event"))?;
        // SAFETY: a live event of the current context, now out of its table.
        check("cuEventDestroy_v2", unsafe { (api.cuEventDestroy_v2)(raw) })
    }

    fn event_record(&mut self, ctx: CtxId, e: EventId, s: Option<StreamId>) -> ExecResult<()> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let raw_e = c.event(e)?;
        let raw_s = c.stream(s)?;
        // SAFETY: `raw_e` is a live event and `raw_s` null or a live stream,
        // both of the current context.
        check("cuEventRecord", unsafe {
            (api.cuEventRecord)(raw_e, raw_s)
        })
    }

    fn event_query(&mut self, ctx: CtxId, e: EventId) -> ExecResult<()> {
        let api = self.api;
        let raw = self.enter(ctx)?.event(e)?;
        // SAFETY: a live event of the current context.
        check("cuEventQuery", unsafe { (api.cuEventQuery)(raw) })
    }

    fn event_synchronize(&mut self, ctx: CtxId, e: EventId) -> ExecResult<()> {
        let api = self.api;
        self.enter(ctx)?.event(e)?;
        self.await_launches(ctx, None)?;
        let raw = self.enter(ctx)?.event(e)?;
        // SAFETY: a live event of the current context.
        let waited = check("cuEventSynchronize", unsafe {
            (api.cuEventSynchronize)(raw)
        });
        self.synchronized(waited)
    }

    fn event_elapsed_ms(&mut self, ctx: CtxId, start: EventId, end: EventId) -> ExecResult<f32> {
        let api = self.api;
        let c = self.enter(ctx)?;
        let (a, b) = (c.event(start)?, c.event(end)?);
        let mut ms = 0f32;
        // SAFETY: `ms` is a valid out-pointer; `a` and `b` are live events
        // of the current context.
        check("cuEventElapsedTime", unsafe {
            (api.cuEventElapsedTime)(&mut ms, a, b)
        })?;
        Ok(ms)
    }
}

#[cfg(test)]
mod tests;
