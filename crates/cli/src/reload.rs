//! The log line of a configuration reload: what changed, by host.

use crate::config::ServeConfig;

/// `hosts added [a.test], removed [..], changed [top-level, b.test www.b.test];
/// listeners added [..]; ...` (a host by its names, the top-level keys as `top-level`),
/// or `no change`.
pub fn changes(old: &ServeConfig, new: &ServeConfig, reloaded: &server::Reloaded) -> String {
    let old_hosts = hosts(old);
    let new_hosts = hosts(new);
    let names = |list: Vec<&str>| format!("[{}]", list.join(", "));
    let added: Vec<&str> = new_hosts
        .iter()
        .filter(|(n, _)| !old_hosts.iter().any(|(o, _)| o == n))
        .map(|(n, _)| n.as_str())
        .collect();
    let removed: Vec<&str> = old_hosts
        .iter()
        .filter(|(o, _)| !new_hosts.iter().any(|(n, _)| n == o))
        .map(|(o, _)| o.as_str())
        .collect();
    let changed: Vec<&str> = new_hosts
        .iter()
        .filter(|(n, what)| old_hosts.iter().any(|(o, was)| o == n && was != what))
        .map(|(n, _)| n.as_str())
        .collect();
    let mut parts = Vec::new();
    let mut hosts = Vec::new();
    for (label, list) in [("added", added), ("removed", removed), ("changed", changed)] {
        if !list.is_empty() {
            hosts.push(format!("{label} {}", names(list)));
        }
    }
    if !hosts.is_empty() {
        parts.push(format!("hosts {}", hosts.join(", ")));
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

/// Each host (the top-level one first, then each `[[host]]` by its names) with
/// everything that configures it, printed.
fn hosts(config: &ServeConfig) -> Vec<(String, String)> {
    let of_site = |site: usize| {
        let routes: Vec<_> = config.route.iter().filter(|r| r.site == site).collect();
        let scripts: Vec<_> = config.script.iter().filter(|s| s.site == site).collect();
        format!("{routes:?} {scripts:?}")
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
