//! The worker's side of GPU scheduling: only the holder of the grant issues
//! GPU work, and the holder measures what it used (FairGV sections 3.2.2,
//! 3.3.1 and 3.3.2).
//!
//! [`Scheduled`] wraps the request handler ([`crate::cuda_ops::CudaOps`]).
//! Without a [`Gate`] it passes everything through (`policy = "none"`).
//! With one:
//!
//! - **Admission.** A request that puts work on the device or waits for it
//!   ([`needs_grant`]) is admitted only while the worker holds the grant;
//!   otherwise it stays at the head of its ring ([`Handler::may_issue`]),
//!   the worker publishes *runnable* and rings the scheduler's bell. Every
//!   other request (device queries, allocation bookkeeping, module staging,
//!   handle lookups, stream and event creation, non-blocking queries, the
//!   transport's own opcodes) is served at once: it uses no GPU time.
//! - **Grants.** The daemon grants by bumping the slot's grant word and
//!   ringing the region's doorbell; the worker notices the new sequence the
//!   next time it asks (before a held-back request, or after a pass). A
//!   grant handed over while the previous holder drains is taken at once:
//!   its work queues on the device behind the drain, so the device does
//!   not idle between holders, and its first sample is charged from when
//!   the drain ended (the previous holder writes that instant with its
//!   release), or at most the VM's running average of samples if that
//!   release has not come yet; the grant's clock starts when that sample
//!   ran ([`crate::grants`], *Handoff*).
//! - **Leases.** A grant given while no other VM waits for the GPU is an
//!   uncontended *lease*: the holder issues without any interposition and
//!   without a slice (the daemon charges it its wall-clock time slice by
//!   slice meanwhile), so a VM alone on the GPU pays nothing for
//!   scheduling. When another VM becomes runnable the daemon revokes the
//!   lease; the holder notices before its next request or after its pass,
//!   drains (synchronises every context it issued to, except with
//!   `accounting = "none"`), and releases reporting the wall-clock time it
//!   held the lease. A lease also ends when its holder has nothing to
//!   issue for the spin budget and none of its work is still in flight
//!   (it does not block on that work to release). So that the drain (the wait of
//!   the VM that caused the revocation) stays short, a lease holder keeps
//!   about one slice of device work in flight: it records an executor
//!   event after each request, learns what its requests cost from the
//!   device time between consecutive completed events (rising at once to a
//!   longer one, decaying slowly), and holds the next request back while
//!   slice / cost requests are not done (at least one, at most
//!   [`LEASE_QUEUE`]; one until a cost is known). Counting requests alone
//!   let 30 one-second kernels sit in the queue, and the next VM waited
//!   30 s. A request's cost is known only once it ran, so a VM that
//!   switches from short to long requests can still queue up to
//!   [`LEASE_QUEUE`] of them once; the charge (wall-clock time) falls on
//!   it, and the runaway guard bounds any single request.
//! - **Accounting** ([`Accounting`]), per grant:
//!   - `sampled`: synchronise after each of the first [`SAMPLES`] pieces
//!     of device work (kernels, copies, memsets) and time each (issue to
//!     end of synchronisation); the ordering and synchronising requests in
//!     between are not samples (their waits are added as they come). A
//!     sample is synchronised just before the next piece of device work,
//!     when the worker runs out of requests, or when the guest waits for
//!     an answer and the device has finished it (looking without
//!     blocking): the guest's other calls meanwhile (event records, flow
//!     control waits) are answered while the sample runs, so their round
//!     trips do not leave the device idle. From
//!     the samples' average, predict how many more pieces of work fit in
//!     what is left of the slice, issue those (and whatever else comes
//!     between them) without interposition, synchronise every context they
//!     used after the last, and add the time from the first of them to the
//!     end of that synchronisation. Before that last synchronisation the
//!     holder announces its drain with the usage it expects, so that the
//!     daemon can hand the grant to the next VM meanwhile
//!     (the daemon's scheduler thread, `fairgpu_daemon::sched`). If the holder runs out of requests before the
//!     last (its guest has not sent the next one yet), it looks, without
//!     blocking, whether the device still runs its work: if so, the
//!     stretch stays open (the device never idled, the guest's next
//!     request continues it); once the device is done it synchronises and
//!     adds the time so far, and the next request starts a new stretch. So
//!     the time a guest takes to answer is not charged as GPU time, which
//!     matters for interactive guests on a busy host. If the samples alone
//!     fill the slice the grant ends there.
//!   - `every`: synchronise after every request and add its time.
//!   - `events`: record an executor event before and after every request on
//!     the stream it uses; completed pairs are read without blocking
//!     (device time between them, less any overlap with the channel's
//!     previous pair). When what its own pairs measured plus its pairs
//!     still in flight, estimated at the running average, reach the slice,
//!     the grant issues nothing more and releases once at most one pair
//!     (of any grant) is in flight (looking without blocking, so the worker
//!     keeps serving its other requests and the device never idles between
//!     grants); a pair still in flight at a release is charged at a later
//!     release (it does not count against that grant's slice). Nothing is
//!     drained, so the first request of a grant may queue behind the
//!     previous holder's last work, which its pair would include: the
//!     first pair of a grant is charged at most the running average, and
//!     may lower that average but never set or raise it. Until a pair that
//!     was not the first of its grant has set the average, pairs are
//!     waited for (once per VM).
//!   - `none`: no measurement; the grant is a wall-clock lease of one
//!     slice and its wall-clock length is what is charged (the
//!     time-sharing baselines). Work still queued on the device at the end
//!     keeps running into the next holder's lease.
//! - **Release.** When the measured usage reaches the slice the holder
//!   releases at once, reporting it and staying runnable. A holder that
//!   issued nothing for the spin budget (hybrid spinning) releases what it
//!   measured and is marked blocked; a request arriving later makes it
//!   runnable again. Under a polling policy (Credit-poll, Strict) the
//!   holder instead keeps the grant until the slice's wall-clock end. Any
//!   holder also releases once it has held the grant for
//!   [`WALL_CAP_SLICES`] slices of wall-clock time, so a VM whose requests
//!   leave the GPU mostly idle cannot keep the others waiting.
//!
//! Synchronisations inserted here ignore their result: an error belongs to
//! the guest's work and reaches it at its own next synchronising call, as
//! it would without the scheduler (sticky errors stay sticky).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use fairgpu_protocol::wire::ValidRequest;
use fairgpu_protocol::{Opcode, Status};
use fairgpu_scheduler::IdleBehaviour;

use crate::grants::{Bell, GrantSlot};
use crate::host::{Answer, ArenaSlice, Handler, Pass, Resume};
use fairgpu_config::Accounting;
use fairgpu_executor::clock;
use fairgpu_executor::{CtxId, EventId};

mod backfill;

/// Requests timed one by one at the start of a grant (`sampled`).
pub const SAMPLES: u32 = 5;
/// How often a lease holder publishes its device time at most.
const DEVICE_PUBLISH_EVERY: Duration = Duration::from_millis(1);

/// A holder releases after this many slices of wall-clock time at most.
pub const WALL_CAP_SLICES: u32 = 1;
/// Most event pairs in flight (`events`); at this many the grant ends.
pub const MAX_PENDING_MARKS: usize = 256;
/// Most requests a lease holder keeps in flight, as deep as a GPU's own
/// command queue (a burst of work behind a long kernel must not be held
/// back, or the stream would idle before it is issued).
pub const LEASE_QUEUE: usize = 1024;
/// Every this many marks a lease holder forgets the oldest done ones.
const LEASE_TRIM: usize = 128;
/// How soon a closing `events` grant looks at its pairs again.
const CLOSING_RECHECK: Duration = Duration::from_micros(50);
/// How soon a lease holder with a full queue looks at it again.
const LEASE_RECHECK: Duration = Duration::from_micros(100);
/// How often a worker without the grant reads its completed event pairs.
const COLLECT_EVERY: Duration = Duration::from_millis(1);
/// How often an idle lease holder looks whether its work in flight is done.
const LEASE_IN_FLIGHT_RECHECK: Duration = Duration::from_millis(1);
/// Bounds on how soon a `sampled` holder with nothing to issue looks again
/// whether the device has finished its open segment.
const SEGMENT_RECHECK_MIN: Duration = Duration::from_micros(20);
const SEGMENT_RECHECK_MAX: Duration = Duration::from_millis(1);

/// Whether `op` puts work on the device or waits for it, and so is issued
/// only under a grant: launches, copies, memsets, stream/event ordering
/// (event record, stream wait), synchronisations. Module loads do not (see [`is_work`]).
pub fn needs_grant(op: Opcode) -> bool {
    is_work(op)
        || matches!(
            op,
            Opcode::CtxSynchronize
                | Opcode::StreamSynchronize
                | Opcode::StreamWaitEvent
                | Opcode::EventRecord
                | Opcode::EventSynchronize
                | Opcode::ClFinish
                | Opcode::ClWaitEvents
                | Opcode::ClWaitList
                | Opcode::ClMarker
        )
}

/// Whether `op` waits for the device and adds no work to it.
fn is_sync(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::CtxSynchronize
            | Opcode::StreamSynchronize
            | Opcode::EventSynchronize
            | Opcode::ClFinish
            | Opcode::ClWaitEvents
    )
}

/// Whether `op` is device work (a kernel, copy or memset), the requests
/// `sampled` accounting times and counts; the other requests that need the
/// grant (ordering, synchronisation) take no device time of their own.
/// Module loads need no grant: they are host work (image checks, PTX
/// decompression, a driver's JIT) sized by the guest, and holding the GPU
/// through them made other VMs wait (26 s behind a decompression bomb);
/// the image parser bounds what one load costs.
fn is_work(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::LaunchKernel
            | Opcode::MemcpyHtoD
            | Opcode::MemcpyDtoH
            | Opcode::MemcpyDtoD
            | Opcode::MemsetD8
            | Opcode::MemsetD16
            | Opcode::MemsetD32
            | Opcode::Memcpy3D
            | Opcode::ClNdRange
            | Opcode::ClWriteBuffer
            | Opcode::ClReadBuffer
            | Opcode::ClCopyBuffer
            | Opcode::ClFillBuffer
            | Opcode::ClWriteImage
            | Opcode::ClReadImage
            | Opcode::ClCopyImage
            | Opcode::ClCopyImageToBuffer
            | Opcode::ClCopyBufferToImage
    )
}

/// An accounting event recorded in one channel's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The channel.
    pub ch: u32,
    /// The context it was recorded in (a reset channel's marks are void).
    pub ctx: CtxId,
    /// The executor's event.
    pub event: EventId,
}

/// What accounting needs from the request handler: synchronising a
/// channel's context, and events.
pub trait Meter {
    /// Waits for all work of channel `ch`'s context, if it has one, and
    /// returns when that work completed: the device's own completion
    /// instant where the executor keeps one (SimGpu), otherwise the instant
    /// the wait returned. The result is ignored (the guest sees errors at
    /// its own synchronisation).
    fn sync_channel(&mut self, ch: u32) -> Instant;
    /// Whether work issued to channel `ch`'s context may still be running,
    /// looking without blocking (false if it has no context).
    fn channel_busy(&mut self, ch: u32) -> bool;
    /// Records an accounting event on the stream `req` uses in channel
    /// `ch`; `None` if the channel has no context, the request names no
    /// valid stream, or no event is available.
    fn mark(&mut self, ch: u32, req: &ValidRequest) -> Option<Mark>;
    /// Whether the device passed `m` (`None`: the mark is void).
    fn mark_done(&mut self, m: Mark) -> Option<bool>;
    /// Device nanoseconds from `a` to `b` (negative if `b` came first), both
    /// done and in one context.
    fn mark_elapsed_ns(&mut self, a: Mark, b: Mark) -> Option<i64>;
    /// Gives a mark's event back.
    fn unmark(&mut self, m: Mark);
    /// How long until the device passes `m`, where the executor models it
    /// (SimGpu); `None` where it cannot tell (a real GPU) or the mark is
    /// void.
    fn mark_pending(&mut self, m: Mark) -> Option<Duration> {
        let _ = m;
        None
    }
    /// All device time the executor accounted to this VM's work so far, ns
    /// (what a disengaged policy's free run is charged from).
    fn device_time_ns(&mut self) -> u64 {
        0
    }
}

/// The worker's scheduling settings.
#[derive(Debug, Clone)]
pub struct GateConfig {
    /// How the holder measures.
    pub accounting: Accounting,
    /// What a holder with nothing to issue does (from the policy).
    pub idle: IdleBehaviour,
    /// The hybrid-spin budget.
    pub spin: Duration,
    /// Learn the budget from this VM's quiet periods ([`SpinBudget`]);
    /// otherwise `spin` always.
    pub adaptive_spin: bool,
    /// Not work-conserving: a grant is charged at least its wall-clock
    /// length (with [`IdleBehaviour::Poll`], the whole slice).
    pub reserve: bool,
    /// Publish the executor's device time while holding a lease: the
    /// policy charges free runs from it (NEON DFQ, LoGA).
    pub publish_device_time: bool,
    /// Backfilling (`[daemon] backfill`), with the longest kernel a
    /// backfill grant admits: a holder publishes its quiet periods so that
    /// another VM's short kernels may fill them, and this VM may fill
    /// others' (`accounting/backfill.rs`).
    pub backfill: Option<Duration>,
    /// The VM, for log lines.
    pub vm: String,
}

/// A request handler that issues GPU work only under the grant and
/// measures it. See the module documentation.
#[derive(Debug)]
pub struct Scheduled<H> {
    inner: H,
    gate: Option<Gate>,
}

impl<H: Handler + Meter> Scheduled<H> {
    /// `inner` unscheduled: every request passes.
    pub fn unscheduled(inner: H) -> Self {
        Scheduled { inner, gate: None }
    }

    /// `inner` under the grants of `slot`.
    pub fn new(inner: H, gate: Gate) -> Self {
        Scheduled {
            inner,
            gate: Some(gate),
        }
    }

    /// The wrapped handler.
    pub fn inner(&mut self) -> &mut H {
        &mut self.inner
    }

    /// The gate, if scheduled.
    pub fn gate(&self) -> Option<&Gate> {
        self.gate.as_ref()
    }
}

/// The grant state of one worker.
#[derive(Debug)]
pub struct Gate {
    slot: GrantSlot,
    bell: Bell,
    cfg: GateConfig,
    /// Every VM's slot, by index: whether a handed-over grant's previous
    /// holder still drains.
    peers: Vec<GrantSlot>,
    /// The last grant sequence seen.
    seen: u32,
    holding: Option<Holding>,
    /// What was last published in the slot's runnable flag.
    runnable: bool,
    events: EventMeter,
    /// End marks of a lease's requests not known to be done.
    lease_marks: VecDeque<Mark>,
    /// The last end mark of the lease seen done, kept (not yet unmarked)
    /// so that the next one's device time can be read against it.
    lease_done: Option<Mark>,
    /// What one of this VM's requests costs on the device under a lease,
    /// ns: the learned basis of the lease's queue depth.
    lease_cost: Option<u64>,
    /// When a lease holder last published its device time.
    device_published: Instant,
    grants: u64,
    /// A running average of the samples that ran alone, ns: what a sample
    /// that queued behind another VM's drain is charged at most.
    avg: Option<u64>,
    /// How long this VM's quiet periods lasted.
    quiet: SpinBudget,
    /// A running average of this VM's kernels that ran alone (samples and
    /// backfilled ones), ns: what a backfilled kernel is predicted to take.
    kernel_avg: Option<u64>,
    /// The sample in flight is a kernel.
    sample_kernel: bool,
    /// As a holder: `quiet` is published in the slot.
    quiet_published: bool,
    /// As a backfiller: the backfill grant held.
    bf: Option<backfill::BackfillHold>,
    /// The last backfill grant sequence seen.
    bf_seen: u32,
}

/// The adaptive hybrid-spin budget (`adaptive_spin`, on by default): how
/// long this VM's guest took to send its next request each time its holder
/// found nothing to issue. A quiet period runs from the first pass that
/// found the holder idle with its own device work done to the next request
/// that needs the grant, whether or not the grant was still held by then;
/// it is learned under contended grants only (a lease has nobody to yield
/// to). Counted from the holder's last device request instead, a guest that
/// polls for its kernel's end made its quiet periods look longer than its
/// sleeps.
///
/// A holder spins on an empty ring so that the guest's next request finds
/// the grant still held; spinning is worth it only when that request comes
/// within the budget. While another VM waits (its `runnable` flag is set)
/// and three in four of the last quiet periods outlasted the configured
/// budget by half (a guest that sleeps or computes between bursts), the
/// holder yields at once; otherwise the configured budget applies, whole
/// (a budget trimmed to the usual quiet period lost the grant whenever the
/// host was slow to run the guest). The half keeps spinning a guest whose
/// quiet periods sit at the budget: yielding there starved one beside a VM
/// that queues long kernels (docs/fairness.md). With nobody waiting,
/// yielding would only cost a grant.
#[derive(Debug, Default)]
struct SpinBudget {
    /// The last [`SpinBudget::KEEP`] quiet periods, ns, oldest first.
    gaps: VecDeque<u64>,
    /// Since when the current quiet period runs.
    since: Option<Instant>,
    /// Quiet periods begun so far.
    periods: u64,
    /// The current one spins the whole budget whatever the history (see
    /// [`SpinBudget::PROBE_EVERY`]).
    probe: bool,
    /// The median of `gaps` once [`SpinBudget::LEARN`] are known.
    median: Option<u64>,
}

impl SpinBudget {
    /// Quiet periods remembered.
    const KEEP: usize = 32;
    /// Fewer than this and the configured budget applies.
    const LEARN: usize = 8;
    /// Every this many quiet periods one spins the whole budget: a holder
    /// that yields at once lets the other VMs' processes run, and on a busy
    /// host its guest's wake-ups then take longer, which would keep it
    /// yielding; a period spent holding the grant measures the guest
    /// undisturbed, and enough short ones (one in four) end the yielding.
    const PROBE_EVERY: u64 = 4;

    /// The holder found nothing to issue at `now` (a quiet period starts
    /// unless one runs).
    fn quiet(&mut self, now: Instant) {
        if self.since.is_none() {
            self.since = Some(now);
            self.periods += 1;
            self.probe = self.periods.is_multiple_of(Self::PROBE_EVERY);
        }
    }

    /// A request that needs the grant came at `now`: the quiet period, if
    /// one ran, ends.
    fn request(&mut self, now: Instant) {
        self.probe = false;
        if let Some(t) = self.since.take() {
            if self.gaps.len() == Self::KEEP {
                self.gaps.pop_front();
            }
            self.gaps.push_back(nanos(now.saturating_duration_since(t)));
            if self.gaps.len() >= Self::LEARN {
                let mut g: Vec<u64> = self.gaps.iter().copied().collect();
                g.sort_unstable();
                self.median = Some(g[g.len() / 2]);
            }
        }
    }

    /// The median of the quiet periods remembered, once
    /// [`SpinBudget::LEARN`] are.
    fn typical(&self) -> Option<u64> {
        self.median
    }

    /// The spin budget when another VM waits, `configured` being the
    /// daemon's.
    fn budget(&self, configured: Duration) -> Duration {
        if self.gaps.len() < Self::LEARN || self.probe {
            return configured;
        }
        // Long: past the budget by half again, so that a guest whose quiet
        // periods sit at the budget (and lengthen once it yields and the
        // other VMs' processes take the CPUs) keeps spinning.
        let long = nanos(configured) * 3 / 2;
        let longer = self.gaps.iter().filter(|&&g| g > long).count();
        if longer * 4 >= self.gaps.len() * 3 {
            Duration::ZERO
        } else {
            configured
        }
    }
}

#[derive(Debug)]
struct Holding {
    seq: u32,
    /// An uncontended lease (no slice, no measurement until revoked).
    lease: bool,
    /// A free run's lease that parks while idle instead of being released.
    parks: bool,
    /// Parked: kept while the holder has nothing to issue.
    parked: bool,
    /// Enforced a priori: issue no piece of work predicted to overrun the
    /// slice (TimeGraph's apriori enforcement).
    apriori: bool,
    slice: u64,
    since: Instant,
    last_device: Instant,
    /// It issued a request under this grant ([`IdleBehaviour::Hold`]).
    issued: bool,
    /// Measured so far (sampled, every), ns.
    used: u64,
    /// `events`: the grant's estimate reached the slice; it issues nothing
    /// more and releases once its own work is (all but) done.
    closing: bool,
    /// Taken while the previous holder still drained: its samples may
    /// queue behind that holder's work.
    behind: bool,
    /// When the final drain's work ended on the device.
    drained: Option<Instant>,
    /// Its work after a quiet period may have queued behind this peer's
    /// backfilled request.
    behind_bf: Option<usize>,
    /// The daemon would offer its quiet periods to another VM.
    bf_wanted: bool,
    phase: Phase,
    /// Channels with work issued since their last synchronisation.
    dirty: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// `n` requests timed so far; `pending` is the sample issued (channel
    /// and instant) and not synchronised yet.
    Sampling {
        n: u32,
        pending: Option<(u32, Instant)>,
    },
    /// `left` requests may still be issued; the segment open since `since`
    /// has `issued` requests on the device, `avg` ns each by the samples.
    Bulk {
        left: u64,
        since: Option<Instant>,
        issued: u64,
        avg: u64,
    },
}

impl Phase {
    /// The open bulk segment: when it opened, and when its work should be
    /// done, its requests back to back at the samples' average.
    fn open_segment(&self) -> Option<(Instant, Instant)> {
        match *self {
            Phase::Bulk {
                since: Some(since),
                issued,
                avg,
                ..
            } => Some((
                since,
                since + Duration::from_nanos(issued.saturating_mul(avg)),
            )),
            _ => None,
        }
    }
}

/// Why a holder gives the grant back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// Its usage (or lease) reached the slice: it stays runnable.
    Full,
    /// It had nothing to issue for the spin budget: it blocks.
    Idle,
}

/// An event pair in flight.
#[derive(Debug, Clone, Copy)]
struct Pair {
    start: Mark,
    end: Mark,
    /// The first of its grant (it may have queued behind the previous
    /// holder's work).
    first: bool,
    /// The grant it was issued in.
    seq: u32,
}

/// Event pairs in flight and what completed ones measured (`events`).
#[derive(Debug)]
struct EventMeter {
    /// When pairs were last read outside a grant.
    collected: Instant,
    pending: VecDeque<Pair>,
    /// The last completed pair's end mark, per channel.
    last_end: Vec<Option<Mark>>,
    /// Measured and not yet reported, ns.
    unreported: u64,
    /// Of that, what pairs of grant `this_seq` measured, ns.
    this_grant: u64,
    this_seq: u32,
    /// Running average of a pair, ns (from pairs that were not first).
    avg: Option<u64>,
}

impl Default for EventMeter {
    fn default() -> Self {
        EventMeter {
            collected: Instant::now(),
            pending: VecDeque::new(),
            last_end: Vec::new(),
            unreported: 0,
            this_grant: 0,
            this_seq: 0,
            avg: None,
        }
    }
}

impl EventMeter {
    /// Reads every completed pair without blocking.
    fn collect(&mut self, meter: &mut dyn Meter) {
        let mut i = 0;
        while i < self.pending.len() {
            let p = self.pending[i];
            match meter.mark_done(p.end) {
                Some(false) => i += 1,
                None => {
                    // Void (the channel was reset): nothing to read.
                    self.pending.remove(i);
                }
                Some(true) => {
                    self.pending.remove(i);
                    let mut ns = self.measure(meter, p.start, p.end);
                    if p.first {
                        // It may have waited for the previous holder's work:
                        // charged at most the average, and it may lower an
                        // average that is too high but never set or raise
                        // one (a first pair that waited behind a long drain
                        // would otherwise make every later grant close
                        // after one request, each first pair waiting again).
                        if let Some(a) = self.avg {
                            ns = ns.min(a);
                            self.avg = Some((a * 7 + ns) / 8);
                        }
                    } else {
                        self.avg = Some(self.avg.map_or(ns, |a| (a * 7 + ns) / 8));
                    }
                    self.unreported += ns;
                    if p.seq == self.this_seq {
                        self.this_grant += ns;
                    }
                }
            }
        }
    }

    /// A new grant `seq` starts: its budget counts only its own pairs.
    fn start_grant(&mut self, seq: u32) {
        self.this_seq = seq;
        self.this_grant = 0;
    }

    /// What grant `seq` has used so far: measured, plus its pairs in flight
    /// at the running average.
    fn grant_estimate(&self, seq: u32) -> u64 {
        let in_flight = self.pending.iter().filter(|p| p.seq == seq).count() as u64;
        self.this_grant + in_flight * self.avg.unwrap_or(0)
    }

    /// Device time of a completed pair, less its overlap with the channel's
    /// previous pair; keeps `end` as that channel's last end.
    fn measure(&mut self, meter: &mut dyn Meter, start: Mark, end: Mark) -> u64 {
        let whole = meter.mark_elapsed_ns(start, end).unwrap_or(0).max(0);
        let ch = start.ch as usize;
        if self.last_end.len() <= ch {
            self.last_end.resize(ch + 1, None);
        }
        let overlap = match self.last_end[ch] {
            Some(prev) => meter
                .mark_elapsed_ns(start, prev)
                .unwrap_or(0)
                .clamp(0, whole),
            None => 0,
        };
        meter.unmark(start);
        if let Some(prev) = self.last_end[ch].replace(end) {
            meter.unmark(prev);
        }
        (whole - overlap) as u64
    }

    /// Forgets channel `ch`'s marks (its context is about to go).
    fn forget(&mut self, ch: u32) {
        self.pending.retain(|p| p.start.ch != ch);
        if let Some(slot) = self.last_end.get_mut(ch as usize) {
            *slot = None;
        }
    }
}

impl Gate {
    /// A gate on `slot`. Whatever grant the slot holds now (left by a
    /// previous worker of this VM) is released unused, and the worker starts
    /// blocked.
    pub fn new(slot: GrantSlot, bell: Bell, cfg: GateConfig) -> Gate {
        let (seen, _, _) = slot.current_grant();
        slot.release(seen, 0, false);
        // Nor does it keep a backfill grant or a quiet period of its
        // predecessor.
        let bf_seen = slot.current_backfill().seq;
        slot.release_backfill(bf_seen, 0, 0);
        slot.backfill_done(0);
        slot.set_quiet(0);
        bell.ring();
        Gate {
            slot,
            bell,
            cfg,
            peers: Vec::new(),
            seen,
            holding: None,
            runnable: false,
            events: EventMeter::default(),
            lease_marks: VecDeque::new(),
            lease_done: None,
            lease_cost: None,
            device_published: Instant::now(),
            grants: 0,
            avg: None,
            quiet: SpinBudget::default(),
            kernel_avg: None,
            sample_kernel: false,
            quiet_published: false,
            bf: None,
            bf_seen,
        }
    }

    /// Every VM's slot, by index (the grant file's), so that a grant
    /// handed over while its previous holder drains knows whether its
    /// first work queues behind that holder's. Without them that first
    /// work is charged in full.
    pub fn with_peers(mut self, peers: Vec<GrantSlot>) -> Gate {
        self.peers = peers;
        self
    }

    /// Whether the worker holds the grant now.
    pub fn holding(&self) -> bool {
        self.holding.is_some()
    }

    /// Grants taken so far.
    pub fn grants(&self) -> u64 {
        self.grants
    }

    /// How long a holder with nothing to issue keeps the grant now.
    fn spin_budget(&self) -> Duration {
        if !self.cfg.adaptive_spin || !self.others_waiting() {
            return self.cfg.spin;
        }
        self.quiet.budget(self.cfg.spin)
    }

    /// Whether another VM has work waiting for the GPU. The flags are read
    /// Relaxed: a stale one only changes how long this holder spins.
    fn others_waiting(&self) -> bool {
        let me = self.slot.index();
        self.peers.iter().any(|p| p.index() != me && p.runnable())
    }

    fn publish_runnable(&mut self, runnable: bool) {
        if self.runnable != runnable {
            self.runnable = runnable;
            self.slot.set_runnable(runnable);
            self.bell.ring();
        }
    }

    /// Parks the held free-run lease: nothing to issue, nothing in flight.
    /// Its device time is published first, so the daemon's charge at the
    /// interval's end is whole.
    fn park(&mut self, meter: &mut dyn Meter) {
        let Some(h) = self.holding.as_mut().filter(|h| h.parks && !h.parked) else {
            return;
        };
        h.parked = true;
        let seq = h.seq;
        if self.cfg.publish_device_time {
            self.slot.set_device_ns(meter.device_time_ns());
        }
        self.slot.set_parked(seq);
        self.bell.ring();
        tracing::trace!(vm = %self.cfg.vm, seq, "lease parked");
    }

    /// The parked lease's holder issues again: it tells the daemon, and
    /// does not wait for it.
    fn unpark(&mut self) {
        if let Some(h) = self.holding.as_mut().filter(|h| h.parked) {
            h.parked = false;
            self.slot.set_parked(0);
            self.bell.ring();
        }
    }

    /// Takes a grant issued since the last look.
    fn try_take(&mut self, now: Instant) -> bool {
        let (seq, slice, lease) = self.slot.current_grant();
        if seq == self.seen {
            return false;
        }
        // A real grant ends a backfill grant (its work is synchronised).
        self.end_backfill();
        let behind = self.behind_previous_holder();
        let apriori = self.slot.current_apriori();
        let parks = lease && self.slot.current_parks();
        let bf_wanted = self.slot.backfill_wanted();
        self.seen = seq;
        self.grants += 1;
        tracing::trace!(vm = %self.cfg.vm, seq, lease, "grant taken");
        self.holding = Some(Holding {
            seq,
            lease,
            parks,
            parked: false,
            apriori,
            slice: slice.max(1),
            since: now,
            last_device: now,
            issued: false,
            used: 0,
            closing: false,
            behind,
            drained: None,
            behind_bf: None,
            bf_wanted,
            phase: Phase::Sampling {
                n: 0,
                pending: None,
            },
            dirty: Vec::new(),
        });
        true
    }

    /// Whether the current grant was handed over while its previous holder
    /// drains, and that holder has not released yet.
    fn behind_previous_holder(&self) -> bool {
        self.slot.after().is_some_and(|(vm, seq)| {
            self.peers
                .get(vm)
                .is_some_and(|peer| peer.released() != seq)
        })
    }

    /// A grant given since the last look and not taken yet: another pass,
    /// at once, takes it. `None` if there is none.
    fn grant_waiting(&self) -> Option<Duration> {
        (self.slot.current_grant().0 != self.seen).then_some(Duration::ZERO)
    }

    /// Finishes the measurement and releases the grant.
    fn release(&mut self, meter: &mut dyn Meter, why: Why) {
        self.leave_quiet();
        self.finish_sample(meter);
        let Some(mut h) = self.holding.take() else {
            return;
        };
        if h.parked {
            self.slot.set_parked(0);
        }
        let used = if h.lease {
            if self.cfg.accounting != Accounting::WallClock {
                for ch in h.dirty.drain(..) {
                    let _ = meter.sync_channel(ch);
                }
                self.collect_lease_marks(meter);
            }
            if self.cfg.publish_device_time {
                self.slot.set_device_ns(meter.device_time_ns());
            }
            // The next lease's first completion is not read against this
            // one's (the gap between them is not device work).
            if let Some(m) = self.lease_done.take() {
                meter.unmark(m);
            }
            nanos(h.since.elapsed())
        } else {
            if why == Why::Full {
                self.announce_drain(&h);
            }
            let used = self.measured(meter, &mut h);
            if self.cfg.reserve {
                used.max(nanos(h.since.elapsed()))
            } else {
                used
            }
        };
        let runnable = why == Why::Full || self.cfg.idle == IdleBehaviour::Poll;
        self.runnable = runnable;
        self.slot
            .set_cost(self.avg.or(self.events.avg).unwrap_or(0));
        let drained = h.drained.map_or(0, clock::instant_ns);
        self.slot.release_drained(h.seq, used, runnable, drained);
        self.bell.ring();
        tracing::trace!(vm = %self.cfg.vm, seq = h.seq, lease = h.lease, used, ?why, "grant released");
    }

    /// A holder about to drain the open segment of a full `sampled` grant
    /// announces what it will report, so that the daemon can hand the
    /// grant to the next holder meanwhile ([`crate::grants`], *Closing* and
    /// *Handoff*). The drain's end is estimated from the samples' average:
    /// the segment's requests back to back, or now if the device ran them
    /// faster than the guest sent them.
    fn announce_drain(&self, h: &Holding) {
        let Some((since, queued)) = h.phase.open_segment() else {
            return;
        };
        if self.cfg.accounting != Accounting::Sampled || h.dirty.is_empty() {
            return;
        }
        let now = Instant::now();
        let segment = nanos(queued.max(now).duration_since(since));
        self.slot
            .publish_closing(h.seq, h.used.saturating_add(segment));
        self.bell.ring();
    }

    /// Finishes the measurement of a (non-lease) grant: its usage, ns.
    fn measured(&mut self, meter: &mut dyn Meter, h: &mut Holding) -> u64 {
        match self.cfg.accounting {
            Accounting::Sampled | Accounting::Every => {
                if let Phase::Bulk {
                    since: Some(since), ..
                } = h.phase
                {
                    let end = drain(meter, &mut h.dirty);
                    h.used += backfill::stretch_ns(&self.peers, &mut h.behind_bf, since, end);
                    h.drained = Some(end);
                }
                h.used
            }
            Accounting::Events => {
                self.events.collect(meter);
                std::mem::take(&mut self.events.unreported)
            }
            Accounting::WallClock => nanos(h.since.elapsed()),
        }
    }

    /// After a request issued under a lease: mark its end, remember the
    /// channel for the drain, and end the lease if it was revoked.
    fn after_lease_request(&mut self, meter: &mut dyn Meter, ch: u32, req: &ValidRequest) {
        let Some(h) = self.holding.as_mut() else {
            return;
        };
        h.last_device = Instant::now();
        h.issued = true;
        if !h.dirty.contains(&ch) {
            h.dirty.push(ch);
        }
        let seq = h.seq;
        // A synchronisation leaves nothing on the device to measure, and a
        // mark recorded after it would be work the guest did not ask for:
        // its next query of the stream it just synchronised could find the
        // mark still pending and answer "not ready" (seen on an H200).
        if self.cfg.accounting != Accounting::WallClock && !is_sync(req.op) {
            if let Some(m) = meter.mark(ch, req) {
                self.lease_marks.push_back(m);
            }
            if self.lease_marks.len().is_multiple_of(LEASE_TRIM) {
                self.trim_lease_marks(meter);
            }
        }
        if self.slot.revoked(seq) {
            self.release(meter, Why::Full);
        }
    }

    /// Forgets the lease's end marks that are done (or void), learning
    /// from the done ones.
    fn collect_lease_marks(&mut self, meter: &mut dyn Meter) {
        let marks = std::mem::take(&mut self.lease_marks);
        for m in marks {
            match meter.mark_done(m) {
                Some(false) => self.lease_marks.push_back(m),
                Some(true) => self.lease_mark_done(meter, m),
                None => {}
            }
        }
    }

    /// A lease's end mark `m` is done: the device time since the previous
    /// done mark of the same context is what the request in between cost.
    fn lease_mark_done(&mut self, meter: &mut dyn Meter, m: Mark) {
        if let Some(prev) = self.lease_done.take() {
            if prev.ch == m.ch && prev.ctx == m.ctx {
                if let Some(ns) = meter.mark_elapsed_ns(prev, m).filter(|&ns| ns >= 0) {
                    self.learn_lease_cost(ns as u64);
                }
            }
            meter.unmark(prev);
        }
        self.lease_done = Some(m);
    }

    /// Folds one request's device time into the lease cost: a longer one
    /// is taken at once, shorter ones decay it by 1/8 each.
    fn learn_lease_cost(&mut self, ns: u64) {
        self.lease_cost = Some(match self.lease_cost {
            Some(c) if ns < c => c - (c - ns) / 8,
            _ => ns,
        });
    }

    /// How many requests a lease holder may keep in flight: as many as a
    /// free run's turn allows, if the daemon set one (see
    /// [`GrantSlot::set_turn`]); else about one slice of device work at the
    /// learned cost, at least one, at most [`LEASE_QUEUE`]; one while no
    /// cost is known.
    fn lease_depth(&self) -> usize {
        let turn = self.slot.turn();
        if turn > 0 {
            return (turn as usize).min(LEASE_QUEUE);
        }
        let slice = self.holding.as_ref().map_or(1, |h| h.slice);
        match self.lease_cost {
            Some(cost) => (slice / cost.max(1)).clamp(1, LEASE_QUEUE as u64) as usize,
            None => 1,
        }
    }

    /// Whether a lease holder must hold its next request back: it has
    /// [`Gate::lease_depth`] requests in flight.
    fn lease_full(&mut self, meter: &mut dyn Meter) -> bool {
        if self.lease_marks.len() < self.lease_depth() {
            return false;
        }
        self.collect_lease_marks(meter);
        self.lease_marks.len() >= self.lease_depth()
    }

    /// When a lease holder with a full queue looks again: when the oldest
    /// of its requests in flight should end, where the executor models
    /// that (so the next one is issued as it ends, not up to
    /// [`LEASE_RECHECK`] later), at most [`LEASE_RECHECK`].
    fn lease_recheck(&mut self, meter: &mut dyn Meter) -> Duration {
        self.lease_marks
            .front()
            .and_then(|&m| meter.mark_pending(m))
            .map_or(LEASE_RECHECK, |d| d.min(LEASE_RECHECK))
    }

    /// Forgets done lease marks from the front (oldest first), without
    /// waiting, so that the count stays close to what is in flight.
    fn trim_lease_marks(&mut self, meter: &mut dyn Meter) {
        while let Some(&m) = self.lease_marks.front() {
            match meter.mark_done(m) {
                Some(false) => break,
                Some(true) => {
                    self.lease_marks.pop_front();
                    self.lease_mark_done(meter, m);
                }
                None => {
                    self.lease_marks.pop_front();
                }
            }
        }
    }

    /// `sampled`, the holder has nothing to issue: whether the device still
    /// runs the open bulk segment's work (looking without blocking). If so
    /// the holder is busy, not idle, and the guest's next request extends
    /// the segment (the device never idled); returns when to look again,
    /// about when the segment's work should be done by the samples'
    /// average.
    fn segment_running(&mut self, meter: &mut dyn Meter, now: Instant) -> Option<Duration> {
        let h = self.holding.as_mut()?;
        let (_, end) = h.phase.open_segment()?;
        if !h.dirty.iter().any(|&ch| meter.channel_busy(ch)) {
            return None;
        }
        h.last_device = now;
        Some(
            end.saturating_duration_since(now)
                .clamp(SEGMENT_RECHECK_MIN, SEGMENT_RECHECK_MAX),
        )
    }

    /// `sampled`: the holder has nothing more to issue (its guest has not
    /// sent the next request) and the device has finished (or nearly) what
    /// it issued: if a bulk segment is open, synchronise its channels and
    /// charge it up to now, so that the time until the guest's next request
    /// is not charged as GPU time; the next request opens a new segment.
    /// Releases (and returns true) if that fills the slice.
    fn close_bulk_segment(&mut self, meter: &mut dyn Meter) -> bool {
        let Some(h) = self.holding.as_mut() else {
            return false;
        };
        let Phase::Bulk {
            left,
            since: Some(since),
            avg,
            ..
        } = h.phase
        else {
            return false;
        };
        let end = drain(meter, &mut h.dirty);
        h.used += backfill::stretch_ns(&self.peers, &mut h.behind_bf, since, end);
        h.phase = Phase::Bulk {
            left,
            since: None,
            issued: 0,
            avg,
        };
        if h.used >= h.slice {
            self.release(meter, Why::Full);
            return true;
        }
        false
    }

    /// Whether the lease held now was revoked.
    /// Whether the grant held is enforced a priori and the next piece of
    /// work, at this VM's average, would overrun what is left of its
    /// slice (unknown costs are let through: the first measurement makes
    /// the history).
    fn apriori_full(&self) -> bool {
        let Some(h) = self.holding.as_ref().filter(|h| h.apriori && !h.lease) else {
            return false;
        };
        let cost = self.avg.or(self.events.avg).unwrap_or(0);
        cost > 0 && h.used.saturating_add(cost) > h.slice
    }

    /// Whether the daemon revoked the grant held: a lease because another
    /// VM waits (or a disengaged slice ended), a measured grant because a
    /// priority policy preempts it.
    fn revoked(&self) -> bool {
        self.holding
            .as_ref()
            .is_some_and(|h| self.slot.revoked(h.seq))
    }

    /// `sampled`: synchronises the sample in flight, if any, and charges it.
    /// Returns whether that filled the grant's slice.
    fn finish_sample(&mut self, meter: &mut dyn Meter) -> bool {
        let Some(h) = self.holding.as_mut() else {
            return false;
        };
        let Phase::Sampling {
            n,
            pending: Some((ch, t0)),
        } = h.phase
        else {
            return false;
        };
        let end = meter.sync_channel(ch);
        let mut took = end.saturating_duration_since(t0);
        // Whether it ran alone: then it feeds the average, so that a VM
        // whose samples fill its slices (long kernels) has one too.
        let mut alone = !h.behind;
        if h.behind_bf.is_some() {
            // It may have queued behind a backfilled request: charged from
            // that request's end (at most this VM's average if that end is
            // not known).
            let ran = backfill::behind_backfill(&self.peers, &mut h.behind_bf, t0, end)
                .unwrap_or_else(|| self.avg.map_or(nanos(took), |a| a.min(nanos(took))));
            alone &= ran == nanos(took);
            took = Duration::from_nanos(ran);
        }
        if h.behind {
            // It may have queued behind the previous holder's drain (any
            // sample of the grant may: a copy or memset need not wait for
            // the device, so the first kernel may come later): charged from
            // when that drain ended if the holder has said so by now, else
            // at most this VM's average (an upper bound on its own run).
            // The grant's clock starts when its first sample started.
            let drained = self.slot.after().and_then(|(vm, seq)| {
                let peer = self.peers.get(vm)?;
                (peer.released() == seq && peer.drained_ns() != 0).then(|| peer.drained_ns())
            });
            match drained {
                Some(d) if clock::instant_ns(t0) >= d => alone = true,
                Some(d) => {
                    let ran = clock::instant_ns(end).saturating_sub(d);
                    took = took.min(Duration::from_nanos(ran));
                }
                None => {
                    if let Some(avg) = self.avg {
                        took = took.min(Duration::from_nanos(avg));
                    }
                }
            }
            if n == 0 {
                h.since = end.checked_sub(took).unwrap_or(h.since);
            }
        }
        if alone {
            let ns = nanos(took);
            self.avg = Some(self.avg.map_or(ns, |a| (a * 3 + ns) / 4));
            if self.sample_kernel {
                Gate::learn_kernel(&mut self.kernel_avg, &self.slot, &self.cfg, ns);
            }
        }
        h.used += nanos(took);
        let n = n + 1;
        if h.used >= h.slice || n < SAMPLES {
            h.phase = Phase::Sampling { n, pending: None };
            return h.used >= h.slice;
        }
        let avg = (h.used / u64::from(n)).max(1);
        let left = (h.slice - h.used) / avg;
        h.phase = Phase::Bulk {
            left,
            since: None,
            issued: 0,
            avg,
        };
        left == 0
    }

    /// Accounts for a request issued at `t0` under the grant.
    fn account(&mut self, meter: &mut dyn Meter, ch: u32, req: &ValidRequest, t0: Instant) {
        let op = req.op;
        let Some(h) = self.holding.as_mut() else {
            return;
        };
        let now = Instant::now();
        h.last_device = now;
        h.issued = true;
        let full = match self.cfg.accounting {
            Accounting::Every => {
                let end = meter.sync_channel(ch);
                let took = nanos(end.saturating_duration_since(t0));
                h.used += took;
                // Pieces of work that ran alone make the history an
                // a-priori grant predicts from, as samples do.
                if is_work(op) && !h.behind {
                    self.avg = Some(self.avg.map_or(took, |a| (a * 3 + took) / 4));
                }
                h.used >= h.slice
            }
            Accounting::Sampled => match h.phase {
                // Not a sample, and no device time of its own: the samples
                // before it were synchronised, so it waited for nothing.
                Phase::Sampling { .. } if !is_work(op) => false,
                Phase::Sampling { n, .. } => {
                    // Synchronised before the next device work (or when the
                    // worker runs out of requests), so that the guest's
                    // other calls meanwhile overlap the sample's run.
                    self.sample_kernel = backfill::backfillable(op);
                    h.phase = Phase::Sampling {
                        n,
                        pending: Some((ch, t0)),
                    };
                    false
                }
                Phase::Bulk {
                    left,
                    since,
                    issued,
                    avg,
                } => {
                    if !h.dirty.contains(&ch) {
                        h.dirty.push(ch);
                    }
                    let work = u64::from(is_work(op));
                    let left = left.saturating_sub(work);
                    h.phase = Phase::Bulk {
                        left,
                        since: Some(since.unwrap_or(t0)),
                        issued: issued + work,
                        avg,
                    };
                    left == 0
                }
            },
            // Accounted by `account_events`.
            Accounting::Events => false,
            Accounting::WallClock => now.duration_since(h.since) >= Duration::from_nanos(h.slice),
        };
        let capped = now.duration_since(h.since) >= wall_cap(h.slice);
        if full || capped {
            self.release(meter, Why::Full);
        } else if req.needs_response && self.cfg.accounting == Accounting::Sampled {
            // The guest waits for this answer: if the device has finished
            // the sample's or the segment's work (the request itself may
            // have waited for it), it ends here, so that the time the guest
            // takes to send its next request is not charged.
            if self.sample_done(meter) && self.finish_sample(meter) {
                self.release(meter, Why::Full);
            } else {
                self.close_idle_segment(meter);
            }
        }
    }

    /// `sampled`: whether a sample is in flight and the device has finished
    /// it (looking without blocking).
    fn sample_done(&self, meter: &mut dyn Meter) -> bool {
        self.holding.as_ref().is_some_and(|h| {
            matches!(h.phase, Phase::Sampling { pending: Some((ch, _)), .. } if !meter.channel_busy(ch))
        })
    }

    /// `sampled`: closes the open bulk segment if the device has finished
    /// its work (looking without blocking). Returns whether that released
    /// the grant.
    fn close_idle_segment(&mut self, meter: &mut dyn Meter) -> bool {
        let running = self.holding.as_ref().is_some_and(|h| {
            matches!(h.phase, Phase::Bulk { since: Some(_), .. })
                && h.dirty.iter().any(|&ch| meter.channel_busy(ch))
        });
        !running && self.close_bulk_segment(meter)
    }

    /// Accounts for a request issued under the grant with `events`: `start`
    /// was recorded before it, the end mark is recorded now.
    fn account_events(
        &mut self,
        meter: &mut dyn Meter,
        ch: u32,
        req: &ValidRequest,
        start: Option<Mark>,
    ) {
        let Some(h) = self.holding.as_mut() else {
            if let Some(s) = start {
                meter.unmark(s);
            }
            return;
        };
        let now = Instant::now();
        let first = h.last_device == h.since;
        h.last_device = now;
        h.issued = true;
        let (since, slice, seq) = (h.since, h.slice, h.seq);
        if first {
            self.events.start_grant(seq);
        }
        match (start, meter.mark(ch, req)) {
            (Some(start), Some(end)) => self.events.pending.push_back(Pair {
                start,
                end,
                first,
                seq,
            }),
            (Some(m), None) | (None, Some(m)) => meter.unmark(m),
            (None, None) => {}
        }
        if self.events.avg.is_none() {
            // Nothing measured yet, so nothing to estimate the pairs in
            // flight with: wait for them (until a pair that was not the
            // first of its grant has set the average, once per VM).
            while let Some(&Pair { end, .. }) = self.events.pending.front() {
                match meter.mark_done(end) {
                    Some(false) => std::thread::sleep(Duration::from_micros(20)),
                    _ => break,
                }
            }
        }
        self.events.collect(meter);
        let estimate = self.events.grant_estimate(seq);
        if now.duration_since(since) >= wall_cap(slice) {
            self.release(meter, Why::Full);
        } else if estimate >= slice || self.events.pending.len() >= MAX_PENDING_MARKS {
            if let Some(h) = self.holding.as_mut() {
                h.closing = true;
            }
            self.close_events_grant(meter);
        }
    }

    /// A closing `events` grant releases once at most one pair is still in
    /// flight: the next holder then queues behind one request at most (its
    /// first pair is charged no more than the average), and the device
    /// never idles between grants. Every pair counts, this grant's or an
    /// earlier one's: a holder that released with earlier work still
    /// queued (reported later, 0 now) would be granted again at once and
    /// pile up more. Returns whether it released.
    fn close_events_grant(&mut self, meter: &mut dyn Meter) -> bool {
        if self.holding.is_none() {
            return false;
        }
        self.events.collect(meter);
        if self.events.pending.len() <= 1 {
            self.release(meter, Why::Full);
            true
        } else {
            false
        }
    }
}

/// Synchronises every channel in `dirty` (emptying it): when their work
/// completed, the latest of them (now if there was none).
fn drain(meter: &mut dyn Meter, dirty: &mut Vec<u32>) -> Instant {
    dirty
        .drain(..)
        .map(|ch| meter.sync_channel(ch))
        .max()
        .unwrap_or_else(Instant::now)
}

/// The longest a holder keeps a grant of `slice` ns, in wall-clock time.
fn wall_cap(slice: u64) -> Duration {
    Duration::from_nanos(slice.saturating_mul(u64::from(WALL_CAP_SLICES)))
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<H: Handler + Meter> Scheduled<H> {
    /// Runs `serve` (request `req` of channel `ch`, admitted) under the
    /// grant's accounting.
    fn accounted(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        serve: impl FnOnce(&mut H) -> Result<Answer, Status>,
    ) -> Result<Answer, Status> {
        let Some(gate) = self.gate.as_mut() else {
            return serve(&mut self.inner);
        };
        if gate.holding.is_none() {
            if let Some(device_before) = gate.backfilling(&mut self.inner) {
                let t0 = Instant::now();
                let result = serve(&mut self.inner);
                gate.backfilled(&mut self.inner, ch, t0, device_before);
                return result;
            }
        }
        if !needs_grant(req.op) || gate.holding.is_none() {
            return serve(&mut self.inner);
        }
        if req.needs_response {
            gate.slot.count_sync_call();
        }
        if gate.holding.as_ref().is_some_and(|h| h.lease) {
            let result = serve(&mut self.inner);
            gate.after_lease_request(&mut self.inner, ch, req);
            return result;
        }
        let start = match gate.cfg.accounting {
            Accounting::Events => self.inner.mark(ch, req),
            _ => None,
        };
        let t0 = Instant::now();
        let result = serve(&mut self.inner);
        if gate.cfg.accounting == Accounting::Events {
            gate.account_events(&mut self.inner, ch, req, start);
        } else {
            gate.account(&mut self.inner, ch, req, t0);
        }
        result
    }
}

impl<H: Handler + Meter> Handler for Scheduled<H> {
    fn handle(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        arena: &ArenaSlice<'_>,
    ) -> Result<Answer, Status> {
        self.accounted(ch, req, |h| h.handle(ch, req, arena))
    }

    fn resume(&mut self, ch: u32) -> Resume {
        let Some(mut req) = self.inner.unfinished(ch) else {
            return Resume::Nothing;
        };
        // The next part of a sliced kernel, or the next step of a graph
        // launch: admitted and accounted as a request of its own (its
        // guest was answered already).
        req.needs_response = false;
        if !self.may_issue(ch, &req) {
            return Resume::Held;
        }
        let ran = self.accounted(ch, &req, |h| match h.resume(ch) {
            Resume::Ran(r) => r.map(|()| Answer::default()),
            Resume::Nothing | Resume::Held => Ok(Answer::default()),
        });
        Resume::Ran(ran.map(drop))
    }

    fn unfinished(&self, ch: u32) -> Option<ValidRequest> {
        self.inner.unfinished(ch)
    }

    fn group(&self, ch: u32) -> Option<u32> {
        self.inner.group(ch)
    }

    fn sync_wait(&mut self, ch: u32, req: &ValidRequest, again: bool) -> Option<Duration> {
        self.inner.sync_wait(ch, req, again)
    }

    fn reset(&mut self, ch: u32) {
        if let Some(gate) = self.gate.as_mut() {
            gate.events.forget(ch);
            gate.lease_marks.retain(|m| m.ch != ch);
            // Its context (and the mark's event) goes with the channel.
            if gate.lease_done.is_some_and(|m| m.ch == ch) {
                gate.lease_done = None;
            }
            if let Some(h) = gate.holding.as_mut() {
                h.dirty.retain(|&c| c != ch);
                if let Phase::Sampling {
                    n,
                    pending: Some((c, t0)),
                } = h.phase
                {
                    if c == ch {
                        // Its context goes: charged what it has taken so far.
                        h.used += nanos(t0.elapsed());
                        h.phase = Phase::Sampling { n, pending: None };
                    }
                }
            }
        }
        self.inner.reset(ch);
    }

    fn tick(&mut self) {
        self.inner.tick();
    }

    fn may_issue(&mut self, _ch: u32, req: &ValidRequest) -> bool {
        let Some(gate) = self.gate.as_mut() else {
            return true;
        };
        if !needs_grant(req.op) {
            return true;
        }
        gate.leave_quiet();
        if gate.cfg.adaptive_spin || gate.cfg.backfill.is_some() {
            gate.quiet.request(Instant::now());
        }
        if gate.revoked() {
            gate.release(&mut self.inner, Why::Full);
        }
        if gate.holding.as_ref().is_some_and(|h| h.lease) {
            gate.unpark();
            // Held back (not deferred to the scheduler) while the lease's
            // queue is full.
            return !gate.lease_full(&mut self.inner);
        }
        if gate.holding.as_ref().is_some_and(|h| h.closing) {
            // A closing `events` grant issues nothing more (whether or not
            // this look ended it).
            gate.close_events_grant(&mut self.inner);
            return false;
        }
        if is_work(req.op) && gate.finish_sample(&mut self.inner) {
            gate.release(&mut self.inner, Why::Full);
        }
        if is_work(req.op) && gate.apriori_full() {
            gate.release(&mut self.inner, Why::Full);
        }
        if gate.holding.is_some() || gate.try_take(Instant::now()) {
            return true;
        }
        gate.publish_runnable(true);
        gate.try_backfill(req)
    }

    fn poll(&mut self, pass: Pass) -> Option<Duration> {
        let gate = self.gate.as_mut()?;
        let now = Instant::now();
        if gate.holding.is_none() {
            if gate.cfg.accounting == Accounting::Events
                && !gate.events.pending.is_empty()
                && now.duration_since(gate.events.collected) >= COLLECT_EVERY
            {
                // Read what completed since the release, at most every
                // COLLECT_EVERY (each look is an executor call per pair).
                gate.events.collected = now;
                gate.events.collect(&mut self.inner);
            }
            if pass.deferred {
                // Held back until a grant comes (the daemon rings the
                // doorbell); one that came since the pass looked is taken
                // by another pass at once.
                return gate.grant_waiting();
            }
            if !pass.served {
                // Nothing to backfill any more.
                gate.end_backfill();
            }
            // Nothing waits for the GPU: yield (marked blocked) unless the
            // policy polls, whose vGPUs never block.
            if gate.cfg.idle != IdleBehaviour::Poll {
                gate.publish_runnable(false);
            }
            // A grant given meanwhile is taken, to be released unused after
            // the spin budget.
            if !gate.try_take(now) {
                return None;
            }
        }
        if gate.revoked() {
            gate.release(&mut self.inner, Why::Full);
            return None;
        }
        if gate.cfg.publish_device_time
            && gate.holding.as_ref().is_some_and(|h| h.lease)
            && now.duration_since(gate.device_published) >= DEVICE_PUBLISH_EVERY
        {
            // A lease holder's device time, for a disengaged policy that
            // charges free runs from it.
            gate.device_published = now;
            gate.slot.set_device_ns(self.inner.device_time_ns());
        }
        let h = gate.holding.as_mut().expect("holding");
        if h.lease {
            // No slice and no wall-clock cap: the daemon revokes the lease
            // (ringing the doorbell) when another VM waits.
            if pass.deferred {
                // Held back by a full queue: busy, not idle; look again
                // when its oldest request should end, or soon.
                h.last_device = now;
                return Some(gate.lease_recheck(&mut self.inner));
            }
            let quiet = now.duration_since(h.last_device);
            let parks = h.parks;
            // An active `Hold` lease is kept until the daemon revokes it.
            return match gate.cfg.idle.while_idle(h.issued) {
                IdleBehaviour::Poll => None,
                IdleBehaviour::Block | IdleBehaviour::Hold if quiet >= gate.cfg.spin => {
                    // Nothing to issue; but work still in flight keeps the
                    // holder busy (releasing would mean draining it, and
                    // the worker could serve nothing meanwhile).
                    gate.trim_lease_marks(&mut self.inner);
                    if gate.lease_marks.is_empty() {
                        if parks {
                            // A free run's member keeps its lease: it
                            // issues again without asking for it.
                            gate.park(&mut self.inner);
                        } else {
                            gate.release(&mut self.inner, Why::Idle);
                        }
                        None
                    } else {
                        Some(LEASE_IN_FLIGHT_RECHECK)
                    }
                }
                IdleBehaviour::Block | IdleBehaviour::Hold => Some(gate.cfg.spin - quiet),
            };
        }
        if !pass.served && gate.finish_sample(&mut self.inner) {
            gate.release(&mut self.inner, Why::Full);
            return None;
        }
        if !pass.served && !pass.deferred && gate.cfg.accounting == Accounting::Sampled {
            if let Some(wait) = gate.segment_running(&mut self.inner, now) {
                return Some(wait);
            }
            if gate.close_bulk_segment(&mut self.inner) {
                return None;
            }
        }
        let h = gate.holding.as_mut()?;
        let held = now.duration_since(h.since);
        let lease = Duration::from_nanos(h.slice);
        let cap = wall_cap(h.slice);
        if held >= cap {
            gate.release(&mut self.inner, Why::Full);
            return None;
        }
        if h.closing {
            return (!gate.close_events_grant(&mut self.inner)).then_some(CLOSING_RECHECK);
        }
        match gate.cfg.idle.while_idle(h.issued) {
            IdleBehaviour::Poll => {
                if held >= lease {
                    gate.release(&mut self.inner, Why::Full);
                    None
                } else {
                    Some(lease - held)
                }
            }
            // (`while_idle` never answers `Hold`.)
            IdleBehaviour::Block | IdleBehaviour::Hold => {
                if gate.cfg.accounting == Accounting::WallClock && held >= lease {
                    gate.release(&mut self.inner, Why::Full);
                    return None;
                }
                let quiet = now.duration_since(h.last_device);
                // A quiet period starts once the holder's own work is done:
                // a guest that polls for its kernel's end (requests that
                // need no grant) is not quiet while the kernel runs.
                // (Looked at once per quiet period: each look at a channel is
                // an executor call.)
                if (gate.cfg.adaptive_spin || gate.cfg.backfill.is_some())
                    && gate.quiet.since.is_none()
                    && !pass.served
                    && !pass.deferred
                    && !h.dirty.iter().any(|&ch| self.inner.channel_busy(ch))
                {
                    gate.quiet.quiet(now);
                }
                if !pass.served && !pass.deferred {
                    // Its own work is done (the sample and the segment
                    // were synchronised above): others may backfill.
                    gate.publish_quiet();
                }
                let spin = gate.spin_budget();
                if quiet >= spin {
                    gate.release(&mut self.inner, Why::Idle);
                    None
                } else {
                    Some((spin - quiet).min(cap - held))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::GrantFile;
    use crate::host::HostRegion;
    use fairgpu_protocol::layout::RegionConfig;

    /// A handler that serves everything and counts what accounting asks.
    #[derive(Debug, Default)]
    struct Fake {
        handled: Vec<Opcode>,
        syncs: u32,
        marks: u32,
        /// Marks report done.
        done: bool,
        /// Channels report work still running.
        busy: bool,
        /// How long a synchronisation waits (the device's work).
        sync_takes: Duration,
        /// Device time between two marks, ns (0: 1,000).
        elapsed_ns: i64,
    }

    impl Handler for Fake {
        fn handle(
            &mut self,
            _: u32,
            req: &ValidRequest,
            _: &ArenaSlice<'_>,
        ) -> Result<Answer, Status> {
            self.handled.push(req.op);
            Ok(Answer::default())
        }
        fn reset(&mut self, _: u32) {}
    }

    impl Meter for Fake {
        fn channel_busy(&mut self, _: u32) -> bool {
            self.busy
        }

        fn sync_channel(&mut self, _: u32) -> Instant {
            self.syncs += 1;
            // The work ends `sync_takes` after the synchronisation began,
            // however late this thread wakes from its sleep (a loaded
            // machine oversleeps by milliseconds): what is charged is the
            // work's length, not the scheduler's delay.
            let end = Instant::now() + self.sync_takes;
            std::thread::sleep(self.sync_takes);
            end
        }
        fn mark(&mut self, ch: u32, _: &ValidRequest) -> Option<Mark> {
            self.marks += 1;
            Some(Mark {
                ch,
                ctx: CtxId(1),
                event: EventId(u64::from(self.marks)),
            })
        }
        fn mark_done(&mut self, _: Mark) -> Option<bool> {
            Some(self.done)
        }
        fn mark_elapsed_ns(&mut self, _: Mark, _: Mark) -> Option<i64> {
            Some(if self.elapsed_ns == 0 {
                1_000
            } else {
                self.elapsed_ns
            })
        }
        fn unmark(&mut self, _: Mark) {}
    }

    fn req(op: Opcode, needs_response: bool) -> ValidRequest {
        ValidRequest {
            op,
            needs_response,
            call_id: 1,
            vcpu: 0,
            arena: 0..0,
            args: [0; fairgpu_protocol::limits::REQUEST_ARGS],
        }
    }

    struct Rig {
        file: GrantFile,
        region: HostRegion,
        s: Scheduled<Fake>,
    }

    fn rig(name: &str, accounting: Accounting, idle: IdleBehaviour) -> Rig {
        rig_with(name, accounting, idle, false)
    }

    fn rig_with(name: &str, accounting: Accounting, idle: IdleBehaviour, reserve: bool) -> Rig {
        let dir = std::env::temp_dir();
        let pid = std::process::id();
        // Slot 0 is this worker's; slot 1 another VM's, for handoffs.
        let file = GrantFile::create(&dir.join(format!("fairgpu-acct-{pid}-{name}")), 2).unwrap();
        let region = HostRegion::create(
            &dir.join(format!("fairgpu-acct-{pid}-{name}.region")),
            &RegionConfig {
                channels: 1,
                ring_entries: 8,
                arena_size: 64 * 1024,
                ..Default::default()
            },
        )
        .unwrap();
        let gate = Gate::new(
            file.slot(0).unwrap(),
            file.bell(),
            GateConfig {
                accounting,
                idle,
                spin: Duration::ZERO,
                adaptive_spin: false,
                reserve,
                publish_device_time: false,
                backfill: None,
                vm: "vm".into(),
            },
        )
        .with_peers(vec![file.slot(0).unwrap(), file.slot(1).unwrap()]);
        Rig {
            file,
            region,
            s: Scheduled::new(Fake::default(), gate),
        }
    }

    impl Rig {
        /// Serves a request the guest waits for.
        fn serve(&mut self, op: Opcode) -> bool {
            self.serve_req(req(op, true))
        }

        /// Serves a request the guest does not wait for (a launch).
        fn serve_async(&mut self, op: Opcode) -> bool {
            self.serve_req(req(op, false))
        }

        fn serve_req(&mut self, r: ValidRequest) -> bool {
            if !self.s.may_issue(0, &r) {
                return false;
            }
            let view = self.region.view().clone();
            self.s.handle(0, &r, &ArenaSlice::empty(&view)).unwrap();
            true
        }

        fn idle_pass(&mut self) -> Option<Duration> {
            self.s.poll(Pass::default())
        }

        /// Lets the work in flight take `wait`, then ends grant `seq` (the
        /// spin budget is zero); returns what it was charged.
        fn end_grant(&mut self, seq: u32, wait: Duration) -> u64 {
            self.s.inner().sync_takes = wait;
            self.idle_pass();
            let d = self.file.slot(0).unwrap();
            assert_eq!(d.released(), seq);
            d.used_ns()
        }
    }

    #[test]
    fn device_work_needs_the_grant_and_queries_do_not() {
        let gated: Vec<Opcode> = Opcode::ALL
            .into_iter()
            .filter(|&op| needs_grant(op))
            .collect();
        // CUDA's 13, and OpenCL's kernels, buffer and image transfers,
        // fills, markers, wait lists, finishes and event waits.
        assert_eq!(gated.len(), 13 + 14);
        assert!(needs_grant(Opcode::Memcpy3D));
        assert!(needs_grant(Opcode::ClNdRange) && needs_grant(Opcode::ClFinish));
        for op in [
            Opcode::Nop,
            Opcode::DeviceGetAttribute,
            Opcode::MemAlloc,
            Opcode::MemFree,
            Opcode::MemGetInfo,
            Opcode::ModuleStage,
            Opcode::ModuleLoad,
            Opcode::ModuleLoadCached,
            Opcode::ModuleGetFunction,
            Opcode::EventQuery,
            Opcode::StreamQuery,
            Opcode::EventElapsedTime,
            Opcode::EventCreate,
            Opcode::ArrayCreate,
            Opcode::TexObjectCreate,
            Opcode::SurfObjectDestroy,
            Opcode::ClBuildProgram,
            Opcode::ClCreateBuffer,
            Opcode::ClEventStatus,
            Opcode::ClGetDeviceInfo,
        ] {
            assert!(!needs_grant(op), "{op:?}");
        }
    }

    #[test]
    fn unscheduled_passes_everything() {
        let mut s = Scheduled::unscheduled(Fake::default());
        assert!(s.may_issue(0, &req(Opcode::LaunchKernel, false)));
        assert_eq!(s.poll(Pass::default()), None);
        assert!(s.gate().is_none());
    }

    #[test]
    fn a_grant_is_used_measured_and_released_at_the_slice() {
        let mut r = rig("every", Accounting::Every, IdleBehaviour::Block);
        let d = r.file.slot(0).unwrap();
        // Queries pass; device work waits for the grant and makes the VM
        // runnable.
        assert!(r.serve(Opcode::DeviceGetAttribute));
        assert!(!r.serve(Opcode::LaunchKernel));
        assert!(d.runnable());
        assert!(!r.s.gate().unwrap().holding());
        // A 1 ns measured grant: the first request fills it.
        let seq = d.grant(1, false);
        assert!(r.serve(Opcode::LaunchKernel));
        assert_eq!(r.s.inner().syncs, 1, "every request is synchronised");
        assert_eq!(d.released(), seq);
        assert!(d.used_ns() > 0);
        assert!(d.runnable(), "a full release stays runnable");
        assert_eq!(d.sync_calls(), 1);
        assert!(!r.serve(Opcode::LaunchKernel), "no grant any more");
        // Nothing held back: the worker yields and is marked blocked.
        r.idle_pass();
        assert!(!d.runnable());
    }

    #[test]
    fn sampled_grants_synchronise_the_first_requests_and_idle_ones_block() {
        let mut r = rig("sampled", Accounting::Sampled, IdleBehaviour::Block);
        let d = r.file.slot(0).unwrap();
        let seq = d.grant(10_000_000_000, false);
        for _ in 0..SAMPLES + 3 {
            assert!(r.serve_async(Opcode::LaunchKernel));
        }
        assert_eq!(r.s.inner().syncs, SAMPLES, "the samples only");
        // Idle for the (zero) spin budget: the bulk phase is synchronised and
        // the grant released with everything measured; the worker blocks.
        assert_eq!(r.idle_pass(), None);
        assert_eq!(r.s.inner().syncs, SAMPLES + 1);
        assert_eq!(d.released(), seq);
        assert!(!d.runnable());
        assert!(d.used_ns() > 0);
    }

    #[test]
    fn a_stale_grant_is_taken_and_given_back() {
        let mut r = rig("stale", Accounting::Sampled, IdleBehaviour::Block);
        let d = r.file.slot(0).unwrap();
        let seq = d.grant(6_000_000, false);
        // Nothing to issue: the next pass takes the grant, the one after
        // (spin budget 0) releases it unused.
        r.idle_pass();
        r.idle_pass();
        assert_eq!((d.released(), d.used_ns(), d.runnable()), (seq, 0, false));
    }

    #[test]
    fn a_lease_issues_freely_until_revoked_then_drains() {
        let mut r = rig("lease", Accounting::Sampled, IdleBehaviour::Block);
        let d = r.file.slot(0).unwrap();
        let seq = d.grant(6_000_000, true);
        // Requests done teach the lease what one costs (1 µs): the second
        // completion is read against the first when the third is issued.
        r.s.inner().done = true;
        for _ in 0..3 {
            assert!(r.serve(Opcode::LaunchKernel));
        }
        r.s.inner().done = false;
        for _ in 0..20 {
            assert!(r.serve(Opcode::LaunchKernel), "no slice under a lease");
        }
        assert_eq!(r.s.inner().syncs, 0, "no interposition under a lease");
        assert_eq!(r.s.inner().marks, 23, "an end mark per request");
        // Work in flight: not idle.
        assert!(r.idle_pass().is_some());
        assert_ne!(d.released(), seq);
        d.revoke(seq);
        assert!(
            !r.serve(Opcode::LaunchKernel),
            "revoked: released, held back"
        );
        assert_eq!(r.s.inner().syncs, 1, "drained its channel");
        assert_eq!(d.released(), seq);
        assert!(d.runnable());
    }

    /// Finding: a lease allowed 1,024 requests in flight whatever they
    /// cost, and 30 one-second kernels made another VM wait 30 s. A lease
    /// keeps about one slice of device work in flight.
    #[test]
    fn cross_vm_stall_by_long_kernels_under_a_lease_is_bounded_to_a_slice() {
        let mut r = rig("lease-long", Accounting::Sampled, IdleBehaviour::Block);
        r.s.inner().elapsed_ns = 1_000_000_000;
        let d = r.file.slot(0).unwrap();
        d.grant(6_000_000, true);
        assert!(r.serve_async(Opcode::LaunchKernel));
        assert!(
            !r.serve_async(Opcode::LaunchKernel),
            "a request of unknown cost is the only one in flight"
        );
        // Two completions teach the cost: one second a request.
        r.s.inner().done = true;
        assert!(r.serve_async(Opcode::LaunchKernel));
        assert!(r.serve_async(Opcode::LaunchKernel));
        r.s.inner().done = false;
        for _ in 0..30 {
            assert!(
                !r.serve_async(Opcode::LaunchKernel),
                "a second one-second kernel queued under a 6 ms slice"
            );
        }
    }

    /// A 6 ms lease that learned its requests take 1 µs (three done), the
    /// third of them still in flight.
    fn lease_of_short_requests(name: &str) -> (Rig, GrantSlot) {
        let mut r = rig(name, Accounting::Sampled, IdleBehaviour::Block);
        let d = r.file.slot(0).unwrap();
        d.grant(6_000_000, true);
        r.s.inner().done = true;
        for _ in 0..3 {
            assert!(r.serve_async(Opcode::LaunchKernel));
        }
        r.s.inner().done = false;
        (r, d)
    }

    #[test]
    fn a_lease_of_short_requests_keeps_a_deep_queue() {
        // 1 µs requests: a 6 ms slice holds 6,000, capped at LEASE_QUEUE.
        let (mut r, _d) = lease_of_short_requests("lease-short");
        for i in 1..LEASE_QUEUE {
            assert!(r.serve_async(Opcode::LaunchKernel), "request {i} held back");
        }
        assert!(!r.serve_async(Opcode::LaunchKernel));
    }

    /// A free run's turn (NEON) caps the lease's queue at that many
    /// requests whatever they cost, and the cap follows the daemon's word.
    #[test]
    fn a_free_run_turn_caps_the_lease_queue_in_requests() {
        // 1 µs requests would fill a 6 ms slice 1,024 deep.
        let (mut r, d) = lease_of_short_requests("lease-turn");
        d.set_turn(2);
        // The third request is still in flight: one more makes two.
        assert!(r.serve_async(Opcode::LaunchKernel));
        assert!(
            !r.serve_async(Opcode::LaunchKernel),
            "a third request in flight under a turn of two"
        );
        // Alone again (turn 0): the queue is by device time once more.
        d.set_turn(0);
        for i in 2..LEASE_QUEUE {
            assert!(r.serve_async(Opcode::LaunchKernel), "request {i} held back");
        }
        assert!(!r.serve_async(Opcode::LaunchKernel));
    }

    #[test]
    fn a_lease_marks_device_work_but_not_synchronisations() {
        let mut r = rig("lease-sync", Accounting::Sampled, IdleBehaviour::Block);
        r.s.inner().done = true;
        let d = r.file.slot(0).unwrap();
        d.grant(6_000_000, true);
        assert!(r.serve_async(Opcode::LaunchKernel));
        assert!(r.serve_async(Opcode::EventRecord));
        assert_eq!(r.s.inner().marks, 2);
        // After a synchronisation the guest's streams must be idle: a mark
        // recorded there would make its next query answer "not ready".
        for op in [
            Opcode::StreamSynchronize,
            Opcode::CtxSynchronize,
            Opcode::EventSynchronize,
        ] {
            assert!(r.serve(op), "{op:?}");
        }
        assert_eq!(r.s.inner().marks, 2, "a synchronisation was marked");
    }

    #[test]
    fn a_lease_with_its_work_done_ends_when_idle() {
        let mut r = rig("lease-idle", Accounting::Events, IdleBehaviour::Block);
        r.s.inner().done = true;
        let d = r.file.slot(0).unwrap();
        let seq = d.grant(6_000_000, true);
        assert!(r.serve(Opcode::MemcpyHtoD));
        assert_eq!(r.idle_pass(), None);
        assert_eq!((d.released(), d.runnable()), (seq, false));
    }

    /// A free run's parking lease (LoGA): idle with its work done, the
    /// holder keeps the lease, parked, and issues again on it without a
    /// new grant; a revocation still ends it.
    #[test]
    fn a_parking_lease_is_kept_while_idle_and_used_again() {
        let mut r = rig("lease-park", Accounting::Events, IdleBehaviour::Block);
        r.s.inner().done = true;
        let d = r.file.slot(0).unwrap();
        let seq = d.grant_free_run(300_000, true);
        assert!(r.serve(Opcode::LaunchKernel));
        assert_eq!(r.idle_pass(), None);
        assert_ne!(d.released(), seq, "a parking lease was given back");
        assert_eq!(d.parked(), seq);
        assert!(r.serve(Opcode::LaunchKernel), "issued on the parked lease");
        assert_eq!(d.parked(), 0, "unparked when it issues again");
        r.idle_pass();
        assert_eq!(d.parked(), seq);
        d.revoke(seq);
        r.idle_pass();
        assert_eq!((d.released(), d.parked()), (seq, 0));
        // A plain free-run lease (NEON's) is given back when idle.
        let seq = d.grant_free_run(300_000, false);
        assert!(r.serve(Opcode::LaunchKernel));
        r.idle_pass();
        assert_eq!((d.released(), d.parked()), (seq, 0));
    }

    /// NEON's timeslice: a holder that has issued keeps its grant through
    /// idle gaps to the slice's end and stays runnable; one that issued
    /// nothing gives it back at the spin budget and blocks; a lease that
    /// issued is kept until revoked.
    #[test]
    fn a_holder_that_has_issued_keeps_its_slice_through_idle_gaps() {
        let mut r = rig("hold", Accounting::Events, IdleBehaviour::Hold);
        r.s.inner().done = true;
        let d = r.file.slot(0).unwrap();
        let seq = d.grant(50_000_000, false);
        r.idle_pass();
        assert_eq!(d.released(), seq, "an inactive holder keeps the token");
        assert!(!d.runnable());

        let slice = Duration::from_millis(20);
        let seq = d.grant(slice.as_nanos() as u64, false);
        let granted = Instant::now();
        assert!(r.serve(Opcode::LaunchKernel));
        assert!(r.idle_pass().is_some());
        r.idle_pass();
        assert_ne!(d.released(), seq, "gave its slice back at an idle gap");
        assert!(r.serve(Opcode::LaunchKernel), "issues again on the grant");
        while granted.elapsed() < slice {
            std::thread::sleep(Duration::from_millis(2));
        }
        r.idle_pass();
        assert_eq!(d.released(), seq);
        assert!(d.runnable(), "active in its slice: still runnable");

        let seq = d.grant(6_000_000, true);
        assert!(r.serve(Opcode::LaunchKernel));
        r.idle_pass();
        r.idle_pass();
        assert_ne!(d.released(), seq, "gave its lease back at an idle gap");
        d.revoke(seq);
        r.idle_pass();
        assert_eq!(d.released(), seq);
    }

    #[test]
    fn a_polling_holder_keeps_its_lease_and_never_blocks() {
        let mut r = rig("poll", Accounting::WallClock, IdleBehaviour::Poll);
        let d = r.file.slot(0).unwrap();
        assert!(!r.serve(Opcode::LaunchKernel));
        let seq = d.grant(6_000_000, true);
        assert!(r.serve(Opcode::LaunchKernel));
        assert_eq!(r.s.inner().marks, 0, "no marks with wall-clock accounting");
        r.idle_pass();
        r.idle_pass();
        assert_ne!(d.released(), seq, "a polling holder keeps its lease");
        d.revoke(seq);
        r.idle_pass();
        assert_eq!(d.released(), seq);
        assert!(d.runnable(), "polling vGPUs stay runnable");
    }

    #[test]
    fn without_work_conservation_an_idle_holder_keeps_and_pays_its_slice() {
        let mut r = rig_with("reserve", Accounting::Sampled, IdleBehaviour::Poll, true);
        let d = r.file.slot(0).unwrap();
        assert!(!r.serve(Opcode::LaunchKernel));
        let slice = Duration::from_millis(20);
        let seq = d.grant(slice.as_nanos() as u64, false);
        let granted = Instant::now();
        assert!(r.serve(Opcode::LaunchKernel));
        // Idle: the holder keeps the GPU until the slice's end.
        assert!(r.idle_pass().is_some());
        assert_ne!(d.released(), seq, "released an idle slice early");
        while granted.elapsed() < slice {
            std::thread::sleep(Duration::from_millis(2));
        }
        r.idle_pass();
        assert_eq!(d.released(), seq);
        assert!(
            d.used_ns() >= slice.as_nanos() as u64,
            "charged {} ns for a {slice:?} slice it kept",
            d.used_ns()
        );
        assert!(d.runnable());
    }

    /// A grant handed over while another VM's holder drains is taken at
    /// once: its first work queues behind that holder's on the device and
    /// is charged from when that holder's drain ended, if it has said so,
    /// else at most this VM's average. Once the holder has released before
    /// the grant is taken, a first sample is charged in full.
    #[test]
    fn a_handed_over_grant_queues_behind_the_draining_holder() {
        let mut r = rig("handoff", Accounting::Sampled, IdleBehaviour::Block);
        let (d, other) = (r.file.slot(0).unwrap(), r.file.slot(1).unwrap());
        // A grant for this VM naming the other VM's, still draining.
        let hand_over = || {
            let theirs = other.grant(6_000_000, false);
            (theirs, d.grant_after(6_000_000, false, Some((1, theirs))))
        };
        // A first grant sets this VM's average: about 1 ms a request.
        r.s.inner().sync_takes = Duration::from_millis(1);
        assert!(!r.serve_async(Opcode::LaunchKernel));
        let first = d.grant(10_000_000_000, false);
        for _ in 0..=SAMPLES {
            assert!(r.serve_async(Opcode::LaunchKernel));
        }
        r.idle_pass();
        assert_eq!(d.released(), first);
        // Its request waits 100 ms behind the other VM's work.
        let (_, seq) = hand_over();
        assert!(
            r.serve_async(Opcode::LaunchKernel),
            "taken while the other VM drains"
        );
        assert!(r.s.gate().unwrap().holding());
        let used = r.end_grant(seq, Duration::from_millis(100));
        assert!(
            used < 50_000_000,
            "charged {used} ns for waiting behind another VM"
        );
        // A copy first (it need not wait for the device), then a kernel
        // that waits 100 ms behind the drain: the kernel is capped too.
        let (_, seq) = hand_over();
        r.s.inner().sync_takes = Duration::ZERO;
        assert!(r.serve(Opcode::MemcpyDtoH));
        assert!(r.serve_async(Opcode::LaunchKernel));
        let used = r.end_grant(seq, Duration::from_millis(100));
        assert!(
            used < 50_000_000,
            "charged {used} ns: the kernel after a copy paid for the wait"
        );
        // The other VM says when its drain ended (30 ms after this VM's
        // request was issued): charged from there, 10 ms.
        let (theirs, seq) = hand_over();
        assert!(r.serve_async(Opcode::LaunchKernel));
        std::thread::sleep(Duration::from_millis(30));
        other.release_drained(theirs, 6_000_000, true, clock::now_ns());
        let used = r.end_grant(seq, Duration::from_millis(10));
        assert!(
            (5_000_000..30_000_000).contains(&used),
            "charged {used} ns for 10 ms after the other VM's drain"
        );
        // The other VM has released: nothing queues behind it any more.
        let seq = d.grant_after(6_000_000, false, Some((1, theirs)));
        assert!(r.serve_async(Opcode::LaunchKernel));
        let used = r.end_grant(seq, Duration::from_millis(20));
        assert!(used >= 20_000_000, "charged {used} ns");
    }

    /// Backfilling: a quiet holder's gap is filled by another VM's kernel
    /// (synchronised, charged to it) only while the holder stays quiet; the
    /// backfill grant ends when the holder is back.
    #[test]
    fn a_backfiller_issues_only_while_the_holder_is_quiet() {
        // Quiet periods of at least half of 200 µs are offered.
        let cfg = |spin_ms: u64| GateConfig {
            accounting: Accounting::Sampled,
            idle: IdleBehaviour::Block,
            spin: Duration::from_millis(spin_ms),
            adaptive_spin: false,
            reserve: false,
            publish_device_time: false,
            backfill: Some(Duration::from_micros(200)),
            vm: "vm".into(),
        };
        let mut r = rig("backfill", Accounting::Sampled, IdleBehaviour::Block);
        let peers = || vec![r.file.slot(0).unwrap(), r.file.slot(1).unwrap()];
        // Slot 0: the holder, spinning 10 s on an empty ring.
        let holder = Gate::new(r.file.slot(0).unwrap(), r.file.bell(), cfg(10_000));
        r.s = Scheduled::new(Fake::default(), holder.with_peers(peers()));
        // Slot 1: the backfiller.
        let gate = Gate::new(r.file.slot(1).unwrap(), r.file.bell(), cfg(0)).with_peers(peers());
        let mut b = Scheduled::new(Fake::default(), gate);
        let view = r.region.view().clone();
        let issue = |s: &mut Scheduled<Fake>, op: Opcode| {
            let q = req(op, false);
            s.may_issue(0, &q) && {
                s.handle(0, &q, &ArenaSlice::empty(&view)).unwrap();
                true
            }
        };
        let (d0, d1) = (r.file.slot(0).unwrap(), r.file.slot(1).unwrap());
        // The backfiller's history: one grant of 1 ms kernels.
        b.inner().sync_takes = Duration::from_millis(1);
        let g = d1.grant(6_000_000, false);
        assert!(issue(&mut b, Opcode::LaunchKernel));
        b.poll(Pass::default());
        assert_eq!(d1.released(), g);
        // It waits for the GPU (runnable); the holder runs a kernel and its
        // ring runs dry: quiet.
        assert!(!issue(&mut b, Opcode::LaunchKernel));
        assert!(d1.runnable());
        // (The daemon says with the grant that another VM could backfill.)
        d0.want_backfill(true);
        let seq = d0.grant(10_000_000_000, false);
        assert!(issue(&mut r.s, Opcode::LaunchKernel));
        assert_eq!(d0.quiet(), 0, "busy, not quiet");
        // Its first quiet periods (1 ms each: its guest's think time) are
        // learned, not offered; then they are.
        for _ in 0..SpinBudget::LEARN {
            assert!(r.idle_pass().is_some(), "it keeps the grant");
            assert_eq!(d0.quiet(), 0);
            std::thread::sleep(Duration::from_millis(1));
            assert!(issue(&mut r.s, Opcode::LaunchKernel));
        }
        assert!(r.idle_pass().is_some());
        assert_eq!(d0.quiet(), seq);
        // Without a backfill grant nothing is issued.
        assert!(!issue(&mut b, Opcode::LaunchKernel));
        // A backfill grant whose bound is below the backfiller's 1 ms
        // history: nothing issued, released at once, unused.
        let bf = d1.grant_backfill(0, seq, 500_000);
        assert!(!issue(&mut b, Opcode::LaunchKernel));
        assert_eq!((d1.backfill_released(), d1.backfill_used()), (bf, (0, 0)));
        // One that admits its kernels (a bound of 1 s: a loaded host may
        // stretch the 1 ms sleeps well past 2 ms): kernels go, each
        // synchronised at once; a copy does not (its length is not
        // predicted) and ends the grant.
        let admits = 1_000_000_000;
        let bf = d1.grant_backfill(0, seq, admits);
        let syncs = b.inner().syncs;
        assert!(issue(&mut b, Opcode::LaunchKernel));
        assert!(issue(&mut b, Opcode::LaunchKernel));
        assert_eq!(b.inner().syncs, syncs + 2);
        assert!(!issue(&mut b, Opcode::MemcpyHtoD));
        assert_eq!(d1.backfill_released(), bf);
        let (used, requests) = d1.backfill_used();
        assert_eq!(requests, 2);
        assert!(used >= 2_000_000, "charged {used} ns for two 1 ms kernels");
        assert!(d1.backfill_end().is_some_and(|e| e > 0));
        assert!(
            d1.kernel_ns() >= 1_000_000,
            "its kernels' average is published"
        );
        // Another grant; the holder comes back: the backfiller's next
        // kernel waits, and the grant ends with what it ran.
        let bf = d1.grant_backfill(0, seq, admits);
        assert!(issue(&mut b, Opcode::LaunchKernel));
        assert!(issue(&mut r.s, Opcode::LaunchKernel));
        assert_eq!(d0.quiet(), 0);
        assert!(!issue(&mut b, Opcode::LaunchKernel));
        assert_eq!(d1.backfill_released(), bf);
        assert_eq!(d1.backfill_used().1, 1);
        // A backfill grant for a grant the holder does not hold is ended
        // at the first look.
        let bf = d1.grant_backfill(0, seq.wrapping_add(1), admits);
        assert!(!issue(&mut b, Opcode::LaunchKernel));
        assert_eq!((d1.backfill_released(), d1.backfill_used()), (bf, (0, 0)));
    }

    /// A holder's work that queued behind a backfilled request is charged
    /// from that request's end; one the backfilled request queued behind
    /// (they raced to the device) is charged whole.
    #[test]
    fn the_holder_is_not_charged_for_a_backfilled_request() {
        let r = rig("behind-backfill", Accounting::Sampled, IdleBehaviour::Block);
        let peers = vec![r.file.slot(0).unwrap(), r.file.slot(1).unwrap()];
        // The holder's work ran from `since` to `end`, 20 ms.
        let end = Instant::now();
        let since = end - Duration::from_millis(20);
        let at = |ms: u64| clock::instant_ns(since) + ms * 1_000_000;
        let charged = |bf_end: u64| {
            peers[1].set_backfill_busy();
            peers[1].backfill_done(bf_end);
            backfill::behind_backfill(&peers, &mut Some(1), since, end)
        };
        // (Instants map onto the clock to within a few ns.)
        let near =
            |got: Option<u64>, ms: u64| got.is_some_and(|ns| ns.abs_diff(ms * 1_000_000) < 50_000);
        assert!(near(charged(at(15)), 5), "{:?}", charged(at(15)));
        assert_eq!(
            charged(at(25)),
            Some(20_000_000),
            "it ran after the holder's"
        );
        // Not behind anyone: whole.
        assert_eq!(
            backfill::behind_backfill(&peers, &mut None, since, end),
            Some(20_000_000)
        );
        // The backfiller has not said when its request ended.
        peers[1].set_backfill_busy();
        assert_eq!(
            backfill::behind_backfill(&peers, &mut Some(1), since, end),
            None
        );
    }

    /// `sampled` times device work only: ordering requests between samples
    /// are neither synchronised nor counted; a full grant announces its
    /// drain with an estimate before releasing; a segment whose work still
    /// runs is not closed when the guest pauses.
    #[test]
    fn sampled_counts_device_work_and_announces_its_drain() {
        let mut r = rig("work", Accounting::Sampled, IdleBehaviour::Poll);
        let d = r.file.slot(0).unwrap();
        assert!(!r.serve(Opcode::LaunchKernel));
        let seq = d.grant(Duration::from_secs(5).as_nanos() as u64, false);
        for _ in 0..SAMPLES {
            assert!(r.serve_async(Opcode::LaunchKernel));
            assert!(r.serve_async(Opcode::EventRecord));
        }
        // Each sample is synchronised before the next device work, not
        // before the guest's other calls: the last one is still running.
        assert_eq!(
            r.s.inner().syncs,
            SAMPLES - 1,
            "only the kernels are samples"
        );
        r.s.inner().busy = true;
        assert!(r.serve(Opcode::EventQuery));
        assert!(r.serve(Opcode::StreamSynchronize));
        assert_eq!(r.s.inner().syncs, SAMPLES - 1, "the sample still runs");
        // Bulk: the device still runs the segment, so neither a call the
        // guest waits for nor a pause of the guest closes it.
        assert!(r.serve_async(Opcode::LaunchKernel));
        assert_eq!(r.s.inner().syncs, SAMPLES, "the next work ends the sample");
        assert!(r.serve(Opcode::EventQuery));
        assert!(r.serve(Opcode::StreamSynchronize));
        assert_eq!(r.s.inner().syncs, SAMPLES);
        assert!(r.idle_pass().is_some());
        assert_eq!(r.s.inner().syncs, SAMPLES);
        r.s.inner().busy = false;
        r.idle_pass();
        assert_eq!(r.s.inner().syncs, SAMPLES + 1, "done: the segment closes");
        // A call the guest waits for, once the device is done, closes the
        // next segment at once (the guest's answer time is not charged).
        assert!(r.serve_async(Opcode::LaunchKernel));
        assert!(r.serve(Opcode::StreamSynchronize));
        assert_eq!(r.s.inner().syncs, SAMPLES + 2);
        assert_eq!(d.closing(), None, "no drain announced yet");
        assert_ne!(d.released(), seq);
        // Samples of 1 ms in a 50 ms slice: the bulk requests predicted to
        // fill it are issued, then the grant announces its drain, with an
        // estimate, and releases.
        let mut r = rig("drain", Accounting::Sampled, IdleBehaviour::Block);
        r.s.inner().sync_takes = Duration::from_millis(1);
        let d = r.file.slot(0).unwrap();
        assert!(!r.serve(Opcode::LaunchKernel));
        let seq = d.grant(50_000_000, false);
        let mut served = 0;
        while d.released() != seq {
            assert!(
                r.serve_async(Opcode::LaunchKernel),
                "the grant ended unannounced"
            );
            served += 1;
            assert!(served < 100, "the grant never filled");
        }
        let closing = d.closing().expect("the drain was announced");
        assert_eq!(closing.seq, seq);
        assert!(closing.estimate_ns >= 5_000_000, "{closing:?}");
        assert!(served > SAMPLES, "bulk requests were issued");
    }

    /// An a-priori grant (TimeGraph AE) issues no request its average
    /// predicts would overrun the slice; the same grant without the flag
    /// issues it (20 ms requests, a 50 ms slice: two fit, a third would
    /// end at 60 ms). The slice leaves room for a loaded machine's late
    /// wake-ups: the grant's wall-clock cap is one slice too.
    #[test]
    fn apriori_grants_issue_only_what_is_predicted_to_fit() {
        for apriori in [true, false] {
            let mut r = rig(
                &format!("apriori-{apriori}"),
                Accounting::Every,
                IdleBehaviour::Block,
            );
            r.s.inner().sync_takes = Duration::from_millis(20);
            let d = r.file.slot(0).unwrap();
            assert!(!r.serve_async(Opcode::LaunchKernel));
            let seq = d.grant_full(50_000_000, false, None, apriori);
            assert!(r.serve_async(Opcode::LaunchKernel));
            assert!(r.serve_async(Opcode::LaunchKernel));
            let third = r.serve_async(Opcode::LaunchKernel);
            assert_eq!(third, !apriori, "apriori {apriori}");
            if apriori {
                assert_eq!(d.released(), seq, "released instead");
                assert!(d.used_ns() < 50_000_000, "no overrun: {}", d.used_ns());
                // Its average request cost goes with the release.
                assert!(d.cost_ns() >= 20_000_000, "cost {}", d.cost_ns());
            }
        }
    }

    /// A measured grant the daemon revokes (a priority policy preempting
    /// its holder) ends before the next request, which waits for a grant.
    #[test]
    fn a_revoked_measured_grant_ends_at_the_next_request() {
        let mut r = rig("revoke", Accounting::Every, IdleBehaviour::Block);
        let d = r.file.slot(0).unwrap();
        assert!(!r.serve_async(Opcode::LaunchKernel));
        let seq = d.grant(6_000_000_000, false);
        assert!(r.serve_async(Opcode::LaunchKernel));
        assert!(r.serve_async(Opcode::LaunchKernel));
        d.revoke(seq);
        assert!(!r.serve_async(Opcode::LaunchKernel), "held back");
        assert_eq!(d.released(), seq);
        assert!(d.runnable(), "still has work");
        assert_eq!(r.s.inner().handled.len(), 2);
    }

    /// Samples that fill the slice end the grant, each charged once (the
    /// last one is synchronised when the next work arrives, and not again
    /// at the release). Two 1 ms samples, then one that takes the rest of
    /// a 100 ms slice: the slice is far from its wall-clock cap until the
    /// third sample, however late a loaded machine wakes the sleeps.
    #[test]
    fn samples_that_fill_the_slice_are_charged_once() {
        let mut r = rig("long", Accounting::Sampled, IdleBehaviour::Block);
        r.s.inner().sync_takes = Duration::from_millis(1);
        let d = r.file.slot(0).unwrap();
        assert!(!r.serve_async(Opcode::LaunchKernel));
        let seq = d.grant(100_000_000, false);
        for _ in 0..3 {
            assert!(r.serve_async(Opcode::LaunchKernel));
        }
        assert_eq!(r.s.inner().syncs, 2, "the third sample still runs");
        r.s.inner().sync_takes = Duration::from_millis(100);
        assert!(
            !r.serve_async(Opcode::LaunchKernel),
            "the third sample filled the slice"
        );
        assert_eq!(d.released(), seq);
        assert_eq!(r.s.inner().syncs, 3, "each sample synchronised once");
        assert!(d.used_ns() >= 102_000_000, "charged {} ns", d.used_ns());
    }

    #[test]
    fn sampled_does_not_charge_the_time_its_guest_takes_to_answer() {
        let mut r = rig("think", Accounting::Sampled, IdleBehaviour::Poll);
        let d = r.file.slot(0).unwrap();
        assert!(!r.serve(Opcode::LaunchKernel));
        let slice = Duration::from_millis(150);
        let seq = d.grant(slice.as_nanos() as u64, false);
        let granted = Instant::now();
        for _ in 0..SAMPLES {
            assert!(r.serve(Opcode::LaunchKernel));
        }
        assert_eq!(r.s.inner().syncs, SAMPLES);
        // A stretch of bulk work, then nothing to issue: it is closed.
        assert!(r.serve(Opcode::LaunchKernel));
        r.idle_pass();
        assert_eq!(r.s.inner().syncs, SAMPLES + 1);
        // The guest takes 60 ms to send its next request.
        std::thread::sleep(Duration::from_millis(60));
        assert!(r.serve(Opcode::LaunchKernel));
        r.idle_pass();
        assert_eq!(r.s.inner().syncs, SAMPLES + 2);
        while granted.elapsed() < slice {
            std::thread::sleep(Duration::from_millis(5));
        }
        r.idle_pass();
        assert_eq!(d.released(), seq);
        assert!(
            d.used_ns() < 30_000_000,
            "charged {} ns: the guest's 60 ms were charged",
            d.used_ns()
        );
    }

    /// Records quiet periods of `us` microseconds each.
    fn learned(gaps: &[u64]) -> SpinBudget {
        let mut b = SpinBudget::default();
        let t0 = Instant::now();
        for &us in gaps {
            b.quiet(t0);
            b.request(t0 + Duration::from_micros(us));
        }
        b
    }

    #[test]
    fn the_spin_budget_follows_the_quiet_periods() {
        let spin = Duration::from_micros(500);
        // Every fourth quiet period probes with the whole budget.
        let mut b = learned(&[900; 20]);
        let t0 = Instant::now();
        let mut budgets = Vec::new();
        for i in 0..8 {
            b.quiet(t0);
            budgets.push(b.budget(spin));
            b.request(t0 + Duration::from_micros(900 + i));
        }
        let probes = budgets.iter().filter(|&&d| d == spin).count();
        assert_eq!(probes, 2, "{budgets:?}");
        assert_eq!(budgets.iter().filter(|d| d.is_zero()).count(), 6);
        // Too little history: the configured budget.
        assert_eq!(learned(&[900; 7]).budget(spin), spin);
        // A guest that sleeps longer than the budget: yield at once.
        assert_eq!(learned(&[900; 20]).budget(spin), Duration::ZERO);
        // Past the budget but not by half: still spin.
        assert_eq!(learned(&[700; 20]).budget(spin), spin);
        // Mostly short, some long: the whole budget (a slow wake-up on a
        // loaded host must not lose the grant).
        let mut gaps = vec![80; 12];
        gaps.extend([2000; 8]);
        assert_eq!(learned(&gaps).budget(spin), spin);
        // Mostly long but not three in four: the whole budget still.
        let mut gaps = vec![80; 8];
        gaps.extend([2000; 12]);
        assert_eq!(learned(&gaps).budget(spin), spin);
        // Three in four long: yield at once.
        let mut gaps = vec![80; 5];
        gaps.extend([2000; 15]);
        assert_eq!(learned(&gaps).budget(spin), Duration::ZERO);
        // Only the last KEEP count: a guest that changed its pace.
        let mut change = vec![900; 40];
        change.extend([100; SpinBudget::KEEP]);
        assert_eq!(learned(&change).budget(spin), spin);
        let mut change = vec![100; 40];
        change.extend([900; SpinBudget::KEEP]);
        assert_eq!(learned(&change).budget(spin), Duration::ZERO);
        // A request with no quiet period before it records nothing.
        let mut b = learned(&[100; 8]);
        b.request(Instant::now());
        assert_eq!(b.gaps.len(), 8);
        // A quiet period keeps its first start however often it is seen.
        let mut b = SpinBudget::default();
        let t0 = Instant::now();
        b.quiet(t0);
        b.quiet(t0 + Duration::from_micros(300));
        b.request(t0 + Duration::from_micros(400));
        assert_eq!(b.gaps[0], 400_000);
    }
}
