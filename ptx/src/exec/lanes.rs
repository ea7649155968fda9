//! Whole-warp forms of the common instructions.
//!
//! A warp's registers are stored lane-major per register (`regs[r * 32 +
//! lane]`), so one instruction's operands are 32 consecutive values. The
//! helpers here read each operand once for all lanes, apply the operation
//! lane by lane in a loop the compiler can unroll and vectorize, and write
//! the lanes that execute. [`specialize!`] fixes an operation's kind and
//! type at compile time for the pairs nvcc emits most, so that a lane's
//! work folds to a few machine instructions instead of a walk through the
//! operation's `match`. Results are the same functions' results: the
//! generic and the specialized paths call the same code.

use super::{bits_of, Launch, Warp};
use crate::ir::{Space, Src, Sreg, Ty};
use crate::{Error, GLOBALS_BASE, LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW, WINDOW_SIZE};

/// Whether this CPU has the features of the lane loops' wide copies
/// (AVX2 and FMA, with BMI and POPCNT: every x86-64 server CPU since 2013).
/// The standard library caches what it detects.
pub(crate) fn host_has_simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("bmi1")
            && std::is_x86_feature_detected!("bmi2")
            && std::is_x86_feature_detected!("lzcnt")
            && std::is_x86_feature_detected!("popcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Every lane of a warp.
pub(super) const FULL: u32 = u32::MAX;

/// Most bytes one lane loads or stores in one instruction (`.v4.b64`).
pub(super) const MAX_ACCESS: usize = 32;

/// The bytes of one access in every lane.
pub(super) type LaneBytes = [[u8; MAX_ACCESS]; 32];

/// Evaluates `$body` with `$k` a constant item equal to `$v` when `$v` is
/// one of the listed values (one copy of `$body` per value, in which the
/// compiler folds every use of `$k`, closures' included: a closure does
/// not capture a constant), and with `$k` a variable holding `$v`
/// otherwise.
macro_rules! specialize {
    ($k:ident: $t:ty = $v:expr; [$($c:path),* $(,)?] => $body:expr) => {
        match $v {
            $(
                $c => {
                    const $k: $t = $c;
                    $body
                }
            )*
            #[allow(non_snake_case)]
            $k => $body,
        }
    };
}
pub(super) use specialize;

impl Launch<'_> {
    /// The values of `s` in all 32 lanes: borrowed from the register file
    /// where they are a register's, else written into `buf`. Always an
    /// array, so that the lane loops reading it have no branch per lane
    /// and vectorize.
    #[inline(always)]
    pub(super) fn operand<'w>(&self, w: &'w Warp, s: Src, buf: &'w mut [u64; 32]) -> &'w [u64; 32] {
        match s {
            Src::Reg(r) => {
                let b = r as usize * 32;
                w.regs[b..b + 32].try_into().expect("32 lanes")
            }
            _ => {
                *buf = self.lanes(w, s);
                buf
            }
        }
    }

    /// The values of `s` in all 32 lanes.
    #[inline(always)]
    pub(super) fn lanes(&self, w: &Warp, s: Src) -> [u64; 32] {
        match s {
            Src::Reg(r) => {
                let b = r as usize * 32;
                let mut v = [0u64; 32];
                // Two halves: a copy of 128 bytes is inlined, one of 256
                // is a call of `memcpy`.
                v[..16].copy_from_slice(&w.regs[b..b + 16]);
                v[16..].copy_from_slice(&w.regs[b + 16..b + 32]);
                v
            }
            Src::Imm(v) => [v; 32],
            Src::NotPred(r) => {
                let b = r as usize * 32;
                let mut v = [0u64; 32];
                for (l, o) in v.iter_mut().enumerate() {
                    *o = (w.regs[b + l] & 1) ^ 1;
                }
                v
            }
            Src::Sreg(Sreg::Tid(d)) => {
                let mut v = [0u64; 32];
                for (o, t) in v.iter_mut().zip(&w.tid) {
                    *o = u64::from(t[d as usize]);
                }
                v
            }
            Src::Sreg(Sreg::LaneId) => std::array::from_fn(|l| l as u64),
            // The same in every lane: read once.
            Src::Sreg(
                r @ (Sreg::Ntid(_)
                | Sreg::Ctaid(_)
                | Sreg::Nctaid(_)
                | Sreg::WarpId
                | Sreg::NWarpId),
            ) => [self.sreg(w, r, 0); 32],
            Src::Sreg(_) => {
                let mut v = [0u64; 32];
                for (l, o) in v.iter_mut().enumerate() {
                    *o = self.rd(w, s, l);
                }
                v
            }
        }
    }

    /// The lanes whose predicate value (bit 0 of `p`) is set.
    #[inline(always)]
    pub(super) fn pred_mask(&self, p: &[u64; 32]) -> u32 {
        #[cfg(target_arch = "x86_64")]
        if self.wide {
            // SAFETY: `wide` is set only on a CPU with AVX2.
            return unsafe { super::simd::pred_mask(p) };
        }
        let mut set = 0u32;
        for (v, bit) in p.iter().zip(super::BIT) {
            set |= if *v & 1 != 0 { bit } else { 0 };
        }
        set
    }

    /// Register `d`'s 32 lanes.
    #[inline(always)]
    pub(super) fn dst(w: &mut Warp, d: u32) -> &mut [u64; 32] {
        let b = d as usize * 32;
        (&mut w.regs[b..b + 32]).try_into().expect("32 lanes")
    }

    /// Writes `v` to register `d` in the lanes of `exec`.
    #[inline(always)]
    pub(super) fn put(w: &mut Warp, exec: u32, d: u32, v: &[u64; 32]) {
        let out = Self::dst(w, d);
        if exec == FULL {
            out[..16].copy_from_slice(&v[..16]);
            out[16..].copy_from_slice(&v[16..]);
        } else {
            for l in bits_of(exec) {
                out[l] = v[l];
            }
        }
    }

    // The operations below are generic over their lane function and kept
    // out of line: one small function per operation and type, each with
    // its lane function inlined into its loop. Inlined into the
    // interpreter's dispatch instead, their operand arrays would add up
    // to a stack frame of many pages, touched on every instruction.

    wide_twin! {
        /// `d = f(a)` in the lanes of `exec`.
        pub(super) fn map1 / map1_wide / map1_base / map1_body(
            &self,
            w: &mut Warp,
            exec: u32,
            d: u32,
            a: Src,
            f: impl Fn(u64) -> u64
        );
    }

    #[inline(always)]
    fn map1_body(&self, w: &mut Warp, exec: u32, d: u32, a: Src, f: impl Fn(u64) -> u64) {
        if exec == FULL {
            // Straight into the destination: no buffer to clear or copy.
            let x = self.lanes(w, a);
            for (o, &x) in Self::dst(w, d).iter_mut().zip(&x) {
                *o = f(x);
            }
            return;
        }
        let mut r = [0u64; 32];
        let mut bx = [0u64; 32];
        let x = self.operand(w, a, &mut bx);
        if exec == FULL {
            for (l, o) in r.iter_mut().enumerate() {
                *o = f(x[l]);
            }
        } else {
            for l in bits_of(exec) {
                r[l] = f(x[l]);
            }
        }
        Self::put(w, exec, d, &r);
    }

    wide_twin! {
        /// `d = f(a, b)` in the lanes of `exec`.
        pub(super) fn map2 / map2_wide / map2_base / map2_body(
            &self,
            w: &mut Warp,
            exec: u32,
            d: u32,
            a: Src,
            b: Src,
            f: impl Fn(u64, u64) -> u64
        );
    }

    #[inline(always)]
    fn map2_body(
        &self,
        w: &mut Warp,
        exec: u32,
        d: u32,
        a: Src,
        b: Src,
        f: impl Fn(u64, u64) -> u64,
    ) {
        if exec == FULL {
            let (x, y) = (self.lanes(w, a), self.lanes(w, b));
            for (l, o) in Self::dst(w, d).iter_mut().enumerate() {
                *o = f(x[l], y[l]);
            }
            return;
        }
        let mut r = [0u64; 32];
        let (mut bx, mut by) = ([0u64; 32], [0u64; 32]);
        let (x, y) = (self.operand(w, a, &mut bx), self.operand(w, b, &mut by));
        if exec == FULL {
            for (l, o) in r.iter_mut().enumerate() {
                *o = f(x[l], y[l]);
            }
        } else {
            for l in bits_of(exec) {
                r[l] = f(x[l], y[l]);
            }
        }
        Self::put(w, exec, d, &r);
    }

    wide_twin! {
        /// `d = f(a, b, c)` in the lanes of `exec`.
        #[allow(clippy::too_many_arguments)]
        pub(super) fn map3 / map3_wide / map3_base / map3_body(
            &self,
            w: &mut Warp,
            exec: u32,
            d: u32,
            a: Src,
            b: Src,
            c: Src,
            f: impl Fn(u64, u64, u64) -> u64
        );
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn map3_body(
        &self,
        w: &mut Warp,
        exec: u32,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        f: impl Fn(u64, u64, u64) -> u64,
    ) {
        if exec == FULL {
            // The operands copied first (the destination may be one of
            // them), the result written in place.
            let (x, y, z) = (self.lanes(w, a), self.lanes(w, b), self.lanes(w, c));
            for (l, o) in Self::dst(w, d).iter_mut().enumerate() {
                *o = f(x[l], y[l], z[l]);
            }
            return;
        }
        let mut r = [0u64; 32];
        let (mut bx, mut by, mut bz) = ([0u64; 32], [0u64; 32], [0u64; 32]);
        let (x, y, z) = (
            self.operand(w, a, &mut bx),
            self.operand(w, b, &mut by),
            self.operand(w, c, &mut bz),
        );
        if exec == FULL {
            for (l, o) in r.iter_mut().enumerate() {
                *o = f(x[l], y[l], z[l]);
            }
        } else {
            for l in bits_of(exec) {
                r[l] = f(x[l], y[l], z[l]);
            }
        }
        Self::put(w, exec, d, &r);
    }

    wide_twin! {
        /// `setp` without a combining predicate: `d = test(a, b)` and, if
        /// given, `dn = !test(a, b)` in the lanes of `exec`.
        #[allow(clippy::too_many_arguments)]
        pub(super) fn setp / setp_wide / setp_base / setp_body(
            &self,
            w: &mut Warp,
            exec: u32,
            d: u32,
            dn: Option<u32>,
            a: Src,
            b: Src,
            test: impl Fn(u64, u64) -> bool
        );
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn setp_body(
        &self,
        w: &mut Warp,
        exec: u32,
        d: u32,
        dn: Option<u32>,
        a: Src,
        b: Src,
        test: impl Fn(u64, u64) -> bool,
    ) {
        if exec == FULL {
            let (x, y) = (self.lanes(w, a), self.lanes(w, b));
            for (l, o) in Self::dst(w, d).iter_mut().enumerate() {
                *o = u64::from(test(x[l], y[l]));
            }
            if let Some(q) = dn {
                let t = Self::dst(w, d).map(|v| v ^ 1);
                *Self::dst(w, q) = t;
            }
            return;
        }
        let mut t = [0u64; 32];
        let (mut bx, mut by) = ([0u64; 32], [0u64; 32]);
        let (x, y) = (self.operand(w, a, &mut bx), self.operand(w, b, &mut by));
        for (l, o) in t.iter_mut().enumerate() {
            *o = u64::from(test(x[l], y[l]));
        }
        Self::put(w, exec, d, &t);
        if let Some(q) = dn {
            for v in t.iter_mut() {
                *v ^= 1;
            }
            Self::put(w, exec, q, &t);
        }
    }

    /// Whether a warp-wide access of `len` bytes at `at` in the lanes of
    /// `exec` can take the direct path: every lane aligned and, in
    /// `space`, every lane plainly in the context's global memory (not the
    /// module's variables, not a window of another space) or every lane
    /// in shared memory. `None`: some lane needs the general path (which
    /// also reports its error exactly).
    #[inline(always)]
    pub(super) fn direct_space(
        &self,
        space: Space,
        exec: u32,
        at: &[u64; 32],
        len: usize,
    ) -> Option<Space> {
        let len = len as u64;
        // Accesses are 1 to 32 bytes, powers of two (vectors of 2 or 4).
        if !len.is_power_of_two() {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        if self.wide && exec == FULL {
            // The same checks four lanes at a time.
            let mut holes = [(0u64, 0u64); 5];
            let (last, n, sp) = match space {
                Space::Shared => (
                    (self.shared.len() as u64).checked_sub(len)?,
                    0,
                    Space::Shared,
                ),
                Space::Global | Space::Generic => {
                    holes[0] = (self.globals_alias, self.globals.len() as u64);
                    holes[1] = (GLOBALS_BASE, WINDOW_SIZE);
                    holes[2] = (SHARED_WINDOW, WINDOW_SIZE);
                    holes[3] = (LOCAL_WINDOW, WINDOW_SIZE);
                    holes[4] = (PARAM_WINDOW, WINDOW_SIZE);
                    // Module variables are aliased only where the alias is set.
                    let first = usize::from(self.globals_alias == 0);
                    holes.copy_within(first.., 0);
                    let n = 5 - first - if space == Space::Global { 3 } else { 0 };
                    (u64::MAX, n, Space::Global)
                }
                _ => return None,
            };
            // SAFETY: `wide` is set only on a CPU with AVX2.
            let bad = unsafe { super::simd::any_outside(at, len - 1, last, &holes[..n]) };
            return (!bad).then_some(sp);
        }
        // Over all 32 lanes, the others masked out: branch-free loops the
        // compiler vectorizes.
        if any(exec, at, |a| a & (len - 1) != 0) {
            return None;
        }
        match space {
            Space::Shared => {
                let last = (self.shared.len() as u64).checked_sub(len)?;
                (!any(exec, at, |a| a > last)).then_some(Space::Shared)
            }
            Space::Global | Space::Generic => {
                let alias = self.globals_alias;
                let globals = self.globals.len() as u64;
                let plain = |a: u64| {
                    (alias == 0 || a.wrapping_sub(alias) >= globals)
                        && a.wrapping_sub(GLOBALS_BASE) >= WINDOW_SIZE
                        && (space == Space::Global || !self.in_window(a))
                };
                bits_of(exec).all(|l| plain(at[l])).then_some(Space::Global)
            }
            _ => None,
        }
    }

    /// A full warp's load of one 4- or 8-byte element per lane from
    /// shared memory into register `d`, as AVX2 gathers; false (nothing
    /// written) where it needs the general path: another width, some lanes
    /// off, an address out of range or misaligned, no AVX2.
    #[inline(always)]
    pub(super) fn shared_gather(
        &self,
        w: &mut Warp,
        exec: u32,
        ty: Ty,
        d: u32,
        at: &[u64; 32],
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.wide && exec == FULL {
            let out = Self::dst(w, d);
            return match ty.bytes() {
                // SAFETY: `wide` is set only on a CPU with AVX2.
                4 => unsafe { super::simd::gather::<4>(&self.shared, at, 0, ty.is_signed(), out) },
                // SAFETY: as above.
                8 => unsafe { super::simd::gather::<8>(&self.shared, at, 0, false, out) },
                _ => false,
            };
        }
        let _ = (w, exec, ty, d, at);
        false
    }

    /// A full warp's store of one 4- or 8-byte element per lane to shared
    /// memory, in lane order (the highest lane's store to an address is
    /// the one that stays); false (nothing written) where it needs the
    /// general path: another width, some lanes off, an address out of
    /// range or misaligned.
    #[inline(always)]
    pub(super) fn shared_scatter(
        &mut self,
        w: &Warp,
        exec: u32,
        ty: Ty,
        s: Src,
        at: &[u64; 32],
    ) -> bool {
        let e = ty.bytes() as usize;
        if exec != FULL || !(e == 4 || e == 8) {
            return false;
        }
        if self.direct_space(Space::Shared, exec, at, e).is_none() {
            return false;
        }
        let mut bv = [0u64; 32];
        let v = self.operand(w, s, &mut bv);
        // Every lane's element lies inside (checked above); clamping the
        // offset changes none of them and drops the bounds checks.
        let last = self.shared.len().saturating_sub(e);
        if e == 4 {
            for (&a, &x) in at.iter().zip(v) {
                let o = (a as usize).min(last);
                let b: &mut [u8; 4] = (&mut self.shared[o..o + 4]).try_into().expect("4 bytes");
                *b = (x as u32).to_le_bytes();
            }
        } else {
            for (&a, &x) in at.iter().zip(v) {
                let o = (a as usize).min(last);
                let b: &mut [u8; 8] = (&mut self.shared[o..o + 8]).try_into().expect("8 bytes");
                *b = x.to_le_bytes();
            }
        }
        true
    }

    wide_twin! {
        /// Loads `e`-byte elements, `n` per lane, into `ds` in the lanes of
        /// `exec`; false if the access must take the general path.
        #[allow(clippy::too_many_arguments)]
        pub(super) fn load_lanes / load_lanes_wide / load_lanes_base / load_lanes_body(
            &mut self,
            w: &mut Warp,
            exec: u32,
            space: Space,
            ty: Ty,
            ds: &[u32],
            at: &[u64; 32]
        ) -> Result<bool, Error>;
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn load_lanes_body(
        &mut self,
        w: &mut Warp,
        exec: u32,
        space: Space,
        ty: Ty,
        ds: &[u32],
        at: &[u64; 32],
    ) -> Result<bool, Error> {
        let e = ty.bytes() as usize;
        let total = e * ds.len();
        let signed = ty.is_signed();
        let bits = ty.bits();
        if space == Space::Param {
            // A kernel parameter: one address for every lane, read once.
            let a = at[exec.trailing_zeros() as usize & 31];
            let end = a.checked_add(total as u64);
            if any(exec, at, |x| x != a)
                || !a.is_multiple_of(total as u64)
                || a >= crate::ir::PARAM_SCRATCH_BASE
                || end.is_none_or(|end| end > u64::from(self.func.param_bytes))
            {
                return Ok(false);
            }
            let bytes = &self.params[a as usize..a as usize + total];
            for (k, &d) in ds.iter().enumerate() {
                let v = value(&bytes[k * e..(k + 1) * e], signed, bits);
                Self::put(w, exec, d, &[v; 32]);
            }
            return Ok(true);
        }
        let Some(sp) = self.direct_space(space, exec, at, total) else {
            return Ok(false);
        };
        if sp == Space::Shared {
            for (k, &d) in ds.iter().enumerate() {
                let out = Self::dst(w, d);
                #[cfg(target_arch = "x86_64")]
                if self.wide && exec == FULL {
                    let off = (k * e) as u64;
                    let s32 = signed && bits == 32;
                    let done = match e {
                        // SAFETY: `wide` is set only on a CPU with AVX2.
                        4 => unsafe { super::simd::gather::<4>(&self.shared, at, off, s32, out) },
                        // SAFETY: as above.
                        8 => unsafe { super::simd::gather::<8>(&self.shared, at, off, false, out) },
                        _ => false,
                    };
                    if done {
                        continue;
                    }
                }
                match e {
                    4 => gather::<4>(&self.shared, exec, at, k, out, signed, bits),
                    8 => gather::<8>(&self.shared, exec, at, k, out, signed, bits),
                    2 => gather::<2>(&self.shared, exec, at, k, out, signed, bits),
                    _ => gather::<1>(&self.shared, exec, at, k, out, signed, bits),
                }
            }
            return Ok(true);
        }
        // Every lane reading one address (a scalar behind a pointer, an
        // index the same in the whole warp): one read, its value in every
        // lane. Where it fails, the lanes below name the first faulting
        // one as before.
        let a = at[exec.trailing_zeros() as usize & 31];
        if total <= MAX_ACCESS && !any(exec, at, |x| x != a) {
            let mut one = [0u8; MAX_ACCESS];
            if self.mem.read(a, &mut one[..total]).is_ok() {
                for (k, &d) in ds.iter().enumerate() {
                    let v = value(&one[k * e..(k + 1) * e], signed, bits);
                    Self::put(w, exec, d, &[v; 32]);
                }
                return Ok(true);
            }
        }
        let mut buf = self.lane_bytes.take().unwrap_or_else(new_lane_bytes);
        // A full warp reading consecutive elements (a coalesced access):
        // one read of the whole range. Where it fails (the range leaves
        // one allocation), the lanes are read one by one below, which
        // names the failing lane as before.
        // A vector access (`.v2`, `.v4`) the same, its elements taken
        // apart into their registers.
        if exec == FULL && e <= 8 && total <= MAX_ACCESS && contiguous(at, total as u64) {
            let flat = buf.as_flattened_mut();
            let (lo, hi) = flat[..32 * total].split_at_mut(16 * total);
            if self.mem.read(at[0], lo).is_ok() && self.mem.read(at[16], hi).is_ok() {
                if let [d] = *ds {
                    let out = Self::dst(w, d);
                    match e {
                        1 => widen_all::<1>(out, flat, signed, bits),
                        2 => widen_all::<2>(out, flat, signed, bits),
                        4 => widen_all::<4>(out, flat, signed, bits),
                        _ => widen_all::<8>(out, flat, signed, bits),
                    }
                } else {
                    for (k, &d) in ds.iter().enumerate() {
                        let (out, at) = (Self::dst(w, d), &flat[k * e..]);
                        match e {
                            1 => widen_strided::<1>(out, at, total, signed, bits),
                            2 => widen_strided::<2>(out, at, total, signed, bits),
                            4 => widen_strided::<4>(out, at, total, signed, bits),
                            _ => widen_strided::<8>(out, at, total, signed, bits),
                        }
                    }
                }
                self.lane_bytes = Some(buf);
                return Ok(true);
            }
        }
        self.mem.read_lanes(exec, at, total, &mut buf)?;
        for (k, &d) in ds.iter().enumerate() {
            let out = Self::dst(w, d);
            for l in bits_of(exec) {
                out[l] = value(&buf[l][k * e..(k + 1) * e], signed, bits);
            }
        }
        self.lane_bytes = Some(buf);
        Ok(true)
    }

    wide_twin! {
        /// Stores `e`-byte elements, `srcs.len()` per lane, in the lanes of
        /// `exec`; false if the access must take the general path.
        #[allow(clippy::too_many_arguments)]
        pub(super) fn store_lanes / store_lanes_wide / store_lanes_base / store_lanes_body(
            &mut self,
            w: &Warp,
            exec: u32,
            space: Space,
            ty: Ty,
            srcs: &[Src],
            at: &[u64; 32]
        ) -> Result<bool, Error>;
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn store_lanes_body(
        &mut self,
        w: &Warp,
        exec: u32,
        space: Space,
        ty: Ty,
        srcs: &[Src],
        at: &[u64; 32],
    ) -> Result<bool, Error> {
        let e = ty.bytes() as usize;
        let total = e * srcs.len();
        let Some(sp) = self.direct_space(space, exec, at, total) else {
            return Ok(false);
        };
        if sp != Space::Shared
            && exec == FULL
            && srcs.len() == 1
            && e <= 8
            && contiguous(at, e as u64)
        {
            // A full warp writing consecutive elements: one write of the
            // whole range (lanes do not overlap, so lane order is moot).
            // Where it fails nothing was written, and the lanes are
            // written one by one below, stopping at the failing lane as
            // before.
            let mut bv = [0u64; 32];
            let v = self.operand(w, srcs[0], &mut bv);
            let mut flat = [0u8; 32 * 8];
            match e {
                1 => narrow_all::<1>(&mut flat, v),
                2 => narrow_all::<2>(&mut flat, v),
                4 => narrow_all::<4>(&mut flat, v),
                _ => narrow_all::<8>(&mut flat, v),
            }
            // Half by half; where the second half fails, the first is
            // written again by the lanes below, with the same bytes.
            let (lo, hi) = flat[..32 * e].split_at(16 * e);
            if self.mem.write(at[0], lo).is_ok() && self.mem.write(at[16], hi).is_ok() {
                return Ok(true);
            }
        }
        let mut buf = self.lane_bytes.take().unwrap_or_else(new_lane_bytes);
        // A vector store (`.v2`, `.v4`) of consecutive vectors the same,
        // its elements put together first.
        if sp != Space::Shared
            && exec == FULL
            && srcs.len() > 1
            && e <= 8
            && total <= MAX_ACCESS
            && contiguous(at, total as u64)
        {
            let flat = buf.as_flattened_mut();
            for (k, &s) in srcs.iter().enumerate() {
                let mut bv = [0u64; 32];
                let v = self.operand(w, s, &mut bv);
                let at = &mut flat[k * e..];
                match e {
                    1 => narrow_strided::<1>(at, v, total),
                    2 => narrow_strided::<2>(at, v, total),
                    4 => narrow_strided::<4>(at, v, total),
                    _ => narrow_strided::<8>(at, v, total),
                }
            }
            let (lo, hi) = flat[..32 * total].split_at(16 * total);
            if self.mem.write(at[0], lo).is_ok() && self.mem.write(at[16], hi).is_ok() {
                self.lane_bytes = Some(buf);
                return Ok(true);
            }
        }
        for (k, &s) in srcs.iter().enumerate() {
            let mut bv = [0u64; 32];
            let v = self.operand(w, s, &mut bv);
            for l in bits_of(exec) {
                super::copy(&mut buf[l][k * e..(k + 1) * e], &v[l].to_le_bytes()[..e]);
            }
        }
        if sp == Space::Shared {
            // Lane order, as the general path: the highest lane's store to
            // a shared address is the one that stays.
            for l in bits_of(exec) {
                let o = at[l] as usize;
                super::copy(&mut self.shared[o..o + total], &buf[l][..total]);
            }
        } else {
            self.mem.write_lanes(exec, at, total, &buf)?;
        }
        self.lane_bytes = Some(buf);
        Ok(true)
    }
}

/// Whether each half-warp's addresses are consecutive elements of `e`
/// bytes (`at[l] == at[h] + (l - h) * e` for `h` 0 and 16, without
/// wrapping around): a coalesced access, or two rows of a 16-wide tile.
#[inline(always)]
fn contiguous(at: &[u64; 32], e: u64) -> bool {
    let (a0, a16) = (at[0], at[16]);
    // Branch-free over all lanes, so that it compiles to vector compares.
    let mut same = true;
    for l in 0..16 {
        same &= at[l] == a0.wrapping_add(l as u64 * e);
        same &= at[16 + l] == a16.wrapping_add(l as u64 * e);
    }
    same && a0.checked_add(16 * e).is_some() && a16.checked_add(16 * e).is_some()
}

/// A warp's 32 consecutive `E`-byte elements (`flat`, lane 0 first) as
/// register values, as [`value`] makes each; `E` known and the extension
/// chosen once for the warp, the loops have no per-lane dispatch.
#[inline(always)]
fn widen_all<const E: usize>(out: &mut [u64; 32], flat: &[u8], signed: bool, bits: u32) {
    let lanes = flat[..32 * E].chunks_exact(E);
    if signed {
        for (o, c) in out.iter_mut().zip(lanes) {
            *o = super::sext(le::<E>(c), bits) as u64;
        }
    } else {
        for (o, c) in out.iter_mut().zip(lanes) {
            *o = le::<E>(c);
        }
    }
}

/// As [`widen_all`], the lanes' elements `stride` bytes apart (one
/// element of a vector access, `flat` starting at its first lane's).
#[inline(always)]
fn widen_strided<const E: usize>(
    out: &mut [u64; 32],
    flat: &[u8],
    stride: usize,
    signed: bool,
    bits: u32,
) {
    if signed {
        for (l, o) in out.iter_mut().enumerate() {
            *o = super::sext(le::<E>(&flat[l * stride..l * stride + E]), bits) as u64;
        }
    } else {
        for (l, o) in out.iter_mut().enumerate() {
            *o = le::<E>(&flat[l * stride..l * stride + E]);
        }
    }
}

/// The `E`-byte little-endian value at the start of `b` (`E` 1, 2, 4 or
/// 8), read at its width.
#[inline(always)]
fn le<const E: usize>(b: &[u8]) -> u64 {
    match E {
        1 => u64::from(b[0]),
        2 => u64::from(u16::from_le_bytes(b[..2].try_into().expect("2 bytes"))),
        4 => u64::from(u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))),
        _ => u64::from_le_bytes(b[..8].try_into().expect("8 bytes")),
    }
}

/// The low `E` bytes of each lane's value, consecutive (lane 0 first).
#[inline(always)]
fn narrow_all<const E: usize>(flat: &mut [u8; 32 * 8], v: &[u64; 32]) {
    for (c, x) in flat[..32 * E].chunks_exact_mut(E).zip(v) {
        c.copy_from_slice(&x.to_le_bytes()[..E]);
    }
}

/// As [`narrow_all`], the lanes' elements `stride` bytes apart (one
/// element of a vector access).
#[inline(always)]
fn narrow_strided<const E: usize>(flat: &mut [u8], v: &[u64; 32], stride: usize) {
    for (l, x) in v.iter().enumerate() {
        flat[l * stride..l * stride + E].copy_from_slice(&x.to_le_bytes()[..E]);
    }
}

/// A lane buffer for [`Launch::lane_bytes`] (its contents are never read
/// before an access writes them).
fn new_lane_bytes() -> Box<LaneBytes> {
    Box::new([[0; MAX_ACCESS]; 32])
}

/// A loaded element of 1 to 8 bytes as a register value: zero- or
/// sign-extended to 64 bits.
#[inline(always)]
pub(super) fn value(bytes: &[u8], signed: bool, bits: u32) -> u64 {
    // Read at the element's width: bytes stored into a zeroed u64 and read
    // back whole would stall on store forwarding.
    let v = match *bytes {
        [a] => u64::from(a),
        [a, b] => u64::from(u16::from_le_bytes([a, b])),
        [a, b, c, d] => u64::from(u32::from_le_bytes([a, b, c, d])),
        [a, b, c, d, e, f, g, h] => u64::from_le_bytes([a, b, c, d, e, f, g, h]),
        _ => {
            let mut b8 = [0u8; 8];
            let n = bytes.len().min(8);
            b8[..n].copy_from_slice(&bytes[..n]);
            u64::from_le_bytes(b8)
        }
    };
    if signed {
        super::sext(v, bits) as u64
    } else {
        v
    }
}

/// Element `k` of `E` bytes at each lane's address in `mem` (every lane of
/// `exec` checked to lie inside), extended into `out`.
#[inline(always)]
fn gather<const E: usize>(
    mem: &[u8],
    exec: u32,
    at: &[u64; 32],
    k: usize,
    out: &mut [u64; 32],
    signed: bool,
    bits: u32,
) {
    if signed {
        gather_as::<E, true>(mem, exec, at, k, out, bits)
    } else {
        gather_as::<E, false>(mem, exec, at, k, out, bits)
    }
}

#[inline(always)]
fn gather_as<const E: usize, const SIGNED: bool>(
    mem: &[u8],
    exec: u32,
    at: &[u64; 32],
    k: usize,
    out: &mut [u64; 32],
    bits: u32,
) {
    // Every lane's element lies inside `mem` (checked by the caller);
    // clamping the offset to the last element changes none of them and
    // lets the compiler drop the bounds check and its branch.
    let last = mem.len().saturating_sub(E);
    let one = |a: u64| {
        let o = (a as usize + k * E).min(last);
        let b: &[u8; E] = mem[o..o + E].try_into().expect("E bytes");
        value(b, SIGNED, bits)
    };
    if exec == FULL {
        for l in 0..32 {
            out[l] = one(at[l]);
        }
    } else {
        for l in bits_of(exec) {
            out[l] = one(at[l]);
        }
    }
}

/// Whether `bad` holds for any lane of `exec`: evaluated in all 32 lanes,
/// the others masked out, a branch-free loop the compiler vectorizes.
#[inline(always)]
fn any(exec: u32, at: &[u64; 32], bad: impl Fn(u64) -> bool) -> bool {
    if exec == FULL {
        // A plain reduction: a few vector compares.
        return at.iter().fold(false, |hit, &a| hit | bad(a));
    }
    let mut hit = 0u32;
    for (&a, bit) in at.iter().zip(super::BIT) {
        hit |= if bad(a) { bit } else { 0 };
    }
    hit & exec != 0
}
