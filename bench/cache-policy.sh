#!/usr/bin/env bash
# Cache policy and invalidation (issue 45), side by side in one run.
#
# CPU per request of objects answered from the cache (keep-alive, wrk -t1, CONNECTIONS
# connections; every object stored before it is measured):
#   hit-1k       tessera, a cached 200 of a 1 KB object;
#   304-1k       tessera, the same object asked with If-None-Match matching its ETag (a
#                304 from the cache). Target: at most hit-1k's CPU.
#   206-1m       tessera, a 512 KiB range (bytes=1024-525311) of a cached 1 MiB object;
#   nginx-206-1m nginx with proxy_cache, the same range of the same object (cached on
#                disk, in /tmp). Target: 206-1m at most nginx-206-1m's CPU.
#   norules      tessera, /plain/obj1k?b=2&a=1&utm_source=x&fbclid=y with Accept-Language
#                on a route without key rules;
#   rules20      the same request on a route with 20 key rules (query sorted, 18
#                drop_query globs, the Accept-Language header). Target: at most 1.03x
#                norules's CPU.
# Each round measures every case once, the order alternating from round to round; a
# case's figure is the server's CPU time per request (utime+stime from /proc around a run
# of SECONDS_PER_RUN, bench/lib.sh `measure`). Prints the medians and the median of the
# per-round ratios.
#
# Purge reach: two tessera processes (A and B, one worker each, core SERVER_CPU) sharing
# a redis-server; B under load (wrk -c10 on a cached object, core LOAD_CPU) while, PURGES
# times, a PURGE of /reach is sent to A and B is asked for /reach (keep-alive, from
# LOAD_CPU) until it no longer answers it as a hit (its Cache-Status); the time from
# sending the PURGE to that answer (which includes B's fetch of the new object). Prints
# the median, 99th percentile and worst. Target: under 50 ms worst on loopback.
#
# Revalidation: a 1,000,000-byte object with max-age=1 and an ETag, stored, then
# refreshed REFRESHES times (a request 2.1 s after the last) through tessera (a route
# with keep = "1h") and through nginx (proxy_cache_revalidate on): the bytes the origin
# sent for the refreshes (status lines, fields and bodies), per proxy.
#
# usage: bench/cache-policy.sh   (env: ROUNDS=5 SECONDS_PER_RUN=5 CONNECTIONS=50
#        PURGES=1000 REFRESHES=100; TESSERA_BIN=path uses that binary instead of building
#        a release one)
# Needs: curl, taskset, python3, nginx, wrk, redis-server (apt-get installs them when
# missing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-50}
PURGES=${PURGES:-1000}
REFRESHES=${REFRESHES:-100}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need curl curl
need taskset util-linux
need nginx nginx
need wrk wrk
need redis-server redis-server

if [ -n "${TESSERA_BIN:-}" ]; then
    TESSERA=$(realpath "$TESSERA_BIN")
else
    cargo build --release --locked -q -p tessera
    TESSERA=$PWD/target/release/tessera
fi

make_work cache-policy

origin_port=$(free_port)
taskset -c $LOAD_CPU python3 bench/cache-policy-origin.py "$origin_port" &
pids+=($!)
wait_up "$origin_port" stats

# --- tessera for the CPU cases, and A and B sharing a redis-server for the reach.
drop=$(printf '"utm_%s", ' source medium campaign term content id; printf '"%s", ' fbclid gclid dclid msclkid mc_cid mc_eid _ga _gl yclid igshid ref_src; printf '"s_cid"')
routes() {
    cat <<CONF
[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port"]

[[route]]
prefix = "/keyed/"
upstream = "origin"
[route.cache]
key = { query = "sorted", drop_query = [$drop], headers = ["Accept-Language"] }

[[route]]
prefix = "/reval/"
upstream = "origin"
[route.cache]
keep = "1h"

[[route]]
prefix = "/"
upstream = "origin"

[cache]
cache_status = true
purge_token = "bench"
CONF
}
redis_port=$(free_port)
taskset -c $SERVER_CPU redis-server --port "$redis_port" --bind 127.0.0.1 --save "" \
    --appendonly no >/dev/null &
pids+=($!)
declare -A port_of=() pid_of=()
for t in tessera a b; do
    port=$(free_port)
    {
        routes
        if [ $t != tessera ]; then printf '\n[cache.redis]\nurl = "redis://127.0.0.1:%s"\n' "$redis_port"; fi
    } > "$work/$t.toml"
    "$TESSERA" check-config --config "$work/$t.toml" >/dev/null
    # The fan-out's first subscription is logged at debug level: waited for below.
    RUST_LOG=info,edge::cache::fanout=debug taskset -c $SERVER_CPU "$TESSERA" serve \
        --config "$work/$t.toml" --listen "127.0.0.1:$port" --workers 1 2>"$work/$t.log" &
    pids+=($!); pid_of[$t]=$!; port_of[$t]=$port
done

nginx_port=$(free_port)
mkdir -p "$work/nginx/cache"
cat > "$work/nginx/nginx.conf" <<CONF
$(nginx_head "$work/nginx")
http {
$(nginx_keepalive)
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    proxy_cache_path $work/nginx/cache levels=1:2 keys_zone=c:10m max_size=1g;
    server {
        listen 127.0.0.1:$nginx_port reuseport;
        location / {
            proxy_pass http://127.0.0.1:$origin_port;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache c;
            proxy_cache_revalidate on;
            proxy_force_ranges on;
            add_header X-Cache \$upstream_cache_status;
        }
    }
}
CONF
nginx -t -q -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log"
taskset -c $SERVER_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); pid_of[nginx]=$!; port_of[nginx]=$nginx_port
for t in tessera a b nginx; do wait_up "${port_of[$t]}" plain/obj1k; done
for t in a b; do
    for _ in $(seq 100); do grep -q "invalidation fan-out: subscribed" "$work/$t.log" && break; sleep 0.1; done
    grep -q "invalidation fan-out: subscribed" "$work/$t.log" || { echo "$t did not subscribe" >&2; exit 1; }
done

T=http://127.0.0.1:${port_of[tessera]}
N=http://127.0.0.1:$nginx_port
QUERY='?b=2&a=1&utm_source=x&fbclid=y'
RANGE='bytes=1024-525311'
# Check before measuring (and store every object): a hit, a 304, the range from both, and
# the keyed route's sorted and dropped parameters making one object.
for u in "$T/plain/obj1k" "$T/plain/obj1m" "$N/plain/obj1m" "$T/plain/obj1k$QUERY" \
    "$T/keyed/obj1k$QUERY" "$T/keyed/obj1k?a=1&b=2"; do
    curl -fs -o /dev/null -H 'Accept-Language: en' "$u"
done
status=$(curl -s -o /dev/null -w '%{http_code}' -H 'If-None-Match: "v1"' "$T/plain/obj1k")
[ "$status" = 304 ] || { echo "304-1k: got $status" >&2; exit 1; }
for u in "$T/plain/obj1m" "$N/plain/obj1m"; do
    out=$(curl -s -D - -o "$work/range" -H "Range: $RANGE" "$u")
    echo "$out" | grep -q '^HTTP/1.1 206' || { echo "$u: not a 206: $out" >&2; exit 1; }
    [ "$(stat -c %s "$work/range")" = 524288 ] || { echo "$u: a range of the wrong size" >&2; exit 1; }
done
curl -s "$T/plain/obj1k" -D - -o /dev/null | grep -qi '^cache-status: tessera; hit' \
    || { echo "hit-1k is not a hit" >&2; exit 1; }
curl -s -H "Range: $RANGE" "$N/plain/obj1m" -D - -o /dev/null | grep -qi '^x-cache: HIT' \
    || { echo "nginx-206-1m is not a cache hit" >&2; exit 1; }
keyed=$(curl -s "http://127.0.0.1:$origin_port/stats" | python3 -c \
    'import json,sys; print(json.load(sys.stdin)["requests"].get("/keyed/obj1k", 0))')
[ "$keyed" = 1 ] || { echo "the keyed route asked the origin $keyed times, not once" >&2; exit 1; }

# measure_any PID URL CONNECTIONS SECONDS [WRK ARGS]: bench/lib.sh's `measure` for
# answers that are not 2xx (a 304): prints "requests/s server-cpu-us-per-request".
measure_any() {
    local pid=$1 url=$2 before after out requests rps
    shift 2
    before=$(cpu_ticks "$pid")
    out=$(taskset -c $LOAD_CPU wrk -t1 -c"$1" -d"${2}s" "${@:3}" "$url")
    after=$(cpu_ticks "$pid")
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    if echo "$out" | grep -q "Socket errors"; then echo "wrk reported errors: $out" >&2; fi
    echo "$rps $(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$requests" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')"
}

# run CASE SECONDS: one run; prints "requests/s server-cpu-us-per-request".
run() {
    local pid=${pid_of[tessera]}
    case $1 in
        hit-1k) measure "$pid" "$T/plain/obj1k" $LOAD_CPU "$CONNECTIONS" "$2" ;;
        304-1k) measure_any "$pid" "$T/plain/obj1k" "$CONNECTIONS" "$2" -H 'If-None-Match: "v1"' ;;
        206-1m) measure "$pid" "$T/plain/obj1m" $LOAD_CPU "$CONNECTIONS" "$2" -H "Range: $RANGE" ;;
        nginx-206-1m) measure "${pid_of[nginx]}" "$N/plain/obj1m" $LOAD_CPU "$CONNECTIONS" "$2" -H "Range: $RANGE" ;;
        norules) measure "$pid" "$T/plain/obj1k$QUERY" $LOAD_CPU "$CONNECTIONS" "$2" -H 'Accept-Language: en' ;;
        rules20) measure "$pid" "$T/keyed/obj1k$QUERY" $LOAD_CPU "$CONNECTIONS" "$2" -H 'Accept-Language: en' ;;
    esac
}
cases="hit-1k 304-1k 206-1m nginx-206-1m norules rules20"

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.lock || echo '+changes')
echo "# $(date -u '+%F %H:%M') UTC, tessera $commit ($TESSERA), $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $(uname -r)"
echo "# servers (1 worker each) on core $SERVER_CPU, wrk -t1 -c$CONNECTIONS for ${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds; $(nginx -v 2>&1 | sed 's/.*: //'), $(redis-server --version | awk '{print $3}')"
echo "# checked: hit-1k a hit, 304-1k a 304, both 206s 524288 bytes (nginx's a HIT), the keyed route one origin request for two orders of the query"

for c in $cases; do run "$c" 1 >/dev/null; done
read -ra order <<< "$cases"
declare -A rps_runs=() cpu_runs=()
r304_runs="" r206_runs="" rkey_runs=""
for round in $(seq "$ROUNDS"); do
    declare -A cpu_now=()
    n=${#order[@]}
    for i in $(seq 0 $((n - 1))); do
        c=${order[$(((i + round) % n))]}
        read -r rps cpu < <(run "$c" "$SECONDS_PER_RUN")
        rps_runs[$c]+="$rps "; cpu_runs[$c]+="$cpu "; cpu_now[$c]=$cpu
    done
    ratio() { awk -v a="${cpu_now[$1]}" -v b="${cpu_now[$2]}" 'BEGIN {printf "%.3f", a / b}'; }
    r304_runs+="$(ratio 304-1k hit-1k) "
    r206_runs+="$(ratio 206-1m nginx-206-1m) "
    rkey_runs+="$(ratio rules20 norules) "
    unset cpu_now
done

med() { echo "$1" | tr ' ' '\n' | grep . | median; }
printf '%-14s %12s %12s   %s\n' case "requests/s" "cpu us/req" "runs (cpu us/req)"
for c in $cases; do
    printf '%-14s %12s %12s   %s\n' "$c" "$(med "${rps_runs[$c]}")" "$(med "${cpu_runs[$c]}")" "${cpu_runs[$c]}"
done
echo
ratio_of() { awk -v a="$(med "${cpu_runs[$1]}")" -v b="$(med "${cpu_runs[$2]}")" 'BEGIN {printf "%.3f", a / b}'; }
echo "304-1k / hit-1k: $(ratio_of 304-1k hit-1k) (median of per-round ratios $(med "$r304_runs"); rounds: $r304_runs) target <= 1.00"
echo "206-1m / nginx-206-1m: $(ratio_of 206-1m nginx-206-1m) (median of per-round ratios $(med "$r206_runs"); rounds: $r206_runs) target <= 1.00"
echo "rules20 / norules: $(ratio_of rules20 norules) (median of per-round ratios $(med "$rkey_runs"); rounds: $rkey_runs) target <= 1.03"

# --- Purge reach, B under load.
taskset -c $LOAD_CPU wrk -t1 -c10 -d3600s "http://127.0.0.1:${port_of[b]}/plain/obj1k" >/dev/null &
load_pid=$!
pids+=("$load_pid")
echo
taskset -c $LOAD_CPU python3 - "${port_of[a]}" "${port_of[b]}" "$PURGES" <<'PY'
# The same Host to both: the key is the site's, not the node's address.
import http.client, statistics, sys, time
a_port, b_port, purges = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
a = http.client.HTTPConnection("127.0.0.1", a_port)
b = http.client.HTTPConnection("127.0.0.1", b_port)
def b_hit():
    b.request("GET", "/reach", headers={"Host": "bench"})
    r = b.getresponse()
    r.read()
    return r.getheader("Cache-Status", "").startswith("tessera; hit")
times = []
for i in range(purges):
    deadline = time.monotonic() + 5
    while not b_hit():
        assert time.monotonic() < deadline, "B never held /reach"
    start = time.perf_counter()
    a.request("PURGE", "/reach", headers={"Host": "bench", "X-Purge-Token": "bench"})
    r = a.getresponse()
    r.read()
    assert r.status in (200, 404), r.status
    while b_hit():
        assert time.perf_counter() - start < 5, "B still serves /reach 5 s after the PURGE"
    times.append((time.perf_counter() - start) * 1000)
times.sort()
p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
print("purge reach, A to B under load, %d purges: median %.2f ms, p99 %.2f ms, worst %.2f ms (target: worst under 50 ms)"
      % (len(times), statistics.median(times), p99, times[-1]))
PY
kill "$load_pid" 2>/dev/null || true

# --- Revalidation: origin bytes for REFRESHES refreshes of a 1 MB object (after one
# fill each, not counted). nginx counts lifetimes in whole seconds: 2.1 s between two
# refreshes makes sure the object has expired for both.
stats() { curl -s "http://127.0.0.1:$origin_port/stats"; }
curl -fs -o /dev/null "$T/reval/reval"
curl -fs -o /dev/null "$N/nginx/reval"
before=$(stats)
for _ in $(seq "$REFRESHES"); do
    sleep 2.1
    curl -fs -o /dev/null "$T/reval/reval"
    curl -fs -o /dev/null "$N/nginx/reval"
done
python3 -c '
import json, sys
before, after, n = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
for name, path in (("tessera (keep = \"1h\")", "/reval/reval"), ("nginx (proxy_cache_revalidate on)", "/nginx/reval")):
    b = after["bytes"].get(path, 0) - before["bytes"].get(path, 0)
    r = after["requests"].get(path, 0) - before["requests"].get(path, 0)
    print("revalidation, %s: %d origin requests, %d bytes for %d refreshes of a 1,000,000-byte object (%.0f bytes a refresh)" % (name, r, b, n, b / max(n, 1)))
' "$before" "$(stats)" "$REFRESHES"
