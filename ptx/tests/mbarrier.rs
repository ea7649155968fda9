//! Split barriers in shared memory (`mbarrier`), from libcu++'s
//! `cuda::barrier` (`tests/kernels/mbarrier.cu`, built by nvcc 13 with the
//! CCCL headers), against CPU references.

mod common;

use common::*;

#[test]
fn barrier_phases_tokens_and_dropped_threads() {
    let m = kernel("mbarrier");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let (blocks, n) = (2usize, 128usize);
    let out = mem.alloc_i32(&vec![0; blocks * n]);
    launch(
        &m,
        &mut g,
        "rounds",
        dims([blocks as u32, 1, 1], [n as u32, 1, 1], 0),
        Params::new().ptr(out),
        &mut mem,
    )
    .unwrap();
    let got = mem.i32s(out);
    for b in 0..blocks {
        for t in 0..n {
            let mut acc = 0i32;
            for r in 1..=4i32 {
                if r > 1 && t % 4 == 0 {
                    break;
                }
                let u = (t + 1) % n;
                // A thread that dropped out keeps round 1's value.
                acc += if r == 1 || u % 4 != 0 { r * 1000 } else { 1000 } + u as i32;
                if !(r == 1 && t % 4 == 0) {
                    acc += 1;
                }
            }
            assert_eq!(got[b * n + t], acc, "block {b} thread {t}");
        }
    }
}

#[test]
fn memcpy_async_completes_on_the_barrier() {
    let m = kernel("mbarrier");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let blocks = 3usize;
    let input: Vec<f32> = (0..blocks * 128).map(|i| i as f32 * 0.5 - 40.0).collect();
    let pin = mem.alloc_f32(&input);
    let out = mem.alloc_f32(&vec![0.0; blocks * 128]);
    launch(
        &m,
        &mut g,
        "async_copy",
        dims([blocks as u32, 1, 1], [128, 1, 1], 0),
        Params::new().ptr(pin).ptr(out),
        &mut mem,
    )
    .unwrap();
    let got = mem.f32s(out);
    for b in 0..blocks {
        for t in 0..128 {
            assert_eq!(
                got[b * 128 + t],
                input[b * 128 + 127 - t] * 2.0,
                "block {b} thread {t}"
            );
        }
    }
}
