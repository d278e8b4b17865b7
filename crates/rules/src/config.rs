//! The TOML shape of the rules (docs/config.md, "Routing and rewriting"): the keys of a
//! `[[route]]` (or `[[host.route]]`) that say when it applies and what it does besides
//! handing the request to its module, and the host's own `response_headers`.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The keys of one route that belong to the rules. `cli` takes them out of the route's
/// table; the rest (`upstream`, `root`, `esi`, ...) goes to the module that serves it.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RouteRules {
    /// An exact path (nginx `location =`): matched before any other route.
    pub path: Option<String>,
    /// A path prefix, on whole segments (`/api` takes `/api` and `/api/x`, not `/apix`;
    /// `/api/` takes what starts with it). The longest prefix that matches wins.
    pub prefix: Option<String>,
    /// A regular expression (the `regex` crate's syntax: linear time) on the decoded,
    /// normalised path; its captures, numbered and named, are variables in values.
    pub regex: Option<String>,
    /// Makes `regex` ignore case (nginx `~*`).
    pub case_insensitive: bool,
    /// On a prefix: when it is the longest prefix that matches, no regex route is tried
    /// (nginx `^~`).
    pub no_regex: bool,
    /// The methods it applies to (all when empty).
    pub methods: Vec<String>,
    /// A request header that must be present, equal a value or match a regex.
    pub header: Option<FieldMatch>,
    /// A query parameter that must be present or equal a value (or match a regex).
    pub query: Option<FieldMatch>,
    /// A cookie that must be present or equal a value (or match a regex).
    pub cookie: Option<FieldMatch>,
    /// `http` or `https`.
    pub scheme: Option<String>,
    /// Client addresses (`10.0.0.0/8`, `2001:db8::/32`, `192.0.2.7`), one of which must
    /// hold the request's client (the one a trusted proxy names, else the socket's peer).
    pub client: Vec<String>,
    /// Answer with a fixed response.
    pub respond: Option<Respond>,
    /// Answer with a redirect.
    pub redirect: Option<Redirect>,
    /// Change the path (and query), then route the request again.
    pub rewrite: Option<Rewrite>,
    /// Files to try in turn from the site's root (values with variables; one ending in
    /// `/` is a directory, served by its index), then a URI to route the request to, or
    /// `=CODE` to answer that status (nginx `try_files`).
    pub try_files: Vec<String>,
    /// Serve the paths under the route's `prefix` from this directory instead of the
    /// site's root: `/static/a.css` under `prefix = "/static/"` is `DIR/a.css` (nginx
    /// `alias`).
    pub alias: Option<std::path::PathBuf>,
    /// Remove this prefix from the path sent to the upstream.
    pub strip_prefix: Option<String>,
    /// Put this prefix before the path sent to the upstream (after `strip_prefix`).
    pub add_prefix: Option<String>,
    /// Edits of the request's fields on the way to the upstream (`Host` included).
    pub request_headers: Option<HeaderEdits>,
    /// Edits of the response's fields (after the host's own).
    pub response_headers: Option<HeaderEdits>,
    /// Pages for error statuses (`"404" = "/404.html"`), before the host's.
    pub error_page: BTreeMap<String, String>,
    /// Ordered `allow`/`deny` entries on the client's address, the first match deciding
    /// (nginx `allow`/`deny`); replaces its host's `access` (docs/security.md).
    pub access: Vec<crate::access::AccessRule>,
    /// The status a request `access` refuses gets. Default 403.
    pub deny_status: Option<u16>,
    /// HTTP basic authentication from an htpasswd file (docs/security.md).
    pub basic_auth: Option<BasicAuth>,
    /// A subrequest to an upstream that lets the request through or answers it
    /// (nginx `auth_request`, Caddy `forward_auth`; docs/security.md).
    pub forward_auth: Option<ForwardAuth>,
    /// The `[[limit]]` zones its requests are counted in (the server's; the rules only
    /// carry the names).
    pub limit: Vec<String>,
    /// Requests of a key in flight at once (nginx `limit_conn`; the server's).
    pub limit_conn: Option<LimitConn>,
    /// Where it was written, for errors (`route[3]`, `host[0].script[1]`; set by `cli`,
    /// no TOML key). Empty: `ROUTES_KEY[INDEX]` as [`crate::Table::compile`] is told.
    #[serde(skip)]
    pub key: String,
}

/// The rule keys a route table may hold besides `prefix` (which the modules read too).
pub const ROUTE_KEYS: [&str; 27] = [
    "limit",
    "limit_conn",
    "alias",
    "access",
    "deny_status",
    "basic_auth",
    "forward_auth",
    "error_page",
    "client",
    "try_files",
    "path",
    "regex",
    "case_insensitive",
    "no_regex",
    "methods",
    "header",
    "query",
    "cookie",
    "scheme",
    "respond",
    "redirect",
    "rewrite",
    "strip_prefix",
    "add_prefix",
    "request_headers",
    "response_headers",
    "prefix",
];

/// The rule keys a `[[script]]` mount may hold besides `prefix`: the matchers other than
/// `path` (there, the script's file) and the edits around the script. The actions that
/// answer in its place (`respond`, `redirect`, `rewrite`, `try_files`, `alias`) and the
/// path changes for an upstream are a `[[route]]`'s only.
pub const SCRIPT_KEYS: [&str; 16] = [
    "access",
    "deny_status",
    "basic_auth",
    "forward_auth",
    "regex",
    "case_insensitive",
    "no_regex",
    "methods",
    "header",
    "query",
    "cookie",
    "scheme",
    "client",
    "request_headers",
    "response_headers",
    "error_page",
];

/// The keys that choose when a route applies besides its prefix: a module's route with
/// one of them is chosen by the rules (`edge::RouteConfig::rule`), not by its prefix.
pub const MATCHER_KEYS: [&str; 8] = [
    "path", "regex", "methods", "header", "query", "cookie", "scheme", "client",
];

/// `limit_conn = { key, max }` on a route or a host: at most `max` requests of one key
/// in flight at once (nginx's `limit_conn`); the next is refused with `status`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitConn {
    /// Variables as in a `[[limit]]` zone's `key`. Default `$remote_addr`.
    pub key: String,
    /// Required, at least 1.
    pub max: u32,
    /// Default 503, nginx's `limit_conn_status`.
    pub status: u16,
    /// The table of counts: 8 bytes a key with requests in flight. Default `1m`.
    pub memory: String,
}

impl Default for LimitConn {
    fn default() -> LimitConn {
        LimitConn {
            key: "$remote_addr".into(),
            max: 0,
            status: 503,
            memory: "1m".into(),
        }
    }
}

/// A condition on a named request field, query parameter or cookie: present (neither
/// `equals` nor `regex`), equal to a value, or matching a regex.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FieldMatch {
    pub name: String,
    pub equals: Option<String>,
    pub regex: Option<String>,
}

/// `basic_auth = { realm, htpasswd }`: users and their bcrypt or SHA-512-crypt hashes
/// in an htpasswd file, read at load and at every reload.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// The realm the `WWW-Authenticate` challenge names.
    pub realm: String,
    pub htpasswd: std::path::PathBuf,
}

/// `forward_auth = { upstream, path, copy_headers, cache, headers, auth_failure }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ForwardAuth {
    /// The `[[upstream]]` asked.
    pub upstream: String,
    /// The path (and query) asked for. Default `/`.
    #[serde(default = "root_path")]
    pub path: String,
    /// Fields of an allowing answer (2xx) put into the request in place of the
    /// request's own of those names.
    #[serde(default)]
    pub copy_headers: Vec<String>,
    /// How long an allowing answer is reused for the same credentials (`"10s"`, `"2m"`,
    /// `"500ms"`). Default: not reused.
    #[serde(default)]
    pub cache: Option<String>,
    /// The request's fields sent along. Default: all but the connection's own.
    #[serde(default)]
    pub headers: Option<Vec<String>>,
    /// `"deny"` (the default) answers 500 when the upstream cannot answer (unreachable,
    /// a timeout, a status other than 2xx, 401 and 403); `"allow"` lets the request
    /// through then.
    #[serde(default)]
    pub auth_failure: AuthFailure,
}

fn root_path() -> String {
    "/".into()
}

/// `forward_auth.auth_failure`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AuthFailure {
    #[default]
    Deny,
    Allow,
}

/// `respond = { status, body, content_type }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Respond {
    /// Default 200.
    pub status: u16,
    /// Default empty. Variables are expanded.
    pub body: String,
    /// Default `text/plain; charset=utf-8` when there is a body.
    pub content_type: Option<String>,
}

impl Default for Respond {
    fn default() -> Respond {
        Respond {
            status: 200,
            body: String::new(),
            content_type: None,
        }
    }
}

/// `redirect = { status, to }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Redirect {
    /// 301, 302, 303, 307 or 308. Default 302.
    pub status: u16,
    /// The Location, variables expanded: a path or an absolute URL.
    pub to: String,
}

impl Default for Redirect {
    fn default() -> Redirect {
        Redirect {
            status: 302,
            to: String::new(),
        }
    }
}

/// `rewrite = { from, to }`: when `from` (a regex on the path; default: any path)
/// matches, the path becomes `to` with `from`'s captures expanded. A `?` in `to` sets the
/// query; the request's own query is appended to it unless `to` ends with `?` (nginx).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Rewrite {
    pub from: Option<String>,
    pub to: String,
}

/// Field edits: `set` replaces (or adds), `add` adds another, `remove` drops, `default`
/// sets only when absent. On responses, `always` applies them to every status (errors
/// included), as nginx's `add_header ... always`; without it, to 200, 201, 204, 206, 301,
/// 302, 303, 304, 307 and 308 only, as nginx's `add_header`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HeaderEdits {
    pub set: BTreeMap<String, String>,
    pub add: BTreeMap<String, String>,
    pub remove: Vec<String>,
    pub default: BTreeMap<String, String>,
    pub always: bool,
}
