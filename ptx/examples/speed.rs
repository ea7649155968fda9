//! Interpreter speed on nvcc kernels: thread-instructions per second.
//!
//! `cargo run -p fairgpu-ptx --release --example speed [NAME...]`: all
//! kernels, or those whose name starts with one of the NAMEs (`matmul`,
//! `reduce_shfl`, `reduce_shared`, `scan_padded`, `options`), for profiling
//! one at a time.
//! `--baseline`: without the engine's AVX2/FMA copies (`Limits::host_simd`).
//! `--repeat N`: each kernel launched N times, the fastest and the median
//! reported.

use std::time::Instant;

use fairgpu_ptx::{Dims, Error, Limits, Memory, Module};

/// One flat allocation at a fixed device address.
struct Flat {
    base: u64,
    bytes: Vec<u8>,
}

impl Flat {
    fn slice(&mut self, addr: u64, len: usize) -> Result<&mut [u8], Error> {
        let off = addr
            .checked_sub(self.base)
            .filter(|o| o + len as u64 <= self.bytes.len() as u64)
            .ok_or(Error::OutOfBounds {
                space: "global",
                addr,
                len: len as u64,
            })? as usize;
        Ok(&mut self.bytes[off..off + len])
    }
}

impl Memory for Flat {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), Error> {
        let len = buf.len();
        fairgpu_ptx::copy_element(buf, self.slice(addr, len)?);
        Ok(())
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error> {
        fairgpu_ptx::copy_element(self.slice(addr, data.len())?, data);
        Ok(())
    }
    // A warp's elements, each checked and copied at its width, as SimGpu's
    // memory does for the lanes that fall in one allocation.
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
            fairgpu_ptx::copy_element(&mut out[l][..len], self.slice(addrs[l], len)?);
        }
        Ok(())
    }
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
            fairgpu_ptx::copy_element(self.slice(addrs[l], len)?, &data[l][..len]);
        }
        Ok(())
    }
}

fn measure(name: &str, ptx: &str, kernel: &str, dims: Dims, params: Vec<u8>, mem: &mut Flat) {
    if !selected(name) {
        return;
    }
    let baseline = std::env::args().any(|a| a == "--baseline");
    let m = Module::parse(ptx).expect("parses");
    let mut g = m.globals();
    // Each launch timed on its own; with `--repeat N` the fastest and the
    // median of N (a shared host's speed moves between launches).
    let mut times = Vec::with_capacity(repeat());
    let mut instructions = 0;
    for _ in 0..repeat() {
        let t = Instant::now();
        let st = m
            .run(
                &mut g,
                kernel,
                &dims,
                &params,
                mem,
                &Limits {
                    host_simd: !baseline,
                    ..Limits::default()
                },
            )
            .expect("runs");
        times.push(t.elapsed().as_secs_f64());
        instructions = st.instructions;
    }
    times.sort_by(f64::total_cmp);
    let rate = |s: f64| instructions as f64 / s / 1e6;
    let (best, median) = (times[0], times[times.len() / 2]);
    if times.len() == 1 {
        println!(
            "{name:<28} {instructions:>12} thread-instructions in {best:>7.3} s = {:>6.1} M/s",
            rate(best)
        );
    } else {
        println!(
            "{name:<28} {instructions:>12} thread-instructions, {} launches: best {best:.3} s = {:.1} M/s, median {median:.3} s = {:.1} M/s",
            times.len(),
            rate(best),
            rate(median)
        );
    }
}

/// The padded scan's label.
const SCAN_NAME: &str = "scan_padded 1M u32 (256 per block)";

/// Whether the kernel `name` is to be measured: no NAMEs given, or one
/// that `name` starts with (the arguments that are neither options nor
/// `--repeat`'s count).
fn selected(name: &str) -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|&(i, a)| !a.starts_with("--") && (i == 0 || args[i - 1] != "--repeat"))
        .map(|(_, a)| a)
        .collect();
    only.is_empty() || only.iter().any(|o| name.starts_with(o.as_str()))
}

/// `--repeat N`: launches per kernel (default 1).
fn repeat() -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == "--repeat")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse().expect("--repeat takes a count"))
        .unwrap_or(1)
        .max(1)
}

fn main() {
    let base = 0x7000_0000_0000u64;
    let n = 256u64;
    let mat = n * n * 4;
    let mut mem = Flat {
        base,
        bytes: (0..3 * mat).map(|i| (i % 7) as u8).collect(),
    };
    let mut p = Vec::new();
    for k in 0..3 {
        p.extend_from_slice(&(base + k * mat).to_le_bytes());
    }
    p.extend_from_slice(&(n as u32).to_le_bytes());
    measure(
        "matmul 256x256 (16x16 tiles)",
        include_str!("../tests/kernels/matmul.ptx"),
        "matmul",
        Dims {
            grid: [(n / 16) as u32, (n / 16) as u32, 1],
            block: [16, 16, 1],
            shared_bytes: 0,
            part: None,
            cooperative: None,
        },
        p,
        &mut mem,
    );

    let count = 1u64 << 22;
    let blocks = count / 256;
    let mut mem = Flat {
        base,
        bytes: vec![1; (count * 4 + blocks * 4) as usize],
    };
    let mut p = Vec::new();
    p.extend_from_slice(&base.to_le_bytes());
    p.extend_from_slice(&(base + count * 4).to_le_bytes());
    p.extend_from_slice(&(count as u32).to_le_bytes());
    let reduce = include_str!("../tests/kernels/reduce.ptx");
    measure(
        "reduce_shfl 4M floats",
        reduce,
        "reduce_shfl",
        Dims {
            grid: [blocks as u32, 1, 1],
            block: [256, 1, 1],
            shared_bytes: 0,
            part: None,
            cooperative: None,
        },
        p.clone(),
        &mut mem,
    );
    measure(
        "reduce_shared 4M u32",
        reduce,
        "reduce_shared",
        Dims {
            grid: [(blocks / 2) as u32, 1, 1],
            block: [256, 1, 1],
            shared_bytes: 256 * 4,
            part: None,
            cooperative: None,
        },
        p,
        &mut mem,
    );

    // A scan with two barriers per step: the barrier path.
    if selected(SCAN_NAME) {
        scan(base);
    }

    // Option pricing: float2 loads and stores, approximate transcendentals.
    const OPTIONS: &str = "options 2M (float2)";
    if !selected(OPTIONS) {
        return;
    }
    let pairs = 1u64 << 20;
    let bytes = pairs * 8;
    let mut r = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = |lo: f32, hi: f32| {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        lo + (hi - lo) * (r >> 40) as f32 / (1u64 << 24) as f32
    };
    let mut data = vec![0u8; (5 * bytes) as usize];
    for (k, (lo, hi)) in [(5.0, 30.0), (1.0, 100.0), (0.25, 10.0)]
        .into_iter()
        .enumerate()
    {
        let at = ((2 + k as u64) * bytes) as usize;
        for c in data[at..at + bytes as usize].chunks_exact_mut(4) {
            c.copy_from_slice(&uniform(lo, hi).to_le_bytes());
        }
    }
    let mut mem = Flat { base, bytes: data };
    let mut p = Vec::new();
    for k in 0..5 {
        p.extend_from_slice(&(base + k * bytes).to_le_bytes());
    }
    p.extend_from_slice(&0.02f32.to_le_bytes());
    p.extend_from_slice(&0.30f32.to_le_bytes());
    p.extend_from_slice(&(pairs as u32).to_le_bytes());
    measure(
        OPTIONS,
        include_str!("../tests/kernels/options.ptx"),
        "options",
        Dims {
            grid: [(pairs / 128) as u32, 1, 1],
            block: [128, 1, 1],
            shared_bytes: 0,
            part: None,
            cooperative: None,
        },
        p,
        &mut mem,
    );
}

/// The padded scan over 4,096 blocks of 256 threads.
fn scan(base: u64) {
    let (blocks, threads) = (4096u64, 256u64);
    let mut mem = Flat {
        base,
        bytes: (0..2 * blocks * threads * 4)
            .map(|i| (i % 5) as u8)
            .collect(),
    };
    let mut p = Vec::new();
    p.extend_from_slice(&base.to_le_bytes());
    p.extend_from_slice(&(base + blocks * threads * 4).to_le_bytes());
    measure(
        SCAN_NAME,
        include_str!("../tests/kernels/scan.ptx"),
        "scan_padded",
        Dims {
            grid: [blocks as u32, 1, 1],
            block: [threads as u32, 1, 1],
            shared_bytes: (2 * threads * 4) as u32,
            part: None,
            cooperative: None,
        },
        p,
        &mut mem,
    );
}
