#!/usr/bin/env bash
# HTTP/2: tessera against h2o and nginx, side by side in one run (docs/benchmarks.md,
# docs/http2.md).
#
# Every server gets the same ECDSA P-256 certificate, one worker pinned to core 0, HTTP/2
# over TLS 1.3 (ALPN h2), and is driven by h2load on core 1: CONNECTIONS connections x
# STREAMS concurrent streams, for SECONDS (connection set-up included). Printed: server CPU per
# request (utime+stime from /proc divided by the requests h2load completed), requests/s,
# and the ratios, median of ROUNDS rounds (servers in turn within each round):
#
#   1. the 12-byte file;
#   2. a 57 KB HTML page (a static file);
#   3. a cached ESI page over HTTP/2: tessera's proxy (page and its 10 fragments fresh
#      in its cache, from bench/esi-origin.py) over h2, against Varnish's cached ESI
#      page over HTTP/1.1 (wrk -c CONNECTIONS, cleartext, Varnish has no TLS): the
#      issue's target is tessera at least 10x cheaper per request.
#
# usage: flock /tmp/bench.lock bench/http2.sh [ROUNDS] [SECONDS] [CONNECTIONS] [STREAMS]
#        (defaults: 3 rounds of 5 s, 100 connections x 10 streams; env CASES="12b page
#        esi" runs those cases only, NO_BUILD=1 skips cargo, TESSERA=path of the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECONDS_PER_RUN=${2:-5}
CONNECTIONS=${3:-100}
STREAMS=${4:-10}
CASES=${CASES:-12b page esi}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need h2o h2o
need h2load nghttp2-client
need varnishd varnish
need wrk wrk
need taskset util-linux
need python3 python3

[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
TESSERA=${TESSERA:-$PWD/target/release/tessera}

ulimit -n "$(ulimit -Hn)"
make_work http2
site=$work/site
mkdir -p "$site" "$work/nginx"
printf 'hello world\n' > "$site/12b.txt"
make_page "$site/page.html"

make_cert

# --- nginx: one process, http2 on the TLS listener.
nginx_port=$(free_port)
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
master_process off;
daemon off;
worker_rlimit_nofile $(ulimit -n);
error_log $work/nginx/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections 4096; use epoll; multi_accept on; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 1s;
    types { text/plain txt; text/html html; }
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    ssl_protocols TLSv1.2 TLSv1.3;
    server {
        listen 127.0.0.1:$nginx_port ssl http2 reuseport backlog=16384;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        root $site;
    }
}
CONF
taskset -c $SERVER_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!

# --- h2o: one thread (HTTP/2 over TLS is on by default).
start_h2o_tls "$site" $SERVER_CPU

# --- the ESI origin (on the load's core; it is asked only while the caches fill).
origin_port=$(free_port)
taskset -c $LOAD_CPU python3 bench/esi-origin.py "$origin_port" 10 0 &
pids+=($!)
wait_up "$origin_port" cached/frag/1

# --- tessera: one worker; static files, and /cached/ proxied to the origin.
tessera_port=$(free_port)
cat > "$work/tessera.toml" <<CONF
root = "$site"
[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port"]
[[route]]
prefix = "/cached"
upstream = "origin"
CONF
taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/tessera.toml" \
    --listen "127.0.0.1:$(free_port)" --tls-listen "127.0.0.1:$tessera_port" \
    --cert "$work/cert.pem" --key "$work/key.pem" --workers 1 --backlog 16384 \
    2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!

# --- Varnish: the cached ESI page over HTTP/1.1.
start_varnish_esi $SERVER_CPU "$origin_port" "set beresp.ttl = 1h;"
wait_up "$varnish_port" cached/page

# wait_tls PORT: waits (at most 10 s) until https://127.0.0.1:PORT/12b.txt answers over h2.
wait_tls() {
    for _ in $(seq 100); do
        [ "$(curl -sk --http2 -o /dev/null -w '%{http_version}' "https://127.0.0.1:$1/12b.txt")" = 2 ] && return 0
        sleep 0.1
    done
    echo "HTTP/2 server on port $1 did not start" >&2
    exit 1
}
wait_tls "$nginx_port"; wait_tls "$h2o_port"; wait_tls "$tessera_port"
for _ in 1 2; do
    curl -fsk -o /dev/null "https://127.0.0.1:$tessera_port/cached/page"
    curl -fs -o /dev/null "http://127.0.0.1:$varnish_port/cached/page"
done
curl -fsk --http2 -o "$work/page-tessera.html" "https://127.0.0.1:$tessera_port/cached/page"
curl -fs -o "$work/page-varnish.html" "http://127.0.0.1:$varnish_port/cached/page"
if grep -q "<esi:" "$work/page-tessera.html" "$work/page-varnish.html"; then
    echo "check failed: a page still holds <esi: tags" >&2
    exit 1
fi
echo "# check: cached ESI page $(stat -c %s "$work/page-tessera.html") bytes over h2 (tessera), $(stat -c %s "$work/page-varnish.html") bytes (varnish)"

servers="tessera h2o nginx"
declare -A pid_of=([nginx]=$nginx_pid [tessera]=$tessera_pid [h2o]=$h2o_pid [varnish]=$varnish_pid)
declare -A port_of=([nginx]=$nginx_port [tessera]=$tessera_port [h2o]=$h2o_port)

echo "# $(date -u +'%F %H:%M UTC') $(nproc) cores, $(uname -r); server on core $SERVER_CPU, h2load on core $LOAD_CPU; median of $ROUNDS rounds of ${SECONDS_PER_RUN}s; -c$CONNECTIONS -m$STREAMS"
echo "# $(nginx -v 2>&1 | tr -d '\n'); $(h2o --version | head -1); $(h2load --version | head -1); $(varnishd -V 2>&1 | head -1)"

# run_case NAME PATH: ROUNDS rounds of h2load, servers in turn; prints medians and ratios.
run_case() {
    local name=$1 path=$2 s rps cpu
    declare -A rps_runs=() cpu_runs=()
    for _ in $(seq "$ROUNDS"); do
        for s in $servers; do
            read -r rps cpu < <(h2measure "${pid_of[$s]}" "https://127.0.0.1:${port_of[$s]}$path" $LOAD_CPU "$CONNECTIONS" "$STREAMS" "$SECONDS_PER_RUN")
            rps_runs[$s]+="$rps "
            cpu_runs[$s]+="$cpu "
        done
    done
    declare -g -A cpu_med=()
    for s in $servers; do
        cpu_med[$s]=$(echo "${cpu_runs[$s]}" | tr ' ' '\n' | grep . | median)
        printf '%-14s %-8s %12.0f %12.2f   (runs: %s; cpu: %s)\n' "$name" "$s" \
            "$(echo "${rps_runs[$s]}" | tr ' ' '\n' | grep . | median)" "${cpu_med[$s]}" "${rps_runs[$s]% }" "${cpu_runs[$s]% }"
    done
    for s in h2o nginx; do
        awk -v o="${cpu_med[$s]}" -v t="${cpu_med[tessera]}" -v n="$name" -v s="$s" \
            'BEGIN { printf "%-14s tessera/%s: cpu per request x%.2f (%s/tessera)\n", n, s, o / t, s }'
    done
}

printf '%-14s %-8s %12s %12s\n' case server "requests/s" "cpu us/req"
[[ " $CASES " == *" 12b "* ]] && run_case h2-12b /12b.txt
[[ " $CASES " == *" page "* ]] && run_case h2-page57k /page.html
[[ " $CASES " == *" esi "* ]] || exit 0

# The cached ESI page: tessera over h2 (h2load), Varnish over HTTP/1.1 (wrk).
declare -A esi_rps=() esi_cpu=()
for _ in $(seq "$ROUNDS"); do
    read -r rps cpu < <(h2measure "$tessera_pid" "https://127.0.0.1:$tessera_port/cached/page" $LOAD_CPU "$CONNECTIONS" "$STREAMS" "$SECONDS_PER_RUN")
    esi_rps[tessera]+="$rps "; esi_cpu[tessera]+="$cpu "
    read -r rps cpu < <(measure "$varnish_pid" "http://127.0.0.1:$varnish_port/cached/page" $LOAD_CPU "$CONNECTIONS" "$SECONDS_PER_RUN")
    esi_rps[varnish]+="$rps "; esi_cpu[varnish]+="$cpu "
done
for s in tessera varnish; do
    cpu_med[$s]=$(echo "${esi_cpu[$s]}" | tr ' ' '\n' | grep . | median)
    printf '%-14s %-8s %12.0f %12.2f   (runs: %s; cpu: %s)\n' esi-cached "$s" \
        "$(echo "${esi_rps[$s]}" | tr ' ' '\n' | grep . | median)" "${cpu_med[$s]}" "${esi_rps[$s]% }" "${esi_cpu[$s]% }"
done
awk -v v="${cpu_med[varnish]}" -v t="${cpu_med[tessera]}" \
    'BEGIN { printf "esi-cached     tessera(h2)/varnish(HTTP/1.1): cpu per request x%.2f (varnish/tessera; target >= 10)\n", v / t }'
