//! A warp's loads from shared memory as AVX2 gathers.
//!
//! The one place the engine reads memory through raw pointers: 32 lanes'
//! 4- or 8-byte elements fetched four at a time by `vpgatherqd` /
//! `vpgatherqq`, each extended to a 64-bit register value as
//! [`super::lanes::value`] extends it. Every lane's range is checked
//! against the slice here, before any pointer is formed, so the unsafe
//! code relies on nothing its caller promised.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Loads element `E` bytes wide at `at[l] + off` of `mem` for all 32
/// lanes into `out`, zero-extended, or sign-extended from 32 bits when
/// `signed32` (only for `E == 4`). False, with `out` untouched, if any
/// lane's element is not inside `mem` or `E` is not 4 or 8: the caller
/// takes its scalar path.
///
/// # Safety
/// The CPU must have AVX2 (the caller's `Launch::wide`).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
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
    let Some(last) = (E as u64)
        .checked_add(off)
        .and_then(|n| (mem.len() as u64).checked_sub(n))
    else {
        return false;
    };
    if at.iter().fold(false, |bad, &a| bad | (a > last)) {
        return false;
    }
    // Gathers take signed 64-bit offsets; `last` is below the slice's
    // length, which is at most isize::MAX, so every offset is positive.
    let base = mem.as_ptr().wrapping_add(off as usize);
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
        let mut out = [0u64; 32];
        // SAFETY: AVX2 checked above.
        assert!(unsafe { gather::<8>(&mem, &at, 0, false, &mut out) });
        for l in 0..32 {
            let o = at[l] as usize;
            assert_eq!(
                out[l],
                u64::from_le_bytes(mem[o..o + 8].try_into().unwrap())
            );
        }
        // One lane past the end: refused, nothing written.
        let mut far = at;
        far[31] = 1021;
        let mut out = [7u64; 32];
        // SAFETY: AVX2 checked above.
        assert!(!unsafe { gather::<4>(&mem, &far, 0, false, &mut out) });
        assert_eq!(out, [7u64; 32]);
        far[31] = u64::MAX - 2;
        // SAFETY: AVX2 checked above.
        assert!(!unsafe { gather::<8>(&mem, &far, 0, false, &mut out) });
    }
}
