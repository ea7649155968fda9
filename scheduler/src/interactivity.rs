//! The CPU–GPU interactivity detector (FairGV section 3.2.3).
//!
//! A vGPU is CPU–GPU interactive while more than `threshold` synchronous calls
//! fall inside the sliding window that ends now (FairGV: more than 10 per
//! 10 ms). The verdict is re-evaluated at every query, so a vGPU whose phase
//! changes stops (or starts) counting as interactive within one window.
//!
//! Memory is bounded: the detector keeps only the `threshold + 1` most recent
//! call instants, which is all the verdict needs (the oldest of them is inside
//! the window exactly when more than `threshold` calls are).

use std::collections::VecDeque;

use crate::config::InteractivityConfig;
use crate::time::Nanos;

/// Sliding-window counter of one vGPU's synchronous calls.
#[derive(Debug, Clone)]
pub struct InteractivityDetector {
    config: InteractivityConfig,
    /// Instants of the most recent calls, oldest first, non-decreasing; at
    /// most `threshold + 1` of them.
    recent: VecDeque<Nanos>,
}

impl InteractivityDetector {
    /// A detector that has seen no calls.
    pub fn new(config: InteractivityConfig) -> Self {
        InteractivityDetector {
            config,
            recent: VecDeque::new(),
        }
    }

    /// Notes one synchronous call at `now`. An instant earlier than the last
    /// one recorded counts as the last one.
    pub fn record(&mut self, now: Nanos) {
        let now = self.recent.back().map_or(now, |&last| now.max(last));
        self.recent.push_back(now);
        if self.recent.len() > self.capacity() {
            self.recent.pop_front();
        }
    }

    /// Whether more than `threshold` calls fall in the window `(now - window, now]`.
    pub fn is_interactive(&self, now: Nanos) -> bool {
        if self.recent.len() < self.capacity() {
            return false;
        }
        // The oldest kept call is the (threshold + 1)-th most recent one.
        self.recent
            .front()
            .is_some_and(|&oldest| now.saturating_sub(oldest) < self.config.window())
    }

    /// The thresholds in force.
    pub fn config(&self) -> InteractivityConfig {
        self.config
    }

    fn capacity(&self) -> usize {
        self.config.threshold() as usize + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Nanos {
        Nanos::from_millis(n)
    }

    #[test]
    fn paper_threshold_is_more_than_ten_per_ten_ms() {
        let mut d = InteractivityDetector::new(InteractivityConfig::default());
        // Ten calls 0.5 ms apart: exactly 10 in the window, not interactive.
        for i in 0..10 {
            d.record(Nanos::from_micros(500 * i));
        }
        assert!(!d.is_interactive(Nanos::from_micros(4_500)));
        // The eleventh within 10 ms of the first makes it interactive.
        d.record(Nanos::from_micros(5_000));
        assert!(d.is_interactive(Nanos::from_micros(5_000)));
        // Still interactive until the first of those eleven leaves the window.
        assert!(d.is_interactive(Nanos::from_micros(9_999)));
        assert!(!d.is_interactive(ms(10)));
    }

    #[test]
    fn eleven_calls_spread_over_more_than_the_window_are_not_interactive() {
        let mut d = InteractivityDetector::new(InteractivityConfig::default());
        for i in 0..=10 {
            d.record(ms(i)); // 11 calls over 10 ms: the first is at the edge.
        }
        assert!(!d.is_interactive(ms(10)));
        d.record(Nanos::from_micros(10_500));
        assert!(d.is_interactive(Nanos::from_micros(10_500)));
    }

    #[test]
    fn verdict_follows_phase_changes() {
        let mut d = InteractivityDetector::new(InteractivityConfig::default());
        // SRD1-like phase: 64 sync calls per ms.
        let mut t = Nanos::ZERO;
        for _ in 0..640 {
            d.record(t);
            t += Nanos::from_nanos(15_625);
        }
        assert!(d.is_interactive(t));
        // MM-like phase: almost no sync calls. One window later it is not.
        assert!(!d.is_interactive(t + ms(10)));
        d.record(t + ms(20));
        assert!(!d.is_interactive(t + ms(20)));
    }

    #[test]
    fn custom_thresholds_and_bounded_memory() {
        let cfg = InteractivityConfig::new(ms(1), 2).unwrap();
        let mut d = InteractivityDetector::new(cfg);
        d.record(Nanos::ZERO);
        d.record(Nanos::from_micros(100));
        assert!(!d.is_interactive(Nanos::from_micros(100)));
        d.record(Nanos::from_micros(200));
        assert!(d.is_interactive(Nanos::from_micros(200)));
        for i in 0..1_000 {
            d.record(Nanos::from_micros(300 + i));
        }
        assert_eq!(d.recent.len(), 3);
        // An out-of-order instant counts as the latest one.
        d.record(Nanos::ZERO);
        assert_eq!(d.recent.back(), Some(&Nanos::from_micros(1_299)));
    }

    #[test]
    fn zero_threshold_means_any_call_in_the_window() {
        let cfg = InteractivityConfig::new(ms(10), 0).unwrap();
        let mut d = InteractivityDetector::new(cfg);
        assert!(!d.is_interactive(Nanos::ZERO));
        d.record(ms(1));
        assert!(d.is_interactive(ms(5)));
        assert!(!d.is_interactive(ms(11)));
    }
}
