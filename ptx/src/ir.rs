//! The pre-decoded form of a PTX function: instructions with resolved
//! register indices, immediates as bits, and branch targets as instruction
//! indices, so that execution is a loop over a slice.

use std::sync::Arc;

use crate::float::HFmt;

/// Most bytes of one function's parameters.
pub const MAX_PARAM_BYTES: u32 = 32 << 10;
/// Param-space offset where the scratch of `.func` parameters and body
/// `.param` variables starts (kernel parameters lie below it).
pub(crate) const PARAM_SCRATCH_BASE: u64 = MAX_PARAM_BYTES as u64;
/// A PTX fundamental type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Ty {
    B8,
    B16,
    B32,
    B64,
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    F16,
    F16x2,
    BF16,
    BF16x2,
    F32,
    F64,
    Pred,
}

impl Ty {
    pub(crate) fn parse(s: &str) -> Option<Ty> {
        Some(match s {
            "b8" => Ty::B8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "u8" => Ty::U8,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s8" => Ty::S8,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "f16" => Ty::F16,
            "f16x2" => Ty::F16x2,
            "bf16" => Ty::BF16,
            "bf16x2" => Ty::BF16x2,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }

    /// Width in bits (a predicate is stored as one bit).
    #[inline(always)]
    pub(crate) fn bits(self) -> u32 {
        match self {
            Ty::Pred => 1,
            Ty::B8 | Ty::U8 | Ty::S8 => 8,
            Ty::B16 | Ty::U16 | Ty::S16 | Ty::F16 | Ty::BF16 => 16,
            Ty::B32 | Ty::U32 | Ty::S32 | Ty::F32 | Ty::F16x2 | Ty::BF16x2 => 32,
            Ty::B64 | Ty::U64 | Ty::S64 | Ty::F64 => 64,
        }
    }

    /// Size in memory, in bytes.
    #[inline(always)]
    pub(crate) fn bytes(self) -> u32 {
        self.bits().div_ceil(8)
    }

    #[inline(always)]
    pub(crate) fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }

    #[inline(always)]
    pub(crate) fn is_float(self) -> bool {
        matches!(
            self,
            Ty::F16 | Ty::F16x2 | Ty::BF16 | Ty::BF16x2 | Ty::F32 | Ty::F64
        )
    }

    pub(crate) fn is_int(self) -> bool {
        !self.is_float() && self != Ty::Pred
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Ty::B8 => "b8",
            Ty::B16 => "b16",
            Ty::B32 => "b32",
            Ty::B64 => "b64",
            Ty::U8 => "u8",
            Ty::U16 => "u16",
            Ty::U32 => "u32",
            Ty::U64 => "u64",
            Ty::S8 => "s8",
            Ty::S16 => "s16",
            Ty::S32 => "s32",
            Ty::S64 => "s64",
            Ty::F16 => "f16",
            Ty::F16x2 => "f16x2",
            Ty::BF16 => "bf16",
            Ty::BF16x2 => "bf16x2",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
            Ty::Pred => "pred",
        }
    }
}

/// A state space of a load, store, atomic or address conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Generic,
    Global,
    Shared,
    Local,
    Param,
    Const,
}

impl Space {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Space::Generic => "generic",
            Space::Global => "global",
            Space::Shared => "shared",
            Space::Local => "local",
            Space::Param => "param",
            Space::Const => "const",
        }
    }
}

/// A special register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sreg {
    Tid(u8),
    Ntid(u8),
    Ctaid(u8),
    Nctaid(u8),
    LaneId,
    WarpId,
    NWarpId,
    SmId,
    NSmId,
    GridId,
    Clock,
    ClockHi,
    Clock64,
    GlobalTimer,
    GlobalTimerLo,
    GlobalTimerHi,
    LaneMaskEq,
    LaneMaskLt,
    LaneMaskLe,
    LaneMaskGt,
    LaneMaskGe,
    DynamicSmem,
    TotalSmem,
    /// `%reserved_smem_offset_begin`, `_end`, `_cap`, `_0`, `_1`: the
    /// block's reserved shared memory (`crate::exec::RESERVED_SMEM`).
    ReservedBegin,
    ReservedEnd,
    ReservedCap,
    Reserved(u8),
    /// `%envreg0`..`%envreg31`: the driver's per-launch data.
    EnvReg(u8),
    /// Constants: the cluster registers of a launch without clusters
    /// (`%cluster_ctarank` 0, `%cluster_nctarank` 1, ...).
    Zero,
    One,
}

/// A source operand, read as raw bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Src {
    Reg(u32),
    /// A predicate register, negated (`!%p1`).
    NotPred(u32),
    Imm(u64),
    Sreg(Sreg),
}

/// A memory operand `[base+off]`; symbols are folded into `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Addr {
    pub base: Option<u32>,
    pub off: i64,
    /// The base is a 32-bit register (shared, local, const or param
    /// addressing): the address is `base + off` modulo 2^32, as the
    /// hardware's 32-bit address arithmetic wraps (nvcc folds a negative
    /// term into the register and a positive one into the offset).
    pub narrow: bool,
}

impl Addr {
    /// `[off]`, no register.
    pub(crate) const fn absolute(off: i64) -> Addr {
        Addr {
            base: None,
            off,
            narrow: false,
        }
    }

    /// The address given the base register's value.
    #[inline(always)]
    pub(crate) fn at(self, base: u64) -> u64 {
        let a = base.wrapping_add(self.off as u64);
        if self.narrow {
            a & 0xffff_ffff
        } else {
            a
        }
    }
}

/// Rounding of a floating-point result (or of a float-to-int conversion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rnd {
    /// To nearest, ties to even.
    Rn,
    /// Toward zero.
    Rz,
    /// Toward negative infinity.
    Rm,
    /// Toward positive infinity.
    Rp,
}

/// Float modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FMode {
    pub rnd: Rnd,
    pub ftz: bool,
    pub sat: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IBin {
    Add,
    AddSat,
    Sub,
    SubSat,
    MulLo,
    MulHi,
    Mul24Lo,
    Mul24Hi,
    Div,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
    /// `bmsk.clamp.b32` and `bmsk.wrap.b32`: `b` one bits from bit `a`.
    BmskClamp,
    BmskWrap,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IUn {
    Abs,
    Neg,
    Not,
    Cnot,
    Popc,
    Clz,
    Brev,
    Bfind,
    BfindShiftAmt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FBin {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    MinNaN,
    MaxNaN,
    Copysign,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FUn {
    Abs,
    Neg,
    Rcp,
    RcpApprox,
    Sqrt,
    SqrtApprox,
    Rsqrt,
    Sin,
    Cos,
    Lg2,
    Ex2,
    Tanh,
    /// `cvt.rna.tf32.f32`: to the nearest tf32 (10 fraction bits), ties
    /// away from zero, as an f32's bits.
    Tf32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Lo,
    Ls,
    Hi,
    Hs,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoolOp {
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    Min,
    Max,
    Inc,
    Dec,
    Cas,
    Exch,
    And,
    Or,
    Xor,
}

/// The reduction of `bar.red`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BarRed {
    Popc,
    And,
    Or,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShflMode {
    Up,
    Down,
    Bfly,
    Idx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VoteMode {
    All,
    Any,
    Uni,
    Ballot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Testp {
    Finite,
    Infinite,
    Number,
    NotANumber,
    Normal,
    Subnormal,
}

/// Half-precision arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HOp {
    Add,
    Sub,
    Mul,
    Fma,
    Neg,
    Abs,
    Min,
    Max,
    /// `tanh.approx` and `ex2.approx`, rounded once from f64.
    Tanh,
    Ex2,
}

/// A SIMD video instruction's per-lane operation (`vadd4`, `vabsdiff2`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VideoOp {
    Add,
    Sub,
    Absdiff,
    Min,
    Max,
}

/// The shape of a SIMD video instruction: `lanes` lanes of `32 / lanes`
/// bits; each operand's lanes signed or not; `.sat` clamps each lane's
/// result to the destination's lane range; `.add` sums the lanes' full
/// results into `c` instead (the two exclude each other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Video {
    pub op: VideoOp,
    pub lanes: u8,
    pub d_signed: bool,
    pub a_signed: bool,
    pub b_signed: bool,
    pub sat: bool,
    pub add: bool,
}

/// What `cvt` does, decided at parse time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CvtKind {
    /// Integer to integer (extension, truncation, optional saturation).
    IntInt,
    /// Integer to float with a rounding mode.
    IntFloat(Rnd),
    /// Float to integer, rounding to an integral value first.
    FloatInt(Rnd),
    /// Float to float of another width.
    FloatFloat(Rnd),
    /// Float to the same type, rounded to an integral value.
    FloatRound(Rnd),
}

/// The geometry of a texture or surface instruction (`.1d` ... `.acube`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Geom {
    D1,
    D2,
    D3,
    /// Layered 1D (`.a1d`): coordinates `{layer, x}`.
    A1,
    /// Layered 2D (`.a2d`): coordinates `{layer, x, y, _}`.
    A2,
    /// Cubemap: a direction `{x, y, z, _}`.
    Cube,
    /// Layered cubemap: `{layer, x, y, z}`.
    ACube,
}

impl Geom {
    pub(crate) fn parse(s: &str) -> Option<Geom> {
        Some(match s {
            "1d" => Geom::D1,
            "2d" => Geom::D2,
            "3d" => Geom::D3,
            "a1d" => Geom::A1,
            "a2d" => Geom::A2,
            "cube" => Geom::Cube,
            "acube" => Geom::ACube,
            _ => return None,
        })
    }

    /// Elements of the coordinate vector that carry a value (a padding
    /// fourth element may follow).
    pub(crate) fn coords(self) -> usize {
        match self {
            Geom::D1 => 1,
            Geom::D2 | Geom::A1 => 2,
            Geom::D3 | Geom::A2 | Geom::Cube => 3,
            Geom::ACube => 4,
        }
    }

    /// Whether the first coordinate is a layer index.
    pub(crate) fn layered(self) -> bool {
        matches!(self, Geom::A1 | Geom::A2 | Geom::ACube)
    }
}

/// `tex` or `tld4`: a texture lookup for one thread.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TexOp {
    pub geom: Geom,
    /// `tld4`: the component (0 to 3) gathered from the four texels of
    /// the bilinear footprint.
    pub gather: Option<u8>,
    /// Destination type: `.f32`, `.s32` or `.u32`.
    pub dty: Ty,
    /// `.s32` coordinates (texel indices) rather than `.f32`.
    pub int_coords: bool,
    pub ds: Regs4,
    /// The residency predicate of `d|p`.
    pub dp: Option<u32>,
    /// The texture object (a `.u64` handle).
    pub handle: Src,
    pub coords: Srcs4,
}

/// What happens to a surface access out of range (`.trap`, `.clamp`,
/// `.zero`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SurfClamp {
    Trap,
    Clamp,
    Zero,
}

/// The data of a surface access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SurfData {
    /// `suld`: the destinations.
    Load(Regs4),
    /// `sust`: the values stored.
    Store(Srcs4),
}

/// `suld.b` or `sust.b`: an unformatted surface access.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SurfOp {
    /// Not a cubemap geometry.
    pub geom: Geom,
    /// Bytes of each vector element (1, 2, 4 or 8).
    pub bytes: u8,
    /// Vector elements (1, 2 or 4).
    pub n: u8,
    pub clamp: SurfClamp,
    pub data: SurfData,
    /// The surface object (a `.u64` handle).
    pub handle: Src,
    /// `.s32` coordinates, x in bytes; a layer index first for arrays.
    pub coords: Srcs4,
}

/// An attribute `txq` or `suq` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Query {
    Width,
    Height,
    Depth,
    ChannelDataType,
    ChannelOrder,
    NormalizedCoords,
    ForceUnnormalizedCoords,
    FilterMode,
    /// `addr_mode_0` to `addr_mode_2`.
    AddrMode(u8),
    ArraySize,
    NumMipmapLevels,
    NumSamples,
    MemoryLayout,
}

/// Up to four registers (vector loads, unpacking moves).
pub(crate) type Regs4 = [u32; 4];
/// Up to four sources (vector stores, packing moves).
pub(crate) type Srcs4 = [Src; 4];

/// One decoded instruction.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Op {
    Mov {
        d: u32,
        a: Src,
        bits: u32,
    },
    /// `mov.bN d, {a, b, ...}`: concatenates `n` parts of `part` bits.
    Pack {
        d: u32,
        parts: Srcs4,
        n: u8,
        part: u32,
    },
    /// `mov.bN {d0, d1, ...}, a`: splits `a`.
    Unpack {
        ds: Regs4,
        n: u8,
        a: Src,
        part: u32,
    },
    IBin {
        op: IBin,
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
    },
    /// `mul.wide` (d is twice as wide as `ty`).
    MulWide {
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
    },
    /// `mad.lo`, `mad.hi`, `mad.wide`, `mad24`: `a*b + c`.
    Mad {
        mul: IBin,
        wide: bool,
        sat: bool,
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    /// `add.cc`, `addc`, `sub.cc`, `subc`, `mad.lo.cc`, `madc`.
    Carry {
        sub: bool,
        cin: bool,
        cout: bool,
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
        /// Multiplicand for `mad*.cc`: `a*m + b`.
        mul: Option<(Src, bool)>,
    },
    IUn {
        op: IUn,
        ty: Ty,
        d: u32,
        a: Src,
    },
    Sad {
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Bfe {
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Bfi {
        ty: Ty,
        d: u32,
        f: Src,
        b: Src,
        c: Src,
        len: Src,
    },
    Prmt {
        mode: Option<u8>,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    /// `vop4`/`vop2` with the default mask and lane selectors.
    Video {
        v: Video,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Lop3 {
        d: u32,
        a: Src,
        b: Src,
        c: Src,
        lut: Src,
    },
    /// Funnel shift.
    Shf {
        left: bool,
        wrap: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    FBin {
        op: FBin,
        ty: Ty,
        m: FMode,
        d: u32,
        a: Src,
        b: Src,
    },
    Fma {
        ty: Ty,
        m: FMode,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    FUn {
        op: FUn,
        ty: Ty,
        m: FMode,
        d: u32,
        a: Src,
    },
    /// `.f16`/`.bf16` (one half) or `.f16x2`/`.bf16x2` (both halves)
    /// arithmetic.
    Half {
        op: HOp,
        fmt: HFmt,
        x2: bool,
        ftz: bool,
        sat: bool,
        /// `.relu`: negative results become +0, NaN the canonical NaN.
        relu: bool,
        /// `min`/`max` `.NaN`: a NaN operand gives the canonical NaN.
        nan: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    /// `set`: a comparison written as all ones (integer destination) or
    /// 1.0 (`.f32` destination), else 0.
    Set {
        cmp: Cmp,
        ty: Ty,
        ftz: bool,
        /// The destination's type: `.u32`/`.s32` (all ones when true) or a
        /// float type (1.0 of that type).
        dty: Ty,
        d: u32,
        a: Src,
        b: Src,
        comb: Option<(BoolOp, Src)>,
    },
    /// `cvt.rn{.relu}` from f32 to `.f16`/`.bf16`, or to `.f16x2`/`.bf16x2`
    /// from two f32 (`a` into the upper half, `b` into the lower).
    CvtHalf {
        fmt: HFmt,
        relu: bool,
        d: u32,
        a: Src,
        b: Option<Src>,
    },
    /// `cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.f32 d, a, b` (`a` into the
    /// upper byte, `b` into the lower), `...{e4m3x2,e5m2x2}.f16x2 d, a`
    /// (the upper half into the upper byte), and, with `to_f16x2`,
    /// `cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2} d, a` (exact).
    CvtF8 {
        fmt: crate::float::F8,
        from_f16x2: bool,
        to_f16x2: bool,
        relu: bool,
        d: u32,
        a: Src,
        b: Option<Src>,
    },
    Testp {
        op: Testp,
        ty: Ty,
        d: u32,
        a: Src,
    },
    Setp {
        cmp: Cmp,
        ty: Ty,
        ftz: bool,
        d: u32,
        dn: Option<u32>,
        a: Src,
        b: Src,
        comb: Option<(BoolOp, Src)>,
    },
    /// `and/or/xor.pred`, `not.pred`.
    PredBin {
        op: BoolOp,
        d: u32,
        a: Src,
        b: Src,
    },
    Selp {
        bits: u32,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Slct {
        bits: u32,
        cty: Ty,
        ftz: bool,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    Cvt {
        kind: CvtKind,
        dty: Ty,
        sty: Ty,
        sat: bool,
        ftz: bool,
        d: u32,
        a: Src,
    },
    /// `cvta.space` (to generic) or `cvta.to.space` (from generic).
    Cvta {
        to: bool,
        space: Space,
        bits: u32,
        d: u32,
        a: Src,
    },
    /// Whether a generic address lies in a state space's window.
    Isspacep {
        space: Space,
        d: u32,
        a: Src,
    },
    Ld {
        space: Space,
        ty: Ty,
        ds: Regs4,
        n: u8,
        addr: Addr,
    },
    St {
        space: Space,
        ty: Ty,
        srcs: Srcs4,
        n: u8,
        addr: Addr,
    },
    Atom {
        space: Space,
        op: AtomOp,
        ty: Ty,
        d: Option<u32>,
        addr: Addr,
        b: Src,
        c: Src,
    },
    Bra {
        target: u32,
    },
    /// `ret` (returns from a call, or exits an entry) and `exit`.
    Ret,
    Exit,
    /// `bar.sync`/`barrier.sync` (wait) or `bar.arrive` (no wait).
    Bar {
        wait: bool,
        id: Src,
        count: Option<Src>,
        /// `bar.red`: the reduction, its destination and predicate.
        red: Option<(BarRed, u32, Src)>,
    },
    /// `bar.warp.sync`.
    WarpSync {
        mask: Src,
    },
    Shfl {
        mode: ShflMode,
        d: u32,
        dp: Option<u32>,
        a: Src,
        b: Src,
        c: Src,
        mask: Src,
    },
    Vote {
        mode: VoteMode,
        d: u32,
        a: Src,
        mask: Src,
    },
    Activemask {
        d: u32,
    },
    /// `match.any.sync.b32|b64 d, a, mask` (`all`: false) and
    /// `match.all.sync.b32|b64 d{|p}, a, mask` (`all`: true).
    Match {
        all: bool,
        bits: u32,
        d: u32,
        dp: Option<u32>,
        a: Src,
        mask: Src,
    },
    /// `redux.sync.op.type d, a, mask`.
    Redux {
        op: AtomOp,
        ty: Ty,
        d: u32,
        a: Src,
        mask: Src,
    },
    /// `call vprintf, (fmt, args)`: formats into the launch's output. The
    /// operands are param-space addresses of the caller's variables.
    Printf {
        fmt: u32,
        args: u32,
        ret: Option<u32>,
    },
    /// `call __assertfail, (message, file, line, function, char_size)`:
    /// prints the failed assertion and stops the launch.
    AssertFail {
        args: [u32; 5],
    },
    /// `wmma.load`, `wmma.store`, `wmma.mma` (`exec::wmma`).
    Wmma(Box<Wmma>),
    /// `mbarrier.*` and `cp.async.mbarrier.arrive`: an operation on a
    /// 64-bit barrier object in shared memory (`Launch::mbarrier`).
    Mbarrier(Box<Mbar>),
    /// `call (ret), malloc, (size)`: a block of the context's device heap
    /// ([`crate::Memory::malloc`]). Param-space addresses, as for `Printf`.
    Malloc {
        size: u32,
        ret: u32,
    },
    /// `call free, (ptr)`: gives a block back ([`crate::Memory::free`]).
    Free {
        ptr: u32,
    },
    /// `call cudaGraphSetConditional, (handle, value)`: sets a CUDA
    /// graph's condition. A conditional handle here is the global address
    /// of the condition's 32-bit slot (the guest library makes one per
    /// handle), so this stores `value` there as `st.global.u32` would.
    /// Param-space addresses, as for `Printf`.
    SetConditional {
        handle: u32,
        value: u32,
    },
    /// A call of the CUDA device runtime (dynamic parallelism: launches,
    /// streams, events, memory and errors from device code, as nvcc
    /// emits them for `-rdc=true`), executed by `exec/devrt.rs`.
    /// Param-space addresses of the arguments and result, as for `Printf`.
    DevRt(Box<DevRtCall>),
    /// An indirect call after inlining: each thread jumps to the case
    /// whose function address ([`crate::func_addr`]) its register `target`
    /// holds; an address no case names fails the launch with
    /// [`crate::Error::BadCall`].
    Dispatch {
        target: u32,
        cases: Box<[(u64, u32)]>,
    },
    /// `call [(rets),] %r, [(args),] prototype`: a call through a function
    /// pointer; replaced by a [`Op::Dispatch`] over the module's functions
    /// whose parameters have the prototype's sizes when the module is
    /// loaded.
    CallIndirect(Box<CallIndirect>),
    /// `call` of a `.func`; replaced by the callee's body when the module
    /// is loaded.
    Call {
        func: u32,
        /// Param-space addresses of the caller's return and argument
        /// variables.
        rets: Vec<u32>,
        args: Vec<u32>,
    },
    /// A `call` of a function from inside its own body (directly or
    /// through the functions it calls): kept as a call when the module is
    /// loaded, then made a [`Op::CallFrame`] in each kernel that reaches
    /// it.
    CallRec {
        func: u32,
        rets: Vec<u32>,
        args: Vec<u32>,
    },
    /// A real call of a recursive function whose body is placed after the
    /// kernel's: each thread saves the callee's registers and its local
    /// and param memory on its own call stack, copies the arguments and
    /// jumps to the body; [`Op::RetFrame`] there undoes it.
    CallFrame(Box<CallFrame>),
    /// The return of a function entered by [`Op::CallFrame`].
    RetFrame,
    /// `cp.async.shared.global`: copies `size` bytes from global to shared
    /// memory, the bytes past `src_size` zero; done at once in a
    /// sequential model (the commit and wait instructions are no-ops).
    CpAsync {
        dst: Addr,
        src: Addr,
        size: u32,
        src_size: Option<Src>,
    },
    /// `cp.async.bulk`: `size` bytes (a multiple of 16) between global and
    /// shared memory, done at once; a copy into shared memory completes
    /// that many bytes of the transaction count of the `mbarrier` at
    /// `mbar` (`.mbarrier::complete_tx::bytes`), one out of it completes
    /// in its bulk group (`.bulk_group`, whose commit and wait are
    /// no-ops).
    BulkCopy(Box<BulkCopy>),
    /// `tex`, `tld4`: boxed, as it is larger than the other instructions.
    Tex(Box<TexOp>),
    /// `suld.b`, `sust.b`.
    Surf(Box<SurfOp>),
    /// `txq` (of a texture) or `suq` (of a surface).
    Query {
        surface: bool,
        query: Query,
        d: u32,
        handle: Src,
    },
    /// Copies `len` bytes within the param space (call arguments and
    /// return values of inlined calls).
    ParamCopy {
        from: u32,
        to: u32,
        len: u32,
    },
    /// Memory fences, `membar`, `nanosleep`, prefetches: nothing in a
    /// sequential model.
    Nop,
    /// A fence wider than the block (`membar.gl`, `fence.*.gpu`/`.sys`/
    /// `.cluster`): nothing to execute either, but its kernel's blocks may
    /// communicate, so they run one after another.
    Fence,
    Trap,
    /// An instruction the interpreter does not implement; executing it
    /// fails the launch with its name. Shared: inlining copies it.
    Unsupported(Arc<str>),
}

/// The element type of a `wmma` fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WTy {
    F16,
    Bf16,
    Tf32,
    F32,
    F64,
    S8,
    U8,
    S32,
}

impl WTy {
    pub fn parse(s: &str) -> Option<WTy> {
        Some(match s {
            "f16" => WTy::F16,
            "bf16" => WTy::Bf16,
            "tf32" => WTy::Tf32,
            "f32" => WTy::F32,
            "f64" => WTy::F64,
            "s8" => WTy::S8,
            "u8" => WTy::U8,
            "s32" => WTy::S32,
            _ => return None,
        })
    }

    /// Bits of one element.
    pub fn bits(self) -> u32 {
        match self {
            WTy::F16 | WTy::Bf16 => 16,
            WTy::S8 | WTy::U8 => 8,
            WTy::F64 => 64,
            WTy::Tf32 | WTy::F32 | WTy::S32 => 32,
        }
    }

    /// Elements one register holds (packed from its low bits).
    pub fn per_reg(self) -> usize {
        (32 / self.bits()).max(1) as usize
    }
}

/// A `wmma` instruction: a warp-wide operation on matrix fragments held
/// in registers, `shape` = (m, n, k).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Wmma {
    pub shape: [u32; 3],
    pub op: WmmaOp,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum WmmaOp {
    /// `wmma.load.{a,b,c}`: fragment `which` (0 = a, m×k; 1 = b, k×n;
    /// 2 = c, m×n) from memory, row- or column-major with `stride`
    /// elements between rows (columns).
    Load {
        which: u8,
        col: bool,
        ty: WTy,
        space: Space,
        d: Vec<u32>,
        addr: Addr,
        stride: Option<Src>,
    },
    /// `wmma.store.d`.
    Store {
        col: bool,
        ty: WTy,
        space: Space,
        v: Vec<u32>,
        addr: Addr,
        stride: Option<Src>,
    },
    /// `wmma.mma`, or `mma.sync` (`fixed`: the fragments are laid out over
    /// the lanes as the PTX ISA fixes for `mma`): d = a × b + c.
    Mma {
        fixed: bool,
        ab: WTy,
        cty: WTy,
        dty: WTy,
        satfinite: bool,
        d: Vec<u32>,
        a: Vec<u32>,
        b: Vec<u32>,
        c: Vec<u32>,
    },
    /// `ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.b16`: `d.len()` 8×8
    /// matrices of 16-bit elements, row `r` of matrix `j` at the address
    /// lane `8j + r` gives.
    LdMatrix {
        trans: bool,
        space: Space,
        d: Vec<u32>,
        addr: Addr,
    },
    /// `stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.b16`: the inverse.
    StMatrix {
        trans: bool,
        space: Space,
        v: Vec<u32>,
        addr: Addr,
    },
}

/// A `cp.async.bulk` copy's operands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BulkCopy {
    pub dst: Addr,
    pub dst_space: Space,
    pub src: Addr,
    pub src_space: Space,
    pub size: Src,
    pub mbar: Option<Addr>,
}

/// What an `mbarrier` instruction does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MbarKind {
    /// `init [a], count`.
    Init,
    /// `arrive{_drop} state, [a]{, count}`; with `expect_tx`,
    /// `arrive.expect_tx state, [a], tx`: the transaction count is raised
    /// by `tx` before one arrival.
    Arrive {
        drop: bool,
        expect_tx: bool,
    },
    /// `expect_tx [a], tx` and `complete_tx [a], tx`: bytes of
    /// asynchronous copies the current phase waits for, raised and
    /// lowered.
    ExpectTx,
    CompleteTx,
    /// `test_wait`/`try_wait{.parity} p, [a], state|parity`.
    Wait {
        parity: bool,
    },
    /// `pending_count count, state`.
    PendingCount,
    /// `inval [a]`.
    Inval,
    /// `cp.async.mbarrier.arrive{.noinc} [a]`.
    AsyncArrive {
        noinc: bool,
    },
}

/// An `mbarrier` instruction's operands.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mbar {
    pub kind: MbarKind,
    pub space: Space,
    pub d: Option<u32>,
    pub addr: Addr,
    pub a: Option<Src>,
}

/// A call through a function pointer, before inlining.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallIndirect {
    /// The register holding the callee's address.
    pub target: u32,
    /// Param-space addresses of the caller's return and argument variables.
    pub rets: Vec<u32>,
    pub args: Vec<u32>,
    /// Sizes the prototype gives the return values and parameters.
    pub ret_sizes: Vec<u32>,
    pub arg_sizes: Vec<u32>,
}

/// A guard predicate `@%p` or `@!%p`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Guard {
    pub reg: u32,
    pub neg: bool,
}

/// An instruction with its guard and source line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Inst {
    pub guard: Option<Guard>,
    pub op: Op,
    pub line: u32,
}

/// A parameter of an entry or function: its offset in the parameter
/// buffer and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Param {
    pub offset: u32,
    pub size: u32,
}

/// A call of a recursive function, resolved in its kernel.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CallFrame {
    /// The first instruction of the callee's body.
    pub target: u32,
    /// The callee's registers: `regs.0 .. regs.0 + regs.1`.
    pub regs: (u32, u32),
    /// What an activation of the callee uses ([`Func::frame_local`],
    /// [`Func::frame_scratch`]).
    pub local: Vec<(u32, u32)>,
    pub scratch: Vec<(u32, u32)>,
    /// Param-scratch copies (from, to, bytes): the caller's arguments into
    /// the callee's parameters at the call, the callee's return values
    /// into the caller's variables at the return.
    pub args: Vec<(u32, u32, u32)>,
    pub rets: Vec<(u32, u32, u32)>,
}

/// A parsed `.entry` or `.func`.
#[derive(Debug, Clone)]
pub(crate) struct Func {
    pub name: String,
    pub is_entry: bool,
    /// Parameters (and, for a `.func`, return values) in the param space.
    pub params: Vec<Param>,
    pub rets: Vec<Param>,
    /// Size of the kernel parameter buffer the layout needs.
    pub param_bytes: u32,
    pub insts: Vec<Inst>,
    pub nregs: u32,
    /// Bytes of `.shared` variables (module scope and this function's).
    pub static_shared: u32,
    /// `.maxntid`: the most threads a block of it may have.
    pub max_threads: Option<u32>,
    /// `.reqntid`: the block shape its launches must have.
    pub reqntid: Option<[u32; 3]>,
    /// Where `extern .shared` arrays start (aligned end of static shared).
    pub dyn_shared_base: u32,
    /// It (or a function inlined into it) reads `%reserved_smem_offset_*`:
    /// its blocks get reserved shared memory (`crate::exec::RESERVED_SMEM`)
    /// after their own. Without, the shared window ends with the kernel's
    /// own memory, so an access past it is out of bounds.
    pub reserved_smem: bool,
    /// It (or a function inlined into it) reads `%envreg1`/`%envreg2`,
    /// the address of the launch's grid workspace: it synchronizes the
    /// whole grid (cooperative groups' `grid.sync()`).
    pub grid_workspace: bool,
    /// End of the `.local` variables of this function and its inlined
    /// callees: the local memory a thread needs. Every function's locals
    /// have their own module-wide offsets, so inlined code needs no
    /// relocation.
    pub local_bytes: u32,
    /// The local memory (offsets) and param scratch (addresses) that an
    /// activation of this function uses: its own variables and those of
    /// the functions inlined into it. A recursive call saves and restores
    /// them.
    pub frame_local: Vec<(u32, u32)>,
    pub frame_scratch: Vec<(u32, u32)>,
    /// End of the param scratch (`.func` parameters and `.param` variables
    /// of bodies, at module-wide offsets from
    /// [`PARAM_SCRATCH_BASE`]) this function and its callees
    /// use.
    pub scratch_end: u32,
    /// The instructions' [`Fast`] forms, made at the first launch.
    pub fast: std::sync::OnceLock<Box<[Fast]>>,
}

/// The instructions that dominate kernels' time, pre-decoded for a full
/// warp on the AVX2 engine (`exec::Launch::step`), which runs them without
/// the general dispatch; they call the same lane loops the general path
/// calls. `None`: the general path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Fast {
    #[default]
    None,
    /// `fma.rn.f32 d, a, b, c` (no `.ftz`, no `.sat`).
    FmaRnF32 { d: u32, a: Src, b: Src, c: Src },
    /// `ld.shared` of one element into `d` from `addr`.
    LdShared { ty: Ty, d: u32, addr: Addr },
    /// `st.shared` of one element from `s` at `addr`.
    StShared { ty: Ty, s: Src, addr: Addr },
    /// An integer operation of [`Fast::IBIN_OPS`] on a type of
    /// [`Fast::INT_TYPES`].
    IBin {
        op: IBin,
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
    },
    /// `mad.lo` (no `.sat`) on a type of [`Fast::INT_TYPES`].
    MadLo {
        ty: Ty,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
    /// `setp` without a predicate combination, a comparison of
    /// [`Fast::SETP_CMPS`] on a type of [`Fast::SETP_TYPES`].
    Setp {
        cmp: Cmp,
        ty: Ty,
        ftz: bool,
        d: u32,
        dn: Option<u32>,
        a: Src,
        b: Src,
    },
    /// `mov` of a register, immediate or special register.
    Mov { d: u32, a: Src, bits: u32 },
    /// A float operation of [`Fast::FBIN_OPS`] on `f32` or `f64`, rounding
    /// to nearest (with or without `.ftz`, no `.sat`).
    FBin {
        op: FBin,
        ty: Ty,
        m: FMode,
        d: u32,
        a: Src,
        b: Src,
    },
    /// An f32 operation of [`Fast::F32_BIN_OPS`] rounding to nearest
    /// (with or without `.ftz`, no `.sat`).
    F32Bin {
        op: FBin,
        ftz: bool,
        d: u32,
        a: Src,
        b: Src,
    },
    /// A unary f32 operation of [`Fast::FUN_OPS`] (with or without
    /// `.ftz`, no `.sat`; `rcp` and `sqrt` rounding to nearest).
    FUn32 { op: FUn, ftz: bool, d: u32, a: Src },
    /// `selp`.
    Selp {
        bits: u32,
        d: u32,
        a: Src,
        b: Src,
        c: Src,
    },
}

impl Fast {
    /// The integer operations with a fast form: those whose lane loops
    /// the engine specializes.
    pub(crate) const IBIN_OPS: [IBin; 10] = [
        IBin::Add,
        IBin::Sub,
        IBin::MulLo,
        IBin::Shl,
        IBin::Shr,
        IBin::And,
        IBin::Or,
        IBin::Xor,
        IBin::Min,
        IBin::Max,
    ];
    /// The integer types with a fast form.
    pub(crate) const INT_TYPES: [Ty; 6] = [Ty::U32, Ty::S32, Ty::B32, Ty::U64, Ty::S64, Ty::B64];
    /// The comparisons with a fast form.
    pub(crate) const SETP_CMPS: [Cmp; 6] = [Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge];
    /// The float operations with a fast form.
    pub(crate) const FBIN_OPS: [FBin; 6] = [
        FBin::Add,
        FBin::Sub,
        FBin::Mul,
        FBin::Div,
        FBin::Min,
        FBin::Max,
    ];
    /// The f32 operations with a fast form of their own (computed in the
    /// register file); the others of [`Fast::FBIN_OPS`] are [`Fast::FBin`].
    pub(crate) const F32_BIN_OPS: [FBin; 4] = [FBin::Add, FBin::Sub, FBin::Mul, FBin::Div];
    /// The unary f32 operations with a fast form.
    pub(crate) const FUN_OPS: [FUn; 9] = [
        FUn::Abs,
        FUn::Neg,
        FUn::Rcp,
        FUn::RcpApprox,
        FUn::Sqrt,
        FUn::SqrtApprox,
        FUn::Rsqrt,
        FUn::Ex2,
        FUn::Lg2,
    ];
    /// The compared types with a fast form.
    pub(crate) const SETP_TYPES: [Ty; 5] = [Ty::S32, Ty::U32, Ty::S64, Ty::U64, Ty::F32];

    /// The fast form of `op`, if it has one.
    pub(crate) fn of(op: &Op) -> Fast {
        match *op {
            Op::Fma {
                ty: Ty::F32,
                m:
                    FMode {
                        rnd: Rnd::Rn,
                        ftz: false,
                        sat: false,
                    },
                d,
                a,
                b,
                c,
            } => Fast::FmaRnF32 { d, a, b, c },
            Op::Ld {
                space: Space::Shared,
                ty,
                ds,
                n: 1,
                addr,
            } => Fast::LdShared { ty, d: ds[0], addr },
            Op::St {
                space: Space::Shared,
                ty,
                srcs,
                n: 1,
                addr,
            } => Fast::StShared {
                ty,
                s: srcs[0],
                addr,
            },
            Op::IBin { op, ty, d, a, b }
                if Self::IBIN_OPS.contains(&op) && Self::INT_TYPES.contains(&ty) =>
            {
                Fast::IBin { op, ty, d, a, b }
            }
            Op::Mad {
                mul: IBin::MulLo,
                wide: false,
                sat: false,
                ty,
                d,
                a,
                b,
                c,
            } if Self::INT_TYPES.contains(&ty) => Fast::MadLo { ty, d, a, b, c },
            Op::Setp {
                cmp,
                ty,
                ftz,
                d,
                dn,
                a,
                b,
                comb: None,
            } if Self::SETP_CMPS.contains(&cmp) && Self::SETP_TYPES.contains(&ty) => Fast::Setp {
                cmp,
                ty,
                ftz,
                d,
                dn,
                a,
                b,
            },
            Op::Mov { d, a, bits } => Fast::Mov { d, a, bits },
            Op::FBin {
                op,
                ty: Ty::F32,
                m,
                d,
                a,
                b,
            } if Self::F32_BIN_OPS.contains(&op) && m.rnd == Rnd::Rn && !m.sat => Fast::F32Bin {
                op,
                ftz: m.ftz,
                d,
                a,
                b,
            },
            Op::FBin { op, ty, m, d, a, b }
                if Self::FBIN_OPS.contains(&op)
                    && matches!(ty, Ty::F32 | Ty::F64)
                    && m.rnd == Rnd::Rn
                    && !m.sat =>
            {
                Fast::FBin { op, ty, m, d, a, b }
            }
            Op::FUn {
                op,
                ty: Ty::F32,
                m,
                d,
                a,
            } if Self::FUN_OPS.contains(&op) && !m.sat && m.rnd == Rnd::Rn => Fast::FUn32 {
                op,
                ftz: m.ftz,
                d,
                a,
            },
            Op::Selp { bits, d, a, b, c } => Fast::Selp { bits, d, a, b, c },
            _ => Fast::None,
        }
    }
}

impl Func {
    /// The [`Fast`] form of every instruction.
    pub(crate) fn fast(&self) -> &[Fast] {
        self.fast
            .get_or_init(|| self.insts.iter().map(|i| Fast::of(&i.op)).collect())
    }
}

/// Calls `on` on the register `x` names, if it names one.
fn src_reg(x: &mut Src, on: &mut dyn FnMut(&mut u32)) {
    if let Src::Reg(r) | Src::NotPred(r) = x {
        on(r);
    }
}

impl Op {
    /// Renumbers every register by `+k` (for inlining).
    pub(crate) fn shift_regs(&mut self, k: u32) {
        self.each_reg(&mut |r| *r += k);
    }

    /// Calls `on` on every register the instruction names, sources and
    /// destinations (the guard is the [`Inst`]'s).
    pub(crate) fn each_reg(&mut self, on: &mut dyn FnMut(&mut u32)) {
        match self {
            Op::Mov { d, a, .. } => {
                on(d);
                src_reg(a, on);
            }
            Op::Pack { d, parts, .. } => {
                on(d);
                parts.iter_mut().for_each(|x| src_reg(x, on));
            }
            Op::Unpack { ds, a, .. } => {
                ds.iter_mut().for_each(&mut *on);
                src_reg(a, on);
            }
            Op::IBin { d, a, b, .. }
            | Op::MulWide { d, a, b, .. }
            | Op::FBin { d, a, b, .. }
            | Op::PredBin { d, a, b, .. } => {
                on(d);
                src_reg(a, on);
                src_reg(b, on);
            }
            Op::Mad { d, a, b, c, .. }
            | Op::Half { d, a, b, c, .. }
            | Op::Sad { d, a, b, c, .. }
            | Op::Bfe { d, a, b, c, .. }
            | Op::Prmt { d, a, b, c, .. }
            | Op::Video { d, a, b, c, .. }
            | Op::Shf { d, a, b, c, .. }
            | Op::Fma { d, a, b, c, .. }
            | Op::Selp { d, a, b, c, .. }
            | Op::Slct { d, a, b, c, .. } => {
                on(d);
                src_reg(a, on);
                src_reg(b, on);
                src_reg(c, on);
            }
            Op::Carry { d, a, b, mul, .. } => {
                on(d);
                src_reg(a, on);
                src_reg(b, on);
                if let Some((m, _)) = mul {
                    src_reg(m, on);
                }
            }
            Op::IUn { d, a, .. }
            | Op::FUn { d, a, .. }
            | Op::Testp { d, a, .. }
            | Op::Cvt { d, a, .. }
            | Op::Cvta { d, a, .. }
            | Op::Isspacep { d, a, .. } => {
                on(d);
                src_reg(a, on);
            }
            Op::Bfi {
                d, f, b, c, len, ..
            } => {
                on(d);
                src_reg(f, on);
                src_reg(b, on);
                src_reg(c, on);
                src_reg(len, on);
            }
            Op::Lop3 { d, a, b, c, lut } => {
                on(d);
                src_reg(a, on);
                src_reg(b, on);
                src_reg(c, on);
                src_reg(lut, on);
            }
            Op::Set { d, a, b, comb, .. } => {
                on(d);
                src_reg(a, on);
                src_reg(b, on);
                if let Some((_, c)) = comb {
                    src_reg(c, on);
                }
            }
            Op::CvtHalf { d, a, b, .. } | Op::CvtF8 { d, a, b, .. } => {
                on(d);
                src_reg(a, on);
                if let Some(b) = b {
                    src_reg(b, on);
                }
            }
            Op::Setp {
                d, dn, a, b, comb, ..
            } => {
                on(d);
                if let Some(q) = dn {
                    on(q);
                }
                src_reg(a, on);
                src_reg(b, on);
                if let Some((_, c)) = comb {
                    src_reg(c, on);
                }
            }
            Op::Ld { ds, addr, .. } => {
                ds.iter_mut().for_each(&mut *on);
                if let Some(b) = &mut addr.base {
                    on(b);
                }
            }
            Op::St { srcs, addr, .. } => {
                srcs.iter_mut().for_each(|x| src_reg(x, on));
                if let Some(b) = &mut addr.base {
                    on(b);
                }
            }
            Op::Atom { d, addr, b, c, .. } => {
                if let Some(d) = d {
                    on(d);
                }
                if let Some(r) = &mut addr.base {
                    on(r);
                }
                src_reg(b, on);
                src_reg(c, on);
            }
            Op::Bar { id, count, red, .. } => {
                src_reg(id, on);
                if let Some(c) = count {
                    src_reg(c, on);
                }
                if let Some((_, d, p)) = red {
                    on(d);
                    src_reg(p, on);
                }
            }
            Op::WarpSync { mask } => src_reg(mask, on),
            Op::Shfl {
                d,
                dp,
                a,
                b,
                c,
                mask,
                ..
            } => {
                on(d);
                if let Some(p) = dp {
                    on(p);
                }
                src_reg(a, on);
                src_reg(b, on);
                src_reg(c, on);
                src_reg(mask, on);
            }
            Op::Vote { d, a, mask, .. } | Op::Redux { d, a, mask, .. } => {
                on(d);
                src_reg(a, on);
                src_reg(mask, on);
            }
            Op::Match { d, dp, a, mask, .. } => {
                on(d);
                if let Some(p) = dp {
                    on(p);
                }
                src_reg(a, on);
                src_reg(mask, on);
            }
            Op::Activemask { d } => on(d),
            Op::Tex(t) => {
                t.ds.iter_mut().for_each(&mut *on);
                if let Some(p) = &mut t.dp {
                    on(p);
                }
                src_reg(&mut t.handle, on);
                t.coords.iter_mut().for_each(|x| src_reg(x, on));
            }
            Op::Surf(x) => {
                match &mut x.data {
                    SurfData::Load(ds) => ds.iter_mut().for_each(&mut *on),
                    SurfData::Store(vs) => vs.iter_mut().for_each(|x| src_reg(x, on)),
                }
                src_reg(&mut x.handle, on);
                x.coords.iter_mut().for_each(|x| src_reg(x, on));
            }
            Op::Query { d, handle, .. } => {
                on(d);
                src_reg(handle, on);
            }
            Op::CpAsync {
                dst, src, src_size, ..
            } => {
                for a in [dst, src] {
                    if let Some(b) = &mut a.base {
                        on(b);
                    }
                }
                if let Some(x) = src_size {
                    src_reg(x, on);
                }
            }
            Op::Dispatch { target, .. } => on(target),
            Op::BulkCopy(x) => {
                for a in [&mut x.dst, &mut x.src].into_iter().chain(x.mbar.as_mut()) {
                    if let Some(b) = &mut a.base {
                        on(b);
                    }
                }
                src_reg(&mut x.size, on);
            }
            Op::Wmma(x) => {
                let regs: &mut [Vec<u32>] = match &mut x.op {
                    WmmaOp::Load { d, addr, .. } => {
                        if let Some(b) = &mut addr.base {
                            on(b);
                        }
                        std::slice::from_mut(d)
                    }
                    WmmaOp::Store { v, addr, .. } => {
                        if let Some(b) = &mut addr.base {
                            on(b);
                        }
                        std::slice::from_mut(v)
                    }
                    WmmaOp::Mma { d, a, b, c, .. } => {
                        for v in [a, b, c] {
                            v.iter_mut().for_each(&mut *on);
                        }
                        std::slice::from_mut(d)
                    }
                    WmmaOp::LdMatrix { d, addr, .. } => {
                        if let Some(b) = &mut addr.base {
                            on(b);
                        }
                        std::slice::from_mut(d)
                    }
                    WmmaOp::StMatrix { v, addr, .. } => {
                        if let Some(b) = &mut addr.base {
                            on(b);
                        }
                        std::slice::from_mut(v)
                    }
                };
                regs.iter_mut().flatten().for_each(&mut *on);
                if let WmmaOp::Load {
                    stride: Some(st), ..
                }
                | WmmaOp::Store {
                    stride: Some(st), ..
                } = &mut x.op
                {
                    src_reg(st, on);
                }
            }
            Op::Mbarrier(x) => {
                if let Some(d) = &mut x.d {
                    on(d);
                }
                if let Some(b) = &mut x.addr.base {
                    on(b);
                }
                if let Some(a) = &mut x.a {
                    src_reg(a, on);
                }
            }
            Op::CallIndirect(c) => on(&mut c.target),
            // The saved registers are the callee's, placed when the call is
            // made a frame: nothing to move.
            Op::Bra { .. }
            | Op::Ret
            | Op::Exit
            | Op::Call { .. }
            | Op::CallRec { .. }
            | Op::CallFrame(_)
            | Op::RetFrame
            | Op::Malloc { .. }
            | Op::Free { .. }
            | Op::SetConditional { .. }
            | Op::DevRt(_)
            | Op::Printf { .. }
            | Op::AssertFail { .. }
            | Op::ParamCopy { .. }
            | Op::Nop
            | Op::Fence
            | Op::Trap
            | Op::Unsupported(_) => {}
        }
    }
}

/// A function of the CUDA device runtime that SimGpu provides (see
/// [`Op::DevRt`]): the `cudaXxx` API of device code, which nvcc names
/// `__cudaCDP2Xxx` (CUDA 12 and later) or `cudaXxx` (earlier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevRt {
    /// `void *GetParameterBuffer(size_t alignment, size_t size)`.
    GetParameterBuffer,
    /// `void *GetParameterBufferV2(void *func, dim3 grid, dim3 block,
    /// unsigned shared)`.
    GetParameterBufferV2,
    /// `cudaError_t LaunchDevice(void *func, void *buffer, dim3 grid,
    /// dim3 block, unsigned shared, cudaStream_t stream)`.
    LaunchDevice,
    /// `cudaError_t LaunchDeviceV2(void *buffer, cudaStream_t stream)`.
    LaunchDeviceV2,
    /// `cudaError_t StreamCreateWithFlags(cudaStream_t *s, unsigned flags)`.
    StreamCreateWithFlags,
    /// `cudaError_t StreamDestroy(cudaStream_t s)`.
    StreamDestroy,
    /// `cudaError_t EventCreateWithFlags(cudaEvent_t *e, unsigned flags)`.
    EventCreateWithFlags,
    /// `cudaError_t EventRecord(cudaEvent_t e, cudaStream_t s)`.
    EventRecord,
    /// `cudaError_t EventRecordWithFlags(cudaEvent_t e, cudaStream_t s,
    /// unsigned flags)`.
    EventRecordWithFlags,
    /// `cudaError_t EventDestroy(cudaEvent_t e)`.
    EventDestroy,
    /// `cudaError_t StreamWaitEvent(cudaStream_t s, cudaEvent_t e,
    /// unsigned flags)`.
    StreamWaitEvent,
    /// `cudaError_t GetLastError(void)`.
    GetLastError,
    /// `cudaError_t PeekAtLastError(void)`.
    PeekAtLastError,
    /// `cudaError_t GetDevice(int *device)`.
    GetDevice,
    /// `cudaError_t GetDeviceCount(int *count)`.
    GetDeviceCount,
    /// `cudaError_t Malloc(void **p, size_t size)`.
    Malloc,
    /// `cudaError_t Free(void *p)`.
    Free,
    /// `cudaError_t MemcpyAsync(void *dst, const void *src, size_t n,
    /// cudaMemcpyKind kind, cudaStream_t s)`.
    MemcpyAsync,
    /// `cudaError_t MemsetAsync(void *dst, int value, size_t n,
    /// cudaStream_t s)`.
    MemsetAsync,
}

impl DevRt {
    /// The function a device-runtime name calls, with its number of
    /// arguments and whether it returns a value; `None` for any other name.
    pub fn from_name(name: &str) -> Option<(DevRt, usize, bool)> {
        let base = name
            .strip_prefix("__cudaCDP2")
            .or_else(|| name.strip_prefix("cuda"))?;
        Some(match base {
            "GetParameterBuffer" => (DevRt::GetParameterBuffer, 2, true),
            "GetParameterBufferV2" => (DevRt::GetParameterBufferV2, 4, true),
            "LaunchDevice" => (DevRt::LaunchDevice, 6, true),
            "LaunchDeviceV2" => (DevRt::LaunchDeviceV2, 2, true),
            "StreamCreateWithFlags" => (DevRt::StreamCreateWithFlags, 2, true),
            "StreamDestroy" => (DevRt::StreamDestroy, 1, true),
            "EventCreateWithFlags" => (DevRt::EventCreateWithFlags, 2, true),
            "EventRecord" => (DevRt::EventRecord, 2, true),
            "EventRecordWithFlags" => (DevRt::EventRecordWithFlags, 3, true),
            "EventDestroy" => (DevRt::EventDestroy, 1, true),
            "StreamWaitEvent" => (DevRt::StreamWaitEvent, 3, true),
            "GetLastError" => (DevRt::GetLastError, 0, true),
            "PeekAtLastError" => (DevRt::PeekAtLastError, 0, true),
            "GetDevice" => (DevRt::GetDevice, 1, true),
            "GetDeviceCount" => (DevRt::GetDeviceCount, 1, true),
            "Malloc" => (DevRt::Malloc, 2, true),
            "Free" => (DevRt::Free, 1, true),
            "MemcpyAsync" => (DevRt::MemcpyAsync, 5, true),
            "MemsetAsync" => (DevRt::MemsetAsync, 4, true),
            _ => return None,
        })
    }

    /// Whether it allocates from the context's device heap (parameter
    /// buffers live there until their launch).
    pub fn uses_heap(self) -> bool {
        matches!(
            self,
            DevRt::GetParameterBuffer
                | DevRt::GetParameterBufferV2
                | DevRt::LaunchDevice
                | DevRt::LaunchDeviceV2
                | DevRt::Malloc
                | DevRt::Free
        )
    }

    /// Whether it launches work (a kernel, a copy or a fill).
    pub fn launches(self) -> bool {
        matches!(
            self,
            DevRt::LaunchDevice | DevRt::LaunchDeviceV2 | DevRt::MemcpyAsync | DevRt::MemsetAsync
        )
    }
}

/// A call of the device runtime: what, the param-space addresses of its
/// arguments, and where its result goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevRtCall {
    pub call: DevRt,
    pub args: Box<[u32]>,
    pub ret: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::DevRt;
    use fairgpu_protocol::cuda::{sim_device_runtime, SIM_DEVICE_RUNTIME};

    /// The guest's linker leaves these calls to SimGpu by the protocol's
    /// list: it must be exactly what the interpreter executes.
    #[test]
    fn the_protocol_s_device_runtime_list_is_what_the_interpreter_runs() {
        for base in SIM_DEVICE_RUNTIME {
            for name in [format!("cuda{base}"), format!("__cudaCDP2{base}")] {
                assert!(DevRt::from_name(&name).is_some(), "{name}");
                assert!(sim_device_runtime(&name), "{name}");
            }
        }
        for name in [
            "cudaGraphLaunch",
            "cudaDeviceSynchronize",
            "Malloc",
            "vprintf",
        ] {
            assert_eq!(
                DevRt::from_name(name).is_some(),
                sim_device_runtime(name),
                "{name}"
            );
            assert!(!sim_device_runtime(name), "{name}");
        }
    }
}
