//! NVIDIA's soname and symbol version for the CUDA 12 nvJitLink shim:
//! programs linked against libnvJitLink.so.12 ask for each symbol at
//! version `libnvJitLink.so.12` (the soname), which `--default-symver`
//! gives every exported symbol; GNU ld has that option, hence
//! `-fuse-ld=bfd` (as for the NVRTC shim).

fn main() {
    println!("cargo::rustc-cdylib-link-arg=-fuse-ld=bfd");
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libnvJitLink.so.12");
    println!("cargo::rustc-cdylib-link-arg=-Wl,--default-symver");
}
