#!/usr/bin/env bash
# Regenerates the example outputs shown in docs/bench.md: every mode of
# `tessera bench` run against a local nginx, plus the HTML report and its
# screenshot (headless Chromium). nginx (one worker) is pinned to core 0, the
# generator to core 1.
#
# Usage: bench/examples.sh [OUT_DIR]   (default bench/results/examples; env PORT=18080)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/bench/results/examples}
PORT=${PORT:-18080}
TESSERA=$ROOT/target/release/tessera
command -v nginx >/dev/null || apt-get install -y nginx >/dev/null
(cd "$ROOT" && cargo build --release -p tessera >&2)

WORK=$(mktemp -d /tmp/tessera-examples.XXXXXX)
chmod 755 "$WORK"
NGINX_PID=""
cleanup() {
  if [ -n "$NGINX_PID" ]; then kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/html" "$OUT"
printf 'hello from nginx, a small static page for load generator examples\n' > "$WORK/html/index.html"
head -c 65536 /dev/urandom > "$WORK/html/64k.bin"
cat > "$WORK/nginx.conf" <<CONF
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  server {
    listen 127.0.0.1:$PORT backlog=4096;
    listen unix:$WORK/nginx.sock;
    root $WORK/html;
  }
}
CONF
taskset -c 0 nginx -c "$WORK/nginx.conf" -p "$WORK" &
NGINX_PID=$!
for _ in $(seq 50); do
  if (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null; then break; fi
  sleep 0.1
done
U=http://127.0.0.1:$PORT

# ex NAME ARGS...: runs `tessera bench ARGS` pinned to core 1, saves the command and its output.
ex() {
  local name=$1; shift
  { printf '$ tessera bench'; printf ' %q' "$@" | sed "s|$WORK|/srv|g"; echo; } > "$OUT/$name.txt"
  taskset -c 1 "$TESSERA" bench -q "$@" 2>&1 | sed "s|$WORK|/srv|g" >> "$OUT/$name.txt"
  cat "$OUT/$name.txt"; echo
}

ex closed -d 5s -c 50 -t 1 "$U/"
ex pipeline -d 5s -c 50 -t 1 --pipeline 16 "$U/"
ex no-keepalive -n 50000 -c 50 -t 1 --no-keepalive "$U/"
ex ramp -d 3s -c 1000 -t 1 --ramp 2000 "$U/"
printf '# weight method url\n8 GET /index.html\n1 GET /64k.bin\n1 HEAD /index.html\n1 GET /missing\n' > "$WORK/requests.txt"
ex mix -d 3s -c 50 -t 1 --request-file "$WORK/requests.txt" --unix-socket "$WORK/nginx.sock" http://localhost/
cp "$WORK/requests.txt" "$OUT/requests.txt"
ex json -n 20000 -c 10 -t 1 --json "$U/"

# Open model with a 1 s server stall: the nginx worker is paused with SIGSTOP
# 4 s into the run and resumed 1 s later.
WORKER=$(pgrep -P "$NGINX_PID" | head -1)
( sleep 4; kill -STOP "$WORKER"; sleep 1; kill -CONT "$WORKER" ) &
STALL=$!
ex open-stall --rate 2000 -d 10s -c 50 -t 1 --html "$OUT/report.html" "$U/"
wait "$STALL"
sed -i '1s|$|   # nginx paused (SIGSTOP) for 1 s at t=4 s|' "$OUT/open-stall.txt"

ex find-max --find-max --slo 'p99<20ms' --rate 4000 --step 3s --max-steps 8 -c 200 -t 1 "$U/"
ex compare --compare "$U/index.html" "$U/64k.bin" -d 2s --rounds 5 -c 50 -t 1

if command -v chromium >/dev/null; then
  mkdir -p "$ROOT/docs/img"
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$WORK/chromium" --screenshot="$ROOT/docs/img/bench-report.png" \
    --window-size=1280,2000 "file://$OUT/report.html" 2>/dev/null || true
fi
