//! Tensor-core products through the wmma API (`tests/kernels/wmma.cu`,
//! built by nvcc 13): each shape and type nvcc emits for sm_80 against a
//! CPU reference computed as the interpreter defines it (exact products,
//! one rounding to the accumulator's type).

mod common;

use common::*;

fn f16(x: f32) -> u16 {
    // Test values are exact in f16: small integers and halves.
    let h = half_bits(x);
    assert_eq!(f16_value(h), x, "{x} is not exact in f16");
    h
}

/// f16 encoding of `x` (normal, exactly representable values only).
fn half_bits(x: f32) -> u16 {
    if x == 0.0 {
        return 0;
    }
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
    let man = ((b >> 13) & 0x3ff) as u16;
    sign | ((exp as u16) << 10) | man
}

fn f16_value(h: u16) -> f32 {
    if h & 0x7fff == 0 {
        return 0.0;
    }
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32 - 15;
    let man = f32::from(h & 0x3ff) / 1024.0 + 1.0;
    sign * man * 2f32.powi(exp)
}

fn bytes_u16(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u16s(mem: &VecMemory, at: u64) -> Vec<u16> {
    mem.bytes(at)
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

/// Small values exact in every input type: (i % 7) - 3 halves.
fn vals(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|i| ((i * 5 + seed) % 7) as f32 * 0.5 - 1.5)
        .collect()
}

fn one_warp() -> fairgpu_ptx::Dims {
    dims([1, 1, 1], [32, 1, 1], 0)
}

#[test]
fn f16_inputs_f32_accumulator_scaled_between_load_and_product() {
    let m = kernel("wmma");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    // A row-major 16x16, B column-major 16x16, C row-major 16x16.
    let (a, b, c) = (vals(256, 1), vals(256, 2), vals(256, 3));
    let pa = mem.alloc(bytes_u16(&a.iter().map(|&x| f16(x)).collect::<Vec<_>>()));
    let pb = mem.alloc(bytes_u16(&b.iter().map(|&x| f16(x)).collect::<Vec<_>>()));
    let pc = mem.alloc_f32(&c);
    let pd = mem.alloc_f32(&[0.0; 256]);
    let p = Params::new().ptr(pa).ptr(pb).ptr(pc).ptr(pd);
    launch(&m, &mut g, "mma_f16_f32", one_warp(), p, &mut mem).unwrap();
    let d = mem.f32s(pd);
    for i in 0..16 {
        for j in 0..16 {
            let mut s = f64::from(c[i * 16 + j] * 0.5);
            for k in 0..16 {
                s += f64::from(a[i * 16 + k]) * f64::from(b[j * 16 + k]);
            }
            // D is stored column-major.
            assert_eq!(d[j * 16 + i], s as f32, "d[{i}][{j}]");
        }
    }
}

#[test]
fn f16_accumulator_32x8_with_a_leading_dimension() {
    let m = kernel("wmma");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    // A column-major 32x16, B row-major 16x8, C row-major 32x8.
    let (a, b, c) = (vals(512, 4), vals(128, 5), vals(256, 6));
    let h = |v: &[f32]| bytes_u16(&v.iter().map(|&x| f16(x)).collect::<Vec<_>>());
    let (pa, pb, pc) = (mem.alloc(h(&a)), mem.alloc(h(&b)), mem.alloc(h(&c)));
    let pd = mem.alloc(vec![0xee; 32 * 12 * 2]);
    let p = Params::new().ptr(pa).ptr(pb).ptr(pc).ptr(pd);
    launch(&m, &mut g, "mma_f16_f16", one_warp(), p, &mut mem).unwrap();
    let d = u16s(&mem, pd);
    for i in 0..32 {
        for j in 0..12 {
            if j >= 8 {
                assert_eq!(d[i * 12 + j], 0xeeee, "padding of row {i} was written");
                continue;
            }
            let mut s = c[i * 8 + j];
            for k in 0..16 {
                s += a[k * 32 + i] * b[k * 8 + j];
            }
            assert_eq!(f16_value(d[i * 12 + j]), s, "d[{i}][{j}]");
        }
    }
}

#[test]
fn bf16_8x32_from_a_filled_accumulator() {
    let m = kernel("wmma");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let (a, b) = (vals(8 * 16, 7), vals(16 * 32, 8));
    let bf = |v: &[f32]| {
        bytes_u16(
            &v.iter()
                .map(|&x| (x.to_bits() >> 16) as u16)
                .collect::<Vec<_>>(),
        )
    };
    let (pa, pb) = (mem.alloc(bf(&a)), mem.alloc(bf(&b)));
    let pd = mem.alloc_f32(&[0.0; 256]);
    let p = Params::new().ptr(pa).ptr(pb).ptr(pd);
    launch(&m, &mut g, "mma_bf16", one_warp(), p, &mut mem).unwrap();
    let d = mem.f32s(pd);
    for i in 0..8 {
        for j in 0..32 {
            let s: f32 = 1.0 + (0..16).map(|k| a[i * 16 + k] * b[k * 32 + j]).sum::<f32>();
            assert_eq!(d[i * 32 + j], s, "d[{i}][{j}]");
        }
    }
}

#[test]
fn tf32_inputs_are_rounded_by_cvt_rna() {
    let m = kernel("wmma");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    // Values with 11 fraction bits: every odd one is a tie between two
    // tf32 values, which cvt.rna rounds away from zero.
    let a: Vec<f32> = (0..128).map(|i| 1.0 + i as f32 / 2048.0).collect();
    let b: Vec<f32> = (0..128).map(|i| (i % 5) as f32 - 2.0).collect();
    let (pa, pb) = (mem.alloc_f32(&a), mem.alloc_f32(&b));
    let pd = mem.alloc_f32(&[0.0; 256]);
    let p = Params::new().ptr(pa).ptr(pb).ptr(pd);
    launch(&m, &mut g, "mma_tf32", one_warp(), p, &mut mem).unwrap();
    let d = mem.f32s(pd);
    let rna = |x: f32| f32::from_bits(x.to_bits().wrapping_add(0x1000) & !0x1fff);
    for i in 0..16 {
        for j in 0..16 {
            let s: f64 = (0..8)
                .map(|k| f64::from(rna(a[i * 8 + k])) * f64::from(rna(b[k * 16 + j])))
                .sum();
            assert_eq!(d[i * 16 + j], s as f32, "d[{i}][{j}]");
        }
    }
    // The reference's rounding: a tie goes up, less than half goes down.
    assert_eq!(rna(1.0 + 1.0 / 2048.0), 1.0 + 1.0 / 1024.0);
    assert_eq!(rna(1.0 + 3.0 / 2048.0), 1.0 + 2.0 / 1024.0);
    assert_eq!(rna(1.0 + 1.0 / 8192.0), 1.0);
}

#[test]
fn s8_products_accumulate_in_s32() {
    let m = kernel("wmma");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let a: Vec<i8> = (0..256).map(|i| ((i * 37) % 255 - 127) as i8).collect();
    let b: Vec<i8> = (0..256).map(|i| ((i * 91) % 251 - 125) as i8).collect();
    let c: Vec<i32> = (0..256).map(|i| i * 1000 - 100_000).collect();
    let pa = mem.alloc(a.iter().map(|&x| x as u8).collect());
    let pb = mem.alloc(b.iter().map(|&x| x as u8).collect());
    let pc = mem.alloc_i32(&c);
    let pd = mem.alloc_i32(&[0; 256]);
    let p = Params::new().ptr(pa).ptr(pb).ptr(pc).ptr(pd);
    launch(&m, &mut g, "mma_s8", one_warp(), p, &mut mem).unwrap();
    let d = mem.i32s(pd);
    for i in 0..16 {
        for j in 0..16 {
            // B is column-major.
            let s: i32 = c[i * 16 + j]
                + (0..16)
                    .map(|k| i32::from(a[i * 16 + k]) * i32::from(b[j * 16 + k]))
                    .sum::<i32>();
            assert_eq!(d[i * 16 + j], s, "d[{i}][{j}]");
        }
    }
}

#[test]
fn f64_products_are_fused_multiply_adds() {
    let m = kernel("wmma");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let a: Vec<f64> = (0..32).map(|i| (i as f64 + 0.1) / 3.0).collect();
    let b: Vec<f64> = (0..32).map(|i| 1.0 / (i as f64 + 1.7)).collect();
    let c: Vec<f64> = (0..64).map(|i| i as f64 * 0.01 - 0.3).collect();
    let (pa, pb, pc) = (mem.alloc_f64(&a), mem.alloc_f64(&b), mem.alloc_f64(&c));
    let pd = mem.alloc_f64(&[0.0; 64]);
    let p = Params::new().ptr(pa).ptr(pb).ptr(pc).ptr(pd);
    launch(&m, &mut g, "mma_f64", one_warp(), p, &mut mem).unwrap();
    let d = mem.f64s(pd);
    for i in 0..8 {
        for j in 0..8 {
            // A row-major 8x4, B column-major 4x8, C column-major.
            let mut s = c[j * 8 + i];
            for k in 0..4 {
                s = a[i * 4 + k].mul_add(b[j * 4 + k], s);
            }
            assert_eq!(d[i * 8 + j].to_bits(), s.to_bits(), "d[{i}][{j}]");
        }
    }
}

#[test]
fn wmma_by_part_of_a_warp_is_refused() {
    let m = kernel("wmma");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let pa = mem.alloc(vec![0; 512]);
    let pb = mem.alloc(vec![0; 512]);
    let pc = mem.alloc_f32(&[0.0; 256]);
    let pd = mem.alloc_f32(&[0.0; 256]);
    let p = Params::new().ptr(pa).ptr(pb).ptr(pc).ptr(pd);
    let e = launch(
        &m,
        &mut g,
        "mma_f16_f32",
        dims([1, 1, 1], [16, 1, 1], 0),
        p,
        &mut mem,
    )
    .unwrap_err();
    assert!(matches!(e, fairgpu_ptx::Error::Unsupported { .. }), "{e:?}");
}

/// f16 values k/256 for |k| < 512 (exact in f16), from a fixed sequence.
fn halves(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) % 1023) as f32 / 256.0 - 511.0 / 256.0
        })
        .collect()
}

#[test]
fn a_tile_staged_through_shared_memory_as_nvidia_s_gemm_stages_it() {
    let m = kernel("wmma");
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    // A 32x64 row-major, B 64x32 column-major (column j at j * 64), C
    // 32x32 row-major; D 32x32 row-major.
    let (a, b) = (halves(32 * 64, 1), halves(64 * 32, 2));
    let c: Vec<f32> = halves(32 * 32, 3).iter().map(|v| v * 3.0).collect();
    let h = |v: &[f32]| bytes_u16(&v.iter().map(|&x| f16(x)).collect::<Vec<_>>());
    let (pa, pb) = (mem.alloc(h(&a)), mem.alloc(h(&b)));
    let pc = mem.alloc_f32(&c);
    let pd = mem.alloc_f32(&[0.0; 1024]);
    let p = Params::new().ptr(pa).ptr(pb).ptr(pc).ptr(pd);
    launch(
        &m,
        &mut g,
        "gemm_shared",
        dims([1, 1, 1], [128, 1, 1], 0),
        p,
        &mut mem,
    )
    .unwrap();
    let d = mem.f32s(pd);
    for i in 0..32 {
        for j in 0..32 {
            // Each product of k = 16 is exact and rounded once to the
            // f32 accumulator.
            let mut s = c[i * 32 + j];
            for k0 in (0..64).step_by(16) {
                let mut x = f64::from(s);
                for k in k0..k0 + 16 {
                    x += f64::from(a[i * 64 + k]) * f64::from(b[j * 64 + k]);
                }
                s = x as f32;
            }
            assert_eq!(d[i * 32 + j].to_bits(), s.to_bits(), "d[{i}][{j}]");
        }
    }
}
