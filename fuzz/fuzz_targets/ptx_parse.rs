//! Fuzzes the PTX interpreter's front end on guest text: SimGpu takes a
//! module's PTX up to its first NUL, as lossy UTF-8, and parses it with
//! `fairgpu_ptx::Module::parse` (lexer, parser, instruction decoder and
//! call inlining) at the first launch from it.
//!
//! Input: the PTX bytes, read as SimGpu reads them.
//!
//! Properties:
//! - parsing never panics, whatever the text;
//! - an accepted module names each of its kernels, and it holds at most
//!   the instructions the limits allow (`host_bytes` stays below
//!   `2 * MAX_INSTS` instructions of 128 bytes and the text's variables);
//! - each kernel of an accepted module runs two blocks of 40 threads, with
//!   every parameter pointing at a small global memory, within a small
//!   instruction budget, without panicking; a launch that runs out reports
//!   that budget, and one that completes stays within it.

#![no_main]

use fairgpu_ptx::{Dims, Error, Limits, Memory, Module, MAX_GLOBALS, MAX_INSTS};
use libfuzzer_sys::fuzz_target;

/// Where the fuzzed kernels' global memory starts (SimGpu's allocations
/// start there too).
const BASE: u64 = 0x7000_0000_0000;
/// Instructions one fuzzed launch may execute.
const BUDGET: u64 = 20_000;

/// 4 KiB of global memory at [`BASE`].
struct SmallMemory(Vec<u8>);

impl SmallMemory {
    fn range(&self, addr: u64, len: usize) -> Result<std::ops::Range<usize>, Error> {
        let oob = Error::OutOfBounds {
            space: "global",
            addr,
            len: len as u64,
        };
        let off = addr.checked_sub(BASE).ok_or(oob.clone())?;
        let end = off.checked_add(len as u64).ok_or(oob.clone())?;
        if end > self.0.len() as u64 {
            return Err(oob);
        }
        Ok(off as usize..end as usize)
    }
}

impl Memory for SmallMemory {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Error> {
        let r = self.range(addr, buf.len())?;
        buf.copy_from_slice(&self.0[r]);
        Ok(())
    }

    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error> {
        let r = self.range(addr, data.len())?;
        self.0[r].copy_from_slice(data);
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let text = String::from_utf8_lossy(&data[..end]);
    // Kernel slicing's transformation: no panic and a bounded output,
    // whatever the input.
    let parted = fairgpu_ptx::add_part_entries(&text);
    assert!(parted.text.len() <= 2 * text.len() + fairgpu_ptx::part::PART_SLACK);
    let Ok(m) = Module::parse(&text) else {
        return;
    };
    let names: Vec<String> = m.kernel_names().map(str::to_owned).collect();
    for k in &names {
        assert!(m.has_kernel(k));
    }
    let most = 2 * MAX_INSTS * 128 + MAX_GLOBALS as usize + 64 * text.len() + (1 << 20);
    assert!(m.host_bytes() <= most, "{} bytes", m.host_bytes());

    let dims = Dims {
        grid: [2, 1, 1],
        block: [40, 1, 1],
        shared_bytes: 256,
        part: None,
        // Half the inputs run as cooperative launches (blocks
        // interleaved), their grid workspace in the fuzz memory.
        cooperative: (text.len() % 2 == 0).then_some(BASE),
    };
    let params: Vec<u8> = (0..512).flat_map(|_| BASE.to_le_bytes()).collect();
    let limits = Limits {
        max_instructions: BUDGET,
        ..Limits::default()
    };
    for k in names.iter().take(4) {
        let mut mem = SmallMemory(vec![0; 4096]);
        match m.run(&mut m.globals(), k, &dims, &params, &mut mem, &limits) {
            Ok(stats) => assert!(stats.instructions <= BUDGET),
            Err(Error::Budget(n)) => assert_eq!(n, BUDGET),
            Err(_) => {}
        }
    }
});
