//! bfloat16 arithmetic from cuda_bf16.h, compiled for sm_80 (fma-based
//! add/sub/mul, comparisons in f32) and sm_90 (native add/sub/mul/setp),
//! checked bit for bit against a reference that rounds the exact result.

mod common;

use common::*;

const CANONICAL_NAN: u16 = 0x7fff;
const FILES: [&str; 2] = ["bf16", "bf16_sm90"];

fn is_nan(h: u16) -> bool {
    h & 0x7fff > 0x7f80
}

fn val(h: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(h) << 16))
}

/// Rounds the exact value `hi + lo` (`hi` the f64 nearest to it) to bf16,
/// to nearest even, by integer operations on `hi`'s significand.
fn round_bf16(hi: f64, lo: f64) -> u16 {
    if hi.is_nan() {
        return CANONICAL_NAN;
    }
    let sign = if hi.is_sign_negative() { 0x8000 } else { 0 };
    if hi.is_infinite() {
        return sign | 0x7f80;
    }
    if hi == 0.0 {
        return sign;
    }
    let bits = hi.abs().to_bits();
    let e = (bits >> 52) as i32 - 1075; // hi = m * 2^e
    let m = u128::from(bits & ((1 << 52) - 1) | 1 << 52);
    let top = e + 52;
    let ulp = top.max(-126) - 7;
    let shift = (ulp - e) as u32; // at least 45
    let (q, rem) = if shift >= 120 {
        (0, m)
    } else {
        (m >> shift, m & ((1u128 << shift) - 1))
    };
    let half = if shift >= 120 {
        u128::MAX
    } else {
        1u128 << (shift - 1)
    };
    // `lo` pointing away from zero makes the magnitude larger.
    let beyond = lo != 0.0 && (lo > 0.0) == (hi > 0.0);
    let below = lo != 0.0 && !beyond;
    let up = rem > half || rem == half && (beyond || !below && q & 1 == 1);
    let q = q + u128::from(up);
    let v = q as f64 * 2f64.powi(ulp);
    // Exact in f32, or infinite beyond its range.
    sign | ((v as f32).to_bits() >> 16) as u16
}

fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    if !s.is_finite() {
        return (s, 0.0);
    }
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

fn add(x: u16, y: u16) -> u16 {
    let (s, e) = two_sum(val(x), val(y));
    round_bf16(s, e)
}

fn mul(x: u16, y: u16) -> u16 {
    // 8-bit significands: the product is exact.
    round_bf16(val(x) * val(y), 0.0)
}

fn fma(x: u16, y: u16, z: u16) -> u16 {
    let (s, e) = two_sum(val(x) * val(y), val(z));
    round_bf16(s, e)
}

fn relu(h: u16) -> u16 {
    if is_nan(h) {
        CANONICAL_NAN
    } else if h & 0x8000 != 0 {
        0
    } else {
        h
    }
}

fn minmax(max: bool, nan: bool, x: u16, y: u16) -> u16 {
    let (xn, yn) = (is_nan(x), is_nan(y));
    if xn && yn || nan && (xn || yn) {
        return CANONICAL_NAN;
    }
    if xn {
        return y;
    }
    if yn {
        return x;
    }
    let (a, b) = (val(x), val(y));
    let x_first = if a == b {
        (x & 0x8000 != 0) != max
    } else {
        (a < b) != max
    };
    if x_first {
        x
    } else {
        y
    }
}

/// cvt.rn.bf16.f32 as the interpreter defines it (NaN stays quiet NaN).
fn from_f32(f: f32) -> u16 {
    let b = f.to_bits();
    if f.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    round_bf16(f64::from(f), 0.0)
}

/// Operand triples: special values crossed with each other, then random
/// encodings (all of them, NaN included) and random values of similar
/// magnitude, where sums round and tie.
fn operands(n: usize) -> (Vec<u16>, Vec<u16>, Vec<u16>) {
    let special = [
        0x0000u16, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0xbf80, 0x3b80, 0x3f81, 0x7f7f,
        0xff7f, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x4000, 0x3f00, 0x0040,
    ];
    let mut r = Rng(0x05ee_db16);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for &x in &special {
        for &y in &special {
            a.push(x);
            b.push(y);
            c.push(special[(x ^ y) as usize % special.len()]);
        }
    }
    while a.len() < n {
        let k = a.len();
        let pick = |r: &mut Rng| -> u16 {
            if k % 2 == 0 {
                r.next() as u16
            } else {
                // Sign, exponents within a few binades, any significand.
                let e = 0x7c + (r.next() % 8) as u16;
                (r.next() as u16 & 0x8000) | e << 7 | (r.next() as u16 & 0x7f)
            }
        };
        a.push(pick(&mut r));
        b.push(pick(&mut r));
        c.push(if k % 3 == 0 {
            // Near -a*b: cancellation.
            mul(a[k], b[k]) ^ 0x8000 ^ (r.next() as u16 & 3)
        } else {
            pick(&mut r)
        });
    }
    (a, b, c)
}

fn u16s(mem: &VecMemory, at: u64) -> Vec<u16> {
    mem.bytes(at)
        .chunks(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect()
}

fn bytes16(v: &[u16]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// f32 inputs for the conversions: values between bf16 neighbours, ties,
/// overflow, subnormals, NaN.
fn f32_inputs(n: usize) -> Vec<f32> {
    let mut r = Rng(77);
    (0..n)
        .map(|k| match k % 6 {
            0 => f32::from_bits(r.next() as u32),
            1 => f32::from_bits(0x3f80_8000 + ((r.next() as u32 & 3) << 16)),
            2 => f32::from_bits(0x7f7f_8000 | (r.next() as u32 & 0x8000_0fff)),
            3 => f32::from_bits(r.next() as u32 & 0x807f_ffff),
            4 => f32::from_bits(0x7fc0_0000 | r.next() as u32 & 0x803f_ffff),
            _ => r.f32(),
        })
        .collect()
}

#[test]
fn bf16_scalar_ops() {
    for file in FILES {
        let m = kernel(file);
        let mut g = m.globals();
        let n = 1200;
        let (a, b, c) = operands(n);
        let f = f32_inputs(n);
        let mut mem = VecMemory::default();
        let (pa, pb, pc) = (
            mem.alloc(bytes16(&a)),
            mem.alloc(bytes16(&b)),
            mem.alloc(bytes16(&c)),
        );
        let pf = mem.alloc_f32(&f);
        let po = mem.alloc(vec![0; 24 * n]);
        let pw = mem.alloc(vec![0; 4 * n]);
        let pcmp = mem.alloc(vec![0; 4 * n]);
        let p = Params::new().ptr(pa).ptr(pb).ptr(pc).ptr(pf);
        let p = p.ptr(po).ptr(pw).ptr(pcmp).i32(n as i32);
        launch(
            &m,
            &mut g,
            "bf16_ops",
            dims([10, 1, 1], [128, 1, 1], 0),
            p,
            &mut mem,
        )
        .unwrap();
        let out = u16s(&mem, po);
        let wide = mem.u32s(pw);
        let cmp = mem.i32s(pcmp);
        for i in 0..n {
            let (x, y, z) = (a[i], b[i], c[i]);
            let want = [
                add(x, y),
                add(x, y ^ 0x8000),
                mul(x, y),
                fma(x, y, z),
                relu(fma(x, y, z)),
                x ^ 0x8000,
                y & 0x7fff,
                minmax(false, false, x, y),
                minmax(true, false, x, y),
                minmax(false, true, x, y),
                minmax(true, true, x, y),
                from_f32(f[i]),
            ];
            let got = &out[12 * i..12 * i + 12];
            for (k, (g, w)) in got.iter().zip(want).enumerate() {
                // sm_80 subtracts as fma(y, -1, x): for NaN operands
                // both give the canonical NaN.
                assert_eq!(*g, w, "{file} #{i} op {k}: {x:#06x} {y:#06x} {z:#06x}");
            }
            // sm_90 widens with cvt.f32.bf16, whose NaN results are
            // canonical; sm_80 moves the bits.
            let widened = if is_nan(x) && file == "bf16_sm90" {
                0x7fff_ffff
            } else {
                u32::from(x) << 16
            };
            assert_eq!(wide[i], widened, "{file} widen {x:#x}");
            let (vx, vy) = (val(x), val(y));
            let flags = i32::from(vx < vy) | i32::from(vx > vy) << 1 | i32::from(vx == vy) << 2;
            assert_eq!(cmp[i], flags, "{file} compare {x:#x} {y:#x}");
        }
    }
}

#[test]
fn bf16x2_packed_ops() {
    for file in FILES {
        let m = kernel(file);
        let mut g = m.globals();
        let n = 700;
        let (a16, b16, c16) = operands(2 * n);
        let f = f32_inputs(2 * n);
        let mut mem = VecMemory::default();
        let (pa, pb, pc) = (
            mem.alloc(bytes16(&a16)),
            mem.alloc(bytes16(&b16)),
            mem.alloc(bytes16(&c16)),
        );
        let pf = mem.alloc_f32(&f);
        let po = mem.alloc(vec![0; 40 * n]);
        let p = Params::new().ptr(pa).ptr(pb).ptr(pc).ptr(pf).ptr(po);
        launch(
            &m,
            &mut g,
            "bf16x2_ops",
            dims([6, 1, 1], [128, 1, 1], 0),
            p.i32(n as i32),
            &mut mem,
        )
        .unwrap();
        let out = u16s(&mem, po);
        for i in 0..n {
            for h in 0..2 {
                let j = 2 * i + h;
                let (x, y, z) = (a16[j], b16[j], c16[j]);
                // __floats2bfloat162_rn(lo, hi): .x (low half) from the
                // first float.
                let want = [
                    add(x, y),
                    add(x, y ^ 0x8000),
                    mul(x, y),
                    fma(x, y, z),
                    relu(fma(x, y, z)),
                    x ^ 0x8000,
                    y & 0x7fff,
                    minmax(false, false, x, y),
                    minmax(true, true, x, y),
                    from_f32(f[j]),
                ];
                for (k, w) in want.into_iter().enumerate() {
                    let got = out[20 * i + 2 * k + h];
                    assert_eq!(got, w, "{file} #{i}.{h} op {k}: {x:#06x} {y:#06x} {z:#06x}");
                }
            }
        }
    }
}
