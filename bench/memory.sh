#!/usr/bin/env bash
# Resident memory (VmRSS) of tessera and nginx, one worker each, side by side:
#   1. holding 10,000 idle keep-alive connections (each has been answered once);
#   2. after 10,000 keep-alive connections of load (wrk -c 10000, ~50 requests each).
# Target: tessera at most 16 MiB with 10,000 idle connections, and not more than nginx.
#
# usage: bench/memory.sh [CONNECTIONS]     (default 10000)
set -euo pipefail
cd "$(dirname "$0")/.."
CONNECTIONS=${1:-10000}
ulimit -n "$(ulimit -Hn)"

source bench/lib.sh
need nginx nginx
need wrk wrk
need python3 python3

cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera

make_work memory
mkdir -p "$work/site" "$work/nginx"
printf 'hello world\n' > "$work/site/12b.txt"

nginx_port=$(free_port)
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
master_process off;
daemon off;
worker_rlimit_nofile 65536;
error_log $work/nginx/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections 16384; use epoll; }  # as many as tessera's max_connections
http {
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    server { listen 127.0.0.1:$nginx_port backlog=16384; root $work/site; }
}
CONF
taskset -c 0 nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!
tessera_port=$(free_port)
taskset -c 0 "$TESSERA" serve --root "$work/site" --listen "127.0.0.1:$tessera_port" --workers 1 --backlog 16384 2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!
wait_up "$nginx_port" 12b.txt; wait_up "$tessera_port" 12b.txt

# Opens N connections, sends one request on each, reads each response, and holds them
# idle until its stdin closes. Prints "ready" when all are answered.
cat > "$work/hold.py" <<'PY'
import selectors, socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
request = b"GET /12b.txt HTTP/1.1\r\nHost: t\r\n\r\n"
sel = selectors.DefaultSelector()
socks, pending = [], 0
for i in range(n):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", port))
    sel.register(s, selectors.EVENT_WRITE, [b""])
    socks.append(s)
    pending += 1
    # Keep the number of connects in flight bounded so the backlog never overflows.
    while pending > 512 or (i == n - 1 and pending > 0):
        for key, ev in sel.select(timeout=10):
            s, buf = key.fileobj, key.data
            if ev & selectors.EVENT_WRITE:
                s.send(request)
                sel.modify(s, selectors.EVENT_READ, buf)
            else:
                data = s.recv(4096)
                if not data:
                    sys.exit("server closed a connection")
                buf[0] += data
                if buf[0].endswith(b"hello world\n"):
                    sel.unregister(s)
                    pending -= 1
print("ready", flush=True)
sys.stdin.read()
PY

echo "# $(date -u +%F) $(nproc) cores, $(uname -r); one worker each on core 0, clients on core 1"
printf '%-8s %14s %18s %22s\n' server "start RSS KiB" "${CONNECTIONS} idle KiB" "after ${CONNECTIONS}-conn load KiB"
for s in nginx tessera; do
    if [ "$s" = nginx ]; then pid=$nginx_pid; port=$nginx_port; else pid=$tessera_pid; port=$tessera_port; fi
    start=$(rss_kib "$pid")
    coproc HOLD { taskset -c 1 python3 "$work/hold.py" "$port" "$CONNECTIONS"; }
    read -r line <&"${HOLD[0]}"
    [ "$line" = ready ] || { echo "holder failed" >&2; exit 1; }
    sleep 1
    idle=$(rss_kib "$pid")
    exec {HOLD[1]}>&-
    wait "$HOLD_PID" 2>/dev/null || true
    sleep 1
    # Load over as many keep-alive connections (about 50 requests each at these rates).
    taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d20s "http://127.0.0.1:$port/12b.txt" > "$work/wrk-$s.txt" 2>&1 || true
    sleep 1
    after=$(rss_kib "$pid")
    printf '%-8s %14s %18s %22s   (%s)\n' "$s" "$start" "$idle" "$after" "$(awk '/requests in/ {print $1 " requests"}' "$work/wrk-$s.txt")"
    eval "${s}_idle=$idle"
done
awk -v t="$tessera_idle" -v n="$nginx_idle" 'BEGIN { printf "idle: tessera %.1f MiB, nginx %.1f MiB, ratio tessera/nginx %.2f (target: <= 16 MiB and <= nginx)\n", t/1024, n/1024, t/n }'
