//! Graph memory nodes: allocations a graph makes and frees as it runs.
//!
//! The driver gives an allocation node its device address when the node is
//! made (the graph's later nodes take that address as a parameter), and
//! the memory exists from the moment the node runs until a free node, a
//! `cuMemFree`/`cuMemFreeAsync` outside the graph, or a free node of
//! another graph releases it; the next launch of the graph allocates it
//! again at the same address.
//!
//! Here an allocation node owns ordinary device memory of the VM (counted
//! against its quota like any allocation) from the moment the node is
//! made: that is what keeps its address fixed, since the host chooses
//! addresses. Every copy of the node (its graph, clones of it, child-graph
//! copies, instantiated graphs) holds the memory through a [`Hold`]; the
//! memory goes back to the VM once no copy is left *and* it is not live
//! (allocated by a launch and not yet freed). Running the node makes the
//! allocation live; a free makes it not live. A launch whose allocations
//! are still live from an earlier one fails with CUDA_ERROR_INVALID_VALUE
//! (unless instantiated with AUTO_FREE_ON_LAUNCH, which frees them), and a
//! free of an allocation that is not live fails the same way, as with the
//! driver.
//!
//! Memory is not shared between allocation nodes: the driver may give two
//! nodes of one graph the same physical memory when one's free precedes
//! the other's allocation, this library does not, so a graph's footprint
//! is the sum of its allocations. `cuDeviceGetGraphMemAttribute` reports
//! those that ran at least once, as the driver maps a graph's memory at
//! its first launch and reports it in use from then on;
//! `cuDeviceGraphMemTrim` has nothing to trim, since memory whose nodes
//! are gone is released at once.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::context::out;
use crate::memory::{device_alloc, device_free};
use crate::state;
use crate::types::{err, CUdevice, CUresult, CUstream};

#[derive(Debug)]
struct Alloc {
    bytes: u64,
    /// Made by a launch and not yet freed.
    live: bool,
    /// Made by a launch at least once: the driver maps a graph's memory
    /// when it first runs, and only then reports it in use.
    mapped: bool,
    /// Copies of the allocation node that exist.
    holders: u64,
}

#[derive(Debug, Default)]
struct Table {
    allocs: HashMap<u64, Alloc>,
    /// Bytes of graph allocations held that ran at least once (what the
    /// driver reports in use), and the high watermarks
    /// (`USED_MEM_HIGH`, `RESERVED_MEM_HIGH`, reset by setting them to 0).
    held: u64,
    used_high: u64,
    reserved_high: u64,
    /// Allocations released by a drop, to be freed outside the caller's
    /// locks ([`flush`]).
    unheld: Vec<u64>,
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

fn with<R>(f: impl FnOnce(&mut Table) -> R) -> Result<R, CUresult> {
    let mut t = TABLE.lock().map_err(|_| err::UNKNOWN)?;
    Ok(f(t.get_or_insert_with(Table::default)))
}

/// One copy of an allocation node's claim on its memory.
#[derive(Debug, PartialEq, Eq)]
pub struct Hold {
    ptr: u64,
}

impl Hold {
    /// The allocation's device address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }
}

impl Clone for Hold {
    fn clone(&self) -> Hold {
        let _ = with(|t| {
            if let Some(a) = t.allocs.get_mut(&self.ptr) {
                a.holders += 1;
            }
        });
        Hold { ptr: self.ptr }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        // Graphs are dropped with the graph table locked: the memory is
        // freed later, by `flush`, not here.
        let _ = with(|t| {
            if let Some(a) = t.allocs.get_mut(&self.ptr) {
                a.holders = a.holders.saturating_sub(1);
                if a.holders == 0 && !a.live {
                    t.unheld.push(self.ptr);
                }
            }
        });
    }
}

/// Device memory for a new allocation node of `bytes` bytes.
pub fn create(bytes: u64) -> Result<Hold, CUresult> {
    if bytes == 0 {
        return Err(err::INVALID_VALUE);
    }
    let ptr = device_alloc(bytes)?;
    with(|t| {
        t.allocs.insert(
            ptr,
            Alloc {
                bytes,
                live: false,
                mapped: false,
                holders: 1,
            },
        );
    })?;
    Ok(Hold { ptr })
}

/// The size of graph allocation `ptr`, if it is one.
pub fn size(ptr: u64) -> Option<u64> {
    with(|t| t.allocs.get(&ptr).map(|a| a.bytes)).ok().flatten()
}

/// Frees the memory of allocations no node holds and no launch made live.
pub fn flush() {
    let Ok(ptrs) = with(|t| {
        let mut out = Vec::new();
        for p in std::mem::take(&mut t.unheld) {
            if t.allocs.get(&p).is_some_and(|a| a.holders == 0 && !a.live) {
                if let Some(a) = t.allocs.remove(&p) {
                    if a.mapped {
                        t.held = t.held.saturating_sub(a.bytes);
                    }
                }
                out.push(p);
            }
        }
        out
    }) else {
        return;
    };
    for p in ptrs {
        // The device's work on it finished with the free that ended it.
        let _ = device_free(p);
    }
}

/// Before a launch: whether each allocation `ptrs` makes is not live, or,
/// with `auto_free`, marks those that are as freed.
pub fn check_launch(ptrs: &[u64], auto_free: bool) -> Result<(), CUresult> {
    with(|t| {
        for p in ptrs {
            match t.allocs.get_mut(p) {
                Some(a) if a.live && auto_free => a.live = false,
                Some(a) if a.live => return Err(err::INVALID_VALUE),
                Some(_) => {}
                None => return Err(err::INVALID_VALUE),
            }
        }
        Ok(())
    })?
}

/// An allocation node runs.
pub fn begin(ptr: u64) -> CUresult {
    match with(|t| match t.allocs.get_mut(&ptr) {
        Some(a) if !a.live => {
            a.live = true;
            if !a.mapped {
                a.mapped = true;
                t.held += a.bytes;
                t.used_high = t.used_high.max(t.held);
                t.reserved_high = t.reserved_high.max(t.held);
            }
            err::SUCCESS
        }
        _ => err::INVALID_VALUE,
    }) {
        Ok(r) => r,
        Err(e) => e,
    }
}

/// A free of graph allocation `ptr` in stream `s` (a free node, or
/// `cuMemFreeAsync`; `None`: `cuMemFree`, synchronous). `None` if `ptr`
/// is not a graph allocation.
pub fn end(ptr: u64, s: Option<CUstream>) -> Option<CUresult> {
    let release = match with(|t| {
        let a = t.allocs.get_mut(&ptr)?;
        if !a.live {
            return Some(Err(err::INVALID_VALUE));
        }
        a.live = false;
        Some(Ok(a.holders == 0))
    }) {
        Ok(r) => r?,
        Err(e) => return Some(e),
    };
    Some(match release {
        Err(e) => e,
        Ok(false) => err::SUCCESS,
        Ok(true) => {
            // No node will allocate it again: the memory goes back once the
            // work queued before the free is done.
            let h = s.map(crate::stream::stream_handle);
            let synced = match h {
                Some(h) => state::with(|cu| cu.stream_synchronize(h)),
                None => state::with_sync(|cu| cu.ctx_synchronize()),
            };
            if let Err(e) = synced {
                return Some(e);
            }
            if let Ok(mut t) = TABLE.lock() {
                if let Some(t) = t.as_mut() {
                    t.unheld.push(ptr);
                }
            }
            flush();
            err::SUCCESS
        }
    })
}

/// `CU_GRAPH_MEM_ATTR_*`: used and reserved now, and their highs.
const USED_MEM_CURRENT: u32 = 0;
const USED_MEM_HIGH: u32 = 1;
const RESERVED_MEM_CURRENT: u32 = 2;
const RESERVED_MEM_HIGH: u32 = 3;

fn device0(dev: CUdevice) -> Result<(), CUresult> {
    state::device()?;
    if dev == 0 {
        Ok(())
    } else {
        Err(err::INVALID_DEVICE)
    }
}

/// `cuDeviceGetGraphMemAttribute`: what graph allocations hold (used and
/// reserved are the same: nothing is cached).
#[no_mangle]
pub extern "C" fn cuDeviceGetGraphMemAttribute(
    dev: CUdevice,
    attr: u32,
    value: *mut u64,
) -> CUresult {
    crate::ffi_result(|| {
        device0(dev)?;
        let v = with(|t| match attr {
            USED_MEM_CURRENT | RESERVED_MEM_CURRENT => Ok(t.held),
            USED_MEM_HIGH => Ok(t.used_high),
            RESERVED_MEM_HIGH => Ok(t.reserved_high),
            _ => Err(err::INVALID_VALUE),
        })??;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(value, v) }
    })
}

/// `cuDeviceSetGraphMemAttribute`: only the highs, and only to 0 (they
/// restart from what is held now).
#[no_mangle]
pub extern "C" fn cuDeviceSetGraphMemAttribute(
    dev: CUdevice,
    attr: u32,
    value: *const u64,
) -> CUresult {
    crate::ffi_result(|| {
        device0(dev)?;
        if value.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes the value to set.
        if unsafe { value.read_unaligned() } != 0 {
            return Err(err::INVALID_VALUE);
        }
        with(|t| match attr {
            USED_MEM_HIGH => {
                t.used_high = t.held;
                Ok(())
            }
            RESERVED_MEM_HIGH => {
                t.reserved_high = t.held;
                Ok(())
            }
            _ => Err(err::INVALID_VALUE),
        })?
    })
}

/// `cuDeviceGraphMemTrim`: memory no node holds is already released.
#[no_mangle]
pub extern "C" fn cuDeviceGraphMemTrim(dev: CUdevice) -> CUresult {
    crate::ffi_result(|| {
        device0(dev)?;
        flush();
        Ok(())
    })
}
