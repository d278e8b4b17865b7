//! `tessera.ngx_compat`: a table shaped as OpenResty's `ngx` (the part its libraries
//! use), so that a library such as lua-resty-redis runs unmodified once a script sets
//! `ngx = tessera.ngx_compat` before requiring it. Made in Lua (`compat.lua`) of
//! tessera's functions, but for `ngx.log`, here: its log line names the caller's file
//! and line, which a Lua wrapper would hide.

use mlua::{Lua, Table, Value, Variadic};

use crate::base::caller;

/// Sets `tessera.ngx_compat` (after the rest of the `tessera` table is made).
pub(super) fn install(lua: &Lua, tessera: &Table) -> mlua::Result<()> {
    let log = lua.create_function(|lua, (level, values): (i64, Variadic<Value>)| {
        let mut message = String::new();
        for v in values.iter() {
            match v {
                Value::String(s) => message.push_str(&s.to_string_lossy()),
                other => message.push_str(&other.to_string()?),
            }
        }
        let at = caller(lua);
        // nginx's levels: STDERR 0 .. ERR 4 are errors, WARN 5, NOTICE 6 and INFO 7
        // information, DEBUG 8.
        match level {
            ..=4 => tracing::error!(at = %at, "lua: {message}"),
            5 => tracing::warn!(at = %at, "lua: {message}"),
            6 | 7 => tracing::info!(at = %at, "lua: {message}"),
            _ => tracing::debug!(at = %at, "lua: {message}"),
        }
        Ok(())
    })?;
    let ngx: Table = lua
        .load(include_str!("compat.lua"))
        .set_name("=ngx_compat")
        .call((tessera.clone(), log))?;
    tessera.set("ngx_compat", ngx)
}
