//! Conditional graph nodes (`CU_GRAPH_NODE_TYPE_CONDITIONAL`): IF (with
//! an optional ELSE body), WHILE and SWITCH, whose condition device code
//! sets with `cudaGraphSetConditional(handle, value)`.
//!
//! A conditional handle here is the device address of a 32-bit slot this
//! library allocates (counted against the VM's quota like any allocation)
//! when the handle is made; SimGpu resolves `cudaGraphSetConditional` to a
//! store of the value at that address. A GPU's driver resolves that call
//! in its own JIT against handles only its own graphs make, so handles are
//! made only where the host reports it runs the guest's PTX itself
//! ([`ATTR_GUEST_GRAPH_CONDITIONALS`]); elsewhere
//! `cuGraphConditionalHandleCreate` is CUDA_ERROR_NOT_SUPPORTED.
//!
//! When a launch reaches a conditional node, the condition is read back
//! on the launch stream (a blocking 4-byte copy, ordered after the work
//! before it) and the chosen body's steps are issued, as many times as a
//! WHILE node's condition stays non-zero. A handle made with
//! `CU_GRAPH_COND_ASSIGN_DEFAULT` is set to its default value at the start
//! of each launch of a graph that uses it. The slot lives as long as the
//! graph it was made for or any instantiation that uses it.

use std::collections::HashSet;
use std::ffi::c_void;

use fairgpu_protocol::cuda::ATTR_GUEST_GRAPH_CONDITIONALS;

use super::nodes::GraphNodeParams;
use super::{put, run_steps, with, CUgraph, CUgraphNode, Table, Work};
use crate::context::require_current;
use crate::types::{err, CUresult, CUstream};
use crate::{ffi_result, state};

/// Deepest nesting of child graphs and conditional bodies instantiated.
pub(super) const MAX_NESTING: usize = 64;
/// Most bodies one SWITCH node may have.
const MAX_BODIES: u32 = 4096;
/// `CU_GRAPH_COND_ASSIGN_DEFAULT`.
const ASSIGN_DEFAULT: u32 = 1;
/// `CUgraphConditionalNodeType`.
const IF: u32 = 0;
const WHILE: u32 = 1;
const SWITCH: u32 = 2;

/// One conditional handle.
pub(super) struct Handle {
    /// The graph it was made for.
    graph: u64,
    default: u32,
    assign: bool,
    /// The graph and the instantiations that use it: the slot is freed
    /// when the last goes.
    owners: HashSet<u64>,
}

/// Whether the host resolves `cudaGraphSetConditional` to a store at the
/// handle's address (asked with the device's attributes at connection).
fn supported() -> bool {
    state::device().and_then(|d| d.attribute(ATTR_GUEST_GRAPH_CONDITIONALS)) == Ok(1)
}

/// `cuGraphConditionalHandleCreate`.
#[no_mangle]
pub extern "C" fn cuGraphConditionalHandleCreate(
    handle: *mut u64,
    graph: CUgraph,
    _ctx: *mut c_void,
    default: u32,
    flags: u32,
) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if handle.is_null() || flags & !ASSIGN_DEFAULT != 0 || !super::graph_exists(graph as u64) {
            return Err(err::INVALID_VALUE);
        }
        if !supported() {
            return Err(crate::unsupported(
                "cuGraphConditionalHandleCreate (conditional graph nodes run on SimGpu; on a GPU \
                 the driver's own graphs would have to run them)",
            ));
        }
        let mut slot = 0u64;
        match crate::memory::cuMemAlloc_v2(&mut slot, 4) {
            err::SUCCESS => {}
            e => return Err(e),
        }
        let r = crate::memory::cuMemsetD32_v2(slot, default, 1);
        let kept = r == err::SUCCESS
            && with(|t| {
                if !t.graphs.contains_key(&(graph as u64)) {
                    return Ok(false);
                }
                t.conds.insert(
                    slot,
                    Handle {
                        graph: graph as u64,
                        default,
                        assign: flags & ASSIGN_DEFAULT != 0,
                        owners: HashSet::from([graph as u64]),
                    },
                );
                Ok(true)
            })
            .unwrap_or(false);
        if !kept {
            crate::memory::cuMemFree_v2(slot);
            return Err(if r == err::SUCCESS {
                err::INVALID_VALUE
            } else {
                r
            });
        }
        put(handle, slot)
    })
}

/// `CUDA_CONDITIONAL_NODE_PARAMS` in `CUgraphNodeParams`' union: the
/// handle, then type and size, then `phGraph_out` (written here) and the
/// context.
pub(super) fn add_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: &mut GraphNodeParams,
) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if node.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let deps = super::handles(deps, n)?;
        let handle = params.u[0];
        let (kind, size) = (params.u[1] as u32, (params.u[1] >> 32) as u32);
        let sizes_ok = match kind {
            IF => matches!(size, 1 | 2),
            WHILE => size == 1,
            SWITCH => (1..=MAX_BODIES).contains(&size),
            _ => false,
        };
        if !sizes_ok {
            return Err(err::INVALID_VALUE);
        }
        let (h, out) = with(|t| {
            // The handle must be one of this library's, made for this
            // graph or one whose body this graph is.
            let made_for = t.conds.get(&handle).ok_or(err::INVALID_VALUE)?.graph;
            if !t.graphs.contains_key(&made_for) || !t.graphs.contains_key(&(graph as u64)) {
                return Err(err::INVALID_VALUE);
            }
            let bodies: Box<[u64]> = (0..size)
                .map(|_| {
                    let b = t.fresh();
                    t.graphs.insert(b, super::Graph::default());
                    b
                })
                .collect();
            let out = bodies.as_ptr() as u64;
            let added = t.add(
                graph as u64,
                Work::Cond {
                    handle,
                    kind,
                    bodies: bodies.clone(),
                },
                &deps,
            );
            match added {
                Ok(h) => {
                    // The array handed out is the node's own (a boxed
                    // slice's heap storage does not move with it).
                    let node_bodies = match t.node_mut(h).map(|n| &n.work) {
                        Ok(Work::Cond { bodies, .. }) => bodies.as_ptr() as u64,
                        _ => out,
                    };
                    Ok((h, node_bodies))
                }
                Err(e) => {
                    for b in bodies.iter() {
                        t.graphs.remove(b);
                    }
                    Err(e)
                }
            }
        })?;
        params.u[2] = out;
        put(node, h as CUgraphNode)
    })
}

/// The handles the conditional steps in `steps` use (at any depth).
fn handles_in(steps: &[(u64, Work)], into: &mut Vec<u64>) {
    for (_, w) in steps {
        if let Work::CondRun { handle, bodies, .. } = w {
            if !into.contains(handle) {
                into.push(*handle);
            }
            for b in bodies {
                handles_in(b, into);
            }
        }
    }
}

/// Instantiation `exec` keeps the slots its steps use.
pub(super) fn hold(t: &mut Table, steps: &[(u64, Work)], exec: u64) {
    let mut hs = Vec::new();
    handles_in(steps, &mut hs);
    for h in hs {
        if let Some(c) = t.conds.get_mut(&h) {
            c.owners.insert(exec);
        }
    }
}

/// The slots a launch of `steps` sets to their default first, and the
/// values.
pub(super) fn launch_defaults(t: &Table, steps: &[(u64, Work)]) -> Vec<(u64, u32)> {
    let mut hs = Vec::new();
    handles_in(steps, &mut hs);
    hs.into_iter()
        .filter_map(|h| {
            let c = t.conds.get(&h)?;
            c.assign.then_some((h, c.default))
        })
        .collect()
}

/// Graph `clone` was copied from `original`: it keeps the slots the
/// original keeps (its kernels may set them, its nodes read them).
pub(super) fn share(t: &mut Table, original: u64, clone: u64) {
    for c in t.conds.values_mut() {
        if c.owners.contains(&original) {
            c.owners.insert(clone);
        }
    }
}

/// Graphs or instantiations `owners` are gone: frees the slots no one
/// uses any more.
pub(super) fn release(owners: &[u64]) {
    let freed = with(|t| {
        let mut freed = Vec::new();
        t.conds.retain(|slot, c| {
            for o in owners {
                c.owners.remove(o);
            }
            if c.owners.is_empty() {
                freed.push(*slot);
                false
            } else {
                true
            }
        });
        Ok(freed)
    })
    .unwrap_or_default();
    for slot in freed {
        crate::memory::cuMemFree_v2(slot);
    }
}

/// The condition's value now, in stream order on `s`.
fn read(handle: u64, s: CUstream) -> Result<u32, CUresult> {
    let mut v = 0u32;
    match crate::memory::cuMemcpyDtoHAsync_v2((&mut v as *mut u32).cast(), handle, 4, s) {
        err::SUCCESS => Ok(v),
        e => Err(e),
    }
}

/// Runs an instantiated conditional node on `s`.
pub(super) fn run(handle: u64, kind: u32, bodies: &[Vec<(u64, Work)>], s: CUstream) -> CUresult {
    let go = || -> Result<(), CUresult> {
        let body = |i: usize| match bodies.get(i) {
            Some(b) => match run_steps(b, s) {
                err::SUCCESS => Ok(()),
                e => Err(e),
            },
            None => Ok(()),
        };
        match kind {
            IF => {
                if read(handle, s)? != 0 {
                    body(0)
                } else {
                    body(1)
                }
            }
            WHILE => {
                while read(handle, s)? != 0 {
                    body(0)?;
                }
                Ok(())
            }
            SWITCH => body(read(handle, s)? as usize),
            _ => Err(err::INVALID_VALUE),
        }
    };
    match go() {
        Ok(()) => err::SUCCESS,
        Err(e) => e,
    }
}
