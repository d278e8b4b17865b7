//! `tessera.now` and `tessera.sleep`: the wall clock, and a wait that yields to the
//! worker's event loop.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mlua::{Lua, Table};

/// Sets `tessera.now()` (seconds since the epoch, with fractions) and
/// `tessera.sleep(seconds)`. A sleep is OpenResty's `ngx.sleep`: the worker serves its
/// other connections meanwhile, and since the wait is not inside a call into Lua it does
/// not count against the script's `time_limit`.
pub(crate) fn install(lua: &Lua, tessera: &Table) -> mlua::Result<()> {
    tessera.set(
        "now",
        lua.create_function(|_, ()| {
            Ok(SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()))
        })?,
    )?;
    tessera.set(
        "sleep",
        lua.create_async_function(|_, seconds: f64| async move {
            let wait = Duration::try_from_secs_f64(seconds)
                .map_err(|_| mlua::Error::runtime("tessera.sleep wants seconds >= 0"))?;
            evloop::time::sleep(wait).await;
            Ok(())
        })?,
    )
}
