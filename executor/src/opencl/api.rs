//! The OpenCL entry points [`super::ClHost`] calls, resolved once from the
//! host's ICD loader (`libOpenCL.so.1`: ocl-icd or Khronos'), which then
//! dispatches to the platform's driver (NVIDIA's on a GPU host, PoCL on a
//! machine without one).
//!
//! Why a loader of our own instead of a binding crate: the worker must
//! start on hosts without any OpenCL (the CUDA path and SimGpu need none),
//! so the library is opened at run time, on the first OpenCL request, and
//! a missing library or symbol is an error naming it. The maintained
//! bindings (`cl3`/`opencl3`) link `libOpenCL` at build time by default and
//! wrap every call in their own object model; the worker needs about fifty plain
//! entry points behind its own validation, so a table is smaller than the
//! adapter would be. The prototypes are those of `CL/cl.h` (OpenCL 1.2).

use std::ffi::{c_char, c_void, CStr};

/// `cl_int`.
pub type ClInt = i32;
/// `cl_uint`.
pub type ClUint = u32;
/// Any OpenCL object (`cl_platform_id`, `cl_context`, `cl_mem`, …).
pub type Obj = *mut c_void;

/// CL_SUCCESS.
pub const CL_SUCCESS: ClInt = 0;
/// CL_DEVICE_TYPE_ALL.
pub const CL_DEVICE_TYPE_ALL: u64 = 0xFFFF_FFFF;
/// CL_PLATFORM_NAME.
pub const CL_PLATFORM_NAME: ClUint = 0x0902;
/// CL_PROGRAM_BUILD_LOG.
pub const CL_PROGRAM_BUILD_LOG: ClUint = 0x1183;
/// CL_PROGRAM_BINARY_SIZES.
pub const CL_PROGRAM_BINARY_SIZES: ClUint = 0x1165;
/// CL_PROGRAM_BINARIES.
pub const CL_PROGRAM_BINARIES: ClUint = 0x1166;
/// CL_PROGRAM_KERNEL_NAMES.
pub const CL_PROGRAM_KERNEL_NAMES: ClUint = 0x1168;
/// CL_KERNEL_NUM_ARGS.
pub const CL_KERNEL_NUM_ARGS: ClUint = 0x1191;
/// CL_EVENT_COMMAND_EXECUTION_STATUS.
pub const CL_EVENT_COMMAND_EXECUTION_STATUS: ClUint = 0x11D3;
/// CL_PROFILING_COMMAND_QUEUED (SUBMIT, START, END follow).
pub const CL_PROFILING_COMMAND_QUEUED: ClUint = 0x1280;
/// `clGetEventProfilingInfo` before the command is CL_COMPLETE, or on a
/// queue without profiling.
pub const CL_PROFILING_INFO_NOT_AVAILABLE: ClInt = -7;
/// The execution status of a finished command (queued, submitted and
/// running are 3, 2, 1; failures negative).
pub const CL_COMPLETE: ClInt = 0;
/// CL_QUEUE_PROFILING_ENABLE.
pub const CL_QUEUE_PROFILING_ENABLE: u64 = 1 << 1;
/// CL_BUFFER_CREATE_TYPE_REGION.
pub const CL_BUFFER_CREATE_TYPE_REGION: ClUint = 0x1220;
/// CL_TRUE.
pub const CL_TRUE: ClUint = 1;

pub type InfoFn = unsafe extern "C" fn(Obj, ClUint, usize, *mut c_void, *mut usize) -> ClInt;
type Info2Fn = unsafe extern "C" fn(Obj, Obj, ClUint, usize, *mut c_void, *mut usize) -> ClInt;
type ObjFn = unsafe extern "C" fn(Obj) -> ClInt;

/// The resolved entry points.
#[allow(missing_docs)]
pub struct Api {
    pub get_platform_ids: unsafe extern "C" fn(ClUint, *mut Obj, *mut ClUint) -> ClInt,
    pub get_platform_info: InfoFn,
    pub get_device_ids: unsafe extern "C" fn(Obj, u64, ClUint, *mut Obj, *mut ClUint) -> ClInt,
    pub get_device_info: InfoFn,
    pub create_context: unsafe extern "C" fn(
        *const isize,
        ClUint,
        *const Obj,
        *const c_void,
        *mut c_void,
        *mut ClInt,
    ) -> Obj,
    pub release_context: ObjFn,
    pub create_command_queue: unsafe extern "C" fn(Obj, Obj, u64, *mut ClInt) -> Obj,
    pub release_command_queue: ObjFn,
    pub finish: ObjFn,
    pub flush: ObjFn,
    pub create_buffer: unsafe extern "C" fn(Obj, u64, usize, *mut c_void, *mut ClInt) -> Obj,
    pub create_sub_buffer: unsafe extern "C" fn(Obj, u64, ClUint, *const c_void, *mut ClInt) -> Obj,
    pub release_mem_object: ObjFn,
    pub enqueue_write_buffer: unsafe extern "C" fn(
        Obj,
        Obj,
        ClUint,
        usize,
        usize,
        *const c_void,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub enqueue_read_buffer: unsafe extern "C" fn(
        Obj,
        Obj,
        ClUint,
        usize,
        usize,
        *mut c_void,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub enqueue_copy_buffer: unsafe extern "C" fn(
        Obj,
        Obj,
        Obj,
        usize,
        usize,
        usize,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub enqueue_fill_buffer: unsafe extern "C" fn(
        Obj,
        Obj,
        *const c_void,
        usize,
        usize,
        usize,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub create_program_with_source:
        unsafe extern "C" fn(Obj, ClUint, *const *const c_char, *const usize, *mut ClInt) -> Obj,
    pub create_program_with_binary: unsafe extern "C" fn(
        Obj,
        ClUint,
        *const Obj,
        *const usize,
        *const *const u8,
        *mut ClInt,
        *mut ClInt,
    ) -> Obj,
    pub build_program: unsafe extern "C" fn(
        Obj,
        ClUint,
        *const Obj,
        *const c_char,
        *const c_void,
        *mut c_void,
    ) -> ClInt,
    pub get_program_build_info: Info2Fn,
    pub get_program_info: InfoFn,
    pub release_program: ObjFn,
    pub create_kernel: unsafe extern "C" fn(Obj, *const c_char, *mut ClInt) -> Obj,
    pub release_kernel: ObjFn,
    pub set_kernel_arg: unsafe extern "C" fn(Obj, ClUint, usize, *const c_void) -> ClInt,
    pub get_kernel_info: InfoFn,
    pub get_kernel_work_group_info: Info2Fn,
    pub get_kernel_arg_info:
        unsafe extern "C" fn(Obj, ClUint, ClUint, usize, *mut c_void, *mut usize) -> ClInt,
    pub enqueue_nd_range_kernel: unsafe extern "C" fn(
        Obj,
        Obj,
        ClUint,
        *const usize,
        *const usize,
        *const usize,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub enqueue_marker_with_wait_list:
        unsafe extern "C" fn(Obj, ClUint, *const Obj, *mut Obj) -> ClInt,
    pub enqueue_barrier_with_wait_list:
        unsafe extern "C" fn(Obj, ClUint, *const Obj, *mut Obj) -> ClInt,
    pub wait_for_events: unsafe extern "C" fn(ClUint, *const Obj) -> ClInt,
    pub get_event_info: InfoFn,
    pub get_event_profiling_info: InfoFn,
    pub release_event: ObjFn,
    pub retain_event: ObjFn,
    pub create_image: unsafe extern "C" fn(
        Obj,
        u64,
        *const ImageFormat,
        *const ImageDescC,
        *mut c_void,
        *mut ClInt,
    ) -> Obj,
    pub get_image_info: InfoFn,
    pub get_mem_object_info: InfoFn,
    pub get_supported_image_formats:
        unsafe extern "C" fn(Obj, u64, ClUint, ClUint, *mut ImageFormat, *mut ClUint) -> ClInt,
    pub enqueue_read_image: unsafe extern "C" fn(
        Obj,
        Obj,
        ClUint,
        *const usize,
        *const usize,
        usize,
        usize,
        *mut c_void,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub enqueue_write_image: unsafe extern "C" fn(
        Obj,
        Obj,
        ClUint,
        *const usize,
        *const usize,
        usize,
        usize,
        *const c_void,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub enqueue_copy_image: unsafe extern "C" fn(
        Obj,
        Obj,
        Obj,
        *const usize,
        *const usize,
        *const usize,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub enqueue_copy_image_to_buffer: unsafe extern "C" fn(
        Obj,
        Obj,
        Obj,
        *const usize,
        *const usize,
        usize,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub enqueue_copy_buffer_to_image: unsafe extern "C" fn(
        Obj,
        Obj,
        Obj,
        usize,
        *const usize,
        *const usize,
        ClUint,
        *const Obj,
        *mut Obj,
    ) -> ClInt,
    pub create_sampler: unsafe extern "C" fn(Obj, ClUint, ClUint, ClUint, *mut ClInt) -> Obj,
    pub release_sampler: ObjFn,
}

/// `cl_image_format`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageFormat {
    /// `cl_channel_order`.
    pub order: ClUint,
    /// `cl_channel_type`.
    pub channel_type: ClUint,
}

/// `cl_image_desc` (OpenCL 1.2).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ImageDescC {
    pub image_type: ClUint,
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub array_size: usize,
    pub row_pitch: usize,
    pub slice_pitch: usize,
    pub num_mip_levels: ClUint,
    pub num_samples: ClUint,
    pub buffer: Obj,
}

const _: () = assert!(size_of::<ImageDescC>() == 72);

/// CL_IMAGE_ELEMENT_SIZE.
pub const CL_IMAGE_ELEMENT_SIZE: ClUint = 0x1111;
/// CL_MEM_SIZE.
pub const CL_MEM_SIZE: ClUint = 0x1102;

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Api(libOpenCL)")
    }
}

/// The library or one of its symbols is missing.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(pub String);

/// The sonames tried, in order.
const LIBRARIES: [&CStr; 2] = [c"libOpenCL.so.1", c"libOpenCL.so"];

/// A resolved symbol as the function pointer type `F`.
///
/// # Safety
/// `F` must be an `extern "C"` function pointer type whose prototype is the
/// symbol's.
unsafe fn fn_ptr<F: Copy>(p: *mut c_void) -> F {
    assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    // SAFETY: same size (asserted); the caller vouches for the prototype.
    unsafe { std::mem::transmute_copy(&p) }
}

impl Api {
    /// Opens the ICD loader and resolves every entry point. The library
    /// stays loaded for the life of the process.
    pub fn load() -> Result<Api, LoadError> {
        let handle = LIBRARIES
            .iter()
            // SAFETY: dlopen with a NUL-terminated name; the loader's
            // initializers run, which is what opening a driver means.
            .map(|name| unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) })
            .find(|h| !h.is_null())
            .ok_or_else(|| {
                LoadError(
                    "no OpenCL ICD loader (libOpenCL.so.1) on this host; install ocl-icd-libopencl1 and a platform (NVIDIA's driver, or pocl-opencl-icd)".into(),
                )
            })?;
        macro_rules! sym {
            ($name:literal) => {{
                // SAFETY: dlsym on a live handle with a NUL-terminated name.
                let p = unsafe { libc::dlsym(handle, concat!($name, "\0").as_ptr().cast()) };
                if p.is_null() {
                    return Err(LoadError(format!("libOpenCL.so.1 lacks {}", $name)));
                }
                // SAFETY: the symbol is the OpenCL 1.2 entry point of that
                // name; its C prototype is the field's type (CL/cl.h).
                unsafe { fn_ptr(p) }
            }};
        }
        Ok(Api {
            get_platform_ids: sym!("clGetPlatformIDs"),
            get_platform_info: sym!("clGetPlatformInfo"),
            get_device_ids: sym!("clGetDeviceIDs"),
            get_device_info: sym!("clGetDeviceInfo"),
            create_context: sym!("clCreateContext"),
            release_context: sym!("clReleaseContext"),
            create_command_queue: sym!("clCreateCommandQueue"),
            release_command_queue: sym!("clReleaseCommandQueue"),
            finish: sym!("clFinish"),
            flush: sym!("clFlush"),
            create_buffer: sym!("clCreateBuffer"),
            create_sub_buffer: sym!("clCreateSubBuffer"),
            release_mem_object: sym!("clReleaseMemObject"),
            enqueue_write_buffer: sym!("clEnqueueWriteBuffer"),
            enqueue_read_buffer: sym!("clEnqueueReadBuffer"),
            enqueue_copy_buffer: sym!("clEnqueueCopyBuffer"),
            enqueue_fill_buffer: sym!("clEnqueueFillBuffer"),
            create_program_with_source: sym!("clCreateProgramWithSource"),
            create_program_with_binary: sym!("clCreateProgramWithBinary"),
            build_program: sym!("clBuildProgram"),
            get_program_build_info: sym!("clGetProgramBuildInfo"),
            get_program_info: sym!("clGetProgramInfo"),
            release_program: sym!("clReleaseProgram"),
            create_kernel: sym!("clCreateKernel"),
            release_kernel: sym!("clReleaseKernel"),
            set_kernel_arg: sym!("clSetKernelArg"),
            get_kernel_info: sym!("clGetKernelInfo"),
            get_kernel_work_group_info: sym!("clGetKernelWorkGroupInfo"),
            get_kernel_arg_info: sym!("clGetKernelArgInfo"),
            enqueue_nd_range_kernel: sym!("clEnqueueNDRangeKernel"),
            enqueue_marker_with_wait_list: sym!("clEnqueueMarkerWithWaitList"),
            enqueue_barrier_with_wait_list: sym!("clEnqueueBarrierWithWaitList"),
            wait_for_events: sym!("clWaitForEvents"),
            get_event_info: sym!("clGetEventInfo"),
            get_event_profiling_info: sym!("clGetEventProfilingInfo"),
            release_event: sym!("clReleaseEvent"),
            retain_event: sym!("clRetainEvent"),
            create_image: sym!("clCreateImage"),
            get_image_info: sym!("clGetImageInfo"),
            get_mem_object_info: sym!("clGetMemObjectInfo"),
            get_supported_image_formats: sym!("clGetSupportedImageFormats"),
            enqueue_read_image: sym!("clEnqueueReadImage"),
            enqueue_write_image: sym!("clEnqueueWriteImage"),
            enqueue_copy_image: sym!("clEnqueueCopyImage"),
            enqueue_copy_image_to_buffer: sym!("clEnqueueCopyImageToBuffer"),
            enqueue_copy_buffer_to_image: sym!("clEnqueueCopyBufferToImage"),
            create_sampler: sym!("clCreateSampler"),
            release_sampler: sym!("clReleaseSampler"),
        })
    }
}
