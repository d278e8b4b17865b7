#!/usr/bin/env bash
# What the access log costs: tessera serving the 12-byte file with the access log off and
# on (combined format, a file on local disk), one worker pinned to core 0, wrk from core 1
# with 100 keep-alive connections, alternating rounds. Target: logging costs at most 10%
# of requests/s.
#
# usage: bench/accesslog.sh [ROUNDS] [SECONDS]     (defaults: 5 rounds of 5 s)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${1:-5}
SECONDS_PER_RUN=${2:-5}
need wrk wrk
cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera

make_work accesslog
mkdir -p "$work/site"
printf 'hello world\n' > "$work/site/12b.txt"

off_port=$(free_port)
taskset -c 0 "$TESSERA" serve --root "$work/site" --listen "127.0.0.1:$off_port" --workers 1 2>/dev/null &
pids+=($!); off_pid=$!
on_port=$(free_port)
taskset -c 0 "$TESSERA" serve --root "$work/site" --listen "127.0.0.1:$on_port" --workers 1 --access-log "$work/access.log" 2>/dev/null &
pids+=($!); on_pid=$!
wait_up "$off_port" 12b.txt; wait_up "$on_port" 12b.txt

off_rps="" on_rps="" off_cpu="" on_cpu=""
for _ in $(seq "$ROUNDS"); do
    read -r rps cpu < <(measure "$off_pid" "http://127.0.0.1:$off_port/12b.txt" 1 100 "$SECONDS_PER_RUN")
    off_rps+="$rps"$'\n'; off_cpu+="$cpu"$'\n'
    read -r rps cpu < <(measure "$on_pid" "http://127.0.0.1:$on_port/12b.txt" 1 100 "$SECONDS_PER_RUN")
    on_rps+="$rps"$'\n'; on_cpu+="$cpu"$'\n'
done
sleep 1
lines=$(wc -l < "$work/access.log")
echo "# $(date -u +%F) $(nproc) cores, $(uname -r); one worker on core 0, wrk -t1 -c100 -d${SECONDS_PER_RUN}s on core 1; median of $ROUNDS rounds"
printf '%-12s %12s %12s\n' "access log" "requests/s" "cpu us/req"
printf '%-12s %12.0f %12.2f\n' off "$(echo -n "$off_rps" | median)" "$(echo -n "$off_cpu" | median)"
printf '%-12s %12.0f %12.2f   (%s lines written)\n' on "$(echo -n "$on_rps" | median)" "$(echo -n "$on_cpu" | median)" "$lines"
awk -v a="$(echo -n "$off_rps" | median)" -v b="$(echo -n "$on_rps" | median)" -v c="$(echo -n "$off_cpu" | median)" -v d="$(echo -n "$on_cpu" | median)" \
    'BEGIN { printf "logging on: requests/s %+.1f%%, cpu per request %+.1f%% (target: requests/s no worse than -10%%)\n", (b / a - 1) * 100, (d / c - 1) * 100 }'
