//! The host going away under a guest: killed outright, or shut down cleanly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fairgpu_frontend::{CallError, Channel, WaitConfig};
use fairgpu_protocol::layout::ChannelFailure;
use fairgpu_protocol::{Opcode, Status};
use fairgpu_tests::{wait_config, with_timeout, HostProcess};

/// Generous bound on how long a call may take to notice a dead host whose
/// timeout is 500 ms.
const GUARD: Duration = Duration::from_secs(10);

fn host_gone_or_failed(e: &CallError) -> bool {
    matches!(e, CallError::HostGone(_) | CallError::ChannelFailed { .. })
}

#[test]
fn a_killed_host_fails_the_next_call() {
    let mut host = HostProcess::start("host_killed", 1);
    let cfg = WaitConfig {
        host_timeout: Some(Duration::from_millis(500)),
        ..wait_config()
    };
    let mut ch = Channel::claim(host.region(), cfg).unwrap();
    assert_eq!(ch.call(Opcode::Nop, [1, 0, 0, 0, 0]).unwrap().vals[0], 1);

    host.kill();
    let (mut ch, res) = with_timeout("a call to a killed host", GUARD, move || {
        let r = ch.call(Opcode::Nop, [2, 0, 0, 0, 0]);
        (ch, r)
    });
    let err = res.unwrap_err();
    assert!(host_gone_or_failed(&err), "{err:?}");
    assert_eq!(err.status(), Status::DEINITIALIZED);
    // The channel is broken for good; later calls fail at once, bulk too.
    assert_eq!(ch.call(Opcode::Nop, [3, 0, 0, 0, 0]), Err(err.clone()));
    let mut buf = vec![0u8; 10_000];
    assert_eq!(
        ch.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut buf),
        Err(err.clone())
    );
    assert_eq!(ch.send_bulk(Opcode::CopyIn, [0; 5], 0, &buf), Err(err));
}

#[test]
fn a_sigterm_fails_guests_channels_and_removes_the_region() {
    let mut host = HostProcess::start("host_sigterm", 2);
    let path = host.path().to_owned();
    let mut idle = host.claim();
    assert_eq!(idle.call(Opcode::Nop, [1, 0, 0, 0, 0]).unwrap().vals[0], 1);

    // A second guest is busy calling while the host shuts down.
    let mut busy = host.claim();
    let started = Arc::new(AtomicBool::new(false));
    let worker = {
        let started = started.clone();
        std::thread::spawn(move || {
            let data = vec![7u8; 100_000];
            for i in 0.. {
                if let Err(e) = busy.call(Opcode::Nop, [i, 0, 0, 0, 0]) {
                    return e;
                }
                if let Err(e) = busy.send_bulk(Opcode::CopyIn, [0; 5], 0, &data) {
                    return e;
                }
                started.store(true, Ordering::Relaxed);
            }
            unreachable!()
        })
    };
    fairgpu_tests::wait_until("the busy guest to start", GUARD, || {
        started.load(Ordering::Relaxed).then_some(())
    });

    let status = host.terminate();
    assert!(status.success(), "host exit status after SIGTERM: {status}");
    assert!(!path.exists(), "the host removes its region file");

    let shut_down = CallError::ChannelFailed {
        channel: idle.index(),
        reason: ChannelFailure::HostShutdown.to_string(),
    };
    let (mut idle, res) = with_timeout("a call after shutdown", GUARD, move || {
        let r = idle.call(Opcode::Nop, [2, 0, 0, 0, 0]);
        (idle, r)
    });
    assert_eq!(res, Err(shut_down.clone()));
    assert_eq!(shut_down.status(), Status::DEINITIALIZED);
    assert_eq!(idle.call(Opcode::Nop, [3, 0, 0, 0, 0]), Err(shut_down));

    let busy_err = with_timeout("the busy guest to fail", GUARD, move || {
        worker.join().expect("busy guest")
    });
    match &busy_err {
        CallError::ChannelFailed { reason, .. } => {
            assert_eq!(reason, &ChannelFailure::HostShutdown.to_string())
        }
        other => panic!("busy guest after shutdown: {other:?}"),
    }
}
