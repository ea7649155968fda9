//! The platform and the device: one of each, static, answered here or from
//! the host's device (asked once per parameter and cached).
//!
//! The three exported symbols of the library live here.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use fairgpu_protocol::opencl::MAX_INFO_BYTES;
use fairgpu_protocol::Opcode;

use crate::dispatch::IcdObject;
use crate::types::*;
use crate::{conn, guard, raw};

/// The platform object.
static PLATFORM: IcdObject = IcdObject::new();
/// The device object.
static DEVICE: IcdObject = IcdObject::new();

/// The platform's handle.
pub fn platform() -> Handle {
    &PLATFORM as *const IcdObject as Handle
}

/// The device's handle.
pub fn device() -> Handle {
    &DEVICE as *const IcdObject as Handle
}

/// `CL_INVALID_DEVICE` unless `d` is this library's device.
pub fn check_device(d: Handle) -> Result<(), i32> {
    if d == device() {
        Ok(())
    } else {
        Err(CL_INVALID_DEVICE)
    }
}

/// Platform and device version string.
pub const VERSION: &str = "OpenCL 1.2 fairgpu";
/// `CL_DEVICE_OPENCL_C_VERSION`.
pub const OPENCL_C_VERSION: &str = "OpenCL C 1.2 ";

/// A string value as OpenCL returns it: NUL-terminated.
pub fn cstring(s: &str) -> Vec<u8> {
    let mut v = s.as_bytes().to_vec();
    v.push(0);
    v
}

/// Bytes of a host string value without its terminating NUL(s).
pub fn host_str(v: &[u8]) -> &[u8] {
    let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
    &v[..end]
}

// ---------------------------------------------------------------------------
// Exported symbols.

/// `clIcdGetPlatformIDsKHR`: the loader's way in. Connects to the host on
/// first use; without a host the library has no platform
/// (CL_PLATFORM_NOT_FOUND_KHR), and the loader skips it.
#[no_mangle]
pub extern "C" fn clIcdGetPlatformIDsKHR(
    num_entries: u32,
    platforms: *mut Handle,
    num_platforms: *mut u32,
) -> i32 {
    guard("clIcdGetPlatformIDsKHR", || {
        platform_ids(num_entries, platforms, num_platforms)
    })
}

/// `clGetExtensionFunctionAddress`: only `clIcdGetPlatformIDsKHR`.
#[no_mangle]
pub extern "C" fn clGetExtensionFunctionAddress(name: *const c_char) -> *mut c_void {
    extension_address(name)
}

/// `clGetPlatformInfo`, exported for loaders that look it up by name.
#[no_mangle]
pub extern "C" fn clGetPlatformInfo(
    platform: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    platform_info(platform, param, size, value, size_ret)
}

fn extension_address(name: *const c_char) -> *mut c_void {
    std::panic::catch_unwind(|| {
        // SAFETY: function_name is null or the caller's NUL-terminated string.
        match unsafe { raw::cstr(name) } {
            Some(b"clIcdGetPlatformIDsKHR") => icd_get_platform_ids as *mut c_void,
            _ => std::ptr::null_mut(),
        }
    })
    .unwrap_or(std::ptr::null_mut())
}

/// What `clGetExtensionFunctionAddress("clIcdGetPlatformIDsKHR")` returns:
/// this library's own function, whatever the symbol resolves to.
extern "C" fn icd_get_platform_ids(
    num_entries: u32,
    platforms: *mut Handle,
    num_platforms: *mut u32,
) -> i32 {
    guard("clIcdGetPlatformIDsKHR", || {
        platform_ids(num_entries, platforms, num_platforms)
    })
}

fn platform_ids(
    num_entries: u32,
    platforms: *mut Handle,
    num_platforms: *mut u32,
) -> Result<(), i32> {
    if (num_entries == 0 && !platforms.is_null())
        || (platforms.is_null() && num_platforms.is_null())
    {
        return Err(CL_INVALID_VALUE);
    }
    if !conn::init() {
        // SAFETY: num_platforms is null or the caller's writable cl_uint.
        unsafe { raw::set(num_platforms, 0) };
        return Err(CL_PLATFORM_NOT_FOUND_KHR);
    }
    // SAFETY: platforms is null or holds num_entries >= 1 slots.
    unsafe { raw::set(platforms, platform()) };
    // SAFETY: num_platforms is null or writable.
    unsafe { raw::set(num_platforms, 1) };
    Ok(())
}

// ---------------------------------------------------------------------------
// Dispatch-table entry points.

pub(crate) extern "C" fn clGetPlatformIDs(
    num_entries: u32,
    platforms: *mut Handle,
    num_platforms: *mut u32,
) -> i32 {
    guard("clGetPlatformIDs", || {
        platform_ids(num_entries, platforms, num_platforms)
    })
}

/// The `clGetPlatformInfo` slot (not the exported symbol, which another
/// library loaded before this one could interpose).
pub(crate) extern "C" fn get_platform_info(
    platform: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    platform_info(platform, param, size, value, size_ret)
}

fn platform_info(
    platform: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetPlatformInfo", || {
        if !platform.is_null() && platform != self::platform() {
            return Err(CL_INVALID_PLATFORM);
        }
        let v = match param {
            CL_PLATFORM_PROFILE => cstring("FULL_PROFILE"),
            CL_PLATFORM_VERSION => cstring(VERSION),
            CL_PLATFORM_NAME | CL_PLATFORM_VENDOR | CL_PLATFORM_ICD_SUFFIX_KHR => {
                cstring("fairgpu")
            }
            CL_PLATFORM_EXTENSIONS => cstring("cl_khr_icd"),
            CL_PLATFORM_HOST_TIMER_RESOLUTION => 0u64.to_ne_bytes().to_vec(),
            CL_PLATFORM_NUMERIC_VERSION => make_version(1, 2, 0).to_ne_bytes().to_vec(),
            CL_PLATFORM_EXTENSIONS_WITH_VERSION => {
                name_version(make_version(1, 0, 0), "cl_khr_icd")
            }
            _ => return Err(CL_INVALID_VALUE),
        };
        // SAFETY: the clGetPlatformInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

/// One `cl_name_version` (version, then a 64-byte NUL-padded name).
fn name_version(version: u32, name: &str) -> Vec<u8> {
    let mut v = version.to_ne_bytes().to_vec();
    let mut n = [0u8; 64];
    let b = name.as_bytes();
    let len = b.len().min(63);
    n[..len].copy_from_slice(&b[..len]);
    v.extend_from_slice(&n);
    v
}

/// The `clGetExtensionFunctionAddress` slot.
pub(crate) extern "C" fn get_extension_function_address(name: *const c_char) -> *mut c_void {
    extension_address(name)
}

pub(crate) extern "C" fn clGetExtensionFunctionAddressForPlatform(
    platform: Handle,
    name: *const c_char,
) -> *mut c_void {
    if platform != self::platform() {
        return std::ptr::null_mut();
    }
    extension_address(name)
}

pub(crate) extern "C" fn clUnloadCompiler() -> i32 {
    CL_SUCCESS
}

pub(crate) extern "C" fn clUnloadPlatformCompiler(platform: Handle) -> i32 {
    guard("clUnloadPlatformCompiler", || {
        if platform != self::platform() {
            return Err(CL_INVALID_PLATFORM);
        }
        Ok(())
    })
}

pub(crate) extern "C" fn clGetDeviceIDs(
    platform: Handle,
    device_type: u64,
    num_entries: u32,
    devices: *mut Handle,
    num_devices: *mut u32,
) -> i32 {
    guard("clGetDeviceIDs", || {
        if !platform.is_null() && platform != self::platform() {
            return Err(CL_INVALID_PLATFORM);
        }
        if (num_entries == 0 && !devices.is_null()) || (devices.is_null() && num_devices.is_null())
        {
            return Err(CL_INVALID_VALUE);
        }
        let n = u32::from(type_matches(device_type)?);
        // SAFETY: num_devices is null or the caller's writable cl_uint.
        unsafe { raw::set(num_devices, n) };
        if n == 0 {
            return Err(CL_DEVICE_NOT_FOUND);
        }
        // SAFETY: devices is null or holds num_entries >= 1 slots.
        unsafe { raw::set(devices, device()) };
        Ok(())
    })
}

/// Whether the device is of `device_type` (CL_INVALID_DEVICE_TYPE for a
/// mask with unknown bits).
pub fn type_matches(device_type: u64) -> Result<bool, i32> {
    const KNOWN: u64 = CL_DEVICE_TYPE_DEFAULT
        | CL_DEVICE_TYPE_CPU
        | CL_DEVICE_TYPE_GPU
        | CL_DEVICE_TYPE_ACCELERATOR
        | CL_DEVICE_TYPE_CUSTOM;
    if device_type == CL_DEVICE_TYPE_ALL || device_type & CL_DEVICE_TYPE_DEFAULT != 0 {
        return Ok(true);
    }
    if device_type == 0 || device_type & !KNOWN != 0 {
        return Err(CL_INVALID_DEVICE_TYPE);
    }
    Ok(device_type & host_device_type()? != 0)
}

fn host_device_type() -> Result<u64, i32> {
    let v = host_device_info(CL_DEVICE_TYPE)?;
    let b: [u8; 8] = v
        .get(..8)
        .and_then(|s| s.try_into().ok())
        .ok_or(CL_OUT_OF_RESOURCES)?;
    Ok(u64::from_ne_bytes(b))
}

/// Host device values, by parameter.
static HOST_INFO: Mutex<BTreeMap<u32, Vec<u8>>> = Mutex::new(BTreeMap::new());

/// The host device's value of `param`, asked once.
pub fn host_device_info(param: u32) -> Result<Vec<u8>, i32> {
    if let Some(v) = HOST_INFO
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&param)
    {
        return Ok(v.clone());
    }
    let v = host_info(Opcode::ClGetDeviceInfo, &[u64::from(param)])?;
    HOST_INFO
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(param, v.clone());
    Ok(v)
}

/// An info value from the host: `op` answers with the bytes in the arena
/// and their full size in `vals[0]`.
pub fn host_info(op: Opcode, a: &[u64]) -> Result<Vec<u8>, i32> {
    conn::with(|c| {
        let mut buf = vec![0u8; MAX_INFO_BYTES.min(c.max_slice())];
        let r = c.call(op, a, &[], &mut buf)?;
        let len = (r.vals[0] as usize).min(r.data_len as usize);
        buf.truncate(len);
        Ok(buf)
    })
}

/// Whether a host device extension is one this library passes on: those
/// of the kernel language, which work through plain buffers and kernels.
pub fn kernel_language_extension(name: &str) -> bool {
    matches!(
        name,
        "cl_khr_fp64" | "cl_khr_fp16" | "cl_khr_byte_addressable_store"
    ) || name.starts_with("cl_khr_int64_")
        || name.starts_with("cl_khr_global_int32_")
        || name.starts_with("cl_khr_local_int32_")
        || (name.starts_with("cl_khr_") && name.ends_with("_atomics"))
}

/// `CL_DEVICE_EXTENSIONS` from the host's list: its kernel-language
/// extensions, then `cl_khr_icd`.
pub fn device_extensions(host: &str) -> String {
    let mut out: Vec<&str> = host
        .split_ascii_whitespace()
        .filter(|e| kernel_language_extension(e))
        .collect();
    out.push("cl_khr_icd");
    out.join(" ")
}

/// `CL_DEVICE_EXTENSIONS_WITH_VERSION`: the host's entries for the
/// extensions [`device_extensions`] keeps, then `cl_khr_icd`.
fn extensions_with_version(host: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for e in host.chunks_exact(68) {
        if kernel_language_extension(&String::from_utf8_lossy(host_str(&e[4..]))) {
            out.extend_from_slice(e);
        }
    }
    out.extend(name_version(make_version(1, 0, 0), "cl_khr_icd"));
    out
}

/// The device's value of `param`.
pub fn device_info(param: u32) -> Result<Vec<u8>, i32> {
    let u32v = |v: u32| v.to_ne_bytes().to_vec();
    let u64v = |v: u64| v.to_ne_bytes().to_vec();
    let ptr = |h: Handle| (h as usize).to_ne_bytes().to_vec();
    Ok(match param {
        CL_DEVICE_PLATFORM => ptr(platform()),
        CL_DEVICE_VERSION => cstring(VERSION),
        CL_DEVICE_OPENCL_C_VERSION => cstring(OPENCL_C_VERSION),
        CL_DEVICE_HOST_UNIFIED_MEMORY | CL_DEVICE_LINKER_AVAILABLE => u32v(CL_FALSE),
        CL_DEVICE_QUEUE_PROPERTIES => {
            // Profiling always (the host's queues are profiled), and
            // out-of-order execution where the host device has it.
            let host = host_device_info(param)?;
            let bits = host
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map_or(0, u64::from_ne_bytes);
            u64v(CL_QUEUE_PROFILING_ENABLE | (bits & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE))
        }
        CL_DEVICE_EXTENSIONS => {
            let host = host_device_info(param)?;
            cstring(&device_extensions(&String::from_utf8_lossy(host_str(
                &host,
            ))))
        }
        CL_DEVICE_EXTENSIONS_WITH_VERSION => extensions_with_version(&host_device_info(param)?),
        CL_DEVICE_PARENT_DEVICE => ptr(std::ptr::null_mut()),
        CL_DEVICE_REFERENCE_COUNT => u32v(1),
        CL_DEVICE_PARTITION_MAX_SUB_DEVICES | CL_DEVICE_MAX_ON_DEVICE_QUEUES => u32v(0),
        CL_DEVICE_PARTITION_PROPERTIES => ptr(std::ptr::null_mut()),
        CL_DEVICE_PARTITION_AFFINITY_DOMAIN
        | CL_DEVICE_SVM_CAPABILITIES
        | CL_DEVICE_QUEUE_ON_DEVICE_PROPERTIES => u64v(0),
        CL_DEVICE_PARTITION_TYPE
        | CL_DEVICE_ILS_WITH_VERSION
        | CL_DEVICE_BUILT_IN_KERNELS_WITH_VERSION
        | CL_DEVICE_OPENCL_C_FEATURES => Vec::new(),
        CL_DEVICE_BUILT_IN_KERNELS | CL_DEVICE_IL_VERSION => cstring(""),
        CL_DEVICE_NUMERIC_VERSION => u32v(make_version(1, 2, 0)),
        CL_DEVICE_OPENCL_C_ALL_VERSIONS => [(1, 0), (1, 1), (1, 2)]
            .iter()
            .flat_map(|&(a, b)| name_version(make_version(a, b, 0), "OpenCL C"))
            .collect(),
        _ => host_device_info(param)?,
    })
}

pub(crate) extern "C" fn clGetDeviceInfo(
    device: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetDeviceInfo", || {
        check_device(device)?;
        let v = device_info(param)?;
        // SAFETY: the clGetDeviceInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

pub(crate) extern "C" fn clCreateSubDevices(
    device: Handle,
    _properties: *const isize,
    _num_entries: u32,
    _devices: *mut Handle,
    _num_devices: *mut u32,
) -> i32 {
    guard("clCreateSubDevices", || {
        check_device(device)?;
        Err(CL_DEVICE_PARTITION_FAILED)
    })
}

pub(crate) extern "C" fn clRetainDevice(device: Handle) -> i32 {
    guard("clRetainDevice", || check_device(device))
}

pub(crate) extern "C" fn clReleaseDevice(device: Handle) -> i32 {
    guard("clReleaseDevice", || check_device(device))
}

pub(crate) use clReleaseDevice as clReleaseDeviceEXT;
pub(crate) use clRetainDevice as clRetainDeviceEXT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kernel_language_extensions_pass() {
        let host = "cl_khr_byte_addressable_store cl_khr_global_int32_base_atomics \
                    cl_khr_gl_sharing cl_khr_fp64 cl_khr_int64_base_atomics cl_khr_3d_image_writes \
                    cl_khr_local_int32_extended_atomics cl_khr_icd cl_khr_fp16 cl_khr_spir \
                    cl_khr_subgroups cl_ext_float_atomics cl_khr_int64_extended_atomics";
        assert_eq!(
            device_extensions(host),
            "cl_khr_byte_addressable_store cl_khr_global_int32_base_atomics cl_khr_fp64 \
             cl_khr_int64_base_atomics cl_khr_local_int32_extended_atomics cl_khr_fp16 \
             cl_khr_int64_extended_atomics cl_khr_icd"
        );
        assert_eq!(device_extensions(""), "cl_khr_icd");
    }

    #[test]
    fn name_versions_are_68_bytes() {
        let v = name_version(make_version(1, 0, 0), "cl_khr_icd");
        assert_eq!(v.len(), 68);
        assert_eq!(host_str(&v[4..]), b"cl_khr_icd");
        let mut host = name_version(1, "cl_khr_fp64");
        host.extend(name_version(1, "cl_khr_gl_sharing"));
        let kept = extensions_with_version(&host);
        assert_eq!(kept.len(), 2 * 68);
        assert_eq!(host_str(&kept[68 + 4..]), b"cl_khr_icd");
    }

    #[test]
    fn strings_are_nul_terminated() {
        assert_eq!(cstring("ab"), b"ab\0");
        assert_eq!(host_str(b"ab\0\0"), b"ab");
        assert_eq!(host_str(b"ab"), b"ab");
    }
}
