//! What the proxy is given and what it gives back: a request as the server parsed it,
//! and the response to send downstream, with its [`Body`].

use std::sync::Arc;

use bytes::Bytes;
use handler::FieldList;
use http::header::HeaderMap;
use http::{Method, StatusCode};

use crate::arena::Text;
use crate::body::Body;
use crate::cache::variants::Variants;
use crate::cache::Entry;
use crate::headers::ClientInfo;

/// A request to proxy, as the server parsed it.
#[derive(Debug, Clone)]
pub struct ProxyRequest {
    pub method: Method,
    /// The request target in origin form: `/path?query`.
    pub target: Text,
    pub headers: HeaderMap,
    /// The whole request body (the server reads it within its body limit first).
    pub body: Bytes,
    pub client: ClientInfo,
    /// Where to note the upstream attempts and the cache's result for the access log;
    /// `None`: the log does not write them, and nothing is noted.
    pub notes: Option<handler::LogNotes>,
    /// The request's id, sent to the origin as `X-Request-Id` in place of any the client
    /// sent (`handler::Request::request_id`); `None`: the fields go as they are.
    pub request_id: Option<u128>,
}

/// The response to send downstream. `headers` are final (hop-by-hop fields and
/// Surrogate-Control removed, Via added), in the seam's form: the module makes them the
/// `handler::ResponseHead` as they are. The server adds its own framing from
/// [`Body::content_length`].
pub struct ProxyResponse {
    pub status: StatusCode,
    pub headers: FieldList,
    pub body: Body,
    /// For an object served from the cache: `headers` but Age, as HTTP/1 lines made once
    /// for the object, so that serving it does not re-encode every field.
    /// With the object's (or assembled page's) compressed forms, to serve from, and the
    /// object (weighed again in the cache when a form is added).
    pub(crate) head_h1: Option<(Bytes, bool, Option<CachedForms>)>,
}

/// A cached body's compressed forms and the object they count in.
pub(crate) type CachedForms = (Arc<Variants>, Arc<Entry>);
