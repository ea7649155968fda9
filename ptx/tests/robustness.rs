//! Property tests: hostile PTX text and hostile launches never panic.

mod common;

use common::*;
use fairgpu_ptx::{Dims, Limits, Module};
use proptest::prelude::*;

const KERNELS: &[(&str, &str)] = &[
    ("vecadd", "vecadd"),
    ("matmul", "matmul"),
    ("reduce", "reduce_shared"),
    ("reduce", "reduce_shfl"),
    ("reduce", "warp_ops"),
    ("scan", "scan_blelloch"),
    ("histogram", "atomics"),
    ("structarg", "affine"),
    ("localarr", "localarr"),
    ("intops", "intops"),
    ("calls", "calls"),
    ("calls", "dsin"),
    ("cpasync", "cpasync"),
    ("barred", "barred"),
    ("half", "half_ops"),
    ("half", "half2_ops"),
];

fn text(name: &str) -> String {
    let path = format!("{}/tests/kernels/{name}.ptx", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).unwrap()
}

/// Runs every kernel of `m` with `dims` and `params` against a small
/// memory, within a small budget; any result but a panic is fine.
fn run_all(m: &Module, d: &Dims, params: &[u8]) {
    let mut mem = VecMemory::default();
    for _ in 0..4 {
        mem.alloc(vec![0; 4096]);
    }
    let lim = Limits {
        max_instructions: 200_000,
        ..Limits::default()
    };
    let names: Vec<String> = m.kernel_names().map(str::to_owned).collect();
    for k in names {
        let _ = m.run(&mut m.globals(), &k, d, params, &mut mem, &lim);
    }
}

fn arb_dims() -> impl Strategy<Value = Dims> {
    (
        prop_oneof![
            20 => (1u32..4, 1u32..3, 1u32..2).prop_map(|(x, y, z)| [x, y, z]),
            1 => prop::array::uniform3(0u32..5),
        ],
        prop_oneof![
            20 => (1u32..300, 1u32..4, 1u32..3).prop_map(|(x, y, z)| [x, y, z]),
            1 => prop::array::uniform3(0u32..2000),
        ],
        prop_oneof![4 => 0u32..5000, 1 => Just(u32::MAX)],
    )
        .prop_map(|(grid, block, shared_bytes)| Dims {
            grid,
            block,
            shared_bytes,
            part: None,
            cooperative: None,
        })
}

/// Parameter buffers whose pointers mostly hit the test memory.
fn arb_params() -> impl Strategy<Value = Vec<u8>> {
    let word = || {
        prop_oneof![
            8 => (0u64..4, 0u64..64).prop_map(|(k, o)| 0x7000_0000_0000 + k * 4352 + o * 4),
            1 => any::<u64>(),
            4 => 0u64..1000,
        ]
    };
    prop_oneof![
        9 => prop::collection::vec(word(), 6..8),
        1 => prop::collection::vec(word(), 0..6),
    ]
    .prop_map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(s in "\\PC{0,300}") {
        let _ = Module::parse(&s);
    }

    #[test]
    fn random_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = Module::parse(&String::from_utf8_lossy(&b));
    }

    #[test]
    fn mangled_kernels_never_panic(
        k in 0..KERNELS.len(),
        edits in prop::collection::vec((0u8..5, any::<prop::sample::Index>(), any::<prop::sample::Index>(), any::<u64>()), 1..6),
        d in arb_dims(),
        params in arb_params(),
    ) {
        let src = text(KERNELS[k].0);
        let mut toks: Vec<String> = src.split_inclusive(|c: char| c.is_whitespace() || ",;[]{}".contains(c)).map(str::to_owned).collect();
        for (op, i, j, n) in edits {
            if toks.is_empty() {
                break;
            }
            let i = i.index(toks.len());
            let j = j.index(toks.len());
            match op {
                0 => { toks.remove(i); }
                1 => { let t = toks[j].clone(); toks.insert(i, t); }
                2 => toks.swap(i, j),
                3 => toks[i] = format!("{} ", n as i64),
                _ => toks[i] = format!("%r{} ", n % 40),
            }
        }
        let mangled: String = toks.concat();
        if let Ok(m) = Module::parse(&mangled) {
            run_all(&m, &d, &params);
        }
    }

    #[test]
    fn random_launches_of_valid_kernels_never_panic(
        k in 0..KERNELS.len(),
        d in arb_dims(),
        params in arb_params(),
    ) {
        let m = kernel(KERNELS[k].0);
        let mut mem = VecMemory::default();
        for _ in 0..4 {
            mem.alloc(vec![0; 4096]);
        }
        let lim = Limits { max_instructions: 200_000, ..Limits::default() };
        let _ = m.run(&mut m.globals(), KERNELS[k].1, &d, &params, &mut mem, &lim);
    }
}
