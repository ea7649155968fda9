//! Fuzzes the worker's CUDA request layer as a whole: sequences of
//! requests, as a guest's channels send them, through `CudaOps` (handle
//! tables, pointer and range checks, quotas, module staging and loading,
//! launches) on SimGpu, whose kernels really run (within a small budget),
//! and its OpenCL requests (`cl_ops`) on the host's OpenCL platform when
//! it has one (PoCL in CI).
//!
//! Input: records, each
//!   `ch: u8` (channel, of 4), `op: u8` (an index into `Opcode::ALL`),
//!   five arguments, each a tag byte then its value:
//!     tag % 4 == 0: 8 bytes, little-endian;
//!     tag % 4 == 1: 1 byte;
//!     tag % 4 == 2: 1 byte `i`, the value an earlier request answered
//!                   (`vals[0]` of the `i`-th last successful request: a
//!                   handle, a device pointer), so that sequences can use
//!                   what they created;
//!     tag % 4 == 3: 1 byte `i`, that value plus a second byte;
//!   `len: u16` little-endian, then `len` bytes for the request's arena
//!   (at most the arena's size; what is missing reads as zeros);
//! and `ch` with its top bit set resets that channel (its owner left).
//!
//! Before each request, and before the final resets, the channel's
//! unfinished work (a graph launch's steps) runs, as the server runs it.
//!
//! Properties:
//! - no request panics the worker, whatever the sequence;
//! - device memory in use stays within the quota, host memory within the
//!   VM's budget, at every step;
//! - resetting every channel gives every byte of device memory back, and
//!   dropping the handler gives back every byte of host memory charged.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use fairgpu_executor::host_memory::HostMemory;
use fairgpu_executor::sim::{SimConfig, SimDevice, SimGpu};
use fairgpu_protocol::wire::{Request, REQ_NEEDS_RESPONSE};
use fairgpu_protocol::{Opcode, RegionConfig};
use fairgpu_worker::cuda_ops::CudaOps;
use fairgpu_worker::host::{Handler, HostRegion, Resume};
use libfuzzer_sys::fuzz_target;

const CHANNELS: u32 = 4;
const ARENA: u32 = 64 * 1024;
const QUOTA: u64 = 16 << 20;
const HOST_MEMORY: u64 = 64 << 20;
/// Most requests one input sends.
const MAX_REQUESTS: usize = 64;

/// One region for the process: the arenas the requests' data lie in. Its
/// file is removed at once; the mapping stays.
fn region() -> &'static HostRegion {
    static REGION: OnceLock<HostRegion> = OnceLock::new();
    REGION.get_or_init(|| {
        let path = PathBuf::from(format!("/dev/shm/fairgpu-fuzz-cuda-{}", std::process::id()));
        let cfg = RegionConfig {
            channels: CHANNELS,
            ring_entries: 8,
            arena_size: ARENA,
            ..Default::default()
        };
        let r = HostRegion::create(&path, &cfg).expect("a fuzzing region");
        let _ = std::fs::remove_file(&path);
        r
    })
}

/// Reads the input front to back.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn bytes(&mut self, n: usize) -> &[u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }

    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let s = self.bytes(8);
        b[..s.len()].copy_from_slice(s);
        u64::from_le_bytes(b)
    }
}

fuzz_target!(|data: &[u8]| {
    let region = region();
    let cfg = SimConfig {
        max_instructions: 20_000,
        ..SimConfig::default()
    };
    let budget = HostMemory::new(HOST_MEMORY);
    let gpu = SimGpu::new(cfg, SimDevice::private_virtual(0))
        .expect("SimGpu")
        .with_host_memory(budget.clone());
    let mut ops =
        CudaOps::new(Box::new(gpu), "fuzz".into(), QUOTA).with_host_memory(budget.clone());

    let mut input = Input(data);
    let mut answers: Vec<u64> = Vec::new();
    for call_id in 0..MAX_REQUESTS as u64 {
        let Some(ch) = input.byte() else { break };
        if ch & 0x80 != 0 {
            ops.reset(u32::from(ch & 0x7f) % CHANNELS);
            continue;
        }
        let ch = u32::from(ch) % CHANNELS;
        let Some(op) = input.byte() else { break };
        let op = Opcode::ALL[usize::from(op) % Opcode::ALL.len()];
        let mut args = [0u64; 5];
        for a in &mut args {
            let Some(tag) = input.byte() else { break };
            let earlier = |i: u8| {
                answers
                    .len()
                    .checked_sub(1 + usize::from(i))
                    .map_or(0, |k| answers[k])
            };
            *a = match tag % 4 {
                0 => input.u64(),
                1 => u64::from(input.byte().unwrap_or(0)),
                2 => earlier(input.byte().unwrap_or(0)),
                _ => {
                    let base = earlier(input.byte().unwrap_or(0));
                    base.wrapping_add(u64::from(input.byte().unwrap_or(0)))
                }
            };
        }
        let len = {
            let b = input.bytes(2);
            let mut l = [0u8; 2];
            l[..b.len()].copy_from_slice(b);
            u32::from(u16::from_le_bytes(l)).min(ARENA)
        };
        let payload = input.bytes(len as usize).to_vec();
        let slice = region.arena_slice(ch, 0..len).expect("in the arena");
        let mut data = vec![0u8; len as usize];
        data[..payload.len()].copy_from_slice(&payload);
        slice.write(0, &data).expect("in the arena");

        if op == Opcode::ClBuildProgram {
            // Sources only: a binary goes to the host platform's loader
            // (PoCL here), whose robustness against crafted binaries is
            // not this target's to judge (a crash there ends only the
            // VM's own worker; docs/threat-model.md).
            args[0] = 0;
        }
        let req = Request {
            opcode: op as u16,
            flags: REQ_NEEDS_RESPONSE,
            vcpu: 0,
            call_id,
            arena_off: 0,
            arena_len: len,
            args,
        };
        let Ok(valid) = req.validate(ARENA) else {
            continue;
        };
        // As the server does: what an answered request left unfinished
        // on the channel (a graph launch's steps, a sliced kernel's parts)
        // runs before its next request.
        while let Resume::Ran(_) = ops.resume(ch) {}
        if let Ok(answer) = ops.handle(ch, &valid, &slice) {
            answers.push(answer.vals[0]);
        }
        let usage = ops.usage();
        assert!(usage.mem_used <= QUOTA, "device memory {usage:?}");
        assert!(
            budget.used() <= budget.limit(),
            "host memory {}",
            budget.used()
        );
    }
    for ch in 0..CHANNELS {
        while let Resume::Ran(_) = ops.resume(ch) {}
        ops.reset(ch);
    }
    let usage = ops.usage();
    assert_eq!(usage.mem_used, 0, "device memory kept after every reset");
    assert_eq!(usage.contexts, 0);
    drop(ops);
    assert_eq!(
        budget.used(),
        0,
        "host memory still charged after the handler went"
    );
});
