#!/usr/bin/env bash
# Static files: tessera against nginx (and h2o when installed), side by side in one run.
#
# Each server runs with one worker pinned to core 0; wrk drives it from core 1 with 100
# keep-alive connections. For each file size and round the servers take turns, so both
# see the same machine noise; the script prints the median requests/s and the median
# server CPU time per request (utime+stime of the server's process from /proc, divided by
# the requests completed), and the ratios.
#
# Mode `close` opens a connection for every request instead (wrk -H 'Connection: close',
# 50 connections, the 12-byte file only), as health checkers, scripts, `ab` without -k
# and HTTP/1.0 proxies do: the CPU figure is then per connection and request. With
# BASE_BIN=path/to/an/older/tessera that build runs beside the others as "base", so a
# change is measured before and after in the same run.
#
# usage: bench/peers.sh [ROUNDS] [SECONDS] [keepalive|close]
#        (defaults: 5 rounds of 5 s per server, keepalive; env FILES="12b.txt" to run
#        fewer of the keep-alive files, BASE_BIN as above)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
SECONDS_PER_RUN=${2:-5}
MODE=${3:-keepalive}
case $MODE in
    keepalive) CONNECTIONS=100; FILES=${FILES:-12b.txt 64k.bin 1m.bin}; WRK_ARGS=() ;;
    close) CONNECTIONS=50; FILES="12b.txt"; WRK_ARGS=(-H 'Connection: close') ;;
    *) echo "unknown mode $MODE (keepalive or close)" >&2; exit 2 ;;
esac
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need wrk wrk
need taskset util-linux

cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera

make_work peers

site=$work/site
mkdir -p "$site"
printf 'hello world\n' > "$site/12b.txt"
head -c 65536 /dev/urandom > "$site/64k.bin"
head -c 1048576 /dev/urandom > "$site/1m.bin"

# --- nginx: one process (master_process off), sendfile, open file cache, no access log.
nginx_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
$(nginx_head "$work/nginx")
http {
$(nginx_keepalive)
    types { text/plain txt; application/octet-stream bin; }
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    server {
        listen 127.0.0.1:$nginx_port reuseport;
        root $site;
    }
}
CONF
taskset -c $SERVER_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!

# --- tessera: one worker.
tessera_port=$(free_port)
taskset -c $SERVER_CPU "$TESSERA" serve --root "$site" --listen "127.0.0.1:$tessera_port" --workers 1 2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!

# --- the floor (bench/floor.c), for the 12-byte file: a C epoll server that reads a
# request and sends a fixed 12-byte response with one recv and one send (in mode close,
# with the FIN, then closes), nothing else; what a server costs above it is its own work.
cc -O2 -o "$work/floor" bench/floor.c
floor_port=$(free_port)
if [ "$MODE" = close ]; then
    taskset -c $SERVER_CPU "$work/floor" "$floor_port" 12 close &
else
    taskset -c $SERVER_CPU "$work/floor" "$floor_port" 12 &
fi
pids+=($!); floor_pid=$!

# --- h2o, the fastest static server packaged here, when installed: one thread.
h2o_pid=""
if command -v h2o >/dev/null 2>&1; then
    h2o_port=$(free_port)
    cat > "$work/h2o.conf" <<CONF
num-threads: 1
listen:
  host: 127.0.0.1
  port: $h2o_port
error-log: $work/h2o-error.log
hosts:
  default:
    paths:
      /:
        file.dir: $site
CONF
    taskset -c $SERVER_CPU h2o -c "$work/h2o.conf" >/dev/null 2>&1 &
    pids+=($!); h2o_pid=$!
fi

# --- an older tessera build, when asked for: one worker.
base_pid=""
if [ -n "${BASE_BIN:-}" ]; then
    base_port=$(free_port)
    taskset -c $SERVER_CPU "$BASE_BIN" serve --root "$site" --listen "127.0.0.1:$base_port" --workers 1 2>"$work/base.log" &
    pids+=($!); base_pid=$!
fi

wait_up "$nginx_port" 12b.txt; wait_up "$tessera_port" 12b.txt
[ -n "$h2o_pid" ] && wait_up "$h2o_port" 12b.txt
[ -n "$base_pid" ] && wait_up "$base_port" 12b.txt
[ -n "$floor_pid" ] && wait_up "$floor_port" 12b.txt

servers="nginx tessera"
[ -n "$h2o_pid" ] && servers="$servers h2o"
[ -n "$base_pid" ] && servers="$servers base"
[ -n "$floor_pid" ] && servers="$servers floor"
declare -A pid_of=([nginx]=$nginx_pid [tessera]=$tessera_pid [h2o]=$h2o_pid [base]=$base_pid [floor]=$floor_pid)
declare -A port_of=([nginx]=$nginx_port [tessera]=$tessera_port [h2o]=${h2o_port:-0} [base]=${base_port:-0} [floor]=${floor_port:-0})

echo "# $(date -u +%F) $(nproc) cores, $(uname -r); mode $MODE; server on core $SERVER_CPU, wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s ${WRK_ARGS[*]} on core $LOAD_CPU; median of $ROUNDS rounds"
printf '%-8s %-8s %12s %12s\n' file server "requests/s" "cpu us/req"
for file in $FILES; do
    declare -A rps_runs=() cpu_runs=()
    here=$servers
    [ "$file" = 12b.txt ] || here=${servers% floor}
    for _ in $(seq "$ROUNDS"); do
        for s in $here; do
            read -r rps cpu < <(measure "${pid_of[$s]}" "http://127.0.0.1:${port_of[$s]}/$file" $LOAD_CPU $CONNECTIONS "$SECONDS_PER_RUN" "${WRK_ARGS[@]}")
            rps_runs[$s]+="$rps "
            cpu_runs[$s]+="$cpu "
        done
    done
    declare -A rps_med=() cpu_med=()
    for s in $here; do
        rps_med[$s]=$(echo "${rps_runs[$s]}" | tr ' ' '\n' | grep . | median)
        cpu_med[$s]=$(echo "${cpu_runs[$s]}" | tr ' ' '\n' | grep . | median)
        printf '%-8s %-8s %12.0f %12.2f   (runs: %s)\n' "$file" "$s" "${rps_med[$s]}" "${cpu_med[$s]}" "${rps_runs[$s]% }"
    done
    awk -v t="${rps_med[tessera]}" -v n="${rps_med[nginx]}" -v tc="${cpu_med[tessera]}" -v nc="${cpu_med[nginx]}" -v f="$file" \
        'BEGIN { printf "%-8s tessera/nginx: requests/s x%.2f, cpu per request x%.2f (nginx/tessera)\n", f, t / n, nc / tc }'
    for s in h2o base; do
        [ -n "${cpu_med[$s]:-}" ] || continue
        awk -v o="${cpu_med[$s]}" -v tc="${cpu_med[tessera]}" -v f="$file" -v s="$s" \
            'BEGIN { printf "%-8s tessera/%s: cpu per request x%.2f (%s/tessera)\n", f, s, o / tc, s }'
    done
    if [ -n "${cpu_med[floor]:-}" ]; then
        awk -v fl="${cpu_med[floor]}" -v tc="${cpu_med[tessera]}" -v nc="${cpu_med[nginx]}" -v hc="${cpu_med[h2o]:-0}" -v bc="${cpu_med[base]:-0}" -v f="$file" \
            'BEGIN { printf "%-8s in floors (%.2f us): nginx %.2f, tessera %.2f%s%s; 1.2x cheaper than nginx would be %.2f floors\n", f, fl, nc / fl, tc / fl, (hc > 0 ? sprintf(", h2o %.2f", hc / fl) : ""), (bc > 0 ? sprintf(", base %.2f", bc / fl) : ""), nc / fl / 1.2 }'
    fi
    unset rps_runs cpu_runs rps_med cpu_med
done
