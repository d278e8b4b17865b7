#!/usr/bin/env bash
# Upstream protocols (issue 44): tessera against nginx as reverse proxies of the same
# origin, side by side in one run.
#
#   https:  1 KB responses from an HTTPS origin (nginx with TLS, one worker, on the load
#           core), keep-alive clients (wrk -t1 -cCONNECTIONS, on the load core). nginx:
#           `proxy_pass https://`, `proxy_ssl_session_reuse on`, `keepalive 32` with
#           HTTP/1.1; tessera: an [[upstream]] with `tls = true` and `max_idle = 32`.
#           Both verify the origin's certificate against the test CA. Target: tessera
#           at least 1.3x cheaper per request than nginx.
#
# Each proxy runs one worker pinned to core 0; they take turns in every round. Printed:
# the median requests/s and the median proxy CPU time per request (utime+stime of the
# proxy's process tree from /proc, divided by the requests wrk completed), and the ratio
# nginx/tessera. The floor (bench/floor.c, one recv and one send per request, a fixed
# 1 KB response) is measured on core 0 the same way, for scale.
#
# usage: bench/upstream-protocols.sh   (env: ROUNDS=5 SECONDS_PER_RUN=5 CONNECTIONS=50
#                                       NO_BUILD=1 to skip cargo, TESSERA=another build)
# Needs: nginx, wrk, curl, openssl, cc, taskset, python3 (apt-get when missing; as root).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-50}
PROXY_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need wrk wrk
need curl curl
need openssl openssl
need cc gcc
need taskset util-linux
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

# run_wrk PID URL: one wrk run on the load core; prints "requests requests/s cpu-us-per-request"
# for the server PID.
run_wrk() {
    local pid=$1 url=$2 before after out requests rps
    before=$(cpu_ticks "$pid")
    out=$(taskset -c $LOAD_CPU wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" "$url")
    after=$(cpu_ticks "$pid")
    if echo "$out" | grep -q "Non-2xx\|Socket errors"; then echo "wrk reported errors for $url: $out" >&2; fi
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    echo "$requests $rps $(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$requests" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')"
}

nginx_conf() { # NAME HTTP-BLOCK
    mkdir -p "$work/$1"
    cat > "$work/$1/nginx.conf" <<CONF
$(nginx_head "$work/$1")
http {
    access_log off;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path $work/$1;
    proxy_temp_path $work/$1;
    fastcgi_temp_path $work/$1;
    uwsgi_temp_path $work/$1;
    scgi_temp_path $work/$1;
    $2
}
CONF
}

# --- the origin: nginx with TLS, one worker, on the load core.
origin_port=$(free_port)
nginx_conf origin "server {
        listen 127.0.0.1:$origin_port ssl;
        ssl_certificate $work/origin.pem;
        ssl_certificate_key $work/origin.key;
        ssl_session_cache shared:origin:1m;
        root $site;
    }"
taskset -c $LOAD_CPU nginx -c "$work/origin/nginx.conf" -e "$work/origin/error.log" &
pids+=($!)

# --- the floor, on the proxies' core (its proxy floor is not started: no TLS in it).
cc -O2 -o "$work/floor" bench/floor.c
floor_port=$(free_port)
taskset -c $PROXY_CPU "$work/floor" "$floor_port" 1024 &
pids+=($!); floor_pid=$!

# --- nginx as the proxy.
nginx_port=$(free_port)
nginx_conf nginx "upstream origin { server 127.0.0.1:$origin_port; keepalive 32; keepalive_requests 1000000; }
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
    }"
taskset -c $PROXY_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!

# --- tessera as the proxy.
cat > "$work/tessera.toml" <<CONF
[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port"]
tls = true
ca = "$work/ca.pem"
max_idle = 32

[[route]]
prefix = "/"
upstream = "origin"
CONF
tessera_port=$(free_port)
taskset -c $PROXY_CPU "$TESSERA" serve --config "$work/tessera.toml" --listen "127.0.0.1:$tessera_port" --workers 1 2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!

for p in "$floor_port" "$nginx_port" "$tessera_port"; do wait_up "$p" 1k.txt; done
for p in nginx tessera; do
    port=$nginx_port; [ $p = tessera ] && port=$tessera_port
    cmp -s <(curl -fs "http://127.0.0.1:$port/1k.txt") "$site/1k.txt" || { echo "check: $p does not relay 1k.txt byte-exact" >&2; exit 1; }
done
echo "check: both proxies relay 1k.txt from the HTTPS origin byte-exact"

echo "# $(date -u +'%F %H:%M UTC'), $(nproc) cores, $(uname -r); $(nginx -v 2>&1 | sed 's/.*: //'); proxies on core $PROXY_CPU, the HTTPS origin (nginx) and wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
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
