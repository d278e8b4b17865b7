//! The streaming tokenizer: byte chunks in, ESI events out.
//!
//! Ordinary markup is never inspected byte by byte: one `memmem` search for `esi` finds
//! every candidate (`<esi:`, `</esi:`, `<!--esi`), and the text between candidates is
//! handed out as `Bytes` slices of the caller's chunk (zero copy). Only a tag that
//! straddles a chunk boundary, or a chunk tail that might start one (at most 6 bytes), is
//! copied into a small carry buffer.

use std::cell::Cell;

use bytes::{Bytes, BytesMut};
use memchr::memmem;

use crate::warning::{Warning, WarningKind};

/// The ESI elements the tokenizer knows by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TagName {
    /// `esi:include`
    Include,
    /// `esi:remove`
    Remove,
    /// `esi:comment`
    Comment,
    /// `esi:try`
    Try,
    /// `esi:attempt`
    Attempt,
    /// `esi:except`
    Except,
    /// `esi:choose`
    Choose,
    /// `esi:when`
    When,
    /// `esi:otherwise`
    Otherwise,
    /// `esi:vars`
    Vars,
    /// `esi:inline`
    Inline,
    /// Any other `esi:` element, with its name as written.
    Other(String),
}

impl TagName {
    fn from_bytes(name: &[u8]) -> TagName {
        match name {
            b"include" => TagName::Include,
            b"remove" => TagName::Remove,
            b"comment" => TagName::Comment,
            b"try" => TagName::Try,
            b"attempt" => TagName::Attempt,
            b"except" => TagName::Except,
            b"choose" => TagName::Choose,
            b"when" => TagName::When,
            b"otherwise" => TagName::Otherwise,
            b"vars" => TagName::Vars,
            b"inline" => TagName::Inline,
            other => TagName::Other(String::from_utf8_lossy(other).into_owned()),
        }
    }

    /// The element name without the `esi:` prefix.
    pub fn as_str(&self) -> &str {
        match self {
            TagName::Include => "include",
            TagName::Remove => "remove",
            TagName::Comment => "comment",
            TagName::Try => "try",
            TagName::Attempt => "attempt",
            TagName::Except => "except",
            TagName::Choose => "choose",
            TagName::When => "when",
            TagName::Otherwise => "otherwise",
            TagName::Vars => "vars",
            TagName::Inline => "inline",
            TagName::Other(name) => name,
        }
    }
}

/// One attribute of a start tag, with XML entities (`&amp;` `&lt;` `&gt;` `&quot;`
/// `&apos;`) and numeric character references (`&#38;`, `&#x26;`) decoded. A valueless attribute (`no-store`) has an empty value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// Attribute name as written.
    pub name: String,
    /// Decoded value.
    pub value: String,
}

/// An `<esi:...>` start tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// Element name.
    pub name: TagName,
    /// Attributes in source order.
    pub attrs: Vec<Attr>,
    /// Written as `<esi:... />`.
    pub self_closing: bool,
    /// Byte offset of the `<` in the whole input.
    pub offset: u64,
    /// The tag exactly as written.
    pub raw: Bytes,
}

impl Tag {
    /// The value of attribute `name`, if present.
    pub fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.value.as_str())
    }
}

/// What the tokenizer reports, in input order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Markup to pass through (a slice of an input chunk).
    Text(Bytes),
    /// Bytes inside `esi:remove`, to be dropped (reported so a caller can keep the raw body
    /// of an `esi:inline`).
    Removed(Bytes),
    /// `<esi:name ...>` or `<esi:name .../>`.
    Start(Tag),
    /// `</esi:name>`.
    End {
        /// Element name.
        name: TagName,
        /// Byte offset of the `<`.
        offset: u64,
        /// The tag exactly as written.
        raw: Bytes,
    },
    /// `<!--esi`: the start of an ESI comment block, whose wrapper is removed.
    BlockStart {
        /// Byte offset of the `<`.
        offset: u64,
    },
    /// The `-->` that ends an ESI comment block.
    BlockEnd {
        /// Byte offset of the first `-`.
        offset: u64,
    },
    /// A lexical fault; see [`WarningKind::UnterminatedTag`].
    Warning(Warning),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    /// `<esi:`
    Open,
    /// `</esi:`
    Close,
    /// `<!--esi`
    BlockOpen,
    /// `-->`
    BlockClose,
}

impl Token {
    fn len(self) -> usize {
        match self {
            Token::Open => 5,
            Token::Close => 6,
            Token::BlockOpen => 7,
            Token::BlockClose => 3,
        }
    }
}

enum Found {
    Token {
        start: usize,
        token: Token,
    },
    /// A token may start at `start` but the input ends before it can be told.
    Partial {
        start: usize,
    },
    None,
}

#[derive(Debug)]
enum Mode {
    Text,
    /// A tag started (its bytes are in `carry`) but its `>` is not seen yet.
    InTag {
        quote: Option<u8>,
        closing: bool,
    },
}

/// A push tokenizer: call [`feed`](Tokenizer::feed) with each chunk as it arrives, then
/// [`finish`](Tokenizer::finish). Events go to the sink closure in input order.
pub struct Tokenizer {
    esi: memmem::Finder<'static>,
    block_close: memmem::Finder<'static>,
    mode: Mode,
    /// Inside `esi:remove`: everything up to `</esi:remove>` is dropped unprocessed.
    removing: bool,
    in_block: bool,
    /// Partial tag bytes (`InTag`) or a chunk tail that may start a token (`Text`).
    carry: BytesMut,
    /// Offset in the whole input of the first byte of `carry`.
    carry_offset: u64,
    /// Offset in the whole input of the next chunk's first byte.
    offset: u64,
    max_tag_len: usize,
    /// The last `-->` search: (buffer address, buffer length, searched from, found at).
    /// Inside a long `<!--esi` block every token would otherwise search to the block's
    /// end again. Reset whenever the buffer changes.
    close_cache: Cell<(usize, usize, usize, Option<usize>)>,
}

impl Tokenizer {
    /// A tokenizer that gives up on a tag longer than `max_tag_len` bytes (passing it
    /// through as text with a warning), so a stray quote cannot make it buffer the page.
    pub fn new(max_tag_len: usize) -> Tokenizer {
        Tokenizer {
            esi: memmem::Finder::new(b"esi").into_owned(),
            block_close: memmem::Finder::new(b"-->").into_owned(),
            mode: Mode::Text,
            removing: false,
            in_block: false,
            carry: BytesMut::new(),
            carry_offset: 0,
            offset: 0,
            max_tag_len: max_tag_len.max(16),
            close_cache: Cell::new((0, 0, 0, None)),
        }
    }

    /// Tokenizes one chunk. Text events are slices of `chunk`.
    pub fn feed(&mut self, chunk: Bytes, sink: &mut impl FnMut(Event)) {
        let base = self.offset;
        self.offset += chunk.len() as u64;
        self.close_cache.set((0, 0, 0, None));
        let mut pos = 0;
        if !self.carry.is_empty() {
            pos = match self.mode {
                Mode::InTag { .. } => match self.continue_tag(&chunk, sink) {
                    Some(next) => next,
                    None => return,
                },
                Mode::Text => match self.continue_prefix(&chunk, sink) {
                    Some(next) => next,
                    None => return,
                },
            };
        }
        self.scan(&chunk, base, pos, sink);
    }

    /// Ends the input: flushes a pending tail and reports an unterminated tag.
    pub fn finish(&mut self, sink: &mut impl FnMut(Event)) {
        if self.carry.is_empty() {
            return;
        }
        let carry = self.carry.split().freeze();
        if let Mode::InTag { .. } = self.mode {
            sink(Event::Warning(Warning {
                offset: self.carry_offset,
                kind: WarningKind::UnterminatedTag,
            }));
            self.mode = Mode::Text;
        }
        self.emit_text(carry, sink);
    }

    fn emit_text(&self, bytes: Bytes, sink: &mut impl FnMut(Event)) {
        if bytes.is_empty() {
            return;
        }
        if self.removing {
            sink(Event::Removed(bytes));
        } else {
            sink(Event::Text(bytes));
        }
    }

    /// Finds the next token at or after `from`.
    fn find(&self, hay: &[u8], from: usize) -> Found {
        let removed = self.removing;
        let close = if self.in_block && !removed {
            let key = (hay.as_ptr() as usize, hay.len());
            let (ptr, len, searched_from, found) = self.close_cache.get();
            if (ptr, len) == key && searched_from <= from && found.map_or(true, |c| c >= from) {
                found
            } else {
                let found = self.block_close.find(&hay[from..]).map(|i| i + from);
                self.close_cache.set((key.0, key.1, from, found));
                found
            }
        } else {
            None
        };
        let limit = close.unwrap_or(hay.len());
        let mut search = from;
        let mut found = Found::None;
        while search < hay.len() {
            let Some(i) = self.esi.find(&hay[search..]).map(|i| i + search) else {
                break;
            };
            // Earliest possible token start for this hit is i - 4; past `limit` the `-->`
            // comes first.
            if i.saturating_sub(4) > limit {
                break;
            }
            let after = hay.get(i + 3).copied();
            if i > from && hay[i - 1] == b'<' && !removed {
                match after {
                    Some(b':') => {
                        found = Found::Token {
                            start: i - 1,
                            token: Token::Open,
                        };
                        break;
                    }
                    None => {
                        found = Found::Partial { start: i - 1 };
                        break;
                    }
                    _ => {}
                }
            } else if i > from + 1 && &hay[i - 2..i] == b"</" {
                match after {
                    Some(b':') => {
                        found = Found::Token {
                            start: i - 2,
                            token: Token::Close,
                        };
                        break;
                    }
                    None => {
                        found = Found::Partial { start: i - 2 };
                        break;
                    }
                    _ => {}
                }
            } else if i > from + 3 && &hay[i - 4..i] == b"<!--" && !self.in_block && !removed {
                found = Found::Token {
                    start: i - 4,
                    token: Token::BlockOpen,
                };
                break;
            }
            search = i + 1;
        }
        let found_start = match found {
            Found::Token { start, .. } | Found::Partial { start } => Some(start),
            Found::None => None,
        };
        if let Some(c) = close {
            if found_start.map_or(true, |s| c < s) {
                return Found::Token {
                    start: c,
                    token: Token::BlockClose,
                };
            }
        }
        if found_start.is_some() {
            return found;
        }
        // No token: does the tail start one that the next chunk may complete?
        let tail_from = hay.len().saturating_sub(6).max(from);
        for s in tail_from..hay.len() {
            if self.is_token_prefix(&hay[s..]) {
                return Found::Partial { start: s };
            }
        }
        Found::None
    }

    fn is_token_prefix(&self, tail: &[u8]) -> bool {
        let removed = self.removing;
        let prefix_of = |pat: &[u8]| tail.len() < pat.len() && pat.starts_with(tail);
        prefix_of(b"</esi:")
            || (!removed && prefix_of(b"<esi:"))
            || (!removed && !self.in_block && prefix_of(b"<!--esi"))
            || (!removed && self.in_block && prefix_of(b"-->"))
    }

    fn scan(&mut self, chunk: &Bytes, base: u64, mut pos: usize, sink: &mut impl FnMut(Event)) {
        while pos < chunk.len() {
            match self.find(chunk, pos) {
                Found::None => {
                    self.emit_text(chunk.slice(pos..), sink);
                    return;
                }
                Found::Partial { start } => {
                    self.emit_text(chunk.slice(pos..start), sink);
                    self.carry.extend_from_slice(&chunk[start..]);
                    self.carry_offset = base + start as u64;
                    return;
                }
                Found::Token { start, token } => {
                    self.emit_text(chunk.slice(pos..start), sink);
                    pos = self.token(chunk, base, start, token, sink);
                }
            }
        }
    }

    /// Handles a token found at `start` in `chunk`; returns where scanning resumes.
    fn token(
        &mut self,
        chunk: &Bytes,
        base: u64,
        start: usize,
        token: Token,
        sink: &mut impl FnMut(Event),
    ) -> usize {
        let offset = base + start as u64;
        match token {
            Token::BlockOpen => {
                self.in_block = true;
                sink(Event::BlockStart { offset });
                start + token.len()
            }
            Token::BlockClose => {
                self.in_block = false;
                sink(Event::BlockEnd { offset });
                start + token.len()
            }
            Token::Open | Token::Close => {
                let closing = token == Token::Close;
                let body = start + token.len();
                // A tag is at most max_tag_len bytes, `<` to `>` included.
                let limit = (start + self.max_tag_len).min(chunk.len());
                match tag_end(&chunk[body..limit], None) {
                    Ok(end) => {
                        let end = body + end;
                        self.tag(chunk.slice(start..end + 1), closing, offset, sink);
                        end + 1
                    }
                    Err(_) if limit == start + self.max_tag_len => {
                        // Too long: the window is passed through as text and scanning
                        // resumes after it, the same for every chunking of the input.
                        sink(Event::Warning(Warning {
                            offset,
                            kind: WarningKind::UnterminatedTag,
                        }));
                        self.emit_text(chunk.slice(start..limit), sink);
                        limit
                    }
                    Err(quote) => {
                        self.carry.extend_from_slice(&chunk[start..]);
                        self.carry_offset = offset;
                        self.mode = Mode::InTag { quote, closing };
                        chunk.len()
                    }
                }
            }
        }
    }

    /// The carry holds an unfinished tag: look for its end in `chunk`.
    fn continue_tag(&mut self, chunk: &Bytes, sink: &mut impl FnMut(Event)) -> Option<usize> {
        let Mode::InTag { quote, closing } = self.mode else {
            unreachable!("continue_tag outside a tag")
        };
        let room = self.max_tag_len - self.carry.len();
        let window = &chunk[..chunk.len().min(room)];
        match tag_end(window, quote) {
            Ok(end) => {
                self.carry.extend_from_slice(&chunk[..=end]);
                let raw = self.carry.split().freeze();
                self.mode = Mode::Text;
                let offset = self.carry_offset;
                self.tag(raw, closing, offset, sink);
                Some(end + 1)
            }
            Err(_) if window.len() == room => {
                // Too long: as in `token`, the window is passed through as text.
                self.carry.extend_from_slice(window);
                sink(Event::Warning(Warning {
                    offset: self.carry_offset,
                    kind: WarningKind::UnterminatedTag,
                }));
                self.mode = Mode::Text;
                let carry = self.carry.split().freeze();
                self.emit_text(carry, sink);
                Some(room)
            }
            Err(quote) => {
                self.carry.extend_from_slice(chunk);
                self.mode = Mode::InTag { quote, closing };
                None
            }
        }
    }

    /// The carry holds a chunk tail that may start a token: decide with the new chunk.
    fn continue_prefix(&mut self, chunk: &Bytes, sink: &mut impl FnMut(Event)) -> Option<usize> {
        self.close_cache.set((0, 0, 0, None));
        let held = self.carry.len();
        let take = chunk.len().min(8);
        let mut joined = BytesMut::with_capacity(held + take);
        joined.extend_from_slice(&self.carry);
        joined.extend_from_slice(&chunk[..take]);
        let carry_offset = self.carry_offset;
        let carry = self.carry.split().freeze();
        match self.find(&joined, 0) {
            Found::Token { start, token } if start < held => {
                self.emit_text(carry.slice(..start), sink);
                let resume = start + token.len() - held;
                match token {
                    Token::BlockOpen | Token::BlockClose => {
                        let offset = carry_offset + start as u64;
                        if token == Token::BlockOpen {
                            self.in_block = true;
                            sink(Event::BlockStart { offset });
                        } else {
                            self.in_block = false;
                            sink(Event::BlockEnd { offset });
                        }
                        Some(resume)
                    }
                    Token::Open | Token::Close => {
                        self.carry
                            .extend_from_slice(&joined[start..start + token.len()]);
                        self.carry_offset = carry_offset + start as u64;
                        self.mode = Mode::InTag {
                            quote: None,
                            closing: token == Token::Close,
                        };
                        let rest = chunk.slice(resume..);
                        let next = self.continue_tag(&rest, sink)?;
                        Some(resume + next)
                    }
                }
            }
            Found::Partial { start } if start < held => {
                // Only possible when the whole chunk was shorter than a token.
                self.emit_text(carry.slice(..start), sink);
                self.carry.extend_from_slice(&joined[start..]);
                self.carry_offset = carry_offset + start as u64;
                None
            }
            _ => {
                self.emit_text(carry, sink);
                Some(0)
            }
        }
    }

    /// Parses a complete tag and emits it, switching to removing after
    /// `<esi:remove>` and back after `</esi:remove>`.
    fn tag(&mut self, raw: Bytes, closing: bool, offset: u64, sink: &mut impl FnMut(Event)) {
        if closing {
            let name = TagName::from_bytes(name_of(&raw[6..]));
            if self.removing {
                if name != TagName::Remove {
                    sink(Event::Removed(raw));
                    return;
                }
                self.removing = false;
            }
            sink(Event::End { name, offset, raw });
            return;
        }
        let tag = parse_start_tag(raw, offset);
        if tag.name == TagName::Remove && !tag.self_closing {
            self.removing = true;
        }
        sink(Event::Start(tag));
    }
}

/// Finds the `>` that ends a tag, skipping quoted attribute values. `Err` carries the quote
/// state at the end of the input.
fn tag_end(bytes: &[u8], mut quote: Option<u8>) -> Result<usize, Option<u8>> {
    let mut i = 0;
    while i < bytes.len() {
        match quote {
            Some(q) => match memchr::memchr(q, &bytes[i..]) {
                Some(j) => {
                    i += j + 1;
                    quote = None;
                }
                None => return Err(quote),
            },
            None => match memchr::memchr3(b'>', b'"', b'\'', &bytes[i..]) {
                Some(j) => {
                    let b = bytes[i + j];
                    if b == b'>' {
                        return Ok(i + j);
                    }
                    quote = Some(b);
                    i += j + 1;
                }
                None => return Err(None),
            },
        }
    }
    Err(quote)
}

fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.' || b == b':'
}

fn name_of(bytes: &[u8]) -> &[u8] {
    let n = bytes
        .iter()
        .position(|&b| !is_name_byte(b))
        .unwrap_or(bytes.len());
    &bytes[..n]
}

/// Parses `<esi:name attr="v" ... >` (raw includes the `<` and the `>`).
fn parse_start_tag(raw: Bytes, offset: u64) -> Tag {
    let inner = &raw[5..raw.len() - 1];
    let name_bytes = name_of(inner);
    let name = TagName::from_bytes(name_bytes);
    let mut rest = inner[name_bytes.len()..].trim_ascii_end();
    let self_closing = rest.last() == Some(&b'/');
    if self_closing {
        rest = &rest[..rest.len() - 1];
    }
    let mut attrs = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let b = rest[i];
        if b.is_ascii_whitespace() || b == b'/' {
            i += 1;
            continue;
        }
        let name_start = i;
        while i < rest.len() && !rest[i].is_ascii_whitespace() && rest[i] != b'=' {
            i += 1;
        }
        let attr_name = String::from_utf8_lossy(&rest[name_start..i]).into_owned();
        while i < rest.len() && rest[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if i < rest.len() && rest[i] == b'=' {
            i += 1;
            while i < rest.len() && rest[i].is_ascii_whitespace() {
                i += 1;
            }
            if i < rest.len() && (rest[i] == b'"' || rest[i] == b'\'') {
                let q = rest[i];
                let v_start = i + 1;
                let v_end = memchr::memchr(q, &rest[v_start..]).map_or(rest.len(), |j| v_start + j);
                value = decode_entities(&rest[v_start..v_end]);
                i = (v_end + 1).min(rest.len());
            } else {
                let v_start = i;
                while i < rest.len() && !rest[i].is_ascii_whitespace() {
                    i += 1;
                }
                value = decode_entities(&rest[v_start..i]);
            }
        }
        if !attr_name.is_empty() {
            attrs.push(Attr {
                name: attr_name,
                value,
            });
        }
    }
    Tag {
        name,
        attrs,
        self_closing,
        offset,
        raw,
    }
}

/// A numeric character reference at the start of `s` (`&#38;`, `&#x26;`): the
/// character and the reference's length.
fn char_reference(s: &str) -> Option<(char, usize)> {
    let body = s.strip_prefix("&#")?;
    let end = body.find(';')?;
    let digits = &body[..end];
    let code = match digits.strip_prefix(['x', 'X']) {
        Some(hex) if !hex.is_empty() && hex.len() <= 6 => u32::from_str_radix(hex, 16).ok()?,
        None if !digits.is_empty() && digits.len() <= 7 => digits.parse().ok()?,
        _ => return None,
    };
    // NUL and the surrogates are not characters XML allows.
    let ch = char::from_u32(code).filter(|&c| c != '\0')?;
    Some((ch, 2 + end + 1))
}

/// Decodes the XML entities (`&amp;` `&lt;` `&gt;` `&quot;` `&apos;`) and numeric
/// character references (`&#38;` `&#x26;`) of an attribute value: the one place the
/// include URL's text is decoded, for `tessera esi` and the proxy alike. An `&` that
/// starts neither stays as it is.
fn decode_entities(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    if !s.contains('&') {
        return s.into_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest: &str = &s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let mut matched = false;
        for (entity, ch) in [
            ("&amp;", '&'),
            ("&lt;", '<'),
            ("&gt;", '>'),
            ("&quot;", '"'),
            ("&apos;", '\''),
        ] {
            if rest.starts_with(entity) {
                out.push(ch);
                rest = &rest[entity.len()..];
                matched = true;
                break;
            }
        }
        if !matched {
            if let Some((ch, len)) = char_reference(rest) {
                out.push(ch);
                rest = &rest[len..];
                continue;
            }
            out.push('&');
            rest = &rest[1..];
        }
    }
    out.push_str(rest);
    out
}
