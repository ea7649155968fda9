//! The live objects of this process, by handle.
//!
//! A handle is the address of a boxed [`IcdObject`] (the dispatch pointer
//! the loader reads) owned by the registry entry; the object's state lives
//! beside it in an `Arc`, so a call in progress keeps it alive while
//! another thread releases the handle. Looking a pointer up is how every
//! entry point validates it: a pointer that is not a live object of the
//! expected type gets that type's `CL_INVALID_*` error and is never read.
//!
//! Reference counts follow the API: an object starts at 1, `clRetain*`
//! adds, `clRelease*` subtracts, and the handle goes at 0. Objects keep
//! their parents counted ([`ParentRef`]): a queue its context, a kernel its
//! program, an event its queue, a sampler its context, so that a parent's
//! handle stays valid (and its host object alive) while a child uses it.
//! The state's `Drop` releases the host object (see
//! [`crate::conn::release_later`]).
//!
//! Lock order: the registry lock is never held while an object is dropped
//! or the channel is used.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::context::{Context, Queue};
use crate::dispatch::IcdObject;
use crate::event::Event;
use crate::kernel::Kernel;
use crate::mem::Mem;
use crate::program::Program;
use crate::sampler::Sampler;
use crate::types::{
    Handle, CL_INVALID_COMMAND_QUEUE, CL_INVALID_CONTEXT, CL_INVALID_EVENT, CL_INVALID_KERNEL,
    CL_INVALID_MEM_OBJECT, CL_INVALID_PROGRAM, CL_INVALID_SAMPLER,
};

/// One live object's state.
#[derive(Debug, Clone)]
pub enum Obj {
    /// `cl_context`.
    Context(Arc<Context>),
    /// `cl_command_queue`.
    Queue(Arc<Queue>),
    /// `cl_mem` (buffers, sub-buffers and images).
    Mem(Arc<Mem>),
    /// `cl_sampler`.
    Sampler(Arc<Sampler>),
    /// `cl_program`.
    Program(Arc<Program>),
    /// `cl_kernel`.
    Kernel(Arc<Kernel>),
    /// `cl_event`.
    Event(Arc<Event>),
}

#[derive(Debug)]
struct Entry {
    /// What the handle points to; its address is the handle.
    _head: Box<IcdObject>,
    refs: u32,
    obj: Obj,
}

static OBJECTS: Mutex<BTreeMap<usize, Entry>> = Mutex::new(BTreeMap::new());

fn objects() -> MutexGuard<'static, BTreeMap<usize, Entry>> {
    OBJECTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// An object type the registry holds.
pub trait Kind: Sized {
    /// The error for a handle that is not a live object of this type.
    const INVALID: i32;
    /// Wraps the state.
    fn wrap(a: Arc<Self>) -> Obj;
    /// The state, if `o` is of this type.
    fn unwrap(o: &Obj) -> Option<&Arc<Self>>;
}

macro_rules! kind {
    ($t:ident, $err:ident) => {
        impl Kind for $t {
            const INVALID: i32 = $err;
            fn wrap(a: Arc<Self>) -> Obj {
                Obj::$t(a)
            }
            fn unwrap(o: &Obj) -> Option<&Arc<Self>> {
                match o {
                    Obj::$t(a) => Some(a),
                    _ => None,
                }
            }
        }
    };
}

kind!(Context, CL_INVALID_CONTEXT);
kind!(Queue, CL_INVALID_COMMAND_QUEUE);
kind!(Mem, CL_INVALID_MEM_OBJECT);
kind!(Sampler, CL_INVALID_SAMPLER);
kind!(Program, CL_INVALID_PROGRAM);
kind!(Kernel, CL_INVALID_KERNEL);
kind!(Event, CL_INVALID_EVENT);

/// Registers a new object with one reference; returns its handle.
pub fn create<T: Kind>(state: Arc<T>) -> Handle {
    let head = Box::new(IcdObject::new());
    let addr = &*head as *const IcdObject as usize;
    objects().insert(
        addr,
        Entry {
            _head: head,
            refs: 1,
            obj: T::wrap(state),
        },
    );
    addr as Handle
}

/// The state of live object `h` of type `T`.
pub fn get<T: Kind>(h: Handle) -> Result<Arc<T>, i32> {
    find(h as usize).ok_or(T::INVALID)
}

/// As [`get`] by address; `None` when `addr` is not a live `T`.
pub fn find<T: Kind>(addr: usize) -> Option<Arc<T>> {
    objects()
        .get(&addr)
        .and_then(|e| T::unwrap(&e.obj).cloned())
}

/// Adds a reference to live object `h` of type `T`.
pub fn retain<T: Kind>(h: Handle) -> Result<(), i32> {
    let mut m = objects();
    match m.get_mut(&(h as usize)) {
        Some(e) if T::unwrap(&e.obj).is_some() => {
            e.refs = e.refs.saturating_add(1);
            Ok(())
        }
        _ => Err(T::INVALID),
    }
}

/// Drops a reference to live object `h` of type `T`; at 0 the handle goes
/// (and with the last `Arc`, the state).
pub fn release<T: Kind>(h: Handle) -> Result<(), i32> {
    let gone = {
        let mut m = objects();
        match m.get_mut(&(h as usize)) {
            Some(e) if T::unwrap(&e.obj).is_some() => {
                e.refs -= 1;
                if e.refs == 0 {
                    m.remove(&(h as usize))
                } else {
                    None
                }
            }
            _ => return Err(T::INVALID),
        }
    };
    // Dropped here, with no lock held: the state's Drop may release its
    // parents and queue host releases.
    drop(gone);
    Ok(())
}

/// The reference count of live object `h` of type `T`.
pub fn refs<T: Kind>(h: Handle) -> Result<u32, i32> {
    let m = objects();
    match m.get(&(h as usize)) {
        Some(e) if T::unwrap(&e.obj).is_some() => Ok(e.refs),
        _ => Err(T::INVALID),
    }
}

/// Every live object of type `T`, with its handle.
pub fn all<T: Kind>() -> Vec<(usize, Arc<T>)> {
    objects()
        .iter()
        .filter_map(|(&a, e)| T::unwrap(&e.obj).map(|s| (a, s.clone())))
        .collect()
}

/// A counted reference from a child's state to its parent's handle,
/// dropped with the child's state.
#[derive(Debug)]
pub struct ParentRef(usize);

impl ParentRef {
    /// Adds a reference to live object `h` of type `T`.
    pub fn new<T: Kind>(h: Handle) -> Result<ParentRef, i32> {
        retain::<T>(h)?;
        Ok(ParentRef(h as usize))
    }

    /// The parent's handle.
    pub fn handle(&self) -> Handle {
        self.0 as Handle
    }
}

impl Drop for ParentRef {
    fn drop(&mut self) {
        let gone = {
            let mut m = objects();
            match m.get_mut(&self.0) {
                Some(e) => {
                    e.refs = e.refs.saturating_sub(1);
                    if e.refs == 0 {
                        m.remove(&self.0)
                    } else {
                        None
                    }
                }
                None => None,
            }
        };
        drop(gone);
    }
}
