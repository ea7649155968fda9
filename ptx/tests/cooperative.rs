//! Cooperative launches: cooperative groups' grid-wide barrier
//! (`tests/kernels/gridsync.cu`, built by nvcc 13 with the CCCL headers)
//! works when every block is resident ([`Dims::cooperative`]), against a
//! CPU reference.

mod common;

use common::*;
use fairgpu_ptx::{Dims, Error};

/// `out[r * blocks + b]`: the sum over the blocks from `b` on of their
/// round-`r` partial sums, as `grid_rounds` computes it.
fn reference(input: &[i32], blocks: usize, threads: usize) -> Vec<i64> {
    let stride = blocks * threads;
    let mut out = vec![0i64; 3 * blocks];
    for r in 0..3 {
        let partial: Vec<i64> = (0..blocks)
            .map(|b| {
                (0..threads)
                    .flat_map(|t| (b * threads + t..input.len()).step_by(stride))
                    .map(|i| i64::from(input[i]) * (r as i64 + 1))
                    .sum()
            })
            .collect();
        for b in 0..blocks {
            out[r * blocks + b] = partial[b..].iter().sum();
        }
    }
    out
}

fn launch_rounds(cooperative: bool) -> (Result<(), Error>, Vec<i64>, Vec<i64>) {
    let m = kernel("gridsync");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let (blocks, threads, n) = (12usize, 64usize, 5000usize);
    let input: Vec<i32> = (0..n as i32).map(|i| (i * 7919) % 1001 - 500).collect();
    let pin = mem.alloc_i32(&input);
    let partial = mem.alloc_u64(&vec![0; 3 * blocks]);
    let out = mem.alloc_u64(&vec![0; 3 * blocks]);
    let workspace = mem.alloc_u64(&[0]);
    let d = Dims {
        cooperative: cooperative.then_some(workspace),
        ..dims([blocks as u32, 1, 1], [threads as u32, 1, 1], 0)
    };
    let p = Params::new().ptr(pin).i32(n as i32).ptr(partial).ptr(out);
    let r = launch(&m, &mut g, "grid_rounds", d, p, &mut mem).map(|_| ());
    let got = mem.u64s(out).into_iter().map(|v| v as i64).collect();
    (r, got, reference(&input, blocks, threads))
}

#[test]
fn a_cooperative_grid_synchronizes_every_block() {
    let (r, got, want) = launch_rounds(true);
    r.unwrap();
    assert_eq!(got, want);
}

#[test]
fn a_grid_barrier_outside_a_cooperative_launch_has_no_workspace() {
    // The workspace address is NULL: cooperative groups' grid.sync()
    // sees an invalid grid and traps, as it does on a GPU without a
    // cooperative launch.
    let (r, _, _) = launch_rounds(false);
    assert_eq!(r, Err(Error::Trap));
}
