//! Proves the steady-state request path allocates nothing: a keep-alive GET of a small
//! static file, served by the real server in this process, 10,000 times; and a new
//! connection per request, thousands of times.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts every allocation in the process (all threads: the worker and this client).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The counter is process-wide: the tests here take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn keep_alive_get_of_a_small_file_allocates_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    run(false, false);
    // With the access log on, too: lines are formatted into recycled buffers.
    run(true, false);
    // With virtual hosts: the host is chosen without allocating.
    run(false, true);
}

/// With routing rules that do not match the file (exact paths, prefixes and regexes,
/// matched in one pass) but the last, `prefix = "/"` with request field edits, and
/// response edits without variables on every response: the rules allocate nothing
/// either.
#[test]
fn keep_alive_get_under_routing_rules_allocates_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut routes = String::new();
    for i in 0..10 {
        routes += &format!("[[route]]\npath = \"/exact/{i}\"\nrespond = {{ body = \"{i}\" }}\n");
        routes += &format!("[[route]]\nprefix = \"/prefix/{i}/\"\nrespond = {{ status = 204 }}\n");
    }
    for i in 0..5 {
        routes += &format!(
            "[[route]]\nregex = \"^/users/{i}/([0-9]+)$\"\nredirect = {{ to = \"/u/$1\" }}\n"
        );
    }
    routes += "[[route]]\nprefix = \"/\"\nrequest_headers = { set = { \"Host\" = \"x.test\" }, \
               add = { \"X-A\" = \"1\" }, remove = [\"Accept\"] }\n";
    #[derive(serde::Deserialize)]
    struct Routes {
        route: Vec<rules::RouteRules>,
    }
    let parsed: Routes = toml::from_str(&routes).unwrap();
    let edits: rules::HeaderEdits = toml::from_str(
        "set = { \"X-Content-Type-Options\" = \"nosniff\", \"X-Frame-Options\" = \"DENY\", \
         \"Referrer-Policy\" = \"no-referrer\" }\nadd = { \"X-A\" = \"1\" }\nalways = true",
    )
    .unwrap();
    run_with(false, false, &|config| server::Config {
        routes: parsed
            .route
            .iter()
            .map(|r| (0, r.clone(), r.request_headers.is_some()))
            .collect(),
        response_headers: Some(edits.clone()),
        ..config
    });
}

/// Under request limits never hit (a zone keyed by the client, one keyed by a field, and
/// a `limit_conn`) on a route of the files: counting a request allocates nothing.
#[test]
fn keep_alive_get_under_request_limits_allocates_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    #[derive(serde::Deserialize)]
    struct Limits {
        limit: Vec<server::LimitConfig>,
        route: Vec<rules::RouteRules>,
    }
    let parsed: Limits = toml::from_str(
        "[[limit]]\nname = \"client\"\nrate = \"1000000r/s\"\nburst = 1000000\nnodelay = true\n\
         [[limit]]\nname = \"host\"\nkey = \"$http_host $uri\"\nrate = \"1000000r/s\"\n\
         burst = 1000000\nnodelay = true\n\
         [[route]]\nprefix = \"/\"\nlimit = [\"client\", \"host\"]\n\
         limit_conn = { max = 1000 }\n",
    )
    .unwrap();
    run_with(false, false, &|config| server::Config {
        limit: parsed.limit.clone(),
        routes: parsed.route.iter().map(|r| (0, r.clone(), true)).collect(),
        ..config
    });
}

/// With `[tracing]` on and a request not sampled: its trace context is two random
/// numbers on the stack, and nothing is allocated for it.
#[test]
fn keep_alive_get_with_tracing_on_not_sampled_allocates_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    run_with(false, false, &|config| server::Config {
        tracing: Some(server::TracingConfig {
            sampling: 0.0,
            ..Default::default()
        }),
        ..config
    });
}

fn run(access_log: bool, hosts: bool) {
    run_with(access_log, hosts, &|config| config)
}

fn run_with(access_log: bool, hosts: bool, change: &dyn Fn(server::Config) -> server::Config) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello world\n").unwrap();
    let log_path = dir.path().join("access.log");
    let other = tempfile::tempdir().unwrap();
    let config = server::Config {
        root: Some(other.path().to_owned()),
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        workers: 1,
        max_connections: 64,
        access_log: access_log.then(|| log_path.clone()),
        host: vec![
            server::HostConfig {
                names: vec!["a.test".into()],
                root: Some(other.path().to_owned()),
                ..Default::default()
            },
            server::HostConfig {
                names: vec!["*.t".into()],
                root: Some(dir.path().to_owned()),
                ..Default::default()
            },
        ],
        ..server::Config::default()
    };
    let config = if hosts {
        config
    } else {
        server::Config {
            root: Some(dir.path().to_owned()),
            host: Vec::new(),
            ..config
        }
    };
    let server = server::Server::bind(change(config), Vec::new()).unwrap();
    let addr = server.local_addrs()[0];
    let running = server.start().unwrap();

    let mut stream = TcpStream::connect(addr).unwrap();
    let request = b"GET /hello.txt HTTP/1.1\r\nHost: www.T:8080\r\n\r\n";
    // Learn the response length once (it is constant: the Date line has a fixed width).
    stream.write_all(request).unwrap();
    let mut response = vec![0u8; 4096];
    let mut len = 0;
    while !response[..len].ends_with(b"hello world\n") {
        len += stream.read(&mut response[len..]).unwrap();
    }
    // Warm-up: file cache, buffer sets, the runtime's own structures.
    let exchange = |stream: &mut TcpStream, response: &mut [u8]| {
        stream.write_all(request).unwrap();
        stream.read_exact(&mut response[..len]).unwrap();
        assert!(response[..len].starts_with(b"HTTP/1.1 200 OK\r\n"));
    };
    for _ in 0..2000 {
        exchange(&mut stream, &mut response);
    }

    // The counter does see allocations (so a zero below means something).
    let probe = ALLOCATIONS.load(Ordering::Relaxed);
    drop(std::hint::black_box(Vec::<u8>::with_capacity(16)));
    assert_eq!(ALLOCATIONS.load(Ordering::Relaxed) - probe, 1);

    // At least 10,000 requests, and across at least two second boundaries so the
    // once-a-second work (Date formatting, file cache re-checks, timeout sweeps) runs.
    let started = std::time::Instant::now();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut requests = 0;
    while requests < 10_000 || started.elapsed() < std::time::Duration::from_millis(2200) {
        exchange(&mut stream, &mut response);
        requests += 1;
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    // Exactly zero over 10,000 requests: the clock formats the Date header into a fixed
    // array, the file cache re-checks an entry by reopening without allocating, buffers
    // are recycled, and the output batch never grows.
    assert_eq!(
        after - before,
        0,
        "allocations during {requests} keep-alive requests"
    );

    drop(stream);
    running.shutdown();
    running.join();
}

/// The same for the requests of caches and download tools: revalidations answered 304
/// (by entity tag and by date) and single ranges answered 206.
#[test]
fn conditional_and_range_requests_allocate_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_dir, addr, running) = common::serve_hello();
    let mut stream = TcpStream::connect(addr).unwrap();

    // Learn the entity tag and Last-Modified, then each response's (constant) length.
    stream
        .write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let first = read_one(&mut stream);
    let header = |name: &str| {
        first
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap()
            .trim()
            .to_string()
    };
    let (etag, last_modified) = (header("ETag:"), header("Last-Modified:"));
    let requests: Vec<(Vec<u8>, &str)> = vec![
        (
            format!("GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-None-Match: {etag}\r\n\r\n")
                .into_bytes(),
            "HTTP/1.1 304 ",
        ),
        (
            format!(
                "GET /hello.txt HTTP/1.1\r\nHost: t\r\nIf-Modified-Since: {last_modified}\r\n\r\n"
            )
            .into_bytes(),
            "HTTP/1.1 304 ",
        ),
        (
            b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nRange: bytes=0-4\r\n\r\n".to_vec(),
            "HTTP/1.1 206 ",
        ),
    ];
    let lengths: Vec<usize> = requests
        .iter()
        .map(|(request, status)| {
            stream.write_all(request).unwrap();
            let response = read_one(&mut stream);
            assert!(response.starts_with(status), "{response}");
            response.len()
        })
        .collect();
    let mut response = vec![0u8; 4096];
    let mut exchange = |i: usize| {
        stream.write_all(&requests[i].0).unwrap();
        stream.read_exact(&mut response[..lengths[i]]).unwrap();
        assert!(response.starts_with(requests[i].1.as_bytes()));
    };
    for i in 0..3000 {
        exchange(i % 3);
    }

    let started = std::time::Instant::now();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut count = 0;
    while count < 10_000 || started.elapsed() < std::time::Duration::from_millis(2200) {
        exchange(count % 3);
        count += 1;
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(after - before, 0, "allocations during {count} requests");

    drop(stream);
    running.shutdown();
    running.join();
}

/// A new connection for every request (`Connection: close`), as health checkers and
/// `ab` without -k do: nothing is allocated per connection. The slot, its task's room
/// and its readiness entry are allocated at start; buffers are recycled.
#[test]
fn connection_per_request_allocates_nothing() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_dir, addr, running) = common::serve_hello();
    let request = b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    let mut response = [0u8; 4096];
    let exchange = |response: &mut [u8]| {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(request).unwrap();
        // Read to end-of-file into a fixed buffer (read_to_end would allocate here).
        let mut len = 0;
        loop {
            let n = stream.read(&mut response[len..]).unwrap();
            if n == 0 {
                break;
            }
            len += n;
        }
        assert!(response[..len].starts_with(b"HTTP/1.1 200 OK\r\n"));
        assert!(response[..len].ends_with(b"hello world\n"));
    };
    for _ in 0..2000 {
        exchange(&mut response);
    }
    let started = std::time::Instant::now();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let mut connections: u64 = 0;
    while connections < 5_000 || started.elapsed() < std::time::Duration::from_millis(2200) {
        exchange(&mut response);
        connections += 1;
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    assert_eq!(
        after - before,
        0,
        "allocations during {connections} connections"
    );
    assert_eq!(running.lingering_closes(), 0);
    running.shutdown();
    running.join();
}

/// One response (head, and a Content-Length body if any), read a byte at a time.
fn read_one(stream: &mut TcpStream) -> String {
    let mut bytes = Vec::new();
    let mut byte = [0u8; 1];
    while !bytes.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).unwrap();
        bytes.push(byte[0]);
    }
    let head = String::from_utf8(bytes.clone()).unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).unwrap();
    bytes.extend_from_slice(&body);
    String::from_utf8(bytes).unwrap()
}
