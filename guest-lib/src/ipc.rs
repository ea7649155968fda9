//! CUDA IPC between processes of one VM: `cuIpcGetMemHandle`,
//! `cuIpcOpenMemHandle`, `cuIpcCloseMemHandle`.
//!
//! Every process of a VM is served by the VM's one worker, so an export is
//! an entry in the worker's table: the host answers `cuIpcGetMemHandle`
//! with an unguessable token, which the 64-byte handle carries with the
//! allocation's base and size (the handle travels between processes as
//! the application sends it: a pipe, a file, a socket). Opening it in
//! another process of the same VM gives the same address; the worker lends
//! the memory to the opening process's context for each of its requests,
//! so its kernels, copies and memsets reach it. A handle from another VM
//! names no export of this worker and is refused. The host supports it
//! where contexts can hand memory over (SimGpu); elsewhere
//! `cuIpcGetMemHandle` is CUDA_ERROR_NOT_SUPPORTED.
//!
//! Events made with `CU_EVENT_INTERPROCESS` (and, as the driver requires
//! for a handle, `CU_EVENT_DISABLE_TIMING`) export the same way; an opened
//! handle is an event handle of the opening process that names the
//! exporter's event, lent to its context as memory is. Every record of
//! such an event, in any process, is answered by the host before it
//! returns: the processes order themselves by other means (a barrier in
//! shared memory, a pipe) after recording, and a wait another process
//! then issues must find the record, and the work before it, already on
//! the device, whichever channel the worker serves first.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crate::context::{out, require_current};
use crate::ffi_result;
use crate::state;
use crate::types::{err, CUdeviceptr, CUresult};

/// `CUipcMemHandle`: 64 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcMemHandle {
    reserved: [u8; 64],
}

/// What this library's handles start with.
const MAGIC: [u8; 8] = *b"fgpuipc1";
/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`, the only flag.
const LAZY_ENABLE_PEER_ACCESS: u32 = 1;

/// Opens of this process: base -> how many times opened, less closes.
static OPENED: Mutex<Option<HashMap<u64, u32>>> = Mutex::new(None);
/// Events of this process that other processes may record or wait for:
/// made with `CU_EVENT_INTERPROCESS` (-> their flags) or opened.
static EVENTS: Mutex<Option<HashMap<u64, u32>>> = Mutex::new(None);

/// `CU_EVENT_DISABLE_TIMING` and `CU_EVENT_INTERPROCESS`.
const DISABLE_TIMING: u32 = 2;
const INTERPROCESS: u32 = 4;
/// What this library's event handles start with.
const EVENT_MAGIC: [u8; 8] = *b"fgpuipce";

/// `CUipcEventHandle`: 64 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcEventHandle {
    reserved: [u8; 64],
}

/// Notes event `e`, made with `flags`, if other processes may use it.
/// Whether event flags ask for an interprocess event with timing, which
/// the driver does not make.
pub fn timed_interprocess(flags: u32) -> bool {
    flags & INTERPROCESS != 0 && flags & DISABLE_TIMING == 0
}

/// Remembers event `e`'s flags if it was made interprocess.
pub fn event_created(e: u64, flags: u32) {
    if flags & INTERPROCESS != 0 {
        if let Ok(mut m) = EVENTS.lock() {
            m.get_or_insert_with(HashMap::new).insert(e, flags);
        }
    }
}

/// Forgets event `e` (destroyed).
pub fn event_destroyed(e: u64) {
    if let Ok(mut m) = EVENTS.lock() {
        if let Some(m) = m.as_mut() {
            m.remove(&e);
        }
    }
}

/// Whether other processes may record or wait for event `e`: its records
/// are answered once the host has them.
pub fn is_shared_event(e: u64) -> bool {
    EVENTS
        .lock()
        .ok()
        .is_some_and(|m| m.as_ref().is_some_and(|m| m.contains_key(&e)))
}

/// `cuIpcGetEventHandle`.
#[no_mangle]
pub extern "C" fn cuIpcGetEventHandle(handle: *mut IpcEventHandle, e: *mut c_void) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if handle.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let flags = EVENTS
            .lock()
            .ok()
            .and_then(|m| m.as_ref().and_then(|m| m.get(&(e as u64)).copied()));
        if flags.is_none_or(|f| f & DISABLE_TIMING == 0) {
            return Err(err::INVALID_VALUE);
        }
        let token = state::with(|cu| cu.ipc_get_event_handle(e as u64))?;
        let mut h = [0u8; 64];
        h[..8].copy_from_slice(&EVENT_MAGIC);
        h[8..16].copy_from_slice(&token.to_le_bytes());
        // SAFETY: caller passes a writable handle (checked for null).
        unsafe { out(handle, IpcEventHandle { reserved: h }) }
    })
}

/// `cuIpcOpenEventHandle`.
#[no_mangle]
pub extern "C" fn cuIpcOpenEventHandle(pe: *mut *mut c_void, handle: IpcEventHandle) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if pe.is_null() || handle.reserved[..8] != EVENT_MAGIC {
            return Err(err::INVALID_VALUE);
        }
        let token = u64::from_le_bytes(handle.reserved[8..16].try_into().expect("8 bytes"));
        let e = state::with(|cu| cu.ipc_open_event_handle(token))?;
        event_created(e, INTERPROCESS | DISABLE_TIMING);
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(pe, e as usize as *mut c_void) }
    })
}

fn encode(token: u64, base: u64, size: u64) -> IpcMemHandle {
    let mut h = [0u8; 64];
    h[..8].copy_from_slice(&MAGIC);
    h[8..16].copy_from_slice(&token.to_le_bytes());
    h[16..24].copy_from_slice(&base.to_le_bytes());
    h[24..32].copy_from_slice(&size.to_le_bytes());
    IpcMemHandle { reserved: h }
}

/// The token of a handle this library made; `None` for anything else.
fn token_of(h: &IpcMemHandle) -> Option<u64> {
    let r = &h.reserved;
    (r[..8] == MAGIC).then(|| u64::from_le_bytes(r[8..16].try_into().expect("8 bytes")))
}

/// `cuIpcGetMemHandle`.
#[no_mangle]
pub extern "C" fn cuIpcGetMemHandle(handle: *mut IpcMemHandle, dptr: CUdeviceptr) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if handle.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let (token, base, size) = state::with(|cu| cu.ipc_get_mem_handle(dptr))?;
        // SAFETY: caller passes a writable handle (checked for null).
        unsafe { out(handle, encode(token, base, size)) }
    })
}

fn open(dptr: *mut CUdeviceptr, handle: IpcMemHandle, flags: u32) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if dptr.is_null() || flags & !LAZY_ENABLE_PEER_ACCESS != 0 {
            return Err(err::INVALID_VALUE);
        }
        let token = token_of(&handle).ok_or(err::INVALID_VALUE)?;
        let base = open_token(token)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(dptr, base) }
    })
}

/// Opens export `token` (of `cuIpcGetMemHandle` or a pool's pointer) →
/// its base address.
pub fn open_token(token: u64) -> Result<u64, CUresult> {
    let (base, size) = state::with(|cu| cu.ipc_open_mem_handle(token))?;
    if let Ok(mut o) = OPENED.lock() {
        *o.get_or_insert_with(HashMap::new).entry(base).or_insert(0) += 1;
    }
    // Device memory for copies' direction and pointer attributes, never
    // an allocation `cuMemFree` frees.
    crate::memory::register_mapping(base, size);
    Ok(base)
}

/// Closes one open of the allocation at `base`.
pub fn close(base: u64) -> Result<(), CUresult> {
    state::with(|cu| cu.ipc_close_mem_handle(base))?;
    let last = OPENED
        .lock()
        .ok()
        .and_then(|mut o| {
            let m = o.as_mut()?;
            let n = m.get_mut(&base)?;
            *n -= 1;
            (*n == 0).then(|| m.remove(&base))
        })
        .is_some();
    if last {
        crate::memory::forget_mapping(base);
    }
    Ok(())
}

/// `cuIpcOpenMemHandle` (CUDA 4 ABI).
#[no_mangle]
pub extern "C" fn cuIpcOpenMemHandle(
    dptr: *mut CUdeviceptr,
    handle: IpcMemHandle,
    flags: u32,
) -> CUresult {
    open(dptr, handle, flags)
}

/// `cuIpcOpenMemHandle_v2`.
#[no_mangle]
pub extern "C" fn cuIpcOpenMemHandle_v2(
    dptr: *mut CUdeviceptr,
    handle: IpcMemHandle,
    flags: u32,
) -> CUresult {
    open(dptr, handle, flags)
}

/// `cuIpcCloseMemHandle`.
#[no_mangle]
pub extern "C" fn cuIpcCloseMemHandle(dptr: CUdeviceptr) -> CUresult {
    ffi_result(|| {
        require_current()?;
        close(dptr)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_carry_their_token_and_others_are_refused() {
        let h = encode(0xfeed_beef_0123, 0x7000_0000_0000, 4096);
        assert_eq!(token_of(&h), Some(0xfeed_beef_0123));
        let mut forged = h;
        forged.reserved[0] ^= 1;
        assert_eq!(token_of(&forged), None);
        assert_eq!(token_of(&IpcMemHandle { reserved: [0; 64] }), None);
    }
}
