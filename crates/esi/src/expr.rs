//! Variable references (`$(NAME{key}|default)`), interpolated strings and `esi:when`
//! expressions, all compiled once at parse time.

use std::borrow::Cow;

use bytes::Bytes;

use crate::request::{classify, parse_number, Request, Value, Variable};

/// How deep parentheses and `!` may nest in one expression; deeper is a bad expression, so
/// the recursive parser and evaluator have a fixed stack bound.
const MAX_EXPR_DEPTH: usize = 64;

/// `$(NAME{key}|default)`.
#[derive(Debug, Clone, PartialEq)]
pub struct VarRef {
    /// Which variable.
    pub variable: Variable,
    /// The `{key}`, if any.
    pub key: Option<String>,
    /// The `|default`, used when the variable is unset or empty.
    pub default: Option<String>,
}

impl VarRef {
    /// Evaluates the reference for one request.
    pub fn value<'r>(&'r self, req: &'r Request) -> Option<Value<'r>> {
        match req.get(self.variable, self.key.as_deref()) {
            Some(v) => Some(v),
            None => self.default.as_deref().map(|d| classify(Cow::Borrowed(d))),
        }
    }

    /// The reference as written, normalised (`HTTP_COOKIE{id}`).
    pub fn display_name(&self) -> String {
        match &self.key {
            Some(k) => format!("{}{{{k}}}", self.variable.name()),
            None => self.variable.name().to_string(),
        }
    }
}

/// Why a `$(` did not start a variable reference.
#[derive(Debug, PartialEq)]
pub(crate) enum RefError {
    /// Not a reference at all (lower case, no closing parenthesis, ...): plain text.
    NotAReference,
    /// An upper-case name that is not an ESI variable.
    Unknown(String),
}

/// Parses a reference at the start of `s` (which begins with `$(`); returns it and its
/// length in bytes.
pub(crate) fn parse_var_ref(s: &[u8]) -> Result<(VarRef, usize), RefError> {
    if !s.starts_with(b"$(") {
        return Err(RefError::NotAReference);
    }
    let mut i = 2;
    let name_start = i;
    while i < s.len() && (s[i].is_ascii_uppercase() || s[i] == b'_' || s[i].is_ascii_digit()) {
        i += 1;
    }
    if i == name_start || i >= s.len() || !matches!(s[i], b'{' | b'|' | b')') {
        return Err(RefError::NotAReference);
    }
    let name = std::str::from_utf8(&s[name_start..i]).map_err(|_| RefError::NotAReference)?;
    let mut key = None;
    if s[i] == b'{' {
        let end = memchr::memchr(b'}', &s[i..]).ok_or(RefError::NotAReference)? + i;
        key = Some(String::from_utf8_lossy(&s[i + 1..end]).into_owned());
        i = end + 1;
    }
    let mut default = None;
    if i < s.len() && s[i] == b'|' {
        i += 1;
        if i < s.len() && (s[i] == b'\'' || s[i] == b'"') {
            let q = s[i];
            let end = memchr::memchr(q, &s[i + 1..]).ok_or(RefError::NotAReference)? + i + 1;
            default = Some(String::from_utf8_lossy(&s[i + 1..end]).into_owned());
            i = end + 1;
        } else {
            let end = memchr::memchr(b')', &s[i..]).ok_or(RefError::NotAReference)? + i;
            default = Some(String::from_utf8_lossy(&s[i..end]).into_owned());
            i = end;
        }
    }
    if i >= s.len() || s[i] != b')' {
        return Err(RefError::NotAReference);
    }
    let variable = Variable::from_name(name).ok_or_else(|| RefError::Unknown(name.to_string()))?;
    Ok((
        VarRef {
            variable,
            key,
            default,
        },
        i + 1,
    ))
}

/// One piece of an interpolated string.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Part {
    Literal(Bytes),
    Var(VarRef),
}

/// Text with `$(...)` references: `esi:vars` content and include `src`/`alt`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Interp {
    pub(crate) parts: Vec<Part>,
}

/// How a variable's value is made safe where it is substituted.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Escape {
    /// In page text: HTML-escaped, so a cookie cannot inject markup.
    Html,
    /// In an include URL: percent-encoded, so a value cannot add a scheme, host, path
    /// segment, query or fragment.
    Url,
}

impl Interp {
    /// Splits `text` at variable references. Unknown upper-case names are reported
    /// through `unknown` and kept as text.
    pub(crate) fn parse(text: Bytes, unknown: &mut impl FnMut(String)) -> Interp {
        let mut parts = Vec::new();
        let mut lit_start = 0;
        let mut pos = 0;
        let finder = memchr::memmem::Finder::new(b"$(");
        while let Some(i) = finder.find(&text[pos..]).map(|i| i + pos) {
            match parse_var_ref(&text[i..]) {
                Ok((var, len)) => {
                    if i > lit_start {
                        parts.push(Part::Literal(text.slice(lit_start..i)));
                    }
                    parts.push(Part::Var(var));
                    pos = i + len;
                    lit_start = pos;
                }
                Err(err) => {
                    if let RefError::Unknown(name) = err {
                        unknown(name);
                    }
                    pos = i + 2;
                }
            }
        }
        if lit_start < text.len() {
            parts.push(Part::Literal(text.slice(lit_start..)));
        }
        Interp { parts }
    }

    pub(crate) fn has_vars(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Var(_)))
    }

    pub(crate) fn vars(&self) -> impl Iterator<Item = &VarRef> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(v) => Some(v),
            Part::Literal(_) => None,
        })
    }

    /// Renders for one request, escaping variable values for `escape`.
    pub(crate) fn render(&self, req: &Request, escape: Escape, out: &mut Vec<u8>) {
        for part in &self.parts {
            match part {
                Part::Literal(b) => out.extend_from_slice(b),
                Part::Var(var) => {
                    if let Some(value) = var.value(req) {
                        let text = value.as_text();
                        match escape {
                            Escape::Html => html_escape(&text, out),
                            Escape::Url => url_escape(&text, var.variable == Variable::Host, out),
                        }
                    }
                }
            }
        }
    }
}

fn html_escape(s: &str, out: &mut Vec<u8>) {
    for b in s.bytes() {
        match b {
            b'&' => out.extend_from_slice(b"&amp;"),
            b'<' => out.extend_from_slice(b"&lt;"),
            b'>' => out.extend_from_slice(b"&gt;"),
            b'"' => out.extend_from_slice(b"&quot;"),
            b'\'' => out.extend_from_slice(b"&#39;"),
            _ => out.push(b),
        }
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters. A value made only of
/// dots is encoded too, so it cannot become a `..` path segment. `HTTP_HOST` keeps `:`,
/// `[` and `]` when it is a well-formed `host[:port]`, so `http://$(HTTP_HOST)/x` works.
fn url_escape(s: &str, is_host: bool, out: &mut Vec<u8>) {
    let all_dots = !s.is_empty() && s.bytes().all(|b| b == b'.');
    let host_ok = is_host
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b':' | b'[' | b']'));
    for b in s.bytes() {
        let keep = (b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~'))
            || (b == b'.' && !all_dots)
            || (host_ok && matches!(b, b':' | b'[' | b']'));
        if keep {
            out.push(b);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.extend_from_slice(&[b'%', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        }
    }
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// A compiled `esi:when` test.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// `'quoted'` string.
    Str(String),
    /// Unquoted number.
    Num(f64, String),
    /// `$(VAR)`.
    Var(VarRef),
    /// `!e`
    Not(Box<Expr>),
    /// `a & b`
    And(Box<Expr>, Box<Expr>),
    /// `a | b`
    Or(Box<Expr>, Box<Expr>),
    /// `a op b`
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    /// A test that did not parse: always false.
    Invalid,
}

/// Why an expression did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// Something unexpected at this byte offset of the expression.
    #[error("unexpected {found} at {at}")]
    Unexpected {
        /// Byte offset in the expression.
        at: usize,
        /// What was found.
        found: String,
    },
    /// A `$(` that is not a known variable.
    #[error("unknown variable {0}")]
    UnknownVariable(String),
    /// Parentheses or `!` nested deeper than 64.
    #[error("nested too deep")]
    TooDeep,
    /// A literal where a condition is expected (`(1 & 4)`, `test="'a'"`).
    #[error("a literal is not a condition")]
    NotACondition,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    LParen,
    RParen,
    Not,
    And,
    Or,
    Cmp(CmpOp),
    Str(String),
    Num(f64, String),
    Var(VarRef),
}

fn lex(s: &str) -> Result<Vec<(usize, Tok)>, ExprError> {
    let b = s.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let unexpected = |at: usize| ExprError::Unexpected {
        at,
        found: s[at..]
            .chars()
            .next()
            .map_or("end".to_string(), |c| format!("{c:?}")),
    };
    while i < b.len() {
        let start = i;
        let two = b.get(i + 1).copied();
        let tok = match b[i] {
            c if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'(' => Tok::LParen,
            b')' => Tok::RParen,
            b'&' => Tok::And,
            b'|' => Tok::Or,
            b'!' if two == Some(b'=') => {
                i += 1;
                Tok::Cmp(CmpOp::Ne)
            }
            b'!' => Tok::Not,
            b'=' if two == Some(b'=') => {
                i += 1;
                Tok::Cmp(CmpOp::Eq)
            }
            b'<' if two == Some(b'=') => {
                i += 1;
                Tok::Cmp(CmpOp::Le)
            }
            b'<' => Tok::Cmp(CmpOp::Lt),
            b'>' if two == Some(b'=') => {
                i += 1;
                Tok::Cmp(CmpOp::Ge)
            }
            b'>' => Tok::Cmp(CmpOp::Gt),
            q @ (b'\'' | b'"') => {
                let mut text = String::new();
                let mut j = i + 1;
                loop {
                    match b.get(j) {
                        None => return Err(unexpected(b.len().min(s.len()))),
                        Some(&c) if c == q => break,
                        Some(b'\\') if matches!(b.get(j + 1), Some(&n) if n == q || n == b'\\') => {
                            text.push(b[j + 1] as char);
                            j += 2;
                        }
                        Some(_) => {
                            let ch = s[j..].chars().next().ok_or_else(|| unexpected(j))?;
                            text.push(ch);
                            j += ch.len_utf8();
                        }
                    }
                }
                i = j;
                Tok::Str(text)
            }
            b'$' => match parse_var_ref(&b[i..]) {
                Ok((var, len)) => {
                    i += len - 1;
                    Tok::Var(var)
                }
                Err(RefError::Unknown(name)) => return Err(ExprError::UnknownVariable(name)),
                Err(RefError::NotAReference) => return Err(unexpected(i)),
            },
            c if c.is_ascii_digit() || (c == b'-' && two.is_some_and(|d| d.is_ascii_digit())) => {
                let mut j = i + 1;
                while j < b.len() && (b[j].is_ascii_digit() || b[j] == b'.') {
                    j += 1;
                }
                let text = &s[i..j];
                let n = parse_number(text).ok_or_else(|| unexpected(i))?;
                i = j - 1;
                Tok::Num(n, text.to_string())
            }
            _ => return Err(unexpected(i)),
        };
        toks.push((start, tok));
        i += 1;
    }
    Ok(toks)
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    len: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }

    fn error(&self) -> ExprError {
        match self.toks.get(self.pos) {
            Some((at, tok)) => ExprError::Unexpected {
                at: *at,
                found: format!("{tok:?}"),
            },
            None => ExprError::Unexpected {
                at: self.len,
                found: "end".to_string(),
            },
        }
    }

    // or := and ('|' and)*
    fn or(&mut self, depth: usize) -> Result<Expr, ExprError> {
        let mut left = self.and(depth)?;
        while self.peek() == Some(&Tok::Or) {
            self.pos += 1;
            let right = self.and(depth)?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    // and := not ('&' not)*
    fn and(&mut self, depth: usize) -> Result<Expr, ExprError> {
        let mut left = self.not(depth)?;
        while self.peek() == Some(&Tok::And) {
            self.pos += 1;
            let right = self.not(depth)?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    // not := '!' not | cmp
    // The note lists comparison above negation, so `!a == b` is `!(a == b)`.
    fn not(&mut self, depth: usize) -> Result<Expr, ExprError> {
        if depth >= MAX_EXPR_DEPTH {
            return Err(ExprError::TooDeep);
        }
        if self.peek() == Some(&Tok::Not) {
            self.pos += 1;
            return Ok(Expr::Not(Box::new(self.not(depth + 1)?)));
        }
        self.cmp(depth)
    }

    // cmp := primary (op primary)?
    fn cmp(&mut self, depth: usize) -> Result<Expr, ExprError> {
        let left = self.primary(depth)?;
        if let Some(Tok::Cmp(op)) = self.peek() {
            let op = *op;
            self.pos += 1;
            let right = self.primary(depth)?;
            return Ok(Expr::Cmp(op, Box::new(left), Box::new(right)));
        }
        Ok(left)
    }

    // primary := '(' or ')' | operand
    fn primary(&mut self, depth: usize) -> Result<Expr, ExprError> {
        if depth >= MAX_EXPR_DEPTH {
            return Err(ExprError::TooDeep);
        }
        let Some(tok) = self.peek().cloned() else {
            return Err(self.error());
        };
        self.pos += 1;
        match tok {
            Tok::LParen => {
                let inner = self.or(depth + 1)?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(self.error());
                }
                self.pos += 1;
                Ok(inner)
            }
            Tok::Str(s) => Ok(Expr::Str(s)),
            Tok::Num(n, text) => Ok(Expr::Num(n, text)),
            Tok::Var(v) => Ok(Expr::Var(v)),
            _ => {
                self.pos -= 1;
                Err(self.error())
            }
        }
    }
}

/// Whether `e` can stand where a condition is expected: the note's logical operators
/// "cannot be used as comparators", so `(1 & 4)` does not evaluate. A variable can (a
/// list lookup like `$(HTTP_ACCEPT_LANGUAGE{da})` is a boolean).
fn check_condition(e: &Expr) -> Result<(), ExprError> {
    match e {
        Expr::Str(_) | Expr::Num(..) => Err(ExprError::NotACondition),
        Expr::Var(_) | Expr::Cmp(..) | Expr::Invalid => Ok(()),
        Expr::Not(inner) => check_condition(inner),
        Expr::And(a, b) | Expr::Or(a, b) => {
            check_condition(a)?;
            check_condition(b)
        }
    }
}

impl Expr {
    /// Compiles an expression.
    pub fn parse(s: &str) -> Result<Expr, ExprError> {
        let toks = lex(s)?;
        let mut p = Parser {
            toks,
            pos: 0,
            len: s.len(),
        };
        let e = p.or(0)?;
        if p.pos != p.toks.len() {
            return Err(p.error());
        }
        check_condition(&e)?;
        Ok(e)
    }

    /// Evaluates as a test: the result's truth.
    pub fn test(&self, req: &Request) -> bool {
        truthy(&self.eval(req))
    }

    fn eval<'r>(&'r self, req: &'r Request) -> Option<Value<'r>> {
        Some(match self {
            Expr::Str(s) => Value::Str(Cow::Borrowed(s)),
            Expr::Num(n, text) => Value::Num(*n, Cow::Borrowed(text)),
            Expr::Var(v) => return v.value(req),
            Expr::Not(e) => Value::Bool(!truthy(&e.eval(req))),
            Expr::And(a, b) => Value::Bool(truthy(&a.eval(req)) && truthy(&b.eval(req))),
            Expr::Or(a, b) => Value::Bool(truthy(&a.eval(req)) || truthy(&b.eval(req))),
            Expr::Cmp(op, a, b) => Value::Bool(compare(*op, a.eval(req), b.eval(req))),
            Expr::Invalid => Value::Bool(false),
        })
    }

    pub(crate) fn vars(&self, out: &mut Vec<VarRef>) {
        match self {
            Expr::Var(v) => out.push(v.clone()),
            Expr::Not(e) => e.vars(out),
            Expr::And(a, b) | Expr::Or(a, b) | Expr::Cmp(_, a, b) => {
                a.vars(out);
                b.vars(out);
            }
            Expr::Str(_) | Expr::Num(..) | Expr::Invalid => {}
        }
    }
}

/// Truth of a condition: booleans are themselves; a variable holding a number is true
/// unless zero, one holding a string is true unless empty; an unset variable is false.
fn truthy(v: &Option<Value<'_>>) -> bool {
    match v {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Num(n, _)) => *n != 0.0,
        Some(Value::Str(s)) => !s.is_empty(),
    }
}

/// The note's rules: an unset or empty operand makes any comparison false; two numbers
/// compare numerically; anything else compares as strings, byte by byte.
fn compare(op: CmpOp, a: Option<Value<'_>>, b: Option<Value<'_>>) -> bool {
    let (Some(a), Some(b)) = (a, b) else {
        return false;
    };
    let ordering = match (&a, &b) {
        (Value::Num(x, _), Value::Num(y, _)) => x.partial_cmp(y),
        _ => {
            let (x, y) = (a.as_text(), b.as_text());
            if x.is_empty() || y.is_empty() {
                return false;
            }
            Some(x.as_bytes().cmp(y.as_bytes()))
        }
    };
    let Some(ordering) = ordering else {
        return false;
    };
    use std::cmp::Ordering::*;
    match op {
        CmpOp::Eq => ordering == Equal,
        CmpOp::Ne => ordering != Equal,
        CmpOp::Lt => ordering == Less,
        CmpOp::Le => ordering != Greater,
        CmpOp::Gt => ordering == Greater,
        CmpOp::Ge => ordering != Less,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(expr: &str, req: &Request) -> bool {
        Expr::parse(expr)
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .test(req)
    }

    #[test]
    fn w3c_examples() {
        let r = Request::new("http://example.com/");
        assert!(!t("!(1==1)", &r));
        assert!(!t("!('a'<='c')", &r));
        assert!(t("(1==1)|('abc'=='def')", &r));
        assert!(!t("(4!=5)&(4==5)", &r));
    }

    #[test]
    fn comparison_binds_tighter_than_not() {
        let r = Request::new("http://h/").cookie("a", "x");
        assert!(!t("!$(HTTP_COOKIE{a}) == 'x'", &r));
        assert!(t("!$(HTTP_COOKIE{a}) == 'y'", &r));
        assert!(t("!1==2 & 1==1", &r));
        assert!(t("$(HTTP_COOKIE{a})", &r));
        assert!(!t("$(HTTP_COOKIE{b})", &r));
    }

    #[test]
    fn numbers_compare_numerically_strings_lexically() {
        let r = Request::new("http://h/?n=10&s=abc").cookie("v", "9");
        assert!(t("$(QUERY_STRING{n}) > 9", &r));
        assert!(t("$(QUERY_STRING{n}) > $(HTTP_COOKIE{v})", &r));
        assert!(t("'10' < '9'", &r), "quoted literals are strings");
        assert!(t("$(QUERY_STRING{s}) >= 'abc'", &r));
        assert!(
            !t("$(QUERY_STRING{missing}) != 'x'", &r),
            "unset operand is false"
        );
        assert!(t("$(QUERY_STRING{missing}|'x') == 'x'", &r));
    }

    #[test]
    fn rejects_malformed() {
        for bad in [
            "",
            "(",
            "1 ==",
            "a == 'b'",
            "'open",
            "1 == 1 1",
            "$(NOPE) == 1",
            "((1)",
            "(1 & 4)",
            "(\"abc\" | \"edf\")",
            "'a'",
            "!1",
        ] {
            assert!(Expr::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(Expr::parse("$ == 1").is_err(), "a lone $ is not a variable");
        assert!(Expr::parse("$HTTP_HOST == 1").is_err());
        assert_eq!(Expr::parse("(1 & 4)"), Err(ExprError::NotACondition));
        let deep = format!("{}1==1{}", "(".repeat(100), ")".repeat(100));
        assert_eq!(Expr::parse(&deep), Err(ExprError::TooDeep));
        let nots = format!("{}1==1", "!".repeat(100));
        assert_eq!(Expr::parse(&nots), Err(ExprError::TooDeep));
    }

    #[test]
    fn url_escape_keeps_values_in_their_segment() {
        let mut out = Vec::new();
        url_escape("//evil.com/x?y#z", false, &mut out);
        assert_eq!(out, b"%2F%2Fevil.com%2Fx%3Fy%23z");
        out.clear();
        url_escape("..", false, &mut out);
        assert_eq!(out, b"%2E%2E");
        out.clear();
        url_escape("example.com:8080", true, &mut out);
        assert_eq!(out, b"example.com:8080");
        out.clear();
        url_escape("evil.com/", true, &mut out);
        assert_eq!(out, b"evil.com%2F");
    }
}
