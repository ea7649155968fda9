//! PTX text to [`crate::ir`]: module directives, variables, functions and
//! instructions.
//!
//! Syntax errors fail the whole module ([`Error::Parse`]); an instruction
//! that is well-formed but not implemented becomes
//! [`Op::Unsupported`](crate::ir::Op::Unsupported), which fails a launch
//! only when a thread reaches it.

use std::collections::HashMap;

use crate::ir::*;
use crate::lex::{Lexer, Tok, Token};
use crate::{Error, GLOBALS_BASE};

/// Instruction operands and modifiers into `ir::Op`s: the parser's
/// instruction half.
mod contract;
mod decode;

/// Longest PTX text accepted.
pub const MAX_TEXT_BYTES: usize = 64 << 20;
/// Most registers one function may declare.
pub const MAX_REGS: u32 = 1 << 18;
/// Most instructions in one function (after inlining); a module holds at
/// most twice as many in all, counted as calls are inlined.
pub const MAX_INSTS: usize = 1 << 20;
/// Most labels in one function (nvcc emits one per basic block); bounds
/// the parser's label table, which lives while the function is parsed.
pub const MAX_LABELS: usize = 1 << 17;
/// Most instructions in a module, after inlining.
const MODULE_INSTS: usize = 2 * MAX_INSTS;
/// Deepest chain of calls that is inlined.
const MAX_CALL_DEPTH: u32 = 32;
/// Most bytes of static `.shared` variables per function.
pub const MAX_STATIC_SHARED: u32 = 256 << 10;
/// Most bytes of `.local` variables per function.
pub const MAX_LOCAL: u32 = 16 << 20;
/// Most bytes of module-scope `.global` and `.const` variables.
pub const MAX_GLOBALS: u32 = 64 << 20;
/// Most bytes of param scratch in one module.
pub const MAX_PARAM_SCRATCH: u32 = 16 << 10;

/// Deepest nesting of initializer braces, vector operands and `a|b` pairs
/// (they are parsed recursively).
const MAX_NESTING: u32 = 16;

/// A module-scope `.global` or `.const` variable.
#[derive(Debug, Clone)]
pub(crate) struct GlobalVar {
    pub name: String,
    pub offset: u32,
    pub size: u32,
    /// Declared in `.const` (not `.global`).
    pub constant: bool,
    /// `.attribute(.managed)`: a `__managed__` variable, which the host
    /// program addresses too.
    pub managed: bool,
}

/// A parsed module.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub funcs: Vec<Func>,
    /// Each kernel's address ([`crate::func_addr`] of its declaration)
    /// and its index in `funcs`.
    pub entry_addrs: Vec<(u64, usize)>,
    pub globals: Vec<GlobalVar>,
    /// Initial bytes of all `.global`/`.const` variables, laid out at
    /// [`GLOBALS_BASE`].
    pub globals_init: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
enum Sym {
    /// An address in a state space (shared/local/param offsets; the global
    /// window for module variables).
    Addr(u64),
    Func(u32),
}

#[derive(Debug, Clone, Copy)]
enum RegDecl {
    One { idx: u32, bits: u32 },
    Range { base: u32, n: u32, bits: u32 },
}

/// Longest guest-chosen name an unsupported instruction's message quotes.
const MAX_QUOTED: usize = 120;
/// Longest message an unsupported instruction keeps.
const MAX_UNSUPPORTED: usize = 2 * MAX_QUOTED;

/// At most `max` bytes of `s`, cut at a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// An unsupported instruction. Its message is bounded, and the copies that
/// inlining makes share it, so instructions hold no more host memory than
/// the instruction limits allow for.
fn unsupported(what: &str) -> Op {
    Op::Unsupported(clip(what, MAX_UNSUPPORTED).into())
}

fn perr(line: u32, msg: impl Into<String>) -> Error {
    Error::Parse {
        line,
        msg: msg.into(),
    }
}

fn align_up(v: u64, a: u64) -> u64 {
    if a <= 1 {
        v
    } else {
        v.div_ceil(a) * a
    }
}

/// The parser's view of the text: the current token, lexed on demand.
struct P<'a> {
    /// Where the current token starts (a mark to come back to).
    at: Lexer<'a>,
    /// Just past the current token.
    after: Lexer<'a>,
    cur: Option<Token<'a>>,
    /// Line of the last token read, for errors at the end of the text.
    last_line: u32,
    /// The first lexical error. It ends the tokens, and it is the module's
    /// error, as if the whole text had been lexed first.
    err: Option<Error>,
}

impl<'a> P<'a> {
    fn new(text: &'a str) -> P<'a> {
        let l = Lexer::new(text);
        let mut p = P {
            at: l,
            after: l,
            cur: None,
            last_line: 0,
            err: None,
        };
        p.reset(l);
        p
    }
    /// Makes the token at `at` the current one.
    fn reset(&mut self, at: Lexer<'a>) {
        self.at = at;
        self.after = at;
        self.cur = match self.after.next_token() {
            Ok(t) => t,
            Err(e) => {
                self.err.get_or_insert(e);
                None
            }
        };
        if let Some(t) = self.cur {
            self.last_line = t.line;
        }
    }
    /// Where the current token starts, for [`P::reset`].
    fn mark(&self) -> Lexer<'a> {
        self.at
    }
    /// Moves to the next token.
    fn bump(&mut self) {
        if self.cur.is_some() {
            self.reset(self.after);
        }
    }
    fn peek(&self) -> Option<&Tok<'a>> {
        self.cur.as_ref().map(|t| &t.kind)
    }
    /// The token after the current one.
    fn peek_second(&self) -> Option<Tok<'a>> {
        self.cur?;
        let mut l = self.after;
        l.next_token().ok().flatten().map(|t| t.kind)
    }
    fn line(&self) -> u32 {
        self.cur.map_or(self.last_line, |t| t.line)
    }
    fn next(&mut self) -> Result<Tok<'a>, Error> {
        let t = self
            .cur
            .ok_or_else(|| perr(self.line(), "unexpected end of text"))?;
        self.bump();
        Ok(t.kind)
    }
    fn is_punct(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }
    fn eat_punct(&mut self, c: char) -> bool {
        if self.is_punct(c) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect_punct(&mut self, c: char) -> Result<(), Error> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            Err(perr(self.line(), format!("expected '{c}'")))
        }
    }
    fn ident(&mut self) -> Result<&'a str, Error> {
        match self.next()? {
            Tok::Ident(s) => Ok(s),
            t => Err(perr(self.line(), format!("expected a name, found {t:?}"))),
        }
    }
    fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(x)) if *x == s)
    }
    fn eat_ident(&mut self, s: &str) -> bool {
        if self.is_ident(s) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn uint(&mut self) -> Result<u64, Error> {
        match self.next()? {
            Tok::Int(v) => Ok(v),
            t => Err(perr(self.line(), format!("expected a number, found {t:?}"))),
        }
    }
    fn uint32(&mut self) -> Result<u32, Error> {
        let v = self.uint()?;
        u32::try_from(v).map_err(|_| perr(self.line(), format!("{v} is too large")))
    }
    /// Skips a `{ ... }` group (the opening brace already consumed).
    fn skip_braces(&mut self) -> Result<(), Error> {
        let mut depth = 1u32;
        while depth > 0 {
            match self.next()? {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth -= 1,
                _ => {}
            }
        }
        Ok(())
    }
    /// Skips to just past the next `;`.
    fn skip_statement(&mut self) -> Result<(), Error> {
        loop {
            if let Tok::Punct(';') = self.next()? {
                return Ok(());
            }
        }
    }
}

/// A raw operand before types are known.
#[derive(Debug, Clone)]
pub(crate) enum Opnd<'a> {
    Name(&'a str),
    Not(&'a str),
    Int(bool, u64),
    F32(u32),
    F64(u64),
    Float(f64),
    /// `[base + sym + off]`.
    Mem {
        reg: Option<&'a str>,
        sym: Option<&'a str>,
        off: i64,
    },
    Vec(Vec<Opnd<'a>>),
    /// `[a, c]` (or `[a, b, c]`) of texture and surface instructions: a
    /// handle, then coordinates.
    Image(Vec<Opnd<'a>>),
    /// `d|p`.
    Pair(Box<Opnd<'a>>, Box<Opnd<'a>>),
    Sink,
}

struct VarDecl<'a> {
    name: &'a str,
    align: u64,
    ty: Ty,
    /// Element count (`None` for `[]`); 1 for scalars.
    count: Option<u64>,
    /// Whether `= initializer` follows (read by [`var_decl`], left to the
    /// caller by [`var_head`]).
    has_init: bool,
    /// `.attribute(.managed)`.
    managed: bool,
}

/// Parses a whole module.
pub(crate) fn parse(text: &str) -> Result<Parsed, Error> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(perr(
            0,
            format!("text of {} bytes exceeds {MAX_TEXT_BYTES}", text.len()),
        ));
    }
    let mut p = P::new(text);
    let mut m = ModuleState::default();
    while p.peek().is_some() {
        if let Err(e) = m.top_level(&mut p) {
            return Err(p.err.take().unwrap_or(e));
        }
    }
    if let Some(e) = p.err.take() {
        return Err(e);
    }
    inline_calls(&mut m.funcs, &m.func_names)?;
    // The kernels' addresses (what a device-side launch names them by),
    // before declarations without a body drop out of the numbering.
    let mut kept = 0usize;
    for (i, f) in m.funcs.iter().enumerate() {
        if let Some(f) = f {
            if f.is_entry {
                m.out.entry_addrs.push((crate::func_addr(i as u32), kept));
            }
            kept += 1;
        }
    }
    m.out.funcs = m.funcs.into_iter().flatten().collect();
    Ok(m.out)
}

#[derive(Default)]
struct ModuleState {
    out: Parsed,
    syms: HashMap<String, Sym>,
    /// Functions by index; `None` for declarations without a body yet.
    funcs: Vec<Option<Func>>,
    func_names: Vec<String>,
    /// Module-scope `.shared` bytes.
    shared: u64,
    shared_align: u64,
    /// Module-scope `.extern .shared` arrays.
    extern_shared: Vec<String>,
    /// Next free local offset; every function's locals get their own.
    local_top: u64,
    /// Next free param scratch bytes after [`PARAM_SCRATCH_BASE`].
    scratch_top: u64,
    /// Instructions in all functions so far.
    insts: usize,
}

impl ModuleState {
    fn top_level(&mut self, p: &mut P<'_>) -> Result<(), Error> {
        let line = p.line();
        let start = p.mark();
        let d = match p.next()? {
            Tok::Ident(d) => d,
            Tok::Punct(';') => return Ok(()),
            t => return Err(perr(line, format!("unexpected {t:?} at module scope"))),
        };
        match d {
            ".version" => {
                p.next()?;
            }
            ".target" => {
                p.ident()?;
                while p.eat_punct(',') {
                    p.ident()?;
                }
            }
            ".address_size" => {
                let v = p.uint()?;
                if v != 64 {
                    return Err(Error::Unsupported {
                        what: format!(".address_size {v}"),
                    });
                }
            }
            ".file" => {
                p.uint()?;
                if let Some(Tok::Str(_)) = p.peek() {
                    p.next()?;
                }
                while p.eat_punct(',') {
                    p.uint()?;
                }
            }
            ".section" => {
                p.ident()?;
                p.expect_punct('{')?;
                p.skip_braces()?;
            }
            ".pragma" => p.skip_statement()?,
            ".visible" | ".extern" | ".weak" | ".common" => {
                let ext = d == ".extern";
                self.decl(p, ext)?;
            }
            _ => {
                p.reset(start);
                self.decl(p, false)?;
            }
        }
        Ok(())
    }

    fn decl(&mut self, p: &mut P<'_>, ext: bool) -> Result<(), Error> {
        let line = p.line();
        let d = p.ident()?;
        match d {
            ".entry" => self.function(p, true),
            ".func" => self.function(p, false),
            ".global" | ".const" => {
                let v = var_head(p)?;
                self.global_var(p, v, ext, d == ".const", line)?;
                p.expect_punct(';')
            }
            ".shared" => {
                let v = var_head(p)?;
                if v.has_init {
                    return Err(perr(line, "shared variables have no initializers"));
                }
                p.expect_punct(';')?;
                match v.count {
                    None => {
                        self.extern_shared.push(v.name.to_owned());
                        self.syms.remove(v.name);
                    }
                    Some(n) => {
                        let size = n.saturating_mul(u64::from(v.ty.bytes()));
                        let off = align_up(self.shared, v.align);
                        self.shared = off.saturating_add(size);
                        if self.shared > u64::from(MAX_STATIC_SHARED) {
                            return Err(perr(line, "static shared memory exceeds the limit"));
                        }
                        self.shared_align = self.shared_align.max(v.align);
                        self.syms.insert(v.name.to_owned(), Sym::Addr(off));
                    }
                }
                Ok(())
            }
            ".tex" | ".surf" | ".sampler" | ".texref" | ".surfref" | ".samplerref" => {
                // Declared texture references: usable only by tex
                // instructions, which are unsupported.
                p.skip_statement()
            }
            _ => Err(perr(line, format!("unexpected {d:?} at module scope"))),
        }
    }

    /// Lays out a module variable and reads its initializer (`v` is what
    /// precedes it), writing each element to the variables' bytes as it is
    /// read.
    fn global_var<'a>(
        &mut self,
        p: &mut P<'a>,
        v: VarDecl<'a>,
        ext: bool,
        constant: bool,
        line: u32,
    ) -> Result<(), Error> {
        // Elements declared; `[]` is sized by the initializer.
        let declared = match v.count {
            Some(n) => Some(n),
            None if ext => Some(0),
            None => None,
        };
        let esz = u64::from(v.ty.bytes());
        let off = align_up(self.out.globals_init.len() as u64, v.align.max(esz));
        let too_large = || perr(line, "module variables exceed the limit");
        let end = off.saturating_add(declared.unwrap_or(0).saturating_mul(esz));
        if end > u64::from(MAX_GLOBALS) {
            return Err(too_large());
        }
        self.out.globals_init.resize(end as usize, 0);
        let mut count = 0u64;
        if v.has_init {
            let (syms, bytes) = (&self.syms, &mut self.out.globals_init);
            initializer(
                p,
                &mut |o| {
                    if declared.is_some_and(|n| count >= n) {
                        return Err(perr(line, format!("too many initializers for {}", v.name)));
                    }
                    let bits = match o {
                        Opnd::Name(n) => match syms.get(n) {
                            Some(Sym::Addr(a)) => *a,
                            Some(Sym::Func(i)) => crate::func_addr(*i),
                            _ => return Err(perr(line, format!("unknown symbol {n}"))),
                        },
                        o => imm(&o, v.ty, line)?,
                    };
                    let at = off + count * esz;
                    if at + esz > u64::from(MAX_GLOBALS) {
                        return Err(too_large());
                    }
                    let (at, n) = (at as usize, esz as usize);
                    if bytes.len() < at + n {
                        bytes.resize(at + n, 0);
                    }
                    bytes[at..at + n].copy_from_slice(&bits.to_le_bytes()[..n]);
                    count += 1;
                    Ok(())
                },
                0,
            )?;
        }
        let size = declared.unwrap_or(count) * esz;
        self.out.globals.push(GlobalVar {
            name: v.name.to_owned(),
            offset: off as u32,
            size: size as u32,
            constant,
            managed: v.managed,
        });
        self.syms
            .insert(v.name.to_owned(), Sym::Addr(GLOBALS_BASE + off));
        Ok(())
    }

    fn function(&mut self, p: &mut P<'_>, is_entry: bool) -> Result<(), Error> {
        let line = p.line();
        let mut rets = Vec::new();
        if !is_entry && p.is_punct('(') {
            rets = param_list(p)?;
        }
        let name = p.ident()?;
        let params = if p.is_punct('(') {
            param_list(p)?
        } else {
            Vec::new()
        };
        // Performance tuning directives; the launch bounds are kept.
        let bounds = launch_bounds(p)?;
        let idx = match self.syms.get(name) {
            Some(Sym::Func(i)) => *i,
            Some(_) => return Err(perr(line, format!("{name} redefined"))),
            None => {
                let i = self.funcs.len() as u32;
                self.funcs.push(None);
                self.func_names.push(name.to_owned());
                self.syms.insert(name.to_owned(), Sym::Func(i));
                i
            }
        };
        if p.eat_punct(';') {
            return Ok(());
        }
        p.expect_punct('{')?;
        if self.funcs[idx as usize].is_some() {
            return Err(perr(line, format!("{name} defined twice")));
        }
        let mut f = FuncParser::new(self, name, is_entry, &params, &rets, line)?.body(p)?;
        (f.max_threads, f.reqntid) = bounds;
        self.insts += f.insts.len();
        if self.insts > MODULE_INSTS {
            return Err(perr(line, "too many instructions in the module"));
        }
        self.local_top = u64::from(f.local_bytes);
        self.scratch_top = u64::from(f.scratch_end) - PARAM_SCRATCH_BASE;
        if !is_entry {
            // A `.shared` variable declared in a function's body (NVVM
            // demotes a `__shared__` that one device function uses into
            // it) is laid out after the module's, and the functions and
            // kernels that follow start after it: inlined into any of them
            // it keeps its place. (A kernel that precedes the function
            // cannot make room for it; its call stays unsupported.)
            self.shared = self.shared.max(u64::from(f.static_shared));
        }
        self.funcs[idx as usize] = Some(f);
        Ok(())
    }
}

/// `.param [.align N] [.ptr ...] .type name[[N]]`, comma separated, in
/// parentheses.
fn param_list<'a>(p: &mut P<'a>) -> Result<Vec<VarDecl<'a>>, Error> {
    p.expect_punct('(')?;
    let mut out = Vec::new();
    if p.eat_punct(')') {
        return Ok(out);
    }
    loop {
        let line = p.line();
        let d = p.ident()?;
        if d != ".param" {
            return Err(Error::Unsupported {
                what: format!("parameter in state space {d} (line {line})"),
            });
        }
        out.push(var_decl(p)?);
        if p.eat_punct(')') {
            return Ok(out);
        }
        p.expect_punct(',')?;
    }
}

/// `[.align N] [.v2|.v4] [.ptr .space .align N] .type name[[N]]... [=]`:
/// a variable declaration up to its initializer.
fn var_head<'a>(p: &mut P<'a>) -> Result<VarDecl<'a>, Error> {
    let line = p.line();
    let mut align = 0u64;
    let mut ty = None;
    let mut vec = 1u64;
    let mut managed = false;
    loop {
        let d = match p.peek() {
            Some(Tok::Ident(d)) if d.starts_with('.') => *d,
            _ => break,
        };
        p.next()?;
        match d {
            ".align" => {
                align = p.uint()?;
                if !align.is_power_of_two() || align > 4096 {
                    return Err(perr(line, format!("bad alignment {align}")));
                }
            }
            ".v2" => vec = 2,
            ".v4" => vec = 4,
            ".ptr" | ".global" | ".shared" | ".const" | ".local" => {}
            ".attribute" => {
                // `.attribute(.managed)`; `.unified(...)` and others are
                // not.
                p.expect_punct('(')?;
                match p.ident()? {
                    ".managed" => managed = true,
                    a => {
                        return Err(Error::Unsupported {
                            what: format!("variable attribute {a} (line {line})"),
                        })
                    }
                }
                p.expect_punct(')')?;
            }
            _ => match d.strip_prefix('.').and_then(Ty::parse) {
                Some(t) => ty = Some(t),
                None => {
                    return Err(Error::Unsupported {
                        what: format!("variable qualifier {d} (line {line})"),
                    })
                }
            },
        }
    }
    let ty = ty.ok_or_else(|| perr(line, "variable without a type"))?;
    let name = p.ident()?;
    let mut count: Option<u64> = Some(vec);
    while p.eat_punct('[') {
        if p.eat_punct(']') {
            count = None;
            continue;
        }
        let n = p.uint()?;
        p.expect_punct(']')?;
        count = count.map(|c| c.saturating_mul(n));
    }
    Ok(VarDecl {
        name,
        align: align.max(u64::from(ty.bytes())),
        ty,
        count,
        has_init: p.eat_punct('='),
        managed,
    })
}

/// A variable declaration and its initializer, which is checked and
/// dropped (only module variables keep theirs).
fn var_decl<'a>(p: &mut P<'a>) -> Result<VarDecl<'a>, Error> {
    let v = var_head(p)?;
    if v.has_init {
        initializer(p, &mut |_| Ok(()), 0)?;
    }
    Ok(v)
}

/// The performance directives after a function's signature: the most
/// threads a block may have (`.maxntid x{, y{, z}}`: their product) and
/// the exact block shape it requires (`.reqntid x{, y{, z}}`); the others
/// (`.minnctapersm`, `.maxnreg`, `.maxclusterrank`, `.noreturn`, ...)
/// skipped.
fn launch_bounds(p: &mut P<'_>) -> Result<(Option<u32>, Option<[u32; 3]>), Error> {
    let (mut max, mut req) = (None, None);
    while let Some(Tok::Ident(d)) = p.peek() {
        if !d.starts_with('.') {
            break;
        }
        let d = *d;
        p.next()?;
        let mut dims = [1u32; 3];
        let mut n = 0;
        while let Some(t) = p.peek() {
            match t {
                Tok::Int(_) => {
                    let v = p.uint32()?;
                    if n < 3 {
                        dims[n] = v.max(1);
                    }
                    n += 1;
                }
                Tok::Punct(',') => {
                    p.next()?;
                }
                _ => break,
            }
        }
        match d {
            ".maxntid" if n > 0 => {
                max = Some(dims.iter().fold(1u32, |a, &b| a.saturating_mul(b)));
            }
            ".reqntid" if n > 0 => req = Some(dims),
            _ => {}
        }
    }
    Ok((max, req))
}

/// Skips directives with numeric arguments (`.maxntid 256, 1, 1`,
/// `.noreturn`) after a function's or prototype's signature.
fn skip_hints(p: &mut P<'_>) -> Result<(), Error> {
    while let Some(Tok::Ident(d)) = p.peek() {
        if !d.starts_with('.') {
            break;
        }
        p.next()?;
        while matches!(p.peek(), Some(Tok::Int(_)) | Some(Tok::Punct(','))) {
            p.next()?;
        }
    }
    Ok(())
}

/// A (possibly nested) initializer, flattened: each element goes to `out`
/// as it is read, so that nothing holds the whole initializer.
fn initializer<'a>(
    p: &mut P<'a>,
    out: &mut dyn FnMut(Opnd<'a>) -> Result<(), Error>,
    depth: u32,
) -> Result<(), Error> {
    if depth > MAX_NESTING {
        return Err(perr(p.line(), "initializer nested too deeply"));
    }
    if p.eat_punct('{') {
        if p.eat_punct('}') {
            return Ok(());
        }
        loop {
            initializer(p, out, depth + 1)?;
            if p.eat_punct('}') {
                return Ok(());
            }
            p.expect_punct(',')?;
        }
    }
    // `generic(sym)` is the symbol's address.
    if p.eat_ident("generic") {
        p.expect_punct('(')?;
        let n = p.ident()?;
        p.expect_punct(')')?;
        return out(Opnd::Name(n));
    }
    out(simple_operand(p)?)
}

/// A literal, a name, or `!name`.
fn simple_operand<'a>(p: &mut P<'a>) -> Result<Opnd<'a>, Error> {
    let line = p.line();
    let neg = p.eat_punct('-');
    Ok(match p.next()? {
        Tok::Int(v) => Opnd::Int(neg, v),
        Tok::F32(v) if !neg => Opnd::F32(v),
        Tok::F64(v) if !neg => Opnd::F64(v),
        Tok::Float(v) => Opnd::Float(if neg { -v } else { v }),
        Tok::Ident("_") if !neg => Opnd::Sink,
        Tok::Ident(s) if !neg => Opnd::Name(s),
        Tok::Punct('!') if !neg => Opnd::Not(p.ident()?),
        t => return Err(perr(line, format!("unexpected {t:?} in operand"))),
    })
}

/// Converts a literal to the bits of an operand of type `ty`.
pub(crate) fn imm(o: &Opnd<'_>, ty: Ty, line: u32) -> Result<u64, Error> {
    let bits = ty.bits();
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let as_float = |v: f64| -> u64 {
        match ty {
            Ty::F32 => u64::from((v as f32).to_bits()),
            Ty::F64 => v.to_bits(),
            Ty::F16 | Ty::F16x2 => u64::from(crate::float::f32_to_f16(v as f32)),
            Ty::BF16 | Ty::BF16x2 => u64::from(crate::float::f32_to_bf16(v as f32)),
            _ => 0,
        }
    };
    Ok(match *o {
        Opnd::Int(neg, v) => {
            if ty.is_float() {
                let f = v as f64;
                as_float(if neg { -f } else { f })
            } else if ty == Ty::Pred {
                u64::from(v != 0)
            } else {
                (if neg { v.wrapping_neg() } else { v }) & mask
            }
        }
        Opnd::F32(b) => match ty {
            Ty::F32 => u64::from(b),
            t if t.is_float() => as_float(f64::from(f32::from_bits(b))),
            // Hex float literals in integer contexts are their bits.
            _ => u64::from(b) & mask,
        },
        Opnd::F64(b) => match ty {
            t if t.is_float() => as_float(f64::from_bits(b)),
            _ => b & mask,
        },
        Opnd::Float(v) if ty.is_float() => as_float(v),
        _ => {
            return Err(perr(
                line,
                format!("bad immediate {o:?} for .{}", ty.name()),
            ))
        }
    })
}

struct Scope {
    regs: HashMap<String, RegDecl>,
    syms: HashMap<String, Sym>,
}

pub(crate) struct FuncParser<'m> {
    m: &'m ModuleState,
    f: Func,
    scopes: Vec<Scope>,
    labels: HashMap<String, u32>,
    fixups: Vec<(usize, String, u32)>,
    sink: Option<u32>,
    shared: u64,
    local: u64,
    body_params: u64,
    /// A `%reserved_smem_offset_*` register was read.
    reserved_smem: std::cell::Cell<bool>,
    /// `%envreg1` or `%envreg2` (the grid workspace's address) was read.
    grid_workspace: std::cell::Cell<bool>,
    /// `name: .callprototype (rets) _ (params);`: the sizes of each.
    protos: HashMap<String, (Vec<u32>, Vec<u32>)>,
    /// The float `add`, `sub` and `mul` written with no rounding modifier,
    /// which ptxas may contract (see [`contract`]).
    loose: Vec<usize>,
}

impl<'m> FuncParser<'m> {
    fn new(
        m: &'m ModuleState,
        name: &str,
        is_entry: bool,
        params: &[VarDecl<'_>],
        rets: &[VarDecl<'_>],
        line: u32,
    ) -> Result<Self, Error> {
        let mut syms = HashMap::new();
        fn layout(
            vs: &[VarDecl<'_>],
            syms: &mut HashMap<String, Sym>,
            off: &mut u64,
        ) -> Vec<Param> {
            let mut out = Vec::new();
            for v in vs {
                let size = v.count.unwrap_or(0).saturating_mul(u64::from(v.ty.bytes()));
                *off = align_up(*off, v.align);
                syms.insert(v.name.to_owned(), Sym::Addr(*off));
                out.push(Param {
                    offset: (*off).min(u64::from(u32::MAX)) as u32,
                    size: size.min(u64::from(u32::MAX)) as u32,
                });
                *off = off.saturating_add(size);
            }
            out
        }
        // Kernel parameters start at 0 (the launch's buffer); those of a
        // `.func` in the module-wide scratch, like every body's `.param`
        // variables.
        let scratch = PARAM_SCRATCH_BASE + m.scratch_top;
        let mut off = if is_entry { 0 } else { scratch };
        let params_l = layout(params, &mut syms, &mut off);
        let param_bytes = if is_entry { off } else { 0 };
        if param_bytes > u64::from(MAX_PARAM_BYTES) {
            return Err(perr(line, format!("parameters of {name} exceed the limit")));
        }
        let rets_l = layout(rets, &mut syms, &mut off);
        let body_params = if is_entry { scratch } else { off };
        if body_params > PARAM_SCRATCH_BASE + u64::from(MAX_PARAM_SCRATCH) {
            return Err(perr(line, format!("parameters of {name} exceed the limit")));
        }
        // Module-scope shared variables come first in every function.
        let shared = m.shared;
        Ok(FuncParser {
            m,
            f: Func {
                name: name.to_owned(),
                is_entry,
                params: params_l,
                rets: rets_l,
                param_bytes: param_bytes as u32,
                insts: Vec::new(),
                nregs: 0,
                static_shared: 0,
                dyn_shared_base: 0,
                reserved_smem: false,
                grid_workspace: false,
                local_bytes: 0,
                scratch_end: 0,
                frame_local: Vec::new(),
                frame_scratch: Vec::new(),
                max_threads: None,
                reqntid: None,
                fast: std::sync::OnceLock::new(),
            },
            scopes: vec![Scope {
                regs: HashMap::new(),
                syms,
            }],
            labels: HashMap::new(),
            fixups: Vec::new(),
            sink: None,
            shared,
            local: m.local_top,
            body_params,
            reserved_smem: std::cell::Cell::new(false),
            grid_workspace: std::cell::Cell::new(false),
            protos: HashMap::new(),
            loose: Vec::new(),
        })
    }

    fn new_regs(&mut self, n: u32, line: u32) -> Result<u32, Error> {
        let base = self.f.nregs;
        let end = base
            .checked_add(n)
            .filter(|&e| e <= MAX_REGS)
            .ok_or_else(|| perr(line, format!("more than {MAX_REGS} registers")))?;
        self.f.nregs = end;
        Ok(base)
    }

    fn body(mut self, p: &mut P<'_>) -> Result<Func, Error> {
        // The shared layout is final only after the whole body; extern
        // shared arrays are resolved lazily through `dyn_shared_base`,
        // which needs the static size first. Collect shared declarations
        // in a pre-pass.
        self.prescan_shared(p)?;
        loop {
            let line = p.line();
            match p.peek() {
                None => return Err(perr(line, "unterminated function body")),
                Some(Tok::Punct('}')) => {
                    p.next()?;
                    if self.scopes.len() == 1 {
                        break;
                    }
                    self.scopes.pop();
                }
                Some(Tok::Punct('{')) => {
                    p.next()?;
                    if self.scopes.len() > 64 {
                        return Err(perr(line, "blocks nested too deeply"));
                    }
                    self.scopes.push(Scope {
                        regs: HashMap::new(),
                        syms: HashMap::new(),
                    });
                }
                Some(Tok::Punct(';')) => {
                    p.next()?;
                }
                Some(Tok::Ident(s)) if s.starts_with('.') => self.directive(p)?,
                Some(Tok::Ident(s)) if p.peek_second() == Some(Tok::Punct(':')) => {
                    let s = (*s).to_owned();
                    p.bump();
                    p.bump();
                    if p.eat_ident(".callprototype") {
                        self.prototype(p, s, line)?;
                        continue;
                    }
                    let at = self.f.insts.len() as u32;
                    if self.labels.len() >= MAX_LABELS {
                        return Err(perr(
                            line,
                            format!("more than {MAX_LABELS} labels in one function"),
                        ));
                    }
                    if self.labels.insert(s.clone(), at).is_some() {
                        return Err(perr(line, format!("label {s} defined twice")));
                    }
                }
                Some(_) => self.instruction(p)?,
            }
        }
        // Falling off the end exits.
        self.f.insts.push(Inst {
            guard: None,
            op: Op::Ret,
            line: p.line(),
        });
        for (at, name, line) in std::mem::take(&mut self.fixups) {
            let target = *self
                .labels
                .get(&name)
                .ok_or_else(|| perr(line, format!("unknown label {name}")))?;
            if let Op::Bra { target: t } = &mut self.f.insts[at].op {
                *t = target;
            }
        }
        let n = self.f.insts.len();
        let mut loose = vec![false; n];
        self.loose.iter().for_each(|&i| loose[i] = true);
        let mut starts = vec![false; n];
        self.labels
            .values()
            .for_each(|&at| starts[at as usize] = true);
        contract::contract(&mut self.f.insts, loose, &starts);
        self.f.local_bytes = self.local as u32;
        self.f.scratch_end = self.body_params as u32;
        // Its own variables: from where the module's stood when it began.
        let local_start = self.m.local_top as u32;
        let scratch_start = (PARAM_SCRATCH_BASE + self.m.scratch_top) as u32;
        self.f.frame_local = vec![(local_start, self.f.local_bytes)];
        self.f.frame_scratch = vec![(scratch_start, self.f.scratch_end)];
        self.f.reserved_smem = self.reserved_smem.get();
        self.f.grid_workspace = self.grid_workspace.get();
        Ok(self.f)
    }

    /// Lays out the function's own `.shared` variables (which may appear
    /// after instructions that use extern shared arrays).
    fn prescan_shared(&mut self, p: &mut P<'_>) -> Result<(), Error> {
        let save = p.mark();
        let mut depth = 1u32;
        let mut align = self.m.shared_align.max(16);
        while depth > 0 {
            let line = p.line();
            match p.next()? {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth -= 1,
                Tok::Ident(".shared") if depth == 1 => {
                    let v = var_decl(p)?;
                    let Some(n) = v.count else { continue };
                    let size = n.saturating_mul(u64::from(v.ty.bytes()));
                    let off = align_up(self.shared, v.align);
                    self.shared = off.saturating_add(size);
                    if self.shared > u64::from(MAX_STATIC_SHARED) {
                        return Err(perr(line, "static shared memory exceeds the limit"));
                    }
                    align = align.max(v.align);
                    self.scopes[0]
                        .syms
                        .insert(v.name.to_owned(), Sym::Addr(off));
                }
                _ => {}
            }
        }
        p.reset(save);
        self.f.static_shared = self.shared as u32;
        self.f.dyn_shared_base = align_up(self.shared, align) as u32;
        Ok(())
    }

    /// `.callprototype (rets) _ (params);` after label `name`: the sizes
    /// of the return values and parameters an indirect call passes.
    fn prototype(&mut self, p: &mut P<'_>, name: String, line: u32) -> Result<(), Error> {
        let sizes = |vs: Vec<VarDecl<'_>>| -> Vec<u32> {
            vs.iter()
                .map(|v| {
                    let n = v.count.unwrap_or(0).saturating_mul(u64::from(v.ty.bytes()));
                    n.min(u64::from(u32::MAX)) as u32
                })
                .collect()
        };
        let rets = sizes(param_list(p)?);
        if !p.eat_ident("_") {
            return Err(perr(
                line,
                ".callprototype needs `_` for the function's name",
            ));
        }
        let params = if p.is_punct('(') {
            sizes(param_list(p)?)
        } else {
            Vec::new()
        };
        // `.noreturn` and `.abi_preserve*` hints.
        skip_hints(p)?;
        p.expect_punct(';')?;
        if self.protos.len() >= MAX_LABELS {
            return Err(perr(line, "too many call prototypes in one function"));
        }
        self.protos.insert(name, (rets, params));
        Ok(())
    }

    fn directive(&mut self, p: &mut P<'_>) -> Result<(), Error> {
        let line = p.line();
        let d = p.ident()?;
        // `.reg.b8 %r;` (NVRTC's bf16 headers write it so): the qualifiers
        // glued to the directive come first.
        let (d, glued) = match d.strip_prefix(".reg") {
            Some(rest) if rest.starts_with('.') => (".reg", rest),
            _ => (d, ""),
        };
        match d {
            ".reg" => {
                let mut ty = None;
                let mut vec = 1u32;
                let mut qualifier = |q: &str| -> Result<(), Error> {
                    match q {
                        ".v2" => vec = 2,
                        ".v4" => vec = 4,
                        _ => {
                            ty = q.strip_prefix('.').and_then(Ty::parse);
                            if ty.is_none() {
                                return Err(Error::Unsupported {
                                    what: format!("register type {q} (line {line})"),
                                });
                            }
                        }
                    }
                    Ok(())
                };
                for q in glued.split('.').filter(|q| !q.is_empty()) {
                    qualifier(&format!(".{q}"))?;
                }
                while let Some(Tok::Ident(q)) = p.peek() {
                    if !q.starts_with('.') {
                        break;
                    }
                    let q = *q;
                    p.next()?;
                    qualifier(q)?;
                }
                let ty = ty.ok_or_else(|| perr(line, ".reg without a type"))?;
                if vec != 1 {
                    return Err(Error::Unsupported {
                        what: format!("vector registers (line {line})"),
                    });
                }
                let bits = ty.bits().max(1);
                loop {
                    let name = p.ident()?;
                    let decl = if p.eat_punct('<') {
                        let n = p.uint32()?;
                        p.expect_punct('>')?;
                        let base = self.new_regs(n, line)?;
                        RegDecl::Range { base, n, bits }
                    } else {
                        let idx = self.new_regs(1, line)?;
                        RegDecl::One { idx, bits }
                    };
                    self.scopes
                        .last_mut()
                        .expect("a function has a scope")
                        .regs
                        .insert(name.to_owned(), decl);
                    if !p.eat_punct(',') {
                        break;
                    }
                }
                p.expect_punct(';')
            }
            ".shared" => {
                // Laid out by the pre-pass.
                var_decl(p)?;
                p.expect_punct(';')
            }
            ".local" | ".param" => {
                let v = var_decl(p)?;
                p.expect_punct(';')?;
                let n = v.count.ok_or_else(|| perr(line, "unsized variable"))?;
                let size = n.saturating_mul(u64::from(v.ty.bytes()));
                let (cur, max) = if d == ".local" {
                    (&mut self.local, u64::from(MAX_LOCAL))
                } else {
                    (
                        &mut self.body_params,
                        PARAM_SCRATCH_BASE + u64::from(MAX_PARAM_SCRATCH),
                    )
                };
                let off = align_up(*cur, v.align);
                *cur = off.saturating_add(size);
                if *cur > max {
                    return Err(perr(line, format!("{d} variables exceed the limit")));
                }
                self.scopes
                    .last_mut()
                    .expect("a function has a scope")
                    .syms
                    .insert(v.name.to_owned(), Sym::Addr(off));
                Ok(())
            }
            ".loc" => {
                // `.loc file line col [, function_name ..., inlined_at ...]`
                // ends at the end of its line.
                while p.peek().is_some() && p.line() == line {
                    p.next()?;
                }
                Ok(())
            }
            ".pragma" => p.skip_statement(),
            _ => Err(Error::Unsupported {
                what: format!("directive {d} in a function body (line {line})"),
            }),
        }
    }

    fn lookup_reg(&self, name: &str) -> Option<(u32, u32)> {
        for s in self.scopes.iter().rev() {
            if let Some(RegDecl::One { idx, bits }) = s.regs.get(name) {
                return Some((*idx, *bits));
            }
        }
        let digits = name.len() - name.bytes().rev().take_while(u8::is_ascii_digit).count();
        if digits == name.len() || digits == 0 {
            return None;
        }
        let (prefix, num) = name.split_at(digits);
        if num.len() > 1 && num.starts_with('0') {
            return None;
        }
        let k: u32 = num.parse().ok()?;
        for s in self.scopes.iter().rev() {
            if let Some(RegDecl::Range { base, n, bits }) = s.regs.get(prefix) {
                return (k < *n).then_some((base + k, *bits));
            }
        }
        None
    }

    fn lookup_sym(&self, name: &str) -> Option<Sym> {
        for s in self.scopes.iter().rev() {
            if let Some(v) = s.syms.get(name) {
                return Some(*v);
            }
        }
        if self.m.extern_shared.iter().any(|n| n == name) {
            return Some(Sym::Addr(u64::from(self.f.dyn_shared_base)));
        }
        self.m.syms.get(name).copied()
    }

    fn instruction(&mut self, p: &mut P<'_>) -> Result<(), Error> {
        let line = p.line();
        if self.f.insts.len() >= MAX_INSTS {
            return Err(perr(line, "too many instructions"));
        }
        let mut guard = None;
        if p.eat_punct('@') {
            let neg = p.eat_punct('!');
            let r = p.ident()?;
            let (reg, _) = self
                .lookup_reg(r)
                .ok_or_else(|| perr(line, format!("unknown register {r}")))?;
            guard = Some(Guard { reg, neg });
        }
        let opcode = p.ident()?;
        if !decode::known(opcode) {
            p.skip_statement()?;
            self.f.insts.push(Inst {
                guard,
                op: unsupported(&format!("{} (line {line})", clip(opcode, MAX_QUOTED))),
                line,
            });
            return Ok(());
        }
        // Operands, split at top-level commas.
        let mut ops: Vec<Opnd<'_>> = Vec::new();
        if !p.is_punct(';') {
            loop {
                ops.push(self.operand(p, 0)?);
                if ops.len() > 16 {
                    return Err(perr(line, "too many operands"));
                }
                if p.eat_punct(',') {
                    continue;
                }
                break;
            }
        }
        // `call` lists end in parentheses; accept them as operands.
        p.expect_punct(';')?;
        let op = match self.decode(opcode, &ops, line) {
            Ok(op) => op,
            Err(Error::Unsupported { what }) => unsupported(&what),
            Err(e) => return Err(e),
        };
        if matches!(
            op,
            Op::FBin {
                op: FBin::Add | FBin::Sub | FBin::Mul,
                ty: Ty::F32 | Ty::F64,
                ..
            }
        ) && !opcode
            .split('.')
            .any(|m| matches!(m, "rn" | "rz" | "rm" | "rp"))
        {
            self.loose.push(self.f.insts.len());
        }
        if let Op::Bra { .. } = op {
            let Some(Opnd::Name(l)) = ops.first() else {
                return Err(perr(line, "bra needs a label"));
            };
            self.fixups
                .push((self.f.insts.len(), (*l).to_owned(), line));
        }
        self.f.insts.push(Inst { guard, op, line });
        Ok(())
    }

    fn operand<'a>(&self, p: &mut P<'a>, depth: u32) -> Result<Opnd<'a>, Error> {
        let line = p.line();
        if depth > MAX_NESTING {
            return Err(perr(line, "operand nested too deeply"));
        }
        let o = if p.eat_punct('[') {
            if matches!(p.peek(), Some(Tok::Ident(_))) && p.peek_second() == Some(Tok::Punct(',')) {
                return self.image_operand(p, depth);
            }
            let mut reg = None;
            let mut sym = None;
            let mut off: i64 = 0;
            let mut first = true;
            loop {
                if p.eat_punct(']') {
                    break;
                }
                let mut neg = false;
                if !first {
                    if p.eat_punct('-') {
                        neg = true;
                    } else {
                        p.expect_punct('+')?;
                    }
                }
                if p.eat_punct('-') {
                    neg = !neg;
                }
                first = false;
                match p.next()? {
                    Tok::Int(v) => {
                        let v = v as i64;
                        off = if neg {
                            off.wrapping_sub(v)
                        } else {
                            off.wrapping_add(v)
                        };
                    }
                    Tok::Ident(n) if !neg => {
                        if self.lookup_reg(n).is_some() {
                            if reg.replace(n).is_some() {
                                return Err(perr(line, "two registers in an address"));
                            }
                        } else if sym.replace(n).is_some() {
                            return Err(perr(line, "two symbols in an address"));
                        }
                    }
                    t => return Err(perr(line, format!("unexpected {t:?} in an address"))),
                }
            }
            Opnd::Mem { reg, sym, off }
        } else if p.eat_punct('{') {
            let mut v = Vec::new();
            loop {
                v.push(self.operand(p, depth + 1)?);
                if v.len() > 8 {
                    return Err(perr(line, "vector too long"));
                }
                if p.eat_punct('}') {
                    break;
                }
                p.expect_punct(',')?;
            }
            Opnd::Vec(v)
        } else if p.eat_punct('(') {
            // Argument lists of `call`.
            let mut v = Vec::new();
            if !p.eat_punct(')') {
                loop {
                    v.push(self.operand(p, depth + 1)?);
                    if v.len() > 256 {
                        return Err(perr(line, "too many call arguments"));
                    }
                    if p.eat_punct(')') {
                        break;
                    }
                    p.expect_punct(',')?;
                }
            }
            Opnd::Vec(v)
        } else {
            let o = simple_operand(p)?;
            if let Opnd::Name(n) = o {
                // `name+4` as an immediate address.
                if p.is_punct('+') {
                    if let Some(Tok::Int(v)) = p.peek_second() {
                        let off = v as i64;
                        p.bump();
                        p.bump();
                        return Ok(Opnd::Mem {
                            reg: None,
                            sym: Some(n),
                            off,
                        });
                    }
                }
            }
            o
        };
        if p.eat_punct('|') {
            let q = self.operand(p, depth + 1)?;
            return Ok(Opnd::Pair(Box::new(o), Box::new(q)));
        }
        Ok(o)
    }

    /// The rest of `[a, c]` (the `[` consumed): the operands of a texture
    /// or surface instruction's image reference.
    fn image_operand<'a>(&self, p: &mut P<'a>, depth: u32) -> Result<Opnd<'a>, Error> {
        let line = p.line();
        let mut v = Vec::new();
        loop {
            v.push(self.operand(p, depth + 1)?);
            if v.len() > 4 {
                return Err(perr(line, "too many operands in brackets"));
            }
            if p.eat_punct(']') {
                break;
            }
            p.expect_punct(',')?;
        }
        Ok(Opnd::Image(v))
    }

    // ---- operand resolution ------------------------------------------------

    pub(crate) fn dst(&mut self, o: &Opnd<'_>, line: u32) -> Result<u32, Error> {
        match o {
            Opnd::Name(n) => self
                .lookup_reg(n)
                .map(|r| r.0)
                .ok_or_else(|| perr(line, format!("{n} is not a register"))),
            Opnd::Sink => self.sink(line),
            _ => Err(perr(line, format!("destination {o:?} is not a register"))),
        }
    }

    pub(crate) fn sink(&mut self, line: u32) -> Result<u32, Error> {
        if let Some(s) = self.sink {
            return Ok(s);
        }
        let s = self.new_regs(1, line)?;
        self.sink = Some(s);
        Ok(s)
    }

    pub(crate) fn src(&self, o: &Opnd<'_>, ty: Ty, line: u32) -> Result<Src, Error> {
        match o {
            Opnd::Name(n) => {
                if let Some((r, _)) = self.lookup_reg(n) {
                    return Ok(Src::Reg(r));
                }
                if let Some(s) = sreg(n) {
                    if matches!(
                        s,
                        Sreg::ReservedBegin
                            | Sreg::ReservedEnd
                            | Sreg::ReservedCap
                            | Sreg::Reserved(_)
                    ) {
                        self.reserved_smem.set(true);
                    }
                    if matches!(s, Sreg::EnvReg(1 | 2)) {
                        self.grid_workspace.set(true);
                    }
                    return Ok(Src::Sreg(s));
                }
                // The one predefined constant name PTX has.
                if *n == "WARP_SZ" && self.lookup_sym(n).is_none() {
                    return Ok(Src::Imm(32));
                }
                match self.lookup_sym(n) {
                    Some(Sym::Addr(a)) => Ok(Src::Imm(a)),
                    Some(Sym::Func(i)) => Ok(Src::Imm(crate::func_addr(i))),
                    None => Err(perr(line, format!("unknown name {n}"))),
                }
            }
            Opnd::Not(n) => match self.lookup_reg(n) {
                Some((r, _)) => Ok(Src::NotPred(r)),
                None => Err(perr(line, format!("{n} is not a register"))),
            },
            Opnd::Mem {
                reg: None,
                sym: Some(s),
                off,
            } => match self.lookup_sym(s) {
                Some(Sym::Addr(a)) => Ok(Src::Imm(a.wrapping_add(*off as u64))),
                _ => Err(perr(line, format!("unknown name {s}"))),
            },
            o => Ok(Src::Imm(imm(o, ty, line)?)),
        }
    }

    pub(crate) fn addr(&self, o: &Opnd<'_>, line: u32) -> Result<Addr, Error> {
        let Opnd::Mem { reg, sym, off } = o else {
            return Err(perr(line, format!("expected an address, found {o:?}")));
        };
        let mut a = Addr::absolute(*off);
        if let Some(r) = reg {
            if let Some((idx, bits)) = self.lookup_reg(r) {
                a.base = Some(idx);
                a.narrow = bits < 64;
            }
        }
        if let Some(s) = sym {
            match self.lookup_sym(s) {
                Some(Sym::Addr(v)) => a.off = a.off.wrapping_add(v as i64),
                _ => return Err(perr(line, format!("unknown name {s}"))),
            }
        }
        Ok(a)
    }

    /// `call{.uni} [(rets),] func[, (args)]` of a `.func` of this module.
    pub(crate) fn call(&self, ops: &[Opnd<'_>], line: u32) -> Result<Op, Error> {
        if let Some((Opnd::Name(proto), rest)) = ops.split_last() {
            if let Some((ret_sizes, arg_sizes)) = self.protos.get(*proto) {
                return self.call_indirect(rest, ret_sizes, arg_sizes, line);
            }
        }
        let (rets, name, args): (&[Opnd<'_>], &str, &[Opnd<'_>]) = match ops {
            [Opnd::Vec(r), Opnd::Name(f), Opnd::Vec(a)] => (r, f, a),
            [Opnd::Vec(r), Opnd::Name(f)] => (r, f, &[]),
            [Opnd::Name(f), Opnd::Vec(a)] => (&[], f, a),
            [Opnd::Name(f)] => (&[], f, &[]),
            _ => {
                return Err(Error::Unsupported {
                    what: format!("indirect call (line {line})"),
                })
            }
        };
        let Some(Sym::Func(func)) = self.lookup_sym(name) else {
            return Err(Error::Unsupported {
                what: format!("call of {name} (line {line})"),
            });
        };
        let rets = rets
            .iter()
            .map(|o| self.param_var(o, name, line))
            .collect::<Result<_, _>>()?;
        let args = args
            .iter()
            .map(|o| self.param_var(o, name, line))
            .collect::<Result<_, _>>()?;
        Ok(Op::Call { func, rets, args })
    }

    /// `call [(rets),] %r, [(args),]` through prototype `proto`.
    fn call_indirect(
        &self,
        ops: &[Opnd<'_>],
        ret_sizes: &[u32],
        arg_sizes: &[u32],
        line: u32,
    ) -> Result<Op, Error> {
        let (rets, target, args): (&[Opnd<'_>], &str, &[Opnd<'_>]) = match ops {
            [Opnd::Vec(r), Opnd::Name(f), Opnd::Vec(a)] => (r, f, a),
            [Opnd::Vec(r), Opnd::Name(f)] => (r, f, &[]),
            [Opnd::Name(f), Opnd::Vec(a)] => (&[], f, a),
            [Opnd::Name(f)] => (&[], f, &[]),
            _ => return Err(perr(line, "malformed indirect call")),
        };
        let Some((target, _)) = self.lookup_reg(target) else {
            return Err(perr(line, format!("{target} is not a register")));
        };
        if rets.len() != ret_sizes.len() || args.len() != arg_sizes.len() {
            return Err(perr(line, "indirect call does not match its prototype"));
        }
        let name = "a function pointer";
        Ok(Op::CallIndirect(Box::new(CallIndirect {
            target,
            rets: rets
                .iter()
                .map(|o| self.param_var(o, name, line))
                .collect::<Result<_, _>>()?,
            args: args
                .iter()
                .map(|o| self.param_var(o, name, line))
                .collect::<Result<_, _>>()?,
            ret_sizes: ret_sizes.to_vec(),
            arg_sizes: arg_sizes.to_vec(),
        })))
    }

    /// A call's argument or return variable: a `.param` of the caller.
    fn param_var(&self, o: &Opnd<'_>, name: &str, line: u32) -> Result<u32, Error> {
        if let Opnd::Name(n) = o {
            if let Some(Sym::Addr(a)) = self.lookup_sym(n) {
                if a >= PARAM_SCRATCH_BASE && a < PARAM_SCRATCH_BASE + u64::from(MAX_PARAM_SCRATCH)
                {
                    return Ok(a as u32);
                }
            }
        }
        Err(Error::Unsupported {
            what: format!(
                "call of {name} with an argument that is not a .param variable (line {line})"
            ),
        })
    }

    pub(crate) fn vec_dsts(&mut self, o: &Opnd<'_>, line: u32) -> Result<(Regs4, u8), Error> {
        let mut out = [0u32; 4];
        match o {
            Opnd::Vec(v) if matches!(v.len(), 2 | 4) => {
                for (k, e) in v.iter().enumerate() {
                    out[k] = self.dst(e, line)?;
                }
                Ok((out, v.len() as u8))
            }
            Opnd::Vec(v) => Err(Error::Unsupported {
                what: format!("vector of {} elements", v.len()),
            }),
            o => {
                out[0] = self.dst(o, line)?;
                Ok((out, 1))
            }
        }
    }

    pub(crate) fn vec_srcs(&self, o: &Opnd<'_>, ty: Ty, line: u32) -> Result<(Srcs4, u8), Error> {
        let mut out = [Src::Imm(0); 4];
        match o {
            Opnd::Vec(v) if matches!(v.len(), 2 | 4) => {
                for (k, e) in v.iter().enumerate() {
                    out[k] = self.src(e, ty, line)?;
                }
                Ok((out, v.len() as u8))
            }
            Opnd::Vec(v) => Err(Error::Unsupported {
                what: format!("vector of {} elements", v.len()),
            }),
            o => {
                out[0] = self.src(o, ty, line)?;
                Ok((out, 1))
            }
        }
    }
}

fn sreg(n: &str) -> Option<Sreg> {
    let dim = |s: &str| match s {
        "x" => Some(0u8),
        "y" => Some(1),
        "z" => Some(2),
        _ => None,
    };
    if let Some((base, d)) = n.rsplit_once('.') {
        let d = dim(d)?;
        return Some(match base {
            "%tid" => Sreg::Tid(d),
            "%ntid" => Sreg::Ntid(d),
            "%ctaid" => Sreg::Ctaid(d),
            "%nctaid" => Sreg::Nctaid(d),
            // Every launch SimGpu runs is one block per cluster.
            "%clusterid" => Sreg::Ctaid(d),
            "%nclusterid" => Sreg::Nctaid(d),
            "%cluster_ctaid" => Sreg::Zero,
            "%cluster_nctaid" => Sreg::One,
            _ => return None,
        });
    }
    Some(match n {
        "%laneid" => Sreg::LaneId,
        "%cluster_ctarank" | "%is_explicit_cluster" => Sreg::Zero,
        "%cluster_nctarank" => Sreg::One,
        "%warpid" => Sreg::WarpId,
        "%nwarpid" => Sreg::NWarpId,
        "%smid" => Sreg::SmId,
        "%nsmid" => Sreg::NSmId,
        "%gridid" => Sreg::GridId,
        "%clock" => Sreg::Clock,
        "%clock_hi" => Sreg::ClockHi,
        "%clock64" => Sreg::Clock64,
        "%globaltimer" => Sreg::GlobalTimer,
        "%globaltimer_lo" => Sreg::GlobalTimerLo,
        "%globaltimer_hi" => Sreg::GlobalTimerHi,
        "%lanemask_eq" => Sreg::LaneMaskEq,
        "%lanemask_lt" => Sreg::LaneMaskLt,
        "%lanemask_le" => Sreg::LaneMaskLe,
        "%lanemask_gt" => Sreg::LaneMaskGt,
        "%lanemask_ge" => Sreg::LaneMaskGe,
        "%dynamic_smem_size" => Sreg::DynamicSmem,
        "%total_smem_size" => Sreg::TotalSmem,
        "%reserved_smem_offset_begin" => Sreg::ReservedBegin,
        "%reserved_smem_offset_end" => Sreg::ReservedEnd,
        "%reserved_smem_offset_cap" => Sreg::ReservedCap,
        "%reserved_smem_offset_0" => Sreg::Reserved(0),
        "%reserved_smem_offset_1" => Sreg::Reserved(1),
        _ => {
            let k: u8 = n.strip_prefix("%envreg")?.parse().ok()?;
            return (k < 32).then_some(Sreg::EnvReg(k));
        }
    })
}

/// Replaces every `call` by the callee's body (callees first). Calls of
/// functions without a body, recursive calls and calls whose arguments do
/// not match the callee become [`Op::Unsupported`].
///
/// The module's instructions are counted as each function grows, and a
/// function that would take them past `2 * MAX_INSTS` fails the module
/// before its new body is allocated: the module never holds more than its
/// limit, however many functions inline large callees.
fn inline_calls(funcs: &mut [Option<Func>], names: &[String]) -> Result<(), Error> {
    let mut state = vec![0u8; funcs.len()];
    // At most MODULE_INSTS: `ModuleState::function` checked as it parsed.
    let mut module_insts: usize = funcs.iter().flatten().map(|f| f.insts.len()).sum();
    for i in 0..funcs.len() {
        expand(i, funcs, names, &mut state, &mut module_insts, 0)?;
    }
    for i in 0..funcs.len() {
        link_frames(i, funcs, names, &mut module_insts)?;
    }
    Ok(())
}

/// Makes the recursive calls ([`Op::CallRec`]) that kernel `i` reaches
/// real calls: the body of each function they call is placed after the
/// kernel's own (once, its registers after the kernel's, its returns
/// [`Op::RetFrame`]) and each call becomes a [`Op::CallFrame`] to it.
/// A body that would take the kernel past its instruction limits leaves
/// its calls unsupported.
fn link_frames(
    i: usize,
    funcs: &mut [Option<Func>],
    names: &[String],
    module_insts: &mut usize,
) -> Result<(), Error> {
    let Some(mut f) = funcs[i].take() else {
        return Ok(());
    };
    if !f.is_entry || !f.insts.iter().any(|x| matches!(x.op, Op::CallRec { .. })) {
        funcs[i] = Some(f);
        return Ok(());
    }
    // Callee index -> (first instruction, first register) in `f`.
    let mut placed: HashMap<u32, (u32, u32)> = HashMap::new();
    let mut next = 0usize;
    // Instructions are appended while scanning: `next` walks them all.
    while next < f.insts.len() {
        let Op::CallRec { func, .. } = f.insts[next].op else {
            next += 1;
            continue;
        };
        let line = f.insts[next].line;
        next += 1;
        if placed.contains_key(&func) {
            continue;
        }
        let Some(c) = funcs.get(func as usize).and_then(Option::as_ref) else {
            continue;
        };
        if f.insts.len() + c.insts.len() > MAX_INSTS || *module_insts + c.insts.len() > MODULE_INSTS
        {
            continue;
        }
        let Ok(shift) = grow_regs(&mut f, c.nregs, line) else {
            continue;
        };
        *module_insts += c.insts.len();
        placed.insert(func, (f.insts.len() as u32, shift));
        copy_body(&mut f.insts, c, shift, Op::RetFrame);
        f.local_bytes = f.local_bytes.max(c.local_bytes);
        f.scratch_end = f.scratch_end.max(c.scratch_end);
        f.reserved_smem |= c.reserved_smem;
        f.grid_workspace |= c.grid_workspace;
    }
    for x in &mut f.insts {
        let Op::CallRec { func, rets, args } = &x.op else {
            continue;
        };
        let resolved = placed
            .get(func)
            .zip(funcs.get(*func as usize).and_then(Option::as_ref));
        x.op = match resolved {
            Some((&(target, shift), c))
                if c.params.len() == args.len() && rets_match(c.rets.len(), rets.len()) =>
            {
                Op::CallFrame(Box::new(CallFrame {
                    target,
                    regs: (shift, c.nregs),
                    local: c.frame_local.clone(),
                    scratch: c.frame_scratch.clone(),
                    args: args
                        .iter()
                        .zip(&c.params)
                        .map(|(&a, p)| (a, p.offset, p.size))
                        .collect(),
                    rets: c
                        .rets
                        .iter()
                        .zip(rets)
                        .map(|(p, &r)| (p.offset, r, p.size))
                        .collect(),
                }))
            }
            _ => {
                let name = names.get(*func as usize).map_or("?", String::as_str);
                unsupported(&format!(
                    "recursive call of {} too large to place (line {})",
                    clip(name, MAX_QUOTED),
                    x.line
                ))
            }
        };
    }
    funcs[i] = Some(f);
    Ok(())
}

/// `state`: 0 not yet expanded, 1 being expanded (a call to it is
/// recursive), 2 done.
fn expand(
    i: usize,
    funcs: &mut [Option<Func>],
    names: &[String],
    state: &mut [u8],
    module_insts: &mut usize,
    depth: u32,
) -> Result<(), Error> {
    // Too deep a chain: the caller's call stays unsupported.
    if state[i] != 0 || depth > MAX_CALL_DEPTH {
        return Ok(());
    }
    state[i] = 1;
    let Some(mut f) = funcs[i].take() else {
        state[i] = 2;
        return Ok(());
    };
    let mut callees: Vec<usize> = Vec::new();
    for x in &f.insts {
        match &x.op {
            Op::Call { func, .. } => callees.push(*func as usize),
            Op::CallIndirect(ci) => callees.extend(
                funcs
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| c.as_ref().is_some_and(|c| fits(c, ci)))
                    .map(|(j, _)| j),
            ),
            _ => {}
        }
    }
    callees.sort_unstable();
    callees.dedup();
    for c in callees {
        expand(c, funcs, names, state, module_insts, depth + 1)?;
    }
    let r = splice(&mut f, funcs, names, state, module_insts);
    funcs[i] = Some(f);
    state[i] = 2;
    r
}

/// What [`splice`] does with one instruction.
enum Plan<'f> {
    Keep,
    /// A direct call: the callee's body.
    Inline(&'f Func),
    /// A call through a pointer: a [`Op::Dispatch`] to a copy of each
    /// function the prototype fits (index, function).
    Indirect(Vec<(usize, &'f Func)>),
}

/// Functions an indirect call with these sizes may reach: every `.func`
/// with a body whose parameters and return values have them.
fn fits(c: &Func, ci: &CallIndirect) -> bool {
    !c.is_entry
        && c.params
            .iter()
            .map(|p| p.size)
            .eq(ci.arg_sizes.iter().copied())
        && c.rets
            .iter()
            .map(|p| p.size)
            .eq(ci.ret_sizes.iter().copied())
}

/// Most instructions the copies of one indirect call's candidates may
/// add; beyond it the call fails when reached instead of growing the
/// function.
const MAX_INDIRECT_INSTS: usize = MAX_INSTS / 8;

fn splice(
    f: &mut Func,
    funcs: &[Option<Func>],
    names: &[String],
    state: &[u8],
    module_insts: &mut usize,
) -> Result<(), Error> {
    if !f
        .insts
        .iter()
        .any(|x| matches!(x.op, Op::Call { .. } | Op::CallIndirect(_)))
    {
        return Ok(());
    }
    // A callee whose shared variables lie beyond this function's shared
    // memory (it was defined after this function) is not inlined.
    let room = f.static_shared;
    let plan = |op: &Op| -> Plan<'_> {
        match op {
            Op::Call { func, rets, args } => {
                match funcs.get(*func as usize).and_then(Option::as_ref) {
                    Some(c)
                        if state[*func as usize] == 2
                            && c.params.len() == args.len()
                            && rets_match(c.rets.len(), rets.len())
                            && c.static_shared <= room =>
                    {
                        Plan::Inline(c)
                    }
                    _ => Plan::Keep,
                }
            }
            Op::CallIndirect(ci) => Plan::Indirect(
                funcs
                    .iter()
                    .enumerate()
                    .filter_map(|(j, c)| Some((j, c.as_ref()?)))
                    .filter(|&(j, c)| state[j] == 2 && fits(c, ci) && c.static_shared <= room)
                    .collect(),
            ),
            _ => Plan::Keep,
        }
    };
    // The module's instructions other than this function's.
    let others = *module_insts - f.insts.len();
    let old = std::mem::take(&mut f.insts);
    let mut plans = Vec::with_capacity(old.len());
    // Where each old instruction lands.
    let mut at = Vec::with_capacity(old.len() + 1);
    let mut total = 0usize;
    for inst in &old {
        at.push(total as u32);
        let mut p = plan(&inst.op);
        let guard = usize::from(inst.guard.is_some());
        total += match (&p, &inst.op) {
            (Plan::Inline(c), Op::Call { rets, args, .. }) => {
                // inline_body copies out the return values the callee has.
                guard + args.len() + c.insts.len() + rets.len().min(c.rets.len())
            }
            (Plan::Indirect(cs), Op::CallIndirect(ci)) => {
                let copies: usize = cs
                    .iter()
                    .map(|(_, c)| ci.args.len() + c.insts.len() + ci.rets.len() + 1)
                    .sum();
                if copies > MAX_INDIRECT_INSTS {
                    p = Plan::Keep;
                    1
                } else {
                    guard + 1 + copies
                }
            }
            _ => 1,
        };
        plans.push(p);
        if total > MAX_INSTS {
            return Err(perr(inst.line, "inlined calls make the function too long"));
        }
        if others + total > MODULE_INSTS {
            return Err(perr(
                inst.line,
                format!("inlined calls make the module longer than {MODULE_INSTS} instructions"),
            ));
        }
    }
    *module_insts = others + total;
    at.push(total as u32);
    let mut out: Vec<Inst> = Vec::with_capacity(total);
    for ((k, inst), plan) in old.into_iter().enumerate().zip(plans) {
        let line = inst.line;
        let end = at[k + 1];
        match (&inst.op, plan) {
            (Op::Call { rets, args, .. }, Plan::Inline(c)) => {
                if let Some(g) = inst.guard {
                    out.push(skip_unless(g, end, line));
                }
                let shift = grow_regs(f, c.nregs, line)?;
                inline_body(&mut out, f, c, args, rets, shift, line, None);
            }
            (Op::CallIndirect(ci), Plan::Indirect(cs)) => {
                if let Some(g) = inst.guard {
                    out.push(skip_unless(g, end, line));
                }
                let dispatch = out.len();
                out.push(Inst {
                    guard: None,
                    op: Op::Nop,
                    line,
                });
                // Each thread runs one candidate: they share registers.
                let shift = grow_regs(f, cs.iter().map(|(_, c)| c.nregs).max().unwrap_or(0), line)?;
                let mut cases = Vec::with_capacity(cs.len());
                for (j, c) in cs {
                    cases.push((crate::func_addr(j as u32), out.len() as u32));
                    inline_body(&mut out, f, c, &ci.args, &ci.rets, shift, line, Some(end));
                }
                out[dispatch].op = Op::Dispatch {
                    target: ci.target,
                    cases: cases.into_boxed_slice(),
                };
            }
            (Op::CallIndirect(_), _) => out.push(Inst {
                guard: inst.guard,
                op: unsupported(&format!(
                    "indirect call whose candidate functions are too large to inline (line {line})"
                )),
                line,
            }),
            // A call of a function being expanded: a recursive call.
            (Op::Call { func, rets, args }, _) if state.get(*func as usize) == Some(&1) => {
                out.push(Inst {
                    guard: inst.guard,
                    op: Op::CallRec {
                        func: *func,
                        rets: rets.clone(),
                        args: args.clone(),
                    },
                    line,
                });
            }
            (Op::Call { func, rets, args }, _) => {
                let name = names.get(*func as usize).map_or("?", String::as_str);
                let op = match (name, &args[..], &rets[..]) {
                    // The CUDA runtime's device functions the driver provides.
                    ("vprintf", &[fmt, a], rets) if rets.len() <= 1 => Op::Printf {
                        fmt,
                        args: a,
                        ret: rets.first().copied(),
                    },
                    ("__assertfail", &[m, fl, ln, fun, size], []) => Op::AssertFail {
                        args: [m, fl, ln, fun, size],
                    },
                    ("malloc", &[size], &[ret]) => Op::Malloc { size, ret },
                    ("free", &[ptr], []) => Op::Free { ptr },
                    ("cudaGraphSetConditional", &[handle, value], []) => {
                        Op::SetConditional { handle, value }
                    }
                    (name, args, rets)
                        if DevRt::from_name(name).is_some_and(|(_, n, r)| {
                            n == args.len() && rets.len() <= usize::from(r)
                        }) =>
                    {
                        let (call, _, _) = DevRt::from_name(name).expect("matched above");
                        Op::DevRt(Box::new(DevRtCall {
                            call,
                            args: args.into(),
                            ret: rets.first().copied(),
                        }))
                    }
                    _ => unsupported(&format!(
                        "call of {} (no body, recursive, or mismatched arguments; line {line})",
                        clip(name, MAX_QUOTED)
                    )),
                };
                out.push(Inst {
                    guard: inst.guard,
                    op,
                    line,
                });
            }
            (Op::Bra { target }, _) => {
                let t = at.get(*target as usize).copied().unwrap_or(total as u32);
                out.push(Inst {
                    op: Op::Bra { target: t },
                    ..inst
                });
            }
            _ => out.push(inst),
        }
    }
    debug_assert_eq!(out.len(), total);
    f.insts = out;
    Ok(())
}

/// Appends `c`'s instructions to `out`: registers moved up by `shift`,
/// branch targets by where the copy starts, each `ret` replaced by `ret`.
fn copy_body(out: &mut Vec<Inst>, c: &Func, shift: u32, ret: Op) {
    let base = out.len() as u32;
    for ci in &c.insts {
        let mut ci = ci.clone();
        ci.op.shift_regs(shift);
        if let Some(g) = &mut ci.guard {
            g.reg += shift;
        }
        match &mut ci.op {
            Op::Bra { target } => *target += base,
            Op::Dispatch { cases, .. } => cases.iter_mut().for_each(|c| c.1 += base),
            Op::Ret => ci.op = ret.clone(),
            _ => {}
        }
        out.push(ci);
    }
}

/// `@!g bra end`: threads whose guard is false skip the call.
fn skip_unless(g: Guard, end: u32, line: u32) -> Inst {
    Inst {
        guard: Some(Guard {
            reg: g.reg,
            neg: !g.neg,
        }),
        op: Op::Bra { target: end },
        line,
    }
}

/// Gives `f` `n` more registers; the first of them.
fn grow_regs(f: &mut Func, n: u32, line: u32) -> Result<u32, Error> {
    let shift = f.nregs;
    f.nregs = shift
        .checked_add(n)
        .filter(|&n| n <= MAX_REGS)
        .ok_or_else(|| {
            perr(
                line,
                format!("more than {MAX_REGS} registers after inlining"),
            )
        })?;
    Ok(shift)
}

/// Whether a call's return variables fit its callee's: as many, or a
/// callee that returns nothing (Numba declares a C function returning
/// `void` or a pointer with a return value it ignores; the variable keeps
/// whatever it held, as a register the callee never wrote would).
fn rets_match(callee: usize, call: usize) -> bool {
    callee == call || callee == 0
}

/// Appends a copy of `c`'s body to `out`, its registers moved up by
/// `shift`: the arguments copied in, the body (returns jump past it), the
/// return values copied out, then a jump to `then` if given.
#[allow(clippy::too_many_arguments)]
fn inline_body(
    out: &mut Vec<Inst>,
    f: &mut Func,
    c: &Func,
    args: &[u32],
    rets: &[u32],
    shift: u32,
    line: u32,
    then: Option<u32>,
) {
    for (a, p) in args.iter().zip(&c.params) {
        out.push(Inst {
            guard: None,
            op: Op::ParamCopy {
                from: *a,
                to: p.offset,
                len: p.size,
            },
            line,
        });
    }
    let ret_at = (out.len() + c.insts.len()) as u32;
    copy_body(out, c, shift, Op::Bra { target: ret_at });
    for (r, p) in rets.iter().zip(&c.rets) {
        out.push(Inst {
            guard: None,
            op: Op::ParamCopy {
                from: p.offset,
                to: *r,
                len: p.size,
            },
            line,
        });
    }
    if let Some(t) = then {
        out.push(Inst {
            guard: None,
            op: Op::Bra { target: t },
            line,
        });
    }
    f.local_bytes = f.local_bytes.max(c.local_bytes);
    f.scratch_end = f.scratch_end.max(c.scratch_end);
    f.reserved_smem |= c.reserved_smem;
    f.grid_workspace |= c.grid_workspace;
    for r in &c.frame_local {
        if !f.frame_local.contains(r) {
            f.frame_local.push(*r);
        }
    }
    for r in &c.frame_scratch {
        if !f.frame_scratch.contains(r) {
            f.frame_scratch.push(*r);
        }
    }
}
