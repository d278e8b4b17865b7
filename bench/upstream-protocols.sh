#!/usr/bin/env bash
# Upstream protocols (issue 44): tessera against nginx as reverse proxies of the same
# origin, side by side in one run.
#
#   https:  1 KB responses from an HTTPS origin (nginx with TLS, one worker, on the load
#           core), keep-alive clients (wrk -t1 -cCONNECTIONS, on the load core). nginx:
#           `proxy_pass https://`, `proxy_ssl_session_reuse on`, `keepalive 32` with
#           HTTP/1.1; tessera: an [[upstream]] with `tls = true` and `max_idle = 32`
#           (HTTPS_POOL=N gives both N instead: with N above CONNECTIONS, few
#           connections are opened after the first ones).
#           Both verify the origin's certificate against the test CA. Target: tessera
#           at least 1.3x cheaper per request than nginx. Also printed: each proxy's TLS
#           connections to the origin by protocol, cipher and resumption (the origin has
#           a server block per proxy that logs each connection's first request).
#   upload: POSTs of UPLOAD_MIB MiB (wrk with a Lua script, -c UPLOAD_CONNECTIONS) through
#           each proxy to an origin that reads every body to its end, then answers (nginx
#           with the Lua module, on the load core): proxy CPU per GiB proxied. nginx: `proxy_request_buffering
#           off`, `client_max_body_size 0`, pooled HTTP/1.1; tessera: its defaults with
#           `max_body_size` raised. Target: tessera at least 1.2x cheaper.
#   grpc:   unary gRPC calls (helloworld.Greeter/SayHello) from ghz (-c GRPC_CONCURRENCY over
#           GRPC_CONNECTIONS connections, on the load core) through each proxy, over h2c on
#           both sides, to a Go gRPC origin (bench/grpc-origin.go, GOMAXPROCS=1, on the load
#           core). nginx: `grpc_pass` to an upstream with `keepalive 32`; tessera: an
#           [[upstream]] with `protocol = "h2c"` behind an `h2c_listen` address. Proxy CPU
#           per call answered OK. Target: tessera at least 1.5x cheaper.
#
# Each proxy runs one worker pinned to core 0; they take turns in every round. Printed:
# the median requests/s and the median proxy CPU time per request (utime+stime of the
# proxy's process tree from /proc, divided by the requests wrk completed), and the ratio
# nginx/tessera. The floor (bench/floor.c, one recv and one send per request, a fixed
# 1 KB response) is measured on core 0 the same way, for scale.
#
# usage: bench/upstream-protocols.sh   (env: PARTS="https upload grpc" ROUNDS=5 SECONDS_PER_RUN=5
#                                       CONNECTIONS=50 HTTPS_POOL=32 UPLOAD_MIB=8 UPLOAD_CONNECTIONS=4
#                                       GRPC_CONCURRENCY=50 GRPC_CONNECTIONS=5
#                                       NO_BUILD=1 to skip cargo, TESSERA=another build)
# Needs: nginx (and libnginx-mod-http-lua), wrk, curl, openssl, cc, taskset, python3 (apt-get when missing; as root);
# for grpc, Go (ghz is installed with `go install` when missing, the origin built with the
# grpc module from the Go proxy).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-50}
HTTPS_POOL=${HTTPS_POOL:-32}
PARTS=${PARTS:-https upload grpc}
UPLOAD_MIB=${UPLOAD_MIB:-8}
UPLOAD_CONNECTIONS=${UPLOAD_CONNECTIONS:-4}
GRPC_CONCURRENCY=${GRPC_CONCURRENCY:-50}
GRPC_CONNECTIONS=${GRPC_CONNECTIONS:-5}
PROXY_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need wrk wrk
need curl curl
need openssl openssl
need cc gcc
need taskset util-linux
modules=/usr/lib/nginx/modules
[ -f "$modules/ngx_http_lua_module.so" ] || { apt-get update -qq && apt-get install -y -qq libnginx-mod-http-lua >/dev/null; }
if [ "$(nproc --all)" -lt 2 ]; then echo "needs at least 2 cores" >&2; exit 1; fi

[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
TESSERA=${TESSERA:-$PWD/target/release/tessera}

make_work upstream-protocols
site=$work/site
mkdir -p "$site"
head -c 1024 /dev/zero | tr '\0' 'a' > "$site/1k.txt"

# --- a test CA and the origin's certificate for 127.0.0.1.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -keyout "$work/ca.key" -out "$work/ca.pem" -subj /CN=bench-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -keyout "$work/origin.key" -out "$work/origin.csr" -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n' > "$work/ext.cnf"
openssl x509 -req -in "$work/origin.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -CAcreateserial -days 2 -extfile "$work/ext.cnf" -out "$work/origin.pem" 2>/dev/null



# --- the origin: nginx with TLS, one worker, on the load core.
# Each proxy has a server block (a port) of its own, whose log has a line per TLS
# connection (its first request): the protocol and whether the session was resumed.
origin_port=$(free_port)
origin_port_tessera=$(free_port)
upload_origin_port=$(free_port)
origin_server() { # PORT LOG
    echo "server {
        listen 127.0.0.1:$1 ssl;
        ssl_certificate $work/origin.pem;
        ssl_certificate_key $work/origin.key;
        ssl_session_cache shared:origin:1m;
        access_log $2 handshake buffer=64k flush=1s if=\$new_connection;
        root $site;
    }"
}
nginx_http_conf origin "map \$connection_requests \$new_connection { 1 1; default 0; }
    log_format handshake '\$ssl_protocol \$ssl_cipher \$ssl_session_reused';
    $(origin_server "$origin_port" "$work/origin/handshakes-nginx.log")
    $(origin_server "$origin_port_tessera" "$work/origin/handshakes-tessera.log")
"
taskset -c $LOAD_CPU nginx -c "$work/origin/nginx.conf" -e "$work/origin/error.log" &
pids+=($!)
# The upload origin reads every body to its end, 64 KiB at a time, then answers (nginx's
# `return 200` would answer first, and a proxy then cuts the client's upload short).
mkdir -p "$work/upload-origin"
cat > "$work/upload-origin/nginx.conf" <<CONF
load_module $modules/ndk_http_module.so;
load_module $modules/ngx_http_lua_module.so;
$(nginx_head "$work/upload-origin")
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path $work/upload-origin;
    server {
        listen 127.0.0.1:$upload_origin_port;
        client_max_body_size 0;
        location / {
            content_by_lua_block {
                local left = tonumber(ngx.var.http_content_length) or 0
                if left > 0 then
                    local sock = assert(ngx.req.socket())
                    while left > 0 do
                        local n = math.min(left, 65536)
                        assert(sock:receive(n))
                        left = left - n
                    end
                end
                ngx.say("ok")
            }
        }
    }
}
CONF
taskset -c $LOAD_CPU nginx -c "$work/upload-origin/nginx.conf" -e "$work/upload-origin/error.log" &
pids+=($!)

# --- the floor, on the proxies' core (its proxy floor is not started: no TLS in it).
cc -O2 -o "$work/floor" bench/floor.c
floor_port=$(free_port)
taskset -c $PROXY_CPU "$work/floor" "$floor_port" 1024 &
pids+=($!); floor_pid=$!

# --- nginx as the proxy.
nginx_port=$(free_port)
nginx_upload_port=$(free_port)
nginx_http_conf nginx "upstream origin { server 127.0.0.1:$origin_port; keepalive $HTTPS_POOL; keepalive_requests 1000000; }
    server {
        listen 127.0.0.1:$nginx_port reuseport;
        location / {
            proxy_pass https://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_ssl_session_reuse on;
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate $work/ca.pem;
            proxy_ssl_name 127.0.0.1;
        }
    }
    upstream upload { server 127.0.0.1:$upload_origin_port; keepalive 32; keepalive_requests 1000000; }
    server {
        listen 127.0.0.1:$nginx_upload_port reuseport;
        client_max_body_size 0;
        location / {
            proxy_pass http://upload;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_request_buffering off;
        }
    }"
taskset -c $PROXY_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!

# --- tessera as the proxy.
cat > "$work/tessera.toml" <<CONF
[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port_tessera"]
tls = true
ca = "$work/ca.pem"
max_idle = $HTTPS_POOL

[[route]]
prefix = "/"
upstream = "origin"
CONF
tessera_port=$(free_port)
taskset -c $PROXY_CPU "$TESSERA" serve --config "$work/tessera.toml" --listen "127.0.0.1:$tessera_port" --workers 1 2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!
cat > "$work/tessera-upload.toml" <<CONF
[limits]
max_body_size = $(( (UPLOAD_MIB + 1) * 1048576 ))

[[upstream]]
name = "upload"
addresses = ["127.0.0.1:$upload_origin_port"]
max_idle = 32

[[route]]
prefix = "/"
upstream = "upload"
CONF
tessera_upload_port=$(free_port)
taskset -c $PROXY_CPU "$TESSERA" serve --config "$work/tessera-upload.toml" --listen "127.0.0.1:$tessera_upload_port" --workers 1 2>"$work/tessera-upload.log" &
pids+=($!); tessera_upload_pid=$!

for p in "$floor_port" "$nginx_port" "$tessera_port"; do wait_up "$p" 1k.txt; done
for p in "$nginx_upload_port" "$tessera_upload_port"; do wait_up "$p" up; done
for p in nginx tessera; do
    port=$nginx_port; [ $p = tessera ] && port=$tessera_port
    cmp -s <(curl -fs "http://127.0.0.1:$port/1k.txt") "$site/1k.txt" || { echo "check: $p does not relay 1k.txt byte-exact" >&2; exit 1; }
done
echo "check: both proxies relay 1k.txt from the HTTPS origin byte-exact"

echo "# $(date -u +'%F %H:%M UTC'), $(nproc) cores, $(uname -r); $(nginx -v 2>&1 | sed 's/.*: //'); proxies on core $PROXY_CPU, the origins (nginx) and wrk -t1 -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds; https pools of $HTTPS_POOL idle connections"
if [[ " $PARTS " == *" https "* ]]; then
printf '%-8s %-10s %12s %12s\n' part server "requests/s" "cpu us/req"
declare -A pid_of=([floor]=$floor_pid [nginx]=$nginx_pid [tessera]=$tessera_pid)
declare -A port_of=([floor]=$floor_port [nginx]=$nginx_port [tessera]=$tessera_port)
declare -A rps_runs=() cpu_runs=() cpu_med=()
servers="floor nginx tessera"
for round in $(seq "$ROUNDS"); do
    order=$servers
    [ $((round % 2)) = 0 ] && order=$(echo "$servers" | tr ' ' '\n' | tac | tr '\n' ' ')
    for s in $order; do
        read -r _ rps cpu < <(run_wrk "${pid_of[$s]}" "http://127.0.0.1:${port_of[$s]}/1k.txt")
        rps_runs[$s]+="$rps "
        cpu_runs[$s]+="$cpu "
    done
done
for s in $servers; do
    rps=$(echo "${rps_runs[$s]}" | tr ' ' '\n' | grep . | median)
    cpu_med[$s]=$(echo "${cpu_runs[$s]}" | tr ' ' '\n' | grep . | median)
    printf '%-8s %-10s %12.0f %12.2f   (cpu runs: %s)\n' https "$s" "$rps" "${cpu_med[$s]}" "${cpu_runs[$s]% }"
done
# Per-round ratios show the spread.
ratios=$(paste -d' ' <(echo "${cpu_runs[nginx]}" | tr ' ' '\n' | grep .) <(echo "${cpu_runs[tessera]}" | tr ' ' '\n' | grep .) |
    awk '{printf "%.2f\n", $1 / $2}')
awk -v n="${cpu_med[nginx]}" -v t="${cpu_med[tessera]}" -v f="${cpu_med[floor]}" -v r="$(echo "$ratios" | tr '\n' ' ')" 'BEGIN {
    printf "https    nginx/tessera cpu per request x%.2f (target >= 1.3; per round: %s); in floors: nginx %.2f, tessera %.2f\n", n / t, r, n / f, t / f }'
# What each proxy's connections to the origin were (its log is flushed every second).
sleep 1.5
for p in nginx tessera; do
    log=$work/origin/handshakes-$p.log
    [ -s "$log" ] || continue
    printf 'https    %-10s TLS connections to the origin: ' "$p"
    sort "$log" | uniq -c | sort -rn | awk '{ printf "%s%d %s %s%s", (NR > 1 ? ", " : ""), $1, $2, $3, ($4 == "r" ? " resumed" : " full") } END { print "" }'
done
fi

# --- upload: POSTs of UPLOAD_MIB MiB, proxy CPU per GiB.
if [[ " $PARTS " == *" upload "* ]]; then
cat > "$work/upload.lua" <<LUA
wrk.method = "POST"
wrk.body = string.rep("u", $UPLOAD_MIB * 1048576)
LUA
for p in nginx tessera; do
    port=$nginx_upload_port; [ $p = tessera ] && port=$tessera_upload_port
    code=$(head -c $((UPLOAD_MIB * 1048576)) /dev/zero | curl -s -o /dev/null -w '%{http_code}' --data-binary @- "http://127.0.0.1:$port/up")
    [ "$code" = 200 ] || { echo "check: $p answered $code to a ${UPLOAD_MIB} MiB POST" >&2; exit 1; }
done
echo "check: both proxies pass a ${UPLOAD_MIB} MiB POST to the origin (200)"
printf '%-8s %-10s %12s %14s\n' part server "requests/s" "cpu ms/GiB"
declare -A up_runs=()
for round in $(seq "$ROUNDS"); do
    order="nginx tessera"; [ $((round % 2)) = 0 ] && order="tessera nginx"
    for p in $order; do
        port=$nginx_upload_port pid=$nginx_pid
        [ $p = tessera ] && port=$tessera_upload_port pid=$tessera_upload_pid
        read -r requests _ cpu < <(CONNECTIONS=$UPLOAD_CONNECTIONS run_wrk "$pid" "http://127.0.0.1:$port/up" -s "$work/upload.lua")
        # cpu is us per request; per GiB: us/req * (1024 / UPLOAD_MIB) / 1000 = ms per GiB.
        up_runs[$p]+="$(awk -v c="$cpu" -v m="$UPLOAD_MIB" 'BEGIN { printf "%.1f", c * 1024 / m / 1000 }') "
    done
done
for p in nginx tessera; do
    printf '%-8s %-10s %12s %14.1f   (runs: %s)\n' upload "$p" "-" "$(echo "${up_runs[$p]}" | tr ' ' '\n' | grep . | median)" "${up_runs[$p]% }"
done
awk -v n="$(echo "${up_runs[nginx]}" | tr ' ' '\n' | grep . | median)" -v t="$(echo "${up_runs[tessera]}" | tr ' ' '\n' | grep . | median)" 'BEGIN {
    printf "upload   nginx/tessera cpu per GiB x%.2f (target >= 1.2)\n", n / t }'
fi

# --- grpc: unary calls through each proxy over h2c, proxy CPU per call.
if [[ " $PARTS " == *" grpc "* ]]; then
export PATH=$PATH:$(go env GOPATH)/bin
command -v ghz >/dev/null || go install github.com/bojand/ghz/cmd/ghz@latest
mkdir -p "$work/grpc-origin"
cp bench/grpc-origin.go "$work/grpc-origin/main.go"
(cd "$work/grpc-origin" && go mod init grpcorigin >/dev/null 2>&1 &&
    go get google.golang.org/grpc@v1.85.0 google.golang.org/protobuf >/dev/null 2>&1 &&
    go build -o grpc-origin .)
cat > "$work/helloworld.proto" <<'PROTO'
syntax = "proto3";
package helloworld;
service Greeter { rpc SayHello (HelloRequest) returns (HelloReply) {} }
message HelloRequest { string name = 1; }
message HelloReply { string message = 1; }
PROTO
grpc_origin_port=$(free_port)
GOMAXPROCS=1 taskset -c $LOAD_CPU "$work/grpc-origin/grpc-origin" "127.0.0.1:$grpc_origin_port" 2>"$work/grpc-origin.log" &
pids+=($!)
nginx_grpc_port=$(free_port)
nginx_http_conf nginx-grpc "upstream grpc_origin { server 127.0.0.1:$grpc_origin_port; keepalive 32; keepalive_requests 1000000; }
    server {
        listen 127.0.0.1:$nginx_grpc_port http2 reuseport;
        keepalive_requests 1000000;
        location / { grpc_pass grpc://grpc_origin; }
    }"
taskset -c $PROXY_CPU nginx -c "$work/nginx-grpc/nginx.conf" -e "$work/nginx-grpc/error.log" &
pids+=($!); nginx_grpc_pid=$!
cat > "$work/tessera-grpc.toml" <<CONF
[[upstream]]
name = "grpc"
addresses = ["127.0.0.1:$grpc_origin_port"]
protocol = "h2c"

[[route]]
prefix = "/"
upstream = "grpc"
CONF
tessera_grpc_port=$(free_port)
taskset -c $PROXY_CPU "$TESSERA" serve --config "$work/tessera-grpc.toml" --listen "127.0.0.1:$(free_port)" \
    --h2c-listen "127.0.0.1:$tessera_grpc_port" --workers 1 2>"$work/tessera-grpc.log" &
pids+=($!); tessera_grpc_pid=$!
sleep 1

# ghz_calls PID PORT [GHZ ARGS...]: one ghz run pinned to the load core; prints "calls/s
# cpu-us-per-call" for the proxy PID (calls answered OK; others are reported).
ghz_calls() {
    local pid=$1 port=$2 before after
    shift 2
    before=$(cpu_ticks "$pid")
    taskset -c $LOAD_CPU ghz --insecure --proto "$work/helloworld.proto" --call helloworld.Greeter.SayHello \
        -d '{"name":"bench"}' -O json "$@" "127.0.0.1:$port" >"$work/ghz.json" || true
    after=$(cpu_ticks "$pid")
    python3 - "$work/ghz.json" $((after - before)) "$(getconf CLK_TCK)" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
codes = d.get("statusCodeDistribution") or {}
ok = codes.get("OK", 0)
# ghz ends a timed run by closing its connections under the calls in flight: those end
# Unavailable ("transport is closing"), at most one per worker; more is a failure.
others = {k: v for k, v in codes.items() if k != "OK"}
if sum(others.values()) > int(d["options"]["concurrency"]) or not ok:
    print(f"ghz: calls not OK: {others} {d.get('errorDistribution')}", file=sys.stderr)
print(f"{ok / (d['total'] / 1e9):.0f} {int(sys.argv[2]) * 1e6 / int(sys.argv[3]) / max(ok, 1):.2f}")
PY
}
for p in nginx tessera; do
    port=$nginx_grpc_port; [ $p = tessera ] && port=$tessera_grpc_port
    for _ in $(seq 50); do
        ghz --insecure --proto "$work/helloworld.proto" --call helloworld.Greeter.SayHello \
            -d '{"name":"check"}' -c 1 -n 1 -O json "127.0.0.1:$port" >"$work/ghz-check.json" 2>&1 &&
            grep -q '"OK":1' "$work/ghz-check.json" && break
        sleep 0.2
    done
    grep -q '"OK":1' "$work/ghz-check.json" || { echo "check: $p does not pass a gRPC call: $(cat "$work/ghz-check.json")" >&2; exit 1; }
done
echo "check: both proxies pass a unary gRPC call to the origin (OK)"
printf '%-8s %-10s %12s %12s\n' part server "calls/s" "cpu us/call"
declare -A grpc_runs=() grpc_rps=()
for round in $(seq "$ROUNDS"); do
    order="nginx tessera"; [ $((round % 2)) = 0 ] && order="tessera nginx"
    for p in $order; do
        port=$nginx_grpc_port pid=$nginx_grpc_pid
        [ $p = tessera ] && port=$tessera_grpc_port pid=$tessera_grpc_pid
        read -r rps cpu < <(ghz_calls "$pid" "$port" -c "$GRPC_CONCURRENCY" --connections "$GRPC_CONNECTIONS" -z "${SECONDS_PER_RUN}s")
        grpc_runs[$p]+="$cpu "; grpc_rps[$p]+="$rps "
    done
done
for p in nginx tessera; do
    printf '%-8s %-10s %12.0f %12.2f   (runs: %s)\n' grpc "$p" "$(echo "${grpc_rps[$p]}" | tr ' ' '\n' | grep . | median)" \
        "$(echo "${grpc_runs[$p]}" | tr ' ' '\n' | grep . | median)" "${grpc_runs[$p]% }"
done
awk -v n="$(echo "${grpc_runs[nginx]}" | tr ' ' '\n' | grep . | median)" -v t="$(echo "${grpc_runs[tessera]}" | tr ' ' '\n' | grep . | median)" 'BEGIN {
    printf "grpc     nginx/tessera cpu per call x%.2f (target >= 1.5)\n", n / t }'
fi
