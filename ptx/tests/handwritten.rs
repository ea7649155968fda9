//! Hand-written PTX: each error the interpreter reports, and the semantics
//! that nvcc's kernels above do not reach.

#![allow(clippy::needless_range_loop)]

mod common;

use common::*;
use fairgpu_ptx::{Error, Limits, Module, SHARED_WINDOW};

const HEAD: &str = ".version 9.0\n.target sm_80\n.address_size 64\n";

/// A kernel `k(.u64 out)` with `body`; `%rd1` holds `out` as a global
/// address and `%r1` the thread's linear index.
fn kernel_with(regs: &str, body: &str) -> Module {
    let text = format!(
        "{HEAD}.visible .entry k(.param .u64 k_param_0)\n{{\n\
         .reg .pred %p<8>;\n.reg .b16 %rs<8>;\n.reg .b32 %r<32>;\n.reg .f32 %f<16>;\n\
         .reg .b64 %rd<16>;\n.reg .f64 %fd<8>;\n{regs}\n\
         ld.param.u64 %rd1, [k_param_0];\ncvta.to.global.u64 %rd1, %rd1;\n\
         mov.u32 %r1, %tid.x;\nmul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\n\
         {body}\nret;\n}}\n"
    );
    Module::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Runs `k` with `threads` threads in one block and `out` of `n` u32s.
fn run_k(m: &Module, threads: u32, n: usize) -> (Result<fairgpu_ptx::RunStats, Error>, Vec<u32>) {
    let mut mem = VecMemory::default();
    let out = mem.alloc_u32(&vec![0; n]);
    let mut g = m.globals();
    let r = launch(
        m,
        &mut g,
        "k",
        dims([1, 1, 1], [threads, 1, 1], 0),
        Params::new().ptr(out),
        &mut mem,
    );
    (r, mem.u32s(out))
}

/// Runs `k` with `threads` threads in one block over `words` (its `out`),
/// and returns them afterwards.
fn run_words(m: &Module, threads: u32, words: &[u32]) -> Vec<u32> {
    let mut mem = VecMemory::default();
    let out = mem.alloc_u32(words);
    let mut g = m.globals();
    launch(
        m,
        &mut g,
        "k",
        dims([1, 1, 1], [threads, 1, 1], 0),
        Params::new().ptr(out),
        &mut mem,
    )
    .expect("runs");
    mem.u32s(out)
}

#[test]
fn unsupported_instruction_is_named_when_reached() {
    let m = kernel_with(
        "",
        "setp.eq.u32 %p1, %r1, 5;\n@!%p1 bra DONE;\n\
         tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [tex0, {%f5, %f6}];\nDONE:\n\
         st.global.u32 [%rd3], 1;",
    );
    // Thread 5 reaches it.
    let (r, _) = run_k(&m, 8, 8);
    match r {
        Err(Error::Unsupported { what }) => assert!(what.contains("tex.2d.v4.f32.f32"), "{what}"),
        r => panic!("{r:?}"),
    }
    // With 4 threads nobody does, and the kernel runs.
    let (r, out) = run_k(&m, 4, 4);
    r.unwrap();
    assert_eq!(out, [1; 4]);
}

#[test]
fn programmatic_dependent_launch_controls_run_as_no_ops() {
    let m = kernel_with(
        "",
        "griddepcontrol.wait;\ngriddepcontrol.launch_dependents;\nst.global.u32 [%rd3], 9;",
    );
    let (r, out) = run_k(&m, 4, 4);
    r.unwrap();
    assert_eq!(out, [9; 4]);
    for inst in ["griddepcontrol;", "griddepcontrol.wait.launch_dependents;"] {
        let m = kernel_with("", inst);
        match run_k(&m, 1, 1).0 {
            Err(Error::Unsupported { what }) => assert!(what.contains("griddepcontrol"), "{what}"),
            r => panic!("{inst}: {r:?}"),
        }
    }
}

#[test]
fn unknown_modifiers_are_unsupported_not_ignored() {
    for inst in [
        "add.sat.bf16 %rs1, %rs2, %rs3;",
        "min.xorsign.abs.bf16 %rs1, %rs2, %rs3;",
        "ld.global.L2::cache_hint.u32 %r2, [%rd3], %rd4;",
        "cvt.rni.f16.f32 %rs1, %f1;",
        "mul.foo.s32 %r2, %r3, %r4;",
    ] {
        let m = kernel_with("", inst);
        match run_k(&m, 1, 1).0 {
            Err(Error::Unsupported { what }) => {
                let op = inst.split_whitespace().next().unwrap();
                assert!(what.contains(op), "{what} names {op}");
            }
            r => panic!("{inst}: {r:?}"),
        }
    }
}

/// Whole warps: accesses are checked for all 32 lanes at once and, when
/// any lane would fault, run lane by lane, so the error names the first
/// faulting lane's address and the lanes before it still did their work.
#[test]
fn a_warp_access_fails_at_its_first_faulting_lane() {
    // `out` holds 45 u32: threads 45.. of the second warp store past it.
    let m = kernel_with("", "st.global.u32 [%rd3], %r1;");
    let (r, out) = run_k(&m, 64, 45);
    match r {
        Err(Error::OutOfBounds {
            space: "global",
            addr,
            len: 4,
        }) => {
            assert_eq!(addr % 4, 0, "{addr:#x}");
            assert_eq!(
                out,
                (0..45).collect::<Vec<u32>>(),
                "lanes before the fault stored"
            );
        }
        r => panic!("{r:?}"),
    }
    // A shared array of 36 u32: lane 36's load is the first outside it.
    let m = kernel_with(
        ".shared .align 4 .b8 s[144];",
        "mov.u32 %r3, s;
shl.b32 %r4, %r1, 2;
add.s32 %r5, %r3, %r4;
ld.shared.u32 %r2, [%r5];",
    );
    match run_k(&m, 64, 64).0 {
        Err(Error::OutOfBounds {
            space: "shared",
            addr,
            len: 4,
        }) => assert_eq!(addr, 36 * 4),
        r => panic!("{r:?}"),
    }
    // One misaligned lane of a full warp.
    let m = kernel_with(
        ".shared .align 4 .b8 s[256];",
        "mov.u32 %r3, s;
shl.b32 %r4, %r1, 2;
setp.eq.u32 %p1, %r1, 9;
         selp.b32 %r6, 2, 0, %p1;
add.s32 %r5, %r3, %r4;
add.s32 %r5, %r5, %r6;
         ld.shared.u32 %r2, [%r5];",
    );
    match run_k(&m, 32, 32).0 {
        Err(Error::Misaligned {
            space: "shared",
            addr,
            len: 4,
        }) => assert_eq!(addr, 9 * 4 + 2),
        r => panic!("{r:?}"),
    }
}

/// A full warp's vector accesses of consecutive vectors (`.v2`, `.v4`) are
/// read and written whole, and taken apart into their registers; where the
/// range leaves the allocation the access still fails at its first faulting
/// lane, after the lanes before it.
#[test]
fn vector_accesses_of_a_warp_move_every_element_and_fault_at_their_first_lane() {
    // Each thread reverses its four words: v4 load, v4 store.
    let m = kernel_with(
        "",
        "mul.wide.u32 %rd4, %r1, 16;
add.s64 %rd5, %rd1, %rd4;
ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd5];
st.global.v4.u32 [%rd5], {%r5, %r4, %r3, %r2};",
    );
    let words: Vec<u32> = (0..256).map(|i| i * 7 + 1).collect();
    let out = run_words(&m, 64, &words);
    for (i, c) in out.chunks(4).enumerate() {
        let w = &words[4 * i..4 * i + 4];
        assert_eq!(c, [w[3], w[2], w[1], w[0]], "thread {i}");
    }
    // Pairs of 16-bit halves and of 64-bit words, written element by
    // element from the thread's index.
    let m = kernel_with(
        "",
        "mul.wide.u32 %rd4, %r1, 4;
add.s64 %rd5, %rd1, %rd4;
cvt.u16.u32 %rs1, %r1;
add.u16 %rs2, %rs1, 500;
st.global.v2.u16 [%rd5], {%rs1, %rs2};
mul.wide.u32 %rd6, %r1, 16;
add.s64 %rd7, %rd1, %rd6;
add.s64 %rd7, %rd7, 256;
cvt.u64.u32 %rd8, %r1;
add.s64 %rd9, %rd8, 77;
st.global.v2.u64 [%rd7], {%rd8, %rd9};",
    );
    let out = run_words(&m, 32, &[0; 64 + 128]);
    for l in 0..32u32 {
        assert_eq!(out[l as usize], l | (l + 500) << 16, "u16 pair {l}");
        let at = 64 + 4 * l as usize;
        assert_eq!(out[at..at + 4], [l, 0, l + 77, 0], "u64 pair {l}");
    }
    // `out` holds 90 u32: the pair of thread 45 is the first past it.
    let m = kernel_with(
        "",
        "mul.wide.u32 %rd4, %r1, 8;
add.s64 %rd5, %rd1, %rd4;
add.u32 %r2, %r1, 1000;
st.global.v2.u32 [%rd5], {%r1, %r2};",
    );
    match run_k(&m, 64, 90) {
        (
            Err(Error::OutOfBounds {
                space: "global",
                addr,
                len: 8,
            }),
            out,
        ) => {
            assert_eq!(addr % 8, 0, "{addr:#x}");
            let want: Vec<u32> = (0..45).flat_map(|l| [l, l + 1000]).collect();
            assert_eq!(out, want, "the pairs before the fault stored");
        }
        r => panic!("{r:?}"),
    }
    let m = kernel_with(
        "",
        "mul.wide.u32 %rd4, %r1, 8;
add.s64 %rd5, %rd1, %rd4;
ld.global.v2.u32 {%r2, %r3}, [%rd5];",
    );
    match run_k(&m, 64, 90).0 {
        Err(Error::OutOfBounds {
            space: "global",
            addr,
            len: 8,
        }) => assert_eq!(addr % 8, 0, "{addr:#x}"),
        r => panic!("{r:?}"),
    }
}

/// A 32-bit address register wraps: nvcc keeps a negative term in the
/// register and a positive one in the offset (`[%r4+68]` with `%r4` below
/// the array, Rodinia's nw), and the hardware's 32-bit address arithmetic
/// lands inside the array. The sum is taken modulo 2^32, for the full
/// warp's accesses and for a single lane's; a 64-bit register does not
/// wrap there, and an address that wraps outside the array still fails.
#[test]
fn a_32_bit_address_register_wraps_around_with_its_offset() {
    let m = kernel_with(
        ".shared .align 4 .b8 s[128];",
        "mov.u32 %r3, s;
shl.b32 %r4, %r1, 2;
add.s32 %r5, %r3, %r4;
sub.s32 %r6, %r5, 65536;
add.s32 %r7, %r1, 100;
st.shared.u32 [%r6+65536], %r7;
bar.sync 0;
setp.eq.u32 %p1, %r1, 3;
@%p1 st.shared.u32 [%r6+65540], %r1;
bar.sync 0;
ld.shared.u32 %r2, [%r6+65536];
st.global.u32 [%rd3], %r2;",
    );
    let (r, out) = run_k(&m, 32, 32);
    r.expect("runs");
    let want: Vec<u32> = (0..32).map(|t| if t == 4 { 3 } else { t + 100 }).collect();
    assert_eq!(out, want);
    // Wrapping to an address past the array is still out of bounds.
    let m = kernel_with(
        ".shared .align 4 .b8 s[128];",
        "mov.u32 %r3, s;
sub.s32 %r6, %r3, 65536;
ld.shared.u32 %r2, [%r6+65664];",
    );
    match run_k(&m, 1, 1).0 {
        Err(Error::OutOfBounds {
            space: "shared", ..
        }) => {}
        r => panic!("{r:?}"),
    }
}

/// A full warp's shared stores: lanes that share an address leave the
/// highest lane's value, an immediate reaches every lane, and one lane
/// outside the array or misaligned fails the store.
#[test]
fn a_warp_of_shared_stores_keeps_the_last_lane_and_fails_whole() {
    let m = kernel_with(
        ".shared .align 4 .b8 s[256];",
        "mov.u32 %r3, s;
shl.b32 %r4, %r1, 2;
add.s32 %r5, %r3, %r4;
st.shared.u32 [%r3], %r1;
st.shared.u32 [%r5+128], 77;
bar.sync 0;
ld.shared.u32 %r6, [%r3];
ld.shared.u32 %r7, [%r5+128];
add.s32 %r8, %r6, %r7;
st.global.u32 [%rd3], %r8;",
    );
    let (r, out) = run_k(&m, 32, 32);
    r.expect("runs");
    assert_eq!(out, vec![31 + 77; 32]);
    for (inst, bad) in [
        // Lane 31's element starts at byte 8 * 31 + 8 = 256 of 256.
        ("st.shared.u32 [%r5+8], %r1;", "out of bounds"),
        ("st.shared.u32 [%r5+2], %r1;", "misaligned"),
        ("st.shared.u32 [%r5+2], 5;", "misaligned"),
    ] {
        let m = kernel_with(
            ".shared .align 4 .b8 s[256];",
            &format!("mov.u32 %r3, s;\nshl.b32 %r4, %r1, 3;\nadd.s32 %r5, %r3, %r4;\n{inst}"),
        );
        match (run_k(&m, 32, 32).0, bad) {
            (
                Err(Error::OutOfBounds {
                    space: "shared", ..
                }),
                "out of bounds",
            )
            | (
                Err(Error::Misaligned {
                    space: "shared", ..
                }),
                "misaligned",
            ) => {}
            (r, _) => panic!("{inst}: {r:?}"),
        }
    }
}

#[test]
fn out_of_bounds_and_misaligned_accesses_fail() {
    let cases = [
        ("ld.global.u32 %r2, [%rd3+4096];", "global"),
        ("st.global.u32 [0], %r1;", "global"),
        ("ld.shared.u32 %r2, [s+1024];", "shared"),
        ("st.shared.u32 [s+-4], %r2;", "shared"),
        ("ld.local.u32 %r2, [l+16];", "local"),
        ("ld.param.u64 %rd5, [k_param_0+8];", "param"),
        ("ld.const.u32 %r2, [c+8];", "const"),
    ];
    for (inst, space) in cases {
        let text = format!(
            "{HEAD}.const .align 4 .b8 c[8];\n.visible .entry k(.param .u64 k_param_0)\n{{\n\
             .reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n.shared .align 4 .b8 s[1024];\n\
             .local .align 4 .b8 l[16];\n\
             ld.param.u64 %rd1, [k_param_0];\nmov.u32 %r1, %tid.x;\n\
             mul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\n{inst}\nret;\n}}\n"
        );
        let m = Module::parse(&text).unwrap();
        match run_k(&m, 4, 4).0 {
            Err(Error::OutOfBounds { space: s, .. }) => assert_eq!(s, space, "{inst}"),
            r => panic!("{inst}: {r:?}"),
        }
    }
    let m = kernel_with(".shared .align 4 .b8 s[64];", "ld.shared.u32 %r2, [s+2];");
    assert!(matches!(
        run_k(&m, 1, 1).0,
        Err(Error::Misaligned {
            space: "shared",
            ..
        })
    ));
    let m = kernel_with("", "ld.global.v2.u32 {%r2, %r3}, [%rd1+4];");
    assert!(matches!(
        run_k(&m, 1, 2).0,
        Err(Error::Misaligned {
            space: "global",
            ..
        })
    ));
}

#[test]
fn budget_stops_an_endless_loop() {
    let m = kernel_with("", "LOOP:\nadd.s32 %r2, %r2, 1;\nbra.uni LOOP;");
    let mut mem = VecMemory::default();
    let out = mem.alloc_u32(&[0; 32]);
    let lim = Limits {
        max_instructions: 100_000,
        ..Limits::default()
    };
    let r = m.run(
        &mut m.globals(),
        "k",
        &dims([2, 1, 1], [32, 1, 1], 0),
        &Params::new().ptr(out).0,
        &mut mem,
        &lim,
    );
    assert_eq!(r, Err(Error::Budget(100_000)));
}

/// Probe finding "max_instructions does not charge per-block setup": a
/// kernel of one instruction over a grid of one-thread blocks executed one
/// instruction per block, so the default budget let a launch run for most
/// of a minute. Each block's setup now counts against the same budget.
#[test]
fn grid_of_one_thread_blocks_is_stopped_by_the_budget() {
    let m = Module::parse(&format!("{HEAD}.visible .entry k()\n{{\nret;\n}}\n")).unwrap();
    let lim = Limits {
        max_instructions: 200_000,
        ..Limits::default()
    };
    let run = |blocks: u32| {
        m.run(
            &mut m.globals(),
            "k",
            &dims([blocks, 1, 1], [1, 1, 1], 0),
            &[],
            &mut VecMemory::default(),
            &lim,
        )
    };
    // 100,000 executed instructions, half the budget: the blocks' setup
    // makes up the rest.
    assert_eq!(run(100_000), Err(Error::Budget(200_000)));
    // A few blocks still fit, and only executed instructions are reported.
    let st = run(100).expect("fits the budget");
    assert_eq!((st.instructions, st.threads), (100, 100));
}

#[test]
fn barriers_that_cannot_complete_deadlock() {
    // Half the threads wait at barrier 1, the other half at barrier 2.
    let m = kernel_with(
        "",
        "setp.lt.u32 %p1, %r1, 16;\n@%p1 bra A;\nbar.sync 2;\nbra.uni B;\nA:\nbar.sync 1;\nB:\n\
         st.global.u32 [%rd3], 1;",
    );
    assert_eq!(run_k(&m, 32, 32).0, Err(Error::Deadlock(0, 0, 0)));
    // A thread count larger than the block.
    let m = kernel_with("", "bar.sync 0, 64;\nst.global.u32 [%rd3], 1;");
    assert_eq!(run_k(&m, 32, 32).0, Err(Error::Deadlock(0, 0, 0)));
}

#[test]
fn exited_threads_count_as_arrived() {
    // Threads 0..40 wait while 40..70 exit; the barrier completes.
    let m = kernel_with(
        ".shared .align 4 .b8 s[512];",
        "setp.ge.u32 %p1, %r1, 40;\n@%p1 bra END;\nshl.b32 %r2, %r1, 2;\nmov.u32 %r3, s;\n\
         add.s32 %r3, %r3, %r2;\nst.shared.u32 [%r3], %r1;\nbar.sync 0;\n\
         sub.s32 %r4, 39, %r1;\nshl.b32 %r4, %r4, 2;\nmov.u32 %r5, s;\nadd.s32 %r5, %r5, %r4;\n\
         ld.shared.u32 %r6, [%r5];\nst.global.u32 [%rd3], %r6;\nEND:",
    );
    let (r, out) = run_k(&m, 70, 70);
    r.unwrap();
    for i in 0..40 {
        assert_eq!(out[i], 39 - i as u32);
    }
    assert!(out[40..].iter().all(|&v| v == 0));
}

#[test]
fn named_barriers_with_arrive_order_producers_and_consumers() {
    // Warp 0 produces into shared memory and arrives at barrier 1; warp 1
    // waits there (64 threads), then reads.
    let m = kernel_with(
        ".shared .align 4 .b8 s[256];",
        "and.b32 %r2, %r1, 31;\nshl.b32 %r2, %r2, 2;\nmov.u32 %r3, s;\nadd.s32 %r3, %r3, %r2;\n\
         setp.ge.u32 %p1, %r1, 32;\n@%p1 bra CONSUME;\n\
         mul.lo.u32 %r4, %r1, 3;\nst.shared.u32 [%r3], %r4;\nbar.arrive 1, 64;\nbra.uni END;\n\
         CONSUME:\nbar.sync 1, 64;\nld.shared.u32 %r5, [%r3];\nst.global.u32 [%rd3], %r5;\nEND:",
    );
    let (r, out) = run_k(&m, 64, 64);
    r.unwrap();
    for i in 32..64 {
        assert_eq!(out[i], (i as u32 - 32) * 3);
    }
}

#[test]
fn shuffles_wait_for_diverged_lanes_and_fail_if_they_never_come() {
    // Lanes diverge, then reconverge at the shuffle.
    let m = kernel_with(
        "",
        "setp.lt.u32 %p1, %r1, 10;\nmov.u32 %r2, 100;\n@%p1 bra SKIP;\nadd.s32 %r2, %r1, 1000;\n\
         SKIP:\nshfl.sync.bfly.b32 %r3, %r2, 1, 31, -1;\nst.global.u32 [%rd3], %r3;",
    );
    let (r, out) = run_k(&m, 32, 32);
    r.unwrap();
    let v = |l: u32| if l < 10 { 100 } else { l + 1000 };
    for l in 0..32u32 {
        assert_eq!(out[l as usize], v(l ^ 1), "lane {l}");
    }
    // Lanes that wait at different shuffles never meet.
    let m = kernel_with(
        "",
        "setp.lt.u32 %p1, %r1, 16;\n@%p1 bra A;\nshfl.sync.idx.b32 %r3, %r1, 0, 31, -1;\n\
         bra.uni B;\nA:\nshfl.sync.idx.b32 %r3, %r1, 0, 31, -1;\nB:\nst.global.u32 [%rd3], %r3;",
    );
    match run_k(&m, 32, 32).0 {
        Err(Error::Unsupported { what }) => assert!(what.contains("never"), "{what}"),
        r => panic!("{r:?}"),
    }
    // Lanes that exit instead of coming do not hold the others up (their
    // values read as the reader's own).
    let m = kernel_with(
        "",
        "setp.ge.u32 %p1, %r1, 20;\n@%p1 bra END;\nshfl.sync.down.b32 %r3, %r1, 4, 31, -1;\n\
         st.global.u32 [%rd3], %r3;\nEND:",
    );
    let (r, out) = run_k(&m, 32, 32);
    r.unwrap();
    for l in 0..20u32 {
        assert_eq!(
            out[l as usize],
            if l + 4 < 20 { l + 4 } else { l },
            "lane {l}"
        );
    }
    // A member mask of only the converged lanes is fine.
    let m = kernel_with(
        "",
        "setp.lt.u32 %p1, %r1, 16;\n@%p1 bra A;\nshfl.sync.idx.b32 %r3, %r1, 16, 31, 0xffff0000;\n\
         bra.uni B;\nA:\nshfl.sync.idx.b32 %r3, %r1, 0, 31, 0xffff;\nB:\nst.global.u32 [%rd3], %r3;",
    );
    let (r, out) = run_k(&m, 32, 32);
    r.unwrap();
    assert_eq!(&out[..16], [0; 16]);
    assert_eq!(&out[16..], [16; 16]);
}

#[test]
fn generic_addresses_reach_shared_and_local_memory() {
    let m = kernel_with(
        ".shared .align 8 .b8 s[256];\n.local .align 8 .b8 l[8];",
        "mov.u64 %rd4, s;\ncvta.shared.u64 %rd5, %rd4;\nadd.s64 %rd5, %rd5, %rd2;\n\
         st.u32 [%rd5], %r1;\nbar.sync 0;\nxor.b32 %r2, %r1, 1;\nmul.wide.u32 %rd6, %r2, 4;\n\
         add.s64 %rd6, %rd6, %rd4;\nld.shared.u32 %r3, [%rd6];\n\
         mov.u64 %rd7, l;\ncvta.local.u64 %rd8, %rd7;\nst.u32 [%rd8+4], %r3;\n\
         ld.local.u32 %r4, [l+4];\ncvta.to.shared.u64 %rd9, %rd5;\nsub.s64 %rd9, %rd9, %rd4;\n\
         cvt.u32.u64 %r5, %rd9;\nisspacep.shared %p1, %rd5;\nselp.u32 %r6, 1000, 0, %p1;\n\
         add.s32 %r4, %r4, %r6;\nmul.lo.u32 %r5, %r5, 10000;\nadd.s32 %r4, %r4, %r5;\n\
         st.global.u32 [%rd3], %r4;",
    );
    let (r, out) = run_k(&m, 64, 64);
    r.unwrap();
    for i in 0..64u32 {
        assert_eq!(out[i as usize], (i ^ 1) + 1000 + i * 4 * 10000, "{i}");
    }
    // The shared window starts where the crate says.
    let m = kernel_with(
        ".shared .align 4 .b8 s[4];",
        "mov.u64 %rd4, s;\ncvta.shared.u64 %rd5, %rd4;\nst.global.u64 [%rd1], %rd5;",
    );
    let (r, out) = run_k(&m, 1, 2);
    r.unwrap();
    assert_eq!(u64::from(out[0]) | u64::from(out[1]) << 32, SHARED_WINDOW);
}

#[test]
fn trap_and_bad_launches() {
    let m = kernel_with("", "trap;");
    assert_eq!(run_k(&m, 1, 1).0, Err(Error::Trap));
    let m = kernel_with("", "st.global.u32 [%rd3], 1;");
    let mut mem = VecMemory::default();
    let out = mem.alloc_u32(&[0; 4]);
    let mut g = m.globals();
    let p = Params::new().ptr(out);
    let bad = |d, p: &[u8], mem: &mut VecMemory, g: &mut fairgpu_ptx::Globals| {
        m.run(g, "k", &d, p, mem, &Limits::default())
    };
    for d in [
        dims([1, 1, 1], [1025, 1, 1], 0),
        dims([1, 1, 1], [0, 1, 1], 0),
        dims([0, 1, 1], [1, 1, 1], 0),
        dims([1, 1, 1], [32, 32, 2], 0),
        dims([1, 1, 1], [1, 1, 1], 1 << 30),
    ] {
        assert!(
            matches!(bad(d, &p.0, &mut mem, &mut g), Err(Error::BadLaunch(_))),
            "{d:?}"
        );
    }
    let d = dims([1, 1, 1], [1, 1, 1], 0);
    assert!(matches!(
        bad(d, &p.0[..4], &mut mem, &mut g),
        Err(Error::BadLaunch(_))
    ));
    assert_eq!(
        m.run(&mut g, "nope", &d, &p.0, &mut mem, &Limits::default()),
        Err(Error::NoKernel("nope".into()))
    );
    let other = kernel("structarg");
    assert!(matches!(
        bad(d, &p.0, &mut mem, &mut other.globals()),
        Err(Error::BadLaunch(_))
    ));
    let big_local = Limits {
        max_local_bytes: 4,
        ..Limits::default()
    };
    let m = kernel_with(".local .align 4 .b8 l[64];", "");
    assert!(matches!(
        m.run(&mut m.globals(), "k", &d, &p.0, &mut mem, &big_local),
        Err(Error::BadLaunch(_))
    ));
}

#[test]
fn malformed_text_is_a_parse_error() {
    for text in [
        "garbage",
        ".version 9.0 .visible .entry k( {",
        ".visible .entry k() { add.s32 %r1, %r2, %r3; }",
        ".visible .entry k() { .reg .b32 %r<2>; bra NOWHERE; }",
        ".visible .entry k() { .reg .b32 %r<2>; ld.global.u32 %r1; }",
        ".visible .entry k() { .reg .b32 %r<4000000000>; }",
        ".global .b8 g[4] = {1, 2, 3, 4, 5};",
    ] {
        assert!(
            matches!(Module::parse(text), Err(Error::Parse { .. })),
            "{text}"
        );
    }
    // Deep nesting is refused, not recursed into.
    let deep = format!(
        ".global .b8 g[1] = {}1{};",
        "{".repeat(100_000),
        "}".repeat(100_000)
    );
    assert!(matches!(Module::parse(&deep), Err(Error::Parse { .. })));
    let deep = format!(
        ".visible .entry k() {{ .reg .b32 %r<2>; mov.b32 %r1, {}%r1{}; }}",
        "{".repeat(100_000),
        "}".repeat(100_000)
    );
    assert!(matches!(Module::parse(&deep), Err(Error::Parse { .. })));
    let deep = format!(
        ".visible .entry k() {{ .reg .b32 %r<2>; setp.eq.u32 %r1{}, 1, 2; }}",
        "|%r1".repeat(100_000)
    );
    assert!(matches!(Module::parse(&deep), Err(Error::Parse { .. })));
    assert!(matches!(
        Module::parse(".address_size 32"),
        Err(Error::Unsupported { .. })
    ));
    // Tokens are lexed as parsing reaches them; a lexical error anywhere
    // still fails the module with the lexer's message and line.
    let good = format!("{HEAD}.visible .entry k()\n{{\nret;\n}}\n");
    for (bad, msg) in [
        ("/* open", "unterminated comment"),
        ("\"open", "unterminated string"),
        ("0fXYZ", "bad number"),
        ("\u{e9}", "unexpected byte"),
    ] {
        for text in [format!("{good}{bad}\n"), good.replace("ret;", bad)] {
            match Module::parse(&text) {
                Err(Error::Parse { line, msg: m }) => {
                    assert!(m.contains(msg), "{text}: {m}");
                    assert!(line >= 5, "{text}: line {line}");
                }
                r => panic!("{text}: {r:?}"),
            }
        }
    }
}

#[test]
fn predicates_selects_vectors_and_halves() {
    let m = kernel_with(
        "",
        "setp.lt.u32 %p1, %r1, 3;\nsetp.gt.and.u32 %p2|%p3, %r1, 1, %p1;\n\
         selp.u32 %r2, 1, 0, %p2;\nselp.u32 %r3, 2, 0, %p3;\nadd.s32 %r2, %r2, %r3;\n\
         @!%p1 add.s32 %r2, %r2, 100;\n\
         mov.b64 %rd4, {%r1, %r2};\nmov.b64 {%r4, %r5}, %rd4;\nsub.s32 %r5, %r5, %r4;\n\
         cvt.rn.f32.u32 %f1, %r1;\nmul.f32 %f1, %f1, 0f3E800000;\ncvt.rn.f16.f32 %rs1, %f1;\n\
         cvt.f32.f16 %f2, %rs1;\ncvt.rzi.u32.f32 %r6, %f2;\nmul.f32 %f3, %f2, 0f41200000;\n\
         cvt.rni.u32.f32 %r7, %f3;\nshl.b32 %r7, %r7, 16;\nadd.s32 %r5, %r5, %r7;\n\
         st.global.u32 [%rd3], %r5;",
    );
    let (r, out) = run_k(&m, 8, 8);
    r.unwrap();
    for i in 0..8u32 {
        let p1 = i < 3;
        let p2 = i > 1 && p1;
        let p3 = i <= 1 && p1;
        let v = u32::from(p2) + 2 * u32::from(p3) + if p1 { 0 } else { 100 };
        let half = (i as f32 * 0.25 * 10.0).round_ties_even() as u32;
        assert_eq!(
            out[i as usize],
            v.wrapping_sub(i).wrapping_add(half << 16),
            "{i}"
        );
    }
}

#[test]
fn clocks_advance() {
    let m = kernel_with(
        "",
        "mov.u64 %rd4, %clock64;\nadd.s32 %r2, %r1, 1;\nmov.u64 %rd5, %clock64;\n\
         setp.gt.u64 %p1, %rd5, %rd4;\nselp.u32 %r3, 1, 0, %p1;\nst.global.u32 [%rd3], %r3;",
    );
    let (r, out) = run_k(&m, 40, 40);
    r.unwrap();
    assert_eq!(out, [1; 40]);
}

const CALLS: &str = "
.func (.param .b32 dbl_r) dbl(.param .b32 dbl_x)
{
    .reg .b32 %r<3>;
    .reg .pred %p<2>;
    ld.param.u32 %r1, [dbl_x];
    setp.gt.u32 %p1, %r1, 10;
    @%p1 bra BIG;
    shl.b32 %r2, %r1, 1;
    st.param.b32 [dbl_r], %r2;
    ret;
BIG:
    st.param.b32 [dbl_r], 1000;
    ret;
}
.func (.param .b32 rec_r) rec(.param .b32 rec_x)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [rec_x];
    {
    .param .b32 q;
    st.param.b32 [q], %r1;
    .param .b32 qr;
    call.uni (qr), rec, (q);
    ld.param.b32 %r2, [qr];
    }
    st.param.b32 [rec_r], %r2;
    ret;
}
.extern .func ext(.param .b32 ext_x);
.visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1)
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [k_param_0];
    ld.param.u32 %r7, [k_param_1];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    {
    .param .b32 p0;
    st.param.b32 [p0], %r1;
    .param .b32 rv;
    st.param.b32 [rv], 77;
    setp.lt.u32 %p1, %r1, 13;
    @%p1 call.uni (rv), dbl, (p0);
    ld.param.b32 %r3, [rv];
    }
    st.global.u32 [%rd3], %r3;
    setp.eq.u32 %p2, %r7, 1;
    @!%p2 bra SKIP1;
    {
    .param .b32 p1;
    st.param.b32 [p1], %r1;
    call.uni ext, (p1);
    }
SKIP1:
    setp.eq.u32 %p3, %r7, 2;
    @!%p3 bra SKIP2;
    {
    .param .b32 p2;
    st.param.b32 [p2], %r1;
    .param .b32 r2;
    call.uni (r2), rec, (p2);
    }
SKIP2:
    ret;
}
";

#[test]
fn calls_are_inlined_recursion_is_bounded_and_unsupported_calls_named() {
    let m = Module::parse(&format!("{HEAD}{CALLS}")).unwrap();
    let run = |mode: u32| {
        let mut mem = VecMemory::default();
        let out = mem.alloc_u32(&[0; 16]);
        let r = launch(
            &m,
            &mut m.globals(),
            "k",
            dims([1, 1, 1], [16, 1, 1], 0),
            Params::new().ptr(out).u32(mode),
            &mut mem,
        );
        (r, mem.u32s(out))
    };
    let (r, out) = run(0);
    r.unwrap();
    for i in 0..16u32 {
        let want = if i >= 13 {
            77
        } else if i > 10 {
            1000
        } else {
            2 * i
        };
        assert_eq!(out[i as usize], want, "{i}");
    }
    match run(1).0 {
        Err(Error::Unsupported { what }) => assert!(what.contains("call of ext"), "{what}"),
        r => panic!("{r:?}"),
    }
    // `rec` calls itself without end: a real call each time, until the
    // launch's call stack overflows.
    match run(2).0 {
        Err(Error::StackOverflow(_)) => {}
        r => panic!("{r:?}"),
    }
}

/// `f0` calls `f1` ... calls `f{n-1}`, which returns its argument + 1; each
/// level adds 1 more. Defined callers first (`forward`, with declarations
/// ahead) or callees first.
fn call_chain(n: usize, forward: bool) -> String {
    let mut t = String::from(HEAD);
    let order: Vec<usize> = if forward {
        for i in 0..n {
            t += &format!(".func (.param .b32 f{i}_r) f{i}(.param .b32 f{i}_x);\n");
        }
        (0..n).collect()
    } else {
        (0..n).rev().collect()
    };
    for i in order {
        let body = if i + 1 == n {
            "add.s32 %r2, %r1, 1;".to_owned()
        } else {
            format!(
                "{{ .param .b32 a; st.param.b32 [a], %r1; .param .b32 r; \
                 call.uni (r), f{}, (a); ld.param.b32 %r2, [r]; }} add.s32 %r2, %r2, 1;",
                i + 1
            )
        };
        t += &format!(
            ".func (.param .b32 f{i}_r) f{i}(.param .b32 f{i}_x) {{ .reg .b32 %r<3>; \
             ld.param.u32 %r1, [f{i}_x]; {body} st.param.b32 [f{i}_r], %r2; ret; }}\n"
        );
    }
    t += ".visible .entry k(.param .u64 k_param_0) { .reg .b32 %r<3>; .reg .b64 %rd<2>; \
          ld.param.u64 %rd1, [k_param_0]; { .param .b32 a; st.param.b32 [a], 5; .param .b32 r; \
          call.uni (r), f0, (a); ld.param.b32 %r2, [r]; } st.global.u32 [%rd1], %r2; ret; }\n";
    t
}

#[test]
fn call_chains_inline_up_to_a_depth() {
    for (n, forward) in [(10, true), (10, false), (300, false)] {
        let m = Module::parse(&call_chain(n, forward)).unwrap();
        let (r, out) = run_k(&m, 1, 1);
        r.unwrap();
        assert_eq!(out, [5 + n as u32], "{n} {forward}");
    }
    // Inlining recurses along the chain; beyond a depth, calls stay
    // unsupported rather than exhausting the stack.
    let m = Module::parse(&call_chain(300, true)).unwrap();
    match run_k(&m, 1, 1).0 {
        Err(Error::Unsupported { what }) => assert!(what.contains("call of f"), "{what}"),
        r => panic!("{r:?}"),
    }
}

#[test]
fn sixteen_bit_compare_and_swap() {
    // Four threads, each on its own 16-bit slot of the first two words:
    // the even ones compare equal and swap, the odd ones do not; each
    // stores the old value it read into a word after them.
    let m = kernel_with(
        "",
        "mul.wide.u32 %rd4, %r1, 2;\nadd.s64 %rd5, %rd1, %rd4;\nand.b32 %r5, %r1, 1;\n\
         setp.eq.u32 %p1, %r5, 0;\nadd.u32 %r6, %r1, 1;\nselp.u32 %r7, %r6, 99, %p1;\n\
         cvt.u16.u32 %rs1, %r7;\nadd.u32 %r8, %r1, 0x7000;\ncvt.u16.u32 %rs2, %r8;\n\
         atom.global.cas.b16 %rs3, [%rd5], %rs1, %rs2;\ncvt.u32.u16 %r9, %rs3;\n\
         add.u32 %r10, %r1, 2;\nmul.wide.u32 %rd6, %r10, 4;\nadd.s64 %rd7, %rd1, %rd6;\n\
         st.global.u32 [%rd7], %r9;",
    );
    let out = run_words(&m, 4, &[0x0002_0001, 0x0004_0003, 0, 0, 0, 0]);
    assert_eq!(out, [0x0002_7000, 0x0004_7002, 1, 2, 3, 4]);
}

#[test]
fn spin_locks_within_a_warp_make_progress() {
    // Every thread takes a lock, increments a counter, and releases it.
    let m = kernel_with(
        "",
        "LOOP:\natom.global.cas.b32 %r2, [%rd1], 0, 1;\nsetp.ne.u32 %p1, %r2, 0;\n\
         @%p1 bra LOOP;\nld.volatile.global.u32 %r3, [%rd1+4];\nadd.s32 %r3, %r3, 1;\n\
         st.volatile.global.u32 [%rd1+4], %r3;\nfence.acq_rel.gpu;\n\
         atom.global.exch.b32 %r4, [%rd1], 0;",
    );
    let (r, out) = run_k(&m, 64, 2);
    r.unwrap();
    assert_eq!(out, [0, 64]);
}

#[test]
fn bit_field_logic_funnel_and_warp_reductions() {
    let insts = [
        "mov.u32 %r2, 0xF0F01234;\nbfe.u32 %r3, %r2, 4, 8;",
        "bfe.s32 %r3, 0x8000, 12, 4;",
        "mov.u32 %r2, 0xF0F01234;\nbfe.u32 %r3, %r2, 28, 8;",
        "mov.u32 %r2, 0xF0F01234;\nbfe.s32 %r3, %r2, 28, 8;",
        "bfe.u32 %r3, 0xFFFF, 3, 0;",
        "bfi.b32 %r3, 0xAB, 0xFFFF0000, 4, 8;",
        "lop3.b32 %r3, 0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA, 0x96;",
        "lop3.b32 %r3, 0xF0F0F0F0, 0xCCCCCCCC, 0xAAAAAAAA, 0xE8;",
        "shf.l.wrap.b32 %r3, 0x80000001, 3, 36;",
        "shf.r.clamp.b32 %r3, 0x80000001, 3, 40;",
        "mul24.lo.s32 %r3, 0x00FFFFFF, 2;",
        "mul24.hi.u32 %r3, 0xFFFFFF, 0xFFFFFF;",
        "slct.s32.s32 %r3, 10, 20, -1;",
        "slct.s32.s32 %r3, 10, 20, 0;",
        "copysign.f32 %f1, 0fBF800000, 0f40000000;\nmov.b32 %r3, %f1;",
        "testp.subnormal.f32 %p1, 0f00000001;\nselp.u32 %r3, 1, 0, %p1;",
        "testp.notanumber.f32 %p1, 0f7FC00000;\nselp.u32 %r3, 1, 0, %p1;",
        "cvt.sat.u8.s32 %r3, -5;",
        "cvt.sat.u8.s32 %r3, 300;",
        "cvt.sat.s8.s32 %r3, 200;",
        "redux.sync.add.u32 %r3, %r1, -1;",
        "redux.sync.max.s32 %r3, %r1, 0xff;",
        "xor.b32 %r2, %r1, 7;\nredux.sync.min.u32 %r3, %r2, -1;",
        "setp.lt.u32 %p1, %r1, 40;\nvote.sync.uni.pred %p2, %p1, -1;\nselp.u32 %r3, 1, 0, %p2;",
        "setp.lt.u32 %p1, %r1, 3;\nvote.sync.uni.pred %p2, %p1, -1;\nselp.u32 %r3, 1, 0, %p2;",
        "add.rz.f32 %f1, 0f3F800000, 0f33800000;\nmov.b32 %r3, %f1;",
        "add.rp.f32 %f1, 0f3F800000, 0f33800000;\nmov.b32 %r3, %f1;",
        "div.rm.f32 %f1, 0fBF800000, 0f40400000;\nmov.b32 %r3, %f1;",
        "div.rp.f32 %f1, 0fBF800000, 0f40400000;\nmov.b32 %r3, %f1;",
        "cvt.rzi.s32.f32 %r3, 0fC0600000;",
        "cvt.rmi.s32.f32 %r3, 0fC0600000;",
        "mov.b32 %r3, 7;\nbfind.u32 %r3, %r3;",
        "mov.u32 %r3, 0xFFFFFFFF;\nadd.cc.u32 %r4, %r3, 1;\naddc.u32 %r3, 5, 0;",
        "prmt.b32 %r3, 0x33221100, 0x77665544, 0x4051;",
        "prmt.b32 %r3, 0x33221180, 0x77665544, 0x0008;",
        "prmt.b32.f4e %r3, 0x33221100, 0x77665544, 2;",
        "mov.u32 %r2, 0x33221100;\nprmt.b32.b4e %r3, %r2, 0x77665544, 1;",
        "mov.u32 %r2, 0xF0F0F0F0;\nlop3.b32 %r3, %r2, 0xCCCCCCCC, 0xAAAAAAAA, 0x80;",
    ];
    let want: [u32; 38] = [
        0x23,
        0xFFFF_FFF8,
        0xF,
        0xFFFF_FFFF,
        0,
        0xFFFF_0AB0,
        0x9696_9696,
        0xE8E8_E8E8,
        0x38,
        3,
        0xFFFF_FFFE,
        // Bits 47..16 of 0xFFFF_FE00_0001.
        0xFFFF_FE00,
        20,
        10,
        (-2.0f32).to_bits(),
        1,
        1,
        0,
        255,
        127,
        496,
        7,
        0,
        1,
        0,
        1.0f32.to_bits(),
        1.0f32.next_up().to_bits(),
        // The nearest f32 to -1/3 lies below it, so it is also the one
        // toward minus infinity.
        (-1.0f32 / 3.0).to_bits(),
        (-1.0f32 / 3.0).next_up().to_bits(),
        (-3i32) as u32,
        (-4i32) as u32,
        2,
        6,
        0x4400_5511,
        0x8080_80ff,
        0x5544_3322,
        // Backward from byte 1: bytes 1, 0, 7, 6.
        0x6677_0011,
        // a & b & c.
        0x8080_8080,
    ];
    for (k, (inst, want)) in insts.iter().zip(want).enumerate() {
        let m = kernel_with("", &format!("{inst}\nst.global.u32 [%rd3], %r3;"));
        let (r, out) = run_k(&m, 32, 32);
        r.unwrap_or_else(|e| panic!("{inst}: {e}"));
        assert_eq!(out[0], want, "{k}: {inst}: {:#x}", out[0]);
    }
}

/// `rcp.approx.ftz.f64` (CuPy's `log` seeds a Newton iteration with it):
/// the reciprocal of the operand's 32 most significant bits, in the
/// result's 32 most significant bits, the low 32 zero; subnormals flushed.
#[test]
fn rcp_approx_ftz_f64_uses_the_high_words() {
    let m = kernel_with(
        ".reg .b64 %x<4>;",
        "mul.wide.u32 %rd4, %r1, 8;\nadd.s64 %rd5, %rd1, %rd4;\n\
         ld.global.f64 %fd1, [%rd5];\nrcp.approx.ftz.f64 %fd2, %fd1;\n\
         st.global.f64 [%rd5], %fd2;",
    );
    let inputs = [3.0f64, -0.1, 1.0 + f64::EPSILON, 5e-324, f64::INFINITY, 0.0];
    let mut mem = VecMemory::default();
    let words: Vec<u32> = inputs
        .iter()
        .flat_map(|x| {
            let b = x.to_bits();
            [b as u32, (b >> 32) as u32]
        })
        .collect();
    let out = mem.alloc_u32(&words);
    let mut g = m.globals();
    launch(
        &m,
        &mut g,
        "k",
        dims([1, 1, 1], [inputs.len() as u32, 1, 1], 0),
        Params::new().ptr(out),
        &mut mem,
    )
    .expect("runs");
    let got: Vec<f64> = mem
        .u32s(out)
        .chunks(2)
        .map(|w| f64::from_bits(u64::from(w[0]) | (u64::from(w[1]) << 32)))
        .collect();
    for (x, r) in inputs.iter().zip(&got) {
        assert_eq!(r.to_bits() & 0xffff_ffff, 0, "low word of rcp({x}) = {r}");
    }
    assert!((got[0] - 1.0 / 3.0).abs() < 1e-6, "{}", got[0]);
    assert!((got[1] + 10.0).abs() < 1e-4, "{}", got[1]);
    // 1 + 2^-52 differs from 1 only in its low word: exactly 1.
    assert_eq!(got[2], 1.0);
    // A subnormal is flushed to zero: its reciprocal is infinite.
    assert_eq!(got[3], f64::INFINITY);
    assert_eq!(got[4], 0.0);
    assert_eq!(got[5], f64::INFINITY);
}

/// `WARP_SZ`, PTX's predefined warp size, as an operand.
#[test]
fn warp_sz_is_thirty_two() {
    let m = kernel_with(
        "",
        "mov.u32 %r2, WARP_SZ;\nadd.u32 %r2, %r2, %r1;\nst.global.u32 [%rd3], %r2;",
    );
    let (r, out) = run_k(&m, 4, 4);
    r.unwrap();
    assert_eq!(out, [32, 33, 34, 35]);
}

/// `cvt.ftz.sat.f32.f32` (CuPy's float32 ufuncs): clamps to [0, 1], NaN to
/// 0, and flushes subnormals; `cvt.rni.f32.f32` rounds to an integer.
#[test]
fn cvt_saturating_and_rounding_within_f32() {
    let m = kernel_with(
        "",
        "mul.wide.u32 %rd4, %r1, 4;\nadd.s64 %rd5, %rd1, %rd4;\n\
         ld.global.f32 %f1, [%rd5];\ncvt.ftz.sat.f32.f32 %f2, %f1;\n\
         cvt.rni.f32.f32 %f3, %f1;\nadd.f32 %f4, %f2, %f3;\n\
         st.global.f32 [%rd5], %f2;",
    );
    let inputs = [-2.5f32, 0.25, 1.5, f32::NAN, 1e-40, 0.75];
    let mut mem = VecMemory::default();
    let out = mem.alloc_u32(&inputs.iter().map(|f| f.to_bits()).collect::<Vec<_>>());
    let mut g = m.globals();
    launch(
        &m,
        &mut g,
        "k",
        dims([1, 1, 1], [inputs.len() as u32, 1, 1], 0),
        Params::new().ptr(out),
        &mut mem,
    )
    .expect("runs");
    let got: Vec<f32> = mem.u32s(out).into_iter().map(f32::from_bits).collect();
    assert_eq!(got, [0.0, 0.25, 1.0, 0.0, 0.0, 0.75]);
}

/// Conversions to bf16 and f16 in every rounding mode, from f32 and from
/// f64 (one rounding, not two), and registers declared with their type
/// glued to `.reg` (`.reg.b16`, as NVRTC's bf16 header writes them).
#[test]
fn cvt_to_half_formats_in_every_rounding_mode() {
    let m = kernel_with(
        ".reg.b16 %h<8>;\n.reg.b8 %c;",
        "mul.wide.u32 %rd4, %r1, 8;\nadd.s64 %rd5, %rd1, %rd4;\n\
         ld.global.f64 %fd1, [%rd5];\ncvt.rn.f32.f64 %f1, %fd1;\n\
         cvt.rn.bf16.f64 %h0, %fd1;\ncvt.rz.bf16.f32 %h1, %f1;\n\
         cvt.rm.f16.f64 %h2, %fd1;\ncvt.rp.f16.f32 %h3, %f1;\n\
         mov.b32 %r2, {%h0, %h1};\nmov.b32 %r3, {%h2, %h3};\n\
         st.global.v2.u32 [%rd5], {%r2, %r3};",
    );
    // 1 + 2^-8 + 2^-30: above bf16's midpoint 1 + 2^-8 only in f64 (f32
    // rounds it to the midpoint, and then ties go to even, 1.0).
    let just_above = 1.0 + 2f64.powi(-8) + 2f64.powi(-30);
    let inputs = [just_above, -1.5, 70000.0, -1e-7, 3.0e38];
    let mut mem = VecMemory::default();
    let words: Vec<u32> = inputs
        .iter()
        .flat_map(|v: &f64| [v.to_bits() as u32, (v.to_bits() >> 32) as u32])
        .collect();
    let out = mem.alloc_u32(&words);
    let mut g = m.globals();
    launch(
        &m,
        &mut g,
        "k",
        dims([1, 1, 1], [inputs.len() as u32, 1, 1], 0),
        Params::new().ptr(out),
        &mut mem,
    )
    .expect("runs");
    let got: Vec<[u16; 4]> = mem
        .u32s(out)
        .chunks(2)
        .map(|w| {
            [
                w[0] as u16,
                (w[0] >> 16) as u16,
                w[1] as u16,
                (w[1] >> 16) as u16,
            ]
        })
        .collect();
    // [rn bf16 from f64, rz bf16 from f32, rm f16 from f64, rp f16 from f32]
    assert_eq!(
        got,
        [
            // 1 + 2^-7 (bf16 0x3f81); toward zero 1.0; f16 holds 1 + 2^-8
            // exactly with 10 fraction bits: down 0x3c04, up 0x3c04 + 1 as
            // f32 rounded to 1 + 2^-8 (even: f32 has 23 bits).
            [0x3f81, 0x3f80, 0x3c04, 0x3c04],
            [0xbfc0, 0xbfc0, 0xbe00, 0xbe00],
            // Beyond f16's 65504: down to the largest, up to infinity.
            [0x4789, 0x4788, 0x7bff, 0x7c00],
            // -1e-7: bf16 normal; in f16 between the subnormals -2 and -1
            // times 2^-24: toward minus infinity the first, toward plus
            // the second.
            [0xb3d7, 0xb3d6, 0x8002, 0x8001],
            // 3e38 in bf16 range (max 3.39e38); f16: largest, infinity.
            [0x7f62, 0x7f61, 0x7bff, 0x7c00],
        ]
    );
}

/// Rounding 16-bit floats to integers (`cvt.rzi.bf16.bf16`, ...) and
/// `set` with a 16-bit float destination (1.0 of that format when true).
#[test]
fn half_formats_round_to_integers_and_set_their_one() {
    let m = kernel_with(
        "",
        "mul.wide.u32 %rd4, %r1, 4;\nadd.s64 %rd5, %rd1, %rd4;\n\
         ld.global.u32 %r2, [%rd5];\nmov.b32 {%rs1, %rs2}, %r2;\n\
         cvt.rzi.bf16.bf16 %rs3, %rs1;\ncvt.rpi.bf16.bf16 %rs4, %rs1;\n\
         cvt.rmi.f16.f16 %rs5, %rs2;\nset.nan.bf16.bf16 %rs6, %rs1, %rs1;\n\
         set.gt.f16.f16 %rs7, %rs2, %rs5;\n\
         mov.b32 %r3, {%rs3, %rs4};\nmov.b32 %r4, {%rs5, %rs6};\n\
         st.global.u32 [%rd5], %r3;\nmul.wide.u32 %rd6, %r1, 4;\n\
         add.s64 %rd7, %rd6, 64;\nadd.s64 %rd7, %rd1, %rd7;\nst.global.u32 [%rd7], %r4;\n\
         add.s64 %rd8, %rd7, 64;\ncvt.u32.u16 %r5, %rs7;\nst.global.u32 [%rd8], %r5;",
    );
    let bf = |v: f32| (v.to_bits() >> 16) as u16;
    // (bf16 input, f16 input): 2.75 / -2.5; -1.5 / 7.0; NaN / -0.25.
    let ins: [(u16, u16); 3] = [(bf(2.75), 0x4180), (bf(-1.5), 0x4700), (0x7fc0, 0xb400)];
    let mut words = vec![0u32; 48];
    for (i, (a, b)) in ins.iter().enumerate() {
        words[i] = u32::from(*a) | u32::from(*b) << 16;
    }
    let w = run_words(&m, 3, &words);
    let lo = |x: u32| x as u16;
    let hi = |x: u32| (x >> 16) as u16;
    // rzi, rpi of the bf16.
    assert_eq!([lo(w[0]), hi(w[0])], [bf(2.0), bf(3.0)]);
    assert_eq!([lo(w[1]), hi(w[1])], [bf(-1.0), bf(-1.0)]);
    assert!(
        lo(w[2]) & 0x7fff > 0x7f80 && hi(w[2]) & 0x7fff > 0x7f80,
        "NaN stays NaN"
    );
    // rmi of the f16: 2.75 -> 2.0, 7.0 -> 7.0, -0.25 -> -1.0; set.nan:
    // 1.0 in bf16 for the NaN only.
    assert_eq!([lo(w[16]), hi(w[16])], [0x4000, 0]);
    assert_eq!([lo(w[17]), hi(w[17])], [0x4700, 0]);
    assert_eq!([lo(w[18]), hi(w[18])], [0xbc00, bf(1.0)]);
    // set.gt.f16: the input above its floor gives 1.0 (0x3c00).
    assert_eq!(&w[32..35], [0x3c00, 0, 0x3c00]);
}

/// A module-scope `.shared` variable that only a called function uses
/// (nvcc's `__shared__` in a `__device__` function, linked into another
/// module's kernel) is part of the calling kernel's shared memory.
#[test]
fn shared_variables_of_called_functions_belong_to_the_kernel() {
    let text = format!(
        "{HEAD}.shared .align 8 .b8 slot[8];\n\
         .visible .func (.param .b32 r) bump(.param .b32 x)\n{{\n\
         .reg .b32 %a<4>;\n.reg .pred %fq;\n\
         ld.param.u32 %a1, [x];\nmov.u32 %a0, %tid.x;\nsetp.eq.u32 %fq, %a0, 0;\n\
         @%fq st.shared.u32 [slot], 0;\nbar.sync 0;\n\
         atom.shared.add.u32 %a2, [slot], %a1;\nbar.sync 0;\n\
         ld.shared.u32 %a3, [slot];\nst.param.b32 [r], %a3;\nret;\n}}\n\
         .visible .entry k(.param .u64 out)\n{{\n\
         .reg .b32 %r<4>;\n.reg .b64 %rd<4>;\n\
         ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\n\
         mov.u32 %r1, %tid.x;\n\
         {{\n.param .b32 a;\n.param .b32 rv;\nst.param.b32 [a], 1;\n\
         call.uni (rv), bump, (a);\nld.param.b32 %r2, [rv];\n}}\n\
         mul.wide.u32 %rd2, %r1, 4;\nadd.s64 %rd3, %rd1, %rd2;\nst.global.u32 [%rd3], %r2;\nret;\n}}\n"
    );
    let m = Module::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let (r, out) = run_k(&m, 32, 32);
    r.expect("runs");
    assert_eq!(out, [32; 32]);
    // The same with the variable declared in the function's body (NVVM
    // "demotes" a `__shared__` used by one function into it).
    let demoted = text.replace(".shared .align 8 .b8 slot[8];\n", "").replace(
        ".reg .b32 %a<4>;",
        ".shared .align 8 .b8 slot[8];\n.reg .b32 %a<4>;",
    );
    let m = Module::parse(&demoted).unwrap_or_else(|e| panic!("{e}\n{demoted}"));
    let (r, out) = run_k(&m, 32, 32);
    r.expect("runs");
    assert_eq!(out, [32; 32]);
    // Defined after the kernel that calls it: the kernel's shared memory
    // has no room for it, and the call is unsupported (not run into
    // another variable's bytes).
    let at = demoted.find(".visible .func").unwrap();
    let end = demoted.find(".visible .entry").unwrap();
    let func = &demoted[at..end];
    let late = format!(
        "{}.visible .func (.param .b32 r) bump(.param .b32 x);\n{}{}",
        &demoted[..at],
        &demoted[end..],
        func
    );
    let m = Module::parse(&late).unwrap_or_else(|e| panic!("{e}\n{late}"));
    match run_k(&m, 32, 32).0 {
        Err(Error::Unsupported { what }) => assert!(what.contains("bump"), "{what}"),
        r => panic!("{r:?}"),
    }
}

/// Pairs of 8-bit floats (sm_89): from two f32 and from f16x2, saturated
/// to the largest finite value, and back to f16x2.
#[test]
fn fp8_pairs_convert_with_saturation() {
    let m = kernel_with(
        "",
        "mul.wide.u32 %rd4, %r1, 8;\nadd.s64 %rd5, %rd1, %rd4;\n\
         ld.global.f32 %f1, [%rd5];\nld.global.f32 %f2, [%rd5+4];\n\
         cvt.rn.satfinite.e4m3x2.f32 %rs1, %f1, %f2;\n\
         cvt.rn.satfinite.e5m2x2.f32 %rs2, %f1, %f2;\n\
         cvt.rn.f16x2.e4m3x2 %r2, %rs1;\n\
         cvt.rn.satfinite.relu.e5m2x2.f16x2 %rs3, %r2;\n\
         mov.b32 %r3, {%rs1, %rs2};\ncvt.u32.u16 %r4, %rs3;\n\
         st.global.u32 [%rd5], %r3;\nst.global.u32 [%rd5+4], %r2;\n\
         add.s64 %rd6, %rd5, 64;\nst.global.u32 [%rd6], %r4;",
    );
    // (a, b): 1.0 and -0.3 (between codes); 1000 and a NaN (saturated,
    // NaN); 0.001 (E4M3 subnormal 0.001 = 0.512 * 2^-9 -> 1 * 2^-9).
    let pairs = [(1.0f32, -0.3f32), (1000.0, f32::NAN), (0.001, -1.0e9)];
    let mut words = vec![0u32; 32];
    for (i, (a, b)) in pairs.iter().enumerate() {
        words[2 * i] = a.to_bits();
        words[2 * i + 1] = b.to_bits();
    }
    let w = run_words(&m, 3, &words);
    // [e4m3 pair | e5m2 pair << 16], the e4m3 pair as f16x2, and that
    // f16x2 back to e5m2 with relu (negatives to +0).
    // E4M3: 1.0 = 0x38, -0.3 -> -0.3125 = 0xaa (1.25 * 2^-2 = 0x28|2);
    // E5M2: 1.0 = 0x3c, -0.3 -> -0.3125 = 0xb5 (exponent 13, mantissa 01).
    assert_eq!(w[0], 0x38aa | 0x3cb5 << 16);
    // f16: 1.0 = 0x3c00, -0.3125 = 0xb500.
    assert_eq!(w[1], 0x3c00 << 16 | 0xb500);
    assert_eq!(w[16], 0x3c00);
    // 1000 saturates to 448 (0x7e) and 57344's 1024 -> E5M2 1024 = 0x64;
    // NaN is 0x7f in both.
    assert_eq!(w[2], 0x7e7f | 0x647f << 16);
    // 0.001: E4M3 subnormal 0x01 (2^-9); -1e9 saturates to -448 (0xfe);
    // E5M2: 0.001 -> 2^-10 = 0x14 (exponent 5, 0x14 = 5 << 2);
    // -1e9 -> -57344 (0xfb).
    assert_eq!(w[4], 0x01fe | 0x14fb << 16);
}

/// `tanh.approx` and `ex2.approx` on halves (cuda_bf16.h's htanh, hexp2).
#[test]
fn half_tanh_and_ex2_approximations() {
    let m = kernel_with(
        "",
        "mul.wide.u32 %rd4, %r1, 4;\nadd.s64 %rd5, %rd1, %rd4;\n\
         ld.global.u32 %r2, [%rd5];\nmov.b32 {%rs1, %rs2}, %r2;\n\
         tanh.approx.bf16 %rs3, %rs1;\nex2.approx.f16 %rs4, %rs2;\n\
         ex2.approx.ftz.bf16 %rs5, %rs1;\ntanh.approx.f16x2 %r3, %r2;\n\
         mov.b32 %r4, {%rs3, %rs4};\nst.global.u32 [%rd5], %r4;\n\
         add.s64 %rd6, %rd5, 64;\nst.global.u32 [%rd6], %r3;\n\
         add.s64 %rd7, %rd6, 64;\ncvt.u32.u16 %r5, %rs5;\nst.global.u32 [%rd7], %r5;",
    );
    let bf = |v: f32| (v.to_bits() >> 16) as u16;
    // bf16 0.5 (0x3f00) and f16 3.0 (0x4200).
    let mut words = vec![0u32; 48];
    words[0] = 0x3f00 | 0x4200 << 16;
    let w = run_words(&m, 1, &words);
    // tanh(0.5) = 0.46211... -> bf16 0.462890625 (0x3eed); 2^3 = 8 (f16
    // 0x4800); 2^0.5 = 1.41421... -> bf16 1.4140625 (0x3fb5).
    assert_eq!(w[0], u32::from(bf(0.462_890_63)) | 0x4800 << 16);
    assert_eq!(bf(0.462_890_63), 0x3eed);
    assert_eq!(w[32], 0x3fb5);
    // tanh on an f16x2 whose halves are the bf16 0.5's bits as f16
    // (1.75, 0x3f00) and 3.0: tanh(1.75) = 0.941376 -> f16 0x3b88,
    // tanh(3) = 0.995055 -> f16 0x3bf6.
    assert_eq!(w[16], 0x3b88 | 0x3bf6 << 16);
}

/// `match.any.sync.b32`: the lanes holding the same value;
/// `match.all.sync.b32 d|p`: the mask and true when every lane agrees.
#[test]
fn match_sync_groups_lanes_by_value() {
    // Value: lane % 3 for `any`; all lanes 7 (and then one 8) for `all`.
    let m = kernel_with(
        "",
        "rem.u32 %r2, %r1, 3;\nmatch.any.sync.b32 %r3, %r2, -1;\n\
         mov.u32 %r4, 7;\nmatch.all.sync.b32 %r5|%p1, %r4, -1;\n\
         setp.eq.u32 %p2, %r1, 5;\nselp.u32 %r6, 8, 7, %p2;\n\
         match.all.sync.b32 %r7|%p3, %r6, -1;\n\
         selp.u32 %r8, 1, 0, %p1;\nselp.u32 %r9, 1, 0, %p3;\n\
         setp.eq.u32 %p4, %r5, -1;\nselp.u32 %r10, 1, 0, %p4;\n\
         setp.eq.u32 %p5, %r7, 0;\nselp.u32 %r11, 1, 0, %p5;\n\
         add.u32 %r8, %r8, %r10;\nshl.b32 %r9, %r9, 4;\nadd.u32 %r8, %r8, %r9;\n\
         shl.b32 %r11, %r11, 8;\nadd.u32 %r8, %r8, %r11;\n\
         xor.b32 %r12, %r3, %r8;\nst.global.u32 [%rd3], %r3;\n\
         mul.wide.u32 %rd6, %r1, 4;\nadd.s64 %rd7, %rd3, 128;\nst.global.u32 [%rd7], %r8;",
    );
    let (r, out) = run_k(&m, 32, 64);
    r.unwrap();
    let by_rem = |k: u32| (0..32).filter(|l| l % 3 == k).fold(0u32, |m, l| m | 1 << l);
    for l in 0..32u32 {
        assert_eq!(out[l as usize], by_rem(l % 3), "any, lane {l}");
        // all-7 agrees (p1 = 1, d = full mask), one 8 breaks it (p3 = 0, d = 0).
        assert_eq!(out[32 + l as usize], 1 + 1 + (1 << 8), "all, lane {l}");
    }
}

/// Per-lane reference for the SIMD video tests: `lanes` lanes of `a` and
/// `b` (signed or not), combined by `f`.
fn lanes_of(x: u32, lanes: u32, signed: bool) -> Vec<i64> {
    let bits = 32 / lanes;
    (0..lanes)
        .map(|i| {
            let raw = (x >> (i * bits)) & ((1u64 << bits) - 1) as u32;
            if signed && raw >> (bits - 1) == 1 {
                i64::from(raw) - (1i64 << bits)
            } else {
                i64::from(raw)
            }
        })
        .collect()
}

fn pack(rs: &[i64], lanes: u32) -> u32 {
    let bits = 32 / lanes;
    rs.iter().enumerate().fold(0u32, |acc, (i, &r)| {
        acc | (((r as u64) & ((1u64 << bits) - 1)) << (i as u32 * bits)) as u32
    })
}

#[test]
fn simd_video_instructions_compute_per_lane() {
    // Operands from the thread index, spread over every byte value.
    let a_of = |t: u32| t.wrapping_mul(0x9e37_79b9) ^ 0x80ff_7f01;
    let b_of = |t: u32| t.wrapping_mul(0x85eb_ca6b).rotate_left(7);
    type Ref = fn(&[i64], &[i64], u32) -> u32;
    let cases: [(&str, u32, bool, Ref); 9] = [
        ("vabsdiff4.u32.u32.u32.add", 4, false, |x, y, c| {
            x.iter().zip(y).map(|(a, b)| (a - b).abs()).sum::<i64>() as u32 + c
        }),
        ("vabsdiff2.u32.u32.u32.add", 2, false, |x, y, c| {
            (x.iter().zip(y).map(|(a, b)| (a - b).abs()).sum::<i64>() + i64::from(c)) as u32
        }),
        ("vadd4.u32.u32.u32.sat", 4, false, |x, y, _| {
            pack(
                &x.iter()
                    .zip(y)
                    .map(|(a, b)| (a + b).min(255))
                    .collect::<Vec<_>>(),
                4,
            )
        }),
        ("vadd4.u32.u32.u32", 4, false, |x, y, _| {
            pack(&x.iter().zip(y).map(|(a, b)| a + b).collect::<Vec<_>>(), 4)
        }),
        ("vsub4.u32.u32.u32.sat", 4, false, |x, y, _| {
            pack(
                &x.iter()
                    .zip(y)
                    .map(|(a, b)| (a - b).max(0))
                    .collect::<Vec<_>>(),
                4,
            )
        }),
        ("vsub4.s32.s32.s32.sat", 4, true, |x, y, _| {
            pack(
                &x.iter()
                    .zip(y)
                    .map(|(a, b)| (a - b).clamp(-128, 127))
                    .collect::<Vec<_>>(),
                4,
            )
        }),
        ("vmax4.s32.s32.s32", 4, true, |x, y, _| {
            pack(
                &x.iter().zip(y).map(|(a, b)| *a.max(b)).collect::<Vec<_>>(),
                4,
            )
        }),
        ("vmin2.s32.s32.s32", 2, true, |x, y, _| {
            pack(
                &x.iter().zip(y).map(|(a, b)| *a.min(b)).collect::<Vec<_>>(),
                2,
            )
        }),
        ("vmax2.u32.u32.u32", 2, false, |x, y, _| {
            pack(
                &x.iter().zip(y).map(|(a, b)| *a.max(b)).collect::<Vec<_>>(),
                2,
            )
        }),
    ];
    let threads = 64u32;
    for (inst, lanes, signed, reference) in cases {
        let m = kernel_with(
            "",
            &format!(
                "mul.lo.u32 %r2, %r1, 0x9E3779B9;\nxor.b32 %r2, %r2, 0x80FF7F01;\n\
                 mul.lo.u32 %r3, %r1, 0x85EBCA6B;\nshf.l.wrap.b32 %r3, %r3, %r3, 7;\n\
                 mul.lo.u32 %r4, %r1, 1000;\n\
                 {inst} %r5, %r2, %r3, %r4;\nst.global.u32 [%rd3], %r5;"
            ),
        );
        let (r, out) = run_k(&m, threads, threads as usize);
        r.unwrap_or_else(|e| panic!("{inst}: {e}"));
        for t in 0..threads {
            let (a, b, c) = (a_of(t), b_of(t), t * 1000);
            let want = reference(&lanes_of(a, lanes, signed), &lanes_of(b, lanes, signed), c);
            assert_eq!(
                out[t as usize], want,
                "{inst} thread {t}: a {a:#x} b {b:#x}"
            );
        }
    }
    // sm_90's packed halfword min/max: the same lanes, three operands.
    for (inst, signed, max) in [
        ("min.s16x2", true, false),
        ("max.s16x2", true, true),
        ("min.u16x2", false, false),
        ("max.u16x2", false, true),
    ] {
        let m = kernel_with(
            "",
            &format!(
                "mul.lo.u32 %r2, %r1, 0x9E3779B9;\nxor.b32 %r2, %r2, 0x80FF7F01;\n\
                 mul.lo.u32 %r3, %r1, 0x85EBCA6B;\nshf.l.wrap.b32 %r3, %r3, %r3, 7;\n\
                 {inst} %r5, %r2, %r3;\nst.global.u32 [%rd3], %r5;"
            ),
        );
        let (r, out) = run_k(&m, threads, threads as usize);
        r.unwrap_or_else(|e| panic!("{inst}: {e}"));
        for t in 0..threads {
            let (x, y) = (lanes_of(a_of(t), 2, signed), lanes_of(b_of(t), 2, signed));
            let rs: Vec<i64> = x
                .iter()
                .zip(&y)
                .map(|(p, q)| if max { *p.max(q) } else { *p.min(q) })
                .collect();
            assert_eq!(out[t as usize], pack(&rs, 2), "{inst} thread {t}");
        }
    }
    // .sat with .add, other types, lane selectors, and vavrg are refused
    // by name when reached.
    for (inst, operands) in [
        ("vabsdiff4.u32.u32.u32.sat.add", "%r0, %r1, %r2, %r3"),
        ("vadd4.u64.u32.u32", "%r0, %r1, %r2, %r3"),
        ("vavrg4.u32.u32.u32", "%r0, %r1, %r2, %r3"),
        ("vabsdiff4.u32.u32.u32.add", "%r0, %r1.b3210, %r2, %r3"),
    ] {
        let text = format!(
            "{HEAD}.visible .entry k()\n{{\n.reg .b32 %r<4>;\n{inst} {operands};\nret;\n}}\n"
        );
        let m = Module::parse(&text).expect("the module parses; the kernel cannot run");
        let mut mem = VecMemory::default();
        let mut g = m.globals();
        let r = launch(
            &m,
            &mut g,
            "k",
            dims([1, 1, 1], [1, 1, 1], 0),
            Params::new(),
            &mut mem,
        );
        match r {
            Err(Error::Unsupported { what }) => assert!(what.contains(inst), "{what}"),
            r => panic!("{inst}: {r:?}"),
        }
    }
}

/// `%reserved_smem_offset_*`: 1 KiB of shared memory per block after the
/// kernel's own (static and dynamic), where cooperative groups keep the
/// barriers and exchange slots of tiles larger than a warp (at
/// `%reserved_smem_offset_1`, at least 288 bytes). Each warp's leader
/// writes its slot there through a generic address, as CG does; the
/// kernel's own shared memory, filled by every thread, is untouched.
#[test]
fn reserved_shared_memory_follows_the_kernels_own() {
    let text = format!(
        "{HEAD}.extern .shared .align 16 .b8 dyn[];\n\
         .visible .entry k(.param .u64 k_param_0)\n{{\n\
         .reg .pred %p<4>;\n.reg .b32 %r<32>;\n.reg .b64 %rd<16>;\n\
         .shared .align 4 .b8 s[100];\n\
         ld.param.u64 %rd1, [k_param_0];\ncvta.to.global.u64 %rd1, %rd1;\n\
         mov.u32 %r1, %tid.x;\n\
         // every thread fills the kernel's own shared memory\n\
         rem.u32 %r2, %r1, 100;\nmov.u32 %r3, s;\nadd.u32 %r3, %r3, %r2;\n\
         st.shared.u8 [%r3], 255;\n\
         and.b32 %r4, %r1, 63;\nmov.u32 %r5, dyn;\nadd.u32 %r5, %r5, %r4;\n\
         st.shared.u8 [%r5], 255;\n\
         // each warp's leader writes warp + 1 into its slot of the region\n\
         mov.u32 %r6, %reserved_smem_offset_1;\ncvt.u64.u32 %rd2, %r6;\n\
         cvta.shared.u64 %rd2, %rd2;\n\
         and.b32 %r7, %r1, 31;\nsetp.ne.u32 %p1, %r7, 0;\n\
         shr.u32 %r8, %r1, 5;\nmul.wide.u32 %rd3, %r8, 4;\nadd.s64 %rd4, %rd2, %rd3;\n\
         add.u32 %r9, %r8, 1;\n@!%p1 st.u32 [%rd4], %r9;\n\
         bar.sync 0;\n\
         setp.ne.u32 %p2, %r1, 0;\n@%p2 bra DONE;\n\
         mov.u32 %r10, %reserved_smem_offset_begin;\nst.global.u32 [%rd1], %r10;\n\
         mov.u32 %r10, %reserved_smem_offset_end;\nst.global.u32 [%rd1+4], %r10;\n\
         mov.u32 %r10, %reserved_smem_offset_cap;\nst.global.u32 [%rd1+8], %r10;\n\
         mov.u32 %r10, %reserved_smem_offset_0;\nst.global.u32 [%rd1+12], %r10;\n\
         st.global.u32 [%rd1+16], %r6;\n\
         mov.u32 %r10, %total_smem_size;\nst.global.u32 [%rd1+20], %r10;\n\
         ld.u32 %r11, [%rd2];\nld.u32 %r12, [%rd2+4];\nld.u32 %r13, [%rd2+8];\n\
         ld.u32 %r14, [%rd2+12];\nadd.u32 %r11, %r11, %r12;\nadd.u32 %r11, %r11, %r13;\n\
         add.u32 %r11, %r11, %r14;\nst.global.u32 [%rd1+24], %r11;\n\
         // the kernel's own shared memory still holds 255 everywhere\n\
         mov.u32 %r15, 0;\nmov.u32 %r16, 0;\n\
         LOOP:\nmov.u32 %r17, s;\nadd.u32 %r17, %r17, %r16;\nld.shared.u8 %r18, [%r17];\n\
         add.u32 %r15, %r15, %r18;\nadd.u32 %r16, %r16, 1;\nsetp.lt.u32 %p3, %r16, 100;\n\
         @%p3 bra LOOP;\nst.global.u32 [%rd1+28], %r15;\n\
         DONE:\nret;\n}}\n"
    );
    let m = Module::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut mem = VecMemory::default();
    let out = mem.alloc_u32(&[0; 8]);
    let mut g = m.globals();
    launch(
        &m,
        &mut g,
        "k",
        dims([1, 1, 1], [128, 1, 1], 64),
        Params::new().ptr(out),
        &mut mem,
    )
    .unwrap();
    let o = mem.u32s(out);
    let (begin, end, cap, r0, r1, total) = (o[0], o[1], o[2], o[3], o[4], o[5]);
    // After the 100 static and 64 dynamic bytes, aligned.
    assert!(begin >= 100 + 64 && begin % 16 == 0, "{o:?}");
    assert_eq!((cap, end - begin), (1024, 1024), "{o:?}");
    assert_eq!(r0, begin, "{o:?}");
    assert!(r1 >= begin && r1 + 288 <= end, "{o:?}");
    assert_eq!(total, begin, "the kernel's own shared memory: {o:?}");
    assert_eq!(o[6], 1 + 2 + 3 + 4, "the warps' slots: {o:?}");
    assert_eq!(
        o[7],
        255 * 100,
        "the kernel's shared memory is its own: {o:?}"
    );
}

/// `__managed__` variables (`.attribute(.managed)`) load like any module
/// variable, with their initializers, and are reported managed; other
/// attributes are refused by name.
#[test]
fn managed_variables_are_module_variables_reported_managed() {
    let ptx = ".version 8.0\n.target sm_90\n.address_size 64\n\
        .global .attribute(.managed) .align 4 .u32 counter = 41;\n\
        .global .attribute(.managed) .align 4 .b8 table[16];\n\
        .global .align 4 .u32 plain = 3;\n\
        .visible .entry k()\n{\n\tret;\n}\n";
    let m = Module::parse(ptx).expect("parses");
    let g = m.globals();
    assert!(g.is_managed("counter") && g.is_managed("table"));
    assert!(!g.is_managed("plain") && !g.is_managed("nothing"));
    let (_, size) = g.symbol("table").expect("table");
    assert_eq!(size, 16);
    assert!(g.symbol("counter").is_some());
    let other = ".version 8.0\n.target sm_90\n.address_size 64\n\
        .global .attribute(.unified(1, 2)) .u32 u;\n";
    match Module::parse(other) {
        Err(Error::Unsupported { what }) => assert!(what.contains(".unified"), "{what}"),
        r => panic!("{r:?}"),
    }
}

#[test]
fn shuffles_in_every_mode_and_width_match_cuda_semantics() {
    // CUDA's __shfl_*_sync(v, x, width) as nvcc encodes them: `c` is
    // `(32 - width) << 8`, with the clamp 31 except for `up`. Each lane
    // stores its result and the predicate: `pred << 16 | value`.
    let widths = [32u32, 16, 8, 4, 2];
    let cases = [
        ("up", 1u32),
        ("up", 3),
        ("down", 1),
        ("down", 5),
        ("bfly", 1),
        ("bfly", 6),
        ("idx", 2),
        ("idx", 13),
    ];
    for (mode, x) in cases {
        for width in widths {
            let c = ((32 - width) << 8) | if mode == "up" { 0 } else { 31 };
            // Every lane, then lanes 0..24 only (the others exited).
            for threads in [32u32, 24] {
                let m = kernel_with(
                    "",
                    &format!(
                        "setp.ge.u32 %p2, %r1, {threads};\n@%p2 bra END;\n\
                         mad.lo.u32 %r2, %r1, 7, 3;\n\
                         shfl.sync.{mode}.b32 %r3|%p1, %r2, {x}, {c}, -1;\n\
                         selp.u32 %r4, 65536, 0, %p1;\nor.b32 %r3, %r3, %r4;\n\
                         st.global.u32 [%rd3], %r3;\nEND:"
                    ),
                );
                for simd in [true, false] {
                    let mut mem = VecMemory::default();
                    let out = mem.alloc_u32(&[0; 32]);
                    let lim = Limits {
                        host_simd: simd,
                        ..Limits::default()
                    };
                    m.run(
                        &mut m.globals(),
                        "k",
                        &dims([1, 1, 1], [32, 1, 1], 0),
                        &Params::new().ptr(out).0,
                        &mut mem,
                        &lim,
                    )
                    .unwrap();
                    let got = mem.u32s(out);
                    for lane in 0..threads {
                        let seg = lane / width * width;
                        let (src, pred) = match mode {
                            "up" => {
                                let ok = lane % width >= x;
                                (if ok { lane - x } else { lane }, ok)
                            }
                            "down" => {
                                let ok = lane % width + x < width;
                                (if ok { lane + x } else { lane }, ok)
                            }
                            "bfly" => {
                                let j = lane ^ x;
                                let ok = j < seg + width;
                                (if ok { j } else { lane }, ok)
                            }
                            _ => (seg + x % width, true),
                        };
                        // A source lane that exited reads as the reader's own.
                        let src = if src < threads { src } else { lane };
                        let want = u32::from(pred) << 16 | (src * 7 + 3);
                        assert_eq!(
                            got[lane as usize], want,
                            "{mode} {x} width {width}, {threads} threads, simd {simd}: lane {lane}"
                        );
                    }
                }
            }
        }
    }
}

/// `cudaGraphSetConditional(handle, value)` as nvcc 13 emits it (an
/// `.extern .func` the driver provides): the handle is the address of the
/// condition's 32-bit slot, so thread 0 stores its value there; a handle
/// outside memory faults as a wild store does.
#[test]
fn graph_set_conditional_stores_to_the_handles_slot() {
    let text = format!(
        "{HEAD}.extern .func cudaGraphSetConditional(.param .b64 h, .param .b32 v);\n\
         .visible .entry k(.param .u64 k_param_0, .param .u64 k_param_1)\n{{\n\
         .reg .pred %p<2>;\n.reg .b32 %r<3>;\n.reg .b64 %rd<3>;\n\
         ld.param.u64 %rd1, [k_param_1];\nmov.u32 %r1, %tid.x;\nsetp.ne.s32 %p1, %r1, 3;\n\
         @%p1 bra DONE;\nadd.s32 %r2, %r1, 40;\n\
         {{ .param .b64 param0; st.param.b64 [param0+0], %rd1; .param .b32 param1; \
         st.param.b32 [param1+0], %r2; call.uni cudaGraphSetConditional, (param0, param1); }}\n\
         DONE:\nret;\n}}\n"
    );
    let m = Module::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let run = |bad: bool| {
        let mut mem = VecMemory::default();
        let slot = mem.alloc_u32(&[7, 7]);
        let handle = if bad { 0xdead_0000 } else { slot + 4 };
        let r = launch(
            &m,
            &mut m.globals(),
            "k",
            dims([1, 1, 1], [32, 1, 1], 0),
            Params::new().ptr(slot).ptr(handle),
            &mut mem,
        );
        (r, mem.u32s(slot))
    };
    let (r, words) = run(false);
    r.unwrap();
    assert_eq!(words, vec![7, 43], "only thread 3 set the condition");
    let (r, words) = run(true);
    assert!(r.is_err(), "a handle outside memory is an illegal store");
    assert_eq!(words, vec![7, 7]);
}

#[test]
fn a_product_used_once_fuses_with_its_add_as_ptxas_fuses_it() {
    // a = 1 + 2^-12: a*a = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 alone,
    // so a*a - (1 + 2^-11) is 2^-24 fused and 0 unfused.
    let m = kernel_with(
        "",
        "mov.f32 %f1, 0f3F800800;\nmov.f32 %f2, 0fBF801000;\n\
         mul.f32 %f3, %f1, %f1;\nadd.f32 %f4, %f3, %f2;\nst.global.f32 [%rd3], %f4;\n\
         mul.f32 %f5, %f1, %f1;\nadd.f32 %f6, %f5, %f2;\nst.global.f32 [%rd3+4], %f6;\n\
         st.global.f32 [%rd3+8], %f5;\n\
         mul.f32 %f7, %f1, %f1;\nJOIN:\nadd.f32 %f8, %f7, %f2;\nst.global.f32 [%rd3+12], %f8;\n\
         mul.rn.f32 %f9, %f1, %f1;\nadd.f32 %f10, %f9, %f2;\nst.global.f32 [%rd3+16], %f10;\n\
         mul.f32 %f11, %f1, %f1;\nmov.f32 %f12, 0f3F801000;\nsub.f32 %f13, %f11, %f12;\n\
         st.global.f32 [%rd3+20], %f13;\n\
         mul.f32 %f14, %f1, %f1;\nsub.f32 %f15, %f12, %f14;\nst.global.f32 [%rd3+24], %f15;",
    );
    let (r, out) = run_k(&m, 1, 7);
    r.unwrap();
    let tiny = (2f32).powi(-24).to_bits();
    assert_eq!(out[0], tiny, "a*a + c: fused");
    assert_eq!(out[1], 0, "a product with a second use: not fused");
    assert_eq!(out[2], 0x3F801000, "the product itself");
    assert_eq!(out[3], 0, "a label between: not fused");
    assert_eq!(out[4], 0, "mul.rn: not fused");
    assert_eq!(out[5], tiny, "a*a - c, c set in between: fused");
    assert_eq!(out[6], (-(2f32).powi(-24)).to_bits(), "c - a*a: fused");
}

/// A call that names a return variable of a function that returns nothing
/// (what Numba emits for a C function returning `void` it declares with
/// `abi="c"`) runs the function; the variable keeps what it held.
#[test]
fn a_call_with_a_return_variable_of_a_void_function_runs_it() {
    const PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 rv) consume(.param .b64 p);
.visible .entry k(.param .u64 out)
{
    .reg .b64 %rd<3>;
    .reg .b32 %r<2>;
    ld.param.u64 %rd1, [out];
    cvta.to.global.u64 %rd2, %rd1;
    {
    .param .b64 p0;
    st.param.b64 [p0], %rd2;
    .param .b32 r0;
    call.uni (r0), consume, (p0);
    ld.param.b32 %r1, [r0];
    }
    ret;
}
.func consume(.param .b64 p)
{
    .reg .b64 %rd1;
    .reg .b32 %r1;
    ld.param.u64 %rd1, [p];
    mov.u32 %r1, 42;
    st.global.u32 [%rd1], %r1;
    ret;
}
"#;
    let m = Module::parse(PTX).expect("parses");
    let mut mem = VecMemory::default();
    let out = mem.alloc(vec![0; 4]);
    launch(
        &m,
        &mut m.globals(),
        "k",
        dims([1, 1, 1], [1, 1, 1], 0),
        Params::new().ptr(out),
        &mut mem,
    )
    .expect("runs");
    assert_eq!(mem.u32s(out), vec![42]);
}
