//! `nvcc` for programs that compile CUDA C++ at run time with NVIDIA's
//! compiler driver and load the result with `cuModuleLoadData` (PyCUDA's
//! `SourceModule`: `nvcc --cubin -arch sm_XY`, for the device's compute
//! capability). SimGpu executes PTX and refuses machine code, so such a
//! program cannot run on it unmodified. Installed as `nvcc` ahead of
//! NVIDIA's on `PATH` (a link to `fairgpu-guest` named `nvcc`), this
//! rewrites a compilation to a cubin for a real architecture into one to
//! PTX for the matching virtual architecture (`sm_90` → `compute_90`),
//! written where the cubin would have been; `cuModuleLoadData` takes PTX
//! as it takes a cubin, and a GPU's driver compiles it for itself. Every
//! other invocation (executables, objects, fatbins, `--version`) is
//! NVIDIA's nvcc, unchanged.
//!
//! The real nvcc is `FAIRGPU_REAL_NVCC`, else the next `nvcc` on `PATH`
//! that is not this program.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming NVIDIA's nvcc.
pub const REAL_NVCC_ENV: &str = "FAIRGPU_REAL_NVCC";

/// Options whose value (the next argument, or after `=`) names
/// architectures.
const ARCH_OPTIONS: [&str; 6] = [
    "-arch",
    "--gpu-architecture",
    "-code",
    "--gpu-code",
    "-gencode",
    "--generate-code",
];
/// Options that ask for a cubin.
const CUBIN_OPTIONS: [&str; 2] = ["-cubin", "--cubin"];
/// Options that name the output.
const OUTPUT_OPTIONS: [&str; 2] = ["-o", "--output-file"];

/// `value` with every real architecture (`sm_XY`, `sm_XYa`) made the
/// virtual one of the same number (`compute_XY`, `compute_XYa`).
fn virtual_arch(value: &str) -> String {
    value.replace("sm_", "compute_")
}

/// The arguments to give NVIDIA's nvcc for `args`: unchanged unless they
/// ask for a cubin, else PTX for the virtual architectures, with the
/// output named as nvcc would have named the cubin (`NAME.cubin` in the
/// working directory for a lone `NAME.cu`) when no `-o` says.
pub fn rewrite(args: &[String]) -> Vec<String> {
    if !args.iter().any(|a| CUBIN_OPTIONS.contains(&a.as_str())) {
        return args.to_vec();
    }
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut arch_value_next = false;
    let mut named_output = false;
    let mut sources = Vec::new();
    for a in args {
        if arch_value_next {
            arch_value_next = false;
            out.push(virtual_arch(a));
            continue;
        }
        if CUBIN_OPTIONS.contains(&a.as_str()) {
            out.push("--ptx".to_owned());
            continue;
        }
        if ARCH_OPTIONS.contains(&a.as_str()) {
            arch_value_next = true;
        } else if let Some((opt, _)) = a.split_once('=') {
            if ARCH_OPTIONS.contains(&opt) {
                out.push(virtual_arch(a));
                continue;
            }
            if OUTPUT_OPTIONS.contains(&opt) {
                named_output = true;
            }
        } else if OUTPUT_OPTIONS.contains(&a.as_str()) {
            named_output = true;
        } else if !a.starts_with('-') && a.ends_with(".cu") {
            sources.push(a.clone());
        }
        out.push(a.clone());
    }
    if let ([source], false) = (sources.as_slice(), named_output) {
        let stem = Path::new(source)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push("-o".to_owned());
        out.push(format!("{stem}.cubin"));
    }
    out
}

/// NVIDIA's nvcc: `FAIRGPU_REAL_NVCC`, else the first `nvcc` on `path`
/// that is not `me` (compared after resolving links).
pub fn find_real(env: Option<OsString>, path: Option<OsString>, me: &Path) -> Option<PathBuf> {
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let me = std::fs::canonicalize(me).unwrap_or_else(|_| me.to_path_buf());
    std::env::split_paths(&path?)
        .map(|d| d.join("nvcc"))
        .filter(|c| c.is_file())
        .find(|c| std::fs::canonicalize(c).is_ok_and(|c| c != me))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn a_cubin_for_a_real_architecture_becomes_ptx_where_the_cubin_would_be() {
        // PyCUDA's compile_plain, as it runs nvcc.
        let got = rewrite(&strings(&[
            "--cubin",
            "-arch",
            "sm_90",
            "-I/x/pycuda/cuda",
            "kernel.cu",
        ]));
        assert_eq!(
            got,
            strings(&[
                "--ptx",
                "-arch",
                "compute_90",
                "-I/x/pycuda/cuda",
                "kernel.cu",
                "-o",
                "kernel.cubin"
            ])
        );
        let got = rewrite(&strings(&[
            "-cubin",
            "--gpu-architecture=sm_90a",
            "-gencode",
            "arch=compute_80,code=sm_80",
            "-o",
            "out/k.bin",
            "dir/k.cu",
        ]));
        assert_eq!(
            got,
            strings(&[
                "--ptx",
                "--gpu-architecture=compute_90a",
                "-gencode",
                "arch=compute_80,code=compute_80",
                "-o",
                "out/k.bin",
                "dir/k.cu"
            ])
        );
    }

    #[test]
    fn anything_but_a_cubin_is_nvidia_s_nvcc_unchanged() {
        for args in [
            strings(&["-arch", "sm_90", "-o", "app", "app.cu"]),
            strings(&["--fatbin", "-arch=sm_90", "k.cu"]),
            strings(&["--version"]),
            strings(&["-c", "-rdc=true", "-arch", "sm_90", "k.cu"]),
        ] {
            assert_eq!(rewrite(&args), args);
        }
        // Output named with `=`: nothing added.
        let got = rewrite(&strings(&[
            "-cubin",
            "-arch=sm_80",
            "--output-file=o.cubin",
            "k.cu",
        ]));
        assert_eq!(
            got,
            strings(&["--ptx", "-arch=compute_80", "--output-file=o.cubin", "k.cu"])
        );
    }

    #[test]
    fn the_real_nvcc_is_the_next_one_on_the_path() {
        let dir = std::env::temp_dir().join(format!("fairgpu-nvcc-{}", std::process::id()));
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("nvcc"), "me").unwrap();
        std::fs::write(b.join("nvcc"), "nvidia").unwrap();
        let path = std::env::join_paths([&a, &dir.join("none"), &b]).unwrap();
        let me = a.join("nvcc");
        assert_eq!(
            find_real(None, Some(path.clone()), &me),
            Some(b.join("nvcc"))
        );
        assert_eq!(
            find_real(Some("/opt/nv/nvcc".into()), Some(path.clone()), &me),
            Some(PathBuf::from("/opt/nv/nvcc"))
        );
        let only_me = std::env::join_paths([&a]).unwrap();
        assert_eq!(find_real(None, Some(only_me), &me), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
