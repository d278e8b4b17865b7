//! `tessera.crypto`: digests and HMACs with binary results (as `ngx.sha1_bin`,
//! `ngx.md5_bin`, `ngx.hmac_sha1`, `resty.sha256`; hex them with `tessera.hex.encode`),
//! and random bytes from the operating system's CSPRNG (`resty.random.bytes(n, true)`).
//! RustCrypto's implementations.

use hmac::{Hmac, Mac};
use md5::Md5;
use mlua::{Lua, Result as LuaResult, String as LuaString, Table};
use sha1::{Digest, Sha1};
use sha2::Sha256;

/// Most bytes one `random_bytes` call returns.
pub const MAX_RANDOM_BYTES: usize = 1 << 20;

pub fn install(lua: &Lua, tessera: &Table) -> LuaResult<()> {
    let crypto = lua.create_table()?;
    crypto.set(
        "sha1",
        super::raising::function(lua, |lua, s: LuaString| {
            lua.create_string(Sha1::digest(&s.as_bytes()[..]))
        })?,
    )?;
    crypto.set(
        "sha256",
        super::raising::function(lua, |lua, s: LuaString| {
            lua.create_string(Sha256::digest(&s.as_bytes()[..]))
        })?,
    )?;
    crypto.set(
        "md5",
        super::raising::function(lua, |lua, s: LuaString| {
            lua.create_string(Md5::digest(&s.as_bytes()[..]))
        })?,
    )?;
    crypto.set(
        "hmac_sha1",
        super::raising::function(lua, |lua, (key, s): (LuaString, LuaString)| {
            lua.create_string(hmac::<Hmac<Sha1>>(&key.as_bytes(), &s.as_bytes()))
        })?,
    )?;
    crypto.set(
        "hmac_sha256",
        super::raising::function(lua, |lua, (key, s): (LuaString, LuaString)| {
            lua.create_string(hmac::<Hmac<Sha256>>(&key.as_bytes(), &s.as_bytes()))
        })?,
    )?;
    crypto.set(
        "random_bytes",
        super::raising::function(lua, |lua, n: i64| {
            if !(0..=MAX_RANDOM_BYTES as i64).contains(&n) {
                return Err(mlua::Error::runtime(format!(
                    "random_bytes: {n} bytes asked, 0 to {MAX_RANDOM_BYTES} allowed"
                )));
            }
            let mut bytes = vec![0; n as usize];
            getrandom::fill(&mut bytes).map_err(|e| {
                mlua::Error::runtime(format!(
                    "random_bytes: the system's random source failed: {e}"
                ))
            })?;
            lua.create_string(bytes)
        })?,
    )?;
    tessera.set("crypto", crypto)?;
    Ok(())
}

fn hmac<M: Mac + hmac::digest::KeyInit>(key: &[u8], message: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length (a long one is hashed first).
    let mut mac =
        <M as hmac::digest::KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message);
    mac.finalize().into_bytes().to_vec()
}
