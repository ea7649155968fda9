//! Small or simple PTX texts that once made parsing take host memory out of
//! proportion to the text or the module's limits (security probe
//! findings). The peak resident set size is measured around each parse,
//! so the tests take turns.

use std::sync::Mutex;

use fairgpu_ptx::{Error, Module, MAX_INSTS, MAX_LABELS};

const HEAD: &str = ".version 9.0\n.target sm_80\n.address_size 64\n";

/// One measurement at a time: the peak is the process's.
static TURN: Mutex<()> = Mutex::new(());

fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kb: u64 = line[field.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .expect("a size in kB");
    kb * 1024
}

/// How far the resident set size rose above where it was while `f` ran.
fn peak_growth<T>(f: impl FnOnce() -> T) -> (T, u64) {
    // Resets VmHWM to the current resident set size.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak");
    let before = status_bytes("VmRSS:");
    let r = f();
    let peak = status_bytes("VmHWM:");
    (r, peak.saturating_sub(before))
}

/// Probe finding "PTX inlining bomb": every `.func` could grow to
/// `MAX_INSTS` instructions by inlining and the module's limit was checked
/// only once all of them had been, so a 32 KB text drove the process past
/// 4 GiB. Here `f3` inlines to about a million instructions and each of
/// twelve functions calls it once: the module's budget (`2 * MAX_INSTS`)
/// runs out at `g1`'s call, and nothing beyond it is allocated.
#[test]
fn ptx_inlining_bomb_is_refused() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let mut text = String::from(HEAD);
    let mut body = |name: &str, stmt: &str, n: usize| {
        text += &format!(".func {name}()\n{{\n");
        for _ in 0..n {
            text += stmt;
        }
        text += "}\n";
    };
    // 32, 1,025, 32,801 and 1,016,832 instructions once inlined.
    body("f0", "membar.gl;\n", 31);
    body("f1", "call f0;\n", 32);
    body("f2", "call f1;\n", 32);
    body("f3", "call f2;\n", 31);
    for k in 0..12 {
        body(&format!("g{k}"), "call f3;\n", 1);
    }
    assert!(text.len() < 4096);
    let g1_call = text.lines().position(|l| l == ".func g1()").expect("g1") + 3;
    let (r, grown) = peak_growth(|| Module::parse(&text).map(|_| ()));
    match r {
        Err(Error::Parse { line, msg }) => {
            assert_eq!(line as usize, g1_call, "{msg}");
            assert!(msg.contains("module"), "{msg}");
        }
        r => panic!("{r:?}"),
    }
    // The module's limit and the function being spliced, at up to 128
    // bytes an instruction (104 today); the twelve functions, expanded,
    // would take 1.3 GB.
    let bound = 4 * MAX_INSTS as u64 * 128;
    assert!(
        grown < bound,
        "parsing took {grown} bytes, more than {bound}"
    );
}

/// The inlining bomb's variant within the instruction limit: an
/// unsupported instruction keeps its (guest-chosen) name for the error a
/// launch reaching it reports, and inlining copied that name into every
/// copy of the instruction. A name of 2,000 bytes inlined half a million
/// times took a gigabyte; copies now share one bounded message.
#[test]
fn ptx_inlined_unsupported_name_bomb_stays_within_the_limit() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let name = "x".repeat(2000);
    let mut text = format!("{HEAD}.func f0()\n{{\n{name};\n}}\n.func f1()\n{{\n");
    text += &"call f0;\n".repeat(500);
    text += "}\n.visible .entry k()\n{\n";
    text += &"call f1;\n".repeat(1000);
    text += "}\n";
    let (r, grown) = peak_growth(|| Module::parse(&text).map(|m| m.kernel_names().count()));
    assert_eq!(r, Ok(1));
    // The kernel's million instructions, at up to 128 bytes each.
    let bound = 2 * MAX_INSTS as u64 * 128;
    assert!(
        grown < bound,
        "parsing took {grown} bytes, more than {bound}"
    );
}

/// Probe finding "PTX lexer holds 32 bytes per token": the whole text was
/// lexed into a vector before parsing, so a text of 64 MiB of one-byte
/// tokens took 2 GiB. Tokens are now lexed as the parser reaches them.
#[test]
fn ptx_lexer_token_bomb_stays_within_the_text_size() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    // Empty statements: a valid, empty module of 16 Mi tokens (512 MiB of
    // them before).
    let text = ";".repeat(16 << 20);
    let (r, grown) = peak_growth(|| Module::parse(&text).map(|m| m.kernel_names().count()));
    assert_eq!(r, Ok(0));
    let bound = text.len() as u64;
    assert!(
        grown < bound,
        "parsing took {grown} bytes, more than {bound}"
    );
}

/// The lexer's finding in the parser: a module variable's initializer was
/// read into a vector of 48-byte operands before its bytes were written,
/// 24 times the text of `0,0,0,...`. Elements now go to the variable's
/// bytes as they are read.
#[test]
fn ptx_initializer_bomb_stays_within_the_text_size() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let n = 8 << 20;
    let text = format!(".global .b8 g[] = {{{}0}};", "0,".repeat(n - 1));
    let (r, grown) = peak_growth(|| Module::parse(&text).map(|m| m.globals_len()));
    assert_eq!(r, Ok(n));
    let bound = text.len() as u64;
    assert!(
        grown < bound,
        "parsing took {grown} bytes, more than {bound}"
    );
}

/// A function of nothing but labels: each took a label-table entry (a
/// string and its hash slot, some 60 bytes) for its 8 bytes of text, so 2
/// million of them took more host memory than the text while the
/// function was parsed. A function may now hold `MAX_LABELS`.
#[test]
fn ptx_label_bomb_is_refused() {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let n = 2_000_000;
    let mut text = format!("{HEAD}.visible .entry k()\n{{\n");
    for i in 0..n {
        text += &format!("L{i:x}:\n");
    }
    text += "ret;\n}\n";
    let (r, grown) = peak_growth(|| Module::parse(&text).map(|_| ()));
    match r {
        Err(Error::Parse { msg, .. }) => assert!(msg.contains("labels"), "{msg}"),
        r => panic!("{r:?}"),
    }
    let bound = text.len() as u64;
    assert!(
        grown < bound,
        "parsing took {grown} bytes, more than {bound}"
    );
    // A function at the limit parses.
    let mut ok = format!("{HEAD}.visible .entry k()\n{{\n");
    for i in 0..MAX_LABELS {
        ok += &format!("L{i:x}:\n");
    }
    ok += "ret;\n}\n";
    assert!(Module::parse(&ok).is_ok());
}
