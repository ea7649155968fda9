//! The scheduling policy a configuration asks for: built by the daemon's
//! scheduler thread, and consulted by each worker for what a holder with
//! nothing to issue does.

use fairgpu_scheduler::{
    Credit, CreditConfig, CreditVariant, DfqVariant, DisengagedFq, ExecutionMode, FairQueuing,
    FairQueuingConfig, IdleBehaviour, Policy, PolicyKind, PriorityMode, TimeGraph, Timeslice,
    TimesliceVariant,
};

use crate::{Accounting, SchedConfig};

/// The policy `cfg` asks for, with its slice; `None` for `policy = "none"`.
/// Credit variants are collaborative (they charge measured usage) unless
/// the accounting is `none`, which gives the paper's time-sharing baselines.
pub fn build_policy(cfg: &SchedConfig) -> Option<Box<dyn Policy>> {
    let kind = cfg.policy?;
    let policy: Box<dyn Policy> = match kind {
        PolicyKind::FairQueuing => Box::new(FairQueuing::new(FairQueuingConfig {
            slice: cfg.slice,
            wake_grace: cfg.slice.slice(),
            wake_preempt: cfg
                .wake_preempt
                .map(|d| fairgpu_scheduler::Nanos::from_nanos(d.as_nanos() as u64)),
            interactivity: cfg.interactivity,
            ..FairQueuingConfig::default()
        })),
        PolicyKind::CreditPoll | PolicyKind::CreditHybridSpin | PolicyKind::StrictCoSchedule => {
            let mode = if cfg.accounting == Accounting::WallClock {
                ExecutionMode::TimeShared
            } else {
                ExecutionMode::Collaborative
            };
            let credit = CreditConfig::new(cfg.slice, CreditConfig::PERIOD)
                .expect("the default period is valid")
                .with_mode(mode)
                .with_interactivity(cfg.interactivity);
            let variant = match kind {
                PolicyKind::CreditPoll => CreditVariant::Poll,
                PolicyKind::CreditHybridSpin => CreditVariant::HybridSpin,
                _ => CreditVariant::StrictCoSchedule,
            };
            Box::new(Credit::new(variant, credit))
        }
        PolicyKind::NeonTimeslice => Box::new(Timeslice::new(TimesliceVariant::Engaged, cfg.slice)),
        PolicyKind::NeonDisengaged => {
            Box::new(Timeslice::new(TimesliceVariant::Disengaged, cfg.slice))
        }
        PolicyKind::TimeGraphPrt => Box::new(TimeGraph::new(PriorityMode::Prt, cfg.slice)),
        PolicyKind::TimeGraphHt => Box::new(TimeGraph::new(PriorityMode::Ht, cfg.slice)),
        PolicyKind::NeonDfq => Box::new(
            DisengagedFq::new(DfqVariant::Neon, cfg.slice).accounting_only(cfg.accounting_only),
        ),
        PolicyKind::Loga => Box::new(
            DisengagedFq::new(DfqVariant::Loga, cfg.slice).accounting_only(cfg.accounting_only),
        ),
    };
    Some(policy)
}

/// What a holder with nothing to issue does under `cfg`'s policy: it
/// polls (keeps the GPU) when work conservation is off.
pub fn idle_behaviour(cfg: &SchedConfig) -> IdleBehaviour {
    if !cfg.work_conserving {
        return IdleBehaviour::Poll;
    }
    build_policy(cfg).map_or(IdleBehaviour::Block, |p| p.idle_behaviour())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairgpu_scheduler::{Nanos, SliceConfig, VgpuId};

    #[test]
    fn policies_follow_the_configuration() {
        let mut cfg = SchedConfig::default();
        assert_eq!(
            build_policy(&cfg).map(|p| (p.kind(), p.execution_mode())),
            Some((PolicyKind::FairQueuing, ExecutionMode::Collaborative))
        );
        cfg.policy = Some(PolicyKind::CreditHybridSpin);
        assert_eq!(
            build_policy(&cfg).unwrap().execution_mode(),
            ExecutionMode::Collaborative
        );
        cfg.accounting = Accounting::WallClock;
        cfg.slice = SliceConfig::preemptive();
        let mut p = build_policy(&cfg).unwrap();
        assert_eq!(p.execution_mode(), ExecutionMode::TimeShared);
        p.add(VgpuId(0), 1).unwrap();
        p.wake(VgpuId(0), Nanos::ZERO).unwrap();
        assert_eq!(p.pick(Nanos::ZERO).unwrap().slice, Nanos::from_millis(30));
        cfg.policy = Some(PolicyKind::CreditPoll);
        assert_eq!(idle_behaviour(&cfg), IdleBehaviour::Poll);
        cfg.policy = None;
        assert!(build_policy(&cfg).is_none());
    }
}
