//! What every Lua state of tessera's starts with, a `[[script]]` worker's engine and a
//! hook's state alike: the safe standard libraries, the sandbox, the guarded pattern
//! functions, and the `tessera` table with the clock, the helpers and `tessera.log`.

use mlua::{Lua, LuaOptions, StdLib, Table, Value, Variadic};

use crate::clock;
use crate::guard;

/// A new state with the safe standard libraries. No `io` (stdin, pipes and files can
/// block the worker, and `io.popen` runs programs); what else could stop, block or crash
/// the process goes in the sandbox ([`install`]).
pub(crate) fn new_state(options: LuaOptions) -> Lua {
    let libs = StdLib::ALL_SAFE ^ StdLib::IO;
    match Lua::new_with(libs, options) {
        Ok(lua) => lua,
        Err(e) => {
            tracing::error!(error = %e, "cannot create a Lua state with its libraries");
            Lua::new_with(StdLib::NONE, LuaOptions::new()).unwrap_or_else(|_| Lua::new())
        }
    }
}

/// Sandboxes `lua` and makes its `tessera` table (set as a global too): `worker_id`, the
/// clock, the helpers and `tessera.log`. Returns the table, for what a state adds.
/// `worker`: the worker whose state it is; `None` for a hook's state, which any thread
/// may own (then there is no `worker_id`, and log lines name no worker).
pub(crate) fn install(lua: &Lua, worker: Option<usize>) -> mlua::Result<Table> {
    lua.load(guard::SANDBOX).set_name("=sandbox").exec()?;
    // Pattern functions with their cost check.
    let check =
        lua.create_function(|_, (s, p, anchored): (mlua::String, mlua::String, bool)| {
            let cost = guard::pattern_cost(&p.as_bytes(), s.as_bytes().len(), anchored);
            if cost > guard::PATTERN_BUDGET {
                return Err(mlua::Error::runtime(format!(
                    "pattern too costly for a {}-byte subject (backtracking items make it \
                 polynomial); use a plain find or a simpler pattern",
                    s.as_bytes().len()
                )));
            }
            Ok(())
        })?;
    lua.load(guard::PATTERN_GUARD)
        .set_name("=pattern_guard")
        .call::<()>(check)?;

    let tessera = lua.create_table()?;
    if let Some(worker) = worker {
        tessera.set("worker_id", worker)?;
    }
    clock::install(lua, &tessera)?;
    crate::helpers::install(lua, &tessera)?;

    // tessera.log.info(...), .warn, .error, .debug
    let log = lua.create_table()?;
    for level in ["debug", "info", "warn", "error"] {
        let f = lua.create_function(move |lua, values: Variadic<Value>| {
            let mut message = String::new();
            for v in values.iter() {
                match v {
                    Value::String(s) => message.push_str(&s.to_string_lossy()),
                    other => message.push_str(&other.to_string()?),
                }
            }
            let at = caller(lua);
            match (level, worker) {
                ("debug", Some(worker)) => tracing::debug!(worker, at = %at, "lua: {message}"),
                ("info", Some(worker)) => tracing::info!(worker, at = %at, "lua: {message}"),
                ("warn", Some(worker)) => tracing::warn!(worker, at = %at, "lua: {message}"),
                (_, Some(worker)) => tracing::error!(worker, at = %at, "lua: {message}"),
                ("debug", None) => tracing::debug!(at = %at, "lua: {message}"),
                ("info", None) => tracing::info!(at = %at, "lua: {message}"),
                ("warn", None) => tracing::warn!(at = %at, "lua: {message}"),
                (_, None) => tracing::error!(at = %at, "lua: {message}"),
            }
            Ok(())
        })?;
        log.set(level, f)?;
    }
    tessera.set("log", log)?;
    lua.globals().set("tessera", tessera.clone())?;
    Ok(tessera)
}

/// `file:line` of the Lua code calling into Rust, for log lines.
pub(crate) fn caller(lua: &Lua) -> String {
    lua.inspect_stack(1, |d| {
        let s = d.source();
        format!(
            "{}:{}",
            s.short_src.as_deref().unwrap_or("?"),
            d.current_line().unwrap_or(0)
        )
    })
    .unwrap_or_else(|| "?".into())
}
