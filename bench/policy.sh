#!/usr/bin/env bash
# Routing rules (issue 42): what 50 routes and five response header edits cost a static
# file, in tessera and in nginx, side by side in one run.
#
# Every case serves the same 12-byte file (/12b.txt), one worker pinned to core 0, wrk -t1
# with CONNECTIONS keep-alive connections from core 1:
#   floor               bench/floor.c, a fixed 12-byte response (the cheapest server);
#   tessera-plain       tessera with its root and nothing else;
#   tessera-rules       the same root, 50 routes (10 `regex`, 20 exact `path`, 20
#                       `prefix`, each answering with `respond` or `redirect`) and five
#                       `response_headers` edits with `always`; no route matches
#                       /12b.txt, but finding that out takes the whole search: the exact
#                       map, every prefix, the regex set;
#   tessera-rules-root  the same, but the last prefix route is `prefix = "/"` with the
#                       site's `root`, so /12b.txt ends at the longest-prefix fallback;
#                       a `root` route also puts the proxy module in the request path
#                       (it answers "the files" for that route);
#   tessera-routes      the 50 routes alone, no header edit;
#   tessera-headers     the five header edits alone, no route (these two say which part
#                       of tessera-rules costs what);
#   nginx-plain         nginx serving the root (bench/peers.sh's configuration);
#   nginx-rules         the same 50 rules as `location`s (10 `~`/`~*`, 20 `=`, 20 prefix
#                       and `^~`, each with a `return`) and the five fields as
#                       `add_header ... always`.
# The routes are written once, below, and turned into both servers' configurations; before
# measuring, every route's sample path is asked once of tessera-rules, tessera-routes and
# nginx-rules (the route's status, and the same status and Location from all three), and
# /12b.txt must carry the five fields and the file's body wherever the edits are.
# The figures and what they showed: docs/benchmarks.md, "Routing rules".
#
# Each round measures every case once, the order rotating from round to round; a case's
# figure is its server's CPU time per request (utime+stime from /proc around a run of
# SECONDS_PER_RUN, bench/lib.sh `measure`). Prints the medians, the ratios of the medians
# with the median of the per-round ratios, and each case in floors.
#
# With PERF=1, afterwards records `perf record -g` of tessera-plain and tessera-rules
# under the same load (one run each, not counted) and prints each one's share of user and
# kernel time and its top symbols by self time.
#
# usage: bench/policy.sh   (env: ROUNDS=5 SECONDS_PER_RUN=5 CONNECTIONS=100 PERF=)
# Needs: nginx, wrk, curl, taskset, cc, python3 (apt-get installs nginx, wrk, curl and
# taskset when missing), and perf for PERF=1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-5}
CONNECTIONS=${CONNECTIONS:-100}
PERF=${PERF:-}
SERVER_CPU=0
LOAD_CPU=1

source bench/lib.sh
need nginx nginx
need wrk wrk
need curl curl
need taskset util-linux

cargo build --release --locked -q -p tessera
TESSERA=$PWD/target/release/tessera

make_work policy

site=$work/site
mkdir -p "$site"
printf 'hello world\n' > "$site/12b.txt"
FILE=12b.txt

# --- The five response fields, as both servers write them.
fields=(X-Content-Type-Options X-Frame-Options Referrer-Policy Strict-Transport-Security Permissions-Policy)
declare -A field_value=(
    [X-Content-Type-Options]="nosniff"
    [X-Frame-Options]="SAMEORIGIN"
    [Referrer-Policy]="strict-origin-when-cross-origin"
    [Strict-Transport-Security]="max-age=63072000; includeSubDomains"
    [Permissions-Policy]="geolocation=(), microphone=(), camera=()"
)

# --- The 50 routes. route KIND MATCH ACTION STATUS VALUE SAMPLE appends one to both
# configurations: KIND is regex, regex-i (case-insensitive), path (exact), prefix or
# prefix-nr (a prefix that stops regex matching: nginx's ^~); ACTION respond (VALUE the
# body, may be empty) or redirect (VALUE the target); SAMPLE is a request path it takes.
# MATCH and VALUE are written as TOML literal strings and nginx quoted strings, so
# neither may hold a quote.
routes_toml=$work/route-list.toml
routes_nginx=$work/route-list.nginx
routes_root_toml=$work/route-list-root.toml
samples=()
statuses=()
: > "$routes_toml"; : > "$routes_nginx"
route() {
    local kind=$1 match=$2 action=$3 status=$4 value=$5 sample=$6 toml nginx
    case $kind in
        regex) toml="regex = '$match'"; nginx="location ~ \"$match\"" ;;
        regex-i) toml="regex = '$match'"$'\n'"case_insensitive = true"; nginx="location ~* \"$match\"" ;;
        path) toml="path = '$match'"; nginx="location = $match" ;;
        prefix) toml="prefix = '$match'"; nginx="location $match" ;;
        prefix-nr) toml="prefix = '$match'"$'\n'"no_regex = true"; nginx="location ^~ $match" ;;
        *) echo "route: unknown kind $kind" >&2; exit 2 ;;
    esac
    case $action in
        respond)
            if [ -n "$value" ]; then
                toml+=$'\n'"respond = { status = $status, body = '$value' }"
                nginx+=" { return $status \"$value\"; }"
            else
                toml+=$'\n'"respond = { status = $status }"
                nginx+=" { return $status; }"
            fi ;;
        redirect)
            toml+=$'\n'"redirect = { status = $status, to = '$value' }"
            nginx+=" { return $status \"$value\"; }" ;;
        *) echo "route: unknown action $action" >&2; exit 2 ;;
    esac
    printf '[[route]]\n%s\n\n' "$toml" >> "$routes_toml"
    printf '        %s\n' "$nginx" >> "$routes_nginx"
    samples+=("$sample")
    statuses+=("$status")
}

# 10 regexes, in file order (nginx tries them in that order too).
route regex '^/users/([0-9]+)$' redirect 301 '/u/$1' /users/42
route regex '^/blog/([0-9]{4})/([0-9]{2})/([a-z0-9-]+)$' redirect 301 '/posts/$3' /blog/2026/11/edge-rules
route regex '\.(php|asp|aspx|jsp)$' respond 404 '' /index.php
route regex '/\.(git|svn|hg)(/|$)' respond 403 '' /.git/config
route regex '^/wp-(admin|login|content)' respond 404 '' /wp-admin/
route regex '^/api/v[0-9]+/items/([0-9]+)/?$' respond 200 'item $1' /api/v2/items/7
route regex '^/img/([a-z]+)-([0-9]+)x([0-9]+)\.(png|jpg|webp)$' redirect 302 '/images/$1.$4' /img/logo-64x64.png
route regex '^/(en|de|fr|es)/docs/(.*)$' redirect 301 '/docs/$2?lang=$1' /de/docs/config
route regex '^/download/(?<name>[a-z0-9._-]+)\.(zip|tgz)$' redirect 302 'https://downloads.example.com/$name' /download/tessera-1.0.zip
route regex-i '^/feed(\.xml|\.rss)?$' redirect 301 '/blog/feed.xml' /FEED.rss
# 20 exact paths.
route path /healthz respond 200 'ok' /healthz
route path /ping respond 200 'pong' /ping
route path /version respond 200 'tessera-bench 1' /version
route path /status respond 200 'up' /status
route path /favicon.ico respond 204 '' /favicon.ico
route path /robots.txt respond 200 'User-agent: * Disallow: /admin/' /robots.txt
route path /ads.txt respond 404 '' /ads.txt
route path /humans.txt respond 200 'tessera team' /humans.txt
route path /.well-known/security.txt respond 200 'Contact: mailto:security@example.com' /.well-known/security.txt
route path /.well-known/change-password redirect 302 '/account/password' /.well-known/change-password
route path /login redirect 302 '/account/login' /login
route path /logout redirect 302 '/account/logout' /logout
route path /signup redirect 302 '/account/new' /signup
route path /home redirect 301 '/' /home
route path /index.htm redirect 301 '/' /index.htm
route path /sitemap.xml redirect 301 '/static/sitemap.xml' /sitemap.xml
route path /contact redirect 301 '/about/contact' /contact
route path /pricing redirect 301 '/plans' /pricing
route path /support redirect 302 'https://support.example.com/' /support
route path /feedback respond 410 '' /feedback
# 20 prefixes (four of them ^~), none taking /12b.txt.
route prefix-nr /static/ redirect 301 'https://cdn.example.com$request_uri' /static/old.php
route prefix-nr /assets/ redirect 301 'https://cdn.example.com$request_uri' /assets/logo.svg
route prefix-nr /.well-known/acme-challenge/ respond 404 '' /.well-known/acme-challenge/token
route prefix-nr /media/ redirect 302 'https://media.example.com$uri' /media/video.mp4
route prefix /api/ respond 503 'api down' /api/users
route prefix /admin/ respond 403 '' /admin/settings
route prefix /old/ redirect 301 '/new/' /old/page
route prefix /docs/v1/ redirect 301 '/docs/' /docs/v1/config
route prefix /account/ respond 200 'account' /account/login
route prefix /shop/ redirect 302 'https://shop.example.com$request_uri' /shop/cart
route prefix /cart/ redirect 302 '/shop/cart' /cart/items
route prefix /checkout/ redirect 302 '/shop/checkout' /checkout/pay
route prefix /search/ respond 200 'search' /search/q
route prefix /tags/ redirect 301 '/blog/tags/' /tags/rust
route prefix /category/ redirect 301 '/blog/categories/' /category/news
route prefix /author/ redirect 301 '/about/team' /author/jane
route prefix /internal/ respond 404 '' /internal/metrics
route prefix /private/ respond 403 '' /private/keys
route prefix /legacy/ respond 410 '' /legacy/app
route prefix /beta/ redirect 302 '/' /beta/feature
count=$(grep -c '^\[\[route\]\]' "$routes_toml")
[ "$count" = 50 ] || { echo "expected 50 routes, wrote $count" >&2; exit 1; }
# tessera-rules-root: the last prefix route gives way to `prefix = "/"` with the root.
{
    awk -v RS= -v ORS='\n\n' -v n="$count" 'NR < n' "$routes_toml"
    printf '[[route]]\nprefix = "/"\nroot = "%s"\n' "$site"
} > "$routes_root_toml"

headers_toml=""
headers_nginx=""
for f in "${fields[@]}"; do
    headers_toml+="${headers_toml:+, }\"$f\" = \"${field_value[$f]}\""
    headers_nginx+="        add_header $f \"${field_value[$f]}\" always;"$'\n'
done

# --- tessera: one worker each.
cat > "$work/plain.toml" <<CONF
root = "$site"
CONF
{
    echo "root = \"$site\""
    echo "response_headers = { set = { $headers_toml }, always = true }"
    echo
    cat "$routes_toml"
} > "$work/rules.toml"
{
    echo "root = \"$site\""
    echo "response_headers = { set = { $headers_toml }, always = true }"
    echo
    cat "$routes_root_toml"
} > "$work/rules-root.toml"
{
    echo "root = \"$site\""
    echo
    cat "$routes_toml"
} > "$work/routes.toml"
{
    echo "root = \"$site\""
    echo "response_headers = { set = { $headers_toml }, always = true }"
} > "$work/headers.toml"

declare -A pid_of=() port_of=()
for c in plain rules rules-root routes headers; do
    "$TESSERA" check-config --config "$work/$c.toml" >/dev/null
    port=$(free_port)
    taskset -c $SERVER_CPU "$TESSERA" serve --config "$work/$c.toml" --listen "127.0.0.1:$port" \
        --workers 1 2>"$work/tessera-$c.log" &
    pids+=($!); pid_of[tessera-$c]=$!; port_of[tessera-$c]=$port
done

# --- nginx: one process (master_process off), as in bench/peers.sh; absolute_redirect off
# so that its Location is the target as written, as tessera's is.
for c in plain rules; do
    port=$(free_port)
    mkdir -p "$work/nginx-$c"
    cat > "$work/nginx-$c/nginx.conf" <<CONF
$(nginx_head "$work/nginx-$c")
http {
$(nginx_keepalive)
    types { text/plain txt; application/octet-stream bin; }
    default_type text/plain;
    absolute_redirect off;
    client_body_temp_path $work/nginx-$c;
    proxy_temp_path $work/nginx-$c;
    fastcgi_temp_path $work/nginx-$c;
    uwsgi_temp_path $work/nginx-$c;
    scgi_temp_path $work/nginx-$c;
    server {
        listen 127.0.0.1:$port reuseport;
        root $site;
$(if [ $c = rules ]; then printf '%s' "$headers_nginx"; cat "$routes_nginx"; fi)
    }
}
CONF
    nginx -t -q -c "$work/nginx-$c/nginx.conf" -e "$work/nginx-$c/error.log"
    taskset -c $SERVER_CPU nginx -c "$work/nginx-$c/nginx.conf" -e "$work/nginx-$c/error.log" &
    pids+=($!); pid_of[nginx-$c]=$!; port_of[nginx-$c]=$port
done

# --- the floor: a fixed 12-byte response, keep-alive.
cc -O2 -o "$work/floor" bench/floor.c
port=$(free_port)
taskset -c $SERVER_CPU "$work/floor" "$port" 12 &
pids+=($!); pid_of[floor]=$!; port_of[floor]=$port

cases="floor tessera-plain tessera-rules tessera-rules-root tessera-routes tessera-headers nginx-plain nginx-rules"
for c in $cases; do wait_up "${port_of[$c]}" "$FILE"; done

# --- Checks before measuring: the file with its five fields where the edits are, and
# every route answering as written, alike in tessera and nginx.
for c in tessera-rules tessera-rules-root tessera-headers nginx-rules; do
    curl -fsS -D "$work/head-$c" -o "$work/body-$c" "http://127.0.0.1:${port_of[$c]}/$FILE"
    cmp -s "$work/body-$c" "$site/$FILE" || { echo "$c: /$FILE: wrong body" >&2; exit 1; }
    for f in "${fields[@]}"; do
        grep -qiF "$f: ${field_value[$f]}"$'\r' "$work/head-$c" || { echo "$c: /$FILE: no $f: ${field_value[$f]}" >&2; cat "$work/head-$c" >&2; exit 1; }
    done
done
answer() { curl -s -o /dev/null -w '%{http_code} %header{location}' "$1"; }
mismatches=0
for i in "${!samples[@]}"; do
    t=$(answer "http://127.0.0.1:${port_of[tessera-rules]}${samples[$i]}")
    n=$(answer "http://127.0.0.1:${port_of[nginx-rules]}${samples[$i]}")
    r=$(answer "http://127.0.0.1:${port_of[tessera-routes]}${samples[$i]}")
    if [ "${t%% *}" != "${statuses[$i]}" ] || [ "$t" != "$n" ] || [ "$t" != "$r" ]; then
        echo "route for ${samples[$i]} (status ${statuses[$i]}): tessera-rules '$t', tessera-routes '$r', nginx '$n'" >&2
        mismatches=$((mismatches + 1))
    fi
done
[ "$mismatches" = 0 ] || { echo "$mismatches routes answer differently" >&2; exit 1; }

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates Cargo.lock || echo '+changes')
echo "# $(date -u '+%F %H:%M') UTC, tessera $commit, $(nginx -v 2>&1 | sed 's/.*: //'), $(nproc) cores ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)), $(uname -r)"
echo "# /$FILE (12 bytes); servers on core $SERVER_CPU, wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_RUN}s on core $LOAD_CPU; median of $ROUNDS rounds"
echo "# checked: 50 routes answer alike in tessera-rules, tessera-routes and nginx-rules; /$FILE carries the five fields where edits are"

# --- Warm-up (not counted), then the rounds.
for c in $cases; do
    taskset -c $LOAD_CPU wrk -t1 -c"$CONNECTIONS" -d1s "http://127.0.0.1:${port_of[$c]}/$FILE" >/dev/null
done
read -ra order <<< "$cases"
ratio() { awk -v a="${cpu_now[$1]}" -v b="${cpu_now[$2]}" 'BEGIN {printf "%.3f", a / b}'; }
declare -A rps_runs=() cpu_runs=() ratio_runs=()
for round in $(seq "$ROUNDS"); do
    declare -A cpu_now=()
    n=${#order[@]}
    for i in $(seq 0 $((n - 1))); do
        c=${order[$(((i + round) % n))]}
        read -r rps cpu < <(measure "${pid_of[$c]}" "http://127.0.0.1:${port_of[$c]}/$FILE" $LOAD_CPU "$CONNECTIONS" "$SECONDS_PER_RUN")
        rps_runs[$c]+="$rps "; cpu_runs[$c]+="$cpu "; cpu_now[$c]=$cpu
    done
    ratio_runs[rules]+="$(ratio tessera-rules tessera-plain) "
    ratio_runs[rules-root]+="$(ratio tessera-rules-root tessera-plain) "
    ratio_runs[routes]+="$(ratio tessera-routes tessera-plain) "
    ratio_runs[headers]+="$(ratio tessera-headers tessera-plain) "
    ratio_runs[nginx]+="$(ratio nginx-rules tessera-rules) "
    ratio_runs[nginx-plain]+="$(ratio nginx-rules nginx-plain) "
    unset cpu_now
done

med() { echo "$1" | tr ' ' '\n' | grep . | median; }
declare -A cpu_med=()
printf '%-20s %12s %12s\n' case "requests/s" "cpu us/req"
for c in $cases; do
    cpu_med[$c]=$(med "${cpu_runs[$c]}")
    printf '%-20s %12.0f %12.2f   (cpu runs: %s)\n' "$c" "$(med "${rps_runs[$c]}")" "${cpu_med[$c]}" "${cpu_runs[$c]% }"
done
report() { # LABEL A B ROUND_RATIOS TARGET
    awk -v l="$1" -v a="${cpu_med[$2]}" -v b="${cpu_med[$3]}" -v r="$(med "$4")" -v runs="${4% }" -v t="$5" \
        'BEGIN { printf "%-34s x%.3f (per round: median x%.3f; %s)%s\n", l, a / b, r, runs, t }'
}
verdict() { # VALUE LIMIT le|ge
    awk -v v="$1" -v l="$2" -v how="$3" 'BEGIN { ok = (how == "le") ? v <= l : v >= l; print (ok ? "met" : "MISSED") }'
}
r=$(awk -v a="${cpu_med[tessera-rules]}" -v b="${cpu_med[tessera-plain]}" 'BEGIN {print a / b}')
report "tessera-rules/tessera-plain" tessera-rules tessera-plain "${ratio_runs[rules]}" \
    "   target <= 1.05: $(verdict "$r" 1.05 le)"
report "tessera-rules-root/tessera-plain" tessera-rules-root tessera-plain "${ratio_runs[rules-root]}" ""
report "tessera-routes/tessera-plain" tessera-routes tessera-plain "${ratio_runs[routes]}" ""
report "tessera-headers/tessera-plain" tessera-headers tessera-plain "${ratio_runs[headers]}" ""
r=$(awk -v a="${cpu_med[nginx-rules]}" -v b="${cpu_med[tessera-rules]}" 'BEGIN {print a / b}')
report "nginx-rules/tessera-rules" nginx-rules tessera-rules "${ratio_runs[nginx]}" \
    "   target >= 1.5: $(verdict "$r" 1.5 ge)"
report "nginx-rules/nginx-plain" nginx-rules nginx-plain "${ratio_runs[nginx-plain]}" ""
line="in floors (${cpu_med[floor]} us):"
for c in $cases; do
    [ "$c" = floor ] && continue
    line+=" $c $(awk -v a="${cpu_med[$c]}" -v f="${cpu_med[floor]}" 'BEGIN {printf "%.2f", a / f}'),"
done
echo "${line%,}"
awk -v t="${cpu_med[tessera-rules]}" -v p="${cpu_med[tessera-plain]}" -v n="${cpu_med[nginx-rules]}" -v f="${cpu_med[floor]}" \
    'BEGIN { printf "above the floor: tessera-plain %.2f us, tessera-rules %.2f us (rules add %.2f us), nginx-rules %.2f us\n", p - f, t - f, t - p, n - f }'

# --- Where the time goes (PERF=1): one more run each of tessera-plain and tessera-rules
# under perf, its samples by symbol (self time).
if [ -n "$PERF" ]; then
    for c in tessera-plain tessera-rules; do
        taskset -c $LOAD_CPU perf record -q -g -o "$work/perf-$c.data" -p "${pid_of[$c]}" -- sleep "$SECONDS_PER_RUN" 2>/dev/null &
        perf_pid=$!
        sleep 0.2
        taskset -c $LOAD_CPU wrk -t1 -c"$CONNECTIONS" -d"$((SECONDS_PER_RUN - 1))s" "http://127.0.0.1:${port_of[$c]}/$FILE" >/dev/null
        wait "$perf_pid" || true
        echo
        echo "# perf: $c, top symbols by self time (perf record -g, $SECONDS_PER_RUN s; [k] kernel, [.] user)"
        perf report -i "$work/perf-$c.data" --no-children -F overhead,sym -g none --stdio 2>/dev/null \
            | grep -v '^#' | grep . > "$work/perf-$c.txt" || true
        awk '$2 == "[.]" {u += $1} $2 == "[k]" {k += $1} END {printf "user %.1f%%, kernel %.1f%%\n", u, k}' "$work/perf-$c.txt"
        awk 'NR <= 12' "$work/perf-$c.txt"
        echo "  user-space symbols:"
        awk '$2 == "[.]" && n++ < 20' "$work/perf-$c.txt"
    done
fi
