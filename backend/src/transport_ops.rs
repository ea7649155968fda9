//! The transport's own opcodes: no-op and bulk copies into and out of a
//! per-channel scratch buffer. They exist to measure the transport and to
//! test it end to end without any device behind it.

use fairgpu_protocol::wire::ValidRequest;
use fairgpu_protocol::{Opcode, Status};

use crate::host::{Answer, ArenaSlice, Handler};

/// Largest scratch buffer a channel may address through CopyIn/CopyOut.
pub const SCRATCH_LIMIT: usize = 64 * 1024 * 1024;

/// Executes Nop, CopyIn and CopyOut.
#[derive(Debug, Default)]
pub struct TransportOps {
    scratch: Vec<Vec<u8>>,
}

impl TransportOps {
    fn scratch(&mut self, ch: u32, end: usize) -> Result<&mut Vec<u8>, Status> {
        if end > SCRATCH_LIMIT {
            return Err(Status::INVALID_VALUE);
        }
        let ch = ch as usize;
        if self.scratch.len() <= ch {
            self.scratch.resize_with(ch + 1, Vec::new);
        }
        let buf = &mut self.scratch[ch];
        if buf.len() < end {
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
        if let Some(buf) = self.scratch.get_mut(ch as usize) {
            *buf = Vec::new();
        }
    }
}
