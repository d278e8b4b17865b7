#!/usr/bin/env bash
# ESI assembly: tessera's ESI proxy against Varnish (ESI on), in front of the same origin.
#
# The origin (bench/esi-origin.py, Python stdlib, HTTP/1.1 keep-alive, a thread per
# connection) serves a page with FRAGMENTS <esi:include>s in two flavours:
#   /uncached/...  Cache-Control: no-store, every fragment sleeps DELAY_MS before answering;
#   /cached/...    max-age=3600, fragments answer at once.
# Varnish gets a VCL that turns ESI on when Surrogate-Control says ESI/1.0, makes
# /uncached/ uncacheable (ttl 0) and caches /cached/ for an hour. tessera runs
# `tessera serve --proxy` with its default cache (docs/cache.md), which honours the same
# headers. Both proxies are pinned to core 0, the origin and the clients to core 1 (the
# origin mostly sleeps in part a, and is not asked at all in part b once caches are warm).
#
# (a) Page latency, nothing cached: ROUNDS rounds; in each, PER_ROUND sequential
#     requests to one proxy, then PER_ROUND to the other (who goes first alternates),
#     so both see the same machine noise. Client: curl, one process and one new
#     connection per request, `-w %{time_total}` (connect to last byte) and
#     %{time_starttransfer} (first byte). Prints median, p90 and max per proxy and the
#     ratio of medians. Target (issue 7): tessera's page within the slowest fragment
#     (DELAY_MS) + 10 ms; Varnish fetches includes one after another (~FRAGMENTS x DELAY_MS).
# (b) Requests/s, page and fragments cached: wrk -t1 -cCONNECTIONS for RPS_SECONDS on
#     core 1, RPS_ROUNDS rounds, medians. Varnish and tessera serve page and fragments
#     from their caches (Varnish re-assembles each page; tessera assembles a page whose
#     fragments are all fresh in memory at once, and reuses the assembly). Alongside, a
#     second `tessera serve` (static files, one worker, core 0) serves a file holding
#     the assembled page (same size), and the server's CPU per request is read from
#     /proc/PID/stat (utime+stime) around each run. The origin counts what it answers
#     (/count): origin requests per page must be 0 with warm caches. The order of the
#     targets rotates from round to round; prints the per-round ratios tessera/Varnish
#     (issue 8 target: >= 10) and tessera page/tessera static file of the same size
#     (target: >= 0.5) with their medians (the targets are judged on those), and the
#     ratios of the medians and of CPU per request.
# Before measuring, the script checks that both proxies return the fully assembled page
# (no <esi: left, FRAGMENTS fragments) and says whether the two pages are byte-identical.
#
# usage: bench/esi.sh    (env: ROUNDS=10 PER_ROUND=10 FRAGMENTS=10 DELAY_MS=50
#                         RPS_ROUNDS=5 RPS_SECONDS=5 CONNECTIONS=50 NO_BUILD=1 to skip cargo)
# Needs: varnish, wrk, curl, taskset, python3 (installed with apt-get when missing; run as root).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-10}
PER_ROUND=${PER_ROUND:-10}
FRAGMENTS=${FRAGMENTS:-10}
DELAY_MS=${DELAY_MS:-50}
RPS_ROUNDS=${RPS_ROUNDS:-5}
RPS_SECONDS=${RPS_SECONDS:-5}
CONNECTIONS=${CONNECTIONS:-50}
PROXY_CPU=0
CLIENT_CPU=1

source bench/lib.sh
need varnishd varnish
need wrk wrk
need curl curl
need taskset util-linux
if [ "$(nproc --all)" -lt 2 ]; then echo "needs at least 2 cores (proxies and clients pinned apart)" >&2; exit 1; fi

[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera
# tessera's half needs `tessera serve --proxy`; without it the script still runs Varnish.
with_tessera=1
if ! "$TESSERA" serve --help 2>/dev/null | grep -q -- '--proxy'; then
    echo "note: $TESSERA has no 'serve --proxy'; measuring Varnish only" >&2
    with_tessera=0
fi

work=$(mktemp -d /tmp/tessera-esi.XXXXXX)
chmod 755 "$work"  # varnishd's child runs as an unprivileged user and reads the VCL
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ -n "${KEEP_WORK:-}" ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# --- the origin, on the clients' core.
origin_port=$(free_port)
taskset -c $CLIENT_CPU python3 bench/esi-origin.py "$origin_port" "$FRAGMENTS" "$DELAY_MS" &
pids+=($!); origin_pid=$!
wait_up "$origin_port" cached/frag/1

# --- Varnish: ESI on for Surrogate-Control ESI/1.0, /uncached/ never cached.
start_varnish_esi $PROXY_CPU "$origin_port" \
    'if (bereq.url ~ "^/uncached/") { set beresp.uncacheable = true; set beresp.ttl = 0s; } else { set beresp.ttl = 1h; }'
wait_up "$varnish_port" cached/frag/1
varnish_version=$(varnishd -V 2>&1 | head -1)

# --- tessera: one worker, every request proxied to the origin.
proxies="varnish"
declare -A pid_of=([varnish]=$varnish_pid) port_of=([varnish]=$varnish_port)
if [ $with_tessera = 1 ]; then
    tessera_port=$(free_port)
    taskset -c $PROXY_CPU "$TESSERA" serve --proxy "http://127.0.0.1:$origin_port" \
        --listen "127.0.0.1:$tessera_port" --workers 1 2>"$work/tessera.log" &
    pids+=($!); tessera_pid=$!
    wait_up "$tessera_port" cached/frag/1
    proxies="varnish tessera"
    pid_of[tessera]=$tessera_pid
    port_of[tessera]=$tessera_port
fi

echo "# $(date -u +'%F %H:%M UTC'), $(nproc) cores, $(uname -r); $varnish_version;"
echo "# proxies on core $PROXY_CPU, origin (python3 $(python3 -c 'import platform; print(platform.python_version())')) and clients on core $CLIENT_CPU;"
echo "# page with $FRAGMENTS fragments of ${DELAY_MS} ms (uncached) / 0 ms (cached)"

# --- check: both proxies assemble the whole page.
for p in $proxies; do
    curl -fsS --max-time 10 -o "$work/page-$p.html" "http://127.0.0.1:${port_of[$p]}/uncached/page"
    found=$(grep -c '<p>fragment ' "$work/page-$p.html" || true)
    if grep -q '<esi:' "$work/page-$p.html" || [ "$found" != "$FRAGMENTS" ]; then
        echo "$p did not assemble the page ($found of $FRAGMENTS fragments):" >&2
        cat "$work/page-$p.html" >&2
        exit 1
    fi
done
if [ $with_tessera = 1 ]; then
    if cmp -s "$work/page-varnish.html" "$work/page-tessera.html"; then
        echo "check: both assemble all $FRAGMENTS fragments; pages byte-identical"
    else
        echo "check: both assemble all $FRAGMENTS fragments; pages differ:"; diff "$work/page-varnish.html" "$work/page-tessera.html" || true
    fi
else
    echo "check: varnish assembles all $FRAGMENTS fragments"
fi

# p90 (nearest rank) of the numbers on standard input.
p90() { sort -g | awk '{a[NR]=$1} END {i=int(NR*0.9+0.999999); print a[i]}'; }

# --- (a) latency, nothing cached.
echo
echo "(a) page latency, nothing cached: $ROUNDS rounds x $PER_ROUND sequential requests per proxy (curl, new connection each)"
declare -A total_ms=() first_ms=()
for p in $proxies; do  # warm up: backend connections, code paths
    for _ in 1 2; do curl -fsS --max-time 10 -o /dev/null "http://127.0.0.1:${port_of[$p]}/uncached/page"; done
done
for round in $(seq "$ROUNDS"); do
    order=$proxies
    [ $((round % 2)) = 0 ] && order=$(echo "$proxies" | tr ' ' '\n' | tac | tr '\n' ' ')
    for p in $order; do
        for _ in $(seq "$PER_ROUND"); do
            read -r code total first < <(taskset -c $CLIENT_CPU curl -sS --max-time 10 -o /dev/null \
                -w '%{http_code} %{time_total} %{time_starttransfer}\n' "http://127.0.0.1:${port_of[$p]}/uncached/page")
            [ "$code" = 200 ] || { echo "$p answered $code" >&2; exit 1; }
            total_ms[$p]+="$(awk -v t="$total" 'BEGIN {printf "%.2f", t * 1000}') "
            first_ms[$p]+="$(awk -v t="$first" 'BEGIN {printf "%.2f", t * 1000}') "
        done
    done
done
declare -A lat_med=()
printf '%-8s %5s %11s %11s %11s %16s\n' proxy n "median ms" "p90 ms" "max ms" "1st byte med ms"
for p in $proxies; do
    values=$(echo "${total_ms[$p]}" | tr ' ' '\n' | grep .)
    lat_med[$p]=$(echo "$values" | median)
    printf '%-8s %5d %11.1f %11.1f %11.1f %16.1f\n' "$p" "$(echo "$values" | wc -l)" "${lat_med[$p]}" \
        "$(echo "$values" | p90)" "$(echo "$values" | sort -g | tail -1)" \
        "$(echo "${first_ms[$p]}" | tr ' ' '\n' | grep . | median)"
done
if [ $with_tessera = 1 ]; then
    awk -v v="${lat_med[varnish]}" -v t="${lat_med[tessera]}" -v d="$DELAY_MS" 'BEGIN {
        printf "varnish/tessera median latency: x%.1f; tessera target <= %d ms (slowest fragment + 10): %s\n",
            v / t, d + 10, (t <= d + 10) ? "met" : "NOT met" }'
fi
for p in $proxies; do echo "raw $p ms: ${total_ms[$p]% }"; done

# --- (b) requests/s, page and fragments cached.
echo
echo "(b) requests/s, cached page with $FRAGMENTS cached fragments: wrk -t1 -c$CONNECTIONS -d${RPS_SECONDS}s on core $CLIENT_CPU, median of $RPS_ROUNDS rounds"
for p in $proxies; do  # fill both caches
    for _ in 1 2; do curl -fsS --max-time 10 -o /dev/null "http://127.0.0.1:${port_of[$p]}/cached/page"; done
done
origin_count() { curl -fsS --max-time 10 "http://127.0.0.1:$origin_port/count"; }
targets="$proxies"
declare -A url_of=()
for p in $proxies; do url_of[$p]="http://127.0.0.1:${port_of[$p]}/cached/page"; done
if [ $with_tessera = 1 ]; then
    # tessera's static file server on the same core, with the assembled page as a file.
    mkdir -p "$work/static"
    curl -fsS --max-time 10 -o "$work/static/page.html" "http://127.0.0.1:$tessera_port/cached/page"
    static_port=$(free_port)
    taskset -c $PROXY_CPU "$TESSERA" serve --root "$work/static" \
        --listen "127.0.0.1:$static_port" --workers 1 2>"$work/tessera-static.log" &
    pids+=($!); pid_of[static]=$!; port_of[static]=$static_port
    wait_up "$static_port" page.html
    url_of[static]="http://127.0.0.1:$static_port/page.html"
    targets="$proxies static"
    echo "# page size: $(wc -c < "$work/static/page.html") bytes (the static file is the same bytes)"
fi
declare -A rps_runs=() cpu_runs=() origin_runs=() this_round=()
ratio_tv="" ratio_ts=""
for round in $(seq "$RPS_ROUNDS"); do
    # Rotate who goes first, so a burst of load from elsewhere does not always hit the
    # same target; the ratios are taken within each round, then their median.
    order=$targets
    for _ in $(seq $((round % $(echo "$targets" | wc -w)))); do
        order="$(echo "$order" | cut -d' ' -f2-) $(echo "$order" | cut -d' ' -f1)"
    done
    for p in $order; do
        before=$(origin_count)
        read -r rps cpu < <(measure "${pid_of[$p]}" "${url_of[$p]}" $CLIENT_CPU "$CONNECTIONS" "$RPS_SECONDS")
        # origin requests per page: rps x seconds is the page count wrk saw
        origin_runs[$p]+="$(awk -v n=$(($(origin_count) - before)) -v r="$rps" -v s="$RPS_SECONDS" 'BEGIN {printf "%.4f", n / (r * s)}') "
        rps_runs[$p]+="$rps "
        cpu_runs[$p]+="$cpu "
        this_round[$p]=$rps
    done
    if [ $with_tessera = 1 ]; then
        ratio_tv+="$(awk -v t="${this_round[tessera]}" -v v="${this_round[varnish]}" 'BEGIN {printf "%.2f", t / v}') "
        ratio_ts+="$(awk -v t="${this_round[tessera]}" -v s="${this_round[static]}" 'BEGIN {printf "%.2f", t / s}') "
    fi
done
declare -A rps_med=() cpu_med=()
label_varnish="varnish  page, from its cache"
label_tessera="tessera  page, from its cache"
label_static="tessera  static file, same bytes"
printf '%-40s %11s %11s %17s\n' "" "requests/s" "cpu us/req" "origin req/request"
for p in $targets; do
    rps_med[$p]=$(echo "${rps_runs[$p]}" | tr ' ' '\n' | grep . | median)
    cpu_med[$p]=$(echo "${cpu_runs[$p]}" | tr ' ' '\n' | grep . | median)
    label=label_$p
    printf '%-40s %11.0f %11.2f %17.4f   (runs: %s)\n' "${!label}" "${rps_med[$p]}" \
        "${cpu_med[$p]}" "$(echo "${origin_runs[$p]}" | tr ' ' '\n' | grep . | median)" "${rps_runs[$p]% }"
done
if [ $with_tessera = 1 ]; then
    tv=$(echo "$ratio_tv" | tr ' ' '\n' | grep . | median)
    ts=$(echo "$ratio_ts" | tr ' ' '\n' | grep . | median)
    echo "per-round ratios, tessera/varnish: ${ratio_tv% } (median x$tv); tessera page/static file: ${ratio_ts% } (median $ts)"
    awk -v tv="$tv" -v ts="$ts" 'BEGIN {
        printf "targets on the median of per-round ratios: tessera >= 10x varnish: %s; tessera page >= 0.5 x static file: %s\n",
            (tv >= 10) ? "met" : "NOT met", (ts >= 0.5) ? "met" : "NOT met" }'
    awk -v v="${rps_med[varnish]}" -v t="${rps_med[tessera]}" -v s="${rps_med[static]}" \
        -v vc="${cpu_med[varnish]}" -v tc="${cpu_med[tessera]}" -v sc="${cpu_med[static]}" 'BEGIN {
        printf "ratio of medians, tessera/varnish requests/s: x%.1f; cpu per request: varnish/tessera x%.1f\n",
            t / v, vc / tc
        printf "ratio of medians, tessera page/tessera static file requests/s: %.2f; cpu per request: static/page %.2f\n",
            t / s, sc / tc }'
fi
