//! CUDA graphs: explicit construction, stream capture, instantiation and
//! launch, kept in the guest library.
//!
//! A graph is a list of nodes (the work each does and the nodes it waits
//! for). Its work is what the application could have issued on a stream:
//! kernels (their parameters packed when the node is made, as a launch
//! packs them), copies (linear or `CUDA_MEMCPY3D`), memsets, host
//! functions, event records and waits, empty nodes and child graphs.
//! `cuGraphInstantiate` orders the nodes once (dependencies first, then
//! the order they were added; a cycle is refused) and flattens child
//! graphs; `cuGraphLaunch` issues that order on the launch stream through
//! this library's own entry points, so each node is checked, quota'd and
//! scheduled exactly as the same call outside a graph; the channel gathers
//! what they send into one `GraphLaunch` request (one ring entry for the
//! launch, `Channel::begin_batch`), whose steps the host runs in order as
//! the requests they stand for. Branches that
//! a GPU could run side by side run one after another on the launch
//! stream, which the graph's partial order allows.
//!
//! Stream capture: between `cuStreamBeginCapture` and `cuStreamEndCapture`
//! the asynchronous calls on the stream (launches, async copies and
//! memsets, host functions) become nodes instead of being sent, each
//! depending on the stream's previous node(s). An event recorded on a
//! capturing stream remembers those nodes; a stream that waits for it
//! joins the capture with them as its dependencies (fork and join across
//! streams). A synchronizing call on a capturing stream fails with
//! `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED` and invalidates the capture,
//! as the driver does. Host copies captured from pageable memory read and
//! write that memory when the graph runs, as on a GPU.
//!
//! Handles (`CUgraph`, `CUgraphNode`, `CUgraphExec`) are numbers this
//! library hands out, looked up in one table; a stale or forged one is
//! `CUDA_ERROR_INVALID_VALUE`, never a dereference.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::c_void;
use std::sync::Mutex;

use fairgpu_protocol::cuda::LaunchOptions;

use crate::array::Memcpy3D;
use crate::context::{out, require_current};
use crate::ffi_result;
use crate::stream::stream_handle;
use crate::types::{err, CUfunction, CUresult, CUstream};

mod cond;
mod nodes;
mod user;
pub use nodes::{captured_alloc, captured_free};

/// `CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`.
pub const CAPTURE_UNSUPPORTED: CUresult = 900;
/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`.
const CAPTURE_INVALIDATED: CUresult = 901;
/// `CUDA_ERROR_STREAM_CAPTURE_UNMATCHED`: ending a capture on a stream
/// that joined it rather than began it.
const CAPTURE_UNMATCHED: CUresult = 903;
/// `CUDA_ERROR_STREAM_CAPTURE_UNJOINED`: a stream that joined a capture
/// has work the stream that began it never waited for.
const CAPTURE_UNJOINED: CUresult = 904;
/// `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`: the legacy NULL stream, which
/// would wait for a blocking stream that is capturing.
const CAPTURE_IMPLICIT: CUresult = 906;
/// `CUDA_ERROR_ILLEGAL_STATE`: ending a capture on a stream not capturing.
const ILLEGAL_STATE: CUresult = 401;
/// `CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`.
const EXEC_UPDATE_FAILURE: CUresult = 910;

/// Most nodes one graph holds (a bound on what a guest can make us keep).
const MAX_NODES: usize = 1 << 16;

/// What a node does when its graph runs.
#[derive(Clone, Debug)]
pub enum Work {
    /// A kernel with its packed parameters.
    Kernel {
        /// The function handle as the application gave it.
        f: usize,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        params: Vec<u8>,
        options: LaunchOptions,
    },
    /// `CUDA_MEMCPY3D`.
    Copy3D(Copy3DParams),
    /// A linear copy between two addresses (unified addressing decides the
    /// direction when it runs).
    Copy {
        dst: u64,
        src: u64,
        n: usize,
    },
    /// A memset of `height` rows of `width` elements, `pitch` bytes apart.
    Memset {
        dst: u64,
        pitch: usize,
        value: u32,
        elem: u8,
        width: usize,
        height: usize,
    },
    /// `CUhostFn` and its data.
    Host {
        f: usize,
        data: usize,
    },
    EventRecord(usize),
    EventWait(usize),
    Empty,
    /// A child graph, copied when the node was made.
    Child(Box<Graph>),
    /// A memory allocation node: its memory, made with the node.
    MemAlloc(crate::graph_mem::Hold),
    /// A memory free node: the graph allocation it frees.
    MemFree(u64),
    /// A conditional node as made: its handle (the address of the
    /// condition's slot), `CUgraphConditionalNodeType` and body graphs
    /// (graphs of the table, which the node owns; the array is what the
    /// application was given as `phGraph_out`).
    Cond {
        handle: u64,
        kind: u32,
        bodies: Box<[u64]>,
    },
    /// A conditional node instantiated: each body's steps.
    CondRun {
        handle: u64,
        kind: u32,
        bodies: Vec<Vec<(u64, Work)>>,
    },
}

/// A `CUDA_MEMCPY3D` kept in a node (its pointers are the application's).
#[derive(Clone, Copy, Debug)]
pub struct Copy3DParams(pub Memcpy3D);
// SAFETY: the description's pointers are only read by the thread that
// runs the graph, through the same checks as a cuMemcpy3D call.
unsafe impl Send for Copy3DParams {}

#[derive(Clone, Debug)]
struct Node {
    handle: u64,
    work: Work,
    deps: Vec<u64>,
}

/// A graph's nodes in the order they were added.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    nodes: Vec<Node>,
}

impl Graph {
    /// Whether the graph has memory allocation or free nodes (which the
    /// driver does not let child graphs and clones have, and lets a graph
    /// have one instantiation of at a time).
    fn has_memory_nodes(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(n.work, Work::MemAlloc(_) | Work::MemFree(_)))
    }

    /// Whether the graph has conditional nodes (which the driver does
    /// not let a graph used as a child have, nor clones).
    fn has_conditionals(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(n.work, Work::Cond { .. }))
    }

    fn index(&self, node: u64) -> Option<usize> {
        self.nodes.iter().position(|n| n.handle == node)
    }

    /// Node indices with every node after the ones it depends on (ties in
    /// the order added); `None` if the dependencies form a cycle.
    fn order(&self) -> Option<Vec<usize>> {
        let pos: HashMap<u64, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.handle, i))
            .collect();
        let mut waiting: Vec<usize> = self.nodes.iter().map(|n| n.deps.len()).collect();
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for d in &n.deps {
                users[*pos.get(d)?].push(i);
            }
        }
        let mut ready: VecDeque<usize> =
            (0..self.nodes.len()).filter(|&i| waiting[i] == 0).collect();
        let mut order = Vec::with_capacity(self.nodes.len());
        while let Some(i) = ready.pop_front() {
            order.push(i);
            for &u in &users[i] {
                waiting[u] -= 1;
                if waiting[u] == 0 {
                    ready.push_back(u);
                }
            }
        }
        (order.len() == self.nodes.len()).then_some(order)
    }

    /// The work in execution order, child graphs flattened and the body
    /// graphs of conditional nodes (looked up in `graphs`) copied in as
    /// steps of their own, each with the node of this graph it came from.
    fn flatten(&self, graphs: &HashMap<u64, Graph>) -> Option<Vec<(u64, Work)>> {
        self.flatten_at(graphs, 0)
    }

    fn flatten_at(&self, graphs: &HashMap<u64, Graph>, depth: usize) -> Option<Vec<(u64, Work)>> {
        if depth > cond::MAX_NESTING {
            return None;
        }
        let mut out = Vec::new();
        for i in self.order()? {
            let n = &self.nodes[i];
            match &n.work {
                Work::Child(g) => out.extend(
                    g.flatten_at(graphs, depth + 1)?
                        .into_iter()
                        .map(|(_, w)| (n.handle, w)),
                ),
                Work::Cond {
                    handle,
                    kind,
                    bodies,
                } => {
                    let mut steps = Vec::with_capacity(bodies.len());
                    for b in bodies.iter() {
                        let body = graphs.get(b)?;
                        // Bodies may not allocate or free graph memory.
                        if body.has_memory_nodes() {
                            return None;
                        }
                        steps.push(body.flatten_at(graphs, depth + 1)?);
                    }
                    out.push((
                        n.handle,
                        Work::CondRun {
                            handle: *handle,
                            kind: *kind,
                            bodies: steps,
                        },
                    ));
                }
                w => out.push((n.handle, w.clone())),
            }
        }
        Some(out)
    }
}

/// An instantiated graph.
struct Exec {
    graph: Graph,
    steps: Vec<(u64, Work)>,
    /// The flags it was instantiated with; of them,
    /// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH` matters: a launch
    /// frees the allocations an earlier one left live.
    flags: u64,
    /// Nodes `cuGraphNodeSetEnabled` disabled: their work is skipped.
    disabled: HashSet<u64>,
    /// The graph it was instantiated from.
    source: u64,
}

/// A capture in progress on one stream.
#[derive(Clone)]
struct Capture {
    graph: u64,
    id: u64,
    /// The stream that began it (only it may end it).
    origin: u64,
    /// The nodes the stream's next node depends on.
    last: Vec<u64>,
    invalid: bool,
    /// The capture made its graph (`cuStreamBeginCapture`), rather than
    /// adding to the application's (`cuStreamBeginCaptureToGraph`): an
    /// invalidated capture's graph is destroyed only then.
    owned: bool,
}

impl Table {
    /// Marks capture `id` invalidated, in every stream that joined it.
    fn invalidate(&mut self, id: u64) {
        for c in self.captures.values_mut().filter(|c| c.id == id) {
            c.invalid = true;
        }
    }

    /// Whether every stream that joined capture `c` (its origin's) ends in
    /// nodes the origin's next node would follow: each of their last nodes
    /// is one of the origin's last or an ancestor of one.
    fn joined(&self, c: &Capture) -> bool {
        let Some(g) = self.graphs.get(&c.graph) else {
            return true;
        };
        let deps: HashMap<u64, &[u64]> = g
            .nodes
            .iter()
            .map(|n| (n.handle, n.deps.as_slice()))
            .collect();
        let mut seen: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let mut todo: Vec<u64> = c.last.clone();
        while let Some(n) = todo.pop() {
            if seen.insert(n) {
                todo.extend(deps.get(&n).copied().unwrap_or_default());
            }
        }
        self.captures
            .values()
            .filter(|x| x.id == c.id)
            .all(|x| x.last.iter().all(|n| seen.contains(n)))
    }
}

#[derive(Default)]
struct Table {
    next: u64,
    graphs: HashMap<u64, Graph>,
    /// Node -> its graph.
    nodes: HashMap<u64, u64>,
    execs: HashMap<u64, Exec>,
    /// Capturing streams.
    captures: HashMap<u64, Capture>,
    /// Events recorded on a capturing stream: (capture id, nodes).
    events: HashMap<usize, (u64, Vec<u64>)>,
    /// Events last recorded in a capture (its end included), not since
    /// recorded outside one or destroyed.
    captured_events: std::collections::HashSet<usize>,
    /// (clone, node of the original) -> the clone's node.
    clones: HashMap<(u64, u64), u64>,
    /// Conditional handles (the addresses of their slots).
    conds: HashMap<u64, cond::Handle>,
}

impl Table {
    fn fresh(&mut self) -> u64 {
        // Even, non-null values in their own range: never a pointer the
        // application owns.
        self.next += 1;
        0x0fa1_0000_0000_0000 | (self.next << 4)
    }

    fn add(&mut self, graph: u64, work: Work, deps: &[u64]) -> Result<u64, CUresult> {
        let g = self.graphs.get(&graph).ok_or(err::INVALID_VALUE)?;
        if g.nodes.len() >= MAX_NODES
            || deps.iter().any(|d| g.index(*d).is_none())
            || deps.iter().collect::<HashSet<_>>().len() != deps.len()
        {
            return Err(err::INVALID_VALUE);
        }
        let h = self.fresh();
        self.graphs
            .get_mut(&graph)
            .ok_or(err::INVALID_VALUE)?
            .nodes
            .push(Node {
                handle: h,
                work,
                deps: deps.to_vec(),
            });
        self.nodes.insert(h, graph);
        Ok(h)
    }

    /// Removes graph `h` and, with it, the body graphs its conditional
    /// nodes own (and theirs); returns the handles of the graphs removed.
    fn remove_graph(&mut self, h: u64) -> Vec<u64> {
        let mut gone = Vec::new();
        let mut todo = vec![h];
        while let Some(h) = todo.pop() {
            let Some(g) = self.graphs.remove(&h) else {
                continue;
            };
            for n in g.nodes {
                self.nodes.remove(&n.handle);
                if let Work::Cond { bodies, .. } = n.work {
                    todo.extend(bodies.iter().copied());
                }
            }
            self.clones.retain(|(clone, _), _| *clone != h);
            gone.push(h);
        }
        gone
    }

    /// Adds a copy of `g` with fresh node handles, and fresh copies of
    /// its conditional nodes' body graphs (at any depth, each noted in
    /// `bodies_out` as original and copy); returns its handle and the node
    /// handles it renamed.
    fn copy_graph(
        &mut self,
        g: Graph,
        depth: usize,
        bodies_out: &mut Vec<(u64, u64)>,
    ) -> Option<(u64, HashMap<u64, u64>)> {
        if depth > cond::MAX_NESTING {
            return None;
        }
        let h = self.fresh();
        let renamed: HashMap<u64, u64> = g.nodes.iter().map(|n| (n.handle, self.fresh())).collect();
        let mut nodes = Vec::with_capacity(g.nodes.len());
        for n in g.nodes {
            let work = match n.work {
                Work::Cond {
                    handle,
                    kind,
                    bodies,
                } => {
                    let mut copies = Vec::with_capacity(bodies.len());
                    for b in bodies.iter() {
                        let body = self.graphs.get(b)?.clone();
                        let (copy, _) = self.copy_graph(body, depth + 1, bodies_out)?;
                        bodies_out.push((*b, copy));
                        copies.push(copy);
                    }
                    Work::Cond {
                        handle,
                        kind,
                        bodies: copies.into(),
                    }
                }
                w => w,
            };
            nodes.push(Node {
                handle: renamed[&n.handle],
                deps: n.deps.iter().map(|d| renamed[d]).collect(),
                work,
            });
        }
        for n in &nodes {
            self.nodes.insert(n.handle, h);
        }
        self.graphs.insert(h, Graph { nodes });
        Some((h, renamed))
    }

    fn node_mut(&mut self, node: u64) -> Result<&mut Node, CUresult> {
        let g = *self.nodes.get(&node).ok_or(err::INVALID_VALUE)?;
        self.graphs
            .get_mut(&g)
            .and_then(|g| g.nodes.iter_mut().find(|n| n.handle == node))
            .ok_or(err::INVALID_VALUE)
    }
}

static TABLE: Mutex<Option<Table>> = Mutex::new(None);

/// Whether `graph` is a live graph's handle.
fn graph_exists(graph: u64) -> bool {
    with(|t| Ok(t.graphs.contains_key(&graph))).unwrap_or(false)
}

fn with<R>(f: impl FnOnce(&mut Table) -> Result<R, CUresult>) -> Result<R, CUresult> {
    let mut t = TABLE.lock().map_err(|_| err::UNKNOWN)?;
    f(t.get_or_insert_with(Table::default))
}

/// The `n` handles at `p` (null only if `n` is 0).
fn handles(p: *const *mut c_void, n: usize) -> Result<Vec<u64>, CUresult> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() || n > MAX_NODES {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: the caller passes `n` (bounded) handles at `p` (non-null).
    Ok(unsafe { std::slice::from_raw_parts(p, n) }
        .iter()
        .map(|&h| h as u64)
        .collect())
}

fn put<T>(slot: *mut T, v: T) -> Result<(), CUresult> {
    // SAFETY: `out` checks the slot for null; callers pass writable slots.
    unsafe { out(slot, v) }
}

// ---------------------------------------------------------------------------
// Capture hooks, called by the asynchronous entry points
// ---------------------------------------------------------------------------

/// If stream `s` is capturing, adds `work()` as its next node and returns
/// the call's result; `None` if the call should go ahead as usual.
pub fn captured(s: CUstream, work: impl FnOnce() -> Result<Work, CUresult>) -> Option<CUresult> {
    let h = stream_handle(s);
    if h == 0 {
        return None;
    }
    let mut t = TABLE.lock().ok()?;
    let t = t.as_mut()?;
    let c = t.captures.get(&h)?.clone();
    if c.invalid {
        return Some(CAPTURE_INVALIDATED);
    }
    Some(match work().and_then(|w| t.add(c.graph, w, &c.last)) {
        Ok(node) => {
            if let Some(c) = t.captures.get_mut(&h) {
                c.last = vec![node];
            }
            err::SUCCESS
        }
        Err(e) => e,
    })
}

/// A synchronizing call on stream `s`: refused, and the capture
/// invalidated, if `s` is capturing.
pub fn refuse_if_capturing(s: u64) -> Result<(), CUresult> {
    if s == 0 {
        return Ok(());
    }
    let mut t = TABLE.lock().map_err(|_| err::UNKNOWN)?;
    let Some(t) = t.as_mut() else {
        return Ok(());
    };
    match t.captures.get(&s).map(|c| c.id) {
        Some(id) => {
            t.invalidate(id);
            Err(CAPTURE_UNSUPPORTED)
        }
        None => Ok(()),
    }
}

/// `cuEventRecord` on a capturing stream: the event remembers the stream's
/// nodes. `None` if `s` is not capturing.
pub fn record_event(e: usize, s: CUstream) -> Option<CUresult> {
    let h = stream_handle(s);
    let mut t = TABLE.lock().ok()?;
    let t = t.as_mut()?;
    let c = t.captures.get(&h)?.clone();
    t.events.insert(e, (c.id, c.last));
    t.captured_events.insert(e);
    Some(err::SUCCESS)
}

/// Whether event `e` was last recorded in a capture (and not since
/// outside one): the driver refuses to query or synchronize such an event
/// (CUDA_ERROR_INVALID_VALUE, as an H200's driver answers), since no work
/// outside the graph records it.
pub fn recorded_in_capture(e: usize) -> bool {
    TABLE
        .lock()
        .ok()
        .and_then(|t| t.as_ref().map(|t| t.captured_events.contains(&e)))
        .unwrap_or(false)
}

/// Event `e` recorded outside a capture, or destroyed: no longer a
/// capture's.
pub fn event_recorded_outside(e: usize) {
    if let Ok(mut t) = TABLE.lock() {
        if let Some(t) = t.as_mut() {
            t.captured_events.remove(&e);
        }
    }
}

/// `cuStreamWaitEvent` for an event recorded during a capture: stream `s`
/// joins it (or adds the event's nodes to its dependencies). `None` if the
/// event was not recorded in a capture.
pub fn wait_event(s: CUstream, e: usize) -> Option<CUresult> {
    let h = stream_handle(s);
    let mut t = TABLE.lock().ok()?;
    let t = t.as_mut()?;
    let (id, nodes) = t.events.get(&e)?.clone();
    let Some(origin) = t.captures.values().find(|c| c.id == id).cloned() else {
        // The capture ended: an ordinary wait.
        t.events.remove(&e);
        return None;
    };
    if h == 0 {
        return Some(CAPTURE_UNSUPPORTED);
    }
    match t.captures.get_mut(&h) {
        Some(c) if c.id == id => {
            for n in nodes {
                if !c.last.contains(&n) {
                    c.last.push(n);
                }
            }
            Some(err::SUCCESS)
        }
        Some(_) => Some(CAPTURE_UNSUPPORTED),
        None => {
            t.captures.insert(
                h,
                Capture {
                    last: nodes,
                    ..origin
                },
            );
            Some(err::SUCCESS)
        }
    }
}

// ---------------------------------------------------------------------------
// Running a graph
// ---------------------------------------------------------------------------

fn run(work: &Work, s: CUstream) -> CUresult {
    match *work {
        Work::Kernel {
            f,
            grid,
            block,
            shared,
            ref params,
            options,
        } => crate::launch::launch_packed(f as CUfunction, grid, block, shared, s, params, options),
        Work::Copy3D(p) => crate::array::cuMemcpy3DAsync_v2(&p.0, s),
        Work::Copy { dst, src, n } => crate::memory::cuMemcpyAsync(dst, src, n, s),
        Work::Memset {
            dst,
            pitch,
            value,
            elem,
            width,
            height,
        } => crate::memory::memset_2d(dst, pitch, value, elem, width, height, Some(s)),
        Work::Host { f, data } => {
            // SAFETY: a `CUhostFn` the application gave (checked non-null
            // when the node was made); transmuted back from its address.
            let f: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(f) };
            crate::stream::cuLaunchHostFunc(s, Some(f), data as *mut c_void)
        }
        Work::EventRecord(e) => crate::stream::cuEventRecord(e as _, s),
        Work::EventWait(e) => crate::stream::cuStreamWaitEvent(s, e as _, 0),
        Work::Empty => err::SUCCESS,
        Work::MemAlloc(ref h) => crate::graph_mem::begin(h.ptr()),
        Work::MemFree(p) => crate::graph_mem::end(p, Some(s)).unwrap_or(err::INVALID_VALUE),
        Work::CondRun {
            handle,
            kind,
            ref bodies,
        } => cond::run(handle, kind, bodies, s),
        // Flattened at instantiation.
        Work::Child(_) | Work::Cond { .. } => err::INVALID_VALUE,
    }
}

/// Runs `steps` in order on `s`, stopping at the first failure.
fn run_steps(steps: &[(u64, Work)], s: CUstream) -> CUresult {
    for (_, w) in steps {
        let r = run(w, s);
        if r != err::SUCCESS {
            return r;
        }
    }
    err::SUCCESS
}

fn launch(exec: *mut c_void, s: CUstream) -> CUresult {
    let (graph, steps, auto_free, defaults) = match with(|t| {
        let e = t.execs.get(&(exec as u64)).ok_or(err::INVALID_VALUE)?;
        let steps: Vec<(u64, Work)> = e
            .steps
            .iter()
            .filter(|(node, _)| !e.disabled.contains(node))
            .cloned()
            .collect();
        let defaults = cond::launch_defaults(t, &e.steps);
        Ok((
            e.graph.clone(),
            steps,
            e.flags & AUTO_FREE_ON_LAUNCH != 0,
            defaults,
        ))
    }) {
        Ok(v) => v,
        Err(e) => return e,
    };
    // Launched into a capture: the graph becomes a child graph node (which
    // a graph with conditional nodes may not be).
    if let Some(r) = captured(s, || {
        if graph.has_conditionals() {
            return Err(err::INVALID_VALUE);
        }
        Ok(Work::Child(Box::new(graph.clone())))
    }) {
        return r;
    }
    // Nothing runs if an allocation of an earlier launch is still live.
    let allocs: Vec<u64> = steps
        .iter()
        .filter_map(|(_, w)| match w {
            Work::MemAlloc(h) => Some(h.ptr()),
            _ => None,
        })
        .collect();
    if let Err(e) = crate::graph_mem::check_launch(&allocs, auto_free) {
        return e;
    }
    // The launch's work crosses to the host as one request: what each
    // node sends is gathered (`Channel::begin_batch`) and sent as one
    // `GraphLaunch` at the end, or before any call that must not wait
    // behind it (a host node's synchronisation, a copy back to the host).
    let _pin = crate::state::pin_channel();
    let batching = crate::state::with(|cu| {
        cu.channel().begin_batch();
        Ok(())
    })
    .is_ok();
    // Conditions with a default given for every launch start at it.
    let mut r = err::SUCCESS;
    for (slot, value) in defaults {
        r = crate::memory::cuMemsetD32Async(slot, value, 1, s);
        if r != err::SUCCESS {
            break;
        }
    }
    if r == err::SUCCESS {
        r = run_steps(&steps, s);
    }
    if batching {
        let sent = crate::state::with(|cu| cu.channel().end_batch());
        if r == err::SUCCESS {
            r = sent.err().unwrap_or(err::SUCCESS);
        }
    }
    drop((graph, steps));
    crate::graph_mem::flush();
    r
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

type CUgraph = *mut c_void;
type CUgraphNode = *mut c_void;
type CUgraphExec = *mut c_void;

/// `CUDA_KERNEL_NODE_PARAMS` (v1; v2 appends the kernel and context).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelNodeParams {
    func: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
}

/// `CUDA_MEMSET_NODE_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemsetNodeParams {
    dst: u64,
    pitch: usize,
    value: u32,
    element_size: u32,
    width: usize,
    height: usize,
}

/// `CUDA_HOST_NODE_PARAMS`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct HostNodeParams {
    f: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2`: v1 then a `CUkernel` (used when `func`
/// is null) and a context.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelNodeParamsV2 {
    v1: KernelNodeParams,
    kern: CUfunction,
    ctx: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<KernelNodeParams>() == 56);
const _: () = assert!(std::mem::size_of::<KernelNodeParamsV2>() == 72);

/// The v1 view of v2 parameters (the kernel in `func` if it was given as
/// a `CUkernel`, which this library's launches accept alike).
fn v1_of(p: *const KernelNodeParamsV2) -> Result<KernelNodeParams, CUresult> {
    if p.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes v2 kernel node parameters.
    let p = unsafe { *p };
    let mut v1 = p.v1;
    if v1.func.is_null() {
        v1.func = p.kern;
    }
    Ok(v1)
}
const _: () = assert!(std::mem::size_of::<MemsetNodeParams>() == 40);

fn kernel_work(p: *const KernelNodeParams) -> Result<Work, CUresult> {
    if p.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes kernel node parameters.
    let p = unsafe { *p };
    let buf = crate::launch::prepare(p.func, p.grid, p.block, p.shared, p.params, p.extra)?;
    Ok(Work::Kernel {
        f: p.func as usize,
        grid: p.grid,
        block: p.block,
        shared: p.shared,
        params: buf,
        options: LaunchOptions::default(),
    })
}

fn memset_work(p: *const MemsetNodeParams) -> Result<Work, CUresult> {
    if p.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes memset node parameters.
    let p = unsafe { *p };
    let elem = match p.element_size {
        1 => 1,
        2 => 2,
        4 => 4,
        _ => return Err(err::INVALID_VALUE),
    };
    if p.height > 1 && p.pitch < p.width.saturating_mul(usize::from(elem)) {
        return Err(err::INVALID_VALUE);
    }
    Ok(Work::Memset {
        dst: p.dst,
        pitch: p.pitch,
        value: p.value,
        elem,
        width: p.width,
        height: p.height.max(1),
    })
}

fn host_work(p: *const HostNodeParams) -> Result<Work, CUresult> {
    if p.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: non-null; the caller passes host node parameters.
    let p = unsafe { *p };
    let f = p.f.ok_or(err::INVALID_VALUE)?;
    Ok(Work::Host {
        f: f as usize,
        data: p.data as usize,
    })
}

fn add_node(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    work: impl FnOnce() -> Result<Work, CUresult>,
) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if node.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let deps = handles(deps, n)?;
        let w = work()?;
        let h = with(|t| t.add(graph as u64, w, &deps))?;
        put(node, h as CUgraphNode)
    })
}

/// `cuGraphCreate`.
#[no_mangle]
pub extern "C" fn cuGraphCreate(graph: *mut CUgraph, _flags: u32) -> CUresult {
    ffi_result(|| {
        if graph.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let h = with(|t| {
            let h = t.fresh();
            t.graphs.insert(h, Graph::default());
            Ok(h)
        })?;
        put(graph, h as CUgraph)
    })
}

/// `cuGraphDestroy`.
#[no_mangle]
pub extern "C" fn cuGraphDestroy(graph: CUgraph) -> CUresult {
    let mut gone = Vec::new();
    let r = ffi_result(|| {
        with(|t| {
            if !t.graphs.contains_key(&(graph as u64)) {
                return Err(err::INVALID_VALUE);
            }
            gone = t.remove_graph(graph as u64);
            Ok(())
        })
    });
    if r == err::SUCCESS {
        user::release_owner(graph as u64);
        cond::release(&gone);
    }
    crate::graph_mem::flush();
    r
}

/// `cuGraphClone`: a copy with fresh node handles.
#[no_mangle]
pub extern "C" fn cuGraphClone(clone: *mut CUgraph, original: CUgraph) -> CUresult {
    ffi_result(|| {
        if clone.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let h = with(|t| {
            let g = t
                .graphs
                .get(&(original as u64))
                .ok_or(err::INVALID_VALUE)?
                .clone();
            // Neither memory nodes nor conditional nodes are cloned by
            // the driver (an H200's answers CUDA_ERROR_NOT_SUPPORTED).
            if g.has_memory_nodes() || g.has_conditionals() {
                return Err(err::NOT_SUPPORTED);
            }
            let mut copied = Vec::new();
            let (h, renamed) = t.copy_graph(g, 0, &mut copied).ok_or(err::INVALID_VALUE)?;
            for (orig, new) in renamed {
                t.clones.insert((h, orig), new);
            }
            // The clone's kernels and conditional nodes use the original's
            // conditional handles (and its bodies' theirs): the copies keep
            // their slots too.
            cond::share(t, original as u64, h);
            for (from, to) in copied {
                cond::share(t, from, to);
            }
            Ok(h)
        })?;
        user::copy_owner(original as u64, h);
        put(clone, h as CUgraph)
    })
}

/// `cuGraphAddKernelNode`.
#[no_mangle]
pub extern "C" fn cuGraphAddKernelNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const KernelNodeParams,
) -> CUresult {
    add_node(node, graph, deps, n, || kernel_work(params))
}

/// `cuGraphAddKernelNode_v2`.
#[no_mangle]
pub extern "C" fn cuGraphAddKernelNode_v2(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const KernelNodeParamsV2,
) -> CUresult {
    add_node(node, graph, deps, n, || kernel_work(&v1_of(params)?))
}

/// `cuGraphAddMemcpyNode`.
#[no_mangle]
pub extern "C" fn cuGraphAddMemcpyNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const Memcpy3D,
    _ctx: *mut c_void,
) -> CUresult {
    add_node(node, graph, deps, n, || {
        if params.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a copy description.
        Ok(Work::Copy3D(Copy3DParams(unsafe { *params })))
    })
}

/// `cuGraphAddMemsetNode`.
#[no_mangle]
pub extern "C" fn cuGraphAddMemsetNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const MemsetNodeParams,
    _ctx: *mut c_void,
) -> CUresult {
    add_node(node, graph, deps, n, || memset_work(params))
}

/// `cuGraphAddHostNode`.
#[no_mangle]
pub extern "C" fn cuGraphAddHostNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    params: *const HostNodeParams,
) -> CUresult {
    add_node(node, graph, deps, n, || host_work(params))
}

/// `cuGraphAddEmptyNode`.
#[no_mangle]
pub extern "C" fn cuGraphAddEmptyNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
) -> CUresult {
    add_node(node, graph, deps, n, || Ok(Work::Empty))
}

/// `cuGraphAddEventRecordNode`.
#[no_mangle]
pub extern "C" fn cuGraphAddEventRecordNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    event: *mut c_void,
) -> CUresult {
    add_node(node, graph, deps, n, || {
        Ok(Work::EventRecord(event as usize))
    })
}

/// `cuGraphAddEventWaitNode`.
#[no_mangle]
pub extern "C" fn cuGraphAddEventWaitNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    event: *mut c_void,
) -> CUresult {
    add_node(node, graph, deps, n, || Ok(Work::EventWait(event as usize)))
}

/// `cuGraphAddChildGraphNode`: the child is copied.
#[no_mangle]
pub extern "C" fn cuGraphAddChildGraphNode(
    node: *mut CUgraphNode,
    graph: CUgraph,
    deps: *const CUgraphNode,
    n: usize,
    child: CUgraph,
) -> CUresult {
    add_node(node, graph, deps, n, || {
        let g = with(|t| {
            t.graphs
                .get(&(child as u64))
                // A copied child may not allocate or free memory, nor
                // hold conditional nodes.
                .filter(|g| !g.has_memory_nodes() && !g.has_conditionals())
                .cloned()
                .ok_or(err::INVALID_VALUE)
        })?;
        Ok(Work::Child(Box::new(g)))
    })
}

fn add_dependencies(from: *const CUgraphNode, to: *const CUgraphNode, n: usize) -> CUresult {
    ffi_result(|| {
        let (from, to) = (handles(from, n)?, handles(to, n)?);
        with(|t| {
            for (f, d) in from.iter().zip(&to) {
                if t.nodes.get(f) != t.nodes.get(d) || !t.nodes.contains_key(f) || f == d {
                    return Err(err::INVALID_VALUE);
                }
                let node = t.node_mut(*d)?;
                if !node.deps.contains(f) {
                    node.deps.push(*f);
                }
            }
            Ok(())
        })
    })
}

/// `cuGraphAddDependencies`.
#[no_mangle]
pub extern "C" fn cuGraphAddDependencies(
    _graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    n: usize,
) -> CUresult {
    add_dependencies(from, to, n)
}

/// `cuGraphAddDependencies_v2` (edge data ignored: default edges only).
#[no_mangle]
pub extern "C" fn cuGraphAddDependencies_v2(
    _graph: CUgraph,
    from: *const CUgraphNode,
    to: *const CUgraphNode,
    edge_data: *const c_void,
    n: usize,
) -> CUresult {
    if !edge_data.is_null() {
        return crate::unsupported("cuGraphAddDependencies_v2 with edge data");
    }
    add_dependencies(from, to, n)
}

/// `cuGraphGetNodes`.
#[no_mangle]
pub extern "C" fn cuGraphGetNodes(
    graph: CUgraph,
    nodes: *mut CUgraphNode,
    n: *mut usize,
) -> CUresult {
    list_nodes(graph, nodes, n, |_| true)
}

/// `cuGraphGetRootNodes`.
#[no_mangle]
pub extern "C" fn cuGraphGetRootNodes(
    graph: CUgraph,
    nodes: *mut CUgraphNode,
    n: *mut usize,
) -> CUresult {
    list_nodes(graph, nodes, n, |node| node.deps.is_empty())
}

fn list_nodes(
    graph: CUgraph,
    nodes: *mut CUgraphNode,
    n: *mut usize,
    keep: impl Fn(&Node) -> bool,
) -> CUresult {
    ffi_result(|| {
        if n.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let all: Vec<u64> = with(|t| {
            let g = t.graphs.get(&(graph as u64)).ok_or(err::INVALID_VALUE)?;
            Ok(g.nodes
                .iter()
                .filter(|x| keep(x))
                .map(|x| x.handle)
                .collect())
        })?;
        if nodes.is_null() {
            return put(n, all.len());
        }
        // SAFETY: non-null; the caller says how many slots it passes.
        let room = unsafe { *n };
        for (i, h) in all.iter().take(room).enumerate() {
            // SAFETY: `i` is below the caller's count of slots.
            unsafe { *nodes.add(i) = *h as CUgraphNode };
        }
        put(n, all.len().min(room))
    })
}

/// `CUgraphNodeType` of a node's work.
fn node_type(w: &Work) -> u32 {
    match w {
        Work::Kernel { .. } => 0,
        Work::Copy3D(_) | Work::Copy { .. } => 1,
        Work::Memset { .. } => 2,
        Work::Host { .. } => 3,
        Work::Child(_) => 4,
        Work::Empty => 5,
        Work::EventWait(_) => 6,
        Work::EventRecord(_) => 7,
        Work::MemAlloc(_) => 10,
        Work::MemFree(_) => 11,
        Work::Cond { .. } | Work::CondRun { .. } => 13,
    }
}

/// `cuGraphNodeGetType`.
#[no_mangle]
pub extern "C" fn cuGraphNodeGetType(node: CUgraphNode, ty: *mut u32) -> CUresult {
    ffi_result(|| {
        let t = with(|t| Ok(node_type(&t.node_mut(node as u64)?.work)))?;
        put(ty, t)
    })
}

/// `cuGraphKernelNodeSetParams`.
#[no_mangle]
pub extern "C" fn cuGraphKernelNodeSetParams(
    node: CUgraphNode,
    params: *const KernelNodeParams,
) -> CUresult {
    ffi_result(|| {
        let w = kernel_work(params)?;
        with(|t| {
            let n = t.node_mut(node as u64)?;
            if !matches!(n.work, Work::Kernel { .. }) {
                return Err(err::INVALID_VALUE);
            }
            n.work = w;
            Ok(())
        })
    })
}

/// `cuGraphKernelNodeSetParams_v2`.
#[no_mangle]
pub extern "C" fn cuGraphKernelNodeSetParams_v2(
    node: CUgraphNode,
    params: *const KernelNodeParamsV2,
) -> CUresult {
    match v1_of(params) {
        Ok(p) => cuGraphKernelNodeSetParams(node, &p),
        Err(e) => e,
    }
}

/// `CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH`.
const AUTO_FREE_ON_LAUNCH: u64 = 1;

fn instantiate(exec: *mut CUgraphExec, graph: CUgraph, flags: u64) -> CUresult {
    ffi_result(|| {
        if exec.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let h = with(|t| {
            let g = t
                .graphs
                .get(&(graph as u64))
                .ok_or(err::INVALID_VALUE)?
                .clone();
            let steps = g.flatten(&t.graphs).ok_or(err::INVALID_VALUE)?;
            if g.has_memory_nodes() && t.execs.values().any(|e| e.source == graph as u64) {
                return Err(err::INVALID_VALUE);
            }
            let h = t.fresh();
            cond::hold(t, &steps, h);
            t.execs.insert(
                h,
                Exec {
                    graph: g,
                    steps,
                    flags,
                    disabled: HashSet::new(),
                    source: graph as u64,
                },
            );
            Ok(h)
        })?;
        user::copy_owner(graph as u64, h);
        put(exec, h as CUgraphExec)
    })
}

/// `cuGraphInstantiate` (CUDA 10 form; the error node and log are left
/// untouched).
#[no_mangle]
pub extern "C" fn cuGraphInstantiate(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    _error_node: *mut CUgraphNode,
    _log: *mut i8,
    _size: usize,
) -> CUresult {
    instantiate(exec, graph, 0)
}

/// `cuGraphInstantiate_v2`.
#[no_mangle]
pub extern "C" fn cuGraphInstantiate_v2(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    _error_node: *mut CUgraphNode,
    _log: *mut i8,
    _size: usize,
) -> CUresult {
    instantiate(exec, graph, 0)
}

/// `cuGraphInstantiateWithFlags` (of the flags, AUTO_FREE_ON_LAUNCH
/// matters: the others concern uploads and priorities).
#[no_mangle]
pub extern "C" fn cuGraphInstantiateWithFlags(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    flags: u64,
) -> CUresult {
    instantiate(exec, graph, flags)
}

/// `CUDA_GRAPH_INSTANTIATE_PARAMS`.
#[repr(C)]
pub struct InstantiateParams {
    flags: u64,
    upload_stream: CUstream,
    error_node: CUgraphNode,
    result: u32,
}

fn instantiate_with_params(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut InstantiateParams,
) -> CUresult {
    let flags = if params.is_null() {
        0
    } else {
        // SAFETY: non-null; the caller passes the parameters.
        unsafe { (*params).flags }
    };
    let r = instantiate(exec, graph, flags);
    if !params.is_null() {
        // SAFETY: non-null; the caller passes the parameters to fill.
        unsafe {
            (*params).result = if r == err::SUCCESS { 0 } else { 1 };
        }
    }
    r
}

/// `cuGraphInstantiateWithParams`.
#[no_mangle]
pub extern "C" fn cuGraphInstantiateWithParams(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut InstantiateParams,
) -> CUresult {
    instantiate_with_params(exec, graph, params)
}

/// `cuGraphInstantiateWithParams_ptsz`.
#[no_mangle]
pub extern "C" fn cuGraphInstantiateWithParams_ptsz(
    exec: *mut CUgraphExec,
    graph: CUgraph,
    params: *mut InstantiateParams,
) -> CUresult {
    instantiate_with_params(exec, graph, params)
}

/// `cuGraphExecDestroy`.
#[no_mangle]
pub extern "C" fn cuGraphExecDestroy(exec: CUgraphExec) -> CUresult {
    let r = ffi_result(|| {
        with(|t| {
            t.execs
                .remove(&(exec as u64))
                .map(|_| ())
                .ok_or(err::INVALID_VALUE)
        })
    });
    if r == err::SUCCESS {
        user::release_owner(exec as u64);
        cond::release(&[exec as u64]);
    }
    crate::graph_mem::flush();
    r
}

/// `cuGraphLaunch`.
#[no_mangle]
pub extern "C" fn cuGraphLaunch(exec: CUgraphExec, s: CUstream) -> CUresult {
    let s = crate::stream::resolve(s);
    launch(exec, s)
}

/// `cuGraphLaunch_ptsz`.
#[no_mangle]
pub extern "C" fn cuGraphLaunch_ptsz(exec: CUgraphExec, s: CUstream) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    launch(exec, s)
}

/// `cuGraphUpload`: nothing to upload ahead.
#[no_mangle]
pub extern "C" fn cuGraphUpload(exec: CUgraphExec, _s: CUstream) -> CUresult {
    ffi_result(|| {
        with(|t| {
            t.execs
                .contains_key(&(exec as u64))
                .then_some(())
                .ok_or(err::INVALID_VALUE)
        })
    })
}

/// `cuGraphUpload_ptsz`.
#[no_mangle]
pub extern "C" fn cuGraphUpload_ptsz(exec: CUgraphExec, s: CUstream) -> CUresult {
    cuGraphUpload(exec, s)
}

/// `cuGraphExecKernelNodeSetParams`: the instantiated copy of `node` takes
/// new parameters (the graph keeps its own).
#[no_mangle]
pub extern "C" fn cuGraphExecKernelNodeSetParams(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const KernelNodeParams,
) -> CUresult {
    ffi_result(|| nodes::set_exec_work(exec, node, kernel_work(params)?))
}

/// `cuGraphExecKernelNodeSetParams_v2`.
#[no_mangle]
pub extern "C" fn cuGraphExecKernelNodeSetParams_v2(
    exec: CUgraphExec,
    node: CUgraphNode,
    params: *const KernelNodeParamsV2,
) -> CUresult {
    match v1_of(params) {
        Ok(p) => cuGraphExecKernelNodeSetParams(exec, node, &p),
        Err(e) => e,
    }
}

/// `cuGraphExecUpdate_v2`: takes `graph`'s parameters when it has the
/// instantiated graph's shape (same node types in the same order, same
/// dependencies by position), else fails with the update result
/// `CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED`.
#[no_mangle]
pub extern "C" fn cuGraphExecUpdate_v2(
    exec: CUgraphExec,
    graph: CUgraph,
    result: *mut ExecUpdateResultInfo,
) -> CUresult {
    ffi_result(|| {
        let ok = with(|t| {
            let g = t
                .graphs
                .get(&(graph as u64))
                .ok_or(err::INVALID_VALUE)?
                .clone();
            let e = t.execs.get_mut(&(exec as u64)).ok_or(err::INVALID_VALUE)?;
            let pos = |gr: &Graph, h: &u64| gr.index(*h);
            let same = g.nodes.len() == e.graph.nodes.len()
                && g.nodes.iter().zip(&e.graph.nodes).all(|(a, b)| {
                    node_type(&a.work) == node_type(&b.work)
                        && same_memory(&a.work, &b.work)
                        && a.deps.iter().map(|d| pos(&g, d)).collect::<Vec<_>>()
                            == b.deps.iter().map(|d| pos(&e.graph, d)).collect::<Vec<_>>()
                });
            if !same {
                return Ok(false);
            }
            // Keep the instantiated node handles, take the new work.
            let mut updated = e.graph.clone();
            for (mine, theirs) in updated.nodes.iter_mut().zip(&g.nodes) {
                mine.work = theirs.work.clone();
            }
            let steps = updated.flatten(&t.graphs).ok_or(err::INVALID_VALUE)?;
            let e = t.execs.get_mut(&(exec as u64)).ok_or(err::INVALID_VALUE)?;
            e.graph = updated;
            e.steps = steps;
            Ok(true)
        })?;
        if !result.is_null() {
            // SAFETY: non-null; the caller passes the result record.
            unsafe {
                (*result).result = if ok { 0 } else { 2 };
                (*result).error_node = std::ptr::null_mut();
                (*result).error_from = std::ptr::null_mut();
            }
        }
        if ok {
            Ok(())
        } else {
            Err(EXEC_UPDATE_FAILURE)
        }
    })
}

/// Memory nodes cannot change in an update: the same allocation, or the
/// same freed address.
fn same_memory(a: &Work, b: &Work) -> bool {
    match (a, b) {
        (Work::MemAlloc(x), Work::MemAlloc(y)) => x.ptr() == y.ptr(),
        (Work::MemFree(x), Work::MemFree(y)) => x == y,
        // A conditional node keeps its handle, kind and number of bodies.
        (
            Work::Cond {
                handle: h1,
                kind: k1,
                bodies: b1,
            },
            Work::Cond {
                handle: h2,
                kind: k2,
                bodies: b2,
            },
        ) => h1 == h2 && k1 == k2 && b1.len() == b2.len(),
        _ => true,
    }
}

/// `CUgraphExecUpdateResultInfo`.
#[repr(C)]
pub struct ExecUpdateResultInfo {
    result: u32,
    error_node: CUgraphNode,
    error_from: CUgraphNode,
}

/// `cuGraphExecUpdate` (CUDA 10.2 form): as v2, reporting only the result.
#[no_mangle]
pub extern "C" fn cuGraphExecUpdate(
    exec: CUgraphExec,
    graph: CUgraph,
    error_node: *mut CUgraphNode,
    result: *mut u32,
) -> CUresult {
    let mut info = ExecUpdateResultInfo {
        result: 0,
        error_node: std::ptr::null_mut(),
        error_from: std::ptr::null_mut(),
    };
    let r = cuGraphExecUpdate_v2(exec, graph, &mut info);
    // SAFETY: null slots are allowed; non-null ones are writable.
    unsafe {
        if !result.is_null() {
            *result = info.result;
        }
        if !error_node.is_null() {
            *error_node = std::ptr::null_mut();
        }
    }
    r
}

// ---------------------------------------------------------------------------
// Stream capture
// ---------------------------------------------------------------------------

fn begin_capture(s: CUstream) -> CUresult {
    capture_into(s, None)
}

/// Begins a capture on stream `s`: into a new graph, or (`into`) into an
/// existing graph after the given nodes of it.
fn capture_into(s: CUstream, into: Option<(u64, Vec<u64>)>) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let h = stream_handle(s);
        if h == 0 {
            // The legacy NULL stream cannot be captured.
            return Err(CAPTURE_UNSUPPORTED);
        }
        with(|t| {
            if t.captures.contains_key(&h) {
                return Err(err::INVALID_VALUE);
            }
            let (graph, last, owned) = match into {
                Some((g, deps)) => {
                    let graph = t.graphs.get(&g).ok_or(err::INVALID_VALUE)?;
                    if deps.iter().any(|d| graph.index(*d).is_none()) {
                        return Err(err::INVALID_VALUE);
                    }
                    (g, deps, false)
                }
                None => {
                    let g = t.fresh();
                    t.graphs.insert(g, Graph::default());
                    (g, Vec::new(), true)
                }
            };
            let id = t.fresh();
            t.captures.insert(
                h,
                Capture {
                    graph,
                    id,
                    origin: h,
                    last,
                    invalid: false,
                    owned,
                },
            );
            Ok(())
        })
    })
}

/// `cuStreamBeginCaptureToGraph`: captured work becomes nodes of `graph`
/// after `deps` (default edges only).
#[no_mangle]
pub extern "C" fn cuStreamBeginCaptureToGraph(
    s: CUstream,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edge_data: *const c_void,
    n: usize,
    _mode: u32,
) -> CUresult {
    let s = crate::stream::resolve(s);
    if !edge_data.is_null() {
        return crate::unsupported("cuStreamBeginCaptureToGraph with edge data");
    }
    match handles(deps, n) {
        Ok(d) => capture_into(s, Some((graph as u64, d))),
        Err(e) => e,
    }
}

/// `cuStreamBeginCaptureToGraph_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamBeginCaptureToGraph_ptsz(
    s: CUstream,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edge_data: *const c_void,
    n: usize,
    mode: u32,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuStreamBeginCaptureToGraph(s, graph, deps, edge_data, n, mode)
}

/// `CU_STREAM_SET_CAPTURE_DEPENDENCIES`.
const SET_CAPTURE_DEPENDENCIES: u32 = 1;

/// `cuStreamUpdateCaptureDependencies`: the nodes the capturing stream's
/// next node depends on, added to (flags 0) or replaced (flags 1).
#[no_mangle]
pub extern "C" fn cuStreamUpdateCaptureDependencies(
    s: CUstream,
    deps: *mut CUgraphNode,
    n: usize,
    flags: u32,
) -> CUresult {
    let s = crate::stream::resolve(s);
    ffi_result(|| {
        if flags > SET_CAPTURE_DEPENDENCIES {
            return Err(err::INVALID_VALUE);
        }
        let list = handles(deps, n)?;
        let h = stream_handle(s);
        with(|t| {
            let c = t.captures.get(&h).ok_or(err::INVALID_VALUE)?;
            if c.invalid {
                return Err(CAPTURE_INVALIDATED);
            }
            let g = t.graphs.get(&c.graph).ok_or(err::INVALID_VALUE)?;
            if list.iter().any(|d| g.index(*d).is_none()) {
                return Err(err::INVALID_VALUE);
            }
            let c = t.captures.get_mut(&h).ok_or(err::INVALID_VALUE)?;
            if flags == SET_CAPTURE_DEPENDENCIES {
                c.last = list;
            } else {
                for d in list {
                    if !c.last.contains(&d) {
                        c.last.push(d);
                    }
                }
            }
            Ok(())
        })
    })
}

/// `cuStreamUpdateCaptureDependencies_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamUpdateCaptureDependencies_ptsz(
    s: CUstream,
    deps: *mut CUgraphNode,
    n: usize,
    flags: u32,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuStreamUpdateCaptureDependencies(s, deps, n, flags)
}

/// `cuStreamUpdateCaptureDependencies_v2` (edge data: default edges only).
#[no_mangle]
pub extern "C" fn cuStreamUpdateCaptureDependencies_v2(
    s: CUstream,
    deps: *mut CUgraphNode,
    edge_data: *const c_void,
    n: usize,
    flags: u32,
) -> CUresult {
    let s = crate::stream::resolve(s);
    if !edge_data.is_null() {
        return crate::unsupported("cuStreamUpdateCaptureDependencies_v2 with edge data");
    }
    cuStreamUpdateCaptureDependencies(s, deps, n, flags)
}

/// `cuStreamUpdateCaptureDependencies_v2_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamUpdateCaptureDependencies_v2_ptsz(
    s: CUstream,
    deps: *mut CUgraphNode,
    edge_data: *const c_void,
    n: usize,
    flags: u32,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuStreamUpdateCaptureDependencies_v2(s, deps, edge_data, n, flags)
}

/// `cuStreamBeginCapture` (CUDA 10.0: global mode).
#[no_mangle]
pub extern "C" fn cuStreamBeginCapture(s: CUstream) -> CUresult {
    let s = crate::stream::resolve(s);
    begin_capture(s)
}
/// `cuStreamBeginCapture_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamBeginCapture_ptsz(s: CUstream) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    begin_capture(s)
}
/// `cuStreamBeginCapture_v2` (every mode captures the same way here: the
/// modes restrict which other calls are legal meanwhile).
#[no_mangle]
pub extern "C" fn cuStreamBeginCapture_v2(s: CUstream, _mode: u32) -> CUresult {
    let s = crate::stream::resolve(s);
    begin_capture(s)
}
/// `cuStreamBeginCapture_v2_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamBeginCapture_v2_ptsz(s: CUstream, _mode: u32) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    begin_capture(s)
}

fn end_capture(s: CUstream, graph: *mut CUgraph) -> CUresult {
    ffi_result(|| {
        let h = stream_handle(s);
        let (g, invalid, unjoined) = with(|t| {
            let c = t.captures.get(&h).ok_or(ILLEGAL_STATE)?.clone();
            if c.origin != h {
                // The capture stays, invalidated, for its origin to end.
                t.invalidate(c.id);
                return Err(CAPTURE_UNMATCHED);
            }
            // A capture into the application's graph may leave the graph
            // out (the application holds it); one that made its graph may
            // not.
            if graph.is_null() && c.owned {
                return Err(err::INVALID_VALUE);
            }
            let unjoined = !c.invalid && !t.joined(&c);
            let c = Capture {
                invalid: c.invalid || unjoined,
                ..c
            };
            // Every stream that joined leaves the capture with it.
            t.captures.retain(|_, x| x.id != c.id);
            t.events.retain(|_, (id, _)| *id != c.id);
            if c.invalid && c.owned {
                if let Some(g) = t.graphs.remove(&c.graph) {
                    for n in g.nodes {
                        t.nodes.remove(&n.handle);
                    }
                }
            }
            Ok((c.graph, c.invalid, unjoined))
        })?;
        if invalid {
            if !graph.is_null() {
                put(graph, std::ptr::null_mut())?;
            }
            return Err(if unjoined {
                CAPTURE_UNJOINED
            } else {
                CAPTURE_INVALIDATED
            });
        }
        if graph.is_null() {
            return Ok(());
        }
        put(graph, g as CUgraph)
    })
}

/// `cuStreamEndCapture`.
#[no_mangle]
pub extern "C" fn cuStreamEndCapture(s: CUstream, graph: *mut CUgraph) -> CUresult {
    let s = crate::stream::resolve(s);
    end_capture(s, graph)
}
/// `cuStreamEndCapture_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamEndCapture_ptsz(s: CUstream, graph: *mut CUgraph) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    end_capture(s, graph)
}

/// A stream's capture: status, id, graph, its current dependencies.
type CaptureState = (u32, u64, u64, Vec<u64>);

fn capture_of(s: CUstream) -> Result<Option<CaptureState>, CUresult> {
    let h = stream_handle(s);
    with(|t| {
        Ok(t.captures
            .get(&h)
            .map(|c| (if c.invalid { 2 } else { 1 }, c.id, c.graph, c.last.clone())))
    })
}

/// The legacy NULL stream waits for every blocking stream of its context:
/// asking about it while one of them captures is
/// `CUDA_ERROR_STREAM_CAPTURE_IMPLICIT` (the capture goes on).
fn refuse_implicit(s: CUstream) -> Result<(), CUresult> {
    if stream_handle(s) != 0 {
        return Ok(());
    }
    let capturing: Vec<u64> = with(|t| Ok(t.captures.keys().copied().collect()))?;
    if capturing
        .into_iter()
        .any(crate::stream::blocking_in_current_context)
    {
        return Err(CAPTURE_IMPLICIT);
    }
    Ok(())
}

fn is_capturing(s: CUstream, status: *mut u32) -> CUresult {
    ffi_result(|| {
        crate::state::device()?;
        refuse_implicit(s)?;
        let st = capture_of(s)?.map_or(0, |c| c.0);
        put(status, st)
    })
}

/// `cuStreamIsCapturing`.
#[no_mangle]
pub extern "C" fn cuStreamIsCapturing(s: CUstream, status: *mut u32) -> CUresult {
    let s = crate::stream::resolve(s);
    is_capturing(s, status)
}
/// `cuStreamIsCapturing_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamIsCapturing_ptsz(s: CUstream, status: *mut u32) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    is_capturing(s, status)
}

thread_local! {
    /// The dependency list the last capture-info call handed out (valid
    /// until the thread's next call, as the driver's).
    static DEPS: std::cell::RefCell<Vec<CUgraphNode>> = const { std::cell::RefCell::new(Vec::new()) };
}

#[allow(clippy::too_many_arguments)]
fn capture_info(
    s: CUstream,
    status: *mut u32,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const c_void,
    n: *mut usize,
) -> CUresult {
    ffi_result(|| {
        crate::state::device()?;
        refuse_implicit(s)?;
        let c = capture_of(s)?;
        put(status, c.as_ref().map_or(0, |c| c.0))?;
        let Some((_, cid, g, last)) = c else {
            return Ok(());
        };
        // SAFETY: every other output is optional; non-null ones are
        // writable slots of the documented types.
        unsafe {
            if !id.is_null() {
                *id = cid;
            }
            if !graph.is_null() {
                *graph = g as CUgraph;
            }
            if !edges.is_null() {
                *edges = std::ptr::null();
            }
            if !n.is_null() {
                *n = last.len();
            }
            if !deps.is_null() {
                *deps = DEPS.with(|d| {
                    let mut d = d.borrow_mut();
                    *d = last.iter().map(|&h| h as CUgraphNode).collect();
                    d.as_ptr()
                });
            }
        }
        Ok(())
    })
}

/// `cuStreamGetCaptureInfo` (CUDA 10.1: status and id).
#[no_mangle]
pub extern "C" fn cuStreamGetCaptureInfo(s: CUstream, status: *mut u32, id: *mut u64) -> CUresult {
    let s = crate::stream::resolve(s);
    capture_info(
        s,
        status,
        id,
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    )
}
/// `cuStreamGetCaptureInfo_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetCaptureInfo_ptsz(
    s: CUstream,
    status: *mut u32,
    id: *mut u64,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuStreamGetCaptureInfo(s, status, id)
}
/// `cuStreamGetCaptureInfo_v2`.
#[no_mangle]
pub extern "C" fn cuStreamGetCaptureInfo_v2(
    s: CUstream,
    status: *mut u32,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    n: *mut usize,
) -> CUresult {
    let s = crate::stream::resolve(s);
    capture_info(s, status, id, graph, deps, std::ptr::null_mut(), n)
}
/// `cuStreamGetCaptureInfo_v2_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetCaptureInfo_v2_ptsz(
    s: CUstream,
    status: *mut u32,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    n: *mut usize,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    capture_info(s, status, id, graph, deps, std::ptr::null_mut(), n)
}
/// `cuStreamGetCaptureInfo_v3` (no edge data: default edges only).
#[no_mangle]
pub extern "C" fn cuStreamGetCaptureInfo_v3(
    s: CUstream,
    status: *mut u32,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const c_void,
    n: *mut usize,
) -> CUresult {
    let s = crate::stream::resolve(s);
    capture_info(s, status, id, graph, deps, edges, n)
}
/// `cuStreamGetCaptureInfo_v3_ptsz`.
#[no_mangle]
pub extern "C" fn cuStreamGetCaptureInfo_v3_ptsz(
    s: CUstream,
    status: *mut u32,
    id: *mut u64,
    graph: *mut CUgraph,
    deps: *mut *const CUgraphNode,
    edges: *mut *const c_void,
    n: *mut usize,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    capture_info(s, status, id, graph, deps, edges, n)
}

/// `cuThreadExchangeStreamCaptureMode`: the mode is kept per thread and
/// exchanged (fairgpu's capture does not restrict other calls by mode).
#[no_mangle]
pub extern "C" fn cuThreadExchangeStreamCaptureMode(mode: *mut u32) -> CUresult {
    thread_local! {
        static MODE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    ffi_result(|| {
        if mode.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller's mode slot, read then written.
        unsafe { *mode = MODE.with(|m| m.replace(*mode)) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(handle: u64, deps: &[u64]) -> Node {
        Node {
            handle,
            work: Work::Empty,
            deps: deps.to_vec(),
        }
    }

    #[test]
    fn order_puts_dependencies_first_and_refuses_cycles() {
        let g = Graph {
            nodes: vec![node(1, &[3]), node(2, &[]), node(3, &[2]), node(4, &[1, 2])],
        };
        assert_eq!(g.order(), Some(vec![1, 2, 0, 3]));
        let cyclic = Graph {
            nodes: vec![node(1, &[2]), node(2, &[1]), node(3, &[])],
        };
        assert_eq!(cyclic.order(), None);
        let dangling = Graph {
            nodes: vec![node(1, &[9])],
        };
        assert_eq!(dangling.order(), None);
    }

    #[test]
    fn child_graphs_are_flattened_in_place() {
        let child = Graph {
            nodes: vec![
                Node {
                    handle: 10,
                    work: Work::EventRecord(7),
                    deps: vec![],
                },
                Node {
                    handle: 11,
                    work: Work::EventWait(8),
                    deps: vec![10],
                },
            ],
        };
        let g = Graph {
            nodes: vec![
                Node {
                    handle: 2,
                    work: Work::Child(Box::new(child)),
                    deps: vec![1],
                },
                node(1, &[]),
            ],
        };
        let steps = g.flatten(&HashMap::new()).unwrap();
        let kinds: Vec<(u64, u32)> = steps.iter().map(|(h, w)| (*h, node_type(w))).collect();
        assert_eq!(kinds, vec![(1, 5), (2, 7), (2, 6)]);
    }

    /// A conditional node's bodies are looked up when the graph is
    /// instantiated and become its steps (nested ones too); a missing body,
    /// a body with a memory node, or nesting without end is refused.
    #[test]
    fn conditional_bodies_become_steps_of_their_node() {
        let cond = |handle: u64, bodies: &[u64]| Work::Cond {
            handle,
            kind: 0,
            bodies: bodies.into(),
        };
        let mut graphs = HashMap::new();
        graphs.insert(
            100,
            Graph {
                nodes: vec![
                    node(20, &[]),
                    Node {
                        handle: 21,
                        work: cond(0xb000, &[101]),
                        deps: vec![20],
                    },
                ],
            },
        );
        graphs.insert(
            101,
            Graph {
                nodes: vec![node(30, &[])],
            },
        );
        let top = Graph {
            nodes: vec![
                node(1, &[]),
                Node {
                    handle: 2,
                    work: cond(0xa000, &[100]),
                    deps: vec![1],
                },
            ],
        };
        let steps = top.flatten(&graphs).unwrap();
        assert_eq!(steps.len(), 2);
        let Work::CondRun { handle, bodies, .. } = &steps[1].1 else {
            panic!("{:?}", steps[1]);
        };
        assert_eq!((*handle, bodies.len(), bodies[0].len()), (0xa000, 1, 2));
        let Work::CondRun { handle, bodies, .. } = &bodies[0][1].1 else {
            panic!("{:?}", bodies[0]);
        };
        assert_eq!((*handle, bodies[0].len()), (0xb000, 1));

        // A body that is gone.
        let mut missing = graphs.clone();
        missing.remove(&101);
        assert!(top.flatten(&missing).is_none());
        // A body that allocates memory.
        let mut allocating = graphs.clone();
        allocating.insert(
            101,
            Graph {
                nodes: vec![Node {
                    handle: 30,
                    work: Work::MemFree(0x1000),
                    deps: vec![],
                }],
            },
        );
        assert!(top.flatten(&allocating).is_none());
        // A body that contains its own node: nesting without end.
        let mut endless = graphs;
        endless.insert(
            101,
            Graph {
                nodes: vec![Node {
                    handle: 30,
                    work: cond(0xb000, &[101]),
                    deps: vec![],
                }],
            },
        );
        assert!(top.flatten(&endless).is_none());
    }
}
