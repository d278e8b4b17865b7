#!/usr/bin/env bash
# Client identity and access policy (issue 43): what the policy costs a 12-byte static
# file, side by side in one run.
#
# So far one case pair (the request limits, allow lists and nginx's limit_req come with
# the rest of the issue):
#   close-plain   tessera, a new connection per request (`Connection: close`,
#                 CONNECTIONS connections at a time), on a plain listener;
#   close-proxy   the same process and file on a `proxy_protocol` listener, every
#                 connection beginning with a PROXY v2 header (TCP4, no TLV) from a
#                 trusted proxy, so the header's source becomes the client.
# The load is bench/proxy-load.c (wrk refuses to send anything before the request line):
# one epoll loop that sends the header (for close-proxy) and the request in one write and
# reads to the close, the same program for both cases. Target: close-proxy at most 1.05x
# close-plain's CPU per request.
#
# Each round measures every case once, the order alternating from round to round; a
# case's figure is the server's CPU time per request (utime+stime from /proc around a run
# of SECONDS_PER_RUN, bench/lib.sh `measure`). Prints the medians and the median of the
# per-round ratios.
#
# usage: bench/limits.sh   (env: ROUNDS=7 SECONDS_PER_RUN=5 CONNECTIONS=50)
# Needs: cc, curl, taskset, python3 (apt-get installs curl and taskset when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-50}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need curl curl
need taskset util-linux

cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera

make_work limits

site=$work/site
mkdir -p "$site"
printf 'hello world\n' > "$site/12b.txt"
FILE=12b.txt

plain_port=$(free_port)
proxy_port=$(free_port)
cat > "$work/tessera.toml" <<CONF
root = "$site"
listen = ["127.0.0.1:$plain_port", "127.0.0.1:$proxy_port"]
proxy_protocol = ["127.0.0.1:$proxy_port"]
trusted_proxies = ["127.0.0.1"]
CONF
"$TESSERA" check-config --config "$work/tessera.toml" >/dev/null
taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/tessera.toml" --workers 1 \
    2>"$work/tessera.log" &
tessera_pid=$!
pids+=("$tessera_pid")
wait_up "$plain_port" "$FILE"

cc -O2 -o "$work/proxy-load" bench/proxy-load.c

# Check before measuring: the header is read and the file served whole on the proxy
# listener, and a connection without one is refused there.
python3 - "$proxy_port" "$site/$FILE" <<'PY'
import socket, sys
port, path = int(sys.argv[1]), sys.argv[2]
header = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c\xc0\x00\x02\x01\x7f\x00\x00\x01\x9c\x40\x00\x50"
def ask(prefix):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(prefix + b"GET /12b.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:  # closed with the request unread
        pass
    return out
good, bad = ask(header), ask(b"")
assert good.startswith(b"HTTP/1.1 200 ") and good.endswith(open(path, "rb").read()), good
assert bad == b"", bad
PY

declare -A port_of=([close-plain]=$plain_port [close-proxy]=$proxy_port)
declare -A header_of=([close-plain]=0 [close-proxy]=1)
# run CASE SECONDS: one run of the load; prints "requests/s server-cpu-us-per-request".
run() {
    local c=$1 seconds=$2 before after out requests errors
    before=$(cpu_ticks "$tessera_pid")
    out=$(taskset -c $LOAD_CPU "$work/proxy-load" "${port_of[$c]}" "$CONNECTIONS" "$seconds" "${header_of[$c]}" "/$FILE")
    after=$(cpu_ticks "$tessera_pid")
    read -r _ requests _ errors <<< "$out"
    [ "$errors" = 0 ] || echo "$c: $errors errors" >&2
    awk -v n="$requests" -v s="$seconds" -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.0f %.2f\n", n / s, t * 1e6 / hz / n }'
}
cases="close-plain close-proxy"

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.lock || echo '+changes')
echo "# $(date -u '+%F %H:%M') UTC, tessera $commit, $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $(uname -r)"
echo "# /$FILE (12 bytes), a new connection per request; tessera (1 worker) on core $SERVER_CPU, bench/proxy-load.c with $CONNECTIONS connections for ${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
echo "# checked: the PROXY listener serves the file after a v2 header and closes a connection without one"

for c in $cases; do run "$c" 1 >/dev/null; done
read -ra order <<< "$cases"
declare -A rps_runs=() cpu_runs=()
ratio_runs=""
for round in $(seq "$ROUNDS"); do
    declare -A cpu_now=()
    n=${#order[@]}
    for i in $(seq 0 $((n - 1))); do
        c=${order[$(((i + round) % n))]}
        read -r rps cpu < <(run "$c" "$SECONDS_PER_RUN")
        rps_runs[$c]+="$rps "; cpu_runs[$c]+="$cpu "; cpu_now[$c]=$cpu
    done
    ratio_runs+="$(awk -v a="${cpu_now[close-proxy]}" -v b="${cpu_now[close-plain]}" 'BEGIN {printf "%.3f", a / b}') "
    unset cpu_now
done

med() { echo "$1" | tr ' ' '\n' | grep . | median; }
printf '%-14s %12s %12s   %s\n' case "requests/s" "cpu us/req" "runs (cpu us/req)"
for c in $cases; do
    printf '%-14s %12s %12s   %s\n' "$c" "$(med "${rps_runs[$c]}")" "$(med "${cpu_runs[$c]}")" "${cpu_runs[$c]}"
done
plain=$(med "${cpu_runs[close-plain]}")
proxy=$(med "${cpu_runs[close-proxy]}")
echo
echo "close-proxy / close-plain: $(awk -v a="$proxy" -v b="$plain" 'BEGIN {printf "%.3f", a / b}') (median of per-round ratios $(med "$ratio_runs"); rounds: $ratio_runs) target <= 1.05"
