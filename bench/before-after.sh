#!/usr/bin/env bash
# Two builds of tessera side by side in one run: the working tree's against a git
# revision's (default: the parent commit), on the four paths a refactor must not slow:
#   static   a 12-byte file, keep-alive (the figure of bench/peers.sh);
#   lua      the hello example (examples/lua/hello.lua) at /hello (bench/lua.sh);
#   esi      a cached page of FRAGMENTS cached fragments from bench/esi-origin.py
#            (bench/esi.sh, part b);
#   proxy    a 1 KB file proxied, not stored (no freshness information), from a tessera
#            origin on core 1 (bench/proxy.sh's case, with the proxy's default pool);
#   proxy-pipelined  the same, 16 requests pipelined per connection (wrk with a
#            pipelining script; not in the default set);
#   h2       the 12-byte file over HTTP/2 and TLS 1.3, h2load -c100 -m10 (bench/http2.sh's
#            case; not in the default set);
#   h2-page  the 57 KB page over HTTP/2 and TLS 1.3, h2load -c100 -m10 (bench/http2.sh's
#            second case; not in the default set).
# Each build runs one worker per workload pinned to core 0; wrk -t1 -cCONNECTIONS drives
# it from core 1 (the ESI origin also sits on core 1, asked only while caches fill). In
# every round each target is measured once, the two builds one after the other and
# which goes first alternating, so both see the same machine noise. Prints the median
# requests/s and server CPU per request (utime+stime from /proc around each run) and,
# per workload, the CPU ratio new/base with its per-round spread.
#
# usage: bench/before-after.sh [REV]   (env: ROUNDS=7 SECONDS_PER_RUN=4 CONNECTIONS=50
#                                        FRAGMENTS=10 BASE_BIN=path to skip building REV
#                                        WORKLOADS="static lua esi proxy" to measure
#                                        fewer)
# Needs: wrk, curl, taskset, python3, git, openssl, and h2load for h2 (apt-get installs wrk,
# curl, taskset and h2load when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-HEAD~1}
ROUNDS=${ROUNDS:-7}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-4}
CONNECTIONS=${CONNECTIONS:-50}
FRAGMENTS=${FRAGMENTS:-10}
WORKLOADS=${WORKLOADS:-static lua esi proxy}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need wrk wrk
need curl curl
need taskset util-linux
case " $WORKLOADS " in *" h2"*) need h2load nghttp2-client ;; esac

cargo build --release --locked -q -p tessera
NEW=$PWD/target/release/tessera
make_work before-after
build_base "$REV"

site=$work/site
mkdir -p "$site"
printf 'hello world\n' > "$site/12b.txt"
head -c 1024 /dev/zero | tr '\0' 'a' > "$site/1k.txt"
make_page "$site/page.html"
# wrk sends what request() returns as is: 16 requests at once, the next 16 once answered.
cat > "$work/pipeline.lua" <<'LUA'
init = function(args)
  local r = {}
  for i = 1, tonumber(args[1] or 16) do r[i] = wrk.format() end
  req = table.concat(r)
end
request = function() return req end
LUA
declare -A extra_of=([proxy-pipelined]="-s $work/pipeline.lua")
make_cert

origin_port=$(free_port)
taskset -c $LOAD_CPU python3 bench/esi-origin.py "$origin_port" "$FRAGMENTS" 0 &
pids+=($!)
wait_up "$origin_port" cached/frag/1
file_origin_port=$(free_port)
taskset -c $LOAD_CPU "$NEW" serve --root "$site" --listen "127.0.0.1:$file_origin_port" --workers 1 \
    2>"$work/file-origin.log" &
pids+=($!)
wait_up "$file_origin_port" 1k.txt

declare -A pid_of=() url_of=()
for build in base new; do
    bin=$BASE; [ $build = new ] && bin=$NEW
    port=$(free_port)
    tls_port=$(free_port)
    taskset -c $SERVER_CPU "$bin" serve --root "$site" --listen "127.0.0.1:$port" --workers 1 \
        --tls-listen "127.0.0.1:$tls_port" --cert "$work/cert.pem" --key "$work/key.pem" \
        --script "/hello=$PWD/examples/lua/hello.lua" 2>"$work/$build-files.log" &
    pids+=($!)
    pid_of[$build-static]=$!; pid_of[$build-lua]=$!; pid_of[$build-h2]=$!; pid_of[$build-h2-page]=$!
    url_of[$build-static]="http://127.0.0.1:$port/12b.txt"
    url_of[$build-lua]="http://127.0.0.1:$port/hello"
    url_of[$build-h2]="https://127.0.0.1:$tls_port/12b.txt"
    url_of[$build-h2-page]="https://127.0.0.1:$tls_port/page.html"
    wait_up "$port" 12b.txt; wait_up "$port" hello
    [ "$(curl -s "http://127.0.0.1:$port/hello")" = "Hello World" ] || { echo "$build: wrong hello body" >&2; exit 1; }
    port=$(free_port)
    taskset -c $SERVER_CPU "$bin" serve --proxy "http://127.0.0.1:$origin_port" \
        --listen "127.0.0.1:$port" --workers 1 2>"$work/$build-proxy.log" &
    pids+=($!)
    pid_of[$build-esi]=$!
    url_of[$build-esi]="http://127.0.0.1:$port/cached/page"
    wait_up "$port" cached/frag/1
    port=$(free_port)
    taskset -c $SERVER_CPU "$bin" serve --proxy "http://127.0.0.1:$file_origin_port" \
        --listen "127.0.0.1:$port" --workers 1 2>"$work/$build-pass.log" &
    pids+=($!)
    pid_of[$build-proxy]=$!; pid_of[$build-proxy-pipelined]=$!
    url_of[$build-proxy]="http://127.0.0.1:$port/1k.txt"
    url_of[$build-proxy-pipelined]="http://127.0.0.1:$port/1k.txt"
    wait_up "$port" 1k.txt
    for _ in 1 2; do curl -fsS -o "$work/$build-page.html" "${url_of[$build-esi]}"; done
    found=$(grep -c '<p>fragment ' "$work/$build-page.html" || true)
    [ "$found" = "$FRAGMENTS" ] || { echo "$build did not assemble the page ($found fragments)" >&2; exit 1; }
done
cmp -s "$work/base-page.html" "$work/new-page.html" || { echo "the two builds assemble different pages" >&2; exit 1; }

echo "# $(date -u '+%F %H:%M') UTC, $(nproc) cores, $(uname -r); base $(git rev-parse --short "$REV") vs new $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo '+changes');"
echo "# servers on core $SERVER_CPU, wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
declare -A rps_runs=() cpu_runs=() ratio_runs=()
for round in $(seq "$ROUNDS"); do
    for w in $WORKLOADS; do
        order="base new"; [ $((round % 2)) = 0 ] && order="new base"
        declare -A cpu_now=()
        for build in $order; do
            t=$build-$w
            if [ "${w%-page}" = h2 ]; then
                read -r rps cpu < <(h2measure "${pid_of[$t]}" "${url_of[$t]}" $LOAD_CPU 100 10 "$SECONDS_PER_RUN")
            else
                # shellcheck disable=SC2086 # the extra wrk options split into words
                read -r rps cpu < <(measure "${pid_of[$t]}" "${url_of[$t]}" $LOAD_CPU $CONNECTIONS "$SECONDS_PER_RUN" ${extra_of[$w]:-})
            fi
            rps_runs[$t]+="$rps "; cpu_runs[$t]+="$cpu "; cpu_now[$build]=$cpu
        done
        ratio_runs[$w]+="$(awk -v n="${cpu_now[new]}" -v b="${cpu_now[base]}" 'BEGIN {printf "%.3f", n / b}') "
        unset cpu_now
    done
done
printf '%-12s %12s %12s\n' target "requests/s" "cpu us/req"
for w in $WORKLOADS; do
    for build in base new; do
        t=$build-$w
        printf '%-12s %12.0f %12.2f   (cpu runs: %s)\n' "$t" \
            "$(echo "${rps_runs[$t]}" | tr ' ' '\n' | grep . | median)" \
            "$(echo "${cpu_runs[$t]}" | tr ' ' '\n' | grep . | median)" "${cpu_runs[$t]% }"
    done
    r=$(echo "${ratio_runs[$w]}" | tr ' ' '\n' | grep . | median)
    printf '%-12s new/base cpu per request: median x%.3f (per round: %s)\n' "$w" "$r" "${ratio_runs[$w]% }"
done
