//! The engine's explicit AVX2 code: a warp's loads from shared memory as
//! gathers, its addresses checked as vector compares, its predicate masks
//! and PC updates. Each is a handful of vector instructions where the
//! compiler, left to the scalar loops of the baseline copy, emitted one to
//! several instructions per lane.
//!
//! The one place the engine reads memory through raw pointers: 32 lanes'
//! 4- or 8-byte elements fetched four at a time by `vpgatherqd` /
//! `vpgatherqq`, each extended to a 64-bit register value as
//! [`super::lanes::value`] extends it. Every lane's range is checked
//! against the slice here, before any pointer is formed, so the unsafe
//! code relies on nothing its caller promised.
//!
//! [`any_outside`] decides, four lanes per compare, whether a full warp's
//! access can take the direct paths. Written with scalar folds the same
//! checks compiled to some 200 scalar instructions per access, the largest
//! single cost of a shared-memory load.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Loads element `E` bytes wide at `at[l] + off` of `mem` for all 32
/// lanes into `out`, zero-extended, or sign-extended from 32 bits when
/// `signed32` (only for `E == 4`). False, with `out` untouched, if any
/// lane's address `at[l]` is not a multiple of `E`, any lane's element is
/// not inside `mem`, or `E` is not 4 or 8: the caller takes its scalar
/// path.
///
/// # Safety
/// The CPU must have AVX2 (the caller's `Launch::wide`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn gather<const E: usize>(
    mem: &[u8],
    at: &[u64; 32],
    off: u64,
    signed32: bool,
    out: &mut [u64; 32],
) -> bool {
    if E != 4 && E != 8 {
        return false;
    }
    // Every lane's last byte inside `mem`: `a + off + E <= len`, without
    // overflow (an address near u64::MAX fails the first comparison).
    // (No closures here: a closure does not inherit the function's target
    // features, and the call into it stays a call.)
    let Some(n) = (E as u64).checked_add(off) else {
        return false;
    };
    let Some(last) = (mem.len() as u64).checked_sub(n) else {
        return false;
    };
    if any_outside(at, E as u64 - 1, last, &[]) {
        return false;
    }
    // Gathers take signed offsets; `last` is below the slice's length,
    // which is at most isize::MAX, so every offset is positive.
    let base = mem.as_ptr().wrapping_add(off as usize);
    if E == 4 && mem.len() <= i32::MAX as usize {
        // Eight lanes per `vpgatherdd`: every address is below the length
        // (checked above), so its low 32 bits are the whole of it and a
        // positive i32.
        for q in 0..4 {
            let idx = low_halves(at, q);
            // SAFETY: AVX2 is enabled for this function (its caller
            // checked the CPU); each of the eight offsets names an element
            // `base + a .. base + a + 4` inside `mem` (checked above), so
            // the gather reads only bytes of `mem`.
            let w = unsafe { _mm256_i32gather_epi32::<1>(base.cast(), idx) };
            if signed32 {
                widen::<true>(w, out, q);
            } else {
                widen::<false>(w, out, q);
            }
        }
        return true;
    }
    for q in 0..8 {
        let l = 4 * q;
        let src = at[l..l + 4].as_ptr().cast::<__m256i>();
        // SAFETY: `src` points to `at[l..l + 4]`, four u64 (32 bytes) of a
        // live array; the load is unaligned.
        let idx = unsafe { _mm256_loadu_si256(src) };
        let v = if E == 4 {
            // SAFETY: AVX2 is enabled for this function (its caller
            // checked the CPU); each of the four offsets names an element
            // `base + a .. base + a + 4` inside `mem` (checked above), so
            // the gather reads only bytes of `mem`.
            let w = unsafe { _mm256_i64gather_epi32::<1>(base.cast(), idx) };
            if signed32 {
                _mm256_cvtepi32_epi64(w)
            } else {
                _mm256_cvtepu32_epi64(w)
            }
        } else {
            // SAFETY: as above, for elements of 8 bytes.
            unsafe { _mm256_i64gather_epi64::<1>(base.cast(), idx) }
        };
        let dst = out[l..l + 4].as_mut_ptr().cast::<__m256i>();
        // SAFETY: `dst` points to `out[l..l + 4]`, four u64 (32 bytes) of
        // a live, exclusively borrowed array; the store is unaligned.
        unsafe { _mm256_storeu_si256(dst, v) };
    }
    true
}

/// The low 32 bits of lanes `8q .. 8q + 8` of `v`, in one vector.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn low_halves(v: &[u64; 32], q: usize) -> __m256i {
    let (src_lo, src_hi) = (
        v[8 * q..8 * q + 4].as_ptr().cast::<__m256i>(),
        v[8 * q + 4..8 * q + 8].as_ptr().cast::<__m256i>(),
    );
    // SAFETY: `src_lo` points to `v[8q..8q + 4]`, four u64 (32 bytes) of
    // a live array; the load is unaligned.
    let lo = unsafe { _mm256_loadu_si256(src_lo) };
    // SAFETY: as above, `v[8q + 4..8q + 8]`.
    let hi = unsafe { _mm256_loadu_si256(src_hi) };
    // Each 64-bit lane's low half (dwords 0, 2, 4, 6) to the low 128 bits.
    let pick = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    let lo = _mm256_permutevar8x32_epi32(lo, pick);
    let hi = _mm256_permutevar8x32_epi32(hi, pick);
    _mm256_permute2x128_si256::<0x20>(lo, hi)
}

/// Writes the eight 32-bit values of `v` to lanes `8q .. 8q + 8` of `out`,
/// zero-extended, or sign-extended when `SIGNED`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn widen<const SIGNED: bool>(v: __m256i, out: &mut [u64; 32], q: usize) {
    let (a, b) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let (a, b) = if SIGNED {
        (_mm256_cvtepi32_epi64(a), _mm256_cvtepi32_epi64(b))
    } else {
        (_mm256_cvtepu32_epi64(a), _mm256_cvtepu32_epi64(b))
    };
    let dst = out[8 * q..8 * q + 4].as_mut_ptr().cast::<__m256i>();
    // SAFETY: `dst` points to `out[8q..8q + 4]`, four u64 (32 bytes) of a
    // live, exclusively borrowed array; the store is unaligned.
    unsafe { _mm256_storeu_si256(dst, a) };
    let dst = out[8 * q + 4..8 * q + 8].as_mut_ptr().cast::<__m256i>();
    // SAFETY: as above, `out[8q + 4..8q + 8]`.
    unsafe { _mm256_storeu_si256(dst, b) };
}

/// `fma.rn.f32` of a full warp without `.ftz`/`.sat`: `out = x * y + z`
/// rounded once, on the f32 in the low halves of the lanes, eight lanes
/// per `vfmadd`; a NaN result becomes the canonical NaN and every result is
/// zero-extended, as the scalar path writes it (`f32out`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn fma_rn_f32(x: &[u64; 32], y: &[u64; 32], z: &[u64; 32], out: &mut [u64; 32]) {
    for q in 0..4 {
        let (a, b, c) = (
            _mm256_castsi256_ps(low_halves(x, q)),
            _mm256_castsi256_ps(low_halves(y, q)),
            _mm256_castsi256_ps(low_halves(z, q)),
        );
        widen::<false>(fma8(a, b, c), out, q);
    }
}

/// Register `r`'s 32 lanes: `regs[32r .. 32r + 32]` (a warp's register
/// file is lane-major per register).
#[inline(always)]
fn reg(regs: &[u64], r: u32) -> &[u64; 32] {
    let b = r as usize * 32;
    regs[b..b + 32].try_into().expect("32 lanes")
}

/// [`reg`], to write.
#[inline(always)]
fn reg_mut(regs: &mut [u64], r: u32) -> &mut [u64; 32] {
    let b = r as usize * 32;
    (&mut regs[b..b + 32]).try_into().expect("32 lanes")
}

/// An operand of [`fma_rn_f32_regs`]: a register, or an immediate (its
/// low 32 bits, the f32).
#[derive(Debug, Clone, Copy)]
pub(super) enum F32Src {
    Reg(u32),
    Imm(u32),
}

impl F32Src {
    /// A register or an immediate operand; None for any other.
    pub(super) fn of(s: crate::ir::Src) -> Option<F32Src> {
        match s {
            crate::ir::Src::Reg(r) => Some(F32Src::Reg(r)),
            crate::ir::Src::Imm(v) => Some(F32Src::Imm(v as u32)),
            _ => None,
        }
    }

    /// Lanes `4k .. 4k + 4` of the operand as they are held, 64 bits
    /// each: the f32 in the low half of each, whatever is in the high
    /// half (computed on alongside and dropped by [`put4`]).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    #[inline]
    fn four(self, regs: &[u64], k: usize) -> __m256 {
        match self {
            F32Src::Reg(r) => _mm256_castsi256_ps(lanes4(reg(regs, r), k)),
            F32Src::Imm(v) => _mm256_castsi256_ps(_mm256_set1_epi64x(i64::from(v))),
        }
    }
}

/// Lanes `4k .. 4k + 4` of `v`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn lanes4(v: &[u64; 32], k: usize) -> __m256i {
    let src = v[4 * k..4 * k + 4].as_ptr().cast::<__m256i>();
    // SAFETY: `src` points to `v[4k..4k + 4]`, four u64 (32 bytes) of a
    // live array; the load is unaligned.
    unsafe { _mm256_loadu_si256(src) }
}

/// Writes the f32 results in the low halves of `v`'s 64-bit lanes to
/// lanes `4k .. 4k + 4` of `out`, zero-extended (the high halves, results
/// of whatever the operands held there, dropped).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn put4(v: __m256i, out: &mut [u64; 32], k: usize) {
    let v = _mm256_and_si256(v, _mm256_set1_epi64x(0xffff_ffff));
    let dst = out[4 * k..4 * k + 4].as_mut_ptr().cast::<__m256i>();
    // SAFETY: `dst` points to `out[4k..4k + 4]`, four u64 (32 bytes) of a
    // live, exclusively borrowed array; the store is unaligned.
    unsafe { _mm256_storeu_si256(dst, v) };
}

/// [`fma_rn_f32`] of three registers into register `d`, in the register
/// file itself: each group of four lanes reads its operands before it
/// writes the same lanes of `d`, so `d` may be any of them. No copy of the
/// operands (three times 256 bytes), which cost more than the product.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn fma_rn_f32_regs(regs: &mut [u64], d: u32, x: u32, y: u32, z: u32) {
    for k in 0..8 {
        let (a, b, c) = (
            _mm256_castsi256_ps(lanes4(reg(regs, x), k)),
            _mm256_castsi256_ps(lanes4(reg(regs, y), k)),
            _mm256_castsi256_ps(lanes4(reg(regs, z), k)),
        );
        put4(fma8(a, b, c), reg_mut(regs, d), k);
    }
}

/// [`fma_rn_f32_regs`] where some operands are immediates (the
/// polynomial coefficients of `expf`, `erff` and the like).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn fma_rn_f32_mixed(regs: &mut [u64], d: u32, x: F32Src, y: F32Src, z: F32Src) {
    for k in 0..8 {
        let (a, b, c) = (x.four(regs, k), y.four(regs, k), z.four(regs, k));
        put4(fma8(a, b, c), reg_mut(regs, d), k);
    }
}

/// `add`, `sub`, `mul` or `div` of f32 rounding to nearest (`div.rn`,
/// and `div.approx`/`div.full`, which the engine computes exactly), with or
/// without `.ftz`, no `.sat`, for a full warp into register `d`, in the
/// register file itself as [`fma_rn_f32_mixed`]. With `.ftz` subnormal
/// operands and results become zeros of their sign; a NaN result becomes
/// the canonical NaN; results are zero-extended: the bits of the scalar
/// path (`exec::fbin`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn f32_bin(
    regs: &mut [u64],
    op: crate::ir::FBin,
    ftz: bool,
    d: u32,
    x: F32Src,
    y: F32Src,
) {
    use crate::ir::FBin;
    match (op, ftz) {
        (FBin::Add, false) => f32_bin_as::<0, false>(regs, d, x, y),
        (FBin::Sub, false) => f32_bin_as::<1, false>(regs, d, x, y),
        (FBin::Mul, false) => f32_bin_as::<2, false>(regs, d, x, y),
        (FBin::Div, false) => f32_bin_as::<3, false>(regs, d, x, y),
        (FBin::Add, true) => f32_bin_as::<0, true>(regs, d, x, y),
        (FBin::Sub, true) => f32_bin_as::<1, true>(regs, d, x, y),
        (FBin::Mul, true) => f32_bin_as::<2, true>(regs, d, x, y),
        (FBin::Div, true) => f32_bin_as::<3, true>(regs, d, x, y),
        // Not in `Fast::F32_BIN_OPS`: never decoded to this form.
        _ => {}
    }
}

/// [`f32_bin`] for one operation (0 add, 1 sub, 2 mul, 3 div) and `.ftz`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn f32_bin_as<const OP: u8, const FTZ: bool>(regs: &mut [u64], d: u32, x: F32Src, y: F32Src) {
    let canonical = _mm256_castsi256_ps(_mm256_set1_epi32(crate::float::CANONICAL_NAN_F32 as i32));
    for k in 0..8 {
        let (mut a, mut b) = (x.four(regs, k), y.four(regs, k));
        if FTZ {
            (a, b) = (flush8(a), flush8(b));
        }
        let mut r = match OP {
            0 => _mm256_add_ps(a, b),
            1 => _mm256_sub_ps(a, b),
            2 => _mm256_mul_ps(a, b),
            _ => _mm256_div_ps(a, b),
        };
        if FTZ {
            r = flush8(r);
        }
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(r, r);
        let r = _mm256_castps_si256(_mm256_blendv_ps(r, canonical, nan));
        put4(r, reg_mut(regs, d), k);
    }
}

/// A unary f32 operation of `Fast::FUN_OPS` (`.ftz` or not, no `.sat`)
/// for a full warp into register `d`, in the register file itself as
/// [`f32_bin`]: the bits of the scalar path (`exec::fun`). With `.ftz` a
/// subnormal operand is a zero of its sign and so is a subnormal result;
/// a NaN result is the canonical NaN, except for `neg`, which flips the
/// sign of whatever it is given.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(super) fn f32_un(regs: &mut [u64], op: crate::ir::FUn, ftz: bool, d: u32, x: F32Src) {
    use crate::ir::FUn;
    match op {
        FUn::Abs => f32_un_as::<0>(regs, ftz, d, x),
        FUn::Neg => f32_un_as::<1>(regs, ftz, d, x),
        FUn::Rcp | FUn::RcpApprox => f32_un_as::<2>(regs, ftz, d, x),
        FUn::Sqrt | FUn::SqrtApprox => f32_un_as::<3>(regs, ftz, d, x),
        FUn::Rsqrt => f32_un_as::<4>(regs, ftz, d, x),
        FUn::Ex2 => f32_un_as::<5>(regs, ftz, d, x),
        FUn::Lg2 => f32_un_as::<6>(regs, ftz, d, x),
        // Not in `Fast::FUN_OPS`: never decoded to this form.
        FUn::Sin | FUn::Cos | FUn::Tanh | FUn::Tf32 => {}
    }
}

/// [`f32_un`] for one operation: 0 abs, 1 neg, 2 rcp, 3 sqrt, 4 rsqrt,
/// 5 ex2, 6 lg2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn f32_un_as<const OP: u8>(regs: &mut [u64], ftz: bool, d: u32, x: F32Src) {
    let canonical = _mm256_castsi256_ps(_mm256_set1_epi32(crate::float::CANONICAL_NAN_F32 as i32));
    let sign = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
    let one = _mm256_set1_ps(1.0);
    for k in 0..8 {
        let mut a = x.four(regs, k);
        if ftz {
            a = flush8(a);
        }
        let mut r = match OP {
            0 => _mm256_andnot_ps(sign, a),
            1 => _mm256_xor_ps(a, sign),
            2 => _mm256_div_ps(one, a),
            3 => _mm256_sqrt_ps(a),
            4 => _mm256_div_ps(one, _mm256_sqrt_ps(a)),
            5 => ex2_4(a),
            _ => lg2_4(a),
        };
        if ftz {
            r = flush8(r);
        }
        if OP != 1 {
            let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(r, r);
            r = _mm256_blendv_ps(r, canonical, nan);
        }
        put4(_mm256_castps_si256(r), reg_mut(regs, d), k);
    }
}

/// The f32 in the low halves of `v`'s four 64-bit lanes, as f64.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn low_f32_as_f64(v: __m256) -> __m256d {
    let pick = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
    let packed = _mm256_permutevar8x32_ps(v, pick);
    _mm256_cvtps_pd(_mm256_castps256_ps128(packed))
}

/// Four f64 rounded to f32, each in the low half of a 64-bit lane (the
/// high half zero).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn f64_as_low_f32(v: __m256d) -> __m256 {
    let packed = _mm256_castps_si256(_mm256_castps128_ps256(_mm256_cvtpd_ps(v)));
    _mm256_castsi256_ps(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(packed)))
}

/// `float::ex2_approx_f32` of the f32 in the low halves of four 64-bit
/// lanes, with the same f64 operations in the same order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn ex2_4(a: __m256) -> __m256 {
    use crate::float::EX2_POLY;
    let x = low_f32_as_f64(a);
    let nan = _mm256_cmp_pd::<_CMP_UNORD_Q>(x, x);
    let c = _mm256_min_pd(
        _mm256_max_pd(x, _mm256_set1_pd(-200.0)),
        _mm256_set1_pd(200.0),
    );
    let n = _mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(c);
    let r = _mm256_sub_pd(c, n);
    let mut p = _mm256_set1_pd(EX2_POLY[0]);
    for &k in &EX2_POLY[1..] {
        p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(k));
    }
    let e = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
    let e = _mm256_slli_epi64::<52>(_mm256_add_epi64(e, _mm256_set1_epi64x(1023)));
    let v = _mm256_mul_pd(p, _mm256_castsi256_pd(e));
    f64_as_low_f32(_mm256_blendv_pd(v, x, nan))
}

/// `float::lg2_approx_f32` of the f32 in the low halves of four 64-bit
/// lanes, with the same f64 operations in the same order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn lg2_4(a: __m256) -> __m256 {
    use crate::float::{LG2_POLY, SQRT2_MANTISSA};
    let x = low_f32_as_f64(a);
    let zero = _mm256_setzero_pd();
    let nan = _mm256_or_pd(
        _mm256_cmp_pd::<_CMP_UNORD_Q>(x, x),
        _mm256_cmp_pd::<_CMP_LT_OQ>(x, zero),
    );
    let is_zero = _mm256_cmp_pd::<_CMP_EQ_OQ>(x, zero);
    let inf = _mm256_set1_pd(f64::INFINITY);
    let is_inf = _mm256_cmp_pd::<_CMP_EQ_OQ>(x, inf);
    let bits = _mm256_castpd_si256(x);
    let mantissa = _mm256_and_si256(bits, _mm256_set1_epi64x((1 << 52) - 1));
    // All ones where the mantissa is above sqrt(2)'s.
    let big = _mm256_cmpgt_epi64(mantissa, _mm256_set1_epi64x(SQRT2_MANTISSA as i64));
    let m_field = _mm256_blendv_epi8(
        _mm256_set1_epi64x(1023 << 52),
        _mm256_set1_epi64x(1022 << 52),
        big,
    );
    let m = _mm256_castsi256_pd(_mm256_or_si256(mantissa, m_field));
    // The exponent field, one more where `big` (minus all ones), as an
    // f64: 2^52 + field, less 2^52, exactly.
    let e_field = _mm256_sub_epi64(_mm256_srli_epi64::<52>(bits), big);
    let two52 = _mm256_set1_pd(4_503_599_627_370_496.0);
    let e_field = _mm256_sub_pd(
        _mm256_castsi256_pd(_mm256_or_si256(e_field, _mm256_castpd_si256(two52))),
        two52,
    );
    let e = _mm256_sub_pd(e_field, _mm256_set1_pd(1023.0));
    let one = _mm256_set1_pd(1.0);
    let s = _mm256_div_pd(_mm256_sub_pd(m, one), _mm256_add_pd(m, one));
    let z = _mm256_mul_pd(s, s);
    let mut p = _mm256_set1_pd(LG2_POLY[0]);
    for &k in &LG2_POLY[1..] {
        p = _mm256_add_pd(_mm256_mul_pd(p, z), _mm256_set1_pd(k));
    }
    let v = _mm256_add_pd(e, _mm256_mul_pd(s, p));
    let v = _mm256_blendv_pd(v, _mm256_set1_pd(f64::NEG_INFINITY), is_zero);
    let v = _mm256_blendv_pd(v, inf, is_inf);
    let v = _mm256_blendv_pd(v, _mm256_set1_pd(f64::NAN), nan);
    f64_as_low_f32(v)
}

/// Subnormal f32 lanes of `v` made zeros of their sign (`.ftz`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn flush8(v: __m256) -> __m256 {
    let bits = _mm256_castps_si256(v);
    let exponent = _mm256_and_si256(bits, _mm256_set1_epi32(0x7f80_0000));
    let tiny = _mm256_cmpeq_epi32(exponent, _mm256_setzero_si256());
    let sign = _mm256_and_si256(bits, _mm256_set1_epi32(i32::MIN));
    _mm256_castsi256_ps(_mm256_blendv_epi8(bits, sign, tiny))
}

/// `a * b + c` rounded once, a NaN made the canonical NaN, as 32-bit lanes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
fn fma8(a: __m256, b: __m256, c: __m256) -> __m256i {
    let canonical = _mm256_castsi256_ps(_mm256_set1_epi32(crate::float::CANONICAL_NAN_F32 as i32));
    let r = _mm256_fmadd_ps(a, b, c);
    let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(r, r);
    _mm256_castps_si256(_mm256_blendv_ps(r, canonical, nan))
}

/// A full warp's `ld.shared` of one 4-byte element into register `d`, at
/// `[base + off]` with `base` a 32-bit register (the address is
/// `base + off` modulo 2^32): addresses formed, checked and gathered
/// eight lanes at a time in 32-bit arithmetic, without the 32 64-bit
/// addresses of the general path. False, with nothing written, if any
/// lane's element is misaligned or not inside `mem`: the caller takes its
/// general path, which reports the first faulting lane.
///
/// # Safety
/// The CPU must have AVX2 (the caller's `Launch::wide`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn ld_shared_narrow4(
    regs: &mut [u64],
    d: u32,
    base: u32,
    off: u64,
    mem: &[u8],
    signed32: bool,
) -> bool {
    let Some(at) = narrow_offsets4(reg(regs, base), off, mem.len()) else {
        return false;
    };
    let ptr = mem.as_ptr();
    let out = reg_mut(regs, d);
    for (q, &idx) in at.iter().enumerate() {
        // SAFETY: AVX2 is enabled for this function (its caller checked
        // the CPU); each of the eight offsets is a multiple of 4 at most
        // `mem.len() - 4` (checked above, all lanes, before any read), so
        // the gather reads only bytes of `mem`.
        let w = unsafe { _mm256_i32gather_epi32::<1>(ptr.cast(), idx) };
        if signed32 {
            widen::<true>(w, out, q);
        } else {
            widen::<false>(w, out, q);
        }
    }
    true
}

/// The offsets `base + off` (modulo 2^32) of a full warp's 4-byte
/// elements in a memory of `len` bytes, eight lanes per vector, `base`
/// being the lanes of a 32-bit register; None if any is misaligned or its
/// element not inside (or `len` is 2^31 or more: gathers take signed
/// 32-bit offsets).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn narrow_offsets4(base: &[u64; 32], off: u64, len: usize) -> Option<[__m256i; 4]> {
    // The last element's offset.
    let last = len.checked_sub(4).filter(|&l| l <= i32::MAX as usize)?;
    let last = _mm256_set1_epi32(last as i32);
    let off = _mm256_set1_epi32(off as u32 as i32);
    let three = _mm256_set1_epi32(3);
    let mut at = [_mm256_setzero_si256(); 4];
    let mut bad = _mm256_setzero_si256();
    for (q, at) in at.iter_mut().enumerate() {
        // The low 32 bits of `base + off` are those of the low halves'
        // sum: the address modulo 2^32.
        let a = _mm256_add_epi32(low_halves(base, q), off);
        bad = _mm256_or_si256(bad, _mm256_and_si256(a, three));
        // Above `last` (unsigned): max(a, last) is not `last`.
        let inside = _mm256_cmpeq_epi32(_mm256_max_epu32(a, last), last);
        bad = _mm256_or_si256(bad, _mm256_andnot_si256(inside, _mm256_set1_epi32(-1)));
        *at = a;
    }
    (_mm256_testz_si256(bad, bad) == 1).then_some(at)
}

/// A full warp's `st.shared` of one 4-byte element, the low 32 bits of
/// `src` (a register or an immediate; any other is refused), at
/// `[base + off]` with `base` a 32-bit register: addresses formed and
/// checked as [`ld_shared_narrow4`] forms them, then the elements written
/// in lane order, so that where lanes share an address the highest one's
/// value stays, as on the general path. False, with nothing written, if
/// any lane's element is misaligned or not inside `mem`: the caller takes
/// its general path, which reports the first faulting lane.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn st_shared_narrow4(
    regs: &[u64],
    src: crate::ir::Src,
    base: u32,
    off: u64,
    mem: &mut [u8],
) -> bool {
    let Some(at) = narrow_offsets4(reg(regs, base), off, mem.len()) else {
        return false;
    };
    let mut offs = [0u32; 32];
    for (q, &a) in at.iter().enumerate() {
        let dst = offs[8 * q..8 * q + 8].as_mut_ptr().cast::<__m256i>();
        // SAFETY: `dst` points to `offs[8q..8q + 8]`, eight u32 (32 bytes)
        // of a live local array; the store is unaligned.
        unsafe { _mm256_storeu_si256(dst, a) };
    }
    let ptr = mem.as_mut_ptr();
    let put = |o: u32, v: u64| {
        // SAFETY: every offset is at most `mem.len() - 4` (checked above,
        // all lanes, before any write): the four bytes from it are bytes
        // of `mem`.
        let at = unsafe { ptr.add(o as usize) }.cast::<[u8; 4]>();
        // SAFETY: `at` points to four bytes of `mem` (above), which is
        // exclusively borrowed; the write is unaligned.
        unsafe { at.write_unaligned((v as u32).to_le_bytes()) };
    };
    match src {
        crate::ir::Src::Reg(r) => {
            for (&o, &v) in offs.iter().zip(reg(regs, r)) {
                put(o, v);
            }
        }
        crate::ir::Src::Imm(v) => {
            for &o in &offs {
                put(o, v);
            }
        }
        // Nothing written yet.
        crate::ir::Src::NotPred(_) | crate::ir::Src::Sreg(_) => return false,
    }
    true
}

/// `shfl.sync` of a full warp whose lane operand `b` and clamp operand
/// `c` are the same in every lane (as nvcc emits them: immediates, or
/// registers set from constants): register `d` gets, in each lane, the
/// low 32 bits of register `a` in its source lane (zero-extended), and
/// `dp`, where given, whether that source was in range (1 or 0); a lane
/// out of range reads its own value. The same rules as the general path
/// (`Launch::warp_op`), computed eight lanes per vector: each mode's
/// source lane and test, then the 32 values picked by four in-register
/// permutes per group of eight.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
#[allow(clippy::too_many_arguments)]
pub(super) fn shfl_uniform(
    regs: &mut [u64],
    mode: crate::ir::ShflMode,
    d: u32,
    dp: Option<u32>,
    a: u32,
    b: u32,
    c: u32,
) {
    use crate::ir::ShflMode;
    let bv = (b & 31) as i32;
    let cval = (c & 31) as i32;
    let segmask = ((c >> 8) & 31) as i32;
    let vals = reg(regs, a);
    let v = [0, 1, 2, 3].map(|q| low_halves(vals, q));
    let seg = _mm256_set1_epi32(segmask);
    let not_seg = _mm256_set1_epi32(!segmask);
    let cvv = _mm256_and_si256(_mm256_set1_epi32(cval), not_seg);
    let bvv = _mm256_set1_epi32(bv);
    let seven = _mm256_set1_epi32(7);
    let mut out = [_mm256_setzero_si256(); 4];
    let mut ok = [_mm256_setzero_si256(); 4];
    for q in 0..4 {
        let base = 8 * q as i32;
        let lane = _mm256_setr_epi32(
            base,
            base + 1,
            base + 2,
            base + 3,
            base + 4,
            base + 5,
            base + 6,
            base + 7,
        );
        let max_lane = _mm256_or_si256(_mm256_and_si256(lane, seg), cvv);
        let (j, pval) = match mode {
            // j >= max_lane, signed: a negative j never is.
            ShflMode::Up => {
                let j = _mm256_sub_epi32(lane, bvv);
                (
                    j,
                    _mm256_andnot_si256(_mm256_cmpgt_epi32(max_lane, j), _mm256_set1_epi32(-1)),
                )
            }
            ShflMode::Down => {
                let j = _mm256_add_epi32(lane, bvv);
                (
                    j,
                    _mm256_andnot_si256(_mm256_cmpgt_epi32(j, max_lane), _mm256_set1_epi32(-1)),
                )
            }
            ShflMode::Bfly => {
                let j = _mm256_xor_si256(lane, bvv);
                (
                    j,
                    _mm256_andnot_si256(_mm256_cmpgt_epi32(j, max_lane), _mm256_set1_epi32(-1)),
                )
            }
            ShflMode::Idx => {
                let j =
                    _mm256_or_si256(_mm256_and_si256(lane, seg), _mm256_and_si256(bvv, not_seg));
                (
                    j,
                    _mm256_andnot_si256(_mm256_cmpgt_epi32(j, max_lane), _mm256_set1_epi32(-1)),
                )
            }
        };
        // The source lane: j (in 0..32 wherever the test passed), else
        // the lane itself.
        let src = _mm256_blendv_epi8(lane, _mm256_and_si256(j, _mm256_set1_epi32(31)), pval);
        // Its value: the permute of each group of eight, kept where the
        // source lies in that group.
        let group = _mm256_srli_epi32::<3>(src);
        let at = _mm256_and_si256(src, seven);
        let mut r = _mm256_setzero_si256();
        for (g, &vg) in v.iter().enumerate() {
            let from = _mm256_cmpeq_epi32(group, _mm256_set1_epi32(g as i32));
            r = _mm256_blendv_epi8(r, _mm256_permutevar8x32_epi32(vg, at), from);
        }
        out[q] = r;
        ok[q] = _mm256_srli_epi32::<31>(pval);
    }
    // Written after every lane was read (`d` may be `a`).
    for (q, &r) in out.iter().enumerate() {
        widen::<false>(r, reg_mut(regs, d), q);
    }
    if let Some(p) = dp {
        for (q, &r) in ok.iter().enumerate() {
            widen::<false>(r, reg_mut(regs, p), q);
        }
    }
}

/// Whether any of the 32 addresses `at` is misaligned (`a & align != 0`),
/// above `last`, or inside one of `holes` (`lo <= a < lo + n` for a hole
/// `(lo, n)`, without overflow: `a - lo < n` in wrapping arithmetic).
///
/// Unsigned compares are signed compares of values with their top bit
/// flipped (AVX2 compares only signed 64-bit integers).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn any_outside(at: &[u64; 32], align: u64, last: u64, holes: &[(u64, u64)]) -> bool {
    let top = _mm256_set1_epi64x(i64::MIN);
    let flip = |x: u64| (x ^ (1 << 63)) as i64;
    let align = _mm256_set1_epi64x(align as i64);
    let last = _mm256_set1_epi64x(flip(last));
    let mut bad = _mm256_setzero_si256();
    let mut v = [_mm256_setzero_si256(); 8];
    for (q, v) in v.iter_mut().enumerate() {
        let src = at[4 * q..4 * q + 4].as_ptr().cast::<__m256i>();
        // SAFETY: `src` points to `at[4q..4q + 4]`, four u64 (32 bytes) of
        // a live array; the load is unaligned.
        *v = unsafe { _mm256_loadu_si256(src) };
        bad = _mm256_or_si256(bad, _mm256_and_si256(*v, align));
        let above = _mm256_cmpgt_epi64(_mm256_xor_si256(*v, top), last);
        bad = _mm256_or_si256(bad, above);
    }
    for &(lo, n) in holes {
        let lo = _mm256_set1_epi64x(lo as i64);
        let n = _mm256_set1_epi64x(flip(n));
        for v in v {
            let d = _mm256_xor_si256(_mm256_sub_epi64(v, lo), top);
            bad = _mm256_or_si256(bad, _mm256_cmpgt_epi64(n, d));
        }
    }
    _mm256_testz_si256(bad, bad) == 0
}

/// The lanes whose value has bit 0 set: the lanes where a predicate
/// register is true.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn pred_mask(p: &[u64; 32]) -> u32 {
    let mut set = 0u32;
    for q in 0..8 {
        let src = p[4 * q..4 * q + 4].as_ptr().cast::<__m256i>();
        // SAFETY: `src` points to `p[4q..4q + 4]`, four u64 (32 bytes) of a
        // live array; the load is unaligned.
        let v = unsafe { _mm256_loadu_si256(src) };
        // Bit 0 to the sign bit, whose four copies `movmskpd` collects.
        let top = _mm256_castsi256_pd(_mm256_slli_epi64::<63>(v));
        set |= (_mm256_movemask_pd(top) as u32) << (4 * q);
    }
    set
}

/// Sets `pc[l] = to` in the lanes of `lanes`, eight lanes per blend.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(super) fn set_pcs(pc: &mut [u32; 32], lanes: u32, to: u32) {
    let bits = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    let to = _mm256_set1_epi32(to as i32);
    for q in 0..4 {
        let m = _mm256_set1_epi32(((lanes >> (8 * q)) & 0xff) as i32);
        let sel = _mm256_cmpeq_epi32(_mm256_and_si256(m, bits), bits);
        let at = pc[8 * q..8 * q + 8].as_mut_ptr().cast::<__m256i>();
        // SAFETY: `at` points to `pc[8q..8q + 8]`, eight u32 (32 bytes) of
        // a live, exclusively borrowed array; the load is unaligned.
        let v = unsafe { _mm256_loadu_si256(at) };
        let v = _mm256_blendv_epi8(v, to, sel);
        // SAFETY: as above, for the store.
        unsafe { _mm256_storeu_si256(at, v) };
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// The 4-byte element at `at` of `mem` as a register value:
    /// zero-extended, or sign-extended when `signed`.
    fn element(mem: &[u8], at: usize, signed: bool) -> u64 {
        let w = u32::from_le_bytes(mem[at..at + 4].try_into().unwrap());
        if signed {
            w as i32 as i64 as u64
        } else {
            u64::from(w)
        }
    }

    #[test]
    fn gathers_what_the_scalar_reads_read() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let mem: Vec<u8> = (0..1024u32).map(|i| (i * 37 + 11) as u8).collect();
        let at: [u64; 32] = std::array::from_fn(|l| ((l * 29) % 250) as u64 * 4);
        for signed in [false, true] {
            let mut out = [0u64; 32];
            // SAFETY: AVX2 checked above.
            assert!(unsafe { gather::<4>(&mem, &at, 4, signed, &mut out) });
            for l in 0..32 {
                let want = element(&mem, at[l] as usize + 4, signed);
                assert_eq!(out[l], want, "lane {l}");
            }
        }
        let at8: [u64; 32] = std::array::from_fn(|l| ((l * 29) % 120) as u64 * 8);
        let mut out = [0u64; 32];
        // SAFETY: AVX2 checked above.
        assert!(unsafe { gather::<8>(&mem, &at8, 0, false, &mut out) });
        for l in 0..32 {
            let o = at8[l] as usize;
            assert_eq!(
                out[l],
                u64::from_le_bytes(mem[o..o + 8].try_into().unwrap())
            );
        }
        // One lane past the end, one misaligned, one near 2^64: refused,
        // nothing written.
        for (e8, bad) in [
            (false, 1024),
            (false, 1022),
            (true, 1020),
            (true, u64::MAX - 7),
        ] {
            let mut far = if e8 { at8 } else { at };
            far[31] = bad;
            let mut out = [7u64; 32];
            let done = if e8 {
                // SAFETY: AVX2 checked above.
                unsafe { gather::<8>(&mem, &far, 0, false, &mut out) }
            } else {
                // SAFETY: AVX2 checked above.
                unsafe { gather::<4>(&mem, &far, 0, false, &mut out) }
            };
            assert!(!done, "{bad}");
            assert_eq!(out, [7u64; 32]);
        }
    }

    /// A xorshift generator for the tests below.
    fn rng(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    #[test]
    fn fma_in_the_register_file_is_the_fma_of_copies_whatever_aliases() {
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            return;
        }
        let mut next = rng(0x1234_5678_9abc_def1);
        let specials = [
            0x7fc0_0001u32,
            0xff80_0000,
            0x8000_0000,
            0x0000_0001,
            0x7f7f_ffff,
        ];
        for round in 0..500 {
            // Four registers; high halves of the lanes hold garbage the
            // operation must ignore.
            let mut regs: Vec<u64> = (0..128)
                .map(|i| {
                    let lo = if i % 7 == 0 {
                        specials[(i / 7) % specials.len()]
                    } else {
                        f32::from_bits(next() as u32 & 0x3fff_ffff | 0x3000_0000).to_bits()
                    };
                    (next() << 32) | u64::from(lo)
                })
                .collect();
            let (d, x, y, z) = [(3, 0, 1, 2), (0, 0, 1, 2), (1, 0, 1, 1), (2, 2, 2, 2)][round % 4];
            let copy = |r: u32, regs: &Vec<u64>| -> [u64; 32] {
                regs[r as usize * 32..r as usize * 32 + 32]
                    .try_into()
                    .unwrap()
            };
            // Each operand a register or, in some rounds, an immediate
            // (high bits set: only the low 32 count).
            let imm = next();
            let pick = |r: u32, k: usize| {
                if (round / 4 + k).is_multiple_of(4) {
                    (F32Src::Imm(imm as u32), [imm & 0xffff_ffff; 32])
                } else {
                    (F32Src::Reg(r), copy(r, &regs))
                }
            };
            let ((sx, a), (sy, b), (sz, c)) = (pick(x, 0), pick(y, 1), pick(z, 2));
            let mut want = [0u64; 32];
            // SAFETY: AVX2 and FMA checked above.
            unsafe { fma_rn_f32(&a, &b, &c, &mut want) };
            match (sx, sy, sz) {
                (F32Src::Reg(x), F32Src::Reg(y), F32Src::Reg(z)) => {
                    // SAFETY: as above.
                    unsafe { fma_rn_f32_regs(&mut regs, d, x, y, z) }
                }
                // SAFETY: as above.
                _ => unsafe { fma_rn_f32_mixed(&mut regs, d, sx, sy, sz) },
            }
            assert_eq!(copy(d, &regs), want, "d{d} = {sx:?} * {sy:?} + {sz:?}");
        }
    }

    #[test]
    fn narrow_shared_loads_read_what_the_scalar_reads_read() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let mem: Vec<u8> = (0..1024u32).map(|i| (i * 37 + 11) as u8).collect();
        let mut next = rng(0x0bad_cafe_f00d_1234);
        for round in 0..400 {
            let signed = round % 2 == 1;
            // Register values whose 32-bit sum with the offset lands in
            // `mem`, some through the 2^32 wrap (a negative term in the
            // register, a positive one in the offset), with garbage above
            // bit 31 that the 32-bit arithmetic drops.
            let off: u64 = [0, 4, 64, 1020, 0xffff_fffc][round % 5];
            let mut regs = vec![0u64; 64];
            for l in 0..32 {
                let at = (next() % 256) * 4;
                regs[32 + l] = (next() << 32) | (at.wrapping_sub(off) & 0xffff_ffff);
            }
            let before = regs.clone();
            // SAFETY: AVX2 checked above.
            assert!(unsafe { ld_shared_narrow4(&mut regs, 0, 1, off, &mem, signed) });
            for l in 0..32 {
                let at = (before[32 + l].wrapping_add(off) & 0xffff_ffff) as usize;
                let want = element(&mem, at, signed);
                assert_eq!(regs[l], want, "lane {l}, offset {off:#x}");
            }
            assert_eq!(regs[32..], before[32..], "the address register is kept");
            // The destination may be the address register itself.
            let mut same = before.clone();
            // SAFETY: AVX2 checked above.
            assert!(unsafe { ld_shared_narrow4(&mut same, 1, 1, off, &mem, signed) });
            assert_eq!(same[32..], regs[..32]);
        }
        // One lane past the end, misaligned, or far out (also past 2^31):
        // refused, nothing written.
        for bad in [1024u64, 1021, 1022, 0x8000_0000, 0xffff_fffc] {
            let mut regs = vec![7u64; 64];
            for l in 0..32 {
                regs[32 + l] = l as u64 * 4;
            }
            regs[63] = bad;
            let before = regs.clone();
            // SAFETY: AVX2 checked above.
            let done = unsafe { ld_shared_narrow4(&mut regs, 0, 1, 0, &mem, false) };
            assert!(!done, "{bad:#x}");
            assert_eq!(regs, before);
        }
        // A shared memory smaller than one element: refused.
        let mut regs = vec![0u64; 64];
        // SAFETY: AVX2 checked above.
        assert!(!unsafe { ld_shared_narrow4(&mut regs, 0, 1, 0, &[0u8; 3], false) });
    }

    /// `shfl.sync`'s definition in the PTX ISA, for a full warp.
    fn shfl_scalar(
        mode: crate::ir::ShflMode,
        vals: &[u64; 32],
        b: u32,
        c: u32,
    ) -> ([u64; 32], [u64; 32]) {
        use crate::ir::ShflMode;
        let (bval, clamp, segmask) = ((b & 31) as i32, (c & 31) as i32, ((c >> 8) & 31) as i32);
        let mut out = [0u64; 32];
        let mut ok = [0u64; 32];
        for lane in 0..32i32 {
            let max_lane = (lane & segmask) | (clamp & !segmask);
            let min_lane = lane & segmask;
            let (j, pval) = match mode {
                ShflMode::Up => (lane - bval, lane - bval >= max_lane),
                ShflMode::Down => (lane + bval, lane + bval <= max_lane),
                ShflMode::Bfly => (lane ^ bval, (lane ^ bval) <= max_lane),
                ShflMode::Idx => {
                    let j = min_lane | (bval & !segmask);
                    (j, j <= max_lane)
                }
            };
            let src = if pval { j } else { lane } as usize;
            out[lane as usize] = vals[src] & 0xffff_ffff;
            ok[lane as usize] = u64::from(pval);
        }
        (out, ok)
    }

    #[test]
    fn uniform_shuffles_agree_with_the_ptx_definition() {
        use crate::ir::ShflMode;
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let mut next = rng(0x5eed_0f5e_ed0f_5eed);
        for mode in [ShflMode::Up, ShflMode::Down, ShflMode::Bfly, ShflMode::Idx] {
            for width in [32u32, 16, 8, 4, 2, 1] {
                // What `__shfl_*_sync(mask, v, b, width)` passes: the clamp
                // (31 for up: 0) and the segment mask.
                let clamp = if mode == ShflMode::Up { 0 } else { 31 };
                for c in [
                    ((32 - width) << 8) | clamp,
                    (next() as u32) & 0x1f1f,
                    next() as u32,
                ] {
                    for b in (0..34).chain([next() as u32]) {
                        let mut regs: Vec<u64> = (0..96).map(|_| next()).collect();
                        let vals: [u64; 32] = regs[32..64].try_into().unwrap();
                        let (want, want_ok) = shfl_scalar(mode, &vals, b, c);
                        // SAFETY: AVX2 checked above.
                        unsafe { shfl_uniform(&mut regs, mode, 0, Some(2), 1, b, c) };
                        assert_eq!(regs[..32], want, "{mode:?} b {b} c {c:#x}");
                        assert_eq!(regs[64..], want_ok, "{mode:?} b {b} c {c:#x}: valid");
                        // In place, without a predicate.
                        let mut regs = regs.clone();
                        regs[32..64].copy_from_slice(&vals);
                        // SAFETY: AVX2 checked above.
                        unsafe { shfl_uniform(&mut regs, mode, 1, None, 1, b, c) };
                        assert_eq!(regs[32..64], want, "{mode:?} b {b} c {c:#x}: in place");
                    }
                }
            }
        }
    }

    #[test]
    fn predicate_masks_and_pc_updates_agree_with_scalar_ones() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2_000 {
            let p: [u64; 32] = std::array::from_fn(|_| next());
            let want = (0..32).fold(0u32, |m, l| m | (((p[l] & 1) as u32) << l));
            // SAFETY: AVX2 checked above.
            assert_eq!(unsafe { pred_mask(&p) }, want);
            let lanes = next() as u32;
            let to = next() as u32;
            let before: [u32; 32] = std::array::from_fn(|_| next() as u32);
            let mut pc = before;
            // SAFETY: AVX2 checked above.
            unsafe { set_pcs(&mut pc, lanes, to) };
            for l in 0..32 {
                let want = if lanes >> l & 1 != 0 { to } else { before[l] };
                assert_eq!(pc[l], want, "lane {l} of {lanes:#x}");
            }
        }
    }

    #[test]
    fn address_checks_agree_with_scalar_ones() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let holes = [(0x1000u64, 0x100u64), (u64::MAX - 0xff, 0x100), (0, 0)];
        let scalar = |at: &[u64; 32], align: u64, last: u64| {
            at.iter().any(|&a| {
                a & align != 0 || a > last || holes.iter().any(|&(lo, n)| a.wrapping_sub(lo) < n)
            })
        };
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let edges = [
            0,
            1,
            0xfff,
            0x1000,
            0x10ff,
            0x1100,
            u64::MAX - 0x100,
            u64::MAX - 0xff,
            u64::MAX,
            1 << 63,
            (1 << 63) - 1,
        ];
        let mut disagreements = 0;
        let mut outside = 0;
        for round in 0..20_000 {
            // Mostly harmless addresses, one lane at an edge now and then.
            let mut at: [u64; 32] = std::array::from_fn(|_| 0x2000 + (next() % 0x1000) * 8);
            if round % 2 == 0 {
                at[(next() % 32) as usize] = edges[(next() % edges.len() as u64) as usize];
            }
            let align = [0, 3, 7][(next() % 3) as usize];
            let last = [u64::MAX, 0x2800, (1 << 63) + 5][(next() % 3) as usize];
            let want = scalar(&at, align, last);
            outside += usize::from(want);
            // SAFETY: AVX2 checked above.
            if unsafe { any_outside(&at, align, last, &holes) } != want {
                disagreements += 1;
            }
        }
        assert_eq!(disagreements, 0);
        // Both answers occurred.
        assert!(outside > 1_000 && outside < 19_000, "{outside}");
    }

    /// Register `d` of `regs` holds `want`, lane by lane.
    fn same_lanes(regs: &[u64], d: u32, want: &[u64], what: &str) {
        for (l, &w) in want.iter().enumerate() {
            assert_eq!(regs[d as usize * 32 + l], w, "{what}, lane {l}");
        }
    }

    /// f32 values where float code goes wrong first: NaNs (one with a
    /// payload and its sign set), infinities, signed zeros, subnormals
    /// (the smallest, the largest negative, one in the middle), the
    /// smallest normal, the largest finite, 1 and the next f32 after it,
    /// and +-128 (where `ex2` overflows).
    const SPECIAL_F32: [u32; 15] = [
        0x7fc0_0000,
        0xffc0_0001,
        0x7f80_0000,
        0xff80_0000,
        0x8000_0000,
        0x0000_0000,
        0x0000_0001,
        0x807f_ffff,
        0x0040_0000,
        0x0080_0000,
        0x7f7f_ffff,
        0x3f80_0000,
        0x3f80_0001,
        0xc300_0000,
        0x4300_0000,
    ];

    #[test]
    fn warp_f32_arithmetic_gives_the_bits_of_the_scalar_path() {
        use crate::ir::{FMode, Rnd, Ty};
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        let mut next = rng(0x5151_2727_9393_4545);
        let ops = crate::ir::Fast::F32_BIN_OPS;
        for round in 0..1_600 {
            let op = ops[round % 4];
            let ftz = round / 4 % 2 == 1;
            // Three registers, garbage above each lane's f32; products
            // and quotients of small values land among the subnormals.
            let mut regs: Vec<u64> = (0..96)
                .map(|_| {
                    let v = next();
                    let f = match v % 4 {
                        0 => SPECIAL_F32[(v >> 8) as usize % SPECIAL_F32.len()],
                        1 => (v >> 32) as u32 & 0x80ff_ffff | 0x0080_0000,
                        _ => (v >> 32) as u32,
                    };
                    (v & 0xffff_ffff_0000_0000) | u64::from(f)
                })
                .collect();
            let imm = next();
            // Destination aliasing one operand, both, or neither; an
            // immediate in some rounds.
            let (d, a, b) = [(2, 0, 1), (0, 0, 1), (1, 0, 1), (0, 0, 0)][round / 8 % 4];
            let (sa, sb) = match round / 32 % 3 {
                0 => (F32Src::Reg(a), F32Src::Reg(b)),
                1 => (F32Src::Imm(imm as u32), F32Src::Reg(b)),
                _ => (F32Src::Reg(a), F32Src::Imm(imm as u32)),
            };
            let value = |s: F32Src, regs: &[u64], l: usize| match s {
                F32Src::Reg(r) => regs[r as usize * 32 + l],
                F32Src::Imm(v) => u64::from(v),
            };
            let m = FMode {
                rnd: Rnd::Rn,
                ftz,
                sat: false,
            };
            let want: Vec<u64> = (0..32)
                .map(|l| {
                    let (x, y) = (value(sa, &regs, l), value(sb, &regs, l));
                    crate::exec::fbin(op, Ty::F32, m, x, y)
                })
                .collect();
            // SAFETY: AVX2 checked above.
            unsafe { f32_bin(&mut regs, op, ftz, d, sa, sb) };
            same_lanes(&regs, d, &want, &format!("{op:?} ftz {ftz}: {sa:?} {sb:?}"));
        }
    }

    #[test]
    fn warp_f32_unary_operations_give_the_bits_of_the_scalar_path() {
        use crate::ir::{FMode, Rnd, Ty};
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            return;
        }
        let mut next = rng(0x0f0f_1e1e_2d2d_3c3c);
        let ops = crate::ir::Fast::FUN_OPS;
        for round in 0..1_800 {
            let op = ops[round % ops.len()];
            let ftz = round / ops.len() % 2 == 1;
            // Two registers, garbage above each lane's f32: specials,
            // subnormals, values around 1 and exponents up to +-2^8 (where
            // ex2 overflows and underflows), and any bits.
            let mut regs: Vec<u64> = (0..64)
                .map(|_| {
                    let v = next();
                    let f = match v % 5 {
                        0 => SPECIAL_F32[(v >> 8) as usize % SPECIAL_F32.len()],
                        1 => (v >> 32) as u32 & 0x807f_ffff,
                        2 => (v >> 32) as u32 & 0x807f_ffff | 0x3f00_0000,
                        3 => (v >> 32) as u32 & 0x81ff_ffff | 0x4200_0000,
                        _ => (v >> 32) as u32,
                    };
                    (v & 0xffff_ffff_0000_0000) | u64::from(f)
                })
                .collect();
            let imm = next();
            let (d, a) = [(1, 0), (0, 0)][round / 18 % 2];
            let sa = if round / 36 % 4 == 3 {
                F32Src::Imm(imm as u32)
            } else {
                F32Src::Reg(a)
            };
            let m = FMode {
                rnd: Rnd::Rn,
                ftz,
                sat: false,
            };
            let want: Vec<u64> = (0..32)
                .map(|l| {
                    let x = match sa {
                        F32Src::Reg(r) => regs[r as usize * 32 + l],
                        F32Src::Imm(v) => u64::from(v),
                    };
                    crate::exec::fun(op, Ty::F32, m, x)
                })
                .collect();
            // SAFETY: AVX2 and FMA checked above.
            unsafe { f32_un(&mut regs, op, ftz, d, sa) };
            same_lanes(&regs, d, &want, &format!("{op:?} ftz {ftz}: {sa:?}"));
        }
    }

    #[test]
    fn the_warp_fma_gives_the_bits_of_the_scalar_fma() {
        if !(std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")) {
            return;
        }
        const SPECIAL: [u32; 10] = [
            0x7fc0_0000,
            0xffc0_0001,
            0x7f80_0000,
            0xff80_0000,
            0x8000_0000,
            0x0000_0001,
            0x807f_ffff,
            0x7f7f_ffff,
            0x3f80_0001,
            0x4b80_0000,
        ];
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2_000 {
            // Lanes carry garbage above their f32, as registers may.
            let mut lanes = || -> [u64; 32] {
                std::array::from_fn(|_| {
                    let v = next();
                    let f = if v % 3 == 0 {
                        SPECIAL[(v >> 8) as usize % SPECIAL.len()]
                    } else {
                        (v >> 32) as u32
                    };
                    (v & 0xffff_ffff_0000_0000) | u64::from(f)
                })
            };
            let (x, y, z) = (lanes(), lanes(), lanes());
            let mut out = [0u64; 32];
            // SAFETY: AVX2 and FMA checked above.
            unsafe { fma_rn_f32(&x, &y, &z, &mut out) };
            for l in 0..32 {
                let f = |v: u64| f32::from_bits(v as u32);
                let r = f(x[l]).mul_add(f(y[l]), f(z[l]));
                let want = if r.is_nan() {
                    u64::from(crate::float::CANONICAL_NAN_F32)
                } else {
                    u64::from(r.to_bits())
                };
                assert_eq!(
                    out[l], want,
                    "lane {l}: {:#x} {:#x} {:#x}",
                    x[l], y[l], z[l]
                );
            }
        }
    }
}
