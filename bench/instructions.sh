#!/usr/bin/env bash
# User-space instructions per request of two builds of tessera (the working tree's and a
# git revision's), counted by valgrind's callgrind: a figure that does not move with the
# machine's noise, for changes too small for CPU time to show on a shared machine (a few
# percent). It counts the server's own instructions only: not the kernel's (two thirds of
# a proxied request's CPU time), not cache misses. Read it beside bench/before-after.sh.
#
# Workloads, each on a server run under callgrind with one worker:
#   proxy  a 1 KB file proxied, not stored, from a tessera origin (bench/before-after.sh's
#          case), h2load --h1 -c50: HTTP/1.1 keep-alive;
#   h2     the same proxied over HTTP/2 and TLS 1.3, h2load -c100 -m10 (valgrind 3.19 lacks
#          openat2, which the file handler needs, so HTTP/2 is measured proxying; the
#          100 TLS handshakes are in the count, shared by REQUESTS requests);
#   esi    the cached page of FRAGMENTS cached fragments from bench/esi-origin.py
#          (bench/before-after.sh's case), h2load --h1 -c50: not in the default set.
# Each server first answers 2,000 requests, then its counters are zeroed and REQUESTS
# (10,000) more are counted. Prints instructions per request for each build and
# new/base.
#
# usage: bench/instructions.sh [REV]   (env: REQUESTS=10000 BASE_BIN=path to skip building
#                                       REV, WORKLOADS="proxy h2", FRAGMENTS=10)
# Needs: valgrind, h2load, curl, openssl, git (apt-get installs the first three).
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-HEAD~1}
REQUESTS=${REQUESTS:-10000}
WORKLOADS=${WORKLOADS:-proxy h2}
FRAGMENTS=${FRAGMENTS:-10}

source bench/lib.sh
need valgrind valgrind
need h2load nghttp2-client
need curl curl

cargo build --release --locked -q -p tessera
NEW=$PWD/target/release/tessera
make_work instructions
build_base "$REV"

site=$work/site
mkdir -p "$site"
head -c 1024 /dev/zero | tr '\0' 'a' > "$site/1k.txt"
make_cert
origin_port=$(free_port)
"$NEW" serve --root "$site" --listen "127.0.0.1:$origin_port" --workers 1 2>"$work/origin.log" &
pids+=($!)
wait_up "$origin_port" 1k.txt
case " $WORKLOADS " in *" esi "*)
    esi_origin_port=$(free_port)
    python3 bench/esi-origin.py "$esi_origin_port" "$FRAGMENTS" 0 &
    pids+=($!)
    wait_up "$esi_origin_port" cached/frag/1 ;;
esac

# count BIN WORKLOAD: instructions per request.
count() {
    local bin=$1 workload=$2 port tls_port out pid url load total result upstream=$origin_port
    port=$(free_port); tls_port=$(free_port)
    out=$work/callgrind.$workload.$RANDOM
    [ "$workload" = esi ] && upstream=$esi_origin_port
    # Started in $work: in the repository, the defaults would serve its files too, which
    # valgrind 3.19 cannot (openat2).
    (cd "$work" && exec valgrind --tool=callgrind --callgrind-out-file="$out" "$bin" serve \
        --proxy "http://127.0.0.1:$upstream" --listen "127.0.0.1:$port" \
        --tls-listen "127.0.0.1:$tls_port" --cert "$work/cert.pem" --key "$work/key.pem" \
        --workers 1 2>"$work/valgrind.log") &
    pid=$!
    pids+=($pid)
    if [ "$workload" = h2 ]; then
        url="https://127.0.0.1:$tls_port/1k.txt"; load=(h2load -c100 -m10 -t1)
    elif [ "$workload" = esi ]; then
        url="http://127.0.0.1:$port/cached/page"; load=(h2load --h1 -c50 -m1 -t1)
    else
        url="http://127.0.0.1:$port/1k.txt"; load=(h2load --h1 -c50 -m1 -t1)
    fi
    for _ in $(seq 120); do curl -fsk -o /dev/null "$url" 2>/dev/null && break; sleep 0.5; done
    "${load[@]}" -n 2000 "$url" >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
    result=$("${load[@]}" -n "$REQUESTS" "$url" | grep '^requests:')
    if ! echo "$result" | grep -q " $REQUESTS succeeded, 0 failed"; then
        echo "$workload: not every request succeeded: $result" >&2
        exit 1
    fi
    callgrind_control -d "$pid" >/dev/null 2>&1
    sleep 1
    # The dump just asked for (the newest file until the exit writes its own).
    total=$(grep -h '^summary:\|^totals:' "$(ls -t "$out"* | head -1)" | head -1 | awk '{print $2}')
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -f "$out"*
    echo $((total / REQUESTS))
}

echo "# $(date -u '+%F %H:%M') UTC; base $(git rev-parse --short "$REV") vs new $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo '+changes'); $(valgrind --version); $REQUESTS requests counted"
printf '%-10s %14s %14s %10s\n' workload "base Ir/req" "new Ir/req" "new/base"
for w in $WORKLOADS; do
    base=$(count "$BASE" "$w")
    new=$(count "$NEW" "$w")
    printf '%-10s %14d %14d %10s\n' "$w" "$base" "$new" "$(awk -v n="$new" -v b="$base" 'BEGIN { printf "x%.3f", n / b }')"
done
