//! Floating-point rounding that Rust's operators do not provide: directed
//! rounding modes (`.rz`, `.rm`, `.rp`), conversions with a rounding mode,
//! half precision, flush-to-zero and saturation.
//!
//! f32 arithmetic with `.rn` is Rust's own f32 arithmetic. For directed
//! modes an f32 operation is evaluated in f64 together with the exact sign
//! of its rounding error (error-free transformations: TwoSum, the
//! remainder of a division or square root by `fma`), and the exact value
//! is then rounded once in the requested direction. f64 operations use the
//! same error terms to step the round-to-nearest result by one ulp where
//! the direction requires it.

use crate::ir::Rnd;

/// PTX's canonical f32 NaN.
pub(crate) const CANONICAL_NAN_F32: u32 = 0x7fff_ffff;

/// `(s, e)` with `s = fl(a + b)` and `a + b = s + e` exactly.
pub(crate) fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    if !s.is_finite() {
        return (s, 0.0);
    }
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// Rounds the exact value `s + err` (with `|err|` below half an f64 ulp of
/// `s`; only its sign matters) to f32 in mode `rnd`.
pub(crate) fn round_to_f32(s: f64, err: f64, rnd: Rnd) -> f32 {
    if s.is_nan() {
        return f32::from_bits(CANONICAL_NAN_F32);
    }
    let r = s as f32;
    if s.is_infinite() {
        return r;
    }
    let rd = f64::from(r);
    let (lo, hi) = if r.is_infinite() {
        if s > 0.0 {
            (f32::MAX, f32::INFINITY)
        } else {
            (f32::NEG_INFINITY, f32::MIN)
        }
    } else if rd == s {
        if err == 0.0 {
            return r;
        }
        if err > 0.0 {
            (r, r.next_up())
        } else {
            (r.next_down(), r)
        }
    } else if rd < s {
        (r, r.next_up())
    } else {
        (r.next_down(), r)
    };
    let x_pos = s > 0.0 || (s == 0.0 && err > 0.0);
    match rnd {
        Rnd::Rn => {
            if rd != s && !r.is_infinite() {
                // A tie between `lo` and `hi` in f64 is decided by `err`.
                let mid = (f64::from(lo) + f64::from(hi)) / 2.0;
                if s == mid && err != 0.0 {
                    return if err > 0.0 { hi } else { lo };
                }
            }
            r
        }
        Rnd::Rz => {
            if x_pos {
                lo
            } else {
                hi
            }
        }
        Rnd::Rm => lo,
        Rnd::Rp => hi,
    }
}

/// Rounds `s + err` where `s` is the round-to-nearest f64 result of an
/// operation on finite inputs and `err` its exact error.
pub(crate) fn adjust_f64(s: f64, err: f64, rnd: Rnd) -> f64 {
    if s.is_nan() {
        return s;
    }
    if s.is_infinite() {
        // Overflow: directed modes stop at the largest finite value.
        let pos = s > 0.0;
        return match (rnd, pos) {
            (Rnd::Rn, _) | (Rnd::Rp, true) | (Rnd::Rm, false) => s,
            (_, true) => f64::MAX,
            (_, false) => f64::MIN,
        };
    }
    if err == 0.0 || err.is_nan() {
        return s;
    }
    match rnd {
        Rnd::Rn => s,
        Rnd::Rp if err > 0.0 => s.next_up(),
        Rnd::Rm if err < 0.0 => s.next_down(),
        Rnd::Rz if s > 0.0 && err < 0.0 => s.next_down(),
        Rnd::Rz if s < 0.0 && err > 0.0 => s.next_up(),
        _ => s,
    }
}

/// The sign of an exact zero sum `a + b` under `rnd` (IEEE 754: `-0` only
/// when rounding toward negative infinity, unless both are `+0`/`-0`).
fn zero_sum_sign(a: f64, b: f64, s: f64, rnd: Rnd) -> f64 {
    let both_plus_zero = a == 0.0 && b == 0.0 && a.is_sign_positive() && b.is_sign_positive();
    if s == 0.0 && rnd == Rnd::Rm && !both_plus_zero {
        -0.0
    } else {
        s
    }
}

pub(crate) fn add_f32(a: f32, b: f32, rnd: Rnd) -> f32 {
    if rnd == Rnd::Rn {
        return a + b;
    }
    let (a, b) = (f64::from(a), f64::from(b));
    let (s, e) = two_sum(a, b);
    let s = zero_sum_sign(a, b, s, rnd);
    round_to_f32(s, e, rnd)
}

pub(crate) fn mul_f32(a: f32, b: f32, rnd: Rnd) -> f32 {
    if rnd == Rnd::Rn {
        return a * b;
    }
    // The product of two f32 is exact in f64.
    round_to_f32(f64::from(a) * f64::from(b), 0.0, rnd)
}

pub(crate) fn div_f32(a: f32, b: f32, rnd: Rnd) -> f32 {
    if rnd == Rnd::Rn {
        return a / b;
    }
    let (a, b) = (f64::from(a), f64::from(b));
    let q = a / b;
    round_to_f32(q, div_err(a, b, q), rnd)
}

fn div_err(a: f64, b: f64, q: f64) -> f64 {
    if !q.is_finite() || q == 0.0 || !b.is_finite() {
        return 0.0;
    }
    let r = (-q).mul_add(b, a);
    if r == 0.0 {
        0.0
    } else if (r > 0.0) == (b > 0.0) {
        1.0
    } else {
        -1.0
    }
}

fn sqrt_err(a: f64, s: f64) -> f64 {
    if !s.is_finite() || s == 0.0 {
        return 0.0;
    }
    (-s).mul_add(s, a)
}

pub(crate) fn sqrt_f32(a: f32, rnd: Rnd) -> f32 {
    if rnd == Rnd::Rn {
        return a.sqrt();
    }
    let a = f64::from(a);
    let s = a.sqrt();
    round_to_f32(s, sqrt_err(a, s), rnd)
}

#[inline(always)]
pub(crate) fn fma_f32(a: f32, b: f32, c: f32, rnd: Rnd) -> f32 {
    if rnd == Rnd::Rn {
        return fma_rn_f32(a, b, c);
    }
    let p = f64::from(a) * f64::from(b);
    let c = f64::from(c);
    let (s, e) = two_sum(p, c);
    let s = zero_sum_sign(p, c, s, rnd);
    round_to_f32(s, e, rnd)
}

pub(crate) fn add_f64(a: f64, b: f64, rnd: Rnd) -> f64 {
    let (s, e) = two_sum(a, b);
    if rnd == Rnd::Rn || !a.is_finite() || !b.is_finite() {
        return s;
    }
    adjust_f64(zero_sum_sign(a, b, s, rnd), e, rnd)
}

pub(crate) fn mul_f64(a: f64, b: f64, rnd: Rnd) -> f64 {
    let s = a * b;
    if rnd == Rnd::Rn || !a.is_finite() || !b.is_finite() {
        return s;
    }
    let e = if s.is_finite() { a.mul_add(b, -s) } else { 0.0 };
    adjust_f64(s, e, rnd)
}

pub(crate) fn div_f64(a: f64, b: f64, rnd: Rnd) -> f64 {
    let q = a / b;
    if rnd == Rnd::Rn || !a.is_finite() || !b.is_finite() || b == 0.0 {
        return q;
    }
    adjust_f64(q, div_err(a, b, q), rnd)
}

pub(crate) fn sqrt_f64(a: f64, rnd: Rnd) -> f64 {
    let s = a.sqrt();
    if rnd == Rnd::Rn {
        return s;
    }
    adjust_f64(s, sqrt_err(a, s), rnd)
}

/// Rounds an integer `(-1)^neg * mag` to a float with `p` significand bits,
/// returned as the (exactly representable) f64 value.
pub(crate) fn int_to_float(neg: bool, mag: u64, rnd: Rnd, p: u32) -> f64 {
    let n = 64 - mag.leading_zeros();
    let v = if n <= p {
        mag as f64
    } else {
        let shift = n - p;
        let mut q = mag >> shift;
        let rem = mag & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        let up = match rnd {
            Rnd::Rn => rem > half || (rem == half && q & 1 == 1),
            Rnd::Rz => false,
            Rnd::Rp => !neg && rem != 0,
            Rnd::Rm => neg && rem != 0,
        };
        if up {
            q += 1;
        }
        (q as f64) * 2f64.powi(shift as i32)
    };
    if neg {
        -v
    } else {
        v
    }
}

/// Rounds to an integral value in mode `rnd`.
pub(crate) fn round_integral_f64(x: f64, rnd: Rnd) -> f64 {
    match rnd {
        Rnd::Rn => x.round_ties_even(),
        Rnd::Rz => x.trunc(),
        Rnd::Rm => x.floor(),
        Rnd::Rp => x.ceil(),
    }
}

pub(crate) fn round_integral_f32(x: f32, rnd: Rnd) -> f32 {
    match rnd {
        Rnd::Rn => x.round_ties_even(),
        Rnd::Rz => x.trunc(),
        Rnd::Rm => x.floor(),
        Rnd::Rp => x.ceil(),
    }
}

/// `2^r` for `|r| <= 1/2`: its Taylor series in `r ln 2` to degree 11
/// (coefficients `(ln 2)^k / k!`, highest first), whose truncation error
/// is below 1e-14 relative. Evaluated by Horner's rule with separate
/// multiplications and additions, in this order, by [`ex2_approx_f32`]
/// and the engine's vector copy (`exec::simd`), so both give the same bits.
pub(crate) const EX2_POLY: [f64; 12] = [
    4.4455382718708116e-10,
    7.054911620801123e-09,
    1.01780860092397e-07,
    1.321548679014431e-06,
    1.5252733804059841e-05,
    0.0001540353039338161,
    0.0013333558146428443,
    0.009618129107628477,
    0.05550410866482158,
    0.24022650695910072,
    std::f64::consts::LN_2,
    1.0,
];

/// `ex2.approx.f32` (without `.ftz`): `2^a` computed in f64 and rounded
/// once to f32. `a` is clamped to [-200, 200] (beyond, the f32 result is
/// already 0 or infinity), split as `n + r` with `n` the nearest integer,
/// and `2^r` ([`EX2_POLY`]) is scaled by `2^n` exactly; the f64 result is
/// within about 1e-14 of `2^a`, so the f32 is correctly rounded but in
/// rare near-midpoint cases, well inside the instruction's 2 ulp.
/// Subnormal results are kept, as the instruction keeps them.
pub(crate) fn ex2_approx_f32(a: f32) -> f32 {
    if a.is_nan() {
        return a;
    }
    let x = f64::from(a).clamp(-200.0, 200.0);
    let n = x.round_ties_even();
    let r = x - n;
    let mut p = EX2_POLY[0];
    for &c in &EX2_POLY[1..] {
        p = p * r + c;
    }
    let scale = f64::from_bits(((n as i64 + 1023) as u64) << 52);
    (p * scale) as f32
}

/// `log2((1 + s) / (1 - s)) / s` as a series in `z = s^2`: coefficients
/// `2 / ((2k + 1) ln 2)`, highest first (k = 7 down to 0). For
/// `|s| <= 0.172` the truncation error is below 1e-14 relative.
pub(crate) const LG2_POLY: [f64; 8] = [
    0.19235933878519512,
    0.22195308321368667,
    0.2623081892525388,
    0.3205988979753252,
    0.4121985831111324,
    0.5770780163555853,
    0.9617966939259756,
    2.8853900817779268,
];

/// The mantissa bits of the f64 `sqrt(2)`.
pub(crate) const SQRT2_MANTISSA: u64 = 0x6_a09e_667f_3bcd;

/// `lg2.approx.f32` (without `.ftz`): `log2(a)` computed in f64 and
/// rounded once to f32. `a` (subnormal or not, exact in f64) is split as
/// `2^e * m` with `m` in [sqrt(2)/2, sqrt(2)]; then `log2(m)` is
/// `s * P(s^2)` with `s = (m - 1) / (m + 1)` ([`LG2_POLY`]), and the
/// result `e + log2(m)`, within about 1e-14 relative. NaN and negative
/// `a` give NaN, zeros minus infinity, infinity infinity. The engine's
/// vector copy (`exec::simd`) makes the same operations in the same
/// order.
pub(crate) fn lg2_approx_f32(a: f32) -> f32 {
    if a.is_nan() || a < 0.0 {
        return f32::NAN;
    }
    if a == 0.0 {
        return f32::NEG_INFINITY;
    }
    if a == f32::INFINITY {
        return a;
    }
    let bits = f64::from(a).to_bits();
    let mantissa = bits & ((1 << 52) - 1);
    let big = mantissa > SQRT2_MANTISSA;
    // m's exponent field: 1023 (m in [1, sqrt 2]) or 1022 (m in
    // [sqrt(2)/2, 1)), and the exponent field of `a` one more for it.
    let (m_field, e_field) = if big {
        (1022u64, (bits >> 52) + 1)
    } else {
        (1023, bits >> 52)
    };
    let m = f64::from_bits(mantissa | m_field << 52);
    let e = e_field as f64 - 1023.0;
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    let mut p = LG2_POLY[0];
    for &c in &LG2_POLY[1..] {
        p = p * z + c;
    }
    (e + s * p) as f32
}

/// Flushes an f32 subnormal to a zero of the same sign.
pub(crate) fn ftz32(x: f32) -> f32 {
    if x.is_subnormal() {
        if x.is_sign_negative() {
            -0.0
        } else {
            0.0
        }
    } else {
        x
    }
}

/// `.sat`: clamps to [0, 1], NaN to 0.
pub(crate) fn sat32(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

/// `fma.rn.f32` without a call of the C library's `fmaf` (which a build
/// for the baseline x86-64 makes per lane). The product of two f32 is
/// exact in f64, so `s = p + c` is the exact result rounded once to f64.
/// Rounding `s` to f32 gives the correctly rounded result unless `s`
/// lies exactly halfway between two f32 values: rounding to f64 is
/// monotonic and keeps every such midpoint, so otherwise `s` and the
/// exact result sit between the same two midpoints. Midpoints (low 29 of
/// f64's 52 fraction bits `1000…0` in f32's normal range), results near
/// f32's subnormals and non-finite sums take `f32::mul_add`.
#[inline(always)]
pub(crate) fn fma_rn_f32(a: f32, b: f32, c: f32) -> f32 {
    let s = f64::from(a) * f64::from(b) + f64::from(c);
    let low = s.to_bits() & ((1 << 29) - 1);
    if low != 1 << 28 && s.is_finite() && s.abs() >= 2f64.powi(-125) {
        return s as f32;
    }
    if s == 0.0 {
        // An exact zero: its sign is IEEE's for the sum, as f64's.
        return s as f32;
    }
    a.mul_add(b, c)
}

/// f32 to IEEE half precision, round to nearest even.
pub(crate) fn f32_to_f16(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    let (q, rem, half) = if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        (m >> shift, m & ((1 << shift) - 1), 1u32 << (shift - 1))
    } else {
        (((e as u32) << 10) | (man >> 13), man & 0x1fff, 0x1000)
    };
    let q = if rem > half || (rem == half && q & 1 == 1) {
        q + 1
    } else {
        q
    };
    sign | q as u16
}

/// PTX's canonical f16 NaN.
pub(crate) const CANONICAL_NAN_F16: u16 = 0x7fff;

/// A 16-bit float format: IEEE half precision or bfloat16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HFmt {
    F16,
    BF16,
}

impl HFmt {
    /// Explicit significand bits.
    fn man_bits(self) -> i32 {
        match self {
            HFmt::F16 => 10,
            HFmt::BF16 => 7,
        }
    }

    /// Exponent of the smallest normal value.
    fn min_exp(self) -> i32 {
        match self {
            HFmt::F16 => -14,
            HFmt::BF16 => -126,
        }
    }

    /// The encoding of infinity (positive).
    fn inf(self) -> u16 {
        match self {
            HFmt::F16 => 0x7c00,
            HFmt::BF16 => 0x7f80,
        }
    }

    /// PTX's canonical NaN of the format.
    pub(crate) fn nan(self) -> u16 {
        match self {
            HFmt::F16 => CANONICAL_NAN_F16,
            HFmt::BF16 => CANONICAL_NAN_BF16,
        }
    }

    /// The value of an encoding (exact).
    pub(crate) fn to_f64(self, h: u16) -> f64 {
        f64::from(match self {
            HFmt::F16 => f16_to_f32(h),
            HFmt::BF16 => bf16_to_f32(h),
        })
    }

    /// Whether an encoding is a NaN.
    pub(crate) fn is_nan(self, h: u16) -> bool {
        h & 0x7fff > self.inf()
    }

    /// Rounds the exact value `s + err` (`|err|` below half an f64 ulp of
    /// `s`; only its sign matters) to this format, to nearest even. NaN
    /// gives the canonical NaN.
    pub(crate) fn round(self, s: f64, err: f64) -> u16 {
        if s.is_nan() {
            return self.nan();
        }
        let sign: u16 = if s.is_sign_negative() { 0x8000 } else { 0 };
        let a = s.abs();
        if a.is_infinite() {
            return sign | self.inf();
        }
        if a == 0.0 {
            return sign;
        }
        // `a` is normal in f64 for every sum or product of these formats.
        let e = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        let ulp = e.max(self.min_exp()) - self.man_bits();
        let q = a * 2f64.powi(-ulp);
        let r = q.floor();
        let frac = q - r;
        let toward = if sign != 0 { -err } else { err };
        let up = frac > 0.5 || (frac == 0.5 && (toward > 0.0 || (toward == 0.0 && r % 2.0 == 1.0)));
        let v = (if up { r + 1.0 } else { r }) * 2f64.powi(ulp);
        // Exactly representable now, unless it overflows.
        match self {
            HFmt::F16 if v >= 65536.0 => sign | self.inf(),
            HFmt::F16 => sign | f32_to_f16(v as f32),
            HFmt::BF16 if v >= 2f64.powi(128) => sign | self.inf(),
            HFmt::BF16 => sign | f32_to_bf16(v as f32),
        }
    }
}

/// PTX's canonical bf16 NaN.
pub(crate) const CANONICAL_NAN_BF16: u16 = 0x7fff;

/// IEEE half precision to f32 (exact). Without branches on the value, so
/// that loops over many halves vectorize: the half's exponent and
/// significand moved to an f32's places are the value times 2^-112 for
/// normal and subnormal halves alike (a subnormal half lands on a
/// subnormal f32, which the product by 2^112 makes normal, exactly);
/// infinities and NaNs keep an all-ones exponent.
#[inline]
pub(crate) fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let rest = u32::from(h & 0x7fff) << 13;
    // 2^112 (exponent 112 + 127).
    let scaled = (f32::from_bits(rest) * f32::from_bits(0x7780_0000)).to_bits();
    let special = 0x7f80_0000 | (rest & 0x007f_e000);
    let bits = if h & 0x7c00 == 0x7c00 {
        special
    } else {
        scaled
    };
    f32::from_bits(sign | bits)
}

/// f32 to bfloat16, round to nearest even.
pub(crate) fn f32_to_bf16(x: f32) -> u16 {
    let b = x.to_bits();
    if x.is_nan() {
        return ((b >> 16) | 0x40) as u16;
    }
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1));
    (r >> 16) as u16
}

/// `v` (finite, non-zero) rounded once in mode `rnd` to a binary format
/// of `p` significant bits whose normal exponents start at `emin` (below
/// it, subnormals of spacing 2^(emin - p + 1)); a result beyond `max`, the
/// format's largest finite value, is infinity or `max` as the mode says.
fn round_to_format(v: f64, p: i32, emin: i32, max: f64, rnd: Rnd) -> f64 {
    let biased = ((v.to_bits() >> 52) & 0x7ff) as i32;
    // f64 subnormals lie far below every target's smallest subnormal.
    let e = if biased == 0 { emin } else { biased - 1023 };
    // The spacing of the target's values around `v`: dividing by it and
    // multiplying back are exact (a power of two, far from f64's limits).
    let quantum = pow2(e.max(emin) - (p - 1));
    let n = v / quantum;
    let n = match rnd {
        Rnd::Rn => n.round_ties_even(),
        Rnd::Rz => n.trunc(),
        Rnd::Rm => n.floor(),
        Rnd::Rp => n.ceil(),
    };
    let r = n * quantum;
    if r.abs() <= max {
        return r;
    }
    let to_infinity = match rnd {
        Rnd::Rn => {
            // Past the largest value, to nearest: whatever lies beyond the
            // midpoint to the next binade's first value (as if the exponent
            // range went on) is infinite.
            let step = pow2(max.log2().floor() as i32 - (p - 1));
            v.abs() >= max + step / 2.0
        }
        Rnd::Rz => false,
        Rnd::Rm => v < 0.0,
        Rnd::Rp => v > 0.0,
    };
    if to_infinity {
        f64::INFINITY.copysign(v)
    } else {
        max.copysign(v)
    }
}

/// 2^e for the exponents of f64's normal numbers.
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// `v` rounded once in mode `rnd` to a 16-bit float, as its bits: bf16 (8
/// significant bits, normal exponents -126..=127) or f16 (11 bits,
/// -14..=15), with their subnormals; beyond the largest finite value,
/// infinity or that value as the mode says. Every f64 is rounded directly,
/// not through f32 (which would round twice).
pub(crate) fn f64_to_half(v: f64, bf16: bool, rnd: Rnd) -> u16 {
    let (p, emin, emax): (i32, i32, i32) = if bf16 { (8, -126, 127) } else { (11, -14, 15) };
    let enc = |x: f32| if bf16 { f32_to_bf16(x) } else { f32_to_f16(x) };
    if !v.is_finite() || v == 0.0 {
        return enc(v as f32);
    }
    let max = (2.0 - pow2(1 - p)) * pow2(emax);
    // A value of the target format, so exact in f32 and encoded exactly.
    enc(round_to_format(v, p, emin, max, rnd) as f32)
}

/// The 8-bit float formats of `cvt` (sm_89): E4M3 (4 significant bits,
/// exponent bias 7, no infinities, largest 448, NaN 0x7f) and E5M2 (3
/// bits, bias 15, IEEE-like, largest finite 57344).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum F8 {
    E4m3,
    E5m2,
}

impl F8 {
    /// (significant bits, exponent bias, largest finite value).
    fn params(self) -> (i32, i32, f64) {
        match self {
            F8::E4m3 => (4, 7, 448.0),
            F8::E5m2 => (3, 15, 57344.0),
        }
    }
}

/// `cvt.rn.satfinite{.relu}` of `v` to an 8-bit float: to nearest even,
/// beyond the largest finite value (infinities included) that value with
/// the sign, NaN to NaN (0x7f); `.relu` makes negative values +0.
pub(crate) fn f64_to_f8(v: f64, fmt: F8, relu: bool) -> u8 {
    if v.is_nan() {
        return 0x7f;
    }
    if relu && v < 0.0 {
        return 0;
    }
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    if v == 0.0 {
        return sign;
    }
    let (p, bias, max) = fmt.params();
    let emin = 1 - bias;
    let r = if v.is_infinite() {
        max
    } else {
        round_to_format(v, p, emin, max, Rnd::Rn).abs().min(max)
    };
    if r == 0.0 {
        return sign;
    }
    let m = p - 1;
    let biased = ((r.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    let code = if biased < emin {
        // Subnormal: a multiple of the smallest spacing.
        (r / pow2(emin - m)) as u8
    } else {
        let frac = (r / pow2(biased) - 1.0) * f64::from(1u32 << m);
        (((biased + bias) as u8) << m) | frac as u8
    };
    sign | code
}

/// An 8-bit float's value (exact in f16, f32 and f64).
pub(crate) fn f8_to_f64(b: u8, fmt: F8) -> f64 {
    let (p, bias, _) = fmt.params();
    let m = p - 1;
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((b & 0x7f) >> m);
    let frac = f64::from(b & ((1 << m) - 1));
    let emax_field = (1 << (7 - m)) - 1;
    match fmt {
        F8::E4m3 if b & 0x7f == 0x7f => return f64::NAN,
        F8::E5m2 if e == emax_field => {
            return if frac == 0.0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            };
        }
        _ => {}
    }
    if e == 0 {
        sign * frac * pow2(1 - bias - m)
    } else {
        sign * (1.0 + frac / f64::from(1u32 << m)) * pow2(e - bias)
    }
}

pub(crate) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every half against the definition: ±(1 + m/1024)·2^(e-15), the
    /// subnormals m·2^-24, the infinities, and NaNs with their payload.
    #[test]
    fn every_half_converts_to_its_value() {
        for h in 0..=u16::MAX {
            let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
            let (e, m) = (i32::from((h >> 10) & 0x1f), f64::from(h & 0x3ff));
            let got = f16_to_f32(h);
            match e {
                0x1f if m == 0.0 => assert_eq!(f64::from(got), sign * f64::INFINITY, "{h:#x}"),
                0x1f => assert_eq!(
                    got.to_bits(),
                    (u32::from(h & 0x8000) << 16) | 0x7f80_0000 | (u32::from(h & 0x3ff) << 13),
                    "{h:#x}"
                ),
                0 => {
                    assert_eq!(f64::from(got), sign * m * 2f64.powi(-24), "{h:#x}");
                    assert_eq!(got.is_sign_negative(), h & 0x8000 != 0, "{h:#x}");
                }
                _ => assert_eq!(
                    f64::from(got),
                    sign * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
                    "{h:#x}"
                ),
            }
        }
    }

    /// The 8-bit formats against their definitions: known codes, every
    /// code back and forth, and rounding to the nearest of all 256 values
    /// (ties to the even code), saturated at the largest finite one.
    #[test]
    fn fp8_formats_decode_encode_and_round_to_nearest() {
        assert_eq!(f8_to_f64(0x7e, F8::E4m3), 448.0);
        assert_eq!(f8_to_f64(0x01, F8::E4m3), 2f64.powi(-9));
        assert_eq!(f8_to_f64(0x08, F8::E4m3), 2f64.powi(-6));
        assert_eq!(f8_to_f64(0x38, F8::E4m3), 1.0);
        assert!(f8_to_f64(0xff, F8::E4m3).is_nan());
        assert_eq!(f8_to_f64(0x7b, F8::E5m2), 57344.0);
        assert_eq!(f8_to_f64(0x01, F8::E5m2), 2f64.powi(-16));
        assert_eq!(f8_to_f64(0x3c, F8::E5m2), 1.0);
        assert_eq!(f8_to_f64(0xfc, F8::E5m2), f64::NEG_INFINITY);
        assert!(f8_to_f64(0x7e, F8::E5m2).is_nan());
        for fmt in [F8::E4m3, F8::E5m2] {
            let finite: Vec<(f64, u8)> = (0..=255u8)
                .map(|c| (f8_to_f64(c, fmt), c))
                .filter(|(v, _)| v.is_finite())
                .collect();
            for &(v, c) in &finite {
                // -0 and +0 keep their codes.
                assert_eq!(f64_to_f8(v, fmt, false), c, "{fmt:?} {v}");
            }
            let max = finite.iter().map(|(v, _)| *v).fold(0.0, f64::max);
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            for _ in 0..50_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = f64::from(f32::from_bits(x as u32 & 0xbfff_ffff | 0x3000_0000))
                    * if x >> 40 & 1 == 0 { 1.0 } else { 1e-3 };
                let got = f64_to_f8(v, fmt, false);
                let want = if v.abs() >= max {
                    f64_to_f8(max.copysign(v), fmt, false)
                } else {
                    let best = finite
                        .iter()
                        .filter(|(w, _)| w.is_sign_negative() == v.is_sign_negative())
                        .min_by(|a, b| {
                            let (da, db) = ((a.0 - v).abs(), (b.0 - v).abs());
                            da.total_cmp(&db).then((a.1 & 1).cmp(&(b.1 & 1)))
                        })
                        .unwrap();
                    best.1
                };
                assert_eq!(got, want, "{fmt:?} {v:e}: {got:#04x}, want {want:#04x}");
            }
            assert_eq!(
                f64_to_f8(f64::INFINITY, fmt, false),
                f64_to_f8(max, fmt, false)
            );
            assert_eq!(f64_to_f8(f64::NAN, fmt, false), 0x7f);
            assert_eq!(f64_to_f8(-1.5, fmt, true), 0);
        }
    }

    /// `f64_to_half` against the definition: the values of the format,
    /// all of them, sorted; `v` lies between two neighbours and the mode
    /// picks one (ties to the even encoding), past the largest finite
    /// value infinity or that value.
    #[test]
    fn halves_round_once_in_every_mode() {
        for bf16 in [false, true] {
            let dec = |h: u16| if bf16 { bf16_to_f32(h) } else { f16_to_f32(h) };
            let mut values: Vec<(f64, u16)> = (0..=0x7fffu16)
                .map(|h| (f64::from(dec(h)), h))
                .filter(|(v, _)| v.is_finite())
                .flat_map(|(v, h)| [(v, h), (-v, h | 0x8000)])
                .collect();
            values.sort_by(|a, b| a.0.total_cmp(&b.0));
            let max = values.last().unwrap().0;
            let want = |v: f64, rnd: Rnd| -> u16 {
                let inf = if bf16 { 0x7f80 } else { 0x7c00 };
                let i = values.partition_point(|&(x, _)| x < v);
                if i < values.len() && values[i].0 == v {
                    // Exact (of two zeros, the one of v's sign).
                    let sign = if v.is_sign_negative() { 0x8000 } else { 0 };
                    return if v == 0.0 { sign } else { values[i].1 };
                }
                if v > max || v < -max {
                    let pos = v > 0.0;
                    let to_inf = match rnd {
                        Rnd::Rn => {
                            // Overflow unless nearer the largest value than
                            // the next binade's first.
                            let ulp = max - values[values.len() - 2].0;
                            v.abs() >= max + ulp / 2.0
                        }
                        Rnd::Rz => false,
                        Rnd::Rm => !pos,
                        Rnd::Rp => pos,
                    };
                    let s = if pos { 0 } else { 0x8000 };
                    let lim = if pos {
                        values.last().unwrap().1
                    } else {
                        values[0].1
                    };
                    return if to_inf { inf | s } else { lim };
                }
                let (lo, hi) = (values[i - 1], values[i]);
                let toward_zero_is_lo = v > 0.0;
                match rnd {
                    Rnd::Rm => lo.1,
                    Rnd::Rp => hi.1,
                    Rnd::Rz => {
                        if toward_zero_is_lo {
                            lo.1
                        } else {
                            hi.1
                        }
                    }
                    Rnd::Rn => {
                        let (dl, dh) = (v - lo.0, hi.0 - v);
                        if dl < dh || (dl == dh && lo.1 & 1 == 0) {
                            lo.1
                        } else {
                            hi.1
                        }
                    }
                }
            };
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let mut next = || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut inputs: Vec<f64> = Vec::new();
            for _ in 0..20_000 {
                let r = next();
                // Random magnitudes across the format's range and beyond.
                let e = (r % 300) as i32 - 160;
                inputs.push(
                    f64::from_bits(r >> 12 | ((e + 1023) as u64) << 52)
                        * if r & 1 == 0 { 1.0 } else { -1.0 },
                );
                inputs.push(f64::from(f32::from_bits(next() as u32)));
            }
            // Midpoints between neighbours (ties), and just off them.
            for w in values.windows(2).step_by(97) {
                let mid = (w[0].0 + w[1].0) / 2.0;
                inputs.extend([mid, mid.next_up(), mid.next_down()]);
            }
            let top = max + (max - values[values.len() - 2].0) / 2.0;
            inputs.extend([top, top.next_down(), -top, 1e300, -1e300, 1e-300, -1e-300]);
            for &v in inputs.iter().filter(|v| v.is_finite()) {
                for rnd in [Rnd::Rn, Rnd::Rz, Rnd::Rm, Rnd::Rp] {
                    let (got, want) = (f64_to_half(v, bf16, rnd), want(v, rnd));
                    assert_eq!(
                        got, want,
                        "{v:e} {rnd:?} bf16={bf16}: {got:#06x}, want {want:#06x}"
                    );
                }
            }
            // Infinities keep their sign; NaN stays NaN.
            assert!(dec(f64_to_half(f64::NAN, bf16, Rnd::Rz)).is_nan());
            assert_eq!(
                dec(f64_to_half(f64::NEG_INFINITY, bf16, Rnd::Rz)),
                f32::NEG_INFINITY
            );
        }
    }

    #[test]
    fn fma_rn_is_the_correctly_rounded_fma() {
        // Random bit patterns (all classes: NaN, infinities, subnormals),
        // values of similar magnitude (accumulations) and constructed
        // double-rounding cases: a product exactly halfway between two
        // f32 after adding a tiny addend.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let same = |a: f32, b: f32, c: f32| {
            let (got, want) = (fma_rn_f32(a, b, c), a.mul_add(b, c));
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "fma({a:e}, {b:e}, {c:e}) = {got:e}, want {want:e}"
            );
        };
        for _ in 0..200_000 {
            let r = next();
            same(
                f32::from_bits(r as u32),
                f32::from_bits((r >> 32) as u32),
                f32::from_bits(next() as u32),
            );
            let u = |v: u64| (v >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
            same(u(next()) * 8.0, u(next()), u(next()) * 100.0);
        }
        // (1 + 2^-23) * (1 + 2^-24): exact product 1 + 3*2^-24 + 2^-47,
        // halfway-ish cases around it and with a tiny addend of each sign.
        let (a, b) = (1.0f32 + f32::EPSILON, 1.0f32 + f32::EPSILON / 2.0);
        for c in [0.0, 1e-30, -1e-30, f32::from_bits(1), -f32::from_bits(1)] {
            same(a, b, c);
            same(-a, b, c);
        }
        // 97 * 172961 = 2^24 + 1: a product exactly halfway between 1 and
        // the next f32; a tiny addend decides, which f64 would round away.
        let (a, b) = (97.0f32 / 128.0, 172_961.0f32 / 131_072.0);
        assert_eq!(f64::from(a) * f64::from(b), 1.0 + 2f64.powi(-24));
        for c in [0.0, 1e-30, -1e-30] {
            same(a, b, c);
            same(-a, b, c);
        }
        assert_eq!(fma_rn_f32(a, b, 1e-30), 1.0f32.next_up());
        same(f32::MAX, 1.0 + f32::EPSILON, 0.0);
        same(f32::MAX, 1.0, f32::MAX / 16777216.0);
        same(f32::MIN_POSITIVE, 0.5, f32::from_bits(1));
        same(-0.0, 0.0, 0.0);
        same(-0.0, 0.0, -0.0);
        same(f32::INFINITY, 0.0, 1.0);
    }

    #[test]
    fn directed_add_sees_tiny_addends() {
        let tiny = f32::from_bits(1); // 2^-149
        assert_eq!(add_f32(1.0, tiny, Rnd::Rp), 1.0f32.next_up());
        assert_eq!(add_f32(1.0, tiny, Rnd::Rm), 1.0);
        assert_eq!(add_f32(1.0, -tiny, Rnd::Rz), 1.0f32.next_down());
        assert_eq!(add_f32(1.0, -tiny, Rnd::Rp), 1.0);
        assert_eq!(add_f32(1.0, -1.0, Rnd::Rm).to_bits(), (-0.0f32).to_bits());
        assert_eq!(add_f32(1.0, -1.0, Rnd::Rz).to_bits(), 0.0f32.to_bits());
    }

    #[test]
    fn directed_mul_div_sqrt() {
        let third_rz = div_f32(1.0, 3.0, Rnd::Rz);
        let third_rp = div_f32(1.0, 3.0, Rnd::Rp);
        assert_eq!(third_rz.next_up(), third_rp);
        assert!(f64::from(third_rz) < 1.0 / 3.0 && f64::from(third_rp) > 1.0 / 3.0);
        assert_eq!(div_f32(1.0, 4.0, Rnd::Rp), 0.25);
        assert_eq!(sqrt_f32(4.0, Rnd::Rm), 2.0);
        let s2m = sqrt_f32(2.0, Rnd::Rm);
        assert_eq!(s2m.next_up(), sqrt_f32(2.0, Rnd::Rp));
        assert_eq!(mul_f32(f32::MAX, 2.0, Rnd::Rz), f32::MAX);
        assert_eq!(mul_f32(f32::MAX, 2.0, Rnd::Rn), f32::INFINITY);
        assert_eq!(mul_f32(-f32::MAX, 2.0, Rnd::Rp), f32::MIN);
        let m = 1.0f32.next_up();
        assert_eq!(mul_f32(m, m, Rnd::Rm), m.next_up());
        assert_eq!(mul_f32(m, m, Rnd::Rp), m.next_up().next_up());
    }

    #[test]
    fn directed_f64() {
        let t = div_f64(1.0, 3.0, Rnd::Rn);
        assert_eq!(div_f64(1.0, 3.0, Rnd::Rz), t);
        assert_eq!(div_f64(1.0, 3.0, Rnd::Rp), t.next_up());
        assert_eq!(add_f64(1.0, 1e-300, Rnd::Rp), 1.0f64.next_up());
        assert_eq!(add_f64(1.0, 1e-300, Rnd::Rz), 1.0);
        assert_eq!(add_f64(-1.0, 1e-300, Rnd::Rz), (-1.0f64).next_up());
        assert_eq!(mul_f64(f64::MAX, 2.0, Rnd::Rz), f64::MAX);
    }

    #[test]
    fn int_conversions_round() {
        let big = (1u64 << 24) + 1;
        assert_eq!(int_to_float(false, big, Rnd::Rn, 24), (1u64 << 24) as f64);
        assert_eq!(
            int_to_float(false, big, Rnd::Rp, 24),
            ((1u64 << 24) + 2) as f64
        );
        assert_eq!(
            int_to_float(true, big, Rnd::Rm, 24),
            -(((1u64 << 24) + 2) as f64)
        );
        assert_eq!(int_to_float(true, big, Rnd::Rz, 24), -((1u64 << 24) as f64));
        assert_eq!(
            int_to_float(false, u64::MAX, Rnd::Rn, 53),
            18446744073709551616.0
        );
        assert_eq!(int_to_float(false, 7, Rnd::Rz, 24), 7.0);
    }

    #[test]
    fn rounding_to_half() {
        assert_eq!(HFmt::F16.round(1.0, 0.0), 0x3c00);
        // 1 + 2^-11 is the midpoint of 1 and 1 + 2^-10: ties to even,
        // unless the exact value lies beyond it.
        let mid = 1.0 + 2f64.powi(-11);
        assert_eq!(HFmt::F16.round(mid, 0.0), 0x3c00);
        assert_eq!(HFmt::F16.round(mid, 1e-30), 0x3c01);
        assert_eq!(HFmt::F16.round(-mid, -1e-30), 0xbc01);
        assert_eq!(HFmt::F16.round(65519.0, 0.0), 0x7bff);
        assert_eq!(HFmt::F16.round(65520.0, 0.0), 0x7c00);
        assert_eq!(HFmt::F16.round(65520.0, -1e-20), 0x7bff);
        assert_eq!(HFmt::F16.round(2f64.powi(-25), 0.0), 0);
        assert_eq!(HFmt::F16.round(2f64.powi(-25), 1e-40), 1);
        assert_eq!(HFmt::F16.round(3.0 * 2f64.powi(-25), 0.0), 2);
        for h in (0..0x7c00u16).step_by(7) {
            assert_eq!(HFmt::F16.round(f64::from(f16_to_f32(h)), 0.0), h);
        }
    }

    #[test]
    fn rounding_to_bfloat16() {
        let b = HFmt::BF16;
        assert_eq!(b.round(1.0, 0.0), 0x3f80);
        let mid = 1.0 + 2f64.powi(-8);
        assert_eq!(b.round(mid, 0.0), 0x3f80);
        assert_eq!(b.round(mid, 1e-30), 0x3f81);
        assert_eq!(b.round(-mid, -1e-30), 0xbf81);
        // The largest finite value and the overflow midpoint.
        let max = f64::from(bf16_to_f32(0x7f7f));
        assert_eq!(b.round(max, 0.0), 0x7f7f);
        assert_eq!(b.round(max + 2f64.powi(119), 0.0), 0x7f80);
        assert_eq!(b.round(-max - 2f64.powi(119), -1e-300), 0xff80);
        // Subnormals: 2^-133 is the smallest, half of it ties to zero.
        assert_eq!(b.round(2f64.powi(-133), 0.0), 1);
        assert_eq!(b.round(2f64.powi(-134), 0.0), 0);
        assert_eq!(b.round(2f64.powi(-134), 1e-300), 1);
        assert_eq!(b.round(f64::NAN, 0.0), CANONICAL_NAN_BF16);
        for h in (0..0x7f80u16).step_by(3) {
            assert_eq!(b.round(b.to_f64(h), 0.0), h);
        }
    }

    #[test]
    fn half_precision() {
        for (f, h) in [
            (1.0f32, 0x3c00u16),
            (-2.0, 0xc000),
            (65504.0, 0x7bff),
            (65520.0, 0x7c00),
            (5.960_464_5e-8, 0x0001),
            (2.980_232_2e-8, 0x0000),
            (0.1, 0x2e66),
        ] {
            assert_eq!(f32_to_f16(f), h, "{f}");
        }
        for h in 0..=0xffffu16 {
            let f = f16_to_f32(h);
            if !f.is_nan() {
                assert_eq!(f32_to_f16(f), h, "{h:#x}");
            }
        }
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
    }

    /// Distance in units in the last place between two f32 of one sign.
    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    /// Every 257th f32 (both signs, all exponents, subnormals included),
    /// and the boundaries.
    fn sweep() -> impl Iterator<Item = f32> {
        (0..=u32::MAX)
            .step_by(257)
            .chain([0x0000_0001, 0x0080_0000, 0x3f80_0000, 0x7f7f_ffff])
            .map(f32::from_bits)
    }

    #[test]
    fn ex2_is_within_one_ulp_of_exact_and_mostly_exact() {
        let (mut total, mut exact) = (0u64, 0u64);
        for a in sweep().filter(|a| !a.is_nan()) {
            let got = ex2_approx_f32(a);
            // f64's exp2 rounded to f32: the correctly rounded value but
            // for values within f64's error of a midpoint.
            let want = f64::from(a).exp2() as f32;
            assert!(ulps(got, want) <= 1, "2^{a:e}: {got:e}, want {want:e}");
            total += 1;
            exact += u64::from(got == want);
        }
        assert!(exact * 10_000 >= total * 9_999, "{exact} of {total} exact");
        assert_eq!(ex2_approx_f32(0.0), 1.0);
        assert_eq!(ex2_approx_f32(-0.0), 1.0);
        assert_eq!(ex2_approx_f32(10.0), 1024.0);
        assert_eq!(ex2_approx_f32(-3.0), 0.125);
        assert_eq!(ex2_approx_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(ex2_approx_f32(128.0), f32::INFINITY);
        assert_eq!(ex2_approx_f32(f32::NEG_INFINITY), 0.0);
        // The smallest subnormal, and the midpoint below it (to even: 0).
        assert_eq!(ex2_approx_f32(-149.0).to_bits(), 1);
        assert_eq!(ex2_approx_f32(-150.0), 0.0);
        assert!(ex2_approx_f32(f32::NAN).is_nan());
    }

    #[test]
    fn lg2_is_within_one_ulp_of_exact_and_mostly_exact() {
        let (mut total, mut exact) = (0u64, 0u64);
        for a in sweep().filter(|&a| a > 0.0 && a.is_finite()) {
            let got = lg2_approx_f32(a);
            let want = f64::from(a).log2() as f32;
            let close = if want == 0.0 {
                got == 0.0
            } else {
                got.signum() == want.signum() && ulps(got, want) <= 1
            };
            assert!(close, "log2({a:e}): {got:e}, want {want:e}");
            total += 1;
            exact += u64::from(got == want);
        }
        assert!(exact * 10_000 >= total * 9_999, "{exact} of {total} exact");
        for k in -149..128 {
            let a = f64::from(k).exp2() as f32;
            assert_eq!(lg2_approx_f32(a), k as f32, "log2(2^{k})");
        }
        assert_eq!(lg2_approx_f32(1.0).to_bits(), 0);
        assert_eq!(lg2_approx_f32(0.0), f32::NEG_INFINITY);
        assert_eq!(lg2_approx_f32(-0.0), f32::NEG_INFINITY);
        assert_eq!(lg2_approx_f32(f32::INFINITY), f32::INFINITY);
        assert!(lg2_approx_f32(-1.0).is_nan());
        assert!(lg2_approx_f32(f32::NEG_INFINITY).is_nan());
        assert!(lg2_approx_f32(f32::NAN).is_nan());
    }
}
