//! Backfilling (`[daemon] backfill`): other VMs' short kernels in a
//! holder's idle gaps.
//!
//! A holder that synchronises after almost every kernel keeps the device
//! busy only while its kernel runs; between the answer and its guest's
//! next request the device idles, inside the grant (docs/fairness.md,
//! *Where the device time goes*). With backfilling:
//!
//! - **The holder** publishes `quiet` in its slot once its ring is empty
//!   and its own device work is done (and another VM waits), and clears it
//!   before it issues anything again or releases. Work it issues right
//!   after a quiet period may queue behind one backfilled request: that
//!   work is charged from the backfilled request's end (or, if the
//!   backfiller has not said yet, at most the VM's average).
//! - **The daemon** gives one other runnable VM a *backfill grant* for the
//!   holder's grant (`crate::grants`, *Backfill*).
//! - **The backfiller** issues, one at a time, only kernels its own history
//!   (the running average of its synchronised work) predicts to take at
//!   most the grant's bound, and only while the holder is still quiet
//!   (checked before each, Dekker-paired with the holder's return). It
//!   synchronises each one at once, so that the next is issued only when
//!   the device is free again, and adds what it took to its backfill
//!   usage, which the daemon charges to it when it releases. It releases as
//!   soon as the holder is back, its next request is not a kernel or is
//!   predicted to take longer, or it has nothing to issue.
//!
//! So the holder waits at most one backfilled kernel for its next request,
//! never pays for it, and the backfiller pays for all it ran.

use std::time::{Duration, Instant};

use fairgpu_executor::clock;
use fairgpu_protocol::wire::ValidRequest;
use fairgpu_protocol::Opcode;

use super::{is_work, nanos, Gate, GateConfig, Meter};
use crate::grants::{Backfill, GrantSlot};

/// A backfill grant this worker holds.
#[derive(Debug)]
pub(super) struct BackfillHold {
    grant: Backfill,
    /// Device time of its requests so far, ns.
    used: u64,
    requests: u64,
    /// A request admitted under it and not yet served.
    in_flight: bool,
}

/// Whether `op` may be backfilled: a kernel, whose length the VM's kernels
/// so far predict (a copy's depends on its size).
pub(super) fn backfillable(op: Opcode) -> bool {
    matches!(op, Opcode::LaunchKernel | Opcode::ClNdRange)
}

/// How long a holder waits at most for a backfiller to publish the end of
/// the request its own work queued behind (the backfiller's worker has to
/// run once after that request ended).
const PUBLISH_WAIT: Duration = Duration::from_micros(500);

/// What a holder's work from `since` to `end` used, ns, less what it may
/// have waited behind the backfilled request of the peer in `behind`
/// (taken): charged from that request's end. A request that ended after
/// the holder's work queued behind it (the two raced to the device), so
/// the whole time is the holder's. `None` if the backfiller has not said
/// when its request ended within [`PUBLISH_WAIT`].
pub(super) fn behind_backfill(
    peers: &[GrantSlot],
    behind: &mut Option<usize>,
    since: Instant,
    end: Instant,
) -> Option<u64> {
    let whole = nanos(end.saturating_duration_since(since));
    let Some(peer) = behind.take().and_then(|p| peers.get(p)) else {
        return Some(whole);
    };
    let asked = Instant::now();
    let bf_end = loop {
        if let Some(e) = peer.backfill_end() {
            break e;
        }
        if asked.elapsed() >= PUBLISH_WAIT {
            return None;
        }
        std::thread::yield_now();
    };
    let end_ns = clock::instant_ns(end);
    if bf_end >= end_ns {
        return Some(whole);
    }
    let start = clock::instant_ns(since).max(bf_end);
    Some(end_ns.saturating_sub(start).min(whole))
}

/// [`behind_backfill`] for a holder's stretch of work: whole when the
/// backfilled request's end is not known.
pub(super) fn stretch_ns(
    peers: &[GrantSlot],
    behind: &mut Option<usize>,
    since: Instant,
    end: Instant,
) -> u64 {
    behind_backfill(peers, behind, since, end)
        .unwrap_or_else(|| nanos(end.saturating_duration_since(since)))
}

impl Gate {
    /// One of this VM's kernels ran alone for `ns`: the history that
    /// predicts them, published for the daemon (which offers backfill
    /// grants only to VMs whose kernels fit).
    /// (Fields, not `self`: a holder calls it with its grant borrowed.)
    pub(super) fn learn_kernel(
        kernel_avg: &mut Option<u64>,
        slot: &GrantSlot,
        cfg: &GateConfig,
        ns: u64,
    ) {
        let avg = kernel_avg.map_or(ns, |a| (a * 3 + ns) / 4);
        *kernel_avg = Some(avg);
        if cfg.backfill.is_some() {
            slot.set_kernel_ns(avg);
        }
    }

    /// Holder: its ring is empty and its own work done. Publishes `quiet`
    /// (once per quiet period) if backfilling is on, the daemon said with
    /// the grant that some other VM could fill it, another VM waits, and
    /// this VM's quiet periods usually last at least half the longest
    /// backfilled kernel: shorter ones would be over before another VM's
    /// kernel got to the device (it is woken through the daemon), so that
    /// kernel would only delay the holder, and announcing each costs the
    /// daemon a wake-up (a VM that synchronises every 15 µs has tens of
    /// thousands a second).
    pub(super) fn publish_quiet(&mut self) {
        let Some(max) = self.cfg.backfill else {
            return;
        };
        if self.quiet_published || self.quiet.typical().is_none_or(|g| g < nanos(max) / 2) {
            return;
        }
        let Some(seq) = self
            .holding
            .as_ref()
            .filter(|h| !h.lease && h.bf_wanted)
            .map(|h| h.seq)
        else {
            return;
        };
        if !self.others_waiting() {
            return;
        }
        self.slot.set_quiet(seq);
        self.quiet_published = true;
        self.bell.ring();
    }

    /// Holder: about to issue again, or to release. Clears `quiet`, then
    /// notes a peer whose backfilled request may still be on the device
    /// (its next work may queue behind it).
    pub(super) fn leave_quiet(&mut self) {
        if !self.quiet_published {
            return;
        }
        self.quiet_published = false;
        self.slot.set_quiet(0);
        let me = self.slot.index();
        let busy = self
            .peers
            .iter()
            .find(|p| p.index() != me && p.backfill_busy())
            .map(GrantSlot::index);
        if let (Some(h), Some(p)) = (self.holding.as_mut(), busy) {
            h.behind_bf = Some(p);
        }
    }

    /// Backfiller (holding no grant): whether `req` may be issued now in a
    /// holder's idle gap. Ends the backfill grant when it may not.
    pub(super) fn try_backfill(&mut self, req: &ValidRequest) -> bool {
        let g = self.slot.current_backfill();
        if g.seq != self.bf_seen {
            self.bf_seen = g.seq;
            self.end_backfill();
            self.bf = Some(BackfillHold {
                grant: g,
                used: 0,
                requests: 0,
                in_flight: false,
            });
        }
        let Some(grant) = self.bf.as_ref().map(|b| b.grant) else {
            return false;
        };
        let work = is_work(req.op);
        if work
            && !(backfillable(req.op)
                && self.kernel_avg.is_some_and(|a| a > 0 && a <= grant.max_ns))
        {
            self.end_backfill();
            return false;
        }
        self.slot.set_backfill_busy();
        // (0 is never a grant: the holder's word when it is not quiet.)
        let holder_quiet = grant.holder_seq != 0
            && self
                .peers
                .get(grant.holder)
                .is_some_and(|p| p.quiet() == grant.holder_seq);
        if !holder_quiet {
            self.slot.backfill_done(0);
            self.end_backfill();
            return false;
        }
        if work {
            if let Some(b) = self.bf.as_mut() {
                b.in_flight = true;
            }
        } else {
            // Ordering or a wait on its own (synchronised) work: nothing
            // goes on the device.
            self.slot.backfill_done(0);
        }
        true
    }

    /// Backfiller: whether a request admitted under the backfill grant is
    /// about to be served; if so, the executor's device time so far (what
    /// [`Gate::backfilled`] counts from).
    pub(super) fn backfilling(&self, meter: &mut dyn Meter) -> Option<u64> {
        self.bf
            .as_ref()
            .is_some_and(|b| b.in_flight)
            .then(|| meter.device_time_ns())
    }

    /// Backfiller: the request admitted under the backfill grant was
    /// issued at `t0` on channel `ch`: synchronised now, charged, its end
    /// published for the holder.
    pub(super) fn backfilled(
        &mut self,
        meter: &mut dyn Meter,
        ch: u32,
        t0: Instant,
        device_before: u64,
    ) {
        let Some(b) = self.bf.as_mut().filter(|b| b.in_flight) else {
            return;
        };
        let end = meter.sync_channel(ch);
        // The executor's device time of the request where it keeps one
        // (SimGpu, and CUDA's timed kernels): a request that raced the
        // holder's returning work to the device and queued behind it is
        // not charged for that wait. Otherwise issue to end.
        let ns = match meter.device_time_ns().saturating_sub(device_before) {
            0 => nanos(end.saturating_duration_since(t0)),
            ns => ns,
        };
        b.used += ns;
        b.requests += 1;
        b.in_flight = false;
        self.slot.backfill_done(clock::instant_ns(end));
        // It ran alone on the device: part of the history that predicts
        // this VM's kernels (a longer one than predicted raises it, and
        // ends the VM's backfilling until shorter ones bring it down).
        Gate::learn_kernel(&mut self.kernel_avg, &self.slot, &self.cfg, ns);
    }

    /// Backfiller: releases the backfill grant held, if any.
    pub(super) fn end_backfill(&mut self) {
        if let Some(b) = self.bf.take() {
            self.slot.release_backfill(b.grant.seq, b.used, b.requests);
            self.bell.ring();
            tracing::trace!(vm = %self.cfg.vm, seq = b.grant.seq, used = b.used, requests = b.requests, "backfill released");
        }
    }
}
