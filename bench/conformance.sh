#!/usr/bin/env bash
# HTTP semantics of static files: tessera against nginx, request by request.
#
# Both servers serve the same directory (same files, same mtimes) with the equivalent
# configuration: precompressed .gz siblings (nginx's gzip_static, gzip_vary), utf-8
# charset on text types, Cache-Control on /assets/, no directory listing. Each request
# below goes to both; the script prints, side by side, the status and the headers that
# matter (entity tags are compared by presence: each server derives its own), and whether
# the bodies are identical. Conditional requests use each server's own validators.
# Every difference is listed at the end; docs/http.md explains each one.
#
# usage: bench/conformance.sh            (needs nginx and curl; installs them with apt)
set -euo pipefail
cd "$(dirname "$0")/.."

source bench/lib.sh
need nginx nginx
need curl curl

cargo build --locked -q -p tessera
TESSERA=$PWD/target/debug/tessera

make_work conformance

# --- the site: every file has the same mtime, so Last-Modified must agree exactly.
site=$work/site
mkdir -p "$site/docs" "$site/dir" "$site/assets"
printf 'hello world\n' > "$site/hello.txt"
printf '<p>page</p>\n' > "$site/page.html"
gzip -9 -n -c "$site/page.html" > "$site/page.html.gz"
printf '<h1>docs</h1>\n' > "$site/docs/index.html"
printf 'body{}\n' > "$site/style.css"
printf 'app();\n' > "$site/assets/app.js"
printf 'a\n' > "$site/dir/a.txt"
: > "$site/empty.txt"
head -c 100000 /dev/urandom > "$site/big.bin"
find "$site" -exec touch -h -d '2024-01-02 03:04:05 UTC' {} +


nginx_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
worker_processes 1;
master_process off;
daemon off;
error_log $work/nginx/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections 64; }
http {
    access_log off;
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    charset utf-8;
    charset_types text/plain text/css text/javascript;
    sendfile on;
    gzip_static on;
    gzip_vary on;
    client_body_temp_path $work/nginx;
    proxy_temp_path $work/nginx;
    fastcgi_temp_path $work/nginx;
    uwsgi_temp_path $work/nginx;
    scgi_temp_path $work/nginx;
    server {
        listen 127.0.0.1:$nginx_port;
        root $site;
        # text/javascript (RFC 9239), as tessera says; nginx 1.22's mime.types still has
        # application/javascript.
        location /assets/ {
            types { text/javascript js; }
            add_header Cache-Control "public, max-age=31536000, immutable";
        }
    }
}
CONF
nginx -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
pids+=($!)

tessera_port=$(free_port)
cat > "$work/tessera.toml" <<CONF
[[cache_control]]
prefix = "/assets/"
value = "public, max-age=31536000, immutable"
CONF
"$TESSERA" serve --root "$site" --listen "127.0.0.1:$tessera_port" --workers 1 \
    --config "$work/tessera.toml" 2>"$work/tessera.log" &
pids+=($!)

wait_up "$nginx_port" hello.txt; wait_up "$tessera_port" hello.txt

# name | method | target | request headers (separated by ";;")
# @ETAG@ and @LM@ become the server's own ETag and Last-Modified for the target, as a
# GET with the same Accept-Encoding returns them.
CASES=$(cat <<'EOF'
plain GET|GET|/hello.txt|
HEAD|HEAD|/hello.txt|
html type and charset|GET|/docs/|
css type and charset|GET|/style.css|
If-None-Match current|GET|/hello.txt|If-None-Match: @ETAG@
If-None-Match other|GET|/hello.txt|If-None-Match: "nope"
If-None-Match *|GET|/hello.txt|If-None-Match: *
If-None-Match weak|GET|/hello.txt|If-None-Match: W/@ETAG@
If-Modified-Since equal|GET|/hello.txt|If-Modified-Since: @LM@
If-Modified-Since older|GET|/hello.txt|If-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT
If-Modified-Since newer|GET|/hello.txt|If-Modified-Since: Wed, 03 Jan 2024 00:00:00 GMT
INM other beats IMS|GET|/hello.txt|If-None-Match: "nope";;If-Modified-Since: @LM@
If-Match current|GET|/hello.txt|If-Match: @ETAG@
If-Match other|GET|/hello.txt|If-Match: "nope"
If-Match *|GET|/hello.txt|If-Match: *
If-Unmodified-Since older|GET|/hello.txt|If-Unmodified-Since: Mon, 01 Jan 2024 00:00:00 GMT
If-Unmodified-Since equal|GET|/hello.txt|If-Unmodified-Since: @LM@
If-Match fails before INM|GET|/hello.txt|If-Match: "nope";;If-None-Match: @ETAG@
range 0-4|GET|/hello.txt|Range: bytes=0-4
range 6-|GET|/hello.txt|Range: bytes=6-
range -3|GET|/hello.txt|Range: bytes=-3
range past end|GET|/hello.txt|Range: bytes=0-999
range big file offset|GET|/big.bin|Range: bytes=70000-70099
range unsatisfiable|GET|/hello.txt|Range: bytes=12-
range -0|GET|/hello.txt|Range: bytes=-0
range empty file|GET|/empty.txt|Range: bytes=0-0
range last<first|GET|/hello.txt|Range: bytes=5-1
range other unit|GET|/hello.txt|Range: items=0-1
range garbage|GET|/hello.txt|Range: bytes=a-b
two ranges|GET|/hello.txt|Range: bytes=0-1,4-5
overlapping ranges|GET|/hello.txt|Range: bytes=3-8,0-5
If-Range current etag|GET|/hello.txt|Range: bytes=0-4;;If-Range: @ETAG@
If-Range old etag|GET|/hello.txt|Range: bytes=0-4;;If-Range: "old"
If-Range date|GET|/hello.txt|Range: bytes=0-4;;If-Range: @LM@
HEAD with Range|HEAD|/hello.txt|Range: bytes=0-4
gzip sibling|GET|/page.html|Accept-Encoding: gzip
gzip refused q=0|GET|/page.html|Accept-Encoding: gzip;q=0
no Accept-Encoding|GET|/page.html|
gzip sibling range|GET|/page.html|Accept-Encoding: gzip;;Range: bytes=0-3
gzip sibling INM|GET|/page.html|Accept-Encoding: gzip;;If-None-Match: @ETAG@
OPTIONS *|OPTIONS|*|
OPTIONS path|OPTIONS|/hello.txt|
OPTIONS missing|OPTIONS|/missing.txt|
TRACE|TRACE|/hello.txt|
DELETE|DELETE|/hello.txt|
POST|POST|/hello.txt|
unknown method|PURGE|/hello.txt|
directory without slash|GET|/docs|
directory without index|GET|/dir/|
missing|GET|/missing.txt|
Cache-Control prefix|GET|/assets/app.js|
Cache-Control on 304|GET|/assets/app.js|If-Modified-Since: @LM@
EOF
)

HEADERS="content-type content-length content-range content-encoding vary accept-ranges allow location cache-control last-modified etag"

# request PORT METHOD TARGET HEADERS... -> writes $work/out.head and $work/out.body
request() {
    local port=$1 method=$2 target=$3; shift 3
    local args=(-s --http1.1 -o "$work/out.body" -D "$work/out.head" --max-time 5)
    local h
    for h in "$@"; do args+=(-H "$h"); done
    if [ "$method" = HEAD ]; then
        args+=(--head)
    else
        args+=(-X "$method")
    fi
    if [ "$target" = "*" ]; then
        args+=(--request-target '*' "http://127.0.0.1:$port/")
    else
        args+=("http://127.0.0.1:$port$target")
    fi
    : > "$work/out.body"
    curl "${args[@]}" || true
}

header_of() { { grep -i "^$1:" "$work/out.head" || true; } | head -1 | cut -d: -f2- | sed 's/^ *//; s/\r$//'; }

# The normalised view of a response to METHOD: status, headers that matter, body digest.
# Entity tags are each server's own, multipart boundaries are random, and error pages are
# each server's own HTML: those are shown as present, not compared by value.
view() {
    local method=$1 status name value
    status=$(head -1 "$work/out.head" | awk '{print $2}')
    echo "status: $status"
    for name in $HEADERS; do
        value=$(header_of "$name")
        case $name in
            etag) [ -n "$value" ] && value="(present)" ;;
            content-type) value=$(echo "$value" | sed 's/boundary=.*/boundary=(generated)/') ;;
            content-length)
                if [ -n "$value" ] && [ "${status:-0}" -ge 300 ]; then value="(error page)"; fi
                if [ "$(header_of content-type | cut -d';' -f1)" = multipart/byteranges ]; then
                    value="(depends on the boundary)"
                fi ;;
        esac
        [ -n "$value" ] && echo "$name: $value"
    done
    if [ "$method" != HEAD ] && [ "${status:-0}" -lt 300 ] \
        && [ "$(header_of content-type | cut -d';' -f1)" != multipart/byteranges ]; then
        echo "body: $(wc -c < "$work/out.body") bytes, md5 $(md5sum < "$work/out.body" | cut -c1-12)"
    fi
}

differences=0
same=0
printf '%-28s | %-44s | %-44s\n' "case" "nginx $(nginx -v 2>&1 | cut -d/ -f2)" "tessera"
printf '%s\n' "$(printf '%.0s-' $(seq 122))"
while IFS='|' read -r name method target headers; do
    [ -z "$name" ] && continue
    for server in nginx tessera; do
        port=$nginx_port; [ $server = tessera ] && port=$tessera_port
        IFS=$'\n' read -r -d '' -a hdrs < <(echo "$headers" | sed 's/;;/\n/g' | grep . ; printf '\0') || true
        if echo "$headers" | grep -q '@ETAG@\|@LM@'; then
            ae=()
            for h in "${hdrs[@]}"; do case $h in Accept-Encoding:*) ae+=("$h") ;; esac; done
            request "$port" GET "$target" "${ae[@]}"
            etag=$(header_of etag); lm=$(header_of last-modified)
            for i in "${!hdrs[@]}"; do
                hdrs[i]=${hdrs[i]//@ETAG@/$etag}
                hdrs[i]=${hdrs[i]//@LM@/$lm}
            done
        fi
        request "$port" "$method" "$target" "${hdrs[@]}"
        view "$method" > "$work/$server.view"
    done
    if cmp -s "$work/nginx.view" "$work/tessera.view"; then
        same=$((same + 1))
        printf '%-28s | %-44s | %-44s\n' "$name" "$(head -1 "$work/nginx.view")" "same"
    else
        differences=$((differences + 1))
        # Aligned by field: a field only one server sends shows as "-" on the other side.
        awk -v n="$name" -v order="status $HEADERS body" '
            FNR == NR { k = substr($0, 1, index($0, ":") - 1); a[k] = $0; next }
            { k = substr($0, 1, index($0, ":") - 1); b[k] = $0 }
            END {
                split(order, keys, " "); label = n
                for (i = 1; i in keys; i++) {
                    k = keys[i]
                    if (!(k in a) && !(k in b)) continue
                    x = (k in a) ? a[k] : "-"; y = (k in b) ? b[k] : "-"
                    printf "%-28s | %-44s | %-44s%s\n", label, x, y, (x == y ? "" : "  <>")
                    label = ""
                }
            }' "$work/nginx.view" "$work/tessera.view"
    fi
done <<< "$CASES"
printf '%s\n' "$(printf '%.0s-' $(seq 122))"
echo "$same cases identical, $differences differ (each difference is explained in docs/http.md)"
