//! Blocks on several host threads (`Module::run_parallel`): the same
//! memory, variables, statistics and errors as one thread, for kernels
//! whose blocks do not talk to each other; the others stay on one thread.

mod common;

use common::*;
use fairgpu_ptx::{Error, Limits, Module, RunStats};
use std::sync::Mutex;

const HEAD: &str = ".version 9.0\n.target sm_80\n.address_size 64\n";

/// What a launch leaves: its result, the bytes of each allocation and the
/// module's variables.
type Outcome = (Result<RunStats, Error>, Vec<Vec<u8>>, Vec<u8>);

/// Runs `name` once on one thread and once on each of `threads` host
/// threads, each from the memory `setup` makes (which returns the
/// allocations to compare and the parameters).
fn both(
    m: &Module,
    name: &str,
    d: fairgpu_ptx::Dims,
    limits: &Limits,
    threads: &[usize],
    setup: impl Fn(&mut VecMemory) -> (Vec<u64>, Params),
) -> (Outcome, Vec<Outcome>) {
    let serial = {
        let mut mem = VecMemory::default();
        let (allocs, p) = setup(&mut mem);
        let mut g = m.globals();
        let r = m.run(&mut g, name, &d, &p.0, &mut mem, limits);
        let bytes = allocs.iter().map(|&a| mem.bytes(a).to_vec()).collect();
        (r, bytes, g.take_bytes())
    };
    let parallel = threads
        .iter()
        .map(|&n| {
            let mut mem = VecMemory::default();
            let (allocs, p) = setup(&mut mem);
            let shared = LockedMemory(Mutex::new(mem));
            let mut g = m.globals();
            let r = m.run_parallel(&mut g, name, &d, &p.0, &shared, limits, n);
            let mem = shared.0.into_inner().expect("not poisoned");
            let bytes = allocs.iter().map(|&a| mem.bytes(a).to_vec()).collect();
            (r, bytes, g.take_bytes())
        })
        .collect();
    (serial, parallel)
}

fn assert_same(serial: &Outcome, parallel: &[Outcome]) {
    for (k, p) in parallel.iter().enumerate() {
        assert_eq!(
            format!("{:?}", serial.0),
            format!("{:?}", p.0),
            "result, run {k}"
        );
        assert!(serial.1 == p.1, "memory differs, run {k}");
        assert!(serial.2 == p.2, "module variables differ, run {k}");
    }
}

#[test]
fn nvcc_kernels_compute_on_several_threads_what_they_compute_on_one() {
    let limits = Limits::default();
    let matmul = kernel("matmul");
    assert!(matmul.kernel_runs_in_parallel("matmul"));
    let n = 70usize;
    let tiles = n.div_ceil(16) as u32;
    let (s, p) = both(
        &matmul,
        "matmul",
        dims([tiles, tiles, 1], [16, 16, 1], 0),
        &limits,
        &[2, 3, 8],
        |mem| {
            let mut r = Rng(7);
            let a: Vec<f32> = (0..n * n).map(|_| r.f32()).collect();
            let b: Vec<f32> = (0..n * n).map(|_| r.f32()).collect();
            let (pa, pb) = (mem.alloc_f32(&a), mem.alloc_f32(&b));
            let pc = mem.alloc_f32(&vec![0.0; n * n]);
            let p = Params::new().ptr(pa).ptr(pb).ptr(pc).i32(n as i32);
            (vec![pa, pb, pc], p)
        },
    );
    assert!(s.0.is_ok(), "{:?}", s.0);
    assert_same(&s, &p);

    let reduce = kernel("reduce");
    for name in ["reduce_shared", "reduce_shfl"] {
        assert!(reduce.kernel_runs_in_parallel(name), "{name}");
    }
    let n = 5000u32;
    let (s, p) = both(
        &reduce,
        "reduce_shared",
        dims([n.div_ceil(256), 1, 1], [128, 1, 1], 128 * 4),
        &limits,
        &[2, 4],
        |mem| {
            let mut r = Rng(8);
            let input: Vec<u32> = (0..n).map(|_| r.next() as u32).collect();
            let pin = mem.alloc_u32(&input);
            let pout = mem.alloc_u32(&vec![0; n.div_ceil(256) as usize]);
            (vec![pin, pout], Params::new().ptr(pin).ptr(pout).u32(n))
        },
    );
    assert!(s.0.is_ok(), "{:?}", s.0);
    assert_same(&s, &p);
}

#[test]
fn blocks_that_may_see_each_other_stay_on_one_thread() {
    // Global atomics: the order of the blocks' updates is the result.
    assert!(!kernel("histogram").kernel_runs_in_parallel("histogram"));
    // Module variables counted with atomicAdd.
    assert!(!kernel("structarg").kernel_runs_in_parallel("affine"));
    // Fences wider than the block, printing, the heap.
    let with = |body: &str| {
        let text = format!("{HEAD}.visible .entry k()\n{{\n{body}\nret;\n}}\n");
        Module::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    };
    assert!(with("membar.cta;").kernel_runs_in_parallel("k"));
    assert!(with("bar.sync 0;").kernel_runs_in_parallel("k"));
    for body in [
        "membar.gl;",
        "membar.sys;",
        "fence.acq_rel.gpu;",
        "fence.sc.sys;",
    ] {
        assert!(!with(body).kernel_runs_in_parallel("k"), "{body}");
    }
    // Shared-memory atomics stay within the block.
    let shared = with(
        ".shared .align 4 .u32 s;\n.reg .b32 %r<2>;\nmov.u32 %r1, s;\natom.shared.add.u32 %r0, [%r1], 1;",
    );
    assert!(shared.kernel_runs_in_parallel("k"));
    let global = Module::parse(&format!(
        "{HEAD}.global .align 4 .u32 s;\n.visible .entry k()\n{{\n.reg .b64 %rd<2>;\n.reg .b32 %r<2>;\n\
         mov.u64 %rd1, s;\nred.global.add.u32 [%rd1], 1;\nret;\n}}\n"
    ))
    .expect("parses");
    assert!(!global.kernel_runs_in_parallel("k"));
    let prints = kernel("prints");
    let printing: Vec<&str> = prints
        .kernel_names()
        .filter(|k| prints.kernel_prints(k))
        .collect();
    assert!(!printing.is_empty());
    for k in printing {
        assert!(!prints.kernel_runs_in_parallel(k), "{k}");
    }
    let heap = kernel("heap");
    assert!(!heap.kernel_runs_in_parallel("heap_sums"));
    assert!(!heap.kernel_runs_in_parallel("heap_push"));
    // Not a kernel of the module.
    assert!(!with("").kernel_runs_in_parallel("other"));
}

/// Each block `b` stores `b * 3` at `out[b * 64]` and at `vars[b]` of a
/// module variable (without atomics), after `spin` turns of a loop.
fn per_block_stores() -> Module {
    let text = format!(
        "{HEAD}.global .align 4 .b8 vars[256];\n\
         .visible .entry k(.param .u64 out, .param .u32 spin)\n{{\n\
         .reg .pred %p<2>;\n.reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n\
         ld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\n\
         ld.param.u32 %r5, [spin];\nmov.u32 %r6, 0;\n\
         LOOP:\nsetp.ge.u32 %p1, %r6, %r5;\n@%p1 bra DONE;\nadd.u32 %r6, %r6, 1;\nbra LOOP;\n\
         DONE:\nmov.u32 %r1, %tid.x;\nsetp.ne.u32 %p1, %r1, 0;\n@%p1 bra END;\n\
         mov.u32 %r2, %ctaid.x;\nmul.lo.u32 %r3, %r2, 3;\n\
         mul.wide.u32 %rd2, %r2, 256;\nadd.s64 %rd3, %rd1, %rd2;\nst.global.u32 [%rd3], %r3;\n\
         and.b32 %r4, %r2, 63;\nmul.wide.u32 %rd4, %r4, 4;\nmov.u64 %rd5, vars;\nadd.s64 %rd6, %rd5, %rd4;\n\
         st.global.u32 [%rd6], %r3;\n\
         END:\nret;\n}}\n"
    );
    Module::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

#[test]
fn module_variables_written_by_different_blocks_are_merged() {
    let m = per_block_stores();
    assert!(m.kernel_runs_in_parallel("k"));
    let (s, p) = both(
        &m,
        "k",
        dims([64, 1, 1], [64, 1, 1], 0),
        &Limits::default(),
        &[2, 5],
        |mem| {
            let out = mem.alloc_u32(&vec![7; 64 * 64]);
            (vec![out], Params::new().ptr(out).u32(3))
        },
    );
    assert!(s.0.is_ok(), "{:?}", s.0);
    let vars: Vec<u32> = s.2[..256]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(vars, (0..64).map(|b| b * 3).collect::<Vec<_>>());
    assert_same(&s, &p);
}

#[test]
fn the_first_failing_block_in_grid_order_is_the_error() {
    let m = per_block_stores();
    // Room for 40 blocks' stores: blocks 40..100 write out of bounds, and
    // the error names block 40's address on any number of threads.
    let (s, p) = both(
        &m,
        "k",
        dims([100, 1, 1], [32, 1, 1], 0),
        &Limits::default(),
        &[2, 4, 7],
        |mem| {
            let out = mem.alloc_u32(&vec![0; 40 * 64]);
            (vec![out], Params::new().ptr(out).u32(0))
        },
    );
    assert!(matches!(s.0, Err(Error::OutOfBounds { .. })), "{:?}", s.0);
    for o in &p {
        assert_eq!(format!("{:?}", s.0), format!("{:?}", o.0));
        // The blocks before the failing one all ran.
        assert!(o.1[0] == s.1[0]);
    }
}

#[test]
fn the_budget_bounds_the_blocks_of_every_thread_together() {
    let m = per_block_stores();
    let d = dims([64, 1, 1], [32, 1, 1], 0);
    let run = |max: u64, threads: usize| {
        let limits = Limits {
            max_instructions: max,
            ..Limits::default()
        };
        let (s, p) = both(&m, "k", d, &limits, &[threads], |mem| {
            let out = mem.alloc_u32(&vec![0; 64 * 64]);
            (vec![out], Params::new().ptr(out).u32(200))
        });
        (s.0, p.into_iter().next().expect("one").0)
    };
    let (s, _) = run(u64::MAX, 1);
    let whole = s.expect("runs").instructions;
    for threads in [2, 3, 8] {
        // Enough for every block (instructions and setup): both pass, and
        // count the same instructions.
        let (s, p) = run(whole * 2, threads);
        assert_eq!(
            s.expect("passes").instructions,
            p.expect("passes").instructions
        );
        // Half of it: both fail with the budget.
        let (s, p) = run(whole / 2, threads);
        assert!(matches!(s, Err(Error::Budget(_))), "{s:?}");
        assert!(
            matches!(p, Err(Error::Budget(_))),
            "{threads} threads: {p:?}"
        );
        // Just below what the blocks need: no thread sees it alone, the
        // total does.
        let (s, p) = run(whole, threads);
        assert!(matches!(s, Err(Error::Budget(_))), "{s:?}");
        assert!(
            matches!(p, Err(Error::Budget(_))),
            "{threads} threads: {p:?}"
        );
    }
}
