#!/usr/bin/env bash
# Reloads and binary upgrades under load (issue 18), tessera beside nginx in the same run.
#
# Each server (one worker, pinned to core 0) serves a 1 KB file to two open-model load
# generators (`tessera bench --rate`, pinned to core 1) for DURATION seconds: one at
# RATE_KA requests/s over 20 keep-alive connections, one at RATE_NEW requests/s with a
# new connection per request. First a run without reloads (the baseline p99), then the
# same run during which the script sends 50 reloads, one every 0.2 s, each to a file that
# differs from the last (a host added or removed), and then, for tessera, 3 binary
# upgrades in a row (SIGUSR2, each waiting for the pid file to name the new process).
# nginx gets the same 50 `nginx -s reload`. Prints requests sent, answered and failed,
# and the p99 latency (corrected for the open model) with and without reloads.
#
#   bench/reload.sh                    # DURATION=20 RATE_KA=2000 RATE_NEW=500
#
# Targets: 0 failed; tessera's p99 during reloads within 2x of its p99 without.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

SECONDS_RUN=${DURATION:-20}
RATE_KA=${RATE_KA:-2000}
RATE_NEW=${RATE_NEW:-500}

need nginx nginx
need taskset util-linux
cargo build --release -q -p tessera
tessera=$PWD/target/release/tessera

make_work reload
mkdir "$work/site" "$work/other"
head -c 1024 /dev/zero | tr '\0' 'x' > "$work/site/file.txt"
cp "$work/site/file.txt" "$work/other/file.txt"

# load PORT NAME: both generators for SECONDS_RUN seconds; results in $work/NAME-*.json.
load() {
    local url="http://127.0.0.1:$1/file.txt"
    taskset -c 1 "$tessera" bench -q --json -t 1 -c 20 --rate "$RATE_KA" -d "${SECONDS_RUN}s" "$url" > "$work/$2-ka.json" &
    local ka=$!
    taskset -c 1 "$tessera" bench -q --json -t 1 -c 20 --no-keepalive --rate "$RATE_NEW" -d "${SECONDS_RUN}s" "$url" > "$work/$2-new.json" &
    local new=$!
    wait "$ka" "$new"
}

# summary NAME: "sent answered failed p99-keepalive-ms p99-new-connection-ms"
summary() {
    python3 - "$work/$1-ka.json" "$work/$1-new.json" <<'EOF'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:]]
answered = sum(r["requests"] for r in runs)
failed = sum(r["errors"]["total"] for r in runs)
p99 = [r["corrected_latency_ms"]["p99"] for r in runs]
print(answered + failed, answered, failed, "%.2f" % p99[0], "%.2f" % p99[1])
EOF
}

# --- tessera
tport=$(free_port)
config() {
    cat <<EOF
listen = ["127.0.0.1:$tport"]
workers = 1
root = "$work/site"
pid_file = "$work/tessera.pid"
$1
EOF
}
config "" > "$work/a.toml"
config "[[host]]
names = [\"other.test\"]
root = \"$work/other\"" > "$work/b.toml"
cp "$work/a.toml" "$work/tessera.toml"
taskset -c 0 "$tessera" serve --config "$work/tessera.toml" 2> "$work/tessera.log" &
pids+=($!)
wait_up "$tport" file.txt
load "$tport" tessera-base
load "$tport" tessera-reload &
loader=$!
sleep 1
for i in $(seq 50); do
    if [ $((i % 2)) = 1 ]; then cp "$work/b.toml" "$work/tessera.toml"; else cp "$work/a.toml" "$work/tessera.toml"; fi
    kill -HUP "$(cat "$work/tessera.pid")"
    sleep 0.2
done
upgrades=0
for _ in 1 2 3; do
    old=$(cat "$work/tessera.pid")
    kill -USR2 "$old"
    for _ in $(seq 200); do
        new=$(cat "$work/tessera.pid" 2>/dev/null || echo "$old")
        [ "$new" != "$old" ] && break
        sleep 0.05
    done
    [ "$new" != "$old" ] && upgrades=$((upgrades + 1)) && pids+=("$new")
    sleep 1
done
wait "$loader"
reloads=$(grep -c "configuration reloaded" "$work/tessera.log" || true)
kill "$(cat "$work/tessera.pid")"

# --- nginx
nport=$(free_port)
cat > "$work/nginx.conf" <<EOF
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
    access_log off;
    server { listen 127.0.0.1:$nport; root $work/site; }
}
EOF
taskset -c 0 nginx -c "$work/nginx.conf"
sleep 0.5
pids+=("$(cat "$work/nginx.pid")")
wait_up "$nport" file.txt
load "$nport" nginx-base
load "$nport" nginx-reload &
loader=$!
sleep 1
for _ in $(seq 50); do
    nginx -c "$work/nginx.conf" -s reload
    sleep 0.2
done
wait "$loader"
nginx -c "$work/nginx.conf" -s quit

echo "reloads under load: ${SECONDS_RUN} s at $RATE_KA req/s keep-alive + $RATE_NEW req/s new connections, 1 KB file"
echo "tessera: $reloads reloads applied, $upgrades of 3 binary upgrades done"
printf '%-16s %10s %10s %8s %14s %14s\n' run sent answered failed "p99 ka ms" "p99 new ms"
for run in tessera-base tessera-reload nginx-base nginx-reload; do
    printf '%-16s %10s %10s %8s %14s %14s\n' "$run" $(summary "$run")
done
python3 - "$work" <<'EOF'
import json, sys
w = sys.argv[1]
def p99(name):
    return max(json.load(open(f"{w}/{name}-{k}.json"))["corrected_latency_ms"]["p99"] for k in ("ka", "new"))
for s in ("tessera", "nginx"):
    print(f"{s}: p99 during reloads / without: x{p99(s + '-reload') / p99(s + '-base'):.2f}")
EOF
