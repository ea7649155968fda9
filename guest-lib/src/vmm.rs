//! The virtual-memory API: address ranges reserved without memory,
//! memory made without an address, and mappings of one into the other.
//!
//! Reservations, memory and mappings live on the host (each channel's
//! own, checked there: sizes, offsets and addresses are multiples of the
//! 2 MiB granularity, a mapping lies inside one reservation over no other,
//! memory counts against the VM's quota from `cuMemCreate` until its last
//! mapping is gone after `cuMemRelease`). The device reaches a mapping
//! once `cuMemSetAccess` gives it access, as with the driver. This side
//! keeps what the queries need: each handle's size and references
//! (`cuMemRetainAllocationHandle` adds one, `cuMemRelease` drops one, the
//! host frees at the last), and each mapping's handle and access.
//!
//! On SimGpu a mapping is of a whole `cuMemCreate` allocation and an
//! allocation is mapped once at a time (what vectorAddMMAP-style code and
//! PyTorch's expandable segments do); other mappings fail with
//! CUDA_ERROR_NOT_SUPPORTED. A copy or memset must lie inside one mapping.
//!
//! As with the driver, handles, reservations and mappings are the
//! process's, not a context's: each call goes to the host context that
//! made what it names (`cuMemCreate` and `cuMemAddressReserve` need no
//! current context; with none, the primary's host context serves them).
//! Memory mapped into a reservation of another host context crosses as
//! the host's shareable memory does. What a destroyed context held went
//! with it on the host; unmapping or freeing it afterwards succeeds.
//!
//! Shareable handles of `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`
//! (`cuMemExportToShareableHandle`) are file descriptors of a memfd that
//! names the memory by the host's token; another process of the VM that
//! receives the descriptor imports a handle of its own from it, and the
//! memory lives until the last handle and mapping of any process is gone.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::Mutex;

use fairgpu_protocol::cuda::VMM_GRANULARITY;

use crate::context::{self, out, require_current, HostKey};
use crate::types::{err, CUdeviceptr, CUresult};
use crate::{ffi_result, state};

/// `CUmemAllocationProp`: type (1: pinned), requested shareable handle
/// types, location (1: a device, and its ordinal), Windows metadata, and
/// flags (compression, RDMA, usage).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllocationProp {
    alloc_type: u32,
    handle_types: u32,
    location_type: u32,
    location_id: i32,
    win32_metadata: *mut c_void,
    flags: [u8; 8],
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AccessDesc {
    location_type: u32,
    location_id: i32,
    flags: u32,
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Location {
    kind: u32,
    id: i32,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`, `CU_MEM_ALLOCATION_TYPE_PINNED`.
const LOCATION_DEVICE: u32 = 1;
const ALLOCATION_PINNED: u32 = 1;
/// `CU_MEM_ALLOCATION_COMP_GENERIC` (`allocFlags.compressionType`; 0 is none).
const COMP_GENERIC: u8 = 1;
/// `CU_MEM_ACCESS_FLAGS_PROT_*`.
const PROT_NONE: u32 = 0;
const PROT_READ: u32 = 1;
const PROT_READWRITE: u32 = 3;
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
const HANDLE_POSIX_FD: u32 = 1;
/// What this library's shareable descriptors hold: a magic, the host's
/// token, and whether the memory is compressible.
const SHARE_MAGIC: [u8; 8] = *b"fgpuvmem";
const SHARE_LEN: usize = 17;

#[derive(Debug)]
struct Memory {
    /// `CU_MEM_ALLOCATION_COMP_GENERIC` was asked for and obtained.
    compressed: bool,
    /// `cuMemCreate` and each `cuMemRetainAllocationHandle`.
    refs: u32,
    /// The shareable handle types asked for at `cuMemCreate` (or the one
    /// it was imported from).
    handle_types: u32,
    /// The host context that holds the handle.
    key: HostKey,
}

#[derive(Debug)]
struct Mapping {
    bytes: u64,
    handle: u64,
    prot: u32,
    /// The host context of the reservation it lies in.
    key: HostKey,
}

#[derive(Debug, Default)]
struct Table {
    memory: HashMap<u64, Memory>,
    mappings: BTreeMap<u64, Mapping>,
    /// Reservations: base -> (bytes, the host context that made it).
    reservations: BTreeMap<u64, (u64, HostKey)>,
}

impl Table {
    /// The host context of the reservation holding `ptr`, if known.
    fn reservation_key(&self, ptr: u64) -> Option<HostKey> {
        let (&b, &(n, key)) = self.reservations.range(..=ptr).next_back()?;
        (ptr < b.saturating_add(n)).then_some(key)
    }
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Table) -> Result<R, CUresult>) -> Result<R, CUresult> {
    let mut t = TABLE.lock().map_err(|_| err::UNKNOWN)?;
    f(t.get_or_insert_with(Table::default))
}

/// Checks an allocation's properties: pinned memory of device 0, with
/// POSIX file descriptors as the only shareable handles.
fn check_prop(prop: *const AllocationProp) -> Result<AllocationProp, CUresult> {
    if prop.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a `CUmemAllocationProp`.
    let p = unsafe { prop.read_unaligned() };
    if p.alloc_type != ALLOCATION_PINNED || p.location_type != LOCATION_DEVICE {
        return Err(err::INVALID_VALUE);
    }
    if p.location_id != 0 {
        return Err(err::INVALID_DEVICE);
    }
    if p.handle_types & !HANDLE_POSIX_FD != 0 {
        return Err(crate::unsupported(
            "cuMemCreate with shareable handle types other than POSIX file descriptors",
        ));
    }
    Ok(p)
}

/// `cuMemGetAllocationGranularity`: 2 MiB, minimum and recommended.
#[no_mangle]
pub extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const AllocationProp,
    _option: u32,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        check_prop(prop)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(granularity, VMM_GRANULARITY as usize) }
    })
}

/// `cuMemAddressReserve`: a fixed address is a hint the host does not
/// take (as the driver may not).
#[no_mangle]
pub extern "C" fn cuMemAddressReserve(
    ptr: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    _addr: CUdeviceptr,
    flags: u64,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if ptr.is_null() || flags != 0 {
            return Err(err::INVALID_VALUE);
        }
        let key = context::host_of_current();
        let base = state::with_in(key, |cu| {
            cu.mem_address_reserve(size as u64, alignment as u64)
        })?;
        with(|t| {
            t.reservations.insert(base, (size as u64, key));
            Ok(())
        })?;
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(ptr, base) }
    })
}

/// `cuMemAddressFree`.
#[no_mangle]
pub extern "C" fn cuMemAddressFree(ptr: CUdeviceptr, size: usize) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let key = with(|t| Ok(t.reservations.get(&ptr).map(|&(_, k)| k)))?;
        let key = key.unwrap_or_else(context::host_of_current);
        match state::with_in(key, |cu| cu.mem_address_free(ptr, size as u64)) {
            // The reservation went with its context.
            Ok(()) | Err(err::CONTEXT_IS_DESTROYED) => {}
            Err(e) => return Err(e),
        }
        with(|t| {
            t.reservations.remove(&ptr);
            Ok(())
        })
    })
}

/// `cuMemCreate`.
#[no_mangle]
pub extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const AllocationProp,
    flags: u64,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let p = check_prop(prop)?;
        if handle.is_null() || flags != 0 || p.flags[0] > COMP_GENERIC {
            return Err(err::INVALID_VALUE);
        }
        let key = context::host_of_current();
        let (h, compressed) = state::with_in(key, |cu| {
            cu.mem_create_compressible(size as u64, p.flags[0] == COMP_GENERIC)
        })?;
        with(|t| {
            t.memory.insert(
                h,
                Memory {
                    compressed,
                    refs: 1,
                    handle_types: p.handle_types,
                    key,
                },
            );
            Ok(())
        })?;
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(handle, h) }
    })
}

/// `cuMemRelease`: drops one reference; the host frees the memory at the
/// last (and, if it is mapped, once it is unmapped).
#[no_mangle]
pub extern "C" fn cuMemRelease(handle: u64) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let (last, key) = with(|t| {
            let m = t.memory.get_mut(&handle).ok_or(err::INVALID_VALUE)?;
            m.refs -= 1;
            Ok((m.refs == 0, m.key))
        })?;
        if !last {
            return Ok(());
        }
        let r = match state::with_in(key, |cu| cu.mem_release(handle)) {
            // It went with its context.
            Err(err::CONTEXT_IS_DESTROYED) => Ok(()),
            r => r,
        };
        with(|t| {
            match r {
                Ok(()) => {
                    t.memory.remove(&handle);
                }
                Err(_) => {
                    if let Some(m) = t.memory.get_mut(&handle) {
                        m.refs += 1;
                    }
                }
            }
            Ok(())
        })?;
        r
    })
}

/// `cuMemMap`.
#[no_mangle]
pub extern "C" fn cuMemMap(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if flags != 0 {
            return Err(err::INVALID_VALUE);
        }
        let (key, mem_key) = with(|t| {
            let mem_key = t.memory.get(&handle).map(|m| m.key);
            let key = t.reservation_key(ptr);
            Ok((
                key.or(mem_key).unwrap_or_else(context::host_of_current),
                mem_key,
            ))
        })?;
        match mem_key {
            Some(mk) if mk != key => {
                // Memory of another host context than the reservation's:
                // it crosses as shared memory does, through a handle of
                // the reservation's context released at once (the host
                // keeps the memory while the mapping lasts).
                let token = state::with_in(mk, |cu| cu.mem_export(handle))?;
                let (h, _) = state::with_in(key, |cu| cu.mem_import(token))?;
                let r = state::with_in(key, |cu| cu.mem_map(ptr, size as u64, offset as u64, h));
                let _ = state::with_in(key, |cu| cu.mem_release(h));
                r?;
            }
            _ => state::with_in(key, |cu| {
                cu.mem_map(ptr, size as u64, offset as u64, handle)
            })?,
        }
        with(|t| {
            t.mappings.insert(
                ptr,
                Mapping {
                    bytes: size as u64,
                    handle,
                    prot: PROT_NONE,
                    key,
                },
            );
            Ok(())
        })?;
        crate::memory::register_mapping(ptr, size as u64);
        Ok(())
    })
}

/// `cuMemUnmap`: whole mappings.
#[no_mangle]
pub extern "C" fn cuMemUnmap(ptr: CUdeviceptr, size: usize) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let key = with(|t| Ok(t.mappings.get(&ptr).map(|m| m.key)))?;
        let key = key.unwrap_or_else(context::host_of_current);
        // Kernels queued on the mapping finish first, as the driver waits.
        let r = state::with_in(key, |cu| cu.ctx_synchronize())
            .and_then(|()| state::with_in(key, |cu| cu.mem_unmap(ptr, size as u64)));
        match r {
            // The mapping went with its context.
            Ok(()) | Err(err::CONTEXT_IS_DESTROYED) => {}
            Err(e) => return Err(e),
        }
        let end = ptr.saturating_add(size as u64);
        let gone: Vec<u64> = with(|t| {
            let gone: Vec<u64> = t.mappings.range(ptr..end).map(|(&a, _)| a).collect();
            for a in &gone {
                t.mappings.remove(a);
            }
            Ok(gone)
        })?;
        for a in gone {
            crate::memory::forget_mapping(a);
        }
        Ok(())
    })
}

/// `cuMemSetAccess`: the device's access to whole mappings (a descriptor
/// for another location is refused: one device, and host access to
/// device memory does not exist).
#[no_mangle]
pub extern "C" fn cuMemSetAccess(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const AccessDesc,
    count: usize,
) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if desc.is_null() || count == 0 || count > 64 {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes `count` (bounded) descriptors.
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let mut prot = None;
        for d in descs {
            if d.location_type != LOCATION_DEVICE {
                return Err(err::INVALID_VALUE);
            }
            if d.location_id != 0 {
                return Err(err::INVALID_DEVICE);
            }
            if !matches!(d.flags, PROT_NONE | PROT_READ | PROT_READWRITE) {
                return Err(err::INVALID_VALUE);
            }
            prot = Some(d.flags);
        }
        let prot = prot.ok_or(err::INVALID_VALUE)?;
        let key = with(|t| Ok(t.mappings.get(&ptr).map(|m| m.key)))?;
        let key = key.unwrap_or_else(context::host_of_current);
        state::with_in(key, |cu| {
            cu.mem_set_access(ptr, size as u64, u64::from(prot))
        })?;
        let end = ptr.saturating_add(size as u64);
        with(|t| {
            for (_, m) in t.mappings.range_mut(ptr..end) {
                m.prot = prot;
            }
            Ok(())
        })
    })
}

/// `cuMemGetAccess`: the device's access to the mapping holding `ptr`.
#[no_mangle]
pub extern "C" fn cuMemGetAccess(
    flags: *mut u64,
    location: *const Location,
    ptr: CUdeviceptr,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if location.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a `CUmemLocation`.
        let l = unsafe { location.read_unaligned() };
        if l.kind != LOCATION_DEVICE || l.id != 0 {
            return Err(err::INVALID_DEVICE);
        }
        let p = with(|t| {
            let (&base, m) = t
                .mappings
                .range(..=ptr)
                .next_back()
                .ok_or(err::INVALID_VALUE)?;
            if ptr >= base + m.bytes {
                return Err(err::INVALID_VALUE);
            }
            Ok(m.prot)
        })?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(flags, u64::from(p)) }
    })
}

/// `cuMemRetainAllocationHandle`: the handle of the memory mapped at
/// `addr`, with one more reference (the caller releases it).
#[no_mangle]
pub extern "C" fn cuMemRetainAllocationHandle(handle: *mut u64, addr: *mut c_void) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let ptr = addr as u64;
        let h = with(|t| {
            let (&base, m) = t
                .mappings
                .range(..=ptr)
                .next_back()
                .ok_or(err::INVALID_VALUE)?;
            if ptr >= base + m.bytes {
                return Err(err::INVALID_VALUE);
            }
            let h = m.handle;
            t.memory.get_mut(&h).ok_or(err::INVALID_VALUE)?.refs += 1;
            Ok(h)
        })?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(handle, h) }
    })
}

/// `cuMemGetAllocationPropertiesFromHandle`: pinned memory of device 0.
#[no_mangle]
pub extern "C" fn cuMemGetAllocationPropertiesFromHandle(
    prop: *mut AllocationProp,
    handle: u64,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let (compressed, handle_types) = with(|t| {
            t.memory
                .get(&handle)
                .map(|m| (m.compressed, m.handle_types))
                .ok_or(err::INVALID_VALUE)
        })?;
        let mut flags = [0u8; 8];
        flags[0] = if compressed { COMP_GENERIC } else { 0 };
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe {
            out(
                prop,
                AllocationProp {
                    alloc_type: ALLOCATION_PINNED,
                    handle_types,
                    location_type: LOCATION_DEVICE,
                    location_id: 0,
                    win32_metadata: std::ptr::null_mut(),
                    flags,
                },
            )
        }
    })
}

/// `cuMemExportToShareableHandle`: a file descriptor (a memfd naming the
/// memory by the host's token) for another process of the VM, of memory
/// made to be shared that way.
#[no_mangle]
pub extern "C" fn cuMemExportToShareableHandle(
    shareable: *mut c_void,
    handle: u64,
    kind: u32,
    flags: u64,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if shareable.is_null() || flags != 0 {
            return Err(err::INVALID_VALUE);
        }
        if kind != HANDLE_POSIX_FD {
            return Err(crate::unsupported(
                "cuMemExportToShareableHandle of a handle type other than POSIX file descriptors",
            ));
        }
        let (key, compressed, types) = with(|t| {
            let m = t.memory.get(&handle).ok_or(err::INVALID_VALUE)?;
            Ok((m.key, m.compressed, m.handle_types))
        })?;
        if types & HANDLE_POSIX_FD == 0 {
            // As the driver: only the types asked for at cuMemCreate.
            return Err(err::INVALID_VALUE);
        }
        let token = state::with_in(key, |cu| cu.mem_export(handle))?;
        let mut text = [0u8; SHARE_LEN];
        text[..8].copy_from_slice(&SHARE_MAGIC);
        text[8..16].copy_from_slice(&token.to_le_bytes());
        text[16] = u8::from(compressed);
        let fd = crate::memfd::with_bytes(c"fairgpu-vmem", &text).ok_or(err::OUT_OF_MEMORY)?;
        // SAFETY: the caller passes room for an `int` (POSIX handle type).
        unsafe { shareable.cast::<i32>().write(fd) };
        Ok(())
    })
}

/// `cuMemImportFromShareableHandle`: a handle of this process naming the
/// memory another process of the VM exported (the descriptor it passed
/// on, given as the pointer-sized value itself, as with the driver).
#[no_mangle]
pub extern "C" fn cuMemImportFromShareableHandle(
    handle: *mut u64,
    os_handle: *mut c_void,
    kind: u32,
) -> CUresult {
    ffi_result(|| {
        state::device()?;
        if handle.is_null() {
            return Err(err::INVALID_VALUE);
        }
        if kind != HANDLE_POSIX_FD {
            return Err(crate::unsupported(
                "cuMemImportFromShareableHandle of a handle type other than POSIX file descriptors",
            ));
        }
        let fd = i32::try_from(os_handle as usize).map_err(|_| err::INVALID_VALUE)?;
        let mut text = [0u8; SHARE_LEN];
        if !crate::memfd::read_at(fd, &mut text) || text[..8] != SHARE_MAGIC {
            return Err(err::INVALID_VALUE);
        }
        let token = u64::from_le_bytes(text[8..16].try_into().expect("8 bytes"));
        let key = context::host_of_current();
        let (h, _bytes) = state::with_in(key, |cu| cu.mem_import(token))?;
        with(|t| {
            t.memory.insert(
                h,
                Memory {
                    compressed: text[16] == 1,
                    refs: 1,
                    handle_types: HANDLE_POSIX_FD,
                    key,
                },
            );
            Ok(())
        })?;
        // SAFETY: non-null slot provided by the caller.
        unsafe { out(handle, h) }
    })
}
