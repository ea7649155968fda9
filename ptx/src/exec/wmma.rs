//! `wmma`: warp-wide matrix products on fragments held in registers.
//!
//! PTX leaves the distribution of a fragment's elements over the warp's
//! lanes unspecified; programs that touch fragment elements directly do
//! so elementwise. Here lane `l`'s element `e` of a fragment of `rows` ×
//! `cols` elements is the element at row-major position `l * share +
//! e % share`, `share = rows * cols / 32`: when a fragment has more
//! elements per lane than its share (f16 `a` and `b` fragments hold each
//! element twice), the copies hold the same value. Elements are packed
//! into each register from its low bits.
//!
//! A product is computed exactly (every product of f16, bf16, tf32 and
//! 8-bit elements is exact in f64, and so are sums of sixteen of them of
//! similar magnitude) and rounded once to the accumulator's type, to
//! nearest; f64 products are a chain of fused multiply-adds over `k`;
//! integer products wrap, or saturate with `.satfinite`. Tensor cores
//! round within the same bound, not necessarily identically.

use super::{Launch, Warp};
use crate::float::{f16_to_f32, HFmt};
use crate::ir::{Addr, Src, WTy, Wmma, WmmaOp};
use crate::Error;

/// Lane `l`'s `share` distinct elements of a fragment: their positions.
fn positions(l: usize, share: usize) -> std::ops::Range<usize> {
    l * share..(l + 1) * share
}

/// Lane `l`'s `count` elements of a fragment: its `share` distinct ones
/// from `f(position)`, then copies of them.
fn lane_values(
    l: usize,
    share: usize,
    count: usize,
    mut f: impl FnMut(usize) -> Result<u64, Error>,
) -> Result<Vec<u64>, Error> {
    let mut vals = Vec::with_capacity(count);
    for q in positions(l, share) {
        vals.push(f(q)?);
    }
    for e in share..count {
        vals.push(vals[e % share]);
    }
    Ok(vals)
}

/// Bits of element `e` of a fragment in registers `regs` of lane `l`.
fn element(w: &Warp, regs: &[u32], ty: WTy, l: usize, e: usize) -> u64 {
    let per = ty.per_reg();
    let bits = ty.bits();
    let v = w.regs[regs[e / per] as usize * 32 + l];
    if bits >= 64 {
        v
    } else {
        (v >> ((e % per) as u32 * bits)) & ((1u64 << bits) - 1)
    }
}

/// A float element's value.
fn value(ty: WTy, b: u64) -> f64 {
    match ty {
        WTy::F16 => f64::from(f16_to_f32(b as u16)),
        WTy::Bf16 => HFmt::BF16.to_f64(b as u16),
        // Tensor cores read a tf32 element's 19 high bits.
        WTy::Tf32 => f64::from(f32::from_bits(b as u32 & !0x1fff)),
        WTy::F32 => f64::from(f32::from_bits(b as u32)),
        WTy::F64 => f64::from_bits(b),
        WTy::S8 => f64::from(b as u8 as i8),
        WTy::U8 => f64::from(b as u8),
        WTy::S32 => f64::from(b as u32 as i32),
    }
}

/// An integer element's value.
fn int(ty: WTy, b: u64) -> i64 {
    match ty {
        WTy::S8 => i64::from(b as u8 as i8),
        WTy::U8 => i64::from(b as u8),
        _ => i64::from(b as u32 as i32),
    }
}

/// Writes `vals` (lane `l`'s elements, all of them) into registers `regs`.
fn put(w: &mut Warp, regs: &[u32], ty: WTy, l: usize, vals: &[u64]) {
    let per = ty.per_reg();
    let bits = ty.bits();
    for (r, chunk) in regs.iter().zip(vals.chunks(per)) {
        let v = if bits >= 64 {
            chunk[0]
        } else {
            chunk
                .iter()
                .enumerate()
                .fold(0u64, |acc, (k, &x)| acc | x << (k as u32 * bits))
        };
        w.regs[*r as usize * 32 + l] = v;
    }
}

impl Launch<'_> {
    pub(super) fn wmma(
        &mut self,
        w: &mut Warp,
        x: &Wmma,
        exec: u32,
        line: u32,
    ) -> Result<(), Error> {
        if exec != u32::MAX {
            return Err(Error::Unsupported {
                what: format!("wmma by part of a warp (line {line}): it needs all 32 threads"),
            });
        }
        let [m, n, k] = x.shape.map(|v| v as usize);
        // Charged against the launch's budget as the multiply-adds and
        // element moves it does (the 32 thread-instructions counted for
        // it would let a loop of products run far past its budget).
        self.charge_setup(match x.op {
            WmmaOp::Mma { .. } => (m * n * k) as u64,
            _ => (m * n.max(k)) as u64,
        })?;
        match &x.op {
            WmmaOp::Load {
                which,
                col,
                ty,
                space,
                d,
                addr,
                stride,
            } => {
                let (rows, cols) = match which {
                    0 => (m, k),
                    1 => (k, n),
                    _ => (m, n),
                };
                let share = rows * cols / 32;
                let count = d.len() * ty.per_reg();
                let size = (ty.bits() / 8) as usize;
                for l in 0..32 {
                    let vals = lane_values(l, share, count, |q| {
                        let at = self.fragment_access(
                            w,
                            l,
                            (*addr, *stride, *col),
                            (rows, cols),
                            q,
                            *ty,
                        );
                        let mut buf = [0u8; 8];
                        self.load(w, l, *space, at, &mut buf[..size])?;
                        Ok(u64::from_le_bytes(buf))
                    })?;
                    put(w, d, *ty, l, &vals);
                }
            }
            WmmaOp::Store {
                col,
                ty,
                space,
                v,
                addr,
                stride,
            } => {
                let share = m * n / 32;
                for l in 0..32 {
                    for (e, q) in positions(l, share).enumerate() {
                        let bits = element(w, v, *ty, l, e);
                        let at = self.fragment_access(w, l, (*addr, *stride, *col), (m, n), q, *ty);
                        let size = (ty.bits() / 8) as usize;
                        self.store(w, l, *space, at, &bits.to_le_bytes()[..size])?;
                    }
                }
            }
            WmmaOp::Mma {
                ab,
                cty,
                dty,
                satfinite,
                d,
                a,
                b,
                c,
            } => {
                // Gather the three matrices, row-major.
                let gather = |regs: &[u32], ty: WTy, rows: usize, cols: usize| -> Vec<u64> {
                    let share = rows * cols / 32;
                    let mut out = vec![0u64; rows * cols];
                    for l in 0..32 {
                        for (e, q) in positions(l, share).enumerate() {
                            out[q] = element(w, regs, ty, l, e);
                        }
                    }
                    out
                };
                let (ma, mb, mc) = (
                    gather(a, *ab, m, k),
                    gather(b, *ab, k, n),
                    gather(c, *cty, m, n),
                );
                let mut md = vec![0u64; m * n];
                for i in 0..m {
                    for j in 0..n {
                        let at = |mat: &[u64], r: usize, c: usize, cols: usize| mat[r * cols + c];
                        md[i * n + j] = match dty {
                            WTy::S32 => {
                                let mut s = int(*cty, at(&mc, i, j, n));
                                for kk in 0..k {
                                    s += int(*ab, at(&ma, i, kk, k)) * int(*ab, at(&mb, kk, j, n));
                                }
                                let v = if *satfinite {
                                    s.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
                                } else {
                                    s as i32
                                };
                                u64::from(v as u32)
                            }
                            WTy::F64 => {
                                let mut s = value(*cty, at(&mc, i, j, n));
                                for kk in 0..k {
                                    s = value(*ab, at(&ma, i, kk, k))
                                        .mul_add(value(*ab, at(&mb, kk, j, n)), s);
                                }
                                s.to_bits()
                            }
                            _ => {
                                let mut s = value(*cty, at(&mc, i, j, n));
                                for kk in 0..k {
                                    s += value(*ab, at(&ma, i, kk, k))
                                        * value(*ab, at(&mb, kk, j, n));
                                }
                                if *dty == WTy::F16 {
                                    u64::from(HFmt::F16.round(s, 0.0))
                                } else {
                                    u64::from((s as f32).to_bits())
                                }
                            }
                        };
                    }
                }
                let share = m * n / 32;
                let count = d.len() * dty.per_reg();
                for l in 0..32 {
                    let vals = lane_values(l, share, count, |q| Ok(md[q]))?;
                    put(w, d, *dty, l, &vals);
                }
            }
        }
        Ok(())
    }

    /// The address of the element at row-major position `q` of a
    /// `rows` × `cols` fragment in memory: row- or column-major from lane
    /// `l`'s base address, `stride` elements between rows (columns).
    fn fragment_access(
        &self,
        w: &Warp,
        l: usize,
        (addr, stride, col): (Addr, Option<Src>, bool),
        (rows, cols): (usize, usize),
        q: usize,
        ty: WTy,
    ) -> u64 {
        let base = self.address(w, addr, l);
        let (i, j) = ((q / cols) as u64, (q % cols) as u64);
        let st = match stride {
            Some(s) => self.rd(w, s, l) as u32 as u64,
            None if col => rows as u64,
            None => cols as u64,
        };
        let off = if col { i + j * st } else { i * st + j };
        base.wrapping_add(off.wrapping_mul(u64::from(ty.bits() / 8)))
    }
}
