//! A fake libcuda for the unit tests: enough of the driver's behaviour to
//! drive [`super::CudaExecutor`] on a machine without a GPU, and strict
//! about what it is given. Calls that act in a context fail with
//! CUDA_ERROR_INVALID_CONTEXT unless a live context is current; handles are
//! checked against the objects the fake handed out.
//!
//! The one kernel it runs is `add_one(unsigned *data, unsigned n)`; each
//! launch takes [`State::kernel_ms`] of device time. With [`State::hold`]
//! set, recorded work completes only at a synchronize.
//!
//! State is per thread (each test runs on its own thread).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ushort, c_void, CStr};
use std::ptr;

use cudarc::driver::sys::{
    CUarray, CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream,
};

use super::api::{self, Api, CuResult};

const INVALID_VALUE: CuResult = 1;
const OUT_OF_MEMORY: CuResult = 2;
const INVALID_CONTEXT: CuResult = 201;
const INVALID_HANDLE: CuResult = 400;
const NOT_FOUND: CuResult = 500;
const NOT_READY: CuResult = 600;
const ILLEGAL_ADDRESS: CuResult = 700;

/// Device memory of the fake device.
pub(super) const TOTAL_MEM: u64 = 1 << 30;

/// The kernels the fake knows: name and `(offset, size)` of each parameter.
const KERNELS: &[(&str, &[(usize, usize)])] = &[
    ("add_one", &[(0, 8), (8, 4)]),
    ("no_params", &[]),
    // add_one's part companion (kernel slicing): its parameters, then the
    // box's offset and the grid's size.
    (
        "add_one__fairgpu_part",
        &[
            (0, 8),
            (8, 4),
            (12, 4),
            (16, 4),
            (20, 4),
            (24, 4),
            (28, 4),
            (32, 4),
        ],
    ),
];

#[derive(Debug)]
pub(super) struct Alloc {
    pub ctx: usize,
    pub bytes: Vec<u8>,
}

#[derive(Debug, Default)]
pub(super) struct Event {
    pub ctx: usize,
    /// Device clock when recorded, in ms.
    pub at: Option<f64>,
    pub done: bool,
}

/// One kernel launch as the fake saw it.
#[derive(Debug, Clone)]
pub(super) struct Launch {
    pub kernel: &'static str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem: u32,
    pub stream: usize,
    /// The parameter buffer, `CU_LAUNCH_PARAM_BUFFER_SIZE` bytes of it.
    pub params: Vec<u8>,
}

#[derive(Debug, Default)]
pub(super) struct State {
    next_handle: usize,
    next_dev: u64,
    pub initialised: bool,
    pub contexts: HashSet<usize>,
    pub current: usize,
    pub primary_refs: u32,
    pub allocs: BTreeMap<u64, Alloc>,
    pub modules: HashMap<usize, usize>,
    pub functions: HashMap<usize, (usize, &'static str)>,
    /// `cuFuncSetAttribute` values, by function and attribute.
    pub func_attrs: HashMap<(usize, i32), i32>,
    /// Module -> the address of its `fake_global`.
    pub globals: HashMap<usize, u64>,
    pub streams: HashMap<usize, usize>,
    /// Each stream's priority (the driver's clamp applied).
    pub stream_priorities: HashMap<usize, c_int>,
    pub events: HashMap<usize, Event>,
    /// Module images as received (up to their NUL).
    pub images: Vec<String>,
    pub launches: Vec<Launch>,
    /// `(id, first three value words)` of each `cuLaunchKernelEx`
    /// attribute, in order.
    pub launch_attrs: Vec<(c_uint, [c_uint; 3])>,
    /// Every call, by name, in order.
    pub calls: Vec<&'static str>,
    /// The next call of this name fails with this result.
    pub fail: Option<(&'static str, CuResult)>,
    /// Device clock, ms.
    pub clock_ms: f64,
    /// Device time of each launch, ms.
    pub kernel_ms: f64,
    /// Recorded work completes only at a synchronize.
    pub hold: bool,
    /// A launch sets `hold`: its start event completes, its end does not
    /// (a kernel that is running and does not end).
    pub hold_after_launch: bool,
    /// Objects of a context still alive when it was destroyed.
    pub leaked_at_destroy: usize,
    /// Arrays: handle -> (context, bytes per row, rows per slice, bytes).
    pub arrays: HashMap<usize, FakeArray>,
    /// Texture and surface objects -> (context, what they read).
    pub objects: HashMap<u64, (usize, api::ResourceDesc)>,
    /// The virtual-memory API (process-wide, as in the driver):
    /// reservations (base -> bytes), memory (handle -> its bytes while no
    /// accessible mapping holds them in `allocs`), mappings (address ->
    /// handle, bytes).
    pub reservations: BTreeMap<u64, usize>,
    pub vmm_mem: HashMap<u64, (usize, Option<Vec<u8>>)>,
    pub mappings: BTreeMap<u64, (u64, usize)>,
}

/// An array of the fake: its elements packed by rows and slices.
#[derive(Debug)]
pub(super) struct FakeArray {
    pub ctx: usize,
    pub row: usize,
    pub rows: usize,
    pub bytes: Vec<u8>,
}

impl State {
    fn fresh() -> State {
        State {
            next_handle: 0x1000,
            next_dev: 0x7f00_0000_0000,
            kernel_ms: 1.5,
            ..State::default()
        }
    }
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::fresh());
}

/// Runs `f` on this thread's fake driver state.
pub(super) fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| f(&mut s.borrow_mut()))
}

/// Starts this thread's fake driver afresh.
pub(super) fn reset() {
    with(|s| *s = State::fresh());
}

fn handle<T>(n: usize) -> *mut T {
    ptr::without_provenance_mut(n)
}

impl State {
    /// Logs a call; returns the result it must fail with, if any.
    fn begin(&mut self, call: &'static str, needs_context: bool) -> Option<CuResult> {
        self.calls.push(call);
        if let Some((name, result)) = self.fail {
            if name == call {
                self.fail = None;
                return Some(result);
            }
        }
        if call != "cuInit" && !self.initialised {
            return Some(3);
        }
        if needs_context && !self.contexts.contains(&self.current) {
            return Some(INVALID_CONTEXT);
        }
        None
    }

    fn new_handle(&mut self) -> usize {
        self.next_handle += 0x10;
        self.next_handle
    }

    /// The allocation holding `[ptr, ptr + len)`, as (base, offset).
    fn range(&self, ptr: u64, len: usize) -> Option<(u64, usize)> {
        let (&base, a) = self.allocs.range(..=ptr).next_back()?;
        let off = usize::try_from(ptr - base).ok()?;
        (off.checked_add(len)? <= a.bytes.len()).then_some((base, off))
    }

    fn bytes_mut(&mut self, ptr: u64, len: usize) -> Option<&mut [u8]> {
        let (base, off) = self.range(ptr, len)?;
        let a = self.allocs.get_mut(&base)?;
        Some(&mut a.bytes[off..off + len])
    }

    fn stream_ok(&self, s: CUstream) -> bool {
        s.is_null() || self.streams.get(&s.addr()) == Some(&self.current)
    }

    fn event_ok(&self, e: CUevent) -> bool {
        self.events
            .get(&e.addr())
            .is_some_and(|ev| ev.ctx == self.current)
    }

    /// Marks all recorded work complete.
    fn finish_all(&mut self) {
        for e in self.events.values_mut() {
            if e.at.is_some() {
                e.done = true;
            }
        }
    }

    /// Objects owned by context `ctx`.
    pub fn objects_of(&self, ctx: usize) -> usize {
        self.allocs.values().filter(|a| a.ctx == ctx).count()
            + self.modules.values().filter(|&&c| c == ctx).count()
            + self.streams.values().filter(|&&c| c == ctx).count()
            + self.events.values().filter(|e| e.ctx == ctx).count()
            + self.arrays.values().filter(|a| a.ctx == ctx).count()
            + self.objects.values().filter(|(c, _)| *c == ctx).count()
    }

    /// Live objects of every kind, contexts included.
    pub fn live_objects(&self) -> usize {
        self.contexts.len()
            + self.allocs.len()
            + self.modules.len()
            + self.streams.len()
            + self.events.len()
            + self.arrays.len()
            + self.objects.len()
    }

    pub fn count(&self, call: &str) -> usize {
        self.calls.iter().filter(|&&c| c == call).count()
    }
}

/// Writes `v` through an out-pointer the executor passed.
fn out<T>(p: *mut T, v: T) {
    assert!(!p.is_null(), "null out-pointer");
    // SAFETY: the executor under test passes pointers to live locals of
    // the right type (this is what the tests check).
    unsafe { p.write(v) }
}

unsafe extern "C" fn cu_init(flags: c_uint) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuInit", false) {
            return r;
        }
        if flags != 0 {
            return INVALID_VALUE;
        }
        s.initialised = true;
        0
    })
}

unsafe extern "C" fn driver_get_version(v: *mut c_int) -> CuResult {
    with(|s| s.begin("cuDriverGetVersion", false)).unwrap_or_else(|| {
        out(v, 12080);
        0
    })
}

unsafe extern "C" fn device_get(d: *mut CUdevice, ordinal: c_int) -> CuResult {
    with(|s| s.begin("cuDeviceGet", false)).unwrap_or_else(|| {
        if ordinal != 0 {
            return 101;
        }
        out(d, 0);
        0
    })
}

unsafe extern "C" fn device_get_name(name: *mut c_char, len: c_int, dev: CUdevice) -> CuResult {
    if let Some(r) = with(|s| s.begin("cuDeviceGetName", false)) {
        return r;
    }
    assert_eq!(dev, 0);
    let text = b"Fake GPU\0";
    assert!(len as usize >= text.len());
    // SAFETY: the executor passes a buffer of `len` bytes, checked above to
    // hold the name.
    unsafe { ptr::copy_nonoverlapping(text.as_ptr(), name.cast::<u8>(), text.len()) };
    0
}

unsafe extern "C" fn device_total_mem(bytes: *mut usize, _dev: CUdevice) -> CuResult {
    with(|s| s.begin("cuDeviceTotalMem_v2", false)).unwrap_or_else(|| {
        out(bytes, TOTAL_MEM as usize);
        0
    })
}

unsafe extern "C" fn device_get_uuid(uuid: *mut [u8; 16], _dev: CUdevice) -> CuResult {
    with(|s| s.begin("cuDeviceGetUuid_v2", false)).unwrap_or_else(|| {
        out(uuid, std::array::from_fn(|i| i as u8));
        0
    })
}

unsafe extern "C" fn device_get_attribute(v: *mut c_int, attr: c_int, _dev: CUdevice) -> CuResult {
    // Not logged: 150 calls per construction.
    match attr {
        75 => out(v, 9),
        76 => out(v, 0),
        a if a % 7 == 0 => return INVALID_VALUE,
        a => out(v, a * 10),
    }
    0
}

unsafe extern "C" fn primary_retain(ctx: *mut CUcontext, _dev: CUdevice) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuDevicePrimaryCtxRetain", false) {
            return r;
        }
        s.primary_refs += 1;
        // The primary context is context 1 in the fake.
        s.contexts.insert(1);
        out(ctx, handle(1));
        0
    })
}

unsafe extern "C" fn primary_release(_dev: CUdevice) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuDevicePrimaryCtxRelease_v2", false) {
            return r;
        }
        if s.primary_refs == 0 {
            return INVALID_CONTEXT;
        }
        s.primary_refs -= 1;
        if s.primary_refs == 0 {
            s.contexts.remove(&1);
        }
        0
    })
}

unsafe extern "C" fn ctx_create(ctx: *mut CUcontext, flags: c_uint, dev: CUdevice) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuCtxCreate_v2", false) {
            return r;
        }
        assert_eq!(flags, 4, "contexts use CU_CTX_SCHED_BLOCKING_SYNC");
        assert_eq!(dev, 0);
        let h = s.new_handle();
        s.contexts.insert(h);
        s.current = h;
        out(ctx, handle(h));
        0
    })
}

unsafe extern "C" fn ctx_destroy(ctx: CUcontext) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuCtxDestroy_v2", false) {
            return r;
        }
        let h = ctx.addr();
        if !s.contexts.remove(&h) {
            return INVALID_CONTEXT;
        }
        s.leaked_at_destroy += s.objects_of(h);
        s.allocs.retain(|_, a| a.ctx != h);
        s.modules.retain(|_, c| *c != h);
        s.functions.retain(|_, (c, _)| *c != h);
        s.streams.retain(|_, c| *c != h);
        s.events.retain(|_, e| e.ctx != h);
        s.arrays.retain(|_, a| a.ctx != h);
        s.objects.retain(|_, (c, _)| *c != h);
        if s.current == h {
            s.current = 0;
        }
        0
    })
}

unsafe extern "C" fn ctx_pop_current(ctx: *mut CUcontext) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuCtxPopCurrent_v2", false) {
            return r;
        }
        // The fake keeps no stack: popping leaves no context current.
        out(ctx, handle(s.current));
        s.current = 0;
        0
    })
}

unsafe extern "C" fn ctx_set_current(ctx: CUcontext) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuCtxSetCurrent", false) {
            return r;
        }
        let h = ctx.addr();
        if h != 0 && !s.contexts.contains(&h) {
            return INVALID_CONTEXT;
        }
        s.current = h;
        0
    })
}

unsafe extern "C" fn ctx_synchronize() -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuCtxSynchronize", true) {
            return r;
        }
        s.finish_all();
        0
    })
}

unsafe extern "C" fn mem_get_info(free: *mut usize, total: *mut usize) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemGetInfo_v2", true) {
            return r;
        }
        let used: usize = s.allocs.values().map(|a| a.bytes.len()).sum();
        out(free, TOTAL_MEM as usize - used);
        out(total, TOTAL_MEM as usize);
        0
    })
}

unsafe extern "C" fn mem_alloc(p: *mut CUdeviceptr, bytes: usize) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemAlloc_v2", true) {
            return r;
        }
        if bytes == 0 {
            return INVALID_VALUE;
        }
        if bytes as u64 > TOTAL_MEM {
            return OUT_OF_MEMORY;
        }
        let base = s.next_dev;
        s.next_dev += (bytes as u64).next_multiple_of(256) + 256;
        let ctx = s.current;
        s.allocs.insert(
            base,
            Alloc {
                ctx,
                bytes: vec![0; bytes],
            },
        );
        out(p, base);
        0
    })
}

unsafe extern "C" fn mem_free(p: CUdeviceptr) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemFree_v2", true) {
            return r;
        }
        match s.allocs.get(&p) {
            Some(a) if a.ctx == s.current => {
                s.allocs.remove(&p);
                0
            }
            _ => INVALID_VALUE,
        }
    })
}

fn htod(call: &'static str, dst: u64, src: *const c_void, n: usize, stream: CUstream) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin(call, true) {
            return r;
        }
        if !s.stream_ok(stream) {
            return INVALID_HANDLE;
        }
        let Some(d) = s.bytes_mut(dst, n) else {
            return ILLEGAL_ADDRESS;
        };
        // SAFETY: the executor passes a host buffer of `n` readable bytes.
        let src = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), n) };
        d.copy_from_slice(src);
        0
    })
}

fn dtoh(call: &'static str, dst: *mut c_void, src: u64, n: usize, stream: CUstream) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin(call, true) {
            return r;
        }
        if !s.stream_ok(stream) {
            return INVALID_HANDLE;
        }
        let Some(from) = s.bytes_mut(src, n) else {
            return ILLEGAL_ADDRESS;
        };
        // SAFETY: the executor passes a host buffer of `n` writable bytes.
        let dst = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), n) };
        dst.copy_from_slice(from);
        0
    })
}

fn dtod(call: &'static str, dst: u64, src: u64, n: usize, stream: CUstream) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin(call, true) {
            return r;
        }
        if !s.stream_ok(stream) {
            return INVALID_HANDLE;
        }
        let Some(from) = s.bytes_mut(src, n).map(|b| b.to_vec()) else {
            return ILLEGAL_ADDRESS;
        };
        let Some(to) = s.bytes_mut(dst, n) else {
            return ILLEGAL_ADDRESS;
        };
        to.copy_from_slice(&from);
        0
    })
}

fn memset(call: &'static str, dst: u64, pattern: &[u8], n: usize, stream: CUstream) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin(call, true) {
            return r;
        }
        if !s.stream_ok(stream) {
            return INVALID_HANDLE;
        }
        let Some(to) = s.bytes_mut(dst, n * pattern.len()) else {
            return ILLEGAL_ADDRESS;
        };
        for chunk in to.chunks_mut(pattern.len()) {
            chunk.copy_from_slice(pattern);
        }
        0
    })
}

unsafe extern "C" fn memcpy_htod(dst: u64, src: *const c_void, n: usize) -> CuResult {
    htod("cuMemcpyHtoD_v2", dst, src, n, ptr::null_mut())
}
unsafe extern "C" fn memcpy_htod_async(
    dst: u64,
    src: *const c_void,
    n: usize,
    st: CUstream,
) -> CuResult {
    htod("cuMemcpyHtoDAsync_v2", dst, src, n, st)
}
unsafe extern "C" fn memcpy_dtoh(dst: *mut c_void, src: u64, n: usize) -> CuResult {
    dtoh("cuMemcpyDtoH_v2", dst, src, n, ptr::null_mut())
}
unsafe extern "C" fn memcpy_dtoh_async(
    dst: *mut c_void,
    src: u64,
    n: usize,
    st: CUstream,
) -> CuResult {
    dtoh("cuMemcpyDtoHAsync_v2", dst, src, n, st)
}
unsafe extern "C" fn memcpy_dtod(dst: u64, src: u64, n: usize) -> CuResult {
    dtod("cuMemcpyDtoD_v2", dst, src, n, ptr::null_mut())
}
unsafe extern "C" fn memcpy_dtod_async(dst: u64, src: u64, n: usize, st: CUstream) -> CuResult {
    dtod("cuMemcpyDtoDAsync_v2", dst, src, n, st)
}
unsafe extern "C" fn memset_d8(dst: u64, v: c_uchar, n: usize) -> CuResult {
    memset("cuMemsetD8_v2", dst, &[v], n, ptr::null_mut())
}
unsafe extern "C" fn memset_d16(dst: u64, v: c_ushort, n: usize) -> CuResult {
    memset("cuMemsetD16_v2", dst, &v.to_le_bytes(), n, ptr::null_mut())
}
unsafe extern "C" fn memset_d32(dst: u64, v: c_uint, n: usize) -> CuResult {
    memset("cuMemsetD32_v2", dst, &v.to_le_bytes(), n, ptr::null_mut())
}
unsafe extern "C" fn memset_d8_async(dst: u64, v: c_uchar, n: usize, st: CUstream) -> CuResult {
    memset("cuMemsetD8Async", dst, &[v], n, st)
}
unsafe extern "C" fn memset_d16_async(dst: u64, v: c_ushort, n: usize, st: CUstream) -> CuResult {
    memset("cuMemsetD16Async", dst, &v.to_le_bytes(), n, st)
}
unsafe extern "C" fn memset_d32_async(dst: u64, v: c_uint, n: usize, st: CUstream) -> CuResult {
    memset("cuMemsetD32Async", dst, &v.to_le_bytes(), n, st)
}

unsafe extern "C" fn module_load_data(m: *mut CUmodule, image: *const c_void) -> CuResult {
    if let Some(r) = with(|s| s.begin("cuModuleLoadData", true)) {
        return r;
    }
    // SAFETY: PTX images reach the driver NUL-terminated (what the tests
    // check); the fake is only given PTX.
    let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
    let text = text.to_string_lossy().into_owned();
    with(|s| {
        if !text.contains(".entry") {
            return 218; // CUDA_ERROR_INVALID_PTX
        }
        s.images.push(text);
        let h = s.new_handle();
        let ctx = s.current;
        s.modules.insert(h, ctx);
        out(m, handle(h));
        0
    })
}

unsafe extern "C" fn module_unload(m: CUmodule) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuModuleUnload", true) {
            return r;
        }
        let h = m.addr();
        if s.modules.get(&h) != Some(&s.current) {
            return INVALID_HANDLE;
        }
        s.modules.remove(&h);
        s.functions.retain(|_, (c, _)| *c != h);
        0
    })
}

unsafe extern "C" fn module_get_function(
    f: *mut CUfunction,
    m: CUmodule,
    name: *const c_char,
) -> CuResult {
    // SAFETY: the executor passes a NUL-terminated name.
    let name = unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned();
    with(|s| {
        if let Some(r) = s.begin("cuModuleGetFunction", true) {
            return r;
        }
        if s.modules.get(&m.addr()) != Some(&s.current) {
            return INVALID_HANDLE;
        }
        let Some(&(kernel, _)) = KERNELS.iter().find(|(k, _)| *k == name) else {
            return NOT_FOUND;
        };
        let h = s.new_handle();
        s.functions.insert(h, (m.addr(), kernel));
        out(f, handle(h));
        0
    })
}

fn layout_of(s: &State, f: CUfunction) -> Option<&'static [(usize, usize)]> {
    let (_, kernel) = s.functions.get(&f.addr())?;
    KERNELS.iter().find(|(k, _)| k == kernel).map(|(_, l)| *l)
}

/// `cuModuleGetGlobal_v2`: every module has one 16-byte variable,
/// `fake_global`, created (zeroed) the first time it is asked for.
unsafe extern "C" fn module_get_global(
    p: *mut CUdeviceptr,
    size: *mut usize,
    m: CUmodule,
    name: *const c_char,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuModuleGetGlobal_v2", true) {
            return r;
        }
        if s.modules.get(&m.addr()) != Some(&s.current) {
            return INVALID_HANDLE;
        }
        // SAFETY: the caller passes a NUL-terminated name.
        if unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes() != b"fake_global" {
            return NOT_FOUND;
        }
        let base = match s.globals.get(&m.addr()) {
            Some(&b) => b,
            None => {
                let b = s.next_dev;
                s.next_dev += 512;
                let ctx = s.current;
                s.allocs.insert(
                    b,
                    Alloc {
                        ctx,
                        bytes: vec![0; 16],
                    },
                );
                s.globals.insert(m.addr(), b);
                b
            }
        };
        out(p, base);
        out(size, 16);
        0
    })
}

/// `cuFuncGetAttribute`: what was set, else an sm_90 kernel's values.
unsafe extern "C" fn func_get_attribute(v: *mut c_int, attr: c_int, f: CUfunction) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuFuncGetAttribute", true) {
            return r;
        }
        if !s.functions.contains_key(&f.addr()) {
            return INVALID_HANDLE;
        }
        let value = match (s.func_attrs.get(&(f.addr(), attr)), attr) {
            (Some(&set), _) => set,
            (None, 0) => 1024,
            (None, 5 | 6) => 90,
            (None, 8) => 49152,
            (None, 9) => -1,
            (None, 1..=15) => 0,
            _ => return INVALID_VALUE,
        };
        out(v, value);
        0
    })
}

/// `cuCtxSetLimit`: the limits the driver knows (0 to 9) are accepted.
unsafe extern "C" fn ctx_set_limit(limit: c_int, _value: usize) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuCtxSetLimit", true) {
            return r;
        }
        if !(0..=9).contains(&limit) {
            return INVALID_VALUE;
        }
        0
    })
}

/// `cuFuncSetAttribute`: kept for `cuFuncGetAttribute`.
unsafe extern "C" fn func_set_attribute(f: CUfunction, attr: c_int, value: c_int) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuFuncSetAttribute", true) {
            return r;
        }
        if !s.functions.contains_key(&f.addr()) {
            return INVALID_HANDLE;
        }
        if !(8..=15).contains(&attr) {
            return INVALID_VALUE;
        }
        s.func_attrs.insert((f.addr(), attr), value);
        0
    })
}

unsafe extern "C" fn func_get_param_info(
    f: CUfunction,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuFuncGetParamInfo", true) {
            return r;
        }
        let Some(layout) = layout_of(s, f) else {
            return INVALID_HANDLE;
        };
        match layout.get(index) {
            Some(&(o, n)) => {
                out(offset, o);
                out(size, n);
                0
            }
            None => INVALID_VALUE,
        }
    })
}

/// `cuLaunchKernelEx`: records the attributes, then launches as
/// `cuLaunchKernel` would.
unsafe extern "C" fn launch_kernel_ex(
    config: *const api::LaunchConfigC,
    f: CUfunction,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    assert!(!config.is_null(), "a launch configuration");
    // SAFETY: the executor passes a live CUlaunchConfig.
    let c = unsafe { *config };
    assert!(
        !c.attrs.is_null() && c.num_attrs > 0,
        "cuLaunchKernelEx only with attributes"
    );
    // SAFETY: `num_attrs` attributes at `attrs`, as the executor built them.
    let attrs = unsafe { std::slice::from_raw_parts(c.attrs, c.num_attrs as usize) };
    with(|s| {
        s.launch_attrs.extend(
            attrs
                .iter()
                .map(|a| (a.id, [a.value[0], a.value[1], a.value[2]])),
        )
    });
    let [gx, gy, gz] = c.grid;
    let [bx, by, bz] = c.block;
    // SAFETY: the same contract as cuLaunchKernel's.
    unsafe {
        launch_kernel(
            f,
            gx,
            gy,
            gz,
            bx,
            by,
            bz,
            c.shared_mem,
            c.stream,
            kernel_params,
            extra,
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn launch_kernel(
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared_mem: c_uint,
    stream: CUstream,
    kernel_params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuLaunchKernel", true) {
            return r;
        }
        if !s.stream_ok(stream) {
            return INVALID_HANDLE;
        }
        assert!(kernel_params.is_null(), "parameters go through `extra`");
        let Some(layout) = layout_of(s, f) else {
            return INVALID_HANDLE;
        };
        let Some(&(_, kernel)) = s.functions.get(&f.addr()) else {
            return INVALID_HANDLE;
        };
        let params = if extra.is_null() {
            assert!(layout.is_empty(), "a kernel with parameters needs them");
            Vec::new()
        } else {
            // SAFETY: `extra` is the executor's five-entry list (checked
            // entry by entry below).
            let e = unsafe { std::slice::from_raw_parts(extra, 5) };
            assert_eq!(e[0].addr(), 1, "CU_LAUNCH_PARAM_BUFFER_POINTER");
            assert_eq!(e[2].addr(), 2, "CU_LAUNCH_PARAM_BUFFER_SIZE");
            assert_eq!(e[4].addr(), 0, "CU_LAUNCH_PARAM_END");
            // SAFETY: e[3] points at the buffer's size, a usize.
            let len = unsafe { e[3].cast::<usize>().read() };
            assert_eq!(e[1].addr() % 8, 0, "parameter buffer aligned");
            // SAFETY: e[1] points at `len` readable bytes.
            unsafe { std::slice::from_raw_parts(e[1].cast::<u8>(), len) }.to_vec()
        };
        let need = layout.iter().map(|(o, n)| o + n).max().unwrap_or(0);
        if params.len() < need {
            return INVALID_VALUE;
        }
        if kernel == "add_one" {
            let ptr = u64::from_ne_bytes(params[0..8].try_into().unwrap());
            let n = u32::from_ne_bytes(params[8..12].try_into().unwrap()) as usize;
            let Some(words) = s.bytes_mut(ptr, n * 4) else {
                return ILLEGAL_ADDRESS;
            };
            for w in words.chunks_mut(4) {
                let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]).wrapping_add(1);
                w.copy_from_slice(&v.to_le_bytes());
            }
        }
        s.clock_ms += s.kernel_ms;
        if s.hold_after_launch {
            s.hold = true;
        }
        s.launches.push(Launch {
            kernel,
            grid: [gx, gy, gz],
            block: [bx, by, bz],
            shared_mem,
            stream: stream.addr(),
            params,
        });
        0
    })
}

unsafe extern "C" fn stream_create(st: *mut CUstream, flags: c_uint) -> CuResult {
    new_stream("cuStreamCreate", st, flags, None)
}

/// A stream of the current context (`priority`: the driver clamps it).
fn new_stream(
    call: &'static str,
    st: *mut CUstream,
    flags: c_uint,
    priority: Option<c_int>,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin(call, true) {
            return r;
        }
        if flags > 1 {
            return INVALID_VALUE;
        }
        let h = s.new_handle();
        let ctx = s.current;
        s.streams.insert(h, ctx);
        if let Some(p) = priority {
            s.stream_priorities.insert(h, p.clamp(GREATEST_PRIORITY, 0));
        }
        out(st, handle(h));
        0
    })
}

/// The fake's stream priorities: 0 (least) to [`GREATEST_PRIORITY`].
pub(super) const GREATEST_PRIORITY: c_int = -2;

/// `cuCtxGetStreamPriorityRange` of the current context.
unsafe extern "C" fn ctx_get_stream_priority_range(
    least: *mut c_int,
    greatest: *mut c_int,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuCtxGetStreamPriorityRange", true) {
            return r;
        }
        out(least, 0);
        out(greatest, GREATEST_PRIORITY);
        0
    })
}

/// `cuStreamCreateWithPriority`: clamps the priority as the driver does.
unsafe extern "C" fn stream_create_with_priority(
    st: *mut CUstream,
    flags: c_uint,
    priority: c_int,
) -> CuResult {
    new_stream("cuStreamCreateWithPriority", st, flags, Some(priority))
}

unsafe extern "C" fn stream_destroy(st: CUstream) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuStreamDestroy_v2", true) {
            return r;
        }
        if st.is_null() || !s.stream_ok(st) {
            return INVALID_HANDLE;
        }
        s.streams.remove(&st.addr());
        0
    })
}

unsafe extern "C" fn stream_synchronize(st: CUstream) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuStreamSynchronize", true) {
            return r;
        }
        if !s.stream_ok(st) {
            return INVALID_HANDLE;
        }
        s.finish_all();
        0
    })
}

unsafe extern "C" fn stream_query(st: CUstream) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuStreamQuery", true) {
            return r;
        }
        if !s.stream_ok(st) {
            return INVALID_HANDLE;
        }
        if s.events.values().any(|e| e.at.is_some() && !e.done) {
            NOT_READY
        } else {
            0
        }
    })
}

unsafe extern "C" fn stream_wait_event(st: CUstream, e: CUevent, flags: c_uint) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuStreamWaitEvent", true) {
            return r;
        }
        if !s.stream_ok(st) || !s.event_ok(e) {
            return INVALID_HANDLE;
        }
        if flags != 0 {
            return INVALID_VALUE;
        }
        0
    })
}

unsafe extern "C" fn event_create(e: *mut CUevent, flags: c_uint) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuEventCreate", true) {
            return r;
        }
        if flags > 7 {
            return INVALID_VALUE;
        }
        let h = s.new_handle();
        let ctx = s.current;
        s.events.insert(
            h,
            Event {
                ctx,
                ..Event::default()
            },
        );
        out(e, handle(h));
        0
    })
}

unsafe extern "C" fn event_destroy(e: CUevent) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuEventDestroy_v2", false) {
            return r;
        }
        match s.events.remove(&e.addr()) {
            Some(_) => 0,
            None => INVALID_HANDLE,
        }
    })
}

unsafe extern "C" fn event_record(e: CUevent, st: CUstream) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuEventRecord", true) {
            return r;
        }
        if !s.stream_ok(st) || !s.event_ok(e) {
            return INVALID_HANDLE;
        }
        let (clock, hold) = (s.clock_ms, s.hold);
        if let Some(ev) = s.events.get_mut(&e.addr()) {
            ev.at = Some(clock);
            ev.done = !hold;
        }
        0
    })
}

unsafe extern "C" fn event_query(e: CUevent) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuEventQuery", true) {
            return r;
        }
        if !s.event_ok(e) {
            return INVALID_HANDLE;
        }
        match s.events.get(&e.addr()) {
            Some(ev) if ev.at.is_some() && !ev.done => NOT_READY,
            _ => 0,
        }
    })
}

unsafe extern "C" fn event_synchronize(e: CUevent) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuEventSynchronize", true) {
            return r;
        }
        if !s.event_ok(e) {
            return INVALID_HANDLE;
        }
        s.finish_all();
        0
    })
}

unsafe extern "C" fn event_elapsed_time(ms: *mut f32, a: CUevent, b: CUevent) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuEventElapsedTime", true) {
            return r;
        }
        if !s.event_ok(a) || !s.event_ok(b) {
            return INVALID_HANDLE;
        }
        let (ea, eb) = (&s.events[&a.addr()], &s.events[&b.addr()]);
        match (ea.at, eb.at) {
            (Some(x), Some(y)) if ea.done && eb.done => {
                out(ms, (y - x) as f32);
                0
            }
            (Some(_), Some(_)) => NOT_READY,
            _ => INVALID_HANDLE,
        }
    })
}

/// The fake driver's entry points, leaked to get the `'static` table the
/// executor holds.
unsafe extern "C" fn array_create(
    out_array: *mut CUarray,
    d: *const api::Array3DDescriptor,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuArray3DCreate_v2", true) {
            return r;
        }
        // SAFETY: the executor passes a complete descriptor.
        let d = unsafe { *d };
        let elem = match d.format {
            0x01 | 0x08 => 1,
            0x02 | 0x09 | 0x10 => 2,
            0x03 | 0x0a | 0x20 => 4,
            _ => return INVALID_VALUE,
        } * d.num_channels as usize;
        let (row, rows) = (d.width * elem, d.height.max(1));
        let h = s.new_handle();
        let ctx = s.current;
        s.arrays.insert(
            h,
            FakeArray {
                ctx,
                row,
                rows,
                bytes: vec![0; row * rows * d.depth.max(1)],
            },
        );
        out(out_array, handle(h));
        0
    })
}

unsafe extern "C" fn array_destroy(a: CUarray) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuArrayDestroy", true) {
            return r;
        }
        match s.arrays.get(&a.addr()) {
            Some(arr) if arr.ctx == s.current => {
                s.arrays.remove(&a.addr());
                0
            }
            _ => INVALID_HANDLE,
        }
    })
}

/// Where row `(y, z)` of one side of a 3D copy starts: a host address, or
/// a device address, or (array handle, offset).
enum Row {
    Host(*mut u8),
    Device(u64),
    Array(usize, usize),
}

/// One side of a `CUDA_MEMCPY3D`.
struct Side3D {
    kind: u32,
    host: *mut c_void,
    dev: u64,
    array: CUarray,
    pitch: usize,
    height: usize,
    pos: [usize; 3],
}

impl Side3D {
    fn row(&self, s: &State, y: usize, z: usize) -> Option<Row> {
        let [x0, y0, z0] = self.pos;
        match self.kind {
            1 => Some(Row::Host(self.host.cast::<u8>().wrapping_add(
                ((z0 + z) * self.height + y0 + y) * self.pitch + x0,
            ))),
            2 => Some(Row::Device(
                self.dev + (((z0 + z) * self.height + y0 + y) * self.pitch + x0) as u64,
            )),
            3 => {
                let a = s.arrays.get(&self.array.addr())?;
                (a.ctx == s.current).then_some(Row::Array(
                    self.array.addr(),
                    ((z0 + z) * a.rows + y0 + y) * a.row + x0,
                ))
            }
            _ => None,
        }
    }
}

fn copy3d(call: &'static str, p: *const api::Memcpy3D, stream: CUstream) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin(call, true) {
            return r;
        }
        if !s.stream_ok(stream) {
            return INVALID_HANDLE;
        }
        // SAFETY: the executor passes a complete description.
        let p = unsafe { *p };
        let src = Side3D {
            kind: p.src_memory_type,
            host: p.src_host.cast_mut(),
            dev: p.src_device,
            array: p.src_array,
            pitch: p.src_pitch,
            height: p.src_height,
            pos: [p.src_x_in_bytes, p.src_y, p.src_z],
        };
        let dst = Side3D {
            kind: p.dst_memory_type,
            host: p.dst_host,
            dev: p.dst_device,
            array: p.dst_array,
            pitch: p.dst_pitch,
            height: p.dst_height,
            pos: [p.dst_x_in_bytes, p.dst_y, p.dst_z],
        };
        let n = p.width_in_bytes;
        let mut buf = vec![0u8; n];
        for z in 0..p.depth {
            for y in 0..p.height {
                match src.row(s, y, z) {
                    Some(Row::Host(h)) => {
                        // SAFETY: the executor's host buffer holds the packed rows.
                        buf.copy_from_slice(unsafe { std::slice::from_raw_parts(h, n) })
                    }
                    Some(Row::Device(d)) => match s.bytes_mut(d, n) {
                        Some(b) => buf.copy_from_slice(b),
                        None => return ILLEGAL_ADDRESS,
                    },
                    Some(Row::Array(a, off)) => match s.arrays[&a].bytes.get(off..off + n) {
                        Some(b) => buf.copy_from_slice(b),
                        None => return INVALID_VALUE,
                    },
                    None => return INVALID_VALUE,
                }
                match dst.row(s, y, z) {
                    Some(Row::Host(h)) => {
                        // SAFETY: the executor's host buffer has room for the packed rows.
                        unsafe { std::slice::from_raw_parts_mut(h, n) }.copy_from_slice(&buf)
                    }
                    Some(Row::Device(d)) => match s.bytes_mut(d, n) {
                        Some(b) => b.copy_from_slice(&buf),
                        None => return ILLEGAL_ADDRESS,
                    },
                    Some(Row::Array(a, off)) => match s
                        .arrays
                        .get_mut(&a)
                        .and_then(|x| x.bytes.get_mut(off..off + n))
                    {
                        Some(b) => b.copy_from_slice(&buf),
                        None => return INVALID_VALUE,
                    },
                    None => return INVALID_VALUE,
                }
            }
        }
        0
    })
}

unsafe extern "C" fn memcpy3d(p: *const api::Memcpy3D) -> CuResult {
    copy3d("cuMemcpy3D_v2", p, ptr::null_mut())
}

unsafe extern "C" fn memcpy3d_async(p: *const api::Memcpy3D, st: CUstream) -> CuResult {
    copy3d("cuMemcpy3DAsync_v2", p, st)
}

fn object_create(call: &'static str, obj: *mut u64, r: *const api::ResourceDesc) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin(call, true) {
            return r;
        }
        // SAFETY: the executor passes a complete description.
        let r = unsafe { *r };
        let ok = match r.res_type {
            0 => s
                .arrays
                .get(&(r.res[0] as usize))
                .is_some_and(|a| a.ctx == s.current),
            2 => s.range(r.res[0], r.res[2] as usize).is_some(),
            3 => s.range(r.res[0], (r.res[3] * r.res[4]) as usize).is_some(),
            _ => false,
        };
        if !ok {
            return INVALID_VALUE;
        }
        let h = s.new_handle() as u64;
        let ctx = s.current;
        s.objects.insert(h, (ctx, r));
        out(obj, h);
        0
    })
}

fn object_destroy(call: &'static str, obj: u64) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin(call, true) {
            return r;
        }
        match s.objects.get(&obj) {
            Some((c, _)) if *c == s.current => {
                s.objects.remove(&obj);
                0
            }
            _ => INVALID_HANDLE,
        }
    })
}

unsafe extern "C" fn tex_object_create(
    obj: *mut u64,
    r: *const api::ResourceDesc,
    _t: *const api::TextureDesc,
    _view: *const c_void,
) -> CuResult {
    object_create("cuTexObjectCreate", obj, r)
}

unsafe extern "C" fn tex_object_destroy(obj: u64) -> CuResult {
    object_destroy("cuTexObjectDestroy", obj)
}

unsafe extern "C" fn surf_object_create(obj: *mut u64, r: *const api::ResourceDesc) -> CuResult {
    object_create("cuSurfObjectCreate", obj, r)
}

unsafe extern "C" fn surf_object_destroy(obj: u64) -> CuResult {
    object_destroy("cuSurfObjectDestroy", obj)
}

/// The fake's virtual-memory granularity.
const GRANULARITY: usize = 2 << 20;

unsafe extern "C" fn mem_address_reserve(
    p: *mut CUdeviceptr,
    size: usize,
    align: usize,
    addr: CUdeviceptr,
    flags: u64,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemAddressReserve", false) {
            return r;
        }
        if size == 0 || !size.is_multiple_of(GRANULARITY) || addr != 0 || flags != 0 {
            return INVALID_VALUE;
        }
        let align = align.max(GRANULARITY) as u64;
        let base = s.next_dev.next_multiple_of(align);
        s.next_dev = base + size as u64 + GRANULARITY as u64;
        s.reservations.insert(base, size);
        out(p, base);
        0
    })
}

unsafe extern "C" fn mem_address_free(base: CUdeviceptr, size: usize) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemAddressFree", false) {
            return r;
        }
        let mapped = s.mappings.range(base..base + size as u64).next().is_some();
        if s.reservations.get(&base) != Some(&size) || mapped {
            return INVALID_VALUE;
        }
        s.reservations.remove(&base);
        0
    })
}

unsafe extern "C" fn mem_create(
    h: *mut u64,
    size: usize,
    prop: *const api::MemAllocationProp,
    flags: u64,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemCreate", false) {
            return r;
        }
        // SAFETY: the executor passes a live description.
        let p = unsafe { &*prop };
        if size == 0 || !size.is_multiple_of(GRANULARITY) || flags != 0 {
            return INVALID_VALUE;
        }
        if p.alloc_type != 1 || p.location_type != 1 || p.location_id != 0 || p.handle_types != 0 {
            return INVALID_VALUE;
        }
        let handle = s.new_handle() as u64;
        s.vmm_mem.insert(handle, (size, Some(vec![0; size])));
        out(h, handle);
        0
    })
}

unsafe extern "C" fn mem_release(h: u64) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemRelease", false) {
            return r;
        }
        // Strict: the executor releases only memory mapped nowhere.
        if s.mappings.values().any(|(m, _)| *m == h) || s.vmm_mem.remove(&h).is_none() {
            return INVALID_VALUE;
        }
        0
    })
}

unsafe extern "C" fn mem_map(
    addr: CUdeviceptr,
    size: usize,
    offset: usize,
    h: u64,
    flags: u64,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemMap", false) {
            return r;
        }
        let end = addr + size as u64;
        let reserved = s
            .reservations
            .range(..=addr)
            .next_back()
            .is_some_and(|(&b, &n)| end <= b + n as u64);
        let overlaps = s
            .mappings
            .range(..end)
            .next_back()
            .is_some_and(|(&a, &(_, n))| a + n as u64 > addr);
        let whole = s.vmm_mem.get(&h).is_some_and(|(n, _)| *n == size) && offset == 0;
        if !reserved || overlaps || !whole || flags != 0 {
            return INVALID_VALUE;
        }
        s.mappings.insert(addr, (h, size));
        0
    })
}

unsafe extern "C" fn mem_unmap(addr: CUdeviceptr, size: usize) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemUnmap", false) {
            return r;
        }
        match s.mappings.get(&addr) {
            Some(&(h, n)) if n == size => {
                s.mappings.remove(&addr);
                if let Some(a) = s.allocs.remove(&addr) {
                    if let Some(m) = s.vmm_mem.get_mut(&h) {
                        m.1 = Some(a.bytes);
                    }
                }
                0
            }
            _ => INVALID_VALUE,
        }
    })
}

unsafe extern "C" fn mem_set_access(
    addr: CUdeviceptr,
    size: usize,
    desc: *const api::MemAccessDesc,
    count: usize,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuMemSetAccess", true) {
            return r;
        }
        if count != 1 {
            return INVALID_VALUE;
        }
        // SAFETY: the executor passes one live descriptor.
        let d = unsafe { &*desc };
        let inside: Vec<(u64, u64)> = s
            .mappings
            .range(addr..addr + size as u64)
            .map(|(&a, &(h, _))| (a, h))
            .collect();
        if inside.is_empty() || d.location_type != 1 || d.location_id != 0 {
            return INVALID_VALUE;
        }
        let ctx = s.current;
        for (a, h) in inside {
            match d.flags {
                3 => {
                    if let Some(bytes) = s.vmm_mem.get_mut(&h).and_then(|m| m.1.take()) {
                        s.allocs.insert(a, Alloc { ctx, bytes });
                    }
                }
                0 => {
                    if let Some(al) = s.allocs.remove(&a) {
                        if let Some(m) = s.vmm_mem.get_mut(&h) {
                            m.1 = Some(al.bytes);
                        }
                    }
                }
                _ => return INVALID_VALUE,
            }
        }
        0
    })
}

unsafe extern "C" fn pointer_get_attribute(
    data: *mut c_void,
    attr: c_int,
    ptr: CUdeviceptr,
) -> CuResult {
    with(|s| {
        if let Some(r) = s.begin("cuPointerGetAttribute", false) {
            return r;
        }
        // IS_MANAGED (8): the fake's module variables are not managed.
        if attr != 8 || s.range(ptr, 1).is_none() && !s.globals.values().any(|&g| g == ptr) {
            return INVALID_VALUE;
        }
        out(data.cast::<c_uint>(), 0);
        0
    })
}

pub(super) fn api() -> &'static Api {
    Box::leak(Box::new(Api {
        cuInit: cu_init,
        cuDriverGetVersion: driver_get_version,
        cuDeviceGet: device_get,
        cuDeviceGetName: device_get_name,
        cuDeviceTotalMem_v2: device_total_mem,
        cuDeviceGetAttribute: device_get_attribute,
        cuDevicePrimaryCtxRetain: primary_retain,
        cuDevicePrimaryCtxRelease_v2: primary_release,
        cuCtxCreate_v2: ctx_create,
        cuCtxDestroy_v2: ctx_destroy,
        cuCtxPopCurrent_v2: ctx_pop_current,
        cuCtxSetCurrent: ctx_set_current,
        cuCtxSynchronize: ctx_synchronize,
        cuCtxSetLimit: ctx_set_limit,
        cuCtxGetStreamPriorityRange: ctx_get_stream_priority_range,
        cuMemGetInfo_v2: mem_get_info,
        cuMemAlloc_v2: mem_alloc,
        cuMemFree_v2: mem_free,
        cuMemAddressReserve: mem_address_reserve,
        cuMemAddressFree: mem_address_free,
        cuMemCreate: mem_create,
        cuMemRelease: mem_release,
        cuMemMap: mem_map,
        cuMemUnmap: mem_unmap,
        cuMemSetAccess: mem_set_access,
        cuMemcpyHtoD_v2: memcpy_htod,
        cuMemcpyHtoDAsync_v2: memcpy_htod_async,
        cuMemcpyDtoH_v2: memcpy_dtoh,
        cuMemcpyDtoHAsync_v2: memcpy_dtoh_async,
        cuMemcpyDtoD_v2: memcpy_dtod,
        cuMemcpyDtoDAsync_v2: memcpy_dtod_async,
        cuMemsetD8_v2: memset_d8,
        cuMemsetD16_v2: memset_d16,
        cuMemsetD32_v2: memset_d32,
        cuMemsetD8Async: memset_d8_async,
        cuMemsetD16Async: memset_d16_async,
        cuMemsetD32Async: memset_d32_async,
        cuModuleLoadData: module_load_data,
        cuModuleUnload: module_unload,
        cuModuleGetFunction: module_get_function,
        cuModuleGetGlobal_v2: module_get_global,
        cuPointerGetAttribute: pointer_get_attribute,
        cuFuncGetParamInfo: func_get_param_info,
        cuFuncGetAttribute: func_get_attribute,
        cuFuncSetAttribute: func_set_attribute,
        cuLaunchKernel: launch_kernel,
        cuLaunchKernelEx: launch_kernel_ex,
        cuStreamCreate: stream_create,
        cuStreamCreateWithPriority: stream_create_with_priority,
        cuStreamDestroy_v2: stream_destroy,
        cuStreamSynchronize: stream_synchronize,
        cuStreamQuery: stream_query,
        cuStreamWaitEvent: stream_wait_event,
        cuEventCreate: event_create,
        cuEventDestroy_v2: event_destroy,
        cuEventRecord: event_record,
        cuEventQuery: event_query,
        cuEventSynchronize: event_synchronize,
        cuEventElapsedTime: event_elapsed_time,
        cuArray3DCreate_v2: array_create,
        cuArrayDestroy: array_destroy,
        cuMemcpy3D_v2: memcpy3d,
        cuMemcpy3DAsync_v2: memcpy3d_async,
        cuTexObjectCreate: tex_object_create,
        cuTexObjectDestroy: tex_object_destroy,
        cuSurfObjectCreate: surf_object_create,
        cuSurfObjectDestroy: surf_object_destroy,
        device_get_uuid: Some(device_get_uuid),
    }))
}
