#!/usr/bin/env bash
# What the per-upstream figures (tessera_upstream_requests_total and
# tessera_upstream_response_seconds, issue 22) cost a proxied request: the working tree's
# build against BASE_BIN (a build without them), as reverse proxies of the same origin, in
# one run. The origin is a third tessera serving a 1 KB file with no freshness information
# (Last-Modified only), so nothing is stored and every request goes upstream, where the
# figures are counted. The upstream pool keeps every connection (max_connections =
# max_idle = 128, as bench/proxy.sh "tuned"). Each proxy runs one worker pinned to core 0;
# the origin and wrk -t1 -c50 share core 1. The two take turns in every round, who goes
# first alternating; prints the median requests/s and proxy CPU per request of each and
# the ratio new/base with its per-round spread.
#
# usage: BASE_BIN=path bench/upstream-metrics.sh [ROUNDS] [SECONDS]   (defaults: 9 rounds of 5 s)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-9}
SECONDS_PER_RUN=${2:-5}
PROXY_CPU=0
LOAD_CPU=1
: "${BASE_BIN:?BASE_BIN: the tessera build to compare against}"

source bench/lib.sh
need wrk wrk
need curl curl
need taskset util-linux

[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
NEW=${TESSERA:-$PWD/target/release/tessera}

make_work upstream-metrics
mkdir -p "$work/site"
head -c 1024 /dev/zero | tr '\0' 'a' > "$work/site/1k.txt"
origin_port=$(free_port)
taskset -c $LOAD_CPU "$NEW" serve --root "$work/site" --listen "127.0.0.1:$origin_port" \
    --workers 1 2> "$work/origin.log" &
pids+=($!)
wait_up "$origin_port" 1k.txt
cat > "$work/proxy.toml" <<CONF
[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port"]
max_connections = 128
max_idle = 128

[[route]]
prefix = "/"
upstream = "origin"
CONF

declare -A pid_of port_of
for which in base new; do
    bin=$NEW
    [ "$which" = base ] && bin=$BASE_BIN
    port_of[$which]=$(free_port)
    taskset -c $PROXY_CPU "$bin" serve --config "$work/proxy.toml" \
        --listen "127.0.0.1:${port_of[$which]}" --workers 1 2> "$work/$which.log" &
    pid_of[$which]=$!
    pids+=($!)
    wait_up "${port_of[$which]}" 1k.txt
done

echo "# $(date -u +'%F %H:%M UTC'), $(nproc) cores, $(uname -r); proxies on core $PROXY_CPU, origin and wrk -t1 -c50 -d${SECONDS_PER_RUN}s on core $LOAD_CPU; $ROUNDS rounds"
declare -A cpu rps
ratios=""
for round in $(seq "$ROUNDS"); do
    order="base new"
    [ $((round % 2)) = 0 ] && order="new base"
    declare -A this=()
    for which in $order; do
        read -r r c < <(measure "${pid_of[$which]}" "http://127.0.0.1:${port_of[$which]}/1k.txt" $LOAD_CPU 50 "$SECONDS_PER_RUN")
        rps[$which]+="$r "
        cpu[$which]+="$c "
        this[$which]=$c
    done
    ratios+="$(awk -v a="${this[new]}" -v b="${this[base]}" 'BEGIN { printf "%.4f", a / b }') "
done
printf '%-6s %12s %12s\n' build "requests/s" "cpu us/req"
for which in base new; do
    printf '%-6s %12s %12s\n' "$which" \
        "$(echo "${rps[$which]}" | tr ' ' '\n' | grep . | median)" \
        "$(echo "${cpu[$which]}" | tr ' ' '\n' | grep . | median)"
done
sorted=$(echo "$ratios" | tr ' ' '\n' | grep . | sort -g)
echo "cpu per request new/base: median $(echo "$sorted" | median), rounds from $(echo "$sorted" | head -1) to $(echo "$sorted" | tail -1)"
