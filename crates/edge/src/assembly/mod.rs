//! ESI assembly: fetching fragments (where an include may go, one fetch per fragment in
//! flight, through the cache), decoding encoded templates and fragments, assembling a
//! page in parallel and streaming it in document order, and stitching a compressed page
//! from its parts' compressed forms. It uses the upstream client and the cache, and
//! reads the worker's routes; the proxy above decides when a response is a page.

pub(crate) mod decode;
pub(crate) mod fetch;
pub(crate) mod page;
pub(crate) mod stitch;
