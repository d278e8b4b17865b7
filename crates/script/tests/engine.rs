//! The engine on its own: phases, limits and shared dictionaries, without a server.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use script::{Content, Engine, Outcome, RequestHead, ScriptConfig, Scripts, SharedDictConfig};

fn scripts(dir: &tempfile::TempDir, source: &str, time_limit: f64) -> Arc<Scripts> {
    let (configs, dicts) = configs(dir, source, time_limit);
    Scripts::new(configs, &dicts).unwrap()
}

/// One script at `/s` and a shared dictionary `counts`.
fn configs(
    dir: &tempfile::TempDir,
    source: &str,
    time_limit: f64,
) -> (Vec<ScriptConfig>, Vec<SharedDictConfig>) {
    let path = dir.path().join("s.lua");
    std::fs::write(&path, source).unwrap();
    (
        vec![ScriptConfig {
            prefix: "/s".into(),
            path,
            time_limit,
            memory_limit: 16 << 20,
            ..ScriptConfig::default()
        }],
        vec![SharedDictConfig {
            name: "counts".into(),
            max_entries: 100,
        }],
    )
}

fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    tokio::task::LocalSet::new().block_on(&rt, f)
}

/// Runs `content` for `target`; returns the outcome, status and body.
async fn content(engine: &Rc<Engine>, target: &str) -> (Outcome, u16, Vec<u8>) {
    let m = engine.mount(target.as_bytes()).expect("mounted");
    let client: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    let headers = [(&b"Host"[..], &b"example.test"[..])];
    let call = engine.begin(
        m,
        RequestHead {
            method: b"GET",
            target: target.as_bytes(),
            headers: headers.iter().copied(),
            client,
            peer: client,
            proxy_tlvs: &[],
        },
    );
    let outcome = match engine.content(&call) {
        Content::Done(o) => o,
        Content::Pending(p) => p.await,
    };
    let (status, body) = engine
        .context(&call, |c| (c.status(), c.body_out().to_vec()))
        .unwrap();
    engine.finish(call);
    (outcome, status, body)
}

#[test]
fn content_reads_the_request_lazily_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let s = scripts(
        &dir,
        r#"
        local M = {}
        function M.content(r)
          r:set_header("X-Path", r:path())
          r:write(r:method(), " ", r:arg("name") or "?", " ", r:header("host"))
          return "!"
        end
        return M
        "#,
        1.0,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        let (outcome, status, body) = content(&engine, "/s/x?name=a%20b").await;
        assert_eq!(outcome, Outcome::Respond);
        assert_eq!(status, 200);
        assert_eq!(body, b"GET a b example.test!");
    });
}

#[test]
fn jit_compiled_endless_loop_is_stopped_and_the_state_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    // The loop runs long enough to be compiled before the watchdog fires.
    let s = scripts(
        &dir,
        r#"
        local M = {}
        function M.content(r)
          if r:arg("spin") then
            local x = 0
            while true do x = x + 1 end
          end
          return "ok"
        end
        return M
        "#,
        0.2,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        for _ in 0..2 {
            let started = Instant::now();
            let (outcome, _, _) = content(&engine, "/s?spin=1").await;
            assert_eq!(outcome, Outcome::Failed);
            assert!(started.elapsed() < Duration::from_secs(10));
            let (outcome, status, body) = content(&engine, "/s").await;
            assert_eq!(
                (outcome, status, &body[..]),
                (Outcome::Respond, 200, &b"ok"[..])
            );
        }
    });
}

#[test]
fn memory_limit_fails_the_call_not_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let s = scripts(
        &dir,
        r#"
        local M = {}
        function M.content(r)
          if r:arg("hog") then
            local t = {}
            for i = 1, 1e8 do t[i] = "x" .. i end
          end
          return "ok"
        end
        return M
        "#,
        30.0,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        let (outcome, _, _) = content(&engine, "/s?hog=1").await;
        assert_eq!(outcome, Outcome::Failed);
        let (outcome, _, body) = content(&engine, "/s").await;
        assert_eq!((outcome, &body[..]), (Outcome::Respond, &b"ok"[..]));
    });
}

#[test]
fn pathological_pattern_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = scripts(
        &dir,
        r#"
        local M = {}
        function M.content(r)
          local s = string.rep("a", 5000)
          if r:arg("evil") then
            return tostring(string.find(s, string.rep("a*", 30) .. "b"))
          end
          return tostring(string.find(s, "a+$"))
        end
        return M
        "#,
        30.0,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        let started = Instant::now();
        let (outcome, _, _) = content(&engine, "/s?evil=1").await;
        assert_eq!(outcome, Outcome::Failed);
        assert!(started.elapsed() < Duration::from_secs(5));
        let (outcome, _, body) = content(&engine, "/s").await;
        assert_eq!((outcome, &body[..]), (Outcome::Respond, &b"1"[..]));
    });
}

#[test]
fn exit_and_redirect_end_the_phase_with_their_response() {
    let dir = tempfile::tempdir().unwrap();
    let s = scripts(
        &dir,
        r#"
        local M = {}
        function M.content(r)
          if r:arg("go") then r:redirect("/elsewhere", 301) end
          r:exit(403, "no")
          error("not reached")
        end
        return M
        "#,
        1.0,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        let (outcome, status, body) = content(&engine, "/s").await;
        assert_eq!(
            (outcome, status, &body[..]),
            (Outcome::Respond, 403, &b"no"[..])
        );
        let (outcome, status, _) = content(&engine, "/s?go=1").await;
        assert_eq!((outcome, status), (Outcome::Respond, 301));
    });
}

#[test]
fn shared_dictionary_is_seen_by_every_engine() {
    let dir = tempfile::tempdir().unwrap();
    let s = scripts(
        &dir,
        r#"
        return { content = function(r) return tostring(shared.counts:incr("hits", 1)) end }
        "#,
        1.0,
    );
    let s2 = s.clone();
    run(async move {
        let a = Engine::new(s, 0, None);
        assert_eq!(content(&a, "/s").await.2, b"1");
        assert_eq!(content(&a, "/s").await.2, b"2");
    });
    // Another worker thread, another state, the same dictionary.
    std::thread::spawn(move || {
        run(async move {
            let b = Engine::new(s2, 1, None);
            assert_eq!(content(&b, "/s").await.2, b"3");
        })
    })
    .join()
    .unwrap();
}

#[test]
fn timer_runs_later_in_the_event_loop() {
    let dir = tempfile::tempdir().unwrap();
    let s = scripts(
        &dir,
        r#"
        return { content = function(r)
          if r:arg("read") then return tostring(shared.counts:get("fired")) end
          tessera.timer.at(0.01, function(v) shared.counts:set("fired", v) end, "yes")
          return "set"
        end }
        "#,
        1.0,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        assert_eq!(content(&engine, "/s").await.2, b"set");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if content(&engine, "/s?read=1").await.2 == b"yes" {
                break;
            }
            assert!(Instant::now() < deadline, "the timer never ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

#[test]
fn rate_limit_example_lets_requests_through_when_the_dictionary_is_full() {
    let dir = tempfile::tempdir().unwrap();
    // The access example of docs/lua.md, as content (the dictionary holds 100 keys).
    let s = scripts(
        &dir,
        r#"
        return { content = function(r)
          local ip = r:arg("ip")
          local n = shared.counts:incr(ip, 1, 0, 60)
          if n and n > 600 then r:exit(429, "slow down\n") end
          return tostring(n)
        end }
        "#,
        1.0,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        // The limit is the dictionary's: all 100 keys fit, whatever shards they hash to.
        for i in 0..100 {
            let (outcome, _, body) = content(&engine, &format!("/s?ip=10.0.0.{i}")).await;
            assert_eq!(
                (outcome, &body[..]),
                (Outcome::Respond, &b"1"[..]),
                "key {i}"
            );
        }
        let (outcome, status, body) = content(&engine, "/s?ip=10.0.1.1").await;
        assert_eq!(
            (outcome, status, &body[..]),
            (Outcome::Respond, 200, &b"nil"[..])
        );
    });
}

#[test]
fn a_reload_keeps_the_shared_dictionaries_and_drops_the_old_engines_timers() {
    let dir = tempfile::tempdir().unwrap();
    // Each load's init counts itself in the shared dictionary and sets a timer for 1 s
    // that records how many loads there had been when it fired. The second version's
    // timer, due later, takes one more hop before it records, so by then the first
    // version's timer has had its turn.
    let source = r#"
        local M = {}
        function M.init()
          local id = shared.counts:incr("inits", 1)
          tessera.timer.at(1.0, function()
            local fired = function() shared.counts:set("fired" .. id, shared.counts:get("inits")) end
            if id == 1 then fired() else tessera.timer.at(0, fired) end
          end)
        end
        function M.content(r) return tostring(shared.counts:get(r:arg("k"))) end
        return M
        "#;
    let s = scripts(&dir, source, 1.0);
    run(async move {
        let engine = Engine::new(s.clone(), 0, None);
        engine.spawn_background();
        assert_eq!(content(&engine, "/s?k=inits").await.2, b"1");
        // A reload: the scripts built anew from the same configuration, keeping the
        // dictionary; the old engine goes once nothing holds it.
        let (configs, dicts) = configs(&dir, source, 1.0);
        let reloaded = Scripts::replacing(configs, &dicts, Some(&s)).unwrap();
        drop(engine);
        let engine = Engine::new(reloaded, 0, None);
        engine.spawn_background();
        assert_eq!(content(&engine, "/s?k=inits").await.2, b"2");
        let deadline = Instant::now() + Duration::from_secs(30);
        while content(&engine, "/s?k=fired2").await.2 == b"nil" {
            assert!(
                Instant::now() < deadline,
                "the new engine's timer never ran"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(content(&engine, "/s?k=fired2").await.2, b"2");
        // The first engine's timer never runs once that engine is gone.
        assert_eq!(content(&engine, "/s?k=fired1").await.2, b"nil");
    });
}

#[test]
fn documented_trim_works_on_long_subjects_where_the_idiom_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = scripts(
        &dir,
        r#"
        -- docs/lua.md, "Patterns"
        local function trim(s)
          local first = s:find("%S")
          if not first then return "" end
          return s:sub(first, #s + 1 - s:reverse():find("%S"))
        end
        return { content = function(r)
          local s = "  a" .. string.rep(" ", 100000) .. "b \t\n"
          if r:arg("idiom") then return s:match("^%s*(.-)%s*$") end
          local t = trim(s)
          return #t .. " " .. t:sub(1, 1) .. t:sub(-1) .. " [" .. trim(" \t ") .. "]"
        end }
        "#,
        10.0,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        let started = Instant::now();
        let (outcome, _, body) = content(&engine, "/s").await;
        assert_eq!(
            (outcome, &body[..]),
            (Outcome::Respond, &b"100002 ab []"[..])
        );
        let (outcome, _, _) = content(&engine, "/s?idiom=1").await;
        assert_eq!(outcome, Outcome::Failed);
        assert!(started.elapsed() < Duration::from_secs(5));
    });
}

#[test]
fn scripts_cannot_stop_block_or_crash_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let s = scripts(
        &dir,
        r#"
        return { content = function(r)
          if r:arg("exit") then os.exit(3) end
          if r:arg("stdin") then return dofile() end
          if r:arg("bytecode") then return tostring(load(string.dump(function() end))) end
          local gone = {}
          for _, name in ipairs{ "exit", "execute", "remove", "rename", "tmpname", "setlocale" } do
            gone[#gone + 1] = type(os[name])
          end
          gone[#gone + 1] = type(io)
          gone[#gone + 1] = type(debug)
          gone[#gone + 1] = tostring(pcall(package.loadlib, "libc.so.6", "exit"))
          local kept = type(os.time) .. type(os.clock) .. type(os.date) .. type(require)
          return table.concat(gone, ",") .. " " .. kept .. " " .. load("return 1 + 1")()
        end }
        "#,
        1.0,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        for arg in ["exit", "stdin"] {
            let (outcome, _, _) = content(&engine, &format!("/s?{arg}=1")).await;
            assert_eq!(outcome, Outcome::Failed, "{arg}");
        }
        // Text chunks load; bytecode does not (load returns nil and a message).
        let (_, _, body) = content(&engine, "/s?bytecode=1").await;
        assert_eq!(body, b"nil");
        let (outcome, _, body) = content(&engine, "/s").await;
        assert_eq!(outcome, Outcome::Respond);
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "nil,nil,nil,nil,nil,nil,nil,nil,false functionfunctionfunctionfunction 2"
        );
    });
}

#[test]
fn a_receive_dropped_while_it_waits_closes_its_connection_and_frees_the_socket() {
    // A server that reads one line and answers nothing: the script's receive waits.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        use std::io::{BufRead, BufReader, Read};
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        // What follows is the end of the stream, once the waiting call is dropped.
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        (line, rest.len())
    });
    let dir = tempfile::tempdir().unwrap();
    let s = scripts(
        &dir,
        &format!(
            r#"
        return {{ content = function(r)
          if r:arg("again") then
            local data, err = held:receive()
            return tostring(data) .. "|" .. tostring(err)
          end
          held = tessera.socket.tcp()
          held:settimeouts(5000, 5000, 5000)
          assert(held:connect("127.0.0.1", {port}))
          held:send("hello\n")
          return held:receive()
        end }}
        "#
        ),
        1.0,
    );
    run(async {
        let engine = Engine::new(s, 0, None);
        let m = engine.mount(b"/s").unwrap();
        let client: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let call = engine.begin(
            m,
            RequestHead {
                method: b"GET",
                target: b"/s",
                headers: std::iter::empty(),
                client,
                peer: client,
                proxy_tlvs: &[],
            },
        );
        let Content::Pending(waiting) = engine.content(&call) else {
            panic!("the receive should wait");
        };
        // The request ends while the receive waits: its call is dropped.
        assert!(
            tokio::time::timeout(Duration::from_millis(300), waiting)
                .await
                .is_err(),
            "the receive should still wait"
        );
        engine.finish(call);
        // The socket is neither busy nor connected: the next call on it says so.
        let (_, _, body) = content(&engine, "/s?again=1").await;
        assert_eq!(String::from_utf8(body).unwrap(), "nil|closed");
    });
    let (line, rest) = server.join().unwrap();
    assert_eq!((line.as_str(), rest), ("hello\n", 0));
}
