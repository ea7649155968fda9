//! Compile options: a real architecture (`sm_90`) made virtual
//! (`compute_90`), so that NVRTC emits PTX instead of machine code.

/// The options NVRTC accepts to name the target architecture, with the
/// value glued on (`-arch=sm_90`) or in the next option (`-arch`, `sm_90`).
const ARCH_FLAGS: [&str; 2] = ["-arch", "--gpu-architecture"];

/// `options` with every real architecture made virtual, or `None` when no
/// option names a real one (the program asks for PTX or for NVRTC's
/// default, and is left alone).
pub fn virtual_arch(options: &[&[u8]]) -> Option<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<u8>> = Vec::with_capacity(options.len());
    let mut changed = false;
    let mut value_next = false;
    for &opt in options {
        let (head, value) = if value_next {
            (&[][..], opt)
        } else {
            match arch_value(opt) {
                Some((head, value)) => (head, value),
                None => {
                    value_next = ARCH_FLAGS.iter().any(|f| opt == f.as_bytes());
                    out.push(opt.to_vec());
                    continue;
                }
            }
        };
        value_next = false;
        match real_arch(value) {
            Some(rest) => {
                let mut o = head.to_vec();
                o.extend_from_slice(b"compute_");
                o.extend_from_slice(rest);
                out.push(o);
                changed = true;
            }
            None => out.push(opt.to_vec()),
        }
    }
    changed.then_some(out)
}

/// `-arch=VALUE` / `--gpu-architecture=VALUE`: the part up to and
/// including `=`, and the value.
fn arch_value(opt: &[u8]) -> Option<(&[u8], &[u8])> {
    ARCH_FLAGS.iter().find_map(|f| {
        let f = f.as_bytes();
        (opt.len() > f.len() && opt.starts_with(f) && opt[f.len()] == b'=')
            .then(|| opt.split_at(f.len() + 1))
    })
}

/// `sm_90`, `sm_90a`, `sm_100f`: what follows `sm_` (a number, perhaps a
/// suffix letter); `None` for anything else (`compute_90`, `all`).
fn real_arch(value: &[u8]) -> Option<&[u8]> {
    let rest = value.strip_prefix(b"sm_")?;
    let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    let suffix = &rest[digits..];
    (digits > 0 && suffix.len() <= 1 && suffix.iter().all(u8::is_ascii_lowercase)).then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(opts: &[&str]) -> Option<Vec<String>> {
        let o: Vec<&[u8]> = opts.iter().map(|s| s.as_bytes()).collect();
        virtual_arch(&o).map(|v| {
            v.into_iter()
                .map(|b| String::from_utf8(b).unwrap())
                .collect()
        })
    }

    #[test]
    fn real_architectures_become_virtual_in_every_spelling() {
        assert_eq!(
            run(&["--gpu-architecture=sm_90", "-default-device"]).unwrap(),
            ["--gpu-architecture=compute_90", "-default-device"]
        );
        assert_eq!(run(&["-arch=sm_80"]).unwrap(), ["-arch=compute_80"]);
        assert_eq!(
            run(&["-I/x", "-arch", "sm_90a"]).unwrap(),
            ["-I/x", "-arch", "compute_90a"]
        );
        assert_eq!(
            run(&["--gpu-architecture", "sm_100f", "-lineinfo"]).unwrap(),
            ["--gpu-architecture", "compute_100f", "-lineinfo"]
        );
    }

    #[test]
    fn programs_that_ask_for_ptx_or_the_default_are_left_alone() {
        assert_eq!(run(&[]), None);
        assert_eq!(run(&["--gpu-architecture=compute_90", "-std=c++17"]), None);
        assert_eq!(run(&["-arch", "compute_75"]), None);
        // Not an architecture option, a malformed value, a flag at the end.
        assert_eq!(run(&["--include-path=sm_90", "-archive=sm_90"]), None);
        assert_eq!(run(&["-arch=sm_", "-arch=sm_9x0", "-arch=sm_90ab"]), None);
        assert_eq!(run(&["-lineinfo", "-arch"]), None);
        // The value after a flag is the flag's value, never a flag itself.
        assert_eq!(run(&["-arch", "-arch=sm_90"]), None);
    }
}
