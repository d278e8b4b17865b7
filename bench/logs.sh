#!/usr/bin/env bash
# Measures `tessera logs` against its peers on one synthetic combined log, in one run:
#   wc -l (the floor: reading the bytes), tessera logs top (Wide Finder), a
#   grep | sort | uniq -c pipeline doing the same query, tessera logs report, GoAccess.
# Prints medians over ROUNDS, GB/s (wall) and GB/s per core (bytes / CPU seconds), the
# ratios, and PASS/FAIL for the targets of issue 9; exits 1 if a target is missed.
#
#   bench/logs.sh                      # 1,000,000 lines, 5 rounds (GoAccess: 1 round)
#   LINES=2000000 ROUNDS=7 GOACCESS_ROUNDS=3 bench/logs.sh
set -euo pipefail

LINES=${LINES:-1000000}
SEED=${SEED:-1}
ROUNDS=${ROUNDS:-5}
GOACCESS_ROUNDS=${GOACCESS_ROUNDS:-1}
DIR=${BENCH_DIR:-/tmp/tessera-logs-bench}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PATTERN='GET /ongoing/When/\d\d\dx/(\d\d\d\d/\d\d/\d\d/[^ .]+) '
export LC_ALL=C

need() { command -v "$1" >/dev/null || { echo "installing $2" >&2; apt-get install -y "$2" >/dev/null; }; }
need goaccess goaccess

mkdir -p "$DIR"
LOG="$DIR/access-$LINES-$SEED.log"
(cd "$ROOT" && cargo build --release --locked -q -p tessera && cargo build --release --locked -q -p logs --example genlog)
TESSERA="$ROOT/target/release/tessera"
if [ ! -s "$LOG" ]; then
    "$ROOT/target/release/examples/genlog" --lines "$LINES" --seed "$SEED" > "$LOG.tmp"
    mv "$LOG.tmp" "$LOG"
fi
BYTES=$(stat -c %s "$LOG")
cat "$LOG" > /dev/null   # every contender reads from the page cache

# run NAME CMD...: one timed run; appends "wall cpu" (seconds, CPU = user + system of
# the command and its children) to $DIR/NAME.times. Bash's `time` has millisecond
# resolution, GNU time only centiseconds.
run() {
    local name=$1; shift
    local TIMEFORMAT='%3R %3U %3S'
    { time "$@" > "$DIR/$name.out" 2> "$DIR/$name.err"; } 2> "$DIR/time.tmp"
    awk '{ printf "%s %.3f\n", $1, $2 + $3 }' "$DIR/time.tmp" >> "$DIR/$name.times"
}

wide_finder_grep() {
    grep -oP 'GET /ongoing/When/\d\d\dx/\K\d\d\d\d/\d\d/\d\d/[^ .]+(?= )' "$LOG" \
        | sort | uniq -c | sort -k1,1nr -k2,2 | head -10 | awk '{ print $1 ": " $2 }'
}
export -f wide_finder_grep; export LOG

rm -f "$DIR"/*.times
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
    run wc wc -l "$LOG"
    run top "$TESSERA" logs top "$LOG" --pattern "$PATTERN"
    run grep bash -c wide_finder_grep
    run report "$TESSERA" logs report "$LOG"
done
for round in $(seq "$GOACCESS_ROUNDS"); do
    run goaccess goaccess "$LOG" --log-format=COMBINED --no-progress -o "$DIR/goaccess.json"
done

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The pipeline and tessera must agree, or the comparison means nothing.
if ! diff -u "$DIR/grep.out" "$DIR/top.out"; then
    echo "FAIL: tessera logs top and grep | sort | uniq -c disagree" >&2
    exit 1
fi
GO_HITS=$(grep -o '"total_requests": *[0-9]*' "$DIR/goaccess.json" | head -1 | grep -o '[0-9]*$')
TE_HITS=$(awk '/^  lines/ { print $3 }' "$DIR/report.out" | tr -d '(')

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
wall() { awk '{ print $1 }' "$DIR/$1.times" | median; }
cpu() { awk '{ print $2 }' "$DIR/$1.times" | median; }

echo "tessera logs benchmark: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "log: $LOG ($LINES lines, $BYTES bytes, seed $SEED); medians of $ROUNDS rounds (GoAccess: $GOACCESS_ROUNDS)"
echo "load average (1, 5, 15 min): $LOAD_BEFORE before, $LOAD_AFTER after (other work on the machine)"
echo "hits counted: tessera $TE_HITS, GoAccess $GO_HITS"
echo
printf '%-34s %9s %9s %10s %14s\n' contender "wall s" "cpu s" "GB/s" "GB/s per core"
row() {
    local w c; w=$(wall "$1"); c=$(cpu "$1")
    awk -v n="$2" -v w="$w" -v c="$c" -v b="$BYTES" 'BEGIN {
        printf "%-34s %9.3f %9.3f %10.2f %14s\n", n, w, c, b / w / 1e9, (c > 0 ? sprintf("%.2f", b / c / 1e9) : "-") }'
}
row wc "wc -l"
row top "tessera logs top (Wide Finder)"
row grep "grep -oP | sort | uniq -c"
row report "tessera logs report"
row goaccess "goaccess (COMBINED, JSON out)"
echo

W_WC=$(wall wc); W_TOP=$(wall top); W_GREP=$(wall grep); W_REP=$(wall report); W_GO=$(wall goaccess)
C_TOP=$(cpu top); C_REP=$(cpu report)
status=0
check() { # check LABEL VALUE OP LIMIT
    if awk -v v="$2" -v l="$4" -v op="$3" 'BEGIN { exit !((op == ">=") ? v >= l : v <= l) }'; then
        printf 'PASS  %-44s %8.2f (target %s %s)\n' "$1" "$2" "$3" "$4"
    else
        printf 'FAIL  %-44s %8.2f (target %s %s)\n' "$1" "$2" "$3" "$4"; status=1
    fi
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
gbps() { awk -v b="$BYTES" -v s="$1" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
check "top GB/s per core" "$(gbps "$C_TOP")" ">=" 1.5
check "top wall / wc -l wall" "$(ratio "$W_TOP" "$W_WC")" "<=" 3
check "report GB/s per core" "$(gbps "$C_REP")" ">=" 0.5
check "GoAccess wall / report wall" "$(ratio "$W_GO" "$W_REP")" ">=" 100
C_WC=$(cpu wc); C_GO=$(cpu goaccess)
printf 'info  %-44s %8.2f\n' "grep pipeline wall / top wall" "$(ratio "$W_GREP" "$W_TOP")"
printf 'info  %-44s %8.2f\n' "top cpu / wc -l cpu" "$(ratio "$C_TOP" "$C_WC")"
printf 'info  %-44s %8.2f\n' "GoAccess cpu / report cpu" "$(ratio "$C_GO" "$C_REP")"
exit $status
