//! The compiler: tokenizer events in, a compiled [`Template`] out.
//!
//! A template is a flat `Vec<Node>`. Blocks (`esi:try`, `esi:choose`) are nodes that
//! carry the index ranges of their branches, which follow them in the same vector, so
//! evaluation is a loop with jumps and nothing is re-parsed per request.

use std::collections::HashMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::expr::{Expr, Interp, VarRef};
use crate::tokenizer::{Event, Tag, TagName, Tokenizer};
use crate::warning::{Warning, WarningKind};

/// Parser limits. Both defaults are far above what real templates need and low enough
/// that hostile input cannot exhaust memory or stack.
#[derive(Debug, Clone)]
pub struct Options {
    /// How deep ESI elements may nest. Default 32: real pages nest 3 or 4 deep; deeper
    /// elements are dropped (content kept) with [`WarningKind::NestingTooDeep`], which
    /// bounds the evaluator's recursion.
    pub max_depth: usize,
    /// The longest `<esi:...>` tag in bytes. Default 16 KiB: an unbalanced quote makes a
    /// tag run on, and this stops the tokenizer buffering the rest of the page.
    pub max_tag_len: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            max_depth: 32,
            max_tag_len: 16 * 1024,
        }
    }
}

/// An `esi:include` as compiled: its attributes as written and parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct Include {
    /// `src` as written (may contain variables).
    pub src: String,
    /// `alt` as written.
    pub alt: Option<String>,
    /// `onerror="continue"`: a failure of src and alt yields nothing instead of an error.
    pub continue_on_error: bool,
    /// `ttl` (extension): how long the fragment may be cached.
    pub ttl: Option<Duration>,
    /// `timeout` or `maxwait` (extension): how long to wait for the fragment.
    pub timeout: Option<Duration>,
    /// `no-store` (extension): do not cache the fragment.
    pub no_store: bool,
    /// Byte offset of the tag.
    pub offset: u64,
    pub(crate) src_interp: Interp,
    pub(crate) alt_interp: Option<Interp>,
}

/// An `esi:inline` fragment: stored by a proxy under `name` and output in place.
#[derive(Debug, Clone, PartialEq)]
pub struct InlineFragment {
    /// The fragment's URL (the `name` attribute).
    pub name: String,
    /// `fetchable="yes"`: the fragment may also be fetched from its URL.
    pub fetchable: bool,
    /// The content between the tags, as written (it may itself contain ESI).
    pub body: Bytes,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Literal(Bytes),
    /// `esi:vars` text with variables.
    Vars(Interp),
    Include(Box<Include>),
    Try {
        attempt: (u32, u32),
        except: (u32, u32),
        end: u32,
    },
    Choose {
        end: u32,
    },
    When {
        test: Expr,
        end: u32,
    },
    Otherwise {
        end: u32,
    },
}

/// A compiled template: parse once, keep it in a cache, evaluate per request with
/// [`Template::evaluate`](crate::Template::evaluate). Cheap to share (`Send + Sync`).
#[derive(Debug, Clone, Default)]
pub struct Template {
    pub(crate) nodes: Vec<Node>,
    warnings: Vec<Warning>,
    inlines: Vec<InlineFragment>,
    variables: Vec<String>,
    has_esi: bool,
}

impl Template {
    /// Compiles a whole template with default [`Options`].
    pub fn parse(input: impl Into<Bytes>) -> Template {
        Template::parse_with(input, &Options::default())
    }

    /// Compiles a whole template.
    pub fn parse_with(input: impl Into<Bytes>, options: &Options) -> Template {
        let mut compiler = Compiler::new(options);
        compiler.feed(input.into());
        compiler.finish()
    }

    /// What was malformed, in document order.
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Every `esi:include`, in document order (including those in untaken branches).
    pub fn includes(&self) -> impl Iterator<Item = &Include> {
        self.nodes.iter().filter_map(|n| match n {
            Node::Include(inc) => Some(&**inc),
            _ => None,
        })
    }

    /// The `esi:inline` fragments, in document order.
    pub fn inlines(&self) -> &[InlineFragment] {
        &self.inlines
    }

    /// The variables the template reads (`HTTP_COOKIE{id}`), each once, in first-use order.
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// Whether the input contained any ESI markup at all. A proxy can serve a template
    /// without it as plain bytes.
    pub fn has_esi(&self) -> bool {
        self.has_esi
    }
}

#[derive(Debug)]
enum Frame {
    Remove,
    Try {
        node: u32,
        attempt: bool,
        except: bool,
    },
    Attempt {
        node: u32,
        start: u32,
    },
    Except {
        node: u32,
        start: u32,
    },
    Choose {
        node: u32,
        whens: bool,
    },
    When {
        node: u32,
    },
    Otherwise {
        node: u32,
    },
    Vars,
    Inline {
        index: usize,
    },
    /// A tag dropped (unknown, misplaced, too deep) whose content is kept.
    Transparent,
    /// An element dropped with its content.
    Discard,
}

/// The streaming compiler: feed chunks as they arrive, then [`finish`](Compiler::finish).
/// Literal text in the template is kept as slices of the fed chunks (no copy).
pub struct Compiler {
    tokenizer: Tokenizer,
    state: State,
}

struct State {
    max_depth: usize,
    template: Template,
    stack: Vec<(TagName, Frame, u64)>,
    /// Indexes into `stack` of the frames that decide what content is allowed (all but
    /// dropped tags and removes), so finding the parent is O(1) however deep the stack.
    structural: Vec<usize>,
    /// How many frames of each name are open, so an end tag with no match is rejected in
    /// O(1) and a matching one costs only the frames it closes.
    open: HashMap<TagName, usize>,
    discarding: usize,
    vars_depth: usize,
    /// `esi:vars` text seen so far (may span chunks), flushed at the next tag.
    pending_vars: BytesMut,
    pending_vars_offset: u64,
    /// Raw body of the open `esi:inline`, if any.
    inline_body: Option<BytesMut>,
    in_block: Option<u64>,
    /// The choose/try node whose stray text was last reported, so text split across
    /// chunks is reported once.
    stray_reported: Option<u32>,
}

impl Compiler {
    /// A compiler with the given limits.
    pub fn new(options: &Options) -> Compiler {
        Compiler {
            tokenizer: Tokenizer::new(options.max_tag_len),
            state: State {
                max_depth: options.max_depth,
                template: Template::default(),
                stack: Vec::new(),
                structural: Vec::new(),
                open: HashMap::new(),
                discarding: 0,
                vars_depth: 0,
                pending_vars: BytesMut::new(),
                pending_vars_offset: 0,
                inline_body: None,
                in_block: None,
                stray_reported: None,
            },
        }
    }

    /// Compiles the next chunk of input.
    pub fn feed(&mut self, chunk: Bytes) {
        let state = &mut self.state;
        self.tokenizer.feed(chunk, &mut |e| state.event(e));
    }

    /// Ends the input and returns the template.
    pub fn finish(mut self) -> Template {
        let state = &mut self.state;
        self.tokenizer.finish(&mut |e| state.event(e));
        state.flush_vars();
        while let Some((name, frame, offset)) = state.pop_frame() {
            if !matches!(frame, Frame::Transparent | Frame::Discard) || state.discarding == 0 {
                state.warn(
                    offset,
                    WarningKind::UnclosedElement(name.as_str().to_string()),
                );
            }
            state.close(frame, offset);
        }
        if let Some(offset) = state.in_block {
            state.warn(offset, WarningKind::UnterminatedCommentBlock);
        }
        let mut template = std::mem::take(&mut state.template);
        template.warnings.sort_by_key(|w| w.offset);
        template
    }
}

fn parse_duration(value: &str, default_unit_ms: u64) -> Option<Duration> {
    let value = value.trim();
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (num, unit) = value.split_at(split);
    let n: u64 = num.parse().ok()?;
    let ms = match unit.trim() {
        "" => default_unit_ms,
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(Duration::from_millis(n.checked_mul(ms)?))
}

fn is_whitespace(b: &[u8]) -> bool {
    b.iter().all(u8::is_ascii_whitespace)
}

impl State {
    fn warn(&mut self, offset: u64, kind: WarningKind) {
        self.template.warnings.push(Warning { offset, kind });
    }

    fn push(&mut self, node: Node) -> u32 {
        self.template.nodes.push(node);
        (self.template.nodes.len() - 1) as u32
    }

    fn len(&self) -> u32 {
        self.template.nodes.len() as u32
    }

    fn note_var(&mut self, var: &VarRef) {
        let name = var.display_name();
        if !self.template.variables.contains(&name) {
            self.template.variables.push(name);
        }
    }

    fn interp(&mut self, text: Bytes, offset: u64) -> Interp {
        let mut unknown = Vec::new();
        let interp = Interp::parse(text, &mut |name| unknown.push(name));
        for name in unknown {
            self.warn(offset, WarningKind::UnknownVariable(name));
        }
        for var in interp.vars() {
            let var = var.clone();
            self.note_var(&var);
        }
        interp
    }

    /// The innermost frame that decides what content is allowed.
    fn parent(&self) -> Option<&Frame> {
        self.structural.last().map(|&i| &self.stack[i].1)
    }

    fn parent_mut(&mut self) -> Option<&mut Frame> {
        self.structural.last().map(|&i| &mut self.stack[i].1)
    }

    fn push_frame(&mut self, name: TagName, frame: Frame, offset: u64) {
        if !matches!(frame, Frame::Transparent | Frame::Remove) {
            self.structural.push(self.stack.len());
        }
        *self.open.entry(name.clone()).or_default() += 1;
        self.stack.push((name, frame, offset));
    }

    fn pop_frame(&mut self) -> Option<(TagName, Frame, u64)> {
        let popped = self.stack.pop()?;
        if self.structural.last() == Some(&self.stack.len()) {
            self.structural.pop();
        }
        if let Some(n) = self.open.get_mut(&popped.0) {
            *n -= 1;
        }
        Some(popped)
    }

    fn capture(&mut self, raw: &[u8]) {
        if let Some(body) = &mut self.inline_body {
            body.extend_from_slice(raw);
        }
    }

    fn event(&mut self, event: Event) {
        match event {
            Event::Text(text) => {
                self.capture(&text);
                self.text(text);
            }
            Event::Removed(raw) => self.capture(&raw),
            Event::Warning(w) => self.template.warnings.push(w),
            Event::BlockStart { offset } => {
                self.capture(b"<!--esi");
                self.template.has_esi = true;
                self.in_block = Some(offset);
            }
            Event::BlockEnd { .. } => {
                self.capture(b"-->");
                self.in_block = None;
            }
            Event::Start(tag) => {
                self.template.has_esi = true;
                self.flush_vars();
                let is_inline_start = tag.name == TagName::Inline && self.inline_body.is_none();
                if !is_inline_start {
                    self.capture(&tag.raw);
                }
                self.start(tag);
            }
            Event::End { name, offset, raw } => {
                self.template.has_esi = true;
                self.flush_vars();
                self.end(name, offset);
                self.capture(&raw);
            }
        }
    }

    fn text(&mut self, text: Bytes) {
        if self.discarding > 0 || text.is_empty() {
            return;
        }
        match self.parent() {
            Some(Frame::Choose { node, .. }) | Some(Frame::Try { node, .. }) => {
                if !is_whitespace(&text) && self.stray_reported != Some(*node) {
                    let node = *node;
                    self.stray_reported = Some(node);
                    let name = if matches!(self.template.nodes[node as usize], Node::Choose { .. })
                    {
                        "choose"
                    } else {
                        "try"
                    };
                    // Offsets of text are not tracked; report at the block's tag.
                    let offset = self.structural.last().map(|&i| self.stack[i].2);
                    self.warn(
                        offset.unwrap_or(0),
                        WarningKind::StrayContent(name.to_string()),
                    );
                }
                return;
            }
            _ => {}
        }
        if self.vars_depth > 0 {
            self.pending_vars.extend_from_slice(&text);
            return;
        }
        self.push(Node::Literal(text));
    }

    fn flush_vars(&mut self) {
        if self.pending_vars.is_empty() {
            return;
        }
        let text = self.pending_vars.split().freeze();
        let interp = self.interp(text.clone(), self.pending_vars_offset);
        if interp.has_vars() {
            self.push(Node::Vars(interp));
        } else {
            self.push(Node::Literal(text));
        }
    }

    fn start(&mut self, tag: Tag) {
        let offset = tag.offset;
        let is_void = matches!(tag.name, TagName::Include | TagName::Comment);
        if self.discarding > 0 {
            if !is_void && !tag.self_closing {
                self.discarding += 1;
                self.push_frame(tag.name, Frame::Discard, offset);
            }
            return;
        }
        // Only branches may sit directly inside try and choose.
        let allowed_here = match (self.parent(), &tag.name) {
            (Some(Frame::Choose { .. }), TagName::When | TagName::Otherwise) => true,
            (Some(Frame::Try { .. }), TagName::Attempt | TagName::Except) => true,
            (Some(Frame::Choose { .. }), TagName::Comment) => true,
            (Some(Frame::Try { .. }), TagName::Comment) => true,
            (Some(Frame::Choose { .. }), _) => false,
            (Some(Frame::Try { .. }), _) => false,
            _ => true,
        };
        if !allowed_here {
            let parent = match self.parent() {
                Some(Frame::Choose { .. }) => "choose",
                _ => "try",
            };
            self.warn(offset, WarningKind::StrayContent(parent.to_string()));
            if !is_void && !tag.self_closing {
                self.discarding += 1;
                self.push_frame(tag.name, Frame::Discard, offset);
            }
            return;
        }
        if !is_void && self.stack.len() >= self.max_depth {
            self.warn(offset, WarningKind::NestingTooDeep);
            if !tag.self_closing {
                self.push_frame(tag.name, Frame::Transparent, offset);
            }
            return;
        }
        let frame = match &tag.name {
            TagName::Include => {
                self.include(&tag);
                return;
            }
            TagName::Comment => return,
            TagName::Remove => Frame::Remove,
            TagName::Vars => {
                self.vars_depth += 1;
                self.pending_vars_offset = offset;
                Frame::Vars
            }
            TagName::Try => {
                let node = self.push(Node::Try {
                    attempt: (0, 0),
                    except: (0, 0),
                    end: 0,
                });
                Frame::Try {
                    node,
                    attempt: false,
                    except: false,
                }
            }
            TagName::Attempt | TagName::Except => {
                let is_attempt = tag.name == TagName::Attempt;
                let found = match self
                    .stack
                    .iter_mut()
                    .rev()
                    .find(|(_, f, _)| !matches!(f, Frame::Transparent | Frame::Remove))
                {
                    Some((
                        _,
                        Frame::Try {
                            node,
                            attempt,
                            except,
                        },
                        _,
                    )) => {
                        let seen = if is_attempt { attempt } else { except };
                        let first = !*seen;
                        *seen = true;
                        Some((*node, first))
                    }
                    _ => None,
                };
                match found {
                    None => {
                        self.warn(
                            offset,
                            WarningKind::MisplacedElement(tag.name.as_str().to_string()),
                        );
                        Frame::Transparent
                    }
                    Some((_, false)) => {
                        // A second attempt or except: dropped with its content.
                        self.warn(
                            offset,
                            WarningKind::MisplacedElement(tag.name.as_str().to_string()),
                        );
                        self.discarding += 1;
                        Frame::Discard
                    }
                    Some((node, true)) => {
                        let start = self.len();
                        if is_attempt {
                            Frame::Attempt { node, start }
                        } else {
                            Frame::Except { node, start }
                        }
                    }
                }
            }
            TagName::Choose => {
                let node = self.push(Node::Choose { end: 0 });
                Frame::Choose { node, whens: false }
            }
            TagName::When | TagName::Otherwise => {
                let in_choose = matches!(self.parent(), Some(Frame::Choose { .. }));
                if !in_choose {
                    self.warn(
                        offset,
                        WarningKind::MisplacedElement(tag.name.as_str().to_string()),
                    );
                    Frame::Transparent
                } else if tag.name == TagName::When {
                    if let Some(Frame::Choose { whens, .. }) = self.parent_mut() {
                        *whens = true;
                    }
                    let test = match tag.attr("test") {
                        None => {
                            self.warn(
                                offset,
                                WarningKind::MissingAttribute {
                                    element: "when".into(),
                                    attribute: "test".into(),
                                },
                            );
                            Expr::Invalid
                        }
                        Some(src) => match Expr::parse(src) {
                            Ok(expr) => {
                                let mut vars = Vec::new();
                                expr.vars(&mut vars);
                                for v in &vars {
                                    self.note_var(v);
                                }
                                expr
                            }
                            Err(e) => {
                                self.warn(
                                    offset,
                                    WarningKind::BadExpression(format!("{src:?}: {e}")),
                                );
                                Expr::Invalid
                            }
                        },
                    };
                    let node = self.push(Node::When { test, end: 0 });
                    Frame::When { node }
                } else {
                    let node = self.push(Node::Otherwise { end: 0 });
                    Frame::Otherwise { node }
                }
            }
            TagName::Inline => {
                if self.inline_body.is_some() {
                    self.warn(offset, WarningKind::MisplacedElement("inline".into()));
                    Frame::Transparent
                } else {
                    let name = tag.attr("name").map(str::to_string);
                    if name.is_none() {
                        self.warn(
                            offset,
                            WarningKind::MissingAttribute {
                                element: "inline".into(),
                                attribute: "name".into(),
                            },
                        );
                    }
                    let fetchable = tag
                        .attr("fetchable")
                        .is_some_and(|v| v.eq_ignore_ascii_case("yes"));
                    self.template.inlines.push(InlineFragment {
                        name: name.unwrap_or_default(),
                        fetchable,
                        body: Bytes::new(),
                    });
                    self.inline_body = Some(BytesMut::new());
                    Frame::Inline {
                        index: self.template.inlines.len() - 1,
                    }
                }
            }
            TagName::Other(name) => {
                self.warn(offset, WarningKind::UnknownElement(name.clone()));
                Frame::Transparent
            }
        };
        if tag.self_closing {
            self.close(frame, offset);
        } else {
            self.push_frame(tag.name, frame, offset);
        }
    }

    fn include(&mut self, tag: &Tag) {
        let offset = tag.offset;
        let invalid = |state: &mut State, attribute: &str, value: &str| {
            state.warn(
                offset,
                WarningKind::InvalidAttribute {
                    element: "include".into(),
                    attribute: attribute.into(),
                    value: value.into(),
                },
            );
        };
        // `src/>`, `src=/>`, `src= />` and `src=""` name nothing: an empty src would
        // resolve to the page itself, so it counts as missing.
        let Some(src) = tag.attr("src").filter(|s| !s.trim().is_empty()) else {
            self.warn(
                offset,
                WarningKind::MissingAttribute {
                    element: "include".into(),
                    attribute: "src".into(),
                },
            );
            return;
        };
        let src = src.to_string();
        let alt = tag.attr("alt").map(str::to_string);
        let continue_on_error = match tag.attr("onerror") {
            None => false,
            Some("continue") => true,
            Some(other) => {
                invalid(self, "onerror", other);
                false
            }
        };
        // ttl is in seconds without a unit, timeout/maxwait in milliseconds (Akamai's units).
        let ttl = tag.attr("ttl").and_then(|v| {
            let d = parse_duration(v, 1000);
            if d.is_none() {
                invalid(self, "ttl", v);
            }
            d
        });
        let timeout_attr = tag
            .attr("timeout")
            .map(|v| ("timeout", v))
            .or(tag.attr("maxwait").map(|v| ("maxwait", v)));
        let timeout = timeout_attr.and_then(|(name, v)| {
            let d = parse_duration(v, 1);
            if d.is_none() {
                invalid(self, name, v);
            }
            d
        });
        let no_store = match tag.attr("no-store") {
            None => false,
            Some(v)
                if v.is_empty()
                    || ["on", "yes", "true", "1"]
                        .iter()
                        .any(|t| v.eq_ignore_ascii_case(t)) =>
            {
                true
            }
            Some(v)
                if ["off", "no", "false", "0"]
                    .iter()
                    .any(|t| v.eq_ignore_ascii_case(t)) =>
            {
                false
            }
            Some(v) => {
                invalid(self, "no-store", v);
                false
            }
        };
        let src_interp = self.interp(Bytes::from(src.clone()), offset);
        let alt_interp = alt
            .as_ref()
            .map(|a| self.interp(Bytes::from(a.clone()), offset));
        self.push(Node::Include(Box::new(Include {
            src,
            alt,
            continue_on_error,
            ttl,
            timeout,
            no_store,
            offset,
            src_interp,
            alt_interp,
        })));
    }

    fn end(&mut self, name: TagName, offset: u64) {
        if matches!(name, TagName::Include | TagName::Comment) {
            // Void elements: `<esi:include ...></esi:include>` is accepted as written.
            return;
        }
        let is_open = self.open.get(&name).is_some_and(|&n| n > 0);
        let k = if is_open {
            self.stack.iter().rposition(|(n, _, _)| *n == name)
        } else {
            None
        };
        let Some(k) = k else {
            if self.discarding == 0 {
                self.warn(
                    offset,
                    WarningKind::UnexpectedEndTag(name.as_str().to_string()),
                );
            }
            return;
        };
        while self.stack.len() > k + 1 {
            let (inner, frame, inner_offset) = self.pop_frame().expect("stack longer than k");
            if self.discarding == 0 || !matches!(frame, Frame::Discard) {
                self.warn(
                    inner_offset,
                    WarningKind::UnclosedElement(inner.as_str().to_string()),
                );
            }
            self.close(frame, inner_offset);
        }
        let (_, frame, open_offset) = self.pop_frame().expect("frame k exists");
        self.close(frame, open_offset);
    }

    fn close(&mut self, frame: Frame, offset: u64) {
        let end = self.len();
        match frame {
            Frame::Remove | Frame::Transparent => {}
            Frame::Discard => self.discarding -= 1,
            Frame::Vars => {
                self.flush_vars();
                self.vars_depth -= 1;
            }
            Frame::Try {
                node,
                attempt,
                except,
            } => {
                if let Node::Try { end: e, .. } = &mut self.template.nodes[node as usize] {
                    *e = end;
                }
                for (seen, branch) in [(attempt, "attempt"), (except, "except")] {
                    if !seen {
                        self.warn(
                            offset,
                            WarningKind::MissingBranch {
                                element: "try".into(),
                                branch: branch.into(),
                            },
                        );
                    }
                }
            }
            Frame::Attempt { node, start } | Frame::Except { node, start } => {
                let is_attempt = matches!(frame, Frame::Attempt { .. });
                if let Node::Try {
                    attempt, except, ..
                } = &mut self.template.nodes[node as usize]
                {
                    if is_attempt {
                        *attempt = (start, end);
                    } else {
                        *except = (start, end);
                    }
                }
            }
            Frame::Choose { node, whens } => {
                if let Node::Choose { end: e } = &mut self.template.nodes[node as usize] {
                    *e = end;
                }
                if !whens {
                    self.warn(
                        offset,
                        WarningKind::MissingBranch {
                            element: "choose".into(),
                            branch: "when".into(),
                        },
                    );
                }
            }
            Frame::When { node } | Frame::Otherwise { node } => {
                match &mut self.template.nodes[node as usize] {
                    Node::When { end: e, .. } | Node::Otherwise { end: e } => *e = end,
                    _ => {}
                }
            }
            Frame::Inline { index } => {
                if let Some(body) = self.inline_body.take() {
                    self.template.inlines[index].body = body.freeze();
                }
            }
        }
    }
}
