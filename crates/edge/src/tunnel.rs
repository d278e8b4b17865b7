//! WebSocket and other upgrades through the proxy: a GET with `Connection: upgrade` and
//! `Upgrade: PROTOCOL` (HTTP/1.1) is forwarded with both fields (they are hop-by-hop, so
//! only an upgrade request sends them on), never through the cache; when the upstream
//! answers `101 Switching Protocols`, its connection leaves the pool and goes to the
//! server with the 101 ([`handler::Tunnel`]), which splices it with the client's. Any
//! other answer is passed on like a normal response.

use std::rc::Rc;

use http::header::{self, HeaderValue};
use http::{Method, StatusCode};

use crate::body::{Body, BodyKind};
use crate::config::{secs, EdgeConfig};
use crate::error::{ProxyError, UpstreamError};
use crate::exchange::{ProxyRequest, ProxyResponse};
use crate::headers::{self, Forwarded};
use crate::upstream::client::{Fields, Head, Outgoing, Pooled, Upstream};

/// The protocol a request asks to upgrade to: a GET over HTTP/1.1 whose Connection
/// field names `upgrade` and that has an Upgrade field.
pub(crate) fn upgrade_of(req: &ProxyRequest) -> Option<&HeaderValue> {
    if req.method != Method::GET || req.client.version != http::Version::HTTP_11 {
        return None;
    }
    let asks = req.headers.get_all(header::CONNECTION).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade"))
    });
    asks.then(|| req.headers.get(header::UPGRADE)).flatten()
}

/// What an upgrade request came to.
pub(crate) enum Upgrade {
    /// `101 Switching Protocols`: the response that hands the connection to the server.
    Switched(ProxyResponse),
    /// Any other answer, to pass on like a normal response.
    Refused(Head, Pooled),
}

/// Forwards an upgrade request; see the module's documentation.
pub(crate) async fn upgrade(
    config: &EdgeConfig,
    req: &ProxyRequest,
    upstream: &Rc<Upstream>,
    protocol: HeaderValue,
) -> Result<Upgrade, ProxyError> {
    let token = config.esi.device_token.as_str();
    let out = Outgoing {
        method: &req.method,
        target: &req.target,
        fields: Fields::Forwarded(Forwarded {
            client_headers: &req.headers,
            client: &req.client,
            token,
            identity: false,
            whole: false,
            revalidate: None,
            host: &upstream.name,
            request_id: req.request_id,
        }),
        body: &req.body,
        streamed: None,
        upgrade: Some(&protocol),
        notes: req.notes.as_ref(),
        trace: req.trace,
    };
    let deadline = evloop::time::now() + upstream.response_timeout;
    let (mut parts, pooled) = upstream.send(&out, deadline).await?;
    if parts.status != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(Upgrade::Refused(parts, pooled));
    }
    let upgrade = parts.headers.get(b"upgrade").map(<[u8]>::to_vec);
    headers::strip_hop_by_hop(&mut parts.headers);
    if let Some(upgrade) = upgrade {
        parts.headers.insert(b"upgrade", &upgrade);
    }
    let name = upstream.name.clone();
    let (stream, early) = pooled
        .into_tunnel()
        .ok_or_else(|| UpstreamError::Protocol {
            upstream: name,
            message: "the upgraded connection could not be handed over".into(),
        })?;
    let own = config.upstream.iter().find(|u| u.name == upstream.name);
    let (idle, max) = own.map_or((60.0, 0.0), |u| {
        (u.tunnel_idle_timeout, u.tunnel_max_duration)
    });
    let tunnel = handler::Tunnel {
        upstream: stream,
        early,
        idle_timeout: secs(idle),
        max_duration: (max > 0.0).then(|| secs(max)),
    };
    Ok(Upgrade::Switched(ProxyResponse {
        status: parts.status,
        headers: parts.headers,
        body: Body {
            kind: BodyKind::Tunnel(Some(tunnel)),
            length: None,
        },
        head_h1: None,
    }))
}
