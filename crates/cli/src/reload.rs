//! The log line of a configuration reload: what changed, by host and by script.

use crate::config::{Modules, ServeConfig};

/// `hosts added [a.test], removed [..], changed [top-level, b.test www.b.test];
/// listeners added [..]; scripts changed [/api, b.test/admin]; ...` (a host by its names,
/// the top-level keys as `top-level`, a script by its host's first name and its prefix),
/// or `no change`. A script changed when its keys or the source in its file did.
pub fn changes(
    (old, old_modules): (&ServeConfig, &Modules),
    (new, new_modules): (&ServeConfig, &Modules),
    reloaded: &server::Reloaded,
) -> String {
    let names = |list: Vec<&str>| format!("[{}]", list.join(", "));
    let mut parts = Vec::new();
    if let Some(hosts) = compared(&hosts(old), &hosts(new)) {
        parts.push(format!("hosts {hosts}"));
    }
    let addrs = |list: &[std::net::SocketAddr]| {
        names(
            list.iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str)
                .collect(),
        )
    };
    if !reloaded.listeners_added.is_empty() {
        parts.push(format!(
            "listeners added {}",
            addrs(&reloaded.listeners_added)
        ));
    }
    if !reloaded.listeners_removed.is_empty() {
        parts.push(format!(
            "listeners removed {}",
            addrs(&reloaded.listeners_removed)
        ));
    }
    if reloaded.access_logs_changed {
        parts.push("access logs reopened".into());
    }
    if let Some(scripts) = compared(&scripts(old, old_modules), &scripts(new, new_modules)) {
        parts.push(format!("scripts {scripts}"));
    }
    // Compared by their printed form: every part of the configuration prints all its
    // fields, and this runs once per reload.
    for (what, before, after) in [
        (
            "upstreams",
            format!("{:?}", old.upstream),
            format!("{:?}", new.upstream),
        ),
        ("[esi]", format!("{:?}", old.esi), format!("{:?}", new.esi)),
        (
            "[cache] (emptied)",
            format!("{:?}", old.cache),
            format!("{:?}", new.cache),
        ),
        (
            "shared dictionaries (emptied)",
            format!("{:?}", old.shared_dict),
            format!("{:?}", new.shared_dict),
        ),
    ] {
        if before != after {
            parts.push(format!("{what} changed"));
        }
    }
    if parts.is_empty() {
        return "no change".into();
    }
    parts.join("; ")
}

/// `added [..], removed [..], changed [..]` between two lists of (label, what it is),
/// or `None` when they are the same.
fn compared(old: &[(String, String)], new: &[(String, String)]) -> Option<String> {
    let added: Vec<&str> = new
        .iter()
        .filter(|(n, _)| !old.iter().any(|(o, _)| o == n))
        .map(|(n, _)| n.as_str())
        .collect();
    let removed: Vec<&str> = old
        .iter()
        .filter(|(o, _)| !new.iter().any(|(n, _)| n == o))
        .map(|(o, _)| o.as_str())
        .collect();
    let changed: Vec<&str> = new
        .iter()
        .filter(|(n, what)| old.iter().any(|(o, was)| o == n && was != what))
        .map(|(n, _)| n.as_str())
        .collect();
    let mut out = Vec::new();
    for (label, list) in [("added", added), ("removed", removed), ("changed", changed)] {
        if !list.is_empty() {
            out.push(format!("{label} [{}]", list.join(", ")));
        }
    }
    (!out.is_empty()).then(|| out.join(", "))
}

/// Each host (the top-level one first, then each `[[host]]` by its names) with
/// everything that configures it but its scripts (reported on their own), printed.
fn hosts(config: &ServeConfig) -> Vec<(String, String)> {
    let of_site = |site: usize| {
        let routes: Vec<_> = config.route.iter().filter(|r| r.site == site).collect();
        format!("{routes:?}")
    };
    let mut top = config.server.clone();
    top.host.clear();
    top.listen.clear();
    let mut all = vec![("top-level".to_string(), format!("{top:?} {}", of_site(0)))];
    for (i, h) in config.server.host.iter().enumerate() {
        all.push((h.names.join(" "), format!("{h:?} {}", of_site(i + 1))));
    }
    all
}

/// Each script mount (`/api` on the top-level host, `b.test/api` on a `[[host]]`) with
/// its keys and the digest of the source it loaded, printed.
fn scripts(config: &ServeConfig, modules: &Modules) -> Vec<(String, String)> {
    let Some(scripts) = modules.scripts.as_deref() else {
        return Vec::new();
    };
    let mut all: Vec<(String, String)> = scripts
        .mounts()
        .map(|(mount, digest)| {
            let host = match mount.site {
                0 => "",
                site => config.server.host[site - 1].names[0].as_str(),
            };
            (
                format!("{host}{}", mount.prefix),
                format!("{mount:?} {digest}"),
            )
        })
        .collect();
    all.sort();
    all
}
