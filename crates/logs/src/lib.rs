//! Access-log parsing and parallel analytics: the library behind `tessera logs`.
//!
//! What it is for: answering questions of web server access logs (Apache common,
//! combined and vhost-combined, nginx, or any `LogFormat`/`log_format` string) at the
//! speed memory can be read. `top` is Tim Bray's Wide Finder query (count a regex capture
//! over matching lines); `report` is the summary an operator wants (top URLs, clients,
//! referrers, 404s, status codes, hits per hour, user agents).
//!
//! What it is not for: writing logs (that is `server`), printing (the `cli` crate does
//! the talking; this crate renders text and HTML into a `String` it hands back), or
//! tailing forever (a stream is read to its end, then reported).
//!
//! How it fits: [`open`] maps files (or sets up streams for gzip and stdin); a query
//! ([`TopQuery`], [`ReportQuery`]) runs over them on every core; the result renders with
//! [`render::text`] or [`render::html`], or serialises with serde. [`export::export`]
//! writes the parsed lines as a Parquet file instead.

mod error;
pub mod export;
pub mod format;
mod input;
mod json;
mod key;
pub mod render;
mod report;
pub mod sections;
pub mod synth;
mod time;
mod top;

pub use error::Error;
pub use format::{LogFormat, Record};
pub use input::{open, split_lines, Input, Opened, Options, Progress};
pub use report::{
    Analysis, ClientRow, HourRow, KeyRow, Report, ReportQuery, StatusRow, Traffic, UrlRow,
};
pub use top::{TopCounts, TopQuery};
