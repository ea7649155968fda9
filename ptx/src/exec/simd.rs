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
    let canonical = _mm256_castsi256_ps(_mm256_set1_epi32(crate::float::CANONICAL_NAN_F32 as i32));
    for q in 0..4 {
        let (a, b, c) = (
            _mm256_castsi256_ps(low_halves(x, q)),
            _mm256_castsi256_ps(low_halves(y, q)),
            _mm256_castsi256_ps(low_halves(z, q)),
        );
        let r = _mm256_fmadd_ps(a, b, c);
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(r, r);
        let r = _mm256_blendv_ps(r, canonical, nan);
        widen::<false>(_mm256_castps_si256(r), out, q);
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
                let o = at[l] as usize + 4;
                let w = u32::from_le_bytes(mem[o..o + 4].try_into().unwrap());
                let want = if signed {
                    w as i32 as i64 as u64
                } else {
                    u64::from(w)
                };
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
