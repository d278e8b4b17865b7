#!/usr/bin/env bash
# wrk versus `tessera bench` as load generators, against the same nginx, in one run.
#
# nginx (one worker) is pinned to core 0 and the generator to core 1 (taskset).
# Three modes: keep-alive, pipelined (depth 16) and one connection per request.
# For each mode the two generators alternate for ROUNDS rounds of DURATION each,
# so both see the same machine noise. Per run we record requests/s and the
# generator's CPU time per request: user+system time of the generator process,
# read from /proc (the cutime+cstime of the shell that waited for it), divided
# by the requests it completed. Medians over the rounds are printed side by side
# with the ratios tessera/wrk (CPU per request: lower is better; requests/s:
# higher is better).
#
# Usage: bench/loadgen.sh   (env: ROUNDS=3 DURATION=5 CONNS=50 PORT=(a free one)
#                                MODES="keepalive pipeline close")
# Needs: nginx, wrk, taskset, python3 (installed with apt-get if missing).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-50}
MODES=${MODES:-keepalive pipeline close}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESSERA=${TESSERA:-$ROOT/target/release/tessera}

source "$ROOT/bench/lib.sh"
# A free port unless PORT names one: a fixed one may be taken by a server left running.
PORT=${PORT:-$(free_port)}
need nginx nginx
need wrk wrk
need taskset util-linux
need python3 python3

if [ "$(nproc --all)" -lt 2 ]; then echo "needs at least 2 cores (server and generator pinned apart)" >&2; exit 1; fi
SERVER_CORE=0
GEN_CORE=1

if [ ! -x "$TESSERA" ] || [ -z "${NO_BUILD:-}" ]; then
  (cd "$ROOT" && cargo build --release -p tessera >&2)
fi

WORK=$(mktemp -d /tmp/tessera-loadgen.XXXXXX)
NGINX_PID=""
cleanup() {
  if [ -n "$NGINX_PID" ]; then kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
chmod 755 "$WORK"   # nginx workers run as an unprivileged user

mkdir -p "$WORK/html"
printf 'hello from nginx, a small static page for load generator comparisons\n' > "$WORK/html/index.html"
cat > "$WORK/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  keepalive_timeout 60s;
  server {
    listen 127.0.0.1:$PORT backlog=4096;
    root $WORK/html;
  }
}
CONF
taskset -c $SERVER_CORE nginx -c "$WORK/nginx.conf" -p "$WORK" &
NGINX_PID=$!
for _ in $(seq 50); do
  if (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null; then break; fi
  sleep 0.1
done
URL=http://127.0.0.1:$PORT/index.html

cat > "$WORK/pipeline.lua" <<'LUA'
init = function(args)
  local r = {}
  for i = 1, tonumber(args[1]) do r[i] = wrk.format() end
  req = table.concat(r)
end
request = function() return req end
LUA


wrk_run() { # mode
  local extra=()
  case $1 in
    keepalive) ;;
    pipeline) extra=(-s "$WORK/pipeline.lua" "$URL" -- 16) ;;
    close) extra=(-H "Connection: close") ;;
  esac
  local cpu
  if [ "$1" = pipeline ]; then
    cpu=$(run_pinned $GEN_CORE "$WORK/out" wrk -t1 -c"$CONNS" -d"${DURATION}s" "${extra[@]}")
  else
    cpu=$(run_pinned $GEN_CORE "$WORK/out" wrk -t1 -c"$CONNS" -d"${DURATION}s" "${extra[@]}" "$URL")
  fi
  local reqs secs
  reqs=$(awk '/requests in/ {print $1}' "$WORK/out")
  secs=$(awk '/requests in/ {gsub(/s,/,"",$4); print $4}' "$WORK/out")
  local errs
  errs=$(awk '/Socket errors|Non-2xx/ {printf "%s ", $0}' "$WORK/out")
  echo "$reqs $secs $cpu ${errs:+[$errs]}"
}

tessera_run() { # mode
  local extra=()
  case $1 in
    keepalive) ;;
    pipeline) extra=(--pipeline 16) ;;
    close) extra=(--no-keepalive) ;;
  esac
  local cpu
  cpu=$(run_pinned $GEN_CORE "$WORK/out" "$TESSERA" bench -q --json -t1 -c"$CONNS" -d"${DURATION}s" "${extra[@]}" "$URL")
  bench_summary "$WORK/out" "$cpu"
}

echo "# bench/loadgen.sh  $(date -u +%Y-%m-%dT%H:%MZ)  rounds=$ROUNDS duration=${DURATION}s connections=$CONNS"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores, $(uname -r)"
echo "# nginx $(nginx -v 2>&1 | cut -d/ -f2) on core $SERVER_CORE, generator on core $GEN_CORE; $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2); tessera $("$TESSERA" --version | cut -d' ' -f2)"
echo "# raw: mode round tool requests seconds cpu_seconds req/s cpu_us_per_request"
RAW="$WORK/raw"
: > "$RAW"
for mode in $MODES; do
  for round in $(seq "$ROUNDS"); do
    for tool in wrk tessera; do
      read -r reqs secs cpu rest < <(${tool}_run $mode)
      line=$(python3 -c "r=$reqs; s=$secs; c=$cpu; print(f'$mode $round $tool {r} {s} {c} {r/s:.0f} {c*1e6/max(r,1):.2f}')")
      echo "$line ${rest:-}"
      echo "$line" >> "$RAW"
    done
  done
done

echo
python3 - "$RAW" $MODES <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print(f"{'mode':<10} {'wrk req/s':>11} {'tessera req/s':>14} {'ratio':>7}   {'wrk µs/req':>11} {'tessera µs/req':>15} {'ratio':>7}")
for mode in sys.argv[2:]:
    def med(tool, col):
        return statistics.median(float(r[col]) for r in rows if r[0] == mode and r[2] == tool)
    wr, tr = med("wrk", 6), med("tessera", 6)
    wc, tc = med("wrk", 7), med("tessera", 7)
    # Per-round ratios show the spread.
    rr = [float(t[6]) / float(w[6]) for w, t in zip(
        [r for r in rows if r[0] == mode and r[2] == "wrk"],
        [r for r in rows if r[0] == mode and r[2] == "tessera"])]
    cr = [float(t[7]) / float(w[7]) for w, t in zip(
        [r for r in rows if r[0] == mode and r[2] == "wrk"],
        [r for r in rows if r[0] == mode and r[2] == "tessera"])]
    print(f"{mode:<10} {wr:>11.0f} {tr:>14.0f} {tr/wr:>7.2f}   {wc:>11.2f} {tc:>15.2f} {tc/wc:>7.2f}"
          f"   (per-round ratios req/s {min(rr):.2f}..{max(rr):.2f}, µs/req {min(cr):.2f}..{max(cr):.2f})")
PY
