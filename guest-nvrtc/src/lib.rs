//! fairgpu's NVRTC shim: NVIDIA's NVRTC, answering a request for machine
//! code with PTX where the vGPU executes PTX only.
//!
//! Programs that compile CUDA C++ at run time often ask NVRTC for machine
//! code of the device's own architecture: `--gpu-architecture=sm_90` from
//! the compute capability, then `nvrtcGetCUBIN` and `cuModuleLoadData`
//! (NVIDIA's samples' `nvrtc_helper.h`, CuPy unless told otherwise). A GPU
//! runs that; SimGpu executes PTX and cannot. This library is installed in
//! the guest under NVRTC's name (`libnvrtc.so.12`, `libnvrtc.so.13`, with
//! NVIDIA's symbol versions) in the directory of fairgpu's `libcuda.so.1`,
//! and forwards every call to NVIDIA's library. When the device says its
//! executor runs PTX only ([`ATTR_EXECUTES_PTX_ONLY`], asked of the
//! driver the program uses: fairgpu's guest library answers it, NVIDIA's
//! driver refuses it), a compilation for a real architecture is made one
//! for the matching virtual architecture (`compute_90`), and
//! `nvrtcGetCUBINSize`/`nvrtcGetCUBIN` of that program hand out its PTX,
//! which `cuModuleLoadData` accepts as it accepts a cubin. Everywhere else
//! (a GPU behind the vGPU, no fairgpu driver) every call is NVIDIA's, unchanged.
//!
//! NVIDIA's library: `FAIRGPU_NVRTC_LIBRARY` (its path), else the first
//! `libnvrtc.so.<major>` that is not this shim in the directories of
//! `LD_LIBRARY_PATH` and the usual CUDA and system library directories.
//! `FAIRGPU_NVRTC_PTX=1` / `0` forces the rewriting on or off.
//!
//! No panic crosses the C ABI: every export runs through [`guard`].

// The functions behind the exports are NVRTC's C ABI: they receive raw
// pointers by contract and pass them to NVIDIA's functions unchanged, as
// the library they stand in for would; marking them `unsafe` would change
// nothing for their C callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

pub use fairgpu_protocol::cuda::ATTR_EXECUTES_PTX_ONLY;

mod dl;
pub mod jitlink;
pub mod options;

/// `nvrtcResult`.
pub type Status = c_int;
/// `nvrtcProgram`: NVIDIA's opaque program handle, passed through.
pub type Program = *mut c_void;

/// NVRTC_SUCCESS.
pub const SUCCESS: Status = 0;
/// NVRTC_ERROR_INVALID_INPUT.
pub const INVALID_INPUT: Status = 3;
/// NVRTC_ERROR_INTERNAL_ERROR: also what a call returns when NVIDIA's
/// library cannot be found (a message on stderr says where it was looked
/// for).
pub const INTERNAL_ERROR: Status = 11;

/// Most options one compilation may pass.
const MAX_OPTIONS: usize = 1 << 16;

/// Runs an exported function's body; a panic becomes
/// NVRTC_ERROR_INTERNAL_ERROR instead of unwinding into C.
pub fn guard(f: impl FnOnce() -> Status) -> Status {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(INTERNAL_ERROR)
}

macro_rules! entries {
    ($( $name:ident ( $($arg:ident : $ty:ty),* ) ; )*) => {
        /// NVIDIA's entry points, as found in its library (`None`: that
        /// release lacks it).
        #[allow(non_snake_case)]
        struct Entries {
            $( $name: Option<unsafe extern "C" fn($($ty),*) -> Status>, )*
            nvrtcGetErrorString: Option<unsafe extern "C" fn(Status) -> *const c_char>,
        }

        impl Entries {
            fn resolve(lib: &dl::Library) -> Entries {
                Entries {
                    $( $name: lib.symbol(
                        &CString::new(stringify!($name)).expect("no NUL")
                    ).map(|p| {
                        // SAFETY: the symbol of this name in NVIDIA's
                        // NVRTC has this prototype (nvrtc.h).
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($ty),*) -> Status>(p)
                        }
                    }), )*
                    nvrtcGetErrorString: lib.symbol(c"nvrtcGetErrorString").map(|p| {
                        // SAFETY: as above.
                        unsafe {
                            std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Status) -> *const c_char>(p)
                        }
                    }),
                }
            }
        }

        /// Calls forwarded unchanged to NVIDIA's NVRTC of `major`.
        #[allow(non_snake_case)]
        pub mod forward {
            use super::*;
            $(
                #[doc = concat!("`", stringify!($name), "`, NVIDIA's.")]
                pub fn $name(major: u32, $($arg: $ty),*) -> Status {
                    match real(major).map(|r| r.$name) {
                        Some(Some(f)) => {
                            // SAFETY: the caller's arguments go unchanged
                            // to NVIDIA's function of the same name and
                            // prototype; their validity is the C caller's
                            // contract with NVRTC.
                            unsafe { f($($arg),*) }
                        }
                        Some(None) => INVALID_INPUT,
                        None => INTERNAL_ERROR,
                    }
                }
            )*
        }
    };
}

entries! {
    nvrtcVersion(major: *mut c_int, minor: *mut c_int);
    nvrtcGetNumSupportedArchs(n: *mut c_int);
    nvrtcGetSupportedArchs(archs: *mut c_int);
    nvrtcCreateProgram(prog: *mut Program, src: *const c_char, name: *const c_char, n: c_int,
        headers: *const *const c_char, names: *const *const c_char);
    nvrtcDestroyProgram(prog: *mut Program);
    nvrtcCompileProgram(prog: Program, n: c_int, options: *const *const c_char);
    nvrtcGetPTXSize(prog: Program, size: *mut usize);
    nvrtcGetPTX(prog: Program, out: *mut c_char);
    nvrtcGetCUBINSize(prog: Program, size: *mut usize);
    nvrtcGetCUBIN(prog: Program, out: *mut c_char);
    nvrtcGetNVVMSize(prog: Program, size: *mut usize);
    nvrtcGetNVVM(prog: Program, out: *mut c_char);
    nvrtcGetLTOIRSize(prog: Program, size: *mut usize);
    nvrtcGetLTOIR(prog: Program, out: *mut c_char);
    nvrtcGetOptiXIRSize(prog: Program, size: *mut usize);
    nvrtcGetOptiXIR(prog: Program, out: *mut c_char);
    nvrtcGetProgramLogSize(prog: Program, size: *mut usize);
    nvrtcGetProgramLog(prog: Program, out: *mut c_char);
    nvrtcAddNameExpression(prog: Program, expr: *const c_char);
    nvrtcGetLoweredName(prog: Program, expr: *const c_char, lowered: *mut *const c_char);
    nvrtcGetPCHHeapSize(size: *mut usize);
    nvrtcSetPCHHeapSize(size: usize);
    nvrtcGetPCHCreateStatus(prog: Program);
    nvrtcGetPCHHeapSizeRequired(prog: Program, size: *mut usize);
    nvrtcSetFlowCallback(prog: Program, cb: Option<unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int>, payload: *mut c_void);
}

/// NVIDIA's NVRTC of release `major`, opened once; `None` (and a message
/// on stderr, once) when it cannot be found.
fn real(major: u32) -> Option<&'static Entries> {
    static REAL: OnceLock<Option<Entries>> = OnceLock::new();
    REAL.get_or_init(|| match open_real(major) {
        Ok(lib) => {
            // `Library` never closes its handle: NVIDIA's functions stay
            // callable for the process's life.
            Some(Entries::resolve(&lib))
        }
        Err(why) => {
            eprintln!("fairgpu nvrtc: {why}; set FAIRGPU_NVRTC_LIBRARY to the path of NVIDIA's libnvrtc.so.{major}");
            None
        }
    })
    .as_ref()
}

fn open_real(major: u32) -> Result<dl::Library, String> {
    open_nvidia(
        "FAIRGPU_NVRTC_LIBRARY",
        &format!("libnvrtc.so.{major}"),
        c"fairgpu_nvrtc_shim",
    )
}

/// NVIDIA's library `file`: the path in the environment variable `setting`
/// if set, else the first `file` in [`search_dirs`] that is neither this
/// shim nor another copy of a fairgpu shim (one that defines `marker`).
fn open_nvidia(setting: &str, file: &str, marker: &std::ffi::CStr) -> Result<dl::Library, String> {
    if let Some(p) = std::env::var_os(setting) {
        let p = PathBuf::from(p);
        let c = dl::c_path(&p).ok_or_else(|| format!("{setting} holds a NUL byte"))?;
        return dl::Library::open(&c)
            .ok_or_else(|| format!("cannot open {}: {}", p.display(), dl::error()));
    }
    let me = dl::own_file();
    let mut looked = Vec::new();
    for dir in search_dirs() {
        let p = dir.join(file);
        if !p.is_file() || me.as_ref().is_some_and(|m| dl::same_file(m, &p)) {
            continue;
        }
        let Some(c) = dl::c_path(&p) else { continue };
        match dl::Library::open(&c) {
            // Another copy of a fairgpu shim is not NVIDIA's library.
            Some(lib) if lib.symbol(marker).is_none() => return Ok(lib),
            Some(_) => looked.push(format!("{} (a fairgpu shim)", p.display())),
            None => looked.push(format!("{} ({})", p.display(), dl::error())),
        }
    }
    Err(if looked.is_empty() {
        format!("NVIDIA's {file} was not found beside this shim")
    } else {
        format!("no usable NVIDIA {file}: {}", looked.join(", "))
    })
}

/// `LD_LIBRARY_PATH`, then where CUDA and the system put libraries.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    for d in [
        "/usr/local/cuda/lib64",
        "/usr/local/cuda/targets/x86_64-linux/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib/x86_64-linux-gnu",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// Whether compilations for a real architecture become PTX: asked once.
fn ptx_only() -> bool {
    static PTX_ONLY: OnceLock<bool> = OnceLock::new();
    *PTX_ONLY.get_or_init(|| match std::env::var("FAIRGPU_NVRTC_PTX").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => dl::device_attribute(ATTR_EXECUTES_PTX_ONLY) == Some(1),
    })
}

/// Programs compiled to PTX where machine code was asked for.
fn made_ptx() -> std::sync::MutexGuard<'static, BTreeSet<usize>> {
    static PROGRAMS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());
    PROGRAMS.lock().unwrap_or_else(|p| p.into_inner())
}

/// `nvrtcCompileProgram`: a real architecture made virtual where the
/// device executes PTX only.
pub fn compile(major: u32, prog: Program, n: c_int, options: *const *const c_char) -> Status {
    // SAFETY: NVRTC's contract: `options` holds `n` NUL-terminated
    // strings that live through the call.
    let opts = unsafe { dl::c_strings(options, n, MAX_OPTIONS) };
    let Some(rewritten) = opts.as_deref().and_then(options::virtual_arch) else {
        return forward::nvrtcCompileProgram(major, prog, n, options);
    };
    if !ptx_only() {
        return forward::nvrtcCompileProgram(major, prog, n, options);
    }
    let Ok(owned) = rewritten
        .into_iter()
        .map(CString::new)
        .collect::<Result<Vec<_>, _>>()
    else {
        return INVALID_INPUT;
    };
    let ptrs: Vec<*const c_char> = owned.iter().map(|s| s.as_ptr()).collect();
    let st = forward::nvrtcCompileProgram(major, prog, n, ptrs.as_ptr());
    made_ptx().insert(prog as usize);
    st
}

/// `nvrtcDestroyProgram`.
pub fn destroy(major: u32, prog: *mut Program) -> Status {
    if !prog.is_null() {
        // SAFETY: NVRTC's contract: a non-null `prog` points to a program
        // handle.
        let p = unsafe { prog.read() };
        made_ptx().remove(&(p as usize));
    }
    forward::nvrtcDestroyProgram(major, prog)
}

/// `nvrtcGetCUBINSize`: the PTX's size for a program made PTX.
pub fn cubin_size(major: u32, prog: Program, size: *mut usize) -> Status {
    if made_ptx().contains(&(prog as usize)) {
        forward::nvrtcGetPTXSize(major, prog, size)
    } else {
        forward::nvrtcGetCUBINSize(major, prog, size)
    }
}

/// `nvrtcGetCUBIN`: the PTX (NUL-terminated) for a program made PTX.
pub fn cubin(major: u32, prog: Program, out: *mut c_char) -> Status {
    if made_ptx().contains(&(prog as usize)) {
        forward::nvrtcGetPTX(major, prog, out)
    } else {
        forward::nvrtcGetCUBIN(major, prog, out)
    }
}

/// `nvrtcGetErrorString`: NVIDIA's text, or a short one of our own when
/// its library is missing.
pub fn error_string(major: u32, st: Status) -> *const c_char {
    match real(major).and_then(|r| r.nvrtcGetErrorString) {
        // SAFETY: NVIDIA's function takes any status and returns a static
        // string.
        Some(f) => unsafe { f(st) },
        None if st == SUCCESS => c"NVRTC_SUCCESS".as_ptr(),
        None => c"NVRTC_ERROR_INTERNAL_ERROR (NVIDIA's NVRTC not found; see FAIRGPU_NVRTC_LIBRARY)"
            .as_ptr(),
    }
}

/// The exported C ABI of NVRTC for release `$major`: one `#[no_mangle]`
/// function per entry point of `libnvrtc.so.12` and `.13`, each through
/// [`guard`].
#[macro_export]
macro_rules! exports {
    ($major:literal) => {
        /// Marks this library as fairgpu's shim (so that a shim never
        /// takes another copy of itself for NVIDIA's library).
        #[no_mangle]
        #[allow(non_upper_case_globals)]
        pub static fairgpu_nvrtc_shim: u32 = $major;

        $crate::exports!(@forward $major;
            nvrtcVersion(major: *mut std::ffi::c_int, minor: *mut std::ffi::c_int);
            nvrtcGetNumSupportedArchs(n: *mut std::ffi::c_int);
            nvrtcGetSupportedArchs(archs: *mut std::ffi::c_int);
            nvrtcCreateProgram(prog: *mut $crate::Program, src: *const std::ffi::c_char,
                name: *const std::ffi::c_char, n: std::ffi::c_int,
                headers: *const *const std::ffi::c_char, names: *const *const std::ffi::c_char);
            nvrtcGetPTXSize(prog: $crate::Program, size: *mut usize);
            nvrtcGetPTX(prog: $crate::Program, out: *mut std::ffi::c_char);
            nvrtcGetNVVMSize(prog: $crate::Program, size: *mut usize);
            nvrtcGetNVVM(prog: $crate::Program, out: *mut std::ffi::c_char);
            nvrtcGetLTOIRSize(prog: $crate::Program, size: *mut usize);
            nvrtcGetLTOIR(prog: $crate::Program, out: *mut std::ffi::c_char);
            nvrtcGetOptiXIRSize(prog: $crate::Program, size: *mut usize);
            nvrtcGetOptiXIR(prog: $crate::Program, out: *mut std::ffi::c_char);
            nvrtcGetProgramLogSize(prog: $crate::Program, size: *mut usize);
            nvrtcGetProgramLog(prog: $crate::Program, out: *mut std::ffi::c_char);
            nvrtcAddNameExpression(prog: $crate::Program, expr: *const std::ffi::c_char);
            nvrtcGetLoweredName(prog: $crate::Program, expr: *const std::ffi::c_char,
                lowered: *mut *const std::ffi::c_char);
            nvrtcGetPCHHeapSize(size: *mut usize);
            nvrtcSetPCHHeapSize(size: usize);
            nvrtcGetPCHCreateStatus(prog: $crate::Program);
            nvrtcGetPCHHeapSizeRequired(prog: $crate::Program, size: *mut usize);
            nvrtcSetFlowCallback(prog: $crate::Program,
                cb: Option<unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_void) -> std::ffi::c_int>,
                payload: *mut std::ffi::c_void);
        );

        /// `nvrtcCompileProgram`.
        #[no_mangle]
        pub extern "C" fn nvrtcCompileProgram(
            prog: $crate::Program,
            n: std::ffi::c_int,
            options: *const *const std::ffi::c_char,
        ) -> $crate::Status {
            $crate::guard(|| $crate::compile($major, prog, n, options))
        }

        /// `nvrtcDestroyProgram`.
        #[no_mangle]
        pub extern "C" fn nvrtcDestroyProgram(prog: *mut $crate::Program) -> $crate::Status {
            $crate::guard(|| $crate::destroy($major, prog))
        }

        /// `nvrtcGetCUBINSize`.
        #[no_mangle]
        pub extern "C" fn nvrtcGetCUBINSize(prog: $crate::Program, size: *mut usize) -> $crate::Status {
            $crate::guard(|| $crate::cubin_size($major, prog, size))
        }

        /// `nvrtcGetCUBIN`.
        #[no_mangle]
        pub extern "C" fn nvrtcGetCUBIN(
            prog: $crate::Program,
            out: *mut std::ffi::c_char,
        ) -> $crate::Status {
            $crate::guard(|| $crate::cubin($major, prog, out))
        }

        /// `nvrtcGetErrorString`.
        #[no_mangle]
        pub extern "C" fn nvrtcGetErrorString(st: $crate::Status) -> *const std::ffi::c_char {
            std::panic::catch_unwind(|| $crate::error_string($major, st))
                .unwrap_or(c"NVRTC_ERROR_INTERNAL_ERROR".as_ptr())
        }
    };
    (@forward $major:literal; $( $name:ident ( $($arg:ident : $ty:ty),* ) ; )*) => {
        $(
            #[doc = concat!("`", stringify!($name), "`, forwarded to NVIDIA's NVRTC.")]
            #[no_mangle]
            pub extern "C" fn $name($($arg: $ty),*) -> $crate::Status {
                $crate::guard(|| $crate::forward::$name($major, $($arg),*))
            }
        )*
    };
}
