//! lua-resty-redis, unmodified (tests/fixtures/lua-resty-redis, v0.33), through
//! `tessera.ngx_compat` and `[[script]] package_path`, against a real redis-server:
//! commands, a pipeline, and the keep-alive pool seen from Redis' side (`CLIENT LIST`)
//! and from the library's (`get_reused_times`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

use crate::cache::Redis;
use crate::harness::{eventually, Server, Site};

const SCRIPT: &str = r#"
ngx = tessera.ngx_compat
local redis = require "resty.redis"

local M = {}

function M.content(r)
  local red = redis:new()
  red:set_timeouts(2000, 2000, 2000)
  local ok, err = red:connect("127.0.0.1", tonumber(r:arg("port")), { pool_size = 3 })
  if not ok then r:exit(502, "connect: " .. tostring(err)) end
  local p, out = r:path(), nil
  if p == "/r/set" then
    out = red:set(r:arg("k"), r:arg("v"))
  elseif p == "/r/get" then
    local v = red:get(r:arg("k"))
    out = v == ngx.null and "null" or v
  elseif p == "/r/pipeline" then
    red:init_pipeline()
    red:set("piped", "yes")
    red:incr("count")
    red:get("piped")
    red:get("missing")
    local res, perr = red:commit_pipeline()
    if not res then r:exit(500, "pipeline: " .. perr) end
    out = tostring(res[1]) .. "," .. tostring(res[2]) .. "," .. tostring(res[3]) .. "," ..
      tostring(res[4] == ngx.null)
  elseif p == "/r/visit" then
    red:incr("visits")
    out = tostring(red:get_reused_times())
  elseif p == "/r/slow" then
    -- Holds its connection a while, so that several requests hold one each.
    red:blpop("nothing-here", 0.2)
    out = tostring(red:get_reused_times())
  end
  local kept, kerr = red:set_keepalive(10000, 3)
  if not kept then r:exit(500, "keepalive: " .. tostring(kerr)) end
  return out
end

return M
"#;

fn serve(site: &Site) -> Server {
    let script = site.dir.path().join("redis.lua");
    std::fs::write(&script, SCRIPT).unwrap();
    let lib = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/lua-resty-redis/lib"
    );
    site.serve_with(&format!(
        "[[script]]\nprefix = \"/r\"\npath = \"{}\"\npackage_path = \"{lib}/?.lua\"\n",
        script.display()
    ))
}

fn body(server: &Server, path: &str) -> String {
    let r = server.get(path);
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(r.status, 200, "{path}: {text}");
    text
}

/// The clients Redis has, but the one asking: `CLIENT LIST`'s lines.
fn clients(redis: &Redis) -> Vec<String> {
    let mut s = TcpStream::connect(("127.0.0.1", redis.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"*2\r\n$6\r\nCLIENT\r\n$4\r\nLIST\r\n")
        .unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    // A bulk string: `$LEN\r\n`, LEN bytes, CRLF.
    loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "redis closed");
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply).into_owned();
        if let Some((len, rest)) = text.strip_prefix('$').and_then(|t| t.split_once("\r\n")) {
            let len: usize = len.parse().unwrap();
            if rest.len() >= len + 2 {
                return rest[..len]
                    .lines()
                    .filter(|l| !l.contains("cmd=client|list"))
                    .map(str::to_string)
                    .collect();
            }
        }
    }
}

#[test]
fn lua_resty_redis_sets_gets_and_pipelines_through_the_shim() {
    let redis = Redis::start();
    let site = Site::new();
    let server = serve(&site);
    let port = redis.port();
    assert_eq!(
        body(&server, &format!("/r/set?port={port}&k=greeting&v=hello")),
        "OK"
    );
    assert_eq!(
        body(&server, &format!("/r/get?port={port}&k=greeting")),
        "hello"
    );
    assert_eq!(redis.command(&["GET", "greeting"]).as_deref(), Some("$5"));
    assert_eq!(
        body(&server, &format!("/r/get?port={port}&k=absent")),
        "null"
    );
    assert_eq!(
        body(&server, &format!("/r/pipeline?port={port}")),
        "OK,1,yes,true"
    );
    assert_eq!(
        body(&server, &format!("/r/pipeline?port={port}")),
        "OK,2,yes,true"
    );
}

#[test]
fn lua_resty_redis_reuses_pooled_connections() {
    let redis = Redis::start();
    let site = Site::new();
    let server = serve(&site);
    let port = redis.port();
    // One at a time: the first request connects, the next 49 reuse its connection.
    for n in 0..50 {
        assert_eq!(
            body(&server, &format!("/r/visit?port={port}")),
            n.to_string()
        );
    }
    assert_eq!(redis.command(&["GET", "visits"]).as_deref(), Some("$2"));
    assert_eq!(clients(&redis).len(), 1, "{:?}", clients(&redis));
    // Six at once hold six connections; the pool keeps three of them afterwards.
    let handles: Vec<_> = (0..6)
        .map(|_| {
            let addr = server.addr;
            thread::spawn(move || {
                let mut s = TcpStream::connect(addr).unwrap();
                write!(
                    s,
                    "GET /r/slow?port={port} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                )
                .unwrap();
                let mut out = String::new();
                s.read_to_string(&mut out).unwrap();
                assert!(out.starts_with("HTTP/1.1 200"), "{out}");
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    eventually("the pool to keep three connections", || {
        clients(&redis).len() == 3
    });
    for _ in 0..20 {
        let reused: u32 = body(&server, &format!("/r/visit?port={port}"))
            .parse()
            .unwrap();
        assert!(reused >= 1);
    }
    assert!(clients(&redis).len() <= 3, "{:?}", clients(&redis));
}
