//! `handler` is the seam between "a connection" and "what answers it" (DESIGN.md,
//! "Workspace layout"; docs/architecture.md says how far it has come).
//!
//! What it is for: the pieces every protocol, handler and filter shares so that each is
//! written once. Today that is the [`Router`]: one longest-whole-segment-prefix table,
//! the one matching rule for the server's script mounts, its proxy routes and the
//! proxy's own routing of ESI include URLs.
//!
//! What it is not for: parsing or encoding HTTP (that is `wire`), sockets (`server`),
//! proxying (`edge`) or Lua (`script`). It depends on no other tessera crate.
//!
//! How it fits: a module builds a [`Router`] from its prefixes once, at start, and asks
//! it with a path that is already decoded and normalised (`wire::normalize_path`), so
//! that no spelling of a path (`//api`, `/%61pi`, `/x/../api`) reaches past the prefix
//! that should take it.

mod router;

pub use router::Router;
