//! PyCUDA (built from its PyPI source release, unmodified) through the
//! guest library and a daemon on SimGpu, tested by PyCUDA's own test files
//! (`test_driver.py`, `test_cumath.py`, `test_gpuarray.py`, run by pytest
//! as PyCUDA's maintainers run them): contexts made and detached per
//! test, the deprecated execution-control calls PyCUDA makes before every
//! launch, `SourceModule` kernels compiled by nvcc at run time, GPUArray
//! arithmetic, reductions, scans, sorting-free elementwise and cuRAND
//! kernels, math functions, streams, events, pinned and mapped memory,
//! JIT linking with the device runtime; the tests compare their results
//! with NumPy.
//!
//! PyCUDA compiles with `nvcc --cubin -arch sm_90`; SimGpu executes PTX,
//! so `nvcc` on the test's `PATH` is `fairgpu-guest` under that name,
//! which makes PTX of `compute_90` instead and calls NVIDIA's nvcc.
//!
//! PyCUDA comes from `scripts/cuda-toolchain.sh --with-pycuda` (found
//! through `FAIRGPU_CUDA_PREFIX`, default `target/cuda-toolchain`); without
//! it the test skips with a message, unless `FAIRGPU_REQUIRE_PYCUDA=1` (as
//! `scripts/test.sh` sets it), which makes it fail.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use fairgpu_tests::cuda::{assert_vm_ran_and_released, missing, toolchain_prefix};
use fairgpu_tests::{built_artifact, guest_lib_dir, run_command, Setup, TempDir};

/// How long the test files may run (nvcc compiles some 150 kernels on
/// the first run: about 4 minutes on two cores).
const RUN_TIMEOUT: Duration = Duration::from_secs(1200);

/// The device: 16 multiprocessors, 2 GiB, a budget of 4 G thread-
/// instructions per launch.
const SIM: &str = "memory_bytes = 2147483648\nname = \"pycuda SimGpu\"\nsm_count = 16\nmax_instructions = 4000000000\n";

/// PyCUDA's test files run here.
const TEST_FILES: [&str; 3] = ["test_driver.py", "test_cumath.py", "test_gpuarray.py"];

/// The `PYCUDA_*` and `CUDA_NVCC` variables of the toolchain's `env.sh`;
/// `None` when PyCUDA is not built there.
fn pycuda_env() -> Option<HashMap<String, String>> {
    let env = std::fs::read_to_string(toolchain_prefix().join("env.sh")).ok()?;
    let vars: HashMap<String, String> = env
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("PYCUDA_") || *k == "CUDA_NVCC")
        .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
        .collect();
    [
        "PYCUDA_PYTHON",
        "PYCUDA_TESTS",
        "PYCUDA_LIB",
        "PYCUDA_INCLUDE",
        "CUDA_NVCC",
    ]
    .iter()
    .all(|k| vars.contains_key(*k))
    .then_some(vars)
}

/// pytest's count of `what` ("passed", "failed", ...) in its summary line.
fn summary_count(stdout: &str, what: &str) -> usize {
    let Some(line) = stdout.lines().rev().find(|l| l.contains(" in ")) else {
        return 0;
    };
    line.split(',')
        .filter_map(|part| {
            let mut words = part
                .split_whitespace()
                .filter(|w| !w.chars().all(|c| c == '='));
            let n: usize = words.next()?.parse().ok()?;
            (words.next()? == what).then_some(n)
        })
        .sum()
}

#[test]
fn pycuda_s_own_tests_pass() {
    let Some(env) = pycuda_env() else {
        let why = format!(
            "PyCUDA not built in {} (run scripts/cuda-toolchain.sh --with-pycuda)",
            toolchain_prefix().display()
        );
        return missing("FAIRGPU_REQUIRE_PYCUDA", &why);
    };
    let lib = guest_lib_dir();
    // `nvcc` is fairgpu's wrapper, NVIDIA's nvcc behind it on PATH.
    let tool = built_artifact("fairgpu-guest", "fairgpu-guest-tools");
    let bin = TempDir::new("pycuda-bin");
    std::os::unix::fs::symlink(&tool, bin.path().join("nvcc"))
        .expect("linking nvcc to fairgpu-guest");
    let nvcc_dir = std::path::Path::new(&env["CUDA_NVCC"])
        .parent()
        .expect("nvcc's directory")
        .to_owned();
    let path = std::env::join_paths([bin.path().to_owned(), nvcc_dir].into_iter().chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .expect("PATH");
    let cache = TempDir::new("pycuda-cache");
    // A SimGpu of 16 multiprocessors: pycuda.curandom starts one generator
    // per thread of a grid as wide as the device (on 132, initializing the
    // XORWOW generators alone takes 3 G thread-instructions).
    let setup = Setup::with_sim("pycuda", SIM, &[("pycuda", 1, 4)]).with_quota(1 << 30);
    let daemon = setup.start();
    let out = run_command(
        Command::new(&env["PYCUDA_PYTHON"])
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEs"])
            .args(TEST_FILES)
            .current_dir(&env["PYCUDA_TESTS"])
            .env("PATH", path)
            .env(
                "LD_LIBRARY_PATH",
                format!("{}:{}", lib.display(), env["PYCUDA_LIB"]),
            )
            .env("FAIRGPU_REGION", &setup.regions[0])
            .env("PYCUDA_CACHE_DIR", cache.path())
            // pycuda.curandom's kernels include curand_kernel.h.
            .env("NVCC_APPEND_FLAGS", format!("-I{}", env["PYCUDA_INCLUDE"])),
        RUN_TIMEOUT,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (passed, failed, errors) = (
        summary_count(&stdout, "passed"),
        summary_count(&stdout, "failed"),
        summary_count(&stdout, "error") + summary_count(&stdout, "errors"),
    );
    assert!(
        out.status.success() && failed == 0 && errors == 0 && passed >= 250,
        "PyCUDA's tests ({}): {passed} passed, {failed} failed, {errors} errors\n--- stdout ---\n{stdout}--- stderr ---\n{}\n--- daemon ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    assert_vm_ran_and_released(&daemon, "pycuda", 200);
}

#[test]
fn pytest_s_summary_is_read() {
    let s =
        "..F\n= 2 failed, 279 passed, 20 skipped, 4 xfailed, 5 warnings in 128.06s (0:02:08) =\n";
    assert_eq!(summary_count(s, "passed"), 279);
    assert_eq!(summary_count(s, "failed"), 2);
    assert_eq!(summary_count(s, "errors"), 0);
    assert_eq!(summary_count("1 error in 0.37s", "error"), 1);
    assert_eq!(summary_count("no summary", "passed"), 0);
}
