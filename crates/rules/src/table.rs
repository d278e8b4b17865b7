//! A site's routes, compiled: exact paths in a map, prefixes longest first, regexes in
//! one multi-pattern pass, and the order nginx gives `location`s (docs/config.md, "Routing
//! and rewriting"): an exact path first; else the longest prefix when it says
//! `no_regex`; else the first regex in file order; else the longest prefix. Matchers
//! other than the path (methods, header, query, cookie, scheme) narrow a route: one that
//! does not hold is passed over for the next candidate in that order.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::IpAddr;

use regex::bytes::{Regex, RegexBuilder};
use regex_automata::meta;
use regex_automata::{Input, PatternSet};

use crate::access::{in_network, network, Access};
use crate::config::{FieldMatch, RouteRules};
use crate::edits::{Edits, LinePlan, LinePlans};
use crate::error::Error;
use crate::template::{Ctx, Template};

/// How a route's path matches.
#[derive(Debug, Clone)]
pub enum PathMatch {
    Exact(Box<[u8]>),
    Prefix(Box<[u8]>),
    Regex(Regex),
}

/// What a route does when it is chosen.
#[derive(Debug, Clone)]
pub enum Action {
    /// Hands the request to the module that declared the route (the proxy, a script, the
    /// files), with the route's edits.
    Module,
    /// A fixed response.
    Respond {
        status: u16,
        body: Template,
        content_type: Box<[u8]>,
    },
    /// A redirect to `to`.
    Redirect { status: u16, to: Template },
    /// A new path (and query), then the request is routed again.
    Rewrite { from: Option<Regex>, to: Template },
    /// The files of another directory (`alias`), under the route's prefix.
    Alias(std::path::PathBuf),
    /// Files tried in turn; then the fallback.
    TryFiles {
        files: Box<[Template]>,
        fallback: Fallback,
    },
}

/// What `try_files` does when no file is there.
#[derive(Debug, Clone)]
pub enum Fallback {
    /// Routes the request to this URI.
    Uri(Template),
    /// Answers this status.
    Status(u16),
}

/// One compiled route.
#[derive(Debug)]
pub struct Rule {
    /// Its place in the configuration (0-based, among its site's routes).
    pub index: usize,
    /// How an error or a log line names it (`route 3 (/api/)`).
    pub name: String,
    pub path: PathMatch,
    pub no_regex: bool,
    /// A `regex` that ignores case.
    case_insensitive: bool,
    narrow: Narrow,
    pub action: Action,
    /// Edits of the response (after the host's).
    pub response: Option<Edits>,
    /// Edits of the request's fields on the way to the module (`request_headers`).
    pub request: Option<Edits>,
    /// Taken off the path's start before the module sees it (`strip_prefix`).
    pub strip_prefix: Option<Box<[u8]>>,
    /// Put before the path after that (`add_prefix`).
    pub add_prefix: Option<Box<[u8]>>,
    /// Pages for error statuses, before the host's (`error_page`).
    errors: Pages,
    /// Whether a value uses the route regex's captures (they are found only then).
    pub captures: bool,
    /// Its `access` list, replacing the host's.
    pub access: Option<Access>,
}

/// Error pages: status and the path of the page in the site's root, by status.
type Pages = Box<[(u16, Page)]>;

/// What an error page is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Page {
    /// A file of the site's root, by its normalised path.
    File(Box<[u8]>),
    /// The request sent again to this upstream, whose answer goes out in its place
    /// (`@upstream:NAME`, nginx's `error_page 502 = @fallback`).
    Upstream(Box<str>),
}

/// What a site says besides its routes: its response edits and error pages, each with
/// the key that names it in errors.
#[derive(Default)]
pub struct Host<'a> {
    pub response: Option<(&'a crate::config::HeaderEdits, &'a str)>,
    pub errors: Option<(&'a std::collections::BTreeMap<String, String>, &'a str)>,
    /// Its `access` list and `deny_status`, and the key that names them.
    pub access: Option<(&'a [crate::access::AccessRule], Option<u16>, &'a str)>,
}

#[derive(Debug, Default)]
struct Narrow {
    methods: Box<[Box<str>]>,
    header: Option<Cond>,
    query: Option<Cond>,
    cookie: Option<Cond>,
    /// `Some(true)`: https only.
    secure: Option<bool>,
    /// Networks the client must be in (any of them): address and prefix length.
    clients: Box<[(IpAddr, u8)]>,
}

#[derive(Debug)]
struct Cond {
    name: Box<[u8]>,
    test: Test,
}

#[derive(Debug)]
enum Test {
    Present,
    Equals(Box<[u8]>),
    Matches(Regex),
}

impl Cond {
    fn holds(&self, value: Option<&[u8]>) -> bool {
        match (&self.test, value) {
            (_, None) => false,
            (Test::Present, Some(_)) => true,
            (Test::Equals(want), Some(v)) => v == &want[..],
            (Test::Matches(r), Some(v)) => r.is_match(v),
        }
    }
}

impl Narrow {
    fn is_empty(&self) -> bool {
        self.methods.is_empty()
            && self.header.is_none()
            && self.query.is_none()
            && self.cookie.is_none()
            && self.secure.is_none()
            && self.clients.is_empty()
    }

    fn holds(&self, ctx: &Ctx<'_>) -> bool {
        (self.methods.is_empty() || self.methods.iter().any(|m| **m == *ctx.req.method_token))
            && self.header.as_ref().is_none_or(|c| {
                c.holds(
                    ctx.req
                        .header(std::str::from_utf8(&c.name).unwrap_or_default()),
                )
            })
            && self
                .query
                .as_ref()
                .is_none_or(|c| c.holds(ctx.arg(&c.name)))
            && self
                .cookie
                .as_ref()
                .is_none_or(|c| c.holds(ctx.cookie(&c.name)))
            && self.secure.is_none_or(|s| s == ctx.secure)
            && (self.clients.is_empty()
                || self
                    .clients
                    .iter()
                    .any(|&(net, len)| in_network(ctx.peer.ip(), net, len)))
    }
}

/// The routes of one site, and the site's own response edits.
#[derive(Debug, Default)]
pub struct Table {
    rules: Vec<Rule>,
    /// Exact paths, hashed for every request of the site (with foldhash, as the server's
    /// own per-request maps, rather than std's SipHash).
    exact: HashMap<Box<[u8]>, Vec<usize>, foldhash::fast::RandomState>,
    /// Prefix rules, longest prefix first (file order among equal ones).
    prefixes: Vec<usize>,
    regexes: Option<meta::Regex>,
    /// The rule of each pattern of `regexes`.
    regex_rules: Vec<usize>,
    /// The host's `response_headers`: on every response of the site.
    pub host_response: Option<Edits>,
    /// The host's `error_page`s.
    host_errors: Pages,
    /// Whether a value uses `$request_id` (only then is an id made per request).
    pub request_id: bool,
    /// The response edits of no route (the host's) and of each route (the host's then
    /// the route's), as applied to a head while it is written, when they can be.
    host_plans: Option<LinePlans>,
    rule_plans: Vec<Option<LinePlans>>,
    /// The host's `access` list.
    host_access: Option<Access>,
}

/// The route chosen for a request, and where its regex's groups matched (when a value
/// needs them).
#[derive(Debug)]
pub struct Found<'t> {
    pub rule: &'t Rule,
    pub captures: Vec<Option<(usize, usize)>>,
}

thread_local! {
    /// Which regexes matched, reused from request to request (sized to the largest set):
    /// matching allocates nothing.
    static MATCHED: RefCell<Option<PatternSet>> = const { RefCell::new(None) };
}

impl Table {
    /// Compiles a site's routes (`routes`: each route's rule keys and whether a module
    /// serves it) and the host's response edits.
    /// `routes_key` names the routes in errors (`route`, `host[0].route`), `host_key`
    /// the response edits (`response_headers`, `host[0].response_headers`).
    pub fn compile(
        routes: &[(RouteRules, bool)],
        routes_key: &str,
        host: Host<'_>,
    ) -> Result<Table, Error> {
        let mut table = Table {
            host_response: match host.response {
                Some((edits, key)) => {
                    Some(Edits::compile(edits, true, None).map_err(|e| e.at(key))?)
                }
                None => None,
            },
            host_errors: match host.errors {
                Some((pages, key)) => error_pages(pages).map_err(|e| e.at(key))?,
                None => Pages::default(),
            },
            host_access: match host.access {
                Some((list, status, key)) => {
                    Access::compile(list, status).map_err(|e| e.at(key))?
                }
                None => None,
            },
            ..Table::default()
        };
        let mut patterns = Vec::new();
        for (index, (config, module)) in routes.iter().enumerate() {
            let rule = compile_rule(routes_key, index, config, *module)?;
            if let Some(earlier) = table.rules.iter().find(|e| e.shadows(&rule)) {
                return Err(Error::new(format!(
                    "never chosen: `{}` before it has the same {} and \
                     nothing that narrows it, so it takes every request this one would",
                    earlier.name,
                    rule.path.kind()
                ))
                .at(&rule.name));
            }
            match &rule.path {
                PathMatch::Exact(p) => table.exact.entry(p.clone()).or_default().push(index),
                PathMatch::Prefix(_) => table.prefixes.push(index),
                PathMatch::Regex(r) => {
                    patterns.push((r.as_str().to_string(), config.case_insensitive));
                    table.regex_rules.push(index);
                }
            }
            table.request_id |= rule.uses_request_id();
            table.rules.push(rule);
        }
        table.request_id |= table
            .host_response
            .as_ref()
            .is_some_and(Edits::uses_request_id);
        let host = table.host_response.as_ref();
        table.host_plans = host.and_then(|h| LinePlans::of(&[h]));
        table.rule_plans = table
            .rules
            .iter()
            .map(|r| {
                let lists: Vec<&Edits> = host.into_iter().chain(r.response.as_ref()).collect();
                (!lists.is_empty()).then(|| LinePlans::of(&lists)).flatten()
            })
            .collect();
        let rules = &table.rules;
        let len = |i: &usize| match &rules[*i].path {
            PathMatch::Prefix(p) => p.len(),
            _ => 0,
        };
        table.prefixes.sort_by_key(|i| std::cmp::Reverse(len(i)));
        if !patterns.is_empty() {
            // One set per case flag is not needed: the flag is written into each pattern.
            let patterns: Vec<String> = patterns
                .iter()
                .map(|(p, ci)| match ci {
                    true => format!("(?i:{p})"),
                    false => p.clone(),
                })
                .collect();
            // As `regex::bytes::RegexSet`: a pattern may match bytes that are not UTF-8,
            // and every pattern that matches is reported (`MatchKind::All`).
            let set = meta::Builder::new()
                .syntax(regex_automata::util::syntax::Config::new().utf8(false))
                .configure(
                    meta::Config::new()
                        .utf8_empty(false)
                        .match_kind(regex_automata::MatchKind::All),
                )
                .build_many(&patterns)
                .map_err(|e| Error::new(format!("invalid regex: {e}")))?;
            table.regexes = Some(set);
        }
        Ok(table)
    }

    /// The response edits of the route `rule` (or of no route) for a response of
    /// `status`, as applied to a head while it is written; `None` when there are none
    /// or they cannot be applied so (a variable, a `default`).
    pub fn line_plan(&self, rule: Option<usize>, status: u16) -> Option<&LinePlan> {
        let plans = match rule {
            Some(i) => self.rule_plans.get(i)?.as_ref(),
            None => self.host_plans.as_ref(),
        };
        plans.map(|p| p.for_status(status))
    }

    /// Whether the site has no route, no response edit and no error page: the request
    /// goes the way it did before rules existed, at no cost.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.host_response.is_none() && self.host_errors.is_empty()
    }

    /// Whether a response of the route `rule` (or of no route) may be replaced by an
    /// error page.
    pub fn has_pages(&self, rule: Option<usize>) -> bool {
        !self.host_errors.is_empty() || rule.is_some_and(|i| !self.rules[i].errors.is_empty())
    }

    /// The error page for `status` on the route `rule` (its own, else the host's).
    pub fn page(&self, rule: Option<usize>, status: u16) -> Option<&Page> {
        let own = rule.map(|i| &self.rules[i].errors[..]).unwrap_or_default();
        own.iter()
            .chain(self.host_errors.iter())
            .find(|(s, _)| *s == status)
            .map(|(_, page)| page)
    }

    /// Whether an error page of the route `rule` (or of its host) is an upstream's.
    pub fn upstream_page(&self, rule: Option<usize>) -> bool {
        upstream(&self.host_errors) || rule.is_some_and(|i| upstream(&self.rules[i].errors))
    }

    /// Whether any error page of the site is an upstream's.
    pub fn upstream_pages(&self) -> bool {
        upstream(&self.host_errors) || self.rules.iter().any(|r| upstream(&r.errors))
    }

    /// The `access` list a request of the route `rule` (or of no route) is held to: the
    /// route's own, else the host's.
    pub fn access(&self, rule: Option<usize>) -> Option<&Access> {
        let own = rule.and_then(|i| self.rules[i].access.as_ref());
        own.or(self.host_access.as_ref())
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The route for a request whose normalised path is `ctx.path`.
    pub fn find<'t>(&'t self, ctx: &Ctx<'_>) -> Option<Found<'t>> {
        let path = ctx.path;
        let holds = |i: &usize| self.rules[*i].narrow.holds(ctx);
        if let Some(found) = self
            .exact
            .get(path)
            .and_then(|rules| rules.iter().find(|i| holds(i)))
        {
            return Some(self.found(*found, path));
        }
        let prefix = self.prefixes.iter().find(|&&i| match &self.rules[i].path {
            PathMatch::Prefix(p) => takes(p, path) && holds(&i),
            _ => false,
        });
        if let Some(&i) = prefix {
            if self.rules[i].no_regex {
                return Some(self.found(i, path));
            }
        }
        if let Some(set) = &self.regexes {
            let regex = MATCHED.with_borrow_mut(|matched| {
                let len = set.pattern_len();
                let matched = match matched {
                    Some(m) if m.capacity() >= len => m,
                    other => other.insert(PatternSet::new(len)),
                };
                matched.clear();
                set.which_overlapping_matches(&Input::new(path), matched);
                matched
                    .iter()
                    .map(|n| self.regex_rules[n.as_usize()])
                    .find(|i| holds(i))
            });
            if let Some(i) = regex {
                return Some(self.found(i, path));
            }
        }
        prefix.map(|&i| self.found(i, path))
    }

    fn found(&self, i: usize, path: &[u8]) -> Found<'_> {
        let rule = &self.rules[i];
        let captures = match (&rule.path, rule.captures) {
            (PathMatch::Regex(r), true) => match r.captures(path) {
                Some(c) => c.iter().map(|m| m.map(|m| (m.start(), m.end()))).collect(),
                None => Vec::new(),
            },
            _ => Vec::new(),
        };
        Found { rule, captures }
    }
}

impl PathMatch {
    fn kind(&self) -> &'static str {
        match self {
            PathMatch::Exact(_) => "`path`",
            PathMatch::Prefix(_) => "`prefix`",
            PathMatch::Regex(_) => "`regex`",
        }
    }
}

impl Rule {
    /// Whether this earlier rule takes every request `later` would: the same path
    /// matcher, and no matcher narrowing this one.
    fn shadows(&self, later: &Rule) -> bool {
        let same = match (&self.path, &later.path) {
            (PathMatch::Exact(a), PathMatch::Exact(b))
            | (PathMatch::Prefix(a), PathMatch::Prefix(b)) => a == b,
            (PathMatch::Regex(a), PathMatch::Regex(b)) => {
                a.as_str() == b.as_str() && self.case_insensitive == later.case_insensitive
            }
            _ => false,
        };
        same && self.narrow.is_empty()
    }

    fn uses_request_id(&self) -> bool {
        let action = match &self.action {
            Action::Respond { body, .. } => body.uses_request_id(),
            Action::Redirect { to, .. } | Action::Rewrite { to, .. } => to.uses_request_id(),
            Action::TryFiles { files, fallback } => {
                files.iter().any(Template::uses_request_id)
                    || matches!(fallback, Fallback::Uri(t) if t.uses_request_id())
            }
            Action::Alias(_) | Action::Module => false,
        };
        action
            || self.response.as_ref().is_some_and(Edits::uses_request_id)
            || self.request.as_ref().is_some_and(Edits::uses_request_id)
    }
}

/// Whether `prefix` takes `path`, on whole segments (the modules' routers' rule).
pub fn takes(prefix: &[u8], path: &[u8]) -> bool {
    path.starts_with(prefix)
        && (prefix.ends_with(b"/") || path.len() == prefix.len() || path[prefix.len()] == b'/')
}

fn regex(pattern: &str, case_insensitive: bool) -> Result<Regex, Error> {
    RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .build()
        .map_err(|e| {
            Error::new(format!(
                "invalid regex `{pattern}`: {}",
                first_line(&e.to_string())
            ))
        })
}

/// The regex crate's message without its drawing of the pattern: `error: ...`.
fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or(text.trim())
        .to_string()
}

fn compile_rule(
    routes_key: &str,
    index: usize,
    c: &RouteRules,
    module: bool,
) -> Result<Rule, Error> {
    let paths = [c.path.is_some(), c.prefix.is_some(), c.regex.is_some()];
    let name = match c.key.is_empty() {
        true => format!("{routes_key}[{index}]"),
        false => c.key.clone(),
    };
    let at = |e: Error| e.at(&name);
    if paths.iter().filter(|p| **p).count() > 1 {
        return Err(at(Error::new("give one of `path`, `prefix` and `regex`")));
    }
    let path = if let Some(p) = &c.path {
        check_path(p).map_err(|e| at(e.at("path")))?;
        PathMatch::Exact(p.as_bytes().into())
    } else if let Some(r) = &c.regex {
        PathMatch::Regex(regex(r, c.case_insensitive).map_err(|e| at(e.at("regex")))?)
    } else {
        let p = c.prefix.as_deref().unwrap_or("/");
        check_path(p).map_err(|e| at(e.at("prefix")))?;
        PathMatch::Prefix(p.as_bytes().into())
    };
    if c.no_regex && !matches!(path, PathMatch::Prefix(_)) {
        return Err(at(Error::new("is for a `prefix` route").at("no_regex")));
    }
    if c.case_insensitive && c.regex.is_none() {
        return Err(at(
            Error::new("is for a `regex` route").at("case_insensitive")
        ));
    }
    let groups = match &path {
        PathMatch::Regex(r) => Some(r),
        _ => None,
    };
    let mut actions: Vec<&str> = Vec::new();
    if module {
        actions.push("a module's (`upstream`, `root` or a script)");
    }
    if c.respond.is_some() {
        actions.push("`respond`");
    }
    if c.redirect.is_some() {
        actions.push("`redirect`");
    }
    if c.rewrite.is_some() {
        actions.push("`rewrite`");
    }
    if !c.try_files.is_empty() {
        actions.push("`try_files`");
    }
    if c.alias.is_some() {
        actions.push("`alias`");
    }
    if actions.len() > 1 {
        return Err(at(Error::new(format!(
            "conflicting actions: {} (a route does one)",
            actions.join(", ")
        ))));
    }
    if !module {
        for (key, set) in [
            ("strip_prefix", c.strip_prefix.is_some()),
            ("add_prefix", c.add_prefix.is_some()),
            ("request_headers", c.request_headers.is_some()),
        ] {
            if set {
                return Err(at(Error::new(
                    "edits what goes to an upstream: it needs `upstream`",
                )
                .at(key)));
            }
        }
    }
    let action = if let Some(r) = &c.respond {
        if !(200..=599).contains(&r.status) {
            return Err(at(Error::new(format!("{} is not 200-599", r.status))
                .about("status")
                .at("respond")));
        }
        let content_type = r
            .content_type
            .clone()
            .unwrap_or_else(|| "text/plain; charset=utf-8".into());
        Action::Respond {
            status: r.status,
            body: Template::compile(&r.body, groups)
                .map_err(|e| at(e.about("body").at("respond")))?,
            content_type: content_type.into_bytes().into(),
        }
    } else if let Some(r) = &c.redirect {
        if ![301, 302, 303, 307, 308].contains(&r.status) {
            return Err(at(Error::new(format!(
                "{} is not one of 301, 302, 303, 307, 308",
                r.status
            ))
            .about("status")
            .at("redirect")));
        }
        if r.to.is_empty() {
            return Err(at(Error::new("is empty").about("to").at("redirect")));
        }
        if r.to.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(at(Error::new("holds a control character")
                .about("to")
                .at("redirect")));
        }
        if let PathMatch::Exact(p) = &path {
            let target = r.to.split('?').next().unwrap_or_default();
            if target.as_bytes() == &p[..] {
                return Err(at(Error::new(format!(
                    "`{}` points back at this route",
                    r.to
                ))
                .about("to")
                .at("redirect")));
            }
        }
        Action::Redirect {
            status: r.status,
            to: Template::compile(&r.to, groups).map_err(|e| at(e.about("to").at("redirect")))?,
        }
    } else if let Some(r) = &c.rewrite {
        let from = match &r.from {
            Some(f) => Some(regex(f, false).map_err(|e| at(e.about("from").at("rewrite")))?),
            None => None,
        };
        if !r.to.starts_with('/') {
            return Err(at(Error::new(format!(
                "must be a path starting with `/` (`{}`); an absolute URL is a `redirect`",
                r.to
            ))
            .about("to")
            .at("rewrite")));
        }
        let to_groups = from.as_ref().or(groups);
        let to =
            Template::compile(&r.to, to_groups).map_err(|e| at(e.about("to").at("rewrite")))?;
        if let (PathMatch::Exact(p), Some(literal)) = (&path, to.literal()) {
            let target = literal.split(|&b| b == b'?').next().unwrap_or_default();
            if target == &p[..] {
                return Err(at(Error::new(format!(
                    "`{}` points back at this route",
                    r.to
                ))
                .about("to")
                .at("rewrite")));
            }
        }
        Action::Rewrite { from, to }
    } else if let Some((last, files)) = c.try_files.split_last() {
        if files.is_empty() {
            return Err(at(Error::new(
                "give at least one file and then a URI or `=CODE`",
            )
            .at("try_files")));
        }
        let files = files
            .iter()
            .map(|f| match f.starts_with('$') || f.starts_with('/') {
                true => Template::compile(f, groups),
                false => Err(Error::new(format!("`{f}` is not a path starting with `/`"))),
            })
            .collect::<Result<Box<[_]>, _>>()
            .map_err(|e| at(e.at("try_files")))?;
        let fallback = match last.strip_prefix('=') {
            Some(code) => match code.parse::<u16>() {
                Ok(status) if (200..=599).contains(&status) => Fallback::Status(status),
                _ => {
                    return Err(at(
                        Error::new(format!("`{last}` is not `=` and a status")).at("try_files")
                    ))
                }
            },
            None if last.starts_with('/') || last.starts_with('$') => {
                Fallback::Uri(Template::compile(last, groups).map_err(|e| at(e.at("try_files")))?)
            }
            None => {
                return Err(at(Error::new(format!(
                    "`{last}` (the last) is neither a URI starting with `/` nor `=CODE`"
                ))
                .at("try_files")))
            }
        };
        Action::TryFiles { files, fallback }
    } else if let Some(dir) = &c.alias {
        if !matches!(path, PathMatch::Prefix(_)) {
            return Err(at(Error::new("is for a `prefix` route").at("alias")));
        }
        if !dir.is_absolute() {
            return Err(at(Error::new(format!(
                "`{}` is not an absolute path",
                dir.display()
            ))
            .at("alias")));
        }
        Action::Alias(dir.clone())
    } else if module {
        Action::Module
    } else {
        return Err(at(Error::new(
            "the route does nothing: give `upstream`, `root`, `respond`, `redirect`, `rewrite`, `try_files` or `alias`",
        )));
    };
    let response = match &c.response_headers {
        Some(e) => Some(Edits::compile(e, true, groups).map_err(|e| at(e.at("response_headers")))?),
        None => None,
    };
    let request = match &c.request_headers {
        Some(e) => Some(Edits::compile(e, false, groups).map_err(|e| at(e.at("request_headers")))?),
        None => None,
    };
    let prefix_of = |key: &str, p: &Option<String>| -> Result<Option<Box<[u8]>>, Error> {
        match p {
            None => Ok(None),
            Some(p)
                if p.starts_with('/')
                    && !p.contains('?')
                    && !p.bytes().any(|b| b <= b' ' || b == 0x7f) =>
            {
                Ok(Some(p.trim_end_matches('/').as_bytes().into()))
            }
            Some(p) => Err(at(Error::new(format!(
                "`{p}` is not a path prefix (starting with `/`)"
            ))
            .at(key))),
        }
    };
    let strip_prefix = prefix_of("strip_prefix", &c.strip_prefix)?;
    let add_prefix = prefix_of("add_prefix", &c.add_prefix)?;
    let captures = match &action {
        Action::Respond { body, .. } => body.uses_captures(),
        Action::Redirect { to, .. } => to.uses_captures(),
        // A rewrite with its own `from` uses that regex's captures, found when it runs.
        Action::Rewrite { from: None, to } => to.uses_captures(),
        Action::TryFiles { files, fallback } => {
            files.iter().any(Template::uses_captures)
                || matches!(fallback, Fallback::Uri(t) if t.uses_captures())
        }
        Action::Rewrite { .. } | Action::Alias(_) | Action::Module => false,
    } || response.as_ref().is_some_and(Edits::uses_captures)
        || request.as_ref().is_some_and(Edits::uses_captures);
    let narrow = Narrow {
        methods: c.methods.iter().map(|m| m.as_str().into()).collect(),
        header: cond(c.header.as_ref()).map_err(|e| at(e.at("header")))?,
        query: cond(c.query.as_ref()).map_err(|e| at(e.at("query")))?,
        cookie: cond(c.cookie.as_ref()).map_err(|e| at(e.at("cookie")))?,
        secure: match c.scheme.as_deref() {
            None => None,
            Some("https") => Some(true),
            Some("http") => Some(false),
            Some(other) => {
                return Err(at(Error::new(format!(
                    "`{other}` is neither `http` nor `https`"
                ))
                .at("scheme")))
            }
        },
        clients: c
            .client
            .iter()
            .map(|n| network(n))
            .collect::<Result<_, _>>()
            .map_err(|e| at(e.at("client")))?,
    };
    for m in narrow.methods.iter() {
        if m.is_empty() || !m.bytes().all(wire::is_tchar) {
            return Err(at(
                Error::new(format!("`{m}` is not a method")).at("methods")
            ));
        }
    }
    let errors = error_pages(&c.error_page).map_err(|e| at(e.at("error_page")))?;
    let access = Access::compile(&c.access, c.deny_status).map_err(at)?;
    Ok(Rule {
        access,
        index,
        name,
        case_insensitive: c.case_insensitive,
        no_regex: c.no_regex,
        path,
        narrow,
        action,
        response,
        request,
        strip_prefix,
        add_prefix,
        errors,
        captures,
    })
}

/// Whether one of `pages` is an upstream's.
fn upstream(pages: &Pages) -> bool {
    pages.iter().any(|(_, p)| matches!(p, Page::Upstream(_)))
}

/// `error_page`: statuses 300-599, each to a page of the site's root.
fn error_pages(config: &std::collections::BTreeMap<String, String>) -> Result<Pages, Error> {
    config
        .iter()
        .map(|(status, page)| {
            let code = match status.parse::<u16>() {
                Ok(s) if (300..=599).contains(&s) => s,
                _ => return Err(Error::new(format!("`{status}` is not a status 300-599"))),
            };
            if let Some(rest) = page.strip_prefix('@') {
                return match rest.strip_prefix("upstream:").filter(|n| !n.is_empty()) {
                    Some(name) => Ok((code, Page::Upstream(name.into()))),
                    None => Err(Error::new(format!(
                        "`{page}` is neither a file (`/50x.html`) nor `@upstream:NAME`"
                    ))),
                };
            }
            check_path(page)?;
            let mut normal = Vec::new();
            wire::normalize_path(page.as_bytes(), &mut normal)
                .map_err(|_| Error::new(format!("`{page}` is not a path of the site")))?;
            Ok((code, Page::File(normal.into())))
        })
        .collect()
}

fn check_path(p: &str) -> Result<(), Error> {
    match p.starts_with('/') && !p.contains('?') {
        true => Ok(()),
        false => Err(Error::new(format!(
            "`{p}` is not a path (starting with `/`, without a query)"
        ))),
    }
}

fn cond(m: Option<&FieldMatch>) -> Result<Option<Cond>, Error> {
    let Some(m) = m else { return Ok(None) };
    if m.name.is_empty() {
        return Err(Error::new("is empty").at("name"));
    }
    let test = match (&m.equals, &m.regex) {
        (Some(_), Some(_)) => return Err(Error::new("give `equals` or `regex`, not both")),
        (Some(v), None) => Test::Equals(v.as_bytes().into()),
        (None, Some(r)) => Test::Matches(regex(r, false)?),
        (None, None) => Test::Present,
    };
    Ok(Some(Cond {
        name: m.name.as_bytes().into(),
        test,
    }))
}

#[cfg(test)]
mod tests;
