//! What the server's test binaries share.

/// A one-worker server of a root holding `hello.txt` ("hello world\n"): the root (kept
/// alive by the caller), the address and the running server.
pub fn serve_hello() -> (tempfile::TempDir, std::net::SocketAddr, server::Running) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), b"hello world\n").unwrap();
    let config = server::Config {
        root: Some(dir.path().to_owned()),
        listen: vec!["127.0.0.1:0".parse().unwrap()],
        workers: 1,
        max_connections: 64,
        ..server::Config::default()
    };
    let server = server::Server::bind(config, Vec::new()).unwrap();
    let addr = server.local_addrs()[0];
    (dir, addr, server.start().unwrap())
}
