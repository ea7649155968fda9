//! FairGV's fairness and performance metrics (section 5.4.1), as pure
//! functions.
//!
//! Throughput is device time: VM `i`'s measured throughput `T_i` is the
//! fraction of the measurement window the device spent on its kernels. Its
//! ideal throughput `O_i` is its weighted fair share of a device kept fully
//! busy by work-conserving VMs: weighted max-min fair ("water-filling") over
//! the VMs' demands, which is `w_i / Σw` when every VM saturates.
//!
//! - normalized throughput `x_i = T_i / O_i` (1: exactly its share);
//! - Min-Max Ratio `MMR = min x_i / max x_i` (1: perfectly fair, 0: one VM
//!   got nothing);
//! - aggregated overhead `= Σ O_i / Σ T_i`, ideal over measured aggregated
//!   throughput (1: the device was as busy as it could be; 1.25: a fifth of
//!   the device time the VMs could have used was lost);
//! - utilization `= Σ T_i`, the device's busy fraction.

use serde::{Deserialize, Serialize};

/// Weighted max-min fair shares of a device of capacity 1.
///
/// `demands[i]` is the most VM `i` can use (1 or more: it saturates the
/// device alone). Capacity goes to VMs in proportion to their weights; a VM
/// whose demand is below its proportional share gets its demand and the
/// rest is shared again among the others. Zero-weight VMs get nothing.
/// The shares sum to `min(1, Σ demand)` over positive weights.
pub fn ideal_shares(weights: &[f64], demands: &[f64]) -> Vec<f64> {
    assert_eq!(weights.len(), demands.len(), "one demand per weight");
    let n = weights.len();
    let mut share = vec![0.0; n];
    let mut open: Vec<usize> = (0..n)
        .filter(|&i| weights[i] > 0.0 && demands[i] > 0.0)
        .collect();
    let mut left = 1.0f64;
    while !open.is_empty() && left > 1e-12 {
        let total_w: f64 = open.iter().map(|&i| weights[i]).sum();
        // VMs whose remaining demand is below their proportional part of
        // what is left are satisfied; the rest is shared again.
        let satisfied: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| demands[i] - share[i] <= left * weights[i] / total_w)
            .collect();
        if satisfied.is_empty() {
            for &i in &open {
                share[i] += left * weights[i] / total_w;
            }
            break;
        }
        for &i in &satisfied {
            left -= demands[i] - share[i];
            share[i] = demands[i];
        }
        open.retain(|i| !satisfied.contains(i));
    }
    share
}

/// `x_i = T_i / O_i`; 0 when the ideal share is 0.
pub fn normalized_throughput(measured: f64, ideal: f64) -> f64 {
    if ideal > 0.0 {
        measured / ideal
    } else {
        0.0
    }
}

/// Min-Max Ratio of normalized throughputs: `min x / max x`, in [0, 1];
/// 1 for an empty set, 0 when every value is 0.
pub fn min_max_ratio(xs: &[f64]) -> f64 {
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    if xs.is_empty() {
        1.0
    } else if max <= 0.0 {
        0.0
    } else {
        (min / max).clamp(0.0, 1.0)
    }
}

/// Aggregated overhead: ideal aggregated throughput over measured; infinite
/// when nothing was measured.
pub fn aggregated_overhead(ideal_total: f64, measured_total: f64) -> f64 {
    if measured_total > 0.0 {
        ideal_total / measured_total
    } else {
        f64::INFINITY
    }
}

/// One VM's part in a measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VmShare {
    /// Its weight.
    pub weight: f64,
    /// The most device time per second it can use (1.0: saturating).
    pub demand: f64,
    /// Measured device-time share of the window, `T_i`.
    pub measured: f64,
}

/// The metrics of one measurement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fairness {
    /// `O_i`, per VM.
    pub ideal: Vec<f64>,
    /// `x_i`, per VM.
    pub normalized: Vec<f64>,
    /// Min-Max Ratio over VMs with a positive ideal share.
    pub mmr: f64,
    /// Aggregated overhead.
    pub overhead: f64,
    /// Measured device utilization, `Σ T_i`.
    pub utilization: f64,
    /// Ideal utilization, `Σ O_i`.
    pub ideal_utilization: f64,
}

/// All metrics of one measurement.
pub fn evaluate(vms: &[VmShare]) -> Fairness {
    let weights: Vec<f64> = vms.iter().map(|v| v.weight).collect();
    let demands: Vec<f64> = vms.iter().map(|v| v.demand).collect();
    let ideal = ideal_shares(&weights, &demands);
    let normalized: Vec<f64> = vms
        .iter()
        .zip(&ideal)
        .map(|(v, &o)| normalized_throughput(v.measured, o))
        .collect();
    let counted: Vec<f64> = normalized
        .iter()
        .zip(&ideal)
        .filter(|(_, &o)| o > 0.0)
        .map(|(&x, _)| x)
        .collect();
    let utilization: f64 = vms.iter().map(|v| v.measured).sum();
    let ideal_utilization: f64 = ideal.iter().sum();
    Fairness {
        mmr: min_max_ratio(&counted),
        overhead: aggregated_overhead(ideal_utilization, utilization),
        utilization,
        ideal_utilization,
        ideal,
        normalized,
    }
}

/// Utilization without work conservation: each VM keeps the device for its
/// weighted share of the time whether or not it has work, and uses the
/// fraction `demand` of it (a holder that polls an empty ring until its
/// slice ends, FairGV Fig. 10's "without work-conserving").
pub fn non_work_conserving_utilization(weights: &[f64], demands: &[f64]) -> f64 {
    let total: f64 = weights.iter().filter(|w| **w > 0.0).sum();
    if total <= 0.0 {
        return 0.0;
    }
    weights
        .iter()
        .zip(demands)
        .filter(|(w, _)| **w > 0.0)
        .map(|(w, d)| w / total * d.clamp(0.0, 1.0))
        .sum()
}

/// A rate from two observations of a counter: `(t0, v0)` and `(t1, v1)`,
/// times in seconds; `None` when the span is empty or the counter went
/// backwards.
pub fn rate(t0: f64, v0: u64, t1: f64, v1: u64) -> Option<f64> {
    (t1 > t0 && v1 >= v0).then(|| (v1 - v0) as f64 / (t1 - t0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn saturating_vms_get_their_weighted_share() {
        let s = ideal_shares(&[1.0, 2.0, 3.0], &[1.0; 3]);
        assert!(close(s[0], 1.0 / 6.0) && close(s[1], 2.0 / 6.0) && close(s[2], 0.5));
        let s = ideal_shares(&[1.0, 2.0, 2.0, 3.0, 3.0, 4.0], &[1.0; 6]);
        assert!(close(s.iter().sum::<f64>(), 1.0));
        assert!(close(s[5], 4.0 / 15.0));
    }

    #[test]
    fn water_filling_gives_leftovers_to_the_others() {
        // A VM that needs 20% of the device gets it; the other gets 80%.
        let s = ideal_shares(&[1.0, 1.0], &[0.2, 1.0]);
        assert!(close(s[0], 0.2) && close(s[1], 0.8), "{s:?}");
        // Cascading: 0.1 satisfied first, then 0.3 is below half of 0.9.
        let s = ideal_shares(&[1.0, 1.0, 1.0], &[0.1, 0.3, 1.0]);
        assert!(
            close(s[0], 0.1) && close(s[1], 0.3) && close(s[2], 0.6),
            "{s:?}"
        );
        // Everyone satisfied: the device is not full.
        let s = ideal_shares(&[1.0, 3.0], &[0.2, 0.3]);
        assert!(close(s[0], 0.2) && close(s[1], 0.3));
        // Weight or demand 0: nothing.
        let s = ideal_shares(&[0.0, 1.0, 1.0], &[1.0, 0.0, 1.0]);
        assert_eq!(s, vec![0.0, 0.0, 1.0]);
        assert!(ideal_shares(&[], &[]).is_empty());
    }

    #[test]
    fn min_max_ratio_and_overhead() {
        assert_eq!(min_max_ratio(&[1.0, 1.0, 1.0]), 1.0);
        assert!(close(min_max_ratio(&[0.5, 1.0, 2.0]), 0.25));
        assert_eq!(min_max_ratio(&[0.0, 1.0]), 0.0);
        assert_eq!(min_max_ratio(&[0.0, 0.0]), 0.0);
        assert_eq!(min_max_ratio(&[]), 1.0);
        assert!(close(aggregated_overhead(1.0, 0.8), 1.25));
        assert!(aggregated_overhead(1.0, 0.0).is_infinite());
        assert_eq!(normalized_throughput(0.3, 0.0), 0.0);
        assert!(close(normalized_throughput(0.3, 0.15), 2.0));
    }

    #[test]
    fn evaluate_ideal_and_skewed() {
        // Exactly weighted: MMR 1, overhead 1.
        let vms: Vec<VmShare> = [1.0, 2.0, 3.0]
            .iter()
            .map(|&w| VmShare {
                weight: w,
                demand: 1.0,
                measured: w / 6.0,
            })
            .collect();
        let f = evaluate(&vms);
        assert!(close(f.mmr, 1.0) && close(f.overhead, 1.0) && close(f.utilization, 1.0));
        assert!(f.normalized.iter().all(|x| close(*x, 1.0)));
        // FIFO-like: equal shares despite weights 1:2:3, 10% idle.
        let vms: Vec<VmShare> = [1.0, 2.0, 3.0]
            .iter()
            .map(|&w| VmShare {
                weight: w,
                demand: 1.0,
                measured: 0.3,
            })
            .collect();
        let f = evaluate(&vms);
        // x = 1.8, 0.9, 0.6.
        assert!(close(f.mmr, 0.6 / 1.8), "{}", f.mmr);
        assert!(close(f.overhead, 1.0 / 0.9));
        assert!(close(f.ideal_utilization, 1.0));
    }

    #[test]
    fn non_work_conserving_reference() {
        // Fig. 10: a saturating VM and one that sleeps 80% of the time,
        // equal weights: 0.5 * 1 + 0.5 * 0.2.
        assert!(close(
            non_work_conserving_utilization(&[1.0, 1.0], &[1.0, 0.2]),
            0.6
        ));
        assert_eq!(non_work_conserving_utilization(&[], &[]), 0.0);
    }

    #[test]
    fn rates() {
        assert_eq!(rate(1.0, 100, 3.0, 500), Some(200.0));
        assert_eq!(rate(1.0, 100, 1.0, 500), None);
        assert_eq!(rate(1.0, 500, 2.0, 100), None);
    }
}
