//! Device-side `printf` (`vprintf(format, args)`): C's conversions over the
//! argument buffer nvcc builds, where each argument sits at an offset
//! aligned to its size (4 bytes for `int`, 8 for `long`, pointers and
//! `double`; a `float` is promoted to `double`).
//!
//! The caller reads memory: [`format`] asks it for the format string's and
//! `%s` strings' bytes and for argument words, so every access goes through
//! the launch's bounds checks. Output is bounded by the caller too.

/// Most bytes of one format string or `%s` argument read.
pub const MAX_STRING: usize = 4096;

/// What [`format`] needs of the launch.
pub trait Source {
    /// The NUL-terminated string at `addr` (at most [`MAX_STRING`] bytes,
    /// without the NUL); `None` if it cannot be read.
    fn string(&mut self, addr: u64) -> Option<Vec<u8>>;
    /// `len` (4 or 8) bytes of the argument buffer at `off`, little-endian.
    fn arg(&mut self, off: u64, len: u64) -> Option<u64>;
}

/// Formats `fmt` with the arguments of `src`; returns the text and the
/// number of arguments consumed, or `None` when a read failed.
pub fn format(fmt: &[u8], src: &mut dyn Source) -> Option<(Vec<u8>, u32)> {
    let mut out = Vec::with_capacity(fmt.len());
    let mut off = 0u64;
    let mut used = 0u32;
    let mut next = |src: &mut dyn Source, len: u64| -> Option<u64> {
        off = off.next_multiple_of(len);
        let v = src.arg(off, len)?;
        off += len;
        used += 1;
        Some(v)
    };
    let mut i = 0;
    while i < fmt.len() {
        let c = fmt[i];
        i += 1;
        if c != b'%' {
            out.push(c);
            continue;
        }
        if fmt.get(i) == Some(&b'%') {
            out.push(b'%');
            i += 1;
            continue;
        }
        let mut spec = Spec::default();
        while let Some(&f) = fmt.get(i) {
            match f {
                b'-' => spec.left = true,
                b'+' => spec.plus = true,
                b' ' => spec.space = true,
                b'#' => spec.alt = true,
                b'0' => spec.zero = true,
                _ => break,
            }
            i += 1;
        }
        if fmt.get(i) == Some(&b'*') {
            i += 1;
            let w = next(src, 4)? as u32 as i32;
            if w < 0 {
                spec.left = true;
            }
            spec.width = w.unsigned_abs() as usize;
        } else {
            spec.width = digits(fmt, &mut i);
        }
        if fmt.get(i) == Some(&b'.') {
            i += 1;
            if fmt.get(i) == Some(&b'*') {
                i += 1;
                let p = next(src, 4)? as u32 as i32;
                spec.precision = (p >= 0).then_some(p as usize);
            } else {
                spec.precision = Some(digits(fmt, &mut i));
            }
        }
        // Length: only whether the argument is 8 bytes matters.
        let mut long = false;
        while let Some(&l) = fmt.get(i) {
            match l {
                b'l' | b'j' | b'z' | b't' | b'L' => long = true,
                b'h' => {}
                _ => break,
            }
            i += 1;
        }
        spec.width = spec.width.min(MAX_STRING);
        spec.precision = spec.precision.map(|p| p.min(MAX_STRING));
        let Some(&conv) = fmt.get(i) else {
            out.push(b'%');
            break;
        };
        i += 1;
        let size = if long { 8 } else { 4 };
        match conv {
            b'd' | b'i' => {
                let v = next(src, size)?;
                let v = if long {
                    v as i64
                } else {
                    i64::from(v as u32 as i32)
                };
                spec.integer(&mut out, v < 0, v.unsigned_abs(), 10, false, "");
            }
            b'u' | b'o' | b'x' | b'X' => {
                let v = next(src, size)?;
                let v = if long { v } else { u64::from(v as u32) };
                let (base, upper, prefix) = match conv {
                    b'u' => (10, false, ""),
                    b'o' => (8, false, if spec.alt { "0" } else { "" }),
                    b'x' => (16, false, if spec.alt && v != 0 { "0x" } else { "" }),
                    _ => (16, true, if spec.alt && v != 0 { "0X" } else { "" }),
                };
                spec.integer(&mut out, false, v, base, upper, prefix);
            }
            b'c' => {
                let v = next(src, 4)? as u8;
                spec.pad(&mut out, &[v]);
            }
            b'p' => {
                let v = next(src, 8)?;
                let text = format!("0x{v:x}");
                spec.pad(&mut out, text.as_bytes());
            }
            b's' => {
                let p = next(src, 8)?;
                let mut s = if p == 0 {
                    b"(null)".to_vec()
                } else {
                    src.string(p)?
                };
                if let Some(n) = spec.precision {
                    s.truncate(n);
                }
                spec.pad(&mut out, &s);
            }
            b'f' | b'F' | b'e' | b'E' | b'g' | b'G' | b'a' | b'A' => {
                let v = f64::from_bits(next(src, 8)?);
                let text = float(v, conv, &spec);
                spec.pad_number(&mut out, text.as_bytes(), v.is_finite());
            }
            other => {
                // An unknown conversion is printed as written.
                out.push(b'%');
                out.push(other);
            }
        }
    }
    Some((out, used))
}

fn digits(fmt: &[u8], i: &mut usize) -> usize {
    let mut n = 0usize;
    while let Some(d) = fmt.get(*i).filter(|d| d.is_ascii_digit()) {
        n = n.saturating_mul(10).saturating_add(usize::from(d - b'0'));
        *i += 1;
    }
    n
}

#[derive(Default)]
struct Spec {
    left: bool,
    plus: bool,
    space: bool,
    alt: bool,
    zero: bool,
    width: usize,
    precision: Option<usize>,
}

impl Spec {
    fn sign(&self, neg: bool) -> &'static str {
        if neg {
            "-"
        } else if self.plus {
            "+"
        } else if self.space {
            " "
        } else {
            ""
        }
    }

    fn integer(&self, out: &mut Vec<u8>, neg: bool, v: u64, base: u32, upper: bool, prefix: &str) {
        let mut d = match base {
            8 => format!("{v:o}"),
            16 if upper => format!("{v:X}"),
            16 => format!("{v:x}"),
            _ => v.to_string(),
        };
        if let Some(p) = self.precision {
            if p == 0 && v == 0 {
                d.clear();
            }
            while d.len() < p {
                d.insert(0, '0');
            }
        }
        let head = format!("{}{prefix}", self.sign(neg));
        let body_len = head.len() + d.len();
        let fill = self.width.saturating_sub(body_len);
        if self.left {
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(d.as_bytes());
            out.resize(out.len() + fill, b' ');
        } else if self.zero && self.precision.is_none() {
            out.extend_from_slice(head.as_bytes());
            out.resize(out.len() + fill, b'0');
            out.extend_from_slice(d.as_bytes());
        } else {
            out.resize(out.len() + fill, b' ');
            out.extend_from_slice(head.as_bytes());
            out.extend_from_slice(d.as_bytes());
        }
    }

    fn pad(&self, out: &mut Vec<u8>, s: &[u8]) {
        let fill = self.width.saturating_sub(s.len());
        if !self.left {
            out.resize(out.len() + fill, b' ');
        }
        out.extend_from_slice(s);
        if self.left {
            out.resize(out.len() + fill, b' ');
        }
    }

    /// A formatted number: `0` pads between its sign and digits.
    fn pad_number(&self, out: &mut Vec<u8>, s: &[u8], finite: bool) {
        if self.zero && !self.left && finite && s.len() < self.width {
            let sign = usize::from(matches!(s.first(), Some(b'-' | b'+' | b' ')));
            out.extend_from_slice(&s[..sign]);
            out.resize(out.len() + self.width - s.len(), b'0');
            out.extend_from_slice(&s[sign..]);
        } else {
            self.pad(out, s);
        }
    }
}

/// `%f`, `%e`, `%g`, `%a` of `v` as C prints them.
fn float(v: f64, conv: u8, spec: &Spec) -> String {
    let upper = conv.is_ascii_uppercase();
    let sign = spec.sign(v.is_sign_negative() && !v.is_nan());
    let body = if v.is_nan() {
        "nan".to_owned()
    } else if v.is_infinite() {
        "inf".to_owned()
    } else {
        let a = v.abs();
        let p = spec.precision.unwrap_or(6);
        match conv.to_ascii_lowercase() {
            b'f' => {
                let s = format!("{a:.p$}");
                if spec.alt && p == 0 {
                    s + "."
                } else {
                    s
                }
            }
            b'e' => exp(a, p, spec.alt),
            b'a' => hex_float(a, spec.precision),
            _ => general(a, p, spec.alt),
        }
    };
    let body = if upper { body.to_uppercase() } else { body };
    format!("{sign}{body}")
}

/// `d.ddde±XX`.
fn exp(a: f64, p: usize, alt: bool) -> String {
    let s = format!("{a:.p$e}");
    let (mant, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    let dot = if alt && p == 0 { "." } else { "" };
    format!(
        "{mant}{dot}e{}{:02}",
        if e < 0 { '-' } else { '+' },
        e.unsigned_abs()
    )
}

/// `%g`: `%e` or `%f` by the exponent, trailing zeros removed unless `#`.
fn general(a: f64, p: usize, alt: bool) -> String {
    let p = p.max(1);
    let e = if a == 0.0 {
        0
    } else {
        let s = format!("{a:.*e}", p - 1);
        s.split_once('e')
            .and_then(|(_, e)| e.parse::<i32>().ok())
            .unwrap_or(0)
    };
    let s = if e < -4 || e >= p as i32 {
        exp(a, p - 1, alt)
    } else {
        let decimals = (p as i32 - 1 - e).max(0) as usize;
        format!("{a:.decimals$}")
    };
    if alt {
        return s;
    }
    let (num, tail) = match s.find('e') {
        Some(k) => (&s[..k], &s[k..]),
        None => (&s[..], ""),
    };
    let num = if num.contains('.') {
        num.trim_end_matches('0').trim_end_matches('.')
    } else {
        num
    };
    format!("{num}{tail}")
}

/// `%a`: `0x1.hhhp±d`.
fn hex_float(a: f64, precision: Option<usize>) -> String {
    if a == 0.0 {
        return match precision {
            Some(p) if p > 0 => format!("0x0.{}p+0", "0".repeat(p)),
            _ => "0x0p+0".to_owned(),
        };
    }
    let bits = a.to_bits();
    let raw_exp = ((bits >> 52) & 0x7ff) as i32;
    let mut mant = bits & ((1u64 << 52) - 1);
    let (lead, e) = if raw_exp == 0 {
        (0, -1022)
    } else {
        (1, raw_exp - 1023)
    };
    let mut digits = format!("{mant:013x}");
    if let Some(p) = precision.filter(|&p| p < 13) {
        // Round to nearest, ties to even, in the kept hex digits.
        let shift = 4 * (13 - p) as u32;
        let keep = mant >> shift;
        let rest = mant & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        let up = rest > half || (rest == half && keep & 1 == 1);
        mant = keep + u64::from(up);
        digits = if p == 0 {
            String::new()
        } else {
            format!("{mant:0p$x}")
        };
        let lead = lead + u64::from(p == 0 && up);
        return trailing_hex(lead, &digits, e);
    }
    let digits = if precision.is_none() {
        digits.trim_end_matches('0').to_owned()
    } else {
        digits + &"0".repeat(precision.unwrap_or(13).saturating_sub(13))
    };
    trailing_hex(lead, &digits, e)
}

fn trailing_hex(lead: u64, digits: &str, e: i32) -> String {
    let dot = if digits.is_empty() { "" } else { "." };
    format!(
        "0x{lead}{dot}{digits}p{}{}",
        if e < 0 { '-' } else { '+' },
        e.unsigned_abs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Arguments laid out as nvcc lays them out.
    struct Args {
        buf: Vec<u8>,
        strings: Vec<(u64, Vec<u8>)>,
    }

    impl Args {
        fn new() -> Args {
            Args {
                buf: Vec::new(),
                strings: Vec::new(),
            }
        }
        fn push(mut self, bytes: &[u8]) -> Args {
            let a = bytes.len();
            while !self.buf.len().is_multiple_of(a) {
                self.buf.push(0);
            }
            self.buf.extend_from_slice(bytes);
            self
        }
        fn i32(self, v: i32) -> Args {
            self.push(&v.to_le_bytes())
        }
        fn i64(self, v: i64) -> Args {
            self.push(&v.to_le_bytes())
        }
        fn f64(self, v: f64) -> Args {
            self.push(&v.to_le_bytes())
        }
        fn str(mut self, s: &str) -> Args {
            let addr = 0x1000 + self.strings.len() as u64 * 0x100;
            self.strings.push((addr, s.as_bytes().to_vec()));
            self.push(&addr.to_le_bytes())
        }
    }

    impl Source for Args {
        fn string(&mut self, addr: u64) -> Option<Vec<u8>> {
            self.strings
                .iter()
                .find(|(a, _)| *a == addr)
                .map(|(_, s)| s.clone())
        }
        fn arg(&mut self, off: u64, len: u64) -> Option<u64> {
            let b = self.buf.get(off as usize..(off + len) as usize)?;
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            Some(u64::from_le_bytes(w))
        }
    }

    fn f(fmt: &str, mut a: Args) -> String {
        let (out, _) = format(fmt.as_bytes(), &mut a).expect("formats");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn conversions_print_as_c_does() {
        assert_eq!(
            f(
                "%d %i %u %x %X %o %c|",
                Args::new()
                    .i32(-7)
                    .i32(42)
                    .i32(-1)
                    .i32(255)
                    .i32(255)
                    .i32(8)
                    .i32(65)
            ),
            "-7 42 4294967295 ff FF 10 A|"
        );
        assert_eq!(
            f(
                "%ld %llu %lx",
                Args::new().i64(-5_000_000_000).i64(-1).i64(1 << 40)
            ),
            "-5000000000 18446744073709551615 10000000000"
        );
        assert_eq!(
            f(
                "[%5d][%-5d][%05d][%+d][% d][%.3d]",
                Args::new().i32(42).i32(42).i32(-42).i32(7).i32(7).i32(5)
            ),
            "[   42][42   ][-0042][+7][ 7][005]"
        );
        assert_eq!(
            f("%#x %#o %#X", Args::new().i32(255).i32(8).i32(0)),
            "0xff 010 0"
        );
        assert_eq!(
            f(
                "%s, %.3s! %10s|%-4s|",
                Args::new().str("hello").str("world").str("right").str("ab")
            ),
            "hello, wor!      right|ab  |"
        );
        assert_eq!(f("%p", Args::new().i64(0x7000_0000_1000)), "0x700000001000");
        assert_eq!(f("100%% %q", Args::new()), "100% %q");
        assert_eq!(
            f("%*d|%.*f", Args::new().i32(6).i32(42).i32(2).f64(1.23456)),
            "    42|1.23"
        );
    }

    #[test]
    fn floats_print_as_c_does() {
        assert_eq!(
            f(
                "%f %.2f %8.3f %-8.1f|",
                Args::new().f64(1.5).f64(-2.345).f64(1.23456).f64(2.25)
            ),
            "1.500000 -2.35    1.235 2.2     |"
        );
        assert_eq!(
            f(
                "%e %.2E %e",
                Args::new().f64(12345.678).f64(0.000123).f64(0.0)
            ),
            "1.234568e+04 1.23E-04 0.000000e+00"
        );
        assert_eq!(
            f(
                "%g %g %g %g %g",
                Args::new()
                    .f64(100000.0)
                    .f64(1_000_000.0)
                    .f64(0.0001)
                    .f64(0.00001)
                    .f64(3.5)
            ),
            "100000 1e+06 0.0001 1e-05 3.5"
        );
        assert_eq!(
            f("%.3g %#g %G", Args::new().f64(1.23456).f64(2.0).f64(1e-10)),
            "1.23 2.00000 1E-10"
        );
        assert_eq!(
            f(
                "%f %f %f %+f",
                Args::new()
                    .f64(f64::INFINITY)
                    .f64(f64::NEG_INFINITY)
                    .f64(f64::NAN)
                    .f64(1.0)
            ),
            "inf -inf nan +1.000000"
        );
        assert_eq!(
            f(
                "%08.2f %a %a %.1a",
                Args::new().f64(-3.5).f64(1.0).f64(0.1).f64(1.75)
            ),
            "-0003.50 0x1p+0 0x1.999999999999ap-4 0x1.cp+0"
        );
    }

    #[test]
    fn a_read_that_fails_fails_the_call() {
        assert!(format(b"%d %d", &mut Args::new().i32(1)).is_none());
        assert!(format(b"%s", &mut Args::new().i64(0x9999)).is_none());
        assert_eq!(f("%s", Args::new().i64(0)), "(null)");
        // Huge widths are bounded.
        let out = f("%999999999d", Args::new().i32(1));
        assert_eq!(out.len(), MAX_STRING);
    }
}
