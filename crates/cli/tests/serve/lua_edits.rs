//! Request edits in Lua's `access` (`r:set_req_header`, `r:add_req_header`,
//! `r:set_path`, `r:set_query`) through the real binary: what the origin behind the proxy
//! and the static files get.

use std::io::Write;

use crate::harness::{echo_origin, Response, Server, Site};

const EDITS: &str = r#"
return {
  access = function(r)
    local p = r:path()
    if p == "/app/headers" then
      r:set_req_header("X-Added", "lua")
      r:add_req_header("X-Many", "1")
      r:add_req_header("X-Many", "2")
      -- The configuration's request_headers came first: the script sees them.
      r:set_req_header("X-Both", r:header("x-both") .. "+lua")
      r:set_req_header("X-Remove-Me", nil)
      r:set_req_header("User-Agent", "tessera-lua")
      -- What the script reads back is the request as edited.
      r:set_req_header("X-Seen", tostring(r:header("x-remove-me")) .. " " .. r:header("x-added"))
    elseif p == "/app/path" then
      r:set_path("/app/new place")
      r:set_query({ a = "1 2" })
      r:set_req_header("X-Seen", r:path() .. " " .. r:query() .. " " .. r:uri())
    elseif p == "/app/query" then
      r:set_query("x=1&y=%20")
    elseif p == "/app/noquery" then
      r:set_query(nil)
    elseif p == "/app/escape" then
      r:set_path("/../../secret.txt")
    elseif p == "/app/framing" then
      local ok, err = pcall(r.set_req_header, r, "Content-Length", "5")
      local ok2, err2 = pcall(r.set_req_header, r, "X-Bad", "a\r\nb")
      r:exit(200, tostring(err) .. "|" .. tostring(err2))
    elseif p == "/files/renamed" then
      r:set_path("/hello.txt")
    elseif p == "/files/to-app" then
      r:set_req_header("X-Before", "kept")
      r:set_path("/app/landed")
    elseif p == "/app/to-file" then
      r:set_path("/hello.txt")
    elseif p == "/app/loop" then
      r:set_path("/app/loop-again")
    elseif p == "/app/loop-again" then
      r:set_path("/app/loop")
    end
  end,
  header_filter = function(r)
    r:set_header("X-Filtered", "yes")
  end,
}
"#;

fn edits_site() -> (Site, Server) {
    let site = Site::new();
    std::fs::write(site.dir.path().join("edits.lua"), EDITS).unwrap();
    let d = site.dir.path().display();
    let server = site.serve_with(&format!(
        r#"
[[upstream]]
name = "app"
addresses = ["{up}"]

[[route]]
prefix = "/app"
upstream = "app"
request_headers = {{ set = {{ "X-Config" = "from-config", "X-Both" = "config" }} }}

[[script]]
prefix = "/app"
path = "{d}/edits.lua"

[[script]]
prefix = "/files"
path = "{d}/edits.lua"
"#,
        up = echo_origin(),
    ));
    (site, server)
}

fn ask(server: &Server, path: &str) -> Response {
    let mut s = server.connect();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: test\r\nUser-Agent: curl\r\nX-Remove-Me: please\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    crate::harness::read_response(&mut s, false)
}

fn lines(r: &Response) -> Vec<String> {
    String::from_utf8_lossy(&r.body)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn request_headers_set_in_access_reach_the_origin_after_the_configurations() {
    let (_site, server) = edits_site();
    let r = ask(&server, "/app/headers");
    assert_eq!(r.status, 200);
    let got = lines(&r);
    assert_eq!(got[0], "/app/headers");
    let has = |line: &str| got.iter().any(|l| l.eq_ignore_ascii_case(line));
    for want in [
        "X-Added: lua",
        "X-Many: 1",
        "X-Many: 2",
        "X-Config: from-config",
        "X-Both: config+lua",
        "User-Agent: tessera-lua",
    ] {
        assert!(has(want), "{want} not in {got:?}");
    }
    assert!(!has("X-Remove-Me: please"), "{got:?}");
    assert!(!has("User-Agent: curl"), "{got:?}");
    assert!(has("X-Seen: nil lua"), "{got:?}");
    // The script's header_filter still sees the response.
    assert_eq!(r.header("x-filtered"), Some("yes"));
}

#[test]
fn path_and_query_set_in_access_reach_the_origin_and_the_files() {
    let (_site, server) = edits_site();
    let r = ask(&server, "/app/path?old=1");
    let got = lines(&r);
    assert_eq!(got[0], "/app/new%20place?a=1%202");
    assert!(
        got.iter()
            .any(|l| l == "x-seen: /app/new%20place a=1%202 /app/new%20place?a=1%202"),
        "{got:?}"
    );
    assert_eq!(
        lines(&ask(&server, "/app/query?z=9"))[0],
        "/app/query?x=1&y=%20"
    );
    assert_eq!(lines(&ask(&server, "/app/noquery?z=9"))[0], "/app/noquery");
    // A path that climbs out of the root is refused, as the same request line would be.
    assert_eq!(ask(&server, "/app/escape").status, 400);
    // The request is routed again on its new path: to the static files...
    let r = ask(&server, "/files/renamed");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"hello world\n");
    // ...where no mount's filter is (the one it left does not see its response).
    assert_eq!(r.header("x-filtered"), None);
    let r = ask(&server, "/app/to-file");
    assert_eq!(r.body, b"hello world\n");
}

#[test]
fn a_new_path_is_routed_again_with_the_edits_made_before_and_a_loop_is_a_500() {
    let (_site, server) = edits_site();
    // From a files mount to the proxy route: its filter runs, its origin gets the request
    // with the field set before the move and the configuration's fields of the new route.
    let r = ask(&server, "/files/to-app");
    let got = lines(&r);
    assert_eq!(got[0], "/app/landed");
    for want in ["x-before: kept", "x-config: from-config"] {
        assert!(got.iter().any(|l| l == want), "{want} not in {got:?}");
    }
    assert_eq!(r.header("x-filtered"), Some("yes"));
    // Two paths that send the request to each other: answered 500, as nginx answers a
    // rewrite cycle, and the server goes on.
    assert_eq!(ask(&server, "/app/loop").status, 500);
    assert_eq!(ask(&server, "/hello.txt").status, 200);
}

#[test]
fn fields_that_frame_the_body_and_broken_values_are_refused() {
    let (_site, server) = edits_site();
    let r = ask(&server, "/app/framing");
    let body = String::from_utf8_lossy(&r.body).to_string();
    assert!(
        body.contains("Content-Length frames the request body and cannot be changed"),
        "{body}"
    );
    assert!(body.contains("invalid header value"), "{body}");
}
