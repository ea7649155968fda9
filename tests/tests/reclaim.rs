//! A guest process killed while it holds a channel: the channel comes back,
//! either through the next guest's claim or through the host's own reaping.

use std::sync::atomic::Ordering;
use std::time::Duration;

use fairgpu_frontend::{Channel, GuestRegion};
use fairgpu_protocol::layout::{Owner, CH_OWNER};
use fairgpu_protocol::Opcode;
use fairgpu_tests::{
    assert_bytes_eq, child_setup, is_child, pattern, wait_config, wait_until, with_timeout,
    GuestChild, HostProcess,
};

const WAIT: Duration = Duration::from_secs(5);

/// The owner word of channel 0.
fn owner0(region: &GuestRegion) -> Owner {
    let offs = region.layout().channel(0).unwrap();
    let word = region.view().atomic_u64(offs.at(CH_OWNER)).unwrap();
    Owner::from_word(word.load(Ordering::Acquire))
}

/// Starts a child that claims a channel, fills its scratch, prints
/// `claimed <index>` and keeps streaming; returns it with that index.
fn streaming_child(host: &HostProcess) -> (GuestChild, u32) {
    let mut child = GuestChild::spawn("child_streaming_guest", "stream", host.path(), 1);
    let index = child
        .expect_line("claimed ", Duration::from_secs(20))
        .parse()
        .expect("channel index");
    (child, index)
}

/// Child side of the tests in this file: claims, writes a secret into its
/// scratch, then streams bulk transfers until killed (at most 60 s).
#[test]
fn child_streaming_guest() {
    if !is_child("stream") {
        return;
    }
    let (region, seed) = child_setup();
    let mut ch = Channel::claim(region, wait_config()).expect("child claim");
    let secret = pattern(4096, seed);
    ch.send_bulk(Opcode::CopyIn, [0; 5], 0, &secret).unwrap();
    println!("claimed {}", ch.index());
    let data = pattern(3 << 20, seed + 1);
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        ch.send_bulk(Opcode::CopyIn, [8192, 0, 0, 0, 0], 0, &data)
            .unwrap();
        ch.call_async(Opcode::Nop, [0; 5], &[]).unwrap();
    }
}

#[test]
fn a_dead_owners_channel_is_reclaimed_by_the_next_claim() {
    let mut host = HostProcess::start("reclaim_by_guest", 1);
    let region = host.region();
    let (mut child, index) = streaming_child(&host);
    assert_eq!(index, 0);
    let dead = owner0(&region);
    assert_eq!(dead.pid, child.pid());

    // Stop the host so that only the frontend can reclaim the channel: the
    // owner word must go straight from the dead child to us.
    host.pause();
    child.kill();
    assert_eq!(owner0(&region), dead, "nobody touched the owner word");
    let claimer = {
        let region = region.clone();
        std::thread::spawn(move || Channel::claim(region, wait_config()))
    };
    let me = std::process::id();
    let mine = wait_until("the claim to take the dead owner's channel", WAIT, || {
        let o = owner0(&region);
        (o.pid == me).then_some(o)
    });
    assert_eq!(mine.generation, dead.generation + 1);
    host.resume();
    let mut ch = with_timeout("the reclaiming claim", Duration::from_secs(10), move || {
        claimer.join().expect("claim thread")
    })
    .expect("reclaiming the dead owner's channel");
    assert_eq!(ch.index(), 0);
    assert_eq!(ch.generation(), dead.generation + 1);

    // The host reset the channel for us: calls work and the dead owner's
    // scratch is gone.
    assert_eq!(ch.call(Opcode::Nop, [3, 0, 0, 0, 0]).unwrap().vals[0], 3);
    let mut back = vec![0xffu8; 4096];
    ch.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut back).unwrap();
    assert_bytes_eq(&back, &[0u8; 4096], "scratch after reclaim");
    let data = pattern(3 << 20, 99);
    ch.send_bulk(Opcode::CopyIn, [0; 5], 0, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    ch.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut back).unwrap();
    assert_bytes_eq(&back, &data, "bulk after reclaim");
    assert!(host.is_alive());
}

#[test]
fn the_host_frees_a_dead_owners_channel_on_its_own() {
    let mut host = HostProcess::start("reclaim_by_host", 1);
    let region = host.region();
    let (mut child, index) = streaming_child(&host);
    assert_eq!(index, 0);
    let dead = owner0(&region);
    assert_eq!(dead.pid, child.pid());
    child.kill();

    let freed = wait_until("the host to free the dead owner's channel", WAIT, || {
        let o = owner0(&region);
        o.is_free().then_some(o)
    });
    assert_eq!(
        freed.generation, dead.generation,
        "freeing keeps the generation"
    );
    assert!(host.is_alive());

    let mut ch = host.claim();
    assert_eq!(ch.index(), 0);
    assert_eq!(ch.generation(), dead.generation + 1);
    assert_eq!(ch.call(Opcode::Nop, [4, 0, 0, 0, 0]).unwrap().vals[0], 4);
    let mut back = vec![0xffu8; 4096];
    ch.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut back).unwrap();
    assert_bytes_eq(&back, &[0u8; 4096], "scratch after the host freed it");
    assert!(host.is_alive());
}
