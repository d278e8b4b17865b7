//! Reaching the origins: the peers of each upstream and their shared health (passive and
//! active checks), balancing, the retry budget, and the HTTP client (HTTP/1.1 pools per
//! peer, or HTTP/2 connections carrying many streams, `h2`) and the requests it sends,
//! over TCP or TLS (`stream`, `tls`). It knows nothing of the cache or of ESI: what it
//! is asked to send and what comes back are plain requests and responses.

pub(crate) mod balance;
pub(crate) mod budget;
pub(crate) mod client;
pub(crate) mod h2;
pub(crate) mod health;
pub(crate) mod outgoing;
pub(crate) mod peers;
pub(crate) mod read;
pub(crate) mod send_proxy;
pub(crate) mod stream;
pub(crate) mod tls;
