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

const CAPTURE: &str = r#"
local function show(r, name, res)
  r:say(name, " ", res.status, " ", tostring(res.truncated), " ",
    tostring(res.headers["content-type"]), " [", res.body, "]")
end

return {
  access = function(r)
    if r:path() == "/lua/slow-gate" then
      -- An access phase that waits, in a subrequest.
      tessera.sleep(0.05)
      r:set_req_header("X-Slept", "yes")
    elseif r:path() == "/lua/gated" then
      -- Deciding in access with a subrequest, as an auth_request would.
      local res = tessera.location.capture("/lua/inner", { args = "n=gate" })
      if res.status ~= 200 then r:exit(403) end
      r:set_req_header("X-Gate", res.body)
    end
  end,
  header_filter = function(r)
    if r:path() == "/lua/in-filter" then
      local ok, err = pcall(tessera.location.capture, "/hello.txt")
      r:set_header("X-Captured", tostring(ok) .. " " ..
        tostring((tostring(err):match("only in a request's access or content phase"))))
    end
  end,
  content = function(r)
    local p = r:path()
    if p == "/lua/in-filter" then
      r:say("filtered")
    elseif p == "/lua/slow-gate" then
      r:write("slept=", r:header("x-slept"))
    elseif p == "/lua/gated" then
      r:say("gate: ", r:header("x-gate"))
    elseif p == "/lua/spin" then
      tessera.location.capture("/lua/inner")
      while true do end
    elseif p == "/lua/all" then
      show(r, "file", tessera.location.capture("/hello.txt"))
      show(r, "proxy", tessera.location.capture("/app/x?a=1", { args = { b = "2 3" } }))
      show(r, "lua", tessera.location.capture("/lua/inner", { args = "n=7" }))
      show(r, "missing", tessera.location.capture("/nothing-here.txt"))
      show(r, "waited", tessera.location.capture("/lua/slow-gate"))
    elseif p == "/lua/inner" then
      r:set_header("Content-Type", "text/x-inner")
      r:set_header("X-Inner", "1")
      r:write("inner n=", r:arg("n"), " ", r:method(), " body=", r:body(),
        " x-parent=", tostring(r:header("x-parent")),
        " x-set=", tostring(r:header("x-set")),
        " ae=", tostring(r:header("accept-encoding")))
    elseif p == "/lua/post" then
      local res = tessera.location.capture("/lua/inner", {
        method = "POST", body = "payload", headers = { ["X-Set"] = "yes", ["X-Parent"] = false },
      })
      show(r, "post", res)
      r:say("x-inner ", tostring(res.headers["x-inner"]))
      local res = tessera.location.capture("/app/echo", {
        method = "PUT", body = "up", headers = { ["X-Set"] = "to-origin" } })
      r:say(res.body)
    elseif p == "/lua/self" then
      -- Captures itself: an error after a number of levels, never a hang.
      local ok, res = pcall(tessera.location.capture, "/lua/self")
      if not ok then
        r:say("stopped: ", tostring(res))
        return
      end
      r:say(res.status, " ", res.body)
    elseif p == "/lua/fan" then
      -- Captures itself three times at each level: the group's budget ends it.
      local t = {}
      for i = 1, 3 do t[i] = { "/lua/fan" } end
      local ok, res = pcall(tessera.location.capture_multi, t)
      if not ok then
        r:say("stopped: ", tostring(res))
        return
      end
      for _, one in ipairs(res) do r:say(one.status, " ", one.body) end
    elseif p == "/lua/in-timer" then
      local done = false
      tessera.timer.at(0, function()
        local ok, err = pcall(tessera.location.capture, "/hello.txt")
        shared_result = tostring(ok) .. " " .. tostring(err)
        done = true
      end)
      while not done do tessera.sleep(0.01) end
      r:say(shared_result)
    end
  end,
}
"#;

fn capture_site() -> (Site, Server) {
    let site = Site::new();
    std::fs::write(site.dir.path().join("capture.lua"), CAPTURE).unwrap();
    let d = site.dir.path().display();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        r#"
access_log = {log:?}
access_log_format = "%U %>s"

[[upstream]]
name = "app"
addresses = ["{up}"]

[[route]]
prefix = "/app"
upstream = "app"

[[script]]
prefix = "/lua"
path = "{d}/capture.lua"
time_limit = 0.5
"#,
        up = crate::harness::echo_origin(),
    ));
    (site, server)
}

/// The access log's lines once it has `n` of them (the writer flushes within a second).
fn logged(site: &Site, n: usize) -> String {
    let log = site.dir.path().join("access.log");
    let started = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= n || started.elapsed() > std::time::Duration::from_secs(10) {
            return text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn capture_answers_a_file_a_proxied_route_a_script_and_a_404_through_the_routes() {
    let (_site, server) = capture_site();
    let r = ask(
        &server,
        "/lua/all",
        "X-Parent: p1\r\nAccept-Encoding: gzip\r\nIf-None-Match: *\r\n",
    );
    assert_eq!(r.status, 200, "{}", body(&r));
    let got = body(&r);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(
        lines[0],
        "file 200 false text/plain; charset=utf-8 [hello world"
    );
    // The proxied route: the origin echoes the target and the fields it got.
    assert!(
        lines[2].starts_with("proxy 200 false nil [/app/x?a=1&b=2%203"),
        "{got}"
    );
    assert!(
        got.contains("X-Parent: p1") || got.contains("x-parent: p1"),
        "{got}"
    );
    // The script's own route, with the parent's fields but not its Accept-Encoding.
    assert!(
        got.contains(
            "lua 200 false text/x-inner [inner n=7 GET body= x-parent=p1 x-set=nil ae=nil]"
        ),
        "{got}"
    );
    assert!(
        got.contains("missing 404 false text/html; charset=utf-8 [<html>"),
        "{got}"
    );
    assert!(
        got.contains("waited 200 false text/plain [slept=yes]"),
        "{got}"
    );
    // The subrequests are not in the access log: one line, the request's.
    assert_eq!(server.get("/hello.txt").status, 200);
    let lines = logged(&_site, 2);
    assert_eq!(lines, "/lua/all 200\n/hello.txt 200\n");
}

#[test]
fn access_decides_with_a_subrequest() {
    let (_site, server) = capture_site();
    let r = ask(&server, "/lua/gated", "X-Parent: p2\r\n");
    assert_eq!(r.status, 200, "{}", body(&r));
    assert_eq!(
        body(&r),
        "gate: inner n=gate GET body= x-parent=p2 x-set=nil ae=nil\n"
    );
}

#[test]
fn a_phase_that_runs_on_after_a_scripts_subrequest_is_still_stopped_by_its_time_limit() {
    let (_site, server) = capture_site();
    let r = ask(&server, "/lua/spin", "");
    assert_eq!(r.status, 500, "{}", body(&r));
    assert_eq!(server.get("/hello.txt").status, 200);
}

#[test]
fn capture_passes_method_body_and_headers() {
    let (_site, server) = capture_site();
    let r = ask(&server, "/lua/post", "X-Parent: p1\r\n");
    assert_eq!(r.status, 200, "{}", body(&r));
    let got = body(&r);
    assert!(
        got.contains("post 200 false text/x-inner [inner n= POST body=payload x-parent=nil x-set=yes ae=nil]"),
        "{got}"
    );
    assert!(got.contains("x-inner 1\n"), "{got}");
    // The origin gets the method, the body's length and the fields.
    let lower = got.to_ascii_lowercase();
    assert!(lower.contains("/app/echo\n"), "{got}");
    assert!(lower.contains("content-length: 2"), "{got}");
    assert!(lower.contains("x-set: to-origin"), "{got}");
}

#[test]
fn a_location_that_captures_itself_stops_at_the_depth_limit() {
    let (_site, server) = capture_site();
    let r = ask(&server, "/lua/self", "");
    assert_eq!(r.status, 200, "{}", body(&r));
    let got = body(&r);
    // Each level answers with what the level below it said; the deepest is refused.
    assert!(got.contains("stopped: "), "{got}");
    assert!(got.contains("nested more than 16 deep"), "{got}");
    assert_eq!(got.matches("200 ").count(), 16, "{got}");
    // The server goes on serving.
    assert_eq!(server.get("/hello.txt").status, 200);
}

#[test]
fn a_location_that_captures_itself_several_times_at_each_level_ends_within_its_budget() {
    let (_site, server) = capture_site();
    let started = std::time::Instant::now();
    let r = ask(&server, "/lua/fan", "");
    // 3 a level, 16 levels, would be 43 million subrequests: one group makes 1000.
    assert_eq!(r.status, 200, "{}", body(&r));
    let got = body(&r);
    assert!(got.contains("more than 1000 subrequests"), "{got}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(server.get("/hello.txt").status, 200);
}

#[test]
fn a_subrequest_holds_no_slot_of_its_makers_connection_limit() {
    let site = Site::new();
    site.write("hello.txt", b"hello\n");
    std::fs::write(
        site.dir.path().join("c.lua"),
        r#"return { content = function(r)
          local res = tessera.location.capture("/hello.txt")
          r:write(res.status, " ", res.body)
        end }"#,
    )
    .unwrap();
    let server = site.serve_with(&format!(
        "[[route]]\nprefix = \"/\"\nroot = \"{}\"\n\
         limit_conn = {{ key = \"$remote_addr\", max = 1 }}\n\
         [[script]]\nprefix = \"/lua\"\npath = \"{}/c.lua\"\n",
        site.root().display(),
        site.dir.path().display()
    ));
    // The maker holds the client's one slot; its subrequest is not refused for it.
    let r = server.get("/lua/c");
    assert_eq!(r.status, 200);
    assert_eq!(String::from_utf8_lossy(&r.body), "200 hello\n");
}

#[test]
fn capture_is_refused_outside_a_request() {
    let (_site, server) = capture_site();
    let r = ask(&server, "/lua/in-timer", "");
    assert_eq!(r.status, 200, "{}", body(&r));
    let got = body(&r);
    assert!(got.contains("false "), "{got}");
    assert!(
        got.contains("only in a request's access or content phase"),
        "{got}"
    );
    // Nor in a phase that cannot wait.
    let r = ask(&server, "/lua/in-filter", "");
    assert_eq!(r.status, 200, "{}", body(&r));
    assert_eq!(
        r.header("x-captured"),
        Some("false only in a request's access or content phase")
    );
}

/// An origin that answers each request after about a second, each connection on a
/// thread of its own: its body is the target.
fn slow_origin() -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    crate::harness::thread_per_connection(listener, |mut stream| {
        let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
        if let Some((target, _)) = crate::harness::read_request_head(&mut reader) {
            std::thread::sleep(std::time::Duration::from_secs(1));
            let body = target;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

const MULTI: &str = r#"
return {
  content = function(r)
    local started = tessera.now()
    local a, b, c = tessera.location.capture_multi({
      { "/slow/a" },
      { "/slow/b", { args = "x=1" } },
      { "/slow/c" },
    })
    r:say(a.status, " ", a.body, " ", b.status, " ", b.body, " ", c.status, " ", c.body)
    r:say(string.format("took %.1f", tessera.now() - started))
  end,
}
"#;

#[test]
fn capture_multi_runs_its_subrequests_side_by_side() {
    let site = Site::new();
    std::fs::write(site.dir.path().join("multi.lua"), MULTI).unwrap();
    let d = site.dir.path().display();
    let server = site.serve_with(&format!(
        r#"
[[upstream]]
name = "slow"
addresses = ["{up}"]

[[route]]
prefix = "/slow"
upstream = "slow"

[[script]]
prefix = "/multi"
path = "{d}/multi.lua"
"#,
        up = slow_origin(),
    ));
    let started = std::time::Instant::now();
    let r = ask(&server, "/multi", "");
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{}", body(&r));
    let got = body(&r);
    assert!(
        got.starts_with("200 /slow/a 200 /slow/b?x=1 200 /slow/c\n"),
        "{got}"
    );
    // One after another they would take three seconds; side by side, about one (the
    // order of magnitude is what is checked, not the timing).
    assert!(took < std::time::Duration::from_secs(2), "{took:?}: {got}");
    assert!(
        took >= std::time::Duration::from_millis(900),
        "{took:?}: {got}"
    );
}

const WRITES: &str = r#"
return {
  access = function(r)
    -- nginx: `set $user ""; access_by_lua_block { ngx.var.user = ... }`, then `$user`
    -- in the log.
    r:set_req_header("X-Before", r:var("user") == "" and "empty" or "set")
    r.var.user = r:header("x-user") or "anonymous"
    r.var.tries = 3
    if r:path() == "/app/args" then
      r.var.args = "rewritten=1&b=%20"
    end
    local ok, err = pcall(function() r.var.nope = "x" end)
    r:set_req_header("X-Nope", (tostring(err):match("variable `nope` is not declared[^\n]*")))
    ok, err = pcall(function() r.var.host = "x" end)
    r:set_req_header("X-Host", (tostring(err):match("variable `host` cannot be written")))
  end,
  header_filter = function(r)
    -- What access wrote is there in the later phases.
    r:set_header("X-User-Seen", r.var.user .. " " .. r:var("tries"))
  end,
}
"#;

#[test]
fn a_written_variable_is_read_back_later_and_logged_and_args_reach_the_origin() {
    let site = Site::new();
    std::fs::write(site.dir.path().join("writes.lua"), WRITES).unwrap();
    let d = site.dir.path().display();
    let log = site.dir.path().join("access.log");
    let server = site.serve_with(&format!(
        r#"
access_log = {log:?}
access_log_format = "%U %{{var_user}}x %{{var_tries}}x %{{var_other}}x"

[[upstream]]
name = "app"
addresses = ["{up}"]

[[route]]
prefix = "/app"
upstream = "app"

[[script]]
prefix = "/app"
path = "{d}/writes.lua"
vars = ["user", "tries"]
"#,
        up = crate::harness::echo_origin(),
    ));
    let r = ask(&server, "/app/args?old=1", "X-User: ada\r\n");
    assert_eq!(r.status, 200, "{}", body(&r));
    let got = body(&r).to_ascii_lowercase();
    // The origin gets the query the script wrote, and what access read and refused.
    assert!(got.starts_with("/app/args?rewritten=1&b=%20\n"), "{got}");
    assert!(got.contains("x-before: empty"), "{got}");
    assert!(
        got.contains("x-nope: variable `nope` is not declared: add it to the script's `vars`"),
        "{got}"
    );
    assert!(
        got.contains("x-host: variable `host` cannot be written"),
        "{got}"
    );
    assert_eq!(r.header("x-user-seen"), Some("ada 3"));
    let r = ask(&server, "/app/plain", "");
    assert_eq!(r.status, 200, "{}", body(&r));
    assert_eq!(r.header("x-user-seen"), Some("anonymous 3"));
    // The access log writes them.
    let started = std::time::Instant::now();
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.lines().count() >= 2 || started.elapsed() > std::time::Duration::from_secs(10) {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(lines.contains("/app/args ada 3 -\n"), "{lines}");
    assert!(lines.contains("/app/plain anonymous 3 -\n"), "{lines}");
}

#[test]
fn a_vars_entry_that_names_a_variable_of_tesseras_is_refused() {
    let site = Site::new();
    std::fs::write(site.dir.path().join("writes.lua"), WRITES).unwrap();
    let config = site.dir.path().join("tessera.toml");
    std::fs::write(
        &config,
        format!(
            "[[script]]\nprefix = \"/app\"\npath = \"{}/writes.lua\"\nvars = [\"host\"]\n",
            site.dir.path().display()
        ),
    )
    .unwrap();
    let (code, stderr) = crate::harness::check_config_output(&config);
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("`vars` entry `host`"), "{stderr}");
}

#[test]
fn the_captures_of_a_scripts_regex_are_variables() {
    let site = Site::new();
    let script = r#"
return {
  content = function(r)
    local ok, err = pcall(r.var, r, "3")
    r:say(r:var("id"), " ", r.var[1], " ", r:var("2"), " ", tostring(ok),
      " ", tostring((tostring(err):match("unknown variable `3`"))))
  end,
}
"#;
    std::fs::write(site.dir.path().join("users.lua"), script).unwrap();
    let d = site.dir.path().display();
    let server = site.serve_with(&format!(
        r#"
[[host]]
names = ["example.test"]

[[host.script]]
regex = "^/USERS/(?<id>[0-9]+)/(.*)$"
case_insensitive = true
path = "{d}/users.lua"
"#
    ));
    let r = ask(&server, "/users/42/a%20b", "");
    assert_eq!(r.status, 200, "{}", body(&r));
    assert_eq!(body(&r), "42 42 a b false unknown variable `3`\n");
}
