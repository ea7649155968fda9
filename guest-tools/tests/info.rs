//! `fairgpu-guest info` against a host serving a region file from a thread
//! of this process (local mode: the futex wake path).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fairgpu_frontend::{Channel, GuestRegion, WaitConfig};
use fairgpu_guest_tools::{collect, InfoOptions};
use fairgpu_protocol::RegionConfig;
use fairgpu_worker::host::{HostRegion, ServeConfig, Server};
use fairgpu_worker::transport_ops::TransportOps;

struct Host {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Host {
    fn start(name: &str, channels: u32) -> Host {
        let path = std::env::temp_dir().join(format!("fairgpu-info-{name}-{}", std::process::id()));
        let region = HostRegion::create(
            &path,
            &RegionConfig {
                channels,
                ..RegionConfig::default()
            },
        )
        .expect("creating the region");
        let stop = Arc::new(AtomicBool::new(false));
        let server = Server::new(
            region,
            TransportOps::default(),
            ServeConfig::default(),
            stop.clone(),
        );
        let thread = Some(std::thread::spawn(move || {
            server.run();
        }));
        Host { path, stop, thread }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn opts(host: &Host, count: u32) -> InfoOptions {
    InfoOptions {
        region: Some(host.path.clone()),
        // No devices: only the named region is looked at.
        sysfs_pci: std::env::temp_dir().join("fairgpu-info-no-sysfs"),
        count,
    }
}

#[test]
fn reports_the_region_its_channels_and_the_futex_path_and_measures_round_trips() {
    let host = Host::start("local", 3);
    // Another process's claim, as seen in the region: ours, held open.
    let region = GuestRegion::open(&host.path).expect("opening the region");
    let held = Channel::claim(
        region,
        WaitConfig {
            spin: Duration::from_micros(50),
            host_timeout: Some(Duration::from_secs(5)),
        },
    )
    .expect("claiming a channel");
    let report = collect(&opts(&host, 200)).expect("a report");
    assert!(report.error.is_none(), "{:?}", report.error);
    let r = report.region.as_ref().expect("a region");
    assert_eq!(r.version, 1);
    assert_eq!(r.magic, "FAIRGPU\\x01");
    assert_eq!(r.channels.len(), 3);
    let mine = &r.channels[held.index() as usize];
    assert_eq!(mine.state, "claimed");
    assert_eq!(mine.pid, std::process::id());
    assert_eq!(mine.generation, held.generation());
    assert_eq!(
        r.channels.iter().filter(|c| c.state == "free").count(),
        2,
        "{:?}",
        r.channels
    );
    assert_eq!(r.wake.path, "futex");
    assert!(!r.wake.forced);
    let l = r.latency.as_ref().expect("round trips were measured");
    assert_eq!(l.calls, 200);
    assert_ne!(l.channel, held.index());
    assert!(l.p50_ns > 0 && l.p50_ns <= l.p99_ns && l.p99_ns <= l.max_ns);
    assert_eq!(l.interrupts, 0);

    let text = report.render();
    assert!(text.contains("wake path: futex (auto)"), "{text}");
    assert!(text.contains("200 no-op round trips"), "{text}");
    let json: serde_json::Value = serde_json::to_value(&report).expect("serializable");
    assert_eq!(json["region"]["wake"]["path"], "futex");
    assert_eq!(json["region"]["latency"]["calls"], 200);
}

#[test]
fn a_full_region_is_reported_without_a_measurement() {
    let host = Host::start("full", 1);
    let region = GuestRegion::open(&host.path).expect("opening the region");
    let _held = Channel::claim(region, WaitConfig::default()).expect("claiming the only channel");
    let report = collect(&opts(&host, 10)).expect("a report");
    let r = report.region.expect("a region");
    assert!(r.latency.is_none());
    let why = r.latency_error.expect("why nothing was measured");
    assert!(why.contains("no channel could be claimed"), "{why}");
    assert_eq!(r.channels[0].state, "claimed");
}
