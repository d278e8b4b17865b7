#!/usr/bin/env bash
# The one test command (README and .ci/run call it): installs what the tests need that
# this machine lacks, then runs every test in the workspace against the real binary.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null 2>&1; then
    echo "scripts/test.sh: cargo not found; install Rust (https://rustup.rs) first" >&2
    exit 1
fi

# apt_install PACKAGE WHY: installs a Debian package (as root, or through sudo), saying why.
apt_install() {
    echo "scripts/test.sh: installing $1 for $2" >&2
    if [ "$(id -u)" -eq 0 ]; then
        apt-get update -qq && apt-get install -y -qq "$1"
    else
        sudo apt-get update -qq && sudo apt-get install -y -qq "$1"
    fi
}

# The cache tests start their own redis-server (crates/cli/tests/serve/cache.rs), and the
# test that runs docs/getting-started.md (crates/cli/tests/getting_started.rs) its
# redis-server and redis-cli, curl and python3, all installed below.
if ! command -v redis-server >/dev/null 2>&1; then
    apt_install redis-server "the cache tests"
fi

# The client identity tests put HAProxy in front of the server, sending the PROXY
# protocol and X-Forwarded-For (crates/cli/tests/serve/client_identity.rs).
if ! command -v haproxy >/dev/null 2>&1; then
    apt_install haproxy "the client identity tests"
fi

# The upstream TLS tests run a Python ssl origin (python3, installed below) and check that
# `--proxy https://` verifies against the system's roots (crates/cli/tests/serve/upstream_tls.rs);
# tessera refuses to start without any. A Lua socket's verified handshake reads them too
# (crates/cli/tests/serve/lua_sockets.rs expects the refusal of an unknown issuer).
if [ ! -s /etc/ssl/certs/ca-certificates.crt ]; then
    apt_install ca-certificates "the upstream and Lua socket TLS tests"
fi

# The basic auth tests write their htpasswd files with Apache's htpasswd (bcrypt, and
# the weak schemes tessera refuses) and openssl passwd -6 (SHA-512-crypt)
# (crates/cli/tests/serve/access_policy.rs).
if ! command -v htpasswd >/dev/null 2>&1; then
    apt_install apache2-utils "the basic auth tests (htpasswd)"
fi

# The TLS tests speak to the server with curl and openssl s_client
# (crates/cli/tests/serve/tls.rs).
for tool in curl openssl; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        apt_install "$tool" "the TLS tests"
    fi
done

# The HTTP/2 tests drive the server with h2load (crates/cli/tests/serve/http2.rs).
if ! command -v h2load >/dev/null 2>&1; then
    apt_install nghttp2-client "the HTTP/2 tests (h2load)"
fi

# `tessera bench --http2` is checked against h2o's access log
# (crates/cli/tests/serve/bench_protocols.rs).
if ! command -v h2o >/dev/null 2>&1; then
    apt_install h2o "the bench tests"
fi

# The HTTP/2 upstream tests proxy to nginx listening with `http2`, whose access log
# names each request's connection (crates/cli/tests/serve/upstream_h2.rs).
if ! command -v nginx >/dev/null 2>&1; then
    apt_install nginx "the HTTP/2 upstream tests"
fi

# `tessera bench --http3` is checked against Caddy's access log (HTTP/3 is on by default
# in Caddy 2.6, Debian's).
if ! command -v caddy >/dev/null 2>&1; then
    apt_install caddy "the bench tests"
fi

# The metrics tests check /metrics with promtool and scrape it with a real Prometheus
# (crates/cli/tests/serve/metrics.rs): the Debian package's binaries, unpacked into a
# cache folder rather than installed (the package would start a service listening on
# every interface).
tools=${XDG_CACHE_HOME:-$HOME/.cache}/tessera-test
if [ ! -x "$tools/prometheus/usr/bin/promtool" ]; then
    echo "scripts/test.sh: fetching prometheus and promtool for the metrics tests" >&2
    mkdir -p "$tools"
    (cd "$tools" && rm -f prometheus_*.deb && apt-get download -qq prometheus 2>/dev/null ||
        { apt-get update -qq && apt-get download -qq prometheus; })
    dpkg -x "$tools"/prometheus_*.deb "$tools/prometheus"
    rm -f "$tools"/prometheus_*.deb
fi
export TESSERA_PROMETHEUS_BIN="$tools/prometheus/usr/bin"

# The automatic certificate tests get certificates from Pebble, Let's Encrypt's ACME test
# server, with pebble-challtestsrv as its DNS (crates/cli/tests/serve/acme.rs): Go
# programs built from the Go module proxy into the cache folder.
if [ ! -x "$tools/go/pebble" ] || [ ! -x "$tools/go/pebble-challtestsrv" ]; then
    echo "scripts/test.sh: building pebble and pebble-challtestsrv for the ACME tests" >&2
    go=$(command -v go || echo /usr/local/go/bin/go)
    if [ ! -x "$go" ]; then
        echo "scripts/test.sh: go not found; install Go (https://go.dev/dl/) first" >&2
        exit 1
    fi
    GOBIN="$tools/go" "$go" install github.com/letsencrypt/pebble/v2/cmd/pebble@latest \
        github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@latest
fi
export TESSERA_PEBBLE_BIN="$tools/go"

# No crate declares a dependency it does not use (a dev-dependency for one only its tests
# use; a false positive goes in its Cargo.toml's [package.metadata.cargo-machete] with why).
if ! command -v cargo-machete >/dev/null 2>&1; then
    echo "scripts/test.sh: installing cargo-machete for the unused-dependency check" >&2
    cargo install cargo-machete --locked
fi
cargo machete

# The crates stay in layers: no module import cycle in any crate, no source file over 900
# lines, no function over 150 lines in server or edge (scripts/layering.py says why).
if ! command -v python3 >/dev/null 2>&1; then
    apt_install python3 "the layering check"
fi

# Python packages from PyPI (pip itself from apt when missing): DuckDB reads the
# Parquet export back (crates/cli/tests/logs.rs); the OTLP receiver of the tracing tests
# decodes spans with the official protobuf types, `opentelemetry-proto`
# (crates/cli/tests/serve/trace_context.rs); aioquic is the HTTP/3 client of
# crates/cli/tests/serve/http3.rs.
pip_install() {
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt_install python3-pip "pip"
    fi
    python3 -m pip install -q "$1" 2>/dev/null ||
        python3 -m pip install -q --break-system-packages "$1"
}
if ! python3 -c "import duckdb" >/dev/null 2>&1; then
    echo "scripts/test.sh: installing duckdb (pip) for the Parquet export test" >&2
    pip_install duckdb
fi
if ! python3 -c "import opentelemetry.proto.collector.trace.v1.trace_service_pb2" >/dev/null 2>&1; then
    echo "scripts/test.sh: installing opentelemetry-proto (pip) for the tracing tests" >&2
    pip_install opentelemetry-proto
fi
if ! python3 -c "import aioquic" >/dev/null 2>&1; then
    echo "scripts/test.sh: installing aioquic (pip), the HTTP/3 client of the HTTP/3 tests" >&2
    pip_install aioquic
fi
# The gRPC tests run a grpcio server and client through tessera
# (crates/cli/tests/serve/grpc.rs).
if ! python3 -c "import grpc" >/dev/null 2>&1; then
    echo "scripts/test.sh: installing grpcio (pip) for the gRPC tests" >&2
    pip_install grpcio
fi

python3 scripts/layering.py

cargo test --workspace --locked "$@"
