//! Entry points about the driver itself: error strings and export tables.

use std::ffi::{c_char, c_void, CStr};

use crate::context::out;
use crate::types::{err, CUresult};
use crate::{export_tables, ffi_result};

/// (CUresult, name, description) for the codes applications meet.
static ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (0, c"CUDA_SUCCESS", c"no error"),
    (1, c"CUDA_ERROR_INVALID_VALUE", c"invalid argument"),
    (2, c"CUDA_ERROR_OUT_OF_MEMORY", c"out of memory"),
    (3, c"CUDA_ERROR_NOT_INITIALIZED", c"initialization error"),
    (4, c"CUDA_ERROR_DEINITIALIZED", c"driver shutting down"),
    (
        100,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (101, c"CUDA_ERROR_INVALID_DEVICE", c"invalid device ordinal"),
    (
        200,
        c"CUDA_ERROR_INVALID_IMAGE",
        c"device kernel image is invalid",
    ),
    (
        201,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        400,
        c"CUDA_ERROR_INVALID_HANDLE",
        c"invalid resource handle",
    ),
    (500, c"CUDA_ERROR_NOT_FOUND", c"named symbol not found"),
    (600, c"CUDA_ERROR_NOT_READY", c"device not ready"),
    (
        700,
        c"CUDA_ERROR_ILLEGAL_ADDRESS",
        c"an illegal memory access was encountered",
    ),
    (
        719,
        c"CUDA_ERROR_LAUNCH_FAILED",
        c"unspecified launch failure",
    ),
    (801, c"CUDA_ERROR_NOT_SUPPORTED", c"operation not supported"),
    (999, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

fn lookup(e: CUresult) -> Option<&'static (CUresult, &'static CStr, &'static CStr)> {
    ERRORS.iter().find(|(code, _, _)| *code == e)
}

/// `cuGetErrorName`.
#[no_mangle]
pub extern "C" fn cuGetErrorName(e: CUresult, s: *mut *const c_char) -> CUresult {
    ffi_result(|| {
        let (_, name, _) = lookup(e).ok_or(err::INVALID_VALUE)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(s, name.as_ptr()) }
    })
}

/// `cuGetErrorString`.
#[no_mangle]
pub extern "C" fn cuGetErrorString(e: CUresult, s: *mut *const c_char) -> CUresult {
    ffi_result(|| {
        let (_, _, text) = lookup(e).ok_or(err::INVALID_VALUE)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(s, text.as_ptr()) }
    })
}

/// `cuGetExportTable`: the tables libcudart needs (see `export_tables`).
#[no_mangle]
pub extern "C" fn cuGetExportTable(table: *mut *const c_void, uuid: *const [u8; 16]) -> CUresult {
    ffi_result(|| {
        if table.is_null() || uuid.is_null() {
            return Err(err::INVALID_VALUE);
        }
        crate::hooks::install_hooks();
        // SAFETY: non-null; a CUuuid is 16 bytes.
        let id = unsafe { *uuid };
        let t = export_tables::get_export_table(&id).ok_or_else(|| {
            if crate::log_level() >= crate::LogLevel::Trace {
                let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
                eprintln!("fairgpu guest-lib: cuGetExportTable({hex}): no such table");
            }
            err::INVALID_VALUE
        })?;
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(table, t) }
    })
}
