//! Kernels compiled by nvcc 13 (`tests/kernels/*.cu`, PTX checked in) run
//! against CPU references computed here in the same operation order.

// References index the way the kernels do.
#![allow(clippy::needless_range_loop)]

mod common;

use common::*;
use fairgpu_ptx::{Error, Limits};

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

#[test]
fn saxpy_grid_stride() {
    let m = kernel("saxpy");
    let mut g = m.globals();
    let n = 3000;
    let mut r = Rng(2);
    let x: Vec<f32> = (0..n).map(|_| r.f32()).collect();
    let y: Vec<f32> = (0..n).map(|_| r.f32()).collect();
    let a = 1.75f32;
    let mut mem = VecMemory::default();
    let (px, py) = (mem.alloc_f32(&x), mem.alloc_f32(&y));
    launch(
        &m,
        &mut g,
        "saxpy",
        dims([3, 1, 1], [128, 1, 1], 0),
        Params::new().i32(n as i32).f32(a).ptr(px).ptr(py),
        &mut mem,
    )
    .unwrap();
    let out = mem.f32s(py);
    for i in 0..n {
        assert_eq!(out[i].to_bits(), a.mul_add(x[i], y[i]).to_bits(), "{i}");
    }
}

/// European call and put by Black-Scholes-Merton in f64: what the
/// kernel's approximations (`__expf`, `__logf`, `__fdividef`, `rsqrtf`, the
/// polynomial normal CDF) must come close to.
fn option_prices(s: f64, x: f64, t: f64, r: f64, v: f64) -> (f64, f64) {
    let cdf = |d: f64| {
        let k = 1.0 / (1.0 + 0.2316419 * d.abs());
        let poly = k
            * (0.319381530
                + k * (-0.356563782 + k * (1.781477937 + k * (-1.821255978 + k * 1.330274429))));
        let tail = 0.398942280 * (-0.5 * d * d).exp() * poly;
        if d > 0.0 {
            1.0 - tail
        } else {
            tail
        }
    };
    let root_t = t.sqrt();
    let d1 = ((s / x).ln() + (r + 0.5 * v * v) * t) / (v * root_t);
    let d2 = d1 - v * root_t;
    let discount = (-r * t).exp();
    (
        s * cdf(d1) - x * discount * cdf(d2),
        x * discount * (1.0 - cdf(d2)) - s * (1.0 - cdf(d1)),
    )
}

/// Option pricing over float2 arrays: vector loads and stores of a full
/// warp, and `ex2`/`lg2`/`rsqrt`/`div.approx` (a partial last warp takes
/// the general path for the same instructions).
#[test]
fn option_pricing_with_vector_accesses_and_fast_intrinsics() {
    let m = kernel("options");
    let pairs = 1000;
    let mut r = Rng(11);
    let mut uniform = |lo: f32, hi: f32| lo + (hi - lo) * (r.next() % 10_000) as f32 / 10_000.0;
    let spot: Vec<f32> = (0..2 * pairs).map(|_| uniform(5.0, 30.0)).collect();
    let strike: Vec<f32> = (0..2 * pairs).map(|_| uniform(1.0, 100.0)).collect();
    let years: Vec<f32> = (0..2 * pairs).map(|_| uniform(0.25, 10.0)).collect();
    let (rate, vol) = (0.02f32, 0.30f32);
    for simd in [true, false] {
        let mut mem = VecMemory::default();
        let call = mem.alloc_f32(&vec![0.0; 2 * pairs]);
        let put = mem.alloc_f32(&vec![0.0; 2 * pairs]);
        let (ps, px, pt) = (
            mem.alloc_f32(&spot),
            mem.alloc_f32(&strike),
            mem.alloc_f32(&years),
        );
        let p = Params::new()
            .ptr(call)
            .ptr(put)
            .ptr(ps)
            .ptr(px)
            .ptr(pt)
            .f32(rate)
            .f32(vol)
            .i32(pairs as i32);
        let lim = Limits {
            host_simd: simd,
            ..Limits::default()
        };
        let d = dims([(pairs as u32).div_ceil(128), 1, 1], [128, 1, 1], 0);
        m.run(&mut m.globals(), "options", &d, &p.0, &mut mem, &lim)
            .unwrap();
        let (c, q) = (mem.f32s(call), mem.f32s(put));
        for i in 0..2 * pairs {
            let (wc, wp) = option_prices(
                f64::from(spot[i]),
                f64::from(strike[i]),
                f64::from(years[i]),
                f64::from(rate),
                f64::from(vol),
            );
            // The intrinsics' errors, amplified by prices that are
            // differences of larger terms: within 1e-5 of the larger of
            // spot and strike.
            let tol = 1e-5 * f64::from(spot[i]).max(f64::from(strike[i]));
            assert!(
                (f64::from(c[i]) - wc).abs() <= tol && (f64::from(q[i]) - wp).abs() <= tol,
                "option {i} (host_simd {simd}): call {} put {}, want {wc} {wp}",
                c[i],
                q[i]
            );
        }
    }
}

#[test]
fn tiled_matmul_with_shared_memory_and_barriers() {
    let m = kernel("matmul");
    let mut g = m.globals();
    let n = 40usize;
    let mut r = Rng(3);
    let a: Vec<f32> = (0..n * n).map(|_| r.f32()).collect();
    let b: Vec<f32> = (0..n * n).map(|_| r.f32()).collect();
    let mut mem = VecMemory::default();
    let (pa, pb) = (mem.alloc_f32(&a), mem.alloc_f32(&b));
    let pc = mem.alloc_f32(&vec![0.0; n * n]);
    let tiles = n.div_ceil(16);
    launch(
        &m,
        &mut g,
        "matmul",
        dims([tiles as u32, tiles as u32, 1], [16, 16, 1], 0),
        Params::new().ptr(pa).ptr(pb).ptr(pc).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let c = mem.f32s(pc);
    for row in 0..n {
        for col in 0..n {
            let mut acc = 0.0f32;
            for t in 0..tiles {
                for k in 0..16 {
                    let i = t * 16 + k;
                    let x = if i < n { a[row * n + i] } else { 0.0 };
                    let y = if i < n { b[i * n + col] } else { 0.0 };
                    acc = x.mul_add(y, acc);
                }
            }
            assert_eq!(c[row * n + col].to_bits(), acc.to_bits(), "({row}, {col})");
        }
    }
}

#[test]
fn block_reduction_through_shared_memory() {
    let m = kernel("reduce");
    let mut g = m.globals();
    let n = 1000u32;
    let mut r = Rng(4);
    let input: Vec<u32> = (0..n).map(|_| r.next() as u32).collect();
    let mut mem = VecMemory::default();
    let pin = mem.alloc_u32(&input);
    let blocks = n.div_ceil(256);
    let pout = mem.alloc_u32(&vec![0; blocks as usize]);
    launch(
        &m,
        &mut g,
        "reduce_shared",
        dims([blocks, 1, 1], [128, 1, 1], 128 * 4),
        Params::new().ptr(pin).ptr(pout).u32(n),
        &mut mem,
    )
    .unwrap();
    let out = mem.u32s(pout);
    for b in 0..blocks as usize {
        let want = input[b * 256..((b + 1) * 256).min(n as usize)]
            .iter()
            .fold(0u32, |s, &v| s.wrapping_add(v));
        assert_eq!(out[b], want, "block {b}");
    }
}

/// `warp_sum` of reduce.cu: five shuffle-down steps; a lane whose source is
/// past the warp reads its own value.
fn warp_sum(mut v: [f32; 32]) -> [f32; 32] {
    for off in [16, 8, 4, 2, 1] {
        let old = v;
        for l in 0..32 {
            let src = if l + off < 32 { old[l + off] } else { old[l] };
            v[l] = old[l] + src;
        }
    }
    v
}

#[test]
fn block_reduction_with_warp_shuffles() {
    let m = kernel("reduce");
    let mut g = m.globals();
    let n = 1500usize;
    let block = 256usize;
    let mut r = Rng(5);
    let input: Vec<f32> = (0..n).map(|_| r.f32()).collect();
    let mut mem = VecMemory::default();
    let pin = mem.alloc_f32(&input);
    let blocks = n.div_ceil(block);
    let pout = mem.alloc_f32(&vec![0.0; blocks]);
    launch(
        &m,
        &mut g,
        "reduce_shfl",
        dims([blocks as u32, 1, 1], [block as u32, 1, 1], 0),
        Params::new().ptr(pin).ptr(pout).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let out = mem.f32s(pout);
    for b in 0..blocks {
        let mut partial = [0.0f32; 32];
        for w in 0..block / 32 {
            let mut v = [0.0f32; 32];
            for (l, x) in v.iter_mut().enumerate() {
                let i = b * block + w * 32 + l;
                *x = if i < n { input[i] } else { 0.0 };
            }
            partial[w] = warp_sum(v)[0];
        }
        let mut v = [0.0f32; 32];
        v[..block / 32].copy_from_slice(&partial[..block / 32]);
        assert_eq!(out[b].to_bits(), warp_sum(v)[0].to_bits(), "block {b}");
    }
}

#[test]
fn votes_shuffles_and_activemask() {
    let m = kernel("reduce");
    let mut g = m.globals();
    let threads = 64usize;
    let mut r = Rng(6);
    let mut input: Vec<i32> = (0..threads).map(|_| (r.next() % 41) as i32 - 20).collect();
    input[40] = 7;
    input[3] = -150;
    let mut mem = VecMemory::default();
    let pin = mem.alloc_i32(&input);
    let pout = mem.alloc_u32(&vec![0; threads * 8]);
    launch(
        &m,
        &mut g,
        "warp_ops",
        dims([1, 1, 1], [threads as u32, 1, 1], 0),
        Params::new().ptr(pin).ptr(pout),
        &mut mem,
    )
    .unwrap();
    let out = mem.u32s(pout);
    for w in 0..threads / 32 {
        let v = &input[w * 32..w * 32 + 32];
        let ballot = (0..32).filter(|&l| v[l] > 0).fold(0u32, |b, l| b | 1 << l);
        let all = v.iter().all(|&x| x > -100) as u32;
        let any = v.contains(&7) as u32;
        let odd = (0..32)
            .filter(|&l| v[l] & 1 != 0)
            .fold(0u32, |b, l| b | 1 << l);
        for l in 0..32usize {
            let o = &out[(w * 32 + l) * 8..(w * 32 + l) * 8 + 8];
            let up = if l >= 3 { v[l - 3] } else { v[l] };
            let down8 = if l % 8 + 2 < 8 { v[l + 2] } else { v[l] };
            let want = [
                ballot,
                all,
                any,
                up as u32,
                v[l ^ 5] as u32,
                v[(l * 7) & 31] as u32,
                down8 as u32,
                if v[l] & 1 != 0 { odd } else { 0 },
            ];
            assert_eq!(o, want, "warp {w} lane {l}");
        }
    }
}

#[test]
fn histogram_with_shared_and_global_atomics() {
    let m = kernel("histogram");
    let mut g = m.globals();
    let n = 5000usize;
    let mut r = Rng(7);
    let data: Vec<u8> = (0..n).map(|_| (r.next() % 256) as u8).collect();
    let mut mem = VecMemory::default();
    let pdata = mem.alloc(data.clone());
    let pbins = mem.alloc_u32(&[0; 256]);
    launch(
        &m,
        &mut g,
        "histogram",
        dims([4, 1, 1], [96, 1, 1], 0),
        Params::new().ptr(pdata).u32(n as u32).ptr(pbins),
        &mut mem,
    )
    .unwrap();
    let mut want = [0u32; 256];
    for &d in &data {
        want[d as usize] += 1;
    }
    assert_eq!(mem.u32s(pbins), want);
}

#[test]
fn global_atomics_of_every_kind() {
    let m = kernel("histogram");
    let mut g = m.globals();
    let threads = 64i32;
    let mut mem = VecMemory::default();
    let ints = mem.alloc_i32(&[-1000, 1000, -1, 0, 0x5a5a]);
    let u64s = mem.alloc_u64(&[5, 0]);
    let f = mem.alloc_f32(&[1.0]);
    let d = mem.alloc_f64(&[2.0]);
    let ctr = mem.alloc_u32(&[0, 0, 999]);
    launch(
        &m,
        &mut g,
        "atomics",
        dims([2, 1, 1], [32, 1, 1], 0),
        Params::new().ptr(ints).ptr(u64s).ptr(f).ptr(d).ptr(ctr),
        &mut mem,
    )
    .unwrap();
    let ts = 0..threads;
    let and = ts.clone().fold(-1i32, |a, t| a & !(1 << (t % 31)));
    let or = ts.clone().fold(0i32, |a, t| a | 1 << (t % 31));
    let xor = ts.clone().fold(0x5a5a, |a, t| a ^ t);
    assert_eq!(
        mem.i32s(ints),
        [(threads - 1) * 3 - 50, 100 - (threads - 1), and, or, xor]
    );
    let sum = ts
        .clone()
        .fold(5u64, |a, t| a.wrapping_add(t as u64 * 1_000_000_007));
    let u = mem.u64s(u64s);
    assert_eq!(u[0], sum);
    assert!((1..=threads as u64).contains(&u[1]), "cas stored {}", u[1]);
    assert_eq!(mem.f32s(f), [1.0 + 0.5 * threads as f32]);
    assert_eq!(mem.f64s(d), [2.0 + 0.25 * f64::from(threads)]);
    let c = mem.u32s(ctr);
    assert_eq!(c[0], threads as u32 % 10);
    assert_eq!(c[1], (6 - threads as u32 % 6) % 6);
    assert!(c[2] < threads as u32);
}

#[test]
fn hillis_steele_inclusive_scan() {
    let m = kernel("scan");
    let mut g = m.globals();
    let n = 256usize;
    let mut r = Rng(8);
    let input: Vec<i32> = (0..n).map(|_| (r.next() % 1000) as i32 - 500).collect();
    let mut mem = VecMemory::default();
    let pin = mem.alloc_i32(&input);
    let pout = mem.alloc_i32(&vec![0; n]);
    launch(
        &m,
        &mut g,
        "scan_hillis",
        dims([1, 1, 1], [n as u32, 1, 1], 2 * n as u32 * 4),
        Params::new().ptr(pin).ptr(pout).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let want: Vec<i32> = input
        .iter()
        .scan(0i32, |s, &v| {
            *s = s.wrapping_add(v);
            Some(*s)
        })
        .collect();
    assert_eq!(mem.i32s(pout), want);
}

/// A scan whose every step has two barriers and no divergent thread,
/// over many blocks of several warps (the barrier path a warp takes
/// most often), both engines, against the CPU block by block.
#[test]
fn padded_scan_of_many_blocks() {
    let m = kernel("scan");
    let (blocks, threads) = (37usize, 256usize);
    let mut r = Rng(10);
    let input: Vec<i32> = (0..blocks * threads).map(|_| r.next() as i32).collect();
    let want: Vec<i32> = input
        .chunks(threads)
        .flat_map(|b| {
            b.iter().scan(0i32, |s, &v| {
                *s = s.wrapping_add(v);
                Some(*s)
            })
        })
        .collect();
    for simd in [true, false] {
        let mut mem = VecMemory::default();
        let pin = mem.alloc_i32(&input);
        let pout = mem.alloc_i32(&vec![0; input.len()]);
        let lim = Limits {
            host_simd: simd,
            ..Limits::default()
        };
        let d = dims(
            [blocks as u32, 1, 1],
            [threads as u32, 1, 1],
            2 * threads as u32 * 4,
        );
        let p = Params::new().ptr(pin).ptr(pout);
        m.run(&mut m.globals(), "scan_padded", &d, &p.0, &mut mem, &lim)
            .unwrap();
        assert_eq!(mem.i32s(pout), want, "host_simd {simd}");
    }
}

#[test]
fn blelloch_exclusive_scan() {
    let m = kernel("scan");
    let mut g = m.globals();
    let n = 512usize;
    let mut r = Rng(9);
    let input: Vec<i32> = (0..n).map(|_| (r.next() % 1000) as i32).collect();
    let mut mem = VecMemory::default();
    let pin = mem.alloc_i32(&input);
    let pout = mem.alloc_i32(&vec![0; n]);
    launch(
        &m,
        &mut g,
        "scan_blelloch",
        dims([1, 1, 1], [n as u32 / 2, 1, 1], n as u32 * 4),
        Params::new().ptr(pin).ptr(pout).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let mut s = 0;
    let want: Vec<i32> = input
        .iter()
        .map(|&v| {
            let e = s;
            s += v;
            e
        })
        .collect();
    assert_eq!(mem.i32s(pout), want);
}

/// `struct Affine` of structarg.cu as the driver passes it: 32 bytes,
/// aligned to 8.
fn affine(scale: f32, shift: f32, stride: i32, bias: f64, tag: u8) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&scale.to_le_bytes());
    v.extend_from_slice(&shift.to_le_bytes());
    v.extend_from_slice(&stride.to_le_bytes());
    v.extend_from_slice(&[0; 4]);
    v.extend_from_slice(&bias.to_le_bytes());
    v.push(tag);
    v.resize(32, 0);
    v
}

#[test]
fn struct_by_value_and_module_variables() {
    let m = kernel("structarg");
    let mut g = m.globals();
    let n = 100usize;
    let stride = 3;
    let mut r = Rng(10);
    let input: Vec<f32> = (0..n * stride).map(|_| r.f32()).collect();
    let (scale, shift, bias, tag) = (1.5f32, -0.25f32, 0.125f64, 200u8);
    let mut mem = VecMemory::default();
    let pin = mem.alloc_f32(&input);
    let pout = mem.alloc_f64(&vec![0.0; n]);
    let counter = mem.alloc_u32(&[0]);
    let coeffs = [1.0f32, 0.5, 0.25, 0.125];
    let table = [3, 1, 4, 1, 5, 9, 2, 6];
    for _ in 0..2 {
        launch(
            &m,
            &mut g,
            "affine",
            dims([2, 1, 1], [64, 1, 1], 0),
            Params::new()
                .bytes(&affine(scale, shift, stride as i32, bias, tag), 8)
                .ptr(pin)
                .ptr(pout)
                .i32(n as i32),
            &mut mem,
        )
        .unwrap();
    }
    let out = mem.f64s(pout);
    for i in 0..n {
        let x = scale.mul_add(input[i * stride], shift) * coeffs[i & 3];
        let want = ((f64::from(x) + bias) + f64::from(tag)) + f64::from(table[i & 7]);
        assert_eq!(out[i].to_bits(), want.to_bits(), "{i}");
    }
    // `launches` counts both launches and persists in the globals.
    let read = |g: &mut fairgpu_ptx::Globals, mem: &mut VecMemory| {
        launch(
            &m,
            g,
            "read_launches",
            dims([1, 1, 1], [1, 1, 1], 0),
            Params::new().ptr(counter),
            mem,
        )
        .unwrap();
        mem.u32s(counter)[0]
    };
    assert_eq!(read(&mut g, &mut mem), 2);
    // Host writes to a variable (cudaMemcpyToSymbol) are what kernels see.
    let (addr, size) = g.symbol("launches").unwrap();
    assert_eq!(size, 4);
    g.write(addr, &41u32.to_le_bytes()).unwrap();
    assert_eq!(read(&mut g, &mut mem), 41);
    let (caddr, csize) = g.symbol("coeffs").unwrap();
    assert_eq!(csize, 16);
    let mut buf = [0u8; 16];
    g.read(caddr, &mut buf).unwrap();
    assert_eq!(&buf[4..8], &0.5f32.to_le_bytes());
    // The last variable ends the window.
    let (taddr, tsize) = g.symbol("table").unwrap();
    assert!(g.write(taddr + tsize - 4, &[0; 8]).is_err());
    assert!(g.write(taddr + tsize - 4, &[0; 4]).is_ok());
    // Fresh globals start from the initializers again.
    assert_eq!(read(&mut m.globals(), &mut mem), 0);
}

#[test]
fn double_precision() {
    let m = kernel("fp64");
    let mut g = m.globals();
    let n = 200usize;
    let mut r = Rng(11);
    let x: Vec<f64> = (0..n)
        .map(|_| (r.next() % 2_000_000) as f64 / 1000.0 - 1000.0)
        .collect();
    let mut mem = VecMemory::default();
    let px = mem.alloc_f64(&x);
    let py = mem.alloc_f64(&vec![0.0; 4 * n]);
    let pf = mem.alloc_f32(&vec![0.0; n]);
    let pi = mem.alloc_u64(&vec![0; n]);
    launch(
        &m,
        &mut g,
        "fp64",
        dims([2, 1, 1], [128, 1, 1], 0),
        Params::new().ptr(px).ptr(py).ptr(pf).ptr(pi).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let (y, yf, yi) = (mem.f64s(py), mem.f32s(pf), mem.u64s(pi));
    for i in 0..n {
        let v = x[i];
        let mut acc = 0.0f64;
        for k in 0..5 {
            acc = acc.mul_add(v, f64::from(k));
        }
        let want = [
            acc,
            v / v.mul_add(v, 1.0),
            v.abs().sqrt(),
            v.min(0.5) + v.max(-0.5),
        ];
        for k in 0..4 {
            assert_eq!(y[4 * i + k].to_bits(), want[k].to_bits(), "{i}.{k}");
        }
        assert_eq!(yf[i].to_bits(), (v as f32).to_bits());
        assert_eq!(yi[i] as i64, (v * 1000.0) as i64);
    }
}

/// Rounds the exact value `x` (an f64 that holds it exactly) to f32 toward
/// zero or downward: a reference independent of the interpreter's.
fn f32_toward(x: f64, down: bool) -> f32 {
    let r = x as f32;
    let too_far = if down {
        f64::from(r) > x
    } else {
        f64::from(r).abs() > x.abs()
    };
    if !too_far {
        r
    } else if down || x > 0.0 {
        r.next_down()
    } else {
        r.next_up()
    }
}

#[test]
fn single_precision_rounding_modes() {
    let m = kernel("fp64");
    let mut g = m.globals();
    let n = 300usize;
    let mut r = Rng(12);
    let mut x: Vec<f32> = (0..n).map(|_| r.f32() * 3.7).collect();
    x[0] = 2.5;
    x[1] = -2.5;
    x[2] = 0.5;
    x[3] = -0.0;
    let mut mem = VecMemory::default();
    let px = mem.alloc_f32(&x);
    let py = mem.alloc_f32(&vec![0.0; 8 * n]);
    let pi = mem.alloc_i32(&vec![0; 2 * n]);
    launch(
        &m,
        &mut g,
        "fp32",
        dims([3, 1, 1], [128, 1, 1], 0),
        Params::new().ptr(px).ptr(py).ptr(pi).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let (y, yi) = (mem.f32s(py), mem.i32s(pi));
    for i in 0..n {
        let v = x[i];
        let want = [
            v / 3.0,
            v.abs().sqrt(),
            f32_toward(f64::from(v) * f64::from(1.1f32), false),
            f32_toward(f64::from(v) + f64::from(0.3f32), true),
            v.round_ties_even(),
            (v.floor() + v.ceil()) + v.trunc(),
            f32_toward(f64::from(i as i32 * 123_457), false),
            v.min(1.0) * v.max(-1.0),
        ];
        for k in 0..8 {
            assert_eq!(y[8 * i + k].to_bits(), want[k].to_bits(), "{i}.{k} of {v}");
        }
        assert_eq!(yi[2 * i], v.round_ties_even() as i32, "{i}");
        assert_eq!(yi[2 * i + 1], (v * 100.0) as u32 as i32, "{i}");
    }
}

fn byte_perm(x: u32, y: u32, s: u32) -> u32 {
    let src = u64::from(x) | u64::from(y) << 32;
    (0..4).fold(0, |r, i| {
        let sel = (s >> (4 * i)) & 7;
        r | (((src >> (8 * sel)) & 0xff) as u32) << (8 * i)
    })
}

#[test]
fn integer_operations() {
    let m = kernel("intops");
    let mut g = m.globals();
    let n = 256usize;
    let mut r = Rng(13);
    let mut a: Vec<i32> = (0..n).map(|_| r.next() as i32).collect();
    let mut b: Vec<i32> = (0..n).map(|_| r.next() as i32 >> (r.next() % 31)).collect();
    a[0] = 0;
    b[1] = 0;
    a[2] = i32::MIN;
    b[2] = 3;
    a[3] = -7;
    b[3] = 2;
    b[4] = -1;
    let mut mem = VecMemory::default();
    let (pa, pb) = (mem.alloc_i32(&a), mem.alloc_i32(&b));
    let po = mem.alloc_i32(&vec![0; 16 * n]);
    let p64 = mem.alloc_u64(&vec![0; 4 * n]);
    launch(
        &m,
        &mut g,
        "intops",
        dims([2, 1, 1], [128, 1, 1], 0),
        Params::new().ptr(pa).ptr(pb).ptr(po).ptr(p64).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let (o, o64) = (mem.i32s(po), mem.u64s(p64));
    for i in 0..n {
        let (x, y) = (a[i], b[i]);
        let (ux, uy) = (x as u32, y as u32);
        let sad = if x < y {
            (i64::from(y) - i64::from(x)) as u32
        } else {
            (i64::from(x) - i64::from(y)) as u32
        };
        let want = [
            if y != 0 { x.wrapping_div(y) } else { 0 },
            if y != 0 { x.wrapping_rem(y) } else { 0 },
            ux.checked_div(uy).unwrap_or(0) as i32,
            if uy != 0 { (ux % uy) as i32 } else { 0 },
            ((i64::from(x) * i64::from(y)) >> 32) as i32,
            ((u64::from(ux) * u64::from(uy)) >> 32) as i32,
            ux.count_ones() as i32,
            x.leading_zeros() as i32,
            ux.reverse_bits() as i32,
            if x == 0 {
                0
            } else {
                x.trailing_zeros() as i32 + 1
            },
            (x >> (y & 31)) ^ (ux >> (uy & 31)) as i32,
            byte_perm(ux, uy, 0x5140) as i32,
            x.min(y).wrapping_add(x.max(y).wrapping_mul(3)),
            x.wrapping_abs().wrapping_sub(ux.min(uy) as i32),
            (x << 3) | (y & 0xff0f),
            (((ux >> 5) & 0x3ff) as i32).wrapping_add(sad.wrapping_add(7) as i32),
        ];
        assert_eq!(&o[16 * i..16 * i + 16], want, "{i}: {x} {y}");
        let (lx, ly) = (i64::from(x), i64::from(y));
        let want64 = [
            lx * ly,
            if ly != 0 { (lx * 977) / ly } else { -1 },
            ((lx * 31) as u64 % 1_000_003) as i64,
            i64::from(((lx * ly) as u64).count_ones()) + i64::from(lx.leading_zeros()),
        ];
        let got: Vec<i64> = o64[4 * i..4 * i + 4].iter().map(|&v| v as i64).collect();
        assert_eq!(got, want64, "{i}: {x} {y}");
    }
}

#[test]
fn local_array_indexed_dynamically() {
    let m = kernel("localarr");
    let mut g = m.globals();
    let n = 100usize;
    let mut r = Rng(14);
    let input: Vec<i32> = (0..n).map(|_| (r.next() % 100_000) as i32).collect();
    let mut mem = VecMemory::default();
    let pin = mem.alloc_i32(&input);
    let pout = mem.alloc_i32(&vec![0; n]);
    launch(
        &m,
        &mut g,
        "localarr",
        dims([2, 1, 1], [64, 1, 1], 0),
        Params::new().ptr(pin).ptr(pout).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let out = mem.i32s(pout);
    for i in 0..n {
        let mut a = [0i32; 32];
        for (k, x) in a.iter_mut().enumerate() {
            *x = input[(i + k) % n].wrapping_mul(k as i32 + 1);
        }
        let mut s = 0i32;
        let mut j = i % 32;
        for k in 0..64 {
            s = s.wrapping_add(a[j]);
            j = (j * 5 + 3) % 32;
            a[(j + k) % 32] ^= s;
        }
        assert_eq!(out[i], s, "{i}");
    }
}

fn collatz(mut x: u64, limit: i32) -> i32 {
    let mut steps = 0;
    while x != 1 && steps < limit {
        x = if x & 1 == 1 { 3 * x + 1 } else { x / 2 };
        steps += 1;
    }
    steps
}

#[test]
fn device_function_calls_are_inlined() {
    let m = kernel("calls");
    let mut g = m.globals();
    let n = 300usize;
    let coef = [0.5f32, -1.25, 2.0, 0.75, -0.125, 3.5, -2.25, 1.0];
    let mut mem = VecMemory::default();
    let pc = mem.alloc_f32(&coef);
    let ps = mem.alloc_i32(&vec![0; n]);
    let pv = mem.alloc_f32(&vec![0.0; n]);
    launch(
        &m,
        &mut g,
        "calls",
        dims([3, 1, 1], [128, 1, 1], 0),
        Params::new().ptr(pc).ptr(ps).ptr(pv).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let (steps, vals) = (mem.i32s(ps), mem.f32s(pv));
    for i in 0..n {
        assert_eq!(steps[i], collatz(i as u64 + 1, 500), "{i}");
        let (cn, x) = if i & 1 == 1 {
            (8, i as f32 * 0.01)
        } else {
            (i % 8, i as f32 * -0.01)
        };
        let buf: Vec<f32> = (0..8).map(|k| if k < cn { coef[k] } else { 0.0 }).collect();
        let mut acc = 0.0f32;
        for k in (0..8).rev() {
            acc = acc.mul_add(x, buf[(k * 3) & 7]);
        }
        assert_eq!(vals[i].to_bits(), acc.to_bits(), "{i}");
    }
}

#[test]
fn double_sine_with_its_argument_reduction_call() {
    let m = kernel("calls");
    let mut g = m.globals();
    let mut x: Vec<f64> = (0..200).map(|i| f64::from(i) * 0.37 - 30.0).collect();
    x.extend([
        1e6, 12345678.9, 1e10, 3e15, 1e22, 1e100, 1e300, -7e200, 0.0, -0.0,
    ]);
    let n = x.len();
    let mut mem = VecMemory::default();
    let px = mem.alloc_f64(&x);
    let py = mem.alloc_f64(&vec![0.0; n]);
    launch(
        &m,
        &mut g,
        "dsin",
        dims([2, 1, 1], [128, 1, 1], 0),
        Params::new().ptr(px).ptr(py).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let y = mem.f64s(py);
    for i in 0..n {
        // CUDA's sin is within 2 ulp of the true value, as is the host's.
        let want = x[i].sin();
        let ulp = (want.abs().max(f64::MIN_POSITIVE) * f64::EPSILON).max(f64::from_bits(1));
        assert!(
            (y[i] - want).abs() <= 4.0 * ulp,
            "sin({}) = {} on the interpreter, {} on the host",
            x[i],
            y[i],
            want
        );
    }
}

#[test]
fn reducing_barriers() {
    let m = kernel("barred");
    let mut g = m.globals();
    let (blocks, block) = (3usize, 96usize);
    let mut r = Rng(15);
    let mut input: Vec<i32> = (0..blocks * block)
        .map(|_| (r.next() % 200) as i32 - 40)
        .collect();
    input[7] = -60;
    for v in &mut input[block..] {
        *v = v.abs().min(41);
    }
    input[block + 5] = 42;
    let mut mem = VecMemory::default();
    let pin = mem.alloc_i32(&input);
    let pout = mem.alloc_i32(&vec![0; 3 * blocks * block]);
    launch(
        &m,
        &mut g,
        "barred",
        dims([blocks as u32, 1, 1], [block as u32, 1, 1], 0),
        Params::new().ptr(pin).ptr(pout),
        &mut mem,
    )
    .unwrap();
    let out = mem.i32s(pout);
    for b in 0..blocks {
        let v = &input[b * block..(b + 1) * block];
        let want = [
            v.iter().filter(|&&x| x > 0).count() as i32,
            v.iter().all(|&x| x > -50) as i32,
            v.contains(&42) as i32,
        ];
        for t in 0..block {
            let i = b * block + t;
            assert_eq!(out[3 * i..3 * i + 3], want, "block {b} thread {t}");
        }
    }
}

#[test]
fn async_copies_to_shared_memory() {
    let m = kernel("cpasync");
    let mut g = m.globals();
    let n = 100usize;
    let mut r = Rng(16);
    let input: Vec<i32> = (0..4 * n).map(|_| (r.next() % 1000) as i32).collect();
    let mut mem = VecMemory::default();
    let pin = mem.alloc_i32(&input);
    let pout = mem.alloc_i32(&vec![0; 128]);
    launch(
        &m,
        &mut g,
        "cpasync",
        dims([2, 1, 1], [64, 1, 1], 0),
        Params::new().ptr(pin).ptr(pout).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let out = mem.i32s(pout);
    for i in 0..128 {
        let (b, t) = (i / 64, i % 64);
        let j = b * 64 + 63 - t;
        let v: [i32; 4] = if j < n {
            input[4 * j..4 * j + 4].try_into().unwrap()
        } else {
            // Only the first 4 bytes (of element 0) are copied.
            [input[0], 0, 0, 0]
        };
        assert_eq!(out[i], v[0] + 2 * v[1] + 3 * v[2] + 4 * v[3], "{i}");
    }
}

/// An f16 as an integer number of 2^-24 (every f16 is one).
fn f16_units(h: u16) -> i128 {
    let e = i128::from((h >> 10) & 0x1f);
    let m = i128::from(h & 0x3ff);
    let mag = if e == 0 { m } else { (m | 0x400) << (e - 1) };
    if h & 0x8000 != 0 {
        -mag
    } else {
        mag
    }
}

/// Rounds `v` (in units of 2^-48) to the nearest f16, ties to even, by
/// search over every non-negative f16 (65536 standing in for infinity).
fn f16_nearest(v: i128) -> u16 {
    let mag = v.abs();
    let grid = |h: u16| {
        if h == 0x7c00 {
            65536i128 << 48
        } else {
            f16_units(h) << 24
        }
    };
    let (mut lo, mut hi) = (0u16, 0x7c00u16);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if grid(mid) <= mag {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let h = if mag >= grid(hi) {
        hi
    } else {
        let (dl, dh) = (mag - grid(lo), grid(hi) - mag);
        if dl < dh || (dl == dh && lo & 1 == 0) {
            lo
        } else {
            hi
        }
    };
    if v < 0 {
        h | 0x8000
    } else {
        h
    }
}

/// `f16_nearest` of an exact sum of terms with signs `sa` and `sb`: an
/// exact zero is -0 only when both terms are negative (round to nearest).
fn f16_sum(v: i128, sa: bool, sb: bool) -> u16 {
    if v == 0 && sa && sb {
        0x8000
    } else {
        f16_nearest(v)
    }
}

fn f16_of(x: f32) -> u16 {
    // x is a multiple of 2^-24 below 2^15 in the tests: exact in units.
    f16_nearest((f64::from(x) * 2f64.powi(48)) as i128)
}

#[test]
fn half_precision_arithmetic() {
    let m = kernel("half");
    let mut g = m.globals();
    let n = 300usize;
    let mut r = Rng(17);
    let mut a: Vec<u16> = (0..n).map(|_| f16_of(r.f32() * 7.3)).collect();
    let mut b: Vec<u16> = (0..n).map(|_| f16_of(r.f32() * 0.37)).collect();
    // Subnormals, signed zeros, large values and a tie.
    a[..6].copy_from_slice(&[0x0001, 0x8000, 0x7bff, 0x3c00, 0x0000, 0x3c01]);
    b[..6].copy_from_slice(&[0x0003, 0x0000, 0x7bff, 0x1400, 0x8000, 0x3c00]);
    let mut mem = VecMemory::default();
    let bytes = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let pa = mem.alloc(bytes(&a));
    let pb = mem.alloc(bytes(&b));
    let po = mem.alloc(vec![0; 16 * n]);
    launch(
        &m,
        &mut g,
        "half_ops",
        dims([3, 1, 1], [128, 1, 1], 0),
        Params::new().ptr(pa).ptr(pb).ptr(po).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let out: Vec<u16> = mem
        .bytes(po)
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let tenth = f16_of(0.1);
    let sat = |h: u16| {
        let v = f16_units(h);
        if v <= 0 {
            0
        } else if v >= 1 << 24 {
            0x3c00
        } else {
            h
        }
    };
    for i in 0..n {
        let (x, y) = (a[i], b[i]);
        let (ux, uy, ut) = (f16_units(x), f16_units(y), f16_units(tenth));
        let (sx, sy) = (x & 0x8000 != 0, y & 0x8000 != 0);
        let fma = f16_sum(ux * uy + (ut << 24), sx != sy, false);
        let max = if ux > uy || (ux == uy && x & 0x8000 == 0) {
            x
        } else {
            y
        };
        let min = if ux < uy || (ux == uy && x & 0x8000 != 0) {
            x
        } else {
            y
        };
        let want = [
            f16_sum((ux + uy) << 24, sx, sy),
            f16_sum((ux - uy) << 24, sx, !sy),
            if ux * uy == 0 {
                u16::from(sx != sy) << 15
            } else {
                f16_nearest(ux * uy)
            },
            fma,
            max,
            min,
            if ux < uy { x ^ 0x8000 } else { y & 0x7fff },
            sat(fma),
        ];
        assert_eq!(out[8 * i..8 * i + 8], want, "{i}: {x:#x} {y:#x}");
    }
}

#[test]
fn packed_half_precision_arithmetic() {
    let m = kernel("half");
    let mut g = m.globals();
    let n = 200usize;
    let mut r = Rng(18);
    let pair =
        |r: &mut Rng, s: f32| u32::from(f16_of(r.f32() * s)) | u32::from(f16_of(r.f32() * s)) << 16;
    let a: Vec<u32> = (0..n).map(|_| pair(&mut r, 3.0)).collect();
    let b: Vec<u32> = (0..n).map(|_| pair(&mut r, 0.9)).collect();
    let mut mem = VecMemory::default();
    let (pa, pb) = (mem.alloc_u32(&a), mem.alloc_u32(&b));
    let po = mem.alloc_u32(&vec![0; 2 * n]);
    launch(
        &m,
        &mut g,
        "half2_ops",
        dims([2, 1, 1], [128, 1, 1], 0),
        Params::new().ptr(pa).ptr(pb).ptr(po).i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let out = mem.u32s(po);
    for i in 0..n {
        let mut want = [0u32; 2];
        for h in 0..2 {
            let part = |v: u32| (v >> (16 * h)) as u16;
            let (ux, uy) = (f16_units(part(a[i])), f16_units(part(b[i])));
            let sq = f16_nearest(ux * ux);
            let fma = f16_nearest(ux * uy + (f16_units(sq) << 24));
            let sum = f16_nearest((ux + uy) << 24);
            let diff = f16_nearest((f16_units(sum) - f16_units(sq)) << 24);
            want[0] |= u32::from(fma) << (16 * h);
            want[1] |= u32::from(diff) << (16 * h);
        }
        assert_eq!(out[2 * i..2 * i + 2], want, "{i}");
    }
}

/// `printf` in a kernel (nvcc's `vprintf` call): each thread's line, with
/// its conversions formatted as the C library formats them, in the
/// launch's output; nothing printed beyond the output's limit.
#[test]
fn printf_writes_each_threads_line() {
    let m = kernel("prints");
    let mut g = m.globals();
    let v: Vec<u32> = vec![3, 10, 7, 0];
    let mut mem = VecMemory::default();
    let pv = mem.alloc_u32(&v);
    let p = Params::new().ptr(pv).i32(4);
    let mut out = Vec::new();
    m.run_with_output(
        &mut g,
        "prints",
        &dims([2, 1, 1], [2, 1, 1], 0),
        &p.0,
        &mut mem,
        &Limits::default(),
        &mut out,
        1 << 20,
    )
    .expect("runs");
    let records = fairgpu_ptx::output_records(&out);
    assert!(records.iter().all(|(s, _)| *s == fairgpu_ptx::STDOUT));
    let text: String = records
        .iter()
        .map(|(_, t)| String::from_utf8_lossy(t).into_owned())
        .collect();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    let want = |t: u32, b: u32, x: u32| {
        let i = b * 2 + t;
        format!(
            "thread {t} of block {b}: v={x} {:5.2} {}|{}|{}|{x:x}",
            f64::from(x) * 0.5,
            if i % 2 == 1 { "odd" } else { "even" },
            char::from(b'A' + i as u8),
            i64::from(x) << 33
        )
    };
    let mut expected = vec![want(0, 0, 3), want(1, 0, 10), want(0, 1, 7), want(1, 1, 0)];
    expected.sort_unstable();
    assert_eq!(lines, expected);
    // A limit shorter than one line drops them all.
    let mut small = Vec::new();
    m.run_with_output(
        &mut g,
        "prints",
        &dims([1, 1, 1], [1, 1, 1], 0),
        &p.0,
        &mut mem,
        &Limits::default(),
        &mut small,
        10,
    )
    .expect("runs");
    assert!(small.is_empty());
}

/// `assert` in a kernel (nvcc's `__assertfail`): the runtime's message for
/// each failing thread, then the launch fails with `Error::Assert`.
#[test]
fn a_failed_assert_prints_and_stops_the_launch() {
    let m = kernel("prints");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let ok = mem.alloc_u32(&[1, 2, 3, 4]);
    let mut out = Vec::new();
    let run = |mem: &mut VecMemory, g: &mut fairgpu_ptx::Globals, out: &mut Vec<u8>, v| {
        m.run_with_output(
            g,
            "checks",
            &dims([1, 1, 1], [4, 1, 1], 0),
            &Params::new().ptr(v).i32(4).0,
            mem,
            &Limits::default(),
            out,
            1 << 20,
        )
    };
    run(&mut mem, &mut g, &mut out, ok).expect("no assertion fails");
    assert!(out.is_empty());
    let bad = mem.alloc_u32(&[1, (-5i32) as u32, 3, 4]);
    assert_eq!(run(&mut mem, &mut g, &mut out, bad), Err(Error::Assert));
    let records = fairgpu_ptx::output_records(&out);
    assert_eq!(records.len(), 1, "one failing thread: {records:?}");
    assert_eq!(records[0].0, fairgpu_ptx::STDERR, "asserts print to stderr");
    let text = String::from_utf8_lossy(records[0].1).into_owned();
    assert!(
        text.contains("prints.cu:")
            && text.contains("block: [0,0,0], thread: [1,0,0] Assertion `v[i] >= 0` failed."),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn warp_synchronous_code_sees_its_warp_in_lockstep() {
    // No __syncwarp between the network's steps: the threads that skip a
    // swap must wait at the branch's join for the threads that take it,
    // wherever a warp's turn ends. Many segments, so that turns end inside
    // many of the swaps.
    let m = kernel("lockstep");
    let mut g = m.globals();
    let (blocks, threads, segments) = (2usize, 64usize, 3000usize);
    let mut r = Rng(11);
    let keys: Vec<i32> = (0..segments * 64)
        .map(|_| (r.next() % 100_000) as i32 - 50_000)
        .collect();
    let mut mem = VecMemory::default();
    let p = mem.alloc_i32(&keys);
    launch(
        &m,
        &mut g,
        "warp_bitonic",
        dims([blocks as u32, 1, 1], [threads as u32, 1, 1], 0),
        Params::new().ptr(p).i32(segments as i32),
        &mut mem,
    )
    .unwrap();
    let got = mem.i32s(p);
    for (s, (got, keys)) in got.chunks(64).zip(keys.chunks(64)).enumerate() {
        let mut want = keys.to_vec();
        want.sort_unstable();
        assert_eq!(got, &want[..], "segment {s}'s keys");
    }
}

#[test]
fn products_used_once_by_a_subtraction_are_fused_as_ptxas_fuses_them() {
    // `x - floor(x / y) * y` and `x * z - y` as one rounding (ptxas's
    // FMA), and through the `_rn` intrinsics as two. For 5.5 and 1.1 the
    // fused difference is just below zero (CuPy then adds 1.1, NumPy's
    // remainder), the unfused one zero.
    let m = kernel("contract");
    let mut g = m.globals();
    let mut r = Rng(5);
    let mut x: Vec<f64> = vec![5.5, 1e10 + 0.3, -255.6];
    let mut y: Vec<f64> = vec![1.1, 0.9, 1.2];
    for _ in 0..61 {
        x.push(f64::from(r.f32()) * 1.37 + 0.1);
        y.push(f64::from(r.f32()).abs() * 0.31 + 0.07);
    }
    let n = x.len();
    let z: Vec<f64> = (0..n).map(|i| 1.0 + i as f64 / 7.0).collect();
    let fx: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let fy: Vec<f32> = y.iter().map(|&v| v as f32).collect();
    let mut mem = VecMemory::default();
    let (px, py, pz) = (mem.alloc_f64(&x), mem.alloc_f64(&y), mem.alloc_f64(&z));
    let out = mem.alloc_f64(&vec![0.0; 4 * n]);
    let (pfx, pfy) = (mem.alloc_f32(&fx), mem.alloc_f32(&fy));
    let fout = mem.alloc_f32(&vec![0.0; 2 * n]);
    launch(
        &m,
        &mut g,
        "remainders",
        dims([1, 1, 1], [64, 1, 1], 0),
        Params::new()
            .ptr(px)
            .ptr(py)
            .ptr(pz)
            .ptr(out)
            .ptr(pfx)
            .ptr(pfy)
            .ptr(fout)
            .i32(n as i32),
        &mut mem,
    )
    .unwrap();
    let (got, fgot) = (mem.f64s(out), mem.f32s(fout));
    for i in 0..n {
        let q = (x[i] / y[i]).floor();
        let want = [
            (-q).mul_add(y[i], x[i]),
            x[i] - q * y[i],
            x[i].mul_add(z[i], -y[i]),
            x[i] * z[i] - y[i],
        ];
        for (c, w) in want.iter().enumerate() {
            assert_eq!(
                got[4 * i + c].to_bits(),
                w.to_bits(),
                "element {i}, form {c}"
            );
        }
        let fq = (fx[i] / fy[i]).floor();
        let fwant = [(-fq).mul_add(fy[i], fx[i]), fx[i] - fq * fy[i]];
        for (c, w) in fwant.iter().enumerate() {
            assert_eq!(
                fgot[2 * i + c].to_bits(),
                w.to_bits(),
                "f32 element {i}, form {c}"
            );
        }
    }
    assert!(got[0] < 0.0, "5.5 mod 1.1 fused: {}", got[0]);
    assert_eq!(got[1], 0.0, "5.5 mod 1.1 unfused");
}
