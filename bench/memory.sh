#!/usr/bin/env bash
# Resident memory (VmRSS) of tessera and nginx, one worker each, side by side:
#   1. holding CONNECTIONS idle keep-alive connections (each has been answered once);
#   2. after keep-alive load over up to 10,000 connections (wrk, 20 s).
# Targets: each idle connection costs tessera at most 1 KiB of RSS above its size at
# start, and tessera's RSS with them all open is below nginx's.
#
# The holders bind their sockets to 127.0.0.2, 127.0.0.3, ... (20,000 connections per
# source address), so the ephemeral ports suffice, and close with a reset (SO_LINGER 0)
# so nothing lingers in TIME_WAIT for the next server. They are several processes, so
# each stays under the per-process descriptor limit; the server needs CONNECTIONS
# descriptors in one process, so the script raises the limit and, when the hard limit
# (which only root with CAP_SYS_RESOURCE can raise) is lower, measures at the largest
# count that fits and says so.
#
# usage: bench/memory.sh [CONNECTIONS]     (default 100000)
set -euo pipefail
cd "$(dirname "$0")/.."
CONNECTIONS=${1:-100000}
ulimit -Hn $((CONNECTIONS + 2048)) 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" -lt $((CONNECTIONS + 1024)) ]; then
    echo "# the open-file limit is $(ulimit -n) here (hard limit; raising it needs CAP_SYS_RESOURCE): measuring $(($(ulimit -n) - 1024)) connections instead of $CONNECTIONS" >&2
    CONNECTIONS=$(($(ulimit -n) - 1024))
fi
PER_HOLDER=$(( $(ulimit -n) - 256 < 20000 ? $(ulimit -n) - 256 : 20000 ))

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
worker_rlimit_nofile $(ulimit -n);
error_log $work/nginx/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections $((CONNECTIONS + 1024)); use epoll; }  # as many as tessera's max_connections
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
echo "max_connections = $((CONNECTIONS + 1024))" > "$work/tessera.toml"
taskset -c 0 "$TESSERA" serve --config "$work/tessera.toml" --root "$work/site" --listen "127.0.0.1:$tessera_port" --workers 1 --backlog 16384 2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!
wait_up "$nginx_port" 12b.txt; wait_up "$tessera_port" 12b.txt

# Opens N connections from source address SOURCE, sends one request on each, reads each
# response, prints "ready" when all are answered and holds them idle until it is killed
# (its sockets then close with a reset: SO_LINGER 0).
cat > "$work/hold.py" <<'PY'
import selectors, socket, struct, sys, time
port, n, source = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
request = b"GET /12b.txt HTTP/1.1\r\nHost: t\r\n\r\n"
sel = selectors.DefaultSelector()
socks, pending = [], 0
for i in range(n):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.bind((source, 0))
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
while True:
    time.sleep(3600)
PY

# hold PORT: starts holders one after another (each PER_HOLDER connections from its own
# source address, 127.0.0.2 up) until CONNECTIONS are open and answered.
hold() {
    local port=$1 left=$CONNECTIONS i=2 n
    holder_pids=()
    while [ "$left" -gt 0 ]; do
        n=$(( left < PER_HOLDER ? left : PER_HOLDER ))
        taskset -c 1 python3 "$work/hold.py" "$port" "$n" "127.0.0.$i" > "$work/hold-$i.out" &
        holder_pids+=($!); pids+=($!)
        # One at a time (at most 5 minutes each): the backlog and the client core are shared.
        for _ in $(seq 3000); do
            grep -q ready "$work/hold-$i.out" && break
            kill -0 "$!" 2>/dev/null || { echo "holder $i failed" >&2; exit 1; }
            sleep 0.1
        done
        grep -q ready "$work/hold-$i.out" || { echo "holder $i timed out" >&2; exit 1; }
        left=$((left - n)); i=$((i + 1))
    done
}

# release: kills the holders; their connections close with a reset.
release() {
    local h
    for h in "${holder_pids[@]}"; do kill "$h" 2>/dev/null || true; done
    for h in "${holder_pids[@]}"; do wait "$h" 2>/dev/null || true; done
}

LOAD=$(( CONNECTIONS < 10000 ? CONNECTIONS : 10000 ))
echo "# $(date -u +%F) $(nproc) cores, $(uname -r); one worker each on core 0, clients on core 1"
printf '%-8s %14s %18s %14s %22s\n' server "start RSS KiB" "${CONNECTIONS} idle KiB" "bytes/conn" "after ${LOAD}-conn load KiB"
for s in nginx tessera; do
    if [ "$s" = nginx ]; then pid=$nginx_pid; port=$nginx_port; else pid=$tessera_pid; port=$tessera_port; fi
    start=$(rss_kib "$pid")
    hold "$port"
    sleep 1
    idle=$(rss_kib "$pid")
    release
    sleep 1
    # Load over up to 10,000 keep-alive connections (wrk takes one source address).
    taskset -c 1 wrk -t1 -c"$LOAD" -d20s "http://127.0.0.1:$port/12b.txt" > "$work/wrk-$s.txt" 2>&1 || true
    sleep 1
    after=$(rss_kib "$pid")
    per=$(( (idle - start) * 1024 / CONNECTIONS ))
    printf '%-8s %14s %18s %14s %22s   (%s)\n' "$s" "$start" "$idle" "$per" "$after" "$(awk '/requests in/ {print $1 " requests"}' "$work/wrk-$s.txt")"
    eval "${s}_idle=$idle ${s}_per=$per"
done
awk -v t="$tessera_idle" -v n="$nginx_idle" -v tp="$tessera_per" -v c="$CONNECTIONS" \
    'BEGIN { printf "%d idle: tessera %.1f MiB (%d bytes each above start), nginx %.1f MiB, ratio tessera/nginx %.2f (targets: <= 1024 bytes each, below nginx)\n", c, t/1024, tp, n/1024, t/n }'
