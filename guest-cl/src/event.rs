//! Events, wait lists, markers and barriers.
//!
//! An event is a guest object named on the wire by an id from a process
//! counter; the enqueue that creates it passes the id in `args[4]` (or a
//! `ClMarker` right after it does, when the command took several requests).
//! What the library learns about an event's completion (a wait, a finish of
//! its queue, a status query, a blocking transfer) is cached, and fires the
//! callbacks registered on it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fairgpu_protocol::opencl::{encode_words, MAX_WAIT_LIST};
use fairgpu_protocol::Opcode;

use crate::conn::{self, Conn};
use crate::context::Queue;
use crate::registry::{self, ParentRef};
use crate::types::*;
use crate::{guard, raw};

/// An event's state.
#[derive(Debug)]
pub struct Event {
    /// The wire id.
    pub id: u64,
    /// Its queue (counted).
    pub queue: ParentRef,
    /// Its queue's context.
    pub context: usize,
    /// `CL_EVENT_COMMAND_TYPE`.
    pub command: u32,
    /// Whether its queue profiles.
    pub profiling: bool,
    state: Mutex<EventState>,
}

type Callback = (i32, extern "C" fn(Handle, i32, *mut c_void), usize);

#[derive(Debug, Default)]
struct EventState {
    /// The final status once known: CL_COMPLETE or an error.
    done: Option<i32>,
    callbacks: Vec<Callback>,
    /// Profiling times (queued, submit, start, end), once asked.
    times: Option<[u64; 4]>,
    /// The host has no such event: the command that was to make it
    /// failed. Nothing to release.
    unknown: bool,
}

impl Event {
    fn state(&self) -> MutexGuard<'_, EventState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The final status, if known.
    pub fn done(&self) -> Option<i32> {
        self.state().done
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if !self.state().unknown {
            conn::release_later(Opcode::ClReleaseEvent, self.id);
        }
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Records what the library learned of event `h`'s status (`CL_COMPLETE`,
/// an error, or a state on the way) and calls the callbacks it satisfies:
/// a callback for `CL_SUBMITTED` or `CL_RUNNING` runs once the event got
/// there or further, with the state it was registered for; one for
/// `CL_COMPLETE` (and any, on an error) with the final status.
fn observe(h: Handle, ev: &Event, status: i32) {
    let due: Vec<Callback> = {
        let mut st = ev.state();
        if status <= CL_COMPLETE && st.done.is_none() {
            st.done = Some(status);
        }
        let (due, keep) = std::mem::take(&mut st.callbacks)
            .into_iter()
            .partition(|&(ty, _, _)| status <= ty);
        st.callbacks = keep;
        due
    };
    for (ty, f, ud) in due {
        let arg = if status < CL_COMPLETE || ty == CL_COMPLETE {
            status
        } else {
            ty
        };
        f(h, arg, ud as *mut c_void);
    }
}

/// After `clFinish` of `queue`: its events are complete.
pub fn queue_finished(queue: Handle) {
    for (h, ev) in registry::all::<Event>() {
        if ev.queue.handle() == queue && ev.done().is_none() {
            observe(h as Handle, &ev, CL_COMPLETE);
        }
    }
}

/// The execution status of `ev`, from the cache or the host.
fn status(h: Handle, ev: &Event) -> Result<i32, i32> {
    if let Some(s) = ev.done() {
        return Ok(s);
    }
    let s = match conn::with(|c| c.call(Opcode::ClEventStatus, &[ev.id], &[], &mut [])) {
        Ok(r) => r.vals[0] as i64 as i32,
        // The host never made the event (ids are never reused): its command
        // failed, with the error the next synchronization point reports.
        Err(CL_INVALID_EVENT) => {
            ev.state().unknown = true;
            FAILED
        }
        Err(e) => return Err(e),
    };
    observe(h, ev, s);
    Ok(s)
}

/// The status of an event whose command failed before the host made the
/// event (the command's own error went to a synchronization point).
const FAILED: i32 = CL_OUT_OF_RESOURCES;

/// The ids of the events of a wait list that are not known to be over
/// (complete, or failed: a command behind a failed one runs all the same).
/// `context`: the context every event must belong to.
pub fn wait_list(num: u32, list: *const Handle, context: usize) -> Result<Vec<u64>, i32> {
    if (num == 0) != list.is_null() {
        return Err(CL_INVALID_EVENT_WAIT_LIST);
    }
    // SAFETY: the wait list holds num_events_in_wait_list events.
    let events = unsafe { raw::slice(list, num as usize) }.ok_or(CL_INVALID_EVENT_WAIT_LIST)?;
    let mut ids = Vec::new();
    for &h in events {
        let ev = registry::get::<Event>(h).map_err(|_| CL_INVALID_EVENT_WAIT_LIST)?;
        if ev.context != context {
            return Err(CL_INVALID_CONTEXT);
        }
        if ev.done().is_none() {
            ids.push(ev.id);
        }
    }
    Ok(ids)
}

/// An enqueue in preparation: its queue, wait list and event.
#[derive(Debug)]
pub struct Enqueue {
    /// The queue.
    pub queue: Arc<Queue>,
    queue_handle: Handle,
    waits: Vec<u64>,
    out: *mut Handle,
    /// The event id the command carries (0: none asked for).
    pub event: u64,
}

impl Enqueue {
    /// Validates the queue and the wait list; picks an event id if the
    /// application asked for an event.
    pub fn new(
        queue: Handle,
        num: u32,
        list: *const Handle,
        out: *mut Handle,
    ) -> Result<Enqueue, i32> {
        let q = registry::get::<Queue>(queue)?;
        let waits = wait_list(num, list, q.context.handle() as usize)?;
        let event = if out.is_null() {
            0
        } else {
            NEXT_ID.fetch_add(1, Ordering::Relaxed)
        };
        Ok(Enqueue {
            queue: q,
            queue_handle: queue,
            waits,
            out,
            event,
        })
    }

    /// The same queue without wait list or event: for the parts of a
    /// command whose event rides on a marker after them.
    pub fn quiet(e: &Enqueue) -> Enqueue {
        Enqueue {
            queue: e.queue.clone(),
            queue_handle: e.queue_handle,
            waits: Vec::new(),
            out: std::ptr::null_mut(),
            event: 0,
        }
    }

    /// The queue's context handle.
    pub fn context(&self) -> usize {
        self.queue.context.handle() as usize
    }

    /// Sends the wait list, before the command.
    pub fn send_waits(&self, c: &mut Conn) -> Result<(), i32> {
        send_wait_list(c, self.queue.host, &self.waits)
    }

    /// A `ClMarker` carrying the event, for a command that could not
    /// carry it itself.
    pub fn marker(&self, c: &mut Conn) -> Result<(), i32> {
        if self.event == 0 {
            return Ok(());
        }
        c.fire(
            Opcode::ClMarker,
            &[self.queue.host, 0, 0, 0, self.event],
            &[],
        )
    }

    /// After the command went out: hands the event to the application.
    /// `complete`: the command is known to have completed (a transfer that
    /// finished before returning).
    pub fn publish(self, command: u32, complete: bool) -> Result<(), i32> {
        if self.event == 0 {
            return Ok(());
        }
        let queue = match ParentRef::new::<Queue>(self.queue_handle) {
            Ok(q) => q,
            Err(e) => {
                conn::release_later(Opcode::ClReleaseEvent, self.event);
                return Err(e);
            }
        };
        let ev = Event {
            id: self.event,
            context: self.queue.context.handle() as usize,
            queue,
            command,
            profiling: self.queue.props & CL_QUEUE_PROFILING_ENABLE != 0,
            state: Mutex::new(EventState {
                done: complete.then_some(CL_COMPLETE),
                ..EventState::default()
            }),
        };
        let h = registry::create(Arc::new(ev));
        // SAFETY: `out` is the application's non-null cl_event slot.
        unsafe { raw::set(self.out, h) };
        Ok(())
    }
}

/// A barrier on host queue `queue` behind the events `ids` (in requests
/// of at most [`MAX_WAIT_LIST`] ids).
pub fn send_wait_list(c: &mut Conn, queue: u64, ids: &[u64]) -> Result<(), i32> {
    for chunk in ids.chunks(MAX_WAIT_LIST) {
        c.fire(Opcode::ClWaitList, &[queue], &encode_words(chunk))?;
    }
    Ok(())
}

/// A marker or barrier command: the wait list, then the event.
fn marker(
    name: &'static str,
    queue: Handle,
    num: u32,
    list: *const Handle,
    event: *mut Handle,
    command: u32,
) -> i32 {
    guard(name, || {
        let e = Enqueue::new(queue, num, list, event)?;
        // On an out-of-order queue a barrier without a wait list waits
        // for every command before it: a host barrier without events.
        let barrier_all = command == CL_COMMAND_BARRIER && num == 0 && e.queue.out_of_order();
        conn::with(|c| {
            if barrier_all {
                c.fire(Opcode::ClWaitList, &[e.queue.host], &[])?;
            }
            e.send_waits(c)?;
            e.marker(c)
        })?;
        e.publish(command, false)
    })
}

pub(crate) extern "C" fn clEnqueueMarker(queue: Handle, event: *mut Handle) -> i32 {
    if event.is_null() {
        return guard("clEnqueueMarker", || {
            registry::get::<Queue>(queue)?;
            Err(CL_INVALID_VALUE)
        });
    }
    marker(
        "clEnqueueMarker",
        queue,
        0,
        std::ptr::null(),
        event,
        CL_COMMAND_MARKER,
    )
}

pub(crate) extern "C" fn clEnqueueMarkerWithWaitList(
    queue: Handle,
    num: u32,
    list: *const Handle,
    event: *mut Handle,
) -> i32 {
    marker(
        "clEnqueueMarkerWithWaitList",
        queue,
        num,
        list,
        event,
        CL_COMMAND_MARKER,
    )
}

pub(crate) extern "C" fn clEnqueueBarrierWithWaitList(
    queue: Handle,
    num: u32,
    list: *const Handle,
    event: *mut Handle,
) -> i32 {
    marker(
        "clEnqueueBarrierWithWaitList",
        queue,
        num,
        list,
        event,
        CL_COMMAND_BARRIER,
    )
}

pub(crate) extern "C" fn clEnqueueBarrier(queue: Handle) -> i32 {
    // On an in-order queue every command already waits for those before
    // it; on an out-of-order one the host enqueues a barrier.
    guard("clEnqueueBarrier", || {
        let q = registry::get::<Queue>(queue)?;
        if q.out_of_order() {
            conn::with(|c| c.fire(Opcode::ClWaitList, &[q.host], &[]))?;
        }
        Ok(())
    })
}

pub(crate) extern "C" fn clEnqueueWaitForEvents(
    queue: Handle,
    num: u32,
    list: *const Handle,
) -> i32 {
    guard("clEnqueueWaitForEvents", || {
        let q = registry::get::<Queue>(queue)?;
        if num == 0 || list.is_null() {
            return Err(CL_INVALID_VALUE);
        }
        let ids = wait_list(num, list, q.context.handle() as usize).map_err(|e| match e {
            CL_INVALID_EVENT_WAIT_LIST => CL_INVALID_EVENT,
            e => e,
        })?;
        conn::with(|c| send_wait_list(c, q.host, &ids))
    })
}

pub(crate) extern "C" fn clWaitForEvents(num: u32, list: *const Handle) -> i32 {
    guard("clWaitForEvents", || {
        if num == 0 {
            return Err(CL_INVALID_VALUE);
        }
        // SAFETY: event_list holds num_events events.
        let handles = unsafe { raw::slice(list, num as usize) }.ok_or(CL_INVALID_VALUE)?;
        let mut events = Vec::with_capacity(handles.len());
        for &h in handles {
            let ev = registry::get::<Event>(h)?;
            if events
                .first()
                .is_some_and(|(_, e): &(Handle, Arc<Event>)| e.context != ev.context)
            {
                return Err(CL_INVALID_CONTEXT);
            }
            events.push((h, ev));
        }
        wait(&events, true)
    })
}

/// Waits for `events` on the host; then they are complete (or their
/// status says how they failed), and their callbacks run. With `report`,
/// an earlier command's failure held for a synchronization point is this
/// call's error.
fn wait(events: &[(Handle, Arc<Event>)], report: bool) -> Result<(), i32> {
    let ids: Vec<u64> = events
        .iter()
        .filter(|(_, e)| e.done().is_none())
        .map(|(_, e)| e.id)
        .collect();
    let r = conn::with(|c| {
        for chunk in ids.chunks(MAX_WAIT_LIST) {
            if let Err(e) = c.exec(Opcode::ClWaitEvents, &[], &encode_words(chunk), &mut []) {
                // An event that a failed command never made fails the wait:
                // that command's error, held for a synchronization point,
                // says more.
                if report {
                    let _ = c.exec(Opcode::Nop, &[], &[], &mut []);
                    c.take_pending()?;
                }
                return Err(e);
            }
        }
        Ok(if report { c.take_pending() } else { Ok(()) })
    });
    let mut failed = false;
    for (h, ev) in events {
        if r.is_ok() {
            observe(*h, ev, CL_COMPLETE);
        } else if let Ok(s) = status(*h, ev) {
            failed |= s < CL_COMPLETE;
        }
        failed |= ev.done().is_some_and(|s| s < CL_COMPLETE);
    }
    match r {
        Err(e) | Ok(Err(e)) => Err(e),
        Ok(Ok(())) if failed => Err(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST),
        Ok(Ok(())) => Ok(()),
    }
}

pub(crate) extern "C" fn clRetainEvent(event: Handle) -> i32 {
    guard("clRetainEvent", || registry::retain::<Event>(event))
}

pub(crate) extern "C" fn clReleaseEvent(event: Handle) -> i32 {
    guard("clReleaseEvent", || {
        let ev = registry::get::<Event>(event)?;
        // The last reference to an event with callbacks still to run:
        // they must run, so wait for the event first.
        let last = registry::refs::<Event>(event)? == 1;
        if last && ev.done().is_none() && !ev.state().callbacks.is_empty() {
            let _ = wait(&[(event, ev.clone())], false);
        }
        registry::release::<Event>(event)
    })
}

pub(crate) extern "C" fn clSetEventCallback(
    event: Handle,
    ty: i32,
    notify: EventNotify,
    user_data: *mut c_void,
) -> i32 {
    guard("clSetEventCallback", || {
        let ev = registry::get::<Event>(event)?;
        let Some(f) = notify else {
            return Err(CL_INVALID_VALUE);
        };
        if !matches!(ty, CL_COMPLETE | CL_RUNNING | CL_SUBMITTED) {
            return Err(CL_INVALID_VALUE);
        }
        let done = {
            let mut st = ev.state();
            st.callbacks.push((ty, f, user_data as usize));
            st.done
        };
        if let Some(s) = done {
            observe(event, &ev, s);
        }
        Ok(())
    })
}

pub(crate) extern "C" fn clGetEventInfo(
    event: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetEventInfo", || {
        let ev = registry::get::<Event>(event)?;
        let v = match param {
            CL_EVENT_COMMAND_QUEUE => (ev.queue.handle() as usize).to_ne_bytes().to_vec(),
            CL_EVENT_CONTEXT => ev.context.to_ne_bytes().to_vec(),
            CL_EVENT_COMMAND_TYPE => ev.command.to_ne_bytes().to_vec(),
            CL_EVENT_REFERENCE_COUNT => registry::refs::<Event>(event)?.to_ne_bytes().to_vec(),
            CL_EVENT_COMMAND_EXECUTION_STATUS => status(event, &ev)?.to_ne_bytes().to_vec(),
            _ => return Err(CL_INVALID_VALUE),
        };
        // SAFETY: the clGetEventInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

pub(crate) extern "C" fn clGetEventProfilingInfo(
    event: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetEventProfilingInfo", || {
        let ev = registry::get::<Event>(event)?;
        let index = match param {
            CL_PROFILING_COMMAND_QUEUED => 0,
            CL_PROFILING_COMMAND_SUBMIT => 1,
            CL_PROFILING_COMMAND_START => 2,
            CL_PROFILING_COMMAND_END | CL_PROFILING_COMMAND_COMPLETE => 3,
            _ => return Err(CL_INVALID_VALUE),
        };
        if !ev.profiling || status(event, &ev)? != CL_COMPLETE {
            return Err(CL_PROFILING_INFO_NOT_AVAILABLE);
        }
        let cached = ev.state().times;
        let times = match cached {
            Some(t) => t,
            None => {
                let r = conn::with(|c| c.call(Opcode::ClEventProfiling, &[ev.id], &[], &mut []))?;
                let t = [r.vals[0], r.vals[1], r.vals[2], r.vals[3]];
                ev.state().times = Some(t);
                t
            }
        };
        // SAFETY: the clGetEventProfilingInfo output contract.
        unsafe { raw::info(&times[index].to_ne_bytes(), size, value, size_ret) }
    })
}
