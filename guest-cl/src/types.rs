//! OpenCL types and the constants this library uses (values from the
//! Khronos headers, `CL/cl.h` and `CL/cl_ext.h`). Error codes that the wire
//! contract names come from [`fairgpu_protocol::opencl`].

#![allow(missing_docs)]

use std::ffi::{c_char, c_void};

pub use fairgpu_protocol::opencl::{
    CL_BUILD_PROGRAM_FAILURE, CL_DEVICE_NOT_FOUND, CL_IMAGE_FORMAT_MISMATCH, CL_INVALID_ARG_INDEX,
    CL_INVALID_ARG_SIZE, CL_INVALID_ARG_VALUE, CL_INVALID_BINARY, CL_INVALID_BUFFER_SIZE,
    CL_INVALID_BUILD_OPTIONS, CL_INVALID_COMMAND_QUEUE, CL_INVALID_DEVICE, CL_INVALID_EVENT,
    CL_INVALID_EVENT_WAIT_LIST, CL_INVALID_GLOBAL_OFFSET, CL_INVALID_GLOBAL_WORK_SIZE,
    CL_INVALID_IMAGE_DESCRIPTOR, CL_INVALID_IMAGE_FORMAT_DESCRIPTOR, CL_INVALID_IMAGE_SIZE,
    CL_INVALID_KERNEL, CL_INVALID_KERNEL_ARGS, CL_INVALID_KERNEL_NAME, CL_INVALID_MEM_OBJECT,
    CL_INVALID_OPERATION, CL_INVALID_PROGRAM, CL_INVALID_PROGRAM_EXECUTABLE, CL_INVALID_SAMPLER,
    CL_INVALID_VALUE, CL_INVALID_WORK_DIMENSION, CL_INVALID_WORK_GROUP_SIZE, CL_OUT_OF_HOST_MEMORY,
    CL_OUT_OF_RESOURCES, CL_PROFILING_INFO_NOT_AVAILABLE, CL_SUCCESS,
};

/// Every OpenCL object handle (`cl_platform_id`, `cl_context`, `cl_mem`, …):
/// a pointer to an object whose first field is the dispatch table.
pub type Handle = *mut c_void;

/// `cl_context` notification callback.
pub type ContextNotify = Option<extern "C" fn(*const c_char, *const c_void, usize, *mut c_void)>;
/// `clBuildProgram` notification callback.
pub type ProgramNotify = Option<extern "C" fn(Handle, *mut c_void)>;
/// `clSetEventCallback` callback.
pub type EventNotify = Option<extern "C" fn(Handle, i32, *mut c_void)>;
/// `clSetMemObjectDestructorCallback` callback.
pub type MemNotify = Option<extern "C" fn(Handle, *mut c_void)>;

// Errors not in the wire contract's list.
pub const CL_MEM_COPY_OVERLAP: i32 = -8;
pub const CL_IMAGE_FORMAT_NOT_SUPPORTED: i32 = -10;
pub const CL_MAP_FAILURE: i32 = -12;
pub const CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST: i32 = -14;
pub const CL_DEVICE_PARTITION_FAILED: i32 = -18;
pub const CL_INVALID_DEVICE_TYPE: i32 = -31;
pub const CL_INVALID_PLATFORM: i32 = -32;
pub const CL_INVALID_CONTEXT: i32 = -34;
pub const CL_INVALID_QUEUE_PROPERTIES: i32 = -35;
pub const CL_INVALID_HOST_PTR: i32 = -37;
pub const CL_INVALID_WORK_ITEM_SIZE: i32 = -55;
pub const CL_INVALID_PROPERTY: i32 = -64;
pub const CL_PLATFORM_NOT_FOUND_KHR: i32 = -1001;

pub const CL_FALSE: u32 = 0;
pub const CL_TRUE: u32 = 1;

// Platform info.
pub const CL_PLATFORM_PROFILE: u32 = 0x0900;
pub const CL_PLATFORM_VERSION: u32 = 0x0901;
pub const CL_PLATFORM_NAME: u32 = 0x0902;
pub const CL_PLATFORM_VENDOR: u32 = 0x0903;
pub const CL_PLATFORM_EXTENSIONS: u32 = 0x0904;
pub const CL_PLATFORM_HOST_TIMER_RESOLUTION: u32 = 0x0905;
pub const CL_PLATFORM_NUMERIC_VERSION: u32 = 0x0906;
pub const CL_PLATFORM_EXTENSIONS_WITH_VERSION: u32 = 0x0907;
pub const CL_PLATFORM_ICD_SUFFIX_KHR: u32 = 0x0920;

// Device types.
pub const CL_DEVICE_TYPE_DEFAULT: u64 = 1 << 0;
pub const CL_DEVICE_TYPE_CPU: u64 = 1 << 1;
pub const CL_DEVICE_TYPE_GPU: u64 = 1 << 2;
pub const CL_DEVICE_TYPE_ACCELERATOR: u64 = 1 << 3;
pub const CL_DEVICE_TYPE_CUSTOM: u64 = 1 << 4;
pub const CL_DEVICE_TYPE_ALL: u64 = 0xFFFF_FFFF;

// Device info.
pub const CL_DEVICE_TYPE: u32 = 0x1000;
pub const CL_DEVICE_MAX_WORK_GROUP_SIZE: u32 = 0x1004;
pub const CL_DEVICE_MAX_WORK_ITEM_SIZES: u32 = 0x1005;
pub const CL_DEVICE_MAX_MEM_ALLOC_SIZE: u32 = 0x1010;
pub const CL_DEVICE_IMAGE2D_MAX_WIDTH: u32 = 0x1011;
pub const CL_DEVICE_IMAGE2D_MAX_HEIGHT: u32 = 0x1012;
pub const CL_DEVICE_IMAGE3D_MAX_WIDTH: u32 = 0x1013;
pub const CL_DEVICE_IMAGE3D_MAX_HEIGHT: u32 = 0x1014;
pub const CL_DEVICE_IMAGE3D_MAX_DEPTH: u32 = 0x1015;
pub const CL_DEVICE_IMAGE_SUPPORT: u32 = 0x1016;
pub const CL_DEVICE_QUEUE_PROPERTIES: u32 = 0x102A;
pub const CL_DEVICE_VERSION: u32 = 0x102F;
pub const CL_DEVICE_EXTENSIONS: u32 = 0x1030;
pub const CL_DEVICE_PLATFORM: u32 = 0x1031;
pub const CL_DEVICE_HOST_UNIFIED_MEMORY: u32 = 0x1035;
pub const CL_DEVICE_OPENCL_C_VERSION: u32 = 0x103D;
pub const CL_DEVICE_LINKER_AVAILABLE: u32 = 0x103E;
pub const CL_DEVICE_BUILT_IN_KERNELS: u32 = 0x103F;
pub const CL_DEVICE_IMAGE_MAX_ARRAY_SIZE: u32 = 0x1041;
pub const CL_DEVICE_PARENT_DEVICE: u32 = 0x1042;
pub const CL_DEVICE_PARTITION_MAX_SUB_DEVICES: u32 = 0x1043;
pub const CL_DEVICE_PARTITION_PROPERTIES: u32 = 0x1044;
pub const CL_DEVICE_PARTITION_AFFINITY_DOMAIN: u32 = 0x1045;
pub const CL_DEVICE_PARTITION_TYPE: u32 = 0x1046;
pub const CL_DEVICE_REFERENCE_COUNT: u32 = 0x1047;
pub const CL_DEVICE_QUEUE_ON_DEVICE_PROPERTIES: u32 = 0x104E;
pub const CL_DEVICE_MAX_ON_DEVICE_QUEUES: u32 = 0x1051;
pub const CL_DEVICE_SVM_CAPABILITIES: u32 = 0x1053;
pub const CL_DEVICE_IL_VERSION: u32 = 0x105B;
pub const CL_DEVICE_NUMERIC_VERSION: u32 = 0x105E;
pub const CL_DEVICE_EXTENSIONS_WITH_VERSION: u32 = 0x1060;
pub const CL_DEVICE_ILS_WITH_VERSION: u32 = 0x1061;
pub const CL_DEVICE_BUILT_IN_KERNELS_WITH_VERSION: u32 = 0x1062;
pub const CL_DEVICE_OPENCL_C_ALL_VERSIONS: u32 = 0x1066;
pub const CL_DEVICE_OPENCL_C_FEATURES: u32 = 0x106F;

// Context properties and info.
pub const CL_CONTEXT_REFERENCE_COUNT: u32 = 0x1080;
pub const CL_CONTEXT_DEVICES: u32 = 0x1081;
pub const CL_CONTEXT_PROPERTIES: u32 = 0x1082;
pub const CL_CONTEXT_NUM_DEVICES: u32 = 0x1083;
pub const CL_CONTEXT_PLATFORM: isize = 0x1084;
pub const CL_CONTEXT_INTEROP_USER_SYNC: isize = 0x1085;

// Queues.
pub const CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE: u64 = 1 << 0;
pub const CL_QUEUE_PROFILING_ENABLE: u64 = 1 << 1;
pub const CL_QUEUE_ON_DEVICE: u64 = 1 << 2;
pub const CL_QUEUE_ON_DEVICE_DEFAULT: u64 = 1 << 3;
pub const CL_QUEUE_CONTEXT: u32 = 0x1090;
pub const CL_QUEUE_DEVICE: u32 = 0x1091;
pub const CL_QUEUE_REFERENCE_COUNT: u32 = 0x1092;
pub const CL_QUEUE_PROPERTIES: u32 = 0x1093;
pub const CL_QUEUE_SIZE: u32 = 0x1094;

// Memory objects.
pub const CL_MEM_READ_WRITE: u64 = 1 << 0;
pub const CL_MEM_WRITE_ONLY: u64 = 1 << 1;
pub const CL_MEM_READ_ONLY: u64 = 1 << 2;
pub const CL_MEM_USE_HOST_PTR: u64 = 1 << 3;
pub const CL_MEM_ALLOC_HOST_PTR: u64 = 1 << 4;
pub const CL_MEM_COPY_HOST_PTR: u64 = 1 << 5;
pub const CL_MEM_HOST_WRITE_ONLY: u64 = 1 << 7;
pub const CL_MEM_HOST_READ_ONLY: u64 = 1 << 8;
pub const CL_MEM_HOST_NO_ACCESS: u64 = 1 << 9;
pub const CL_MEM_OBJECT_BUFFER: u32 = 0x10F0;
pub const CL_MEM_OBJECT_IMAGE2D: u32 = 0x10F1;
pub const CL_MEM_OBJECT_IMAGE3D: u32 = 0x10F2;
pub const CL_MEM_OBJECT_IMAGE2D_ARRAY: u32 = 0x10F3;
pub const CL_MEM_OBJECT_IMAGE1D: u32 = 0x10F4;
pub const CL_MEM_OBJECT_IMAGE1D_ARRAY: u32 = 0x10F5;
pub const CL_MEM_OBJECT_IMAGE1D_BUFFER: u32 = 0x10F6;
pub const CL_MEM_TYPE: u32 = 0x1100;
pub const CL_MEM_FLAGS: u32 = 0x1101;
pub const CL_MEM_SIZE: u32 = 0x1102;
pub const CL_MEM_HOST_PTR: u32 = 0x1103;
pub const CL_MEM_MAP_COUNT: u32 = 0x1104;
pub const CL_MEM_REFERENCE_COUNT: u32 = 0x1105;
pub const CL_MEM_CONTEXT: u32 = 0x1106;
pub const CL_MEM_ASSOCIATED_MEMOBJECT: u32 = 0x1107;
pub const CL_MEM_OFFSET: u32 = 0x1108;
pub const CL_MEM_USES_SVM_POINTER: u32 = 0x1109;
pub const CL_MEM_PROPERTIES: u32 = 0x110A;
pub const CL_BUFFER_CREATE_TYPE_REGION: u32 = 0x1220;
pub const CL_MAP_READ: u64 = 1 << 0;
pub const CL_MAP_WRITE: u64 = 1 << 1;
pub const CL_MAP_WRITE_INVALIDATE_REGION: u64 = 1 << 2;
pub const CL_MIGRATE_MEM_OBJECT_HOST: u64 = 1 << 0;
pub const CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED: u64 = 1 << 1;

// Images.
pub const CL_IMAGE_FORMAT: u32 = 0x1110;
pub const CL_IMAGE_ELEMENT_SIZE: u32 = 0x1111;
pub const CL_IMAGE_ROW_PITCH: u32 = 0x1112;
pub const CL_IMAGE_SLICE_PITCH: u32 = 0x1113;
pub const CL_IMAGE_WIDTH: u32 = 0x1114;
pub const CL_IMAGE_HEIGHT: u32 = 0x1115;
pub const CL_IMAGE_DEPTH: u32 = 0x1116;
pub const CL_IMAGE_ARRAY_SIZE: u32 = 0x1117;
pub const CL_IMAGE_BUFFER: u32 = 0x1118;
pub const CL_IMAGE_NUM_MIP_LEVELS: u32 = 0x1119;
pub const CL_IMAGE_NUM_SAMPLES: u32 = 0x111A;

// Channel orders.
pub const CL_R: u32 = 0x10B0;
pub const CL_A: u32 = 0x10B1;
pub const CL_RG: u32 = 0x10B2;
pub const CL_RA: u32 = 0x10B3;
pub const CL_RGB: u32 = 0x10B4;
pub const CL_RGBA: u32 = 0x10B5;
pub const CL_BGRA: u32 = 0x10B6;
pub const CL_ARGB: u32 = 0x10B7;
pub const CL_INTENSITY: u32 = 0x10B8;
pub const CL_LUMINANCE: u32 = 0x10B9;
pub const CL_RX: u32 = 0x10BA;
pub const CL_RGX: u32 = 0x10BB;
pub const CL_RGBX: u32 = 0x10BC;
pub const CL_DEPTH: u32 = 0x10BD;
pub const CL_SRGB: u32 = 0x10BF;
pub const CL_SRGBX: u32 = 0x10C0;
pub const CL_SRGBA: u32 = 0x10C1;
pub const CL_SBGRA: u32 = 0x10C2;
pub const CL_ABGR: u32 = 0x10C3;

// Channel types.
pub const CL_SNORM_INT8: u32 = 0x10D0;
pub const CL_SNORM_INT16: u32 = 0x10D1;
pub const CL_UNORM_INT8: u32 = 0x10D2;
pub const CL_UNORM_INT16: u32 = 0x10D3;
pub const CL_UNORM_SHORT_565: u32 = 0x10D4;
pub const CL_UNORM_SHORT_555: u32 = 0x10D5;
pub const CL_UNORM_INT_101010: u32 = 0x10D6;
pub const CL_SIGNED_INT8: u32 = 0x10D7;
pub const CL_SIGNED_INT16: u32 = 0x10D8;
pub const CL_SIGNED_INT32: u32 = 0x10D9;
pub const CL_UNSIGNED_INT8: u32 = 0x10DA;
pub const CL_UNSIGNED_INT16: u32 = 0x10DB;
pub const CL_UNSIGNED_INT32: u32 = 0x10DC;
pub const CL_HALF_FLOAT: u32 = 0x10DD;
pub const CL_FLOAT: u32 = 0x10DE;
pub const CL_UNORM_INT_101010_2: u32 = 0x10E0;

// Samplers.
pub const CL_ADDRESS_NONE: u32 = 0x1130;
pub const CL_ADDRESS_CLAMP_TO_EDGE: u32 = 0x1131;
pub const CL_ADDRESS_CLAMP: u32 = 0x1132;
pub const CL_ADDRESS_REPEAT: u32 = 0x1133;
pub const CL_ADDRESS_MIRRORED_REPEAT: u32 = 0x1134;
pub const CL_FILTER_NEAREST: u32 = 0x1140;
pub const CL_FILTER_LINEAR: u32 = 0x1141;
pub const CL_SAMPLER_REFERENCE_COUNT: u32 = 0x1150;
pub const CL_SAMPLER_CONTEXT: u32 = 0x1151;
pub const CL_SAMPLER_NORMALIZED_COORDS: u32 = 0x1152;
pub const CL_SAMPLER_ADDRESSING_MODE: u32 = 0x1153;
pub const CL_SAMPLER_FILTER_MODE: u32 = 0x1154;
pub const CL_SAMPLER_PROPERTIES: u32 = 0x1158;

// Programs.
pub const CL_PROGRAM_REFERENCE_COUNT: u32 = 0x1160;
pub const CL_PROGRAM_CONTEXT: u32 = 0x1161;
pub const CL_PROGRAM_NUM_DEVICES: u32 = 0x1162;
pub const CL_PROGRAM_DEVICES: u32 = 0x1163;
pub const CL_PROGRAM_SOURCE: u32 = 0x1164;
pub const CL_PROGRAM_BINARY_SIZES: u32 = 0x1165;
pub const CL_PROGRAM_BINARIES: u32 = 0x1166;
pub const CL_PROGRAM_NUM_KERNELS: u32 = 0x1167;
pub const CL_PROGRAM_KERNEL_NAMES: u32 = 0x1168;
pub const CL_PROGRAM_BUILD_STATUS: u32 = 0x1181;
pub const CL_PROGRAM_BUILD_OPTIONS: u32 = 0x1182;
pub const CL_PROGRAM_BUILD_LOG: u32 = 0x1183;
pub const CL_PROGRAM_BINARY_TYPE: u32 = 0x1184;
pub const CL_BUILD_SUCCESS: i32 = 0;
pub const CL_BUILD_NONE: i32 = -1;
pub const CL_BUILD_ERROR: i32 = -2;
pub const CL_PROGRAM_BINARY_TYPE_NONE: u32 = 0;
pub const CL_PROGRAM_BINARY_TYPE_EXECUTABLE: u32 = 4;

// Kernels.
pub const CL_KERNEL_FUNCTION_NAME: u32 = 0x1190;
pub const CL_KERNEL_NUM_ARGS: u32 = 0x1191;
pub const CL_KERNEL_REFERENCE_COUNT: u32 = 0x1192;
pub const CL_KERNEL_CONTEXT: u32 = 0x1193;
pub const CL_KERNEL_PROGRAM: u32 = 0x1194;
pub const CL_KERNEL_ATTRIBUTES: u32 = 0x1195;

// Events.
pub const CL_EVENT_COMMAND_QUEUE: u32 = 0x11D0;
pub const CL_EVENT_COMMAND_TYPE: u32 = 0x11D1;
pub const CL_EVENT_REFERENCE_COUNT: u32 = 0x11D2;
pub const CL_EVENT_COMMAND_EXECUTION_STATUS: u32 = 0x11D3;
pub const CL_EVENT_CONTEXT: u32 = 0x11D4;
pub const CL_COMPLETE: i32 = 0;
pub const CL_RUNNING: i32 = 1;
pub const CL_SUBMITTED: i32 = 2;
pub const CL_PROFILING_COMMAND_QUEUED: u32 = 0x1280;
pub const CL_PROFILING_COMMAND_SUBMIT: u32 = 0x1281;
pub const CL_PROFILING_COMMAND_START: u32 = 0x1282;
pub const CL_PROFILING_COMMAND_END: u32 = 0x1283;
pub const CL_PROFILING_COMMAND_COMPLETE: u32 = 0x1284;

// Command types (`CL_EVENT_COMMAND_TYPE`).
pub const CL_COMMAND_NDRANGE_KERNEL: u32 = 0x11F0;
pub const CL_COMMAND_TASK: u32 = 0x11F1;
pub const CL_COMMAND_READ_BUFFER: u32 = 0x11F3;
pub const CL_COMMAND_WRITE_BUFFER: u32 = 0x11F4;
pub const CL_COMMAND_COPY_BUFFER: u32 = 0x11F5;
pub const CL_COMMAND_READ_IMAGE: u32 = 0x11F6;
pub const CL_COMMAND_WRITE_IMAGE: u32 = 0x11F7;
pub const CL_COMMAND_COPY_IMAGE: u32 = 0x11F8;
pub const CL_COMMAND_COPY_IMAGE_TO_BUFFER: u32 = 0x11F9;
pub const CL_COMMAND_COPY_BUFFER_TO_IMAGE: u32 = 0x11FA;
pub const CL_COMMAND_MAP_BUFFER: u32 = 0x11FB;
pub const CL_COMMAND_MAP_IMAGE: u32 = 0x11FC;
pub const CL_COMMAND_UNMAP_MEM_OBJECT: u32 = 0x11FD;
pub const CL_COMMAND_MARKER: u32 = 0x11FE;
pub const CL_COMMAND_READ_BUFFER_RECT: u32 = 0x1201;
pub const CL_COMMAND_WRITE_BUFFER_RECT: u32 = 0x1202;
pub const CL_COMMAND_COPY_BUFFER_RECT: u32 = 0x1203;
pub const CL_COMMAND_BARRIER: u32 = 0x1205;
pub const CL_COMMAND_MIGRATE_MEM_OBJECTS: u32 = 0x1206;
pub const CL_COMMAND_FILL_BUFFER: u32 = 0x1207;
pub const CL_COMMAND_FILL_IMAGE: u32 = 0x1208;

/// `CL_MAKE_VERSION(major, minor, patch)` (OpenCL 3.0 `cl_version`).
pub const fn make_version(major: u32, minor: u32, patch: u32) -> u32 {
    (major << 22) | (minor << 12) | patch
}
