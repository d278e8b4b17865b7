#!/usr/bin/env bash
# Client identity and access policy (issue 43): what the policy costs a 12-byte static
# file, side by side in one run.
#
# New connections (one request each):
#   close-plain   tessera, a new connection per request (`Connection: close`,
#                 CONNECTIONS connections at a time), on a plain listener;
#   close-proxy   the same process and file on a `proxy_protocol` listener, every
#                 connection beginning with a PROXY v2 header (TCP4, no TLV) from a
#                 trusted proxy, so the header's source becomes the client.
# Their load is bench/proxy-load.c (wrk refuses to send anything before the request line):
# one epoll loop that sends the header (for close-proxy) and the request in one write and
# reads to the close, the same program for both cases. Target: close-proxy at most 1.05x
# close-plain's CPU per request.
#
# Keep-alive (wrk -t1, KA_CONNECTIONS connections):
#   ka-plain      tessera serving the file from a [[host]] with nothing else;
#   ka-policy     the same host with a request limit on every request (a [[limit]] zone
#                 keyed by $remote_addr, at a rate never reached) and an allow list
#                 (allow 127.0.0.1, deny all);
#   nginx-plain   nginx serving the root;
#   nginx-policy  nginx with the same limit (limit_req_zone $binary_remote_addr, limit_req
#                 with nodelay) and allow/deny.
# Targets: ka-policy at most 1.05x ka-plain; nginx-policy at least 1.5x ka-policy.
#
# Each round measures every case once, the order alternating from round to round; a
# case's figure is the server's CPU time per request (utime+stime from /proc around a run
# of SECONDS_PER_RUN, bench/lib.sh `measure`). Prints the medians and the median of the
# per-round ratios.
#
# usage: bench/limits.sh   (env: ROUNDS=7 SECONDS_PER_RUN=5 CONNECTIONS=50 KA_CONNECTIONS=100)
# Needs: cc, curl, taskset, python3, nginx, wrk (apt-get installs curl, taskset, nginx and
# wrk when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-50}
KA_CONNECTIONS=${KA_CONNECTIONS:-100}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need curl curl
need taskset util-linux
need nginx nginx
need wrk wrk

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

# --- Keep-alive: two tessera processes (one worker each) and two nginx.
declare -A port_of=()
declare -A pid_of=([close-plain]=$tessera_pid [close-proxy]=$tessera_pid)
for c in plain policy; do
    port=$(free_port)
    {
        if [ $c = policy ]; then
            printf '[[limit]]\nname = "ka"\nkey = "$remote_addr"\nrate = "1000000r/s"\nburst = 100000\nnodelay = true\n\n'
        fi
        printf '[[host]]\nnames = ["127.0.0.1"]\nroot = "%s"\n' "$site"
        if [ $c = policy ]; then
            printf 'limit = ["ka"]\naccess = [{ allow = "127.0.0.1" }, { deny = "all" }]\n'
        fi
    } > "$work/ka-$c.toml"
    "$TESSERA" check-config --config "$work/ka-$c.toml" >/dev/null
    taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/ka-$c.toml" --listen "127.0.0.1:$port" \
        --workers 1 2>"$work/tessera-ka-$c.log" &
    pids+=($!); pid_of[ka-$c]=$!; port_of[ka-$c]=$port
done
for c in plain policy; do
    port=$(free_port)
    mkdir -p "$work/nginx-$c"
    cat > "$work/nginx-$c/nginx.conf" <<CONF
$(nginx_head "$work/nginx-$c")
http {
$(nginx_keepalive)
    types { text/plain txt; }
    default_type text/plain;
    client_body_temp_path $work/nginx-$c;
    proxy_temp_path $work/nginx-$c;
    fastcgi_temp_path $work/nginx-$c;
    uwsgi_temp_path $work/nginx-$c;
    scgi_temp_path $work/nginx-$c;
    limit_req_zone \$binary_remote_addr zone=ka:16m rate=1000000r/s;
    server {
        listen 127.0.0.1:$port reuseport;
        root $site;
$(if [ $c = policy ]; then printf '        limit_req zone=ka burst=100000 nodelay;\n        allow 127.0.0.1;\n        deny all;\n'; fi)
    }
}
CONF
    nginx -t -q -c "$work/nginx-$c/nginx.conf" -e "$work/nginx-$c/error.log"
    taskset -c $SERVER_CPU nginx -c "$work/nginx-$c/nginx.conf" -e "$work/nginx-$c/error.log" &
    pids+=($!); pid_of[nginx-$c]=$!; port_of[nginx-$c]=$port
done
for c in ka-plain ka-policy nginx-plain nginx-policy; do wait_up "${port_of[$c]}" "$FILE"; done
# The policy is in force: a client the allow list does not name (through a trusted proxy
# there would be one; here a second loopback address) is refused by both.
for c in ka-policy nginx-policy; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --interface 127.0.0.2 "http://127.0.0.1:${port_of[$c]}/$FILE" || true)
    [ "$code" = 403 ] || { echo "$c: a client outside the allow list got $code, not 403" >&2; exit 1; }
done

port_of[close-plain]=$plain_port
port_of[close-proxy]=$proxy_port
declare -A header_of=([close-plain]=0 [close-proxy]=1)
# run CASE SECONDS: one run of the load; prints "requests/s server-cpu-us-per-request".
run() {
    local c=$1 seconds=$2 before after out requests errors
    case $c in
        ka-*|nginx-*)
            measure "${pid_of[$c]}" "http://127.0.0.1:${port_of[$c]}/$FILE" $LOAD_CPU "$KA_CONNECTIONS" "$seconds"
            return ;;
    esac
    before=$(cpu_ticks "$tessera_pid")
    out=$(taskset -c $LOAD_CPU "$work/proxy-load" "${port_of[$c]}" "$CONNECTIONS" "$seconds" "${header_of[$c]}" "/$FILE")
    after=$(cpu_ticks "$tessera_pid")
    read -r _ requests _ errors <<< "$out"
    [ "$errors" = 0 ] || echo "$c: $errors errors" >&2
    awk -v n="$requests" -v s="$seconds" -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.0f %.2f\n", n / s, t * 1e6 / hz / n }'
}
cases="close-plain close-proxy ka-plain ka-policy nginx-plain nginx-policy"

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.lock || echo '+changes')
echo "# $(date -u '+%F %H:%M') UTC, tessera $commit, $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $(uname -r)"
echo "# /$FILE (12 bytes), a new connection per request; tessera (1 worker) on core $SERVER_CPU, bench/proxy-load.c with $CONNECTIONS connections for ${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
echo "# keep-alive cases: wrk -t1 -c$KA_CONNECTIONS on core $LOAD_CPU; $(nginx -v 2>&1 | sed 's/.*: //')"
echo "# checked: the PROXY listener serves the file after a v2 header and closes a connection without one; ka-policy and nginx-policy refuse 127.0.0.2 with 403"

for c in $cases; do run "$c" 1 >/dev/null; done
read -ra order <<< "$cases"
declare -A rps_runs=() cpu_runs=()
ratio_runs=""
policy_runs=""
nginx_runs=""
for round in $(seq "$ROUNDS"); do
    declare -A cpu_now=()
    n=${#order[@]}
    for i in $(seq 0 $((n - 1))); do
        c=${order[$(((i + round) % n))]}
        read -r rps cpu < <(run "$c" "$SECONDS_PER_RUN")
        rps_runs[$c]+="$rps "; cpu_runs[$c]+="$cpu "; cpu_now[$c]=$cpu
    done
    ratio_runs+="$(awk -v a="${cpu_now[close-proxy]}" -v b="${cpu_now[close-plain]}" 'BEGIN {printf "%.3f", a / b}') "
    policy_runs+="$(awk -v a="${cpu_now[ka-policy]}" -v b="${cpu_now[ka-plain]}" 'BEGIN {printf "%.3f", a / b}') "
    nginx_runs+="$(awk -v a="${cpu_now[nginx-policy]}" -v b="${cpu_now[ka-policy]}" 'BEGIN {printf "%.3f", a / b}') "
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
kap=$(med "${cpu_runs[ka-plain]}")
kpol=$(med "${cpu_runs[ka-policy]}")
npol=$(med "${cpu_runs[nginx-policy]}")
echo "ka-policy / ka-plain: $(awk -v a="$kpol" -v b="$kap" 'BEGIN {printf "%.3f", a / b}') (median of per-round ratios $(med "$policy_runs"); rounds: $policy_runs) target <= 1.05"
echo "nginx-policy / ka-policy: $(awk -v a="$npol" -v b="$kpol" 'BEGIN {printf "%.3f", a / b}') (median of per-round ratios $(med "$nginx_runs"); rounds: $nginx_runs) target >= 1.5"
