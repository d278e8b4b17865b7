//! Lua's `body_filter(r, chunk, eof)` through the real binary: on a streamed proxied
//! body, an ESI page, a compressed response, a static file and a Lua one; dropping
//! pieces and appending at the end; a filter that fails; HTTP/1.1 and HTTP/2.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use crate::compression::{decode, esi_page, page_text};
use crate::harness::{eventually, Response};
use crate::harness::{read_request_head, read_response, read_to_close, stderr_has, Server, Site};

/// The filter of every mount but `/lua`: upper-cases what it is given; `?mode=drop`
/// sends nothing until the end, then says how much it saw; `?mode=error` fails on its
/// second call, `?mode=loop` never returns; `?count=1` appends how many calls it had.
const FILTER: &str = r#"
local calls = setmetatable({}, { __mode = "k" })
local seen = setmetatable({}, { __mode = "k" })
return {
  body_filter = function(r, chunk, eof)
    calls[r] = (calls[r] or 0) + 1
    local mode = r:arg("mode")
    if mode == "drop" then
      seen[r] = (seen[r] or 0) + #chunk
      if eof then
        local n = seen[r]
        seen[r], calls[r] = nil, nil
        return "dropped " .. n .. " bytes of " .. r:resp_header("content-type") .. "\n"
      end
      return nil
    elseif mode == "error" and calls[r] == 2 then
      calls[r] = nil
      error("the filter broke")
    elseif mode == "loop" then
      calls[r] = nil
      while true do end
    end
    local out = chunk:upper()
    if eof then
      if r:arg("count") then out = out .. "[calls " .. calls[r] .. "]" end
      calls[r] = nil
    end
    return out
  end,
}
"#;

/// A Lua handler whose own body goes through its `body_filter`.
const GENERATED: &str = r#"
return {
  content = function(r)
    r:set_header("Content-Type", "text/plain")
    for i = 1, 3 do r:say("line ", i) end
  end,
  body_filter = function(r, chunk, eof)
    if eof then return chunk:gsub("line", "LINE") .. "end\n" end
    return chunk:gsub("line", "LINE")
  end,
}
"#;

/// One piece of the streamed body; four go out, 50 ms apart.
fn piece(i: usize) -> String {
    format!("piece {i}: ") + &"abcdefghij".repeat(800) + "\n"
}

fn streamed_body() -> String {
    (0..4).map(piece).collect()
}

/// An origin answering every request with [`streamed_body`], chunked, in four writes
/// with pauses between them (so the proxy relays it in several pieces).
fn streaming_origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    crate::harness::thread_per_connection(listener, |stream: TcpStream| {
        let mut writer = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        while read_request_head(&mut reader).is_some() {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\
                        Transfer-Encoding: chunked\r\n\r\n";
            if writer.write_all(head.as_bytes()).is_err() {
                return;
            }
            for i in 0..4 {
                let p = piece(i);
                let _ = write!(writer, "{:x}\r\n{p}\r\n", p.len());
                let _ = writer.flush();
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = writer.write_all(b"0\r\n\r\n");
        }
    });
    addr
}

fn filtered_site() -> (Site, Server) {
    let site = Site::new();
    std::fs::write(site.dir.path().join("filter.lua"), FILTER).unwrap();
    std::fs::write(site.dir.path().join("generated.lua"), GENERATED).unwrap();
    std::fs::create_dir_all(site.root().join("static")).unwrap();
    site.write("static/file.txt", page_text().as_slice());
    let d = site.dir.path().display();
    let mut toml = format!(
        r#"
admin_listen = "127.0.0.1:0"

[[upstream]]
name = "origin"
addresses = ["{origin}"]

[[upstream]]
name = "streamer"
addresses = ["{streamer}"]

[[route]]
prefix = "/up"
upstream = "streamer"

[[script]]
prefix = "/lua"
path = "{d}/generated.lua"
"#,
        origin = crate::compression::origin(),
        streamer = streaming_origin(),
    );
    for prefix in ["/esi", "/page", "/gzipped"] {
        toml += &format!("[[route]]\nprefix = \"{prefix}\"\nupstream = \"origin\"\n");
    }
    // The ESI page's fragments come from the origin too, unfiltered (no script there).
    toml += "[[route]]\nprefix = \"/frag\"\nupstream = \"origin\"\n";
    for prefix in ["/up", "/esi", "/page", "/gzipped", "/static"] {
        toml += &format!("[[script]]\nprefix = \"{prefix}\"\npath = \"{d}/filter.lua\"\n");
    }
    let server = site.serve_with(&toml);
    (site, server)
}

fn get(server: &Server, path: &str, fields: &str) -> Response {
    let mut s = server.connect();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    read_response(&mut s, false)
}

/// `curl --http2-prior-knowledge URL`: (its exit code, the body).
fn curl_h2(server: &Server, path: &str) -> (Option<i32>, Vec<u8>) {
    let out = Command::new("curl")
        .args(["-s", "--max-time", "20", "--http2-prior-knowledge"])
        .arg(format!("http://{}{path}", server.addr))
        .output()
        .expect("curl");
    (out.status.code(), out.stdout)
}

#[test]
fn a_body_filter_upper_cases_a_streamed_proxied_body_piece_by_piece() {
    let (_site, server) = filtered_site();
    let r = get(&server, "/up/stream?count=1", "");
    assert_eq!(r.status, 200);
    // Re-framed: its length is no longer known in advance.
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.header("content-length"), None);
    let body = String::from_utf8(r.body).unwrap();
    let (text, calls) = body.rsplit_once("[calls ").unwrap();
    assert_eq!(text, streamed_body().to_uppercase());
    // One call per piece the proxy relayed (more than one) and one with eof.
    let calls: usize = calls.trim_end_matches(']').parse().unwrap();
    assert!(calls >= 3, "{calls} calls");
}

#[test]
fn a_body_filter_runs_over_http2_too() {
    let (_site, server) = filtered_site();
    let (code, body) = curl_h2(&server, "/up/stream");
    assert_eq!(code, Some(0));
    assert_eq!(body, streamed_body().to_uppercase().into_bytes());
    let (code, body) = curl_h2(&server, "/static/file.txt");
    assert_eq!(code, Some(0));
    assert_eq!(body, page_text().to_ascii_uppercase());
    // A filter that fails on HTTP/2 resets the stream: curl reports the error.
    let (code, body) = curl_h2(&server, "/up/stream?mode=error");
    assert_ne!(code, Some(0));
    assert!(body.len() < streamed_body().len(), "{} bytes", body.len());
}

#[test]
fn a_body_filter_sees_an_esi_page_as_assembled() {
    let (_site, server) = filtered_site();
    let r = get(&server, "/esi", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, esi_page().to_ascii_uppercase());
}

#[test]
fn compression_runs_after_the_body_filter_which_sees_identity_bytes() {
    let (_site, server) = filtered_site();
    let r = get(&server, "/page", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), page_text().to_ascii_uppercase());
    // An origin that sends gzip: decoded for the filter, then compressed again for a
    // client that takes gzip, or sent as identity to one that does not.
    let r = get(&server, "/gzipped", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), page_text().to_ascii_uppercase());
    let r = get(&server, "/gzipped", "");
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, page_text().to_ascii_uppercase());
}

#[test]
fn a_body_filter_sees_a_static_file_and_a_lua_response() {
    let (_site, server) = filtered_site();
    let r = get(&server, "/static/file.txt", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.body, page_text().to_ascii_uppercase());
    // A file the filter would see is not answered by ranges of the original.
    let r = get(&server, "/static/file.txt", "Range: bytes=0-9\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, page_text().to_ascii_uppercase());
    // What the files answer without a file (here a 404) goes out as it is.
    let r = get(&server, "/static/missing.txt", "");
    assert_eq!(r.status, 404);
    let r = get(&server, "/lua", "");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"LINE 1\nLINE 2\nLINE 3\nend\n");
}

#[test]
fn a_body_filter_may_drop_every_piece_and_append_at_the_end() {
    let (_site, server) = filtered_site();
    let r = get(&server, "/up/stream?mode=drop", "");
    assert_eq!(r.status, 200);
    let want = format!("dropped {} bytes of text/plain\n", streamed_body().len());
    assert_eq!(String::from_utf8(r.body.clone()).unwrap(), want);
    // The metrics count the bytes in and out, and no body is being filtered now.
    let admin = crate::metrics::admin_addr(&server);
    let (status, text) = crate::metrics::admin_get(admin, "/metrics", "");
    assert_eq!(status, 200);
    let samples = crate::metrics::samples(&text);
    let sample = |key: &str| samples.get(key).copied().unwrap_or(-1.0);
    let into = "tessera_lua_body_filter_bytes_total{direction=\"in\"}";
    assert_eq!(sample(into), streamed_body().len() as f64, "{text}");
    let out = "tessera_lua_body_filter_bytes_total{direction=\"out\"}";
    assert_eq!(sample(out), r.body.len() as f64);
    assert!(sample("tessera_lua_calls_total{phase=\"body_filter\"}") >= 2.0);
    // The body's filter is let go once its last piece is written.
    eventually("no body being filtered", || {
        let (_, text) = crate::metrics::admin_get(admin, "/metrics", "");
        crate::metrics::samples(&text).get("tessera_lua_body_filter_streams") == Some(&0.0)
    });
}

#[test]
fn a_failing_body_filter_cuts_the_response_off_and_the_worker_goes_on() {
    let (_site, server) = filtered_site();
    let mut s = server.connect();
    write!(
        s,
        "GET /up/stream?mode=error HTTP/1.1\r\nHost: test\r\n\r\n"
    )
    .unwrap();
    // The head and the first piece went out; then the connection closes without the
    // last chunk, though the request asked to keep it open.
    let sent = read_to_close(&mut s);
    let text = String::from_utf8_lossy(&sent);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains(&piece(0).to_uppercase()), "{text}");
    assert!(!text.ends_with("0\r\n\r\n"), "{text}");
    eventually("the failure is logged", || {
        stderr_has(&server, "body_filter failed; the response is cut off")
            && stderr_has(&server, "the filter broke")
    });
    // The same worker answers the next request.
    let r = get(&server, "/up/stream", "");
    assert_eq!(r.body, streamed_body().to_uppercase().into_bytes());
    // A filter past its time limit is stopped as any phase is: the response is cut
    // off (here before its first byte of body), and the worker goes on.
    let mut s = server.connect();
    write!(s, "GET /up/stream?mode=loop HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let sent = read_to_close(&mut s);
    let text = String::from_utf8_lossy(&sent);
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(!text.contains("PIECE"), "{text}");
    eventually("the time limit is logged", || {
        stderr_has(&server, "longer than its time limit")
    });
    let r = get(&server, "/up/stream", "");
    assert_eq!(r.body, streamed_body().to_uppercase().into_bytes());
}
