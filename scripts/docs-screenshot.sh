#!/bin/sh
# Renders the demo's /docs/ (the index of docs/, examples/demo/docs.lua) into
# docs/img/docs.png: starts the README's demo with target/release/tessera (or $TESSERA)
# on a port of its own and has headless Chromium (apt `chromium`) screenshot the page.
set -eu
cd "$(dirname "$0")/.."
TESSERA=${TESSERA:-target/release/tessera}
OUT=${OUT:-docs/img/docs.png}
PORT=${PORT:-18725}
PAGE=${PAGE:-/docs/}
"$TESSERA" serve --config examples/demo/tessera.toml --listen "127.0.0.1:$PORT" 2>/dev/null &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 50); do
    curl -fso /dev/null "http://127.0.0.1:$PORT$PAGE" && break
    sleep 0.1
done
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1280,1000 \
    --screenshot="$OUT" "http://127.0.0.1:$PORT$PAGE" 2>/dev/null
echo "scripts/docs-screenshot.sh: wrote $OUT"
