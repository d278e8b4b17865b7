#!/usr/bin/env bash
# Lua handlers: tessera's Lua "hello" against its own static 12-byte file, and the same
# pair on nginx with its Lua module (OpenResty's lua-nginx-module, apt package
# libnginx-mod-http-lua), side by side in one run (issue 11).
#
# Each server runs one worker pinned to core 0; wrk drives it from core 1 with 100
# keep-alive connections. Rounds alternate over the four targets so all see the same
# machine noise; the script prints the median requests/s and the median server CPU time
# per request (utime+stime of the server process from /proc / requests completed), then
# tessera-Lua/tessera-static and tessera-Lua/nginx-Lua. wrk itself saturates near 100k
# requests/s on one core here, so CPU per request is the figure that tells servers apart.
#
# `bench/lua.sh json` is issue 50's JSON case instead: per request, a `content` handler
# decodes a 2 KB JSON document, changes one field and encodes it again; tessera's
# tessera.json against nginx's Lua module with cjson (apt package lua-cjson), beside the
# floor (bench/floor.c: a fixed 12-byte response, one recv and one send per request) and
# both hello handlers, so that what JSON costs above a handler shows. The server CPU per
# request is printed as above, then tessera-json/nginx-json and each above the floor.
#
# `bench/lua.sh gsub` is issue 50's body-filter case: a 57 KB HTML page from an origin
# (nginx on core 1) proxied with a body filter that replaces one word everywhere in it:
# tessera's `body_filter` with `tessera.re.gsub` against nginx's `body_filter_by_lua` with
# `ngx.re.gsub(..., "jo")` (PCRE with its JIT), beside both proxies without a filter. Both
# answers are checked against the page with the word replaced. Target: tessera's filter
# at least 1.5x cheaper per request than nginx's.
#
# `bench/lua.sh redis` is issue 50's cosocket case: per request, a `content` handler GETs an
# 11-byte value from Redis with lua-resty-redis (the unmodified copy vendored under
# crates/cli/tests/fixtures, v0.33) over a keep-alive pool: tessera's through
# `ngx = tessera.ngx_compat` and `package_path`, nginx's Lua module with the same library
# (its lua_package_path pointed at the same copy), beside both hello handlers.
# redis-server runs on the load's core. Both answers are checked; after the runs Redis'
# counts of connections received and commands processed are printed (connections far
# fewer than the requests show the pools at work). Target: tessera-redis at least as cheap
# per request as nginx-redis. REDIS_CONNECTIONS sets wrk's connections (default 20).
#
# usage: [TESSERA_BIN=path] bench/lua.sh [json|gsub|redis] [ROUNDS] [SECONDS]   (defaults: 5 rounds of 5 s per target)
set -euo pipefail
cd "$(dirname "$0")/.."
CASE=hello
case "${1:-}" in json|gsub|redis) CASE=$1; shift ;; esac
ROUNDS=${1:-5}
SECONDS_PER_RUN=${2:-5}
CONNECTIONS=100
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need wrk wrk
need taskset util-linux
modules=/usr/lib/nginx/modules
[ -f "$modules/ngx_http_lua_module.so" ] || { apt-get update -qq && apt-get install -y -qq libnginx-mod-http-lua >/dev/null; }
cjson_so=/usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so
# nginx.conf requires cjson in init_by_lua whatever the case.
if [ ! -f "$cjson_so" ]; then apt-get update -qq && apt-get install -y -qq lua-cjson >/dev/null; fi
[ "$CASE" != redis ] || need redis-server redis-server
resty_redis=$PWD/crates/cli/tests/fixtures/lua-resty-redis/lib

# TESSERA_BIN: a tessera binary built already (else a release build of this tree).
if [ -n "${TESSERA_BIN:-}" ]; then
    TESSERA=$TESSERA_BIN
else
    cargo build --release --locked -q -p tessera
    TESSERA=$PWD/target/release/tessera
fi

make_work lua

site=$work/site
mkdir -p "$site"
printf 'Hello World\n' > "$site/12b.txt"

# The JSON case's document: an API answer of 2 KB (19 items of strings, numbers, booleans,
# nulls, nested arrays and objects), and the same handler in both servers.
python3 - "$work/doc.json" <<'PY'
import json, sys
items = [{"id": 1000 + i, "name": "item %d" % i, "price": round(9.99 + i * 1.25, 2), "tags": ["a", "b%d" % i],
          "ok": i % 2 == 0, "note": None if i % 3 else "n/a", "dim": {"w": i, "h": 2 * i}} for i in range(19)]
doc = {"page": 1, "per_page": 19, "total": 512, "next": "/api/items?page=2", "items": items}
text = json.dumps(doc, separators=(",", ":"))
assert 1900 <= len(text) <= 2200, len(text)
open(sys.argv[1], "w").write(text)
PY
cat > "$work/json.lua" <<LUA
local json = tessera.json
local doc = [==[$(cat "$work/doc.json")]==]
return { content = function(r)
  local t = json.decode(doc)
  t.page = t.page + 1
  r:set_header("Content-Type", "application/json")
  return json.encode(t)
end }
LUA

# The gsub case's page (57 KB of HTML, the word "widget" 300 times), its origin (nginx
# on the load's core) and the filter in both servers.
python3 - "$site/page.html" <<'PY'
import sys
row = '<tr><td class="name">widget %d</td><td>in stock</td><td>%s</td></tr>\n'
body = "".join(row % (i, "lorem ipsum dolor sit amet " * 4) for i in range(300))
page = "<!doctype html><html><head><title>widgets</title></head><body><table>\n" + body + "</table></body></html>\n"
page = page + " " * (57000 - len(page)) if len(page) < 57000 else page
assert 56000 <= len(page) <= 58500, len(page)
open(sys.argv[1], "w").write(page)
PY
origin_port=$(free_port)
nginx_http_conf origin "server { listen 127.0.0.1:$origin_port; root $site; }"
taskset -c $LOAD_CPU nginx -c "$work/origin/nginx.conf" -e "$work/origin/error.log" &
pids+=($!)
cat > "$work/gsub.lua" <<'LUA'
local gsub = tessera.re.gsub
return { body_filter = function(r, chunk, eof)
  local out = gsub(chunk, "widget", "gadget")
  return out
end }
LUA
# The redis case's server (on the load's core), its value, and the handler both servers
# run (the same lines; ngx is OpenResty's own in nginx, tessera.ngx_compat in tessera).
redis_port=0
if [ "$CASE" = redis ]; then
    redis_port=$(free_port)
    taskset -c $LOAD_CPU redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do [ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
    redis-cli -p "$redis_port" set greeting "Hello World" >/dev/null
fi
read -r -d '' redis_handler <<LUA || true
local red = redis:new()
  red:set_timeouts(1000, 1000, 1000)
  local ok, err = red:connect("127.0.0.1", $redis_port)
  if not ok then return nil, err end
  local v, gerr = red:get("greeting")
  if not v then return nil, gerr end
  red:set_keepalive(60000, 100)
  return v
LUA
cat > "$work/redis.lua" <<LUA
ngx = tessera.ngx_compat
local redis = require "resty.redis"
local function get()
  $redis_handler
end
return { content = function(r)
  local v, err = get()
  if not v then r:exit(502, "redis: " .. tostring(err)) end
  return v
end }
LUA
cat > "$work/tessera.toml" <<TOML
[[upstream]]
name = "origin"
addresses = ["127.0.0.1:$origin_port"]

[[route]]
prefix = "/page.html"
upstream = "origin"

[[route]]
prefix = "/filtered/"
upstream = "origin"
strip_prefix = "/filtered"

[[script]]
prefix = "/filtered/"
path = "$work/gsub.lua"

[[script]]
prefix = "/redis"
path = "$work/redis.lua"
package_path = "$resty_redis/?.lua"
TOML

# --- nginx: one process (master_process off), the Lua module, no access log.
nginx_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
load_module $modules/ndk_http_module.so;
load_module $modules/ngx_http_lua_module.so;
$(nginx_head "$work/nginx")
http {
$(nginx_keepalive)
    default_type text/plain;
    types { text/plain txt; }
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    lua_package_cpath "/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;;";
    lua_package_path "$resty_redis/?.lua;;";
    upstream origin { server 127.0.0.1:$origin_port; keepalive 32; }
    init_by_lua_block {
        cjson = require "cjson"
        doc = [==[$(cat "$work/doc.json")]==]
    }
    server {
        listen 127.0.0.1:$nginx_port reuseport;
        root $site;
        location = /hello { content_by_lua_block { ngx.say("Hello World") } }
        location = /page.html {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
        location = /filtered/page.html {
            proxy_pass http://origin/page.html;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            header_filter_by_lua_block { ngx.header.content_length = nil }
            body_filter_by_lua_block {
                ngx.arg[1] = ngx.re.gsub(ngx.arg[1], "widget", "gadget", "jo")
            }
        }
        location = /redis {
            content_by_lua_block {
                local redis = require "resty.redis"
                local function get()
                  $redis_handler
                end
                local v, err = get()
                if not v then ngx.status = 502 ngx.say("redis: ", err) return end
                ngx.print(v)
            }
        }
        location = /json {
            default_type application/json;
            content_by_lua_block {
                local t = cjson.decode(doc)
                t.page = t.page + 1
                ngx.print(cjson.encode(t))
            }
        }
    }
}
CONF
taskset -c $SERVER_CPU nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!); nginx_pid=$!

# --- tessera: one worker, the hello example mounted at /hello.
tessera_port=$(free_port)
taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/tessera.toml" --root "$site" --listen "127.0.0.1:$tessera_port" --workers 1 \
    --script "/hello=$PWD/examples/lua/hello.lua" --script "/json=$work/json.lua" 2>"$work/tessera.log" &
pids+=($!); tessera_pid=$!

wait_up "$nginx_port" 12b.txt; wait_up "$tessera_port" 12b.txt
wait_up "$nginx_port" hello; wait_up "$tessera_port" hello
for port in "$nginx_port" "$tessera_port"; do
    [ "$(curl -s "http://127.0.0.1:$port/hello")" = "Hello World" ] || { echo "port $port: wrong hello body" >&2; exit 1; }
done

targets="tessera-static tessera-lua nginx-static nginx-lua"
declare -A pid_of=([tessera-static]=$tessera_pid [tessera-lua]=$tessera_pid [nginx-static]=$nginx_pid [nginx-lua]=$nginx_pid)
declare -A url_of=(
    [tessera-static]="http://127.0.0.1:$tessera_port/12b.txt" [tessera-lua]="http://127.0.0.1:$tessera_port/hello"
    [nginx-static]="http://127.0.0.1:$nginx_port/12b.txt" [nginx-lua]="http://127.0.0.1:$nginx_port/hello")
if [ "$CASE" = json ]; then
    # Both answer the same JSON (the same values; key order is each table's own).
    for port in "$nginx_port" "$tessera_port"; do
        curl -fs "http://127.0.0.1:$port/json" > "$work/answer-$port.json" || { echo "port $port: /json failed" >&2; exit 1; }
    done
    python3 - "$work/doc.json" "$work/answer-$nginx_port.json" "$work/answer-$tessera_port.json" <<'PY'
import json, sys
want = json.load(open(sys.argv[1])); want["page"] += 1
for f in sys.argv[2:]:
    assert json.load(open(f)) == want, f
PY
    cc -O2 -o "$work/floor" bench/floor.c
    floor_port=$(free_port)
    taskset -c $SERVER_CPU "$work/floor" "$floor_port" 12 &
    pids+=($!); pid_of[floor]=$!; url_of[floor]="http://127.0.0.1:$floor_port/"
    wait_up "$floor_port" ""
    pid_of[tessera-json]=$tessera_pid; url_of[tessera-json]="http://127.0.0.1:$tessera_port/json"
    pid_of[nginx-json]=$nginx_pid; url_of[nginx-json]="http://127.0.0.1:$nginx_port/json"
    targets="floor tessera-lua tessera-json nginx-lua nginx-json"
fi

if [ "$CASE" = redis ]; then
    for port in "$nginx_port" "$tessera_port"; do
        [ "$(curl -fs "http://127.0.0.1:$port/redis")" = "Hello World" ] || { echo "port $port: /redis is not the value" >&2; exit 1; }
    done
    echo "check: both servers answer the value GET from Redis through lua-resty-redis"
    pid_of[tessera-redis]=$tessera_pid; url_of[tessera-redis]="http://127.0.0.1:$tessera_port/redis"
    pid_of[nginx-redis]=$nginx_pid; url_of[nginx-redis]="http://127.0.0.1:$nginx_port/redis"
    targets="tessera-lua tessera-redis nginx-lua nginx-redis"
    CONNECTIONS=${REDIS_CONNECTIONS:-20}
fi

if [ "$CASE" = gsub ]; then
    wait_up "$origin_port" page.html
    python3 -c "import sys; p = open(sys.argv[1]).read(); open(sys.argv[2], 'w').write(p.replace('widget', 'gadget'))" \
        "$site/page.html" "$work/want.html"
    for port in "$nginx_port" "$tessera_port"; do
        cmp -s <(curl -fs "http://127.0.0.1:$port/page.html") "$site/page.html" || { echo "port $port: /page.html is not the page" >&2; exit 1; }
        cmp -s <(curl -fs "http://127.0.0.1:$port/filtered/page.html") "$work/want.html" || { echo "port $port: /filtered/page.html is not the page with the word replaced" >&2; exit 1; }
    done
    echo "check: both proxies answer the page, and the filtered page with every \"widget\" replaced"
    pid_of[tessera-proxy]=$tessera_pid; url_of[tessera-proxy]="http://127.0.0.1:$tessera_port/page.html"
    pid_of[tessera-gsub]=$tessera_pid; url_of[tessera-gsub]="http://127.0.0.1:$tessera_port/filtered/page.html"
    pid_of[nginx-proxy]=$nginx_pid; url_of[nginx-proxy]="http://127.0.0.1:$nginx_port/page.html"
    pid_of[nginx-gsub]=$nginx_pid; url_of[nginx-gsub]="http://127.0.0.1:$nginx_port/filtered/page.html"
    targets="tessera-proxy tessera-gsub nginx-proxy nginx-gsub"
    CONNECTIONS=${GSUB_CONNECTIONS:-20}
fi

echo "# $(date -u '+%F %H:%M') UTC, $(nproc) cores, $(uname -r); server on core $SERVER_CPU, wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
printf '%-15s %12s %12s\n' target "requests/s" "cpu us/req"
declare -A rps_runs=() cpu_runs=()
for _ in $(seq "$ROUNDS"); do
    for t in $targets; do
        read -r rps cpu < <(measure "${pid_of[$t]}" "${url_of[$t]}" $LOAD_CPU $CONNECTIONS "$SECONDS_PER_RUN")
        rps_runs[$t]+="$rps "
        cpu_runs[$t]+="$cpu "
    done
done
declare -A rps_med=() cpu_med=()
for t in $targets; do
    rps_med[$t]=$(echo "${rps_runs[$t]}" | tr ' ' '\n' | grep . | median)
    cpu_med[$t]=$(echo "${cpu_runs[$t]}" | tr ' ' '\n' | grep . | median)
    printf '%-15s %12.0f %12.2f   (runs: %s| cpu: %s)\n' "$t" "${rps_med[$t]}" "${cpu_med[$t]}" "${rps_runs[$t]}" "${cpu_runs[$t]% }"
done
ratio() { awk -v a="${rps_med[$1]}" -v b="${rps_med[$2]}" -v ac="${cpu_med[$1]}" -v bc="${cpu_med[$2]}" -v l="$1/$2" \
    'BEGIN { printf "%-30s requests/s x%.2f   cpu per request x%.2f (%s cheaper when > 1)\n", l, a / b, bc / ac, "left" }'; }
if [ "$CASE" = json ]; then
    ratio tessera-json nginx-json
    ratio tessera-lua nginx-lua
    for t in tessera-lua tessera-json nginx-lua nginx-json; do
        awk -v a="${cpu_med[$t]}" -v f="${cpu_med[floor]}" -v t="$t" \
            'BEGIN { printf "%-14s %.2f us above the floor (%.2f us), %.2f floors\n", t, a - f, f, a / f }'
    done
    awk -v tj="${cpu_med[tessera-json]}" -v tl="${cpu_med[tessera-lua]}" -v nj="${cpu_med[nginx-json]}" -v nl="${cpu_med[nginx-lua]}" \
        'BEGIN { printf "the JSON work alone (json - hello): tessera %.2f us, nginx+cjson %.2f us (x%.2f)\n", tj - tl, nj - nl, (nj - nl) / (tj - tl) }'
    exit 0
fi
if [ "$CASE" = gsub ]; then
    ratio tessera-gsub nginx-gsub
    ratio tessera-proxy nginx-proxy
    awk -v tg="${cpu_med[tessera-gsub]}" -v tp="${cpu_med[tessera-proxy]}" -v ng="${cpu_med[nginx-gsub]}" -v np="${cpu_med[nginx-proxy]}" \
        'BEGIN { printf "the filter alone (gsub - proxy): tessera %.2f us, nginx %.2f us (x%.2f); target: tessera-gsub at least 1.5x cheaper than nginx-gsub\n", tg - tp, ng - np, (ng - np) / (tg - tp) }'
    exit 0
fi
if [ "$CASE" = redis ]; then
    ratio tessera-redis nginx-redis
    ratio tessera-lua nginx-lua
    awk -v tr="${cpu_med[tessera-redis]}" -v tl="${cpu_med[tessera-lua]}" -v nr="${cpu_med[nginx-redis]}" -v nl="${cpu_med[nginx-lua]}" \
        'BEGIN { printf "the Redis GET alone (redis - hello): tessera %.2f us, nginx %.2f us (x%.2f); target: tessera-redis at least as cheap as nginx-redis\n", tr - tl, nr - nl, (nr - nl) / (tr - tl) }'
    # The pools did their work: Redis saw few connections for all those requests.
    echo "redis: $(redis-cli -p "$redis_port" info stats | tr -d '\r' | grep '^total_connections_received'), $(redis-cli -p "$redis_port" info stats | tr -d '\r' | grep '^total_commands_processed')"
    exit 0
fi
ratio tessera-lua tessera-static
ratio tessera-lua nginx-lua
ratio nginx-lua nginx-static
