//! The ivshmem server against this crate's protocol client, which reads the
//! messages as QEMU's device does.

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fairgpu_qemu::client::{Client, ClientError, Update};
use fairgpu_qemu::{
    Event, Interrupter, IvshmemServer, ServerConfig, ServerError, SharedMemory, HOST_PEER_ID,
};

const WAIT: Duration = Duration::from_secs(5);

struct Running {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    events: Receiver<Event>,
    irq: Interrupter,
    thread: Option<JoinHandle<()>>,
}

impl Running {
    fn start(vectors: u16, max_peers: u16) -> Running {
        Self::start_forwarding(vectors, max_peers, None)
    }

    fn start_forwarding(
        vectors: u16,
        max_peers: u16,
        forward: Option<(Arc<fairgpu_qemu::EventFd>, u16)>,
    ) -> Running {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "fairgpu-ivshmem-{}-{}.sock",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let shm = SharedMemory::memfd("fairgpu-test", 1 << 16).unwrap();
        let cfg = ServerConfig {
            name: "test".into(),
            vectors,
            max_peers,
            send_timeout: Duration::from_millis(500),
        };
        let mut server = IvshmemServer::bind(&path, shm, cfg).unwrap();
        if let Some((fd, vector)) = forward {
            server.forward(fd, vector).unwrap();
        }
        let irq = server.interrupter();
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, events) = channel();
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            server
                .run(&s, |e| {
                    let _ = tx.send(e.clone());
                })
                .unwrap();
        });
        Running {
            path,
            stop,
            events,
            irq,
            thread: Some(thread),
        }
    }

    fn connect(
        &self,
        vectors: u16,
    ) -> (
        Client,
        std::collections::BTreeMap<u16, Vec<fairgpu_qemu::EventFd>>,
    ) {
        let c = Client::connect(&self.path, WAIT).unwrap();
        let peers = c.read_setup(vectors).unwrap();
        (c, peers)
    }

    fn next_event(&self) -> Event {
        self.events.recv_timeout(WAIT).expect("a server event")
    }

    /// The next event that is not a doorbell or connect.
    fn next_matching(&self, f: impl Fn(&Event) -> bool) -> Event {
        loop {
            let e = self.next_event();
            if f(&e) {
                return e;
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        assert!(!self.path.exists(), "the server removes its socket");
    }
}

/// Polls an eventfd until it counts something.
fn wait_signalled(fd: &fairgpu_qemu::EventFd) -> u64 {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        if let Some(n) = fd.take().unwrap() {
            return n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "eventfd never signalled"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn setup_announces_every_peer_and_departures() {
    let srv = Running::start(2, 4);
    let (c1, peers1) = srv.connect(2);
    assert_eq!(c1.id(), 1);
    assert_eq!(
        peers1.keys().copied().collect::<Vec<_>>(),
        [HOST_PEER_ID, 1]
    );
    assert!(peers1.values().all(|v| v.len() == 2));
    assert_eq!(srv.next_event(), Event::Connected { peer: 1 });

    let (c2, peers2) = srv.connect(2);
    assert_eq!(c2.id(), 2);
    assert_eq!(
        peers2.keys().copied().collect::<Vec<_>>(),
        [HOST_PEER_ID, 1, 2]
    );
    // Client 1 learns of client 2, one eventfd per vector.
    for _ in 0..2 {
        match c1.next_update().unwrap() {
            Update::Vector { peer: 2, .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // What 2 got for 1 is 1's own eventfd: a signal crosses.
    peers2[&1][1].signal().unwrap();
    assert_eq!(wait_signalled(&peers1[&1][1]), 1);

    drop(c2);
    match c1.next_update().unwrap() {
        Update::Gone { peer: 2 } => {}
        other => panic!("unexpected {other:?}"),
    }
    let e = srv.next_matching(|e| matches!(e, Event::Disconnected { .. }));
    assert!(matches!(e, Event::Disconnected { peer: 2, .. }), "{e:?}");
    // A departed id is not reused at once.
    let (c3, _) = srv.connect(2);
    assert_eq!(c3.id(), 3);
}

#[test]
fn doorbells_and_interrupts() {
    let srv = Running::start(3, 1);
    let (c, peers) = srv.connect(3);
    assert_eq!(srv.next_event(), Event::Connected { peer: c.id() });
    // The guest rings the host's vector 2 (QEMU does this on a Doorbell
    // write of (0 << 16) | 2).
    peers[&HOST_PEER_ID][2].signal().unwrap();
    peers[&HOST_PEER_ID][2].signal().unwrap();
    let mut rung = 0;
    while rung < 2 {
        match srv.next_event() {
            Event::Doorbell { vector: 2, count } => rung += count,
            other => panic!("unexpected {other:?}"),
        }
    }
    // The host interrupts the guest's vector 1 (QEMU raises MSI-X 1).
    srv.irq.interrupt(c.id(), 1).unwrap();
    assert_eq!(wait_signalled(&peers[&c.id()][1]), 1);
    assert_eq!(peers[&c.id()][0].take().unwrap(), None);
    assert!(srv.irq.interrupt(c.id(), 3).is_err());
    assert!(srv.irq.interrupt(9, 0).is_err());
    assert_eq!(srv.irq.interrupt_all(0), 1);
    assert_eq!(wait_signalled(&peers[&c.id()][0]), 1);
}

#[test]
fn forwarded_eventfds_interrupt_every_guest() {
    let relay = Arc::new(fairgpu_qemu::EventFd::new().unwrap());
    let srv = Running::start_forwarding(2, 2, Some((relay.clone(), 1)));
    // Nobody connected: the signal is consumed and reaches nobody.
    relay.signal().unwrap();
    assert_eq!(
        srv.next_event(),
        Event::Forwarded {
            vector: 1,
            count: 1,
            peers: 0
        }
    );
    let (a, peers_a) = srv.connect(2);
    srv.next_event();
    let (b, peers_b) = srv.connect(2);
    srv.next_event();
    relay.signal().unwrap();
    let e = srv.next_matching(|e| matches!(e, Event::Forwarded { .. }));
    assert!(
        matches!(
            e,
            Event::Forwarded {
                vector: 1,
                peers: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(wait_signalled(&peers_a[&a.id()][1]), 1);
    assert_eq!(wait_signalled(&peers_b[&b.id()][1]), 1);
    assert_eq!(peers_a[&a.id()][0].take().unwrap(), None, "only vector 1");
    // Vectors the guests do not have are refused.
    let shm = SharedMemory::memfd("x", 4096).unwrap();
    let path =
        std::env::temp_dir().join(format!("fairgpu-ivshmem-fwd-{}.sock", std::process::id()));
    let mut s = IvshmemServer::bind(&path, shm, ServerConfig::default()).unwrap();
    assert!(matches!(
        s.forward(relay.clone(), 1),
        Err(ServerError::Config { .. })
    ));
    for _ in 0..fairgpu_qemu::server::MAX_FORWARDS {
        s.forward(relay.clone(), 0).unwrap();
    }
    assert!(matches!(
        s.forward(relay, 0),
        Err(ServerError::TooManyForwards)
    ));
}

#[test]
fn peers_beyond_the_limit_are_refused_and_others_unaffected() {
    let srv = Running::start(1, 1);
    let (c1, peers1) = srv.connect(1);
    srv.next_event();
    match Client::connect(&srv.path, WAIT) {
        Err(ClientError::Closed) => {}
        other => panic!("second client: {other:?}"),
    }
    assert!(matches!(srv.next_event(), Event::Refused { .. }));
    srv.irq.interrupt(c1.id(), 0).unwrap();
    assert_eq!(wait_signalled(&peers1[&c1.id()][0]), 1);
    assert_eq!(srv.irq.peers(), [c1.id()]);
}

#[test]
fn a_client_that_talks_is_dropped_alone() {
    let srv = Running::start(1, 3);
    let (good, peers) = srv.connect(1);
    srv.next_event();
    let (bad, _) = srv.connect(1);
    srv.next_event();
    // Drain the announcement of `bad` to `good`.
    assert!(matches!(good.next_update().unwrap(), Update::Vector { .. }));
    // A connect-and-vanish is harmless: refused if it is gone before its
    // setup is sent, else admitted and then dropped.
    drop(UnixStream::connect(&srv.path).unwrap());
    srv.next_matching(|e| matches!(e, Event::Refused { .. } | Event::Disconnected { .. }));
    // Clients never send: one that does is dropped.
    let bad_stream = bad_socket(&bad);
    (&bad_stream).write_all(b"hello").unwrap();
    srv.next_matching(|e| matches!(e, Event::Disconnected { peer, .. } if *peer == bad.id()));
    // `good` hears that `bad` left and still gets interrupts.
    loop {
        match good.next_update().unwrap() {
            Update::Gone { peer } if peer == bad.id() => break,
            Update::Gone { .. } | Update::Vector { .. } => {}
        }
    }
    srv.irq.interrupt(good.id(), 0).unwrap();
    assert_eq!(wait_signalled(&peers[&good.id()][0]), 1);
}

/// The client's socket, to misbehave on.
fn bad_socket(c: &Client) -> UnixStream {
    let fd = c.socket().as_fd().try_clone_to_owned().unwrap();
    UnixStream::from(fd)
}

#[test]
fn binding_checks_the_socket_path() {
    let srv = Running::start(1, 1);
    let shm = SharedMemory::memfd("x", 4096).unwrap();
    match IvshmemServer::bind(&srv.path, shm, ServerConfig::default()) {
        Err(ServerError::InUse(_)) => {}
        other => panic!("{other:?}"),
    }
    let file = std::env::temp_dir().join(format!("fairgpu-ivshmem-file-{}", std::process::id()));
    std::fs::write(&file, b"x").unwrap();
    let shm = SharedMemory::memfd("x", 4096).unwrap();
    match IvshmemServer::bind(&file, shm, ServerConfig::default()) {
        Err(ServerError::NotASocket(_)) => {}
        other => panic!("{other:?}"),
    }
    std::fs::remove_file(&file).unwrap();
    let shm = SharedMemory::memfd("x", 4096).unwrap();
    let cfg = ServerConfig {
        vectors: 0,
        ..ServerConfig::default()
    };
    assert!(matches!(
        IvshmemServer::bind(&file, shm, cfg),
        Err(ServerError::Config {
            field: "vectors",
            ..
        })
    ));
}
