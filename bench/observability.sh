#!/usr/bin/env bash
# Observability (issue 48), in one run on one synthetic combined log:
#   report     tessera logs report LOG                       (the reference)
#   export     tessera logs export LOG --parquet OUT         (target: at most 2x report's wall time)
#   duckdb     DuckDB (Python package) answering the report's main questions from the Parquet
#              file: hits and bytes, top 10 URLs by hits, statuses, top 10 clients, hits per
#              hour (the queries' own time, measured inside Python, without its start-up)
#   goaccess   GoAccess on the raw log (its JSON report)
# The log-field and tracing cases of issue 48 are not built yet; they will join this script.
# Prints medians over ROUNDS (GoAccess: GOACCESS_ROUNDS), wall and CPU seconds, and the
# ratios; exits 1 when export takes more than twice the report's wall time.
#
#   bench/observability.sh            # 1,000,000 lines, 5 rounds
#   LINES=2000000 ROUNDS=7 bench/observability.sh
set -euo pipefail

LINES=${LINES:-1000000}
SEED=${SEED:-1}
ROUNDS=${ROUNDS:-5}
GOACCESS_ROUNDS=${GOACCESS_ROUNDS:-1}
DIR=${BENCH_DIR:-/tmp/tessera-observability-bench}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export LC_ALL=C

need() { command -v "$1" >/dev/null || { echo "installing $2" >&2; apt-get install -y "$2" >/dev/null; }; }
need goaccess goaccess
python3 -c "import duckdb" 2>/dev/null || python3 -m pip install -q duckdb 2>/dev/null ||
    python3 -m pip install -q --break-system-packages duckdb

mkdir -p "$DIR"
LOG="$DIR/access-$LINES-$SEED.log"
PARQUET="$DIR/access.parquet"
(cd "$ROOT" && cargo build --release --locked -q -p tessera && cargo build --release --locked -q -p logs --example genlog)
TESSERA="$ROOT/target/release/tessera"
if [ ! -s "$LOG" ]; then
    "$ROOT/target/release/examples/genlog" --lines "$LINES" --seed "$SEED" > "$LOG.tmp"
    mv "$LOG.tmp" "$LOG"
fi
BYTES=$(stat -c %s "$LOG")
cat "$LOG" > /dev/null   # every contender reads from the page cache

# run NAME CMD...: one timed run; appends "wall cpu" (seconds; CPU = user + system of the
# command and its children) to $DIR/NAME.times.
run() {
    local name=$1; shift
    local TIMEFORMAT='%3R %3U %3S'
    { time "$@" > "$DIR/$name.out" 2> "$DIR/$name.err"; } 2> "$DIR/time.tmp"
    awk '{ printf "%s %.3f\n", $1, $2 + $3 }' "$DIR/time.tmp" >> "$DIR/$name.times"
}

# The report's questions in SQL; prints the queries' wall and CPU seconds, then the answers.
cat > "$DIR/queries.py" <<'PY'
import duckdb, resource, sys, time
con = duckdb.connect()
con.execute(f"create view log as select * from read_parquet('{sys.argv[1]}')")
queries = [
    "select count(*), sum(bytes) from log",
    "select path, count(*) n, sum(bytes) from log group by path order by n desc, path limit 10",
    "select status, count(*) from log group by status order by status",
    "select client, count(*) n, sum(bytes) from log group by client order by n desc, client limit 10",
    "select date_trunc('hour', time) h, count(*), sum(bytes) from log group by h order by h",
]
cpu0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
answers = [con.execute(q).fetchall() for q in queries]
wall = time.perf_counter() - t0
cpu1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
print(f"{wall:.3f} {cpu:.3f}")
for a in answers:
    print(a[:3])
PY

rm -f "$DIR"/*.times
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for round in $(seq "$ROUNDS"); do
    run report "$TESSERA" logs report "$LOG" --json
    run export "$TESSERA" logs export "$LOG" --parquet "$PARQUET"
    python3 "$DIR/queries.py" "$PARQUET" > "$DIR/duckdb.out"
    head -1 "$DIR/duckdb.out" >> "$DIR/duckdb.times"
done
for round in $(seq "$GOACCESS_ROUNDS"); do
    run goaccess goaccess "$LOG" --log-format=COMBINED --no-progress -o "$DIR/goaccess.json"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# The export and the report must agree, or the comparison means nothing.
TE_HITS=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['hits'])" "$DIR/report.out")
DUCK_HITS=$(sed -n 2p "$DIR/duckdb.out" | grep -o '^\[([0-9]*' | tr -d '[(')
if [ "$TE_HITS" != "$DUCK_HITS" ]; then
    echo "FAIL: the report counted $TE_HITS hits, DuckDB $DUCK_HITS rows in the export" >&2
    exit 1
fi

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
wall() { awk '{ print $1 }' "$DIR/$1.times" | median; }
cpu() { awk '{ print $2 }' "$DIR/$1.times" | median; }

echo "tessera logs export benchmark: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores"
echo "log: $LOG ($LINES lines, $BYTES bytes, seed $SEED); medians of $ROUNDS rounds (GoAccess: $GOACCESS_ROUNDS)"
echo "load average (1, 5, 15 min): $LOAD_BEFORE before, $LOAD_AFTER after"
echo "parquet: $(stat -c %s "$PARQUET") bytes; $(cat "$DIR/export.err")"
printf '%-10s %9s %9s\n' case wall_s cpu_s
for name in report export duckdb goaccess; do
    printf '%-10s %9s %9s\n' "$name" "$(wall "$name")" "$(cpu "$name")"
done
ratio=$(awk -v e="$(wall export)" -v r="$(wall report)" 'BEGIN { printf "%.2f", e / r }')
echo "export / report (wall): x$ratio (target: at most x2.00)"
echo "goaccess / duckdb queries (wall): x$(awk -v g="$(wall goaccess)" -v d="$(wall duckdb)" 'BEGIN { printf "%.1f", g / d }')"
echo "goaccess / (export + duckdb queries) (wall): x$(awk -v g="$(wall goaccess)" -v e="$(wall export)" -v d="$(wall duckdb)" 'BEGIN { printf "%.1f", g / (e + d) }')"
awk -v r="$ratio" 'BEGIN { exit !(r <= 2.0) }' || { echo "FAIL: export takes more than twice the report's time"; exit 1; }
echo PASS
