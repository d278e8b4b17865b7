//! The request path does not allocate: 20,000 more requests cost (almost) no
//! more allocations than 1,000. A counting global allocator sees every
//! allocation of this test process; the server runs in a child process (this
//! same test binary, re-executed) so that only the generator is counted.

use bench::testserver::TestServer;
use bench::{Config, Invocation, RequestSpec};
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
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
static ALLOCATOR: Counting = Counting;

const SERVER_ENV: &str = "TESSERA_ALLOC_TEST_SERVER";

/// Not a test of its own: the server half, run in a child process.
#[test]
fn server_process() {
    if std::env::var_os(SERVER_ENV).is_none() {
        return;
    }
    let s = TestServer::start().unwrap();
    println!("ADDR {}", s.addr());
    std::io::stdout().flush().unwrap();
    // Serve until the parent closes our stdin.
    let _ = std::io::stdin().read(&mut [0u8; 1]);
}

#[test]
fn the_request_path_does_not_allocate() {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "server_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SERVER_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("server prints its address").unwrap();
        // The test harness may print the test's name on the same line first.
        if let Some((_, a)) = line.split_once("ADDR ") {
            break a.trim().to_string();
        }
    };
    let run = |n: u64, pipeline: usize| {
        let mut c = Config::new(vec![RequestSpec::get(&format!("http://{addr}/chunked"))]);
        c.threads = 1;
        c.connections = 4;
        c.pipeline = pipeline;
        c.requests_total = Some(n);
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        let r = bench::run(&c, &Invocation::default(), None).unwrap();
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
        assert_eq!((r.requests, r.errors.total), (n, 0));
        (allocations, r.series.len() as u64)
    };
    for pipeline in [1, 8] {
        run(200, pipeline);
        let (small, small_secs) = run(1_000, pipeline);
        let (large, large_secs) = run(21_000, pipeline);
        // Each second of a run adds a few allocations (its statistics bucket and
        // histograms); nothing else may grow with the number of requests.
        let per_second = 16;
        let allowance = 20 + per_second * large_secs.saturating_sub(small_secs);
        assert!(
            large <= small + allowance,
            "pipeline {pipeline}: 1000 requests made {small} allocations, 21000 made {large} ({large_secs} s)"
        );
    }
    drop(child.stdin.take());
    let _ = child.wait();
}
