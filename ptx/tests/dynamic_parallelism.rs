//! Dynamic parallelism (`tests/kernels/cdp.cu`, built by nvcc 13 with
//! `-rdc=true`): kernels launched from the device run after their parent
//! grid, to completion, in launch order, with tail launches last; device
//! copies, fills, streams, `cudaMalloc`/`cudaFree` and the per-thread
//! errors of the device runtime; the nesting and pending-work limits.

mod common;

use common::*;
use fairgpu_ptx::{Error, Limits, Module, DEFAULT_PENDING_LAUNCHES, MAX_DEPTH};

const ONE: [u32; 3] = [1, 1, 1];

/// `cudaError_t` values.
const INVALID_CONFIGURATION: i32 = 9;
const LAUNCH_MAX_DEPTH_EXCEEDED: i32 = 65;
const LAUNCH_PENDING_COUNT_EXCEEDED: i32 = 69;

fn run(
    m: &Module,
    name: &str,
    d: fairgpu_ptx::Dims,
    p: Params,
    mem: &mut VecMemory,
    limits: &Limits,
) -> Result<fairgpu_ptx::RunStats, Error> {
    let mut g = m.globals();
    m.run(&mut g, name, &d, &p.0, mem, limits)
}

/// The tree `tree` writes: node 0 holds the root's value; the children of
/// node n are n*fan+1 ..= n*fan+fan, each its parent's value * 10 + its
/// index + 1.
fn tree_on_cpu(root: i32, fan: usize, levels: u32) -> Vec<i32> {
    let nodes: usize = (0..=levels).map(|d| fan.pow(d)).sum();
    let mut out = vec![0; nodes];
    out[0] = root;
    for n in 0..nodes {
        for c in 0..fan {
            let child = n * fan + 1 + c;
            if child < nodes {
                out[child] = out[n] * 10 + c as i32 + 1;
            }
        }
    }
    out
}

#[test]
fn a_tree_of_launches_writes_every_node() {
    let m = kernel("cdp");
    let (fan, levels) = (3usize, 4u32);
    let want = tree_on_cpu(7, fan, levels);
    let mut mem = VecMemory::default().with_heap(1 << 20);
    let out = mem.alloc_i32(&vec![-1; want.len()]);
    let stats = run(
        &m,
        "_Z4treePiiiiii",
        dims(ONE, ONE, 0),
        Params::new()
            .ptr(out)
            .i32(0)
            .i32(7)
            .i32(0)
            .i32(levels as i32)
            .i32(fan as i32),
        &mut mem,
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(mem.i32s(out), want);
    // The statistics count every grid's threads: the root and 3 + 9 + 27
    // grids of 3 threads.
    assert_eq!(stats.threads, 1 + 3 * (1 + 3 + 9 + 27));
    assert_eq!(mem.heap_blocks(), 0, "every parameter buffer was freed");
}

#[test]
fn children_see_their_parent_and_streams_keep_their_order() {
    let m = kernel("cdp");
    let (blocks, per) = (4usize, 50usize);
    let n = blocks * per;
    let mut mem = VecMemory::default().with_heap(1 << 20);
    let src = mem.alloc_i32(&vec![0; n]);
    let scaled = mem.alloc_i32(&vec![0; n]);
    let copy = mem.alloc_i32(&vec![-1; n]);
    let pad = mem.alloc(vec![0u8; blocks * 16 + 16]);
    let sum = mem.alloc_i32(&[0]);
    run(
        &m,
        "_Z8pipelinePiS_S_iPhS_",
        dims([blocks as u32, 1, 1], [32, 1, 1], 0),
        Params::new()
            .ptr(src)
            .ptr(scaled)
            .ptr(copy)
            .i32(per as i32)
            .ptr(pad)
            .ptr(sum),
        &mut mem,
        &Limits::default(),
    )
    .unwrap();
    let want: Vec<i32> = (0..n as i32).map(|i| i * 3).collect();
    assert_eq!(
        mem.i32s(scaled),
        want,
        "the children read what the parents wrote"
    );
    assert_eq!(
        mem.i32s(copy),
        want,
        "each copy came after its stream's kernel"
    );
    let mut pad_want = vec![0x5au8; blocks * 16];
    pad_want.extend([0u8; 16]);
    assert_eq!(mem.bytes(pad)[..blocks * 16 + 16], pad_want[..]);
    assert_eq!(
        mem.i32s(sum),
        vec![want.iter().sum::<i32>()],
        "the tail launch ran after every other launch of its parent"
    );
}

#[test]
fn the_device_runtime_reports_errors_per_thread() {
    let m = kernel("cdp");
    let mut mem = VecMemory::default().with_heap(1 << 16);
    let codes = mem.alloc_i32(&[-1; 6]);
    run(
        &m,
        "_Z6errorsPi",
        dims(ONE, ONE, 0),
        Params::new().ptr(codes),
        &mut mem,
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(
        mem.i32s(codes),
        vec![
            INVALID_CONFIGURATION,
            0,
            INVALID_CONFIGURATION,
            INVALID_CONFIGURATION,
            0,
            0
        ]
    );
    assert_eq!(mem.heap_blocks(), 0);
}

#[test]
fn nesting_stops_at_the_gpu_s_depth() {
    let m = kernel("cdp");
    let mut mem = VecMemory::default().with_heap(1 << 16);
    let levels = MAX_DEPTH as usize;
    let level = mem.alloc_i32(&vec![-1; levels + 1]);
    run(
        &m,
        "_Z4deepPii",
        dims(ONE, ONE, 0),
        Params::new().ptr(level).i32(0),
        &mut mem,
        &Limits::default(),
    )
    .unwrap();
    let mut want = vec![0; levels - 1];
    want.push(LAUNCH_MAX_DEPTH_EXCEEDED);
    want.push(-1);
    assert_eq!(mem.i32s(level), want);
}

#[test]
fn pending_launches_are_bounded() {
    let m = kernel("cdp");
    let mut mem = VecMemory::default().with_heap(1 << 20);
    // 64 threads launch a grid each, with room for 40 pending.
    let codes = mem.alloc_i32(&[-1; 64]);
    let limits = Limits {
        pending_launches: 40,
        ..Limits::default()
    };
    const { assert!(40 < DEFAULT_PENDING_LAUNCHES) };
    let stats = run(
        &m,
        "_Z7fan_outPi",
        dims(ONE, [64, 1, 1], 0),
        Params::new().ptr(codes),
        &mut mem,
        &limits,
    )
    .unwrap();
    let mut want = vec![0; 40];
    want.resize(64, LAUNCH_PENDING_COUNT_EXCEEDED);
    assert_eq!(mem.i32s(codes), want);
    assert_eq!(stats.threads, 64 + 40, "the 40 queued grids ran");
    assert_eq!(mem.heap_blocks(), 0, "refused launches freed their buffers");
}

#[test]
fn a_fault_in_a_child_fails_the_whole_launch() {
    let m = kernel("cdp");
    let mut mem = VecMemory::default().with_heap(1 << 16);
    // The tree's nodes of level 2 lie past the 4 ints given.
    let out = mem.alloc_i32(&[0; 4]);
    let e = run(
        &m,
        "_Z4treePiiiiii",
        dims(ONE, ONE, 0),
        Params::new().ptr(out).i32(0).i32(1).i32(0).i32(2).i32(3),
        &mut mem,
        &Limits::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
}

#[test]
fn every_grid_draws_on_the_one_budget() {
    let m = kernel("cdp");
    let (fan, levels) = (3usize, 4u32);
    let nodes = tree_on_cpu(1, fan, levels).len();
    let mut mem = VecMemory::default().with_heap(1 << 20);
    let out = mem.alloc_i32(&vec![0; nodes]);
    let p = || {
        Params::new()
            .ptr(out)
            .i32(0)
            .i32(1)
            .i32(0)
            .i32(levels as i32)
            .i32(fan as i32)
    };
    let whole = run(
        &m,
        "_Z4treePiiiiii",
        dims(ONE, ONE, 0),
        p(),
        &mut mem,
        &Limits::default(),
    )
    .unwrap();
    // Far more than the root grid needs, far less than the tree.
    let limits = Limits {
        max_instructions: whole.instructions / 4,
        ..Limits::default()
    };
    let e = run(
        &m,
        "_Z4treePiiiiii",
        dims(ONE, ONE, 0),
        p(),
        &mut mem,
        &limits,
    )
    .unwrap_err();
    assert_eq!(e, Error::Budget(whole.instructions / 4));
}
