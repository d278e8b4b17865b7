//! Upgraded connections (WebSocket and other `Upgrade` protocols): after a handler's
//! `101 Switching Protocols`, the client's connection and the upstream one the handler
//! hands over ([`handler::Tunnel`]) are spliced, bytes copied both ways until both sides
//! have closed, or none sent a byte for the idle timeout, or the maximum duration is
//! over. The connection keeps its slot meanwhile (in the untimed handling state: the
//! tunnel's own timeouts bound it), so tunnels count in the connection budget.

use std::io;
use std::pin::pin;
use std::time::Duration;

use evloop::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::facts::ConnFacts;
use crate::net::transport::Stream;
use crate::reply::HeadBuf;
use crate::worker::Worker;

/// The head to send for a handler's 101, and the tunnel to splice; without a tunnel,
/// a 502 page instead.
pub(crate) fn answer(
    worker: &Worker,
    conn: &ConnFacts,
    mut response: handler::Response,
) -> (HeadBuf, Option<handler::Tunnel>) {
    let tunnel = match &mut response.body {
        handler::Body::Stream { chunks, .. } => chunks.as_mut().take_tunnel(),
        _ => None,
    };
    let mut head = HeadBuf::take();
    if tunnel.is_none() {
        let page = handler::Response::status_page(502);
        let version = wire::Version::Http11;
        crate::exchange::write_head(worker, conn, &mut head, &page, false, version, false);
        if let handler::Body::Full(b) = &page.body {
            head.extend_from_slice(b);
        }
        return (head, None);
    }
    wire::write_status_line(&mut head, 101);
    // The upstream's fields (Upgrade, Sec-WebSocket-Accept, ...); Connection is a
    // framing field the head leaves out, so it is written here.
    response.head.write_fields_h1(&mut head);
    head.extend_from_slice(b"Connection: upgrade\r\n\r\n");
    (head, tunnel)
}

/// Bytes read at once in each direction.
const ROOM: usize = 16 * 1024;

/// Splices `client` (which sent `from_client` already, after its request head) with the
/// tunnel's upstream connection until the tunnel ends.
pub(crate) async fn splice(
    client: &mut Stream,
    from_client: &[u8],
    tunnel: handler::Tunnel,
) -> io::Result<()> {
    let mut upstream = tokio::net::TcpStream::from_std(tunnel.upstream)?;
    if !from_client.is_empty() {
        upstream.write_all(from_client).await?;
    }
    if !tunnel.early.is_empty() {
        client.write_all(&tunnel.early).await?;
    }
    let ends = tunnel
        .max_duration
        .map_or(Instant::now() + Duration::from_secs(86_400 * 365), |d| {
            Instant::now() + d
        });
    let mut max = pin!(evloop::time::sleep_until(ends));
    let mut idle = pin!(evloop::time::sleep(tunnel.idle_timeout));
    let (mut up_buf, mut down_buf) = (vec![0u8; ROOM], vec![0u8; ROOM]);
    // Whether each side has sent its end (its reading half is done).
    let (mut client_done, mut upstream_done) = (false, false);
    while !(client_done && upstream_done) {
        tokio::select! {
            read = client.read(&mut up_buf), if !client_done => match read? {
                0 => {
                    client_done = true;
                    let _ = upstream.shutdown().await;
                }
                n => upstream.write_all(&up_buf[..n]).await?,
            },
            read = upstream.read(&mut down_buf), if !upstream_done => match read? {
                0 => {
                    upstream_done = true;
                    let _ = client.shutdown().await;
                }
                n => client.write_all(&down_buf[..n]).await?,
            },
            _ = &mut idle => {
                tracing::debug!("tunnel idle: closed");
                return Ok(());
            }
            _ = &mut max => {
                tracing::debug!("tunnel at its maximum duration: closed");
                return Ok(());
            }
        }
        idle.as_mut().reset(Instant::now() + tunnel.idle_timeout);
    }
    Ok(())
}
