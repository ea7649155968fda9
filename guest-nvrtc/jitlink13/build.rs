//! NVIDIA's soname and symbol version for the CUDA 13 nvJitLink shim:
//! programs linked against libnvJitLink.so.13 ask for each symbol at
//! version `libnvJitLink.so.13` (the soname), which `--default-symver`
//! gives every exported symbol; GNU ld has that option, hence
//! `-fuse-ld=bfd` (as for the NVRTC shim).

fn main() {
    println!("cargo::rustc-cdylib-link-arg=-fuse-ld=bfd");
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libnvJitLink.so.13");
    println!("cargo::rustc-cdylib-link-arg=-Wl,--default-symver");
}
