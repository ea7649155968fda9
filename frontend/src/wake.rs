//! Which way the host wakes a waiting guest, and why.
//!
//! Chosen once per region, automatically, in this order:
//! 1. same-host futex: the region is a shared file (local mode) and the
//!    host's `FUTEX_WAKE` on the channel's `guest_wake` word reaches us;
//! 2. MSI-X through vfio-pci: the region is an ivshmem device's BAR2 and the
//!    device can be opened through vfio (a guest IOMMU, vfio-pci loaded,
//!    the group not held by another process); the host raises vector
//!    [`crate::vfio::HOST_TO_GUEST_VECTOR`];
//! 3. bounded sleep backoff: nothing can interrupt the wait.
//!
//! [`WAIT_ENV`] forces one of them: `futex`, `msix` (fails to open if the
//! interrupt path is unavailable, with the reason), `backoff`, or `auto`.
//! All three use the same Dekker handshake on the channel's
//! `guest_sleeping` word (see `channel.rs`); only how the guest blocks and
//! how the host's wake reaches it differ.

/// How a channel blocks once its spin budget is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// On the channel's `guest_wake` futex, woken by the host (local mode).
    Futex,
    /// On the eventfd of the ivshmem device's MSI-X vector 1, received
    /// through vfio-pci, which the host raises when it wakes a channel that
    /// published `guest_sleeping` (in a VM with an IOMMU; see
    /// [`crate::vfio`]). A poll timeout of one block slice is the safety net.
    Interrupt,
    /// Sleeping with a bounded exponential backoff, re-checking after each
    /// sleep: the kernel refused to block on the region (in a VM the region
    /// is a PFN-mapped BAR and FUTEX_WAIT fails with EFAULT; the host's
    /// wake could not cross the VM boundary anyway).
    SleepBackoff,
}

/// Environment variable that forces a wake path.
pub const WAIT_ENV: &str = "FAIRGPU_WAIT";

/// What the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitPreference {
    /// The first path that works, in the order above.
    Auto,
    /// The futex (on an ivshmem BAR it fails at the first block, and the
    /// channel falls back to the sleep backoff).
    Futex,
    /// MSI-X through vfio, or fail.
    Interrupt,
    /// The sleep backoff, even where something better exists.
    SleepBackoff,
}

impl WaitPreference {
    /// Parses a [`WAIT_ENV`] value.
    pub fn parse(s: &str) -> Option<WaitPreference> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(WaitPreference::Auto),
            "futex" => Some(WaitPreference::Futex),
            "msix" | "msi-x" | "interrupt" | "vfio" => Some(WaitPreference::Interrupt),
            "backoff" | "sleep" => Some(WaitPreference::SleepBackoff),
            _ => None,
        }
    }

    /// [`WAIT_ENV`]'s preference; an unknown value counts as `auto` and is
    /// returned as the second element so it can be reported.
    pub fn from_env() -> (WaitPreference, Option<String>) {
        match std::env::var(WAIT_ENV) {
            Err(_) => (WaitPreference::Auto, None),
            Ok(v) => match WaitPreference::parse(&v) {
                Some(p) => (p, None),
                None => (WaitPreference::Auto, Some(v)),
            },
        }
    }
}

/// The wake path a region uses and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WakeChoice {
    /// How channels of the region block after spinning.
    pub mode: WaitMode,
    /// Whether [`WAIT_ENV`] forced it.
    pub forced: bool,
    /// Why this path, and why not the better ones.
    pub reason: String,
}

impl WaitMode {
    /// A short name: `futex`, `msix`, `backoff`.
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Futex => "futex",
            WaitMode::Interrupt => "msix",
            WaitMode::SleepBackoff => "backoff",
        }
    }
}

/// An error and its sources, `: `-separated, for a one-line reason.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_documented_value() {
        assert_eq!(WaitPreference::parse("auto"), Some(WaitPreference::Auto));
        assert_eq!(WaitPreference::parse(""), Some(WaitPreference::Auto));
        assert_eq!(WaitPreference::parse("futex"), Some(WaitPreference::Futex));
        assert_eq!(
            WaitPreference::parse("MSIX"),
            Some(WaitPreference::Interrupt)
        );
        assert_eq!(
            WaitPreference::parse(" backoff\n"),
            Some(WaitPreference::SleepBackoff)
        );
        assert_eq!(WaitPreference::parse("fast"), None);
    }
}
