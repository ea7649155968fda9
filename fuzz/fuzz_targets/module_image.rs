//! Module images (fatbin, cubin, PTX) come from the guest: both executors'
//! image decoders must refuse garbage without panicking, and what the CUDA
//! executor hands to the driver must be the image itself or the image plus
//! one terminating NUL.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(kernels) = fairgpu::executor::sim::parse_image(data) {
        for k in &kernels {
            for p in &k.params {
                assert!(u64::from(p.offset) + u64::from(p.size) <= u64::from(u32::MAX));
            }
        }
    }
    if let Ok(img) = fairgpu::executor::cuda::prepare_image(data) {
        assert!(img.len() == data.len() || (img.len() == data.len() + 1 && img.last() == Some(&0)));
        assert_eq!(&img[..data.len()], data);
    }
});
