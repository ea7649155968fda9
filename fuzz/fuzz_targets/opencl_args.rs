//! Fuzzes the decoders of an OpenCL launch's arena bytes: the NDRange
//! header and the kernel argument list (`fairgpu_protocol::opencl`).
//!
//! Properties: no input panics; every decoded argument respects the
//! limits (by-value sizes within `MAX_ARG_BYTES`, at most
//! `MAX_KERNEL_ARGS` arguments); a decoded list encodes back to bytes that
//! decode to the same list.

#![no_main]

use fairgpu_protocol::opencl::{
    decode_args, encode_arg, KernelArg, NdRangeHeader, MAX_ARG_BYTES, MAX_KERNEL_ARGS,
    NDRANGE_HEADER,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < NDRANGE_HEADER {
        return;
    }
    let (head, rest) = data.split_at(NDRANGE_HEADER);
    let hdr = NdRangeHeader::from_bytes(head.try_into().expect("header size"));
    assert_eq!(&hdr.to_bytes()[..], head, "the header round-trips");
    // The count the guest claims, bounded so that the fuzzer explores lists
    // rather than the early refusal.
    let nargs = hdr.nargs % (MAX_KERNEL_ARGS + 2);
    let Ok(args) = decode_args(rest, nargs) else {
        return;
    };
    assert_eq!(args.len(), nargs as usize);
    let mut again = Vec::new();
    for a in &args {
        match a {
            KernelArg::Bytes(b) => assert!(!b.is_empty() && b.len() <= MAX_ARG_BYTES as usize),
            KernelArg::Local(n) => assert!(*n > 0),
            KernelArg::Mem(_) | KernelArg::Sampler(_) => {}
        }
        encode_arg(&mut again, a);
    }
    assert_eq!(decode_args(&again, nargs).expect("re-decodes"), args);
});
