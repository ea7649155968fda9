//! Executes one kernel launch over its grid.
//!
//! Blocks run one after another. Within a block, warps of 32 threads take
//! turns (each runs until it blocks or for [`QUANTUM`] instructions). A warp
//! keeps one PC per thread and executes, at each step, the group of active
//! threads at the lowest PC together (the lowest-PC reconvergence heuristic:
//! in the structured code nvcc emits, threads that went ahead wait at the
//! join point until the others arrive). A warp that stays diverged for
//! [`PATIENCE`] whole turns in a row runs its highest group first on every
//! other turn, so that no group starves behind threads spinning at lower
//! PCs.
//!
//! Threads wait in three ways: at a block barrier (`bar.sync`), which
//! completes when every thread of the block that has not exited (or the
//! barrier's thread count) has arrived; at a warp-synchronous instruction
//! (`shfl.sync`, `vote.sync`, `bar.warp.sync`, `redux.sync`), which runs when
//! every non-exited thread of its member mask is there; or not at all
//! (exited). A block in which nothing can run and no barrier can complete
//! fails with [`Error::Deadlock`] (or [`Error::Unsupported`] when the cause is
//! a warp-synchronous instruction whose member threads never meet).

/// Defines `$name`, which runs `$body` either in `$base`, compiled as
/// built, or in `$wide`, compiled for AVX2, FMA, BMI and POPCNT, when the
/// launch may use them (`Launch::wide`). `$name` is only that choice and
/// is inlined into its callers; `$base` and `$wide` stay out of line (their
/// operand arrays would swell the callers' stack frames). `$body` must be
/// `#[inline(always)]`, so that each copy holds its own code compiled for
/// its features.
// Two arms, one per receiver: a receiver passed through a macro
// variable would not be the `self` of the bodies (hygiene).
macro_rules! wide_twin {
    ($(#[$m:meta])* $vis:vis fn $name:ident / $wide:ident / $base:ident / $body:ident
     (&self $(, $a:ident: $t:ty)* $(,)?) $(-> $r:ty)?;) => {
        $(#[$m])*
        #[inline(always)]
        $vis fn $name(&self $(, $a: $t)*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            if self.wide {
                // SAFETY: `wide` is set only on a CPU with the features (`Launch::new`).
                return unsafe { self.$wide($($a),*) };
            }
            self.$base($($a),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
        #[inline(never)]
        $(#[$m])*
        unsafe fn $wide(&self $(, $a: $t)*) $(-> $r)? {
            self.$body($($a),*)
        }

        #[inline(never)]
        $(#[$m])*
        fn $base(&self $(, $a: $t)*) $(-> $r)? {
            self.$body($($a),*)
        }
    };
    ($(#[$m:meta])* $vis:vis fn $name:ident / $wide:ident / $base:ident / $body:ident
     (&mut self $(, $a:ident: $t:ty)* $(,)?) $(-> $r:ty)?;) => {
        $(#[$m])*
        #[inline(always)]
        $vis fn $name(&mut self $(, $a: $t)*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            if self.wide {
                // SAFETY: `wide` is set only on a CPU with the features (`Launch::new`).
                return unsafe { self.$wide($($a),*) };
            }
            self.$base($($a),*)
        }

        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt")]
        #[inline(never)]
        $(#[$m])*
        unsafe fn $wide(&mut self $(, $a: $t)*) $(-> $r)? {
            self.$body($($a),*)
        }

        #[inline(never)]
        $(#[$m])*
        fn $base(&mut self $(, $a: $t)*) $(-> $r)? {
            self.$body($($a),*)
        }
    };
}

/// The device runtime of dynamic parallelism.
pub(crate) mod devrt;
/// Texture and surface instructions.
mod image;
/// Whole-warp forms of the common instructions.
mod lanes;
/// The engine's explicit AVX2 code: shared-memory gathers, address
/// checks, predicate masks and PC updates.
mod simd;
/// Warp-wide matrix products.
mod wmma;

use lanes::specialize;

use crate::float::*;
use crate::ir::*;
use crate::printf;
use crate::{Dims, Error, Limits, Memory, RunStats};
use crate::{GLOBALS_BASE, LOCAL_WINDOW, PARAM_WINDOW, SHARED_WINDOW, WINDOW_SIZE};
use std::sync::atomic::{AtomicU64, Ordering};

/// Instructions a warp runs before the next warp of its block gets a turn.
const QUANTUM: u32 = 4096;
/// Whole turns a warp stays diverged before its highest-PC threads get
/// turns of their own (see `run_warp_body`).
const PATIENCE: u32 = 4;
/// Most bytes of shared memory (static and dynamic) of one block.
pub const MAX_SHARED_BYTES: u64 = 228 << 10;
/// Most bytes of registers of one block's threads together.
pub const MAX_REGISTER_FILE: u64 = 256 << 20;
/// Most bytes of block state (registers, shared, local and parameter
/// scratch memory) a cooperative launch, whose blocks all live at once,
/// may hold: as much as a launch whose blocks run on eight host threads
/// may hold at once (eight blocks of [`MAX_REGISTER_FILE`] registers).
/// A grid that fills an H100 (2,048 threads on each of 132
/// multiprocessors) with 512 PTX registers per thread takes 1.1 GB here,
/// where the GPU's allocator would give each thread a few dozen.
pub const MAX_COOPERATIVE_STATE: u64 = 2 << 30;
/// Reserved shared memory of every block, after the kernel's own (static
/// and dynamic), as sm_80–90 devices reserve 1 KiB per block for the
/// system (CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK).
/// Cooperative groups keep the barriers and the exchange slots of tiles
/// larger than a warp at `%reserved_smem_offset_1` (at least 288 bytes);
/// SimGpu puts `%reserved_smem_offset_0` at the start of the region and
/// `_1` at its middle. Only kernels that read these registers get it.
pub const RESERVED_SMEM: u32 = 1024;
/// Most threads in one block.
pub const MAX_BLOCK_THREADS: u64 = 1024;
/// Named barriers per block.
const BARRIERS: usize = 16;
/// What setting up one block costs against [`Limits::max_instructions`],
/// in instructions: launches of many tiny blocks spend their time there.
pub const BLOCK_SETUP_COST: u64 = 32;
/// What setting up each warp of a block costs besides (one instruction
/// for each of its 32 lanes, which are reset whether they hold a thread
/// or not).
pub const WARP_SETUP_COST: u64 = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Active,
    Exited,
    /// Waiting at barrier `id`.
    Bar(u8),
    /// Waiting at the warp-synchronous instruction at this PC.
    Sync(u32),
}

#[derive(Clone)]
struct Warp {
    regs: Vec<u64>,
    pc: [u32; 32],
    /// Each lane's state is the mask below that holds it, written only
    /// through [`Warp::set`] and [`Warp::set_all`]; for a lane in
    /// [`Lane::Sync`], the PC it waits at is here.
    sync_pc: [u32; 32],
    /// Lanes in [`Lane::Active`].
    active: u32,
    /// Lanes in [`Lane::Exited`].
    exited: u32,
    /// Lanes waiting at a block barrier ([`Lane::Bar`]).
    barred: u32,
    /// Of those, the lanes whose PC is already past their `bar` (a plain
    /// `bar.sync` of the whole group: they only wait to be released).
    bar_advanced: u32,
    /// Of those, the lanes waiting at each barrier: counted and released
    /// by whole masks instead of lane by lane.
    bars: [u32; BARRIERS],
    /// Lanes waiting at a warp-synchronous instruction ([`Lane::Sync`]).
    synced: u32,
    /// Each lane's `%tid`: the same in every block of the launch.
    tid: [[u32; 3]; 32],
    exists: u32,
    /// Carry flags of `add.cc` and friends, one bit per lane.
    carry: u32,
    /// Predicates of threads waiting at a `bar.red`.
    redp: u32,
    /// Whether this turn runs the highest-PC group first.
    favor_high: bool,
    /// Whole turns in a row the warp ran diverged throughout.
    diverged_turns: u32,
    /// The launch's [`Launch::wide`], for the warp's own updates.
    wide: bool,
    id: u32,
    /// Each lane's call stack of recursive calls (empty until the first).
    frames: Vec<Vec<Frame>>,
    /// Bytes those frames hold.
    frame_bytes: u64,
}

/// What a recursive call saved for one thread ([`Op::CallFrame`]).
#[derive(Clone)]
struct Frame {
    /// The call instruction (its [`CallFrame`] says what was saved).
    call: u32,
    /// The callee's registers in this lane.
    regs: Box<[u64]>,
    /// Its local ranges, then its param-scratch ranges, in this lane: the
    /// caller's values of them, which a generic pointer the caller made
    /// into its own locals reaches while the callee runs
    /// ([`ACTIVATION_STRIDE`]).
    bytes: std::cell::RefCell<Box<[u8]>>,
}

/// Generic addresses of local memory that a lane makes while `d` calls of
/// recursive functions deep are `LOCAL_WINDOW + d * ACTIVATION_STRIDE +
/// offset`: every activation's locals have addresses of their own, as on
/// a GPU's stack, although they share the lane's local memory (the
/// caller's values wait in the callee's [`Frame`]). A pointer into an
/// outer activation's locals (Numba returns every value that way) then
/// reads and writes that activation's values where they wait. Used while
/// the kernel's local memory is at most this large, and to depths the
/// window holds.
const ACTIVATION_STRIDE: u64 = 1 << 26;

/// Where a local address is ([`Launch::outer_local`]).
enum Outer {
    Live(u64),
    Saved(usize, usize),
    Gone,
}

impl Frame {
    fn size(&self) -> u64 {
        (self.regs.len() * 8 + self.bytes.borrow().len() + std::mem::size_of::<Frame>()) as u64
    }
}

impl Warp {
    /// Sets the PC of the lanes of `lanes` to `to`: a loop without a
    /// branch per lane.
    #[inline(always)]
    fn set_pcs(&mut self, lanes: u32, to: u32) {
        #[cfg(target_arch = "x86_64")]
        if self.wide {
            // SAFETY: `wide` is set only on a CPU with AVX2.
            unsafe { simd::set_pcs(&mut self.pc, lanes, to) };
            return;
        }
        for (p, bit) in self.pc.iter_mut().zip(BIT) {
            if lanes & bit != 0 {
                *p = to;
            }
        }
    }

    /// [`Warp::set`] for every lane of `lanes`.
    fn set_all(&mut self, lanes: u32, st: Lane) {
        self.active &= !lanes;
        self.exited &= !lanes;
        if self.barred & lanes != 0 {
            for m in &mut self.bars {
                *m &= !lanes;
            }
        }
        self.barred &= !lanes;
        self.bar_advanced &= !lanes;
        self.synced &= !lanes;
        *match st {
            Lane::Active => &mut self.active,
            Lane::Exited => &mut self.exited,
            Lane::Bar(id) => {
                self.bars[id as usize] |= lanes;
                &mut self.barred
            }
            Lane::Sync(pc) => {
                for l in bits_of(lanes) {
                    self.sync_pc[l] = pc;
                }
                &mut self.synced
            }
        } |= lanes;
    }

    #[inline]
    fn set(&mut self, l: usize, st: Lane) {
        let bit = 1u32 << l;
        self.active &= !bit;
        self.exited &= !bit;
        if self.barred & bit != 0 {
            for m in &mut self.bars {
                *m &= !bit;
            }
        }
        self.barred &= !bit;
        self.bar_advanced &= !bit;
        self.synced &= !bit;
        match st {
            Lane::Active => self.active |= bit,
            Lane::Exited => self.exited |= bit,
            Lane::Bar(id) => {
                self.barred |= bit;
                self.bars[id as usize] |= bit;
            }
            Lane::Sync(pc) => {
                self.synced |= bit;
                self.sync_pc[l] = pc;
            }
        }
    }

    /// The lanes waiting at the warp-synchronous instruction at `pc`.
    fn synced_at(&self, pc: u32) -> u32 {
        bits_of(self.synced)
            .filter(|&l| self.sync_pc[l] == pc)
            .fold(0, |m, l| m | 1 << l)
    }
}

/// A block of a cooperative launch between its turns: what
/// [`Launch`] holds of the block that runs.
struct BlockState {
    warps: Vec<Warp>,
    shared: Vec<u8>,
    local: Vec<u8>,
    pscratch: Vec<u8>,
    ctaid: [u32; 3],
    arrivals: [u32; BARRIERS],
    counts: [Option<u32>; BARRIERS],
}

/// A launch checked and set up by [`Launch::prepare`].
struct Prepared {
    /// The warps of one block, ready to start.
    warps: Vec<Warp>,
    /// The first block of the box the launch runs, and the box's size.
    first: [u32; 3],
    extent: [u32; 3],
    /// Threads per block.
    threads: u32,
    /// What each block's setup costs against the budget.
    setup: u64,
    /// Blocks in the box.
    blocks: u64,
}

/// The blocks of a launch that several host threads run at once
/// ([`Launch::run_shared`]). Every field is a counter that the threads
/// only add to or lower: none of them orders other memory (each thread's
/// results reach the caller when the threads are joined), so `Relaxed`
/// suffices.
pub(crate) struct BlockQueue {
    /// The next block to run, in the order of [`Launch::run`].
    pub next: AtomicU64,
    /// No block from here on need run: the lowest block that failed
    /// (`u64::MAX`: none).
    pub stop: AtomicU64,
    /// Instructions and setup charged so far, over the threads, as each
    /// last told it (at the start of each of its blocks, and at its end).
    pub used: AtomicU64,
}

impl BlockQueue {
    pub(crate) fn new() -> BlockQueue {
        BlockQueue {
            next: AtomicU64::new(0),
            stop: AtomicU64::new(u64::MAX),
            used: AtomicU64::new(0),
        }
    }
}

/// Per-launch state.
pub(crate) struct Launch<'a> {
    pub func: &'a Func,
    /// `func`'s instructions in their [`Fast`] forms.
    fast: &'a [Fast],
    pub dims: &'a Dims,
    pub params: &'a [u8],
    pub mem: &'a mut dyn Memory,
    pub globals: &'a mut [u8],
    /// The caller's second address of `globals` (0: none).
    pub globals_alias: u64,
    /// Where `printf` and failed assertions write (None: discarded), and
    /// how long it may grow: text that would pass the limit is dropped, as
    /// a full FIFO drops it on a GPU.
    output: Option<&'a mut Vec<u8>>,
    output_limit: usize,
    pub limits: &'a Limits,
    /// Instructions executed so far, over all threads.
    insts: u64,
    /// How many instructions may still execute: the budget less what the
    /// blocks' setup has cost so far.
    allowed: u64,
    /// What [`Self::charge_setup`] has charged so far.
    charged: u64,
    /// The block's shared memory: the kernel's, then [`RESERVED_SMEM`].
    shared: Vec<u8>,
    /// Where the reserved shared memory starts (the kernel's own size,
    /// aligned to 16).
    reserved: u32,
    /// Per-thread local memory, lane-major within a warp, warps in order.
    local: Vec<u8>,
    /// Per-thread scratch for `.param` variables declared in the body.
    pscratch: Vec<u8>,
    ctaid: [u32; 3],
    nwarps: u32,
    arrivals: [u32; BARRIERS],
    counts: [Option<u32>; BARRIERS],
    /// Bytes the frames of recursive calls hold, over all warps.
    stack_bytes: u64,
    /// The lanes' bytes of a global load or store on the direct path (kept
    /// between instructions: only the bytes an access names are used, so
    /// it is never cleared).
    /// (`None` while an access has it out.)
    lane_bytes: Option<Box<lanes::LaneBytes>>,
    /// Work space of the matrix products, made at the first (`None`
    /// before it and while an instruction has it out).
    mma: Option<Box<wmma::Scratch>>,
    /// The texture object a `tex` found last, by handle: lanes and warps
    /// mostly name one, and no texture object changes during a launch.
    last_texture: Option<(u64, crate::texture::Texture)>,
    /// The host has AVX2 and FMA and [`Limits::host_simd`] allows them:
    /// the lane loops run in their copies compiled for those features.
    wide: bool,
    /// The device runtime's state, where the module lets the kernel launch
    /// others (`None`: its calls fail the launch).
    pub device: Option<devrt::DeviceSide<'a>>,
}

/// What a grid left: its statistics, what it consumed of the budget
/// (instructions and setup), and the work its threads launched.
pub(crate) struct Grid {
    pub stats: RunStats,
    pub consumed: u64,
    pub work: Vec<devrt::DeviceWork>,
    /// Parameter buffers handed out and never launched.
    pub buffers: Vec<u64>,
}

/// Lane `l`'s bit, as a table rather than a shift by `l`: SSE2 has no
/// shift by a different amount per lane, so loops over the 32 lanes that
/// shift stay scalar while loops that look bits up here vectorize.
const BIT: [u32; 32] = {
    let mut b = [0u32; 32];
    let mut l = 0;
    while l < 32 {
        b[l] = 1 << l;
        l += 1;
    }
    b
};

/// The group of lanes of `active` at the lowest PC (the highest if
/// `high`): its PC, its lanes, and the lowest PC of the other active
/// lanes (`u32::MAX`: none). Branch-free passes over the 32 lanes, which
/// the compiler vectorizes.
#[inline(always)]
fn group(pcs: &[u32; 32], active: u32, high: bool) -> (u32, u32, u32) {
    // Inactive lanes count as the worst PC.
    let worst = if high { 0 } else { u32::MAX };
    let mut key = [0u32; 32];
    for l in 0..32 {
        key[l] = if active & BIT[l] != 0 { pcs[l] } else { worst };
    }
    let pc = if high {
        key.iter().fold(0, |a, &p| a.max(p))
    } else {
        key.iter().fold(u32::MAX, |a, &p| a.min(p))
    };
    let mut mask = 0u32;
    let mut second = u32::MAX;
    for l in 0..32 {
        let on = active & BIT[l] != 0;
        let here = on && pcs[l] == pc;
        mask |= if here { BIT[l] } else { 0 };
        second = second.min(if on && !here { pcs[l] } else { u32::MAX });
    }
    (pc, mask, second)
}

fn bits_of(mut m: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if m == 0 {
            None
        } else {
            let l = m.trailing_zeros() as usize;
            m &= m - 1;
            Some(l)
        }
    })
}

#[inline]
fn mask_of(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

#[inline]
fn sext(v: u64, bits: u32) -> i64 {
    if bits >= 64 {
        v as i64
    } else {
        let s = 64 - bits;
        ((v << s) as i64) >> s
    }
}

#[inline]
fn f32b(v: u64) -> f32 {
    f32::from_bits(v as u32)
}

#[inline]
fn f32out(x: f32) -> u64 {
    if x.is_nan() {
        u64::from(CANONICAL_NAN_F32)
    } else {
        u64::from(x.to_bits())
    }
}

impl<'a> Launch<'a> {
    pub(crate) fn new(
        func: &'a Func,
        dims: &'a Dims,
        params: &'a [u8],
        mem: &'a mut dyn Memory,
        globals: &'a mut [u8],
        globals_alias: u64,
        limits: &'a Limits,
    ) -> Launch<'a> {
        Launch {
            globals_alias,
            output: None,
            output_limit: 0,
            func,
            fast: if limits.host_simd { func.fast() } else { &[] },
            dims,
            params,
            mem,
            globals,
            limits,
            insts: 0,
            allowed: limits.max_instructions,
            charged: 0,
            shared: Vec::new(),
            reserved: 0,
            local: Vec::new(),
            pscratch: Vec::new(),
            ctaid: [0; 3],
            nwarps: 0,
            arrivals: [0; BARRIERS],
            counts: [None; BARRIERS],
            stack_bytes: 0,
            lane_bytes: None,
            mma: None,
            last_texture: None,
            wide: limits.host_simd && lanes::host_has_simd(),
            device: None,
        }
    }

    /// Makes `printf` and failed assertions append to `out`, up to `limit`
    /// bytes in all.
    pub(crate) fn with_output(mut self, out: &'a mut Vec<u8>, limit: usize) -> Launch<'a> {
        self.output = Some(out);
        self.output_limit = limit;
        self
    }

    /// Appends `text` as one record of stream `stream` ([`crate::STDOUT`]
    /// or [`crate::STDERR`]) to the output, if it fits in what is left.
    fn emit(&mut self, stream: u8, text: &[u8]) {
        let limit = self.output_limit;
        if let Some(out) = self.output.as_deref_mut() {
            let record = 5usize.saturating_add(text.len());
            if out.len().saturating_add(record) <= limit {
                out.push(stream);
                out.extend_from_slice(&(text.len() as u32).to_le_bytes());
                out.extend_from_slice(text);
            }
        }
    }

    /// A u64 the caller put in param-space variable `at`.
    fn param_u64(&mut self, w: &Warp, l: usize, at: u32) -> Result<u64, Error> {
        let mut b = [0u8; 8];
        self.load(w, l, Space::Param, u64::from(at), &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// The NUL-terminated string at generic address `addr`, at most
    /// [`printf::MAX_STRING`] bytes of it.
    fn string_at(&mut self, w: &Warp, l: usize, addr: u64) -> Result<Vec<u8>, Error> {
        let mut s = Vec::new();
        while s.len() < printf::MAX_STRING {
            let mut b = [0u8; 1];
            self.load(
                w,
                l,
                Space::Generic,
                addr.wrapping_add(s.len() as u64),
                &mut b,
            )?;
            if b[0] == 0 {
                break;
            }
            s.push(b[0]);
        }
        Ok(s)
    }

    /// An `mbarrier` operation of lane `l`. The object's 64 bits: the
    /// arrivals still pending in the current phase (bits 0–20), the
    /// arrivals each phase expects (21–41) and the phase's parity (63).
    /// An arrival's state token is the parity of the phase it arrived in
    /// with the pending count after it; a phase completes when its last
    /// pending arrival comes, and the next one starts.
    fn mbarrier(&mut self, w: &mut Warp, l: usize, x: &Mbar) -> Result<(), Error> {
        const COUNT: u64 = (1 << 21) - 1;
        const PHASE: u64 = 1 << 63;
        const TX_SHIFT: u32 = 42;
        const TX_MASK: u64 = (1 << 21) - 1;
        let at = self.address(w, x.addr, l);
        let read = |me: &mut Self, w: &Warp| -> Result<u64, Error> {
            let mut b = [0u8; 8];
            if !at.is_multiple_of(8) {
                return Err(Error::Misaligned {
                    space: "shared",
                    addr: at,
                    len: 8,
                });
            }
            me.load(w, l, x.space, at, &mut b)?;
            Ok(u64::from_le_bytes(b))
        };
        // The object: pending arrivals (bits 0-20), expected arrivals
        // (21-41), the transaction count (42-62, signed: bytes still to
        // come, negative when copies completed before they were expected)
        // and the phase (63). A phase completes when no arrival is pending
        // and the transaction count is zero.
        let write = |me: &mut Self, w: &Warp, phase: u64, expected: u64, pending: u64, tx: i64| {
            let (mut phase, mut pending) = (phase, pending);
            if pending == 0 && tx == 0 {
                phase ^= PHASE;
                pending = expected;
            }
            let tx_bits = (tx as u64) & TX_MASK;
            let new = phase | tx_bits << TX_SHIFT | expected << 21 | pending;
            me.store(w, l, x.space, at, &new.to_le_bytes())
        };
        let fields = |obj: u64| {
            let tx = (((obj >> TX_SHIFT) & TX_MASK) << (64 - 21)) as i64 >> (64 - 21);
            (obj & PHASE, (obj >> 21) & COUNT, obj & COUNT, tx)
        };
        let arrive =
            |me: &mut Self, w: &Warp, n: u64, drop: bool, tx_add: i64| -> Result<u64, Error> {
                let (phase, mut expected, pending, tx) = fields(read(me, w)?);
                let pending = pending.saturating_sub(n);
                if drop {
                    expected = expected.saturating_sub(1);
                }
                let token = phase | pending;
                write(me, w, phase, expected, pending, tx + tx_add)?;
                Ok(token)
            };
        let v = match x.kind {
            MbarKind::Init => {
                let n = self.rd(w, x.a.expect("init has a count"), l) & COUNT;
                self.store(w, l, x.space, at, &(n << 21 | n).to_le_bytes())?;
                None
            }
            MbarKind::Arrive { drop, expect_tx } => {
                let arg = x.a.map(|a| self.rd(w, a, l));
                let (n, tx) = match (expect_tx, arg) {
                    (true, Some(t)) => (1, (t as u32 & COUNT as u32) as i64),
                    (_, a) => (a.map_or(1, |v| v & COUNT), 0),
                };
                Some(arrive(self, w, n, drop, tx)?)
            }
            MbarKind::AsyncArrive { noinc } => {
                // Without `.noinc` the pending count is raised by one
                // first: the arrival then leaves it as it was.
                if noinc {
                    arrive(self, w, 1, false, 0)?;
                }
                None
            }
            MbarKind::ExpectTx | MbarKind::CompleteTx => {
                let n = (self.rd(w, x.a.expect("a count"), l) as u32 & COUNT as u32) as i64;
                let delta = if x.kind == MbarKind::ExpectTx { n } else { -n };
                let (phase, expected, pending, tx) = fields(read(self, w)?);
                write(self, w, phase, expected, pending, tx + delta)?;
                None
            }
            MbarKind::Wait { parity } => {
                let s = self.rd(w, x.a.expect("wait has a state"), l);
                let waited = if parity { s & 1 } else { s >> 63 };
                Some(u64::from(read(self, w)? >> 63 != waited))
            }
            MbarKind::PendingCount => Some(self.rd(w, x.a.expect("a state"), l) & COUNT),
            MbarKind::Inval => {
                self.store(w, l, x.space, at, &[0; 8])?;
                None
            }
        };
        if let (Some(d), Some(v)) = (x.d, v) {
            Self::wr(w, d, l, v);
        }
        Ok(())
    }

    /// `cp.async.bulk` by lane `l`: the copy, then (into shared memory)
    /// the completion of its bytes on the `mbarrier`.
    fn bulk_copy(&mut self, w: &mut Warp, l: usize, x: &BulkCopy) -> Result<(), Error> {
        let n = self.rd(w, x.size, l) as u32;
        let (d, s) = (self.address(w, x.dst, l), self.address(w, x.src, l));
        // Sizes and both addresses are multiples of 16 (the PTX ISA), and
        // a transaction count holds at most 2^20 - 1 bytes.
        if !n.is_multiple_of(16) || n >= 1 << 20 {
            return Err(Error::Unsupported {
                what: format!("cp.async.bulk of {n} bytes (a multiple of 16 below 1 MiB)"),
            });
        }
        for (a, space) in [(d, x.dst_space), (s, x.src_space)] {
            if !a.is_multiple_of(16) {
                return Err(Error::Misaligned {
                    space: if space == Space::Shared {
                        "shared"
                    } else {
                        "global"
                    },
                    addr: a,
                    len: 16,
                });
            }
        }
        // Charged as the 16-byte moves it makes.
        self.charge_setup(u64::from(n / 16))?;
        // In 16-byte pieces: each is one aligned access of either space.
        let mut piece = [0u8; 16];
        for off in (0..u64::from(n)).step_by(16) {
            self.load(w, l, x.src_space, s + off, &mut piece)?;
            self.store(w, l, x.dst_space, d + off, &piece)?;
        }
        if let Some(mbar) = x.mbar {
            let done = Mbar {
                kind: MbarKind::CompleteTx,
                space: Space::Shared,
                d: None,
                addr: mbar,
                a: Some(Src::Imm(u64::from(n))),
            };
            self.mbarrier(w, l, &done)?;
        }
        Ok(())
    }

    /// `vprintf` for lane `l`: the number of arguments it used, -1 for a
    /// NULL format.
    fn printf(&mut self, w: &Warp, l: usize, fmt: u32, args: u32) -> Result<i32, Error> {
        let fmt = self.param_u64(w, l, fmt)?;
        if fmt == 0 {
            return Ok(-1);
        }
        let args = self.param_u64(w, l, args)?;
        let text = self.string_at(w, l, fmt)?;
        struct Lane<'x, 'a> {
            launch: &'x mut Launch<'a>,
            w: &'x Warp,
            l: usize,
            args: u64,
            err: Option<Error>,
        }
        impl printf::Source for Lane<'_, '_> {
            fn string(&mut self, addr: u64) -> Option<Vec<u8>> {
                self.launch
                    .string_at(self.w, self.l, addr)
                    .map_err(|e| self.err = Some(e))
                    .ok()
            }
            fn arg(&mut self, off: u64, len: u64) -> Option<u64> {
                let mut b = [0u8; 8];
                let at = self.args.wrapping_add(off);
                self.launch
                    .load(self.w, self.l, Space::Generic, at, &mut b[..len as usize])
                    .map_err(|e| self.err = Some(e))
                    .ok()?;
                Some(u64::from_le_bytes(b))
            }
        }
        let mut lane = Lane {
            launch: self,
            w,
            l,
            args,
            err: None,
        };
        match printf::format(&text, &mut lane) {
            Some((out, used)) => {
                self.emit(crate::STDOUT, &out);
                Ok(used as i32)
            }
            None => Err(lane.err.unwrap_or(Error::OutOfBounds {
                space: "generic",
                addr: args,
                len: 0,
            })),
        }
    }

    /// `__assertfail`: prints the message as the CUDA runtime does.
    fn assert_fail(&mut self, w: &Warp, l: usize, args: [u32; 5]) -> Result<(), Error> {
        let mut text = |k: usize| -> Result<String, Error> {
            let p = self.param_u64(w, l, args[k])?;
            Ok(String::from_utf8_lossy(&self.string_at(w, l, p)?).into_owned())
        };
        let (message, file, function) = (text(0)?, text(1)?, text(3)?);
        let mut b = [0u8; 4];
        self.load(w, l, Space::Param, u64::from(args[2]), &mut b)?;
        let line = u32::from_le_bytes(b);
        let id = |s: Sreg| self.rd(w, Src::Sreg(s), l);
        let line = format!(
            "{file}:{line}: {function}: block: [{},{},{}], thread: [{},{},{}] Assertion `{message}` failed.\n",
            id(Sreg::Ctaid(0)),
            id(Sreg::Ctaid(1)),
            id(Sreg::Ctaid(2)),
            id(Sreg::Tid(0)),
            id(Sreg::Tid(1)),
            id(Sreg::Tid(2)),
        );
        self.emit(crate::STDERR, line.as_bytes());
        Ok(())
    }

    /// Checks the launch against the kernel and the limits, then runs every
    /// block.
    /// Returns what the grid consumed of the budget and the work its
    /// threads launched from the device.
    pub(crate) fn run_grid(mut self) -> Result<Grid, Error> {
        let p = self.prepare()?;
        let Prepared {
            mut warps,
            first,
            extent,
            threads,
            setup,
            blocks,
        } = p;
        if self.dims.cooperative.is_some() {
            self.run_cooperative(&warps, first, extent, threads, setup)?;
        } else {
            for z in first[2]..first[2] + extent[2] {
                for y in first[1]..first[1] + extent[1] {
                    for x in first[0]..first[0] + extent[0] {
                        self.ctaid = [x, y, z];
                        self.charge_setup(setup)?;
                        self.run_block(&mut warps, threads)?;
                    }
                }
            }
        }
        let (work, buffers) = match self.device.as_mut() {
            Some(d) => (std::mem::take(&mut d.work), d.take_buffers()),
            None => (Vec::new(), Vec::new()),
        };
        Ok(Grid {
            stats: RunStats {
                instructions: self.insts,
                threads: u64::from(threads) * blocks,
            },
            consumed: self.insts.saturating_add(self.charged),
            work,
            buffers,
        })
    }

    /// One of several host threads running the blocks of one launch at
    /// once: takes blocks from `queue` until none is left (or one before
    /// them failed), with the budget shared through it. An error comes
    /// with the index of the block that failed, in the order of
    /// [`Self::run`]. The caller made sure the kernel's blocks do not talk
    /// to each other ([`crate::Module::kernel_runs_in_parallel`]).
    pub(crate) fn run_shared(mut self, queue: &BlockQueue) -> Result<RunStats, (u64, Error)> {
        let Prepared {
            mut warps,
            first,
            extent,
            threads,
            setup,
            blocks,
        } = self.prepare().map_err(|e| (0, e))?;
        let max = self.limits.max_instructions;
        // What this thread has added to `queue.used`.
        let mut told = 0u64;
        loop {
            let i = queue.next.fetch_add(1, Ordering::Relaxed);
            if i >= blocks || i >= queue.stop.load(Ordering::Relaxed) {
                break;
            }
            // The budget: what is left of it after every thread's work
            // so far (the others' as they last told it).
            let mine = self.insts + self.charged;
            let used = queue.used.fetch_add(mine - told, Ordering::Relaxed) + (mine - told);
            told = mine;
            self.allowed = max.saturating_sub(self.charged + (used - mine));
            let (w, h) = (u64::from(extent[0]), u64::from(extent[1]));
            self.ctaid = [
                first[0] + (i % w) as u32,
                first[1] + (i / w % h) as u32,
                first[2] + (i / (w * h)) as u32,
            ];
            let ran = self
                .charge_setup(setup)
                .and_then(|()| self.run_block(&mut warps, threads));
            if let Err(e) = ran {
                queue.stop.fetch_min(i, Ordering::Relaxed);
                return Err((i, e));
            }
        }
        let mine = self.insts + self.charged;
        queue.used.fetch_add(mine - told, Ordering::Relaxed);
        Ok(RunStats {
            instructions: self.insts,
            threads: 0,
        })
    }

    /// Checks the launch against the kernel and the limits and sets up the
    /// state its blocks run in.
    fn prepare(&mut self) -> Result<Prepared, Error> {
        let d = self.dims;
        let f = self.func;
        let bad = |m: String| Err(Error::BadLaunch(m));
        if d.block.contains(&0) || d.grid.contains(&0) {
            return bad(format!("empty grid {:?} or block {:?}", d.grid, d.block));
        }
        // Saturating: a product of three u32 can pass u64.
        let threads = d
            .block
            .iter()
            .fold(1u64, |n, &v| n.saturating_mul(u64::from(v)));
        if threads > MAX_BLOCK_THREADS {
            return bad(format!(
                "{threads} threads per block exceed {MAX_BLOCK_THREADS}"
            ));
        }
        let shared = u64::from(f.dyn_shared_base) + u64::from(d.shared_bytes);
        if shared > MAX_SHARED_BYTES {
            return bad(format!(
                "{shared} bytes of shared memory exceed {MAX_SHARED_BYTES}"
            ));
        }
        if f.local_bytes > self.limits.max_local_bytes {
            return bad(format!(
                "{} bytes of local memory per thread exceed {}",
                f.local_bytes, self.limits.max_local_bytes
            ));
        }
        let nwarps = threads.div_ceil(32);
        let regfile = u64::from(f.nregs) * 8 * 32 * nwarps;
        if regfile > MAX_REGISTER_FILE {
            return bad(format!(
                "{} registers per thread need {regfile} bytes per block, more than {MAX_REGISTER_FILE}",
                f.nregs
            ));
        }
        if self.params.len() < f.param_bytes as usize {
            return bad(format!(
                "{} parameter bytes given, {} needs {}",
                self.params.len(),
                f.name,
                f.param_bytes
            ));
        }
        // The blocks this launch runs: the whole grid, or one box of it.
        let (first, extent) = match d.part {
            None => ([0; 3], d.grid),
            Some(p) => {
                let inside = (0..3).all(|i| {
                    p.extent[i] > 0
                        && u64::from(p.offset[i]) + u64::from(p.extent[i]) <= u64::from(d.grid[i])
                });
                if !inside {
                    return bad(format!(
                        "blocks {:?} + {:?} outside the grid {:?}",
                        p.offset, p.extent, d.grid
                    ));
                }
                (p.offset, p.extent)
            }
        };
        self.nwarps = nwarps as u32;
        let blocks: u64 = extent.iter().map(|&v| u64::from(v)).product();
        self.reserved = shared.next_multiple_of(16) as u32;
        let reserved = if f.reserved_smem { RESERVED_SMEM } else { 0 };
        self.shared = vec![0; (u64::from(self.reserved) + u64::from(reserved)) as usize];
        let slots = nwarps as usize * 32;
        self.local = vec![0; f.local_bytes as usize * slots];
        self.pscratch = vec![0; self.scratch_len() * slots];
        let warps: Vec<Warp> = (0..nwarps as u32)
            .map(|id| Warp {
                regs: vec![0; f.nregs as usize * 32],
                pc: [0; 32],
                sync_pc: [0; 32],
                active: 0,
                exited: u32::MAX,
                barred: 0,
                bar_advanced: 0,
                bars: [0; BARRIERS],
                synced: 0,
                tid: std::array::from_fn(|l| {
                    let t = id * 32 + l as u32;
                    let [bx, by, _] = d.block;
                    [t % bx, (t / bx) % by, t / (bx * by)]
                }),
                exists: 0,
                carry: 0,
                redp: 0,
                favor_high: false,
                diverged_turns: 0,
                wide: self.wide,
                id,
                frames: Vec::new(),
                frame_bytes: 0,
            })
            .collect();
        let setup = BLOCK_SETUP_COST + WARP_SETUP_COST * nwarps;
        if d.cooperative.is_some() {
            let state =
                regfile + (self.shared.len() + self.local.len() + self.pscratch.len()) as u64;
            if state.saturating_mul(blocks) > MAX_COOPERATIVE_STATE {
                return bad(format!(
                    "a cooperative launch of {blocks} blocks needs {state} bytes of state per block, more than {MAX_COOPERATIVE_STATE} in all"
                ));
            }
        }
        Ok(Prepared {
            warps,
            first,
            extent,
            threads: threads as u32,
            setup,
            blocks,
        })
    }

    /// A cooperative launch: every block's state lives at once and the
    /// blocks take turns, one round of their warps each, so that a block
    /// spinning at a grid-wide barrier (on a counter in global memory)
    /// lets the others reach it, as resident blocks do on a GPU.
    fn run_cooperative(
        &mut self,
        template: &[Warp],
        first: [u32; 3],
        extent: [u32; 3],
        threads: u32,
        setup: u64,
    ) -> Result<(), Error> {
        let mut blocks = Vec::new();
        for z in first[2]..first[2] + extent[2] {
            for y in first[1]..first[1] + extent[1] {
                for x in first[0]..first[0] + extent[0] {
                    self.charge_setup(setup)?;
                    let mut warps = template.to_vec();
                    Self::start_block(&mut warps, threads, &mut self.stack_bytes);
                    blocks.push(BlockState {
                        warps,
                        shared: self.shared.clone(),
                        local: self.local.clone(),
                        pscratch: self.pscratch.clone(),
                        ctaid: [x, y, z],
                        arrivals: [0; BARRIERS],
                        counts: [None; BARRIERS],
                    });
                }
            }
        }
        while !blocks.is_empty() {
            let mut k = 0;
            while k < blocks.len() {
                let b = &mut blocks[k];
                self.swap_block(b);
                let r = self.round(&mut b.warps);
                let r = match r {
                    Ok(Some(false)) => Err(self.stuck(&b.warps)),
                    r => r,
                };
                self.swap_block(b);
                match r? {
                    None => {
                        blocks.swap_remove(k);
                    }
                    Some(_) => k += 1,
                }
            }
        }
        Ok(())
    }

    /// Exchanges the block state `b` holds with the launch's current one.
    fn swap_block(&mut self, b: &mut BlockState) {
        std::mem::swap(&mut self.shared, &mut b.shared);
        std::mem::swap(&mut self.local, &mut b.local);
        std::mem::swap(&mut self.pscratch, &mut b.pscratch);
        std::mem::swap(&mut self.ctaid, &mut b.ctaid);
        std::mem::swap(&mut self.arrivals, &mut b.arrivals);
        std::mem::swap(&mut self.counts, &mut b.counts);
    }

    /// Charges a block's setup (or a warp's matrix product) against the
    /// budget, so that a grid of many tiny blocks (or a loop of products)
    /// is bounded like any other launch. Executed instructions
    /// ([`RunStats::instructions`], `%clock`) do not include it.
    fn charge_setup(&mut self, cost: u64) -> Result<(), Error> {
        match self.allowed.checked_sub(cost) {
            Some(a) if self.insts <= a => {
                self.allowed = a;
                self.charged += cost;
                Ok(())
            }
            _ => Err(Error::Budget(self.limits.max_instructions)),
        }
    }

    fn run_block(&mut self, warps: &mut [Warp], threads: u32) -> Result<(), Error> {
        // Registers, shared and local memory are undefined at a block's
        // start in PTX; they are zero at the launch's start and otherwise
        // hold what the previous block of this launch left, so a block's
        // setup costs time in its warps' lanes only (what `charge_setup`
        // charged).
        Self::start_block(warps, threads, &mut self.stack_bytes);
        self.arrivals = [0; BARRIERS];
        self.counts = [None; BARRIERS];
        loop {
            match self.round(warps)? {
                None => return Ok(()),
                Some(false) => return Err(self.stuck(warps)),
                Some(true) => {}
            }
        }
    }

    /// Puts every thread of the block at its first instruction.
    fn start_block(warps: &mut [Warp], threads: u32, stack_bytes: &mut u64) {
        for w in warps.iter_mut() {
            // Threads that exited inside a recursive call left frames.
            *stack_bytes -= w.frame_bytes;
            w.frame_bytes = 0;
            w.frames.clear();
            w.carry = 0;
            w.favor_high = false;
            w.diverged_turns = 0;
            // The warp's threads below `threads` exist.
            let first = w.id * 32;
            w.exists = match threads.saturating_sub(first) {
                n if n >= 32 => u32::MAX,
                n => (1u32 << n) - 1,
            };
            w.pc = [0; 32];
            w.set_all(w.exists, Lane::Active);
            w.set_all(!w.exists, Lane::Exited);
        }
    }

    /// One turn of each warp of the current block, then the barriers it
    /// completed: `None` once every thread has exited, else whether
    /// anything moved.
    fn round(&mut self, warps: &mut [Warp]) -> Result<Option<bool>, Error> {
        let mut progressed = false;
        for w in warps.iter_mut() {
            progressed |= self.run_warp(w)?;
        }
        let live: u32 = warps
            .iter()
            .map(|w| (w.exists & !w.exited).count_ones())
            .sum();
        if live == 0 {
            return Ok(None);
        }
        let released = self.release_barriers(warps, live);
        Ok(Some(progressed || released))
    }

    /// Completes every barrier whose arrivals reach its count.
    fn release_barriers(&mut self, warps: &mut [Warp], live: u32) -> bool {
        let mut waiting = [0u32; BARRIERS];
        for w in warps.iter().filter(|w| w.barred != 0) {
            // Usually every waiting lane is at barrier 0.
            if w.bars[0] == w.barred {
                waiting[0] += w.barred.count_ones();
                continue;
            }
            for (n, m) in waiting.iter_mut().zip(&w.bars) {
                *n += m.count_ones();
            }
        }
        let mut any = false;
        for (id, &n) in waiting.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let expected = self.counts[id].unwrap_or(live);
            if n + self.arrivals[id] >= expected {
                any = true;
                self.arrivals[id] = 0;
                self.counts[id] = None;
                // `bar.red`: reduce the predicates of the waiting threads.
                let trues: u32 = warps
                    .iter()
                    .map(|w| (w.bars[id] & w.redp).count_ones())
                    .sum();
                for w in warps.iter_mut() {
                    let all = w.bars[id];
                    // Lanes that waited at a plain `bar.sync` are past it.
                    let lanes = all & !w.bar_advanced;
                    if lanes == 0 {
                        if all != 0 {
                            w.set_all(all, Lane::Active);
                        }
                        continue;
                    }
                    // The others are usually at one `bar` without a
                    // reduction: each moves past it, in a loop without a
                    // branch per lane.
                    let p0 = w.pc[lanes.trailing_zeros() as usize];
                    let one_pc =
                        w.pc.iter()
                            .zip(BIT)
                            .fold(true, |same, (&p, bit)| same & (lanes & bit == 0 || p == p0));
                    if one_pc
                        && matches!(self.func.insts[p0 as usize].op, Op::Bar { red: None, .. })
                    {
                        for (p, bit) in w.pc.iter_mut().zip(BIT) {
                            *p += u32::from(lanes & bit != 0);
                        }
                        w.set_all(all, Lane::Active);
                        continue;
                    }
                    // Otherwise its instruction is looked up once per run
                    // of lanes at one PC.
                    let mut seen: Option<(u32, Option<(BarRed, u32)>)> = None;
                    for l in bits_of(lanes) {
                        let pc = w.pc[l];
                        let red = match seen {
                            Some((p, r)) if p == pc => r,
                            _ => {
                                let r = match self.func.insts[pc as usize].op {
                                    Op::Bar {
                                        red: Some((op, d, _)),
                                        ..
                                    } => Some((op, d)),
                                    _ => None,
                                };
                                seen = Some((pc, r));
                                r
                            }
                        };
                        if let Some((op, d)) = red {
                            let v = match op {
                                BarRed::Popc => trues,
                                BarRed::And => u32::from(trues == n),
                                BarRed::Or => u32::from(trues > 0),
                            };
                            Self::wr(w, d, l, u64::from(v));
                        }
                        w.pc[l] += 1;
                    }
                    w.set_all(all, Lane::Active);
                }
            }
        }
        any
    }

    fn stuck(&self, warps: &[Warp]) -> Error {
        for w in warps {
            if let Some(l) = bits_of(w.exists & w.synced).next() {
                let line = self.func.insts[w.sync_pc[l] as usize].line;
                return Error::Unsupported {
                    what: format!(
                        "warp-synchronous instruction at line {line} whose member threads never reach it together"
                    ),
                };
            }
        }
        let [x, y, z] = self.ctaid;
        Error::Deadlock(x, y, z)
    }

    wide_twin! {
        /// Runs a warp until it blocks or its quantum ends; whether it executed
        /// anything.
        fn run_warp / run_warp_wide / run_warp_base / run_warp_body(&mut self, w: &mut Warp) -> Result<bool, Error>;
    }

    #[inline(always)]
    fn run_warp_body(&mut self, w: &mut Warp) -> Result<bool, Error> {
        let mut n = 0;
        // The next group, known without looking at the lanes: the group
        // that just moved on together to a PC below `bound`, the lowest
        // PC of the warp's other active threads (`u32::MAX`: none), is
        // still the lowest group. Its threads' `w.pc` stay stale meanwhile.
        let mut known: Option<(u32, u32, u32)> = None;
        // Whether the warp ran converged at any step of this turn.
        let mut converged = false;
        while n < QUANTUM {
            let (pc, mask, bound) = if let Some(k) = known.take() {
                k
            } else {
                // The group at the lowest PC, or at the highest on turns
                // that favour the threads ahead.
                let high = w.favor_high;
                let all = w.active;
                let (pc, mask, second) = group(&w.pc, all, high);
                // Turns that favour the highest group take no shortcut
                // while other threads are active.
                let bound = if high && mask != all { 0 } else { second };
                (pc, mask, bound)
            };
            if mask == 0 {
                // Threads waiting at a warp-synchronous instruction may go
                // on once the threads they waited for have exited.
                if self.resume_synced(w) {
                    continue;
                }
                break;
            }
            n += 1;
            converged |= bound == u32::MAX;
            match self.step(w, pc, mask)? {
                Some(p) if p < bound => known = Some((p, mask, bound)),
                Some(p) => w.set_pcs(mask, p),
                None => {}
            }
        }
        if let Some((p, mask, _)) = known {
            w.set_pcs(mask, p);
        }
        // A warp that stays diverged for [`PATIENCE`] whole turns in a row
        // alternates between running its lowest and its highest group, so
        // that threads that went ahead (a lock's holder) progress while
        // others spin, as with independent thread scheduling. Only then:
        // warp-synchronous code written for lockstep warps (CuPy's
        // partition) needs the threads that went ahead to wait at the join
        // point, as a GPU's reconvergence makes them, and a turn that ends
        // inside an ordinary branch must not let them run on.
        w.diverged_turns = if n == QUANTUM && !converged {
            w.diverged_turns.saturating_add(1)
        } else {
            0
        };
        w.favor_high = w.diverged_turns >= PATIENCE && !w.favor_high;
        Ok(n > 0)
    }

    /// Reactivates the lowest group of threads waiting at a
    /// warp-synchronous instruction whose member threads are all there or
    /// exited; whether there was one.
    fn resume_synced(&self, w: &mut Warp) -> bool {
        if w.synced == 0 {
            return false;
        }
        let mut pcs: Vec<u32> = bits_of(w.synced).map(|l| w.sync_pc[l]).collect();
        pcs.sort_unstable();
        pcs.dedup();
        for pc in pcs {
            let group = w.synced_at(pc);
            let m = match &self.func.insts[pc as usize].op {
                Op::Shfl { mask, .. }
                | Op::Vote { mask, .. }
                | Op::WarpSync { mask }
                | Op::Redux { mask, .. }
                | Op::Match { mask, .. } => *mask,
                _ => continue,
            };
            let required = bits_of(group).fold(0u32, |r, l| r | self.rd(w, m, l) as u32)
                & w.exists
                & !w.exited;
            if required & !group == 0 {
                for l in bits_of(group) {
                    w.set(l, Lane::Active);
                }
                return true;
            }
        }
        false
    }

    #[inline(always)]
    fn rd(&self, w: &Warp, s: Src, l: usize) -> u64 {
        match s {
            Src::Reg(r) => w.regs[r as usize * 32 + l],
            Src::Imm(v) => v,
            Src::NotPred(r) => (w.regs[r as usize * 32 + l] & 1) ^ 1,
            Src::Sreg(s) => self.sreg(w, s, l),
        }
    }

    #[inline(never)]
    fn sreg(&self, w: &Warp, s: Sreg, l: usize) -> u64 {
        let lane = l as u32;
        u64::from(match s {
            Sreg::Tid(d) => w.tid[l][d as usize],
            Sreg::Ntid(d) => self.dims.block[d as usize],
            Sreg::Ctaid(d) => self.ctaid[d as usize],
            Sreg::Nctaid(d) => self.dims.grid[d as usize],
            Sreg::LaneId => lane,
            Sreg::WarpId => w.id,
            Sreg::NWarpId => self.nwarps,
            Sreg::SmId | Sreg::GridId => 0,
            // The grid workspace of a cooperative launch: high, then low
            // half of its address (cooperative groups' driver ABI).
            Sreg::EnvReg(1) => (self.dims.cooperative.unwrap_or(0) >> 32) as u32,
            Sreg::EnvReg(2) => self.dims.cooperative.unwrap_or(0) as u32,
            Sreg::EnvReg(_) | Sreg::Zero => 0,
            Sreg::One => 1,
            Sreg::NSmId => 1,
            Sreg::Clock | Sreg::GlobalTimerLo => self.insts as u32,
            Sreg::ClockHi | Sreg::GlobalTimerHi => (self.insts >> 32) as u32,
            Sreg::Clock64 | Sreg::GlobalTimer => return self.insts,
            Sreg::LaneMaskEq => 1 << lane,
            Sreg::LaneMaskLt => (1u32 << lane) - 1,
            Sreg::LaneMaskLe => ((1u64 << (lane + 1)) - 1) as u32,
            Sreg::LaneMaskGt => !(((1u64 << (lane + 1)) - 1) as u32),
            Sreg::LaneMaskGe => !((1u32 << lane) - 1),
            Sreg::DynamicSmem => self.dims.shared_bytes,
            Sreg::TotalSmem => self.reserved,
            Sreg::ReservedBegin | Sreg::Reserved(0) => self.reserved,
            Sreg::Reserved(_) => self.reserved + RESERVED_SMEM / 2,
            Sreg::ReservedEnd => self.reserved + RESERVED_SMEM,
            Sreg::ReservedCap => RESERVED_SMEM,
        })
    }

    #[inline]
    fn wr(w: &mut Warp, d: u32, l: usize, v: u64) {
        w.regs[d as usize * 32 + l] = v;
    }

    /// An integer operation in the lanes of `exec`, its lane loop
    /// specialized for the common operations and types ([`Fast::IBIN_OPS`],
    /// [`Fast::INT_TYPES`]; shared by the general path and the fast one).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn ibin_lanes(&self, w: &mut Warp, exec: u32, op: IBin, ty: Ty, d: u32, a: Src, b: Src) {
        specialize!(OP: IBin = op; [
            IBin::Add, IBin::Sub, IBin::MulLo, IBin::Shl, IBin::Shr,
            IBin::And, IBin::Or, IBin::Xor, IBin::Min, IBin::Max,
        ] => specialize!(TY: Ty = ty; [Ty::U32, Ty::S32, Ty::B32, Ty::U64, Ty::S64, Ty::B64] =>
            self.map2(w, exec, d, a, b, |x, y| ibin(OP, TY, x, y))))
    }

    /// `mad.lo` (no `.sat`) in the lanes of `exec`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn mad_lo_lanes(&self, w: &mut Warp, exec: u32, ty: Ty, d: u32, a: Src, b: Src, c: Src) {
        specialize!(TY: Ty = ty; [Ty::U32, Ty::S32, Ty::U64, Ty::S64] =>
        self.map3(w, exec, d, a, b, c, |x, y, z| {
            ibin(IBin::MulLo, TY, x, y).wrapping_add(z) & mask_of(TY.bits())
        }))
    }

    /// `setp` without a predicate combination in the lanes of `exec`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn setp_lanes(
        &self,
        w: &mut Warp,
        exec: u32,
        cmp: Cmp,
        ty: Ty,
        ftz: bool,
        d: u32,
        dn: Option<u32>,
        a: Src,
        b: Src,
    ) {
        specialize!(CMP: Cmp = cmp; [Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge] =>
        specialize!(TY: Ty = ty; [Ty::S32, Ty::U32, Ty::S64, Ty::U64, Ty::F32] =>
            self.setp(w, exec, d, dn, a, b, |x, y| compare(CMP, TY, ftz, x, y))))
    }

    /// A float operation in the lanes of `exec`, its lane loop specialized
    /// for the common operations, types and modes.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fbin_lanes(
        &self,
        w: &mut Warp,
        exec: u32,
        op: FBin,
        ty: Ty,
        m: FMode,
        d: u32,
        a: Src,
        b: Src,
    ) {
        specialize!(OP: FBin = op; [
            FBin::Add, FBin::Sub, FBin::Mul, FBin::Div, FBin::Min, FBin::Max,
        ] => specialize!(TY: Ty = ty; [Ty::F32, Ty::F64] => specialize!(M: FMode = m; [RN, RN_FTZ] =>
            self.map2(w, exec, d, a, b, |x, y| fbin(OP, TY, M, x, y)))))
    }

    /// `selp` in the lanes of `exec`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn selp_lanes(&self, w: &mut Warp, exec: u32, bits: u32, d: u32, a: Src, b: Src, c: Src) {
        let m = mask_of(bits);
        self.map3(w, exec, d, a, b, c, |x, y, p| {
            (if p & 1 != 0 { x } else { y }) & m
        });
    }

    /// `mov` in the lanes of `exec`.
    #[inline(always)]
    fn mov_lanes(&self, w: &mut Warp, exec: u32, d: u32, a: Src, bits: u32) {
        let m = mask_of(bits);
        self.map1(w, exec, d, a, |x| x & m);
    }

    /// Executes the instruction at `pc` for the threads in `mask`, whose
    /// entries in `w.pc` may be stale (a converged warp's PC is kept by
    /// [`Self::run_warp`]). `Some(p)`: they all moved to `p` together and
    /// are still active, and `w.pc` is left for the caller to update;
    /// `None`: each thread's PC and state are written here.
    #[inline(always)]
    fn step(&mut self, w: &mut Warp, pc: u32, mask: u32) -> Result<Option<u32>, Error> {
        let func = self.func;
        let inst = &func.insts[pc as usize];
        self.insts += u64::from(mask.count_ones());
        if self.insts > self.allowed {
            return Err(Error::Budget(self.limits.max_instructions));
        }
        let exec = match inst.guard {
            None => mask,
            Some(g) => {
                let b = g.reg as usize * 32;
                let p: &[u64; 32] = w.regs[b..b + 32].try_into().expect("32 lanes");
                let set = self.pred_mask(p);
                if g.neg {
                    mask & !set
                } else {
                    mask & set
                }
            }
        };
        let next = pc + 1;
        // The forms that dominate kernels' time, for a full warp on the
        // AVX2 engine: the lane loops the general path below calls, without
        // its dispatch.
        #[cfg(target_arch = "x86_64")]
        if self.wide && exec == lanes::FULL {
            match self.fast.get(pc as usize) {
                Some(&Fast::FmaRnF32 {
                    d,
                    a: Src::Reg(a),
                    b: Src::Reg(b),
                    c: Src::Reg(c),
                }) => {
                    // SAFETY: `wide` is set only on a CPU with AVX2 and FMA
                    // (`Launch::new`).
                    unsafe { simd::fma_rn_f32_regs(&mut w.regs, d, a, b, c) };
                    return Ok(Some(next));
                }
                Some(&Fast::FmaRnF32 { d, a, b, c }) => {
                    use simd::F32Src;
                    if let (Some(x), Some(y), Some(z)) =
                        (F32Src::of(a), F32Src::of(b), F32Src::of(c))
                    {
                        // SAFETY: `wide` is set only on a CPU with AVX2 and
                        // FMA (`Launch::new`).
                        unsafe { simd::fma_rn_f32_mixed(&mut w.regs, d, x, y, z) };
                        return Ok(Some(next));
                    }
                    // The operands copied first (the destination may be
                    // one of them).
                    let (x, y, z) = (self.lanes(w, a), self.lanes(w, b), self.lanes(w, c));
                    // SAFETY: `wide` is set only on a CPU with AVX2 and FMA
                    // (`Launch::new`).
                    unsafe { simd::fma_rn_f32(&x, &y, &z, Self::dst(w, d)) };
                    return Ok(Some(next));
                }
                Some(&Fast::LdShared { ty, d, addr }) => {
                    // `[%r + off]` with a 32-bit register: formed and
                    // checked in 32-bit vectors, gathered from them.
                    if let (Some(base), true, 4) = (addr.base, addr.narrow, ty.bytes()) {
                        // SAFETY: `wide` is set only on a CPU with AVX2.
                        let done = unsafe {
                            simd::ld_shared_narrow4(
                                &mut w.regs,
                                d,
                                base,
                                addr.off as u64,
                                &self.shared,
                                ty.is_signed(),
                            )
                        };
                        if done {
                            return Ok(Some(next));
                        }
                    }
                    let at = self.addresses(w, addr);
                    if self.shared_gather(w, exec, ty, d, &at) {
                        return Ok(Some(next));
                    }
                }
                Some(&Fast::StShared { ty, s, addr }) => {
                    // `[%r + off]` with a 32-bit register: formed and
                    // checked in 32-bit vectors, written lane by lane.
                    if let (Some(base), true, 4) = (addr.base, addr.narrow, ty.bytes()) {
                        // SAFETY: `wide` is set only on a CPU with AVX2.
                        let done = unsafe {
                            simd::st_shared_narrow4(
                                &w.regs,
                                s,
                                base,
                                addr.off as u64,
                                &mut self.shared,
                            )
                        };
                        if done {
                            return Ok(Some(next));
                        }
                    }
                }
                Some(&Fast::IBin { op, ty, d, a, b }) => {
                    self.ibin_lanes(w, exec, op, ty, d, a, b);
                    return Ok(Some(next));
                }
                Some(&Fast::MadLo { ty, d, a, b, c }) => {
                    self.mad_lo_lanes(w, exec, ty, d, a, b, c);
                    return Ok(Some(next));
                }
                Some(&Fast::Setp {
                    cmp,
                    ty,
                    ftz,
                    d,
                    dn,
                    a,
                    b,
                }) => {
                    self.setp_lanes(w, exec, cmp, ty, ftz, d, dn, a, b);
                    return Ok(Some(next));
                }
                Some(&Fast::Mov { d, a, bits }) => {
                    self.mov_lanes(w, exec, d, a, bits);
                    return Ok(Some(next));
                }
                Some(&Fast::FBin { op, ty, m, d, a, b }) => {
                    self.fbin_lanes(w, exec, op, ty, m, d, a, b);
                    return Ok(Some(next));
                }
                Some(&Fast::F32Bin { op, ftz, d, a, b }) => {
                    // On registers and immediates: in the register file,
                    // four lanes per vector instruction.
                    if let (Some(x), Some(y)) = (simd::F32Src::of(a), simd::F32Src::of(b)) {
                        // SAFETY: `wide` is set only on a CPU with AVX2
                        // (`Launch::new`).
                        unsafe { simd::f32_bin(&mut w.regs, op, ftz, d, x, y) };
                    } else {
                        let m = FMode {
                            rnd: Rnd::Rn,
                            ftz,
                            sat: false,
                        };
                        self.fbin_lanes(w, exec, op, Ty::F32, m, d, a, b);
                    }
                    return Ok(Some(next));
                }
                Some(&Fast::FUn32 { op, ftz, d, a }) => {
                    if let Some(x) = simd::F32Src::of(a) {
                        // SAFETY: `wide` is set only on a CPU with AVX2
                        // and FMA (`Launch::new`).
                        unsafe { simd::f32_un(&mut w.regs, op, ftz, d, x) };
                        return Ok(Some(next));
                    }
                }
                Some(&Fast::Selp { bits, d, a, b, c }) => {
                    self.selp_lanes(w, exec, bits, d, a, b, c);
                    return Ok(Some(next));
                }
                _ => {}
            }
        }
        match &inst.op {
            Op::Bra { target } => {
                if exec == mask {
                    return Ok(Some(*target));
                } else if exec == 0 {
                    return Ok(Some(next));
                }
                w.set_pcs(exec, *target);
                w.set_pcs(mask & !exec, next);
                return Ok(None);
            }
            Op::Dispatch { target, cases } => {
                let b = *target as usize * 32;
                for l in bits_of(mask) {
                    w.pc[l] = if exec & (1 << l) != 0 {
                        let addr = w.regs[b + l];
                        match cases.iter().find(|c| c.0 == addr) {
                            Some(&(_, at)) => at,
                            None => return Err(Error::BadCall { addr }),
                        }
                    } else {
                        next
                    };
                }
                return Ok(None);
            }
            Op::Ret | Op::Exit => {
                for l in bits_of(mask) {
                    if exec & (1 << l) != 0 {
                        w.set(l, Lane::Exited);
                    } else {
                        w.pc[l] = next;
                    }
                }
                return Ok(None);
            }
            Op::Bar {
                wait,
                id,
                count,
                red,
            } => {
                // `bar.sync N` / `barrier.sync N`: the whole group waits,
                // its PC already past the barrier (nothing is left to do
                // at the release but to wake it).
                if let (Src::Imm(idv), None, None, true) = (*id, count, red, *wait) {
                    if idv < BARRIERS as u64 {
                        w.set_pcs(mask, next);
                        w.set_all(exec, Lane::Bar(idv as u8));
                        w.bar_advanced |= exec;
                        return Ok(None);
                    }
                }
                w.set_pcs(mask & !exec, next);
                for l in bits_of(exec) {
                    let idv = self.rd(w, *id, l) as u32;
                    if idv as usize >= BARRIERS {
                        return Err(Error::Unsupported {
                            what: format!("barrier {idv} (line {})", inst.line),
                        });
                    }
                    if let Some(c) = count {
                        let c = self.rd(w, *c, l) as u32;
                        if c == 0 || !c.is_multiple_of(32) {
                            return Err(Error::Unsupported {
                                what: format!("barrier thread count {c} (line {})", inst.line),
                            });
                        }
                        self.counts[idv as usize] = Some(c);
                    }
                    if let Some((_, _, p)) = red {
                        if self.rd(w, *p, l) & 1 != 0 {
                            w.redp |= 1 << l;
                        } else {
                            w.redp &= !(1 << l);
                        }
                    }
                    if *wait {
                        w.set(l, Lane::Bar(idv as u8));
                        w.pc[l] = pc;
                    } else {
                        self.arrivals[idv as usize] += 1;
                        w.pc[l] = next;
                    }
                }
                return Ok(None);
            }
            Op::Shfl { mask: m, .. }
            | Op::Vote { mask: m, .. }
            | Op::WarpSync { mask: m }
            | Op::Redux { mask: m, .. }
            | Op::Match { mask: m, .. } => {
                if exec == 0 {
                    return Ok(Some(next));
                }
                let waiting = w.synced_at(pc);
                let mut required = match *m {
                    Src::Imm(v) => v as u32,
                    Src::Reg(r) if exec == lanes::FULL => {
                        let b = r as usize * 32;
                        w.regs[b..b + 32].iter().fold(0, |r, &v| r | v as u32)
                    }
                    _ => bits_of(exec).fold(0, |r, l| r | self.rd(w, *m, l) as u32),
                };
                required &= w.exists & !w.exited;
                let here = exec | waiting;
                for l in bits_of(mask & !exec) {
                    w.pc[l] = next;
                }
                if required & !here != 0 {
                    for l in bits_of(exec) {
                        w.set(l, Lane::Sync(pc));
                        w.pc[l] = pc;
                    }
                    return Ok(None);
                }
                for l in bits_of(waiting) {
                    w.set(l, Lane::Active);
                }
                self.warp_op(w, &inst.op, here)?;
                if here == mask {
                    // The whole group went on together.
                    return Ok(Some(next));
                }
                for l in bits_of(here) {
                    w.pc[l] = next;
                }
                return Ok(None);
            }
            Op::CallFrame(cf) => {
                for l in bits_of(exec) {
                    self.push_frame(w, l, pc, cf)?;
                }
                if exec == mask {
                    return Ok(Some(cf.target));
                }
                for l in bits_of(mask) {
                    w.pc[l] = if exec & (1 << l) != 0 {
                        cf.target
                    } else {
                        next
                    };
                }
                return Ok(None);
            }
            Op::RetFrame => {
                let mut to = None;
                let mut same = true;
                for l in bits_of(exec) {
                    let r = self.pop_frame(w, l)?;
                    same &= to.is_none_or(|t| t == r);
                    to = Some(r);
                    w.pc[l] = r;
                }
                if let (Some(r), true, true) = (to, same, exec == mask) {
                    return Ok(Some(r));
                }
                for l in bits_of(mask & !exec) {
                    w.pc[l] = next;
                }
                return Ok(None);
            }
            Op::Activemask { d } => {
                for l in bits_of(exec) {
                    Self::wr(w, *d, l, u64::from(mask));
                }
            }
            op => {
                if exec != 0 {
                    self.exec(w, op, exec, inst.line)?;
                }
            }
        }
        Ok(Some(next))
    }

    /// Lane `l`'s local memory and param scratch: where each starts in
    /// `self.local` / `self.pscratch`, and their sizes.
    fn lane_memory(&self, w: &Warp, l: usize) -> (usize, usize, usize, usize) {
        let slot = w.id as usize * 32 + l;
        let lb = self.func.local_bytes as usize;
        let sb = self.scratch_len();
        (slot * lb, lb, slot * sb, sb)
    }

    /// What [`ACTIVATION_STRIDE`] adds to the generic addresses of local
    /// memory lane `l` makes now: 0 outside recursive calls, and where the
    /// kernel's locals or the depth do not fit the scheme.
    fn activation_tag(&self, w: &Warp, l: usize) -> u64 {
        let depth = w.frames.get(l).map_or(0, Vec::len) as u64;
        if u64::from(self.func.local_bytes) > ACTIVATION_STRIDE
            || depth >= crate::WINDOW_SIZE / ACTIVATION_STRIDE
        {
            return 0;
        }
        depth * ACTIVATION_STRIDE
    }

    /// Where lane `l`'s local address `off` (of `len` bytes) is: an
    /// address its present activation made ([`Outer::Live`]), or one an
    /// outer activation made, whose value waits in the first frame saved
    /// since that holds it ([`Outer::Saved`]: frame, byte offset), or lives
    /// on where no frame saved it; an activation that has returned is
    /// [`Outer::Gone`]. A local-space address below the stride is the
    /// present activation's (`ld.local` of its own depot); a generic one
    /// carries the depth it was made at, 0 outside recursive calls.
    fn outer_local(&self, w: &Warp, l: usize, off: u64, len: u64, generic: bool) -> Outer {
        if off < ACTIVATION_STRIDE && (!generic || w.frames.is_empty()) {
            return Outer::Live(off);
        }
        let (depth, x) = (off / ACTIVATION_STRIDE, off % ACTIVATION_STRIDE);
        let frames = match w.frames.get(l) {
            Some(f) => f,
            None => return Outer::Gone,
        };
        let now = frames.len() as u64;
        if depth > now {
            return Outer::Gone;
        }
        for (k, frame) in frames.iter().enumerate().skip(depth as usize) {
            let Op::CallFrame(cf) = &self.func.insts[frame.call as usize].op else {
                continue;
            };
            let mut at = 0u64;
            for &(a, b) in &cf.local {
                let (a, b) = (u64::from(a), u64::from(b));
                if x >= a && x + len <= b {
                    return Outer::Saved(k, (at + x - a) as usize);
                }
                at += b.saturating_sub(a);
            }
        }
        Outer::Live(x)
    }

    /// Lane `l` calls a recursive function ([`Op::CallFrame`] at `pc`):
    /// saves what the callee's activation uses, then copies the arguments.
    fn push_frame(&mut self, w: &mut Warp, l: usize, pc: u32, cf: &CallFrame) -> Result<(), Error> {
        let (lo, lb, so, sb) = self.lane_memory(w, l);
        let (r0, n) = (cf.regs.0 as usize, cf.regs.1 as usize);
        let regs: Box<[u64]> = (r0..r0 + n).map(|r| w.regs[r * 32 + l]).collect();
        let mut bytes = Vec::new();
        for &(a, b) in &cf.local {
            let r = range(u64::from(a), u64::from(b.saturating_sub(a)), lb).ok_or(
                Error::BadLaunch("a recursive function's locals lie outside the kernel's".into()),
            )?;
            bytes.extend_from_slice(&self.local[lo + r.start..lo + r.end]);
        }
        for &(a, b) in &cf.scratch {
            let r = range(
                u64::from(a).wrapping_sub(PARAM_SCRATCH_BASE),
                u64::from(b.saturating_sub(a)),
                sb,
            )
            .ok_or(Error::BadLaunch(
                "a recursive function's parameters lie outside the kernel's".into(),
            ))?;
            bytes.extend_from_slice(&self.pscratch[so + r.start..so + r.end]);
        }
        let frame = Frame {
            call: pc,
            regs,
            bytes: std::cell::RefCell::new(bytes.into_boxed_slice()),
        };
        let size = frame.size();
        if self.stack_bytes + size > crate::MAX_STACK_BYTES {
            return Err(Error::StackOverflow(crate::MAX_STACK_BYTES));
        }
        self.stack_bytes += size;
        w.frame_bytes += size;
        if w.frames.is_empty() {
            w.frames = vec![Vec::new(); 32];
        }
        w.frames[l].push(frame);
        for &(from, to, len) in &cf.args {
            self.scratch_copy(so, sb, from, to, len)?;
        }
        Ok(())
    }

    /// Lane `l` returns from a recursive call: restores what its caller's
    /// activation had, hands over the return values; where it goes on.
    fn pop_frame(&mut self, w: &mut Warp, l: usize) -> Result<u32, Error> {
        let Some(frame) = w.frames.get_mut(l).and_then(Vec::pop) else {
            return Err(Error::BadLaunch(
                "return of a recursive function without its call".into(),
            ));
        };
        let size = frame.size();
        self.stack_bytes -= size;
        w.frame_bytes -= size;
        let func = self.func;
        let Op::CallFrame(cf) = &func.insts[frame.call as usize].op else {
            return Err(Error::BadLaunch("a call frame names no call".into()));
        };
        let (lo, lb, so, sb) = self.lane_memory(w, l);
        // The return values, before the restore overwrites the callee's.
        let mut rets = Vec::with_capacity(cf.rets.len());
        for &(from, _, len) in &cf.rets {
            let r = range(
                u64::from(from).wrapping_sub(PARAM_SCRATCH_BASE),
                u64::from(len),
                sb,
            )
            .ok_or(Error::OutOfBounds {
                space: "param",
                addr: u64::from(from),
                len: u64::from(len),
            })?;
            rets.push(self.pscratch[so + r.start..so + r.end].to_vec());
        }
        let r0 = cf.regs.0 as usize;
        for (k, v) in frame.regs.iter().enumerate() {
            w.regs[(r0 + k) * 32 + l] = *v;
        }
        let mut at = 0;
        let bytes = frame.bytes.borrow();
        for &(a, b) in &cf.local {
            let n = b.saturating_sub(a) as usize;
            let o = lo + a as usize;
            if a as usize + n <= lb {
                self.local[o..o + n].copy_from_slice(&bytes[at..at + n]);
            }
            at += n;
        }
        for &(a, b) in &cf.scratch {
            let n = b.saturating_sub(a) as usize;
            let o = u64::from(a).wrapping_sub(PARAM_SCRATCH_BASE) as usize;
            if o + n <= sb {
                self.pscratch[so + o..so + o + n].copy_from_slice(&bytes[at..at + n]);
            }
            at += n;
        }
        drop(bytes);
        for (&(_, to, len), v) in cf.rets.iter().zip(rets) {
            let r = range(
                u64::from(to).wrapping_sub(PARAM_SCRATCH_BASE),
                u64::from(len),
                sb,
            )
            .ok_or(Error::OutOfBounds {
                space: "param",
                addr: u64::from(to),
                len: u64::from(len),
            })?;
            self.pscratch[so + r.start..so + r.end].copy_from_slice(&v);
        }
        Ok(frame.call + 1)
    }

    /// Copies `len` bytes of one lane's param scratch (at `so`, `sb` bytes)
    /// from address `from` to `to`.
    fn scratch_copy(
        &mut self,
        so: usize,
        sb: usize,
        from: u32,
        to: u32,
        len: u32,
    ) -> Result<(), Error> {
        let oob = |a: u32| Error::OutOfBounds {
            space: "param",
            addr: u64::from(a),
            len: u64::from(len),
        };
        let src = range(
            u64::from(from).wrapping_sub(PARAM_SCRATCH_BASE),
            u64::from(len),
            sb,
        )
        .ok_or_else(|| oob(from))?;
        let dst = range(
            u64::from(to).wrapping_sub(PARAM_SCRATCH_BASE),
            u64::from(len),
            sb,
        )
        .ok_or_else(|| oob(to))?;
        self.pscratch
            .copy_within(so + src.start..so + src.end, so + dst.start);
        Ok(())
    }

    wide_twin! {
        fn warp_op / warp_op_wide / warp_op_base / warp_op_body(
            &mut self,
            w: &mut Warp,
            op: &Op,
            here: u32) -> Result<(
        ), Error>;
    }

    #[inline(always)]
    fn warp_op_body(&mut self, w: &mut Warp, op: &Op, here: u32) -> Result<(), Error> {
        match *op {
            Op::Shfl {
                mode,
                d,
                dp,
                a,
                b,
                c,
                ..
            } => {
                #[cfg(target_arch = "x86_64")]
                if self.wide && here == lanes::FULL {
                    if let (Src::Reg(a), Some(b), Some(c)) =
                        (a, Self::uniform(w, b), Self::uniform(w, c))
                    {
                        // SAFETY: `wide` is set only on a CPU with AVX2
                        // (`Launch::new`).
                        unsafe { simd::shfl_uniform(&mut w.regs, mode, d, dp, a, b, c) };
                        return Ok(());
                    }
                }
                let vals = self.lanes(w, a).map(|v| v & 0xffff_ffff);
                let (bs, cs) = (self.lanes(w, b), self.lanes(w, c));
                // Every lane computed, branch-free; the lanes of `here`
                // written.
                let mut out = [0u64; 32];
                let mut valid = [0u64; 32];
                // One loop per mode, the mode's test folded into it.
                specialize!(MODE: ShflMode = mode; [
                    ShflMode::Up, ShflMode::Down, ShflMode::Bfly,
                ] => for l in 0..32 {
                    let lane = l as i32;
                    let bv = (bs[l] & 31) as i32;
                    let cv = cs[l] as u32;
                    let cval = (cv & 31) as i32;
                    let segmask = ((cv >> 8) & 31) as i32;
                    let max_lane = (lane & segmask) | (cval & !segmask);
                    let min_lane = lane & segmask;
                    let (j, pval) = match MODE {
                        ShflMode::Up => {
                            let j = lane - bv;
                            (j, j >= max_lane)
                        }
                        ShflMode::Down => {
                            let j = lane + bv;
                            (j, j <= max_lane)
                        }
                        ShflMode::Bfly => {
                            let j = lane ^ bv;
                            (j, j <= max_lane)
                        }
                        ShflMode::Idx => {
                            let j = min_lane | (bv & !segmask);
                            (j, j <= max_lane)
                        }
                    };
                    // A valid source lies in 0..32 (each mode's bound).
                    let src = if pval { j as usize & 31 } else { l };
                    // Reading an inactive lane is undefined in PTX; this
                    // interpreter returns the reader's own value.
                    let src = if here & (1 << src) != 0 { src } else { l };
                    out[l] = vals[src];
                    valid[l] = u64::from(pval);
                });
                Self::put(w, here, d, &out);
                if let Some(p) = dp {
                    Self::put(w, here, p, &valid);
                }
            }
            Op::Vote { mode, d, a, mask } => {
                let mut preds = 0u32;
                for l in bits_of(here) {
                    if self.rd(w, a, l) & 1 != 0 {
                        preds |= 1 << l;
                    }
                }
                for l in bits_of(here) {
                    let m = self.rd(w, mask, l) as u32 & here;
                    let t = preds & m;
                    let v = match mode {
                        VoteMode::Ballot => u64::from(t),
                        VoteMode::All => u64::from(t == m),
                        VoteMode::Any => u64::from(t != 0),
                        VoteMode::Uni => u64::from(t == 0 || t == m),
                    };
                    Self::wr(w, d, l, v);
                }
            }
            Op::Match {
                all,
                bits,
                d,
                dp,
                a,
                mask,
            } => {
                let mut vals = [0u64; 32];
                for l in bits_of(here) {
                    vals[l] = self.rd(w, a, l) & mask_of(bits);
                }
                for l in bits_of(here) {
                    let m = self.rd(w, mask, l) as u32 & here;
                    let same = bits_of(m)
                        .filter(|&k| vals[k] == vals[l])
                        .fold(0u32, |acc, k| acc | 1 << k);
                    if all {
                        let uniform = same == m;
                        Self::wr(w, d, l, if uniform { u64::from(m) } else { 0 });
                        if let Some(p) = dp {
                            Self::wr(w, p, l, u64::from(uniform));
                        }
                    } else {
                        Self::wr(w, d, l, u64::from(same));
                    }
                }
            }
            Op::Redux {
                op, ty, d, a, mask, ..
            } => {
                let mut vals = [0u64; 32];
                for l in bits_of(here) {
                    vals[l] = self.rd(w, a, l) & 0xffff_ffff;
                }
                for l in bits_of(here) {
                    let m = self.rd(w, mask, l) as u32 & here;
                    let mut it = bits_of(m).map(|k| vals[k]);
                    let first = it.next().unwrap_or(0);
                    let signed = ty == Ty::S32;
                    let r = it.fold(first, |acc, v| match op {
                        AtomOp::Add => acc.wrapping_add(v) & 0xffff_ffff,
                        AtomOp::Min if signed => (acc as i32).min(v as i32) as u32 as u64,
                        AtomOp::Max if signed => (acc as i32).max(v as i32) as u32 as u64,
                        AtomOp::Min => acc.min(v),
                        AtomOp::Max => acc.max(v),
                        AtomOp::And => acc & v,
                        AtomOp::Or => acc | v,
                        _ => acc ^ v,
                    });
                    Self::wr(w, d, l, r);
                }
            }
            _ => {}
        }
        Ok(())
    }

    wide_twin! {
        fn exec / exec_wide / exec_base / exec_body(
            &mut self,
            w: &mut Warp,
            op: &Op,
            exec: u32,
            line: u32) -> Result<(
        ), Error>;
    }

    #[inline(always)]
    fn exec_body(&mut self, w: &mut Warp, op: &Op, exec: u32, line: u32) -> Result<(), Error> {
        match *op {
            Op::Mov { d, a, bits } => self.mov_lanes(w, exec, d, a, bits),
            Op::Pack { d, parts, n, part } => {
                let m = mask_of(part);
                for l in bits_of(exec) {
                    let mut v = 0u64;
                    for k in (0..n as usize).rev() {
                        v = (v << part) | (self.rd(w, parts[k], l) & m);
                    }
                    Self::wr(w, d, l, v);
                }
            }
            Op::Unpack { ds, n, a, part } => {
                let m = mask_of(part);
                for l in bits_of(exec) {
                    let v = self.rd(w, a, l);
                    for (k, d) in ds.iter().enumerate().take(n as usize) {
                        Self::wr(w, *d, l, (v >> (part * k as u32)) & m);
                    }
                }
            }
            Op::IBin { op, ty, d, a, b } => self.ibin_lanes(w, exec, op, ty, d, a, b),
            Op::MulWide { ty, d, a, b } => {
                specialize!(TY: Ty = ty; [Ty::U32, Ty::S32, Ty::U16, Ty::S16] =>
                    self.map2(w, exec, d, a, b, |x, y| mul_wide(TY, TY.bits(), x, y)))
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
            } => self.mad_lo_lanes(w, exec, ty, d, a, b, c),
            Op::Mad {
                wide: true,
                sat: false,
                ty,
                d,
                a,
                b,
                c,
                ..
            } => specialize!(TY: Ty = ty; [Ty::U32, Ty::S32, Ty::U16, Ty::S16] =>
            self.map3(w, exec, d, a, b, c, |x, y, z| {
                mul_wide(TY, TY.bits(), x, y).wrapping_add(z) & mask_of(2 * TY.bits())
            })),
            Op::Mad {
                mul,
                wide,
                sat,
                ty,
                d,
                a,
                b,
                c,
            } => {
                let bits = ty.bits();
                for l in bits_of(exec) {
                    let (x, y, z) = (self.rd(w, a, l), self.rd(w, b, l), self.rd(w, c, l));
                    let v = if wide {
                        mul_wide(ty, bits, x, y).wrapping_add(z) & mask_of(2 * bits)
                    } else {
                        let p = ibin(mul, ty, x, y);
                        if sat {
                            (sext(p, 32).saturating_add(sext(z, 32)))
                                .clamp(i64::from(i32::MIN), i64::from(i32::MAX))
                                as u64
                                & 0xffff_ffff
                        } else {
                            p.wrapping_add(z) & mask_of(bits)
                        }
                    };
                    Self::wr(w, d, l, v);
                }
            }
            Op::Carry {
                sub,
                cin,
                cout,
                ty,
                d,
                a,
                b,
                mul,
            } => {
                let bits = ty.bits();
                let m = mask_of(bits);
                for l in bits_of(exec) {
                    let mut x = self.rd(w, a, l) & m;
                    if let Some((mb, hi)) = mul {
                        let y = self.rd(w, mb, l);
                        x = ibin(if hi { IBin::MulHi } else { IBin::MulLo }, ty, x, y);
                    }
                    let y = self.rd(w, b, l) & m;
                    let ci = u128::from(cin && w.carry & (1 << l) != 0);
                    let (v, c) = if sub {
                        let r = u128::from(x).wrapping_sub(u128::from(y)).wrapping_sub(ci);
                        (r as u64 & m, u128::from(x) < u128::from(y) + ci)
                    } else {
                        let r = u128::from(x) + u128::from(y) + ci;
                        (r as u64 & m, r >> bits != 0)
                    };
                    if cout {
                        if c {
                            w.carry |= 1 << l;
                        } else {
                            w.carry &= !(1 << l);
                        }
                    }
                    Self::wr(w, d, l, v);
                }
            }
            Op::IUn { op, ty, d, a } => specialize!(OP: IUn = op; [
                IUn::Not, IUn::Neg, IUn::Abs, IUn::Popc, IUn::Clz,
            ] => specialize!(TY: Ty = ty; [Ty::B32, Ty::S32, Ty::U32, Ty::B64, Ty::S64] =>
                self.map1(w, exec, d, a, |x| iun(OP, TY, x)))),
            Op::Sad { ty, d, a, b, c } => {
                let bits = ty.bits();
                let m = mask_of(bits);
                for l in bits_of(exec) {
                    let (x, y, z) = (self.rd(w, a, l), self.rd(w, b, l), self.rd(w, c, l));
                    let diff = if ty.is_signed() {
                        (i128::from(sext(x, bits)) - i128::from(sext(y, bits))).unsigned_abs()
                            as u64
                    } else {
                        (x & m).abs_diff(y & m)
                    };
                    Self::wr(w, d, l, diff.wrapping_add(z) & m);
                }
            }
            Op::Bfe { ty, d, a, b, c } => {
                let bits = ty.bits();
                for l in bits_of(exec) {
                    let x = self.rd(w, a, l) & mask_of(bits);
                    let pos = (self.rd(w, b, l) & 0xff) as u32;
                    let len = (self.rd(w, c, l) & 0xff) as u32;
                    let msb = bits - 1;
                    let v = if len == 0 {
                        0
                    } else {
                        let sbit = if ty.is_signed() {
                            (x >> (pos + len - 1).min(msb)) & 1
                        } else {
                            0
                        };
                        let mut v = 0u64;
                        for i in 0..bits {
                            let bit = if i < len && pos + i <= msb {
                                (x >> (pos + i)) & 1
                            } else {
                                sbit
                            };
                            v |= bit << i;
                        }
                        v
                    };
                    Self::wr(w, d, l, v);
                }
            }
            Op::Bfi {
                ty,
                d,
                f,
                b,
                c,
                len,
            } => {
                let bits = ty.bits();
                for l in bits_of(exec) {
                    let fv = self.rd(w, f, l);
                    let mut v = self.rd(w, b, l) & mask_of(bits);
                    let pos = (self.rd(w, c, l) & 0xff) as u32;
                    let n = (self.rd(w, len, l) & 0xff) as u32;
                    let mut i = 0;
                    while i < n && pos + i < bits {
                        let bit = (fv >> i) & 1;
                        v = (v & !(1 << (pos + i))) | (bit << (pos + i));
                        i += 1;
                    }
                    Self::wr(w, d, l, v);
                }
            }
            Op::Prmt {
                mode,
                d,
                a,
                b,
                c: Src::Imm(sel),
            } => self.map2(w, exec, d, a, b, |x, y| {
                u64::from(prmt(mode, (x & 0xffff_ffff) | (y << 32), sel as u32))
            }),
            Op::Prmt { mode, d, a, b, c } => {
                for l in bits_of(exec) {
                    let src = (self.rd(w, a, l) & 0xffff_ffff) | (self.rd(w, b, l) << 32);
                    let sel = self.rd(w, c, l) as u32;
                    Self::wr(w, d, l, u64::from(prmt(mode, src, sel)));
                }
            }
            Op::Video { v, d, a, b, c } => {
                for l in bits_of(exec) {
                    let (x, y, z) = (self.rd(w, a, l), self.rd(w, b, l), self.rd(w, c, l));
                    Self::wr(w, d, l, u64::from(video(v, x as u32, y as u32, z as u32)));
                }
            }
            Op::Lop3 {
                d,
                a,
                b,
                c,
                lut: Src::Imm(t),
            } => {
                // The table as the sum of products of its set entries.
                self.map3(w, exec, d, a, b, c, |x, y, z| {
                    let mut r = 0u64;
                    for k in 0..8 {
                        let on = (t >> k & 1).wrapping_neg();
                        let ta = if k & 4 != 0 { x } else { !x };
                        let tb = if k & 2 != 0 { y } else { !y };
                        let tc = if k & 1 != 0 { z } else { !z };
                        r |= ta & tb & tc & on;
                    }
                    r & 0xffff_ffff
                })
            }
            Op::Lop3 { d, a, b, c, lut } => {
                for l in bits_of(exec) {
                    let (x, y, z) = (self.rd(w, a, l), self.rd(w, b, l), self.rd(w, c, l));
                    let t = self.rd(w, lut, l);
                    let mut r = 0u64;
                    for k in 0..8 {
                        if t >> k & 1 != 0 {
                            let ta = if k & 4 != 0 { x } else { !x };
                            let tb = if k & 2 != 0 { y } else { !y };
                            let tc = if k & 1 != 0 { z } else { !z };
                            r |= ta & tb & tc;
                        }
                    }
                    Self::wr(w, d, l, r & 0xffff_ffff);
                }
            }
            Op::Shf {
                left,
                wrap,
                d,
                a,
                b,
                c,
            } => {
                for l in bits_of(exec) {
                    let v = (self.rd(w, a, l) & 0xffff_ffff) | (self.rd(w, b, l) << 32);
                    let cv = self.rd(w, c, l) as u32;
                    let n = if wrap { cv & 31 } else { cv.min(32) };
                    let r = if left {
                        (v << n) >> 32
                    } else {
                        (v >> n) & 0xffff_ffff
                    };
                    Self::wr(w, d, l, r & 0xffff_ffff);
                }
            }
            Op::FBin { op, ty, m, d, a, b } => self.fbin_lanes(w, exec, op, ty, m, d, a, b),
            Op::Fma { ty, m, d, a, b, c } => {
                if ty == Ty::F64 && m.rnd != Rnd::Rn {
                    return Err(Error::Unsupported {
                        what: format!("fma.f64 with directed rounding (line {line})"),
                    });
                }
                if self.wide && ty == Ty::F32 && m.rnd == Rnd::Rn {
                    // The host's own fused multiply-add, correctly rounded
                    // like `fma_rn_f32`, in one instruction per lane.
                    specialize!(M: FMode = m; [RN, RN_FTZ] =>
                    self.map3(w, exec, d, a, b, c, |x, y, z| fma_rn_f32_host(M, x, y, z)));
                    return Ok(());
                }
                specialize!(TY: Ty = ty; [Ty::F32, Ty::F64] => specialize!(M: FMode = m; [RN, RN_FTZ] =>
                    self.map3(w, exec, d, a, b, c, |x, y, z| fma(TY, M, x, y, z))));
            }
            Op::FUn { op, ty, m, d, a } => specialize!(OP: FUn = op; [
                FUn::Abs, FUn::Neg, FUn::Rcp, FUn::RcpApprox, FUn::Sqrt, FUn::SqrtApprox,
                FUn::Rsqrt, FUn::Ex2, FUn::Lg2,
            ] => specialize!(TY: Ty = ty; [Ty::F32, Ty::F64] =>
                self.map1(w, exec, d, a, |x| fun(OP, TY, m, x)))),
            Op::Half {
                op,
                fmt,
                x2,
                ftz,
                sat,
                relu,
                nan,
                d,
                a,
                b,
                c,
            } => {
                let mode = HalfMode {
                    fmt,
                    ftz,
                    sat,
                    relu,
                    nan,
                };
                for l in bits_of(exec) {
                    let (x, y, z) = (self.rd(w, a, l), self.rd(w, b, l), self.rd(w, c, l));
                    let mut r = 0u64;
                    for h in 0..(1 + u32::from(x2)) {
                        let part = |v: u64| (v >> (16 * h)) as u16;
                        let v = half(op, mode, part(x), part(y), part(z));
                        r |= u64::from(v) << (16 * h);
                    }
                    Self::wr(w, d, l, r);
                }
            }
            Op::CvtHalf { fmt, relu, d, a, b } => {
                for l in bits_of(exec) {
                    let lo = b.map_or(0, |b| self.rd(w, b, l));
                    let v = match b {
                        Some(_) => {
                            let hi = u64::from(f32_to_half(fmt, relu, f32b(self.rd(w, a, l))));
                            hi << 16 | u64::from(f32_to_half(fmt, relu, f32b(lo)))
                        }
                        None => u64::from(f32_to_half(fmt, relu, f32b(self.rd(w, a, l)))),
                    };
                    Self::wr(w, d, l, v);
                }
            }
            Op::CvtF8 {
                fmt,
                from_f16x2,
                to_f16x2,
                relu,
                d,
                a,
                b,
            } => {
                for l in bits_of(exec) {
                    let x = self.rd(w, a, l);
                    let v = if to_f16x2 {
                        // Exact: every 8-bit float is an f16.
                        let half = |byte: u64| {
                            let v = f8_to_f64(byte as u8, fmt);
                            let v = if relu && v < 0.0 { 0.0 } else { v };
                            if v.is_nan() {
                                0x7fff
                            } else {
                                u64::from(f64_to_half(v, false, Rnd::Rn))
                            }
                        };
                        half(x >> 8 & 0xff) << 16 | half(x & 0xff)
                    } else {
                        let (hi, lo) = if from_f16x2 {
                            (
                                f64::from(f16_to_f32((x >> 16) as u16)),
                                f64::from(f16_to_f32(x as u16)),
                            )
                        } else {
                            let lo = b.map_or(0, |b| self.rd(w, b, l));
                            (f64::from(f32b(x)), f64::from(f32b(lo)))
                        };
                        u64::from(f64_to_f8(hi, fmt, relu)) << 8
                            | u64::from(f64_to_f8(lo, fmt, relu))
                    };
                    Self::wr(w, d, l, v);
                }
            }
            Op::Testp { op, ty, d, a } => {
                for l in bits_of(exec) {
                    let x = self.rd(w, a, l);
                    let x = if ty == Ty::F32 {
                        f64::from(f32b(x))
                    } else {
                        f64::from_bits(x)
                    };
                    let sub = if ty == Ty::F32 {
                        f32::from_bits(self.rd(w, a, l) as u32).is_subnormal()
                    } else {
                        x.is_subnormal()
                    };
                    let v = match op {
                        Testp::Finite => x.is_finite(),
                        Testp::Infinite => x.is_infinite(),
                        Testp::Number => !x.is_nan(),
                        Testp::NotANumber => x.is_nan(),
                        Testp::Normal => x.is_finite() && x != 0.0 && !sub,
                        Testp::Subnormal => sub,
                    };
                    Self::wr(w, d, l, u64::from(v));
                }
            }
            Op::Set {
                cmp,
                ty,
                ftz,
                dty,
                d,
                a,
                b,
                comb,
            } => {
                for l in bits_of(exec) {
                    let t = compare(cmp, ty, ftz, self.rd(w, a, l), self.rd(w, b, l));
                    let t = match comb {
                        None => t,
                        Some((op, c)) => boolop(op, t, self.rd(w, c, l) & 1 != 0),
                    };
                    let v = match (t, dty) {
                        (false, _) => 0,
                        (true, Ty::F32) => u64::from(1.0f32.to_bits()),
                        (true, Ty::F16) => 0x3c00,
                        (true, Ty::BF16) => 0x3f80,
                        (true, _) => u64::from(u32::MAX),
                    };
                    Self::wr(w, d, l, v);
                }
            }
            Op::Setp {
                cmp,
                ty,
                ftz,
                d,
                dn,
                a,
                b,
                comb: None,
            } => {
                self.setp_lanes(w, exec, cmp, ty, ftz, d, dn, a, b);
            }
            Op::Setp {
                cmp,
                ty,
                ftz,
                d,
                dn,
                a,
                b,
                comb,
            } => {
                for l in bits_of(exec) {
                    let t = compare(cmp, ty, ftz, self.rd(w, a, l), self.rd(w, b, l));
                    let (p, q) = match comb {
                        None => (t, !t),
                        Some((op, c)) => {
                            let c = self.rd(w, c, l) & 1 != 0;
                            (boolop(op, t, c), boolop(op, !t, c))
                        }
                    };
                    Self::wr(w, d, l, u64::from(p));
                    if let Some(q_reg) = dn {
                        Self::wr(w, q_reg, l, u64::from(q));
                    }
                }
            }
            Op::PredBin { op, d, a, b } => self.map2(w, exec, d, a, b, |x, y| {
                u64::from(boolop(op, x & 1 != 0, y & 1 != 0))
            }),
            Op::Selp { bits, d, a, b, c } => self.selp_lanes(w, exec, bits, d, a, b, c),
            Op::Slct {
                bits,
                cty,
                ftz,
                d,
                a,
                b,
                c,
            } => {
                let m = mask_of(bits);
                for l in bits_of(exec) {
                    let cv = self.rd(w, c, l);
                    let pick_a = if cty == Ty::S32 {
                        cv as u32 as i32 >= 0
                    } else {
                        let f = if ftz { ftz32(f32b(cv)) } else { f32b(cv) };
                        f >= 0.0
                    };
                    let v = if pick_a {
                        self.rd(w, a, l)
                    } else {
                        self.rd(w, b, l)
                    };
                    Self::wr(w, d, l, v & m);
                }
            }
            Op::Cvt {
                kind,
                dty,
                sty,
                sat,
                ftz,
                d,
                a,
            } => {
                // Whether a conversion exists depends on its kinds only.
                if cvt(kind, dty, sty, sat, ftz, 0).is_none() {
                    return Err(Error::Unsupported {
                        what: format!(
                            "cvt.{}.{} with this rounding (line {line})",
                            dty.name(),
                            sty.name()
                        ),
                    });
                }
                match (kind, sat) {
                    (CvtKind::IntInt, false) => {
                        specialize!(DTY: Ty = dty; [Ty::U64, Ty::S64, Ty::U32, Ty::S32] =>
                        specialize!(STY: Ty = sty; [Ty::U32, Ty::S32, Ty::U64, Ty::S64, Ty::U16] =>
                            self.map1(w, exec, d, a, |x| {
                                cvt(CvtKind::IntInt, DTY, STY, false, false, x).unwrap_or(0)
                            })))
                    }
                    _ => self.map1(w, exec, d, a, |x| {
                        cvt(kind, dty, sty, sat, ftz, x).unwrap_or(0)
                    }),
                }
            }
            Op::Cvta {
                to,
                space,
                bits,
                d,
                a,
            } => {
                let base = match space {
                    Space::Shared => SHARED_WINDOW,
                    Space::Local => LOCAL_WINDOW,
                    Space::Param => PARAM_WINDOW,
                    _ => 0,
                };
                let m = mask_of(bits);
                if to {
                    self.map1(w, exec, d, a, |x| x.wrapping_sub(base) & m);
                } else if space == Space::Local && !w.frames.is_empty() {
                    // Inside recursive calls: each activation's own
                    // addresses.
                    for l in bits_of(exec) {
                        let x = self.rd(w, a, l);
                        let tag = self.activation_tag(w, l);
                        Self::wr(w, d, l, x.wrapping_add(base).wrapping_add(tag) & m);
                    }
                } else {
                    self.map1(w, exec, d, a, |x| x.wrapping_add(base) & m);
                }
            }
            Op::Isspacep { space, d, a } => {
                for l in bits_of(exec) {
                    let x = self.rd(w, a, l);
                    let win = |b: u64| x.wrapping_sub(b) < WINDOW_SIZE;
                    let v = match space {
                        Space::Shared => win(SHARED_WINDOW),
                        Space::Local => win(LOCAL_WINDOW),
                        Space::Param => win(PARAM_WINDOW),
                        Space::Const => win(GLOBALS_BASE),
                        _ => !win(SHARED_WINDOW) && !win(LOCAL_WINDOW) && !win(PARAM_WINDOW),
                    };
                    Self::wr(w, d, l, u64::from(v));
                }
            }
            Op::Ld {
                space,
                ty,
                ds,
                n,
                addr,
                ..
            } => {
                let e = ty.bytes() as usize;
                let total = e * n as usize;
                let at = self.addresses(w, addr);
                if space == Space::Shared && n == 1 && self.shared_gather(w, exec, ty, ds[0], &at) {
                    return Ok(());
                }
                if self.load_lanes(w, exec, space, ty, &ds[..n as usize], &at)? {
                    return Ok(());
                }
                for l in bits_of(exec) {
                    let at = at[l];
                    let mut buf = [0u8; 32];
                    self.load(w, l, space, at, &mut buf[..total])?;
                    for (k, d) in ds.iter().enumerate().take(n as usize) {
                        let v = lanes::value(&buf[k * e..(k + 1) * e], ty.is_signed(), ty.bits());
                        Self::wr(w, *d, l, v);
                    }
                }
            }
            Op::St {
                space,
                ty,
                srcs,
                n,
                addr,
            } => {
                let e = ty.bytes() as usize;
                let total = e * n as usize;
                let at = self.addresses(w, addr);
                if space == Space::Shared
                    && n == 1
                    && self.shared_scatter(w, exec, ty, srcs[0], &at)
                {
                    return Ok(());
                }
                if self.store_lanes(w, exec, space, ty, &srcs[..n as usize], &at)? {
                    return Ok(());
                }
                for l in bits_of(exec) {
                    let at = at[l];
                    let mut buf = [0u8; 32];
                    for (k, s) in srcs.iter().enumerate().take(n as usize) {
                        let v = self.rd(w, *s, l);
                        copy(&mut buf[k * e..(k + 1) * e], &v.to_le_bytes()[..e]);
                    }
                    self.store(w, l, space, at, &buf[..total])?;
                }
            }
            Op::Atom {
                space,
                op,
                ty,
                d,
                addr,
                b,
                c,
            } => {
                let e = ty.bytes() as usize;
                for l in bits_of(exec) {
                    let at = self.address(w, addr, l);
                    let mut buf = [0u8; 8];
                    self.load(w, l, space, at, &mut buf[..e])?;
                    let old = u64::from_le_bytes(buf);
                    let (bv, cv) = (self.rd(w, b, l), self.rd(w, c, l));
                    if let Some(new) = atom(op, ty, old, bv, cv) {
                        self.store(w, l, space, at, &new.to_le_bytes()[..e])?;
                    }
                    if let Some(d) = d {
                        let v = if ty.is_signed() {
                            sext(old, ty.bits()) as u64
                        } else {
                            old
                        };
                        Self::wr(w, d, l, v);
                    }
                }
            }
            Op::BulkCopy(ref x) => {
                for l in bits_of(exec) {
                    self.bulk_copy(w, l, x)?;
                }
            }
            Op::CpAsync {
                dst,
                src,
                size,
                src_size,
            } => {
                let n = size as usize;
                for l in bits_of(exec) {
                    let (d, sa) = (self.address(w, dst, l), self.address(w, src, l));
                    let keep = match src_size {
                        Some(x) => (self.rd(w, x, l) as u32).min(size) as usize,
                        None => n,
                    };
                    let mut buf = [0u8; 16];
                    // The source must be aligned to the copy's size.
                    if sa % u64::from(size) != 0 {
                        return Err(Error::Misaligned {
                            space: "global",
                            addr: sa,
                            len: u64::from(size),
                        });
                    }
                    if keep == n {
                        self.load(w, l, Space::Global, sa, &mut buf[..n])?;
                    } else {
                        // Only the first `keep` bytes are read.
                        for (i, b) in buf.iter_mut().enumerate().take(keep) {
                            let mut one = [0u8];
                            self.load(w, l, Space::Global, sa + i as u64, &mut one)?;
                            *b = one[0];
                        }
                    }
                    self.store(w, l, Space::Shared, d, &buf[..n])?;
                }
            }
            Op::ParamCopy { from, to, len } => {
                for l in bits_of(exec) {
                    let (_, _, so, sb) = self.lane_memory(w, l);
                    self.scratch_copy(so, sb, from, to, len)?;
                }
            }
            Op::Call { .. }
            | Op::CallRec { .. }
            | Op::CallIndirect(_)
            | Op::Dispatch { .. }
            | Op::CallFrame(_)
            | Op::RetFrame => {
                return Err(Error::Unsupported {
                    what: format!("call (line {line})"),
                })
            }
            Op::Mbarrier(ref x) => {
                for l in bits_of(exec) {
                    self.mbarrier(w, l, x)?;
                }
            }
            Op::Malloc { size, ret } => {
                for l in bits_of(exec) {
                    let n = self.param_u64(w, l, size)?;
                    let a = self.mem.malloc(n);
                    self.store(w, l, Space::Param, u64::from(ret), &a.to_le_bytes())?;
                }
            }
            Op::Free { ptr } => {
                for l in bits_of(exec) {
                    let a = self.param_u64(w, l, ptr)?;
                    if a != 0 {
                        self.mem.free(a)?;
                    }
                }
            }
            Op::SetConditional { handle, value } => {
                for l in bits_of(exec) {
                    let at = self.param_u64(w, l, handle)?;
                    let mut v = [0u8; 4];
                    self.load(w, l, Space::Param, u64::from(value), &mut v)?;
                    self.store(w, l, Space::Global, at, &v)?;
                }
            }
            Op::DevRt(ref c) => {
                for l in bits_of(exec) {
                    self.devrt(w, l, c)?;
                }
            }
            Op::Printf { fmt, args, ret } => {
                for l in bits_of(exec) {
                    let n = self.printf(w, l, fmt, args)?;
                    if let Some(r) = ret {
                        self.store(w, l, Space::Param, u64::from(r), &n.to_le_bytes())?;
                    }
                }
            }
            Op::AssertFail { args } => {
                for l in bits_of(exec) {
                    self.assert_fail(w, l, args)?;
                }
                return Err(Error::Assert);
            }
            Op::Tex(ref t) => {
                for l in bits_of(exec) {
                    self.tex(w, l, t)?;
                }
            }
            Op::Surf(ref s) => {
                for l in bits_of(exec) {
                    self.surf(w, l, s)?;
                }
            }
            Op::Query {
                surface,
                query,
                d,
                handle,
            } => {
                for l in bits_of(exec) {
                    self.query(w, l, surface, query, d, handle)?;
                }
            }
            Op::Wmma(ref x) => self.wmma(w, x, exec, line)?,
            Op::Nop | Op::Fence => {}
            Op::Trap => return Err(Error::Trap),
            Op::Unsupported(ref what) => {
                return Err(Error::Unsupported {
                    what: what.to_string(),
                })
            }
            // Control flow and warp operations are handled by `step`.
            _ => {}
        }
        Ok(())
    }

    /// Bytes of param scratch per thread.
    fn scratch_len(&self) -> usize {
        (u64::from(self.func.scratch_end).saturating_sub(PARAM_SCRATCH_BASE)) as usize
    }

    /// The low 32 bits of operand `s` if they are the same in every lane
    /// (an immediate, or a register holding one value); None otherwise.
    #[inline(always)]
    fn uniform(w: &Warp, s: Src) -> Option<u32> {
        match s {
            Src::Imm(v) => Some(v as u32),
            Src::Reg(r) => {
                let b = r as usize * 32;
                let v: &[u64; 32] = w.regs[b..b + 32].try_into().expect("32 lanes");
                let first = v[0] as u32;
                v.iter()
                    .fold(true, |same, &x| same & (x as u32 == first))
                    .then_some(first)
            }
            _ => None,
        }
    }

    /// The address of `a` in each lane.
    #[inline(always)]
    fn addresses(&self, w: &Warp, a: Addr) -> [u64; 32] {
        let off = a.off as u64;
        match a.base {
            // Computed in every lane: cheaper than picking the lanes.
            Some(r) => {
                let b = r as usize * 32;
                let base: &[u64; 32] = w.regs[b..b + 32].try_into().expect("32 lanes");
                let mut at = [0u64; 32];
                if a.narrow {
                    for (a, v) in at.iter_mut().zip(base) {
                        *a = v.wrapping_add(off) & 0xffff_ffff;
                    }
                } else {
                    for (a, v) in at.iter_mut().zip(base) {
                        *a = v.wrapping_add(off);
                    }
                }
                at
            }
            None => [off; 32],
        }
    }

    #[inline]
    fn address(&self, w: &Warp, a: Addr, l: usize) -> u64 {
        let base = match a.base {
            Some(r) => w.regs[r as usize * 32 + l],
            None => 0,
        };
        a.at(base)
    }

    /// Whether a generic address lies in the window of shared, local or
    /// parameter memory.
    #[inline]
    fn in_window(&self, at: u64) -> bool {
        let win = |b: u64| at.wrapping_sub(b) < WINDOW_SIZE;
        win(SHARED_WINDOW) || win(LOCAL_WINDOW) || win(PARAM_WINDOW)
    }

    /// Maps an address in `space` to a concrete space and offset.
    fn resolve(&self, space: Space, at: u64) -> (Space, u64) {
        let win = |b: u64| at.wrapping_sub(b) < WINDOW_SIZE;
        // The caller's address of the module variables is theirs too.
        if matches!(space, Space::Global | Space::Generic)
            && self.globals_alias != 0
            && at.wrapping_sub(self.globals_alias) < self.globals.len() as u64
        {
            return (Space::Global, GLOBALS_BASE + (at - self.globals_alias));
        }
        match space {
            Space::Generic => {
                if win(SHARED_WINDOW) {
                    (Space::Shared, at - SHARED_WINDOW)
                } else if win(LOCAL_WINDOW) {
                    (Space::Local, at - LOCAL_WINDOW)
                } else if win(PARAM_WINDOW) {
                    (Space::Param, at - PARAM_WINDOW)
                } else {
                    (Space::Global, at)
                }
            }
            s => (s, at),
        }
    }

    fn load(
        &mut self,
        w: &Warp,
        l: usize,
        space: Space,
        at: u64,
        buf: &mut [u8],
    ) -> Result<(), Error> {
        let len = buf.len() as u64;
        let (sp, off) = self.resolve(space, at);
        if off % len != 0 {
            return Err(Error::Misaligned {
                space: sp.name(),
                addr: at,
                len,
            });
        }
        let oob = || Error::OutOfBounds {
            space: sp.name(),
            addr: at,
            len,
        };
        let slot = w.id as usize * 32 + l;
        match sp {
            Space::Global | Space::Const => {
                if sp == Space::Const || off.wrapping_sub(GLOBALS_BASE) < WINDOW_SIZE {
                    let r = range(off.wrapping_sub(GLOBALS_BASE), len, self.globals.len())
                        .ok_or_else(oob)?;
                    copy(buf, &self.globals[r]);
                    Ok(())
                } else {
                    self.mem.read(off, buf)
                }
            }
            Space::Shared => {
                let r = range(off, len, self.shared.len()).ok_or_else(oob)?;
                copy(buf, &self.shared[r]);
                Ok(())
            }
            Space::Local => {
                let lb = self.func.local_bytes as usize;
                let off = match self.outer_local(w, l, off, len, space == Space::Generic) {
                    Outer::Live(off) => off,
                    Outer::Saved(k, at) => {
                        let bytes = w.frames[l][k].bytes.borrow();
                        copy(buf, &bytes[at..at + len as usize]);
                        return Ok(());
                    }
                    Outer::Gone => return Err(oob()),
                };
                let r = range(off, len, lb).ok_or_else(oob)?;
                let base = slot * lb;
                copy(buf, &self.local[base + r.start..base + r.end]);
                Ok(())
            }
            Space::Param => {
                if off < PARAM_SCRATCH_BASE {
                    let r = range(off, len, self.func.param_bytes as usize).ok_or_else(oob)?;
                    copy(buf, &self.params[r]);
                } else {
                    let sb = self.scratch_len();
                    let r = range(off - PARAM_SCRATCH_BASE, len, sb).ok_or_else(oob)?;
                    let base = slot * sb;
                    copy(buf, &self.pscratch[base + r.start..base + r.end]);
                }
                Ok(())
            }
            Space::Generic => Err(oob()),
        }
    }

    fn store(
        &mut self,
        w: &Warp,
        l: usize,
        space: Space,
        at: u64,
        data: &[u8],
    ) -> Result<(), Error> {
        let len = data.len() as u64;
        let (sp, off) = self.resolve(space, at);
        if off % len != 0 {
            return Err(Error::Misaligned {
                space: sp.name(),
                addr: at,
                len,
            });
        }
        let oob = || Error::OutOfBounds {
            space: sp.name(),
            addr: at,
            len,
        };
        let slot = w.id as usize * 32 + l;
        match sp {
            Space::Global => {
                if off.wrapping_sub(GLOBALS_BASE) < WINDOW_SIZE {
                    let r = range(off - GLOBALS_BASE, len, self.globals.len()).ok_or_else(oob)?;
                    copy(&mut self.globals[r], data);
                    Ok(())
                } else {
                    self.mem.write(off, data)
                }
            }
            Space::Shared => {
                let r = range(off, len, self.shared.len()).ok_or_else(oob)?;
                copy(&mut self.shared[r], data);
                Ok(())
            }
            Space::Local => {
                let lb = self.func.local_bytes as usize;
                let off = match self.outer_local(w, l, off, len, space == Space::Generic) {
                    Outer::Live(off) => off,
                    Outer::Saved(k, at) => {
                        let mut bytes = w.frames[l][k].bytes.borrow_mut();
                        copy(&mut bytes[at..at + len as usize], data);
                        return Ok(());
                    }
                    Outer::Gone => return Err(oob()),
                };
                let r = range(off, len, lb).ok_or_else(oob)?;
                let base = slot * lb;
                copy(&mut self.local[base + r.start..base + r.end], data);
                Ok(())
            }
            Space::Param => {
                // Kernel parameters are read-only.
                let sb = self.scratch_len();
                let r = range(
                    off.checked_sub(PARAM_SCRATCH_BASE).ok_or_else(oob)?,
                    len,
                    sb,
                )
                .ok_or_else(oob)?;
                let base = slot * sb;
                copy(&mut self.pscratch[base + r.start..base + r.end], data);
                Ok(())
            }
            Space::Const | Space::Generic => Err(oob()),
        }
    }
}

/// `dst.copy_from_slice(src)` with the sizes of loads and stores spelled
/// out, so that they compile to moves instead of calls of `memcpy` (also
/// for [`crate::Memory`] implementations copying a lane's element:
/// `fairgpu_ptx::copy_element`).
#[inline(always)]
pub fn copy(dst: &mut [u8], src: &[u8]) {
    match dst.len() {
        1 => dst[..1].copy_from_slice(&src[..1]),
        2 => dst[..2].copy_from_slice(&src[..2]),
        4 => dst[..4].copy_from_slice(&src[..4]),
        8 => dst[..8].copy_from_slice(&src[..8]),
        16 => dst[..16].copy_from_slice(&src[..16]),
        // A half-warp's consecutive elements (16 of 2, 4 or 8 bytes).
        32 => dst[..32].copy_from_slice(&src[..32]),
        64 => dst[..64].copy_from_slice(&src[..64]),
        128 => dst[..128].copy_from_slice(&src[..128]),
        _ => dst.copy_from_slice(src),
    }
}

/// `off..off+len` if it lies within `size`.
fn range(off: u64, len: u64, size: usize) -> Option<std::ops::Range<usize>> {
    let end = off.checked_add(len)?;
    if end > size as u64 {
        return None;
    }
    Some(off as usize..end as usize)
}

fn boolop(op: BoolOp, a: bool, b: bool) -> bool {
    match op {
        BoolOp::And => a && b,
        BoolOp::Or => a || b,
        BoolOp::Xor => a != b,
    }
}

#[inline(always)]
fn mul_wide(ty: Ty, bits: u32, x: u64, y: u64) -> u64 {
    if ty.is_signed() {
        (sext(x, bits).wrapping_mul(sext(y, bits)) as u64) & mask_of(2 * bits)
    } else {
        (x & mask_of(bits)).wrapping_mul(y & mask_of(bits)) & mask_of(2 * bits)
    }
}

/// `fma.rn.f32` (`m`: with or without `.ftz`, never `.sat` here) on the
/// host's fused multiply-add: one instruction per lane in the AVX2 copies,
/// correctly rounded like [`fma`].
#[inline(always)]
fn fma_rn_f32_host(m: FMode, x: u64, y: u64, z: u64) -> u64 {
    let (x, y, z) = ftz3(m.ftz, f32b(x), f32b(y), f32b(z));
    f32res(x.mul_add(y, z), m)
}

/// Integer binary operation on `ty`; the result is masked to its width.
#[inline(always)]
fn ibin(op: IBin, ty: Ty, a: u64, b: u64) -> u64 {
    let bits = ty.bits();
    let m = mask_of(bits);
    let signed = ty.is_signed();
    let (ua, ub) = (a & m, b & m);
    let (sa, sb) = (sext(a, bits), sext(b, bits));
    let r = match op {
        IBin::Add => ua.wrapping_add(ub),
        IBin::Sub => ua.wrapping_sub(ub),
        IBin::AddSat => (sa as i32).saturating_add(sb as i32) as u32 as u64,
        IBin::SubSat => (sa as i32).saturating_sub(sb as i32) as u32 as u64,
        IBin::MulLo => ua.wrapping_mul(ub),
        IBin::MulHi => {
            if signed {
                ((i128::from(sa) * i128::from(sb)) >> bits) as u64
            } else {
                ((u128::from(ua) * u128::from(ub)) >> bits) as u64
            }
        }
        IBin::Mul24Lo | IBin::Mul24Hi => {
            let p = if signed {
                (sext(a, 24) * sext(b, 24)) as u64
            } else {
                (a & 0xff_ffff) * (b & 0xff_ffff)
            };
            if op == IBin::Mul24Lo {
                p
            } else {
                p >> 16
            }
        }
        // Division by zero is undefined in PTX; like the hardware's
        // sequences, the quotient is all ones and the remainder the
        // dividend.
        IBin::Div => {
            if ub == 0 {
                m
            } else if signed {
                sa.wrapping_div(sb) as u64
            } else {
                ua / ub
            }
        }
        IBin::Rem => {
            if ub == 0 {
                ua
            } else if signed {
                sa.wrapping_rem(sb) as u64
            } else {
                ua % ub
            }
        }
        IBin::Min => {
            if signed {
                sa.min(sb) as u64
            } else {
                ua.min(ub)
            }
        }
        IBin::Max => {
            if signed {
                sa.max(sb) as u64
            } else {
                ua.max(ub)
            }
        }
        IBin::And => ua & ub,
        IBin::Or => ua | ub,
        IBin::Xor => ua ^ ub,
        IBin::Shl => {
            let n = b & 0xffff_ffff;
            if n >= u64::from(bits) {
                0
            } else {
                ua << n
            }
        }
        IBin::BmskClamp | IBin::BmskWrap => {
            let (a, b) = (a as u32, b as u32);
            let (pos, width) = (a & 31, b & 31);
            let clamp = op == IBin::BmskClamp;
            // From bit `pos` up, unless the position is past the word.
            let low = if clamp && a >= 32 { 0 } else { u32::MAX << pos };
            // Ones from the mask's end up, cleared below: none when the
            // mask reaches bit 31 (or its width is 32 or more).
            let high = if pos + width >= 32 || (clamp && (a >= 32 || b >= 32)) {
                0
            } else if width == 0 {
                u32::MAX
            } else {
                u32::MAX << (pos + width)
            };
            u64::from(low & !high)
        }
        IBin::Shr => {
            let n = (b & 0xffff_ffff).min(u64::from(bits) - 1 + u64::from(!signed));
            if signed {
                (sa >> n.min(63)) as u64
            } else if n >= u64::from(bits) {
                0
            } else {
                ua >> n
            }
        }
    };
    r & m
}

#[inline(always)]
fn iun(op: IUn, ty: Ty, a: u64) -> u64 {
    let bits = ty.bits();
    let m = mask_of(bits);
    let ua = a & m;
    let sa = sext(a, bits);
    match op {
        IUn::Abs => sa.wrapping_abs() as u64 & m,
        IUn::Neg => sa.wrapping_neg() as u64 & m,
        IUn::Not => !ua & m,
        IUn::Cnot => u64::from(ua == 0),
        IUn::Popc => u64::from(ua.count_ones()),
        IUn::Clz => u64::from(ua.leading_zeros() - (64 - bits)),
        IUn::Brev => ua.reverse_bits() >> (64 - bits),
        IUn::Bfind | IUn::BfindShiftAmt => {
            let x = if ty.is_signed() && sa < 0 {
                !ua & m
            } else {
                ua
            };
            if x == 0 {
                0xffff_ffff
            } else {
                let msb = 63 - x.leading_zeros();
                u64::from(if op == IUn::Bfind {
                    msb
                } else {
                    bits - 1 - msb
                })
            }
        }
    }
}

/// A SIMD video instruction on one thread's operands (PTX ISA, "SIMD video
/// instructions"): each lane of `a` and `b`, sign- or zero-extended, gives
/// a full-precision result; with `.add` the lanes' results are summed into
/// `c`, otherwise each is clamped (`.sat`) or truncated to its lane of `d`.
fn video(v: Video, a: u32, b: u32, c: u32) -> u32 {
    let bits = 32 / u32::from(v.lanes);
    let mask = (1u64 << bits) - 1;
    let lane = |x: u32, i: u32, signed: bool| -> i64 {
        let raw = (u64::from(x) >> (i * bits)) & mask;
        if signed {
            sext(raw, bits)
        } else {
            raw as i64
        }
    };
    let (lo, hi) = if v.d_signed {
        (-(1i64 << (bits - 1)), (1i64 << (bits - 1)) - 1)
    } else {
        (0, mask as i64)
    };
    let mut sum = 0i64;
    let mut out = 0u32;
    for i in 0..u32::from(v.lanes) {
        let (x, y) = (lane(a, i, v.a_signed), lane(b, i, v.b_signed));
        let r = match v.op {
            VideoOp::Add => x + y,
            VideoOp::Sub => x - y,
            VideoOp::Absdiff => (x - y).abs(),
            VideoOp::Min => x.min(y),
            VideoOp::Max => x.max(y),
        };
        if v.add {
            sum += r;
        } else {
            let r = if v.sat { r.clamp(lo, hi) } else { r };
            out |= (((r as u64) & mask) << (i * bits)) as u32;
        }
    }
    if v.add {
        (i64::from(c) + sum) as u32
    } else {
        out
    }
}

fn prmt(mode: Option<u8>, src: u64, sel: u32) -> u32 {
    let byte = |i: u32| ((src >> (8 * (i & 7))) & 0xff) as u32;
    let mut r = 0u32;
    match mode {
        None => {
            for i in 0..4 {
                let s = (sel >> (4 * i)) & 0xf;
                let mut v = byte(s & 7);
                if s & 8 != 0 {
                    v = if v & 0x80 != 0 { 0xff } else { 0 };
                }
                r |= v << (8 * i);
            }
        }
        Some(m) => {
            let s = sel & 3;
            for i in 0..4u32 {
                let idx = match m {
                    0 => s + i,
                    1 => s.wrapping_sub(i) & 7,
                    2 => s,
                    3 => i.max(s),
                    4 => i.min(s),
                    _ => 2 * (s & 1) + (i & 1),
                };
                r |= byte(idx) << (8 * i);
            }
        }
    }
    r
}

/// Round to nearest, subnormals kept: plain `add.f32` and friends.
const RN: FMode = FMode {
    rnd: Rnd::Rn,
    ftz: false,
    sat: false,
};
/// Round to nearest, subnormals flushed (`-ftz=true`, fast math).
const RN_FTZ: FMode = FMode {
    rnd: Rnd::Rn,
    ftz: true,
    sat: false,
};

/// `fma` of `ty` (f32 or f64; f64 rounds to nearest: the caller refuses
/// other roundings).
#[inline(always)]
fn fma(ty: Ty, m: FMode, x: u64, y: u64, z: u64) -> u64 {
    if ty == Ty::F64 {
        f64::from_bits(x)
            .mul_add(f64::from_bits(y), f64::from_bits(z))
            .to_bits()
    } else {
        let (x, y, z) = ftz3(m.ftz, f32b(x), f32b(y), f32b(z));
        f32res(fma_f32(x, y, z, m.rnd), m)
    }
}

fn ftz3(on: bool, a: f32, b: f32, c: f32) -> (f32, f32, f32) {
    if on {
        (ftz32(a), ftz32(b), ftz32(c))
    } else {
        (a, b, c)
    }
}

/// An f32 result with `.ftz`/`.sat` applied, NaN canonical.
fn f32res(x: f32, m: FMode) -> u64 {
    let x = if m.ftz { ftz32(x) } else { x };
    let x = if m.sat { sat32(x) } else { x };
    f32out(x)
}

fn fmin<T: PartialOrd + Copy>(a: T, b: T, a_nan: bool, b_nan: bool, a_neg: bool, max: bool) -> T {
    if a_nan {
        return b;
    }
    if b_nan {
        return a;
    }
    if a == b {
        // -0 < +0.
        return if a_neg != max { a } else { b };
    }
    if (a < b) != max {
        a
    } else {
        b
    }
}

#[inline(always)]
fn fbin(op: FBin, ty: Ty, m: FMode, x: u64, y: u64) -> u64 {
    if ty == Ty::F64 {
        let (a, b) = (f64::from_bits(x), f64::from_bits(y));
        let r = match op {
            FBin::Add => add_f64(a, b, m.rnd),
            FBin::Sub => add_f64(a, -b, m.rnd),
            FBin::Mul => mul_f64(a, b, m.rnd),
            FBin::Div => div_f64(a, b, m.rnd),
            FBin::Min | FBin::Max => {
                if a.is_nan() && b.is_nan() {
                    f64::NAN
                } else {
                    fmin(
                        a,
                        b,
                        a.is_nan(),
                        b.is_nan(),
                        a.is_sign_negative(),
                        op == FBin::Max,
                    )
                }
            }
            FBin::MinNaN | FBin::MaxNaN => {
                if a.is_nan() || b.is_nan() {
                    f64::NAN
                } else {
                    fmin(a, b, false, false, a.is_sign_negative(), op == FBin::MaxNaN)
                }
            }
            FBin::Copysign => b.copysign(a),
        };
        return r.to_bits();
    }
    let (a, b) = (f32b(x), f32b(y));
    let (a, b) = if m.ftz { (ftz32(a), ftz32(b)) } else { (a, b) };
    let r = match op {
        FBin::Add => add_f32(a, b, m.rnd),
        FBin::Sub => add_f32(a, -b, m.rnd),
        FBin::Mul => mul_f32(a, b, m.rnd),
        FBin::Div => div_f32(a, b, m.rnd),
        FBin::Min | FBin::Max => {
            if a.is_nan() && b.is_nan() {
                f32::NAN
            } else {
                fmin(
                    a,
                    b,
                    a.is_nan(),
                    b.is_nan(),
                    a.is_sign_negative(),
                    op == FBin::Max,
                )
            }
        }
        FBin::MinNaN | FBin::MaxNaN => {
            if a.is_nan() || b.is_nan() {
                f32::NAN
            } else {
                fmin(a, b, false, false, a.is_sign_negative(), op == FBin::MaxNaN)
            }
        }
        FBin::Copysign => return u64::from(b.copysign(a).to_bits()),
    };
    f32res(r, m)
}

/// `rcp.approx.ftz.f64` and `rsqrt.approx.ftz.f64` as the PTX ISA defines
/// them: the function of `a`'s 32 most significant bits (sign, exponent,
/// 20 mantissa bits; a subnormal is flushed to a signed zero), its result's
/// 32 most significant bits, the low 32 zero. Here the function is computed
/// exactly and truncated, an approximation within the instruction's error.
fn high_word_approx(a: f64, f: impl Fn(f64) -> f64) -> u64 {
    const HIGH: u64 = 0xffff_ffff_0000_0000;
    let a = if a.is_subnormal() {
        0.0f64.copysign(a)
    } else {
        a
    };
    let r = f(f64::from_bits(a.to_bits() & HIGH));
    let r = if r.is_subnormal() {
        0.0f64.copysign(r)
    } else {
        r
    };
    if r.is_nan() {
        return r.to_bits();
    }
    r.to_bits() & HIGH
}

#[inline(always)]
fn fun(op: FUn, ty: Ty, m: FMode, x: u64) -> u64 {
    if ty == Ty::F64 {
        let a = f64::from_bits(x);
        let r = match op {
            FUn::Abs => return x & !(1 << 63),
            FUn::Neg => return x ^ (1 << 63),
            FUn::Rcp => div_f64(1.0, a, m.rnd),
            FUn::RcpApprox if m.ftz => return high_word_approx(a, |x| 1.0 / x),
            FUn::RcpApprox => 1.0 / a,
            FUn::Sqrt => sqrt_f64(a, m.rnd),
            FUn::SqrtApprox => a.sqrt(),
            FUn::Rsqrt if m.ftz => return high_word_approx(a, |x| 1.0 / x.sqrt()),
            FUn::Rsqrt => 1.0 / a.sqrt(),
            // Rejected at decode time for f64.
            FUn::Sin | FUn::Cos | FUn::Lg2 | FUn::Ex2 | FUn::Tanh | FUn::Tf32 => f64::NAN,
        };
        return r.to_bits();
    }
    let a = f32b(x);
    let a = if m.ftz { ftz32(a) } else { a };
    let r = match op {
        FUn::Abs => {
            return f32res(
                f32::from_bits(a.to_bits() & 0x7fff_ffff),
                FMode { sat: false, ..m },
            )
        }
        FUn::Neg => return u64::from(if m.ftz { ftz32(-a) } else { -a }.to_bits()),
        FUn::Rcp => div_f32(1.0, a, m.rnd),
        FUn::RcpApprox => 1.0 / a,
        FUn::Sqrt => sqrt_f32(a, m.rnd),
        FUn::SqrtApprox => a.sqrt(),
        FUn::Rsqrt => 1.0 / a.sqrt(),
        FUn::Sin => a.sin(),
        FUn::Cos => a.cos(),
        FUn::Lg2 => crate::float::lg2_approx_f32(a),
        FUn::Ex2 => crate::float::ex2_approx_f32(a),
        FUn::Tanh => a.tanh(),
        FUn::Tf32 if a.is_nan() => return 0x7fff_ffff,
        // Half of the dropped bits' weight, added to the magnitude, then
        // truncated: ties go away from zero; a carry into the exponent
        // (up to infinity) is the correct rounding.
        FUn::Tf32 => return u64::from(a.to_bits().wrapping_add(0x1000) & !0x1fff),
    };
    f32res(r, m)
}

/// Flushes an f16 subnormal to a zero of the same sign.
fn ftz16(h: u16) -> u16 {
    if h & 0x7c00 == 0 {
        h & 0x8000
    } else {
        h
    }
}

/// The modifiers of a half-precision instruction.
#[derive(Debug, Clone, Copy)]
struct HalfMode {
    fmt: HFmt,
    ftz: bool,
    sat: bool,
    relu: bool,
    nan: bool,
}

/// `min`/`max` of two halves: a NaN operand yields the other one (both NaN,
/// or either with `.NaN`: the canonical NaN), and -0 is below +0.
fn half_minmax(max: bool, nan: bool, fmt: HFmt, x: u16, y: u16) -> u16 {
    let (xn, yn) = (fmt.is_nan(x), fmt.is_nan(y));
    let (a, b) = (fmt.to_f64(x), fmt.to_f64(y));
    if xn && yn || nan && (xn || yn) {
        fmt.nan()
    } else if xn {
        y
    } else if yn {
        x
    } else if a == b {
        if (x & 0x8000 != 0) != max {
            x
        } else {
            y
        }
    } else if (a < b) != max {
        x
    } else {
        y
    }
}

/// `.relu`: NaN becomes the canonical NaN, anything with the sign bit set
/// (negative values and -0) becomes +0.
fn relu16(fmt: HFmt, r: u16) -> u16 {
    if fmt.is_nan(r) {
        fmt.nan()
    } else if r & 0x8000 != 0 {
        0
    } else {
        r
    }
}

/// `cvt.rn{.relu}` of an f32 to f16 or bf16, to nearest even.
fn f32_to_half(fmt: HFmt, relu: bool, x: f32) -> u16 {
    let r = match fmt {
        HFmt::F16 => f32_to_f16(x),
        HFmt::BF16 => f32_to_bf16(x),
    };
    if relu {
        relu16(fmt, r)
    } else {
        r
    }
}

/// One half-precision operation, rounded to nearest even.
fn half(op: HOp, mode: HalfMode, x: u16, y: u16, z: u16) -> u16 {
    let HalfMode {
        fmt,
        ftz,
        sat,
        relu,
        nan,
    } = mode;
    // `.ftz` exists for f16, and for bf16's `ex2.approx.ftz`.
    let flush = |h: u16| match fmt {
        HFmt::F16 => ftz16(h),
        HFmt::BF16 if h & 0x7f80 == 0 => h & 0x8000,
        HFmt::BF16 => h,
    };
    let (x, y, z) = if ftz {
        (flush(x), flush(y), flush(z))
    } else {
        (x, y, z)
    };
    let (a, b, c) = (fmt.to_f64(x), fmt.to_f64(y), fmt.to_f64(z));
    // Products of halves are exact in f64; sums carry their exact error
    // term, so every result is rounded once.
    let r = match op {
        HOp::Neg => return x ^ 0x8000,
        HOp::Abs => return x & 0x7fff,
        HOp::Min | HOp::Max => return half_minmax(op == HOp::Max, nan, fmt, x, y),
        HOp::Add => {
            let (s, e) = two_sum(a, b);
            fmt.round(s, e)
        }
        HOp::Sub => {
            let (s, e) = two_sum(a, -b);
            fmt.round(s, e)
        }
        HOp::Mul => fmt.round(a * b, 0.0),
        HOp::Tanh => fmt.round(a.tanh(), 0.0),
        HOp::Ex2 => fmt.round(a.exp2(), 0.0),
        HOp::Fma => {
            let (s, e) = two_sum(a * b, c);
            fmt.round(s, e)
        }
    };
    let r = if ftz { flush(r) } else { r };
    let r = if relu { relu16(fmt, r) } else { r };
    if sat {
        let v = f16_to_f32(r);
        if v.is_nan() || v <= 0.0 {
            return 0;
        }
        if v >= 1.0 {
            return 0x3c00;
        }
    }
    r
}

#[inline(always)]
fn compare(cmp: Cmp, ty: Ty, ftz: bool, x: u64, y: u64) -> bool {
    if ty.is_float() {
        let (a, b) = if ty == Ty::F64 {
            (f64::from_bits(x), f64::from_bits(y))
        } else if ty == Ty::F16 {
            let (a, b) = (x as u16, y as u16);
            let (a, b) = if ftz { (ftz16(a), ftz16(b)) } else { (a, b) };
            (f64::from(f16_to_f32(a)), f64::from(f16_to_f32(b)))
        } else if ty == Ty::BF16 {
            (
                f64::from(bf16_to_f32(x as u16)),
                f64::from(bf16_to_f32(y as u16)),
            )
        } else {
            let (a, b) = (f32b(x), f32b(y));
            let (a, b) = if ftz { (ftz32(a), ftz32(b)) } else { (a, b) };
            (f64::from(a), f64::from(b))
        };
        let nan = a.is_nan() || b.is_nan();
        return match cmp {
            Cmp::Eq => !nan && a == b,
            Cmp::Ne => !nan && a != b,
            Cmp::Lt => !nan && a < b,
            Cmp::Le => !nan && a <= b,
            Cmp::Gt => !nan && a > b,
            Cmp::Ge => !nan && a >= b,
            Cmp::Equ => nan || a == b,
            Cmp::Neu => nan || a != b,
            Cmp::Ltu => nan || a < b,
            Cmp::Leu => nan || a <= b,
            Cmp::Gtu => nan || a > b,
            Cmp::Geu => nan || a >= b,
            Cmp::Num => !nan,
            Cmp::Nan => nan,
            Cmp::Lo | Cmp::Ls | Cmp::Hi | Cmp::Hs => false,
        };
    }
    let bits = ty.bits();
    let (ua, ub) = (x & mask_of(bits), y & mask_of(bits));
    let (sa, sb) = (sext(x, bits), sext(y, bits));
    let signed = ty.is_signed();
    match cmp {
        Cmp::Eq => ua == ub,
        Cmp::Ne => ua != ub,
        Cmp::Lt if signed => sa < sb,
        Cmp::Le if signed => sa <= sb,
        Cmp::Gt if signed => sa > sb,
        Cmp::Ge if signed => sa >= sb,
        Cmp::Lt | Cmp::Lo => ua < ub,
        Cmp::Le | Cmp::Ls => ua <= ub,
        Cmp::Gt | Cmp::Hi => ua > ub,
        Cmp::Ge | Cmp::Hs => ua >= ub,
        _ => false,
    }
}

/// A float source of `cvt` as f64 (exact), or `None` for packed types.
fn float_in(sty: Ty, ftz: bool, x: u64) -> f64 {
    match sty {
        Ty::F64 => f64::from_bits(x),
        Ty::F32 => {
            let a = f32b(x);
            f64::from(if ftz { ftz32(a) } else { a })
        }
        Ty::F16 => f64::from(f16_to_f32(x as u16)),
        _ => f64::from(bf16_to_f32(x as u16)),
    }
}

#[inline(always)]
pub(crate) fn cvt(kind: CvtKind, dty: Ty, sty: Ty, sat: bool, ftz: bool, x: u64) -> Option<u64> {
    let dbits = dty.bits();
    Some(match kind {
        CvtKind::IntInt => {
            let sbits = sty.bits();
            let v: i128 = if sty.is_signed() {
                i128::from(sext(x, sbits))
            } else {
                i128::from(x & mask_of(sbits))
            };
            let v = if sat {
                let (lo, hi) = if dty.is_signed() {
                    (-(1i128 << (dbits - 1)), (1i128 << (dbits - 1)) - 1)
                } else {
                    (0, (1i128 << dbits) - 1)
                };
                v.clamp(lo, hi)
            } else {
                v
            };
            let r = v as u64 & mask_of(dbits);
            if dty.is_signed() {
                sext(r, dbits) as u64
            } else {
                r
            }
        }
        CvtKind::IntFloat(rnd) => {
            let sbits = sty.bits();
            let (neg, mag) = if sty.is_signed() {
                let s = sext(x, sbits);
                (s < 0, s.unsigned_abs())
            } else {
                (false, x & mask_of(sbits))
            };
            match dty {
                Ty::F32 => {
                    let v = int_to_float(neg, mag, rnd, 24) as f32;
                    let v = if sat { sat32(v) } else { v };
                    u64::from(v.to_bits())
                }
                Ty::F64 => int_to_float(neg, mag, rnd, 53).to_bits(),
                // Rounded once to the target's significant bits (exact in
                // f64); `f64_to_half` then only decides the overflow.
                Ty::BF16 => u64::from(f64_to_half(int_to_float(neg, mag, rnd, 8), true, rnd)),
                Ty::F16 => u64::from(f64_to_half(int_to_float(neg, mag, rnd, 11), false, rnd)),
                _ => return None,
            }
        }
        CvtKind::FloatInt(rnd) => {
            let v = round_integral_f64(float_in(sty, ftz, x), rnd);
            let r = if v.is_nan() {
                0
            } else if dty.is_signed() {
                let lo = -(2f64.powi(dbits as i32 - 1));
                let hi = 2f64.powi(dbits as i32 - 1) - 1.0;
                let c = v.clamp(lo, hi) as i64;
                c as u64 & mask_of(dbits)
            } else {
                let hi = 2f64.powi(dbits as i32) - 1.0;
                v.clamp(0.0, hi) as u64
            };
            if dty.is_signed() {
                sext(r, dbits) as u64
            } else {
                r
            }
        }
        CvtKind::FloatFloat(rnd) => {
            let v = float_in(sty, ftz, x);
            match dty {
                // `.sat` clamps to [0, 1], NaN to 0.
                Ty::F64 if sat => (if v.is_nan() { 0.0 } else { v.clamp(0.0, 1.0) }).to_bits(),
                Ty::F64 => v.to_bits(),
                Ty::F32 => {
                    // Widening sources are exact; f64 narrows with `rnd`.
                    let r = round_to_f32(v, 0.0, rnd);
                    let r = if ftz { ftz32(r) } else { r };
                    let r = if sat { sat32(r) } else { r };
                    f32out(r)
                }
                Ty::F16 | Ty::BF16 => {
                    // `.sat` clamps to [0, 1], NaN to 0; both bounds are
                    // values of the target.
                    let v = if sat && v.is_nan() {
                        0.0
                    } else if sat {
                        v.clamp(0.0, 1.0)
                    } else {
                        v
                    };
                    u64::from(f64_to_half(v, dty == Ty::BF16, rnd))
                }
                _ => return None,
            }
        }
        CvtKind::FloatRound(rnd) => match dty {
            Ty::F32 => {
                let a = f32b(x);
                let a = if ftz { ftz32(a) } else { a };
                let r = round_integral_f32(a, rnd);
                let r = if ftz { ftz32(r) } else { r };
                let r = if sat { sat32(r) } else { r };
                f32out(r)
            }
            Ty::F64 => round_integral_f64(f64::from_bits(x), rnd).to_bits(),
            // A 16-bit float rounded to an integer is a value of its format
            // (its magnitudes from 2^8, resp. 2^11, on are integers): the
            // encoding is exact.
            Ty::F16 | Ty::BF16 => {
                let r = round_integral_f64(float_in(dty, false, x), rnd);
                u64::from(f64_to_half(r, dty == Ty::BF16, Rnd::Rn))
            }
            _ => return None,
        },
    })
}

/// The new value of an atomic, or `None` when nothing is written.
fn atom(op: AtomOp, ty: Ty, old: u64, b: u64, c: u64) -> Option<u64> {
    let bits = ty.bits();
    let m = mask_of(bits);
    Some(match (op, ty) {
        (AtomOp::Add, Ty::F32) => {
            // atom.add.f32 flushes subnormal inputs and results.
            let r = ftz32(ftz32(f32b(old)) + ftz32(f32b(b)));
            f32out(r)
        }
        (AtomOp::Add, Ty::F64) => (f64::from_bits(old) + f64::from_bits(b)).to_bits(),
        (AtomOp::Add, _) => old.wrapping_add(b) & m,
        (AtomOp::Min, _) => ibin(IBin::Min, ty, old, b),
        (AtomOp::Max, _) => ibin(IBin::Max, ty, old, b),
        (AtomOp::Inc, _) => {
            let (o, b) = (old & m, b & m);
            if o >= b {
                0
            } else {
                o + 1
            }
        }
        (AtomOp::Dec, _) => {
            let (o, b) = (old & m, b & m);
            if o == 0 || o > b {
                b
            } else {
                o - 1
            }
        }
        (AtomOp::Cas, _) => {
            if old & m == b & m {
                c & m
            } else {
                return None;
            }
        }
        (AtomOp::Exch, _) => b & m,
        (AtomOp::And, _) => old & b & m,
        (AtomOp::Or, _) => (old | b) & m,
        (AtomOp::Xor, _) => (old ^ b) & m,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_edge_cases() {
        assert_eq!(ibin(IBin::Div, Ty::U32, 7, 0), 0xffff_ffff);
        assert_eq!(ibin(IBin::Rem, Ty::S32, 7, 0), 7);
        assert_eq!(
            ibin(IBin::Div, Ty::S32, 0x8000_0000, 0xffff_ffff),
            0x8000_0000
        );
        assert_eq!(ibin(IBin::Rem, Ty::S32, 0x8000_0000, 0xffff_ffff), 0);
        assert_eq!(
            ibin(IBin::Div, Ty::S32, (-7i32) as u32 as u64, 2),
            (-3i32) as u32 as u64
        );
        assert_eq!(ibin(IBin::Shl, Ty::B32, 1, 32), 0);
        // bmsk: the PTX ISA's example, then the edges of both modes.
        let bmsk = |op, a, b| ibin(op, Ty::B32, a, b);
        assert_eq!(bmsk(IBin::BmskWrap, 1, 2), 0x6);
        assert_eq!(bmsk(IBin::BmskClamp, 0, 32), 0xffff_ffff);
        assert_eq!(bmsk(IBin::BmskClamp, 4, 40), 0xffff_fff0);
        assert_eq!(bmsk(IBin::BmskClamp, 32, 3), 0);
        assert_eq!(bmsk(IBin::BmskWrap, 33, 2), 0x6);
        assert_eq!(bmsk(IBin::BmskWrap, 30, 4), 0xc000_0000);
        assert_eq!(bmsk(IBin::BmskClamp, 0, 0), 0);
        assert_eq!(bmsk(IBin::BmskClamp, 8, 8), 0xff00);
        assert_eq!(ibin(IBin::Shr, Ty::S32, 0x8000_0000, 40), 0xffff_ffff);
        assert_eq!(ibin(IBin::Shr, Ty::U32, 0x8000_0000, 40), 0);
        assert_eq!(ibin(IBin::Shr, Ty::S64, 1 << 63, 63), u64::MAX);
        assert_eq!(
            ibin(IBin::MulHi, Ty::S32, (-2i32) as u32 as u64, 3),
            0xffff_ffff
        );
        assert_eq!(ibin(IBin::MulHi, Ty::U64, u64::MAX, u64::MAX), u64::MAX - 1);
        assert_eq!(ibin(IBin::AddSat, Ty::S32, 0x7fff_ffff, 1), 0x7fff_ffff);
        assert_eq!(
            ibin(IBin::Mul24Hi, Ty::U32, 0xff_ffff, 0xff_ffff),
            0xffff_fe00
        );
        assert_eq!(iun(IUn::Bfind, Ty::U32, 0), 0xffff_ffff);
        assert_eq!(iun(IUn::Bfind, Ty::S32, 0xffff_ffff), 0xffff_ffff);
        assert_eq!(iun(IUn::Bfind, Ty::S32, 0xffff_fffe), 0);
        assert_eq!(iun(IUn::BfindShiftAmt, Ty::U32, 1), 31);
        assert_eq!(iun(IUn::Clz, Ty::B32, 1), 31);
        assert_eq!(iun(IUn::Clz, Ty::B64, 0), 64);
        assert_eq!(iun(IUn::Brev, Ty::B32, 1), 0x8000_0000);
        assert_eq!(iun(IUn::Abs, Ty::S32, 0x8000_0000), 0x8000_0000);
    }

    #[test]
    fn permutes() {
        let src = 0x8877_6655_4433_2211u64;
        assert_eq!(prmt(None, src, 0x3210), 0x4433_2211);
        assert_eq!(prmt(None, src, 0x7654), 0x8877_6655);
        assert_eq!(prmt(None, src, 0x000f), 0x1111_11ff);
        assert_eq!(prmt(Some(0), src, 1), 0x5544_3322);
        assert_eq!(prmt(Some(1), src, 0), 0x6677_8811);
        assert_eq!(prmt(Some(3), src, 2), 0x4433_3333);
        assert_eq!(prmt(Some(4), src, 2), 0x3333_2211);
        assert_eq!(prmt(Some(5), src, 1), 0x4433_4433);
    }

    #[test]
    fn conversions() {
        let c = |k, d, s, sat, x| cvt(k, d, s, sat, false, x).unwrap();
        assert_eq!(
            c(CvtKind::IntInt, Ty::S32, Ty::S8, false, 0x80),
            0xffff_ffff_ffff_ff80
        );
        assert_eq!(c(CvtKind::IntInt, Ty::U8, Ty::S32, true, 300), 255);
        assert_eq!(
            c(
                CvtKind::IntInt,
                Ty::U8,
                Ty::S32,
                true,
                (-5i32) as u32 as u64
            ),
            0
        );
        assert_eq!(c(CvtKind::IntInt, Ty::U16, Ty::U32, false, 0x12345), 0x2345);
        let f = |v: f32| u64::from(v.to_bits());
        assert_eq!(
            c(CvtKind::FloatInt(Rnd::Rn), Ty::S32, Ty::F32, false, f(2.5)),
            2
        );
        assert_eq!(
            c(CvtKind::FloatInt(Rnd::Rm), Ty::S32, Ty::F32, false, f(-2.5)) as u32,
            (-3i32) as u32
        );
        assert_eq!(
            c(CvtKind::FloatInt(Rnd::Rz), Ty::S32, Ty::F32, false, f(1e20)) as u32,
            i32::MAX as u32
        );
        assert_eq!(
            c(CvtKind::FloatInt(Rnd::Rz), Ty::U32, Ty::F32, false, f(-1.0)),
            0
        );
        assert_eq!(
            c(
                CvtKind::FloatInt(Rnd::Rz),
                Ty::S32,
                Ty::F32,
                false,
                f(f32::NAN)
            ),
            0
        );
        assert_eq!(
            c(CvtKind::FloatInt(Rnd::Rz), Ty::U64, Ty::F32, false, f(1e30)),
            u64::MAX
        );
        assert_eq!(
            c(
                CvtKind::FloatFloat(Rnd::Rz),
                Ty::F32,
                Ty::F64,
                false,
                (1.0f64 / 3.0).to_bits()
            ),
            f(div_f32(1.0, 3.0, Rnd::Rz))
        );
        assert_eq!(
            c(
                CvtKind::FloatRound(Rnd::Rn),
                Ty::F32,
                Ty::F32,
                false,
                f(2.5)
            ),
            f(2.0)
        );
        // 1/3 lies between the f16 values 0x3555 and 0x3556: toward zero
        // the first, up the second.
        for (rnd, want) in [(Rnd::Rz, 0x3555), (Rnd::Rp, 0x3556), (Rnd::Rn, 0x3555)] {
            assert_eq!(
                cvt(
                    CvtKind::FloatFloat(rnd),
                    Ty::F16,
                    Ty::F32,
                    false,
                    false,
                    f(1.0 / 3.0)
                ),
                Some(want)
            );
        }
    }

    #[test]
    fn atomics_follow_ptx() {
        assert_eq!(atom(AtomOp::Inc, Ty::U32, 9, 9, 0), Some(0));
        assert_eq!(atom(AtomOp::Inc, Ty::U32, 3, 9, 0), Some(4));
        assert_eq!(atom(AtomOp::Dec, Ty::U32, 0, 5, 0), Some(5));
        assert_eq!(atom(AtomOp::Dec, Ty::U32, 7, 5, 0), Some(5));
        assert_eq!(atom(AtomOp::Dec, Ty::U32, 3, 5, 0), Some(2));
        assert_eq!(atom(AtomOp::Cas, Ty::B32, 3, 4, 9), None);
        assert_eq!(atom(AtomOp::Cas, Ty::B32, 4, 4, 9), Some(9));
        assert_eq!(
            atom(AtomOp::Min, Ty::S32, 5, (-1i32) as u32 as u64, 0),
            Some(0xffff_ffff)
        );
    }

    #[test]
    fn float_min_max_and_compare() {
        let f = |v: f32| u64::from(v.to_bits());
        let m = FMode {
            rnd: Rnd::Rn,
            ftz: false,
            sat: false,
        };
        assert_eq!(fbin(FBin::Min, Ty::F32, m, f(f32::NAN), f(1.0)), f(1.0));
        assert_eq!(fbin(FBin::Min, Ty::F32, m, f(0.0), f(-0.0)), f(-0.0));
        assert_eq!(fbin(FBin::Max, Ty::F32, m, f(-0.0), f(0.0)), f(0.0));
        assert_eq!(
            fbin(FBin::MinNaN, Ty::F32, m, f(f32::NAN), f(1.0)),
            0x7fff_ffff
        );
        assert_eq!(fbin(FBin::Div, Ty::F32, m, f(0.0), f(0.0)), 0x7fff_ffff);
        assert!(!compare(Cmp::Ne, Ty::F32, false, f(f32::NAN), f(1.0)));
        assert!(compare(Cmp::Neu, Ty::F32, false, f(f32::NAN), f(1.0)));
        assert!(compare(Cmp::Lt, Ty::S32, false, 0xffff_ffff, 0));
        assert!(!compare(Cmp::Lo, Ty::U32, false, 0xffff_ffff, 0));
        let sat = FMode { sat: true, ..m };
        assert_eq!(fbin(FBin::Add, Ty::F32, sat, f(0.75), f(0.5)), f(1.0));
    }
}
