//! Generates the exported surface of the guest library from one declaration
//! list, `api/driver_api.tsv` (every CUDA driver entry point, its ABI version,
//! variant and symbol; see tools/gen_driver_api.py):
//!
//! - a `#[no_mangle]` stub for every symbol that `src/` does not implement,
//!   returning CUDA_ERROR_NOT_SUPPORTED and logging its name once;
//! - the table `cuGetProcAddress` answers from.
//!
//! A symbol counts as implemented when `src/` defines `fn <symbol>(` (as
//! an `extern "C" fn`, directly or through a local export macro).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

fn implemented(dir: &Path, out: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("reading src/") {
        let path = entry.expect("listing src/").path();
        if path.is_dir() {
            implemented(&path, out);
            continue;
        }
        if path.extension().is_some_and(|e| e == "rs") {
            println!("cargo:rerun-if-changed={}", path.display());
            let text = std::fs::read_to_string(&path).expect("reading a source file");
            for piece in text.split("fn ").skip(1) {
                let name: String = piece
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.starts_with("cu") && piece[name.len()..].starts_with('(') {
                    out.insert(name);
                }
            }
        }
    }
}

fn main() {
    println!("cargo:rerun-if-changed=api/driver_api.tsv");
    println!("cargo:rerun-if-changed=build.rs");
    // libcudart dlopens "libcuda.so.1": record that soname in the library.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");

    let tsv = std::fs::read_to_string("api/driver_api.tsv").expect("reading api/driver_api.tsv");
    let mut rows = Vec::new();
    for line in tsv
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 4, "malformed line in api/driver_api.tsv: {line}");
        let version: u32 = f[1].parse().expect("version column");
        rows.push((f[0].to_owned(), version, f[2].to_owned(), f[3].to_owned()));
    }
    let mut done = BTreeSet::new();
    implemented(Path::new("src"), &mut done);

    let mut code = String::new();
    let symbols: BTreeSet<&str> = rows.iter().map(|r| r.3.as_str()).collect();
    for sym in &symbols {
        if done.contains(*sym) {
            continue;
        }
        writeln!(
            code,
            "/// Not implemented: returns CUDA_ERROR_NOT_SUPPORTED and logs once.\n\
             #[no_mangle]\npub extern \"C\" fn {sym}() -> crate::types::CUresult {{ crate::unsupported(\"{sym}\") }}"
        )
        .unwrap();
    }
    writeln!(
        code,
        "/// (entry point, ABI version, per-thread-stream variant, symbol), sorted by entry point."
    )
    .unwrap();
    writeln!(
        code,
        "pub static PROC_TABLE: &[(&str, u32, bool, &str)] = &["
    )
    .unwrap();
    for (name, version, variant, sym) in &rows {
        writeln!(
            code,
            "    ({name:?}, {version}, {}, {sym:?}),",
            variant != "-"
        )
        .unwrap();
    }
    writeln!(code, "];").unwrap();
    writeln!(code, "/// Every symbol implemented in src/ (for tests).").unwrap();
    writeln!(code, "pub static IMPLEMENTED: &[&str] = &[").unwrap();
    for sym in done.iter().filter(|s| symbols.contains(s.as_str())) {
        writeln!(code, "    {sym:?},").unwrap();
    }
    writeln!(code, "];").unwrap();
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    std::fs::write(Path::new(&out).join("driver_api.rs"), code).expect("writing driver_api.rs");
}
