#!/usr/bin/env bash
# What metrics cost the request path (issue 22): the 12-byte keep-alive benchmark of
# bench/peers.sh against two tessera processes in the same run, one with the admin
# listener on and scraped every second (curl /metrics, on core 1 with the load), one
# without an admin listener (no request is counted). Each runs one worker pinned to
# core 0; wrk -t1 -c100 drives it from core 1. The two take turns in every round, so both
# see the same machine noise; prints the median requests/s and server CPU per request of
# each and the ratio metrics-on / metrics-off (target: within 2%).
#
# With BASE_BIN set (a build to compare against), a third process of that build, its admin
# listener on and scraped every second too, takes its turn in each round, and the ratio
# of this build to it (both counting) is printed as well: what the counters this build
# adds cost.
#
# usage: [BASE_BIN=path] bench/metrics.sh [ROUNDS] [SECONDS]   (defaults: 7 rounds of 5 s)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-7}
SECONDS_PER_RUN=${2:-5}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need wrk wrk
need curl curl
need taskset util-linux

cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera

make_work metrics
mkdir -p "$work/site"
printf 'hello world\n' > "$work/site/12b.txt"

off_port=$(free_port)
taskset -c $SERVER_CPU "$TESSERA" serve --root "$work/site" --listen "127.0.0.1:$off_port" \
    --workers 1 2> "$work/off.log" &
off_pid=$!
pids+=("$off_pid")
on_port=$(free_port)
admin_port=$(free_port)
taskset -c $SERVER_CPU "$TESSERA" serve --root "$work/site" --listen "127.0.0.1:$on_port" \
    --workers 1 --admin-listen "127.0.0.1:$admin_port" 2> "$work/on.log" &
on_pid=$!
pids+=("$on_pid")
wait_up "$off_port" 12b.txt
wait_up "$on_port" 12b.txt
curl -fsS -o /dev/null "http://127.0.0.1:$admin_port/metrics"
kinds="off on"
if [ -n "${BASE_BIN:-}" ]; then
    base_port=$(free_port)
    base_admin=$(free_port)
    taskset -c $SERVER_CPU "$BASE_BIN" serve --root "$work/site" --listen "127.0.0.1:$base_port" \
        --workers 1 --admin-listen "127.0.0.1:$base_admin" 2> "$work/base.log" &
    base_pid=$!
    pids+=("$base_pid")
    wait_up "$base_port" 12b.txt
    kinds="off on base"
fi

# One scrape a second of admin port $1 while its server is measured.
scrape() {
    while sleep 1; do
        taskset -c $LOAD_CPU curl -fsS -o /dev/null "http://127.0.0.1:$1/metrics" || true
    done
}

declare -A cpu rps
for round in $(seq "$ROUNDS"); do
    order=$kinds
    [ $((round % 2)) = 0 ] && order=$(echo "$kinds" | tr ' ' '\n' | tac | tr '\n' ' ')
    for which in $order; do
        if [ "$which" = on ]; then
            scrape "$admin_port" & scraper=$!
            read -r r c < <(measure "$on_pid" "http://127.0.0.1:$on_port/12b.txt" $LOAD_CPU 100 "$SECONDS_PER_RUN")
            kill "$scraper"; wait "$scraper" 2>/dev/null || true
        elif [ "$which" = base ]; then
            scrape "$base_admin" & scraper=$!
            read -r r c < <(measure "$base_pid" "http://127.0.0.1:$base_port/12b.txt" $LOAD_CPU 100 "$SECONDS_PER_RUN")
            kill "$scraper"; wait "$scraper" 2>/dev/null || true
        else
            read -r r c < <(measure "$off_pid" "http://127.0.0.1:$off_port/12b.txt" $LOAD_CPU 100 "$SECONDS_PER_RUN")
        fi
        cpu[$which]+="$c "
        rps[$which]+="$r "
    done
done

scrapes=$(curl -fsS "http://127.0.0.1:$admin_port/metrics" | awk '/^tessera_requests_total\{host="default",kind="admin"/ {print $2}')
counted=$(curl -fsS "http://127.0.0.1:$admin_port/metrics" | awk '/^tessera_requests_total\{host="default",kind="static"/ {s += $2} END {print s}')
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores; one worker on core $SERVER_CPU, wrk -t1 -c100 -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
echo "# metrics-on: $scrapes scrapes answered, $counted requests counted"
printf '%-12s %12s %12s   %s\n' server "requests/s" "cpu us/req" "cpu per round"
for which in $kinds; do
    printf '%-12s %12s %12s   (%s)\n' "metrics-$which" \
        "$(echo "${rps[$which]}" | tr ' ' '\n' | grep . | median)" \
        "$(echo "${cpu[$which]}" | tr ' ' '\n' | grep . | median)" "${cpu[$which]% }"
done
python3 - "${cpu[off]}" "${cpu[on]}" <<'EOF'
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
ratios = [b / a for a, b in zip(off, on)]
print("metrics on/off cpu per request: median x%.3f (per round: %s)"
      % (statistics.median(ratios), " ".join("%.3f" % r for r in ratios)))
EOF
if [ -n "${BASE_BIN:-}" ]; then
    python3 - "${cpu[base]}" "${cpu[on]}" <<'EOF'
import statistics, sys
base = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
ratios = [b / a for a, b in zip(base, on)]
print("metrics on, this build/BASE_BIN cpu per request: median x%.3f (per round: %s)"
      % (statistics.median(ratios), " ".join("%.3f" % r for r in ratios)))
EOF
fi
