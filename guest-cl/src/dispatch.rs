//! The `cl_khr_icd` dispatch table.
//!
//! Every object this library hands out starts with a pointer to [`DISPATCH`];
//! the ICD loader calls through it. Its slots follow `struct
//! _cl_icd_dispatch` of the Khronos `CL/cl_icd.h` (OpenCL 1.0 to 3.0, with
//! the GL, D3D, DX9 and EGL sharing slots in between) one for one: the
//! loader indexes the table by position, so a missing or extra slot would
//! call the wrong function. A unit test compares [`SLOT_NAMES`] with the
//! installed header.
//!
//! No slot is null: an entry point this library does not implement returns
//! CL_INVALID_OPERATION (or null, with CL_INVALID_OPERATION in its
//! `errcode_ret`) and logs its name once. The stubs take the C parameters
//! as `usize` words: every OpenCL parameter is an integer or a pointer,
//! passed in an integer register or an 8-byte stack slot on the supported
//! targets (x86-64 System V, AArch64 Linux), so the position of
//! `errcode_ret`, the one parameter a stub uses, is right.

use std::ffi::c_void;

use crate::{context, event, image, kernel, mem, platform, program, sampler};

/// The dispatch table: one function pointer per slot of
/// `struct _cl_icd_dispatch`.
#[repr(C)]
#[derive(Debug)]
pub struct Dispatch(pub [*const c_void; SLOTS]);

// SAFETY: the table is immutable and holds only addresses of functions,
// which any thread may call.
unsafe impl Sync for Dispatch {}

/// The head of every object handed to the application: the loader reads
/// the dispatch pointer from the object's first word.
#[repr(C)]
#[derive(Debug)]
pub struct IcdObject {
    /// Always [`DISPATCH`].
    pub dispatch: &'static Dispatch,
}

impl IcdObject {
    /// A new object head.
    pub const fn new() -> IcdObject {
        IcdObject {
            dispatch: &DISPATCH,
        }
    }
}

impl Default for IcdObject {
    fn default() -> Self {
        IcdObject::new()
    }
}

/// One slot's function: an implementation (`fun`), or a stub of the given
/// shape: `int` returns CL_INVALID_OPERATION; `obj` returns null and
/// writes CL_INVALID_OPERATION to the `errcode_ret` that follows the
/// listed parameters; `ptr` returns null; `void` returns nothing.
macro_rules! slot {
    ($name:ident, fun($f:path)) => {
        $f as *const c_void
    };
    ($name:ident, int($($a:ident),*)) => {{
        #[allow(unused_variables)]
        extern "C" fn stub($($a: usize),*) -> i32 {
            crate::guard(stringify!($name), || Err(crate::unsupported(stringify!($name))))
        }
        stub as *const c_void
    }};
    ($name:ident, obj($($a:ident),*)) => {{
        #[allow(unused_variables)]
        extern "C" fn stub($($a: usize,)* errcode_ret: *mut i32) -> *mut c_void {
            crate::guard_obj(stringify!($name), errcode_ret, || {
                Err(crate::unsupported(stringify!($name)))
            })
        }
        stub as *const c_void
    }};
    ($name:ident, ptr($($a:ident),*)) => {{
        #[allow(unused_variables)]
        extern "C" fn stub($($a: usize),*) -> *mut c_void {
            let _ = std::panic::catch_unwind(|| crate::unsupported(stringify!($name)));
            std::ptr::null_mut()
        }
        stub as *const c_void
    }};
    ($name:ident, void($($a:ident),*)) => {{
        #[allow(unused_variables)]
        extern "C" fn stub($($a: usize),*) {
            let _ = std::panic::catch_unwind(|| crate::unsupported(stringify!($name)));
        }
        stub as *const c_void
    }};
}

macro_rules! dispatch_table {
    ($($name:ident => $kind:ident($($a:tt)*),)*) => {
        /// Number of slots.
        pub const SLOTS: usize = [$(stringify!($name)),*].len();
        /// Slot names, in table order.
        pub const SLOT_NAMES: [&str; SLOTS] = [$(stringify!($name)),*];
        /// The table every object points to.
        pub static DISPATCH: Dispatch = Dispatch([$(slot!($name, $kind($($a)*))),*]);
    };
}

dispatch_table! {
    clGetPlatformIDs => fun(platform::clGetPlatformIDs),
    clGetPlatformInfo => fun(platform::get_platform_info),
    clGetDeviceIDs => fun(platform::clGetDeviceIDs),
    clGetDeviceInfo => fun(platform::clGetDeviceInfo),
    clCreateContext => fun(context::clCreateContext),
    clCreateContextFromType => fun(context::clCreateContextFromType),
    clRetainContext => fun(context::clRetainContext),
    clReleaseContext => fun(context::clReleaseContext),
    clGetContextInfo => fun(context::clGetContextInfo),
    clCreateCommandQueue => fun(context::clCreateCommandQueue),
    clRetainCommandQueue => fun(context::clRetainCommandQueue),
    clReleaseCommandQueue => fun(context::clReleaseCommandQueue),
    clGetCommandQueueInfo => fun(context::clGetCommandQueueInfo),
    clSetCommandQueueProperty => int(a, b, c, d),
    clCreateBuffer => fun(mem::clCreateBuffer),
    clCreateImage2D => fun(image::clCreateImage2D),
    clCreateImage3D => fun(image::clCreateImage3D),
    clRetainMemObject => fun(mem::clRetainMemObject),
    clReleaseMemObject => fun(mem::clReleaseMemObject),
    clGetSupportedImageFormats => fun(image::clGetSupportedImageFormats),
    clGetMemObjectInfo => fun(mem::clGetMemObjectInfo),
    clGetImageInfo => fun(image::clGetImageInfo),
    clCreateSampler => fun(sampler::clCreateSampler),
    clRetainSampler => fun(sampler::clRetainSampler),
    clReleaseSampler => fun(sampler::clReleaseSampler),
    clGetSamplerInfo => fun(sampler::clGetSamplerInfo),
    clCreateProgramWithSource => fun(program::clCreateProgramWithSource),
    clCreateProgramWithBinary => fun(program::clCreateProgramWithBinary),
    clRetainProgram => fun(program::clRetainProgram),
    clReleaseProgram => fun(program::clReleaseProgram),
    clBuildProgram => fun(program::clBuildProgram),
    clUnloadCompiler => fun(platform::clUnloadCompiler),
    clGetProgramInfo => fun(program::clGetProgramInfo),
    clGetProgramBuildInfo => fun(program::clGetProgramBuildInfo),
    clCreateKernel => fun(kernel::clCreateKernel),
    clCreateKernelsInProgram => fun(kernel::clCreateKernelsInProgram),
    clRetainKernel => fun(kernel::clRetainKernel),
    clReleaseKernel => fun(kernel::clReleaseKernel),
    clSetKernelArg => fun(kernel::clSetKernelArg),
    clGetKernelInfo => fun(kernel::clGetKernelInfo),
    clGetKernelWorkGroupInfo => fun(kernel::clGetKernelWorkGroupInfo),
    clWaitForEvents => fun(event::clWaitForEvents),
    clGetEventInfo => fun(event::clGetEventInfo),
    clRetainEvent => fun(event::clRetainEvent),
    clReleaseEvent => fun(event::clReleaseEvent),
    clGetEventProfilingInfo => fun(event::clGetEventProfilingInfo),
    clFlush => fun(context::clFlush),
    clFinish => fun(context::clFinish),
    clEnqueueReadBuffer => fun(mem::clEnqueueReadBuffer),
    clEnqueueWriteBuffer => fun(mem::clEnqueueWriteBuffer),
    clEnqueueCopyBuffer => fun(mem::clEnqueueCopyBuffer),
    clEnqueueReadImage => fun(image::clEnqueueReadImage),
    clEnqueueWriteImage => fun(image::clEnqueueWriteImage),
    clEnqueueCopyImage => fun(image::clEnqueueCopyImage),
    clEnqueueCopyImageToBuffer => fun(image::clEnqueueCopyImageToBuffer),
    clEnqueueCopyBufferToImage => fun(image::clEnqueueCopyBufferToImage),
    clEnqueueMapBuffer => fun(mem::clEnqueueMapBuffer),
    clEnqueueMapImage => fun(image::clEnqueueMapImage),
    clEnqueueUnmapMemObject => fun(mem::clEnqueueUnmapMemObject),
    clEnqueueNDRangeKernel => fun(kernel::clEnqueueNDRangeKernel),
    clEnqueueTask => fun(kernel::clEnqueueTask),
    clEnqueueNativeKernel => int(a, b, c, d, e, f, g, h, i, j),
    clEnqueueMarker => fun(event::clEnqueueMarker),
    clEnqueueWaitForEvents => fun(event::clEnqueueWaitForEvents),
    clEnqueueBarrier => fun(event::clEnqueueBarrier),
    clGetExtensionFunctionAddress => fun(platform::get_extension_function_address),
    clCreateFromGLBuffer => obj(a, b, c),
    clCreateFromGLTexture2D => obj(a, b, c, d, e),
    clCreateFromGLTexture3D => obj(a, b, c, d, e),
    clCreateFromGLRenderbuffer => obj(a, b, c),
    clGetGLObjectInfo => int(a, b, c),
    clGetGLTextureInfo => int(a, b, c, d, e),
    clEnqueueAcquireGLObjects => int(a, b, c, d, e, f),
    clEnqueueReleaseGLObjects => int(a, b, c, d, e, f),
    clGetGLContextInfoKHR => int(a, b, c, d, e),
    clGetDeviceIDsFromD3D10KHR => int(a, b, c, d, e, f, g),
    clCreateFromD3D10BufferKHR => obj(a, b, c),
    clCreateFromD3D10Texture2DKHR => obj(a, b, c, d),
    clCreateFromD3D10Texture3DKHR => obj(a, b, c, d),
    clEnqueueAcquireD3D10ObjectsKHR => int(a, b, c, d, e, f),
    clEnqueueReleaseD3D10ObjectsKHR => int(a, b, c, d, e, f),
    clSetEventCallback => fun(event::clSetEventCallback),
    clCreateSubBuffer => fun(mem::clCreateSubBuffer),
    clSetMemObjectDestructorCallback => fun(mem::clSetMemObjectDestructorCallback),
    clCreateUserEvent => obj(a),
    clSetUserEventStatus => int(a, b),
    clEnqueueReadBufferRect => fun(mem::clEnqueueReadBufferRect),
    clEnqueueWriteBufferRect => fun(mem::clEnqueueWriteBufferRect),
    clEnqueueCopyBufferRect => fun(mem::clEnqueueCopyBufferRect),
    clCreateSubDevicesEXT => int(a, b, c, d, e),
    clRetainDeviceEXT => fun(platform::clRetainDeviceEXT),
    clReleaseDeviceEXT => fun(platform::clReleaseDeviceEXT),
    clCreateEventFromGLsyncKHR => obj(a, b),
    clCreateSubDevices => fun(platform::clCreateSubDevices),
    clRetainDevice => fun(platform::clRetainDevice),
    clReleaseDevice => fun(platform::clReleaseDevice),
    clCreateImage => fun(image::clCreateImage),
    clCreateProgramWithBuiltInKernels => obj(a, b, c, d),
    clCompileProgram => int(a, b, c, d, e, f, g, h, i),
    clLinkProgram => obj(a, b, c, d, e, f, g, h),
    clUnloadPlatformCompiler => fun(platform::clUnloadPlatformCompiler),
    clGetKernelArgInfo => fun(kernel::clGetKernelArgInfo),
    clEnqueueFillBuffer => fun(mem::clEnqueueFillBuffer),
    clEnqueueFillImage => fun(image::clEnqueueFillImage),
    clEnqueueMigrateMemObjects => fun(mem::clEnqueueMigrateMemObjects),
    clEnqueueMarkerWithWaitList => fun(event::clEnqueueMarkerWithWaitList),
    clEnqueueBarrierWithWaitList => fun(event::clEnqueueBarrierWithWaitList),
    clGetExtensionFunctionAddressForPlatform => fun(platform::clGetExtensionFunctionAddressForPlatform),
    clCreateFromGLTexture => obj(a, b, c, d, e),
    clGetDeviceIDsFromD3D11KHR => int(a, b, c, d, e, f, g),
    clCreateFromD3D11BufferKHR => obj(a, b, c),
    clCreateFromD3D11Texture2DKHR => obj(a, b, c, d),
    clCreateFromD3D11Texture3DKHR => obj(a, b, c, d),
    clCreateFromDX9MediaSurfaceKHR => obj(a, b, c, d, e),
    clEnqueueAcquireD3D11ObjectsKHR => int(a, b, c, d, e, f),
    clEnqueueReleaseD3D11ObjectsKHR => int(a, b, c, d, e, f),
    clGetDeviceIDsFromDX9MediaAdapterKHR => int(a, b, c, d, e, f, g, h),
    clEnqueueAcquireDX9MediaSurfacesKHR => int(a, b, c, d, e, f),
    clEnqueueReleaseDX9MediaSurfacesKHR => int(a, b, c, d, e, f),
    clCreateFromEGLImageKHR => obj(a, b, c, d, e),
    clEnqueueAcquireEGLObjectsKHR => int(a, b, c, d, e, f),
    clEnqueueReleaseEGLObjectsKHR => int(a, b, c, d, e, f),
    clCreateEventFromEGLSyncKHR => obj(a, b, c),
    clCreateCommandQueueWithProperties => fun(context::clCreateCommandQueueWithProperties),
    clCreatePipe => obj(a, b, c, d, e),
    clGetPipeInfo => int(a, b, c, d, e),
    clSVMAlloc => ptr(a, b, c, d),
    clSVMFree => void(a, b),
    clEnqueueSVMFree => int(a, b, c, d, e, f, g, h),
    clEnqueueSVMMemcpy => int(a, b, c, d, e, f, g, h),
    clEnqueueSVMMemFill => int(a, b, c, d, e, f, g, h),
    clEnqueueSVMMap => int(a, b, c, d, e, f, g, h),
    clEnqueueSVMUnmap => int(a, b, c, d, e),
    clCreateSamplerWithProperties => fun(sampler::clCreateSamplerWithProperties),
    clSetKernelArgSVMPointer => int(a, b, c),
    clSetKernelExecInfo => int(a, b, c, d),
    clGetKernelSubGroupInfoKHR => int(a, b, c, d, e, f, g, h),
    clCloneKernel => obj(a),
    clCreateProgramWithIL => obj(a, b, c),
    clEnqueueSVMMigrateMem => int(a, b, c, d, e, f, g, h),
    clGetDeviceAndHostTimer => int(a, b, c),
    clGetHostTimer => int(a, b),
    clGetKernelSubGroupInfo => int(a, b, c, d, e, f, g, h),
    clSetDefaultDeviceCommandQueue => int(a, b, c),
    clSetProgramReleaseCallback => int(a, b, c),
    clSetProgramSpecializationConstant => int(a, b, c, d),
    clCreateBufferWithProperties => fun(mem::clCreateBufferWithProperties),
    clCreateImageWithProperties => fun(image::clCreateImageWithProperties),
    clSetContextDestructorCallback => int(a, b, c),
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "/usr/include/CL/cl_icd.h";

    /// The member names of `struct _cl_icd_dispatch`, in order.
    fn header_slots(text: &str) -> Vec<String> {
        // Drop comments and preprocessor lines, then take the last word of
        // every member declaration.
        let mut clean = String::new();
        let mut rest = text;
        while let Some(i) = rest.find("/*") {
            clean.push_str(&rest[..i]);
            rest = rest[i..].find("*/").map_or("", |j| &rest[i + j + 2..]);
        }
        clean.push_str(rest);
        let clean: String = clean
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        let start = clean
            .find("struct _cl_icd_dispatch")
            .expect("the header defines struct _cl_icd_dispatch");
        let body = &clean[start..];
        let open = body.find('{').expect("the struct has a body");
        let close = body.find('}').expect("the struct body ends");
        body[open + 1..close]
            .split(';')
            .filter_map(|decl| decl.split_whitespace().last())
            .map(|name| name.trim_start_matches('*').to_string())
            .collect()
    }

    #[test]
    fn slots_follow_the_installed_header() {
        let Ok(text) = std::fs::read_to_string(HEADER) else {
            println!("{HEADER} is not installed: the slot order is not checked");
            return;
        };
        let want = header_slots(&text);
        let have: Vec<String> = SLOT_NAMES.iter().map(|s| s.to_string()).collect();
        for (i, (w, h)) in want.iter().zip(&have).enumerate() {
            assert_eq!(w, h, "slot {i}");
        }
        assert_eq!(want.len(), have.len(), "number of slots");
    }

    #[test]
    fn no_slot_is_null_and_names_are_unique() {
        assert!(DISPATCH.0.iter().all(|p| !p.is_null()));
        let mut names = SLOT_NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SLOTS);
    }

    fn slot(name: &str) -> *const c_void {
        let i = SLOT_NAMES.iter().position(|n| *n == name).expect("a slot");
        DISPATCH.0[i]
    }

    #[test]
    fn stubs_fail_with_invalid_operation_where_c_expects_it() {
        type CreatePipe = extern "C" fn(usize, u64, u32, u32, usize, *mut i32) -> *mut c_void;
        type LinkProgram = extern "C" fn(
            usize,
            u32,
            usize,
            usize,
            u32,
            usize,
            usize,
            usize,
            *mut i32,
        ) -> *mut c_void;
        type SetProperty = extern "C" fn(usize, u64, u32, *mut u64) -> i32;
        // SAFETY: the slot holds a function of this C signature (with
        // usize words), per the table's macro.
        let create =
            unsafe { std::mem::transmute::<*const c_void, CreatePipe>(slot("clCreatePipe")) };
        // SAFETY: as above.
        let link =
            unsafe { std::mem::transmute::<*const c_void, LinkProgram>(slot("clLinkProgram")) };
        // SAFETY: as above.
        let set = unsafe {
            std::mem::transmute::<*const c_void, SetProperty>(slot("clSetCommandQueueProperty"))
        };
        let mut err = 0;
        assert!(create(1, 0, 4, 4, 0, &mut err).is_null());
        assert_eq!(err, crate::types::CL_INVALID_OPERATION);
        err = 0;
        assert!(link(1, 0, 0, 0, 0, 0, 0, 0, &mut err).is_null());
        assert_eq!(err, crate::types::CL_INVALID_OPERATION);
        assert_eq!(
            set(1, 0, 0, std::ptr::null_mut()),
            crate::types::CL_INVALID_OPERATION
        );
        // A null errcode_ret is allowed.
        assert!(create(1, 0, 4, 4, 0, std::ptr::null_mut()).is_null());
    }

    #[test]
    fn the_parser_reads_split_and_commented_members() {
        let text = "typedef struct _cl_icd_dispatch {\n  /* OpenCL 1.0 */\n  cl_api_a a;\n#ifdef X\n  cl_api_b\n      b; // two lines\n#endif\n} cl_icd_dispatch;";
        assert_eq!(header_slots(text), ["a", "b"]);
    }
}
