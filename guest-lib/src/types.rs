//! The C types of the CUDA driver API, as the ABI sees them.

use std::ffi::c_void;

/// `CUresult`.
pub type CUresult = u32;
/// `CUdevice`.
pub type CUdevice = i32;
/// `CUdeviceptr`.
pub type CUdeviceptr = u64;
/// `CUcontext` (points at a guest-side context object).
pub type CUcontext = *mut c_void;
/// `CUmodule` (points at a guest-side module object).
pub type CUmodule = *mut c_void;
/// `CUfunction` (points at a guest-side function object).
pub type CUfunction = *mut c_void;
/// `CUlibrary` (points at a guest-side library object).
pub type CUlibrary = *mut c_void;
/// `CUkernel` (the same object as the function it names).
pub type CUkernel = *mut c_void;
/// `CUstream` (the host's opaque handle, carried as a pointer-sized value).
pub type CUstream = *mut c_void;
/// `CUevent` (the host's opaque handle, carried as a pointer-sized value).
pub type CUevent = *mut c_void;

/// CUresult values used by the guest library.
pub mod err {
    use super::CUresult;
    /// CUDA_SUCCESS.
    pub const SUCCESS: CUresult = 0;
    /// CUDA_ERROR_INVALID_VALUE.
    pub const INVALID_VALUE: CUresult = 1;
    /// CUDA_ERROR_OUT_OF_MEMORY.
    pub const OUT_OF_MEMORY: CUresult = 2;
    /// CUDA_ERROR_NOT_INITIALIZED.
    pub const NOT_INITIALIZED: CUresult = 3;
    /// CUDA_ERROR_NO_DEVICE.
    pub const NO_DEVICE: CUresult = 100;
    /// CUDA_ERROR_INVALID_DEVICE.
    pub const INVALID_DEVICE: CUresult = 101;
    /// CUDA_ERROR_INVALID_IMAGE.
    pub const INVALID_IMAGE: CUresult = 200;
    /// CUDA_ERROR_INVALID_CONTEXT.
    pub const INVALID_CONTEXT: CUresult = 201;
    /// CUDA_ERROR_CONTEXT_IS_DESTROYED.
    pub const CONTEXT_IS_DESTROYED: CUresult = 709;
    /// CUDA_ERROR_FILE_NOT_FOUND.
    pub const FILE_NOT_FOUND: CUresult = 301;
    /// CUDA_ERROR_INVALID_HANDLE.
    pub const INVALID_HANDLE: CUresult = 400;
    /// CUDA_ERROR_NOT_FOUND.
    pub const NOT_FOUND: CUresult = 500;
    /// CUDA_ERROR_NOT_SUPPORTED.
    pub const NOT_SUPPORTED: CUresult = 801;
    /// CUDA_ERROR_UNKNOWN.
    pub const UNKNOWN: CUresult = 999;
}
