//! User objects (`cuUserObjectCreate`): reference-counted application
//! resources whose destructor runs once the last reference goes, and which
//! graphs and instantiated graphs hold references to (so that a resource a
//! graph's work uses outlives the caller's own references).
//!
//! Objects are this library's handles (even numbers from a counter, looked
//! up in a table: a forged or stale one is CUDA_ERROR_INVALID_VALUE). A
//! graph's references are released when it is destroyed, an instantiated
//! graph's (taken from its graph at instantiation, and from a clone's
//! original when cloned) when it is. A destructor runs on a thread of its
//! own, as the driver runs it on an internal thread: it must not call
//! CUDA.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use crate::context::out;
use crate::ffi_result;
use crate::types::{err, CUresult};

/// `CU_USER_OBJECT_NO_DESTRUCTOR_SYNC`: the only flag, and a required one.
const NO_DESTRUCTOR_SYNC: u32 = 1;
/// `CU_GRAPH_USER_OBJECT_MOVE`.
const MOVE: u32 = 1;
/// Most references one object may have (a bound on counts).
const MAX_REFS: u64 = 1 << 31;

type HostFn = Option<unsafe extern "C" fn(*mut c_void)>;

struct Object {
    ptr: usize,
    destroy: usize,
    refs: u64,
}

#[derive(Default)]
struct Table {
    next: u64,
    objects: HashMap<u64, Object>,
    /// (graph or instantiated graph, object) → references it holds.
    held: HashMap<(u64, u64), u64>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Table) -> Result<R, CUresult>) -> Result<R, CUresult> {
    let mut t = TABLE.lock().map_err(|_| err::UNKNOWN)?;
    f(t.get_or_insert_with(Table::default))
}

/// Drops `n` references of `obj`; the destructor to run if it was the
/// last.
fn release(t: &mut Table, obj: u64, n: u64) -> Result<Option<(usize, usize)>, CUresult> {
    let o = t.objects.get_mut(&obj).ok_or(err::INVALID_VALUE)?;
    if n == 0 || n > o.refs {
        return Err(err::INVALID_VALUE);
    }
    o.refs -= n;
    if o.refs > 0 {
        return Ok(None);
    }
    let o = t.objects.remove(&obj).ok_or(err::INVALID_VALUE)?;
    Ok(Some((o.destroy, o.ptr)))
}

/// Runs destructors, each on a thread of its own.
fn run(destructors: Vec<(usize, usize)>) {
    for (f, ptr) in destructors {
        std::thread::spawn(move || {
            // SAFETY: `f` is the address of the `CUhostFn` the application
            // gave `cuUserObjectCreate` (checked non-null then).
            let f: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(f) };
            // SAFETY: the application's destructor with its own argument,
            // called once, as the API promises.
            unsafe { f(ptr as *mut c_void) };
        });
    }
}

/// Releases every reference `owner` (a graph or an instantiated graph)
/// holds.
pub fn release_owner(owner: u64) {
    let Ok(d) = with(|t| {
        let mine: Vec<(u64, u64)> = t
            .held
            .iter()
            .filter(|((o, _), _)| *o == owner)
            .map(|(&(_, obj), &n)| (obj, n))
            .collect();
        let mut d = Vec::new();
        for (obj, n) in mine {
            t.held.remove(&(owner, obj));
            if let Ok(Some(x)) = release(t, obj, n) {
                d.push(x);
            }
        }
        Ok(d)
    }) else {
        return;
    };
    run(d);
}

/// `to` takes the references `from` holds (instantiation, cloning).
pub fn copy_owner(from: u64, to: u64) {
    let _ = with(|t| {
        let theirs: Vec<(u64, u64)> = t
            .held
            .iter()
            .filter(|((o, _), _)| *o == from)
            .map(|(&(_, obj), &n)| (obj, n))
            .collect();
        for (obj, n) in theirs {
            if let Some(o) = t.objects.get_mut(&obj) {
                o.refs += n;
                *t.held.entry((to, obj)).or_insert(0) += n;
            }
        }
        Ok(())
    });
}

/// `cuUserObjectCreate`.
#[no_mangle]
pub extern "C" fn cuUserObjectCreate(
    obj: *mut *mut c_void,
    ptr: *mut c_void,
    destroy: HostFn,
    refs: u32,
    flags: u32,
) -> CUresult {
    ffi_result(|| {
        let f = destroy.ok_or(err::INVALID_VALUE)?;
        if flags != NO_DESTRUCTOR_SYNC || refs == 0 {
            return Err(err::INVALID_VALUE);
        }
        let h = with(|t| {
            t.next += 1;
            let h = 0x0fa2_0000_0000_0000 | (t.next << 4);
            t.objects.insert(
                h,
                Object {
                    ptr: ptr as usize,
                    destroy: f as usize,
                    refs: u64::from(refs),
                },
            );
            Ok(h)
        })?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(obj, h as *mut c_void) }
    })
}

/// `cuUserObjectRetain`.
#[no_mangle]
pub extern "C" fn cuUserObjectRetain(obj: *mut c_void, n: u32) -> CUresult {
    ffi_result(|| {
        with(|t| {
            let o = t.objects.get_mut(&(obj as u64)).ok_or(err::INVALID_VALUE)?;
            if n == 0 || o.refs + u64::from(n) > MAX_REFS {
                return Err(err::INVALID_VALUE);
            }
            o.refs += u64::from(n);
            Ok(())
        })
    })
}

/// `cuUserObjectRelease`.
#[no_mangle]
pub extern "C" fn cuUserObjectRelease(obj: *mut c_void, n: u32) -> CUresult {
    ffi_result(|| {
        let d = with(|t| release(t, obj as u64, u64::from(n)))?;
        run(d.into_iter().collect());
        Ok(())
    })
}

/// `cuGraphRetainUserObject`: the graph holds `n` more references (with
/// `MOVE`, the caller's own, handed over).
#[no_mangle]
pub extern "C" fn cuGraphRetainUserObject(
    graph: *mut c_void,
    obj: *mut c_void,
    n: u32,
    flags: u32,
) -> CUresult {
    ffi_result(|| {
        if !super::graph_exists(graph as u64) || flags > MOVE || n == 0 {
            return Err(err::INVALID_VALUE);
        }
        with(|t| {
            let o = t.objects.get_mut(&(obj as u64)).ok_or(err::INVALID_VALUE)?;
            if flags != MOVE {
                if o.refs + u64::from(n) > MAX_REFS {
                    return Err(err::INVALID_VALUE);
                }
                o.refs += u64::from(n);
            } else if u64::from(n) > o.refs {
                return Err(err::INVALID_VALUE);
            }
            *t.held.entry((graph as u64, obj as u64)).or_insert(0) += u64::from(n);
            Ok(())
        })
    })
}

/// `cuGraphReleaseUserObject`: drops `n` of the graph's references.
#[no_mangle]
pub extern "C" fn cuGraphReleaseUserObject(
    graph: *mut c_void,
    obj: *mut c_void,
    n: u32,
) -> CUresult {
    ffi_result(|| {
        let key = (graph as u64, obj as u64);
        let d = with(|t| {
            let held = t.held.get(&key).copied().ok_or(err::INVALID_VALUE)?;
            if n == 0 || u64::from(n) > held {
                return Err(err::INVALID_VALUE);
            }
            let d = release(t, obj as u64, u64::from(n))?;
            if held == u64::from(n) {
                t.held.remove(&key);
            } else {
                t.held.insert(key, held - u64::from(n));
            }
            Ok(d)
        })?;
        run(d.into_iter().collect());
        Ok(())
    })
}
