//! Helpers' errors raised as Lua strings: each helper returns a mark and its message
//! instead of failing, and a Lua wrapper raises the message with `error()`.

use std::ffi::c_void;

use mlua::{
    FromLuaMulti, Function, IntoLuaMulti, LightUserData, Lua, MultiValue, Result as LuaResult,
    Table, Value,
};

/// Wraps every helper in `tessera` (they must be installed).
pub fn wrap(lua: &Lua, tessera: &Table) -> LuaResult<()> {
    lua.load(RAISING)
        .set_name("=helpers")
        .call::<()>((failed(), tessera.clone()))
}

/// The mark a helper returns before its error message, for the wrapper in [`RAISING`].
static FAILED: u8 = 0;

fn failed() -> Value {
    Value::LightUserData(LightUserData(&FAILED as *const u8 as *mut c_void))
}

/// Wraps each helper so that its errors are raised as Lua strings with the caller's file
/// and line (`api.lua:7: Cannot serialise function: type not supported`), as `error()`
/// raises them: what `pcall` returns is the message, as with cjson and ngx.re, not an
/// object holding a Rust traceback.
const RAISING: &str = r#"
local FAILED, tessera = ...
local error = error
local function raising(f)
  return function(...)
    local a, b, c = f(...)
    if a == FAILED then error(b, 2) end
    return a, b, c
  end
end
for _, name in ipairs({ "json", "base64", "hex", "uri", "crypto", "re", "cookie" }) do
  for k, v in pairs(tessera[name]) do
    if type(v) == "function" then tessera[name][k] = raising(v) end
  end
end
for _, k in ipairs({ "http_time", "cookie_time", "parse_http_time" }) do
  tessera[k] = raising(tessera[k])
end
"#;

/// A helper function: its arguments converted inside it, and its failures (a bad
/// argument, an input it refuses) returned to the [`RAISING`] wrapper, which raises them.
/// Failures that are not messages (out of memory, a script's `exit` inside a `gsub`
/// function, the time limit) go through as they are.
pub(crate) fn function<A, R>(
    lua: &Lua,
    f: impl Fn(&Lua, A) -> LuaResult<R> + 'static,
) -> LuaResult<Function>
where
    A: FromLuaMulti,
    R: IntoLuaMulti,
{
    lua.create_function(move |lua, args: MultiValue| {
        let result = A::from_lua_multi(args, lua)
            .map_err(|e| mlua::Error::runtime(format!("bad argument: {e}")))
            .and_then(|args| f(lua, args));
        match result {
            Ok(r) => r.into_lua_multi(lua),
            Err(mlua::Error::RuntimeError(message)) => (failed(), message).into_lua_multi(lua),
            Err(e) => Err(e),
        }
    })
}
