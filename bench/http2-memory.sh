#!/usr/bin/env bash
# Idle HTTP/2 connections: resident memory per connection of tessera, h2o and nginx, side by
# side in one run (docs/http2.md, docs/benchmarks.md).
#
# Each server has one worker on core 0 and the same certificate; bench/http2-idle.py opens
# IDLE connections over TLS with ALPN h2 (preface, SETTINGS exchanged, then silence) and
# reads the server's RSS before and after. A second tessera process is measured with IDLE
# idle h2c (prior knowledge) connections. Idle HTTP/1.1 connections: bench/memory.sh.
#
# usage: flock /tmp/bench.lock bench/http2-memory.sh [IDLE]   (default 2000)
set -euo pipefail
cd "$(dirname "$0")/.."
IDLE=${1:-2000}
SERVER_CPU=0

source bench/lib.sh
need nginx nginx
need h2o h2o
need python3 python3

cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera
ulimit -n "$(ulimit -Hn)"
make_work http2-memory
mkdir -p "$work/site" "$work/nginx"
printf 'hello world\n' > "$work/site/12b.txt"
make_cert

tessera_tls=$(free_port); tessera_plain=$(free_port)
echo "max_connections = $((IDLE + 64))" > "$work/tessera.toml"
taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/tessera.toml" --root "$work/site" \
    --listen "127.0.0.1:$(free_port)" --tls-listen "127.0.0.1:$tessera_tls" \
    --cert "$work/cert.pem" --key "$work/key.pem" --workers 1 --backlog 16384 \
    2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!
taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/tessera.toml" --root "$work/site" \
    --listen "127.0.0.1:$tessera_plain" --workers 1 --backlog 16384 2>"$work/tessera-h2c.log" &
pids+=($!); tessera_h2c_pid=$!

start_h2o_tls "$work/site" $SERVER_CPU "$((IDLE + 64))"

nginx_port=$(free_port)
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
master_process off;
daemon off;
worker_rlimit_nofile $(ulimit -n);
error_log $work/nginx/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections $((IDLE + 64)); use epoll; }
http {
    access_log off;
    keepalive_timeout 300s;
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
taskset -c $SERVER_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!

wait_up "$tessera_plain" 12b.txt
for port in $tessera_tls $h2o_port $nginx_port; do
    for _ in $(seq 100); do curl -fsk -o /dev/null "https://127.0.0.1:$port/12b.txt" && break; sleep 0.1; done
done
echo "# $(date -u +'%F %H:%M UTC') $(nproc) cores, $(uname -r); one worker each; $IDLE idle connections"
echo "# $(nginx -v 2>&1 | tr -d '\n'); $(h2o --version | head -1)"
printf '%-16s %10s %10s %14s\n' server "RSS before" "RSS after" "KiB per conn"
# measure NAME PID PORT MODE: opens IDLE idle connections, prints the RSS growth.
measure() {
    read -r before after opened < <(python3 bench/http2-idle.py "$2" "$3" "$IDLE" "$4")
    awk -v n="$1" -v b="$before" -v a="$after" -v o="$opened" \
        'BEGIN { printf "%-16s %10d %10d %14.1f\n", n, b, a, (a - b) / o }'
}
measure "tessera h2 TLS" "$tessera_pid" "$tessera_tls" tls
measure "h2o h2 TLS" "$h2o_pid" "$h2o_port" tls
measure "nginx h2 TLS" "$nginx_pid" "$nginx_port" tls
measure "tessera h2c" "$tessera_h2c_pid" "$tessera_plain" h2c
