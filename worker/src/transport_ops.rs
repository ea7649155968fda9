//! The transport's own opcodes: no-op and bulk copies into and out of a
//! per-channel scratch buffer. They exist to measure the transport and to
//! test it end to end without any device behind it.

use std::sync::Arc;

use fairgpu_protocol::wire::ValidRequest;
use fairgpu_protocol::{Opcode, Status};

use crate::host::{Answer, ArenaSlice, Handler};
use fairgpu_executor::host_memory::{HostCharge, HostMemory};

/// Largest scratch buffer a channel may address through CopyIn/CopyOut.
pub const SCRATCH_LIMIT: usize = 64 * 1024 * 1024;

/// Executes Nop, CopyIn and CopyOut.
#[derive(Debug)]
pub struct TransportOps {
    /// Each channel's scratch buffer and its charge (its capacity).
    scratch: Vec<(Vec<u8>, HostCharge)>,
    /// What the scratch buffers are charged to.
    budget: Arc<HostMemory>,
}

impl Default for TransportOps {
    fn default() -> Self {
        TransportOps::new(HostMemory::unlimited())
    }
}

impl TransportOps {
    /// Transport ops whose scratch buffers are charged to `budget`.
    pub fn new(budget: Arc<HostMemory>) -> Self {
        TransportOps {
            scratch: Vec::new(),
            budget,
        }
    }

    fn scratch(&mut self, ch: u32, end: usize) -> Result<&mut Vec<u8>, Status> {
        if end > SCRATCH_LIMIT {
            return Err(Status::INVALID_VALUE);
        }
        let ch = ch as usize;
        if self.scratch.len() <= ch {
            let budget = &self.budget;
            self.scratch
                .resize_with(ch + 1, || (Vec::new(), budget.empty()));
        }
        let (buf, charge) = &mut self.scratch[ch];
        if buf.len() < end {
            charge
                .resize(end as u64, "a channel's transport scratch buffer")
                .map_err(|_| Status::OUT_OF_MEMORY)?;
            // Exactly `end`, so that the capacity is what was charged.
            buf.reserve_exact(end - buf.len());
            buf.resize(end, 0);
        }
        Ok(buf)
    }
}

impl Handler for TransportOps {
    fn handle(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        arena: &ArenaSlice<'_>,
    ) -> Result<Answer, Status> {
        match req.op {
            Opcode::Nop => Ok(Answer {
                vals: [req.args[0], 0, 0, 0, 0],
                out_len: 0,
            }),
            Opcode::CopyIn | Opcode::CopyOut => {
                let off = usize::try_from(req.args[0]).map_err(|_| Status::INVALID_VALUE)?;
                let end = off.checked_add(arena.len()).ok_or(Status::INVALID_VALUE)?;
                let buf = self.scratch(ch, end)?;
                if req.op == Opcode::CopyIn {
                    arena.read(0, &mut buf[off..end])?;
                    Ok(Answer::default())
                } else {
                    arena.write(0, &buf[off..end])?;
                    Ok(Answer {
                        vals: [0; 5],
                        out_len: arena.len() as u32,
                    })
                }
            }
            _ => Err(Status::NOT_SUPPORTED),
        }
    }

    fn reset(&mut self, ch: u32) {
        if let Some((buf, charge)) = self.scratch.get_mut(ch as usize) {
            *buf = Vec::new();
            // Shrinking always succeeds.
            let _ = charge.resize(0, "a channel's transport scratch buffer");
        }
    }
}
