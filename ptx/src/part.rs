//! Companion entries that run one box of a kernel's grid: the PTX text
//! transformation behind kernel slicing.
//!
//! # What and why
//!
//! To run one kernel launch as several smaller sub-launches on a real
//! NVIDIA driver, each sub-launch must compute exactly what its blocks
//! would have computed in the full launch. The driver cannot offset
//! `%ctaid`, so [`add_part_entries`] appends to the module, for each
//! `.entry` kernel `K`, a companion entry `K__fairgpu_part`
//! ([`PART_SUFFIX`]) that is `K` run over one box of the full grid. The
//! companion is added to the same module (not a new one) so that
//! module-scope `.global`, `.const` and `.shared` variables stay the ones
//! the original kernel uses.
//!
//! # The companion's contract
//!
//! - Parameters: the original's, in order, then six `.param .u32`: the
//!   box's block offset x, y, z, then the full grid's size x, y, z. Laid
//!   out as the driver lays parameters out, they start at the first
//!   4-byte-aligned offset after the original's.
//! - Launched with the box's size as its grid, block `b` of the companion
//!   behaves as block `b + offset` of the original launched over the full
//!   grid: every read of `%ctaid.{x,y,z}` yields `%ctaid + offset` and
//!   every read of `%nctaid.{x,y,z}` the full grid's size.
//! - Linkage (`.visible`, `.weak`) and the performance directives between
//!   the parameter list and the body (`.maxntid`, `.reqntid`,
//!   `.minnctapersm`, `.maxnreg`, `.pragma`, ...) are the original's.
//!
//! # How
//!
//! The companion is the original's text with a prologue after the body's
//! opening `{`: it declares fresh registers (`%__fgp<9>`, and `%__fgph<6>`
//! for legacy 16-bit reads; the prefix is one that occurs nowhere in the
//! text), loads the six parameters and computes the offset block index
//! once (it is constant per block). Each `%ctaid.*`/`%nctaid.*` token of
//! the body (whole tokens only: `%nctaid.x` is not a `%ctaid.x`, and
//! comments are left alone) becomes the register holding its value; a
//! register is valid wherever the special register is. In an instruction
//! of a 16-bit type (`mov.u16 %rs1, %ctaid.x`, `cvt.u32.u16 %r1,
//! %ctaid.x`, legacy forms the ISA still accepts) the token becomes a
//! 16-bit register holding the value's low half.
//!
//! # What is refused
//!
//! An entry gets no companion, and [`PartEntry::part`] says why, when a
//! sub-launch could not behave like its part of the full launch:
//!
//! - a function it may call (directly or transitively; a function whose
//!   address is taken at module scope, or any function when it makes an
//!   indirect call) reads `%ctaid`/`%nctaid` (the prologue's registers
//!   are not visible there), or is only declared here (`.extern`: its body
//!   is unknown; `vprintf`, `__assertfail`, `malloc` and `free` excepted);
//! - it uses thread block clusters (`%clusterid`, `%cluster_ctaid`, ...,
//!   `barrier.cluster`, `mapa`, `getctarank`, `::cluster` state spaces,
//!   `.explicitcluster`/`.reqnctapercluster`/`.maxclusterrank`): a box
//!   need not be made of whole clusters;
//! - it synchronizes the whole grid (cooperative groups: `%envreg*`,
//!   which hold the driver's per-launch data such as the grid barrier's
//!   address, functions named `*grid_sync*`/`*sync_grids*`, the older
//!   runtime's `cudaCG*` functions) or launches kernels from
//!   the device (`cudaLaunchDevice`, `cudaGetParameterBuffer`,
//!   `cudaGraphLaunch`, `%current_graph_exec`): blocks of other
//!   sub-launches are not running;
//! - it reads `%gridid` (each sub-launch is its own grid);
//! - it reads `%ctaid`/`%nctaid` as a vector or with a component other
//!   than x, y, z;
//! - its body cannot be delimited (unbalanced braces), it defines labels
//!   that debug sections (`nvcc -G`) refer to, its name is defined twice,
//!   the companion's name is already declared, or its name already ends
//!   with [`PART_SUFFIX`];
//! - its parameters are not understood or, with the six added, would pass
//!   [`MAX_PART_PARAM_BYTES`].
//!
//! # Bounds
//!
//! The text is a guest's: nothing here panics, whatever it is, and the
//! work is linear in its length. A text longer than
//! [`MAX_TEXT_BYTES`] is returned unchanged with no
//! entries listed; a module with more than [`MAX_PART_ENTRIES`] entries
//! gets no companions; the output is never longer than twice the input
//! plus [`PART_SLACK`] bytes (entries whose companion would pass that are
//! refused). A text that is not PTX comes back unchanged or with
//! companions that are as malformed as their originals; it is the
//! driver's to refuse.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::MAX_TEXT_BYTES;

/// Appended to an entry's name to name its companion.
pub const PART_SUFFIX: &str = "__fairgpu_part";
/// Modules with more entries than this get no companions.
pub const MAX_PART_ENTRIES: usize = 4096;
/// Most bytes of a companion's parameters (the original's and the six
/// added), the classic CUDA limit that every driver accepts.
pub const MAX_PART_PARAM_BYTES: u64 = 4096;
/// The output is at most `2 * input + PART_SLACK` bytes long.
pub const PART_SLACK: usize = 64 << 10;

/// A module's text with companion entries appended, and what became of
/// each entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartedModule {
    /// The module: the input, followed by the companions (the input
    /// unchanged if there are none).
    pub text: String,
    /// Every `.entry` defined in the module (declarations without a body
    /// are not listed), in text order.
    pub entries: Vec<PartEntry>,
}

/// One entry of a module and its companion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartEntry {
    /// The entry's name.
    pub name: String,
    /// The companion's name, or why the entry has none.
    pub part: Result<String, &'static str>,
}

// Why an entry has no companion.
const WHY_TOO_MANY: &str = "too many entries in the module";
const WHY_NO_PREFIX: &str = "no fresh register name available";
const WHY_UNBALANCED: &str = "body not delimited (unbalanced braces)";
const WHY_IS_PART: &str = "name already ends with the companion suffix";
const WHY_TWICE: &str = "entry defined more than once";
const WHY_TAKEN: &str = "companion name already declared in the module";
const WHY_FUNC_CTAID: &str = "a called function reads %ctaid or %nctaid";
const WHY_VECTOR: &str = "reads %ctaid or %nctaid as a vector or odd component";
const WHY_CLUSTER: &str = "uses thread block clusters";
const WHY_GRIDID: &str = "reads %gridid";
const WHY_GRID_SYNC: &str = "uses grid-wide synchronization (cooperative groups)";
const WHY_ENVREG: &str = "reads %envreg (the driver's per-launch data)";
const WHY_DEVICE_LAUNCH: &str = "launches work from the device";
const WHY_EXTERN: &str = "calls a function whose body is not in the module";
const WHY_INDIRECT: &str = "makes an indirect call in a module with an unsliceable function";
const WHY_MODULE_REF: &str = "an unsliceable function is referenced at module scope";
const WHY_DEBUG_LABELS: &str = "defines labels that debug sections refer to";
const WHY_PARAMS: &str = "parameters not understood or too large";
const WHY_OUTPUT: &str = "output size limit reached";

/// External functions whose bodies are the runtime's and never read the
/// block index.
const RUNTIME_FUNCS: &[&str] = &[
    "vprintf",
    "__assertfail",
    "malloc",
    "free",
    "cudaGraphSetConditional",
];

/// Adds a companion entry (see the module documentation) for each
/// sliceable `.entry` of `ptx`, and says which entries got one.
pub fn add_part_entries(ptx: &str) -> PartedModule {
    if ptx.len() > MAX_TEXT_BYTES {
        return PartedModule {
            text: ptx.to_owned(),
            entries: Vec::new(),
        };
    }
    let module = scan_module(ptx);
    let entries: Vec<&Decl<'_>> = module
        .decls
        .iter()
        .filter(|d| d.is_entry && d.body.is_some() && !d.is_extern)
        .collect();
    let mut out = PartedModule {
        text: ptx.to_owned(),
        entries: Vec::with_capacity(entries.len().min(MAX_PART_ENTRIES + 1)),
    };
    let refuse_all = |why: &'static str| {
        entries
            .iter()
            .map(|d| PartEntry {
                name: d.name.to_owned(),
                part: Err(why),
            })
            .collect::<Vec<_>>()
    };
    if entries.len() > MAX_PART_ENTRIES {
        out.entries = refuse_all(WHY_TOO_MANY);
        return out;
    }
    let Some(prefix) = fresh_prefix(ptx) else {
        out.entries = refuse_all(WHY_NO_PREFIX);
        return out;
    };
    let funcs = analyze_funcs(ptx, &module);
    let limit = ptx.len().saturating_mul(2).saturating_add(PART_SLACK);
    let mut defined: HashMap<&str, u32> = HashMap::new();
    for d in &entries {
        *defined.entry(d.name).or_insert(0) += 1;
    }
    let mut added = String::new();
    for d in entries {
        let part = companion(ptx, &module, &funcs, &defined, d, &prefix).and_then(|text| {
            if out.text.len() + added.len() + text.len() + 1 > limit {
                return Err(WHY_OUTPUT);
            }
            added.push_str(&text);
            Ok(format!("{}{PART_SUFFIX}", d.name))
        });
        out.entries.push(PartEntry {
            name: d.name.to_owned(),
            part,
        });
    }
    if !added.is_empty() {
        if !out.text.ends_with('\n') {
            out.text.push('\n');
        }
        out.text.push_str(&added);
    }
    out
}

/// A register and parameter name prefix that occurs nowhere in `text`
/// (so no name made from it can clash).
fn fresh_prefix(text: &str) -> Option<String> {
    std::iter::once("__fgp".to_owned())
        .chain((1..16).map(|k| format!("__fgp{k}_")))
        .find(|p| !text.contains(p.as_str()))
}

// ---------------------------------------------------------------------------
// Tokens

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Identifiers, directives, registers, dotted opcodes (with `::`
    /// state-space suffixes: `ld.shared::cluster.u32` is one token).
    Ident,
    /// Numbers and strings.
    Other,
    /// Any other byte.
    Punct(u8),
}

#[derive(Debug, Clone, Copy)]
struct Tok {
    kind: Kind,
    start: usize,
    end: usize,
}

fn ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'%' | b'.')
}

fn ident_cont(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.')
}

/// The tokens of PTX text from a position, skipping whitespace and
/// comments. Never fails: an unterminated comment or string runs to the
/// end of the text (of its line, for a string).
#[derive(Debug, Clone, Copy)]
struct Lexer<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Lexer<'a> {
    fn new(text: &'a str, at: usize) -> Self {
        Lexer {
            b: text.as_bytes(),
            at,
        }
    }

    fn peek(&self) -> Option<Tok> {
        let mut l = *self;
        l.next()
    }
}

impl Iterator for Lexer<'_> {
    type Item = Tok;

    fn next(&mut self) -> Option<Tok> {
        let b = self.b;
        let mut i = self.at;
        loop {
            let c = *b.get(i)?;
            let next = b.get(i + 1).copied();
            if c.is_ascii_whitespace() {
                i += 1;
            } else if c == b'/' && next == Some(b'/') {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            } else if c == b'/' && next == Some(b'*') {
                i += 2;
                while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i = (i + 2).min(b.len());
            } else {
                break;
            }
        }
        let start = i;
        let c = b[i];
        let kind = if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                i += 1;
            }
            if b.get(i) == Some(&b'"') {
                i += 1;
            }
            Kind::Other
        } else if c.is_ascii_digit() {
            while i < b.len() && ident_cont(b[i]) {
                i += 1;
            }
            Kind::Other
        } else if ident_start(c) {
            i += 1;
            loop {
                if i < b.len() && ident_cont(b[i]) {
                    i += 1;
                } else if b.get(i) == Some(&b':')
                    && b.get(i + 1) == Some(&b':')
                    && b.get(i + 2).is_some_and(|&c| ident_cont(c))
                {
                    i += 2;
                } else {
                    break;
                }
            }
            Kind::Ident
        } else {
            i += 1;
            Kind::Punct(c)
        };
        self.at = i;
        Some(Tok {
            kind,
            start,
            end: i,
        })
    }
}

/// The text of a token (identifiers and punctuation start and end at
/// ASCII bytes, so this is never empty for them).
fn word(text: &str, t: Tok) -> &str {
    text.get(t.start..t.end).unwrap_or("")
}

/// Skips to just after the bracket that closes one already opened;
/// `None` if the text ends first.
fn skip_group(lx: &mut Lexer<'_>, open: u8, close: u8) -> Option<usize> {
    let mut depth = 1u64;
    for t in lx.by_ref() {
        match t.kind {
            Kind::Punct(c) if c == open => depth += 1,
            Kind::Punct(c) if c == close => {
                depth -= 1;
                if depth == 0 {
                    return Some(t.end);
                }
            }
            _ => {}
        }
    }
    None
}

// ---------------------------------------------------------------------------
// Module structure

/// A `.entry` or `.func` at module scope.
#[derive(Debug)]
struct Decl<'a> {
    is_entry: bool,
    /// `.visible` or `.weak` before it, if any.
    linkage: Option<&'a str>,
    is_extern: bool,
    name: &'a str,
    /// The parameter list's text between its parentheses.
    params: Option<(usize, usize)>,
    /// From the end of the parameter list (or name) to the body's `{`.
    header: (usize, usize),
    /// From the body's `{` to just after its `}`; `None` for a
    /// declaration.
    body: Option<(usize, usize)>,
    /// The body's `{` has no matching `}`.
    unbalanced: bool,
    /// A header directive refuses the entry.
    header_why: Option<&'static str>,
}

#[derive(Debug, Default)]
struct ModuleScan<'a> {
    decls: Vec<Decl<'a>>,
    /// Every identifier at module scope (outside bodies).
    idents: HashSet<&'a str>,
    /// Names used at module scope outside the declaration they name
    /// (initializers, `.alias`).
    refs: Vec<&'a str>,
    /// Identifiers inside `.section` blocks (debug information).
    section_idents: HashSet<&'a str>,
}

fn header_reason(d: &str) -> Option<&'static str> {
    match d {
        ".explicitcluster" | ".reqnctapercluster" | ".maxclusterrank" => Some(WHY_CLUSTER),
        _ => None,
    }
}

/// Finds the module's functions and what lies around them.
fn scan_module(text: &str) -> ModuleScan<'_> {
    let mut m = ModuleScan::default();
    let mut lx = Lexer::new(text, 0);
    let mut linkage: Option<&str> = None;
    let mut is_extern = false;
    let mut in_section = false;
    while let Some(t) = lx.next() {
        match t.kind {
            Kind::Ident => {
                let w = word(text, t);
                match w {
                    ".entry" | ".func" => {
                        let d = scan_decl(text, &mut lx, &mut m, w == ".entry", linkage, is_extern);
                        linkage = None;
                        is_extern = false;
                        match d {
                            Some(d) => {
                                let stop = d.unbalanced;
                                m.decls.push(d);
                                if stop {
                                    break;
                                }
                            }
                            None => break,
                        }
                        continue;
                    }
                    ".visible" | ".weak" => linkage = Some(w),
                    ".extern" => is_extern = true,
                    ".common" => {}
                    _ => {
                        linkage = None;
                        is_extern = false;
                        if w == ".section" {
                            in_section = true;
                        }
                        if !w.starts_with(['.', '%']) {
                            m.refs.push(w);
                        }
                    }
                }
                m.idents.insert(w);
            }
            Kind::Punct(b'{') => {
                // Initializers and sections.
                let mut depth = 1u64;
                for t in lx.by_ref() {
                    match t.kind {
                        Kind::Punct(b'{') => depth += 1,
                        Kind::Punct(b'}') => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        Kind::Ident => {
                            let w = word(text, t);
                            if in_section {
                                m.section_idents.insert(w);
                            } else if !w.starts_with(['.', '%']) {
                                m.refs.push(w);
                            }
                        }
                        _ => {}
                    }
                }
                in_section = false;
                linkage = None;
                is_extern = false;
            }
            _ => {
                linkage = None;
                is_extern = false;
            }
        }
    }
    m
}

/// Reads a function declaration after its `.entry`/`.func`; `None` when
/// the text ends before it does (nothing after can be read).
fn scan_decl<'a>(
    text: &'a str,
    lx: &mut Lexer<'a>,
    m: &mut ModuleScan<'a>,
    is_entry: bool,
    linkage: Option<&'a str>,
    is_extern: bool,
) -> Option<Decl<'a>> {
    // Attributes and the return parameters come before the name.
    let name = loop {
        let t = lx.next()?;
        match t.kind {
            Kind::Punct(b'(') => {
                skip_group(lx, b'(', b')')?;
            }
            Kind::Ident => {
                let w = word(text, t);
                if !w.starts_with('.') {
                    break w;
                }
            }
            // Not a declaration: drop what was read of it.
            _ => return Some(malformed(is_entry)),
        }
    };
    m.idents.insert(name);
    let mut params = None;
    let mut header_start = lx.at;
    if lx.peek().is_some_and(|t| t.kind == Kind::Punct(b'(')) {
        let open = lx.next()?;
        let close = skip_group(lx, b'(', b')')?;
        params = Some((open.end, close - 1));
        header_start = close;
        let mut pl = Lexer::new(text, open.end);
        while let Some(t) = pl.next().filter(|t| t.end < close) {
            if t.kind == Kind::Ident {
                m.idents.insert(word(text, t));
            }
        }
    }
    let mut header_why = None;
    let mut in_pragma = false;
    let mut d = Decl {
        is_entry,
        linkage,
        is_extern,
        name,
        params,
        header: (header_start, header_start),
        body: None,
        unbalanced: false,
        header_why: None,
    };
    loop {
        let t = lx.next()?;
        match t.kind {
            Kind::Punct(b'{') => {
                d.header = (header_start, t.start);
                d.header_why = header_why;
                match skip_group(lx, b'{', b'}') {
                    Some(end) => d.body = Some((t.start, end)),
                    None => {
                        d.body = Some((t.start, text.len()));
                        d.unbalanced = true;
                    }
                }
                return Some(d);
            }
            Kind::Punct(b';') if in_pragma => in_pragma = false,
            Kind::Punct(b';') => {
                d.header = (header_start, t.start);
                return Some(d);
            }
            Kind::Ident => {
                let w = word(text, t);
                if w == ".pragma" {
                    in_pragma = true;
                }
                header_why = header_why.or(header_reason(w));
            }
            _ => {}
        }
    }
}

/// A declaration that could not be read: listed (if an entry) but never
/// given a companion.
fn malformed(is_entry: bool) -> Decl<'static> {
    Decl {
        is_entry,
        linkage: None,
        is_extern: true,
        name: "",
        params: None,
        header: (0, 0),
        body: None,
        unbalanced: false,
        header_why: None,
    }
}

// ---------------------------------------------------------------------------
// Bodies

/// What a body does that matters here.
#[derive(Debug, Default)]
struct BodyFacts {
    why: Option<&'static str>,
    /// Functions it names (calls or takes the address of).
    refs: Vec<usize>,
    /// It calls through a register.
    indirect: bool,
    /// Special register reads to redirect: (token, value, 16-bit).
    sites: Vec<(Tok, usize, bool)>,
}

impl BodyFacts {
    fn refuse(&mut self, why: &'static str) {
        self.why = self.why.or(Some(why));
    }
}

/// Whether an instruction's type (its opcode's last part) is 16 bits.
fn is16(opcode: &str) -> bool {
    matches!(opcode.rsplit('.').next(), Some("u16" | "s16" | "b16"))
}

fn name_reason(w: &str) -> Option<&'static str> {
    const GRID_SYNC: &[&str] = &[
        "grid_sync",
        "sync_grids",
        // cudaCGGetIntrinsicHandle, cudaCGSynchronize, cudaCGSynchronizeGrid, ...
        "cudaCG",
    ];
    const LAUNCH: &[&str] = &[
        "cudaLaunchDevice",
        "cudaGetParameterBuffer",
        "cudaGraphLaunch",
        // What nvcc 12 and later call them (`__cudaCDP2LaunchDeviceV2`).
        "CDP2LaunchDevice",
        "CDP2GetParameterBuffer",
    ];
    if GRID_SYNC.iter().any(|p| w.contains(p)) {
        Some(WHY_GRID_SYNC)
    } else if LAUNCH.iter().any(|p| w.contains(p)) {
        Some(WHY_DEVICE_LAUNCH)
    } else {
        None
    }
}

/// Reads a function body (`span` from its `{` to after its `}`).
fn scan_body(
    text: &str,
    span: (usize, usize),
    is_entry: bool,
    funcs: &HashMap<&str, usize>,
    section_idents: &HashSet<&str>,
) -> BodyFacts {
    #[derive(PartialEq)]
    enum Call {
        No,
        /// After `call`: return parameters or the target.
        Start,
        /// Inside the return parameters.
        Rets,
        /// After them, before the target.
        Target,
    }
    let mut f = BodyFacts::default();
    let mut lx = Lexer::new(text, span.0);
    // Skip the opening brace.
    lx.next();
    let mut opcode: Option<&str> = None;
    let mut guard = false;
    let mut vector = 0u32;
    let mut call = Call::No;
    while let Some(t) = lx.next() {
        if t.end > span.1 {
            break;
        }
        let w = match t.kind {
            Kind::Ident => word(text, t),
            Kind::Punct(c) => {
                match c {
                    b';' => {
                        opcode = None;
                        vector = 0;
                        call = Call::No;
                    }
                    b'{' if opcode.is_some() => vector += 1,
                    b'}' if vector > 0 => vector -= 1,
                    b'{' | b'}' | b':' => opcode = None,
                    b'@' => guard = true,
                    b'(' if call == Call::Start => call = Call::Rets,
                    b')' if call == Call::Rets => call = Call::Target,
                    _ => {}
                }
                continue;
            }
            Kind::Other => continue,
        };
        if matches!(call, Call::Start | Call::Target) {
            // The call's target: a function's name, or a register.
            call = Call::No;
            if !funcs.contains_key(w) {
                f.indirect = true;
            }
        }
        if opcode.is_none() {
            if guard {
                // The guard's predicate.
                guard = false;
            } else if lx.peek().is_some_and(|n| n.kind == Kind::Punct(b':')) {
                // A label.
                if section_idents.contains(w) {
                    f.refuse(WHY_DEBUG_LABELS);
                }
            } else {
                opcode = Some(w);
                let mut parts = w.split('.');
                match parts.next() {
                    Some("call") => call = Call::Start,
                    Some("mapa" | "getctarank") => f.refuse(WHY_CLUSTER),
                    Some("barrier") if parts.any(|p| p == "cluster") => f.refuse(WHY_CLUSTER),
                    _ => {}
                }
            }
        }
        if w.contains("::cluster") {
            f.refuse(WHY_CLUSTER);
        }
        if let Some(why) = header_reason(w) {
            f.refuse(why);
        }
        if w.starts_with('%') {
            let mut parts = w.split('.');
            let base = parts.next().unwrap_or("");
            match base {
                "%ctaid" | "%nctaid" => {
                    if !is_entry {
                        f.refuse(WHY_FUNC_CTAID);
                        continue;
                    }
                    let axis = match (parts.next(), parts.next()) {
                        (Some("x"), None) => 0,
                        (Some("y"), None) => 1,
                        (Some("z"), None) => 2,
                        _ => {
                            f.refuse(WHY_VECTOR);
                            continue;
                        }
                    };
                    let value = if base == "%ctaid" { 6 + axis } else { 3 + axis };
                    f.sites.push((t, value, opcode.is_some_and(is16)));
                }
                "%clusterid"
                | "%nclusterid"
                | "%cluster_ctaid"
                | "%cluster_nctaid"
                | "%cluster_ctarank"
                | "%cluster_nctarank"
                | "%is_explicit_cluster" => f.refuse(WHY_CLUSTER),
                "%gridid" => f.refuse(WHY_GRIDID),
                "%current_graph_exec" => f.refuse(WHY_DEVICE_LAUNCH),
                b if b.starts_with("%envreg") => f.refuse(WHY_ENVREG),
                _ => {}
            }
        } else if !w.starts_with('.') {
            if let Some(why) = name_reason(w) {
                f.refuse(why);
            }
            if let Some(&i) = funcs.get(w) {
                f.refs.push(i);
            }
        }
    }
    f.refs.sort_unstable();
    f.refs.dedup();
    f
}

// ---------------------------------------------------------------------------
// Functions

/// Why each `.func` (with what it may call) cannot run in a companion,
/// and whether it may make indirect calls.
#[derive(Debug, Default)]
struct Funcs<'a> {
    index: HashMap<&'a str, usize>,
    why: Vec<Option<&'static str>>,
    indirect: Vec<bool>,
    /// Some function cannot run in a companion.
    any_why: bool,
    /// A function referenced at module scope cannot.
    module_why: Option<&'static str>,
}

fn analyze_funcs<'a>(text: &'a str, m: &ModuleScan<'a>) -> Funcs<'a> {
    let mut f = Funcs::default();
    for d in m.decls.iter().filter(|d| !d.is_entry && !d.name.is_empty()) {
        let n = f.index.len();
        f.index.entry(d.name).or_insert(n);
    }
    let n = f.index.len();
    f.why = vec![None; n];
    f.indirect = vec![false; n];
    let mut has_body = vec![false; n];
    let mut callers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for d in m.decls.iter().filter(|d| !d.is_entry) {
        let Some(&i) = f.index.get(d.name) else {
            continue;
        };
        f.why[i] = f.why[i].or(name_reason(d.name));
        let Some(span) = d.body else { continue };
        has_body[i] = true;
        if d.unbalanced {
            f.why[i] = f.why[i].or(Some(WHY_UNBALANCED));
        }
        let b = scan_body(text, span, false, &f.index, &m.section_idents);
        f.why[i] = f.why[i].or(b.why);
        f.indirect[i] |= b.indirect;
        for j in b.refs {
            callers[j].push(i);
        }
    }
    for (name, &i) in &f.index {
        if !has_body[i] && !RUNTIME_FUNCS.contains(name) {
            f.why[i] = f.why[i].or(Some(WHY_EXTERN));
        }
    }
    // What a function may call, its callers may too.
    let mut work: Vec<usize> = (0..n).filter(|&i| f.why[i].is_some()).collect();
    while let Some(i) = work.pop() {
        for &c in &callers[i] {
            if f.why[c].is_none() {
                f.why[c] = f.why[i];
                work.push(c);
            }
        }
    }
    let mut work: Vec<usize> = (0..n).filter(|&i| f.indirect[i]).collect();
    while let Some(i) = work.pop() {
        for &c in &callers[i] {
            if !f.indirect[c] {
                f.indirect[c] = true;
                work.push(c);
            }
        }
    }
    f.any_why = f.why.iter().any(Option::is_some);
    if m.refs
        .iter()
        .any(|r| f.index.get(r).is_some_and(|&i| f.why[i].is_some()))
    {
        f.module_why = Some(WHY_MODULE_REF);
    }
    f
}

// ---------------------------------------------------------------------------
// Companions

/// The companion of entry `d`, or why it has none.
fn companion(
    text: &str,
    m: &ModuleScan<'_>,
    funcs: &Funcs<'_>,
    defined: &HashMap<&str, u32>,
    d: &Decl<'_>,
    prefix: &str,
) -> Result<String, &'static str> {
    if let Some(why) = funcs.module_why {
        return Err(why);
    }
    if d.name.ends_with(PART_SUFFIX) {
        return Err(WHY_IS_PART);
    }
    if defined.get(d.name).copied().unwrap_or(0) > 1 {
        return Err(WHY_TWICE);
    }
    let name = format!("{}{PART_SUFFIX}", d.name);
    if m.idents.contains(name.as_str()) {
        return Err(WHY_TAKEN);
    }
    let Some(body) = d.body.filter(|_| !d.unbalanced) else {
        return Err(WHY_UNBALANCED);
    };
    if let Some(why) = d.header_why {
        return Err(why);
    }
    let facts = scan_body(text, body, true, &funcs.index, &m.section_idents);
    if let Some(why) = facts.why {
        return Err(why);
    }
    if let Some(why) = facts.refs.iter().find_map(|&i| funcs.why[i]) {
        return Err(why);
    }
    let indirect = facts.indirect || facts.refs.iter().any(|&i| funcs.indirect[i]);
    if indirect && funcs.any_why {
        return Err(WHY_INDIRECT);
    }
    let params = d.params.map_or("", |(a, b)| text.get(a..b).unwrap_or(""));
    if param_bytes(params).is_none_or(|n| n.next_multiple_of(4) + 24 > MAX_PART_PARAM_BYTES) {
        return Err(WHY_PARAMS);
    }
    let header = text.get(d.header.0..d.header.1).ok_or(WHY_UNBALANCED)?;
    Ok(write_companion(
        text, d, &name, params, header, body, &facts, prefix,
    ))
}

/// The companion's text.
#[allow(clippy::too_many_arguments)]
fn write_companion(
    text: &str,
    d: &Decl<'_>,
    name: &str,
    params: &str,
    header: &str,
    body: (usize, usize),
    facts: &BodyFacts,
    prefix: &str,
) -> String {
    const AXES: [&str; 3] = ["x", "y", "z"];
    let mut s = String::with_capacity(body.1 - body.0 + params.len() + header.len() + 1024);
    let _ = write!(
        s,
        "\n// fairgpu: {} over a box of a larger grid (params: block offset x, y, z; grid x, y, z)\n",
        d.name
    );
    if let Some(l) = d.linkage {
        s.push_str(l);
        s.push(' ');
    }
    let _ = write!(s, ".entry {name}(");
    // The original parameters, a comma after the last one (before any
    // comment that follows it).
    let last = Lexer::new(params, 0).last().map(|t| t.end);
    if let Some(end) = last {
        s.push_str(params.get(..end).unwrap_or(""));
        s.push(',');
        // The rest is whitespace and comments; what follows starts a line.
        s.push_str(params.get(end..).unwrap_or("").trim_end());
    }
    for (k, what) in ["off", "grid"].iter().enumerate() {
        for (a, axis) in AXES.iter().enumerate() {
            let sep = if k == 1 && a == 2 { "" } else { "," };
            let _ = write!(s, "\n\t.param .u32 {prefix}_{what}_{axis}{sep}");
        }
    }
    s.push_str("\n)");
    s.push_str(header);
    // Prologue.
    let uses16 = facts.sites.iter().any(|&(_, _, h)| h);
    let _ = write!(s, "{{\n\t.reg .u32 %{prefix}<9>;\n");
    if uses16 {
        let _ = writeln!(s, "\t.reg .u16 %{prefix}h<6>;");
    }
    for (k, what) in ["off", "grid"].iter().enumerate() {
        for (a, axis) in AXES.iter().enumerate() {
            let _ = writeln!(
                s,
                "\tld.param.u32 %{prefix}{}, [{prefix}_{what}_{axis}];",
                3 * k + a
            );
        }
    }
    for (a, axis) in AXES.iter().enumerate() {
        let _ = writeln!(s, "\tmov.u32 %{prefix}{}, %ctaid.{axis};", 6 + a);
        let _ = writeln!(
            s,
            "\tadd.u32 %{prefix}{}, %{prefix}{}, %{prefix}{a};",
            6 + a,
            6 + a
        );
    }
    if uses16 {
        for a in 0..3 {
            let _ = writeln!(s, "\tcvt.u16.u32 %{prefix}h{a}, %{prefix}{};", 6 + a);
            let _ = writeln!(s, "\tcvt.u16.u32 %{prefix}h{}, %{prefix}{};", 3 + a, 3 + a);
        }
    }
    // The body after its `{`, special registers replaced.
    let mut at = body.0 + 1;
    for &(t, value, h) in &facts.sites {
        s.push_str(text.get(at..t.start).unwrap_or(""));
        if h {
            // 16-bit: ctaid at h0..h2, nctaid at h3..h5.
            let _ = write!(
                s,
                "%{prefix}h{}",
                if value >= 6 { value - 6 } else { value }
            );
        } else {
            let _ = write!(s, "%{prefix}{value}");
        }
        at = t.end;
    }
    s.push_str(text.get(at..body.1).unwrap_or(""));
    s.push('\n');
    s
}

/// Bytes of a parameter list laid out as the driver lays it out (an
/// upper bound where alignments are doubtful); `None` if a parameter is
/// not understood.
fn param_bytes(params: &str) -> Option<u64> {
    let mut end = 0u64;
    let mut lx = Lexer::new(params, 0).peekable();
    while lx.peek().is_some() {
        let (mut size, mut align, mut count) = (None, 1u64, 1u64);
        let mut after_name = false;
        for t in lx.by_ref() {
            let w = word(params, t);
            match t.kind {
                Kind::Punct(b',') => break,
                Kind::Punct(b'[') | Kind::Punct(b']') => {}
                Kind::Other if after_name => {
                    let n: u64 = w.parse().ok()?;
                    count = count.checked_mul(n)?;
                }
                Kind::Other => {
                    // `.align N`
                    let n: u64 = w.parse().ok()?;
                    if !n.is_power_of_two() || n > 4096 {
                        return None;
                    }
                    align = align.max(n);
                }
                Kind::Ident if w.starts_with('.') => {
                    if let Some(n) = type_bytes(w) {
                        size = Some(n);
                    } else if !matches!(
                        w,
                        ".param"
                            | ".align"
                            | ".ptr"
                            | ".global"
                            | ".shared"
                            | ".const"
                            | ".local"
                            | ".v2"
                            | ".v4"
                    ) {
                        return None;
                    }
                    if w == ".v2" || w == ".v4" {
                        count = count.checked_mul(if w == ".v2" { 2 } else { 4 })?;
                    }
                }
                Kind::Ident => after_name = true,
                Kind::Punct(_) => return None,
            }
        }
        let size = size?;
        let align = align.max(size);
        end = end
            .checked_next_multiple_of(align)?
            .checked_add(size.checked_mul(count)?)?;
        if end > MAX_PART_PARAM_BYTES {
            return None;
        }
    }
    Some(end)
}

fn type_bytes(t: &str) -> Option<u64> {
    Some(match t {
        ".b8" | ".u8" | ".s8" => 1,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        ".b128" => 16,
        _ => return None,
    })
}
