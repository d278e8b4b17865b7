//! The ESI 1.0 language: a streaming tokenizer, a compiler to a flat template, an
//! expression language and a per-request evaluator. No I/O.
//!
//! **What it is for.** Turning a page with Edge Side Includes markup into a compiled
//! [`Template`] once (at fetch time, to keep in a cache), then evaluating that template per
//! request into bytes to send and fragments to fetch. The whole language of the W3C note
//! "ESI Language Specification 1.0" is here: `esi:include` (with `alt`, `onerror`, and the
//! common `ttl`, `timeout`/`maxwait`, `no-store` extensions), `esi:remove`, `esi:comment`,
//! `<!--esi ... -->`, `esi:try`/`attempt`/`except`, `esi:choose`/`when`/`otherwise`,
//! `esi:vars`, `esi:inline`, the six variables with `{key}` and `|default`, and `when`
//! expressions. docs/esi.md lists every deviation from the note.
//!
//! **What it is not for.** Fetching, caching, timeouts, depth limits across fragments:
//! those are the proxy's (`edge`). This crate never does I/O, never prints, and never
//! panics on any input: malformed markup produces the page anyway plus typed
//! [`Warning`]s.
//!
//! **How it fits.** `edge` (the ESI proxy) feeds an upstream body, chunk by chunk as it
//! arrives, to a [`Compiler`] (tags may straddle chunk boundaries; text between tags is
//! kept as `Bytes` slices of the chunks, never copied) and caches the [`Template`]. Per
//! request it builds a [`Request`] and calls [`Template::evaluate`], which yields an
//! [`Evaluation`]:
//!
//! - [`Evaluation::includes`]: every fragment to fetch, as an [`IncludeRequest`] with `src`
//!   and `alt` already substituted and resolved against the page URL, and the include's
//!   `continue_on_error`, `ttl`, `timeout`, `no_store` and `in_try`. A proxy can start all
//!   fetches at once (those with `in_try` inside an except may be fetched lazily).
//! - [`Evaluation::items`]: the page in document order, as [`Item::Bytes`] (literal bytes),
//!   [`Item::Include`] (the fragment with that id goes here) and [`Item::Try`] (an
//!   attempt/except pair given as item ranges, resolved once its fragments' outcomes are
//!   known). A streaming proxy walks the items and flushes every `Bytes` up to the first
//!   include it is still waiting for; items inside a `Try` are held until the try is
//!   decided.
//! - [`Evaluation::assemble`] does that walk for a proxy that has the outcomes: it calls
//!   back for each needed fragment and returns the page's `Bytes` in order, applying
//!   `onerror` and try/except, or [`IncludeFailed`] when a failure is not absorbed.
//!
//! ```
//! use esi::{Request, Template};
//! use bytes::Bytes;
//!
//! let page = Template::parse(
//!     r#"<p><esi:include src="/greet?u=$(HTTP_COOKIE{user})"/></p>"#,
//! );
//! let req = Request::new("http://example.com/home").cookie("user", "ann<script>");
//! let ev = page.evaluate(&req);
//! assert_eq!(ev.includes()[0].src, "http://example.com/greet?u=ann%3Cscript%3E");
//! let body = ev
//!     .assemble(|_, _, out| {
//!         out.push(Bytes::from_static(b"hi"));
//!         Ok(())
//!     })
//!     .unwrap();
//! assert_eq!(body.concat(), b"<p>hi</p>");
//! ```
//!
//! Fragments that are themselves ESI are compiled and evaluated the same way, with the
//! same `Request`; the proxy bounds the include depth.

mod eval;
mod expr;
mod request;
mod template;
mod tokenizer;
mod url;
mod warning;

pub use eval::{
    render_sync, Evaluation, FragmentFailed, IncludeFailed, IncludeId, IncludeRequest, Item,
};
pub use expr::{CmpOp, Expr, ExprError, VarRef};
pub use request::{Request, Value, Variable};
pub use template::{Compiler, Include, InlineFragment, Options, Template};
pub use tokenizer::{Attr, Event, Tag, TagName, Tokenizer};
pub use url::{is_valid_url, resolve};
pub use warning::{Warning, WarningKind};
