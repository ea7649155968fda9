//! Recursive device functions (`tests/kernels/recursion.cu`, nvcc 13):
//! direct recursion (Fibonacci), mutual recursion through a forward
//! declaration, a local array live across the recursive calls (each
//! activation keeps its own), a quicksort over the caller's array, lanes of
//! one warp at different depths, and a recursion without end that overflows
//! the call stack. Results against the CPU.

mod common;

use common::*;
use fairgpu_ptx::{Error, Limits};

fn fib(n: u32) -> u32 {
    if n < 2 {
        n
    } else {
        fib(n - 1) + fib(n - 2)
    }
}

fn digits(v: i64, depth: i32) -> i64 {
    let d: Vec<i64> = (0..6)
        .map(|i| ((v >> (4 * i)) & 15) + i64::from(depth))
        .collect();
    let below = if depth > 0 {
        digits(v / 3, depth - 1)
    } else {
        0
    };
    let mut s: i64 = 0;
    for i in 0..6 {
        s = s
            .wrapping_mul(7)
            .wrapping_add(d[((i * 5 + depth) % 6) as usize]);
    }
    s ^ below.wrapping_mul(31)
}

#[test]
fn recursive_functions_compute_what_the_cpu_computes() {
    let m = kernel("recursion");
    let n = 300usize;
    let mut r = Rng(11);
    let input: Vec<i32> = (0..n)
        .map(|_| (r.next() % 100_000) as i32 - 50_000)
        .collect();
    let mut mem = VecMemory::default();
    let pin = mem.alloc_i32(&input);
    let pf = mem.alloc(vec![0; 4 * n]);
    let pp = mem.alloc(vec![0; 4 * n]);
    let pd = mem.alloc(vec![0; 8 * n]);
    let ps = mem.alloc(vec![0; 32 * n]);
    let st = launch(
        &m,
        &mut m.globals(),
        "recursion",
        dims([3, 1, 1], [128, 1, 1], 0),
        Params::new()
            .ptr(pin)
            .ptr(pf)
            .ptr(pp)
            .ptr(pd)
            .ptr(ps)
            .i32(n as i32),
        &mut mem,
    )
    .expect("recursive kernel runs");
    assert_eq!(st.threads, 384);
    let (fibs, parity, dig, sorted) = (mem.u32s(pf), mem.i32s(pp), mem.u64s(pd), mem.i32s(ps));
    for (t, &v) in input.iter().enumerate() {
        assert_eq!(fibs[t], fib((v & 15) as u32), "fib, thread {t}");
        let even = (v & 63) % 2 == 0;
        assert_eq!(parity[t], if even { 2 } else { 1 }, "parity, thread {t}");
        assert_eq!(
            dig[t] as i64,
            digits(i64::from(v), v & 3),
            "digits, thread {t}"
        );
        let mut a: Vec<i32> = (0..8u32)
            .map(|i| ((v as u32).wrapping_mul(i + 3).wrapping_mul(2_654_435_761) >> 24) as i32)
            .collect();
        a.sort();
        assert_eq!(&sorted[8 * t..8 * t + 8], &a[..], "sorted, thread {t}");
    }
}

fn deep(n: i32, w: &[i32]) -> i32 {
    // Iteratively: the CPU's own stack need not hold the recursion.
    let mut v = w[0];
    for k in 1..=n {
        v = v.wrapping_mul(3).wrapping_add(w[(k & 1) as usize]);
    }
    v
}

#[test]
fn deep_recursion_runs_and_endless_recursion_overflows_the_call_stack() {
    let m = kernel("recursion");
    let w = [5, -7];
    let run = |n: i32| {
        let mut mem = VecMemory::default();
        let pw = mem.alloc_i32(&w);
        let out = mem.alloc(vec![0; 4 * 32]);
        let r = m.run(
            &mut m.globals(),
            "runaway",
            &dims([1, 1, 1], [32, 1, 1], 0),
            &Params::new().ptr(pw).ptr(out).i32(n).0,
            &mut mem,
            &Limits::default(),
        );
        (r, mem.i32s(out))
    };
    // Each lane one level deeper than the one before: 2,000 to 2,031.
    let (r, out) = run(2000);
    r.expect("2,000 levels of recursion run");
    for (l, &v) in out.iter().enumerate() {
        assert_eq!(v, deep(2000 + l as i32, &w), "lane {l}");
    }
    // A billion levels: the frames outgrow the launch's stack.
    let (r, _) = run(1 << 30);
    assert!(matches!(r, Err(Error::StackOverflow(_))), "{r:?}");
}

/// Numba's ABI: a device function returns its value through a pointer to
/// the caller's local memory, which a recursive function passes down to
/// its own deeper activations (each writes its result into its caller's
/// locals). Every activation's locals need addresses of their own for
/// that; lanes at different depths. Hand-written after Numba's PTX of
/// `fib(n) = n if n < 2 else fib(n - 1) + fib(n - 2)`.
#[test]
fn results_returned_through_pointers_into_the_callers_locals_reach_it() {
    const PTX: &str = r#"
.version 8.0
.target sm_90
.address_size 64
.func (.param .b32 rv) fib(.param .b64 out, .param .b64 n);
.visible .entry k(.param .u64 res)
{
    .local .align 8 .b8 depot[8];
    .reg .b64 %SP, %SPL, %rd<8>;
    .reg .b32 %r<3>;
    mov.u64 %SPL, depot;
    cvta.local.u64 %SP, %SPL;
    mov.u32 %r1, %tid.x;
    and.b32 %r2, %r1, 15;
    cvt.u64.u32 %rd1, %r2;
    mov.u64 %rd2, 77;
    st.local.u64 [%SPL], %rd2;
    {
    .param .b64 p0;
    st.param.b64 [p0], %SP;
    .param .b64 p1;
    st.param.b64 [p1], %rd1;
    .param .b32 r0;
    call.uni (r0), fib, (p0, p1);
    }
    ld.local.u64 %rd3, [%SPL];
    ld.param.u64 %rd4, [res];
    cvta.to.global.u64 %rd5, %rd4;
    mul.wide.u32 %rd6, %r1, 8;
    add.s64 %rd7, %rd5, %rd6;
    st.global.u64 [%rd7], %rd3;
    ret;
}
.func (.param .b32 rv) fib(.param .b64 out, .param .b64 n)
{
    .local .align 8 .b8 depot[16];
    .reg .b64 %SP, %SPL, %rd<16>;
    .reg .pred %p1;
    .reg .b32 %r1;
    mov.u64 %SPL, depot;
    cvta.local.u64 %SP, %SPL;
    ld.param.u64 %rd3, [out];
    ld.param.u64 %rd4, [n];
    add.u64 %rd5, %SP, 0;
    add.u64 %rd7, %SP, 8;
    mov.u64 %rd6, 0;
    st.local.u64 [%SPL], %rd6;
    st.local.u64 [%SPL+8], %rd6;
    setp.lt.s64 %p1, %rd4, 2;
    @%p1 bra SMALL;
    add.s64 %rd8, %rd4, -1;
    {
    .param .b64 p0;
    st.param.b64 [p0], %rd5;
    .param .b64 p1;
    st.param.b64 [p1], %rd8;
    .param .b32 r0;
    call.uni (r0), fib, (p0, p1);
    }
    add.s64 %rd12, %rd4, -2;
    {
    .param .b64 p0;
    st.param.b64 [p0], %rd7;
    .param .b64 p1;
    st.param.b64 [p1], %rd12;
    .param .b32 r0;
    call.uni (r0), fib, (p0, p1);
    }
    ld.local.u64 %rd11, [%SPL];
    ld.u64 %rd14, [%rd7];
    add.s64 %rd15, %rd14, %rd11;
    st.u64 [%rd3], %rd15;
    bra.uni DONE;
SMALL:
    st.u64 [%rd3], %rd4;
DONE:
    mov.u32 %r1, 0;
    st.param.b32 [rv], %r1;
    ret;
}
"#;
    let m = fairgpu_ptx::Module::parse(PTX).expect("parses");
    let mut mem = VecMemory::default();
    let res = mem.alloc(vec![0; 8 * 64]);
    launch(
        &m,
        &mut m.globals(),
        "k",
        dims([1, 1, 1], [64, 1, 1], 0),
        Params::new().ptr(res),
        &mut mem,
    )
    .expect("runs");
    let got = mem.u64s(res);
    for (t, &v) in got.iter().enumerate() {
        assert_eq!(v, u64::from(fib(t as u32 % 16)), "thread {t}");
    }
}
