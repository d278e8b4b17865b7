# Shared helpers for the bench/ scripts (source it; it defines functions only).

# need COMMAND PACKAGE: installs PACKAGE with apt when COMMAND is missing.
need() { command -v "$1" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }; }

# A free loopback TCP port.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_up PORT PATH: waits (at most 10 s) until http://127.0.0.1:PORT/PATH answers 2xx.
wait_up() {
    for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$1/$2" && return 0; sleep 0.1; done
    echo "server on port $1 did not start" >&2
    exit 1
}

# "utime stime" in clock ticks of a process (all its threads) and its children.
user_sys_ticks() {
    local user=0 sys=0 pid u s
    for pid in "$1" $(pgrep -P "$1" || true); do
        read -r u s < <(awk '{print $14, $15}' "/proc/$pid/stat")
        user=$((user + u)); sys=$((sys + s))
    done
    echo "$user $sys"
}

# utime+stime in clock ticks of a process (all its threads) and its children.
cpu_ticks() {
    local user sys
    read -r user sys < <(user_sys_ticks "$1")
    echo $((user + sys))
}

# Resident memory of a process in KiB.
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# Median of the numbers on standard input, one per line.
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# measure PID URL LOAD_CPU CONNECTIONS SECONDS [WRK ARGS...]: one wrk run pinned to
# LOAD_CPU against the server PID; prints "requests/s server-cpu-microseconds-per-request".
measure() {
    local pid=$1 url=$2 cpu=$3 connections=$4 seconds=$5 before after out requests rps
    shift 5
    before=$(cpu_ticks "$pid")
    out=$(taskset -c "$cpu" wrk -t1 -c"$connections" -d"${seconds}s" "$@" "$url")
    after=$(cpu_ticks "$pid")
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    if echo "$out" | grep -q "Non-2xx\|Socket errors"; then echo "wrk reported errors: $out" >&2; fi
    echo "$rps $(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$requests" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')"
}

# build_base REV: sets BASE to $BASE_BIN when given, else to a release build of git
# revision REV made in a worktree under $work (removed on exit). Needs make_work first.
build_base() {
    if [ -n "${BASE_BIN:-}" ]; then
        BASE=$BASE_BIN
        return
    fi
    local base_rev
    base_rev=$(git rev-parse --short "$1")
    git worktree add --detach "$work/src" "$base_rev" >/dev/null
    trap 'git worktree remove --force "$work/src" 2>/dev/null || true; cleanup_work' EXIT
    echo "building $base_rev (release) ..." >&2
    (cd "$work/src" && CARGO_TARGET_DIR=$work/target cargo build --release --locked -q -p tessera)
    BASE=$work/target/release/tessera
}

# h2measure PID URL CPU CONNECTIONS STREAMS SECONDS: one h2load run (-t1, from CPU);
# prints "requests/s cpu-us-per-request" as measure does.
h2measure() {
    local pid=$1 url=$2 cpu=$3 connections=$4 streams=$5 seconds=$6 before after out done rps
    before=$(cpu_ticks "$pid")
    out=$(taskset -c "$cpu" h2load -c "$connections" -m "$streams" -t 1 -D "$seconds" "$url" 2>&1)
    after=$(cpu_ticks "$pid")
    done=$(echo "$out" | awk '/^requests:/ {print $8}')
    rps=$(echo "$out" | awk '/^finished in/ {print $4}')
    if ! echo "$out" | grep -q "0 failed, 0 errored"; then echo "h2load reported failures: $(echo "$out" | grep '^requests:')" >&2; fi
    echo "$rps $(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$done" \
        'BEGIN { printf "%.2f", t * 1e6 / hz / n }')"
}

# make_work NAME: a fresh directory in $work (readable by all: h2o and nginx workers may
# run as nobody), and an empty $pids; on exit every PID in $pids is killed and the
# directory removed (kept, and named, when KEEP_WORK is set).
make_work() {
    work=$(mktemp -d "/tmp/tessera-$1.XXXXXX")
    chmod 755 "$work"
    pids=()
    trap cleanup_work EXIT
}

cleanup_work() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "${KEEP_WORK:-}" ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}

# start_floors CPU ORIGIN_PORT: builds bench/floor.c and bench/proxy-floor.c into $work and
# starts both pinned to CPU: the floor (a fixed 1 KB response: one recv and one send per
# request, the cheapest single hop) and the proxy floor (a byte pipe to
# 127.0.0.1:ORIGIN_PORT, one upstream connection per client connection: the cheapest
# proxy any user-space program can be). Sets floor_port, floor_pid, proxy_floor_port and
# proxy_floor_pid.
start_floors() {
    cc -O2 -o "$work/floor" bench/floor.c
    floor_port=$(free_port)
    taskset -c "$1" "$work/floor" "$floor_port" 1024 &
    pids+=($!); floor_pid=$!
    cc -O2 -o "$work/proxy-floor" bench/proxy-floor.c
    proxy_floor_port=$(free_port)
    taskset -c "$1" "$work/proxy-floor" "$proxy_floor_port" "$2" &
    pids+=($!); proxy_floor_pid=$!
}

# in_proxy_floors LABEL RATIO PROXY_FLOOR_US NGINX_NAME NGINX_US TESSERA_NAME TESSERA_US:
# both proxies' CPU per request as multiples of the proxy floor's, and what tessera would
# cost if it were RATIO times cheaper than nginx.
in_proxy_floors() {
    awk -v l="$1" -v r="$2" -v pf="$3" -v nn="$4" -v n="$5" -v tn="$6" -v t="$7" 'BEGIN {
        printf "%s in proxy floors (%.2f us): %s %.2f, %s %.2f; %sx cheaper than nginx would be %.2f proxy floors\n", l, pf, nn, n / pf, tn, t / pf, r, n / r / pf }'
}

# nginx_head DIR: the top of a one-process nginx.conf (one worker, no master, in the
# foreground, its error log and pid file in DIR, epoll), for a heredoc: $(nginx_head DIR).
nginx_head() {
    cat <<CONF
worker_processes 1;
master_process off;
daemon off;
error_log $1/error.log warn;
pid $1/nginx.pid;
events { worker_connections 4096; use epoll; multi_accept on; }
CONF
}

# nginx_keepalive: the lines of an nginx `http {}` block every bench gives it alike (no
# access log, sendfile, keep-alive without limit, the open-file cache), to put in a
# configuration's heredoc as $(nginx_keepalive).
nginx_keepalive() {
    cat <<CONF
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 1s;
CONF
}

# make_cert: a self-signed ECDSA P-256 certificate for localhost in $work/cert.pem and
# $work/key.pem, the key readable by all (h2o and nginx workers may run as nobody).
make_cert() {
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
        -keyout "$work/key.pem" -out "$work/cert.pem" -subj /CN=localhost \
        -addext subjectAltName=DNS:localhost 2>/dev/null
    chmod 644 "$work/key.pem"
}

# make_page FILE: a 57 KB HTML page of paragraphs of text, as a content page is (the page
# of bench/http2.sh).
make_page() {
    python3 - "$1" <<'PY'
import sys
words = "edge server cache fragment stream window header frame page site".split()
out = ["<!doctype html>\n<html><head><title>page</title></head><body>\n"]
i = 0
while sum(map(len, out)) < 57 * 1024 - 200:
    out.append("<p>" + " ".join(words[(i + k) % len(words)] for k in range(40)) + "</p>\n")
    i += 1
out.append("</body></html>\n")
open(sys.argv[1], "w").write("".join(out))
PY
}

# start_h2o_tls SITE CPU [MAX_CONNECTIONS]: h2o with one thread serving SITE over TLS
# ($work/cert.pem and key.pem; HTTP/2 by ALPN, on by default) on a free port, pinned to
# CPU (none when empty). Sets h2o_port and h2o_pid; the process joins `pids`.
start_h2o_tls() {
    h2o_port=$(free_port)
    {
        echo "num-threads: 1"
        [ -z "${3:-}" ] || echo "max-connections: $3"
        cat <<CONF
listen:
  host: 127.0.0.1
  port: $h2o_port
  ssl:
    certificate-file: $work/cert.pem
    key-file: $work/key.pem
error-log: $work/h2o-error.log
hosts:
  default:
    paths:
      /:
        file.dir: $1
CONF
    } > "$work/h2o.conf"
    if [ -n "$2" ]; then
        taskset -c "$2" h2o -c "$work/h2o.conf" >/dev/null 2>&1 &
    else
        h2o -c "$work/h2o.conf" >/dev/null 2>&1 &
    fi
    h2o_pid=$!
    pids+=("$h2o_pid")
}

# run_pinned CPU OUTFILE CMD...: runs CMD on CPU, its output to OUTFILE; prints its CPU
# seconds (user+system). The inner shell waits for the command, then its own /proc stat
# holds the child's user+system time in fields 16 and 17 (cutime, cstime).
run_pinned() {
    local cpu=$1 out=$2
    shift 2
    taskset -c "$cpu" bash -c '"$@" > "'"$out"'" 2>&1; cat /proc/$$/stat' _ "$@" |
        python3 -c "import sys; f=sys.stdin.read().rsplit(')',1)[1].split(); print((int(f[13])+int(f[14]))/$(getconf CLK_TCK))"
}

# nginx_http_conf NAME HTTP-BLOCK: writes $work/NAME/nginx.conf, a one-process nginx
# (nginx_head) whose http block holds nginx_keepalive's lines, its temporary files in
# $work/NAME, and HTTP-BLOCK (servers, upstreams, caches).
nginx_http_conf() {
    mkdir -p "$work/$1"
    cat > "$work/$1/nginx.conf" <<CONF
$(nginx_head "$work/$1")
http {
$(nginx_keepalive)
    client_body_temp_path $work/$1;
    proxy_temp_path $work/$1;
    fastcgi_temp_path $work/$1;
    uwsgi_temp_path $work/$1;
    scgi_temp_path $work/$1;
    $2
}
CONF
}

# bench_summary JSON_FILE CPU_SECONDS: "requests seconds cpu [errors N] [self-check invalid]"
# of a `tessera bench --json` report, for the loadgen scripts' tables.
bench_summary() {
    python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
e = d["errors"]["total"]
v = "" if d["self_check"]["valid"] else " [self-check invalid]"
print(d["requests"], d["duration_s"], sys.argv[2], f"[errors {e}]" if e else "", v)
PY
}

# run_wrk PID URL [WRK ARGS...]: one wrk run (-t1 -c$CONNECTIONS -d$SECONDS_PER_RUN) pinned
# to $LOAD_CPU; prints "requests requests/s cpu-us-per-request" for the server PID.
run_wrk() {
    local pid=$1 url=$2 before after out requests rps u0 s0 u1 s1 hz
    shift 2
    read -r u0 s0 < <(user_sys_ticks "$pid")
    out=$(taskset -c $LOAD_CPU wrk -t1 -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" "$@" "$url")
    read -r u1 s1 < <(user_sys_ticks "$pid")
    if echo "$out" | grep -q "Non-2xx\|Socket errors"; then echo "wrk reported errors for $url: $out" >&2; fi
    requests=$(echo "$out" | awk '/requests in/ {print $1}')
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    hz=$(getconf CLK_TCK)
    # With SPLIT_LOG set, "PID URL USER SYS" (microseconds per request) is appended to it.
    if [ -n "${SPLIT_LOG:-}" ]; then
        awk -v p="$pid" -v url="$url" -v u=$((u1 - u0)) -v s=$((s1 - s0)) -v hz="$hz" -v n="$requests" \
            'BEGIN { printf "%s %s %.2f %.2f\n", p, url, u * 1e6 / hz / n, s * 1e6 / hz / n }' >> "$SPLIT_LOG"
    fi
    echo "$requests $rps $(awk -v t=$((u1 + s1 - u0 - s0)) -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')"
}

# start_varnish_esi CPU ORIGIN_PORT CACHING: Varnish pinned to CPU in front of the origin
# on ORIGIN_PORT, with ESI on for responses that say `Surrogate-Control: ESI/1.0`, and
# CACHING (VCL lines of vcl_backend_response, e.g. `set beresp.ttl = 1h;`) for every
# response. Sets varnish_port and varnish_pid; the process joins `pids`.
start_varnish_esi() {
    varnish_port=$(free_port)
    cat > "$work/esi.vcl" <<VCL
vcl 4.1;
backend origin { .host = "127.0.0.1"; .port = "$2"; }
sub vcl_backend_response {
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
    }
    $3
    return (deliver);
}
VCL
    taskset -c "$1" varnishd -F -n "$work/varnish" -a "127.0.0.1:$varnish_port" \
        -f "$work/esi.vcl" -s malloc,64m >"$work/varnish.log" 2>&1 &
    varnish_pid=$!
    pids+=("$varnish_pid")
}
