#!/usr/bin/env bash
# The disk tier (issue 51): a cached 1 MiB object served from disk, page cache warm.
#
# On core 0, one worker each, taking turns every round:
#   nginx-cache:    nginx `proxy_cache` (proxy_cache_path on disk, levels=1:2), sendfile on
#   tessera-disk:   tessera's disk tier; `[cache] max_object_size = 524288` keeps the 1 MiB
#                   object out of the memory tier, so every hit is read from its file
#   tessera-static: tessera serving the same 1 MiB file from its root
#   nginx-static:   nginx serving it (sendfile), for scale
# The origin (nginx, `Cache-Control: max-age=3600`) and wrk (-t1 -cCONNECTIONS, keep-alive)
# share core 1. Before the rounds each server is asked for the object until it answers
# from its cache (tessera's `Cache-Status: tessera; hit`, nginx's `$upstream_cache_status`
# in an `X-Cache` field).
# Printed: the median requests/s and server CPU per request (utime+stime of its process
# tree from /proc, divided by wrk's requests), and the ratios the issue sets:
#   tessera-disk / nginx-cache    (target: at most 1.0)
#   tessera-disk / tessera-static (target: at most 1.1)
#
# Then the cold disk (the issue's second figure; PART=cold runs it alone): COLD_FILES (256)
# objects of 1 MiB, each fetched once through nginx-cache and tessera-disk so that both
# hold all of them on disk; then, in COLD_ROUNDS (5) rounds taking turns, the page cache
# is dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before `tessera bench -t1 -c16`
# on core 1 asks the server for each object once, in a shuffled order. Printed: the
# median requests/s and p99 latency of each, and tessera's over nginx's (no target: the
# issue asks for the figures). Without the right to drop the page cache it says so and
# stops.
#
# usage: bench/disk-cache.sh   (env: PART=all|warm|cold ROUNDS=5 SECONDS_PER_RUN=5
#                               CONNECTIONS=10 COLD_FILES=256 COLD_ROUNDS=5 NO_BUILD=1
#                               TESSERA=another build)
# Needs: nginx, wrk, curl, taskset, python3 (apt-get when missing; as root).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-10}
PART=${PART:-all}
COLD_FILES=${COLD_FILES:-256}
COLD_ROUNDS=${COLD_ROUNDS:-5}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need wrk wrk
need curl curl
need taskset util-linux
if [ "$(nproc --all)" -lt 2 ]; then echo "needs at least 2 cores" >&2; exit 1; fi

[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
TESSERA=${TESSERA:-$PWD/target/release/tessera}

make_work disk-cache
site=$work/site
mkdir -p "$site"
head -c 1048576 /dev/urandom > "$site/1m.bin"


origin_port=$(free_port)
nginx_http_conf origin "server { listen 127.0.0.1:$origin_port; root $site; add_header Cache-Control \"max-age=3600\"; }"
taskset -c $LOAD_CPU nginx -c "$work/origin/nginx.conf" -e "$work/origin/error.log" &
pids+=($!)

nginx_cache_port=$(free_port)
nginx_http_conf nginx-cache "proxy_cache_path $work/nginx-cache/store levels=1:2 keys_zone=bench:10m max_size=1g inactive=1h use_temp_path=off;
    upstream origin { server 127.0.0.1:$origin_port; keepalive 16; }
    server {
        listen 127.0.0.1:$nginx_cache_port reuseport;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_cache bench;
            add_header X-Cache \$upstream_cache_status;
        }
    }"
nginx_static_port=$(free_port)
nginx_http_conf nginx-static "server { listen 127.0.0.1:$nginx_static_port reuseport; root $site; }"
for n in nginx-cache nginx-static; do
    taskset -c $SERVER_CPU nginx -c "$work/$n/nginx.conf" -e "$work/$n/error.log" &
    pids+=($!)
done
nginx_cache_pid=${pids[-2]}; nginx_static_pid=${pids[-1]}

mkdir -p "$work/tessera-disk"
cat > "$work/tessera-disk.toml" <<CONF
[cache]
max_object_size = 524288
cache_status = true

[cache.disk]
path = "$work/tessera-disk"
max_size = "1g"
max_object_size = "64m"

[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port"]

[[route]]
prefix = "/"
upstream = "origin"
CONF
tessera_disk_port=$(free_port)
taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/tessera-disk.toml" --listen "127.0.0.1:$tessera_disk_port" --workers 1 2>"$work/tessera-disk.log" &
pids+=($!); tessera_disk_pid=$!
tessera_static_port=$(free_port)
taskset -c $SERVER_CPU "$TESSERA" serve --root "$site" --listen "127.0.0.1:$tessera_static_port" --workers 1 2>"$work/tessera-static.log" &
pids+=($!); tessera_static_pid=$!

declare -A pid_of=([nginx-cache]=$nginx_cache_pid [tessera-disk]=$tessera_disk_pid [tessera-static]=$tessera_static_pid [nginx-static]=$nginx_static_pid)
declare -A port_of=([nginx-cache]=$nginx_cache_port [tessera-disk]=$tessera_disk_port [tessera-static]=$tessera_static_port [nginx-static]=$nginx_static_port)
servers="nginx-cache tessera-disk tessera-static nginx-static"
for s in $servers; do wait_up "${port_of[$s]}" 1m.bin; done

# Every server answers the object byte-exact, and the caches from their cache.
for s in $servers; do
    cmp -s <(curl -fs "http://127.0.0.1:${port_of[$s]}/1m.bin") "$site/1m.bin" || { echo "check: $s does not serve 1m.bin byte-exact" >&2; exit 1; }
done
for s in nginx-cache tessera-disk; do
    hit=""
    for _ in $(seq 50); do
        if curl -fs -D - -o /dev/null "http://127.0.0.1:${port_of[$s]}/1m.bin" | grep -qi '^x-cache: *hit\|^cache-status: tessera; hit'; then hit=1; break; fi
        sleep 0.1
    done
    [ -n "$hit" ] || { echo "check: $s does not answer 1m.bin from its cache" >&2; exit 1; }
done
[ -n "$(find "$work/tessera-disk" -type f -not -path "$work/tessera-disk/tmp/*" | head -1)" ] || { echo "check: no file in tessera's disk tier" >&2; exit 1; }
echo "check: every server serves 1m.bin byte-exact; nginx and tessera answer it from their caches, tessera's from its disk tier"

warm() {
    echo "# $(date -u +'%F %H:%M UTC'), $(nproc) cores, $(uname -r); $(nginx -v 2>&1 | sed 's/.*: //'); servers on core $SERVER_CPU, the origin and wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
    printf '%-15s %12s %12s\n' server "requests/s" "cpu us/req"
    declare -A rps_runs=() cpu_runs=() cpu_med=()
    for round in $(seq "$ROUNDS"); do
        order=$servers
        [ $((round % 2)) = 0 ] && order=$(echo "$servers" | tr ' ' '\n' | tac | tr '\n' ' ')
        for s in $order; do
            read -r rps cpu < <(measure "${pid_of[$s]}" "http://127.0.0.1:${port_of[$s]}/1m.bin" $LOAD_CPU "$CONNECTIONS" "$SECONDS_PER_RUN")
            rps_runs[$s]+="$rps "
            cpu_runs[$s]+="$cpu "
        done
    done
    for s in $servers; do
        rps=$(echo "${rps_runs[$s]}" | tr ' ' '\n' | grep . | median)
        cpu_med[$s]=$(echo "${cpu_runs[$s]}" | tr ' ' '\n' | grep . | median)
        printf '%-15s %12.0f %12.2f   (cpu runs: %s)\n' "$s" "$rps" "${cpu_med[$s]}" "${cpu_runs[$s]% }"
    done
    awk -v d="${cpu_med[tessera-disk]}" -v n="${cpu_med[nginx-cache]}" -v t="${cpu_med[tessera-static]}" -v ns="${cpu_med[nginx-static]}" 'BEGIN {
        printf "tessera-disk / nginx-cache x%.2f (target <= 1.0); tessera-disk / tessera-static x%.2f (target <= 1.1); tessera-static / nginx-static x%.2f\n", d / n, d / t, t / ns }'
}

cold() {
    if ! (sync && echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then
        echo "cold: cannot drop the page cache here (/proc/sys/vm/drop_caches is not writable); not measured"
        return 0
    fi
    mkdir -p "$site/cold"
    local i s
    for i in $(seq "$COLD_FILES"); do head -c 1048576 /dev/urandom > "$site/cold/$i.bin"; done
    for s in nginx-cache tessera-disk; do
        : > "$work/cold-$s.txt"
        for i in $(seq "$COLD_FILES" | shuf --random-source=<(yes)); do
            echo "http://127.0.0.1:${port_of[$s]}/cold/$i.bin" >> "$work/cold-$s.txt"
        done
        # Fill: each object once, then once more to see it answered from the cache.
        "$TESSERA" bench -q -t 1 -c 8 -n "$COLD_FILES" --request-file "$work/cold-$s.txt" > /dev/null
        for i in 1 "$COLD_FILES"; do
            curl -fs -D - -o /dev/null "http://127.0.0.1:${port_of[$s]}/cold/$i.bin" |
                grep -qi '^x-cache: *hit\|^cache-status: tessera; hit' ||
                { echo "cold: $s does not answer /cold/$i.bin from its cache" >&2; exit 1; }
        done
    done
    echo "# $(date -u +'%F %H:%M UTC'), cold disk: $COLD_FILES objects of 1 MiB, page cache dropped before each run; tessera bench -t1 -c16 on core $LOAD_CPU, each object once per run; median of $COLD_ROUNDS rounds"
    declare -A cold_rps=() cold_p99=()
    local round order out
    for round in $(seq "$COLD_ROUNDS"); do
        order="nginx-cache tessera-disk"
        [ $((round % 2)) = 0 ] && order="tessera-disk nginx-cache"
        for s in $order; do
            sync; echo 3 > /proc/sys/vm/drop_caches
            out=$(taskset -c $LOAD_CPU "$TESSERA" bench -q --json -t 1 -c 16 -n "$COLD_FILES" --request-file "$work/cold-$s.txt")
            read -r rps p99 < <(echo "$out" | python3 -c "
import json, sys
r = json.load(sys.stdin)
if r['errors']['total']:
    sys.exit('cold run with errors: ' + json.dumps(r['errors']))
print(r['requests_per_second'], r['latency_ms']['p99'])")
            cold_rps[$s]+="$rps "; cold_p99[$s]+="$p99 "
        done
    done
    declare -A rps_med=() p99_med=()
    for s in nginx-cache tessera-disk; do
        rps_med[$s]=$(echo "${cold_rps[$s]}" | tr ' ' '\n' | grep . | median)
        p99_med[$s]=$(echo "${cold_p99[$s]}" | tr ' ' '\n' | grep . | median)
        printf '%-15s %10.0f req/s  p99 %8.2f ms   (runs: %s / %s)\n' "$s" "${rps_med[$s]}" "${p99_med[$s]}" "${cold_rps[$s]% }" "${cold_p99[$s]% }"
    done
    awk -v tr="${rps_med[tessera-disk]}" -v nr="${rps_med[nginx-cache]}" -v tp="${p99_med[tessera-disk]}" -v np="${p99_med[nginx-cache]}" 'BEGIN {
        printf "cold: tessera-disk / nginx-cache: requests/s x%.2f, p99 x%.2f\n", tr / nr, tp / np }'
}

case "$PART" in
    warm) warm ;;
    cold) cold ;;
    *) warm; cold ;;
esac
