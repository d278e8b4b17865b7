//! The `body_filter` phase: a script's function called with each piece of a response
//! body (`r`, the piece as a Lua string, `eof`), returning what to send in its place. It
//! runs inside the server's body stream (`handler::Body::filtered`), on the worker's
//! thread, between two writes: it cannot await (no upstream calls, no sleep), as
//! OpenResty's `body_filter_by_lua` cannot yield.

use std::panic::AssertUnwindSafe;

use bytes::Bytes;
use mlua::Value;

use super::{Call, Engine, Running};
use crate::context;
use crate::tally::{self, Failure, Phase};

impl Engine {
    /// Whether the script of `call` has a `body_filter` phase.
    pub fn has_body_filter_of(&self, call: &Call) -> bool {
        self.has(call.mount, |p| p.body_filter.is_some())
    }

    /// Runs `body_filter(r, chunk, eof)`: the bytes to send in place of `chunk` (empty
    /// for nothing), or why it failed (an error, a return that is neither a string nor
    /// `nil`, the time or memory limit, a panic), already logged and counted.
    pub fn body_filter(&self, call: &Call, chunk: &[u8], eof: bool) -> Result<Bytes, String> {
        let Some(f) = self.phase(call.mount, |p| p.body_filter.clone()) else {
            return Ok(Bytes::copy_from_slice(chunk));
        };
        tally::call(Phase::BodyFilter);
        tally::body_filtered(chunk.len(), 0);
        let mount = &self.mounts[call.mount];
        let result = {
            let _inside = self.guard.enter(mount.limit);
            let _sockets = crate::socket::enter(crate::socket::Scope::refused(Phase::BodyFilter));
            let _running = Running::new(&self.running, self.version(call.mount));
            let _no_request = crate::location::NoRequest::new(&self.running_request);
            std::panic::catch_unwind(AssertUnwindSafe(|| -> mlua::Result<Bytes> {
                let piece = self.lua.create_string(chunk)?;
                match f.call::<Value>((call.ud.clone(), piece, eof))? {
                    Value::Nil => Ok(Bytes::new()),
                    Value::String(s) => Ok(Bytes::copy_from_slice(&s.as_bytes())),
                    other => Err(mlua::Error::runtime(format!(
                        "body_filter must return a string or nil, not a {}",
                        other.type_name()
                    ))),
                }
            }))
        };
        let failed = |reason: Failure, message: String| {
            tally::failed(Phase::BodyFilter, reason);
            context::with(&call.ud, |c| c.failed = true);
            tracing::error!(
                script = %mount.name, error = %message,
                "body_filter failed; the response is cut off"
            );
            Err(message)
        };
        match result {
            Ok(Ok(out)) => {
                tally::body_filtered(0, out.len());
                Ok(out)
            }
            Ok(Err(e)) => failed(Failure::of(&e), e.to_string()),
            Err(_) => failed(Failure::Panic, "script callback panicked".into()),
        }
    }
}
