//! A claimed channel: submit requests, wait for responses, move bulk data.

use std::hint::spin_loop;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fairgpu_protocol::cuda::{
    graph_step_allowed, graph_step_bytes, graph_steps, push_graph_step, MAX_GRAPH_STEPS,
};
use fairgpu_protocol::layout::{
    ChannelFailure, ChannelOffsets, Owner, CH_GUEST_GEN, CH_GUEST_SLEEPING, CH_GUEST_WAKE,
    CH_HOST_GEN, CH_HOST_STATE, CH_OWNER, CH_REQ_TAIL, CH_RESP_HEAD, DOORBELL_OFF, HEARTBEAT_OFF,
    HOST_SLEEPING_OFF,
};
use fairgpu_protocol::limits::REQUEST_ARGS;
use fairgpu_protocol::region::{RequestRing, ResponseRing};
use fairgpu_protocol::ring::{Consumer, Producer, PushError};
use fairgpu_protocol::wire::REQ_NEEDS_RESPONSE;
use fairgpu_protocol::{Opcode, Request, Status};

use crate::arena::ArenaAlloc;
use crate::futex;
use crate::region::GuestRegion;
pub use crate::wake::WaitMode;
use crate::WaitConfig;

/// How many bulk chunks may be in flight; each chunk is a quarter arena.
const BULK_WINDOW: usize = 3;
/// How long one block lasts before the waiter re-checks host liveness.
const BLOCK_SLICE: Duration = Duration::from_millis(20);
/// First sleep of the backoff used where the futex cannot block (a VM's
/// ivshmem BAR): doubled after each sleep of one wait, up to the maximum.
const BACKOFF_MIN: Duration = Duration::from_micros(20);
/// Longest sleep of that backoff: bounds how late a waiter notices a
/// response when nothing can interrupt it. Below the host's default spin
/// budget (200 µs), so that a guest in a call-after-call loop posts its next
/// request while the host still polls instead of making it block and ring
/// (measured under TCG: 1 ms here gave a 0.5 ms median round trip through
/// the doorbell, 100 µs gives 10 µs).
const BACKOFF_MAX: Duration = Duration::from_micros(100);
/// Longest a dropped channel waits for the host to finish its
/// fire-and-forget requests before it gives up (and leaves the channel
/// claimed: see [`Channel`]'s `Drop`).
const DROP_DRAIN_LIMIT: Duration = if cfg!(test) {
    Duration::from_millis(300)
} else {
    Duration::from_secs(10)
};

/// Why a call failed. Clone so a broken channel can repeat its cause.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The host executed the call and it failed.
    #[error("call failed: {0}")]
    Cuda(Status),
    /// This call succeeded but an earlier fire-and-forget call failed.
    #[error("an earlier asynchronous call failed: {0}")]
    Deferred(Status),
    /// The host stopped serving the channel.
    #[error("channel {channel} failed: {reason}")]
    ChannelFailed {
        /// Channel index.
        channel: u32,
        /// The host's reason, or "unknown state N".
        reason: String,
    },
    /// The host ended the channel because one of its kernels ran past the
    /// VM's limit on one request's device time (the runaway guard): every
    /// call fails with CUDA_ERROR_LAUNCH_TIMEOUT, as after a display
    /// watchdog's timeout.
    #[error(
        "channel {channel} failed: a kernel ran past the VM's limit on one request's device time"
    )]
    RunawayKernel {
        /// Channel index.
        channel: u32,
    },
    /// The host's heartbeat stopped.
    #[error("host unresponsive: no heartbeat for {0:?}")]
    HostGone(Duration),
    /// The host broke the protocol (corrupt indices, wrong call id).
    #[error("host protocol violation: {0}")]
    Protocol(String),
    /// The request cannot fit the arena or the ring.
    #[error("{len} bytes do not fit one arena slice of {max} bytes")]
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// Largest slice.
        max: u32,
    },
    /// A call that needs no in-flight responses was made with some pending.
    #[error("{0} responses still pending")]
    Busy(u32),
}

impl CallError {
    /// The CUresult a driver call reports for this error: the one mapping
    /// from transport errors to CUDA codes on the guest side.
    pub fn status(&self) -> Status {
        match self {
            CallError::Cuda(s) | CallError::Deferred(s) => *s,
            CallError::RunawayKernel { .. } => Status::LAUNCH_TIMEOUT,
            CallError::ChannelFailed { .. } | CallError::HostGone(_) | CallError::Protocol(_) => {
                Status::DEINITIALIZED
            }
            CallError::TooLarge { .. } => Status::INVALID_VALUE,
            CallError::Busy(_) => Status::UNKNOWN,
        }
    }

    fn is_fatal(&self) -> bool {
        matches!(
            self,
            CallError::ChannelFailed { .. }
                | CallError::RunawayKernel { .. }
                | CallError::HostGone(_)
                | CallError::Protocol(_)
        )
    }
}

/// What a successful call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Opcode-specific return values.
    pub vals: [u64; 5],
    /// Output bytes the host wrote into the arena slice.
    pub data_len: u32,
}

/// A submitted request the guest will wait for.
#[derive(Debug, Clone, Copy)]
struct Ticket {
    idx: u32,
    call_id: u64,
    arena_off: u32,
    /// Fire-and-forget requests submitted before this one.
    async_before: u64,
}

/// A channel this process owns. Dropping it releases the channel.
#[derive(Debug)]
pub struct Channel {
    region: Arc<GuestRegion>,
    index: u32,
    generation: u32,
    pid: u32,
    offs: ChannelOffsets,
    req: Producer<RequestRing>,
    resp: Consumer<ResponseRing>,
    arena: ArenaAlloc,
    next_call: u64,
    /// The process's call-id counter, for a channel that shares its host
    /// context with the process's other channels ([`Channel::share_call_ids`]).
    call_ids: Option<Arc<AtomicU64>>,
    in_flight: u32,
    vcpu: u32,
    cfg: WaitConfig,
    broken: Option<CallError>,
    heartbeat: (u64, Instant),
    /// Whether the host has reset the channel for this generation. Until it
    /// has, `host_state` still describes the previous owner's claim (a
    /// channel failed for it stays failed until the host sees our claim).
    host_reset: bool,
    /// An asynchronous error reported alongside a failing call, held for
    /// the next call.
    deferred: Option<Status>,
    /// Fire-and-forget requests submitted so far.
    async_sent: u64,
    /// Fire-and-forget requests whose errors a received response covered
    /// (the host reports them with its next response).
    async_covered: u64,
    /// How this channel blocks: the region's choice; switches once from
    /// `Futex` or `Interrupt` to `SleepBackoff` when the kernel refuses the
    /// futex or the interrupt eventfd fails.
    mode: WaitMode,
    stats: WaitStats,
    /// When waits give up (only while the channel is dropped).
    give_up_at: Option<Instant>,
    /// A graph launch being gathered ([`Channel::begin_batch`]): its
    /// steps' bytes, how many, and how many batches are open.
    batch: Vec<u8>,
    batch_steps: u64,
    batch_depth: u32,
}

/// How a channel's waits ended, since it was claimed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Times it published `guest_sleeping` and blocked (futex or interrupt).
    pub blocks: u64,
    /// Blocks that an interrupt ended (MSI-X path).
    pub interrupt_wakes: u64,
    /// Sleeps of the backoff.
    pub naps: u64,
}

impl Channel {
    /// How many channels of `region` are free now (a hint: others may
    /// claim or release meanwhile).
    pub fn free_channels(region: &GuestRegion) -> u32 {
        let layout = *region.layout();
        let view = region.view();
        (0..layout.channels())
            .filter(|&index| {
                let offs = layout.channel(index).expect("index < channels");
                // Relaxed: a count for a decision claim() makes again.
                let w = view
                    .atomic_u64(offs.at(CH_OWNER))
                    .expect("layout validated")
                    .load(Ordering::Relaxed);
                Owner::from_word(w).is_free()
            })
            .count() as u32
    }

    /// Claims a free channel (or one whose owner died) and waits for the
    /// host to reset it for us.
    pub fn claim(region: Arc<GuestRegion>, cfg: WaitConfig) -> Result<Channel, crate::OpenError> {
        let layout = *region.layout();
        let pid = std::process::id();
        let view = region.view();
        for index in 0..layout.channels() {
            let offs = layout.channel(index).expect("index < channels");
            let owner = view
                .atomic_u64(offs.at(CH_OWNER))
                .expect("layout validated");
            // Acquire: pairs with the Release half of a previous owner's
            // release (or claim) CAS, so its last index writes are visible.
            let mut seen = owner.load(Ordering::Acquire);
            let mine = loop {
                let cur = Owner::from_word(seen);
                if !(cur.is_free() || (cur.pid != pid && !pid_alive(cur.pid))) {
                    break None;
                }
                let generation = match cur.generation.wrapping_add(1) {
                    0 => 1,
                    g => g,
                };
                let mine = Owner { generation, pid };
                // AcqRel: Acquire as above; Release orders nothing yet (the
                // index resets are published by guest_gen). On failure,
                // look again at what changed (the host may just have freed
                // a dead owner's claim) instead of skipping the channel.
                match owner.compare_exchange(seen, mine.word(), Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => break Some(mine),
                    Err(now) => seen = now,
                }
            };
            let Some(mine) = mine else { continue };
            return Self::handshake(region.clone(), index, offs, mine, cfg);
        }
        Err(crate::OpenError::NoFreeChannel(layout.channels()))
    }

    fn handshake(
        region: Arc<GuestRegion>,
        index: u32,
        offs: ChannelOffsets,
        owner: Owner,
        cfg: WaitConfig,
    ) -> Result<Channel, crate::OpenError> {
        let view = region.view().clone();
        let layout = *region.layout();
        let region_mode = region.wake().mode;
        let irq = region.interrupts().cloned();
        let word = |rel| view.atomic_u32(offs.at(rel)).expect("layout validated");
        word(CH_REQ_TAIL).store(0, Ordering::Relaxed);
        word(CH_RESP_HEAD).store(0, Ordering::Relaxed);
        // Release: publishes the zeroed guest-side indices; pairs with the
        // host's Acquire load of guest_gen before it resets the channel.
        word(CH_GUEST_GEN).store(owner.generation, Ordering::Release);
        let mut ch = Channel {
            req: Producer::new(
                RequestRing::requests(&view, &layout, &offs).expect("layout validated"),
                0,
            ),
            resp: Consumer::new(
                ResponseRing::responses(&view, &layout, &offs).expect("layout validated"),
                0,
            ),
            arena: ArenaAlloc::new(layout.arena_size()),
            region,
            index,
            generation: owner.generation,
            pid: owner.pid,
            offs,
            next_call: 1,
            call_ids: None,
            in_flight: 0,
            vcpu: 0,
            cfg,
            broken: None,
            heartbeat: (0, Instant::now()),
            host_reset: false,
            deferred: None,
            async_sent: 0,
            async_covered: 0,
            mode: match region_mode {
                WaitMode::Interrupt if irq.is_none() => WaitMode::SleepBackoff,
                m => m,
            },
            stats: WaitStats::default(),
            give_up_at: None,
            batch: Vec::new(),
            batch_steps: 0,
            batch_depth: 0,
        };
        ch.heartbeat = (
            ch.region_u64(HEARTBEAT_OFF).load(Ordering::Relaxed),
            Instant::now(),
        );
        ch.ring_doorbell();
        let generation = owner.generation;
        let res = ch.wait(|c| {
            // Acquire: pairs with the host's Release store of host_gen after
            // it zeroed its indices and state for this generation.
            Ok((c.word(CH_HOST_GEN).load(Ordering::Acquire) == generation).then_some(()))
        });
        match res {
            Ok(()) => {
                ch.host_reset = true;
                Ok(ch)
            }
            Err(e) => {
                ch.release_owner();
                Err(crate::OpenError::Claim {
                    channel: index,
                    source: e,
                })
            }
        }
    }

    /// This channel's index in the region.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The generation of this claim.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Sets the vCPU (or thread) id stamped on requests.
    pub fn set_vcpu(&mut self, vcpu: u32) {
        self.vcpu = vcpu;
    }

    /// How this channel blocks after spinning.
    pub fn wait_mode(&self) -> WaitMode {
        self.mode
    }

    /// How this channel's waits ended so far.
    pub fn wait_stats(&self) -> WaitStats {
        self.stats
    }

    /// Largest arena slice one request can carry.
    pub fn max_slice(&self) -> u32 {
        self.arena.max_alloc()
    }

    fn word(&self, rel: usize) -> &AtomicU32 {
        self.region
            .view()
            .atomic_u32(self.offs.at(rel))
            .expect("layout validated")
    }

    fn region_u32(&self, off: usize) -> &AtomicU32 {
        self.region
            .view()
            .atomic_u32(off)
            .expect("layout validated")
    }

    fn region_u64(&self, off: usize) -> &AtomicU64 {
        self.region
            .view()
            .atomic_u64(off)
            .expect("layout validated")
    }

    /// A synchronous call without data.
    pub fn call(&mut self, op: Opcode, args: [u64; REQUEST_ARGS]) -> Result<Reply, CallError> {
        self.call_with(op, args, &[], &mut [])
    }

    /// A synchronous call: sends `input` in the arena, receives up to
    /// `output.len()` bytes back. Both must fit one arena slice.
    pub fn call_with(
        &mut self,
        op: Opcode,
        args: [u64; REQUEST_ARGS],
        input: &[u8],
        output: &mut [u8],
    ) -> Result<Reply, CallError> {
        self.sync_call(op, args, input, output, false)
    }

    /// As [`Channel::call_with`], for a call that must not consume the
    /// error of an earlier fire-and-forget request (taking printed output
    /// after a failed kernel): such an error is kept for the next call.
    pub fn call_with_keeping_errors(
        &mut self,
        op: Opcode,
        args: [u64; REQUEST_ARGS],
        input: &[u8],
        output: &mut [u8],
    ) -> Result<Reply, CallError> {
        self.check_usable()?;
        if self.in_flight != 0 {
            return Err(CallError::Busy(self.in_flight));
        }
        let t = self.submit(op, args, input, output.len(), true)?;
        self.complete_with(t, output, Deferred::Keep)
    }

    /// [`Channel::call_with`]; with `owns_deferred`, a fire-and-forget
    /// failure reported with the response is this call's own error.
    fn sync_call(
        &mut self,
        op: Opcode,
        args: [u64; REQUEST_ARGS],
        input: &[u8],
        output: &mut [u8],
        owns_deferred: bool,
    ) -> Result<Reply, CallError> {
        self.check_usable()?;
        if self.in_flight != 0 {
            return Err(CallError::Busy(self.in_flight));
        }
        let t = self.submit(op, args, input, output.len(), true)?;
        let mode = if owns_deferred {
            Deferred::Own
        } else {
            Deferred::Report
        };
        self.complete_with(t, output, mode)
    }

    /// A fire-and-forget call: returns once the request is in the ring. Its
    /// error, if any, is reported by the next synchronous call.
    pub fn call_async(
        &mut self,
        op: Opcode,
        args: [u64; REQUEST_ARGS],
        input: &[u8],
    ) -> Result<(), CallError> {
        self.check_usable()?;
        if self.batch_depth > 0 && graph_step_allowed(op) {
            let cap = self.chunk_size();
            let need = graph_step_bytes(input.len());
            if need <= cap {
                if self.batch.len() + need > cap || self.batch_steps == MAX_GRAPH_STEPS {
                    self.flush_batch()?;
                }
                push_graph_step(&mut self.batch, op, args, input);
                self.batch_steps += 1;
                return Ok(());
            }
        }
        self.submit(op, args, input, 0, false).map(|_| ())
    }

    /// From now until the matching [`Channel::end_batch`], the
    /// fire-and-forget requests a graph launch may carry
    /// (`fairgpu_protocol::cuda::graph_step_allowed`) are gathered into
    /// one `GraphLaunch` request instead of each taking a ring slot; any
    /// other request sends what was gathered first, so the host sees
    /// everything in the order it was issued. Batches nest.
    pub fn begin_batch(&mut self) {
        self.batch_depth += 1;
    }

    /// Ends a batch; the outermost sends what was gathered.
    pub fn end_batch(&mut self) -> Result<(), CallError> {
        self.batch_depth = self.batch_depth.saturating_sub(1);
        if self.batch_depth == 0 {
            self.flush_batch()
        } else {
            Ok(())
        }
    }

    /// Sends the gathered steps: one step as the request it is, more as
    /// one `GraphLaunch`.
    fn flush_batch(&mut self) -> Result<(), CallError> {
        if self.batch_steps == 0 {
            return Ok(());
        }
        let bytes = std::mem::take(&mut self.batch);
        let n = std::mem::replace(&mut self.batch_steps, 0);
        let r = if n == 1 {
            match graph_steps(&bytes, 1) {
                Ok(s) => self.submit(s[0].op, s[0].args, &bytes[s[0].data.clone()], 0, false),
                Err(why) => Err(CallError::Protocol(why.to_string())),
            }
        } else {
            let mut a = [0; REQUEST_ARGS];
            a[0] = n;
            self.submit(Opcode::GraphLaunch, a, &bytes, 0, false)
        };
        // Its capacity is kept for the next batch.
        self.batch = bytes;
        self.batch.clear();
        r.map(drop)
    }

    /// Sends `data` with `op`, split into pipelined chunks: `args[offset_arg]`
    /// is advanced by each chunk's offset. Every chunk but the last is
    /// fire-and-forget; the last is synchronous, so the call returns once the
    /// host has consumed everything, with the first chunk's error as this
    /// call's error (`CallError::Cuda`). An earlier fire-and-forget call's
    /// error is reported as `CallError::Deferred`, or held for the next call
    /// if this one fails too.
    pub fn send_bulk(
        &mut self,
        op: Opcode,
        args: [u64; REQUEST_ARGS],
        offset_arg: usize,
        data: &[u8],
    ) -> Result<Reply, CallError> {
        let chunk = self.chunk_size();
        if data.len() <= chunk {
            return self.call_with(op, args, data, &mut []);
        }
        self.check_usable()?;
        if self.in_flight != 0 {
            return Err(CallError::Busy(self.in_flight));
        }
        // The host reports only the first fire-and-forget failure since its
        // previous response. Collect earlier calls' failures first, so that
        // one reported with the last chunk is a chunk's: this call's own.
        if self.async_sent != self.async_covered {
            match self.call(Opcode::Nop, [0; REQUEST_ARGS]) {
                Ok(_) => {}
                Err(CallError::Deferred(s)) => self.deferred = Some(s),
                Err(e) => return Err(e),
            }
        }
        let mut chunks = data.chunks(chunk).enumerate().peekable();
        while let Some((i, piece)) = chunks.next() {
            let mut a = args;
            a[offset_arg] = a[offset_arg].wrapping_add((i * chunk) as u64);
            if chunks.peek().is_none() {
                return self.sync_call(op, a, piece, &mut [], true);
            }
            self.call_async(op, a, piece)?;
        }
        unreachable!("data longer than a chunk has a last chunk")
    }

    /// Receives `out.len()` bytes with `op`, split into chunks with up to
    /// three in flight: `args[offset_arg]` is advanced by each chunk's offset.
    pub fn recv_bulk(
        &mut self,
        op: Opcode,
        args: [u64; REQUEST_ARGS],
        offset_arg: usize,
        out: &mut [u8],
    ) -> Result<(), CallError> {
        self.check_usable()?;
        if self.in_flight != 0 {
            return Err(CallError::Busy(self.in_flight));
        }
        let chunk = self.chunk_size();
        let total = out.len().div_ceil(chunk);
        let mut pending = std::collections::VecDeque::new();
        let mut first_err = None;
        let mut next = 0;
        while next < total || !pending.is_empty() {
            while next < total && pending.len() < BULK_WINDOW && first_err.is_none() {
                let len = chunk.min(out.len() - next * chunk);
                let mut a = args;
                a[offset_arg] = a[offset_arg].wrapping_add((next * chunk) as u64);
                pending.push_back((self.submit(op, a, &[], len, true)?, next));
                next += 1;
            }
            let Some((t, i)) = pending.pop_front() else {
                break;
            };
            let start = i * chunk;
            let end = (start + chunk).min(out.len());
            match self.complete_with(t, &mut out[start..end], Deferred::Report) {
                Ok(_) => {}
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => {
                    first_err.get_or_insert(e);
                    next = total; // submit no more; drain what is in flight
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn chunk_size(&self) -> usize {
        (self.arena.max_alloc() / (BULK_WINDOW as u32 + 1)) as usize
    }

    fn check_usable(&self) -> Result<(), CallError> {
        match &self.broken {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: CallError) -> CallError {
        if e.is_fatal() {
            self.broken = Some(e.clone());
        }
        e
    }

    /// Puts one request in the ring.
    fn submit(
        &mut self,
        op: Opcode,
        args: [u64; REQUEST_ARGS],
        input: &[u8],
        out_len: usize,
        needs_response: bool,
    ) -> Result<Ticket, CallError> {
        // What a graph launch gathered goes first.
        self.flush_batch()?;
        let len = input.len().max(out_len);
        if len > self.arena.max_alloc() as usize {
            return Err(CallError::TooLarge {
                len,
                max: self.arena.max_alloc(),
            });
        }
        let len = len as u32;
        let idx = self.req.tail();
        let off = match self.arena.alloc(len, idx, needs_response) {
            Some(off) => off,
            None => self.wait(|c| {
                let head = c
                    .req
                    .refresh_head()
                    .map_err(|e| CallError::Protocol(e.to_string()))?;
                c.arena.reclaim(head);
                Ok(c.arena.alloc(len, idx, needs_response))
            })?,
        };
        if !input.is_empty() {
            let base = self.offs.arena + off as usize;
            self.region
                .view()
                .write_bytes(base, input)
                .expect("arena slice within layout");
        }
        let call_id = match &self.call_ids {
            // Relaxed: what orders the ids is the counter's single
            // modification order: a request published before another
            // thread's (ordered by the guest's own synchronization) took
            // its id from an earlier value, and the host reads the ids
            // from the rings, whose Release/Acquire pairing publishes them.
            Some(ids) => ids.fetch_add(1, Ordering::Relaxed),
            None => {
                let id = self.next_call;
                self.next_call += 1;
                id
            }
        };
        let req = Request {
            opcode: op as u16,
            flags: if needs_response {
                REQ_NEEDS_RESPONSE
            } else {
                0
            },
            vcpu: self.vcpu,
            call_id,
            arena_off: off,
            arena_len: len,
            args,
        };
        match self.req.try_push(&req) {
            Ok(()) => {}
            Err(PushError::Full) => self.wait(|c| match c.req.try_push(&req) {
                Ok(()) => Ok(Some(())),
                Err(PushError::Full) => Ok(None),
                Err(PushError::Corrupt(e)) => Err(CallError::Protocol(e.to_string())),
            })?,
            Err(PushError::Corrupt(e)) => return Err(self.fail(CallError::Protocol(e.to_string()))),
        }
        let async_before = self.async_sent;
        if needs_response {
            self.in_flight += 1;
        } else {
            self.async_sent += 1;
        }
        self.ring_doorbell();
        Ok(Ticket {
            idx,
            call_id,
            arena_off: off,
            async_before,
        })
    }

    /// Takes this channel's call ids from `ids`, a counter every channel
    /// of the process that shares one host context uses (start it at 1):
    /// the host serves such channels' requests in the order of their ids,
    /// so that a request issued after another thread's runs after it.
    pub fn share_call_ids(&mut self, ids: Arc<AtomicU64>) {
        self.call_ids = Some(ids);
    }

    /// Waits for the response to `t` and copies its output. With
    /// `owns_deferred`, a fire-and-forget failure the response reports is
    /// this call's own error.
    fn complete_with(
        &mut self,
        t: Ticket,
        output: &mut [u8],
        mode: Deferred,
    ) -> Result<Reply, CallError> {
        let mut resp =
            self.wait(|c| c.resp.pop().map_err(|e| CallError::Protocol(e.to_string())))?;
        self.in_flight -= 1;
        self.async_covered = self.async_covered.max(t.async_before);
        match mode {
            Deferred::Own if resp.deferred != 0 => {
                // The first failure: an earlier chunk's, before this one's.
                resp.status = resp.deferred;
                resp.deferred = 0;
            }
            Deferred::Keep if resp.deferred != 0 => {
                if self.deferred.is_none() {
                    self.deferred = Some(Status(resp.deferred));
                }
                resp.deferred = 0;
            }
            _ => {}
        }
        let res = self.finish(t, resp, output, mode != Deferred::Keep);
        self.arena.responded(t.idx);
        self.arena
            .reclaim(self.req.refresh_head().unwrap_or(self.req.tail()));
        res
    }

    fn finish(
        &mut self,
        t: Ticket,
        resp: fairgpu_protocol::Response,
        output: &mut [u8],
        report_deferred: bool,
    ) -> Result<Reply, CallError> {
        // Responses come in request order, so this must answer `t`.
        if resp.call_id != t.call_id {
            return Err(self.fail(CallError::Protocol(format!(
                "response for call {} while waiting for call {}",
                resp.call_id, t.call_id
            ))));
        }
        let data_len = resp.arena_len.min(output.len() as u32);
        if data_len > 0 {
            let base = self.offs.arena + t.arena_off as usize;
            self.region
                .view()
                .read_bytes(base, &mut output[..data_len as usize])
                .expect("arena slice within layout");
        }
        if resp.status != 0 {
            // Both failed: report this call's error now and keep the earlier
            // asynchronous one for the next call, so neither is lost.
            if resp.deferred != 0 && self.deferred.is_none() {
                self.deferred = Some(Status(resp.deferred));
            }
            return Err(CallError::Cuda(Status(resp.status)));
        }
        if report_deferred {
            if let Some(s) = self
                .deferred
                .take()
                .or((resp.deferred != 0).then_some(Status(resp.deferred)))
            {
                return Err(CallError::Deferred(s));
            }
        }
        Ok(Reply {
            vals: resp.vals,
            data_len,
        })
    }

    /// Tells the host there is work, if it is asleep.
    fn ring_doorbell(&self) {
        // SeqCst fence: Dekker pairing with the host's store of host_sleeping
        // followed by its own SeqCst fence and re-check of every channel:
        // either it sees our new tail, or we see it sleeping and wake it.
        fence(Ordering::SeqCst);
        if self.region_u32(HOST_SLEEPING_OFF).load(Ordering::Relaxed) != 0 {
            let bell = self.region_u32(DOORBELL_OFF);
            // Release: orders nothing the host reads through the bell, but
            // makes the futex value change visible before the wake.
            bell.fetch_add(1, Ordering::Release);
            match self.region.doorbell() {
                // In a VM the host's futex is out of reach: ring the device's
                // Doorbell; the host's ivshmem server turns the eventfd it
                // signals into the futex wake.
                Some(reg) => reg.ring_host(0),
                None => futex::wake(bell, 1),
            }
        }
    }

    /// Hybrid wait: spin on `poll` for the configured budget, then block on
    /// this channel's wake word, re-checking host state and heartbeat.
    /// Where the futex cannot block (see [`WaitMode::SleepBackoff`]), sleep
    /// with a bounded backoff instead.
    fn wait<T>(
        &mut self,
        mut poll: impl FnMut(&mut Self) -> Result<Option<T>, CallError>,
    ) -> Result<T, CallError> {
        let start = Instant::now();
        let mut spins = 0u32;
        let mut nap = BACKOFF_MIN;
        loop {
            match poll(self) {
                Ok(Some(v)) => return Ok(v),
                Ok(None) => {}
                Err(e) => return Err(self.fail(e)),
            }
            spins = spins.wrapping_add(1);
            // The clock is read every 128 polls; a zero budget blocks at once.
            let spinning = !self.cfg.spin.is_zero()
                && (!spins.is_multiple_of(128) || start.elapsed() < self.cfg.spin);
            if spinning {
                spin_loop();
                if spins.is_multiple_of(1024) {
                    self.check_host_state()?;
                }
                continue;
            }
            self.check_host_state()?;
            if self.mode == WaitMode::SleepBackoff {
                // Nothing can wake us early, so guest_sleeping stays 0: the
                // host need not try. Poll again after the nap.
                std::thread::sleep(nap);
                self.stats.naps += 1;
                nap = (nap * 2).min(BACKOFF_MAX);
                self.check_heartbeat()?;
                continue;
            }
            // What the wake will change, read before publishing that we
            // sleep: a wake after this point moves it, and the block below
            // returns at once.
            let irq = match self.mode {
                WaitMode::Interrupt => self.region.interrupts().cloned(),
                _ => None,
            };
            let seen = match &irq {
                Some(irq) => irq.epoch(),
                None => u64::from(self.word(CH_GUEST_WAKE).load(Ordering::Acquire)),
            };
            self.word(CH_GUEST_SLEEPING).store(1, Ordering::Relaxed);
            // SeqCst fence: Dekker pairing with the host's fence between
            // publishing a response (or head) and reading guest_sleeping.
            // The same on every path: the host reads guest_sleeping, then
            // bumps guest_wake and wakes the futex, and (in a VM) raises
            // MSI-X vector 1 through its notifier.
            fence(Ordering::SeqCst);
            let again = poll(self);
            if matches!(again, Ok(None)) {
                // A failure published just before our fence is seen here,
                // not after the block.
                if let Err(e) = self.check_host_state() {
                    self.word(CH_GUEST_SLEEPING).store(0, Ordering::Relaxed);
                    return Err(e);
                }
            } else {
                self.word(CH_GUEST_SLEEPING).store(0, Ordering::Relaxed);
                match again {
                    Ok(Some(v)) => return Ok(v),
                    Err(e) => return Err(self.fail(e)),
                    Ok(None) => unreachable!(),
                }
            }
            self.stats.blocks += 1;
            match &irq {
                Some(irq) => match irq.wait_past(seen, BLOCK_SLICE) {
                    Ok(true) => self.stats.interrupt_wakes += 1,
                    Ok(false) => {}
                    // The eventfd broke: from now on, sleep.
                    Err(_) => self.mode = WaitMode::SleepBackoff,
                },
                None => {
                    if futex::try_wait(self.word(CH_GUEST_WAKE), seen as u32, BLOCK_SLICE).is_err()
                    {
                        // Returned at once without blocking: from now on, sleep.
                        self.mode = WaitMode::SleepBackoff;
                    }
                }
            }
            self.word(CH_GUEST_SLEEPING).store(0, Ordering::Relaxed);
            self.check_heartbeat()?;
        }
    }

    /// Fails the wait when the host failed the channel, when the claim is
    /// no longer ours (the host released it: in a VM, when QEMU left; it
    /// will not answer any more), or when a dropped channel's wait is over
    /// its time.
    fn check_host_state(&mut self) -> Result<(), CallError> {
        if !self.host_reset {
            return Ok(());
        }
        let state = self.word(CH_HOST_STATE).load(Ordering::Acquire);
        if state == ChannelFailure::RunawayKernel as u32 {
            return Err(self.fail(CallError::RunawayKernel {
                channel: self.index,
            }));
        }
        if state != 0 {
            let reason = ChannelFailure::from_state(state)
                .map_or_else(|| format!("unknown state {state}"), |f| f.to_string());
            return Err(self.fail(CallError::ChannelFailed {
                channel: self.index,
                reason,
            }));
        }
        if !self.claim_held() {
            return Err(self.fail(CallError::ChannelFailed {
                channel: self.index,
                reason: "its claim was released by the host".into(),
            }));
        }
        if self.give_up_at.is_some_and(|t| Instant::now() >= t) {
            return Err(self.fail(CallError::ChannelFailed {
                channel: self.index,
                reason: format!(
                    "no answer within {DROP_DRAIN_LIMIT:?} while the channel was released"
                ),
            }));
        }
        Ok(())
    }

    /// Whether the owner word still holds this claim (pid and generation).
    fn claim_held(&self) -> bool {
        let owner = self
            .region
            .view()
            .atomic_u64(self.offs.at(CH_OWNER))
            .expect("layout validated");
        // Relaxed: only compared; nothing is read on the strength of it.
        owner.load(Ordering::Relaxed) == self.owner().word()
    }

    fn owner(&self) -> Owner {
        Owner {
            generation: self.generation,
            pid: self.pid,
        }
    }

    fn check_heartbeat(&mut self) -> Result<(), CallError> {
        let Some(limit) = self.cfg.host_timeout else {
            return Ok(());
        };
        let hb = self.region_u64(HEARTBEAT_OFF).load(Ordering::Relaxed);
        if hb != self.heartbeat.0 {
            self.heartbeat = (hb, Instant::now());
            return Ok(());
        }
        let quiet = self.heartbeat.1.elapsed();
        if quiet > limit {
            return Err(self.fail(CallError::HostGone(quiet)));
        }
        Ok(())
    }

    fn release_owner(&self) {
        let owner = self
            .region
            .view()
            .atomic_u64(self.offs.at(CH_OWNER))
            .expect("layout validated");
        let mine = self.owner();
        let free = Owner {
            generation: self.generation,
            pid: 0,
        };
        // Release: everything we did with the channel happens before the
        // next claimant's Acquire of the owner word. A failed CAS means a
        // reclaimer already took it; then it is not ours to free.
        let _ = owner.compare_exchange(
            mine.word(),
            free.word(),
            Ordering::Release,
            Ordering::Relaxed,
        );
    }
}

/// Dropping a channel drains its fire-and-forget requests (a no-op call,
/// answered once the host has executed everything before it) so the host is
/// idle on it before anyone else can claim it, then releases the claim.
/// The drain is skipped when no answer can come: the channel is broken,
/// the host failed it, or the claim is no longer ours (the host released
/// it). The drain gives up after [`DROP_DRAIN_LIMIT`]; the claim is then
/// left in place, since the host may still be executing this channel's
/// requests, and is reclaimed once this process has exited.
impl Drop for Channel {
    fn drop(&mut self) {
        let mut release = true;
        if self.broken.is_none() && self.in_flight == 0 && self.req.tail() != 0 {
            let serving = self.host_reset
                && self.word(CH_HOST_STATE).load(Ordering::Acquire) == 0
                && self.claim_held();
            if serving {
                self.give_up_at = Some(Instant::now() + DROP_DRAIN_LIMIT);
                let drained = self.call(Opcode::Nop, [0; REQUEST_ARGS]);
                let timed_out = self.give_up_at.is_some_and(|t| Instant::now() >= t);
                release = drained.is_ok() || !timed_out;
            }
        }
        if release {
            self.release_owner();
        }
    }
}

/// Whether process `pid` exists (in this process's pid namespace).
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: kill with signal 0 performs only the existence and permission
    // check; it sends nothing.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 {
        return std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
    }
    // A zombie has exited; only its exit status waits to be collected.
    !is_zombie(pid)
}

fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Format: "pid (comm) S ..."; comm may contain spaces and parentheses,
    // so the state is the first field after the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .is_some_and(|state| state == "Z" || state == "X")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map::Mapping;
    use crate::wake::WaitPreference;
    use fairgpu_protocol::layout::{Layout, CH_REQ_TAIL, MAGIC};
    use fairgpu_protocol::region::RegionView;
    use fairgpu_protocol::RegionConfig;
    use std::path::PathBuf;
    use std::sync::mpsc;

    /// A one-channel region in a file with a host that only completes the
    /// claim handshake and never answers a request.
    struct SilentHost {
        path: PathBuf,
        view: RegionView,
        offs: ChannelOffsets,
        _map: Arc<Mapping>,
    }

    impl SilentHost {
        fn new(test: &str) -> SilentHost {
            let cfg = RegionConfig {
                channels: 1,
                features: 0,
                ..RegionConfig::default()
            };
            let layout = Layout::new(&cfg).expect("a valid layout");
            let path =
                std::env::temp_dir().join(format!("fairgpu-channel-{}-{test}", std::process::id()));
            let map = Mapping::create(&path, layout.region_size()).expect("creating the region");
            let view = map.view();
            let mut header = layout.header();
            header.magic = 0;
            view.write_obj(0, &header).expect("writing the header");
            view.atomic_u64(0).unwrap().store(MAGIC, Ordering::Release);
            let offs = layout.channel(0).unwrap();
            SilentHost {
                path,
                view,
                offs,
                _map: map,
            }
        }

        fn u32_at(&self, rel: usize) -> &AtomicU32 {
            self.view.atomic_u32(self.offs.at(rel)).unwrap()
        }

        fn owner(&self) -> Owner {
            Owner::from_word(
                self.view
                    .atomic_u64(self.offs.at(CH_OWNER))
                    .unwrap()
                    .load(Ordering::Acquire),
            )
        }

        /// Claims the channel, answering the handshake from a thread, and
        /// leaves one fire-and-forget request in its ring (so that a drop
        /// drains).
        fn claim(&self) -> Channel {
            let region = crate::GuestRegion::open_with(&self.path, WaitPreference::SleepBackoff)
                .expect("opening the region");
            let handshake = {
                let view = self.view.clone();
                let offs = self.offs;
                std::thread::spawn(move || {
                    let guest_gen = view.atomic_u32(offs.at(CH_GUEST_GEN)).unwrap();
                    let deadline = Instant::now() + Duration::from_secs(30);
                    loop {
                        let g = guest_gen.load(Ordering::Acquire);
                        if g != 0 {
                            view.atomic_u32(offs.at(CH_HOST_GEN))
                                .unwrap()
                                .store(g, Ordering::Release);
                            return;
                        }
                        assert!(Instant::now() < deadline, "no claim within 30 s");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            };
            let cfg = WaitConfig {
                spin: Duration::from_micros(50),
                host_timeout: None,
            };
            let mut ch = Channel::claim(region, cfg).expect("claiming the channel");
            handshake.join().expect("the handshake thread");
            ch.call_async(Opcode::Nop, [0; REQUEST_ARGS], &[])
                .expect("a fire-and-forget call");
            assert_eq!(self.u32_at(CH_REQ_TAIL).load(Ordering::Acquire), 1);
            ch
        }

        /// Frees the claim as the daemon does when a VM's QEMU leaves.
        fn release_claim(&self) {
            let owner = self.view.atomic_u64(self.offs.at(CH_OWNER)).unwrap();
            let mut o = Owner::from_word(owner.load(Ordering::Acquire));
            o.pid = 0;
            owner.store(o.word(), Ordering::Release);
        }
    }

    impl Drop for SilentHost {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Runs `f` on a thread; panics if it has not returned within a minute
    /// (the bug it guards against is a wait that never ends).
    fn returns<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{what} did not return"))
    }

    #[test]
    fn a_released_claim_fails_calls_and_is_dropped_without_a_drain() {
        let host = SilentHost::new("released");
        let mut ch = host.claim();
        let generation = ch.generation();
        host.release_claim();
        let (ch, res) = returns("a call on a released claim", move || {
            let r = ch.call(Opcode::Nop, [1, 0, 0, 0, 0]);
            (ch, r)
        });
        match res {
            Err(CallError::ChannelFailed { reason, .. }) => {
                assert!(reason.contains("released"), "{reason}")
            }
            other => panic!("a call on a released claim returned {other:?}"),
        }
        // That call's request is in the ring; the drop adds none.
        assert_eq!(host.u32_at(CH_REQ_TAIL).load(Ordering::Acquire), 2);
        returns("dropping the channel", move || drop(ch));
        assert_eq!(host.u32_at(CH_REQ_TAIL).load(Ordering::Acquire), 2);
        let owner = host.owner();
        assert!(
            owner.is_free() && owner.generation == generation,
            "{owner:?}"
        );
    }

    #[test]
    fn a_channel_released_before_its_drop_submits_no_drain() {
        let host = SilentHost::new("released-drop");
        let ch = host.claim();
        host.release_claim();
        returns("dropping the channel", move || drop(ch));
        assert_eq!(
            host.u32_at(CH_REQ_TAIL).load(Ordering::Acquire),
            1,
            "the drop submitted a drain on a claim that is not its own"
        );
    }

    #[test]
    fn a_failed_channel_is_released_without_a_drain() {
        let host = SilentHost::new("failed");
        let ch = host.claim();
        let generation = ch.generation();
        host.u32_at(CH_HOST_STATE)
            .store(ChannelFailure::WorkerCrashed as u32, Ordering::Release);
        returns("dropping the channel", move || drop(ch));
        assert_eq!(host.u32_at(CH_REQ_TAIL).load(Ordering::Acquire), 1);
        let owner = host.owner();
        assert!(
            owner.is_free() && owner.generation == generation,
            "{owner:?}"
        );
    }

    #[test]
    fn a_drain_the_host_never_answers_gives_up_and_keeps_the_claim() {
        let host = SilentHost::new("silent");
        let ch = host.claim();
        let mine = Owner {
            generation: ch.generation(),
            pid: std::process::id(),
        };
        returns("dropping the channel", move || drop(ch));
        // The drain was submitted, never answered, and given up on; the
        // host may still be executing, so the claim stays until this
        // process exits.
        assert_eq!(host.u32_at(CH_REQ_TAIL).load(Ordering::Acquire), 2);
        assert_eq!(host.owner(), mine);
    }

    #[test]
    fn pid_liveness_treats_zombies_as_dead() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(0));
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawning true");
        let pid = child.id();
        // Not reaped yet: once it exits it is a zombie.
        let deadline = Instant::now() + Duration::from_secs(10);
        while pid_alive(pid) {
            assert!(
                Instant::now() < deadline,
                "child {pid} still alive after 10 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        child.wait().expect("reaping");
        assert!(!pid_alive(pid));
    }
}

/// What a synchronous call does with the first failure of earlier
/// fire-and-forget requests that its response reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deferred {
    /// Returns it as [`CallError::Deferred`] (the usual case).
    Report,
    /// Treats it as this call's own error (the last chunk of a bulk send).
    Own,
    /// Keeps it for the next call, which reports it.
    Keep,
}
