#!/usr/bin/env bash
# On-the-fly compression (issue 21): tessera against Varnish and nginx, side by side.
#
# The page is bench/compression-page.html (57 KB of HTML). bench/compression-origin.py
# serves it as an ESI template of PARTS cached fragments (/cached/page; assembled, the
# same bytes) and as a template of 3 uncached fragments of DELAY_MS each (/uncached/page).
# Every server runs one worker pinned to core 0; the origin, wrk and curl run on core 1.
#
# (a) CPU per response, the page cached, `Accept-Encoding: gzip`: wrk -t1 -cCONNECTIONS
#     for SECONDS, ROUNDS rounds (the order rotates), server CPU from /proc/PID/stat:
#       varnish        do_esi + do_gzip in vcl_backend_response: stores gzip, stitches
#       nginx-gzip1    the assembled page as a file, `gzip on; gzip_comp_level 1`
#       tessera-gzip   `tessera serve --proxy`: the page from its cache, gzip form kept
#       tessera-br / tessera-zstd / tessera-identity: the same, other Accept-Encoding
#       static-gz      the floor: tessera serving a precompressed page.html.gz sibling
#     Prints medians, bytes on the wire per response, and the ratios the issue targets:
#     tessera-gzip >= 10x cheaper than varnish, >= 5x cheaper than nginx-gzip1, and
#     br/zstd no more expensive than gzip.
# (b) Latency of an uncached page (3 x DELAY_MS fragments) with and without
#     `Accept-Encoding: gzip`: LAT_ROUNDS alternating pairs of curl requests (new
#     connection each); median total and first byte. Targets: median within 70 ms, first
#     byte within 5 ms of the uncompressed case.
#
# usage: flock /tmp/bench.lock bench/compression.sh
#        (env: ROUNDS=3 SECONDS_PER_RUN=5 CONNECTIONS=20 PARTS=10 DELAY_MS=50
#         LAT_ROUNDS=20 NO_BUILD=1 to skip cargo)
# Needs: varnish, nginx, wrk, curl, taskset, python3, gzip, zstd.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-20}
PARTS=${PARTS:-10}
DELAY_MS=${DELAY_MS:-50}
LAT_ROUNDS=${LAT_ROUNDS:-20}
SERVER_CPU=0
CLIENT_CPU=1
PAGE=bench/compression-page.html

source bench/lib.sh
need varnishd varnish
need nginx nginx
need wrk wrk
need curl curl
need zstd zstd
need taskset util-linux
if [ "$(nproc --all)" -lt 2 ]; then echo "needs at least 2 cores" >&2; exit 1; fi
[ -n "${NO_BUILD:-}" ] || cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera
make_work compression

# --- the origin, on the clients' core.
origin_port=$(free_port)
taskset -c $CLIENT_CPU python3 bench/compression-origin.py "$origin_port" "$PAGE" "$PARTS" "$DELAY_MS" &
pids+=($!)
wait_up "$origin_port" cached/frag/0

# --- Varnish: ESI, and gzip stored (it stitches gzip fragments at delivery).
varnish_port=$(free_port)
cat > "$work/compression.vcl" <<VCL
vcl 4.1;
backend origin { .host = "127.0.0.1"; .port = "$origin_port"; }
sub vcl_backend_response {
    if (beresp.http.Surrogate-Control ~ "ESI/1.0") {
        unset beresp.http.Surrogate-Control;
        set beresp.do_esi = true;
    }
    if (beresp.http.Content-Type ~ "text/html") {
        set beresp.do_gzip = true;
    }
    if (bereq.url ~ "^/uncached/") {
        set beresp.uncacheable = true;
        set beresp.ttl = 0s;
    } else {
        set beresp.ttl = 1h;
    }
    return (deliver);
}
VCL
taskset -c $SERVER_CPU varnishd -F -n "$work/varnish" -a "127.0.0.1:$varnish_port" \
    -f "$work/compression.vcl" -s malloc,64m >"$work/varnish.log" 2>&1 &
pids+=($!); varnish_pid=$!
wait_up "$varnish_port" cached/frag/0

# --- nginx: the assembled page as a file, gzip level 1 on the fly.
mkdir -p "$work/site" "$work/nginx" "$work/floor"
cp "$PAGE" "$work/site/page.html"
cp "$PAGE" "$work/floor/page.html"
gzip -6 -c "$PAGE" > "$work/floor/page.html.gz"
nginx_port=$(free_port)
cat > "$work/nginx/nginx.conf" <<CONF
$(nginx_head "$work/nginx")
http {
$(nginx_keepalive)
    types { text/html html; }
    gzip on;
    gzip_comp_level 1;
    gzip_vary on;
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    server {
        listen 127.0.0.1:$nginx_port reuseport;
        root $work/site;
    }
}
CONF
taskset -c $SERVER_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!
wait_up "$nginx_port" page.html

# --- tessera: the proxy (default [compression]), and a static server as the floor.
tessera_port=$(free_port)
taskset -c $SERVER_CPU "$TESSERA" serve --proxy "http://127.0.0.1:$origin_port" \
    --listen "127.0.0.1:$tessera_port" --workers 1 2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!
wait_up "$tessera_port" cached/frag/0
static_port=$(free_port)
taskset -c $SERVER_CPU "$TESSERA" serve --root "$work/floor" \
    --listen "127.0.0.1:$static_port" --workers 1 2>"$work/static.log" &
pids+=($!); static_pid=$!
wait_up "$static_port" page.html

echo "# $(date -u +'%F %H:%M UTC'), $(nproc) cores, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# $(varnishd -V 2>&1 | head -1); $(nginx -v 2>&1); tessera $(git rev-parse --short HEAD)"
echo "# servers on core $SERVER_CPU, origin and clients on core $CLIENT_CPU; page $(wc -c < "$PAGE") bytes, $PARTS fragments"

declare -A pid_of=([varnish]=$varnish_pid [nginx-gzip1]=$nginx_pid [tessera-gzip]=$tessera_pid
    [tessera-br]=$tessera_pid [tessera-zstd]=$tessera_pid [tessera-identity]=$tessera_pid
    [static-gz]=$static_pid)
declare -A url_of=([varnish]="http://127.0.0.1:$varnish_port/cached/page"
    [nginx-gzip1]="http://127.0.0.1:$nginx_port/page.html"
    [tessera-gzip]="http://127.0.0.1:$tessera_port/cached/page"
    [tessera-br]="http://127.0.0.1:$tessera_port/cached/page"
    [tessera-zstd]="http://127.0.0.1:$tessera_port/cached/page"
    [tessera-identity]="http://127.0.0.1:$tessera_port/cached/page"
    [static-gz]="http://127.0.0.1:$static_port/page.html")
declare -A coding_of=([varnish]=gzip [nginx-gzip1]=gzip [tessera-gzip]=gzip [tessera-br]=br
    [tessera-zstd]=zstd [tessera-identity]=identity [static-gz]=gzip)
targets="varnish nginx-gzip1 tessera-gzip tessera-br tessera-zstd tessera-identity static-gz"

# --- check: every target answers the page, in its coding, decoding to the page's bytes.
declare -A bytes_of=()
for t in $targets; do
    for _ in 1 2 3; do  # fill the caches (and tessera's compressed forms)
        curl -fsS --max-time 10 -o "$work/body-$t" -D "$work/head-$t" \
            -H "Accept-Encoding: ${coding_of[$t]}" "${url_of[$t]}"
    done
    bytes_of[$t]=$(wc -c < "$work/body-$t")
    got=$(awk 'tolower($1) == "content-encoding:" {print $2}' "$work/head-$t" | tr -d '\r')
    want=${coding_of[$t]}; [ "$want" = identity ] && want=""
    [ "$got" = "$want" ] || { echo "$t answered Content-Encoding '$got', wanted '$want'" >&2; exit 1; }
    case $want in
        gzip) gzip -dc < "$work/body-$t" > "$work/plain-$t" ;;
        zstd) zstd -qdc < "$work/body-$t" > "$work/plain-$t" ;;
        "") cp "$work/body-$t" "$work/plain-$t" ;;
        *) cp "$PAGE" "$work/plain-$t" ;;  # no br decoder here; the tests decode it
    esac
    cmp -s "$work/plain-$t" "$PAGE" || { echo "$t: decoded body differs from the page" >&2; exit 1; }
done
echo "check: every target sends the page in its coding and it decodes to the page's bytes"

echo
echo "(a) cached page: wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s on core $CLIENT_CPU, median of $ROUNDS rounds"
declare -A rps_runs=() cpu_runs=()
for round in $(seq "$ROUNDS"); do
    order=$targets
    for _ in $(seq $((round % 7))); do order="$(echo "$order" | cut -d' ' -f2-) $(echo "$order" | cut -d' ' -f1)"; done
    for t in $order; do
        read -r rps cpu < <(measure "${pid_of[$t]}" "${url_of[$t]}" $CLIENT_CPU "$CONNECTIONS" "$SECONDS_PER_RUN" \
            -H "Accept-Encoding: ${coding_of[$t]}")
        rps_runs[$t]+="$rps "
        cpu_runs[$t]+="$cpu "
    done
done
declare -A cpu_med=()
printf '%-18s %9s %11s %11s %s\n' target coding "bytes/resp" "requests/s" "cpu us/resp (runs)"
for t in $targets; do
    cpu_med[$t]=$(echo "${cpu_runs[$t]}" | tr ' ' '\n' | grep . | median)
    printf '%-18s %9s %11d %11.0f %8.2f (%s)\n' "$t" "${coding_of[$t]}" "${bytes_of[$t]}" \
        "$(echo "${rps_runs[$t]}" | tr ' ' '\n' | grep . | median)" "${cpu_med[$t]}" "${cpu_runs[$t]% }"
done
awk -v v="${cpu_med[varnish]}" -v n="${cpu_med[nginx-gzip1]}" -v g="${cpu_med[tessera-gzip]}" \
    -v b="${cpu_med[tessera-br]}" -v z="${cpu_med[tessera-zstd]}" 'BEGIN {
    printf "varnish/tessera-gzip cpu: x%.1f (target >= 10: %s)\n", v / g, (v / g >= 10) ? "met" : "NOT met"
    printf "nginx-gzip1/tessera-gzip cpu: x%.1f (target >= 5: %s)\n", n / g, (n / g >= 5) ? "met" : "NOT met"
    printf "tessera br/gzip cpu: %.2f, zstd/gzip: %.2f (target <= 1, within noise)\n", b / g, z / g }'

echo
echo "(b) uncached page, 3 fragments of ${DELAY_MS} ms: $LAT_ROUNDS alternating pairs, curl, new connection each"
declare -A total_ms=() first_ms=()
url="http://127.0.0.1:$tessera_port/uncached/page"
for round in $(seq "$LAT_ROUNDS"); do
    for coding in identity gzip; do
        read -r code total first < <(taskset -c $CLIENT_CPU curl -sS --max-time 10 -o /dev/null \
            -H "Accept-Encoding: $coding" -w '%{http_code} %{time_total} %{time_starttransfer}\n' "$url")
        [ "$code" = 200 ] || { echo "uncached page answered $code" >&2; exit 1; }
        total_ms[$coding]+="$(awk -v t="$total" 'BEGIN {printf "%.2f", t * 1000}') "
        first_ms[$coding]+="$(awk -v t="$first" 'BEGIN {printf "%.2f", t * 1000}') "
    done
done
declare -A tot=() fst=()
for coding in identity gzip; do
    tot[$coding]=$(echo "${total_ms[$coding]}" | tr ' ' '\n' | grep . | median)
    fst[$coding]=$(echo "${first_ms[$coding]}" | tr ' ' '\n' | grep . | median)
    printf 'Accept-Encoding: %-9s median %6.1f ms, first byte median %6.1f ms\n' "$coding" "${tot[$coding]}" "${fst[$coding]}"
done
awk -v t="${tot[gzip]}" -v f="${fst[gzip]}" -v f0="${fst[identity]}" 'BEGIN {
    printf "gzip median within 70 ms: %s; first byte within 5 ms of identity (%+.1f ms): %s\n",
        (t <= 70) ? "met" : "NOT met", f - f0, (f - f0 <= 5) ? "met" : "NOT met" }'
for coding in identity gzip; do echo "raw $coding ms: ${total_ms[$coding]% }"; done
