//! The CUDA test programs of `tests/cuda/`, built once per test binary by
//! `tests/cuda/build.sh` with the toolchain of `scripts/cuda-toolchain.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::{profile_dir, run_command};

/// How long building all programs may take (about 20 s on two cores).
const BUILD_TIMEOUT: Duration = Duration::from_secs(900);

/// SMs of the device the programs' `[sim]` table describes.
pub const SIM_SM_COUNT: u32 = 46;

/// The `[sim]` table the CUDA programs run against, for a device named
/// `name`: the kernels whose modelled duration the programs check, with the
/// parameter it comes from (see tests/cuda/launch_args.cu for why five
/// kernels of one signature read five different parameters); the spin
/// kernels, which spin on the GPU's clock, are timing-only. Every other
/// kernel executes (SimGpu's PTX interpreter) and costs its instructions.
pub fn sim_table(name: &str) -> String {
    format!(
        r#"memory_bytes = 1073741824
name = {name:?}
sm_count = {SIM_SM_COUNT}
kernels = [
  {{ name = "spin", duration_param = 0, execute = false }},
  {{ name = "args_i", duration_param = 3 }},
  {{ name = "args_d", duration_param = 4 }},
  {{ name = "args_p", duration_param = 6 }},
  {{ name = "args_m", duration_param = 8 }},
  {{ name = "args_n", duration_param = 9 }},
  {{ name = "args_h", duration_hash = true }},
  {{ name = "_ZN2fg6nestedEPhiy", duration_param = 2 }},
  {{ name = "_Z4tmplIfEvPhT_y", duration_param = 2 }},
  {{ name = "big_params", duration_param = 2 }},
  {{ name = "mixed", duration_param = 9 }},
]
"#
    )
}

/// The built programs.
#[derive(Debug)]
pub struct Programs {
    /// Where they are.
    pub dir: PathBuf,
    /// Every program the script built, one path each.
    pub list: Vec<PathBuf>,
}

/// What a test does when an outside client it runs (CuPy, Numba, PyCUDA)
/// is not installed: says `SKIPPED: why` on stderr, unless the
/// environment variable `require` is `1` (as `scripts/test.sh` sets it),
/// in which case the test fails with `why`.
pub fn missing(require: &str, why: &str) {
    if std::env::var(require).is_ok_and(|v| v == "1") {
        panic!("{why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// After an outside client's run on `vm_name`: it was fairgpu's device
/// that computed (more than `min_kernels` kernels, some GPU time), the VM
/// got all its memory and channels back when the process exited, and its
/// worker never restarted.
pub fn assert_vm_ran_and_released(daemon: &crate::DaemonProcess, vm_name: &str, min_kernels: u64) {
    let st = crate::wait_for_status(
        daemon,
        &format!("the {vm_name} VM to release its memory"),
        |s| {
            let v = crate::vm(s, vm_name);
            v.channels_used == 0 && v.mem_used == 0
        },
    );
    let v = crate::vm(&st, vm_name);
    assert!(v.kernels > min_kernels && v.gpu_time_ns > 0, "{v:?}");
    assert_eq!(crate::vm(&crate::status(daemon), vm_name).restarts, 0);
}

/// The CUDA toolchain: `FAIRGPU_CUDA_PREFIX`, else
/// `target/cuda-toolchain` of the repository.
pub fn toolchain_prefix() -> PathBuf {
    match std::env::var_os("FAIRGPU_CUDA_PREFIX") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/cuda-toolchain"),
    }
}

/// The `CUPY_*` variables of the toolchain's `env.sh` (CuPy and NVIDIA's
/// NVRTC 12, `scripts/cuda-toolchain.sh --with-cupy`); `None` when they
/// are not installed there.
pub fn cupy_env() -> Option<std::collections::HashMap<String, String>> {
    let env = std::fs::read_to_string(toolchain_prefix().join("env.sh")).ok()?;
    let vars: std::collections::HashMap<String, String> = env
        .lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| k.starts_with("CUPY_"))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
        .collect();
    [
        "CUPY_PYTHONPATH",
        "CUPY_CUDA_PATH",
        "CUPY_NVRTC_LIB",
        "CUPY_CURAND_LIB",
        "CUPY_NVJITLINK_LIB",
    ]
    .iter()
    .all(|k| vars.contains_key(*k))
    .then_some(vars)
}

/// The built programs; `None` if the toolchain is missing and
/// `FAIRGPU_ALLOW_NO_CUDA=1`. Panics with the build's output if it fails.
pub fn programs() -> Option<&'static Programs> {
    static BUILT: OnceLock<Result<Option<Programs>, String>> = OnceLock::new();
    match BUILT.get_or_init(build) {
        Ok(p) => p.as_ref(),
        Err(e) => panic!("{e}"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn build() -> Result<Option<Programs>, String> {
    let prefix = toolchain_prefix();
    if !prefix.join("env.sh").is_file() {
        if std::env::var("FAIRGPU_ALLOW_NO_CUDA").is_ok_and(|v| v == "1") {
            eprintln!("SKIPPED: CUDA toolchain not installed (run scripts/cuda-toolchain.sh)");
            return Ok(None);
        }
        return Err(format!(
            "CUDA toolchain not installed in {}: run scripts/cuda-toolchain.sh \
             (or set FAIRGPU_ALLOW_NO_CUDA=1 to skip the CUDA program tests)",
            prefix.display()
        ));
    }
    let dir = profile_dir().join("cuda-programs");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("cuda/build.sh");
    let built = run_command(
        Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .env("FAIRGPU_CUDA_PREFIX", &prefix),
        BUILD_TIMEOUT,
    );
    if !built.status.success() {
        return Err(format!(
            "tests/cuda/build.sh failed ({}):\n{}{}",
            built.status,
            text(&built.stdout),
            text(&built.stderr)
        ));
    }
    // The script prints the programs it built, one path a line.
    let list: Vec<PathBuf> = text(&built.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .collect();
    if let Some(missing) = list.iter().find(|p| !p.is_file()) {
        return Err(format!(
            "tests/cuda/build.sh listed {}, which is not a file",
            missing.display()
        ));
    }
    Ok(Some(Programs { dir, list }))
}
