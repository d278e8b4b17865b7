//! Values with variables (`$host`, `$arg_ref`, `$1`, `$id`...), compiled once: a value
//! without a variable is kept as its bytes and costs nothing to expand; one with
//! variables is expanded per request into a buffer the caller reuses.

use std::net::SocketAddr;

use crate::error::Error;

/// What a request offers to variables.
pub struct Ctx<'a> {
    pub req: &'a wire::Request<'a, 'a>,
    /// The target as the client sent it (`$request_uri`), whatever a rewrite made of it.
    pub original: &'a [u8],
    /// The decoded, normalised path (`$uri`).
    pub path: &'a [u8],
    pub peer: SocketAddr,
    pub secure: bool,
    /// The request's id (`$request_id`): 32 hex digits.
    pub request_id: &'a [u8],
}

impl Ctx<'_> {
    /// The query, without its `?` (empty without one).
    pub fn query(&self) -> &[u8] {
        match memchr::memchr(b'?', self.req.path) {
            Some(q) => &self.req.path[q + 1..],
            None => b"",
        }
    }

    /// The port the request names in its Host, else its scheme's (`$server_port`;
    /// worked out only when a value uses it).
    pub fn server_port(&self) -> u16 {
        let host = self.req.header("host").unwrap_or_default();
        let port = host
            .iter()
            .rposition(|&b| b == b':')
            .filter(|&c| !host[c..].contains(&b']'))
            .and_then(|c| std::str::from_utf8(&host[c + 1..]).ok()?.parse().ok());
        port.unwrap_or(if self.secure { 443 } else { 80 })
    }

    /// The host the request names, without its port, in lower case as sent (`$host`).
    /// Empty when it is not a host name or address (a `/`, `\\`, `..` or any other byte
    /// a name cannot have): no redirect goes to a path the client slipped into Host.
    pub fn host(&self) -> &[u8] {
        let host = self.req.header("host").unwrap_or_default();
        let name = match host.iter().rposition(|&b| b == b':') {
            // `[::1]:8080`: the colon after the bracket is the port's.
            Some(colon) if !host[colon..].contains(&b']') => &host[..colon],
            _ => host,
        };
        let byte = |b: &u8| b.is_ascii_alphanumeric() || b"-.[]:_".contains(b);
        match name.iter().all(byte) && !name.windows(2).any(|w| w == b"..") {
            true => name,
            false => b"",
        }
    }

    /// The first query parameter named `name`, as sent (not decoded, as nginx's
    /// `$arg_NAME`).
    pub fn arg(&self, name: &[u8]) -> Option<&[u8]> {
        self.query().split(|&b| b == b'&').find_map(|pair| {
            let (n, v) = match memchr::memchr(b'=', pair) {
                Some(eq) => (&pair[..eq], &pair[eq + 1..]),
                None => (pair, &b""[..]),
            };
            (n == name).then_some(v)
        })
    }

    /// The cookie named `name`.
    pub fn cookie(&self, name: &[u8]) -> Option<&[u8]> {
        self.req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("cookie"))
            .flat_map(|h| h.value.split(|&b| b == b';'))
            .find_map(|pair| {
                let pair = wire::trim_ows(pair);
                let eq = memchr::memchr(b'=', pair)?;
                (&pair[..eq] == name).then_some(&pair[eq + 1..])
            })
    }

    /// The request field named `name` (`_` standing for `-`, any case), its values
    /// joined by `, ` when sent more than once: the first one here, as nginx's
    /// `$http_NAME` gives for most fields.
    pub fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.req
            .headers
            .iter()
            .find(|h| {
                h.name.len() == name.len()
                    && h.name
                        .bytes()
                        .zip(name)
                        .all(|(a, &b)| a.eq_ignore_ascii_case(&b) || (a == b'-' && b == b'_'))
            })
            .map(|h| h.value)
    }
}

/// Where a regex matched: each group's span in the path, for `$1`-`$9` and named ones.
pub type Captures = [Option<(usize, usize)>];

#[derive(Debug, Clone, PartialEq)]
enum Var {
    Host,
    Uri,
    RequestUri,
    Args,
    Arg(Box<[u8]>),
    Http(Box<[u8]>),
    Cookie(Box<[u8]>),
    RemoteAddr,
    Scheme,
    ServerPort,
    RequestId,
    /// A capture group of the route's (or the rewrite's) regex, by number.
    Capture(usize),
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(Box<[u8]>),
    Var(Var),
}

/// A value as written in the configuration, compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Box<[Part]>,
    /// The whole value when it has no variable.
    literal: Option<Box<[u8]>>,
}

impl Template {
    /// Compiles `text`; `groups` names the capture groups of the regex whose captures it
    /// may use (none when it has none).
    pub fn compile(text: &str, groups: Option<&regex::bytes::Regex>) -> Result<Template, Error> {
        let bytes = text.as_bytes();
        let mut parts = Vec::new();
        let mut text_from = 0;
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'$' {
                i += 1;
                continue;
            }
            let (name, end) = match bytes.get(i + 1) {
                Some(b'{') => match memchr::memchr(b'}', &bytes[i + 2..]) {
                    Some(close) => (&text[i + 2..i + 2 + close], i + 3 + close),
                    None => return Err(Error::new(format!("`{}` has no `}}`", &text[i..]))),
                },
                Some(b'0'..=b'9') => (&text[i + 1..i + 2], i + 2),
                _ => {
                    let len = bytes[i + 1..]
                        .iter()
                        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                        .count();
                    (&text[i + 1..i + 1 + len], i + 1 + len)
                }
            };
            if name.is_empty() {
                // A `$` that starts no name is itself.
                i += 1;
                continue;
            }
            if text_from < i {
                parts.push(Part::Text(bytes[text_from..i].into()));
            }
            parts.push(Part::Var(variable(name, groups)?));
            i = end;
            text_from = end;
        }
        if text_from < bytes.len() {
            parts.push(Part::Text(bytes[text_from..].into()));
        }
        let literal = match &parts[..] {
            [] => Some(Box::default()),
            [Part::Text(t)] => Some(t.clone()),
            _ => None,
        };
        Ok(Template {
            parts: parts.into_boxed_slice(),
            literal,
        })
    }

    /// The value when it has no variable: used as it is, nothing expanded.
    pub fn literal(&self) -> Option<&[u8]> {
        self.literal.as_deref()
    }

    /// [`Template::expand`] for a request target (a `rewrite`, a `try_files` fallback):
    /// what a decoded variable brings (`$uri`, a capture of the decoded path) has its `%`,
    /// `?`, `#` and invisible bytes percent-encoded, so the target is never decoded twice
    /// (`%252e` stays a `%2e` in the path, not a `.`), nor gains a query from a path.
    pub fn expand_target(&self, ctx: &Ctx<'_>, captured: (&[u8], &Captures), out: &mut Vec<u8>) {
        if let Some(literal) = &self.literal {
            out.extend_from_slice(literal);
            return;
        }
        let mut decoded = Vec::new();
        for part in self.parts.iter() {
            match part {
                Part::Text(t) => out.extend_from_slice(t),
                Part::Var(v @ (Var::Uri | Var::Capture(_))) => {
                    decoded.clear();
                    expand_var(v, ctx, captured, &mut decoded);
                    for &b in &decoded {
                        match b {
                            b'%' | b'?' | b'#' => {
                                out.extend_from_slice(format!("%{b:02X}").as_bytes())
                            }
                            b'!'..=b'~' => out.push(b),
                            _ => out.extend_from_slice(format!("%{b:02X}").as_bytes()),
                        }
                    }
                }
                Part::Var(v) => expand_var(v, ctx, captured, out),
            }
        }
    }

    /// Whether it uses a capture group.
    pub fn uses_captures(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Var(Var::Capture(_))))
    }

    /// Whether it uses `$request_id`.
    pub fn uses_request_id(&self) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Var(Var::RequestId)))
    }

    /// Appends the value to `out`. `captured` is the text the captures index into (the
    /// path the regex ran on) and their spans; a group that did not take part, or a
    /// variable the request does not have, expands to nothing (as in nginx).
    pub fn expand(&self, ctx: &Ctx<'_>, captured: (&[u8], &Captures), out: &mut Vec<u8>) {
        if let Some(literal) = &self.literal {
            out.extend_from_slice(literal);
            return;
        }
        for part in self.parts.iter() {
            match part {
                Part::Text(t) => out.extend_from_slice(t),
                Part::Var(v) => expand_var(v, ctx, captured, out),
            }
        }
    }
}

fn expand_var(var: &Var, ctx: &Ctx<'_>, (text, spans): (&[u8], &Captures), out: &mut Vec<u8>) {
    match var {
        Var::Host => out.extend(ctx.host().iter().map(u8::to_ascii_lowercase)),
        Var::Uri => out.extend_from_slice(ctx.path),
        Var::RequestUri => out.extend_from_slice(ctx.original),
        Var::Args => out.extend_from_slice(ctx.query()),
        Var::Arg(name) => out.extend_from_slice(ctx.arg(name).unwrap_or_default()),
        Var::Http(name) => out.extend_from_slice(ctx.field(name).unwrap_or_default()),
        Var::Cookie(name) => out.extend_from_slice(ctx.cookie(name).unwrap_or_default()),
        Var::RemoteAddr => {
            use std::io::Write;
            let _ = write!(out, "{}", ctx.peer.ip());
        }
        Var::Scheme => out.extend_from_slice(if ctx.secure { b"https" } else { b"http" }),
        Var::ServerPort => {
            use std::io::Write;
            let _ = write!(out, "{}", ctx.server_port());
        }
        Var::RequestId => out.extend_from_slice(ctx.request_id),
        Var::Capture(n) => {
            if let Some(Some((start, end))) = spans.get(*n) {
                out.extend_from_slice(&text[*start..*end]);
            }
        }
    }
}

/// The variable `name` stands for.
fn variable(name: &str, groups: Option<&regex::bytes::Regex>) -> Result<Var, Error> {
    let prefixed = |prefix: &str| {
        name.strip_prefix(prefix)
            .filter(|rest| !rest.is_empty())
            .map(|rest| rest.as_bytes().to_vec().into_boxed_slice())
    };
    let var = match name {
        "host" => Var::Host,
        "uri" => Var::Uri,
        "request_uri" => Var::RequestUri,
        "args" | "query_string" => Var::Args,
        "remote_addr" => Var::RemoteAddr,
        "scheme" => Var::Scheme,
        "server_port" => Var::ServerPort,
        "request_id" => Var::RequestId,
        _ => {
            if let Some(n) = prefixed("arg_") {
                Var::Arg(n)
            } else if let Some(n) = prefixed("http_") {
                Var::Http(n)
            } else if let Some(n) = prefixed("cookie_") {
                Var::Cookie(n)
            } else if let Some(group) = capture(name, groups) {
                Var::Capture(group)
            } else {
                return Err(Error::new(match groups {
                    Some(_) => format!("unknown variable `${name}` (not one of tessera's, nor a capture group of the regex)"),
                    None => format!("unknown variable `${name}` (not one of tessera's; captures need a `regex`)"),
                }));
            }
        }
    };
    Ok(var)
}

/// The number of capture group `name` (`1`-`9`, or a group's name) of `regex`.
fn capture(name: &str, regex: Option<&regex::bytes::Regex>) -> Option<usize> {
    let regex = regex?;
    match name.parse::<usize>() {
        Ok(n) => (n >= 1 && n < regex.captures_len()).then_some(n),
        Err(_) => regex.capture_names().position(|n| n == Some(name)),
    }
}

/// Calls `f` with the context of a request parsed from `METHOD TARGET` and `fields`
/// (from 192.0.2.7, a fixed id): for the tests of the templates and the table.
#[cfg(test)]
pub(crate) fn with_ctx(
    method: &str,
    target: &str,
    fields: &str,
    secure: bool,
    f: impl FnOnce(&Ctx<'_>),
) {
    let raw = format!("{method} {target} HTTP/1.1\r\n{fields}\r\n");
    let mut storage = wire::HeaderStorage::new();
    let req = wire::parse_request(raw.as_bytes(), &mut storage, &wire::Limits::default())
        .unwrap()
        .unwrap();
    let ctx = Ctx {
        req: &req,
        original: target.as_bytes(),
        path: target.split('?').next().unwrap().as_bytes(),
        peer: "192.0.2.7:5000".parse().unwrap(),
        secure,
        request_id: b"0123456789abcdef0123456789abcdef",
    };
    f(&ctx);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_request(target: &str, fields: &str, f: impl FnOnce(&Ctx<'_>)) {
        with_ctx("GET", target, fields, true, f)
    }

    fn expand(template: &str, ctx: &Ctx<'_>) -> String {
        let t = Template::compile(template, None).unwrap();
        let mut out = Vec::new();
        t.expand(ctx, (b"", &[]), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn every_variable_expands() {
        let fields = "Host: Example.COM:8443\r\nX-Beta: 1\r\nCookie: a=1; sid=xyz\r\n";
        with_request("/p/q?ref=mail&x=2", fields, |ctx| {
            assert_eq!(
                expand("https://$host$request_uri", ctx),
                "https://example.com/p/q?ref=mail&x=2"
            );
            assert_eq!(
                expand("$uri|$args|$arg_ref|$arg_none", ctx),
                "/p/q|ref=mail&x=2|mail|"
            );
            assert_eq!(expand("${http_x_beta}-$cookie_sid", ctx), "1-xyz");
            assert_eq!(
                expand("$remote_addr $scheme $server_port", ctx),
                "192.0.2.7 https 8443"
            );
            assert_eq!(
                expand("id=$request_id", ctx),
                "id=0123456789abcdef0123456789abcdef"
            );
            assert_eq!(expand("cost: 5$ or $", ctx), "cost: 5$ or $");
        });
    }

    #[test]
    fn captures_by_number_and_name() {
        let regex = regex::bytes::Regex::new("^/users/(?<id>[0-9]+)/(.*)$").unwrap();
        let t = Template::compile("/u/$id?rest=$2&one=$1", Some(&regex)).unwrap();
        assert!(t.uses_captures());
        with_request("/users/42/x", "Host: a\r\n", |ctx| {
            let caps = regex.captures(b"/users/42/x").unwrap();
            let spans: Vec<_> = (0..caps.len())
                .map(|i| caps.get(i).map(|m| (m.start(), m.end())))
                .collect();
            let mut out = Vec::new();
            t.expand(ctx, (b"/users/42/x", &spans), &mut out);
            assert_eq!(out, b"/u/42?rest=x&one=42");
        });
    }

    #[test]
    fn unknown_variables_are_refused_by_name() {
        let e = Template::compile("/x/$nope", None).unwrap_err().to_string();
        assert!(e.contains("`$nope`"), "{e}");
        let regex = regex::bytes::Regex::new("^/(a)$").unwrap();
        assert!(Template::compile("$2", Some(&regex)).is_err());
        assert!(Template::compile("$1", Some(&regex)).is_ok());
        assert!(Template::compile("${host", None).is_err());
    }

    #[test]
    fn a_value_without_variables_is_literal() {
        let t = Template::compile("public, max-age=3600", None).unwrap();
        assert_eq!(t.literal(), Some(&b"public, max-age=3600"[..]));
    }
}
