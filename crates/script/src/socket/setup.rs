//! `tessera.socket.tcp` made for a Lua state: the constructor, the C functions of
//! [`super::fast`] and the methods of `socket.lua` over them.

use mlua::{Function, Lua, Table};

use super::{compat, fast, numbered, owner, Socket};

/// Sets `tessera.socket.tcp` and `tessera.ngx_compat`.
pub(crate) fn install(lua: &Lua, tessera: &Table) -> mlua::Result<()> {
    // The methods of ops.rs for the socket of a handle's number (`socket.lua` gives
    // only a handle's), or, with none, the error of a phase that refuses cosockets.
    let methods = lua.create_function(|_, id: Option<f64>| {
        let state = id
            .filter(|n| (0.0..u32::MAX as f64).contains(n) && n.fract() == 0.0)
            .and_then(|n| numbered(n as u32));
        match state {
            Some(state) => Ok(Socket(state)),
            None => {
                owner()?;
                Err(mlua::Error::runtime("tessera.socket: not a socket"))
            }
        }
    })?;
    let quick = lua.create_table()?;
    // SAFETY: each is a lua_CFunction that reads its arguments and pushes its results as
    // fast.rs says, raising no error from inside Rust's frames.
    unsafe {
        quick.set("connect", lua.create_c_function(fast::connect)?)?;
        quick.set("send", lua.create_c_function(fast::send)?)?;
        quick.set("receive", lua.create_c_function(fast::receive)?)?;
        quick.set("setkeepalive", lua.create_c_function(fast::setkeepalive)?)?;
        quick.set("settimeouts", lua.create_c_function(fast::settimeouts)?)?;
        quick.set("wait_receive", lua.create_c_function(fast::wait_receive)?)?;
        quick.set("give_up", lua.create_c_function(fast::give_up)?)?;
        quick.set("is_light", lua.create_c_function(fast::is_light)?)?;
        quick.set("new", lua.create_c_function(fast::new_socket)?)?;
        quick.set("collect", lua.create_c_function(fast::collect)?)?;
        quick.set("number", lua.create_c_function(fast::handle_number)?)?;
    }
    let tcp: Function = lua
        .load(include_str!("socket.lua"))
        .set_name("=tessera.socket")
        .call((methods, quick, Lua::poll_pending()))?;
    let socket = lua.create_table()?;
    socket.set("tcp", tcp)?;
    tessera.set("socket", socket)?;
    compat::install(lua, tessera)
}
