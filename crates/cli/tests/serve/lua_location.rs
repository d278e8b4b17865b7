//! The routing rules' variables read from Lua (`r:var`, `r.var.NAME`), and subrequests
//! (`tessera.location.capture`, `capture_multi`) through the real binary.

use std::io::Write;

use crate::harness::{Response, Server, Site};

fn ask(server: &Server, target: &str, fields: &str) -> Response {
    let mut s = server.connect();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: Example.TEST:8080\r\n{fields}Connection: close\r\n\r\n"
    )
    .unwrap();
    crate::harness::read_response(&mut s, false)
}

fn body(r: &Response) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

const VARS: &str = r#"
return {
  content = function(r)
    local names = { "host", "uri", "args", "query_string", "arg_id", "arg_none",
      "http_x_trace_id", "http_none", "cookie_session", "remote_addr", "scheme",
      "server_port", "request_method" }
    for _, name in ipairs(names) do
      r:say(name, "=", tostring(r:var(name)))
    end
    -- The field syntax reads the same.
    r:say("field=", r.var.arg_id, " ", r.var.host)
    -- An id, the same on every read of the request.
    local id = r:var("request_id")
    r:say("id=", #id, " ", tostring(id == r.var.request_id), " ", tostring(id:match("^[0-9a-f]+$") ~= nil))
    local ok, err = pcall(r.var, r, "no_such_thing")
    r:say("unknown=", tostring(ok), " ", tostring(err))
    ok, err = pcall(function() r.var.host = "x" end)
    r:say("write=", tostring(ok), " ", tostring(err))
  end,
}
"#;

#[test]
fn variables_of_the_routing_rules_are_read_from_lua() {
    let site = Site::new();
    std::fs::write(site.dir.path().join("vars.lua"), VARS).unwrap();
    let d = site.dir.path().display();
    let server = site.serve_with(&format!(
        r#"
[[script]]
prefix = "/vars"
path = "{d}/vars.lua"
"#
    ));
    let r = ask(
        &server,
        "/vars/a/../b%20c?id=4%202&x",
        "X-Trace-Id: t-1\r\nCookie: a=1; session=abc\r\n",
    );
    assert_eq!(r.status, 200, "{}", body(&r));
    let got = body(&r);
    for want in [
        "host=example.test\n",
        "uri=/vars/b c\n",
        "args=id=4%202&x\n",
        "query_string=id=4%202&x\n",
        "arg_id=4%202\n",
        "arg_none=nil\n",
        "http_x_trace_id=t-1\n",
        "http_none=nil\n",
        "cookie_session=abc\n",
        "remote_addr=127.0.0.1\n",
        "scheme=http\n",
        "server_port=8080\n",
        "request_method=GET\n",
        "field=4%202 example.test\n",
        "id=32 true true\n",
        "unknown=false ",
        "unknown variable `no_such_thing`",
        "write=false ",
        "variable `host` cannot be written",
    ] {
        assert!(got.contains(want), "{want:?} not in:\n{got}");
    }
}
