//! The CUDA driver API loaded at run time from `libcuda.so.1`, as any CUDA
//! program loads it: `dlopen` through the loader's search path (so
//! `LD_LIBRARY_PATH` picks fairgpu's guest library, or NVIDIA's driver when
//! it is not set), then `dlsym` of the few entry points the workload
//! generator uses.
//!
//! This is the only unsafe code of the generator. [`Driver::load`] checks
//! that every symbol exists; the safe methods of [`Driver`] own the handles
//! they create and pass the driver only pointers to live locals.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::ptr;

use super::WorkloadError;

/// `CUresult`.
type CuResult = c_int;
/// `CUdevice`.
type CuDevice = c_int;
/// `CUdeviceptr`.
type CuDevPtr = u64;
/// `CUcontext`, `CUmodule`, `CUfunction`, `CUstream`, `CUevent`: opaque
/// pointers.
type Handle = *mut c_void;

/// The soname every CUDA program asks the loader for.
pub const LIBCUDA: &str = "libcuda.so.1";

/// The entry points, with their signatures from `cuda.h`.
#[derive(Clone, Copy)]
struct Api {
    init: unsafe extern "C" fn(c_uint) -> CuResult,
    device_get: unsafe extern "C" fn(*mut CuDevice, c_int) -> CuResult,
    device_get_name: unsafe extern "C" fn(*mut c_char, c_int, CuDevice) -> CuResult,
    primary_ctx_retain: unsafe extern "C" fn(*mut Handle, CuDevice) -> CuResult,
    ctx_set_current: unsafe extern "C" fn(Handle) -> CuResult,
    ctx_synchronize: unsafe extern "C" fn() -> CuResult,
    module_load_data: unsafe extern "C" fn(*mut Handle, *const c_void) -> CuResult,
    module_get_function: unsafe extern "C" fn(*mut Handle, Handle, *const c_char) -> CuResult,
    #[allow(clippy::type_complexity)]
    launch_kernel: unsafe extern "C" fn(
        Handle,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        Handle,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> CuResult,
    stream_create: unsafe extern "C" fn(*mut Handle, c_uint) -> CuResult,
    stream_synchronize: unsafe extern "C" fn(Handle) -> CuResult,
    event_create: unsafe extern "C" fn(*mut Handle, c_uint) -> CuResult,
    event_record: unsafe extern "C" fn(Handle, Handle) -> CuResult,
    event_synchronize: unsafe extern "C" fn(Handle) -> CuResult,
    event_elapsed_time: unsafe extern "C" fn(*mut f32, Handle, Handle) -> CuResult,
    mem_alloc: unsafe extern "C" fn(*mut CuDevPtr, usize) -> CuResult,
    memcpy_htod: unsafe extern "C" fn(CuDevPtr, *const c_void, usize) -> CuResult,
    memcpy_dtoh: unsafe extern "C" fn(*mut c_void, CuDevPtr, usize) -> CuResult,
    memcpy_htod_async: unsafe extern "C" fn(CuDevPtr, *const c_void, usize, Handle) -> CuResult,
    get_error_name: unsafe extern "C" fn(CuResult, *mut *const c_char) -> CuResult,
}

/// Resolves `name` in `lib` as a function pointer of type `F`.
///
/// # Safety
///
/// `lib` is a live handle from `dlopen`, and `F` is a function pointer type
/// whose signature is that of the C function `name`.
unsafe fn symbol<F: Copy>(lib: *mut c_void, name: &'static str) -> Result<F, WorkloadError> {
    const { assert!(size_of::<F>() == size_of::<*mut c_void>()) };
    let cname = CString::new(name).map_err(|_| WorkloadError::Symbol { name })?;
    // SAFETY: `lib` is live (caller) and `cname` is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, cname.as_ptr()) };
    if p.is_null() {
        return Err(WorkloadError::Symbol { name });
    }
    // SAFETY: `p` is the non-null address of the function `name`, whose
    // signature is `F` (caller); a function pointer has the size of a data
    // pointer on every platform dlsym exists on (asserted above).
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// The last `dlerror` message.
fn dlerror() -> String {
    // SAFETY: no arguments; returns NULL or a string owned by the loader.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown error".into();
    }
    // SAFETY: a non-null dlerror result is a NUL-terminated string valid
    // until the next dl* call on this thread; it is copied at once.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// `libcuda.so.1`, loaded, with a current context on device 0.
pub struct Driver {
    api: Api,
    /// Where the loader found the library.
    path: String,
    function: Handle,
    stream: Handle,
    events: Vec<Handle>,
    device_buf: CuDevPtr,
    host_buf: Vec<u8>,
    device_name: String,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("path", &self.path)
            .field("device_name", &self.device_name)
            .finish_non_exhaustive()
    }
}

/// Bytes of the device buffer the synchronous and asynchronous copies use.
pub const COPY_BYTES: usize = 4096;

impl Driver {
    /// Loads the library, initializes the driver, makes device 0's primary
    /// context current, loads `ptx` (NUL-terminated here) and looks up
    /// `kernel`, and creates a stream, `events` events and a device buffer
    /// of [`COPY_BYTES`].
    pub fn load(ptx: &str, kernel: &str, events: usize) -> Result<Driver, WorkloadError> {
        let soname = CString::new(LIBCUDA).map_err(|_| WorkloadError::Symbol { name: LIBCUDA })?;
        // SAFETY: the name is NUL-terminated; loading runs the library's
        // initializers, which is what linking against it would do too.
        let lib = unsafe { libc::dlopen(soname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return Err(WorkloadError::NoLibcuda { why: dlerror() });
        }
        // Each entry point: `lib` is live (never closed: every handle below
        // belongs to it), and the field's type is the signature of the entry
        // point in cuda.h.
        macro_rules! entry {
            ($name:literal) => {{
                // SAFETY: see above: a live handle and the cuda.h signature.
                unsafe { symbol(lib, $name)? }
            }};
        }
        let api = Api {
            init: entry!("cuInit"),
            device_get: entry!("cuDeviceGet"),
            device_get_name: entry!("cuDeviceGetName"),
            primary_ctx_retain: entry!("cuDevicePrimaryCtxRetain"),
            ctx_set_current: entry!("cuCtxSetCurrent"),
            ctx_synchronize: entry!("cuCtxSynchronize"),
            module_load_data: entry!("cuModuleLoadData"),
            module_get_function: entry!("cuModuleGetFunction"),
            launch_kernel: entry!("cuLaunchKernel"),
            stream_create: entry!("cuStreamCreate"),
            stream_synchronize: entry!("cuStreamSynchronize"),
            event_create: entry!("cuEventCreate"),
            event_record: entry!("cuEventRecord"),
            event_synchronize: entry!("cuEventSynchronize"),
            event_elapsed_time: entry!("cuEventElapsedTime"),
            mem_alloc: entry!("cuMemAlloc_v2"),
            memcpy_htod: entry!("cuMemcpyHtoD_v2"),
            memcpy_dtoh: entry!("cuMemcpyDtoH_v2"),
            memcpy_htod_async: entry!("cuMemcpyHtoDAsync_v2"),
            get_error_name: entry!("cuGetErrorName"),
        };
        let path = library_path(api.init as *const c_void);
        let mut d = Driver {
            api,
            path,
            function: ptr::null_mut(),
            stream: ptr::null_mut(),
            events: Vec::new(),
            device_buf: 0,
            host_buf: vec![super::FILL; COPY_BYTES],
            device_name: String::new(),
        };
        d.setup(ptx, kernel, events)?;
        Ok(d)
    }

    fn check(&self, call: &'static str, r: CuResult) -> Result<(), WorkloadError> {
        if r == 0 {
            return Ok(());
        }
        let mut name: *const c_char = ptr::null();
        // SAFETY: `name` is a valid out-pointer; the driver stores a pointer
        // to a static string or leaves it untouched.
        let named = unsafe { (self.api.get_error_name)(r, &mut name) } == 0 && !name.is_null();
        let name = if named {
            // SAFETY: a non-null name from cuGetErrorName is a static
            // NUL-terminated string.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("CUresult {r}")
        };
        Err(WorkloadError::Cuda {
            call,
            code: r,
            name,
        })
    }

    fn setup(&mut self, ptx: &str, kernel: &str, events: usize) -> Result<(), WorkloadError> {
        let a = self.api;
        // SAFETY: plain value argument.
        self.check("cuInit", unsafe { (a.init)(0) })?;
        let mut dev: CuDevice = 0;
        // SAFETY: `dev` is a valid out-pointer.
        self.check("cuDeviceGet", unsafe { (a.device_get)(&mut dev, 0) })?;
        let mut name = [0 as c_char; 256];
        // SAFETY: `name` holds the 256 bytes the length argument says.
        self.check("cuDeviceGetName", unsafe {
            (a.device_get_name)(name.as_mut_ptr(), name.len() as c_int, dev)
        })?;
        name[name.len() - 1] = 0;
        // SAFETY: NUL-terminated by the driver, and by the line above.
        self.device_name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut ctx: Handle = ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer.
        self.check("cuDevicePrimaryCtxRetain", unsafe {
            (a.primary_ctx_retain)(&mut ctx, dev)
        })?;
        // SAFETY: `ctx` is the context just retained (never released).
        self.check("cuCtxSetCurrent", unsafe { (a.ctx_set_current)(ctx) })?;
        let image = CString::new(ptx).map_err(|_| WorkloadError::Setup("PTX text holds a NUL"))?;
        let mut module: Handle = ptr::null_mut();
        // SAFETY: `image` is NUL-terminated PTX text, alive for the call.
        self.check("cuModuleLoadData", unsafe {
            (a.module_load_data)(&mut module, image.as_ptr().cast())
        })?;
        let kname =
            CString::new(kernel).map_err(|_| WorkloadError::Setup("kernel name holds a NUL"))?;
        // SAFETY: `module` was loaded above; `kname` is NUL-terminated.
        let r = unsafe { (a.module_get_function)(&mut self.function, module, kname.as_ptr()) };
        self.check("cuModuleGetFunction", r)?;
        // SAFETY: valid out-pointer; flags 0 = a blocking stream.
        let r = unsafe { (a.stream_create)(&mut self.stream, 0) };
        self.check("cuStreamCreate", r)?;
        for _ in 0..events {
            let mut e: Handle = ptr::null_mut();
            // SAFETY: valid out-pointer; flags 0 = a timed event.
            self.check("cuEventCreate", unsafe { (a.event_create)(&mut e, 0) })?;
            self.events.push(e);
        }
        // SAFETY: valid out-pointer.
        let r = unsafe { (a.mem_alloc)(&mut self.device_buf, COPY_BYTES) };
        self.check("cuMemAlloc_v2", r)?;
        // SAFETY: `host_buf` holds COPY_BYTES bytes, the size of the
        // allocation.
        self.check("cuMemcpyHtoD_v2", unsafe {
            (a.memcpy_htod)(self.device_buf, self.host_buf.as_ptr().cast(), COPY_BYTES)
        })?;
        Ok(())
    }

    /// Where the loader found the library.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// Launches the kernel (`blocks` blocks of one thread) on the stream
    /// with one 64-bit argument.
    pub fn launch(&mut self, arg: u64, blocks: u32) -> Result<(), WorkloadError> {
        let mut value = arg;
        let mut params = [(&mut value as *mut u64).cast::<c_void>()];
        // SAFETY: the function and stream are live; `params` holds one
        // pointer to a u64, the kernel's one parameter, alive for the call
        // (the driver copies parameters before it returns).
        let r = unsafe {
            (self.api.launch_kernel)(
                self.function,
                blocks,
                1,
                1,
                1,
                1,
                1,
                0,
                self.stream,
                params.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        self.check("cuLaunchKernel", r)
    }

    /// Queues a copy of [`COPY_BYTES`] host bytes to the device buffer.
    pub fn copy_async(&mut self) -> Result<(), WorkloadError> {
        // SAFETY: the source holds COPY_BYTES bytes and is not touched while
        // the process lives (pageable memory: the driver stages it before
        // returning); the destination is our allocation of that size.
        let r = unsafe {
            (self.api.memcpy_htod_async)(
                self.device_buf,
                self.host_buf.as_ptr().cast(),
                COPY_BYTES,
                self.stream,
            )
        };
        self.check("cuMemcpyHtoDAsync_v2", r)
    }

    /// A synchronous 4-byte copy to the host (ordered after the stream's
    /// work: the stream is blocking and the copy uses the legacy stream).
    pub fn read_back(&mut self) -> Result<u32, WorkloadError> {
        let mut word = 0u32;
        // SAFETY: `word` is 4 writable bytes; the source is our allocation.
        let r =
            unsafe { (self.api.memcpy_dtoh)((&mut word as *mut u32).cast(), self.device_buf, 4) };
        self.check("cuMemcpyDtoH_v2", r)?;
        Ok(word)
    }

    /// `cuStreamSynchronize` on the stream.
    pub fn stream_sync(&mut self) -> Result<(), WorkloadError> {
        // SAFETY: the stream is live.
        let r = unsafe { (self.api.stream_synchronize)(self.stream) };
        self.check("cuStreamSynchronize", r)
    }

    /// `cuCtxSynchronize`.
    pub fn ctx_sync(&mut self) -> Result<(), WorkloadError> {
        // SAFETY: no arguments; the context is current.
        let r = unsafe { (self.api.ctx_synchronize)() };
        self.check("cuCtxSynchronize", r)
    }

    fn event(&self, i: usize) -> Result<Handle, WorkloadError> {
        self.events
            .get(i)
            .copied()
            .ok_or(WorkloadError::Setup("event index out of range"))
    }

    /// Records event `i` on the stream.
    pub fn record(&mut self, i: usize) -> Result<(), WorkloadError> {
        let e = self.event(i)?;
        // SAFETY: the event and stream are live.
        let r = unsafe { (self.api.event_record)(e, self.stream) };
        self.check("cuEventRecord", r)
    }

    /// Waits for event `i`.
    pub fn event_sync(&mut self, i: usize) -> Result<(), WorkloadError> {
        let e = self.event(i)?;
        // SAFETY: the event is live.
        let r = unsafe { (self.api.event_synchronize)(e) };
        self.check("cuEventSynchronize", r)
    }

    /// Milliseconds between events `a` and `b`, both completed.
    pub fn elapsed_ms(&mut self, a: usize, b: usize) -> Result<f32, WorkloadError> {
        let (ea, eb) = (self.event(a)?, self.event(b)?);
        let mut ms = 0f32;
        // SAFETY: `ms` is a valid out-pointer; the events are live.
        let r = unsafe { (self.api.event_elapsed_time)(&mut ms, ea, eb) };
        self.check("cuEventElapsedTime", r)?;
        Ok(ms)
    }
}

/// The file the loader mapped the symbol at `addr` from.
fn library_path(addr: *const c_void) -> String {
    // SAFETY: Dl_info is plain data; zeroed is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `info` is a valid out-pointer; dladdr only reads `addr`.
    let found = unsafe { libc::dladdr(addr, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        return LIBCUDA.into();
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader, valid
    // while the library stays loaded (it is never closed).
    unsafe { CStr::from_ptr(info.dli_fname) }
        .to_string_lossy()
        .into_owned()
}
