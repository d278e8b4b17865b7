#!/usr/bin/env bash
# h2load versus `tessera bench` as HTTPS and HTTP/2 load generators, against the same h2o,
# in one run (issue 47: "`tessera bench --http2` against h2load on the same HTTP/2 target:
# client CPU per request no more than h2load's").
#
# h2o (one thread) is pinned to core 0 and the generator to core 1 (taskset). Modes:
#   h2     HTTP/2 over TLS, CONNS connections x STREAMS streams (h2load -m)
#   h2c    HTTP/2 with prior knowledge in cleartext, the same load
#   h1tls  HTTP/1.1 over TLS, keep-alive (h2load --h1)
# For each mode the two generators alternate for ROUNDS rounds of DURATION seconds, so
# both see the same machine noise. Per run: requests/s and the generator's CPU time per
# request (user+system time of the generator process from /proc, divided by the
# requests it completed). Medians of the rounds are printed with the ratios
# tessera/h2load (CPU per request: lower is better; requests/s: higher is better).
#
# Usage: bench/loadgen-h2.sh   (env: ROUNDS=5 DURATION=5 CONNS=50 STREAMS=10
#                                   MODES="h2 h2c h1tls" NO_BUILD=1)
# Needs: h2o, h2load (nghttp2-client), openssl, taskset, python3 (apt-get if missing).
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNS=${CONNS:-50}
STREAMS=${STREAMS:-10}
MODES=${MODES:-h2 h2c h1tls}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESSERA=${TESSERA:-$ROOT/target/release/tessera}

source "$ROOT/bench/lib.sh"
need h2o h2o
need h2load nghttp2-client
need openssl openssl
need taskset util-linux
need python3 python3

if [ "$(nproc --all)" -lt 2 ]; then echo "needs at least 2 cores (server and generator pinned apart)" >&2; exit 1; fi
SERVER_CORE=0
GEN_CORE=1

if [ ! -x "$TESSERA" ] || [ -z "${NO_BUILD:-}" ]; then
  (cd "$ROOT" && cargo build --release -p tessera >&2)
fi

WORK=$(mktemp -d /tmp/tessera-loadgen-h2.XXXXXX)
H2O_PID=""
cleanup() {
  if [ -n "$H2O_PID" ]; then kill "$H2O_PID" 2>/dev/null || true; wait "$H2O_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

TLS_PORT=$(free_port)
H2C_PORT=$(free_port)

mkdir -p "$WORK/html"
printf 'hello from h2o, a small static page for load generator comparisons\n' > "$WORK/html/index.html"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 2>/dev/null
cat > "$WORK/h2o.conf" <<CONF
user: root
num-threads: 1
http2-max-concurrent-requests-per-connection: 256
listen:
  host: 127.0.0.1
  port: $TLS_PORT
  ssl:
    certificate-file: $WORK/cert.pem
    key-file: $WORK/key.pem
    ocsp-update-interval: 0
listen:
  host: 127.0.0.1
  port: $H2C_PORT
hosts:
  default:
    paths:
      /:
        file.dir: $WORK/html
error-log: $WORK/h2o-error.log
CONF
taskset -c $SERVER_CORE h2o -c "$WORK/h2o.conf" > "$WORK/h2o.out" 2>&1 &
H2O_PID=$!
for _ in $(seq 50); do
  if (exec 3<>/dev/tcp/127.0.0.1/$TLS_PORT) 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/$H2C_PORT) 2>/dev/null; then break; fi
  sleep 0.1
done


url() { # mode
  case $1 in
    h2c) echo "http://127.0.0.1:$H2C_PORT/index.html" ;;
    *) echo "https://127.0.0.1:$TLS_PORT/index.html" ;;
  esac
}

h2load_run() { # mode
  local extra=()
  case $1 in
    h2|h2c) extra=(-m "$STREAMS") ;;
    h1tls) extra=(--h1) ;;
  esac
  local cpu
  cpu=$(run_pinned $GEN_CORE "$WORK/out" h2load -t1 -c"$CONNS" -D"$DURATION" "${extra[@]}" "$(url "$1")")
  python3 - "$WORK/out" "$cpu" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", t)
secs = re.search(r"finished in ([\d.]+)s", t)
if not done or not secs:
    sys.exit("h2load: no summary in its output:\n" + t)
ok, failed, errored = int(done.group(2)), int(done.group(3)), int(done.group(4))
print(ok, secs.group(1), sys.argv[2], f"[failed {failed} errored {errored}]" if failed or errored else "")
PY
}

tessera_run() { # mode
  local extra=()
  case $1 in
    h2|h2c) extra=(--http2 --streams "$STREAMS") ;;
    h1tls) ;;
  esac
  local tls=()
  # h2load does not verify the certificate either.
  [ "$1" = h2c ] || tls=(--insecure)
  local cpu
  cpu=$(run_pinned $GEN_CORE "$WORK/out" "$TESSERA" bench -q --json -t1 -c"$CONNS" -d"${DURATION}s" "${extra[@]}" "${tls[@]}" "$(url "$1")")
  bench_summary "$WORK/out" "$cpu"
}

echo "# bench/loadgen-h2.sh  $(date -u +%Y-%m-%dT%H:%MZ)  rounds=$ROUNDS duration=${DURATION}s connections=$CONNS streams=$STREAMS"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc --all) cores, $(uname -r)"
echo "# h2o $(h2o --version 2>&1 | head -1 | awk '{print $3}') (1 thread) on core $SERVER_CORE, generator on core $GEN_CORE; $(h2load --version 2>&1 | head -1); tessera $("$TESSERA" --version | cut -d' ' -f2)"
echo "# raw: mode round tool requests seconds cpu_seconds req/s cpu_us_per_request"
RAW="$WORK/raw"
: > "$RAW"
for mode in $MODES; do
  for round in $(seq "$ROUNDS"); do
    for tool in h2load tessera; do
      read -r reqs secs cpu rest < <(${tool}_run "$mode")
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
print(f"{'mode':<7} {'h2load req/s':>13} {'tessera req/s':>14} {'ratio':>7}   {'h2load µs/req':>14} {'tessera µs/req':>15} {'ratio':>7}")
for mode in sys.argv[2:]:
    a = [r for r in rows if r[0] == mode and r[2] == "h2load"]
    b = [r for r in rows if r[0] == mode and r[2] == "tessera"]
    med = lambda rs, col: statistics.median(float(r[col]) for r in rs)
    ar, br, ac, bc = med(a, 6), med(b, 6), med(a, 7), med(b, 7)
    rr = [float(y[6]) / float(x[6]) for x, y in zip(a, b)]
    cr = [float(y[7]) / float(x[7]) for x, y in zip(a, b)]
    print(f"{mode:<7} {ar:>13.0f} {br:>14.0f} {br/ar:>7.2f}   {ac:>14.2f} {bc:>15.2f} {bc/ac:>7.2f}"
          f"   (per-round ratios req/s {min(rr):.2f}..{max(rr):.2f}, µs/req {min(cr):.2f}..{max(cr):.2f},"
          f" µs/req median of ratios {statistics.median(cr):.2f})")
PY
