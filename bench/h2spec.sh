#!/usr/bin/env bash
# HTTP/2 conformance: h2spec (every case of RFC 7540/9113 and RFC 7541 it has) against
# tessera over TLS (ALPN h2) and over cleartext with prior knowledge (h2c): on an
# `h2c_listen` port (HTTP/2 only) and on a `listen` port (HTTP/1.1 too), with h2o and
# nginx beside it for comparison, each over TLS and h2c (h2o's cleartext port also speaks
# HTTP/1.1; nginx 1.22's `listen ... http2` without ssl is h2c only). docs/http2.md
# records the run.
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

plain=$(free_port); tls=$(free_port); h2c=$(free_port)
"$TESSERA" serve --root "$work/site" --listen "127.0.0.1:$plain" --tls-listen "127.0.0.1:$tls" \
    --h2c-listen "127.0.0.1:$h2c" --cert "$work/cert.pem" --key "$work/key.pem" --workers 1 2>"$work/tessera.log" &
pids+=($!)

start_h2o_tls "$work/site" ""
h2o_plain=$(free_port)
cat > "$work/h2o-plain.conf" <<CONF
num-threads: 1
listen:
  host: 127.0.0.1
  port: $h2o_plain
error-log: $work/h2o-plain-error.log
hosts:
  default:
    paths:
      /:
        file.dir: $work/site
CONF
h2o -c "$work/h2o-plain.conf" >/dev/null 2>&1 &
pids+=($!)

nginx_port=$(free_port); nginx_h2c=$(free_port)
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
    server {
        listen 127.0.0.1:$nginx_h2c http2;
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
run "tessera h2c (h2c_listen)" -h 127.0.0.1 -p "$h2c"
run "tessera h2c (listen, also HTTP/1.1)" -h 127.0.0.1 -p "$plain"
run "h2o TLS" -t -k -h 127.0.0.1 -p "$h2o_port"
run "h2o h2c (also HTTP/1.1)" -h 127.0.0.1 -p "$h2o_plain"
run "nginx TLS" -t -k -h 127.0.0.1 -p "$nginx_port"
run "nginx h2c (http2 only)" -h 127.0.0.1 -p "$nginx_h2c"
