//! `[[script]] package_path`: where `require` looks for Lua modules, before the default
//! `package.path` (nginx's `lua_package_path`).

use mlua::{Lua, Table};

use crate::config::ScriptConfig;

/// Puts every mount's `package_path` (each once, in mount order) before the state's
/// `package.path`.
pub(crate) fn install(lua: &Lua, configs: &[ScriptConfig]) -> mlua::Result<()> {
    let mut paths: Vec<&str> = Vec::new();
    for path in configs.iter().filter_map(|c| c.package_path.as_deref()) {
        let path = path.trim_matches(';');
        if !path.is_empty() && !paths.contains(&path) {
            paths.push(path);
        }
    }
    if paths.is_empty() {
        return Ok(());
    }
    let package: Table = lua.globals().get("package")?;
    let default: String = package.get("path")?;
    package.set("path", format!("{};{default}", paths.join(";")))
}
