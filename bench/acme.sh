#!/usr/bin/env bash
# Automatic certificates (issue 46): the time from a server's start to the first verified
# HTTPS response for a name it has no certificate for, tessera against Caddy, both ordering
# from the same Pebble (Let's Encrypt's ACME test server, its validation sleeps off:
# PEBBLE_VA_NOSLEEP=1), with pebble-challtestsrv answering 127.0.0.1 for every name.
#
# Each round starts tessera, then Caddy (the order alternating from round to round), each
# with an empty state directory and a name never ordered before (tN.test, cN.test), on the
# same two ports (Pebble's httpPort and tlsPort: HTTP-01 and TLS-ALPN-01 go there), and asks
# `curl --cacert <Pebble's issuing root>` for https://NAME/ every 20 ms until it succeeds.
# The figure is the wall time from the server's exec to that response. Prints the medians
# and their ratio. Target: tessera no slower than Caddy.
#
# Not measured here: the issue's second figure (handshakes per second for 100 on-demand
# names against configured certificates). Tessera orders at most 10 on-demand
# certificates a minute, so 100 names take ten minutes to issue first.
#
# usage: bench/acme.sh   (env: ROUNDS=7; TESSERA_BIN=path uses that binary instead of
#        building a release one; PEBBLE_DIR=folder with pebble and pebble-challtestsrv,
#        default the one scripts/test.sh fills)
# Needs: curl, openssl, python3, caddy (apt-get installs caddy and curl when missing), and
# Go to build Pebble when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
source bench/lib.sh
need curl curl
need caddy caddy
need openssl openssl
PEBBLE_DIR=${PEBBLE_DIR:-${TESSERA_PEBBLE_BIN:-$HOME/.cache/tessera-test/go}}
if [ ! -x "$PEBBLE_DIR/pebble" ] || [ ! -x "$PEBBLE_DIR/pebble-challtestsrv" ]; then
    need go golang-go
    GOBIN="$PEBBLE_DIR" go install github.com/letsencrypt/pebble/v2/cmd/pebble@latest \
        github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv@latest
fi
if [ -n "${TESSERA_BIN:-}" ]; then
    TESSERA=$(realpath "$TESSERA_BIN")
else
    cargo build --release --locked -q -p tessera
    TESSERA=$PWD/target/release/tessera
fi
make_work acme
cd "$work"

# Pebble's own HTTPS certificate, from a CA made here (both servers trust it for the
# directory: tessera's `ca_root`, Caddy's `acme_ca_root`).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=bench CA for Pebble" -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout pebble.key -out pebble.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > san.ext
openssl x509 -req -in pebble.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile san.ext -out pebble.pem 2>/dev/null

http_port=$(free_port)
tls_port=$(free_port)
listen=$(free_port)
management=$(free_port)
dns=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
challenge_management=$(free_port)
"$PEBBLE_DIR/pebble-challtestsrv" -dnsserver "127.0.0.1:$dns" -defaultIPv4 127.0.0.1 \
    -defaultIPv6 "" -http01 "" -https01 "" -doh "" -tlsalpn01 "" \
    -management "127.0.0.1:$challenge_management" > challtestsrv.log 2>&1 &
pids+=($!)
cat > pebble.json <<JSON
{"pebble": {
  "listenAddress": "127.0.0.1:$listen",
  "managementListenAddress": "127.0.0.1:$management",
  "certificate": "$work/pebble.pem",
  "privateKey": "$work/pebble.key",
  "httpPort": $http_port,
  "tlsPort": $tls_port,
  "ocspResponderURL": "",
  "externalAccountBindingRequired": false
}}
JSON
PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=0 "$PEBBLE_DIR/pebble" -config pebble.json \
    -dnsserver "127.0.0.1:$dns" > pebble.log 2>&1 &
pids+=($!)
for _ in $(seq 200); do grep -q "ACME directory available" pebble.log && break; sleep 0.05; done
grep -q "ACME directory available" pebble.log || { echo "Pebble did not start" >&2; cat pebble.log >&2; exit 1; }
curl -sS --fail --cacert ca.pem "https://127.0.0.1:$management/roots/0" > issuing-root.pem
mkdir -p site
echo "hello" > site/index.html

# first_response NAME PID_FILE: waits (20 ms steps, 60 s at most) for a verified response
# for NAME; prints the seconds since $start.
first_response() {
    local name=$1
    for _ in $(seq 3000); do
        if curl -sf -o /dev/null --max-time 2 --cacert issuing-root.pem \
            --resolve "$name:$tls_port:127.0.0.1" "https://$name:$tls_port/"; then
            python3 -c "import time; print(f'{time.time() - $start:.3f}')"
            return 0
        fi
        sleep 0.02
    done
    echo "no verified response for $name within 60 s" >&2
    return 1
}

run_tessera() {
    local round=$1 name="t$1.test"
    mkdir -p "tessera-$round"
    cat > "tessera-$round/tessera.toml" <<TOML
listen = ["127.0.0.1:$http_port"]
tls_listen = ["127.0.0.1:$tls_port"]
workers = 1

[acme]
directory = "https://127.0.0.1:$listen/dir"
ca_root = "$work/ca.pem"
email = "bench@example.com"
state_dir = "$work/tessera-$round/state"

[[host]]
names = ["$name"]
root = "$work/site"
TOML
    start=$(python3 -c 'import time; print(time.time())')
    "$TESSERA" serve --config "tessera-$round/tessera.toml" > "tessera-$round/log" 2>&1 &
    local pid=$!
    local seconds
    seconds=$(first_response "$name") || { kill "$pid"; cat "tessera-$round/log" >&2; exit 1; }
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$seconds"
}

run_caddy() {
    local round=$1 name="c$1.test"
    mkdir -p "caddy-$round"
    cat > "caddy-$round/Caddyfile" <<CADDY
{
    admin off
    http_port $http_port
    https_port $tls_port
    acme_ca https://127.0.0.1:$listen/dir
    acme_ca_root $work/ca.pem
    email bench@example.com
    storage file_system $work/caddy-$round/state
    ocsp_stapling off
}
$name:$tls_port {
    root * $work/site
    file_server
}
CADDY
    start=$(python3 -c 'import time; print(time.time())')
    HOME="$work/caddy-$round" XDG_DATA_HOME="$work/caddy-$round/data" \
        XDG_CONFIG_HOME="$work/caddy-$round/config" \
        caddy run --config "caddy-$round/Caddyfile" --adapter caddyfile > "caddy-$round/log" 2>&1 &
    local pid=$!
    local seconds
    seconds=$(first_response "$name") || { kill "$pid"; cat "caddy-$round/log" >&2; exit 1; }
    kill "$pid"; wait "$pid" 2>/dev/null || true
    echo "$seconds"
}

echo "# $(date -u '+%F %H:%M') UTC, tessera $("$TESSERA" --version | awk '{print $NF}'), $(caddy version | awk '{print "Caddy", $1}'), Pebble (PEBBLE_VA_NOSLEEP=1), $(nproc) cores; $ROUNDS rounds"
tessera_runs="" caddy_runs=""
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then
        t=$(run_tessera "$round"); c=$(run_caddy "$round")
    else
        c=$(run_caddy "$round"); t=$(run_tessera "$round")
    fi
    tessera_runs+="$t "; caddy_runs+="$c "
    echo "round $round: tessera $t s, caddy $c s"
done
t=$(echo "$tessera_runs" | tr ' ' '\n' | grep . | median)
c=$(echo "$caddy_runs" | tr ' ' '\n' | grep . | median)
echo "start to first verified HTTPS response for a new name (median of $ROUNDS): tessera $t s, caddy $c s"
echo "tessera / caddy: $(awk -v a="$t" -v b="$c" 'BEGIN {printf "%.3f", a / b}') (target <= 1.00)"
echo "orders Pebble took: $(grep -c 'Added order' pebble.log)"
