//! fairgpu's nvJitLink shim as `libnvJitLink.so.13` (see
//! `fairgpu_guest_nvrtc::jitlink`): NVIDIA's nvJitLink 13 behind it, with
//! the names 13.0's header binds to.

fairgpu_guest_nvrtc::jitlink_exports!(13; v13_0 = "_13_0");
