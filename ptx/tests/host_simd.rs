//! The engine's lane loops run in copies compiled for AVX2 and FMA where
//! the host has them (`Limits::host_simd`). Both copies must compute the
//! same bits: each kernel here runs twice on the same inputs, with the
//! wide copies and with baseline x86-64, and every output byte is compared.
//! The inputs mix ordinary values with the ones where float code differs
//! first: NaNs, infinities, signed zeros, subnormals, huge and tiny values,
//! and f32 products whose f64 sum falls on a rounding midpoint.

mod common;

use common::*;
use fairgpu_ptx::{Dims, Limits, Module};

/// Random bit patterns, one in four of them a special value.
fn words32(r: &mut Rng, n: usize) -> Vec<u32> {
    const SPECIAL: [u32; 12] = [
        0x7fc0_0000, // NaN
        0xffc0_0001, // NaN with a payload
        0x7f80_0000, // +inf
        0xff80_0000, // -inf
        0x8000_0000, // -0
        0x0000_0001, // smallest subnormal
        0x807f_ffff, // largest negative subnormal
        0x7f7f_ffff, // largest finite
        0x0080_0000, // smallest normal
        0x3f80_0001, // 1 + ulp
        0x4b80_0000, // 2^24
        0xcf00_0000, // -2^31
    ];
    (0..n)
        .map(|_| {
            let v = r.next();
            match v % 4 {
                0 => SPECIAL[(v >> 8) as usize % SPECIAL.len()],
                1 => (v >> 16) as u32,
                _ => r.f32().to_bits(),
            }
        })
        .collect()
}

fn words64(r: &mut Rng, n: usize) -> Vec<u64> {
    const SPECIAL: [u64; 8] = [
        0x7ff8_0000_0000_0000,
        0xfff0_0000_0000_0000,
        0x8000_0000_0000_0000,
        0x0000_0000_0000_0001,
        0x7fef_ffff_ffff_ffff,
        0x3ff0_0000_0000_0001,
        0xc3e0_0000_0000_0000,
        0x0010_0000_0000_0000,
    ];
    (0..n)
        .map(|_| {
            let v = r.next();
            match v % 4 {
                0 => SPECIAL[(v >> 8) as usize % SPECIAL.len()],
                1 => v,
                _ => f64::from(r.f32()).to_bits() ^ (r.next() & 0xfff),
            }
        })
        .collect()
}

fn le32(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn le64(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// One buffer of a launch: its initial bytes, written by the kernel or not.
struct Buf(Vec<u8>);

/// Runs `name` with `host_simd` on and off over the same buffers (the
/// pointers first in the parameters, then `tail`), and returns every
/// buffer's bytes after each run.
fn both(m: &Module, name: &str, d: Dims, bufs: &[Buf], tail: &[u8]) -> [Vec<Vec<u8>>; 2] {
    [true, false].map(|simd| {
        let mut mem = VecMemory::default();
        let ptrs: Vec<u64> = bufs.iter().map(|b| mem.alloc(b.0.clone())).collect();
        let mut p = Params::new();
        for &ptr in &ptrs {
            p = p.ptr(ptr);
        }
        p = p.bytes(tail, 4);
        let lim = Limits {
            host_simd: simd,
            ..Limits::default()
        };
        m.run(&mut m.globals(), name, &d, &p.0, &mut mem, &lim)
            .unwrap_or_else(|e| panic!("{name} (host_simd {simd}): {e}"));
        ptrs.iter()
            .zip(bufs)
            .map(|(&ptr, b)| mem.bytes(ptr)[..b.0.len()].to_vec())
            .collect()
    })
}

fn same(name: &str, [wide, base]: [Vec<Vec<u8>>; 2], inputs: &[Buf]) {
    let mut changed = false;
    for (k, (w, b)) in wide.iter().zip(&base).enumerate() {
        if let Some(at) = w.iter().zip(b).position(|(x, y)| x != y) {
            panic!(
                "{name}: buffer {k} differs at byte {at}: wide {:#04x}, baseline {:#04x}",
                w[at], b[at]
            );
        }
        changed |= *w != inputs[k].0;
    }
    // A kernel that wrote nothing would compare equal whatever the engine.
    assert!(changed, "{name}: no output written");
}

#[test]
fn float_kernels_compute_the_same_bits_with_and_without_host_simd() {
    let mut r = Rng(0x5eed);
    let n = 777usize;
    let d = dims([7, 1, 1], [128, 1, 1], 0);
    let n32 = (n as u32).to_le_bytes();

    let m = kernel("fp64");
    let x = Buf(le64(&words64(&mut r, n)));
    let bufs = [
        x,
        Buf(vec![0; 32 * n]),
        Buf(vec![0; 4 * n]),
        Buf(vec![0; 8 * n]),
    ];
    same("fp64", both(&m, "fp64", d, &bufs, &n32), &bufs);
    let bufs = [
        Buf(le32(&words32(&mut r, n))),
        Buf(vec![0; 32 * n]),
        Buf(vec![0; 8 * n]),
    ];
    same("fp32", both(&m, "fp32", d, &bufs, &n32), &bufs);

    let m = kernel("half");
    let h = |r: &mut Rng| {
        Buf(words32(r, n)
            .iter()
            .flat_map(|w| (*w as u16).to_le_bytes())
            .collect())
    };
    let bufs = [h(&mut r), h(&mut r), Buf(vec![0; 16 * n])];
    same("half_ops", both(&m, "half_ops", d, &bufs, &n32), &bufs);
    let bufs = [
        Buf(le32(&words32(&mut r, n))),
        Buf(le32(&words32(&mut r, n))),
        Buf(vec![0; 8 * n]),
    ];
    same("half2_ops", both(&m, "half2_ops", d, &bufs, &n32), &bufs);

    let m = kernel("bf16");
    let bufs = [
        h(&mut r),
        h(&mut r),
        h(&mut r),
        Buf(le32(&words32(&mut r, n))),
        Buf(vec![0; 24 * n]),
        Buf(vec![0; 4 * n]),
        Buf(vec![0; 4 * n]),
    ];
    same("bf16_ops", both(&m, "bf16_ops", d, &bufs, &n32), &bufs);

    // fma.rn.f32 chains over shared memory tiles, then saxpy's fma.
    let m = kernel("matmul");
    let k = 48usize;
    let mat = |r: &mut Rng| Buf(le32(&words32(r, k * k)));
    let bufs = [mat(&mut r), mat(&mut r), Buf(vec![0; 4 * k * k])];
    let tiles = k.div_ceil(16) as u32;
    let dm = dims([tiles, tiles, 1], [16, 16, 1], 0);
    same(
        "matmul",
        both(&m, "matmul", dm, &bufs, &(k as u32).to_le_bytes()),
        &bufs,
    );

    // Option pricing: float2 accesses, ex2/lg2/rsqrt/div.approx; the
    // inputs any bits, so that every special value meets every function.
    let m = kernel("options");
    let pairs = n / 2;
    let f2 = |r: &mut Rng| Buf(le32(&words32(r, 2 * pairs)));
    let bufs = [
        Buf(vec![0; 8 * pairs]),
        Buf(vec![0; 8 * pairs]),
        f2(&mut r),
        f2(&mut r),
        f2(&mut r),
    ];
    let mut tail = 0.02f32.to_le_bytes().to_vec();
    tail.extend_from_slice(&0.3f32.to_le_bytes());
    tail.extend_from_slice(&(pairs as u32).to_le_bytes());
    same("options", both(&m, "options", d, &bufs, &tail), &bufs);

    let m = kernel("saxpy");
    // saxpy takes (n, a, x, y): the scalars come first.
    let (x, y) = (words32(&mut r, n), words32(&mut r, n));
    let run = |simd: bool| {
        let mut mem = VecMemory::default();
        let (px, py) = (mem.alloc(le32(&x)), mem.alloc(le32(&y)));
        let p = Params::new().i32(n as i32).f32(1.0000001).ptr(px).ptr(py);
        let lim = Limits {
            host_simd: simd,
            ..Limits::default()
        };
        m.run(&mut m.globals(), "saxpy", &d, &p.0, &mut mem, &lim)
            .expect("saxpy runs");
        mem.bytes(py)[..4 * n].to_vec()
    };
    let (wide, base) = (run(true), run(false));
    assert_eq!(wide, base, "saxpy differs");
    assert_ne!(wide, le32(&y), "saxpy wrote nothing");
}

#[test]
fn integer_and_warp_kernels_compute_the_same_bits_with_and_without_host_simd() {
    let mut r = Rng(0xfeed);
    let n = 901usize;
    let d = dims([8, 1, 1], [128, 1, 1], 0);
    let n32 = (n as u32).to_le_bytes();

    let m = kernel("intops");
    let bufs = [
        Buf(le32(&words32(&mut r, n))),
        Buf(le32(&words32(&mut r, n))),
        Buf(vec![0; 64 * n]),
        Buf(vec![0; 32 * n]),
    ];
    same("intops", both(&m, "intops", d, &bufs, &n32), &bufs);

    let m = kernel("reduce");
    let big = 100_003usize;
    let bufs = [Buf(le32(&words32(&mut r, big))), Buf(vec![0; 4 * 1024])];
    let dr = dims([64, 1, 1], [256, 1, 1], 256 * 4);
    let nb = (big as u32).to_le_bytes();
    same(
        "reduce_shared",
        both(&m, "reduce_shared", dr, &bufs, &nb),
        &bufs,
    );
    let floats: Vec<u32> = (0..big).map(|_| r.f32().to_bits()).collect();
    let bufs = [Buf(le32(&floats)), Buf(vec![0; 4 * 1024])];
    same(
        "reduce_shfl",
        both(&m, "reduce_shfl", dr, &bufs, &nb),
        &bufs,
    );

    let m = kernel("scan");
    let ints: Vec<u32> = (0..1024).map(|_| (r.next() % 2001) as u32).collect();
    let bufs = [Buf(le32(&ints)), Buf(vec![0; 4 * 1024])];
    let ds = dims([1, 1, 1], [1024, 1, 1], 2 * 1024 * 4);
    same(
        "scan_hillis",
        both(&m, "scan_hillis", ds, &bufs, &1024u32.to_le_bytes()),
        &bufs,
    );
}
