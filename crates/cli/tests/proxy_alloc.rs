//! Counts the heap allocations of the steady-state proxy path: a keep-alive GET proxied
//! to an origin (both the real server and proxy, in this process: a `server::Server` with
//! the `edge` module in front of a static `server::Server`), 10,000 times, with a
//! counting global allocator. The static origin allocates nothing per request
//! (crates/server/tests/zero_alloc.rs), so what is counted is the proxy's: none (issue
//! 26). The response carries no freshness information, so it is not stored: the
//! request goes to the origin every time (a pass, after the first marks the key).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

#[test]
fn a_proxied_keep_alive_get_allocates_nothing() {
    // As it comes, then through a route with a cache key rule (issue 45): the key is
    // normalised per request (query sorted, parameters dropped, a header and a cookie
    // added) without allocating. One test, so the counts are not mixed with another's.
    run(edge::EdgeConfig::proxy_to, "", "");
    let with_key_rule = |address: &str| {
        let mut config = edge::EdgeConfig::proxy_to(address);
        config.route[0].cache = Some(edge::RouteCacheConfig {
            key: Some(edge::KeyRules {
                query: Some("sorted".into()),
                drop_query: vec!["utm_*".into(), "fbclid".into()],
                headers: vec!["Accept-Language".into()],
                cookies: vec!["ab".into()],
            }),
            ..Default::default()
        });
        config
    };
    let fields = "Accept-Language: fr\r\nCookie: x=1; ab=b\r\n";
    run(with_key_rule, "?z=1&utm_source=a&b=2&fbclid=f", fields);
}

/// 10,000 proxied GETs (with `query` and the header lines `fields`) through the proxy
/// `edge_config` makes for the origin's address, none of which may allocate.
fn run(edge_config: impl Fn(&str) -> edge::EdgeConfig, query: &str, fields: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("1k.txt"), vec![b'a'; 1024]).unwrap();
    // Larger than the proxy's reads of a body: streamed through as it arrives.
    std::fs::write(dir.path().join("256k.txt"), vec![b'b'; 262144]).unwrap();
    let config = server::Config {
        root: Some(dir.path().to_owned()),
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        workers: 1,
        max_connections: 64,
        ..server::Config::default()
    };
    let origin = server::Server::bind(config.clone(), Vec::new()).unwrap();
    let origin_addr = origin.local_addrs()[0];
    let origin = origin.start().unwrap();

    let proxy = edge::EdgeModule::new(edge_config(&origin_addr.to_string())).unwrap();
    let proxy_server =
        server::Server::bind(config, vec![proxy.clone() as Arc<dyn handler::Module>]).unwrap();
    let addr = proxy_server.local_addrs()[0];
    let running = proxy_server.start().unwrap();

    let mut stream = TcpStream::connect(addr).unwrap();
    for (path, size, at_least) in [("/1k.txt", 1024, 10_000), ("/256k.txt", 262144, 1_000)] {
        let request = format!("GET {path}{query} HTTP/1.1\r\nHost: t\r\n{fields}\r\n");
        let mut response = vec![0u8; size + 4096];
        let mut exchange = || {
            stream.write_all(request.as_bytes()).unwrap();
            let mut len = 0;
            let whole = loop {
                len += stream.read(&mut response[len..]).unwrap();
                if let Some(end) = response[..len].windows(4).position(|w| w == b"\r\n\r\n") {
                    if len >= end + 4 + size {
                        break end + 4 + size;
                    }
                }
            };
            assert!(response.starts_with(b"HTTP/1.1 200 OK\r\n"));
            assert_eq!(len, whole, "nothing after the body");
        };
        for _ in 0..2000 {
            exchange();
        }
        let started = std::time::Instant::now();
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let mut requests = 0;
        while requests < at_least || started.elapsed() < std::time::Duration::from_millis(2200) {
            exchange();
            requests += 1;
        }
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
        eprintln!("{path}: {allocations} allocations in {requests} proxied requests");
        assert_eq!(
            allocations, 0,
            "allocations during {requests} proxied requests of {path}"
        );
    }
    // Every request went to the origin over the connections the pool kept.
    assert_eq!(
        proxy.upstream_connections(),
        vec![("origin".to_string(), 1)]
    );
    running.shutdown();
    running.join();
    origin.shutdown();
    origin.join();
}
