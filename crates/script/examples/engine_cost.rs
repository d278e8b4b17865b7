//! Measures what one request costs inside the engine (begin, content, finish) for the
//! hello handler, without sockets: `cargo run --release -p script --example engine_cost`.

use std::net::SocketAddr;
use std::time::Instant;

use script::{Content, Engine, Outcome, RequestHead, ScriptConfig, Scripts};

fn main() {
    let hello = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/lua/hello.lua");
    let scripts = Scripts::new(
        vec![ScriptConfig {
            prefix: "/hello".into(),
            path: hello.into(),
            ..ScriptConfig::default()
        }],
        &[],
    )
    .expect("hello.lua loads");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    tokio::task::LocalSet::new().block_on(&rt, async {
        let engine = Engine::new(scripts, 0, None);
        let client: SocketAddr = "127.0.0.1:5000".parse().expect("address");
        let headers = [
            (&b"Host"[..], &b"localhost"[..]),
            (&b"User-Agent"[..], &b"wrk"[..]),
        ];
        let n = 2_000_000;
        for round in 0..3 {
            let started = Instant::now();
            for _ in 0..n {
                let m = engine.mount(b"/hello").expect("mounted");
                let call = engine.begin(
                    m,
                    RequestHead {
                        method: b"GET",
                        target: b"/hello",
                        headers: headers.iter().copied(),
                        client,
                        peer: client,
                        proxy_tlvs: &[],
                    },
                );
                match engine.access(&call) {
                    Content::Done(Outcome::Continue) => {}
                    _ => panic!("access did not pass at once"),
                }
                match engine.content(&call) {
                    Content::Done(Outcome::Respond) => {}
                    _ => panic!("hello did not answer at once"),
                }
                assert_eq!(engine.header_filter(&call), Outcome::Continue);
                engine.finish(call);
            }
            let ns = started.elapsed().as_nanos() as f64 / n as f64;
            println!("round {round}: {ns:.0} ns per request in the engine");
        }
    });
}
