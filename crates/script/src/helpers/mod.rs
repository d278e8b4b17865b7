//! The helpers OpenResty applications lean on, as `tessera.*` functions (docs/lua.md,
//! "Helpers"): JSON (`json`), base64, hex and URI escapes (`codec`), digests, HMACs and
//! random bytes (`crypto`), regular expressions (`re`), HTTP dates (`time`) and cookies
//! (`cookie`). Each works on Lua strings as bytes; a wrong argument is a Lua error (the
//! script's request answers 500 unless it uses `pcall`), input that is not in a decoder's
//! form is `nil` and a message, as OpenResty's functions answer.

pub mod codec;
pub mod cookie;
pub mod crypto;
pub mod json;
mod raising;
pub mod re;
pub mod time;

use mlua::{Lua, Result as LuaResult, Table};

/// Adds every helper to the `tessera` table.
pub fn install(lua: &Lua, tessera: &Table) -> LuaResult<()> {
    json::install(lua, tessera)?;
    codec::install(lua, tessera)?;
    crypto::install(lua, tessera)?;
    re::install(lua, tessera)?;
    time::install(lua, tessera)?;
    cookie::install(lua, tessera)?;
    raising::wrap(lua, tessera)
}
