//! Tokens of PTX text.

use crate::Error;

/// One token and the line it starts on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Token<'a> {
    pub kind: Tok<'a>,
    pub line: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Tok<'a> {
    /// Identifiers, directives (`.reg`), registers (`%r1`), labels
    /// (`$L__BB0_2`) and dotted opcodes (`ld.global.f32`).
    Ident(&'a str),
    /// An integer literal's magnitude (a sign is a separate `-` token).
    Int(u64),
    /// `0fXXXXXXXX`.
    F32(u32),
    /// `0dXXXXXXXXXXXXXXXX`.
    F64(u64),
    /// A decimal floating-point literal.
    Float(f64),
    Str(&'a str),
    Punct(char),
}

fn ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'%' | b'.')
}

fn ident_cont(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.')
}

fn err(line: u32, msg: impl Into<String>) -> Error {
    Error::Parse {
        line,
        msg: msg.into(),
    }
}

/// Reads the tokens of a text one at a time, dropping comments and
/// whitespace. A copy is a position to come back to: tokens are lexed as
/// the parser reaches them and never held all at once, so parsing takes no
/// memory in proportion to the number of tokens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lexer<'a> {
    text: &'a str,
    /// Byte offset of the next token (or of whitespace before it).
    at: usize,
    line: u32,
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(text: &'a str) -> Lexer<'a> {
        Lexer {
            text,
            at: 0,
            line: 1,
        }
    }

    /// The next token; `None` at the end of the text.
    pub(crate) fn next_token(&mut self) -> Result<Option<Token<'a>>, Error> {
        let text = self.text;
        let b = text.as_bytes();
        let mut i = self.at;
        let mut line = self.line;
        let r = loop {
            if i >= b.len() {
                break Ok(None);
            }
            let c = b[i];
            if c == b'\n' {
                line = line.saturating_add(1);
                i += 1;
                continue;
            }
            if c.is_ascii_whitespace() {
                i += 1;
                continue;
            }
            if c == b'/' && b.get(i + 1) == Some(&b'/') {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            if c == b'/' && b.get(i + 1) == Some(&b'*') {
                let start = line;
                i += 2;
                loop {
                    if i + 1 >= b.len() {
                        return Err(err(start, "unterminated comment"));
                    }
                    if b[i] == b'*' && b[i + 1] == b'/' {
                        i += 2;
                        break;
                    }
                    if b[i] == b'\n' {
                        line = line.saturating_add(1);
                    }
                    i += 1;
                }
                continue;
            }
            let start = i;
            if c == b'"' {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\n' {
                        return Err(err(line, "unterminated string"));
                    }
                    i += 1;
                }
                if i >= b.len() {
                    return Err(err(line, "unterminated string"));
                }
                i += 1;
                break Ok(Some(Tok::Str(&text[start + 1..i - 1])));
            }
            if ident_start(c) {
                i += 1;
                loop {
                    if i < b.len() && ident_cont(b[i]) {
                        i += 1;
                    } else if i + 2 < b.len()
                        && b[i] == b':'
                        && b[i + 1] == b':'
                        && ident_cont(b[i + 2])
                    {
                        // `L2::128B` inside qualifiers.
                        i += 2;
                    } else {
                        break;
                    }
                }
                break Ok(Some(Tok::Ident(&text[start..i])));
            }
            if c.is_ascii_digit() {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    // An exponent sign belongs to a decimal float.
                    if (b[i] == b'e' || b[i] == b'E')
                        && !text[start..i].starts_with("0x")
                        && !text[start..i].starts_with("0X")
                        && matches!(b.get(i + 1), Some(b'+') | Some(b'-'))
                    {
                        i += 2;
                        continue;
                    }
                    i += 1;
                }
                let s = &text[start..i];
                break number(s)
                    .map(Some)
                    .ok_or_else(|| err(line, format!("bad number {:?}", truncate(s))));
            }
            if c.is_ascii_punctuation() {
                i += 1;
                break Ok(Some(Tok::Punct(c as char)));
            }
            break Err(err(line, format!("unexpected byte {c:#04x}")));
        };
        let kind = r?;
        self.at = i;
        self.line = line;
        Ok(kind.map(|kind| Token { kind, line }))
    }
}

/// Splits `text` into tokens.
#[cfg(test)]
pub(crate) fn lex(text: &str) -> Result<Vec<Token<'_>>, Error> {
    let mut l = Lexer::new(text);
    let mut out = Vec::new();
    while let Some(t) = l.next_token()? {
        out.push(t);
    }
    Ok(out)
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn number(s: &str) -> Option<Tok<'_>> {
    let hex = |d: &str| u64::from_str_radix(d, 16).ok();
    if let Some(d) = s.strip_prefix("0f").or_else(|| s.strip_prefix("0F")) {
        if d.len() == 8 {
            return hex(d).map(|v| Tok::F32(v as u32));
        }
        return None;
    }
    if let Some(d) = s.strip_prefix("0d").or_else(|| s.strip_prefix("0D")) {
        if d.len() == 16 {
            return hex(d).map(Tok::F64);
        }
        return None;
    }
    let s = s.strip_suffix('U').unwrap_or(s);
    if let Some(d) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        return hex(d).map(Tok::Int);
    }
    if let Some(d) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        return u64::from_str_radix(d, 2).ok().map(Tok::Int);
    }
    if s.contains(['.', 'e', 'E']) {
        return s.parse::<f64>().ok().map(Tok::Float);
    }
    if s.len() > 1 && s.starts_with('0') {
        return u64::from_str_radix(&s[1..], 8).ok().map(Tok::Int);
    }
    s.parse::<u64>().ok().map(Tok::Int)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(s: &str) -> Vec<Tok<'_>> {
        lex(s).unwrap().into_iter().map(|t| t.kind).collect()
    }

    #[test]
    fn numbers_of_every_base() {
        assert_eq!(
            kinds("12 0x1F 017 0b101 0f3F800000 0d3FF0000000000000 1.5 2e3 7U"),
            vec![
                Tok::Int(12),
                Tok::Int(31),
                Tok::Int(15),
                Tok::Int(5),
                Tok::F32(0x3F80_0000),
                Tok::F64(0x3FF0_0000_0000_0000),
                Tok::Float(1.5),
                Tok::Float(2000.0),
                Tok::Int(7),
            ]
        );
    }

    #[test]
    fn comments_and_lines() {
        let t = lex("a // x\n/* y\n z */ ld.global.L2::128B.f32 [%rd1+-4];").unwrap();
        assert_eq!(t[0].kind, Tok::Ident("a"));
        assert_eq!(t[1].kind, Tok::Ident("ld.global.L2::128B.f32"));
        assert_eq!(t[1].line, 3);
        assert_eq!(t[2].kind, Tok::Punct('['));
        assert_eq!(t[3].kind, Tok::Ident("%rd1"));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(lex("/* open").is_err());
        assert!(lex("\"open").is_err());
        assert!(lex("0fXYZ").is_err());
        assert!(lex("99999999999999999999999").is_err());
        assert!(lex("\u{e9}").is_err());
    }
}
