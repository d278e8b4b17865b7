#!/usr/bin/env bash
# HTTP/3 (issue 47): tessera against Caddy, and against its own HTTP/2 over TLS, side by
# side in one run, with `tessera bench` as the load (docs/benchmarks.md, docs/http3.md).
#
# Every server gets the same ECDSA P-256 certificate and one worker (Caddy: GOMAXPROCS=1)
# pinned to core 0; `tessera bench -t1` drives it from core 1 with CONNECTIONS connections x
# STREAMS concurrent streams for SECONDS (connection set-up included). Printed: server CPU
# per request (utime+stime of its process from /proc, divided by the requests the load
# completed), requests/s, and the ratios, median of ROUNDS rounds (servers in turn within
# each round). Cases (env CASES, default all four):
#
#   12b     the 12-byte file over HTTP/3: tessera against Caddy 2.6 (HTTP/3 on by default;
#           target: tessera at least 2x cheaper), and tessera's HTTP/3 against its own
#           HTTP/2 over TLS under the same load (`tessera bench --http2`; target: at most
#           1.5x, the cost of QUIC over TCP+TLS);
#   page    the same for a 57 KB HTML page;
#   esi     a cached ESI page (a page and its 10 fragments fresh in the cache, from
#           bench/esi-origin.py) over HTTP/3, against Varnish's cached ESI page over
#           HTTP/1.1 (wrk -c CONNECTIONS; Varnish has no HTTP/3): target 10x cheaper;
#   memory  IDLE (default 10,000) HTTP/3 connections opened by `tessera bench --http3 --rate
#           1` and held idle, on a new tessera and a new Caddy that have served nothing
#           else: each one's resident memory grown, in bytes per connection opened (the
#           highest RSS seen while they are open, less the RSS after one request).
#
# The generator's own comparison with h2load is bench/loadgen-h2.sh.
#
# usage: bench/http3.sh [ROUNDS] [SECONDS] [CONNECTIONS] [STREAMS]
#        (defaults: 3 rounds of 5 s, 100 connections x 10 streams; env CASES="12b page esi
#        memory", IDLE=10000, NO_BUILD=1 skips cargo, TESSERA=path of the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
SECONDS_PER_RUN=${2:-5}
CONNECTIONS=${3:-100}
STREAMS=${4:-10}
CASES=${CASES:-12b page esi memory}
IDLE=${IDLE:-10000}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need caddy caddy
need varnishd varnish
need wrk wrk
need openssl openssl
need taskset util-linux
[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
TESSERA=${TESSERA:-$PWD/target/release/tessera}

ulimit -n "$(ulimit -Hn)"
make_work http3
site=$work/site
mkdir -p "$site"
printf 'hello world\n' > "$site/12b.txt"
make_page "$site/page.html"
# The URLs name 127.0.0.1, which a client sends no SNI for: the certificate names the
# address too, so that Caddy finds it without one.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -keyout "$work/key.pem" -out "$work/cert.pem" -subj /CN=localhost \
    -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null

# --- the ESI origin (on the load's core; it is asked only while the cache fills).
origin_port=$(free_port)
taskset -c $LOAD_CPU python3 bench/esi-origin.py "$origin_port" 10 0 &
pids+=($!)
wait_up "$origin_port" cached/frag/1

# --- tessera: one worker; HTTP/2 and HTTP/3 on the same port (TCP and UDP); static files,
# and /cached/ proxied to the origin.
cat > "$work/tessera.toml" <<CONF
root = "$site"
[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port"]
[[route]]
prefix = "/cached"
upstream = "origin"
CONF
# start_tessera NAME: a tessera (one worker, core 0) on a new port; sets port and pid.
start_tessera() {
    port=$(free_port)
    taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/tessera.toml" \
        --listen "127.0.0.1:$(free_port)" --tls-listen "127.0.0.1:$port" \
        --quic-listen "127.0.0.1:$port" \
        --cert "$work/cert.pem" --key "$work/key.pem" --workers 1 --backlog 16384 \
        2>"$work/$1.log" &
    pid=$!
    pids+=("$pid")
}
start_tessera tessera
tessera_port=$port tessera_pid=$pid

# --- Caddy 2.6: one Go thread, the same files; HTTP/3 on its TLS port.
# start_caddy NAME: a Caddy (GOMAXPROCS=1, core 0) on a new port; sets port and pid.
start_caddy() {
    port=$(free_port)
    mkdir -p "$work/$1"
    cat > "$work/$1/Caddyfile" <<CADDY
{
	admin off
	auto_https disable_redirects
	storage file_system $work/$1/state
	servers {
		protocols h1 h2 h3
	}
}
https://127.0.0.1:$port {
	bind 127.0.0.1
	tls $work/cert.pem $work/key.pem
	root * $site
	file_server
}
CADDY
    HOME="$work/$1" XDG_DATA_HOME="$work/$1/data" XDG_CONFIG_HOME="$work/$1/config" \
        GOMAXPROCS=1 taskset -c $SERVER_CPU caddy run --config "$work/$1/Caddyfile" \
        --adapter caddyfile >"$work/$1/log" 2>&1 &
    pid=$!
    pids+=("$pid")
}
start_caddy caddy
caddy_port=$port caddy_pid=$pid

# --- Varnish: the cached ESI page over HTTP/1.1.
start_varnish_esi $SERVER_CPU "$origin_port" "set beresp.ttl = 1h;"
wait_up "$varnish_port" cached/page

# h3_get PORT PATH OUT: one HTTP/3 request with `tessera bench` (-n 1); the body is not
# kept, so OUT gets the JSON report. Succeeds when it got a 2xx.
h3_get() {
    "$TESSERA" bench -q --json --insecure --http3 -t1 -c1 -n1 "https://127.0.0.1:$1$2" >"$3" 2>&1 &&
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d['requests'] == 1 and d['errors']['total'] == 0 else 1)" "$3"
}
# wait_h3 NAME PORT: waits (at most 10 s) until the server answers over HTTP/3.
wait_h3() {
    for i in $(seq 100); do
        h3_get "$2" /12b.txt "$work/up.json" && return 0
        sleep 0.1
    done
    echo "$1 did not answer over HTTP/3:" >&2
    cat "$work/up.json" >&2
    exit 1
}
wait_h3 tessera "$tessera_port"
wait_h3 caddy "$caddy_port"
alt_svc=$(curl -sk -D - -o /dev/null "https://127.0.0.1:$tessera_port/12b.txt" | tr -d '\r' | awk -F': ' 'tolower($1) == "alt-svc" {print $2}')
[ -n "$alt_svc" ] || { echo "check failed: no Alt-Svc on tessera's TLS listener" >&2; exit 1; }
for _ in 1 2; do
    curl -fsk -o /dev/null "https://127.0.0.1:$tessera_port/cached/page"
    curl -fs -o /dev/null "http://127.0.0.1:$varnish_port/cached/page"
done
curl -fsk -o "$work/page-tessera.html" "https://127.0.0.1:$tessera_port/cached/page"
curl -fs -o "$work/page-varnish.html" "http://127.0.0.1:$varnish_port/cached/page"
if grep -q "<esi:" "$work/page-tessera.html" "$work/page-varnish.html"; then
    echo "check failed: a page still holds <esi: tags" >&2
    exit 1
fi
echo "# check: every server answers; tessera's Alt-Svc: $alt_svc; cached ESI page $(stat -c %s "$work/page-tessera.html") bytes (tessera), $(stat -c %s "$work/page-varnish.html") bytes (varnish)"
echo "# $(date -u +'%F %H:%M UTC') $(nproc) cores, $(uname -r); server on core $SERVER_CPU, load on core $LOAD_CPU; median of $ROUNDS rounds of ${SECONDS_PER_RUN}s; -c$CONNECTIONS x $STREAMS streams"
echo "# tessera $("$TESSERA" --version | awk '{print $NF}'); Caddy $(caddy version | awk '{print $1}'); $(varnishd -V 2>&1 | head -1)"

# bmeasure PID URL ARGS...: one `tessera bench` run (ARGS: --http3 or --http2) pinned to
# the load's core; prints "requests/s server-cpu-us-per-request" for PID.
bmeasure() {
    local pid=$1 url=$2 before after
    shift 2
    before=$(cpu_ticks "$pid")
    taskset -c $LOAD_CPU "$TESSERA" bench -q --json --insecure -t1 -c"$CONNECTIONS" \
        --streams "$STREAMS" -d"${SECONDS_PER_RUN}s" "$@" "$url" >"$work/run.json"
    after=$(cpu_ticks "$pid")
    python3 - "$work/run.json" $((after - before)) "$(getconf CLK_TCK)" "$url" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n, e = d["requests"], d["errors"]["total"]
if e:
    print(f"tessera bench reported {e} errors for {sys.argv[4]}: {d['errors']}", file=sys.stderr)
print(f"{n / d['duration_s']:.0f} {int(sys.argv[2]) * 1e6 / int(sys.argv[3]) / max(n, 1):.2f}")
PY
}

declare -A pid_of=([tessera-h3]=$tessera_pid [caddy-h3]=$caddy_pid [tessera-h2]=$tessera_pid)
declare -A url_of=([tessera-h3]=$tessera_port [caddy-h3]=$caddy_port [tessera-h2]=$tessera_port)
declare -A mode_of=([tessera-h3]=--http3 [caddy-h3]=--http3 [tessera-h2]=--http2)

# run_case NAME PATH: ROUNDS rounds, the three in turn; prints medians and ratios.
run_case() {
    local name=$1 path=$2 s rps cpu
    local servers="tessera-h3 caddy-h3 tessera-h2"
    declare -A rps_runs=() cpu_runs=() med=()
    for _ in $(seq "$ROUNDS"); do
        for s in $servers; do
            read -r rps cpu < <(bmeasure "${pid_of[$s]}" "https://127.0.0.1:${url_of[$s]}$path" "${mode_of[$s]}")
            rps_runs[$s]+="$rps "
            cpu_runs[$s]+="$cpu "
        done
    done
    for s in $servers; do
        med[$s]=$(echo "${cpu_runs[$s]}" | tr ' ' '\n' | grep . | median)
        printf '%-10s %-11s %12.0f %12.2f   (runs: %s; cpu: %s)\n' "$name" "$s" \
            "$(echo "${rps_runs[$s]}" | tr ' ' '\n' | grep . | median)" "${med[$s]}" "${rps_runs[$s]% }" "${cpu_runs[$s]% }"
    done
    awk -v c="${med[caddy-h3]}" -v t="${med[tessera-h3]}" -v h="${med[tessera-h2]}" -v n="$name" 'BEGIN {
        printf "%-10s caddy-h3/tessera-h3: cpu per request x%.2f (target >= 2)\n", n, c / t
        printf "%-10s tessera-h3/tessera-h2: cpu per request x%.2f (target <= 1.5)\n", n, t / h }'
}

printf '%-10s %-11s %12s %12s\n' case server "requests/s" "cpu us/req"
[[ " $CASES " == *" 12b "* ]] && run_case h3-12b /12b.txt
[[ " $CASES " == *" page "* ]] && run_case h3-page57k /page.html

if [[ " $CASES " == *" esi "* ]]; then
    declare -A esi_rps=() esi_cpu=() esi_med=()
    for _ in $(seq "$ROUNDS"); do
        read -r rps cpu < <(bmeasure "$tessera_pid" "https://127.0.0.1:$tessera_port/cached/page" --http3)
        esi_rps[tessera]+="$rps "; esi_cpu[tessera]+="$cpu "
        read -r rps cpu < <(measure "$varnish_pid" "http://127.0.0.1:$varnish_port/cached/page" $LOAD_CPU "$CONNECTIONS" "$SECONDS_PER_RUN")
        esi_rps[varnish]+="$rps "; esi_cpu[varnish]+="$cpu "
    done
    for s in tessera varnish; do
        esi_med[$s]=$(echo "${esi_cpu[$s]}" | tr ' ' '\n' | grep . | median)
        printf '%-10s %-11s %12.0f %12.2f   (runs: %s; cpu: %s)\n' esi-cached "$s" \
            "$(echo "${esi_rps[$s]}" | tr ' ' '\n' | grep . | median)" "${esi_med[$s]}" "${esi_rps[$s]% }" "${esi_cpu[$s]% }"
    done
    awk -v v="${esi_med[varnish]}" -v t="${esi_med[tessera]}" \
        'BEGIN { printf "esi-cached tessera(h3)/varnish(HTTP/1.1): cpu per request x%.2f (varnish/tessera; target >= 10)\n", v / t }'
fi

# idle_bytes PID PORT: IDLE connections opened and held by `tessera bench --http3 --rate 1`
# for long enough to open them all; prints "connections bytes-per-connection
# peak-bytes-per-connection" for PID: its RSS 4 s before the load ends (every connection
# open and idle), and the highest RSS seen (the handshakes' own memory included), each
# less its RSS before, per connection opened.
idle_bytes() {
    local pid=$1 port=$2 before peak rss steady bench seconds start
    sleep 2
    before=$(rss_kib "$pid")
    peak=$before steady=$before
    seconds=$((IDLE / 250 + 15))
    taskset -c $LOAD_CPU "$TESSERA" bench -q --json --insecure --http3 -t1 -c"$IDLE" --rate 1 \
        -d"${seconds}s" "https://127.0.0.1:$port/12b.txt" >"$work/idle.json" &
    bench=$!
    start=$SECONDS
    while kill -0 "$bench" 2>/dev/null; do
        rss=$(rss_kib "$pid")
        [ "$rss" -le "$peak" ] || peak=$rss
        [ $((SECONDS - start)) -gt $((seconds - 4)) ] || steady=$rss
        sleep 0.5
    done
    wait "$bench" || true
    python3 - "$work/idle.json" "$before" "$steady" "$peak" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
# connects.count counts the attempts; those that failed to connect hold no memory.
opened = d["connects"]["count"] - d["errors"]["connect"]
if d["errors"]["total"]:
    print(f"tessera bench reported errors: {d['errors']}", file=sys.stderr)
before, steady, peak = (int(x) for x in sys.argv[2:5])
print(opened, round((steady - before) * 1024 / max(opened, 1)), round((peak - before) * 1024 / max(opened, 1)))
PY
}

if [[ " $CASES " == *" memory "* ]]; then
    start_tessera tessera-idle
    idle_tessera_port=$port idle_tessera_pid=$pid
    start_caddy caddy-idle
    idle_caddy_port=$port idle_caddy_pid=$pid
    wait_h3 tessera-idle "$idle_tessera_port"
    wait_h3 caddy-idle "$idle_caddy_port"
    read -r t_conns t_bytes t_peak < <(idle_bytes "$idle_tessera_pid" "$idle_tessera_port")
    read -r c_conns c_bytes c_peak < <(idle_bytes "$idle_caddy_pid" "$idle_caddy_port")
    echo "idle-h3    tessera: $t_bytes bytes per idle connection (peak $t_peak; $t_conns connections); caddy: $c_bytes (peak $c_peak; $c_conns connections); caddy/tessera x$(awk -v c="$c_bytes" -v t="$t_bytes" 'BEGIN {printf "%.2f", c / t}')"
fi
