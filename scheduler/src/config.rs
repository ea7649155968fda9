//! Settings shared by every policy: the time slice and the interactivity
//! detector's thresholds. Each is validated when it is built, so a policy
//! never holds an impossible value.

use crate::time::Nanos;

/// A setting outside its allowed range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The time slice.
    #[error("time slice {slice} is outside {min}..={max}")]
    Slice {
        /// What was asked for.
        slice: Nanos,
        /// Smallest allowed.
        min: Nanos,
        /// Largest allowed.
        max: Nanos,
    },
    /// The interactivity window.
    #[error("interactivity window {window} is outside {min}..={max}")]
    Window {
        /// What was asked for.
        window: Nanos,
        /// Smallest allowed.
        min: Nanos,
        /// Largest allowed.
        max: Nanos,
    },
    /// The interactivity threshold (it sizes a per-vGPU buffer).
    #[error("interactivity threshold {threshold} exceeds {max}")]
    Threshold {
        /// What was asked for.
        threshold: u32,
        /// Largest allowed.
        max: u32,
    },
    /// The Credit accounting period.
    #[error("credit accounting period {period} is outside {min}..={max}")]
    Period {
        /// What was asked for.
        period: Nanos,
        /// Smallest allowed.
        min: Nanos,
        /// Largest allowed.
        max: Nanos,
    },
}

/// How long one grant lasts before its holder must give the GPU back.
///
/// FairGV (section 3.2.1) uses 6 ms on GPUs that cannot preempt kernels, for
/// the responsiveness of interactive work, and 30 ms on preemptive GPUs, where
/// a context switch is costly. On a non-preemptive GPU the holder may overrun
/// the slice by the kernel it has in flight; the overrun is charged to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SliceConfig {
    slice: Nanos,
}

impl SliceConfig {
    /// FairGV's slice for non-preemptive GPUs.
    pub const NON_PREEMPTIVE: Nanos = Nanos::from_millis(6);
    /// FairGV's slice for preemptive GPUs.
    pub const PREEMPTIVE: Nanos = Nanos::from_millis(30);
    /// Shortest slice accepted: below this, switching costs dominate.
    pub const MIN: Nanos = Nanos::from_micros(100);
    /// Longest slice accepted.
    pub const MAX: Nanos = Nanos::from_secs(10);

    /// 6 ms.
    pub const fn non_preemptive() -> Self {
        SliceConfig {
            slice: Self::NON_PREEMPTIVE,
        }
    }

    /// 30 ms.
    pub const fn preemptive() -> Self {
        SliceConfig {
            slice: Self::PREEMPTIVE,
        }
    }

    /// A slice of the administrator's choosing, within [`Self::MIN`]..=[`Self::MAX`].
    pub fn new(slice: Nanos) -> Result<Self, ConfigError> {
        if (Self::MIN..=Self::MAX).contains(&slice) {
            Ok(SliceConfig { slice })
        } else {
            Err(ConfigError::Slice {
                slice,
                min: Self::MIN,
                max: Self::MAX,
            })
        }
    }

    /// The slice.
    pub const fn slice(&self) -> Nanos {
        self.slice
    }
}

impl Default for SliceConfig {
    /// [`SliceConfig::non_preemptive`]: the GPUs fairgpu targets do not
    /// preempt kernels at a useful granularity.
    fn default() -> Self {
        Self::non_preemptive()
    }
}

/// When a vGPU counts as CPU–GPU interactive: more than `threshold`
/// synchronous calls within any `window` (FairGV section 3.2.3: more than 10
/// per 10 ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InteractivityConfig {
    window: Nanos,
    threshold: u32,
}

impl InteractivityConfig {
    /// FairGV's window.
    pub const WINDOW: Nanos = Nanos::from_millis(10);
    /// FairGV's threshold.
    pub const THRESHOLD: u32 = 10;
    /// Shortest window accepted.
    pub const MIN_WINDOW: Nanos = Nanos::from_micros(1);
    /// Longest window accepted.
    pub const MAX_WINDOW: Nanos = Nanos::from_secs(10);
    /// Largest threshold accepted: the detector keeps `threshold + 1`
    /// timestamps per vGPU.
    pub const MAX_THRESHOLD: u32 = 10_000;

    /// More than `threshold` calls within `window`.
    pub fn new(window: Nanos, threshold: u32) -> Result<Self, ConfigError> {
        if !(Self::MIN_WINDOW..=Self::MAX_WINDOW).contains(&window) {
            return Err(ConfigError::Window {
                window,
                min: Self::MIN_WINDOW,
                max: Self::MAX_WINDOW,
            });
        }
        if threshold > Self::MAX_THRESHOLD {
            return Err(ConfigError::Threshold {
                threshold,
                max: Self::MAX_THRESHOLD,
            });
        }
        Ok(InteractivityConfig { window, threshold })
    }

    /// The sliding window.
    pub const fn window(&self) -> Nanos {
        self.window
    }

    /// How many calls within the window are still not interactive.
    pub const fn threshold(&self) -> u32 {
        self.threshold
    }
}

impl Default for InteractivityConfig {
    /// More than 10 synchronous calls per 10 ms.
    fn default() -> Self {
        InteractivityConfig {
            window: Self::WINDOW,
            threshold: Self::THRESHOLD,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_bounds() {
        assert_eq!(SliceConfig::default().slice(), Nanos::from_millis(6));
        assert_eq!(SliceConfig::preemptive().slice(), Nanos::from_millis(30));
        assert!(SliceConfig::new(Nanos::from_millis(1)).is_ok());
        let e = SliceConfig::new(Nanos::from_micros(99)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "time slice 99.000us is outside 100.000us..=10.000s"
        );
        assert!(SliceConfig::new(Nanos::from_secs(11)).is_err());
    }

    #[test]
    fn interactivity_bounds() {
        let d = InteractivityConfig::default();
        assert_eq!((d.window(), d.threshold()), (Nanos::from_millis(10), 10));
        assert!(InteractivityConfig::new(Nanos::from_millis(5), 0).is_ok());
        assert!(InteractivityConfig::new(Nanos::ZERO, 10).is_err());
        assert_eq!(
            InteractivityConfig::new(Nanos::from_millis(10), 10_001).unwrap_err(),
            ConfigError::Threshold {
                threshold: 10_001,
                max: 10_000
            }
        );
    }
}
