//! CuPy (from PyPI, unmodified) through the guest library and a daemon on
//! SimGpu: `tests/cupy/check.py` creates arrays, copies them, runs
//! elementwise kernels and ufuncs, reductions with axes (through CUB),
//! user kernels (`RawKernel`, `ElementwiseKernel`, `ReductionKernel`),
//! streams and events, sort and cumsum, fancy indexing, and compares every
//! result with NumPy on the CPU.
//!
//! CuPy comes from `scripts/cuda-toolchain.sh --with-cupy` (found through
//! `FAIRGPU_CUDA_PREFIX`, default `target/cuda-toolchain`); without it the
//! test skips with a message, unless `FAIRGPU_REQUIRE_CUPY=1` (as
//! `scripts/test.sh` sets it), which makes it fail. CuPy compiles its
//! kernels with NVRTC to PTX (`CUPY_COMPILE_WITH_PTX=1`: SimGpu executes
//! PTX), into a kernel cache private to the test.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fairgpu_tests::cuda::toolchain_prefix;
use fairgpu_tests::{guest_lib_dir, run_command, status, vm, wait_for_status, Setup, TempDir};

/// How long the whole check may run (NVRTC compiles every kernel anew:
/// about 40 s on two cores).
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// The `CUPY_*` variables of the toolchain's `env.sh`; `None` when CuPy is
/// not installed there.
fn cupy_env() -> Option<HashMap<String, String>> {
    let env = std::fs::read_to_string(toolchain_prefix().join("env.sh")).ok()?;
    let vars: HashMap<String, String> = env
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("CUPY_"))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
        .collect();
    ["CUPY_PYTHONPATH", "CUPY_CUDA_PATH", "CUPY_NVRTC_LIB"]
        .iter()
        .all(|k| vars.contains_key(*k))
        .then_some(vars)
}

#[test]
fn cupy_results_match_numpy() {
    let Some(env) = cupy_env() else {
        let why = format!(
            "CuPy not installed in {} (run scripts/cuda-toolchain.sh --with-cupy)",
            toolchain_prefix().display()
        );
        if std::env::var("FAIRGPU_REQUIRE_CUPY").is_ok_and(|v| v == "1") {
            panic!("{why}");
        }
        eprintln!("SKIPPED: {why}");
        return;
    };
    let setup = Setup::new("cupy", &[("cupy", 1, 4)]);
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
                format!("{}:{}", guest_lib_dir().display(), env["CUPY_NVRTC_LIB"]),
            )
            .env("FAIRGPU_REGION", &setup.regions[0])
            .env("CUPY_COMPILE_WITH_PTX", "1")
            .env("CUPY_CACHE_DIR", cache.path()),
        RUN_TIMEOUT,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let passed = stdout.lines().filter(|l| l.starts_with("PASS ")).count();
    assert!(
        out.status.success() && passed >= 9 && !stdout.contains("FAIL "),
        "check.py ({}), {passed} checks passed\n--- stdout ---\n{stdout}--- stderr ---\n{}\n--- daemon ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    // It was fairgpu's device that computed: the VM ran the kernels, and
    // got everything back when the process exited.
    let st = wait_for_status(&daemon, "the cupy VM to release its memory", |s| {
        let v = vm(s, "cupy");
        v.channels_used == 0 && v.mem_used == 0
    });
    let v = vm(&st, "cupy");
    assert!(v.kernels > 50 && v.gpu_time_ns > 0, "{v:?}");
    assert_eq!(vm(&status(&daemon), "cupy").restarts, 0);
}
