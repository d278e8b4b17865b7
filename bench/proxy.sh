#!/usr/bin/env bash
# The proxy path: tessera against nginx as reverse proxies of the same origin, side by side
# in one run, and an uncached ESI page against Varnish.
#
# The origin is a second tessera serving 1 KB and 64 KB files with no freshness
# information (Last-Modified only), so neither proxy stores anything and every request
# goes to the origin. Each proxy runs one worker pinned to core 0; the origin and wrk
# (-t1, CONNECTIONS keep-alive clients) share core 1. The proxies take turns in every
# round; the script prints the median requests/s and the median proxy CPU time per
# request (utime+stime of the proxy's process tree from /proc, divided by the requests
# wrk completed), and the ratios:
#   tuned:    upstream pools that keep every connection (nginx `keepalive 128` with
#             HTTP/1.1 to the origin; tessera max_connections = max_idle = 128);
#             target (issue 26): tessera at least 1.2x cheaper per request than nginx.
#   defaults: both as installed (nginx `proxy_pass` alone opens a connection per
#             request; tessera `serve --proxy URL`); targets: tessera at least 2x
#             cheaper, and at most 1 upstream connection opened per 1,000 requests
#             (tessera prints the connections it opened at exit).
#   esi:      a page of ESI_FRAGMENTS includes, nothing cached (bench/esi-origin.py
#             /uncached/page with no delay, on core 1): proxy CPU per page, tessera
#             against Varnish (ESI on, uncacheable), printed.
# Two floors are measured on core 0 the same way: bench/floor.c (one recv and one send
# per request, a fixed 1 KB response: the cheapest single hop) and bench/proxy-floor.c
# (a byte pipe in front of the same origin, one upstream connection per client
# connection: one recv and one send on each side, no parsing; the cheapest proxy any
# user-space program can be). Proxies are printed as multiples of the proxy floor, and
# every server's user and system time per request (medians of the rounds) apart.
#
# usage: bench/proxy.sh      (env: ROUNDS=5 SECONDS_PER_RUN=5 CONNECTIONS=50
#                             ESI_FRAGMENTS=9 NO_BUILD=1 to skip cargo, TESSERA=path of
#                             another build to measure)
# Needs: nginx, varnish, wrk, curl, cc, taskset, python3 (apt-get when missing; as root).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-50}
ESI_FRAGMENTS=${ESI_FRAGMENTS:-9}
PROXY_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need varnishd varnish
need wrk wrk
need curl curl
need cc gcc
need taskset util-linux
if [ "$(nproc --all)" -lt 2 ]; then echo "needs at least 2 cores" >&2; exit 1; fi

[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
TESSERA=${TESSERA:-$PWD/target/release/tessera}

make_work proxy
site=$work/site
mkdir -p "$site"
head -c 1024 /dev/zero | tr '\0' 'a' > "$site/1k.txt"
head -c 65536 /dev/zero | tr '\0' 'b' > "$site/64k.txt"


# --- the origin: tessera, one worker, on the load core.
origin_port=$(free_port)
taskset -c $LOAD_CPU "$TESSERA" serve --root "$site" --listen "127.0.0.1:$origin_port" --workers 1 2>"$work/origin.log" &
pids+=($!)
wait_up "$origin_port" 1k.txt

# --- the floors (bench/lib.sh), on the proxies' core.
start_floors $PROXY_CPU "$origin_port"

# --- nginx, tuned and default: one process each (master_process off), no access log.
nginx_conf() { # NAME PORT UPSTREAM-BLOCK LOCATION-BLOCK
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
    $3
    server {
        listen 127.0.0.1:$2 reuseport;
        location / { $4 }
    }
}
CONF
}
nginx_tuned_port=$(free_port)
nginx_conf nginx-tuned "$nginx_tuned_port" \
    "upstream origin { server 127.0.0.1:$origin_port; keepalive 128; keepalive_requests 1000000; }" \
    "proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection \"\";"
nginx_default_port=$(free_port)
nginx_conf nginx-default "$nginx_default_port" "" "proxy_pass http://127.0.0.1:$origin_port;"
for n in nginx-tuned nginx-default; do
    taskset -c $PROXY_CPU nginx -c "$work/$n/nginx.conf" -e "$work/$n/error.log" &
    pids+=($!)
done
nginx_tuned_pid=${pids[-2]}; nginx_default_pid=${pids[-1]}

# --- tessera, tuned and default: one worker each.
cat > "$work/tessera-tuned.toml" <<CONF
[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port"]
max_connections = 128
max_idle = 128

[[route]]
prefix = "/"
upstream = "origin"
CONF
tessera_tuned_port=$(free_port)
taskset -c $PROXY_CPU "$TESSERA" serve --config "$work/tessera-tuned.toml" --listen "127.0.0.1:$tessera_tuned_port" --workers 1 2>"$work/tessera-tuned.log" &
pids+=($!); tessera_tuned_pid=$!
tessera_default_port=$(free_port)
taskset -c $PROXY_CPU "$TESSERA" serve --proxy "http://127.0.0.1:$origin_port" --listen "127.0.0.1:$tessera_default_port" --workers 1 2>"$work/tessera-default.log" &
pids+=($!); tessera_default_pid=$!
for p in "$floor_port" "$proxy_floor_port" "$nginx_tuned_port" "$nginx_default_port" "$tessera_tuned_port" "$tessera_default_port"; do
    wait_up "$p" 1k.txt
done
declare -A pid_of=([floor]=$floor_pid [proxy-floor]=$proxy_floor_pid [nginx-tuned]=$nginx_tuned_pid [nginx-default]=$nginx_default_pid
    [tessera-tuned]=$tessera_tuned_pid [tessera-default]=$tessera_default_pid)
declare -A port_of=([floor]=$floor_port [proxy-floor]=$proxy_floor_port [nginx-tuned]=$nginx_tuned_port [nginx-default]=$nginx_default_port
    [tessera-tuned]=$tessera_tuned_port [tessera-default]=$tessera_default_port)

for f in 1k.txt 64k.txt; do
    for p in nginx-tuned tessera-tuned; do
        cmp -s <(curl -fs "http://127.0.0.1:${port_of[$p]}/$f") "$site/$f" || { echo "check: $p does not relay $f byte-exact" >&2; exit 1; }
    done
done
echo "check: both proxies relay 1k.txt and 64k.txt byte-exact"

echo "# $(date -u +'%F %H:%M UTC'), $(nproc) cores, $(uname -r); $(nginx -v 2>&1 | sed 's/.*: //'); proxies on core $PROXY_CPU, origin and wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
printf '%-8s %-16s %12s %12s\n' file server "requests/s" "cpu us/req"
export SPLIT_LOG=$work/split.log
declare -A total_requests=()
for file in 1k.txt 64k.txt; do
    servers="proxy-floor nginx-tuned tessera-tuned nginx-default tessera-default"
    [ "$file" = 1k.txt ] && servers="floor $servers"
    declare -A rps_runs=() cpu_runs=() rps_med=() cpu_med=()
    for round in $(seq "$ROUNDS"); do
        # Who goes first alternates, so each sees the same machine noise.
        order=$servers
        [ $((round % 2)) = 0 ] && order=$(echo "$servers" | tr ' ' '\n' | tac | tr '\n' ' ')
        for s in $order; do
            read -r requests rps cpu < <(run_wrk "${pid_of[$s]}" "http://127.0.0.1:${port_of[$s]}/$file")
            rps_runs[$s]+="$rps "
            cpu_runs[$s]+="$cpu "
            total_requests[$s]=$(( ${total_requests[$s]:-0} + requests ))
        done
    done
    for s in $servers; do
        rps_med[$s]=$(echo "${rps_runs[$s]}" | tr ' ' '\n' | grep . | median)
        cpu_med[$s]=$(echo "${cpu_runs[$s]}" | tr ' ' '\n' | grep . | median)
        printf '%-8s %-16s %12.0f %12.2f   (cpu runs: %s)\n' "$file" "$s" "${rps_med[$s]}" "${cpu_med[$s]}" "${cpu_runs[$s]% }"
    done
    awk -v f="$file" -v nt="${cpu_med[nginx-tuned]}" -v tt="${cpu_med[tessera-tuned]}" \
        -v nd="${cpu_med[nginx-default]}" -v td="${cpu_med[tessera-default]}" 'BEGIN {
        printf "%-8s tuned: nginx/tessera cpu per request x%.2f (target >= 1.2); defaults: nginx/tessera x%.2f (target >= 2)\n", f, nt / tt, nd / td
    }'
    in_proxy_floors "$(printf '%-8s' "$file")" 1.2 "${cpu_med[proxy-floor]}" "nginx tuned" "${cpu_med[nginx-tuned]}" "tessera tuned" "${cpu_med[tessera-tuned]}"
    # Where each one's time goes: user and system time per request, medians of the rounds.
    for s in $servers; do
        split=$(awk -v p="${pid_of[$s]}" -v f="/$file" '$1 == p && index($2, f) { print $3, $4 }' "$SPLIT_LOG")
        printf '%-8s %-16s user %.2f, system %.2f us per request (medians)\n' "$file" "$s" \
            "$(echo "$split" | awk '{print $1}' | median)" "$(echo "$split" | awk '{print $2}' | median)"
    done
    unset rps_runs cpu_runs rps_med cpu_med
done

# --- upstream connections tessera opened: printed at exit.
for s in tessera-tuned tessera-default; do
    kill -TERM "${pid_of[$s]}"
    wait "${pid_of[$s]}" 2>/dev/null || true
    opened=$(awk '/upstream origin:/ { for (i = 1; i <= NF; i++) if ($i == "connections") print $(i - 1) }' "$work/$s.log" | tail -1)
    awk -v s="$s" -v o="${opened:-?}" -v n="${total_requests[$s]}" 'BEGIN {
        if (o == "?") { printf "%s: no connection count in its log\n", s; exit }
        printf "%s: %d upstream connections opened for %d requests: %.3f per 1,000 (target <= 1)\n", s, o, n, o * 1000 / n }'
done

# --- an uncached ESI page of ESI_FRAGMENTS includes: tessera against Varnish.
esi_origin_port=$(free_port)
taskset -c $LOAD_CPU python3 bench/esi-origin.py "$esi_origin_port" "$ESI_FRAGMENTS" 0 &
pids+=($!)
wait_up "$esi_origin_port" uncached/frag/1
start_varnish_esi $PROXY_CPU "$esi_origin_port" "set beresp.uncacheable = true; set beresp.ttl = 0s;"
esi_tessera_port=$(free_port)
taskset -c $PROXY_CPU "$TESSERA" serve --proxy "http://127.0.0.1:$esi_origin_port" --listen "127.0.0.1:$esi_tessera_port" --workers 1 2>"$work/tessera-esi.log" &
pids+=($!); esi_tessera_pid=$!
wait_up "$varnish_port" uncached/page; wait_up "$esi_tessera_port" uncached/page
for p in "$varnish_port" "$esi_tessera_port"; do
    page=$(curl -fs "http://127.0.0.1:$p/uncached/page")
    if echo "$page" | grep -q '<esi:' || [ "$(echo "$page" | grep -c 'fragment')" -lt "$ESI_FRAGMENTS" ]; then
        echo "check: the proxy on port $p does not assemble the page" >&2; exit 1
    fi
done
declare -A esi_cpu=()
for round in $(seq "$ROUNDS"); do
    for s in varnish tessera; do
        pid=$varnish_pid port=$varnish_port
        [ $s = tessera ] && pid=$esi_tessera_pid port=$esi_tessera_port
        read -r _ _ cpu < <(run_wrk "$pid" "http://127.0.0.1:$port/uncached/page")
        esi_cpu[$s]+="$cpu "
    done
done
v=$(echo "${esi_cpu[varnish]}" | tr ' ' '\n' | grep . | median)
t=$(echo "${esi_cpu[tessera]}" | tr ' ' '\n' | grep . | median)
echo "esi page of $ESI_FRAGMENTS uncached includes, cpu us per page: varnish $v (runs: ${esi_cpu[varnish]% }), tessera $t (runs: ${esi_cpu[tessera]% }); varnish/tessera x$(awk -v v="$v" -v t="$t" 'BEGIN {printf "%.2f", v / t}')"
