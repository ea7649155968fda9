//! Texture and surface objects: the kernels of `tests/kernels/textures.cu`
//! (PTX by nvcc 13) against CPU references written here from the CUDA C++
//! Programming Guide's formulas, and handwritten PTX for the error paths.

// References index the way the kernels do.
#![allow(clippy::needless_range_loop)]

mod common;

use common::*;
use fairgpu_ptx::texture::{AddressMode, ChannelFormat, Image, Sampler, Shape, Texture};
use fairgpu_ptx::{Error, Module};

use AddressMode::{Border, Clamp, Mirror, Wrap};

// ---- building images -------------------------------------------------------

/// Uploads an image of `w × h × d` elements whose element `i` (x fastest)
/// has the bytes `elem(i)`; each row padded by `pad` bytes.
fn upload(
    mem: &mut VecMemory,
    shape: Shape,
    format: ChannelFormat,
    channels: u32,
    [w, h, d]: [u64; 3],
    pad: u64,
    elem: impl Fn(usize) -> Vec<u8>,
) -> Image {
    let eb = u64::from(format.bytes() * channels);
    let row = w * eb + pad;
    let mut bytes = Vec::new();
    for z in 0..d {
        for y in 0..h {
            for x in 0..w {
                let e = elem(((z * h + y) * w + x) as usize);
                assert_eq!(e.len() as u64, eb);
                bytes.extend(e);
            }
            bytes.extend(std::iter::repeat_n(0xEE, pad as usize));
        }
    }
    let base = mem.alloc(bytes);
    Image {
        shape,
        base,
        format,
        channels,
        width: w,
        height: h,
        depth: d,
        row_pitch: row,
        slice_pitch: row * h,
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn sampler(normalized: bool, linear: bool, address: [AddressMode; 3]) -> Sampler {
    Sampler {
        address,
        linear,
        normalized_coords: normalized,
        read_normalized: true,
        srgb: false,
        seamless_cubemap: false,
        border: [0.25, -0.5, 0.75, 2.0],
    }
}

// ---- the reference ---------------------------------------------------------

/// Texel values as a float lookup reads them, indexed `[z][y][x]`.
struct Host {
    size: [i64; 3],
    texels: Vec<[f32; 4]>,
}

impl Host {
    fn at(&self, x: i64, y: i64, z: i64) -> [f32; 4] {
        let [w, h, _] = self.size;
        self.texels[((z * h + y) * w + x) as usize]
    }
}

/// Coordinates become integers within this many texels of 0.
const LIMIT: f64 = 1_099_511_627_776.0;

/// Texel `i` of `n` under an address mode; `None`: the border color.
fn ref_address(i: i64, n: i64, mode: AddressMode) -> Option<i64> {
    match mode {
        Clamp => Some(i.max(0).min(n - 1)),
        Border => (i >= 0 && i < n).then_some(i),
        Wrap => Some(((i % n) + n) % n),
        Mirror => {
            let m = ((i % (2 * n)) + 2 * n) % (2 * n);
            Some(if m < n { m } else { 2 * n - 1 - m })
        }
    }
}

/// The Programming Guide's lookup of a float texture at float
/// coordinates `c` (one per dimension) in slice `slice`.
fn ref_sample(host: &Host, s: &Sampler, c: &[f32], slice: i64) -> [f32; 4] {
    let dims = c.len();
    let modes: Vec<AddressMode> = (0..dims)
        .map(|d| match s.address[d] {
            Wrap | Mirror if !s.normalized_coords => Clamp,
            m => m,
        })
        .collect();
    // Texel positions.
    let t: Vec<f64> = (0..dims)
        .map(|d| {
            let v = if c[d].is_nan() { 0.0 } else { c[d] };
            f64::from(if s.normalized_coords {
                v * host.size[d] as f32
            } else {
                v
            })
        })
        .collect();
    let fetch = |idx: &[i64]| -> [f32; 4] {
        let mut p = [0i64, 0, slice];
        for d in 0..dims {
            match ref_address(idx[d], host.size[d], modes[d]) {
                Some(v) => p[d] = v,
                None => return s.border,
            }
        }
        host.at(p[0], p[1], p[2])
    };
    if !s.linear {
        let idx: Vec<i64> = t
            .iter()
            .map(|&v| v.clamp(-LIMIT, LIMIT).floor() as i64)
            .collect();
        return fetch(&idx);
    }
    // x_B = x - 0.5 with 8 fractional bits: i = floor(x_B), α = frac(x_B).
    let (mut i, mut a) = (vec![0i64; dims], vec![0f32; dims]);
    for d in 0..dims {
        let q = ((t[d] - 0.5) * 256.0)
            .clamp(-LIMIT, LIMIT)
            .round_ties_even() as i64;
        i[d] = q.div_euclid(256);
        a[d] = q.rem_euclid(256) as f32 / 256.0;
    }
    let mut out = [0f32; 4];
    let mut add = |w: f32, v: [f32; 4]| {
        for k in 0..4 {
            out[k] += w * v[k];
        }
    };
    match dims {
        1 => {
            add(1.0 - a[0], fetch(&[i[0]]));
            add(a[0], fetch(&[i[0] + 1]));
        }
        2 => {
            let (al, be) = (a[0], a[1]);
            add((1.0 - al) * (1.0 - be), fetch(&[i[0], i[1]]));
            add(al * (1.0 - be), fetch(&[i[0] + 1, i[1]]));
            add((1.0 - al) * be, fetch(&[i[0], i[1] + 1]));
            add(al * be, fetch(&[i[0] + 1, i[1] + 1]));
        }
        _ => {
            let (al, be, ga) = (a[0], a[1], a[2]);
            let (x, y, z) = (i[0], i[1], i[2]);
            add((1.0 - al) * (1.0 - be) * (1.0 - ga), fetch(&[x, y, z]));
            add(al * (1.0 - be) * (1.0 - ga), fetch(&[x + 1, y, z]));
            add((1.0 - al) * be * (1.0 - ga), fetch(&[x, y + 1, z]));
            add(al * be * (1.0 - ga), fetch(&[x + 1, y + 1, z]));
            add((1.0 - al) * (1.0 - be) * ga, fetch(&[x, y, z + 1]));
            add(al * (1.0 - be) * ga, fetch(&[x + 1, y, z + 1]));
            add((1.0 - al) * be * ga, fetch(&[x, y + 1, z + 1]));
            add(al * be * ga, fetch(&[x + 1, y + 1, z + 1]));
        }
    }
    out
}

/// The Programming Guide's cubemap table: face and `(s/m+1)/2, (t/m+1)/2`.
fn ref_cube(x: f32, y: f32, z: f32) -> (i64, f32, f32) {
    let (ax, ay, az) = (x.abs(), y.abs(), z.abs());
    let (face, m, s, t) = if ax >= ay && ax >= az {
        if x >= 0.0 {
            (0, x, -z, -y)
        } else {
            (1, -x, z, -y)
        }
    } else if ay >= az {
        if y >= 0.0 {
            (2, y, x, z)
        } else {
            (3, -y, x, -z)
        }
    } else if z >= 0.0 {
        (4, z, x, -y)
    } else {
        (5, -z, -x, -y)
    };
    (face, (s / m + 1.0) / 2.0, (t / m + 1.0) / 2.0)
}

fn same(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.to_bits() == w.to_bits() || (g - w).abs() <= 1e-6 * w.abs().max(1.0),
            "{what}: element {k}: got {g}, want {w} (all: {got:?} vs {want:?})"
        );
    }
}

// ---- launching --------------------------------------------------------------

fn run(m: &Module, name: &str, n: usize, p: Params, mem: &mut VecMemory) {
    try_run(m, name, n, p, mem).unwrap_or_else(|e| panic!("{name}: {e}"));
}

fn try_run(m: &Module, name: &str, n: usize, p: Params, mem: &mut VecMemory) -> Result<(), Error> {
    let mut g = m.globals();
    let blocks = n.div_ceil(64).max(1) as u32;
    launch(m, &mut g, name, dims([blocks, 1, 1], [64, 1, 1], 0), p, mem).map(|_| ())
}

/// Runs a lookup kernel `name(t, coords, out, n)` over the texture `tex`
/// (whose texels are in `mem`), with `per` float outputs per point.
fn lookups(
    mem: &mut VecMemory,
    m: &Module,
    name: &str,
    tex: Texture,
    coords: &[f32],
    n: usize,
    per: usize,
) -> Vec<f32> {
    let h = mem.add_texture(tex);
    let pc = mem.alloc_f32(coords);
    let out = mem.alloc_f32(&vec![f32::NAN; n * per]);
    run(
        m,
        name,
        n,
        Params::new().u64(h).ptr(pc).ptr(out).i32(n as i32),
        mem,
    );
    mem.f32s(out)
}

/// Coordinates that exercise every address mode: in range, at texel
/// centers and edges, out of range both ways, far out, and not numbers.
fn probe_coords(n: f32, normalized: bool) -> Vec<f32> {
    let mut v: Vec<f32> = vec![
        0.0,
        0.5,
        1.0,
        1.25,
        1.5,
        1.75,
        2.49805,
        n - 0.5,
        n,
        n + 0.3,
        -0.2,
        -0.5,
        -1.7,
        -n - 2.6,
        3.0 * n + 1.1,
        1e9,
        -1e9,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ];
    v.extend((0..24).map(|k| k as f32 * 0.37 - 2.0));
    if normalized {
        v.iter()
            .map(|x| if x.is_finite() { x / n } else { *x })
            .collect()
    } else {
        v
    }
}

const MODES: [AddressMode; 4] = [Wrap, Clamp, Mirror, Border];

// ---- tests -------------------------------------------------------------------

#[test]
fn fetch1d_reads_linear_memory_by_index() {
    let m = kernel("textures");
    let mut r = Rng(11);
    let n = 10usize;
    let vals: Vec<[f32; 4]> = (0..n)
        .map(|_| [r.f32(), r.f32(), r.f32(), r.f32()])
        .collect();
    let idx: Vec<i32> = vec![-3, -1, 0, 1, 5, 9, 10, 100, i32::MIN, i32::MAX, 7];
    let want = |i: i32| -> [f32; 4] {
        if (0..n as i32).contains(&i) {
            vals[i as usize]
        } else {
            [0.0; 4]
        }
    };
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Linear,
        ChannelFormat::F32,
        4,
        [n as u64, 1, 1],
        0,
        |i| f32_bytes(&vals[i]),
    );
    // The sampler does not apply to integer coordinates.
    let t = Texture {
        image: img,
        sampler: sampler(true, true, [Wrap; 3]),
    };
    let h = mem.add_texture(t);
    let pi = mem.alloc_i32(&idx);
    let out = mem.alloc_f32(&vec![f32::NAN; idx.len() * 4]);
    run(
        &m,
        "fetch1d",
        idx.len(),
        Params::new().u64(h).ptr(pi).ptr(out).i32(idx.len() as i32),
        &mut mem,
    );
    let got = mem.f32s(out);
    for (k, &i) in idx.iter().enumerate() {
        same(&got[4 * k..4 * k + 4], &want(i), &format!("index {i}"));
    }
}

#[test]
fn fetch1d_normalizes_and_extends_integers() {
    let m = kernel("textures");
    let idx: Vec<i32> = vec![0, 1, 2, 3, 4, -1, 5];
    let bytes: Vec<[u8; 2]> = vec![[0, 0], [255, 128], [1, 127], [200, 129], [77, 255]];
    // Two unsigned 8-bit channels read as normalized floats: (r, g, 0, 1).
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Linear,
        ChannelFormat::U8,
        2,
        [5, 1, 1],
        0,
        |i| bytes[i].to_vec(),
    );
    let s = sampler(false, false, [Clamp; 3]);
    let h = mem.add_texture(Texture {
        image: img,
        sampler: s,
    });
    let pi = mem.alloc_i32(&idx);
    let out = mem.alloc_f32(&vec![f32::NAN; idx.len() * 4]);
    run(
        &m,
        "fetch1d",
        idx.len(),
        Params::new().u64(h).ptr(pi).ptr(out).i32(idx.len() as i32),
        &mut mem,
    );
    let got = mem.f32s(out);
    for (k, &i) in idx.iter().enumerate() {
        let want = match bytes.get(i as usize).filter(|_| i >= 0) {
            Some(b) => [f32::from(b[0]) / 255.0, f32::from(b[1]) / 255.0, 0.0, 1.0],
            None => [0.0; 4],
        };
        same(&got[4 * k..4 * k + 4], &want, &format!("u8x2 index {i}"));
    }

    // Signed 16-bit channels read as integers (int4 destination): sign
    // extended, missing channels 0 and alpha 1.
    let vals: Vec<i16> = vec![-32768, -1, 0, 1, 32767];
    let img = upload(
        &mut mem,
        Shape::Linear,
        ChannelFormat::S16,
        1,
        [5, 1, 1],
        0,
        |i| vals[i].to_le_bytes().to_vec(),
    );
    let h = mem.add_texture(Texture {
        image: img,
        sampler: s,
    });
    let out = mem.alloc_i32(&vec![99; idx.len() * 4]);
    run(
        &m,
        "fetch1d_int",
        idx.len(),
        Params::new().u64(h).ptr(pi).ptr(out).i32(idx.len() as i32),
        &mut mem,
    );
    let got = mem.i32s(out);
    for (k, &i) in idx.iter().enumerate() {
        let want = match vals.get(i as usize).filter(|_| i >= 0) {
            Some(&v) => [i32::from(v), 0, 0, 1],
            None => [0; 4],
        };
        assert_eq!(got[4 * k..4 * k + 4], want, "s16 index {i}");
    }

    // Signed 16-bit channels read as normalized floats: v / 32767, -32768
    // clamped to -1.
    let h = mem.add_texture(Texture {
        image: img,
        sampler: s,
    });
    let out = mem.alloc_f32(&vec![f32::NAN; idx.len() * 4]);
    run(
        &m,
        "fetch1d",
        idx.len(),
        Params::new().u64(h).ptr(pi).ptr(out).i32(idx.len() as i32),
        &mut mem,
    );
    let got = mem.f32s(out);
    for (k, &i) in idx.iter().enumerate() {
        let want = match vals.get(i as usize).filter(|_| i >= 0) {
            Some(&v) => [(f32::from(v) / 32767.0).max(-1.0), 0.0, 0.0, 1.0],
            None => [0.0; 4],
        };
        same(&got[4 * k..4 * k + 4], &want, &format!("snorm16 index {i}"));
    }
}

#[test]
fn linear_filtering_matches_the_guides_examples() {
    let m = kernel("textures");
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Array1D,
        ChannelFormat::F32,
        1,
        [3, 1, 1],
        0,
        |i| f32_bytes(&[[4.0, 5.0, 6.0][i]]),
    );
    let tex = Texture {
        image: img,
        sampler: sampler(false, true, [Clamp; 3]),
    };
    // x_B = x - 0.5: tex(0.75) = 0.75 T[0] + 0.25 T[1]; tex(1.0) halfway;
    // tex(1.5) = T[1]; below 0.5 and above 2.5 the edge texels.
    let xs = [
        0.75,
        1.0,
        1.5,
        0.2,
        2.9,
        1.0 + 1.0 / 512.0,
        1.0 + 1.0 / 1024.0,
    ];
    let got = lookups(&mut mem, &m, "sample1d", tex, &xs, xs.len(), 4);
    let r: Vec<f32> = got.chunks(4).map(|c| c[0]).collect();
    // α has 8 fractional bits: 0.5 + 1/512 rounds to even (0.5), 0.5 +
    // 1/1024 to 0.5 as well; a step of 1/256 shows.
    assert_eq!(r, [4.25, 4.5, 5.0, 4.0, 6.0, 4.5, 4.5]);
    let got = lookups(&mut mem, &m, "sample1d", tex, &[1.0 + 1.0 / 256.0], 1, 4);
    assert_eq!(got[0], 4.5 + 1.0 / 256.0);
    assert_eq!(got[1..], [0.0, 0.0, 1.0]);

    // The gather example: x = 2.49805 takes texels 2 and 3 in x.
    let img = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::F32,
        1,
        [5, 2, 1],
        0,
        |i| f32_bytes(&[i as f32]),
    );
    let tex = Texture {
        image: img,
        sampler: sampler(false, false, [Clamp; 3]),
    };
    let got = lookups(&mut mem, &m, "gather2d", tex, &[2.49805, 1.0], 1, 16);
    // Counter-clockwise from the lower left: (2, 1), (3, 1), (3, 0), (2, 0).
    assert_eq!(got[..4], [7.0, 8.0, 3.0, 2.0]);
    // Missing components read as 0, alpha as 1.
    assert_eq!(
        got[4..],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    );
}

#[test]
fn tex1d_every_address_mode_and_filter() {
    let m = kernel("textures");
    let n = 8usize;
    let mut r = Rng(12);
    let vals: Vec<f32> = (0..n).map(|_| r.f32()).collect();
    let host = Host {
        size: [n as i64, 1, 1],
        texels: vals.iter().map(|&v| [v, 0.0, 0.0, 1.0]).collect(),
    };
    for normalized in [false, true] {
        for linear in [false, true] {
            for mode in MODES {
                let mut mem = VecMemory::default();
                let img = upload(
                    &mut mem,
                    Shape::Array1D,
                    ChannelFormat::F32,
                    1,
                    [n as u64, 1, 1],
                    0,
                    |i| f32_bytes(&[vals[i]]),
                );
                let s = sampler(normalized, linear, [mode, Clamp, Clamp]);
                let xs = probe_coords(n as f32, normalized);
                let got = lookups(
                    &mut mem,
                    &m,
                    "sample1d",
                    Texture {
                        image: img,
                        sampler: s,
                    },
                    &xs,
                    xs.len(),
                    4,
                );
                for (k, &x) in xs.iter().enumerate() {
                    let want = ref_sample(&host, &s, &[x], 0);
                    same(
                        &got[4 * k..4 * k + 4],
                        &want,
                        &format!("x {x} normalized {normalized} linear {linear} {mode:?}"),
                    );
                }
            }
        }
    }
}

#[test]
fn tex2d_float4_per_dimension_modes() {
    let m = kernel("textures");
    let (w, h) = (5usize, 4usize);
    let mut r = Rng(13);
    let vals: Vec<[f32; 4]> = (0..w * h)
        .map(|_| [r.f32(), r.f32(), r.f32(), r.f32()])
        .collect();
    let host = Host {
        size: [w as i64, h as i64, 1],
        texels: vals.clone(),
    };
    let xs = probe_coords(w as f32, false);
    let ys = probe_coords(h as f32, false);
    for normalized in [false, true] {
        for linear in [false, true] {
            for (mx, my) in [
                (Wrap, Mirror),
                (Mirror, Border),
                (Clamp, Wrap),
                (Border, Clamp),
            ] {
                let s = sampler(normalized, linear, [mx, my, Clamp]);
                let scale = |v: f32, n: usize| {
                    if normalized && v.is_finite() {
                        v / n as f32
                    } else {
                        v
                    }
                };
                let mut coords = Vec::new();
                for (k, &x) in xs.iter().enumerate() {
                    for &y in ys.iter().skip(k % 5).step_by(5) {
                        coords.push(scale(x, w));
                        coords.push(scale(y, h));
                    }
                }
                let npts = coords.len() / 2;
                let mut mem = VecMemory::default();
                let img = upload(
                    &mut mem,
                    Shape::Array2D,
                    ChannelFormat::F32,
                    4,
                    [w as u64, h as u64, 1],
                    0,
                    |i| f32_bytes(&vals[i]),
                );
                let got = lookups(
                    &mut mem,
                    &m,
                    "sample2d",
                    Texture {
                        image: img,
                        sampler: s,
                    },
                    &coords,
                    npts,
                    4,
                );
                for k in 0..npts {
                    let c = [coords[2 * k], coords[2 * k + 1]];
                    let want = ref_sample(&host, &s, &c, 0);
                    same(
                        &got[4 * k..4 * k + 4],
                        &want,
                        &format!("{c:?} normalized {normalized} linear {linear} {mx:?}/{my:?}"),
                    );
                }
            }
        }
    }
}

/// 2D points over a `w × h` texture, in texels, with some outside.
fn points2d(w: usize, h: usize, seed: u64, normalized: bool) -> Vec<f32> {
    let mut r = Rng(seed);
    let mut v = Vec::new();
    for _ in 0..150 {
        let x = (r.next() % 4000) as f32 / 4000.0 * (w as f32 + 2.0) - 1.0;
        let y = (r.next() % 4000) as f32 / 4000.0 * (h as f32 + 2.0) - 1.0;
        if normalized {
            v.extend([x / w as f32, y / h as f32]);
        } else {
            v.extend([x, y]);
        }
    }
    v
}

#[test]
fn tex2d_uchar4_reads_normalized_srgb_and_raw() {
    let m = kernel("textures");
    let (w, h) = (6usize, 3usize);
    let mut r = Rng(14);
    let texels: Vec<[u8; 4]> = (0..w * h)
        .map(|_| [0; 4].map(|_: u8| (r.next() % 256) as u8))
        .collect();
    let coords = points2d(w, h, 15, true);
    let npts = coords.len() / 2;
    let srgb = |c: f32| -> f32 {
        let c = f64::from(c);
        (if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }) as f32
    };
    for (linear, srgb_on) in [(false, false), (true, false), (true, true)] {
        let mut mem = VecMemory::default();
        let img = upload(
            &mut mem,
            Shape::Array2D,
            ChannelFormat::U8,
            4,
            [w as u64, h as u64, 1],
            3,
            |i| texels[i].to_vec(),
        );
        let mut s = sampler(true, linear, [Wrap, Mirror, Clamp]);
        s.srgb = srgb_on;
        let host = Host {
            size: [w as i64, h as i64, 1],
            texels: texels
                .iter()
                .map(|t| {
                    let f = t.map(|v| f32::from(v) / 255.0);
                    if srgb_on {
                        [srgb(f[0]), srgb(f[1]), srgb(f[2]), f[3]]
                    } else {
                        f
                    }
                })
                .collect(),
        };
        let got = lookups(
            &mut mem,
            &m,
            "sample2d",
            Texture {
                image: img,
                sampler: s,
            },
            &coords,
            npts,
            4,
        );
        for k in 0..npts {
            let c = [coords[2 * k], coords[2 * k + 1]];
            same(
                &got[4 * k..4 * k + 4],
                &ref_sample(&host, &s, &c, 0),
                &format!("{c:?} linear {linear} srgb {srgb_on}"),
            );
        }
    }

    // Element-type reads (uint4): the raw bytes, point-sampled even where
    // the sampler asks for linear filtering.
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::U8,
        4,
        [w as u64, h as u64, 1],
        0,
        |i| texels[i].to_vec(),
    );
    let mut s = sampler(true, true, [Wrap, Clamp, Clamp]);
    s.read_normalized = false;
    let got = lookups(
        &mut mem,
        &m,
        "sample2d_uint",
        Texture {
            image: img,
            sampler: s,
        },
        &coords,
        npts,
        4,
    );
    let point = Sampler { linear: false, ..s };
    let host = Host {
        size: [w as i64, h as i64, 1],
        texels: texels.iter().map(|t| t.map(f32::from)).collect(),
    };
    for k in 0..npts {
        let c = [coords[2 * k], coords[2 * k + 1]];
        let want = ref_sample(&host, &point, &c, 0).map(|v| v as u32);
        let g: Vec<u32> = got[4 * k..4 * k + 4].iter().map(|v| v.to_bits()).collect();
        assert_eq!(g, want, "uint {c:?}");
    }
}

#[test]
fn tex2d_signed_char_as_int4_and_ushort_as_float() {
    let m = kernel("textures");
    let (w, h) = (4usize, 4usize);
    let mut r = Rng(16);
    let texels: Vec<[i8; 2]> = (0..w * h)
        .map(|_| [(r.next() % 256) as u8 as i8, (r.next() % 256) as u8 as i8])
        .collect();
    let coords = points2d(w, h, 17, false);
    let npts = coords.len() / 2;
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::S8,
        2,
        [w as u64, h as u64, 1],
        0,
        |i| texels[i].iter().map(|&v| v as u8).collect(),
    );
    // An int4 destination reads integers whatever the read mode.
    let s = sampler(false, false, [Border, Clamp, Clamp]);
    let got = lookups(
        &mut mem,
        &m,
        "sample2d_int",
        Texture {
            image: img,
            sampler: s,
        },
        &coords,
        npts,
        4,
    );
    let host = Host {
        size: [w as i64, h as i64, 1],
        texels: texels
            .iter()
            .map(|t| [f32::from(t[0]), f32::from(t[1]), 0.0, 1.0])
            .collect(),
    };
    for k in 0..npts {
        let c = [coords[2 * k], coords[2 * k + 1]];
        let want = ref_sample(&host, &s, &c, 0).map(|v| v as i32);
        let g: Vec<i32> = got[4 * k..4 * k + 4]
            .iter()
            .map(|v| v.to_bits() as i32)
            .collect();
        assert_eq!(g, want, "int {c:?}");
    }

    // One unsigned 16-bit channel read as a normalized float (the scalar
    // tex2D<float>), bilinear, with padded rows.
    let vals: Vec<u16> = (0..w * h).map(|_| (r.next() % 65536) as u16).collect();
    let img = upload(
        &mut mem,
        Shape::Pitch2D,
        ChannelFormat::U16,
        1,
        [w as u64, h as u64, 1],
        6,
        |i| vals[i].to_le_bytes().to_vec(),
    );
    let s = sampler(false, true, [Clamp, Border, Clamp]);
    let got = lookups(
        &mut mem,
        &m,
        "sample2d_scalar",
        Texture {
            image: img,
            sampler: s,
        },
        &coords,
        npts,
        1,
    );
    let host = Host {
        size: [w as i64, h as i64, 1],
        texels: vals
            .iter()
            .map(|&v| [f32::from(v) / 65535.0, 0.0, 0.0, 1.0])
            .collect(),
    };
    for k in 0..npts {
        let c = [coords[2 * k], coords[2 * k + 1]];
        same(
            &got[k..k + 1],
            &ref_sample(&host, &s, &c, 0)[..1],
            &format!("unorm16 {c:?}"),
        );
    }
}

#[test]
fn tex2d_half_pitch2d_lod_grad_and_residency() {
    let m = kernel("textures");
    let (w, h) = (7usize, 5usize);
    // Half-precision values exactly representable.
    let vals: Vec<[f32; 2]> = (0..w * h)
        .map(|i| [i as f32 * 0.25 - 3.0, (i * 7 % 11) as f32 * -0.5])
        .collect();
    let half = |v: f32| -> [u8; 2] {
        // Small multiples of 1/4 only: sign, exponent, 10-bit mantissa.
        if v == 0.0 {
            return [0, 0];
        }
        let bits = v.to_bits();
        let sign = (bits >> 16) & 0x8000;
        let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
        let mant = (bits >> 13) & 0x3ff;
        ((sign | ((exp as u32) << 10) | mant) as u16).to_le_bytes()
    };
    let coords = points2d(w, h, 18, true);
    let npts = coords.len() / 2;
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Pitch2D,
        ChannelFormat::F16,
        2,
        [w as u64, h as u64, 1],
        4,
        |i| [half(vals[i][0]), half(vals[i][1])].concat(),
    );
    let s = sampler(true, true, [Mirror, Wrap, Clamp]);
    let tex = Texture {
        image: img,
        sampler: s,
    };
    let host = Host {
        size: [w as i64, h as i64, 1],
        texels: vals.iter().map(|v| [v[0], v[1], 0.0, 1.0]).collect(),
    };
    let got = lookups(&mut mem, &m, "sample2d", tex, &coords, npts, 4);
    // tex2DLod and tex2DGrad read level 0 of a texture without mipmaps.
    let lod = lookups(&mut mem, &m, "sample2d_lod_grad", tex, &coords, npts, 8);
    for k in 0..npts {
        let c = [coords[2 * k], coords[2 * k + 1]];
        let want = ref_sample(&host, &s, &c, 0);
        same(&got[4 * k..4 * k + 4], &want, &format!("f16 {c:?}"));
        same(&lod[8 * k..8 * k + 4], &want, &format!("lod {c:?}"));
        same(&lod[8 * k + 4..8 * k + 8], &want, &format!("grad {c:?}"));
    }
    // The residency flag of sparse textures: every texel is resident.
    let th = mem.add_texture(tex);
    let pc = mem.alloc_f32(&coords);
    let out = mem.alloc_f32(&vec![f32::NAN; npts * 4]);
    let res = mem.alloc_i32(&vec![7; npts]);
    run(
        &m,
        "sample2d_resident",
        npts,
        Params::new()
            .u64(th)
            .ptr(pc)
            .ptr(out)
            .ptr(res)
            .i32(npts as i32),
        &mut mem,
    );
    assert_eq!(mem.f32s(out), got);
    assert!(mem.i32s(res).iter().all(|&v| v == 1));
}

#[test]
fn tex3d_trilinear_and_point() {
    let m = kernel("textures");
    let size = [4usize, 3, 5];
    let n = size.iter().product::<usize>();
    let mut r = Rng(19);
    let vals: Vec<f32> = (0..n).map(|_| r.f32()).collect();
    let host = Host {
        size: size.map(|v| v as i64),
        texels: vals.iter().map(|&v| [v, 0.0, 0.0, 1.0]).collect(),
    };
    let mut coords = Vec::new();
    for _ in 0..200 {
        for d in 0..3 {
            let v = (r.next() % 5000) as f32 / 5000.0 * (size[d] as f32 + 3.0) - 1.5;
            coords.push(v);
        }
        coords.push(0.0);
    }
    let npts = coords.len() / 4;
    for normalized in [false, true] {
        for linear in [false, true] {
            let s = sampler(normalized, linear, [Wrap, Border, Mirror]);
            let cs: Vec<f32> = coords
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let d = i % 4;
                    if normalized && d < 3 {
                        v / size[d] as f32
                    } else {
                        v
                    }
                })
                .collect();
            let mut mem = VecMemory::default();
            let img = upload(
                &mut mem,
                Shape::Array3D,
                ChannelFormat::F32,
                1,
                size.map(|v| v as u64),
                0,
                |i| f32_bytes(&[vals[i]]),
            );
            let got = lookups(
                &mut mem,
                &m,
                "sample3d",
                Texture {
                    image: img,
                    sampler: s,
                },
                &cs,
                npts,
                4,
            );
            for k in 0..npts {
                let c = &cs[4 * k..4 * k + 3];
                same(
                    &got[4 * k..4 * k + 4],
                    &ref_sample(&host, &s, c, 0),
                    &format!("{c:?} normalized {normalized} linear {linear}"),
                );
            }
        }
    }
}

#[test]
fn layered_textures_filter_within_a_clamped_layer() {
    let m = kernel("textures");
    let (w, h, layers) = (5usize, 3usize, 4usize);
    let mut r = Rng(20);
    let vals: Vec<[f32; 4]> = (0..w * h * layers)
        .map(|_| [r.f32(), r.f32(), r.f32(), r.f32()])
        .collect();
    let layer_ids: Vec<i32> = (0..150).map(|k| [0, 1, 3, 2, -1, 7][k % 6]).collect();
    let clamp_layer = |l: i32| (l as u32).min(layers as u32 - 1) as i64;
    for linear in [false, true] {
        // 1D layered: layer z of `w` texels.
        let mut mem = VecMemory::default();
        let img = upload(
            &mut mem,
            Shape::Layered1D,
            ChannelFormat::F32,
            4,
            [w as u64, 1, layers as u64],
            0,
            |i| f32_bytes(&vals[i]),
        );
        let s = sampler(false, linear, [Clamp; 3]);
        let host = Host {
            size: [w as i64, 1, layers as i64],
            texels: vals[..w * layers].to_vec(),
        };
        let xs: Vec<f32> = (0..layer_ids.len())
            .map(|k| k as f32 * 0.113 - 1.0)
            .collect();
        let th = mem.add_texture(Texture {
            image: img,
            sampler: s,
        });
        let (px, pl) = (mem.alloc_f32(&xs), mem.alloc_i32(&layer_ids));
        let out = mem.alloc_f32(&vec![f32::NAN; xs.len() * 4]);
        run(
            &m,
            "sample1d_layered",
            xs.len(),
            Params::new()
                .u64(th)
                .ptr(px)
                .ptr(pl)
                .ptr(out)
                .i32(xs.len() as i32),
            &mut mem,
        );
        let got = mem.f32s(out);
        for k in 0..xs.len() {
            let l = clamp_layer(layer_ids[k]);
            same(
                &got[4 * k..4 * k + 4],
                &ref_sample(&host, &s, &[xs[k]], l),
                &format!("1d layer {} x {} linear {linear}", layer_ids[k], xs[k]),
            );
        }

        // 2D layered, normalized, wrapping in x.
        let img = upload(
            &mut mem,
            Shape::Layered2D,
            ChannelFormat::F32,
            4,
            [w as u64, h as u64, layers as u64],
            0,
            |i| f32_bytes(&vals[i]),
        );
        let s = sampler(true, linear, [Wrap, Clamp, Clamp]);
        let host = Host {
            size: [w as i64, h as i64, layers as i64],
            texels: vals.clone(),
        };
        let ps = points2d(w, h, 21, true);
        let np = ps.len() / 2;
        let th = mem.add_texture(Texture {
            image: img,
            sampler: s,
        });
        let (pp, pl) = (mem.alloc_f32(&ps), mem.alloc_i32(&layer_ids[..np]));
        let out = mem.alloc_f32(&vec![f32::NAN; np * 4]);
        run(
            &m,
            "sample2d_layered",
            np,
            Params::new()
                .u64(th)
                .ptr(pp)
                .ptr(pl)
                .ptr(out)
                .i32(np as i32),
            &mut mem,
        );
        let got = mem.f32s(out);
        for k in 0..np {
            let c = [ps[2 * k], ps[2 * k + 1]];
            let l = clamp_layer(layer_ids[k]);
            same(
                &got[4 * k..4 * k + 4],
                &ref_sample(&host, &s, &c, l),
                &format!("2d layer {} {c:?} linear {linear}", layer_ids[k]),
            );
        }
    }
}

/// Directions toward every face, edges and corners.
fn directions() -> Vec<f32> {
    let mut r = Rng(22);
    let mut v = vec![
        1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0,
        1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 1.0, 1.0, 1.0, 0.0, -2.0, 0.5, -0.5, 0.0, 0.3, -0.9, 0.2,
        0.0, 0.1, 0.2, -0.95, 0.0, 0.0, 0.0, 0.0, 0.0,
    ];
    for _ in 0..150 {
        for _ in 0..3 {
            v.push((r.next() % 2001) as f32 / 1000.0 - 1.0);
        }
        v.push(0.0);
    }
    v
}

#[test]
fn cubemaps_select_faces_and_clamp_within_them() {
    let m = kernel("textures");
    let w = 4usize;
    let cubes = 3usize;
    let mut r = Rng(23);
    let vals: Vec<f32> = (0..w * w * 6 * cubes).map(|_| r.f32()).collect();
    let host = Host {
        size: [w as i64, w as i64, (6 * cubes) as i64],
        texels: vals.iter().map(|&v| [v, 0.0, 0.0, 1.0]).collect(),
    };
    let dirs = directions();
    let nd = dirs.len() / 4;
    let layer_ids: Vec<i32> = (0..nd).map(|k| [0, 2, 1, 5, -3][k % 5]).collect();
    for linear in [false, true] {
        // The sampler's normalized flag and address modes do not apply to
        // cubemap faces.
        let s = sampler(false, linear, [Wrap, Border, Wrap]);
        let face_sampler = sampler(true, linear, [Clamp; 3]);
        let want = |k: usize, base: i64| {
            let (x, y, z) = (dirs[4 * k], dirs[4 * k + 1], dirs[4 * k + 2]);
            let (face, u, v) = ref_cube(x, y, z);
            let (u, v) = if u.is_nan() { (0.5, 0.5) } else { (u, v) };
            ref_sample(&host, &face_sampler, &[u, v], base + face)
        };
        let mut mem = VecMemory::default();
        let img = upload(
            &mut mem,
            Shape::Cubemap,
            ChannelFormat::F32,
            1,
            [w as u64, w as u64, 6],
            0,
            |i| f32_bytes(&[vals[i]]),
        );
        let got = lookups(
            &mut mem,
            &m,
            "sample_cube",
            Texture {
                image: img,
                sampler: s,
            },
            &dirs,
            nd,
            4,
        );
        for k in 0..nd {
            same(
                &got[4 * k..4 * k + 4],
                &want(k, 0),
                &format!("cube {:?} linear {linear}", &dirs[4 * k..4 * k + 3]),
            );
        }

        let img = upload(
            &mut mem,
            Shape::LayeredCubemap,
            ChannelFormat::F32,
            1,
            [w as u64, w as u64, (6 * cubes) as u64],
            0,
            |i| f32_bytes(&[vals[i]]),
        );
        let th = mem.add_texture(Texture {
            image: img,
            sampler: s,
        });
        let (pd, pl) = (mem.alloc_f32(&dirs), mem.alloc_i32(&layer_ids));
        let out = mem.alloc_f32(&vec![f32::NAN; nd * 4]);
        run(
            &m,
            "sample_cube_layered",
            nd,
            Params::new()
                .u64(th)
                .ptr(pd)
                .ptr(pl)
                .ptr(out)
                .i32(nd as i32),
            &mut mem,
        );
        let got = mem.f32s(out);
        for k in 0..nd {
            let l = (layer_ids[k] as u32).min(cubes as u32 - 1) as i64;
            same(
                &got[4 * k..4 * k + 4],
                &want(k, 6 * l),
                &format!("cube layer {} linear {linear}", layer_ids[k]),
            );
        }
    }
}

#[test]
fn gather_returns_the_bilinear_footprint_counter_clockwise() {
    let m = kernel("textures");
    let (w, h) = (5usize, 4usize);
    let mut r = Rng(24);
    let texels: Vec<[u8; 4]> = (0..w * h)
        .map(|_| [0; 4].map(|_: u8| (r.next() % 256) as u8))
        .collect();
    let coords = points2d(w, h, 25, false);
    let npts = coords.len() / 2;
    // The four texels around x - 0.5, y - 0.5 (8 fractional bits), in the
    // order (i, j+1), (i+1, j+1), (i+1, j), (i, j); `comp` of each.
    let footprint = |c: [f32; 2], mode: [AddressMode; 2], comp: usize| -> [Option<u8>; 4] {
        let split =
            |v: f32| (((f64::from(v) - 0.5) * 256.0).round_ties_even() as i64).div_euclid(256);
        let (i, j) = (split(c[0]), split(c[1]));
        [(i, j + 1), (i + 1, j + 1), (i + 1, j), (i, j)].map(|(x, y)| {
            let x = ref_address(x, w as i64, mode[0])?;
            let y = ref_address(y, h as i64, mode[1])?;
            Some(texels[y as usize * w + x as usize][comp])
        })
    };
    // Normalized reads (float4), with the border color outside.
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::U8,
        4,
        [w as u64, h as u64, 1],
        0,
        |i| texels[i].to_vec(),
    );
    let s = sampler(false, false, [Clamp, Border, Clamp]);
    let got = lookups(
        &mut mem,
        &m,
        "gather2d",
        Texture {
            image: img,
            sampler: s,
        },
        &coords,
        npts,
        16,
    );
    for k in 0..npts {
        let c = [coords[2 * k], coords[2 * k + 1]];
        for comp in 0..4 {
            let want = footprint(c, [Clamp, Border], comp).map(|v| match v {
                Some(b) => f32::from(b) / 255.0,
                None => s.border[comp],
            });
            same(
                &got[16 * k + 4 * comp..16 * k + 4 * comp + 4],
                &want,
                &format!("gather {c:?} comp {comp}"),
            );
        }
    }
    // Element-type reads (uint4) of alpha.
    let mut s = sampler(false, false, [Wrap, Clamp, Clamp]);
    s.read_normalized = false;
    let got = lookups(
        &mut mem,
        &m,
        "gather2d_uint",
        Texture {
            image: img,
            sampler: s,
        },
        &coords,
        npts,
        4,
    );
    for k in 0..npts {
        let c = [coords[2 * k], coords[2 * k + 1]];
        // Unnormalized coordinates: wrap acts as clamp.
        let want = footprint(c, [Clamp, Clamp], 3).map(|v| u32::from(v.unwrap()));
        let g: Vec<u32> = got[4 * k..4 * k + 4].iter().map(|v| v.to_bits()).collect();
        assert_eq!(g, want, "gather uint {c:?}");
    }
}

#[test]
fn txq_and_suq_report_the_objects() {
    let m = kernel("textures");
    let mut mem = VecMemory::default();
    let query = |mem: &mut VecMemory, t: Texture, s: Image| -> Vec<i32> {
        let th = mem.add_texture(t);
        let sh = mem.add_surface(s);
        let out = mem.alloc_i32(&[-1; 20]);
        run(
            &m,
            "queries",
            1,
            Params::new().u64(th).u64(sh).ptr(out),
            mem,
        );
        mem.i32s(out)
    };
    let layered = upload(
        &mut mem,
        Shape::Layered2D,
        ChannelFormat::U8,
        4,
        [6, 5, 3],
        0,
        |_| vec![0; 4],
    );
    let mut s = sampler(true, true, [Wrap, Mirror, Border]);
    let surf = upload(
        &mut mem,
        Shape::Array3D,
        ChannelFormat::F32,
        2,
        [4, 3, 2],
        0,
        |_| vec![0; 8],
    );
    let got = query(
        &mut mem,
        Texture {
            image: layered,
            sampler: s,
        },
        surf,
    );
    #[rustfmt::skip]
    let want = [
        6, 5, 1, 0x10D2, 0x10B5, 1, 1, 0, 1, 4, 3, 0, 0,
        4, 3, 2, 0x10DE, 0x10B2, 0, 0,
    ];
    assert_eq!(got, want);

    s.read_normalized = false;
    s.normalized_coords = false;
    s.linear = false;
    s.address = [Clamp, Border, Clamp];
    let linear = upload(
        &mut mem,
        Shape::Linear,
        ChannelFormat::S16,
        1,
        [9, 1, 1],
        0,
        |_| vec![0; 2],
    );
    let cubes = upload(
        &mut mem,
        Shape::LayeredCubemap,
        ChannelFormat::S32,
        1,
        [2, 2, 12],
        0,
        |_| vec![0; 4],
    );
    let got = query(
        &mut mem,
        Texture {
            image: cubes,
            sampler: s,
        },
        linear,
    );
    #[rustfmt::skip]
    let want = [
        2, 2, 1, 0x10D9, 0x10B0, 0, 0, 3, 4, 3, 2, 0, 0,
        9, 1, 1, 0x10D8, 0x10B0, 0, 1,
    ];
    assert_eq!(got, want);
}

// ---- surfaces ------------------------------------------------------------------

fn launch_grid(
    m: &Module,
    name: &str,
    grid: [u32; 3],
    block: u32,
    p: Params,
    mem: &mut VecMemory,
) -> Result<(), Error> {
    let mut g = m.globals();
    launch(m, &mut g, name, dims(grid, [block, 1, 1], 0), p, mem).map(|_| ())
}

#[test]
fn surfaces_2d_float_and_uchar4_round_trip() {
    let m = kernel("textures");
    let (w, h) = (37usize, 5usize);
    let mut r = Rng(30);
    let vals: Vec<f32> = (0..w * h).map(|_| r.f32()).collect();
    let mut mem = VecMemory::default();
    let src = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::F32,
        1,
        [w as u64, h as u64, 1],
        12,
        |i| f32_bytes(&[vals[i]]),
    );
    let dst = upload(
        &mut mem,
        Shape::Pitch2D,
        ChannelFormat::F32,
        1,
        [w as u64, h as u64, 1],
        4,
        |_| vec![0; 4],
    );
    let (hs, hd) = (mem.add_surface(src), mem.add_surface(dst));
    launch_grid(
        &m,
        "surf2d_float",
        [2, h as u32, 1],
        32,
        Params::new().u64(hs).u64(hd).i32(w as i32).i32(h as i32),
        &mut mem,
    )
    .unwrap();
    let bytes = mem.bytes(dst.base);
    for y in 0..h {
        for x in 0..w {
            let at = y * dst.row_pitch as usize + 4 * x;
            let got = f32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
            assert_eq!(got, 2.0 * vals[y * w + x] + 1.0, "({x}, {y})");
        }
        // The padding is untouched.
        let pad = y * dst.row_pitch as usize + 4 * w;
        assert_eq!(bytes[pad..pad + 4], [0xEE; 4]);
    }

    let texels: Vec<[u8; 4]> = (0..w * h)
        .map(|_| [0; 4].map(|_: u8| (r.next() % 256) as u8))
        .collect();
    let img = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::U8,
        4,
        [w as u64, h as u64, 1],
        0,
        |i| texels[i].to_vec(),
    );
    let hs = mem.add_surface(img);
    launch_grid(
        &m,
        "surf2d_uchar4",
        [2, h as u32, 1],
        32,
        Params::new().u64(hs).i32(w as i32).i32(h as i32),
        &mut mem,
    )
    .unwrap();
    let bytes = mem.bytes(img.base);
    for i in 0..w * h {
        let mut t = texels[i];
        t.reverse();
        assert_eq!(bytes[4 * i..4 * i + 4], t, "texel {i}");
    }
}

#[test]
fn surfaces_1d_3d_layered_cube_and_64_bit() {
    let m = kernel("textures");
    let mut r = Rng(31);
    let mut mem = VecMemory::default();

    // 1D int: v * 3 + x.
    let w = 50usize;
    let vals: Vec<i32> = (0..w).map(|_| r.next() as i32).collect();
    let img = upload(
        &mut mem,
        Shape::Array1D,
        ChannelFormat::S32,
        1,
        [w as u64, 1, 1],
        0,
        |i| vals[i].to_le_bytes().to_vec(),
    );
    let hs = mem.add_surface(img);
    launch_grid(
        &m,
        "surf1d_int",
        [2, 1, 1],
        32,
        Params::new().u64(hs).i32(w as i32),
        &mut mem,
    )
    .unwrap();
    let got = mem.i32s(img.base);
    for x in 0..w {
        assert_eq!(
            got[x],
            vals[x].wrapping_mul(3).wrapping_add(x as i32),
            "1d {x}"
        );
    }

    // 2D long long: v * 5 - (y << 40).
    let (w, h) = (9usize, 3usize);
    let vals: Vec<i64> = (0..w * h).map(|_| r.next() as i64).collect();
    let img = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::U32,
        2,
        [w as u64, h as u64, 1],
        8,
        |i| vals[i].to_le_bytes().to_vec(),
    );
    let hs = mem.add_surface(img);
    launch_grid(
        &m,
        "surf2d_long",
        [1, h as u32, 1],
        32,
        Params::new().u64(hs).i32(w as i32).i32(h as i32),
        &mut mem,
    )
    .unwrap();
    let bytes = mem.bytes(img.base).to_vec();
    for y in 0..h {
        for x in 0..w {
            let at = y * img.row_pitch as usize + 8 * x;
            let got = i64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            let want = vals[y * w + x]
                .wrapping_mul(5)
                .wrapping_sub((y as i64) << 40);
            assert_eq!(got, want, "long ({x}, {y})");
        }
    }

    // 3D float2: (v.y + z, v.x - y).
    let size = [6usize, 4, 3];
    let n = size.iter().product::<usize>();
    let vals: Vec<[f32; 2]> = (0..n).map(|_| [r.f32(), r.f32()]).collect();
    let img = upload(
        &mut mem,
        Shape::Array3D,
        ChannelFormat::F32,
        2,
        size.map(|v| v as u64),
        0,
        |i| f32_bytes(&vals[i]),
    );
    let hs = mem.add_surface(img);
    launch_grid(
        &m,
        "surf3d_float2",
        [1, size[1] as u32, size[2] as u32],
        32,
        Params::new()
            .u64(hs)
            .i32(size[0] as i32)
            .i32(size[1] as i32)
            .i32(size[2] as i32),
        &mut mem,
    )
    .unwrap();
    let got = mem.f32s(img.base);
    for z in 0..size[2] {
        for y in 0..size[1] {
            for x in 0..size[0] {
                let i = (z * size[1] + y) * size[0] + x;
                let want = [vals[i][1] + z as f32, vals[i][0] - y as f32];
                assert_eq!(got[2 * i..2 * i + 2], want, "3d ({x}, {y}, {z})");
            }
        }
    }

    // 1D layered ushort: v ^ (l * 257 + x).
    let (w, layers) = (40usize, 3usize);
    let vals: Vec<u16> = (0..w * layers).map(|_| r.next() as u16).collect();
    let img = upload(
        &mut mem,
        Shape::Layered1D,
        ChannelFormat::U16,
        1,
        [w as u64, 1, layers as u64],
        0,
        |i| vals[i].to_le_bytes().to_vec(),
    );
    let hs = mem.add_surface(img);
    launch_grid(
        &m,
        "surf1d_layered_ushort",
        [2, layers as u32, 1],
        32,
        Params::new().u64(hs).i32(w as i32).i32(layers as i32),
        &mut mem,
    )
    .unwrap();
    let bytes = mem.bytes(img.base);
    for l in 0..layers {
        for x in 0..w {
            let i = l * w + x;
            let got = u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]]);
            assert_eq!(got, vals[i] ^ (l * 257 + x) as u16, "layer {l} x {x}");
        }
    }

    // 2D layered int4: (w, x + l, y - y, z * 2).
    let (w, h, layers) = (3usize, 2usize, 4usize);
    let n = w * h * layers;
    let vals: Vec<[i32; 4]> = (0..n)
        .map(|_| [0; 4].map(|_: i32| r.next() as i32))
        .collect();
    let img = upload(
        &mut mem,
        Shape::Layered2D,
        ChannelFormat::S32,
        4,
        [w as u64, h as u64, layers as u64],
        16,
        |i| vals[i].iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    let hs = mem.add_surface(img);
    launch_grid(
        &m,
        "surf2d_layered_int4",
        [1, h as u32, layers as u32],
        32,
        Params::new()
            .u64(hs)
            .i32(w as i32)
            .i32(h as i32)
            .i32(layers as i32),
        &mut mem,
    )
    .unwrap();
    let bytes = mem.bytes(img.base).to_vec();
    for l in 0..layers {
        for y in 0..h {
            for x in 0..w {
                let v = vals[(l * h + y) * w + x];
                let want = [
                    v[3],
                    v[0].wrapping_add(l as i32),
                    v[1].wrapping_sub(y as i32),
                    v[2].wrapping_mul(2),
                ];
                let at = l * img.slice_pitch as usize + y * img.row_pitch as usize + 16 * x;
                let got: Vec<i32> = bytes[at..at + 16]
                    .chunks(4)
                    .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                assert_eq!(got, want, "layer {l} ({x}, {y})");
            }
        }
    }

    // Cubemap faces: v + 100 * face.
    let w = 3usize;
    let vals: Vec<f32> = (0..w * w * 6).map(|_| r.f32()).collect();
    let img = upload(
        &mut mem,
        Shape::Cubemap,
        ChannelFormat::F32,
        1,
        [w as u64, w as u64, 6],
        0,
        |i| f32_bytes(&[vals[i]]),
    );
    let hs = mem.add_surface(img);
    let mut g = m.globals();
    launch(
        &m,
        &mut g,
        "surf_cube",
        dims([6, 1, 1], [w as u32, w as u32, 1], 0),
        Params::new().u64(hs).i32(w as i32),
        &mut mem,
    )
    .unwrap();
    let got = mem.f32s(img.base);
    for i in 0..w * w * 6 {
        assert_eq!(
            got[i],
            vals[i] + 100.0 * (i / (w * w)) as f32,
            "cube texel {i}"
        );
    }
}

#[test]
fn surface_zero_and_clamp_modes() {
    let m = kernel("textures");
    let (w, h) = (5usize, 3usize);
    let vals: Vec<i32> = (0..(w * h) as i32).map(|i| 1000 + i).collect();
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::S32,
        1,
        [w as u64, h as u64, 1],
        8,
        |i| vals[i].to_le_bytes().to_vec(),
    );
    let hs = mem.add_surface(img);
    // (x in bytes, y).
    let pts: Vec<(i32, i32)> = vec![
        (0, 0),
        (4, 1),
        (16, 2),
        (20, 0),
        (-4, 1),
        (8, -1),
        (8, 3),
        (400, 9),
        (i32::MIN, i32::MAX),
        (-400, -9),
    ];
    let flat: Vec<i32> = pts.iter().flat_map(|&(x, y)| [x, y]).collect();
    let pp = mem.alloc_i32(&flat);
    let out = mem.alloc_i32(&vec![-7; 2 * pts.len()]);
    run(
        &m,
        "surf_modes",
        pts.len(),
        Params::new().u64(hs).ptr(pp).ptr(out).i32(pts.len() as i32),
        &mut mem,
    );
    let got = mem.i32s(out);
    let at = |x: i64, y: i64| vals[(y * w as i64 + x / 4) as usize];
    for (k, &(x, y)) in pts.iter().enumerate() {
        let (x, y) = (i64::from(x), i64::from(y));
        let inside = (0..4 * w as i64).contains(&x) && (0..h as i64).contains(&y);
        let zero = if inside { at(x, y) } else { 0 };
        let clamped = at(x.clamp(0, 4 * (w as i64 - 1)), y.clamp(0, h as i64 - 1));
        assert_eq!(got[2 * k], zero, "zero mode ({x}, {y})");
        assert_eq!(got[2 * k + 1], clamped, "clamp mode ({x}, {y})");
    }

    // Stores: zero mode drops those out of range; clamp mode moves them to
    // the nearest element (the points chosen so that no two meet).
    let stores: Vec<(i32, i32)> = vec![(4, 1), (-8, 0), (100, 2), (12, -5), (8, 1), (0, 77)];
    let flat: Vec<i32> = stores.iter().flat_map(|&(x, y)| [x, y]).collect();
    let pp = mem.alloc_i32(&flat);
    for clamp in [0, 1] {
        let img = upload(
            &mut mem,
            Shape::Array2D,
            ChannelFormat::S32,
            1,
            [w as u64, h as u64, 1],
            0,
            |_| vec![0; 4],
        );
        let hs = mem.add_surface(img);
        run(
            &m,
            "surf_store_modes",
            stores.len(),
            Params::new()
                .u64(hs)
                .ptr(pp)
                .i32(stores.len() as i32)
                .i32(clamp),
            &mut mem,
        );
        let mut want = vec![0; w * h];
        for (k, &(x, y)) in stores.iter().enumerate() {
            let (x, y) = (i64::from(x), i64::from(y));
            let inside = (0..4 * w as i64).contains(&x) && (0..h as i64).contains(&y);
            if inside || clamp == 1 {
                let (x, y) = (x.clamp(0, 4 * (w as i64 - 1)), y.clamp(0, h as i64 - 1));
                want[(y * w as i64 + x / 4) as usize] = k as i32 + 1;
            }
        }
        assert_eq!(mem.i32s(img.base), want, "clamp {clamp}");
    }
}

#[test]
fn surface_trap_mode_and_misaligned_x_fail_the_launch() {
    let m = kernel("textures");
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::F32,
        1,
        [4, 2, 1],
        0,
        |_| vec![0; 4],
    );
    let hs = mem.add_surface(img);
    let out = mem.alloc_i32(&[5]);
    let trap = |mem: &mut VecMemory, x: i32, y: i32| {
        try_run(
            &m,
            "surf_trap",
            1,
            Params::new().u64(hs).i32(x).i32(y).ptr(out),
            mem,
        )
    };
    trap(&mut mem, 12, 1).unwrap();
    for (x, y) in [(16, 0), (-4, 0), (0, 2), (0, -1), (i32::MIN, 0)] {
        match trap(&mut mem, x, y) {
            Err(Error::OutOfBounds {
                space: "surface",
                len: 4,
                ..
            }) => {}
            r => panic!("({x}, {y}): {r:?}"),
        }
    }
    match trap(&mut mem, 6, 0) {
        Err(Error::Misaligned {
            space: "surface",
            len: 4,
            ..
        }) => {}
        r => panic!("{r:?}"),
    }
}

// ---- handwritten PTX: errors and robustness ---------------------------------------

fn module(body: &str) -> Module {
    let text = format!(
        ".version 8.0\n.target sm_80\n.address_size 64\n\
         .visible .entry k(.param .u64 h, .param .u64 out, .param .u32 x)\n{{\n\
         .reg .pred %p<4>;\n.reg .b16 %rs<8>;\n.reg .b32 %r<16>;\n.reg .f32 %f<16>;\n.reg .b64 %rd<8>;\n\
         ld.param.u64 %rd1, [h];\nld.param.u64 %rd2, [out];\nld.param.u32 %r1, [x];\n\
         cvta.to.global.u64 %rd2, %rd2;\n{body}\nret;\n}}\n"
    );
    Module::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn run_k(m: &Module, mem: &mut VecMemory, handle: u64, x: u32) -> (Result<(), Error>, Vec<u32>) {
    let out = mem.alloc_u32(&[0; 8]);
    let r = try_run(m, "k", 1, Params::new().u64(handle).ptr(out).u32(x), mem);
    (r, mem.u32s(out))
}

#[test]
fn unknown_handles_fail_the_launch() {
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Array2D,
        ChannelFormat::F32,
        1,
        [4, 4, 1],
        0,
        |_| vec![0; 4],
    );
    let t = mem.add_texture(Texture {
        image: img,
        sampler: sampler(false, false, [Clamp; 3]),
    });
    let s = mem.add_surface(img);
    for (body, kind, good) in [
        (
            "tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];",
            "texture",
            t,
        ),
        (
            "tld4.r.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}];",
            "texture",
            t,
        ),
        ("txq.width.b32 %r2, [%rd1];", "texture", t),
        ("txq.level.height.b32 %r2, [%rd1], %r1;", "texture", t),
        (
            "suld.b.2d.b32.trap {%r2}, [%rd1, {%r1, %r1}];",
            "surface",
            s,
        ),
        (
            "sust.b.2d.b32.zero [%rd1, {%r1, %r1}], {%r1};",
            "surface",
            s,
        ),
        ("suq.width.b32 %r2, [%rd1];", "surface", s),
    ] {
        let m = module(body);
        // A texture handle is not a surface handle and the other way round.
        for bad in [
            0,
            1,
            0xdead_beef,
            t + s + 1,
            if kind == "texture" { s } else { t },
        ] {
            match run_k(&m, &mut mem, bad, 0).0 {
                Err(Error::InvalidHandle { kind: k, handle }) if k == kind && handle == bad => {}
                r => panic!("{body} with handle {bad}: {r:?}"),
            }
        }
        run_k(&m, &mut mem, good, 0).0.unwrap();
    }
}

#[test]
fn surface_errors_from_handwritten_ptx() {
    let mut mem = VecMemory::default();
    let img = upload(
        &mut mem,
        Shape::Array1D,
        ChannelFormat::U8,
        4,
        [8, 1, 1],
        0,
        |i| vec![i as u8; 4],
    );
    let s = mem.add_surface(img);
    // A v2.b32 load is 8 bytes: x must be a multiple of 8.
    let m = module(
        "suld.b.1d.v2.b32.trap {%r2, %r3}, [%rd1, {%r1}];\n\
         st.global.v2.u32 [%rd2], {%r2, %r3};",
    );
    let (r, out) = run_k(&m, &mut mem, s, 8);
    r.unwrap();
    assert_eq!(out[..2], [0x0202_0202, 0x0303_0303]);
    match run_k(&m, &mut mem, s, 4).0 {
        Err(Error::Misaligned {
            space: "surface",
            len: 8,
            addr,
        }) => assert_eq!(addr, img.base + 4),
        r => panic!("{r:?}"),
    }
    match run_k(&m, &mut mem, s, 32).0 {
        Err(Error::OutOfBounds {
            space: "surface",
            len: 8,
            addr,
        }) => assert_eq!(addr, img.base + 32),
        r => panic!("{r:?}"),
    }
    // `.clamp` moves to the last 8-byte element of the row; `.zero` reads 0.
    let m = module(
        "suld.b.1d.v2.b32.clamp {%r2, %r3}, [%rd1, {%r1}];\n\
         suld.b.1d.b64.zero {%rd3}, [%rd1, {%r1}];\n\
         st.global.v2.u32 [%rd2], {%r2, %r3};\nst.global.u64 [%rd2+8], %rd3;",
    );
    let (r, out) = run_k(&m, &mut mem, s, 4000);
    r.unwrap();
    assert_eq!(out[..4], [0x0606_0606, 0x0707_0707, 0, 0]);
    // A surface whose rows are narrower than the access has no element to
    // clamp to.
    let narrow = upload(
        &mut mem,
        Shape::Array1D,
        ChannelFormat::U8,
        1,
        [4, 1, 1],
        0,
        |_| vec![1],
    );
    let n = mem.add_surface(narrow);
    match run_k(&m, &mut mem, n, 0).0 {
        Err(Error::OutOfBounds {
            space: "surface", ..
        }) => {}
        r => panic!("{r:?}"),
    }
}

#[test]
fn hostile_objects_and_coordinates_do_not_panic() {
    let body = "mov.b32 %f5, %r1;\n\
         tex.3d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f5, %f5, %f5}];\n\
         tex.acube.v4.s32.f32 {%r2, %r3, %r4, %r5}, [%rd1, {%r1, %f5, %f5, %f5}];\n\
         tex.a2d.v4.u32.s32 {%r2, %r3, %r4, %r5}, [%rd1, {%r1, %r1, %r1, %r1}];\n\
         tld4.a.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f5}];\n\
         txq.array_size.b32 %r6, [%rd1];\n\
         st.global.v4.f32 [%rd2], {%f1, %f2, %f3, %f4};";
    let m = module(body);
    let mut mem = VecMemory::default();
    let base = mem.alloc(vec![0x3c; 64]);
    let shapes = [
        Shape::Array3D,
        Shape::LayeredCubemap,
        Shape::Layered2D,
        Shape::Linear,
    ];
    let extents = [0, 1, 3, u64::MAX];
    let mut r = Rng(40);
    for k in 0..200 {
        let pick = |r: &mut Rng| extents[(r.next() % 4) as usize];
        let img = Image {
            shape: shapes[k % 4],
            base: if k % 7 == 0 { u64::MAX - 8 } else { base },
            format: [
                ChannelFormat::U8,
                ChannelFormat::S16,
                ChannelFormat::F16,
                ChannelFormat::F32,
            ][k % 4],
            channels: [0, 1, 2, 4, 7, u32::MAX][k % 6],
            width: pick(&mut r),
            height: pick(&mut r),
            depth: pick(&mut r),
            row_pitch: pick(&mut r),
            slice_pitch: pick(&mut r),
        };
        let mut s = sampler(
            k % 2 == 0,
            k % 3 != 0,
            [MODES[k % 4], MODES[(k / 4) % 4], MODES[(k / 16) % 4]],
        );
        s.srgb = k % 5 == 0;
        let h = mem.add_texture(Texture {
            image: img,
            sampler: s,
        });
        for x in [
            0u32,
            1,
            u32::MAX,
            f32::NAN.to_bits(),
            f32::INFINITY.to_bits(),
            f32::NEG_INFINITY.to_bits(),
            (-1.5f32).to_bits(),
            1e30f32.to_bits(),
            f32::MIN_POSITIVE.to_bits(),
        ] {
            // Reads outside memory fail the launch; nothing panics.
            match run_k(&m, &mut mem, h, x).0 {
                Ok(()) | Err(Error::OutOfBounds { .. }) => {}
                r => panic!("{img:?} {x:#x}: {r:?}"),
            }
        }
    }
}

#[test]
fn texture_forms_that_are_not_implemented_fail_when_reached() {
    for inst in [
        // An explicit sampler (independent mode).
        "tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, %rd3, {%f5, %f6}];",
        // An offset operand, and a depth compare.
        "tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}], {%r1, %r1};",
        "tld4.r.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [%rd1, {%f5, %f6}], %f7;",
        // Half-precision results, multi-sample textures, formatted stores.
        "tex.1d.v4.f16.f32 {%rs1, %rs2, %rs3, %rs4}, [%rd1, {%f5}];",
        "tex.2dms.v4.s32.s32 {%r1, %r2, %r3, %r4}, [%rd1, {%r5, %r6, %r7, %r8}];",
        "sust.p.2d.b32.trap [%rd1, {%r1, %r1}], {%r1};",
        "sured.b.add.2d.u32.trap [%rd1, {%r1, %r1}], %r1;",
        // Module-scope texture references.
        "tex.2d.v4.f32.f32 {%f1, %f2, %f3, %f4}, [tex_ref, {%f5, %f6}];",
        "txq.width.b32 %r2, [tex_ref];",
    ] {
        let m = module(&format!("@%p1 bra SKIP;\n{inst}\nSKIP:"));
        let mut mem = VecMemory::default();
        match run_k(&m, &mut mem, 0, 0).0 {
            Err(Error::Unsupported { what }) => {
                let op = inst.split_whitespace().next().unwrap();
                assert!(what.contains(op), "{inst}: {what}");
            }
            r => panic!("{inst}: {r:?}"),
        }
    }
}
