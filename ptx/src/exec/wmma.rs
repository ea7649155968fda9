//! `wmma`, `mma.sync`, `ldmatrix` and `stmatrix`: warp-wide matrix
//! products on fragments held in registers.
//!
//! `mma.sync` (and the `ldmatrix`/`stmatrix` that feed it) have the
//! layouts the PTX ISA fixes: lanes in groups of four, each lane's
//! elements at rows and columns computed from its group and its place in
//! it ([`mma_position`]). For `wmma`:
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

/// Row and column of element `i` of lane `l`'s part of fragment `which`
/// (0: a, m×k; 1: b, k×n; 2: c and d, m×n) of `mma.sync` of `shape` on
/// elements of `ty`, as the PTX ISA lays them out: lanes in groups of
/// four (`g` = lane / 4), `t` = lane % 4 within the group.
fn mma_position(shape: [u32; 3], which: u8, ty: WTy, l: usize, i: usize) -> (usize, usize) {
    let (g, t) = (l >> 2, l & 3);
    let [m, _, k] = shape;
    match (which, ty, k) {
        (2, _, _) if m == 8 => (g, t * 2 + i),
        (2, _, _) => (g + 8 * (i >> 1), t * 2 + (i & 1)),
        (0, WTy::F64, _) => (g, t),
        (0, WTy::Tf32, 4) => (g + 8 * i, t),
        (0, WTy::Tf32, _) => (g + 8 * (i & 1), t + 4 * (i >> 1)),
        (0, WTy::F16 | WTy::Bf16, 8) => (g + 8 * (i >> 1), t * 2 + (i & 1)),
        (0, WTy::F16 | WTy::Bf16, _) => (g + 8 * ((i >> 1) & 1), t * 2 + (i & 1) + 8 * (i >> 2)),
        (0, _, 16) => (g + 8 * (i >> 2), t * 4 + (i & 3)),
        (0, _, _) => (g + 8 * ((i >> 2) & 1), t * 4 + (i & 3) + 16 * (i >> 3)),
        (_, WTy::F64 | WTy::Tf32, 4) => (t, g),
        (_, WTy::Tf32, _) => (t + 4 * i, g),
        (_, WTy::F16 | WTy::Bf16, 8) => (t * 2 + i, g),
        (_, WTy::F16 | WTy::Bf16, _) => (t * 2 + (i & 1) + 8 * (i >> 1), g),
        (_, _, 16) => (t * 4 + i, g),
        (_, _, _) => (t * 4 + (i & 3) + 16 * (i >> 2), g),
    }
}

/// D = A × B + C on row-major matrices of element bits: `types` = (a and
/// b, c, d).
fn product(
    [m, n, k]: [usize; 3],
    (ab, cty, dty): (WTy, WTy, WTy),
    satfinite: bool,
    ma: &[u64],
    mb: &[u64],
    mc: &[u64],
) -> Vec<u64> {
    let mut md = vec![0u64; m * n];
    for i in 0..m {
        for j in 0..n {
            md[i * n + j] = match dty {
                WTy::S32 => {
                    let mut s = int(cty, mc[i * n + j]);
                    for kk in 0..k {
                        s += int(ab, ma[i * k + kk]) * int(ab, mb[kk * n + j]);
                    }
                    let v = if satfinite {
                        s.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
                    } else {
                        s as i32
                    };
                    u64::from(v as u32)
                }
                WTy::F64 => {
                    let mut s = value(cty, mc[i * n + j]);
                    for kk in 0..k {
                        s = value(ab, ma[i * k + kk]).mul_add(value(ab, mb[kk * n + j]), s);
                    }
                    s.to_bits()
                }
                _ => {
                    let mut s = value(cty, mc[i * n + j]);
                    for kk in 0..k {
                        s += value(ab, ma[i * k + kk]) * value(ab, mb[kk * n + j]);
                    }
                    if dty == WTy::F16 {
                        u64::from(HFmt::F16.round(s, 0.0))
                    } else {
                        u64::from((s as f32).to_bits())
                    }
                }
            };
        }
    }
    md
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
            WmmaOp::LdMatrix { .. } | WmmaOp::StMatrix { .. } => 256,
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
                fixed,
                ab,
                cty,
                dty,
                satfinite,
                d,
                a,
                b,
                c,
            } => {
                // Gather the three matrices, row-major: by the positions
                // wmma gives each lane's elements, or by `mma`'s layout.
                let gather = |regs: &[u32], ty: WTy, which: u8, rows: usize, cols: usize| {
                    let share = rows * cols / 32;
                    let mut out = vec![0u64; rows * cols];
                    for l in 0..32 {
                        for e in 0..share {
                            let q = if *fixed {
                                let (r, col) = mma_position(x.shape, which, ty, l, e);
                                r * cols + col
                            } else {
                                l * share + e
                            };
                            out[q] = element(w, regs, ty, l, e);
                        }
                    }
                    out
                };
                let ma = gather(a, *ab, 0, m, k);
                let mb = gather(b, *ab, 1, k, n);
                let mc = gather(c, *cty, 2, m, n);
                let md = product([m, n, k], (*ab, *cty, *dty), *satfinite, &ma, &mb, &mc);
                let share = m * n / 32;
                let count = d.len() * dty.per_reg();
                for l in 0..32 {
                    let vals = if *fixed {
                        (0..share)
                            .map(|e| {
                                let (r, col) = mma_position(x.shape, 2, *dty, l, e);
                                md[r * n + col]
                            })
                            .collect()
                    } else {
                        lane_values(l, share, count, |q| Ok(md[q]))?
                    };
                    put(w, d, *dty, l, &vals);
                }
            }
            WmmaOp::LdMatrix {
                trans,
                space,
                d,
                addr,
            } => {
                for (j, reg) in d.iter().enumerate() {
                    // Row r of matrix j: 8 elements at lane 8j + r's address.
                    let mut mat = [[0u16; 8]; 8];
                    for (r, row) in mat.iter_mut().enumerate() {
                        let lane = 8 * j + r;
                        let at = self.address(w, *addr, lane);
                        let mut buf = [0u8; 16];
                        self.load(w, lane, *space, at, &mut buf)?;
                        for (c, v) in row.iter_mut().enumerate() {
                            *v = u16::from_le_bytes([buf[2 * c], buf[2 * c + 1]]);
                        }
                    }
                    for l in 0..32 {
                        let (r, c) = (l / 4, 2 * (l % 4));
                        let (lo, hi) = if *trans {
                            (mat[c][r], mat[c + 1][r])
                        } else {
                            (mat[r][c], mat[r][c + 1])
                        };
                        w.regs[*reg as usize * 32 + l] = u64::from(lo) | u64::from(hi) << 16;
                    }
                }
            }
            WmmaOp::StMatrix {
                trans,
                space,
                v,
                addr,
            } => {
                for (j, reg) in v.iter().enumerate() {
                    let mut mat = [[0u16; 8]; 8];
                    for l in 0..32 {
                        let (r, c) = (l / 4, 2 * (l % 4));
                        let bits = w.regs[*reg as usize * 32 + l];
                        let (lo, hi) = (bits as u16, (bits >> 16) as u16);
                        if *trans {
                            mat[c][r] = lo;
                            mat[c + 1][r] = hi;
                        } else {
                            mat[r][c] = lo;
                            mat[r][c + 1] = hi;
                        }
                    }
                    for (r, row) in mat.iter().enumerate() {
                        let lane = 8 * j + r;
                        let at = self.address(w, *addr, lane);
                        let buf: Vec<u8> = row.iter().flat_map(|e| e.to_le_bytes()).collect();
                        self.store(w, lane, *space, at, &buf)?;
                    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `mma.sync` fragment's layout covers its matrix exactly once:
    /// each element belongs to one lane's one element.
    #[test]
    fn mma_layouts_cover_each_matrix_once() {
        let cases: &[([u32; 3], WTy)] = &[
            ([16, 8, 16], WTy::F16),
            ([16, 8, 8], WTy::F16),
            ([16, 8, 16], WTy::Bf16),
            ([16, 8, 8], WTy::Tf32),
            ([16, 8, 4], WTy::Tf32),
            ([16, 8, 16], WTy::S8),
            ([16, 8, 32], WTy::U8),
            ([8, 8, 4], WTy::F64),
        ];
        for &(shape, ty) in cases {
            let [m, n, k] = shape.map(|v| v as usize);
            for (which, rows, cols) in [(0u8, m, k), (1, k, n), (2, m, n)] {
                let mut seen = vec![0u32; rows * cols];
                for l in 0..32 {
                    for e in 0..rows * cols / 32 {
                        let (r, c) = mma_position(shape, which, ty, l, e);
                        assert!(r < rows && c < cols, "{shape:?} {ty:?} {which}: ({r}, {c})");
                        seen[r * cols + c] += 1;
                    }
                }
                assert!(
                    seen.iter().all(|&s| s == 1),
                    "{shape:?} {ty:?} fragment {which}: {seen:?}"
                );
            }
        }
        // Two entries of the PTX ISA's tables, spelled out: m16n8k16's a5
        // of lane 6 is at row 1, column 13; its b3 of lane 9 at row 11,
        // column 2.
        assert_eq!(mma_position([16, 8, 16], 0, WTy::F16, 6, 5), (1, 13));
        assert_eq!(mma_position([16, 8, 16], 1, WTy::F16, 9, 3), (11, 2));
    }
}
