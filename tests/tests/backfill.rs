//! Backfilling end to end on SimGpu (`[daemon] backfill`, docs/fairness.md,
//! *Backfilling*): while an interactive VM holds the GPU and waits on its
//! guest with its own work done, another VM's short kernels run in the gap,
//! are charged to that VM, and compute exactly what they compute without
//! backfilling.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fairgpu_frontend::cuda::Cuda;
use fairgpu_tests::{
    claim, f32_bytes, f32s, status, vm, wait_config, wait_for_status, Setup, DEFAULT_SIM,
};

/// fairgpu's own kernels: `fairgpu_axpy` (executed) and `fairgpu_spin`.
const KERNELS_PTX: &str = include_str!("../../benches/kernels/fairgpu.ptx");
const MS: u64 = 1_000_000;

#[test]
fn a_short_kernel_vm_fills_an_interactive_holders_gaps_and_pays_for_them() {
    // fairgpu_axpy executes and is modelled as 200 µs per launch.
    let sim =
        format!("{DEFAULT_SIM}\n[[sim.kernels]]\nname = \"fairgpu_axpy\"\nduration_us = 200.0\n");
    let setup = Setup::with_sim("backfill", &sim, &[("vm1", 1, 2), ("vm2", 1, 2)]);
    let text = std::fs::read_to_string(&setup.config).unwrap();
    // vm1's holder spins through its guest's 3 ms pauses (a budget of
    // 50 ms), so it keeps the grant and goes quiet in each; a backfilled
    // request may take up to 1 ms by its VM's history.
    let daemon = "backfill = true\nbackfill_max_us = 1000\nspin_us = 50000\nadaptive_spin = false\nwake_preempt = false\n";
    std::fs::write(
        &setup.config,
        text.replacen("[daemon]\n", &format!("[daemon]\n{daemon}"), 1),
    )
    .unwrap();
    let d = setup.start();
    assert_eq!(status(&d).daemon.backfill_max_us, Some(1000));

    let stop = Arc::new(AtomicBool::new(false));
    // vm1: interactive, one 1 ms kernel, synchronised, then 3 ms on its
    // CPU, over and over.
    let interactive = {
        let stop = stop.clone();
        let region = setup.regions[0].clone();
        std::thread::spawn(move || {
            let mut cu = Cuda::new(claim(&region, wait_config()));
            let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
            let spin = cu.module_get_function(m, "fairgpu_spin").unwrap();
            let mut rounds = 0u32;
            // Relaxed: a stop flag; nothing else is ordered by it.
            while !stop.load(Ordering::Relaxed) && rounds < 2_000 {
                cu.launch(spin.handle, [1; 3], [1; 3], 0, 0, &MS.to_le_bytes())
                    .unwrap();
                assert_eq!(cu.ctx_synchronize(), Ok(()));
                std::thread::sleep(std::time::Duration::from_millis(3));
                rounds += 1;
            }
            rounds
        })
    };
    // vm2: batches of axpy launches, y += 2 x, on small integers (exact in
    // f32 whatever the order of rounding).
    let n = 4096usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let y0: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
    let mut cu = Cuda::new(claim(&setup.regions[1], wait_config()));
    let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let axpy = cu.module_get_function(m, "fairgpu_axpy").unwrap();
    let px = cu.mem_alloc(4 * n as u64).unwrap();
    let py = cu.mem_alloc(4 * n as u64).unwrap();
    cu.memcpy_htod(px, &f32_bytes(&x)).unwrap();
    cu.memcpy_htod(py, &f32_bytes(&y0)).unwrap();
    let a = 2.0f32;
    let params = axpy
        .pack(&[
            &py.to_le_bytes(),
            &px.to_le_bytes(),
            &a.to_le_bytes(),
            &(n as u32).to_le_bytes(),
        ])
        .unwrap();
    let backfilled = |s: &fairgpu_daemon::control::Status| {
        vm(s, "vm2").sched.as_ref().map_or(0, |v| v.backfilled)
    };
    let mut launches = 0u64;
    // Until the daemon reports backfilled kernels of vm2 (its status is
    // read between batches), at most 2,000 batches.
    while launches < 20 * 2_000 {
        for _ in 0..20 {
            cu.launch(
                axpy.handle,
                [n as u32 / 128, 1, 1],
                [128, 1, 1],
                0,
                0,
                &params,
            )
            .unwrap();
        }
        launches += 20;
        assert_eq!(cu.ctx_synchronize(), Ok(()));
        if launches.is_multiple_of(200) && backfilled(&status(&d)) >= 10 {
            break;
        }
    }
    // Relaxed: see above.
    stop.store(true, Ordering::Relaxed);
    let rounds = interactive.join().unwrap();
    assert!(rounds > 0);
    let mut out = vec![0u8; 4 * n];
    cu.memcpy_dtoh(&mut out, py, 0).unwrap();
    let got = f32s(&out);
    for i in 0..n {
        let want = y0[i] + a * x[i] * launches as f32;
        assert_eq!(got[i], want, "y[{i}] after {launches} launches");
    }
    let st = wait_for_status(&d, "vm2's backfilled kernels", |s| backfilled(s) >= 10);
    let v2 = vm(&st, "vm2").sched.clone().unwrap();
    assert!(v2.backfilled <= launches, "{v2:?}");
    // Each backfilled kernel is charged to vm2, at about its 200 µs.
    assert!(
        v2.backfill_ns >= v2.backfilled * 100_000,
        "backfilled kernels are charged their device time: {v2:?}"
    );
    assert!(v2.charged_ns >= v2.backfill_ns, "{v2:?}");
    let text = fairgpu_daemon::control::render_table(&st);
    assert!(text.contains("backfilled"), "{text}");
    assert!(text.contains("backfilling kernels up to 1000 us"), "{text}");
}
