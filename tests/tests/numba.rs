//! Numba's CUDA target (from PyPI, unmodified) through the guest library
//! and a daemon on SimGpu: `tests/numba/check.py` compiles Python kernels
//! (NVVM to PTX, linked through `cuLinkCreate`/`cuLinkAddData`/
//! `cuLinkComplete`), and runs elementwise kernels, shared memory and
//! atomics, 2D grids, ufuncs and gufuncs over libdevice, reductions, warp
//! shuffles and votes, device functions and local arrays, streams and
//! events, pinned, mapped and managed memory, complex numbers, constant
//! and dynamic shared memory, half precision, records, exceptions raised
//! in kernels, a cooperative grid barrier (Numba links NVIDIA's device
//! runtime for it), recursive device functions, and an allocation shared
//! with a spawned process through CUDA IPC; every result is compared with
//! NumPy on the CPU.
//!
//! Numba comes from `scripts/cuda-toolchain.sh --with-numba` (found through
//! `FAIRGPU_CUDA_PREFIX`, default `target/cuda-toolchain`); without it the
//! test skips with a message, unless `FAIRGPU_REQUIRE_NUMBA=1` (as
//! `scripts/test.sh` sets it), which makes it fail.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fairgpu_tests::cuda::{assert_vm_ran_and_released, missing, toolchain_prefix};
use fairgpu_tests::{guest_lib_dir, run_command, Setup, TempDir};

/// How long the whole check may run (NVVM compiles every kernel: about
/// 15 s on two cores).
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// `NUMBA_PYTHON` of the toolchain's `env.sh`; `None` when Numba is not
/// installed there.
fn numba_python() -> Option<String> {
    let env = std::fs::read_to_string(toolchain_prefix().join("env.sh")).ok()?;
    env.lines()
        .filter_map(|l| l.strip_prefix("export NUMBA_PYTHON="))
        .map(|v| v.trim_matches('\'').to_owned())
        .next()
}

#[test]
fn numba_results_match_numpy() {
    let Some(python) = numba_python() else {
        let why = format!(
            "Numba not installed in {} (run scripts/cuda-toolchain.sh --with-numba)",
            toolchain_prefix().display()
        );
        return missing("FAIRGPU_REQUIRE_NUMBA", &why);
    };
    let setup = Setup::new("numba", &[("numba", 1, 4)]);
    let daemon = setup.start();
    let cache = TempDir::new("numba-cache");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("numba/check.py");
    let out = run_command(
        Command::new(&python)
            .arg(&script)
            .env("LD_LIBRARY_PATH", guest_lib_dir())
            .env("FAIRGPU_REGION", &setup.regions[0])
            .env("NUMBA_CACHE_DIR", cache.path()),
        RUN_TIMEOUT,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let passed = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(
        out.status.success() && passed >= 20 && !stdout.contains("FAIL "),
        "check.py ({}), {passed} checks passed\n--- stdout ---\n{stdout}--- stderr ---\n{}\n--- daemon ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    assert_vm_ran_and_released(&daemon, "numba", 30);
}
