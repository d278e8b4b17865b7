#!/usr/bin/env bash
# HTTP/2 conformance: h2spec (every case of RFC 7540/9113 and RFC 7541 it has) against
# tessera over TLS (ALPN h2) and over cleartext with prior knowledge (h2c), with h2o and
# nginx over TLS beside it for comparison (docs/http2.md records the run).
#
# Installs h2spec with `go install` when it is missing (Go from the distribution's
# golang-go package if there is no go), h2o and nginx with apt.
#
# usage: bench/h2spec.sh [-v]   (-v prints every case, not only the failures)
set -euo pipefail
cd "$(dirname "$0")/.."
VERBOSE=${1:-}

source bench/lib.sh
need h2o h2o
need nginx nginx
need python3 python3
H2SPEC=$(command -v h2spec || echo "$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin/h2spec")
if [ ! -x "$H2SPEC" ]; then
    command -v go >/dev/null 2>&1 || need go golang-go
    go install github.com/summerwind/h2spec/cmd/h2spec@latest
    H2SPEC=$(go env GOPATH)/bin/h2spec
fi

cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera

make_work h2spec
mkdir -p "$work/site" "$work/nginx"
printf 'hello world\n' > "$work/site/index.html"
make_cert

plain=$(free_port); tls=$(free_port)
"$TESSERA" serve --root "$work/site" --listen "127.0.0.1:$plain" --tls-listen "127.0.0.1:$tls" \
    --cert "$work/cert.pem" --key "$work/key.pem" --workers 1 2>"$work/tessera.log" &
pids+=($!)

start_h2o_tls "$work/site" ""

nginx_port=$(free_port)
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
master_process off;
daemon off;
error_log $work/nginx/error.log warn;
pid $work/nginx/nginx.pid;
events {}
http {
    access_log off;
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    server {
        listen 127.0.0.1:$nginx_port ssl http2;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        root $work/site;
    }
}
CONF
nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!)

wait_up "$plain" index.html
sleep 1
echo "# $(date -u +'%F %H:%M UTC'); $("$H2SPEC" --version 2>&1 | head -1); $(h2o --version | head -1); $(nginx -v 2>&1)"
run() {
    local name=$1
    shift
    local out
    out=$("$H2SPEC" -o 5 "$@" 2>&1 || true)
    if [ -n "$VERBOSE" ]; then echo "$out"; else echo "$out" | sed -n '/^Failures:/,$p' | grep -v '^$' | head -40 || true; fi
    echo "$name: $(echo "$out" | grep -E '^[0-9]+ tests' | tail -1)"
}
run "tessera TLS" -t -k -h 127.0.0.1 -p "$tls"
run "tessera h2c" -h 127.0.0.1 -p "$plain"
run "h2o TLS" -t -k -h 127.0.0.1 -p "$h2o_port"
run "nginx TLS" -t -k -h 127.0.0.1 -p "$nginx_port"
