//! Module images as SimGpu reads them: PTX text, and nvcc fatbins that
//! carry PTX, plain or compressed (LZ4, or zstd as CUDA 13's nvcc emits by
//! default).
//!
//! From an image SimGpu needs the kernels' names and parameter layouts,
//! which the PTX `.entry` declarations give, and the PTX text itself, which
//! its interpreter runs ([`parse_module`]). A fatbin may carry several PTX
//! entries (one per virtual architecture): each kernel runs from the entry
//! of the highest `.target` up to the architecture SimGpu reports
//! ([`SIM_ARCH`]) that declares it, else the lowest above. Images are guest
//! data: every read is bounds-checked, every count and size
//! is capped before it is used, and nothing here panics or allocates in
//! proportion to a size field the image states.
//!
//! Fatbin layout (little-endian), as public reverse-engineering describes
//! it (cuobjdump, `cuda-fatbin-decompression`):
//!
//! ```text
//! container: u32 magic 0xBA55ED50 | u16 version | u16 header size (16)
//!            | u64 bytes of entries that follow the header
//! entry:     u16 kind (1 PTX, 2 ELF) | u16 | u32 entry header size
//!            | u64 payload size | u32 compressed size at 16 | ...
//!            | u64 flags at 40 (0x2000: LZ4, 0x8000: zstd) | ...
//!            | u64 uncompressed size at 56 | ... (64 bytes or more)
//!            then the payload, then the next entry
//! ```
//! Several containers may follow each other.

use std::collections::{HashMap, HashSet};

use fairgpu_protocol::cuda::{ParamInfo, MAX_MODULE_IMAGE, MAX_NAME, MAX_PARAMS, MAX_PARAM_BYTES};

/// Most kernels one module may declare.
pub const MAX_KERNELS: usize = 1 << 16;
/// Magic of a fatbin container.
pub const FATBIN_MAGIC: u32 = 0xBA55_ED50;
/// Magic of the `__fatBinC_Wrapper_t` host structure, which points at a
/// fatbin through a guest address.
const FATBIN_WRAPPER_MAGIC: u32 = 0x4662_43B1;
const FATBIN_HEADER_LEN: usize = 16;
/// Bytes of an entry header this parser reads (newer toolkits add more).
const ENTRY_HEADER_MIN: u32 = 64;
const ENTRY_KIND_PTX: u16 = 1;
const ENTRY_KIND_ELF: u16 = 2;
const ENTRY_KIND_ELF_ALT: u16 = 0x10;
const FLAG_COMPRESSED: u64 = 0x2000;
/// Entry flag: the payload is a zstd frame (nvcc 13 by default).
const FLAG_ZSTD: u64 = 0x8000;
/// Largest decompressed PTX entry accepted.
const MAX_PTX: u64 = 64 * 1024 * 1024;
/// Most bytes one image may decompress to, over all its entries: a guest
/// cannot make one load cost more host work than this (about 0.1 to 0.3 s
/// of a core for zstd or LZ4), however many entries it packs.
pub const MAX_DECOMPRESSED: u64 = 64 * 1024 * 1024;
/// Most PTX entries one image may carry (nvcc emits one per virtual
/// architecture it was asked for: a handful).
pub const MAX_PTX_ENTRIES: usize = 256;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];
/// Largest `.align` a parameter may ask for.
const MAX_PARAM_ALIGN: u64 = 4096;

/// The architecture SimGpu reports (compute capability 9.0): PTX for
/// `sm_90` or below is preferred.
pub const SIM_ARCH: u32 = 90;
/// Most PTX text one module keeps for execution, bytes: entries beyond it
/// are not kept, and their kernels cannot execute.
pub const MAX_KEPT_PTX: usize = 64 * 1024 * 1024;

/// A kernel a module declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelDecl {
    /// Entry name as in the image (possibly mangled).
    pub name: String,
    /// Parameter layout in the packed buffer.
    pub params: Vec<ParamInfo>,
}

/// One PTX text of a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxSource {
    /// The text (invalid UTF-8 replaced).
    pub text: String,
    /// The `NN` of its `.target sm_NN`, 0 if it names none.
    pub arch: u32,
    /// The kernels it declares.
    pub kernels: Vec<String>,
}

/// What SimGpu keeps of a module image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModuleImage {
    /// Every kernel, in declaration order, the first declaration of a name
    /// winning.
    pub kernels: Vec<KernelDecl>,
    /// The PTX texts kernels run from: only those some kernel runs from
    /// (see the module documentation), at most [`MAX_KEPT_PTX`] bytes.
    pub ptx: Vec<PtxSource>,
    /// Kernel name -> index in `ptx` of the text it runs from; absent for
    /// kernels whose text was not kept.
    pub source_of: HashMap<String, usize>,
    /// The `sm_NN` of each cubin (SASS) entry of a fatbin, as `NN`: a GPU
    /// runs one of them only if its major version matches and its minor
    /// is at least as high; otherwise its driver compiles the PTX.
    pub cubin_archs: Vec<u32>,
}

/// Why an image cannot be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Zero bytes.
    #[error("empty image")]
    Empty,
    /// Above the protocol's limit.
    #[error("image of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Bytes given.
        len: usize,
        /// Limit.
        max: u64,
    },
    /// An ELF cubin.
    #[error("cubin (ELF) images are not supported by SimGpu; load the PTX instead")]
    Cubin,
    /// The host-side wrapper structure, not the fatbin it points to.
    #[error("a fatbin wrapper (magic 0x466243b1) refers to its fatbin by address; pass the fatbin itself (magic 0xba55ed50)")]
    FatbinWrapper,
    /// Neither PTX text, a fatbin nor a cubin.
    #[error("not PTX text (no .version or .entry), a fatbin or a cubin; first bytes {head:02x?}")]
    Unknown {
        /// Up to 8 leading bytes.
        head: Vec<u8>,
    },
    /// A fatbin structure runs past the end of the image.
    #[error("truncated fatbin: {what} at offset {off} needs {need} bytes, the image has {have}")]
    Truncated {
        /// The structure.
        what: &'static str,
        /// Its offset.
        off: usize,
        /// Bytes it needs from `off`.
        need: u64,
        /// Bytes the image has from `off`.
        have: usize,
    },
    /// A fatbin header field with an impossible value.
    #[error("malformed fatbin: {0}")]
    Malformed(&'static str),
    /// A fatbin without a PTX entry SimGpu can read.
    #[error(
        "fatbin has no uncompressed PTX entry ({compressed} compressed, {cubin} cubin, \
         {unreadable} unreadable entries): no PTX entry could be read or decompressed, \
         and SimGpu cannot read cubin; load the PTX text, or build the fatbin with \
         uncompressed PTX"
    )]
    NoPtx {
        /// Compressed PTX entries.
        compressed: usize,
        /// ELF entries.
        cubin: usize,
        /// Entries that claim to be plain PTX but are not text.
        unreadable: usize,
    },
    /// A `.entry` declaration this parser does not understand.
    #[error("PTX .entry {kernel:?}: {reason}")]
    Entry {
        /// The kernel (or a prefix of the text where the name should be).
        kernel: String,
        /// What is wrong.
        reason: String,
    },
    /// More kernels than a module may declare (65536).
    #[error("module declares more than {MAX_KERNELS} kernels")]
    TooManyKernels,
    /// Compressed entries that would decompress to more than
    /// [`MAX_DECOMPRESSED`] bytes in all.
    #[error("fatbin entries decompress to more than {MAX_DECOMPRESSED} bytes")]
    DecompressionBomb,
    /// More PTX entries than [`MAX_PTX_ENTRIES`].
    #[error("fatbin carries more than {MAX_PTX_ENTRIES} PTX entries")]
    TooManyEntries,
}

/// Parses a module image (PTX text, or a fatbin with PTX) into its
/// kernels' declarations.
pub fn parse_image(image: &[u8]) -> Result<Vec<KernelDecl>, ImageError> {
    parse_module(image).map(|m| m.kernels)
}

/// Parses a module image: PTX text, or a fatbin with PTX entries (plain,
/// LZ4 or zstd); returns its kernels and the PTX they run from.
pub fn parse_module(image: &[u8]) -> Result<ModuleImage, ImageError> {
    if image.is_empty() {
        return Err(ImageError::Empty);
    }
    if image.len() as u64 > MAX_MODULE_IMAGE {
        return Err(ImageError::TooLarge {
            len: image.len(),
            max: MAX_MODULE_IMAGE,
        });
    }
    match le_u32(image, 0) {
        Some(FATBIN_MAGIC) => return parse_fatbin(image),
        Some(FATBIN_WRAPPER_MAGIC) => return Err(ImageError::FatbinWrapper),
        _ => {}
    }
    if image.starts_with(b"\x7fELF") {
        return Err(ImageError::Cubin);
    }
    match ptx_text(image) {
        Some(text) => {
            let mut m = Sources::default();
            m.add(text)?;
            Ok(m.finish())
        }
        None => Err(ImageError::Unknown {
            head: image[..image.len().min(8)].to_vec(),
        }),
    }
}

/// The PTX texts of a module as they are found, and their kernels.
#[derive(Default)]
struct Sources {
    kernels: Kernels,
    /// Every text, with its arch and kernel names.
    all: Vec<PtxSource>,
    /// Bytes in `all` (bounded: texts beyond [`MAX_KEPT_PTX`] are dropped).
    bytes: usize,
}

impl Sources {
    /// Adds one PTX text: its declarations always, the text while the
    /// bound allows.
    fn add(&mut self, text: &[u8]) -> Result<(), ImageError> {
        let decls = parse_ptx(text)?;
        let names: Vec<String> = decls.iter().map(|k| k.name.clone()).collect();
        self.kernels.extend(decls)?;
        if self.bytes.saturating_add(text.len()) <= MAX_KEPT_PTX {
            self.bytes += text.len();
            self.all.push(PtxSource {
                text: String::from_utf8_lossy(text).into_owned(),
                arch: ptx_arch(text),
                kernels: names,
            });
        }
        Ok(())
    }

    /// Picks each kernel's text and keeps only the texts picked.
    fn finish(self) -> ModuleImage {
        let rank = |arch: u32| {
            // Highest arch up to SIM_ARCH first, then the lowest above.
            if arch <= SIM_ARCH {
                (0, SIM_ARCH - arch)
            } else {
                (1, arch)
            }
        };
        let mut best: HashMap<&str, usize> = HashMap::new();
        for (i, src) in self.all.iter().enumerate() {
            for k in &src.kernels {
                let better = match best.get(k.as_str()) {
                    Some(&j) => rank(src.arch) < rank(self.all[j].arch),
                    None => true,
                };
                if better {
                    best.insert(k.as_str(), i);
                }
            }
        }
        let mut kept: Vec<usize> = best.values().copied().collect();
        kept.sort_unstable();
        kept.dedup();
        let new_index: HashMap<usize, usize> =
            kept.iter().enumerate().map(|(n, &old)| (old, n)).collect();
        let source_of = best
            .iter()
            .filter_map(|(k, old)| Some(((*k).to_owned(), *new_index.get(old)?)))
            .collect();
        let ptx = self
            .all
            .into_iter()
            .enumerate()
            .filter(|(i, _)| new_index.contains_key(i))
            .map(|(_, s)| s)
            .collect();
        ModuleImage {
            kernels: self.kernels.list,
            ptx,
            source_of,
            cubin_archs: Vec::new(),
        }
    }
}

/// The `NN` of the first `.target sm_NN[a|f]` of PTX text; 0 if none.
fn ptx_arch(text: &[u8]) -> u32 {
    let mut lx = Lexer { s: text, pos: 0 };
    while let Some(t) = lx.next() {
        if t == Tok::Word(b".target") {
            if let Some(Tok::Word(w)) = lx.next() {
                let digits: Vec<u8> = w
                    .strip_prefix(b"sm_")
                    .unwrap_or_default()
                    .iter()
                    .copied()
                    .take_while(u8::is_ascii_digit)
                    .collect();
                return std::str::from_utf8(&digits)
                    .ok()
                    .and_then(|d| d.parse().ok())
                    .unwrap_or(0);
            }
            return 0;
        }
        if t == Tok::Word(b".entry") || t == Tok::Word(b".func") {
            return 0;
        }
    }
    0
}

/// The text of a PTX image up to its first NUL, if it looks like PTX.
/// Decompresses a compressed PTX entry: a zstd frame, or an LZ4 block of
/// `compressed_len` bytes. `None` if it is malformed or would exceed
/// [`MAX_PTX`].
fn decompress(payload: &[u8], compressed_len: u32, size: u64, zstd: bool) -> Option<Vec<u8>> {
    use std::io::Read;
    if size == 0 || size > MAX_PTX {
        return None;
    }
    if zstd {
        let mut out = Vec::new();
        let dec = ruzstd::decoding::StreamingDecoder::new(payload).ok()?;
        dec.take(size).read_to_end(&mut out).ok()?;
        return (out.len() as u64 == size).then_some(out);
    }
    let input = payload.get(..compressed_len as usize)?;
    lz4_flex::block::decompress(input, size as usize).ok()
}

fn ptx_text(image: &[u8]) -> Option<&[u8]> {
    let end = image.iter().position(|&b| b == 0).unwrap_or(image.len());
    let text = &image[..end];
    (contains(text, b".version") || contains(text, b".entry")).then_some(text)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn le_u16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(off..off.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn le_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(off..off.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn le_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(off..off.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// `off + len` as a checked in-image end, or the truncation error.
fn span(image: &[u8], what: &'static str, off: usize, len: u64) -> Result<usize, ImageError> {
    let have = image.len().saturating_sub(off);
    usize::try_from(len)
        .ok()
        .and_then(|l| off.checked_add(l))
        .filter(|&end| end <= image.len())
        .ok_or(ImageError::Truncated {
            what,
            off,
            need: len,
            have,
        })
}

/// Walks the containers and entries of a fatbin and parses its plain PTX.
fn parse_fatbin(image: &[u8]) -> Result<ModuleImage, ImageError> {
    let mut sources = Sources::default();
    let (mut ptx, mut compressed, mut cubin, mut unreadable) = (0usize, 0usize, 0usize, 0usize);
    let mut cubin_archs = Vec::new();
    // Bytes still allowed to come out of decompression, and PTX entries
    // still allowed: both checked before any work on an entry.
    let mut inflate_budget = MAX_DECOMPRESSED;
    let mut entries_left = MAX_PTX_ENTRIES;
    let mut pos = 0usize;
    while le_u32(image, pos) == Some(FATBIN_MAGIC) {
        span(image, "fatbin header", pos, FATBIN_HEADER_LEN as u64)?;
        let header_len = le_u16(image, pos + 6).unwrap_or(0);
        let entries_len = le_u64(image, pos + 8).unwrap_or(0);
        if usize::from(header_len) < FATBIN_HEADER_LEN {
            return Err(ImageError::Malformed(
                "container header shorter than 16 bytes",
            ));
        }
        let start = span(image, "fatbin header", pos, u64::from(header_len))?;
        let end = span(image, "fatbin entries", start, entries_len)?;
        let mut e = start;
        while e < end {
            let entry = &image[..end];
            span(entry, "fatbin entry header", e, u64::from(ENTRY_HEADER_MIN))?;
            let kind = le_u16(entry, e).unwrap_or(0);
            let header = le_u32(entry, e + 4).unwrap_or(0);
            let payload_len = le_u64(entry, e + 8).unwrap_or(0);
            let compressed_len = le_u32(entry, e + 16).unwrap_or(0);
            let flags = le_u64(entry, e + 40).unwrap_or(0);
            if header < ENTRY_HEADER_MIN {
                return Err(ImageError::Malformed("entry header shorter than 64 bytes"));
            }
            let data = span(entry, "fatbin entry header", e, u64::from(header))?;
            let data_end = span(entry, "fatbin entry payload", data, payload_len)?;
            let payload = &entry[data..data_end];
            match kind {
                ENTRY_KIND_PTX => {
                    entries_left = entries_left
                        .checked_sub(1)
                        .ok_or(ImageError::TooManyEntries)?;
                    let zstd = flags & FLAG_ZSTD != 0 || payload.starts_with(&ZSTD_MAGIC);
                    if zstd || flags & FLAG_COMPRESSED != 0 {
                        let size = le_u64(entry, e + 56).unwrap_or(0);
                        // Charged at the size the entry states, before any
                        // output exists (decompress stops there; a size it
                        // refuses outright costs nothing).
                        let inflates = if size <= MAX_PTX { size } else { 0 };
                        inflate_budget = inflate_budget
                            .checked_sub(inflates)
                            .ok_or(ImageError::DecompressionBomb)?;
                        match decompress(payload, compressed_len, size, zstd) {
                            Some(plain) => match ptx_text(&plain) {
                                Some(text) => {
                                    sources.add(text)?;
                                    ptx += 1;
                                }
                                None => unreadable += 1,
                            },
                            None => compressed += 1,
                        }
                    } else if let Some(text) = ptx_text(payload) {
                        sources.add(text)?;
                        ptx += 1;
                    } else {
                        unreadable += 1;
                    }
                }
                ENTRY_KIND_ELF | ENTRY_KIND_ELF_ALT => {
                    cubin += 1;
                    // Bounded by the entries the image holds (64 bytes each).
                    cubin_archs.push(le_u32(entry, e + 28).unwrap_or(0));
                }
                _ => {}
            }
            // Progress: the entry header is at least 64 bytes.
            e = data_end;
        }
        pos = end;
    }
    if ptx == 0 {
        return Err(ImageError::NoPtx {
            compressed,
            cubin,
            unreadable,
        });
    }
    let mut m = sources.finish();
    m.cubin_archs = cubin_archs;
    Ok(m)
}

/// Kernels in declaration order; the first declaration of a name wins
/// (fatbins repeat kernels for each architecture).
#[derive(Default)]
struct Kernels {
    list: Vec<KernelDecl>,
    names: HashSet<String>,
}

impl Kernels {
    fn push(&mut self, k: KernelDecl) -> Result<(), ImageError> {
        if self.names.contains(&k.name) {
            return Ok(());
        }
        if self.list.len() >= MAX_KERNELS {
            return Err(ImageError::TooManyKernels);
        }
        self.names.insert(k.name.clone());
        self.list.push(k);
        Ok(())
    }

    fn extend(&mut self, ks: Vec<KernelDecl>) -> Result<(), ImageError> {
        ks.into_iter().try_for_each(|k| self.push(k))
    }
}

/// A PTX token: a word (directive, identifier, number) or one other byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok<'a> {
    Word(&'a [u8]),
    Punct(u8),
}

/// PTX tokens, skipping whitespace, comments and string literals.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%' | b'.')
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Tok<'a>;

    fn next(&mut self) -> Option<Tok<'a>> {
        let s = self.s;
        loop {
            let b = *s.get(self.pos)?;
            let next = s.get(self.pos + 1).copied();
            if b.is_ascii_whitespace() {
                self.pos += 1;
            } else if b == b'/' && next == Some(b'/') {
                self.pos = s[self.pos..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(s.len(), |p| self.pos + p + 1);
            } else if b == b'/' && next == Some(b'*') {
                self.pos = s[self.pos + 2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(s.len(), |p| self.pos + 2 + p + 2);
            } else if b == b'"' {
                let mut i = self.pos + 1;
                while i < s.len() && s[i] != b'"' {
                    i += if s[i] == b'\\' { 2 } else { 1 };
                }
                self.pos = (i + 1).min(s.len());
            } else if is_word_byte(b) {
                let start = self.pos;
                while self.pos < s.len() && is_word_byte(s[self.pos]) {
                    self.pos += 1;
                }
                return Some(Tok::Word(&s[start..self.pos]));
            } else {
                self.pos += 1;
                return Some(Tok::Punct(b));
            }
        }
    }
}

fn lossy(w: &[u8]) -> String {
    String::from_utf8_lossy(&w[..w.len().min(64)]).into_owned()
}

fn is_ident(w: &[u8]) -> bool {
    w.first().is_some_and(|c| !c.is_ascii_digit() && *c != b'.') && !w.contains(&b'.')
}

fn number(w: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(w).ok()?;
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

/// Size in bytes of a PTX parameter type.
fn type_size(w: &[u8]) -> Option<u32> {
    Some(match w {
        b".u8" | b".s8" | b".b8" => 1,
        b".u16" | b".s16" | b".b16" | b".f16" | b".bf16" => 2,
        b".u32" | b".s32" | b".b32" | b".f32" | b".f16x2" | b".bf16x2" => 4,
        b".u64" | b".s64" | b".b64" | b".f64" | b".texref" | b".samplerref" | b".surfref" => 8,
        b".b128" => 16,
        _ => return None,
    })
}

/// Parses every `.entry` of PTX text.
pub fn parse_ptx(text: &[u8]) -> Result<Vec<KernelDecl>, ImageError> {
    let mut kernels = Kernels::default();
    let mut lx = Lexer { s: text, pos: 0 }.peekable();
    while let Some(t) = lx.next() {
        if t != Tok::Word(b".entry") {
            continue;
        }
        let name = match lx.next() {
            Some(Tok::Word(w)) if is_ident(w) && w.len() <= MAX_NAME => w,
            other => {
                return Err(ImageError::Entry {
                    kernel: match other {
                        Some(Tok::Word(w)) => lossy(w),
                        _ => String::new(),
                    },
                    reason: "expected a kernel name".into(),
                })
            }
        };
        let kernel = String::from_utf8_lossy(name).into_owned();
        let params = if lx.peek() == Some(&Tok::Punct(b'(')) {
            lx.next();
            parse_params(&mut lx).map_err(|reason| ImageError::Entry {
                kernel: kernel.clone(),
                reason,
            })?
        } else {
            Vec::new()
        };
        kernels.push(KernelDecl {
            name: kernel,
            params,
        })?;
    }
    Ok(kernels.list)
}

/// Parses `.param ... name[count]` declarations up to the closing `)`.
fn parse_params<'a>(lx: &mut std::iter::Peekable<Lexer<'a>>) -> Result<Vec<ParamInfo>, String> {
    let mut params = Vec::new();
    let mut end = 0u64;
    if lx.peek() == Some(&Tok::Punct(b')')) {
        lx.next();
        return Ok(params);
    }
    loop {
        let k = params.len();
        if k >= MAX_PARAMS {
            return Err(format!("more than {MAX_PARAMS} parameters"));
        }
        if lx.next() != Some(Tok::Word(b".param")) {
            return Err(format!("parameter {k}: expected .param"));
        }
        let (mut size, mut align, mut name, mut count) = (None, None, None, None);
        let mut ptr = false;
        let last = loop {
            match lx.next() {
                None => return Err("unterminated parameter list".into()),
                Some(Tok::Punct(p @ (b',' | b')'))) => break p,
                Some(Tok::Word(b".align")) => {
                    let n = match lx.next() {
                        Some(Tok::Word(w)) => number(w),
                        _ => None,
                    }
                    .filter(|n| n.is_power_of_two() && *n <= MAX_PARAM_ALIGN)
                    .ok_or_else(|| format!("parameter {k}: bad .align"))?;
                    // After `.ptr`, `.align` is the pointee's alignment.
                    if !ptr {
                        align = Some(n);
                    }
                }
                Some(Tok::Word(b".ptr")) => ptr = true,
                Some(Tok::Word(b".global" | b".const" | b".local" | b".shared")) => {}
                Some(Tok::Word(w)) if w.starts_with(b".") => match type_size(w) {
                    Some(s) if size.is_none() => size = Some(s),
                    _ => return Err(format!("parameter {k}: unexpected {}", lossy(w))),
                },
                Some(Tok::Word(w)) if is_ident(w) && name.is_none() => name = Some(w),
                Some(Tok::Punct(b'[')) if name.is_some() && count.is_none() => {
                    let n = match lx.next() {
                        Some(Tok::Word(w)) => number(w),
                        _ => None,
                    }
                    .filter(|n| (1..=u64::from(MAX_PARAM_BYTES)).contains(n));
                    if n.is_none() || lx.next() != Some(Tok::Punct(b']')) {
                        return Err(format!("parameter {k}: bad array size"));
                    }
                    count = n;
                }
                Some(Tok::Word(w)) => {
                    return Err(format!("parameter {k}: unexpected {}", lossy(w)))
                }
                Some(Tok::Punct(p)) => {
                    return Err(format!("parameter {k}: unexpected {:?}", char::from(p)))
                }
            }
        };
        let elem = size.ok_or_else(|| format!("parameter {k}: no type"))?;
        if name.is_none() {
            return Err(format!("parameter {k}: no name"));
        }
        let bytes = u64::from(elem) * count.unwrap_or(1);
        let align = align.unwrap_or(u64::from(elem));
        let offset = end.next_multiple_of(align);
        end = offset + bytes;
        if end > u64::from(MAX_PARAM_BYTES) {
            return Err(format!("parameters take more than {MAX_PARAM_BYTES} bytes"));
        }
        params.push(ParamInfo {
            offset: offset as u32,
            size: bytes as u32,
        });
        if last == b')' {
            return Ok(params);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What nvcc 12 emits for `vecAdd(const float*, const float*, float*, int)`
    /// and a kernel taking a 24-byte struct by value.
    pub(crate) const VECADD_PTX: &str = r#"//
// Generated by NVIDIA NVVM Compiler
//
// Compiler Build ID: CL-34097967
// Cuda compilation tools, release 12.4, V12.4.131
// Based on NVVM 7.0.1
//

.version 8.4
.target sm_90
.address_size 64

	// .globl	_Z6vecAddPKfS0_Pfi
.visible .entry _Z6vecAddPKfS0_Pfi(
	.param .u64 _Z6vecAddPKfS0_Pfi_param_0,
	.param .u64 _Z6vecAddPKfS0_Pfi_param_1,
	.param .u64 _Z6vecAddPKfS0_Pfi_param_2,
	.param .u32 _Z6vecAddPKfS0_Pfi_param_3
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<6>;
	.reg .f32 	%f<4>;
	.reg .b64 	%rd<11>;

	ld.param.u64 	%rd1, [_Z6vecAddPKfS0_Pfi_param_0];
	ld.param.u32 	%r2, [_Z6vecAddPKfS0_Pfi_param_3];
	mov.u32 	%r3, %ctaid.x;
	setp.ge.s32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;
	/* .entry inside a comment is not a kernel */
$L__BB0_2:
	ret;

}
	// .globl	_Z5applyc6ParamsPd
.visible .entry _Z5applyc6ParamsPd(
	.param .u8 _Z5applyc6ParamsPd_param_0,
	.param .align 8 .b8 _Z5applyc6ParamsPd_param_1[24],
	.param .u64 .ptr .global .align 1 _Z5applyc6ParamsPd_param_2
)
.maxntid 256, 1, 1
{
	ret;
}
.entry noparams
{
	ret;
}
"#;

    pub(crate) fn vecadd_layout() -> Vec<ParamInfo> {
        [(0, 8), (8, 8), (16, 8), (24, 4)]
            .map(|(offset, size)| ParamInfo { offset, size })
            .to_vec()
    }

    /// A fatbin with one container: an ELF entry, then `ptx` as a PTX entry
    /// with `flags`.
    pub(crate) fn fatbin(ptx: &[u8], flags: u64) -> Vec<u8> {
        fatbin_with_cubin_for(ptx, flags, 90)
    }

    /// [`fatbin`] whose cubin entry is for `sm_<cubin_arch>`.
    pub(crate) fn fatbin_with_cubin_for(ptx: &[u8], flags: u64, cubin_arch: u32) -> Vec<u8> {
        let entry = |kind: u16, payload: &[u8], flags: u64| -> Vec<u8> {
            let padded = payload.len().next_multiple_of(8);
            let mut e = vec![0u8; 64];
            e[0..2].copy_from_slice(&kind.to_le_bytes());
            e[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
            e[4..8].copy_from_slice(&64u32.to_le_bytes());
            e[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
            e[28..32].copy_from_slice(&cubin_arch.to_le_bytes());
            e[40..48].copy_from_slice(&flags.to_le_bytes());
            e.extend_from_slice(payload);
            e.resize(64 + padded, 0);
            e
        };
        let mut body = entry(ENTRY_KIND_ELF, b"\x7fELF\x02\x01\x01 not really", 0x11);
        body.extend(entry(ENTRY_KIND_PTX, ptx, flags));
        let mut f = Vec::new();
        f.extend_from_slice(&FATBIN_MAGIC.to_le_bytes());
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&16u16.to_le_bytes());
        f.extend_from_slice(&(body.len() as u64).to_le_bytes());
        f.extend(body);
        f
    }

    #[test]
    fn nvcc_ptx_layouts() {
        let ks = parse_image(VECADD_PTX.as_bytes()).expect("parses");
        let names: Vec<_> = ks.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(
            names,
            ["_Z6vecAddPKfS0_Pfi", "_Z5applyc6ParamsPd", "noparams"]
        );
        assert_eq!(ks[0].params, vecadd_layout());
        // u8 at 0; the struct aligned to 8; the pointer's .align 1 is the
        // pointee's, so the pointer itself is 8-aligned after the struct.
        assert_eq!(
            ks[1].params,
            [(0, 1), (8, 24), (32, 8)]
                .map(|(offset, size)| ParamInfo { offset, size })
                .to_vec()
        );
        assert!(ks[2].params.is_empty());

        // NUL-terminated, as cuModuleLoadData receives it.
        let mut z = VECADD_PTX.as_bytes().to_vec();
        z.extend_from_slice(b"\0garbage after the terminator");
        assert_eq!(parse_image(&z).expect("parses"), ks);
    }

    #[test]
    fn scalar_sizes_and_alignment() {
        let ptx = b".version 8.0\n.entry k(.param .u8 a, .param .f64 b, .param .u16 c, \
                    .param .f32 d, .param .align 16 .b8 e[3], .param .s8 f)\n{ ret; }";
        let ks = parse_ptx(ptx).expect("parses");
        assert_eq!(
            ks[0].params,
            [(0, 1), (8, 8), (16, 2), (20, 4), (32, 3), (35, 1)]
                .map(|(offset, size)| ParamInfo { offset, size })
                .to_vec()
        );
    }

    #[test]
    fn bad_declarations_are_errors() {
        for bad in [
            &b".entry k(.param .u64)"[..],
            b".entry k(.param a)",
            b".entry k(.param .u32 a",
            b".entry k(.param .zz a)",
            b".entry k(.param .align 3 .b8 a[4])",
            b".entry k(.param .b8 a[0])",
            b".entry k(.param .b8 a[40000])",
            b".entry (",
            b".entry",
        ] {
            assert!(
                matches!(parse_image(bad), Err(ImageError::Entry { .. })),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn fatbin_with_plain_ptx() {
        let mut ptx = VECADD_PTX.as_bytes().to_vec();
        ptx.push(0);
        let f = fatbin(&ptx, 0x11);
        let ks = parse_image(&f).expect("parses");
        assert_eq!(ks, parse_ptx(VECADD_PTX.as_bytes()).expect("parses"));

        // Two containers back to back (a whole .nv_fatbin section).
        let mut two = f.clone();
        two.extend(fatbin(b".version 8.0\n.entry other()\n{}\0", 0));
        let ks = parse_image(&two).expect("parses");
        assert_eq!(ks.last().map(|k| k.name.as_str()), Some("other"));
        // The cubins' architectures, for CudaExecutor's choice of text.
        assert_eq!(parse_module(&f).unwrap().cubin_archs, [90]);
        assert_eq!(parse_module(&two).unwrap().cubin_archs, [90, 90]);
    }

    #[test]
    fn compressed_or_cubin_only_fatbins_say_so() {
        let f = fatbin(VECADD_PTX.as_bytes(), 0x11 | FLAG_COMPRESSED);
        let e = parse_image(&f).expect_err("compressed");
        assert!(matches!(
            e,
            ImageError::NoPtx {
                compressed: 1,
                cubin: 1,
                unreadable: 0
            }
        ));
        assert!(e
            .to_string()
            .contains("no PTX entry could be read or decompressed"));
        let f = fatbin(&[0x28, 0xB5, 0x2F, 0xFD, 1, 2, 3], 0);
        assert!(matches!(
            parse_image(&f),
            Err(ImageError::NoPtx { compressed: 1, .. })
        ));
        let f = fatbin(b"\x01\x02binary", 0);
        assert!(matches!(
            parse_image(&f),
            Err(ImageError::NoPtx { unreadable: 1, .. })
        ));
    }

    #[test]
    fn truncated_and_foreign_images_are_rejected() {
        let f = fatbin(VECADD_PTX.as_bytes(), 0);
        for cut in [4, 15, 16, 40, 100, f.len() - 1] {
            assert!(
                matches!(parse_image(&f[..cut]), Err(ImageError::Truncated { .. })),
                "cut at {cut}"
            );
        }
        let mut huge = f.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            parse_image(&huge),
            Err(ImageError::Truncated { .. })
        ));
        let mut short_entry = f.clone();
        short_entry[16 + 4..16 + 8].copy_from_slice(&8u32.to_le_bytes());
        assert!(matches!(
            parse_image(&short_entry),
            Err(ImageError::Malformed(_))
        ));
        assert_eq!(parse_image(b""), Err(ImageError::Empty));
        assert_eq!(parse_image(b"\x7fELF\x02\x01\x01"), Err(ImageError::Cubin));
        assert_eq!(
            parse_image(&0x4662_43B1u32.to_le_bytes()),
            Err(ImageError::FatbinWrapper)
        );
        assert!(matches!(
            parse_image(b"hello world"),
            Err(ImageError::Unknown { .. })
        ));
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_image(&bytes);
        }

        #[test]
        fn corrupted_fatbins_never_panic(
            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
            cut in any::<usize>(),
        ) {
            let mut f = fatbin(VECADD_PTX.as_bytes(), 0);
            for (at, b) in edits {
                let n = f.len();
                f[at % n] = b;
            }
            let keep = cut % (f.len() + 1);
            let _ = parse_image(&f[..keep]);
        }

        #[test]
        fn mangled_ptx_never_panics(
            at in any::<usize>(),
            junk in proptest::collection::vec(any::<u8>(), 0..16),
        ) {
            let src = VECADD_PTX.as_bytes();
            let at = at % (src.len() + 1);
            let mut t = src[..at].to_vec();
            t.extend(junk);
            t.extend_from_slice(&src[at..]);
            let _ = parse_image(&t);
        }
    }

    #[test]
    fn nvcc13_zstd_fatbin_yields_its_kernels() {
        // The .nv_fatbin section of tests/cuda/streams_events.cu as nvcc 13
        // builds it by default: an sm_75 cubin and zstd-compressed PTX.
        let fatbin = include_bytes!("../../tests/fixtures/spin-nvcc13-zstd.fatbin");
        let kernels = parse_image(fatbin).expect("parses");
        let spin = kernels
            .iter()
            .find(|k| k.name == "_Z4spiny")
            .expect("_Z4spiny present");
        assert_eq!(spin.params, vec![ParamInfo { offset: 0, size: 8 }]);
        // Truncating the compressed payload is refused, not a panic.
        assert!(parse_image(&fatbin[..fatbin.len() - 40]).is_err());
        // The decompressed PTX is kept for execution.
        let m = parse_module(fatbin).expect("parses");
        let src = &m.ptx[m.source_of["_Z4spiny"]];
        assert!(src.text.contains(".entry _Z4spiny("), "{}", src.text);
        assert_eq!(src.arch, 75);
    }

    #[test]
    fn modules_keep_the_ptx_each_kernel_runs_from() {
        let ptx = |arch: &str, extra: &str| {
            format!(".version 8.0\n.target {arch}\n.address_size 64\n.entry common()\n{{ ret; }}\n{extra}")
        };
        // sm_52, sm_90a and sm_100 entries; only sm_100's declares `newest`.
        let mut image = fatbin(ptx("sm_52", "").as_bytes(), 0);
        image.extend(fatbin(ptx("sm_90a", "").as_bytes(), 0));
        image.extend(fatbin(
            ptx("sm_100", ".entry newest()\n{ ret; }\n").as_bytes(),
            0,
        ));
        let m = parse_module(&image).expect("parses");
        let names: Vec<_> = m.kernels.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["common", "newest"]);
        assert_eq!(m.ptx.len(), 2, "the sm_52 text is not kept");
        let src = |k: &str| &m.ptx[m.source_of[k]];
        assert_eq!(src("common").arch, 90);
        assert_eq!(src("newest").arch, 100);
        assert!(src("newest").text.contains(".entry newest"));
        // Only a text above SIM_ARCH: the lowest.
        let mut above = fatbin(ptx("sm_120", "").as_bytes(), 0);
        above.extend(fatbin(ptx("sm_100", "").as_bytes(), 0));
        let m = parse_module(&above).expect("parses");
        assert_eq!(m.ptx[m.source_of["common"]].arch, 100);
        // PTX text: itself.
        let m = parse_module(VECADD_PTX.as_bytes()).expect("parses");
        assert_eq!(m.ptx.len(), 1);
        assert_eq!(m.ptx[0].text, VECADD_PTX);
        assert_eq!(m.ptx[0].arch, 90);
        assert_eq!(m.source_of.len(), 3);
        assert_eq!(
            ptx_arch(b".version 7.0\n.entry k() { ret; }\n.target sm_80"),
            0
        );
    }

    /// A fatbin of `n` LZ4 PTX entries, each `size` bytes of PTX once
    /// decompressed (a few KiB compressed).
    fn lz4_bomb(n: usize, size: usize) -> Vec<u8> {
        let mut plain = VECADD_PTX.as_bytes().to_vec();
        plain.resize(size, b' ');
        let packed = lz4_flex::block::compress(&plain);
        let one = fatbin(&packed, FLAG_COMPRESSED);
        let e = 16 + 88;
        let padded = packed.len().next_multiple_of(8);
        let mut entry = one[e..e + 64 + padded].to_vec();
        entry[16..20].copy_from_slice(&(packed.len() as u32).to_le_bytes());
        entry[56..64].copy_from_slice(&(size as u64).to_le_bytes());
        let body: Vec<u8> = entry.repeat(n);
        let mut f = one[..16].to_vec();
        f[8..16].copy_from_slice(&(body.len() as u64).to_le_bytes());
        f.extend(body);
        f
    }

    /// Finding: a 430 KB image of many compressed entries, each expanding
    /// to 64 MiB, cost 25 s of the worker's CPU at every load.
    #[test]
    fn decompression_bomb_of_many_entries_is_refused_before_inflating() {
        // 4 MiB entries: 16 fit the bound, 17 do not.
        let fits = lz4_bomb(16, 4 << 20);
        assert!(
            fits.len() < 1 << 20,
            "the bomb is small: {} bytes",
            fits.len()
        );
        let m = parse_module(&fits).expect("16 entries of 4 MiB fit the bound");
        assert_eq!(m.kernels.len(), 3);
        assert!(matches!(
            parse_module(&lz4_bomb(17, 4 << 20)),
            Err(ImageError::DecompressionBomb)
        ));
        // Many small entries are bounded by count.
        assert!(matches!(
            parse_module(&lz4_bomb(MAX_PTX_ENTRIES + 1, 256)),
            Err(ImageError::TooManyEntries)
        ));
    }

    #[test]
    fn lz4_ptx_entries_are_decompressed_and_kept() {
        let plain = VECADD_PTX.as_bytes();
        let packed = lz4_flex::block::compress(plain);
        let mut f = fatbin(&packed, FLAG_COMPRESSED);
        // The PTX entry follows the 16-byte container header and the
        // 88-byte ELF entry.
        let e = 16 + 88;
        f[e + 16..e + 20].copy_from_slice(&(packed.len() as u32).to_le_bytes());
        f[e + 56..e + 64].copy_from_slice(&(plain.len() as u64).to_le_bytes());
        let m = parse_module(&f).expect("parses");
        assert_eq!(m.kernels, parse_ptx(plain).expect("parses"));
        assert_eq!(m.ptx[0].text, VECADD_PTX);
        // A size above the limit is not decompressed.
        f[e + 56..e + 64].copy_from_slice(&(MAX_PTX + 1).to_le_bytes());
        assert!(matches!(
            parse_module(&f),
            Err(ImageError::NoPtx { compressed: 1, .. })
        ));
    }
}
