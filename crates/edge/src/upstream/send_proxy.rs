//! `send_proxy`: the PROXY protocol header that begins a connection to an upstream,
//! naming the client whose requests it carries (HAProxy's `send-proxy`).

use std::net::SocketAddr;

use evloop::net::TcpStream;
use tokio::io::AsyncWriteExt;

use crate::config::SendProxy;

/// Writes the header for a connection that carries `client`'s requests (`None`: the
/// proxy's own, v1 `UNKNOWN` or v2 `LOCAL`); the destination named is the peer.
pub(crate) async fn introduce(
    stream: &mut TcpStream,
    version: SendProxy,
    client: Option<SocketAddr>,
) -> std::io::Result<()> {
    let addresses = match client {
        Some(client) => Some((client, stream.peer_addr()?)),
        None => None,
    };
    let mut header = Vec::with_capacity(64);
    match version {
        SendProxy::V1 => wire::write_v1(&mut header, addresses),
        SendProxy::V2 => wire::write_v2(&mut header, addresses),
    }
    stream.write_all(&header).await
}
