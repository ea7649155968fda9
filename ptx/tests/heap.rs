//! The device heap and calls through pointers (`tests/kernels/heap.cu`,
//! built by nvcc 13): `malloc`/`free`, `new`/`delete` of objects that
//! outlive their launch, virtual functions, and the errors of each.

mod common;

use common::*;
use fairgpu_ptx::Error;

const ONE: [u32; 3] = [1, 1, 1];

#[test]
fn each_thread_allocates_uses_and_frees_scratch() {
    let m = kernel("heap");
    let mut g = m.globals();
    let mut mem = VecMemory::default().with_heap(1 << 20);
    let (threads, n) = (128usize, 10i32);
    let out = mem.alloc_i32(&vec![0; threads]);
    launch(
        &m,
        &mut g,
        "heap_sums",
        dims([2, 1, 1], [64, 1, 1], 0),
        Params::new().ptr(out).i32(n),
        &mut mem,
    )
    .unwrap();
    for (i, &s) in mem.i32s(out).iter().enumerate() {
        let want: i32 = (0..n).map(|k| i as i32 * k + 1).sum();
        assert_eq!(s, want, "thread {i}");
    }
    assert_eq!(mem.heap_blocks(), 0, "every block was freed");
}

#[test]
fn without_a_heap_malloc_gives_null() {
    let m = kernel("heap");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let out = mem.alloc_i32(&[0; 32]);
    launch(
        &m,
        &mut g,
        "heap_sums",
        dims(ONE, [32, 1, 1], 0),
        Params::new().ptr(out).i32(4),
        &mut mem,
    )
    .unwrap();
    assert_eq!(mem.i32s(out), vec![-1; 32]);
}

#[test]
fn objects_made_by_one_launch_are_read_and_deleted_by_the_next() {
    let m = kernel("heap");
    let mut g = m.globals();
    let mut mem = VecMemory::default().with_heap(1 << 16);
    let head = mem.alloc_u64(&[0]);
    let out = mem.alloc_i32(&[0; 64]);
    let count = mem.alloc_i32(&[0]);
    let one = || dims(ONE, ONE, 0);
    launch(
        &m,
        &mut g,
        "heap_push",
        one(),
        Params::new().ptr(head).i32(20),
        &mut mem,
    )
    .unwrap();
    assert_eq!(mem.heap_blocks(), 20);
    launch(
        &m,
        &mut g,
        "heap_walk",
        one(),
        Params::new().ptr(head).ptr(out).ptr(count),
        &mut mem,
    )
    .unwrap();
    assert_eq!(mem.i32s(count), vec![20]);
    let want: Vec<i32> = (0..20).rev().map(|k| k * k + 7).collect();
    assert_eq!(mem.i32s(out)[..20], want[..]);
    assert_eq!(mem.u64s(head), vec![0]);
    assert_eq!(mem.heap_blocks(), 0);
}

#[test]
fn a_request_the_heap_cannot_hold_gives_null() {
    let m = kernel("heap");
    let mut g = m.globals();
    let mut mem = VecMemory::default().with_heap(64 << 10);
    let is_null = mem.alloc_i32(&[-1]);
    for (bytes, null) in [(1u64 << 20, 1), (100, 0), (64 << 10, 0), (u64::MAX, 1)] {
        launch(
            &m,
            &mut g,
            "heap_too_large",
            dims(ONE, ONE, 0),
            Params::new().u64(bytes).ptr(is_null),
            &mut mem,
        )
        .unwrap();
        assert_eq!(mem.i32s(is_null), vec![null], "malloc({bytes})");
        assert_eq!(mem.heap_blocks(), 0);
    }
}

#[test]
fn freeing_what_the_heap_did_not_give_fails_the_launch() {
    let m = kernel("heap");
    let mut g = m.globals();
    let mut mem = VecMemory::default().with_heap(1 << 16);
    // A list node in ordinary device memory: value 5, no next.
    let node = mem.alloc_u64(&[5, 0]);
    let head = mem.alloc_u64(&[node]);
    let out = mem.alloc_i32(&[0; 4]);
    let count = mem.alloc_i32(&[0]);
    let e = launch(
        &m,
        &mut g,
        "heap_walk",
        dims(ONE, ONE, 0),
        Params::new().ptr(head).ptr(out).ptr(count),
        &mut mem,
    )
    .unwrap_err();
    assert_eq!(e, Error::BadFree { addr: node });
}

#[test]
fn virtual_functions_dispatch_on_the_objects_type() {
    let m = kernel("heap");
    let mut g = m.globals();
    let mut mem = VecMemory::default().with_heap(1 << 20);
    let n = 100usize;
    let kind: Vec<i32> = (0..n as i32).map(|i| (i * 7) % 3).collect();
    let size: Vec<f32> = (0..n).map(|i| 0.5 + i as f32 * 0.25).collect();
    let (pk, ps) = (mem.alloc_i32(&kind), mem.alloc_f32(&size));
    let shapes = mem.alloc_u64(&vec![0; n]);
    let area = mem.alloc_f32(&vec![0.0; n]);
    let sides = mem.alloc_i32(&vec![-1; n]);
    let grid = dims([4, 1, 1], [32, 1, 1], 0);
    let make = Params::new().ptr(shapes).ptr(pk).ptr(ps).i32(n as i32);
    launch(&m, &mut g, "shapes_make", grid, make, &mut mem).unwrap();
    assert_eq!(mem.heap_blocks(), n);
    let grid = dims([4, 1, 1], [32, 1, 1], 0);
    let measure = Params::new().ptr(shapes).ptr(area).ptr(sides).i32(n as i32);
    launch(&m, &mut g, "shapes_measure", grid, measure, &mut mem).unwrap();
    let (got_area, got_sides) = (mem.f32s(area), mem.i32s(sides));
    for i in 0..n {
        let s = size[i];
        let (a, k) = match kind[i] {
            0 => (s * s, 4),
            1 => (3.25 * s * s, 0),
            _ => (0.5 * s * 2.0, 3),
        };
        assert_eq!(got_area[i].to_bits(), a.to_bits(), "area of shape {i}");
        assert_eq!(got_sides[i], k, "sides of shape {i}");
    }
    let grid = dims([4, 1, 1], [32, 1, 1], 0);
    let del = Params::new().ptr(shapes).i32(n as i32);
    launch(&m, &mut g, "shapes_delete", grid, del, &mut mem).unwrap();
    assert_eq!(
        mem.heap_blocks(),
        0,
        "the virtual destructors freed every object"
    );
    assert_eq!(mem.u64s(shapes), vec![0; n]);
}

#[test]
fn a_call_through_a_pointer_table_in_a_module_variable() {
    let m = kernel("heap");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let n = 64usize;
    let which: Vec<i32> = (0..n as i32).map(|i| (i / 3) % 2).collect();
    let x: Vec<i32> = (0..n as i32).map(|i| i - 20).collect();
    let (pw, px) = (mem.alloc_i32(&which), mem.alloc_i32(&x));
    let y = mem.alloc_i32(&vec![0; n]);
    launch(
        &m,
        &mut g,
        "call_pointer",
        dims([2, 1, 1], [32, 1, 1], 0),
        Params::new().ptr(pw).ptr(px).ptr(y).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    for (i, &v) in mem.i32s(y).iter().enumerate() {
        let want = if which[i] == 0 { 2 * x[i] } else { x[i] * x[i] };
        assert_eq!(v, want, "thread {i}");
    }
}

#[test]
fn a_call_to_an_address_that_is_no_function_fails_the_launch() {
    let m = kernel("heap");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    // An object whose virtual table holds an address that names nothing.
    let vtable = mem.alloc_u64(&[0x1234, 0x1234]);
    let object = mem.alloc_u64(&[vtable, 0]);
    let shapes = mem.alloc_u64(&[object]);
    let area = mem.alloc_f32(&[0.0]);
    let sides = mem.alloc_i32(&[0]);
    let e = launch(
        &m,
        &mut g,
        "shapes_measure",
        dims(ONE, ONE, 0),
        Params::new().ptr(shapes).ptr(area).ptr(sides).i32(1),
        &mut mem,
    )
    .unwrap_err();
    assert_eq!(e, Error::BadCall { addr: 0x1234 });
}
