//! A hostile guest: this test acts on a channel's words and slots directly,
//! sending descriptors and indices no correct guest would, while a
//! well-behaved guest uses another channel of the same host.

use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fairgpu_frontend::{futex, CallError, Channel, GuestRegion};
use fairgpu_protocol::layout::{
    ChannelFailure, ChannelOffsets, Owner, CH_GUEST_GEN, CH_HOST_GEN, CH_HOST_STATE, CH_OWNER,
    CH_REQ_HEAD, CH_REQ_TAIL, CH_RESP_HEAD, CH_RESP_TAIL, DOORBELL_OFF, HOST_SLEEPING_OFF,
};
use fairgpu_protocol::limits::DESC_SIZE;
use fairgpu_protocol::wire::REQ_NEEDS_RESPONSE;
use fairgpu_protocol::{Opcode, Request, Response, Status};
use fairgpu_tests::{assert_bytes_eq, pattern, wait_config, wait_until, with_timeout, HostProcess};

const WAIT: Duration = Duration::from_secs(5);

/// A guest that drives one channel by hand.
struct RawGuest {
    region: Arc<GuestRegion>,
    offs: ChannelOffsets,
    entries: u32,
    generation: u32,
    tail: u32,
    resp_head: u32,
}

impl RawGuest {
    /// Claims channel `index` the way the frontend does: CAS the owner word
    /// from free to (generation + 1, our pid), zero our indices, publish the
    /// generation, ring, and wait for the host to reset the channel.
    fn claim(region: &Arc<GuestRegion>, index: u32) -> RawGuest {
        let offs = region.layout().channel(index).unwrap();
        let owner = region.view().atomic_u64(offs.at(CH_OWNER)).unwrap();
        let cur = Owner::from_word(owner.load(Ordering::Acquire));
        assert!(cur.is_free(), "channel {index} is taken: {cur:?}");
        let generation = cur.generation.wrapping_add(1).max(1);
        let mine = Owner {
            generation,
            pid: std::process::id(),
        };
        owner
            .compare_exchange(cur.word(), mine.word(), Ordering::AcqRel, Ordering::Acquire)
            .expect("owner word changed under the claim");
        let g = RawGuest {
            region: region.clone(),
            offs,
            entries: region.layout().ring_entries(),
            generation,
            tail: 0,
            resp_head: 0,
        };
        g.word(CH_REQ_TAIL).store(0, Ordering::Relaxed);
        g.word(CH_RESP_HEAD).store(0, Ordering::Relaxed);
        // Release: publishes the zeroed indices to the host's Acquire load.
        g.word(CH_GUEST_GEN).store(generation, Ordering::Release);
        g.ring();
        wait_until("the host to reset the raw channel", WAIT, || {
            (g.word(CH_HOST_GEN).load(Ordering::Acquire) == generation).then_some(())
        });
        assert_eq!(g.host_state(), 0, "a new generation starts serving");
        g
    }

    fn word(&self, rel: usize) -> &AtomicU32 {
        self.region.view().atomic_u32(self.offs.at(rel)).unwrap()
    }

    /// Wakes the host if it sleeps (as the frontend's doorbell does).
    fn ring(&self) {
        let view = self.region.view();
        fence(Ordering::SeqCst);
        if view
            .atomic_u32(HOST_SLEEPING_OFF)
            .unwrap()
            .load(Ordering::Relaxed)
            != 0
        {
            let bell = view.atomic_u32(DOORBELL_OFF).unwrap();
            bell.fetch_add(1, Ordering::Release);
            futex::wake(bell, 1);
        }
    }

    /// Writes `req` into the next request slot and publishes it.
    fn push(&mut self, req: &Request) {
        let slot = self.offs.req_slots + (self.tail & (self.entries - 1)) as usize * DESC_SIZE;
        self.region.view().write_obj(slot, req).unwrap();
        self.tail = self.tail.wrapping_add(1);
        // Release: publishes the slot to the host's Acquire load of tail.
        self.word(CH_REQ_TAIL).store(self.tail, Ordering::Release);
        self.ring();
    }

    /// Waits for the host to publish response number `n` (counting from 0
    /// for this generation) and copies it out, without consuming it.
    fn response(&self, n: u32) -> Response {
        wait_until(&format!("response {n}"), WAIT, || {
            let tail = self.word(CH_RESP_TAIL).load(Ordering::Acquire);
            (tail.wrapping_sub(n) as i32 > 0).then_some(())
        });
        let slot = self.offs.resp_slots + (n & (self.entries - 1)) as usize * DESC_SIZE;
        self.region.view().read_obj(slot).unwrap()
    }

    /// Waits for, copies out and consumes the next response.
    fn pop(&mut self) -> Response {
        let r = self.response(self.resp_head);
        self.resp_head = self.resp_head.wrapping_add(1);
        // Release: our read of the slot happens before the host reuses it.
        self.word(CH_RESP_HEAD)
            .store(self.resp_head, Ordering::Release);
        r
    }

    /// Sends `req` (which must need a response) and returns its response.
    fn call(&mut self, req: &Request) -> Response {
        self.push(req);
        self.pop()
    }

    fn host_state(&self) -> u32 {
        self.word(CH_HOST_STATE).load(Ordering::Acquire)
    }

    fn wait_failure(&self, want: ChannelFailure) {
        let got = wait_until(&format!("host_state {want:?}"), WAIT, || {
            let s = self.host_state();
            (s != 0).then_some(s)
        });
        assert_eq!(got, want as u32, "host_state");
    }

    /// Frees the channel: owner (generation, 0).
    fn release(self) {
        let owner = self
            .region
            .view()
            .atomic_u64(self.offs.at(CH_OWNER))
            .unwrap();
        let free = Owner {
            generation: self.generation,
            pid: 0,
        };
        // Release: pairs with the next claimant's Acquire of the owner word.
        owner.store(free.word(), Ordering::Release);
    }
}

fn request(opcode: u16, flags: u16, call_id: u64, arena_off: u32, arena_len: u32) -> Request {
    Request {
        opcode,
        flags,
        vcpu: 0,
        call_id,
        arena_off,
        arena_len,
        args: [call_id, 0, 0, 0, 0],
    }
}

/// A well-behaved guest working on its own channel in the background until
/// told to stop; returns how many rounds it completed.
fn busy_guest(mut ch: Channel, stop: Arc<AtomicBool>) -> JoinHandle<(Channel, u64)> {
    std::thread::spawn(move || {
        let data = pattern(200_000, 1234);
        let mut back = vec![0u8; data.len()];
        let mut rounds = 0u64;
        while !stop.load(Ordering::Relaxed) || rounds < 3 {
            for i in 0..20 {
                assert_eq!(ch.call(Opcode::Nop, [i, 0, 0, 0, 0]).unwrap().vals[0], i);
            }
            ch.send_bulk(Opcode::CopyIn, [rounds, 0, 0, 0, 0], 0, &data)
                .unwrap();
            back.fill(0);
            ch.recv_bulk(Opcode::CopyOut, [rounds, 0, 0, 0, 0], 0, &mut back)
                .unwrap();
            assert_bytes_eq(&back, &data, "the well-behaved guest's bulk copy");
            rounds += 1;
        }
        (ch, rounds)
    })
}

/// A byte-exact bulk round trip plus a sync call on a well-behaved channel.
fn check_works(ch: &mut Channel, seed: u64) {
    assert_eq!(
        ch.call(Opcode::Nop, [seed, 0, 0, 0, 0]).unwrap().vals[0],
        seed
    );
    let data = pattern(3 * (ch.max_slice() as usize / 4) + 77, seed);
    ch.send_bulk(Opcode::CopyIn, [5, 0, 0, 0, 0], 0, &data)
        .unwrap();
    let mut back = vec![0u8; data.len()];
    ch.recv_bulk(Opcode::CopyOut, [5, 0, 0, 0, 0], 0, &mut back)
        .unwrap();
    assert_bytes_eq(&back, &data, "bulk copy on a well-behaved channel");
}

#[test]
fn a_hostile_guest_fails_only_its_own_channel() {
    let mut host = HostProcess::start("hostile", 2);
    let region = host.region();
    let good = host.claim();
    assert_eq!(good.index(), 0);
    let stop = Arc::new(AtomicBool::new(false));
    let worker = busy_guest(good, stop.clone());

    // (a) Bad descriptors fail those requests only.
    let mut bad = RawGuest::claim(&region, 1);
    let arena = region.layout().arena_size();
    let ok = bad.call(&request(Opcode::Nop as u16, REQ_NEEDS_RESPONSE, 10, 0, 0));
    assert_eq!((ok.call_id, ok.status, ok.vals[0]), (10, 0, 10));
    let cases = [
        (
            "arena slice past the arena",
            request(
                Opcode::CopyIn as u16,
                REQ_NEEDS_RESPONSE,
                11,
                arena - 32,
                64,
            ),
            Status::INVALID_VALUE,
        ),
        (
            "arena offset + length overflowing u32",
            request(Opcode::CopyOut as u16, REQ_NEEDS_RESPONSE, 12, u32::MAX, 2),
            Status::INVALID_VALUE,
        ),
        (
            "unknown opcode",
            request(0x7777, REQ_NEEDS_RESPONSE, 13, 0, 0),
            Status::NOT_SUPPORTED,
        ),
        (
            "unknown flags",
            request(Opcode::Nop as u16, REQ_NEEDS_RESPONSE | 0x0100, 14, 0, 0),
            Status::INVALID_VALUE,
        ),
    ];
    for (what, req, want) in cases {
        let r = bad.call(&req);
        assert_eq!(r.call_id, req.call_id, "{what}: call id echoed");
        assert_eq!(Status(r.status), want, "{what}");
        assert_eq!(r.deferred, 0, "{what}");
        assert_eq!((r.arena_len, r.vals), (0, [0; 5]), "{what}: no output");
    }
    // A bad fire-and-forget request is reported with the next response.
    bad.push(&request(0x7777, 0, 15, 0, 0));
    let r = bad.call(&request(Opcode::Nop as u16, REQ_NEEDS_RESPONSE, 16, 0, 0));
    assert_eq!(
        (r.call_id, r.status, r.deferred),
        (16, 0, Status::NOT_SUPPORTED.0)
    );
    assert_eq!(bad.host_state(), 0, "bad requests do not fail the channel");

    // (b) An impossible request tail fails the channel.
    let head = bad.word(CH_REQ_HEAD).load(Ordering::Acquire);
    assert_eq!(head, bad.tail, "the host consumed everything");
    bad.word(CH_REQ_TAIL)
        .store(head.wrapping_add(bad.entries + 5), Ordering::Release);
    bad.ring();
    bad.wait_failure(ChannelFailure::RequestRingCorrupt);
    assert!(host.is_alive());
    bad.release();

    // (c) A new generation of the hostile channel is served again; this
    // time it corrupts the response ring's head while the host waits for
    // response space.
    let mut bad = RawGuest::claim(&region, 1);
    let entries = bad.entries;
    for i in 0..entries {
        bad.push(&request(
            Opcode::Nop as u16,
            REQ_NEEDS_RESPONSE,
            100 + u64::from(i),
            0,
            0,
        ));
    }
    // The host answers every one (the response ring is exactly full)...
    for i in 0..entries {
        let r = bad.response(i);
        assert_eq!(
            (r.call_id, r.status, r.vals[0]),
            (100 + u64::from(i), 0, 100 + u64::from(i))
        );
    }
    // ...and must not answer one more before we consume a response.
    bad.push(&request(Opcode::Nop as u16, REQ_NEEDS_RESPONSE, 999, 0, 0));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        bad.word(CH_RESP_TAIL).load(Ordering::Acquire),
        entries,
        "the host overran a full response ring"
    );
    assert_eq!(bad.host_state(), 0);
    bad.word(CH_RESP_HEAD)
        .store(entries.wrapping_add(0x4000_0000), Ordering::Release);
    bad.ring();
    bad.wait_failure(ChannelFailure::ResponseRingCorrupt);
    assert!(host.is_alive());

    // The well-behaved guest was never disturbed.
    stop.store(true, Ordering::Relaxed);
    let (mut good, rounds) = with_timeout(
        "the well-behaved guest",
        Duration::from_secs(30),
        move || worker.join().expect("well-behaved guest"),
    );
    assert!(rounds >= 3);
    check_works(&mut good, 1);

    // (d) Once the hostile guest lets go, a well-behaved claim of its
    // channel starts from a clean, serving channel.
    let generation = bad.generation;
    bad.release();
    let mut again = host.claim();
    assert_eq!(again.index(), 1);
    assert_eq!(again.generation(), generation + 1);
    check_works(&mut again, 2);
    check_works(&mut good, 3);
    assert!(host.is_alive());
}

#[test]
fn a_channel_the_host_failed_reports_channel_failed() {
    let mut host = HostProcess::start("failed_channel", 1);
    let region = host.region();
    let mut ch = host.claim();
    assert_eq!(ch.call(Opcode::Nop, [1, 0, 0, 0, 0]).unwrap().vals[0], 1);

    // Scribble over this channel's request tail as a buggy guest would.
    let offs = region.layout().channel(ch.index()).unwrap();
    let entries = region.layout().ring_entries();
    let tail = region.view().atomic_u32(offs.at(CH_REQ_TAIL)).unwrap();
    tail.store(
        tail.load(Ordering::Relaxed).wrapping_add(entries + 5),
        Ordering::Release,
    );
    let state = region.view().atomic_u32(offs.at(CH_HOST_STATE)).unwrap();
    wait_until("the host to fail the channel", WAIT, || {
        (state.load(Ordering::Acquire) != 0).then_some(())
    });

    let (mut ch, err) = with_timeout(
        "a call on a failed channel",
        Duration::from_secs(10),
        move || {
            let e = ch.call(Opcode::Nop, [2, 0, 0, 0, 0]);
            (ch, e)
        },
    );
    let err = err.unwrap_err();
    assert_eq!(
        err,
        CallError::ChannelFailed {
            channel: 0,
            reason: ChannelFailure::RequestRingCorrupt.to_string()
        }
    );
    assert_eq!(err.status(), Status::DEINITIALIZED);
    // The channel stays failed for this owner, without waiting again.
    assert_eq!(ch.call(Opcode::Nop, [3, 0, 0, 0, 0]), Err(err));

    // Dropping it frees the channel for a fresh, working claim. The host is
    // stopped while the claim waits, so the claimant sees the failure left
    // over from the previous generation until the host resets the channel;
    // that stale state must not fail the claim.
    let generation = ch.generation();
    drop(ch);
    host.pause();
    let claimer = {
        let region = region.clone();
        std::thread::spawn(move || Channel::claim(region, wait_config()))
    };
    let guest_gen = region.view().atomic_u32(offs.at(CH_GUEST_GEN)).unwrap();
    wait_until("the claim to publish its generation", WAIT, || {
        (guest_gen.load(Ordering::Acquire) == generation + 1).then_some(())
    });
    // Give the claimant time to look at host_state (this only makes the
    // check sharper; the test does not depend on it).
    std::thread::sleep(Duration::from_millis(50));
    host.resume();
    let mut fresh = with_timeout(
        "the claim after a failure",
        Duration::from_secs(10),
        move || claimer.join().expect("claim thread"),
    )
    .expect("claiming a channel the host had failed for its previous owner");
    assert_eq!(fresh.generation(), generation + 1);
    check_works(&mut fresh, 4);
}
