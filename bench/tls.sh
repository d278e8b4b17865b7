#!/usr/bin/env bash
# HTTPS: tessera against nginx and h2o, side by side in one run (docs/benchmarks.md).
#
# Every server gets the same ECDSA P-256 certificate, one worker pinned to core 0, and
# is driven from core 1 over TLS 1.3 with TLS_AES_128_GCM_SHA256 (the clients take the
# suite from an OpenSSL config given in OPENSSL_CONF; nginx 1.22 needs `ssl_protocols
# TLSv1.2 TLSv1.3` for 1.3). Printed: server CPU per request (utime+stime from /proc
# divided by the requests completed), requests/s, and the ratios.
#
#   1. keep-alive, wrk -c100: the 12-byte file, 64 KiB and 1 MiB (bytes per server CPU
#      second for the large ones);
#   2. a new connection per request (wrk -H 'Connection: close', 50 connections): full
#      handshakes (wrk does not resume);
#   3. openssl s_time -new and -reuse: full and resumed handshakes, one at a time;
#   4. resident memory with IDLE (default 10000) idle TLS keep-alive connections, and
#      tessera's with as many cleartext ones.
#
# usage: flock /tmp/bench.lock bench/tls.sh [ROUNDS] [SECONDS] [IDLE]
#        (defaults: 3 rounds of 5 s per server and case, 10000 idle connections)
#        BASE_BIN=PATH adds a second tessera (an earlier build) as `base` in every case.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECONDS_PER_RUN=${2:-5}
IDLE=${3:-10000}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need h2o h2o
need wrk wrk
need taskset util-linux
need python3 python3
[ -f /usr/include/openssl/ssl.h ] || { echo "installing libssl-dev" >&2; apt-get install -y -q libssl-dev >/dev/null; }

cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera

ulimit -n "$(ulimit -Hn)"
make_work tls
site=$work/site
mkdir -p "$site" "$work/nginx"
printf 'hello world\n' > "$site/12b.txt"
head -c 65536 /dev/urandom > "$site/64k.bin"
head -c 1048576 /dev/urandom > "$site/1m.bin"

make_cert
cat > "$work/openssl-client.cnf" <<CONF
openssl_conf = default_conf
[default_conf]
ssl_conf = ssl_sect
[ssl_sect]
system_default = system_default_sect
[system_default_sect]
MinProtocol = TLSv1.3
Ciphersuites = TLS_AES_128_GCM_SHA256
CONF
export OPENSSL_CONF=$work/openssl-client.cnf

# --- nginx: one process, TLS 1.2 and 1.3, a shared session cache and tickets.
nginx_port=$(free_port)
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
master_process off;
daemon off;
worker_rlimit_nofile $(ulimit -n);
error_log $work/nginx/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections $((IDLE + 1024)); use epoll; multi_accept on; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 1s;
    types { text/plain txt; application/octet-stream bin; }
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_cache shared:SSL:10m;
    ssl_session_tickets on;
    server {
        listen 127.0.0.1:$nginx_port ssl reuseport backlog=16384;
        ssl_certificate $work/cert.pem;
        ssl_certificate_key $work/key.pem;
        root $site;
    }
}
CONF
taskset -c $SERVER_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!

# --- h2o: one thread.
start_h2o_tls "$site" $SERVER_CPU "$((IDLE + 1024))"

# --- the TLS floor (bench/tls-floor.c): one recv, one record each way, one send.
cc -O2 -o "$work/tls-floor" bench/tls-floor.c -lssl -lcrypto
floor_port=$(free_port)
taskset -c $SERVER_CPU "$work/tls-floor" "$floor_port" "$work/cert.pem" "$work/key.pem" &
pids+=($!); floor_pid=$!

# --- tessera: one worker, a cleartext listener beside the TLS one (for the memory case).
tessera_port=$(free_port)
tessera_plain=$(free_port)
echo "max_connections = $((IDLE + 1024))" > "$work/tessera.toml"
taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/tessera.toml" --root "$site" \
    --listen "127.0.0.1:$tessera_plain" --tls-listen "127.0.0.1:$tessera_port" \
    --cert "$work/cert.pem" --key "$work/key.pem" --workers 1 --backlog 16384 \
    2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!

# wait_tls PORT: waits (at most 10 s) until https://localhost:PORT/12b.txt answers.
wait_tls() {
    for _ in $(seq 100); do
        curl -fsk -o /dev/null "https://127.0.0.1:$1/12b.txt" && return 0
        sleep 0.1
    done
    echo "TLS server on port $1 did not start" >&2
    exit 1
}
wait_tls "$nginx_port"; wait_tls "$h2o_port"; wait_tls "$tessera_port"; wait_tls "$floor_port"
servers="tessera nginx h2o"
peers="nginx h2o"
declare -A pid_of=([nginx]=$nginx_pid [tessera]=$tessera_pid [h2o]=$h2o_pid [floor]=$floor_pid)
declare -A port_of=([nginx]=$nginx_port [tessera]=$tessera_port [h2o]=$h2o_port [floor]=$floor_port)
if [ -n "${BASE_BIN:-}" ]; then
    base_port=$(free_port)
    taskset -c $SERVER_CPU "$BASE_BIN" serve --config "$work/tessera.toml" --root "$site" \
        --listen "127.0.0.1:$(free_port)" --tls-listen "127.0.0.1:$base_port" \
        --cert "$work/cert.pem" --key "$work/key.pem" --workers 1 --backlog 16384 \
        2>"$work/base.log" &
    pids+=($!); pid_of[base]=$!; port_of[base]=$base_port
    wait_tls "$base_port"
    servers+=" base"; peers+=" base"
fi
for s in $servers; do
    got=$(openssl s_client -connect "127.0.0.1:${port_of[$s]}" -brief </dev/null 2>&1 |
        awk -F': ' '/Protocol version|Ciphersuite/ {printf "%s ", $2}')
    echo "# $s: $got"
done

echo "# $(date -u +%F) $(nproc) cores, $(uname -r); server on core $SERVER_CPU, load on core $LOAD_CPU; median of $ROUNDS rounds of ${SECONDS_PER_RUN}s"
echo "# $(nginx -v 2>&1 | tr -d '\n'); $(h2o --version | head -1); $(openssl version)"

# ratios NAME: prints tessera's CPU per request against each peer's.
ratios() {
    for s in $peers; do
        awk -v o="${cpu_med[$s]}" -v t="${cpu_med[tessera]}" -v n="$1" -v s="$s" \
            'BEGIN { printf "%-12s tessera/%s: cpu per request x%.2f (%s/tessera)\n", n, s, o / t, s }'
    done
}

# run_case NAME PATH CONNECTIONS [WRK ARGS...]: ROUNDS rounds of wrk, servers in turn.
run_case() {
    local name=$1 path=$2 connections=$3 s rps cpu
    shift 3
    declare -A rps_runs=() cpu_runs=()
    for _ in $(seq "$ROUNDS"); do
        for s in $servers; do
            read -r rps cpu < <(measure "${pid_of[$s]}" "https://127.0.0.1:${port_of[$s]}$path" $LOAD_CPU "$connections" "$SECONDS_PER_RUN" "$@")
            rps_runs[$s]+="$rps "
            cpu_runs[$s]+="$cpu "
        done
    done
    declare -g -A rps_med=() cpu_med=()
    for s in $servers; do
        rps_med[$s]=$(echo "${rps_runs[$s]}" | tr ' ' '\n' | grep . | median)
        cpu_med[$s]=$(echo "${cpu_runs[$s]}" | tr ' ' '\n' | grep . | median)
        printf '%-12s %-8s %12.0f %12.2f   (runs: %s; cpu: %s)\n' "$name" "$s" "${rps_med[$s]}" "${cpu_med[$s]}" "${rps_runs[$s]% }" "${cpu_runs[$s]% }"
    done
    ratios "$name"
}

printf '%-12s %-8s %12s %12s\n' case server "requests/s" "cpu us/req"
# The 12-byte case runs the TLS floor too: what the 2x-cheaper-than-nginx target means in
# floors (nothing can cost less than one floor).
servers+=" floor"
run_case keepalive-12b /12b.txt 100
servers=${servers% floor}
awk -v n="${cpu_med[nginx]}" -v t="${cpu_med[tessera]}" -v f="${cpu_med[floor]}" \
    'BEGIN { printf "keepalive-12b in TLS floors (%.2f us): tessera %.2f, nginx %.2f; 2x cheaper than nginx would be %.2f\n", f, t / f, n / f, n / 2 / f }'
for file in 64k.bin 1m.bin; do
    run_case "keepalive-${file%.bin}" "/$file" 100
    size=$(stat -c %s "$site/$file")
    for s in $servers; do
        awk -v c="${cpu_med[$s]}" -v b="$size" -v s="$s" -v f="$file" \
            'BEGIN { printf "%-12s %-8s %.0f MB per server CPU second\n", f, s, b / c }'
    done
done
run_case close-12b /12b.txt 50 -H 'Connection: close'

# s_time MODE: openssl s_time -new or -reuse for SECONDS_PER_RUN against each server, one
# connection at a time; prints connections/s and server CPU per connection.
echo "# openssl s_time (one connection at a time, each fetching /12b.txt)"
printf '%-12s %-8s %12s %12s\n' case server "conns/time" "cpu us/conn"
for mode in new reuse; do
    declare -A cpu_med=()
    for s in $servers; do
        runs=""
        for _ in $(seq "$ROUNDS"); do
            before=$(cpu_ticks "${pid_of[$s]}")
            out=$(taskset -c $LOAD_CPU openssl s_time -connect "127.0.0.1:${port_of[$s]}" \
                -www /12b.txt -"$mode" -time "$SECONDS_PER_RUN" 2>&1 || true)
            after=$(cpu_ticks "${pid_of[$s]}")
            conns=$(echo "$out" | awk '/connections in .* real seconds/ {print $1; exit}')
            runs+="$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="${conns:-0}" \
                'BEGIN { if (n > 0) printf "%.1f", t * 1e6 / hz / n; else print "nan" }') "
            rate=$(echo "$out" | awk '/connections\/user sec/ {print $(NF-3); exit}')
        done
        cpu_med[$s]=$(echo "$runs" | tr ' ' '\n' | grep . | median)
        printf '%-12s %-8s %12s %12.1f   (cpu: %s)\n' "s_time-$mode" "$s" "${conns:-0}/${SECONDS_PER_RUN}s" "${cpu_med[$s]}" "${runs% }"
    done
    ratios "s_time-$mode"
done

# Memory: IDLE idle keep-alive connections, each answered once over TLS (a Python
# holder on core 1; connections close with a reset when it exits).
cat > "$work/hold.py" <<'PY'
import socket, ssl, struct, sys, time
port, n, tls = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "tls"
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
conns = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    if tls:
        s = ctx.wrap_socket(s, server_hostname="localhost")
    s.sendall(b"GET /12b.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
    got = b""
    while not got.endswith(b"hello world\n"):
        chunk = s.recv(4096)
        if not chunk:
            sys.exit("server closed a connection")
        got += chunk
    conns.append(s)
print("ready", flush=True)
time.sleep(3600)
PY
echo "# memory: $IDLE idle keep-alive connections, each answered once"
printf '%-16s %14s %14s %12s\n' server "start RSS KiB" "idle RSS KiB" "bytes/conn"
for s in tessera-plain $servers; do
    case $s in
        tessera-plain) pid=$tessera_pid; port=$tessera_plain; mode=plain ;;
        *) pid=${pid_of[$s]}; port=${port_of[$s]}; mode=tls ;;
    esac
    start=$(rss_kib "$pid")
    taskset -c $LOAD_CPU python3 "$work/hold.py" "$port" "$IDLE" "$mode" > "$work/hold-$s.out" &
    holder=$!; pids+=($holder)
    for _ in $(seq 3000); do
        grep -q ready "$work/hold-$s.out" && break
        kill -0 "$holder" 2>/dev/null || { echo "holder for $s failed" >&2; break; }
        sleep 0.1
    done
    sleep 1
    idle=$(rss_kib "$pid")
    kill "$holder" 2>/dev/null || true
    wait "$holder" 2>/dev/null || true
    sleep 2
    printf '%-16s %14s %14s %12s\n' "$s" "$start" "$idle" "$(( (idle - start) * 1024 / IDLE ))"
done
