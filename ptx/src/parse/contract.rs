//! Contraction of a float `mul` and the `add` or `sub` that uses its
//! result into one `fma`, as ptxas makes it.
//!
//! PTX's `mul`, `add` and `sub` on `f32`/`f64` with no rounding modifier
//! may be contracted into a fused multiply-add by the code generator, and
//! ptxas does so (its default `--fmad=true`); the same instructions with an
//! explicit `.rn` may not. NVVM leaves such pairs to ptxas (a `mul` then a
//! `sub`, where it contracts a `mul` then an `add` itself), so executing
//! them unfused gives results a GPU does not: CuPy's float64 `remainder`,
//! `x - floor(x / y) * y`, is 0 for 5.5 mod 1.1 unfused and 1.1 fused
//! (NumPy's answer).
//!
//! The rule is the conservative part of what a compiler does: a `mul`
//! whose result has exactly one use, an `add`/`sub` in the same basic
//! block a few instructions on, both without rounding modifiers, guards or
//! `.sat` and with the same `.ftz`, and no instruction in between naming
//! the mul's registers. The mul moves down next to its use and the pair
//! becomes a `nop` (or a negation) and an `fma`, so that every other
//! instruction keeps its index (branch targets stay). A `mul` whose
//! result has other uses is left alone (whether ptxas fuses each of its
//! uses is not known here).

use crate::ir::*;

/// Instructions between a `mul` and its use that the search looks at.
const WINDOW: usize = 64;

/// Contracts the pairs of `insts`. `loose[i]`: instruction `i` is a float
/// `add`, `sub` or `mul` written with no rounding modifier; `starts[i]`: a
/// label names instruction `i` (a basic block begins there).
pub(crate) fn contract(insts: &mut [Inst], mut loose: Vec<bool>, starts: &[bool]) {
    // How many times each register is named, guards included.
    let mut named: Vec<u32> = Vec::new();
    for inst in insts.iter_mut() {
        let mut count = |r: u32| {
            let r = r as usize;
            if named.len() <= r {
                named.resize(r + 1, 0);
            }
            named[r] = named[r].saturating_add(1);
        };
        inst.op.each_reg(&mut |r| count(*r));
        if let Some(g) = inst.guard {
            count(g.reg);
        }
    }
    let once = |r: u32| named.get(r as usize) == Some(&2);
    let mut j = 0;
    while j < insts.len() {
        let Some((k, op)) = pair(insts, &loose, starts, j, &once) else {
            j += 1;
            continue;
        };
        // The instructions in between name none of the mul's registers:
        // the mul moves down next to its use, and the instruction that
        // now stands at `j` is looked at next.
        insts[j..k].rotate_left(1);
        loose[j..k].rotate_left(1);
        insts[k - 1].op = op.0;
        insts[k].op = op.1;
        loose[k - 1] = false;
        loose[k] = false;
    }
}

/// What the mul at `j` and its use become, with the use's index: the
/// instruction before the use (`Nop`, or a negation into the mul's
/// result register) and the `fma`.
fn pair(
    insts: &mut [Inst],
    loose: &[bool],
    starts: &[bool],
    j: usize,
    once: &dyn Fn(u32) -> bool,
) -> Option<(usize, (Op, Op))> {
    if !loose[j] || insts[j].guard.is_some() {
        return None;
    }
    let Op::FBin {
        op: FBin::Mul,
        ty,
        m,
        d,
        a,
        b,
    } = insts[j].op
    else {
        return None;
    };
    // Its result has one use: the mul names it once, the use once.
    if m.sat || !once(d) {
        return None;
    }
    let k = use_of(insts, starts, j, d, &[a, b])?;
    if !loose[k] || insts[k].guard.is_some() {
        return None;
    }
    let Op::FBin {
        op: op @ (FBin::Add | FBin::Sub),
        ty: ty2,
        m: m2,
        d: r,
        a: x,
        b: y,
    } = insts[k].op
    else {
        return None;
    };
    if ty2 != ty || m2 != m {
        return None;
    }
    let neg = |v: Src| Op::FUn {
        op: FUn::Neg,
        ty,
        m: FMode {
            rnd: Rnd::Rn,
            ftz: false,
            sat: false,
        },
        d,
        a: v,
    };
    let fma = |a: Src, b: Src, c: Src| Op::Fma {
        ty,
        m: FMode {
            rnd: Rnd::Rn,
            ftz: m.ftz,
            sat: false,
        },
        d: r,
        a,
        b,
        c,
    };
    let ops = match (op, x == Src::Reg(d), y == Src::Reg(d)) {
        // a*b + y, x + a*b: the mul's result is no longer read.
        (FBin::Add, true, false) => (Op::Nop, fma(a, b, y)),
        (FBin::Add, false, true) => (Op::Nop, fma(a, b, x)),
        // x - a*b = fma(-a, b, x), a*b - y = fma(a, b, -y): the negation
        // goes to the mul's result register, which only the fma reads.
        (FBin::Sub, false, true) => (neg(a), fma(Src::Reg(d), b, x)),
        (FBin::Sub, true, false) => (neg(y), fma(a, b, Src::Reg(d))),
        _ => return None,
    };
    Some((k, ops))
}

/// The instruction after `j`, in its basic block and within [`WINDOW`],
/// that names register `d`, if no instruction before it names one of
/// `keep` or may branch.
fn use_of(insts: &mut [Inst], starts: &[bool], j: usize, d: u32, keep: &[Src]) -> Option<usize> {
    let end = insts.len().min(j + 1 + WINDOW);
    for k in j + 1..end {
        if starts[k] {
            return None;
        }
        if names(&mut insts[k], d) {
            return Some(k);
        }
        if keep.iter().any(|&s| is_named(&mut insts[k], s)) || branches(&insts[k].op) {
            return None;
        }
    }
    None
}

fn is_named(inst: &mut Inst, s: Src) -> bool {
    match s {
        Src::Reg(r) | Src::NotPred(r) => names(inst, r),
        Src::Imm(_) | Src::Sreg(_) => false,
    }
}

fn names(inst: &mut Inst, r: u32) -> bool {
    let mut found = inst.guard.is_some_and(|g| g.reg == r);
    inst.op.each_reg(&mut |x| found |= *x == r);
    found
}

/// Whether `op` may leave the basic block (or call code that might name
/// the registers).
fn branches(op: &Op) -> bool {
    matches!(
        op,
        Op::Bra { .. }
            | Op::Ret
            | Op::Exit
            | Op::Trap
            | Op::Call { .. }
            | Op::CallRec { .. }
            | Op::CallFrame(_)
            | Op::RetFrame
            | Op::CallIndirect(_)
            | Op::Dispatch { .. }
    )
}
