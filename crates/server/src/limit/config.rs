//! The TOML of a `[[limit]]` zone and the units it is written in.

use serde::Deserialize;

/// One `[[limit]]` table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitConfig {
    /// How routes and hosts name the zone in their `limit` lists. Required, unique.
    pub name: String,
    /// What a request is counted by: variables as in the routing rules (`$remote_addr`,
    /// `$http_NAME`, `$cookie_NAME`, `$arg_NAME`, `$host`, `$uri`...), several joined by
    /// spaces. A request whose key is empty is not limited (nginx). Default
    /// `$remote_addr`, the client (the one a trusted proxy names).
    pub key: String,
    /// `Nr/s` or `Nr/m`. Required.
    pub rate: String,
    /// Requests over the rate a key may have in excess (nginx `burst`). Default 0.
    pub burst: u64,
    /// Pass the requests within the burst at once instead of spacing them out at the
    /// rate (nginx `nodelay`). Default false.
    pub nodelay: bool,
    /// Pass this many of the burst's requests at once and space out the rest (nginx
    /// `delay=N`). Default 0 (all spaced out), or the whole burst with `nodelay`.
    pub delay: Option<u64>,
    /// The status of a refused request. Default 429.
    pub status: u16,
    /// Count what would be delayed or refused (and log what would be refused), but
    /// delay and refuse nothing (nginx `limit_req_dry_run`). Default false.
    pub dry_run: bool,
    /// The zone's table: `16m`, `512k`, `1g` or bytes; 16 bytes per key. Default `16m`
    /// (1,048,576 keys).
    pub memory: String,
    /// Share the zone with every node through the Redis of `[cache.redis]`. Default
    /// false.
    pub redis: bool,
}

impl Default for LimitConfig {
    fn default() -> LimitConfig {
        LimitConfig {
            name: String::new(),
            key: "$remote_addr".into(),
            rate: String::new(),
            burst: 0,
            nodelay: false,
            delay: None,
            status: 429,
            dry_run: false,
            memory: "16m".into(),
            redis: false,
        }
    }
}

/// Most requests a second a zone may allow (and most of a burst): its millirequests fit
/// the table's 40-bit fields with room to spare.
pub(crate) const MAX_RATE: u64 = 1_000_000;

/// Most zones one route or host names.
pub(crate) const MAX_PER_REQUEST: usize = 8;

/// `Nr/s` or `Nr/m` in millirequests per second (nginx's `ctx->rate`).
pub(crate) fn rate(text: &str) -> Result<u64, String> {
    let (n, scale) = match (text.strip_suffix("r/s"), text.strip_suffix("r/m")) {
        (Some(n), _) => (n, 1),
        (_, Some(n)) => (n, 60),
        _ => return Err(format!("`{text}` is not `Nr/s` or `Nr/m`")),
    };
    match n.parse::<u64>() {
        Ok(n) if (1..=MAX_RATE).contains(&n) => Ok(n * 1000 / scale),
        _ => Err(format!("`{text}`: the number must be 1 to {MAX_RATE}")),
    }
}

/// The requests of one window of a Redis zone's sliding-window count, and the window in
/// milliseconds: `10r/s` is (10, 1000), `600r/m` (600, 60000).
pub(crate) fn window(text: &str) -> Result<(u64, u64), String> {
    rate(text)?;
    let (n, window_ms) = match text.strip_suffix("r/s") {
        Some(n) => (n, 1000),
        None => (text.trim_end_matches("r/m"), 60_000),
    };
    Ok((n.parse().map_err(|_| format!("`{text}`"))?, window_ms))
}

/// `16m`, `512k`, `1g` or a number of bytes.
pub(crate) fn size(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, unit) = match lower.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => lower.split_at(i),
        None => (lower.as_str(), ""),
    };
    let unit = match unit {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(format!(
                "`{text}` is not a size (`16m`, `512k`, `1g` or bytes)"
            ))
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("`{text}` is not a size (`16m`, `512k`, `1g` or bytes)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_sizes_read_as_nginx_writes_them() {
        assert_eq!(rate("10r/s"), Ok(10_000));
        assert_eq!(rate("600r/m"), Ok(10_000));
        assert_eq!(rate("1r/m"), Ok(16));
        assert!(rate("10/s").is_err());
        assert!(rate("0r/s").is_err());
        assert_eq!(window("10r/s"), Ok((10, 1000)));
        assert_eq!(window("1r/m"), Ok((1, 60_000)));
        assert_eq!(size("16m"), Ok(16 << 20));
        assert_eq!(size("512K"), Ok(512 << 10));
        assert_eq!(size("4096"), Ok(4096));
        assert!(size("16x").is_err());
        assert!(size("m").is_err());
    }
}
