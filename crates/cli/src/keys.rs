//! The keys of the config file at each level, for refusing one that no level has: the
//! message lists every key valid where it was written (tables included) and suggests the
//! nearest (`did you mean `root`?`), or the table where the key belongs
//! (`max_body_size` is a key of `[limits]`).
//!
//! Each level's keys are read from the type that deserializes it (what its derived
//! `Deserialize` asks for), so they cannot drift from what the file may hold. Two levels
//! are split between crates (`cli` takes the modules' keys out before the server reads
//! the rest, see `config.rs`): the top level and `[[host]]`, whose lists get the modules'
//! keys added here.

use serde::de::{self, Deserialize, Visitor};

/// The keys `cli` takes out of the top level for the modules, in the order docs/config.md
/// presents them.
pub const MODULE_KEYS: [&str; 6] = ["upstream", "route", "esi", "cache", "script", "shared_dict"];

/// The keys `cli` takes out of each `[[host]]` for the modules.
pub const HOST_MODULE_KEYS: [&str; 2] = ["route", "script"];

/// A `toml` error message (one line) with a better account of an unknown key: every
/// key valid at its level (the modules' keys included) and the nearest one, or the other
/// levels where the key belongs. `prefix` is the path of the table that was read
/// (`"host."` for a host's routes and scripts, read on their own), `""` for the whole
/// file. Any other message is returned as it is.
pub fn explain(message: String, prefix: &str) -> String {
    let Some(start) = message.find("unknown field `") else {
        return message;
    };
    let rest = &message[start + "unknown field `".len()..];
    let Some(end) = rest.find('`') else {
        return message;
    };
    let key = &rest[..end];
    let after = &rest[end + 1..];
    // toml names the table the field was found in at the end: "... in `cache.redis`".
    let (expected, path) = match after.rsplit_once(" in `") {
        Some((expected, path)) if path.ends_with('`') => {
            (expected, format!("{prefix}{}", path.trim_end_matches('`')))
        }
        _ => (after, prefix.trim_end_matches('.').to_string()),
    };
    let mut valid: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match path.as_str() {
        "" => valid.extend(MODULE_KEYS),
        "host" => valid.extend(HOST_MODULE_KEYS),
        // The rules' keys were taken out before the module read the rest.
        "route" | "host.route" => add_new(&mut valid, &rules::config::ROUTE_KEYS),
        "script" | "host.script" => add_new(&mut valid, &rules::config::SCRIPT_KEYS),
        _ => {}
    }
    let level = match path.as_str() {
        "" => "at the top level".to_string(),
        path => format!("in {}", table(path)),
    };
    let hint = match nearest(key, &valid) {
        Some(near) => format!(", did you mean `{near}`?"),
        None => match belongs(key, &path) {
            Some(tables) => format!(": it is a key of {}.", tables.join(", ")),
            None => ".".into(),
        },
    };
    let list: Vec<String> = valid.iter().map(|k| format!("`{k}`")).collect();
    let list = if list.is_empty() {
        "none".to_string()
    } else {
        list.join(", ")
    };
    format!(
        "{}unknown field `{key}` {level}{hint} Valid keys {level}: {list}",
        &message[..start]
    )
}

/// Adds the keys of `more` that `valid` lacks.
fn add_new<'a>(valid: &mut Vec<&'a str>, more: &[&'a str]) {
    for key in more {
        if !valid.contains(key) {
            valid.push(key);
        }
    }
}

/// `[limits]`, `[[upstream]]`: a level as it is written in the file.
fn table(path: &str) -> String {
    const ARRAYS: [&str; 10] = [
        "cache_control",
        "host",
        "host.cache_control",
        "host.route",
        "host.script",
        "upstream",
        "upstream.peer",
        "route",
        "script",
        "shared_dict",
    ];
    if ARRAYS.contains(&path) {
        format!("`[[{path}]]`")
    } else {
        format!("`[{path}]`")
    }
}

/// The valid key closest to `key` by edit distance (case and `-` for `_` ignored), when
/// it is close enough to be a typo: at most one edit in three characters.
fn nearest<'a>(key: &str, valid: &[&'a str]) -> Option<&'a str> {
    let typed = key.to_ascii_lowercase().replace('-', "_");
    let limit = (typed.chars().count() / 3).max(1);
    valid
        .iter()
        .map(|v| (distance(&typed, v), *v))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, v)| v)
}

/// Levenshtein distance.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(above + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// The other levels where `key` is valid as it is written (`[limits]`, `the top level`).
fn belongs(key: &str, path: &str) -> Option<Vec<String>> {
    let found: Vec<String> = levels()
        .into_iter()
        .filter(|(level, keys)| *level != path && keys.contains(&key))
        .map(|(level, _)| match level {
            "" => "the top level".to_string(),
            level => table(level),
        })
        .collect();
    (!found.is_empty()).then_some(found)
}

/// Every level of the file ("" is the top level) and its keys.
fn levels() -> Vec<(&'static str, Vec<&'static str>)> {
    let with = |mut keys: Vec<&'static str>, extra: &[&'static str]| {
        keys.extend(extra);
        keys
    };
    let server = server::Config::default();
    vec![
        ("", with(fields::<server::Config>(), &MODULE_KEYS)),
        ("limits", fields::<server::LimitsConfig>()),
        ("limit", fields::<server::LimitConfig>()),
        ("timeouts", fields::<server::TimeoutsConfig>()),
        ("tls", fields::<server::TlsConfig>()),
        ("acme", fields::<server::AcmeConfig>()),
        ("http2", fields::<server::Http2Config>()),
        ("http3", fields::<server::Http3Config>()),
        ("compression", fields_like(&server.compression)),
        ("cache_control", fields::<server::CacheControlRule>()),
        (
            "host",
            with(fields::<server::HostConfig>(), &HOST_MODULE_KEYS),
        ),
        ("upstream", fields::<edge::UpstreamConfig>()),
        ("upstream.peer", fields::<edge::PeerConfig>()),
        ("upstream.health", fields::<edge::HealthConfig>()),
        // A route's keys: the proxy's, and the rules' (`prefix` is both).
        ("route", {
            let mut keys = with(fields::<edge::RouteConfig>(), &rules::config::ROUTE_KEYS);
            keys.sort_unstable();
            keys.dedup();
            keys
        }),
        ("route.cache", fields::<edge::RouteCacheConfig>()),
        ("esi", fields::<edge::EsiConfig>()),
        ("cache", fields::<edge::CacheConfig>()),
        ("cache.redis", fields::<edge::RedisConfig>()),
        ("cache.disk", fields::<edge::DiskConfig>()),
        (
            "script",
            with(
                fields::<script::ScriptConfig>(),
                &rules::config::SCRIPT_KEYS,
            ),
        ),
        ("shared_dict", fields::<script::SharedDictConfig>()),
    ]
}

/// The field names `T`'s derived `Deserialize` asks a deserializer for.
pub fn fields<'de, T: Deserialize<'de>>() -> Vec<&'static str> {
    match T::deserialize(Probe) {
        Err(Found(Some(fields))) => fields.to_vec(),
        _ => Vec::new(),
    }
}

/// [`fields`] of the type of `_value` (for a type its crate does not name publicly).
fn fields_like<'de, T: Deserialize<'de>>(_value: &T) -> Vec<&'static str> {
    fields::<T>()
}

/// A deserializer that answers nothing but records the fields a struct asks for.
struct Probe;

#[derive(Debug)]
struct Found(Option<&'static [&'static str]>);

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("probed")
    }
}

impl std::error::Error for Found {}

impl de::Error for Found {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Found(None)
    }
}

impl<'de> de::Deserializer<'de> for Probe {
    type Error = Found;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
        Err(Found(None))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Found> {
        Err(Found(Some(fields)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_has_its_keys() {
        for (level, keys) in levels() {
            assert!(!keys.is_empty(), "no keys found for {level:?}");
        }
        let top = &levels()[0].1;
        for key in [
            "listen",
            "root",
            "tls",
            "limits",
            "host",
            "upstream",
            "shared_dict",
        ] {
            assert!(top.contains(&key), "{key}");
        }
    }

    #[test]
    fn suggests_the_nearest_key() {
        let valid = ["root", "workers", "max_connections", "redirect_https"];
        assert_eq!(nearest("rot", &valid), Some("root"));
        assert_eq!(nearest("Root", &valid), Some("root"));
        assert_eq!(nearest("max-connections", &valid), Some("max_connections"));
        assert_eq!(nearest("max_conections", &valid), Some("max_connections"));
        assert_eq!(nearest("redirect_http", &valid), Some("redirect_https"));
        assert_eq!(nearest("proxy_pass", &valid), None);
        assert_eq!(nearest("x", &valid), None);
    }

    #[test]
    fn an_unknown_key_is_explained_at_its_level() {
        let message = |m: &str, prefix: &str| explain(m.to_string(), prefix);
        let top = message("unknown field `rot`, expected one of `listen`, `root`", "");
        assert_eq!(
            top,
            "unknown field `rot` at the top level, did you mean `root`? Valid keys at the \
             top level: `listen`, `root`, `upstream`, `route`, `esi`, `cache`, `script`, \
             `shared_dict`"
        );
        let moved = message(
            "unknown field `max_body_size`, expected `listen` or `root`",
            "",
        );
        assert!(
            moved.contains("`max_body_size` at the top level: it is a key of `[limits]`."),
            "{moved}"
        );
        let host = message(
            "unknown field `rout`, expected one of `names`, `root` in `host`",
            "",
        );
        assert!(
            host.contains("in `[[host]]`, did you mean `root`?"),
            "{host}"
        );
        assert!(
            host.ends_with("`names`, `root`, `route`, `script`"),
            "{host}"
        );
        let host_route = message(
            "unknown field `prefx`, expected `prefix` or `upstream` in `route`",
            "host.",
        );
        assert!(
            host_route
                .starts_with("unknown field `prefx` in `[[host.route]]`, did you mean `prefix`?"),
            "{host_route}"
        );
        assert_eq!(
            message("line 1, column 1: invalid", ""),
            "line 1, column 1: invalid"
        );
    }
}
