//! Companion entries (`fairgpu_ptx::part`): a kernel run as several
//! sub-launches over boxes of its grid computes exactly what it computes in
//! one launch; what cannot be sliced is refused; hostile text never panics.

mod common;

use common::*;
use fairgpu_ptx::part::PART_SLACK;
use fairgpu_ptx::{add_part_entries, Module, PartedModule, PART_SUFFIX};
use proptest::prelude::*;

fn text(name: &str) -> String {
    let path = format!("{}/tests/kernels/{name}.ptx", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).expect("kernel PTX")
}

/// A box of blocks: offset and size.
type Box3 = ([u32; 3], [u32; 3]);

/// Boxes that tile `grid`, cut along each axis before the given block
/// indices.
fn tile(grid: [u32; 3], cuts: [&[u32]; 3]) -> Vec<Box3> {
    let axis = |a: usize| {
        let mut c: Vec<u32> = cuts[a]
            .iter()
            .copied()
            .filter(|&c| c > 0 && c < grid[a])
            .collect();
        c.sort_unstable();
        c.dedup();
        let mut from = 0;
        let mut out = Vec::new();
        for c in c.into_iter().chain([grid[a]]) {
            out.push((from, c - from));
            from = c;
        }
        out
    };
    let (xs, ys, zs) = (axis(0), axis(1), axis(2));
    let mut out = Vec::new();
    for &(oz, nz) in &zs {
        for &(oy, ny) in &ys {
            for &(ox, nx) in &xs {
                out.push(([ox, oy, oz], [nx, ny, nz]));
            }
        }
    }
    out
}

/// Several tilings of `grid`: whole, single blocks, split along x, along
/// y, along z, uneven pieces.
fn tilings(grid: [u32; 3]) -> Vec<Vec<Box3>> {
    let all = |g: u32| (1..g).collect::<Vec<_>>();
    let (ax, ay, az) = (all(grid[0]), all(grid[1]), all(grid[2]));
    let [gx, gy, gz] = grid;
    let mut out = vec![
        tile(grid, [&[], &[], &[]]),
        tile(grid, [&ax, &ay, &az]),
        tile(grid, [&[1], &[], &[]]),
        tile(grid, [&[gx / 2, gx - 1], &[], &[]]),
        tile(grid, [&[], &[1], &[]]),
        tile(grid, [&[], &[gy / 2], &[gz / 2]]),
        tile(grid, [&[gx - 1], &[1], &[1]]),
    ];
    out.dedup();
    out
}

/// Allocates a run's buffers (the same ones each time); its parameters
/// and the buffers to compare.
type Setup<'a> = &'a dyn Fn(&mut VecMemory) -> (Params, Vec<u64>);

/// Runs `entry` of kernel file `file` over `grid`, then its companion
/// over each tiling of `grid` (in fresh memory each), and checks that the
/// buffers end bit-identical.
fn check(file: &str, entry: &str, grid: [u32; 3], block: [u32; 3], shared: u32, setup: Setup<'_>) {
    let src = text(file);
    let m = Module::parse(&src).expect("original parses");
    let mut mem = VecMemory::default();
    let (p, bufs) = setup(&mut mem);
    launch(
        &m,
        &mut m.globals(),
        entry,
        dims(grid, block, shared),
        p,
        &mut mem,
    )
    .expect("original runs");
    let want: Vec<Vec<u8>> = bufs.iter().map(|&b| mem.bytes(b).to_vec()).collect();

    let parted = add_part_entries(&src);
    let part = format!("{entry}{PART_SUFFIX}");
    let e = parted
        .entries
        .iter()
        .find(|e| e.name == entry)
        .expect("entry listed");
    assert_eq!(e.part, Ok(part.clone()), "{file}/{entry}");
    let m2 = Module::parse(&parted.text).expect("companions parse");

    // The original still runs the same in the grown module.
    let mut mem = VecMemory::default();
    let (p, bufs) = setup(&mut mem);
    launch(
        &m2,
        &mut m2.globals(),
        entry,
        dims(grid, block, shared),
        p,
        &mut mem,
    )
    .expect("original runs in the grown module");
    for (b, w) in bufs.iter().zip(&want) {
        assert_eq!(mem.bytes(*b), &w[..], "{entry} in the grown module");
    }

    for (k, boxes) in tilings(grid).into_iter().enumerate() {
        let mut mem = VecMemory::default();
        let (p, bufs) = setup(&mut mem);
        let mut g = m2.globals();
        let mut order = boxes.clone();
        if k % 2 == 1 {
            order.reverse();
        }
        for (off, size) in order {
            let params = Params(p.0.clone())
                .u32(off[0])
                .u32(off[1])
                .u32(off[2])
                .u32(grid[0])
                .u32(grid[1])
                .u32(grid[2]);
            launch(
                &m2,
                &mut g,
                &part,
                dims(size, block, shared),
                params,
                &mut mem,
            )
            .unwrap_or_else(|e| panic!("{part} over {off:?}+{size:?}: {e}"));
        }
        for (i, (b, w)) in bufs.iter().zip(&want).enumerate() {
            assert_eq!(
                mem.bytes(*b),
                &w[..],
                "{file}/{entry}: buffer {i} differs after boxes {boxes:?}"
            );
        }
    }
}

#[test]
fn vecadd_in_parts() {
    check("vecadd", "vecadd", [5, 1, 1], [256, 1, 1], 0, &|mem| {
        let n = 1100;
        let mut r = Rng(1);
        let a: Vec<f32> = (0..n).map(|_| r.f32()).collect();
        let b: Vec<f32> = (0..n).map(|_| r.f32()).collect();
        let (pa, pb) = (mem.alloc_f32(&a), mem.alloc_f32(&b));
        let pc = mem.alloc_f32(&vec![0.0; n]);
        let p = Params::new().ptr(pa).ptr(pb).ptr(pc).i32(n as i32);
        (p, vec![pa, pb, pc])
    });
}

#[test]
fn saxpy_grid_stride_in_parts() {
    // The loop strides by the full grid (%nctaid): each element is
    // updated once, by the block the full launch gives it.
    check("saxpy", "saxpy", [3, 1, 1], [128, 1, 1], 0, &|mem| {
        let n = 3000usize;
        let mut r = Rng(2);
        let x: Vec<f32> = (0..n).map(|_| r.f32()).collect();
        let y: Vec<f32> = (0..n).map(|_| r.f32()).collect();
        let (px, py) = (mem.alloc_f32(&x), mem.alloc_f32(&y));
        let p = Params::new().i32(n as i32).f32(1.75).ptr(px).ptr(py);
        (p, vec![px, py])
    });
}

#[test]
fn matmul_2d_grid_in_parts() {
    let n = 40usize;
    let tiles = n.div_ceil(16) as u32;
    check(
        "matmul",
        "matmul",
        [tiles, tiles, 1],
        [16, 16, 1],
        0,
        &|mem| {
            let mut r = Rng(3);
            let a: Vec<f32> = (0..n * n).map(|_| r.f32()).collect();
            let b: Vec<f32> = (0..n * n).map(|_| r.f32()).collect();
            let (pa, pb) = (mem.alloc_f32(&a), mem.alloc_f32(&b));
            let pc = mem.alloc_f32(&vec![0.0; n * n]);
            let p = Params::new().ptr(pa).ptr(pb).ptr(pc).i32(n as i32);
            (p, vec![pa, pb, pc])
        },
    );
}

#[test]
fn reductions_in_parts() {
    check(
        "reduce",
        "reduce_shared",
        [4, 1, 1],
        [128, 1, 1],
        128 * 4,
        &|mem| {
            let n = 1000u32;
            let mut r = Rng(4);
            let input: Vec<u32> = (0..n).map(|_| r.next() as u32).collect();
            let pin = mem.alloc_u32(&input);
            let pout = mem.alloc_u32(&[0; 4]);
            (Params::new().ptr(pin).ptr(pout).u32(n), vec![pout])
        },
    );
    check("reduce", "reduce_shfl", [6, 1, 1], [256, 1, 1], 0, &|mem| {
        let n = 1500usize;
        let mut r = Rng(5);
        let input: Vec<f32> = (0..n).map(|_| r.f32()).collect();
        let pin = mem.alloc_f32(&input);
        let pout = mem.alloc_f32(&[0.0; 6]);
        (Params::new().ptr(pin).ptr(pout).i32(n as i32), vec![pout])
    });
}

#[test]
fn histogram_and_scan_in_parts() {
    check("histogram", "histogram", [4, 1, 1], [96, 1, 1], 0, &|mem| {
        let n = 5000usize;
        let mut r = Rng(7);
        let data: Vec<u8> = (0..n).map(|_| (r.next() % 256) as u8).collect();
        let pdata = mem.alloc(data);
        let pbins = mem.alloc_u32(&[0; 256]);
        (
            Params::new().ptr(pdata).u32(n as u32).ptr(pbins),
            vec![pbins],
        )
    });
    check(
        "scan",
        "scan_hillis",
        [1, 1, 1],
        [256, 1, 1],
        2 * 256 * 4,
        &|mem| {
            let mut r = Rng(8);
            let input: Vec<i32> = (0..256).map(|_| (r.next() % 100) as i32 - 50).collect();
            let pin = mem.alloc_i32(&input);
            let pout = mem.alloc_i32(&[0; 256]);
            (Params::new().ptr(pin).ptr(pout).i32(256), vec![pout])
        },
    );
}

#[test]
fn calls_local_arrays_and_barriers_in_parts() {
    check("calls", "calls", [3, 1, 1], [128, 1, 1], 0, &|mem| {
        let n = 300;
        let coef = [0.5f32, -1.25, 2.0, 0.75, -0.125, 3.5, -2.25, 1.0];
        let pc = mem.alloc_f32(&coef);
        let ps = mem.alloc_i32(&vec![0; n]);
        let pv = mem.alloc_f32(&vec![0.0; n]);
        (
            Params::new().ptr(pc).ptr(ps).ptr(pv).i32(n as i32),
            vec![ps, pv],
        )
    });
    check("localarr", "localarr", [2, 1, 1], [64, 1, 1], 0, &|mem| {
        let n = 100;
        let mut r = Rng(14);
        let input: Vec<i32> = (0..n).map(|_| (r.next() % 100_000) as i32).collect();
        let pin = mem.alloc_i32(&input);
        let pout = mem.alloc_i32(&vec![0; n]);
        (Params::new().ptr(pin).ptr(pout).i32(n as i32), vec![pout])
    });
    check("barred", "barred", [3, 1, 1], [96, 1, 1], 0, &|mem| {
        let mut r = Rng(15);
        let input: Vec<i32> = (0..3 * 96).map(|_| (r.next() % 200) as i32 - 40).collect();
        let pin = mem.alloc_i32(&input);
        let pout = mem.alloc_i32(&vec![0; 3 * 3 * 96]);
        (Params::new().ptr(pin).ptr(pout), vec![pout])
    });
}

/// `struct Affine` of structarg.cu as the driver passes it (32 bytes).
fn affine_arg() -> Vec<u8> {
    let mut v = vec![0u8; 32];
    v[0..4].copy_from_slice(&1.5f32.to_le_bytes());
    v[4..8].copy_from_slice(&(-0.25f32).to_le_bytes());
    v[8..12].copy_from_slice(&3i32.to_le_bytes());
    v[16..24].copy_from_slice(&0.125f64.to_le_bytes());
    v[24] = 200;
    v
}

#[test]
fn struct_parameter_and_module_variables_in_parts() {
    check("structarg", "affine", [2, 1, 1], [64, 1, 1], 0, &|mem| {
        let n = 100;
        let mut r = Rng(10);
        let input: Vec<f32> = (0..n * 3).map(|_| r.f32()).collect();
        let pin = mem.alloc_f32(&input);
        let pout = mem.alloc_f64(&vec![0.0; n]);
        let p = Params::new()
            .bytes(&affine_arg(), 8)
            .ptr(pin)
            .ptr(pout)
            .i32(n as i32);
        (p, vec![pout])
    });

    // The companion counts in the module's own `launches`: one sliced
    // launch counts once (only the box holding block 0 has thread 0).
    let parted = add_part_entries(&text("structarg"));
    let m = Module::parse(&parted.text).unwrap();
    let mut g = m.globals();
    let mut mem = VecMemory::default();
    let pin = mem.alloc_f32(&[0.0; 300]);
    let pout = mem.alloc_f64(&[0.0; 100]);
    let counter = mem.alloc_u32(&[0]);
    for x in 0..2 {
        let p = Params::new()
            .bytes(&affine_arg(), 8)
            .ptr(pin)
            .ptr(pout)
            .i32(100)
            .u32(x)
            .u32(0)
            .u32(0)
            .u32(2)
            .u32(1)
            .u32(1);
        launch(
            &m,
            &mut g,
            "affine__fairgpu_part",
            dims([1, 1, 1], [64, 1, 1], 0),
            p,
            &mut mem,
        )
        .unwrap();
    }
    launch(
        &m,
        &mut g,
        "read_launches",
        dims([1, 1, 1], [1, 1, 1], 0),
        Params::new().ptr(counter),
        &mut mem,
    )
    .unwrap();
    assert_eq!(mem.u32s(counter), [1]);
}

/// Writes, per thread, what it sees of the block index and grid size, in
/// the forms ptxas accepts: moves, conversions, legacy 16-bit moves and
/// conversions. Comments hold braces.
const IDS: &str = r#"
.version 8.0
.target sm_80
.address_size 64

// a comment } with { braces
/* { and a block comment that is not closed here: }
*/
.visible .entry ids(
	.param .u64 ids_param_0 // the output } {
)
.maxntid 64, 1, 1
{
	.reg .b16 	%rs<4>;
	.reg .b32 	%r<24>;
	.reg .b64 	%rd<8>;
	// { not a block
	ld.param.u64 	%rd1, [ids_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ctaid.y;
	mov.u32 	%r3, %ctaid.z;
	mov.u32 	%r4, %nctaid.x;
	mov.u32 	%r5, %nctaid.y;
	mov.u32 	%r6, %nctaid.z;
	cvt.u64.u32 	%rd5, %nctaid.y; /* } */
	cvt.u32.u64 	%r7, %rd5;
	add.u32 	%r7, %r7, %r1;
	mov.u16 	%rs1, %ctaid.y;
	cvt.u32.u16 	%r8, %rs1;
	cvt.u32.u16 	%r9, %nctaid.z;
	mov.u32 	%r10, %tid.x;
	mov.u32 	%r11, %ntid.x;
	mad.lo.s32 	%r12, %r3, %r5, %r2;
	mad.lo.s32 	%r13, %r12, %r4, %r1;
	mad.lo.s32 	%r14, %r13, %r11, %r10;
	mul.wide.u32 	%rd3, %r14, 48;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.v4.u32 	[%rd4], {%r1, %r2, %r3, %r4};
	st.global.v4.u32 	[%rd4+16], {%r5, %r6, %r7, %r8};
	st.global.v4.u32 	[%rd4+32], {%r9, %r10, %r13, %r14};
	ret;
}
"#;

#[test]
fn block_indices_in_3d_parts() {
    let grid = [3, 2, 2];
    let block = [4, 1, 1];
    let threads = 12 * 4;
    let m = Module::parse(IDS).unwrap();
    let parted = add_part_entries(IDS);
    assert_eq!(parted.entries[0].part, Ok("ids__fairgpu_part".into()));
    let m2 = Module::parse(&parted.text).unwrap();
    let mut mem = VecMemory::default();
    let out = mem.alloc_u32(&vec![0; threads * 12]);
    launch(
        &m,
        &mut m.globals(),
        "ids",
        dims(grid, block, 0),
        Params::new().ptr(out),
        &mut mem,
    )
    .unwrap();
    let want = mem.u32s(out);
    // Spot check the reference itself: block (2, 1, 1), thread 3.
    let t = ((6 + 3 + 2) * 4 + 3) * 12;
    assert_eq!(
        &want[t..t + 12],
        &[2, 1, 1, 3, 2, 2, 2 + 2, 1, 2, 3, 11, 47]
    );
    for boxes in tilings(grid) {
        let mut mem = VecMemory::default();
        let out = mem.alloc_u32(&vec![0; threads * 12]);
        for (off, size) in &boxes {
            let p = Params::new()
                .ptr(out)
                .u32(off[0])
                .u32(off[1])
                .u32(off[2])
                .u32(grid[0])
                .u32(grid[1])
                .u32(grid[2]);
            launch(
                &m2,
                &mut m2.globals(),
                "ids__fairgpu_part",
                dims(*size, block, 0),
                p,
                &mut mem,
            )
            .unwrap();
        }
        assert_eq!(mem.u32s(out), want, "boxes {boxes:?}");
    }
}

/// The companion's text: from its comment line to the end.
fn companion_text<'a>(p: &'a PartedModule, name: &str) -> &'a str {
    let at = p
        .text
        .find(&format!("// fairgpu: {name} over"))
        .expect("companion present");
    &p.text[at..]
}

#[test]
fn tokens_are_replaced_whole() {
    let p = add_part_entries(&text("saxpy"));
    let c = companion_text(&p, "saxpy");
    assert!(c.contains("mov.u32 \t%r7, %__fgp6;"), "{c}");
    assert!(c.contains("mov.u32 \t%r9, %__fgp3;"), "{c}");
    // Only the prologue reads the real block index; nothing reads %nctaid.
    assert_eq!(c.matches("%ctaid").count(), 3);
    assert!(!c.contains("%nctaid"));
    assert!(c.contains(".visible .entry saxpy__fairgpu_part("));
    assert!(c.contains("\t.param .u32 saxpy_param_0,"));
    assert!(c.contains("\t.param .u64 saxpy_param_3,\n"));
    assert!(c.contains(".param .u32 __fgp_grid_z\n)"));

    // Registers whose names start like special registers are left alone,
    // and so are comments.
    let src = "
.entry k(.param .u64 k_p)
{
	.reg .u32 %ctaidx, %nctaid_y, %r<3>;
	mov.u32 %ctaidx, %ctaid.x; // %ctaid.y
	mov.u32 %nctaid_y, %nctaid.y;
	add.u32 %r1, %ctaidx, %nctaid_y;
	/* %nctaid.x */
}
";
    let p = add_part_entries(src);
    assert_eq!(p.entries[0].part, Ok("k__fairgpu_part".into()));
    let c = companion_text(&p, "k");
    assert!(c.contains("mov.u32 %ctaidx, %__fgp6; // %ctaid.y"), "{c}");
    assert!(c.contains("mov.u32 %nctaid_y, %__fgp4;"), "{c}");
    assert!(c.contains("add.u32 %r1, %ctaidx, %nctaid_y;"), "{c}");
    assert!(c.contains("/* %nctaid.x */"), "{c}");
    // No linkage directive on the original, none on the companion.
    assert!(
        c.contains("\n.entry k__fairgpu_part(.param .u64 k_p,"),
        "{c}"
    );
    Module::parse(&p.text).unwrap();
}

#[test]
fn fresh_names_avoid_the_text() {
    let src = "
.entry k()
{
	.reg .u32 %__fgp<3>;
	mov.u32 %__fgp1, %ctaid.z;
}
";
    let p = add_part_entries(src);
    let c = companion_text(&p, "k");
    assert!(c.contains(".reg .u32 %__fgp1_<9>;"), "{c}");
    assert!(c.contains("mov.u32 %__fgp1, %__fgp1_8;"), "{c}");
    Module::parse(&p.text).unwrap();
}

#[test]
fn linkage_and_header_directives_are_kept() {
    let src = r#"
.version 8.0
.target sm_80
.address_size 64
.extern .entry declared(.param .u32 a);
.weak .entry w
.maxntid 128, 1, 1
.minnctapersm 2
.pragma "nounroll";
{
	ret;
}
"#;
    let p = add_part_entries(src);
    // The declaration is not listed.
    assert_eq!(p.entries.len(), 1);
    assert_eq!(p.entries[0].name, "w");
    let c = companion_text(&p, "w");
    assert!(c.contains(".weak .entry w__fairgpu_part(\n\t.param .u32 __fgp_off_x,"));
    assert!(c.contains(")\n.maxntid 128, 1, 1\n.minnctapersm 2\n.pragma \"nounroll\";\n{"));
}

/// A module of the given entries and functions, each `(name, body)`.
fn module(funcs: &[(&str, &str)], entries: &[(&str, &str)]) -> String {
    let mut s = String::from(".version 8.0\n.target sm_90\n.address_size 64\n");
    for (n, b) in funcs {
        s += &format!(".func (.param .b32 {n}_ret) {n}()\n{{\n\t.reg .b32 %r<4>;\n{b}\n\tst.param.b32 [{n}_ret], %r1;\n\tret;\n}}\n");
    }
    for (n, b) in entries {
        s += &format!(".visible .entry {n}(\n\t.param .u64 {n}_p\n)\n{{\n\t.reg .b32 %r<8>;\n\t.reg .b64 %rd<4>;\n{b}\n\tret;\n}}\n");
    }
    s
}

fn call(f: &str) -> String {
    format!("\t{{\n\t.param .b32 retval0;\n\tcall.uni (retval0), {f}, ();\n\tld.param.b32 %r2, [retval0];\n\t}}")
}

fn parts(p: &PartedModule) -> Vec<(&str, Result<&str, &str>)> {
    p.entries
        .iter()
        .map(|e| (e.name.as_str(), e.part.as_deref().map_err(|e| *e)))
        .collect()
}

#[test]
fn functions_reading_the_block_index_are_refused() {
    let src = module(
        &[
            ("bid", "\tmov.u32 %r1, %ctaid.x;"),
            ("pure", "\tmov.u32 %r1, 7;"),
            ("via", &call("bid")),
        ],
        &[
            ("direct", &call("bid")),
            ("clean", &(call("pure") + "\n\tmov.u32 %r3, %ctaid.x;")),
            ("transitive", &call("via")),
            ("address", "\tmov.u64 %rd1, bid;"),
        ],
    );
    Module::parse(&src).unwrap();
    let p = add_part_entries(&src);
    let got = parts(&p);
    let why = "a called function reads %ctaid or %nctaid";
    assert_eq!(
        got,
        [
            ("direct", Err(why)),
            ("clean", Ok("clean__fairgpu_part")),
            ("transitive", Err(why)),
            ("address", Err(why)),
        ]
    );
    Module::parse(&p.text).unwrap();

    // An indirect call could reach `bid`.
    let src = module(
        &[("bid", "\tmov.u32 %r1, %nctaid.y;")],
        &[(
            "ind",
            "\tmov.u64 %rd1, 0;\n\t{\n\t.param .b32 retval0;\n\tprototype_0 : .callprototype (.param .b32 _) _ ();\n\tcall (retval0), %rd1, (), prototype_0;\n\t}",
        )],
    );
    let p = add_part_entries(&src);
    assert!(p.entries[0].part.is_err(), "{:?}", p.entries);
    assert_eq!(p.text, src);

    // A function only declared here may read anything; the runtime's
    // `vprintf` does not.
    let src = "
.extern .func (.param .b32 r) other(.param .b64 a);
.extern .func (.param .b32 r) vprintf(.param .b64 a, .param .b64 b);
.entry e1() { .param .b64 p; .param .b32 r; call.uni (r), other, (p); }
.entry e2() { .param .b64 p; .param .b32 r; call.uni (r), vprintf, (p, p); }
";
    let p = add_part_entries(src);
    assert!(p.entries[0].part.is_err());
    assert_eq!(p.entries[1].part, Ok("e2__fairgpu_part".into()));

    // A function referenced at module scope is reachable from anywhere.
    let src = module(&[("bid", "\tmov.u32 %r1, %ctaid.x;")], &[("k", "")])
        + ".global .u64 table[1] = {bid};\n";
    let p = add_part_entries(&src);
    assert!(p.entries[0].part.is_err());
}

#[test]
fn clusters_grid_sync_and_device_launches_are_refused() {
    let bodies = [
        "\tmov.u32 %r1, %clusterid.x;",
        "\tmov.u32 %r1, %cluster_ctarank;",
        "\tmov.u32 %r1, %cluster_nctaid.y;",
        "\tmov.pred %p1, %is_explicit_cluster;",
        "\tbarrier.cluster.arrive;\n\tbarrier.cluster.wait;",
        "\tmapa.shared::cluster.u32 %r1, %r2, 1;",
        "\tld.shared::cluster.u32 %r1, [%r2];",
        "\tmov.u32 %r1, %gridid;",
        "\tmov.u32 %r1, %envreg2;",
        "\tmov.b64 %rd1, {%envreg2, %envreg1};",
        "\tmov.v4.u32 {%r1, %r2, %r3, %r4}, %ctaid;",
        "\tmov.u32 %r1, %ctaid.w;",
        "\tcall.uni cudaCGSynchronizeGrid, ();",
        "\tmov.u64 %rd1, cudaGetParameterBufferV2;",
    ];
    for b in bodies {
        let src = module(&[], &[("k", b)]);
        let p = add_part_entries(&src);
        assert!(p.entries[0].part.is_err(), "{b}: {:?}", p.entries);
        assert_eq!(p.text, src);
    }
    for header in [
        ".reqnctapercluster 2, 1, 1",
        ".explicitcluster",
        ".maxclusterrank 8",
    ] {
        let src = format!(".entry k()\n{header}\n{{\n\tret;\n}}\n");
        let p = add_part_entries(&src);
        assert_eq!(p.entries[0].part, Err("uses thread block clusters"));
    }
    // Grid-wide synchronization through a function named for it.
    let src = module(
        &[("_ZN4cg7details10grid_syncEv", "\tmov.u32 %r1, 0;")],
        &[("k", &call("_ZN4cg7details10grid_syncEv"))],
    );
    let p = add_part_entries(&src);
    assert!(p.entries[0].part.is_err());
    // One cluster kernel does not stop the others.
    let src = module(&[], &[("a", "\tmov.u32 %r1, %clusterid.x;"), ("b", "")]);
    let p = add_part_entries(&src);
    assert!(p.entries[0].part.is_err());
    assert_eq!(p.entries[1].part, Ok("b__fairgpu_part".into()));
}

#[test]
fn odd_modules_are_refused_whole_or_in_part() {
    // Unbalanced body: listed, refused.
    let src = ".entry a() { ret; }\n.entry b() { { ret; }\n";
    let p = add_part_entries(src);
    assert_eq!(
        parts(&p),
        [
            ("a", Ok("a__fairgpu_part")),
            ("b", Err("body not delimited (unbalanced braces)"))
        ]
    );
    // The companion's name is taken, the entry is a companion, or is
    // defined twice.
    let src = ".global .u32 a__fairgpu_part;\n.entry a() { ret; }\n.entry b__fairgpu_part() { ret; }\n.entry c() { ret; }\n.entry c() { ret; }\n";
    let p = add_part_entries(src);
    assert!(p.entries.iter().all(|e| e.part.is_err()), "{:?}", p.entries);
    assert_eq!(p.text, src);
    // Parameters too large with the six added.
    let src = ".entry a(.param .align 8 .b8 s[4080]) { ret; }\n.entry b(.param .align 8 .b8 s[4064]) { ret; }\n";
    let p = add_part_entries(src);
    assert!(p.entries[0].part.is_err());
    assert!(p.entries[1].part.is_ok());
    // Labels that debug sections refer to.
    let src = ".entry a()\n{\n$L__func_begin0:\n\tret;\n}\n.section .debug_info\n{\n.b64 $L__func_begin0\n}\n";
    let p = add_part_entries(src);
    assert_eq!(
        p.entries[0].part,
        Err("defines labels that debug sections refer to")
    );
    // Too many entries.
    let src: String = (0..4097)
        .map(|i| format!(".entry k{i}() {{ ret; }}\n"))
        .collect();
    let p = add_part_entries(&src);
    assert_eq!(p.entries.len(), 4097);
    assert!(p.entries.iter().all(|e| e.part.is_err()));
    assert_eq!(p.text, src);
    // Many tiny entries: the output stays within its bound.
    let src: String = (0..4000).map(|i| format!(".entry k{i}(){{}}\n")).collect();
    let p = add_part_entries(&src);
    assert!(p.text.len() <= 2 * src.len() + PART_SLACK);
    assert!(p.entries.iter().any(|e| e.part.is_ok()));
    assert!(p.entries.iter().any(|e| e.part.is_err()));
    Module::parse(&p.text).unwrap();
    // Too long a text: unchanged, nothing listed.
    let big = " ".repeat(fairgpu_ptx::MAX_TEXT_BYTES + 1);
    let p = add_part_entries(&big);
    assert!(p.entries.is_empty() && p.text == big);
}

#[test]
fn twice_changes_nothing_more() {
    let once = add_part_entries(&text("reduce"));
    let twice = add_part_entries(&once.text);
    assert_eq!(twice.text, once.text);
    assert!(twice.entries.iter().all(|e| e.part.is_err()));
}

fn kernel_files() -> Vec<String> {
    let dir = format!("{}/tests/kernels", env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect();
    v.sort();
    v
}

#[test]
fn every_kernel_gets_a_companion_that_parses() {
    let files = kernel_files();
    assert!(files.len() >= 15);
    for src in &files {
        let m = Module::parse(src).unwrap();
        let p = add_part_entries(src);
        let names: Vec<&str> = m.kernel_names().collect();
        assert_eq!(p.entries.len(), names.len());
        let m2 = Module::parse(&p.text).unwrap_or_else(|e| panic!("{e}\n{}", p.text));
        let grown: Vec<&str> = m2.kernel_names().collect();
        for e in &p.entries {
            assert!(names.contains(&e.name.as_str()));
            // A grid-wide barrier (gridsync.ptx) needs every block at once.
            if src.contains("%envreg") {
                assert!(e.part.is_err(), "{} was sliced", e.name);
                continue;
            }
            // Kernels that launch kernels (cdp.ptx) run whole; the
            // kernels they launch do not.
            if let Err(why) = &e.part {
                assert!(
                    src.contains("__cudaCDP2LaunchDeviceV2"),
                    "{}: {why}",
                    e.name
                );
                assert_eq!(*why, "launches work from the device", "{}", e.name);
                continue;
            }
            let part = e.part.as_ref().expect("sliceable");
            assert_eq!(part, &format!("{}{PART_SUFFIX}", e.name));
            assert!(grown.contains(&part.as_str()));
        }
        assert!(p.text.starts_with(src.as_str()));
        assert!(p.text.len() <= 2 * src.len() + PART_SLACK);
    }
}

/// Checks what must hold for any input.
fn sane(src: &str) {
    let p = add_part_entries(src);
    assert!(p.text.len() <= 2 * src.len() + PART_SLACK);
    assert!(p.text.starts_with(src));
    if p.entries.iter().all(|e| e.part.is_err()) {
        assert_eq!(p.text, src);
    }
}

#[test]
fn truncated_kernels_never_panic() {
    for src in kernel_files() {
        let step = (src.len() / 150).max(1);
        for at in (0..src.len()).step_by(step) {
            let Some(cut) = src.get(..at) else { continue };
            sane(cut);
            // A prefix that is a whole module stays one.
            if Module::parse(cut).is_ok() {
                let p = add_part_entries(cut);
                Module::parse(&p.text).unwrap_or_else(|e| panic!("{e}\n{}", p.text));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn garbage_never_panics(s in "[ -~\n\t{}()\"/*;:%.]{0,400}") {
        sane(&s);
        sane(&format!(".entry k() {{ {s} }}"));
        sane(&format!(".entry k({s}) {{ mov.u32 %r1, %ctaid.x; }}"));
    }

    #[test]
    fn mutated_kernels_never_panic(
        at in 0usize..4000,
        len in 0usize..40,
        with in "[{}()\"/*;:%. a-z\n]{0,8}",
    ) {
        let src = text("matmul");
        let at = at.min(src.len());
        let end = (at + len).min(src.len());
        if let (Some(a), Some(b)) = (src.get(..at), src.get(end..)) {
            sane(&format!("{a}{with}{b}"));
        }
    }
}
