//! Tests of the executor: pure helpers, and the whole executor against the
//! fake driver (`fake.rs`). The one test that needs a GPU is `#[ignore]`d.

use super::*;

/// An executor on this thread's fresh fake driver.
fn exec() -> CudaExecutor {
    fake::reset();
    CudaExecutor::with_api(fake::api(), 0).expect("the fake device opens")
}

fn params(ptr: DevPtr, n: u32) -> Vec<u8> {
    let mut p = ptr.to_ne_bytes().to_vec();
    p.extend_from_slice(&n.to_ne_bytes());
    p
}

fn words(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn cfg(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig::new([grid, 1, 1], [block, 1, 1], 0)
}

/// A context with `n` words loaded and `add_one` looked up.
fn setup(e: &mut CudaExecutor, n: u32) -> (CtxId, DevPtr, FnId) {
    let ctx = e.create_context().unwrap();
    let buf = e.mem_alloc(ctx, u64::from(n) * 4).unwrap();
    let init: Vec<u32> = (0..n).map(|i| i * 10).collect();
    e.memcpy_htod(ctx, buf, &words(&init), None).unwrap();
    let module = e.module_load(ctx, ADD_ONE_PTX.as_bytes()).unwrap();
    let (f, _) = e.function(ctx, module, "add_one").unwrap();
    (ctx, buf, f)
}

const KERNEL_NS: u64 = 1_500_000;

#[test]
fn new_without_libcuda_is_a_clear_error_not_a_panic() {
    // SAFETY: only probes whether a libcuda can be opened.
    let present = unsafe { cudarc::driver::sys::is_culib_present() };
    match CudaExecutor::new(0) {
        Err(ExecError::NoDevice(msg)) => {
            if !present {
                assert!(msg.contains("libcuda"), "{msg}");
                let shown = ExecError::NoDevice(msg).to_string();
                assert!(shown.starts_with("no usable GPU: libcuda"), "{shown}");
            }
        }
        Ok(_) => assert!(present),
        Err(e) => assert!(present, "without libcuda: {e}"),
    }
}

#[test]
fn driver_results_map_to_exec_errors() {
    assert_eq!(check("cuInit", 0), Ok(()));
    assert_eq!(check("cuStreamQuery", 600), Err(ExecError::NotReady));
    assert_eq!(
        check("cuStreamQuery", 600).unwrap_err().status(),
        Status::NOT_READY
    );
    for code in [1, 2, 34, 201, 700, 719, 999, 12345] {
        let e = check("cuLaunchKernel", code).unwrap_err();
        assert_eq!(
            e,
            ExecError::Driver {
                call: "cuLaunchKernel",
                status: Status(code)
            }
        );
        assert_eq!(e.status(), Status(code), "the guest sees the driver's code");
    }
    let shown = check("cuMemAlloc_v2", 2).unwrap_err().to_string();
    assert_eq!(shown, "cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY");
}

#[test]
fn param_buffer_must_hold_the_layout() {
    let layout = [
        ParamInfo { offset: 0, size: 8 },
        ParamInfo { offset: 8, size: 4 },
    ];
    assert!(check_param_buffer(&layout, 12).is_ok());
    assert!(
        check_param_buffer(&layout, 16).is_ok(),
        "tail padding is fine"
    );
    assert_eq!(
        check_param_buffer(&layout, 11),
        Err(ExecError::Invalid("kernel parameter buffer size"))
    );
    assert!(check_param_buffer(&layout, 0).is_err());
    assert!(check_param_buffer(&[], 0).is_ok());
    assert!(check_param_buffer(&[], MAX_PARAM_BYTES as usize).is_ok());
    assert!(check_param_buffer(&[], MAX_PARAM_BYTES as usize + 1).is_err());
}

#[test]
fn layouts_stop_at_invalid_value_and_are_bounded() {
    let table = [(0usize, 8usize), (8, 4), (16, 8)];
    let layout = collect_layout(|i| match table.get(i) {
        Some(&(o, s)) => (CUDA_SUCCESS, o, s),
        None => (CUDA_ERROR_INVALID_VALUE, 0, 0),
    })
    .unwrap();
    assert_eq!(
        layout,
        vec![
            ParamInfo { offset: 0, size: 8 },
            ParamInfo { offset: 8, size: 4 },
            ParamInfo {
                offset: 16,
                size: 8
            },
        ]
    );

    let none = collect_layout(|_| (CUDA_ERROR_INVALID_VALUE, 0, 0)).unwrap();
    assert!(none.is_empty());

    let mut calls = 0;
    let endless = collect_layout(|i| {
        calls += 1;
        (CUDA_SUCCESS, i * 4, 4)
    });
    assert!(endless.is_err());
    assert_eq!(calls, MAX_PARAMS + 1, "bounded by MAX_PARAMS");

    let exactly_max = collect_layout(|i| {
        if i < MAX_PARAMS {
            (CUDA_SUCCESS, i * 4, 4)
        } else {
            (CUDA_ERROR_INVALID_VALUE, 0, 0)
        }
    })
    .unwrap();
    assert_eq!(exactly_max.len(), MAX_PARAMS);

    let failing = collect_layout(|_| (201, 0, 0));
    assert_eq!(
        failing,
        Err(ExecError::Driver {
            call: "cuFuncGetParamInfo",
            status: Status(201)
        })
    );

    let huge = collect_layout(|i| match i {
        0 => (CUDA_SUCCESS, 0, 40_000),
        _ => (CUDA_ERROR_INVALID_VALUE, 0, 0),
    });
    assert!(huge.is_err());
    let wide = collect_layout(|i| match i {
        0 => (CUDA_SUCCESS, usize::MAX, 4),
        _ => (CUDA_ERROR_INVALID_VALUE, 0, 0),
    });
    assert!(wide.is_err());
}

#[test]
fn elapsed_ms_become_ns() {
    assert_eq!(ms_to_ns(1.5), 1_500_000);
    assert_eq!(ms_to_ns(0.001), 1_000);
    assert_eq!(ms_to_ns(0.0), 0);
    assert_eq!(ms_to_ns(-3.0), 0);
    assert_eq!(ms_to_ns(f32::NAN), 0);
    assert_eq!(ms_to_ns(f32::INFINITY), 0);
}

#[test]
fn param_buffer_is_exact_aligned_and_zero_padded() {
    let p: Vec<u8> = (1..=13).collect();
    let b = ParamBuffer::new(&p);
    assert_eq!(b.len, 13);
    let bytes = b.bytes();
    assert_eq!(bytes.len(), 16);
    assert_eq!(&bytes[..13], &p[..]);
    assert_eq!(&bytes[13..], &[0, 0, 0]);
    assert_eq!(b.words.as_ptr().addr() % 8, 0);
    assert!(ParamBuffer::new(&[]).words.is_empty());
    assert_eq!(ParamBuffer::new(&[7; 16]).bytes(), vec![7; 16]);
}

#[test]
fn props_come_from_the_driver() {
    let e = exec();
    let p = e.device();
    assert_eq!(p.name, "Fake GPU");
    assert_eq!(p.total_mem, fake::TOTAL_MEM);
    assert_eq!(p.uuid, std::array::from_fn(|i| i as u8));
    assert_eq!(p.driver_version, 12080);
    assert_eq!(
        p.attribute(super::super::attr::COMPUTE_CAPABILITY_MAJOR),
        Some(9)
    );
    assert_eq!(
        p.attribute(super::super::attr::COMPUTE_CAPABILITY_MINOR),
        Some(0)
    );
    assert_eq!(p.attribute(1), Some(10));
    assert_eq!(p.attribute(7), None, "failed queries are left out");
    assert_eq!(p.attribute(MAX_ATTRIBUTE), Some(MAX_ATTRIBUTE * 10));
    let expected = (1..=MAX_ATTRIBUTE).filter(|a| a % 7 != 0).count();
    assert_eq!(p.attributes.len(), expected);
}

#[test]
fn features_guest_lib_does_not_forward_are_reported_absent() {
    // The fake driver reports every attribute as non-zero (a * 10), as an
    // H100 reports MANAGED_MEMORY = 1.
    let e = exec();
    let p = e.device();
    for (attr, name) in super::super::UNREMOTED_FEATURES {
        if attr % 7 != 0 {
            assert_eq!(p.attribute(*attr), Some(0), "{name} advertised");
        }
    }
    // Managed memory works through the guest library's mirrors; concurrent
    // access by CPU and GPU does not.
    assert_eq!(p.attribute(83), Some(830), "MANAGED_MEMORY hidden");
    assert_eq!(
        p.attribute(89),
        Some(0),
        "CONCURRENT_MANAGED_ACCESS advertised"
    );
    assert_eq!(
        p.attribute(97),
        Some(970),
        "an ordinary attribute is passed"
    );
    // Cooperative launches and clusters are forwarded: the device's own
    // values.
    assert_eq!(p.attribute(95), Some(950), "COOPERATIVE_LAUNCH");
    assert_eq!(p.attribute(120), Some(1200), "CLUSTER_LAUNCH");
}

#[test]
fn clusters_and_cooperative_launches_go_through_cu_launch_kernel_ex() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 8);
    e.launch(ctx, f, &cfg(2, 4), &params(buf, 8), None).unwrap();
    let mut c = LaunchConfig::new([2, 2, 1], [4, 1, 1], 0);
    c.options.cluster = [2, 1, 1];
    e.launch(ctx, f, &c, &params(buf, 8), None).unwrap();
    c.options = LaunchOptions {
        cluster: [1, 1, 1],
        cooperative: true,
    };
    e.launch(ctx, f, &c, &params(buf, 8), None).unwrap();
    e.synchronize(ctx).unwrap();
    let (plain, ex, attrs) = fake::with(|s| {
        let n = |name| s.calls.iter().filter(|&&c| c == name).count();
        (
            n("cuLaunchKernel"),
            n("cuLaunchKernelEx"),
            s.launch_attrs.clone(),
        )
    });
    // The fake's cuLaunchKernelEx runs its cuLaunchKernel: three kernels.
    assert_eq!(
        (plain, ex),
        (3, 0),
        "cuLaunchKernelEx is not a `begin` call"
    );
    assert_eq!(attrs, vec![(4, [2, 1, 1]), (2, [1, 0, 0])]);
    // Each launch added one to every word it covered.
    let mut out = vec![0u8; 32];
    e.memcpy_dtoh(ctx, &mut out, buf, None).unwrap();
    let got: Vec<u32> = out
        .chunks(4)
        .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    assert_eq!(got, (0..8).map(|i| i * 10 + 3).collect::<Vec<u32>>());
}

#[test]
fn construction_failures_are_no_device() {
    fake::reset();
    fake::with(|s| s.fail = Some(("cuInit", 100)));
    let Err(ExecError::NoDevice(msg)) = CudaExecutor::with_api(fake::api(), 0) else {
        panic!("cuInit failing must be NoDevice");
    };
    assert!(
        msg.contains("cuInit") && msg.contains("CUDA_ERROR_NO_DEVICE"),
        "{msg}"
    );

    fake::reset();
    fake::with(|s| s.fail = Some(("cuInit", 34)));
    let Err(ExecError::NoDevice(msg)) = CudaExecutor::with_api(fake::api(), 0) else {
        panic!("a stub libcuda must be NoDevice");
    };
    assert!(msg.contains("stub"), "{msg}");

    fake::reset();
    let Err(ExecError::NoDevice(msg)) = CudaExecutor::with_api(fake::api(), 1) else {
        panic!("a missing ordinal must be NoDevice");
    };
    assert!(msg.contains("no CUDA device 1"), "{msg}");

    fake::reset();
    assert!(matches!(
        CudaExecutor::with_api(fake::api(), usize::MAX),
        Err(ExecError::NoDevice(_))
    ));
}

#[test]
fn a_kernel_round_trip() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 16);
    let config = LaunchConfig {
        shared_mem: 128,
        ..cfg(1, 32)
    };
    e.launch(ctx, f, &config, &params(buf, 16), None).unwrap();
    let mut out = vec![0u8; 64];
    e.memcpy_dtoh(ctx, &mut out, buf, None).unwrap();
    let expected: Vec<u32> = (0..16).map(|i| i * 10 + 1).collect();
    assert_eq!(out, words(&expected));

    fake::with(|s| {
        assert_eq!(s.images.len(), 1);
        assert_eq!(s.images[0], ADD_ONE_PTX, "PTX reaches the driver whole");
        let l = &s.launches[0];
        assert_eq!(l.kernel, "add_one");
        assert_eq!(l.grid, [1, 1, 1]);
        assert_eq!(l.block, [32, 1, 1]);
        assert_eq!(l.shared_mem, 128);
        assert_eq!(l.stream, 0);
        assert_eq!(l.params, params(buf, 16));
    });
}

#[test]
fn kernel_lookup_reports_layouts_and_unknown_names() {
    let mut e = exec();
    let ctx = e.create_context().unwrap();
    let m = e.module_load(ctx, ADD_ONE_PTX.as_bytes()).unwrap();
    let (f, layout) = e.function(ctx, m, "add_one").unwrap();
    assert_eq!(
        layout,
        vec![
            ParamInfo { offset: 0, size: 8 },
            ParamInfo { offset: 8, size: 4 },
        ]
    );
    let (again, _) = e.function(ctx, m, "add_one").unwrap();
    assert_eq!(f, again, "one id per kernel");
    assert_eq!(fake::with(|s| s.count("cuModuleGetFunction")), 1);

    let (g, none) = e.function(ctx, m, "no_params").unwrap();
    assert!(none.is_empty());
    e.launch(ctx, g, &cfg(1, 1), &[], None).unwrap();

    assert_eq!(
        e.function(ctx, m, "missing"),
        Err(ExecError::NotFound("missing".to_string()))
    );
    assert!(matches!(
        e.function(ctx, m, "bad\0name"),
        Err(ExecError::NotFound(_))
    ));
    assert_eq!(
        e.function(ctx, ModId(9999), "add_one"),
        Err(ExecError::Invalid("module"))
    );
}

#[test]
fn short_parameter_buffers_never_reach_the_driver() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 4);
    let short = &params(buf, 4)[..11];
    assert_eq!(
        e.launch(ctx, f, &cfg(1, 4), short, None),
        Err(ExecError::Invalid("kernel parameter buffer size"))
    );
    assert_eq!(fake::with(|s| s.count("cuLaunchKernel")), 0);
    assert_eq!(e.pending_timings(), 0);
}

#[test]
fn bad_images_never_reach_the_driver() {
    let mut e = exec();
    let ctx = e.create_context().unwrap();
    assert!(matches!(
        e.module_load(ctx, &[0x01, 0x02, 0x03]),
        Err(ExecError::InvalidImage(_))
    ));
    assert!(matches!(
        e.module_load(ctx, &[]),
        Err(ExecError::InvalidImage(_))
    ));
    assert_eq!(fake::with(|s| s.count("cuModuleLoadData")), 0);
    // Text the driver rejects keeps the driver's own code.
    assert_eq!(
        e.module_load(ctx, b"not ptx"),
        Err(ExecError::Driver {
            call: "cuModuleLoadData",
            status: Status(218)
        })
    );
}

#[test]
fn device_time_is_collected_without_blocking() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 4);
    fake::with(|s| s.hold = true);
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
    assert_eq!(e.gpu_time_ns(), 0, "nothing has completed yet");
    assert_eq!(e.pending_timings(), 2);
    fake::with(|s| {
        assert_eq!(s.count("cuEventSynchronize"), 0);
        assert_eq!(s.count("cuCtxSynchronize"), 0);
        assert!(s.count("cuEventQuery") >= 1);
    });
    e.synchronize(ctx).unwrap();
    assert_eq!(e.pending_timings(), 0);
    assert_eq!(e.gpu_time_ns(), 2 * KERNEL_NS);

    fake::with(|s| s.hold = false);
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
    assert_eq!(
        e.gpu_time_ns(),
        3 * KERNEL_NS,
        "completed launches count at once"
    );
    let created = fake::with(|s| s.count("cuEventCreate"));
    assert_eq!(created, 4, "timing events are reused");
}

#[test]
fn stream_priorities_are_the_drivers() {
    let mut e = exec();
    let (ctx, _buf, _f) = setup(&mut e, 4);
    assert_eq!(
        e.stream_priority_range(ctx),
        Ok((0, fake::GREATEST_PRIORITY))
    );
    let s = e
        .stream_create_with_priority(ctx, 1, fake::GREATEST_PRIORITY)
        .unwrap();
    let plain = e.stream_create(ctx, 0).unwrap();
    fake::with(|f| {
        assert!(f.calls.contains(&"cuStreamCreateWithPriority"));
        let mut prios: Vec<_> = f.stream_priorities.values().copied().collect();
        prios.sort_unstable();
        assert_eq!(
            prios,
            [fake::GREATEST_PRIORITY],
            "one stream with a priority"
        );
    });
    e.stream_destroy(ctx, s).unwrap();
    e.stream_destroy(ctx, plain).unwrap();
}

#[test]
fn every_synchronize_collects_device_time() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 4);
    let s1 = e.stream_create(ctx, 1).unwrap();
    let ev = e.event_create(ctx, 0).unwrap();
    fake::with(|s| s.hold = true);

    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), Some(s1))
        .unwrap();
    e.stream_synchronize(ctx, Some(s1)).unwrap();
    assert_eq!(e.pending_timings(), 0);

    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), Some(s1))
        .unwrap();
    e.event_record(ctx, ev, Some(s1)).unwrap();
    e.event_synchronize(ctx, ev).unwrap();
    assert_eq!(e.pending_timings(), 0);
    assert_eq!(e.gpu_time_ns(), 2 * KERNEL_NS);
}

#[test]
fn a_full_timing_queue_waits_for_its_oldest() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 4);
    fake::with(|s| s.hold = true);
    let n = MAX_PENDING_TIMINGS + 3;
    for _ in 0..n {
        e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
        assert!(e.pending_timings() <= MAX_PENDING_TIMINGS);
    }
    assert!(fake::with(|s| s.count("cuEventSynchronize")) >= 1);
    e.synchronize(ctx).unwrap();
    assert_eq!(
        e.gpu_time_ns(),
        n as u64 * KERNEL_NS,
        "no launch goes uncounted"
    );
}

#[test]
fn queries_report_not_ready() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 4);
    let ev = e.event_create(ctx, 0).unwrap();
    fake::with(|s| s.hold = true);
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
    e.event_record(ctx, ev, None).unwrap();
    assert_eq!(e.stream_query(ctx, None), Err(ExecError::NotReady));
    assert_eq!(e.event_query(ctx, ev), Err(ExecError::NotReady));
    e.synchronize(ctx).unwrap();
    assert_eq!(e.stream_query(ctx, None), Ok(()));
    assert_eq!(e.event_query(ctx, ev), Ok(()));
}

#[test]
fn user_events_time_work_between_them() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 4);
    let s1 = e.stream_create(ctx, 0).unwrap();
    let (a, b) = (
        e.event_create(ctx, 0).unwrap(),
        e.event_create(ctx, 0).unwrap(),
    );
    e.event_record(ctx, a, Some(s1)).unwrap();
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), Some(s1))
        .unwrap();
    e.event_record(ctx, b, Some(s1)).unwrap();
    e.stream_wait_event(ctx, None, b).unwrap();
    e.event_synchronize(ctx, b).unwrap();
    assert_eq!(e.event_elapsed_ms(ctx, a, b), Ok(1.5));
    e.event_destroy(ctx, a).unwrap();
    assert_eq!(e.event_query(ctx, a), Err(ExecError::Invalid("event")));
    e.stream_destroy(ctx, s1).unwrap();
    assert_eq!(
        e.stream_synchronize(ctx, Some(s1)),
        Err(ExecError::Invalid("stream"))
    );
}

#[test]
fn copies_on_a_stream_are_complete_when_they_return() {
    let mut e = exec();
    let ctx = e.create_context().unwrap();
    let s1 = e.stream_create(ctx, 1).unwrap();
    let a = e.mem_alloc(ctx, 8).unwrap();
    let b = e.mem_alloc(ctx, 8).unwrap();
    e.memcpy_htod(ctx, a, &[1, 2, 3, 4, 5, 6, 7, 8], Some(s1))
        .unwrap();
    e.memcpy_dtod(ctx, b, a, 8, Some(s1)).unwrap();
    let mut out = [0u8; 8];
    e.memcpy_dtoh(ctx, &mut out, b, Some(s1)).unwrap();
    assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8]);
    e.memcpy_dtod(ctx, a, b, 4, None).unwrap();

    fake::with(|s| {
        let calls: Vec<&str> = s
            .calls
            .iter()
            .copied()
            .filter(|c| *c != "cuCtxSetCurrent")
            .collect();
        let after = |call: &str| calls[calls.iter().position(|c| *c == call).unwrap() + 1];
        assert_eq!(after("cuMemcpyHtoDAsync_v2"), "cuStreamSynchronize");
        assert_eq!(after("cuMemcpyDtoHAsync_v2"), "cuStreamSynchronize");
        assert_eq!(after("cuMemcpyDtoDAsync_v2"), "cuMemcpyDtoHAsync_v2");
        assert_eq!(s.count("cuMemcpyDtoD_v2"), 1);
    });
}

#[test]
fn memset_writes_each_width() {
    let mut e = exec();
    let ctx = e.create_context().unwrap();
    let s1 = e.stream_create(ctx, 0).unwrap();
    let p = e.mem_alloc(ctx, 24).unwrap();
    e.memset(ctx, p, 0xab, 1, 4, None).unwrap();
    e.memset(ctx, p + 4, 0x1234, 2, 2, None).unwrap();
    e.memset(ctx, p + 8, 0xdead_beef, 4, 2, None).unwrap();
    e.memset(ctx, p + 16, 0xcd, 1, 2, Some(s1)).unwrap();
    e.memset(ctx, p + 18, 0x5678, 2, 1, Some(s1)).unwrap();
    e.memset(ctx, p + 20, 0x0102_0304, 4, 1, Some(s1)).unwrap();
    let mut out = [0u8; 24];
    e.memcpy_dtoh(ctx, &mut out, p, Some(s1)).unwrap();
    let mut expected = vec![0xab; 4];
    expected.extend_from_slice(&[0x34, 0x12, 0x34, 0x12]);
    expected.extend_from_slice(&0xdead_beefu32.to_le_bytes().repeat(2));
    expected.extend_from_slice(&[0xcd, 0xcd, 0x78, 0x56]);
    expected.extend_from_slice(&0x0102_0304u32.to_le_bytes());
    assert_eq!(&out[..], &expected[..]);

    assert_eq!(
        e.memset(ctx, p, 0, 3, 1, None),
        Err(ExecError::Invalid("memset element size"))
    );
    assert_eq!(
        e.memset(ctx, p, 0x100, 1, 1, None),
        Err(ExecError::Invalid("memset value"))
    );
    assert_eq!(
        e.memset(ctx, p, 0x1_0000, 2, 1, Some(s1)),
        Err(ExecError::Invalid("memset value"))
    );
}

#[test]
fn objects_belong_to_their_context() {
    let mut e = exec();
    let a = e.create_context().unwrap();
    let b = e.create_context().unwrap();
    let sa = e.stream_create(a, 0).unwrap();
    let ea = e.event_create(a, 0).unwrap();
    // `b` was created last; allocating in `a` must switch to it.
    let pa = e.mem_alloc(a, 64).unwrap();
    let pb = e.mem_alloc(b, 64).unwrap();
    fake::with(|s| {
        let owner = |p: DevPtr| s.allocs[&p].ctx;
        assert_ne!(owner(pa), owner(pb));
        assert_eq!(s.objects_of(owner(pa)), 3);
    });
    assert_eq!(e.mem_free(b, pa), Err(ExecError::Invalid("device pointer")));
    assert_eq!(
        e.stream_synchronize(b, Some(sa)),
        Err(ExecError::Invalid("stream"))
    );
    assert_eq!(e.event_query(b, ea), Err(ExecError::Invalid("event")));
    assert_eq!(
        e.mem_alloc(CtxId(4242), 8),
        Err(ExecError::Invalid("context"))
    );
    e.mem_free(a, pa).unwrap();
    assert_eq!(e.mem_free(a, pa), Err(ExecError::Invalid("device pointer")));
}

#[test]
fn unloading_a_module_retires_its_kernels() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 4);
    let m = e.module_load(ctx, ADD_ONE_PTX.as_bytes()).unwrap();
    let (g, _) = e.function(ctx, m, "add_one").unwrap();
    e.module_unload(ctx, m).unwrap();
    assert_eq!(
        e.launch(ctx, g, &cfg(1, 4), &params(buf, 4), None),
        Err(ExecError::Invalid("function"))
    );
    assert_eq!(e.module_unload(ctx, m), Err(ExecError::Invalid("module")));
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
}

#[test]
fn allocation_failures() {
    let mut e = exec();
    let ctx = e.create_context().unwrap();
    let big = fake::TOTAL_MEM + 1;
    assert_eq!(e.mem_alloc(ctx, big), Err(ExecError::OutOfMemory(big)));
    assert_eq!(
        e.mem_alloc(ctx, 0),
        Err(ExecError::Driver {
            call: "cuMemAlloc_v2",
            status: Status::INVALID_VALUE
        })
    );
    let p = e.mem_alloc(ctx, 4096).unwrap();
    assert_eq!(e.device_free_mem(), Ok(fake::TOTAL_MEM - 4096));
    e.mem_free(ctx, p).unwrap();
    assert_eq!(e.device_free_mem(), Ok(fake::TOTAL_MEM));
}

#[test]
fn a_failed_launch_reports_the_driver_code_and_keeps_nothing() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 4);
    fake::with(|s| s.fail = Some(("cuLaunchKernel", 719)));
    assert_eq!(
        e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None),
        Err(ExecError::Driver {
            call: "cuLaunchKernel",
            status: Status::LAUNCH_FAILED
        })
    );
    assert_eq!(e.pending_timings(), 0);
    drop(e);
    fake::with(|s| assert_eq!(s.live_objects(), 0));
}

#[test]
fn destroying_a_context_releases_it_and_counts_its_time() {
    let mut e = exec();
    let keep = e.create_context().unwrap();
    let kept = e.mem_alloc(keep, 16).unwrap();
    let (ctx, buf, f) = setup(&mut e, 4);
    e.stream_create(ctx, 0).unwrap();
    e.event_create(ctx, 0).unwrap();
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();

    let kept_owner = fake::with(|s| s.allocs[&kept].ctx);
    e.destroy_context(ctx);
    fake::with(|s| {
        assert_eq!(
            s.leaked_at_destroy, 0,
            "everything released before cuCtxDestroy"
        );
        assert_eq!(s.contexts.len(), 1);
        assert_eq!(
            s.objects_of(kept_owner),
            1,
            "the other context is untouched"
        );
    });
    assert_eq!(e.gpu_time_ns(), KERNEL_NS);
    assert_eq!(e.pending_timings(), 0);
    assert_eq!(e.mem_alloc(ctx, 8), Err(ExecError::Invalid("context")));
    e.destroy_context(ctx); // twice is harmless
}

#[test]
fn destroying_a_context_does_not_wait_for_runaway_kernels() {
    let mut e = exec();
    e.destroy_wait = Duration::from_millis(20);
    let (ctx, buf, f) = setup(&mut e, 4);
    fake::with(|s| s.hold = true);
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
    let started = Instant::now();
    e.destroy_context(ctx);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(e.gpu_time_ns(), 0, "unfinished launches are not counted");
    assert_eq!(e.pending_timings(), 0);
    fake::with(|s| {
        assert_eq!(s.count("cuCtxSynchronize"), 0);
        assert_eq!(s.count("cuEventSynchronize"), 0);
        assert_eq!(s.leaked_at_destroy, 0);
        assert_eq!(s.live_objects(), 0);
    });
}

#[test]
fn drop_releases_everything() {
    let mut e = exec();
    e.destroy_wait = Duration::from_millis(1);
    assert_eq!(
        e.device_free_mem(),
        Ok(fake::TOTAL_MEM),
        "via the primary context"
    );
    for _ in 0..2 {
        let (ctx, buf, f) = setup(&mut e, 4);
        e.stream_create(ctx, 1).unwrap();
        e.event_create(ctx, 0).unwrap();
        fake::with(|s| s.hold = true);
        e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
    }
    drop(e);
    fake::with(|s| {
        assert_eq!(s.live_objects(), 0);
        assert_eq!(s.primary_refs, 0);
        assert_eq!(s.leaked_at_destroy, 0);
    });
}

#[test]
fn the_executor_may_change_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<CudaExecutor>();
}

/// Runs on a host with an NVIDIA GPU: `cargo test -p fairgpu-executor --lib
/// cuda -- --ignored`.
#[test]
#[ignore = "needs an NVIDIA GPU"]
fn real_gpu_round_trip() {
    let mut e = CudaExecutor::new(0).expect("a GPU");
    assert!(!e.device().name.is_empty());
    assert!(e.device().total_mem > 0);
    assert!(e
        .device()
        .attribute(super::super::attr::MAX_THREADS_PER_BLOCK)
        .is_some());
    let n: u32 = 1 << 20;
    let ctx = e.create_context().unwrap();
    let buf = e.mem_alloc(ctx, u64::from(n) * 4).unwrap();
    let init: Vec<u32> = (0..n).collect();
    e.memcpy_htod(ctx, buf, &words(&init), None).unwrap();
    let m = e.module_load(ctx, ADD_ONE_PTX.as_bytes()).unwrap();
    let (f, layout) = e.function(ctx, m, "add_one").unwrap();
    assert_eq!(
        layout,
        vec![
            ParamInfo { offset: 0, size: 8 },
            ParamInfo { offset: 8, size: 4 },
        ]
    );
    let s = e.stream_create(ctx, 1).unwrap();
    for _ in 0..3 {
        e.launch(ctx, f, &cfg(n.div_ceil(256), 256), &params(buf, n), Some(s))
            .unwrap();
    }
    let mut out = vec![0u8; n as usize * 4];
    e.memcpy_dtoh(ctx, &mut out, buf, Some(s)).unwrap();
    let expected: Vec<u32> = (0..n).map(|i| i + 3).collect();
    assert!(out == words(&expected), "kernel results");
    e.synchronize(ctx).unwrap();
    assert!(e.gpu_time_ns() > 0);
    assert!(e.device_free_mem().unwrap() > 0);
    e.destroy_context(ctx);
}

#[test]
fn arrays_copies_and_objects_reach_the_driver_as_cuda_h_describes_them() {
    let mut e = exec();
    let ctx = e.create_context().unwrap();
    let other = e.create_context().unwrap();
    // 5 x 3 float2 elements: rows of 40 bytes.
    let desc = ArrayDesc {
        width: 5,
        height: 3,
        depth: 0,
        format: 0x20,
        channels: 2,
        flags: 0,
    };
    let arr = e.array_create(ctx, &desc).unwrap();
    let host: Vec<u8> = (0..120u8).collect();
    let at = |place, pos| crate::RectSide { place, pos };
    let up = RectCopy {
        src: at(crate::Place::Host, [0; 3]),
        dst: at(crate::Place::Array(arr), [0; 3]),
        extent: [40, 3, 1],
    };
    e.memcpy_rect(ctx, &up, HostData::From(&host), None)
        .unwrap();
    fake::with(|s| {
        let a = s.arrays.values().next().expect("an array");
        assert_eq!((a.row, a.rows), (40, 3));
        assert_eq!(a.bytes, host);
    });
    // Array box -> pitched device memory, on a stream.
    let dev = e.mem_alloc(ctx, 64 * 4).unwrap();
    let st = e.stream_create(ctx, 0).unwrap();
    let down = RectCopy {
        src: at(crate::Place::Array(arr), [8, 1, 0]),
        dst: at(
            crate::Place::Device {
                ptr: dev,
                pitch: 64,
                height: 4,
            },
            [4, 2, 0],
        ),
        extent: [16, 2, 1],
    };
    e.memcpy_rect(ctx, &down, HostData::None, Some(st)).unwrap();
    let mut back = vec![0u8; 64 * 4];
    e.memcpy_dtoh(ctx, &mut back, dev, None).unwrap();
    for y in 0..2 {
        assert_eq!(
            &back[(2 + y) * 64 + 4..][..16],
            &host[(1 + y) * 40 + 8..][..16],
            "row {y}"
        );
    }
    // Host data of the wrong size never reaches the driver.
    let copies = || fake::with(|s| s.count("cuMemcpy3D_v2"));
    let before = copies();
    assert_eq!(
        e.memcpy_rect(ctx, &up, HostData::From(&host[1..]), None),
        Err(ExecError::Invalid("host data"))
    );
    assert_eq!(copies(), before);

    let tex = TextureDesc::default();
    let t = e
        .tex_object_create(ctx, &TexResource::Array(arr), &tex)
        .unwrap();
    let lin = e
        .tex_object_create(
            ctx,
            &TexResource::Linear {
                ptr: dev,
                format: 0x20,
                channels: 1,
                bytes: 256,
            },
            &tex,
        )
        .unwrap();
    fake::with(|s| {
        let (_, r) = s.objects[&lin];
        assert_eq!(
            (r.res_type, r.res[0], r.res[1], r.res[2]),
            (2, dev, 0x20 | 1 << 32, 256)
        );
    });
    let s = e.surf_object_create(ctx, arr).unwrap();
    // Objects and arrays belong to their context.
    assert_eq!(
        e.tex_object_destroy(other, t),
        Err(ExecError::Invalid("texture object"))
    );
    assert_eq!(
        e.tex_object_create(other, &TexResource::Array(arr), &tex),
        Err(ExecError::Invalid("array"))
    );
    e.tex_object_destroy(ctx, lin).unwrap();
    // Destroying the context releases the rest.
    e.destroy_context(ctx);
    fake::with(|st| {
        assert_eq!(st.leaked_at_destroy, 0);
        assert!(st.arrays.is_empty() && st.objects.is_empty());
        assert!(st.count("cuTexObjectDestroy") == 2 && st.count("cuSurfObjectDestroy") == 1);
    });
    let _ = (t, s);
}

#[test]
fn a_part_of_a_sliced_launch_runs_the_companion_over_its_box() {
    let mut e = exec();
    e.set_slicing(true);
    let (ctx, buf, f) = setup(&mut e, 64);
    fake::with(|s| {
        let text = s.images.last().expect("a module");
        assert!(text.contains(".entry add_one__fairgpu_part("), "{text}");
    });
    assert_eq!(e.sliceable(ctx, f), Ok(()));
    // No history yet; a whole launch measures it.
    assert_eq!(e.predict_ns(ctx, f, 2), None);
    e.launch(ctx, f, &cfg(2, 32), &params(buf, 64), None)
        .unwrap();
    e.synchronize(ctx).unwrap();
    assert_eq!(e.predict_ns(ctx, f, 4), Some(2 * KERNEL_NS));
    let part = LaunchConfig {
        part: Some(crate::GridPart {
            offset: [1, 0, 0],
            extent: [1, 1, 1],
        }),
        ..LaunchConfig::new([2, 1, 1], [32, 1, 1], 0)
    };
    e.launch(ctx, f, &part, &params(buf, 64), None).unwrap();
    fake::with(|s| {
        let l = s.launches.last().unwrap();
        assert_eq!(l.kernel, "add_one__fairgpu_part");
        assert_eq!(l.grid, [1, 1, 1], "the box");
        let mut want = params(buf, 64);
        for v in [1u32, 0, 0, 2, 1, 1] {
            want.extend_from_slice(&v.to_ne_bytes());
        }
        assert_eq!(l.params[..want.len()], want[..], "offset, then grid");
    });
    let outside = LaunchConfig {
        part: Some(crate::GridPart {
            offset: [2, 0, 0],
            extent: [1, 1, 1],
        }),
        ..part
    };
    assert_eq!(
        e.launch(ctx, f, &outside, &params(buf, 64), None),
        Err(ExecError::Invalid("grid part outside the grid"))
    );
}

#[test]
fn without_slicing_modules_load_as_sent_and_nothing_is_sliceable() {
    let mut e = exec();
    let (ctx, _buf, f) = setup(&mut e, 4);
    fake::with(|s| assert_eq!(s.images.last().unwrap().trim_end_matches('\0'), ADD_ONE_PTX));
    assert!(e.sliceable(ctx, f).is_err());
}

#[test]
fn the_runaway_guard_finds_a_kernel_that_does_not_end_and_never_blocks_on_it() {
    let mut e = exec();
    e.destroy_wait = Duration::from_millis(1);
    e.set_request_limit(Some(Duration::from_millis(20)));
    let (ctx, buf, f) = setup(&mut e, 4);
    // Within the limit: waits work as before.
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
    e.synchronize(ctx).unwrap();
    assert_eq!(e.runaway(), None);
    fake::with(|s| s.hold_after_launch = true);
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), None).unwrap();
    let t0 = Instant::now();
    let timeout = Err(ExecError::Driver {
        call: "runaway guard",
        status: Status::LAUNCH_TIMEOUT,
    });
    assert_eq!(e.stream_synchronize(ctx, None), timeout);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "bounded by the limit"
    );
    let r = e.runaway().expect("a runaway");
    assert_eq!((r.ctx, r.kernel.as_str()), (ctx, "add_one"));
    assert!(r.ran_ns >= 20_000_000, "{r:?}");
    assert_eq!(e.runaways(), 1);
    // Every later wait fails at once; destroying the context does not
    // wait for the kernel in the driver.
    assert_eq!(e.synchronize(ctx), timeout);
    let mut out = [0u8; 4];
    assert_eq!(e.memcpy_dtoh(ctx, &mut out, buf, None), timeout);
    e.destroy_context(ctx);
    fake::with(|s| {
        assert_eq!(
            s.count("cuCtxSynchronize"),
            1,
            "only the first, in-limit wait"
        );
        assert_eq!(s.count("cuStreamSynchronize"), 0);
        assert_eq!(s.count("cuCtxDestroy_v2"), 0, "left to the process's exit");
    });
    assert_eq!(e.runaways(), 1, "counted once");
}

#[test]
fn a_fatbin_whose_cubin_this_gpu_cannot_run_is_loaded_from_its_ptx_with_companions() {
    let mut e = exec();
    e.set_slicing(true);
    let ctx = e.create_context().unwrap();
    let mut ptx = ADD_ONE_PTX.as_bytes().to_vec();
    ptx.push(0);
    // SASS for sm_75 only: a 9.0 device compiles the PTX anyway.
    let fatbin = crate::sim::image_tests::fatbin_with_cubin_for(&ptx, 0, 75);
    let m = e.module_load(ctx, &fatbin).unwrap();
    fake::with(|s| {
        let text = s.images.last().expect("a module");
        assert!(text.contains(".entry add_one__fairgpu_part("), "{text}");
    });
    let (f, _) = e.function(ctx, m, "add_one").unwrap();
    assert_eq!(e.sliceable(ctx, f), Ok(()));
}

#[test]
fn virtual_memory_maps_memory_kernels_then_use() {
    const GRAN: u64 = 2 << 20;
    let mut e = exec();
    // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is the device's own.
    assert_eq!(e.device().attribute(102), Some(1020));
    let (ctx, _, f) = setup(&mut e, 8);
    let base = e.va_reserve(ctx, 2 * GRAN, 0).unwrap();
    assert_eq!(base % GRAN, 0);
    let mems = [
        e.phys_create(ctx, GRAN).unwrap(),
        e.phys_create(ctx, GRAN).unwrap(),
    ];
    // Two pieces of memory side by side in the range, then read-write.
    e.map(ctx, base, GRAN, 0, mems[0]).unwrap();
    e.map(ctx, base + GRAN, GRAN, 0, mems[1]).unwrap();
    e.set_access(ctx, base, 2 * GRAN, 3).unwrap();
    let p = base + GRAN;
    e.memcpy_htod(ctx, p, &words(&[5, 6, 7, 8]), None).unwrap();
    e.launch(ctx, f, &cfg(1, 4), &params(p, 4), None).unwrap();
    let mut out = vec![0u8; 16];
    e.memcpy_dtoh(ctx, &mut out, p, None).unwrap();
    assert_eq!(out, words(&[6, 7, 8, 9]));
    // Unmapped and mapped again at the other place: the bytes stay with the
    // memory.
    e.unmap(ctx, base, GRAN).unwrap();
    e.unmap(ctx, p, GRAN).unwrap();
    e.map(ctx, base, GRAN, 0, mems[1]).unwrap();
    e.set_access(ctx, base, GRAN, 3).unwrap();
    e.memcpy_dtoh(ctx, &mut out, base, None).unwrap();
    assert_eq!(out, words(&[6, 7, 8, 9]));
    e.unmap(ctx, base, GRAN).unwrap();
    e.phys_release(ctx, mems[0]).unwrap();
    e.va_free(ctx, base, 2 * GRAN).unwrap();
    // What is left (memory mapped in a second range) goes with the context.
    let again = e.va_reserve(ctx, GRAN, 4 * GRAN).unwrap();
    assert_eq!(again % (4 * GRAN), 0);
    e.map(ctx, again, GRAN, 0, mems[1]).unwrap();
    e.set_access(ctx, again, GRAN, 3).unwrap();
    e.destroy_context(ctx);
    let (res, mem, maps) =
        fake::with(|s| (s.reservations.len(), s.vmm_mem.len(), s.mappings.len()));
    assert_eq!((res, mem, maps), (0, 0, 0), "left behind by the context");
}

#[test]
fn a_marked_synchronization_waits_for_its_markers_alone() {
    let mut e = exec();
    let (ctx, buf, f) = setup(&mut e, 4);
    let s1 = e.stream_create(ctx, 1).unwrap();
    let s2 = e.stream_create(ctx, 1).unwrap();
    fake::with(|s| s.hold = true);
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), Some(s1))
        .unwrap();
    let before: HashSet<usize> = fake::with(|s| s.events.keys().copied().collect());
    let mark = e.sync_mark(ctx, SyncTarget::Context).expect("marked");
    let markers: Vec<usize> = fake::with(|s| {
        s.events
            .keys()
            .copied()
            .filter(|k| !before.contains(k))
            .collect()
    });
    assert_eq!(markers.len(), 3, "one on the NULL stream and each stream");
    // Another thread's launch after the mark.
    e.launch(ctx, f, &cfg(1, 4), &params(buf, 4), Some(s2))
        .unwrap();
    assert_eq!(e.sync_pending(ctx, &mark), SyncPending::Running);
    // The marked work ends; the later launch runs on.
    fake::with(|s| {
        for k in &markers {
            s.events.get_mut(k).unwrap().done = true;
        }
    });
    assert_eq!(e.sync_pending(ctx, &mark), SyncPending::Done);
    assert_eq!(e.stream_query(ctx, Some(s2)), Err(ExecError::NotReady));
    let waits = fake::with(|s| s.count("cuEventSynchronize"));
    e.sync_marked(ctx, mark).unwrap();
    fake::with(|s| {
        // (The fake driver's event wait completes all work, so only the
        // calls tell what was waited for.)
        assert_eq!(s.count("cuEventSynchronize"), waits + 3, "its markers");
        assert_eq!(s.count("cuCtxSynchronize"), 0, "no wait for later work");
        assert_eq!(s.count("cuStreamSynchronize"), 0);
    });
    // Markers are reused.
    let created = fake::with(|s| s.count("cuEventCreate"));
    let again = e
        .sync_mark(ctx, SyncTarget::Stream(Some(s2)))
        .expect("marked");
    assert_eq!(fake::with(|s| s.count("cuEventCreate")), created);
    assert_eq!(e.sync_pending(ctx, &again), SyncPending::Running);
    e.sync_forget(ctx, again);

    // An event's mark follows the guest's event, which another thread
    // may destroy meanwhile: the synchronization then fails as it would.
    let ev = e.event_create(ctx, 0).unwrap();
    e.event_record(ctx, ev, Some(s2)).unwrap();
    let on_event = e.sync_mark(ctx, SyncTarget::Event(ev)).expect("marked");
    assert_eq!(e.sync_pending(ctx, &on_event), SyncPending::Running);
    e.event_destroy(ctx, ev).unwrap();
    assert_eq!(e.sync_pending(ctx, &on_event), SyncPending::Done);
    assert_eq!(
        e.sync_marked(ctx, on_event),
        Err(ExecError::Invalid("event"))
    );
    assert_eq!(
        e.sync_mark(ctx, SyncTarget::Event(ev)),
        None,
        "a bad handle"
    );

    // A context with its marks and markers is destroyed whole.
    let _leftover = e.sync_mark(ctx, SyncTarget::Context).expect("marked");
    e.synchronize(ctx).unwrap();
    e.destroy_context(ctx);
    assert_eq!(fake::with(|s| s.leaked_at_destroy), 0);
}

#[test]
fn a_stack_costs_what_the_driver_reserves_for_every_resident_thread() {
    let e = exec();
    // The fake driver reports attribute a as a * 10: 160 multiprocessors
    // of 390 threads.
    assert_eq!(e.stack_reserve(16 << 10), (16 << 10) * 160 * 390);
    assert_eq!(e.stack_reserve(u64::MAX), u64::MAX, "saturates");
}
