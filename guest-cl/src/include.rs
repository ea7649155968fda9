//! `#include` directives, resolved in the guest.
//!
//! Programs are compiled on the host, which must not read its own files on
//! a guest's behalf and has none of the guest's (docs/opencl.md). So the
//! guest library inlines every header a program includes before the source
//! leaves the guest: `"name"` is looked for beside the including file (the
//! working directory for the program's own source), then in the `-I`
//! directories of the build options; `<name>` in the `-I` directories. A
//! `#line` directive before and after each inlined file keeps the
//! compiler's line numbers and file names those of the guest's files. A
//! header that is not found becomes an `#error` naming it, so the build
//! fails with a log that says why. Nesting is bounded (include guards keep
//! repeated inclusion cheap; a cycle without guards stops at the bound).

use std::path::{Path, PathBuf};

/// Deepest nesting of includes followed.
const MAX_DEPTH: usize = 32;
/// Most bytes of source after inlining.
const MAX_EXPANDED: usize = 64 << 20;

/// The `-I` directories of a build options string.
pub fn include_dirs(options: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut words = options.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-I" {
            if let Some(d) = words.next() {
                dirs.push(PathBuf::from(d.trim_matches('"')));
            }
        } else if let Some(d) = w.strip_prefix("-I") {
            dirs.push(PathBuf::from(d.trim_matches('"')));
        }
    }
    dirs
}

/// The header an `#include` line names: (name, quoted with `"`).
fn directive(line: &str) -> Option<(&str, bool)> {
    let t = line.trim_start().strip_prefix('#')?.trim_start();
    let rest = t.strip_prefix("include")?.trim_start();
    if let Some(r) = rest.strip_prefix('"') {
        return r.find('"').map(|e| (&r[..e], true));
    }
    if let Some(r) = rest.strip_prefix('<') {
        return r.find('>').map(|e| (&r[..e], false));
    }
    None
}

/// `source` with every `#include` replaced by the file it names.
pub fn expand(source: &str, options: &str) -> String {
    let dirs = include_dirs(options);
    let cwd = std::env::current_dir().ok();
    let mut out = String::with_capacity(source.len());
    expand_into(&mut out, source, "<source>", cwd.as_deref(), &dirs, 0);
    out
}

fn find(name: &str, quoted: bool, here: Option<&Path>, dirs: &[PathBuf]) -> Option<PathBuf> {
    let path = Path::new(name);
    if path.is_absolute() {
        return path.is_file().then(|| path.to_path_buf());
    }
    let local = quoted.then_some(here).flatten();
    local
        .into_iter()
        .chain(dirs.iter().map(PathBuf::as_path))
        .map(|d| d.join(path))
        .find(|p| p.is_file())
}

fn expand_into(
    out: &mut String,
    text: &str,
    file: &str,
    here: Option<&Path>,
    dirs: &[PathBuf],
    depth: usize,
) {
    for (i, line) in text.lines().enumerate() {
        let Some((name, quoted)) = directive(line) else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let found = find(name, quoted, here, dirs);
        let content = found.as_ref().and_then(|p| std::fs::read_to_string(p).ok());
        match (found, content) {
            (Some(p), Some(c)) if depth < MAX_DEPTH && out.len() + c.len() <= MAX_EXPANDED => {
                let shown = p.display().to_string().replace('"', "");
                out.push_str(&format!("#line 1 \"{shown}\"\n"));
                expand_into(out, &c, &shown, p.parent(), dirs, depth + 1);
                out.push_str(&format!("#line {} \"{}\"\n", i + 2, file.replace('"', "")));
            }
            (Some(_), Some(_)) => {
                out.push_str(&format!(
                    "#error \"fairgpu: includes nested deeper than {MAX_DEPTH} or larger than {} MiB: {}\"\n",
                    MAX_EXPANDED >> 20,
                    name.replace('"', "")
                ));
            }
            _ => out.push_str(&format!(
                "#error \"fairgpu: header {} not found in the guest (beside the source or in a -I directory)\"\n",
                name.replace('"', "")
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_name_include_directories() {
        assert_eq!(
            include_dirs("-D X -I /a/b -I/c -cl-mad-enable"),
            vec![PathBuf::from("/a/b"), PathBuf::from("/c")]
        );
    }

    #[test]
    fn headers_are_inlined_with_line_markers_and_missing_ones_are_errors() {
        let dir = std::env::temp_dir().join(format!("fairgpu-cl-include-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.h"), "#include \"sub/b.h\"\n#define A 1\n").unwrap();
        std::fs::write(dir.join("sub/b.h"), "#define B 2\n").unwrap();
        std::fs::write(dir.join("loop.h"), "#include \"loop.h\"\n").unwrap();
        let opts = format!("-I {}", dir.display());
        let src = "#include <a.h>\n  #  include \"missing.h\"\nkernel void k() {}\n";
        let out = expand(src, &opts);
        assert!(!out.contains("#include"), "{out}");
        assert!(
            out.contains("#define A 1") && out.contains("#define B 2"),
            "{out}"
        );
        assert!(
            out.contains("#error \"fairgpu: header missing.h not found"),
            "{out}"
        );
        assert!(out.contains("#line 2 \"<source>\""), "{out}");
        assert!(out.ends_with("kernel void k() {}\n"), "{out}");
        let looped = expand("#include <loop.h>\n", &opts);
        assert!(looped.contains("nested deeper than 32"), "{looped}");
        assert_eq!(expand("kernel void k() {}", ""), "kernel void k() {}\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
