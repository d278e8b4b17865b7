//! The requests of a run, serialized before it starts.

/// A request serialized once, written as-is every time it is sent: HTTP/1.1's whole
/// request, or HTTP/2's fields (`h2::head_fields`) with the body beside them.
#[derive(Debug, Clone)]
pub(crate) struct Wire {
    pub bytes: Vec<u8>,
    pub head: bool,
    /// HTTP/2: the head's fields, HPACK-encoded per request (the connection's table).
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// HTTP/2: the body, sent in DATA frames as the windows allow.
    pub body: Option<Vec<u8>>,
}
