//! The host side of the transport: create a region, serve every channel's
//! request ring, dispatch by opcode, answer.
//!
//! One [`Server`] serves one region from one thread. Per channel it keeps the
//! authoritative ring indices privately, copies each descriptor out once,
//! validates it, executes it through a [`Handler`], and answers. A channel
//! whose indices are corrupt is failed (its `host_state` says why, its guest
//! is woken); the other channels and the server carry on.
//!
//! A handler may hold a request back ([`Handler::may_issue`], for the GPU
//! scheduler: only the holder of the grant issues GPU work). The request
//! then stays at the head of its ring, unconsumed, and its channel is
//! served no further until a later pass admits it (requests of one channel
//! are served in order); the other channels carry on. The server tells the
//! handler after every pass what it saw ([`Handler::poll`]) and never
//! blocks longer than the handler asks.

use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fairgpu_frontend::channel::pid_alive;
use fairgpu_frontend::futex;
use fairgpu_frontend::map::Mapping;
use fairgpu_protocol::layout::{
    ChannelFailure, ChannelOffsets, Layout, Owner, RegionConfig, CH_GUEST_GEN, CH_GUEST_SLEEPING,
    CH_GUEST_WAKE, CH_HOST_GEN, CH_HOST_STATE, CH_OWNER, CH_REQ_HEAD, CH_RESP_TAIL, DOORBELL_OFF,
    FEATURE_LOCAL_OWNERS, HEARTBEAT_MS, HEARTBEAT_OFF, HOST_SLEEPING_OFF, MAGIC,
};
use fairgpu_protocol::region::{OutOfBounds, RegionView, RequestRing, ResponseRing};
use fairgpu_protocol::ring::{Consumer, Producer, PushError};
use fairgpu_protocol::wire::{ValidRequest, REQ_NEEDS_RESPONSE};
use fairgpu_protocol::{Response, Status};

/// Most requests served from one channel before moving to the next, so one
/// busy guest cannot starve the others' rings.
const BATCH: usize = 32;
/// How often dead owners are looked for.
const REAP_EVERY: Duration = Duration::from_millis(100);
/// Longest single block before the loop re-checks shutdown and owners.
const BLOCK_SLICE: Duration = Duration::from_millis(50);

/// Why the host side could not start.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The configuration asks for an invalid layout.
    #[error("invalid region configuration")]
    Layout(#[from] fairgpu_protocol::layout::LayoutError),
    /// The region file could not be created or mapped.
    #[error("cannot create region {path}")]
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The mapping is smaller than the layout (cannot happen for files we create).
    #[error("region mapping too small")]
    Bounds(#[from] OutOfBounds),
    /// An existing region file could not be mapped.
    #[error("cannot map region {path}")]
    Attach {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An existing region file is smaller than the configured layout.
    #[error("region {path} has {mapped} bytes but the configured layout needs {needed}")]
    TooSmall {
        /// The file.
        path: PathBuf,
        /// Bytes mapped.
        mapped: usize,
        /// Bytes the layout needs.
        needed: usize,
    },
}

/// Told the index of every channel whose sleeping guest the host side just
/// woke, after the futex wake: the hook for guests the futex cannot reach
/// (a VM, where the daemon raises the guest's ivshmem interrupt instead).
/// Called from the serving thread and from other host threads (the
/// scheduler, the supervisor), so it must be quick and must not block.
pub type GuestNotifier = Arc<dyn Fn(u32) + Send + Sync>;

/// An optional [`GuestNotifier`] that can be printed.
#[derive(Clone, Default)]
struct Notify(Option<GuestNotifier>);

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Some(GuestNotifier)"
        } else {
            "None"
        })
    }
}

/// A region on the host side: created here (the file is removed when it is
/// dropped) or attached to (the file is left alone).
#[derive(Debug)]
pub struct HostRegion {
    view: RegionView,
    layout: Layout,
    path: PathBuf,
    owns_file: bool,
    notify: Notify,
}

impl HostRegion {
    /// Creates the region file at `path`, writes the header (magic last) and
    /// maps it.
    pub fn create(path: &Path, cfg: &RegionConfig) -> Result<HostRegion, HostError> {
        let layout = Layout::new(cfg)?;
        let map =
            Mapping::create(path, layout.region_size()).map_err(|source| HostError::Create {
                path: path.to_owned(),
                source,
            })?;
        let view = map.view();
        let mut header = layout.header();
        header.magic = 0;
        view.write_obj(0, &header)?;
        // Release: publishes every header field written above; pairs with
        // the guest's Acquire load of the magic in GuestRegion::open.
        view.atomic_u64(0)?.store(MAGIC, Ordering::Release);
        Ok(HostRegion {
            view,
            layout,
            path: path.to_owned(),
            owns_file: true,
            notify: Notify::default(),
        })
    }

    /// Writes a new region (header, magic last) into the existing file at
    /// `path` and maps it: a zero-filled file at least as large as the
    /// layout that the caller owns and keeps (a sealed memfd, through
    /// `/proc/self/fd/N`). The file is not removed on drop.
    pub fn format(path: &Path, cfg: &RegionConfig) -> Result<HostRegion, HostError> {
        let mut region = Self::attach(path, cfg)?;
        let mut header = region.layout.header();
        header.magic = 0;
        region.view.write_obj(0, &header)?;
        // Release: publishes every header field written above; pairs with
        // the guest's Acquire load of the magic in GuestRegion::open.
        region.view.atomic_u64(0)?.store(MAGIC, Ordering::Release);
        region.owns_file = false;
        Ok(region)
    }

    /// Maps a region another process created (a worker attaching to the
    /// region its daemon created). The layout comes from `cfg`, the same
    /// configuration the creator used; the header in the region is never
    /// read, since a guest can write it. The file is not removed on drop.
    pub fn attach(path: &Path, cfg: &RegionConfig) -> Result<HostRegion, HostError> {
        let layout = Layout::new(cfg)?;
        let map = Mapping::open(path).map_err(|source| HostError::Attach {
            path: path.to_owned(),
            source,
        })?;
        if map.len() < layout.region_size() {
            return Err(HostError::TooSmall {
                path: path.to_owned(),
                mapped: map.len(),
                needed: layout.region_size(),
            });
        }
        Ok(HostRegion {
            view: map.view(),
            layout,
            path: path.to_owned(),
            owns_file: false,
            notify: Notify::default(),
        })
    }

    /// Calls `notifier` with the channel index whenever a sleeping guest of
    /// this region is woken: by the server answering or failing it, by
    /// [`HostRegion::fail_established`], and by [`RegionBells::wake_guests`]
    /// of bells taken afterwards. The futex wake still happens first.
    pub fn with_guest_notifier(mut self, notifier: GuestNotifier) -> Self {
        self.notify = Notify(Some(notifier));
        self
    }

    /// Fails every established channel (claimed, and reset by a host for
    /// its owner's generation) with `why` and wakes its guest, as
    /// `Server::fail` does. For the daemon, after the worker serving this
    /// region died: nothing else on the host side may be serving it.
    /// Returns how many channels were failed.
    pub fn fail_established(&self, why: ChannelFailure) -> u32 {
        let mut failed = 0;
        for index in 0..self.layout.channels() {
            let offs = self.layout.channel(index).expect("index < channels");
            let owner = Owner::from_word(
                // Acquire: pairs with the guest's claim/release CAS.
                self.view
                    .atomic_u64(offs.at(CH_OWNER))
                    .expect("layout validated")
                    .load(Ordering::Acquire),
            );
            let word = |rel| {
                self.view
                    .atomic_u32(offs.at(rel))
                    .expect("layout validated")
            };
            // Relaxed: host_gen is only ever written by the host side, and
            // the writer (the dead worker) has been reaped.
            if owner.is_free() || word(CH_HOST_GEN).load(Ordering::Relaxed) != owner.generation {
                continue;
            }
            // A channel the worker failed itself keeps its reason (a
            // runaway kernel's channel). Relaxed: only the host side
            // writes host_state, and the writer has been reaped.
            if word(CH_HOST_STATE).load(Ordering::Relaxed) != 0 {
                continue;
            }
            // Release: pairs with the guest's Acquire load of host_state.
            word(CH_HOST_STATE).store(why as u32, Ordering::Release);
            wake_channel_guest(&self.view, &offs, index, &self.notify);
            failed += 1;
        }
        failed
    }

    /// The region's wake-ups, for another thread.
    pub fn bells(&self) -> RegionBells {
        RegionBells {
            view: self.view.clone(),
            layout: self.layout,
            notify: self.notify.clone(),
        }
    }

    /// The layout the host created (never re-read from the region).
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The region file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole region.
    pub fn view(&self) -> &RegionView {
        &self.view
    }

    /// Bytes `range` of channel `ch`'s arena, as a handler sees a request's
    /// data (for tools and fuzzing that drive a handler directly); `None`
    /// if the channel or the range is not in the region.
    pub fn arena_slice(&self, ch: u32, range: std::ops::Range<u32>) -> Option<ArenaSlice<'_>> {
        let offs = self.layout.channel(ch)?;
        if range.start > range.end || range.end > self.layout.arena_size() {
            return None;
        }
        Some(ArenaSlice::region(
            &self.view,
            offs.arena + range.start as usize,
            range.len(),
        ))
    }
}

impl Drop for HostRegion {
    fn drop(&mut self) {
        if self.owns_file {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The region's wake-ups, for threads other than its server's: the GPU
/// scheduler rings the host doorbell after a grant and wakes the guests of
/// an interactive VM (GPU-centric co-scheduling). Keeps the mapping alive.
#[derive(Debug, Clone)]
pub struct RegionBells {
    view: RegionView,
    layout: Layout,
    notify: Notify,
}

impl RegionBells {
    /// Wakes the region's server if it blocks on the doorbell. Every store
    /// made before the call (a grant) is visible to the server's re-check.
    pub fn ring_host(&self) {
        let bell = self
            .view
            .atomic_u32(DOORBELL_OFF)
            .expect("layout validated");
        // Release: publishes what the caller stored before (the grant word);
        // pairs with the Acquire load of the doorbell in `Server::block`.
        bell.fetch_add(1, Ordering::Release);
        futex::wake(bell, 1);
    }

    /// The region's guests are gone (their VM stopped): frees every claimed
    /// channel as its owner would have released it, so that the host
    /// serving the region resets it (freeing what its guest created) and a
    /// guest of the VM's next boot can claim it. Returns how many were
    /// freed.
    pub fn release_claims(&self) -> u32 {
        let mut freed = 0;
        for index in 0..self.layout.channels() {
            let offs = self.layout.channel(index).expect("index < channels");
            let word = self
                .view
                .atomic_u64(offs.at(CH_OWNER))
                .expect("layout validated");
            // Acquire: pairs with the guest's claim CAS.
            let w = word.load(Ordering::Acquire);
            let owner = Owner::from_word(w);
            if owner.is_free() {
                continue;
            }
            if free_claim(word, w) {
                freed += 1;
            }
        }
        freed
    }

    /// Wakes every guest of the region that published that it sleeps, as
    /// the server does after answering (W2's waker side), and tells the
    /// region's [`GuestNotifier`] of each.
    pub fn wake_guests(&self) -> u32 {
        let mut woken = 0;
        for index in 0..self.layout.channels() {
            let offs = self.layout.channel(index).expect("index < channels");
            woken += u32::from(wake_channel_guest(&self.view, &offs, index, &self.notify));
        }
        woken
    }
}

/// Frees the claim `w` that the owner word `word` held when looked at,
/// keeping its generation; false if the word changed meanwhile.
fn free_claim(word: &AtomicU64, w: u64) -> bool {
    let free = Owner {
        generation: Owner::from_word(w).generation,
        pid: 0,
    };
    // AcqRel CAS, as a guest's release: frees only the exact claim looked
    // at; a guest that released or reclaimed it meanwhile wins.
    word.compare_exchange(w, free.word(), Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
}

/// Wakes the guest of channel `index` at `offs` if it published that it
/// sleeps, then tells `notify`; true if it did.
fn wake_channel_guest(
    view: &RegionView,
    offs: &ChannelOffsets,
    index: u32,
    notify: &Notify,
) -> bool {
    let word = |rel| view.atomic_u32(offs.at(rel)).expect("layout validated");
    // SeqCst fence: Dekker pairing with the guest's store of guest_sleeping,
    // its SeqCst fence and its re-check of the rings and host_state.
    fence(Ordering::SeqCst);
    if word(CH_GUEST_SLEEPING).load(Ordering::Relaxed) != 0 {
        let w = word(CH_GUEST_WAKE);
        // Release: makes the futex value change visible before the wake.
        w.fetch_add(1, Ordering::Release);
        futex::wake(w, 1);
        // After the futex wake and after guest_wake changed, so a guest the
        // notifier reaches (an interrupt across a VM boundary) re-checks and
        // finds the new wake word, as a futex waiter would.
        if let Some(n) = &notify.0 {
            n(index);
        }
        return true;
    }
    false
}

/// A request's arena slice, bounds-checked against the slice: bytes of
/// the shared region, or of a private copy the host made earlier (a step
/// of a graph launch, which answers nothing, so such a slice refuses
/// writes).
#[derive(Debug)]
pub struct ArenaSlice<'a> {
    src: Source<'a>,
    len: usize,
}

#[derive(Debug)]
enum Source<'a> {
    Region { view: &'a RegionView, base: usize },
    Private(&'a [u8]),
}

impl<'a> ArenaSlice<'a> {
    fn region(view: &'a RegionView, base: usize, len: usize) -> Self {
        ArenaSlice {
            src: Source::Region { view, base },
            len,
        }
    }

    /// A slice over bytes already copied out of the region (read-only).
    pub fn private(bytes: &'a [u8]) -> Self {
        ArenaSlice {
            src: Source::Private(bytes),
            len: bytes.len(),
        }
    }

    /// An empty slice of `view`, for handler tests.
    #[cfg(test)]
    pub(crate) fn empty(view: &'a RegionView) -> Self {
        ArenaSlice::region(view, 0, 0)
    }
}

impl ArenaSlice<'_> {
    /// Slice length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slice is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies the slice's bytes `off..off + dst.len()` into private memory.
    pub fn read(&self, off: usize, dst: &mut [u8]) -> Result<(), Status> {
        self.check(off, dst.len())?;
        match self.src {
            Source::Region { view, base } => view
                .read_bytes(base + off, dst)
                .map_err(|_| Status::INVALID_VALUE),
            Source::Private(b) => {
                dst.copy_from_slice(&b[off..off + dst.len()]);
                Ok(())
            }
        }
    }

    /// Writes `src` at `off` inside the slice (refused for a private one).
    pub fn write(&self, off: usize, src: &[u8]) -> Result<(), Status> {
        self.check(off, src.len())?;
        match self.src {
            Source::Region { view, base } => view
                .write_bytes(base + off, src)
                .map_err(|_| Status::INVALID_VALUE),
            Source::Private(_) => Err(Status::INVALID_VALUE),
        }
    }

    fn check(&self, off: usize, len: usize) -> Result<(), Status> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Status::INVALID_VALUE),
        }
    }
}

/// What a handler returns for a successful request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Answer {
    /// Inline return values.
    pub vals: [u64; 5],
    /// Output bytes written into the request's arena slice.
    pub out_len: u32,
}

/// Executes validated requests. The transport owns the rings; the handler
/// owns whatever state the calls create (per channel).
pub trait Handler {
    /// Executes one request of channel `ch`.
    fn handle(
        &mut self,
        ch: u32,
        req: &ValidRequest,
        arena: &ArenaSlice<'_>,
    ) -> Result<Answer, Status>;
    /// Channel `ch` changed owner or failed: free everything its previous
    /// owner created.
    fn reset(&mut self, ch: u32);
    /// Called by [`Server::run`] about every [`TICK_EVERY`], busy or idle
    /// (for publishing usage). Does nothing by default.
    fn tick(&mut self) {}
    /// Whether the valid request `req` at the head of channel `ch` may be
    /// served now. When false the request stays in the ring (not consumed,
    /// not answered) and the channel waits until a later pass admits it;
    /// the server then blocks no longer than [`Handler::poll`] allows, and
    /// whoever makes the request admissible must ring the region's doorbell
    /// to wake a blocked server. Invalid requests are failed without asking.
    /// Admits everything by default.
    fn may_issue(&mut self, _ch: u32, _req: &ValidRequest) -> bool {
        true
    }
    /// Called after passes over every channel: after each pass that served
    /// something, and every few polls of an idle server (at least once
    /// before it blocks). Returns the longest the server may then block
    /// before calling again (`None`: no limit of the handler's own). Does
    /// nothing by default.
    fn poll(&mut self, _pass: Pass) -> Option<Duration> {
        None
    }
    /// Work that an answered request left unfinished on channel `ch` (the
    /// parts of a sliced kernel still to launch,
    /// [`crate::slicing`]; the steps of a graph launch still to run):
    /// asked before each of the channel's requests,
    /// which wait until it is done, so they stay ordered after it. Nothing
    /// to do by default.
    fn resume(&mut self, _ch: u32) -> Resume {
        Resume::Nothing
    }
    /// The request whose work [`Handler::resume`] continues, if any (a
    /// private copy, validated when it was served).
    fn unfinished(&self, _ch: u32) -> Option<ValidRequest> {
        None
    }
    /// The group channel `ch` belongs to, if it shares its context with
    /// other channels of its guest process (`ContextJoin`): the server
    /// then serves the group's requests in the order of their call ids,
    /// which the guest takes from one counter per process, so that a
    /// request one thread issued after another thread's (ordered by the
    /// guest's own synchronization) runs after it ([`Server`] explains
    /// why that suffices). None (served on its own) by default.
    fn group(&self, _ch: u32) -> Option<u32> {
        None
    }
    /// For synchronous request `req` at the head of channel `ch`, a
    /// member of a group ([`Handler::group`]): how long it would wait for
    /// the device (a synchronization whose work is still running), if long
    /// enough to serve other requests meanwhile, or when to ask again. Such
    /// a request is put aside for that long (its member skipped, the server
    /// blocking no longer than that), so that one thread's wait does not
    /// hold the other threads' calls; then it is asked about `again`, until
    /// it is served. The handler keeps what the request waits for as it
    /// was when first asked (`again` false): work the other members queue
    /// meanwhile does not put it off. None (serve now, and wait in it) by
    /// default.
    fn sync_wait(&mut self, _ch: u32, _req: &ValidRequest, _again: bool) -> Option<Duration> {
        None
    }
    /// A failure that ends the serving of the whole region (a runaway
    /// kernel the GPU will end only with this process): the server fails
    /// every channel and returns. Asked after every pass; none by default.
    fn fatal(&mut self) -> Option<Fatal> {
        None
    }
}

/// What [`Handler::fatal`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fatal {
    /// The channel whose kernel ran away: it fails with
    /// [`ChannelFailure::RunawayKernel`], the others with
    /// [`ChannelFailure::WorkerCrashed`] (their state goes with the
    /// worker).
    pub runaway_channel: Option<u32>,
}

/// What [`Handler::resume`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// The channel has no unfinished work.
    Nothing,
    /// Its unfinished work may not be issued now (as
    /// [`Handler::may_issue`] false): the channel waits.
    Held,
    /// It issued the next piece: `Err` is the channel's next deferred
    /// error, as an asynchronous request's failure is.
    Ran(Result<(), Status>),
}

/// What the server saw in its last pass over the channels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pass {
    /// Some request was served.
    pub served: bool,
    /// Some request is held back by [`Handler::may_issue`].
    pub deferred: bool,
}

/// How often [`Server::run`] calls [`Handler::tick`].
pub const TICK_EVERY: Duration = Duration::from_millis(100);

/// Per-channel counters, readable from other threads while serving.
#[derive(Debug, Default)]
pub struct ChannelStats {
    /// Requests answered with a response.
    pub sync_calls: AtomicU64,
    /// Fire-and-forget requests executed.
    pub async_calls: AtomicU64,
    /// Requests that failed.
    pub errors: AtomicU64,
    /// Arena bytes carried by requests.
    pub arena_bytes: AtomicU64,
    /// Current owner pid (0: free).
    pub owner_pid: AtomicU32,
    /// 1 while the channel is failed.
    pub failed: AtomicU32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Serving,
    Failed,
}

#[derive(Debug)]
struct HostChannel {
    index: u32,
    offs: ChannelOffsets,
    served_gen: u32,
    state: State,
    req: Consumer<RequestRing>,
    resp: Producer<ResponseRing>,
    deferred: Status,
    /// The synchronization at the head of the ring put aside, by call id,
    /// and until when it is asked about again ([`Handler::sync_wait`]):
    /// the modelled end of the work queued before it, or a short poll.
    aside: Option<(u64, Instant)>,
}

/// How the server waits.
#[derive(Debug, Clone, Copy)]
pub struct ServeConfig {
    /// How long to poll with nothing to do before blocking.
    pub spin: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            spin: Duration::from_micros(200),
        }
    }
}

/// Serves one region.
#[derive(Debug)]
pub struct Server<H: Handler> {
    region: HostRegion,
    channels: Vec<HostChannel>,
    stats: Arc<[ChannelStats]>,
    handler: H,
    cfg: ServeConfig,
    shutdown: Arc<AtomicBool>,
    last_reap: Instant,
    last_tick: Instant,
    /// A request was held back by `may_issue` in the current pass.
    deferred: bool,
    /// How soon a synchronization the current pass put aside
    /// ([`Handler::sync_wait`]) is to be served, and whether the last
    /// `serve_one` put one aside.
    wake_in: Option<Duration>,
    put_aside: bool,
}

impl<H: Handler> Server<H> {
    /// A server for `region`; it stops when `shutdown` becomes true.
    pub fn new(
        region: HostRegion,
        handler: H,
        cfg: ServeConfig,
        shutdown: Arc<AtomicBool>,
    ) -> Self {
        let layout = *region.layout();
        let view = region.view().clone();
        let channels = (0..layout.channels())
            .map(|index| {
                let offs = layout.channel(index).expect("index < channels");
                HostChannel {
                    index,
                    offs,
                    served_gen: 0,
                    state: State::Idle,
                    req: Consumer::new(
                        RequestRing::requests(&view, &layout, &offs).expect("layout"),
                        0,
                    ),
                    resp: Producer::new(
                        ResponseRing::responses(&view, &layout, &offs).expect("layout"),
                        0,
                    ),
                    deferred: Status::SUCCESS,
                    aside: None,
                }
            })
            .collect();
        let stats = (0..layout.channels())
            .map(|_| ChannelStats::default())
            .collect();
        Server {
            region,
            channels,
            stats,
            handler,
            cfg,
            shutdown,
            last_reap: Instant::now(),
            last_tick: Instant::now(),
            deferred: false,
            wake_in: None,
            put_aside: false,
        }
    }

    /// A server for a region that an earlier server served and left behind
    /// (the worker before this one crashed). Channels whose guest state died
    /// with that server are not resumed: every channel whose owner is
    /// claimed (and alive, where the host can tell) and whose `host_gen`
    /// equals the owner's generation is failed with
    /// [`ChannelFailure::WorkerCrashed`] until its guest releases it or a
    /// new generation claims it. Claims still in their handshake are
    /// completed as usual.
    pub fn adopt(
        region: HostRegion,
        handler: H,
        cfg: ServeConfig,
        shutdown: Arc<AtomicBool>,
    ) -> Self {
        let mut server = Self::new(region, handler, cfg, shutdown);
        let local = server.region.layout().features() & FEATURE_LOCAL_OWNERS != 0;
        for i in 0..server.channels.len() {
            let view = server.region.view().clone();
            let offs = server.channels[i].offs;
            let word = |rel| view.atomic_u32(offs.at(rel)).expect("layout validated");
            // Acquire: pairs with the guest's claim/release CAS.
            let owner = Owner::from_word(
                view.atomic_u64(offs.at(CH_OWNER))
                    .expect("layout validated")
                    .load(Ordering::Acquire),
            );
            // Relaxed: host_gen is written only by the host side, and the
            // previous writer is gone.
            let host_gen = word(CH_HOST_GEN).load(Ordering::Relaxed);
            if owner.is_free() || (local && !pid_alive(owner.pid)) || host_gen != owner.generation {
                // Free, dead (reaped later) or mid-handshake: poll_channel
                // handles these as usual.
                continue;
            }
            let ch = &mut server.channels[i];
            ch.served_gen = owner.generation;
            ch.state = State::Failed;
            let st = &server.stats[i];
            st.owner_pid.store(owner.pid, Ordering::Relaxed);
            st.failed.store(1, Ordering::Relaxed);
            // Acquire: pairs with the Release store of whoever failed it.
            if word(CH_HOST_STATE).load(Ordering::Acquire) == 0 {
                // Release: pairs with the guest's Acquire load of host_state.
                word(CH_HOST_STATE).store(ChannelFailure::WorkerCrashed as u32, Ordering::Release);
            }
            tracing::info!(
                channel = i,
                pid = owner.pid,
                generation = owner.generation,
                "channel's host state died with the previous worker; failed until re-claimed"
            );
            server.wake_guest(i);
        }
        server
    }

    /// Calls `notifier` with the channel index whenever this server (or
    /// bells of its region) wakes a sleeping guest, after the futex wake
    /// ([`HostRegion::with_guest_notifier`]). For [`Server::adopt`], set it
    /// on the region before adopting, so wakes during adoption reach it.
    pub fn with_guest_notifier(mut self, notifier: GuestNotifier) -> Self {
        self.region.notify = Notify(Some(notifier));
        self
    }

    /// The handler, e.g. to hand it [`Server::stats`] after construction.
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    /// Counters of every channel, shareable with a monitoring thread.
    pub fn stats(&self) -> Arc<[ChannelStats]> {
        self.stats.clone()
    }

    /// The region being served.
    pub fn region(&self) -> &HostRegion {
        &self.region
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.region
            .view()
            .atomic_u32(off)
            .expect("layout validated")
    }

    /// Serves until shutdown, then fails every live channel with
    /// `HostShutdown` so that waiting guests return at once.
    pub fn run(mut self) -> H {
        let heartbeat = self.spawn_heartbeat();
        let mut idle_since: Option<Instant> = None;
        let mut idle_polls = 0u32;
        self.handler.tick();
        let mut fatal = None;
        while !self.shutdown.load(Ordering::Relaxed) {
            fatal = self.handler.fatal();
            if fatal.is_some() {
                break;
            }
            if self.poll_all() {
                idle_since = None;
                idle_polls = 0;
                self.handler.poll(Pass {
                    served: true,
                    deferred: self.deferred,
                });
                let now = Instant::now();
                self.maybe_tick(now);
                // Busy too: a guest killed with its ring full of launches
                // must not have them all executed (on SimGpu each can take
                // seconds) while the VM's other guests wait behind them.
                if now.duration_since(self.last_reap) >= REAP_EVERY {
                    self.reap_dead_owners();
                }
                continue;
            }
            idle_polls = idle_polls.wrapping_add(1);
            if !idle_polls.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            let limit = self.handler.poll(Pass {
                served: false,
                deferred: self.deferred,
            });
            // A synchronization put aside is served when its work is
            // due to end.
            let limit = match (limit, self.wake_in) {
                (Some(l), Some(w)) => Some(l.min(w)),
                (l, w) => l.or(w),
            };
            let now = Instant::now();
            self.maybe_tick(now);
            let since = *idle_since.get_or_insert(now);
            if now.duration_since(self.last_reap) >= REAP_EVERY {
                self.reap_dead_owners();
            }
            // Requests held back with no limit of the handler's wait for
            // whoever admits them (the GPU scheduler rings the doorbell when
            // it grants): spinning would only take the CPU from the worker
            // that holds the GPU.
            let held_back = self.deferred && limit.is_none();
            if held_back || now.duration_since(since) >= self.cfg.spin {
                self.block(limit);
                idle_since = None;
            }
        }
        for i in 0..self.channels.len() {
            if self.channels[i].state == State::Serving {
                let why = match fatal {
                    None => ChannelFailure::HostShutdown,
                    Some(f) if f.runaway_channel == Some(self.channels[i].index) => {
                        ChannelFailure::RunawayKernel
                    }
                    Some(_) => ChannelFailure::WorkerCrashed,
                };
                self.fail(i, why);
            }
        }
        if fatal.is_some() {
            // The heartbeat thread stops with the process.
            self.shutdown.store(true, Ordering::Relaxed);
        }
        let _ = heartbeat.join();
        self.handler.tick();
        self.handler
    }

    fn maybe_tick(&mut self, now: Instant) {
        if now.duration_since(self.last_tick) >= TICK_EVERY {
            self.last_tick = now;
            self.handler.tick();
        }
    }

    fn spawn_heartbeat(&self) -> std::thread::JoinHandle<()> {
        let view = self.region.view().clone();
        let stop = self.shutdown.clone();
        std::thread::Builder::new()
            .name("fairgpu-heartbeat".into())
            .spawn(move || {
                let hb = view.atomic_u64(HEARTBEAT_OFF).expect("layout validated");
                while !stop.load(Ordering::Relaxed) {
                    hb.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(HEARTBEAT_MS));
                }
            })
            .expect("spawning the heartbeat thread")
    }

    /// Publishes "sleeping", re-checks every channel, then blocks on the
    /// doorbell until a guest (or the GPU scheduler, granting) rings it, the
    /// block slice ends, or `limit` (the handler's) passes.
    fn block(&mut self, limit: Option<Duration>) {
        let bell = self.u32_at(DOORBELL_OFF);
        // Acquire: pairs with the Release increment of whoever rings the
        // doorbell (a guest, W1; the scheduler after a grant, G1), so the
        // re-check below sees what was published before that ring.
        let seen = bell.load(Ordering::Acquire);
        self.u32_at(HOST_SLEEPING_OFF).store(1, Ordering::Relaxed);
        // SeqCst fence: Dekker pairing with the guest's fence between
        // publishing its tail and reading host_sleeping (ring_doorbell).
        fence(Ordering::SeqCst);
        if !self.poll_all() {
            let limit = limit.map_or(BLOCK_SLICE, |l| l.min(BLOCK_SLICE));
            if !limit.is_zero() {
                futex::wait(self.u32_at(DOORBELL_OFF), seen, limit);
            }
        }
        self.u32_at(HOST_SLEEPING_OFF).store(0, Ordering::Relaxed);
    }

    /// One pass over every channel; true if anything was done. Records in
    /// `self.deferred` whether the handler held a request back.
    fn poll_all(&mut self) -> bool {
        let mut did = false;
        self.deferred = false;
        self.wake_in = None;
        let mut groups: Vec<u32> = Vec::new();
        for i in 0..self.channels.len() {
            match self.handler.group(self.channels[i].index) {
                None => did |= self.poll_channel(i),
                Some(g) => {
                    if let Some(d) = self.check_owner(i) {
                        did |= d;
                    } else if !groups.contains(&g) {
                        groups.push(g);
                    }
                }
            }
        }
        for g in groups {
            did |= self.serve_group(g);
        }
        did
    }

    /// Serves the requests of the channels in group `g` (those of one
    /// guest process that share a context), oldest call id first.
    ///
    /// Why that keeps the guest's order: a thread takes a request's call
    /// id from the process's counter before it publishes the request
    /// (Release store of the ring's tail). If thread A's request happens
    /// before thread B's (A published, then the guest synchronized A with
    /// B, then B took its id), B's id is larger, and once this server has
    /// read B's tail (Acquire), every later read of A's tail sees A's
    /// request (coherence: A's store happens before that read). So each
    /// choice is made from two passes over the members' heads, the second
    /// after the first found its oldest: when both agree, no request that
    /// happened before the chosen one can still be hidden. Requests with
    /// no such order between them (issued concurrently) may run in either
    /// order, as on the driver. An unfinished request's remaining work
    /// (a sliced kernel, a graph's steps) keeps its request's id; and a
    /// head that may not be served now holds the whole group for this
    /// pass, as what came after it may depend on it. But a synchronous
    /// request that would wait for the device ([`Handler::ready`]) is put
    /// aside (its member skipped for the pass) while other members have
    /// requests: its thread waits for its answer, so nothing was issued
    /// after it yet.
    fn serve_group(&mut self, g: u32) -> bool {
        let members: Vec<usize> = (0..self.channels.len())
            .filter(|&i| {
                self.channels[i].state == State::Serving
                    && self.handler.group(self.channels[i].index) == Some(g)
            })
            .collect();
        let mut served = Vec::new();
        let mut aside: Vec<usize> = Vec::new();
        for n in 0..BATCH {
            if n % 8 == 7 && self.last_reap.elapsed() >= REAP_EVERY {
                break;
            }
            let open: Vec<usize> = members
                .iter()
                .copied()
                .filter(|i| !aside.contains(i))
                .collect();
            let mut pick = self.oldest_head(&open);
            loop {
                let again = self.oldest_head(&open);
                if again == pick {
                    break;
                }
                pick = again;
            }
            let Some((i, _)) = pick else {
                break;
            };
            match self.serve_one(i, false) {
                Ok(true) => {
                    if !served.contains(&i) {
                        served.push(i);
                    }
                }
                Ok(false) if self.put_aside => aside.push(i),
                Ok(false) => break,
                Err(failure) => {
                    self.fail(i, failure);
                    served.retain(|&s| s != i);
                    for &s in &served {
                        self.wake_guest(s);
                    }
                    return true;
                }
            }
        }
        for &i in &served {
            self.wake_guest(i);
        }
        !served.is_empty()
    }

    /// The member of `members` whose next request (its unfinished work,
    /// else the head of its ring) has the smallest call id, and that id. A
    /// corrupt ring counts as oldest, so that serving it fails the channel.
    fn oldest_head(&mut self, members: &[usize]) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for &i in members {
            let id = match self.handler.unfinished(self.channels[i].index) {
                Some(r) => Some(r.call_id),
                None => match self.channels[i].req.peek() {
                    Ok(Some(desc)) => Some(desc.call_id),
                    Ok(None) => None,
                    Err(_) => Some(0),
                },
            };
            if let Some(id) = id {
                if best.is_none_or(|(_, b)| id < b) {
                    best = Some((i, id));
                }
            }
        }
        best
    }

    /// The owner checks of a pass over channel `i`: None when the channel
    /// is being served and its requests may be read; else whether
    /// something was done (a claim completed).
    fn check_owner(&mut self, i: usize) -> Option<bool> {
        let view = self.region.view().clone();
        let offs = self.channels[i].offs;
        let word = |rel| view.atomic_u32(offs.at(rel)).expect("layout validated");
        // Acquire: pairs with the guest's claim/release CAS on the owner word.
        let owner = Owner::from_word(
            view.atomic_u64(offs.at(CH_OWNER))
                .expect("layout validated")
                .load(Ordering::Acquire),
        );
        let ch = &mut self.channels[i];
        if owner.is_free() {
            if ch.state != State::Idle {
                ch.state = State::Idle;
                self.stats[i].owner_pid.store(0, Ordering::Relaxed);
                self.handler.reset(ch.index);
            }
            return Some(false);
        }
        if owner.generation != ch.served_gen {
            // Acquire: pairs with the guest's Release store of guest_gen after
            // it zeroed req.tail and resp.head for this generation.
            if word(CH_GUEST_GEN).load(Ordering::Acquire) != owner.generation {
                return Some(false);
            }
            self.reset_channel(i, owner);
            return Some(true);
        }
        if ch.state != State::Serving {
            return Some(false);
        }
        None
    }

    fn poll_channel(&mut self, i: usize) -> bool {
        if let Some(did) = self.check_owner(i) {
            return did;
        }
        let mut did = false;
        for n in 0..BATCH {
            // Every few requests, a pass that has run past the reaping
            // period ends, so that a dead owner's queue is dropped after at
            // most a few of its requests (a clock read per request would
            // cost the ring's round trip a tenth).
            if n % 8 == 7 && self.last_reap.elapsed() >= REAP_EVERY {
                break;
            }
            match self.serve_one(i, true) {
                Ok(true) => did = true,
                Ok(false) => break,
                Err(failure) => {
                    self.fail(i, failure);
                    return true;
                }
            }
        }
        if did {
            self.wake_guest(i);
        }
        did
    }

    fn reset_channel(&mut self, i: usize, owner: Owner) {
        let view = self.region.view().clone();
        let ch = &mut self.channels[i];
        let word = |rel| view.atomic_u32(ch.offs.at(rel)).expect("layout validated");
        self.handler.reset(ch.index);
        ch.req = Consumer::new(
            RequestRing::requests(&view, self.region.layout(), &ch.offs).expect("layout"),
            0,
        );
        ch.resp = Producer::new(
            ResponseRing::responses(&view, self.region.layout(), &ch.offs).expect("layout"),
            0,
        );
        word(CH_REQ_HEAD).store(0, Ordering::Relaxed);
        word(CH_RESP_TAIL).store(0, Ordering::Relaxed);
        word(CH_HOST_STATE).store(0, Ordering::Relaxed);
        ch.deferred = Status::SUCCESS;
        ch.aside = None;
        ch.served_gen = owner.generation;
        ch.state = State::Serving;
        // Release: publishes the zeroed host-side indices and state; pairs
        // with the guest's Acquire load of host_gen in Channel::handshake.
        word(CH_HOST_GEN).store(owner.generation, Ordering::Release);
        let st = &self.stats[i];
        st.owner_pid.store(owner.pid, Ordering::Relaxed);
        st.failed.store(0, Ordering::Relaxed);
        tracing::debug!(
            channel = ch.index,
            pid = owner.pid,
            generation = owner.generation,
            "channel claimed"
        );
        self.wake_guest(i);
    }

    /// Serves the oldest request of channel `i`; false if there was none (or
    /// its response cannot be posted yet, or it may not be issued yet, or
    /// it is a synchronization put aside: then `put_aside` is set and
    /// `wake_in` says when to ask again). With `wait`, a synchronization
    /// is served even if it waits for the device.
    fn serve_one(&mut self, i: usize, wait: bool) -> Result<bool, ChannelFailure> {
        self.put_aside = false;
        let arena_size = self.region.layout().arena_size();
        let ch = &mut self.channels[i];
        // An answered request's unfinished work goes before the channel's
        // next request.
        match self.handler.resume(ch.index) {
            Resume::Nothing => {}
            Resume::Held => {
                self.deferred = true;
                return Ok(false);
            }
            Resume::Ran(r) => {
                if let Err(s) = r {
                    self.stats[i].errors.fetch_add(1, Ordering::Relaxed);
                    if ch.deferred.is_success() {
                        ch.deferred = s;
                    }
                }
                return Ok(true);
            }
        }
        let Some(desc) = ch
            .req
            .peek()
            .map_err(|_| ChannelFailure::RequestRingCorrupt)?
        else {
            return Ok(false);
        };
        // From here on only the private copy `desc` is used.
        let needs_response = desc.flags & REQ_NEEDS_RESPONSE != 0;
        if needs_response
            && !ch
                .resp
                .has_space()
                .map_err(|_| ChannelFailure::ResponseRingCorrupt)?
        {
            return Ok(false); // the guest has not consumed its responses yet
        }
        let st = &self.stats[i];
        let result = match desc.validate(arena_size) {
            Ok(req) => {
                if !wait && req.needs_response {
                    let now = Instant::now();
                    let until = match ch.aside {
                        Some((id, until)) if id == desc.call_id && now < until => Some(until),
                        Some((id, _)) if id == desc.call_id => self
                            .handler
                            .sync_wait(ch.index, &req, true)
                            .map(|d| now + d),
                        _ => self
                            .handler
                            .sync_wait(ch.index, &req, false)
                            .map(|d| now + d),
                    };
                    match until {
                        Some(until) if now < until => {
                            // Left at the head of the ring, as a request
                            // held back.
                            ch.aside = Some((desc.call_id, until));
                            self.put_aside = true;
                            let d = until - now;
                            self.wake_in = Some(self.wake_in.map_or(d, |w| w.min(d)));
                            return Ok(false);
                        }
                        _ => ch.aside = None,
                    }
                }
                if !self.handler.may_issue(ch.index, &req) {
                    // Held back: left unconsumed at the head of the ring. The
                    // private copy is dropped; a later pass copies and
                    // validates the slot afresh before deciding again.
                    self.deferred = true;
                    return Ok(false);
                }
                let slice = ArenaSlice::region(
                    self.region.view(),
                    ch.offs.arena + req.arena.start as usize,
                    req.arena.len(),
                );
                st.arena_bytes
                    .fetch_add(req.arena.len() as u64, Ordering::Relaxed);
                self.handler.handle(ch.index, &req, &slice)
            }
            Err(e) => {
                rate_limited_warn(i, &e);
                Err(e.status())
            }
        };
        if result.is_err() {
            st.errors.fetch_add(1, Ordering::Relaxed);
        }
        if needs_response {
            let (status, ans) = match result {
                Ok(a) => (Status::SUCCESS, a),
                Err(s) => (s, Answer::default()),
            };
            let resp = Response {
                call_id: desc.call_id,
                status: status.0,
                deferred: std::mem::replace(&mut ch.deferred, Status::SUCCESS).0,
                arena_off: desc.arena_off,
                arena_len: ans.out_len.min(desc.arena_len),
                vals: ans.vals,
            };
            match ch.resp.try_push(&resp) {
                Ok(()) => {}
                Err(PushError::Full) => unreachable!("space checked above"),
                Err(PushError::Corrupt(_)) => return Err(ChannelFailure::ResponseRingCorrupt),
            }
            st.sync_calls.fetch_add(1, Ordering::Relaxed);
        } else {
            if let Err(s) = result {
                if ch.deferred.is_success() {
                    ch.deferred = s;
                }
            }
            st.async_calls.fetch_add(1, Ordering::Relaxed);
        }
        ch.req.advance();
        Ok(true)
    }

    fn fail(&mut self, i: usize, why: ChannelFailure) {
        let ch = &mut self.channels[i];
        ch.state = State::Failed;
        let off = ch.offs.at(CH_HOST_STATE);
        self.stats[i].failed.store(1, Ordering::Relaxed);
        if why != ChannelFailure::HostShutdown {
            static LIMIT: RateLimit = RateLimit::new();
            if let Some(suppressed) = LIMIT.admit() {
                tracing::warn!(channel = ch.index, generation = ch.served_gen, reason = %why, suppressed, "channel failed");
            }
        }
        // Release: pairs with the guest's Acquire load of host_state.
        self.u32_at(off).store(why as u32, Ordering::Release);
        self.wake_guest(i);
    }

    /// Wakes channel `i`'s guest if it published that it sleeps.
    fn wake_guest(&self, i: usize) {
        let ch = &self.channels[i];
        wake_channel_guest(self.region.view(), &ch.offs, ch.index, &self.region.notify);
    }

    /// Local mode only: frees channels whose owning process is gone.
    fn reap_dead_owners(&mut self) {
        self.last_reap = Instant::now();
        if self.region.layout().features() & FEATURE_LOCAL_OWNERS == 0 {
            return;
        }
        for i in 0..self.channels.len() {
            let off = self.channels[i].offs.at(CH_OWNER);
            let word = self
                .region
                .view()
                .atomic_u64(off)
                .expect("layout validated");
            let w = word.load(Ordering::Acquire);
            let owner = Owner::from_word(w);
            if owner.is_free() || pid_alive(owner.pid) {
                continue;
            }
            if free_claim(word, w) {
                tracing::info!(
                    channel = i,
                    pid = owner.pid,
                    "owner died; channel reclaimed"
                );
                let ch = &mut self.channels[i];
                ch.state = State::Idle;
                self.stats[i].owner_pid.store(0, Ordering::Relaxed);
                self.handler.reset(ch.index);
            }
        }
    }
}

/// At most one log line per second for a kind of guest-triggered
/// warning, counting what it held back. A guest can trigger these at the
/// rate of its own loop (8,500 "channel failed" lines in 5 s were seen):
/// the log must not be a way to exhaust the host's disk or bury other VMs'
/// lines.
#[derive(Debug)]
pub struct RateLimit {
    last_sec: std::sync::atomic::AtomicU64,
    suppressed: std::sync::atomic::AtomicU64,
}

impl RateLimit {
    /// A limiter that has let nothing through yet.
    pub const fn new() -> RateLimit {
        RateLimit {
            last_sec: std::sync::atomic::AtomicU64::new(u64::MAX),
            suppressed: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Whether a line may be logged now; if so, how many were held back
    /// since the last one.
    pub fn admit(&self) -> Option<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.admit_at(now)
    }

    /// [`RateLimit::admit`] at `now_sec` (seconds of any monotone clock).
    pub fn admit_at(&self, now_sec: u64) -> Option<u64> {
        // Relaxed: a log throttle; a race lets at most one extra line
        // through and orders nothing else.
        if self.last_sec.swap(now_sec, Ordering::Relaxed) != now_sec {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

impl Default for RateLimit {
    fn default() -> Self {
        RateLimit::new()
    }
}

fn rate_limited_warn(ch: usize, e: &fairgpu_protocol::wire::RequestError) {
    static LIMIT: RateLimit = RateLimit::new();
    if let Some(suppressed) = LIMIT.admit() {
        tracing::warn!(channel = ch, error = %e, suppressed, "bad request refused");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport_ops::TransportOps;

    /// Finding: the `channel failed` warning was not rate-limited (8,500
    /// lines in 5 s from a guest's loop).
    #[test]
    fn a_guest_failing_channels_in_a_loop_gets_one_warning_a_second() {
        let limit = RateLimit::new();
        assert_eq!(limit.admit_at(100), Some(0), "the first line is logged");
        for _ in 0..8_500 {
            assert_eq!(limit.admit_at(100), None);
        }
        assert_eq!(
            limit.admit_at(101),
            Some(8_500),
            "and says how many it held back"
        );
        assert_eq!(limit.admit_at(101), None);
        assert_eq!(limit.admit_at(102), Some(1));
    }

    fn temp_region(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("fairgpu-host-test-{}-{name}", std::process::id()))
    }

    fn cfg() -> RegionConfig {
        RegionConfig {
            channels: 3,
            ring_entries: 8,
            arena_size: 64 * 1024,
            ..Default::default()
        }
    }

    /// Writes a channel's owner and host generation as a guest and a host
    /// would have left them.
    fn set_channel(r: &HostRegion, ch: u32, owner: Owner, host_gen: u32) {
        let offs = r.layout().channel(ch).unwrap();
        let v = r.view();
        v.atomic_u64(offs.at(CH_OWNER))
            .unwrap()
            .store(owner.word(), Ordering::SeqCst);
        v.atomic_u32(offs.at(CH_GUEST_GEN))
            .unwrap()
            .store(owner.generation, Ordering::SeqCst);
        v.atomic_u32(offs.at(CH_HOST_GEN))
            .unwrap()
            .store(host_gen, Ordering::SeqCst);
    }

    fn host_state(r: &HostRegion, ch: u32) -> u32 {
        let offs = r.layout().channel(ch).unwrap();
        r.view()
            .atomic_u32(offs.at(CH_HOST_STATE))
            .unwrap()
            .load(Ordering::SeqCst)
    }

    #[test]
    fn attach_maps_without_owning_the_file() {
        let path = temp_region("attach");
        let created = HostRegion::create(&path, &cfg()).unwrap();
        let attached = HostRegion::attach(&path, &cfg()).unwrap();
        assert_eq!(attached.layout(), created.layout());
        let bigger = RegionConfig {
            channels: 4,
            ..cfg()
        };
        assert!(matches!(
            HostRegion::attach(&path, &bigger),
            Err(HostError::TooSmall { .. })
        ));
        drop(attached);
        assert!(path.exists(), "attaching leaves the file in place");
        drop(created);
        assert!(!path.exists(), "the creator removes it");
        assert!(matches!(
            HostRegion::attach(&path, &cfg()),
            Err(HostError::Attach { .. })
        ));
    }

    #[test]
    fn only_established_channels_are_failed_after_a_crash() {
        let path = temp_region("fail");
        let region = HostRegion::create(&path, &cfg()).unwrap();
        let me = std::process::id();
        // 0: established; 1: claim in its handshake; 2: free.
        set_channel(
            &region,
            0,
            Owner {
                generation: 3,
                pid: me,
            },
            3,
        );
        set_channel(
            &region,
            1,
            Owner {
                generation: 5,
                pid: me,
            },
            4,
        );
        assert_eq!(region.fail_established(ChannelFailure::WorkerCrashed), 1);
        assert_eq!(host_state(&region, 0), ChannelFailure::WorkerCrashed as u32);
        assert_eq!(host_state(&region, 1), 0);
        assert_eq!(host_state(&region, 2), 0);
    }

    #[test]
    fn an_adopting_server_fails_established_channels_until_reclaimed() {
        let path = temp_region("adopt");
        let region = HostRegion::create(&path, &cfg()).unwrap();
        let me = std::process::id();
        set_channel(
            &region,
            0,
            Owner {
                generation: 3,
                pid: me,
            },
            3,
        );
        set_channel(
            &region,
            1,
            Owner {
                generation: 5,
                pid: me,
            },
            4,
        );
        let attached = HostRegion::attach(&path, &cfg()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let server = Server::adopt(
            attached,
            TransportOps::default(),
            ServeConfig::default(),
            stop.clone(),
        );
        let stats = server.stats();
        assert_eq!(host_state(&region, 0), ChannelFailure::WorkerCrashed as u32);
        assert_eq!(stats[0].failed.load(Ordering::Relaxed), 1);
        assert_eq!(stats[0].owner_pid.load(Ordering::Relaxed), me);
        assert_eq!(
            host_state(&region, 1),
            0,
            "a handshake is completed, not failed"
        );
        let runner = std::thread::spawn(move || server.run());

        // The handshake of channel 1 completes.
        let gen_of = |ch: u32| {
            let offs = region.layout().channel(ch).unwrap();
            region
                .view()
                .atomic_u32(offs.at(CH_HOST_GEN))
                .unwrap()
                .load(Ordering::SeqCst)
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while gen_of(1) != 5 {
            assert!(Instant::now() < deadline, "channel 1 was not reset");
            std::thread::sleep(Duration::from_millis(1));
        }
        // Channel 0 stays failed until a new generation claims it.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(host_state(&region, 0), ChannelFailure::WorkerCrashed as u32);
        set_channel(
            &region,
            0,
            Owner {
                generation: 4,
                pid: me,
            },
            3,
        );
        while gen_of(0) != 4 {
            assert!(Instant::now() < deadline, "channel 0 was not reset");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(host_state(&region, 0), 0);
        stop.store(true, Ordering::Relaxed);
        runner.join().unwrap();
    }

    fn set_sleeping(r: &HostRegion, ch: u32) {
        let offs = r.layout().channel(ch).unwrap();
        r.view()
            .atomic_u32(offs.at(CH_GUEST_SLEEPING))
            .unwrap()
            .store(1, Ordering::SeqCst);
    }

    #[test]
    fn a_formatted_file_is_a_region_and_claims_can_be_released() {
        let path = temp_region("format");
        let size = Layout::new(&cfg()).unwrap().region_size();
        std::fs::write(&path, vec![0u8; size + 4096]).unwrap();
        let region = HostRegion::format(&path, &cfg()).unwrap();
        let guest = fairgpu_frontend::GuestRegion::open(&path).unwrap();
        assert_eq!(guest.layout().channels(), 3);
        let me = std::process::id();
        set_channel(
            &region,
            0,
            Owner {
                generation: 7,
                pid: me,
            },
            7,
        );
        set_channel(
            &region,
            2,
            Owner {
                generation: 1,
                pid: me,
            },
            1,
        );
        assert_eq!(region.bells().release_claims(), 2);
        assert_eq!(region.bells().release_claims(), 0);
        let owner = |ch| {
            let offs = region.layout().channel(ch).unwrap();
            Owner::from_word(
                region
                    .view()
                    .atomic_u64(offs.at(CH_OWNER))
                    .unwrap()
                    .load(Ordering::SeqCst),
            )
        };
        assert_eq!(
            owner(0),
            Owner {
                generation: 7,
                pid: 0
            }
        );
        assert_eq!(
            owner(2),
            Owner {
                generation: 1,
                pid: 0
            }
        );
        drop(region);
        assert!(path.exists(), "a formatted file is the caller's");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, [0u8; 64]).unwrap();
        assert!(matches!(
            HostRegion::format(&path, &cfg()),
            Err(HostError::TooSmall { .. })
        ));
        std::fs::remove_file(&path).unwrap();
    }

    fn recorder() -> (GuestNotifier, Arc<std::sync::Mutex<Vec<u32>>>) {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        (Arc::new(move |ch| s.lock().unwrap().push(ch)), seen)
    }

    #[test]
    fn the_guest_notifier_hears_of_every_sleeping_guest_woken() {
        let path = temp_region("notify");
        let (notifier, seen) = recorder();
        let region = HostRegion::create(&path, &cfg())
            .unwrap()
            .with_guest_notifier(notifier);
        let me = std::process::id();
        set_channel(
            &region,
            1,
            Owner {
                generation: 2,
                pid: me,
            },
            2,
        );
        set_channel(
            &region,
            2,
            Owner {
                generation: 2,
                pid: me,
            },
            2,
        );
        set_sleeping(&region, 1);
        // Only sleeping guests are woken, and each woken one is notified
        // after its wake word changed.
        let bells = region.bells();
        assert_eq!(bells.wake_guests(), 1);
        assert_eq!(*seen.lock().unwrap(), [1]);
        let offs = region.layout().channel(1).unwrap();
        let wake = region.view().atomic_u32(offs.at(CH_GUEST_WAKE)).unwrap();
        assert_eq!(wake.load(Ordering::SeqCst), 1);
        // Failing established channels wakes (and notifies) the sleeper.
        set_sleeping(&region, 2);
        assert_eq!(region.fail_established(ChannelFailure::WorkerCrashed), 2);
        assert_eq!(*seen.lock().unwrap(), [1, 1, 2]);
        // Without a notifier nothing is called.
        let plain = HostRegion::attach(&path, &cfg()).unwrap();
        assert_eq!(plain.bells().wake_guests(), 2);
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_server_notifies_the_guests_it_wakes() {
        let path = temp_region("notify-server");
        let region = HostRegion::create(&path, &cfg()).unwrap();
        let me = std::process::id();
        set_channel(
            &region,
            0,
            Owner {
                generation: 3,
                pid: me,
            },
            3,
        );
        set_sleeping(&region, 0);
        let (notifier, seen) = recorder();
        // Adopting fails the established channel 0 and wakes its guest.
        let attached = HostRegion::attach(&path, &cfg())
            .unwrap()
            .with_guest_notifier(notifier.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let server = Server::adopt(
            attached,
            TransportOps::default(),
            ServeConfig::default(),
            stop.clone(),
        );
        assert_eq!(*seen.lock().unwrap(), [0]);
        // A new claim of channel 2 by a sleeping guest: the server's reset
        // wakes it, through the notifier set on the server.
        let (notifier2, seen2) = recorder();
        let server = server.with_guest_notifier(notifier2);
        set_channel(
            &region,
            2,
            Owner {
                generation: 1,
                pid: me,
            },
            0,
        );
        set_sleeping(&region, 2);
        let runner = std::thread::spawn(move || server.run());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !seen2.lock().unwrap().contains(&2) {
            assert!(
                Instant::now() < deadline,
                "the claim's wake was not notified"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
        runner.join().unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            [0],
            "the replaced notifier is not called"
        );
    }

    #[derive(Debug, Default)]
    struct Ticking(Arc<AtomicU64>);

    impl Handler for Ticking {
        fn handle(
            &mut self,
            _: u32,
            _: &ValidRequest,
            _: &ArenaSlice<'_>,
        ) -> Result<Answer, Status> {
            Ok(Answer::default())
        }
        fn reset(&mut self, _: u32) {}
        fn tick(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn an_idle_server_ticks() {
        let path = temp_region("tick");
        let region = HostRegion::create(&path, &cfg()).unwrap();
        let ticks = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let server = Server::new(
            region,
            Ticking(ticks.clone()),
            ServeConfig::default(),
            stop.clone(),
        );
        let runner = std::thread::spawn(move || server.run());
        let deadline = Instant::now() + Duration::from_secs(10);
        while ticks.load(Ordering::Relaxed) < 3 {
            assert!(Instant::now() < deadline, "no ticks while idle");
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.store(true, Ordering::Relaxed);
        runner.join().unwrap();
    }
}
