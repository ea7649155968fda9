//! The dynamic loader: NVIDIA's NVRTC found beside the shim and opened by
//! path, the CUDA driver (fairgpu's guest library in a VM) asked about the
//! device. Every `unsafe` of the crate is here.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A library opened with `dlopen`, never closed (its functions stay
/// reachable for the process's life, as the library it stands in for).
#[derive(Debug)]
pub struct Library(*mut c_void);

// SAFETY: a dlopen handle is a process-wide token; dlsym on it is
// thread-safe (glibc serializes the loader's state).
unsafe impl Send for Library {}
// SAFETY: as above; the handle is never written after opening.
unsafe impl Sync for Library {}

impl Library {
    /// Opens `name` (a path, or a soname the loader searches for) with
    /// its symbols kept local to it.
    pub fn open(name: &CStr) -> Option<Library> {
        // SAFETY: `name` is a NUL-terminated string; dlopen runs the
        // library's initializers, as loading NVRTC or the driver would.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        (!h.is_null()).then_some(Library(h))
    }

    /// The address of `name` in this library (or a library it loaded).
    pub fn symbol(&self, name: &CStr) -> Option<*mut c_void> {
        // SAFETY: the handle is live (never closed); `name` is
        // NUL-terminated.
        let p = unsafe { libc::dlsym(self.0, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    }
}

/// The last loader error, for messages.
pub fn error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string valid until
    // the next loader call on this thread; it is copied at once.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown loader error".into()
    } else {
        // SAFETY: non-null, NUL-terminated (above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// The file this shim was loaded from.
pub fn own_file() -> Option<PathBuf> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    let me = own_file as fn() -> Option<PathBuf> as *const c_void;
    // SAFETY: `me` is the address of a function of this library; `info`
    // is a writable Dl_info.
    if unsafe { libc::dladdr(me, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is NUL-terminated and lives as long as
    // the library (this one) stays loaded.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(PathBuf::from(name.to_string_lossy().into_owned()))
}

/// Whether `a` and `b` are the same file (device and inode).
pub fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// A path as a C string (`None` if it holds a NUL byte).
pub fn c_path(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_encoded_bytes()).ok()
}

type CuInit = unsafe extern "C" fn(c_int) -> c_int;
type CuCtxGetDevice = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;

/// Device attribute `attr` of the current context's device (else device
/// 0), asked of the CUDA driver the program uses (`libcuda.so.1`); `None`
/// when there is no driver or it refuses the attribute (NVIDIA's driver
/// refuses fairgpu's own).
pub fn device_attribute(attr: c_int) -> Option<c_int> {
    let cuda = Library::open(c"libcuda.so.1")?;
    let init = cuda.symbol(c"cuInit")?;
    let ctx_dev = cuda.symbol(c"cuCtxGetDevice")?;
    let dev_get = cuda.symbol(c"cuDeviceGet")?;
    let get = cuda.symbol(c"cuDeviceGetAttribute")?;
    // SAFETY: each symbol (this and the three below) is the driver API's
    // entry point of that name, whose C prototype the type spells (cuda.h).
    let init = unsafe { std::mem::transmute::<*mut c_void, CuInit>(init) };
    // SAFETY: as above.
    let ctx_dev = unsafe { std::mem::transmute::<*mut c_void, CuCtxGetDevice>(ctx_dev) };
    // SAFETY: as above.
    let dev_get = unsafe { std::mem::transmute::<*mut c_void, CuDeviceGet>(dev_get) };
    // SAFETY: as above.
    let get = unsafe { std::mem::transmute::<*mut c_void, CuDeviceGetAttribute>(get) };
    // SAFETY: cuInit takes flags; 0 is the only value defined.
    if unsafe { init(0) } != 0 {
        return None;
    }
    let mut dev: c_int = 0;
    // SAFETY: each writes one int into a local.
    if unsafe { ctx_dev(&mut dev) } != 0 && unsafe { dev_get(&mut dev, 0) } != 0 {
        return None;
    }
    let mut v: c_int = 0;
    // SAFETY: writes one int into a local.
    (unsafe { get(&mut v, attr, dev) } == 0).then_some(v)
}

/// Reads the `n` C strings at `argv` (`None` if `n` is negative or past
/// `max`, or `argv` or one of them is null).
///
/// # Safety
/// `argv` must point to `n` readable pointers, each to a NUL-terminated
/// string that stays alive while the result is used (NVRTC's contract
/// for its options).
pub unsafe fn c_strings<'a>(
    argv: *const *const c_char,
    n: c_int,
    max: usize,
) -> Option<Vec<&'a [u8]>> {
    let n = usize::try_from(n).ok().filter(|&n| n <= max)?;
    if n == 0 {
        return Some(Vec::new());
    }
    if argv.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees `n` readable pointers at `argv`.
    let ptrs = unsafe { std::slice::from_raw_parts(argv, n) };
    ptrs.iter()
        .map(|&p| {
            // SAFETY: non-null pointers are NUL-terminated strings that
            // outlive the result (the caller's contract).
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_bytes())
        })
        .collect()
}
