#!/usr/bin/env bash
# Observability (issue 48), in one run. Two parts (PART=logs, PART=serve, default both).
#
# logs: on one synthetic combined log,
#   report     tessera logs report LOG                       (the reference)
#   export     tessera logs export LOG --parquet OUT         (target: at most 2x report's wall time)
#   duckdb     DuckDB (Python package) answering the report's main questions from the Parquet
#              file: hits and bytes, top 10 URLs by hits, statuses, top 10 clients, hits per
#              hour (the queries' own time, measured inside Python, without its start-up)
#   goaccess   GoAccess on the raw log (its JSON report)
# Prints medians over ROUNDS (GoAccess: GOACCESS_ROUNDS), wall and CPU seconds, and the
# ratios; exits 1 when export takes more than twice the report's wall time.
#
# serve: proxied 1 KB requests (an origin tessera on core 1 serving a file without freshness
# information, so nothing is cached), each proxy one worker on core 0, wrk -t1 -c$CONNECTIONS
# on core 1; the server's CPU time per request (utime+stime of its process tree from /proc,
# bench/lib.sh `measure`), every case once per round in an order that rotates, each
# round with every server started afresh (and warmed for a second):
#   off          tessera proxying, no access log, no [tracing]
#   json         the same with access_log_format = "json" and every JSON field it has
#                (target: at most 1.08x off)
#   nginx-off    nginx proxying (keepalive pool to the origin), access_log off
#   nginx-json   the same with `log_format ... escape=json` of the equivalent variables
#                (compared with nginx-off, in the same run)
#   trace1       tessera with [tracing] sampling = 0.01 and a live OTLP receiver
#                (target: at most 1.03x off)
#   trace100     the same with sampling = 1: every request's spans exported (reported)
# The receiver is a Python OTLP/HTTP server on core 1 that decodes every batch with the
# official opentelemetry-proto package and counts the spans.
#
#   bench/observability.sh            # 1,000,000 lines, 5 rounds
#   LINES=2000000 ROUNDS=7 bench/observability.sh
#   PART=serve ROUNDS=7 SECONDS_PER_RUN=5 CONNECTIONS=50 bench/observability.sh
set -euo pipefail

PART=${PART:-all}
LINES=${LINES:-1000000}
SEED=${SEED:-1}
ROUNDS=${ROUNDS:-5}
GOACCESS_ROUNDS=${GOACCESS_ROUNDS:-1}
DIR=${BENCH_DIR:-/tmp/tessera-observability-bench}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export LC_ALL=C

need() { command -v "$1" >/dev/null || { echo "installing $2" >&2; apt-get install -y "$2" >/dev/null; }; }
(cd "$ROOT" && cargo build --release --locked -q -p tessera)
TESSERA="$ROOT/target/release/tessera"

logs_part() {
need goaccess goaccess
python3 -c "import duckdb" 2>/dev/null || python3 -m pip install -q duckdb 2>/dev/null ||
    python3 -m pip install -q --break-system-packages duckdb

mkdir -p "$DIR"
LOG="$DIR/access-$LINES-$SEED.log"
PARQUET="$DIR/access.parquet"
(cd "$ROOT" && cargo build --release --locked -q -p logs --example genlog)
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
}

serve_part() {
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-50}
SERVER_CPU=0
LOAD_CPU=1
cd "$ROOT"
source bench/lib.sh
need wrk wrk
need nginx nginx
need curl curl
need taskset util-linux
python3 -c "import opentelemetry.proto.collector.trace.v1.trace_service_pb2" 2>/dev/null ||
    python3 -m pip install -q opentelemetry-proto 2>/dev/null ||
    python3 -m pip install -q --break-system-packages opentelemetry-proto
make_work observability
site=$work/site
mkdir -p "$site"
head -c 1024 /dev/zero | tr '\0' 'a' > "$site/1k.txt"

# The origin: tessera, one worker, on the load core.
origin_port=$(free_port)
taskset -c $LOAD_CPU "$TESSERA" serve --root "$site" --listen "127.0.0.1:$origin_port" --workers 1 2>"$work/origin.log" &
pids+=($!)
wait_up "$origin_port" 1k.txt

# The OTLP/HTTP receiver: decodes each batch, counts its spans (written to a file after
# each batch), answers 200.
receiver_port=$(free_port)
cat > "$work/receiver.py" <<'PY'
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
port, count_file = int(sys.argv[1]), sys.argv[2]
spans = 0
class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        global spans
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        spans += sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        with open(count_file, "w") as f:
            f.write(str(spans))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
HTTPServer(("127.0.0.1", port), Receiver).serve_forever()
PY
echo 0 > "$work/spans"
taskset -c $LOAD_CPU python3 "$work/receiver.py" "$receiver_port" "$work/spans" &
pids+=($!)

# tessera: one process (one worker) per case.
json_fields='["time", "client", "host", "route", "method", "uri", "protocol", "status", "bytes_sent",
  "body_bytes_sent", "duration", "request_id", "traceparent", "referer", "user_agent", "tls_version",
  "tls_cipher", "tls_sni", "bytes_received", "upstream_addr", "upstream_status", "upstream_connect_time",
  "upstream_header_time", "upstream_response_time", "cache", "esi_fragments", "esi_failed"]'
declare -A pid_of=() port_of=()
for c in off json trace1 trace100; do
    {
        case $c in
            json) printf 'access_log = "%s"\naccess_log_format = "json"\njson_fields = %s\n' "$work/tessera-json.log" "$json_fields" ;;
            trace1) printf '[tracing]\notlp_endpoint = "http://127.0.0.1:%s/v1/traces"\nsampling = 0.01\n' "$receiver_port" ;;
            trace100) printf '[tracing]\notlp_endpoint = "http://127.0.0.1:%s/v1/traces"\nsampling = 1.0\n' "$receiver_port" ;;
        esac
        printf '\n[[upstream]]\nname = "origin"\naddresses = ["127.0.0.1:%s"]\nmax_connections = 128\nmax_idle = 128\n' "$origin_port"
        printf '\n[[route]]\nprefix = "/"\nupstream = "origin"\n'
    } > "$work/$c.toml"
    "$TESSERA" check-config --config "$work/$c.toml" >/dev/null
    port_of[$c]=$(free_port)
done

# nginx, log off and JSON: the same proxy (a keepalive pool to the origin).
for c in nginx-off nginx-json; do
    port=$(free_port)
    mkdir -p "$work/$c"
    if [ $c = nginx-json ]; then
        log="log_format every escape=json '{\"time\":\"\$time_iso8601\",\"client\":\"\$remote_addr\",\"host\":\"\$host\",\"method\":\"\$request_method\",\"uri\":\"\$request_uri\",\"protocol\":\"\$server_protocol\",\"status\":\$status,\"bytes_sent\":\$bytes_sent,\"body_bytes_sent\":\$body_bytes_sent,\"duration\":\$request_time,\"request_id\":\"\$request_id\",\"traceparent\":\"\$http_traceparent\",\"referer\":\"\$http_referer\",\"user_agent\":\"\$http_user_agent\",\"tls_version\":\"\$ssl_protocol\",\"tls_cipher\":\"\$ssl_cipher\",\"tls_sni\":\"\$ssl_server_name\",\"bytes_received\":\$request_length,\"upstream_addr\":\"\$upstream_addr\",\"upstream_status\":\"\$upstream_status\",\"upstream_connect_time\":\"\$upstream_connect_time\",\"upstream_header_time\":\"\$upstream_header_time\",\"upstream_response_time\":\"\$upstream_response_time\",\"cache\":\"\$upstream_cache_status\"}'; access_log $work/nginx-json.log every;"
    else
        log="access_log off;"
    fi
    cat > "$work/$c/nginx.conf" <<CONF
$(nginx_head "$work/$c")
http {
    $log
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path $work/$c;
    proxy_temp_path $work/$c;
    fastcgi_temp_path $work/$c;
    uwsgi_temp_path $work/$c;
    scgi_temp_path $work/$c;
    upstream origin { server 127.0.0.1:$origin_port; keepalive 128; keepalive_requests 1000000; }
    server {
        listen 127.0.0.1:$port reuseport;
        location / { proxy_pass http://origin; proxy_http_version 1.1; proxy_set_header Connection ""; }
    }
}
CONF
    nginx -t -q -c "$work/$c/nginx.conf" -e "$work/$c/error.log"
    port_of[$c]=$port
done
cases="off json nginx-off nginx-json trace1 trace100"

# Every round starts each case's server afresh: two processes of one build with one
# configuration differed by up to 4.6% in CPU per request over seven rounds (an A/A
# check, docs/benchmarks.md, issue 48), a bias one process per case would carry whole
# into a run's ratios.
start_cases() {
    for c in $cases; do
        case $c in
            nginx-*) taskset -c $SERVER_CPU nginx -c "$work/$c/nginx.conf" -e "$work/$c/error.log" & ;;
            *) taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/$c.toml" \
                   --listen "127.0.0.1:${port_of[$c]}" --workers 1 2>>"$work/$c.err" & ;;
        esac
        pids+=($!); pid_of[$c]=$!
    done
    for c in $cases; do wait_up "${port_of[$c]}" 1k.txt; done
}
stop_cases() {
    for c in $cases; do kill "${pid_of[$c]}" 2>/dev/null || true; done
    for c in $cases; do wait "${pid_of[$c]}" 2>/dev/null || true; done
}
start_cases

# Checks before measuring: every proxy relays the file byte-exact; both JSON logs parse
# with Python's json module; the traced cases' spans reach the receiver.
for c in $cases; do
    cmp -s <(curl -fs "http://127.0.0.1:${port_of[$c]}/1k.txt") "$site/1k.txt" ||
        { echo "check: $c does not relay 1k.txt byte-exact" >&2; exit 1; }
done
for _ in $(seq 200); do curl -fs -o /dev/null "http://127.0.0.1:${port_of[trace1]}/1k.txt"; done
sleep 2
for log in "$work/tessera-json.log" "$work/nginx-json.log"; do
    python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$log" ||
        { echo "check: $log does not parse as JSON lines" >&2; exit 1; }
done
[ "$(cat "$work/spans")" -gt 0 ] || { echo "check: the receiver got no span" >&2; exit 1; }
echo "checked: every proxy relays 1k.txt byte-exact; both JSON logs parse; $(cat "$work/spans") spans received for the checks' requests (1 at 100%, 201 at 1%)"

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.lock || echo '+changes')
echo "# $(date -u '+%F %H:%M') UTC, tessera $commit, $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $(uname -r); $(nginx -v 2>&1 | sed 's/.*: //')"
echo "# proxied /1k.txt; each proxy 1 worker on core $SERVER_CPU; the origin (tessera), the OTLP receiver and wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
echo "# load average (1, 5, 15 min) before: $(cut -d' ' -f1-3 /proc/loadavg)"
for c in $cases; do measure "${pid_of[$c]}" "http://127.0.0.1:${port_of[$c]}/1k.txt" $LOAD_CPU "$CONNECTIONS" 1 >/dev/null; done
spans_before=$(cat "$work/spans")
read -ra order <<< "$cases"
declare -A rps_runs=() cpu_runs=() requests_of=()
json_runs="" nginx_runs="" trace1_runs="" trace100_runs=""
for round in $(seq "$ROUNDS"); do
    if [ "$round" -gt 1 ]; then
        stop_cases; start_cases
        for c in $cases; do
            read -r rps _ < <(measure "${pid_of[$c]}" "http://127.0.0.1:${port_of[$c]}/1k.txt" $LOAD_CPU "$CONNECTIONS" 1)
            requests_of[$c]=$(awk -v a="${requests_of[$c]:-0}" -v r="$rps" 'BEGIN { printf "%.0f", a + r }')
        done
    fi
    declare -A cpu_now=()
    n=${#order[@]}
    for i in $(seq 0 $((n - 1))); do
        c=${order[$(((i + round) % n))]}
        read -r rps cpu < <(measure "${pid_of[$c]}" "http://127.0.0.1:${port_of[$c]}/1k.txt" $LOAD_CPU "$CONNECTIONS" "$SECONDS_PER_RUN")
        rps_runs[$c]+="$rps "; cpu_runs[$c]+="$cpu "; cpu_now[$c]=$cpu
        requests_of[$c]=$(awk -v a="${requests_of[$c]:-0}" -v r="$rps" -v s="$SECONDS_PER_RUN" 'BEGIN { printf "%.0f", a + r * s }')
    done
    ratio() { awk -v a="${cpu_now[$1]}" -v b="${cpu_now[$2]}" 'BEGIN {printf "%.3f", a / b}'; }
    json_runs+="$(ratio json off) "; nginx_runs+="$(ratio nginx-json nginx-off) "
    trace1_runs+="$(ratio trace1 off) "; trace100_runs+="$(ratio trace100 off) "
    unset cpu_now
done
sleep 2   # the last batch (at most a second old) reaches the receiver
spans=$(( $(cat "$work/spans") - spans_before ))
echo "# load average (1, 5, 15 min) after: $(cut -d' ' -f1-3 /proc/loadavg)"

med() { echo "$1" | tr ' ' '\n' | grep . | median; }
printf '%-12s %12s %12s   %s\n' case "requests/s" "cpu us/req" "runs (cpu us/req)"
for c in $cases; do
    printf '%-12s %12s %12s   %s\n' "$c" "$(med "${rps_runs[$c]}")" "$(med "${cpu_runs[$c]}")" "${cpu_runs[$c]}"
done
echo
ratio_line() { # NAME A B RUNS TARGET
    echo "$1: $(awk -v a="$(med "${cpu_runs[$2]}")" -v b="$(med "${cpu_runs[$3]}")" 'BEGIN {printf "%.3f", a / b}') (median of per-round ratios $(med "$4"); rounds: $4) $5"
}
ratio_line "json / off" json off "$json_runs" "target <= 1.08"
ratio_line "nginx-json / nginx-off" nginx-json nginx-off "$nginx_runs" "(nginx, for comparison)"
ratio_line "trace1 / off" trace1 off "$trace1_runs" "target <= 1.03"
ratio_line "trace100 / off" trace100 off "$trace100_runs" "(reported)"
echo "spans received during the rounds (their warm-ups included): $spans, for about ${requests_of[trace1]} trace1 and ${requests_of[trace100]} trace100 requests (each a server and a client span when sampled)"
}

case $PART in
    logs) logs_part ;;
    serve) serve_part ;;
    all) logs_part; serve_part ;;
    *) echo "PART must be logs, serve or all" >&2; exit 2 ;;
esac
