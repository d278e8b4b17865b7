#!/usr/bin/env bash
# Upstreams that survive failure (issue 23): tessera against nginx as load-balancing
# reverse proxies, side by side in one run.
#
# 1. cost: each proxy runs one worker pinned to core 0 and proxies keep-alive wrk
#    clients (-t1 -cCONNECTIONS on core 1) to origins serving a 1 KB file (tessera
#    processes, one worker each, on core 1 with wrk): first one origin, then three
#    balanced round robin. nginx has `upstream { ...; keepalive 32; }` with HTTP/1.1 to
#    the origins; tessera `[[upstream]]` with the same addresses and `max_idle = 32`. The
#    proxies take turns in every round; printed: the median requests/s and proxy CPU time
#    per request (utime+stime from /proc divided by the requests wrk completed), and
#    nginx/tessera. Target: tessera at least 1.5x cheaper per request. The two floors of
#    bench/proxy.sh (bench/lib.sh start_floors) are measured in the same rounds on core 0:
#    bench/floor.c (a fixed 1 KB response, the cheapest single hop) and bench/proxy-floor.c
#    (a byte pipe to origin 0, the same four system calls per request as a proxy: the
#    cheapest proxy any user-space program can be); both proxies are printed in proxy
#    floors, and what "1.5x cheaper than nginx" would be in proxy floors. Each run's CPU
#    per request is also printed split into user and system time. A diagnostic pair beside
#    them, nginx-1-pool64 and tessera-1-pool64, has pools of 64 (`keepalive 64`,
#    `max_idle = 64`), more than the clients: with 32 for 50 clients, both proxies open
#    and close upstream connections whenever more than 32 requests are at the origin at
#    once; with 64 neither does, which shows what that costs each of them.
# 2. failover: three origins; during FAILOVER_SECONDS (30) of keep-alive load one origin
#    is killed (SIGKILL) every 5 s, the one killed before being started again on its port
#    at the same moment, so one of three is always down. Printed for each proxy: requests
#    completed and failed (non-2xx answers and socket errors as wrk counts them). nginx
#    has `proxy_next_upstream error timeout` (its default, written out) and max_fails=1
#    fail_timeout=10s (its defaults); tessera its defaults (retries = 1, max_fails = 1,
#    fail_timeout = 10) and `[upstream.health]` every second. Target: 0 failed for tessera.
#
# usage: bench/upstreams.sh   (env: ROUNDS=3 SECONDS_PER_RUN=5 CONNECTIONS=50
#                              FAILOVER_SECONDS=30 PARTS="cost failover" (either alone
#                              runs one part) NO_BUILD=1 to skip cargo, TESSERA=path of
#                              another build to measure, KEEP_WORK=1 to keep the logs)
# Needs: nginx, wrk, curl, cc, taskset, python3 (apt-get when missing; as root).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-50}
FAILOVER_SECONDS=${FAILOVER_SECONDS:-30}
PARTS=${PARTS:-"cost failover"}
PROXY_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need wrk wrk
need curl curl
need cc gcc
need taskset util-linux
if [ "$(nproc --all)" -lt 2 ]; then echo "needs at least 2 cores" >&2; exit 1; fi

[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
TESSERA=${TESSERA:-$PWD/target/release/tessera}

make_work upstreams
site=$work/site
mkdir -p "$site"
head -c 1024 /dev/zero | tr '\0' 'a' > "$site/1k.txt"

# --- origins: tessera serving the file, one worker each, on the load core.
declare -a origin_port origin_pid
start_origin() { # INDEX: (re)starts origin INDEX on its port
    taskset -c $LOAD_CPU "$TESSERA" serve --root "$site" --listen "127.0.0.1:${origin_port[$1]}" \
        --workers 1 2>>"$work/origin-$1.log" &
    origin_pid[$1]=$!
    pids+=($!)
}
for i in 0 1 2; do
    origin_port[$i]=$(free_port)
    start_origin $i
done
for i in 0 1 2; do wait_up "${origin_port[$i]}" 1k.txt; done
servers_nginx() { # INDICES...: nginx `server` lines
    for i in "$@"; do printf 'server 127.0.0.1:%s max_fails=1 fail_timeout=10s; ' "${origin_port[$i]}"; done
}
addresses() { # INDICES...: a TOML array
    local out="" i
    for i in "$@"; do out+="\"127.0.0.1:${origin_port[$i]}\", "; done
    echo "[${out%, }]"
}

# --- the proxies: NAME ORIGIN-INDICES; nginx and tessera, one worker each, on core 0.
declare -A pid_of port_of
start_nginx() {
    local name=$1; shift
    mkdir -p "$work/$name"
    port_of[$name]=$(free_port)
    cat > "$work/$name/nginx.conf" <<CONF
$(nginx_head "$work/$name")
http {
    access_log off;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path $work/$name;
    proxy_temp_path $work/$name;
    fastcgi_temp_path $work/$name;
    uwsgi_temp_path $work/$name;
    scgi_temp_path $work/$name;
    upstream origin { $(servers_nginx "$@") keepalive ${POOL:-32}; keepalive_requests 1000000; }
    server {
        listen 127.0.0.1:${port_of[$name]} reuseport;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_next_upstream error timeout;
        }
    }
}
CONF
    taskset -c $PROXY_CPU nginx -c "$work/$name/nginx.conf" -e "$work/$name/error.log" &
    pid_of[$name]=$!
    pids+=($!)
}
start_tessera() {
    local name=$1; shift
    port_of[$name]=$(free_port)
    cat > "$work/$name.toml" <<CONF
[[upstream]]
name = "origin"
addresses = $(addresses "$@")
max_idle = ${POOL:-32}

[upstream.health]
path = "/1k.txt"
interval = 1

[[route]]
prefix = "/"
upstream = "origin"
CONF
    taskset -c $PROXY_CPU "$TESSERA" serve --config "$work/$name.toml" --listen "127.0.0.1:${port_of[$name]}" \
        --workers 1 2>"$work/$name.log" &
    pid_of[$name]=$!
    pids+=($!)
}
start_nginx nginx-1 0; start_tessera tessera-1 0
# The same with pools of 64, more than the 50 clients: no upstream connection is opened
# or closed per request (a diagnostic beside the issue's configuration, not instead of it).
POOL=64 start_nginx nginx-1-pool64 0; POOL=64 start_tessera tessera-1-pool64 0
start_nginx nginx-3 0 1 2; start_tessera tessera-3 0 1 2
start_floors $PROXY_CPU "${origin_port[0]}"
pid_of[floor]=$floor_pid; port_of[floor]=$floor_port
pid_of[proxy-floor]=$proxy_floor_pid; port_of[proxy-floor]=$proxy_floor_port
wait_up "$floor_port" 1k.txt
for s in proxy-floor nginx-1 tessera-1 nginx-1-pool64 tessera-1-pool64 nginx-3 tessera-3; do
    wait_up "${port_of[$s]}" 1k.txt
    cmp -s <(curl -fs "http://127.0.0.1:${port_of[$s]}/1k.txt") "$site/1k.txt" || { echo "check: $s does not relay 1k.txt byte-exact" >&2; exit 1; }
done
echo "check: every proxy relays 1k.txt byte-exact"

if [[ " $PARTS " == *" cost "* ]]; then
echo "# $(date -u +'%F %H:%M UTC'), $(nproc) cores, $(uname -r); $(nginx -v 2>&1 | sed 's/.*: //'); proxies on core $PROXY_CPU, origins and wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
printf '%-12s %12s %12s\n' proxy "requests/s" "cpu us/req"
proxy_floor_cpu=
for peers in 1 3; do
    servers="nginx-$peers tessera-$peers"
    [ "$peers" = 1 ] && servers="floor proxy-floor $servers nginx-1-pool64 tessera-1-pool64"
    declare -A rps_runs=() cpu_runs=() cpu_med=() user_runs=() sys_runs=()
    for round in $(seq "$ROUNDS"); do
        # Who goes first alternates, so each sees the same machine noise.
        order=$servers
        [ $((round % 2)) = 0 ] && order=$(echo "$servers" | tr ' ' '\n' | tac | tr '\n' ' ')
        for s in $order; do
            read -r u0 s0 < <(user_sys_ticks "${pid_of[$s]}")
            read -r rps cpu < <(measure "${pid_of[$s]}" "http://127.0.0.1:${port_of[$s]}/1k.txt" $LOAD_CPU "$CONNECTIONS" "$SECONDS_PER_RUN")
            read -r u1 s1 < <(user_sys_ticks "${pid_of[$s]}")
            rps_runs[$s]+="$rps "
            cpu_runs[$s]+="$cpu "
            # The run's CPU per request split in the shares of user and system time.
            user_runs[$s]+="$(awk -v c="$cpu" -v u=$((u1 - u0)) -v y=$((s1 - s0)) 'BEGIN { printf "%.2f", (u + y) ? c * u / (u + y) : 0 }') "
            sys_runs[$s]+="$(awk -v c="$cpu" -v u=$((u1 - u0)) -v y=$((s1 - s0)) 'BEGIN { printf "%.2f", (u + y) ? c * y / (u + y) : 0 }') "
        done
    done
    for s in $servers; do
        rps=$(echo "${rps_runs[$s]}" | tr ' ' '\n' | grep . | median)
        cpu_med[$s]=$(echo "${cpu_runs[$s]}" | tr ' ' '\n' | grep . | median)
        printf '%-12s %12.0f %12.2f   (cpu runs: %s; user: %s; system: %s)\n' "$s" "$rps" "${cpu_med[$s]}" \
            "${cpu_runs[$s]% }" "${user_runs[$s]% }" "${sys_runs[$s]% }"
    done
    [ "$peers" = 1 ] && proxy_floor_cpu=${cpu_med[proxy-floor]}
    awk -v p="$peers" -v n="${cpu_med[nginx-$peers]}" -v t="${cpu_med[tessera-$peers]}" 'BEGIN {
        printf "%d peer(s): nginx/tessera cpu per request x%.2f (target >= 1.5)\n", p, n / t }'
    in_proxy_floors "$peers peer(s)" 1.5 "$proxy_floor_cpu" nginx "${cpu_med[nginx-$peers]}" tessera "${cpu_med[tessera-$peers]}"
    [ "$peers" = 1 ] && awk -v n="${cpu_med[nginx-1-pool64]}" -v t="${cpu_med[tessera-1-pool64]}" -v pf="$proxy_floor_cpu" 'BEGIN {
        printf "1 peer(s), pools of 64 (diagnostic): nginx/tessera cpu per request x%.2f; in proxy floors: nginx %.2f, tessera %.2f\n", n / t, n / pf, t / pf }'
    unset rps_runs cpu_runs cpu_med user_runs sys_runs
done
fi

# --- failover: one origin of three killed every 5 s, the previous one started again.
failover() { # PROXY: prints "completed failed"
    local s=$1 out killed=-1 k non2xx sockerr
    (
        sleep 2.5
        for k in $(seq 0 $((FAILOVER_SECONDS / 5 - 1))); do
            victim=$((k % 3))
            kill -KILL "$(cat "$work/origin-pid-$victim")" 2>/dev/null || true
            if [ $killed -ge 0 ]; then
                taskset -c $LOAD_CPU "$TESSERA" serve --root "$site" --listen "127.0.0.1:${origin_port[$killed]}" \
                    --workers 1 2>>"$work/origin-$killed.log" &
                echo $! > "$work/origin-pid-$killed"
            fi
            killed=$victim
            sleep 5
        done
    ) &
    local killer=$!
    # A new connection every half second beside wrk's kept-alive ones (a proxy that
    # stopped accepting shows here): "seconds status time".
    (
        local start=$SECONDS
        while [ $((SECONDS - start)) -lt "$FAILOVER_SECONDS" ]; do
            echo "$((SECONDS - start)) $(curl -s -o /dev/null -m 2 -w '%{http_code} %{time_total}' "http://127.0.0.1:${port_of[$s]}/1k.txt")"
            sleep 0.5
        done > "$work/accept-$s.txt"
    ) &
    local prober=$!
    out=$(taskset -c $LOAD_CPU wrk -t1 -c"$CONNECTIONS" -d"${FAILOVER_SECONDS}s" "http://127.0.0.1:${port_of[$s]}/1k.txt")
    wait $killer $prober
    echo "$out" > "$work/failover-$s.txt"
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    sockerr=$(echo "$out" | awk '/Socket errors/ {gsub(",", ""); print $4 + $6 + $8 + $10}')
    echo "$(echo "$out" | awk '/requests in/ {print $1}') $(( ${non2xx:-0} + ${sockerr:-0} ))"
}
restore_origins() { # every origin up again, its pid in origin-pid-N
    local i
    for i in 0 1 2; do
        if ! curl -fs -o /dev/null "http://127.0.0.1:${origin_port[$i]}/1k.txt"; then
            taskset -c $LOAD_CPU "$TESSERA" serve --root "$site" --listen "127.0.0.1:${origin_port[$i]}" \
                --workers 1 2>>"$work/origin-$i.log" &
            echo $! > "$work/origin-pid-$i"
            wait_up "${origin_port[$i]}" 1k.txt
        fi
    done
}
[[ " $PARTS " == *" failover "* ]] || exit 0
for i in 0 1 2; do echo "${origin_pid[$i]}" > "$work/origin-pid-$i"; done
echo "# failover, $(date -u +'%F %H:%M UTC'): wrk -t1 -c$CONNECTIONS -d${FAILOVER_SECONDS}s, one of three origins killed (SIGKILL) every 5 s and the one before started again"
for s in nginx-3 tessera-3; do
    restore_origins
    sleep 12 # both proxies' fail_timeout (10 s) over, and tessera's checks passed
    read -r completed failed < <(failover "$s")
    printf '%-10s %9d requests, %6d failed (%s); new connections not answered 200: %s of %s\n' "$s" "$completed" "$failed" \
        "$(grep -E 'Non-2xx|Socket errors' "$work/failover-$s.txt" | tr -s ' ' | tr '\n' ';' || true)" \
        "$(awk '$2 != 200' "$work/accept-$s.txt" | wc -l)" "$(wc -l < "$work/accept-$s.txt")"
done
# Origins started by the killer are not in $pids: stop them too.
for i in 0 1 2; do kill "$(cat "$work/origin-pid-$i")" 2>/dev/null || true; done
grep -h "peer down\|peer up\|unhealthy" "$work/tessera-3.log" | sed 's/^/tessera-3: /' | tail -12
