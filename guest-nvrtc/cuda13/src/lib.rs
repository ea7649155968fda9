//! fairgpu's NVRTC shim as `libnvrtc.so.13` (see the `fairgpu-guest-nvrtc`
//! crate): NVIDIA's NVRTC 13 behind it.

fairgpu_guest_nvrtc::exports!(13);
