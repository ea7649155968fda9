//! Memory nodes, the generic node API (`cuGraphAddNode`), and the queries
//! and edits of a graph's structure: dependencies, edges, node removal,
//! clones' nodes, event nodes' events, nodes turned off in an instantiated
//! graph, and the parameters of kernel, copy, memset and host nodes read
//! back and changed (in the graph and in an instantiated graph).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use super::{
    add_node, captured, cuGraphAddChildGraphNode, cuGraphAddEmptyNode, cuGraphAddEventRecordNode,
    cuGraphAddEventWaitNode, cuGraphAddHostNode, cuGraphAddKernelNode_v2, cuGraphAddMemcpyNode,
    cuGraphAddMemsetNode, handles, host_work, memset_work, node_type, put, with, CUgraph,
    CUgraphExec, CUgraphNode, HostNodeParams, KernelNodeParams, KernelNodeParamsV2,
    MemsetNodeParams, Work,
};
use crate::array::Memcpy3D;
use crate::ffi_result;
use crate::types::{err, CUfunction, CUresult, CUstream};

/// `CUDA_MEM_ALLOC_NODE_PARAMS` (v1 and v2 share the layout): the pool
/// properties (88 bytes, of which the leading four 32-bit fields matter
/// here), the access descriptors, the size, and the address the driver
/// returns.
#[repr(C)]
pub struct MemAllocNodeParams {
    alloc_type: u32,
    handle_types: u32,
    location_type: u32,
    location_id: i32,
    props_rest: [u64; 9],
    access_descs: *const c_void,
    access_desc_count: usize,
    bytesize: usize,
    dptr: u64,
}

/// Most access descriptors an allocation node may name (one device).
const MAX_ACCESS_DESCS: usize = 64;

/// The work of an allocation node described by `params`; writes the
/// allocation's address into `params.dptr`.
fn mem_alloc_work(params: *mut MemAllocNodeParams) -> Result<Work, CUresult> {
    if params.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes the node's parameters.
    let p = unsafe { &mut *params };
    // CU_MEM_ALLOCATION_TYPE_PINNED on CU_MEM_LOCATION_TYPE_DEVICE 0.
    if p.alloc_type != 1 || p.location_type != 1 || p.access_desc_count > MAX_ACCESS_DESCS {
        return Err(err::INVALID_VALUE);
    }
    if p.location_id != 0 {
        return Err(err::INVALID_DEVICE);
    }
    if p.handle_types != 0 {
        return Err(crate::unsupported(
            "graph allocations exported to other processes",
        ));
    }
    let hold = crate::graph_mem::create(p.bytesize as u64)?;
    p.dptr = hold.ptr();
    Ok(Work::MemAlloc(hold))
}

fn mem_free_work(dptr: u64) -> Result<Work, CUresult> {
    if crate::graph_mem::size(dptr).is_none() {
        return Err(err::INVALID_VALUE);
    }
    Ok(Work::MemFree(dptr))
}

/// `cuGraphAddMemAllocNode`: the allocation's address is in
/// `params.dptr` on return.
#[no_mangle]
pub extern "C" fn cuGraphAddMemAllocNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut MemAllocNodeParams,
) -> CUresult {
    let r = add_node(node, graph, deps, n, || mem_alloc_work(params));
    crate::graph_mem::flush();
    r
}

/// `cuGraphAddMemFreeNode`: frees a graph allocation.
#[no_mangle]
pub extern "C" fn cuGraphAddMemFreeNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    dptr: u64,
) -> CUresult {
    add_node(node, graph, deps, n, || mem_free_work(dptr))
}

/// `cuGraphMemAllocNodeGetParams`.
#[no_mangle]
pub extern "C" fn cuGraphMemAllocNodeGetParams(
    node: CUgraphNode,
    params: *mut MemAllocNodeParams,
) -> CUresult {
    ffi_result(|| {
        let ptr = with(|t| match &t.node_mut(node as u64)?.work {
            Work::MemAlloc(h) => Ok(h.ptr()),
            _ => Err(err::INVALID_VALUE),
        })?;
        let bytes = crate::graph_mem::size(ptr).ok_or(err::INVALID_VALUE)?;
        put(
            params,
            MemAllocNodeParams {
                alloc_type: 1,
                handle_types: 0,
                location_type: 1,
                location_id: 0,
                props_rest: [0; 9],
                access_descs: std::ptr::null(),
                access_desc_count: 0,
                bytesize: bytes as usize,
                dptr: ptr,
            },
        )
    })
}

/// `cuGraphMemFreeNodeGetParams`.
#[no_mangle]
pub extern "C" fn cuGraphMemFreeNodeGetParams(node: CUgraphNode, dptr: *mut u64) -> CUresult {
    ffi_result(|| {
        let p = with(|t| match t.node_mut(node as u64)?.work {
            Work::MemFree(p) => Ok(p),
            _ => Err(err::INVALID_VALUE),
        })?;
        put(dptr, p)
    })
}

/// Stream capture of `cuMemAllocAsync`: an allocation node, its address
/// written to `dptr`. `None` if stream `s` is not capturing.
pub fn captured_alloc(s: CUstream, size: usize, dptr: *mut u64) -> Option<CUresult> {
    let r = captured(s, || {
        if dptr.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let hold = crate::graph_mem::create(size as u64)?;
        put(dptr, hold.ptr())?;
        Ok(Work::MemAlloc(hold))
    });
    if r.is_some() {
        crate::graph_mem::flush();
    }
    r
}

/// Stream capture of `cuMemFreeAsync`: a free node. `None` if stream `s`
/// is not capturing.
pub fn captured_free(s: CUstream, dptr: u64) -> Option<CUresult> {
    captured(s, || mem_free_work(dptr))
}

/// `CUgraphNodeParams`: a type, then a union of every kind's parameters
/// (232 bytes), then a reserved word.
#[repr(C)]
pub struct GraphNodeParams {
    ty: u32,
    reserved0: [i32; 3],
    pub(super) u: [u64; 29],
    reserved2: i64,
}

/// `cuGraphAddNode`: each node type through its own entry point.
#[no_mangle]
pub extern "C" fn cuGraphAddNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *mut GraphNodeParams,
) -> CUresult {
    if params.is_null() {
        return err::INVALID_VALUE;
    }
    // SAFETY: non-null; the caller passes the node's parameters, which
    // this call may write (an allocation's address).
    let p = unsafe { &mut *params };
    let u = p.u.as_mut_ptr();
    let word = |i: usize| p.u[i];
    match p.ty {
        0 => cuGraphAddKernelNode_v2(node, graph, deps, n, u.cast()),
        1 => {
            // CUDA_MEMCPY_NODE_PARAMS: flags, reserved, context, then the
            // copy (16 bytes in).
            // SAFETY: the union holds the copy description at that offset.
            let copy = unsafe { u.add(2) }.cast::<Memcpy3D>();
            cuGraphAddMemcpyNode(node, graph, deps, n, copy, std::ptr::null_mut())
        }
        2 => cuGraphAddMemsetNode(node, graph, deps, n, u.cast(), std::ptr::null_mut()),
        3 => cuGraphAddHostNode(node, graph, deps, n, u.cast()),
        4 => cuGraphAddChildGraphNode(node, graph, deps, n, word(0) as CUgraph),
        5 => cuGraphAddEmptyNode(node, graph, deps, n),
        6 => cuGraphAddEventWaitNode(node, graph, deps, n, word(0) as *mut c_void),
        7 => cuGraphAddEventRecordNode(node, graph, deps, n, word(0) as *mut c_void),
        10 => cuGraphAddMemAllocNode(node, graph, deps, n, u.cast()),
        11 => cuGraphAddMemFreeNode(node, graph, deps, n, word(0)),
        8 | 9 => crate::unsupported("graph nodes of external semaphores"),
        12 => crate::unsupported("graph nodes of batched memory operations"),
        13 => super::cond::add_node(node, graph, deps, n, p),
        _ => err::INVALID_VALUE,
    }
}

/// `cuGraphAddNode_v2` (edge data: default edges only).
#[no_mangle]
pub extern "C" fn cuGraphAddNode_v2(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edge_data: *const c_void,
    n: usize,
    params: *mut GraphNodeParams,
) -> CUresult {
    if !edge_data.is_null() {
        return crate::unsupported("cuGraphAddNode_v2 with edge data");
    }
    cuGraphAddNode(node, graph, deps, n, params)
}

/// Writes `items` into the caller's array of `*count` slots (null: only
/// the count), and how many were written (or exist) into `count`.
fn put_list(items: &[u64], out: *mut CUgraphNode, count: *mut usize) -> Result<(), CUresult> {
    if count.is_null() {
        return Err(err::INVALID_VALUE);
    }
    if out.is_null() {
        return put(count, items.len());
    }
    // SAFETY: non-null; the caller says how many slots it passes.
    let room = unsafe { *count };
    for (i, h) in items.iter().take(room).enumerate() {
        // SAFETY: `i` is below the caller's count of slots.
        unsafe { *out.add(i) = *h as CUgraphNode };
    }
    put(count, items.len().min(room))
}

/// The nodes `node` depends on (`deps`) or that depend on it.
fn neighbours(node: CUgraphNode, deps: bool) -> Result<Vec<u64>, CUresult> {
    with(|t| {
        let h = node as u64;
        let g = *t.nodes.get(&h).ok_or(err::INVALID_VALUE)?;
        let g = t.graphs.get(&g).ok_or(err::INVALID_VALUE)?;
        let me = g
            .nodes
            .iter()
            .find(|n| n.handle == h)
            .ok_or(err::INVALID_VALUE)?;
        Ok(if deps {
            me.deps.clone()
        } else {
            g.nodes
                .iter()
                .filter(|n| n.deps.contains(&h))
                .map(|n| n.handle)
                .collect()
        })
    })
}

/// `cuGraphNodeGetDependencies`.
#[no_mangle]
pub extern "C" fn cuGraphNodeGetDependencies(
    node: CUgraphNode,
    deps: *mut CUgraphNode,
    n: *mut usize,
) -> CUresult {
    ffi_result(|| put_list(&neighbours(node, true)?, deps, n))
}

/// `cuGraphNodeGetDependencies_v2` (every edge is a default edge: its
/// data, if asked for, is zeroed).
#[no_mangle]
pub extern "C" fn cuGraphNodeGetDependencies_v2(
    node: CUgraphNode,
    deps: *mut CUgraphNode,
    edge_data: *mut u64,
    n: *mut usize,
) -> CUresult {
    ffi_result(|| {
        let list = neighbours(node, true)?;
        put_list(&list, deps, n)?;
        zero_edges(edge_data, deps.is_null(), n)
    })
}

/// `cuGraphNodeGetDependentNodes`.
#[no_mangle]
pub extern "C" fn cuGraphNodeGetDependentNodes(
    node: CUgraphNode,
    users: *mut CUgraphNode,
    n: *mut usize,
) -> CUresult {
    ffi_result(|| put_list(&neighbours(node, false)?, users, n))
}

/// `cuGraphNodeGetDependentNodes_v2`.
#[no_mangle]
pub extern "C" fn cuGraphNodeGetDependentNodes_v2(
    node: CUgraphNode,
    users: *mut CUgraphNode,
    edge_data: *mut u64,
    n: *mut usize,
) -> CUresult {
    ffi_result(|| {
        let list = neighbours(node, false)?;
        put_list(&list, users, n)?;
        zero_edges(edge_data, users.is_null(), n)
    })
}

/// Zeroes the `*n` 8-byte `CUgraphEdgeData` records at `edge_data`
/// (default edges), unless only a count was asked for.
fn zero_edges(edge_data: *mut u64, count_only: bool, n: *mut usize) -> Result<(), CUresult> {
    if edge_data.is_null() || count_only {
        return Ok(());
    }
    // SAFETY: `n` was checked non-null and written by `put_list`.
    let k = unsafe { *n };
    for i in 0..k {
        // SAFETY: the caller passes as many edge records as node slots.
        unsafe { edge_data.add(i).write_unaligned(0) };
    }
    Ok(())
}

/// `cuGraphGetEdges`: every (dependency, node) pair.
#[no_mangle]
pub extern "C" fn cuGraphGetEdges(
    graph: CUgraph,
    from: *mut CUgraphNode,
    to: *mut CUgraphNode,
    n: *mut usize,
) -> CUresult {
    ffi_result(|| {
        if n.is_null() || from.is_null() != to.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let edges: Vec<(u64, u64)> = with(|t| {
            let g = t.graphs.get(&(graph as u64)).ok_or(err::INVALID_VALUE)?;
            Ok(g.nodes
                .iter()
                .flat_map(|x| x.deps.iter().map(move |d| (*d, x.handle)))
                .collect())
        })?;
        let froms: Vec<u64> = edges.iter().map(|e| e.0).collect();
        let tos: Vec<u64> = edges.iter().map(|e| e.1).collect();
        if from.is_null() {
            return put(n, edges.len());
        }
        // SAFETY: non-null; read before `put_list` overwrites it.
        let room = unsafe { *n };
        put_list(&froms, from, n)?;
        put(n, room)?;
        put_list(&tos, to, n)
    })
}

/// `cuGraphGetEdges_v2`.
#[no_mangle]
pub extern "C" fn cuGraphGetEdges_v2(
    graph: CUgraph,
    from: *mut CUgraphNode,
    to: *mut CUgraphNode,
    edge_data: *mut u64,
    n: *mut usize,
) -> CUresult {
    match cuGraphGetEdges(graph, from, to, n) {
        err::SUCCESS => ffi_result(|| zero_edges(edge_data, from.is_null(), n)),
        e => e,
    }
}

/// `cuGraphRemoveDependencies`.
#[no_mangle]
pub extern "C" fn cuGraphRemoveDependencies(
    _graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    n: usize,
) -> CUresult {
    ffi_result(|| {
        let (from, to) = (handles(from, n)?, handles(to, n)?);
        with(|t| {
            // All or nothing: every edge must exist.
            for (f, d) in from.iter().zip(&to) {
                if !t.node_mut(*d)?.deps.contains(f) {
                    return Err(err::INVALID_VALUE);
                }
            }
            for (f, d) in from.iter().zip(&to) {
                t.node_mut(*d)?.deps.retain(|x| x != f);
            }
            Ok(())
        })
    })
}

/// `cuGraphRemoveDependencies_v2`.
#[no_mangle]
pub extern "C" fn cuGraphRemoveDependencies_v2(
    graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    _edge_data: *const c_void,
    n: usize,
) -> CUresult {
    cuGraphRemoveDependencies(graph, from, to, n)
}

/// `cuGraphDestroyNode`: the node and every edge to or from it.
#[no_mangle]
pub extern "C" fn cuGraphDestroyNode(node: CUgraphNode) -> CUresult {
    let mut gone = Vec::new();
    let r = ffi_result(|| {
        let h = node as u64;
        with(|t| {
            let g = t.nodes.remove(&h).ok_or(err::INVALID_VALUE)?;
            let graph = t.graphs.get_mut(&g).ok_or(err::INVALID_VALUE)?;
            let bodies: Vec<u64> = graph
                .nodes
                .iter()
                .filter(|n| n.handle == h)
                .flat_map(|n| match &n.work {
                    Work::Cond { bodies, .. } => bodies.to_vec(),
                    _ => Vec::new(),
                })
                .collect();
            graph.nodes.retain(|n| n.handle != h);
            for n in &mut graph.nodes {
                n.deps.retain(|d| *d != h);
            }
            // A conditional node's body graphs go with it.
            for b in bodies {
                gone.extend(t.remove_graph(b));
            }
            Ok(())
        })
    });
    super::cond::release(&gone);
    if let Ok(mut args) = KERNEL_ARGS.lock() {
        if let Some(a) = args.as_mut() {
            a.remove(&(node as u64));
        }
    }
    crate::graph_mem::flush();
    r
}

/// `cuGraphNodeGetContainingGraph`.
#[no_mangle]
pub extern "C" fn cuGraphNodeGetContainingGraph(
    node: CUgraphNode,
    graph: *mut CUgraph,
) -> CUresult {
    ffi_result(|| {
        let g = with(|t| {
            t.nodes
                .get(&(node as u64))
                .copied()
                .ok_or(err::INVALID_VALUE)
        })?;
        put(graph, g as CUgraph)
    })
}

fn event_of(node: CUgraphNode, record: bool) -> Result<usize, CUresult> {
    with(|t| match t.node_mut(node as u64)?.work {
        Work::EventRecord(e) if record => Ok(e),
        Work::EventWait(e) if !record => Ok(e),
        _ => Err(err::INVALID_VALUE),
    })
}

fn set_event(node: CUgraphNode, record: bool, e: *mut c_void) -> CUresult {
    ffi_result(|| {
        if e.is_null() {
            return Err(err::INVALID_VALUE);
        }
        with(|t| {
            let n = t.node_mut(node as u64)?;
            n.work = match n.work {
                Work::EventRecord(_) if record => Work::EventRecord(e as usize),
                Work::EventWait(_) if !record => Work::EventWait(e as usize),
                _ => return Err(err::INVALID_VALUE),
            };
            Ok(())
        })
    })
}

/// `cuGraphEventRecordNodeGetEvent`.
#[no_mangle]
pub extern "C" fn cuGraphEventRecordNodeGetEvent(
    node: CUgraphNode,
    e: *mut *mut c_void,
) -> CUresult {
    ffi_result(|| put(e, event_of(node, true)? as *mut c_void))
}

/// `cuGraphEventRecordNodeSetEvent`.
#[no_mangle]
pub extern "C" fn cuGraphEventRecordNodeSetEvent(node: CUgraphNode, e: *mut c_void) -> CUresult {
    set_event(node, true, e)
}

/// `cuGraphEventWaitNodeGetEvent`.
#[no_mangle]
pub extern "C" fn cuGraphEventWaitNodeGetEvent(node: CUgraphNode, e: *mut *mut c_void) -> CUresult {
    ffi_result(|| put(e, event_of(node, false)? as *mut c_void))
}

/// `cuGraphEventWaitNodeSetEvent`.
#[no_mangle]
pub extern "C" fn cuGraphEventWaitNodeSetEvent(node: CUgraphNode, e: *mut c_void) -> CUresult {
    set_event(node, false, e)
}

/// `cuGraphNodeFindInClone`: the node of clone `graph` made from
/// `original`.
#[no_mangle]
pub extern "C" fn cuGraphNodeFindInClone(
    node: *mut CUgraphNode,
    original: CUgraphNode,
    graph: CUgraph,
) -> CUresult {
    ffi_result(|| {
        let h = with(|t| {
            t.clones
                .get(&(graph as u64, original as u64))
                .copied()
                .filter(|n| t.nodes.contains_key(n))
                .ok_or(err::INVALID_VALUE)
        })?;
        put(node, h as CUgraphNode)
    })
}

/// `cuGraphExecGetFlags`: the flags the graph was instantiated with.
#[no_mangle]
pub extern "C" fn cuGraphExecGetFlags(exec: CUgraphExec, flags: *mut u64) -> CUresult {
    ffi_result(|| {
        let f = with(|t| {
            t.execs
                .get(&(exec as u64))
                .map(|e| e.flags)
                .ok_or(err::INVALID_VALUE)
        })?;
        put(flags, f)
    })
}

/// INVALID_VALUE unless `node` is a kernel, copy or memset node of the
/// instantiated graph `e` (the nodes that can be turned off).
fn switchable(e: &super::Exec, node: CUgraphNode) -> Result<(), CUresult> {
    let n = e
        .graph
        .nodes
        .iter()
        .find(|n| n.handle == node as u64)
        .ok_or(err::INVALID_VALUE)?;
    if matches!(node_type(&n.work), 0..=2) {
        Ok(())
    } else {
        Err(err::INVALID_VALUE)
    }
}

/// `cuGraphNodeSetEnabled`: kernel, copy and memset nodes of an
/// instantiated graph may be turned off and on.
#[no_mangle]
pub extern "C" fn cuGraphNodeSetEnabled(exec: CUgraphExec, node: CUgraphNode, on: u32) -> CUresult {
    ffi_result(|| {
        with(|t| {
            let e = t.execs.get_mut(&(exec as u64)).ok_or(err::INVALID_VALUE)?;
            switchable(e, node)?;
            if on != 0 {
                e.disabled.remove(&(node as u64));
            } else {
                e.disabled.insert(node as u64);
            }
            Ok(())
        })
    })
}

/// `cuGraphNodeGetEnabled`.
#[no_mangle]
pub extern "C" fn cuGraphNodeGetEnabled(
    exec: CUgraphExec,
    node: CUgraphNode,
    on: *mut u32,
) -> CUresult {
    ffi_result(|| {
        let v = with(|t| {
            let e = t.execs.get(&(exec as u64)).ok_or(err::INVALID_VALUE)?;
            switchable(e, node)?;
            Ok(u32::from(!e.disabled.contains(&(node as u64))))
        })?;
        put(on, v)
    })
}

/// Arguments of kernel nodes as `cuGraphKernelNodeGetParams` hands them
/// out: per node, a copy of the packed parameters and the addresses of
/// each argument in it (valid until the node's parameters change or the
/// node goes, as the driver's).
static KERNEL_ARGS: Mutex<Option<HashMap<u64, KernelArgs>>> = Mutex::new(None);

/// A copy of a kernel node's packed arguments and each argument's address
/// in it.
type KernelArgs = (Box<[u8]>, Box<[usize]>);

/// The node's current work.
fn work_of(node: CUgraphNode) -> Result<Work, CUresult> {
    with(|t| Ok(t.node_mut(node as u64)?.work.clone()))
}

/// Replaces the work of `node` (in its graph) by `w`, if its kind is the
/// same.
fn set_work(node: CUgraphNode, w: Work) -> Result<(), CUresult> {
    with(|t| {
        let n = t.node_mut(node as u64)?;
        if node_type(&n.work) != node_type(&w) {
            return Err(err::INVALID_VALUE);
        }
        n.work = w;
        Ok(())
    })
}

/// Replaces the work of `node` in instantiated graph `exec` by `w`, if its
/// kind is the same.
pub(super) fn set_exec_work(exec: CUgraphExec, node: CUgraphNode, w: Work) -> Result<(), CUresult> {
    with(|t| {
        let e = t.execs.get_mut(&(exec as u64)).ok_or(err::INVALID_VALUE)?;
        let step = e
            .steps
            .iter_mut()
            .find(|(n, old)| *n == node as u64 && node_type(old) == node_type(&w))
            .ok_or(err::INVALID_VALUE)?;
        step.1 = w;
        Ok(())
    })
}

/// `cuGraphKernelNodeGetParams`: the function, geometry and arguments
/// (pointers to copies of their values) of a kernel node.
#[no_mangle]
pub extern "C" fn cuGraphKernelNodeGetParams(
    node: CUgraphNode,
    params: *mut KernelNodeParams,
) -> CUresult {
    ffi_result(|| {
        let Work::Kernel {
            f,
            grid,
            block,
            shared,
            params: packed,
            ..
        } = work_of(node)?
        else {
            return Err(err::INVALID_VALUE);
        };
        let layout = crate::module::function_ref(f as CUfunction)?.params.clone();
        let bytes: Box<[u8]> = packed.into_boxed_slice();
        let base = bytes.as_ptr() as usize;
        let ptrs: Box<[usize]> = layout.iter().map(|p| base + p.offset as usize).collect();
        let args = ptrs.as_ptr() as *mut *mut c_void;
        KERNEL_ARGS
            .lock()
            .map_err(|_| err::UNKNOWN)?
            .get_or_insert_with(HashMap::new)
            .insert(node as u64, (bytes, ptrs));
        put(
            params,
            KernelNodeParams {
                func: f as CUfunction,
                grid,
                block,
                shared,
                params: args,
                extra: std::ptr::null_mut(),
            },
        )
    })
}

/// `cuGraphKernelNodeGetParams_v2`: as v1, the function also as the
/// kernel handle, no context.
#[no_mangle]
pub extern "C" fn cuGraphKernelNodeGetParams_v2(
    node: CUgraphNode,
    params: *mut KernelNodeParamsV2,
) -> CUresult {
    let mut v1 = std::mem::MaybeUninit::<KernelNodeParams>::uninit();
    match cuGraphKernelNodeGetParams(node, v1.as_mut_ptr()) {
        err::SUCCESS => {}
        e => return e,
    }
    // SAFETY: written by the call that just succeeded.
    let v1 = unsafe { v1.assume_init() };
    ffi_result(|| {
        put(
            params,
            KernelNodeParamsV2 {
                v1,
                kern: v1.func,
                ctx: std::ptr::null_mut(),
            },
        )
    })
}

/// The `CUDA_MEMCPY3D` of a copy node (a linear copy as one row between
/// unified addresses).
fn copy_desc(w: &Work) -> Result<Memcpy3D, CUresult> {
    match w {
        Work::Copy3D(p) => Ok(p.0),
        &Work::Copy { dst, src, n } => {
            // SAFETY: all-zero is a valid CUDA_MEMCPY3D (null pointers,
            // zero sizes); the fields that matter are set below.
            let mut d: Memcpy3D = unsafe { std::mem::zeroed() };
            // CU_MEMORYTYPE_UNIFIED.
            d.src_memory_type = 4;
            d.dst_memory_type = 4;
            d.src_device = src;
            d.dst_device = dst;
            d.width_in_bytes = n;
            d.height = 1;
            d.depth = 1;
            Ok(d)
        }
        _ => Err(err::INVALID_VALUE),
    }
}

/// `cuGraphMemcpyNodeGetParams`.
#[no_mangle]
pub extern "C" fn cuGraphMemcpyNodeGetParams(node: CUgraphNode, params: *mut Memcpy3D) -> CUresult {
    ffi_result(|| put(params, copy_desc(&work_of(node)?)?))
}

fn copy_work(params: *const Memcpy3D) -> Result<Work, CUresult> {
    if params.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes a copy description.
    Ok(Work::Copy3D(super::Copy3DParams(unsafe { *params })))
}

/// `cuGraphMemcpyNodeSetParams`.
#[no_mangle]
pub extern "C" fn cuGraphMemcpyNodeSetParams(
    node: CUgraphNode,
    params: *const Memcpy3D,
) -> CUresult {
    ffi_result(|| set_work(node, copy_work(params)?))
}

/// `cuGraphExecMemcpyNodeSetParams`.
#[no_mangle]
pub extern "C" fn cuGraphExecMemcpyNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const Memcpy3D,
    _ctx: *mut c_void,
) -> CUresult {
    ffi_result(|| set_exec_work(exec, node, copy_work(params)?))
}

/// `cuGraphMemsetNodeGetParams`.
#[no_mangle]
pub extern "C" fn cuGraphMemsetNodeGetParams(
    node: CUgraphNode,
    params: *mut MemsetNodeParams,
) -> CUresult {
    ffi_result(|| {
        let Work::Memset {
            dst,
            pitch,
            value,
            elem,
            width,
            height,
        } = work_of(node)?
        else {
            return Err(err::INVALID_VALUE);
        };
        put(
            params,
            MemsetNodeParams {
                dst,
                pitch,
                value,
                element_size: u32::from(elem),
                width,
                height,
            },
        )
    })
}

/// `cuGraphMemsetNodeSetParams`.
#[no_mangle]
pub extern "C" fn cuGraphMemsetNodeSetParams(
    node: CUgraphNode,
    params: *const MemsetNodeParams,
) -> CUresult {
    ffi_result(|| set_work(node, memset_work(params)?))
}

/// `cuGraphExecMemsetNodeSetParams`.
#[no_mangle]
pub extern "C" fn cuGraphExecMemsetNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const MemsetNodeParams,
    _ctx: *mut c_void,
) -> CUresult {
    ffi_result(|| set_exec_work(exec, node, memset_work(params)?))
}

/// `cuGraphHostNodeGetParams`.
#[no_mangle]
pub extern "C" fn cuGraphHostNodeGetParams(
    node: CUgraphNode,
    params: *mut HostNodeParams,
) -> CUresult {
    ffi_result(|| {
        let Work::Host { f, data } = work_of(node)? else {
            return Err(err::INVALID_VALUE);
        };
        // SAFETY: `f` is the address of the `CUhostFn` the node was made
        // with (checked non-null then).
        let f: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(f) };
        put(
            params,
            HostNodeParams {
                f: Some(f),
                data: data as *mut c_void,
            },
        )
    })
}

/// `cuGraphHostNodeSetParams`.
#[no_mangle]
pub extern "C" fn cuGraphHostNodeSetParams(
    node: CUgraphNode,
    params: *const HostNodeParams,
) -> CUresult {
    ffi_result(|| set_work(node, host_work(params)?))
}

/// `cuGraphExecHostNodeSetParams`.
#[no_mangle]
pub extern "C" fn cuGraphExecHostNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const HostNodeParams,
) -> CUresult {
    ffi_result(|| set_exec_work(exec, node, host_work(params)?))
}

/// `CUDA_ERROR_OPERATING_SYSTEM`.
const OPERATING_SYSTEM: CUresult = 304;

/// `CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE`.
const DOT_VERBOSE: u32 = 1;

/// `cuGraphDebugDotPrint`: the graph in Graphviz's DOT language, one
/// vertex per node labelled with its type (and a kernel's name), one edge
/// per dependency; child graphs as clusters of their own nodes. With
/// `CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE` (or any flag asking for a node
/// type's parameters) the labels also give each node's parameters:
/// launch geometry, addresses and sizes.
#[no_mangle]
pub extern "C" fn cuGraphDebugDotPrint(
    graph: CUgraph,
    path: *const std::ffi::c_char,
    flags: u32,
) -> CUresult {
    ffi_result(|| {
        if path.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: a C string per the API.
        let path = unsafe { std::ffi::CStr::from_ptr(path) }
            .to_str()
            .map_err(|_| err::INVALID_VALUE)?
            .to_owned();
        let g = with(|t| {
            t.graphs
                .get(&(graph as u64))
                .cloned()
                .ok_or(err::INVALID_VALUE)
        })?;
        let mut text = String::from("digraph fairgpu_graph {\n");
        // VERBOSE, or a flag asking for some node type's parameters
        // (KERNEL_NODE_PARAMS, 1 << 2, to CONDITIONAL_NODE_PARAMS, 1 << 15;
        // RUNTIME_TYPES, 1 << 1, names none).
        let verbose = flags & (DOT_VERBOSE | 0xfffc) != 0;
        dot(&g, "", verbose, &mut text);
        text.push_str("}\n");
        std::fs::write(&path, text).map_err(|_| OPERATING_SYSTEM)
    })
}

/// Appends the DOT vertices and edges of `g`, names prefixed by `prefix`;
/// `verbose`: with each node's parameters.
fn dot(g: &super::Graph, prefix: &str, verbose: bool, text: &mut String) {
    use std::fmt::Write;
    for n in &g.nodes {
        let id = format!("{prefix}n{:x}", n.handle);
        let label = match &n.work {
            Work::Kernel {
                f,
                grid,
                block,
                shared,
                params,
                ..
            } => {
                let name = crate::module::function_ref(*f as CUfunction)
                    .ok()
                    .and_then(|f| f.name().to_str().ok().map(str::to_owned))
                    .unwrap_or_default();
                if verbose {
                    format!(
                        "KERNEL\\n{name}\\ngrid ({}, {}, {}) block ({}, {}, {})\\nshared {shared} B, parameters {} B",
                        grid[0],
                        grid[1],
                        grid[2],
                        block[0],
                        block[1],
                        block[2],
                        params.len()
                    )
                } else {
                    format!("KERNEL\\n{name}")
                }
            }
            Work::Copy { dst, src, n } if verbose => {
                format!("MEMCPY\\n{src:#x} -> {dst:#x}, {n} B")
            }
            Work::Copy3D(_) | Work::Copy { .. } => "MEMCPY".to_owned(),
            Work::Memset {
                dst,
                value,
                elem,
                width,
                height,
                ..
            } if verbose => {
                format!("MEMSET\\n{dst:#x}, {width} x {height} of {elem} B, value {value:#x}")
            }
            Work::Memset { .. } => "MEMSET".to_owned(),
            Work::Host { .. } => "HOST".to_owned(),
            Work::EventRecord(_) => "EVENT_RECORD".to_owned(),
            Work::EventWait(_) => "EVENT_WAIT".to_owned(),
            Work::Empty => "EMPTY".to_owned(),
            Work::MemAlloc(h) => format!("MEM_ALLOC\\n{:#x}", h.ptr()),
            Work::MemFree(p) => format!("MEM_FREE\\n{p:#x}"),
            Work::Cond { kind, bodies, .. } => {
                let kind = ["IF", "WHILE", "SWITCH"]
                    .get(*kind as usize)
                    .unwrap_or(&"?");
                format!("CONDITIONAL\\n{kind}, {} bodies", bodies.len())
            }
            Work::CondRun { .. } => "CONDITIONAL".to_owned(),
            Work::Child(c) => {
                let _ = writeln!(text, "subgraph cluster_{id} {{ label=\"GRAPH\";");
                dot(c, &format!("{id}_"), verbose, text);
                let _ = writeln!(text, "}}");
                "GRAPH".to_owned()
            }
        };
        let _ = writeln!(text, "\"{id}\" [label=\"{label}\"];");
        for d in &n.deps {
            let _ = writeln!(text, "\"{prefix}n{d:x}\" -> \"{id}\";");
        }
    }
}

/// The work `params` (a `CUgraphNodeParams`) describes, for the node types
/// whose parameters can change: kernel, copy, memset, host, event record
/// and wait.
fn generic_work(params: *mut GraphNodeParams) -> Result<Work, CUresult> {
    if params.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes the node's parameters.
    let p = unsafe { &mut *params };
    let u = p.u.as_mut_ptr();
    match p.ty {
        0 => super::kernel_work(&super::v1_of(u.cast())?),
        // SAFETY: the union holds the copy description 16 bytes in.
        1 => copy_work(unsafe { u.add(2) }.cast()),
        2 => memset_work(u.cast()),
        3 => host_work(u.cast()),
        6 if p.u[0] != 0 => Ok(Work::EventWait(p.u[0] as usize)),
        7 if p.u[0] != 0 => Ok(Work::EventRecord(p.u[0] as usize)),
        _ => Err(err::INVALID_VALUE),
    }
}

/// `cuGraphNodeSetParams`: a node's parameters, through the generic
/// description (its type must be the node's).
#[no_mangle]
pub extern "C" fn cuGraphNodeSetParams(
    node: CUgraphNode,
    params: *mut GraphNodeParams,
) -> CUresult {
    ffi_result(|| set_work(node, generic_work(params)?))
}

/// `cuGraphExecNodeSetParams`: as [`cuGraphNodeSetParams`], in an
/// instantiated graph.
#[no_mangle]
pub extern "C" fn cuGraphExecNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *mut GraphNodeParams,
) -> CUresult {
    ffi_result(|| set_exec_work(exec, node, generic_work(params)?))
}
