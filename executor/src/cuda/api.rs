//! The driver entry points [`super::CudaExecutor`] calls, as a table of
//! function pointers resolved from libcuda through cudarc's loader.
//!
//! Why a table instead of calling `cudarc::driver::sys::cu*` directly:
//! - cudarc resolves each symbol on its first call and panics if it is
//!   missing. Here every symbol is resolved once, at construction, and a
//!   missing one is an error naming it.
//! - cudarc declares `CUresult` and `CUdevice_attribute` as Rust enums. A
//!   driver newer than the bindings can return a code the enum lacks, and
//!   attribute numbers have gaps; either would be an invalid enum value
//!   (undefined behaviour). The table declares both as plain integers.
//! - The table is data, so the unit tests drive the executor against a fake
//!   driver (`fake.rs`) on machines without a GPU.
//!
//! The prototypes are those of `cuda.h` (CUDA 12.x), as cudarc's bindings
//! spell them, with `CUresult` as `c_uint` and `CUdevice_attribute` as
//! `c_int` (both are 32-bit C enums).

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ushort, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys::{
    CUarray, CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream,
};

/// A `CUresult` as the integer the driver returns.
pub(crate) type CuResult = c_uint;

/// CUDA_SUCCESS.
pub(crate) const CUDA_SUCCESS: CuResult = 0;
/// CUDA_ERROR_INVALID_VALUE: also how `cuFuncGetParamInfo` says "no
/// parameter with this index".
pub(crate) const CUDA_ERROR_INVALID_VALUE: CuResult = 1;
/// CUDA_ERROR_OUT_OF_MEMORY.
pub(crate) const CUDA_ERROR_OUT_OF_MEMORY: CuResult = 2;
/// CUDA_ERROR_NOT_FOUND: `cuModuleGetFunction` with an unknown name.
pub(crate) const CUDA_ERROR_NOT_FOUND: CuResult = 500;
/// CUDA_ERROR_NOT_READY: a query of unfinished work.
pub(crate) const CUDA_ERROR_NOT_READY: CuResult = 600;

/// `CUlaunchAttribute`: an id, padding to 8 bytes, and the 64-byte value
/// union (read as 32-bit words: the cluster dimension's x, y, z, the
/// cooperative flag's int).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LaunchAttribute {
    pub id: c_uint,
    pub pad: c_uint,
    pub value: [c_uint; 16],
}

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
pub(crate) const LAUNCH_ATTRIBUTE_COOPERATIVE: c_uint = 2;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
pub(crate) const LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: c_uint = 4;

/// `CUlaunchConfig`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaunchConfigC {
    pub grid: [c_uint; 3],
    pub block: [c_uint; 3],
    pub shared_mem: c_uint,
    pub stream: CUstream,
    pub attrs: *mut LaunchAttribute,
    pub num_attrs: c_uint,
}

/// `CUmemAllocationProp`: type (1: pinned), requested handle types (0),
/// location (type 1: a device, and its ordinal), Windows metadata, flags.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemAllocationProp {
    pub alloc_type: c_uint,
    pub handle_types: c_uint,
    pub location_type: c_uint,
    pub location_id: c_int,
    pub win32_metadata: *mut c_void,
    pub flags: [c_uchar; 8],
}

/// `CUmemAccessDesc`: a location (type 1: a device, and its ordinal) and
/// the access it gets (`CUmemAccess_flags`: 0 none, 1 read, 3 read-write).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemAccessDesc {
    pub location_type: c_uint,
    pub location_id: c_int,
    pub flags: c_uint,
}

/// `CUDA_ARRAY3D_DESCRIPTOR`, with the format as a plain integer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Array3DDescriptor {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: c_uint,
    pub num_channels: c_uint,
    pub flags: c_uint,
}

/// `CUDA_MEMCPY3D`, with the memory types as plain integers.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Memcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: CUarray,
    pub reserved0: *mut c_void,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: CUarray,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

/// `CUDA_RESOURCE_DESC`: the type, then its 128-byte union as words (on a
/// little-endian host a `u32` pair `(a, b)` is the word `a | b << 32`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ResourceDesc {
    pub res_type: c_uint,
    pub res: [u64; 16],
    pub flags: c_uint,
}

/// `CUDA_TEXTURE_DESC`, with its enums as plain integers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TextureDesc {
    pub address_mode: [c_uint; 3],
    pub filter_mode: c_uint,
    pub flags: c_uint,
    pub max_anisotropy: c_uint,
    pub mipmap_filter_mode: c_uint,
    pub mipmap_level_bias: f32,
    pub min_mipmap_level_clamp: f32,
    pub max_mipmap_level_clamp: f32,
    pub border_color: [f32; 4],
    pub reserved: [c_int; 12],
}

// The driver reads these through pointers: same sizes as cuda.h's.
const _: () = {
    use cudarc::driver::sys as s;
    use std::mem::size_of;
    assert!(size_of::<Array3DDescriptor>() == size_of::<s::CUDA_ARRAY3D_DESCRIPTOR_st>());
    assert!(size_of::<Memcpy3D>() == size_of::<s::CUDA_MEMCPY3D_st>());
    assert!(size_of::<ResourceDesc>() == size_of::<s::CUDA_RESOURCE_DESC_st>());
    assert!(size_of::<TextureDesc>() == size_of::<s::CUDA_TEXTURE_DESC_st>());
    assert!(size_of::<LaunchAttribute>() == size_of::<s::CUlaunchAttribute_st>());
    assert!(size_of::<LaunchConfigC>() == size_of::<s::CUlaunchConfig_st>());
    assert!(cfg!(target_endian = "little"));
};

/// A `CUuuid` out-parameter: 16 bytes.
pub(crate) type UuidFn = unsafe extern "C" fn(*mut [u8; 16], CUdevice) -> CuResult;

macro_rules! driver_api {
    ($( $name:ident ( $($arg:ty),* ); )*) => {
        /// libcuda entry points, one field per function, named as libcuda
        /// exports them.
        #[allow(non_snake_case)]
        #[derive(Clone, Copy)]
        pub(crate) struct Api {
            $( pub(crate) $name: unsafe extern "C" fn($($arg),*) -> CuResult, )*
            /// `cuDeviceGetUuid_v2`, or `cuDeviceGetUuid` on drivers
            /// without it; `None` if neither exists.
            pub(crate) device_get_uuid: Option<UuidFn>,
        }

        /// Loads libcuda and resolves every entry point, or says what is
        /// missing. Never panics.
        #[allow(non_snake_case)]
        fn load_uncached() -> Result<Api, String> {
            // SAFETY: `is_culib_present` dlopens each candidate library name
            // and closes it again; libcuda's initialisers have no
            // preconditions on the caller.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err(
                    "libcuda.so not found (no NVIDIA driver on this host, or it is not on the loader path)"
                        .to_string(),
                );
            }
            let lib = std::panic::catch_unwind(|| {
                // SAFETY: `culib` has no preconditions: it loads libcuda once
                // into a static and panics if it cannot, which
                // `catch_unwind` turns into an error here.
                unsafe { cudarc::driver::sys::culib() }
            })
            .map_err(|_| "libcuda.so could not be loaded".to_string())?;
            let mut missing: Vec<&str> = Vec::new();
            $(
                // SAFETY: `$name` is the libcuda function whose C prototype
                // is the one declared for the field (cuda.h); the library
                // stays loaded for the life of the process (cudarc keeps it
                // in a static), so the pointer never dangles.
                let $name = match unsafe {
                    lib.get::<unsafe extern "C" fn($($arg),*) -> CuResult>(
                        stringify!($name).as_bytes(),
                    )
                } {
                    Ok(sym) => Some(*sym),
                    Err(_) => {
                        missing.push(stringify!($name));
                        None
                    }
                };
            )*
            let mut device_get_uuid = None;
            for name in ["cuDeviceGetUuid_v2", "cuDeviceGetUuid"] {
                // SAFETY: both functions have the prototype
                // `CUresult (CUuuid *uuid, CUdevice dev)`, and `CUuuid` is 16
                // bytes; the library stays loaded (see above).
                if let Ok(sym) = unsafe { lib.get::<UuidFn>(name.as_bytes()) } {
                    device_get_uuid = Some(*sym);
                    break;
                }
            }
            match ($($name,)*) {
                ($(Some($name),)*) => Ok(Api { $($name,)* device_get_uuid }),
                _ => Err(format!(
                    "libcuda lacks {} (an NVIDIA driver for CUDA 12.4 or newer is required)",
                    missing.join(", ")
                )),
            }
        }
    };
}

impl Api {
    /// The process-wide table, loaded on first use.
    pub(crate) fn get() -> Result<&'static Api, String> {
        static API: OnceLock<Result<Api, String>> = OnceLock::new();
        API.get_or_init(load_uncached)
            .as_ref()
            .map_err(Clone::clone)
    }
}

driver_api! {
    cuInit(c_uint);
    cuDriverGetVersion(*mut c_int);
    cuDeviceGet(*mut CUdevice, c_int);
    cuDeviceGetName(*mut c_char, c_int, CUdevice);
    cuDeviceTotalMem_v2(*mut usize, CUdevice);
    cuDeviceGetAttribute(*mut c_int, c_int, CUdevice);
    cuDevicePrimaryCtxRetain(*mut CUcontext, CUdevice);
    cuDevicePrimaryCtxRelease_v2(CUdevice);
    cuCtxCreate_v2(*mut CUcontext, c_uint, CUdevice);
    cuCtxDestroy_v2(CUcontext);
    cuCtxPopCurrent_v2(*mut CUcontext);
    cuCtxSetCurrent(CUcontext);
    cuCtxSynchronize();
    cuCtxSetLimit(c_int, usize);
    cuCtxGetStreamPriorityRange(*mut c_int, *mut c_int);
    cuMemGetInfo_v2(*mut usize, *mut usize);
    cuMemAlloc_v2(*mut CUdeviceptr, usize);
    cuMemFree_v2(CUdeviceptr);
    cuMemAddressReserve(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64);
    cuMemAddressFree(CUdeviceptr, usize);
    cuMemCreate(*mut u64, usize, *const MemAllocationProp, u64);
    cuMemRelease(u64);
    cuMemMap(CUdeviceptr, usize, usize, u64, u64);
    cuMemUnmap(CUdeviceptr, usize);
    cuMemSetAccess(CUdeviceptr, usize, *const MemAccessDesc, usize);
    cuMemcpyHtoD_v2(CUdeviceptr, *const c_void, usize);
    cuMemcpyHtoDAsync_v2(CUdeviceptr, *const c_void, usize, CUstream);
    cuMemcpyDtoH_v2(*mut c_void, CUdeviceptr, usize);
    cuMemcpyDtoHAsync_v2(*mut c_void, CUdeviceptr, usize, CUstream);
    cuMemcpyDtoD_v2(CUdeviceptr, CUdeviceptr, usize);
    cuMemcpyDtoDAsync_v2(CUdeviceptr, CUdeviceptr, usize, CUstream);
    cuMemsetD8_v2(CUdeviceptr, c_uchar, usize);
    cuMemsetD16_v2(CUdeviceptr, c_ushort, usize);
    cuMemsetD32_v2(CUdeviceptr, c_uint, usize);
    cuMemsetD8Async(CUdeviceptr, c_uchar, usize, CUstream);
    cuMemsetD16Async(CUdeviceptr, c_ushort, usize, CUstream);
    cuMemsetD32Async(CUdeviceptr, c_uint, usize, CUstream);
    cuModuleLoadData(*mut CUmodule, *const c_void);
    cuModuleUnload(CUmodule);
    cuModuleGetFunction(*mut CUfunction, CUmodule, *const c_char);
    cuModuleGetGlobal_v2(*mut CUdeviceptr, *mut usize, CUmodule, *const c_char);
    cuPointerGetAttribute(*mut c_void, c_int, CUdeviceptr);
    cuFuncGetParamInfo(CUfunction, usize, *mut usize, *mut usize);
    cuFuncGetAttribute(*mut c_int, c_int, CUfunction);
    cuFuncSetAttribute(CUfunction, c_int, c_int);
    cuLaunchKernel(
        CUfunction,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        c_uint,
        CUstream,
        *mut *mut c_void,
        *mut *mut c_void
    );
    cuLaunchKernelEx(
        *const LaunchConfigC,
        CUfunction,
        *mut *mut c_void,
        *mut *mut c_void
    );
    cuStreamCreate(*mut CUstream, c_uint);
    cuStreamCreateWithPriority(*mut CUstream, c_uint, c_int);
    cuStreamDestroy_v2(CUstream);
    cuStreamSynchronize(CUstream);
    cuStreamQuery(CUstream);
    cuStreamWaitEvent(CUstream, CUevent, c_uint);
    cuEventCreate(*mut CUevent, c_uint);
    cuEventDestroy_v2(CUevent);
    cuEventRecord(CUevent, CUstream);
    cuEventQuery(CUevent);
    cuEventSynchronize(CUevent);
    cuEventElapsedTime(*mut f32, CUevent, CUevent);
    cuArray3DCreate_v2(*mut CUarray, *const Array3DDescriptor);
    cuArrayDestroy(CUarray);
    cuMemcpy3D_v2(*const Memcpy3D);
    cuMemcpy3DAsync_v2(*const Memcpy3D, CUstream);
    cuTexObjectCreate(*mut u64, *const ResourceDesc, *const TextureDesc, *const c_void);
    cuTexObjectDestroy(u64);
    cuSurfObjectCreate(*mut u64, *const ResourceDesc);
    cuSurfObjectDestroy(u64);
}
