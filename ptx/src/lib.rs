//! fairgpu-ptx: parse and interpret the PTX that nvcc emits for ordinary
//! kernels, so that SimGpu computes what a GPU would.
//!
//! # Use
//!
//! ```ignore
//! let module = Module::parse(ptx_text)?;          // once per loaded module
//! let mut globals = module.globals();              // module-scope variables
//! let stats = module.run(&mut globals, "kernel", &dims, params, &mut memory, &limits)?;
//! ```
//!
//! `params` is the kernel's parameter buffer laid out as the CUDA driver lays
//! it out (each parameter at its natural alignment, in declaration order):
//! the same bytes `cuLaunchKernel` receives. Global memory is whatever the
//! caller's [`Memory`] says it is; every access is checked there.
//!
//! # What is supported
//!
//! PTX as nvcc emits it for ordinary kernels (`.version` up to 9.x,
//! `.target sm_xx`, `.address_size 64`):
//!
//! - **Module**: `.entry` kernels with scalar and `.align N .b8 x[N]`
//!   (struct) parameters; module-scope `.global`/`.const` variables with
//!   initializers (kept in [`Globals`]); `.shared` (static and
//!   `.extern` dynamic); `.local` (including `__local_depot` with
//!   `%SP`/`%SPL`).
//! - **Calls**: `call` of a `.func` of the module is replaced by the
//!   callee's body when the module loads; a call of a function from
//!   within itself (directly or through others) is a real call: the
//!   function's body is placed once after the kernel's, and each thread
//!   saves the callee's registers and its local and param variables on
//!   its own call stack (bounded by [`MAX_STACK_BYTES`] per launch:
//!   [`Error::StackOverflow`] beyond);
//!   a function's name is an address ([`func_addr`]: `mov`, `.global`
//!   initializers such as C++ virtual tables), and a call through a
//!   pointer (`call %r, (args), prototype`) jumps, per thread, to a copy
//!   of the module's function at that address among those whose
//!   parameters have the prototype's sizes ([`Error::BadCall`] if none
//!   is). The CUDA runtime's device functions: `vprintf`, `__assertfail`,
//!   `malloc` and `free` (C++ `new` and `delete`), which allocate from
//!   [`Memory::malloc`] (see [`heap`]), and `cudaGraphSetConditional`,
//!   a store to the 32-bit slot a conditional handle addresses (the
//!   guest library's handles are such addresses).
//! - **Dynamic parallelism**: the device runtime's launches, streams,
//!   events, copies, fills, `cudaMalloc`/`cudaFree` and errors
//!   (`__cudaCDP2…`, as nvcc emits them under `-rdc=true`): the work a
//!   grid launches runs after the grid, in launch order, each item to
//!   completion, within the launch's one budget (see `exec/devrt.rs`).
//! - **Integers** (16/32/64-bit): add/sub (`.sat`, `.cc`, `addc`/`subc`),
//!   mul/mad (`.lo`/`.hi`/`.wide`, `.cc`, `madc`), mul24/mad24, div, rem,
//!   abs, neg, min, max, and/or/xor/not/cnot, shl/shr, popc, clz, bfind,
//!   brev, bfe, bfi, bmsk, prmt (all modes), lop3, shf, sad; the SIMD video
//!   instructions `vadd`, `vsub`, `vabsdiff`, `vmin`, `vmax` on 4 byte or
//!   2 halfword lanes (`.u32`/`.s32` operands, `.sat`, `.add`), with the
//!   default mask and lane selectors only (`vavrg`, `vset` and the scalar
//!   video instructions are unsupported), and sm_90's packed
//!   `min`/`max.{u16x2,s16x2}`. Division by zero
//!   gives all ones and remainder by zero the dividend (PTX leaves both
//!   undefined).
//! - **Floats** (f32, f64): add/sub/mul/div/fma/mad/sqrt/rcp with `.rn`,
//!   `.rz`, `.rm`, `.rp` rounded exactly (see `float.rs`), `.ftz`, `.sat`,
//!   min/max (`.NaN`), abs, neg, copysign, testp. f32 NaN results are
//!   PTX's canonical NaN. The `.approx` instructions (`div.approx`,
//!   `div.full`, `rcp.approx`, `sqrt.approx`, `rsqrt`, `sin`, `cos`,
//!   `lg2`, `ex2`, `tanh`) compute the correctly rounded or host-libm
//!   result, which differs from a GPU's within the instruction's stated
//!   error bound; `rcp.approx.ftz.f64` and `rsqrt.approx.ftz.f64` work on
//!   the operand's 32 high bits and zero the result's low 32, as the ISA
//!   defines them. f64 NaN payloads follow the host; `fma.f64` with a
//!   directed rounding is unsupported.
//! - **Half precision**: add, sub, mul, fma (to nearest, `.ftz`, `.sat`,
//!   `.relu`), neg, abs, min, max (`.NaN`) on `.f16` and `.f16x2`; add,
//!   sub, mul, fma (`.relu`), neg, abs, min, max (`.NaN`) on `.bf16` and
//!   `.bf16x2`; `tanh.approx` and `ex2.approx` on all four; `setp` and
//!   `set` on `.f16` and `.bf16` (`set` also into an f16/bf16 destination);
//!   `cvt` to f16/bf16 from f32, f64 and integers in all four rounding
//!   modes, rounded once, `.sat`, `.relu`, rounding a half to an integral
//!   value (`cvt.rzi.bf16.bf16`), and the packing
//!   `cvt.rn{.relu}.{f16x2,bf16x2}.f32 d, a, b`; sm_89's 8-bit floats,
//!   `cvt.rn.satfinite{.relu}.{e4m3x2,e5m2x2}.{f32,f16x2}` and
//!   `cvt.rn{.relu}.f16x2.{e4m3x2,e5m2x2}`. Results are the exact
//!   value rounded once to nearest even; NaN results of arithmetic,
//!   `min`/`max` and `.relu` are the canonical NaN (`0x7fff`), and `.relu`
//!   turns results with the sign bit set (-0 included) into +0.
//!   `min/max.xorsign.abs`, `.ftz`/`.sat` on bf16 and `setp` on packed
//!   types are unsupported.
//! - **cvt**: every integer/integer conversion (`.sat`, extension,
//!   truncation), integer/float with all four rounding modes,
//!   float/integer with `.rni/.rzi/.rmi/.rpi` (saturating, NaN to 0),
//!   f32/f64 in both directions, float rounding to integral values, and
//!   same-type copies with `.ftz`/`.sat` (`cvt.ftz.sat.f32.f32`).
//! - **Predicates**: setp and set (all comparisons, ordered and unordered, with
//!   `.and/.or/.xor` combining and `p|q` destinations), selp, slct, guards
//!   `@p`/`@!p`, and/or/xor/not on predicates.
//! - **Memory**: ld/st/ldu in the param, global, shared, local, const and
//!   generic spaces, `.v2`/`.v4`, every cache and ordering qualifier nvcc
//!   emits (they do not change a sequential execution), cvta and isspacep;
//!   `cp.async` from global to shared memory (copied at once; its commit
//!   and wait instructions are no-ops, and `cp.async.mbarrier.arrive`
//!   arrives at once); split barriers in shared memory (`mbarrier`:
//!   `init`, `arrive`, `arrive_drop`, `test_wait`, `try_wait` with and
//!   without `.parity`, `pending_count`, `inval`, and sm_90's transaction
//!   counts: `expect_tx`, `complete_tx`, `arrive.expect_tx`), as libcu++'s
//!   `cuda::barrier` and `cuda::memcpy_async` use them; sm_90's bulk
//!   copies (`cp.async.bulk` global to shared completing its bytes on an
//!   `mbarrier`, shared to global in bulk groups; done at once; not the
//!   tensor form).
//!   atom and red on global, shared and generic addresses: add (integer,
//!   f32, f64), min, max, inc, dec, cas (16, 32 and 64 bits), exch, and, or, xor.
//! - **Control and threads**: bra, ret, exit, bar.sync/barrier.sync (with
//!   ids and thread counts), bar.arrive, bar.red (popc, and, or),
//!   bar.warp.sync, membar/fence (no-ops
//!   in a sequential model), shfl.sync (up, down, bfly, idx with segment
//!   masks), vote.sync (all, any, uni, ballot), match.sync (any, all with
//!   `d|p`, b32 and b64), activemask, redux.sync,
//!   trap, the CUDA runtime's `vprintf` (C conversions over nvcc's
//!   argument buffer; output through [`Module::run_with_output`]) and
//!   `__assertfail` (the runtime's message, then [`Error::Assert`]);
//!   special registers `%tid`, `%ntid`, `%ctaid`, `%nctaid`,
//!   `%laneid`, `%warpid`, `%lanemask_*`, `%clock`, `%clock64`,
//!   `%globaltimer` (clocks count the launch's thread-instructions so far,
//!   so they are deterministic and increase), `%dynamic_smem_size`,
//!   `%total_smem_size`, `%reserved_smem_offset_{begin,end,cap,0,1}` (1 KiB
//!   per block after the kernel's own shared memory, where cooperative
//!   groups keep the state of tiles larger than a warp); the
//!   predefined constant `WARP_SZ` (32).
//! - **Tensor cores**: `wmma.load`, `wmma.store` and `wmma.mma` for the
//!   shapes and types of sm_80 (f16 with f16 or f32 accumulators at
//!   m16n16k16, m32n8k16 and m8n32k16; bf16 at the same; tf32 at
//!   m16n16k8; s8/u8 into s32, `.satfinite`; f64 at m8n8k4), row- and
//!   column-major, global, shared or generic, with `cvt.rna.tf32.f32`;
//!   a fragment's elements are distributed over the lanes as
//!   `exec/wmma.rs` says (PTX leaves it open), products are exact and
//!   rounded once to the accumulator; `mma.sync.aligned` with the
//!   fragment layouts the PTX ISA fixes (m16n8k8/k16 f16 with f16 or f32
//!   accumulators, bf16; m16n8k4/k8 tf32; m16n8k16/k32 s8/u8 into s32;
//!   m8n8k4 f64), and `ldmatrix`/`stmatrix` (`.m8n8.x1/x2/x4`,
//!   `.trans`). The sub-byte types are unsupported.
//! - **Textures and surfaces** (objects: `.u64` handles that
//!   [`Memory::texture`] and [`Memory::surface`] resolve, see [`texture`]):
//!   `tex` (`.base`, `.level`, `.grad`; `.1d`, `.2d`, `.3d`, `.a1d`,
//!   `.a2d`, `.cube`, `.acube`; `.v4` of `.f32`, `.s32`, `.u32` at `.f32`
//!   or `.s32` coordinates; `d|p`), `tld4` (all four components, `.2d`,
//!   `.a2d`, `.cube`, `.acube`), `txq`, `suld.b` and `sust.b` (`.1d` to
//!   `.a2d`, `.b8` to `.b64`, `.v2`, `.v4`, `.trap`, `.clamp`, `.zero`),
//!   and `suq`. Lookups follow the Programming Guide's texture fetching:
//!   point and linear filtering (weights with 8 fractional bits), the four
//!   address modes, normalized coordinates, layers, cubemap faces (no
//!   filtering across faces), read modes and sRGB (see `sample.rs`).
//!   Textures have no mipmaps: levels and gradients are ignored.
//!
//! Anything else (calls of functions without a body, `sust.p`, `sured`, texture lookups with an explicit sampler,
//! offsets or depth compares, `.f16` texture results, multi-sample
//! textures, module-scope `.texref`/`.surfref` variables, modifiers not
//! listed) parses to an instruction that fails the launch with
//! [`Error::Unsupported`] naming it when a thread reaches it.
//!
//! # Kernel slicing
//!
//! [`add_part_entries`] adds to a module's text, for each kernel, a
//! companion entry that runs one box of the kernel's grid (block offset
//! and full grid size as six extra parameters), so that a driver can run
//! one launch as several; see [`part`].
//!
//! # Execution model
//!
//! Blocks run one after another; a block's warps (32 threads) take turns.
//! A warp executes the threads at its lowest PC together, which reconverges
//! nvcc's structured code where a GPU would (code written for lockstep
//! warps, with no `__syncwarp` between its steps, sees its warp in
//! lockstep); a warp that stays diverged for four whole turns in a row
//! alternates with running its highest-PC threads, so that a lock's holder
//! progresses while the warp's other threads spin (as with Volta's
//! independent thread scheduling). `bar.sync` waits for every
//! thread of the block that has not exited (exited threads count as
//! arrived, as on Volta and later) or for its thread count; shuffles and
//! votes wait for the non-exited threads of their member mask. Threads that
//! can never meet fail the launch with [`Error::Deadlock`] (barriers) or
//! [`Error::Unsupported`] (warp-synchronous instructions). Blocks never
//! wait for each other, so a kernel that spins on a flag set by another
//! block runs until [`Limits::max_instructions`], except in a cooperative
//! launch ([`Dims::cooperative`]): there every block is resident, and the
//! blocks take turns (a turn of each of their warps), so that grid-wide
//! barriers (cooperative groups' `grid.sync()`, or a counter in global
//! memory) complete.
//!
//! Float `mul` and `add`/`sub` written with no rounding modifier are
//! contracted into `fma.rn` where the product has one use, as ptxas
//! contracts them (`parse/contract.rs`).
//!
//! # Addresses
//!
//! Global addresses are the caller's [`Memory`] addresses, except the
//! window at [`GLOBALS_BASE`] that holds the module's variables. Shared,
//! local and param state-space addresses are offsets from 0; their generic
//! forms (`cvta`) lie in the windows at [`SHARED_WINDOW`], [`LOCAL_WINDOW`]
//! and [`PARAM_WINDOW`], each [`WINDOW_SIZE`] bytes. The caller's memory
//! must not use addresses in these windows (SimGpu's start at
//! `0x7000_0000_0000`).
//!
//! # Invariants
//!
//! - Guest-controlled input (PTX text, parameters, launch dimensions,
//!   addresses computed by kernels) never panics the interpreter and never
//!   touches memory outside what [`Memory`] grants, what the launch's shared
//!   memory holds, or a thread's local memory. Every access is bounds- and
//!   alignment-checked ([`Error::OutOfBounds`], [`Error::Misaligned`]).
//! - Parsing is bounded: text length, registers, instructions, and the
//!   sizes of shared, local, parameter and module variables have limits
//!   (the `MAX_*` constants), checked before anything is allocated; so are
//!   a launch's block size, shared memory and register file. Nothing is
//!   held per token (the lexer runs as the parser reaches each token, and
//!   initializers are written as they are read), and inlining stops as soon
//!   as the module would pass `2 * MAX_INSTS` instructions, so a module's
//!   memory is bounded by these limits whatever its text.
//! - An instruction the interpreter does not implement stops the launch with
//!   [`Error::Unsupported`] naming it; a kernel never silently computes
//!   something different from a GPU.
//! - Work is bounded by [`Limits`], blocks' setup included. Registers, shared and local memory are
//!   zero when a launch starts; later blocks of the same launch see what
//!   earlier ones left (PTX leaves them undefined), never data of another
//!   launch.
//!
//! Warps execute the common instructions as operations over their 32
//! lanes (`docs/simgpu-engine.md`). Measured speed (release build, one
//! core of a busy 2-core machine): 200 to 250 million thread-instructions
//! per second on a shared-memory tiled matmul and 300 to 350 million on
//! reductions (`cargo run -p fairgpu-ptx --release --example speed`).

mod exec;
mod float;
pub mod heap;
mod ir;
mod lex;
mod parse;
pub mod part;
mod printf;
mod sample;
pub mod texture;

use std::collections::HashMap;

use thiserror::Error;

pub use exec::copy as copy_element;
pub use exec::devrt::{DEFAULT_PENDING_LAUNCHES, MAX_DEPTH, MAX_PENDING_BYTES};
pub use exec::{
    BLOCK_SETUP_COST, MAX_BLOCK_THREADS, MAX_REGISTER_FILE, MAX_SHARED_BYTES, RESERVED_SMEM,
    WARP_SETUP_COST,
};
pub use ir::MAX_PARAM_BYTES;
pub use parse::{
    MAX_GLOBALS, MAX_INSTS, MAX_LABELS, MAX_LOCAL, MAX_PARAM_SCRATCH, MAX_REGS, MAX_STATIC_SHARED,
    MAX_TEXT_BYTES,
};
pub use part::{add_part_entries, PartEntry, PartedModule, PART_SUFFIX};

pub use fairgpu_protocol::cuda::{output_records, STDERR, STDOUT};

/// Size of each address window below.
pub const WINDOW_SIZE: u64 = 1 << 40;
/// Generic addresses of the block's shared memory: `SHARED_WINDOW + offset`.
pub const SHARED_WINDOW: u64 = 0x5000_0000_0000;
/// Generic addresses of a thread's local memory.
pub const LOCAL_WINDOW: u64 = 0x5100_0000_0000;
/// Generic addresses of the kernel's parameters.
pub const PARAM_WINDOW: u64 = 0x5200_0000_0000;
/// Global (and generic) addresses of the module's `.global` and `.const`
/// variables; they live in [`Globals`], not in [`Memory`].
pub const GLOBALS_BASE: u64 = 0x5300_0000_0000;
/// Addresses of the module's functions (what `mov.u64 %rd, func` and a
/// C++ virtual table hold): see [`func_addr`]. Nothing is readable there.
pub const FUNCS_BASE: u64 = 0x5400_0000_0000;

/// The address of the module's `i`th function (in declaration order),
/// which an indirect call through it reaches.
pub const fn func_addr(i: u32) -> u64 {
    FUNCS_BASE + (i as u64) * 16
}

/// Errors of parsing and running PTX.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// The PTX text is malformed.
    #[error("PTX line {line}: {msg}")]
    Parse { line: u32, msg: String },
    /// An instruction, type, state space or directive is not implemented.
    #[error("unsupported PTX: {what}")]
    Unsupported { what: String },
    /// The module has no `.entry` of that name.
    #[error("no kernel named {0}")]
    NoKernel(String),
    /// The launch's dimensions or parameters do not fit the kernel.
    #[error("bad launch: {0}")]
    BadLaunch(String),
    /// A load, store or atomic outside its state space's bounds.
    #[error("{space} access of {len} bytes at {addr:#x} out of bounds")]
    OutOfBounds {
        space: &'static str,
        addr: u64,
        len: u64,
    },
    /// A misaligned access (PTX requires natural alignment).
    #[error("{space} access of {len} bytes at {addr:#x} misaligned")]
    Misaligned {
        space: &'static str,
        addr: u64,
        len: u64,
    },
    /// The kernel executed `trap` (or `brkpt`).
    #[error("kernel trapped")]
    Trap,
    /// A device-side `assert` failed (`__assertfail`); its message is in
    /// the launch's output.
    #[error("device-side assertion failed")]
    Assert,
    /// [`Limits::max_instructions`] was reached.
    #[error("instruction budget of {0} exhausted")]
    Budget(u64),
    /// A texture or surface instruction's handle names no object of its
    /// kind ([`Memory::texture`], [`Memory::surface`]).
    #[error("{kind} handle {handle:#x} names no {kind} object")]
    InvalidHandle { kind: &'static str, handle: u64 },
    /// Threads of a block wait at barriers that can never be satisfied.
    #[error("barrier deadlock in block ({0}, {1}, {2})")]
    Deadlock(u32, u32, u32),
    /// A call through a function pointer whose address is no function of
    /// the module with the call's prototype.
    #[error("indirect call to {addr:#x}, which is no function of the call's prototype")]
    BadCall { addr: u64 },
    /// Recursive calls held more saved state than a launch may
    /// ([`MAX_STACK_BYTES`]): the kernel's call stack overflowed.
    #[error("call stack overflow: recursive calls would hold more than {0} bytes of saved state")]
    StackOverflow(u64),
    /// Device `free` of an address that is no live block of the heap.
    #[error("free of {addr:#x}, which is no block the device heap gave out")]
    BadFree { addr: u64 },
}

/// The most bytes that the frames of recursive calls (each the callee's
/// registers and local and param variables, per thread) may hold at once
/// in one launch; beyond, the launch fails with [`Error::StackOverflow`].
pub const MAX_STACK_BYTES: u64 = 64 << 20;

/// Global memory as the kernel sees it: the VM's allocations.
pub trait Memory {
    /// Fills `buf` from global memory at `addr`; an error if any byte lies
    /// outside memory the kernel may read.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Error>;
    /// Writes `data` to global memory at `addr`; an error if any byte lies
    /// outside memory the kernel may write.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error>;
    /// Reads `len` bytes (at most 32) at `addrs[l]` into `out[l]` for each
    /// lane `l` set in `lanes`, in lane order, stopping at the first read
    /// that fails. The default reads lane by lane; a memory with a costly
    /// lookup can share it between lanes that hit the same allocation.
    fn read_lanes(
        &mut self,
        lanes: u32,
        addrs: &[u64; 32],
        len: usize,
        out: &mut [[u8; 32]; 32],
    ) -> Result<(), Error> {
        let mut m = lanes;
        while m != 0 {
            let l = m.trailing_zeros() as usize;
            m &= m - 1;
            self.read(addrs[l], &mut out[l][..len])?;
        }
        Ok(())
    }
    /// Writes `data[l][..len]` at `addrs[l]` for each lane `l` set in
    /// `lanes`, in lane order (the highest lane's bytes stay where lanes
    /// overlap), stopping at the first write that fails.
    fn write_lanes(
        &mut self,
        lanes: u32,
        addrs: &[u64; 32],
        len: usize,
        data: &[[u8; 32]; 32],
    ) -> Result<(), Error> {
        let mut m = lanes;
        while m != 0 {
            let l = m.trailing_zeros() as usize;
            m &= m - 1;
            self.write(addrs[l], &data[l][..len])?;
        }
        Ok(())
    }
    /// Device `malloc`: the address of a new block of at least `size`
    /// bytes, 16-byte aligned, from the context's heap, which outlives the
    /// launch; 0 when the heap cannot hold it (or there is none, the
    /// default), as on a GPU.
    fn malloc(&mut self, _size: u64) -> u64 {
        0
    }
    /// Device `free` of a block [`Memory::malloc`] gave (0 is ignored); an
    /// error for any other address (PTX leaves that undefined).
    fn free(&mut self, addr: u64) -> Result<(), Error> {
        Err(Error::BadFree { addr })
    }
    /// The texture object a kernel names by `handle`; `None` if the
    /// handle names none (the instruction then fails the launch).
    fn texture(&self, _handle: u64) -> Option<texture::Texture> {
        None
    }
    /// The image of the surface object `handle`; `None` if it names none.
    fn surface(&self, _handle: u64) -> Option<texture::Image> {
        None
    }
}

/// Global memory that several host threads of one launch use at once
/// ([`Module::run_parallel`]): each gets a [`Memory`] of its own on the
/// same bytes.
pub trait SharedMemory: Sync {
    /// A handle through which one thread of the launch reads and writes.
    fn view(&self) -> Box<dyn Memory + '_>;
}

/// Most bytes of module-scope variables a launch may have to run on
/// several threads: each thread works on a copy of them.
pub const MAX_PARALLEL_GLOBALS: usize = 1 << 20;

/// Grid and block shape of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes (`extern __shared__`).
    pub shared_bytes: u32,
    /// Run only this box of the grid's blocks (a sub-launch of a sliced
    /// kernel): `%ctaid` still counts in the whole grid and `%nctaid` is
    /// `grid`. `None`: every block.
    pub part: Option<Part>,
    /// `Some(workspace)`: a cooperative launch. Its blocks all live at
    /// once and take turns, so that blocks waiting for each other at a
    /// grid-wide barrier progress; `%envreg1`/`%envreg2` give `workspace`,
    /// the address of 8 zeroed bytes of global memory where cooperative
    /// groups' grid barrier counts (`{size, barrier}` of the driver's ABI).
    pub cooperative: Option<u64>,
}

/// A box of a grid's blocks: `offset .. offset + extent` per dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The box's first block.
    pub offset: [u32; 3],
    /// Its size in blocks.
    pub extent: [u32; 3],
}

/// Bounds on one launch's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Instructions executed over all threads before the launch fails with
    /// [`Error::Budget`]. Each block's setup counts too, as
    /// [`BLOCK_SETUP_COST`] plus [`WARP_SETUP_COST`] for each of its warps,
    /// so that a grid of many tiny blocks is bounded like any other launch
    /// ([`RunStats::instructions`] counts executed instructions only).
    pub max_instructions: u64,
    /// Most local memory per thread a kernel may declare (its `.local`
    /// variables), in bytes; a kernel declaring more fails with
    /// [`Error::BadLaunch`].
    pub max_local_bytes: u32,
    /// Whether the engine may run its lane loops in copies compiled for
    /// the host's AVX2 and FMA, where the CPU has them (the default).
    /// Both copies compute the same bits; false keeps to baseline x86-64.
    pub host_simd: bool,
    /// Most kernels, copies and fills that device code may have launched
    /// and not yet started, over all the grids of one launch (dynamic
    /// parallelism; see `exec/devrt.rs`).
    pub pending_launches: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_instructions: 2_000_000_000,
            max_local_bytes: 64 * 1024,
            host_simd: true,
            pending_launches: DEFAULT_PENDING_LAUNCHES,
        }
    }
}

/// What one launch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Instructions executed, summed over threads.
    pub instructions: u64,
    /// Threads run.
    pub threads: u64,
}

/// What a kernel needs of the device, as `cuFuncGetAttribute` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelInfo {
    /// Bytes of static `.shared` memory a block needs.
    pub static_shared: u32,
    /// Bytes of `.local` memory a thread needs (its callees' included).
    pub local_bytes: u32,
    /// PTX registers the kernel declares after inlining (virtual
    /// registers: not what a hardware register allocator would assign).
    pub registers: u32,
    /// Bytes of the module's `.const` variables.
    pub const_bytes: u32,
    /// Whether it calls `malloc` or `free` (C++ `new`/`delete`): its
    /// launches need the context's device heap.
    pub uses_heap: bool,
    /// Its launch bounds: the most threads per block (`.maxntid`), and the
    /// block shape it requires (`.reqntid`). A GPU's driver refuses other
    /// launches with CUDA_ERROR_INVALID_VALUE.
    pub max_threads: Option<u32>,
    pub reqntid: Option<[u32; 3]>,
    /// Whether it reads the grid workspace's address (`%envreg1`/`2`):
    /// it synchronizes the whole grid, which needs every block resident.
    pub syncs_grid: bool,
}

/// A parsed PTX module.
#[derive(Debug)]
pub struct Module {
    funcs: Vec<ir::Func>,
    /// Each kernel's address ([`func_addr`]) and index in `funcs`: what
    /// device code launches it by.
    entry_addrs: Vec<(u64, usize)>,
    kernels: HashMap<String, usize>,
    vars: Vec<parse::GlobalVar>,
    /// Bytes of the `.const` variables (what every kernel reports).
    const_bytes: u32,
    globals_init: Vec<u8>,
}

/// The module-scope `.global` and `.const` variables of one loaded module;
/// they persist across launches.
#[derive(Debug, Clone)]
pub struct Globals {
    bytes: Vec<u8>,
    vars: Vec<(String, u64, u64)>,
    /// The names of its `__managed__` variables.
    managed: Vec<String>,
    /// A second address of the variables in the caller's address space
    /// (0: none): where `cuModuleGetGlobal` placed them. A kernel given
    /// such a pointer (`cudaGetSymbolAddress`) reaches the same bytes.
    alias: u64,
    /// The variables' bytes when they are in (`bytes` is empty while a
    /// caller holds them).
    size: usize,
}

impl Globals {
    /// Address and size of the variable `name`, as `cuModuleGetGlobal`
    /// reports them (the address lies in the window at [`GLOBALS_BASE`]).
    pub fn symbol(&self, name: &str) -> Option<(u64, u64)> {
        self.vars
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|&(_, a, s)| (a, s))
    }

    /// Whether variable `name` is `__managed__` (`.attribute(.managed)`):
    /// the host program addresses it as well as kernels.
    pub fn is_managed(&self, name: &str) -> bool {
        self.managed.iter().any(|n| n == name)
    }

    /// Bytes of all the variables.
    pub fn len(&self) -> usize {
        self.size
    }

    /// Whether the module has no variable bytes.
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Makes `[base, base + len())` a second address of the variables for
    /// the kernels that run with them (see [`Globals`]).
    pub fn set_alias(&mut self, base: u64) {
        self.alias = base;
    }

    /// Takes the variables' bytes out, so that a caller can keep them in
    /// its own memory between launches; [`Globals::put_bytes`] gives them
    /// back. Until then, nothing can run with these globals.
    pub fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.bytes)
    }

    /// Gives back bytes [`Globals::take_bytes`] took. Returns them, changing
    /// nothing, if they are not [`Globals::len`] bytes long.
    pub fn put_bytes(&mut self, bytes: Vec<u8>) -> Result<(), Vec<u8>> {
        if bytes.len() != self.size {
            return Err(bytes);
        }
        self.bytes = bytes;
        Ok(())
    }

    /// Whether `[addr, addr+len)` lies within the variables.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        self.range(addr, len).is_some()
    }

    fn range(&self, addr: u64, len: u64) -> Option<std::ops::Range<usize>> {
        let off = addr.checked_sub(GLOBALS_BASE)?;
        let end = off.checked_add(len)?;
        (end <= self.bytes.len() as u64).then_some(off as usize..end as usize)
    }

    /// Reads variable bytes at a [`GLOBALS_BASE`]-window address.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Error> {
        let r = self
            .range(addr, buf.len() as u64)
            .ok_or(Error::OutOfBounds {
                space: "global",
                addr,
                len: buf.len() as u64,
            })?;
        buf.copy_from_slice(&self.bytes[r]);
        Ok(())
    }

    /// Writes variable bytes at a [`GLOBALS_BASE`]-window address (the way
    /// `cudaMemcpyToSymbol` reaches `__constant__` and `__device__`
    /// variables).
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error> {
        let r = self
            .range(addr, data.len() as u64)
            .ok_or(Error::OutOfBounds {
                space: "global",
                addr,
                len: data.len() as u64,
            })?;
        self.bytes[r].copy_from_slice(data);
        Ok(())
    }
}

impl Module {
    /// Parses PTX text (one module, as `nvcc -ptx` or a fatbin's PTX entry
    /// holds it).
    pub fn parse(text: &str) -> Result<Module, Error> {
        let p = parse::parse(text)?;
        let kernels = p
            .funcs
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_entry)
            .map(|(i, f)| (f.name.clone(), i))
            .collect();
        let const_bytes = p
            .globals
            .iter()
            .filter(|v| v.constant)
            .fold(0u32, |n, v| n.saturating_add(v.size));
        Ok(Module {
            funcs: p.funcs,
            entry_addrs: p.entry_addrs,
            kernels,
            const_bytes,
            vars: p.globals,
            globals_init: p.globals_init,
        })
    }

    /// Whether the module defines the kernel `name` (an `.entry`).
    pub fn has_kernel(&self, name: &str) -> bool {
        self.kernels.contains_key(name)
    }

    /// The resources kernel `name` needs; `None` if the module has no such
    /// kernel.
    pub fn kernel_info(&self, name: &str) -> Option<KernelInfo> {
        let f = &self.funcs[*self.kernels.get(name)?];
        Some(KernelInfo {
            static_shared: f.static_shared,
            local_bytes: f.local_bytes,
            registers: f.nregs,
            const_bytes: self.const_bytes,
            uses_heap: f.insts.iter().any(|x| match &x.op {
                ir::Op::Malloc { .. } | ir::Op::Free { .. } => true,
                ir::Op::DevRt(c) => c.call.uses_heap(),
                _ => false,
            }),
            max_threads: f.max_threads,
            reqntid: f.reqntid,
            syncs_grid: f.grid_workspace,
        })
    }

    /// Whether kernel `name` can print (it calls `vprintf` or
    /// `__assertfail`, or launches kernels from the device in a module
    /// where one does).
    pub fn kernel_prints(&self, name: &str) -> bool {
        let prints = |i: usize| {
            self.funcs[i]
                .insts
                .iter()
                .any(|x| matches!(x.op, ir::Op::Printf { .. } | ir::Op::AssertFail { .. }))
        };
        self.kernels.get(name).is_some_and(|&i| {
            prints(i) || (self.launches_from_device(i) && self.kernels.values().any(|&k| prints(k)))
        })
    }

    /// Whether kernel `name` launches work from the device (dynamic
    /// parallelism): its launches run until that work, and the work it
    /// launches in turn, is done.
    pub fn kernel_launches(&self, name: &str) -> bool {
        self.kernels
            .get(name)
            .is_some_and(|&i| self.launches_from_device(i))
    }

    fn launches_from_device(&self, i: usize) -> bool {
        self.funcs[i]
            .insts
            .iter()
            .any(|x| matches!(&x.op, ir::Op::DevRt(c) if c.call.launches()))
    }

    /// Whether the blocks of kernel `name` may run on several host threads
    /// at once ([`Module::run_parallel`]): nothing in it (or its callees)
    /// lets one block see another's work while they run — no atomic
    /// operation or `mbarrier` outside shared memory, no fence wider than
    /// the block — and it neither prints (whose order would change) nor
    /// allocates from the device heap.
    pub fn kernel_runs_in_parallel(&self, name: &str) -> bool {
        self.kernels.get(name).is_some_and(|&i| {
            self.funcs[i].insts.iter().all(|x| match &x.op {
                ir::Op::Atom { space, .. } => *space == ir::Space::Shared,
                ir::Op::Mbarrier(m) => m.space == ir::Space::Shared,
                ir::Op::Fence
                | ir::Op::Printf { .. }
                | ir::Op::AssertFail { .. }
                | ir::Op::Malloc { .. }
                | ir::Op::Free { .. }
                | ir::Op::SetConditional { .. }
                | ir::Op::DevRt(_) => false,
                _ => true,
            })
        })
    }

    /// What kernel `name` holds that SimGpu cannot execute: the distinct
    /// messages of its unsupported instructions (its callees' included),
    /// in program order. A launch fails only if a thread reaches one.
    pub fn kernel_unsupported(&self, name: &str) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        if let Some(&i) = self.kernels.get(name) {
            for x in &self.funcs[i].insts {
                if let ir::Op::Unsupported(what) = &x.op {
                    if !out.contains(&&**what) {
                        out.push(what);
                    }
                }
            }
        }
        out
    }

    /// Names of the module's kernels.
    pub fn kernel_names(&self) -> impl Iterator<Item = &str> {
        self.kernels.keys().map(String::as_str)
    }

    /// Bytes [`Module::globals`] allocates: the module-scope variables.
    pub fn globals_len(&self) -> usize {
        self.globals_init.len()
    }

    /// About how many bytes of host memory the parsed module holds: its
    /// instructions, parameters and names, and the variables' initializers.
    /// An estimate for accounting, from the element sizes, not the
    /// allocator's.
    pub fn host_bytes(&self) -> usize {
        use std::mem::size_of;
        let funcs: usize = self
            .funcs
            .iter()
            .map(|f| {
                size_of::<ir::Func>()
                    + f.insts.len() * size_of::<ir::Inst>()
                    + (f.params.len() + f.rets.len()) * size_of::<ir::Param>()
                    + f.name.len()
            })
            .sum();
        let vars: usize = self.vars.iter().map(|v| v.name.len() + 32).sum();
        funcs + vars + self.globals_init.len() + self.kernels.len() * 64
    }

    /// Fresh module-scope variables, with their initializers.
    pub fn globals(&self) -> Globals {
        Globals {
            alias: 0,
            size: self.globals_init.len(),
            bytes: self.globals_init.clone(),
            vars: self
                .vars
                .iter()
                .map(|v| {
                    (
                        v.name.clone(),
                        GLOBALS_BASE + u64::from(v.offset),
                        u64::from(v.size),
                    )
                })
                .collect(),
            managed: self
                .vars
                .iter()
                .filter(|v| v.managed)
                .map(|v| v.name.clone())
                .collect(),
        }
    }

    /// Runs kernel `name` over the whole grid, to completion. What its
    /// `printf`s and failed assertions print is discarded (see
    /// [`Module::run_with_output`]).
    pub fn run(
        &self,
        globals: &mut Globals,
        name: &str,
        dims: &Dims,
        params: &[u8],
        memory: &mut dyn Memory,
        limits: &Limits,
    ) -> Result<RunStats, Error> {
        self.launch(globals, name, dims, params, memory, limits, None)
    }

    /// As [`Module::run`], appending what the kernel prints to `output`, as
    /// records (see [`STDOUT`]): each `printf`'s text for stdout, and the
    /// message of a failed `assert` for stderr, after which the launch fails
    /// with [`Error::Assert`]. `output` grows to at most `limit` bytes: a
    /// record that does not fit is dropped, as from a GPU's full FIFO.
    #[allow(clippy::too_many_arguments)]
    pub fn run_with_output(
        &self,
        globals: &mut Globals,
        name: &str,
        dims: &Dims,
        params: &[u8],
        memory: &mut dyn Memory,
        limits: &Limits,
        output: &mut Vec<u8>,
        limit: usize,
    ) -> Result<RunStats, Error> {
        self.launch(
            globals,
            name,
            dims,
            params,
            memory,
            limits,
            Some((output, limit)),
        )
    }

    /// As [`Module::run`], with the grid's blocks spread over up to
    /// `threads` host threads, each taking the next block not yet run.
    /// Only for a kernel whose blocks do not talk to each other
    /// ([`Module::kernel_runs_in_parallel`]), not a cooperative launch,
    /// and module variables of at most [`MAX_PARALLEL_GLOBALS`] bytes;
    /// anything else (or `threads` below 2) runs on the calling thread.
    ///
    /// The result is the one [`Module::run`] leaves, for a kernel whose
    /// blocks do not write the same bytes (a race, whose outcome a GPU
    /// leaves undefined too) nor read what an earlier block left in
    /// shared memory or registers (undefined in PTX): each thread works
    /// on a copy of the module's variables, merged in the threads' order
    /// afterwards. A failing launch reports the error of the first block
    /// in grid order that failed, except that which block runs out of the
    /// budget depends on the threads' timing; the launch fails with
    /// [`Error::Budget`] exactly when the blocks' work passes the budget,
    /// after at most one block per thread more than [`Module::run`]
    /// would have run. `%clock` counts the instructions of the thread's
    /// own blocks.
    #[allow(clippy::too_many_arguments)]
    pub fn run_parallel(
        &self,
        globals: &mut Globals,
        name: &str,
        dims: &Dims,
        params: &[u8],
        memory: &dyn SharedMemory,
        limits: &Limits,
        threads: usize,
    ) -> Result<RunStats, Error> {
        let serial = threads < 2
            || dims.cooperative.is_some()
            || globals.bytes.len() > MAX_PARALLEL_GLOBALS
            || !self.kernel_runs_in_parallel(name);
        if serial {
            return self.launch(
                globals,
                name,
                dims,
                params,
                &mut *memory.view(),
                limits,
                None,
            );
        }
        let i = self.kernel_for(name, globals)?;
        let extent = dims.part.map_or(dims.grid, |p| p.extent);
        let blocks = extent.iter().map(|&v| u64::from(v)).product::<u64>();
        let threads = threads.min(usize::try_from(blocks).unwrap_or(usize::MAX));
        let queue = exec::BlockQueue::new();
        let (func, original, alias) = (&self.funcs[i], &globals.bytes, globals.alias);
        let work = || {
            let mut view = memory.view();
            let mut copy = original.clone();
            let launch =
                exec::Launch::new(func, dims, params, &mut *view, &mut copy, alias, limits);
            (launch.run_shared(&queue), copy)
        };
        let ran: Vec<_> = std::thread::scope(|scope| {
            // The calling thread is one of them; a helper the system
            // cannot start leaves its share to the others.
            let helpers: Vec<_> = (1..threads)
                .filter_map(|_| std::thread::Builder::new().spawn_scoped(scope, work).ok())
                .collect();
            let mut ran = vec![work()];
            ran.extend(
                helpers
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))),
            );
            ran
        });
        // Each thread's changes to the variables, in the threads' order.
        let mut merged = original.clone();
        let mut stats = RunStats::default();
        let mut failed: Option<(u64, Error)> = None;
        for (r, copy) in ran {
            for ((m, &c), &o) in merged.iter_mut().zip(&copy).zip(original.iter()) {
                if c != o {
                    *m = c;
                }
            }
            match r {
                Ok(s) => stats.instructions += s.instructions,
                Err((b, e)) => {
                    if failed.as_ref().is_none_or(|(f, _)| b < *f) {
                        failed = Some((b, e));
                    }
                }
            }
        }
        globals.bytes = merged;
        if let Some((_, e)) = failed {
            return Err(e);
        }
        if queue.used.into_inner() > limits.max_instructions {
            return Err(Error::Budget(limits.max_instructions));
        }
        let per_block = dims.block.iter().map(|&v| u64::from(v)).product::<u64>();
        stats.threads = per_block * blocks;
        Ok(stats)
    }

    /// The index of kernel `name`, checked against the module variables
    /// `globals` a launch of it would use.
    fn kernel_for(&self, name: &str, globals: &Globals) -> Result<usize, Error> {
        let &i = self
            .kernels
            .get(name)
            .ok_or_else(|| Error::NoKernel(name.to_owned()))?;
        if globals.bytes.len() != self.globals_init.len() {
            return Err(Error::BadLaunch(
                "module variables of another module".into(),
            ));
        }
        Ok(i)
    }

    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        globals: &mut Globals,
        name: &str,
        dims: &Dims,
        params: &[u8],
        memory: &mut dyn Memory,
        limits: &Limits,
        output: Option<(&mut Vec<u8>, usize)>,
    ) -> Result<RunStats, Error> {
        let i = self.kernel_for(name, globals)?;
        let mut used = 0u64;
        let none = exec::devrt::Pending::default();
        self.grid(
            i, globals, dims, params, memory, limits, output, 0, none, &mut used,
        )
        .map_err(|e| match e {
            Error::Budget(_) => Error::Budget(limits.max_instructions),
            e => e,
        })
    }

    /// Runs one grid of kernel `i` at nesting depth `depth`, then the work
    /// its threads launched (see `exec/devrt.rs`), with what is left of
    /// the budget (`used` of it is gone) and `pending` work of its
    /// ancestors still queued.
    #[allow(clippy::too_many_arguments)]
    fn grid(
        &self,
        i: usize,
        globals: &mut Globals,
        dims: &Dims,
        params: &[u8],
        memory: &mut dyn Memory,
        limits: &Limits,
        mut output: Option<(&mut Vec<u8>, usize)>,
        depth: u32,
        pending: exec::devrt::Pending,
        used: &mut u64,
    ) -> Result<RunStats, Error> {
        let left = Limits {
            max_instructions: limits.max_instructions.saturating_sub(*used),
            ..*limits
        };
        let mut launch = exec::Launch::new(
            &self.funcs[i],
            dims,
            params,
            &mut *memory,
            &mut globals.bytes,
            globals.alias,
            &left,
        );
        launch.device = Some(exec::devrt::DeviceSide::new(
            exec::devrt::Kernels {
                entries: &self.entry_addrs,
                funcs: &self.funcs,
            },
            depth,
            pending,
            limits.pending_launches,
        ));
        let grid = match output.as_mut() {
            Some((out, limit)) => launch.with_output(out, *limit).run_grid(),
            None => launch.run_grid(),
        }?;
        *used = used.saturating_add(grid.consumed);
        for b in grid.buffers {
            memory.free(b)?;
        }
        let mut stats = grid.stats;
        let mut work = grid.work;
        // Tail launches start when everything else the grid launched is
        // done.
        work.sort_by_key(exec::devrt::DeviceWork::tail);
        // What is still queued behind each item as it starts.
        let mut behind = exec::devrt::Pending {
            items: pending.items + work.len() as u64,
            bytes: pending.bytes + work.iter().map(exec::devrt::DeviceWork::bytes).sum::<u64>(),
        };
        for item in work {
            behind.items -= 1;
            behind.bytes -= item.bytes();
            let waiting = behind;
            match item {
                exec::devrt::DeviceWork::Kernel {
                    func,
                    grid,
                    block,
                    shared,
                    params,
                    ..
                } => {
                    let d = Dims {
                        grid,
                        block,
                        shared_bytes: shared,
                        part: None,
                        cooperative: None,
                    };
                    let out = output.as_mut().map(|(o, l)| (&mut **o, *l));
                    let s = self.grid(
                        func,
                        globals,
                        &d,
                        &params,
                        memory,
                        limits,
                        out,
                        depth + 1,
                        waiting,
                        used,
                    )?;
                    stats.instructions = stats.instructions.saturating_add(s.instructions);
                    stats.threads = stats.threads.saturating_add(s.threads);
                }
                exec::devrt::DeviceWork::Copy { dst, src, len, .. } => {
                    self.charge_bytes(len, limits, used)?;
                    device_copy(memory, dst, Some(src), 0, len)?;
                }
                exec::devrt::DeviceWork::Fill {
                    dst, value, len, ..
                } => {
                    self.charge_bytes(len, limits, used)?;
                    device_copy(memory, dst, None, value, len)?;
                }
            }
        }
        Ok(stats)
    }

    /// Charges a device-side copy or fill of `len` bytes: a
    /// thread-instruction per 8 bytes.
    fn charge_bytes(&self, len: u64, limits: &Limits, used: &mut u64) -> Result<(), Error> {
        *used = used.saturating_add(len.div_ceil(8));
        match *used > limits.max_instructions {
            true => Err(Error::Budget(limits.max_instructions)),
            false => Ok(()),
        }
    }
}

/// Bytes a device-side copy or fill moves at a time.
const COPY_CHUNK: u64 = 1 << 16;

/// A device-side `cudaMemcpyAsync` (from `src`) or `cudaMemsetAsync`
/// (bytes of `value`) of `len` bytes at `dst`, a chunk at a time.
fn device_copy(
    memory: &mut dyn Memory,
    dst: u64,
    src: Option<u64>,
    value: u8,
    len: u64,
) -> Result<(), Error> {
    let mut buf = vec![value; len.min(COPY_CHUNK) as usize];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(COPY_CHUNK) as usize;
        if let Some(src) = src {
            memory.read(src.wrapping_add(done), &mut buf[..n])?;
        }
        memory.write(dst.wrapping_add(done), &buf[..n])?;
        done += n as u64;
    }
    Ok(())
}
