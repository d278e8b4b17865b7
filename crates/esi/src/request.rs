//! The request context an evaluation reads: the page URL and the headers ESI variables
//! come from. Cookies and query parameters are split once per request, here.

use std::borrow::Cow;

/// The ESI variables of the W3C note, section 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variable {
    /// `HTTP_ACCEPT_LANGUAGE` (list: `{lang}` is true when the language is accepted).
    AcceptLanguage,
    /// `HTTP_COOKIE` (dictionary: `{name}` is the cookie's value).
    Cookie,
    /// `HTTP_HOST`.
    Host,
    /// `HTTP_REFERER`.
    Referer,
    /// `HTTP_USER_AGENT` (dictionary: `{browser}`, `{os}`, `{version}`).
    UserAgent,
    /// `QUERY_STRING` (dictionary: `{name}` is the decoded parameter value).
    QueryString,
}

impl Variable {
    /// Looks a variable up by its ESI name.
    pub fn from_name(name: &str) -> Option<Variable> {
        Some(match name {
            "HTTP_ACCEPT_LANGUAGE" => Variable::AcceptLanguage,
            "HTTP_COOKIE" => Variable::Cookie,
            "HTTP_HOST" => Variable::Host,
            "HTTP_REFERER" => Variable::Referer,
            "HTTP_USER_AGENT" => Variable::UserAgent,
            "QUERY_STRING" => Variable::QueryString,
            _ => return None,
        })
    }

    /// The ESI name.
    pub fn name(self) -> &'static str {
        match self {
            Variable::AcceptLanguage => "HTTP_ACCEPT_LANGUAGE",
            Variable::Cookie => "HTTP_COOKIE",
            Variable::Host => "HTTP_HOST",
            Variable::Referer => "HTTP_REFERER",
            Variable::UserAgent => "HTTP_USER_AGENT",
            Variable::QueryString => "QUERY_STRING",
        }
    }
}

/// A variable's value for one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// A string (header value, cookie, query parameter, `'literal'`).
    Str(Cow<'a, str>),
    /// A number: an unquoted numeric literal, or a variable value that is all digits
    /// (`-?[0-9]+(.[0-9]+)?`).
    Num(f64, Cow<'a, str>),
    /// The result of a list lookup (`HTTP_ACCEPT_LANGUAGE{en}`) or of a comparison.
    Bool(bool),
}

impl Value<'_> {
    /// The value as text, as substituted into output.
    pub fn as_text(&self) -> Cow<'_, str> {
        match self {
            Value::Str(s) | Value::Num(_, s) => Cow::Borrowed(s),
            Value::Bool(true) => Cow::Borrowed("true"),
            Value::Bool(false) => Cow::Borrowed("false"),
        }
    }
}

/// Classifies a variable's string as a number when it is a plain decimal.
pub(crate) fn classify(s: Cow<'_, str>) -> Value<'_> {
    match parse_number(&s) {
        Some(n) => Value::Num(n, s),
        None => Value::Str(s),
    }
}

/// `-?[0-9]+(\.[0-9]+)?`, the only numbers ESI knows (no exponents, no `inf`).
pub(crate) fn parse_number(s: &str) -> Option<f64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (digits, None),
    };
    let all_digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(int) || frac.is_some_and(|f| !all_digits(f)) {
        return None;
    }
    s.parse().ok()
}

/// One request as ESI sees it. Build it with [`Request::new`] and the `header` methods;
/// every variable is derived from the page URL and five headers.
#[derive(Debug, Clone)]
pub struct Request {
    url: String,
    /// Length of the URL's `scheme://authority`, found once for all includes.
    origin_len: usize,
    host: Option<String>,
    referer: Option<String>,
    user_agent: Option<String>,
    /// `HTTP_USER_AGENT{browser}`, `{os}` and `{version}` (as a range of `user_agent`),
    /// classified once when the header is set rather than on every lookup.
    ua_classes: (&'static str, &'static str, Option<(usize, usize)>),
    accept_language: Option<String>,
    cookie: Option<String>,
    query: Option<String>,
    cookies: Vec<(String, String)>,
    params: Vec<(String, String)>,
    /// The URLs of the documents that include this one, the page first (empty for the
    /// page itself): an include of any of them, or of this one, would never end.
    ancestors: Vec<String>,
}

impl Default for Request {
    fn default() -> Request {
        Request {
            url: String::new(),
            origin_len: 0,
            host: None,
            referer: None,
            user_agent: None,
            ua_classes: ("OTHER", "OTHER", None),
            accept_language: None,
            cookie: None,
            query: None,
            cookies: Vec::new(),
            params: Vec::new(),
            ancestors: Vec::new(),
        }
    }
}

impl Request {
    /// A request for the page at `url` (absolute, like `http://example.com/a/page?x=1`, or
    /// a path). Include URLs are resolved against it; `QUERY_STRING` is its query.
    pub fn new(url: impl Into<String>) -> Request {
        let url = url.into();
        let mut req = Request {
            origin_len: crate::url::origin_len(&url),
            url,
            ..Request::default()
        };
        let query = req
            .url
            .split_once('?')
            .map(|(_, q)| q.split('#').next().unwrap_or(""));
        if let Some(q) = query {
            req.params = parse_query(q);
            req.query = Some(q.to_string());
        }
        if req.host.is_none() {
            req.host = host_of(&req.url).map(str::to_string);
        }
        req
    }

    /// Sets a request header (name case-insensitive). Headers that no ESI variable reads
    /// are ignored. A repeated `Cookie` header is joined with `; `.
    pub fn header(mut self, name: &str, value: &str) -> Request {
        self.set_header(name, value);
        self
    }

    /// In-place form of [`header`](Request::header).
    pub fn set_header(&mut self, name: &str, value: &str) {
        let value = value.trim();
        if name.eq_ignore_ascii_case("host") {
            self.host = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("referer") {
            self.referer = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("user-agent") {
            let version = version(value).map(|v| {
                let start = v.as_ptr() as usize - value.as_ptr() as usize;
                (start, start + v.len())
            });
            self.ua_classes = (browser(value), os(value), version);
            self.user_agent = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("accept-language") {
            self.accept_language = Some(value.to_string());
        } else if name.eq_ignore_ascii_case("cookie") {
            let joined = match self.cookie.take() {
                Some(prev) => format!("{prev}; {value}"),
                None => value.to_string(),
            };
            self.cookies = parse_cookies(&joined);
            self.cookie = Some(joined);
        }
    }

    /// Adds one cookie (as if it were in the `Cookie` header).
    pub fn cookie(self, name: &str, value: &str) -> Request {
        self.header("cookie", &format!("{name}={value}"))
    }

    /// The same request seen from a fragment at `url`: its includes resolve against `url`,
    /// every variable keeps its value (`QUERY_STRING` stays the page's).
    pub fn for_fragment(&self, url: &str) -> Request {
        let mut ancestors = self.ancestors.clone();
        ancestors.push(self.url.clone());
        Request {
            url: url.to_string(),
            origin_len: crate::url::origin_len(url),
            ancestors,
            ..self.clone()
        }
    }

    /// Whether an include of `url` (resolved) would include the document it is in, or
    /// a document that includes that one, at any depth: such an include is refused (it
    /// fails, so its alt, onerror and esi:try apply) instead of repeating the page
    /// until the depth limit.
    pub fn includes_itself(&self, url: &str) -> bool {
        url == self.url || self.ancestors.iter().any(|a| a == url)
    }

    /// The page URL includes are resolved against.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Resolves an include URL against the page URL.
    pub(crate) fn resolve(&self, reference: &str) -> String {
        crate::url::resolve_absolute_path(&self.url[..self.origin_len], reference)
            .unwrap_or_else(|| crate::url::resolve(&self.url, reference))
    }

    /// The value of `variable{key}` for this request, `None` when unset. Empty values
    /// count as unset (so defaults apply).
    pub fn get(&self, variable: Variable, key: Option<&str>) -> Option<Value<'_>> {
        let non_empty = |s: &str| !s.is_empty();
        fn text(s: Option<&String>) -> Option<Value<'_>> {
            s.map(|s| s.as_str())
                .filter(|s| !s.is_empty())
                .map(|s| classify(Cow::Borrowed(s)))
        }
        match (variable, key) {
            (Variable::AcceptLanguage, Some(lang)) => Some(Value::Bool(accepts_language(
                self.accept_language.as_deref()?,
                lang,
            ))),
            (Variable::AcceptLanguage, None) => text(self.accept_language.as_ref()),
            (Variable::Cookie, Some(name)) => self
                .cookies
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .filter(|v| non_empty(v))
                .map(|v| classify(Cow::Borrowed(v))),
            (Variable::Cookie, None) => text(self.cookie.as_ref()),
            (Variable::Host, _) => text(self.host.as_ref()),
            (Variable::Referer, _) => text(self.referer.as_ref()),
            (Variable::UserAgent, None) => text(self.user_agent.as_ref()),
            (Variable::UserAgent, Some(part)) => {
                let (browser, os, version) = self.ua_classes;
                let value = match part {
                    "browser" => browser,
                    "os" => os,
                    "version" => {
                        let (start, end) = version?;
                        self.user_agent.as_deref()?.get(start..end)?
                    }
                    _ => return None,
                };
                Some(classify(Cow::Borrowed(value)))
            }
            (Variable::QueryString, Some(name)) => self
                .params
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
                .filter(|v| non_empty(v))
                .map(|v| classify(Cow::Borrowed(v))),
            (Variable::QueryString, None) => text(self.query.as_ref()),
        }
    }
}

fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    (!host.is_empty()).then_some(host)
}

/// `a=1; b=2`: first occurrence of a name wins when looked up; values are kept raw
/// (surrounding double quotes removed).
fn parse_cookies(header: &str) -> Vec<(String, String)> {
    header
        .split(';')
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            let name = name.trim();
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            (!name.is_empty()).then(|| (name.to_string(), value.to_string()))
        })
        .collect()
}

fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(name), percent_decode(value))
        })
        .collect()
}

/// `application/x-www-form-urlencoded` decoding: `+` is a space, `%XX` a byte; invalid
/// UTF-8 is replaced.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len()
                && hex(bytes[i + 1]).is_some()
                && hex(bytes[i + 2]).is_some() =>
            {
                out.push(hex(bytes[i + 1]).unwrap_or(0) * 16 + hex(bytes[i + 2]).unwrap_or(0));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// True when the `Accept-Language` list names `lang` (case-insensitive), either exactly or
/// as a more specific tag (`en` accepts `en-gb`). An entry with `q=0` does not count.
fn accepts_language(header: &str, lang: &str) -> bool {
    header.split(',').any(|entry| {
        let mut parts = entry.split(';');
        let tag = parts.next().unwrap_or("").trim();
        let refused = parts.any(|p| {
            let p = p.trim();
            p.strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f64>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        if refused || tag.is_empty() {
            return false;
        }
        tag.eq_ignore_ascii_case(lang)
            || (tag.len() > lang.len()
                && tag.as_bytes()[lang.len()] == b'-'
                && tag[..lang.len()].eq_ignore_ascii_case(lang))
    })
}

fn contains(ua: &str, needle: &str) -> bool {
    memchr::memmem::find(ua.as_bytes(), needle.as_bytes()).is_some()
}

/// The W3C note's three browser classes: `MSIE`, `MOZILLA`, `OTHER`.
fn browser(ua: &str) -> &'static str {
    if contains(ua, "MSIE") || contains(ua, "Trident/") {
        "MSIE"
    } else if ua.starts_with("Mozilla") {
        "MOZILLA"
    } else {
        "OTHER"
    }
}

/// The W3C note's operating system classes: `WIN`, `MAC`, `UNIX`, `OTHER`.
fn os(ua: &str) -> &'static str {
    if contains(ua, "Windows")
        || contains(ua, "Win95")
        || contains(ua, "Win98")
        || contains(ua, "WinNT")
    {
        "WIN"
    } else if contains(ua, "Mac") || contains(ua, "iPhone") || contains(ua, "iPad") {
        "MAC"
    } else if ["X11", "Linux", "Unix", "BSD", "SunOS", "Android"]
        .iter()
        .any(|n| contains(ua, n))
    {
        "UNIX"
    } else {
        "OTHER"
    }
}

/// The browser version: the number after `MSIE ` for MSIE, else after the first `/`.
fn version(ua: &str) -> Option<&str> {
    let start = if let Some(i) = ua.find("MSIE ") {
        i + 5
    } else {
        ua.find('/')? + 1
    };
    let rest = &ua[start..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let v = rest[..end].trim_end_matches('.');
    (!v.is_empty()).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_language_matches_tags_and_prefixes() {
        assert!(accepts_language("da, en-gb;q=0.8, en;q=0.7", "en-gb"));
        assert!(accepts_language("da, en-GB;q=0.8", "en"));
        assert!(!accepts_language("da, en-gb", "fr"));
        assert!(!accepts_language("english", "en"));
        assert!(!accepts_language("en;q=0", "en"));
    }

    #[test]
    fn user_agent_classes() {
        let ie = "Mozilla/4.0 (compatible; MSIE 5.5; Windows NT 5.0)";
        assert_eq!(
            (browser(ie), os(ie), version(ie)),
            ("MSIE", "WIN", Some("5.5"))
        );
        let ff = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0";
        assert_eq!(
            (browser(ff), os(ff), version(ff)),
            ("MOZILLA", "UNIX", Some("5.0"))
        );
        let curl = "curl/8.4.0";
        assert_eq!(
            (browser(curl), os(curl), version(curl)),
            ("OTHER", "OTHER", Some("8.4.0"))
        );
    }

    #[test]
    fn query_values_are_decoded() {
        let req = Request::new("http://h/p?a=hello%20world&b=x+y&c&d=%zz");
        let q = |k| {
            req.get(Variable::QueryString, Some(k))
                .map(|v| v.as_text().into_owned())
        };
        assert_eq!(q("a").as_deref(), Some("hello world"));
        assert_eq!(q("b").as_deref(), Some("x y"));
        assert_eq!(q("c"), None);
        assert_eq!(q("d").as_deref(), Some("%zz"));
    }

    #[test]
    fn numbers_are_plain_decimals_only() {
        assert_eq!(parse_number("42"), Some(42.0));
        assert_eq!(parse_number("-1.5"), Some(-1.5));
        assert_eq!(parse_number("1e3"), None);
        assert_eq!(parse_number("inf"), None);
        assert_eq!(parse_number("1."), None);
        assert_eq!(parse_number(""), None);
    }
}
