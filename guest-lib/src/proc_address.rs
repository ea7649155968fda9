//! `cuGetProcAddress`: answers by entry-point name, ABI version and
//! per-thread-default-stream flag, from the generated table.
//!
//! A request for (`cuMemAlloc`, 3020) means `cuMemAlloc_v2`; (`cuMemAlloc`,
//! 2000) the legacy `cuMemAlloc`; with `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`
//! the `_ptds`/`_ptsz` variant where one exists. The newest version at or
//! below the requested one wins. The address is this library's own export
//! of that symbol (implemented, or the generated NOT_SUPPORTED stub).

use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::OnceLock;

use crate::ffi;
use crate::generated::PROC_TABLE;
use crate::types::{err, CUresult};

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
const PER_THREAD_DEFAULT_STREAM: u64 = 2;
/// `CU_GET_PROC_ADDRESS_SUCCESS`.
const FOUND: u32 = 0;
/// `CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND`.
const SYMBOL_NOT_FOUND: u32 = 1;
/// `CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT`.
const VERSION_NOT_SUFFICIENT: u32 = 2;

/// The symbol that implements (`name`, `version`, `flags`), or why none.
pub fn resolve(name: &str, version: i32, flags: u64) -> Result<&'static str, u32> {
    let start = PROC_TABLE.partition_point(|r| r.0 < name);
    let rows = PROC_TABLE[start..].iter().take_while(|r| r.0 == name);
    let mut plain: Option<(u32, &'static str)> = None;
    let mut variant: Option<(u32, &'static str)> = None;
    let mut any = false;
    for &(_, v, is_variant, sym) in rows {
        any = true;
        if i64::from(v) > i64::from(version) {
            continue;
        }
        let slot = if is_variant { &mut variant } else { &mut plain };
        if slot.is_none_or(|(best, _)| v >= best) {
            *slot = Some((v, sym));
        }
    }
    if !any {
        return Err(SYMBOL_NOT_FOUND);
    }
    let pick = if flags & PER_THREAD_DEFAULT_STREAM != 0 {
        variant.or(plain)
    } else {
        plain
    };
    pick.map(|(_, s)| s).ok_or(VERSION_NOT_SUFFICIENT)
}

/// This library's own handle, for looking up its exports.
fn self_handle() -> *mut c_void {
    static HANDLE: OnceLock<usize> = OnceLock::new();
    *HANDLE.get_or_init(|| {
        let mut info: libc::Dl_info = libc::Dl_info {
            dli_fname: std::ptr::null(),
            dli_fbase: std::ptr::null_mut(),
            dli_sname: std::ptr::null(),
            dli_saddr: std::ptr::null_mut(),
        };
        let me = cuGetProcAddress_v2 as *const c_void;
        // SAFETY: dladdr only reads the address and fills `info`.
        if unsafe { libc::dladdr(me, &mut info) } == 0 || info.dli_fname.is_null() {
            return 0;
        }
        // SAFETY: dli_fname is the C string of an already-loaded object;
        // RTLD_NOLOAD returns its handle without loading anything.
        unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) as usize }
    }) as *mut c_void
}

fn lookup(symbol: *const c_char, version: i32, flags: u64) -> Result<*mut c_void, (CUresult, u32)> {
    if symbol.is_null() {
        return Err((err::INVALID_VALUE, SYMBOL_NOT_FOUND));
    }
    // SAFETY: a C string per the API.
    let name = unsafe { CStr::from_ptr(symbol) }
        .to_str()
        .map_err(|_| (err::NOT_FOUND, SYMBOL_NOT_FOUND))?;
    let sym = resolve(name, version, flags).map_err(|s| (err::NOT_FOUND, s))?;
    let c = CString::new(sym).map_err(|_| (err::NOT_FOUND, SYMBOL_NOT_FOUND))?;
    let h = self_handle();
    // SAFETY: dlsym on our own handle (or RTLD_DEFAULT if unknown) with a C string.
    let p = unsafe { libc::dlsym(if h.is_null() { libc::RTLD_DEFAULT } else { h }, c.as_ptr()) };
    if p.is_null() {
        return Err((err::NOT_FOUND, SYMBOL_NOT_FOUND));
    }
    Ok(p)
}

/// `cuGetProcAddress_v2`.
#[no_mangle]
pub extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
    status: *mut u32,
) -> CUresult {
    ffi(|| {
        if pfn.is_null() {
            return err::INVALID_VALUE;
        }
        let (r, st, p) = match lookup(symbol, version, flags) {
            Ok(p) => (err::SUCCESS, FOUND, p),
            Err((r, st)) => {
                if crate::log_level() >= crate::LogLevel::Trace && !symbol.is_null() {
                    // SAFETY: a C string per the API (checked non-null).
                    let name = unsafe { CStr::from_ptr(symbol) }.to_string_lossy();
                    eprintln!("fairgpu guest-lib: cuGetProcAddress({name}, {version}, {flags}): status {st}");
                }
                (r, st, std::ptr::null_mut())
            }
        };
        // SAFETY: `pfn` is non-null (checked) and `status` may be null.
        unsafe {
            *pfn = p;
            if !status.is_null() {
                *status = st;
            }
        }
        r
    })
}

/// `cuGetProcAddress` (CUDA 11.3 ABI, no status).
#[no_mangle]
pub extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: i32,
    flags: u64,
) -> CUresult {
    cuGetProcAddress_v2(symbol, pfn, version, flags, std::ptr::null_mut())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_variants_resolve_like_the_driver() {
        assert_eq!(resolve("cuMemAlloc", 3020, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(resolve("cuMemAlloc", 12000, 0), Ok("cuMemAlloc_v2"));
        assert_eq!(resolve("cuMemAlloc", 2000, 0), Ok("cuMemAlloc"));
        assert_eq!(resolve("cuMemAlloc", 1000, 0), Err(VERSION_NOT_SUFFICIENT));
        assert_eq!(
            resolve("cuDevicePrimaryCtxRelease", 7000, 0),
            Ok("cuDevicePrimaryCtxRelease")
        );
        assert_eq!(
            resolve("cuDevicePrimaryCtxRelease", 11000, 0),
            Ok("cuDevicePrimaryCtxRelease_v2")
        );
        assert_eq!(resolve("cuLaunchKernel", 12000, 0), Ok("cuLaunchKernel"));
        assert_eq!(
            resolve("cuLaunchKernel", 12000, PER_THREAD_DEFAULT_STREAM),
            Ok("cuLaunchKernel_ptsz")
        );
        assert_eq!(
            resolve("cuMemcpyHtoD", 12000, PER_THREAD_DEFAULT_STREAM),
            Ok("cuMemcpyHtoD_v2_ptds")
        );
        assert_eq!(resolve("cuCtxCreate", 12050, 0), Ok("cuCtxCreate_v4"));
        assert_eq!(resolve("cuCtxCreate", 11040, 0), Ok("cuCtxCreate_v3"));
        assert_eq!(
            resolve("cuGetProcAddress", 12000, 0),
            Ok("cuGetProcAddress_v2")
        );
        assert_eq!(resolve("", 0, 0), Err(SYMBOL_NOT_FOUND));
        assert_eq!(resolve("cuNoSuchThing", 12000, 0), Err(SYMBOL_NOT_FOUND));
        // Without a variant the plain symbol is given even with the flag.
        assert_eq!(
            resolve("cuInit", 12000, PER_THREAD_DEFAULT_STREAM),
            Ok("cuInit")
        );
    }

    #[test]
    fn every_table_symbol_is_exported_by_the_library() {
        // The cdylib sits next to the test binary's deps/ folder.
        let exe = std::env::current_exe().unwrap();
        let lib = exe
            .parent()
            .and_then(|d| d.parent())
            .unwrap()
            .join("libcuda.so");
        assert!(lib.is_file(), "{} not built", lib.display());
        let path = CString::new(lib.to_str().unwrap()).unwrap();
        // SAFETY: loading our own cdylib; its initializers do nothing.
        let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        assert!(!h.is_null(), "dlopen of {} failed", lib.display());
        for &(_, _, _, sym) in PROC_TABLE {
            let c = CString::new(sym).unwrap();
            // SAFETY: dlsym on a live handle with a C string.
            let p = unsafe { libc::dlsym(h, c.as_ptr()) };
            assert!(!p.is_null(), "{sym} is not exported");
        }
        assert!(
            crate::generated::IMPLEMENTED.len() > 100,
            "implemented entry points missing from the scan"
        );
    }
}
