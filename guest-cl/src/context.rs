//! Contexts and command queues.
//!
//! A context is guest-only: the channel has one host context, shared by
//! every context of the process. A queue is a host queue, always in order
//! (out-of-order execution is refused), with profiling if asked for.

use std::ffi::c_void;
use std::sync::Arc;

use fairgpu_protocol::Opcode;

use crate::platform::{check_device, device, platform, type_matches};
use crate::registry::{self, ParentRef};
use crate::types::*;
use crate::{conn, event, guard, guard_obj, raw};

/// A context's state.
#[derive(Debug)]
pub struct Context {
    /// The properties as given, with their terminating 0 (`None`: NULL).
    pub props: Option<Vec<isize>>,
    /// Kept, never called: the host reports errors through return values.
    _notify: ContextNotify,
    _user_data: usize,
}

/// A command queue's state.
#[derive(Debug)]
pub struct Queue {
    /// Its context.
    pub context: ParentRef,
    /// `CL_QUEUE_PROPERTIES`.
    pub props: u64,
    /// The host's queue.
    pub host: u64,
}

impl Queue {
    /// Whether commands may run out of order.
    pub fn out_of_order(&self) -> bool {
        self.props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE != 0
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        conn::release_later(Opcode::ClReleaseQueue, self.host);
    }
}

/// Longest property list read (pairs), against a list with no terminator.
const MAX_PROPS: usize = 64;

/// Reads a 0-terminated property list of pairs.
///
/// # Safety
/// `p` is null or a 0-terminated list of `T` pairs.
pub(crate) unsafe fn read_props<T: Copy + Default + PartialEq>(
    p: *const T,
) -> Result<Option<Vec<T>>, i32> {
    if p.is_null() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for i in 0..2 * MAX_PROPS + 1 {
        // SAFETY: the list is 0-terminated per the contract, and no element
        // past the terminator (which ends the loop) is read.
        let v = unsafe { raw::get(p.wrapping_add(i)) };
        out.push(v);
        if v == T::default() && i % 2 == 0 {
            return Ok(Some(out));
        }
    }
    Err(CL_INVALID_PROPERTY)
}

/// Checks a context property list (with its terminator).
pub fn check_context_props(list: &[isize]) -> Result<(), i32> {
    let mut seen = Vec::new();
    for pair in list.chunks_exact(2) {
        let (name, value) = (pair[0], pair[1]);
        if seen.contains(&name) {
            return Err(CL_INVALID_PROPERTY);
        }
        seen.push(name);
        match name {
            CL_CONTEXT_PLATFORM => {
                if value as usize != platform() as usize {
                    return Err(CL_INVALID_PLATFORM);
                }
            }
            CL_CONTEXT_INTEROP_USER_SYNC => {}
            _ => return Err(CL_INVALID_PROPERTY),
        }
    }
    Ok(())
}

fn new_context(
    properties: *const isize,
    notify: ContextNotify,
    user_data: *mut c_void,
) -> Result<Handle, i32> {
    // SAFETY: properties is null or the application's 0-terminated list.
    let props = unsafe { read_props(properties) }?;
    if let Some(p) = &props {
        check_context_props(p)?;
    }
    if notify.is_none() && !user_data.is_null() {
        return Err(CL_INVALID_VALUE);
    }
    if !conn::connected() {
        return Err(CL_INVALID_PLATFORM);
    }
    Ok(registry::create(Arc::new(Context {
        props,
        _notify: notify,
        _user_data: user_data as usize,
    })))
}

pub(crate) extern "C" fn clCreateContext(
    properties: *const isize,
    num_devices: u32,
    devices: *const Handle,
    notify: ContextNotify,
    user_data: *mut c_void,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateContext", errcode_ret, || {
        // SAFETY: devices is null or holds num_devices handles.
        let devs = unsafe { raw::slice(devices, num_devices as usize) };
        match devs {
            Some(d) if !d.is_empty() => d.iter().try_for_each(|&d| check_device(d))?,
            _ => return Err(CL_INVALID_VALUE),
        }
        new_context(properties, notify, user_data)
    })
}

pub(crate) extern "C" fn clCreateContextFromType(
    properties: *const isize,
    device_type: u64,
    notify: ContextNotify,
    user_data: *mut c_void,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateContextFromType", errcode_ret, || {
        // Validates the properties before asking the host for the type.
        // SAFETY: properties is null or the application's 0-terminated list.
        if let Some(p) = unsafe { read_props(properties) }? {
            check_context_props(&p)?;
        }
        if !conn::connected() {
            return Err(CL_INVALID_PLATFORM);
        }
        if !type_matches(device_type)? {
            return Err(CL_DEVICE_NOT_FOUND);
        }
        new_context(properties, notify, user_data)
    })
}

pub(crate) extern "C" fn clRetainContext(context: Handle) -> i32 {
    guard("clRetainContext", || registry::retain::<Context>(context))
}

pub(crate) extern "C" fn clReleaseContext(context: Handle) -> i32 {
    guard("clReleaseContext", || registry::release::<Context>(context))
}

pub(crate) extern "C" fn clGetContextInfo(
    context: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetContextInfo", || {
        let ctx = registry::get::<Context>(context)?;
        let v = match param {
            CL_CONTEXT_REFERENCE_COUNT => {
                registry::refs::<Context>(context)?.to_ne_bytes().to_vec()
            }
            CL_CONTEXT_NUM_DEVICES => 1u32.to_ne_bytes().to_vec(),
            CL_CONTEXT_DEVICES => (device() as usize).to_ne_bytes().to_vec(),
            CL_CONTEXT_PROPERTIES => ctx
                .props
                .iter()
                .flatten()
                .flat_map(|p| p.to_ne_bytes())
                .collect(),
            _ => return Err(CL_INVALID_VALUE),
        };
        // SAFETY: the clGetContextInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

/// Checks queue properties against what the device supports
/// (`supported`, its `CL_DEVICE_QUEUE_PROPERTIES`): profiling, and
/// out-of-order execution where the host device has it.
pub fn check_queue_props(props: u64, supported: u64) -> Result<(), i32> {
    const KNOWN: u64 = CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE
        | CL_QUEUE_PROFILING_ENABLE
        | CL_QUEUE_ON_DEVICE
        | CL_QUEUE_ON_DEVICE_DEFAULT;
    if props & !KNOWN != 0 {
        return Err(CL_INVALID_VALUE);
    }
    let allowed = CL_QUEUE_PROFILING_ENABLE | (supported & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
    if props & !allowed != 0 {
        return Err(CL_INVALID_QUEUE_PROPERTIES);
    }
    Ok(())
}

fn new_queue(context: Handle, dev: Handle, props: u64) -> Result<Handle, i32> {
    let ctx = ParentRef::new::<Context>(context)?;
    check_device(dev)?;
    let supported = crate::platform::device_info(CL_DEVICE_QUEUE_PROPERTIES)
        .ok()
        .and_then(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
        .unwrap_or(CL_QUEUE_PROFILING_ENABLE);
    check_queue_props(props, supported)?;
    let r = conn::with(|c| c.call(Opcode::ClCreateQueue, &[props], &[], &mut []))?;
    Ok(registry::create(Arc::new(Queue {
        context: ctx,
        props,
        host: r.vals[0],
    })))
}

pub(crate) extern "C" fn clCreateCommandQueue(
    context: Handle,
    device: Handle,
    properties: u64,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateCommandQueue", errcode_ret, || {
        new_queue(context, device, properties)
    })
}

pub(crate) extern "C" fn clCreateCommandQueueWithProperties(
    context: Handle,
    device: Handle,
    properties: *const u64,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateCommandQueueWithProperties", errcode_ret, || {
        registry::get::<Context>(context)?;
        // SAFETY: properties is null or the application's 0-terminated list.
        let list = unsafe { read_props(properties) }?.unwrap_or_default();
        let mut props = 0;
        for pair in list.chunks_exact(2) {
            // CL_QUEUE_SIZE needs an on-device queue; anything else is unknown.
            if pair[0] != u64::from(CL_QUEUE_PROPERTIES) {
                return Err(CL_INVALID_VALUE);
            }
            props = pair[1];
        }
        new_queue(context, device, props)
    })
}

pub(crate) extern "C" fn clRetainCommandQueue(queue: Handle) -> i32 {
    guard("clRetainCommandQueue", || registry::retain::<Queue>(queue))
}

pub(crate) extern "C" fn clReleaseCommandQueue(queue: Handle) -> i32 {
    guard("clReleaseCommandQueue", || {
        registry::release::<Queue>(queue)
    })
}

pub(crate) extern "C" fn clGetCommandQueueInfo(
    queue: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetCommandQueueInfo", || {
        let q = registry::get::<Queue>(queue)?;
        let v = match param {
            CL_QUEUE_CONTEXT => (q.context.handle() as usize).to_ne_bytes().to_vec(),
            CL_QUEUE_DEVICE => (device() as usize).to_ne_bytes().to_vec(),
            CL_QUEUE_REFERENCE_COUNT => registry::refs::<Queue>(queue)?.to_ne_bytes().to_vec(),
            CL_QUEUE_PROPERTIES => q.props.to_ne_bytes().to_vec(),
            _ => return Err(CL_INVALID_VALUE),
        };
        // SAFETY: the clGetCommandQueueInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

pub(crate) extern "C" fn clFlush(queue: Handle) -> i32 {
    guard("clFlush", || {
        let q = registry::get::<Queue>(queue)?;
        conn::with(|c| c.fire(Opcode::ClFlush, &[q.host], &[]))
    })
}

pub(crate) extern "C" fn clFinish(queue: Handle) -> i32 {
    guard("clFinish", || {
        let q = registry::get::<Queue>(queue)?;
        let earlier = conn::with(|c| {
            c.exec(Opcode::ClFinish, &[q.host], &[], &mut [])?;
            Ok(c.take_pending())
        })?;
        // Every command of the queue is done.
        event::queue_finished(queue);
        earlier
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_properties_allow_profiling_and_the_devices_out_of_order_mode() {
        let ooo = CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE;
        let p = CL_QUEUE_PROFILING_ENABLE;
        assert_eq!(check_queue_props(0, p), Ok(()));
        assert_eq!(check_queue_props(p, p), Ok(()));
        assert_eq!(
            check_queue_props(ooo | p, p),
            Err(CL_INVALID_QUEUE_PROPERTIES),
            "an in-order device"
        );
        assert_eq!(check_queue_props(ooo | p, ooo | p), Ok(()));
        assert_eq!(
            check_queue_props(CL_QUEUE_ON_DEVICE, ooo | p),
            Err(CL_INVALID_QUEUE_PROPERTIES)
        );
        assert_eq!(check_queue_props(1 << 20, p), Err(CL_INVALID_VALUE));
    }

    #[test]
    fn context_properties_name_this_platform_once() {
        let ours = platform() as isize;
        assert_eq!(check_context_props(&[0]), Ok(()));
        assert_eq!(check_context_props(&[CL_CONTEXT_PLATFORM, ours, 0]), Ok(()));
        assert_eq!(
            check_context_props(&[CL_CONTEXT_PLATFORM, ours + 8, 0]),
            Err(CL_INVALID_PLATFORM)
        );
        assert_eq!(
            check_context_props(&[CL_CONTEXT_PLATFORM, ours, CL_CONTEXT_PLATFORM, ours, 0]),
            Err(CL_INVALID_PROPERTY)
        );
        assert_eq!(
            check_context_props(&[0x2000, 1, 0]),
            Err(CL_INVALID_PROPERTY)
        );
    }

    #[test]
    fn property_lists_are_read_to_their_terminator() {
        let list: [isize; 5] = [CL_CONTEXT_PLATFORM, 0, CL_CONTEXT_INTEROP_USER_SYNC, 1, 0];
        // SAFETY: a 0-terminated local list (the 0 value at index 1 is a
        // value, not a terminator).
        let got = unsafe { read_props(list.as_ptr()) }.unwrap().unwrap();
        assert_eq!(got, list);
        // SAFETY: null is allowed.
        assert_eq!(unsafe { read_props::<isize>(std::ptr::null()) }, Ok(None));
        let endless = [1isize; 2 * MAX_PROPS + 2];
        // SAFETY: the reader stops within the array's bounds.
        let r = unsafe { read_props(endless.as_ptr()) };
        assert_eq!(r, Err(CL_INVALID_PROPERTY));
    }
}
