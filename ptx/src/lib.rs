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

use thiserror::Error;

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
    _private: (),
}

/// The module-scope `.global` and `.const` variables of one loaded module;
/// they persist across launches.
#[derive(Debug)]
pub struct Globals {
    _private: (),
}

impl Module {
    /// Parses PTX text (one module, as `nvcc -ptx` or a fatbin's PTX entry
    /// holds it).
    pub fn parse(text: &str) -> Result<Module, Error> {
        let _ = text;
        Err(Error::Unsupported {
            what: "PTX interpretation (not yet implemented)".into(),
        })
    }

    /// Whether the module defines the kernel `name` (an `.entry`).
    pub fn has_kernel(&self, name: &str) -> bool {
        let _ = name;
        false
    }

    /// Fresh module-scope variables, with their initializers.
    pub fn globals(&self) -> Globals {
        Globals { _private: () }
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
        let _ = (globals, dims, params, memory, limits);
        Err(Error::NoKernel(name.to_owned()))
    }
}
