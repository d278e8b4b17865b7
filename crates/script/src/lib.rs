//! `script` runs request handlers written in Lua (LuaJIT through mlua, vendored).
//!
//! **What it is for.** Logic that changes often (redirect rules, A/B splits, small JSON
//! endpoints, auth checks) without rebuilding tessera. A script is a Lua module mounted
//! at a path prefix that returns functions for the phases it handles: `access` (allow,
//! deny or redirect before any other handler), `content` (produce the response),
//! `header_filter` (adjust the response headers of anything under the mount),
//! `body_filter` (rewrite the bodies of those responses as they stream), `log`
//! (after the response, off the request path) and `init` (once per worker and load).
//! docs/lua.md documents the API the functions see.
//!
//! **What it is not for.** HTTP framing, the server's sockets and static files (the
//! `server` crate);
//! upstream connections (`tessera.http.request` calls the `handler::Upstreams` it is
//! given, which the `edge` crate implements; this crate does not depend on it); answering
//! subrequests (`tessera.location.capture` calls the `handler::Subrequests` the server
//! installs on each worker thread).
//!
//! **How it fits.** `cli` builds one [`Scripts`] (shared: configuration, shared
//! dictionaries, the watchdog) and a [`ScriptModule`] (a `handler::Module`: each mount
//! is a filter and a handler of its prefix); each worker starts one [`Engine`] (its own
//! Lua state, no locks). For a request under a mount the module calls [`Engine::begin`], then
//! [`Engine::access`], [`Engine::content`] (a future: it finishes on its first poll
//! unless the script awaits an upstream, a timer or a sleep), [`Engine::header_filter`], and
//! [`Engine::finish`]. The fast path avoids work the script does not ask for: the
//! request head is copied into a reused buffer and turned into Lua strings only when an
//! accessor is called, phase functions are resolved once per load, and the context
//! userdata is recycled. Errors, time and memory limits and panics end as
//! [`Outcome::Failed`] (logged with the script and line): the server answers 500 and
//! goes on. `cli` also loads the Lua hooks outside a request's phases, a [`Hook`] each
//! (an upstream's `balancer_script`), and hands them to the proxy as
//! `handler::BalancerHook`s; each thread that calls one has its own Lua state for it.
//! Scripts' own TCP connections (`tessera.socket.tcp`, OpenResty's cosockets) run on the
//! worker's loop through `evloop::net`, with a keep-alive pool per worker (`socket/`).

mod base;
mod clock;
mod config;
mod context;
mod engine;
mod error;
mod guard;
mod helpers;
mod hooks;
mod location;
mod module;
mod package_path;
mod scripts;
mod shared;
mod socket;
mod tally;
mod vars;

pub use config::{ScriptConfig, SharedDictConfig};
pub use context::{Context, RequestHead};
pub use engine::{Call, Content, Engine, MountId, Outcome, PendingContent, Scripts};
pub use error::Error;
pub use guard::{pattern_cost, PATTERN_BUDGET, TICK};
pub use hooks::Hook;
pub use module::ScriptModule;
