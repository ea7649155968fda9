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

use super::{copy, range, Launch, Warp};
use crate::float::{bf16_to_f32, f16_to_f32, HFmt};
use crate::ir::{Addr, Space, Src, WTy, Wmma, WmmaOp};
use crate::{Error, GLOBALS_BASE, WINDOW_SIZE};

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

/// Where a fragment's elements sit over the lanes: wmma's layout (lane
/// `l`'s element `e` at row-major position `l * share + e % share`) or
/// `mma.sync`'s ([`mma_position`] of `shape` and fragment `which`).
#[derive(Clone, Copy)]
enum Layout {
    Wmma,
    Mma { shape: [u32; 3], which: u8 },
}

/// The most bytes a fragment holds (32 × 16 elements of 16 bits, 16 × 16
/// of 32, 8 × 8 of 64).
const MAX_FRAGMENT_BYTES: usize = 1024;
/// The most elements a fragment holds (32 × 16).
const MAX_FRAGMENT_ELEMENTS: usize = 512;

/// Reads the `rows` × `cols` fragment in registers `regs`, laid out as
/// `layout`, into `out` (row-major), each element's bits through `f`.
#[inline(always)]
fn gather<T: Copy>(
    w: &Warp,
    regs: &[u32],
    ty: WTy,
    layout: Layout,
    (rows, cols): (usize, usize),
    out: &mut [T],
    f: impl Fn(u64) -> T,
) {
    let share = rows * cols / 32;
    match layout {
        Layout::Wmma => {
            let per = ty.per_reg();
            let bits = ty.bits();
            let mask = if bits >= 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            };
            // Element e of each lane is in register e / per, at bit
            // (e % per) * bits.
            for (ri, &reg) in regs.iter().enumerate() {
                let lanes: &[u64; 32] = w.regs[reg as usize * 32..reg as usize * 32 + 32]
                    .try_into()
                    .expect("32 lanes");
                for k in 0..per.min(share.saturating_sub(ri * per)) {
                    let e = ri * per + k;
                    let shift = if bits >= 64 { 0 } else { k as u32 * bits };
                    if share == 1 {
                        for (o, &v) in out.iter_mut().zip(lanes) {
                            *o = f((v >> shift) & mask);
                        }
                    } else {
                        for (l, &v) in lanes.iter().enumerate() {
                            out[l * share + e] = f((v >> shift) & mask);
                        }
                    }
                }
            }
        }
        Layout::Mma { shape, which } => {
            for l in 0..32 {
                for e in 0..share {
                    let (r, c) = mma_position(shape, which, ty, l, e);
                    out[r * cols + c] = f(element(w, regs, ty, l, e));
                }
            }
        }
    }
}

/// Writes the `rows` × `cols` row-major matrix `md` into registers
/// `regs`, laid out as `layout`, each element's bits from `f`; a
/// fragment with more elements per lane than its share holds copies.
#[inline(always)]
fn scatter<T: Copy>(
    w: &mut Warp,
    regs: &[u32],
    ty: WTy,
    layout: Layout,
    (rows, cols): (usize, usize),
    md: &[T],
    f: impl Fn(T) -> u64,
) {
    let share = rows * cols / 32;
    let per = ty.per_reg();
    let bits = ty.bits();
    for (ri, &reg) in regs.iter().enumerate() {
        let r = reg as usize * 32;
        match layout {
            Layout::Wmma => {
                let dst: &mut [u64; 32] = (&mut w.regs[r..r + 32]).try_into().expect("32 lanes");
                for k in 0..per {
                    let e = (ri * per + k) % share;
                    let shift = if bits >= 64 { 0 } else { k as u32 * bits };
                    if k == 0 && share == 1 {
                        for (d, &x) in dst.iter_mut().zip(md) {
                            *d = f(x);
                        }
                    } else if k == 0 {
                        for (l, d) in dst.iter_mut().enumerate() {
                            *d = f(md[l * share + e]);
                        }
                    } else {
                        for (l, d) in dst.iter_mut().enumerate() {
                            *d |= f(md[l * share + e]) << shift;
                        }
                    }
                }
            }
            Layout::Mma { shape, which } => {
                for l in 0..32 {
                    let mut v = 0u64;
                    for k in 0..per {
                        let e = ri * per + k;
                        if e >= share {
                            break;
                        }
                        let (row, c) = mma_position(shape, which, ty, l, e);
                        let x = f(md[row * cols + c]);
                        v |= if bits >= 64 {
                            x
                        } else {
                            x << (k as u32 * bits)
                        };
                    }
                    w.regs[r + l] = v;
                }
            }
        }
    }
}

/// A float element's value, for each type (chosen once per fragment).
macro_rules! with_value {
    ($ty:expr, |$f:ident| $body:expr) => {
        match $ty {
            WTy::F16 => {
                let $f = |b: u64| f64::from(f16_to_f32(b as u16));
                $body
            }
            WTy::Bf16 => {
                let $f = |b: u64| f64::from(bf16_to_f32(b as u16));
                $body
            }
            // Tensor cores read a tf32 element's 19 high bits.
            WTy::Tf32 => {
                let $f = |b: u64| f64::from(f32::from_bits(b as u32 & !0x1fff));
                $body
            }
            WTy::F32 => {
                let $f = |b: u64| f64::from(f32::from_bits(b as u32));
                $body
            }
            WTy::F64 => {
                let $f = f64::from_bits;
                $body
            }
            WTy::S8 => {
                let $f = |b: u64| f64::from(b as u8 as i8);
                $body
            }
            WTy::U8 => {
                let $f = |b: u64| f64::from(b as u8);
                $body
            }
            WTy::S32 => {
                let $f = |b: u64| f64::from(b as u32 as i32);
                $body
            }
        }
    };
}

/// A matrix product's operands and a fragment's elements, kept by the
/// launch between instructions (clearing them for each would cost more
/// than many a product).
pub(super) struct Scratch {
    fa: [f64; 512],
    fb: [f64; 512],
    fc: [f64; 256],
    ia: [i32; 512],
    ib: [i32; 512],
    ic: [i64; 256],
    frag: [u64; MAX_FRAGMENT_ELEMENTS],
    line: [u8; MAX_FRAGMENT_BYTES],
    bits: [u64; 64],
}

impl Scratch {
    fn new() -> Box<Scratch> {
        Box::new(Scratch {
            fa: [0.0; 512],
            fb: [0.0; 512],
            fc: [0.0; 256],
            ia: [0; 512],
            ib: [0; 512],
            ic: [0; 256],
            frag: [0; MAX_FRAGMENT_ELEMENTS],
            line: [0; MAX_FRAGMENT_BYTES],
            bits: [0; 64],
        })
    }
}

/// Where a fragment's row or column goes ([`Launch::run_target`]).
enum Run {
    Shared(std::ops::Range<usize>),
    Global(u64),
    Pieces,
}

/// The error for a shape larger than the fast paths' arrays (no shape of
/// the PTX ISA is).
fn unsupported_shape(x: &Wmma, line: u32) -> Error {
    let [m, n, k] = x.shape;
    Error::Unsupported {
        what: format!("a matrix fragment of shape m{m}n{n}k{k} (line {line})"),
    }
}

/// Whether a `rows` × `cols` fragment of `size`-byte elements takes the
/// fast paths (every shape of `wmma` does).
fn fits((rows, cols): (usize, usize), size: usize) -> bool {
    rows * cols * size <= MAX_FRAGMENT_BYTES
        && rows * cols <= MAX_FRAGMENT_ELEMENTS
        && rows.max(cols) <= 64
}

/// Little-endian elements of `size` (1, 2, 4 or 8) bytes of `bytes` into
/// `out`, one per element (spelled out per size: a copy of a variable
/// length per element is a call of `memcpy`).
fn unpack(bytes: &[u8], size: usize, out: &mut [u64]) {
    match size {
        1 => out
            .iter_mut()
            .zip(bytes)
            .for_each(|(o, &b)| *o = u64::from(b)),
        2 => out
            .iter_mut()
            .zip(bytes.chunks_exact(2))
            .for_each(|(o, c)| *o = u64::from(u16::from_le_bytes([c[0], c[1]]))),
        4 => out
            .iter_mut()
            .zip(bytes.chunks_exact(4))
            .for_each(|(o, c)| *o = u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        _ => out
            .iter_mut()
            .zip(bytes.chunks_exact(8))
            .for_each(|(o, c)| *o = u64::from_le_bytes(c.try_into().expect("8 bytes"))),
    }
}

/// The inverse of [`unpack`]: each element's low `size` bytes.
fn pack(bits: &[u64], size: usize, out: &mut [u8]) {
    match size {
        1 => out.iter_mut().zip(bits).for_each(|(o, &v)| *o = v as u8),
        2 => out
            .chunks_exact_mut(2)
            .zip(bits)
            .for_each(|(o, &v)| o.copy_from_slice(&(v as u16).to_le_bytes())),
        4 => out
            .chunks_exact_mut(4)
            .zip(bits)
            .for_each(|(o, &v)| o.copy_from_slice(&(v as u32).to_le_bytes())),
        _ => out
            .chunks_exact_mut(8)
            .zip(bits)
            .for_each(|(o, &v)| o.copy_from_slice(&v.to_le_bytes())),
    }
}

/// D = A × B + C on row-major integer matrices, `c` becoming D: products
/// and sums in 64 bits (each product of 8-bit elements is exact in 32),
/// added in `k`'s order.
#[inline(always)]
fn int_product(shape: [usize; 3], a: &[i32], b: &[i32], c: &mut [i64]) {
    rows(shape, a, b, c, |s, x, y| s + i64::from(x * y));
}

/// D = A × B + C on row-major matrices of values, `c` becoming D: each
/// element's sum in `k`'s order from C's element, by fused multiply-adds
/// when `fused` (f64 fragments), else by exact products (every product of
/// f16, bf16 and tf32 elements is exact in f64) added one by one.
#[inline(always)]
fn float_product(shape: [usize; 3], fused: bool, a: &[f64], b: &[f64], c: &mut [f64]) {
    if fused {
        rows(shape, a, b, c, |s, x, y| x.mul_add(y, s));
    } else {
        rows(shape, a, b, c, |s, x, y| s + x * y);
    }
}

/// D = A × B + C, `c` becoming D, each element's `mac(sum, a, b)` over
/// `k` in order. The loops run over D's rows, so a row of `n` sums
/// advances together (vector operations on the host, the same order per
/// element); for the usual widths the row stays in registers.
#[inline(always)]
fn rows<E: Copy, T: Copy + Default>(
    [m, n, k]: [usize; 3],
    a: &[E],
    b: &[E],
    c: &mut [T],
    mac: impl Fn(T, E, E) -> T + Copy,
) {
    match n {
        8 => rows_of::<8, E, T>(m, k, a, b, c, mac),
        16 => rows_of::<16, E, T>(m, k, a, b, c, mac),
        32 => rows_of::<32, E, T>(m, k, a, b, c, mac),
        _ => {
            for i in 0..m {
                let row = &mut c[i * n..(i + 1) * n];
                for kk in 0..k {
                    let x = a[i * k + kk];
                    for (s, &y) in row.iter_mut().zip(&b[kk * n..(kk + 1) * n]) {
                        *s = mac(*s, x, y);
                    }
                }
            }
        }
    }
}

/// [`rows`] for `N` columns: a row of D held in registers while it sums
/// over `k`.
#[inline(always)]
fn rows_of<const N: usize, E: Copy, T: Copy + Default>(
    m: usize,
    k: usize,
    a: &[E],
    b: &[E],
    c: &mut [T],
    mac: impl Fn(T, E, E) -> T,
) {
    for i in 0..m {
        let mut row = [T::default(); N];
        row.copy_from_slice(&c[i * N..(i + 1) * N]);
        for kk in 0..k {
            let x = a[i * k + kk];
            let brow: &[E; N] = b[kk * N..(kk + 1) * N].try_into().expect("N columns");
            for (s, &y) in row.iter_mut().zip(brow) {
                *s = mac(*s, x, y);
            }
        }
        c[i * N..(i + 1) * N].copy_from_slice(&row);
    }
}

impl Launch<'_> {
    wide_twin! {
        /// `wmma.mma`/`mma.sync` `x`: gathers the fragments, multiplies,
        /// and writes D's fragment (the whole instruction in the copy
        /// compiled for the host's vector units where it has them).
        fn product / product_wide / product_base / product_body
            (&self, w: &mut Warp, x: &Wmma, sc: &mut Scratch);
    }

    #[inline(always)]
    fn product_body(&self, w: &mut Warp, x: &Wmma, sc: &mut Scratch) {
        let WmmaOp::Mma {
            fixed,
            ab,
            cty,
            dty,
            satfinite,
            ref d,
            ref a,
            ref b,
            ref c,
        } = x.op
        else {
            return;
        };
        let [m, n, k] = x.shape.map(|v| v as usize);
        let layout = |which| {
            if fixed {
                Layout::Mma {
                    shape: x.shape,
                    which,
                }
            } else {
                Layout::Wmma
            }
        };
        if !fixed && [ab, cty, dty] == [WTy::F64; 3] && [m, n, k] == [8, 8, 4] {
            // wmma's f64 product, the most frequent instruction of an
            // f64 GEMM: a and b one element per lane, C and D two (lane
            // l's element e at row-major position 2l + e).
            let (ma, mb, mc) = (&mut sc.fa, &mut sc.fb, &mut sc.fc);
            let lanes = |r: u32| &w.regs[r as usize * 32..r as usize * 32 + 32];
            for ((x, y), (&u, &v)) in ma
                .iter_mut()
                .zip(mb.iter_mut())
                .zip(lanes(a[0]).iter().zip(lanes(b[0])))
            {
                (*x, *y) = (f64::from_bits(u), f64::from_bits(v));
            }
            for (l, (&u, &v)) in lanes(c[0]).iter().zip(lanes(c[1])).enumerate() {
                (mc[2 * l], mc[2 * l + 1]) = (f64::from_bits(u), f64::from_bits(v));
            }
            rows_of::<8, f64, f64>(8, 4, &ma[..32], &mb[..32], &mut mc[..64], |s, x, y| {
                x.mul_add(y, s)
            });
            for e in 0..2 {
                let r = d[e] as usize * 32;
                for (l, v) in w.regs[r..r + 32].iter_mut().enumerate() {
                    *v = mc[2 * l + e].to_bits();
                }
            }
            return;
        }
        if dty == WTy::S32 {
            let (ma, mb, mc) = (&mut sc.ia, &mut sc.ib, &mut sc.ic);
            if ab == WTy::U8 {
                gather(w, a, ab, layout(0), (m, k), ma, |b| i32::from(b as u8));
                gather(w, b, ab, layout(1), (k, n), mb, |b| i32::from(b as u8));
            } else {
                gather(w, a, ab, layout(0), (m, k), ma, |b| {
                    i32::from(b as u8 as i8)
                });
                gather(w, b, ab, layout(1), (k, n), mb, |b| {
                    i32::from(b as u8 as i8)
                });
            }
            gather(w, c, cty, layout(2), (m, n), mc, |b| {
                i64::from(b as u32 as i32)
            });
            int_product([m, n, k], ma, mb, mc);
            if satfinite {
                scatter(w, d, dty, layout(2), (m, n), mc, |s| {
                    u64::from(s.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32 as u32)
                });
            } else {
                scatter(w, d, dty, layout(2), (m, n), mc, |s| {
                    u64::from(s as i32 as u32)
                });
            }
        } else {
            let (ma, mb, mc) = (&mut sc.fa, &mut sc.fb, &mut sc.fc);
            with_value!(ab, |f| {
                gather(w, a, ab, layout(0), (m, k), ma, f);
                gather(w, b, ab, layout(1), (k, n), mb, f);
            });
            with_value!(cty, |f| gather(w, c, cty, layout(2), (m, n), mc, f));
            // f64 products are a chain of fused multiply-adds; the others
            // are exact in f64, so fused or not is the same.
            float_product([m, n, k], dty == WTy::F64, ma, mb, mc);
            match dty {
                WTy::F64 => scatter(w, d, dty, layout(2), (m, n), mc, f64::to_bits),
                WTy::F16 => scatter(w, d, dty, layout(2), (m, n), mc, |s| {
                    u64::from(HFmt::F16.round(s, 0.0))
                }),
                _ => scatter(w, d, dty, layout(2), (m, n), mc, |s| {
                    u64::from((s as f32).to_bits())
                }),
            }
        }
    }

    wide_twin! {
        /// Writes the fragment `sc.frag` (element bits, row-major) into
        /// registers `regs` in wmma's layout.
        fn fragment_in / fragment_in_wide / fragment_in_base / fragment_in_body
            (&self, w: &mut Warp, regs: &[u32], ty: WTy, shape: (usize, usize), sc: &Scratch);
    }

    #[inline(always)]
    fn fragment_in_body(
        &self,
        w: &mut Warp,
        regs: &[u32],
        ty: WTy,
        shape: (usize, usize),
        sc: &Scratch,
    ) {
        scatter(w, regs, ty, Layout::Wmma, shape, &sc.frag, |b| b);
    }

    wide_twin! {
        /// Reads registers `regs` in wmma's layout into `sc.frag`.
        fn fragment_out / fragment_out_wide / fragment_out_base / fragment_out_body
            (&self, w: &Warp, regs: &[u32], ty: WTy, shape: (usize, usize), sc: &mut Scratch);
    }

    #[inline(always)]
    fn fragment_out_body(
        &self,
        w: &Warp,
        regs: &[u32],
        ty: WTy,
        shape: (usize, usize),
        sc: &mut Scratch,
    ) {
        gather(w, regs, ty, Layout::Wmma, shape, &mut sc.frag, |b| b);
    }

    /// The base address and stride (in elements) of a fragment access,
    /// when every lane gives the same (as the PTX ISA asks of `wmma`).
    fn uniform_access(
        &self,
        w: &Warp,
        addr: Addr,
        stride: Option<Src>,
    ) -> Option<(u64, Option<u64>)> {
        let same = |r: u32| {
            let v = &w.regs[r as usize * 32..r as usize * 32 + 32];
            v.iter().all(|&x| x == v[0])
        };
        let base = self.address(w, addr, 0);
        let st = stride.map(|s| self.rd(w, s, 0) as u32 as u64);
        // The common case: the registers themselves are the same in
        // every lane.
        let stride_same = match stride {
            None | Some(Src::Imm(_)) => true,
            Some(Src::Reg(r)) => same(r),
            Some(_) => false,
        };
        if addr.base.is_none_or(same) && stride_same {
            return Some((base, st));
        }
        for l in 1..32 {
            if self.address(w, addr, l) != base
                || stride.is_some_and(|s| Some(self.rd(w, s, l) as u32 as u64) != st)
            {
                return None;
            }
        }
        Some((base, st))
    }

    /// Reads a `rows` × `cols` fragment at `base` (row- or column-major,
    /// `stride` elements between its rows or columns) into `frag`, its
    /// elements' bits row-major, one memory access per row or column.
    /// False, reading nothing, if the fragment is larger than
    /// [`MAX_FRAGMENT_BYTES`].
    fn load_fragment(
        &mut self,
        w: &Warp,
        space: Space,
        (base, stride, col): (u64, Option<u64>, bool),
        (rows, cols): (usize, usize),
        ty: WTy,
        sc: &mut Scratch,
    ) -> Result<bool, Error> {
        let size = (ty.bits() / 8) as usize;
        if !fits((rows, cols), size) {
            return Ok(false);
        }
        let (lines, inner) = if col { (cols, rows) } else { (rows, cols) };
        let st = stride.unwrap_or(inner as u64);
        for li in 0..lines {
            let at = base.wrapping_add((li as u64).wrapping_mul(st).wrapping_mul(size as u64));
            let buf = &mut sc.line[..inner * size];
            self.read_run(w, space, at, buf, size)?;
            if col {
                unpack(buf, size, &mut sc.bits[..inner]);
                for (i, &v) in sc.bits[..inner].iter().enumerate() {
                    sc.frag[i * cols + li] = v;
                }
            } else {
                unpack(buf, size, &mut sc.frag[li * inner..(li + 1) * inner]);
            }
        }
        Ok(true)
    }

    /// Writes the row-major `rows` × `cols` fragment of element bits
    /// `frag` at `base`, as [`Launch::load_fragment`] reads one (at most
    /// [`MAX_FRAGMENT_BYTES`]).
    fn store_fragment(
        &mut self,
        w: &Warp,
        space: Space,
        (base, stride, col): (u64, Option<u64>, bool),
        (rows, cols): (usize, usize),
        ty: WTy,
        sc: &mut Scratch,
    ) -> Result<(), Error> {
        let size = (ty.bits() / 8) as usize;
        let (lines, inner) = if col { (cols, rows) } else { (rows, cols) };
        let st = stride.unwrap_or(inner as u64);
        for li in 0..lines {
            let at = base.wrapping_add((li as u64).wrapping_mul(st).wrapping_mul(size as u64));
            let buf = &mut sc.line[..inner * size];
            if col {
                for (i, v) in sc.bits[..inner].iter_mut().enumerate() {
                    *v = sc.frag[i * cols + li];
                }
                pack(&sc.bits[..inner], size, buf);
            } else {
                pack(&sc.frag[li * inner..(li + 1) * inner], size, buf);
            }
            self.write_run(w, space, at, buf, size)?;
        }
        Ok(())
    }

    /// The largest access of at most 16 bytes, at least `elem`, that
    /// `at` is aligned to and `left` bytes hold (`elem` when `at` is not
    /// aligned to it: that access reports the misalignment).
    fn run_piece(at: u64, left: usize, elem: usize) -> usize {
        let mut p = 16;
        while p > elem && (!at.is_multiple_of(p as u64) || p > left) {
            p /= 2;
        }
        p.max(elem)
    }

    /// Where a run of `len` bytes of elements of `elem` bytes at `at`
    /// goes: a range of the block's shared memory, an address of global
    /// memory (outside the module variables), each taken whole when the
    /// run is aligned to its elements and lies there; else pieces.
    fn run_target(&self, space: Space, at: u64, len: usize, elem: usize) -> Run {
        let (sp, off) = self.resolve(space, at);
        if !off.is_multiple_of(elem as u64) {
            return Run::Pieces;
        }
        match sp {
            Space::Shared => {
                range(off, len as u64, self.shared.len()).map_or(Run::Pieces, Run::Shared)
            }
            Space::Global if off.wrapping_sub(GLOBALS_BASE) >= WINDOW_SIZE => Run::Global(off),
            _ => Run::Pieces,
        }
    }

    /// Reads `buf` (a run of elements of `elem` bytes) at `at` as lane 0:
    /// directly from shared memory or global memory when the whole run
    /// is there and aligned, else in aligned pieces of up to 16 bytes,
    /// each checked as a load of its own.
    fn read_run(
        &mut self,
        w: &Warp,
        space: Space,
        at: u64,
        buf: &mut [u8],
        elem: usize,
    ) -> Result<(), Error> {
        match self.run_target(space, at, buf.len(), elem) {
            Run::Shared(r) => {
                copy(buf, &self.shared[r]);
                return Ok(());
            }
            Run::Global(off) => return self.mem.read(off, buf),
            Run::Pieces => {}
        }
        let mut done = 0;
        while done < buf.len() {
            let a = at.wrapping_add(done as u64);
            let p = Self::run_piece(a, buf.len() - done, elem);
            self.load(w, 0, space, a, &mut buf[done..done + p])?;
            done += p;
        }
        Ok(())
    }

    /// Writes `data` at `at` as lane 0, as [`Launch::read_run`] reads.
    fn write_run(
        &mut self,
        w: &Warp,
        space: Space,
        at: u64,
        data: &[u8],
        elem: usize,
    ) -> Result<(), Error> {
        match self.run_target(space, at, data.len(), elem) {
            Run::Shared(r) => {
                copy(&mut self.shared[r], data);
                return Ok(());
            }
            Run::Global(off) => return self.mem.write(off, data),
            Run::Pieces => {}
        }
        let mut done = 0;
        while done < data.len() {
            let a = at.wrapping_add(done as u64);
            let p = Self::run_piece(a, data.len() - done, elem);
            self.store(w, 0, space, a, &data[done..done + p])?;
            done += p;
        }
        Ok(())
    }

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
        let mut sc = self.mma.take().unwrap_or_else(Scratch::new);
        let r = self.wmma_with(w, x, line, &mut sc);
        self.mma = Some(sc);
        r
    }

    fn wmma_with(
        &mut self,
        w: &mut Warp,
        x: &Wmma,
        line: u32,
        sc: &mut Scratch,
    ) -> Result<(), Error> {
        let [m, n, k] = x.shape.map(|v| v as usize);
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
                let size = (ty.bits() / 8) as usize;
                if !fits((rows, cols), size) {
                    return Err(unsupported_shape(x, line));
                }
                match self.uniform_access(w, *addr, *stride) {
                    Some((base, st)) => {
                        let access = (base, st, *col);
                        self.load_fragment(w, *space, access, (rows, cols), *ty, sc)?;
                    }
                    // Lanes giving different addresses: each lane's own
                    // elements (positions l * share..) from its own.
                    None => {
                        let share = rows * cols / 32;
                        for q in 0..rows * cols {
                            let l = q / share;
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
                            sc.frag[q] = u64::from_le_bytes(buf);
                        }
                    }
                }
                self.fragment_in(w, d, *ty, (rows, cols), sc);
            }
            WmmaOp::Store {
                col,
                ty,
                space,
                v,
                addr,
                stride,
            } => {
                let size = (ty.bits() / 8) as usize;
                if !fits((m, n), size) {
                    return Err(unsupported_shape(x, line));
                }
                self.fragment_out(w, v, *ty, (m, n), sc);
                match self.uniform_access(w, *addr, *stride) {
                    Some((base, st)) => {
                        self.store_fragment(w, *space, (base, st, *col), (m, n), *ty, sc)?;
                    }
                    None => {
                        let share = m * n / 32;
                        for q in 0..m * n {
                            let l = q / share;
                            let at =
                                self.fragment_access(w, l, (*addr, *stride, *col), (m, n), q, *ty);
                            self.store(w, l, *space, at, &sc.frag[q].to_le_bytes()[..size])?;
                        }
                    }
                }
            }
            WmmaOp::Mma { .. } => {
                if m * k > 512 || k * n > 512 || m * n > 256 {
                    return Err(unsupported_shape(x, line));
                }
                self.product(w, x, sc);
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
