//! Who the client is behind load balancers (docs/security.md, "Client identity"): the
//! `trusted_proxies` networks, the field they are believed for (`real_ip_from`), and
//! the PROXY protocol's source address.
//!
//! A connection's client is worked out once: the socket's peer, or, on a
//! `proxy_protocol` listener, the source address the PROXY header names when the peer
//! is trusted (or when no `trusted_proxies` are set: the listener is then the trust).
//! A request's client is that, or, when its site reads `X-Forwarded-For` or `Forwarded`
//! and the connection's client is a trusted proxy, the right-most address of the field
//! that is not a trusted proxy's. Everything that asks who the client is (the access
//! log's `%a`, Lua's `r:client()`, the routing rules' `client` and `$remote_addr`,
//! `purge_allow`, `admin_allow`, `hash_key = "client"`, the `X-Forwarded-For` sent to
//! origins) gets the request's client.

use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;

use crate::facts::ConnFacts;

/// `real_ip_from`: which field of a trusted proxy names the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RealIpFrom {
    #[serde(rename = "x-forwarded-for")]
    XForwardedFor,
    #[serde(rename = "forwarded")]
    Forwarded,
    /// The PROXY header only (no field is read).
    #[serde(rename = "proxy_protocol")]
    ProxyProtocol,
}

/// A list of networks (`10.0.0.0/8`, `2001:db8::/32`, or one address), compiled once.
/// An IPv4 client seen as IPv4-mapped IPv6 (`::ffff:10.1.2.3`, on a dual-stack socket)
/// is matched as the IPv4 address it is.
#[derive(Debug, Clone, Default)]
pub struct Networks(Box<[(IpAddr, u8)]>);

impl Networks {
    /// Parses `list`; the error names the entry that is not a network.
    pub fn parse(list: &[String]) -> Result<Networks, String> {
        list.iter()
            .map(|text| {
                network(text).ok_or_else(|| {
                    format!("{text:?} is not an address or a network (CIDR, as 10.0.0.0/8)")
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(|v| Networks(v.into()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|&(net, len)| in_network(ip, net, len))
    }
}

fn network(text: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = match text.split_once('/') {
        Some((addr, len)) => {
            if len.is_empty() || len.len() > 3 || !len.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (addr, Some(len.parse::<u8>().ok()?))
        }
        None => (text, None),
    };
    let ip: IpAddr = addr.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(max);
    (len <= max).then_some((ip.to_canonical(), len))
}

fn in_network(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

/// One site's policy, compiled from its `trusted_proxies` and `real_ip_from` (a
/// `[[host]]` without its own takes the top-level ones).
#[derive(Debug, Clone, Default)]
pub(crate) struct Identity {
    pub trusted: Networks,
    /// The field read from a trusted proxy; `None`: none (no trusted proxies, or
    /// `real_ip_from = "proxy_protocol"`).
    field: Option<RealIpFrom>,
}

impl Identity {
    /// The policy of each site, the top-level one first, from the top-level
    /// `trusted_proxies` and `real_ip_from` and each `[[host]]`'s own (`None`: the
    /// top-level one). `real_ip_from` defaults to `x-forwarded-for` when trusted proxies
    /// are set.
    pub fn of_sites<'a>(
        (trusted, from): (&[String], Option<RealIpFrom>),
        hosts: impl Iterator<Item = (Option<&'a [String]>, Option<RealIpFrom>)>,
    ) -> Result<Vec<Identity>, String> {
        let top = Identity::new(trusted, from, "")?;
        let mut sites = vec![top.clone()];
        for (i, (host_trusted, host_from)) in hosts.enumerate() {
            if host_trusted.is_none() && host_from.is_none() {
                sites.push(top.clone());
                continue;
            }
            let key = format!("host[{i}].");
            let from = host_from.or(from);
            sites.push(Identity::new(host_trusted.unwrap_or(trusted), from, &key)?);
        }
        Ok(sites)
    }

    fn new(trusted: &[String], from: Option<RealIpFrom>, key: &str) -> Result<Identity, String> {
        let trusted =
            Networks::parse(trusted).map_err(|e| format!("`{key}trusted_proxies`: {e}"))?;
        let field = match from.unwrap_or(RealIpFrom::XForwardedFor) {
            _ if trusted.is_empty() => None,
            RealIpFrom::ProxyProtocol => None,
            other => Some(other),
        };
        Ok(Identity { trusted, field })
    }

    /// The request's client when a trusted proxy's field names one: `None` when the
    /// site reads no field or the connection's client is not a trusted proxy (its
    /// fields are then ignored, whatever they say).
    pub fn of_request(
        &self,
        conn: &ConnFacts,
        req: &wire::Request<'_, '_>,
    ) -> Option<wire::ForwardedClient> {
        self.named_by_fields(conn.client, req)
    }

    /// As [`Identity::of_request`], for a connection whose client is `client`.
    pub fn named_by_fields(
        &self,
        client: SocketAddr,
        req: &wire::Request<'_, '_>,
    ) -> Option<wire::ForwardedClient> {
        let field = self.field?;
        if !self.trusted.contains(client.ip()) {
            return None;
        }
        let conn_client = client;
        let trusted = |ip: IpAddr| self.trusted.contains(ip);
        let client = match field {
            RealIpFrom::XForwardedFor => {
                let values = req
                    .headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case("x-forwarded-for"))
                    .map(|h| h.value);
                wire::client_from_x_forwarded_for(values, conn_client, trusted)
            }
            RealIpFrom::Forwarded => {
                let values = req
                    .headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case("forwarded"))
                    .map(|h| h.value);
                wire::client_from_forwarded(values, conn_client, trusted)
            }
            RealIpFrom::ProxyProtocol => return None,
        };
        Some(client)
    }

    /// Whether the site reads a forwarding field from trusted proxies.
    pub fn reads_fields(&self) -> bool {
        self.field.is_some()
    }

    /// Whether the site reads `X-Forwarded-For` (so the proxy forwards only the items
    /// before the client it found).
    pub fn reads_x_forwarded_for(&self) -> bool {
        self.field == Some(RealIpFrom::XForwardedFor)
    }
}

/// The client of a connection whose PROXY header named `source`: `source` when the
/// socket's peer is trusted, or when no proxies are listed (the `proxy_protocol`
/// listener is then trusted as a whole); else the peer.
pub(crate) fn of_connection(
    trusted: &Networks,
    peer: SocketAddr,
    source: SocketAddr,
) -> SocketAddr {
    match trusted.is_empty() || trusted.contains(peer.ip()) {
        true => source,
        false => peer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_match_by_prefix_and_mapped_ipv4_as_ipv4() {
        let n = Networks::parse(&[
            "10.0.0.0/8".into(),
            "2001:db8::/32".into(),
            "192.0.2.7".into(),
        ])
        .unwrap();
        for yes in ["10.255.1.1", "::ffff:10.0.0.1", "2001:db8::5", "192.0.2.7"] {
            assert!(n.contains(yes.parse().unwrap()), "{yes}");
        }
        for no in ["11.0.0.1", "2001:db9::1", "192.0.2.8", "::1"] {
            assert!(!n.contains(no.parse().unwrap()), "{no}");
        }
        assert!(Networks::parse(&["0.0.0.0/0".into()])
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        for bad in [
            "10.0.0.0/33",
            "10.0.0/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "::/129",
            "localhost",
        ] {
            assert!(Networks::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_proxy_header_counts_from_a_trusted_peer_or_with_no_list() {
        let (peer, source) = (
            "10.0.0.1:1".parse().unwrap(),
            "192.0.2.1:2".parse().unwrap(),
        );
        let trusted = Networks::parse(&["10.0.0.0/8".into()]).unwrap();
        assert_eq!(of_connection(&trusted, peer, source), source);
        assert_eq!(of_connection(&Networks::default(), peer, source), source);
        let other = Networks::parse(&["172.16.0.0/12".into()]).unwrap();
        assert_eq!(of_connection(&other, peer, source), peer);
    }
}
