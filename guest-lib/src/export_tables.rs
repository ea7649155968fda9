//! The private export tables NVIDIA's libcudart asks `cuGetExportTable` for.
//!
//! # What libcudart needs
//!
//! Besides the public entry points, libcudart (12.x static and shared, 13.x)
//! fetches tables of function pointers by 16-byte id through
//! `cuGetExportTable(&table, &uuid)` and calls into them. If every table is
//! refused it latches the failure and every runtime call fails; a NULL slot
//! that it calls crashes it. [`get_export_table`] answers the ids below with
//! static tables laid out as cudart expects; anything else gets `None`, which
//! the exported `cuGetExportTable` turns into an error (cudart accepts any
//! error for the ids it can do without, such as `f8cff951-2146-8b4e-…`,
//! asked for before `cuInit` by 12.9).
//!
//! Most tables begin with a size word: slot 0 holds the table's length in
//! bytes (slots × pointer size), and cudart checks it before calling higher
//! slots. CONTEXT_LOCAL_STORAGE has none; its slot 0 is a function.
//!
//! | table (id as passed) | slots | layout |
//! |---|---|---|
//! | CUDART_INTERFACE `6bd5fb6c 5bf4e74a 8987d939 12fd9df9` | 13 | 0 size; 1, 6, 8 load a module from a fatbin; 2 primary context of a device; 7 no-op; 12 "load compilers" (cudart 13.1+ calls it at start-up); 10 NULL as in the real driver; 3, 4, 5, 9, 11 unknown |
//! | TOOLS_RUNTIME_CALLBACK_HOOKS `a094798c 2e742e74 93f20800 200c0a66` | 7 | 0 size; 2 and 6 hand out a buffer and its size; 1, 3, 4, 5 no-ops (cudart calls 1 and 4) |
//! | TOOLS_TLS `42d85a81 23f6cb47 8298f6e7 8a3aecdc` | 4 | 0 size; 2 the calling thread's current context; 1, 3 unknown |
//! | CONTEXT_LOCAL_STORAGE `c693336e 1121df11 a8c368f3 55d89593` | 4 | 0 put; 1 delete; 2 get; 3 NULL as in the real driver |
//! | INTEGRITY_CHECK `d4082055 bde6704b 8d34ba12 3c66e1f2` | 3 | 0 size; 1 the integrity check ([`crate::integrity`]); 2 unknown |
//! | CONTEXT_CHECKS `263e8860 7cd26143 92f6bbd5 006dfa7e` | 4 | 0 size; 2 per-context check flags; 3 a global check returning 0; 1 unknown |
//! | unnamed, CUDA 13 `21318c60 97143248 8ca641ff 7324c8f2` | 5 | 0 size; 4 a context's unique id (as `cuCtxGetId`); 1–3 unknown |
//! | unnamed, cuBLASLt 13 `1734dc26 800d4745 8726c0f1 e7dd8bca` | 17 | 0 size; 1–16 unknown (cuBLASLt calls 4 and accepts NOT_SUPPORTED) |
//!
//! "Unknown" slots hold a function that ignores its arguments, names its
//! table and slot once on stderr and returns `CUDA_ERROR_NOT_SUPPORTED`
//! (801), so a call that nobody anticipated fails cleanly instead of
//! jumping to address zero. `FAIRGPU_GUEST_LOG=trace` also names each id
//! refused. On the x86-64 System V and
//! AArch64 procedure-call standards the caller owns its argument registers
//! and stack, so a function that takes fewer arguments than it is called
//! with is safe to call.
//!
//! # Where the facts come from
//!
//! * The project's own measurements of what libcudart asks of libcuda
//!   (runtimes linked against an instrumented stand-in driver): which ids
//!   cudart 12.0–12.9 and 13.5 ask for, which slots they call (CUDART_INTERFACE
//!   0 and 2; TOOLS_RUNTIME_CALLBACK_HOOKS 1, 2, 4, 6; TOOLS_TLS 0 and 2;
//!   CONTEXT_LOCAL_STORAGE put/get/delete with 400 for a missing key;
//!   INTEGRITY_CHECK 1 with v, v+1, v+2), that the CUDA 13 table must exist.
//! * Public reverse-engineering notes of the CUDA "dark API", chiefly the
//!   ZLUDA project's: table lengths (13, 7, 4, 4, 3, 4), the slot signatures
//!   written on each function below, the buffer sizes 1024 and 14, that
//!   CUDART_INTERFACE grew to 13 slots with slot 12 in CUDA 13.1, the
//!   integrity algorithm, and that context-local-storage destructors run when
//!   the context is destroyed or reset.
//! * Other public remoting and emulation projects' notes: that the real
//!   driver's TOOLS_TLS slot 2 returns the current context and the CUDA 13
//!   table's slot 4 returns `cuCtxGetId`'s value (both used by cuBLASLt), that
//!   the real CONTEXT_CHECKS slot 2 writes 0 to its first output and leaves
//!   the second untouched (clearing it made `cublasCreate` fail), that the
//!   real CUDART_INTERFACE slot 10 is NULL, and that cudart requires the
//!   callback-hooks size word above 0x30 and the two buffer sizes above 0x1df
//!   and 0xd.
//!
//! # What is verified
//!
//! Unit tests below: lookup of every id, every size word, which slots are
//! NULL, the behaviour of each implemented slot including NULL output
//! pointers, context-local-storage semantics, and that the integrity answer
//! hashes exactly the addresses this module hands out.
//!
//! Once, outside the test suite, these tables behind a throwaway stand-in
//! driver (one fake device) satisfied NVIDIA's libcudart 12.9.79, 13.0.88 and
//! 13.5.37, static and shared: `cudaGetDeviceCount`, `cudaFree(0)`,
//! `cudaGetDeviceProperties` and `cudaMalloc` succeeded. In that run every
//! runtime asked for `f8cff951…` (refused, harmlessly), CUDART_INTERFACE,
//! TOOLS_RUNTIME_CALLBACK_HOOKS, TOOLS_TLS, CONTEXT_LOCAL_STORAGE,
//! CONTEXT_CHECKS and INTEGRITY_CHECK, and 13.5 (not 13.0) also for the CUDA
//! 13 table; the slots called were CUDART_INTERFACE 2, callback hooks 2 and
//! 6, CONTEXT_CHECKS 3 then 2, INTEGRITY_CHECK 1 three times, and
//! context-local get, put and (at exit) delete.
//!
//! Not verified: the slots that run did not reach (kernel launch, tools,
//! cuBLASLt: callback hooks 1 and 4, TOOLS_TLS 2, CUDART_INTERFACE 12, the
//! CUDA 13 table's slot 4), the meaning of the unknown slots, and whether
//! some runtime wants the CUDA 13 table longer than 5 slots (the real one
//! has more).
//!
//! # Wiring (for the rest of guest-lib)
//!
//! * Install a [`DriverHooks`] once with [`set_hooks`] before cudart can call
//!   a table (e.g. at library load or in `cuInit`); until then the slots that
//!   need it return `CUDA_ERROR_NOT_INITIALIZED` (3).
//! * `cuGetExportTable` calls [`get_export_table`]; [`export_table_name`]
//!   names a known id for logging.
//! * Whenever a context is destroyed (`cuCtxDestroy`, `cuDevicePrimaryCtxReset`,
//!   the last `cuDevicePrimaryCtxRelease`), call [`context_destroyed`] so
//!   cudart's per-context state is released.

use std::collections::BTreeMap;
use std::ffi::{c_uint, c_void};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::ptr;
use std::sync::{OnceLock, PoisonError, RwLock};

use crate::integrity::{self, CheckInputs, DeviceIdentity};
use crate::types::{err, CUcontext, CUdevice, CUmodule, CUresult};

/// More devices than any machine has; a larger count from the hooks is a bug.
const MAX_DEVICES: usize = 1024;

/// Id of CUDART_INTERFACE.
pub const CUDART_INTERFACE_UUID: [u8; 16] = [
    0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9,
];
/// Id of TOOLS_RUNTIME_CALLBACK_HOOKS.
pub const TOOLS_RUNTIME_CALLBACK_HOOKS_UUID: [u8; 16] = [
    0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66,
];
/// Id of TOOLS_TLS.
pub const TOOLS_TLS_UUID: [u8; 16] = [
    0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc,
];
/// Id of CONTEXT_LOCAL_STORAGE.
pub const CONTEXT_LOCAL_STORAGE_UUID: [u8; 16] = [
    0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93,
];
/// Id of INTEGRITY_CHECK.
pub const INTEGRITY_CHECK_UUID: [u8; 16] = [
    0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2,
];
/// Id of CONTEXT_CHECKS.
pub const CONTEXT_CHECKS_UUID: [u8; 16] = [
    0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e,
];
/// Id of the unnamed table CUDA 13's runtime requires.
pub const CUDA13_CONTEXT_UUID: [u8; 16] = [
    0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2,
];
/// Id of the table cuBLASLt 13 asks for before its first matrix product
/// (`1734dc26…`; unnamed).
pub const CUBLASLT_TABLE_UUID: [u8; 16] = [
    0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca,
];

// ---------------------------------------------------------------------------
// Hooks into the rest of guest-lib
// ---------------------------------------------------------------------------

/// PCI location of a device, as `cuDeviceGetAttribute` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciLocation {
    /// `CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID`.
    pub domain: i32,
    /// `CU_DEVICE_ATTRIBUTE_PCI_BUS_ID`.
    pub bus: i32,
    /// `CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID`.
    pub device: i32,
}

/// What the tables need from the rest of guest-lib.
///
/// Every answer must be the one the exported entry point of the same name
/// gives, from the same (cached) source: libcudart recomputes the integrity
/// hash from what `cuDriverGetVersion`, `cuDeviceGetCount`, `cuDeviceGetUuid`
/// and `cuDeviceGetAttribute` told it, and compares. Errors are `CUresult`
/// codes handed back to cudart unchanged. Implementations may be called from
/// any thread, concurrently, and from inside other driver calls' callbacks,
/// so they must not hold a lock that a table function could need.
pub trait DriverHooks: Sync {
    /// `cuDriverGetVersion`: e.g. 12080.
    fn driver_version(&self) -> i32;

    /// `cuDeviceGetCount`.
    fn device_count(&self) -> Result<i32, CUresult>;

    /// `cuDeviceGetUuid` of the device with this ordinal.
    fn device_uuid(&self, ordinal: i32) -> Result<[u8; 16], CUresult>;

    /// PCI domain, bus and device attributes of the device with this ordinal.
    fn pci_location(&self, ordinal: i32) -> Result<PciLocation, CUresult>;

    /// The primary context of `device` (CUDART_INTERFACE slot 2). The real
    /// driver hands out the handle without changing its reference count;
    /// cudart retains it itself with `cuDevicePrimaryCtxRetain`.
    fn primary_context(&self, device: CUdevice) -> Result<CUcontext, CUresult>;

    /// `cuCtxGetCurrent` of the calling thread: `Ok(null)` when none is
    /// current. Called on almost every runtime call (context-local storage
    /// with a NULL context), so it should be guest-local and cheap.
    fn current_context(&self) -> Result<CUcontext, CUresult>;

    /// `cuCtxGetId` of `context` (never NULL here). The default answers
    /// `CUDA_ERROR_NOT_SUPPORTED`.
    fn context_id(&self, context: CUcontext) -> Result<u64, CUresult> {
        let _ = context;
        Err(err::NOT_SUPPORTED)
    }

    /// Loads a module into the current context from a fatbin image, as
    /// `cuModuleLoadData` would, for CUDART_INTERFACE slots 1, 6 and 8 (used
    /// by runtimes older than the ones that call `cuLibraryLoadData`). The
    /// default answers `CUDA_ERROR_NOT_SUPPORTED`.
    ///
    /// # Safety
    ///
    /// `image` is non-NULL and points either to a fatbin wrapper (magic
    /// `0x466243b1`, whose third word points to the fatbin) or to a fatbin
    /// header (magic `0xBA55ED50`), readable for the whole image, as cudart
    /// passed it.
    unsafe fn load_module(&self, image: *const c_void) -> Result<CUmodule, CUresult> {
        let _ = image;
        Err(err::NOT_SUPPORTED)
    }
}

/// [`set_hooks`] was called a second time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HooksAlreadySet;

impl fmt::Display for HooksAlreadySet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("export-table hooks are already installed")
    }
}

impl std::error::Error for HooksAlreadySet {}

static HOOKS: OnceLock<&'static dyn DriverHooks> = OnceLock::new();

/// Installs the hooks the tables call into. Only the first call wins.
pub fn set_hooks(hooks: &'static dyn DriverHooks) -> Result<(), HooksAlreadySet> {
    HOOKS.set(hooks).map_err(|_| HooksAlreadySet)
}

fn installed_hooks() -> Option<&'static dyn DriverHooks> {
    HOOKS.get().copied()
}

/// Runs a table function's body, turning a panic into `CUDA_ERROR_UNKNOWN`
/// so that none unwinds into cudart.
fn guarded(body: impl FnOnce() -> CUresult) -> CUresult {
    panic::catch_unwind(AssertUnwindSafe(body)).unwrap_or(err::UNKNOWN)
}

/// `Err(code)` → `code`, `Ok` → `CUDA_SUCCESS`.
fn status(result: Result<(), CUresult>) -> CUresult {
    result.err().unwrap_or(err::SUCCESS)
}

// ---------------------------------------------------------------------------
// Table layout
// ---------------------------------------------------------------------------

/// One pointer-sized table entry: a function address, a size word or NULL.
#[repr(transparent)]
#[derive(Clone, Copy)]
struct Slot(*const c_void);

// SAFETY: a slot is written once, in a static initializer, and only read
// afterwards; what it holds is a code address or an integer, neither of which
// refers to data that could be shared unsafely.
unsafe impl Sync for Slot {}

impl Slot {
    /// An entry the real driver leaves NULL.
    const NULL: Slot = Slot(ptr::null());

    /// Slot 0 of a table of `slots` entries: its length in bytes.
    const fn size_word(slots: usize) -> Slot {
        Slot(ptr::without_provenance(slots * size_of::<usize>()))
    }

    /// An entry holding a function's address.
    const fn function(address: *const c_void) -> Slot {
        Slot(address)
    }
}

/// A table as cudart sees it: `N` consecutive pointer-sized entries.
#[repr(transparent)]
struct Table<const N: usize>([Slot; N]);

impl<const N: usize> Table<N> {
    /// The address handed to cudart.
    fn address(&'static self) -> *const c_void {
        ptr::from_ref(self).cast()
    }
}

/// Signature for slots nobody has identified: called with whatever
/// arguments, returns a status.
type OpaqueFn = extern "C" fn() -> CUresult;
/// CUDART_INTERFACE slot 1.
type ModuleFromFatbinFn = unsafe extern "C" fn(*mut CUmodule, *const c_void) -> CUresult;
/// CUDART_INTERFACE slot 2.
type PrimaryContextFn = unsafe extern "C" fn(*mut CUcontext, CUdevice) -> CUresult;
/// CUDART_INTERFACE slot 6.
type ModuleFromFatbinExtFn =
    unsafe extern "C" fn(*mut CUmodule, *const c_void, *mut c_void, *mut c_void, u32) -> CUresult;
/// CUDART_INTERFACE slot 7.
type UsizeNoopFn = extern "C" fn(usize);
/// CUDART_INTERFACE slot 8.
type ModuleFromFatbinHeaderFn =
    unsafe extern "C" fn(*const c_void, *mut CUmodule, *mut c_void, *mut c_void, u32) -> CUresult;
/// TOOLS_RUNTIME_CALLBACK_HOOKS slots 2 and 6.
type BufferFn = unsafe extern "C" fn(*mut *mut c_void, *mut usize);
/// TOOLS_TLS slot 2.
type ThreadContextFn = unsafe extern "C" fn(*mut CUcontext) -> CUresult;
/// CONTEXT_LOCAL_STORAGE slot 0.
type ClsPutFn =
    extern "C" fn(CUcontext, *mut c_void, *mut c_void, Option<ClsDestructor>) -> CUresult;
/// CONTEXT_LOCAL_STORAGE slot 1.
type ClsDeleteFn = extern "C" fn(CUcontext, *mut c_void) -> CUresult;
/// CONTEXT_LOCAL_STORAGE slot 2.
type ClsGetFn = unsafe extern "C" fn(*mut *mut c_void, CUcontext, *mut c_void) -> CUresult;
/// INTEGRITY_CHECK slot 1.
type IntegrityCheckFn = unsafe extern "C" fn(c_uint, u64, *mut [u64; 2]) -> CUresult;
/// CONTEXT_CHECKS slot 2.
type ContextCheckFn = unsafe extern "C" fn(CUcontext, *mut u32, *mut *const c_void) -> CUresult;
/// CONTEXT_CHECKS slot 3.
type GlobalCheckFn = extern "C" fn() -> u32;
/// CUDA 13 table slot 4.
type ContextIdFn = unsafe extern "C" fn(CUcontext, *mut u64) -> CUresult;

/// The destructor cudart registers with a context-local value, called as
/// `(context, key, value)` when the context goes away.
pub type ClsDestructor = unsafe extern "C" fn(CUcontext, *mut c_void, *mut c_void);

static CUDART_INTERFACE: Table<13> = Table([
    Slot::size_word(13),
    Slot::function(cudart_module_from_fatbin as ModuleFromFatbinFn as *const c_void),
    Slot::function(cudart_primary_context as PrimaryContextFn as *const c_void),
    Slot::function(cudart_slot3 as OpaqueFn as *const c_void),
    Slot::function(cudart_slot4 as OpaqueFn as *const c_void),
    Slot::function(cudart_slot5 as OpaqueFn as *const c_void),
    Slot::function(cudart_module_from_fatbin_ext as ModuleFromFatbinExtFn as *const c_void),
    Slot::function(cudart_slot7 as UsizeNoopFn as *const c_void),
    Slot::function(cudart_module_from_fatbin_header as ModuleFromFatbinHeaderFn as *const c_void),
    Slot::function(cudart_slot9 as OpaqueFn as *const c_void),
    Slot::NULL,
    Slot::function(cudart_slot11 as OpaqueFn as *const c_void),
    Slot::function(cudart_load_compilers as OpaqueFn as *const c_void),
]);

static TOOLS_RUNTIME_CALLBACK_HOOKS: Table<7> = Table([
    Slot::size_word(7),
    Slot::function(callback_hooks_noop as OpaqueFn as *const c_void),
    Slot::function(callback_hooks_buffer_a as BufferFn as *const c_void),
    Slot::function(callback_hooks_noop as OpaqueFn as *const c_void),
    Slot::function(callback_hooks_noop as OpaqueFn as *const c_void),
    Slot::function(callback_hooks_noop as OpaqueFn as *const c_void),
    Slot::function(callback_hooks_buffer_b as BufferFn as *const c_void),
]);

static TOOLS_TLS: Table<4> = Table([
    Slot::size_word(4),
    Slot::function(tools_tls_slot1 as OpaqueFn as *const c_void),
    Slot::function(tools_thread_context as ThreadContextFn as *const c_void),
    Slot::function(tools_tls_slot3 as OpaqueFn as *const c_void),
]);

static CONTEXT_LOCAL_STORAGE: Table<4> = Table([
    Slot::function(cls_put as ClsPutFn as *const c_void),
    Slot::function(cls_delete as ClsDeleteFn as *const c_void),
    Slot::function(cls_get as ClsGetFn as *const c_void),
    Slot::NULL,
]);

static INTEGRITY_CHECK: Table<3> = Table([
    Slot::size_word(3),
    Slot::function(integrity_check as IntegrityCheckFn as *const c_void),
    Slot::function(integrity_slot2 as OpaqueFn as *const c_void),
]);

static CONTEXT_CHECKS: Table<4> = Table([
    Slot::size_word(4),
    Slot::function(context_checks_slot1 as OpaqueFn as *const c_void),
    Slot::function(context_check as ContextCheckFn as *const c_void),
    Slot::function(global_check as GlobalCheckFn as *const c_void),
]);

static CUDA13_CONTEXT: Table<5> = Table([
    Slot::size_word(5),
    Slot::function(cuda13_slot1 as OpaqueFn as *const c_void),
    Slot::function(cuda13_slot2 as OpaqueFn as *const c_void),
    Slot::function(cuda13_slot3 as OpaqueFn as *const c_void),
    Slot::function(context_unique_id as ContextIdFn as *const c_void),
]);

/// All slots unknown. cuBLASLt 13 does not check `cuGetExportTable`'s
/// status for this id and reads slot 4 of whatever pointer it got (a
/// refused id crashed it at address 0x20); it accepts slot 4's
/// NOT_SUPPORTED. 17 slots as in NVIDIA's driver 580 (size word 0x88).
static CUBLASLT_TABLE: Table<17> = Table([
    Slot::size_word(17),
    Slot::function(cublaslt_slot1 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot2 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot3 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot4 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot5 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot6 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot7 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot8 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot9 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot10 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot11 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot12 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot13 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot14 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot15 as OpaqueFn as *const c_void),
    Slot::function(cublaslt_slot16 as OpaqueFn as *const c_void),
]);

/// Name and address of the table with this id.
fn lookup(uuid: &[u8; 16]) -> Option<(&'static str, *const c_void)> {
    let found = match *uuid {
        CUDART_INTERFACE_UUID => ("CUDART_INTERFACE", CUDART_INTERFACE.address()),
        TOOLS_RUNTIME_CALLBACK_HOOKS_UUID => (
            "TOOLS_RUNTIME_CALLBACK_HOOKS",
            TOOLS_RUNTIME_CALLBACK_HOOKS.address(),
        ),
        TOOLS_TLS_UUID => ("TOOLS_TLS", TOOLS_TLS.address()),
        CONTEXT_LOCAL_STORAGE_UUID => ("CONTEXT_LOCAL_STORAGE", CONTEXT_LOCAL_STORAGE.address()),
        INTEGRITY_CHECK_UUID => ("INTEGRITY_CHECK", INTEGRITY_CHECK.address()),
        CONTEXT_CHECKS_UUID => ("CONTEXT_CHECKS", CONTEXT_CHECKS.address()),
        CUDA13_CONTEXT_UUID => ("CUDA13_CONTEXT", CUDA13_CONTEXT.address()),
        CUBLASLT_TABLE_UUID => ("CUBLASLT_TABLE", CUBLASLT_TABLE.address()),
        _ => return None,
    };
    Some(found)
}

/// The table `cuGetExportTable` should hand out for `uuid` (the 16 bytes of
/// the `CUuuid` exactly as passed), or `None` for an id we do not serve.
/// The address is static and the same on every call, which the integrity
/// check relies on.
pub fn get_export_table(uuid: &[u8; 16]) -> Option<*const c_void> {
    lookup(uuid).map(|(_, address)| address)
}

/// The conventional name of the table with this id, for logs.
pub fn export_table_name(uuid: &[u8; 16]) -> Option<&'static str> {
    lookup(uuid).map(|(name, _)| name)
}

// ---------------------------------------------------------------------------
// Shared slot functions
// ---------------------------------------------------------------------------

/// Functions for slots whose purpose and signature are unknown; cudart was
/// not seen calling them. Each returns `CUDA_ERROR_NOT_SUPPORTED`, touches
/// nothing, and names its table and slot once on stderr (as an unsupported
/// entry point does), so a library that stumbles on one says where.
macro_rules! unknown_slots {
    ($($name:ident => $what:literal,)*) => {
        $(
            extern "C" fn $name() -> CUresult {
                crate::unsupported($what)
            }
        )*
    };
}

unknown_slots! {
    cudart_slot3 => "export table CUDART_INTERFACE slot 3",
    cudart_slot4 => "export table CUDART_INTERFACE slot 4",
    cudart_slot5 => "export table CUDART_INTERFACE slot 5",
    cudart_slot9 => "export table CUDART_INTERFACE slot 9",
    cudart_slot11 => "export table CUDART_INTERFACE slot 11",
    tools_tls_slot1 => "export table TOOLS_TLS slot 1",
    tools_tls_slot3 => "export table TOOLS_TLS slot 3",
    integrity_slot2 => "export table INTEGRITY_CHECK slot 2",
    context_checks_slot1 => "export table CONTEXT_CHECKS slot 1",
    cuda13_slot1 => "export table CUDA13_CONTEXT slot 1",
    cuda13_slot2 => "export table CUDA13_CONTEXT slot 2",
    cuda13_slot3 => "export table CUDA13_CONTEXT slot 3",
    cublaslt_slot1 => "export table 1734dc26 slot 1",
    cublaslt_slot2 => "export table 1734dc26 slot 2",
    cublaslt_slot3 => "export table 1734dc26 slot 3",
    cublaslt_slot4 => "export table 1734dc26 slot 4",
    cublaslt_slot5 => "export table 1734dc26 slot 5",
    cublaslt_slot6 => "export table 1734dc26 slot 6",
    cublaslt_slot7 => "export table 1734dc26 slot 7",
    cublaslt_slot8 => "export table 1734dc26 slot 8",
    cublaslt_slot9 => "export table 1734dc26 slot 9",
    cublaslt_slot10 => "export table 1734dc26 slot 10",
    cublaslt_slot11 => "export table 1734dc26 slot 11",
    cublaslt_slot12 => "export table 1734dc26 slot 12",
    cublaslt_slot13 => "export table 1734dc26 slot 13",
    cublaslt_slot14 => "export table 1734dc26 slot 14",
    cublaslt_slot15 => "export table 1734dc26 slot 15",
    cublaslt_slot16 => "export table 1734dc26 slot 16",
}

// ---------------------------------------------------------------------------
// CUDART_INTERFACE
// ---------------------------------------------------------------------------

/// Slot 1, `CUresult (CUmodule *module, const void *fatbin_wrapper)`: loads
/// a module from a fatbin wrapper into the current context. Runtimes that
/// predate `cuLibraryLoadData` register their kernels through it.
///
/// # Safety
///
/// `module` is NULL or writable; `fatbin_wrapper` is NULL or a fatbin
/// wrapper readable for its whole image (cudart passes its own).
unsafe extern "C" fn cudart_module_from_fatbin(
    module: *mut CUmodule,
    fatbin_wrapper: *const c_void,
) -> CUresult {
    guarded(|| {
        // SAFETY: the caller's contract is this function's.
        unsafe { load_module_into(installed_hooks(), module, fatbin_wrapper) }
    })
}

/// Slot 6, `CUresult (CUmodule *module, const void *fatbin_wrapper, void *,
/// void *, unsigned)`: slot 1 with three extra arguments of unknown meaning,
/// always NULL, NULL, 0 in the calls documented; other values are refused.
///
/// # Safety
///
/// As [`cudart_module_from_fatbin`].
unsafe extern "C" fn cudart_module_from_fatbin_ext(
    module: *mut CUmodule,
    fatbin_wrapper: *const c_void,
    extra1: *mut c_void,
    extra2: *mut c_void,
    extra3: u32,
) -> CUresult {
    guarded(|| {
        if !extra1.is_null() || !extra2.is_null() || extra3 != 0 {
            return err::NOT_SUPPORTED;
        }
        // SAFETY: the caller's contract is this function's.
        unsafe { load_module_into(installed_hooks(), module, fatbin_wrapper) }
    })
}

/// Slot 8, `CUresult (const void *fatbin_header, CUmodule *module, void *,
/// void *, unsigned)`: slot 6 taking the fatbin itself (magic `0xBA55ED50`)
/// and the output second.
///
/// # Safety
///
/// `module` is NULL or writable; `fatbin_header` is NULL or a fatbin
/// readable for its whole length.
unsafe extern "C" fn cudart_module_from_fatbin_header(
    fatbin_header: *const c_void,
    module: *mut CUmodule,
    extra1: *mut c_void,
    extra2: *mut c_void,
    extra3: u32,
) -> CUresult {
    guarded(|| {
        if !extra1.is_null() || !extra2.is_null() || extra3 != 0 {
            return err::NOT_SUPPORTED;
        }
        // SAFETY: the caller's contract is this function's.
        unsafe { load_module_into(installed_hooks(), module, fatbin_header) }
    })
}

/// Shared body of slots 1, 6 and 8.
///
/// # Safety
///
/// `module` is NULL or writable; `image` is NULL or a fatbin wrapper or
/// header readable for its whole image.
unsafe fn load_module_into(
    hooks: Option<&dyn DriverHooks>,
    module: *mut CUmodule,
    image: *const c_void,
) -> CUresult {
    if module.is_null() || image.is_null() {
        return err::INVALID_VALUE;
    }
    let Some(hooks) = hooks else {
        return err::NOT_INITIALIZED;
    };
    // SAFETY: `image` is non-NULL and, by this function's contract, a
    // readable fatbin wrapper or header, which is `load_module`'s contract.
    match unsafe { hooks.load_module(image) } {
        Ok(loaded) => {
            // SAFETY: `module` is non-NULL and writable by this function's
            // contract.
            unsafe { module.write(loaded) };
            err::SUCCESS
        }
        Err(code) => code,
    }
}

/// Slot 2, `CUresult (CUcontext *ctx, CUdevice device)`: the primary
/// context of `device`. cudart calls it once per device while it sets up a
/// device, before `cuDevicePrimaryCtxRetain`.
///
/// # Safety
///
/// `ctx` is NULL or writable.
unsafe extern "C" fn cudart_primary_context(ctx: *mut CUcontext, device: CUdevice) -> CUresult {
    guarded(|| {
        // SAFETY: the caller's contract is this function's.
        unsafe { primary_context_into(installed_hooks(), ctx, device) }
    })
}

/// Body of [`cudart_primary_context`].
///
/// # Safety
///
/// `ctx` is NULL or writable.
unsafe fn primary_context_into(
    hooks: Option<&dyn DriverHooks>,
    ctx: *mut CUcontext,
    device: CUdevice,
) -> CUresult {
    if ctx.is_null() {
        return err::INVALID_VALUE;
    }
    let Some(hooks) = hooks else {
        return err::NOT_INITIALIZED;
    };
    match hooks.primary_context(device) {
        Ok(primary) => {
            // SAFETY: `ctx` is non-NULL and writable by this function's
            // contract.
            unsafe { ctx.write(primary) };
            err::SUCCESS
        }
        Err(code) => code,
    }
}

/// Slot 7, `void (uintptr_t)`: a notification with no observable effect in
/// the real driver; nothing to do.
extern "C" fn cudart_slot7(_argument: usize) {}

/// Slot 12, `CUresult (void)`: in the real driver, loads the PTX compiler,
/// libNVVM and the tile IR compiler; cudart 13.1 and later call it while
/// initialising. Compilation happens on the host, so there is nothing to
/// load and it succeeds.
extern "C" fn cudart_load_compilers() -> CUresult {
    err::SUCCESS
}

// ---------------------------------------------------------------------------
// TOOLS_RUNTIME_CALLBACK_HOOKS
// ---------------------------------------------------------------------------

/// Raw memory cudart receives from slots 2 and 6 and may write.
///
/// The size the slot reports is counted in entries of unknown width; each
/// counted entry gets 8 bytes, the widest reading.
#[repr(C, align(64))]
struct RuntimeBuffer<const ENTRIES: usize>(std::cell::UnsafeCell<[u64; ENTRIES]>);

// SAFETY: Rust code never reads or writes the contents; the buffer is only
// handed to cudart as raw memory, and whatever cudart does with it across
// threads is cudart's own synchronisation.
unsafe impl<const ENTRIES: usize> Sync for RuntimeBuffer<ENTRIES> {}

impl<const ENTRIES: usize> RuntimeBuffer<ENTRIES> {
    const fn new() -> Self {
        RuntimeBuffer(std::cell::UnsafeCell::new([0; ENTRIES]))
    }

    /// Writes the buffer's address and reported size to the outputs given.
    ///
    /// # Safety
    ///
    /// `buffer` and `size` are each NULL or writable.
    unsafe fn hand_out(&'static self, buffer: *mut *mut c_void, size: *mut usize) {
        if !buffer.is_null() {
            // SAFETY: non-NULL and writable by this function's contract.
            unsafe { buffer.write(self.0.get().cast()) };
        }
        if !size.is_null() {
            // SAFETY: non-NULL and writable by this function's contract.
            unsafe { size.write(ENTRIES) };
        }
    }
}

/// Reported size of the buffer of slot 2 (cudart requires more than 0x1df).
const CALLBACK_BUFFER_A_ENTRIES: usize = 1024;
/// Reported size of the buffer of slot 6 (cudart requires more than 0xd).
const CALLBACK_BUFFER_B_ENTRIES: usize = 14;

static CALLBACK_BUFFER_A: RuntimeBuffer<CALLBACK_BUFFER_A_ENTRIES> = RuntimeBuffer::new();
static CALLBACK_BUFFER_B: RuntimeBuffer<CALLBACK_BUFFER_B_ENTRIES> = RuntimeBuffer::new();

/// Slots 1, 3, 4 and 5: tool-callback registration points of unknown
/// signature. cudart calls 1 and 4 while initialising; with no profiling
/// tools in the guest there is nothing to register, so they succeed and do
/// nothing.
extern "C" fn callback_hooks_noop() -> CUresult {
    err::SUCCESS
}

/// Slot 2, `void (void **buffer, size_t *size)`: a zeroed buffer of 1024
/// entries that cudart uses for its tool-callback state.
///
/// # Safety
///
/// `buffer` and `size` are each NULL or writable.
unsafe extern "C" fn callback_hooks_buffer_a(buffer: *mut *mut c_void, size: *mut usize) {
    // SAFETY: the caller's contract is `hand_out`'s.
    unsafe { CALLBACK_BUFFER_A.hand_out(buffer, size) }
}

/// Slot 6, `void (void **buffer, size_t *size)`: as slot 2, 14 entries.
///
/// # Safety
///
/// `buffer` and `size` are each NULL or writable.
unsafe extern "C" fn callback_hooks_buffer_b(buffer: *mut *mut c_void, size: *mut usize) {
    // SAFETY: the caller's contract is `hand_out`'s.
    unsafe { CALLBACK_BUFFER_B.hand_out(buffer, size) }
}

// ---------------------------------------------------------------------------
// TOOLS_TLS
// ---------------------------------------------------------------------------

/// Slot 2, `CUresult (CUcontext *ctx)`: the calling thread's current
/// context, NULL when none, as `cuCtxGetCurrent`. cudart calls it at
/// start-up; cuBLASLt uses it to key its kernel registry.
///
/// # Safety
///
/// `ctx` is NULL or writable.
unsafe extern "C" fn tools_thread_context(ctx: *mut CUcontext) -> CUresult {
    guarded(|| {
        // SAFETY: the caller's contract is this function's.
        unsafe { thread_context_into(installed_hooks(), ctx) }
    })
}

/// Body of [`tools_thread_context`].
///
/// # Safety
///
/// `ctx` is NULL or writable.
unsafe fn thread_context_into(hooks: Option<&dyn DriverHooks>, ctx: *mut CUcontext) -> CUresult {
    if ctx.is_null() {
        return err::INVALID_VALUE;
    }
    let Some(hooks) = hooks else {
        return err::NOT_INITIALIZED;
    };
    match hooks.current_context() {
        Ok(current) => {
            // SAFETY: non-NULL and writable by this function's contract.
            unsafe { ctx.write(current) };
            err::SUCCESS
        }
        Err(code) => code,
    }
}

// ---------------------------------------------------------------------------
// CONTEXT_LOCAL_STORAGE
// ---------------------------------------------------------------------------

/// A value cudart stored against a (context, key) pair.
#[derive(Clone, Copy)]
struct StoredValue {
    /// The key as cudart passed it, handed back to the destructor.
    key: *mut c_void,
    value: *mut c_void,
    destructor: Option<ClsDestructor>,
}

// SAFETY: `key` and `value` are opaque words owned by cudart that this
// module never dereferences; they are only handed back to cudart, on
// whatever thread asks.
unsafe impl Send for StoredValue {}
// SAFETY: as for `Send`; shared access only copies the word.
unsafe impl Sync for StoredValue {}

/// The guest's context-local storage, keyed by (context, key) addresses.
/// Reads (on nearly every runtime call) share the lock.
static CONTEXT_STORE: RwLock<BTreeMap<(usize, usize), StoredValue>> = RwLock::new(BTreeMap::new());

/// Resolves the context a storage call names: a NULL context means the
/// calling thread's current one.
fn resolve_context(
    hooks: Option<&dyn DriverHooks>,
    context: CUcontext,
) -> Result<CUcontext, CUresult> {
    if !context.is_null() {
        return Ok(context);
    }
    let current = hooks.ok_or(err::NOT_INITIALIZED)?.current_context()?;
    if current.is_null() {
        Err(err::INVALID_CONTEXT)
    } else {
        Ok(current)
    }
}

fn store_key(context: CUcontext, key: *mut c_void) -> (usize, usize) {
    (context.addr(), key.addr())
}

fn cls_put_in(
    hooks: Option<&dyn DriverHooks>,
    context: CUcontext,
    key: *mut c_void,
    value: *mut c_void,
    destructor: Option<ClsDestructor>,
) -> Result<(), CUresult> {
    let context = resolve_context(hooks, context)?;
    CONTEXT_STORE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(
            store_key(context, key),
            StoredValue {
                key,
                value,
                destructor,
            },
        );
    Ok(())
}

fn cls_delete_in(
    hooks: Option<&dyn DriverHooks>,
    context: CUcontext,
    key: *mut c_void,
) -> Result<(), CUresult> {
    let context = resolve_context(hooks, context)?;
    CONTEXT_STORE
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&store_key(context, key));
    Ok(())
}

fn cls_get_in(
    hooks: Option<&dyn DriverHooks>,
    context: CUcontext,
    key: *mut c_void,
) -> Result<*mut c_void, CUresult> {
    let context = resolve_context(hooks, context)?;
    CONTEXT_STORE
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&store_key(context, key))
        .map(|stored| stored.value)
        .ok_or(err::INVALID_HANDLE)
}

/// Slot 0, `CUresult (CUcontext ctx, void *key, void *value, void
/// (*destructor)(CUcontext, void *key, void *value))`: stores `value` for
/// (`ctx`, `key`), replacing any earlier value (whose destructor is then
/// forgotten, not called). A NULL `ctx` means the current context. cudart
/// keeps its per-context runtime state here; `destructor` (may be NULL) runs
/// when the context is destroyed, see [`context_destroyed`].
extern "C" fn cls_put(
    context: CUcontext,
    key: *mut c_void,
    value: *mut c_void,
    destructor: Option<ClsDestructor>,
) -> CUresult {
    guarded(|| {
        status(cls_put_in(
            installed_hooks(),
            context,
            key,
            value,
            destructor,
        ))
    })
}

/// Slot 1, `CUresult (CUcontext ctx, void *key)`: forgets the value for
/// (`ctx`, `key`) without calling its destructor; succeeds when there was
/// none. cudart calls it at exit for the state it stored.
extern "C" fn cls_delete(context: CUcontext, key: *mut c_void) -> CUresult {
    guarded(|| status(cls_delete_in(installed_hooks(), context, key)))
}

/// Slot 2, `CUresult (void **value, CUcontext ctx, void *key)`: the value
/// stored for (`ctx`, `key`), or `CUDA_ERROR_INVALID_HANDLE` (400) when there
/// is none. cudart calls it, usually with a NULL (current) context, on
/// almost every runtime call, which is why the store lives in the guest.
///
/// # Safety
///
/// `value` is NULL or writable.
unsafe extern "C" fn cls_get(
    value: *mut *mut c_void,
    context: CUcontext,
    key: *mut c_void,
) -> CUresult {
    guarded(|| {
        if value.is_null() {
            return err::INVALID_VALUE;
        }
        match cls_get_in(installed_hooks(), context, key) {
            Ok(stored) => {
                // SAFETY: non-NULL and writable by this function's contract.
                unsafe { value.write(stored) };
                err::SUCCESS
            }
            Err(code) => code,
        }
    })
}

/// Forgets every context-local value stored for `context` and calls each
/// one's destructor as `(context, key, value)`, as the real driver does when
/// a context is destroyed or a primary context reset. Call it from
/// `cuCtxDestroy`, `cuDevicePrimaryCtxReset` and the
/// `cuDevicePrimaryCtxRelease` that drops the last reference, after the
/// context stops being usable and without holding any lock a driver call
/// could need: the destructors are cudart's and may call back into the
/// driver. Returns how many values were dropped.
// `context` is only handed to cudart's destructors, never dereferenced here.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn context_destroyed(context: CUcontext) -> usize {
    let dropped: Vec<StoredValue> = {
        let mut store = CONTEXT_STORE
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let keys: Vec<(usize, usize)> = store
            .range((context.addr(), 0)..=(context.addr(), usize::MAX))
            .map(|(&k, _)| k)
            .collect();
        keys.into_iter().filter_map(|k| store.remove(&k)).collect()
    };
    // The lock is released: a destructor may use the store again.
    for stored in &dropped {
        if let Some(destructor) = stored.destructor {
            // SAFETY: cudart registered `destructor` with this value through
            // slot 0 to be called exactly so, once, when the context goes
            // away; the entry was removed above, so it is not called twice.
            unsafe { destructor(context, stored.key, stored.value) };
        }
    }
    dropped.len()
}

// ---------------------------------------------------------------------------
// INTEGRITY_CHECK
// ---------------------------------------------------------------------------

/// Slot 1, `CUresult (unsigned version, uint64_t unix_secs, uint64_t
/// out[2])`: cudart calls it three times while initialising, with versions
/// `v`, `v + 1` and `v + 2`, and refuses the driver unless each answer
/// matches its own computation ([`crate::integrity`]).
///
/// # Safety
///
/// `out` is NULL or writable for 16 bytes.
unsafe extern "C" fn integrity_check(
    version: c_uint,
    unix_secs: u64,
    out: *mut [u64; 2],
) -> CUresult {
    guarded(|| {
        if out.is_null() {
            return err::INVALID_VALUE;
        }
        match integrity_answer(installed_hooks(), version, unix_secs) {
            Ok(answer) => {
                // SAFETY: non-NULL and writable for 16 bytes by this
                // function's contract; unaligned writes ask nothing more.
                unsafe { out.write_unaligned(answer) };
                err::SUCCESS
            }
            Err(code) => code,
        }
    })
}

/// Gathers the guest-local inputs and computes the answer for `version`.
fn integrity_answer(
    hooks: Option<&dyn DriverHooks>,
    version: u32,
    unix_secs: u64,
) -> Result<[u64; 2], CUresult> {
    if let Some(answer) = integrity::fixed_answer(version) {
        return Ok(answer);
    }
    let hooks = hooks.ok_or(err::NOT_INITIALIZED)?;
    let count = hooks.device_count()?;
    let count = usize::try_from(count)
        .ok()
        .filter(|&count| count <= MAX_DEVICES)
        .ok_or(err::UNKNOWN)?;
    let devices = (0..count as i32)
        .map(|ordinal| {
            let uuid = hooks.device_uuid(ordinal)?;
            let pci = hooks.pci_location(ordinal)?;
            Ok(DeviceIdentity {
                uuid,
                pci_domain: pci.domain,
                pci_bus: pci.bus,
                pci_device: pci.device,
            })
        })
        .collect::<Result<Vec<_>, CUresult>>()?;
    let inputs = CheckInputs {
        driver_version: hooks.driver_version() as u32,
        process_id: std::process::id(),
        thread: calling_thread_tag(),
        cudart_table: CUDART_INTERFACE.address().addr(),
        integrity_table: INTEGRITY_CHECK.address().addr(),
        check_function: INTEGRITY_CHECK.0[1].0.addr(),
        devices: &devices,
    };
    Ok(integrity::check_answer(version, unix_secs, &inputs))
}

/// The calling thread as the check hashes it: `pthread_self()` truncated to
/// 32 bits.
fn calling_thread_tag() -> u32 {
    // SAFETY: `pthread_self` has no preconditions and cannot fail.
    let thread = unsafe { libc::pthread_self() };
    thread as u32
}

// ---------------------------------------------------------------------------
// CONTEXT_CHECKS
// ---------------------------------------------------------------------------

/// Slot 2, `CUresult (CUcontext ctx, unsigned *flags, const void **detail)`:
/// per-context check bits that are never observably set. Like the real
/// driver it writes 0 to `*flags` and leaves `*detail` untouched (clearing
/// it was observed to make `cublasCreate` fail).
///
/// # Safety
///
/// `flags` is NULL or writable; `detail` is not accessed.
unsafe extern "C" fn context_check(
    _context: CUcontext,
    flags: *mut u32,
    _detail: *mut *const c_void,
) -> CUresult {
    if flags.is_null() {
        return err::INVALID_VALUE;
    }
    // SAFETY: non-NULL and writable by this function's contract.
    unsafe { flags.write(0) };
    err::SUCCESS
}

/// Slot 3, `unsigned (void)`: a process-wide check that returns 0 on the
/// real driver.
extern "C" fn global_check() -> u32 {
    0
}

// ---------------------------------------------------------------------------
// The unnamed CUDA 13 table
// ---------------------------------------------------------------------------

/// Slot 4, `CUresult (CUcontext ctx, unsigned long long *id)`: the unique
/// id of `ctx` (NULL: the current context), the value `cuCtxGetId` gives.
/// cudart 13 requires the table to exist; cuBLASLt reads this slot.
///
/// # Safety
///
/// `id` is NULL or writable.
unsafe extern "C" fn context_unique_id(context: CUcontext, id: *mut u64) -> CUresult {
    guarded(|| {
        if id.is_null() {
            return err::INVALID_VALUE;
        }
        let hooks = installed_hooks();
        let answer = resolve_context(hooks, context)
            .and_then(|context| hooks.ok_or(err::NOT_INITIALIZED)?.context_id(context));
        match answer {
            Ok(unique) => {
                // SAFETY: non-NULL and writable by this function's contract.
                unsafe { id.write(unique) };
                err::SUCCESS
            }
            Err(code) => code,
        }
    })
}

#[cfg(test)]
mod tests;
