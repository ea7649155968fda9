//! NVIDIA's soname and symbol version for the CUDA 12 shim: programs linked
//! against libnvrtc.so.12 ask for each `nvrtc*` symbol at version
//! `libnvrtc.so.12` (the soname: NVIDIA versions its symbols by it), which
//! `--default-symver` gives every exported symbol. That is an option of
//! GNU ld (LLVM's lld, Rust's default linker here, lacks it), hence
//! `-fuse-ld=bfd` (binutils, which the C compiler Rust links with needs).

fn main() {
    println!("cargo::rustc-cdylib-link-arg=-fuse-ld=bfd");
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libnvrtc.so.12");
    println!("cargo::rustc-cdylib-link-arg=-Wl,--default-symver");
}
