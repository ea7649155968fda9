//! The transport end to end: guests in this and in child processes against
//! a real `fairgpu serve-region` host.

use std::time::Duration;

use fairgpu_frontend::{CallError, Channel, OpenError};
use fairgpu_protocol::{Opcode, Status};
use fairgpu_tests::{
    assert_bytes_eq, child_read_line, child_setup, is_child, pattern, wait_config, GuestChild,
    HostProcess,
};
use fairgpu_worker::transport_ops::SCRATCH_LIMIT;

/// Sends `data` to the scratch buffer at `off` and reads it back.
fn round_trip(ch: &mut Channel, off: u64, data: &[u8], what: &str) {
    ch.send_bulk(Opcode::CopyIn, [off, 0, 0, 0, 0], 0, data)
        .unwrap_or_else(|e| panic!("{what}: send_bulk: {e}"));
    let mut back = vec![0xa5u8; data.len()];
    ch.recv_bulk(Opcode::CopyOut, [off, 0, 0, 0, 0], 0, &mut back)
        .unwrap_or_else(|e| panic!("{what}: recv_bulk: {e}"));
    assert_bytes_eq(&back, data, what);
}

#[test]
fn sync_nops_echo_their_argument() {
    let host = HostProcess::start("sync_nops", 1);
    let mut ch = host.claim();
    for i in 0..2000u64 {
        let v = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let r = ch.call(Opcode::Nop, [v, 1, 2, 3, 4]).unwrap();
        assert_eq!(r.vals, [v, 0, 0, 0, 0], "call {i}");
        assert_eq!(r.data_len, 0);
    }
}

#[test]
fn fire_and_forget_calls_run_in_order_before_the_next_sync_call() {
    let host = HostProcess::start("fire_and_forget", 1);
    let mut ch = host.claim();
    // More calls than ring slots (256), so submission also waits for space.
    const N: u64 = 1000;
    for i in 0..N {
        ch.call_async(Opcode::Nop, [i, 0, 0, 0, 0], &[]).unwrap();
    }
    assert_eq!(ch.call(Opcode::Nop, [77, 0, 0, 0, 0]).unwrap().vals[0], 77);

    // Call i writes [i, MARK] at word i: executed in order, word i ends as
    // i and only the last word is MARK; out of order, MARKs survive.
    const MARK: u64 = 0xfeed_f00d_dead_beef;
    for i in 0..N {
        let mut bytes = i.to_le_bytes().to_vec();
        bytes.extend_from_slice(&MARK.to_le_bytes());
        ch.call_async(Opcode::CopyIn, [i * 8, 0, 0, 0, 0], &bytes)
            .unwrap();
    }
    let mut back = vec![0u8; (N as usize + 1) * 8];
    ch.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut back).unwrap();
    let words: Vec<u64> = back
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap()))
        .collect();
    let mut want: Vec<u64> = (0..N).collect();
    want.push(MARK);
    assert_eq!(words, want);
}

#[test]
fn bulk_transfers_are_byte_exact() {
    let host = HostProcess::start("bulk_exact", 1);
    let mut ch = host.claim();
    let chunk = ch.max_slice() as usize / 4;
    let sizes = [
        0,
        1,
        63,
        64,
        65,
        4095,
        chunk - 1,
        chunk,
        chunk + 1,
        3 * chunk + 1,
        (9 << 20) + 12345,
    ];
    for (k, off) in [0u64, 1, 7, 4097].into_iter().enumerate() {
        for (j, &len) in sizes.iter().enumerate() {
            let data = pattern(len, (k * 100 + j) as u64 + 1);
            round_trip(
                &mut ch,
                off,
                &data,
                &format!("{len} bytes at scratch offset {off}"),
            );
        }
    }
}

#[test]
fn bulk_chunks_land_at_their_offsets() {
    // Round trips alone cannot catch a chunking error made the same way in
    // both directions; cross-check bulk transfers against single calls.
    let host = HostProcess::start("bulk_offsets", 1);
    let mut ch = host.claim();
    let chunk = ch.max_slice() as usize / 4;
    let base = 7u64;
    let data = pattern(3 * chunk + 1001, 42);
    ch.send_bulk(Opcode::CopyIn, [base, 0, 0, 0, 0], 0, &data)
        .unwrap();
    for at in [
        0,
        chunk - 100,
        2 * chunk - 3,
        3 * chunk - 50,
        data.len() - 64,
    ] {
        let mut piece = vec![0u8; 64.min(data.len() - at)];
        let r = ch
            .call_with(
                Opcode::CopyOut,
                [base + at as u64, 0, 0, 0, 0],
                &[],
                &mut piece,
            )
            .unwrap();
        assert_eq!(r.data_len as usize, piece.len());
        assert_bytes_eq(&piece, &data[at..at + piece.len()], &format!("at {at}"));
    }

    // The other direction: single writes straddling chunk boundaries, one
    // bulk read.
    let other = pattern(3 * chunk + 1001, 43);
    for at in (0..other.len()).step_by(chunk / 2 + 13) {
        let end = (at + chunk / 2 + 13).min(other.len());
        ch.call_with(
            Opcode::CopyIn,
            [base + at as u64, 0, 0, 0, 0],
            &other[at..end],
            &mut [],
        )
        .unwrap();
    }
    let mut back = vec![0u8; other.len()];
    ch.recv_bulk(Opcode::CopyOut, [base, 0, 0, 0, 0], 0, &mut back)
        .unwrap();
    assert_bytes_eq(&back, &other, "single writes read back in bulk");
}

#[test]
fn copy_out_past_the_scratch_limit_fails_and_the_channel_keeps_working() {
    let host = HostProcess::start("scratch_limit", 1);
    let mut ch = host.claim();
    let limit = SCRATCH_LIMIT as u64;
    for off in [limit - 8, limit, u64::MAX] {
        let mut out = [0u8; 16];
        assert_eq!(
            ch.call_with(Opcode::CopyOut, [off, 0, 0, 0, 0], &[], &mut out),
            Err(CallError::Cuda(Status::INVALID_VALUE)),
            "CopyOut of 16 bytes at {off}"
        );
        assert_eq!(out, [0u8; 16], "a failed call returns no data");
    }
    let mut big = vec![0u8; 2 * (ch.max_slice() as usize / 4) + 5];
    let e = ch
        .recv_bulk(Opcode::CopyOut, [limit - 100, 0, 0, 0, 0], 0, &mut big)
        .unwrap_err();
    assert_eq!(e, CallError::Cuda(Status::INVALID_VALUE));
    assert_eq!(e.status(), Status::INVALID_VALUE);

    assert_eq!(ch.call(Opcode::Nop, [9, 0, 0, 0, 0]).unwrap().vals[0], 9);
    round_trip(&mut ch, 3, &pattern(100_000, 5), "after the failed calls");
}

#[test]
fn fire_and_forget_errors_are_deferred_to_the_next_sync_call() {
    let host = HostProcess::start("deferred", 1);
    let mut ch = host.claim();
    let past = SCRATCH_LIMIT as u64 + 1;
    ch.call_async(Opcode::CopyIn, [past, 0, 0, 0, 0], &[1, 2, 3])
        .unwrap();
    assert_eq!(
        ch.call(Opcode::Nop, [5, 0, 0, 0, 0]),
        Err(CallError::Deferred(Status::INVALID_VALUE))
    );
    assert_eq!(ch.call(Opcode::Nop, [6, 0, 0, 0, 0]).unwrap().vals[0], 6);

    // Several failures between two sync calls are reported once.
    for _ in 0..3 {
        ch.call_async(Opcode::CopyIn, [past, 0, 0, 0, 0], &[1])
            .unwrap();
        ch.call_async(Opcode::Nop, [0; 5], &[]).unwrap();
    }
    assert_eq!(
        ch.call(Opcode::Nop, [7, 0, 0, 0, 0]),
        Err(CallError::Deferred(Status::INVALID_VALUE))
    );
    assert_eq!(ch.call(Opcode::Nop, [8, 0, 0, 0, 0]).unwrap().vals[0], 8);

    // A failing bulk chunk surfaces from send_bulk's final sync call, as
    // that call's own error (not an earlier call's). The chunk offsets
    // advance with wrapping arithmetic, so starting one chunk below 2^64
    // makes the first (fire-and-forget) chunk overflow and the second,
    // final one land at offset 0.
    let chunk = ch.max_slice() as usize / 4;
    let data = pattern(2 * chunk, 9);
    let start = 0u64.wrapping_sub(chunk as u64);
    assert_eq!(
        ch.send_bulk(Opcode::CopyIn, [start, 0, 0, 0, 0], 0, &data),
        Err(CallError::Cuda(Status::INVALID_VALUE))
    );
    assert_eq!(ch.call(Opcode::Nop, [1, 0, 0, 0, 0]).unwrap().vals[0], 1);
    let mut back = vec![0u8; chunk];
    ch.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut back).unwrap();
    assert_bytes_eq(&back, &data[chunk..], "the chunk that succeeded");

    // When the sync call fails too, it reports its own error and the
    // earlier asynchronous one comes with the next call: neither is lost.
    ch.call_async(Opcode::CopyIn, [past, 0, 0, 0, 0], &[1])
        .unwrap();
    assert_eq!(
        ch.call_with(Opcode::CopyOut, [past, 0, 0, 0, 0], &[], &mut [0u8; 8]),
        Err(CallError::Cuda(Status::INVALID_VALUE))
    );
    assert_eq!(
        ch.call(Opcode::Nop, [9, 0, 0, 0, 0]),
        Err(CallError::Deferred(Status::INVALID_VALUE))
    );
    assert_eq!(ch.call(Opcode::Nop, [10, 0, 0, 0, 0]).unwrap().vals[0], 10);
}

const GUESTS: usize = 3;

#[test]
fn several_guest_processes_at_once() {
    let host = HostProcess::start("several_guests", GUESTS as u32);
    let mut kids: Vec<GuestChild> = (0..GUESTS)
        .map(|i| GuestChild::spawn("child_bulk_guest", "bulk", host.path(), i as u64 + 1))
        .collect();
    let mut got: Vec<u32> = kids
        .iter_mut()
        .map(|k| {
            k.expect_line("channel ", Duration::from_secs(20))
                .parse()
                .expect("channel index")
        })
        .collect();
    got.sort_unstable();
    assert_eq!(got, [0, 1, 2], "every child got its own channel");
    // Every channel has a live owner now, each in another process.
    match Channel::claim(host.region(), wait_config()) {
        Err(OpenError::NoFreeChannel(n)) => assert_eq!(n, GUESTS as u32),
        other => panic!("claim with every channel taken: {other:?}"),
    }
    for k in &mut kids {
        k.send_line("go");
    }
    for k in &mut kids {
        k.expect_line("done", Duration::from_secs(30));
        k.wait_success(Duration::from_secs(10));
    }
}

/// Child side of `several_guest_processes_at_once`; does nothing when run
/// as an ordinary test.
#[test]
fn child_bulk_guest() {
    if !is_child("bulk") {
        return;
    }
    let (region, seed) = child_setup();
    let mut ch = Channel::claim(region, wait_config()).expect("child claim");
    println!("channel {}", ch.index());
    // Hold the channel until every child has one.
    assert_eq!(child_read_line().as_deref(), Some("go"));
    let chunk = ch.max_slice() as usize / 4;
    for (i, len) in [1, 4096 + seed as usize, 3 * chunk + 1, 5 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, seed * 1000 + i as u64);
        round_trip(
            &mut ch,
            seed * 11,
            &data,
            &format!("child {seed}: {len} bytes"),
        );
        let r = ch.call(Opcode::Nop, [seed, 0, 0, 0, 0]).unwrap();
        assert_eq!(r.vals[0], seed);
    }
    println!("done");
}

#[test]
fn claims_beyond_the_channel_count_fail_and_dropping_frees_a_channel() {
    let host = HostProcess::start("no_free_channel", 2);
    let mut a = host.claim();
    let mut b = host.claim();
    assert_ne!(a.index(), b.index());
    match Channel::claim(host.region(), wait_config()) {
        Err(OpenError::NoFreeChannel(n)) => assert_eq!(n, 2),
        other => panic!("third claim on two channels: {other:?}"),
    }

    let secret = pattern(1000, 77);
    b.send_bulk(Opcode::CopyIn, [0; 5], 0, &secret).unwrap();
    let (index, generation) = (b.index(), b.generation());
    drop(b);

    let mut c = host.claim();
    assert_eq!(c.index(), index, "the freed channel is claimed again");
    assert_eq!(c.generation(), generation + 1);
    // The new owner starts from a reset channel: no scratch from the old one.
    let mut back = vec![0xffu8; secret.len()];
    c.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut back).unwrap();
    assert_bytes_eq(&back, &vec![0u8; secret.len()], "scratch after a new claim");
    assert_eq!(c.call(Opcode::Nop, [1, 0, 0, 0, 0]).unwrap().vals[0], 1);
    assert_eq!(a.call(Opcode::Nop, [2, 0, 0, 0, 0]).unwrap().vals[0], 2);
}
