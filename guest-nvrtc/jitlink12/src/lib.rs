//! fairgpu's nvJitLink shim as `libnvJitLink.so.12` (see
//! `fairgpu_guest_nvrtc::jitlink`): NVIDIA's nvJitLink 12 behind it, with
//! the names every 12.x header binds to.

fairgpu_guest_nvrtc::jitlink_exports!(12;
    v12_0 = "_12_0", v12_1 = "_12_1", v12_2 = "_12_2", v12_3 = "_12_3", v12_4 = "_12_4",
    v12_5 = "_12_5", v12_6 = "_12_6", v12_7 = "_12_7", v12_8 = "_12_8", v12_9 = "_12_9",
);
