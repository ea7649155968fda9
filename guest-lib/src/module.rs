//! Modules, libraries, functions and kernels, guest side.
//!
//! A module is loaded on the host from the image bytes (fatbin, cubin or
//! PTX), read here from the application's memory: images come without a
//! length, so it is taken from the image's own header, bounded by
//! `protocol::cuda::MAX_MODULE_IMAGE`. Functions are looked up on the host
//! once per (module, name); the object returned caches the handle and the
//! parameter layout that launches need. A `CUkernel` is the same object as
//! its `CUfunction`, so CUDA 13's libcudart may pass either to
//! `cuLaunchKernel`.

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Mutex;

use fairgpu_protocol::cuda::{ParamInfo, MAX_MODULE_IMAGE};

use crate::context::{self, out, require_current, HostKey};
use crate::ffi_result;
use crate::state;
use crate::types::{
    err, CUdevice, CUdeviceptr, CUfunction, CUkernel, CUlibrary, CUmodule, CUresult,
};

/// A loaded module.
#[derive(Debug)]
pub struct GuestModule {
    host: u64,
    /// The host context it was loaded in, whose handle `host` is.
    ctx: HostKey,
    functions: Mutex<HashMap<String, usize>>,
}

/// A kernel of a loaded module.
#[derive(Debug)]
pub struct GuestFunction {
    /// The host's function handle.
    pub host: u64,
    /// Parameter layout.
    pub params: Vec<ParamInfo>,
    /// Whether the kernel can print (its launches leave output to take).
    pub prints: bool,
    name: CString,
    module: usize,
    /// Its module's host context.
    ctx: HostKey,
    /// The library whose kernel it is (`cuLibraryGetKernel`; 0 if none):
    /// used in another context, the kernel is the same-named function of
    /// the library's module there ([`GuestFunction::host_here`]).
    library: AtomicUsize,
    /// The attributes `cuFuncSetAttribute` set on it, as (attribute, value).
    sets: Mutex<Vec<(i32, i32)>>,
    /// The host's MAX_DYNAMIC_SHARED_SIZE_BYTES, once asked (-1 before), so
    /// that a launch asking more fails at once, as on a driver.
    max_dynamic_shared: AtomicI64,
    /// The host's MAX_THREADS_PER_BLOCK (the kernel's launch bound, if
    /// any), once asked (-1 before): a larger block fails at once.
    max_threads: AtomicI64,
    /// What the legacy execution-control calls set (`crate::legacy`).
    pub legacy: Mutex<crate::legacy::LegacyLaunch>,
}

/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
const MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
/// `CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`.
const MAX_THREADS_PER_BLOCK: i32 = 0;

impl GuestFunction {
    /// Its host handle in the current context's host context: its own, or
    /// for a library's kernel used in another context, that of the same
    /// kernel in the library's module there (loaded on first use, as a
    /// driver loads a library into each context that uses it). A function
    /// of a module of another context keeps its handle, which that host
    /// context refuses (CUDA_ERROR_INVALID_HANDLE).
    pub fn host_here(&self) -> Result<u64, CUresult> {
        let key = context::host_of_current();
        // Relaxed: set once by `cuLibraryGetKernel` before the kernel is
        // handed out; the program's synchronization orders any other use.
        let lib = self.library.load(Ordering::Relaxed);
        if key == self.ctx || lib == 0 {
            return Ok(self.host);
        }
        let m = library_ref(lib as CUlibrary)?.module_here()?;
        let f = get_function(m as CUmodule, self.name.as_ptr())?;
        // SAFETY: `get_function` returns a registered, live function.
        let here = unsafe { &*f };
        if here.library.load(Ordering::Relaxed) == 0 {
            // First use in this context: what was set on the kernel holds
            // here too (two threads may both replay it; the values agree).
            let sets = self.sets.lock().map_err(|_| err::UNKNOWN)?.clone();
            for (a, v) in sets {
                state::with(|cu| cu.func_set_attribute(here.host, a, v))?;
            }
            here.library.store(lib, Ordering::Relaxed);
        }
        Ok(here.host)
    }

    /// The kernel's (mangled) name.
    pub fn name(&self) -> &CStr {
        &self.name
    }

    /// Most threads a block of this function may have: the device's
    /// limit, or the kernel's launch bound (`__launch_bounds__`, `.maxntid`)
    /// below it. Fixed when the kernel was compiled, so asked once.
    pub fn max_threads(&self) -> Result<u32, CUresult> {
        self.cached_attribute(&self.max_threads, MAX_THREADS_PER_BLOCK)
    }

    /// Most dynamic shared memory a launch of this function may ask for.
    pub fn max_dynamic_shared(&self) -> Result<u32, CUresult> {
        self.cached_attribute(&self.max_dynamic_shared, MAX_DYNAMIC_SHARED_SIZE_BYTES)
    }

    /// Function attribute `attr`, from `cache` once the host answered.
    fn cached_attribute(&self, cache: &AtomicI64, attr: i32) -> Result<u32, CUresult> {
        // Relaxed: the value is a cache of the host's answer; any thread
        // that finds it unset asks the host itself.
        let known = cache.load(Ordering::Relaxed);
        if let Ok(v) = u32::try_from(known) {
            return Ok(v);
        }
        let host = self.host_here()?;
        let v = state::with(|cu| cu.func_get_attribute(host, attr))?;
        cache.store(i64::from(v.max(0)), Ordering::Relaxed);
        Ok(u32::try_from(v).unwrap_or(0))
    }
}

/// A loaded library: context-independent, as the driver's. Its module
/// was loaded in the host context current at `cuLibraryLoadData`; another
/// context that uses it gets a module of its own from the kept image.
#[derive(Debug)]
struct GuestLibrary {
    module: usize,
    /// The image, as sent to the host.
    image: Vec<u8>,
    /// Its modules in other host contexts.
    others: Mutex<Vec<(HostKey, usize)>>,
}

impl GuestLibrary {
    /// The host context of the module it was loaded as.
    fn home(&self) -> HostKey {
        // SAFETY: a library's modules live until the library unloads.
        unsafe { &*(self.module as *const GuestModule) }.ctx
    }

    /// Where `cuLibraryGetKernel` takes its kernel objects: the module it
    /// was loaded as, while that module's context lives (a kernel then
    /// serves every other context, see `GuestFunction::host_here`); else
    /// the current context's.
    fn kernel_module(&self) -> Result<usize, CUresult> {
        if context::alive(self.home()) {
            Ok(self.module)
        } else {
            self.module_here()
        }
    }

    /// The library's module in the current context's host context.
    fn module_here(&self) -> Result<usize, CUresult> {
        let key = context::host_of_current();
        if self.home() == key {
            return Ok(self.module);
        }
        let mut others = self.others.lock().map_err(|_| err::UNKNOWN)?;
        if let Some(&(_, m)) = others.iter().find(|(k, _)| *k == key) {
            return Ok(m);
        }
        let m = load_bytes(&self.image)? as usize;
        others.push((key, m));
        Ok(m)
    }
}

static MODULES: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
static FUNCTIONS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
static LIBRARIES: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

fn register(set: &Mutex<Option<HashSet<usize>>>, p: usize) {
    if let Ok(mut s) = set.lock() {
        s.get_or_insert_with(HashSet::new).insert(p);
    }
}

fn known(set: &Mutex<Option<HashSet<usize>>>, p: usize) -> bool {
    set.lock()
        .map(|s| s.as_ref().is_some_and(|s| s.contains(&p)))
        .unwrap_or(false)
}

fn forget(set: &Mutex<Option<HashSet<usize>>>, p: usize) -> bool {
    set.lock()
        .map(|mut s| s.get_or_insert_with(HashSet::new).remove(&p))
        .unwrap_or(false)
}

fn module_ref(m: CUmodule) -> Result<&'static GuestModule, CUresult> {
    if !known(&MODULES, m as usize) {
        return Err(err::INVALID_HANDLE);
    }
    // SAFETY: registered modules are live boxes until unloaded.
    Ok(unsafe { &*(m as *const GuestModule) })
}

/// The function behind a `CUfunction` or `CUkernel`.
pub fn function_ref(f: CUfunction) -> Result<&'static GuestFunction, CUresult> {
    if !known(&FUNCTIONS, f as usize) {
        return Err(err::INVALID_HANDLE);
    }
    // SAFETY: registered functions are live boxes until their module unloads.
    Ok(unsafe { &*(f as *const GuestFunction) })
}

const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43b1;
const FATBIN_MAGIC: u32 = 0xba55_ed50;
const ELF_MAGIC: u32 = 0x464c_457f;

const FATBIN_HEADER: usize = 16;
const ELF_HEADER: usize = 64;

/// The length the header `h` of a fatbin (16 bytes) or an ELF64 image (64
/// bytes) declares for its whole image, bounded by `MAX_MODULE_IMAGE`.
fn declared_len(h: &[u8]) -> Result<usize, CUresult> {
    let u64_at = |o: usize| -> Result<usize, CUresult> {
        let b = h.get(o..o + 8).ok_or(err::INVALID_IMAGE)?;
        let v = u64::from_le_bytes(b.try_into().map_err(|_| err::INVALID_IMAGE)?);
        usize::try_from(v).map_err(|_| err::INVALID_IMAGE)
    };
    let u16_at = |o: usize| -> Result<usize, CUresult> {
        let b = h.get(o..o + 2).ok_or(err::INVALID_IMAGE)?;
        Ok(u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let magic = u32::from_le_bytes(
        h.get(..4)
            .and_then(|m| m.try_into().ok())
            .ok_or(err::INVALID_IMAGE)?,
    );
    let total = match magic {
        // u32 magic, u16 version, u16 header size, u64 size of the rest.
        FATBIN_MAGIC => u16_at(6)?
            .checked_add(u64_at(8)?)
            .filter(|t| *t >= FATBIN_HEADER),
        // ELF64: the image ends at the later of the section and program
        // header tables.
        ELF_MAGIC => {
            let sh_end = u64_at(0x28)?.saturating_add(u16_at(0x3a)?.saturating_mul(u16_at(0x3c)?));
            let ph_end = u64_at(0x20)?.saturating_add(u16_at(0x36)?.saturating_mul(u16_at(0x38)?));
            Some(sh_end.max(ph_end).max(ELF_HEADER))
        }
        _ => None,
    };
    total
        .filter(|t| *t <= MAX_MODULE_IMAGE as usize)
        .ok_or(err::INVALID_IMAGE)
}

/// Reads `n` bytes at `p`.
///
/// # Safety
/// `p` must point at `n` readable bytes.
unsafe fn bytes<'a>(p: *const u8, n: usize) -> &'a [u8] {
    // SAFETY: per this function's contract.
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// The image bytes at `image`, sized from their own header.
///
/// # Safety
/// `image` must point at a fatbin wrapper, a fatbin, an ELF cubin or a
/// NUL-terminated PTX string, as the driver API requires.
unsafe fn image_bytes<'a>(image: *const c_void) -> Result<&'a [u8], CUresult> {
    if image.is_null() {
        return Err(err::INVALID_VALUE);
    }
    let p = image.cast::<u8>();
    // SAFETY: every image kind starts with at least 4 readable bytes.
    let magic = u32::from_le_bytes(
        unsafe { bytes(p, 4) }
            .try_into()
            .map_err(|_| err::INVALID_IMAGE)?,
    );
    let limit = MAX_MODULE_IMAGE as usize;
    match magic {
        FATBIN_WRAPPER_MAGIC => {
            // struct { int magic; int version; const void *data; void *filename; }
            // SAFETY: the wrapper is 24 bytes; `data` is at offset 8.
            let data = unsafe { p.add(8).cast::<*const c_void>().read_unaligned() };
            // SAFETY: the wrapper points at the fatbin it wraps.
            unsafe { image_bytes(data) }
        }
        FATBIN_MAGIC => {
            // SAFETY: a fatbin header is 16 bytes.
            let total = declared_len(unsafe { bytes(p, FATBIN_HEADER) })?;
            // SAFETY: the header declares `total` bytes of fatbin.
            Ok(unsafe { bytes(p, total) })
        }
        ELF_MAGIC => {
            // SAFETY: an ELF64 header is 64 bytes.
            let total = declared_len(unsafe { bytes(p, ELF_HEADER) })?;
            // SAFETY: the ELF headers declare `total` bytes of image.
            Ok(unsafe { bytes(p, total) })
        }
        _ => {
            // PTX text, NUL-terminated.
            // SAFETY: PTX images are C strings per the API.
            let n = unsafe { libc::strnlen(p.cast::<c_char>(), limit) };
            if n == limit {
                return Err(err::INVALID_IMAGE);
            }
            // SAFETY: `n` bytes precede the terminating NUL.
            Ok(unsafe { bytes(p, n) })
        }
    }
}

/// Loads a module from an image the application passed. Needs no current
/// context: CUDA 13's libcudart loads libraries before it binds one.
pub fn load(image: *const c_void) -> Result<*mut GuestModule, CUresult> {
    state::device()?;
    // SAFETY: `image` is what the application passed as a module image.
    let data = unsafe { image_bytes(image)? };
    // SAFETY: as above; `image_bytes` refused NULL.
    let linked = unsafe { crate::linked::relocatable_ptx(image)? };
    load_bytes(linked.as_deref().unwrap_or(data))
}

/// [`load`] of an image read already, in the current context.
fn load_bytes(data: &[u8]) -> Result<*mut GuestModule, CUresult> {
    let host = state::with(|cu| cu.module_load(data)).inspect_err(|&e| {
        if e == err::INVALID_IMAGE && data.starts_with(b"\x7fELF") {
            cubin_refused();
        }
    })?;
    let m = Box::into_raw(Box::new(GuestModule {
        host,
        ctx: context::host_of_current(),
        functions: Mutex::new(HashMap::new()),
    }));
    register(&MODULES, m as usize);
    Ok(m)
}

/// Says once why a cubin may have been refused and what to do: SimGpu
/// executes PTX, and a cubin holds only one architecture's machine code.
fn cubin_refused() {
    static SAID: std::sync::Once = std::sync::Once::new();
    crate::say_once(&SAID, || {
        "the host refused a cubin (machine code for one GPU architecture, no PTX). SimGpu \
         executes PTX: ask for PTX instead (NVRTC: nvrtcGetPTX with \
         --gpu-architecture=compute_90, or install fairgpu's NVRTC shim as libnvrtc.so.12/13 \
         beside this library, which does that for programs asking NVRTC for a cubin; \
         nvJitLink: link LTO-IR with -lto -ptx and load nvJitLinkGetLinkedPtx, or install \
         fairgpu's nvJitLink shim as libnvJitLink.so.12/13, which does that for -lto links; \
         nvcc: -gencode arch=compute_90,code=compute_90); on a GPU, build the cubin for the \
         host's architecture"
            .to_owned()
    });
}

fn unload(m: CUmodule) -> Result<(), CUresult> {
    state::device()?;
    let module = module_ref(m)?;
    // Its `__managed__` variables go first: no push or pull may reach
    // them once the module is gone.
    crate::managed::forget_module_vars(m as usize);
    if module.ctx == context::host_of_current() {
        state::with_sync(|cu| cu.module_unload(module.host))?;
    } else {
        // A library's module in another context: unloaded there (if that
        // context is gone, so is the module).
        match state::with_in(module.ctx, |cu| cu.module_unload(module.host)) {
            Ok(()) | Err(err::CONTEXT_IS_DESTROYED) => {}
            Err(e) => return Err(e),
        }
    }
    forget(&MODULES, m as usize);
    crate::memory::forget_globals(m as usize);
    for f in module.functions.lock().map_err(|_| err::UNKNOWN)?.values() {
        if forget(&FUNCTIONS, *f) {
            // SAFETY: functions are boxes owned by their module, freed once here.
            drop(unsafe { Box::from_raw(*f as *mut GuestFunction) });
        }
    }
    // SAFETY: the module was registered (checked) and is freed once.
    drop(unsafe { Box::from_raw(m as *mut GuestModule) });
    Ok(())
}

fn get_function(m: CUmodule, name: *const c_char) -> Result<*mut GuestFunction, CUresult> {
    state::device()?;
    let module = module_ref(m)?;
    if name.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: the name is a C string per the API.
    let name = unsafe { CStr::from_ptr(name) };
    let key = name.to_str().map_err(|_| err::INVALID_VALUE)?.to_owned();
    let mut cache = module.functions.lock().map_err(|_| err::UNKNOWN)?;
    if let Some(f) = cache.get(&key) {
        return Ok(*f as *mut GuestFunction);
    }
    let k = state::with_in(module.ctx, |cu| cu.module_get_function(module.host, &key))?;
    let f = Box::into_raw(Box::new(GuestFunction {
        host: k.handle,
        prints: k.prints,
        params: k.params,
        name: name.to_owned(),
        module: m as usize,
        ctx: module.ctx,
        library: AtomicUsize::new(0),
        sets: Mutex::new(Vec::new()),
        max_dynamic_shared: AtomicI64::new(-1),
        max_threads: AtomicI64::new(-1),
        legacy: Mutex::new(Default::default()),
    }));
    cache.insert(key, f as usize);
    register(&FUNCTIONS, f as usize);
    Ok(f)
}

/// `cuModuleLoadData`.
#[no_mangle]
pub extern "C" fn cuModuleLoadData(pm: *mut CUmodule, image: *const c_void) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let m = load(image)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pm, m.cast()) }
    })
}

/// The image in file `path` (`cuModuleLoad`, `cuLibraryLoadFromFile`):
/// its bytes, NUL-terminated when they are PTX text, as an image in
/// memory is. A file that cannot be read is CUDA_ERROR_FILE_NOT_FOUND, one
/// larger than an image may be CUDA_ERROR_INVALID_IMAGE.
fn read_image_file(path: *const c_char) -> Result<Vec<u8>, CUresult> {
    if path.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: a C string per the API.
    let path = unsafe { CStr::from_ptr(path) }
        .to_str()
        .map_err(|_| err::FILE_NOT_FOUND)?;
    let meta = std::fs::metadata(path).map_err(|_| err::FILE_NOT_FOUND)?;
    if !meta.is_file() {
        return Err(err::FILE_NOT_FOUND);
    }
    if meta.len() >= MAX_MODULE_IMAGE {
        return Err(err::INVALID_IMAGE);
    }
    let mut b = std::fs::read(path).map_err(|_| err::FILE_NOT_FOUND)?;
    let magic = b
        .get(..4)
        .map(|m| u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
    if magic == Some(FATBIN_WRAPPER_MAGIC) {
        // A wrapper points into the program that holds it: not a file.
        return Err(err::INVALID_IMAGE);
    }
    if matches!(magic, Some(FATBIN_MAGIC | ELF_MAGIC)) {
        // The image's header gives its length: a truncated file is refused
        // here rather than read past.
        if declared_len(&b)? > b.len() {
            return Err(err::INVALID_IMAGE);
        }
    } else {
        if let Some(end) = b.iter().position(|&c| c == 0) {
            b.truncate(end);
        }
        b.push(0);
    }
    Ok(b)
}

/// `cuModuleLoad`: a module from a file (PTX, cubin or fatbin).
#[no_mangle]
pub extern "C" fn cuModuleLoad(pm: *mut CUmodule, path: *const c_char) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if pm.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let image = read_image_file(path)?;
        let m = load(image.as_ptr().cast())?;
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(pm, m.cast()) }
    })
}

/// `cuModuleLoadDataEx`: JIT options are accepted and ignored.
#[no_mangle]
pub extern "C" fn cuModuleLoadDataEx(
    pm: *mut CUmodule,
    image: *const c_void,
    _n: u32,
    _o: *mut c_void,
    _v: *mut *mut c_void,
) -> CUresult {
    cuModuleLoadData(pm, image)
}

/// `cuModuleLoadFatBinary`.
#[no_mangle]
pub extern "C" fn cuModuleLoadFatBinary(pm: *mut CUmodule, image: *const c_void) -> CUresult {
    cuModuleLoadData(pm, image)
}

/// `cuModuleUnload`.
#[no_mangle]
pub extern "C" fn cuModuleUnload(m: CUmodule) -> CUresult {
    ffi_result(|| unload(m))
}

/// `cuModuleGetFunction`.
#[no_mangle]
pub extern "C" fn cuModuleGetFunction(
    pf: *mut CUfunction,
    m: CUmodule,
    name: *const c_char,
) -> CUresult {
    ffi_result(|| {
        let f = get_function(m, name)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pf, f.cast()) }
    })
}

/// A module variable's address and size (either out-slot may be null).
fn get_global(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    m: CUmodule,
    name: *const c_char,
) -> Result<(), CUresult> {
    get_variable(dptr, bytes, m, name, false)
}

/// A module variable's address and size (`managed_only`: it must be a
/// `__managed__` variable, else NOT_FOUND).
fn get_variable(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    m: CUmodule,
    name: *const c_char,
    managed_only: bool,
) -> Result<(), CUresult> {
    state::device()?;
    let module = module_ref(m)?;
    if name.is_null() {
        return Err(err::INVALID_VALUE);
    }
    if module.ctx != context::host_of_current() {
        // Its variables are memory of another context, which copies and
        // managed pulls made here would not reach.
        return Err(err::INVALID_CONTEXT);
    }
    // SAFETY: the name is a C string per the API.
    let name = unsafe { CStr::from_ptr(name) }
        .to_str()
        .map_err(|_| err::INVALID_VALUE)?;
    let (ptr, size, managed) = state::with(|cu| cu.module_get_global_info(module.host, name))?;
    if managed_only && !managed {
        return Err(err::NOT_FOUND);
    }
    crate::memory::register_global(ptr, size, m as usize, module.ctx)?;
    if managed {
        // A `__managed__` variable: cudart hands the program this address
        // for its CPU code to use.
        crate::managed::adopt_module_var(
            ptr,
            usize::try_from(size).map_err(|_| err::UNKNOWN)?,
            m as usize,
        )?;
    }
    // SAFETY: non-null slots are writable per the API.
    unsafe {
        if !dptr.is_null() {
            out(dptr, ptr)?;
        }
        if !bytes.is_null() {
            out(bytes, usize::try_from(size).map_err(|_| err::UNKNOWN)?)?;
        }
    }
    Ok(())
}

/// `cuModuleGetGlobal_v2`: a `__device__` or `__constant__` variable, as
/// device memory copies and memsets reach (`cudaMemcpyToSymbol`).
#[no_mangle]
pub extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    m: CUmodule,
    name: *const c_char,
) -> CUresult {
    ffi_result(|| get_global(dptr, bytes, m, name))
}

/// `cuModuleGetLoadingMode`: lazy, as libcudart expects of current drivers.
#[no_mangle]
pub extern "C" fn cuModuleGetLoadingMode(mode: *mut u32) -> CUresult {
    // SAFETY: caller passes a writable slot (checked for null).
    ffi_result(|| unsafe { out(mode, 2) })
}

/// `cuLibraryLoadData`: a library is a module; options are ignored.
#[no_mangle]
pub extern "C" fn cuLibraryLoadData(
    pl: *mut CUlibrary,
    code: *const c_void,
    _jit_opts: *mut c_void,
    _jit_vals: *mut *mut c_void,
    _n_jit: u32,
    _lib_opts: *mut c_void,
    _lib_vals: *mut *mut c_void,
    _n_lib: u32,
) -> CUresult {
    ffi_result(|| {
        if pl.is_null() {
            return Err(err::INVALID_VALUE);
        }
        state::device()?;
        // SAFETY: `code` is what the application passed as an image.
        let data = unsafe { image_bytes(code)? };
        // SAFETY: as above; `image_bytes` refused NULL.
        let linked = unsafe { crate::linked::relocatable_ptx(code)? };
        let image = linked.unwrap_or_else(|| data.to_vec());
        let m = load_bytes(&image)?;
        let l = Box::into_raw(Box::new(GuestLibrary {
            module: m as usize,
            image,
            others: Mutex::new(Vec::new()),
        }));
        register(&LIBRARIES, l as usize);
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(pl, l.cast()) }
    })
}

/// `cuLibraryLoadFromFile`: as `cuLibraryLoadData` on the file's image.
#[no_mangle]
pub extern "C" fn cuLibraryLoadFromFile(
    pl: *mut CUlibrary,
    path: *const c_char,
    jit_opts: *mut c_void,
    jit_vals: *mut *mut c_void,
    n_jit: u32,
    lib_opts: *mut c_void,
    lib_vals: *mut *mut c_void,
    n_lib: u32,
) -> CUresult {
    ffi_result(|| {
        if pl.is_null() {
            return Err(err::INVALID_VALUE);
        }
        state::device()?;
        let image = read_image_file(path)?;
        match cuLibraryLoadData(
            pl,
            image.as_ptr().cast(),
            jit_opts,
            jit_vals,
            n_jit,
            lib_opts,
            lib_vals,
            n_lib,
        ) {
            err::SUCCESS => Ok(()),
            e => Err(e),
        }
    })
}

fn library_ref(l: CUlibrary) -> Result<&'static GuestLibrary, CUresult> {
    if !known(&LIBRARIES, l as usize) {
        return Err(err::INVALID_HANDLE);
    }
    // SAFETY: registered libraries are live boxes until unloaded.
    Ok(unsafe { &*(l as *const GuestLibrary) })
}

/// `cuLibraryGetGlobal`: as `cuModuleGetGlobal` on the library's module.
#[no_mangle]
pub extern "C" fn cuLibraryGetGlobal(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    l: CUlibrary,
    name: *const c_char,
) -> CUresult {
    ffi_result(|| {
        let lib = library_ref(l)?;
        get_global(dptr, bytes, lib.module_here()? as CUmodule, name)
    })
}

/// `cuLibraryGetManaged`: a `__managed__` variable of the library (CUDA
/// 13's libcudart finds them so), mirrored for the CPU as with
/// `cuModuleGetGlobal`.
#[no_mangle]
pub extern "C" fn cuLibraryGetManaged(
    dptr: *mut CUdeviceptr,
    bytes: *mut usize,
    l: CUlibrary,
    name: *const c_char,
) -> CUresult {
    ffi_result(|| {
        let lib = library_ref(l)?;
        get_variable(dptr, bytes, lib.module_here()? as CUmodule, name, true)
    })
}

/// `cuLibraryGetModule`.
#[no_mangle]
pub extern "C" fn cuLibraryGetModule(pm: *mut CUmodule, l: CUlibrary) -> CUresult {
    ffi_result(|| {
        let lib = library_ref(l)?;
        let m = lib.module_here()?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pm, m as CUmodule) }
    })
}

/// `cuLibraryGetKernel`: the kernel is the module's function object.
#[no_mangle]
pub extern "C" fn cuLibraryGetKernel(
    pk: *mut CUkernel,
    l: CUlibrary,
    name: *const c_char,
) -> CUresult {
    ffi_result(|| {
        let lib = library_ref(l)?;
        let f = get_function(lib.kernel_module()? as CUmodule, name)?;
        // Relaxed: see `GuestFunction::host_here`.
        // SAFETY: `get_function` returns a registered, live function.
        unsafe { &*f }.library.store(l as usize, Ordering::Relaxed);
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pk, f.cast()) }
    })
}

/// `cuLibraryUnload`.
#[no_mangle]
pub extern "C" fn cuLibraryUnload(l: CUlibrary) -> CUresult {
    ffi_result(|| {
        let lib = library_ref(l)?;
        unload(lib.module as CUmodule)?;
        forget(&LIBRARIES, l as usize);
        // Its modules in other contexts (gone already with their context,
        // or unloaded there now).
        for (_, m) in lib.others.lock().map_err(|_| err::UNKNOWN)?.drain(..) {
            let _ = unload(m as CUmodule);
        }
        // SAFETY: the library was registered (checked) and is freed once.
        drop(unsafe { Box::from_raw(l as *mut GuestLibrary) });
        Ok(())
    })
}

/// `cuKernelGetFunction`: the same object.
#[no_mangle]
pub extern "C" fn cuKernelGetFunction(pf: *mut CUfunction, k: CUkernel) -> CUresult {
    ffi_result(|| {
        function_ref(k)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pf, k) }
    })
}

/// `cuFuncGetAttribute`.
#[no_mangle]
pub extern "C" fn cuFuncGetAttribute(v: *mut i32, a: i32, f: CUfunction) -> CUresult {
    ffi_result(|| {
        let func = function_ref(f)?;
        if v.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let host = func.host_here()?;
        let value = state::with(|cu| cu.func_get_attribute(host, a))?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(v, value) }
    })
}

/// `cuKernelGetAttribute`.
#[no_mangle]
pub extern "C" fn cuKernelGetAttribute(
    v: *mut i32,
    a: i32,
    k: CUkernel,
    _dev: CUdevice,
) -> CUresult {
    cuFuncGetAttribute(v, a, k)
}

/// `cuFuncSetAttribute`: forwarded; the executor checks the value and
/// holds launches to it (`MAX_DYNAMIC_SHARED_SIZE_BYTES`).
#[no_mangle]
pub extern "C" fn cuFuncSetAttribute(f: CUfunction, a: i32, v: i32) -> CUresult {
    ffi_result(|| {
        let func = function_ref(f)?;
        let host = func.host_here()?;
        state::with(|cu| cu.func_set_attribute(host, a, v))?;
        if let Ok(mut sets) = func.sets.lock() {
            // Replayed where the library's kernel is first used in another
            // context (`host_here`); one entry per attribute.
            sets.retain(|&(x, _)| x != a);
            sets.push((a, v));
        }
        if a == MAX_DYNAMIC_SHARED_SIZE_BYTES {
            // Relaxed: see `max_dynamic_shared`.
            func.max_dynamic_shared
                .store(i64::from(v), Ordering::Relaxed);
        }
        Ok(())
    })
}

/// `cuKernelSetAttribute`.
#[no_mangle]
pub extern "C" fn cuKernelSetAttribute(a: i32, v: i32, k: CUkernel, _dev: CUdevice) -> CUresult {
    cuFuncSetAttribute(k, a, v)
}

/// `cuFuncSetCacheConfig`: accepted.
#[no_mangle]
pub extern "C" fn cuFuncSetCacheConfig(f: CUfunction, _c: u32) -> CUresult {
    ffi_result(|| function_ref(f).map(|_| ()))
}

/// `cuFuncSetSharedMemConfig`: accepted, without effect (the bank size
/// is fixed).
#[no_mangle]
pub extern "C" fn cuFuncSetSharedMemConfig(f: CUfunction, c: u32) -> CUresult {
    ffi_result(|| {
        function_ref(f)?;
        crate::context::shared_config_valid(c)
    })
}

/// `cuKernelSetCacheConfig`: accepted.
#[no_mangle]
pub extern "C" fn cuKernelSetCacheConfig(k: CUkernel, _c: u32, _dev: CUdevice) -> CUresult {
    ffi_result(|| function_ref(k).map(|_| ()))
}

fn param_info(f: CUfunction, index: usize, offset: *mut usize, size: *mut usize) -> CUresult {
    ffi_result(|| {
        let p = *function_ref(f)?
            .params
            .get(index)
            .ok_or(err::INVALID_VALUE)?;
        // SAFETY: null slots are allowed; non-null ones are writable.
        unsafe {
            if !offset.is_null() {
                out(offset, p.offset as usize)?;
            }
            if !size.is_null() {
                out(size, p.size as usize)?;
            }
        }
        Ok(())
    })
}

/// `cuFuncGetParamInfo`: from the layout cached at lookup.
#[no_mangle]
pub extern "C" fn cuFuncGetParamInfo(
    f: CUfunction,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    param_info(f, index, offset, size)
}

/// `cuKernelGetParamInfo`.
#[no_mangle]
pub extern "C" fn cuKernelGetParamInfo(
    k: CUkernel,
    index: usize,
    offset: *mut usize,
    size: *mut usize,
) -> CUresult {
    param_info(k, index, offset, size)
}

/// How many parameters a function or kernel takes (from the layout
/// asked of the host at lookup).
fn param_count(f: CUfunction, count: *mut usize) -> CUresult {
    ffi_result(|| {
        let func = function_ref(f)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(count, func.params.len()) }
    })
}

/// `cuFuncGetParamCount` (CUDA 13.2).
#[no_mangle]
pub extern "C" fn cuFuncGetParamCount(f: CUfunction, count: *mut usize) -> CUresult {
    param_count(f, count)
}

/// `cuKernelGetParamCount` (CUDA 13.2).
#[no_mangle]
pub extern "C" fn cuKernelGetParamCount(k: CUkernel, count: *mut usize) -> CUresult {
    param_count(k, count)
}

/// `cuFuncGetName`.
#[no_mangle]
pub extern "C" fn cuFuncGetName(name: *mut *const c_char, f: CUfunction) -> CUresult {
    ffi_result(|| {
        let func = function_ref(f)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(name, func.name.as_ptr()) }
    })
}

/// `cuKernelGetName`.
#[no_mangle]
pub extern "C" fn cuKernelGetName(name: *mut *const c_char, k: CUkernel) -> CUresult {
    cuFuncGetName(name, k)
}

/// `cuFuncGetModule`.
#[no_mangle]
pub extern "C" fn cuFuncGetModule(pm: *mut CUmodule, f: CUfunction) -> CUresult {
    ffi_result(|| {
        let func = function_ref(f)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pm, func.module as CUmodule) }
    })
}

/// `cuFuncIsLoaded`: functions are loaded when looked up.
#[no_mangle]
pub extern "C" fn cuFuncIsLoaded(state: *mut u32, f: CUfunction) -> CUresult {
    ffi_result(|| {
        function_ref(f)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(state, 1) }
    })
}

/// `cuFuncLoad`.
#[no_mangle]
pub extern "C" fn cuFuncLoad(f: CUfunction) -> CUresult {
    ffi_result(|| function_ref(f).map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_truncated_image_file_is_refused_not_read_past() {
        let dir = std::env::temp_dir().join(format!("fairgpu-module-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            std::ffi::CString::new(p.to_str().unwrap()).unwrap()
        };
        // A fatbin header that declares 16 + 0x10000 bytes, in 16.
        let mut truncated = vec![0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0];
        truncated.extend_from_slice(&0x10000u64.to_le_bytes());
        let p = file("truncated.fatbin", &truncated);
        assert_eq!(read_image_file(p.as_ptr()), Err(err::INVALID_IMAGE));
        // Cut inside the header itself.
        let p = file("short.fatbin", &truncated[..10]);
        assert_eq!(read_image_file(p.as_ptr()), Err(err::INVALID_IMAGE));
        // PTX text is read to its first NUL, and NUL-terminated.
        let p = file("k.ptx", b".version 8.0\n\0junk");
        assert_eq!(
            read_image_file(p.as_ptr()),
            Ok(b".version 8.0\n\0".to_vec())
        );
        let missing = std::ffi::CString::new(dir.join("none").to_str().unwrap()).unwrap();
        assert_eq!(read_image_file(missing.as_ptr()), Err(err::FILE_NOT_FOUND));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
