#!/usr/bin/env bash
# System calls per request, by kind: tessera beside its peers and the floors, under the
# same load in one run. A count, not a timing: it does not move with the machine's noise,
# and a call that should not be there (a read that can only say EAGAIN, a connection
# opened per request) shows as a number above its peer's. Read it beside the CPU
# benchmarks; it says nothing of what each call costs.
#
# Workloads (each server one worker pinned to core 0, the load on core 1):
#   static  a 1 KB file, HTTP/1.1 keep-alive, wrk -c50: tessera, nginx and bench/floor.c
#           (one recv and one send per request);
#   proxy   the same file proxied from a tessera origin (on core 1), wrk -c50: tessera
#           (`max_idle = 32`), nginx (`keepalive 32`) and bench/proxy-floor.c, as
#           bench/upstreams.sh's one-origin case;
#   h2      a 12-byte file over HTTP/2 and TLS 1.3, h2load -c100 -m10: tessera and h2o,
#           as bench/http2.sh's first case;
#   h2-page the 57 KB page over HTTP/2 and TLS 1.3, the same way: bench/http2.sh's second
#           case.
# Counted with perf's syscall tracepoints on every thread of the server over a run of
# SECONDS; printed per request completed: all calls, then each kind that makes at least
# 0.01 per request.
#
# usage: bench/syscalls.sh   (env: WORKLOADS="static proxy h2 h2-page" SECONDS_PER_RUN=4
#                             NO_BUILD=1 to skip cargo, TESSERA=path of another build)
# Needs: perf, nginx, h2o, wrk, h2load, curl, openssl, cc, taskset (apt-get installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKLOADS=${WORKLOADS:-static proxy h2 h2-page}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need perf linux-perf
need nginx nginx
need h2o h2o
need wrk wrk
need h2load nghttp2-client
need curl curl
need cc gcc
need python3 python3
need taskset util-linux
if [ "$(nproc --all)" -lt 2 ]; then echo "needs at least 2 cores" >&2; exit 1; fi

[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
if [ -n "${TESSERA:-}" ]; then
    build="$TESSERA"
else
    TESSERA=$PWD/target/release/tessera
    build="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo '+changes')"
fi

ulimit -n "$(ulimit -Hn)"
make_work syscalls
site=$work/site
mkdir -p "$site" "$work/nginx"
head -c 1024 /dev/zero | tr '\0' 'a' > "$site/1k.txt"
printf 'hello world\n' > "$site/12b.txt"
make_page "$site/page.html"
make_cert

# The origin of the proxy workload, on the load's core.
origin_port=$(free_port)
taskset -c $LOAD_CPU "$TESSERA" serve --root "$site" --listen "127.0.0.1:$origin_port" \
    --workers 1 2>"$work/origin.log" &
pids+=($!)
wait_up "$origin_port" 1k.txt

# nginx: the static site on one port, the proxy on another.
nginx_port=$(free_port); nginx_proxy_port=$(free_port)
cat > "$work/nginx/nginx.conf" <<CONF
$(nginx_head "$work/nginx")
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    open_file_cache max=1000 inactive=60s;
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    upstream origin { server 127.0.0.1:$origin_port; keepalive 32; keepalive_requests 1000000; }
    server { listen 127.0.0.1:$nginx_port reuseport; root $site; }
    server {
        listen 127.0.0.1:$nginx_proxy_port reuseport;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
CONF
taskset -c $SERVER_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!

# tessera: the static site (cleartext and TLS) in one process, the proxy in another.
tessera_port=$(free_port); tessera_tls_port=$(free_port)
taskset -c $SERVER_CPU "$TESSERA" serve --root "$site" --listen "127.0.0.1:$tessera_port" \
    --tls-listen "127.0.0.1:$tessera_tls_port" --cert "$work/cert.pem" --key "$work/key.pem" \
    --workers 1 --backlog 16384 2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!
tessera_proxy_port=$(free_port)
cat > "$work/proxy.toml" <<CONF
[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port"]
max_idle = 32

[[route]]
prefix = "/"
upstream = "origin"
CONF
taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/proxy.toml" \
    --listen "127.0.0.1:$tessera_proxy_port" --workers 1 2>"$work/tessera-proxy.log" &
pids+=($!); tessera_proxy_pid=$!

start_h2o_tls "$site" $SERVER_CPU
start_floors $SERVER_CPU "$origin_port"

for p in "$nginx_port" "$nginx_proxy_port" "$tessera_port" "$tessera_proxy_port" \
    "$floor_port" "$proxy_floor_port"; do
    wait_up "$p" 1k.txt
done
for p in "$tessera_tls_port" "$h2o_port"; do
    for _ in $(seq 100); do curl -fsk -o /dev/null "https://127.0.0.1:$p/12b.txt" && break; sleep 0.1; done
done

# census NAME PID LOAD...: runs LOAD (wrk or h2load, pinned to the load core) while perf
# counts PID's system calls; prints the calls per request.
census() {
    local name=$1 pid=$2 tids requests
    shift 2
    tids=$(ps -L -o lwp= --ppid "$pid" -p "$pid" | tr -s ' \n' ',' | sed 's/^,//;s/,$//')
    perf stat -x, -e 'raw_syscalls:sys_enter' -e 'syscalls:sys_enter_*' -t "$tids" \
        -o "$work/$name.perf" -- sleep $((SECONDS_PER_RUN + 1)) &
    local perf_pid=$!
    sleep 0.3
    taskset -c $LOAD_CPU "$@" > "$work/$name.load"
    wait "$perf_pid"
    if grep -q '^requests:' "$work/$name.load"; then
        requests=$(awk '/^requests:/ {print $8}' "$work/$name.load")
    else
        requests=$(awk '/requests in/ {print $1}' "$work/$name.load")
        if grep -q "Non-2xx\|Socket errors" "$work/$name.load"; then
            echo "$name: wrk reported errors" >&2
        fi
    fi
    awk -F, -v name="$name" -v n="$requests" '
        $1 ~ /^[0-9]+$/ && $3 == "raw_syscalls:sys_enter" { total = $1 }
        $1 ~ /^[0-9]+$/ && $3 ~ /^syscalls:sys_enter_/ && $1 / n >= 0.01 {
            sub("syscalls:sys_enter_", "", $3); kinds = kinds sprintf(" %s %.3f", $3, $1 / n) }
        END { printf "%-13s %9d requests %7.3f calls/req:%s\n", name, n, total / n, kinds }
    ' "$work/$name.perf"
}

echo "# $(date -u '+%F %H:%M') UTC; tessera $build; $(nginx -v 2>&1 | tr -d '\n'); $(h2o --version | head -1); $SECONDS_PER_RUN s per run"
wrk_run=(wrk -t1 -c50 -d"${SECONDS_PER_RUN}s")
h2_run=(h2load -c100 -m10 -t1 -D "$SECONDS_PER_RUN")
for w in $WORKLOADS; do
    case $w in
    static)
        census static-floor "$floor_pid" "${wrk_run[@]}" "http://127.0.0.1:$floor_port/1k.txt"
        census static-nginx "$nginx_pid" "${wrk_run[@]}" "http://127.0.0.1:$nginx_port/1k.txt"
        census static-tessera "$tessera_pid" "${wrk_run[@]}" "http://127.0.0.1:$tessera_port/1k.txt"
        ;;
    proxy)
        census proxy-floor "$proxy_floor_pid" "${wrk_run[@]}" "http://127.0.0.1:$proxy_floor_port/1k.txt"
        census proxy-nginx "$nginx_pid" "${wrk_run[@]}" "http://127.0.0.1:$nginx_proxy_port/1k.txt"
        census proxy-tessera "$tessera_proxy_pid" "${wrk_run[@]}" "http://127.0.0.1:$tessera_proxy_port/1k.txt"
        ;;
    h2)
        census h2-h2o "$h2o_pid" "${h2_run[@]}" "https://127.0.0.1:$h2o_port/12b.txt"
        census h2-tessera "$tessera_pid" "${h2_run[@]}" "https://127.0.0.1:$tessera_tls_port/12b.txt"
        ;;
    h2-page)
        census page-h2o "$h2o_pid" "${h2_run[@]}" "https://127.0.0.1:$h2o_port/page.html"
        census page-tessera "$tessera_pid" "${h2_run[@]}" "https://127.0.0.1:$tessera_tls_port/page.html"
        ;;
    *) echo "unknown workload $w" >&2; exit 1 ;;
    esac
done
