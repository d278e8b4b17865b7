//! What an upstream knows is the process's, not a worker's, and outlives a reload: the
//! retry budget bounds the retries of every worker together, and a SIGHUP keeps the
//! health of the peers it keeps (docs/upstreams.md).

use std::io::Write;
use std::time::{Duration, Instant};

use crate::harness::{eventually, read_response, stderr_has, Server, Site};
use crate::upstreams::{get, origins, quoted, Mode};

/// Lines of the server's log that contain `needle`.
fn lines_with(server: &Server, needle: &str) -> usize {
    let lines = server.stderr.lock().unwrap();
    lines.iter().filter(|l| l.contains(needle)).count()
}

#[test]
fn the_retry_budget_bounds_the_retries_of_all_workers_together() {
    let o = origins(&["reset", "good"]);
    *o[0].mode.lock().unwrap() = Mode::Reset;
    let site = Site::new();
    // No share of requests: the budget is its 10 retries at the start plus 10 a second,
    // for the process. Per worker, two workers would have had twice that.
    let config = site.dir.path().join("tessera.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:0\"]\nworkers = 2\n\n\
             [[upstream]]\naddresses = [{}]\nmax_fails = 0\nretry_budget = 0\n\n\
             [[route]]\nupstream = \"origin\"\n",
            quoted(&o)
        ),
    )
    .unwrap();
    let server = Server::start_args(&[
        "serve".into(),
        "--config".into(),
        config.display().to_string(),
    ]);
    let n = 200;
    let started = Instant::now();
    let mut ok = 0;
    // A connection per request: the kernel spreads them over both workers' listeners.
    for i in 0..n {
        let mut stream = server.connect();
        write!(
            stream,
            "GET /p?{i} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        if read_response(&mut stream, false).status == 200 {
            ok += 1;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    // Every request that met the resetting peer first and still got a 200 was retried.
    let first_to_reset = o[0].hits();
    let retried = ok - (n - first_to_reset);
    assert!(
        first_to_reset > 60,
        "{first_to_reset} of {n} met the resetting peer"
    );
    let most = 10 + (10.0 * seconds).ceil() as usize + 1;
    assert!(
        (10..=most).contains(&retried),
        "{retried} retries in {seconds:.2} s; the process's budget allows {most}"
    );
}

#[test]
fn a_reload_keeps_peer_health_and_the_checks_take_the_new_settings() {
    let o = origins(&["a", "b"]);
    let site = Site::new();
    let path = site.dir.path().join("tessera.toml");
    let config = |extra: &str, health: &str| {
        format!(
            "[[upstream]]\naddresses = [{}]\nfail_timeout = 60\n{health}\n\n\
             [[route]]\nupstream = \"origin\"\n\n{extra}",
            quoted(&o)
        )
    };
    let server = site.serve_with(&config("", ""));
    let mut conn = None;
    // b hangs up on every request: passive health takes it out (its GETs retried on a).
    *o[1].mode.lock().unwrap() = Mode::Reset;
    for i in 0..4 {
        assert_eq!(
            get(&server, &mut conn, &format!("/p?{i}")),
            (200, "a".into())
        );
    }
    // The harness reads the server's stderr on a thread of its own: the line may come a
    // moment after the response.
    eventually("b taken out, said once", || {
        lines_with(&server, "peer down (passive health)") == 1
    });
    *o[1].mode.lock().unwrap() = Mode::Answer;

    // An unrelated change: b stays out until its fail_timeout, said once.
    std::fs::write(&path, config("[[host]]\nnames = [\"c.test\"]\n", "")).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "generation=2"));
    let mut conn = None;
    for i in 0..30 {
        assert_eq!(
            get(&server, &mut conn, &format!("/q?{i}")),
            (200, "a".into())
        );
    }
    assert_eq!(lines_with(&server, "peer down (passive health)"), 1);
    assert_eq!(lines_with(&server, "peer up"), 0);

    // Active checks added, and b failing them: unhealthy.
    *o[1].mode.lock().unwrap() = Mode::Reset;
    let checks =
        |path: &str| format!("[upstream.health]\npath = \"{path}\"\ninterval = 0.2\ntimeout = 0.2");
    std::fs::write(&path, config("", &checks("/one"))).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the checks to find b unhealthy", || {
        stderr_has(&server, "peer unhealthy (active checks)")
    });
    // Their settings changed: the new checker asks for the new path, the old one stops,
    // and b's verdict stands without being said again.
    std::fs::write(&path, config("", &checks("/two"))).unwrap();
    server.signal(libc::SIGHUP);
    eventually("the reload", || stderr_has(&server, "generation=4"));
    let mut conn = None;
    assert_eq!(get(&server, &mut conn, "/r"), (200, "a".into()));
    eventually("checks of the new path", || o[0].hits_of("/two") >= 2);
    let old = o[0].hits_of("/one");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(o[0].hits_of("/one"), old, "the old checker stopped");
    assert_eq!(lines_with(&server, "peer unhealthy (active checks)"), 1);
    assert_eq!(get(&server, &mut conn, "/r"), (200, "a".into()));

    // b answers again: the new checker, going on from the kept verdict, brings it back.
    *o[1].mode.lock().unwrap() = Mode::Answer;
    eventually("the checks to bring b back", || {
        stderr_has(&server, "peer up: health checks pass")
    });
    eventually("b to get traffic again", || {
        get(&server, &mut conn, "/s").1 == "b"
    });
    assert_eq!(lines_with(&server, "peer up"), 1);
}
