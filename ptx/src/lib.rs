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
//! # Invariants
//!
//! - Guest-controlled input (PTX text, parameters, launch dimensions,
//!   addresses computed by kernels) never panics the interpreter and never
//!   touches memory outside what [`Memory`] grants, what the launch's shared
//!   memory holds, or a thread's local memory.
//! - An instruction the interpreter does not implement stops the launch with
//!   [`Error::Unsupported`] naming it, before or while running; a kernel never
//!   silently computes something different from a GPU.
//! - Work is bounded by [`Limits`].

mod decode;
mod exec;
mod float;
mod ir;
mod lex;
mod parse;

use std::collections::HashMap;

use thiserror::Error;

pub use exec::{MAX_BLOCK_THREADS, MAX_REGISTER_FILE, MAX_SHARED_BYTES};
pub use parse::{
    MAX_GLOBALS, MAX_INSTS, MAX_LOCAL, MAX_PARAM_BYTES, MAX_REGS, MAX_STATIC_SHARED, MAX_TEXT_BYTES,
};

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
    /// [`Limits::max_instructions`] was reached.
    #[error("instruction budget of {0} exhausted")]
    Budget(u64),
    /// Threads of a block wait at barriers that can never be satisfied.
    #[error("barrier deadlock in block ({0}, {1}, {2})")]
    Deadlock(u32, u32, u32),
}

/// Global memory as the kernel sees it: the VM's allocations.
pub trait Memory {
    /// Fills `buf` from global memory at `addr`; an error if any byte lies
    /// outside memory the kernel may read.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Error>;
    /// Writes `data` to global memory at `addr`; an error if any byte lies
    /// outside memory the kernel may write.
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error>;
}

/// Grid and block shape of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory in bytes (`extern __shared__`).
    pub shared_bytes: u32,
}

/// Bounds on one launch's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Instructions executed over all threads before the launch fails with
    /// [`Error::Budget`].
    pub max_instructions: u64,
    /// Per-thread local memory in bytes beyond what the kernel declares.
    pub max_local_bytes: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_instructions: 2_000_000_000,
            max_local_bytes: 64 * 1024,
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

/// A parsed PTX module.
#[derive(Debug)]
pub struct Module {
    funcs: Vec<ir::Func>,
    kernels: HashMap<String, usize>,
    vars: Vec<parse::GlobalVar>,
    globals_init: Vec<u8>,
}

/// The module-scope `.global` and `.const` variables of one loaded module;
/// they persist across launches.
#[derive(Debug, Clone)]
pub struct Globals {
    bytes: Vec<u8>,
    vars: Vec<(String, u64, u64)>,
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
        Ok(Module {
            funcs: p.funcs,
            kernels,
            vars: p.globals,
            globals_init: p.globals_init,
        })
    }

    /// Whether the module defines the kernel `name` (an `.entry`).
    pub fn has_kernel(&self, name: &str) -> bool {
        self.kernels.contains_key(name)
    }

    /// Names of the module's kernels.
    pub fn kernel_names(&self) -> impl Iterator<Item = &str> {
        self.kernels.keys().map(String::as_str)
    }

    /// Fresh module-scope variables, with their initializers.
    pub fn globals(&self) -> Globals {
        Globals {
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
        }
    }

    /// Runs kernel `name` over the whole grid, to completion.
    pub fn run(
        &self,
        globals: &mut Globals,
        name: &str,
        dims: &Dims,
        params: &[u8],
        memory: &mut dyn Memory,
        limits: &Limits,
    ) -> Result<RunStats, Error> {
        let &i = self
            .kernels
            .get(name)
            .ok_or_else(|| Error::NoKernel(name.to_owned()))?;
        if globals.bytes.len() != self.globals_init.len() {
            return Err(Error::BadLaunch(
                "module variables of another module".into(),
            ));
        }
        exec::Launch::new(
            &self.funcs[i],
            dims,
            params,
            memory,
            &mut globals.bytes,
            limits,
        )
        .run()
    }
}
