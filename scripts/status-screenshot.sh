#!/bin/sh
# Renders the admin listener's /status page after some traffic into docs/img/status.png:
# starts target/release/tessera (or $TESSERA) on loopback with a file, a 404, a cached
# proxy route and one to an upstream where nothing listens, drives it with `tessera bench` at stepped rates for $SECONDS_OF_LOAD
# seconds, and has headless Chromium (apt `chromium`) screenshot the page it kept open
# through that time, driven over the DevTools protocol by node (scripts/cdp-screenshot.mjs).
set -eu
cd "$(dirname "$0")/.."
TESSERA=${TESSERA:-target/release/tessera}
OUT=${OUT:-docs/img/status.png}
SECONDS_OF_LOAD=${SECONDS_OF_LOAD:-100}
PORT=${PORT:-18722}
ADMIN=${ADMIN:-18723}
DEBUG_PORT=${DEBUG_PORT:-18724}
work=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

mkdir -p "$work/site" "$(dirname "$OUT")"
echo hello > "$work/site/hello.txt"
cat > "$work/origin.lua" <<'LUA'
return { content = function(r) r:set_header('Cache-Control', 'max-age=2') tessera.sleep(0.002) return 'page' end }
LUA
cat > "$work/tessera.toml" <<TOML
listen = ["127.0.0.1:$PORT"]
root = "$work/site"
admin_listen = "127.0.0.1:$ADMIN"

[[upstream]]
name = "origin"
addresses = ["self"]
path_prefix = "/origin"

[[upstream]]
name = "down"
addresses = ["127.0.0.1:1"]
max_fails = 3

[[route]]
prefix = "/p"
upstream = "origin"

[[route]]
prefix = "/down"
upstream = "down"

[[script]]
prefix = "/origin"
path = "$work/origin.lua"
TOML
# Mostly a file, some 404s, two proxied pages cached for 2 s (hits, and a miss now and
# then), and a few requests to the upstream that refuses connections (502s: connect errors
# until its breaker opens, then breaker_open).
cat > "$work/mix.txt" <<MIX
6 http://127.0.0.1:$PORT/hello.txt
1 http://127.0.0.1:$PORT/missing
3 http://127.0.0.1:$PORT/p/a
2 http://127.0.0.1:$PORT/p/b
1 http://127.0.0.1:$PORT/down/x
MIX

"$TESSERA" serve --config "$work/tessera.toml" 2> "$work/serve.log" &
pids="$pids $!"
chromium --headless --no-sandbox --disable-gpu --window-size=1200,1140 \
    --remote-debugging-port="$DEBUG_PORT" about:blank 2> "$work/chromium.log" &
pids="$pids $!"
sleep 2

step=$((SECONDS_OF_LOAD / 5))
(
    for rate in 200 500 300 800 400; do
        "$TESSERA" bench -q --loopback-only --rate "$rate" -d "${step}s" -c 8 -t 1 \
            --request-file "$work/mix.txt" > /dev/null
    done
) &
pids="$pids $!"
node --experimental-websocket scripts/cdp-screenshot.mjs "$DEBUG_PORT" \
    "http://127.0.0.1:$ADMIN/status" "$((SECONDS_OF_LOAD - 2))" "$OUT"
echo "wrote $OUT"
