//! Answers from a cached object (`Edge::serve`): its stored head with its Age, its body
//! from memory, from disk as it is read, from its slices, or its template assembled;
//! conditional and range requests answered from it (`crate::partial`).

use std::rc::Rc;
use std::sync::Arc;

use handler::FieldList;
use http::Method;

use crate::body::Body;
use crate::cache::Entry;
use crate::error::ProxyError;
use crate::exchange::{ProxyRequest, ProxyResponse};
use crate::proxy::Edge;
use crate::upstream::client::Upstream;

impl Edge {
    /// Answers from a cached object: its headers as stored (with Age), its body shared
    /// with the writer, or its template assembled.
    pub(crate) async fn serve(
        &self,
        entry: Arc<Entry>,
        req: &ProxyRequest,
        authority: &str,
        now: u64,
        upstream: Option<&Rc<Upstream>>,
    ) -> Result<ProxyResponse, ProxyError> {
        let token = self.worker.config.esi.device_token.as_str();
        let generation = self.worker.cache.generation();
        let memo = entry
            .template
            .as_ref()
            .and_then(|_| entry.memo(now, generation));
        let whole = entry.template.is_none() || memo.is_some();
        let age = entry.age_secs(now);
        let headers = if self.worker.lean && whole {
            // Buffers of a head this worker sent: no allocation.
            let mut headers = FieldList::with_capacity(1, 24);
            headers.append_with(b"age", |b| wire::write_decimal(b, age));
            headers
        } else {
            let mut headers = entry.response_headers(token).clone();
            headers.insert(b"age", age.to_string().as_bytes());
            headers
        };
        let mut headers = headers;
        if req.method == Method::HEAD && entry.template.is_none() {
            // No body to count: a HEAD says the length its GET would have.
            let length = entry.body_len();
            headers.append_with(b"content-length", |b| wire::write_decimal(b, length));
        }
        let (lines, date) = entry.response_head_h1(token);
        // A sliced object: read from its slices, fetching the missing ones from the
        // upstream of the request (`crate::slices`).
        let sliced = |range| {
            let upstream = upstream?;
            self.sliced_body(&entry, (req, authority, upstream), range)
        };
        if entry.sliced.is_some() && upstream.is_none() {
            return Err(ProxyError::BadRequest(
                "a sliced object without its upstream".into(),
            ));
        }
        match &entry.template {
            None => Ok(
                match crate::partial::answer(&entry, req, (&lines, date), (token, age), &sliced) {
                    // 304, 412, 206 or 416 from the stored object.
                    Some(answer) => answer,
                    // A body left on disk is sent as it is read, without compressed forms
                    // of its own.
                    None => match &entry.on_disk {
                        None if entry.sliced.is_some() => ProxyResponse {
                            status: entry.status,
                            head_h1: Some((lines, date, None)),
                            headers,
                            body: sliced(None).unwrap_or_else(|| Body::ready(Vec::new())),
                        },
                        Some(on_disk) => ProxyResponse {
                            status: entry.status,
                            head_h1: Some((lines, date, None)),
                            headers,
                            body: Body::disk(on_disk.stream(None)),
                        },
                        None => ProxyResponse {
                            status: entry.status,
                            head_h1: Some((
                                lines,
                                date,
                                Some((entry.variants.clone(), entry.clone())),
                            )),
                            headers,
                            body: Body::whole(entry.body.clone()),
                        },
                    },
                },
            ),
            Some(t) => {
                if let Some(memo) = memo {
                    return Ok(ProxyResponse {
                        status: entry.status,
                        head_h1: Some((lines, date, Some((memo.variants.clone(), entry.clone())))),
                        headers,
                        body: Body::ready(memo.chunks.clone()),
                    });
                }
                self.assemble(req, t, entry.status, headers, authority, Some(&entry))
                    .await
            }
        }
    }
}
