//! Module images (fatbin, cubin, PTX) come from the guest: both executors'
//! image decoders must refuse garbage without panicking, and what the CUDA
//! executor hands to the driver must be the image itself, its PTX text up
//! to its first NUL, or the text plus one terminating NUL.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(kernels) = fairgpu_executor::sim::parse_image(data) {
        for k in &kernels {
            for p in &k.params {
                assert!(u64::from(p.offset) + u64::from(p.size) <= u64::from(u32::MAX));
            }
        }
    }
    if let Ok(img) = fairgpu_executor::cuda::prepare_image(data) {
        // ELF and fatbin images go as they are; PTX text up to and with its
        // first NUL (the driver reads no further), or with one appended.
        match data.iter().position(|&b| b == 0) {
            _ if img.len() == data.len() => assert_eq!(&img[..], data),
            Some(n) => assert_eq!(&img[..], &data[..=n]),
            None => {
                assert_eq!(img.len(), data.len() + 1);
                assert_eq!(&img[..data.len()], data);
                assert_eq!(img.last(), Some(&0));
            }
        }
    }
});
