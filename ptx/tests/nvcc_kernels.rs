//! Kernels compiled by nvcc 13 (`tests/kernels/*.cu`, PTX checked in) run
//! against CPU references computed here in the same operation order.

mod common;

use common::*;

#[test]
fn vecadd() {
    let m = kernel("vecadd");
    let mut g = m.globals();
    let n = 1000;
    let mut r = Rng(1);
    let a: Vec<f32> = (0..n).map(|_| r.f32()).collect();
    let b: Vec<f32> = (0..n).map(|_| r.f32()).collect();
    let mut mem = VecMemory::default();
    let (pa, pb) = (mem.alloc_f32(&a), mem.alloc_f32(&b));
    let pc = mem.alloc_f32(&vec![0.0; n]);
    let st = launch(
        &m,
        &mut g,
        "vecadd",
        dims([4, 1, 1], [256, 1, 1], 0),
        Params::new().ptr(pa).ptr(pb).ptr(pc).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let c = mem.f32s(pc);
    for i in 0..n {
        assert_eq!(c[i].to_bits(), (a[i] + b[i]).to_bits(), "element {i}");
    }
    assert_eq!(st.threads, 1024);
    assert!(st.instructions > 1024 * 10);
}
