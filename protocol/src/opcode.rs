//! The opcode space.
//!
//! | range           | owner                                              |
//! |-----------------|----------------------------------------------------|
//! | `0x0000`        | never valid (a zeroed slot is not a request)       |
//! | `0x0001-0x00ff` | transport: no-op, bulk copies, channel control     |
//! | `0x0100-0x0fff` | CUDA driver API calls                              |
//! | `0x1000-0xffff` | reserved                                           |
//!
//! A host that receives an opcode it does not know fails that request with
//! CUDA_ERROR_NOT_SUPPORTED; the channel stays up.

/// Operations a request can ask for.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Opcode {
    /// Does nothing; answers with `vals[0] = args[0]`. Used to measure the
    /// round trip.
    Nop = 0x0001,
    /// Copies the request's arena slice into the host's per-channel scratch
    /// buffer at offset `args[0]`. Used to measure bulk bandwidth.
    CopyIn = 0x0002,
    /// Copies `arena_len` bytes of the scratch buffer from offset `args[0]`
    /// into the request's arena slice.
    CopyOut = 0x0003,
}

/// The first opcode of the CUDA driver API range.
pub const CUDA_FIRST: u16 = 0x0100;
/// The last opcode of the CUDA driver API range.
pub const CUDA_LAST: u16 = 0x0fff;

/// An opcode this protocol version does not define.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown opcode {0:#06x}")]
pub struct UnknownOpcode(pub u16);

impl TryFrom<u16> for Opcode {
    type Error = UnknownOpcode;

    fn try_from(v: u16) -> Result<Self, Self::Error> {
        Ok(match v {
            0x0001 => Opcode::Nop,
            0x0002 => Opcode::CopyIn,
            0x0003 => Opcode::CopyOut,
            other => return Err(UnknownOpcode(other)),
        })
    }
}

impl Opcode {
    /// Every opcode, for exhaustive tests and documentation.
    pub const ALL: [Opcode; 3] = [Opcode::Nop, Opcode::CopyIn, Opcode::CopyOut];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_zero() {
        for op in Opcode::ALL {
            assert_eq!(Opcode::try_from(op as u16), Ok(op));
        }
        assert_eq!(Opcode::try_from(0), Err(UnknownOpcode(0)));
        assert_eq!(Opcode::try_from(CUDA_FIRST), Err(UnknownOpcode(CUDA_FIRST)));
    }
}
