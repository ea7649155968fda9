//! Long kernels end to end on SimGpu (docs/long-kernels.md): a launch
//! predicted to take longer than the threshold runs as parts of its grid
//! and computes exactly what the whole launch computes; a kernel that runs
//! past the VM's runaway guard ends there with a sticky
//! CUDA_ERROR_LAUNCH_TIMEOUT for its own context only, counted in
//! `status`.

use fairgpu_frontend::cuda::Cuda;
use fairgpu_protocol::Status;
use fairgpu_tests::{
    claim, f32_bytes, f32s, guest_lib_dir, status, vm, wait_config, wait_for_published,
    wait_for_status, DaemonProcess, Setup, DEFAULT_SIM,
};

/// fairgpu's own kernels: `fairgpu_axpy` (executed) and `fairgpu_spin`.
const KERNELS_PTX: &str = include_str!("../../benches/kernels/fairgpu.ptx");
const MS: u64 = 1_000_000;

/// A daemon whose configuration has the extra `[daemon]` lines `daemon`
/// and, per VM, the extra lines of `vms`.
fn start(test: &str, daemon: &str, vms: &[(&str, &str)]) -> (DaemonProcess, Setup) {
    let setup = configure(test, "sim", daemon, vms);
    (setup.start(), setup)
}

/// The configuration of [`start`] on executor `executor`, not started.
fn configure(test: &str, executor: &str, daemon: &str, vms: &[(&str, &str)]) -> Setup {
    let names: Vec<(&str, u32, u32)> = vms.iter().map(|(n, _)| (*n, 1, 8)).collect();
    // fairgpu_axpy executes and is modelled as 200 µs per launch (a part
    // takes its blocks' share).
    let sim =
        format!("{DEFAULT_SIM}\n[[sim.kernels]]\nname = \"fairgpu_axpy\"\nduration_us = 200.0\n");
    let setup = Setup::with_executor(test, executor, &sim, &names);
    let mut text = std::fs::read_to_string(&setup.config).unwrap();
    text = text.replacen("[daemon]\n", &format!("[daemon]\n{daemon}\n"), 1);
    for (name, extra) in vms {
        let at = format!("name = {name:?}\n");
        text = text.replacen(&at, &format!("{at}{extra}\n"), 1);
    }
    std::fs::write(&setup.config, text).unwrap();
    setup
}

#[test]
fn a_sliced_launch_computes_what_the_whole_launch_computes() {
    // Every launch longer than 50 µs of modelled time is cut into parts
    // of about 25 µs, at least 8 blocks.
    let (d, setup) = start(
        "slicing",
        "kernel_slice_ms = 0.05\nkernel_slice_blocks = 8",
        &[("vm1", "")],
    );
    let mut cu = Cuda::new(claim(&setup.regions[0], wait_config()));
    let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let axpy = cu.module_get_function(m, "fairgpu_axpy").unwrap();
    // 1000 blocks of 32 threads over 31,990 floats: the last block is
    // partly out of range, and the box the parts cut ends mid-grid.
    let n = 31_990usize;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let y0: Vec<f32> = (0..n).map(|i| (i as f32 * 0.11).cos()).collect();
    let px = cu.mem_alloc(4 * n as u64).unwrap();
    let py = cu.mem_alloc(4 * n as u64).unwrap();
    cu.memcpy_htod(px, &f32_bytes(&x)).unwrap();
    cu.memcpy_htod(py, &f32_bytes(&y0)).unwrap();
    let a = 1.5f32;
    let params = axpy
        .pack(&[
            &py.to_le_bytes(),
            &px.to_le_bytes(),
            &a.to_le_bytes(),
            &(n as u32).to_le_bytes(),
        ])
        .unwrap();
    // The first launch has no history and runs whole; the next ones are
    // predicted from it and sliced.
    for _ in 0..3 {
        cu.launch(axpy.handle, [1000, 1, 1], [32, 1, 1], 0, 0, &params)
            .unwrap();
    }
    assert_eq!(cu.ctx_synchronize(), Ok(()));
    let mut out = vec![0u8; 4 * n];
    cu.memcpy_dtoh(&mut out, py, 0).unwrap();
    let got = f32s(&out);
    for i in 0..n {
        let mut want = y0[i];
        for _ in 0..3 {
            want = a.mul_add(x[i], want);
        }
        assert_eq!(got[i].to_bits(), want.to_bits(), "y[{i}]");
    }
    // Every part ran before the synchronization returned; the worker
    // publishes its counts between requests.
    let st = wait_for_published(&d, "vm1");
    let l = vm(&st, "vm1").long_kernels;
    assert_eq!(l.sliced, 2, "the first launch ran whole: {l:?}");
    // 200 µs over 1000 blocks at half the 50 µs threshold per part: 125
    // blocks, 8 parts.
    assert_eq!(l.parts, 2 * 8, "{l:?}");
    assert_eq!(l.runaways, 0);

    // In a graph launch (one request), a sliced kernel's parts all run
    // before the step after it: the copy takes y after the fourth axpy
    // whole, and the fifth comes after the copy.
    let pz = cu.mem_alloc(4 * n as u64).unwrap();
    cu.channel().begin_batch();
    cu.launch(axpy.handle, [1000, 1, 1], [32, 1, 1], 0, 0, &params)
        .unwrap();
    cu.memcpy_dtod_async(pz, py, 4 * n as u64, 0).unwrap();
    cu.launch(axpy.handle, [1000, 1, 1], [32, 1, 1], 0, 0, &params)
        .unwrap();
    cu.channel().end_batch().unwrap();
    assert_eq!(cu.ctx_synchronize(), Ok(()));
    for (ptr, rounds) in [(pz, 4), (py, 5)] {
        cu.memcpy_dtoh(&mut out, ptr, 0).unwrap();
        let got = f32s(&out);
        for i in 0..n {
            let mut want = y0[i];
            for _ in 0..rounds {
                want = a.mul_add(x[i], want);
            }
            assert_eq!(got[i].to_bits(), want.to_bits(), "after {rounds}: [{i}]");
        }
    }
    let st = wait_for_published(&d, "vm1");
    let l = vm(&st, "vm1").long_kernels;
    assert_eq!((l.sliced, l.parts), (4, 4 * 8), "{l:?}");
}

#[test]
fn the_runaway_guard_ends_an_over_long_kernel_for_its_own_context_only() {
    // vm1 may hold the device for 20 ms per request; vm2 keeps the
    // daemon's default (seconds).
    let (d, setup) = start(
        "runaway",
        "",
        &[("vm1", "max_request_ms = 20"), ("vm2", "")],
    );
    let mut eater = Cuda::new(claim(&setup.regions[0], wait_config()));
    let mut other = Cuda::new(claim(&setup.regions[1], wait_config()));
    let mut same_vm = Cuda::new(claim(&setup.regions[0], wait_config()));
    let kernels: Vec<_> = [&mut eater, &mut other, &mut same_vm]
        .into_iter()
        .map(|cu| {
            let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
            cu.module_get_function(m, "fairgpu_spin").unwrap()
        })
        .collect();
    // Within the limit: fine.
    eater
        .launch(
            kernels[0].handle,
            [1; 3],
            [1; 3],
            0,
            0,
            &(5 * MS).to_le_bytes(),
        )
        .unwrap();
    assert_eq!(eater.ctx_synchronize(), Ok(()));
    // A minute of device time: ended at 20 ms, sticky.
    eater
        .launch(
            kernels[0].handle,
            [1; 3],
            [1; 3],
            0,
            0,
            &(60_000 * MS).to_le_bytes(),
        )
        .unwrap();
    let timeout = Status(702);
    let r = eater.ctx_synchronize();
    assert!(
        matches!(&r, Err(e) if e.status() == timeout),
        "LAUNCH_TIMEOUT at the synchronize, got {r:?}"
    );
    assert!(eater.mem_alloc(16).is_err(), "the context stays failed");
    // The other VM and the other context of the same VM are untouched.
    for (cu, k) in [(&mut other, &kernels[1]), (&mut same_vm, &kernels[2])] {
        cu.launch(k.handle, [1; 3], [1; 3], 0, 0, &MS.to_le_bytes())
            .unwrap();
        assert_eq!(cu.ctx_synchronize(), Ok(()));
        let p = cu.mem_alloc(16).unwrap();
        cu.memcpy_htod(p, &[7; 16]).unwrap();
        let mut back = [0u8; 16];
        cu.memcpy_dtoh(&mut back, p, 0).unwrap();
        assert_eq!(back, [7; 16]);
    }
    let st = wait_for_status(&d, "the runaway to be published", |s| {
        vm(s, "vm1").long_kernels.runaways >= 1
    });
    assert_eq!(vm(&st, "vm1").long_kernels.runaways, 1);
    assert_eq!(vm(&st, "vm2").long_kernels.runaways, 0);
    // Its grant lasted until the guard ended the kernel: the others waited
    // that long, and status says so.
    let held = vm(&st, "vm1").sched.as_ref().map(|s| s.longest_hold_ns);
    assert!(
        held.is_some_and(|ns| ns >= 20 * MS),
        "vm1 held a grant through the 20 ms limit: {held:?}"
    );
    let text = status(&d);
    assert_eq!(
        vm(&text, "vm1").restarts,
        0,
        "SimGpu ends the kernel itself"
    );
}

/// On CudaExecutor the driver cannot end a running kernel short of the
/// process's exit (docs/long-kernels.md). Run here through two hops: a
/// daemon whose workers use CudaExecutor with fairgpu's own libcuda.so.1,
/// forwarding to a SimGpu daemon whose VM has no guard, where a 20 s
/// kernel stands for one that never ends.
#[test]
fn a_runaway_kernel_on_cuda_executor_ends_its_worker_and_fails_its_channel_with_launch_timeout() {
    let lib = guest_lib_dir();
    let (_backend_daemon, backend) =
        start("runaway_backend", "", &[("backend", "max_request_ms = 0")]);
    let front = configure(
        "runaway_front",
        "cuda",
        "",
        &[("vm1", "max_request_ms = 200"), ("vm2", "")],
    );
    let d = front.start_with_env(&[
        ("FAIRGPU_REGION", backend.regions[0].as_os_str()),
        ("LD_LIBRARY_PATH", lib.as_os_str()),
    ]);
    assert_eq!(status(&d).daemon.executor, "cuda");
    let pid = vm(&status(&d), "vm1").worker_pid;
    let mut cu = Cuda::new(claim(&front.regions[0], wait_config()));
    let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let spin = cu.module_get_function(m, "fairgpu_spin").unwrap();
    cu.launch(spin.handle, [1; 3], [1; 3], 0, 0, &MS.to_le_bytes())
        .unwrap();
    assert_eq!(cu.ctx_synchronize(), Ok(()), "within the limit");
    cu.launch(
        spin.handle,
        [1; 3],
        [1; 3],
        0,
        0,
        &(20_000 * MS).to_le_bytes(),
    )
    .unwrap();
    let timeout = Status(702);
    let r = cu.ctx_synchronize();
    assert!(
        matches!(&r, Err(e) if e.status() == timeout),
        "LAUNCH_TIMEOUT at the synchronize, got {r:?}"
    );
    let r = cu.mem_alloc(16);
    assert!(
        matches!(&r, Err(e) if e.status() == timeout),
        "and at every later call, got {r:?}"
    );
    drop(cu);
    // A fresh worker serves the VM; the runaway is counted.
    let st = wait_for_status(&d, "a fresh worker for vm1", |s| {
        let v = vm(s, "vm1");
        v.worker_pid != 0 && v.worker_pid != pid && v.long_kernels.runaways == 1
    });
    assert_eq!(vm(&st, "vm2").long_kernels.runaways, 0);
    // Both VMs serve new guests (copies: the backend's device is still
    // busy with the 20 s kernel's modelled time).
    for region in [&front.regions[0], &front.regions[1]] {
        let mut cu = Cuda::new(claim(region, wait_config()));
        let p = cu.mem_alloc(16).unwrap();
        cu.memcpy_htod(p, &[9; 16]).unwrap();
        let mut back = [0u8; 16];
        cu.memcpy_dtoh(&mut back, p, 0).unwrap();
        assert_eq!(back, [9; 16]);
    }
}

/// FairGV's preemptive mode (`preemptive = true`): a holder still busy
/// past its slice (a 2 s kernel against 6 ms slices) is switched out, so
/// another VM is served while the long kernel still runs, and the long
/// VM is charged the whole kernel once it ends. Without the mode (and
/// without preemption on wake) the holder keeps its grant until its
/// kernel ends.
#[test]
fn preemptive_mode_serves_another_vm_while_an_over_long_kernel_runs() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    for preemptive in [true, false] {
        let (d, setup) = start(
            &format!("preemptive_{preemptive}"),
            // Without preemption on wake, which vm2's waking may trigger
            // at vm1's next request: this test is about slices alone.
            &format!("preemptive = {preemptive}\nslice_ms = 6\nwake_preempt = false"),
            &[("vm1", "max_request_ms = 0"), ("vm2", "")],
        );
        assert_eq!(status(&d).daemon.preemptive, preemptive);
        let mut long = Cuda::new(claim(&setup.regions[0], wait_config()));
        let mut other = Cuda::new(claim(&setup.regions[1], wait_config()));
        let m = long.module_load(KERNELS_PTX.as_bytes()).unwrap();
        let spin = long.module_get_function(m, "fairgpu_spin").unwrap();
        let buf = other.mem_alloc(16).unwrap();
        long.launch(
            spin.handle,
            [1; 3],
            [1; 3],
            0,
            0,
            &(2_000 * MS).to_le_bytes(),
        )
        .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let waiter = {
            let done = done.clone();
            std::thread::spawn(move || {
                let r = long.ctx_synchronize();
                // Relaxed: joined before the final load.
                done.store(true, Ordering::Relaxed);
                r
            })
        };
        wait_for_status(&d, "vm1 to hold the GPU with its kernel", |s| {
            vm(s, "vm1")
                .sched
                .as_ref()
                .is_some_and(|v| v.state == "running")
        });
        // vm2 launches a kernel (device work needs the grant): in
        // preemptive mode it is granted while vm1's kernel still runs (on
        // SimGpu, a non-preemptive model, its kernel then queues behind).
        let grants = |s: &fairgpu_daemon::control::Status| {
            vm(s, "vm2").sched.as_ref().map_or(0, |v| v.grants)
        };
        let before = grants(&status(&d));
        let m2 = other.module_load(KERNELS_PTX.as_bytes()).unwrap();
        let spin2 = other.module_get_function(m2, "fairgpu_spin").unwrap();
        other
            .launch(spin2.handle, [1; 3], [1; 3], 0, 0, &MS.to_le_bytes())
            .unwrap();
        wait_for_status(&d, "a grant for vm2", |s| grants(s) > before);
        // Relaxed: a flag only this test's threads touch.
        let long_still_running = !done.load(Ordering::Relaxed);
        other.memcpy_htod(buf, &[3; 16]).unwrap();
        let mut back = [0u8; 16];
        other.memcpy_dtoh(&mut back, buf, 0).unwrap();
        assert_eq!(back, [3; 16]);
        assert_eq!(waiter.join().unwrap(), Ok(()));
        let st = wait_for_status(&d, "vm1's release", |s| {
            vm(s, "vm1")
                .sched
                .as_ref()
                .is_some_and(|v| v.state != "running")
        });
        let v1 = vm(&st, "vm1").sched.clone().unwrap();
        if preemptive {
            assert!(
                long_still_running,
                "vm2 was granted the GPU while vm1's kernel ran"
            );
            assert!(v1.revoked >= 1, "vm1 was switched out: {v1:?}");
            assert!(
                v1.charged_ns >= 2_000 * MS,
                "vm1 is charged its whole kernel: {v1:?}"
            );
        } else {
            assert_eq!(v1.revoked, 0, "{v1:?}");
            assert!(v1.longest_hold_ns >= 2_000 * MS, "{v1:?}");
        }
    }
}
