//! A script's call to an upstream (`tessera.http.request` in Lua, a forward auth's
//! subrequest): straight to the named upstream through its balancer, pools and retries,
//! without the proxy's routing, forwarding fields, cache or ESI.

use bytes::Bytes;
use http::{header, HeaderMap, Method, StatusCode};

use crate::error::ProxyError;
use crate::proxy::{is_origin_form, Edge};
use crate::upstream::outgoing::{Fields, Outgoing};
use handler::FieldList;

impl Edge {
    /// One request to the upstream named `upstream`, for a script: no routing, no header
    /// forwarding and no ESI, the whole response body read (at most `max_body` bytes)
    /// within the upstream's timeouts, through its balancer, pools and retries.
    pub async fn call(
        &self,
        upstream: &str,
        method: Method,
        target: &str,
        headers: HeaderMap,
        body: Bytes,
        max_body: usize,
    ) -> Result<(StatusCode, FieldList, Bytes), ProxyError> {
        let Some(upstream) = self.worker.upstreams.get(upstream).cloned() else {
            return Err(ProxyError::BadRequest(format!("no upstream `{upstream}`")));
        };
        let mut headers = headers;
        if !headers.contains_key(header::HOST) {
            if let Ok(host) = header::HeaderValue::from_str(&upstream.name) {
                headers.insert(header::HOST, host);
            }
        }
        if !is_origin_form(target) {
            return Err(ProxyError::BadRequest("unparsable request target".into()));
        }
        let out = Outgoing {
            method: &method,
            target,
            fields: Fields::Plain(&headers),
            body: &body,
            streamed: None,
            upgrade: None,
            notes: None,
            trace: None,
        };
        let deadline = evloop::time::now() + upstream.response_timeout;
        let (parts, pooled) = upstream.send(&out, deadline).await?;
        let bytes = crate::upstream::read::read_bytes(
            pooled,
            max_body,
            evloop::time::now() + upstream.response_timeout,
        )
        .await?;
        Ok((parts.status, parts.headers, bytes))
    }
}
