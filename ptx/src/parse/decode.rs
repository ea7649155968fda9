//! Opcodes and their modifiers to [`Op`]s.
//!
//! Every modifier of an opcode must be understood: one that is not (a new
//! cache hint, a type we do not implement) makes the instruction
//! [`Error::Unsupported`] with its full name, rather than being ignored.

use super::{FuncParser, Opnd};
use crate::float::HFmt;
use crate::ir::*;
use crate::Error;

/// Qualifiers of loads, stores and atomics that do not change the result of
/// a sequential execution (memory ordering, scopes, cache policies).
const MEM_QUALS: &[&str] = &[
    "weak",
    "volatile",
    "relaxed",
    "acquire",
    "release",
    "acq_rel",
    "mmio",
    "cta",
    "cluster",
    "gpu",
    "sys",
    "ca",
    "cg",
    "cs",
    "lu",
    "cv",
    "wb",
    "wt",
    "nc",
    "unified",
    "L1::evict_normal",
    "L1::evict_unchanged",
    "L1::evict_first",
    "L1::evict_last",
    "L1::no_allocate",
    "L2::evict_normal",
    "L2::evict_first",
    "L2::evict_last",
    "L2::64B",
    "L2::128B",
    "L2::256B",
];

/// Opcodes [`FuncParser::decode`] knows; the operands of any other are
/// skipped unparsed.
pub(crate) fn known(opcode: &str) -> bool {
    let base = opcode.split('.').next().unwrap_or("");
    matches!(
        base,
        "mov"
            | "call"
            | "cp"
            | "ld"
            | "ldu"
            | "st"
            | "cvta"
            | "isspacep"
            | "add"
            | "sub"
            | "addc"
            | "subc"
            | "mul"
            | "mul24"
            | "mad"
            | "mad24"
            | "madc"
            | "fma"
            | "div"
            | "rem"
            | "min"
            | "max"
            | "and"
            | "or"
            | "xor"
            | "shl"
            | "bmsk"
            | "shr"
            | "not"
            | "cnot"
            | "popc"
            | "clz"
            | "brev"
            | "bfind"
            | "abs"
            | "neg"
            | "sad"
            | "vadd4"
            | "vsub4"
            | "vabsdiff4"
            | "vmin4"
            | "vmax4"
            | "vadd2"
            | "vsub2"
            | "vabsdiff2"
            | "vmin2"
            | "vmax2"
            | "bfe"
            | "bfi"
            | "prmt"
            | "lop3"
            | "shf"
            | "set"
            | "setp"
            | "selp"
            | "slct"
            | "testp"
            | "copysign"
            | "rcp"
            | "sqrt"
            | "rsqrt"
            | "sin"
            | "cos"
            | "lg2"
            | "ex2"
            | "tanh"
            | "cvt"
            | "bra"
            | "ret"
            | "exit"
            | "bar"
            | "barrier"
            | "membar"
            | "fence"
            | "nanosleep"
            | "griddepcontrol"
            | "prefetch"
            | "prefetchu"
            | "pmevent"
            | "trap"
            | "brkpt"
            | "shfl"
            | "vote"
            | "match"
            | "activemask"
            | "redux"
            | "atom"
            | "red"
            | "tex"
            | "tld4"
            | "txq"
            | "suq"
            | "suld"
            | "sust"
            | "mbarrier"
            | "wmma"
            | "mma"
            | "ldmatrix"
            | "stmatrix"
    )
}

struct Mods<'a> {
    parts: Vec<&'a str>,
    used: Vec<bool>,
}

impl<'a> Mods<'a> {
    fn has(&mut self, m: &str) -> bool {
        for (k, p) in self.parts.iter().enumerate() {
            if !self.used[k] && *p == m {
                self.used[k] = true;
                return true;
            }
        }
        false
    }
    fn one_of(&mut self, list: &[&'static str]) -> Option<&'static str> {
        list.iter().copied().find(|&m| self.has(m))
    }
    fn ignore(&mut self, list: &[&str]) {
        for (k, p) in self.parts.iter().enumerate() {
            if list.contains(p) {
                self.used[k] = true;
            }
        }
    }
    /// All type modifiers, in order.
    fn types(&mut self) -> Vec<Ty> {
        let mut out = Vec::new();
        for (k, p) in self.parts.iter().enumerate() {
            if self.used[k] {
                continue;
            }
            if let Some(t) = Ty::parse(p) {
                self.used[k] = true;
                out.push(t);
            }
        }
        out
    }
    fn space(&mut self) -> Option<Space> {
        for (k, p) in self.parts.iter().enumerate() {
            if self.used[k] {
                continue;
            }
            let s = match *p {
                "global" => Space::Global,
                "shared" | "shared::cta" => Space::Shared,
                "local" => Space::Local,
                "param" | "param::entry" | "param::func" => Space::Param,
                "const" => Space::Const,
                _ => continue,
            };
            self.used[k] = true;
            return Some(s);
        }
        None
    }
    fn rnd(&mut self) -> Option<Rnd> {
        Some(match self.one_of(&["rn", "rz", "rm", "rp"])? {
            "rn" => Rnd::Rn,
            "rz" => Rnd::Rz,
            "rm" => Rnd::Rm,
            _ => Rnd::Rp,
        })
    }
    fn irnd(&mut self) -> Option<Rnd> {
        Some(match self.one_of(&["rni", "rzi", "rmi", "rpi"])? {
            "rni" => Rnd::Rn,
            "rzi" => Rnd::Rz,
            "rmi" => Rnd::Rm,
            _ => Rnd::Rp,
        })
    }
    fn vec(&mut self) -> u8 {
        if self.has("v2") {
            2
        } else if self.has("v4") {
            4
        } else {
            1
        }
    }
    fn all_used(&self) -> bool {
        self.used.iter().all(|&u| u)
    }
    /// The remaining matrix element types (`wmma`, `mma`), in order.
    fn fragment_types(&mut self) -> Vec<WTy> {
        let mut types = Vec::new();
        for (k, p) in self.parts.iter().enumerate() {
            if !self.used[k] {
                if let Some(t) = WTy::parse(p) {
                    self.used[k] = true;
                    types.push(t);
                }
            }
        }
        types
    }
}

fn bty(bits: u32) -> Ty {
    match bits {
        8 => Ty::B8,
        16 => Ty::B16,
        32 => Ty::B32,
        _ => Ty::B64,
    }
}

impl FuncParser<'_> {
    /// Decodes one instruction.
    pub(crate) fn decode(
        &mut self,
        opcode: &str,
        ops: &[Opnd<'_>],
        line: u32,
    ) -> Result<Op, Error> {
        let mut it = opcode.split('.');
        let base = it.next().unwrap_or("");
        let parts: Vec<&str> = it.collect();
        let mut m = Mods {
            used: vec![false; parts.len()],
            parts,
        };
        let unsup = || Error::Unsupported {
            what: format!("{opcode} (line {line})"),
        };
        let want = |n: usize| -> Result<(), Error> {
            if ops.len() == n {
                Ok(())
            } else {
                Err(Error::Parse {
                    line,
                    msg: format!("{opcode} takes {n} operands, found {}", ops.len()),
                })
            }
        };
        if matches!(
            base,
            "add" | "sub" | "mul" | "fma" | "neg" | "abs" | "min" | "max" | "tanh" | "ex2"
        ) && m
            .parts
            .iter()
            .any(|p| matches!(*p, "f16" | "f16x2" | "bf16" | "bf16x2"))
        {
            return self.half_op(base, &mut m, ops, line, &unsup);
        }
        let op = match base {
            "mov" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                want(2)?;
                match (&ops[0], &ops[1]) {
                    (Opnd::Vec(_), a) => {
                        let (ds4, n) = self.vec_dsts(&ops[0], line)?;
                        let part = ty.bits() / u32::from(n);
                        Op::Unpack {
                            ds: ds4,
                            n,
                            a: self.src(a, ty, line)?,
                            part,
                        }
                    }
                    (d, Opnd::Vec(ps)) => {
                        let part = ty.bits() / ps.len() as u32;
                        let (parts, n) = self.vec_srcs(&ops[1], bty(part), line)?;
                        Op::Pack {
                            d: self.dst(d, line)?,
                            parts,
                            n,
                            part,
                        }
                    }
                    (d, a) => Op::Mov {
                        d: self.dst(d, line)?,
                        a: self.src(a, ty, line)?,
                        bits: ty.bits(),
                    },
                }
            }
            "ld" | "ldu" | "st" => {
                let space = m.space().unwrap_or(Space::Generic);
                m.ignore(MEM_QUALS);
                let vec = m.vec();
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if !m.all_used() || matches!(ty, Ty::Pred) {
                    return Err(unsup());
                }
                want(2)?;
                if base == "st" {
                    if space == Space::Const {
                        return Err(unsup());
                    }
                    let (srcs, n) = self.vec_srcs(&ops[1], ty, line)?;
                    if n != vec {
                        return Err(Error::Parse {
                            line,
                            msg: format!("{opcode} needs {vec} sources"),
                        });
                    }
                    Op::St {
                        space,
                        ty,
                        srcs,
                        n,
                        addr: self.addr(&ops[0], line)?,
                    }
                } else {
                    let (ds, n) = self.vec_dsts(&ops[0], line)?;
                    if n != vec {
                        return Err(Error::Parse {
                            line,
                            msg: format!("{opcode} needs {vec} destinations"),
                        });
                    }
                    Op::Ld {
                        space,
                        ty,
                        ds,
                        n,
                        addr: self.addr(&ops[1], line)?,
                    }
                }
            }
            "cvta" => {
                let to = m.has("to");
                let space = m.space().ok_or_else(unsup)?;
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if !matches!(ty, Ty::U32 | Ty::U64) {
                    return Err(unsup());
                }
                want(2)?;
                Op::Cvta {
                    to,
                    space,
                    bits: ty.bits(),
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                }
            }
            "isspacep" => {
                let space = m.space().ok_or_else(unsup)?;
                want(2)?;
                Op::Isspacep {
                    space,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], Ty::U64, line)?,
                }
            }
            "add" | "sub" | "addc" | "subc" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                want(3)?;
                let (d, a, b) = (
                    self.dst(&ops[0], line)?,
                    self.src(&ops[1], ty, line)?,
                    self.src(&ops[2], ty, line)?,
                );
                if ty.is_float() {
                    if base.len() != 3 {
                        return Err(unsup());
                    }
                    let fm = fmode(&mut m, ty).ok_or_else(unsup)?;
                    let op = if base == "add" { FBin::Add } else { FBin::Sub };
                    Op::FBin {
                        op,
                        ty,
                        m: fm,
                        d,
                        a,
                        b,
                    }
                } else if !matches!(ty.bits(), 16 | 32 | 64) {
                    return Err(unsup());
                } else if base.ends_with('c') || m.parts.contains(&"cc") {
                    let cout = m.has("cc");
                    if !matches!(ty.bits(), 32 | 64) {
                        return Err(unsup());
                    }
                    Op::Carry {
                        sub: base.starts_with("sub"),
                        cin: base.ends_with('c'),
                        cout,
                        ty,
                        d,
                        a,
                        b,
                        mul: None,
                    }
                } else {
                    let sat = m.has("sat");
                    if sat && ty != Ty::S32 {
                        return Err(unsup());
                    }
                    let op = match (base, sat) {
                        ("add", false) => IBin::Add,
                        ("add", true) => IBin::AddSat,
                        (_, false) => IBin::Sub,
                        (_, true) => IBin::SubSat,
                    };
                    Op::IBin { op, ty, d, a, b }
                }
            }
            "mul" | "mul24" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                want(3)?;
                if ty.is_float() {
                    if base != "mul" {
                        return Err(unsup());
                    }
                    let fm = fmode(&mut m, ty).ok_or_else(unsup)?;
                    Op::FBin {
                        op: FBin::Mul,
                        ty,
                        m: fm,
                        d: self.dst(&ops[0], line)?,
                        a: self.src(&ops[1], ty, line)?,
                        b: self.src(&ops[2], ty, line)?,
                    }
                } else {
                    let mode = m.one_of(&["lo", "hi", "wide"]).ok_or_else(unsup)?;
                    if !matches!(ty.bits(), 16 | 32 | 64) || base == "mul24" && ty.bits() != 32 {
                        return Err(unsup());
                    }
                    let d = self.dst(&ops[0], line)?;
                    let a = self.src(&ops[1], ty, line)?;
                    let b = self.src(&ops[2], ty, line)?;
                    match (base, mode) {
                        ("mul", "wide") if ty.bits() < 64 => Op::MulWide { ty, d, a, b },
                        ("mul", "lo") => Op::IBin {
                            op: IBin::MulLo,
                            ty,
                            d,
                            a,
                            b,
                        },
                        ("mul", "hi") => Op::IBin {
                            op: IBin::MulHi,
                            ty,
                            d,
                            a,
                            b,
                        },
                        ("mul24", "lo") => Op::IBin {
                            op: IBin::Mul24Lo,
                            ty,
                            d,
                            a,
                            b,
                        },
                        ("mul24", "hi") => Op::IBin {
                            op: IBin::Mul24Hi,
                            ty,
                            d,
                            a,
                            b,
                        },
                        _ => return Err(unsup()),
                    }
                }
            }
            "mad" | "mad24" | "madc" | "fma" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                want(4)?;
                let d = self.dst(&ops[0], line)?;
                let wide = m.parts.contains(&"wide");
                let a = self.src(&ops[1], ty, line)?;
                let b = self.src(&ops[2], ty, line)?;
                let cty = if wide { wide_ty(ty) } else { ty };
                let c = self.src(&ops[3], cty, line)?;
                if ty.is_float() {
                    if base == "mad24" || base == "madc" {
                        return Err(unsup());
                    }
                    // `mad.f32` without a rounding modifier is the fused
                    // multiply-add on every target nvcc supports.
                    let fm = fmode(&mut m, ty).ok_or_else(unsup)?;
                    Op::Fma {
                        ty,
                        m: fm,
                        d,
                        a,
                        b,
                        c,
                    }
                } else if base == "fma" || !matches!(ty.bits(), 16 | 32 | 64) {
                    return Err(unsup());
                } else {
                    let mode = m.one_of(&["lo", "hi", "wide"]).ok_or_else(unsup)?;
                    let cc = m.has("cc");
                    let sat = m.has("sat");
                    if sat && !(mode == "hi" && ty == Ty::S32) {
                        return Err(unsup());
                    }
                    if cc || base == "madc" {
                        if mode != "lo" && mode != "hi" || !matches!(ty.bits(), 32 | 64) {
                            return Err(unsup());
                        }
                        Op::Carry {
                            sub: false,
                            cin: base == "madc",
                            cout: cc,
                            ty,
                            d,
                            a,
                            b: c,
                            mul: Some((b, mode == "hi")),
                        }
                    } else {
                        let mul = match (base, mode) {
                            ("mad", "hi") => IBin::MulHi,
                            ("mad24", "lo") => IBin::Mul24Lo,
                            ("mad24", "hi") => IBin::Mul24Hi,
                            ("mad24", _) => return Err(unsup()),
                            _ => IBin::MulLo,
                        };
                        if mode == "wide" && ty.bits() == 64 {
                            return Err(unsup());
                        }
                        Op::Mad {
                            mul,
                            wide: mode == "wide",
                            sat,
                            ty,
                            d,
                            a,
                            b,
                            c,
                        }
                    }
                }
            }
            "min" | "max" if m.parts.iter().any(|p| matches!(*p, "u16x2" | "s16x2")) => {
                // Packed halfword min/max (sm_90): vmin2/vmax2 without c.
                let signed = m.has("s16x2");
                if !signed && !m.has("u16x2") {
                    return Err(unsup());
                }
                want(3)?;
                Op::Video {
                    v: Video {
                        op: if base == "min" {
                            VideoOp::Min
                        } else {
                            VideoOp::Max
                        },
                        lanes: 2,
                        d_signed: signed,
                        a_signed: signed,
                        b_signed: signed,
                        sat: false,
                        add: false,
                    },
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], Ty::U32, line)?,
                    b: self.src(&ops[2], Ty::U32, line)?,
                    c: Src::Imm(0),
                }
            }
            "div" | "rem" | "min" | "max" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                want(3)?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], ty, line)?;
                let b = self.src(&ops[2], ty, line)?;
                if ty.is_float() {
                    let op = match base {
                        "div" => {
                            if m.has("approx") || m.has("full") {
                                // Approximate division: computed exactly.
                                FBin::Div
                            } else {
                                // IEEE division needs its rounding mode.
                                if !m
                                    .parts
                                    .iter()
                                    .any(|p| matches!(*p, "rn" | "rz" | "rm" | "rp"))
                                {
                                    return Err(unsup());
                                }
                                FBin::Div
                            }
                        }
                        "rem" => return Err(unsup()),
                        "min" if m.has("NaN") => FBin::MinNaN,
                        "max" if m.has("NaN") => FBin::MaxNaN,
                        "min" => FBin::Min,
                        _ => FBin::Max,
                    };
                    let fm = fmode(&mut m, ty).ok_or_else(unsup)?;
                    Op::FBin {
                        op,
                        ty,
                        m: fm,
                        d,
                        a,
                        b,
                    }
                } else {
                    if !matches!(ty.bits(), 16 | 32 | 64) {
                        return Err(unsup());
                    }
                    let op = match base {
                        "div" => IBin::Div,
                        "rem" => IBin::Rem,
                        "min" => IBin::Min,
                        _ => IBin::Max,
                    };
                    Op::IBin { op, ty, d, a, b }
                }
            }
            "bmsk" => {
                let op = match m.one_of(&["clamp", "wrap"]) {
                    Some("clamp") => IBin::BmskClamp,
                    Some(_) => IBin::BmskWrap,
                    None => return Err(unsup()),
                };
                if !m.has("b32") || !m.all_used() {
                    return Err(unsup());
                }
                want(3)?;
                Op::IBin {
                    op,
                    ty: Ty::B32,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], Ty::U32, line)?,
                    b: self.src(&ops[2], Ty::U32, line)?,
                }
            }
            "and" | "or" | "xor" | "shl" | "shr" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                want(3)?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], ty, line)?;
                if ty == Ty::Pred {
                    let op = match base {
                        "and" => BoolOp::And,
                        "or" => BoolOp::Or,
                        "xor" => BoolOp::Xor,
                        _ => return Err(unsup()),
                    };
                    Op::PredBin {
                        op,
                        d,
                        a,
                        b: self.src(&ops[2], ty, line)?,
                    }
                } else {
                    if ty.is_float() || !matches!(ty.bits(), 16 | 32 | 64) {
                        return Err(unsup());
                    }
                    let shift = base.starts_with("sh");
                    let b = self.src(&ops[2], if shift { Ty::U32 } else { ty }, line)?;
                    let op = match base {
                        "and" => IBin::And,
                        "or" => IBin::Or,
                        "xor" => IBin::Xor,
                        "shl" => IBin::Shl,
                        _ => IBin::Shr,
                    };
                    Op::IBin { op, ty, d, a, b }
                }
            }
            "not" | "cnot" | "popc" | "clz" | "brev" | "bfind" | "abs" | "neg" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                want(2)?;
                let d = self.dst(&ops[0], line)?;
                let a = self.src(&ops[1], ty, line)?;
                if ty == Ty::Pred {
                    if base != "not" {
                        return Err(unsup());
                    }
                    Op::PredBin {
                        op: BoolOp::Xor,
                        d,
                        a,
                        b: Src::Imm(1),
                    }
                } else if ty.is_float() {
                    let op = match base {
                        "abs" => FUn::Abs,
                        "neg" => FUn::Neg,
                        _ => return Err(unsup()),
                    };
                    let fm = fmode(&mut m, ty).ok_or_else(unsup)?;
                    Op::FUn {
                        op,
                        ty,
                        m: fm,
                        d,
                        a,
                    }
                } else {
                    if !matches!(ty.bits(), 16 | 32 | 64) {
                        return Err(unsup());
                    }
                    let op = match base {
                        "not" => IUn::Not,
                        "cnot" => IUn::Cnot,
                        "popc" => IUn::Popc,
                        "clz" => IUn::Clz,
                        "brev" => IUn::Brev,
                        "bfind" if m.has("shiftamt") => IUn::BfindShiftAmt,
                        "bfind" => IUn::Bfind,
                        "abs" => IUn::Abs,
                        _ => IUn::Neg,
                    };
                    if matches!(
                        op,
                        IUn::Popc | IUn::Clz | IUn::Brev | IUn::Bfind | IUn::BfindShiftAmt
                    ) && ty.bits() < 32
                    {
                        return Err(unsup());
                    }
                    Op::IUn { op, ty, d, a }
                }
            }
            "sad" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if !ty.is_int() || ty.bits() < 16 {
                    return Err(unsup());
                }
                want(4)?;
                Op::Sad {
                    ty,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], ty, line)?,
                    c: self.src(&ops[3], ty, line)?,
                }
            }
            "bfe" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if !matches!(ty, Ty::U32 | Ty::U64 | Ty::S32 | Ty::S64) {
                    return Err(unsup());
                }
                want(4)?;
                Op::Bfe {
                    ty,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], Ty::U32, line)?,
                    c: self.src(&ops[3], Ty::U32, line)?,
                }
            }
            "bfi" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if !matches!(ty, Ty::B32 | Ty::B64) {
                    return Err(unsup());
                }
                want(5)?;
                Op::Bfi {
                    ty,
                    d: self.dst(&ops[0], line)?,
                    f: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], ty, line)?,
                    c: self.src(&ops[3], Ty::U32, line)?,
                    len: self.src(&ops[4], Ty::U32, line)?,
                }
            }
            "prmt" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if ty != Ty::B32 {
                    return Err(unsup());
                }
                let mode =
                    m.one_of(&["f4e", "b4e", "rc8", "ecl", "ecr", "rc16"])
                        .map(|s| match s {
                            "f4e" => 0u8,
                            "b4e" => 1,
                            "rc8" => 2,
                            "ecl" => 3,
                            "ecr" => 4,
                            _ => 5,
                        });
                want(4)?;
                Op::Prmt {
                    mode,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], ty, line)?,
                    c: self.src(&ops[3], ty, line)?,
                }
            }
            "vadd4" | "vsub4" | "vabsdiff4" | "vmin4" | "vmax4" | "vadd2" | "vsub2"
            | "vabsdiff2" | "vmin2" | "vmax2" => {
                let (name, lanes) = base.split_at(base.len() - 1);
                let op = match name {
                    "vadd" => VideoOp::Add,
                    "vsub" => VideoOp::Sub,
                    "vabsdiff" => VideoOp::Absdiff,
                    "vmin" => VideoOp::Min,
                    _ => VideoOp::Max,
                };
                // d.a.b types, each u32 or s32 (lanes signed or not).
                let signed = |t: Ty| match t {
                    Ty::U32 => Some(false),
                    Ty::S32 => Some(true),
                    _ => None,
                };
                let [dt, at, bt] = m.types()[..] else {
                    return Err(unsup());
                };
                let (sat, add) = (m.has("sat"), m.has("add"));
                if sat && add {
                    return Err(unsup());
                }
                want(4)?;
                // A mask on d or a lane selector on a or b (`%r1.b10`) is
                // not implemented: refused, not read as a register name.
                if ops
                    .iter()
                    .any(|o| matches!(o, Opnd::Name(n) if n.contains('.')))
                {
                    return Err(unsup());
                }
                Op::Video {
                    v: Video {
                        op,
                        lanes: if lanes == "4" { 4 } else { 2 },
                        d_signed: signed(dt).ok_or_else(unsup)?,
                        a_signed: signed(at).ok_or_else(unsup)?,
                        b_signed: signed(bt).ok_or_else(unsup)?,
                        sat,
                        add,
                    },
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], Ty::U32, line)?,
                    b: self.src(&ops[2], Ty::U32, line)?,
                    c: self.src(&ops[3], Ty::U32, line)?,
                }
            }
            "lop3" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if ty != Ty::B32 {
                    return Err(unsup());
                }
                want(5)?;
                Op::Lop3 {
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], ty, line)?,
                    c: self.src(&ops[3], ty, line)?,
                    lut: self.src(&ops[4], ty, line)?,
                }
            }
            "shf" => {
                let left = match m.one_of(&["l", "r"]) {
                    Some("l") => true,
                    Some(_) => false,
                    None => return Err(unsup()),
                };
                let wrap = match m.one_of(&["wrap", "clamp"]) {
                    Some("wrap") => true,
                    Some(_) => false,
                    None => return Err(unsup()),
                };
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if ty != Ty::B32 {
                    return Err(unsup());
                }
                want(4)?;
                Op::Shf {
                    left,
                    wrap,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], ty, line)?,
                    c: self.src(&ops[3], Ty::U32, line)?,
                }
            }
            "setp" => {
                let cmp = cmp_op(&mut m).ok_or_else(unsup)?;
                let comb = m.one_of(&["and", "or", "xor"]).map(|s| match s {
                    "and" => BoolOp::And,
                    "or" => BoolOp::Or,
                    _ => BoolOp::Xor,
                });
                let ftz = m.has("ftz");
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if ty == Ty::Pred || matches!(ty, Ty::F16x2 | Ty::BF16x2) || ty == Ty::BF16 && ftz {
                    return Err(unsup());
                }
                let unordered = matches!(
                    cmp,
                    Cmp::Equ
                        | Cmp::Neu
                        | Cmp::Ltu
                        | Cmp::Leu
                        | Cmp::Gtu
                        | Cmp::Geu
                        | Cmp::Num
                        | Cmp::Nan
                );
                // Unordered comparisons exist for floats only; `lo`, `ls`,
                // `hi`, `hs` for integers only.
                if !ty.is_float() && unordered {
                    return Err(unsup());
                }
                if ty.is_float() && matches!(cmp, Cmp::Lo | Cmp::Ls | Cmp::Hi | Cmp::Hs) {
                    return Err(unsup());
                }
                let n = if comb.is_some() { 4 } else { 3 };
                want(n)?;
                let (d, dn) = match &ops[0] {
                    Opnd::Pair(p, q) => (self.dst(p, line)?, Some(self.dst(q, line)?)),
                    o => (self.dst(o, line)?, None),
                };
                let comb = match comb {
                    Some(c) => Some((c, self.src(&ops[3], Ty::Pred, line)?)),
                    None => None,
                };
                Op::Setp {
                    cmp,
                    ty,
                    ftz,
                    d,
                    dn,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], ty, line)?,
                    comb,
                }
            }
            "set" => {
                let cmp = cmp_op(&mut m).ok_or_else(unsup)?;
                let comb = m.one_of(&["and", "or", "xor"]).map(|s| match s {
                    "and" => BoolOp::And,
                    "or" => BoolOp::Or,
                    _ => BoolOp::Xor,
                });
                let ftz = m.has("ftz");
                let tys = m.types();
                let [dty, ty] = tys[..] else {
                    return Err(unsup());
                };
                let float_cmp = matches!(ty, Ty::F16 | Ty::BF16 | Ty::F32 | Ty::F64);
                let int_only = matches!(cmp, Cmp::Lo | Cmp::Ls | Cmp::Hi | Cmp::Hs);
                let float_only = matches!(
                    cmp,
                    Cmp::Equ
                        | Cmp::Neu
                        | Cmp::Ltu
                        | Cmp::Leu
                        | Cmp::Gtu
                        | Cmp::Geu
                        | Cmp::Num
                        | Cmp::Nan
                );
                if !matches!(dty, Ty::U32 | Ty::S32 | Ty::F32 | Ty::F16 | Ty::BF16)
                    || !(float_cmp || ty.is_int())
                    || ftz && !matches!(ty, Ty::F16 | Ty::F32)
                    || float_cmp && int_only
                    || !float_cmp && float_only
                {
                    return Err(unsup());
                }
                want(if comb.is_some() { 4 } else { 3 })?;
                let comb = match comb {
                    Some(c) => Some((c, self.src(&ops[3], Ty::Pred, line)?)),
                    None => None,
                };
                Op::Set {
                    cmp,
                    ty,
                    ftz,
                    dty,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], ty, line)?,
                    comb,
                }
            }
            "cvt" if m.parts.iter().any(|p| matches!(*p, "e4m3x2" | "e5m2x2")) => {
                self.cvt_f8(&mut m, ops, line, &unsup)?
            }
            "cvt" if m.has("relu") || m.parts.iter().any(|p| matches!(*p, "f16x2" | "bf16x2")) => {
                // `.relu` was consumed by the guard when present.
                let relu = m.parts.contains(&"relu");
                self.cvt_half(relu, &mut m, ops, line, &unsup)?
            }
            "selp" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if ty == Ty::Pred || ty.bits() < 16 {
                    return Err(unsup());
                }
                want(4)?;
                Op::Selp {
                    bits: ty.bits(),
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], ty, line)?,
                    c: self.src(&ops[3], Ty::Pred, line)?,
                }
            }
            "slct" => {
                let ftz = m.has("ftz");
                let tys = m.types();
                let [dty, cty] = tys[..] else {
                    return Err(unsup());
                };
                if !matches!(cty, Ty::S32 | Ty::F32) || dty == Ty::Pred || dty.bits() < 16 {
                    return Err(unsup());
                }
                want(4)?;
                Op::Slct {
                    bits: dty.bits(),
                    cty,
                    ftz,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], dty, line)?,
                    b: self.src(&ops[2], dty, line)?,
                    c: self.src(&ops[3], cty, line)?,
                }
            }
            "testp" => {
                let op = match m.one_of(&[
                    "finite",
                    "infinite",
                    "number",
                    "notanumber",
                    "normal",
                    "subnormal",
                ]) {
                    Some("finite") => Testp::Finite,
                    Some("infinite") => Testp::Infinite,
                    Some("number") => Testp::Number,
                    Some("notanumber") => Testp::NotANumber,
                    Some("normal") => Testp::Normal,
                    Some(_) => Testp::Subnormal,
                    None => return Err(unsup()),
                };
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if !matches!(ty, Ty::F32 | Ty::F64) {
                    return Err(unsup());
                }
                want(2)?;
                Op::Testp {
                    op,
                    ty,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                }
            }
            "copysign" => {
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if !matches!(ty, Ty::F32 | Ty::F64) {
                    return Err(unsup());
                }
                want(3)?;
                Op::FBin {
                    op: FBin::Copysign,
                    ty,
                    m: FMode {
                        rnd: Rnd::Rn,
                        ftz: false,
                        sat: false,
                    },
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], ty, line)?,
                }
            }
            "rcp" | "sqrt" | "rsqrt" | "sin" | "cos" | "lg2" | "ex2" | "tanh" => {
                let approx = m.has("approx");
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if !matches!(ty, Ty::F32 | Ty::F64) {
                    return Err(unsup());
                }
                let exact = m
                    .parts
                    .iter()
                    .any(|p| matches!(*p, "rn" | "rz" | "rm" | "rp"));
                let op = match base {
                    "rcp" if approx => FUn::RcpApprox,
                    "rcp" if exact => FUn::Rcp,
                    "sqrt" if approx => FUn::SqrtApprox,
                    "sqrt" if exact => FUn::Sqrt,
                    "rsqrt" if approx => FUn::Rsqrt,
                    "sin" if approx && ty == Ty::F32 => FUn::Sin,
                    "cos" if approx && ty == Ty::F32 => FUn::Cos,
                    "lg2" if approx && ty == Ty::F32 => FUn::Lg2,
                    "ex2" if approx && ty == Ty::F32 => FUn::Ex2,
                    "tanh" if approx && ty == Ty::F32 => FUn::Tanh,
                    _ => return Err(unsup()),
                };
                // `rcp.approx.ftz.f64` and `rsqrt.approx.ftz.f64` are the only
                // f64 forms with `.ftz`: the fast approximations of the
                // 32 most significant bits.
                let fm = if ty == Ty::F64 && approx && matches!(base, "rcp" | "rsqrt") {
                    let ftz = m.has("ftz");
                    FMode {
                        rnd: Rnd::Rn,
                        ftz,
                        sat: false,
                    }
                } else {
                    fmode(&mut m, ty).ok_or_else(unsup)?
                };
                want(2)?;
                Op::FUn {
                    op,
                    ty,
                    m: fm,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                }
            }
            "cvt" if m.has("tf32") => {
                // `cvt.rna.tf32.f32 d, a` (not `.satfinite`).
                if !m.has("rna") || m.types() != [Ty::F32] || !m.all_used() {
                    return Err(unsup());
                }
                want(2)?;
                Op::FUn {
                    op: FUn::Tf32,
                    ty: Ty::F32,
                    m: FMode {
                        rnd: Rnd::Rn,
                        ftz: false,
                        sat: false,
                    },
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], Ty::F32, line)?,
                }
            }
            "cvt" => {
                let irnd = m.irnd();
                let frnd = m.rnd();
                let ftz = m.has("ftz");
                let sat = m.has("sat");
                let tys = m.types();
                let [dty, sty] = tys[..] else {
                    return Err(unsup());
                };
                if dty == Ty::Pred
                    || sty == Ty::Pred
                    || matches!(dty, Ty::F16x2 | Ty::BF16x2)
                    || matches!(sty, Ty::F16x2 | Ty::BF16x2)
                {
                    return Err(unsup());
                }
                let kind = match (dty.is_float(), sty.is_float()) {
                    (false, false) => {
                        if irnd.is_some() || frnd.is_some() {
                            return Err(unsup());
                        }
                        CvtKind::IntInt
                    }
                    (true, false) => CvtKind::IntFloat(frnd.ok_or_else(unsup)?),
                    (false, true) => CvtKind::FloatInt(irnd.ok_or_else(unsup)?),
                    (true, true) => {
                        if dty == sty {
                            match irnd {
                                Some(r) => CvtKind::FloatRound(r),
                                // No rounding to an integer: a copy with
                                // `.ftz` and `.sat` applied.
                                None if frnd.is_none() => CvtKind::FloatFloat(Rnd::Rn),
                                None => return Err(unsup()),
                            }
                        } else if dty.bits() > sty.bits() {
                            // Widening is exact.
                            CvtKind::FloatFloat(Rnd::Rn)
                        } else {
                            CvtKind::FloatFloat(frnd.ok_or_else(unsup)?)
                        }
                    }
                };
                if irnd.is_some() && !matches!(kind, CvtKind::FloatInt(_) | CvtKind::FloatRound(_))
                {
                    return Err(unsup());
                }
                // Conversions the interpreter cannot round exactly.
                if crate::exec::cvt(kind, dty, sty, sat, ftz, 0).is_none() {
                    return Err(unsup());
                }
                want(2)?;
                Op::Cvt {
                    kind,
                    dty,
                    sty,
                    sat,
                    ftz,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], sty, line)?,
                }
            }
            "bra" => {
                m.has("uni");
                want(1)?;
                Op::Bra { target: u32::MAX }
            }
            "ret" => {
                m.has("uni");
                want(0)?;
                Op::Ret
            }
            "exit" => {
                want(0)?;
                Op::Exit
            }
            "bar" | "barrier" => {
                m.has("cta");
                if m.has("cluster") {
                    // Thread-block clusters are not modelled (SimGpu
                    // refuses cluster launches).
                    return Err(unsup());
                }
                if m.has("warp") {
                    if !m.has("sync") {
                        return Err(unsup());
                    }
                    want(1)?;
                    Op::WarpSync {
                        mask: self.src(&ops[0], Ty::B32, line)?,
                    }
                } else if m.has("red") {
                    // `bar.red.popc.u32 d, a{, b}, {!}c`, `bar.red.{and,or}.pred`.
                    let op = match m.one_of(&["popc", "and", "or"]) {
                        Some("popc") => BarRed::Popc,
                        Some("and") => BarRed::And,
                        Some(_) => BarRed::Or,
                        None => return Err(unsup()),
                    };
                    let ty = one_ty(&mut m).ok_or_else(unsup)?;
                    if (op == BarRed::Popc) != (ty == Ty::U32)
                        || op != BarRed::Popc && ty != Ty::Pred
                    {
                        return Err(unsup());
                    }
                    m.has("aligned");
                    if !matches!(ops.len(), 3 | 4) {
                        return Err(Error::Parse {
                            line,
                            msg: format!("{opcode} takes 3 or 4 operands"),
                        });
                    }
                    let count = match ops.len() {
                        4 => Some(self.src(&ops[2], Ty::U32, line)?),
                        _ => None,
                    };
                    let d = self.dst(&ops[0], line)?;
                    Op::Bar {
                        wait: true,
                        id: self.src(&ops[1], Ty::U32, line)?,
                        count,
                        red: Some((op, d, self.src(&ops[ops.len() - 1], Ty::Pred, line)?)),
                    }
                } else {
                    let wait = match m.one_of(&["sync", "arrive"]) {
                        Some("sync") => true,
                        Some(_) => false,
                        None if base == "bar" && m.parts.is_empty() => true,
                        None => return Err(unsup()),
                    };
                    m.has("aligned");
                    if ops.is_empty() || ops.len() > 2 {
                        return Err(Error::Parse {
                            line,
                            msg: format!("{opcode} takes 1 or 2 operands"),
                        });
                    }
                    let count = match ops.get(1) {
                        Some(o) => Some(self.src(o, Ty::U32, line)?),
                        None => None,
                    };
                    if !wait && count.is_none() {
                        return Err(Error::Parse {
                            line,
                            msg: format!("{opcode} needs a thread count"),
                        });
                    }
                    Op::Bar {
                        wait,
                        id: self.src(&ops[0], Ty::U32, line)?,
                        count,
                        red: None,
                    }
                }
            }
            "membar" | "fence" => {
                // Every access is done when it executes, in one order: a
                // fence (of any scope, or between the generic and async
                // proxies, or after an mbarrier's init) has nothing to
                // order. One wider than the block marks the kernel as one
                // whose blocks talk to each other (`Op::Fence`).
                let wide = ["gl", "sys", "gpu", "cluster"]
                    .iter()
                    .any(|q| m.parts.contains(q));
                m.ignore(&[
                    "cta", "gl", "sys", "gpu", "cluster", "sc", "acq_rel", "acquire", "release",
                ]);
                m.ignore(&[
                    "mbarrier_init",
                    "proxy",
                    "async",
                    "alias",
                    "shared::cta",
                    "shared::cluster",
                    "global",
                ]);
                if wide {
                    Op::Fence
                } else {
                    Op::Nop
                }
            }
            "nanosleep" | "prefetch" | "prefetchu" | "pmevent" => {
                m.ignore(&[
                    "u32",
                    "global",
                    "local",
                    "L1",
                    "L2",
                    "evict_last",
                    "evict_normal",
                ]);
                m.ignore(&["L2::evict_last", "L2::evict_normal"]);
                Op::Nop
            }
            // Programmatic dependent launch (CUB and Thrust for sm_90):
            // `wait` waits for the grids this one depends on, which on
            // SimGpu have always finished (a stream's kernels run one after
            // another, each to completion); `launch_dependents` is a hint.
            "griddepcontrol" => {
                if !(m.has("wait") ^ m.has("launch_dependents")) {
                    return Err(unsup());
                }
                m.ignore(&["wait", "launch_dependents"]);
                Op::Nop
            }
            "trap" | "brkpt" => Op::Trap,
            "cp" => {
                if !m.has("async") {
                    return Err(unsup());
                }
                if m.has("bulk") {
                    return self.bulk_copy(&mut m, ops, opcode, line);
                }
                if m.has("mbarrier") {
                    // `cp.async.mbarrier.arrive{.noinc}{.shared}.b64 [a]`:
                    // the copies are done already, so the arrival is now.
                    if !m.has("arrive") || !m.has("b64") {
                        return Err(unsup());
                    }
                    let noinc = m.has("noinc");
                    let space = m.space().unwrap_or(Space::Generic);
                    if !matches!(space, Space::Shared | Space::Generic) || !m.all_used() {
                        return Err(unsup());
                    }
                    want(1)?;
                    Op::Mbarrier(Box::new(Mbar {
                        kind: MbarKind::AsyncArrive { noinc },
                        space,
                        d: None,
                        addr: self.addr(&ops[0], line)?,
                        a: None,
                    }))
                } else if m.has("commit_group") || m.has("wait_all") {
                    want(0)?;
                    Op::Nop
                } else if m.has("wait_group") {
                    want(1)?;
                    Op::Nop
                } else {
                    m.ignore(&["ca", "cg", "L2::64B", "L2::128B", "L2::256B"]);
                    if !m.has("shared") && !m.has("shared::cta") || !m.has("global") {
                        return Err(unsup());
                    }
                    if !matches!(ops.len(), 3 | 4) {
                        return Err(Error::Parse {
                            line,
                            msg: format!("{opcode} takes 3 or 4 operands"),
                        });
                    }
                    let size = match &ops[2] {
                        Opnd::Int(false, v @ (4 | 8 | 16)) => *v as u32,
                        _ => return Err(unsup()),
                    };
                    Op::CpAsync {
                        dst: self.addr(&ops[0], line)?,
                        src: self.addr(&ops[1], line)?,
                        size,
                        src_size: match ops.get(3) {
                            Some(o) => Some(self.src(o, Ty::U32, line)?),
                            None => None,
                        },
                    }
                }
            }
            "wmma" => Op::Wmma(Box::new(self.wmma(&mut m, ops, opcode, line)?)),
            "mma" => Op::Wmma(Box::new(self.mma_sync(&mut m, ops, opcode, line)?)),
            "ldmatrix" | "stmatrix" => Op::Wmma(Box::new(self.ldst_matrix(
                &mut m,
                ops,
                base == "ldmatrix",
                opcode,
                line,
            )?)),
            "mbarrier" => {
                let space = m.space().unwrap_or(Space::Generic);
                m.ignore(&["release", "acquire", "relaxed", "cta"]);
                let kind = match m.one_of(&[
                    "init",
                    "arrive",
                    "arrive_drop",
                    "test_wait",
                    "try_wait",
                    "pending_count",
                    "inval",
                    "expect_tx",
                    "complete_tx",
                ]) {
                    Some("init") => MbarKind::Init,
                    Some("arrive") => MbarKind::Arrive {
                        drop: false,
                        expect_tx: m.has("expect_tx"),
                    },
                    Some("arrive_drop") => MbarKind::Arrive {
                        drop: true,
                        expect_tx: m.has("expect_tx"),
                    },
                    Some("expect_tx") => MbarKind::ExpectTx,
                    Some("complete_tx") => MbarKind::CompleteTx,
                    Some("test_wait" | "try_wait") => MbarKind::Wait {
                        parity: m.has("parity"),
                    },
                    Some("pending_count") => MbarKind::PendingCount,
                    Some("inval") => MbarKind::Inval,
                    _ => return Err(unsup()),
                };
                if !m.has("b64")
                    || !matches!(space, Space::Shared | Space::Generic)
                    || !m.all_used()
                {
                    return Err(unsup());
                }
                let nops = ops.len();
                let bad = || Error::Parse {
                    line,
                    msg: format!("{opcode} takes other operands"),
                };
                let (d, addr, a) = match kind {
                    MbarKind::Init if nops == 2 => (
                        None,
                        Some(self.addr(&ops[0], line)?),
                        Some(self.src(&ops[1], Ty::U32, line)?),
                    ),
                    MbarKind::Arrive { .. } if matches!(nops, 2 | 3) => (
                        Some(self.dst(&ops[0], line)?),
                        Some(self.addr(&ops[1], line)?),
                        match ops.get(2) {
                            Some(o) => Some(self.src(o, Ty::U32, line)?),
                            None => None,
                        },
                    ),
                    // try_wait's optional fourth operand is a time hint.
                    MbarKind::Wait { parity } if matches!(nops, 3 | 4) => (
                        Some(self.dst(&ops[0], line)?),
                        Some(self.addr(&ops[1], line)?),
                        Some(self.src(&ops[2], if parity { Ty::U32 } else { Ty::B64 }, line)?),
                    ),
                    MbarKind::PendingCount if nops == 2 => (
                        Some(self.dst(&ops[0], line)?),
                        None,
                        Some(self.src(&ops[1], Ty::B64, line)?),
                    ),
                    MbarKind::Inval if nops == 1 => (None, Some(self.addr(&ops[0], line)?), None),
                    MbarKind::ExpectTx | MbarKind::CompleteTx if nops == 2 => (
                        None,
                        Some(self.addr(&ops[0], line)?),
                        Some(self.src(&ops[1], Ty::U32, line)?),
                    ),
                    _ => return Err(bad()),
                };
                Op::Mbarrier(Box::new(Mbar {
                    kind,
                    space,
                    d,
                    addr: addr.unwrap_or(Addr::absolute(0)),
                    a,
                }))
            }
            "call" => {
                m.has("uni");
                if !m.all_used() {
                    return Err(unsup());
                }
                self.call(ops, line)?
            }
            "shfl" => {
                if !m.has("sync") {
                    return Err(unsup());
                }
                let mode = match m.one_of(&["up", "down", "bfly", "idx"]) {
                    Some("up") => ShflMode::Up,
                    Some("down") => ShflMode::Down,
                    Some("bfly") => ShflMode::Bfly,
                    Some(_) => ShflMode::Idx,
                    None => return Err(unsup()),
                };
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if ty != Ty::B32 {
                    return Err(unsup());
                }
                want(5)?;
                let (d, dp) = match &ops[0] {
                    Opnd::Pair(p, q) => (self.dst(p, line)?, Some(self.dst(q, line)?)),
                    o => (self.dst(o, line)?, None),
                };
                Op::Shfl {
                    mode,
                    d,
                    dp,
                    a: self.src(&ops[1], ty, line)?,
                    b: self.src(&ops[2], Ty::U32, line)?,
                    c: self.src(&ops[3], Ty::U32, line)?,
                    mask: self.src(&ops[4], Ty::B32, line)?,
                }
            }
            "vote" => {
                if !m.has("sync") {
                    return Err(unsup());
                }
                let mode = match m.one_of(&["all", "any", "uni", "ballot"]) {
                    Some("all") => VoteMode::All,
                    Some("any") => VoteMode::Any,
                    Some("uni") => VoteMode::Uni,
                    Some(_) => VoteMode::Ballot,
                    None => return Err(unsup()),
                };
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                if (mode == VoteMode::Ballot) != (ty == Ty::B32)
                    || mode != VoteMode::Ballot && ty != Ty::Pred
                {
                    return Err(unsup());
                }
                want(3)?;
                Op::Vote {
                    mode,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], Ty::Pred, line)?,
                    mask: self.src(&ops[2], Ty::B32, line)?,
                }
            }
            "match" => {
                // `match.any.sync.b32 d, a, mask`; `match.all.sync.b32 d{|p}, a, mask`.
                if !m.has("sync") {
                    return Err(unsup());
                }
                let all = match m.one_of(&["any", "all"]) {
                    Some("all") => true,
                    Some(_) => false,
                    None => return Err(unsup()),
                };
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                let bits = match ty {
                    Ty::B32 => 32,
                    Ty::B64 => 64,
                    _ => return Err(unsup()),
                };
                want(3)?;
                let (d, dp) = match &ops[0] {
                    Opnd::Pair(d, p) if all => (self.dst(d, line)?, Some(self.dst(p, line)?)),
                    o => (self.dst(o, line)?, None),
                };
                Op::Match {
                    all,
                    bits,
                    d,
                    dp,
                    a: self.src(&ops[1], ty, line)?,
                    mask: self.src(&ops[2], Ty::B32, line)?,
                }
            }
            "activemask" => {
                if one_ty(&mut m) != Some(Ty::B32) {
                    return Err(unsup());
                }
                want(1)?;
                Op::Activemask {
                    d: self.dst(&ops[0], line)?,
                }
            }
            "redux" => {
                if !m.has("sync") {
                    return Err(unsup());
                }
                let op = match m.one_of(&["add", "min", "max", "and", "or", "xor"]) {
                    Some("add") => AtomOp::Add,
                    Some("min") => AtomOp::Min,
                    Some("max") => AtomOp::Max,
                    Some("and") => AtomOp::And,
                    Some("or") => AtomOp::Or,
                    Some(_) => AtomOp::Xor,
                    None => return Err(unsup()),
                };
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                let ok = match op {
                    AtomOp::And | AtomOp::Or | AtomOp::Xor => ty == Ty::B32,
                    _ => matches!(ty, Ty::U32 | Ty::S32),
                };
                if !ok {
                    return Err(unsup());
                }
                want(3)?;
                Op::Redux {
                    op,
                    ty,
                    d: self.dst(&ops[0], line)?,
                    a: self.src(&ops[1], ty, line)?,
                    mask: self.src(&ops[2], Ty::B32, line)?,
                }
            }
            "atom" | "red" => {
                let space = m.space().unwrap_or(Space::Generic);
                if matches!(space, Space::Local | Space::Param | Space::Const) {
                    return Err(unsup());
                }
                m.ignore(&[
                    "relaxed", "acquire", "release", "acq_rel", "cta", "gpu", "sys", "cluster",
                ]);
                let op = match m.one_of(&[
                    "add", "min", "max", "inc", "dec", "cas", "exch", "and", "or", "xor",
                ]) {
                    Some("add") => AtomOp::Add,
                    Some("min") => AtomOp::Min,
                    Some("max") => AtomOp::Max,
                    Some("inc") => AtomOp::Inc,
                    Some("dec") => AtomOp::Dec,
                    Some("cas") => AtomOp::Cas,
                    Some("exch") => AtomOp::Exch,
                    Some("and") => AtomOp::And,
                    Some("or") => AtomOp::Or,
                    Some(_) => AtomOp::Xor,
                    None => return Err(unsup()),
                };
                let ty = one_ty(&mut m).ok_or_else(unsup)?;
                let ok = match op {
                    AtomOp::Add => matches!(
                        ty,
                        Ty::U32 | Ty::U64 | Ty::S32 | Ty::S64 | Ty::F32 | Ty::F64
                    ),
                    AtomOp::Min | AtomOp::Max => {
                        matches!(ty, Ty::U32 | Ty::U64 | Ty::S32 | Ty::S64)
                    }
                    AtomOp::Inc | AtomOp::Dec => ty == Ty::U32,
                    AtomOp::Exch => matches!(
                        ty,
                        Ty::B32 | Ty::B64 | Ty::U32 | Ty::U64 | Ty::S32 | Ty::S64
                    ),
                    // 16-bit compare-and-swap: sm_70 and later.
                    AtomOp::Cas => matches!(
                        ty,
                        Ty::B16 | Ty::B32 | Ty::B64 | Ty::U32 | Ty::U64 | Ty::S32 | Ty::S64
                    ),
                    AtomOp::And | AtomOp::Or | AtomOp::Xor => matches!(ty, Ty::B32 | Ty::B64),
                };
                if !ok {
                    return Err(unsup());
                }
                let red = base == "red";
                let nsrc = if op == AtomOp::Cas { 2 } else { 1 };
                want(if red { 1 } else { 2 } + nsrc)?;
                let k = usize::from(!red);
                let d = if red {
                    None
                } else {
                    Some(self.dst(&ops[0], line)?)
                };
                let addr = self.addr(&ops[k], line)?;
                let b = self.src(&ops[k + 1], ty, line)?;
                let c = if op == AtomOp::Cas {
                    self.src(&ops[k + 2], ty, line)?
                } else {
                    Src::Imm(0)
                };
                Op::Atom {
                    space,
                    op,
                    ty,
                    d,
                    addr,
                    b,
                    c,
                }
            }
            "tex" | "tld4" => self.tex(base == "tld4", &mut m, ops, line, &unsup)?,
            "suld" | "sust" => self.surf(base == "sust", &mut m, ops, line, &unsup)?,
            "txq" | "suq" => self.query(base == "suq", &mut m, ops, line, &unsup)?,
            _ => return Err(unsup()),
        };
        if !m.all_used() {
            return Err(unsup());
        }
        Ok(op)
    }
}

/// Texture and surface instructions.
impl FuncParser<'_> {
    /// `tex{.base,.level,.grad}.geom.v4.dtype.ctype d{|p}, [a, c]{, lod |
    /// , dPdx, dPdy}` and `tld4.comp.geom.v4.dtype.f32 d{|p}, [a, c]`.
    fn tex(
        &mut self,
        tld4: bool,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        line: u32,
        unsup: &dyn Fn() -> Error,
    ) -> Result<Op, Error> {
        let gather = if tld4 {
            let c = m.one_of(&["r", "g", "b", "a"]).ok_or_else(unsup)?;
            Some(match c {
                "r" => 0,
                "g" => 1,
                "b" => 2,
                _ => 3,
            })
        } else {
            None
        };
        let mip = if tld4 {
            None
        } else {
            m.one_of(&["base", "level", "grad"])
        };
        let geom = geom(m).ok_or_else(unsup)?;
        if !m.has("v4") {
            return Err(unsup());
        }
        let (dty, cty) = match m.types()[..] {
            [d @ (Ty::F32 | Ty::S32 | Ty::U32), c @ (Ty::F32 | Ty::S32)] => (d, c),
            _ => return Err(unsup()),
        };
        let cube = matches!(geom, Geom::Cube | Geom::ACube);
        let int_coords = cty == Ty::S32;
        // Cubemaps and gathers take float coordinates; gathers, 2D ones.
        let bad_coords = int_coords && (cube || tld4);
        let bad_gather = tld4 && matches!(geom, Geom::D1 | Geom::D3 | Geom::A1);
        if bad_coords || bad_gather {
            return Err(unsup());
        }
        // Operands after the image: the level, or the two gradients.
        let extra = match mip {
            Some("level") => 1,
            Some("grad") => 2,
            _ => 0,
        };
        // More operands are offsets or depth compares.
        if ops.len() != 2 + extra {
            return Err(unsup());
        }
        for o in &ops[2..] {
            self.check_srcs(o, if extra == 1 { cty } else { Ty::F32 }, line)?;
        }
        let (dv, dp) = match &ops[0] {
            Opnd::Pair(v, p) => (&**v, Some(self.dst(p, line)?)),
            o => (o, None),
        };
        let (ds, n) = self.dst_list(dv, line)?;
        if n != 4 {
            return Err(unsup());
        }
        let (handle, coords) = self.image(&ops[1], geom, cty, line, unsup)?;
        Ok(Op::Tex(Box::new(TexOp {
            geom,
            gather,
            dty,
            int_coords,
            ds,
            dp,
            handle,
            coords,
        })))
    }

    /// `suld.b.geom{.cop}{.v2,.v4}.btype{.clamp} d, [a, c]` and
    /// `sust.b.geom{.cop}{.v2,.v4}.btype{.clamp} [a, c], v`.
    fn surf(
        &mut self,
        store: bool,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        line: u32,
        unsup: &dyn Fn() -> Error,
    ) -> Result<Op, Error> {
        if !m.has("b") {
            return Err(unsup());
        }
        let geom = geom(m).ok_or_else(unsup)?;
        if matches!(geom, Geom::Cube | Geom::ACube) {
            return Err(unsup());
        }
        m.ignore(&["ca", "cg", "cs", "cv", "wb", "wt"]);
        let n = m.vec();
        let ty = one_ty(m).ok_or_else(unsup)?;
        if !matches!(ty, Ty::B8 | Ty::B16 | Ty::B32 | Ty::B64) {
            return Err(unsup());
        }
        let clamp = match m.one_of(&["trap", "clamp", "zero"]) {
            Some("clamp") => SurfClamp::Clamp,
            Some("zero") => SurfClamp::Zero,
            _ => SurfClamp::Trap,
        };
        if ops.len() != 2 {
            return Err(Error::Parse {
                line,
                msg: "a surface instruction takes 2 operands".into(),
            });
        }
        let (image, value) = if store {
            (&ops[0], &ops[1])
        } else {
            (&ops[1], &ops[0])
        };
        let data = if store {
            let (vs, k) = self.src_list(value, ty, line)?;
            if k != n {
                return Err(unsup());
            }
            SurfData::Store(vs)
        } else {
            let (ds, k) = self.dst_list(value, line)?;
            if k != n {
                return Err(unsup());
            }
            SurfData::Load(ds)
        };
        let (handle, coords) = self.image(image, geom, Ty::S32, line, unsup)?;
        Ok(Op::Surf(Box::new(SurfOp {
            geom,
            bytes: ty.bytes() as u8,
            n,
            clamp,
            data,
            handle,
            coords,
        })))
    }

    /// `txq{.level}.query.b32 d, [a]{, lod}` and `suq.query.b32 d, [a]`.
    fn query(
        &mut self,
        surface: bool,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        line: u32,
        unsup: &dyn Fn() -> Error,
    ) -> Result<Op, Error> {
        let level = !surface && m.has("level");
        let name = m
            .one_of(&[
                "width",
                "height",
                "depth",
                "channel_data_type",
                "channel_order",
                "normalized_coords",
                "force_unnormalized_coords",
                "filter_mode",
                "addr_mode_0",
                "addr_mode_1",
                "addr_mode_2",
                "array_size",
                "num_mipmap_levels",
                "num_samples",
                "memory_layout",
            ])
            .ok_or_else(unsup)?;
        let query = match name {
            "width" => Query::Width,
            "height" => Query::Height,
            "depth" => Query::Depth,
            "channel_data_type" => Query::ChannelDataType,
            "channel_order" => Query::ChannelOrder,
            "normalized_coords" => Query::NormalizedCoords,
            "force_unnormalized_coords" => Query::ForceUnnormalizedCoords,
            "filter_mode" => Query::FilterMode,
            "addr_mode_0" => Query::AddrMode(0),
            "addr_mode_1" => Query::AddrMode(1),
            "addr_mode_2" => Query::AddrMode(2),
            "array_size" => Query::ArraySize,
            "num_mipmap_levels" => Query::NumMipmapLevels,
            "num_samples" => Query::NumSamples,
            _ => Query::MemoryLayout,
        };
        let valid = if surface {
            matches!(
                query,
                Query::Width
                    | Query::Height
                    | Query::Depth
                    | Query::ChannelDataType
                    | Query::ChannelOrder
                    | Query::ArraySize
                    | Query::MemoryLayout
            )
        } else if level {
            matches!(query, Query::Width | Query::Height | Query::Depth)
        } else {
            query != Query::MemoryLayout
        };
        if !valid || one_ty(m) != Some(Ty::B32) {
            return Err(unsup());
        }
        if ops.len() != 2 + usize::from(level) {
            return Err(Error::Parse {
                line,
                msg: format!(
                    "{} takes {} operands",
                    if surface { "suq" } else { "txq" },
                    2 + usize::from(level)
                ),
            });
        }
        if level {
            self.check_srcs(&ops[2], Ty::S32, line)?;
        }
        let handle = match &ops[1] {
            Opnd::Mem {
                reg: Some(r),
                sym: None,
                off: 0,
            } => self.src(&Opnd::Name(r), Ty::U64, line)?,
            Opnd::Image(v) if v.len() == 1 => self.handle(&v[0], line, unsup)?,
            // `.texref`/`.surfref` variables.
            _ => return Err(unsup()),
        };
        Ok(Op::Query {
            surface,
            query,
            d: self.dst(&ops[0], line)?,
            handle,
        })
    }

    /// The handle and coordinates of `[a, c]`; the layer index of arrays
    /// is `.u32`, the other coordinates `cty`.
    fn image(
        &self,
        o: &Opnd<'_>,
        geom: Geom,
        cty: Ty,
        line: u32,
        unsup: &dyn Fn() -> Error,
    ) -> Result<(Src, Srcs4), Error> {
        let Opnd::Image(v) = o else {
            return Err(Error::Parse {
                line,
                msg: format!("expected [handle, coordinates], found {o:?}"),
            });
        };
        // `[a, b, c]` names a sampler: independent mode.
        let [a, c] = &v[..] else {
            return Err(unsup());
        };
        let handle = self.handle(a, line, unsup)?;
        let need = geom.coords();
        let elems: &[Opnd<'_>] = match c {
            Opnd::Vec(e) => e,
            e => std::slice::from_ref(e),
        };
        if elems.len() < need || elems.len() > 4 {
            return Err(Error::Parse {
                line,
                msg: format!(
                    "{} coordinates where the geometry takes {need}",
                    elems.len()
                ),
            });
        }
        let mut coords = [Src::Imm(0); 4];
        for (k, e) in elems.iter().enumerate() {
            let ty = if k == 0 && geom.layered() {
                Ty::U32
            } else {
                cty
            };
            coords[k] = self.src(e, ty, line)?;
        }
        Ok((handle, coords))
    }

    /// A texture or surface handle: a `.u64` register. Module-scope
    /// `.texref`/`.surfref` variables are unsupported.
    fn handle(&self, o: &Opnd<'_>, line: u32, unsup: &dyn Fn() -> Error) -> Result<Src, Error> {
        match o {
            Opnd::Name(n) if self.lookup_reg(n).is_some() => self.src(o, Ty::U64, line),
            _ => Err(unsup()),
        }
    }

    /// Destinations `d`, `{d}`, `{d0, d1}` or `{d0, d1, d2, d3}` (`_` sinks
    /// allowed), and how many.
    fn dst_list(&mut self, o: &Opnd<'_>, line: u32) -> Result<(Regs4, u8), Error> {
        match o {
            Opnd::Vec(v) if matches!(v.len(), 1 | 2 | 4) => {
                let mut out = [0u32; 4];
                for (k, e) in v.iter().enumerate() {
                    out[k] = self.dst(e, line)?;
                }
                Ok((out, v.len() as u8))
            }
            o => self.vec_dsts(o, line),
        }
    }

    /// Sources `a`, `{a}`, `{a0, a1}` or `{a0, a1, a2, a3}`, and how many.
    fn src_list(&self, o: &Opnd<'_>, ty: Ty, line: u32) -> Result<(Srcs4, u8), Error> {
        match o {
            Opnd::Vec(v) if v.len() == 1 => {
                let mut out = [Src::Imm(0); 4];
                out[0] = self.src(&v[0], ty, line)?;
                Ok((out, 1))
            }
            o => self.vec_srcs(o, ty, line),
        }
    }

    /// Checks the operands the interpreter does not use (levels of detail,
    /// gradients) name registers or immediates.
    fn check_srcs(&self, o: &Opnd<'_>, ty: Ty, line: u32) -> Result<(), Error> {
        match o {
            Opnd::Vec(v) if v.len() <= 4 => {
                for e in v {
                    self.src(e, ty, line)?;
                }
                Ok(())
            }
            o => self.src(o, ty, line).map(|_| ()),
        }
    }
}

/// The geometry modifier of a texture or surface instruction.
fn geom(m: &mut Mods<'_>) -> Option<Geom> {
    Geom::parse(m.one_of(&["1d", "2d", "3d", "a1d", "a2d", "cube", "acube"])?)
}

/// The single type modifier of an instruction.
fn one_ty(m: &mut Mods<'_>) -> Option<Ty> {
    match m.types()[..] {
        [t] => Some(t),
        _ => None,
    }
}

impl FuncParser<'_> {
    /// `wmma.load`, `wmma.store` and `wmma.mma` (the shapes and types of
    /// sm_80: f16, bf16, tf32, 8-bit integers and f64; not the sub-byte
    /// ones). Every fragment's register count must hold its share of the
    /// matrix (a whole number of copies of it).
    fn wmma(
        &mut self,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        opcode: &str,
        line: u32,
    ) -> Result<Wmma, Error> {
        let unsup = || Error::Unsupported {
            what: format!("{opcode} (line {line})"),
        };
        let bad = || Error::Parse {
            line,
            msg: format!("{opcode}: wrong operands"),
        };
        if !m.has("sync") || !m.has("aligned") {
            return Err(unsup());
        }
        let shape = match m.one_of(&["m16n16k16", "m32n8k16", "m8n32k16", "m16n16k8", "m8n8k4"]) {
            Some("m16n16k16") => [16, 16, 16],
            Some("m32n8k16") => [32, 8, 16],
            Some("m8n32k16") => [8, 32, 16],
            Some("m16n16k8") => [16, 16, 8],
            Some(_) => [8, 8, 4],
            None => return Err(unsup()),
        };
        let [mm, nn, kk] = shape;
        // Registers of a `{...}` operand holding a fragment of `rows` ×
        // `cols` elements of `ty`.
        let frag = |me: &mut Self, o: &Opnd<'_>, ty: WTy, rows: u32, cols: u32| {
            let Opnd::Vec(v) = o else {
                return Err(bad());
            };
            let share = (rows * cols / 32) as usize;
            let count = v.len() * ty.per_reg();
            if count == 0 || !count.is_multiple_of(share) || v.len() > 16 {
                return Err(unsup());
            }
            v.iter()
                .map(|e| me.dst(e, line))
                .collect::<Result<Vec<u32>, Error>>()
        };
        let types = m.fragment_types();
        let load = m.has("load");
        if load || m.has("store") {
            let which = if load {
                match m.one_of(&["a", "b", "c"]) {
                    Some("a") => 0u8,
                    Some("b") => 1,
                    Some(_) => 2,
                    None => return Err(unsup()),
                }
            } else if m.has("d") {
                2
            } else {
                return Err(unsup());
            };
            let col = match m.one_of(&["row", "col"]) {
                Some(l) => l == "col",
                None => return Err(unsup()),
            };
            let space = m.space().unwrap_or(Space::Generic);
            let [ty] = types[..] else {
                return Err(unsup());
            };
            if !matches!(space, Space::Global | Space::Shared | Space::Generic) || !m.all_used() {
                return Err(unsup());
            }
            let (rows, cols) = match which {
                0 => (mm, kk),
                1 => (kk, nn),
                _ => (mm, nn),
            };
            let (frag_at, addr_at) = if load { (0, 1) } else { (1, 0) };
            if !matches!(ops.len(), 2 | 3) {
                return Err(bad());
            }
            let regs = frag(self, &ops[frag_at], ty, rows, cols)?;
            let addr = self.addr(&ops[addr_at], line)?;
            let stride = match ops.get(2) {
                Some(o) => Some(self.src(o, Ty::U32, line)?),
                None => None,
            };
            let op = if load {
                WmmaOp::Load {
                    which,
                    col,
                    ty,
                    space,
                    d: regs,
                    addr,
                    stride,
                }
            } else {
                WmmaOp::Store {
                    col,
                    ty,
                    space,
                    v: regs,
                    addr,
                    stride,
                }
            };
            return Ok(Wmma { shape, op });
        }
        if !m.has("mma") {
            return Err(unsup());
        }
        // The operands' layouts: the fragments hold elements by position,
        // whatever layout they were loaded from.
        for _ in 0..2 {
            if m.one_of(&["row", "col"]).is_none() {
                return Err(unsup());
            }
        }
        let satfinite = m.has("satfinite");
        let rn = m.has("rn");
        let (dty, ab, cty) = match types[..] {
            [d, c] if matches!(d, WTy::F16 | WTy::F32) && matches!(c, WTy::F16 | WTy::F32) => {
                (d, WTy::F16, c)
            }
            [d, a, b, c] if a == b => (d, a, c),
            _ => return Err(unsup()),
        };
        let ok = match ab {
            WTy::F16 => true,
            WTy::Bf16 | WTy::Tf32 => dty == WTy::F32 && cty == WTy::F32,
            WTy::S8 | WTy::U8 => dty == WTy::S32 && cty == WTy::S32,
            WTy::F64 => dty == WTy::F64 && cty == WTy::F64 && shape == [8, 8, 4],
            _ => false,
        };
        if !ok || (rn && ab != WTy::F64) || (satfinite && dty != WTy::S32) || !m.all_used() {
            return Err(unsup());
        }
        let [d, a, b, c] = ops else {
            return Err(bad());
        };
        self.mma_op(false, shape, (dty, ab, cty), satfinite, [d, a, b, c], frag)
    }

    /// The product of a `wmma.mma` (`fixed` false) or `mma.sync`: each
    /// fragment's registers from `frag(operand, type, rows, columns)`.
    fn mma_op(
        &mut self,
        fixed: bool,
        shape: [u32; 3],
        (dty, ab, cty): (WTy, WTy, WTy),
        satfinite: bool,
        [d, a, b, c]: [&Opnd<'_>; 4],
        frag: impl Fn(&mut Self, &Opnd<'_>, WTy, u32, u32) -> Result<Vec<u32>, Error>,
    ) -> Result<Wmma, Error> {
        let [mm, nn, kk] = shape;
        Ok(Wmma {
            shape,
            op: WmmaOp::Mma {
                fixed,
                ab,
                cty,
                dty,
                satfinite,
                d: frag(self, d, dty, mm, nn)?,
                a: frag(self, a, ab, mm, kk)?,
                b: frag(self, b, ab, kk, nn)?,
                c: frag(self, c, cty, mm, nn)?,
            },
        })
    }

    /// `cp.async.bulk.{shared::cta,shared::cluster}.global.mbarrier::complete_tx::bytes
    /// [dst], [src], size, [mbar]`, `cp.async.bulk.global.shared::cta.bulk_group
    /// [dst], [src], size`, and the bulk group's `commit_group` and
    /// `wait_group{.read}` (no-ops: the copies are done when issued). The
    /// cluster is the CTA: a cluster of one block.
    fn bulk_copy(
        &mut self,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        opcode: &str,
        line: u32,
    ) -> Result<Op, Error> {
        let unsup = || Error::Unsupported {
            what: format!("{opcode} (line {line})"),
        };
        if m.has("commit_group") {
            return if ops.is_empty() && m.all_used() {
                Ok(Op::Nop)
            } else {
                Err(unsup())
            };
        }
        if m.has("wait_group") {
            m.has("read");
            return if ops.len() == 1 && m.all_used() {
                Ok(Op::Nop)
            } else {
                Err(unsup())
            };
        }
        if m.has("prefetch") {
            m.ignore(&["L2", "global"]);
            return if m.all_used() {
                Ok(Op::Nop)
            } else {
                Err(unsup())
            };
        }
        // The destination's space comes first: `.shared::cta.global` or
        // `.global.shared::cta`.
        let first = m
            .parts
            .iter()
            .find(|p| matches!(**p, "global" | "shared::cta" | "shared::cluster"))
            .copied();
        let to_shared = matches!(first, Some("shared::cta" | "shared::cluster"));
        if to_shared && !m.has("shared::cta") && !m.has("shared::cluster") {
            return Err(unsup());
        }
        let (dst_space, src_space, mbar) = if to_shared {
            if !m.has("global") || !m.has("mbarrier::complete_tx::bytes") || ops.len() != 4 {
                return Err(unsup());
            }
            (
                Space::Shared,
                Space::Global,
                Some(self.addr(&ops[3], line)?),
            )
        } else {
            if !m.has("global") || !m.has("bulk_group") || ops.len() != 3 {
                return Err(unsup());
            }
            (Space::Global, Space::Shared, None)
        };
        // Source and destination spaces of `.global.shared::cta`: the
        // first named is the destination.
        if !to_shared && !m.has("shared::cta") {
            return Err(unsup());
        }
        if !m.all_used() {
            return Err(unsup());
        }
        Ok(Op::BulkCopy(Box::new(BulkCopy {
            dst: self.addr(&ops[0], line)?,
            dst_space,
            src: self.addr(&ops[1], line)?,
            src_space,
            size: self.src(&ops[2], Ty::U32, line)?,
            mbar,
        })))
    }

    /// `mma.sync.aligned` for the shapes and types sm_80–sm_90 code uses:
    /// m16n8k8 and m16n8k16 on f16 and bf16, m16n8k4 and m16n8k8 on tf32,
    /// m16n8k16 and m16n8k32 on 8-bit integers, m8n8k4 on f64; `.row.col`
    /// (the only layout these shapes have). The fragments' registers hold
    /// the elements the PTX ISA assigns to each lane.
    fn mma_sync(
        &mut self,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        opcode: &str,
        line: u32,
    ) -> Result<Wmma, Error> {
        let unsup = || Error::Unsupported {
            what: format!("{opcode} (line {line})"),
        };
        let bad = || Error::Parse {
            line,
            msg: format!("{opcode}: wrong operands"),
        };
        if !m.has("sync") || !m.has("aligned") || !m.has("row") || !m.has("col") {
            return Err(unsup());
        }
        let shape = match m.one_of(&["m16n8k16", "m16n8k8", "m16n8k4", "m16n8k32", "m8n8k4"]) {
            Some("m16n8k16") => [16, 8, 16],
            Some("m16n8k8") => [16, 8, 8],
            Some("m16n8k4") => [16, 8, 4],
            Some("m16n8k32") => [16, 8, 32],
            Some(_) => [8, 8, 4],
            None => return Err(unsup()),
        };
        let satfinite = m.has("satfinite");
        let types = m.fragment_types();
        let [dty, ab, bty, cty] = types[..] else {
            return Err(unsup());
        };
        let k = shape[2];
        let ok = ab == bty
            && match ab {
                WTy::F16 => {
                    matches!(k, 8 | 16)
                        && matches!(dty, WTy::F16 | WTy::F32)
                        && matches!(cty, WTy::F16 | WTy::F32)
                }
                WTy::Bf16 => matches!(k, 8 | 16) && dty == WTy::F32 && cty == WTy::F32,
                WTy::Tf32 => matches!(k, 4 | 8) && dty == WTy::F32 && cty == WTy::F32,
                WTy::S8 | WTy::U8 => matches!(k, 16 | 32) && dty == WTy::S32 && cty == WTy::S32,
                WTy::F64 => shape == [8, 8, 4] && dty == WTy::F64 && cty == WTy::F64,
                _ => false,
            }
            && (shape != [8, 8, 4] || ab == WTy::F64);
        if !ok || (satfinite && dty != WTy::S32) || !m.all_used() {
            return Err(unsup());
        }
        let [d, a, b, c] = ops else {
            return Err(bad());
        };
        // Registers of a `{...}` operand: exactly what the fragment needs.
        let frag = |me: &mut Self, o: &Opnd<'_>, ty: WTy, rows: u32, cols: u32| {
            let Opnd::Vec(v) = o else {
                return Err(bad());
            };
            let elems = (rows * cols / 32) as usize;
            if v.len() * ty.per_reg() != elems {
                return Err(bad());
            }
            v.iter()
                .map(|e| me.dst(e, line))
                .collect::<Result<Vec<u32>, Error>>()
        };
        self.mma_op(true, shape, (dty, ab, cty), satfinite, [d, a, b, c], frag)
    }

    /// `ldmatrix`/`stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}{.shared}.b16`.
    fn ldst_matrix(
        &mut self,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        load: bool,
        opcode: &str,
        line: u32,
    ) -> Result<Wmma, Error> {
        let unsup = || Error::Unsupported {
            what: format!("{opcode} (line {line})"),
        };
        let bad = || Error::Parse {
            line,
            msg: format!("{opcode}: wrong operands"),
        };
        if !m.has("sync") || !m.has("aligned") || !m.has("m8n8") || !m.has("b16") {
            return Err(unsup());
        }
        let num = match m.one_of(&["x1", "x2", "x4"]) {
            Some("x1") => 1,
            Some("x2") => 2,
            Some(_) => 4,
            None => return Err(unsup()),
        };
        let trans = m.has("trans");
        let space = m.space().unwrap_or(Space::Generic);
        if !matches!(space, Space::Shared | Space::Generic) || !m.all_used() {
            return Err(unsup());
        }
        let [x, y] = ops else {
            return Err(bad());
        };
        let (regs, at) = if load { (x, y) } else { (y, x) };
        let Opnd::Vec(v) = regs else {
            return Err(bad());
        };
        if v.len() != num {
            return Err(bad());
        }
        let regs = v
            .iter()
            .map(|e| self.dst(e, line))
            .collect::<Result<Vec<u32>, Error>>()?;
        let addr = self.addr(at, line)?;
        let op = if load {
            WmmaOp::LdMatrix {
                trans,
                space,
                d: regs,
                addr,
            }
        } else {
            WmmaOp::StMatrix {
                trans,
                space,
                v: regs,
                addr,
            }
        };
        Ok(Wmma {
            shape: [8, 8, 0],
            op,
        })
    }

    fn half_op(
        &mut self,
        base: &str,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        line: u32,
        unsup: &dyn Fn() -> Error,
    ) -> Result<Op, Error> {
        // Non-short-circuiting: every type modifier is consumed, so a
        // mixture is left over and rejected.
        let (h1, h2, b1, b2) = (m.has("f16"), m.has("f16x2"), m.has("bf16"), m.has("bf16x2"));
        if usize::from(h1) + usize::from(h2) + usize::from(b1) + usize::from(b2) != 1 {
            return Err(unsup());
        }
        let fmt = if b1 || b2 { HFmt::BF16 } else { HFmt::F16 };
        let x2 = h2 || b2;
        m.has("rn");
        let ftz = m.has("ftz");
        let sat = m.has("sat");
        let relu = m.has("relu");
        let nan = m.has("NaN");
        let approx = m.has("approx");
        let (op, n) = match base {
            "tanh" if approx => (HOp::Tanh, 2),
            "ex2" if approx => (HOp::Ex2, 2),
            "tanh" | "ex2" => return Err(unsup()),
            "add" => (HOp::Add, 3),
            "sub" => (HOp::Sub, 3),
            "mul" => (HOp::Mul, 3),
            "fma" => (HOp::Fma, 4),
            "neg" => (HOp::Neg, 2),
            "abs" => (HOp::Abs, 2),
            "min" => (HOp::Min, 3),
            _ => (HOp::Max, 3),
        };
        let arith = matches!(op, HOp::Add | HOp::Sub | HOp::Mul | HOp::Fma);
        let bad = !m.all_used()
            || sat && !arith
            || relu && (op != HOp::Fma || sat)
            || nan && !matches!(op, HOp::Min | HOp::Max)
            || approx && !matches!(op, HOp::Tanh | HOp::Ex2)
            || fmt == HFmt::BF16 && (sat || ftz && op != HOp::Ex2);
        if bad {
            return Err(unsup());
        }
        if ops.len() != n {
            return Err(Error::Parse {
                line,
                msg: format!("{base} takes {n} operands, found {}", ops.len()),
            });
        }
        let t = if x2 { Ty::B32 } else { Ty::B16 };
        let opt = |k: usize, s: &Self| match ops.get(k) {
            Some(o) => s.src(o, t, line),
            None => Ok(Src::Imm(0)),
        };
        Ok(Op::Half {
            op,
            fmt,
            x2,
            ftz,
            sat,
            relu,
            nan,
            d: self.dst(&ops[0], line)?,
            a: opt(1, self)?,
            b: opt(2, self)?,
            c: opt(3, self)?,
        })
    }

    /// The conversions to and from pairs of 8-bit floats (see
    /// [`Op::CvtF8`]).
    fn cvt_f8(
        &mut self,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        line: u32,
        unsup: &dyn Fn() -> Error,
    ) -> Result<Op, Error> {
        use crate::float::F8;
        if !m.has("rn") {
            return Err(unsup());
        }
        let relu = m.has("relu");
        let satfinite = m.has("satfinite");
        let fmt = |p: &str| match p {
            "e4m3x2" => Some(F8::E4m3),
            "e5m2x2" => Some(F8::E5m2),
            _ => None,
        };
        let rest: Vec<&str> = m
            .parts
            .iter()
            .zip(&m.used)
            .filter(|(_, u)| !**u)
            .map(|(p, _)| *p)
            .collect();
        let (fmt, from_f16x2, to_f16x2) = match rest[..] {
            [d, "f32"] if satfinite => (fmt(d).ok_or_else(unsup)?, false, false),
            [d, "f16x2"] if satfinite => (fmt(d).ok_or_else(unsup)?, true, false),
            ["f16x2", s] if !satfinite => (fmt(s).ok_or_else(unsup)?, false, true),
            _ => return Err(unsup()),
        };
        m.used.iter_mut().for_each(|u| *u = true);
        let n = if !from_f16x2 && !to_f16x2 { 3 } else { 2 };
        if ops.len() != n {
            return Err(Error::Parse {
                line,
                msg: format!("cvt takes {n} operands, found {}", ops.len()),
            });
        }
        let src_ty = if to_f16x2 {
            Ty::B16
        } else if from_f16x2 {
            Ty::B32
        } else {
            Ty::F32
        };
        Ok(Op::CvtF8 {
            fmt,
            from_f16x2,
            to_f16x2,
            relu,
            d: self.dst(&ops[0], line)?,
            a: self.src(&ops[1], src_ty, line)?,
            b: match ops.get(2) {
                Some(o) if n == 3 => Some(self.src(o, Ty::F32, line)?),
                _ => None,
            },
        })
    }

    /// `cvt.rn{.relu}.{f16,bf16}.f32 d, a` and
    /// `cvt.rn{.relu}.{f16x2,bf16x2}.f32 d, a, b`.
    fn cvt_half(
        &mut self,
        relu: bool,
        m: &mut Mods<'_>,
        ops: &[Opnd<'_>],
        line: u32,
        unsup: &dyn Fn() -> Error,
    ) -> Result<Op, Error> {
        if !m.has("rn") {
            return Err(unsup());
        }
        let (fmt, x2) = match m.types()[..] {
            [Ty::F16, Ty::F32] => (HFmt::F16, false),
            [Ty::BF16, Ty::F32] => (HFmt::BF16, false),
            [Ty::F16x2, Ty::F32] => (HFmt::F16, true),
            [Ty::BF16x2, Ty::F32] => (HFmt::BF16, true),
            _ => return Err(unsup()),
        };
        if !m.all_used() {
            return Err(unsup());
        }
        let n = if x2 { 3 } else { 2 };
        if ops.len() != n {
            return Err(Error::Parse {
                line,
                msg: format!("cvt takes {n} operands, found {}", ops.len()),
            });
        }
        Ok(Op::CvtHalf {
            fmt,
            relu,
            d: self.dst(&ops[0], line)?,
            a: self.src(&ops[1], Ty::F32, line)?,
            b: match ops.get(2) {
                Some(o) if x2 => Some(self.src(o, Ty::F32, line)?),
                _ => None,
            },
        })
    }
}

fn wide_ty(t: Ty) -> Ty {
    match t {
        Ty::S16 => Ty::S32,
        Ty::U16 => Ty::U32,
        Ty::S32 => Ty::S64,
        Ty::U32 => Ty::U64,
        t => t,
    }
}

/// Rounding, `.ftz` and `.sat` of a float instruction. `None` if the type
/// has no float arithmetic here (half precision).
fn fmode(m: &mut Mods<'_>, ty: Ty) -> Option<FMode> {
    if !matches!(ty, Ty::F32 | Ty::F64) {
        return None;
    }
    let rnd = m.rnd().unwrap_or(Rnd::Rn);
    m.has("approx");
    m.has("full");
    let ftz = m.has("ftz");
    let sat = m.has("sat");
    if ty == Ty::F64 && (ftz || sat) {
        return None;
    }
    Some(FMode { rnd, ftz, sat })
}

fn cmp_op(m: &mut Mods<'_>) -> Option<Cmp> {
    Some(
        match m.one_of(&[
            "eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi", "hs", "equ", "neu", "ltu", "leu",
            "gtu", "geu", "num", "nan",
        ])? {
            "eq" => Cmp::Eq,
            "ne" => Cmp::Ne,
            "lt" => Cmp::Lt,
            "le" => Cmp::Le,
            "gt" => Cmp::Gt,
            "ge" => Cmp::Ge,
            "lo" => Cmp::Lo,
            "ls" => Cmp::Ls,
            "hi" => Cmp::Hi,
            "hs" => Cmp::Hs,
            "equ" => Cmp::Equ,
            "neu" => Cmp::Neu,
            "ltu" => Cmp::Ltu,
            "leu" => Cmp::Leu,
            "gtu" => Cmp::Gtu,
            "geu" => Cmp::Geu,
            "num" => Cmp::Num,
            _ => Cmp::Nan,
        },
    )
}
