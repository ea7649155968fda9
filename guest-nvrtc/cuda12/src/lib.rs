//! fairgpu's NVRTC shim as `libnvrtc.so.12` (see the `fairgpu-guest-nvrtc`
//! crate): NVIDIA's NVRTC 12 behind it.

fairgpu_guest_nvrtc::exports!(12);
