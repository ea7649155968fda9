//! Tests of the export tables: layout, each implemented slot called through
//! the table the way cudart calls it, and context-local storage.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::*;

/// A device set and per-thread current context, standing in for the rest of
/// guest-lib.
struct FakeDriver;

const FAKE_DEVICES: i32 = 2;
const FAKE_DRIVER_VERSION: i32 = 12080;

thread_local! {
    static CURRENT_CONTEXT: Cell<usize> = const { Cell::new(0) };
}

fn context_handle(raw: usize) -> CUcontext {
    ptr::without_provenance_mut(raw)
}

fn set_current(raw: usize) {
    CURRENT_CONTEXT.with(|c| c.set(raw));
}

fn fake_uuid(ordinal: i32) -> [u8; 16] {
    core::array::from_fn(|i| (ordinal as u8).wrapping_mul(16).wrapping_add(i as u8))
}

fn fake_pci(ordinal: i32) -> PciLocation {
    PciLocation {
        domain: 0,
        bus: 0x40 + ordinal,
        device: 0,
    }
}

impl DriverHooks for FakeDriver {
    fn driver_version(&self) -> i32 {
        FAKE_DRIVER_VERSION
    }

    fn device_count(&self) -> Result<i32, CUresult> {
        Ok(FAKE_DEVICES)
    }

    fn device_uuid(&self, ordinal: i32) -> Result<[u8; 16], CUresult> {
        if (0..FAKE_DEVICES).contains(&ordinal) {
            Ok(fake_uuid(ordinal))
        } else {
            Err(err::INVALID_DEVICE)
        }
    }

    fn pci_location(&self, ordinal: i32) -> Result<PciLocation, CUresult> {
        if (0..FAKE_DEVICES).contains(&ordinal) {
            Ok(fake_pci(ordinal))
        } else {
            Err(err::INVALID_DEVICE)
        }
    }

    fn primary_context(&self, device: CUdevice) -> Result<CUcontext, CUresult> {
        if (0..FAKE_DEVICES).contains(&device) {
            Ok(context_handle(0x1000 + device as usize))
        } else {
            Err(err::INVALID_DEVICE)
        }
    }

    fn current_context(&self) -> Result<CUcontext, CUresult> {
        Ok(context_handle(CURRENT_CONTEXT.with(Cell::get)))
    }

    fn context_id(&self, context: CUcontext) -> Result<u64, CUresult> {
        Ok(context.addr() as u64 * 3)
    }
}

static FAKE: FakeDriver = FakeDriver;

/// Installs the fake; every test that needs hooks installs the same one.
fn with_fake() {
    let _ = set_hooks(&FAKE);
}

fn table(uuid: &[u8; 16]) -> *const *const c_void {
    get_export_table(uuid).expect("known table").cast()
}

/// Slot `index` of the table with this id, as cudart reads it.
fn slot(uuid: &[u8; 16], index: usize) -> *const c_void {
    // SAFETY: every test asks only for indices below the table's length.
    let entry = unsafe { table(uuid).add(index) };
    // SAFETY: in bounds of a static table of pointer-sized entries.
    unsafe { entry.read() }
}

/// Slot `index` reinterpreted as a function of type `F`.
///
/// # Safety
///
/// The slot holds a function whose ABI is `F`.
unsafe fn slot_fn<F: Copy>(uuid: &[u8; 16], index: usize) -> F {
    let address = slot(uuid, index);
    assert!(!address.is_null(), "slot {index} is NULL");
    assert_eq!(size_of::<F>(), size_of::<*const c_void>());
    // SAFETY: a non-NULL function address, and `F` is a function pointer
    // type of that ABI by this function's contract.
    unsafe { std::mem::transmute_copy(&address) }
}

const ALL_TABLES: [([u8; 16], &str, usize); 8] = [
    (CUDART_INTERFACE_UUID, "CUDART_INTERFACE", 13),
    (
        TOOLS_RUNTIME_CALLBACK_HOOKS_UUID,
        "TOOLS_RUNTIME_CALLBACK_HOOKS",
        7,
    ),
    (TOOLS_TLS_UUID, "TOOLS_TLS", 4),
    (CONTEXT_LOCAL_STORAGE_UUID, "CONTEXT_LOCAL_STORAGE", 4),
    (INTEGRITY_CHECK_UUID, "INTEGRITY_CHECK", 3),
    (CONTEXT_CHECKS_UUID, "CONTEXT_CHECKS", 4),
    (CUDA13_CONTEXT_UUID, "CUDA13_CONTEXT", 5),
    (CUBLASLT_TABLE_UUID, "CUBLASLT_TABLE", 17),
];

#[test]
fn every_known_id_has_its_table() {
    for (uuid, name, _) in ALL_TABLES {
        let address = get_export_table(&uuid).expect(name);
        assert!(!address.is_null());
        assert_eq!(export_table_name(&uuid), Some(name));
        // Stable: the integrity check hashes these addresses.
        assert_eq!(get_export_table(&uuid), Some(address));
    }
    let mut addresses: Vec<_> = ALL_TABLES
        .iter()
        .map(|(uuid, _, _)| get_export_table(uuid).unwrap().addr())
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    assert_eq!(addresses.len(), ALL_TABLES.len());
}

#[test]
fn unknown_ids_are_refused() {
    let asked_before_init = [
        0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d,
        0xd9,
    ];
    assert_eq!(get_export_table(&asked_before_init), None);
    assert_eq!(export_table_name(&asked_before_init), None);
    assert_eq!(get_export_table(&[0; 16]), None);
    // One byte off a known id.
    let mut near = CUDART_INTERFACE_UUID;
    near[15] ^= 1;
    assert_eq!(get_export_table(&near), None);
}

#[test]
fn size_words_give_the_table_length_in_bytes() {
    let word = size_of::<usize>();
    for (uuid, name, slots) in ALL_TABLES {
        if uuid == CONTEXT_LOCAL_STORAGE_UUID {
            continue;
        }
        assert_eq!(slot(&uuid, 0).addr(), slots * word, "{name}");
    }
    // cudart requires the callback-hooks table to be longer than 0x30 bytes.
    assert!(slot(&TOOLS_RUNTIME_CALLBACK_HOOKS_UUID, 0).addr() > 0x30);
}

#[test]
fn context_local_storage_has_no_size_word() {
    let put = slot(&CONTEXT_LOCAL_STORAGE_UUID, 0);
    assert_eq!(put, cls_put as ClsPutFn as *const c_void);
}

#[test]
fn only_the_slots_the_real_driver_leaves_null_are_null() {
    for (uuid, name, slots) in ALL_TABLES {
        for index in 0..slots {
            let expect_null = (uuid == CUDART_INTERFACE_UUID && index == 10)
                || (uuid == CONTEXT_LOCAL_STORAGE_UUID && index == 3);
            assert_eq!(slot(&uuid, index).is_null(), expect_null, "{name}[{index}]");
        }
    }
}

#[test]
fn slots_cudart_calls_hold_their_functions() {
    let expected: [(&[u8; 16], usize, *const c_void); 14] = [
        (
            &CUDART_INTERFACE_UUID,
            2,
            cudart_primary_context as PrimaryContextFn as *const c_void,
        ),
        (
            &CUDART_INTERFACE_UUID,
            12,
            cudart_load_compilers as OpaqueFn as *const c_void,
        ),
        (
            &TOOLS_RUNTIME_CALLBACK_HOOKS_UUID,
            1,
            callback_hooks_noop as OpaqueFn as *const c_void,
        ),
        (
            &TOOLS_RUNTIME_CALLBACK_HOOKS_UUID,
            2,
            callback_hooks_buffer_a as BufferFn as *const c_void,
        ),
        (
            &TOOLS_RUNTIME_CALLBACK_HOOKS_UUID,
            4,
            callback_hooks_noop as OpaqueFn as *const c_void,
        ),
        (
            &TOOLS_RUNTIME_CALLBACK_HOOKS_UUID,
            6,
            callback_hooks_buffer_b as BufferFn as *const c_void,
        ),
        (
            &TOOLS_TLS_UUID,
            2,
            tools_thread_context as ThreadContextFn as *const c_void,
        ),
        (
            &CONTEXT_LOCAL_STORAGE_UUID,
            0,
            cls_put as ClsPutFn as *const c_void,
        ),
        (
            &CONTEXT_LOCAL_STORAGE_UUID,
            1,
            cls_delete as ClsDeleteFn as *const c_void,
        ),
        (
            &CONTEXT_LOCAL_STORAGE_UUID,
            2,
            cls_get as ClsGetFn as *const c_void,
        ),
        (
            &INTEGRITY_CHECK_UUID,
            1,
            integrity_check as IntegrityCheckFn as *const c_void,
        ),
        (
            &CONTEXT_CHECKS_UUID,
            2,
            context_check as ContextCheckFn as *const c_void,
        ),
        (
            &CONTEXT_CHECKS_UUID,
            3,
            global_check as GlobalCheckFn as *const c_void,
        ),
        (
            &CUDA13_CONTEXT_UUID,
            4,
            context_unique_id as ContextIdFn as *const c_void,
        ),
    ];
    for (uuid, index, function) in expected {
        assert_eq!(
            slot(uuid, index),
            function,
            "{:?}[{index}]",
            export_table_name(uuid)
        );
    }
}

#[test]
fn unknown_slots_answer_not_supported() {
    let unknown: [(&[u8; 16], usize); 12] = [
        (&CUDART_INTERFACE_UUID, 3),
        (&CUDART_INTERFACE_UUID, 4),
        (&CUDART_INTERFACE_UUID, 5),
        (&CUDART_INTERFACE_UUID, 9),
        (&CUDART_INTERFACE_UUID, 11),
        (&TOOLS_TLS_UUID, 1),
        (&TOOLS_TLS_UUID, 3),
        (&INTEGRITY_CHECK_UUID, 2),
        (&CONTEXT_CHECKS_UUID, 1),
        (&CUDA13_CONTEXT_UUID, 1),
        (&CUBLASLT_TABLE_UUID, 4),
        (&CUBLASLT_TABLE_UUID, 16),
    ];
    for (uuid, index) in unknown {
        // SAFETY: these slots hold unknown-slot functions, each an `OpaqueFn`.
        let f: OpaqueFn = unsafe { slot_fn(uuid, index) };
        assert_eq!(f(), err::NOT_SUPPORTED);
    }
    // Called with arguments, as cudart would, it still just answers.
    // SAFETY: slot 3 holds an unknown-slot function; extra arguments are the caller's
    // to clean up under the C calling conventions we build for.
    let with_args: unsafe extern "C" fn(*mut c_void, u64, u32) -> CUresult =
        unsafe { slot_fn(&CUDART_INTERFACE_UUID, 3) };
    // SAFETY: the function reads none of its arguments.
    let status = unsafe { with_args(ptr::null_mut(), 7, 9) };
    assert_eq!(status, err::NOT_SUPPORTED);
}

#[test]
fn cudart_interface_primary_context() {
    with_fake();
    // SAFETY: slot 2 is a `PrimaryContextFn`.
    let primary: PrimaryContextFn = unsafe { slot_fn(&CUDART_INTERFACE_UUID, 2) };
    let mut ctx: CUcontext = ptr::null_mut();
    // SAFETY: `ctx` is writable.
    let status = unsafe { primary(&mut ctx, 1) };
    assert_eq!(status, err::SUCCESS);
    assert_eq!(ctx.addr(), 0x1001);
    // SAFETY: as above.
    let status = unsafe { primary(&mut ctx, 7) };
    assert_eq!(status, err::INVALID_DEVICE);
    // SAFETY: NULL output is allowed and refused.
    let status = unsafe { primary(ptr::null_mut(), 0) };
    assert_eq!(status, err::INVALID_VALUE);
    // Without hooks installed.
    // SAFETY: `ctx` is writable.
    let status = unsafe { primary_context_into(None, &mut ctx, 0) };
    assert_eq!(status, err::NOT_INITIALIZED);
}

#[test]
fn cudart_interface_other_slots() {
    // SAFETY: slot 7 is a `UsizeNoopFn`.
    let slot7: UsizeNoopFn = unsafe { slot_fn(&CUDART_INTERFACE_UUID, 7) };
    slot7(42);
    // SAFETY: slot 12 is an `OpaqueFn`.
    let load_compilers: OpaqueFn = unsafe { slot_fn(&CUDART_INTERFACE_UUID, 12) };
    assert_eq!(load_compilers(), err::SUCCESS);

    with_fake();
    let image = [0u8; 64];
    let mut module: CUmodule = ptr::null_mut();
    // SAFETY: slot 1 is a `ModuleFromFatbinFn`.
    let from_wrapper: ModuleFromFatbinFn = unsafe { slot_fn(&CUDART_INTERFACE_UUID, 1) };
    let wrapper: *const c_void = image.as_ptr().cast();
    // SAFETY: valid output and image; the fake does not load modules.
    let status = unsafe { from_wrapper(&mut module, wrapper) };
    assert_eq!(status, err::NOT_SUPPORTED);
    // SAFETY: NULL pointers are refused before any use.
    let status = unsafe { from_wrapper(ptr::null_mut(), wrapper) };
    assert_eq!(status, err::INVALID_VALUE);
    // SAFETY: as above.
    let status = unsafe { from_wrapper(&mut module, ptr::null()) };
    assert_eq!(status, err::INVALID_VALUE);
    // SAFETY: slot 6 is a `ModuleFromFatbinExtFn`.
    let ext: ModuleFromFatbinExtFn = unsafe { slot_fn(&CUDART_INTERFACE_UUID, 6) };
    let none = ptr::null_mut();
    // SAFETY: valid output and image; unexpected extras are refused.
    let status = unsafe { ext(&mut module, wrapper, none, none, 1) };
    assert_eq!(status, err::NOT_SUPPORTED);
    // SAFETY: slot 8 is a `ModuleFromFatbinHeaderFn`.
    let header: ModuleFromFatbinHeaderFn = unsafe { slot_fn(&CUDART_INTERFACE_UUID, 8) };
    // SAFETY: NULL output refused before use.
    let status = unsafe { header(wrapper, ptr::null_mut(), none, none, 0) };
    assert_eq!(status, err::INVALID_VALUE);
}

/// Module loading goes through the hook and writes its handle.
#[test]
fn module_slots_use_the_load_hook() {
    struct Loader;
    impl DriverHooks for Loader {
        fn driver_version(&self) -> i32 {
            0
        }
        fn device_count(&self) -> Result<i32, CUresult> {
            Ok(0)
        }
        fn device_uuid(&self, _: i32) -> Result<[u8; 16], CUresult> {
            Err(err::INVALID_DEVICE)
        }
        fn pci_location(&self, _: i32) -> Result<PciLocation, CUresult> {
            Err(err::INVALID_DEVICE)
        }
        fn primary_context(&self, _: CUdevice) -> Result<CUcontext, CUresult> {
            Err(err::INVALID_DEVICE)
        }
        fn current_context(&self) -> Result<CUcontext, CUresult> {
            Ok(ptr::null_mut())
        }
        unsafe fn load_module(&self, image: *const c_void) -> Result<CUmodule, CUresult> {
            Ok(ptr::without_provenance_mut(image.addr() + 1))
        }
    }
    let image = [0u8; 16];
    let mut module: CUmodule = ptr::null_mut();
    // SAFETY: valid output and image.
    let status = unsafe { load_module_into(Some(&Loader), &mut module, image.as_ptr().cast()) };
    assert_eq!(status, err::SUCCESS);
    assert_eq!(module.addr(), image.as_ptr().addr() + 1);
}

#[test]
fn callback_hook_buffers() {
    // SAFETY: slots 1 and 4 are `OpaqueFn`s.
    let noop1: OpaqueFn = unsafe { slot_fn(&TOOLS_RUNTIME_CALLBACK_HOOKS_UUID, 1) };
    // SAFETY: as above.
    let noop4: OpaqueFn = unsafe { slot_fn(&TOOLS_RUNTIME_CALLBACK_HOOKS_UUID, 4) };
    assert_eq!(noop1(), err::SUCCESS);
    assert_eq!(noop4(), err::SUCCESS);

    let mut seen = Vec::new();
    for (index, entries) in [(2, 1024), (6, 14)] {
        // SAFETY: slots 2 and 6 are `BufferFn`s.
        let get: BufferFn = unsafe { slot_fn(&TOOLS_RUNTIME_CALLBACK_HOOKS_UUID, index) };
        let mut buffer: *mut c_void = ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: both outputs writable.
        unsafe { get(&mut buffer, &mut size) };
        assert!(!buffer.is_null());
        assert_eq!(size, entries);
        // The buffer holds 8 bytes per reported entry, and cudart may write
        // all of them.
        // SAFETY: the buffer is `entries` u64s of static, writable memory
        // that nothing else in this process uses.
        unsafe { ptr::write_bytes(buffer.cast::<u64>(), 0, entries) };
        // NULL outputs are skipped, not written.
        // SAFETY: NULL is allowed for either output.
        unsafe { get(ptr::null_mut(), ptr::null_mut()) };
        seen.push(buffer);
    }
    assert_ne!(seen[0], seen[1]);
    // cudart requires the two sizes above 0x1df and 0xd.
    const { assert!(CALLBACK_BUFFER_A_ENTRIES > 0x1df && CALLBACK_BUFFER_B_ENTRIES > 0xd) };
}

#[test]
fn tools_tls_reports_the_current_context() {
    with_fake();
    // SAFETY: slot 2 is a `ThreadContextFn`.
    let current: ThreadContextFn = unsafe { slot_fn(&TOOLS_TLS_UUID, 2) };
    let mut ctx: CUcontext = context_handle(0xdead);
    set_current(0);
    // SAFETY: `ctx` is writable.
    let status = unsafe { current(&mut ctx) };
    assert_eq!(status, err::SUCCESS);
    assert!(ctx.is_null());
    set_current(0x7700);
    // SAFETY: as above.
    let status = unsafe { current(&mut ctx) };
    assert_eq!(status, err::SUCCESS);
    assert_eq!(ctx.addr(), 0x7700);
    set_current(0);
    // SAFETY: NULL refused.
    let status = unsafe { current(ptr::null_mut()) };
    assert_eq!(status, err::INVALID_VALUE);
    // SAFETY: `ctx` is writable.
    let status = unsafe { thread_context_into(None, &mut ctx) };
    assert_eq!(status, err::NOT_INITIALIZED);
}

struct Cls {
    put: ClsPutFn,
    delete: ClsDeleteFn,
    get: ClsGetFn,
}

fn cls() -> Cls {
    // Slots 0, 1 and 2 hold exactly these types (checked by
    // `slots_cudart_calls_hold_their_functions`).
    // SAFETY: slot 0 is a `ClsPutFn`.
    let put = unsafe { slot_fn(&CONTEXT_LOCAL_STORAGE_UUID, 0) };
    // SAFETY: slot 1 is a `ClsDeleteFn`.
    let delete = unsafe { slot_fn(&CONTEXT_LOCAL_STORAGE_UUID, 1) };
    // SAFETY: slot 2 is a `ClsGetFn`.
    let get = unsafe { slot_fn(&CONTEXT_LOCAL_STORAGE_UUID, 2) };
    Cls { put, delete, get }
}

impl Cls {
    fn get(&self, context: usize, key: usize) -> Result<usize, CUresult> {
        let mut value: *mut c_void = context_handle(0xbad);
        // SAFETY: `value` is writable.
        let status =
            unsafe { (self.get)(&mut value, context_handle(context), context_handle(key)) };
        if status == err::SUCCESS {
            Ok(value.addr())
        } else {
            Err(status)
        }
    }

    fn put(
        &self,
        context: usize,
        key: usize,
        value: usize,
        destructor: Option<ClsDestructor>,
    ) -> CUresult {
        (self.put)(
            context_handle(context),
            context_handle(key),
            context_handle(value),
            destructor,
        )
    }

    fn delete(&self, context: usize, key: usize) -> CUresult {
        (self.delete)(context_handle(context), context_handle(key))
    }
}

// Each test below uses its own context values: the store is process-wide.

#[test]
fn context_local_storage_put_get_delete() {
    let cls = cls();
    let (ctx, other_ctx, key, other_key) = (0x10_0000, 0x10_1000, 0x50, 0x60);
    assert_eq!(cls.get(ctx, key), Err(err::INVALID_HANDLE));
    assert_eq!(cls.put(ctx, key, 0xaaaa, None), err::SUCCESS);
    assert_eq!(cls.get(ctx, key), Ok(0xaaaa));
    // Keyed by both context and key.
    assert_eq!(cls.get(other_ctx, key), Err(err::INVALID_HANDLE));
    assert_eq!(cls.get(ctx, other_key), Err(err::INVALID_HANDLE));
    // A second put replaces the value.
    assert_eq!(cls.put(ctx, key, 0xbbbb, None), err::SUCCESS);
    assert_eq!(cls.get(ctx, key), Ok(0xbbbb));
    // A NULL value is a value.
    assert_eq!(cls.put(ctx, other_key, 0, None), err::SUCCESS);
    assert_eq!(cls.get(ctx, other_key), Ok(0));
    assert_eq!(cls.delete(ctx, key), err::SUCCESS);
    assert_eq!(cls.get(ctx, key), Err(err::INVALID_HANDLE));
    assert_eq!(cls.get(ctx, other_key), Ok(0));
    // Deleting what is not there succeeds.
    assert_eq!(cls.delete(ctx, key), err::SUCCESS);
    assert_eq!(cls.delete(ctx, other_key), err::SUCCESS);
}

#[test]
fn context_local_storage_null_pointers() {
    let cls = cls();
    // SAFETY: a NULL output is refused before any use.
    let status = unsafe {
        (cls.get)(
            ptr::null_mut(),
            context_handle(0x11_0000),
            context_handle(1),
        )
    };
    assert_eq!(status, err::INVALID_VALUE);
    // A NULL key is just a key.
    assert_eq!(cls.put(0x11_0000, 0, 0x77, None), err::SUCCESS);
    assert_eq!(cls.get(0x11_0000, 0), Ok(0x77));
    assert_eq!(cls.delete(0x11_0000, 0), err::SUCCESS);
}

#[test]
fn context_local_storage_null_context_means_current() {
    with_fake();
    let cls = cls();
    let key = 0x70;
    set_current(0x12_0000);
    assert_eq!(cls.put(0, key, 0x1234, None), err::SUCCESS);
    assert_eq!(cls.get(0x12_0000, key), Ok(0x1234));
    assert_eq!(cls.get(0, key), Ok(0x1234));
    set_current(0x12_1000);
    assert_eq!(cls.get(0, key), Err(err::INVALID_HANDLE));
    set_current(0x12_0000);
    assert_eq!(cls.delete(0, key), err::SUCCESS);
    assert_eq!(cls.get(0x12_0000, key), Err(err::INVALID_HANDLE));
    // No current context: nothing to resolve to.
    set_current(0);
    assert_eq!(cls.get(0, key), Err(err::INVALID_CONTEXT));
    assert_eq!(cls.put(0, key, 1, None), err::INVALID_CONTEXT);
    assert_eq!(cls.delete(0, key), err::INVALID_CONTEXT);
    // Without hooks a NULL context cannot be resolved either.
    assert_eq!(
        cls_get_in(None, ptr::null_mut(), ptr::null_mut()),
        Err(err::NOT_INITIALIZED)
    );
}

/// (context, key, value) triples the test destructor saw.
static DESTROYED: Mutex<Vec<(usize, usize, usize)>> = Mutex::new(Vec::new());
static DESTRUCTOR_CALLS: AtomicUsize = AtomicUsize::new(0);

unsafe extern "C" fn record_destruction(context: CUcontext, key: *mut c_void, value: *mut c_void) {
    DESTRUCTOR_CALLS.fetch_add(1, Ordering::Relaxed);
    DESTROYED
        .lock()
        .unwrap()
        .push((context.addr(), key.addr(), value.addr()));
    // A destructor may use the store: the lock is not held while it runs.
    let _ = cls_delete(context, key);
}

#[test]
fn destructors_run_when_the_context_is_destroyed_not_on_delete() {
    let cls = cls();
    let (ctx, survivor) = (0x13_0000, 0x13_1000);
    assert_eq!(
        cls.put(ctx, 1, 0x100, Some(record_destruction)),
        err::SUCCESS
    );
    assert_eq!(
        cls.put(ctx, 2, 0x200, Some(record_destruction)),
        err::SUCCESS
    );
    assert_eq!(cls.put(ctx, 3, 0x300, None), err::SUCCESS);
    assert_eq!(
        cls.put(ctx, 4, 0x400, Some(record_destruction)),
        err::SUCCESS
    );
    assert_eq!(
        cls.put(survivor, 1, 0x500, Some(record_destruction)),
        err::SUCCESS
    );
    // Delete forgets without calling the destructor.
    assert_eq!(cls.delete(ctx, 4), err::SUCCESS);
    assert!(!DESTROYED.lock().unwrap().iter().any(|&(c, _, _)| c == ctx));

    assert_eq!(context_destroyed(context_handle(ctx)), 3);
    let mut seen: Vec<_> = DESTROYED
        .lock()
        .unwrap()
        .iter()
        .copied()
        .filter(|&(c, _, _)| c == ctx)
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, [(ctx, 1, 0x100), (ctx, 2, 0x200)]);
    for key in 1..=4 {
        assert_eq!(cls.get(ctx, key), Err(err::INVALID_HANDLE));
    }
    // Other contexts keep their values; a second destruction finds nothing.
    assert_eq!(cls.get(survivor, 1), Ok(0x500));
    assert_eq!(context_destroyed(context_handle(ctx)), 0);
    assert_eq!(cls.delete(survivor, 1), err::SUCCESS);
    assert!(DESTRUCTOR_CALLS.load(Ordering::Relaxed) >= 2);
}

#[test]
fn integrity_fixed_versions_through_the_table() {
    // SAFETY: slot 1 is an `IntegrityCheckFn`.
    let check: IntegrityCheckFn = unsafe { slot_fn(&INTEGRITY_CHECK_UUID, 1) };
    for version in [12060, 12090, 13050] {
        let mut out = [0u64; 2];
        // SAFETY: `out` is writable for 16 bytes.
        let status = unsafe { check(version, 1_700_000_000, &mut out) };
        assert_eq!(status, err::SUCCESS);
        assert_eq!(Some(out), integrity::fixed_answer(version));
        // SAFETY: as above.
        let status = unsafe { check(version + 1, 1_700_000_000, &mut out) };
        assert_eq!(status, err::SUCCESS);
        assert_eq!(Some(out), integrity::fixed_answer(version + 1));
    }
    // Fixed versions need no hooks.
    assert_eq!(
        integrity_answer(None, 12060, 0),
        Ok(integrity::fixed_answer(12060).unwrap())
    );
    // SAFETY: NULL output refused.
    let status = unsafe { check(12060, 0, ptr::null_mut()) };
    assert_eq!(status, err::INVALID_VALUE);
}

/// The hashed answer covers exactly the inputs the module documents: this
/// process, this thread, the addresses handed out through the tables, and
/// the devices the hooks report.
#[test]
fn integrity_hashed_version_through_the_table() {
    with_fake();
    // SAFETY: slot 1 is an `IntegrityCheckFn`.
    let check: IntegrityCheckFn = unsafe { slot_fn(&INTEGRITY_CHECK_UUID, 1) };
    let mut out = [0u64; 2];
    // SAFETY: `out` is writable for 16 bytes.
    let status = unsafe { check(12062, 1_700_000_123, &mut out) };
    assert_eq!(status, err::SUCCESS);

    let devices: Vec<DeviceIdentity> = (0..FAKE_DEVICES)
        .map(|ordinal| DeviceIdentity {
            uuid: fake_uuid(ordinal),
            pci_domain: fake_pci(ordinal).domain,
            pci_bus: fake_pci(ordinal).bus,
            pci_device: fake_pci(ordinal).device,
        })
        .collect();
    // SAFETY: `pthread_self` has no preconditions.
    let thread = unsafe { libc::pthread_self() } as u32;
    let inputs = CheckInputs {
        driver_version: FAKE_DRIVER_VERSION as u32,
        process_id: std::process::id(),
        thread,
        cudart_table: get_export_table(&CUDART_INTERFACE_UUID).unwrap().addr(),
        integrity_table: get_export_table(&INTEGRITY_CHECK_UUID).unwrap().addr(),
        check_function: slot(&INTEGRITY_CHECK_UUID, 1).addr(),
        devices: &devices,
    };
    assert_eq!(out, integrity::check_answer(12062, 1_700_000_123, &inputs));
    // Another thread gets another answer.
    let elsewhere = std::thread::spawn(move || {
        let mut out = [0u64; 2];
        // SAFETY: `out` is writable for 16 bytes.
        let status = unsafe { check(12062, 1_700_000_123, &mut out) };
        (status, out)
    })
    .join()
    .unwrap();
    assert_eq!(elsewhere.0, err::SUCCESS);
    assert_ne!(elsewhere.1, out);
    // Without hooks the hashed versions cannot be answered.
    assert_eq!(integrity_answer(None, 12062, 0), Err(err::NOT_INITIALIZED));
}

#[test]
fn integrity_refuses_impossible_device_counts() {
    struct Broken(i32);
    impl DriverHooks for Broken {
        fn driver_version(&self) -> i32 {
            12080
        }
        fn device_count(&self) -> Result<i32, CUresult> {
            Ok(self.0)
        }
        fn device_uuid(&self, _: i32) -> Result<[u8; 16], CUresult> {
            Err(err::INVALID_DEVICE)
        }
        fn pci_location(&self, _: i32) -> Result<PciLocation, CUresult> {
            Ok(fake_pci(0))
        }
        fn primary_context(&self, _: CUdevice) -> Result<CUcontext, CUresult> {
            Err(err::INVALID_DEVICE)
        }
        fn current_context(&self) -> Result<CUcontext, CUresult> {
            Ok(ptr::null_mut())
        }
    }
    assert_eq!(
        integrity_answer(Some(&Broken(-1)), 12062, 0),
        Err(err::UNKNOWN)
    );
    assert_eq!(
        integrity_answer(Some(&Broken(1 << 20)), 12062, 0),
        Err(err::UNKNOWN)
    );
    // A failing device query is passed on.
    assert_eq!(
        integrity_answer(Some(&Broken(1)), 12062, 0),
        Err(err::INVALID_DEVICE)
    );
    // No devices: the header alone is hashed.
    assert!(integrity_answer(Some(&Broken(0)), 12062, 0).is_ok());
}

#[test]
fn context_checks() {
    // SAFETY: slot 2 is a `ContextCheckFn`.
    let check: ContextCheckFn = unsafe { slot_fn(&CONTEXT_CHECKS_UUID, 2) };
    let mut flags = 0xffff_ffffu32;
    let sentinel = context_handle(0x5151).cast_const();
    let mut detail: *const c_void = sentinel;
    // SAFETY: both outputs writable.
    let status = unsafe { check(context_handle(0x14_0000), &mut flags, &mut detail) };
    assert_eq!(status, err::SUCCESS);
    assert_eq!(flags, 0);
    assert_eq!(detail, sentinel, "the second output is left untouched");
    // SAFETY: NULL flags refused; NULL detail never touched.
    let status = unsafe { check(ptr::null_mut(), ptr::null_mut(), &mut detail) };
    assert_eq!(status, err::INVALID_VALUE);
    // SAFETY: as above.
    let status = unsafe { check(ptr::null_mut(), &mut flags, ptr::null_mut()) };
    assert_eq!(status, err::SUCCESS);
    // SAFETY: slot 3 is a `GlobalCheckFn`.
    let global: GlobalCheckFn = unsafe { slot_fn(&CONTEXT_CHECKS_UUID, 3) };
    assert_eq!(global(), 0);
}

#[test]
fn cuda13_context_id() {
    with_fake();
    // SAFETY: slot 4 is a `ContextIdFn`.
    let id_of: ContextIdFn = unsafe { slot_fn(&CUDA13_CONTEXT_UUID, 4) };
    let mut id = 0u64;
    // SAFETY: `id` is writable.
    let status = unsafe { id_of(context_handle(0x100), &mut id) };
    assert_eq!(status, err::SUCCESS);
    assert_eq!(id, 0x300);
    set_current(0x200);
    // SAFETY: as above; NULL context means the current one.
    let status = unsafe { id_of(ptr::null_mut(), &mut id) };
    assert_eq!(status, err::SUCCESS);
    assert_eq!(id, 0x600);
    set_current(0);
    // SAFETY: as above.
    let status = unsafe { id_of(ptr::null_mut(), &mut id) };
    assert_eq!(status, err::INVALID_CONTEXT);
    // SAFETY: NULL output refused.
    let status = unsafe { id_of(context_handle(0x100), ptr::null_mut()) };
    assert_eq!(status, err::INVALID_VALUE);
}

#[test]
fn a_panicking_body_becomes_unknown() {
    let status = guarded(|| panic!("a hook panicked"));
    assert_eq!(status, err::UNKNOWN);
    assert_eq!(guarded(|| err::SUCCESS), err::SUCCESS);
}

#[test]
fn hooks_install_once() {
    with_fake();
    assert_eq!(set_hooks(&FAKE), Err(HooksAlreadySet));
}
