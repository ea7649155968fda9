//! fairgpu's nvJitLink shim: NVIDIA's nvJitLink, answering a link-time
//! optimized link for machine code with PTX where the vGPU executes PTX
//! only.
//!
//! Programs that link LTO-IR at run time (NVRTC's `-dlto` output, or
//! `nvcc -dlto` fatbins) create a link with `-lto -arch=sm_90`, add the
//! IR, complete it and load `nvJitLinkGetLinkedCubin`'s machine code with
//! `cuModuleLoadData` (NVIDIA's `jitLto` sample does exactly this). SimGpu
//! executes PTX and cannot run that cubin. Installed in the guest as
//! `libnvJitLink.so.12` / `.13` (with NVIDIA's symbol versions and the
//! `__nvJitLink*_12_N` / `_13_0` names its header binds to), this library
//! forwards every call to NVIDIA's. When the device says its executor runs
//! PTX only ([`ATTR_EXECUTES_PTX_ONLY`](crate::ATTR_EXECUTES_PTX_ONLY)), a
//! link made with `-lto` and without `-ptx` is made with `-ptx` as well:
//! nvJitLink then optimizes the linked IR and emits PTX for the same
//! architecture, and `nvJitLinkGetLinkedCubinSize`/`GetLinkedCubin` of that
//! link hand out the PTX, which `cuModuleLoadData` accepts as it accepts a
//! cubin. A link without `-lto` (PTX or cubins linked into machine code) is
//! left alone: nvJitLink emits PTX only from LTO-IR, and SimGpu refuses the
//! resulting cubin with a message saying it executes PTX.
//!
//! NVIDIA's library: `FAIRGPU_NVJITLINK_LIBRARY` (its path), else the first
//! `libnvJitLink.so.<major>` that is not a fairgpu shim in the directories of
//! `LD_LIBRARY_PATH` and the usual CUDA and system library directories.
//! `FAIRGPU_NVJITLINK_PTX=1` / `0` forces the rewriting on or off.

use std::collections::{BTreeSet, HashMap};
use std::ffi::{c_char, c_uint, c_void, CString};
use std::sync::{Mutex, OnceLock};

use super::{dl, open_nvidia};

/// `nvJitLinkResult`.
pub type JitResult = c_uint;
/// `nvJitLinkHandle`: NVIDIA's opaque link handle, passed through.
pub type Handle = *mut c_void;

/// NVJITLINK_SUCCESS.
pub const JIT_SUCCESS: JitResult = 0;
/// NVJITLINK_ERROR_INVALID_INPUT.
pub const JIT_INVALID_INPUT: JitResult = 3;
/// NVJITLINK_ERROR_INTERNAL: also what a call returns when NVIDIA's
/// library (or its entry point) cannot be found.
pub const JIT_INTERNAL: JitResult = 6;

/// Most options one link may pass.
const MAX_OPTIONS: usize = 1 << 16;

/// Runs an exported function's body; a panic becomes
/// NVJITLINK_ERROR_INTERNAL instead of unwinding into C.
pub fn guard(f: impl FnOnce() -> JitResult) -> JitResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(JIT_INTERNAL)
}

type CreateFn = unsafe extern "C" fn(*mut Handle, c_uint, *const *const c_char) -> JitResult;
type DestroyFn = unsafe extern "C" fn(*mut Handle) -> JitResult;
type AddDataFn =
    unsafe extern "C" fn(Handle, c_uint, *const c_void, usize, *const c_char) -> JitResult;
type AddFileFn = unsafe extern "C" fn(Handle, c_uint, *const c_char) -> JitResult;
type HandleFn = unsafe extern "C" fn(Handle) -> JitResult;
type SizeFn = unsafe extern "C" fn(Handle, *mut usize) -> JitResult;
type BytesFn = unsafe extern "C" fn(Handle, *mut c_void) -> JitResult;
type TextFn = unsafe extern "C" fn(Handle, *mut c_char) -> JitResult;
type VersionFn = unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> JitResult;

/// NVIDIA's entry points of one binding (the plain names, or one header
/// release's `__nvJitLink*_12_9` names), each `None` where NVIDIA's library
/// has neither that name nor the plain one.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    create: Option<CreateFn>,
    destroy: Option<DestroyFn>,
    add_data: Option<AddDataFn>,
    add_file: Option<AddFileFn>,
    complete: Option<HandleFn>,
    cubin_size: Option<SizeFn>,
    cubin: Option<BytesFn>,
    ptx_size: Option<SizeFn>,
    ptx: Option<TextFn>,
    error_log_size: Option<SizeFn>,
    error_log: Option<TextFn>,
    info_log_size: Option<SizeFn>,
    info_log: Option<TextFn>,
    version: Option<VersionFn>,
}

/// The address of NVIDIA's `__<name><suffix>` (the versioned name a
/// program built with that release's header calls), else of its plain
/// `<name>`.
fn lookup(lib: &dl::Library, name: &str, suffix: &str) -> Option<*mut c_void> {
    let versioned = (!suffix.is_empty())
        .then(|| CString::new(format!("__{name}{suffix}")).ok())
        .flatten();
    versioned
        .and_then(|v| lib.symbol(&v))
        .or_else(|| lib.symbol(&CString::new(name).ok()?))
}

macro_rules! resolve {
    ($lib:expr, $suffix:expr; $($field:ident : $ty:ty = $name:literal),* $(,)?) => {
        Table { $( $field: lookup($lib, $name, $suffix).map(|p| {
            // SAFETY: NVIDIA's symbol of this name (or its versioned
            // form, which has the same prototype) has this C prototype
            // (nvJitLink.h).
            unsafe { std::mem::transmute::<*mut c_void, $ty>(p) }
        }), )* }
    };
}

/// NVIDIA's nvJitLink of release `major`, opened once; `None` (and a
/// message on stderr, once) when it cannot be found.
fn library(major: u32) -> Option<&'static dl::Library> {
    static LIB: OnceLock<Option<dl::Library>> = OnceLock::new();
    LIB.get_or_init(|| {
        match open_nvidia(
            "FAIRGPU_NVJITLINK_LIBRARY",
            &format!("libnvJitLink.so.{major}"),
            c"fairgpu_nvjitlink_shim",
        ) {
            Ok(lib) => Some(lib),
            Err(why) => {
                eprintln!(
                    "fairgpu nvjitlink: {why}; set FAIRGPU_NVJITLINK_LIBRARY to the path of NVIDIA's libnvJitLink.so.{major}"
                );
                None
            }
        }
    })
    .as_ref()
}

/// The entry points NVIDIA's library gives the binding `suffix` (`""`:
/// the plain names; `"_12_9"`: the names 12.9's header calls).
pub fn table(major: u32, suffix: &'static str) -> Option<Table> {
    static TABLES: Mutex<Option<HashMap<&'static str, Table>>> = Mutex::new(None);
    let lib = library(major)?;
    let mut tables = TABLES.lock().unwrap_or_else(|p| p.into_inner());
    let t = tables
        .get_or_insert_with(HashMap::new)
        .entry(suffix)
        .or_insert_with(|| {
            resolve!(lib, suffix;
                create: CreateFn = "nvJitLinkCreate",
                destroy: DestroyFn = "nvJitLinkDestroy",
                add_data: AddDataFn = "nvJitLinkAddData",
                add_file: AddFileFn = "nvJitLinkAddFile",
                complete: HandleFn = "nvJitLinkComplete",
                cubin_size: SizeFn = "nvJitLinkGetLinkedCubinSize",
                cubin: BytesFn = "nvJitLinkGetLinkedCubin",
                ptx_size: SizeFn = "nvJitLinkGetLinkedPtxSize",
                ptx: TextFn = "nvJitLinkGetLinkedPtx",
                error_log_size: SizeFn = "nvJitLinkGetErrorLogSize",
                error_log: TextFn = "nvJitLinkGetErrorLog",
                info_log_size: SizeFn = "nvJitLinkGetInfoLogSize",
                info_log: TextFn = "nvJitLinkGetInfoLog",
                version: VersionFn = "nvJitLinkVersion",
            )
        });
    Some(*t)
}

/// Whether LTO links become PTX: asked once.
fn ptx_only() -> bool {
    static PTX_ONLY: OnceLock<bool> = OnceLock::new();
    *PTX_ONLY.get_or_init(|| match std::env::var("FAIRGPU_NVJITLINK_PTX").as_deref() {
        Ok("1") => true,
        Ok("0") => false,
        _ => dl::device_attribute(crate::ATTR_EXECUTES_PTX_ONLY) == Some(1),
    })
}

/// Links made to emit PTX where machine code was asked for.
fn made_ptx() -> std::sync::MutexGuard<'static, BTreeSet<usize>> {
    static LINKS: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());
    LINKS.lock().unwrap_or_else(|p| p.into_inner())
}

/// `options` with `-ptx` added, or `None` when the link is not an LTO link
/// or already asks for PTX.
pub fn lto_ptx(options: &[&[u8]]) -> Option<Vec<Vec<u8>>> {
    let lto = options.iter().any(|o| *o == b"-lto");
    let ptx = options.iter().any(|o| *o == b"-ptx");
    (lto && !ptx).then(|| {
        let mut out: Vec<Vec<u8>> = options.iter().map(|o| o.to_vec()).collect();
        out.push(b"-ptx".to_vec());
        out
    })
}

/// Calls `f` of the binding's table, or says why it cannot.
macro_rules! call {
    ($major:expr, $suffix:expr, $field:ident ( $($arg:expr),* )) => {
        match table($major, $suffix).map(|t| t.$field) {
            // SAFETY: the caller's arguments go unchanged to NVIDIA's
            // function of the same name and prototype; their validity is
            // the C caller's contract with nvJitLink.
            Some(Some(f)) => unsafe { f($($arg),*) },
            Some(None) => JIT_INVALID_INPUT,
            None => JIT_INTERNAL,
        }
    };
}

/// `nvJitLinkCreate`: an LTO link made to emit PTX where the device
/// executes PTX only.
pub fn create(
    major: u32,
    suffix: &'static str,
    handle: *mut Handle,
    n: c_uint,
    options: *const *const c_char,
) -> JitResult {
    let Ok(count) = std::ffi::c_int::try_from(n) else {
        return JIT_INVALID_INPUT;
    };
    // SAFETY: nvJitLink's contract: `options` holds `n` NUL-terminated
    // strings that live through the call.
    let opts = unsafe { dl::c_strings(options, count, MAX_OPTIONS) };
    let Some(rewritten) = opts.as_deref().and_then(lto_ptx).filter(|_| ptx_only()) else {
        return call!(major, suffix, create(handle, n, options));
    };
    let Ok(owned) = rewritten
        .into_iter()
        .map(CString::new)
        .collect::<Result<Vec<_>, _>>()
    else {
        return JIT_INVALID_INPUT;
    };
    let ptrs: Vec<*const c_char> = owned.iter().map(|s| s.as_ptr()).collect();
    let Ok(len) = c_uint::try_from(ptrs.len()) else {
        return JIT_INVALID_INPUT;
    };
    let st = call!(major, suffix, create(handle, len, ptrs.as_ptr()));
    if st == JIT_SUCCESS && !handle.is_null() {
        // SAFETY: on success nvJitLink wrote the new handle through the
        // caller's non-null pointer.
        made_ptx().insert(unsafe { handle.read() } as usize);
    }
    st
}

/// `nvJitLinkDestroy`.
pub fn destroy(major: u32, suffix: &'static str, handle: *mut Handle) -> JitResult {
    if !handle.is_null() {
        // SAFETY: nvJitLink's contract: a non-null `handle` points to a
        // link handle.
        made_ptx().remove(&(unsafe { handle.read() } as usize));
    }
    call!(major, suffix, destroy(handle))
}

/// `nvJitLinkAddData`.
pub fn add_data(
    major: u32,
    suffix: &'static str,
    handle: Handle,
    kind: c_uint,
    data: *const c_void,
    size: usize,
    name: *const c_char,
) -> JitResult {
    call!(major, suffix, add_data(handle, kind, data, size, name))
}

/// `nvJitLinkAddFile`.
pub fn add_file(
    major: u32,
    suffix: &'static str,
    handle: Handle,
    kind: c_uint,
    file: *const c_char,
) -> JitResult {
    call!(major, suffix, add_file(handle, kind, file))
}

/// `nvJitLinkComplete`.
pub fn complete(major: u32, suffix: &'static str, handle: Handle) -> JitResult {
    call!(major, suffix, complete(handle))
}

/// `nvJitLinkGetLinkedCubinSize`: the PTX's size (its NUL included) for a
/// link made PTX.
pub fn cubin_size(major: u32, suffix: &'static str, handle: Handle, size: *mut usize) -> JitResult {
    if made_ptx().contains(&(handle as usize)) {
        call!(major, suffix, ptx_size(handle, size))
    } else {
        call!(major, suffix, cubin_size(handle, size))
    }
}

/// `nvJitLinkGetLinkedCubin`: the PTX (NUL-terminated) for a link made PTX.
pub fn cubin(major: u32, suffix: &'static str, handle: Handle, out: *mut c_void) -> JitResult {
    if made_ptx().contains(&(handle as usize)) {
        call!(major, suffix, ptx(handle, out.cast()))
    } else {
        call!(major, suffix, cubin(handle, out))
    }
}

/// `nvJitLinkGetLinkedPtxSize`.
pub fn ptx_size(major: u32, suffix: &'static str, handle: Handle, size: *mut usize) -> JitResult {
    call!(major, suffix, ptx_size(handle, size))
}

/// `nvJitLinkGetLinkedPtx`.
pub fn ptx(major: u32, suffix: &'static str, handle: Handle, out: *mut c_char) -> JitResult {
    call!(major, suffix, ptx(handle, out))
}

/// `nvJitLinkGetErrorLogSize`.
pub fn error_log_size(
    major: u32,
    suffix: &'static str,
    handle: Handle,
    size: *mut usize,
) -> JitResult {
    call!(major, suffix, error_log_size(handle, size))
}

/// `nvJitLinkGetErrorLog`.
pub fn error_log(major: u32, suffix: &'static str, handle: Handle, out: *mut c_char) -> JitResult {
    call!(major, suffix, error_log(handle, out))
}

/// `nvJitLinkGetInfoLogSize`.
pub fn info_log_size(
    major: u32,
    suffix: &'static str,
    handle: Handle,
    size: *mut usize,
) -> JitResult {
    call!(major, suffix, info_log_size(handle, size))
}

/// `nvJitLinkGetInfoLog`.
pub fn info_log(major: u32, suffix: &'static str, handle: Handle, out: *mut c_char) -> JitResult {
    call!(major, suffix, info_log(handle, out))
}

/// `nvJitLinkVersion`.
pub fn version(major: u32, out_major: *mut c_uint, out_minor: *mut c_uint) -> JitResult {
    call!(major, "", version(out_major, out_minor))
}

/// The exported C ABI of nvJitLink for release `$major`: the plain names
/// and, for each header release listed (`v12_9 = "_12_9"`), the
/// `__nvJitLink*<suffix>` names that release's `nvJitLink.h` binds its
/// inline functions to, each through [`guard`].
#[macro_export]
macro_rules! jitlink_exports {
    ($major:literal; $($module:ident = $suffix:literal),* $(,)?) => {
        /// Marks this library as fairgpu's shim (so that a shim never
        /// takes another copy of itself for NVIDIA's library).
        #[no_mangle]
        #[allow(non_upper_case_globals)]
        pub static fairgpu_nvjitlink_shim: u32 = $major;

        /// `nvJitLinkVersion`.
        #[no_mangle]
        pub extern "C" fn nvJitLinkVersion(
            major: *mut std::ffi::c_uint,
            minor: *mut std::ffi::c_uint,
        ) -> $crate::jitlink::JitResult {
            $crate::jitlink::guard(|| $crate::jitlink::version($major, major, minor))
        }

        /// The plain names.
        mod plain {
            $crate::jitlink_exports!(@set $major, "", "");
        }
        $(
            #[doc = concat!("The names of the `", $suffix, "` header.")]
            mod $module {
                $crate::jitlink_exports!(@set $major, "__", $suffix);
            }
        )*
    };
    (@set $major:literal, $prefix:literal, $suffix:literal) => {
        use std::ffi::{c_char, c_uint, c_void};
        use $crate::jitlink::{self as j, guard, Handle, JitResult};

        #[export_name = concat!($prefix, "nvJitLinkCreate", $suffix)]
        extern "C" fn create(h: *mut Handle, n: c_uint, o: *const *const c_char) -> JitResult {
            guard(|| j::create($major, $suffix, h, n, o))
        }
        #[export_name = concat!($prefix, "nvJitLinkDestroy", $suffix)]
        extern "C" fn destroy(h: *mut Handle) -> JitResult {
            guard(|| j::destroy($major, $suffix, h))
        }
        #[export_name = concat!($prefix, "nvJitLinkAddData", $suffix)]
        extern "C" fn add_data(
            h: Handle,
            kind: c_uint,
            data: *const c_void,
            size: usize,
            name: *const c_char,
        ) -> JitResult {
            guard(|| j::add_data($major, $suffix, h, kind, data, size, name))
        }
        #[export_name = concat!($prefix, "nvJitLinkAddFile", $suffix)]
        extern "C" fn add_file(h: Handle, kind: c_uint, file: *const c_char) -> JitResult {
            guard(|| j::add_file($major, $suffix, h, kind, file))
        }
        #[export_name = concat!($prefix, "nvJitLinkComplete", $suffix)]
        extern "C" fn complete(h: Handle) -> JitResult {
            guard(|| j::complete($major, $suffix, h))
        }
        #[export_name = concat!($prefix, "nvJitLinkGetLinkedCubinSize", $suffix)]
        extern "C" fn cubin_size(h: Handle, size: *mut usize) -> JitResult {
            guard(|| j::cubin_size($major, $suffix, h, size))
        }
        #[export_name = concat!($prefix, "nvJitLinkGetLinkedCubin", $suffix)]
        extern "C" fn cubin(h: Handle, out: *mut c_void) -> JitResult {
            guard(|| j::cubin($major, $suffix, h, out))
        }
        #[export_name = concat!($prefix, "nvJitLinkGetLinkedPtxSize", $suffix)]
        extern "C" fn ptx_size(h: Handle, size: *mut usize) -> JitResult {
            guard(|| j::ptx_size($major, $suffix, h, size))
        }
        #[export_name = concat!($prefix, "nvJitLinkGetLinkedPtx", $suffix)]
        extern "C" fn ptx(h: Handle, out: *mut c_char) -> JitResult {
            guard(|| j::ptx($major, $suffix, h, out))
        }
        #[export_name = concat!($prefix, "nvJitLinkGetErrorLogSize", $suffix)]
        extern "C" fn error_log_size(h: Handle, size: *mut usize) -> JitResult {
            guard(|| j::error_log_size($major, $suffix, h, size))
        }
        #[export_name = concat!($prefix, "nvJitLinkGetErrorLog", $suffix)]
        extern "C" fn error_log(h: Handle, out: *mut c_char) -> JitResult {
            guard(|| j::error_log($major, $suffix, h, out))
        }
        #[export_name = concat!($prefix, "nvJitLinkGetInfoLogSize", $suffix)]
        extern "C" fn info_log_size(h: Handle, size: *mut usize) -> JitResult {
            guard(|| j::info_log_size($major, $suffix, h, size))
        }
        #[export_name = concat!($prefix, "nvJitLinkGetInfoLog", $suffix)]
        extern "C" fn info_log(h: Handle, out: *mut c_char) -> JitResult {
            guard(|| j::info_log($major, $suffix, h, out))
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(opts: &[&str]) -> Option<Vec<String>> {
        let o: Vec<&[u8]> = opts.iter().map(|s| s.as_bytes()).collect();
        lto_ptx(&o).map(|v| {
            v.into_iter()
                .map(|b| String::from_utf8(b).unwrap())
                .collect()
        })
    }

    #[test]
    fn an_lto_link_is_asked_for_ptx_as_well() {
        assert_eq!(
            run(&["-lto", "-arch=sm_90"]).unwrap(),
            ["-lto", "-arch=sm_90", "-ptx"]
        );
        assert_eq!(
            run(&["-arch=sm_80", "-O3", "-lto"]).unwrap(),
            ["-arch=sm_80", "-O3", "-lto", "-ptx"]
        );
    }

    #[test]
    fn links_without_lto_or_asking_for_ptx_are_left_alone() {
        assert_eq!(run(&[]), None);
        assert_eq!(run(&["-arch=sm_90"]), None);
        assert_eq!(run(&["-lto", "-ptx", "-arch=sm_90"]), None);
        // Spellings that are not the option itself.
        assert_eq!(run(&["-lto=1", "-arch=sm_90"]), None);
        assert_eq!(run(&["-Xptxas=-lto", "-arch=sm_90"]), None);
    }
}
