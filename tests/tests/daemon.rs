//! `fairgpu serve`: configuration errors, two VMs on SimGpu served by their
//! own workers, `fairgpu status`, a killed worker (its guests fail at once,
//! it is restarted, the other VM is untouched) and a clean SIGTERM.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fairgpu_daemon::control::Status;
use fairgpu_frontend::cuda::Cuda;
use fairgpu_frontend::{CallError, Channel, WaitConfig};
use fairgpu_protocol::layout::ChannelFailure;
use fairgpu_protocol::Opcode;
use fairgpu_tests::{
    claim, fairgpu_bin, run_command, signal_process, status, vm, wait_config, wait_for_status,
    wait_until, with_timeout, Setup, TempDir,
};
use fairgpu_worker::stats::WorkerState;

/// Generous bound on anything the daemon or a guest should do promptly.
const GUARD: Duration = Duration::from_secs(20);
/// How long a `fairgpu` command may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);

/// fairgpu's own kernels; SimGpu models `fairgpu_spin(ns)` as `ns` of
/// device time.
const SPIN_PTX: &str = include_str!("../../benches/kernels/fairgpu.ptx");
/// How long the spin kernel runs.
const SPIN_NS: u64 = 2_000_000;

fn nop(ch: &mut Channel, v: u64) {
    let r = ch.call(Opcode::Nop, [v, 0, 0, 0, 0]).expect("a no-op call");
    assert_eq!(r.vals[0], v);
}

fn fairgpu(args: &[&str]) -> std::process::Output {
    run_command(Command::new(fairgpu_bin()).args(args), CLI_TIMEOUT)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn configuration_errors_fail_serve_with_a_message_naming_the_problem() {
    let dir = TempDir::new("daemon_config_errors");
    let good = format!(
        "[daemon]\ncontrol_socket = {:?}\nexecutor = \"sim\"\n\
         [[vm]]\nname = \"vm1\"\nmemory = \"1GiB\"\nregion = \"/dev/shm/fairgpu-never-created-1\"\n",
        dir.join("c.sock").display().to_string()
    );
    let second =
        "[[vm]]\nname = \"vm1\"\nmemory = 1\nregion = \"/dev/shm/fairgpu-never-created-2\"\n";
    let cases: Vec<(String, &[&str])> = vec![
        (
            good.replace("memory = \"1GiB\"", "memory = \"1GiB\"\ncolour = \"red\""),
            &["colour", "vm1"],
        ),
        (format!("{good}{second}"), &["vm1", "unique"]),
        (
            good.replace("\"1GiB\"", "\"12 parsecs\""),
            &["vm1", "memory", "parsecs"],
        ),
        (
            good.replace("name = \"vm1\"", "name = \"vm1\"\nweight = 0"),
            &["vm1", "weight = 0"],
        ),
        (
            good.replace("name = \"vm1\"", "name = \"vm1\"\nchannels = 300"),
            &["vm1", "channels = 300"],
        ),
        (
            good.replace("\"sim\"", "\"quantum\""),
            &["executor", "quantum"],
        ),
    ];
    for (i, (cfg, want)) in cases.iter().enumerate() {
        let path = dir.join(&format!("bad{i}.toml"));
        std::fs::write(&path, cfg).unwrap();
        let out = fairgpu(&["serve", "--config", path.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "case {i} accepted:\n{cfg}");
        for w in *want {
            assert!(err.contains(w), "case {i}: {w:?} missing from: {err}");
        }
        assert!(
            err.contains(&format!("bad{i}.toml")),
            "names the file: {err}"
        );
    }
    assert!(!dir.join("c.sock").exists(), "nothing was started");

    let missing = fairgpu(&["serve", "--config", "/nonexistent/fairgpu.toml"]);
    assert!(!missing.status.success());
    assert!(text(&missing.stderr).contains("/nonexistent/fairgpu.toml"));

    // The shipped example is valid.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/fairgpu.toml");
    let out = fairgpu(&["serve", "--check", "--config", example]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("configuration OK") && stdout.contains("vm1"),
        "{stdout}"
    );
}

#[test]
fn two_vms_serve_their_guests_and_status_shows_them() {
    let setup = Setup::new("daemon_two_vms", &[("alpha", 2, 2), ("beta", 1, 3)]);
    let d = setup.start();
    let (ra, rb) = (&setup.regions[0], &setup.regions[1]);

    let mut a = claim(ra, wait_config());
    let mut b1 = claim(rb, wait_config());
    let b2 = claim(rb, wait_config());
    for i in 0..100 {
        nop(&mut a, i);
        nop(&mut b1, i + 1000);
    }
    // CUDA calls go to the VM's worker and count against its quota.
    let mut cuda = Cuda::new(b2);
    assert_eq!(cuda.device_name(0).unwrap(), "daemon-test SimGpu");
    let ptr = cuda.mem_alloc(1 << 20).unwrap();
    assert_ne!(ptr, 0);
    // GPU time is modelled by SimGpu and charged to the VM that used it.
    let module = cuda.module_load(SPIN_PTX.as_bytes()).unwrap();
    let spin = cuda.module_get_function(module, "fairgpu_spin").unwrap();
    let params = spin.pack(&[&SPIN_NS.to_le_bytes()]).unwrap();
    cuda.launch(spin.handle, [1, 1, 1], [1, 1, 1], 0, 0, &params)
        .unwrap();
    cuda.ctx_synchronize().unwrap();

    let s = wait_for_status(&d, "channels, memory and GPU time to be published", |s| {
        let (va, vb) = (vm(s, "alpha"), vm(s, "beta"));
        va.channels_used == 1
            && vb.channels_used == 2
            && vb.mem_used == 1 << 20
            && vb.gpu_time_ns >= SPIN_NS
            // Call counts are published by the workers on their own cadence.
            && va.calls >= 100
            && vb.calls >= 100
    });
    assert_eq!(vm(&s, "alpha").gpu_time_ns, 0, "alpha ran no kernel");
    let (va, vb) = (vm(&s, "alpha"), vm(&s, "beta"));
    assert_eq!((va.weight, va.channels_total), (2, 2));
    assert_eq!((vb.weight, vb.channels_total), (1, 3));
    assert_eq!((va.mem_quota, vb.mem_quota), (64 << 20, 64 << 20));
    // The module beta loaded is held on the host, within its budget.
    assert_eq!((va.host_mem_limit, vb.host_mem_limit), (1 << 30, 1 << 30));
    assert!(
        vb.host_mem_used >= SPIN_PTX.len() as u64 && vb.host_mem_used < 1 << 30,
        "{}",
        vb.host_mem_used
    );
    assert_eq!(vb.contexts, 1);
    assert_eq!(va.restarts + vb.restarts, 0);
    assert_ne!(va.worker_pid, vb.worker_pid, "one worker per VM");
    assert_eq!(s.daemon.executor, "sim");
    assert_eq!(s.daemon.pid, d.pid());

    // The command line shows the same, as JSON and as a table, found
    // through --socket or through the configuration file.
    let socket = setup.socket.to_str().unwrap();
    let out = fairgpu(&["status", "--json", "--socket", socket]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Status = serde_json::from_slice(&out.stdout).expect("status --json is JSON");
    assert_eq!(vm(&json, "alpha").channels_used, 1);
    assert_eq!(vm(&json, "beta").channels_used, 2);
    assert_eq!(vm(&json, "beta").worker_pid, vb.worker_pid);
    let out = fairgpu(&["status", "--config", setup.config.to_str().unwrap()]);
    let table = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(table.contains("CHANNELS"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("alpha") && l.contains("1/2")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("beta") && l.contains("2/3") && l.contains("1 MiB / 64 MiB")),
        "{table}"
    );

    // A second daemon on the same control socket refuses to start and
    // leaves the first one's regions alone.
    let out = fairgpu(&["serve", "--config", setup.config.to_str().unwrap()]);
    assert!(!out.status.success(), "a second daemon started");
    assert!(
        text(&out.stderr).contains("already listening"),
        "{}",
        text(&out.stderr)
    );
    nop(&mut a, 7);
    assert_eq!(vm(&status(&d), "alpha").worker_pid, va.worker_pid);

    // Releasing a channel shows too.
    drop(a);
    wait_for_status(&d, "alpha's channel to be released", |s| {
        vm(s, "alpha").channels_used == 0
    });
}

#[test]
fn a_killed_worker_fails_its_guests_and_is_restarted_without_touching_the_other_vm() {
    let setup = Setup::new(
        "daemon_worker_crash",
        &[("victim", 1, 2), ("bystander", 1, 2)],
    );
    let d = setup.start();
    let before = status(&d);
    let victim_pid = vm(&before, "victim").worker_pid;
    let bystander_pid = vm(&before, "bystander").worker_pid;

    // The bystander's guest calls throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let bystander = {
        let (stop, calls) = (stop.clone(), calls.clone());
        let region = setup.regions[1].clone();
        std::thread::spawn(move || {
            let mut ch = claim(&region, wait_config());
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let r = ch.call(Opcode::Nop, [i, 0, 0, 0, 0]).map(|r| r.vals[0]);
                assert_eq!(r, Ok(i), "bystander call {i}");
                calls.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        })
    };

    // The victim's guest waits for a heartbeat far longer than the test
    // allows, so only the daemon's failure report can end its call.
    let patient = WaitConfig {
        host_timeout: Some(Duration::from_secs(600)),
        ..wait_config()
    };
    let mut victim = claim(&setup.regions[0], patient);
    nop(&mut victim, 1);

    // Freeze the worker so the next call stays pending, then kill it.
    signal_process(victim_pid, libc::SIGSTOP);
    let pending = std::thread::spawn(move || {
        let r = victim.call(Opcode::Nop, [2, 0, 0, 0, 0]);
        (victim, r)
    });
    signal_process(victim_pid, libc::SIGKILL);
    let (mut victim, res) = with_timeout("the pending call to fail", GUARD, move || {
        pending.join().expect("the pending call's thread")
    });
    let crashed = CallError::ChannelFailed {
        channel: victim.index(),
        reason: ChannelFailure::WorkerCrashed.to_string(),
    };
    assert_eq!(res.map(|r| r.vals[0]), Err(crashed.clone()));
    assert_eq!(victim.call(Opcode::Nop, [3, 0, 0, 0, 0]), Err(crashed));

    // The daemon restarts the worker.
    let after = wait_for_status(&d, "the victim's worker to be restarted", |s| {
        let v = vm(s, "victim");
        v.restarts == 1
            && v.state == WorkerState::Running
            && v.worker_pid != 0
            && v.worker_pid != victim_pid
    });
    assert!(
        d.log().contains("victim") && d.log().contains("exited unexpectedly"),
        "the crash is logged with the VM's name:\n{}",
        d.log()
    );

    // The new worker does not resume the broken claim, but a fresh claim
    // works; releasing the broken one frees its channel.
    let mut fresh = claim(&setup.regions[0], wait_config());
    assert_ne!(
        fresh.index(),
        victim.index(),
        "the broken claim still holds its channel"
    );
    nop(&mut fresh, 4);
    drop(victim);
    drop(fresh);
    let mut again = claim(&setup.regions[0], wait_config());
    nop(&mut again, 5);

    // The bystander never noticed.
    let seen = calls.load(Ordering::Relaxed);
    wait_until("the bystander to keep calling", GUARD, || {
        (calls.load(Ordering::Relaxed) > seen + 10).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    with_timeout("the bystander to stop", GUARD, move || {
        bystander
            .join()
            .expect("the bystander's calls all succeeded")
    });
    let b = vm(&after, "bystander");
    assert_eq!((b.restarts, b.worker_pid), (0, bystander_pid));
    assert_eq!(vm(&status(&d), "bystander").worker_pid, bystander_pid);
}

#[test]
fn sigterm_stops_the_daemon_and_removes_its_files() {
    let setup = Setup::new("daemon_sigterm", &[("one", 1, 1), ("two", 1, 1)]);
    let mut d = setup.start();
    let mut ch = claim(&setup.regions[0], wait_config());
    let index = ch.index();
    nop(&mut ch, 1);
    let s = status(&d);
    let sim_device = s.daemon.sim_device.clone().expect("a SimGpu device file");
    assert!(s.daemon.stats_file.exists() && sim_device.exists());
    for r in &setup.regions {
        assert!(r.exists());
    }

    let exit = d.terminate();
    assert!(exit.success(), "daemon exit status after SIGTERM: {exit}");
    for r in &setup.regions {
        assert!(!r.exists(), "{} left behind", r.display());
    }
    assert!(!setup.socket.exists(), "control socket left behind");
    assert!(!s.daemon.stats_file.exists(), "stats file left behind");
    assert!(!sim_device.exists(), "SimGpu device file left behind");
    let left: Vec<_> = std::fs::read_dir(setup.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("fairgpu.toml")]);

    // The guest learns that the host shut down.
    let res = with_timeout("a call after shutdown", GUARD, move || {
        ch.call(Opcode::Nop, [2, 0, 0, 0, 0])
    });
    assert_eq!(
        res,
        Err(CallError::ChannelFailed {
            channel: index,
            reason: ChannelFailure::HostShutdown.to_string(),
        })
    );

    // `fairgpu status` says clearly that no daemon answers.
    let out = fairgpu(&["status", "--socket", setup.socket.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("is `fairgpu serve` running?"));
}

/// The attack: a local guest opens its region the way it must to map it
/// (read-write) and truncates it. With a region file, the worker died of
/// SIGBUS at its next access, then the daemon (failing the channels), and
/// every VM with it. Now the region is a sealed memfd handed over by the
/// region socket: the truncation fails for the guest, and both VMs, the
/// attacker's included, go on being served by the workers they had.
#[test]
fn a_guest_truncating_its_region_cannot_take_down_the_daemon() {
    use std::os::unix::fs::FileTypeExt;
    let setup = Setup::new(
        "daemon_truncate",
        &[("attacker", 1, 2), ("bystander", 1, 2)],
    );
    let d = setup.start();
    let before = status(&d);
    let mut bystander = claim(&setup.regions[1], wait_config());
    nop(&mut bystander, 1);
    let mut attacker = claim(&setup.regions[0], wait_config());
    nop(&mut attacker, 1);

    // Whatever is at the region path, get a writable descriptor of the
    // region's memory, as a guest must to map it, and shrink it.
    let path = &setup.regions[0];
    let memory = if std::fs::metadata(path).unwrap().file_type().is_socket() {
        fairgpu_frontend::map::receive_region(path).expect("the region from its socket")
    } else {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("the region file, read-write")
    };
    let full = memory.metadata().unwrap().len();
    let e = memory
        .set_len(4096)
        .expect_err("a guest truncated its region");
    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
    let e = memory
        .set_len(full * 2)
        .expect_err("a guest grew its region");
    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
    assert_eq!(memory.metadata().unwrap().len(), full);

    // Everyone is still served, by the same workers.
    nop(&mut attacker, 2);
    nop(&mut bystander, 2);
    let mut again = claim(&setup.regions[0], wait_config());
    nop(&mut again, 3);
    let after = status(&d);
    for name in ["attacker", "bystander"] {
        let (b, a) = (vm(&before, name), vm(&after, name));
        assert_eq!((a.restarts, a.worker_pid), (0, b.worker_pid), "vm {name}");
    }
}

/// The attack: a guest's channels each ask the worker to hold a large
/// buffer for them, cheaply: a 4 KiB CopyIn at the top of the transport's
/// 64 MiB scratch space, or a module image announced at 256 MiB and staged
/// a chunk at a time. Neither counted against anything, so one VM's 256
/// channels could make its worker hold gigabytes. Both are now charged to
/// the VM's host memory: the request that would pass it fails with
/// CUDA_ERROR_OUT_OF_MEMORY, the worker carries on, and a channel's release
/// gives its buffers back.
#[test]
fn staging_and_scratch_buffers_cannot_grow_the_worker_past_the_vms_host_memory() {
    const LIMIT: u64 = 32 << 20;
    const HIGH: u64 = 24 << 20;
    let setup = Setup::new("daemon_host_memory", &[("hoarder", 1, 4)]);
    // The only [[vm]] table is the last one: this line belongs to it.
    let mut config = std::fs::read_to_string(&setup.config).unwrap();
    config.push_str(&format!("host_memory = {LIMIT}\n"));
    std::fs::write(&setup.config, config).unwrap();
    let d = setup.start();
    let chunk = vec![0x5au8; 4096];
    let oom = CallError::Cuda(fairgpu_protocol::Status::OUT_OF_MEMORY);

    let mut a = claim(&setup.regions[0], wait_config());
    a.send_bulk(Opcode::CopyIn, [HIGH, 0, 0, 0, 0], 0, &chunk)
        .expect("a scratch buffer within the budget");
    let mut b = claim(&setup.regions[0], wait_config());
    assert_eq!(
        b.send_bulk(Opcode::CopyIn, [HIGH, 0, 0, 0, 0], 0, &chunk)
            .err(),
        Some(oom.clone()),
        "a second channel's scratch buffer past the budget"
    );
    assert_eq!(
        b.send_bulk(Opcode::ModuleStage, [0, 16 << 20, 0, 0, 0], 0, &chunk)
            .err(),
        Some(oom.clone()),
        "a staging buffer past the budget"
    );
    let s = wait_for_status(&d, "the scratch buffer counted", |s| {
        vm(s, "hoarder").host_mem_used > HIGH
    });
    let v = vm(&s, "hoarder");
    assert!(v.host_mem_used <= LIMIT, "{} > {LIMIT}", v.host_mem_used);

    // The attacker's first channel goes: its buffer is given back, and the
    // module image that did not fit now stages.
    drop(a);
    wait_until("room for the staging buffer", GUARD, || {
        match b.send_bulk(Opcode::ModuleStage, [0, 16 << 20, 0, 0, 0], 0, &chunk) {
            Ok(_) => Some(()),
            Err(e) if e == oom => None,
            Err(e) => panic!("staging failed otherwise: {e}"),
        }
    });
    nop(&mut b, 7);
    let s = status(&d);
    let v = vm(&s, "hoarder");
    assert_eq!((v.restarts, v.state), (0, WorkerState::Running));
}
