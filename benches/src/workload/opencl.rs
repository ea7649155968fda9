//! The generator's calls as OpenCL requests over fairgpu's protocol
//! ([`super::ClientKind::Opencl`]): a VM whose guest runs OpenCL, for the
//! mixed CUDA + OpenCL fairness cases. The host runs them on its OpenCL
//! platform (PoCL without a GPU).
//!
//! OpenCL C has no clock, so `fairgpu_spin` is an arithmetic loop whose
//! iterations per nanosecond are measured at connect: a kernel asked for
//! `ns` runs about that long on the host device when it runs alone.

use std::time::Instant;

use fairgpu_frontend::{CallError, Channel, GuestRegion, WaitConfig};
use fairgpu_protocol::opencl::{encode_arg, encode_words, KernelArg, NdRangeHeader};
use fairgpu_protocol::Opcode;

use super::{GpuClient, WorkloadError, COPY_BYTES};

/// The spin kernel: `iters` steps of a linear congruential generator per
/// work-item, its result kept by a store the compiler cannot drop.
const SPIN_SOURCE: &str = r#"
__kernel void fairgpu_spin(__global uint *out, const ulong iters) {
    uint x = (uint)get_global_id(0) + 1u;
    for (ulong i = 0; i < iters; i++) {
        x = x * 1664525u + 1013904223u;
    }
    if (x == 0x9e3779b9u) out[1] = x;
}
"#;

/// Iterations the calibration launch runs.
const CALIBRATE_ITERS: u64 = 1 << 22;
/// Event ids: `EVENT_BASE + i` for the generator's event `i`.
const EVENT_BASE: u64 = 1 << 32;

fn call<T>(call: &'static str, r: Result<T, CallError>) -> Result<T, WorkloadError> {
    r.map_err(|source| WorkloadError::Call { call, source })
}

/// The OpenCL client.
#[derive(Debug)]
pub struct ClClient {
    ch: Channel,
    queue: u64,
    kernel: u64,
    buf: u64,
    host_buf: Vec<u8>,
    iters_per_ns: f64,
    /// Which generator events have a live host event.
    live: Vec<bool>,
}

impl ClClient {
    /// Claims a channel, builds the spin kernel and calibrates it.
    pub fn connect(events: usize) -> Result<ClClient, WorkloadError> {
        let region = GuestRegion::discover().map_err(|e| WorkloadError::Region(e.to_string()))?;
        let mut ch = Channel::claim(region, WaitConfig::from_env())
            .map_err(|e| WorkloadError::Region(e.to_string()))?;
        let queue = call(
            "clCreateCommandQueue",
            ch.call(Opcode::ClCreateQueue, [2, 0, 0, 0, 0]),
        )?
        .vals[0];
        let src = SPIN_SOURCE.as_bytes();
        call(
            "clCreateProgramWithSource",
            ch.send_bulk(
                Opcode::ClProgramStage,
                [0, src.len() as u64, 0, 0, 0],
                0,
                src,
            ),
        )?;
        let built = call(
            "clBuildProgram",
            ch.call_with(
                Opcode::ClBuildProgram,
                [0, src.len() as u64, 0, 0, 0],
                &[],
                &mut [],
            ),
        )?;
        if built.vals[1] != 0 {
            return Err(WorkloadError::Setup("the spin kernel did not build"));
        }
        let name = b"fairgpu_spin";
        let kernel = call(
            "clCreateKernel",
            ch.call_with(
                Opcode::ClCreateKernel,
                [built.vals[0], name.len() as u64, 0, 0, 0],
                name,
                &mut [],
            ),
        )?
        .vals[0];
        let buf = call(
            "clCreateBuffer",
            ch.call(Opcode::ClCreateBuffer, [1, COPY_BYTES as u64, 0, 0, 0]),
        )?
        .vals[0];
        let host_buf = vec![super::FILL; COPY_BYTES];
        call(
            "clEnqueueWriteBuffer",
            ch.call_with(
                Opcode::ClWriteBuffer,
                [queue, buf, 0, 0, 0],
                &host_buf,
                &mut [],
            ),
        )?;
        let mut c = ClClient {
            ch,
            queue,
            kernel,
            buf,
            host_buf,
            iters_per_ns: 1.0,
            live: vec![false; events],
        };
        // Once to compile and warm up, once to measure.
        c.spin_iters(CALIBRATE_ITERS / 16, 1)?;
        c.ctx_sync()?;
        let t = Instant::now();
        c.spin_iters(CALIBRATE_ITERS, 1)?;
        c.ctx_sync()?;
        c.iters_per_ns = CALIBRATE_ITERS as f64 / t.elapsed().as_nanos().max(1) as f64;
        Ok(c)
    }

    fn spin_iters(&mut self, iters: u64, items: u32) -> Result<(), WorkloadError> {
        let hdr = NdRangeHeader {
            dims: 1,
            has_local: 1,
            global: [u64::from(items), 1, 1],
            local: [1, 1, 1],
            nargs: 2,
            ..Default::default()
        };
        let mut b = hdr.to_bytes().to_vec();
        encode_arg(&mut b, &KernelArg::Mem(self.buf));
        encode_arg(&mut b, &KernelArg::Bytes(iters.to_le_bytes().to_vec()));
        call(
            "clEnqueueNDRangeKernel",
            self.ch
                .call_async(Opcode::ClNdRange, [self.queue, self.kernel, 0, 0, 0], &b),
        )
    }

    fn event_id(&self, i: usize) -> Result<u64, WorkloadError> {
        if i < self.live.len() {
            Ok(EVENT_BASE + i as u64)
        } else {
            Err(WorkloadError::Setup("event index out of range"))
        }
    }

    fn end_ns(&mut self, i: usize) -> Result<u64, WorkloadError> {
        let id = self.event_id(i)?;
        let r = call(
            "clGetEventProfilingInfo",
            self.ch.call(Opcode::ClEventProfiling, [id, 0, 0, 0, 0]),
        )?;
        Ok(r.vals[3])
    }
}

impl GpuClient for ClClient {
    fn launch_spin(&mut self, ns: u64, blocks: u32) -> Result<(), WorkloadError> {
        let iters = (ns as f64 * self.iters_per_ns).round().max(1.0) as u64;
        self.spin_iters(iters, blocks)
    }
    fn copy_async(&mut self) -> Result<(), WorkloadError> {
        call(
            "clEnqueueWriteBuffer",
            self.ch.call_async(
                Opcode::ClWriteBuffer,
                [self.queue, self.buf, 0, 0, 0],
                &self.host_buf,
            ),
        )
    }
    fn read_back(&mut self) -> Result<(), WorkloadError> {
        let mut word = [0u8; 4];
        call(
            "clEnqueueReadBuffer",
            self.ch.call_with(
                Opcode::ClReadBuffer,
                [self.queue, self.buf, 0, 0, 0],
                &[],
                &mut word,
            ),
        )?;
        super::check_word("clEnqueueReadBuffer", word)
    }
    fn stream_sync(&mut self) -> Result<(), WorkloadError> {
        self.ctx_sync()
    }
    fn record(&mut self, i: usize) -> Result<(), WorkloadError> {
        let id = self.event_id(i)?;
        if self.live[i] {
            call(
                "clReleaseEvent",
                self.ch
                    .call_async(Opcode::ClReleaseEvent, [id, 0, 0, 0, 0], &[]),
            )?;
        }
        call(
            "clEnqueueMarker",
            self.ch
                .call_async(Opcode::ClMarker, [self.queue, 0, 0, 0, id], &[]),
        )?;
        self.live[i] = true;
        Ok(())
    }
    fn event_sync(&mut self, i: usize) -> Result<(), WorkloadError> {
        let id = self.event_id(i)?;
        call(
            "clWaitForEvents",
            self.ch
                .call_with(Opcode::ClWaitEvents, [0; 5], &encode_words(&[id]), &mut []),
        )
        .map(drop)
    }
    fn elapsed_ms(&mut self, a: usize, b: usize) -> Result<f32, WorkloadError> {
        let (ea, eb) = (self.end_ns(a)?, self.end_ns(b)?);
        Ok((eb.saturating_sub(ea) as f64 / 1e6) as f32)
    }
    fn ctx_sync(&mut self) -> Result<(), WorkloadError> {
        call(
            "clFinish",
            self.ch.call(Opcode::ClFinish, [self.queue, 0, 0, 0, 0]),
        )
        .map(drop)
    }
}
