//! `tessera.socket.tcp` made for a Lua state: the constructor, the C functions of
//! [`super::fast`] and the methods of `socket.lua` over them.

use std::cell::RefCell;
use std::rc::Rc;

use mlua::{Function, Lua, Table};

use super::{compat, fast, owner, register, Socket, State, DEFAULT_TIMEOUT};

/// Sets `tessera.socket.tcp` and `tessera.ngx_compat`.
pub(crate) fn install(lua: &Lua, tessera: &Table) -> mlua::Result<()> {
    let new = lua.create_function(|_, ()| {
        let owner = owner()?;
        let state = Rc::new(RefCell::new(State {
            io: None,
            busy: false,
            owner,
            registered: None,
            connect_timeout: DEFAULT_TIMEOUT,
            send_timeout: DEFAULT_TIMEOUT,
            read_timeout: DEFAULT_TIMEOUT,
            pool: None,
            pool_size: None,
            reused: 0,
            host: String::new(),
            port: 0,
            unsent: None,
            waiting: None,
        }));
        let id = register(&state);
        Ok((Socket(state, id), id))
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
    }
    let tcp: Function = lua
        .load(include_str!("socket.lua"))
        .set_name("=tessera.socket")
        .call((new, quick, Lua::poll_pending()))?;
    let socket = lua.create_table()?;
    socket.set("tcp", tcp)?;
    tessera.set("socket", socket)?;
    compat::install(lua, tessera)
}
