//! Routing and rewriting rules (issue 42; docs/config.md, "Routing and rewriting"):
//! what a `[[route]]` says besides the module that serves it (matchers on the path, the
//! method, a header, a query parameter, a cookie, the scheme; `respond`, `redirect`,
//! `rewrite`; response field edits) and a host's `response_headers`, compiled once per
//! configuration into a [`Table`] per site that the server consults for each request.
//! No I/O: the server answers, this crate decides.

pub mod access;
pub mod config;
pub mod edits;
pub mod error;
pub mod table;
pub mod template;

pub use access::{Access, AccessRule};
pub use config::{HeaderEdits, RouteRules};
pub use edits::{sanitize, Edits, How, LinePlan, LinePlans};
pub use error::Error;
pub use table::{takes, Action, Fallback, Found, Host, Page, PathMatch, Rule, Table};
pub use template::{Captures, Ctx, Template};

/// Most times one request is rewritten before it is answered 500 (nginx's limit).
pub const MAX_REWRITES: usize = 10;
