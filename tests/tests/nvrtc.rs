//! Programs that compile their kernels with NVIDIA's NVRTC for the device's
//! own architecture and load the machine code, through fairgpu's NVRTC and
//! nvJitLink shims and guest library against a daemon on SimGpu:
//!
//! - `tests/cuda/nvrtc_cubin.cpp` asks NVRTC for a cubin (the way NVIDIA's
//!   samples and CuPy do it);
//! - `tests/cuda/jit_lto.cpp` compiles two units to LTO-IR and links them
//!   with nvJitLink for `sm_XY` (the way NVIDIA's jitLto sample does it).
//!
//! With the shims installed they run and their results match the CPU;
//! without them SimGpu refuses the machine code; with a shim but no NVIDIA
//! library behind it every call fails with a message naming the setting
//! that says where it is.
//!
//! NVIDIA's NVRTC 12 and nvJitLink 12 and their headers come from
//! `scripts/cuda-toolchain.sh --with-cupy`; without them the tests skip,
//! unless `FAIRGPU_REQUIRE_CUPY=1` (as `scripts/test.sh` sets it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use fairgpu_tests::cuda::{cupy_env, missing, toolchain_prefix};
use fairgpu_tests::{
    guest_lib_dir, nvjitlink_shim_dir, nvrtc_shim_dir, profile_dir, run_command, vm,
    wait_for_published, wait_for_status, Setup,
};

const TIMEOUT: Duration = Duration::from_secs(300);

/// A test program of `tests/cuda/`, built with g++ against cuda.h (12.9)
/// and the headers in `../include` of each of `libs` (directories of
/// NVIDIA's libraries), linked to `libcuda.so.1` and `sonames` by soname.
fn build(source: &str, libs: &[&Path], sonames: &[&str]) -> PathBuf {
    let prefix = toolchain_prefix();
    let env = std::fs::read_to_string(prefix.join("env.sh")).expect("toolchain env.sh");
    let cuda_include = env
        .lines()
        .find_map(|l| l.strip_prefix("export CUDA12_INCLUDE="))
        .map(|v| v.trim_matches('\''))
        .expect("CUDA12_INCLUDE in env.sh");
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("cuda")
        .join(source);
    let name = source.split('.').next().expect("a file name");
    let out = profile_dir().join("nvrtc-test").join(name);
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let mut cmd = Command::new("g++");
    cmd.args(["-O1", "-std=c++17", "-I"]).arg(cuda_include);
    for lib in libs {
        cmd.arg("-I").arg(lib.join("../include"));
    }
    cmd.arg(&src).arg("-o").arg(&out);
    cmd.arg("-L").arg(guest_lib_dir());
    for lib in libs {
        cmd.arg("-L").arg(lib);
    }
    cmd.arg("-l:libcuda.so.1");
    for so in sonames {
        cmd.arg(format!("-l:{so}"));
    }
    let built = run_command(&mut cmd, TIMEOUT);
    assert!(
        built.status.success(),
        "g++ failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    out
}

/// `dirs` joined for `LD_LIBRARY_PATH`.
fn lib_path(dirs: &[&Path]) -> String {
    let v: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    v.join(":")
}

fn run(prog: &Path, region: &Path, lib_path: String, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(prog);
    cmd.env("LD_LIBRARY_PATH", lib_path)
        .env("FAIRGPU_REGION", region)
        .env_remove("FAIRGPU_NVRTC_LIBRARY")
        .env_remove("FAIRGPU_NVRTC_PTX")
        .env_remove("FAIRGPU_NVJITLINK_LIBRARY")
        .env_remove("FAIRGPU_NVJITLINK_PTX");
    for (k, v) in env {
        cmd.env(k, v);
    }
    run_command(&mut cmd, TIMEOUT)
}

fn show(o: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_program_asking_nvrtc_for_a_cubin_runs_on_simgpu_through_the_shim() {
    let Some(env) = cupy_env() else {
        let why = format!(
            "NVIDIA's NVRTC not installed in {} (run scripts/cuda-toolchain.sh --with-cupy)",
            toolchain_prefix().display()
        );
        return missing("FAIRGPU_REQUIRE_CUPY", &why);
    };
    let nvrtc_lib = PathBuf::from(&env["CUPY_NVRTC_LIB"]);
    let prog = build("nvrtc_cubin.cpp", &[&nvrtc_lib], &["libnvrtc.so.12"]);
    let setup = Setup::new("nvrtc", &[("rtc", 1, 2)]);
    let daemon = setup.start();
    let region = &setup.regions[0];
    let guest = guest_lib_dir();
    let shim = nvrtc_shim_dir(12);

    // The shim ahead of NVIDIA's library: the three compilations run and
    // match the CPU (the program checks every element and the sum).
    let with_shim = lib_path(&[&shim, &guest, &nvrtc_lib]);
    let o = run(&prog, region, with_shim.clone(), &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("PASSED") && stdout.matches(": ok").count() == 3,
        "with the shim: {}\n--- daemon ---\n{}",
        show(&o),
        daemon.log()
    );
    wait_for_status(&daemon, "the program's channel to be released", |s| {
        vm(s, "rtc").channels_used == 0
    });
    let st = wait_for_published(&daemon, "rtc");
    assert!(vm(&st, "rtc").kernels >= 6, "{:?}", vm(&st, "rtc"));

    refusals(
        &prog,
        region,
        &lib_path(&[&guest, &nvrtc_lib]),
        &with_shim,
        Shim {
            says: "NVRTC shim",
            ptx_setting: "FAIRGPU_NVRTC_PTX",
            library_setting: "FAIRGPU_NVRTC_LIBRARY",
            missing: "/nonexistent/libnvrtc.so.12",
            error: "NVRTC_ERROR_INTERNAL_ERROR",
        },
    );
}

#[test]
fn a_program_linking_lto_ir_with_nvjitlink_runs_on_simgpu_through_the_shim() {
    let Some(env) = cupy_env() else {
        let why = format!(
            "NVIDIA's NVRTC and nvJitLink not installed in {} (run scripts/cuda-toolchain.sh --with-cupy)",
            toolchain_prefix().display()
        );
        return missing("FAIRGPU_REQUIRE_CUPY", &why);
    };
    let nvrtc_lib = PathBuf::from(&env["CUPY_NVRTC_LIB"]);
    let jit_lib = PathBuf::from(&env["CUPY_NVJITLINK_LIB"]);
    let prog = build(
        "jit_lto.cpp",
        &[&nvrtc_lib, &jit_lib],
        &["libnvrtc.so.12", "libnvJitLink.so.12"],
    );
    let setup = Setup::new("nvjitlink", &[("lto", 1, 2)]);
    let daemon = setup.start();
    let region = &setup.regions[0];
    let guest = guest_lib_dir();
    let shim = nvjitlink_shim_dir(12);

    // The shim ahead of NVIDIA's library: the LTO link emits PTX, which
    // runs; the program checks every element and the counter the two
    // units share.
    let with_shim = lib_path(&[&shim, &guest, &nvrtc_lib, &jit_lib]);
    let o = run(&prog, region, with_shim.clone(), &[]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("match the CPU") && stdout.contains("PASSED"),
        "with the shim: {}\n--- daemon ---\n{}",
        show(&o),
        daemon.log()
    );
    wait_for_status(&daemon, "the program's channel to be released", |s| {
        vm(s, "lto").channels_used == 0
    });
    let st = wait_for_published(&daemon, "lto");
    assert!(vm(&st, "lto").kernels >= 1, "{:?}", vm(&st, "lto"));

    refusals(
        &prog,
        region,
        &lib_path(&[&guest, &nvrtc_lib, &jit_lib]),
        &with_shim,
        Shim {
            says: "nvJitLink shim",
            ptx_setting: "FAIRGPU_NVJITLINK_PTX",
            library_setting: "FAIRGPU_NVJITLINK_LIBRARY",
            missing: "/nonexistent/libnvJitLink.so.12",
            // The program prints nvJitLink's status as a number:
            // NVJITLINK_ERROR_INTERNAL.
            error: "nvJitLink error 6",
        },
    );
}

/// What a shim's failure paths say.
struct Shim {
    /// Part of the guest library's advice when SimGpu refuses a cubin.
    says: &'static str,
    /// The setting that turns the rewriting off.
    ptx_setting: &'static str,
    /// The setting naming NVIDIA's library.
    library_setting: &'static str,
    /// A path where no library is.
    missing: &'static str,
    /// What the program prints for the shim's status without NVIDIA's
    /// library.
    error: &'static str,
}

/// The program fails, saying why, without the shim (`without`: NVIDIA's
/// library alone, machine code SimGpu refuses), with the shim told not to
/// rewrite, and with the shim but no NVIDIA library behind it (an error
/// naming the setting, not a crash).
fn refusals(prog: &Path, region: &Path, without: &str, with_shim: &str, shim: Shim) {
    let o = run(prog, region, without.to_owned(), &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && stderr.contains("refused a cubin")
            && stderr.contains(shim.says)
            && stderr.contains("CUDA_ERROR_INVALID_IMAGE"),
        "without the shim: {}",
        show(&o)
    );

    let o = run(
        prog,
        region,
        with_shim.to_owned(),
        &[(shim.ptx_setting, "0")],
    );
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("refused a cubin"),
        "{}=0: {}",
        shim.ptx_setting,
        show(&o)
    );

    let o = run(
        prog,
        region,
        with_shim.to_owned(),
        &[(shim.library_setting, shim.missing)],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1)
            && stderr.contains(shim.library_setting)
            && stderr.contains(shim.error),
        "no NVIDIA library: {}",
        show(&o)
    );
}
