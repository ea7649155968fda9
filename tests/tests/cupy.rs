//! CuPy (from PyPI, unmodified) through the guest library and a daemon on
//! SimGpu: `tests/cupy/check.py` creates arrays, copies them, runs
//! elementwise kernels and ufuncs, reductions with axes (through CUB),
//! user kernels (`RawKernel`, `ElementwiseKernel`, `ReductionKernel`),
//! streams and events, sort and cumsum, fancy indexing, and compares every
//! result with NumPy on the CPU; random numbers from NVIDIA's cuRAND (its
//! kernels on SimGpu) are compared with cuRAND's own host generator.
//!
//! CuPy comes from `scripts/cuda-toolchain.sh --with-cupy` (found through
//! `FAIRGPU_CUDA_PREFIX`, default `target/cuda-toolchain`); without it the
//! test skips with a message, unless `FAIRGPU_REQUIRE_CUPY=1` (as
//! `scripts/test.sh` sets it), which makes it fail. CuPy compiles its
//! kernels with NVRTC, as configured by default: for the device's
//! architecture, asking for a cubin. fairgpu's NVRTC shim, installed as
//! `libnvrtc.so.12` ahead of NVIDIA's, makes that PTX (SimGpu executes PTX;
//! no `CUPY_COMPILE_WITH_PTX`); into a kernel cache private to the test.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fairgpu_tests::cuda::{assert_vm_ran_and_released, cupy_env, missing, toolchain_prefix};
use fairgpu_tests::{guest_lib_dir, nvrtc_shim_dir, run_command, Setup, TempDir};

/// A SimGpu of 16 multiprocessors: cuRAND sizes its generators' state to
/// the device (on 132, seeding XORWOW's alone runs past the default
/// per-launch instruction budget).
const SIM: &str = "memory_bytes = 1073741824\nname = \"cupy SimGpu\"\nsm_count = 16\nmax_instructions = 4000000000\n";

/// How long the whole check may run (NVRTC compiles every kernel anew:
/// about 40-70 s on two cores).
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

#[test]
fn cupy_results_match_numpy() {
    let Some(env) = cupy_env() else {
        let why = format!(
            "CuPy not installed in {} (run scripts/cuda-toolchain.sh --with-cupy)",
            toolchain_prefix().display()
        );
        return missing("FAIRGPU_REQUIRE_CUPY", &why);
    };
    let setup = Setup::with_sim("cupy", SIM, &[("cupy", 1, 4)]);
    let daemon = setup.start();
    let cache = TempDir::new("cupy-kernel-cache");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("cupy/check.py");
    let out = run_command(
        Command::new("python3")
            .arg(&script)
            .env("PYTHONPATH", &env["CUPY_PYTHONPATH"])
            .env("CUDA_PATH", &env["CUPY_CUDA_PATH"])
            .env(
                "LD_LIBRARY_PATH",
                format!(
                    "{}:{}:{}:{}",
                    nvrtc_shim_dir(12).display(),
                    guest_lib_dir().display(),
                    env["CUPY_NVRTC_LIB"],
                    env["CUPY_CURAND_LIB"]
                ),
            )
            .env("FAIRGPU_REGION", &setup.regions[0])
            .env_remove("CUPY_COMPILE_WITH_PTX")
            .env("CUPY_CACHE_DIR", cache.path()),
        RUN_TIMEOUT,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let passed = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(
        out.status.success() && passed >= 10 && !stdout.contains("FAIL "),
        "check.py ({}), {passed} checks passed\n--- stdout ---\n{stdout}--- stderr ---\n{}\n--- daemon ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    assert_vm_ran_and_released(&daemon, "cupy", 50);
}
